"""Drafts with a reduced-vocabulary head (models/draft.py): logits, files, and Thm 4.1
through the real speculative loop (the output law stays the target's although Q = 0
outside the kept ids)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, prf, sources, speculative
from wmspec_jax.models import draft, transformer
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.hf import Checkpoint

V = 16
KEPT = np.array([0, 2, 3, 5, 7, 8, 11, 13], np.int32)  # Q = 0 on the other half of the vocabulary
PROMPT = np.array([1, 4, 9, 6, 12], np.int32)
N_ROWS = 20_000


@functools.lru_cache(maxsize=None)
def tiny_pair():
    cfg = TransformerConfig(family="llama", vocab_size=V, hidden_size=16, intermediate_size=32,
                            num_layers=2, num_heads=2, num_kv_heads=1, head_dim=8, eos_token_id=None)
    params = transformer.init_params(cfg, jax.random.key(7), scale=0.4)
    target = Checkpoint(name="tiny", config=cfg, params=params)
    drafted = draft.make_draft(target, [0], {"head_ids": jnp.asarray(KEPT)})
    return target, drafted


def next_token_logits(ckpt, seqs):
    """float32[N, V] logits after each row of seqs int[N, T] (no cache reuse)."""
    lm = ckpt.language_model()
    seqs = np.asarray(seqs, np.int32)
    cache = lm.init_cache(len(seqs), seqs.shape[1])
    logits, _ = jax.jit(lm.step)(ckpt.params, cache, jnp.asarray(seqs),
                                 jnp.full((len(seqs),), seqs.shape[1]))
    return np.asarray(logits[:, -1], np.float64)


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def test_reduced_head_is_the_full_head_on_kept_ids_and_minus_inf_elsewhere():
    target, drafted = tiny_pair()
    plain = draft.make_draft(target, [0])
    seq = PROMPT[None]
    full, reduced = next_token_logits(plain, seq), next_token_logits(drafted, seq)
    np.testing.assert_allclose(reduced[:, KEPT], full[:, KEPT], rtol=1e-5, atol=1e-5)
    off = np.setdiff1d(np.arange(V), KEPT)
    assert np.isneginf(reduced[:, off]).all()
    assert drafted.language_model().vocab_size == V


def test_output_law_is_the_targets_with_a_reduced_head_draft(method="standard"):
    """Joint law of the first two generated tokens over 20k rows = P's (chi-square), and
    the first position's acceptance rate = sum_v min(P, Q) with Q = 0 off the kept ids
    (Thm 4.1 (a) and (b)); tokens outside the draft's head still appear (residual)."""
    target, drafted = tiny_pair()
    cfg = speculative.SpeculativeConfig(method=method, decoder=decoders.WatermarkDecoder("gumbel"),
                                        lookahead=3, max_new_tokens=2, temperature=1.0)
    prompts = np.broadcast_to(PROMPT, (N_ROWS, len(PROMPT)))
    res = speculative.generate(
        target.language_model(), target.params, prompts, np.full(N_ROWS, len(PROMPT)),
        prf.stream_keys(list(range(N_ROWS))), jax.random.key(3), cfg,
        draft=drafted.language_model(), draft_params=drafted.params)
    toks = np.asarray(res.tokens[:, len(PROMPT):len(PROMPT) + 2])
    p1 = softmax(next_token_logits(target, PROMPT[None]))[0]
    p2 = softmax(next_token_logits(target, np.concatenate(
        [np.broadcast_to(PROMPT, (V, len(PROMPT))), np.arange(V)[:, None]], 1)))
    joint = p1[:, None] * p2
    counts = np.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V)
    stats.assert_counts_match(counts, joint, f"{method}: first two tokens")
    off = np.setdiff1d(np.arange(V), KEPT)
    assert np.isin(toks[:, 0], off).any(), "no token outside the draft's head was ever emitted"
    q1 = softmax(next_token_logits(drafted, PROMPT[None]))[0]
    assert q1[off].max() == 0.0
    first = np.asarray(res.source[:, len(PROMPT)])
    stats.assert_binomial_rate(int((first == sources.SOURCE_DRAFT).sum()), first.size,
                               float(np.minimum(p1, q1).sum()), f"{method}: first acceptance")


def test_head_ids_round_trip_and_validation(tmp_path):
    target, _ = tiny_pair()
    adapters = draft.init_adapters(target.params, [1], 2, jax.random.key(0))
    draft.save_adapters(tmp_path / "a.npz", [1], {**adapters, "head_ids": KEPT})
    layers, got, _ = draft.load_adapters(tmp_path / "a.npz")
    assert layers == [1] and got["head_ids"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got["head_ids"]), KEPT)
    assert isinstance(draft.make_draft(target, layers, got), draft.DraftCheckpoint)
    for bad in (np.array([0, 16]), np.array([3, 3]), np.array([], np.int32), np.array([-1, 2])):
        with pytest.raises(ValueError, match="head_ids"):
            draft.make_draft(target, [0], {"head_ids": bad})
