"""The exact law of a watermarked token's detection score, per method and draft Q (H1, one position).

Strength (Def. 3.1) is an expectation over the text; a detector's power at a fixed false-positive
rate depends on the law of the per-token score it sums. This module gives that law exactly, for one
position with target P and draft Q, for every method of :mod:`wmspec_jax.methods`, under the
Gumbel-max decoder (the detectors of :mod:`wmspec_jax.detect.gumbel`) and SynthID (the mean tests of
:mod:`wmspec_jax.detect.synthid`). Float64 NumPy / SciPy: an analysis tool, not jitted code.

**Routes.** A token at a draft slot of a step (any of slots 1..K) is an accepted draft d (drawn from
Q_{ζ^D}, accepted with probability a_d = min(1, P_d / Q_d)) or, after a rejection of d, a residual
token w from R = (P − Q)+ / Σ(P − Q)+; the bonus token (slot K + 1) and every token of ``basic`` come
from P. The acceptance u is independent of the three keyed streams' values used by the decoders:
Alg. 1 (``pseudorandom``) draws it from its own stream ζ^R, the other speculative methods from true
randomness (Thm 4.1 assumes ζ^D, ζ^T, ζ^R independent; the PRF is modelled as random).

**Gumbel-max.** If w = argmax_v r_v^{1/π_v} with r_v i.i.d. U(0, 1), then M = r_w^{1/π_w} is U(0, 1)
and independent of w, and given (w, M) every other r_v is U(0, M^{π_v}). So the emitted token's
uniform is r_w = M^{π_w}, and S = −log(1 − r_w) has the CDF (1 − e^{−s})^c with c = 1 / π_w (the
generalised exponential GE(c): mean H(c) = ψ(c + 1) + γ, variance ψ'(1) − ψ'(c + 1); GE(1) = Exp(1),
the null). A stream a token was not drawn from gives U(0, 1), an Exp(1) score — except the draft
stream of a residual token w, whose value is r^D_w = M^{q_w} V (V uniform: the draft stream chose
d ≠ w): its score has CDF (F_Exp − b F_GE(1/b)) / (1 − b) with b = q_w, a *signed* mixture of GE laws,
stochastically smaller than the null. Per method:

================  ===============  ======================  ==============================
method            accepted d       residual w after d      bonus w, and ``basic``
================  ===============  ======================  ==============================
``pseudorandom``  y^D: GE(1/q_d)   y^T: GE(1/R_w)          y^T: GE(1/p_w)
                  y^T: Exp(1)      y^D: M^{q_w} V          y^D: Exp(1)
``dathathri``     as Alg. 1        as Alg. 1               as Alg. 1
``hu``            as Alg. 1        y^T: Exp(1) (plain)     as Alg. 1
                                   y^D: M^{q_w} V
``standard``      Exp(1)           Exp(1)                  Exp(1)
================  ===============  ======================  ==============================

The detectors score every position whose context is new, whatever the ``watermarked`` record says,
so a plain token (``hu``'s residual, ``standard``) is scored and contributes its null score. Which
stream a detector reads: ``oracle`` the token's own (y^D for accepted drafts), ``single`` y^T,
``ars-prior`` (the default detector) y^D with probability ρ by a keyed coin — modelled as an
independent Bernoulli(ρ): the coin is a fixed hash of u's 24-bit integer, independent of the
streams for every method and, for Alg. 1, of the acceptance event up to that hash's grid — and
``ars-tau`` y^D iff u < τ, which for Alg. 1 is correlated with the route (accepted d: u < a_d).
So at one position Alg. 1 and ``dathathri`` have the same law except under ``ars-tau``.

**SynthID.** Exhaustive enumeration of the 2^(V m) g-configurations (small V and m): the emitted
token's g-count k = Σ_l g_l in its stream, and the g-count of a token in a stream that emitted
another token (the draft stream of a residual token); a stream not used there gives Binomial(m, ½).

**Later positions.** Slots 2..K have the same law as slot 1 given their own (P, Q) (fresh streams at
a new context). The bonus token (slot K + 1, after K acceptances) follows ``basic``'s law. With
``lookahead=K`` the law is the stationary mixture over slots, bonus share α^K (1 − α) / (1 − α^{K+1})
with α = Σ min(P, Q); scores at different positions are then treated as independent (an
approximation: the slot of the next token depends on this one's route). Repeated contexts are not
scored and are outside this law.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Optional

import numpy as np
from scipy import special

from wmspec_jax import methods as methods_lib
from wmspec_jax import theory, validation

GUMBEL_DETECTORS = ("oracle", "single", "ars-prior", "ars-tau")
"""Stream choices of the Gumbel-max detectors (:mod:`wmspec_jax.detect.gumbel`)."""

SYNTHID_DETECTORS = ("both", "target", "oracle")
"""SynthID mean tests: both streams' 2m g-values (``synthid-mean``, the default), the target stream's m
(``synthid-mean-target``), the token's own stream's m (the Oracle's choice)."""

MAX_SYNTHID_OUTCOMES = 1 << 22


@dataclasses.dataclass(frozen=True)
class Routes:
    """How one token was produced, with probabilities (they sum to 1).

    Attributes:
      accepted: float64[V] P(draft d proposed and accepted).
      residual: float64[V, V] P(draft d proposed and rejected, residual token w) at [d, w].
      target: float64[V] P(token w drawn from P: the bonus token, or any token of a non-speculative method).
      accept_prob: float64[V] a_d = min(1, P_d / Q_d) (1 where Q_d = 0).
      residual_probs: float64[V] R = (P − Q)+ normalised (P where it has no mass, as generation does).
      bonus_share: the probability that the token is drawn from P (1 for a non-speculative method).
    """

    accepted: np.ndarray
    residual: np.ndarray
    target: np.ndarray
    accept_prob: np.ndarray
    residual_probs: np.ndarray
    bonus_share: float

    @property
    def draft_share(self) -> float:
        """The share of accepted draft tokens (what a text's ``draft_fraction`` estimates)."""
        return float(self.accepted.sum())


def _probs(x, name: str) -> np.ndarray:
    p = np.asarray(validation.check_probs(x, name, atol=1e-6), np.float64)
    if p.ndim != 1:
        raise ValueError(f"{name} must be one distribution float[V], got shape {p.shape}")
    return p / p.sum()


def _method(name: str) -> methods_lib.Method:
    if name not in methods_lib.METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(methods_lib.METHODS)}")
    return methods_lib.METHODS[methods_lib.detected_as(name)]  # a coupled text is the basic watermark's


def bonus_share(alpha: float, lookahead: int) -> float:
    """The stationary share of bonus tokens with i.i.d. acceptance α and K drafts per step:
    α^K (1 − α) / (1 − α^{K+1}) (one bonus per step with probability α^K, over
    (1 − α^{K+1}) / (1 − α) tokens per step; 1 / (K + 1) at α = 1)."""
    if lookahead < 1:
        raise ValueError(f"lookahead must be >= 1, got {lookahead}")
    if alpha >= 1.0 - 1e-12:
        return 1.0 / (lookahead + 1)
    return alpha**lookahead * (1.0 - alpha) / (1.0 - alpha ** (lookahead + 1))


def routes(p, q, method: str, lookahead: Optional[int] = None) -> Routes:
    """The routes of one token of ``method`` with target ``p`` and draft ``q`` (float[V] each).

    Args:
      p, q: the processed target and draft distributions at the position (``q`` is ignored by
        non-speculative methods).
      method: a name of :data:`wmspec_jax.methods.METHODS`.
      lookahead: None: a draft slot of a step (accepted draft or residual; the first speculative
        position); K: the stationary mixture of the K draft slots and the bonus slot (module doc).
    """
    p = _probs(p, "p")
    q = _probs(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must share the vocabulary, got {p.shape} and {q.shape}")
    v = p.shape[0]
    accept_prob = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 1.0)  # theory's, in float64
    excess = np.maximum(p - q, 0.0)
    mass = excess.sum()
    residual_probs = excess / mass if mass > theory.RESIDUAL_MASS_EPS else p
    zeros = np.zeros(v)
    if not _method(method).speculative:
        return Routes(zeros, np.zeros((v, v)), p, accept_prob, residual_probs, 1.0)
    accepted = q * accept_prob
    residual = np.outer(q * (1.0 - accept_prob), residual_probs)
    share = 0.0 if lookahead is None else bonus_share(float(accepted.sum()), lookahead)
    return Routes((1.0 - share) * accepted, (1.0 - share) * residual, share * p, accept_prob, residual_probs, share)


# ---------------------------------------------------------------------------
# Gumbel-max: signed mixtures of generalised exponential laws
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GumbelLaw:
    """A per-token score law Σ_i w_i GE(c_i) (weights may be negative; they sum to 1).

    GE(c) is the law with CDF (1 − e^{−s})^c on s > 0 (c >= 1; GE(1) = Exp(1)). Attributes:
    ``weights``, ``shapes`` float64[n].
    """

    weights: np.ndarray
    shapes: np.ndarray

    def mean(self) -> float:
        """E S = Σ w_i H(c_i), H(c) = ψ(c + 1) + γ (the harmonic number at c)."""
        return float(np.sum(self.weights * harmonic(self.shapes)))

    def second_moment(self) -> float:
        """E S² = Σ w_i (ψ'(1) − ψ'(c_i + 1) + H(c_i)²)."""
        h = harmonic(self.shapes)
        return float(np.sum(self.weights * (special.polygamma(1, 1.0) - special.polygamma(1, self.shapes + 1.0)
                                            + h * h)))

    def variance(self) -> float:
        return self.second_moment() - self.mean() ** 2

    def cdf(self, s) -> np.ndarray:
        """P(S <= s), float64 like ``s``; exact (clipped to [0, 1] against rounding of the signed sum)."""
        s = np.asarray(s, np.float64)
        inside = s > 0
        log_y = np.log1p(-np.exp(-np.where(inside, s, 1.0)))  # log(1 − e^{−s})
        terms = np.exp(self.shapes * log_y[..., None]) @ self.weights
        return np.where(inside, np.clip(terms, 0.0, 1.0), 0.0)

    def sf(self, s) -> np.ndarray:
        return 1.0 - self.cdf(s)


def harmonic(c) -> np.ndarray:
    """H(c) = ψ(c + 1) + γ = E[−log(1 − U^{1/c})], the mean score of a token of probability 1/c."""
    return special.digamma(np.asarray(c, np.float64) + 1.0) + np.euler_gamma


def null_gumbel_law() -> GumbelLaw:
    """H0: a text independent of the key scores Exp(1) per token (Gamma(n, 1) for n tokens)."""
    return GumbelLaw(np.ones(1), np.ones(1))


class _Terms:
    """Accumulates weight per GE shape (equal shapes merged)."""

    def __init__(self):
        self.by_shape = {}

    def ge(self, weight: float, prob: float):
        """A token drawn by the stream with probability ``prob`` (GE(1/prob)); prob 1: Exp(1)."""
        if weight != 0.0:
            c = 1.0 / prob if prob > 0 else 1.0
            self.by_shape[c] = self.by_shape.get(c, 0.0) + weight

    def other_token(self, weight: float, b: float):
        """The value of a stream that drew another token, where this one had probability b:
        M^b V, whose score law is (Exp(1) − b GE(1/b)) / (1 − b)."""
        if b <= 0.0:
            self.ge(weight, 1.0)
        else:
            self.ge(weight / (1.0 - b), 1.0)
            self.ge(-weight * b / (1.0 - b), b)

    def law(self) -> GumbelLaw:
        shapes = np.array(sorted(self.by_shape))
        return GumbelLaw(np.array([self.by_shape[c] for c in shapes]), shapes)


def _draft_choice(detector: str, rho: float, tau: float, pseudorandom: bool, a, route: str):
    """P(the detector reads y^D | route) for ``route`` in accepted / residual / target; ``a``: a_d."""
    if detector == "oracle":
        return 1.0 if route == "accepted" else 0.0
    if detector == "single":
        return 0.0
    if detector == "ars-prior":
        return rho
    if not pseudorandom or route == "target":  # u of the detector is independent of the route
        return tau
    if route == "accepted":  # u uniform on (0, a) given acceptance
        return min(tau, a) / a
    return max(0.0, tau - a) / (1.0 - a)  # u uniform on [a, 1) given rejection


def gumbel_score_law(p, q, method: str, *, detector: str = "ars-prior", draft_fraction: Optional[float] = None,
                     tau: float = 0.5, lookahead: Optional[int] = None) -> GumbelLaw:
    """The exact H1 law of one token's score −log(1 − y) under Gumbel-max (module doc).

    Args:
      p, q: float[V] target and draft distributions at the position.
      method: a name of :data:`wmspec_jax.methods.METHODS` (``pseudorandom`` is Alg. 1).
      detector: which stream's y the detector reads (:data:`GUMBEL_DETECTORS`); ``ars-prior`` is the
        package's default detector (Eq. 12 with keyed coins), ``ars-tau`` Eq. 11.
      draft_fraction: Ars-Prior's ρ; None: the share of accepted draft tokens of these routes (what a
        text records as its ``draft_fraction`` on average; 0 for non-speculative methods).
      tau: Ars-τ's threshold.
      lookahead: None for one draft slot, K for the stationary mixture over a step (:func:`routes`).

    Returns:
      :class:`GumbelLaw`, exact at one position.
    """
    if detector not in GUMBEL_DETECTORS:
        raise ValueError(f"detector must be one of {GUMBEL_DETECTORS}, got {detector!r}")
    m = _method(method)
    r = routes(p, q, method, lookahead)
    rho = r.draft_share if draft_fraction is None else float(draft_fraction)
    if not (0.0 <= rho <= 1.0 and 0.0 <= tau <= 1.0):
        raise ValueError(f"draft_fraction and tau must lie in [0, 1], got {rho} and {tau}")
    prob_p, prob_q = _probs(p, "p"), _probs(q, "q")
    terms = _Terms()
    pr = m.pseudorandom_acceptance
    for d in np.flatnonzero(r.accepted > 0):
        pick = _draft_choice(detector, rho, tau, pr, r.accept_prob[d], "accepted")
        terms.ge(r.accepted[d] * pick, prob_q[d] if m.watermark_draft else 1.0)
        terms.ge(r.accepted[d] * (1.0 - pick), 1.0)
    for d, w in zip(*np.nonzero(r.residual > 0)):
        weight = r.residual[d, w]
        pick = _draft_choice(detector, rho, tau, pr, r.accept_prob[d], "residual")
        if m.watermark_draft:
            terms.other_token(weight * pick, prob_q[w])
        else:
            terms.ge(weight * pick, 1.0)
        terms.ge(weight * (1.0 - pick), r.residual_probs[w] if m.watermark_residual else 1.0)
    for w in np.flatnonzero(r.target > 0):
        pick = _draft_choice(detector, rho, tau, pr, 1.0, "target")
        terms.ge(r.target[w] * pick, 1.0)
        terms.ge(r.target[w] * (1.0 - pick), prob_p[w] if m.watermark_target else 1.0)
    return terms.law()


# ---------------------------------------------------------------------------
# SynthID: g-counts by enumeration
# ---------------------------------------------------------------------------


def synthid_configurations(probs, num_layers: int, max_outcomes: int = MAX_SYNTHID_OUTCOMES):
    """Every g-configuration of the m-layer tournament (Eq. 3-4) on ``probs``, as
    :func:`wmspec_jax.theory.watermark_strength_synthid_exact` enumerates them.

    Returns:
      (weights float64[N], dists float64[N, V] the tournament's output P_g, counts int[N, V] the number
      of layers in which each token's g-value is 1), N = 2^(V m); the token is drawn from P_g by a
      uniform independent of g.
    """
    p = _probs(probs, "probs")
    v = p.shape[0]
    if 2 ** (v * num_layers) > max_outcomes:
        raise ValueError(f"2^(V*m) = 2^{v * num_layers} configurations is too many to enumerate")
    gs = np.array(list(itertools.product((0, 1), repeat=v)))  # [2^V, V]
    dists, counts, weights = p[None, :], np.zeros((1, v), np.int64), np.ones(1)
    for _ in range(num_layers):
        mass_one = dists @ gs.T  # [N, 2^V]
        dists = (dists[:, None, :] * (1.0 + gs[None] - mass_one[:, :, None])).reshape(-1, v)
        counts = (counts[:, None, :] + gs[None]).reshape(-1, v)
        weights = np.repeat(weights, len(gs)) / len(gs)
    return weights, dists, counts


def synthid_token_counts(probs, num_layers: int):
    """The g-counts a stream leaves on tokens when it draws one token from ``probs`` by SynthID.

    Returns:
      (emit float64[V, m + 1]: P(token v drawn and its count is k) at [v, k];
      other float64[V, V, m + 1]: P(token d drawn and token v's count is k) at [d, v, k]).
    """
    weights, dists, counts = synthid_configurations(probs, num_layers)
    drawn = weights[:, None] * dists  # P(g, token d)
    other = np.stack([drawn.T @ (counts == k) for k in range(num_layers + 1)], axis=-1)
    emit = np.stack([np.diagonal(other[..., k]) for k in range(num_layers + 1)], axis=-1)
    return emit, other


def _synthid_joints(p, q, method: str, m: int, lookahead):
    """(accepted, rest): float64[m + 1, m + 1] P(route, draft-stream count k_D, target-stream count k_T)
    at [k_D, k_T], for accepted drafts and for every other route."""
    meth = _method(method)
    r = routes(p, q, method, lookahead)
    binom = special.comb(m, np.arange(m + 1)) / 2.0**m  # a stream that drew nothing here
    plain = np.outer(binom, binom)
    slot = 1.0 - r.bonus_share
    accepted, rest = np.zeros((m + 1, m + 1)), np.zeros((m + 1, m + 1))
    if slot > 0 and meth.watermark_draft:
        emit_q, other_q = synthid_token_counts(q, m)
        accepted += slot * np.outer(r.accept_prob @ emit_q, binom)
        # Σ_d P(d drawn and rejected, the draft-stream count of w is k): the residual token w is drawn after
        k_draft = np.einsum("d,dwk->wk", 1.0 - r.accept_prob, other_q)
        emit_r = (synthid_token_counts(r.residual_probs, m)[0] if meth.watermark_residual
                  else r.residual_probs[:, None] * binom[None])
        rest += slot * np.einsum("wk,wj->kj", k_draft, emit_r)
    elif slot > 0:  # a plain draft: no stream was used at a draft slot
        accepted += r.accepted.sum() * plain
        rest += r.residual.sum() * plain
    if r.bonus_share > 0:
        emit_p = (synthid_token_counts(p, m)[0] if meth.watermark_target
                  else _probs(p, "p")[:, None] * binom[None])
        rest += r.bonus_share * np.outer(binom, emit_p.sum(0))
    return accepted, rest


def synthid_count_law(p, q, method: str, num_layers: int, *, detector: str = "both",
                      lookahead: Optional[int] = None) -> np.ndarray:
    """The exact H1 law of one token's number of g-values equal to 1 under SynthID(m) (module doc).

    Args:
      p, q: float[V] target and draft distributions (2^(V m) configurations are enumerated).
      method: a name of :data:`wmspec_jax.methods.METHODS`.
      num_layers: m.
      detector: ``both`` (the mean of both streams' 2m g-values: ``synthid-mean``, the default),
        ``target`` (the target stream's m) or ``oracle`` (the token's own stream's m).
      lookahead: None for one draft slot, K for the stationary mixture over a step (:func:`routes`).

    Returns:
      float64[M + 1], M = 2m (``both``) or m: P(count = k). The mean g-value is count / M.
    """
    if detector not in SYNTHID_DETECTORS:
        raise ValueError(f"detector must be one of {SYNTHID_DETECTORS}, got {detector!r}")
    accepted, rest = _synthid_joints(p, q, method, num_layers, lookahead)
    joint = accepted + rest
    if detector == "target":
        return joint.sum(0)
    if detector == "oracle":
        return accepted.sum(1) + rest.sum(0)
    m = num_layers
    total = np.zeros(2 * m + 1)
    for k_draft in range(m + 1):
        total[k_draft:k_draft + m + 1] += joint[k_draft]
    return total


def synthid_null_law(num_layers: int, detector: str = "both") -> np.ndarray:
    """H0: every g-value is Bernoulli(½): Binomial(M, ½) per token, M = 2m (``both``) or m."""
    if detector not in SYNTHID_DETECTORS:
        raise ValueError(f"detector must be one of {SYNTHID_DETECTORS}, got {detector!r}")
    size = 2 * num_layers if detector == "both" else num_layers
    return special.comb(size, np.arange(size + 1)) / 2.0**size


__all__ = ["GUMBEL_DETECTORS", "GumbelLaw", "MAX_SYNTHID_OUTCOMES", "Routes", "SYNTHID_DETECTORS", "bonus_share",
           "gumbel_score_law", "harmonic", "null_gumbel_law", "routes", "synthid_configurations",
           "synthid_count_law", "synthid_null_law", "synthid_token_counts"]
