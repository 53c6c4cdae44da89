"""Theorems 3.2-3.3, Lemma 3.4 and Eq. (5) on small vocabularies."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, prf, theory

# The paper's simulated pair (App. C.1).
Q = np.array([0.4, 0.10, 0.12, 0.11, 0.08, 0.06, 0.05, 0.035, 0.025, 0.02], np.float32)
P = np.array([0.1, 0.13, 0.155, 0.115, 0.235, 0.065, 0.055, 0.05, 0.06, 0.035], np.float32)
N = 50_000


@pytest.fixture(scope="module")
def seeds():
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, 2**31, size=(N, 4))
    keys = prf.stream_keys(b"theory-tests")
    return {s: prf.context_seeds(keys[s], ctx) for s in prf.Stream}


def test_basic_quantities():
    assert np.isclose(float(theory.entropy(np.array([0.5, 0.5]))), np.log(2), atol=1e-6)
    assert float(theory.entropy(np.array([1.0, 0.0]))) == 0
    assert np.isclose(float(theory.kl_divergence(P, P)), 0, atol=1e-6)
    assert np.isinf(float(theory.kl_divergence(np.array([0.5, 0.5]), np.array([1.0, 0.0]))))
    tv = float(theory.total_variation(Q, P))
    assert np.isclose(tv, 0.5 * np.abs(Q - P).sum(), atol=1e-6)
    assert np.isclose(float(theory.max_sampling_efficiency(Q, P)), 1 - tv, atol=1e-6)
    assert float(theory.expected_tokens_per_step(0.5, 0)) == 1.0
    assert np.isclose(float(theory.expected_tokens_per_step(0.5, 3)), 1.875)


def test_ws_of_gumbel_equals_entropy(seeds):
    """Thm 3.2 with equality and Thm 3.3 (Gumbel-max)."""
    u = prf.vocab_uniforms(seeds[prf.Stream.TARGET], P.size)
    samples = jax.vmap(decoders.gumbel_max, in_axes=(None, 0))(P, u)
    ws, se = theory.watermark_strength(P, samples)
    ent = float(theory.entropy(P))
    assert abs(float(ws) - ent) <= stats.Z * float(se)
    assert np.isclose(float(theory.watermark_strength_degenerate(P)), ent, atol=1e-5)


def _exact_expected_entropy_synthid(p, m):
    v = p.size
    gs = np.array(list(itertools.product((0.0, 1.0), repeat=v)))
    dists, w = p[None].astype(np.float64), np.ones(1)
    for _ in range(m):
        dists = (dists[:, None, :] * (1 + gs[None] - (dists @ gs.T)[:, :, None])).reshape(-1, v)
        w = np.repeat(w, len(gs)) / len(gs)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(dists > 0, dists * np.log(dists), 0).sum(-1)
    return float((w * ent).sum())


def test_thm32_ws_is_entropy_gap_for_synthid():
    p = np.array([0.5, 0.3, 0.15, 0.05])
    ent = float(theory.entropy(p))
    for m in (1, 2, 3):
        ws = theory.watermark_strength_synthid_exact(p, m)
        assert np.isclose(ws, ent - _exact_expected_entropy_synthid(p, m), atol=1e-9)
        assert ws < ent


def test_thm33_synthid_ws_grows_with_m_toward_entropy(seeds):
    p = np.array([0.6, 0.3, 0.1])
    ent = float(theory.entropy(p))
    exact = [theory.watermark_strength_synthid_exact(p, m) for m in range(1, 8)]
    assert all(b > a for a, b in zip(exact, exact[1:])), exact
    assert all(ws < ent for ws in exact)
    # Monte Carlo with the PRF's g-values agrees with the enumeration (m = 3) ...
    g3 = prf.vocab_gbits(seeds[prf.Stream.DRAFT], 3, 3)
    ws3, se3 = theory.watermark_strength(p.astype(np.float32), jax.vmap(lambda g: decoders.synthid(p, g, layers_axis=-2))(g3))  # m = V = 3
    assert abs(float(ws3) - exact[2]) <= stats.Z * float(se3) + 1e-5
    # ... and keeps growing toward Ent(P) on the paper's P (m = 30 is near-degenerate, App. C.1)
    ent_p = float(theory.entropy(P))
    ws_by_m = []
    for m in (5, 15, 30):
        g = prf.vocab_gbits(seeds[prf.Stream.DRAFT], P.size, m)
        ws, se = theory.watermark_strength(P, jax.vmap(decoders.synthid, in_axes=(None, 0))(P, g))
        ws_by_m.append(float(ws))
        assert float(ws) < ent_p
    assert ws_by_m[0] < ws_by_m[1] < ws_by_m[2], ws_by_m
    assert 0.8 * ent_p < ws_by_m[2] < ent_p, (ws_by_m, ent_p)  # below Gumbel-max at m = 30 (Sec. 3.2)


def test_lemma34_sse_bounded_by_one_minus_tv(seeds):
    bound = 1 - float(theory.total_variation(Q, P))
    ud = prf.vocab_uniforms(seeds[prf.Stream.DRAFT], P.size)
    ut = prf.vocab_uniforms(seeds[prf.Stream.TARGET], P.size)
    gd = jax.vmap(decoders.gumbel_max, in_axes=(None, 0))
    for name, qz, pz in (
        ("gumbel, shared zeta", gd(Q, ud), gd(P, ud)),
        ("gumbel, independent zeta", gd(Q, ud), gd(P, ut)),
    ):
        sse, se = theory.speculative_sampling_efficiency(qz, pz)
        assert float(sse) <= bound + stats.Z * float(se), name
        assert float(sse) < bound - 0.05, name  # strictly worse: watermarking costs efficiency
    # identity decoders attain the bound exactly
    sse, _ = theory.speculative_sampling_efficiency(np.stack([Q] * 3), np.stack([P] * 3))
    assert np.isclose(float(sse), bound, atol=1e-6)


def test_eq5_speculative_kernel_recovers_target():
    rng = np.random.default_rng(3)
    for _ in range(20):
        q = rng.dirichlet(np.ones(7)).astype(np.float32)
        p = rng.dirichlet(np.ones(7)).astype(np.float32)
        a = np.asarray(theory.speculative_kernel(q, p))
        assert np.allclose(a.sum(0), 1, atol=1e-6)
        assert np.allclose(a @ q, p, atol=1e-6)
        # its acceptance rate is 1 - TV (Lemma 3.4)
        assert np.isclose((np.diag(a) * q).sum(), 1 - float(theory.total_variation(q, p)), atol=1e-6)
    # identical distributions: residual falls back to P, kernel is the identity
    a = np.asarray(theory.speculative_kernel(P, P))
    assert np.allclose(a, np.eye(P.size), atol=1e-6)


def test_degenerate_mixture_closed_form_matches_monte_carlo(seeds):
    u = prf.vocab_uniforms(seeds[prf.Stream.TARGET], P.size)
    point = jax.vmap(decoders.gumbel_max, in_axes=(None, 0))(P, u)
    for theta in (0.0, 0.3, 0.8):
        ws, se = theory.watermark_strength(P, decoders.linear_mixture(P, point, theta))
        exact = float(theory.watermark_strength_degenerate(P, theta))
        assert abs(float(ws) - exact) <= stats.Z * float(se) + 1e-6, theta
        ent_mc = float(jnp.mean(theory.entropy(decoders.linear_mixture(P, point, theta))))
        ent_exact = float(theory.expected_entropy_degenerate(P, theta))
        assert abs(ent_mc - ent_exact) < 0.02, theta
