"""Wraps the functional transformer in the :class:`wmspec_jax.lm.LanguageModel` protocol."""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from wmspec_jax.lm import LanguageModel
from wmspec_jax.models import cache as cache_lib
from wmspec_jax.models import transformer
from wmspec_jax.models.config import TransformerConfig

# head(params, hidden dtype[B, T, D]) -> float32[B, T, V]
Head = Callable[[dict, jax.Array], jax.Array]


def _check_step_inputs(cache: cache_lib.KVCache, tokens, num_new) -> None:
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


def step(config: TransformerConfig, head: Head | None, params, cache: cache_lib.KVCache,
         tokens: jax.Array, num_new: jax.Array) -> tuple[jax.Array, cache_lib.KVCache]:
    """Appends ``tokens[b, :num_new[b]]`` to row b; returns float32[B, T, V] logits.

    Row b's token i < num_new[b] goes to position/slot ``lengths[b] + i``.
    Entries ``i >= num_new[b]`` are computed on whatever tokens are there
    (finite, meaningless) and are not written, so a row with ``num_new = 0``
    leaves its cache untouched. ``num_new`` is clipped to [0, T].
    """
    tokens = jnp.asarray(tokens)
    num_new = jnp.asarray(num_new)
    _check_step_inputs(cache, tokens, num_new)
    t = tokens.shape[1]
    positions = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
    num_new = jnp.clip(num_new.astype(jnp.int32), 0, t)
    write = jnp.arange(t, dtype=jnp.int32)[None, :] < num_new[:, None]
    h, cache = transformer.hidden_states(
        config, params, tokens.astype(jnp.int32), positions, cache,
        cache.lengths + num_new, write)
    logits = (head or functools.partial(transformer.lm_logits, config))(params, h)
    return logits, cache


def make_language_model(config: TransformerConfig, *, name: str,
                        dtype=jnp.float32, head: Head | None = None,
                        vocab_size: int | None = None) -> LanguageModel:
    """Builds the protocol object for ``config``.

    Args:
      dtype: dtype of the KV cache (use the params dtype).
      head: optional replacement for the tied/untied LM head, used by drafts
        with a cheaper output layer; it must return float32[B, T, V].
      vocab_size: V of the logits (defaults to ``config.vocab_size``).
    """
    return LanguageModel(
        name=name,
        vocab_size=int(vocab_size or config.vocab_size),
        init_cache=functools.partial(cache_lib.init_cache, config, dtype=dtype),
        step=functools.partial(step, config, head),
        rewind=cache_lib.rewind,
        cache_lengths=cache_lib.cache_lengths,
    )
