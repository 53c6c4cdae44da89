"""The stages of one step of the generation loop, in the order of Alg. 1.

One step of every method (:mod:`wmspec_jax.methods`) is

==============  ===============================================  =================
stage           what it does                                     Alg. 1
==============  ===============================================  =================
:func:`draft`   K tokens from Q (watermarked with ζ^D or plain)  lines 3-5
:func:`verify`  one target forward over the K + 1 prefixes       line 6
:func:`accept`  u_s < min(1, P(d_s) / Q(d_s)), leading accepts  lines 7-11
:func:`resample`residual (P − Q)+ at the first rejection, or a  lines 12, 15-17
                bonus token from P (watermarked with ζ^T or not)
:func:`commit`  write the accepted tokens and their records,     —
                stop at EOS or the token budget
:func:`rollback`move the caches' length pointers back            —
==============  ===============================================  =================

A non-speculative method (K = 0) runs :func:`verify` on the last token and
:func:`resample`'s bonus branch: plain decoding with or without ζ^T.
The draws inside :func:`draft` and :func:`resample` (:func:`draw_draft`,
:func:`draw_final`) are shared with the tree step of :mod:`wmspec_jax.multidraft`,
so a tree draws each token exactly as one chain does.

Every stage is a pure function of arrays; the static choices (models,
:class:`Static`) are Python values, so a method compiles only the work it
uses. Acceptance compares the *unwatermarked*, temperature/top-k processed
P and Q in log space, in float32. Positions whose context was already seen
(:mod:`wmspec_jax.context`) use true randomness in every stream.

Invariants of :class:`LoopState` (per row): ``n`` tokens are committed
(prompt + generated); the target's cache holds the first ``n - 1`` of them
and the draft's the first ``n - 1`` or ``n - 2`` (the "pending" tokens are
fed at the start of the next step). Positions ``>= n`` of the token buffer
are scratch.

With a :class:`~wmspec_jax.lm.FeatureDraftModel` (a draft that reads the
target's hidden states) the state also holds ``features``: index ``i`` of
that buffer is the target's hidden state at position ``i - 1`` (index 0 is
zero), written by the prefill and by every :func:`verify`; indices ``<= n -
1`` are the target's on the committed text. The draft's cache keeps only
positions it computed from the target's features: :func:`rollback` cuts it
to the ``n`` tokens the step started from, so the next step's first draft
forward feeds the step's ``j + 1 <= K + 1`` new tokens with the target's
features of them.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp

from wmspec_jax import candidates, context, decoders, key_sequence, prf, sampling
from wmspec_jax.candidates import Candidates
from wmspec_jax.buffers import row_slice, row_update, set_at
from wmspec_jax.lm import DraftModel, LanguageModel
from wmspec_jax.loop_types import Drafts, Inputs, LoopState, Records, Static
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_NONE, SOURCE_RESIDUAL, SOURCE_TARGET


# ---------------------------------------------------------------------------
# Contexts and seeds
# ---------------------------------------------------------------------------


def is_new_context(st: Static, tokens, positions, inputs: Inputs) -> jax.Array:
    """bool[B]: the token at ``positions`` (int32[B]) may carry a watermark: its context is new in the
    row's text (or, under a key sequence, every generated position)."""
    if st.key_sequence:  # every position has its own key element (module doc of key_sequence)
        return jnp.asarray(positions) >= inputs.start
    return context.is_new_context(tokens, positions, inputs.start, st.context_width, st.decoder.context_fill)


def stream_seeds(st: Static, inputs: Inputs, stream: int, tokens, positions) -> jax.Array:
    """uint32[B, W]: seeds of ``stream`` at ``positions`` (int32[B]), from the context or the key sequence.

    The draft and target streams are seeded by their decoder's PRF
    (:meth:`~wmspec_jax.decoders.WatermarkDecoder.context_seeds`: ours, W = 2, unless the scheme brings
    its own); the acceptance stream ζ^R by ours under every scheme. Every stream reads the contexts the
    repeated-context rule reads (the target decoder's :attr:`~wmspec_jax.decoders.WatermarkDecoder.context_fill`
    before the start), so a context the rule calls new has fresh seeds in every stream."""
    if st.key_sequence:
        return key_sequence.position_seeds(inputs.keys, stream, positions, inputs.start, inputs.words,
                                           st.key_sequence)
    # the contexts the repeated-context rule reads (is_new_context): the target decoder's
    keyed = context.before_start(tokens, inputs.start, st.decoder.context_fill)
    if stream == prf.Stream.ACCEPT:
        return sampling.position_seeds(inputs.keys, stream, keyed, positions, st.context_width)
    decoder = st.decoder if stream == prf.Stream.TARGET or st.draft_decoder is None else st.draft_decoder
    ctx = prf.gather_contexts(keyed, positions[:, None], st.context_width)[:, 0]
    return decoder.context_seeds(inputs.keys[:, stream], ctx, stream)


def _biased(st: Static, inputs: Inputs, logits: jax.Array, tokens, positions, fresh) -> jax.Array:
    """A biased decoder's raw logits at ``positions`` (int32[B] for logits [B, V], or int32[B, T] for
    [B, T, V]): the target stream's green list at each position, applied where the context is new (or
    everywhere, :attr:`~wmspec_jax.decoders.WatermarkDecoder.bias_repeats`). Draft and target share it,
    so speculative sampling between the biased Q and P emits the biased P's law, as the decoder alone
    does (``docs/decoders.md``)."""
    def seeds_at(pos):
        return stream_seeds(st, inputs, prf.Stream.TARGET, tokens, pos)

    seeds = seeds_at(positions) if positions.ndim == 1 else jax.vmap(seeds_at, 1, 1)(positions)
    active = jnp.ones_like(fresh) if st.decoder.bias_repeats else fresh
    return st.decoder.bias(logits, seeds, active)


def biased_distribution(st: Static, inputs: Inputs, process, logits: jax.Array, tokens, positions, fresh):
    """(Candidates, bool nonfinite) of ``process`` (temperature, top-k) on ``logits``, biased by a biased
    decoder before (``bias_stage`` ``"logits"``) or after (``"processed"``: the bias is added to the
    processed candidates' scaled logits) the processing; unbiased decoders and methods: ``process`` alone."""
    if not st.biases:
        return process(logits)
    if st.decoder.bias_stage == "logits":
        return process(_biased(st, inputs, logits, tokens, positions, fresh))
    dist, bad = process(logits)
    bonus = _biased(st, inputs, jnp.zeros(logits.shape, jnp.float32), tokens, positions, fresh)  # δ on green
    if dist.ids is not None:
        bonus = jnp.take_along_axis(bonus, dist.ids, axis=-1)
    return candidates.with_logits(dist, dist.z + bonus), bad


# ---------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------


def draft(st: Static, model: DraftModel, inputs: Inputs, cache, tokens: jax.Array, n: jax.Array,
          features: Optional[jax.Array] = None) -> Drafts:
    """Draft K tokens from Q, watermarked with ζ^D when the method says so (Alg. 1 lines 3-5).

    Through the draft protocol (:mod:`wmspec_jax.lm`): ``draft_first`` feeds
    what the draft's cache lacks of the committed text (with the target's
    ``features`` of :class:`LoopState` for a draft that reads them) and
    ``draft_next`` each drafted token; the K-th draft's own forward is
    skipped (its logits are never needed).
    """
    k = st.lookahead
    method = st.method
    # contexts matter for a watermarked draft, for pseudorandom acceptance and for a draft drawn with ζ^T
    need_fresh = method.watermark_draft or method.pseudorandom_acceptance or method.coupled or st.biases
    logits, carry, cache = model.draft_first(inputs.draft_params, cache, tokens, n, features, lookahead=k)
    nonfinite = jnp.zeros(n.shape, bool)
    per_pos = []
    for s in range(k):  # K is small and static: unrolled
        pos = n + s
        fresh = is_new_context(st, tokens, pos, inputs) if need_fresh else jnp.zeros(n.shape, bool)
        q, bad = biased_distribution(st, inputs, st.process_draft, logits, tokens, pos, fresh)
        nonfinite = nonfinite | bad
        token, log_q, watermarked = draw_draft(st, inputs, tokens, pos, q, fresh)
        tokens = set_at(tokens, pos, token)
        per_pos.append((token, q, log_q, fresh, watermarked))
        if s < k - 1:
            logits, carry, cache = model.draft_next(inputs.draft_params, cache, token, carry)
    stack = lambda xs: jnp.stack(xs, axis=1)  # noqa: E731
    drafted, qs, log_q, fresh, watermarked = zip(*per_pos)
    return Drafts(tokens, stack(drafted), candidates.stack(qs), stack(log_q), stack(fresh), stack(watermarked),
                  cache, nonfinite)


def draw_draft(st: Static, inputs: Inputs, tokens: jax.Array, pos: jax.Array, q: Candidates, fresh: jax.Array,
               sibling: Optional[jax.Array] = None):
    """One draft token per row at ``pos`` (int32[B]) from Q (Candidates [B, C]) (Alg. 1 line 4): the
    draft decoder's draw from ζ^D where the method watermarks the draft and ``fresh`` (bool[B]) says
    the context is new, else from a true uniform.

    ``sibling`` (int32[B], multi-draft: :mod:`wmspec_jax.multidraft`) re-keys both by the sibling
    index c, so siblings at one context read different streams; None (one chain) reads the paper's.

    Returns:
      (int32[B] token, float32[B] log Q(token), bool[B] watermarked record).
    """
    method = st.method
    if method.coupled:  # the target's stream, uniform and decoder: the draw the target makes there (methods doc)
        seeds = stream_seeds(st, inputs, prf.Stream.TARGET, tokens, pos)
        index, watermarked = sampling.draw(st.decoder, candidates.probs(q), q.ids, seeds,
                                           sampling.true_uniforms(inputs.words, pos, sampling.PURPOSE_TARGET), fresh)
        log_q = jnp.take_along_axis(q.z, index[:, None], axis=-1)[:, 0] - q.lse
        return candidates.token_ids(q, index), log_q, watermarked
    seeds = stream_seeds(st, inputs, prf.Stream.DRAFT, tokens, pos) if method.watermark_draft else None
    purpose = sampling.PURPOSE_DRAFT
    if sibling is not None:
        draft_decoder = st.decoder if st.draft_decoder is None else st.draft_decoder
        seeds = None if seeds is None else draft_decoder.sibling_seeds(seeds, sibling)
        purpose = sampling.candidate_purpose(purpose, sibling)
    index, watermarked = sampling.draw(
        st.decoder if st.draft_decoder is None else st.draft_decoder, candidates.probs(q), q.ids, seeds,
        sampling.true_uniforms(inputs.words, pos, purpose), fresh if method.watermark_draft else None)
    log_q = jnp.take_along_axis(q.z, index[:, None], axis=-1)[:, 0] - q.lse
    return candidates.token_ids(q, index), log_q, watermarked


def verify(st: Static, model: LanguageModel, inputs: Inputs, cache, tokens: jax.Array, n: jax.Array,
           features: Optional[jax.Array] = None):
    """One target forward over the last committed token and the K drafts (Alg. 1 line 6).

    With ``features`` (the buffer of a draft that reads them, :class:`LoopState`) the
    forward's hidden states are written into it at indices n .. n + K.

    Returns:
      (Candidates [B, K + 1, C]: P after w_{1:n}, after d_1, ..., after d_{1:K};
      the target cache; bool[B] nonfinite logits; the raw float32[B, K + 1, V]
      logits, for :func:`commit`'s ``target_logprob`` record; the features
      buffer, or None).
    """
    k = st.lookahead
    window, num = row_slice(tokens, n - 1, k + 1), jnp.full_like(n, k + 1)
    if features is None:
        logits, cache = model.step(inputs.target_params, cache, window, num)
    else:
        logits, hidden, cache = model.step_hidden(inputs.target_params, cache, window, num)
        features = row_update(features, n, hidden.astype(features.dtype))
    positions = fresh = None
    if st.biases:
        positions = n[:, None] + jnp.arange(k + 1, dtype=n.dtype)[None]
        fresh = jax.vmap(lambda pos: is_new_context(st, tokens, pos, inputs), 1, 1)(positions)
    p, bad = biased_distribution(st, inputs, st.process, logits, tokens, positions, fresh)
    return p, cache, jnp.any(bad, axis=1), logits, features


def acceptance_uniforms(st: Static, inputs: Inputs, tokens: jax.Array, n: jax.Array, fresh: jax.Array) -> jax.Array:
    """u_{n+s}, s = 1..K: from the ACCEPT stream ζ^R at new contexts for Alg. 1
    (line 6's key difference), true-random otherwise: float32[B, K]."""
    positions = n[:, None] + jnp.arange(st.lookahead)[None]
    true_u = jax.vmap(lambda p: sampling.true_uniforms(inputs.words, p, sampling.PURPOSE_ACCEPT), 1, 1)(positions)
    if not st.method.pseudorandom_acceptance:
        return true_u
    seeds = jax.vmap(lambda p: stream_seeds(st, inputs, prf.Stream.ACCEPT, tokens, p), 1, 1)(positions)
    return jnp.where(fresh, prf.position_uniforms(seeds), true_u)


def accept(p: Candidates, drafts: Drafts, u: jax.Array):
    """Accept d_s while u_s < min(1, P(d_s) / Q(d_s)) (Alg. 1 lines 7-11), in log space.

    Args:
      p: Candidates [B, K + 1, C] from :func:`verify`.
      drafts: :class:`Drafts`.
      u: float32[B, K].

    Returns:
      (int32[B] j, the number of leading accepted drafts; float32[B, K]
      min(1, P(d_s) / Q(d_s))).
    """
    k = drafts.drafted.shape[1]
    log_p = candidates.log_prob(candidates.leading(p, k), drafts.drafted[..., None])[..., 0]
    log_ratio = log_p - drafts.log_q
    accepted = jnp.log(u) < log_ratio
    j = jnp.sum(jnp.cumprod(accepted.astype(jnp.int32), axis=1), axis=1)
    return j.astype(jnp.int32), jnp.exp(jnp.minimum(log_ratio, 0.0))


def accept_coupled(st: Static, inputs: Inputs, p: Candidates, drafts: Drafts, tokens: jax.Array, n: jax.Array):
    """The ``coupled`` method's acceptance and last token (:mod:`wmspec_jax.methods`): the target's own
    draw with ζ^T at each of the K + 1 positions, d_s accepted while it equals that draw.

    Returns:
      (int32[B] j accepted drafts; int32[B] the target's draw at n + j; bool[B, K + 1] each draw's
      watermarked record).
    """
    k = st.lookahead
    draws, marks = [], []
    never = jnp.zeros(n.shape, bool)
    for s in range(k + 1):  # K is small and static: unrolled
        p_s = candidates.take(p, jnp.full(n.shape, s), axis=1)
        # The draft stage judged the contexts of n .. n + K − 1 on the same tokens; only n + K is new.
        fresh = drafts.fresh[:, s] if s < k else None
        token, marked = draw_final(st, inputs, candidates.probs(p_s), p_s.ids, tokens, n + s, never, fresh=fresh)
        draws.append(token)
        marks.append(marked)
    draws, marks = jnp.stack(draws, axis=1), jnp.stack(marks, axis=1)
    same = (draws[:, :k] == drafts.drafted).astype(jnp.int32)
    j = jnp.sum(jnp.cumprod(same, axis=1), axis=1).astype(jnp.int32)
    return j, jnp.take_along_axis(draws, j[:, None], axis=1)[:, 0], marks


def resample(st: Static, inputs: Inputs, p: Candidates, drafts: Optional[Drafts], j: jax.Array,
              tokens: jax.Array, n: jax.Array):
    """The token after the accepted drafts (Alg. 1 lines 12 and 15-17).

    At the first rejection (j < K): the normalised residual (P_j − Q_j)+,
    from ζ^T when the method watermarks residuals. After K acceptances (or
    always, for K = 0): a bonus token from P_K, from ζ^T when the method
    watermarks the target.

    Returns:
      (int32[B] token, int8[B] source, bool[B] watermarked record).
    """
    k = st.lookahead
    p_final = candidates.take(p, j, axis=1)
    weights = candidates.probs(p_final)
    fresh_at_rejection = None
    if k > 0:
        rejected = j < k
        q_rejected = candidates.take(drafts.q, jnp.minimum(j, k - 1), axis=1)
        weights = jnp.where(rejected[:, None], candidates.residual(p_final, q_rejected), weights)
        source = jnp.where(rejected, SOURCE_RESIDUAL, SOURCE_TARGET).astype(jnp.int8)
        if st.method.watermark_residual:  # the rejected draft's position: its context is the draft stage's
            fresh_at_rejection = jnp.take_along_axis(drafts.fresh, jnp.minimum(j, k - 1)[:, None], 1)[:, 0]
    else:
        rejected = jnp.zeros(n.shape, bool)
        source = jnp.full(n.shape, SOURCE_TARGET, jnp.int8)
    token, watermarked = draw_final(st, inputs, weights, p_final.ids, tokens, n + j, rejected, fresh_at_rejection)
    return token, source, watermarked


def draw_final(st: Static, inputs: Inputs, weights: jax.Array, ids: Optional[jax.Array], tokens: jax.Array,
               position: jax.Array, rejected: jax.Array, fresh_at_rejection: Optional[jax.Array] = None,
               fresh: Optional[jax.Array] = None):
    """The step's last token at ``position`` (int32[B]), from ``weights`` (float32[B, C] on candidate
    ``ids`` int32[B, C], None: the whole vocabulary): the residual's law where ``rejected`` (bool[B];
    Alg. 1 line 12), P's bonus law elsewhere (line 16). Drawn from ζ^T where the method watermarks that
    kind of token and the context is new, else from a true uniform. ``fresh_at_rejection`` (bool[B]):
    the caller's verdict on the context where rejected (None: judged here from ``tokens``); ``fresh``
    (bool[B]): the caller's verdict on the context of every row (None: judged here).

    Returns:
      (int32[B] token, bool[B] watermarked record).
    """
    method = st.method
    seeds = use = None
    if method.watermark_residual or method.watermark_target:
        if fresh is None:
            fresh = is_new_context(st, tokens, position, inputs)
        if fresh_at_rejection is not None:
            fresh = jnp.where(rejected, fresh_at_rejection, fresh)
        use = fresh & jnp.where(rejected, method.watermark_residual, method.watermark_target)
        seeds = stream_seeds(st, inputs, prf.Stream.TARGET, tokens, position)
    uniform = sampling.true_uniforms(inputs.words, position, sampling.PURPOSE_TARGET)
    index, watermarked = sampling.draw(st.decoder, weights, ids, seeds, uniform, use)
    token = index.astype(jnp.int32) if ids is None else jnp.take_along_axis(ids, index[:, None], axis=1)[:, 0]
    return token, watermarked


def commit(st: Static, inputs: Inputs, state: LoopState, tokens: jax.Array, j: jax.Array,
           final_token: jax.Array, final_source: jax.Array, final_watermarked: jax.Array,
           drafts: Optional[Drafts], u: Optional[jax.Array], accept_prob: Optional[jax.Array],
           target_logits: Optional[jax.Array] = None, siblings: Optional[jax.Array] = None) -> LoopState:
    """Writes the step's j + 1 tokens and their records, truncated by EOS and the budget.

    Args:
      tokens: int32[B, L] buffer holding the drafts (from :func:`draft`).
      j: int32[B] accepted drafts; final_*: the :func:`resample` outputs.
      drafts, u, accept_prob: the speculative records (None for K = 0).
      target_logits: float32[B, K + 1, V] the verify forward's logits (None:
        the ``target_logprob`` record stays NaN).
      siblings: int32[B, K] the sibling index of the draft at each depth (multi-draft; None: 0).

    Returns:
      The new :class:`LoopState` with the caches unchanged (see :func:`rollback`).
    """
    k = st.lookahead
    n = state.n
    tokens = set_at(tokens, n + j, final_token)
    window = row_slice(tokens, n, k + 1)
    idx = jnp.arange(k + 1)[None]
    emitted = j + 1
    if st.stop_ids:
        stops = jnp.isin(window, jnp.asarray(st.stop_ids, jnp.int32))
        is_eos = stops & (idx < emitted[:, None])
        emitted = jnp.where(jnp.any(is_eos, axis=1), decoders.first_argmax(is_eos) + 1, emitted)
    remaining = st.max_new_tokens - (n - inputs.start)
    emitted = jnp.where(state.done, 0, jnp.minimum(emitted, remaining))
    keep = idx < emitted[:, None]
    hit_eos = jnp.zeros(n.shape, bool)
    if st.stop_ids:
        hit_eos = jnp.any(stops & keep, axis=1)

    is_final = idx == j[:, None]
    # a coupled method's accepted draft is the target's draw from ζ^T: its stream is the target's
    accepted_source = SOURCE_TARGET if st.method.coupled else SOURCE_DRAFT
    source = jnp.where(is_final, final_source[:, None], jnp.int8(accepted_source))
    if k > 0:
        pad = lambda x, fill: jnp.concatenate([x, jnp.full((x.shape[0], 1), fill, x.dtype)], axis=1)  # noqa: E731
        watermarked = jnp.where(is_final, final_watermarked[:, None], pad(drafts.watermarked, False))
        tested = (idx <= jnp.minimum(j, k - 1)[:, None]) & (idx < k)  # an acceptance test ran here
        window_u = jnp.where(tested, pad(u, jnp.nan), jnp.nan)
        window_prob = jnp.where(tested, pad(accept_prob, jnp.nan), jnp.nan)
    else:
        watermarked = final_watermarked[:, None]
        window_u = window_prob = None  # no test: the records stay NaN
    window_sibling = None
    if siblings is not None:
        window_sibling = jnp.where(source == SOURCE_DRAFT, pad(siblings, 0), 0)
    window_logprob = None
    if target_logits is not None:  # position i of the window is predicted by the verify logits at i
        window_logprob = (jnp.take_along_axis(target_logits, window[..., None], axis=-1)[..., 0]
                          - jax.nn.logsumexp(target_logits, axis=-1))

    def write(record, values):
        if values is None:
            return record
        old = row_slice(record, n, k + 1)
        return row_update(record, n, jnp.where(keep, values.astype(record.dtype), old))

    rec = state.records
    records = Records(write(rec.source, source), write(rec.watermarked, watermarked),
                      write(rec.accept_u, window_u), write(rec.accept_prob, window_prob),
                      write(rec.target_logprob, window_logprob), write(rec.candidate, window_sibling))
    new_n = n + emitted
    active = emitted > 0
    step_idx = jnp.minimum(state.num_steps, st.max_new_tokens - 1)
    return state._replace(
        tokens=tokens,
        n=new_n,
        done=state.done | hit_eos | (new_n - inputs.start >= st.max_new_tokens),
        records=records,
        num_steps=state.num_steps + active.astype(jnp.int32),
        tokens_per_step=state.tokens_per_step.at[jnp.arange(n.shape[0]), step_idx].add(emitted),
    )


def rollback(st: Static, target: LanguageModel, draft_model: Optional[DraftModel], target_cache, draft_cache,
             old: LoopState, j: jax.Array) -> tuple[Any, Any]:
    """Moves the caches' length pointers back to the accepted prefix (never copies a cache).

    The target keeps the committed tokens but the last (n + j, where j
    counts the accepted drafts of a step that started at n); the draft keeps
    what it has of that prefix, at most its ``draft_keep`` (a feature draft
    the first n). Rows that emitted nothing (done) keep their old lengths.

    Returns:
      (target cache, draft cache).
    """
    target_cache = rollback_target(target, target_cache, old, j)
    if st.lookahead > 0:
        draft_cache = rollback_draft(draft_model, draft_cache, old, j)
    return target_cache, draft_cache


def rollback_target(target: LanguageModel, cache, old: LoopState, j: jax.Array):
    """The target's half of :func:`rollback`: length n + j (old length where done)."""
    return target.rewind(cache, jnp.where(~old.done, old.n + j, target.cache_lengths(old.target_cache)))


def rollback_draft(draft_model: DraftModel, cache, old: LoopState, j: jax.Array):
    """The draft's half of :func:`rollback`: what it has of n + j, at most its ``draft_keep``."""
    keep = jnp.minimum(draft_model.cache_lengths(cache), draft_model.draft_keep(old.n, old.n + j))
    return draft_model.rewind(cache, jnp.where(~old.done, keep, draft_model.cache_lengths(old.draft_cache)))


def step(st: Static, target: LanguageModel, draft_model: Optional[DraftModel], inputs: Inputs,
         state: LoopState) -> LoopState:
    """One step of the loop: draft → verify → accept → resample → commit → rollback."""
    k = st.lookahead
    n, tokens = state.n, state.tokens
    drafts = u = accept_prob = None
    draft_cache = state.draft_cache
    nonfinite = jnp.zeros(n.shape, bool)
    if k > 0:
        drafts = draft(st, draft_model, inputs, draft_cache, tokens, n, state.features)
        tokens, draft_cache, nonfinite = drafts.tokens, drafts.cache, drafts.nonfinite
    p, target_cache, target_nonfinite, target_logits, features = verify(
        st, target, inputs, state.target_cache, tokens, n, state.features)
    nonfinite = nonfinite | target_nonfinite
    if k > 0 and st.method.coupled:
        j, final_token, marks = accept_coupled(st, inputs, p, drafts, tokens, n)
        drafts = drafts._replace(watermarked=marks[:, :k])  # each emitted token is the target's draw
        final_source = jnp.full(n.shape, SOURCE_TARGET, jnp.int8)
        final_watermarked = jnp.take_along_axis(marks, j[:, None], axis=1)[:, 0]
        u = accept_prob = jnp.full(drafts.drafted.shape, jnp.nan, jnp.float32)  # no acceptance test with a u
    else:
        if k > 0:
            u = acceptance_uniforms(st, inputs, tokens, n, drafts.fresh)
            j, accept_prob = accept(p, drafts, u)
        else:
            j = jnp.zeros_like(n)
        final_token, final_source, final_watermarked = resample(st, inputs, p, drafts, j, tokens, n)
    new = commit(st, inputs, state, tokens, j, final_token, final_source, final_watermarked, drafts, u, accept_prob,
                 target_logits)
    target_cache, draft_cache = rollback(st, target, draft_model, target_cache, draft_cache, state, j)
    return new._replace(target_cache=target_cache, draft_cache=draft_cache, features=features,
                        nonfinite=state.nonfinite | (nonfinite & ~state.done))


def initial_state(st: Static, target: LanguageModel, draft_model: Optional[DraftModel], inputs: Inputs,
                  prompts: jax.Array, pad_id: int, extra_target_slots: int = 0) -> LoopState:
    """Prefill: the prompts in the token buffer, every prompt token but the last
    in each cache (the last is fed by the first step), empty records.
    ``extra_target_slots``: scratch slots the target's cache needs beyond one chain's (a draft
    tree's nodes, :func:`wmspec_jax.multidraft.initial_state`)."""
    bsz, p_max = prompts.shape
    buf_len = buffer_length(st, p_max)
    in_prompt = jnp.arange(buf_len)[None] < inputs.start[:, None]
    tokens = jnp.full((bsz, buf_len), pad_id, jnp.int32).at[:, :p_max].set(prompts)
    tokens = jnp.where(in_prompt, tokens, pad_id)

    prompt, num = tokens[:, : p_max - 1], inputs.start - 1
    target_cache = target.init_cache(bsz, buf_len + extra_target_slots)
    draft_cache = draft_model.init_cache(bsz, buf_len) if st.lookahead > 0 else None
    features = None
    if st.lookahead > 0 and draft_model.uses_target_features:
        # the target's hidden state of each position, shifted by one: what the draft reads there
        features = jnp.zeros((bsz, buf_len, target.hidden_size), jnp.float32)
        if p_max > 1:
            _, hidden, target_cache = target.step_hidden(inputs.target_params, target_cache, prompt, num)
            features = features.at[:, 1:p_max].set(hidden.astype(features.dtype))
    elif p_max > 1:
        _, target_cache = target.step(inputs.target_params, target_cache, prompt, num)
    if st.lookahead > 0 and p_max > 1:
        draft_cache = draft_model.draft_prefill(inputs.draft_params, draft_cache, prompt, num,
                                                None if features is None else features[:, : p_max - 1])

    nan = jnp.full((bsz, buf_len), jnp.nan, jnp.float32)
    return LoopState(
        tokens=tokens,
        n=inputs.start,
        done=jnp.zeros((bsz,), bool),
        target_cache=target_cache,
        draft_cache=draft_cache,
        records=Records(jnp.full((bsz, buf_len), SOURCE_NONE, jnp.int8), jnp.zeros((bsz, buf_len), bool), nan, nan,
                        nan, jnp.zeros((bsz, buf_len), jnp.int8)),
        num_steps=jnp.zeros((bsz,), jnp.int32),
        tokens_per_step=jnp.zeros((bsz, st.max_new_tokens), jnp.int32),
        nonfinite=jnp.zeros((bsz,), bool),
        features=features,
    )


def buffer_length(st: Static, prompt_width: int) -> int:
    """Token buffer length: prompt + budget + K + 2 slack (windows never clamp)."""
    return prompt_width + st.max_new_tokens + st.lookahead + 2


__all__ = ["Drafts", "Inputs", "LoopState", "Records", "Static", "accept", "acceptance_uniforms", "biased_distribution",
           "buffer_length", "commit", "draft", "draw_draft", "draw_final", "initial_state", "is_new_context", "resample",
           "rollback", "rollback_draft", "rollback_target", "step", "stream_seeds", "verify"]
