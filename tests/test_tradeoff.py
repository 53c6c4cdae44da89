"""Trade-off curves (Sec. 3.2, Fig. 1; App. C): Monte Carlo against closed forms and theory.

Statistical checks use tests/stats.py: a fixed seed, a tolerance of Z ≈ 4.89 standard
errors of the estimate (two-sided false-failure probability 1e-6 per check), or, where
the compared quantity is an optimum over a data-chosen point, Hoeffding's inequality
with a union bound (stated where used). Deterministic checks state their float tolerance.
"""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize as sciopt
from scipy import sparse, special

from tests import stats
from wmspec_jax import decoders, prf, theory
from wmspec_jax import tradeoff as to
from wmspec_jax.tradeoff import kernels, linear, montecarlo, optimize, zeta

# The paper's simulated pair (App. C.1).
Q = np.array([0.4, 0.10, 0.12, 0.11, 0.08, 0.06, 0.05, 0.035, 0.025, 0.02], np.float32)
P = np.array([0.1, 0.13, 0.155, 0.115, 0.235, 0.065, 0.055, 0.05, 0.06, 0.035], np.float32)
ENT_P = 2.1466205942  # -Σ P log P of the float64 pair
N = 100_000
GAMMAS = np.linspace(0.0, 1.0, 11)
LEVELS = 21


def zcheck(estimate, stderr, exact, what):
    estimate, stderr, exact = (np.asarray(a, np.float64) for a in (estimate, stderr, exact))
    err = np.abs(estimate - exact)
    bad = err > stats.Z * stderr + 1e-9
    assert not bad.any(), f"{what}: |MC - exact| = {err[bad]} > {stats.Z:.2f} x SE = {stats.Z * stderr[bad]}"


@pytest.fixture(scope="module")
def exact():
    return to.gumbel_coupling_exact(Q, P)


@pytest.fixture(scope="module")
def pi_gumbel():
    return to.estimate_coupling(Q, P, to.gumbel(), 11, N)


@pytest.fixture(scope="module")
def pi_synthid_inf():
    return to.estimate_coupling(Q, P, to.synthid_limit(30), 12, N)


@pytest.fixture(scope="module")
def exact_linear(exact):
    return to.linear_frontier(Q, P, exact, num_levels=LEVELS)


# ---------------------------------------------------------------------------
# Exact facts of the paper's pair and of the Gumbel-max coupling
# ---------------------------------------------------------------------------


def test_paper_pair_constants():
    assert abs(to.one_minus_tv(Q, P) - 0.7) < 1e-7
    opt = to.optimum_point(Q, P)
    assert abs(opt.se - 0.7) < 1e-7 and abs(opt.ws - ENT_P) < 1e-6
    ss = to.speculative_sampling_point(Q, P)
    assert (ss.se, ss.ws) == (opt.se, 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gumbel_coupling_exact_is_a_coupling(seed):
    """Marginals of the closed-form joint law are exactly Q and P (float64)."""
    rng = np.random.default_rng(seed)
    q, p = (rng.dirichlet(np.full(7, 0.7)).astype(np.float32) for _ in range(2))
    c = to.gumbel_coupling_exact(q, p)
    assert (c.joint >= 0).all()
    np.testing.assert_allclose(c.joint.sum(1), q / q.sum(dtype=np.float64), atol=1e-12)
    np.testing.assert_allclose(c.joint.sum(0), p / p.sum(dtype=np.float64), atol=1e-12)
    assert abs(np.trace(c.joint) - to.gumbel_agreement_exact(q, p)) < 1e-9
    # Identical models: X = Y always.
    same = to.gumbel_coupling_exact(q, q)
    np.testing.assert_allclose(same.joint, np.diag(q / q.sum(dtype=np.float64)), atol=1e-12)


def test_gumbel_coupling_monte_carlo_matches_closed_form(exact, pi_gumbel):
    counts = np.rint(pi_gumbel.joint * N).astype(np.int64)
    assert counts.sum() == N
    stats.assert_counts_match(counts.ravel(), exact.joint.ravel(), "Gumbel coupling (X, Y)")


def test_synthid_limit_token_marginals():
    """SynthID m=∞ (m layers + one-hot, App. C.1) is unbiased up to the finite-m error;
    with m = 64 that error (~(3/4)^64) is far below the test's resolution."""
    n = 50_000
    pi = to.estimate_coupling(Q, P, to.synthid_limit(64), 13, n)
    px, py = to.coupling.marginals(pi)
    stats.assert_counts_match(np.rint(px * n), Q, "SynthID(m=∞) draft marginal")
    stats.assert_counts_match(np.rint(py * n), P, "SynthID(m=∞) target marginal")


def test_zeta_decoders_match_package_decoders():
    """Batched decoders here reproduce wmspec_jax.decoders on the same ζ, and ζ is the PRF's."""
    key = zeta.run_keys(5)
    idx = jnp.arange(64, dtype=jnp.uint32)
    u = zeta.draw(to.gumbel(), key[prf.Stream.DRAFT], idx, P.size)
    np.testing.assert_array_equal(
        u, prf.vocab_uniforms(prf.context_seeds(key[prf.Stream.DRAFT], idx[:, None]), P.size))
    np.testing.assert_array_equal(zeta.decode(to.gumbel(), P, u), jax.vmap(decoders.gumbel_max, (None, 0))(P, u))
    m = 40  # two packed words per token
    words = zeta.draw(to.synthid(m), key[prf.Stream.DRAFT], idx, P.size)
    g = zeta.unpack_gvalues(words, m)
    np.testing.assert_array_equal(
        g, prf.vocab_gbits(prf.context_seeds(key[prf.Stream.DRAFT], idx[:, None]), P.size, m))
    ref = jax.jit(decoders.synthid)(jnp.broadcast_to(P, (64, 10)), g)
    np.testing.assert_allclose(zeta.decode(to.synthid(m), P, words), ref, atol=1e-6)
    np.testing.assert_array_equal(zeta.token(to.synthid_limit(m), P, words), np.argmax(ref, axis=-1))
    with pytest.raises(ValueError, match="not degenerate"):
        zeta.token(to.synthid(3), P, words)


# ---------------------------------------------------------------------------
# The Monte Carlo engine
# ---------------------------------------------------------------------------


def _uniform_stats(static, params, key, index):
    u = zeta.draw(to.gumbel(), key[prf.Stream.DRAFT], index, 3)
    return jnp.concatenate([u, jnp.square(u[:, :1])], axis=-1)


def test_moments_exact_and_chunk_invariant():
    """Mean/SE equal a float64 NumPy computation over the same samples, for any chunking
    (including a partial last chunk), and the mean of U(0,1) passes its z-test."""
    n = 10_007
    key = zeta.run_keys(3)
    u = np.asarray(zeta.draw(to.gumbel(), key[prf.Stream.DRAFT], jnp.arange(n, dtype=jnp.uint32), 3), np.float64)
    x = np.concatenate([u, u[:, :1] ** 2], axis=1)
    ref_mean, ref_se = x.mean(0), x.std(0, ddof=1) / np.sqrt(n)
    results = [montecarlo.moments(_uniform_stats, None, (), 3, n, block_size=bs, blocks_per_chunk=bpc)
               for bs, bpc in ((256, 128), (256, 1), (64, 3), (1000, 2))]
    for r in results:
        assert r.num_samples == n
        np.testing.assert_allclose(r.mean, ref_mean, rtol=1e-6)
        np.testing.assert_allclose(r.stderr, ref_se, rtol=1e-5)
    zcheck(results[0].mean, results[0].stderr, [0.5, 0.5, 0.5, 1 / 3], "uniform moments")


def test_counts_chunk_invariant(pi_gumbel):
    a = to.estimate_coupling(Q, P, to.gumbel(), 11, N, block_size=100, blocks_per_chunk=7)
    np.testing.assert_array_equal(a.joint, pi_gumbel.joint)


def test_montecarlo_input_errors():
    with pytest.raises(ValueError, match="num_samples"):
        montecarlo.moments(_uniform_stats, None, (), 0, 1)
    with pytest.raises(ValueError, match="num_samples"):
        montecarlo.moments(_uniform_stats, None, (), 0, 2**31)
    with pytest.raises(ValueError, match="seed"):
        zeta.run_keys(-1)


# ---------------------------------------------------------------------------
# Optimisation
# ---------------------------------------------------------------------------


def test_zoom_grid_minimiser_and_root():
    a = jnp.array([0.0, 0.123456, 0.5, 0.987654, 1.0])
    # Convex, piecewise linear, with a plateau of minimisers [a - 0.05, a + 0.05] ∩ [0, 1].
    fn = lambda x: jnp.maximum(jnp.abs(x - a[:, None]) - 0.05, 0.0) + 0.3 * jnp.abs(x - a[:, None])
    x, v = optimize.minimize_convex(fn, jnp.zeros(5), jnp.ones(5))
    tol = optimize.bracket_width(0.0, 1.0, optimize.DEFAULT_NUM_GRID, optimize.DEFAULT_NUM_ROUNDS)
    assert tol < 1e-7
    np.testing.assert_allclose(x, a, atol=tol + 1e-7)
    np.testing.assert_allclose(v, 0.0, atol=1e-6)
    r = optimize.root_increasing(lambda x: x**3, jnp.array([0.0, 0.001, 0.2, 0.9, 2.0]), 0.0, 1.0)
    np.testing.assert_allclose(r, [0.0, 0.1, 0.2 ** (1 / 3), 0.9 ** (1 / 3), 1.0], atol=1e-6)


def _lp_linear(pi, q, p, gamma0):
    """max SE of the linear class over θ ∈ [0,1], γ ∈ [γ0,1] as an LP (HiGHS), exact to 1e-9."""
    q, p = q.astype(np.float64), p.astype(np.float64)
    v = q.size
    pairs = [(x, y) for x in range(v) for y in range(v) if pi[x, y] > 1e-15]
    nt = len(pairs) * v
    eye = np.eye(v)
    rows, cols, vals, b = [], [], [], []
    r = 0
    for k, (x, y) in enumerate(pairs):
        for w in range(v):
            dq, dp, c0, t = eye[x, w] - q[w], eye[y, w] - p[w], q[w] - p[w], 2 + k * v + w
            for s in (1.0, -1.0):  # s·D - t <= 0 with D = c0 + θ dq - γ dp
                rows += [r, r, r]
                cols += [0, 1, t]
                vals += [s * dq, -s * dp, -1.0]
                b.append(-s * c0)
                r += 1
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(r, 2 + nt))
    cost = np.concatenate([[0.0, 0.0], np.repeat([pi[x, y] for x, y in pairs], v)])
    res = sciopt.linprog(cost, A_ub=a_ub, b_ub=b, bounds=[(0, 1), (gamma0, 1)] + [(0, None)] * nt, method="highs")
    assert res.status == 0
    return 1.0 - 0.5 * res.fun


def test_linear_frontier_matches_linear_program(exact, exact_linear):
    """The nested zoom grids reach the LP optimum of the same (exact) objective."""
    fr = exact_linear
    for k in (0, 3, 8, 14, LEVELS - 1):
        lp = _lp_linear(exact.joint, Q, P, fr.params["gamma0"][k])
        assert abs(fr.se[k] - lp) < 2e-6, (k, fr.se[k], lp)
    assert (fr.params["gamma"] >= fr.params["gamma0"] - 1e-7).all()
    # γ0 solves the exact constraint E Ent((1-γ0)P + γ0 δ_Y) = Ent(P) - level (Eq. 10).
    ent = np.array([float(theory.expected_entropy_degenerate(P, g)) for g in fr.params["gamma0"][1:-1]])
    np.testing.assert_allclose(float(theory.entropy(P)) - ent, fr.params["ws_required"][1:-1], atol=2e-5)
    # Endpoints: no requirement -> 1 - TV; full strength -> P(X = Y) (θ = γ = 1).
    assert abs(fr.se[0] - 0.7) < 1e-6
    assert abs(fr.se[-1] - to.gumbel_agreement_exact(Q, P)) < 1e-6
    assert abs(fr.ws[-1] - ENT_P) < 1e-5


def test_linear_frontier_monotone(exact_linear, pi_gumbel, pi_synthid_inf):
    """Along the frontier the requirement rises, SE falls and the achieved WS rises."""
    for fr in (exact_linear, to.linear_frontier(Q, P, pi_gumbel, num_levels=LEVELS),
               to.linear_frontier(Q, P, pi_synthid_inf, num_levels=LEVELS)):
        assert (np.diff(fr.params["ws_required"]) > 0).all()
        assert (np.diff(fr.se) <= 1e-6).all(), np.diff(fr.se).max()
        assert (np.diff(fr.params["gamma"]) >= -1e-6).all()
        assert (np.diff(fr.ws) >= -1e-6).all()


def test_linear_frontier_monte_carlo_vs_exact(exact, exact_linear, pi_gumbel):
    """MC frontier (Gumbel-max) against the closed-form coupling's frontier.

    (a) at the exact optimiser (a fixed point) the MC objective passes a z-test;
    (b) the MC optimum is at least the MC value there, so MC ≥ exact − Z·SE;
    (c) upper side via Hoeffding (per-sample SE ∈ [0,1]) and a union bound over a
        2001² grid of (θ, γ) (α = 1e-6), plus the Lipschitz slack 4h between grid points.
    """
    fr = to.linear_frontier(Q, P, pi_gumbel, num_levels=LEVELS)
    np.testing.assert_allclose(fr.params["gamma0"], exact_linear.params["gamma0"], atol=1e-7)
    th, ga = exact_linear.params["theta"], exact_linear.params["gamma"]
    se_pairs, ws_pairs = linear.linear_pair_values(Q, P, th, ga)
    mc_at_opt, mc_err = to.expectation(pi_gumbel, se_pairs)
    zcheck(mc_at_opt, mc_err, exact_linear.se, "linear SE at the exact optimiser")
    ws_mc, ws_err = to.expectation(pi_gumbel, ws_pairs)
    zcheck(ws_mc, ws_err, np.array([float(theory.watermark_strength_degenerate(P, g)) for g in ga]), "linear WS")
    assert (fr.se >= exact_linear.se - stats.Z * mc_err - 1e-6).all()
    h = 1.0 / 2000
    hoeffding = np.sqrt(np.log(2 * 2001**2 / stats.ALPHA) / (2 * N)) + 4 * h
    assert (fr.se <= exact_linear.se + hoeffding).all(), (fr.se - exact_linear.se).max()


def test_linear_frontier_generic_path_agrees():
    """The any-decoder path (MC pass per zoom round, γ = γ0 by Lemma 3.4) and the coupling
    path evaluate the same ζ samples: their optima differ only through γ0 (MC vs exact
    constraint), by at most 2·|Δγ0| (the objective is 2-Lipschitz in γ) plus the zoom tolerance."""
    n = 10_000
    levels = np.array([0.0, 0.3, 1.0, 1.8, 2.1])
    gen = to.linear_frontier_mc(Q, P, to.gumbel(), 21, n, levels=levels, root_rounds=6, theta_rounds=7)
    pmf = to.linear_frontier(Q, P, to.estimate_coupling(Q, P, to.gumbel(), 21, n), levels=levels)
    np.testing.assert_allclose(pmf.params["gamma"], pmf.params["gamma0"], atol=1e-6)  # γ* = γ0 here too
    dgam = np.abs(gen.params["gamma0"] - pmf.params["gamma0"])
    assert (np.abs(gen.se - pmf.se) <= 2 * dgam + 1e-5).all(), (gen.se, pmf.se, dgam)
    assert (gen.ws >= gen.params["ws_required"] - 1e-5).all()  # the constraint holds on the samples
    assert gen.se[0] == pytest.approx(0.7, abs=1e-6)


# ---------------------------------------------------------------------------
# Hu's and Google's classes
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exact_kernels(exact):
    return {cls: to.kernel_curve_from_coupling(Q, P, exact, cls, GAMMAS) for cls in (kernels.HU, kernels.GOOGLE)}


def test_kernel_closed_forms(exact_kernels):
    """γ = 0 closed forms (degenerate draft) and SE(γ) = (1-γ)(1-TV) + γ P(X=Y)."""
    agree = to.gumbel_agreement_exact(Q, P)
    g0 = exact_kernels[kernels.GOOGLE]
    h0 = exact_kernels[kernels.HU]
    acc = np.minimum(1, P.astype(np.float64) / Q)
    hb = special.entr(acc) + special.entr(1 - acc)
    assert to.google_ws_at_zero(Q, P) == pytest.approx(np.sum(special.entr(P.astype(np.float64))) - np.sum(Q * hb), abs=1e-12)
    assert g0.ws[0] == pytest.approx(to.google_ws_at_zero(Q, P), abs=2e-5)
    assert h0.ws[0] == pytest.approx(to.hu_ws_at_zero(Q, P), abs=2e-5)
    for c in (g0, h0):
        np.testing.assert_allclose(c.se, to.kernel_se_degenerate(Q, P, agree, GAMMAS), atol=2e-6)
        assert c.ws[-1] == pytest.approx(ENT_P, abs=2e-5)


def test_kernel_classes_monte_carlo_vs_exact(exact_kernels, pi_gumbel):
    """Both estimators (coupling path; per-sample path with explicit ξ) vs the closed-form coupling."""
    sel = [0, 3, 6, 10]
    for cls in (kernels.HU, kernels.GOOGLE):
        ex = exact_kernels[cls]
        c = to.kernel_curve_from_coupling(Q, P, pi_gumbel, cls, GAMMAS[sel])
        zcheck(c.se, c.se_stderr, ex.se[sel], f"{cls} SE (coupling)")
        zcheck(c.ws, c.ws_stderr, ex.ws[sel], f"{cls} WS (coupling)")
    m = to.kernel_curve_mc(Q, P, to.gumbel(), kernels.GOOGLE, GAMMAS, 14, N)
    zcheck(m.se[sel], m.se_stderr[sel], exact_kernels[kernels.GOOGLE].se[sel], "google SE (per-sample)")
    zcheck(m.ws[sel], m.ws_stderr[sel], exact_kernels[kernels.GOOGLE].ws[sel], "google WS (per-sample)")


def test_per_sample_and_coupling_paths_identical_for_hu(pi_gumbel):
    """Hu's class has no ξ: on the same ζ both estimators are the same sample average."""
    a = to.kernel_curve_mc(Q, P, to.gumbel(), kernels.HU, GAMMAS, 11, N)
    b = to.kernel_curve_from_coupling(Q, P, pi_gumbel, kernels.HU, GAMMAS)
    np.testing.assert_allclose(a.se, b.se, atol=1e-6)
    np.testing.assert_allclose(a.ws, b.ws, atol=1e-5)
    np.testing.assert_allclose(a.ws_stderr, b.ws_stderr, rtol=1e-3)


def test_google_above_hu_and_neither_reaches_optimum(exact_kernels, pi_gumbel, pi_synthid_inf):
    """Sec. 3.2: Google's class has higher WS than Hu's at matched SE (with a degenerate draft
    SE(γ) is the same for both, and Jensen over ξ makes WS_google ≥ WS_hu sample by sample);
    neither reaches the optimum (1 - TV, Ent(P))."""
    for name, pi in (("exact", None), ("gumbel", pi_gumbel), ("synthid_inf", pi_synthid_inf)):
        if pi is None:
            hu, go = exact_kernels[kernels.HU], exact_kernels[kernels.GOOGLE]
        else:
            hu, go = (to.kernel_curve_from_coupling(Q, P, pi, cls, GAMMAS) for cls in (kernels.HU, kernels.GOOGLE))
        np.testing.assert_allclose(go.se, hu.se, atol=2e-6)
        assert (go.ws[:-1] - hu.ws[:-1] > 1e-3).all(), name
        assert abs(go.ws[-1] - hu.ws[-1]) < 1e-5
        for c in (hu, go):
            # Distance to the star in the max-norm of the two shortfalls.
            shortfall = np.maximum(0.7 - c.se, ENT_P - c.ws)
            assert shortfall.min() > 0.03 + stats.Z * max(c.se_stderr.max(), c.ws_stderr.max()), (name, shortfall.min())


def test_kernel_curves_along_gamma(exact_kernels, pi_gumbel):
    """Theory along γ: SE is non-increasing (concave with its maximum 1 - TV at γ = 0,
    Lemma 3.4); WS is convex (KL along an affine path) — but NOT monotone: it dips below
    its γ = 0 value for the paper's pair, so only part of each class is Pareto-efficient."""
    curves = list(exact_kernels.values()) + [to.kernel_curve_from_coupling(Q, P, pi_gumbel, cls, GAMMAS) for cls in
                                             (kernels.HU, kernels.GOOGLE)]
    for c in curves:
        assert (np.diff(c.se) <= 1e-6).all()
        assert (np.diff(c.ws, 2) >= -1e-5).all()
    go = exact_kernels[kernels.GOOGLE]
    assert go.ws.min() < go.ws[0] - 0.1
    assert not go.pareto_mask().all() and go.pareto_mask()[0] and go.pareto_mask()[-1]


def test_published_hu_variant(exact_kernels, exact):
    pub = to.kernel_curve_from_coupling(Q, P, exact, kernels.HU, GAMMAS, published=True)
    hu = exact_kernels[kernels.HU]
    assert kernels.PUBLISHED_LABEL in pub.label and "as published (unnormalised residual)" in pub.label
    np.testing.assert_allclose(pub.se, hu.se, atol=1e-6)  # SE unchanged (degenerate draft)
    assert (pub.ws[:-1] > hu.ws[:-1] + 0.05).all()  # "its Hu curve sits too high"
    assert pub.ws[0] == pytest.approx(1.7318092, abs=1e-4)
    with pytest.raises(ValueError, match="only for Hu"):
        to.kernel_curve_from_coupling(Q, P, exact, kernels.GOOGLE, GAMMAS, published=True)


def test_synthid_m30_google_curve_below_gumbel(exact):
    """Sec. 3.2: Google's class with SynthID m = 30 lies below Gumbel-max's. Compared at matched
    SE by interpolating the exact Gumbel curve; tolerance = Z·(SE of WS + max slope × SE of SE)."""
    syn = to.kernel_curve_mc(Q, P, to.synthid(30), kernels.GOOGLE, GAMMAS, 15, N)
    # A fine exact Gumbel curve; WS is convex in SE along it, so the chord error of the
    # interpolation is at most the largest second difference (added to the margin).
    gum = to.kernel_curve_from_coupling(Q, P, exact, kernels.GOOGLE, np.linspace(0, 1, 401))
    order = np.argsort(gum.se)
    slope = np.max(np.abs(np.diff(gum.ws[order]) / np.diff(gum.se[order])))
    chord = np.max(np.abs(np.diff(gum.ws, 2)))
    inside = (syn.se >= gum.se.min()) & (syn.se <= gum.se.max())
    assert inside.sum() >= 5
    ws_gum = np.interp(syn.se[inside], gum.se[order], gum.ws[order])
    margin = stats.Z * (syn.ws_stderr[inside] + slope * syn.se_stderr[inside]) + chord
    assert (syn.ws[inside] + margin < ws_gum).all(), (syn.ws[inside], ws_gum)
    # At γ = 1 (strength maintained) finite m stays below Ent(P) (Thm 3.2: not degenerate).
    assert syn.ws[-1] + stats.Z * syn.ws_stderr[-1] < ENT_P


def _tournament_np(probs, g):
    for layer in g:
        probs = probs * (1.0 + layer - np.sum(probs * layer))
    return probs


def _exact_kernel_small(q, p, m, gammas, cls, published=False):
    """Hu's / Google's class for finite-m SynthID by enumerating every g (and g' for ξ)."""
    q, p = q.astype(np.float64), p.astype(np.float64)
    v = q.size
    configs = [np.array(c, np.float64).reshape(m, v) for c in itertools.product((0, 1), repeat=m * v)]
    acc = np.minimum(1.0, p / q)
    res = np.maximum(p - q, 0.0)
    res_n = res / res.sum()
    rzs = [_tournament_np(res_n, g) for g in configs] if cls == kernels.GOOGLE else [res if published else res_n]
    se = np.zeros(len(gammas))
    ws = np.zeros(len(gammas))
    for g in configs:
        qz, pz = _tournament_np(q, g), _tournament_np(p, g)
        for rz in rzs:
            spec = acc * qz + np.sum((1 - acc) * qz) * rz
            for i, gam in enumerate(gammas):
                t = (1 - gam) * spec + gam * pz
                se[i] += np.minimum(qz, t).sum()
                tl = np.where(t > 0, t * np.log(np.where(t > 0, t, 1)), 0).sum()
                ws[i] += (-(p * np.log(p)).sum() + tl) if published else tl - (t * np.log(p)).sum()
    return se / (len(configs) * len(rzs)), ws / (len(configs) * len(rzs))


@pytest.mark.parametrize("cls,published", [(kernels.HU, False), (kernels.GOOGLE, False), (kernels.HU, True)])
def test_finite_synthid_classes_vs_enumeration(cls, published):
    """Non-degenerate decoder (SynthID m = 2, V = 3): per-sample MC vs exact enumeration of g, g'."""
    q = np.array([0.6, 0.3, 0.1], np.float32)
    p = np.array([0.2, 0.3, 0.5], np.float32)
    gam = np.array([0.0, 0.4, 1.0])
    se, ws = _exact_kernel_small(q, p, 2, gam, cls, published)
    mc = to.kernel_curve_mc(q, p, to.synthid(2), cls, gam, 16, 50_000, published=published)
    zcheck(mc.se, mc.se_stderr, se, f"{cls} SE, SynthID m=2")
    zcheck(mc.ws, mc.ws_stderr, ws, f"{cls} WS, SynthID m=2")


# ---------------------------------------------------------------------------
# Reference points
# ---------------------------------------------------------------------------


def test_alg1_attains_the_optimum():
    """Thm 4.1: pseudorandom acceptance gives SE = 1 - TV and WS = Ent(P)."""
    pt = to.alg1_point_mc(Q, P, to.gumbel(), 17, N)
    zcheck(pt.se, pt.se_stderr, 0.7, "Alg. 1 SE")
    zcheck(pt.ws, pt.ws_stderr, ENT_P, "Alg. 1 WS")


def test_alg1_with_a_non_degenerate_decoder_matches_exact_enumeration():
    """Beyond the paper: Alg. 1 with DiPmark (α = 0.3, V = 4). SE stays 1 − TV; WS = E_ζ KL(P'_ζ || P) is
    below Ent(P). The exact value enumerates all 24 x 24 (π^D, π^T) and integrates u piecewise."""
    q4 = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
    p4 = np.array([0.15, 0.25, 0.35, 0.25], np.float32)
    dec = decoders.dipmark_decoder(0.3)
    a = np.minimum(1.0, p4 / q4).astype(np.float64)
    res = np.maximum(p4 - q4, 0.0).astype(np.float64)
    res /= res.sum()
    orders = [np.asarray(o, np.float32) for o in itertools.permutations(range(4))]
    qzs = [np.asarray(decoders.dipmark(q4, o, 0.3), np.float64) for o in orders]
    rzs = [np.asarray(decoders.dipmark(res.astype(np.float32), o, 0.3), np.float64) for o in orders]
    cuts = np.unique(np.concatenate([[0.0, 1.0], a]))
    se = ws = 0.0
    for qz in qzs:
        for rz in rzs:
            for lo, hi in zip(cuts[:-1], cuts[1:]):
                acc = (a > 0.5 * (lo + hi)).astype(np.float64)
                accepted = float(np.sum(qz * acc))
                out = qz * acc + (1.0 - accepted) * rz
                kl = float(np.sum(np.where(out > 0, out * np.log(np.where(out > 0, out, 1.0) / p4), 0.0)))
                se += (hi - lo) * accepted / len(orders) ** 2
                ws += (hi - lo) * kl / len(orders) ** 2
    pt = to.alg1_point_mc(q4, p4, dec, 5, N)
    zcheck(pt.se, pt.se_stderr, 1.0 - 0.5 * np.abs(p4 - q4).sum(), "Alg. 1 SE with DiPmark = 1 - TV")
    assert se == pytest.approx(1.0 - 0.5 * np.abs(p4 - q4).sum(), abs=1e-6)
    zcheck(pt.ws, pt.ws_stderr, ws, "Alg. 1 WS with DiPmark")
    assert ws < float(-np.sum(p4 * np.log(p4))) - 0.1  # below Ent(P): not degenerate


def test_strength_maintained_points(pi_gumbel):
    agree = to.gumbel_agreement_exact(Q, P)
    pt = to.maintained_point_from_coupling(Q, P, pi_gumbel, to.gumbel())
    zcheck(pt.se, pt.se_stderr, agree, "maintained SE = P(X=Y)")
    zcheck(pt.ws, pt.ws_stderr, ENT_P, "maintained WS = Ent(P)")
    mc = to.maintained_point_mc(Q, P, to.gumbel(), 11, N)  # same ζ as pi_gumbel
    assert mc.se == pytest.approx(pt.se, abs=1e-6) and mc.ws == pytest.approx(pt.ws, abs=1e-5)


# ---------------------------------------------------------------------------
# Inputs and containers
# ---------------------------------------------------------------------------


def test_input_validation(exact):
    with pytest.raises(ValueError, match="sum to 1"):
        to.estimate_coupling(Q * 2, P, to.gumbel(), 0, 100)
    with pytest.raises(ValueError, match="negative"):
        to.gumbel_coupling_exact(-Q, P)
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        to.linear_frontier(Q[:5] / Q[:5].sum(), P, exact)
    with pytest.raises(ValueError, match="degenerate"):
        to.estimate_coupling(Q, P, to.synthid(30), 0, 100)
    with pytest.raises(ValueError, match="decoder kind"):
        to.WatermarkDecoder("kirchenbauer")
    with pytest.raises(ValueError, match="num_layers"):
        to.synthid(0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        to.kernel_curve_from_coupling(Q, P, exact, kernels.HU, [0.0, 1.5])
    with pytest.raises(ValueError, match="class"):
        to.kernel_curve_from_coupling(Q, P, exact, "kgw", GAMMAS)
    with pytest.raises(ValueError, match="does not match"):
        to.kernel_curve_from_coupling(Q, P, to.Coupling(np.eye(3) / 3, 10), kernels.HU, GAMMAS)
    with pytest.raises(ValueError, match="strictly positive"):
        to.gumbel_coupling_exact(np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5]))
    with pytest.raises(ValueError, match="biased"):
        to.alg1_point_mc(Q, P, decoders.kgw_decoder(), 0, 100)
    with pytest.raises(ValueError, match="num_levels"):
        to.linear_frontier(Q, P, exact, num_levels=1)


def test_curve_json_roundtrip(exact_kernels):
    c = exact_kernels[kernels.GOOGLE]
    d = json.loads(json.dumps(c.to_json()))
    back = to.Curve.from_json(d)
    np.testing.assert_array_equal(back.ws, c.ws)
    np.testing.assert_array_equal(back.params["gamma"], c.params["gamma"])
    assert back.label == c.label and back.num_samples == 0
    pt = to.optimum_point(Q, P)
    assert to.Point.from_json(json.loads(json.dumps(pt.to_json()))) == pt


# ---------------------------------------------------------------------------
# The experiment (small, end to end)
# ---------------------------------------------------------------------------


def test_experiment_writes_and_resumes(tmp_path):
    from experiments import tradeoff_curves as exp

    argv = ["tradeoff_curves", f"--output_dir={tmp_path}", "--num_samples=20000", "--num_gammas=11",
            f"--num_levels={LEVELS}", "--seed=3"]
    exp.FLAGS.unparse_flags()
    exp.FLAGS(argv)
    exp.main([argv[0]])
    doc = json.loads((tmp_path / "tradeoff.json").read_text())
    assert (tmp_path / "tradeoff.png").stat().st_size > 10_000
    assert doc["inputs"]["num_samples"] == 20000 and doc["inputs"]["seed"] == 3
    for name in ("linear_gumbel", "linear_synthid_inf_m30", "hu_gumbel", "google_gumbel", "hu_gumbel_published",
                 "hu_synthid_inf_m30", "google_synthid_inf_m30", "google_synthid_m30"):
        c = doc["curves"][name]
        assert len(c["se"]) == len(c["se_stderr"]) == len(c["ws"]) == len(c["ws_stderr"]) > 1
    assert "as published (unnormalised residual)" in doc["curves"]["hu_gumbel_published"]["label"]
    assert doc["reference_points"]["optimum"]["se"] == pytest.approx(0.7)
    assert doc["cache_hits"] == []
    # Resume: every Monte Carlo result comes from the cache, the outputs are rewritten.
    exp.FLAGS.unparse_flags()
    exp.FLAGS(argv + ["--published_hu"])
    exp.main([argv[0]])
    doc2 = json.loads((tmp_path / "tradeoff.json").read_text())
    assert sorted(doc2["cache_hits"]) == sorted(
        ["coupling_gumbel", "coupling_synthid_inf_m30", "google_synthid_m30", "alg1_gumbel"])
    assert doc2["curves"]["google_synthid_m30"]["ws"] == doc["curves"]["google_synthid_m30"]["ws"]
    assert doc2["inputs"]["published_hu_plotted"] is True
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*tmp*"))
    # A decoder beyond the paper adds its Google's class and Alg. 1's point (SE = 1 − TV, WS < Ent(P))
    exp.FLAGS.unparse_flags()
    exp.FLAGS(argv + ["--extra_decoders=gamma_reweight"])
    exp.main([argv[0]])
    doc3 = json.loads((tmp_path / "tradeoff.json").read_text())
    alg1 = doc3["reference_points"]["alg1_gamma_reweight"]
    assert len(doc3["curves"]["google_gamma_reweight"]["se"]) == 11
    assert abs(alg1["se"] - 0.7) < 5 * alg1["se_stderr"] + 1e-9 and alg1["ws"] < doc3["closed_forms"]["entropy_p"] - 1
    exp.FLAGS.unparse_flags()
    with pytest.raises(Exception, match="extra_decoders"):
        exp.FLAGS(argv + ["--extra_decoders=kgw"])
        exp.main([argv[0]])
    exp.FLAGS.unparse_flags()
