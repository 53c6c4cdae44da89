"""The ``coupled`` method over a draft tree: the shared race's first arrivals as siblings (MPFR).

Beyond the paper. One chain of ``coupled`` (:mod:`wmspec_jax.methods`) drafts each token with the
target's stream ζ^T and keeps it while the target's own draw with ζ^T is the same token. Over a tree
(``SpeculativeConfig(method="coupled", num_drafts=B)`` or ``draft_tree=...``) the b children of a
node are the draft decoder's draws with ζ^T from Q, each without the tokens of its earlier
siblings (:func:`wmspec_jax.multidraft.draw_children`; siblings are always distinct). With
Gumbel-max this is the order in which tokens arrive in the keyed exponential race
``E_v / Q_v`` shared by draft and target: the first b arrivals. Verification walks the tree: at each
reached node the target draws its token with ζ^T from P there (:func:`wmspec_jax.stages.draw_final`,
the basic watermark's draw at that context); the child holding that token is accepted and the walk
moves to it; where no child holds it, or at a leaf, that draw is the step's last token.

So every emitted token is the basic watermark's token at its context: the text is the basic
watermark's text, token for token, whatever the draft or the tree (law P, the basic watermark's
detection; records say ``source = target`` and ``candidate = 0``), and the draft only changes how
many tokens a step emits. With Gumbel-max a node with b children accepts with probability
P(the target's winner is among the draft race's first b arrivals)
(:func:`wmspec_jax.theory.gumbel_race_top_b_acceptance`; b = 1: one chain's coupling probability).

Liu et al. (2026, "Watermarkable multi-draft speculative sampling via Poisson processes") call the
B-sibling first depth MPFR; their drafts are the race's first B arrivals at the root and one chain
below each, which is ``num_drafts=B`` here. This module follows their paper's description; it is not
compared with their code. Their acceptance for other decoders is not defined; here a SynthID (or any
other) decoder's siblings are its draws with ζ^T from Q without the earlier siblings' tokens, which
keeps the text the basic watermark's but has no closed-form acceptance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax import candidates, multidraft, stages
from wmspec_jax.candidates import Candidates
from wmspec_jax.lm import DraftModel, LanguageModel
from wmspec_jax.multidraft import num_paths, pick_path, strides, tree_layout
from wmspec_jax.sources import SOURCE_TARGET

initial_state = multidraft.initial_state


def walk(st: stages.Static, inputs: stages.Inputs, n: jax.Array, p_tree: Candidates,
         drafts: multidraft.TreeDrafts):
    """The walk from the root (module doc): at each reached node the target's draw with ζ^T from P;
    the child holding it is accepted, else the walk ends with that draw.

    Args:
      inputs: the per-text :class:`wmspec_jax.stages.Inputs`; n: int32[B] committed lengths.
      p_tree: Candidates [B, T, C] P at every node of the tree
        (:class:`wmspec_jax.multidraft.TreeVerified`); drafts: :class:`wmspec_jax.multidraft.TreeDrafts`.

    Returns:
      (:class:`wmspec_jax.multidraft.Walk` with the accepted path and j (no u: NaN records),
      int32[B] the step's last token, bool[B, K + 1] the watermarked record of the target's draw at
      each depth of the walk).
    """
    k, r = st.lookahead, num_paths(st.tree)
    bsz = n.shape[0]
    node_table, texts = jnp.asarray(tree_layout(st.tree)[1]), jnp.arange(bsz)
    never = jnp.zeros((bsz,), bool)
    node, walking, j = jnp.zeros((bsz,), jnp.int32), jnp.ones((bsz,), bool), jnp.zeros((bsz,), jnp.int32)
    final = jnp.zeros((bsz,), jnp.int32)
    marks = []
    for s in range(k + 1):  # K is small and static: unrolled
        p_node = jax.tree_util.tree_map(lambda a: a[texts, node_table[node, s]], p_tree)
        # the node's context is its canonical path's buffer up to n + s (later slots are not read)
        draw, marked = stages.draw_final(st, inputs, candidates.probs(p_node), p_node.ids,
                                         pick_path(drafts.tokens, node, r), n + s, never)
        marks.append(marked)
        if s == k:  # a leaf: the bonus token
            final = jnp.where(walking, draw, final)
            break
        child_node, matched = node, jnp.zeros((bsz,), bool)
        for c in range(st.tree[s]):
            child = node + c * strides(st.tree)[s]
            ok = walking & ~matched & (pick_path(drafts.drafted[:, s], child, r) == draw)
            child_node, matched = jnp.where(ok, child, child_node), matched | ok
        final = jnp.where(walking & ~matched, draw, final)
        j = j + (walking & matched)
        walking, node = walking & matched, child_node
    no_test = jnp.full((bsz, k), jnp.nan, jnp.float32)
    walked = multidraft.Walk(node, j, None, None, no_test, no_test, jnp.zeros((bsz, k), jnp.int32))
    return walked, final, jnp.stack(marks, axis=1)


def step(st: stages.Static, target: LanguageModel, draft_model: DraftModel, inputs: stages.Inputs,
         state: stages.LoopState) -> stages.LoopState:
    """One step: :func:`wmspec_jax.multidraft.draft_tree` → ``verify_tree`` → :func:`walk` →
    :func:`wmspec_jax.stages.commit` → ``keep_path`` (module doc)."""
    k, r, bsz = st.lookahead, num_paths(st.tree), state.n.shape[0]
    drafts = multidraft.draft_tree(st, draft_model, inputs, state)
    verified = multidraft.verify_tree(st, target, inputs, state, drafts)
    walked, final_token, marks = walk(st, inputs, state.n, verified.p, drafts)
    tokens = pick_path(drafts.tokens, walked.node, r)
    # each emitted token is the target's draw at its depth: its record is that draw's
    chain = stages.Drafts(tokens=tokens, drafted=None, q=None, log_q=None, fresh=None, watermarked=marks[:, :k],
                          cache=None, nonfinite=None)
    path_nodes = jnp.asarray(tree_layout(st.tree)[1])[walked.node]
    target_logits = jnp.take_along_axis(verified.logits, path_nodes[:, :, None], axis=1)
    final_marked = jnp.take_along_axis(marks, walked.j[:, None], axis=1)[:, 0]
    new = stages.commit(st, inputs, state, tokens, walked.j, final_token,
                        jnp.full((bsz,), SOURCE_TARGET, jnp.int8), final_marked, chain, walked.u,
                        walked.accept_prob, target_logits)
    target_cache, draft_cache, features = multidraft.keep_path(st, target, draft_model, state, drafts, verified,
                                                               walked)
    nonfinite = drafts.nonfinite.reshape(bsz, r).any(axis=1) | verified.nonfinite
    return new._replace(target_cache=target_cache, draft_cache=draft_cache, features=features,
                        nonfinite=state.nonfinite | (nonfinite & ~state.done))


__all__ = ["initial_state", "step", "walk"]
