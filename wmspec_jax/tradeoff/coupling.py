"""The joint law of (draft token, target token) when both models share ζ.

For a degenerate decoder S (Gumbel-max, SynthID m = ∞) the watermarked draft
and target are point masses, Q_ζ = δ_X and P_ζ = δ_Y with X = X(Q, ζ),
Y = Y(P, ζ) drawn with the *same* ζ. Every expectation in the trade-off
classes — the linear class (Eq. 9-10), Hu's and Google's classes (App. C.2) —
is then E_ζ h(X, Y) = Σ_{x,y} π(x, y) h(x, y): the coupling π is a sufficient
statistic. We therefore run the Monte Carlo over ζ once, to estimate π (exact
integer counts), and evaluate every (θ, γ) against it. This is *the same
estimator* as common-random-number Monte Carlo over those ζ samples, at
O(V²) per evaluation instead of O(n·V).

For Gumbel-max the coupling has a closed form (:func:`gumbel_coupling_exact`),
derived in ``docs/tradeoff.md``: with E_w = −log U_w i.i.d. Exp(1),
X = argmin E_w / Q_w and Y = argmin E_w / P_w, and

    π(x, x) = 1 / Σ_w max(Q_w / Q_x, P_w / P_x),
    π(x, y) = ∫_{Q_y/Q_x}^{P_y/P_x} dr / D_xy(r)²,   D_xy(r) = Σ_w max(Q_w / Q_x, r P_w / P_y)

(x ≠ y; zero when the interval is empty). D_xy is piecewise linear, so the
integral is a finite sum Σ (r_{k+1} − r_k) / (D(r_k) D(r_{k+1})) over its
breakpoints.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, validation
from wmspec_jax.tradeoff import montecarlo, zeta as zeta_lib


class Coupling(NamedTuple):
    """Joint law π(x, y) of the draft token X and the target token Y.

    Attributes:
      joint: float64[V, V], rows = draft token x, columns = target token y.
      num_samples: Monte Carlo sample count, or 0 when ``joint`` is exact.
    """

    joint: np.ndarray
    num_samples: int

    @property
    def exact(self) -> bool:
        return self.num_samples == 0


def check_pair(q, p) -> tuple[np.ndarray, np.ndarray]:
    """Validates a draft/target pair; returns float32 copies."""
    validation.check_probs(q, "q")
    validation.check_probs(p, "p")
    if np.ndim(q) != 1 or np.ndim(p) != 1:
        raise ValueError(f"q and p must be 1-D distributions, got shapes {np.shape(q)}, {np.shape(p)}")
    validation.check_same_vocab(np.shape(q)[0], np.shape(p)[0], "q", "p")
    if np.shape(q)[0] < 2:
        raise ValueError("the vocabulary needs at least 2 tokens")
    return np.asarray(q, np.float32), np.asarray(p, np.float32)


def _coupling_category(decoder: zeta_lib.WatermarkDecoder, params, key, index):
    q, p = params
    v = q.shape[-1]
    z = zeta_lib.draw(decoder, key[prf.Stream.DRAFT], index, v)  # one ζ for draft and target
    x = zeta_lib.token(decoder, q, z)
    y = zeta_lib.token(decoder, p, z)
    return x * v + y


def estimate_coupling(q, p, decoder: zeta_lib.WatermarkDecoder, key, num_samples: int, **mc_kwargs) -> Coupling:
    """Monte Carlo estimate of π from ``num_samples`` shared ζ.

    Args:
      q, p: float[V] draft and target distributions.
      decoder: a degenerate :class:`~wmspec_jax.decoders.WatermarkDecoder`.
      key: int seed or stream key words (:func:`~wmspec_jax.tradeoff.zeta.run_keys`).
      num_samples: number of ζ samples.
      **mc_kwargs: ``block_size``, ``blocks_per_chunk``, ``devices``, ``progress``
        (see :func:`wmspec_jax.tradeoff.montecarlo.counts`).

    Returns:
      :class:`Coupling` with the empirical joint (counts / n).
    """
    q, p = check_pair(q, p)
    if not decoder.degenerate:
        raise ValueError(f"the coupling is a sufficient statistic only for degenerate decoders, not {decoder.label}")
    v = q.shape[0]
    c = montecarlo.counts(
        _coupling_category, decoder, (jnp.asarray(q), jnp.asarray(p)), key, num_samples, v * v, **mc_kwargs
    )
    return Coupling(joint=c.reshape(v, v) / float(num_samples), num_samples=int(num_samples))


def gumbel_coupling_exact(q, p) -> Coupling:
    """Exact π for Gumbel-max with shared uniforms (float64 NumPy; see module doc).

    Requires strictly positive q and p. Cost O(V³ log V) time, O(V³) memory
    per draft token.
    """
    q, p = check_pair(q, p)
    q = np.asarray(q, np.float64) / np.sum(q, dtype=np.float64)
    p = np.asarray(p, np.float64) / np.sum(p, dtype=np.float64)
    if (q <= 0).any() or (p <= 0).any():
        raise ValueError("gumbel_coupling_exact needs strictly positive q and p")
    v = q.size
    joint = np.zeros((v, v))
    for x in range(v):  # O(V) host iterations of vectorised O(V^2 log V) work; a reference, not a hot path.
        a = q / q[x]  # a_w = Q_w / Q_x
        b = p[None, :] / p[:, None]  # b[y, w] = P_w / P_y
        r_lo = q / q[x]  # [y]: Q_y / Q_x
        r_hi = p / p[x]  # [y]: P_y / P_x
        with np.errstate(divide="ignore", invalid="ignore"):
            kinks = a[None, :] / b  # [y, w] where a_w = r b_w
        kinks = np.clip(kinks, r_lo[:, None], np.maximum(r_lo, r_hi)[:, None])
        r = np.sort(np.concatenate([r_lo[:, None], kinks, r_hi[:, None]], axis=1), axis=1)  # [y, V+2]
        r = np.maximum(r, r_lo[:, None])  # empty intervals (r_hi <= r_lo) collapse to zero width
        d = np.maximum(a[None, None, :], r[:, :, None] * b[:, None, :]).sum(-1)  # D(r) [y, V+2]
        joint[x] = (np.diff(r, axis=1) / (d[:, :-1] * d[:, 1:])).sum(1)
        joint[x, x] = 1.0 / np.maximum(a, p / p[x]).sum()
    return Coupling(joint=joint, num_samples=0)


def gumbel_agreement_exact(q, p) -> float:
    """P(X = Y) for Gumbel-max with shared ζ: Σ_x 1 / Σ_w max(Q_w/Q_x, P_w/P_x).

    This is the sampling efficiency when both models are watermarked with one ζ
    (the strength-maintained point, WS = Ent(P)).
    """
    q, p = check_pair(q, p)
    q = np.asarray(q, np.float64)
    p = np.asarray(p, np.float64)
    if (q <= 0).any() or (p <= 0).any():
        raise ValueError("gumbel_agreement_exact needs strictly positive q and p")
    ratio = np.maximum(q[None, :] / q[:, None], p[None, :] / p[:, None])
    return float(np.sum(1.0 / ratio.sum(1)))


def expectation(coupling: Coupling, values) -> tuple[np.ndarray, np.ndarray]:
    """E h(X, Y) and its Monte Carlo standard error.

    Args:
      coupling: π (exact or estimated from n samples).
      values: float[..., V, V] per-pair values h(x, y) (any leading shape).

    Returns:
      (mean, stderr), float64[...]. The standard error is exactly the sample
      standard error std(ddof=1)/sqrt(n) of h over the n samples behind π;
      zero for an exact coupling.
    """
    h = np.asarray(values, np.float64)
    pi = coupling.joint
    mean = np.sum(pi * h, axis=(-2, -1))
    if coupling.exact:
        return mean, np.zeros_like(mean)
    n = coupling.num_samples
    second = np.sum(pi * np.square(h - mean[..., None, None]), axis=(-2, -1))
    return mean, np.sqrt(np.maximum(second, 0.0) / (n - 1))


def marginals(coupling: Coupling) -> tuple[np.ndarray, np.ndarray]:
    """(law of X, law of Y): float64[V] each."""
    return coupling.joint.sum(1), coupling.joint.sum(0)


__all__ = [
    "Coupling",
    "check_pair",
    "estimate_coupling",
    "gumbel_coupling_exact",
    "gumbel_agreement_exact",
    "expectation",
    "marginals",
]
