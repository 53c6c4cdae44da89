"""Functional decoder (Llama, Mistral, Qwen2/3, Gemma, Gemma-2) over an explicit KV cache.

Params are a plain pytree (nested dicts of arrays); per-layer weights are
stacked on a leading layer axis and the layers run under ``lax.scan``::

    embed       [V, D]
    layers/attn_norm [L, D]   wq [L, D, H*Dh]   wk, wv [L, D, Hkv*Dh]
           wo [L, H*Dh, D]    mlp_norm [L, D]
           w_gate, w_up [L, D, F]               w_down [L, F, D]
           bq [L, H*Dh], bk, bv [L, Hkv*Dh]     (qkv_bias: Qwen2)
           q_norm, k_norm [L, Dh]               (qk_norm: Qwen3)
           post_attn_norm, post_mlp_norm [L, D] (sandwich_norms: Gemma-2)
    final_norm  [D]
    lm_head     [D, V]        (only when embeddings are untied)

A layer is ``x += post_attn_norm(attn(attn_norm(x)))`` then
``x += post_mlp_norm(mlp(mlp_norm(x)))``, the post norms only with
``sandwich_norms``. Matrices are stored input-major (``x @ w``), i.e.
transposed with respect to PyTorch's ``nn.Linear.weight``. Params may be
float32 or bfloat16; norms, RoPE, softmax and logits are computed in
float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax.models.attention import attention
from wmspec_jax.models.cache import KVCache
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.norms import rms_norm as _rms_norm

Params = dict


def rms_norm(x: jax.Array, w: jax.Array, config: TransformerConfig) -> jax.Array:
    """RMSNorm in the config's style (:func:`wmspec_jax.models.norms.rms_norm`)."""
    return _rms_norm(x, w, config.rms_norm_eps, config.gemma_style)


def _mlp(h: jax.Array, lp: Params, config: TransformerConfig) -> jax.Array:
    gate = h @ lp["w_gate"]
    if config.gemma_style:
        act = jax.nn.gelu(gate, approximate=True)
    else:
        act = jax.nn.silu(gate)
    return (act * (h @ lp["w_up"])) @ lp["w_down"]


def hidden_states(config: TransformerConfig, params: Params, tokens: jax.Array,
                  positions: jax.Array, cache: KVCache, lengths: jax.Array,
                  write_mask: jax.Array | None = None) -> tuple[jax.Array, KVCache]:
    """Runs the decoder stack and the final norm.

    Args:
      tokens: int32[B, T] input ids in [0, V). An id outside gives NaN (not a
        wrapped or clamped embedding) at its position and at every later
        query that attends to it, also in later calls.
      positions: int32[B, T] RoPE positions, which are also the cache slots
        the tokens are written to; a query at position ``p`` attends to slots
        ``0..p`` of its row (``p - window + 1 .. p`` on sliding layers).
      cache: KVCache with L = config.num_layers.
      lengths: int32[B] per-row valid lengths stored in the returned cache.
      write_mask: optional bool[B, T]; tokens where it is False are computed
        (their outputs are meaningless) but not written to the cache, so the
        cache changes only at the slots of real tokens.

    Returns:
      (hidden dtype[B, T, D] after the final norm, updated cache).
    """
    return decoder_stack(config, params, embed_tokens(config, params, tokens), positions, cache,
                         lengths, write_mask)


def embed_tokens(config: TransformerConfig, params: Params, tokens: jax.Array) -> jax.Array:
    """dtype[B, T, D] input embeddings of int32[B, T] ids (NaN for an id outside [0, V))."""
    dtype = params["embed"].dtype
    # Out-of-range ids (negative ones included, which jnp.take would wrap)
    # give NaN rather than a wrapped or clamped embedding.
    ids = jnp.where(tokens < 0, config.vocab_size, tokens)
    x = jnp.take(params["embed"], ids, axis=0, mode="fill", fill_value=jnp.nan)
    if config.gemma_style:
        # HF rounds sqrt(D) to the params dtype before multiplying.
        x = x * jnp.asarray(config.hidden_size ** 0.5, dtype)
    return x


def decoder_stack(config: TransformerConfig, params: Params, x: jax.Array, positions: jax.Array,
                  cache: KVCache, lengths: jax.Array, write_mask: jax.Array | None = None
                  ) -> tuple[jax.Array, KVCache]:
    """The layers and the final norm over input vectors dtype[B, T, D] (:func:`hidden_states`'
    arguments otherwise); lets a draft feed something other than token embeddings."""
    dtype = x.dtype
    inv_freq = jnp.asarray(config.rope_inv_freq())
    slots_out = positions
    if write_mask is not None:
        slots_out = jnp.where(write_mask, positions, cache.capacity)  # dropped by the scatter

    def layer_fn(carry, inputs):
        x, k_cache, v_cache = carry
        lp, layer, window = inputs
        attn, k_cache, v_cache = attention(
            config, rms_norm(x, lp["attn_norm"], config), lp, layer, window, k_cache, v_cache,
            positions, slots_out, inv_freq)
        if config.sandwich_norms:
            attn = rms_norm(attn, lp["post_attn_norm"], config)
        x = x + attn.astype(dtype)
        mlp = _mlp(rms_norm(x, lp["mlp_norm"], config), lp, config)
        if config.sandwich_norms:
            mlp = rms_norm(mlp, lp["post_mlp_norm"], config)
        x = x + mlp.astype(dtype)
        return (x, k_cache, v_cache), None

    layer_ids = jnp.arange(config.num_layers, dtype=jnp.int32)
    windows = jnp.asarray(config.attention_windows())
    (x, k_cache, v_cache), _ = jax.lax.scan(
        layer_fn, (x, cache.k, cache.v), (params["layers"], layer_ids, windows))
    h = rms_norm(x, params["final_norm"], config)
    return h, KVCache(k_cache, v_cache, lengths.astype(jnp.int32))


def lm_logits(config: TransformerConfig, params: Params, h: jax.Array) -> jax.Array:
    """float32[B, T, V] logits from final hidden states dtype[B, T, D].

    With ``final_logit_softcap`` (Gemma-2) the logits are ``cap * tanh(z / cap)``.
    """
    if config.tie_word_embeddings:
        logits = jnp.einsum("btd,vd->btv", h, params["embed"],
                            preferred_element_type=jnp.float32)
    else:
        logits = jnp.einsum("btd,dv->btv", h, params["lm_head"],
                            preferred_element_type=jnp.float32)
    if config.final_logit_softcap is not None:
        cap = config.final_logit_softcap
        logits = jnp.tanh(logits / cap) * cap
    return logits


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
    q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    layers = {
        "attn_norm": (l, d), "mlp_norm": (l, d),
        "wq": (l, d, q_dim), "wk": (l, d, kv_dim), "wv": (l, d, kv_dim), "wo": (l, q_dim, d),
        "w_gate": (l, d, f), "w_up": (l, d, f), "w_down": (l, f, d),
    }
    if c.qkv_bias:
        layers.update(bq=(l, q_dim), bk=(l, kv_dim), bv=(l, kv_dim))
    if c.qk_norm:
        layers.update(q_norm=(l, c.head_dim), k_norm=(l, c.head_dim))
    if c.sandwich_norms:
        layers.update(post_attn_norm=(l, d), post_mlp_norm=(l, d))
    shapes = {"embed": (c.vocab_size, d), "layers": layers, "final_norm": (d,)}
    if not c.tie_word_embeddings:
        shapes["lm_head"] = (d, c.vocab_size)
    return shapes


NORM_PARAMS = ("attn_norm", "mlp_norm", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm")


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
        if isinstance(g, dict):
            problems.extend(f"unexpected {prefix}{key}" for key in g if key not in w)

    walk(want, got, "")
    if problems:
        raise ValueError("params do not match the config: " + "; ".join(problems))


def init_params(config: TransformerConfig, key: jax.Array, dtype=jnp.float32,
                scale: float = 0.02) -> Params:
    """Random normal params (for tests, benchmarks and from-scratch drafts).

    Norm weights are the identity of each style (1 for Llama-style, 0 for
    Gemma's ``1 + w``; Qwen3's head norms are Llama-style).
    """
    shapes = param_shapes(config)
    leaves, treedef = jax.tree_util.tree_flatten(
        shapes, is_leaf=lambda s: isinstance(s, tuple))
    keys = jax.random.split(key, len(leaves))
    out = [scale * jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, leaves)]
    params = jax.tree_util.tree_unflatten(treedef, out)
    norm_value = 0.0 if config.gemma_style else 1.0
    params["final_norm"] = jnp.full(shapes["final_norm"], norm_value)
    for name in NORM_PARAMS:
        if name in shapes["layers"]:
            value = 1.0 if name in ("q_norm", "k_norm") else norm_value
            params["layers"][name] = jnp.full(shapes["layers"][name], value)
    return jax.tree_util.tree_map(lambda a: a.astype(dtype), params)
