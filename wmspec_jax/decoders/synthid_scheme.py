"""SynthID (Eq. 3-4): m tournament layers of Bernoulli(1/2) g-values, and its m = ∞ limit.

S(P, ζ) = T_{g_m} ∘ ... ∘ T_{g_1}(P), unbiased; degenerate only in the limit (Thm 3.3), which App. C.1
approximates by the most likely token after m layers (``"synthid_limit"``). The token is drawn from the
tournament's distribution by inverse CDF with the stream's keyed position uniform, a function of key and
context (SynthID-Text samples it with the engine's ordinary randomness; :mod:`wmspec_jax.interop.hf_synthid`
reproduces transformers' processor itself). Texts are scored on their g-values
(:mod:`wmspec_jax.detect.synthid`).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, validation
from wmspec_jax.decoders.base import SYNTHID, WatermarkDecoder
from wmspec_jax.decoders.kernels import _float, _one_hot_like, candidate_tokens, first_argmax, inverse_cdf
from wmspec_jax.models import cpu_kernels

SYNTHID_LIMIT = "synthid_limit"
MAX_SYNTHID_LAYERS = 256
"""Most SynthID tournament layers m: a token costs m g-values to generate and to score (the paper uses 30);
the bound keeps a malformed setting from asking for unbounded work."""

TOURNAMENT_TARGET = "wmspec_tournament"
"""The XLA custom-call target of the CPU kernel for the tournament (:func:`tournament_packed`)."""


@dataclasses.dataclass(frozen=True)
class SynthID(WatermarkDecoder):
    """SynthID with ``num_layers`` = m tournament layers (Eq. 3-4)."""

    num_layers: int = 30
    kind: ClassVar[str] = SYNTHID
    record_fields: ClassVar[tuple] = ("synthid_layers",)
    family: ClassVar[str] = SYNTHID

    def __post_init__(self):
        m = self.num_layers
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not 1 <= m <= MAX_SYNTHID_LAYERS:
            raise ValueError(f"SynthID needs an integer num_layers in [1, {MAX_SYNTHID_LAYERS}], got {m!r}")
        object.__setattr__(self, "num_layers", int(m))

    @classmethod
    def build(cls, num_layers=30, alpha=None, gamma=None, delta=None, options=None):
        return cls(num_layers)

    @property
    def statistic(self) -> str:
        return SYNTHID  # both SynthID kinds draw from the same g-values

    name = property(lambda self: f"synthid_m{self.num_layers}")
    label = property(lambda self: f"SynthID(m={self.num_layers})")
    family_label = property(lambda self: "SynthID")
    run_tag = property(lambda self: f"synthid{self.num_layers}")

    def settings(self) -> dict:
        return {"synthid_layers": self.num_layers}

    @classmethod
    def from_settings(cls, record):
        return cls(int(record.get("synthid_layers") or 30))

    def _packed_gbits(self, seeds, tokens):
        """uint32[n, C, W] packed g-values of tokens uint32[C] (or [n, C]) at seeds uint32[n, 2]: bit l mod
        32 of word l // 32 is g_l."""
        return jnp.stack([prf.hash_values(seeds[:, None, :], tokens, int(prf.Lane.GBITS) + b)
                          for b in range(-(-self.num_layers // prf.NUM_GBITS_PER_HASH))], axis=-1)

    def _tournament(self, weights, ids, seeds):
        return tournament_packed(weights, self._packed_gbits(seeds, candidate_tokens(weights, ids)), self.num_layers)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        """Sampled by inverse CDF with the stream's per-position uniform (independent of the g-values)."""
        return inverse_cdf(self._tournament(weights, ids, seeds), prf.position_uniforms(seeds))

    def vocab_zeta(self, seeds, vocab_size: int):
        """uint32[n, V, W] packed g-values (bit l mod 32 of word l // 32 is g_l)."""
        return self._packed_gbits(seeds, jnp.arange(vocab_size, dtype=jnp.uint32))

    def apply(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        return tournament_packed(jnp.broadcast_to(p, zeta.shape[:-1]), zeta, self.num_layers)

    def point(self, probs, zeta):
        raise ValueError(f"{self.label} is not degenerate; it has no single output token")


@dataclasses.dataclass(frozen=True)
class SynthIDLimit(SynthID):
    """m = ∞ SynthID as App. C.1 approximates it: m layers, then the most likely token (degenerate)."""

    kind: ClassVar[str] = SYNTHID_LIMIT
    degenerate: ClassVar[bool] = True

    name = property(lambda self: f"synthid_inf_m{self.num_layers}")
    label = property(lambda self: "SynthID(m=∞)")

    def watermark_index(self, weights, ids, seeds, uniform=None):
        return first_argmax(self._tournament(weights, ids, seeds))

    def apply(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        return jax.nn.one_hot(self.point(p, zeta), p.shape[-1], dtype=jnp.float32)

    def point(self, probs, zeta):
        p = jnp.asarray(probs, jnp.float32)
        return first_argmax(tournament_packed(jnp.broadcast_to(p, zeta.shape[:-1]), zeta, self.num_layers))


def synthid_decoder(num_layers: int = 30) -> SynthID:
    return SynthID(num_layers)


def synthid_limit_decoder(num_layers: int = 30) -> SynthIDLimit:
    return SynthIDLimit(num_layers)


def tournament_layer(probs: jax.Array, g: jax.Array) -> jax.Array:
    """One tournament operator T_g, Eq. (4): P_w (1 + g_w − Σ_{w': g_w'=1} P_w').

    Args:
      probs: float32[..., V]; g: [..., V] in {0, 1} (bool or numeric).
    """
    won = jnp.asarray(g).astype(bool)
    mass_one = jnp.sum(jnp.where(won, probs, 0.0), axis=-1, keepdims=True)
    # written with `where` (1 + g − M is 2 − M or 1 − M exactly): ~6x faster
    # on XLA:CPU than the float multiply form and bit-identical to it
    return jnp.where(won, probs * (2.0 - mass_one), probs * (1.0 - mass_one))


def tournament(probs: jax.Array, g_values: jax.Array) -> jax.Array:
    """The m tournament layers of Eq. (3) without input checks (for jitted code).

    Args:
      probs: float[..., V]; g_values: {0,1}[..., m, V], layer 0 applied first.

    The g-values are packed (:func:`pack_g_values`) and run by :func:`tournament_packed`.
    """
    g = jnp.asarray(g_values)
    return tournament_packed(probs, pack_g_values(g), g.shape[-2])


def tournament_packed(probs: jax.Array, words: jax.Array, num_layers: int) -> jax.Array:
    """Eq. (3) on packed g-values: bit (l mod 32) of ``words[..., l // 32]`` is g_l.

    The layout :func:`wmspec_jax.prf.hash_values` produces in lane
    ``GBITS + l // 32``; unpacking one layer per step keeps the memory at
    O(V) per distribution instead of O(m V).

    On XLA:CPU, where the CPU kernels are built (:mod:`wmspec_jax.models.cpu_kernels`) and m <= 32 (one
    word per candidate: the paper's m = 30), the layers run in a C++ kernel (``cpu_kernels/tournament.cc``:
    one pass per layer that also sums the next layer's mass, instead of XLA's loop of a sum and an update);
    each layer's mass ``M_l`` is then summed in the kernel's fixed order, XLA's elsewhere, so the two
    differ in the last bits. :func:`tournament` packs its g-values and comes here, so the two forms agree
    bit for bit on every platform.

    Args:
      probs: float[..., C] (candidate tokens, or the whole vocabulary).
      words: uint32[..., C, W], W = ceil(m / 32).
      num_layers: m (static).

    Returns:
      float32[..., C], the same values as :func:`tournament` on the unpacked bits.
    """
    p = _float(probs)
    words = jnp.asarray(words, jnp.uint32)
    if p.dtype == jnp.float32 and words.shape[-1] == 1 and num_layers <= 32 and cpu_kernels.library() is not None:
        # the kernel takes whole rows: both operands at their common leading shape, flattened
        lead = jnp.broadcast_shapes(p.shape[:-1], words.shape[:-2])
        c = words.shape[-2]
        flat = jax.lax.platform_dependent(
            jnp.broadcast_to(p, lead + (c,)).reshape(-1, c), jnp.broadcast_to(words, lead + (c, 1)).reshape(-1, c, 1),
            cpu=functools.partial(_tournament_kernel, num_layers=num_layers),
            default=functools.partial(_tournament_xla, num_layers=num_layers))
        return flat.reshape(lead + (c,))
    return _tournament_xla(p, words, num_layers)


def _tournament_kernel(p, words, num_layers):
    out = jax.ShapeDtypeStruct(p.shape, jnp.float32)
    call = jax.ffi.ffi_call(TOURNAMENT_TARGET, out, vmap_method="sequential")
    return call(p, words, num_layers=np.int64(num_layers))


def _tournament_xla(p, words, num_layers):
    def body(layer, p):
        word = jax.lax.dynamic_index_in_dim(words, layer // 32, axis=-1, keepdims=False)
        g = ((word >> (layer % 32).astype(jnp.uint32)) & jnp.uint32(1)) == 1
        return tournament_layer(p, g)

    return jax.lax.fori_loop(0, num_layers, body, p)


def pack_g_values(g_values: jax.Array) -> jax.Array:
    """{0,1}[..., m, V] g-values as uint32[..., V, ceil(m / 32)] words, bit l mod 32 of word l // 32 being g_l."""
    g = jnp.moveaxis(jnp.asarray(g_values).astype(jnp.uint32), -2, -1)  # [..., V, m]
    m = g.shape[-1]
    words = -(-m // 32)
    g = jnp.pad(g, [(0, 0)] * (g.ndim - 1) + [(0, words * 32 - m)])
    g = g.reshape(g.shape[:-1] + (words, 32))
    return jnp.sum(g << jnp.arange(32, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def synthid(probs: jax.Array, g_values: jax.Array, layers_axis: int | None = None) -> jax.Array:
    """SynthID decoder, Eq. (3): T_{g_m} ∘ ... ∘ T_{g_1}(P).

    Args:
      probs: float[..., V].
      g_values: {0,1}[..., m, V] (layer 0 applied first), or [..., V, m] with
        ``layers_axis=-1``. When m = V the two layouts have the same shape:
        then ``layers_axis`` (-2 or -1) must be given.
      layers_axis: where the layers are, -2 (default when unambiguous) or -1.

    Returns:
      float32[..., V] P_ζ (a distribution; unbiased over g ~ Bernoulli(1/2)).
    """
    validation.check_probs(probs)
    g = _g_layers_first(probs, g_values, layers_axis)
    return tournament(probs, g)


def synthid_limit(probs: jax.Array, g_values: jax.Array, layers_axis: int | None = None) -> jax.Array:
    """m = ∞ SynthID as approximated in App. C.1: apply the m given layers, then
    put all mass on the most likely token (the almost-sure limit is a point mass,
    Thm 3.3). Arguments as :func:`synthid`."""
    validation.check_probs(probs)
    p = tournament(probs, _g_layers_first(probs, g_values, layers_axis))
    return _one_hot_like(first_argmax(p), p)


def _g_layers_first(probs, g_values, layers_axis):
    gs, ps = jnp.shape(g_values), jnp.shape(probs)
    if len(gs) < 2:
        raise ValueError(f"g_values must be [..., m, V] with V={ps[-1]}, got shape {gs}")
    if layers_axis is None:
        if gs[-1] == gs[-2]:
            raise ValueError(
                f"g_values of shape {gs} are ambiguous (m = V = {gs[-1]}): pass layers_axis=-2 for "
                "[..., m, V] or layers_axis=-1 for [..., V, m]")
        layers_axis = -2
    if layers_axis not in (-2, -1):
        raise ValueError(f"layers_axis must be -2 or -1, got {layers_axis!r}")
    if layers_axis == -1:
        g_values = jnp.swapaxes(jnp.asarray(g_values), -1, -2)
        gs = jnp.shape(g_values)
    if gs[-1] != ps[-1]:
        raise ValueError(f"g_values must be [..., m, V] with V={ps[-1]}, got shape {gs}")
    g = validation.concrete(g_values)
    if g is not None and not np.all((g == 0) | (g == 1)):
        raise ValueError("g_values must be 0 or 1")
    return g_values


__all__ = ["MAX_SYNTHID_LAYERS", "SYNTHID_LIMIT", "SynthID", "SynthIDLimit", "synthid", "synthid_decoder",
           "synthid_limit", "synthid_limit_decoder", "tournament", "tournament_layer", "tournament_packed"]
