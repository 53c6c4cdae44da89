"""Multi-draft and tree speculative sampling on the exact toy pair: the output law is P, tokens per
step follow recursive rejection sampling exactly, Alg. 1 stays a function of (key, prompt), rows are
batch-invariant, one path is one chain bit for bit, and the records name each draft's stream."""

import functools

import jax
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, multidraft, prf, sampling, speculative, toy
from wmspec_jax.speculative import SpeculativeConfig

GUMBEL = decoders.WatermarkDecoder("gumbel")
SYNTH = decoders.WatermarkDecoder("synthid", 4)
V = 4
P_TAB, Q_TAB = toy.markov_pair(V, 0.35, concentration=2.0, seed=3)
MODEL = toy.markov_model(V)
TARGET, DRAFT = toy.log_table(P_TAB), toy.log_table(Q_TAB)
PROMPT = np.array([0, 1, 2, 3])
N_KEYS = 20_000


def run(method, k, decoder=GUMBEL, n=N_KEYS, max_new=3, h=4, prompts=None, keys=None, rng=None, **kw):
    cfg = SpeculativeConfig(method=method, decoder=decoder, lookahead=k, max_new_tokens=max_new, context_width=h,
                            **kw)
    prompts = np.broadcast_to(PROMPT, (n, len(PROMPT))) if prompts is None else prompts
    keys = prf.stream_keys(list(range(n))) if keys is None else keys
    rng = jax.random.key(0) if rng is None else rng
    return speculative.generate(MODEL, TARGET, prompts, np.full(len(prompts), prompts.shape[1]), keys, rng, cfg,
                                draft=MODEL, draft_params=DRAFT)


def processed(table, temperature, top_k):
    """The rows after temperature and top-k (ties to lower ids), as the loop processes them."""
    out = table ** (1.0 / temperature)
    if top_k:
        for row in out:
            row[np.argsort(-row, kind="stable")[top_k:]] = 0.0
    return out / out.sum(axis=1, keepdims=True)


def exact_tokens_per_step(p_tab, q_tab, last, branching):
    """Law of the tokens emitted by one step from a node after token ``last``: float64[K + 1] over
    1..K + 1. Recursive rejection sampling with b i.i.d. children: child i is reached with probability
    prod_{l<i} (1 - a_l), a_l = sum min(r_l, Q), and accepted with token x with probability
    min(r_i(x), Q(x)); r_{i+1} = (r_i - Q)+ / (1 - a_i)."""
    k = len(branching)

    @functools.lru_cache(maxsize=None)
    def law(token, depth):
        out = np.zeros(k + 1 - depth)
        if depth == k:
            out[0] = 1.0
            return out
        r, q, reach = p_tab[token].copy(), q_tab[token], 1.0
        for _ in range(branching[depth]):
            take = np.minimum(r, q)
            for x in np.flatnonzero(take > 0):
                out[1:] += reach * take[x] * law(int(x), depth + 1)
            alpha = take.sum()
            reach *= 1.0 - alpha
            if alpha < 1.0:
                r = np.maximum(r - q, 0.0) / (1.0 - alpha)
        out[0] += reach
        return out

    return law(int(last), 0)


def assert_law(counts, probs, what):
    """Counts match exact probabilities (chi-square); outcomes of probability 0 never occur."""
    probs = np.asarray(probs).ravel()
    assert counts[probs == 0].sum() == 0, f"{what}: outcomes of probability 0 occurred"
    stats.assert_counts_match(counts[probs > 0], probs[probs > 0], what)


@functools.lru_cache(maxsize=None)
def shared_run(method, k, decoder, tree, temperature=1.0, top_k=None, h=4, max_new=3):
    return run(method, k, decoder, draft_tree=tree, temperature=temperature, top_k=top_k, h=h, max_new=max_new)


LAW_CASES = [  # (method, K, decoder, tree, temperature, top_k, h, tokens checked)
    ("pseudorandom", 2, GUMBEL, (2, 1), 1.0, None, 4, 3),
    ("pseudorandom", 2, GUMBEL, (4, 1), 1.0, None, 4, 3),
    ("standard", 2, GUMBEL, (3, 1), 1.0, None, 4, 3),
    ("pseudorandom", 2, SYNTH, (2, 2), 1.0, None, 4, 3),
    ("standard", 2, SYNTH, (2, 2), 1.0, None, 4, 3),
    ("pseudorandom", 3, GUMBEL, (3, 2, 1), 1.0, None, 4, 3),
    ("pseudorandom", 2, GUMBEL, (3, 1), 0.6, 3, 4, 3),
    ("pseudorandom", 2, SYNTH, (2, 2), 0.6, 3, 4, 3),
    ("pseudorandom", 2, GUMBEL, (3, 1), 1.0, None, 1, 4),  # h = 1: repeated contexts are common
]


@pytest.mark.parametrize("method,k,decoder,tree,temperature,top_k,h,length", LAW_CASES,
                         ids=lambda x: getattr(x, "kind", str(x)))
def test_output_law_is_the_target_and_tokens_per_step_are_exact(method, k, decoder, tree, temperature, top_k, h,
                                                                 length):
    """Over 20k keys: the joint law of the first tokens equals P's (chi-square), and the first step's
    tokens-per-step law equals recursive rejection sampling's, computed from the tables."""
    res = shared_run(method, k, decoder, tree, temperature, top_k, h, max(length, k + 1))
    p_tab, q_tab = processed(P_TAB, temperature, top_k), processed(Q_TAB, temperature, top_k)
    start = len(PROMPT)
    toks = np.asarray(res.tokens[:, start:start + length])
    index = np.ravel_multi_index(toks.T, (V,) * length)
    label = f"{method}/{decoder.kind}/{tree}/T{temperature}/top{top_k}/h{h}"
    assert_law(np.bincount(index, minlength=V ** length), toy.sequence_probs(p_tab, PROMPT[-1], length), label)
    first = np.asarray(res.tokens_per_step[:, 0])
    assert_law(np.bincount(first, minlength=k + 2)[1:], exact_tokens_per_step(p_tab, q_tab, PROMPT[-1], tree),
               label + " per step")
    if h == 1:
        assert (~np.asarray(res.watermarked)[:, start:start + length]).mean() > 0.2  # the rule was exercised


def test_more_drafts_emit_more_tokens_per_step():
    """The exact law says so, and the loop agrees: n = 1, 2, 4 chains at K = 2."""
    means = [float(np.asarray(run("pseudorandom", 2, n=4000, num_drafts=d).tokens_per_step[:, 0]).mean())
             for d in (1, 2, 4)]
    exact = [float(np.arange(1, 4) @ exact_tokens_per_step(P_TAB, Q_TAB, PROMPT[-1], (d, 1))) for d in (1, 2, 4)]
    assert exact[0] < exact[1] < exact[2]
    np.testing.assert_allclose(means, exact, atol=0.06)  # 4000 steps: sd of a mean <= 0.013


@pytest.mark.parametrize("method,decoder,top_k", [("pseudorandom", GUMBEL, None), ("standard", SYNTH, 2),
                                                  ("dathathri", GUMBEL, None)])
def test_one_path_is_one_chain_bit_for_bit(method, decoder, top_k):
    """The tree loop with branching (1, 1, 1) gives every record of the chain loop."""
    cfg = SpeculativeConfig(method=method, decoder=decoder, lookahead=3, max_new_tokens=8, top_k=top_k)
    as_tree = SpeculativeConfig(method=method, decoder=decoder, lookahead=3, max_new_tokens=8, top_k=top_k)
    object.__setattr__(as_tree, "draft_tree", (1, 1, 1))  # bypasses the normalisation to None
    assert as_tree.static().tree == (1, 1, 1) and cfg.static().tree is None
    prompts = np.random.default_rng(0).integers(0, V, size=(300, 4))
    keys = prf.stream_keys(list(range(300)))
    chain, tree = (speculative.generate(MODEL, TARGET, prompts, np.full(300, 4), keys, jax.random.key(1), c,
                                        draft=MODEL, draft_params=DRAFT) for c in (cfg, as_tree))
    for field in chain._fields:
        np.testing.assert_array_equal(np.asarray(getattr(chain, field)), np.asarray(getattr(tree, field)),
                                      err_msg=field)


def test_num_drafts_is_a_tree_and_one_draft_is_the_chain():
    cfg = SpeculativeConfig(method="pseudorandom", lookahead=3, num_drafts=3)
    assert cfg.draft_tree == (3, 1, 1) and cfg.num_drafts == 1 and cfg.static().tree == (3, 1, 1)
    assert SpeculativeConfig(lookahead=2, num_drafts=1).draft_tree is None
    assert SpeculativeConfig(lookahead=2, draft_tree=(1, 1)).draft_tree is None
    assert SpeculativeConfig(lookahead=2, draft_tree=[2, np.int64(2)]).draft_tree == (2, 2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(method="plain", lookahead=0, num_drafts=2), "does not speculate"),
    (dict(lookahead=2, num_drafts=2, draft_tree=(2, 1)), "not both"),
    (dict(lookahead=3, draft_tree=(2, 2)), "has 2 depths"),
    (dict(lookahead=2, draft_tree=(0, 2)), ">= 1 child"),
    (dict(lookahead=2, draft_tree=(16, 8)), "at most 64"),
    (dict(lookahead=2, num_drafts=0), "num_drafts must be an int >= 1"),
    (dict(lookahead=2, num_drafts=2, decoder=decoders.WatermarkDecoder("kgw")), "biased decoder"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        SpeculativeConfig(**kwargs)


def _pair(v, seed):
    p, q = toy.markov_pair(v, 0.3, seed=seed)
    return toy.markov_model(v), toy.log_table(p), toy.log_table(q), q


def test_alg1_multidraft_is_a_function_of_key_and_prompt_and_rows_are_batch_invariant():
    """V = 64 (contexts rarely repeat): Alg. 1 on a tree gives the same tokens under another true-random
    key, standard multi-draft sampling does not; a row of a batch equals the row generated alone."""
    model, tp, dp, _ = _pair(64, 5)
    prompts = np.tile(np.arange(6), (200, 1)) + np.arange(200)[:, None] % 7
    keys = prf.stream_keys(list(range(200)))

    def go(method, seed, rows=slice(None)):
        cfg = SpeculativeConfig(method=method, lookahead=3, max_new_tokens=12, draft_tree=(3, 2, 1))
        rng = jax.random.split(jax.random.key(seed), 200)[rows]
        return speculative.generate(model, tp, prompts[rows], np.full(len(prompts[rows]), 6), keys[rows], rng, cfg,
                                    draft=model, draft_params=dp)

    a, b = go("pseudorandom", 0), go("pseudorandom", 1)
    fresh = np.asarray(a.watermarked).any(axis=1) & np.asarray(b.watermarked).any(axis=1)
    assert fresh.mean() > 0.9
    same = np.all(np.asarray(a.tokens) == np.asarray(b.tokens), axis=1)
    watermarked_rows = np.asarray(a.watermarked)[:, 6:18].all(axis=1) & np.asarray(b.watermarked)[:, 6:18].all(axis=1)
    assert watermarked_rows.sum() > 100 and same[watermarked_rows].all()
    s0, s1 = go("standard", 0), go("standard", 1)
    assert not np.all(np.asarray(s0.tokens) == np.asarray(s1.tokens), axis=1).all()
    alone = [go("pseudorandom", 0, slice(i, i + 1)) for i in (0, 57, 199)]
    for i, one in zip((0, 57, 199), alone):
        for field in ("tokens", "source", "candidate", "accept_u", "tokens_per_step"):
            np.testing.assert_array_equal(np.asarray(getattr(one, field))[0], np.asarray(getattr(a, field))[i],
                                          err_msg=f"row {i} {field}")


def test_each_draft_token_is_the_gumbel_max_draw_of_its_sibling_stream():
    """The candidate record names the stream: a draft token at a new context is argmax_w log U_w / Q(w)
    with U from ζ^D re-keyed by its sibling index, and only siblings < b_s occur at depth s."""
    model, tp, dp, q_tab = _pair(64, 7)
    n, h = 300, 4
    cfg = SpeculativeConfig(method="pseudorandom", lookahead=2, max_new_tokens=10, draft_tree=(3, 2), context_width=h)
    prompts = np.tile(np.arange(5), (n, 1)) + np.arange(n)[:, None] % 11
    keys = prf.stream_keys(list(range(n)))
    res = speculative.generate(model, tp, prompts, np.full(n, 5), keys, jax.random.key(0), cfg, draft=model,
                               draft_params=dp)
    tokens, source = np.asarray(res.tokens), np.asarray(res.source)
    cand, marked = np.asarray(res.candidate), np.asarray(res.watermarked)
    draft_at = (source == speculative.SOURCE_DRAFT) & marked
    assert draft_at.sum() > 500 and (cand[draft_at] > 0).sum() > 100
    assert (cand[source != speculative.SOURCE_DRAFT] == 0).all() and cand.max() <= 2
    rows, cols = np.nonzero(draft_at)
    contexts = np.stack([tokens[rows, cols - h + i] for i in range(h)], axis=1)
    seeds = prf.candidate_seeds(prf.context_seeds(np.asarray(keys)[rows, prf.Stream.DRAFT], contexts), cand[rows, cols])
    q = q_tab[tokens[rows, cols - 1]]
    expected = np.asarray(sampling.watermarked_token(GUMBEL, q, seeds))
    np.testing.assert_array_equal(tokens[rows, cols], expected)


def test_sibling_streams_are_independent_uniforms():
    """Re-keyed seeds of siblings 1, 2 give uniforms independent of sibling 0's (and each other's)."""
    seeds = prf.context_seeds(prf.stream_keys("k")[prf.Stream.ACCEPT], np.arange(40_000)[:, None])
    u = [np.asarray(prf.position_uniforms(prf.candidate_seeds(seeds, np.full(40_000, c)))) for c in range(3)]
    np.testing.assert_array_equal(u[0], np.asarray(prf.position_uniforms(seeds)))
    for a, b in ((0, 1), (0, 2), (1, 2)):
        stats.assert_independent_uniforms(u[a], u[b], f"siblings {a}, {b}")
    assert multidraft.sibling_index((3, 2), 0).tolist() == [0, 0, 1, 1, 2, 2]
    assert multidraft.parent_path((3, 2), 1).tolist() == [0, 0, 2, 2, 4, 4]


def next_token_probs(lm, params, seq):
    """float64[T, V]: the model's next-token law after each prefix of seq, in one forward."""
    logits, _ = lm.step(params, lm.init_cache(1, len(seq)), jax.numpy.asarray(seq)[None], np.array([len(seq)]))
    x = np.asarray(logits[0], np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("kind", ["draft", "feature_draft"])
def test_transformer_caches_keep_the_accepted_path(kind):
    """Tiny random Llama target with a token draft or a feature draft, tree (2, 2), ragged rows: every
    target_logprob record equals a one-pass forward over the final text (the target's cache held the
    accepted path), and at each step's first position whose sibling-0 draft was accepted the recorded
    min(1, P/Q) equals the teacher-forced one (so did the draft's cache and the feature buffer)."""
    from tests.models import test_draft_reduced_head as reduced, test_feature_draft as feature

    if kind == "draft":
        target, drafted = reduced.tiny_pair()
        draft_lm, draft_params = drafted.language_model(), drafted.params
    else:
        target, drafted = feature.tiny_pair()
        draft_lm, draft_params = drafted.language_model(), drafted.params
    prompts = np.array([[1, 4, 9, 6, 12, 3], [2, 5, 0, 0, 0, 0], [7, 7, 1, 8, 0, 0]], np.int32)
    lengths = np.array([6, 2, 4])
    cfg = SpeculativeConfig(method="standard", lookahead=2, max_new_tokens=24, draft_tree=(2, 2))
    res = speculative.generate(target.language_model(), target.params, prompts, lengths,
                               prf.stream_keys([0, 1, 2]), jax.random.key(5), cfg, draft=draft_lm,
                               draft_params=draft_params)
    checked = 0
    for row in range(3):
        seq = np.asarray(res.tokens[row, :int(res.lengths[row])])
        p_all, feats = feature.target_pass(seq) if kind == "feature_draft" else (
            next_token_probs(target.language_model(), target.params, seq), None)
        start = int(lengths[row])
        logp = np.asarray(res.target_logprob[row, start:len(seq)])
        np.testing.assert_allclose(logp, np.log(p_all[np.arange(start - 1, len(seq) - 1), seq[start:]]), atol=2e-4)
        step_starts = start + np.concatenate([[0], np.cumsum(np.asarray(res.tokens_per_step[row]))[:-1]])
        for t in step_starts[step_starts < len(seq)]:
            if res.source[row, t] != speculative.SOURCE_DRAFT or res.candidate[row, t] != 0:
                continue
            if kind == "feature_draft":
                q = feature.draft_q(seq, feats, t, own=False)
            else:
                q = next_token_probs(draft_lm, draft_params, seq)[t - 1]
            x = seq[t]
            expected = min(1.0, p_all[t - 1, x] / q[x])
            np.testing.assert_allclose(float(res.accept_prob[row, t]), expected, rtol=2e-3, err_msg=f"row {row} t {t}")
            checked += 1
    assert checked >= 5
