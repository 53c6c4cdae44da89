"""Per-row windows of the loop's [B, L] buffers (tokens, records, features): each row reads or writes at
its own offset. Pure, jit-friendly; callers leave slack at the end of a buffer so a window never clamps."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def row_slice(x: jax.Array, start: jax.Array, size: int) -> jax.Array:
    """x[b, start[b] : start[b] + size] for every row: [B, size, ...]."""
    return jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, size))(x, start)


def row_update(x: jax.Array, start: jax.Array, window: jax.Array) -> jax.Array:
    """x with x[b, start[b] : start[b] + w] = window[b] for every row."""
    return jax.vmap(lambda row, s, w: jax.lax.dynamic_update_slice_in_dim(row, w, s, 0))(x, start, window)


def set_at(x: jax.Array, pos: jax.Array, value: jax.Array) -> jax.Array:
    """x with x[b, pos[b]] = value[b]."""
    return x.at[jnp.arange(x.shape[0]), pos].set(value)


__all__ = ["row_slice", "row_update", "set_at"]
