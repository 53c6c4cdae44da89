"""Corpus-level dedup, the shared-context measure and warning, and calibration on human texts.

Corpora here are token arrays (no tokenizer): a template of random ids with slots filled per text, and
texts of independent random ids. Statistical checks use fixed secrets and fail for a correct
implementation with probability below ``tests.stats.ALPHA`` = 1e-6 each (bounds stated per test).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from wmspec_jax import decoders, detect, keys, prf
from wmspec_jax.detect import corpus
from tests.stats import ALPHA

VOCAB = 1000
H = prf.DEFAULT_CONTEXT_WIDTH
LENGTH = 48  # every batch is padded to ROWS x LENGTH (statistics) or is BIG_ROWS x LENGTH: few compilations
ROWS = 256
BIG_ROWS = 10000


def random_texts(num_texts: int, length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=(num_texts, length)).astype(np.int32)


def templated_texts(num_texts: int, length: int = LENGTH, seed: int = 0, slots: int = 2) -> np.ndarray:
    """One random template; ``slots`` positions (spaced so that every other window holds none) get a
    random id per text: most windows are the template's, shared by every text."""
    rng = np.random.default_rng(seed)
    template = rng.integers(0, VOCAB, size=length)
    texts = np.tile(template, (num_texts, 1))
    where = np.linspace(H, length - 1, slots).astype(int)
    texts[:, where] = rng.integers(0, VOCAB, size=(num_texts, slots))
    return texts.astype(np.int32)


def gumbel_stats(tokens, key="corpus-test", lengths=None):
    """Statistics of up to ROWS texts of LENGTH tokens, computed in a batch padded to ROWS rows."""
    tokens = np.asarray(tokens)
    b, length = tokens.shape
    assert b <= ROWS and length == LENGTH
    padded = np.zeros((ROWS, LENGTH), np.int32)
    padded[:b] = tokens
    lens = np.full(ROWS, LENGTH, np.int32)
    if lengths is not None:
        lens[:b] = lengths
    return detect.take(detect.gumbel_statistics(padded, key, vocab_size=VOCAB, lengths=lens), np.arange(b))


def reference_dedup(tokens, mask, width=H):
    """The rule as a loop: a scored position is kept iff its window was not kept or seen before."""
    seen, out = set(), np.zeros_like(mask)
    for b in range(tokens.shape[0]):
        for p in range(tokens.shape[1]):
            if mask[b, p]:
                window = tuple(int(tokens[b, q]) if q >= 0 else -1 for q in range(p - width, p + 1))
                out[b, p] = window not in seen
                seen.add(window)
    return out


# ---------------------------------------------------------------------------
# Hashes and the dedup rule
# ---------------------------------------------------------------------------


def test_window_hashes_see_exactly_the_context_and_the_token():
    tokens = random_texts(2, LENGTH, seed=1)
    tokens[1, 10:20] = tokens[0, 10:20]
    full = corpus.window_hashes(tokens, H)
    ctx = corpus.window_hashes(tokens, H, unit=corpus.CONTEXT)
    assert full.dtype == np.uint64 and full.shape == tokens.shape
    # positions 14..19 have their whole window (4 context tokens and the token) in the copied span
    np.testing.assert_array_equal(full[0, 14:20], full[1, 14:20])
    assert full[0, 13] != full[1, 13] and full[0, 20] != full[1, 20]
    # the context unit ignores the token itself: position 20's context lies in the copied span
    assert ctx[0, 20] == ctx[1, 20] and ctx[0, 21] != ctx[1, 21]
    # before index 0 the context is -1 (as prf.gather_contexts pads): with h = 2, position 1 of
    # (7, 8, 9) is the window (-1, 7 | 8), not (0, 7 | 8)
    short = np.array([[7, 8, 9]], np.int32)
    assert corpus.window_hashes(short, 2)[0, 1] == corpus.window_hashes(np.array([[-1, 7, 8]]), 2)[0, 2]
    assert corpus.window_hashes(short, 2)[0, 1] != corpus.window_hashes(np.array([[0, 7, 8]]), 2)[0, 2]
    with pytest.raises(ValueError, match="unit"):
        corpus.window_hashes(tokens, H, unit="sentence")


def test_dedup_keeps_each_window_at_its_first_occurrence_in_input_order():
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 6, size=(7, LENGTH)).astype(np.int32)  # small vocabulary: many repeats
    tokens[3] = tokens[1]  # a whole text again
    st = gumbel_stats(tokens)
    deduped, windows = corpus.dedup_corpus(st, tokens)
    mask = np.asarray(st.mask)
    np.testing.assert_array_equal(np.asarray(deduped.mask), reference_dedup(tokens, mask))
    np.testing.assert_array_equal(np.asarray(deduped.mask)[0], mask[0])  # the first text keeps all
    assert not np.asarray(deduped.mask)[3].any()  # the repeat keeps nothing
    assert type(deduped) is type(st) and deduped.provenance == st.provenance
    np.testing.assert_array_equal(np.asarray(deduped.y_target), np.asarray(st.y_target))
    assert windows.num_texts == 7 and windows.num_scored == int(mask.sum())


def test_dedup_is_a_no_op_on_texts_that_share_no_window():
    tokens = random_texts(40, LENGTH, seed=3)
    st = gumbel_stats(tokens)
    deduped, windows = corpus.dedup_corpus(st, tokens)
    np.testing.assert_array_equal(np.asarray(deduped.mask), np.asarray(st.mask))
    assert windows.shared_fraction == 0.0
    np.testing.assert_array_equal(corpus.shared_context_fraction(st, tokens), np.zeros(40))
    assert corpus.shared_context_warning(windows) is None


def test_dedup_in_batches_with_the_carried_state_equals_one_batch():
    tokens = templated_texts(30, seed=4)
    lengths = np.random.default_rng(4).integers(20, LENGTH + 1, size=30).astype(np.int32)
    st = gumbel_stats(tokens, lengths=lengths)
    whole, whole_windows = corpus.dedup_corpus(st, tokens)
    state, masks = None, []
    for rows in (slice(0, 7), slice(7, 8), slice(8, 30)):
        part, state = corpus.dedup_corpus(detect.take(st, rows), tokens[rows], state)
        masks.append(np.asarray(part.mask))
    np.testing.assert_array_equal(np.concatenate(masks), np.asarray(whole.mask))
    np.testing.assert_array_equal(state.hashes, whole_windows.hashes)
    np.testing.assert_array_equal(state.counts, whole_windows.counts)
    # padding rows that repeat a batch's first row (as a tool pads batches) lose every position
    padded = np.concatenate([tokens[:5], tokens[:1], tokens[:1]])
    part, _ = corpus.dedup_corpus(gumbel_stats(padded), padded)
    assert not np.asarray(part.mask)[5:].any()


def test_context_unit_keeps_one_position_per_context():
    tokens = templated_texts(20, seed=5)
    st = gumbel_stats(tokens)
    by_window, _ = corpus.dedup_corpus(st, tokens)
    by_context, _ = corpus.dedup_corpus(st, tokens, unit=corpus.CONTEXT)
    kept_w, kept_c = np.asarray(by_window.mask), np.asarray(by_context.mask)
    assert (kept_c <= kept_w).all() and kept_c.sum() < kept_w.sum()
    ctx = corpus.window_hashes(tokens, H, unit=corpus.CONTEXT)[kept_c]
    assert np.unique(ctx).size == ctx.size


@pytest.mark.parametrize("scheme", ["synthid", "kgw"])
def test_dedup_applies_to_synthid_and_kgw_statistics(scheme):
    tokens = templated_texts(12, seed=6)
    decoder = decoders.WatermarkDecoder.from_name(scheme, 4)
    st = detect.statistics(decoder, tokens, "corpus-test", vocab_size=VOCAB)
    deduped, windows = corpus.dedup_corpus(st, tokens)
    assert type(deduped) is type(st) and deduped.provenance.decoder == scheme
    np.testing.assert_array_equal(np.asarray(deduped.mask), reference_dedup(tokens, np.asarray(st.mask)))
    if scheme == "kgw":  # the green count (NumPy) scores what dedup kept
        sc = detect.make("kgw-green", st.provenance, vocab_size=VOCAB).score(deduped)
        np.testing.assert_array_equal(np.asarray(sc.num_scored), np.asarray(deduped.mask).sum(1))
    assert windows.shared_fraction > 0.5


def test_dedup_errors_name_the_cause():
    tokens = random_texts(3, LENGTH, seed=7)
    st = gumbel_stats(tokens)
    with pytest.raises(ValueError, match="token ids the statistics"):
        corpus.dedup_corpus(st, tokens[:, :10])
    with pytest.raises(ValueError, match="h = 3"):
        corpus.dedup_corpus(st, tokens, corpus.empty_windows(3))
    with pytest.raises(ValueError, match="unit"):
        corpus.dedup_corpus(st, tokens, corpus.empty_windows(H, corpus.CONTEXT))
    with pytest.raises(TypeError, match="CorpusWindows"):
        corpus.dedup_corpus(st, tokens, {"hashes": []})
    with pytest.raises(ValueError, match="pass context_width"):
        corpus.dedup_corpus(st._replace(provenance=None), tokens)
    out, _ = corpus.dedup_corpus(st._replace(provenance=None), tokens, context_width=H)
    np.testing.assert_array_equal(np.asarray(out.mask), np.asarray(st.mask))


# ---------------------------------------------------------------------------
# Per-key false positives over a corpus: binomial with dedup, not without
# ---------------------------------------------------------------------------


def secret_words(indices) -> np.ndarray:
    return np.stack([np.asarray(keys.Secret(f"corpus-fpr/{i}").stream_keys()) for i in indices])


def flag_counts(tokens, num_secrets: int, alpha: float, dedup: bool) -> tuple:
    """(flagged texts per secret int[S], texts with a scored token) under the default Gumbel detector,
    each secret the key of every text (one batch: texts tiled over secrets)."""
    n = tokens.shape[0]
    words = np.repeat(secret_words(range(num_secrets)), n, axis=0)
    st = detect.gumbel_statistics(np.tile(tokens, (num_secrets, 1)), words, vocab_size=VOCAB)
    mask = np.asarray(st.mask)
    if dedup:
        keep, _ = corpus.dedup_corpus(detect.take(st, np.arange(n)), tokens)
        mask = np.tile(np.asarray(keep.mask), (num_secrets, 1))
        st = st._replace(mask=mask)
    sc = detect.make("ars-prior", st.provenance, draft_fraction=0.5).score(st)
    flagged = (np.asarray(sc.pvalue) <= alpha).reshape(num_secrets, n)
    return flagged.sum(axis=1), int((mask[:n].sum(1) > 0).sum())


def test_dedup_brings_per_key_false_positives_of_a_templated_corpus_into_the_binomial_band():
    # With dedup every window is scored once per corpus, so under one key the texts' p-values are
    # independent and exact (Gamma null): a key's count is Binomial(n_scored, alpha), independently
    # over secrets. Two checks, each failing a correct implementation with probability < 1e-6:
    # the total over secrets in the two-sided 1e-6 band of Binomial(S n, alpha), and the number of
    # secrets above Binomial(n, alpha)'s 99.9 % quantile at most the 1 - 1e-6 quantile of
    # Binomial(S, P(count > q)) (2 of 50 secrets).
    tokens = templated_texts(200, seed=8, slots=4)
    alpha, num_secrets = 0.01, BIG_ROWS // 200
    counts, n = flag_counts(tokens, num_secrets, alpha, dedup=True)
    assert n == 200  # every text's slots give it windows of its own
    total = int(counts.sum())
    lo, hi = sps.binom.ppf(ALPHA / 2, num_secrets * n, alpha), sps.binom.isf(ALPHA / 2, num_secrets * n, alpha)
    assert lo <= total <= hi, (total, lo, hi)
    q = sps.binom.ppf(0.999, n, alpha)
    tail = sps.binom.sf(q, n, alpha)
    allowed = sps.binom.isf(ALPHA, num_secrets, tail)
    assert (counts > q).sum() <= allowed, (counts.tolist(), q, allowed)
    # the same corpus without dedup: most of each text's windows are shared, the counts over
    # secrets are overdispersed (printed for the record, not asserted: random in size)
    raw, _ = flag_counts(tokens, num_secrets, alpha, dedup=False)
    print(f"templated corpus, {num_secrets} secrets: dedup var/binomial {counts.var() / (n * alpha * (1 - alpha)):.2f}, "
          f"none {raw.var() / (tokens.shape[0] * alpha * (1 - alpha)):.2f}")


def test_without_dedup_identical_texts_make_per_key_false_positives_all_or_none():
    # n identical texts: under each key all n share one p-value, so a key flags none or all of them.
    # At alpha = 0.1 and 250 secrets, P(no secret flags) = 0.9^250 = 4e-12: some secret flags all n,
    # a count Binomial(n, alpha) exceeds with probability 1e-40 (far above its 99.99 % quantile).
    # With dedup only the first text is scored: every count is 0 or 1.
    text = random_texts(1, LENGTH, seed=9)
    tokens = np.tile(text, (40, 1))
    alpha, num_secrets = 0.1, BIG_ROWS // 40
    raw, _ = flag_counts(tokens, num_secrets, alpha, dedup=False)
    assert set(np.unique(raw).tolist()) <= {0, 40}
    assert (raw == 40).any() and 40 > sps.binom.ppf(0.9999, 40, alpha)
    deduped, n = flag_counts(tokens, num_secrets, alpha, dedup=True)
    assert n == 1 and deduped.max() <= 1
    np.testing.assert_array_equal(deduped, (raw == 40).astype(int))  # the first text's verdict, unchanged


# ---------------------------------------------------------------------------
# The shared-context measure and warning
# ---------------------------------------------------------------------------


def test_shared_context_warning_fires_on_a_templated_corpus_and_not_on_independent_texts():
    templated = templated_texts(50, seed=10)  # 2 slots: 6 of a text's 44 windows are its own
    st = gumbel_stats(templated)
    windows = corpus.count_windows(st, templated)
    per_text = corpus.shared_context_fraction(st, templated)
    assert windows.shared_fraction > 0.7 and (per_text > 0.6).all()
    message = corpus.shared_context_warning(windows)
    assert message is not None and "50 texts" in message and "dedup" in message
    assert corpus.shared_context_warning(windows, threshold=0.99) is None
    independent = random_texts(50, LENGTH, seed=11)
    st = gumbel_stats(independent)
    assert corpus.shared_context_warning(corpus.count_windows(st, independent)) is None
    # one text alone, or nothing scored: no warning
    assert corpus.shared_context_warning(corpus.count_windows(detect.take(st, [0]), independent[:1])) is None
    assert corpus.shared_context_warning(corpus.empty_windows(H)) is None
    with pytest.raises(ValueError, match="threshold"):
        corpus.shared_context_warning(windows, threshold=0.0)


def test_shared_fraction_counts_other_texts_and_earlier_batches():
    tokens = random_texts(3, LENGTH, seed=12)
    tokens[2, :20] = tokens[0, :20]  # text 2 shares positions 4..19 of text 0
    st = gumbel_stats(tokens)
    frac = corpus.shared_context_fraction(st, tokens)
    n = np.asarray(st.mask).sum(1)
    np.testing.assert_allclose(frac, [16 / n[0], 0.0, 16 / n[2]])
    # across batches: the state of the first two texts makes text 2's share the same
    state = corpus.count_windows(detect.take(st, [0, 1]), tokens[:2])
    np.testing.assert_allclose(corpus.shared_context_fraction(detect.take(st, [2]), tokens[2:], state), [16 / n[2]])
    total = corpus.count_windows(detect.take(st, [2]), tokens[2:], state)
    assert total.shared_fraction == pytest.approx(32 / n.sum())
    # a text with nothing scored has no share
    short = gumbel_stats(tokens, lengths=np.array([LENGTH, 3, LENGTH], np.int32))
    assert np.isnan(corpus.shared_context_fraction(short, tokens)[1])


# ---------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------


def pvalues_with(flagged: int, total: int, alpha: float = 0.01) -> np.ndarray:
    p = np.full(total, 0.5)
    p[:flagged] = alpha / 2
    return p


@pytest.mark.parametrize("flagged,total,level", [(0, 185, 0.95), (2, 300, 0.95), (7, 300, 0.95), (19, 300, 0.99),
                                                 (300, 300, 0.9), (1, 5000, 0.95)])
def test_calibration_interval_is_clopper_pearson(flagged, total, level):
    cal = corpus.calibrate(pvalues_with(flagged, total), alpha=0.01, level=level)
    ci = sps.binomtest(flagged, total).proportion_ci(confidence_level=level, method="exact")
    assert (cal.num_texts, cal.num_flagged) == (total, flagged)
    assert cal.fpr == flagged / total
    assert cal.low == pytest.approx(ci.low, rel=1e-9, abs=1e-12)
    assert cal.high == pytest.approx(ci.high, rel=1e-9, abs=1e-12)
    # exactness on its own terms: each end leaves (1 - level)/2 of its binomial tail
    tail = (1 - level) / 2
    if flagged > 0:
        assert sps.binom.sf(flagged - 1, total, cal.low) == pytest.approx(tail, rel=1e-6)
    if flagged < total:
        assert sps.binom.cdf(flagged, total, cal.high) == pytest.approx(tail, rel=1e-6)


def test_calibration_warns_exactly_when_the_interval_lies_above_alpha():
    alpha, total = 0.01, 300
    lo, hi = sps.binom.ppf(0.025, total, alpha), sps.binom.ppf(0.975, total, alpha)
    for flagged in range(0, 20):
        cal = corpus.calibrate(pvalues_with(flagged, total, alpha), alpha=alpha)
        assert cal.band == (lo, hi)
        assert (cal.warning is not None) == (cal.low > alpha) == (flagged > hi), flagged
    cal = corpus.calibrate(pvalues_with(19, total, alpha), alpha=alpha)
    assert "19 of 300" in cal.warning and "dedup" in cal.warning
    assert corpus.calibrate(pvalues_with(3, total, alpha), alpha=alpha).warning is None


def test_calibration_refuses_too_few_texts_and_bad_p_values_with_clear_errors():
    assert corpus.min_calibration_texts(0.01) == 185 and corpus.min_calibration_texts(0.05) == 37
    with pytest.raises(ValueError, match=r"at least 185 human texts.*got 184.*above 2 alpha"):
        corpus.calibrate(np.full(184, 0.5), alpha=0.01)
    # texts with too few scored tokens are left out, and counted
    p = np.full(200, 0.5)
    n_tok = np.full(200, 50)
    n_tok[:10] = 3
    cal = corpus.calibrate(p, num_scored=n_tok, min_tokens=8)
    assert (cal.num_texts, cal.num_excluded) == (190, 10)
    n_tok[:20] = 3
    with pytest.raises(ValueError, match=r"got 180 \(20 left out"):
        corpus.calibrate(p, num_scored=n_tok, min_tokens=8)
    with pytest.raises(ValueError, match="NaN"):
        corpus.calibrate(np.full(300, np.nan))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        corpus.calibrate(np.full(300, 1.5))
    with pytest.raises(ValueError, match="alpha"):
        corpus.calibrate(np.full(300, 0.5), alpha=0.0)
    with pytest.raises(ValueError, match="level"):
        corpus.calibrate(np.full(300, 0.5), level=1.0)
    with pytest.raises(ValueError, match="num_scored"):
        corpus.calibrate(np.full(300, 0.5), num_scored=np.ones(5))
    with pytest.raises(ValueError, match="float\\[B\\]"):
        corpus.calibrate(np.full((2, 300), 0.5))


def test_calibration_of_a_key_on_scored_texts():
    # p-values straight from the default detector: independent random texts under one key (the batch
    # shape of the tests above: no compilation of its own)
    tokens = random_texts(BIG_ROWS, LENGTH, seed=13)
    st = detect.gumbel_statistics(tokens, "corpus-test", vocab_size=VOCAB)
    sc = detect.make("ars-prior", st.provenance, draft_fraction=0.5).score(st)
    p, n_tok = np.asarray(sc.pvalue), np.asarray(sc.num_scored)
    cal = corpus.calibrate(p, num_scored=n_tok, min_tokens=8)
    assert (cal.num_texts, cal.num_flagged) == (int((n_tok >= 8).sum()), int(((p <= 0.01) & (n_tok >= 8)).sum()))
    assert set(cal.to_dict()) >= {"alpha", "num_texts", "num_flagged", "fpr", "low", "high", "band", "warning"}
