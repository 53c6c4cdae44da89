"""Exported helpers that the rest of the suite reaches only through the functions built on them, called
directly on inputs where a wrong answer shows: the decoders' validation and kernels, the registry's
lookups, vLLM's NumPy context states against the generation loop's JAX ones, the trade-off's per-pair
values at γ = 0 and 1, and a detector rebuilt from what it saves."""

import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax import decoders, detect, keys, prf, theory
from wmspec_jax.interop import engine_gumbel
from wmspec_jax.models import cpu_kernels
from wmspec_jax.tradeoff import google_pair_values, hu_pair_values


def test_the_decoders_validation_names_what_is_wrong():
    assert decoders.check_temperature(0.7) == 0.7 and decoders.check_temperature(0) == 0.0
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            decoders.check_temperature(bad)
    assert decoders.check_top_k(None, 10) is None and decoders.check_top_k(0, 10) is None
    assert decoders.check_top_k(3, 10) == 3 and decoders.check_top_k(10, 10) == 10
    for bad in (11, -1, 2.5):
        with pytest.raises((ValueError, TypeError)):
            decoders.check_top_k(bad, 10)


def test_the_kernels_break_ties_towards_lower_ids():
    x = jnp.asarray([[1.0, 3.0, 3.0, 2.0], [0.0, -1.0, 5.0, 5.0]])
    np.testing.assert_array_equal(decoders.first_argmax(x), [1, 2])
    np.testing.assert_array_equal(decoders.top_k_mask(x, 1), [[0, 1, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(decoders.top_k_mask(x, 3), [[0, 1, 1, 1], [1, 0, 1, 1]])
    rng = np.random.default_rng(0)
    y = rng.standard_normal((50, 33)).astype(np.float32)
    np.testing.assert_array_equal(decoders.first_argmax(jnp.asarray(y)), np.argmax(y, axis=1))


def test_one_tournament_layer_and_dipmark_reweight_a_distribution():
    p = jnp.asarray([0.1, 0.2, 0.3, 0.4])
    g = jnp.asarray([1.0, 0.0, 1.0, 0.0])
    # Eq. (4): P_w (1 + g_w − Σ_{g=1} P), here the green mass is 0.4
    np.testing.assert_allclose(decoders.tournament_layer(p, g), [0.16, 0.12, 0.48, 0.24], rtol=1e-6)
    np.testing.assert_allclose(decoders.tournament_layer(p, g), decoders.synthid(p, g[None]), rtol=1e-6)
    # DiPmark in π order, g(F) = max(F − α, 0) + max(F − (1 − α), 0): α = 0 keeps P, α = 1/2 is γ-reweight
    np.testing.assert_allclose(decoders.dipmark_sorted(p, 0.0), p, rtol=1e-6)
    half = np.asarray(decoders.dipmark_sorted(p, 0.5))
    cdf = np.cumsum([0.1, 0.2, 0.3, 0.4])
    new_cdf = 2 * np.maximum(cdf - 0.5, 0)
    np.testing.assert_allclose(half, np.diff(np.concatenate([[0.0], new_cdf])), atol=1e-6)
    # KGW's green list: the ⌊γV⌋ first places of the keyed permutation
    np.testing.assert_array_equal(decoders.kgw_green(jnp.arange(10), 0.25, 10), np.arange(10) < 2)


def test_the_registry_finds_schemes_by_kind_alias_and_line():
    assert set(decoders.kinds()) <= set(decoders.names()) and "gamma_reweight" not in decoders.kinds()
    assert decoders.scheme_class("gamma_reweight") is decoders.scheme_class("dipmark")
    with pytest.raises(ValueError, match="unknown decoder"):
        decoders.scheme_class("no-such-scheme")
    assert decoders.from_settings("kgw", {"kgw_gamma": 0.3, "kgw_delta": 1.0}) == decoders.WatermarkDecoder(
        "kgw", gamma=0.3, delta=1.0)
    assert decoders.from_settings("gamma_reweight", {}) == decoders.WatermarkDecoder("gamma_reweight")
    assert decoders.inverse_transform_decoder() == decoders.WatermarkDecoder("inverse_transform")
    assert decoders.synthid_decoder(5) == decoders.WatermarkDecoder("synthid", 5)
    limit = decoders.synthid_limit_decoder(4)
    assert limit.num_layers == 4 and limit.degenerate and limit.kind == "synthid_limit"


def test_vllms_numpy_context_states_are_the_loops():
    rng = np.random.default_rng(1)
    contexts = np.where(rng.random((40, 5)) < 0.2, -1, rng.integers(0, 50_000, (40, 5)))
    scheme = engine_gumbel.VllmGumbelScheme(engine_gumbel.VllmGumbelConfig(key=2 ** 40 + 7, context_width=5))
    loop = scheme.context_seeds(jnp.zeros((40, 2), jnp.uint32), jnp.asarray(contexts, jnp.int32), prf.Stream.TARGET)
    np.testing.assert_array_equal(engine_gumbel.context_states(2 ** 40 + 7, contexts), np.asarray(loop)[:, :4])
    tokens = rng.integers(0, 50_000, 40)
    u = np.asarray(scheme.uniforms(loop, jnp.asarray(tokens, jnp.uint32)), np.float64)
    np.testing.assert_allclose(engine_gumbel.token_scores(2 ** 40 + 7, contexts, tokens), -np.log1p(-u), rtol=1e-12)
    ids = np.array([5, 6, 5, 6, 5, 7])
    np.testing.assert_array_equal(engine_gumbel.contexts_of(ids, 2),
                                  [[-1, -1], [-1, 5], [5, 6], [6, 5], [5, 6], [6, 5]])
    np.testing.assert_array_equal(engine_gumbel.scored_positions(ids, 2), [0, 1, 2, 3])  # [5, 6] and [6, 5] repeat


def test_the_pair_values_are_the_acceptance_at_gamma_zero_and_the_draft_at_one():
    rng = np.random.default_rng(2)
    q, p = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    accept = np.asarray(theory.acceptance_probability(q, p))
    residual = np.asarray(theory.residual(p, q))
    for values in (hu_pair_values, google_pair_values):
        se, ws = values(q, p, jnp.asarray([0.0, 1.0]))
        # γ = 0: P'(x) = a_x + (1 − a_x) R(x) whatever y; γ = 1: δ_y
        np.testing.assert_allclose(np.asarray(se[0]), np.broadcast_to((accept + (1 - accept) * residual)[:, None],
                                                                      (5, 5)), atol=1e-6)
        np.testing.assert_allclose(np.asarray(se[1]), np.eye(5), atol=1e-6)
        assert np.all(np.isfinite(np.asarray(ws)))


def test_a_detector_is_rebuilt_from_what_it_saves_and_ranks_by_its_pvalue():
    v, n = 64, 8
    text_keys = keys.text_keys(b"public-functions", range(n), run="faces")
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, v, (n, 40)), jnp.int32)
    st = detect.statistics(decoders.gumbel(), tokens, text_keys, lengths=jnp.full(n, 40), starts=jnp.full(n, 4),
                           vocab_size=v)
    made = detect.make("ars-prior", st.provenance, draft_fraction=0.5)
    rebuilt = detect.from_saved(made.kind, made.config, made.params)
    a, b = made.score(st), rebuilt.score(st)
    np.testing.assert_array_equal(np.asarray(a.pvalue), np.asarray(b.pvalue))
    np.testing.assert_allclose(np.asarray(detect.decision_scores(a)), -np.asarray(a.log_pvalue), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown detector kind"):
        detect.from_saved("no-such-kind", {}, {})


def test_the_cpu_kernels_switch_reads_the_environment(monkeypatch):
    monkeypatch.setenv(cpu_kernels.ENV_VAR, "0")
    assert cpu_kernels.enabled() is False
    monkeypatch.setenv(cpu_kernels.ENV_VAR, " off ")
    assert cpu_kernels.enabled() is False
    monkeypatch.setenv(cpu_kernels.ENV_VAR, "1")
    assert cpu_kernels.enabled() is True
    monkeypatch.delenv(cpu_kernels.ENV_VAR)
    assert cpu_kernels.enabled() is True
