"""Llama-architecture GGUF files (llama.cpp) -> (config, params, tokenizer).

Quantised tensors (Q4_1, Q8_0, ...) are dequantised to float with
``gguf.quants.dequantize``. llama.cpp's ``convert_hf_to_gguf.py`` permutes the
rows of ``q_proj`` / ``k_proj`` from Hugging Face's ``rotate_half`` RoPE
layout (first half / second half of each head) into GGML's interleaved
layout (even / odd); :func:`unpermute_rope_rows` undoes that so the weights
work with the HF-style RoPE in :mod:`wmspec_jax.models.transformer`.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np

from wmspec_jax.models.config import TransformerConfig, UnsupportedModelError
from wmspec_jax.models.gguf_file import GGUFFile
from wmspec_jax.models.hf import CheckpointError
from wmspec_jax.models.transformer import layer_shapes

# GGUF tensor name inside block i -> (our name, transpose from [out, in])
_BLOCK_MAP = {
    "attn_norm.weight": ("attn_norm", False),
    "attn_q.weight": ("wq", True),
    "attn_k.weight": ("wk", True),
    "attn_v.weight": ("wv", True),
    "attn_output.weight": ("wo", True),
    "ffn_norm.weight": ("mlp_norm", False),
    "ffn_gate.weight": ("w_gate", True),
    "ffn_up.weight": ("w_up", True),
    "ffn_down.weight": ("w_down", True),
}
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
            layers[layer][key] = jnp.asarray(w, dtype)
        elif t.name == "token_embd.weight":
            params["embed"] = jnp.asarray(w, dtype)
        elif t.name == "output_norm.weight":
            params["final_norm"] = jnp.asarray(w, dtype)
        elif t.name == "output.weight":
            params["lm_head"] = jnp.asarray(w.T, dtype)
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
