"""Detection metrics: ROC, AUC, TPR at a fixed FPR with bootstrap CIs, TPR vs length.

Two ways to set the threshold for "TPR at FPR = α", used as follows:

* **from negatives** (:func:`tpr_at_fpr`): the threshold is the empirical
  (1 − α) quantile of unwatermarked texts' scores — exactly: a text is
  flagged iff its score is strictly above the (⌊α N⌋ + 1)-th largest
  negative score, so at most ⌊α N⌋ of the N negatives are flagged. Used
  for detectors without a calibrated null (SynthID Bayes-*), and for any
  detector when real negatives are at hand (it also absorbs a
  mis-specified null).
* **from calibrated p-values** (:func:`tpr_at_alpha`): flag iff p ≤ α.
  Valid where the null is exact (Gumbel Gamma tests, SynthID mean score)
  or calibrated conditional on u (soft Gumbel detector); needs no negatives.

Scores are "larger = more watermark-like"; for p-value detectors use
``common.decision_scores`` (−log p), which ranks texts of different lengths
on one scale. NaN scores (texts with no scored token) are rejected with an
error rather than silently ranked.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps


class Estimate(NamedTuple):
    """A point estimate with a (1 − level) two-sided confidence interval."""

    value: float
    lower: float
    upper: float


def _scores(x, name: str) -> np.ndarray:
    arr = np.asarray(x, np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of scores, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(
            f"{name} contains NaN scores (texts with no scored token, num_scored == 0); "
            "drop them or use p-values"
        )
    return arr


def _fpr(fpr) -> float:
    fpr = float(fpr)
    if not 0.0 < fpr < 1.0:
        raise ValueError(f"FPR must lie in (0, 1), got {fpr}")
    return fpr


@functools.partial(jax.jit, static_argnames=("fpr",))
def _tpr_at_fpr(pos, neg, fpr: float):
    """jnp version (float32, inside jitted training): same rule as :func:`tpr_at_fpr`."""
    k = int(np.floor(fpr * neg.shape[-1] + 1e-9))  # negatives allowed above the threshold
    threshold = -jnp.sort(-neg, axis=-1)[..., k]
    return jnp.mean(pos > threshold[..., None], axis=-1), threshold


def _tpr_np(pos, neg, fpr: float):
    """Host float64 version, vectorised over leading axes: (tpr[...], threshold[...])."""
    k = int(np.floor(fpr * neg.shape[-1] + 1e-9))
    threshold = -np.partition(-neg, k, axis=-1)[..., k]  # the (k+1)-th largest negative
    return np.mean(pos > threshold[..., None], axis=-1), threshold


def tpr_at_fpr(pos_scores, neg_scores, fpr: float = 0.01):
    """TPR with the threshold set on negatives (see module doc), in float64.

    Returns:
      (tpr, threshold) as floats; the empirical FPR is ≤ ``fpr``.
    """
    pos = _scores(pos_scores, "positive scores")
    neg = _scores(neg_scores, "negative scores")
    tpr, thr = _tpr_np(pos, neg, _fpr(fpr))
    return float(tpr), float(thr)


def tpr_at_alpha(log_pvalues, alpha: float = 0.01) -> float:
    """TPR from calibrated p-values: the share of texts with p ≤ α."""
    lp = _scores(log_pvalues, "log p-values")
    return float(np.mean(lp <= np.log(_fpr(alpha))))


def roc_curve(pos_scores, neg_scores):
    """ROC curve: (fpr, tpr, thresholds), float64 arrays from (0, 0) to (1, 1).

    Point k flags scores ≥ thresholds[k]; thresholds run over the distinct
    observed scores in decreasing order (first +inf).
    """
    pos = _scores(pos_scores, "positive scores")
    neg = _scores(neg_scores, "negative scores")
    thr = np.unique(np.concatenate([pos, neg]))[::-1]
    tpr = 1.0 - np.searchsorted(np.sort(pos), thr, side="left") / pos.size
    fpr = 1.0 - np.searchsorted(np.sort(neg), thr, side="left") / neg.size
    return (np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr]), np.concatenate([[np.inf], thr]))


def auc(pos_scores, neg_scores) -> float:
    """Area under the ROC curve = P(pos > neg) + ½ P(pos = neg) (Mann–Whitney)."""
    pos = _scores(pos_scores, "positive scores")
    neg = _scores(neg_scores, "negative scores")
    ranks = sps.rankdata(np.concatenate([pos, neg]))  # average ranks handle ties
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2
    return float(u / (pos.size * neg.size))


def _percentile_interval(samples, level: float):
    a = (1.0 - level) / 2
    return float(np.quantile(samples, a)), float(np.quantile(samples, 1 - a))


def _check_level(level) -> float:
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level}")
    return level


def _resample(rng, n: int, num: int):
    return jax.random.randint(rng, (num, n), 0, n)


def bootstrap_tpr_at_fpr(pos_scores, neg_scores, fpr: float, rng, *, num_resamples: int = 1000,
                         level: float = 0.95) -> Estimate:
    """TPR at FPR (threshold from negatives) with a percentile bootstrap CI.

    Positives and negatives are resampled independently (the threshold's
    own sampling error is part of the interval).
    """
    pos = _scores(pos_scores, "positive scores")
    neg = _scores(neg_scores, "negative scores")
    fpr, level = _fpr(fpr), _check_level(level)
    kp, kn = jax.random.split(rng)
    pb = pos[np.asarray(_resample(kp, pos.size, num_resamples))]
    nb = neg[np.asarray(_resample(kn, neg.size, num_resamples))]
    tprs, _ = _tpr_np(pb, nb, fpr)
    value, _ = _tpr_np(pos, neg, fpr)
    return Estimate(float(value), *_percentile_interval(tprs, level))


def bootstrap_tpr_at_alpha(log_pvalues, alpha: float, rng, *, num_resamples: int = 1000,
                           level: float = 0.95) -> Estimate:
    """TPR from calibrated p-values (p ≤ α) with a percentile bootstrap CI."""
    lp = _scores(log_pvalues, "log p-values")
    level = _check_level(level)
    hit = (lp <= np.log(_fpr(alpha))).astype(np.float64)
    rates = np.mean(hit[np.asarray(_resample(rng, hit.size, num_resamples))], axis=1)
    return Estimate(float(np.mean(hit)), *_percentile_interval(rates, level))


def bootstrap_auc(pos_scores, neg_scores, rng, *, num_resamples: int = 500, level: float = 0.95) -> Estimate:
    """AUC with a percentile bootstrap CI."""
    pos = _scores(pos_scores, "positive scores")
    neg = _scores(neg_scores, "negative scores")
    level = _check_level(level)
    kp, kn = jax.random.split(rng)
    ip = np.asarray(_resample(kp, pos.size, num_resamples))
    ineg = np.asarray(_resample(kn, neg.size, num_resamples))
    vals = [auc(pos[ip[r]], neg[ineg[r]]) for r in range(num_resamples)]
    return Estimate(auc(pos, neg), *_percentile_interval(np.asarray(vals), level))


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> Estimate:
    """Exact binomial rate with its Clopper–Pearson interval."""
    k, n = int(successes), int(trials)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {k}/{n}")
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=_check_level(level), method="exact")
    return Estimate(k / n, float(ci.low), float(ci.high))


def tpr_by_length(pos_by_length: Sequence, neg_by_length=None, *, fpr: float = 0.01, rng, num_resamples: int = 1000,
                  level: float = 0.95) -> list:
    """TPR at FPR for each token length, with bootstrap CIs.

    Args:
      pos_by_length: [G] arrays of positives' scores, one per length (score
        the truncated texts, :func:`.streams.truncate`).
      neg_by_length: [G] arrays of negatives' scores (threshold from
        negatives), or ``None``: then ``pos_by_length`` holds log p-values
        and the threshold is p ≤ ``fpr``.
      fpr, rng, num_resamples, level: as in :func:`bootstrap_tpr_at_fpr`.

    Returns:
      list of :class:`Estimate`, one per length.
    """
    keys = jax.random.split(rng, len(pos_by_length))
    out = []
    for g, pos in enumerate(pos_by_length):
        if neg_by_length is None:
            out.append(bootstrap_tpr_at_alpha(pos, fpr, keys[g], num_resamples=num_resamples, level=level))
        else:
            out.append(bootstrap_tpr_at_fpr(pos, neg_by_length[g], fpr, keys[g], num_resamples=num_resamples,
                                            level=level))
    return out


class PairedComparison(NamedTuple):
    """Exact McNemar comparison of two detectors flagging the same texts.

    Attributes:
      only_a, only_b: texts flagged by one detector but not the other.
      p_a_better: one-sided p-value of H0 "TPR_a ≤ TPR_b".
      p_b_better: one-sided p-value of H0 "TPR_b ≤ TPR_a".
    """

    only_a: int
    only_b: int
    p_a_better: float
    p_b_better: float


def paired_comparison(flagged_a, flagged_b) -> PairedComparison:
    """Exact McNemar test on paired detection outcomes (bool[N] each)."""
    a = np.asarray(flagged_a, bool)
    b = np.asarray(flagged_b, bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired outcomes must be 1-D of equal length, got {a.shape} and {b.shape}")
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    n = only_a + only_b
    if n == 0:
        return PairedComparison(0, 0, 1.0, 1.0)
    return PairedComparison(
        only_a, only_b,
        float(sps.binom.sf(only_a - 1, n, 0.5)),
        float(sps.binom.sf(only_b - 1, n, 0.5)),
    )


def mean_ci(values, level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of its Student-t confidence interval."""
    x = np.asarray(values, np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float("nan")
    half = sps.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half)


__all__ = ["Estimate", "PairedComparison", "auc", "bootstrap_auc", "bootstrap_tpr_at_alpha", "bootstrap_tpr_at_fpr",
           "clopper_pearson", "mean_ci", "paired_comparison", "roc_curve", "tpr_at_alpha", "tpr_at_fpr",
           "tpr_by_length"]
