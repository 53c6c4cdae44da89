"""Null tail of SynthID's weighted mean score: exact for short texts, a proven bound beyond.

Under H0 the g-values are i.i.d. Bernoulli(1/2), so the weighted total
S = Σ_t Σ_l w_l g_{t,l} over n scored tokens has a known discrete law. The
previous saddlepoint p-value ignored that discreteness and was
anti-conservative for short texts (one token, m = 30: 0.037 where the exact
value is 0.0625). Here:

**Lattice.** The weights are put on a lattice ``unit · a_l`` with integer
a_l: ``unit = min(w) / k`` for the smallest k ≤ 64 that puts every weight
within 1e-3 lattice units of the lattice (SynthID's linear weights
:func:`.synthid.synthid_weights` are exactly of this form: k = m − 1 up to
the gcd), in which case a_l is exact. Otherwise (arbitrary weights)
``unit = max(min(w) / 64, Σw / 16384)`` and every weight is bracketed by
a⁻_l = ⌊w_l / unit⌋ ≤ w_l / unit ≤ a⁺_l = ⌈w_l / unit⌉; with
U = Σ a⁺ g and the observed L = Σ a⁻ g, S ≥ s_obs implies U ≥ L_obs, so
P(U ≥ L_obs) is a conservative p-value (equal to the exact one on a lattice).

**Exact, n ≤ ``exact_max_tokens(m', Σa)``** (57 for one stream of SynthID's
m = 30 weights, 30 for both streams, 311 for m = 6): the law of U is built token by token and layer by layer
(each layer a shifted add of non-negative counts: no cancellation, so even
the 2^(−n m') atom at the maximum keeps full relative precision), with the
counts scaled by a power of two to stay inside float64. The log tails are
cached per weight vector (float32; only the upper half, the lower half by
the symmetry U ↔ n·Σa − U).

**Bound, longer texts.** For any λ > 0, exponential tilting gives exactly
P(X ≥ d) = e^{nK(λ) − λd} E_λ[e^{−λ(X − d)} 1{X ≥ d}] (X = U − E U, d = k − E U,
K(λ) = Σ_l log cosh(λ a_l / 2) the per-token centred CGF). Under the tilted
law, X − d has mean μ and variance σ² and, by the Berry–Esseen theorem for
independent non-identical summands (constant 0.5600, Shevtsova 2010), its
CDF is within δ = 0.56 Σρ / σ³ of the normal one; integrating by parts,

    E_λ[e^{−λY} 1{Y ≥ 0}] ≤ e^{−λμ + λ²σ²/2} Φ̄(λσ − μ/σ) + 2δ,

so p ≤ e^{nK(λ) − λd} · min(1, that) — at most the Chernoff bound and close
to the exact tail when n is large (the two terms are the saddlepoint
approximation and its O(1/√n) error allowance). λ is the saddlepoint
(Newton with bisection); the bound holds for whatever λ the iteration
returns. Evaluated in float64 on the host.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
from scipy import special

TABLE_ENTRIES = 4_000_000  # float32 log tails kept per weight vector (16 MB)
MAX_UNIT_DIVISOR = 64
MAX_SPAN = 1 << 14
SNAP = 1e-3
BERRY_ESSEEN = 0.5600  # Shevtsova (2010), sums of independent non-identically distributed terms
_MAX_SCALED_BITS = 1900  # (n + 1) · m' ≤ this keeps the scaled counts inside float64's exponent range
_LN2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class Lattice:
    """Integer brackets a⁻ ≤ w / unit ≤ a⁺ of a weight vector (module doc).

    Attributes:
      lower, upper: tuples of non-negative ints (equal when ``exact``).
      unit: the lattice step.
      exact: the weights lie on the lattice (p-values are then exact for n ≤
        :func:`exact_max_tokens`).
    """

    lower: tuple
    upper: tuple
    unit: float
    exact: bool

    @property
    def span(self) -> int:
        return int(sum(self.upper))


def lattice(weights) -> Lattice:
    """The lattice of a positive weight vector (module doc)."""
    w = np.asarray(weights, np.float64)
    if w.ndim != 1 or w.size == 0 or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(f"weights must be a non-empty vector of positive finite numbers, got {w!r:.80}")
    w_min = float(w.min())
    for k in range(1, MAX_UNIT_DIVISOR + 1):
        r = w / (w_min / k)
        a = np.round(r)
        if np.abs(r - a).max() <= SNAP and a.sum() <= MAX_SPAN:
            ints = tuple(int(x) for x in a)
            return Lattice(ints, ints, w_min / k, True)
    unit = max(w_min / MAX_UNIT_DIVISOR, float(w.sum()) / MAX_SPAN)
    r = w / unit
    lower = tuple(int(x) for x in np.floor(r + SNAP))
    upper = tuple(int(x) for x in np.ceil(r - SNAP))
    return Lattice(lower, upper, unit, lower == upper)


def exact_max_tokens(num_weights: int, span: int) -> int:
    """Largest n with an exact p-value for m' weights of lattice total ``span`` = Σa⁺.

    Limited by float64's range for the scaled counts ((n + 1) m' ≤ 1900) and
    by the table size (Σ_{n' ≤ n} n' · span / 2 ≤ :data:`TABLE_ENTRIES`).
    """
    by_range = _MAX_SCALED_BITS // int(num_weights) - 1
    by_size = int(math.isqrt(int(4 * TABLE_ENTRIES // max(int(span), 1))))
    return max(0, min(by_range, by_size))


@functools.lru_cache(maxsize=4)
def _exact_log_tails(a: tuple, n_max: int) -> tuple:
    """For n = 0..n_max: (first k stored, float32 log P(U_n ≥ k) for k ≥ that)."""
    a_arr = np.asarray(a, np.int64)
    m, total = a_arr.size, int(a_arr.sum())
    v = np.ones(1)  # counts of each value of U, times 2^-e
    e = 0
    out = [(0, np.zeros(1, np.float32))]
    for n in range(1, n_max + 1):
        for al in a_arr:
            nxt = np.zeros(v.size + al)
            nxt[: v.size] = v
            nxt[al:] += v
            v = nxt
        e_new = (n * m) // 2
        v *= 2.0 ** (e - e_new)
        e = e_new
        half = -(-n * total // 2)
        tail = np.cumsum(v[::-1])[::-1][half:]
        out.append((half, (np.log(tail) + (e - n * m) * _LN2).astype(np.float32)))
    return tuple(out)


def log_sf(k, n, lat: Lattice) -> np.ndarray:
    """log P(U_n ≥ k) with U_n = Σ_{t ≤ n} Σ_l a⁺_l g_{t,l}, g i.i.d. Bernoulli(1/2).

    Args:
      k: int[B] observed lower-lattice totals L (module doc).
      n: int[B] numbers of scored tokens.
      lat: :func:`lattice` of the weights.

    Returns:
      float64[B]: exact for n ≤ :func:`exact_max_tokens` on an exact lattice
      (conservative otherwise), the tilted Berry–Esseen bound beyond; 0 for
      n = 0 or k ≤ 0, −inf for k > n Σa⁺.
    """
    k = np.asarray(k, np.int64)
    n = np.asarray(n, np.int64)
    k, n = np.broadcast_arrays(k, n)
    a = np.asarray(lat.upper, np.float64)
    m, total = a.size, lat.span
    out = np.zeros(k.shape, np.float64)
    top = n * total
    live = (n > 0) & (k > 0)
    out[live & (k > top)] = -np.inf
    at_max = live & (k == top)
    out[at_max] = -(n[at_max] * m) * _LN2  # all g = 1 (every a⁺ ≥ 1)
    inner = live & (k < top)
    n_exact = exact_max_tokens(m, total)
    small = inner & (n <= n_exact)
    if small.any():
        tables = _exact_log_tails(lat.upper, n_exact)
        for i in np.flatnonzero(small):
            ni, ki = int(n[i]), int(k[i])
            first, logs = tables[ni]
            if ki >= first:
                out[i] = logs[ki - first]
            else:  # symmetry: P(U ≥ k) = 1 − P(U ≥ nΣa − k + 1)
                out[i] = math.log1p(-math.exp(float(logs[ni * total - ki + 1 - first])))
    large = inner & (n > n_exact)
    if large.any():
        out[large] = _log_bound(k[large].astype(np.float64), n[large].astype(np.float64), a)
    return np.minimum(out, 0.0)


def _log_bound(k, n, a):
    """Tilted Berry–Esseen upper bound on log P(U_n ≥ k) (module doc), vectorised over texts."""
    half_a = 0.5 * a
    d = k - n * half_a.sum()  # centred threshold
    pos = d > 0
    out = np.zeros_like(d)
    if not pos.any():
        return out
    d, n = d[pos], n[pos]

    def slope(lam):  # n K'(λ), n K''(λ)
        th = np.tanh(lam[:, None] * half_a)
        return n * (half_a * th).sum(1), n * (half_a**2 * (1 - th**2)).sum(1)

    _, var0 = slope(np.zeros_like(d))
    lam = d / var0
    hi = np.full_like(d, 1.0 / a.min())
    while True:  # bracket: K'(hi) ≥ d/n
        below = slope(hi)[0] < d
        if not below.any():
            break
        hi = np.where(below, 2 * hi, hi)
    lo = np.zeros_like(d)
    lam = np.clip(lam, lo, hi)
    for _ in range(100):
        f, fp = slope(lam)
        f = f - d
        lo = np.where(f < 0, lam, lo)
        hi = np.where(f >= 0, lam, hi)
        newton = lam - f / np.maximum(fp, 1e-300)
        lam = np.where((newton > lo) & (newton < hi), newton, 0.5 * (lo + hi))
    lam = np.maximum(lam, 1e-300)
    x = lam[:, None] * a  # per-layer tilt
    log_mgf = n * (np.logaddexp(0.5 * x, -0.5 * x) - _LN2).sum(1)  # n K(λ)
    chernoff = log_mgf - lam * d
    p = special.expit(x)
    q = 1 - p
    var = n * (a**2 * p * q).sum(1)
    rho = n * (a**3 * p * q * (p**2 + q**2)).sum(1)
    mean = n * (half_a * np.tanh(0.5 * x)).sum(1) - d  # tilted mean of X − d (≈ 0 at the saddlepoint)
    sd = np.sqrt(var)
    ok = sd > 0
    sd_safe = np.where(ok, sd, 1.0)
    t = lam * sd_safe
    log_gauss = -lam * mean + 0.5 * t**2 + special.log_ndtr(-(t - mean / sd_safe))
    delta = BERRY_ESSEEN * rho / sd_safe**3
    factor = np.minimum(1.0, np.exp(np.minimum(log_gauss, 0.0)) + 2 * delta)
    factor = np.where(ok, factor, 1.0)
    out[pos] = chernoff + np.log(factor)
    return out


__all__ = ["TABLE_ENTRIES", "Lattice", "exact_max_tokens", "lattice", "log_sf"]
