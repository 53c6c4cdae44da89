"""Watermarked speculative sampling: Alg. 1 and the methods it is compared with.

:func:`generate` validates its inputs on the host and calls one ``jax.jit``
function: prefill + a ``lax.while_loop`` over the steps of
:mod:`wmspec_jax.stages` (draft → verify → accept → resample → commit →
rollback). The function is compiled per :class:`SpeculativeConfig` (a
:class:`wmspec_jax.setting.Setting` and the stopping fields), whose
method (:mod:`wmspec_jax.methods`) is static, so each method computes only
what it uses: ``plain`` and ``standard`` hash no watermark, ``hu`` draws no
watermarked residual, and so on (the table of methods is in
:mod:`wmspec_jax.methods`; Sec. 4.1, App. E).

Each step drafts K tokens from the (watermarked) draft Q, scores the K + 1
prefixes with the target P in one forward pass, accepts draft s while
u_s < min(1, P(d_s)/Q(d_s)) (compared in log space on the *unwatermarked*,
temperature/top-k processed P and Q), then emits the normalised residual
(P − Q)+ at the first rejection or a bonus token from P when all K are
accepted (Alg. 1 lines 9-17). Positions whose context was already seen
(:mod:`wmspec_jax.context`) use true randomness in every stream. With top-k
every distribution is kept on its k candidates (:mod:`wmspec_jax.candidates`),
so the watermark costs O(k) per position, not O(V).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import executable_store, multidraft, prf, race_tree, sampling, stages, validation
from wmspec_jax.lm import DraftModel, LanguageModel
from wmspec_jax.methods import METHODS  # noqa: F401  (callers read speculative.METHODS)
from wmspec_jax.setting import MAX_LOOKAHEAD, SpeculativeConfig


class GenerationResult(NamedTuple):
    """Output of :func:`generate`, with the records detection and evaluation need.

    Arrays are [B, L] over buffer positions (prompt, then generated tokens,
    then ``pad_id``) unless stated.

    Attributes:
      tokens: int32[B, L].
      prompt_lengths: int32[B].
      lengths: int32[B] prompt + generated tokens.
      source: int8[B, L] SOURCE_* of each generated token (SOURCE_NONE elsewhere).
      watermarked: bool[B, L] True where the token was drawn from a watermark
        stream from a distribution that is not one-hot (False at repeated
        contexts, for unwatermarked choices and at temperature 0).
      accept_u: float32[B, L] the u compared with min(1, P/Q) at that
        position (NaN where no test happened: bonus / non-speculative).
      accept_prob: float32[B, L] min(1, P/Q) of the draft proposed there (NaN where none).
      target_logprob: float32[B, L] log P(w_t | w_<t) of each generated token
        under the target at temperature 1 without top-k, from the loop's own
        target forwards (NaN where nothing was generated); see
        :meth:`log_perplexity`.
      num_steps: int32[B] loop steps that emitted tokens.
      tokens_per_step: int32[B, max_new_tokens] tokens emitted at each step (0 after the end).
      candidate: int8[B, L] the sibling index of each accepted draft token under multi-draft
        sampling (its stream is ζ^D re-keyed by it, :func:`wmspec_jax.prf.candidate_seeds`); 0
        elsewhere and for one chain.
    """

    tokens: jax.Array
    prompt_lengths: jax.Array
    lengths: jax.Array
    source: jax.Array
    watermarked: jax.Array
    accept_u: jax.Array
    accept_prob: jax.Array
    target_logprob: jax.Array
    num_steps: jax.Array
    tokens_per_step: jax.Array
    candidate: jax.Array

    def generated(self, row: int) -> np.ndarray:
        """The generated token ids of one row (host array)."""
        p, n = int(self.prompt_lengths[row]), int(self.lengths[row])
        return np.asarray(self.tokens[row, p:n])

    def log_perplexity(self) -> np.ndarray:
        """Per-row mean −log P(w_t | w_<t) of the generated tokens (LOGPPL, Tables 1-2): float64[B].

        Natural log, the target at temperature 1 without top-k, as
        :func:`wmspec_jax.lab.runs.log_perplexity` computes with a separate
        forward pass (equal up to float32 rounding of cached vs. one-pass
        attention); 0 for a row with no generated token.
        """
        lp = np.asarray(self.target_logprob, np.float64)
        generated = (np.arange(lp.shape[1])[None] >= np.asarray(self.prompt_lengths)[:, None]) & (
            np.arange(lp.shape[1])[None] < np.asarray(self.lengths)[:, None])
        return -np.where(generated, lp, 0.0).sum(1) / np.maximum(generated.sum(1), 1)

    def tokens_per_step_mean(self) -> np.ndarray:
        """Per-row average accepted tokens per step (AATPS, in [1, K + 1]): float64[B]."""
        gen = np.asarray(self.lengths - self.prompt_lengths, np.float64)
        return gen / np.maximum(np.asarray(self.num_steps), 1)


_TRACES = [0]


def _generate_core(target: LanguageModel, draft: Optional[DraftModel], config: SpeculativeConfig,
                   target_params, draft_params, prompts, prompt_lengths, keys, rng):
    _TRACES[0] += 1  # runs once per compiled variant (at trace time)
    st = config.static()
    bsz = prompts.shape[0]
    if keys.ndim == 2:
        keys = jnp.broadcast_to(keys, (bsz,) + keys.shape)
    inputs = stages.Inputs(target_params, draft_params, keys, sampling.row_words(rng, bsz),
                           prompt_lengths.astype(jnp.int32))
    loop = stages if st.tree is None else race_tree if st.method.coupled else multidraft
    state = loop.initial_state(st, target, draft, inputs, prompts.astype(jnp.int32), config.pad_id)
    state = jax.lax.while_loop(lambda s: ~jnp.all(s.done),
                               lambda s: loop.step(st, target, draft, inputs, s), state)
    in_text = jnp.arange(state.tokens.shape[1])[None] < state.n[:, None]
    rec = state.records
    result = GenerationResult(
        tokens=jnp.where(in_text, state.tokens, config.pad_id),
        prompt_lengths=inputs.start,
        lengths=state.n,
        source=rec.source,
        watermarked=rec.watermarked,
        accept_u=rec.accept_u,
        accept_prob=rec.accept_prob,
        target_logprob=rec.target_logprob,
        num_steps=state.num_steps,
        tokens_per_step=state.tokens_per_step,
        candidate=rec.candidate,
    )
    return result, state.nonfinite


_generate_jit = jax.jit(_generate_core, static_argnames=("target", "draft", "config"))


def generate(
    target: LanguageModel,
    target_params,
    prompts,
    prompt_lengths,
    watermark_key,
    rng,
    config: SpeculativeConfig,
    draft: Optional[DraftModel] = None,
    draft_params=None,
) -> GenerationResult:
    """Generate with one of :data:`METHODS` (Alg. 1 for ``pseudorandom``).

    Args:
      target: the target model P (protocol in :mod:`wmspec_jax.lm`).
      target_params: its params pytree.
      prompts: int[B, P] prompt token ids, left-aligned, any padding after
        each row's prompt.
      prompt_lengths: int[B] in [1, P].
      watermark_key: secret key (bytes/str/int/:class:`prf.WatermarkKey`), a
        list of B secrets (one per row), stream key words uint32[3, 2], or
        per-row words uint32[B, 3, 2].
      rng: ``jax.random`` key for the true randomness, or [B] keys (then a
        row's output does not depend on the rest of the batch).
      config: :class:`SpeculativeConfig` (static: a new config compiles anew).
      draft, draft_params: the draft model Q (speculative methods only).

    Returns:
      :class:`GenerationResult`. Raises ValueError if a model produced NaN
      or +inf logits.

    With :mod:`wmspec_jax.executable_store` enabled (the command-line tools
    enable it) the compiled loop comes from there: a fresh process loads it
    without tracing, when every static argument has a description there.
    """
    args = _loop_arguments(target, target_params, prompts, prompt_lengths, watermark_key, rng, config,
                           draft, draft_params)
    stored = _stored_program(args)
    result = None
    if stored is not None:
        try:
            result, nonfinite = stored(*args[3:])
            nonfinite = _host_value(nonfinite)  # a run's error surfaces here
        except jax.errors.JaxRuntimeError:
            # a stored program that cannot run (a damaged executable) is dropped from the store
            executable_store.discard(stored)
            result = None
    if result is None:
        result, nonfinite = _generate_jit(*args)
    bad = np.flatnonzero(_host_value(nonfinite))
    if bad.size:
        raise ValueError(f"model produced NaN or +inf logits in rows {bad.tolist()}")
    return result


def precompile(target, target_params, prompts, prompt_lengths, watermark_key, rng, config: SpeculativeConfig,
               draft: Optional[DraftModel] = None, draft_params=None) -> None:
    """Compiles :func:`generate` for these arguments' shapes without running it.

    Same arguments as :func:`generate`. A later :func:`generate` call with
    the same shapes and the same config (method included: each method has
    its own executable) reuses the executable, so benchmarks can time
    generation without compilation and without a throw-away run.
    """
    args = _loop_arguments(target, target_params, prompts, prompt_lengths, watermark_key, rng, config,
                           draft, draft_params)
    if _stored_program(args) is None:
        _generate_jit.lower(*args).compile()


def _stored_program(args: tuple):
    """The loop compiled for ``args`` from :mod:`wmspec_jax.executable_store` (loaded or compiled and
    stored), or None when the store is off or a static argument has no description there."""
    return executable_store.compiled("speculative.generate", _generate_jit, args, 3,
                                     [executable_store.describe(a) for a in args[:3]])


def _host_value(x) -> np.ndarray:
    """A (possibly multi-host, globally sharded) array on this host, whole."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def trace_count() -> int:
    """How many variants of the generation loop were traced (and so compiled) in
    this process; a call that reuses a compiled variant does not change it."""
    return _TRACES[0]


def _loop_arguments(target, target_params, prompts, prompt_lengths, watermark_key, rng, config,
                    draft, draft_params) -> tuple:
    """Validated positional arguments of ``_generate_jit`` (host-side checks, no device work)."""
    if not isinstance(config, SpeculativeConfig):
        raise TypeError(f"config must be a SpeculativeConfig, got {type(config).__name__}")
    spec = config.spec
    # Checks run on host copies; device arrays go to the loop untouched so a
    # batch sharded with jax.sharding stays sharded.
    # On several hosts the batch is a global array: it is checked here whole
    # (gathered), which costs one transfer per call, like the single-host copy.
    device_prompts = prompts if isinstance(prompts, jax.Array) else np.asarray(prompts)
    device_lengths = prompt_lengths if isinstance(prompt_lengths, jax.Array) else np.asarray(prompt_lengths)
    prompts = _host_value(prompts)
    prompt_lengths = _host_value(prompt_lengths)
    if prompts.ndim != 2 or prompts.shape[1] < 1 or prompts.shape[0] < 1:
        raise ValueError(f"prompts must be [B, P] with B, P >= 1, got shape {prompts.shape}")
    if not np.issubdtype(prompts.dtype, np.integer):
        raise TypeError(f"prompts must hold integer token ids, got {prompts.dtype}")
    bsz, p_max = prompts.shape
    if prompt_lengths.shape != (bsz,) or not np.issubdtype(prompt_lengths.dtype, np.integer):
        raise ValueError(f"prompt_lengths must be int[{bsz}], got {prompt_lengths.dtype}{list(prompt_lengths.shape)}")
    if (prompt_lengths < 1).any() or (prompt_lengths > p_max).any():
        raise ValueError(f"prompt_lengths must lie in [1, {p_max}] (empty prompts are not allowed)")
    valid = np.arange(p_max)[None] < prompt_lengths[:, None]
    vocab = target.vocab_size
    if ((prompts < 0) | (prompts >= vocab))[valid].any():
        raise ValueError(f"prompt token ids must lie in [0, {vocab})")
    if any(e >= vocab for e in config.stop_ids):
        raise ValueError(f"eos_id {config.eos_id} outside the vocabulary [0, {vocab})")
    if config.top_k is not None and config.top_k > vocab:
        raise ValueError(f"top_k={config.top_k} exceeds the vocabulary size {vocab}")
    if spec.speculative:
        if draft is None or draft_params is None:
            raise ValueError(f"method {config.method!r} needs a draft model and its params")
        validation.check_same_vocab(draft.vocab_size, vocab, "draft", "target")
        draft.check_target(target)
    else:
        draft, draft_params = None, None
    if isinstance(watermark_key, (list, tuple)):
        if len(watermark_key) != bsz:
            raise ValueError(f"a list of watermark keys needs one per row ({bsz}), got {len(watermark_key)}")
        watermark_key = prf.stream_keys(list(watermark_key))
    keys = prf.check_stream_keys(watermark_key)
    if keys.ndim == 3 and keys.shape[0] != bsz:
        raise ValueError(f"per-row watermark keys must have {bsz} rows, got {keys.shape[0]}")
    rng = sampling.check_rng(rng, bsz)
    return (target, draft, config, target_params, draft_params, device_prompts, device_lengths, keys, rng)


__all__ = ["GenerationResult", "MAX_LOOKAHEAD", "SpeculativeConfig", "generate", "precompile", "trace_count"]
