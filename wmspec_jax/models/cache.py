"""Static-shape key/value cache with per-row lengths.

One ``KVCache`` holds one key array and one value array per layer (``k[l]`` /
``v[l]`` is layer ``l``'s pair, each its own buffer), so a step updates each
layer's slots in place and reads only that layer's array; nothing is copied
per step. Rows are ragged: ``lengths[b]`` counts the valid slots of row ``b``.
Rolling back rejected draft tokens is just lowering ``lengths``; the stale
slots are overwritten by the next write and are never attended before that,
because a query at position ``p`` only sees slots ``<= p``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from wmspec_jax.models.config import TransformerConfig


class KVCache(NamedTuple):
    """k, v: tuples of L arrays dtype[B, S, Hkv, Dh]; lengths: int32[B] valid slots per row."""

    k: tuple
    v: tuple
    lengths: jax.Array

    @property
    def capacity(self) -> int:
        """S, the number of slots per row (static)."""
        return self.k[0].shape[1]


def init_cache(config: TransformerConfig, batch_size: int, max_length: int,
               dtype=jnp.float32, sharding: KVCache | None = None) -> KVCache:
    """Allocates an all-zero cache of ``max_length`` slots per row, lengths 0.

    Writes use scatter with ``mode="drop"``: a token written past the last
    slot is dropped instead of being clamped onto (and corrupting) the last
    valid slot, so no slack is needed for the garbage tail of a ragged write.
    The caller must still keep ``length + num_new <= max_length`` for the
    tokens it actually needs (``protocol.step`` checks it on concrete values).

    Args:
      sharding: optional ``KVCache`` of ``jax.sharding.Sharding`` (see
        :func:`wmspec_jax.models.partitioning.cache_shardings`): the cache is
        created with that layout, also inside ``jit``, so the loop's caches
        are split over heads and batch rather than left to propagation.

    Raises:
      ValueError: non-positive sizes, or ``max_length`` beyond the config's
        ``max_position_embeddings`` (positions the model was not trained for).
    """
    if int(batch_size) <= 0 or int(max_length) <= 0:
        raise ValueError(
            f"batch_size and max_length must be positive, got {batch_size}, {max_length}")
    limit = config.max_position_embeddings
    if limit is not None and int(max_length) > limit:
        raise ValueError(
            f"a cache of {max_length} positions exceeds the model's max_position_embeddings="
            f"{limit}: shorten the prompt or the number of new tokens")
    shape = (int(batch_size), int(max_length), config.num_kv_heads, config.head_dim)
    layers = range(config.num_layers)
    cache = KVCache(k=tuple(jnp.zeros(shape, dtype) for _ in layers),
                    v=tuple(jnp.zeros(shape, dtype) for _ in layers),
                    lengths=jnp.zeros((int(batch_size),), jnp.int32))
    if sharding is not None:
        cache = jax.tree_util.tree_map(jax.lax.with_sharding_constraint, cache, sharding)
    return cache


def rewind(cache: KVCache, lengths: jax.Array) -> KVCache:
    """Sets the per-row lengths (int32[B]) without touching k/v (rollback)."""
    lengths = jnp.asarray(lengths)
    if lengths.shape != cache.lengths.shape:
        raise ValueError(
            f"lengths must have shape {cache.lengths.shape}, got {lengths.shape}")
    return cache._replace(lengths=lengths.astype(jnp.int32))


def cache_lengths(cache: KVCache) -> jax.Array:
    """int32[B] number of valid slots per row."""
    return cache.lengths


__all__ = ["KVCache", "cache_lengths", "init_cache", "rewind"]
