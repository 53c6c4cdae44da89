"""vLLM's Philox4x32-10 PRF (``philox4x32-10-v1``) in NumPy: context states, words, uniforms, and
Gumbel-max sampling with them. Public face: :mod:`wmspec_jax.interop.engine_gumbel`."""

from __future__ import annotations

import numpy as np

from wmspec_jax.interop.engine_gumbel._config import _MASK, _U, EngineConfig, VllmDualKeyGumbelConfig, _check_key

_M0 = 0xD2511F53
_M1 = 0xCD9E8D57
_W0 = 0x9E3779B9
_W1 = 0xBB67AE85
_CONTEXT_DOMAIN = 0x574D4358
_TOKEN_DOMAIN = 0x574D544B
_U64 = np.uint64


def _as_words(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {x.dtype}")
    return x.astype(np.int64).astype(_U64).astype(_U) if x.dtype != _U else x  # mod 2**32, -1 -> 0xFFFFFFFF


def _mulhilo(m: int, x: np.ndarray):
    p = x.astype(_U64) * _U64(m)
    return (p >> _U64(32)).astype(_U), (p & _U64(_MASK)).astype(_U)


def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint32 arrays (broadcasting); returns the 4 output words."""
    with np.errstate(over="ignore"):
        k0 = np.asarray(k0, _U)
        k1 = np.asarray(k1, _U)
        for r in range(10):
            hi0, lo0 = _mulhilo(_M0, c0)
            hi1, lo1 = _mulhilo(_M1, c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            if r != 9:
                k0 = k0 + _U(_W0)
                k1 = k1 + _U(_W1)
    return c0, c1, c2, c3


def context_states(key: int, contexts) -> np.ndarray:
    """The Philox context state of each context.

    Args:
      key: 64-bit Philox key (for ``dual_key_gumbel``, key A or key B, not the master key).
      contexts: int[..., C], oldest token first; ``-1`` pads (taken mod 2**32 as vLLM does).

    Returns:
      uint32[..., 4].
    """
    key = _check_key(key)
    ctx = _as_words(contexts, "contexts")
    if ctx.ndim < 1 or ctx.shape[-1] < 1:
        raise ValueError(f"contexts must have shape [..., C] with C >= 1, got {ctx.shape}")
    width = ctx.shape[-1]
    prefix = ctx.shape[:-1]
    k0, k1 = _U(key & _MASK), _U(key >> 32)
    s = [np.full(prefix, _CONTEXT_DOMAIN, _U), np.full(prefix, width, _U), np.zeros(prefix, _U), np.zeros(prefix, _U)]
    for off in range(0, width, 4):
        block = [ctx[..., off + j] if off + j < width else np.full(prefix, _MASK - j, _U) for j in range(4)]
        s = list(_philox(*(s[j] ^ block[j] for j in range(4)), k0 ^ _U(off), k1))
    return np.stack(s, axis=-1)


def _candidate_words(key: int, states: np.ndarray, groups: np.ndarray):
    """The 4 words of token group ``groups`` (= token >> 2) under each context state (broadcast)."""
    k0, k1 = _U(key & _MASK), _U(key >> 32)
    s = [states[..., j] for j in range(4)]
    return _philox(groups, s[0], s[1], s[2], k0 ^ s[3], k1 ^ _U(_TOKEN_DOMAIN))


def philox_words(key: int, contexts, token_ids) -> np.ndarray:
    """vLLM's raw PRF words (``PhiloxPRF.uint32`` with stream 0).

    Args:
      key: 64-bit Philox key.
      contexts: int[..., C].
      token_ids: int array broadcastable with ``contexts.shape[:-1] + (1,)`` -- e.g. ``[V]``
        (every context against the same tokens) or ``[..., 1]`` (one token per context).

    Returns:
      uint32 of shape ``broadcast(contexts.shape[:-1] + (1,), token_ids.shape)``.
    """
    states = context_states(key, contexts)
    tok = _as_words(token_ids, "token_ids")
    shape = np.broadcast_shapes(states.shape[:-1] + (1,), tok.shape)
    tok = np.broadcast_to(tok, shape)
    states = np.broadcast_to(states[..., None, :], shape + (4,))
    words = np.stack(_candidate_words(key, states, tok >> _U(2)), axis=-1)
    return np.take_along_axis(words, (tok & _U(3)).astype(np.intp)[..., None], axis=-1)[..., 0]


def to_uniform(words) -> np.ndarray:
    """vLLM's ``uint32_to_uniform``: ``float32(((w >> 8) + 1) / (2**24 + 1))`` (float64 division)."""
    w = np.asarray(words)
    if w.dtype.kind not in "iu":
        raise TypeError(f"words must be an integer array, got dtype {w.dtype}")
    mant = (w.astype(np.int64) & _MASK) >> 8
    return ((mant.astype(np.float64) + 1.0) / (2**24 + 1)).astype(np.float32)


def uniforms(key: int, contexts, token_ids) -> np.ndarray:
    """vLLM's ``PhiloxPRF(key).uniform(contexts, token_ids)`` (float32, same shapes as :func:`philox_words`)."""
    return to_uniform(philox_words(key, contexts, token_ids))


def vocab_uniforms(key: int, contexts, vocab_size: int) -> np.ndarray:
    """The uniforms of the whole vocabulary, one Philox call per 4 tokens.

    Args:
      key: 64-bit Philox key.
      contexts: int[..., C].
      vocab_size: V >= 1.

    Returns:
      float32[..., V], equal to ``uniforms(key, contexts, np.arange(V))``.
    """
    vocab_size = _check_vocab(vocab_size)
    states = context_states(key, contexts)
    groups = np.arange((vocab_size + 3) // 4, dtype=_U)
    words = np.stack(_candidate_words(key, states[..., None, :], groups), axis=-1)  # [..., G, 4]
    words = words.reshape(words.shape[:-2] + (-1,))[..., :vocab_size]
    return to_uniform(words)


def _check_vocab(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or int(vocab_size) < 1:
        raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
    return int(vocab_size)


def gumbel_noise(u) -> np.ndarray:
    """``-log(-log(max(u, float32 tiny)))`` in float32, as vLLM's CPU sampler (``GumbelWatermarker``)."""
    u = np.maximum(np.asarray(u, np.float32), np.finfo(np.float32).tiny)
    return -np.log(-np.log(u))


def gumbel_argmax(key: int, logits, contexts) -> np.ndarray:
    """Gumbel-max sampling with one key: ``argmax(float32(logits) + noise)`` (first index on ties).

    Args:
      key: 64-bit Philox key.
      logits: float[B, V] (after temperature / top-k / top-p; ``-inf`` allowed).
      contexts: int[B, C].

    Returns:
      int64[B] token ids.
    """
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise ValueError(f"logits must be [B, V], got shape {logits.shape}")
    ctx = np.asarray(contexts)
    if ctx.ndim != 2 or ctx.shape[0] != logits.shape[0]:
        raise ValueError(f"contexts must be [B, C] with B = {logits.shape[0]}, got shape {ctx.shape}")
    noise = gumbel_noise(vocab_uniforms(key, ctx, logits.shape[1]))
    return np.argmax(logits.astype(np.float32) + noise, axis=-1).astype(np.int64)


def sample_tokens(config: EngineConfig, logits, contexts, use_key_b=None) -> np.ndarray:
    """Watermarked tokens as vLLM draws them (every row watermarked; no deduplication skips).

    Args:
      config: :class:`VllmGumbelConfig` or :class:`VllmDualKeyGumbelConfig`.
      logits: float[B, V]; contexts: int[B, C] with ``C = config.context_width``.
      use_key_b: for ``dual_key_gumbel`` with 0 < alpha < 1, bool[B]: which rows the engine's
        (unkeyed) router sent to key B -- draw it as ``rng.random(B) < alpha``. Must be None
        otherwise (alpha 0 or 1 fixes the key).

    Returns:
      int64[B].
    """
    ctx = np.asarray(contexts)
    if ctx.ndim != 2 or ctx.shape[1] != config.context_width:
        raise ValueError(f"contexts must be [B, {config.context_width}], got shape {ctx.shape}")
    if not isinstance(config, VllmDualKeyGumbelConfig):
        if use_key_b is not None:
            raise ValueError("use_key_b applies to dual_key_gumbel only")
        return gumbel_argmax(config.key, logits, ctx)
    if config.alpha in (0.0, 1.0):
        if use_key_b is not None:
            raise ValueError("alpha is 0 or 1: the key is fixed, use_key_b must be None")
        return gumbel_argmax(config.key_b if config.alpha == 1.0 else config.key_a, logits, ctx)
    if use_key_b is None:
        raise ValueError("dual_key_gumbel with 0 < alpha < 1 needs use_key_b (the engine's unkeyed routing draw)")
    use_b = np.asarray(use_key_b)
    if use_b.dtype != np.bool_ or use_b.shape != (ctx.shape[0],):
        raise ValueError(f"use_key_b must be bool[{ctx.shape[0]}], got {use_b.dtype}{list(use_b.shape)}")
    return np.where(use_b, gumbel_argmax(config.key_b, logits, ctx), gumbel_argmax(config.key_a, logits, ctx))


__all__ = ["context_states", "gumbel_argmax", "gumbel_noise", "philox_words", "sample_tokens", "to_uniform",
           "uniforms", "vocab_uniforms"]
