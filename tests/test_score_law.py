"""The exact per-token score laws under H1 (wmspec_jax.score_law) against the generation loop's own texts,
and the n-token power (wmspec_jax.score_power) against simulation.

Every statistical check fails with probability <= 1e-6 when the formula is right (tests/stats.py): KS
tests against the exact CDF, z-tests of means, chi-square tests of counts, exact binomial tests of
rejection rates. The pair puts P's and Q's most likely tokens apart, so a law with the wrong stream,
the wrong distribution or a missing route is far outside these bounds at 20 000 texts.
"""

import functools

import jax
import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sstats

from tests import stats
from wmspec_jax import decoders, detect, methods, prf, score_law, score_power, speculative, theory, toy
from wmspec_jax.detect import gumbel
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_TARGET
from wmspec_jax.speculative import SpeculativeConfig

V = 4
P = np.array([0.5, 0.3, 0.15, 0.05])
Q = np.array([0.1, 0.2, 0.6, 0.1])  # the draft's favourite token is P's third
K = 2
N_TEXTS = 20_000
PROMPT = np.array([0, 1, 2, 3])
FIRST = len(PROMPT)  # the first generated position: slot 1 of the first step
RHO, TAU = 0.3, 0.5
MODEL = toy.markov_model(V)
SYNTHID_M = 3


def _table(probs):  # a Markov table with equal rows: the same distribution at every position
    return toy.log_table(np.tile(probs, (V, 1)))


@functools.lru_cache(maxsize=None)
def generation(method: str, decoder: str):
    """N_TEXTS texts of 3 tokens, one key each, through ``speculative.generate``; their records and the
    detectors' statistics (computed from tokens and keys, as a detector does)."""
    dec = decoders.WatermarkDecoder("gumbel") if decoder == "gumbel" else decoders.WatermarkDecoder("synthid",
                                                                                                    SYNTHID_M)
    spec = methods.METHODS[method].speculative
    cfg = SpeculativeConfig(method=method, decoder=dec, lookahead=K if spec else 0, max_new_tokens=K + 1,
                            context_width=len(PROMPT))
    keys = prf.stream_keys(list(range(N_TEXTS)))
    res = speculative.generate(MODEL, _table(P), np.broadcast_to(PROMPT, (N_TEXTS, len(PROMPT))),
                               np.full(N_TEXTS, len(PROMPT)), keys, jax.random.key(11), cfg,
                               draft=MODEL if spec else None, draft_params=_table(Q) if spec else None)
    rec = detect.records_from_generation(res)
    if decoder == "gumbel":
        return rec, detect.gumbel_statistics(rec, keys, vocab_size=V, context_width=len(PROMPT))
    return rec, detect.synthid_statistics(rec, keys, SYNTHID_M, vocab_size=V, context_width=len(PROMPT))


def detector_scores(rec, st, detector: str) -> np.ndarray:
    """float64[B, L] per-token scores −log(1 − y) with the stream the detector's own rule picks."""
    choice = {"oracle": lambda: gumbel.choose_oracle(rec.source),
              "single": lambda: np.zeros(st.mask.shape, bool),
              "ars-prior": lambda: gumbel.choose_prior(st.u, RHO),
              "ars-tau": lambda: gumbel.choose_ars_tau(st.u, TAU)}[detector]()
    return np.asarray(gumbel.ars_terms(gumbel.select(st, choice)), np.float64)


def assert_law(samples, law: score_law.GumbelLaw, what: str):
    res = sstats.kstest(samples, law.cdf)
    assert res.pvalue > stats.ALPHA, f"{what}: KS p={res.pvalue:.3g} (n={samples.size})"
    stats.assert_mean_close(samples, law.mean(), what)


SPECULATIVE = ("pseudorandom", "dathathri", "hu", "standard")


@pytest.mark.slow  # one compiled generation per method and decoder, shared
@pytest.mark.parametrize("detector", score_law.GUMBEL_DETECTORS)
@pytest.mark.parametrize("method", SPECULATIVE + ("basic",))
def test_gumbel_law_of_the_first_draft_slot(method, detector):
    rec, st = generation(method, "gumbel")
    assert np.asarray(st.mask)[:, FIRST].all()  # a new context: every text's first token is scored
    scores = detector_scores(rec, st, detector)[:, FIRST]
    law = score_law.gumbel_score_law(P, Q, method, detector=detector, draft_fraction=RHO, tau=TAU)
    assert_law(scores, law, f"{method}/{detector}")


@pytest.mark.slow  # one compiled generation per method and decoder, shared
@pytest.mark.parametrize("method", ["pseudorandom", "hu"])
def test_gumbel_law_of_later_positions(method):
    """Position 2 (K = 2: slot 2 of the step or slot 1 of the next) has the draft slot's law; the bonus
    token (slot K + 1, after K acceptances) has the law of ``basic``."""
    rec, st = generation(method, "gumbel")
    scores = detector_scores(rec, st, "ars-tau")
    second = np.asarray(st.mask)[:, FIRST + 1]
    assert_law(scores[second, FIRST + 1], score_law.gumbel_score_law(P, Q, method, detector="ars-tau", tau=TAU),
               f"{method} second position")
    bonus = (np.asarray(rec.source)[:, FIRST + K] == SOURCE_TARGET) & np.asarray(st.mask)[:, FIRST + K]
    assert bonus.sum() > 1000
    assert_law(scores[bonus, FIRST + K], score_law.gumbel_score_law(P, Q, "basic", detector="ars-tau", tau=TAU),
               f"{method} bonus")


def test_the_gumbel_max_uniform_of_the_drawn_token_is_uniform_and_independent_of_it():
    """The fact every Gumbel law rests on: M = r_w^{1/π_w} is U(0, 1) and independent of w."""
    rng = np.random.default_rng(5)
    r = rng.random((200_000, V))
    w = np.asarray(decoders.gumbel_scheme.gumbel_max_index(P[None], r.astype(np.float32)))
    m = r[np.arange(len(w)), w] ** (1.0 / P[w])
    stats.assert_uniform(m, "max r^(1/p)")
    table = np.stack([np.bincount(np.minimum((m[w == v] * 10).astype(int), 9), minlength=10) for v in range(V)])
    assert sstats.chi2_contingency(table).pvalue > stats.ALPHA
    stats.assert_counts_match(np.bincount(w, minlength=V), P, "Gumbel-max token")


@pytest.mark.slow  # one compiled generation per method and decoder, shared
@pytest.mark.parametrize("detector", score_law.SYNTHID_DETECTORS)
@pytest.mark.parametrize("method", ["pseudorandom", "dathathri", "hu", "basic"])
def test_synthid_law_of_the_first_draft_slot(method, detector):
    rec, st = generation(method, "synthid")
    g_draft = np.asarray(st.g_draft)[:, FIRST].sum(-1)
    g_target = np.asarray(st.g_target)[:, FIRST].sum(-1)
    accepted = np.asarray(rec.source)[:, FIRST] == SOURCE_DRAFT
    counts = {"both": g_draft + g_target, "target": g_target,
              "oracle": np.where(accepted, g_draft, g_target)}[detector]
    law = score_law.synthid_count_law(P, Q, method, SYNTHID_M, detector=detector)
    stats.assert_counts_match(np.bincount(counts, minlength=law.size), law, f"{method}/{detector}")


def test_synthid_enumeration_is_theorys():
    weights, dists, _ = score_law.synthid_configurations(Q, SYNTHID_M)
    kl = np.where(dists > 0, dists * np.log(dists / Q), 0.0).sum(-1)
    assert np.isclose(weights @ kl, theory.watermark_strength_synthid_exact(Q, SYNTHID_M), rtol=1e-5)
    emit, other = score_law.synthid_token_counts(Q, SYNTHID_M)
    np.testing.assert_allclose(emit.sum(-1), Q, atol=1e-12)  # unbiased: the token's law is Q
    np.testing.assert_allclose(other.sum(-1), np.broadcast_to(Q[:, None], (V, V)), atol=1e-12)


def test_basic_does_not_depend_on_the_draft_and_alg1_does():
    flat, sharp = score_power.temper(Q, 1.5), score_power.temper(Q, 0.5)
    for detector in score_law.GUMBEL_DETECTORS:
        a = score_law.gumbel_score_law(P, flat, "basic", detector=detector)
        b = score_law.gumbel_score_law(P, sharp, "basic", detector=detector)
        np.testing.assert_array_equal(a.shapes, b.shapes)
        np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(score_law.synthid_count_law(P, flat, "basic", 2),
                                  score_law.synthid_count_law(P, sharp, "basic", 2))
    # Alg. 1 with the Oracle: E S = Σ min(P, Q)_d H(1/Q_d) + Σ (P − Q)+_w H(1/R_w), written out here
    for q in (flat, sharp, P):
        excess = np.maximum(P - q, 0.0)
        expected = np.sum(np.minimum(P, q) * score_law.harmonic(1 / q))
        if excess.sum() > 0:
            expected += np.sum(excess * score_law.harmonic(excess.sum() / np.where(excess > 0, excess, 1.0)))
        assert np.isclose(score_law.gumbel_score_law(P, q, "pseudorandom", detector="oracle").mean(), expected)
    # the default detector: Q = P accepts every draft, whose y^D then scores as basic's y^T does; Q of
    # another mode lowers the mean from 1.889 to 1.335
    alg1 = [score_law.gumbel_score_law(P, q, "pseudorandom").mean() for q in (Q, P)]
    assert np.isclose(alg1[1], score_law.gumbel_score_law(P, Q, "basic").mean())
    assert alg1[1] - alg1[0] > 0.5


@pytest.mark.parametrize("method,detector", [("pseudorandom", "ars-prior"), ("pseudorandom", "ars-tau"),
                                             ("hu", "oracle"), ("basic", "single")])
def test_closed_form_moments_are_the_cdfs(method, detector):
    law = score_law.gumbel_score_law(P, Q, method, detector=detector)
    mean = integrate.quad(law.sf, 0, np.inf, epsabs=1e-12, limit=200)[0]
    second = integrate.quad(lambda s: 2 * s * law.sf(s), 0, np.inf, epsabs=1e-12, limit=200)[0]
    assert np.isclose(law.mean(), mean, rtol=1e-8) and np.isclose(law.second_moment(), second, rtol=1e-8)
    s = np.linspace(0, 30, 3001)
    assert np.all(np.diff(law.cdf(s)) >= -1e-15) and law.cdf(60.0) == pytest.approx(1.0)


def simulate_sums(method: str, detector: str, num_tokens: int, num_texts: int, seed: int) -> np.ndarray:
    """Sums of n tokens' scores, each token drawn afresh at one draft slot (NumPy, not the package)."""
    rng = np.random.default_rng(seed)
    shape = (num_texts, num_tokens)
    r_draft, r_target = rng.random(shape + (V,)), rng.random(shape + (V,))
    if method == "basic":
        w = np.argmax(np.log(r_target) / P, -1)
        y_draft, y_target = rng.random(shape), np.take_along_axis(r_target, w[..., None], -1)[..., 0]
        src_draft = np.zeros(shape, bool)
    else:
        d = np.argmax(np.log(r_draft) / Q, -1)
        accept = rng.random(shape) < np.minimum(1.0, P[d] / Q[d])
        resid = np.maximum(P - Q, 0.0) / np.maximum(P - Q, 0.0).sum()
        r_resid = r_target if method != "hu" else rng.random(shape + (V,))  # hu: a plain residual
        with np.errstate(divide="ignore"):  # tokens outside the residual: log(r) / 0 = -inf never wins
            w = np.where(accept, d, np.argmax(np.log(r_resid) / resid, -1))
        y_draft = np.take_along_axis(r_draft, w[..., None], -1)[..., 0]
        y_target = np.take_along_axis(r_target, w[..., None], -1)[..., 0]
        src_draft = accept
    pick = {"oracle": src_draft, "single": np.zeros(shape, bool), "ars-prior": rng.random(shape) < RHO}[detector]
    return -np.log1p(-np.where(pick, y_draft, y_target)).sum(-1)


@pytest.mark.parametrize("method,detector", [("pseudorandom", "ars-prior"), ("hu", "oracle"), ("basic", "single")])
def test_gumbel_power_matches_simulated_texts(method, detector):
    n, texts = 16, 20_000
    law = score_law.gumbel_score_law(P, Q, method, detector=detector, draft_fraction=RHO)
    power = score_power.gumbel_power(law, n, 0.01)
    assert power.lower <= power.estimate <= power.upper and power.upper - power.lower < 1e-3
    hits = int((simulate_sums(method, detector, n, texts, 3) >= power.threshold).sum())
    stats.assert_binomial_rate(hits, texts, power.estimate, f"{method}/{detector} power")


def test_power_of_a_text_without_watermark_is_the_fpr():
    for fpr in (0.01, 0.05):
        power = score_power.gumbel_power(score_law.gumbel_score_law(P, Q, "standard"), 24, fpr)
        assert power.lower <= fpr <= power.upper and power.upper - power.lower < 1e-3
        null = score_law.synthid_null_law(SYNTHID_M)
        size = score_power.synthid_power(null, 24, fpr)
        exact = sstats.binom.sf(np.arange(24 * 2 * SYNTHID_M + 1) - 1, 24 * 2 * SYNTHID_M, 0.5)
        assert size <= fpr and np.isclose(size, exact[exact <= fpr].max())
    assert score_power.gamma_threshold(10, 0.01) == pytest.approx(sstats.gamma.isf(0.01, 10))


def test_synthid_power_is_the_convolution():
    law = score_law.synthid_count_law(P, Q, "pseudorandom", SYNTHID_M)
    n, texts = 12, 40_000
    counts = np.random.default_rng(2).choice(law.size, size=(texts, n), p=law).sum(-1)
    trials = n * (law.size - 1)
    rejects = sstats.binom.sf(counts - 1, trials, 0.5) <= 0.01
    stats.assert_binomial_rate(int(rejects.sum()), texts, score_power.synthid_power(law, n, 0.01), "SynthID power")


def test_stationary_mixture_over_a_step():
    r = score_law.routes(P, Q, "pseudorandom", lookahead=K)
    alpha = np.minimum(P, Q).sum()
    per_step = float(theory.expected_tokens_per_step(alpha, K))
    assert np.isclose(r.draft_share, (per_step - 1) / per_step, rtol=1e-5)  # accepted drafts per token
    assert np.isclose(r.accepted.sum() + r.residual.sum() + r.target.sum(), 1.0)
    first = score_law.gumbel_score_law(P, Q, "pseudorandom", detector="oracle")
    basic = score_law.gumbel_score_law(P, Q, "basic", detector="oracle")
    mixed = score_law.gumbel_score_law(P, Q, "pseudorandom", detector="oracle", lookahead=K)
    assert np.isclose(mixed.mean(), (1 - r.bonus_share) * first.mean() + r.bonus_share * basic.mean())


def test_draft_temperature_table_and_errors():
    rows = score_power.draft_temperature_table(P, Q, [0.5, 1.5], ["basic", "pseudorandom"], 16)
    assert [(r["method"], r["draft_temperature"]) for r in rows] == [
        ("basic", 0.5), ("basic", 1.5), ("pseudorandom", 0.5), ("pseudorandom", 1.5)]
    assert rows[0]["power"] == rows[1]["power"] and rows[2]["power"] != rows[3]["power"]
    rows = score_power.draft_temperature_table(P, Q, [1.0], ["hu"], 16, num_layers=2)
    assert 0.0 < rows[0]["power"] < 1.0
    with pytest.raises(ValueError, match="unknown method"):
        score_law.gumbel_score_law(P, Q, "kirchenbauer")
    with pytest.raises(ValueError, match="detector"):
        score_law.gumbel_score_law(P, Q, "hu", detector="soft")
    with pytest.raises(ValueError, match="too many"):
        score_law.synthid_count_law(np.full(8, 0.125), np.full(8, 0.125), "hu", 3)
    with pytest.raises(ValueError, match="num_tokens"):
        score_power.gumbel_power(score_law.null_gumbel_law(), 0)
