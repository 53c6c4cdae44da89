"""Repeated-context rule (Sec. 4.1: "repeated context masking").

A position whose context (its previous h tokens) already occurred at an
earlier position is neither watermarked nor scored: its ζ would repeat, the
watermark would then bias the text, and a detector would count the same
pseudorandom value twice.

The rule, used identically by generation and detection:

    Position p of a row is *scored* iff  start <= p < length  and no position
    q with start <= q < p has the same context (tokens[q-h:q] == tokens[p-h:p]).

``start`` is where the watermarked text begins: the prompt length during
generation. The prompt's own positions never enter the "seen" set (prompt
contexts are not remembered), but the contexts of the first generated
positions do include prompt tokens. A detector that knows the prompt passes
the prompt + text with ``start = len(prompt)`` and reproduces generation
exactly. A detector that only has the text passes ``start = h`` (earlier
positions have no full context); see :func:`detection_start`.

"Seen" is derived from the token buffer itself, so rollback after a rejected
draft needs no extra bookkeeping.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax import prf


def detection_start(width: int, prompt_length: int = 0) -> int:
    """First scorable position of a text: ``max(h, prompt_length)``."""
    return max(prf.check_context_width(width), int(prompt_length))


def scored_mask(tokens: jax.Array, lengths: jax.Array, start: jax.Array, width: int) -> jax.Array:
    """Positions that are watermarked / scored under the repeated-context rule.

    Args:
      tokens: int[B, L] token buffers.
      lengths: int[B] valid length of each row.
      start: int[B] (or scalar) first position of the watermarked text.
      width: context width h.

    Returns:
      bool[B, L]: True where ``start <= p < length`` and p's context is new.

    Exact (sorts the contexts themselves, no fingerprints): O(h L log L) per row.
    """
    width = prf.check_context_width(width)
    tokens = jnp.asarray(tokens, jnp.int32)
    bsz, length = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (bsz, length))
    start = jnp.broadcast_to(jnp.asarray(start, jnp.int32), (bsz,))
    in_range = (pos >= start[:, None]) & (pos < jnp.asarray(lengths, jnp.int32)[:, None])
    ctx = prf.gather_contexts(tokens, pos, width)  # [B, L, h]

    def one_row(ctx_row, valid_row):
        # lexsort: last key is primary. Invalid positions sort last, then
        # equal contexts are adjacent, in position order.
        keys = (jnp.arange(length),) + tuple(ctx_row[:, j] for j in reversed(range(width)))
        order = jnp.lexsort(keys + ((~valid_row).astype(jnp.int32),))
        sorted_ctx = ctx_row[order]
        sorted_valid = valid_row[order]
        same_as_prev = jnp.all(sorted_ctx[1:] == sorted_ctx[:-1], axis=-1) & sorted_valid[:-1]
        repeated_sorted = jnp.concatenate([jnp.zeros((1,), bool), same_as_prev])
        repeated = jnp.zeros((length,), bool).at[order].set(repeated_sorted)
        return valid_row & ~repeated

    return jax.vmap(one_row)(ctx, in_range)


def before_start(tokens: jax.Array, start: jax.Array, fill) -> jax.Array:
    """int32[B, L] ``tokens`` with ``fill`` at the positions before ``start`` (int[B]): the contexts of a
    PRF that keys the first generated tokens by its own padding, not by the prompt (another engine's,
    :attr:`wmspec_jax.decoders.WatermarkDecoder.context_fill`); ``fill=None`` returns ``tokens``."""
    tokens = jnp.asarray(tokens, jnp.int32)
    if fill is None:
        return tokens
    pos = jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]
    return jnp.where(pos < jnp.asarray(start, jnp.int32)[:, None], jnp.int32(fill), tokens)


def is_new_context(tokens: jax.Array, position: jax.Array, start: jax.Array, width: int, fill=None) -> jax.Array:
    """Whether ``position`` would be scored: its context is unseen in [start, position).

    The incremental form of :func:`scored_mask` used inside the generation
    loop (the caller guarantees ``position >= start``); exact, O(L h) per row.

    Args:
      tokens: int[B, L] buffer holding at least the tokens before ``position``.
      position: int[B].
      start: int[B].
      width: h.
      fill: the token that stands for positions before ``start`` in contexts (:func:`before_start`);
        None: the prompt's tokens.

    Returns:
      bool[B].
    """
    tokens = before_start(tokens, start, fill)
    bsz, length = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (bsz, length))
    all_ctx = prf.gather_contexts(tokens, pos, width)  # [B, L, h]
    own = prf.gather_contexts(tokens, jnp.asarray(position, jnp.int32)[:, None], width)  # [B, 1, h]
    earlier = (pos >= jnp.asarray(start, jnp.int32)[:, None]) & (pos < jnp.asarray(position)[:, None])
    seen = jnp.any(jnp.all(all_ctx == own, axis=-1) & earlier, axis=-1)
    return ~seen


__all__ = ["before_start", "detection_start", "is_new_context", "scored_mask"]
