"""Functional Llama / Gemma-v1 decoder over an explicit KV cache.

Params are a plain pytree (nested dicts of arrays); per-layer weights are
stacked on a leading layer axis and the layers run under ``lax.scan``::

    embed       [V, D]
    layers/attn_norm [L, D]   wq [L, D, H*Dh]   wk, wv [L, D, Hkv*Dh]
           wo [L, H*Dh, D]    mlp_norm [L, D]
           w_gate, w_up [L, D, F]               w_down [L, F, D]
    final_norm  [D]
    lm_head     [D, V]        (only when embeddings are untied)

Matrices are stored input-major (``x @ w``), i.e. transposed with respect to
PyTorch's ``nn.Linear.weight``. Params may be float32 or bfloat16; norms,
RoPE, softmax and logits are computed in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax.models.cache import KVCache
from wmspec_jax.models.config import TransformerConfig

Params = dict


def rms_norm(x: jax.Array, w: jax.Array, config: TransformerConfig) -> jax.Array:
    """RMSNorm over the last axis; Gemma scales by ``1 + w``. Returns x.dtype."""
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + config.rms_norm_eps)
    if config.family == "gemma":
        return (xf * (1.0 + w.astype(jnp.float32))).astype(x.dtype)
    # Llama casts back before multiplying by the weight (as transformers does).
    return w * xf.astype(x.dtype)


def rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotary embedding, ``rotate_half`` layout. x: [B, T, N, Dh]; positions: int32[B, T]."""
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, Dh/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def _mlp(h: jax.Array, lp: Params, config: TransformerConfig) -> jax.Array:
    gate = h @ lp["w_gate"]
    if config.family == "gemma":
        act = jax.nn.gelu(gate, approximate=True)
    else:
        act = jax.nn.silu(gate)
    return (act * (h @ lp["w_up"])) @ lp["w_down"]


def _attention(h, lp, layer, k_cache, v_cache, positions, slots_out, config, inv_freq):
    """One attention block; writes this call's keys/values into layer ``layer``.

    ``slots_out`` int32[B, T] are the cache slots written (out-of-range slots
    are dropped, which is how unwritten tokens are skipped).
    """
    b, t, _ = h.shape
    nh, nkv, dh = config.num_heads, config.num_kv_heads, config.head_dim
    q = rope((h @ lp["wq"]).reshape(b, t, nh, dh), positions, inv_freq)
    k = rope((h @ lp["wk"]).reshape(b, t, nkv, dh), positions, inv_freq)
    v = (h @ lp["wv"]).reshape(b, t, nkv, dh)

    rows = jnp.arange(b)[:, None]
    # Scatter (not dynamic_update_slice): rows write at different offsets and
    # out-of-range garbage slots are dropped instead of clamped.
    k_cache = k_cache.at[layer, rows, slots_out].set(k.astype(k_cache.dtype), mode="drop")
    v_cache = v_cache.at[layer, rows, slots_out].set(v.astype(v_cache.dtype), mode="drop")
    keys, values = k_cache[layer], v_cache[layer]  # [B, S, Hkv, Dh]

    qg = q.reshape(b, t, nkv, config.q_per_kv, dh)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, keys,
                        preferred_element_type=jnp.float32) * (dh ** -0.5)
    slots = jnp.arange(keys.shape[1])
    visible = slots[None, None, :] <= positions[:, :, None]  # [B, T, S]; slot 0 always visible
    scores = jnp.where(visible[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, values).reshape(b, t, nh * dh)
    return out @ lp["wo"], k_cache, v_cache


def hidden_states(config: TransformerConfig, params: Params, tokens: jax.Array,
                  positions: jax.Array, cache: KVCache, lengths: jax.Array,
                  write_mask: jax.Array | None = None) -> tuple[jax.Array, KVCache]:
    """Runs the decoder stack and the final norm.

    Args:
      tokens: int32[B, T] input ids.
      positions: int32[B, T] RoPE positions, which are also the cache slots
        the tokens are written to; a query at position ``p`` attends to slots
        ``0..p`` of its row.
      cache: KVCache with L = config.num_layers.
      lengths: int32[B] per-row valid lengths stored in the returned cache.
      write_mask: optional bool[B, T]; tokens where it is False are computed
        (their outputs are meaningless) but not written to the cache, so the
        cache changes only at the slots of real tokens.

    Returns:
      (hidden dtype[B, T, D] after the final norm, updated cache).
    """
    dtype = params["embed"].dtype
    x = jnp.take(params["embed"], tokens, axis=0)
    if config.family == "gemma":
        # HF rounds sqrt(D) to the params dtype before multiplying.
        x = x * jnp.asarray(config.hidden_size ** 0.5, dtype)
    inv_freq = jnp.asarray(config.rope_inv_freq())
    slots_out = positions
    if write_mask is not None:
        slots_out = jnp.where(write_mask, positions, cache.capacity)  # dropped by the scatter

    def layer_fn(carry, inputs):
        x, k_cache, v_cache = carry
        lp, layer = inputs
        attn, k_cache, v_cache = _attention(
            rms_norm(x, lp["attn_norm"], config), lp, layer, k_cache, v_cache,
            positions, slots_out, config, inv_freq)
        x = x + attn.astype(dtype)
        x = x + _mlp(rms_norm(x, lp["mlp_norm"], config), lp, config).astype(dtype)
        return (x, k_cache, v_cache), None

    layer_ids = jnp.arange(config.num_layers, dtype=jnp.int32)
    (x, k_cache, v_cache), _ = jax.lax.scan(
        layer_fn, (x, cache.k, cache.v), (params["layers"], layer_ids))
    h = rms_norm(x, params["final_norm"], config)
    return h, KVCache(k_cache, v_cache, lengths.astype(jnp.int32))


def lm_logits(config: TransformerConfig, params: Params, h: jax.Array) -> jax.Array:
    """float32[B, T, V] logits from final hidden states dtype[B, T, D]."""
    if config.tie_word_embeddings:
        return jnp.einsum("btd,vd->btv", h, params["embed"],
                          preferred_element_type=jnp.float32)
    return jnp.einsum("btd,dv->btv", h, params["lm_head"],
                      preferred_element_type=jnp.float32)


def forward(config: TransformerConfig, params: Params, tokens: jax.Array,
            positions: jax.Array, cache: KVCache, lengths: jax.Array,
            write_mask: jax.Array | None = None) -> tuple[jax.Array, KVCache]:
    """Logits for every input position; see :func:`hidden_states` for the args.

    Returns (float32[B, T, V] logits, updated cache). Pure: when the logits
    are unused (prefill) XLA drops the output projection under ``jit``.
    """
    h, cache = hidden_states(config, params, tokens, positions, cache, lengths, write_mask)
    return lm_logits(config, params, h), cache


def param_shapes(config: TransformerConfig) -> dict:
    """Nested dict of the expected shape of every parameter."""
    c = config
    d, f, l = c.hidden_size, c.intermediate_size, c.num_layers
    shapes = {
        "embed": (c.vocab_size, d),
        "layers": {
            "attn_norm": (l, d), "mlp_norm": (l, d),
            "wq": (l, d, c.num_heads * c.head_dim),
            "wk": (l, d, c.num_kv_heads * c.head_dim),
            "wv": (l, d, c.num_kv_heads * c.head_dim),
            "wo": (l, c.num_heads * c.head_dim, d),
            "w_gate": (l, d, f), "w_up": (l, d, f), "w_down": (l, f, d),
        },
        "final_norm": (d,),
    }
    if not c.tie_word_embeddings:
        shapes["lm_head"] = (d, c.vocab_size)
    return shapes


def check_params(config: TransformerConfig, params: Params) -> None:
    """Raises ValueError naming every parameter whose shape or presence is wrong."""
    want = param_shapes(config)
    got = jax.tree_util.tree_map(lambda a: tuple(a.shape), params)
    problems = []

    def walk(w, g, prefix):
        for key, shape in w.items():
            name = prefix + key
            if not isinstance(g, dict) or key not in g:
                problems.append(f"missing {name}")
            elif isinstance(shape, dict):
                walk(shape, g[key], name + "/")
            elif tuple(g[key]) != shape:
                problems.append(f"{name}: expected {shape}, got {g[key]}")

    walk(want, got, "")
    if problems:
        raise ValueError("params do not match the config: " + "; ".join(problems))


def init_params(config: TransformerConfig, key: jax.Array, dtype=jnp.float32,
                scale: float = 0.02) -> Params:
    """Random normal params (for tests and from-scratch drafts)."""
    shapes = param_shapes(config)
    leaves, treedef = jax.tree_util.tree_flatten(
        shapes, is_leaf=lambda s: isinstance(s, tuple))
    keys = jax.random.split(key, len(leaves))
    out = [scale * jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, leaves)]
    params = jax.tree_util.tree_unflatten(treedef, out)
    norm_value = 0.0 if config.family == "gemma" else 1.0
    params["final_norm"] = jnp.full(shapes["final_norm"], norm_value)
    for name in ("attn_norm", "mlp_norm"):
        params["layers"][name] = jnp.full(shapes["layers"][name], norm_value)
    return jax.tree_util.tree_map(lambda a: a.astype(dtype), params)
