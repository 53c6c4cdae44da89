"""Windowed scores: the window set and its sums against brute force; calibration on unwatermarked
documents; a 64-token watermarked span pasted into 512 human tokens is found (toy pair)."""

import numpy as np
import pytest
from scipy import stats as sps

import wmspec_jax.detect as det
from tests import stats
from tests.detect import conftest as c
from wmspec_jax import text_data as data
from wmspec_jax.detect import pvalues, windows

ALPHA = 0.01
DOC, SPAN = 512, 64
TEMPERATURE = 1.0


def brute_windows(n: int, w: int) -> list:
    """The documented window set of a text of n positions, by its definition."""
    out = []
    size = w
    while size < n:
        step = max(size // 2, 1)
        starts = list(range(0, n - size + 1, step))
        out += [(a, a + size) for a in starts]
        if starts[-1] + size != n:
            out.append((n - size, n))
        size *= 2
    if (0, n) not in out:
        out.append((0, n))
    return out


def test_window_set_and_sums_match_brute_force():
    rng = np.random.default_rng(0)
    bsz, length, w = 9, 80, 8
    starts = rng.integers(0, 6, bsz)
    lengths = np.minimum(length, starts + rng.integers(1, length, bsz))
    lengths[0], starts[0] = length, 0
    mask = (rng.random((bsz, length)) < 0.8) & (np.arange(length)[None] >= starts[:, None]) & (
        np.arange(length)[None] < lengths[:, None])
    terms = np.where(mask, rng.exponential(size=(bsz, length)), 0.0).astype(np.float32)
    got = windows.scan(det.TokenTerms(terms, mask, starts, lengths, "gamma", 1), min_window=w)
    for b in range(bsz):
        n = int(lengths[b] - starts[b])
        wins = brute_windows(n, w)
        assert int(got.num_windows[b]) == len(wins), (b, n)
        lps = []
        for lo, hi in wins:
            sel = mask[b, starts[b] + lo: starts[b] + hi]
            k = int(sel.sum())
            s = float(terms[b, starts[b] + lo: starts[b] + hi].sum())
            lps.append(float(pvalues.gamma_log_sf(k, s)) if k else 0.0)
        best = int(np.argmin(lps))
        assert float(got.window_log_pvalue[b]) == pytest.approx(lps[best], abs=1e-4)
        assert float(got.log_pvalue[b]) == pytest.approx(min(0.0, lps[best] + np.log(len(wins))), abs=1e-4)
        if not np.isclose(sorted(lps)[1], lps[best], atol=1e-6):  # a unique best window: its location
            assert (int(got.start[b]), int(got.end[b])) == (starts[b] + wins[best][0], starts[b] + wins[best][1])


def test_short_texts_have_one_window_and_the_detectors_own_p_value():
    rng = np.random.default_rng(1)
    toks = rng.integers(0, c.VOCAB, (6, 20)).astype(np.int32)
    st = det.gumbel_statistics(toks, c.keys_for("short", 6), vocab_size=c.VOCAB)
    d = det.make("single", st.provenance)
    w = det.windows.score_windows(d, st, min_window=16)  # 16 positions after h = 4: one window
    assert (np.asarray(w.num_windows) == 1).all()
    np.testing.assert_allclose(np.asarray(w.log_pvalue), np.asarray(d.score(st).log_pvalue), rtol=1e-5, atol=1e-6)
    sy = det.synthid_statistics(toks, c.keys_for("short", 6), 3, vocab_size=c.VOCAB)
    m = det.make("synthid-mean", sy.provenance)
    ws = det.windows.score_windows(m, sy, min_window=16)
    np.testing.assert_allclose(np.asarray(ws.log_pvalue), np.asarray(m.score(sy).log_pvalue), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="windowed"):
        det.make("synthid-weighted-mean", sy.provenance).token_terms(sy)
    with pytest.raises(ValueError, match="min_window"):
        det.windows.score_windows(d, st, min_window=1)


def human_stream() -> np.ndarray:
    """The built-in human texts (chatterbot answers, pydoc paragraphs) as one stream of toy tokens
    (UTF-8 bytes mod V: the toy pair's text map, keeping the text's repetitions)."""
    texts = data.builtin_questions().human_texts + [e.human for e in data.builtin_openings().examples]
    return np.frombuffer(" ".join(texts).encode("utf-8"), np.uint8).astype(np.int32) % c.VOCAB


@pytest.fixture(scope="module")
def setting():
    """Ars-τ fitted on 2000 watermarked toy texts, 2000 test spans, human documents."""
    train = c.generate("pseudorandom", c.GUMBEL, TEMPERATURE, SPAN, "win-train", 101)
    test = c.generate("pseudorandom", c.GUMBEL, TEMPERATURE, SPAN, "win-test", 102)
    rec = det.records_from_generation(train.result)
    st = det.gumbel_statistics(rec.tokens, train.keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
    tau = det.fit_ars_tau(st)
    stream = human_stream()
    step = (stream.size - DOC) // (2 * c.BATCH)  # overlapping stretches: each document gets its own key
    docs = np.stack([stream[i * step: i * step + DOC] for i in range(2 * c.BATCH)])
    return tau, det.records_from_generation(test.result), docs


def test_windowed_score_is_calibrated_on_unwatermarked_documents(setting):
    tau, _, docs = setting
    st = det.gumbel_statistics(docs, c.keys_for("win-null", len(docs)), vocab_size=c.VOCAB)
    w = det.windows.score_windows(tau, st)
    lp = np.asarray(w.log_pvalue)
    k, n = int((lp <= np.log(ALPHA)).sum()), lp.size
    ci = det.metrics.clopper_pearson(k, n)
    print(f"\nwindowed Ars-tau on {n} human documents of {DOC} toy tokens: FPR at 0.01 = {ci.value:.4f} "
          f"[{ci.lower:.4f}, {ci.upper:.4f}], {int(np.asarray(w.num_windows)[0])} windows each")
    # the Bonferroni bound guarantees FPR <= alpha: not significantly above it
    assert sps.binom.sf(k - 1, n, ALPHA) > stats.ALPHA, f"windowed FPR {k}/{n} exceeds {ALPHA}"
    # each window's own p-value is exact: that of the first 64 positions is uniform over keys
    terms = tau.token_terms(st)
    sel = np.asarray(terms.mask) & (np.arange(DOC)[None] < 4 + 64)
    first = pvalues.gamma_log_sf(sel.sum(1), np.where(sel, np.asarray(terms.terms), 0.0).sum(1))
    stats.assert_uniform(np.exp(np.asarray(first, np.float64)), "p-value of a fixed 64-token window")


def test_a_64_token_span_inside_512_human_tokens_is_found(setting):
    """The watermarked span (Alg. 1, toy pair) pasted at a random offset into human text: found (corrected
    p <= 0.01 and at least half of the reported window inside the span) in >= 90 % of documents."""
    tau, rec, docs = setting
    rng = np.random.default_rng(5)
    n = c.BATCH
    docs = docs[:n].copy()
    offsets = rng.integers(0, DOC - SPAN + 1, n)
    for i in range(n):
        docs[i, offsets[i]: offsets[i] + SPAN] = rec.tokens[i, rec.starts[i]: rec.starts[i] + SPAN]
    test_keys = c.generate("pseudorandom", c.GUMBEL, TEMPERATURE, SPAN, "win-test", 102).keys
    st = det.gumbel_statistics(docs, test_keys, vocab_size=c.VOCAB)
    w = det.windows.score_windows(tau, st)
    lp, lo, hi = (np.asarray(x) for x in (w.log_pvalue, w.start, w.end))
    inside = np.minimum(hi, offsets + SPAN) - np.maximum(lo, offsets)
    found = (lp <= np.log(ALPHA)) & (inside >= 0.5 * (hi - lo))
    whole = np.asarray(tau.score(st).log_pvalue) <= np.log(ALPHA)
    k = int(found.sum())
    lower = sps.beta.ppf(stats.ALPHA, k, n - k + 1)  # one-sided lower confidence bound at level 1 - 1e-6
    print(f"\n64-token span in {DOC} human tokens (toy pair, T={TEMPERATURE}): found {k}/{n} = {k / n:.3f} "
          f"(lower bound {lower:.3f}); whole-text Ars-tau detects {whole.mean():.3f}; "
          f"median window {np.median(hi - lo):.0f} tokens")
    assert lower >= 0.9, f"span found in {k}/{n} documents"
