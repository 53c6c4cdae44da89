"""The speculative loop on the exact toy pair: Thm 4.1, records, batching, errors."""

import dataclasses
import functools
import itertools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sstats

from tests import stats
from tests.multidevice import xla_flags_with_devices
from wmspec_jax import decoders, prf, sources, speculative, theory, toy
from wmspec_jax.speculative import SpeculativeConfig

GUMBEL = decoders.WatermarkDecoder("gumbel")
SYNTH = decoders.WatermarkDecoder("synthid", 4)
SPECULATIVE = ("standard", "hu", "dathathri", "pseudorandom")
ALL_METHODS = [("plain", 0), ("basic", 0)] + [(m, 2) for m in SPECULATIVE]

V = 4
TV = 0.35
P_TAB, Q_TAB = toy.markov_pair(V, TV, concentration=2.0, seed=3)
MODEL = toy.markov_model(V)
TARGET, DRAFT = toy.log_table(P_TAB), toy.log_table(Q_TAB)
PROMPT = np.array([0, 1, 2, 3])
N_KEYS = 20_000


def run(method, k, decoder=GUMBEL, n=N_KEYS, max_new=3, h=4, prompt=PROMPT, rng=None, keys=None, **kw):
    cfg = SpeculativeConfig(
        method=method, decoder=decoder, lookahead=k, max_new_tokens=max_new, context_width=h, **kw
    )
    prompts = np.broadcast_to(prompt, (n, len(prompt)))
    keys = prf.stream_keys(list(range(n))) if keys is None else keys
    rng = jax.random.key(0) if rng is None else rng
    return speculative.generate(
        MODEL, TARGET, prompts, np.full(n, len(prompt)), keys, rng, cfg, draft=MODEL, draft_params=DRAFT
    )


@functools.lru_cache(maxsize=None)
def shared_run(method, k, decoder):
    """One 20k-key run per (method, decoder) feeds the Thm 4.1 (a) and (b) tests."""
    return run(method, k, decoder)


def generated(res, count):
    p = int(res.prompt_lengths[0])
    return np.asarray(res.tokens[:, p : p + count])


@pytest.mark.parametrize("method,k", ALL_METHODS)
@pytest.mark.parametrize("decoder", [GUMBEL, SYNTH], ids=["gumbel", "synthid"])
def test_thm41a_output_distribution_is_the_target(method, k, decoder):
    """Joint law of the first 3 tokens over 20k watermark keys = P's (chi-square)."""
    res = shared_run(method, k, decoder)
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), f"{method}/{decoder.kind}")


@pytest.mark.parametrize("method", ["hu", "pseudorandom"])
def test_thm41a_with_frequent_repeated_contexts(method):
    """h = 1 over 4 tokens: repeated contexts (true randomness) are common."""
    res = run(method, 2, GUMBEL, max_new=4, h=1)
    assert (~np.asarray(res.watermarked)[:, 4:8]).mean() > 0.2
    toks = generated(res, 4)
    counts = np.bincount(((toks[:, 0] * V + toks[:, 1]) * V + toks[:, 2]) * V + toks[:, 3], minlength=V**4)
    stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 4), method)


INVERSE = decoders.WatermarkDecoder("inverse_transform")
DIPMARK = decoders.WatermarkDecoder("dipmark", alpha=0.3)


@pytest.mark.parametrize("decoder,method,k,top_k", [
    (INVERSE, "basic", 0, None), (INVERSE, "pseudorandom", 2, None), (INVERSE, "pseudorandom", 2, 2),
    (DIPMARK, "basic", 0, None), (DIPMARK, "dathathri", 2, None), (DIPMARK, "pseudorandom", 2, None),
    (DIPMARK, "pseudorandom", 2, 2)], ids=lambda x: getattr(x, "name", str(x)))
def test_thm41_for_the_decoders_beyond_the_paper(method, k, top_k, decoder):
    """Inverse transform and DiPmark are unbiased, so every method keeps P's law (Thm 4.1 (a), here over
    10k keys) and Alg. 1's first acceptance rate is 1 − TV of the (top-k processed) pair (Thm 4.1 (b))."""
    res = run(method, k, decoder, n=10_000, top_k=top_k)
    p_tab, q_tab = (P_TAB, Q_TAB) if top_k is None else (_top_k_table(P_TAB, top_k), _top_k_table(Q_TAB, top_k))
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    probs = toy.sequence_probs(p_tab, PROMPT[-1], 3).ravel()
    assert counts[probs == 0].sum() == 0, "a token outside the support was emitted"
    stats.assert_counts_match(counts[probs > 0], probs[probs > 0], f"{method}/{decoder.name}")
    if k:
        first = np.asarray(res.source[:, len(PROMPT)])
        tv = 0.5 * np.abs(p_tab[PROMPT[-1]] - q_tab[PROMPT[-1]]).sum()
        stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size, 1 - tv,
                                   f"{method}/{decoder.name} acceptance")


def _tempered(table, temperature):
    t = np.asarray(table, np.float64) ** (1.0 / temperature)
    return t / t.sum(1, keepdims=True)


@pytest.mark.parametrize("decoder,method,temperature", [(DIPMARK, "hu", 1.0), (INVERSE, "pseudorandom", 0.6)],
                         ids=["dipmark-hu", "inverse_transform-pseudorandom-T0.6"])
def test_thm41_beyond_the_paper_with_hu_and_a_temperature(decoder, method, temperature):
    """Hu's method (watermarked draft and bonus, plain residual) and a temperature below 1: the law is the
    tempered P, the first acceptance rate 1 − TV of the tempered pair (10k keys)."""
    res = run(method, 2, decoder, n=10_000, temperature=temperature)
    p_t, q_t = _tempered(P_TAB, temperature), _tempered(Q_TAB, temperature)
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    stats.assert_counts_match(counts, toy.sequence_probs(p_t, PROMPT[-1], 3), f"{method}/{decoder.name}/T")
    first = np.asarray(res.source[:, len(PROMPT)])
    tv = 0.5 * np.abs(p_t[PROMPT[-1]] - q_t[PROMPT[-1]]).sum()
    stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size, 1 - tv, "acceptance")


@pytest.mark.parametrize("method,decoder", [("pseudorandom", GUMBEL), ("hu", SYNTH)], ids=["alg1-gumbel", "hu-synthid"])
def test_thm41_with_a_draft_temperature_of_its_own(method, decoder):
    """Q at its own temperature (1.5, P at 0.7): the law is still the tempered P, the first acceptance rate
    1 − TV(P_0.7, Q_1.5) = 0.894 rather than the 0.756 of one temperature (10k keys). Drafting from Q_1.5
    but testing acceptance against Q_0.7 would give a first-token law 0.10 from P's in TV (chi-square ≈ 600
    here), so the law test separates the two."""
    res = run(method, 2, decoder, n=10_000, temperature=0.7, draft_temperature=1.5)
    p_t, q_t = _tempered(P_TAB, 0.7), _tempered(Q_TAB, 1.5)
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    stats.assert_counts_match(counts, toy.sequence_probs(p_t, PROMPT[-1], 3), f"{method}/draft T 1.5")
    first = np.asarray(res.source[:, len(PROMPT)])
    tv = 0.5 * np.abs(p_t[PROMPT[-1]] - q_t[PROMPT[-1]]).sum()
    assert abs((1 - tv) - (1 - 0.5 * np.abs(p_t - _tempered(Q_TAB, 0.7))[PROMPT[-1]].sum())) > 0.1
    stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size, 1 - tv, "acceptance")


@pytest.mark.parametrize("decoder,top_k", [(GUMBEL, None), (SYNTH, None), (GUMBEL, 3)], ids=["gumbel", "synthid",
                                                                                             "gumbel-top3"])
def test_coupled_text_is_the_basic_watermarks_text_token_for_token(decoder, top_k):
    """``coupled`` emits at every position the target's draw with ζ^T: with the same keys and true
    randomness its texts are the basic watermark's, token for token (so its law is P and its detection
    the basic watermark's, whatever the draft), every source record is the target's, and drafts are
    accepted (fewer steps than tokens)."""
    keys = prf.stream_keys([f"coupled-{i}" for i in range(2000)])
    basic = run("basic", 0, decoder, n=2000, max_new=8, h=2, keys=keys, top_k=top_k)
    coupled = run("coupled", 3, decoder, n=2000, max_new=8, h=2, keys=keys, top_k=top_k)
    np.testing.assert_array_equal(generated(coupled, 8), generated(basic, 8))
    src = np.asarray(coupled.source[:, len(PROMPT) : len(PROMPT) + 8])
    assert (src == sources.SOURCE_TARGET).all()
    window = slice(len(PROMPT), len(PROMPT) + 8)
    np.testing.assert_array_equal(np.asarray(coupled.watermarked)[:, window], np.asarray(basic.watermarked)[:, window])
    assert np.isnan(np.asarray(coupled.accept_u)[:, window]).all()
    assert np.asarray(coupled.num_steps).mean() < 0.8 * 8


def test_coupled_acceptance_is_the_gumbel_coupling_probability():
    """The first draft is accepted with probability Σ_v 1 / Σ_w max(P_w/P_v, Q_w/Q_v) (0.502 on this
    context), below Alg. 1's 1 − TV (0.561): 10k keys, binomial test; the two differ by 12 standard errors."""
    q_tab = np.random.default_rng(11).dirichlet(np.full(V, 2.0), size=V)
    prompt = np.array([1, 2, 3, 0])
    alpha = float(theory.gumbel_coupling_acceptance(q_tab[0], P_TAB[0]))
    assert float(theory.max_sampling_efficiency(q_tab[0], P_TAB[0])) - alpha > 0.05
    cfg = SpeculativeConfig(method="coupled", decoder=GUMBEL, lookahead=2, max_new_tokens=3, context_width=4)
    n = 10_000
    res = speculative.generate(MODEL, TARGET, np.broadcast_to(prompt, (n, 4)), np.full(n, 4),
                               prf.stream_keys(list(range(n))), jax.random.key(2), cfg, draft=MODEL,
                               draft_params=toy.log_table(q_tab))
    first_accepted = np.asarray(res.tokens_per_step[:, 0]) >= 2
    stats.assert_binomial_rate(int(first_accepted.sum()), n, alpha, "coupled acceptance")


def test_coupled_refuses_a_draft_decoder():
    with pytest.raises(ValueError, match="draws no watermarked draft token"):
        SpeculativeConfig(method="coupled", lookahead=2, draft_decoder=SYNTH)


@pytest.mark.parametrize("draft_decoder,decoder,top_k", [(GUMBEL, SYNTH, None), (DIPMARK, INVERSE, 2)],
                         ids=["gumbel-draft-synthid-target", "dipmark-draft-inverse-target-top2"])
def test_thm41_with_different_decoders_for_draft_and_target(draft_decoder, decoder, top_k):
    """A draft stream with its own unbiased decoder keeps Alg. 1's law P and acceptance rate 1 − TV, and the
    drafts are the draft decoder's tokens."""
    res = run("pseudorandom", 2, decoder, n=10_000, top_k=top_k, draft_decoder=draft_decoder)
    p_tab, q_tab = (P_TAB, Q_TAB) if top_k is None else (_top_k_table(P_TAB, top_k), _top_k_table(Q_TAB, top_k))
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    probs = toy.sequence_probs(p_tab, PROMPT[-1], 3).ravel()
    assert counts[probs == 0].sum() == 0
    stats.assert_counts_match(counts[probs > 0], probs[probs > 0], f"{draft_decoder.name} draft / {decoder.name}")
    first = np.asarray(res.source[:, len(PROMPT)])
    tv = 0.5 * np.abs(p_tab[PROMPT[-1]] - q_tab[PROMPT[-1]]).sum()
    stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size, 1 - tv, "acceptance")
    # the first draft and its acceptance depend on ζ^D, ζ^R and the draft decoder only: the same as when
    # the draft decoder is also the target's
    alone = run("pseudorandom", 2, draft_decoder, n=10_000, top_k=top_k)
    assert np.array_equal(np.asarray(alone.source[:, len(PROMPT)]), first)
    drafted = first == sources.SOURCE_DRAFT
    assert np.array_equal(toks[drafted, 0], generated(alone, 1)[drafted, 0])


KGW = decoders.WatermarkDecoder("kgw", gamma=0.4, delta=1.5)


def kgw_table(table, gamma, delta):
    """E over green lists (uniform among the ⌊γV⌋-subsets of the vocabulary) of KGW's biased transition:
    float64[V, V]."""
    table = np.asarray(table, np.float64)
    size = table.shape[1]
    subsets = list(itertools.combinations(range(size), decoders.green_list_size(gamma, size)))
    out = np.zeros_like(table)
    for subset in subsets:
        g = np.isin(np.arange(size), subset).astype(np.float64)
        biased = table * np.exp(delta * g)[None]
        out += biased / biased.sum(1, keepdims=True) / len(subsets)
    return out


@pytest.mark.parametrize("method,k", [("basic", 0), ("dathathri", 2), ("pseudorandom", 2)])
def test_kgw_has_its_own_law_under_every_method(method, k):
    """KGW is biased: over keys the basic watermark emits E_G[P_G], P_G ∝ P e^{δ·green}, not P. Draft and
    target biased by one green list make every speculative method emit that same law (chi-square over
    10k keys against the enumerated E_G), where an unbiased decoder would give P."""
    res = run(method, k, KGW, n=10_000)
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    expected = toy.sequence_probs(kgw_table(P_TAB, KGW.gamma, KGW.delta), PROMPT[-1], 3)
    stats.assert_counts_match(counts, expected, f"KGW/{method}")
    with pytest.raises(AssertionError, match="chi2"):  # and it is not P's law
        stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), "KGW vs P")


def test_dipmark_draws_with_private_randomness_under_every_watermarking_method():
    """DiPmark samples its reweighted distribution with private randomness, as Wu et al. publish it: one
    secret with two true-randomness keys gives different texts (the inverse transform, a point mass, gives
    the same ones under Alg. 1, where the acceptance is pseudorandom too)."""
    for method, k in (("basic", 0), ("pseudorandom", 2)):
        a, b = (generated(run(method, k, DIPMARK, n=400, rng=jax.random.key(s)), 3) for s in (0, 1))
        assert (a != b).any(axis=1).mean() > 0.2, method
    a, b = (generated(run("pseudorandom", 2, INVERSE, n=400, rng=jax.random.key(s)), 3) for s in (0, 1))
    assert np.array_equal(a, b)


def test_a_draft_decoder_needs_a_watermarked_draft():
    cfg = SpeculativeConfig(method="pseudorandom", decoder=SYNTH, draft_decoder=decoders.WatermarkDecoder("synthid", 4))
    assert cfg.draft_decoder is None and cfg.draft_stream_decoder == SYNTH  # the same decoder: stored as None
    assert SpeculativeConfig(method="hu", draft_decoder=INVERSE).draft_stream_decoder == INVERSE
    with pytest.raises(ValueError, match="draws no watermarked draft"):
        SpeculativeConfig(method="standard", draft_decoder=INVERSE)
    with pytest.raises(TypeError, match="draft_decoder"):
        SpeculativeConfig(method="pseudorandom", draft_decoder="gumbel")
    with pytest.raises(ValueError, match="one green list"):
        SpeculativeConfig(method="pseudorandom", decoder=KGW, draft_decoder=GUMBEL)


def test_chi_square_has_power_against_the_draft():
    """Negative control: the draft's own samples are rejected as P's."""
    cfg = SpeculativeConfig(method="plain", lookahead=0, max_new_tokens=3)
    res = speculative.generate(
        MODEL, DRAFT, np.broadcast_to(PROMPT, (N_KEYS, 4)), np.full(N_KEYS, 4), b"k", jax.random.key(1), cfg
    )
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    with pytest.raises(AssertionError, match="chi2"):
        stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), "draft as target")


@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("decoder", [GUMBEL, SYNTH], ids=["gumbel", "synthid"])
def test_thm41b_acceptance_rate_and_tokens_per_step(method, decoder):
    """First-draft acceptance rate = 1 - TV; with i.i.d. acceptance α the first
    step (never truncated: K + 1 <= max_new_tokens) emits (1 − α^{K+1}) / (1 − α)."""
    res = shared_run(method, 2, decoder)
    p = len(PROMPT)
    first = np.asarray(res.source[:, p])
    assert np.isfinite(np.asarray(res.accept_u[:, p])).all()
    stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size, 1 - TV, method)
    per_step = np.asarray(res.tokens_per_step[:, 0]).astype(np.float64)
    stats.assert_mean_close(per_step, float(theory.expected_tokens_per_step(1 - TV, 2)), f"{method} tokens/step")


def test_mean_tokens_per_step_over_a_longer_run():
    k = 3
    res = run("pseudorandom", k, GUMBEL, n=8000, max_new=2 * (k + 1) + 1, h=2)
    first_two = np.asarray(res.tokens_per_step[:, :2]).astype(np.float64)
    stats.assert_mean_close(first_two, float(theory.expected_tokens_per_step(1 - TV, k)), "tokens/step K=3")
    aatps = res.tokens_per_step_mean()
    assert np.all((aatps >= 1) & (aatps <= k + 1))
    assert np.array_equal(np.asarray(res.tokens_per_step).sum(1), np.asarray(res.lengths - res.prompt_lengths))


def test_pseudorandom_is_a_function_of_key_and_prompt():
    """Alg. 1 uses no true randomness outside repeated contexts (Thm 4.1(c)); baselines do."""
    v = 64
    p, q = toy.markov_pair(v, 0.3, seed=5)
    model = toy.markov_model(v)
    prompts = np.tile(np.arange(6), (200, 1))
    keys = prf.stream_keys(list(range(200)))

    def go(method, seed):
        cfg = SpeculativeConfig(method=method, lookahead=3, max_new_tokens=20)
        return speculative.generate(
            model, toy.log_table(p), prompts, np.full(200, 6), keys, jax.random.key(seed), cfg,
            draft=model, draft_params=toy.log_table(q),
        )

    a, b = go("pseudorandom", 0), go("pseudorandom", 1)
    clean = np.asarray(a.watermarked[:, 6:26]).all(1) & np.asarray(b.watermarked[:, 6:26]).all(1)
    assert clean.sum() > 150
    assert np.array_equal(np.asarray(a.tokens)[clean], np.asarray(b.tokens)[clean])
    for method in ("hu", "standard"):  # true-random acceptance (with and without watermarked drafts)
        a, b = go(method, 0), go(method, 1)
        assert not np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens)), method


@pytest.mark.parametrize("method,k", [("basic", 0), ("standard", 3), ("pseudorandom", 3)])
def test_row_of_a_batch_equals_the_row_alone(method, k):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 7, size=8)
    prompts = rng.integers(0, V, size=(8, 6))
    row_rng = jax.random.split(jax.random.key(4), 8)
    keys = prf.stream_keys(list(range(8)))
    cfg = SpeculativeConfig(method=method, decoder=SYNTH, lookahead=k, max_new_tokens=10, eos_id=3)
    batch = speculative.generate(MODEL, TARGET, prompts, lengths, keys, row_rng, cfg, draft=MODEL, draft_params=DRAFT)
    for i in (0, 5):
        alone = speculative.generate(
            MODEL, TARGET, prompts[i : i + 1], lengths[i : i + 1], keys[i : i + 1], row_rng[i : i + 1], cfg,
            draft=MODEL, draft_params=DRAFT,
        )
        for name in ("tokens", "lengths", "source", "watermarked", "num_steps", "tokens_per_step"):
            assert np.array_equal(np.asarray(getattr(batch, name))[i], np.asarray(getattr(alone, name))[0]), name
        assert np.array_equal(np.asarray(batch.accept_u)[i], np.asarray(alone.accept_u)[0], equal_nan=True)


def test_second_call_compiles_nothing():
    run("pseudorandom", 2, n=16)
    before = speculative.trace_count()
    run("pseudorandom", 2, n=16, rng=jax.random.key(9), keys=prf.stream_keys(list(range(100, 116))))
    assert speculative.trace_count() == before


def test_precompile_leaves_nothing_to_compile_for_generate():
    compiles = []

    def listener(event, secs, **kw):
        # an executable built, or loaded from a persistent compilation cache
        # (scripts/run_tests.sh shares one between the test processes)
        if event.endswith(("backend_compile_duration", "cache_retrieval_time_sec")):
            compiles.append(event)

    cfg = SpeculativeConfig(method="dathathri", decoder=SYNTH, lookahead=3, max_new_tokens=7)
    prompts = np.broadcast_to(PROMPT, (5, len(PROMPT)))
    args = (MODEL, TARGET, prompts, np.full(5, len(PROMPT)), prf.stream_keys(list(range(5))), jax.random.key(1))
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        speculative.precompile(*args, cfg, draft=MODEL, draft_params=DRAFT)
        assert compiles, "precompile did not compile"
        compiles.clear()
        res = speculative.generate(*args, cfg, draft=MODEL, draft_params=DRAFT)
        assert not compiles, f"generate compiled again after precompile: {compiles}"
        # each method is its own executable: it computes only what it uses
        speculative.generate(*args, dataclasses.replace(cfg, method="pseudorandom"), draft=MODEL, draft_params=DRAFT)
        assert compiles, "a different method reused dathathri's executable"
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert res.tokens.shape[0] == 5


@pytest.mark.parametrize("method,k", ALL_METHODS)
def test_greedy_emits_the_targets_greedy_path(method, k):
    res = run(method, k, SYNTH, n=4, max_new=12, temperature=0.0)
    path, tok = [], PROMPT[-1]
    for _ in range(12):
        tok = int(np.argmax(P_TAB[tok]))
        path.append(tok)
    assert (generated(res, 12) == np.array(path)).all()


@functools.lru_cache(maxsize=None)
def eos_run():
    return run("pseudorandom", 3, GUMBEL, n=300, max_new=15, eos_id=2)


def test_eos_budget_and_records():
    res = eos_run()
    toks, src = np.asarray(res.tokens), np.asarray(res.source)
    lengths, p = np.asarray(res.lengths), len(PROMPT)
    for b in range(300):
        gen = toks[b, p : lengths[b]]
        assert 1 <= gen.size <= 15
        assert (gen[:-1] != 2).all() and (gen[-1] == 2 or gen.size == 15)
        assert (toks[b, lengths[b] :] == 0).all()
        assert (src[b, p : lengths[b]] >= 0).all() and (src[b, lengths[b] :] == -1).all()
    u = np.asarray(res.accept_u)
    drafted = src == sources.SOURCE_DRAFT
    prob = np.asarray(res.accept_prob)
    # accepted drafts passed their test, residuals failed it, bonus tokens had none
    assert (u[drafted] < prob[drafted]).all()
    resid = src == sources.SOURCE_RESIDUAL
    assert (u[resid] >= prob[resid]).all()
    assert np.isnan(u[src == sources.SOURCE_TARGET]).all()


@pytest.mark.parametrize("method,k,kw", [("pseudorandom", 3, dict(eos_id=2)), ("plain", 0, dict(eos_id=2)),
                                          ("standard", 2, dict(temperature=0.5, top_k=2))])
def test_target_logprob_record_is_the_targets_temperature_one_log_prob(method, k, kw):
    """LOGPPL's terms come from the loop's own target forwards: log P(w_t | w_{t-1}) of the
    Markov target at T = 1 without top-k (whatever the sampling temperature / top-k), at every
    generated position and nowhere else; log_perplexity equals runs.log_perplexity."""
    from wmspec_jax.lab import runs

    res = run(method, k, GUMBEL, n=200, max_new=11, **kw)
    toks, lp = np.asarray(res.tokens), np.asarray(res.target_logprob)
    plen, lengths = np.asarray(res.prompt_lengths), np.asarray(res.lengths)
    pos = np.arange(toks.shape[1])[None]
    generated = (pos >= plen[:, None]) & (pos < lengths[:, None])
    assert np.isnan(lp[~generated]).all() and np.isfinite(lp[generated]).all()
    expect = np.log(P_TAB)[toks[:, :-1], toks[:, 1:]]
    np.testing.assert_allclose(lp[:, 1:][generated[:, 1:]], expect[generated[:, 1:]], rtol=0, atol=1e-5)
    reference = runs.log_perplexity(MODEL, TARGET, toks, plen, lengths)
    np.testing.assert_allclose(res.log_perplexity(), reference, rtol=0, atol=1e-5)


def test_records_are_rebuildable_from_text_and_key():
    """The acceptance u and the draft-stream Gumbel choice can be recomputed by a detector."""
    res = eos_run()
    toks, src = np.asarray(res.tokens), np.asarray(res.source)
    wm = np.asarray(res.watermarked)
    keys = prf.stream_keys(list(range(300)))
    pos = np.broadcast_to(np.arange(toks.shape[1]), toks.shape)
    ctx = prf.gather_contexts(toks, pos, 4)
    acc = np.asarray(prf.position_uniforms(prf.context_seeds(keys[:, None, prf.Stream.ACCEPT], ctx)))
    tested = wm & np.isfinite(np.asarray(res.accept_u))
    assert tested.sum() > 1000
    assert np.array_equal(acc[tested], np.asarray(res.accept_u)[tested])
    draft_seeds = prf.context_seeds(keys[:, None, prf.Stream.DRAFT], ctx)
    choice = np.asarray(decoders.gumbel_max_token(jnp.asarray(np.log(Q_TAB))[toks[:, :-1]], prf.vocab_uniforms(draft_seeds[:, 1:], V)))
    from_draft = (src[:, 1:] == sources.SOURCE_DRAFT) & wm[:, 1:]
    assert np.array_equal(choice[from_draft], toks[:, 1:][from_draft])


def test_input_errors():
    cfg = SpeculativeConfig(method="pseudorandom", lookahead=2, max_new_tokens=4)
    good = dict(draft=MODEL, draft_params=DRAFT)
    gen = speculative.generate
    with pytest.raises(ValueError, match=r"\[B, P\]"):
        gen(MODEL, TARGET, np.zeros(3, int), [3], b"k", jax.random.key(0), cfg, **good)
    with pytest.raises(ValueError, match="empty prompts"):
        gen(MODEL, TARGET, np.zeros((1, 3), int), [0], b"k", jax.random.key(0), cfg, **good)
    with pytest.raises(ValueError, match="token ids"):
        gen(MODEL, TARGET, np.full((1, 3), 9), [3], b"k", jax.random.key(0), cfg, **good)
    with pytest.raises(ValueError, match="needs a draft"):
        gen(MODEL, TARGET, np.zeros((1, 3), int), [3], b"k", jax.random.key(0), cfg)
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        gen(MODEL, TARGET, np.zeros((1, 3), int), [3], b"k", jax.random.key(0), cfg,
            draft=toy.markov_model(5), draft_params=toy.log_table(toy.markov_pair(5)[0]))
    with pytest.raises(TypeError, match="watermark key"):
        gen(MODEL, TARGET, np.zeros((1, 3), int), [3], 1.5, jax.random.key(0), cfg, **good)
    with pytest.raises(TypeError, match="jax.random key"):
        gen(MODEL, TARGET, np.zeros((1, 3), int), [3], b"k", b"k", cfg, **good)
    with pytest.raises(ValueError, match="lookahead"):
        SpeculativeConfig(method="hu", lookahead=0)
    with pytest.raises(ValueError, match="lookahead=0"):
        SpeculativeConfig(method="basic", lookahead=2)
    with pytest.raises(ValueError, match="method"):
        SpeculativeConfig(method="kgw")
    with pytest.raises(ValueError, match="temperature"):
        SpeculativeConfig(temperature=-1.0)
    bad_params = TARGET.at[1, 2].set(jnp.nan)
    with pytest.raises(ValueError, match="NaN"):
        gen(MODEL, bad_params, np.tile(np.arange(4), (2, 1)), [4, 4], b"k", jax.random.key(0), cfg, **good)


def test_batch_sharded_over_eight_devices_gives_the_same_tokens():
    script = textwrap.dedent(
        """
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from wmspec_jax import decoders, prf, speculative, toy
        assert len(jax.devices()) == 8
        p, q = toy.markov_pair(16, 0.3, seed=2)
        m = toy.markov_model(16)
        cfg = speculative.SpeculativeConfig(method="pseudorandom", decoder=decoders.WatermarkDecoder("synthid", 4),
                                            lookahead=3, max_new_tokens=24)
        prompts = np.random.default_rng(0).integers(0, 16, size=(16, 6))
        keys = prf.stream_keys(list(range(16)))
        rngs = jax.random.split(jax.random.key(0), 16)
        args = (prompts, np.full(16, 6), keys, rngs)
        one = speculative.generate(m, toy.log_table(p), *args, cfg, draft=m, draft_params=toy.log_table(q))
        mesh = Mesh(np.array(jax.devices()), ("batch",))
        shard = lambda x: jax.device_put(x, NamedSharding(mesh, P("batch")))
        sharded = speculative.generate(m, toy.log_table(p), shard(prompts), shard(np.full(16, 6)), shard(keys),
                                       shard(rngs), cfg, draft=m, draft_params=toy.log_table(q))
        assert np.array_equal(np.asarray(one.tokens), np.asarray(sharded.tokens))
        assert np.array_equal(np.asarray(one.source), np.asarray(sharded.source))
        print("OK")
        """
    )
    env = dict(os.environ, XLA_FLAGS=xla_flags_with_devices(8), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_config_refuses_bad_settings_and_normalises_numpy_scalars():
    good = SpeculativeConfig(method="pseudorandom", lookahead=np.int64(3), max_new_tokens=np.int32(8),
                             temperature=np.float32(0.5), top_k=np.int64(5))
    plain = SpeculativeConfig(method="pseudorandom", lookahead=3, max_new_tokens=8, temperature=0.5, top_k=5)
    assert good == plain and hash(good) == hash(plain) and type(good.lookahead) is int
    assert SpeculativeConfig(top_k=0).top_k is None
    for kwargs, err, match in [
        (dict(lookahead=True), TypeError, "lookahead"),
        (dict(max_new_tokens=True), TypeError, "max_new_tokens"),
        (dict(top_k=-1), ValueError, "top_k"),
        (dict(eos_id=-5), ValueError, "eos_id"),
        (dict(pad_id=-1), ValueError, "pad_id"),
        (dict(temperature=np.float32(-0.1)), ValueError, "temperature"),
        (dict(temperature=True), TypeError, "temperature"),
        (dict(context_width=0), ValueError, "context width"),
    ]:
        with pytest.raises(err, match=match):
            SpeculativeConfig(**kwargs)
    with pytest.raises(ValueError, match="top_k"):
        run("pseudorandom", 2, n=2, top_k=V + 1)


def test_a_list_of_secrets_gives_each_row_its_key():
    secrets = ["alice", "bob", "carol"]
    by_list = run("pseudorandom", 2, n=3, keys=secrets)
    by_words = run("pseudorandom", 2, n=3, keys=prf.stream_keys(secrets))
    assert np.array_equal(np.asarray(by_list.tokens), np.asarray(by_words.tokens))
    with pytest.raises(ValueError, match="one per row"):
        run("pseudorandom", 2, n=3, keys=secrets[:2])


def test_temperature_zero_warns_and_records_no_watermark():
    with pytest.warns(UserWarning, match="no watermark"):
        res = run("pseudorandom", 2, n=16, max_new=6, temperature=0.0)
    gen = np.asarray(res.source) >= 0
    assert gen.sum() == 16 * 6 and not np.asarray(res.watermarked)[gen].any()
    res = run("pseudorandom", 2, n=16, max_new=6, top_k=1)  # one candidate: one-hot as well
    assert not np.asarray(res.watermarked).any()
    res = run("pseudorandom", 2, n=16, max_new=6)
    assert np.asarray(res.watermarked)[np.asarray(res.source) >= 0].mean() > 0.5


def test_a_tiny_temperature_is_the_greedy_answer():
    """Logits divided by 1e-10 are ~1e11, where float32 steps are 8192: two roundings of the same logit
    then differed and the tempered distribution came out inf / NaN (an error, or token 0 over and over).
    The largest logit is subtracted before the division, so 1e-10 gives the greedy answer exactly."""
    from wmspec_jax.models import protocol, transformer
    from wmspec_jax.models.config import TransformerConfig

    cfg = TransformerConfig(family="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                            num_heads=4, num_kv_heads=2, head_dim=16)
    params = transformer.init_params(cfg, jax.random.key(0), scale=0.5)
    lm = protocol.make_language_model(cfg, name="tiny")
    prompts = np.random.default_rng(0).integers(0, 512, (3, 8)).astype(np.int32)

    def tokens(temperature):
        config = SpeculativeConfig(method="plain", lookahead=0, max_new_tokens=16, temperature=temperature)
        return np.asarray(speculative.generate(lm, params, prompts, np.full(3, 8), "k", jax.random.key(0),
                                               config).tokens)

    greedy = tokens(0.0)
    np.testing.assert_array_equal(tokens(1e-10), greedy)
    assert len(np.unique(greedy[:, 8:])) > 5
    with pytest.raises(ValueError, match="smallest normal"):
        SpeculativeConfig(method="plain", lookahead=0, temperature=1e-45)


@pytest.mark.parametrize("decoder", [GUMBEL, SYNTH], ids=["gumbel", "synthid"])
def test_top_k_of_the_whole_vocabulary_is_the_dense_path(decoder):
    """Candidates = every token (sparse path, sorted ids) generate what the dense path generates."""
    dense = run("pseudorandom", 3, decoder, n=500, max_new=8)
    sparse = run("pseudorandom", 3, decoder, n=500, max_new=8, top_k=V)
    same = (np.asarray(dense.tokens) == np.asarray(sparse.tokens)).all(axis=1)
    # identical up to float rounding of sums in SynthID's tournament (a draw on a CDF boundary)
    assert same.mean() >= (1.0 if decoder.kind == "gumbel" else 0.99), same.mean()


def test_several_stop_ids():
    """A tuple of stop ids ends a row at the first of any of them."""
    res = run("pseudorandom", 3, GUMBEL, n=300, max_new=15, eos_id=(2, 1))
    assert SpeculativeConfig(eos_id=[3, 3]).eos_id == 3
    toks, lengths, p = np.asarray(res.tokens), np.asarray(res.lengths), len(PROMPT)
    ended = 0
    for b in range(300):
        gen = toks[b, p : lengths[b]]
        assert not np.isin(gen[:-1], [1, 2]).any()
        ended += int(np.isin(gen[-1], [1, 2]))
        assert np.isin(gen[-1], [1, 2]) or gen.size == 15
    assert ended > 200


def _top_k_table(table, k):
    """Rows restricted to their k most likely tokens (ties to lower ids) and renormalised."""
    out = np.zeros_like(table)
    for r, row in enumerate(table):
        keep = np.argsort(-row, kind="stable")[:k]
        out[r, keep] = row[keep] / row[keep].sum()
    return out


@pytest.mark.parametrize("method", ["standard", "dathathri", "pseudorandom"])
@pytest.mark.parametrize("decoder", [GUMBEL, SYNTH], ids=["gumbel", "synthid"])
def test_thm41_with_top_k_candidates(method, decoder):
    """Top-k = 2 of V = 4: P's and Q's supports differ, so drafts fall outside P's support
    and residuals live on P's candidates. The output law is the top-k processed P (Thm 4.1 (a))
    and the first acceptance rate 1 − TV of the processed pair (Thm 4.1 (b))."""
    res = run(method, 2, decoder, top_k=2)
    p_k, q_k = _top_k_table(P_TAB, 2), _top_k_table(Q_TAB, 2)
    toks = generated(res, 3)
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    probs = toy.sequence_probs(p_k, PROMPT[-1], 3).ravel()
    assert counts[probs == 0].sum() == 0, "a token outside the top-k support was emitted"
    stats.assert_counts_match(counts[probs > 0], probs[probs > 0], f"{method}/{decoder.kind} top-k")
    first = np.asarray(res.source[:, len(PROMPT)])
    tv = 0.5 * np.abs(p_k[PROMPT[-1]] - q_k[PROMPT[-1]]).sum()
    stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size, 1 - tv, f"{method} top-k")
