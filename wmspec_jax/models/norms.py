"""RMSNorm in the two styles of the supported families."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rms_norm(x: jax.Array, w: jax.Array, eps: float, gemma_style: bool = False) -> jax.Array:
    """RMSNorm over the last axis; returns x.dtype.

    The statistics are computed in float32. Llama / Mistral / Qwen scale by
    ``w`` after casting back to x.dtype; Gemma scales by ``1 + w`` in float32
    and casts afterwards (the two orders transformers uses, which differ in
    bfloat16).
    """
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    if gemma_style:
        return (xf * (1.0 + w.astype(jnp.float32))).astype(x.dtype)
    return w * xf.astype(x.dtype)


__all__ = ["rms_norm"]
