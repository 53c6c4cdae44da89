"""Multi-draft and tree speculative sampling, with true-random or pseudorandom acceptance.

Beyond the paper (its first open direction, Sec. 6): each step drafts a static *token tree* of
depth K from the committed text, the target scores every node in one forward, and verification
walks the tree with recursive rejection sampling (SpecInfer's multi-step speculative sampling):
at a node with target distribution P and draft distribution Q whose b children x_1..x_b were drawn
from Q independently, child i is accepted when

    u_i < r_i(x_i) / Q(x_i),   r_1 = P,   r_{i+1} = (r_i − Q)+ / ‖(r_i − Q)+‖₁,

and the walk moves to it; when all b children are rejected the token comes from r_{b+1} (from P
at a leaf: the bonus token). ``branching = (b_1, ..., b_K)`` gives the children of every node at
each depth: ``(n, 1, ..., 1)`` is n independent chains (``SpeculativeConfig(num_drafts=n)``),
``(3, 2, 1)`` a tree of 6 paths as EAGLE and Medusa use. Proof that the output law is P and
that each token is a function of the keyed streams: ``docs/multidraft.md``.

**Keyed draws.** Sibling c of a position draws from the draft stream ζ^D re-keyed by c
(:func:`wmspec_jax.prf.candidate_seeds`), its acceptance u from ζ^R re-keyed by c (Alg. 1; a
true-random u with its own purpose otherwise), and the residual / bonus token from ζ^T at the
position, as in one chain; sibling 0 uses the paper's streams, so ``branching = (1,) * K`` draws
exactly what one chain draws. The repeated-context rule is applied to each path's own text
(committed tokens and the path's drafts): siblings share their context and are told apart by c,
so a context is never marked as seen because of a sibling.

**Layout.** The target scores the tree with tree attention (``LanguageModel.step_tree``): one
row per text, one position per node (:func:`tree_layout`: the last committed token, then each
distinct prefix once), each node attending to the committed text and its ancestors, so the target's
cache is read once per text and a shared prefix is computed once. The draft holds the tree as its
R = b_1 ⋯ b_K root-to-leaf paths, each a row of its batch (B·R rows, equal on the committed text),
and runs one forward per depth over all paths; a node shared by several paths is read from its
*canonical* path (the lowest-numbered one through it), so every path sees the same Q there.
After the walk the accepted path's tree slots of the target's cache are moved into place and the
chosen path's window of the draft's cache (and of the feature buffer of a draft that reads the
target's hidden states) is copied to the other paths, O(K) slots per step; the caches are rolled
back as in one chain and keep only the accepted path. Cache leaves of rank >= 2 must be
[batch, slot, ...] (``wmspec_jax.lm``).

Records: ``candidate`` says which sibling each accepted draft token was (the stream detection
reads); ``accept_u`` / ``accept_prob`` hold the test of the accepted sibling, or of the last
rejected one where the walk stopped.

**Stages.** :func:`step` runs these, as :func:`wmspec_jax.stages.step` runs one chain's (step:
``docs/multidraft.md``'s numbering; Alg. 1: its lines, which sibling 0 follows exactly):

===================  ================================================  ====  ==============
stage                what it does                                      step  Alg. 1
===================  ================================================  ====  ==============
:func:`draft_tree`   K depths over the B·R paths: each path's child    1     lines 3-5, 8
                     (:func:`draw_children`) and its acceptance
                     uniform (:func:`sibling_uniforms`)
:func:`verify_tree`  one target forward over the tree's nodes          2     line 6
:func:`walk`         recursive rejection sampling, one                 3     lines 7-11
                     :func:`walk_node` per depth
:func:`resample`     the last token from the residual or the leaf's    4     lines 12, 15-17
                     P, drawn as one chain draws it
``stages.commit``    the j + 1 tokens and their records                5     —
:func:`keep_path`    the caches keep the accepted path, roll back      5     —
===================  ================================================  ====  ==============
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import candidates, prf, sampling, stages, theory
from wmspec_jax.buffers import row_slice, row_update, set_at
from wmspec_jax.candidates import Candidates
from wmspec_jax.lm import DraftModel, LanguageModel
from wmspec_jax.sources import SOURCE_RESIDUAL, SOURCE_TARGET

MAX_PATHS = 64
"""Largest number of root-to-leaf paths R of a draft tree (rows of the models' batch per text)."""


def check_branching(branching, lookahead: int) -> tuple:
    """Validated branching factors: a tuple of K ints >= 1 with at most :data:`MAX_PATHS` paths."""
    if not isinstance(branching, (tuple, list)) or not all(
            isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in branching):
        raise TypeError(f"draft_tree must be a tuple of ints (children per node at each depth), got {branching!r}")
    branching = tuple(int(b) for b in branching)
    if len(branching) != lookahead:
        raise ValueError(f"draft_tree {branching} has {len(branching)} depths; lookahead K is {lookahead}")
    if any(b < 1 for b in branching):
        raise ValueError(f"draft_tree {branching}: every depth needs >= 1 child per node")
    if math.prod(branching) > MAX_PATHS:
        raise ValueError(f"draft_tree {branching} has {math.prod(branching)} paths; at most {MAX_PATHS}")
    return branching


def parse_shape(text: str) -> dict:
    """``SpeculativeConfig`` keywords of a draft shape written as text (the benchmarks' flags): "1" one
    chain ({}), "n" n chains (num_drafts), "3x2x1" a tree (draft_tree); a trailing "d" draws siblings
    without replacement (distinct_drafts)."""
    distinct = text.lower().endswith("d")
    try:
        parts = tuple(int(x) for x in text.lower().rstrip("d").split("x"))
    except ValueError:
        raise ValueError(f"draft shape {text!r}: expected n, b1xb2x... or either with a trailing d") from None
    if parts == (1,):
        return {}
    out = {"num_drafts": parts[0]} if len(parts) == 1 else {"draft_tree": parts}
    return {**out, "distinct_drafts": True} if distinct else out


def num_paths(branching: tuple) -> int:
    return math.prod(branching)


def strides(branching: tuple) -> tuple:
    """stride[s] = b_{s+1} ⋯ b_K: paths below one node of depth s + 1 (0-based depth s)."""
    return tuple(math.prod(branching[s + 1:]) for s in range(len(branching)))


def sibling_index(branching: tuple, depth: int) -> np.ndarray:
    """int32[R]: the sibling index c of each path's token at 0-based ``depth``."""
    r = np.arange(num_paths(branching))
    return ((r // strides(branching)[depth]) % branching[depth]).astype(np.int32)


def tree_layout(branching: tuple) -> tuple[tuple, np.ndarray]:
    """The tree the target verifies: (parents, node_of).

    Node 0 is the last committed token; then come the nodes of depth 1, 2, ..., K, one per
    distinct prefix, in the order of their canonical paths. ``parents`` (T ints, ``parents[0] =
    -1``) is the tree as ``LanguageModel.step_tree`` reads it; ``node_of`` int32[R, K + 1] is the
    node of path r at each depth (depth 0: the root).
    """
    r, k = num_paths(branching), len(branching)
    stride = strides(branching)
    node_of = np.zeros((r, k + 1), np.int32)
    parents, offset = [-1], 1
    for s in range(k):
        node_of[:, s + 1] = offset + np.arange(r) // stride[s]
        canonical = np.arange(0, r, stride[s])
        parents.extend(node_of[canonical, s].tolist())
        offset += canonical.size
    return tuple(parents), node_of


def parent_path(branching: tuple, depth: int) -> np.ndarray:
    """int32[R]: the canonical path of the node each path's token at ``depth`` hangs from."""
    r = np.arange(num_paths(branching))
    block = strides(branching)[depth] * branching[depth]
    return (r - r % block).astype(np.int32)


# ---------------------------------------------------------------------------
# Rows: B texts × R paths
# ---------------------------------------------------------------------------


def _repeat(x, r: int):
    return None if x is None else jnp.repeat(x, r, axis=0)


def _rows(index: np.ndarray, bsz: int) -> jax.Array:
    """Rows b·R + index[r] of the [B·R] layout, for every (b, r): int32[B·R]."""
    r = index.shape[0]
    return (jnp.arange(bsz, dtype=jnp.int32)[:, None] * r + jnp.asarray(index)[None]).reshape(-1)


def pick_path(x, path: jax.Array, r: int):
    """x[b·R + path[b]] for each text b, of an array (or Candidates) with B·R leading rows."""
    def one(a):
        if a is None:
            return None
        return a.reshape((-1, r) + a.shape[1:])[jnp.arange(path.shape[0]), path]
    return jax.tree_util.tree_map(one, x)


def _gather_rows(c: Candidates, rows: jax.Array) -> Candidates:
    return jax.tree_util.tree_map(lambda a: a[rows], c)


def _move_slots(tree, src: jax.Array, dst_start: jax.Array):
    """Every [B, S, ...] leaf of ``tree`` with slot dst_start[b] + t set to slot src[b, t] (int32[B, P])."""
    rows = jnp.arange(src.shape[0])[:, None]
    dst = dst_start[:, None] + jnp.arange(src.shape[1], dtype=dst_start.dtype)[None]

    def one(x):
        if x is None or x.ndim < 2:
            return x
        return x.at[rows, dst].set(x[rows, src], mode="drop")
    return jax.tree_util.tree_map(one, tree)


def _copy_window(tree, chosen: jax.Array, start: jax.Array, size: int, r: int):
    """Every [B·R, S, ...] leaf of ``tree`` with slots start[b] .. start[b] + size − 1 of every path
    of text b replaced by those of path ``chosen[b]`` (rank-1 leaves, the lengths, untouched)."""
    rows_start = _repeat(start, r)

    def one(x):
        if x is None or x.ndim < 2:
            return x
        window = row_slice(x, rows_start, size)
        window = jnp.repeat(pick_path(window, chosen, r), r, axis=0)
        return row_update(x, rows_start, window)
    return jax.tree_util.tree_map(one, tree)


REMAINING_MASS_EPS = 1e-6
"""Below this mass left after removing the earlier siblings' tokens, a distinct sibling is drawn
from the whole of Q instead (any proposal law keeps the walk exact, as long as its test uses it)."""


def without_tokens(q: Candidates, excluded: list) -> Candidates:
    """Q_c: Q with the tokens of the earlier siblings (each int32[rows]) removed and renormalised,
    or Q itself where they held all but :data:`REMAINING_MASS_EPS` of its mass."""
    if not excluded:
        return q
    ids = q.ids if q.ids is not None else jnp.arange(q.size, dtype=jnp.int32)[None]
    hit = jnp.zeros(q.z.shape, bool)
    for token in excluded:
        hit = hit | (ids == token[:, None])
    masked = candidates.with_logits(q, jnp.where(hit, -jnp.inf, q.z))
    enough = masked.lse - q.lse > jnp.log(jnp.float32(REMAINING_MASS_EPS))
    return Candidates(jnp.where(enough[:, None], masked.z, q.z), jnp.where(enough, masked.lse, q.lse), q.ids)


def _q_on_p(p: Candidates, q: Candidates) -> jax.Array:
    """Q on P's candidates (float32[B, C]), as :func:`wmspec_jax.candidates.residual` reads it."""
    if p.ids is None and q.ids is None:
        return candidates.probs(q)
    ids = p.ids if p.ids is not None else jnp.broadcast_to(jnp.arange(p.size, dtype=jnp.int32), p.z.shape)
    return jnp.exp(candidates.log_prob(q, ids))


def _prob_at(c: Candidates, weights: jax.Array, token: jax.Array) -> jax.Array:
    """weights[b, index of token[b] among c's candidates] (0 outside them): float32[B]."""
    if c.ids is None:
        return jnp.take_along_axis(weights, token[:, None], axis=1)[:, 0]
    return jnp.sum(jnp.where(c.ids == token[:, None], weights, 0.0), axis=1)


# ---------------------------------------------------------------------------
# The step's stages
# ---------------------------------------------------------------------------


def initial_state(st: stages.Static, target: LanguageModel, draft_model: DraftModel, inputs: stages.Inputs,
                  prompts: jax.Array, pad_id: int) -> stages.LoopState:
    """One chain's prefill; the draft's cache (and the feature buffer) repeated for the R paths of each
    text, the target's kept once per text (it scores the tree with tree attention)."""
    if target.step_tree is None:
        raise ValueError(f"target {target.name!r} cannot score a token tree (no step_tree), which "
                         f"multi-draft sampling needs")
    r = num_paths(st.tree)
    nodes = len(tree_layout(st.tree)[0])  # the root and the drafted nodes the target scores per step
    state = stages.initial_state(st, target, draft_model, inputs, prompts, pad_id,
                                 extra_target_slots=nodes - (st.lookahead + 1))
    rep = lambda t: jax.tree_util.tree_map(lambda x: _repeat(x, r), t)  # noqa: E731
    return state._replace(draft_cache=rep(state.draft_cache), features=_repeat(state.features, r))


class TreeDrafts(NamedTuple):
    """Output of :func:`draft_tree`: the tree as its R root-to-leaf paths, B·R rows (row b·R + r is
    path r of text b; a node shared by several paths holds the same token on each).

    Attributes:
      tokens: int32[B·R, L] each path's buffer, its K drafts at positions n .. n + K − 1.
      drafted: int32[B·R, K] the path's token at each depth.
      q: K Candidates [B·R, C], one per depth: Q at the node the path's token hangs from (kept per
        depth, not stacked: each is vocabulary-wide and the walk reads one depth at a time).
      log_q: float32[B·R, K] log Q_c(token) under the law Q_c the token was drawn from.
      u: float32[B·R, K] the token's acceptance uniform.
      watermarked: bool[B·R, K] the tokens' records.
      cache: the draft's cache after the K − 1 forwards.
      nonfinite: bool[B·R] the draft produced NaN or +inf logits on the path.
    """

    tokens: jax.Array
    drafted: jax.Array
    q: tuple
    log_q: jax.Array
    u: jax.Array
    watermarked: jax.Array
    cache: Any
    nonfinite: jax.Array


class TreeVerified(NamedTuple):
    """Output of :func:`verify_tree`, over the T nodes of :func:`tree_layout` (node 0: the last
    committed token).

    Attributes:
      p: Candidates [B, T, C] P after each node.
      logits: float32[B, T, V] the raw logits (the ``target_logprob`` record).
      hidden: [B, T, D] the target's hidden states, or None (no feature draft).
      cache: the target's cache, node i at slot n − 1 + i.
      nonfinite: bool[B].
    """

    p: Candidates
    logits: jax.Array
    hidden: Any
    cache: Any
    nonfinite: jax.Array


class Walk(NamedTuple):
    """Output of :func:`walk`.

    Attributes:
      node: int32[B] the canonical path of the last accepted node (the root's path 0 if none): the
        path whose first j drafts are emitted.
      j: int32[B] accepted depths, 0..K.
      weights: float32[B, C] the law of the step's last token: the residual after the last rejection,
        or P at the leaf (bonus); on candidate ``ids`` int32[B, C] (None: the whole vocabulary).
      u, accept_prob: float32[B, K] the test of the accepted sibling at each depth, or of the last
        rejected one where the walk stopped (NaN below it).
      sibling: int32[B, K] the sibling index of that test.
    """

    node: jax.Array
    j: jax.Array
    weights: jax.Array
    ids: Optional[jax.Array]
    u: jax.Array
    accept_prob: jax.Array
    sibling: jax.Array


def _path_inputs(inputs: stages.Inputs, r: int) -> stages.Inputs:
    """The per-text inputs repeated for the R paths of each text (the B·R rows)."""
    return inputs._replace(keys=_repeat(inputs.keys, r), words=_repeat(inputs.words, r), start=_repeat(inputs.start, r))


def draw_children(st: stages.Static, inputs: stages.Inputs, tokens, pos, q: Candidates, depth: int, sibling, fresh):
    """Each path's token at ``pos`` (int32[B·R]): the child with index ``sibling`` (int32[B·R]) of its
    node at 0-based ``depth``, drawn from the node's Q (Candidates [B·R, C]) as one chain draws, re-keyed
    by c (multi-draft step 1; Alg. 1 line 4 for c = 0). With ``distinct_drafts``, sibling c draws from
    Q without the tokens of siblings 0..c − 1 (:func:`without_tokens`): every row draws all siblings of
    its node in turn, so each sees the same earlier ones, and keeps its own.

    Returns:
      (int32[B·R] token, float32[B·R] log Q_c(token), bool[B·R] watermarked record).
    """
    if not (st.distinct_drafts and st.tree[depth] > 1):
        return stages.draw_draft(st, inputs, tokens, pos, q, fresh, sibling)
    own, excluded = None, []
    for c in range(st.tree[depth]):
        drawn = stages.draw_draft(st, inputs, tokens, pos, without_tokens(q, excluded), fresh,
                                  jnp.full(pos.shape, c, jnp.int32))
        own = drawn if own is None else tuple(jnp.where(sibling == c, new, old) for new, old in zip(drawn, own))
        excluded.append(drawn[0])
    return own


def sibling_uniforms(st: stages.Static, inputs: stages.Inputs, tokens, pos, sibling, fresh) -> jax.Array:
    """The acceptance uniform of each path's token at ``pos`` (int32[B·R]), sibling ``sibling``
    (int32[B·R]) of its node: ζ^R re-keyed by c where the context is new (``fresh``, bool[B·R]) under
    Alg. 1 (line 8 for c = 0), a true uniform of its own otherwise: float32[B·R]."""
    true_u = sampling.true_uniforms(inputs.words, pos, sampling.candidate_purpose(sampling.PURPOSE_ACCEPT, sibling))
    if not st.method.pseudorandom_acceptance:
        return true_u
    seeds = stages.stream_seeds(st, inputs, prf.Stream.ACCEPT, tokens, pos)
    return jnp.where(fresh, prf.position_uniforms(prf.candidate_seeds(seeds, sibling)), true_u)


def draft_tree(st: stages.Static, draft_model: DraftModel, inputs: stages.Inputs,
               state: stages.LoopState) -> TreeDrafts:
    """K depths of the draft tree over the B·R path rows (multi-draft step 1; Alg. 1 lines 3-5, with
    the acceptance uniforms of line 8 drawn here, while each path's text is at hand).

    One draft forward per depth over all paths (``draft_first``, then ``draft_next`` per drafted
    token; the K-th token's forward is skipped). Every path reads Q at its node from the node's
    canonical path, so the siblings of a node see one Q.
    """
    branching, k, method = st.tree, st.lookahead, st.method
    r, bsz = num_paths(branching), state.n.shape[0]
    rows_n, path_inputs, tokens = _repeat(state.n, r), _path_inputs(inputs, r), _repeat(state.tokens, r)
    logits, carry, cache = draft_model.draft_first(inputs.draft_params, state.draft_cache, tokens, rows_n,
                                                   state.features, lookahead=k)
    nonfinite = jnp.zeros((bsz * r,), bool)
    per_depth = []
    for s in range(k):  # K is small and static: unrolled
        pos = rows_n + s
        q, bad = st.process_draft(logits)
        nonfinite = nonfinite | bad
        q = _gather_rows(q, _rows(parent_path(branching, s), bsz))
        sibling = jnp.tile(jnp.asarray(sibling_index(branching, s)), bsz)
        fresh = (stages.is_new_context(st, tokens, pos, path_inputs)
                 if method.watermark_draft or method.pseudorandom_acceptance or method.coupled
                 else jnp.zeros(pos.shape, bool))
        token, log_q, marked = draw_children(st, path_inputs, tokens, pos, q, s, sibling, fresh)
        tokens = set_at(tokens, pos, token)
        u = sibling_uniforms(st, path_inputs, tokens, pos, sibling, fresh)
        per_depth.append((token, q, log_q, u, marked))
        if s < k - 1:
            logits, carry, cache = draft_model.draft_next(inputs.draft_params, cache, token, carry)
    drafted, qs, log_q, u, marked = zip(*per_depth)
    stack = lambda xs: jnp.stack(xs, axis=1)  # noqa: E731
    return TreeDrafts(tokens, stack(drafted), qs, stack(log_q), stack(u), stack(marked), cache, nonfinite)


def verify_tree(st: stages.Static, target: LanguageModel, inputs: stages.Inputs, state: stages.LoopState,
                drafts: TreeDrafts) -> TreeVerified:
    """One target forward over the tree's nodes with tree attention (multi-draft step 2; Alg. 1 line 6):
    the last committed token, then each depth's distinct prefixes, read from their canonical paths."""
    branching, k = st.tree, st.lookahead
    bsz, stride = state.n.shape[0], strides(branching)
    by_text = drafts.drafted.reshape(bsz, num_paths(branching), k)
    tree_tokens = jnp.concatenate([row_slice(state.tokens, state.n - 1, 1)]
                                  + [by_text[:, ::stride[s], s] for s in range(k)], axis=1)
    logits, hidden, cache = target.step_tree(inputs.target_params, state.target_cache, tree_tokens,
                                             tree_layout(branching)[0], return_hidden=state.features is not None)
    p, bad = st.process(logits)
    return TreeVerified(p, logits, hidden, cache, bad.any(axis=1))


def walk_node(st: stages.Static, p_node: Candidates, q_node: Candidates, drafts: TreeDrafts, depth: int,
                  node: jax.Array, walking: jax.Array):
    """Recursive rejection sampling at each text's current node (multi-draft step 3; Alg. 1 lines 9-12
    with b children in turn): with r_1 = P, child c is accepted when u_c < r_c(x_c) / Q_c(x_c), else
    r_{c+1} = (r_c − Q_c)+ / ‖(r_c − Q_c)+‖₁ and the next child is tried.

    Args:
      p_node, q_node: Candidates [B, C], P and Q at the node.
      drafts: :class:`TreeDrafts`; depth: the node's depth (its children are the drafts at ``depth``).
      node: int32[B] the node's canonical path; walking: bool[B] texts whose walk reached it.

    Returns:
      (int32[B] the accepted child's canonical path (``node`` if none), bool[B] accepted, float32[B, C]
      the residual after the last rejection, and the test recorded for the depth: float32[B] u,
      float32[B] min(1, r_c / Q_c), int32[B] c).
    """
    r, stride = num_paths(st.tree), strides(st.tree)[depth]
    bsz = node.shape[0]
    residual = candidates.probs(p_node)
    parent, accepted, excluded = node, jnp.zeros((bsz,), bool), []
    u_rec = prob_rec = jnp.full((bsz,), jnp.nan, jnp.float32)
    sibling_rec = jnp.zeros((bsz,), jnp.int32)
    for c in range(st.tree[depth]):
        child = parent + c * stride
        x = pick_path(drafts.drafted[:, depth], child, r)
        if st.distinct_drafts or c == 0:  # independent siblings share their node's Q
            q_on_p = _q_on_p(p_node, without_tokens(q_node, excluded))
        excluded.append(x)
        log_q = pick_path(drafts.log_q[:, depth], child, r)
        if c == 0:  # as one chain computes it
            log_ratio = candidates.log_prob(p_node, x[:, None])[:, 0] - log_q
        else:
            log_ratio = jnp.log(_prob_at(p_node, residual, x)) - log_q
        u = pick_path(drafts.u[:, depth], child, r)
        testing = walking & ~accepted
        ok = testing & (jnp.log(u) < log_ratio)
        u_rec = jnp.where(testing, u, u_rec)
        prob_rec = jnp.where(testing, jnp.exp(jnp.minimum(log_ratio, 0.0)), prob_rec)
        sibling_rec = jnp.where(testing, c, sibling_rec)
        residual = jnp.where((testing & ~ok)[:, None], theory.residual(residual, q_on_p), residual)
        node = jnp.where(ok, child, node)
        accepted = accepted | ok
    return node, accepted, residual, u_rec, prob_rec, sibling_rec


def walk(st: stages.Static, p_tree: Candidates, drafts: TreeDrafts) -> Walk:
    """The walk from the root, one depth at a time (multi-draft steps 3-4; Alg. 1 lines 7-17): at each
    reached node :func:`walk_node`; the first node with every child rejected ends the walk with
    its residual, a walk through K depths ends with P at the leaf (the bonus law).

    Args:
      p_tree: Candidates [B, T, C] P at every node (:class:`TreeVerified`).
      drafts: :class:`TreeDrafts`.
    """
    k, r = st.lookahead, num_paths(st.tree)
    bsz = p_tree.z.shape[0]
    node_table, texts = jnp.asarray(tree_layout(st.tree)[1]), jnp.arange(bsz)

    def p_at(path, depth):  # P at the node of each text's path ``path`` [B] at ``depth``
        return jax.tree_util.tree_map(lambda a: a[texts, node_table[path, depth]], p_tree)

    node, walking, j = jnp.zeros((bsz,), jnp.int32), jnp.ones((bsz,), bool), jnp.zeros((bsz,), jnp.int32)
    weights = ids = None
    records = []
    for s in range(k):
        p_node = p_at(node, s)
        node, accepted, residual, *record = walk_node(st, p_node, pick_path(drafts.q[s], node, r), drafts, s,
                                                          node, walking)
        stopped = walking & ~accepted
        weights = jnp.where(stopped[:, None], residual, residual if weights is None else weights)
        if p_node.ids is not None:
            ids = jnp.where(stopped[:, None], p_node.ids, p_node.ids if ids is None else ids)
        records.append(record)
        j = j + (walking & accepted)
        walking = walking & accepted
    p_leaf = p_at(node, k)
    weights = jnp.where(walking[:, None], candidates.probs(p_leaf), weights)
    if p_leaf.ids is not None:
        ids = jnp.where(walking[:, None], p_leaf.ids, ids)
    u, accept_prob, sibling = (jnp.stack(xs, axis=1) for xs in zip(*records))
    return Walk(node, j, weights, ids, u, accept_prob, sibling)


def resample(st: stages.Static, inputs: stages.Inputs, state: stages.LoopState, drafts: TreeDrafts, walked: Walk):
    """The step's last token, at n + j of the accepted path (multi-draft step 4; Alg. 1 lines 12 and
    15-17): from the walk's residual or the leaf's P, drawn as one chain draws it
    (:func:`wmspec_jax.stages.draw_final`).

    Returns:
      (int32[B, L] the accepted path's buffer, int32[B] token, int8[B] source, bool[B] watermarked record).
    """
    tokens = pick_path(drafts.tokens, walked.node, num_paths(st.tree))
    rejected = walked.j < st.lookahead
    token, watermarked = stages.draw_final(st, inputs, walked.weights, walked.ids, tokens, state.n + walked.j,
                                           rejected)
    return tokens, token, jnp.where(rejected, SOURCE_RESIDUAL, SOURCE_TARGET).astype(jnp.int8), watermarked


def keep_path(st: stages.Static, target: LanguageModel, draft_model: DraftModel, state: stages.LoopState,
              drafts: TreeDrafts, verified: TreeVerified, walked: Walk):
    """The caches keep only the accepted path (multi-draft step 5): the target's tree slots of the path
    moved to positions n − 1 .. n + K, the chosen path's window of the draft's cache (and the target's
    hidden states along the path, for a feature draft) copied to every path; then both rolled back to
    the accepted prefix as one chain rolls back (:func:`wmspec_jax.stages.rollback_target`, ``_draft``).

    Returns:
      (the target's cache, the draft's cache, the feature buffer or None).
    """
    k, r = st.lookahead, num_paths(st.tree)
    n, start = state.n, state.n - 1
    path_nodes = jnp.asarray(tree_layout(st.tree)[1])[walked.node]  # int32[B, K + 1]
    target_cache = _move_slots(verified.cache, start[:, None] + path_nodes, start)
    draft_cache = _copy_window(drafts.cache, walked.node, start, k + 1, r)
    features = state.features
    if features is not None:
        chosen = jnp.take_along_axis(verified.hidden, path_nodes[:, :, None], axis=1).astype(features.dtype)
        features = row_update(features, _repeat(n, r), _repeat(chosen, r))
    target_cache = stages.rollback_target(target, target_cache, state, walked.j)
    path_state = state._replace(n=_repeat(n, r), done=_repeat(state.done, r))
    draft_cache = stages.rollback_draft(draft_model, draft_cache, path_state, _repeat(walked.j, r))
    return target_cache, draft_cache, features


def step(st: stages.Static, target: LanguageModel, draft_model: DraftModel, inputs: stages.Inputs,
         state: stages.LoopState) -> stages.LoopState:
    """One step over a draft tree: :func:`draft_tree` → :func:`verify_tree` → :func:`walk` →
    :func:`resample` → :func:`wmspec_jax.stages.commit` → :func:`keep_path` (module doc)."""
    r, bsz = num_paths(st.tree), state.n.shape[0]
    drafts = draft_tree(st, draft_model, inputs, state)
    verified = verify_tree(st, target, inputs, state, drafts)
    walked = walk(st, verified.p, drafts)
    tokens, final_token, source, final_marked = resample(st, inputs, state, drafts, walked)
    path_nodes = jnp.asarray(tree_layout(st.tree)[1])[walked.node]
    chain = stages.Drafts(tokens=tokens, drafted=None, q=None, log_q=None, fresh=None,
                          watermarked=pick_path(drafts.watermarked, walked.node, r), cache=None, nonfinite=None)
    target_logits = jnp.take_along_axis(verified.logits, path_nodes[:, :, None], axis=1)
    new = stages.commit(st, inputs, state, tokens, walked.j, final_token, source, final_marked, chain, walked.u,
                        walked.accept_prob, target_logits, siblings=walked.sibling)
    target_cache, draft_cache, features = keep_path(st, target, draft_model, state, drafts, verified, walked)
    nonfinite = drafts.nonfinite.reshape(bsz, r).any(axis=1) | verified.nonfinite
    return new._replace(target_cache=target_cache, draft_cache=draft_cache, features=features,
                        nonfinite=state.nonfinite | (nonfinite & ~state.done))


__all__ = ["MAX_PATHS", "REMAINING_MASS_EPS", "TreeDrafts", "TreeVerified", "Walk", "check_branching", "draft_tree",
           "draw_children", "initial_state", "keep_path", "num_paths", "parent_path", "parse_shape", "pick_path",
           "resample", "sibling_index", "sibling_uniforms", "step", "strides", "tree_layout", "verify_tree", "walk",
           "walk_node", "without_tokens"]
