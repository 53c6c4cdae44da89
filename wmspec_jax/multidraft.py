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
"""

from __future__ import annotations

import math
import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import candidates, context, prf, sampling, stages, theory
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


def max_siblings(shape: dict, lookahead: int) -> int:
    """The most children of a node of a draft shape (:func:`parse_shape` keywords; 1 for one chain):
    the sibling streams detection searches (``gumbel_statistics(siblings=...)``)."""
    if "draft_tree" in shape:
        return max(shape["draft_tree"])
    return shape.get("num_drafts", 1) if lookahead > 0 else 1


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


def _pick(x, path: jax.Array, r: int):
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
        window = jnp.repeat(_pick(window, chosen, r), r, axis=0)
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
# The step
# ---------------------------------------------------------------------------


def _draw_sibling(st: stages.Static, inputs: stages.Inputs, tokens, pos, q: Candidates, sibling, fresh):
    """Sibling ``sibling`` (int32[rows]) of each row's node at ``pos`` drawn from ``q``: from ζ^D re-keyed
    by the sibling index when the method watermarks the draft, else from a true uniform of its own.
    Returns (int32 token, float32 log q(token), bool watermarked record), each [rows]."""
    method = st.method
    seeds = None
    if method.watermark_draft:
        seeds = prf.candidate_seeds(
            sampling.position_seeds(inputs.keys, prf.Stream.DRAFT, tokens, pos, st.context_width), sibling)
    uniform = sampling.true_uniforms(inputs.words, pos, sampling.candidate_purpose(sampling.PURPOSE_DRAFT, sibling))
    decoder = st.decoder if st.draft_decoder is None else st.draft_decoder
    index, marked = sampling.draw(decoder, candidates.probs(q), q.ids, seeds, uniform,
                                  fresh if method.watermark_draft else None)
    log_q = jnp.take_along_axis(q.z, index[:, None], axis=-1)[:, 0] - q.lse
    return candidates.token_ids(q, index), log_q, marked


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


def step(st: stages.Static, target: LanguageModel, draft_model: DraftModel, inputs: stages.Inputs,
         state: stages.LoopState) -> stages.LoopState:
    """One step over a draft tree: draft every path → verify every path → walk → resample → commit →
    copy the chosen path's cache windows → rollback (module doc)."""
    branching, k, method = st.tree, st.lookahead, st.method
    r = num_paths(branching)
    stride = strides(branching)
    n, bsz = state.n, state.n.shape[0]
    rows_n = _repeat(n, r)
    path_inputs = inputs._replace(keys=_repeat(inputs.keys, r), words=_repeat(inputs.words, r),
                                  start=_repeat(inputs.start, r))
    path_tokens = _repeat(state.tokens, r)
    need_fresh = method.watermark_draft or method.pseudorandom_acceptance

    # draft: one forward per depth over all paths; siblings drawn from their parent's Q
    logits, carry, draft_cache = draft_model.draft_first(inputs.draft_params, state.draft_cache, path_tokens,
                                                         rows_n, state.features, lookahead=k)
    nonfinite = jnp.zeros((bsz * r,), bool)
    drafted, qs, log_qs, us, watermarked = [], [], [], [], []
    for s in range(k):
        pos = rows_n + s
        q, bad = st.process(logits)
        nonfinite = nonfinite | bad
        q = _gather_rows(q, _rows(parent_path(branching, s), bsz))
        sibling = jnp.tile(jnp.asarray(sibling_index(branching, s)), bsz)
        fresh = (context.is_new_context(path_tokens, pos, path_inputs.start, st.context_width) if need_fresh
                 else jnp.zeros(pos.shape, bool))
        if st.distinct_drafts and branching[s] > 1:
            # every row draws each sibling of its node in turn, each from Q without the earlier ones
            token = log_q = marked = None
            earlier = []
            for c in range(branching[s]):
                c_rows = jnp.full(pos.shape, c, jnp.int32)
                q_c = without_tokens(q, earlier)
                tok_c, log_q_c, marked_c = _draw_sibling(st, path_inputs, path_tokens, pos, q_c, c_rows, fresh)
                mine = sibling == c
                token = tok_c if token is None else jnp.where(mine, tok_c, token)
                log_q = log_q_c if log_q is None else jnp.where(mine, log_q_c, log_q)
                marked = marked_c if marked is None else jnp.where(mine, marked_c, marked)
                earlier.append(tok_c)
        else:
            token, log_q, marked = _draw_sibling(st, path_inputs, path_tokens, pos, q, sibling, fresh)
        path_tokens = set_at(path_tokens, pos, token)
        log_qs.append(log_q)
        true_u = sampling.true_uniforms(path_inputs.words, pos,
                                        sampling.candidate_purpose(sampling.PURPOSE_ACCEPT, sibling))
        if method.pseudorandom_acceptance:
            accept_seeds = prf.candidate_seeds(
                sampling.position_seeds(path_inputs.keys, prf.Stream.ACCEPT, path_tokens, pos, st.context_width),
                sibling)
            true_u = jnp.where(fresh, prf.position_uniforms(accept_seeds), true_u)
        drafted.append(token)
        qs.append(q)
        us.append(true_u)
        watermarked.append(marked)
        if s < k - 1:
            logits, carry, draft_cache = draft_model.draft_next(inputs.draft_params, draft_cache, token, carry)

    # verify: the target over the tree's nodes in one forward (tree attention), read back per path
    parents, node_of = tree_layout(branching)
    tree_tokens = jnp.concatenate([row_slice(state.tokens, n - 1, 1)] + [
        d.reshape(bsz, r)[:, ::stride[s]] for s, d in enumerate(drafted)], axis=1)
    features = state.features
    tree_logits, hidden, target_cache = target.step_tree(inputs.target_params, state.target_cache, tree_tokens,
                                                         parents, return_hidden=features is not None)
    p_tree, target_bad = st.process(tree_logits)
    node_table = jnp.asarray(node_of)
    texts = jnp.arange(bsz)

    def p_at(path, depth):  # P at the node of each text's path ``path`` [B] at ``depth``
        return jax.tree_util.tree_map(lambda a: a[texts, node_table[path, depth]], p_tree)

    nonfinite = nonfinite.reshape(bsz, r).any(axis=1) | target_bad.any(axis=1)

    # walk: recursive rejection sampling from the root, one depth at a time
    node = jnp.zeros((bsz,), jnp.int32)  # canonical path of the current node
    walking = jnp.ones((bsz,), bool)
    j = jnp.zeros((bsz,), jnp.int32)
    final_w = final_ids = None
    u_rec, prob_rec, sib_rec = [], [], []
    for s in range(k):
        p_node = p_at(node, s)
        q_node = _pick(qs[s], node, r)
        resid = candidates.probs(p_node)
        earlier = []
        accepted = jnp.zeros((bsz,), bool)
        u_s = prob_s = jnp.full((bsz,), jnp.nan, jnp.float32)
        sib_s = jnp.zeros((bsz,), jnp.int32)
        for c in range(branching[s]):
            child = node + c * stride[s]
            x = _pick(drafted[s], child, r)
            if st.distinct_drafts or c == 0:  # independent siblings share their node's Q
                q_on_p = _q_on_p(p_node, without_tokens(q_node, earlier))
            earlier.append(x)
            if c == 0:  # as one chain computes it
                log_ratio = candidates.log_prob(p_node, x[:, None])[:, 0] - _pick(log_qs[s], child, r)
            else:
                log_ratio = jnp.log(_prob_at(p_node, resid, x)) - _pick(log_qs[s], child, r)
            u = _pick(us[s], child, r)
            testing = walking & ~accepted
            ok = testing & (jnp.log(u) < log_ratio)
            u_s = jnp.where(testing, u, u_s)
            prob_s = jnp.where(testing, jnp.exp(jnp.minimum(log_ratio, 0.0)), prob_s)
            sib_s = jnp.where(testing, c, sib_s)
            resid = jnp.where((testing & ~ok)[:, None], theory.residual(resid, q_on_p), resid)
            node = jnp.where(ok, child, node)
            accepted = accepted | ok
        stopped = walking & ~accepted
        final_w = jnp.where(stopped[:, None], resid, resid if final_w is None else final_w)
        if p_node.ids is not None:
            final_ids = jnp.where(stopped[:, None], p_node.ids, p_node.ids if final_ids is None else final_ids)
        u_rec.append(u_s)
        prob_rec.append(prob_s)
        sib_rec.append(sib_s)
        j = j + (walking & accepted)
        walking = walking & accepted
    p_leaf = p_at(node, k)
    final_w = jnp.where(walking[:, None], candidates.probs(p_leaf), final_w)
    if p_leaf.ids is not None:
        final_ids = jnp.where(walking[:, None], p_leaf.ids, final_ids)

    # resample: the residual after the last rejection, or the bonus token, from ζ^T
    tokens = _pick(path_tokens, node, r)
    position = n + j
    rejected = j < k
    source = jnp.where(rejected, SOURCE_RESIDUAL, SOURCE_TARGET).astype(jnp.int8)
    seeds = use = None
    if method.watermark_residual or method.watermark_target:
        fresh = context.is_new_context(tokens, position, inputs.start, st.context_width)
        use = fresh & jnp.where(rejected, method.watermark_residual, method.watermark_target)
        seeds = sampling.position_seeds(inputs.keys, prf.Stream.TARGET, tokens, position, st.context_width)
    uniform = sampling.true_uniforms(inputs.words, position, sampling.PURPOSE_TARGET)
    index, final_marked = sampling.draw(st.decoder, final_w, final_ids, seeds, uniform, use)
    final_token = index if final_ids is None else jnp.take_along_axis(final_ids, index[:, None], axis=1)[:, 0]

    stack = lambda xs: jnp.stack(xs, axis=1)  # noqa: E731
    chosen_marked = stack([_pick(w, node, r) for w in watermarked])
    chain = stages.Drafts(tokens=tokens, drafted=None, q=None, log_q=None, fresh=None, watermarked=chosen_marked,
                          cache=None, nonfinite=None)
    path_nodes = node_table[node]  # int32[B, K + 1]: the chosen path's tree nodes
    target_logits = jnp.take_along_axis(tree_logits, path_nodes[:, :, None], axis=1)
    new = stages.commit(st, inputs, state, tokens, j, final_token, source, final_marked, chain, stack(u_rec),
                        stack(prob_rec), target_logits, siblings=stack(sib_rec))

    # keep the accepted path: the target's tree slots moved into place, the chosen path's window
    # copied to every path of the draft's cache; then roll back as one chain does
    start = n - 1
    target_cache = _move_slots(target_cache, start[:, None] + path_nodes, start)
    draft_cache = _copy_window(draft_cache, node, start, k + 1, r)
    if features is not None:  # every path's buffer gets the target's hidden states along the chosen path
        chosen = jnp.take_along_axis(hidden, path_nodes[:, :, None], axis=1).astype(features.dtype)
        features = row_update(features, rows_n, _repeat(chosen, r))
    target_cache = stages.rollback_target(target, target_cache, state, j)
    draft_cache = stages.rollback_draft(draft_model, draft_cache, state._replace(n=rows_n, done=_repeat(state.done, r)),
                                        _repeat(j, r))
    return new._replace(target_cache=target_cache, draft_cache=draft_cache, features=features,
                        nonfinite=state.nonfinite | (nonfinite & ~state.done))
