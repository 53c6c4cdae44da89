"""Watermarked speculative sampling: Alg. 1 and the methods it is compared with.

One ``jax.jit``-compiled function (prefill + ``lax.while_loop``) serves every
method; they differ only in a few static choices (Sec. 4.1, App. E):

==============  ============  ================  =========================
method          draft         acceptance u      residual / bonus token
==============  ============  ================  =========================
``plain``       —             —                 plain target (no watermark)
``basic``       —             —                 watermarked target (ζ^T)
``standard``    plain         true random       plain / plain
``hu``          watermarked   true random       plain / watermarked
``dathathri``   watermarked   true random       watermarked / watermarked
``pseudorandom``watermarked   ACCEPT stream ζ^R watermarked / watermarked
==============  ============  ================  =========================

Each step drafts K tokens from the (watermarked) draft Q, scores the K + 1
prefixes with the target P in one forward pass, accepts draft s while
u_s < min(1, P(d_s)/Q(d_s)) (compared in log space on the *unwatermarked*,
temperature/top-k processed P and Q), then emits the normalised residual
(P − Q)+ at the first rejection or a bonus token from P when all K are
accepted (Alg. 1 lines 9-17). Positions whose context was already seen
(:mod:`wmspec_jax.context`) use true randomness in every stream.

Invariants of the loop state (per row): ``n`` tokens are committed
(prompt + generated); the target's cache holds the first ``n - 1`` of them
and the draft's the first ``n - 1`` or ``n - 2`` (the "pending" tokens are
fed at the start of the next step). Rollback after a rejection only moves
cache length pointers.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import context, decoders, prf, sampling, theory, validation
from wmspec_jax.lm import LanguageModel

SOURCE_NONE = -1  # prompt or padding
SOURCE_DRAFT = 0  # accepted draft token (ζ^D)
SOURCE_RESIDUAL = 1  # residual after a rejection (ζ^T)
SOURCE_TARGET = 2  # bonus after K acceptances, or any non-speculative token (ζ^T)


class MethodSpec(NamedTuple):
    speculative: bool
    watermark_draft: bool
    pseudorandom_accept: bool
    watermark_residual: bool
    watermark_target: bool


METHODS = {
    "plain": MethodSpec(False, False, False, False, False),
    "basic": MethodSpec(False, False, False, False, True),
    "standard": MethodSpec(True, False, False, False, False),
    "hu": MethodSpec(True, True, False, False, True),
    "dathathri": MethodSpec(True, True, False, True, True),
    "pseudorandom": MethodSpec(True, True, True, True, True),
}


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig:
    """Static generation settings (hashable: part of the jit cache key).

    Attributes:
      method: one of :data:`METHODS`.
      decoder: the watermark decoder (Gumbel-max or SynthID(m)).
      lookahead: K drafts per step (must be 0 for ``plain``/``basic``).
      max_new_tokens: per-row budget of generated tokens.
      temperature: > 0, or 0 for greedy; applied to P and Q alike.
      top_k: optional top-k, applied to P and Q alike.
      context_width: h, the number of previous tokens keying ζ.
      eos_id: stop a row after emitting this token (None: never).
      pad_id: filler after each row's end in the returned buffer.
    """

    method: str = "pseudorandom"
    decoder: decoders.WatermarkDecoder = decoders.WatermarkDecoder()
    lookahead: int = 3
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: Optional[int] = None
    context_width: int = prf.DEFAULT_CONTEXT_WIDTH
    eos_id: Optional[int] = None
    pad_id: int = 0

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, got {self.method!r}")
        spec = METHODS[self.method]
        if not isinstance(self.lookahead, int) or self.lookahead < 0:
            raise ValueError(f"lookahead K must be an int >= 0, got {self.lookahead!r}")
        if spec.speculative and self.lookahead < 1:
            raise ValueError(f"method {self.method!r} needs lookahead K >= 1")
        if not spec.speculative and self.lookahead != 0:
            raise ValueError(f"method {self.method!r} does not speculate: set lookahead=0")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not isinstance(self.temperature, (int, float)) or not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        prf.check_context_width(self.context_width)
        if not isinstance(self.decoder, decoders.WatermarkDecoder):
            raise TypeError("decoder must be a wmspec_jax.decoders.WatermarkDecoder")

    @property
    def spec(self) -> MethodSpec:
        return METHODS[self.method]


class GenerationResult(NamedTuple):
    """Output of :func:`generate`, with the records detection and evaluation need.

    Arrays are [B, L] over buffer positions (prompt, then generated tokens,
    then ``pad_id``) unless stated.

    Attributes:
      tokens: int32[B, L].
      prompt_lengths: int32[B].
      lengths: int32[B] prompt + generated tokens.
      source: int8[B, L] SOURCE_* of each generated token (SOURCE_NONE elsewhere).
      watermarked: bool[B, L] True where the token's stream was a watermark
        stream (False at repeated contexts and for unwatermarked choices).
      accept_u: float32[B, L] the u compared with min(1, P/Q) at that
        position (NaN where no test happened: bonus / non-speculative).
      accept_prob: float32[B, L] min(1, P/Q) of the draft proposed there (NaN where none).
      num_steps: int32[B] loop steps that emitted tokens.
      tokens_per_step: int32[B, max_new_tokens] tokens emitted at each step (0 after the end).
    """

    tokens: jax.Array
    prompt_lengths: jax.Array
    lengths: jax.Array
    source: jax.Array
    watermarked: jax.Array
    accept_u: jax.Array
    accept_prob: jax.Array
    num_steps: jax.Array
    tokens_per_step: jax.Array

    def generated(self, row: int) -> np.ndarray:
        """The generated token ids of one row (host array)."""
        p, n = int(self.prompt_lengths[row]), int(self.lengths[row])
        return np.asarray(self.tokens[row, p:n])

    def tokens_per_step_mean(self) -> np.ndarray:
        """Per-row average accepted tokens per step (AATPS, in [1, K + 1]): float64[B]."""
        gen = np.asarray(self.lengths - self.prompt_lengths, np.float64)
        return gen / np.maximum(np.asarray(self.num_steps), 1)


class _State(NamedTuple):
    tokens: jax.Array
    n: jax.Array
    done: jax.Array
    target_cache: Any
    draft_cache: Any
    source: jax.Array
    watermarked: jax.Array
    accept_u: jax.Array
    accept_prob: jax.Array
    num_steps: jax.Array
    tokens_per_step: jax.Array
    nonfinite: jax.Array


def _row_slice(x: jax.Array, start: jax.Array, size: int) -> jax.Array:
    """x[b, start[b] : start[b] + size] for every row (no clamping: callers leave slack)."""
    return jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, size))(x, start)


def _row_update(x: jax.Array, start: jax.Array, window: jax.Array) -> jax.Array:
    return jax.vmap(lambda row, s, w: jax.lax.dynamic_update_slice_in_dim(row, w, s, 0))(x, start, window)


def _set_at(x: jax.Array, pos: jax.Array, value: jax.Array) -> jax.Array:
    return x.at[jnp.arange(x.shape[0]), pos].set(value)


def _take_token(logp: jax.Array, tok: jax.Array) -> jax.Array:
    return jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]


def _generate_core(
    target: LanguageModel,
    draft: Optional[LanguageModel],
    config: SpeculativeConfig,
    target_params,
    draft_params,
    prompts: jax.Array,
    prompt_lengths: jax.Array,
    keys: jax.Array,
    row_rng: jax.Array,
    flags: jax.Array,
):
    # method choices are traced booleans: one compiled loop serves every
    # speculative method (and one every non-speculative one)
    wm_draft, prf_accept, wm_residual, wm_target = (flags[i] for i in range(4))
    K = config.lookahead
    h = config.context_width
    bsz, p_max = prompts.shape
    vocab = target.vocab_size
    buf_len = p_max + config.max_new_tokens + K + 2  # slack: windows never clamp
    rows = jnp.arange(bsz)
    start = prompt_lengths

    def process(logits):
        return decoders.process_logits(logits, config.temperature, config.top_k)

    tokens = jnp.full((bsz, buf_len), config.pad_id, jnp.int32).at[:, :p_max].set(prompts)
    tokens = jnp.where(jnp.arange(buf_len)[None] < prompt_lengths[:, None], tokens, config.pad_id)

    def prefill(model, params):
        cache = model.init_cache(bsz, buf_len)
        if p_max > 1:  # the last prompt token is fed by the first step
            _, cache = model.step(params, cache, tokens[:, : p_max - 1], prompt_lengths - 1)
        return cache

    target_cache = prefill(target, target_params)
    draft_cache = prefill(draft, draft_params) if K > 0 else None

    nan_f = jnp.full((bsz, buf_len), jnp.nan, jnp.float32)
    state = _State(
        tokens=tokens,
        n=prompt_lengths,
        done=jnp.zeros((bsz,), bool),
        target_cache=target_cache,
        draft_cache=draft_cache,
        source=jnp.full((bsz, buf_len), SOURCE_NONE, jnp.int8),
        watermarked=jnp.zeros((bsz, buf_len), bool),
        accept_u=nan_f,
        accept_prob=nan_f,
        num_steps=jnp.zeros((bsz,), jnp.int32),
        tokens_per_step=jnp.zeros((bsz, config.max_new_tokens), jnp.int32),
        nonfinite=jnp.zeros((bsz,), bool),
    )

    def seeds_at(stream, buf, pos):
        return sampling.position_seeds(keys, stream, buf, pos, h)

    def step(st: _State) -> _State:
        n, buf = st.n, st.tokens
        nonfinite = jnp.zeros_like(st.done)

        # ---- draft K tokens (Alg. 1 lines 3-5) -----------------------------
        q_logps, new_ctx, draft_wm = [], [], []
        draft_cache = st.draft_cache
        if K > 0:
            c_d = draft.cache_lengths(draft_cache)
            pending = _row_slice(buf, c_d, 2)
            logits, draft_cache = draft.step(draft_params, draft_cache, pending, n - c_d)
            logits = jnp.take_along_axis(logits, (n - c_d - 1)[:, None, None], axis=1)[:, 0]

            def draft_one(carry, s):
                buf, draft_cache, logits = carry
                pos = n + s
                nonfin = ~jnp.all(jnp.isfinite(logits) | jnp.isneginf(logits), axis=-1)
                q_logp = process(logits)
                fresh = context.is_new_context(buf, pos, start, h)
                tok = sampling.sample(
                    config.decoder,
                    jnp.exp(q_logp),
                    seeds_at(prf.Stream.DRAFT, buf, pos),
                    sampling.true_uniforms(row_rng, pos, sampling.PURPOSE_DRAFT),
                    fresh & wm_draft,
                )
                buf = _set_at(buf, pos, tok)

                # feed the draft its own token for the next position; the last
                # draft's logits are never needed, so that forward is skipped
                def feed(cache):
                    lg, cache = draft.step(draft_params, cache, tok[:, None], jnp.ones_like(n))
                    return lg[:, 0], cache

                next_logits, next_cache = jax.lax.cond(s < K - 1, feed, lambda c: (logits, c), draft_cache)
                use_wm = fresh & wm_draft
                return (buf, next_cache, next_logits), (q_logp, fresh, use_wm, nonfin)

            (buf, draft_cache, _), (q_logps, new_ctx, draft_wm, nonfin) = jax.lax.scan(
                draft_one, (buf, draft_cache, logits), jnp.arange(K)
            )
            q_logps = jnp.moveaxis(q_logps, 0, 1)  # [B, K, V]
            new_ctx = new_ctx.T  # [B, K]
            draft_wm = draft_wm.T
            nonfinite = nonfinite | jnp.any(nonfin, axis=0)

        # ---- verify with one target pass over K + 1 prefixes (line 6) -------
        t_in = _row_slice(buf, n - 1, K + 1)
        t_logits, target_cache = target.step(target_params, st.target_cache, t_in, jnp.full_like(n, K + 1))
        nonfinite = nonfinite | ~jnp.all(jnp.isfinite(t_logits) | jnp.isneginf(t_logits), axis=(1, 2))
        p_logps = process(t_logits)  # [B, K + 1, V]

        # ---- accept / reject (lines 7-13) -----------------------------------
        if K > 0:
            drafts = _row_slice(buf, n, K)  # [B, K]
            positions = n[:, None] + jnp.arange(K)[None]
            log_ratio = jnp.take_along_axis(p_logps[:, :K], drafts[..., None], -1)[..., 0] - jnp.take_along_axis(
                q_logps, drafts[..., None], -1
            )[..., 0]
            true_u = jax.vmap(lambda p: sampling.true_uniforms(row_rng, p, sampling.PURPOSE_ACCEPT), 1, 1)(positions)
            acc_seeds = jax.vmap(lambda p: seeds_at(prf.Stream.ACCEPT, buf, p), 1, 1)(positions)
            u = jnp.where(new_ctx & prf_accept, prf.position_uniforms(acc_seeds), true_u)
            accepted = jnp.log(u) < log_ratio
            j = jnp.sum(jnp.cumprod(accepted.astype(jnp.int32), axis=1), axis=1)  # leading accepts
            accept_prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        else:
            j = jnp.zeros_like(n)

        # ---- residual at the first rejection, or bonus (lines 12, 15-17) -----
        final_pos = n + j
        p_final = jnp.exp(p_logps[rows, j])
        if K > 0:
            q_final = jnp.exp(q_logps[rows, jnp.minimum(j, K - 1)])
            rejected = j < K
            final_probs = jnp.where(rejected[:, None], theory.residual(p_final, q_final), p_final)
            fresh_final = jnp.where(
                rejected, new_ctx[rows, jnp.minimum(j, K - 1)], context.is_new_context(buf, final_pos, start, h)
            )
            use_wm = fresh_final & jnp.where(rejected, wm_residual, wm_target)
        else:
            rejected = jnp.zeros_like(st.done)
            final_probs = p_final
            fresh_final = context.is_new_context(buf, final_pos, start, h)
            use_wm = fresh_final & wm_target
        final_tok = sampling.sample(
            config.decoder,
            final_probs,
            seeds_at(prf.Stream.TARGET, buf, final_pos),
            sampling.true_uniforms(row_rng, final_pos, sampling.PURPOSE_TARGET),
            use_wm,
        )
        buf = _set_at(buf, final_pos, final_tok)

        # ---- commit, truncated by EOS and the token budget --------------------
        window = _row_slice(buf, n, K + 1)
        idx = jnp.arange(K + 1)[None]
        emitted = j + 1
        if config.eos_id is not None:
            is_eos = (window == config.eos_id) & (idx < emitted[:, None])
            first_eos = jnp.argmax(is_eos, axis=1)
            emitted = jnp.where(jnp.any(is_eos, axis=1), first_eos + 1, emitted)
        remaining = config.max_new_tokens - (n - prompt_lengths)
        emitted = jnp.where(st.done, 0, jnp.minimum(emitted, remaining))
        keep = idx < emitted[:, None]
        hit_eos = jnp.zeros_like(st.done)
        if config.eos_id is not None:
            hit_eos = jnp.any((window == config.eos_id) & keep, axis=1)

        is_final = idx == j[:, None]
        win_source = jnp.where(is_final, jnp.where(rejected, SOURCE_RESIDUAL, SOURCE_TARGET)[:, None], SOURCE_DRAFT)
        if K > 0:
            pad1 = lambda x, fill: jnp.concatenate([x, jnp.full((bsz, 1), fill, x.dtype)], axis=1)  # noqa: E731
            win_wm = jnp.where(is_final, use_wm[:, None], pad1(draft_wm, False))
            tested = idx <= jnp.minimum(j, K - 1)[:, None]  # positions where an acceptance test ran
            win_u = jnp.where(tested & (idx < K), pad1(u, jnp.nan), jnp.nan)
            win_prob = jnp.where(tested & (idx < K), pad1(accept_prob, jnp.nan), jnp.nan)
        else:
            win_wm = jnp.broadcast_to(use_wm[:, None], (bsz, 1))
            win_u = win_prob = jnp.full((bsz, 1), jnp.nan, jnp.float32)

        def commit(record, window_values):
            old = _row_slice(record, n, K + 1)
            return _row_update(record, n, jnp.where(keep, window_values.astype(record.dtype), old))

        new_n = n + emitted
        step_idx = jnp.minimum(st.num_steps, config.max_new_tokens - 1)
        active = emitted > 0

        # rollback: target keeps the accepted prefix, draft what it has of it
        target_cache = target.rewind(target_cache, jnp.where(active, n + j, target.cache_lengths(st.target_cache)))
        if K > 0:
            draft_len = jnp.minimum(draft.cache_lengths(draft_cache), n + j)
            draft_cache = draft.rewind(draft_cache, jnp.where(active, draft_len, draft.cache_lengths(st.draft_cache)))

        return _State(
            tokens=buf,  # positions >= new_n are scratch: never read as context
            n=new_n,
            done=st.done | hit_eos | (new_n - prompt_lengths >= config.max_new_tokens),
            target_cache=target_cache,
            draft_cache=draft_cache,
            source=commit(st.source, win_source),
            watermarked=commit(st.watermarked, win_wm),
            accept_u=commit(st.accept_u, win_u),
            accept_prob=commit(st.accept_prob, win_prob),
            num_steps=st.num_steps + active.astype(jnp.int32),
            tokens_per_step=st.tokens_per_step.at[rows, step_idx].add(jnp.where(active, emitted, 0)),
            nonfinite=st.nonfinite | (nonfinite & ~st.done),
        )

    state = jax.lax.while_loop(lambda st: ~jnp.all(st.done), step, state)
    in_text = jnp.arange(buf_len)[None] < state.n[:, None]
    return GenerationResult(
        tokens=jnp.where(in_text, state.tokens, config.pad_id),
        prompt_lengths=prompt_lengths,
        lengths=state.n,
        source=state.source,
        watermarked=state.watermarked,
        accept_u=state.accept_u,
        accept_prob=state.accept_prob,
        num_steps=state.num_steps,
        tokens_per_step=state.tokens_per_step,
    ), state.nonfinite


_generate_jit = jax.jit(_generate_core, static_argnames=("target", "draft", "config"))


def generate(
    target: LanguageModel,
    target_params,
    prompts,
    prompt_lengths,
    watermark_key,
    rng,
    config: SpeculativeConfig,
    draft: Optional[LanguageModel] = None,
    draft_params=None,
) -> GenerationResult:
    """Generate with one of :data:`METHODS` (Alg. 1 for ``pseudorandom``).

    Args:
      target: the target model P (protocol in :mod:`wmspec_jax.lm`).
      target_params: its params pytree.
      prompts: int[B, P] prompt token ids, left-aligned, any padding after
        each row's prompt.
      prompt_lengths: int[B] in [1, P].
      watermark_key: secret key (bytes/str/int/:class:`prf.WatermarkKey`),
        stream key words uint32[3, 2], or per-row words uint32[B, 3, 2].
      rng: ``jax.random`` key for the true randomness, or [B] keys (then a
        row's output does not depend on the rest of the batch).
      config: :class:`SpeculativeConfig` (static: a new config compiles anew).
      draft, draft_params: the draft model Q (speculative methods only).

    Returns:
      :class:`GenerationResult`. Raises ValueError if a model produced NaN
      or +inf logits.
    """
    args = _loop_arguments(target, target_params, prompts, prompt_lengths, watermark_key, rng, config,
                           draft, draft_params)
    result, nonfinite = _generate_jit(*args)
    bad = np.flatnonzero(np.asarray(nonfinite))
    if bad.size:
        raise ValueError(f"model produced NaN or +inf logits in rows {bad.tolist()}")
    return result


def precompile(target, target_params, prompts, prompt_lengths, watermark_key, rng, config: SpeculativeConfig,
               draft: Optional[LanguageModel] = None, draft_params=None) -> None:
    """Compiles :func:`generate` for these arguments' shapes without running it.

    Same arguments as :func:`generate`. A later :func:`generate` call with
    the same shapes and static settings (any ``method`` of the same
    speculative-ness) reuses the executable, so benchmarks can time
    generation without compilation and without a throw-away run.
    """
    args = _loop_arguments(target, target_params, prompts, prompt_lengths, watermark_key, rng, config,
                           draft, draft_params)
    _generate_jit.lower(*args).compile()


def _loop_arguments(target, target_params, prompts, prompt_lengths, watermark_key, rng, config,
                    draft, draft_params) -> tuple:
    """Validated positional arguments of ``_generate_jit`` (host-side checks)."""
    spec = config.spec
    # Checks run on host copies; device arrays go to the loop untouched so a
    # batch sharded with jax.sharding stays sharded.
    device_inputs = {
        "prompts": prompts if isinstance(prompts, jax.Array) else np.asarray(prompts),
        "prompt_lengths": prompt_lengths if isinstance(prompt_lengths, jax.Array) else np.asarray(prompt_lengths),
    }
    prompts = np.asarray(prompts)
    prompt_lengths = np.asarray(prompt_lengths)
    if prompts.ndim != 2 or prompts.shape[1] < 1 or prompts.shape[0] < 1:
        raise ValueError(f"prompts must be [B, P] with B, P >= 1, got shape {prompts.shape}")
    if not np.issubdtype(prompts.dtype, np.integer):
        raise TypeError(f"prompts must hold integer token ids, got {prompts.dtype}")
    bsz, p_max = prompts.shape
    if prompt_lengths.shape != (bsz,):
        raise ValueError(f"prompt_lengths must be [{bsz}], got shape {prompt_lengths.shape}")
    if (prompt_lengths < 1).any() or (prompt_lengths > p_max).any():
        raise ValueError(f"prompt_lengths must lie in [1, {p_max}] (empty prompts are not allowed)")
    valid = np.arange(p_max)[None] < prompt_lengths[:, None]
    vocab = target.vocab_size
    if ((prompts < 0) | (prompts >= vocab))[valid].any():
        raise ValueError(f"prompt token ids must lie in [0, {vocab})")
    if config.eos_id is not None and not 0 <= config.eos_id < vocab:
        raise ValueError(f"eos_id {config.eos_id} outside the vocabulary [0, {vocab})")
    if spec.speculative:
        if draft is None or draft_params is None:
            raise ValueError(f"method {config.method!r} needs a draft model and its params")
        validation.check_same_vocab(draft.vocab_size, vocab, "draft", "target")
    else:
        draft, draft_params = None, None
    keys = prf.check_stream_keys(watermark_key)
    if keys.ndim == 2:
        keys = jnp.broadcast_to(keys, (bsz,) + keys.shape)
    if keys.shape[0] != bsz:
        raise ValueError(f"per-row watermark keys must have {bsz} rows, got {keys.shape[0]}")
    row_rng = sampling.as_row_keys(rng, bsz)
    # the method itself is not part of the compilation key (see _generate_core)
    canonical = dataclasses.replace(config, method="standard" if spec.speculative else "plain")
    return (
        target,
        draft,
        canonical,
        target_params,
        draft_params,
        jnp.asarray(device_inputs["prompts"]).astype(jnp.int32),
        jnp.asarray(device_inputs["prompt_lengths"]).astype(jnp.int32),
        keys,
        row_rng,
        jnp.asarray([spec.watermark_draft, spec.pseudorandom_accept, spec.watermark_residual, spec.watermark_target]),
    )


def compilation_cache_size() -> int:
    """Number of compiled variants of the generation loop (for tests/benchmarks)."""
    return _generate_jit._cache_size()
