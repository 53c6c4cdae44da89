"""Keyed, versioned, counter-based pseudorandom streams (the watermark's ζ).

Every pseudorandom number the watermark uses is a pure function of

    (secret key, stream, the previous ``h`` tokens, token, lane)

computed with 32-bit unsigned arithmetic only (no x64), so that

* a detector rebuilds any value from the text and the key alone, and one
  token costs one hash evaluation (``token_*`` functions) — detection is
  O(tokens), never O(tokens x vocabulary);
* generation evaluates the *same* function over ``arange(V)``
  (``vocab_*`` functions);
* the bits are pinned by :data:`PRF_VERSION`, a NumPy twin
  (:mod:`wmspec_jax.prf_numpy`) and golden vectors in the tests. JAX's own
  ``jax.random`` bit streams are deliberately *not* used: they have changed
  between releases and differ across backends.

Streams (Alg. 1 of the paper): ``DRAFT`` = ζ^D (watermarked draft),
``TARGET`` = ζ^T (watermarked target, residual and bonus tokens), ``ACCEPT``
= ζ^R (one acceptance uniform per position, no token).

Lanes separate the different kinds of value drawn for one (stream, context):
per-token uniforms (Gumbel-max, Eq. 2), per-token g-value bits (SynthID,
Eq. 3-4; 32 layers per hash evaluation) and one per-position uniform (the
acceptance variable u of Alg. 1 line 6, or the uniform that samples a
non-degenerate SynthID output).

Construction (version ``wmspec-prf-v1``). ``mix`` is the ``lowbias32``
integer finaliser (xor-shift-multiply, a bijection on uint32).

    context seed  (s0, s1) = absorb(stream key k0, k1; context c_1..c_h)
    value(token, lane)     = mix(mix(s0 ^ (token * A + lane * B)) + s1)
    uniform                = (value >> 8 | 1) * 2^-24      in (0, 1)
    g-bit of layer l       = bit (l mod 32) of value(token, GBITS + l // 32)

Uniforms are odd multiples of 2^-24, exactly representable in float32, in
the open interval (0, 1) (min 2^-24, max 1 - 2^-24), so ``log(u)`` and
``log(1 - u)`` are always finite.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.prf_keys import (  # noqa: F401  (prf_keys is this module's JAX-free half: one import point)
    _MIX_1,
    _MIX_2,
    _MUL_CANDIDATE,
    _MUL_CONTEXT,
    _MUL_LANE,
    _MUL_TOKEN,
    _PAD_TOKEN,
    DEFAULT_CONTEXT_WIDTH,
    MAX_CONTEXT_WIDTH,
    NUM_GBITS_PER_HASH,
    NUM_STREAMS,
    PRF_V1,
    PRF_VERSION,
    PRF_VERSIONS,
    UNCHANGED_SINCE_V1,
    KeyLike,
    Lane,
    Stream,
    WatermarkKey,
    check_context_width,
    check_prf_version,
    same_construction,
    stream_keys,
)


def check_stream_keys(keys) -> jax.Array:
    """Validates stream key words ``[..., NUM_STREAMS, 2]`` uint32 (or a secret).

    Accepts the words (e.g. :func:`wmspec_jax.keys.text_keys`'s ``StreamKeys``),
    a secret object with a ``stream_keys()`` method (``wmspec_jax.keys.Secret``,
    :class:`WatermarkKey`) or a bytes/str/int secret used directly as one key.
    """
    if isinstance(keys, (bytes, bytearray, str, int)) and not isinstance(keys, bool):
        keys = stream_keys(keys)
    elif callable(getattr(keys, "stream_keys", None)):
        keys = keys.stream_keys()
    if not hasattr(keys, "dtype") or keys.dtype != np.uint32:
        raise TypeError(
            "expected stream key words (uint32[..., 3, 2], e.g. wmspec_jax.keys.text_keys(secret, "
            "indices, run)) or a bytes/str/int watermark key (the secret), got "
            f"{type(keys).__name__} with dtype {getattr(keys, 'dtype', None)}"
        )
    keys = np.asarray(keys) if not isinstance(keys, (np.ndarray, jax.Array)) else keys
    if keys.shape[-2:] != (NUM_STREAMS, 2) or keys.ndim not in (2, 3):
        raise ValueError(
            f"stream key words must have shape ({NUM_STREAMS}, 2) or (B, {NUM_STREAMS}, 2), got {keys.shape}"
        )
    return keys if isinstance(keys, jax.Array) else jnp.asarray(keys)


# ---------------------------------------------------------------------------
# The hash (JAX). prf_numpy mirrors every function bit for bit.
# ---------------------------------------------------------------------------


def _u32(x):
    return jnp.asarray(x, dtype=jnp.uint32)


def mix(x: jax.Array) -> jax.Array:
    """lowbias32: a bijective uint32 -> uint32 finaliser with strong avalanche."""
    x = _u32(x)
    x = x ^ (x >> 16)
    x = x * _u32(_MIX_1)
    x = x ^ (x >> 15)
    x = x * _u32(_MIX_2)
    x = x ^ (x >> 16)
    return x


def context_seeds(keys: jax.Array, contexts: jax.Array) -> jax.Array:
    """Seeds of positions from their contexts.

    Args:
      keys: uint32[..., 2] key words of one stream (broadcast against contexts).
      contexts: int32/uint32[..., h] the previous h tokens, oldest first; use
        -1 for "before the start of the buffer".

    Returns:
      uint32[..., 2] seed words (s0, s1).
    """
    keys = _u32(keys)
    ctx = jnp.asarray(contexts).astype(jnp.uint32)  # -1 wraps to _PAD_TOKEN
    h = ctx.shape[-1]
    shape = jnp.broadcast_shapes(keys.shape[:-1], ctx.shape[:-1])
    s0 = jnp.broadcast_to(keys[..., 0] ^ _u32(h * _MUL_LANE & 0xFFFFFFFF), shape)
    s1 = jnp.broadcast_to(keys[..., 1], shape)
    for i in range(h):  # h is a small static constant (default 4)
        c = ctx[..., i]
        s0 = mix(s0 ^ (c * _u32(_MUL_CONTEXT)))
        s1 = mix(s1 + s0 + c)
    return jnp.stack([mix(s0 ^ s1), mix(s1 + _u32(_MUL_TOKEN) * s0)], axis=-1)


def candidate_seeds(seeds: jax.Array, candidate: jax.Array) -> jax.Array:
    """Seeds of sibling ``candidate`` at a position of multi-draft speculative sampling.

    Args:
      seeds: uint32[..., 2] a stream's seeds of the position (:func:`context_seeds`).
      candidate: int[...] sibling index c >= 0 (broadcast against ``seeds[..., 0]``).

    Returns:
      uint32[..., 2]: ``seeds`` itself for c = 0 (so one chain uses the paper's stream) and, for
      c > 0, the seeds re-hashed with c: siblings at one context read different streams
      (``docs/multidraft.md``).
    """
    seeds = _u32(seeds)
    c = _u32(candidate)
    s0 = mix(seeds[..., 0] ^ mix(c * _u32(_MUL_CANDIDATE)))
    s1 = mix(seeds[..., 1] + s0 + c)
    derived = jnp.stack([mix(s0 ^ s1), mix(s1 + _u32(_MUL_TOKEN) * s0)], axis=-1)
    return jnp.where((c == 0)[..., None], seeds, derived)


def hash_values(seeds: jax.Array, tokens: jax.Array, lane: jax.Array | int) -> jax.Array:
    """One hash evaluation per (seed, token, lane): uint32 with broadcasting.

    Args:
      seeds: uint32[..., 2] from :func:`context_seeds`.
      tokens: integer token ids, broadcast against ``seeds[..., 0]``.
      lane: :class:`Lane` value (or lane + block for g-bits).
    """
    seeds = _u32(seeds)
    t = jnp.asarray(tokens).astype(jnp.uint32)
    lane = _u32(lane)
    x = seeds[..., 0] ^ (t * _u32(_MUL_TOKEN) + lane * _u32(_MUL_LANE))
    return mix(mix(x) + seeds[..., 1])


def to_uniform(values: jax.Array) -> jax.Array:
    """uint32 -> float32 in the open interval (0, 1); exact (odd multiples of 2^-24)."""
    return ((_u32(values) >> 8) | _u32(1)).astype(jnp.float32) * jnp.float32(2.0**-24)


def token_uniforms(seeds: jax.Array, tokens: jax.Array) -> jax.Array:
    """Gumbel-max uniform U_w of given tokens: float32[...] (one hash each)."""
    return to_uniform(hash_values(seeds, tokens, Lane.TOKEN_UNIFORM))


def vocab_uniforms(seeds: jax.Array, vocab_size: int) -> jax.Array:
    """Gumbel-max uniforms for the whole vocabulary: float32[..., V]."""
    tokens = jnp.arange(vocab_size, dtype=jnp.uint32)
    return token_uniforms(seeds[..., None, :], tokens)


def position_uniforms(seeds: jax.Array) -> jax.Array:
    """One uniform per position (acceptance u, or SynthID sampler): float32[...]."""
    return to_uniform(hash_values(seeds, jnp.uint32(0), Lane.POSITION_UNIFORM))


def token_gbits(seeds: jax.Array, tokens: jax.Array, num_layers: int) -> jax.Array:
    """SynthID g-values of given tokens: uint8[..., m] in {0, 1}.

    Layers 32b..32b+31 come from one hash evaluation (lane GBITS + b), so a
    token costs ceil(m / 32) evaluations.
    """
    _check_layers(num_layers)
    blocks = []
    for b in range(-(-num_layers // NUM_GBITS_PER_HASH)):
        v = hash_values(seeds, tokens, Lane.GBITS + b)
        n = min(NUM_GBITS_PER_HASH, num_layers - b * NUM_GBITS_PER_HASH)
        shifts = jnp.arange(n, dtype=jnp.uint32)
        blocks.append(((v[..., None] >> shifts) & _u32(1)).astype(jnp.uint8))
    return jnp.concatenate(blocks, axis=-1)


def vocab_gbits(seeds: jax.Array, vocab_size: int, num_layers: int) -> jax.Array:
    """SynthID g-values for the whole vocabulary: uint8[..., m, V]."""
    tokens = jnp.arange(vocab_size, dtype=jnp.uint32)
    bits = token_gbits(seeds[..., None, :], tokens, num_layers)  # [..., V, m]
    return jnp.swapaxes(bits, -1, -2)


def order_lane(statistic: str, version: str = PRF_VERSION) -> int:
    """The lane whose per-token hashes order a keyed permutation scheme's π (``"inverse_transform"`` or
    ``"dipmark"``): its own lane in v2, Gumbel-max's token lane in v1 (:data:`PRF_VERSION`)."""
    if check_prf_version(version) == PRF_V1:
        return int(Lane.TOKEN_UNIFORM)
    return int({"inverse_transform": Lane.INVERSE_ORDER, "dipmark": Lane.DIPMARK_ORDER}[statistic])


_RANK_BLOCK = 1024  # vocabulary tokens compared per step when one token's place is computed


def keyed_permutation(seeds: jax.Array, tokens: jax.Array, vocab_size: int) -> jax.Array:
    """π(w): KGW's keyed permutation of the vocabulary at a position, evaluated at given tokens (v2).

    The vocabulary sorted by the tokens' hashes in lane ``KGW_ORDER`` (ties by token id): π(w) is w's
    place, #{v : (hash(v), v) < (hash(w), w)} — a uniformly random permutation up to 32-bit hash ties
    (probability about V² / 2^33 per position). KGW's green list of size k is {w : π(w) < k}, exactly
    k tokens. One token's place costs V hashes (as transformers' detector computes a whole green list
    per token), in blocks of 1,024 tokens so memory stays O(tokens · 1,024).

    Args:
      seeds: uint32[..., 2] the position's seeds (:func:`context_seeds`), broadcast against ``tokens``.
      tokens: int[...] token ids in [0, V).
      vocab_size: V >= 1 (static).

    Returns:
      int32[...] π(w) in [0, V).
    """
    seeds = _u32(seeds)
    shape = jnp.broadcast_shapes(jnp.shape(tokens), seeds.shape[:-1])
    w = jnp.broadcast_to(jnp.asarray(tokens).astype(jnp.int32), shape)
    own = hash_values(seeds, w, Lane.KGW_ORDER)
    blocks = -(-int(vocab_size) // _RANK_BLOCK)

    def body(b, count):
        v = b * _RANK_BLOCK + jnp.arange(_RANK_BLOCK, dtype=jnp.int32)
        hv = hash_values(seeds[..., None, :], v, Lane.KGW_ORDER)
        before = (hv < own[..., None]) | ((hv == own[..., None]) & (v < w[..., None]))
        return count + jnp.sum(before & (v < vocab_size), axis=-1, dtype=jnp.int32)

    return jax.lax.fori_loop(0, blocks, body, jnp.zeros(shape, jnp.int32))


def first_in_permutation(seeds: jax.Array, vocab_size: int, count: int) -> jax.Array:
    """The tokens w with π(w) < ``count`` (:func:`keyed_permutation`) over the whole vocabulary:
    bool[..., V], exactly ``count`` True per position.

    The count-th smallest hash T is found by bisection over the 32-bit values (32 passes of one
    comparison per token, no sort); tokens hashing below T are in, and of those hashing to T the
    lowest ids fill the rest.
    """
    hv = hash_values(_u32(seeds)[..., None, :], jnp.arange(vocab_size, dtype=jnp.uint32), Lane.KGW_ORDER)
    need = jnp.int32(count)

    def bisect(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // _u32(2)
        enough = jnp.sum(hv <= mid[..., None], axis=-1, dtype=jnp.int32) >= need
        return jnp.where(enough, lo, mid + _u32(1)), jnp.where(enough, mid, hi)

    start = (jnp.zeros(hv.shape[:-1], jnp.uint32), jnp.full(hv.shape[:-1], 0xFFFFFFFF, jnp.uint32))
    threshold = jax.lax.fori_loop(0, 32, bisect, start)[0][..., None]
    below = hv < threshold
    tied = hv == threshold
    room = need - jnp.sum(below, axis=-1, keepdims=True, dtype=jnp.int32)
    return below | (tied & (jnp.cumsum(tied, axis=-1, dtype=jnp.int32) <= room))


def vocab_keyed_permutation(seeds: jax.Array, vocab_size: int) -> jax.Array:
    """π over the whole vocabulary (:func:`keyed_permutation` at every token, by one sort): int32[..., V]."""
    hv = hash_values(_u32(seeds)[..., None, :], jnp.arange(vocab_size, dtype=jnp.uint32), Lane.KGW_ORDER)
    order = jnp.argsort(hv, axis=-1, stable=True)  # by hash, ties by token id
    places = jnp.broadcast_to(jnp.arange(vocab_size, dtype=jnp.int32), order.shape)
    return jnp.put_along_axis(jnp.zeros(order.shape, jnp.int32), order, places, axis=-1, inplace=False)


def _check_layers(num_layers: int) -> None:
    if not isinstance(num_layers, (int, np.integer)) or num_layers < 1:
        raise ValueError(f"number of SynthID layers m must be a positive int, got {num_layers!r}")


# ---------------------------------------------------------------------------
# Contexts from token buffers
# ---------------------------------------------------------------------------


def gather_contexts(tokens: jax.Array, positions: jax.Array, width: int) -> jax.Array:
    """Previous ``width`` tokens of each position (oldest first), -1 before index 0.

    Args:
      tokens: int[B, L] token buffer.
      positions: int[B, N] positions whose contexts are wanted.
      width: h.

    Returns:
      int32[B, N, h]: ``tokens[b, p - h + j]`` for j in [0, h), -1 where the
      index is negative.
    """
    width = check_context_width(width)
    tokens = jnp.asarray(tokens, jnp.int32)
    positions = jnp.asarray(positions, jnp.int32)
    if tokens.ndim != 2 or positions.ndim != 2 or positions.shape[0] != tokens.shape[0]:
        raise ValueError(
            f"expected tokens [B, L] and positions [B, N], got {tokens.shape} and {positions.shape}"
        )
    idx = positions[..., None] + jnp.arange(-width, 0, dtype=jnp.int32)  # [B, N, h]
    safe = jnp.clip(idx, 0, tokens.shape[1] - 1).reshape(tokens.shape[0], -1)
    gathered = jnp.take_along_axis(tokens, safe, axis=1).reshape(idx.shape)
    return jnp.where(idx >= 0, gathered, -1)


__all__ = ["DEFAULT_CONTEXT_WIDTH", "KeyLike", "Lane", "MAX_CONTEXT_WIDTH", "NUM_GBITS_PER_HASH", "NUM_STREAMS",
           "PRF_V1", "PRF_VERSION", "PRF_VERSIONS", "Stream", "UNCHANGED_SINCE_V1", "WatermarkKey", "candidate_seeds",
           "check_context_width", "check_prf_version", "check_stream_keys", "context_seeds", "first_in_permutation",
           "gather_contexts", "hash_values", "keyed_permutation", "mix", "order_lane", "position_uniforms",
           "same_construction", "stream_keys", "to_uniform", "token_gbits", "token_uniforms", "vocab_gbits",
           "vocab_keyed_permutation", "vocab_uniforms"]
