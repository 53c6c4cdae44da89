"""Input checks for the public boundary.

Checks run on concrete values only: inside ``jax.jit`` the values are
tracers and the checks reduce to shape checks (callers validate once before
entering the jitted code).
"""

from __future__ import annotations

import jax
import numpy as np

PROB_SUM_ATOL = 1e-3  # float32 sums over ~5e4 entries are accurate to ~1e-6


def concrete(x):
    """``x`` as a NumPy array, or None when it is a tracer (under jit/vmap/grad).

    Uses only public JAX errors, so it does not depend on where JAX keeps its
    tracer classes.
    """
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
            jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError):
        return None


def is_concrete(x) -> bool:
    """True when ``x`` holds values (not a tracer under jit/vmap/grad)."""
    return concrete(x) is not None


def _vocab_values(x, name: str, dtype):
    """``x`` as a host array of ``dtype`` after the checks every distribution input shares (a vocabulary
    axis, no NaN); None under tracing, where only the shape can be checked."""
    shape = np.shape(x)
    if len(shape) < 1 or shape[-1] < 1:
        raise ValueError(f"{name} must have a vocabulary axis, got shape {shape}")
    if not is_concrete(x):
        return None
    values = np.asarray(x, dtype=dtype)
    if np.isnan(values).any():
        raise ValueError(f"{name} contains NaN")
    return values


def check_probs(probs, name: str = "probs", atol: float = PROB_SUM_ATOL):
    """Raises ValueError unless ``probs[..., V]`` is a probability vector per row."""
    p = _vocab_values(probs, name, np.float64)
    if p is None:
        return probs
    if not np.isfinite(p).all():
        raise ValueError(f"{name} contains inf")
    if (p < 0).any():
        raise ValueError(f"{name} has negative probabilities (min {p.min():.3g})")
    sums = p.sum(axis=-1)
    worst = np.abs(sums - 1.0).max()
    if worst > atol:
        raise ValueError(f"{name} does not sum to 1 along the last axis (off by up to {worst:.3g})")
    return probs


def check_logits(logits, name: str = "logits"):
    """Raises ValueError on NaN / +inf logits or rows that are entirely -inf."""
    x = _vocab_values(logits, name, np.float32)
    if x is None:
        return logits
    if np.isposinf(x).any():
        raise ValueError(f"{name} contains +inf")
    if np.isneginf(x).all(axis=-1).any():
        raise ValueError(f"{name} has a row with every token at -inf")
    return logits


def check_same_vocab(a_size: int, b_size: int, a_name: str, b_name: str) -> None:
    """Raises ValueError when two vocabulary sizes differ."""
    if int(a_size) != int(b_size):
        raise ValueError(
            f"vocabulary mismatch: {a_name} has {a_size} entries, {b_name} has {b_size}"
        )


def check_unit_interval(x, name: str, open_interval: bool = False):
    """Raises ValueError unless every value lies in [0, 1] (or (0, 1))."""
    if not is_concrete(x):
        return x
    v = np.asarray(x, dtype=np.float64)
    if np.isnan(v).any():
        raise ValueError(f"{name} contains NaN")
    bad = (v <= 0) | (v >= 1) if open_interval else (v < 0) | (v > 1)
    if bad.any():
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must lie in {interval}")
    return x


__all__ = ["PROB_SUM_ATOL", "check_logits", "check_probs", "check_same_vocab", "check_unit_interval", "concrete",
           "is_concrete"]
