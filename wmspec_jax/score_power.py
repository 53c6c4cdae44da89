"""Detection power over n tokens from the exact per-token score laws (:mod:`wmspec_jax.score_law`).

The approximation is one: the n scored tokens are independent, each with the per-token law of
:mod:`wmspec_jax.score_law` (the same P and Q at every position; with ``lookahead=K`` the stationary
mixture over a step's slots). Given that, the numbers are exact or rigorously bracketed:

* **Gumbel-max.** The test rejects when Σ_t −log(1 − y_t) >= t_α, the (1 − α) quantile of the exact
  null Gamma(n, 1). The H1 sum's law is a convolution of the exact per-token law cut into cells of
  width h (the cell masses are exact CDF differences); rounding every token down to its cell gives a
  sum below the true one and rounding up a sum above it, so :class:`GumbelPower` brackets the power
  (``lower`` <= power <= ``upper``; the mass beyond the last cell, below 1e-15 per token, counted
  as a rejection in ``upper``). ``estimate`` rounds to the cell midpoints; ``normal`` is the normal
  approximation with the exact mean and variance.
* **SynthID.** The mean test rejects when the count of ones among the n M g-values has an exact
  Binomial(n M, ½) tail <= α; the H1 count is the n-fold convolution of the exact integer law: exact.

:func:`draft_temperature_table` shows how the power moves with the draft's temperature, P fixed.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
from scipy import special, stats

from wmspec_jax import score_law

MAX_CELLS = 1 << 22
"""Cells of the n-token sum's grid (one real FFT of this size)."""


@dataclasses.dataclass(frozen=True)
class GumbelPower:
    """P(the Gamma(n, 1) test rejects at level α) under H1 (i.i.d. tokens).

    Attributes:
      lower, upper: a rigorous bracket of the power (module doc).
      estimate: the cell-midpoint value (inside the bracket).
      normal: the normal approximation with the exact per-token mean and variance.
      threshold: t_α, the score the sum must reach.
      cell: the grid's width h.
    """

    lower: float
    estimate: float
    upper: float
    normal: float
    threshold: float
    cell: float


def gamma_threshold(num_tokens: int, fpr: float) -> float:
    """t_α with P(Gamma(n, 1) >= t_α) = α: the detectors' exact p-value is <= α iff the score >= t_α."""
    return float(special.gammainccinv(num_tokens, fpr))


def gumbel_power(law: score_law.GumbelLaw, num_tokens: int, fpr: float = 0.01,
                 max_cells: int = MAX_CELLS) -> GumbelPower:
    """The power of the Gamma(n, 1) test on n i.i.d. tokens of ``law`` (module doc).

    Args:
      law: a per-token law (:func:`wmspec_jax.score_law.gumbel_score_law`).
      num_tokens: n >= 1.
      fpr: α in (0, 1).
      max_cells: size of the n-token grid; the cell width is about n (log c_max + 37) / max_cells.
    """
    n = _check(num_tokens, fpr)
    threshold = gamma_threshold(n, fpr)
    s_max = float(np.log(max(law.shapes.max(), 1.0))) + 37.0  # P(S > s) <= c e^{-s}: below 1e-16 c / c_max
    cells = max(8, (max_cells - 1) // n)
    h = s_max / cells
    edges = np.arange(cells + 1) * h
    masses = np.clip(np.diff(law.cdf(edges)), 0.0, None)  # token in [kh, (k+1)h): index k
    tail = float(np.clip(law.sf(s_max), 0.0, 1.0))
    size = 1 << int(np.ceil(np.log2(n * cells + 1)))
    total = np.clip(np.fft.irfft(np.fft.rfft(masses, size) ** n, size), 0.0, None)  # defective: no tail token
    some_tail = 1.0 - (1.0 - tail) ** n
    at_least = np.concatenate([np.cumsum(total[::-1])[::-1], [0.0]])  # P(K >= k), k = 0..size

    def exceed(shift):  # P(h (K + shift) >= t) over draws without a tail token
        first = int(np.ceil(threshold / h - shift - 1e-12))
        return float(at_least[min(max(first, 0), size)])

    mean, var = law.mean(), law.variance()
    normal = float(stats.norm.sf((threshold - n * mean) / np.sqrt(max(n * var, 1e-300))))
    return GumbelPower(min(1.0, exceed(0.0)), min(1.0, exceed(n / 2) + some_tail), min(1.0, exceed(n) + some_tail),
                       normal, threshold, h)


def synthid_power(token_law, num_tokens: int, fpr: float = 0.01) -> float:
    """The exact power of the binomial mean test on n i.i.d. tokens.

    Args:
      token_law: float[M + 1] the per-token law of the count of ones among its M g-values
        (:func:`wmspec_jax.score_law.synthid_count_law`).
      num_tokens: n; fpr: α.

    Returns:
      P(count >= c) under H1, c the least count with P(Binomial(n M, ½) >= c) <= α.
    """
    n = _check(num_tokens, fpr)
    pmf = np.asarray(token_law, np.float64)
    trials = n * (pmf.size - 1)
    c = int(stats.binom.isf(fpr, trials, 0.5)) + 1  # least c with P(X > c - 1) <= α
    while c > 0 and stats.binom.sf(c - 2, trials, 0.5) <= fpr:
        c -= 1
    while stats.binom.sf(c - 1, trials, 0.5) > fpr:
        c += 1
    total = _convolve_power(pmf, n)
    return float(np.clip(total[c:].sum(), 0.0, 1.0))


def _convolve_power(pmf: np.ndarray, n: int) -> np.ndarray:
    """The n-fold convolution of ``pmf`` by repeated squaring (direct sums: no FFT rounding)."""
    result, base = np.ones(1), pmf
    while n:
        if n & 1:
            result = np.convolve(result, base)
        n >>= 1
        if n:
            base = np.convolve(base, base)
    return result


def _check(num_tokens, fpr) -> int:
    if isinstance(num_tokens, bool) or int(num_tokens) != num_tokens or num_tokens < 1:
        raise ValueError(f"num_tokens must be an int >= 1, got {num_tokens!r}")
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"fpr must lie in (0, 1), got {fpr}")
    return int(num_tokens)


def temper(probs, temperature: float) -> np.ndarray:
    """probs^(1/T) renormalised: the distribution a model gives at temperature T relative to ``probs``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logp = np.log(np.asarray(probs, np.float64)) / temperature
    w = np.exp(logp - logp.max())
    return w / w.sum()


def draft_temperature_table(p, q, temperatures: Sequence[float], methods: Sequence[str], num_tokens: int,
                            fpr: float = 0.01, *, num_layers: Optional[int] = None, detector: Optional[str] = None,
                            lookahead: Optional[int] = None) -> list:
    """Per-token mean score and power as the draft's temperature changes with the target fixed.

    Args:
      p, q: float[V] the target and the draft at temperature 1; the draft at T is ``temper(q, T)``.
      temperatures, methods: the grid.
      num_tokens, fpr: n and α of the test.
      num_layers: None for Gumbel-max, m for SynthID(m).
      detector: None for the default (``ars-prior`` with the routes' draft share; ``both``).
      lookahead: as :func:`wmspec_jax.score_law.routes`.

    Returns:
      A list of dicts (method, draft_temperature, acceptance α, mean per-token score, power); Gumbel
      rows also carry the bracket (power_lower, power_upper).
    """
    rows = []
    for method in methods:
        for temp in temperatures:
            q_t = temper(q, temp)
            alpha = float(np.minimum(np.asarray(p, np.float64), q_t).sum())
            row = {"method": method, "draft_temperature": float(temp), "acceptance": alpha}
            if num_layers is None:
                law = score_law.gumbel_score_law(p, q_t, method, detector=detector or "ars-prior",
                                                 lookahead=lookahead)
                power = gumbel_power(law, num_tokens, fpr)
                row.update(mean_score=law.mean(), power=power.estimate, power_lower=power.lower,
                           power_upper=power.upper)
            else:
                pmf = score_law.synthid_count_law(p, q_t, method, num_layers, detector=detector or "both",
                                                  lookahead=lookahead)
                row.update(mean_score=float(pmf @ np.arange(pmf.size)) / (pmf.size - 1),
                           power=synthid_power(pmf, num_tokens, fpr))
            rows.append(row)
    return rows


__all__ = ["GumbelPower", "MAX_CELLS", "draft_temperature_table", "gamma_threshold", "gumbel_power",
           "synthid_power", "temper"]
