"""SynthID-Text's n-gram hash, g-values and masks in NumPy, exact 64-bit integers (uint64 arithmetic
wrapping like torch's int64). Public face: :mod:`wmspec_jax.interop.hf_synthid`."""

from __future__ import annotations

import operator
from typing import Optional

import numpy as np

from wmspec_jax.interop.hf_synthid._config import (_MASK64, _U64, INCREMENT, MULTIPLIER, HFSynthIDConfig,
                                                  _check_config, _is_int, _table)


def _as_u64(x) -> np.ndarray:
    return np.asarray(x).astype(np.int64).view(np.uint64)


def _lcg(h: np.ndarray, x: np.ndarray, multiplier=MULTIPLIER, increment=INCREMENT) -> np.ndarray:
    """``(h + x) * multiplier + increment`` modulo 2**64 on uint64 arrays (torch's int64 wrap-around)."""
    with np.errstate(over="ignore"):
        return (h + x) * _U64(multiplier & _MASK64) + _U64(increment & _MASK64)


def _keys_u64(config) -> np.ndarray:
    return np.asarray(config.keys, dtype=np.int64).view(np.uint64)


def accumulate_hash(current_hash, data, multiplier: int = MULTIPLIER, increment: int = INCREMENT) -> np.ndarray:
    """``SynthIDTextWatermarkLogitsProcessor.accumulate_hash``: int64[...].

    Args:
      current_hash: int64[...] (broadcastable with ``data[..., 0]``).
      data: int64[..., L]; folded left to right: ``h <- (h + data[..., i]) * multiplier + increment``,
        with int64 two's-complement wrap-around.
    """
    h = _as_u64(current_hash)
    d = _as_u64(data)
    for i in range(d.shape[-1]):  # over the n-gram's positions, not over tokens
        h = _lcg(h, d[..., i], multiplier, increment)
    return np.asarray(h).view(np.int64)


def _check_ids(input_ids, name: str = "input_ids") -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"{name} must have shape (batch_size, length), got {ids.shape}")
    ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError(f"{name} holds negative token ids (min {ids.min()})")
    return ids


def _windows(ids: np.ndarray, width: int) -> np.ndarray:
    """int64[B, T - width + 1, width] sliding windows (empty when T < width)."""
    b, t = ids.shape
    if t < width:
        return np.zeros((b, 0, width), np.int64)
    return np.lib.stride_tricks.sliding_window_view(ids, width, axis=1)


def _ngram_hashes(ids: np.ndarray, ngram_len: int) -> np.ndarray:
    """uint64[B, T - n + 1]: ``accumulate_hash(1, ngram)`` of every n-gram (before the keys)."""
    w = _as_u64(_windows(ids, ngram_len))
    h = np.ones(w.shape[:2], np.uint64)
    for i in range(ngram_len):
        h = _lcg(h, w[..., i])
    return h


def _keyed(config, hashes: np.ndarray) -> np.ndarray:
    """uint64[..., depth]: ``accumulate_hash(hash, [key_l])`` for each key."""
    return _lcg(hashes[..., None], _keys_u64(config))


def _lookup(config, keyed_u64: np.ndarray) -> np.ndarray:
    table = _table(config.sampling_table_seed, config.sampling_table_size)
    return table[keyed_u64.view(np.int64) % np.int64(config.sampling_table_size)]


def ngram_keys(config: HFSynthIDConfig, ngrams) -> np.ndarray:
    """``compute_ngram_keys``: int64[B, N, depth] for n-grams int[B, N, ngram_len] (the same int64 bits)."""
    _check_config(config)
    g = np.asarray(ngrams)
    if g.ndim != 3 or g.shape[2] != config.ngram_len:
        raise ValueError(f"ngrams must have shape (batch_size, num_ngrams, {config.ngram_len}), got {g.shape}")
    if g.dtype == np.bool_ or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"ngrams must hold integer token ids, got dtype {g.dtype}")
    h = np.ones(g.shape[:2], np.uint64)
    w = _as_u64(g)
    for i in range(config.ngram_len):
        h = _lcg(h, w[..., i])
    return _keyed(config, h).view(np.int64)


def sample_g_values(config: HFSynthIDConfig, keys_int64) -> np.ndarray:
    """``sample_g_values``: int64[...] = ``table[keys mod S]`` (floor modulo of the signed int64)."""
    _check_config(config)
    k = np.asarray(keys_int64)
    if k.dtype == np.bool_ or not np.issubdtype(k.dtype, np.integer):
        raise ValueError(f"ngram keys must be integers, got dtype {k.dtype}")
    return _lookup(config, k.astype(np.int64).view(np.uint64))


def g_values(config: HFSynthIDConfig, input_ids) -> np.ndarray:
    """``SynthIDTextWatermarkLogitsProcessor.compute_g_values``: int64[B, T - (ngram_len - 1), depth].

    Entry ``[b, j, l]`` is the g-value of token ``input_ids[b, j + ngram_len - 1]`` after its context
    ``input_ids[b, j : j + ngram_len - 1]`` at depth l. Empty along axis 1 when T < ngram_len.
    """
    _check_config(config)
    ids = _check_ids(input_ids)
    return _lookup(config, _keyed(config, _ngram_hashes(ids, config.ngram_len)))


def _context_hashes(ids: np.ndarray, ngram_len: int) -> np.ndarray:
    """uint64[B, T - n + 1]: hash of each n-gram's context ``ids[:, j : j + n - 1]``."""
    b, t = ids.shape
    num = max(t - ngram_len + 1, 0)
    h = np.ones((b, num), np.uint64)
    if ngram_len > 1 and num:
        w = _as_u64(_windows(ids[:, : t - 1], ngram_len - 1))
        for i in range(ngram_len - 1):
            h = _lcg(h, w[..., i])
    return h


def _first_in_window(hashes: np.ndarray, history: int) -> np.ndarray:
    """bool[B, N]: True where ``hashes[b, j]`` is NOT among the last ``history`` values of row b nor
    (while j < history) equal to 0, the value the history starts filled with; as the processor's
    first-in, first-out history of size ``history``. Vectorised: each value's previous occurrence
    comes from one lexicographic sort of (row, value, position)."""
    b, n = hashes.shape
    pos = np.broadcast_to(np.arange(n), (b, n))
    rows = np.broadcast_to(np.arange(b)[:, None], (b, n))
    flat_h, flat_p, flat_r = hashes.ravel(), pos.ravel(), rows.ravel()
    order = np.lexsort((flat_p, flat_h, flat_r))
    r, h, p = flat_r[order], flat_h[order], flat_p[order]
    prev_sorted = np.full(b * n, -1, np.int64)
    if b * n > 1:
        same = (r[1:] == r[:-1]) & (h[1:] == h[:-1])
        prev_sorted[1:] = np.where(same, p[:-1], -1)
    prev = np.empty(b * n, np.int64)
    prev[order] = prev_sorted
    prev = prev.reshape(b, n)
    repeated = (prev >= 0) & (prev >= pos - history)
    repeated |= (hashes == 0) & (pos < history)
    return ~repeated


def context_repetition_mask(config: HFSynthIDConfig, input_ids) -> np.ndarray:
    """``compute_context_repetition_mask``: bool[B, T - (ngram_len - 1)], True = first occurrence.

    Position j is False when the hash of its context ``input_ids[:, j : j + ngram_len - 1]`` equals one
    of the previous ``context_history_size`` context hashes of the row, or is 0 while fewer than
    ``context_history_size`` contexts came before (the processor's history starts filled with zeros).
    """
    _check_config(config)
    ids = _check_ids(input_ids)
    return _first_in_window(_context_hashes(ids, config.ngram_len), config.context_history_size)


def _eos_ids(eos_token_id) -> Optional[np.ndarray]:
    if eos_token_id is None:
        return None
    values = [eos_token_id] if _is_int(eos_token_id) else eos_token_id
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"eos_token_id must be an int, a sequence of ints or None, got {eos_token_id!r}")
    values = list(values)
    if not values or not all(_is_int(v) and operator.index(v) >= 0 for v in values):
        raise ValueError(f"eos_token_id must hold non-negative integers, got {eos_token_id!r}")
    return np.asarray([operator.index(v) for v in values], np.int64)


def eos_token_mask(input_ids, eos_token_id) -> np.ndarray:
    """``compute_eos_token_mask``: bool[B, T], True before the row's first end-of-sequence token.

    ``eos_token_id`` is an int (as transformers) or a sequence of ints (any of them ends the text).
    """
    ids = _check_ids(input_ids)
    eos = _eos_ids(eos_token_id)
    if eos is None:
        raise ValueError("eos_token_mask needs an eos_token_id")
    return np.cumsum(np.isin(ids, eos), axis=1) == 0


__all__ = ["accumulate_hash", "context_repetition_mask", "eos_token_mask", "g_values", "ngram_keys",
           "sample_g_values"]
