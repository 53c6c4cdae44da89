"""KGW in JAX (lefthash): the whole-vocabulary green mask a generation loop needs and the biased
logits. Public face: :mod:`wmspec_jax.interop.hf_kgw`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.interop.hf_kgw._config import HFKGWConfig, _check_config, _check_vocab, _k
from wmspec_jax.interop.hf_kgw._mt19937 import _fy_green_set_jax, _mt_draws_jax
from wmspec_jax.interop.hf_kgw._seeding import _key_words, _lefthash_seed32
from wmspec_jax.validation import concrete


def _green_mask_impl(key_words, last_tokens, vocab_size: int, k: int):
    t = last_tokens.astype(jnp.uint32)
    seeds = _lefthash_seed32(jnp, key_words[0], key_words[1], t)
    raw = _mt_draws_jax(seeds, k)                                   # [B, k]
    i = jnp.arange(k, dtype=jnp.uint32)
    j = (i + raw % (jnp.uint32(vocab_size) - i)).astype(jnp.int32)
    return _fy_green_set_jax(j, vocab_size)


_green_mask_jit = jax.jit(_green_mask_impl, static_argnums=(2, 3))


def _key_array(config: HFKGWConfig):
    k0, k1 = _key_words(config)
    return jnp.asarray(np.array([k0, k1], np.uint32))   # traced: the key is not baked into the program


def _check_contexts(contexts, vocab_size: int):
    shape = np.shape(contexts)
    if len(shape) != 2 or shape[1] < 1:
        raise ValueError(f"contexts must be int[B, L >= 1], got shape {shape}")
    c = concrete(contexts)
    if c is not None and c.size:
        if not np.issubdtype(c.dtype, np.integer):
            raise ValueError(f"contexts must hold integer token ids, got dtype {c.dtype}")
        if c.min() < 0 or c.max() >= vocab_size:
            raise ValueError(f"contexts hold token ids outside [0, {vocab_size})")


def _require_lefthash(config: HFKGWConfig, what: str):
    if config.seeding_scheme != "lefthash":
        raise ValueError(f"{what} is JAX for lefthash only; for selfhash use the NumPy "
                         "greenlist / is_green / processor_call")


def green_mask(config: HFKGWConfig, contexts, vocab_size: int) -> jax.Array:
    """lefthash green mask over the vocabulary: bool[B, V] for contexts int[B, L] (L >= 1).

    Row b is ``isin(arange(V), _get_greenlist_ids(contexts[b]))``; only ``contexts[:, -1]`` matters
    (transformers' lefthash). jit-able (static V; the key travels as a traced uint32 pair);
    uint32 arithmetic only (no x64). mt19937 is a ``lax.scan``; the shuffle's green set comes from
    pointer jumping (one scatter-max, a few doubling gathers; :func:`_fy_green_set_jax`) instead of
    k sequential swaps.
    """
    config = _check_config(config)
    _require_lefthash(config, "green_mask")
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    _check_contexts(contexts, V)
    return _green_mask_jit(_key_array(config), jnp.asarray(contexts)[:, -1], V, k)


def biased_logits(config: HFKGWConfig, contexts, logits, vocab_size: int | None = None) -> jax.Array:
    """The processor's output for lefthash: ``logits + bias`` on green ids. float[B, W].

    Args:
      contexts: int[B, L] the last L tokens of ``input_ids`` (L = context_width; when L is smaller
        than ``context_width`` the logits come back unchanged, as transformers skips seeding).
      logits: float[B, W] the scores the processor receives: in ``generate`` these are the
        logits AFTER temperature / top-k / top-p (the watermark processor runs last).
      vocab_size: the model config's V (default W); ids >= V are never green.
    Float32 and half types are added in float32 (torch's opmath), float64 in float64.
    """
    config = _check_config(config)
    _require_lefthash(config, "biased_logits")
    shape = np.shape(logits)
    if len(shape) != 2:
        raise ValueError(f"logits must be float[B, W], got shape {shape}")
    W = shape[1]
    V = _check_vocab(W if vocab_size is None else vocab_size)
    if V > W:
        raise ValueError(f"vocab_size {V} exceeds the logits' width {W}")
    if np.shape(contexts)[:1] != shape[:1]:
        raise ValueError(f"contexts {np.shape(contexts)} and logits {shape} differ in batch size")
    logits = jnp.asarray(logits)
    if np.shape(contexts)[1] < config.context_width:
        return logits
    mask = green_mask(config, contexts, V)
    if W > V:
        mask = jnp.pad(mask, ((0, 0), (0, W - V)))
    if logits.dtype == jnp.float64:
        return jnp.where(mask, logits + jnp.float64(config.bias), logits)
    up = logits.astype(jnp.float32) + jnp.float32(config.bias)
    return jnp.where(mask, up.astype(logits.dtype), logits)


__all__ = ["biased_logits", "green_mask"]
