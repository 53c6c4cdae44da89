"""Token edits of the robustness experiment: what each does (rates within binomial bands), origins,
the intact-context rule against brute force, determinism."""

import numpy as np
import pytest

from tests import stats
from wmspec_jax.lab import edits

N = 4000
TOKENS = np.arange(1000, 1000 + N, dtype=np.int32)  # distinct ids: origins are checkable


def check_origin(e: edits.Edited):
    kept = e.origin >= 0
    np.testing.assert_array_equal(e.tokens[kept], TOKENS[e.origin[kept]])


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_rates_are_what_they_say(rate):
    rng = np.random.default_rng(int(rate * 10))
    sub = edits.substitute(TOKENS, rate, rng, vocab_size=50)
    check_origin(sub)
    assert sub.tokens.size == N and ((sub.origin == -1) == (sub.tokens < 50)).all()
    stats.assert_binomial_rate(int((sub.origin < 0).sum()), N, rate, "substituted tokens")
    ins = edits.insert(TOKENS, rate, rng, vocab_size=50)
    check_origin(ins)
    np.testing.assert_array_equal(ins.origin[ins.origin >= 0], np.arange(N))  # order kept
    stats.assert_binomial_rate(int((ins.origin < 0).sum()), N, rate, "inserted tokens")
    dele = edits.delete(TOKENS, rate, rng)
    check_origin(dele)
    assert (np.diff(dele.origin) > 0).all()
    stats.assert_binomial_rate(N - dele.tokens.size, N, rate, "deleted tokens")
    reo = edits.reorder(TOKENS, rate, rng, span=4)
    check_origin(reo)
    assert sorted(reo.origin.tolist()) == list(range(N))
    moved = int(np.sum(reo.origin.reshape(-1, 4)[:, 0] != np.arange(0, N, 4)))
    assert moved == round(rate * N / 4)  # every chosen span moves
    pool = np.arange(5000, 5000 + N, dtype=np.int32)
    mix = edits.mix(TOKENS, rate, rng, pool)
    check_origin(mix)
    human = mix.origin < 0
    assert mix.tokens.size == N and human.sum() == round(rate * N)
    np.testing.assert_array_equal(mix.origin[~human], np.arange(N - human.sum()))  # the text's start, contiguous
    assert np.all(np.diff(mix.tokens[human]) == 1)  # one contiguous stretch of the pool, split around the text
    assert np.sum(np.diff(np.flatnonzero(~human)) > 1) == 0  # the text is pasted in one piece


def test_rate_zero_is_the_identity_and_edits_are_deterministic():
    for kind in edits.EDITS:
        e = edits.apply(kind, TOKENS, 0.0, np.random.default_rng(0), vocab_size=10, human=TOKENS)
        np.testing.assert_array_equal(e.tokens, TOKENS)
        np.testing.assert_array_equal(e.origin, np.arange(N))
        a = edits.apply(kind, TOKENS[:50], 0.4, np.random.default_rng(3), vocab_size=10, human=TOKENS)
        b = edits.apply(kind, TOKENS[:50], 0.4, np.random.default_rng(3), vocab_size=10, human=TOKENS)
        np.testing.assert_array_equal(a.tokens, b.tokens)
    with pytest.raises(ValueError, match="unknown edit"):
        edits.apply("swap", TOKENS, 0.1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rate"):
        edits.substitute(TOKENS, 1.5, np.random.default_rng(0), 10)
    with pytest.raises(ValueError, match="human token pool"):
        edits.mix(TOKENS, 0.5, np.random.default_rng(0), TOKENS[:10])


def test_intact_marks_tokens_whose_context_is_untouched():
    rng = np.random.default_rng(1)
    h, prefix = 4, 3
    for kind in edits.EDITS:
        e = edits.apply(kind, TOKENS[:60], 0.3, rng, vocab_size=10, human=np.arange(100))
        got = edits.intact(e.origin, h, prefix=prefix)
        full = [("p", -prefix + j) for j in range(prefix)] + [("g", int(o)) if o >= 0 else ("new", 0) for o in e.origin]
        for t in range(len(e.origin)):
            pos = prefix + t
            ok = full[pos][0] == "g"
            for j in range(1, h + 1):
                if not ok:
                    break
                want = full[pos][1] - j
                if pos - j < 0:
                    ok = want < -prefix
                else:
                    kind_, o = full[pos - j]
                    ok = kind_ in ("g", "p") and o == want
            assert bool(got[t]) == ok, (kind, t)
    # substitution at rate r keeps a token's context with probability (1 - r)^(h + 1)
    sub = edits.substitute(TOKENS, 0.2, np.random.default_rng(2), vocab_size=50)
    kept = edits.intact(sub.origin, h, prefix=prefix)[h:]
    expected = 0.8 ** (h + 1)
    # positions are dependent (overlapping contexts): a z bound with the variance of h + 1 - dependent sums
    assert abs(kept.mean() - expected) < stats.Z * np.sqrt((2 * h + 1) * expected * (1 - expected) / kept.size)


def _levenshtein_reference(a, b) -> int:
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[-1][-1]


def test_levenshtein_against_the_textbook_recursion():
    assert edits.levenshtein([1, 2, 3], [1, 2, 3]) == 0
    assert edits.levenshtein([1, 2, 3], [3, 2, 1]) == 2  # two substitutions
    assert edits.levenshtein([1, 2, 3, 4], [2, 3, 4, 5]) == 2  # a deletion and an insertion, not 4 substitutions
    assert edits.levenshtein([], [7, 8]) == 2 and edits.levenshtein([7], []) == 1
    assert edits.normalised_distance([1, 2, 3, 4], [2, 3, 4, 5]) == 0.5 and edits.normalised_distance([], []) == 0.0
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = rng.integers(0, 3, rng.integers(0, 9)), rng.integers(0, 3, rng.integers(0, 9))
        assert edits.levenshtein(a, b) == _levenshtein_reference(list(a), list(b)), (a, b)
        assert edits.levenshtein(a, b) == edits.levenshtein(b, a)


def test_substitute_exactly_lands_at_the_asked_distance():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 5, 40).astype(np.int32)
    for count in (0, 1, 17, 40):
        e = edits.substitute_exactly(tokens, count, rng, vocab_size=5)
        assert int((e.tokens != tokens).sum()) == count >= edits.levenshtein(tokens, e.tokens)
        np.testing.assert_array_equal(e.origin >= 0, e.tokens == tokens)
        wide = edits.substitute_exactly(TOKENS[:40], count, rng, vocab_size=2 ** 20)  # no shift aligns better
        assert edits.levenshtein(TOKENS[:40], wide.tokens) == count
    with pytest.raises(ValueError, match="count"):
        edits.substitute_exactly(tokens, 41, rng, vocab_size=5)
