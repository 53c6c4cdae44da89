"""The types the generation loop's stages share (:mod:`wmspec_jax.stages`): the compile-time
:class:`Static`, the per-call :class:`Inputs`, the per-position :class:`Records`, the carried
:class:`LoopState` (its invariants: the stages' module doc) and the draft stage's :class:`Drafts`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import jax

from wmspec_jax import candidates, decoders, methods
from wmspec_jax.candidates import Candidates


@dataclasses.dataclass(frozen=True)
class Static:
    """Everything a step needs that is fixed at compile time (hashable).

    Attributes:
      method: what is watermarked and where u comes from.
      decoder: the watermark decoder.
      lookahead: K (0 for non-speculative methods).
      temperature: float >= 0, P's; top_k: int or None (applied to P and Q alike).
      q_temperature: Q's (:attr:`wmspec_jax.setting.Setting.q_temperature`).
      context_width: h.
      max_new_tokens: per-row budget.
      stop_ids: stop a row after any of these tokens (empty: never).
      draft_decoder: the decoder of the draft stream ζ^D (None: ``decoder``).
      tree: branching factors of a draft tree (:mod:`wmspec_jax.multidraft`); None: one chain.
      distinct_drafts: siblings of a draft tree are drawn without replacement.
      key_sequence: n > 0: the streams are keyed by the token's place in a key sequence of length n
        (:mod:`wmspec_jax.key_sequence`); 0: by the ``context_width`` tokens before it.
    """

    method: methods.Method
    decoder: decoders.WatermarkDecoder
    lookahead: int
    temperature: float
    q_temperature: float
    top_k: Optional[int]
    context_width: int
    max_new_tokens: int
    stop_ids: tuple = ()
    draft_decoder: Optional[decoders.WatermarkDecoder] = None
    tree: Optional[tuple] = None
    distinct_drafts: bool = False
    key_sequence: int = 0

    def process(self, logits: jax.Array) -> tuple[Candidates, jax.Array]:
        """Candidates of float32[..., V] target logits (P) and the NaN / +inf flag per distribution."""
        return candidates.process(logits, self.temperature, self.top_k)

    def process_draft(self, logits: jax.Array) -> tuple[Candidates, jax.Array]:
        """:meth:`process` for the draft's logits (Q), at the draft's temperature."""
        return candidates.process(logits, self.q_temperature, self.top_k)

    @property
    def biases(self) -> bool:
        """A biased decoder (KGW) of a watermarking method: every distribution, draft and target, is the
        decoder's biased one (:func:`_biased`)."""
        return self.decoder.biased and self.method.watermarks


class Inputs(NamedTuple):
    """Per-call arrays the stages read (fixed during the loop).

    Attributes:
      target_params, draft_params: model params (draft None without speculation).
      keys: uint32[B, NUM_STREAMS, 2] per-row stream keys.
      words: uint32[B, 2] per-row true-randomness words.
      start: int32[B] prompt lengths (first watermarked position).
    """

    target_params: Any
    draft_params: Any
    keys: jax.Array
    words: jax.Array
    start: jax.Array


class Records(NamedTuple):
    """Per-position records of the generated text, each [B, L].

    Attributes:
      source: int8 SOURCE_* (:mod:`wmspec_jax.sources`).
      watermarked: bool, drawn from a watermark stream from a non-one-hot
        distribution (False at repeated contexts and for unwatermarked draws).
      accept_u: float32 u compared with min(1, P/Q) there (NaN: no test).
      accept_prob: float32 min(1, P/Q) of the draft proposed there (NaN: none).
      target_logprob: float32 log P(w_t | w_<t) of the token under the target
        at temperature 1 without top-k (NaN where no token was generated):
        LOGPPL's terms, read off the verify forward that runs anyway.
      candidate: int8 the sibling index c of an accepted draft token under multi-draft sampling
        (:mod:`wmspec_jax.multidraft`: its draft stream is ζ^D re-keyed by c); 0 elsewhere and
        for one chain.
    """

    source: jax.Array
    watermarked: jax.Array
    accept_u: jax.Array
    accept_prob: jax.Array
    target_logprob: jax.Array
    candidate: jax.Array


class LoopState(NamedTuple):
    """State carried through the ``lax.while_loop`` (see the module invariants).

    Attributes:
      tokens: int32[B, L] committed tokens, then scratch.
      n: int32[B] committed tokens per row.
      done: bool[B] rows that hit EOS or their budget.
      target_cache, draft_cache: the models' caches (draft None for K = 0).
      records: :class:`Records`.
      num_steps: int32[B] steps that emitted tokens.
      tokens_per_step: int32[B, max_new_tokens] tokens emitted at each step.
      nonfinite: bool[B] a model produced NaN or +inf logits for the row.
      features: [B, L, D] the target's hidden states shifted by one position
        (module doc); None unless the draft reads the target's hidden states.
    """

    tokens: jax.Array
    n: jax.Array
    done: jax.Array
    target_cache: Any
    draft_cache: Any
    records: Records
    num_steps: jax.Array
    tokens_per_step: jax.Array
    nonfinite: jax.Array
    features: Any = None


class Drafts(NamedTuple):
    """Output of :func:`draft`.

    Attributes:
      tokens: int32[B, L] buffer with the K drafts at positions n .. n + K − 1.
      drafted: int32[B, K] the draft tokens d_1..d_K.
      q: Candidates [B, K, C] the processed draft distributions Q_s.
      log_q: float32[B, K] log Q_s(d_s).
      fresh: bool[B, K] the position's context is new (watermark-eligible);
        all False when the method needs no contexts.
      watermarked: bool[B, K] records of the drafts.
      cache: the draft cache (holds positions < n + K − 1).
      nonfinite: bool[B].
    """

    tokens: jax.Array
    drafted: jax.Array
    q: Candidates
    log_q: jax.Array
    fresh: jax.Array
    watermarked: jax.Array
    cache: Any
    nonfinite: jax.Array


__all__ = ["Drafts", "Inputs", "LoopState", "Records", "Static"]
