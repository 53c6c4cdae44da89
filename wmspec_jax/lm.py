"""The language-model protocol the speculative loop talks to.

A model is a handful of pure functions plus a params pytree that is passed to
them explicitly (never closed over, so a jitted loop takes the weights as
arguments instead of baking them in as constants):

* ``init_cache(batch_size, max_length) -> cache`` allocates a static-shape
  cache whose per-row lengths start at 0. ``max_length`` counts tokens; an
  implementation adds its own slack so ``dynamic_update_slice`` never clamps.
* ``step(params, cache, tokens[B, T] int32, num_new[B] int32)
  -> (logits float32[B, T, V], cache)`` appends ``tokens[b, :num_new[b]]`` to
  row ``b`` at its current length (positions ``length[b] + i``) and returns
  float32 logits (any unnormalised log-probabilities) for every one of the T
  input positions: ``logits[b, i]`` is the next-token distribution after
  ``tokens[b, :i + 1]``. Entries with ``i >= num_new[b]`` are finite but
  meaningless. Prefill is ``step`` over the prompt with the logits unused:
  inside ``jax.jit`` XLA removes the unused output projection.
* ``rewind(cache, lengths[B]) -> cache`` moves the per-row length pointers
  back (rollback after a rejected draft); it never copies the cache.
* ``cache_lengths(cache) -> int32[B]``.
* optional ``step_hidden(params, cache, tokens, num_new) -> (logits, hidden
  [B, T, D], cache)``: ``step`` that also returns the final hidden states
  (``hidden_size`` D), which a target paired with a
  :class:`FeatureDraftModel` must provide.

A :class:`FeatureDraftModel` (a draft conditioned on the target's hidden
states, :mod:`wmspec_jax.models.feature_draft`) has ``step(params, cache,
tokens, num_new, features[B, T, D]) -> (logits, hidden[B, T, D], cache)``
where ``features[b, i]`` is the target's hidden state at the position before
token ``i`` (or the draft's own ``hidden`` there while the target has not
seen it).

The toy Markov pair in :mod:`wmspec_jax.toy` and the transformers in
:mod:`wmspec_jax.models` both implement this protocol.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

Params = Any
Cache = Any


@dataclasses.dataclass(frozen=True, eq=False)
class LanguageModel:
    """Pure-function description of an autoregressive LM (see module doc).

    Instances are hashable by identity so they can be static arguments of
    ``jax.jit``; build one per model architecture and reuse it.
    """

    name: str
    vocab_size: int
    init_cache: Callable[[int, int], Cache]
    step: Callable[[Params, Cache, jax.Array, jax.Array], tuple[jax.Array, Cache]]
    rewind: Callable[[Cache, jax.Array], Cache]
    cache_lengths: Callable[[Cache], jax.Array]
    step_hidden: Callable | None = None
    hidden_size: int = 0

    def __repr__(self) -> str:  # functions in the default repr are noise
        return f"LanguageModel({self.name!r}, vocab_size={self.vocab_size})"


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureDraftModel(LanguageModel):
    """A draft that reads the target's hidden states (see the module doc for ``step``).

    ``feature_size``: D of the features it reads (the target's ``hidden_size``).
    """

    feature_size: int = 0

    def __repr__(self) -> str:
        return f"FeatureDraftModel({self.name!r}, vocab_size={self.vocab_size})"
