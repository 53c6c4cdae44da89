"""vLLM's Philox PRF in JAX over the whole vocabulary (uint32 arithmetic only, jitted): uniforms and
Gumbel-max sampling, bit-equal to the NumPy ones. Public face: :mod:`wmspec_jax.interop.engine_gumbel`."""

from __future__ import annotations

import numpy as np

from wmspec_jax.interop.engine_gumbel._config import _MASK
from wmspec_jax.interop.engine_gumbel._prf import _CONTEXT_DOMAIN, _M0, _M1, _TOKEN_DOMAIN, _W0, _W1, _check_vocab


def _jax_philox(c0, c1, c2, c3, k0, k1):
    import jax
    import jax.numpy as jnp

    def mulhilo(m, x):  # 32x32 -> 64-bit product from 16-bit limbs (no uint64 under x64-off)
        m_lo, m_hi = jnp.uint32(m & 0xFFFF), jnp.uint32(m >> 16)
        x_lo, x_hi = x & jnp.uint32(0xFFFF), x >> jnp.uint32(16)
        ll, lh, hl, hh = x_lo * m_lo, x_lo * m_hi, x_hi * m_lo, x_hi * m_hi
        mid = (ll >> 16) + (lh & jnp.uint32(0xFFFF)) + (hl & jnp.uint32(0xFFFF))
        return hh + (lh >> 16) + (hl >> 16) + (mid >> 16), x * jnp.uint32(m)

    def round_(_, carry):
        c0, c1, c2, c3, k0, k1 = carry
        hi0, lo0 = mulhilo(_M0, c0)
        hi1, lo1 = mulhilo(_M1, c2)
        # the key bump after round 10 is never used, so every round may bump it
        return hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0, k0 + jnp.uint32(_W0), k1 + jnp.uint32(_W1)

    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in (c0, c1, c2, c3, k0, k1)))
    carry = tuple(jnp.broadcast_to(jnp.asarray(x, jnp.uint32), shape) for x in (c0, c1, c2, c3, k0, k1))
    return jax.lax.fori_loop(0, 10, round_, carry)[:4]


def _jax_to_uniform(words):
    # float32((m + 1) * 2^-24) is exact; the float32 just below it equals vLLM's
    # float32((m + 1) / (2^24 + 1)) for every m (the Triton kernel's conversion).
    import jax
    import jax.numpy as jnp

    scaled = ((words >> 8) + jnp.uint32(1)).astype(jnp.float32) * jnp.float32(2.0**-24)
    return jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(scaled, jnp.uint32) - jnp.uint32(1), jnp.float32)


def _jax_context_state(k0, k1, contexts):
    """uint32[..., 4]: the Philox state ``s`` of contexts int32/uint32[..., C] under the key words (k0, k1)."""
    import jax
    import jax.numpy as jnp

    ctx = jnp.asarray(contexts)
    ctx = jax.lax.bitcast_convert_type(ctx.astype(jnp.int32), jnp.uint32) if ctx.dtype != jnp.uint32 else ctx
    width = ctx.shape[-1]
    prefix = ctx.shape[:-1]
    s = [jnp.full(prefix, _CONTEXT_DOMAIN, jnp.uint32), jnp.full(prefix, width, jnp.uint32),
         jnp.zeros(prefix, jnp.uint32), jnp.zeros(prefix, jnp.uint32)]
    for off in range(0, width, 4):
        block = [ctx[..., off + j] if off + j < width else jnp.full(prefix, _MASK - j, jnp.uint32) for j in range(4)]
        s = list(_jax_philox(*(s[j] ^ block[j] for j in range(4)), k0 ^ jnp.uint32(off), k1))
    return jnp.stack(s, axis=-1)


def _jax_token_uniforms(k0, k1, state, tokens):
    """float32[...]: the uniforms of ``tokens`` (uint32, broadcast against ``state[..., 0]``) after the
    context states ``state`` uint32[..., 4] (:func:`_jax_context_state`) under the key words (k0, k1)."""
    import jax.numpy as jnp

    t = jnp.asarray(tokens, jnp.uint32)
    s = [state[..., j] for j in range(4)]
    words = _jax_philox(t >> jnp.uint32(2), s[0], s[1], s[2], k0 ^ s[3], k1 ^ jnp.uint32(_TOKEN_DOMAIN))
    lane = t & jnp.uint32(3)
    word = jnp.where(lane == 0, words[0], jnp.where(lane == 1, words[1], jnp.where(lane == 2, words[2], words[3])))
    return _jax_to_uniform(word)


def _jax_vocab_uniforms(kw, contexts, vocab_size: int):
    import jax.numpy as jnp

    kw = jnp.asarray(kw, jnp.uint32)
    k0, k1 = kw[0], kw[1]
    s = _jax_context_state(k0, k1, contexts)
    groups = jnp.arange((vocab_size + 3) // 4, dtype=jnp.uint32)
    s = [s[..., j, None] for j in range(4)]
    words = jnp.stack(_jax_philox(groups, s[0], s[1], s[2], k0 ^ s[3], k1 ^ jnp.uint32(_TOKEN_DOMAIN)), axis=-1)
    words = words.reshape(words.shape[:-2] + (-1,))[..., :vocab_size]
    return _jax_to_uniform(words)


_JITTED = {}


def _jitted(name, fn, static):
    if name not in _JITTED:
        import jax

        _JITTED[name] = jax.jit(fn, static_argnums=static)
    return _JITTED[name]


def vocab_uniforms_jax(kw, contexts, vocab_size: int):
    """JAX twin of :func:`vocab_uniforms` (jitted; uint32 arithmetic only, no x64).

    Args:
      kw: uint32[2] from :func:`key_words` (a 64-bit key as two words).
      contexts: int32/uint32[..., C] (``-1`` pads; token ids < 2**31 as int32).
      vocab_size: V (static).

    Returns:
      float32[..., V], bit-equal to :func:`vocab_uniforms`.
    """
    _check_jax_args(kw, contexts)
    return _jitted("vocab", _jax_vocab_uniforms, (2,))(kw, contexts, _check_vocab(vocab_size))


def _check_jax_args(kw, contexts) -> None:
    if tuple(np.shape(kw)) != (2,) or np.asarray(kw).dtype != np.uint32:
        raise ValueError("kw must be uint32[2] (use key_words(key))")
    dtype = getattr(contexts, "dtype", np.asarray(contexts).dtype)
    if np.dtype(dtype).kind not in "iu" or len(np.shape(contexts)) < 1 or np.shape(contexts)[-1] < 1:
        raise ValueError(f"contexts must be an integer array [..., C] with C >= 1, got {dtype}{list(np.shape(contexts))}")


def _jax_gumbel_argmax(kw, logits, contexts):
    import jax.numpy as jnp

    u = _jax_vocab_uniforms(kw, contexts, logits.shape[-1])
    u = jnp.maximum(u, jnp.finfo(jnp.float32).tiny)
    return jnp.argmax(logits.astype(jnp.float32) - jnp.log(-jnp.log(u)), axis=-1)


def gumbel_argmax_jax(kw, logits, contexts):
    """JAX twin of :func:`gumbel_argmax`: ``kw`` uint32[2], logits float[B, V], contexts int32[B, C] -> int32[B]."""
    _check_jax_args(kw, contexts)
    if len(np.shape(logits)) != 2 or np.shape(contexts)[:-1] != np.shape(logits)[:1]:
        raise ValueError(f"logits must be [B, V] and contexts [B, C], got {list(np.shape(logits))} and "
                         f"{list(np.shape(contexts))}")
    return _jitted("argmax", _jax_gumbel_argmax, ())(kw, logits, contexts)


__all__ = ["gumbel_argmax_jax", "vocab_uniforms_jax"]
