"""Statistical assertions shared by the tests.

Every check is a test of a null hypothesis that holds if the code is right;
it fails only when the p-value drops below ``ALPHA`` (1e-6), so a correct
implementation fails a check with probability 1e-6 — far below the 1e-4
budget even summed over the suite's few dozen checks. Seeds are fixed, so
the outcome is also reproducible.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 1e-6
Z = float(stats.norm.isf(ALPHA / 2))  # two-sided z bound matching ALPHA (~4.89)


def assert_uniform(samples, what: str = "samples") -> None:
    """Kolmogorov-Smirnov test against U(0, 1)."""
    x = np.asarray(samples, np.float64).ravel()
    res = stats.kstest(x, "uniform")
    assert res.pvalue > ALPHA, f"{what} not uniform: KS p={res.pvalue:.3g} (n={x.size})"


def assert_independent_uniforms(x, y, what: str = "pair", bins: int = 10) -> None:
    """Chi-square test of independence of two U(0, 1) samples on a bins x bins grid
    (the expected count per cell is known exactly under independence)."""
    x = np.asarray(x, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    ix = np.minimum((x * bins).astype(int), bins - 1)
    iy = np.minimum((y * bins).astype(int), bins - 1)
    counts = np.bincount(ix * bins + iy, minlength=bins * bins)
    expected = np.full(bins * bins, x.size / bins**2)
    res = stats.chisquare(counts, expected)
    assert res.pvalue > ALPHA, f"{what}: dependence detected, chi2 p={res.pvalue:.3g}"


def assert_counts_match(counts, probs, what: str = "counts", min_expected: float = 5.0) -> None:
    """Pearson chi-square goodness of fit of observed counts to exact probabilities.

    Cells with expected count below ``min_expected`` are pooled into one, the
    usual validity condition for the chi-square approximation.
    """
    counts = np.asarray(counts, np.float64).ravel()
    probs = np.asarray(probs, np.float64).ravel()
    n = counts.sum()
    expected = n * probs / probs.sum()
    small = expected < min_expected
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    assert counts.size > 1, f"{what}: nothing to test"
    res = stats.chisquare(counts, expected)
    assert res.pvalue > ALPHA, f"{what}: chi2 p={res.pvalue:.3g} over {counts.size} cells (n={int(n)})"


def assert_mean_close(samples, expected: float, what: str = "mean") -> None:
    """z-test of a sample mean against its exact expectation (CLT, n >= ~1000)."""
    x = np.asarray(samples, np.float64).ravel()
    se = x.std(ddof=1) / np.sqrt(x.size)
    err = abs(x.mean() - expected)
    assert err <= Z * se + 1e-12, f"{what}: {x.mean():.6g} vs {expected:.6g} (|err|={err:.3g} > {Z:.2f} SE={se:.3g})"


def assert_binomial_rate(successes: int, trials: int, p: float, what: str = "rate") -> None:
    """Exact two-sided binomial test of an observed rate against p."""
    res = stats.binomtest(int(successes), int(trials), p)
    assert res.pvalue > ALPHA, f"{what}: {successes}/{trials}={successes / trials:.4f} vs p={p:.4f} (binomial p={res.pvalue:.3g})"
