"""Statistics from token ids + key: agreement with generation records and the NumPy twin,
bad-input errors, texts too short to score."""

import jax
import numpy as np
import pytest

import wmspec_jax.detect as det
from tests.detect import conftest as c
from wmspec_jax import context, prf, prf_numpy


def test_statistics_reproduce_generation_records(gumbel_pos, synth_pos):
    """Repeated contexts are skipped exactly as in generation; u is the acceptance uniform used."""
    for run, stats_fn in ((gumbel_pos[0], det.gumbel_statistics),
                          (synth_pos, lambda *a, **k: det.synthid_statistics(*a[:2], c.SYNTH_LAYERS, **k))):
        rec = det.records_from_generation(run.result)
        st = stats_fn(rec.tokens, run.keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
        assert np.array_equal(np.asarray(st.mask), rec.watermarked)  # Alg. 1 watermarks every fresh context
        tested = ~np.isnan(rec.accept_u) & rec.watermarked
        assert tested.sum() > 1000
        assert np.array_equal(np.asarray(st.u)[tested], rec.accept_u[tested])
        # sources only where generated; bonus tokens exist and are TARGET-stream tokens
        assert set(np.unique(rec.source[np.asarray(st.mask)])) <= {0, 1, 2}
        # the typed batch says the same as its fields (a statistic that ignored its starts would differ)
        typed = stats_fn(rec, run.keys, vocab_size=c.VOCAB)
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(typed[:-1], st[:-1]))
        assert not np.array_equal(np.asarray(stats_fn(rec.tokens, run.keys, lengths=rec.lengths, starts=0,
                                                      vocab_size=c.VOCAB).mask), np.asarray(st.mask))
        with pytest.raises(ValueError, match="come with the typed batch"):
            stats_fn(rec, run.keys, lengths=rec.lengths, vocab_size=c.VOCAB)


def test_statistics_match_the_numpy_twin():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50, size=(3, 20)).astype(np.int32)
    keys = prf.stream_keys(["a", "b", "c"])
    h, m = 3, 40
    g = jax.tree_util.tree_map(np.asarray, det.gumbel_statistics(tokens, keys, context_width=h, starts=0, vocab_size=50))
    s = jax.tree_util.tree_map(np.asarray, det.synthid_statistics(tokens, keys, m, context_width=h, starts=0, vocab_size=50))
    for b in range(3):
        for t in range(20):
            ctx = np.array([tokens[b, t - h + j] if t - h + j >= 0 else -1 for j in range(h)])
            seeds = [prf_numpy.context_seeds(keys[b, k], ctx) for k in range(3)]
            assert float(g.y_draft[b, t]) == prf_numpy.token_uniforms(seeds[0], tokens[b, t])
            assert float(g.y_target[b, t]) == prf_numpy.token_uniforms(seeds[1], tokens[b, t])
            assert float(g.u[b, t]) == prf_numpy.position_uniforms(seeds[2])
            assert np.array_equal(s.g_draft[b, t], prf_numpy.token_gbits(seeds[0], tokens[b, t], m))
            assert np.array_equal(s.g_target[b, t], prf_numpy.token_gbits(seeds[1], tokens[b, t], m))
    want = context.scored_mask(tokens, np.full(3, 20), np.zeros(3), h)
    assert np.array_equal(g.mask, np.asarray(want))


def test_one_key_for_all_texts_equals_per_text_copies():
    tokens = np.random.default_rng(1).integers(0, 9, size=(4, 12))
    a = det.gumbel_statistics(tokens, b"secret", vocab_size=9)
    b = det.gumbel_statistics(tokens, np.broadcast_to(prf.stream_keys(b"secret"), (4, 3, 2)), vocab_size=9)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a[:-1], b[:-1]))
    # the secret's fingerprint is known; raw stream words have no known origin
    assert a.provenance.key_derivation == "direct" and b.provenance.key_fingerprint is None
    one = det.gumbel_statistics(tokens[0], b"secret", vocab_size=9)  # a single text as a 1-D array
    assert np.array_equal(np.asarray(one.y_draft[0]), np.asarray(a.y_draft[0]))


def test_truncation_equals_scoring_the_truncated_text():
    tokens = np.random.default_rng(2).integers(0, 3, size=(5, 30))  # tiny vocabulary: repeats
    full = det.gumbel_statistics(tokens, "k", starts=2, vocab_size=3)
    for n in (5, 17):
        cut = det.truncate(full, n)
        direct = det.gumbel_statistics(tokens[:, : 2 + n], "k", starts=2, vocab_size=3)
        assert np.array_equal(np.asarray(cut.mask[:, : 2 + n]), np.asarray(direct.mask))
        assert not np.asarray(cut.mask[:, 2 + n:]).any()
        np.testing.assert_allclose(np.asarray(det.score_single(cut).score),
                                   np.asarray(det.score_single(direct).score), rtol=1e-6)


def test_text_shorter_than_the_context_gets_no_score():
    tokens = np.array([[1, 2, 3, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7], [5, 5, 5, 5, 5, 5, 5]])
    lengths = np.array([3, 7, 7])
    st = det.gumbel_statistics(tokens, "k", lengths=lengths, vocab_size=8)  # default start = h = 4
    r = det.score_single(st)
    n = np.asarray(r.num_scored)
    assert n.tolist() == [0, 3, 1]  # short text: nothing; constant text: only the first context is new
    assert np.isnan(float(r.score[0])) and float(r.pvalue[0]) == 1.0 and float(r.log_pvalue[0]) == 0.0
    assert np.isfinite(np.asarray(r.score[1:])).all()
    sy = det.synthid_statistics(tokens, "k", 4, lengths=lengths, vocab_size=8)
    m = det.mean_test(sy.g_target, sy.mask)
    assert np.isnan(float(m.score[0])) and float(m.pvalue[0]) == 1.0
    with pytest.raises(ValueError, match="NaN scores"):
        det.metrics.tpr_at_fpr(np.asarray(r.score), np.array([0.0, 1.0]), 0.01)


def test_bad_inputs_give_clear_errors():
    ok = np.array([[1, 2, 3, 4, 5, 6]])
    v = dict(vocab_size=10)
    with pytest.raises(ValueError, match="empty batch"):
        det.gumbel_statistics(np.zeros((0, 5), np.int32), "k", **v)
    with pytest.raises(ValueError, match="empty batch"):
        det.gumbel_statistics(np.zeros((2, 0), np.int32), "k", **v)
    with pytest.raises(ValueError, match="empty text"):
        det.gumbel_statistics(ok, "k", lengths=[0], **v)
    with pytest.raises(ValueError, match="lengths must lie"):
        det.gumbel_statistics(ok, "k", lengths=[7], **v)
    with pytest.raises(TypeError, match="integer token ids"):
        det.gumbel_statistics(ok.astype(np.float32), "k", **v)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        det.gumbel_statistics(ok, "k", vocab_size=6)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        det.gumbel_statistics(-ok, "k", **v)
    # without the vocabulary size an id from another tokenizer would be hashed silently: required
    with pytest.raises(TypeError, match="vocab_size"):
        det.gumbel_statistics(ok, "k")
    with pytest.raises(TypeError, match="vocab_size"):
        det.synthid_statistics(ok, "k", 3, vocab_size=None)
    det.gumbel_statistics(np.array([[1, 2, 3, -1]]), "k", lengths=[3], **v)  # padding is never read
    with pytest.raises(ValueError, match="starts"):
        det.gumbel_statistics(ok, "k", starts=[9], **v)
    with pytest.raises(ValueError, match="per-text stream keys"):
        det.gumbel_statistics(np.vstack([ok, ok]), prf.stream_keys(["a", "b", "c"]), **v)
    with pytest.raises(TypeError, match="watermark (key|secret)"):
        det.gumbel_statistics(ok, 1.5, **v)
    with pytest.raises(ValueError, match="layers"):
        det.synthid_statistics(ok, "k", 0, **v)
    st = det.gumbel_statistics(ok, "k", **v)
    with pytest.raises(ValueError, match="length mismatch of records"):
        det.score_oracle(st, np.zeros((1, 5), np.int8))
    with pytest.raises(TypeError, match="GumbelStats"):
        det.score_single(det.synthid_statistics(ok, "k", 3, **v))
    with pytest.raises(ValueError, match="tau"):
        det.score_ars_tau(st, 1.5)
    with pytest.raises(ValueError, match="draft fraction"):
        det.score_ars_prior(st, -0.1)


def test_g_values_with_the_layer_axis_elsewhere_are_refused():
    """A [B, m, L] array passed as [B, L, m] is caught by the recorded m, also when m = L."""
    tokens = np.random.default_rng(3).integers(0, 9, size=(2, 6))
    sy = det.synthid_statistics(tokens, "k", 6, vocab_size=9, starts=0)  # L = m = 6
    bayes = det.bayes.bayes_detector(det.BayesConfig("single", 6),
                                       det.bayes.init_params(det.BayesConfig("single", 6), jax.random.key(0)))
    det.score(bayes, sy)
    wrong = sy._replace(g_target=sy.g_target[:, :, :5], g_draft=sy.g_draft[:, :, :5])
    with pytest.raises(ValueError, match=r"\[B, L, m\]"):
        det.score(bayes, wrong)
    transposed = det.synthid_statistics(tokens, "k", 4, vocab_size=9, starts=0)
    transposed = transposed._replace(g_target=np.swapaxes(np.asarray(transposed.g_target), 1, 2))
    with pytest.raises(ValueError, match=r"\[B, L, m\]"):
        det.synthid.score_mean_single(transposed)


def test_record_length_mismatch_is_an_error(gumbel_pos):
    res = gumbel_pos[0].result
    with pytest.raises(ValueError, match="length mismatch of records"):
        det.records_from_generation(res._replace(source=res.source[:, :-1]))
    with pytest.raises(ValueError, match="length mismatch of records"):
        det.records_from_generation(res._replace(lengths=res.lengths[:-1]))


@pytest.mark.parametrize("num_layers,weights", [(8, None), (30, (1.0, 1.0, 1.0))])
def test_the_synthid_search_over_siblings_gives_fair_coins_under_h0(num_layers, weights):
    """Multi-draft SynthID statistics without records (3 sibling streams searched) of texts independent of
    the key: m independent Bernoulli(1/2) g-values per position, like one stream's (the 2^m patterns for
    m <= 8, else the count, by chi-square over 36,000 positions), uncorrelated with the target stream's;
    reproducible and the same for a row alone as in its batch."""
    from scipy import stats as sstats

    from tests import stats

    rng = np.random.default_rng(num_layers)
    tokens = rng.integers(0, 64, size=(1000, 40))
    keys = prf.stream_keys([f"search-{num_layers}-{i}" for i in range(1000)])
    kw = dict(vocab_size=64, starts=np.full(1000, 4), siblings=3, sibling_weights=weights)
    st = det.synthid_statistics(tokens, keys, num_layers, **kw)
    mask = np.asarray(st.mask)
    g = np.asarray(st.g_draft)[mask].astype(np.int64)
    if num_layers <= 8:
        stats.assert_counts_match(np.bincount(g @ (1 << np.arange(num_layers)), minlength=2**num_layers),
                                  np.full(2**num_layers, 2.0**-num_layers), "g-value patterns")
    else:
        stats.assert_counts_match(np.bincount(g.sum(1), minlength=num_layers + 1),
                                  sstats.binom.pmf(np.arange(num_layers + 1), num_layers, 0.5), "g-value counts")
    r = np.corrcoef(g.sum(1), np.asarray(st.g_target)[mask].sum(1))[0, 1]
    assert abs(r) < 5 / np.sqrt(g.shape[0]), r
    again = det.synthid_statistics(tokens[:3], keys[:3], num_layers, **{**kw, "starts": np.full(3, 4)})
    np.testing.assert_array_equal(np.asarray(again.g_draft), np.asarray(st.g_draft)[:3])


def test_weighted_sibling_search_is_uniform_and_equal_weights_are_the_maximum_to_the_n():
    """Gumbel-max family: max_c y_c^(1/w_c) is U(0, 1) under H0 (DKW); equal weights give (max_c y_c)^3."""
    from tests import stats

    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 64, size=(1000, 40))
    keys = prf.stream_keys([f"weights-{i}" for i in range(1000)])
    kw = dict(vocab_size=64, starts=np.full(1000, 4))
    weighted = det.gumbel_statistics(tokens, keys, siblings=3, sibling_weights=(0.7, 0.2, 0.1), **kw)
    stats.assert_uniform(np.asarray(weighted.y_draft)[np.asarray(weighted.mask)], "weighted search")
    per_sibling = [np.asarray(det.gumbel_statistics(tokens, keys, siblings=3, candidate=np.full(tokens.shape, c),
                                                    **kw).y_draft) for c in range(3)]
    equal = det.gumbel_statistics(tokens, keys, siblings=3, sibling_weights=(2, 2, 2), **kw)
    np.testing.assert_allclose(np.asarray(equal.y_draft), np.max(per_sibling, axis=0).astype(np.float64) ** 3,
                               rtol=1e-6)
    default = det.gumbel_statistics(tokens, keys, siblings=3, **kw)  # w_c ∝ 4^-c
    expected = np.max([y.astype(np.float64) ** (1 / w) for y, w in zip(per_sibling, np.array([16, 4, 1]) / 21)], axis=0)
    np.testing.assert_allclose(np.asarray(default.y_draft), expected, rtol=1e-5)  # float32 log and exp
    for bad in ((1, 2), (1, 0, 1), (1, np.nan, 1)):
        with pytest.raises(ValueError, match="sibling_weights must be 3 positive numbers"):
            det.gumbel_statistics(tokens, keys, siblings=3, sibling_weights=bad, **kw)
    with pytest.raises(ValueError, match="siblings > 1"):
        det.synthid_statistics(tokens, keys, 4, sibling_weights=(1, 1), **kw)
