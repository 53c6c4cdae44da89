"""Hu's and Google's classes (App. C.2): speculative kernels interpolated with the
watermarked target.

Draft fixed at Q_ζ = S(Q, ζ). With acceptance a_w = min(1, P_w / Q_w) and the
normalised residual R = (P − Q)+ / Σ(P − Q)+,

* Hu's class:    P'_γ = (1 − γ) A_spec(Q, P) ∘ Q_ζ + γ S(P, ζ)         (S_hu, Eq. 5)
* Google's class: P'_γ = (1 − γ) A_ξ(Q, P) ∘ Q_ζ + γ S(P, ζ)            (S_google, App. C.2, with A_ξ of Eq. 14)

where A ∘ Q_ζ = a ⊙ Q_ζ + (Σ_w (1 − a_w) Q_ζ,w) · R_* with R_* = R for Hu and
R_* = S(R, ξ), ξ independent of ζ, for Google. SE = E Σ_w min(Q_ζ, P'_γ)
(the optimal kernel, Lemma 3.4), WS = E KL(P'_γ || P) (Def. 3.1).

Since E_ξ S(R, ξ) = R, Hu's P'_γ is the ξ-average of Google's, and KL is convex:
WS_google(γ) ≥ WS_hu(γ) sample by sample (Jensen). With a degenerate draft the two
classes also have the same SE(γ) = (1 − γ)(1 − TV) + γ P(X = Y), so Google's
curve lies above Hu's at matched SE.

"As published" (``published=True``): the paper's released simulation used the
*unnormalised* residual (P − Q)+ in Hu's class. We reproduce it as: P'_γ built
with (P − Q)+ instead of R (a sub-probability vector), SE as above (unchanged
for a degenerate draft), and WS = Ent(P) − E[−Σ_w P'_w log P'_w] (Thm 3.2's
identity applied to the sub-probability vector). This reconstruction is the
one consistent with the reported symptom (the published Hu curve sits too
high); plugging the unnormalised vector into the KL formula instead would put
it *below* the correct curve. Clearly labelled wherever it appears.

Estimators: :func:`kernel_curve_from_coupling` for degenerate decoders (exact
against the coupling π of (X, Y), Rao-Blackwellised over ξ: the residual's
token Z ~ R is integrated exactly because it is independent of ζ), and
:func:`kernel_curve_mc` for any decoder (per-sample vectors, explicit ξ).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, theory
from wmspec_jax.tradeoff import coupling as coupling_lib
from wmspec_jax.tradeoff import montecarlo
from wmspec_jax.tradeoff import zeta as zeta_lib
from wmspec_jax.tradeoff.linear import blocks_for
from wmspec_jax.tradeoff.results import Curve

HU = "hu"
GOOGLE = "google"
CLASSES = (HU, GOOGLE)
PUBLISHED_LABEL = "as published (unnormalised residual)"


def _check_class(cls: str, published: bool) -> None:
    if cls not in CLASSES:
        raise ValueError(f"class must be one of {CLASSES}, got {cls!r}")
    if published and cls != HU:
        raise ValueError("the as-published (unnormalised residual) variant exists only for Hu's class")


def _check_gammas(gammas) -> np.ndarray:
    g = np.asarray(gammas, np.float64)
    if g.ndim != 1 or g.size < 1:
        raise ValueError(f"gammas must be a non-empty 1-D array, got shape {g.shape}")
    if np.isnan(g).any() or (g < 0).any() or (g > 1).any():
        raise ValueError("gammas must lie in [0, 1]")
    return g


def _residual(q, p, published: bool):
    return jnp.maximum(p - q, 0.0) if published else theory.residual(p, q)


def _neg_entropy_terms(x):
    return jnp.where(x > 0, x * jnp.log(jnp.where(x > 0, x, 1.0)), 0.0)


def _strength(target, p, published: bool):
    """KL(P' || P) (Def. 3.1), or the as-published Ent(P) − Ent(P') on a sub-probability P'."""
    if published:
        return theory.entropy(p) + jnp.sum(_neg_entropy_terms(target), axis=-1)
    return theory.kl_divergence(target, p)


def _phi(mass, prob):
    """m log(m / P): one atom's contribution to KL (0 for m = 0)."""
    return jnp.where(mass > 0, mass * (jnp.log(jnp.where(mass > 0, mass, 1.0)) - jnp.log(prob)), 0.0)


@functools.partial(jax.jit, static_argnames=("published",))
def hu_pair_values(q, p, gammas, published: bool = False):
    """Per-pair values of Hu's class for a degenerate draft/target (X = x, Y = y).

    P'_{γ,x,y} = (1 − γ)(a_x δ_x + (1 − a_x) R) + γ δ_y.

    Returns:
      (se float32[G, V, V] = P'(x), ws float32[G, V, V]).
    """
    q = jnp.asarray(q, jnp.float32)
    p = jnp.asarray(p, jnp.float32)
    g = jnp.asarray(gammas, jnp.float32)[:, None, None, None]
    v = q.shape[0]
    eye = jnp.eye(v, dtype=jnp.float32)
    acc = theory.acceptance_probability(q, p)
    res = _residual(q, p, published)
    column = acc[:, None] * eye + (1.0 - acc)[:, None] * res[None, :]  # [x, w]: A_spec(· | x)
    target = (1.0 - g) * column[None, :, None, :] + g * eye[None, None, :, :]  # [G, x, y, w]
    se = jnp.einsum("gxyw,xw->gxy", target, eye)
    return se, _strength(target, p, published)


@jax.jit
def google_pair_values(q, p, gammas):
    """Per-pair values of Google's class, integrated over the residual token Z ~ R.

    P'_{γ,x,y,z} = (1 − γ)(a_x δ_x + (1 − a_x) δ_z) + γ δ_y has at most three atoms,
    so KL(P' || P) is a sum of three m log(m / P) terms; O(G·V³).

    Returns:
      (se float32[G, V, V], ws float32[G, V, V]): E_Z of P'(x) and of KL.
    """
    q = jnp.asarray(q, jnp.float32)
    p = jnp.asarray(p, jnp.float32)
    g = jnp.asarray(gammas, jnp.float32)[:, None, None, None]  # [G, x, y, z]
    v = q.shape[0]
    acc = theory.acceptance_probability(q, p)
    res = theory.residual(p, q)
    idx = jnp.arange(v)
    x = idx[:, None, None]
    y = idx[None, :, None]
    z = idx[None, None, :]
    alpha = (1.0 - g) * acc[:, None, None]
    beta = (1.0 - g) * (1.0 - acc)[:, None, None]
    mass_x = alpha + beta * (z == x) + g * (y == x)
    mass_z = beta + g * (y == z)
    kl = (
        _phi(mass_x, p[x])
        + jnp.where(z != x, _phi(mass_z, p[z]), 0.0)
        + jnp.where((y != x) & (y != z), _phi(jnp.broadcast_to(g, mass_x.shape), p[y]), 0.0)
    )
    se = jnp.einsum("gxyz,z->gxy", mass_x, res)
    ws = jnp.einsum("gxyz,z->gxy", kl, res)
    return se, ws


def _curve_name(cls, decoder: zeta_lib.WatermarkDecoder, published: bool) -> tuple[str, str]:
    base = "Hu's class" if cls == HU else "Google's class"
    name = f"{cls}_{decoder.name}" + ("_published" if published else "")
    label = f"{base}, {decoder.label}" + (f" — {PUBLISHED_LABEL}" if published else "")
    return name, label


def kernel_curve_from_coupling(
    q, p, coupling: coupling_lib.Coupling, cls: str, gammas, *, published: bool = False,
    decoder: zeta_lib.WatermarkDecoder = zeta_lib.gumbel(),
) -> Curve:
    """Hu's or Google's class for a degenerate decoder, evaluated against π.

    Args:
      q, p: float[V]; coupling: π of (X, Y) under shared ζ (exact or MC).
      cls: ``"hu"`` or ``"google"``; gammas: float[G] in [0, 1].
      published: Hu's class as published (unnormalised residual), see module doc.
      decoder: the degenerate decoder behind π (labels only).

    Returns:
      :class:`Curve` over γ (params ``gamma``).
    """
    q, p = coupling_lib.check_pair(q, p)
    _check_class(cls, published)
    g = _check_gammas(gammas)
    if coupling.joint.shape != (q.size, q.size):
        raise ValueError(f"coupling shape {coupling.joint.shape} does not match V={q.size}")
    fg = jnp.asarray(g, jnp.float32)
    se_pairs, ws_pairs = hu_pair_values(q, p, fg, published=bool(published)) if cls == HU else google_pair_values(q, p, fg)
    se, se_err = coupling_lib.expectation(coupling, se_pairs)
    ws, ws_err = coupling_lib.expectation(coupling, ws_pairs)
    name, label = _curve_name(cls, decoder, published)
    return Curve(
        name=name, label=label, cls=cls, decoder=decoder.label,
        se=se, se_stderr=se_err, ws=ws, ws_stderr=ws_err,
        params={"gamma": g}, num_samples=coupling.num_samples,
        notes={
            "method": "exact evaluation against the coupling of (X, Y)"
            + ("; residual token integrated exactly (Rao-Blackwellised over xi)" if cls == GOOGLE else ""),
            "coupling": "exact" if coupling.exact else "monte carlo",
            "published_variant": bool(published),
        },
    )


def _kernel_stats(static, params, key, index):
    """Per-sample [SE(γ_1..γ_G), WS(γ_1..γ_G)] of Hu's / Google's class: float32[n, 2G]."""
    decoder, cls, published = static
    q, p, gammas = params
    v = q.shape[-1]
    z = zeta_lib.draw(decoder, key[prf.Stream.DRAFT], index, v)  # shared by draft and target
    qz = zeta_lib.decode(decoder, q, z)  # [n, V]
    pz = zeta_lib.decode(decoder, p, z)
    acc = theory.acceptance_probability(q, p)
    res = _residual(q, p, published)
    if cls == GOOGLE:
        # ξ: an independent draw of the same decoder (another PRF stream).
        xi = zeta_lib.draw(decoder, key[prf.Stream.TARGET], index, v)
        res = zeta_lib.decode(decoder, res, xi)  # S(R, ξ), [n, V]
    rejected = jnp.sum((1.0 - acc) * qz, axis=-1, keepdims=True)  # [n, 1]
    spec = acc * qz + rejected * res  # A ∘ Q_ζ, [n, V]
    g = gammas[:, None]
    target = (1.0 - g) * spec[:, None, :] + g * pz[:, None, :]  # [n, G, V]
    se = jnp.sum(jnp.minimum(qz[:, None, :], target), axis=-1)
    ws = _strength(target, p, published)
    return jnp.concatenate([se, ws], axis=-1)


def kernel_curve_mc(
    q, p, decoder: zeta_lib.WatermarkDecoder, cls: str, gammas, key, num_samples: int, *,
    published: bool = False, block_size: int = montecarlo.DEFAULT_BLOCK_SIZE,
    blocks_per_chunk: int | None = None, devices=None, progress=None,
) -> Curve:
    """Hu's or Google's class for any decoder by Monte Carlo over ζ (and ξ).

    Returns:
      :class:`Curve` over γ with per-point standard errors; all γ share the same
      samples (common random numbers), so the curve is smooth in γ.
    """
    q, p = coupling_lib.check_pair(q, p)
    _check_class(cls, published)
    g = _check_gammas(gammas)
    gsize = g.size
    mom = montecarlo.moments(
        _kernel_stats, (decoder, cls, bool(published)),
        (jnp.asarray(q), jnp.asarray(p), jnp.asarray(g, jnp.float32)),
        key, num_samples, block_size=block_size,
        blocks_per_chunk=blocks_per_chunk or blocks_for(gsize * q.size, block_size),
        devices=devices, progress=progress,
    )
    name, label = _curve_name(cls, decoder, published)
    return Curve(
        name=name, label=label, cls=cls, decoder=decoder.label,
        se=mom.mean[:gsize], se_stderr=mom.stderr[:gsize],
        ws=mom.mean[gsize:], ws_stderr=mom.stderr[gsize:],
        params={"gamma": g}, num_samples=mom.num_samples,
        notes={"method": "Monte Carlo over per-sample distributions (explicit xi for Google's residual)",
               "published_variant": bool(published)},
    )


__all__ = [
    "HU", "GOOGLE", "CLASSES", "PUBLISHED_LABEL",
    "hu_pair_values", "google_pair_values",
    "kernel_curve_from_coupling", "kernel_curve_mc",
]
