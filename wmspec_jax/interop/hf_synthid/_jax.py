"""SynthID-Text's logits processor in JAX (jit-able; 64-bit hashes as pairs of uint32 words, x64 off):
the vocabulary's g-values, the score update and the processor's state. Public face:
:mod:`wmspec_jax.interop.hf_synthid`."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import validation
from wmspec_jax.interop.hf_synthid._config import (_MASK64, INCREMENT, MULTIPLIER, HFSynthIDConfig, _check_config,
                                                  _check_int, _table)


def _split64(value: int) -> tuple[int, int]:
    u = value & _MASK64
    return u >> 32, u & 0xFFFFFFFF


_M_HI, _M_LO = _split64(MULTIPLIER)


def _mul_wide(a, b_const: int):
    """(hi, lo) uint32 words of the 64-bit product of uint32 ``a`` and a 32-bit constant."""
    m16 = jnp.uint32(0xFFFF)
    b0, b1 = jnp.uint32(b_const & 0xFFFF), jnp.uint32(b_const >> 16)
    a0, a1 = a & m16, a >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 16) + (p01 & m16) + (p10 & m16)
    hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
    lo = (mid << 16) | (p00 & m16)
    return hi, lo


def _add64(a_hi, a_lo, b_hi, b_lo):
    lo = a_lo + b_lo
    return a_hi + b_hi + (lo < a_lo).astype(jnp.uint32), lo


def _lcg64(h_hi, h_lo, x_hi, x_lo):
    """``(h + x) * MULTIPLIER + 1`` modulo 2**64 on (hi, lo) uint32 word pairs."""
    s_hi, s_lo = _add64(h_hi, h_lo, x_hi, x_lo)
    p_hi, p_lo = _mul_wide(s_lo, _M_LO)
    p_hi = p_hi + s_lo * jnp.uint32(_M_HI) + s_hi * jnp.uint32(_M_LO)
    return _add64(p_hi, p_lo, jnp.uint32(0), jnp.uint32(INCREMENT))


def _floor_mod64(hi, lo, size: int):
    """Floor modulo ``size`` (<= 2**24) of the signed int64 held in (hi, lo): uint32 in [0, size)."""
    if size & (size - 1) == 0:  # power of two: the low bits of the two's complement
        return lo & jnp.uint32(size - 1)
    s = jnp.uint32(size)
    r = jnp.zeros(jnp.shape(lo), jnp.uint32)
    for word in (hi, lo):  # Horner over the 8 bytes: r * 256 + byte < 2**32 since r < size <= 2**24
        for shift in (24, 16, 8, 0):
            r = (r * jnp.uint32(256) + ((word >> shift) & jnp.uint32(0xFF))) % s
    c = (2 ** 64) % size  # a negative int64 is its unsigned value minus 2**64
    return jnp.where(hi >= jnp.uint32(2 ** 31), (r + jnp.uint32(size - c)) % s, r)


def _context_hash64(context):
    """(hi, lo) uint32[B]: ``accumulate_hash(1, context)`` of int32[B, n - 1] (non-negative ids)."""
    b = context.shape[0]
    h_hi, h_lo = jnp.zeros((b,), jnp.uint32), jnp.ones((b,), jnp.uint32)
    zero = jnp.uint32(0)
    for i in range(context.shape[1]):
        h_hi, h_lo = _lcg64(h_hi, h_lo, zero, context[:, i].astype(jnp.uint32))
    return h_hi, h_lo


def _g_after_hash(table, h_hi, h_lo, tokens, config: HFSynthIDConfig):
    """int32[..., depth]: the g-values of ``tokens`` (uint32) after the context hashes (h_hi, h_lo)
    (uint32, broadcast against ``tokens``) — the n-gram's hash is one more ``accumulate_hash`` step
    (traceable; ``table`` int32[S])."""
    size = config.sampling_table_size
    keys = [_split64(k) for k in config.keys]
    k_hi = jnp.asarray(np.array([k[0] for k in keys], np.uint32))
    k_lo = jnp.asarray(np.array([k[1] for k in keys], np.uint32))
    tokens = jnp.asarray(tokens, jnp.uint32)
    if size & (size - 1) == 0:
        # the index is the low log2(S) bits, which only depend on the low words: 32-bit arithmetic
        ml = jnp.uint32(_M_LO)
        lo_v = (h_lo + tokens) * ml + jnp.uint32(1)
        idx = ((lo_v[..., None] + k_lo) * ml + jnp.uint32(1)) & jnp.uint32(size - 1)
    else:
        t_hi, t_lo = _lcg64(h_hi, h_lo, jnp.uint32(0), tokens)
        f_hi, f_lo = _lcg64(t_hi[..., None], t_lo[..., None], k_hi, k_lo)
        idx = _floor_mod64(f_hi, f_lo, size)
    return table[idx.astype(jnp.int32)]


def _vocab_g(table, contexts, config: HFSynthIDConfig, vocab_size: int):
    """int32[B, V, depth] (traceable; ``table`` int32[S])."""
    h_hi, h_lo = _context_hash64(contexts)
    v = jnp.arange(vocab_size, dtype=jnp.uint32)
    return _g_after_hash(table, h_hi[:, None], h_lo[:, None], v[None, :], config)


@functools.lru_cache(maxsize=8)
def _device_table(seed: int, size: int) -> np.ndarray:
    """The table as int32 NumPy (read-only): handed to the jitted functions as an argument, so it is
    neither baked into each compiled program nor a cached device array that a trace could capture."""
    t = _table(seed, size).astype(np.int32)
    t.setflags(write=False)
    return t


@functools.partial(jax.jit, static_argnames=("config", "vocab_size"))
def _vocab_g_jit(table, contexts, config, vocab_size):
    return _vocab_g(table, contexts, config, vocab_size)


def _dtype(x):
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def _check_token_array(x, width: int, name: str):
    """int32[B, width] from int[B, width] token ids in [0, 2**31) (values checked when concrete)."""
    shape = np.shape(x)
    if len(shape) != 2 or shape[1] != width:
        raise ValueError(f"{name} must have shape (batch_size, {width}), got {shape}")
    dtype = _dtype(x)
    if dtype == np.bool_ or not np.issubdtype(dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {dtype}")
    contexts = x
    c = validation.concrete(contexts)
    if c is not None and c.size and (c.min() < 0 or c.max() >= 2 ** 31):
        raise ValueError(f"{name} must hold token ids in [0, 2**31)")
    return jnp.asarray(contexts).astype(jnp.int32) if c is None else jnp.asarray(c.astype(np.int32))


def _check_contexts(config, contexts):
    return _check_token_array(contexts, config.ngram_len - 1, "contexts")


def vocab_g_values(config: HFSynthIDConfig, contexts, vocab_size: int) -> jax.Array:
    """g-values of every candidate next token after each context: int32[B, vocab_size, depth] (JAX).

    ``[b, v, l]`` equals :func:`g_values` of the n-gram ``(*contexts[b], v)`` at depth l, i.e. what
    ``SynthIDTextWatermarkLogitsProcessor._compute_keys`` + ``sample_g_values`` give. 64-bit hashes
    are computed in uint32 word pairs (x64 stays off); for a power-of-two table size only the low
    words matter and the computation is pure uint32.

    Args:
      config: the watermark settings (static under jit).
      contexts: int[B, ngram_len - 1] token ids in [0, 2**31), oldest first.
      vocab_size: V, the scores' width (static).
    """
    _check_config(config)
    vocab_size = _check_int(vocab_size, "vocab_size", 1, 2 ** 31 - 1)
    contexts = _check_contexts(config, contexts)
    table = _device_table(config.sampling_table_seed, config.sampling_table_size)
    return _vocab_g_jit(table, contexts, config=config, vocab_size=vocab_size)


@jax.jit
def _update_scores_jit(scores, g):
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=1)

    def layer(p, g_l):
        mass = jnp.sum(g_l * p, axis=1, keepdims=True)
        return p * (1.0 + g_l - mass), None

    probs, _ = jax.lax.scan(layer, probs, jnp.moveaxis(g.astype(jnp.float32), 2, 0))
    log_probs = jnp.log(probs)
    return jnp.where(jnp.isfinite(log_probs), log_probs, jnp.finfo(jnp.float32).min)


def update_scores(scores, g: jax.Array) -> jax.Array:
    """``SynthIDTextWatermarkLogitsProcessor.update_scores``: float32[B, V] watermarked log-probs.

    ``p = softmax(scores)``; for each depth l in order ``p <- p * (1 + g_l - sum_v g_l[v] p[v])``;
    returns ``log p`` with non-finite entries (p = 0, e.g. tokens a top-k warper set to -inf) replaced
    by ``finfo(float32).min``, as transformers.

    Args:
      scores: float[B, V] logits or log-probabilities (after the warpers); no NaN, no row all -inf.
      g: int[B, V, depth] in {0, 1}, e.g. from :func:`vocab_g_values`.
    """
    validation.check_logits(scores, "scores")
    # the shapes get names of their own: ``g`` is the array passed on below
    scores_shape, g_shape = np.shape(scores), np.shape(g)
    if len(scores_shape) != 2 or len(g_shape) != 3 or g_shape[:2] != scores_shape:
        raise ValueError(f"scores must be (B, V) and g_values (B, V, depth); got {scores_shape} and {g_shape}")
    return _update_scores_jit(jnp.asarray(scores, jnp.float32), jnp.asarray(g))


def watermarked_log_probs(config: HFSynthIDConfig, contexts, logits) -> jax.Array:
    """The processor's output for non-repeated contexts: float32[B, V] (JAX, jit-able).

    ``update_scores(logits, vocab_g_values(config, contexts, V))``: sampling from its softmax is
    sampling from transformers' watermarked distribution. In ``generate`` the processor runs after
    the warpers, so ``logits`` must be what they produce: the model's float32 logits divided by the
    temperature, then top-k (transformers' default top_k is 50), top-p, min-p ... applied (-inf on
    removed tokens). A context that repeats one of the last ``context_history_size`` contexts is not
    watermarked by transformers (its scores pass through): :func:`process_scores` follows that rule
    and the processor's zero-initialised context; this function does not.

    Args:
      config: the watermark settings (static).
      contexts: int[B, ngram_len - 1] the previous ngram_len - 1 tokens of each row, oldest first.
      logits: float[B, V] warped logits.
    """
    _check_config(config)
    _check_contexts(config, contexts)
    validation.check_logits(logits, "logits")
    shape = np.shape(logits)
    if len(shape) != 2 or shape[0] != np.shape(contexts)[0]:
        raise ValueError(f"logits must have shape (batch_size, vocab_size) matching contexts, got {shape}")
    g = vocab_g_values(config, contexts, shape[1])
    return _update_scores_jit(jnp.asarray(logits, jnp.float32), g)


class SynthIDState(NamedTuple):
    """``SynthIDTextWatermarkState`` as a JAX pytree.

    Attributes:
      context: int32[B, ngram_len - 1] the current context (zeros before the first call).
      history_hi, history_lo: uint32[B, context_history_size] the words of the last context hashes,
        newest first (zeros at the start, as transformers).
      num_calls: int32[] how many scores the processor has seen.
    """

    context: jax.Array
    history_hi: jax.Array
    history_lo: jax.Array
    num_calls: jax.Array


def init_state(config: HFSynthIDConfig, batch_size: int) -> SynthIDState:
    """The processor's state before its first call (its ``_init_state``)."""
    _check_config(config)
    batch_size = _check_int(batch_size, "batch_size", 1)
    h = config.context_history_size
    return SynthIDState(
        context=jnp.zeros((batch_size, config.ngram_len - 1), jnp.int32),
        history_hi=jnp.zeros((batch_size, h), jnp.uint32),
        history_lo=jnp.zeros((batch_size, h), jnp.uint32),
        num_calls=jnp.zeros((), jnp.int32),
    )


@functools.partial(jax.jit, static_argnames=("config",))
def _process_jit(table, state, last_token, scores, config):
    n = config.ngram_len
    first = state.num_calls == 0
    shifted = jnp.concatenate([state.context, last_token[:, None]], axis=1)[:, 1:]
    context = jnp.where(first, state.context, shifted)
    num_calls = state.num_calls + 1
    g = _vocab_g(table, context, config, scores.shape[1])
    updated = _update_scores_jit(scores, g)
    c_hi, c_lo = _context_hash64(context)
    repeated = jnp.any((state.history_hi == c_hi[:, None]) & (state.history_lo == c_lo[:, None]), axis=1)
    hist_hi = jnp.concatenate([c_hi[:, None], state.history_hi], axis=1)[:, :-1]
    hist_lo = jnp.concatenate([c_lo[:, None], state.history_lo], axis=1)[:, :-1]
    out = jnp.where(repeated[:, None], scores, updated)
    if config.skip_first_ngram_calls:
        skip = num_calls < n
        out = jnp.where(skip, scores, out)
        hist_hi = jnp.where(skip, state.history_hi, hist_hi)
        hist_lo = jnp.where(skip, state.history_lo, hist_lo)
    return out, SynthIDState(context, hist_hi, hist_lo, num_calls)


def process_scores(config: HFSynthIDConfig, state: SynthIDState, last_token, scores):
    """One call of ``SynthIDTextWatermarkLogitsProcessor.__call__``, as a pure function (JAX).

    Returns ``(new_scores float32[B, V], new_state)``. On the first call (``num_calls == 0``) the
    context stays the initial zeros and ``last_token`` is ignored (transformers ignores the prompt);
    later calls shift ``last_token`` (the token sampled at the previous call, ``input_ids[:, -1]``)
    into the context. Rows whose context hash is in the history get ``scores`` back unchanged, the
    others :func:`update_scores`; with ``skip_first_ngram_calls`` the first ``ngram_len - 1`` calls
    return ``scores`` and leave the history as it was.

    Args:
      config: the watermark settings (static).
      state: from :func:`init_state` or the previous call.
      last_token: int[B] the last token of each row.
      scores: float[B, V] the warped logits (see :func:`watermarked_log_probs` for the order).
    """
    _check_config(config)
    validation.check_logits(scores, "scores")
    b = np.shape(scores)[0]
    if len(np.shape(scores)) != 2 or np.shape(last_token) != (b,) or np.shape(state.context)[0] != b:
        raise ValueError(f"scores (B, V), last_token (B,) and the state must share B; got {np.shape(scores)}, "
                         f"{np.shape(last_token)}, {np.shape(state.context)}")
    last = _check_token_array(np.reshape(last_token, (b, 1)) if validation.is_concrete(last_token)
                              else jnp.reshape(last_token, (b, 1)), 1, "last_token")[:, 0]
    table = _device_table(config.sampling_table_seed, config.sampling_table_size)
    return _process_jit(table, state, last, jnp.asarray(scores, jnp.float32), config=config)


__all__ = ["SynthIDState", "init_state", "process_scores", "update_scores", "vocab_g_values", "watermarked_log_probs"]
