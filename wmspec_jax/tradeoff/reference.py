"""Reference points of Fig. 1 and closed forms the Monte Carlo is tested against.

Points (SE, WS):

* standard speculative sampling: (1 − TV(Q, P), 0) — exact;
* the theoretical optimum (1 − TV(Q, P), Ent(P)) (Lemma 3.4, Thm 3.2), attained
  by Alg. 1 with pseudorandom acceptance (Thm 4.1) — exact, plus an
  independent Monte Carlo of Alg. 1's single step (:func:`alg1_point_mc`);
* strength maintained: both models watermarked with one ζ (θ = γ = 1),
  SE = E Σ min(Q_ζ, P_ζ), WS = WS(P_ζ) (= Ent(P) for degenerate decoders) —
  from the coupling (P(X = Y)), exactly for Gumbel-max
  (:func:`~wmspec_jax.tradeoff.coupling.gumbel_agreement_exact`), or by Monte Carlo
  for any decoder (:func:`maintained_point_mc`).

Closed forms for a degenerate draft (they need only the draft's law Q):

* Google's class at γ = 0: WS = Ent(P) − Σ_w Q_w H_b(min(1, P_w / Q_w));
* Hu's class at γ = 0: WS = Σ_x Q_x KL(a_x δ_x + (1 − a_x) R || P);
* both classes: SE(γ) = (1 − γ)(1 − TV) + γ P(X = Y).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, theory
from wmspec_jax.tradeoff import coupling as coupling_lib
from wmspec_jax.tradeoff import montecarlo
from wmspec_jax.tradeoff import zeta as zeta_lib
from wmspec_jax.tradeoff.results import Point


def _f64(x):
    return np.asarray(x, np.float64)


def _entropy64(p) -> float:
    p = _f64(p)
    return float(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)))


def one_minus_tv(q, p) -> float:
    """1 − TV(Q, P) in float64: the best sampling efficiency (Lemma 3.4)."""
    q, p = coupling_lib.check_pair(q, p)
    return float(np.minimum(_f64(q), _f64(p)).sum())


def speculative_sampling_point(q, p) -> Point:
    """Standard speculative sampling: (1 − TV, 0), exact."""
    return Point("speculative_sampling", "standard SpecSampl", one_minus_tv(q, p), 0.0, 0.0, 0.0, 0,
                 {"method": "exact"})


def optimum_point(q, p) -> Point:
    """The optimum (1 − TV(Q, P), Ent(P)), attained by Alg. 1 (Thm 4.1); exact."""
    q, p = coupling_lib.check_pair(q, p)
    return Point("optimum", "optimum (Alg. 1, Thm 4.1)", one_minus_tv(q, p), 0.0, _entropy64(p), 0.0, 0,
                 {"method": "exact"})


def binary_entropy(a) -> np.ndarray:
    """H_b(a) = −a log a − (1 − a) log(1 − a), float64 (0 at a ∈ {0, 1})."""
    a = _f64(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(a > 0, a * np.log(a), 0.0) - np.where(a < 1, (1 - a) * np.log1p(-a), 0.0)
    return h


def google_ws_at_zero(q, p) -> float:
    """WS of Google's class at γ = 0 with a degenerate draft: Ent(P) − Σ_w Q_w H_b(min(1, P_w/Q_w))."""
    q, p = coupling_lib.check_pair(q, p)
    q64, p64 = _f64(q), _f64(p)
    acc = np.where(q64 > 0, np.minimum(1.0, p64 / np.where(q64 > 0, q64, 1.0)), 1.0)
    return _entropy64(p64) - float(np.sum(q64 * binary_entropy(acc)))


def hu_ws_at_zero(q, p) -> float:
    """WS of Hu's class at γ = 0 with a degenerate draft: Σ_x Q_x KL(a_x δ_x + (1 − a_x) R || P)."""
    q, p = coupling_lib.check_pair(q, p)
    q64, p64 = _f64(q), _f64(p)
    acc = np.where(q64 > 0, np.minimum(1.0, p64 / np.where(q64 > 0, q64, 1.0)), 1.0)
    r = np.maximum(p64 - q64, 0.0)
    r = r / r.sum() if r.sum() > 0 else p64
    cols = acc[:, None] * np.eye(q64.size) + (1 - acc)[:, None] * r[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(cols > 0, cols * np.log(cols / p64[None, :]), 0.0).sum(1)
    return float(np.sum(q64 * kl))


def kernel_se_degenerate(q, p, agreement: float, gammas) -> np.ndarray:
    """SE(γ) = (1 − γ)(1 − TV) + γ P(X = Y) of Hu's and Google's classes (degenerate draft)."""
    g = _f64(gammas)
    return (1.0 - g) * one_minus_tv(q, p) + g * float(agreement)


def maintained_point_from_coupling(q, p, coupling: coupling_lib.Coupling, decoder: zeta_lib.WatermarkDecoder) -> Point:
    """Both models watermarked with one ζ (degenerate decoder): SE = P(X = Y), WS = E[−log P_Y]."""
    q, p = coupling_lib.check_pair(q, p)
    v = q.size
    se_pairs = np.eye(v)
    with np.errstate(divide="ignore"):
        ws_pairs = np.broadcast_to(-np.log(_f64(p))[None, :], (v, v))
    se, se_err = coupling_lib.expectation(coupling, se_pairs)
    ws, ws_err = coupling_lib.expectation(coupling, ws_pairs)
    return Point(f"maintained_{decoder.name}", f"{decoder.label}, strength maintained",
                 float(se), float(se_err), float(ws), float(ws_err), coupling.num_samples,
                 {"method": "coupling " + ("exact" if coupling.exact else "monte carlo")})


def _maintained_stats(decoder, params, key, index):
    q, p = params
    z = zeta_lib.draw(decoder, key[prf.Stream.DRAFT], index, q.shape[-1])
    qz = zeta_lib.decode(decoder, q, z)
    pz = zeta_lib.decode(decoder, p, z)
    return jnp.stack([theory.max_sampling_efficiency(qz, pz), theory.kl_divergence(pz, p)], axis=-1)


def maintained_point_mc(q, p, decoder: zeta_lib.WatermarkDecoder, key, num_samples: int, **mc_kwargs) -> Point:
    """Strength-maintained point for any decoder: SE = E SSE(Q_ζ, P_ζ), WS = E KL(P_ζ || P)."""
    q, p = coupling_lib.check_pair(q, p)
    m = montecarlo.moments(_maintained_stats, decoder, (jnp.asarray(q), jnp.asarray(p)), key, num_samples,
                           **mc_kwargs)
    return Point(f"maintained_{decoder.name}", f"{decoder.label}, strength maintained",
                 float(m.mean[0]), float(m.stderr[0]), float(m.mean[1]), float(m.stderr[1]), m.num_samples,
                 {"method": "monte carlo"})


def _alg1_stats(decoder, params, key, index):
    """One step of Alg. 1: draft token X = S(Q, ζ^D), accept iff u < a_X with u = G(ζ^R)
    pseudorandom, else Z = S(R, ζ^T). The output is a deterministic function of ζ, so
    P'_ζ = δ_out, SE = 1{accepted}, WS = KL(δ_out || P) = −log P_out."""
    q, p = params
    v = q.shape[-1]
    x = zeta_lib.token(decoder, q, zeta_lib.draw(decoder, key[prf.Stream.DRAFT], index, v))
    z = zeta_lib.token(decoder, theory.residual(p, q), zeta_lib.draw(decoder, key[prf.Stream.TARGET], index, v))
    u = prf.position_uniforms(zeta_lib.seeds(key[prf.Stream.ACCEPT], index))
    accepted = u < theory.acceptance_probability(q, p)[x]
    out = jnp.where(accepted, x, z)
    return jnp.stack([accepted.astype(jnp.float32), -jnp.log(p[out])], axis=-1)


def _alg1_stats_distribution(decoder, params, key, index):
    """One step of Alg. 1 with a non-degenerate decoder (beyond the paper): given ζ the draft token has
    law Q_{ζ^D} and the residual token R_{ζ^T}, so with u = G(ζ^R) the output's law is
    P'_ζ = Σ_x Q_{ζ^D}(x) (1{u < a_x} δ_x + 1{u >= a_x} R_{ζ^T}); SE = Σ_x Q_{ζ^D}(x) 1{u < a_x},
    WS = KL(P'_ζ || P)."""
    q, p = params
    v = q.shape[-1]
    qz = zeta_lib.decode(decoder, q, zeta_lib.draw(decoder, key[prf.Stream.DRAFT], index, v))
    rz = zeta_lib.decode(decoder, theory.residual(p, q), zeta_lib.draw(decoder, key[prf.Stream.TARGET], index, v))
    u = prf.position_uniforms(zeta_lib.seeds(key[prf.Stream.ACCEPT], index))
    accept = (u[:, None] < theory.acceptance_probability(q, p)[None, :]).astype(jnp.float32)
    accepted = jnp.sum(qz * accept, axis=-1)
    out = qz * accept + (1.0 - accepted)[:, None] * rz
    return jnp.stack([accepted, theory.kl_divergence(out, p)], axis=-1)


def alg1_point_mc(q, p, decoder: zeta_lib.WatermarkDecoder, key, num_samples: int, **mc_kwargs) -> Point:
    """Monte Carlo of Alg. 1's single step: with a degenerate decoder it sits on the optimum (1 − TV,
    Ent(P)) (Thm 4.1); with a non-degenerate unbiased one (DiPmark, finite-m SynthID; beyond the paper)
    SE is still 1 − TV and WS is E_ζ KL(P'_ζ || P) < Ent(P) (:func:`_alg1_stats_distribution`)."""
    q, p = coupling_lib.check_pair(q, p)
    if decoder.biased:
        raise ValueError(f"{decoder.label} is biased: the trade-off points are defined for unbiased decoders")
    stats = _alg1_stats if decoder.degenerate else _alg1_stats_distribution
    m = montecarlo.moments(stats, decoder, (jnp.asarray(q), jnp.asarray(p)), key, num_samples, **mc_kwargs)
    return Point(f"alg1_{decoder.name}", f"Alg. 1 (pseudorandom acceptance), {decoder.label}",
                 float(m.mean[0]), float(m.stderr[0]), float(m.mean[1]), float(m.stderr[1]), m.num_samples,
                 {"method": "monte carlo over (zeta^D, zeta^T, zeta^R)"})


__all__ = [
    "one_minus_tv",
    "speculative_sampling_point",
    "optimum_point",
    "binary_entropy",
    "google_ws_at_zero",
    "hu_ws_at_zero",
    "kernel_se_degenerate",
    "maintained_point_from_coupling",
    "maintained_point_mc",
    "alg1_point_mc",
]
