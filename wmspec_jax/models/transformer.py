"""Functional decoder (Llama, Mistral, Qwen2/3, Gemma, Gemma-2) over an explicit KV cache.

Params are a plain pytree: ``layers`` is a list of L dicts, one per layer,
each holding that layer's own arrays::

    embed       [V, D]
    layers[l]/attn_norm [D]   wq [D, H*Dh]   wk, wv [D, Hkv*Dh]
              wo [H*Dh, D]    mlp_norm [D]
              w_gate, w_up [D, F]            w_down [F, D]
              bq [H*Dh], bk, bv [Hkv*Dh]     (qkv_bias: Qwen2)
              q_norm, k_norm [Dh]            (qk_norm: Qwen3)
              post_attn_norm, post_mlp_norm [D] (sandwich_norms: Gemma-2)
    final_norm  [D]
    lm_head     [D, V]        (only when embeddings are untied)

The layers run as an unrolled Python loop over these per-layer arrays, so a
decode step reads every weight once. (A ``lax.scan`` over weights stacked on a
leading layer axis slices each layer out of the stack before its matrix
products; XLA materialises those slices, which on a memory-bound decode step
reads the weights about three times; ``benchmarks/bench_decode_step.py``
measures both.) :func:`stack_layers` / :func:`unstack_layers` convert to and
from the stacked form that training code and saved draft files use.

A layer is ``x += post_attn_norm(attn(attn_norm(x)))`` then
``x += post_mlp_norm(mlp(mlp_norm(x)))``, the post norms only with
``sandwich_norms``. Params may be float32 or bfloat16; norms, RoPE, softmax
and logits are computed in float32.

**Two weight layouts** (``config.weight_layout``). ``in_out`` (the default,
the shapes above) stores matrices input-major and computes ``x @ w``.
``out_in`` stores every matrix transposed, ``[out, in]`` as PyTorch's
``nn.Linear.weight`` and GGUF files do (``lm_head`` ``[V, D]``), and computes
each product as ``w @ x^T`` with the weight as the left operand, then
transposes the small ``[out, rows]`` result back. The layouts give the same
logits up to float rounding (the products sum in another order); what differs
is speed on XLA:CPU for products with a few rows, a speculative verification
pass (``K + 1`` rows at batch 1). There XLA hands ``[M, in] @ [in, out]`` to
its YNNPACK GEMM, which for M = 4 took 2.4x the time of the one-row
matrix-vector product over the same weights, against 1.4x for
``[out, in] @ [in, M]`` (``python -m benchmarks.profile_passes``,
``docs/performance.md``). An optimisation barrier keeps XLA from folding the
transpose back into the product (which would restore the slow form). A tied
head in ``out_in`` runs the same way on the embedding ``[V, D]``.
:func:`to_weight_layout` converts params between the layouts;
:func:`wmspec_jax.models.pairs.load_pair` puts the target in ``out_in`` on CPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from wmspec_jax.models.attention import DEFAULT_BLOCK, attention
from wmspec_jax.models.cache import KVCache
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.linear import MATRICES, linear, linear_many
from wmspec_jax.models.norms import rms_norm as _rms_norm

Params = dict


def rms_norm(x: jax.Array, w: jax.Array, config: TransformerConfig) -> jax.Array:
    """RMSNorm in the config's style (:func:`wmspec_jax.models.norms.rms_norm`)."""
    return _rms_norm(x, w, config.rms_norm_eps, config.gemma_style)


def _mlp(h: jax.Array, lp: Params, config: TransformerConfig) -> jax.Array:
    gate, up = linear_many(h, (lp["w_gate"], lp["w_up"]), config)
    if config.gemma_style:
        act = jax.nn.gelu(gate, approximate=True)
    else:
        act = jax.nn.silu(gate)
    return linear(act * up, lp["w_down"], config)


def hidden_states(config: TransformerConfig, params: Params, tokens: jax.Array,
                  positions: jax.Array, cache: KVCache, lengths: jax.Array,
                  write_mask: jax.Array | None = None, *,
                  attention_block: int = DEFAULT_BLOCK, slots: jax.Array | None = None,
                  tree=None) -> tuple[jax.Array, KVCache]:
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
      attention_block: static slots per attention block: a cache longer than
        this is read block by block up to the longest row's last position
        (:func:`wmspec_jax.models.attention.attend`).
      slots: optional int32[B, T] cache slots to write instead of ``positions`` (a token tree).
      tree: optional (int32[B] base, bool[T, T] ancestors): the tokens are a token tree's nodes
        (:func:`wmspec_jax.models.attention.attend`).

    Returns:
      (hidden dtype[B, T, D] after the final norm, updated cache).
    """
    return decoder_stack(config, params, embed_tokens(config, params, tokens), positions, cache,
                         lengths, write_mask, attention_block=attention_block, slots=slots, tree=tree)


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
                  cache: KVCache, lengths: jax.Array, write_mask: jax.Array | None = None, *,
                  attention_block: int = DEFAULT_BLOCK, slots: jax.Array | None = None,
                  tree=None) -> tuple[jax.Array, KVCache]:
    """The layers and the final norm over input vectors dtype[B, T, D] (:func:`hidden_states`'
    arguments otherwise); lets a draft feed something other than token embeddings."""
    inv_freq = jnp.asarray(config.rope_inv_freq())
    slots_out = positions if slots is None else slots
    if write_mask is not None:
        slots_out = jnp.where(write_mask, slots_out, cache.capacity)  # dropped by the scatter
    layers = params["layers"]
    if len(layers) != config.num_layers or len(cache.k) != config.num_layers:
        raise ValueError(f"the config has {config.num_layers} layers, the params {len(layers)} and "
                         f"the cache {len(cache.k)}")
    k_cache, v_cache = list(cache.k), list(cache.v)
    # Traced: the inlined jit (traced once per shape); eager: op by op, as the plain loop (a jit called
    # eagerly would compile a program per shape instead).
    run_layer = _layer if isinstance(x, jax.core.Tracer) else _layer.__wrapped__
    for layer, (lp, window) in enumerate(zip(layers, config.attention_windows().tolist())):
        x, k_cache[layer], v_cache[layer] = run_layer(config, lp, x, k_cache[layer], v_cache[layer], positions,
                                                      slots_out, inv_freq, tree, window=window,
                                                      attention_block=attention_block)
    h = rms_norm(x, params["final_norm"], config)
    return h, KVCache(tuple(k_cache), tuple(v_cache), lengths.astype(jnp.int32))


# inline=True: the caller's program holds each layer's equations, exactly as an unrolled loop would
# (the same StableHLO but for the order of captured weights; the same speed), while a layer is traced
# once per distinct (shapes, window) and replayed from JAX's trace cache for the others: tracing a
# 30-layer step takes about half the time.
@functools.partial(jax.jit, static_argnames=("config", "window", "attention_block"), inline=True)
def _layer(config: TransformerConfig, lp: Params, x: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
           positions: jax.Array, slots_out: jax.Array, inv_freq: jax.Array, tree, *, window: int,
           attention_block: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One decoder layer (:func:`decoder_stack`): (x after it, this layer's k_cache, v_cache)."""
    dtype = x.dtype
    attn, k_cache, v_cache = attention(
        config, rms_norm(x, lp["attn_norm"], config), lp, window, k_cache, v_cache,
        positions, slots_out, inv_freq, block=attention_block, tree=tree)
    if config.sandwich_norms:
        attn = rms_norm(attn, lp["post_attn_norm"], config)
    x = x + attn.astype(dtype)
    mlp = _mlp(rms_norm(x, lp["mlp_norm"], config), lp, config)
    if config.sandwich_norms:
        mlp = rms_norm(mlp, lp["post_mlp_norm"], config)
    return x + mlp.astype(dtype), k_cache, v_cache


def lm_logits(config: TransformerConfig, params: Params, h: jax.Array) -> jax.Array:
    """float32[B, T, V] logits from final hidden states dtype[B, T, D].

    With ``final_logit_softcap`` (Gemma-2) the logits are ``cap * tanh(z / cap)``.
    """
    if config.weight_layout == "out_in":
        head = params["embed"] if config.tie_word_embeddings else params["lm_head"]
        logits = linear(h, head, config, preferred_element_type=jnp.float32)
    elif config.tie_word_embeddings:
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
            write_mask: jax.Array | None = None, *,
            attention_block: int = DEFAULT_BLOCK) -> tuple[jax.Array, KVCache]:
    """Logits for every input position; see :func:`hidden_states` for the args.

    Returns (float32[B, T, V] logits, updated cache). Pure: when the logits
    are unused (prefill) XLA drops the output projection under ``jit``.
    """
    h, cache = hidden_states(config, params, tokens, positions, cache, lengths, write_mask,
                             attention_block=attention_block)
    return lm_logits(config, params, h), cache


def layer_shapes(config: TransformerConfig) -> dict:
    """Shape of every parameter of one layer (module doc)."""
    c = config
    d, f = c.hidden_size, c.intermediate_size
    q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    shapes = {
        "attn_norm": (d,), "mlp_norm": (d,),
        "wq": (d, q_dim), "wk": (d, kv_dim), "wv": (d, kv_dim), "wo": (q_dim, d),
        "w_gate": (d, f), "w_up": (d, f), "w_down": (f, d),
    }
    if c.weight_layout == "out_in":
        shapes.update({name: shapes[name][::-1] for name in MATRICES})
    if c.qkv_bias:
        shapes.update(bq=(q_dim,), bk=(kv_dim,), bv=(kv_dim,))
    if c.qk_norm:
        shapes.update(q_norm=(c.head_dim,), k_norm=(c.head_dim,))
    if c.sandwich_norms:
        shapes.update(post_attn_norm=(d,), post_mlp_norm=(d,))
    return shapes


def param_shapes(config: TransformerConfig) -> dict:
    """The expected shape of every parameter: ``layers`` is a list of L :func:`layer_shapes`."""
    c = config
    shapes = {"embed": (c.vocab_size, c.hidden_size),
              "layers": [layer_shapes(c) for _ in range(c.num_layers)],
              "final_norm": (c.hidden_size,)}
    if not c.tie_word_embeddings:
        shapes["lm_head"] = ((c.vocab_size, c.hidden_size) if c.weight_layout == "out_in"
                             else (c.hidden_size, c.vocab_size))
    return shapes


def to_weight_layout(config: TransformerConfig, params: Params, layout: str) -> tuple[TransformerConfig, Params]:
    """(config, params) of the same model with its matrices stored in ``layout`` (module doc).

    The layers' matrices and an untied ``lm_head`` are transposed (new arrays; the
    embedding, norms, biases and any other entry, e.g. a draft's ``head_rows``, are
    shared); already in ``layout``: returned as given. ValueError if a matrix does not
    have its shape in ``config``'s layout.
    """
    new_config = config.replace(weight_layout=layout)  # validates the name
    if layout == config.weight_layout:
        return config, params
    want = param_shapes(config)
    for i, lp in enumerate(params["layers"]):
        for name in MATRICES:
            if tuple(lp[name].shape) != want["layers"][0][name]:
                raise ValueError(f"layers/{i}/{name}: expected {want['layers'][0][name]} in the "
                                 f"{config.weight_layout} layout, got {tuple(lp[name].shape)}")
    out = dict(params)
    out["layers"] = [{k: (_transposed(v) if k in MATRICES else v) for k, v in lp.items()}
                     for lp in params["layers"]]
    if "lm_head" in params:
        out["lm_head"] = _transposed(params["lm_head"])
    return new_config, out


@jax.jit
def _transposed(w: jax.Array) -> jax.Array:
    # One compiled program per shape, the result placed as the input (sharded weights stay sharded).
    return jnp.transpose(w)


def stack_layers(layers) -> dict:
    """A list of L per-layer dicts -> one dict of arrays with a leading layer axis [L, ...]."""
    layers = list(layers)
    if not layers:
        raise ValueError("no layers to stack")
    return {k: jnp.stack([lp[k] for lp in layers]) for k in layers[0]}


def unstack_layers(stacked: dict) -> list:
    """One dict of [L, ...] arrays -> a list of L per-layer dicts (the params' ``layers``)."""
    counts = {k: v.shape[0] for k, v in stacked.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"stacked layer arrays disagree on the number of layers: {counts}")
    n = next(iter(counts.values()))
    return [{k: v[i] for k, v in stacked.items()} for i in range(n)]


NORM_PARAMS = ("attn_norm", "mlp_norm", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm")


def _is_shape(s) -> bool:
    return isinstance(s, tuple) and all(isinstance(n, int) for n in s)


def check_params(config: TransformerConfig, params: Params) -> None:
    """Raises ValueError naming every parameter whose shape or presence is wrong."""
    want = param_shapes(config)
    problems = []

    def walk(w, g, prefix):
        if isinstance(w, list):
            if not isinstance(g, (list, tuple)) or len(g) != len(w):
                got = f"{len(g)} entries" if isinstance(g, (list, tuple)) else type(g).__name__
                problems.append(f"{prefix.rstrip('/')}: expected a list of {len(w)} layers, got {got}")
                return
            for i, (wi, gi) in enumerate(zip(w, g)):
                walk(wi, gi, f"{prefix}{i}/")
            return
        if not isinstance(g, dict):
            problems.append(f"{prefix.rstrip('/') or 'params'}: expected a dict, got {type(g).__name__}")
            return
        for key, shape in w.items():
            name = prefix + key
            if key not in g:
                problems.append(f"missing {name}")
            elif _is_shape(shape):
                got = tuple(getattr(g[key], "shape", ()))
                if got != shape:
                    problems.append(f"{name}: expected {shape}, got {got}")
            else:
                walk(shape, g[key], name + "/")
        problems.extend(f"unexpected {prefix}{key}" for key in g if key not in w)

    walk(want, params, "")
    if problems:
        raise ValueError("params do not match the config: " + "; ".join(problems))


def init_params(config: TransformerConfig, key: jax.Array, dtype=jnp.float32,
                scale: float = 0.02) -> Params:
    """Random normal params (for tests, benchmarks and from-scratch drafts).

    Norm weights are the identity of each style (1 for Llama-style, 0 for
    Gemma's ``1 + w``; Qwen3's head norms are Llama-style). The draws are
    made per stacked [L, ...] array, so a key gives the same weights as it
    did when the params stored their layers stacked.
    """
    shapes = param_shapes(config)
    shapes["layers"] = {k: (config.num_layers,) + s for k, s in layer_shapes(config).items()}
    leaves, treedef = jax.tree_util.tree_flatten(shapes, is_leaf=_is_shape)
    keys = jax.random.split(key, len(leaves))
    # Each array is drawn in float32, cast at once and (for layers) split at once, so that the
    # peak memory is the params in ``dtype`` plus one float32 array: at the 7B shape a float32
    # copy of everything would not fit next to the model on an 80 GB accelerator.
    out = [(scale * jax.random.normal(k, s, jnp.float32)).astype(dtype) for k, s in zip(keys, leaves)]
    params = jax.tree_util.tree_unflatten(treedef, out)
    norm_value = 0.0 if config.gemma_style else 1.0
    params["final_norm"] = jnp.full(shapes["final_norm"], norm_value, dtype)
    for name in NORM_PARAMS:
        if name in shapes["layers"]:
            value = 1.0 if name in ("q_norm", "k_norm") else norm_value
            params["layers"][name] = jnp.full(shapes["layers"][name], value, dtype)
    stacked = params["layers"]
    layers = [{} for _ in range(config.num_layers)]
    for name in list(stacked):
        array = stacked.pop(name)
        for layer, part in zip(layers, unstack_layers({name: array})):
            layer.update(part)
        del array
    params["layers"] = layers
    return params


__all__ = ["MATRICES", "NORM_PARAMS", "Params", "check_params", "decoder_stack", "embed_tokens", "forward",
           "hidden_states", "init_params", "layer_shapes", "linear", "lm_logits", "param_shapes", "rms_norm",
           "stack_layers", "to_weight_layout", "unstack_layers"]
