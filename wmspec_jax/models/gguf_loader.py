"""Llama-architecture GGUF files (llama.cpp) -> (config, params, tokenizer).

Quantised tensors (Q4_1, Q8_0, ...) are dequantised to float with
``gguf.quants.dequantize``. llama.cpp's ``convert_hf_to_gguf.py`` permutes the
rows of ``q_proj`` / ``k_proj`` from Hugging Face's ``rotate_half`` RoPE
layout (first half / second half of each head) into GGML's interleaved
layout (even / odd); :func:`unpermute_rope_rows` undoes that so the weights
work with the HF-style RoPE in :mod:`wmspec_jax.models.transformer`.

Dequantising takes seconds on a small CPU, so :func:`load_gguf_model` keeps
the converted float32 weights (and the config) in ``weights/`` of
:mod:`wmspec_jax.user_cache`: one file per GGUF file, keyed by its size,
modification time and the hash of its first MiB (where its metadata lies), by
this module's and the GGUF reader's source and by the ``gguf`` version. A later
process maps that file and hands its arrays to JAX without copying them
(tenths of a second instead of seconds); the values are the dequantised
ones, bit for bit. A damaged or foreign file is rebuilt: another GGUF file's
(the entry names the file's SHA-256 where the caller knows it, as for the
packaged built-in), or one that breaks the user cache's ownership rule
(another user's, writable by others, a link); deleting the directory is
always safe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import struct
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.models.config import TransformerConfig, UnsupportedModelError
from wmspec_jax.models.gguf_file import GGUFFile
from wmspec_jax.models.hf import LLAMA_LAYER_TENSORS, CheckpointError
from wmspec_jax.models.transformer import check_params, layer_shapes

# GGUF tensor name inside block i -> (our name, transpose from [out, in])
_BLOCK_MAP = {gguf_name: (ours, ours.startswith("w")) for ours, _, gguf_name in LLAMA_LAYER_TENSORS}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute`` for a [n_head * Dh, in] q/k matrix.

    llama.cpp reshapes rows to (n_head, 2, Dh/2) and swaps the last two axes
    (half-split -> interleaved); we reshape to (n_head, Dh/2, 2) and swap back.
    """
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def config_from_gguf(reader: GGUFFile) -> TransformerConfig:
    """Reads the llama.* metadata into a TransformerConfig."""
    arch = reader.field("general.architecture")
    if arch != "llama":
        raise UnsupportedModelError(f"GGUF architecture {arch!r} is not supported (llama only)")
    hidden = int(reader.field("llama.embedding_length"))
    heads = int(reader.field("llama.attention.head_count"))
    head_dim = int(reader.field("llama.rope.dimension_count", hidden // heads))
    if head_dim != hidden // heads:
        raise UnsupportedModelError("partial rotary embeddings are not supported")
    names = {t.name for t in reader.tensors}
    return TransformerConfig(
        family="llama",
        vocab_size=len(reader.field("tokenizer.ggml.tokens")),
        hidden_size=hidden,
        intermediate_size=int(reader.field("llama.feed_forward_length")),
        num_layers=int(reader.field("llama.block_count")),
        num_heads=heads,
        num_kv_heads=int(reader.field("llama.attention.head_count_kv", heads)),
        head_dim=head_dim,
        rope_theta=float(reader.field("llama.rope.freq_base", 10000.0)),
        rms_norm_eps=float(reader.field("llama.attention.layer_norm_rms_epsilon")),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=int(reader.field("tokenizer.ggml.bos_token_id", -1)),
        eos_token_id=int(reader.field("tokenizer.ggml.eos_token_id", -1)),
        max_position_embeddings=int(reader.field("llama.context_length", 0)) or None,
    )


def params_from_gguf(reader: GGUFFile, config: TransformerConfig, dtype=jnp.float32) -> dict:
    """Dequantises every tensor into a params pytree of ``dtype``."""
    host = host_params_from_gguf(reader, config)
    return _to_device(host, dtype)


def host_params_from_gguf(reader: GGUFFile, config: TransformerConfig) -> dict:
    """The params pytree as contiguous float32 numpy arrays (dequantised, q/k rows un-permuted,
    matrices in our [in, out] layout)."""
    from gguf.quants import dequantize

    one_layer = layer_shapes(config)
    layers: list[dict] = [{} for _ in range(config.num_layers)]
    params: dict = {}
    seen = set()
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type)  # float32, [out, in] like torch Linear
        m = _BLOCK_RE.match(t.name)
        if m and m.group(2) in _BLOCK_MAP:
            layer, (key, transpose) = int(m.group(1)), _BLOCK_MAP[m.group(2)]
            if key == "wq":
                w = unpermute_rope_rows(w, config.num_heads)
            elif key == "wk":
                w = unpermute_rope_rows(w, config.num_kv_heads)
            w = w.T if transpose else w
            if w.shape != one_layer[key]:
                raise CheckpointError(f"GGUF tensor {t.name} has shape {w.shape}")
            layers[layer][key] = _host(w)
        elif t.name == "token_embd.weight":
            params["embed"] = _host(w)
        elif t.name == "output_norm.weight":
            params["final_norm"] = _host(w)
        elif t.name == "output.weight":
            params["lm_head"] = _host(w.T)
        elif not t.name.endswith("rope_freqs.weight"):
            raise CheckpointError(f"unexpected GGUF tensor {t.name!r}")
        seen.add(t.name)
    expected = {f"blk.{i}.{n}" for i in range(config.num_layers) for n in _BLOCK_MAP}
    expected |= {"token_embd.weight", "output_norm.weight"}
    missing = sorted(expected - seen)
    if missing:
        raise CheckpointError(f"GGUF file is missing tensors: {missing[:8]}")
    params["layers"] = [{k: lp[k] for k in one_layer} for lp in layers]
    return params


def _host(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w, dtype=np.float32)


def _to_device(host: dict, dtype) -> dict:
    """JAX arrays of ``dtype`` from float32 numpy leaves. float32 leaves that are read-only maps of
    a cache file become JAX arrays without a copy (JAX keeps the map alive)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        return jax.tree_util.tree_map(jax.device_put, host)
    return jax.tree_util.tree_map(lambda w: jnp.asarray(w, dtype), host)


# ---------------------------------------------------------------------------
# The converted-weights cache
# ---------------------------------------------------------------------------

CACHE_PART = "weights"
_CACHE_MAGIC = b"WMSPARAM"
_CACHE_FORMAT = "wmspec-gguf-params-v1"
_ALIGN = 64  # every array starts on a 64-byte boundary (JAX's CPU client maps aligned arrays as they are)
_HEADER_BYTES = 1 << 20  # the start of a GGUF file hashed into the key (its metadata)


def load_gguf_model(path: str, dtype=jnp.float32, *, reader: Callable[[], GGUFFile] | None = None,
                    name: str = "gguf", source_sha256: str | None = None) -> tuple[TransformerConfig, dict]:
    """(config, params of ``dtype``) of the GGUF file ``path``, through the weights cache (module doc).

    ``reader``: returns the parsed file (default :func:`wmspec_jax.models.gguf_file.read_gguf`); it is
    called only when the cache has no usable entry. ``name`` starts the cache file's name. With the
    cache off (``WMSPEC_CACHE_DIR=""``) or not writable the weights are converted every time.
    ``source_sha256``: the SHA-256 (hex) of the whole GGUF file where it is known (a packaged file):
    it keys the entry and is stored in it, and an entry that names another is never used. An entry
    that breaks the cache's ownership rule (:func:`wmspec_jax.user_cache.trusted`) is never read.
    """
    from wmspec_jax import user_cache

    def parse() -> GGUFFile:
        if reader is not None:
            return reader()
        from wmspec_jax.models.gguf_file import read_gguf

        return read_gguf(path)

    cache = user_cache.directory(CACHE_PART)
    entry = None if cache is None else os.path.join(cache, f"{name}-{_cache_key(path, source_sha256)}.params")
    if entry is not None and user_cache.trusted(entry):
        found = _read_entry(entry, source_sha256)
        if found is not None:
            return found[0], _to_device(found[1], dtype)
    gguf = parse()
    config = config_from_gguf(gguf)
    host = host_params_from_gguf(gguf, config)
    if entry is not None:
        try:
            _write_entry(entry, config, host, source_sha256)
        except OSError:  # a full or read-only disk: the converted weights serve this process only
            pass
        else:
            _remove_stale_entries(entry, name)
            found = _read_entry(entry, source_sha256) if user_cache.trusted(entry) else None
            if found is not None:  # the mapped copy: the dequantised arrays are freed
                return found[0], _to_device(found[1], dtype)
    return config, _to_device(host, dtype)


def _remove_stale_entries(entry: str, name: str) -> None:
    """Deletes the other entries of ``name`` (an older GGUF file or converter): one file of ~0.5 GB per
    model stays in the cache, not one per version. A process still mapping one keeps its pages."""
    directory = os.path.dirname(entry)
    for other in os.listdir(directory):
        if other.startswith(f"{name}-") and other.endswith(".params") and other != os.path.basename(entry):
            try:
                os.unlink(os.path.join(directory, other))
            except OSError:
                pass


def _cache_key(path: str, source_sha256: str | None = None) -> str:
    """Hex key of a GGUF file (its SHA-256 where known) and of the code that converts it."""
    from importlib import metadata

    from wmspec_jax.models import gguf_file

    st = os.stat(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_HEADER_BYTES))
    for module_file in (__file__, gguf_file.__file__):
        with open(module_file, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    try:
        gguf_version = metadata.version("gguf")
    except metadata.PackageNotFoundError:
        gguf_version = "?"
    h.update(f"|{st.st_size}|{st.st_mtime_ns}|{gguf_version}|{_CACHE_FORMAT}|{source_sha256}".encode())
    return h.hexdigest()[:24]


def _leaves(host: dict) -> list:
    """(name, array) of every leaf of a params pytree, in a fixed order."""
    out = [(k, host[k]) for k in sorted(host) if k != "layers"]
    for i, layer in enumerate(host["layers"]):
        out += [(f"layers/{i}/{k}", layer[k]) for k in sorted(layer)]
    return out


def _config_json(config: TransformerConfig) -> dict:
    return dataclasses.asdict(config)


def _config_from_json(fields: dict) -> TransformerConfig:
    fields = dict(fields)
    if fields.get("rope_scaling") is not None:
        fields["rope_scaling"] = tuple(tuple(p) for p in fields["rope_scaling"])
    if fields.get("layer_types") is not None:
        fields["layer_types"] = tuple(fields["layer_types"])
    return TransformerConfig(**fields)


def _write_entry(entry: str, config: TransformerConfig, host: dict, source_sha256: str | None = None) -> None:
    """Writes the cache file atomically: magic, header length, JSON header, then the arrays."""
    from wmspec_jax import storage

    leaves, offset = [], 0
    for key, w in _leaves(host):
        leaves.append({"name": key, "shape": list(w.shape), "offset": offset})
        offset += -(-w.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"format": _CACHE_FORMAT, "config": _config_json(config), "leaves": leaves,
                         "data_bytes": offset, "source_sha256": source_sha256}).encode()
    start = -(-(len(_CACHE_MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN

    def write(f) -> None:
        if hasattr(os, "fchmod"):  # owner-only whatever the umask: the cache reads no writable file
            os.fchmod(f.fileno(), 0o600)
        f.write(_CACHE_MAGIC + struct.pack("<Q", len(header)) + header)
        f.write(b"\0" * (start - len(_CACHE_MAGIC) - 8 - len(header)))
        for _, w in _leaves(host):
            f.write(memoryview(np.ascontiguousarray(w, np.float32)).cast("B"))
            f.write(b"\0" * (-w.nbytes % _ALIGN))

    storage.atomic_write(entry, write)


def _read_entry(entry: str, source_sha256: str | None = None):
    """(config, float32 params mapped read-only from ``entry``), or None when it is missing, not a
    whole, matching cache file, or made from another GGUF file than ``source_sha256`` (when given)."""
    try:
        with open(entry, "rb") as f:
            lead = f.read(len(_CACHE_MAGIC) + 8)
            if len(lead) != len(_CACHE_MAGIC) + 8 or lead[:len(_CACHE_MAGIC)] != _CACHE_MAGIC:
                return None
            (n,) = struct.unpack("<Q", lead[len(_CACHE_MAGIC):])
            if n > os.fstat(f.fileno()).st_size:
                return None
            header = json.loads(f.read(n).decode())
        if header.get("format") != _CACHE_FORMAT:
            return None
        if source_sha256 is not None and header.get("source_sha256") != source_sha256:
            return None
        config = _config_from_json(header["config"])
        start = -(-(len(_CACHE_MAGIC) + 8 + n) // _ALIGN) * _ALIGN
        mm = np.memmap(entry, dtype=np.uint8, mode="r")
        if mm.size != start + int(header["data_bytes"]):
            return None
        params: dict = {"layers": [{} for _ in range(config.num_layers)]}
        for leaf in header["leaves"]:
            shape = tuple(int(d) for d in leaf["shape"])
            w = np.frombuffer(mm, np.float32, int(np.prod(shape, dtype=np.int64)),
                              start + int(leaf["offset"])).reshape(shape)
            parts = leaf["name"].split("/")
            if parts[0] == "layers":
                params["layers"][int(parts[1])][parts[2]] = w
            else:
                params[parts[0]] = w
        check_params(config, params)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    return config, params


__all__ = ["CACHE_PART", "config_from_gguf", "host_params_from_gguf", "load_gguf_model", "params_from_gguf",
           "unpermute_rope_rows"]
