"""Rotary position embeddings (RoPE): frequencies, scaling variants, application.

Frequencies are computed on the host in float32 exactly as
``transformers.modeling_rope_utils`` does for the rope types accepted here:

* ``default``: ``theta ** (-2i / d)`` (Llama-2, Gemma, Mistral, Qwen);
* ``linear``: the default divided by ``factor``;
* ``llama3``: Llama-3.1+'s band-wise rescaling (low frequencies divided by
  ``factor``, high ones kept, a smooth ramp between the two wavelengths
  ``original_max_position_embeddings / {low,high}_freq_factor``).

All three have ``attention_factor = 1`` in transformers, so cos / sin are
not rescaled. Other types (``yarn``, ``dynamic``, ``longrope``, ...) are
refused by :mod:`wmspec_jax.models.hf_config`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

ROPE_TYPES = ("default", "linear", "llama3")
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


class UnsupportedRopeError(ValueError):
    """A rope scaling type or parameter this package does not implement."""


def rope_type(scaling: Mapping[str, Any] | None) -> str:
    """The rope type named by a scaling dict (``rope_type`` or legacy ``type``)."""
    scaling = dict(scaling or {})
    return str(scaling.get("rope_type", scaling.get("type", "default")))


def inv_frequencies(head_dim: int, theta: float,
                    scaling: Mapping[str, Any] | None = None) -> np.ndarray:
    """float32[head_dim // 2] inverse frequencies, including any scaling."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.int64)
                           .astype(np.float32) / head_dim))
    inv = inv.astype(np.float32)
    scaling = dict(scaling or {})
    kind = rope_type(scaling)
    if kind == "default":
        return inv
    if kind == "linear":
        return (inv / float(scaling["factor"])).astype(np.float32)
    if kind == "llama3":
        missing = [k for k in LLAMA3_KEYS if k not in scaling]
        if missing:
            raise UnsupportedRopeError(f"llama3 rope scaling is missing {missing}")
        factor = float(scaling["factor"])
        low = float(scaling["low_freq_factor"])
        high = float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        low_wavelen = old_len / low
        high_wavelen = old_len / high
        wavelen = 2 * math.pi / inv
        out = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, smoothed, out).astype(np.float32)
    raise UnsupportedRopeError(f"unsupported rope scaling type {kind!r}; supported: {ROPE_TYPES}")


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotary embedding in the ``rotate_half`` layout (first half / second half of a head).

    Args:
      x: [B, T, N, Dh] queries or keys.
      positions: int32[B, T].
      inv_freq: float32[Dh // 2].

    Returns x rotated, in x.dtype (the rotation is computed in float32).
    """
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, Dh/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


__all__ = ["LLAMA3_KEYS", "ROPE_TYPES", "UnsupportedRopeError", "apply_rope", "inv_frequencies", "rope_type"]
