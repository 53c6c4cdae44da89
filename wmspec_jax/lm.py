"""The language-model protocol the speculative loop talks to, and the draft protocol.

A model is a handful of pure functions plus a params pytree that is passed to
them explicitly (never closed over, so a jitted loop takes the weights as
arguments instead of baking them in as constants):

* ``init_cache(batch_size, max_length) -> cache`` allocates a static-shape
  cache whose per-row lengths start at 0.
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
* For multi-draft sampling (:mod:`wmspec_jax.multidraft`), which copies a window of slots from
  one row of a cache to others, every cache leaf of rank >= 2 is laid out [batch, slot, ...]
  (rank-1 leaves are per-row lengths).
* optional ``step_hidden(params, cache, tokens, num_new) -> (logits, hidden
  [B, T, D], cache)``: ``step`` that also returns the final hidden states
  (``hidden_size`` D), which a target paired with a
  :class:`FeatureDraftModel` must provide.
* optional ``step_tree(params, cache, tokens[B, T] int32, parents, return_hidden=False)
  -> (logits float32[B, T, V], hidden [B, T, D] or None, cache)`` scores a token
  tree in one forward (tree attention; a target of multi-draft sampling must
  provide it): ``parents`` is a static tuple of T ints, ``parents[0] = -1``
  (the root) and ``parents[i] < i``. Node i is written to slot
  ``length[b] + i`` at position ``length[b] + depth(i)`` and conditions on the
  row's first ``length[b]`` tokens and its ancestors: ``logits[b, i]`` is the
  next-token distribution after the root-to-i path. The lengths do not move:
  the tree's slots are scratch until the caller moves the accepted path's
  slots into place and sets the length (cache leaves of rank >= 2 are laid
  out [batch, slot, ...], below).

**The draft protocol.** The loop drafts through four methods that both kinds
of draft implement, so it never asks which kind it holds:
``draft_prefill`` (the prompt), ``draft_first`` (the committed tokens the
draft's cache lacks, then Q of the first draft position), ``draft_next``
(one drafted token, then Q of the next position) and ``draft_keep`` (how much
of its cache survives a verification). ``uses_target_features`` says whether
the target must hand over its hidden states (``step_hidden``) and
``check_target`` whether a target can serve the draft.

* :class:`LanguageModel` is a draft as it is: it reads tokens only.
* :class:`FeatureDraftModel` (a draft conditioned on the target's hidden
  states, :mod:`wmspec_jax.models.feature_draft`) has ``step(params, cache,
  tokens, num_new, features[B, T, D]) -> (logits, hidden[B, T, D], cache)``
  where ``features[b, i]`` is the target's hidden state at the position
  before token ``i`` (or the draft's own ``hidden`` there while the target
  has not seen it). It is not a :class:`LanguageModel` (its ``step`` differs)
  and cannot be a target.

The toy Markov pair in :mod:`wmspec_jax.toy` and the transformers in
:mod:`wmspec_jax.models` implement these protocols.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Union

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.buffers import row_slice

Params = Any
Cache = Any


def _last(logits: jax.Array, index: jax.Array) -> jax.Array:
    """logits[b, index[b]] of float32[B, T, V]: [B, V]."""
    return jnp.take_along_axis(logits, index[:, None, None], axis=1)[:, 0]


@dataclasses.dataclass(frozen=True, eq=False)
class LanguageModel:
    """Pure-function description of an autoregressive LM (see module doc); also a draft.

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
    step_tree: Callable | None = None

    uses_target_features: ClassVar[bool] = False

    def __repr__(self) -> str:  # functions in the default repr are noise
        return f"LanguageModel({self.name!r}, vocab_size={self.vocab_size})"

    # -- the draft protocol (module doc) -------------------------------------------------------

    def draft_prefill(self, params, cache, prompt: jax.Array, num: jax.Array, features=None):
        """The cache after ``prompt[b, :num[b]]`` (int32[B, P], int32[B])."""
        return self.step(params, cache, prompt, num)[1]

    def draft_first(self, params, cache, tokens: jax.Array, n: jax.Array, features=None, lookahead: int = 1):
        """Feeds the committed tokens ``tokens[b, cached:n[b]]`` the cache lacks (one or two: the last
        step's final token, and its last accepted draft when the previous K drafts were all
        accepted); returns (float32[B, V] logits of Q at position n, carry, cache)."""
        cached = self.cache_lengths(cache)
        logits, cache = self.step(params, cache, row_slice(tokens, cached, 2), n - cached)
        return _last(logits, n - cached - 1), None, cache

    def draft_next(self, params, cache, token: jax.Array, carry):
        """Feeds one drafted token int32[B]; returns (float32[B, V] logits of the next position, carry,
        cache)."""
        logits, cache = self.step(params, cache, token[:, None], jnp.ones_like(token))
        return logits[:, 0], carry, cache

    def draft_keep(self, committed: jax.Array, keep: jax.Array) -> jax.Array:
        """The cache length a row keeps after a step that started with ``committed`` tokens and kept
        ``keep`` (committed + accepted drafts): every position it computed from the text."""
        return keep

    def check_target(self, target: "LanguageModel") -> None:
        """Raises ValueError if ``target`` cannot verify this draft's proposals (nothing to check)."""


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureDraftModel:
    """A draft that reads the target's hidden states (module doc for ``step``).

    ``feature_size``: D of the features it reads (the target's ``hidden_size``).
    """

    name: str
    vocab_size: int
    init_cache: Callable[[int, int], Cache]
    step: Callable
    rewind: Callable[[Cache, jax.Array], Cache]
    cache_lengths: Callable[[Cache], jax.Array]
    feature_size: int = 0

    uses_target_features: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"FeatureDraftModel({self.name!r}, vocab_size={self.vocab_size})"

    def draft_prefill(self, params, cache, prompt: jax.Array, num: jax.Array, features=None):
        """The cache after ``prompt[b, :num[b]]``, reading ``features`` [B, P, D] (the target's hidden
        states shifted by one position)."""
        return self.step(params, cache, prompt, num, features)[2]

    def draft_first(self, params, cache, tokens: jax.Array, n: jax.Array, features=None, lookahead: int = 1):
        """Feeds every committed position the cache lacks (up to K + 1, K = ``lookahead``: those it
        computed from its own features were rolled back), each with the target's feature of the
        position before it; the carry is the draft's own feature estimate at n − 1, which the next
        position reads."""
        cached = self.cache_lengths(cache)
        width = lookahead + 1
        logits, hidden, cache = self.step(params, cache, row_slice(tokens, cached, width), n - cached,
                                          row_slice(features, cached, width))
        last = n - cached - 1
        return _last(logits, last), _last(hidden, last)[:, None], cache

    def draft_next(self, params, cache, token: jax.Array, carry):
        """The target has not seen the drafts yet: the draft reads its own feature estimate."""
        logits, hidden, cache = self.step(params, cache, token[:, None], jnp.ones_like(token), carry)
        return logits[:, 0], hidden, cache

    def draft_keep(self, committed: jax.Array, keep: jax.Array) -> jax.Array:
        """Positions >= the committed count were computed from the draft's own features, not the
        target's: they are fed again with the target's at the next step."""
        return committed

    def check_target(self, target: LanguageModel) -> None:
        if target.step_hidden is None:
            raise ValueError(f"draft {self.name!r} reads the target's hidden states, which target "
                             f"{target.name!r} does not provide (no step_hidden)")
        if self.feature_size != target.hidden_size:
            raise ValueError(f"draft {self.name!r} reads features of size {self.feature_size}, "
                             f"the target's hidden size is {target.hidden_size}")


def tree_depths(parents: tuple) -> np.ndarray:
    """int32[T]: each node's depth in a token tree given by ``parents`` (``step_tree``; root depth 0).

    Raises ValueError unless ``parents[0] == -1`` and ``0 <= parents[i] < i`` for i >= 1."""
    parents = tuple(int(x) for x in parents)
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        raise ValueError(f"parents must start with -1 and have 0 <= parents[i] < i, got {parents}")
    depth = np.zeros(len(parents), np.int32)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return depth


def tree_ancestors(parents: tuple) -> np.ndarray:
    """bool[T, T]: ``[i, j]`` when node j is node i or one of its ancestors (the tree attention mask)."""
    tree_depths(parents)
    seen = np.eye(len(parents), dtype=bool)
    for i in range(1, len(parents)):
        seen[i] |= seen[parents[i]]
    return seen


DraftModel = Union[LanguageModel, FeatureDraftModel]
"""Anything the loop can draft with (the draft protocol of the module doc)."""


__all__ = ["Cache", "DraftModel", "FeatureDraftModel", "LanguageModel", "Params", "tree_ancestors", "tree_depths"]
