"""Detection of the decoders beyond the paper: inverse transform and DiPmark / γ-reweight.

Their statistics are one uniform per token and stream, scored by the Gumbel-max detectors: exact
under the null (wrong key, unwatermarked generations, human text), with power on Alg. 1 texts, and
tied to their decoder by the provenance.
"""

import jax
import numpy as np
import pytest

import wmspec_jax.detect as det
from tests import stats
from tests.detect import conftest as c
from wmspec_jax import decoders, prf, speculative, toy
from wmspec_jax.detect import streams

ALPHA = 0.01
INVERSE = decoders.WatermarkDecoder("inverse_transform")
DIPMARK = decoders.WatermarkDecoder("dipmark", alpha=0.45)
TEMPERATURE = 0.7
NEW = 32


def scores(st):
    """p-values of the key-only detectors of the family (the CLI's default and the target stream alone)."""
    return {"ars_prior": np.asarray(det.score_ars_prior(st, 0.5).pvalue),
            "single": np.asarray(det.score_single(st).pvalue)}


def test_alignment_value_is_uniform_when_u_is_independent_of_the_token():
    seeds = prf.context_seeds(prf.stream_keys(b"alignment")[0], np.arange(200_000)[:, None])
    eta = prf.token_uniforms(seeds, 7)
    u = prf.position_uniforms(prf.context_seeds(prf.stream_keys(b"other")[0], np.arange(200_000)[:, None]))
    y = np.asarray(streams.alignment_value(eta, u))
    assert 0 < y.min() and y.max() < 1
    stats.assert_uniform(y, "alignment value under the null")
    # and near 1 when u and η agree: the statistic points the right way
    assert float(np.asarray(streams.alignment_value(np.float32(0.3), np.float32(0.3001)))) > 0.999


@pytest.mark.parametrize("decoder", [INVERSE, DIPMARK], ids=lambda d: d.name)
def test_calibrated_on_unwatermarked_generations_and_human_text(decoder, gumbel_negs):
    """6000 standard-method generations under their own keys, and 6000 windows of human text."""
    parts = []
    for run in gumbel_negs:
        rec = det.records_from_generation(run.result)
        parts.append(scores(det.statistics(decoder, rec.tokens, run.keys, lengths=rec.lengths, starts=rec.starts,
                                           vocab_size=c.VOCAB)))
    human = c.human_windows(3 * c.BATCH, width=64)
    keys = c.keys_for("human-permutation", len(human))
    for i in range(0, len(human), c.BATCH):
        parts.append(scores(det.statistics(decoder, human[i:i + c.BATCH], keys[i:i + c.BATCH], vocab_size=256)))
    for name in parts[0]:
        for what, chunk in (("generations", parts[:3]), ("human text", parts[3:])):
            p = np.concatenate([x[name] for x in chunk])
            stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, f"{decoder.name}/{name} on {what}")
            stats.assert_uniform(p, f"{decoder.name}/{name} p-values on {what}")


@pytest.mark.parametrize("decoder", [INVERSE, DIPMARK], ids=lambda d: d.name)
def test_alg1_texts_are_detected_and_a_wrong_key_is_not(decoder):
    run = c.generate("pseudorandom", decoder, TEMPERATURE, NEW, f"perm-pos-{decoder.name}", 5)
    rec = det.records_from_generation(run.result)

    def stats_under(keys):
        return det.statistics(decoder, rec.tokens, keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)

    right = scores(stats_under(run.keys))
    # measured at 2000 texts of 32 tokens: Ars-Prior 0.23 (inverse transform) / 0.13 (DiPmark)
    assert np.mean(right["ars_prior"] <= ALPHA) > 0.08
    wrong = scores(stats_under(c.keys_for(f"perm-wrong-{decoder.name}")))
    for name, p in wrong.items():
        stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, f"{decoder.name}/{name}, wrong key")
    # scoring the texts as Gumbel-max texts is refused, not a silent "not detected"
    gumbel_detector = det.make("ars-prior", det.statistics(decoders.gumbel(), rec.tokens, run.keys,
                                                           vocab_size=c.VOCAB).provenance)
    with pytest.raises(det.ProvenanceMismatch, match="decoder"):
        gumbel_detector.score(stats_under(run.keys))


def test_statistics_name_the_decoder_and_refuse_synthid():
    tokens = np.arange(20)[None] % c.VOCAB
    assert det.statistics(INVERSE, tokens, b"k" * 32, vocab_size=c.VOCAB).provenance.decoder == "inverse_transform"
    gamma = decoders.WatermarkDecoder("gamma_reweight")
    assert det.statistics(gamma, tokens, b"k" * 32, vocab_size=c.VOCAB).provenance.decoder == "dipmark"
    with pytest.raises(ValueError, match="synthid_statistics"):
        det.gumbel_statistics(tokens, b"k" * 32, vocab_size=c.VOCAB, decoder=decoders.WatermarkDecoder("synthid", 4))


def test_a_draft_stream_with_its_own_decoder_is_scored_with_its_statistic():
    """Alg. 1 with a Gumbel-max draft under an inverse-transform target: each stream scored with its own
    decoder's statistic, exact under a wrong key; the draft stream's own statistic is what finds the
    accepted drafts."""
    n = c.BATCH
    cfg = speculative.SpeculativeConfig(method="pseudorandom", decoder=INVERSE, draft_decoder=decoders.gumbel(),
                                        lookahead=c.LOOKAHEAD, max_new_tokens=NEW, temperature=TEMPERATURE)
    prompts = np.random.default_rng(11).integers(0, c.VOCAB, size=(n, c.PROMPT_LEN))
    keys = c.keys_for("mixed-draft")
    res = speculative.generate(c.MODEL, toy.log_table(c.P_TAB), prompts, np.full(n, c.PROMPT_LEN), keys,
                               jax.random.key(11), cfg, draft=c.MODEL, draft_params=toy.log_table(c.Q_TAB))
    rec = det.records_from_generation(res)

    def stats_under(k, draft_decoder):
        return det.statistics(INVERSE, rec.tokens, k, draft_decoder=draft_decoder, lengths=rec.lengths,
                              starts=rec.starts, vocab_size=c.VOCAB)

    mixed = stats_under(keys, decoders.gumbel())
    assert (mixed.provenance.decoder, mixed.provenance.draft_decoder) == ("inverse_transform", "gumbel")
    as_one = stats_under(keys, None)  # the draft stream wrongly scored as inverse transform
    oracle = {name: np.mean(np.asarray(det.score_oracle(st, rec.source).pvalue) <= ALPHA)
              for name, st in (("mixed", mixed), ("as_one", as_one))}
    assert oracle["mixed"] > oracle["as_one"] + 0.1, oracle
    wrong = scores(stats_under(c.keys_for("mixed-wrong"), decoders.gumbel()))
    for name, p in wrong.items():
        stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, f"mixed draft/{name}, wrong key")
    with pytest.raises(det.ProvenanceMismatch, match="draft_decoder"):
        det.make("ars-prior", as_one.provenance).score(mixed)
    with pytest.raises(ValueError, match="uniform-statistic decoders"):
        det.statistics(decoders.WatermarkDecoder("synthid", 4), rec.tokens, keys, draft_decoder=decoders.gumbel(),
                       vocab_size=c.VOCAB)


KGW = decoders.WatermarkDecoder("kgw", gamma=0.25, delta=2.0)


def test_kgw_green_count_is_exact_conservative_and_detects_alg1_texts(gumbel_negs):
    from scipy import stats as sstats

    from wmspec_jax.detect.kgw import binomial_log_sf

    k, n = np.array([0, 3, 10, 50, 100, 7]), np.array([10, 10, 10, 100, 100, 5])
    assert np.allclose(binomial_log_sf(k, n, 0.25), sstats.binom.logsf(k - 1, n, 0.25))
    assert binomial_log_sf(np.array([400]), np.array([400]), 0.25)[0] == pytest.approx(400 * np.log(0.25))
    # null: 6000 unwatermarked generations under their own keys; the binomial p-value is discrete, so
    # P(p <= x) <= x (checked one-sided at several x)
    p = []
    for run in gumbel_negs:
        rec = det.records_from_generation(run.result)
        st = det.statistics(KGW, rec.tokens, run.keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
        p.append(np.asarray(det.make("kgw-green", st.provenance, vocab_size=c.VOCAB).score(st).pvalue))
    p = np.concatenate(p)
    for x in (0.01, 0.05, 0.2, 0.5):
        assert sstats.binom.sf(int((p <= x).sum()) - 1, p.size, x) > stats.ALPHA, f"P(p <= {x}) above {x}"
    run = c.generate("pseudorandom", KGW, TEMPERATURE, NEW, "kgw-pos", 6)
    rec = det.records_from_generation(run.result)
    st = det.statistics(KGW, rec.tokens, run.keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
    assert st.provenance.decoder == "kgw"
    # measured: 0.97 of 2000 Alg. 1 texts of 32 tokens at p <= 0.01
    assert np.mean(np.asarray(det.make("kgw-green", st.provenance, vocab_size=c.VOCAB).score(st).pvalue) <= ALPHA) > 0.8
    with pytest.raises(ValueError, match="needs vocab_size"):
        det.make("kgw-green", st.provenance).score(st)
    with pytest.raises(ValueError, match="gumbel detector; the statistics are kgw"):
        det.make("ars-prior", st.provenance)
    for bare in (det.score_single, lambda s: det.score_ars_prior(s, 0.5), lambda s: det.score_ars_tau(s, 0.5)):
        with pytest.raises(det.ProvenanceMismatch, match="kgw statistics"):  # the bare functions check too
            bare(st)
    with pytest.raises(ValueError, match="draft stream under a KGW"):
        det.statistics(KGW, rec.tokens, run.keys, draft_decoder=decoders.gumbel(), vocab_size=c.VOCAB)


def test_one_secret_gives_each_scheme_a_stream_of_its_own(gumbel_pos):
    """PRF v2's domain separation: under the very keys that generated them, 2000 Alg. 1 Gumbel-max texts
    scored as KGW, inverse-transform or DiPmark texts, and 2000 Alg. 1 texts of each of those scored by
    Gumbel-max's default detector, flag at the nominal rate (binomial band at α = 0.01). Under PRF v1,
    where DiPmark's permutation read Gumbel-max's token lane, the same Gumbel-max texts are "detected"
    as DiPmark texts."""
    run = gumbel_pos[1]
    rec = det.records_from_generation(run.result)
    common = dict(lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
    kgw_stats = det.statistics(KGW, rec.tokens, run.keys, **common)
    p = np.asarray(det.make("kgw-green", kgw_stats.provenance, vocab_size=c.VOCAB).score(kgw_stats).pvalue)
    assert stats_binomial_at_most(p, "KGW's count on Gumbel-max texts")
    for decoder in (INVERSE, DIPMARK):
        p = scores(det.statistics(decoder, rec.tokens, run.keys, **common))["ars_prior"]
        stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, f"{decoder.name} on Gumbel-max texts")
    v1 = det.statistics(DIPMARK, rec.tokens, run.keys, prf_version=prf.PRF_V1, **common)
    assert v1.provenance.prf_version == prf.PRF_V1
    assert np.mean(scores(v1)["ars_prior"] <= ALPHA) > 0.5
    for decoder, tag in ((KGW, "cross-kgw"), (INVERSE, "cross-inverse"), (DIPMARK, "cross-dipmark")):
        other = c.generate("pseudorandom", decoder, TEMPERATURE, NEW, tag, 31)
        rec = det.records_from_generation(other.result)
        st = det.statistics(decoders.gumbel(), rec.tokens, other.keys, lengths=rec.lengths, starts=rec.starts,
                            vocab_size=c.VOCAB)
        p = scores(st)["ars_prior"]
        stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, f"Gumbel-max on {decoder.name} texts")


def stats_binomial_at_most(p, what) -> bool:
    """The discrete binomial p-values' rate at α is at most α (one-sided binomial test)."""
    from scipy import stats as sstats

    assert sstats.binom.sf(int((p <= ALPHA).sum()) - 1, p.size, ALPHA) > stats.ALPHA, what
    return True
