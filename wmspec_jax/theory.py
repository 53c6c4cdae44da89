"""Information-theoretic quantities of Sec. 2-3 (natural logarithms throughout).

* :func:`entropy`, :func:`kl_divergence`, :func:`total_variation`.
* Watermark strength WS (Def. 3.1): E_ζ[KL(P_ζ || P)] from decoder samples
  (:func:`watermark_strength`), in closed form for degenerate decoders and
  their linear mixtures (:func:`watermark_strength_degenerate`) and exactly by
  enumeration for SynthID on small vocabularies
  (:func:`watermark_strength_synthid_exact`).
* Sampling efficiency SE (Def. 2.1), speculative sampling efficiency
  SSE = E Σ_w min(Q_ζ, P_ζ) (Lemma 3.4) and its bound 1 − TV(Q, P).
* The speculative kernel A_spec(Q, P) of Eq. (5) as a matrix, and the
  normalised residual (P − Q)+.

All functions are pure ``jnp`` and jit/vmap-able; distributions live on the
last axis.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import validation

RESIDUAL_MASS_EPS = 1e-6
"""Below this residual mass (P − Q)+ is treated as empty and P is used."""


def _f(x):
    return jnp.asarray(x, jnp.float32)


def _xlogy(x, y):
    return jnp.where(x > 0, x * jnp.log(jnp.where(x > 0, y, 1.0)), 0.0)


def entropy(probs: jax.Array) -> jax.Array:
    """Ent(P) = −Σ_w P_w log P_w: float32[...] from float[..., V]."""
    p = _f(probs)
    return -jnp.sum(_xlogy(p, p), axis=-1)


def kl_divergence(p: jax.Array, q: jax.Array) -> jax.Array:
    """KL(P || Q) = Σ_w P_w log(P_w / Q_w) (inf where P puts mass outside Q's support)."""
    p, q = _f(p), _f(q)
    terms = jnp.where(p > 0, p * (jnp.log(jnp.where(p > 0, p, 1.0)) - jnp.log(q)), 0.0)
    return jnp.sum(terms, axis=-1)


def total_variation(p: jax.Array, q: jax.Array) -> jax.Array:
    """TV(P, Q) = ½ ||P − Q||_1 = 1 − Σ_w min(P_w, Q_w)."""
    return 0.5 * jnp.sum(jnp.abs(_f(p) - _f(q)), axis=-1)


def max_sampling_efficiency(q: jax.Array, p: jax.Array) -> jax.Array:
    """SSE(Q, P) = Σ_w min(Q_w, P_w) = 1 − TV(Q, P): the best acceptance rate (Lemma 3.4)."""
    return jnp.sum(jnp.minimum(_f(q), _f(p)), axis=-1)


def gumbel_coupling_acceptance(q: jax.Array, p: jax.Array) -> jax.Array:
    """P(the Gumbel-max draws of Q and of P with the same uniforms are one token) (float[..., V] each):
    Σ_v 1 / Σ_w max(P_w / P_v, Q_w / Q_v) over the v with P_v, Q_v > 0: the acceptance rate of the
    ``coupled`` method (:mod:`wmspec_jax.methods`) with Gumbel-max, at most SSE(Q, P) = 1 − TV.

    With E_w = −log r_w i.i.d. Exp(1), both draws are v iff E_w > E_v max(P_w / P_v, Q_w / Q_v) for every
    w ≠ v, whose probability given E_v is exp(−E_v Σ_{w≠v} max(·)); integrating over E_v ~ Exp(1) gives
    the term."""
    p, q = _f(p), _f(q)
    both = (p > 0) & (q > 0)
    safe_p, safe_q = jnp.where(both, p, 1.0), jnp.where(both, q, 1.0)
    ratios = jnp.maximum(p[..., None, :] / safe_p[..., :, None], q[..., None, :] / safe_q[..., :, None])
    return jnp.sum(jnp.where(both, 1.0 / jnp.sum(ratios, axis=-1), 0.0), axis=-1)



def gumbel_race_top_b_acceptance(q, p, b: int) -> float:
    """P(the target's Gumbel-max draw is among the first ``b`` tokens of the draft's race with the same
    uniforms) for float[V] Q and P: the acceptance at a node with ``b`` children of the ``coupled``
    method over a tree (:mod:`wmspec_jax.race_tree`, MPFR); ``b = 1`` is :func:`gumbel_coupling_acceptance`.

    With E_w = −log r_w i.i.d. Exp(1), the target draws v at time t = E_v / P_v with density P_v e^{−t}
    (the other E_w > t P_w); given that, E_w − t P_w is again Exp(1), so w ≠ v arrives before v in the
    draft's race (E_w / Q_w < t P_v / Q_v) with probability 1 − exp(−t max(0, P_v Q_w / Q_v − P_w)),
    independently over w. The acceptance is Σ_v P_v ∫ e^{−t} P(fewer than b such w) dt: a
    Poisson-binomial count in t, integrated numerically (SciPy's ``quad``; NumPy, float64, not jit-able).
    """
    from scipy import integrate

    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError(f"p and q must be float[V] of one shape, got {p.shape} and {q.shape}")
    if not isinstance(b, (int, np.integer)) or b < 1:
        raise ValueError(f"b must be a positive int, got {b!r}")
    total = 0.0
    for v in np.flatnonzero((p > 0) & (q > 0)):
        rates = np.maximum(0.0, p[v] * q / q[v] - p)
        rates = rates[(rates > 0) & (np.arange(p.size) != v)]
        if rates.size < b:  # fewer than b tokens can arrive before v
            total += p[v]
            continue

        def integrand(t, rates=rates):
            before = -np.expm1(-rates * t)
            count = np.zeros(b)  # P(exactly c of the first w arrive before v), c < b
            count[0] = 1.0
            for pw in before:
                count[1:] = count[1:] * (1.0 - pw) + count[:-1] * pw
                count[0] *= 1.0 - pw
            return np.exp(-t) * count.sum()

        total += p[v] * integrate.quad(integrand, 0.0, np.inf, epsabs=1e-12, epsrel=1e-10, limit=200)[0]
    return float(total)

# ---------------------------------------------------------------------------
# Watermark strength (Def. 3.1, Thm 3.2)
# ---------------------------------------------------------------------------


def watermark_strength(probs: jax.Array, decoded_samples: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Monte Carlo WS(P_ζ) = E_ζ[KL(P_ζ || P)] with its standard error.

    Args:
      probs: float[V] the original distribution P.
      decoded_samples: float[N, V] samples P_ζ of the decoder output, one per ζ.

    Returns:
      (mean, standard error) over the N samples.
    """
    validation.check_probs(probs)
    kl = kl_divergence(decoded_samples, probs[None, :])
    n = kl.shape[0]
    return jnp.mean(kl), jnp.std(kl, ddof=1) / jnp.sqrt(n) if n > 1 else jnp.nan


def watermark_strength_degenerate(probs: jax.Array, theta=1.0) -> jax.Array:
    """Exact WS of (1 − θ) Id + θ S for any degenerate unbiased decoder S.

    A degenerate unbiased decoder outputs δ_w with probability P_w, so
    WS = Σ_w P_w KL((1 − θ) P + θ δ_w || P); at θ = 1 this is Ent(P) (Thm 3.2
    with equality; Gumbel-max and SynthID m = ∞, Thm 3.3).
    """
    p = _f(probs)
    v = p.shape[-1]
    mixed = (1.0 - _f(theta)) * p[..., None, :] + _f(theta) * jnp.eye(v, dtype=jnp.float32)
    return jnp.sum(p * kl_divergence(mixed, p[..., None, :]), axis=-1)


def expected_entropy_degenerate(probs: jax.Array, gamma) -> jax.Array:
    """E_ζ[Ent((1 − γ) P + γ P_ζ)] for a degenerate unbiased decoder (Eq. 10 constraint)."""
    p = _f(probs)
    v = p.shape[-1]
    mixed = (1.0 - _f(gamma)) * p[..., None, :] + _f(gamma) * jnp.eye(v, dtype=jnp.float32)
    return jnp.sum(p * entropy(mixed), axis=-1)


def watermark_strength_synthid_exact(probs, num_layers: int, max_outcomes: int = 1 << 22) -> float:
    """Exact WS of the m-layer SynthID decoder by enumerating every g (float64 NumPy).

    Feasible for small vocabularies: it enumerates 2^(V·m) g-configurations
    layer by layer (at most ``max_outcomes``). Raises ValueError beyond that.
    """
    p = np.asarray(validation.check_probs(probs), dtype=np.float64)
    v = p.shape[-1]
    if 2 ** (v * num_layers) > max_outcomes:
        raise ValueError(f"2^(V*m) = 2^{v * num_layers} configurations is too many to enumerate")
    gs = np.array(list(itertools.product((0.0, 1.0), repeat=v)))  # [2^V, V]
    dists, weights = p[None, :], np.ones(1)
    for _ in range(num_layers):
        mass_one = dists @ gs.T  # [N, 2^V]
        dists = (dists[:, None, :] * (1.0 + gs[None, :, :] - mass_one[:, :, None])).reshape(-1, v)
        weights = np.repeat(weights, len(gs)) / len(gs)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(dists > 0, dists * np.log(dists / p), 0.0).sum(-1)
    return float(np.sum(weights * kl))


# ---------------------------------------------------------------------------
# Speculative sampling (Eq. 5, Def. 2.1, Lemma 3.4)
# ---------------------------------------------------------------------------


def residual(p: jax.Array, q: jax.Array) -> jax.Array:
    """Normalised residual (P − Q)+ / Σ(P − Q)+; P itself when the mass is ~0.

    float32[..., V]. The fallback matters only when P ≈ Q, where a rejection
    has probability ~0 anyway; it keeps the output a distribution.
    """
    p, q = _f(p), _f(q)
    r = jnp.maximum(p - q, 0.0)
    mass = jnp.sum(r, axis=-1, keepdims=True)
    return jnp.where(mass > RESIDUAL_MASS_EPS, r / jnp.maximum(mass, RESIDUAL_MASS_EPS), p)


def acceptance_probability(q: jax.Array, p: jax.Array) -> jax.Array:
    """min(1, P_w / Q_w) per token: float32[..., V] (1 where Q_w = 0)."""
    q, p = _f(q), _f(p)
    return jnp.where(q > 0, jnp.minimum(1.0, p / jnp.where(q > 0, q, 1.0)), 1.0)


def speculative_kernel(q: jax.Array, p: jax.Array) -> jax.Array:
    """A_spec(Q, P) of Eq. (5) as a matrix A[w, w'] = A(w | w').

    Column w' is the output distribution when the draft proposes w':
    accept w' with probability min(1, P/Q), else draw from the residual.
    Columns are distributions and ``A @ Q = P`` (Eq. 5).

    Args:
      q, p: float[V].

    Returns:
      float32[V, V].
    """
    acc = acceptance_probability(q, p)  # [V] over w'
    res = residual(p, q)  # [V] over w
    return jnp.diag(acc) + res[:, None] * (1.0 - acc)[None, :]


def sampling_efficiency(q_zeta: jax.Array, self_transition: jax.Array) -> jax.Array:
    """SE (Def. 2.1) = E_ζ[Σ_w A_ζ(w | w) Q_ζ,w] from samples.

    Args:
      q_zeta: float[N, V] watermarked draft distributions, one per ζ.
      self_transition: float[N, V] A_ζ(w | w), the diagonal of each kernel.
    """
    return jnp.mean(jnp.sum(_f(q_zeta) * _f(self_transition), axis=-1))


def speculative_sampling_efficiency(q_zeta: jax.Array, p_zeta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """SSE(Q_ζ, P_ζ) = E_ζ Σ_w min(Q_ζ,w, P_ζ,w) (Lemma 3.4) with its standard error.

    Args:
      q_zeta, p_zeta: float[N, V] paired samples (same ζ).
    """
    per = max_sampling_efficiency(q_zeta, p_zeta)
    n = per.shape[0]
    return jnp.mean(per), jnp.std(per, ddof=1) / jnp.sqrt(n) if n > 1 else jnp.nan


def expected_tokens_per_step(alpha, lookahead: int) -> jax.Array:
    """Mean tokens per speculative step with i.i.d. acceptance α: (1 − α^{K+1}) / (1 − α)."""
    a = _f(alpha)
    k1 = lookahead + 1
    return jnp.where(jnp.abs(1.0 - a) < 1e-7, float(k1), (1.0 - a**k1) / jnp.maximum(1.0 - a, 1e-7))


__all__ = [
    "entropy",
    "kl_divergence",
    "total_variation",
    "max_sampling_efficiency",
    "gumbel_coupling_acceptance",
    "gumbel_race_top_b_acceptance",
    "watermark_strength",
    "watermark_strength_degenerate",
    "expected_entropy_degenerate",
    "watermark_strength_synthid_exact",
    "residual",
    "acceptance_probability",
    "speculative_kernel",
    "sampling_efficiency",
    "speculative_sampling_efficiency",
    "expected_tokens_per_step",
]
