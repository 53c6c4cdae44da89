"""Windowed scores: find a watermarked span inside a longer text, with a calibrated p-value.

A document may be watermarked only in part (watermarked text pasted into
human text). The whole-text test then dilutes the span's evidence with the
human tokens. The windowed score tests every window of a fixed, data-free
set and reports the best one, corrected for the number of windows tried:

* **Windows.** For a text of n positions (after its start): lengths
  ℓ = w, 2w, 4w, ... < n (w = ``min_window``), each at starts 0, ℓ/2, ℓ, ...
  (half-overlapping) while the window fits, plus one window ending at n (so
  the tail is covered), plus the whole text. The set depends on n and w
  only — never on the tokens or the key — so it is fixed before looking at
  the evidence. For n = 512, w = 16 there are 120 windows.
* **Per window** the detector's own exact null: a sum of per-token terms
  (:class:`.common.TokenTerms`) is Gamma(k, 1) (Gumbel detectors choosing a
  stream without looking at the y's) or Binomial(k m', ½) (SynthID mean
  test) for the window's k scored tokens.
* **Correction.** Bonferroni: p = min(1, W · min_w p_w), W the number of
  windows of that text. Under H0 every window's p-value is exact, so
  P(p ≤ α) ≤ Σ_w P(p_w ≤ α / W) = α: calibrated whatever the dependence
  between overlapping windows. It is conservative (overlapping windows are
  positively correlated; the measured FPR is in the README, "Partly
  watermarked texts"), the price of a guarantee that needs no simulation.
  Beyond the paper, which scores whole texts only.

The best window's location ``[start, end)`` (token positions, as the
statistics') is reported with its own uncorrected p-value.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.detect import pvalues
from wmspec_jax.detect.common import TokenTerms

DEFAULT_MIN_WINDOW = 16
NULLS = ("gamma", "binomial")


class WindowScores(NamedTuple):
    """Best window of each text (all [B]).

    Attributes:
      log_pvalue: float32 log of the corrected p-value min(1, W p_best)
        (0 where no token is scored).
      pvalue: float32 its exp.
      start, end: int32 the best window's positions [start, end) (absolute
        buffer positions, like ``stats.starts``; start = end where nothing is scored).
      window_log_pvalue: float32 the best window's own (uncorrected) log p.
      num_windows: int32 W, the windows tested for that text.
      num_scored: int32 scored tokens inside the best window.
      score: float32 the best window's sum of terms (NaN where nothing is scored).
    """

    log_pvalue: jax.Array
    pvalue: jax.Array
    start: jax.Array
    end: jax.Array
    window_log_pvalue: jax.Array
    num_windows: jax.Array
    num_scored: jax.Array
    score: jax.Array


def window_grid(max_positions: int, min_window: int = DEFAULT_MIN_WINDOW) -> tuple:
    """The static part of the window set for texts of up to ``max_positions`` positions.

    Returns:
      (offsets int32[G], sizes int32[G], tail_sizes int32[K]): the
      half-overlapping windows (offset relative to the text's start) of every
      length ℓ = w 2^k < max_positions, and the K lengths (one end-aligned
      window each). Which of them a text uses depends on its length n
      (:func:`window_bounds`).
    """
    min_window = _check_min_window(min_window)
    offsets, sizes, tails = [], [], []
    size = min_window
    while size < max_positions:
        step = max(size // 2, 1)
        for off in range(0, max_positions - size + 1, step):
            offsets.append(off)
            sizes.append(size)
        tails.append(size)
        size *= 2
    return (np.asarray(offsets, np.int32), np.asarray(sizes, np.int32), np.asarray(tails, np.int32))


def _check_min_window(min_window) -> int:
    if isinstance(min_window, bool) or not isinstance(min_window, (int, np.integer)) or min_window < 2:
        raise ValueError(f"min_window must be an int >= 2, got {min_window!r}")
    return int(min_window)


def window_bounds(n, offsets, sizes, tails):
    """Relative [lo, hi) and validity of every candidate window of texts of n positions.

    Args:
      n: int32[B] positions after each text's start.
      offsets, sizes, tails: :func:`window_grid`.

    Returns:
      (lo, hi, valid): int32[B, C], int32[B, C], bool[B, C] with
      C = G + K + 1 (grid, end-aligned tails, whole text).
    """
    n = jnp.asarray(n, jnp.int32)[:, None]
    off = jnp.asarray(offsets)[None]
    size = jnp.asarray(sizes)[None]
    grid_valid = off + size <= n
    tail = jnp.asarray(tails)[None]
    tail_lo = n - tail
    step = jnp.maximum(tail // 2, 1)
    # an end-aligned window adds one only where the grid does not already end at n
    tail_valid = (tail < n) & (tail_lo % step != 0)
    whole_valid = jnp.all(jnp.asarray(sizes)[None] != n, axis=1, keepdims=True) & (n > 0)
    lo = jnp.concatenate([jnp.broadcast_to(off, grid_valid.shape), jnp.maximum(tail_lo, 0), jnp.zeros_like(n)], 1)
    hi = jnp.concatenate([jnp.broadcast_to(off + size, grid_valid.shape), jnp.broadcast_to(n, tail_lo.shape), n], 1)
    valid = jnp.concatenate([grid_valid, tail_valid, whole_valid], 1)
    return lo, hi, valid


@functools.partial(jax.jit, static_argnames=("null", "trials", "min_window"))
def _scan(terms, mask, starts, lengths, null: str, trials: int, min_window: int):
    bsz, length = mask.shape
    offsets, sizes, tails = window_grid(length, min_window)
    n = jnp.maximum(lengths - starts, 0)
    lo, hi, valid = window_bounds(n, offsets, sizes, tails)
    lo, hi = lo + starts[:, None], hi + starts[:, None]
    zero = jnp.zeros((bsz, 1), jnp.float32)
    csum = jnp.concatenate([zero, jnp.cumsum(jnp.where(mask, terms, 0.0).astype(jnp.float32), axis=1)], 1)
    ccount = jnp.concatenate([zero.astype(jnp.int32), jnp.cumsum(mask.astype(jnp.int32), axis=1)], 1)
    total = jnp.take_along_axis(csum, hi, 1) - jnp.take_along_axis(csum, lo, 1)
    count = jnp.take_along_axis(ccount, hi, 1) - jnp.take_along_axis(ccount, lo, 1)
    if null == "gamma":
        log_p = pvalues.gamma_log_sf(count, total)
    else:
        log_p = pvalues.binomial_half_log_sf(jnp.round(total), count * trials)
    log_p = jnp.where(valid & (count > 0), log_p, 0.0)
    best = jnp.argmin(log_p, axis=1)
    take = lambda x: jnp.take_along_axis(x, best[:, None], 1)[:, 0]  # noqa: E731
    best_lp, num_windows = take(log_p), jnp.sum(valid, axis=1, dtype=jnp.int32)
    corrected = jnp.minimum(best_lp + jnp.log(jnp.maximum(num_windows, 1).astype(jnp.float32)), 0.0)
    scored = jnp.sum(mask, axis=1) > 0
    corrected = jnp.where(scored, corrected, 0.0)
    k = take(count)
    start = jnp.where(scored, take(lo), starts)
    end = jnp.where(scored, take(hi), starts)
    return WindowScores(corrected, jnp.exp(corrected), start, end, jnp.where(scored, best_lp, 0.0), num_windows,
                        jnp.where(scored, k, 0), jnp.where(scored, take(total), jnp.nan))


def scan(terms: TokenTerms, min_window: int = DEFAULT_MIN_WINDOW) -> WindowScores:
    """The best window of each text and its corrected p-value (module doc).

    Args:
      terms: per-token terms of a detector (``detector.token_terms(stats)``).
      min_window: the shortest window w (positions).

    Returns:
      :class:`WindowScores`. Texts with at most w positions have one window
      (the whole text): their p-value is the detector's own.
    """
    if not isinstance(terms, TokenTerms):
        raise TypeError(f"expected TokenTerms (detector.token_terms(stats)), got {type(terms).__name__}")
    if terms.null not in NULLS:
        raise ValueError(f"unknown null {terms.null!r}; expected one of {NULLS}")
    min_window = _check_min_window(min_window)
    mask = jnp.asarray(terms.mask, bool)
    if mask.ndim != 2 or np.shape(terms.terms) != mask.shape:
        raise ValueError(f"terms and mask must both be [B, L], got {np.shape(terms.terms)} and {mask.shape}")
    return _scan(jnp.asarray(terms.terms, jnp.float32), mask, jnp.asarray(terms.starts, jnp.int32),
                 jnp.asarray(terms.lengths, jnp.int32), terms.null, int(terms.trials), min_window)


def score_windows(detector, stats, *, source=None, rng=None, min_window: int = DEFAULT_MIN_WINDOW) -> WindowScores:
    """:func:`scan` of a detector's per-token terms on ``stats`` (checks the provenance); ``rng`` is ignored
    (:meth:`.common.Detector.score`)."""
    return scan(detector.token_terms(stats, source=source, rng=rng), min_window)


__all__ = ["DEFAULT_MIN_WINDOW", "WindowScores", "scan", "score_windows", "window_bounds", "window_grid"]
