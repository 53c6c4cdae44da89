"""The decoders' shared kernels: inverse-CDF sampling, the first argmax, temperature and top-k, the
identity and linear-mixture decoders (Eq. 9). Unchecked kernels are for jitted code; the public
functions check concrete inputs."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import validation


def _float(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _one_hot_like(index: jax.Array, probs: jax.Array) -> jax.Array:
    return jax.nn.one_hot(index, probs.shape[-1], dtype=jnp.float32)


def candidate_tokens(weights: jax.Array, ids) -> jax.Array:
    """uint32 token ids of a draw's candidates: ``ids`` (int[B, C]), or the vocabulary 0..V − 1 when
    ``ids`` is None (weights float[B, V]); what a scheme hashes."""
    return jnp.arange(weights.shape[-1], dtype=jnp.uint32) if ids is None else ids.astype(jnp.uint32)


def first_argmax(x: jax.Array) -> jax.Array:
    """Index of the first maximum along the last axis: int32[...].

    Same result as ``jnp.argmax`` (NaN-free input), computed as a max and a
    min over indices, which XLA:CPU runs ~5x faster than its argmax reduction.
    """
    top = jnp.max(x, axis=-1, keepdims=True)
    size = x.shape[-1]
    idx = jnp.arange(size, dtype=jnp.int32)
    return jnp.min(jnp.where(x == top, idx, size), axis=-1).astype(jnp.int32)



# ---------------------------------------------------------------------------
# Identity, mixtures
# ---------------------------------------------------------------------------


def identity(probs: jax.Array, zeta=None) -> jax.Array:
    """The identity decoder Id(P, ζ) = P (no watermark)."""
    del zeta
    return _float(probs)


def linear_mixture(probs: jax.Array, decoded: jax.Array, theta) -> jax.Array:
    """Linear class of Eq. (9): ((1 − θ) Id + θ S)(P, ζ) = (1 − θ) P + θ S(P, ζ).

    Args:
      probs: float[..., V] P.
      decoded: float[..., V] S(P, ζ) from any unbiased decoder.
      theta: scalar or float[...] in [0, 1].
    """
    validation.check_unit_interval(theta, "theta")
    theta = _float(theta)[..., None] if jnp.ndim(theta) else _float(theta)
    return (1.0 - theta) * _float(probs) + theta * _float(decoded)


# ---------------------------------------------------------------------------
# Inverse-CDF sampling
# ---------------------------------------------------------------------------

_CDF_BLOCK = 256  # two-level inverse CDF above this many tokens


def inverse_cdf(weights: jax.Array, uniform: jax.Array) -> jax.Array:
    """Unchecked inverse-CDF sampler: the token whose CDF interval holds u.

    Returns the first w with Σ_{w' <= w} p_w' > u · Σ p (never a zero-weight
    token). Over more than 256 tokens the prefix sums are taken in two levels
    (block sums, then one block), which costs one pass over the weights
    instead of a full-length cumulative sum (~5x faster on XLA:CPU); the
    partition of [0, 1) it induces differs from a flat cumulative sum only by
    float rounding.

    Args:
      weights: float32[..., C] non-negative, not all zero.
      uniform: float32[...] in [0, 1).

    Returns:
      int32[...].
    """
    p = _float(weights)
    size = p.shape[-1]
    u = _float(uniform)
    if size <= _CDF_BLOCK:
        return _inverse_cdf_flat(p, u)
    batch = p.shape[:-1]
    blocks = -(-size // _CDF_BLOCK)
    padded = jnp.pad(p, [(0, 0)] * len(batch) + [(0, blocks * _CDF_BLOCK - size)])
    padded = padded.reshape(batch + (blocks, _CDF_BLOCK))
    block_cdf = jnp.cumsum(jnp.sum(padded, axis=-1), axis=-1)  # [..., blocks]
    threshold = u * block_cdf[..., -1]
    block = jnp.sum(block_cdf <= threshold[..., None], axis=-1)
    # rounding can push u·Σp past the last block: fall back to the last block with mass
    last_block = _last_positive(jnp.diff(block_cdf, axis=-1, prepend=0.0) > 0)
    block = jnp.minimum(block, last_block)
    inside = jnp.take_along_axis(padded, block[..., None, None], axis=-2)[..., 0, :]
    before = jnp.where(
        block > 0, jnp.take_along_axis(block_cdf, jnp.maximum(block - 1, 0)[..., None], axis=-1)[..., 0], 0.0)
    cdf = before[..., None] + jnp.cumsum(inside, axis=-1)
    offset = jnp.minimum(jnp.sum(cdf <= threshold[..., None], axis=-1), _last_positive(inside > 0))
    return (block * _CDF_BLOCK + offset).astype(jnp.int32)


def _inverse_cdf_flat(p, u):
    cdf = jnp.cumsum(p, axis=-1)
    idx = jnp.sum(cdf <= u[..., None] * cdf[..., -1:], axis=-1)
    return jnp.minimum(idx, _last_positive(p > 0)).astype(jnp.int32)


def _last_positive(positive: jax.Array) -> jax.Array:
    """Index of the last True along the last axis (0 if none): int32[...]."""
    size = positive.shape[-1]
    return jnp.max(jnp.where(positive, jnp.arange(size, dtype=jnp.int32), 0), axis=-1)


def sample_token(probs: jax.Array, uniform: jax.Array) -> jax.Array:
    """Deterministic inverse-CDF sampler: the token whose CDF interval holds u.

    Args:
      probs: float[..., V] non-negative weights (unnormalised is fine), not all zero.
      uniform: float[...] in [0, 1), one per distribution.

    Returns:
      int32[...]: the first w with cumsum(P)_w > u · ΣP; never a zero-weight
      token, even when float rounding pushes u · ΣP past the last cumsum.

    Raises:
      ValueError: (concrete inputs) NaN, infinite, negative or all-zero
        weights, or u outside [0, 1).
    """
    p = validation.concrete(probs)
    if p is not None:
        p = np.asarray(p, np.float64)
        if p.ndim < 1 or p.shape[-1] < 1:
            raise ValueError(f"probs must have a vocabulary axis, got shape {p.shape}")
        if not np.isfinite(p).all():
            raise ValueError("sample_token: weights contain NaN or inf")
        if (p < 0).any():
            raise ValueError(f"sample_token: negative weights (min {p.min():.3g})")
        if (p.sum(axis=-1) <= 0).any():
            raise ValueError("sample_token: a row of weights sums to zero")
    u = validation.concrete(uniform)
    if u is not None:
        u = np.asarray(u, np.float64)
        if np.isnan(u).any() or (u < 0).any() or (u >= 1).any():
            raise ValueError("sample_token: uniform must lie in [0, 1)")
    return inverse_cdf(probs, uniform)


# ---------------------------------------------------------------------------
# Temperature and top-k
# ---------------------------------------------------------------------------


def check_temperature(temperature) -> float | None:
    """The temperature as a float (None if traced); raises unless it is >= 0."""
    if isinstance(temperature, bool):
        raise TypeError("temperature must be a number, got a bool")
    value = validation.concrete(temperature)
    if value is None:
        return None
    value = np.asarray(value)
    if value.ndim != 0 or not np.issubdtype(value.dtype, np.number):
        raise TypeError(f"temperature must be a scalar number, got {temperature!r}")
    t = float(value)
    if not t >= 0 or math.isinf(t):
        raise ValueError(f"temperature must be a finite number >= 0, got {t}")
    if 0 < t < float(np.finfo(np.float32).tiny):
        raise ValueError(f"temperature {t} is below float32's smallest normal number, where the division "
                         "is not exact: use 0 for greedy decoding")
    return t


def check_top_k(top_k, vocab_size: int) -> int | None:
    """``top_k`` as an int in [1, V], or None for "keep all" (None or 0)."""
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
        raise TypeError(f"top_k must be an int or None, got {top_k!r}")
    if int(top_k) == 0:
        return None
    if not 1 <= int(top_k) <= vocab_size:
        raise ValueError(f"top_k must be in [1, {vocab_size}] (or None/0 for all), got {top_k}")
    return int(top_k)


def top_k_mask(logits: jax.Array, k: int) -> jax.Array:
    """bool[..., V]: the k largest logits; ties at the k-th value go to the lower token ids.

    Exactly k tokens, so the support has a static size (the generation loop
    gathers exactly these k candidates).
    """
    _, idx = jax.lax.top_k(logits, k)
    flat = idx.reshape(-1, k)
    rows = jnp.arange(flat.shape[0])[:, None]
    mask = jnp.zeros((flat.shape[0], logits.shape[-1]), bool).at[rows, flat].set(True)
    return mask.reshape(logits.shape)


def process_logits(logits: jax.Array, temperature, top_k: int | None = None) -> jax.Array:
    """Temperature and top-k, applied identically to draft and target logits.

    Args:
      logits: float[..., V].
      temperature: > 0, or 0 for greedy (all mass on the first argmax).
      top_k: keep exactly the k largest logits (ties at the k-th value are
        broken towards lower token ids, as ``jax.lax.top_k`` does; Hugging
        Face's ``TopKLogitsWarper`` keeps every tie instead); ``None`` or 0
        keeps all.

    Returns:
      float32[..., V] normalised log-probabilities (−inf outside the support).
    """
    x = _float(logits)
    k = check_top_k(top_k, x.shape[-1])
    t = check_temperature(temperature)
    if k is not None:
        x = jnp.where(top_k_mask(x, k), x, -jnp.inf)
    if t == 0:
        return jnp.where(_one_hot_like(first_argmax(x), x) > 0, 0.0, -jnp.inf)
    # Shift before dividing (candidates._tempered says why).
    top = jnp.max(x, axis=-1, keepdims=True)
    return jax.nn.log_softmax((x - jnp.where(jnp.isfinite(top), top, 0.0)) / _float(temperature), axis=-1)


__all__ = ["candidate_tokens", "check_temperature", "check_top_k", "first_argmax", "identity", "inverse_cdf", "linear_mixture",
           "process_logits", "sample_token", "top_k_mask"]
