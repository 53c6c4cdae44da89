"""Multi-draft and tree speculative sampling on the exact toy pair: the output law is P, tokens per
step follow recursive rejection sampling exactly, Alg. 1 stays a function of (key, prompt), rows are
batch-invariant, one path is one chain bit for bit, and the records name each draft's stream."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, multidraft, prf, sampling, sources, speculative, theory, toy
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


def exact_tokens_per_step(p_tab, q_tab, last, branching, distinct=False):
    """Law of the tokens emitted by one step from a node after token ``last``: float64[K + 1] over
    1..K + 1, by recursive rejection sampling. Child i is proposed from Q_i (Q itself, or without
    replacement: Q without the earlier children's tokens, renormalised) and accepted with token x with
    probability Q_i(x) min(1, r_i(x) / Q_i(x)); after a rejection r_{i+1} = (r_i - Q_i)+ normalised.
    Enumerates the rejected children's tokens (they shape Q_i without replacement)."""
    k = len(branching)

    @functools.lru_cache(maxsize=None)
    def law(token, depth):
        out = np.zeros(k + 1 - depth)
        if depth == k:
            out[0] = 1.0
            return out

        def children(r, excluded, reach, left):
            if left == 0 or reach == 0.0:
                out[0] += reach
                return
            q = q_tab[token].copy()
            if distinct and excluded:
                q[list(excluded)] = 0.0
                q = q / q.sum() if q.sum() > multidraft.REMAINING_MASS_EPS else q_tab[token]
            take = np.minimum(r, q)
            for x in np.flatnonzero(take > 0):
                out[1:] += reach * take[x] * law(int(x), depth + 1)
            alpha = take.sum()
            if alpha >= 1.0:
                return
            r_next = np.maximum(r - q, 0.0) / (1.0 - alpha)
            if not distinct:
                children(r_next, excluded, reach * (1.0 - alpha), left - 1)
                return
            for x in np.flatnonzero(q > 0):  # the rejected child's token x: Q(x) (1 - min(1, r/Q)(x))
                rejected = q[x] - take[x]
                if rejected > 0:
                    children(r_next, excluded | {int(x)}, reach * rejected, left - 1)

        children(p_tab[token].copy(), frozenset(), 1.0, branching[depth])
        return out

    return law(int(last), 0)


def assert_law(counts, probs, what):
    """Counts match exact probabilities (chi-square); outcomes of probability 0 never occur."""
    probs = np.asarray(probs).ravel()
    assert counts[probs == 0].sum() == 0, f"{what}: outcomes of probability 0 occurred"
    stats.assert_counts_match(counts[probs > 0], probs[probs > 0], what)


LAW_CASES = [  # (method, K, decoder, tree, distinct, temperature, top_k, h, tokens checked)
    ("pseudorandom", 2, GUMBEL, (4, 1), False, 1.0, None, 4, 3),
    ("standard", 2, GUMBEL, (3, 1), False, 1.0, None, 4, 3),
    ("pseudorandom", 2, SYNTH, (2, 2), False, 1.0, None, 4, 3),
    ("pseudorandom", 3, GUMBEL, (3, 2, 1), False, 1.0, None, 4, 3),
    ("pseudorandom", 2, GUMBEL, (3, 1), False, 0.6, 3, 4, 3),
    ("pseudorandom", 2, GUMBEL, (3, 1), False, 1.0, None, 1, 4),  # h = 1: repeated contexts are common
    ("pseudorandom", 2, GUMBEL, (3, 2), True, 1.0, None, 4, 3),  # without replacement
    ("standard", 2, SYNTH, (4, 1), True, 1.0, None, 4, 3),  # 4 siblings of 4 tokens: Q runs out
    ("pseudorandom", 2, SYNTH, (3, 1), True, 0.6, 3, 4, 3),  # top-3 and 3 siblings: the fallback to Q
]


@pytest.mark.parametrize("method,k,decoder,tree,distinct,temperature,top_k,h,length", LAW_CASES,
                         ids=lambda x: getattr(x, "kind", str(x)))
def test_output_law_is_the_target_and_tokens_per_step_are_exact(method, k, decoder, tree, distinct, temperature,
                                                                 top_k, h, length):
    """Over 20k keys: the joint law of the first tokens equals P's (chi-square), and the first step's
    tokens-per-step law equals recursive rejection sampling's, computed from the tables."""
    res = run(method, k, decoder, draft_tree=tree, distinct_drafts=distinct, temperature=temperature, top_k=top_k,
              h=h, max_new=max(length, k + 1))
    p_tab, q_tab = processed(P_TAB, temperature, top_k), processed(Q_TAB, temperature, top_k)
    start = len(PROMPT)
    toks = np.asarray(res.tokens[:, start:start + length])
    index = np.ravel_multi_index(toks.T, (V,) * length)
    label = f"{method}/{decoder.kind}/{tree}/distinct={distinct}/T{temperature}/top{top_k}/h{h}"
    assert_law(np.bincount(index, minlength=V ** length), toy.sequence_probs(p_tab, PROMPT[-1], length), label)
    first = np.asarray(res.tokens_per_step[:, 0])
    assert_law(np.bincount(first, minlength=k + 2)[1:], exact_tokens_per_step(p_tab, q_tab, PROMPT[-1], tree, distinct),
               label + " per step")
    if h == 1:
        assert (~np.asarray(res.watermarked)[:, start:start + length]).mean() > 0.2  # the rule was exercised


def test_more_drafts_emit_more_tokens_per_step():
    """On the toy tables, the exact law of recursive rejection sampling (which the loop matches, above):
    mean tokens per step grows with the number of chains and more with distinct siblings."""
    def mean(tree, distinct=False):
        return float(np.arange(1, len(tree) + 2) @ exact_tokens_per_step(P_TAB, Q_TAB, PROMPT[-1], tree, distinct))

    chains = [mean((d, 1)) for d in (1, 2, 4)]
    assert chains[0] < chains[1] < chains[2]
    assert all(mean((d, 1), True) > mean((d, 1)) for d in (2, 4))
    assert mean((1, 1)) == pytest.approx(float(theory.expected_tokens_per_step(1 - 0.35, 2)), abs=1e-6)


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


@pytest.mark.parametrize("tree", [(3, 2, 1), (2, 2), (4, 1, 1)])
def test_the_verified_tree_holds_each_distinct_prefix_once(tree):
    """Two paths share their node at depth s exactly when their sibling indices agree up to s; a
    node's parent is the node one depth up on its path; the tree has 1 + sum_s b_1 ... b_s nodes."""
    parents, node_of = multidraft.tree_layout(tree)
    r, k = multidraft.num_paths(tree), len(tree)
    assert len(parents) == 1 + sum(int(np.prod(tree[: s + 1])) for s in range(k))
    assert sorted(set(node_of.ravel().tolist())) == list(range(len(parents)))
    siblings = np.stack([multidraft.sibling_index(tree, s) for s in range(k)], axis=1)
    for a in range(r):
        for s in range(1, k + 1):
            assert parents[node_of[a, s]] == node_of[a, s - 1]
            for b in range(r):
                assert (node_of[a, s] == node_of[b, s]) == np.array_equal(siblings[a, :s], siblings[b, :s])


def test_a_target_without_tree_attention_is_refused():
    no_tree = dataclasses.replace(MODEL, step_tree=None)
    with pytest.raises(ValueError, match="step_tree"):
        speculative.generate(no_tree, TARGET, PROMPT[None], np.array([4]), prf.stream_keys([0]), jax.random.key(0),
                             SpeculativeConfig(lookahead=2, num_drafts=2), draft=MODEL, draft_params=DRAFT)


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
    """V = 64 (contexts rarely repeat): Alg. 1 on a (3, 2) tree gives the same tokens under another true-random
    key, standard multi-draft sampling does not; a row of a batch equals the row generated alone."""
    model, tp, dp, _ = _pair(64, 5)
    prompts = np.tile(np.arange(6), (120, 1)) + np.arange(120)[:, None] % 7
    keys = prf.stream_keys(list(range(120)))

    def go(method, seed, rows=slice(None)):
        cfg = SpeculativeConfig(method=method, lookahead=2, max_new_tokens=10, draft_tree=(3, 2))
        rng = jax.random.split(jax.random.key(seed), 120)[rows]
        return speculative.generate(model, tp, prompts[rows], np.full(len(prompts[rows]), 6), keys[rows], rng, cfg,
                                    draft=model, draft_params=dp)

    a, b = go("pseudorandom", 0), go("pseudorandom", 1)
    fresh = np.asarray(a.watermarked).any(axis=1) & np.asarray(b.watermarked).any(axis=1)
    assert fresh.mean() > 0.9
    same = np.all(np.asarray(a.tokens) == np.asarray(b.tokens), axis=1)
    watermarked_rows = np.asarray(a.watermarked)[:, 6:16].all(axis=1) & np.asarray(b.watermarked)[:, 6:16].all(axis=1)
    assert watermarked_rows.sum() > 60 and same[watermarked_rows].all()
    s0, s1 = go("standard", 0), go("standard", 1)
    assert not np.all(np.asarray(s0.tokens) == np.asarray(s1.tokens), axis=1).all()
    alone = [go("pseudorandom", 0, slice(i, i + 1)) for i in (0, 119)]
    for i, one in zip((0, 119), alone):
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
    draft_at = (source == sources.SOURCE_DRAFT) & marked
    assert draft_at.sum() > 500 and (cand[draft_at] > 0).sum() > 100
    assert (cand[source != sources.SOURCE_DRAFT] == 0).all() and cand.max() <= 2
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


def feature_draft_probs(drafted, seq, feats):
    """float64[T, V]: a feature draft's law after each prefix of seq when every position reads the
    target's feature of the position before it (``test_feature_draft.draft_q`` with own=False, for
    all positions in one forward)."""
    lm = drafted.language_model()
    prev = jax.numpy.pad(feats[:-1], ((1, 0), (0, 0)))[None]
    logits, _, _ = jax.jit(lm.step)(drafted.params, lm.init_cache(1, len(seq)), jax.numpy.asarray(seq)[None],
                                    np.array([len(seq)]), prev)
    x = np.asarray(logits[0], np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def next_token_probs(lm, params, tokens, lengths, with_hidden=False):
    """float64[B, T, V]: the model's next-token law after each prefix of each row (ragged rows, one
    jitted forward); with_hidden: also its final hidden states float32[B, T, D]."""
    def forward(p, t, n):
        cache = lm.init_cache(t.shape[0], t.shape[1])
        return lm.step_hidden(p, cache, t, n)[:2] if with_hidden else (lm.step(p, cache, t, n)[0], None)
    logits, hidden = jax.jit(forward)(params, jax.numpy.asarray(tokens, jax.numpy.int32), jax.numpy.asarray(lengths))
    x = np.asarray(logits, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    probs = e / e.sum(-1, keepdims=True)
    return (probs, hidden) if with_hidden else probs


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
    cfg = SpeculativeConfig(method="standard", lookahead=2, max_new_tokens=16, draft_tree=(2, 2))
    res = speculative.generate(target.language_model(), target.params, prompts, lengths,
                               prf.stream_keys([0, 1, 2]), jax.random.key(5), cfg, draft=draft_lm,
                               draft_params=draft_params)
    checked = 0
    texts, ends = np.asarray(res.tokens), np.asarray(res.lengths)
    p_rows, hidden = next_token_probs(target.language_model(), target.params, texts, ends, with_hidden=True)
    if kind == "draft":
        q_rows = next_token_probs(draft_lm, draft_params, texts, ends)
    for row in range(3):
        seq = texts[row, :ends[row]]
        p_all, feats = p_rows[row], hidden[row, :ends[row]]
        q_all = q_rows[row] if kind == "draft" else None
        start = int(lengths[row])
        logp = np.asarray(res.target_logprob[row, start:len(seq)])
        np.testing.assert_allclose(logp, np.log(p_all[np.arange(start - 1, len(seq) - 1), seq[start:]]), atol=2e-4)
        step_starts = start + np.concatenate([[0], np.cumsum(np.asarray(res.tokens_per_step[row]))[:-1]])
        for t in step_starts[step_starts < len(seq)]:
            if res.source[row, t] != sources.SOURCE_DRAFT or res.candidate[row, t] != 0:
                continue
            if q_all is None:  # the feature draft at the step's first position reads the target's features
                q_all = feature_draft_probs(drafted, seq, feats)
            q = q_all[t - 1]
            x = seq[t]
            expected = min(1.0, p_all[t - 1, x] / q[x])
            np.testing.assert_allclose(float(res.accept_prob[row, t]), expected, rtol=2e-3, err_msg=f"row {row} t {t}")
            checked += 1
    assert checked >= 5


def test_detection_over_sibling_streams_is_exact_and_the_oracle_loses_nothing():
    """V = 64 pair, Alg. 1 at K = 2, 1,500 texts of 4 tokens, one chain vs 3 chains. Key-only statistics
    ((max over the 3 sibling streams)^3) are U(0, 1) under another key, so the FPR at 1 % stays in its
    band; the Oracle reading the candidate record keeps one chain's TPR; without the record (sibling 0's
    stream only) it loses power, and so does the key-only Ars-τ."""
    from wmspec_jax.detect import gumbel, streams

    v, n = 64, 1500
    model, tp, dp, _ = _pair(v, 5)
    prompts = np.random.default_rng(0).integers(0, v, size=(n, 6))
    keys = prf.stream_keys([f"k{i}" for i in range(n)])
    other = prf.stream_keys([f"o{i}" for i in range(n)])
    tpr = lambda scores: float((np.asarray(scores.pvalue) < 0.01).mean())  # noqa: E731
    rates = {}
    for label, kw, siblings in (("chain", {}, 1), ("3 chains", dict(num_drafts=3), 3)):
        cfg = SpeculativeConfig(method="pseudorandom", lookahead=2, max_new_tokens=4, **kw)
        res = speculative.generate(model, tp, prompts, np.full(n, 6), keys, jax.random.key(0), cfg, draft=model,
                                   draft_params=dp)
        texts = dict(vocab_size=v, lengths=np.asarray(res.lengths), starts=np.full(n, 6))
        toks, src = np.asarray(res.tokens), np.asarray(res.source)
        key_only = streams.gumbel_statistics(toks, keys, siblings=siblings, **texts)
        null = streams.gumbel_statistics(toks, other, siblings=siblings, **texts)
        records = streams.records_from_generation(res)
        np.testing.assert_array_equal(records.candidate, np.asarray(res.candidate))
        oracle = streams.gumbel_statistics(toks, keys, siblings=siblings, candidate=records.candidate, **texts)
        stats.assert_uniform(np.asarray(null.y_draft)[np.asarray(null.mask)], f"{label}: null y^D")
        false_positives = int((np.asarray(gumbel.score_ars_tau(null, 0.5).pvalue) < 0.01).sum())
        stats.assert_binomial_rate(false_positives, n, 0.01, f"{label}: FPR")
        rates[label] = dict(oracle=tpr(gumbel.score_oracle(oracle, src)), ars=tpr(gumbel.score_ars_tau(key_only, 0.5)),
                            sibling0=tpr(gumbel.score_oracle(streams.gumbel_statistics(toks, keys, **texts), src)))
    chain, multi = rates["chain"], rates["3 chains"]
    sd = np.sqrt(2 * max(chain["oracle"] * (1 - chain["oracle"]), 1 / n) / n)
    assert multi["oracle"] >= chain["oracle"] - 4.5 * sd, rates
    assert multi["sibling0"] < multi["oracle"] - 0.01 and multi["ars"] < chain["ars"] - 0.03, rates  # > 5 sd margins
    with pytest.raises(ValueError, match="candidate records must lie"):
        streams.gumbel_statistics(toks, keys, siblings=2, candidate=np.full(toks.shape, 2), **texts)


def test_synthid_records_give_each_draft_token_its_own_stream():
    """SynthID (m = 8), Alg. 1 with 3 chains, V = 64: the accepted drafts of siblings c > 0 carry the
    watermark in their own stream (mean g-value well above 1/2) and none in sibling 0's; the candidate
    record gives each token its own stream, the search over the siblings finds it from tokens and key
    alone, and under another key those g-values are fair coins."""
    from wmspec_jax.detect import streams

    v, n, m = 64, 600, 8
    model, tp, dp, _ = _pair(v, 5)
    prompts = np.random.default_rng(1).integers(0, v, size=(n, 6))
    keys = prf.stream_keys([f"k{i}" for i in range(n)])
    cfg = SpeculativeConfig(method="pseudorandom", decoder=decoders.WatermarkDecoder("synthid", m), lookahead=2,
                            max_new_tokens=4, num_drafts=3)
    res = speculative.generate(model, tp, prompts, np.full(n, 6), keys, jax.random.key(0), cfg, draft=model,
                               draft_params=dp)
    toks, cand = np.asarray(res.tokens), np.asarray(res.candidate)
    texts = dict(vocab_size=v, lengths=np.asarray(res.lengths), starts=np.full(n, 6))
    own = streams.synthid_statistics(toks, keys, m, siblings=3, candidate=cand, **texts)
    sibling0 = streams.synthid_statistics(toks, keys, m, **texts)
    null = streams.synthid_statistics(toks, prf.stream_keys([f"o{i}" for i in range(n)]), m, siblings=3, candidate=cand,
                                      **texts)
    picked = np.asarray(own.mask) & (np.asarray(res.source) == sources.SOURCE_DRAFT) & (cand > 0)
    assert picked.sum() >= 100
    g_own, g_zero, g_null = (np.asarray(s.g_draft)[picked] for s in (own, sibling0, null))
    sd = np.sqrt(0.25 / g_own.size)
    assert g_own.mean() > 0.5 + 8 * sd, g_own.mean()
    stats.assert_binomial_rate(int(g_zero.sum()), g_zero.size, 0.5, "sibling 0's stream of other siblings' tokens")
    stats.assert_binomial_rate(int(g_null.sum()), g_null.size, 0.5, "another key")
    # tokens of sibling 0 and of the target keep their one-chain statistics
    np.testing.assert_array_equal(np.asarray(own.g_draft)[cand == 0], np.asarray(sibling0.g_draft)[cand == 0])
    np.testing.assert_array_equal(np.asarray(own.g_target), np.asarray(sibling0.g_target))
    # without the records: the search over the 3 sibling streams finds the watermark of siblings c > 0
    # (about 0.59 here, 9 sd above 1/2), and under another key its g-values are fair coins
    searched = streams.synthid_statistics(toks, keys, m, siblings=3, **texts)
    assert searched.provenance.siblings == 3 and np.asarray(searched.g_draft)[picked].mean() > 0.5 + 5 * sd
    other = streams.synthid_statistics(toks, prf.stream_keys([f"o{i}" for i in range(n)]), m, siblings=3, **texts)
    g_other = np.asarray(other.g_draft)[np.asarray(other.mask)]
    stats.assert_binomial_rate(int(g_other.sum()), g_other.size, 0.5, "the search under another key")


# A generic pair: dense, unrelated draft and target rows. On toy.markov_pair the draft only moves mass onto
# the target's top token, and there a walk that tests later siblings against P instead of the residual, or
# never updates the residual, also emits P exactly; here such walks are off by 0.07-0.15 in total variation.
GENERIC_P, GENERIC_Q = (np.random.default_rng(seed).dirichlet(np.ones(V), size=V) for seed in (7, 8))
GENERIC_CASES = [  # (method, decoder, tree, distinct, top_k)
    ("pseudorandom", GUMBEL, (2, 1), False, None),
    ("pseudorandom", GUMBEL, (3, 1), False, None),  # 3 chains
    ("standard", SYNTH, (2, 2), True, None),  # siblings without replacement
    ("pseudorandom", GUMBEL, (3, 1), True, 3),  # top-3 and 3 distinct siblings
]


@pytest.mark.parametrize("method,decoder,tree,distinct,top_k", GENERIC_CASES, ids=lambda x: getattr(x, "kind", str(x)))
def test_the_walk_keeps_the_law_on_a_generic_pair(method, decoder, tree, distinct, top_k):
    """Over 20k keys on the generic pair: the first three tokens' joint law is P's and the first step's
    tokens-per-step law is recursive rejection sampling's (each sibling tested against the residual
    of the rejections before it, Q without the earlier siblings' tokens when they are distinct)."""
    cfg = SpeculativeConfig(method=method, decoder=decoder, lookahead=2, max_new_tokens=3, draft_tree=tree,
                            distinct_drafts=distinct, top_k=top_k)
    res = speculative.generate(MODEL, toy.log_table(GENERIC_P), np.broadcast_to(PROMPT, (N_KEYS, 4)),
                               np.full(N_KEYS, 4), prf.stream_keys(list(range(N_KEYS))), jax.random.key(5), cfg,
                               draft=MODEL, draft_params=toy.log_table(GENERIC_Q))
    p_tab, q_tab = processed(GENERIC_P, 1.0, top_k), processed(GENERIC_Q, 1.0, top_k)
    toks = np.asarray(res.tokens[:, 4:7])
    label = f"generic/{method}/{decoder.kind}/{tree}/distinct={distinct}/top{top_k}"
    assert_law(np.bincount(np.ravel_multi_index(toks.T, (V,) * 3), minlength=V ** 3),
               toy.sequence_probs(p_tab, PROMPT[-1], 3), label)
    first = np.asarray(res.tokens_per_step[:, 0])
    assert_law(np.bincount(first, minlength=4)[1:], exact_tokens_per_step(p_tab, q_tab, PROMPT[-1], tree, distinct),
               label + " per step")
