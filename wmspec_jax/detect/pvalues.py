"""Null distributions and p-values in log space (float32, jit/vmap-able).

Every detector whose null distribution is known reports ``log p`` as well as
``p``: strong watermarks give p-values far below float32's smallest positive
number (~1e-45), and ``log p`` keeps ranking them.

* :func:`gamma_log_sf` — log P(Gamma(n, 1) ≥ s), the null of the Gumbel-max
  score Σ −log(1 − y_t) over n scored tokens (each term is Exp(1) under H0).
  Exact to float32 accuracy: the incomplete gamma function where it is not
  tiny, a continued fraction in the deep tail, and Temme's uniform
  asymptotic expansion (DLMF 8.12) for n ≥ 100, where float32
  ``gammaincc`` loses digits.
* :func:`binomial_half_log_sf` — log P(Binomial(N, 1/2) ≥ k), the null of the
  SynthID mean score (g-values are i.i.d. Bernoulli(1/2) under H0).
* :func:`saddlepoint_log_sf` — the Lugannani–Rice saddlepoint tail of a sum
  of independent terms from its cumulant generating function (CGF); used
  for nulls without a closed form (weighted-mean SynthID score, the soft
  Gumbel detector). Relative error O(1/n) in p, uniformly into the tail.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import jax
import jax.numpy as jnp
from jax.scipy.special import betainc, gammaincc, gammaln, log_ndtr

_LOG_2PI = 1.8378770664093453
_TINY_P = 1e-30  # below this, float32 special functions lose relative accuracy
_TEMME_MIN_N = 100.0  # float32 gammaincc is accurate to ~1e-5 in log p below this
_CF_ITERS = 64  # Lentz iterations; converges in < 32 where it is used (tail, q < 1e-30)
_BINOMIAL_EXACT_MAX = 2000.0  # float32 betainc is accurate to ~1e-4 in log p up to here

# Taylor coefficients in η of Temme's c0(η) = 1/(λ−1) − 1/η and
# c1(η) = 1/η³ − 1/(λ−1)³ − 1/(λ−1)² − 1/(12(λ−1)) (DLMF 8.12.10-11); both
# formulas cancel catastrophically near η = 0, where the series is used.
# Computed with mpmath (Cauchy integrals on |η| = 1/2, 40 digits).
_C0 = (
    -0.33333333333333333, 0.083333333333333333, -0.014814814814814815,
    0.0011574074074074074, 0.0003527336860670194, -0.00017875514403292181,
    3.9192631785224378e-5, -2.1854485106799922e-6, -1.85406221071516e-6,
    8.296711340953086e-7, -1.7665952736826079e-7, 6.7078535434014986e-9,
)
_C1 = (
    -0.0018518518518518519, -0.0034722222222222222, 0.0026455026455026455,
    -0.00099022633744855967, 0.00020576131687242798, -4.0187757201646091e-7,
    -1.8098550334489978e-5, 7.6491609160811101e-6, -1.6120900894563446e-6,
    4.6471278028074343e-9, 1.378633446915721e-7, -5.752545603517705e-8,
)
_ETA_SERIES = 0.4  # |η| below which the c0/c1 series are used


def _f32(x):
    return jnp.asarray(x, jnp.float32)


def _poly(coeffs, x):
    out = jnp.zeros_like(x)
    for c in reversed(coeffs):
        out = out * x + jnp.float32(c)
    return out


def _d_minus_log1p(d):
    """d − log(1 + d) for d > −1, accurate near 0 (series) and elsewhere (direct)."""
    small = jnp.abs(d) < 0.1
    ds = jnp.where(small, d, 0.0)
    series = jnp.zeros_like(d)
    for k in range(14, 1, -1):  # Σ_{k≥2} (−d)^k / k, 13 terms: error < 0.1^15
        series = series * (-ds) + jnp.float32(1.0 / k)
    series = series * ds * ds
    dd = jnp.where(small, 0.0, d)
    return jnp.where(small, series, dd - jnp.log1p(dd))


def _log_normal_sf_plus(w, corr):
    """log(Φ(−w) + φ(w)·corr), stable for all w (corr is a bounded correction).

    Where the correction would remove most of the mass (a breakdown of the
    expansion, never seen for valid inputs) the leading term Φ(−w) is kept
    rather than returning a spuriously tiny p-value.
    """
    log_sf = log_ndtr(-w)
    log_pdf = -0.5 * w * w - 0.5 * _LOG_2PI
    ratio = corr * jnp.exp(log_pdf - log_sf)  # φ/Φ̄ ≤ w + 1: never overflows
    ok = jnp.isfinite(ratio) & (ratio > -0.9)
    return log_sf + jnp.where(ok, jnp.log1p(jnp.where(ok, ratio, 0.0)), 0.0)


def expm1_minus_x(x):
    """e^x − 1 − x, accurate near 0 (series) and elsewhere (direct)."""
    small = jnp.abs(x) < 0.1
    xs = jnp.where(small, x, 0.0)
    series = jnp.zeros_like(x)
    for k in range(9, 1, -1):  # Σ_{k≥2} x^k / k!, truncation < 0.1^10 / 10!
        series = (series + 1.0) * xs / jnp.float32(k)
    series = series * xs
    xb = jnp.where(small, 0.0, x)
    return jnp.where(small, series, jnp.expm1(xb) - xb)


def _gamma_log_sf_temme(a, x):
    """Temme's uniform expansion of log Q(a, x) with terms c0, c1 (rel. error O(a^-2))."""
    d = (x - a) / a  # λ − 1
    eta = jnp.sign(d) * jnp.sqrt(2.0 * _d_minus_log1p(d))
    small = jnp.abs(eta) < _ETA_SERIES
    es = jnp.where(small, eta, 0.0)
    # away from η = 0 use the closed forms; guard the unused branch against 0/0
    eb = jnp.where(small, 1.0, eta)
    db = jnp.where(small, 1.0, d)
    c0 = jnp.where(small, _poly(_C0, es), 1.0 / db - 1.0 / eb)
    c1 = jnp.where(small, _poly(_C1, es), 1.0 / eb**3 - 1.0 / db**3 - 1.0 / db**2 - 1.0 / (12.0 * db))
    sqrt_a = jnp.sqrt(a)
    # Q = Φ(−η√a) + φ(η√a) (c0 + c1/a) / √a
    return _log_normal_sf_plus(eta * sqrt_a, (c0 + c1 / a) / sqrt_a)


def _stirling_remainder(a):
    """lgamma(a) − (a − ½) log a + a − ½ log 2π, accurate for a > 0."""
    big = jnp.maximum(a, 10.0)
    series = 1.0 / (12.0 * big) - 1.0 / (360.0 * big**3) + 1.0 / (1260.0 * big**5)
    safe = jnp.maximum(a, 1e-3)
    direct = gammaln(safe) - (safe - 0.5) * jnp.log(safe) + safe - 0.5 * _LOG_2PI
    return jnp.where(a >= 10.0, series, direct)


def _gamma_log_sf_cf(a, x):
    """log Q(a, x) from the Legendre continued fraction (modified Lentz), for x > a + 1.

    The prefactor x^a e^{−x} / Γ(a) is assembled from d − log1p(d) and the
    Stirling remainder so that no large terms cancel in float32.
    """
    tiny = jnp.float32(1e-30)
    b = x + 1.0 - a
    c = jnp.full_like(x, 1.0 / tiny)
    dd = 1.0 / b
    h = dd

    def body(i, state):
        b, c, dd, h = state
        i = i.astype(jnp.float32)
        an = -i * (i - a)
        b = b + 2.0
        dd = an * dd + b
        dd = jnp.where(jnp.abs(dd) < tiny, tiny, dd)
        c = b + an / c
        c = jnp.where(jnp.abs(c) < tiny, tiny, c)
        dd = 1.0 / dd
        return b, c, dd, h * dd * c

    _, _, _, h = jax.lax.fori_loop(1, _CF_ITERS + 1, body, (b, c, dd, h))
    d = (x - a) / a
    return -a * _d_minus_log1p(d) + 0.5 * jnp.log(a) - 0.5 * _LOG_2PI - _stirling_remainder(a) + jnp.log(h)


@jax.jit
def gamma_log_sf(n, s) -> jax.Array:
    """log P(G ≥ s) for G ~ Gamma(n, 1): the Gumbel-max score's exact null.

    Args:
      n: float/int[...] number of scored tokens (shape parameter), ≥ 0.
      s: float[...] observed score Σ −log(1 − y_t), broadcast against ``n``.

    Returns:
      float32[...] log p-value in [−inf, 0]. ``n = 0`` (no scored token) or
      ``s ≤ 0`` gives 0 (p = 1); ``s = +inf`` (a token with y = 1) gives the
      limit −inf; NaN inputs give NaN. Accurate to ~1e-4 absolute in log p
      where p > 1e-30 and ~1e-5 relative beyond (tested against mpmath).
    """
    a, x = jnp.broadcast_arrays(_f32(n), _f32(s))
    pos = (a > 0) & (x > 0)
    infinite = pos & jnp.isposinf(x)
    finite = pos & ~infinite
    a_s = jnp.where(finite, a, 1.0)
    x_s = jnp.where(finite, x, 1.0)
    q = gammaincc(a_s, x_s)
    small_a = jnp.where(q > _TINY_P, jnp.log(jnp.maximum(q, _TINY_P)),
                        _gamma_log_sf_cf(a_s, jnp.maximum(x_s, a_s + 1.0)))
    out = jnp.where(a_s >= _TEMME_MIN_N, _gamma_log_sf_temme(a_s, x_s), small_a)
    out = jnp.where(finite, jnp.minimum(out, 0.0), jnp.where(infinite, -jnp.inf, 0.0))
    return jnp.where(jnp.isnan(a) | jnp.isnan(x), jnp.nan, out)


@jax.jit
def binomial_half_log_sf(k, num_trials) -> jax.Array:
    """log P(X ≥ k) for X ~ Binomial(N, 1/2): the SynthID mean score's null.

    Args:
      k: int/float[...] observed number of ones among the N g-values.
      num_trials: N, broadcast against ``k``.

    Returns:
      float32[...] log p-value: exact (regularised incomplete beta) for
      N ≤ 2000 where p > 1e-30, else the continuity-corrected saddlepoint.
      k ≤ 0 gives 0; k > N gives −inf.
    """
    k, big_n = jnp.broadcast_arrays(_f32(k), _f32(num_trials))
    inside = (k > 0) & (k <= big_n)
    k_s = jnp.where(inside, k, 1.0)
    n_s = jnp.where(inside, big_n, 1.0)
    exact = betainc(k_s, n_s - k_s + 1.0, jnp.float32(0.5))

    def cgf(lam):  # centred CGF of a sum of N Bernoulli(1/2): N log cosh(λ/2)
        # σ(λ) − ½ = ½ tanh(λ/2) keeps its relative accuracy for tiny λ
        th = jnp.tanh(0.5 * lam)
        var = 0.25 * (1.0 - th * th)
        return n_s * _log_cosh(0.5 * lam), n_s * 0.5 * th, n_s * var, -n_s * var * th

    approx = saddlepoint_log_sf(k_s - 0.5 * n_s, cgf, lattice=True, lower=-40.0, upper=40.0)
    use_exact = (n_s <= _BINOMIAL_EXACT_MAX) & (exact > _TINY_P)
    out = jnp.where(use_exact, jnp.log(jnp.maximum(exact, _TINY_P)), approx)
    out = jnp.where(k_s == n_s, -n_s * jnp.log(2.0), out)  # the single outcome "all ones"
    out = jnp.where(inside, jnp.minimum(out, 0.0), jnp.where(k <= 0, 0.0, -jnp.inf))
    return out


def _log_cosh(x):
    """log cosh(x) without the cancellation of log(e^x + e^-x) − log 2 near 0."""
    ax = jnp.abs(x)
    small = ax < 0.25
    xs = jnp.where(small, x, 0.0)
    x2 = xs * xs  # Taylor: x²/2 − x⁴/12 + x⁶/45 − 17x⁸/2520 (error < 1e-9 here)
    series = x2 * (0.5 + x2 * (-1.0 / 12 + x2 * (1.0 / 45 - x2 * 17.0 / 2520)))
    return jnp.where(small, series, ax + jnp.log1p(jnp.exp(-2.0 * ax)) - jnp.log(2.0))


Cgf = Callable[[jax.Array], Tuple[jax.Array, jax.Array, jax.Array, jax.Array]]


def _solve_saddlepoint(d, slope: Callable, lower: float, upper: float, iters: int) -> jax.Array:
    """The λ with K'(λ) − E[S] = d in [lower, upper]: safeguarded Newton (bisection fallback), from the
    normal approximation λ ≈ d / Var, stopping once every λ has converged."""
    lo = jnp.full_like(d, lower)
    hi = jnp.full_like(d, upper)

    def body(state):
        i, lam, lo, hi, _ = state
        k1, k2 = slope(lam)
        f = k1 - d
        lo = jnp.where(f < 0, lam, lo)
        hi = jnp.where(f >= 0, lam, hi)
        newton = lam - f / jnp.maximum(k2, 1e-30)
        ok = (newton >= lo) & (newton <= hi)  # inclusive: at the exact root newton == λ
        new = jnp.where(ok, newton, 0.5 * (lo + hi))
        # converged once the step changes w ≈ λ·sd by < 1e-6 (absolute + relative)
        sd = jnp.sqrt(jnp.maximum(k2, 1e-30))
        moved = jnp.abs(new - lam) * sd > 1e-6 * (1.0 + jnp.abs(lam) * sd)
        return i + 1, new, lo, hi, jnp.any(moved)

    # start from the normal approximation λ ≈ d / Var: Newton then needs a few steps
    _, k2_0 = slope(jnp.zeros_like(d))
    lam0 = jnp.clip(d / jnp.maximum(k2_0, 1e-30), 0.5 * lo, 0.5 * hi)
    state = (jnp.int32(0), lam0, lo, hi, jnp.bool_(True))
    return jax.lax.while_loop(lambda st: (st[0] < iters) & st[4], body, state)[1]


def saddlepoint_log_sf(
    centred_value,
    cgf: Cgf,
    *,
    lower: float = -50.0,
    upper: float = 50.0,
    lattice: bool = False,
    iters: int = 40,
    slope: Optional[Callable] = None,
) -> jax.Array:
    """Lugannani–Rice saddlepoint approximation of log P(S ≥ s).

    The CGF is passed *centred* (K(λ) − λ·E[S]) so that the saddlepoint
    quantities, which are differences of nearly equal numbers near the
    mean, keep their float32 accuracy.

    Args:
      centred_value: float[...] s − E[S] (for a lattice variable on the
        integers: s − E[S] with s the integer observed value).
      cgf: λ[...] -> (K_c(λ), K'(λ) − E[S], K''(λ), K'''(λ)), elementwise.
      lower, upper: the saddlepoint λ is searched in [lower, upper] (inside
        the CGF's domain); where the solution lies beyond, λ is clipped and
        the result is evaluated at the mean the clipped λ attains — only
        tails far beyond any threshold are affected.
      lattice: S is integer-valued (unit lattice): Daniels' second
        continuity correction (s − ½ and 2 sinh(λ/2) in place of λ).
      iters: maximum safeguarded Newton iterations (bisection fallback);
        the loop stops early once every λ has converged.
      slope: optional cheaper λ -> (K'(λ) − E[S], K''(λ)) for the Newton
        iterations (default: from ``cgf``).

    Returns:
      float32[...] log p, clipped to ≤ 0.
    """
    d = _f32(centred_value)
    if lattice:
        d = d - 0.5
    if slope is None:
        def slope(lam):
            _, k1, k2, _ = cgf(lam)
            return k1, k2

    lam = _solve_saddlepoint(d, slope, lower, upper, iters)
    kc, k1, k2, k3 = cgf(lam)
    # Where λ was clipped at the bound, evaluate at the attained mean instead
    # of the requested one (only the far tail is affected).
    clipped = (lam <= lower + 1e-6 * abs(lower)) | (lam >= upper - 1e-6 * abs(upper))
    d_eff = jnp.where(clipped, k1, d)
    w2 = jnp.maximum(2.0 * (lam * d_eff - kc), 0.0)
    w = jnp.sign(lam) * jnp.sqrt(w2)
    sd = jnp.sqrt(jnp.maximum(k2, 1e-30))
    u = (2.0 * jnp.sinh(0.5 * lam) if lattice else lam) * sd
    # near the mean 1/u − 1/w is 0/0; its limit is −ρ3/6 (ρ3 the standardised
    # third cumulant), used where float32 cancellation would dominate
    near = jnp.abs(w) < 0.05
    limit = -k3 / (6.0 * sd**3)
    safe_u = jnp.where(near, 1.0, u)
    safe_w = jnp.where(near, 1.0, w)
    corr = jnp.where(near, limit, 1.0 / safe_u - 1.0 / safe_w)
    return jnp.minimum(_log_normal_sf_plus(w, corr), 0.0)


def gamma_saddlepoint_cgf(n):
    """Centred CGF of Gamma(n, 1) (for checks of :func:`saddlepoint_log_sf`)."""
    n = _f32(n)

    def cgf(lam):
        lam = jnp.minimum(lam, 1.0 - 1e-6)
        return (n * _d_minus_log1p(-lam), n / (1 - lam) - n, n / (1 - lam) ** 2, 2 * n / (1 - lam) ** 3)

    return cgf


def pvalue(log_p) -> jax.Array:
    """exp(log p) (underflows to 0 only where log p < −103)."""
    return jnp.exp(_f32(log_p))


def normal_log_sf(z) -> jax.Array:
    """log(1 − Φ(z)), stable."""
    return log_ndtr(-_f32(z))


__all__ = [
    "binomial_half_log_sf",
    "gamma_log_sf",
    "gamma_saddlepoint_cgf",
    "normal_log_sf",
    "pvalue",
    "saddlepoint_log_sf",
]

