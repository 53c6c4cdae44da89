"""Exact lower tails of sums of independent non-negative integer terms (model-assisted detection's nulls).

Under H0 the model-assisted statistics (:mod:`.model_assisted`) are sums of independent integer terms
with known laws: geometrics (Gumbel-max, quantised Exp(1) terms) and weighted Bernoullis (SynthID
g-values, KGW green indicators). Their tails are built term by term with additions and products of
non-negative numbers only, rescaled as they shrink, so a p-value keeps float64 relative precision however
small it is.
"""

from __future__ import annotations

import math

import numpy as np

MAX_SPAN = 1 << 16
"""The lattice weights of one text sum to at most this (the exact tail costs O(terms × span))."""
_RESCALE_BELOW = 1e-200


class _ScaledLaw:
    """The law of a partial sum on {0, ..., limit}, times a carried scale: after each term the entries
    are rescaled once the product of the shares a term keeps of the largest entry could have fallen
    below :data:`_RESCALE_BELOW` (so nothing underflows; the log of the scales is carried)."""

    def __init__(self, limit: int):
        self.f = np.zeros(limit + 1)
        self.f[0] = 1.0
        self.log_scale = 0.0
        self.shrink = 0.0  # log of the least share of the largest entry kept since the last rescale

    def shrunk_by(self, log_share: float) -> None:
        self.shrink += log_share
        if self.shrink < math.log(_RESCALE_BELOW):
            top = self.f.max()
            self.f /= top
            self.log_scale += math.log(top)
            self.shrink = 0.0

    def log_total(self) -> float:
        return self.log_scale + math.log(self.f.sum())


def geometric_sum_log_cdf(continue_probs, stop_probs, limit: int) -> float:
    """log P(Σ_j X_j ≤ limit) for independent X_j ~ Geometric on {0, 1, ...}, P(X_j ≥ k) = q_j^k.

    The law of the partial sums is built term by term on {0, ..., limit} (entries above ``limit``
    never come back: every term is non-negative), each term by the recursion
    F(k) = (1 − q) f(k) + q F(k − 1) (``scipy.signal.lfilter``), rescaled when its largest entry
    could have fallen below 1e-200 (each term keeps at least a share 1 − q of it; the log of the
    scales is carried). Only additions and products of non-negative numbers: the result has float64
    relative precision however small it is.

    Args:
      continue_probs: float64[J] q_j in [0, 1).
      stop_probs: float64[J] 1 − q_j, computed without cancellation (−expm1(−h/c)).
      limit: int >= 0.

    Returns:
      float: log P(Σ X ≤ limit) (0 when J = 0).
    """
    from scipy.signal import lfilter

    limit = int(limit)
    if limit < 0:
        return -math.inf
    law = _ScaledLaw(limit)
    for q, stop in zip(np.asarray(continue_probs, np.float64), np.asarray(stop_probs, np.float64)):
        if q <= 0.0:
            continue  # X ≡ 0
        law.f = lfilter([stop], [1.0, -q], law.f)
        law.shrunk_by(math.log(stop))  # each entry keeps at least the share 1 − q of itself
    return law.log_total()


def two_point_sum_log_cdf(steps, zero_prob: float, limit: int) -> float:
    """log P(Σ_j a_j B_j ≤ limit) for independent B_j ∈ {0, 1} with P(B_j = 0) = ``zero_prob``.

    Args:
      steps: int[J] a_j >= 0 (zeros are skipped).
      zero_prob: in (0, 1).
      limit: int.

    Returns:
      float: the exact log tail (shifted adds of non-negative numbers with rescaling, as
      :func:`geometric_sum_log_cdf`).
    """
    limit = int(limit)
    if limit < 0:
        return -math.inf
    s = float(zero_prob)
    law = _ScaledLaw(limit)
    for a in np.asarray(steps, np.int64):
        if a <= 0:
            continue
        moved = (1.0 - s) * law.f[:-a] if a <= limit else None
        law.f *= s
        if moved is not None:
            law.f[a:] += moved
        law.shrunk_by(math.log(s))  # every entry keeps at least the share s of itself
    return law.log_total()


def lattice_steps(weights, levels: int) -> tuple:
    """Integer weights a = round(w / unit) of non-negative weights, and the unit.

    unit = max(max w / ``levels``, Σ w / :data:`MAX_SPAN`): at most ``levels`` steps per weight and a
    total of at most about :data:`MAX_SPAN`. The integers are the statistic's weights (exact null).

    Returns:
      (int64[J] a, float unit); unit 0 when every weight is 0.
    """
    w = np.asarray(weights, np.float64)
    if w.size == 0 or w.max(initial=0.0) <= 0.0:
        return np.zeros(w.shape, np.int64), 0.0
    unit = max(w.max() / levels, w.sum() / MAX_SPAN)
    return np.rint(w / unit).astype(np.int64), float(unit)


def lattice_test(weights, indicators, one_prob: float, levels: int):
    """(log p, weighted mean) of the test Σ a·x ≥ observed, x ∈ {0, 1} i.i.d. with P(x = 1) = ``one_prob``
    under H0 (a: :func:`lattice_steps` of ``weights``). Where no weight is left: (0, ``one_prob``)."""
    a, _ = lattice_steps(weights, levels)
    keep = a > 0
    a, x = a[keep], np.asarray(indicators)[keep]
    span = int(a.sum())
    if span == 0:
        return 0.0, float(one_prob)
    observed = int((a * x).sum())
    # Σ a x ≥ observed  ⟺  Σ a (1 − x) ≤ span − observed, and P(1 − x = 0) = P(x = 1) = one_prob
    log_p = two_point_sum_log_cdf(a, one_prob, span - observed)
    return min(log_p, 0.0), observed / span


__all__ = ["MAX_SPAN", "geometric_sum_log_cdf", "lattice_steps", "lattice_test", "two_point_sum_log_cdf"]
