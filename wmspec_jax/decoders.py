"""Unbiased watermark decoders S(P, ζ) as pure, jit/vmap-able functions.

Each decoder maps a next-token distribution ``probs[..., V]`` and pseudorandom
numbers ζ to a modified distribution P_ζ with E_ζ[P_ζ] = P (Sec. 2):

* :func:`gumbel_max` — Eq. (2), ζ = (U_w) i.i.d. uniforms; a point mass.
* :func:`synthid` — Eq. (3)-(4), the two-candidate tournament with m layers
  of Bernoulli(1/2) g-values.
* :func:`synthid_limit` — the m = ∞ limit as App. C.1 approximates it: m
  layers, then the one-hot of the most likely token.
* :func:`identity` and :func:`linear_mixture` ((1 − θ) Id + θ S, Eq. 9).

:func:`sample_token` turns any decoder output plus one uniform of the same
stream into a token (inverse CDF), so that a watermarked token is a
deterministic function of ζ. :func:`process_logits` applies temperature and
top-k identically for every model before any decoder.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from wmspec_jax import validation

GUMBEL = "gumbel"
SYNTHID = "synthid"
DECODER_KINDS = (GUMBEL, SYNTHID)


@dataclasses.dataclass(frozen=True)
class WatermarkDecoder:
    """Static description of the decoder used for generation.

    Attributes:
      kind: ``"gumbel"`` (Gumbel-max, Eq. 2) or ``"synthid"`` (tournament,
        Eq. 3-4).
      num_layers: SynthID tournament layers m (ignored for Gumbel-max).
    """

    kind: str = GUMBEL
    num_layers: int = 30

    def __post_init__(self):
        if self.kind not in DECODER_KINDS:
            raise ValueError(f"decoder kind must be one of {DECODER_KINDS}, got {self.kind!r}")
        if self.kind == SYNTHID and (not isinstance(self.num_layers, int) or self.num_layers < 1):
            raise ValueError(f"SynthID needs num_layers >= 1, got {self.num_layers!r}")

    @property
    def label(self) -> str:
        return "Gumbel-max" if self.kind == GUMBEL else f"SynthID(m={self.num_layers})"


def _float(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _one_hot_like(index: jax.Array, probs: jax.Array) -> jax.Array:
    return jax.nn.one_hot(index, probs.shape[-1], dtype=jnp.float32)


# ---------------------------------------------------------------------------
# Gumbel-max (Eq. 2)
# ---------------------------------------------------------------------------


def gumbel_max_token(log_probs: jax.Array, uniforms: jax.Array) -> jax.Array:
    """argmax_w log(U_w) / P_w, computed stably as argmax_w log P_w − log(−log U_w).

    Args:
      log_probs: float[..., V] log P (−inf for excluded tokens).
      uniforms: float[..., V] in (0, 1).

    Returns:
      int32[...] the selected token (never one with P_w = 0).
    """
    scores = _float(log_probs) - jnp.log(-jnp.log(_float(uniforms)))
    return jnp.argmax(scores, axis=-1).astype(jnp.int32)


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


# ---------------------------------------------------------------------------
# SynthID tournament (Eq. 3-4)
# ---------------------------------------------------------------------------


def tournament_layer(probs: jax.Array, g: jax.Array) -> jax.Array:
    """One tournament operator T_g, Eq. (4): P_w (1 + g_w − Σ_{w': g_w'=1} P_w')."""
    g = _float(g)
    mass_one = jnp.sum(probs * g, axis=-1, keepdims=True)
    return probs * (1.0 + g - mass_one)


def tournament(probs: jax.Array, g_values: jax.Array) -> jax.Array:
    """The m tournament layers of Eq. (3) without input checks (for jitted code).

    Args:
      probs: float[..., V]; g_values: {0,1}[..., m, V], layer 0 applied first.
    """
    g_layers = jnp.moveaxis(_float(g_values), -2, 0)  # [m, ..., V]

    def body(p, g):
        return tournament_layer(p, g), None

    out, _ = jax.lax.scan(body, _float(probs), g_layers)
    return out


def synthid(probs: jax.Array, g_values: jax.Array) -> jax.Array:
    """SynthID decoder, Eq. (3): T_{g_m} ∘ ... ∘ T_{g_1}(P).

    Args:
      probs: float[..., V].
      g_values: {0,1}[..., m, V]; layer 0 is applied first.

    Returns:
      float32[..., V] P_ζ (a distribution; unbiased over g ~ Bernoulli(1/2)).
    """
    validation.check_probs(probs)
    _check_g_values(probs, g_values)
    return tournament(probs, g_values)


def synthid_limit(probs: jax.Array, g_values: jax.Array) -> jax.Array:
    """m = ∞ SynthID as approximated in App. C.1: apply the m given layers, then
    put all mass on the most likely token (the almost-sure limit is a point mass,
    Thm 3.3)."""
    validation.check_probs(probs)
    _check_g_values(probs, g_values)
    p = tournament(probs, g_values)
    return _one_hot_like(jnp.argmax(p, axis=-1), p)


def _check_g_values(probs, g_values) -> None:
    gs, ps = jnp.shape(g_values), jnp.shape(probs)
    if len(gs) < 2 or gs[-1] != ps[-1]:
        raise ValueError(f"g_values must be [..., m, V] with V={ps[-1]}, got shape {gs}")
    if validation.is_concrete(g_values):
        g = jnp.asarray(g_values)
        if not bool(jnp.all((g == 0) | (g == 1))):
            raise ValueError("g_values must be 0 or 1")


# ---------------------------------------------------------------------------
# Identity, mixtures, sampling
# ---------------------------------------------------------------------------


def identity(probs: jax.Array, zeta=None) -> jax.Array:
    """The identity decoder Id(P, ζ) = P (no watermark)."""
    del zeta
    return _float(probs)


def linear_mixture(probs: jax.Array, decoded: jax.Array, theta) -> jax.Array:
    """Linear class of Eq. (9): ((1 − θ) Id + θ S)(P, ζ) = (1 − θ) P + θ S(P, ζ).

    Args:
      probs: float[..., V] P.
      decoded: float[..., V] S(P, ζ) from any unbiased decoder.
      theta: scalar or float[...] in [0, 1].
    """
    theta = _float(theta)[..., None] if jnp.ndim(theta) else _float(theta)
    return (1.0 - theta) * _float(probs) + theta * _float(decoded)


def sample_token(probs: jax.Array, uniform: jax.Array) -> jax.Array:
    """Deterministic inverse-CDF sampler: the token whose CDF interval holds u.

    Args:
      probs: float[..., V] any (unnormalised is fine) non-negative weights.
      uniform: float[...] in (0, 1), one per distribution.

    Returns:
      int32[...]: the first w with cumsum(P)_w > u · ΣP; never a zero-weight
      token, even when float rounding pushes u · ΣP past the last cumsum.
    """
    p = _float(probs)
    cdf = jnp.cumsum(p, axis=-1)
    threshold = _float(uniform)[..., None] * cdf[..., -1:]
    idx = jnp.sum(cdf <= threshold, axis=-1)
    last_positive = p.shape[-1] - 1 - jnp.argmax(jnp.flip(p > 0, axis=-1), axis=-1)
    return jnp.minimum(idx, last_positive).astype(jnp.int32)


def process_logits(logits: jax.Array, temperature, top_k: int | None = None) -> jax.Array:
    """Temperature and top-k, applied identically to draft and target logits.

    Args:
      logits: float[..., V].
      temperature: > 0, or 0 for greedy (all mass on the argmax).
      top_k: keep the k largest logits (ties at the k-th value are kept);
        ``None`` or 0 keeps all.

    Returns:
      float32[..., V] normalised log-probabilities (−inf outside the support).
    """
    x = _float(logits)
    if top_k:
        if not 1 <= int(top_k) <= x.shape[-1]:
            raise ValueError(f"top_k must be in [1, {x.shape[-1]}], got {top_k}")
        kth = jax.lax.top_k(x, int(top_k))[0][..., -1:]
        x = jnp.where(x >= kth, x, -jnp.inf)
    if isinstance(temperature, (int, float)):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if temperature == 0:
            return jnp.where(_one_hot_like(jnp.argmax(x, axis=-1), x) > 0, 0.0, -jnp.inf)
    return jax.nn.log_softmax(x / _float(temperature), axis=-1)
