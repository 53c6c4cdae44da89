"""The field metrics' pieces on constructed inputs: running p-values are the prefix scores, tokens to
detect is the first crossing, the matched length, and what a rewrite keeps of a text (the paraphrase
table's measures). The experiments themselves run on the toy pair in tests/test_robustness.py."""

import numpy as np
import pytest

from wmspec_jax.detect import pvalues
from wmspec_jax.detect.common import TokenTerms
from wmspec_jax.lab import field_metrics as fm
from wmspec_jax.lab import detection_rows, paraphrase, paraphrase_robustness


def test_tokens_to_detect_is_the_first_crossing():
    p = np.array([[0.5, 0.02, 0.009, 0.2, 0.001],  # below at 3, above again, lowest at 5: the first counts
                  [0.5, 0.3, 0.2, 0.1, 0.05],  # never
                  [0.01, 0.5, 0.5, 0.5, 0.5],  # exactly alpha on the first token
                  [0.5, 0.5, np.nan, np.nan, np.nan]])  # a text that ends first
    ttd = fm.tokens_to_detect(np.log(p), 0.01)
    np.testing.assert_array_equal(ttd, [3, np.inf, 1, np.inf])
    size = fm.size_summary(ttd)
    assert size["never_share"] == 0.5 and size["median"] == np.inf and size["median_of_detected"] == 2
    assert fm.size_summary([3, 5, np.inf])["median"] == 5
    # the matched length is where the TPR *at that length* reaches the target (a fixed-length test), not
    # where half the running p-values have crossed at some point
    q = np.log([[0.5, 0.005, 0.5], [0.5, 0.5, 0.001], [0.001, 0.5, 0.5], [0.5, 0.001, 0.001]])
    assert fm.matched_length(q, 0.5) == 2 and fm.matched_length(q, 0.25) == 1 and fm.matched_length(q, 0.75) is None


@pytest.mark.parametrize("null", ["gamma", "binomial"])
def test_running_pvalues_are_the_scores_of_each_prefix(null):
    rng = np.random.default_rng(3)
    bsz, width, trials = 3, 12, 4
    terms = rng.integers(0, trials + 1, (bsz, width)).astype(np.float32) if null == "binomial" else \
        rng.exponential(2.0, (bsz, width)).astype(np.float32)
    mask = rng.random((bsz, width)) < 0.7
    starts, lengths = np.array([0, 2, 5]), np.array([12, 9, 6])
    mask[0, 0] = False  # no token scored yet: p = 1
    lp = fm.running_log_pvalues(TokenTerms(terms, mask, starts, lengths, null, trials if null == "binomial" else 1))
    assert lp.shape == (bsz, 12)
    for b in range(bsz):
        n = lengths[b] - starts[b]
        assert np.isnan(lp[b, n:]).all() and np.isfinite(lp[b, :n]).all()
        for ell in range(1, n + 1):
            sel = mask[b, starts[b]:starts[b] + ell]
            k, s = int(sel.sum()), float(terms[b, starts[b]:starts[b] + ell][sel].sum())
            if k == 0:
                want = 0.0
            elif null == "gamma":
                want = float(pvalues.gamma_log_sf(np.float32(k), np.float32(s)))
            else:
                want = float(pvalues.binomial_half_log_sf(np.float32(round(s)), np.float32(k * trials)))
            assert lp[b, ell - 1] == pytest.approx(want, rel=1e-5, abs=1e-6), (b, ell)
    assert lp[0, 0] == 0.0


def _rows(generated, start=3, width=12):
    tokens = np.zeros((len(generated), width), np.int32)
    tokens[:, :start] = [7, 8, 9]
    for r, g in enumerate(generated):
        tokens[r, start:start + len(g)] = g
    return detection_rows.TextRows(tokens, lengths=np.array([start + len(g) for g in generated]),
                                   starts=np.full(len(generated), start), source=np.zeros_like(tokens, np.int8),
                                   candidate=np.zeros_like(tokens, np.int8), keys=None,
                                   indices=np.arange(len(generated)))


def test_what_a_rewrite_keeps():
    original = _rows([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    rewritten = paraphrase.rewrite_texts(original, [[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1, 0]])
    assert (rewritten.source == -1).all() and list(rewritten.lengths) == [9, 10]
    m = paraphrase.rewrite_measures(original, rewritten)
    assert m["distance"] == [0, 6] and m["identical"] == [True, False]
    assert m["normalised"] == [0.0, 6 / 7] and m["length_ratio"] == [1.0, 7 / 6]
    assert m["context_kept"] == [1.0, 0.0]  # reversed: no (context, token) of the original survives
    shifted = paraphrase.rewrite_texts(original, [[1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6]])
    # one token in front: the later tokens' last h = 4 predecessors recur from the fifth on
    assert paraphrase.context_kept(original, shifted, 1) == pytest.approx(2 / 7)
    sub = paraphrase.substitute_matched(original, [0.0, 0.5], seed=[0], vocab_size=50)
    assert paraphrase.rewrite_measures(original, sub)["distance"] == [0, 3]


def test_answers_end_at_the_first_end_of_turn():
    rows = _rows([[1, 2, 99, 4], [99, 5, 6], [1, 2, 3]])
    cut = paraphrase_robustness.answers(rows, eos_id=99)
    assert list(cut.lengths - cut.starts) == [2, 1, 3]  # never empty
    assert list(paraphrase_robustness.answers(rows, None).lengths) == list(rows.lengths)
