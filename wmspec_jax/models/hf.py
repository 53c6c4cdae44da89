"""Hugging Face checkpoints from a local directory -> (config, params, tokenizer).

Only local files are read (``local_files_only=True``); nothing is downloaded.
Weights are streamed one tensor at a time from ``*.safetensors`` (single file
or sharded through ``model.safetensors.index.json``), cast to the requested
dtype and copied into per-parameter stacked buffers, so converting a large
checkpoint holds one converted copy plus one tensor, never two full copies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.lm import LanguageModel
from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig, config_from_hf

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")

# HF tensor name inside a layer -> (our name, transpose?)
_LAYER_MAP = {
    "input_layernorm.weight": ("attn_norm", False),
    "self_attn.q_proj.weight": ("wq", True),
    "self_attn.k_proj.weight": ("wk", True),
    "self_attn.v_proj.weight": ("wv", True),
    "self_attn.o_proj.weight": ("wo", True),
    "post_attention_layernorm.weight": ("mlp_norm", False),
    "mlp.gate_proj.weight": ("w_gate", True),
    "mlp.up_proj.weight": ("w_up", True),
    "mlp.down_proj.weight": ("w_down", True),
}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


class CheckpointError(ValueError):
    """A checkpoint directory is missing files or holds unexpected tensors."""


class IncompatibleModelsError(ValueError):
    """A draft and a target cannot be paired for speculative sampling."""


@dataclasses.dataclass(frozen=True, eq=False)
class Checkpoint:
    """A loaded model: static config, params pytree and (optional) tokenizer."""

    name: str
    config: TransformerConfig
    params: Any
    tokenizer: Any = None

    @property
    def dtype(self):
        return self.params["embed"].dtype

    def language_model(self) -> LanguageModel:
        """The :class:`~wmspec_jax.lm.LanguageModel` for this checkpoint."""
        return protocol.make_language_model(self.config, name=self.name, dtype=self.dtype)


def read_config(path: str | os.PathLike) -> TransformerConfig:
    """Parses ``path/config.json``; raises CheckpointError if it is missing."""
    cfg_file = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    if not os.path.isfile(cfg_file):
        raise CheckpointError(f"missing config.json in checkpoint directory {str(path)!r}")
    with open(cfg_file, encoding="utf-8") as f:
        return config_from_hf(json.load(f))


def _weight_files(path: str) -> dict[str, list[str]]:
    """Maps each safetensors file to the tensor names it holds."""
    index = os.path.join(path, _INDEX)
    single = os.path.join(path, _SINGLE)
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        files: dict[str, list[str]] = {}
        for tensor_name, file_name in weight_map.items():
            files.setdefault(file_name, []).append(tensor_name)
        missing = [fn for fn in files if not os.path.isfile(os.path.join(path, fn))]
        if missing:
            raise CheckpointError(
                f"{_INDEX} in {path!r} lists shard files that are missing: {sorted(missing)}")
        return {os.path.join(path, fn): names for fn, names in files.items()}
    if os.path.isfile(single):
        return {single: None}
    others = [f for f in os.listdir(path) if f.endswith((".bin", ".pt", ".pth", ".gguf"))]
    hint = f" (found {others}: only safetensors are supported)" if others else ""
    raise CheckpointError(
        f"missing weights in {path!r}: expected {_SINGLE} or {_INDEX}{hint}")


def _iter_tensors(path: str):
    """Yields (name, jax array) one tensor at a time across all shards."""
    from safetensors import safe_open  # local: only needed when loading

    for file_name, names in _weight_files(path).items():
        # The "flax" framework reads bfloat16, which the numpy one cannot.
        with safe_open(file_name, framework="flax") as f:
            for name in (names if names is not None else f.keys()):
                yield name, f.get_tensor(name)


def load_params(path: str | os.PathLike, config: TransformerConfig,
                dtype=jnp.float32) -> dict:
    """Streams the safetensors weights of ``path`` into a params pytree of ``dtype``."""
    path = os.fspath(path)
    shapes = transformer.param_shapes(config)
    np_dtype = np.dtype(dtype)
    buffers = {k: np.empty(s, np_dtype) for k, s in shapes["layers"].items()}
    filled = {k: np.zeros(config.num_layers, bool) for k in buffers}
    params: dict[str, Any] = {}
    unexpected = []

    def put(name, value, expected):
        if tuple(value.shape) != tuple(expected):
            raise CheckpointError(
                f"tensor {name} has shape {tuple(value.shape)}, expected {tuple(expected)}")

    for name, tensor in _iter_tensors(path):
        m = _LAYER_RE.match(name)
        if m and m.group(2) in _LAYER_MAP:
            layer = int(m.group(1))
            key, transpose = _LAYER_MAP[m.group(2)]
            if layer >= config.num_layers:
                raise CheckpointError(f"tensor {name} is beyond num_hidden_layers={config.num_layers}")
            value = tensor.T if transpose else tensor
            put(name, value, shapes["layers"][key][1:])
            buffers[key][layer] = np.asarray(value.astype(dtype))
            filled[key][layer] = True
        elif m and m.group(2).endswith("rotary_emb.inv_freq"):
            continue  # recomputed from the config
        elif name == "model.embed_tokens.weight":
            put(name, tensor, shapes["embed"])
            params["embed"] = jnp.asarray(tensor, dtype)
        elif name == "model.norm.weight":
            put(name, tensor, shapes["final_norm"])
            params["final_norm"] = jnp.asarray(tensor, dtype)
        elif name == "lm_head.weight":
            if not config.tie_word_embeddings:
                put(name, tensor.T, shapes["lm_head"])
                params["lm_head"] = jnp.asarray(tensor.T, dtype)
        else:
            unexpected.append(name)
        del tensor
    if unexpected:
        raise CheckpointError(
            f"unexpected tensors in {path!r} (unsupported architecture variant?): "
            f"{sorted(unexpected)[:8]}")
    missing = [f"model.layers.{i}.{hf}" for hf, (key, _) in _LAYER_MAP.items()
               for i in np.flatnonzero(~filled[key])]
    for key, hf_name in (("embed", "model.embed_tokens.weight"),
                         ("final_norm", "model.norm.weight"), ("lm_head", "lm_head.weight")):
        if key in shapes and key not in params:
            missing.append(hf_name)
    if missing:
        raise CheckpointError(f"checkpoint {path!r} is missing tensors: {missing[:8]}"
                              + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    layers = {}
    for key in list(buffers):
        layers[key] = jnp.asarray(buffers.pop(key))  # free each buffer as soon as it is on device
    params["layers"] = layers
    return params


def load_tokenizer(path: str | os.PathLike):
    """``transformers.AutoTokenizer`` from local files only."""
    path = os.fspath(path)
    if not any(os.path.isfile(os.path.join(path, f)) for f in _TOKENIZER_FILES):
        raise CheckpointError(
            f"missing tokenizer in {path!r}: expected one of {list(_TOKENIZER_FILES)}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_checkpoint(path: str | os.PathLike, dtype=jnp.float32, *,
                    tokenizer: bool = True, name: str | None = None) -> Checkpoint:
    """Loads ``config.json`` + safetensors (+ tokenizer) from a local directory.

    Args:
      path: directory written by ``save_pretrained`` (or downloaded by hand).
      dtype: params dtype, e.g. ``jnp.bfloat16`` for large models.
      tokenizer: also load the tokenizer (fails if its files are missing).

    Raises:
      CheckpointError: missing directory, config, weights or tokenizer files.
      UnsupportedModelError: the architecture is not Llama or Gemma v1.
    """
    path = os.fspath(path)
    config = read_config(path)
    params = load_params(path, config, dtype)
    tok = load_tokenizer(path) if tokenizer else None
    return Checkpoint(name=name or os.path.basename(os.path.normpath(path)),
                      config=config, params=params, tokenizer=tok)


def _vocab(tokenizer) -> dict | None:
    if tokenizer is None:
        return None
    return tokenizer.get_vocab()


def check_compatible(draft: Checkpoint, target: Checkpoint) -> None:
    """Raises IncompatibleModelsError unless the draft can propose for the target.

    Speculative sampling compares the two next-token distributions entry by
    entry, so both must have the same logit width and, when tokenizers are
    loaded, the same token -> id mapping.
    """
    dv, tv = draft.config.vocab_size, target.config.vocab_size
    if dv != tv:
        raise IncompatibleModelsError(
            f"vocabulary mismatch: draft {draft.name!r} has vocab_size={dv} but target "
            f"{target.name!r} has vocab_size={tv}")
    d_vocab, t_vocab = _vocab(draft.tokenizer), _vocab(target.tokenizer)
    if d_vocab is not None and t_vocab is not None and d_vocab != t_vocab:
        diff = sorted(set(d_vocab.items()) ^ set(t_vocab.items()), key=str)[:5]
        raise IncompatibleModelsError(
            f"vocabulary mismatch: draft {draft.name!r} and target {target.name!r} "
            f"tokenizers map tokens to different ids (e.g. {diff})")


def load_pair(target_dir: str | os.PathLike, draft_dir: str | os.PathLike,
              dtype=jnp.float32) -> tuple[Checkpoint, Checkpoint]:
    """Loads (target, draft) from local directories and checks they are compatible."""
    target = load_checkpoint(target_dir, dtype)
    draft = load_checkpoint(draft_dir, dtype)
    check_compatible(draft, target)
    return target, draft


def cast_params(params, dtype=None):
    """Casts a params pytree (e.g. to bfloat16) without changing its structure."""
    if dtype is None:
        return params
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)
