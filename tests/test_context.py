"""Repeated-context rule: exact agreement with a brute-force reference."""

import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax import context


def reference_scored(tokens, length, start, h):
    seen, out = set(), np.zeros(len(tokens), bool)
    for p in range(start, length):
        ctx = tuple(tokens[p - h + j] if p - h + j >= 0 else -1 for j in range(h))
        out[p] = ctx not in seen
        seen.add(ctx)
    return out


@pytest.mark.parametrize("h", [1, 2, 4])
def test_scored_mask_matches_reference(h):
    rng = np.random.default_rng(h)
    bsz, length = 16, 40
    tokens = rng.integers(0, 3, size=(bsz, length))  # tiny vocabulary: many repeats
    lengths = rng.integers(0, length + 1, size=bsz)
    starts = rng.integers(0, 8, size=bsz)
    got = np.asarray(context.scored_mask(tokens, lengths, starts, h))
    want = np.stack([reference_scored(tokens[b], lengths[b], starts[b], h) for b in range(bsz)])
    assert np.array_equal(got, want)
    assert got.sum() > 0 and (~got[np.arange(length)[None] < lengths[:, None]]).sum() > 0


def test_incremental_rule_agrees_with_batch_rule():
    rng = np.random.default_rng(7)
    bsz, length, h = 8, 30, 2
    tokens = rng.integers(0, 3, size=(bsz, length))
    start = np.full(bsz, 3)
    full = np.asarray(context.scored_mask(tokens, np.full(bsz, length), start, h))
    for p in range(3, length):
        new = np.asarray(context.is_new_context(jnp.asarray(tokens), np.full(bsz, p), start, h))
        assert np.array_equal(new, full[:, p]), p


def test_prompt_contexts_are_not_remembered():
    # the context (1, 2) appears inside the prompt but the generated position
    # with that context is still the first *scored* occurrence
    tokens = np.array([[1, 2, 9, 1, 2, 5, 1, 2, 7]])
    mask = np.asarray(context.scored_mask(tokens, [9], [3], 2))
    assert mask.tolist() == [[False, False, False, True, True, True, True, True, False]]


def test_detection_start():
    assert context.detection_start(4) == 4
    assert context.detection_start(4, prompt_length=10) == 10
    with pytest.raises(ValueError, match="context width"):
        context.detection_start(0)
