"""The ``coupled`` method over draft trees (MPFR) on the exact toy pair: its texts are the basic
watermark's token for token, its law is P, and a node with b children accepts with the race's
first-b-arrivals probability."""

import jax
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, prf, sources, speculative, theory, toy
from wmspec_jax.speculative import SpeculativeConfig

GUMBEL = decoders.WatermarkDecoder("gumbel")
SYNTH = decoders.WatermarkDecoder("synthid", 4)
V = 4
P_TAB, Q_TAB = toy.markov_pair(V, 0.35, concentration=2.0, seed=3)
MODEL = toy.markov_model(V)
PROMPT = np.array([0, 1, 2, 3])


def run(method, k, decoder, n, max_new, keys, q_tab=Q_TAB, prompt=PROMPT, h=2, **kw):
    cfg = SpeculativeConfig(method=method, decoder=decoder, lookahead=k, max_new_tokens=max_new, context_width=h,
                            **kw)
    return speculative.generate(MODEL, toy.log_table(P_TAB), np.broadcast_to(prompt, (n, len(prompt))),
                                np.full(n, len(prompt)), keys, jax.random.key(0), cfg, draft=MODEL,
                                draft_params=toy.log_table(q_tab))


def window(res, count):
    p = int(res.prompt_lengths[0])
    return slice(p, p + count)


@pytest.mark.parametrize("decoder,top_k,shape", [(GUMBEL, None, {"num_drafts": 2}),
                                                 (SYNTH, None, {"draft_tree": (2, 2, 1)}),
                                                 (GUMBEL, 3, {"draft_tree": (3, 1, 1)})],
                         ids=["gumbel-2-chains", "synthid-2x2x1", "gumbel-top3-3x1x1"])
def test_a_coupled_tree_writes_the_basic_watermarks_text_in_fewer_steps(decoder, top_k, shape):
    """Every emitted token is the target's draw with ζ^T at its context, so with the same keys and true
    randomness the texts are the basic watermark's token for token (hence law P and the basic
    watermark's detection), every record says ``target``, and the siblings make steps longer than one
    coupled chain's: 2,000 keys, 8 tokens each."""
    n, new = 2000, 8
    keys = prf.stream_keys([f"race-{i}" for i in range(n)])
    basic = run("basic", 0, decoder, n, new, keys, top_k=top_k)
    chain = run("coupled", 3, decoder, n, new, keys, top_k=top_k)
    tree = run("coupled", 3, decoder, n, new, keys, top_k=top_k, **shape)
    w = window(basic, new)
    np.testing.assert_array_equal(np.asarray(tree.tokens)[:, w], np.asarray(basic.tokens)[:, w])
    np.testing.assert_array_equal(np.asarray(tree.watermarked)[:, w], np.asarray(basic.watermarked)[:, w])
    assert (np.asarray(tree.source)[:, w] == sources.SOURCE_TARGET).all()
    assert (np.asarray(tree.candidate)[:, w] == 0).all()
    assert np.isnan(np.asarray(tree.accept_u)[:, w]).all()
    # a node's first sibling is the chain's draft, so a tree step emits at least what the chain's does
    assert np.asarray(tree.num_steps).mean() < np.asarray(chain.num_steps).mean() - 0.1


@pytest.mark.parametrize("decoder", [GUMBEL, SYNTH], ids=["gumbel", "synthid"])
def test_the_law_of_a_coupled_tree_is_the_target(decoder):
    """Joint law of the first 3 tokens over 20k keys with two coupled chains (B = 2, K = 2) = P's
    (chi-square over 64 cells)."""
    n = 20_000
    res = run("coupled", 2, decoder, n, 3, prf.stream_keys(list(range(n))), h=4, num_drafts=2)
    toks = np.asarray(res.tokens)[:, window(res, 3)]
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V ** 3)
    stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), f"coupled B=2/{decoder.kind}")


def test_b_siblings_accept_with_the_race_first_arrivals_probability():
    """With B = 2 Gumbel-max siblings at the root (K = 1), the first step emits two tokens with
    probability P(the target's winner is among the draft race's first two arrivals)
    (:func:`wmspec_jax.theory.gumbel_race_top_b_acceptance`: 0.737 on this context, against 0.502 for
    one chain): 10k keys, binomial test; one chain's rate is 53 standard errors away."""
    q_tab = np.random.default_rng(11).dirichlet(np.full(V, 2.0), size=V)
    prompt = np.array([1, 2, 3, 0])
    alpha = theory.gumbel_race_top_b_acceptance(q_tab[0], P_TAB[0], 2)
    one_chain = theory.gumbel_race_top_b_acceptance(q_tab[0], P_TAB[0], 1)
    assert alpha - one_chain > 0.2
    n = 10_000
    res = run("coupled", 1, GUMBEL, n, 2, prf.stream_keys(list(range(n))), q_tab=q_tab, prompt=prompt, h=4,
              num_drafts=2)
    first_accepted = np.asarray(res.tokens_per_step[:, 0]) >= 2
    stats.assert_binomial_rate(int(first_accepted.sum()), n, alpha, "coupled B=2 acceptance")


def test_the_first_arrivals_probability_matches_a_simulated_race():
    """:func:`theory.gumbel_race_top_b_acceptance` against 200k simulated exponential races on a
    6-token pair (b = 1, 2, 3; each within 5 standard errors), and its limits: b = 1 is the one-chain
    coupling probability, b = V is 1."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    assert abs(theory.gumbel_race_top_b_acceptance(q, p, 1) - float(theory.gumbel_coupling_acceptance(q, p))) < 1e-6
    assert abs(theory.gumbel_race_top_b_acceptance(q, p, 6) - 1.0) < 1e-9
    n = 200_000
    e = rng.exponential(size=(n, 6))
    winner, order = np.argmin(e / p, axis=1), np.argsort(e / q, axis=1)
    for b in (1, 2, 3):
        exact = theory.gumbel_race_top_b_acceptance(q, p, b)
        simulated = (order[:, :b] == winner[:, None]).any(axis=1).mean()
        assert abs(simulated - exact) < 5 * np.sqrt(exact * (1 - exact) / n), (b, simulated, exact)


def test_a_coupled_tree_always_draws_distinct_siblings():
    cfg = SpeculativeConfig(method="coupled", lookahead=2, num_drafts=3)
    assert cfg.draft_tree == (3, 1) and cfg.distinct_drafts
    with pytest.raises(ValueError, match="must be a positive int"):
        theory.gumbel_race_top_b_acceptance(Q_TAB[0], P_TAB[0], 0)
