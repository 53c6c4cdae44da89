"""Gumbel-max (Eq. 2): ζ = (U_w) i.i.d. uniforms, S(P, ζ) the point mass at argmax_w log(U_w) / P_w.

The paper's first decoder, unbiased and degenerate (maximal strength Ent(P), Thm 3.2). Its texts are
scored on the emitted token's uniform U_{w_t} of each stream (:mod:`wmspec_jax.detect.gumbel`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from wmspec_jax import prf, validation
from wmspec_jax.decoders.base import GUMBEL, WatermarkDecoder
from wmspec_jax.decoders.kernels import _float, _one_hot_like, candidate_tokens, first_argmax


@dataclasses.dataclass(frozen=True)
class GumbelMax(WatermarkDecoder):
    """Gumbel-max, Eq. 2 (no settings)."""

    kind: ClassVar[str] = GUMBEL
    title: ClassVar[str] = "Gumbel-max"
    record_fields: ClassVar[tuple] = ()
    family: ClassVar[str] = GUMBEL
    degenerate: ClassVar[bool] = True

    def watermark_index(self, weights, ids, seeds, uniform=None):
        tokens = candidate_tokens(weights, ids)
        return gumbel_max_index(weights, prf.token_uniforms(seeds[:, None, :], tokens))

    def vocab_zeta(self, seeds, vocab_size: int):
        """float32[n, V] the uniforms U_w."""
        return prf.vocab_uniforms(seeds, vocab_size)

    def apply(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        return jax.nn.one_hot(self.point(p, zeta), p.shape[-1], dtype=jnp.float32)

    def point(self, probs, zeta):
        return gumbel_max_token(jnp.log(jnp.asarray(probs, jnp.float32)), zeta)

    def token_statistic(self, seeds, tokens, *, version: str, vocab_size: int):
        """U_{w_t}, the emitted token's uniform (the same in every PRF version)."""
        return prf.token_uniforms(seeds, tokens)


def gumbel() -> GumbelMax:
    return GumbelMax()


def gumbel_max_index(probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """argmax_w log(U_w) / P_w (Eq. 2) on probabilities, unchecked kernel.

    Args:
      probs: float[..., C] P (0 for excluded tokens, which never win:
        log(U_w) / 0 = −inf).
      uniforms: float[..., C] in (0, 1).

    Returns:
      int32[...] the first maximiser.
    """
    return first_argmax(jnp.log(_float(uniforms)) / _float(probs))


def gumbel_max_token(log_probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """argmax_w log(U_w) / P_w (Eq. 2) from log-probabilities, unchecked kernel.

    Args:
      log_probs: float[..., V] log P (−inf for excluded tokens).
      uniforms: float[..., V] in (0, 1).

    Returns:
      int32[...] the selected token (never one with P_w = 0).
    """
    return gumbel_max_index(jnp.exp(_float(log_probs)), uniforms)


def gumbel_max(probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """Gumbel-max decoder, Eq. (2): the point mass at argmax_w log(U_w) / P_w.

    Args:
      probs: float[..., V] next-token distribution P.
      uniforms: float[..., V] ζ = (U_w), i.i.d. U(0, 1).

    Returns:
      float32[..., V] one-hot P_ζ.
    """
    validation.check_probs(probs)
    if jnp.shape(uniforms) != jnp.shape(probs):
        raise ValueError(f"uniforms shape {jnp.shape(uniforms)} != probs shape {jnp.shape(probs)}")
    validation.check_unit_interval(uniforms, "uniforms", open_interval=True)
    p = _float(probs)
    return _one_hot_like(gumbel_max_token(jnp.log(p), uniforms), p)


__all__ = ["GumbelMax", "gumbel", "gumbel_max", "gumbel_max_index", "gumbel_max_token"]
