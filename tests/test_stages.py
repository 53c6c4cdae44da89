"""Each stage of one loop step (Alg. 1), alone, on the exact toy pair."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax import candidates, decoders, prf, sampling, speculative, stages, toy
from wmspec_jax.candidates import Candidates
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_NONE, SOURCE_RESIDUAL, SOURCE_TARGET

V = 16
P_TAB, Q_TAB = toy.markov_pair(V, 0.3, concentration=1.0, seed=7)
MODEL = toy.markov_model(V)
B, PROMPT_LEN, K = 64, 6, 3


def setup(method, k=K, max_new=10, eos_id=None, temperature=1.0, rows=B, h=2):
    cfg = speculative.SpeculativeConfig(method=method, lookahead=k, max_new_tokens=max_new, eos_id=eos_id,
                                        temperature=temperature, context_width=h)
    st = cfg.static()
    prompts = np.random.default_rng(0).integers(0, V, size=(rows, PROMPT_LEN)).astype(np.int32)
    inputs = stages.Inputs(toy.log_table(P_TAB), toy.log_table(Q_TAB) if k else None,
                           jnp.asarray(prf.stream_keys([f"row{i}" for i in range(rows)])),
                           sampling.row_words(jax.random.key(0), rows), jnp.full((rows,), PROMPT_LEN, jnp.int32))
    state = stages.initial_state(st, MODEL, MODEL if k else None, inputs, jnp.asarray(prompts), 0)
    return st, inputs, state


def test_initial_state_prefills_all_but_the_last_prompt_token():
    st, inputs, state = setup("pseudorandom")
    assert (np.asarray(state.n) == PROMPT_LEN).all()
    assert (np.asarray(state.target_cache["lengths"]) == PROMPT_LEN - 1).all()
    assert (np.asarray(state.draft_cache["lengths"]) == PROMPT_LEN - 1).all()
    assert (np.asarray(state.records.source) == SOURCE_NONE).all()
    assert state.tokens.shape[1] == stages.buffer_length(st, PROMPT_LEN)


@pytest.mark.parametrize("method", ["standard", "pseudorandom"])
def test_draft_writes_k_tokens_from_q(method):
    st, inputs, state = setup(method)
    d = stages.draft(st, MODEL, inputs, state.draft_cache, state.tokens, state.n)
    toks = np.asarray(d.tokens)
    drafted = np.asarray(d.drafted)
    assert np.array_equal(toks[:, PROMPT_LEN:PROMPT_LEN + K], drafted)
    prev = toks[:, PROMPT_LEN - 1:PROMPT_LEN + K - 1]
    np.testing.assert_allclose(np.asarray(d.log_q), np.log(Q_TAB[prev, drafted]), atol=1e-5)
    # the K-th draft is not fed back: the cache holds positions < n + K - 1
    assert (np.asarray(d.cache["lengths"]) == PROMPT_LEN + K - 1).all()
    fresh, wm = np.asarray(d.fresh), np.asarray(d.watermarked)
    if method == "standard":  # no contexts, no watermark
        assert not fresh.any() and not wm.any()
        return
    assert fresh.mean() > 0.9 and np.array_equal(wm, fresh)
    # a watermarked draft is the Gumbel-max choice of the DRAFT stream (rebuildable)
    ctx = prf.gather_contexts(toks, np.tile(np.arange(PROMPT_LEN, PROMPT_LEN + K), (B, 1)), 2)
    seeds = prf.context_seeds(np.asarray(inputs.keys)[:, None, prf.Stream.DRAFT], ctx)
    choice = decoders.gumbel_max_token(jnp.log(Q_TAB[prev].astype(np.float32)), prf.vocab_uniforms(seeds, V))
    assert np.array_equal(np.asarray(choice)[fresh], drafted[fresh])


def test_verify_scores_the_k_plus_one_prefixes():
    st, inputs, state = setup("standard")
    d = stages.draft(st, MODEL, inputs, state.draft_cache, state.tokens, state.n)
    p, cache, nonfinite, _, _ = stages.verify(st, MODEL, inputs, state.target_cache, d.tokens, state.n)
    prev = np.asarray(d.tokens)[:, PROMPT_LEN - 1:PROMPT_LEN + K]
    np.testing.assert_allclose(np.exp(np.asarray(p.logp)), P_TAB[prev], atol=1e-6)
    assert (np.asarray(cache["lengths"]) == PROMPT_LEN - 1 + K + 1).all()
    assert not np.asarray(nonfinite).any()


def dense(probs):
    """Candidates over the whole vocabulary from probabilities."""
    z = jnp.log(jnp.asarray(probs, jnp.float32))
    return Candidates(z, jnp.zeros(z.shape[:-1], jnp.float32), None)


def _drafts(drafted, q_probs, fresh=None):
    drafted = jnp.asarray(drafted, jnp.int32)
    q = dense(q_probs)
    log_q = jnp.take_along_axis(q.logp, drafted[..., None], -1)[..., 0]
    fresh = jnp.zeros(drafted.shape, bool) if fresh is None else jnp.asarray(fresh)
    return stages.Drafts(None, drafted, q, log_q, fresh, fresh, None, None)


def test_accept_counts_leading_acceptances_in_log_space():
    q = np.array([0.5, 0.25, 0.25, 0.0], np.float32)
    p = np.array([0.25, 0.25, 0.25, 0.25], np.float32)
    probs_p = dense(jnp.broadcast_to(jnp.asarray(p), (3, 4, 4)))
    d = _drafts([[0, 1, 2], [1, 0, 2], [1, 2, 0]], np.broadcast_to(q, (3, 3, 4)))
    # ratios: token 0 -> 0.5, tokens 1, 2 -> 1 (always accepted)
    u = jnp.asarray([[0.49, 0.9, 0.9], [0.9, 0.51, 0.1], [0.1, 0.1, 0.2]], jnp.float32)
    j, prob = stages.accept(probs_p, d, u)
    assert np.asarray(j).tolist() == [3, 1, 3]
    np.testing.assert_allclose(np.asarray(prob), [[0.5, 1, 1], [1, 0.5, 1], [1, 1, 0.5]], rtol=1e-6)


def test_acceptance_u_comes_from_the_accept_stream_only_for_alg1():
    st, inputs, state = setup("pseudorandom")
    d = stages.draft(st, MODEL, inputs, state.draft_cache, state.tokens, state.n)
    fresh = np.asarray(d.fresh).copy()
    fresh[:8] = False  # repeated contexts use true randomness
    u = np.asarray(stages.acceptance_uniforms(st, inputs, d.tokens, state.n, jnp.asarray(fresh)))
    positions = np.tile(np.arange(PROMPT_LEN, PROMPT_LEN + K), (B, 1))
    ctx = prf.gather_contexts(np.asarray(d.tokens), positions, 2)
    prf_u = np.asarray(prf.position_uniforms(prf.context_seeds(np.asarray(inputs.keys)[:, None, prf.Stream.ACCEPT], ctx)))
    true_u = np.stack([np.asarray(sampling.true_uniforms(inputs.words, jnp.asarray(positions[:, s]),
                                                         sampling.PURPOSE_ACCEPT)) for s in range(K)], 1)
    assert np.array_equal(u[fresh], prf_u[fresh]) and np.array_equal(u[~fresh], true_u[~fresh])
    st_std, _, _ = setup("standard")
    u_std = np.asarray(stages.acceptance_uniforms(st_std, inputs, d.tokens, state.n, jnp.asarray(fresh)))
    assert np.array_equal(u_std, true_u)


def test_resample_residual_at_rejection_and_bonus_after_k_acceptances():
    st, inputs, state = setup("dathathri", k=2, rows=2)
    p_probs = np.zeros((2, 3, V), np.float32)
    p_probs[:, :, 0] = p_probs[:, :, 1] = 0.5
    p_probs[1, 2] = 0.0
    p_probs[1, 2, 5] = 1.0  # a one-hot bonus distribution
    q_probs = np.zeros((2, 2, V), np.float32)
    q_probs[:, :, 0] = 1.0  # (P - Q)+ is a point mass on token 1
    p = dense(p_probs)
    d = _drafts([[0, 0], [0, 0]], q_probs, fresh=np.ones((2, 2), bool))
    tok, src, wm = stages.resample(st, inputs, p, d, jnp.asarray([0, 2]), state.tokens, state.n)
    assert np.asarray(tok).tolist() == [1, 5]
    assert np.asarray(src).tolist() == [SOURCE_RESIDUAL, SOURCE_TARGET]
    assert not np.asarray(wm).any()  # both distributions are one-hot: no watermark evidence


def test_commit_truncates_at_eos_and_at_the_budget():
    eos = 9
    st, inputs, state = setup("pseudorandom", eos_id=eos, max_new=2, rows=3)
    tokens = np.asarray(state.tokens).copy()
    tokens[:, PROMPT_LEN:PROMPT_LEN + K] = [[1, eos, 2], [1, 2, 3], [4, 5, 6]]
    j = jnp.asarray([2, 3, 0])
    d = _drafts([[1, eos, 2], [1, 2, 3], [4, 5, 6]], np.full((3, K, V), 1 / V), fresh=np.ones((3, K), bool))
    u = jnp.full((3, K), 0.25)
    prob = jnp.full((3, K), 0.5)
    new = stages.commit(st, inputs, state, jnp.asarray(tokens), j, jnp.asarray([7, 8, 11]),
                        jnp.asarray([SOURCE_TARGET, SOURCE_TARGET, SOURCE_RESIDUAL], jnp.int8),
                        jnp.asarray([True, False, True]), d, u, prob)
    emitted = np.asarray(new.n) - PROMPT_LEN
    assert emitted.tolist() == [2, 2, 1]  # EOS at the 2nd token; budget 2; rejection after 0 drafts
    assert np.asarray(new.done).tolist() == [True, True, False]
    src = np.asarray(new.records.source)[:, PROMPT_LEN:PROMPT_LEN + 3]
    assert src.tolist() == [[SOURCE_DRAFT, SOURCE_DRAFT, SOURCE_NONE], [SOURCE_DRAFT, SOURCE_DRAFT, SOURCE_NONE],
                            [SOURCE_RESIDUAL, SOURCE_NONE, SOURCE_NONE]]
    acc_u = np.asarray(new.records.accept_u)[:, PROMPT_LEN:PROMPT_LEN + 3]
    assert acc_u[0, 0] == 0.25 and acc_u[2, 0] == 0.25 and np.isnan(acc_u[2, 1])
    assert np.asarray(new.tokens)[2, PROMPT_LEN] == 11
    assert np.asarray(new.tokens_per_step)[:, 0].tolist() == [2, 2, 1]
    assert np.asarray(new.num_steps).tolist() == [1, 1, 1]


def test_rollback_moves_length_pointers_and_leaves_done_rows_alone():
    st, inputs, state = setup("pseudorandom", rows=3)
    state = state._replace(done=jnp.asarray([False, False, True]))
    target_cache = MODEL.rewind(state.target_cache, jnp.full((3,), PROMPT_LEN + K))  # after verify
    draft_cache = MODEL.rewind(state.draft_cache, jnp.full((3,), PROMPT_LEN + K - 1))  # after drafting
    t, d = stages.rollback(st, MODEL, MODEL, target_cache, draft_cache, state, jnp.asarray([1, K, 0]))
    assert np.asarray(t["lengths"]).tolist() == [PROMPT_LEN + 1, PROMPT_LEN + K, PROMPT_LEN - 1]
    assert np.asarray(d["lengths"]).tolist() == [PROMPT_LEN + 1, PROMPT_LEN + K - 1, PROMPT_LEN - 1]


@pytest.mark.parametrize("method", list(speculative.METHODS))
def test_a_method_hashes_only_the_streams_it_uses(method):
    """Specialised loop: plain and standard never read the watermark keys."""
    k = K if speculative.METHODS[method].speculative else 0
    st, inputs, state = setup(method, k=k, rows=2)

    def one_step(keys):
        return stages.step(st, MODEL, MODEL if k else None, inputs._replace(keys=keys), state).tokens

    jaxpr = jax.make_jaxpr(one_step)(inputs.keys).jaxpr
    keys_var = jaxpr.invars[0]
    used = any(keys_var in eqn.invars for eqn in jaxpr.eqns)
    assert used == speculative.METHODS[method].watermarks, method
