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
        det.score_ars_prior(st, -0.1, jax.random.key(0))


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
