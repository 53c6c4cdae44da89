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


def test_weighted_mean_pvalue_against_monte_carlo():
    rng = np.random.default_rng(0)
    m, n_tok, reps = 6, 8, 400_000
    w = det.synthid_weights(m)
    g = rng.integers(0, 2, size=(reps, n_tok, m), dtype=np.uint8)
    sums = (g * w).sum(axis=(1, 2))
    rows = [int(np.argmin(np.abs(sums - q))) for q in np.quantile(sums, [0.5, 0.9, 0.99, 0.999])]
    r = det.mean_test(g[rows], np.ones((len(rows), n_tok), bool), w)
    for i, row in enumerate(rows):
        mc = float(np.mean(sums >= sums[row] - 1e-5))
        se = np.sqrt(mc * (1 - mc) / reps)
        got = float(r.pvalue[i])
        # saddlepoint on 48 weighted Bernoullis (no continuity correction): within 10% relative
        assert abs(got - mc) < 0.1 * mc + stats.Z * se, (sums[row], got, mc)


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
    return type(st)(*[x[idx] for x in st])


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
