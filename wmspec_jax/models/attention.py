"""Causal self-attention over a static KV cache, with the families' variants.

One function covers grouped-query attention for every supported family;
the variants are switched by static config fields:

* ``qkv_bias`` (Qwen2): biases on the q / k / v projections;
* ``qk_norm`` (Qwen3): RMSNorm over each query and key head before RoPE;
* a per-layer window (Mistral, Gemma-2 sliding layers, Qwen sliding
  layers): a query at position ``p`` sees slots ``(p - window, p]`` only;
* ``attn_logit_softcap`` (Gemma-2): scores become ``cap * tanh(s / cap)``
  before masking;
* ``attention_scale``: ``query_pre_attn_scalar ** -0.5`` for Gemma-2, else
  ``head_dim ** -0.5``.

The cache keeps every slot of a sliding layer (a departure in memory, not in
results, from transformers' ring-buffer caches): rollback then stays a
length-pointer move for every layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.norms import rms_norm
from wmspec_jax.models.rope import apply_rope


def _project(h, lp, name, bias, heads, head_dim):
    out = h @ lp[name]
    if bias is not None:
        out = out + lp[bias]
    return out.reshape(h.shape[0], h.shape[1], heads, head_dim)


def attention(config: TransformerConfig, h: jax.Array, lp: dict, layer: jax.Array,
              window: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
              positions: jax.Array, slots_out: jax.Array, inv_freq: jax.Array):
    """One attention block; writes this call's keys / values into layer ``layer``.

    Args:
      h: dtype[B, T, D] normed input.
      lp: this layer's params (``wq``, ``wk``, ``wv``, ``wo`` and the optional
        ``bq/bk/bv``, ``q_norm/k_norm``).
      layer: int32 scalar, the layer index into the stacked cache.
      window: int32 scalar, this layer's attention window (see
        :meth:`TransformerConfig.attention_windows`).
      k_cache, v_cache: dtype[L, B, S, Hkv, Dh].
      positions: int32[B, T] RoPE positions of the queries.
      slots_out: int32[B, T] cache slots written; out-of-range slots are
        dropped by the scatter (how unwritten tokens are skipped).

    Returns:
      (dtype[B, T, D] attention output after ``wo``, k_cache, v_cache).
    """
    b, t, _ = h.shape
    nh, nkv, dh = config.num_heads, config.num_kv_heads, config.head_dim
    bias = config.qkv_bias
    q = _project(h, lp, "wq", "bq" if bias else None, nh, dh)
    k = _project(h, lp, "wk", "bk" if bias else None, nkv, dh)
    v = _project(h, lp, "wv", "bv" if bias else None, nkv, dh)
    if config.qk_norm:
        q = rms_norm(q, lp["q_norm"], config.rms_norm_eps)
        k = rms_norm(k, lp["k_norm"], config.rms_norm_eps)
    q = apply_rope(q, positions, inv_freq)
    k = apply_rope(k, positions, inv_freq)
    # A NaN key (e.g. from an id outside the vocabulary, which embeds as NaN)
    # makes every query that sees its slot NaN, loudly; its value is stored as
    # 0 so that queries masking the slot out (weight exactly 0) stay exact
    # instead of picking up 0 * NaN.
    v = jnp.where(jnp.isnan(k).any(axis=-1, keepdims=True), jnp.zeros_like(v), v)

    # Scatter (not dynamic_update_slice): rows write at different offsets and
    # out-of-range garbage slots are dropped instead of clamped. (A vmapped
    # scatter with the batch as a batching dimension avoids all-gathering the
    # new rows' keys under a data-parallel mesh, but made CPU decoding 5x
    # slower at batch 32; the all-gather moves only [B, T, Hkv, Dh] per layer.)
    rows = jnp.arange(b)[:, None]
    k_cache = k_cache.at[layer, rows, slots_out].set(k.astype(k_cache.dtype), mode="drop")
    v_cache = v_cache.at[layer, rows, slots_out].set(v.astype(v_cache.dtype), mode="drop")
    keys, values = k_cache[layer], v_cache[layer]  # [B, S, Hkv, Dh]

    qg = q.reshape(b, t, nkv, config.q_per_kv, dh)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, keys,
                        preferred_element_type=jnp.float32) * config.attention_scale
    if config.attn_logit_softcap is not None:
        cap = config.attn_logit_softcap
        scores = jnp.tanh(scores / cap) * cap
    slots = jnp.arange(keys.shape[1])[None, None, :]
    pos = positions[:, :, None]
    visible = (slots <= pos) & (slots > pos - window)  # [B, T, S]
    scores = jnp.where(visible[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, values).reshape(b, t, nh * dh)
    return out @ lp["wo"], k_cache, v_cache
