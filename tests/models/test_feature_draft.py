"""Feature-conditioned drafts (models/feature_draft.py) through the real loop: the output
law stays the target's (Thm 4.1), and every proposal's Q is the one the draft gives with
the target's features of the committed text (first draft of a step) or its own feature
estimate (later drafts), i.e. the loop feeds, rolls back and re-feeds features correctly."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from tests.models.test_draft_reduced_head import tiny_pair as reduced_head_pair
from wmspec_jax import decoders, prf, speculative
from wmspec_jax.models import feature_draft
from wmspec_jax.sources import SOURCE_DRAFT

V = 16
KEPT = np.array([0, 1, 2, 3, 5, 7, 8, 11, 13, 14], np.int32)
PROMPT = np.array([1, 4, 9, 6, 12], np.int32)


@functools.lru_cache(maxsize=None)
def tiny_pair():
    target = reduced_head_pair()[0]  # the tiny random Llama of the reduced-head tests (V = 16)
    assert target.config.vocab_size == V
    trainable = feature_draft.init_trainable(target.params, target.config, jax.random.key(1))
    # a draft that uses the features: a random fc mixing embedding and feature
    trainable["fc"] = 0.5 * jax.random.normal(jax.random.key(2), trainable["fc"].shape)
    return target, feature_draft.make_feature_draft(target, trainable, KEPT)


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def generate(method, prompts, lengths, lookahead, max_new, seed=3, temperature=1.0):
    target, fd = tiny_pair()
    cfg = speculative.SpeculativeConfig(method=method, decoder=decoders.WatermarkDecoder("gumbel"),
                                        lookahead=lookahead, max_new_tokens=max_new, temperature=temperature)
    return speculative.generate(target.language_model(), target.params, prompts, lengths,
                                prf.stream_keys(list(range(len(prompts)))), jax.random.key(seed), cfg,
                                draft=fd.language_model(), draft_params=fd.params)


@functools.lru_cache(maxsize=None)
def jitted(which: str):
    """The target's step_hidden, the draft's step and rewind, compiled (the checks call them per row)."""
    target, fd = tiny_pair()
    fn = {"target_step": target.language_model().step_hidden, "draft_step": fd.language_model().step,
          "draft_rewind": fd.language_model().rewind}[which]
    return jax.jit(fn)


def target_pass(seq):
    """(P float64[T, V] next-token probabilities, hidden float32[T, D]) after each prefix of seq."""
    target, _ = tiny_pair()
    cache = target.language_model().init_cache(1, len(seq))
    logits, hidden, _ = jitted("target_step")(target.params, cache, jnp.asarray(seq)[None], jnp.array([len(seq)]))
    return softmax(np.asarray(logits[0], np.float64)), hidden[0]


@pytest.mark.parametrize("method", ["standard", "pseudorandom"])
def test_output_law_is_the_targets_with_a_feature_draft(method):
    """Joint law of the first two generated tokens over 20k rows = P's (chi-square). With
    K = 1 the second token comes from a second step half of the time, after the loop has
    rolled the draft back and fed it the target's features of the accepted text."""
    n_rows = 20_000
    res = generate(method, np.broadcast_to(PROMPT, (n_rows, len(PROMPT))), np.full(n_rows, len(PROMPT)),
                   lookahead=1, max_new=2)
    toks = np.asarray(res.tokens[:, len(PROMPT):len(PROMPT) + 2])
    p1 = target_pass(PROMPT)[0][-1]
    p2 = np.stack([target_pass(np.append(PROMPT, v))[0][-1] for v in range(V)])
    counts = np.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V)
    stats.assert_counts_match(counts, p1[:, None] * p2, f"{method}: first two tokens")
    first_steps = np.asarray(res.tokens_per_step[:, 0])
    assert (first_steps == 1).mean() > 0.2 and (first_steps == 2).mean() > 0.2


def draft_pass(seq, feats):
    """The draft over all of seq with the target's features as inputs: (logits, hidden, cache)."""
    _, fd = tiny_pair()
    prev = jnp.pad(feats[:-1], ((1, 0), (0, 0)))[None]
    return jitted("draft_step")(fd.params, fd.language_model().init_cache(1, len(seq)), jnp.asarray(seq)[None],
                                jnp.array([len(seq)]), prev)


def draft_q(seq, teacher_forced, n, own):
    """Q (float64[V]) of the draft for the token at index n of seq: the draft's output at
    position n - 1, whose input feature is the target's (own=False) or the draft's own
    output at position n - 2 computed from the target's features (own=True).
    ``teacher_forced``: :func:`draft_pass` of seq."""
    _, fd = tiny_pair()
    logits, hidden, cache = teacher_forced
    if not own:
        return softmax(np.asarray(logits[0, n - 1], np.float64))
    cache = jitted("draft_rewind")(cache, jnp.array([n - 1]))
    logits, _, _ = jitted("draft_step")(fd.params, cache, jnp.asarray(seq[n - 1:n])[None], jnp.array([1]),
                                        hidden[:, n - 2:n - 1])
    return softmax(np.asarray(logits[0, 0], np.float64))


def test_loop_proposals_use_the_targets_features_then_the_drafts_own():
    """Ragged rows, K = 2, 24 tokens: at every accepted draft the loop's recorded
    min(1, P/Q) equals the teacher-forced one with Q from :func:`draft_q`."""
    prompts = np.array([[1, 4, 9, 6, 12, 3], [2, 5, 0, 0, 0, 0], [7, 7, 1, 8, 0, 0]], np.int32)
    lengths = np.array([6, 2, 4])
    res = generate("standard", prompts, lengths, lookahead=2, max_new=24, seed=11)
    checked = 0
    for row in range(len(prompts)):
        n_end = int(res.lengths[row])
        seq = np.asarray(res.tokens[row, :n_end])
        p, feats = target_pass(seq)
        teacher_forced = draft_pass(seq, feats)
        n = int(lengths[row])
        for emitted in np.asarray(res.tokens_per_step[row]):
            for s in range(min(2, int(emitted))):  # drafts accepted in this step
                pos = n + s
                if pos >= n_end or int(res.source[row, pos]) != SOURCE_DRAFT:
                    continue
                q = draft_q(seq, teacher_forced, pos, own=s == 1)
                want = min(1.0, p[pos - 1, seq[pos]] / q[seq[pos]])
                np.testing.assert_allclose(float(res.accept_prob[row, pos]), want, rtol=2e-4, atol=2e-5,
                                           err_msg=f"row {row}, position {pos} (draft {s + 1} of its step)")
                checked += 1
            n += int(emitted)
    assert checked >= 10


def test_files_round_trip_and_bad_pairs(tmp_path):
    target, fd = tiny_pair()
    trainable = feature_draft.init_trainable(target.params, target.config, jax.random.key(0))
    feature_draft.save(tmp_path / "f.npz", trainable, KEPT, meta={"target": "tiny"})
    got, ids, meta = feature_draft.load(tmp_path / "f.npz")
    assert meta["target"] == "tiny" and feature_draft.is_feature_draft_file(tmp_path / "f.npz")
    np.testing.assert_array_equal(ids, KEPT)
    np.testing.assert_allclose(np.asarray(got["fc"]), np.asarray(trainable["fc"]), atol=1e-3)
    bad = {**trainable, "fc": trainable["fc"][:, :4]}
    with pytest.raises(ValueError, match="fc"):
        feature_draft.make_feature_draft(target, bad, KEPT)
    # a target that gives no hidden states (like the toy Markov model) cannot drive a feature draft
    cfg = speculative.SpeculativeConfig(method="standard", lookahead=2, max_new_tokens=4)
    plain_target = target.language_model()
    no_hidden = type(plain_target)(name="no-hidden", vocab_size=V, init_cache=plain_target.init_cache,
                                   step=plain_target.step, rewind=plain_target.rewind,
                                   cache_lengths=plain_target.cache_lengths)
    with pytest.raises(ValueError, match="hidden states"):
        speculative.generate(no_hidden, target.params, PROMPT[None], np.array([len(PROMPT)]), b"k" * 16,
                             jax.random.key(0), cfg, draft=fd.language_model(), draft_params=fd.params)
    assert "fc" not in repr(fd.language_model())
