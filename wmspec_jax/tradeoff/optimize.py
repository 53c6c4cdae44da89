"""Batched zoom-grid minimisation of convex functions and roots of monotone ones.

Why a zoom grid rather than golden section: every round evaluates a whole
grid in one batched call, which is what a Monte Carlo objective wants (one
pass over the samples per round, all levels and grid points at once), and it
is exact for convex functions:

* argmin: if x_i is the best of an equispaced grid x_0..x_{G−1} of a convex f,
  some minimiser lies in [x_{i−1}, x_{i+1}] (convexity; ties included). Each
  round therefore shrinks the bracket by (G − 1) / 2 and never loses the
  minimiser: after R rounds the bracket width is (hi − lo)·(2 / (G − 1))^R.
  With the defaults (G = 17, R = 8) that is 6e-8 of the box — float32
  resolution.
* root of a non-decreasing g at level c: keep [x_{i−1}, x_i] around the first
  grid point with g ≥ c; width (hi − lo)/(G − 1)^R. The upper end is returned,
  so g(root) ≥ c holds exactly on the evaluated function.

All functions are pure ``jnp``, batch over any leading shape and run under
``jax.jit``; the round functions are also used one MC pass at a time by the
host-side drivers in :mod:`wmspec_jax.tradeoff.linear`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

DEFAULT_NUM_GRID = 17
DEFAULT_NUM_ROUNDS = 8


def grid(lo, hi, num_grid: int) -> jnp.ndarray:
    """Equispaced points: float32[..., G] from lo[...] to hi[...] inclusive."""
    lo = jnp.asarray(lo, jnp.float32)
    hi = jnp.asarray(hi, jnp.float32)
    t = jnp.linspace(0.0, 1.0, num_grid, dtype=jnp.float32)
    return lo[..., None] + (hi - lo)[..., None] * t


def bracket_width(lo, hi, num_grid: int, num_rounds: int, root: bool = False) -> float:
    """Final bracket width of :func:`minimize_convex` (or :func:`root_increasing`)."""
    shrink = 1.0 / (num_grid - 1) if root else 2.0 / (num_grid - 1)
    return float((hi - lo) * shrink**num_rounds)


def argmin_round(lo, hi, values):
    """One zoom step for a convex function.

    Args:
      lo, hi: float[...] current bracket.
      values: float[..., G] the function on ``grid(lo, hi, G)``.

    Returns:
      (new_lo, new_hi, best_x, best_value): the bracket [x_{i−1}, x_{i+1}]
      around the best grid point x_i, which still holds a minimiser.
    """
    g = values.shape[-1]
    x = grid(lo, hi, g)
    i = jnp.argmin(values, axis=-1)
    take = lambda j: jnp.take_along_axis(x, jnp.clip(j, 0, g - 1)[..., None], axis=-1)[..., 0]
    best_v = jnp.take_along_axis(values, i[..., None], axis=-1)[..., 0]
    return take(i - 1), take(i + 1), take(i), best_v


def root_round(lo, hi, values, level):
    """One bracketing step for g non-decreasing: keep [x_{i−1}, x_i] with x_i the
    first grid point where g ≥ level (the ends when the level is outside the range).

    Returns:
      (new_lo, new_hi).
    """
    g = values.shape[-1]
    x = grid(lo, hi, g)
    i = jnp.sum(values < jnp.asarray(level)[..., None], axis=-1)  # first index with g >= level
    take = lambda j: jnp.take_along_axis(x, jnp.clip(j, 0, g - 1)[..., None], axis=-1)[..., 0]
    return take(jnp.where(i == 0, 0, i - 1)), take(i)


def minimize_convex(
    fn: Callable[[jnp.ndarray], jnp.ndarray],
    lo,
    hi,
    num_grid: int = DEFAULT_NUM_GRID,
    num_rounds: int = DEFAULT_NUM_ROUNDS,
):
    """Minimises a convex function on [lo, hi] (batched).

    Args:
      fn: maps x float[..., G] to f(x) float[..., G] elementwise (the leading
        shape is that of ``lo``/``hi``).
      lo, hi: float[...] bracket ends.

    Returns:
      (x_min float32[...], f_min float32[...]): the best point evaluated; a
      true minimiser lies within :func:`bracket_width` of it.
    """
    if num_grid < 3 or num_rounds < 1:
        raise ValueError(f"need num_grid >= 3 and num_rounds >= 1, got {num_grid}, {num_rounds}")
    lo, hi = jnp.broadcast_arrays(jnp.asarray(lo, jnp.float32), jnp.asarray(hi, jnp.float32))

    def body(_, carry):
        lo, hi, best_x, best_v = carry
        lo, hi, x, v = argmin_round(lo, hi, fn(grid(lo, hi, num_grid)))
        better = v < best_v
        return lo, hi, jnp.where(better, x, best_x), jnp.where(better, v, best_v)

    # fori_loop rather than unrolling: nested minimisations would otherwise compile rounds² bodies.
    init = (lo, hi, lo, jnp.full(lo.shape, jnp.inf, jnp.float32))
    _, _, best_x, best_v = jax.lax.fori_loop(0, num_rounds, body, init)
    return best_x, best_v


def root_increasing(
    fn: Callable[[jnp.ndarray], jnp.ndarray],
    level,
    lo,
    hi,
    num_grid: int = DEFAULT_NUM_GRID,
    num_rounds: int = DEFAULT_NUM_ROUNDS,
):
    """Smallest x in [lo, hi] with fn(x) ≥ level, for non-decreasing fn (batched).

    Returns:
      float32[...]: the upper end of the final bracket (so fn(x) ≥ level when
      the level is reachable; ``hi`` when it is not), within
      ``bracket_width(..., root=True)`` of the exact crossing.
    """
    if num_grid < 2 or num_rounds < 1:
        raise ValueError(f"need num_grid >= 2 and num_rounds >= 1, got {num_grid}, {num_rounds}")
    level = jnp.asarray(level, jnp.float32)
    lo = jnp.broadcast_to(jnp.asarray(lo, jnp.float32), level.shape)
    hi = jnp.broadcast_to(jnp.asarray(hi, jnp.float32), level.shape)

    def body(_, carry):
        lo, hi = carry
        return root_round(lo, hi, fn(grid(lo, hi, num_grid)), level)

    return jax.lax.fori_loop(0, num_rounds, body, (lo, hi))[1]


__all__ = [
    "DEFAULT_NUM_GRID",
    "DEFAULT_NUM_ROUNDS",
    "grid",
    "bracket_width",
    "argmin_round",
    "root_round",
    "minimize_convex",
    "root_increasing",
]
