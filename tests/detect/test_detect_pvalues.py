"""Null distributions: Gamma / binomial tails against mpmath and scipy, saddlepoints against
exact tails and conditional Monte Carlo (including the soft detector's)."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats as sps

import wmspec_jax.detect as det
from tests import stats
from wmspec_jax.detect import pvalues

mpmath.mp.dps = 40


def mp_gamma_log_sf(n, s):
    return float(mpmath.log(mpmath.gammainc(mpmath.mpf(n), a=mpmath.mpf(s), regularized=True)))


def test_gamma_log_sf_matches_mpmath_from_the_bulk_to_huge_scores():
    ns, ss, ref = [], [], []
    for n in [1, 2, 5, 30, 99, 100, 101, 1000, 10_000, 100_000]:
        for z in [-2.0, 0.0, 1.0, 3.0, 6.0, 11.0, 13.0, 40.0, 1000.0]:
            s = float(np.float32(n + z * np.sqrt(n) + (z * z if z > 13 else 0.0)))
            if s <= 0:
                continue
            ns.append(n), ss.append(s), ref.append(mp_gamma_log_sf(n, s))
    got = np.asarray(jax.jit(det.gamma_log_sf)(np.array(ns, np.float32), np.array(ss, np.float32)))
    ref = np.array(ref)
    assert np.isfinite(got).all() and (got <= 0).all()
    rel = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
    assert rel.max() < 2e-4, f"worst: n={ns[rel.argmax()]} s={ss[rel.argmax()]} got {got[rel.argmax()]} ref {ref[rel.argmax()]}"
    assert ref.min() < -1e5  # p-values far below float32's range are still ranked


def test_gamma_log_sf_edge_cases():
    s = np.concatenate([[0.0, 3.0, 0.0, -1.0], np.linspace(1, 60, 50)]).astype(np.float32)
    n = np.concatenate([[0, 0, 5, 5], np.full(50, 10)]).astype(np.float32)
    lp = np.asarray(det.gamma_log_sf(n, s))
    assert (lp[:4] == 0).all()  # n = 0 (nothing scored) or s <= 0: p = 1
    assert (np.diff(lp[4:]) < 0).all()


def test_binomial_half_log_sf_matches_exact_tails():
    ks, ns = [], []
    for big_n in [1, 6, 30, 200, 2000, 2001, 20_000]:
        k = np.unique(np.clip(np.round(big_n / 2 + np.sqrt(big_n) / 2 * np.linspace(-3, 9, 25)), 0, big_n))
        ks.append(k), ns.append(np.full(k.shape, big_n))
    k, big_n = np.concatenate(ks), np.concatenate(ns)
    got = np.asarray(det.binomial_half_log_sf(k, big_n))
    ref = sps.binom.logsf(k - 1, big_n, 0.5)
    ok = np.isfinite(ref)
    rel = np.abs(got[ok] - ref[ok]) / np.maximum(1.0, np.abs(ref[ok]))
    worst = rel.argmax()
    assert rel.max() < 2e-3, (big_n[ok][worst], k[ok][worst], got[ok][worst], ref[ok][worst])
    edge = np.asarray(det.binomial_half_log_sf(np.array([31, 30, 0]), np.array([30, 30, 30])))
    assert edge[0] == -np.inf and edge[1] == pytest.approx(-30 * np.log(2), rel=1e-6) and edge[2] == 0


def test_saddlepoint_reproduces_the_gamma_tail():
    n = np.array([20.0, 100.0, 1000.0], np.float32)[:, None] * np.ones((1, 30), np.float32)
    s = n + np.sqrt(n) * np.linspace(-3, 12, 30, dtype=np.float32)[None]
    sp_fn = jax.jit(lambda n, s: pvalues.saddlepoint_log_sf(s - n, pvalues.gamma_saddlepoint_cgf(n), lower=-50.0,
                                                             upper=0.999999))
    sp = np.asarray(sp_fn(n, s))
    exact = np.asarray(det.gamma_log_sf(n, s))
    # relative error of p is O(1/n): < 1e-3 already at n = 20
    assert np.abs(np.expm1(sp - exact)).max() < 1e-3


def test_gamma_limits_and_inputs_from_outside():
    lp = np.asarray(det.gamma_log_sf(np.array([3.0, 3.0, 0.0, np.nan]), np.array([np.inf, np.nan, np.inf, 2.0])))
    assert lp[0] == -np.inf and np.isnan(lp[1]) and lp[2] == 0 and np.isnan(lp[3])
    mask = np.ones((2, 3), bool)
    y32 = np.array([[0.5, 0.2, 1.0], [0.5, 0.2, 0.9]], np.float32)  # y = 1: the limit p = 0, not NaN
    r = det.gamma_test(y32, mask)
    assert float(r.log_pvalue[0]) == -np.inf and float(r.pvalue[0]) == 0 and np.isfinite(float(r.log_pvalue[1]))
    # float64 input within 1e-8 of 1 keeps its precision: −log(1e-9) = 20.7, not +inf (float32 would round to 1)
    y64 = np.array([[0.5, 0.2, 1 - 1e-9]])
    r64 = det.gamma_test(y64, mask[:1])
    want = -np.log1p(-y64).sum()
    assert float(r64.score[0]) == pytest.approx(want, rel=1e-6)
    assert float(r64.log_pvalue[0]) == pytest.approx(mp_gamma_log_sf(3, want), rel=1e-4)
    for bad in (np.array([[0.5, np.nan, 0.1]]), np.array([[0.5, 1.5, 0.1]]), np.array([[-0.1, 0.5, 0.1]])):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            det.gamma_test(bad, mask[:1])
    det.gamma_test(np.array([[0.5, np.nan, 0.1]]), np.array([[True, False, True]]))  # unscored: never read


def test_mean_test_refuses_g_values_other_than_0_and_1():
    g = np.ones((1, 3, 4), np.uint8)
    det.mean_test(g, np.ones((1, 3), bool))
    for bad in (2 * g, g.astype(np.float32) * 0.5, -g.astype(np.int8)):
        with pytest.raises(ValueError, match="0 or 1"):
            det.mean_test(bad, np.ones((1, 3), bool))
    with pytest.raises(ValueError, match="positive finite"):
        det.mean_test(g, np.ones((1, 3), bool), [1.0, 2.0, 0.0, 1.0])


def test_weighted_mean_pvalue_is_exact_against_enumeration():
    """m = 6 SynthID weights, one and two tokens: every attainable score against brute force."""
    m = 6
    w = det.synthid_weights(m)
    for n in (1, 2):
        bits = ((np.arange(2 ** (n * m))[:, None] >> np.arange(n * m)) & 1).astype(np.uint8).reshape(-1, n, m)
        sums = np.round((bits * w).sum(axis=(1, 2)), 4)
        r = det.mean_test(bits, np.ones(bits.shape[:2], bool), w)
        exact = np.array([np.mean(sums >= t - 1e-4) for t in sums])
        np.testing.assert_allclose(np.asarray(r.pvalue, np.float64), exact, rtol=2e-6)
    # one token at the maximum: exactly 2^-6 (the saddlepoint said 0.0098 here)
    assert float(det.mean_test(np.ones((1, 1, m), np.uint8), np.ones((1, 1), bool), w).pvalue[0]) == 2.0 ** -6


@pytest.mark.parametrize("layers", [6, 30])
def test_weighted_mean_pvalue_is_calibrated_for_n_1_to_20(layers):
    """P(p <= α) equals the exact mass of {p <= α} (never above α) for every n = 1..20.

    (The saddlepoint used before gave P(p <= 0.2) = 0.2035 for one token with m = 6, where the exact
    mass is 0.172; for m = 30 it understated tail p-values by up to 5 %.)"""
    w = det.synthid_weights(layers)
    lat = det.weighted.lattice(w)
    assert lat.exact
    rng = np.random.default_rng(0)
    reps = 8000
    for n in range(1, 21):
        g = rng.integers(0, 2, size=(reps, n, layers), dtype=np.uint8)
        p = np.asarray(det.mean_test(g, np.ones((reps, n), bool), w).pvalue, np.float64)
        tails = np.exp(det.weighted.log_sf(np.arange(n * lat.span + 1), np.full(n * lat.span + 1, n), lat))
        for alpha in (0.01, 0.05, 0.2):
            below = tails[tails <= alpha * (1 + 1e-6)]
            mass = below.max() if below.size else 0.0  # P(p <= α) of the exact discrete null
            assert mass <= alpha * (1 + 1e-6)
            k = int((p <= alpha * (1 + 1e-6)).sum())
            assert sps.binomtest(k, reps, mass).pvalue > stats.ALPHA, (n, alpha, k / reps, mass)


def test_weighted_mean_bound_beyond_the_exact_range_is_conservative_and_tight():
    """The tilted Berry–Esseen bound used for long texts (n >= 30 in practice): never below the exact
    tail; within 2x of it near p = 0.01 and within 5x down to p = 1e-12."""
    a = np.asarray(det.weighted.lattice(det.synthid_weights(6)).upper)
    tables = det.weighted._exact_log_tails(tuple(int(x) for x in a), 80)
    for n in (30, 40, 80):
        first, logs = tables[n]
        k = first + np.arange(len(logs))
        keep = (logs < np.log(0.05)) & (logs > np.log(1e-12))
        bound = det.weighted._log_bound(k[keep].astype(float), np.full(keep.sum(), float(n)), a.astype(float))
        gap = bound - logs[keep]
        near = np.argmin(np.abs(logs[keep] - np.log(0.01)))
        assert gap.min() >= -1e-5 and gap.max() < np.log(5.0) and gap[near] < np.log(2.0), (n, gap.min(), gap.max())
    # weights off any lattice (bracketed, so conservative): FPR at most alpha
    w = np.array([1.0, np.pi / 3, np.e / 5, 0.123])
    assert not det.weighted.lattice(w).exact
    g = np.random.default_rng(1).integers(0, 2, size=(20000, 5, 4), dtype=np.uint8)
    p = np.asarray(det.mean_test(g, np.ones((20000, 5), bool), w).pvalue)
    for alpha in (0.01, 0.05):
        assert sps.binom.sf(int((p <= alpha).sum()) - 1, p.size, alpha) > stats.ALPHA


@pytest.fixture(scope="module")
def soft_detector():
    """A plausible fitted soft detector: fit on synthetic watermark-like statistics."""
    big, length = 4000, 41  # the Gumbel generation buffers' length: compiled code is shared
    key = jax.random.split(jax.random.key(0), 3)
    y_hi = 1 - jax.random.uniform(key[0], (big, length)) ** 4  # E concentrated high
    y_lo = jax.random.uniform(key[1], (big, length))
    u = jax.random.uniform(key[2], (big, length))
    src = np.where(np.asarray(u) < 0.6, 0, 1).astype(np.int8)
    wm = det.GumbelStats(jnp.where(src == 0, y_hi, y_lo), jnp.where(src == 0, y_lo, y_hi), u,
                         jnp.ones((big, length), bool), jnp.zeros(big, jnp.int32), jnp.full(big, length, jnp.int32))
    return det.fit_soft(wm, src), c_split(wm, slice(0, 2000)), length


def c_split(st, idx):
    return det.take(st, idx)


@pytest.mark.parametrize("n_tok", [4, 16, 41])
def test_soft_detector_pvalue_is_calibrated_given_u(soft_detector, n_tok):
    """Conditional on one fixed u pattern, the soft p-values of null texts are uniform over the y's."""
    soft, wm, length = soft_detector
    bsz = 2000
    u_row = np.random.default_rng(n_tok).random(length).astype(np.float32)
    k = jax.random.split(jax.random.key(n_tok), 2)
    mask = jnp.broadcast_to(jnp.arange(length) < n_tok, (bsz, length))  # one compiled shape for every n
    null = det.GumbelStats(jax.random.uniform(k[0], (bsz, length)), jax.random.uniform(k[1], (bsz, length)),
                           jnp.broadcast_to(jnp.asarray(u_row), (bsz, length)), mask,
                           jnp.zeros(bsz, jnp.int32), jnp.full(bsz, length, jnp.int32))
    p = np.asarray(det.score_soft(soft, null).pvalue)
    # discreteness at small n makes p slightly conservative; never anti-conservative
    k01 = int((p <= 0.01).sum())
    assert sps.binom.sf(k01 - 1, bsz, 0.01) > stats.ALPHA, f"FPR {k01 / bsz} at n={n_tok}"
    if n_tok >= 16:
        stats.assert_uniform(p, f"soft p-values, n={n_tok}")
    # power: the watermark-like statistics give small p-values
    p_wm = np.asarray(det.score_soft(soft, wm._replace(mask=mask)).pvalue)
    assert float(np.mean(p_wm <= 0.01)) > 0.5
