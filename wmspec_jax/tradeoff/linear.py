"""Linear classes (Eq. 9) and their Pareto frontier (Eq. 10).

Draft (1 − θ) Q + θ Q_ζ, target (1 − γ) P + γ P_ζ with Q_ζ = S(Q, ζ),
P_ζ = S(P, ζ) sharing ζ. For a strength requirement WS ≥ w (equivalently
E Ent(target) ≤ ρ = Ent(P) − w, Thm 3.2), the frontier is

    L⁻¹(ρ) = max_{θ ∈ [0,1], γ ∈ [γ0(ρ), 1]} E Σ_w min((1−θ)Q + θQ_ζ, (1−γ)P + γP_ζ)
           = 1 − ½ min E ||(1−θ)Q + θQ_ζ − (1−γ)P − γP_ζ||₁,

a convex problem in (θ, γ) (an L1 norm of an affine map), and — because the
same ζ samples are used for every (θ, γ) (common random numbers) — the Monte
Carlo objective is itself an average of convex functions, hence convex.

Two estimators:

* :func:`linear_frontier` (degenerate decoders: Gumbel-max, SynthID m = ∞).
  The objective is evaluated exactly against the coupling π of (X, Y)
  (:mod:`~wmspec_jax.tradeoff.coupling`); it depends on π only through its
  two marginals and its diagonal, so one evaluation is O(V). γ0 solves the
  exact constraint E Ent((1 − γ0)P + γ0 δ_Y) = ρ
  (:func:`wmspec_jax.theory.expected_entropy_degenerate`, decreasing in γ);
  the 2-D problem is solved by nested zoom grids (:mod:`.optimize`): outer over
  γ ∈ [γ0, 1] of g(γ) = min_θ f(θ, γ) (convex, as a partial minimum of a
  jointly convex function), inner over θ ∈ [0, 1]. Each coordinate is located
  to (2/16)^8 ≈ 6e-8 by default.
* :func:`linear_frontier_mc` (any decoder, e.g. finite-m SynthID, where P_ζ is
  not a point mass). Each zoom round is one Monte Carlo pass over the same ζ
  (common random numbers), evaluating all levels × grid points at once. γ0 is
  found by the same bracketing on the MC estimate of WS(γ) (convex and
  non-decreasing in γ per sample). Only θ is optimised, at γ = γ0: by
  Lemma 3.4 f(θ, γ) ≥ ||E[…]||₁ = ||Q − P||₁ = f(0, 0) for unbiased decoders,
  so g attains its global minimum at γ = 0 and, being convex, is
  non-decreasing on [0, 1] — the constrained optimum sits at γ = γ0.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, theory
from wmspec_jax.tradeoff import coupling as coupling_lib
from wmspec_jax.tradeoff import montecarlo, optimize
from wmspec_jax.tradeoff import zeta as zeta_lib
from wmspec_jax.tradeoff.results import Curve

# ---------------------------------------------------------------------------
# Degenerate decoders: exact evaluation against the coupling π
# ---------------------------------------------------------------------------


def _linear_terms(q, p, theta, gamma):
    """Per-token pieces of Σ_w min(draft, target) for the four cases of (x, y).

    With a = (1−θ)Q, c = (1−γ)P the draft δ_x-mixture and target δ_y-mixture
    differ from (a, c) only at w = x and w = y, so for x ≠ y
        h(x, y) = M − m_x − m_y + u_x + v_y,      h(x, x) = M − m_x + d_x,
    with m = min(a, c), M = Σ m, u = min(a + θ, c), v = min(a, c + γ),
    d = min(a + θ, c + γ). Shapes: theta, gamma float[...]; outputs [..., V].
    """
    theta = jnp.asarray(theta, jnp.float32)[..., None]
    gamma = jnp.asarray(gamma, jnp.float32)[..., None]
    a = (1.0 - theta) * q
    c = (1.0 - gamma) * p
    m = jnp.minimum(a, c)
    u = jnp.minimum(a + theta, c)
    v = jnp.minimum(a, c + gamma)
    d = jnp.minimum(a + theta, c + gamma)
    return jnp.sum(m, axis=-1), m, u, v, d


def _se_from_summary(q, p, px, py, diag, theta, gamma):
    """E h(X, Y) from the coupling's marginals (px, py) and diagonal: float32[...]."""
    big_m, m, u, v, d = _linear_terms(q, p, theta, gamma)
    return (
        big_m
        + jnp.sum(px * (u - m), axis=-1)
        + jnp.sum(py * (v - m), axis=-1)
        + jnp.sum(diag * (d + m - u - v), axis=-1)
    )


@jax.jit
def linear_pair_values(q, p, theta, gamma):
    """Per-pair values of the linear class at (θ, γ) (degenerate decoders).

    Args:
      q, p: float[V]; theta, gamma: float[...].

    Returns:
      (se float32[..., V, V] with se[x, y] = Σ_w min((1−θ)Q + θδ_x, (1−γ)P + γδ_y),
       ws float32[..., V, V] with ws[x, y] = KL((1−γ)P + γδ_y || P)).
    """
    q = jnp.asarray(q, jnp.float32)
    p = jnp.asarray(p, jnp.float32)
    big_m, m, u, v, d = _linear_terms(q, p, theta, gamma)
    vsize = q.shape[-1]
    eye = jnp.eye(vsize, dtype=bool)
    off = big_m[..., None, None] - m[..., :, None] - m[..., None, :] + u[..., :, None] + v[..., None, :]
    on = (big_m[..., None] - m + d)[..., :, None] * jnp.ones((vsize,), jnp.float32)
    se = jnp.where(eye, on, off)
    g = jnp.asarray(gamma, jnp.float32)[..., None, None]
    target = (1.0 - g) * p + g * jnp.eye(vsize, dtype=jnp.float32)  # [..., y, w]
    ws_y = theory.kl_divergence(target, p)  # [..., y]
    ws = jnp.broadcast_to(ws_y[..., None, :], se.shape)
    return se, ws


def _check_levels(levels, num_levels: int, ws_max: float) -> np.ndarray:
    if levels is None:
        if num_levels < 2:
            raise ValueError(f"num_levels must be >= 2, got {num_levels}")
        return np.linspace(0.0, ws_max, num_levels)
    lv = np.asarray(levels, np.float64)
    if lv.ndim != 1 or lv.size < 1 or np.isnan(lv).any() or (lv < 0).any() or (np.diff(lv) < 0).any():
        raise ValueError("levels must be a non-empty, non-decreasing 1-D array of non-negative strengths")
    if lv[-1] > ws_max + 1e-6:
        raise ValueError(f"levels exceed the largest reachable strength {ws_max:.6g}")
    return lv


@functools.partial(jax.jit, static_argnames=("num_grid", "num_rounds"))
def _optimize_degenerate(q, p, px, py, diag, levels, num_grid, num_rounds):
    rho = theory.entropy(p) - levels  # E Ent(target) <= rho  <=>  WS >= level (Thm 3.2)
    neg_ent = jnp.vectorize(lambda g: -theory.expected_entropy_degenerate(p, g))
    gamma0 = optimize.root_increasing(neg_ent, -rho, 0.0, 1.0, num_grid, num_rounds)
    # At level 0 the constraint is void; float32 rounding of Ent could nudge the root off 0.
    gamma0 = jnp.where(levels <= 0, 0.0, gamma0)

    def neg_se(theta, gamma):
        return -_se_from_summary(q, p, px, py, diag, theta, gamma)

    def inner(gamma):  # g(γ) = min_θ f(θ, γ), batched over gamma[...]
        zeros = jnp.zeros_like(gamma)
        return optimize.minimize_convex(lambda th: neg_se(th, gamma[..., None]), zeros, zeros + 1.0, num_grid, num_rounds)[1]

    ones = jnp.ones_like(gamma0)
    gamma_star, _ = optimize.minimize_convex(inner, gamma0, ones, num_grid, num_rounds)
    theta_star, value = optimize.minimize_convex(
        lambda th: neg_se(th, gamma_star[..., None]), jnp.zeros_like(gamma0), ones, num_grid, num_rounds
    )
    return gamma0, gamma_star, theta_star, -value


def linear_frontier(
    q,
    p,
    coupling: coupling_lib.Coupling,
    *,
    num_levels: int = 101,
    levels=None,
    num_grid: int = optimize.DEFAULT_NUM_GRID,
    num_rounds: int = optimize.DEFAULT_NUM_ROUNDS,
    name: str = "linear",
    label: str = "linear class",
    decoder_label: str = "",
) -> Curve:
    """Frontier of the linear class for a degenerate decoder, from its coupling π.

    Args:
      q, p: float[V] draft and target.
      coupling: π of (X, Y) under shared ζ — exact (Gumbel-max,
        :func:`~wmspec_jax.tradeoff.coupling.gumbel_coupling_exact`) or a Monte
        Carlo estimate (:func:`~wmspec_jax.tradeoff.coupling.estimate_coupling`).
      num_levels: strength requirements w = WS levels, equispaced in [0, Ent(P)].
      levels: explicit float[L] requirements instead (non-decreasing, in [0, Ent(P)]).
      num_grid, num_rounds: zoom-grid resolution (see :mod:`.optimize`).

    Returns:
      :class:`Curve` with, per level, the best SE (and its standard error), the
      WS at the optimiser (its MC estimate against π's target marginal, ≥ the
      level up to MC error), and params ``ws_required``, ``gamma0``, ``gamma``,
      ``theta``. Plot (se, ws_required) for the inverse curve (L⁻¹(ρ), ρ) of Eq. 10.
    """
    q, p = coupling_lib.check_pair(q, p)
    if coupling.joint.shape != (q.size, q.size):
        raise ValueError(f"coupling shape {coupling.joint.shape} does not match V={q.size}")
    ent_p = float(theory.entropy(p))
    levels = _check_levels(levels, num_levels, ent_p).astype(np.float32)
    px, py = coupling_lib.marginals(coupling)
    diag = np.diagonal(coupling.joint)
    f32 = lambda a: jnp.asarray(a, jnp.float32)
    gamma0, gamma_star, theta_star, _ = _optimize_degenerate(
        f32(q), f32(p), f32(px), f32(py), f32(diag), f32(levels), num_grid, num_rounds
    )
    gamma0, gamma_star, theta_star = (np.asarray(a, np.float64) for a in (gamma0, gamma_star, theta_star))
    se_pairs, ws_pairs = linear_pair_values(q, p, theta_star, gamma_star)
    se, se_err = coupling_lib.expectation(coupling, se_pairs)
    ws, ws_err = coupling_lib.expectation(coupling, ws_pairs)
    return Curve(
        name=name,
        label=label,
        cls="linear",
        decoder=decoder_label,
        se=se,
        se_stderr=se_err,
        ws=ws,
        ws_stderr=ws_err,
        params={"ws_required": levels.astype(np.float64), "gamma0": gamma0, "gamma": gamma_star, "theta": theta_star},
        num_samples=coupling.num_samples,
        notes={
            "method": "exact evaluation against the coupling of (X, Y); nested zoom grids over (theta, gamma)",
            "coupling": "exact" if coupling.exact else "monte carlo",
            "argmin_tolerance": optimize.bracket_width(0.0, 1.0, num_grid, num_rounds),
            "gamma0": "exact expected-entropy constraint (theory.expected_entropy_degenerate)",
        },
    )


# ---------------------------------------------------------------------------
# Any decoder: one Monte Carlo pass per zoom round
# ---------------------------------------------------------------------------

SE_ONLY, WS_ONLY = "se", "ws"


def _linear_stats(static, params, key, index):
    """Per-sample SE or WS of the linear class at K (θ, γ) pairs: float32[n, K]."""
    decoder, what = static
    q, p, thetas, gammas = params
    z = zeta_lib.draw(decoder, key[prf.Stream.DRAFT], index, q.shape[-1])  # shared by draft and target
    out = []
    pz = zeta_lib.decode(decoder, p, z)[:, None, :]  # [n, 1, V]
    target = (1.0 - gammas[:, None]) * p + gammas[:, None] * pz  # [n, K, V]
    if what == SE_ONLY:
        qz = zeta_lib.decode(decoder, q, z)[:, None, :]
        draft = (1.0 - thetas[:, None]) * q + thetas[:, None] * qz
        out.append(jnp.sum(jnp.minimum(draft, target), axis=-1))
    if what == WS_ONLY:
        out.append(theory.kl_divergence(target, p))
    return jnp.concatenate(out, axis=-1)


def blocks_for(width: int, block_size: int, budget_bytes: int = 256 << 20) -> int:
    """Blocks per chunk so that ~width floats per sample (×4 temporaries) fit the budget."""
    per_block = max(1, width) * block_size * 4 * 4
    return int(max(1, min(montecarlo.DEFAULT_BLOCKS_PER_CHUNK, budget_bytes // per_block)))


def _mc_gamma0(run, levels, num_levels: int, num_grid: int, root_rounds: int) -> tuple:
    """γ0 per level: bracket the first γ with WS_MC(γ) >= level (``run(thetas, gammas, WS_ONLY)`` one
    pass). Round 0 is the common grid on [0, 1], which also gives WS(1), the largest reachable level,
    when no levels are given. Returns (γ0 [L], levels [L], WS and its standard error at γ0)."""
    rows = np.arange(num_levels)
    lo, hi = np.zeros(num_levels), np.ones(num_levels)
    for r in range(root_rounds):
        gam = np.asarray(optimize.grid(lo, hi, num_grid), np.float64)
        ws, ws_err = run(np.zeros_like(gam), gam, WS_ONLY)
        if r == 0:
            levels = _check_levels(levels, num_levels, ws[0, -1])
        # optimize.root_round's rule, in float64 on the host: keep [x_{i-1}, x_i] around the first x_i >= level.
        i = np.sum(ws < levels[:, None], axis=1)
        first = np.minimum(i, num_grid - 1)
        lo, hi = gam[rows, np.maximum(i - 1, 0) * (i > 0)], gam[rows, first]
        ws_at, ws_err_at = ws[rows, first], ws_err[rows, first]  # WS at γ0 = hi (a grid point of this round)
    return hi, levels, ws_at, ws_err_at


def _mc_theta(run, gamma0, num_levels: int, num_grid: int, theta_rounds: int) -> tuple:
    """θ at γ = γ0: zoom on the convex sample-average objective, keeping the best point seen.
    Returns (θ [L], SE and its standard error there)."""
    rows = np.arange(num_levels)
    lo, hi = np.zeros(num_levels), np.ones(num_levels)
    best_x, best_v, best_err = np.zeros(num_levels), np.full(num_levels, -np.inf), np.zeros(num_levels)
    for _ in range(theta_rounds):
        th = np.asarray(optimize.grid(lo, hi, num_grid), np.float64)
        se, se_err = run(th, np.broadcast_to(gamma0[:, None], th.shape), SE_ONLY)
        i = np.argmax(se, axis=1)  # optimize.argmin_round's rule on -SE: keep [x_{i-1}, x_{i+1}]
        lo, hi = th[rows, np.maximum(i - 1, 0)], th[rows, np.minimum(i + 1, num_grid - 1)]
        better = se[rows, i] > best_v
        best_x = np.where(better, th[rows, i], best_x)
        best_v = np.where(better, se[rows, i], best_v)
        best_err = np.where(better, se_err[rows, i], best_err)
    return best_x, best_v, best_err


def linear_frontier_mc(
    q,
    p,
    decoder: zeta_lib.WatermarkDecoder,
    key,
    num_samples: int,
    *,
    num_levels: int = 21,
    levels=None,
    num_grid: int = optimize.DEFAULT_NUM_GRID,
    root_rounds: int = 6,
    theta_rounds: int = 7,
    block_size: int = montecarlo.DEFAULT_BLOCK_SIZE,
    devices=None,
    progress=None,
    name: str = "linear",
    label: str = "linear class",
) -> Curve:
    """Frontier of the linear class for any decoder by common-random-number Monte Carlo.

    Every pass re-draws the same ζ (same key), so all rounds optimise one fixed,
    convex sample-average objective. Cost: root_rounds + theta_rounds passes over
    ``num_samples`` samples, each evaluating num_levels × num_grid points; the
    reported SE and WS (with standard errors) are those of the chosen grid points.

    Args:
      levels: optional explicit strength requirements (default: ``num_levels``
        equispaced in [0, WS(1)], WS(1) estimated on the same samples).

    Returns:
      :class:`Curve` as :func:`linear_frontier`, with γ = γ0 (see module doc).
    """
    q, p = coupling_lib.check_pair(q, p)
    if levels is None and num_levels < 2:
        raise ValueError(f"num_levels must be >= 2, got {num_levels}")
    v = q.size
    num_levels = num_levels if levels is None else np.asarray(levels).size
    fq, fp = jnp.asarray(q), jnp.asarray(p)

    def run(thetas, gammas, what):
        """One pass over the samples: mean and SE of SE or WS at [L, G] points.
        Every pass has the same shape, so the whole search compiles two chunk functions."""
        k = thetas.size
        mom = montecarlo.moments(
            _linear_stats,
            (decoder, what),
            (fq, fp, jnp.asarray(thetas.ravel(), jnp.float32), jnp.asarray(gammas.ravel(), jnp.float32)),
            key,
            num_samples,
            block_size=block_size,
            blocks_per_chunk=blocks_for(k * v, block_size),
            devices=devices,
            progress=progress,
        )
        return mom.mean.reshape(thetas.shape), mom.stderr.reshape(thetas.shape)

    gamma0, levels, ws, ws_err = _mc_gamma0(run, levels, num_levels, num_grid, root_rounds)
    best_x, se, se_err = _mc_theta(run, gamma0, num_levels, num_grid, theta_rounds)
    return Curve(
        name=name,
        label=label,
        cls="linear",
        decoder=decoder.label,
        se=se,
        se_stderr=se_err,
        ws=ws,
        ws_stderr=ws_err,
        params={"ws_required": np.asarray(levels, np.float64), "gamma0": gamma0, "gamma": gamma0.copy(), "theta": best_x},
        num_samples=int(num_samples),
        notes={
            "method": "common-random-number Monte Carlo, one pass per zoom round; gamma = gamma0 (Lemma 3.4)",
            "argmin_tolerance": optimize.bracket_width(0.0, 1.0, num_grid, theta_rounds),
            "gamma0_tolerance": optimize.bracket_width(0.0, 1.0, num_grid, root_rounds, root=True),
            "gamma0": "monte carlo WS(gamma) >= level on the same samples",
        },
    )


__all__ = ["linear_pair_values", "linear_frontier", "linear_frontier_mc", "blocks_for"]
