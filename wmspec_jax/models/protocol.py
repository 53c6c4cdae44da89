"""Wraps the functional transformer in the :class:`wmspec_jax.lm.LanguageModel` protocol.

Bad inputs at this boundary:

* **Concrete (eager) calls** raise ``ValueError`` when a row would write
  past the cache capacity (``lengths + num_new > capacity``) or when a token
  that is written (``i < num_new``) lies outside ``[0, V)``.
  :func:`check_step_inputs` is the same check as a function, for host-side
  validation before entering ``jit``. After the check an eager call runs
  one compiled step per shape (as ``jax.jit(lm.step)`` would), not one
  dispatch per primitive.
* **Traced calls** (inside ``jit``, e.g. the speculative loop, which keeps
  every index in range by construction) cannot raise; there the affected
  positions get NaN logits instead of silently wrong numbers: a written
  token id outside ``[0, V)`` embeds as NaN and a position at or past the
  capacity has its hidden state set to NaN. ``speculative.generate``
  reports NaN logits as an error, so nothing wrong goes unnoticed.

Entries ``i >= num_new`` are computed on token 0 whatever the caller put
there, so they stay finite (and meaningless) as the protocol promises.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.lm import LanguageModel, tree_ancestors, tree_depths
from wmspec_jax.models import cache as cache_lib
from wmspec_jax.models import partitioning, transformer
from wmspec_jax.models.attention import DEFAULT_BLOCK
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.validation import is_concrete

# head(params, hidden dtype[B, T, D]) -> float32[B, T, V]
Head = Callable[[dict, jax.Array], jax.Array]


def check_attention_block(block) -> int:
    """``block`` as an int >= 1; TypeError / ValueError otherwise."""
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
        raise TypeError(f"attention_block must be an int, got {block!r}")
    if int(block) < 1:
        raise ValueError(f"attention_block must be >= 1, got {block}")
    return int(block)


def _check_shapes(cache: cache_lib.KVCache, tokens, num_new) -> None:
    batch = cache.lengths.shape[0]
    if tokens.ndim != 2 or tokens.shape[0] != batch:
        raise ValueError(f"tokens must be [B={batch}, T], got shape {tokens.shape}")
    if num_new.shape != (batch,):
        raise ValueError(f"num_new must be [B={batch}], got shape {num_new.shape}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer) or not jnp.issubdtype(
            num_new.dtype, jnp.integer):
        raise TypeError(
            f"tokens and num_new must be integers, got {tokens.dtype}, {num_new.dtype}")
    if tokens.shape[1] > cache.capacity:
        raise ValueError(
            f"T={tokens.shape[1]} exceeds the cache capacity {cache.capacity}")


def check_step_inputs(cache: cache_lib.KVCache, tokens, num_new, vocab_size: int) -> None:
    """Raises ValueError if a ``step`` would overflow the cache or embed an invalid id.

    Host-side (needs concrete values). Checks only the tokens that are
    written, ``tokens[b, :num_new[b]]`` (num_new clipped to [0, T] as in
    ``step``).
    """
    tokens = np.asarray(tokens)
    t = tokens.shape[1]
    num_new = np.clip(np.asarray(num_new).astype(np.int64), 0, t)
    lengths = np.asarray(cache.lengths).astype(np.int64)
    over = np.flatnonzero(lengths + num_new > cache.capacity)
    if over.size:
        b = int(over[0])
        raise ValueError(
            f"step would write past the cache capacity {cache.capacity}: row {b} holds "
            f"{lengths[b]} tokens and appends {num_new[b]} (rows {over.tolist()[:8]} overflow)")
    written = np.arange(t)[None, :] < num_new[:, None]
    bad = written & ((tokens < 0) | (tokens >= vocab_size))
    if bad.any():
        b, i = map(int, np.argwhere(bad)[0])
        raise ValueError(
            f"token id {int(tokens[b, i])} at row {b}, position {i} is outside the "
            f"vocabulary [0, {vocab_size})")


def step(config: TransformerConfig, head: Head | None, params, cache: cache_lib.KVCache,
         tokens: jax.Array, num_new: jax.Array, *, logit_width: int | None = None,
         return_hidden: bool = False, hidden_fn=None, attention_block: int = DEFAULT_BLOCK):
    """Appends ``tokens[b, :num_new[b]]`` to row b; returns float32[B, T, W] logits.

    Row b's token i < num_new[b] goes to position/slot ``lengths[b] + i``.
    Entries ``i >= num_new[b]`` are computed on token 0 (finite, meaningless)
    and are not written, so a row with ``num_new = 0`` leaves its cache
    untouched. ``num_new`` is clipped to [0, T]. Bad inputs: module doc.

    ``logit_width`` W (default V = ``config.vocab_size``) pads the logits with
    −inf up to W, for a pair whose two checkpoints pad the same tokenizer's
    vocabulary to different sizes; an input id in [V, W) is embedded as id 0
    (it has probability 0 under this model, so in speculative sampling it is
    only ever fed to a draft, whose proposals may be any function of the
    context without biasing the output, or to a target that rejects it).

    ``return_hidden``: also return the final hidden states dtype[B, T, D]
    (the head's input: the features a :class:`~wmspec_jax.lm.FeatureDraftModel`
    reads), as ``(logits, hidden, cache)``. ``hidden_fn`` replaces
    :func:`transformer.hidden_states` (same arguments after ``config``; feature drafts).
    ``attention_block``: static slots per attention block
    (:func:`wmspec_jax.models.attention.attend`).
    """
    tokens = jnp.asarray(tokens)
    num_new = jnp.asarray(num_new)
    _check_shapes(cache, tokens, num_new)
    width = int(logit_width or config.vocab_size)
    static = dict(head=head, width=width, return_hidden=return_hidden, attention_block=attention_block)
    if all(map(is_concrete, (tokens, num_new, cache.lengths))):
        check_step_inputs(cache, tokens, num_new, width)
        if hidden_fn is None:
            # Called outside jit: one compiled step per shape, not one dispatch per primitive.
            return _jitted_step(config, params, cache, tokens, num_new, **static)
    return _step(config, params, cache, tokens, num_new, hidden_fn=hidden_fn, **static)


def _step(config: TransformerConfig, params, cache: cache_lib.KVCache, tokens: jax.Array, num_new: jax.Array, *,
          head: Head | None, width: int, return_hidden: bool, attention_block: int, hidden_fn=None):
    """:func:`step` after its host-side checks."""
    t = tokens.shape[1]
    positions = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
    num_new = jnp.clip(num_new.astype(jnp.int32), 0, t)
    write = jnp.arange(t, dtype=jnp.int32)[None, :] < num_new[:, None]
    ids = jnp.where(write, tokens.astype(jnp.int32), 0)
    if width > config.vocab_size:
        ids = jnp.where((ids >= config.vocab_size) & (ids < width), 0, ids)
    hidden = hidden_fn or functools.partial(transformer.hidden_states, config)
    h, cache = hidden(params, ids, positions, cache, cache.lengths + num_new, write,
                      attention_block=attention_block)
    # Traced overflow cannot raise: poison it so the logits cannot be silently wrong.
    overflow = write & (positions >= cache.capacity)
    h = jnp.where(overflow[..., None], jnp.asarray(jnp.nan, h.dtype), h)
    logits = (head or functools.partial(transformer.lm_logits, config))(params, h)
    if width > logits.shape[-1]:
        logits = jnp.pad(logits, ((0, 0), (0, 0), (0, width - logits.shape[-1])),
                         constant_values=-jnp.inf)
    if return_hidden:
        return logits, h, cache
    return logits, cache


_jitted_step = jax.jit(_step, static_argnames=("config", "head", "width", "return_hidden", "attention_block",
                                               "hidden_fn"))


def tree_step(config: TransformerConfig, head: Head | None, params, cache: cache_lib.KVCache, tokens: jax.Array,
              parents: tuple, return_hidden: bool = False, *, logit_width: int | None = None,
              attention_block: int = DEFAULT_BLOCK):
    """Scores a token tree in one forward (the protocol's ``step_tree``, :mod:`wmspec_jax.lm`).

    ``tokens`` int32[B, T] are the nodes, ``parents`` (static, T ints) their tree: node i goes to
    slot ``lengths[b] + i`` at position ``lengths[b] + depth(i)`` and attends to the row's cache and
    to its ancestors. Returns (float32[B, T, W] logits, dtype[B, T, D] hidden or None, cache with
    unchanged lengths). Bad inputs as :func:`step` (every node is written); a layer whose attention
    window does not exceed the tree's depth is refused (ValueError).
    """
    tokens = jnp.asarray(tokens)
    parents = tuple(int(x) for x in parents)
    depths = tree_depths(parents)
    if tokens.ndim != 2 or tokens.shape[1] != len(parents):
        raise ValueError(f"tokens must be [B, T={len(parents)}] (one per node of parents), got {tokens.shape}")
    if int(config.attention_windows().min()) <= int(depths.max()):
        raise ValueError(f"a token tree of depth {int(depths.max())} needs attention windows longer than it")
    full = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
    _check_shapes(cache, tokens, full)
    width = int(logit_width or config.vocab_size)
    if all(map(is_concrete, (tokens, cache.lengths))):
        check_step_inputs(cache, tokens, full, width)
    return _jitted_tree_step(config, params, cache, tokens, parents, head=head, width=width,
                             return_hidden=bool(return_hidden), attention_block=attention_block)


@functools.partial(jax.jit, static_argnames=("config", "parents", "head", "width", "return_hidden",
                                             "attention_block"))
def _jitted_tree_step(config: TransformerConfig, params, cache: cache_lib.KVCache, tokens: jax.Array,
                      parents: tuple, *, head: Head | None, width: int, return_hidden: bool,
                      attention_block: int):
    t = tokens.shape[1]
    slots = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
    positions = cache.lengths[:, None] + jnp.asarray(tree_depths(parents))[None, :]
    ids = tokens.astype(jnp.int32)
    if width > config.vocab_size:
        ids = jnp.where((ids >= config.vocab_size) & (ids < width), 0, ids)
    h, cache = transformer.hidden_states(config, params, ids, positions, cache, cache.lengths,
                                         attention_block=attention_block, slots=slots,
                                         tree=(cache.lengths, tree_ancestors(parents)))
    h = jnp.where((slots >= cache.capacity)[..., None], jnp.asarray(jnp.nan, h.dtype), h)
    logits = (head or functools.partial(transformer.lm_logits, config))(params, h)
    if width > logits.shape[-1]:
        logits = jnp.pad(logits, ((0, 0), (0, 0), (0, width - logits.shape[-1])), constant_values=-jnp.inf)
    return logits, (h if return_hidden else None), cache


def make_language_model(config: TransformerConfig, *, name: str,
                        dtype=jnp.float32, head: Head | None = None,
                        vocab_size: int | None = None,
                        mesh: jax.sharding.Mesh | None = None,
                        attention_block: int = DEFAULT_BLOCK) -> LanguageModel:
    """Builds the protocol object for ``config``.

    Args:
      dtype: dtype of the KV cache (use the params dtype).
      head: optional replacement for the tied/untied LM head, used by drafts
        with a cheaper output layer; it must return float32[B, T, V].
      vocab_size: W, the width of the logits (default ``config.vocab_size``);
        a larger W pads them with −inf (see :func:`step`).
      mesh: optional ``jax.sharding.Mesh`` with axes ``data`` and ``model``:
        caches are then created split over rows and key/value heads
        (:mod:`wmspec_jax.models.partitioning`), inside ``jit`` too. Pass
        params placed with :func:`wmspec_jax.sharding.shard_params`.
      attention_block: slots per attention block (static): a cache longer
        than this is read block by block up to the longest row
        (:func:`wmspec_jax.models.attention.attend`).
    """
    width = int(vocab_size or config.vocab_size)
    attention_block = check_attention_block(attention_block)
    if width < config.vocab_size:
        raise ValueError(f"vocab_size={width} is smaller than the model's {config.vocab_size}")
    sharding = None if mesh is None else partitioning.cache_shardings(config, mesh)
    return LanguageModel(
        name=name,
        vocab_size=width,
        init_cache=functools.partial(cache_lib.init_cache, config, dtype=dtype, sharding=sharding),
        step=functools.partial(step, config, head, logit_width=width, attention_block=attention_block),
        step_hidden=functools.partial(step, config, head, logit_width=width, return_hidden=True,
                                      attention_block=attention_block),
        hidden_size=config.hidden_size,
        step_tree=functools.partial(tree_step, config, head, logit_width=width, attention_block=attention_block),
        rewind=cache_lib.rewind,
        cache_lengths=cache_lib.cache_lengths,
    )


__all__ = ["Head", "check_attention_block", "check_step_inputs", "make_language_model", "step", "tree_step"]
