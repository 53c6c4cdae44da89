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

**Cost follows the filled length.** The cache is read in blocks of ``block``
slots (:func:`attend`) with an online softmax (FlashAttention's running
maximum and sum, in float32): one block when the cache fits in one, else a
``fori_loop`` over the blocks from the first slot any query of the batch can
see to the last position of the longest row. A decode step with 128 tokens in
a 4096-slot cache so reads one 256-slot block per layer, not 4096 slots.
Blocks past a row's own length, or before its window, add exact zeros to its
sums (weight 0, running factor exactly 1), so a row's output does not depend
on how long the other rows of its batch are.

**Token trees.** With ``tree=(base, ancestors)`` the T queries are the nodes of
a token tree (multi-draft verification, :mod:`wmspec_jax.multidraft`): node i
sits in slot ``base[b] + i`` at RoPE position ``base[b] + depth(i)`` and sees
the row's first ``base[b]`` slots and the slots of its ancestors and itself
(``ancestors[i, j]``), as SpecInfer's tree attention does: shared prefixes
are computed once and the cache is read once per text, not once per path.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from wmspec_jax.models import attention_kernel
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.linear import linear, linear_many
from wmspec_jax.models.norms import rms_norm
from wmspec_jax.models.rope import apply_rope

# Slots per attention block: small enough that a short text in a long cache
# reads little, large enough that a typical generation needs one or two blocks.
DEFAULT_BLOCK = 256


def _projections(config: TransformerConfig, h: jax.Array, lp: dict):
    """q [B, T, H, Dh], k and v [B, T, Hkv, Dh] of the normed input (one product call for the three)."""
    b, t, _ = h.shape
    heads = {"q": config.num_heads, "k": config.num_kv_heads, "v": config.num_kv_heads}
    outs = linear_many(h, (lp["wq"], lp["wk"], lp["wv"]), config)
    projected = []
    for name, out in zip("qkv", outs):
        if config.qkv_bias:
            out = out + lp["b" + name]
        projected.append(out.reshape(b, t, heads[name], config.head_dim))
    return projected


def attention(config: TransformerConfig, h: jax.Array, lp: dict, window: int,
              k_cache: jax.Array, v_cache: jax.Array, positions: jax.Array,
              slots_out: jax.Array, inv_freq: jax.Array, *, block: int = DEFAULT_BLOCK, tree=None):
    """One attention block; writes this call's keys / values into this layer's cache.

    Args:
      h: dtype[B, T, D] normed input.
      lp: this layer's params (``wq``, ``wk``, ``wv``, ``wo`` and the optional
        ``bq/bk/bv``, ``q_norm/k_norm``).
      window: static int, this layer's attention window (see
        :meth:`TransformerConfig.attention_windows`).
      k_cache, v_cache: dtype[B, S, Hkv, Dh], this layer's cache.
      positions: int32[B, T] RoPE positions of the queries.
      slots_out: int32[B, T] cache slots written; out-of-range slots are
        dropped by the scatter (how unwritten tokens are skipped).
      block: static slots per attention block (:func:`attend`).
      tree: None, or (int32[B] base, bool[T, T] ancestors) for a token tree (:func:`attend`).

    Returns:
      (dtype[B, T, D] attention output after ``wo``, k_cache, v_cache).
    """
    b, t, _ = h.shape
    nh, dh = config.num_heads, config.head_dim
    q, k, v = _projections(config, h, lp)
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
    k_cache = k_cache.at[rows, slots_out].set(k.astype(k_cache.dtype), mode="drop")
    v_cache = v_cache.at[rows, slots_out].set(v.astype(v_cache.dtype), mode="drop")
    out = attend(config, q, k_cache, v_cache, positions, window, block=block, tree=tree)
    return linear(out.reshape(b, t, nh * dh), lp["wo"], config), k_cache, v_cache


def _scores(config: TransformerConfig, qg: jax.Array, keys: jax.Array) -> jax.Array:
    """float32[B, Hkv, G, T, S'] scaled (and soft-capped) q.k of grouped queries and a run of slots."""
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, keys,
                        preferred_element_type=jnp.float32) * config.attention_scale
    if config.attn_logit_softcap is not None:
        cap = config.attn_logit_softcap
        scores = jnp.tanh(scores / cap) * cap
    return scores


def _visible(slots: jax.Array, positions: jax.Array, window: int, capacity: int) -> jax.Array:
    """bool[B, T, S'] whether the query at ``positions`` [B, T] sees each of ``slots`` [S']."""
    pos = positions[:, :, None]
    visible = slots[None, None, :] <= pos
    if window < capacity:  # a global layer's window covers the whole cache
        visible &= slots[None, None, :] > pos - window
    return visible


def _tree_visible(slots: jax.Array, positions: jax.Array, window: int, capacity: int, base: jax.Array,
                  ancestors: jax.Array) -> jax.Array:
    """bool[B, T, S'] for tree queries (module doc): the committed slots ``< base`` within the window,
    and the tree's slots ``base + j`` where ``ancestors[i, j]``."""
    t = ancestors.shape[0]
    rel = slots[None, :] - base[:, None]  # [B, S']
    committed = (rel < 0)[:, None, :]
    if window < capacity:
        committed &= slots[None, None, :] > positions[:, :, None] - window
    in_tree = (rel >= 0) & (rel < t)
    seen = jnp.take(jnp.asarray(ancestors), jnp.clip(rel, 0, t - 1), axis=1)  # [T, B, S']
    return committed | (in_tree[:, None, :] & jnp.transpose(seen, (1, 0, 2)))


def attend(config: TransformerConfig, q: jax.Array, keys: jax.Array, values: jax.Array,
           positions: jax.Array, window: int, *, block: int = DEFAULT_BLOCK, tree=None) -> jax.Array:
    """Softmax attention of queries over one layer's cache; cost follows the filled length.

    Args:
      q: dtype[B, T, H, Dh] queries (RoPE applied).
      keys, values: dtype[B, S, Hkv, Dh] this layer's cache, already holding
        this call's keys and values.
      positions: int32[B, T]; the query at ``p`` sees slots ``(p - window, p]``.
      window: static int (``GLOBAL_WINDOW`` for global layers).
      block: static slots per block. ``S <= block``: the whole cache as one
        block. Otherwise the blocks that any query of the batch can see,
        ``[min(p) - window + 1, max(p)]``, one at a time (module doc).
      tree: None, or (int32[B] base, bool[T, T] ancestors): the queries are a token tree's nodes
        in slots ``base .. base + T − 1`` (module doc); the window must exceed the tree's depth.

    Returns:
      dtype[B, T, H, Dh] (``values.dtype``).

    With more than one block the loop's bounds depend on ``positions`` (a
    ``while_loop``), which reverse-mode differentiation does not support:
    training code that differentiates through the model passes a ``block``
    of at least the cache capacity (one block, no loop).

    Where the CPU kernels serve the model (:func:`wmspec_jax.models.attention_kernel.usable`: few
    queries, float32, the ``out_in`` layout), XLA:CPU runs the kernel of
    :mod:`~wmspec_jax.models.attention_kernel` instead of the loop: the same attention, summed in
    another order, and independent of ``block``.
    """
    if attention_kernel.usable(config, q, keys, values):
        b, t = q.shape[:2]
        base, ancestors = tree if tree is not None else (jnp.zeros((b,), jnp.int32), jnp.zeros((t, t), bool))
        return _attend_on_cpu(config, window, block, tree is not None, q, keys, values, positions,
                              jnp.asarray(base, jnp.int32), jnp.asarray(ancestors, jnp.int32))
    return _attend_blocks(config, q, keys, values, positions, window, block, tree)


def _attend_arrays(config, window, block, is_tree, q, keys, values, positions, base, ancestors):
    tree = (base, ancestors.astype(bool)) if is_tree else None
    return _attend_blocks(config, q, keys, values, positions, window, block, tree)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3))
def _attend_on_cpu(config, window, block, is_tree, q, keys, values, positions, base, ancestors):
    """The kernel on CPU, XLA's blocks elsewhere; XLA's derivatives."""
    return jax.lax.platform_dependent(
        q, keys, values, positions, base, ancestors,
        cpu=functools.partial(attention_kernel.call, config, window, is_tree),
        default=functools.partial(_attend_arrays, config, window, block, is_tree))


@_attend_on_cpu.defjvp
def _attend_on_cpu_jvp(config, window, block, is_tree, primals, tangents):
    return jax.jvp(functools.partial(_attend_arrays, config, window, block, is_tree), primals, tangents)


def _attend_blocks(config: TransformerConfig, q: jax.Array, keys: jax.Array, values: jax.Array,
                   positions: jax.Array, window: int, block: int, tree) -> jax.Array:
    """:func:`attend` by XLA: the online softmax over the visible blocks (module doc)."""
    b, t, nh, dh = q.shape
    nkv, capacity = config.num_kv_heads, keys.shape[1]
    qg = q.reshape(b, t, nkv, config.q_per_kv, dh)
    block = min(block, capacity)
    num_blocks = -(-capacity // block)

    def one_block(i, carry):
        run_max, run_sum, acc = carry
        # The last block is shifted left to stay inside the cache; slots it
        # shares with the previous block are masked out here.
        start = jnp.minimum(i * block, capacity - block)
        slots = start + jnp.arange(block)
        k_blk = jax.lax.dynamic_slice_in_dim(keys, start, block, axis=1)
        v_blk = jax.lax.dynamic_slice_in_dim(values, start, block, axis=1)
        if tree is None:
            visible = _visible(slots, positions, window, capacity)
        else:
            visible = _tree_visible(slots, positions, window, capacity, *tree)
        visible &= (slots >= i * block)[None, None, :]
        scores = jnp.where(visible[:, None, None], _scores(config, qg, k_blk), -jnp.inf)
        new_max = jnp.maximum(run_max, jnp.max(scores, axis=-1))
        # While a row has seen nothing its maximum is -inf: shift by 0 there,
        # so exp gives exact zeros instead of exp(-inf + inf) = NaN.
        shift = jnp.where(jnp.isneginf(new_max), 0.0, new_max)
        p = jnp.exp(scores - shift[..., None])
        factor = jnp.exp(run_max - shift)
        run_sum = run_sum * factor + jnp.sum(p, axis=-1)
        acc = acc * factor[..., None] + jnp.einsum(
            "bkgts,bskd->bkgtd", p.astype(values.dtype), v_blk, preferred_element_type=jnp.float32)
        return new_max, run_sum, acc

    stats = (b, nkv, config.q_per_kv, t)
    init = (jnp.full(stats, -jnp.inf, jnp.float32), jnp.zeros(stats, jnp.float32),
            jnp.zeros(stats + (dh,), jnp.float32))
    if num_blocks == 1:
        _, run_sum, acc = one_block(0, init)
    else:
        last = jnp.max(positions) if tree is None else jnp.max(tree[0]) + t - 1
        first = jnp.maximum(jnp.min(positions) - window + 1, 0) if window < capacity else 0
        lo = jnp.clip(first // block, 0, num_blocks)
        hi = jnp.clip(last // block + 1, lo, num_blocks)
        _, run_sum, acc = jax.lax.fori_loop(lo, hi, one_block, init)
    # A query that sees no slot (only an unwritten one past the cache) gets 0, not 0 / 0.
    out = acc / jnp.where(run_sum > 0, run_sum, 1.0)[..., None]
    return jnp.transpose(out, (0, 3, 1, 2, 4)).reshape(b, t, nh, dh).astype(values.dtype)


__all__ = ["DEFAULT_BLOCK", "attend", "attention"]
