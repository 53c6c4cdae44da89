"""Keyed-permutation schemes beyond the paper: the inverse transform (Kuditipudi et al. 2023) and DiPmark /
γ-reweight (Wu et al. 2024; Hu et al. 2024).

ζ = (π, u): π orders the tokens by their 32-bit hash in the scheme's own lane (PRF v2; v1 used
Gumbel-max's token lane, so one secret gave the schemes correlated streams), ties broken by candidate
position; u is the stream's per-position uniform.

* Inverse transform: the point mass at the token whose interval of the π-ordered CDF holds u. Unbiased
  for every π and degenerate (the same law over ζ as Hu et al.'s δ-reweight).
* DiPmark: the π-ordered CDF F reweighted to max(F − α, 0) + max(F − (1 − α), 0), unbiased over a
  uniform π and not degenerate; α = 1/2 is γ-reweight (``"gamma_reweight"``). As Wu et al. publish it, the
  token is drawn from the reweighted distribution with private (true) randomness.

Both published versions draw π by a keyed shuffle of the vocabulary seeded by the context; the hash
order is our construction of it, and a tie (two tokens with one 32-bit hash, probability ~V²/2³³ per
position) makes π not exactly uniform, a bias of that order in DiPmark's law (none in inverse
transform's). Kuditipudi et al. index one key sequence by position and score by a Levenshtein alignment
over offsets; here ζ comes from the h previous tokens like every scheme's unless the loop keys it by a key
sequence (:mod:`wmspec_jax.key_sequence`, scored by :mod:`wmspec_jax.detect.edit_alignment`), where each key
element has its own π (theirs: one π per key).
Texts are scored on one U(0, 1) value per token and stream (:mod:`wmspec_jax.detect.streams`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, validation
from wmspec_jax.decoders.base import DEFAULT_DIPMARK_ALPHA, GUMBEL, WatermarkDecoder, check_real
from wmspec_jax.decoders.kernels import _float, _one_hot_like, candidate_tokens, inverse_cdf

INVERSE_TRANSFORM = "inverse_transform"
DIPMARK = "dipmark"
GAMMA_REWEIGHT = "gamma_reweight"


class _Permuted(WatermarkDecoder):
    """What both permutation schemes share: π from the scheme's lane, ζ for the Monte Carlo."""

    family: ClassVar[str] = GUMBEL

    def _order(self, seeds, tokens, version: str = prf.PRF_VERSION):
        return prf.hash_values(seeds, tokens, prf.order_lane(self.kind, version))

    def vocab_zeta(self, seeds, vocab_size: int):
        """uint32[n, V + 1]: the V token hashes that order π, then the hash of the position uniform u."""
        tokens = jnp.arange(vocab_size, dtype=jnp.uint32)
        order = self._order(seeds[:, None, :], tokens)
        position = prf.hash_values(seeds, jnp.uint32(0), prf.Lane.POSITION_UNIFORM)
        return jnp.concatenate([order, position[:, None]], axis=-1)


@dataclasses.dataclass(frozen=True)
class InverseTransform(_Permuted):
    """Inverse-transform sampling along π (no settings)."""

    kind: ClassVar[str] = INVERSE_TRANSFORM
    title: ClassVar[str] = "Inverse transform"
    record_fields: ClassVar[tuple] = ()
    degenerate: ClassVar[bool] = True

    def watermark_index(self, weights, ids, seeds, uniform=None):
        tokens = candidate_tokens(weights, ids)
        order = jnp.broadcast_to(self._order(seeds[:, None, :], tokens), weights.shape)
        return inverse_transform_index(weights, order, prf.position_uniforms(seeds))

    def apply(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        return jax.nn.one_hot(self.point(p, zeta), p.shape[-1], dtype=jnp.float32)

    def point(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        order = zeta[..., :-1]
        return inverse_transform_index(jnp.broadcast_to(p, order.shape), order, prf.to_uniform(zeta[..., -1]))

    def token_statistic(self, seeds, tokens, *, version: str, vocab_size: int):
        """The alignment value 1 − P(|U − η| ≤ |u − η|) of the token's key η and the position's u
        (:func:`wmspec_jax.detect.streams.alignment_value`): U(0, 1) under the null."""
        eta = prf.to_uniform(self._order(seeds, tokens, version))
        return alignment_value(eta, prf.position_uniforms(seeds))


@dataclasses.dataclass(frozen=True)
class DiPmark(_Permuted):
    """DiPmark with ``alpha`` = α in [0, 1/2]; α = 1/2 is γ-reweight."""

    alpha: float = DEFAULT_DIPMARK_ALPHA
    kind: ClassVar[str] = DIPMARK
    record_fields: ClassVar[tuple] = ("dipmark_alpha",)
    aliases: ClassVar = {GAMMA_REWEIGHT: {"alpha": 0.5}}
    private_sampling: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "alpha", check_real("alpha", self.alpha, 0.0, 0.5, "DiPmark"))

    @classmethod
    def build(cls, num_layers=None, alpha=DEFAULT_DIPMARK_ALPHA, gamma=None, delta=None, options=None):
        return cls(alpha)

    name = property(lambda self: GAMMA_REWEIGHT if self.alpha == 0.5 else f"dipmark_a{self.alpha:g}")
    label = property(lambda self: "γ-reweight" if self.alpha == 0.5 else f"DiPmark(α={self.alpha:g})")

    def settings(self) -> dict:
        return {"dipmark_alpha": self.alpha}

    @classmethod
    def from_settings(cls, record) -> "DiPmark":
        a = record.get("dipmark_alpha")
        return cls(DEFAULT_DIPMARK_ALPHA if a is None else a)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        """A draw from the reweighting by inverse CDF along π with the private ``uniform``."""
        self.check_uniform(uniform)
        tokens = candidate_tokens(weights, ids)
        perm = permutation(jnp.broadcast_to(self._order(seeds[:, None, :], tokens), weights.shape))
        reweighted = dipmark_sorted(jnp.take_along_axis(_float(weights), perm, axis=-1), self.alpha)
        return jnp.take_along_axis(perm, inverse_cdf(reweighted, _float(uniform))[..., None], axis=-1)[..., 0]

    def apply(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        order = zeta[..., :-1]
        return dipmark(jnp.broadcast_to(p, order.shape), order, self.alpha)

    def token_statistic(self, seeds, tokens, *, version: str, vocab_size: int):
        """U_{w_t}: the emitted token's key in π's order (the reweighting moves mass to π's end)."""
        return prf.to_uniform(self._order(seeds, tokens, version))


def alignment_value(eta: jax.Array, u: jax.Array) -> jax.Array:
    """Inverse transform's per-token statistic: 1 − P(|U − η| ≤ |u − η|) for U ~ U(0, 1), float32[...].

    Uniform on (0, 1) when u is a uniform independent of η (the null); near 1 when u and the token's
    place η in π agree (the watermark). Kept inside [2^-25, 1 − 2^-25] so that log y and log(1 − y)
    stay finite, as for the PRF's uniforms.
    """
    d = jnp.abs(u - eta)
    inside = jnp.minimum(eta + d, 1.0) - jnp.maximum(eta - d, 0.0)
    tiny = jnp.float32(2.0**-25)
    return 1.0 - jnp.clip(inside, tiny, 1.0 - tiny)


def inverse_transform_decoder() -> InverseTransform:
    return InverseTransform()


def dipmark_decoder(alpha: float = DEFAULT_DIPMARK_ALPHA) -> DiPmark:
    return DiPmark(alpha)


def permutation(order: jax.Array) -> jax.Array:
    """π as indices: the candidates sorted by their key ``order`` (ties by position): int32[..., C]."""
    return jnp.argsort(order, axis=-1, stable=True).astype(jnp.int32)


def inverse_transform_index(weights: jax.Array, order: jax.Array, uniform: jax.Array) -> jax.Array:
    """Inverse-transform sampling along π, unchecked kernel: the candidate whose interval of the
    π-ordered CDF holds u (Kuditipudi et al. 2023). Over u ~ U(0, 1) independent of π its law is P
    for every π, so the decoder is unbiased; given (π, u) it is a point mass.

    Args:
      weights: float[..., C] non-negative, not all zero.
      order: [..., C] the keys that order π (uint32 hashes or floats).
      uniform: float[...] u in [0, 1).

    Returns:
      int32[...] a candidate index (never one of zero weight).
    """
    perm = permutation(order)
    k = inverse_cdf(jnp.take_along_axis(_float(weights), perm, axis=-1), uniform)
    return jnp.take_along_axis(perm, k[..., None], axis=-1)[..., 0]


def dipmark_sorted(sorted_probs: jax.Array, alpha) -> jax.Array:
    """DiPmark's reweighting of a distribution already in π order: float32[..., C].

    With F_i the normalised π-ordered CDF (F_0 = 0), the new mass of the i-th token is
    g(F_i) − g(F_{i−1}) for g(x) = max(x − α, 0) + max(x − (1 − α), 0) (Wu et al. 2024, Eq. 3):
    the first α of the mass is removed and the last α doubled; averaged over a uniform π the
    result is P again.
    """
    p = _float(sorted_probs)
    cdf = jnp.cumsum(p, axis=-1)
    cdf = cdf / cdf[..., -1:]
    prev = jnp.concatenate([jnp.zeros_like(cdf[..., :1]), cdf[..., :-1]], axis=-1)
    a = _float(alpha)

    def g(x):
        return jnp.maximum(x - a, 0.0) + jnp.maximum(x - (1.0 - a), 0.0)

    return jnp.maximum(g(cdf) - g(prev), 0.0)


def inverse_transform(probs: jax.Array, order: jax.Array, uniform: jax.Array) -> jax.Array:
    """Inverse-transform decoder (Kuditipudi et al. 2023): the point mass at the token whose
    interval of the π-ordered CDF holds u.

    Args:
      probs: float[..., V] next-token distribution P.
      order: [..., V] keys whose ascending order is π (e.g. uniforms or uint32 hashes).
      uniform: float[...] u in [0, 1).

    Returns:
      float32[..., V] one-hot P_ζ.
    """
    validation.check_probs(probs)
    if jnp.shape(order) != jnp.shape(probs):
        raise ValueError(f"order shape {jnp.shape(order)} != probs shape {jnp.shape(probs)}")
    u = validation.concrete(uniform)
    if u is not None and (np.isnan(u).any() or (np.asarray(u) < 0).any() or (np.asarray(u) >= 1).any()):
        raise ValueError("inverse_transform: uniform must lie in [0, 1)")
    p = _float(probs)
    return _one_hot_like(inverse_transform_index(p, order, uniform), p)


def dipmark(probs: jax.Array, order: jax.Array, alpha) -> jax.Array:
    """DiPmark decoder (Wu et al. 2024); α = 1/2 is Hu et al. (2024)'s γ-reweight.

    Args:
      probs: float[..., V] next-token distribution P.
      order: [..., V] keys whose ascending order is π.
      alpha: in [0, 1/2].

    Returns:
      float32[..., V] P_π (a distribution in the original token order; unbiased over a uniform π).
    """
    validation.check_probs(probs)
    if jnp.shape(order) != jnp.shape(probs):
        raise ValueError(f"order shape {jnp.shape(order)} != probs shape {jnp.shape(probs)}")
    a = validation.concrete(alpha)
    if a is not None and not 0.0 <= float(a) <= 0.5:
        raise ValueError(f"DiPmark needs alpha in [0, 1/2], got {float(a)}")
    perm = permutation(order)
    reweighted = dipmark_sorted(jnp.take_along_axis(_float(probs), perm, axis=-1), alpha)
    inverse = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(reweighted, inverse, axis=-1)


__all__ = ["DIPMARK", "DiPmark", "GAMMA_REWEIGHT", "INVERSE_TRANSFORM", "InverseTransform", "alignment_value",
           "dipmark", "dipmark_decoder", "dipmark_sorted", "inverse_transform", "inverse_transform_decoder",
           "inverse_transform_index", "permutation"]
