"""Model-assisted detection: per-token weights from the generator's models, with exact p-values.

Key-only detection (:mod:`.gumbel`, :mod:`.synthid`, :mod:`.kgw`) weighs every scored token alike,
so a low-entropy answer (code, a list), where the model was sure of most tokens, is weak evidence:
a token the model was sure of carries none. A user who holds the generator's models can weigh each
token by what the models say of it. This module scores texts with weights computed from the models'
probabilities, and keeps the p-values exact.

**Why the null stays exact.** Under H0 the text is independent of the key. The weights are a function
of the text, of the models' distributions given the text, and (for Alg. 1 texts) of the acceptance
uniforms u_t of the ACCEPT stream ζ^R; the tested values are the emitted tokens' keyed values in the
DRAFT and TARGET streams ζ^D, ζ^T. At the scored positions (distinct contexts: the repeated-context mask
:func:`wmspec_jax.context.scored_mask`, exactly as the key-only detectors use it) those are independent
of the weights and i.i.d. with a known law: U(0, 1) uniforms (Gumbel-max), Bernoulli(½) g-values
(SynthID), green indicators with probability γ' = ⌊γV⌋/V (KGW). So, given the weights, each statistic
below is a sum of independent terms with exactly known laws, and its tail is computed exactly (float64,
non-negative arithmetic only: no cancellation, relative precision kept into the deep tail).

**Gumbel-max (Eq. 2).** The emitted token w of S(P, ζ) = argmax_i log(U_i) / P_i has keyed value
y = U_w ~ Beta(1/p, 1) given w (p = P(w)); under H0 y ~ U(0, 1). With E = −log y ~ Exp(1) under H0,
the per-token log-likelihood ratio is log(1/p) − c E with c = 1/p − 1 (c = 0 for a sure token). For a
text, Σ_t c_t E_t is a weighted sum of independent Exp(1) terms. Tested statistic (our choice, a
departure from the continuous LLR): each term quantised on a grid of step h = Σ_t c_t / ``grid``
(terms below h/32 left out), X_t = ⌊c_t E_t / h⌋, which is exactly Geometric(1 − e^{−h/c_t}) on
{0, 1, ...} under H0 (P(X ≥ k) = P(E ≥ k h / c) = e^{−k h / c}); the p-value P(Σ X_t ≤ observed) is
the exact lower tail of a sum of independent geometrics (:func:`.exact_tails.geometric_sum_log_cdf`). The
quantisation moves each term by less than h (h is 1/1024 of the weights' total by default, so the
rounding errors' variance is at most n²/(4 · 1024²) of the null variance Σ c², n the number of terms:
0.4 % for n = 128). Probabilities are clipped to [``min_prob``, 1] (our choice: a token rarer than 1 in
1000 counts as 1 in 1000, so no single token's weight exceeds 999; a mismatch between the detector's
probabilities and the generator's cannot then outweigh a whole text).

**Speculative texts (Alg. 1 and the deployed dual-key methods).** A token is an accepted draft from
Q_{ζ^D} (its draft-stream value is Beta(1/Q(w), 1)), a residual token from R = (P − Q)+ / Σ(P − Q)+
under ζ^T (Beta(1/R(w), 1)) or a bonus token from P_{ζ^T} (Beta(1/P(w), 1)). Which one is inferred
from the models and u only (:func:`.draft_routes.draft_posterior`). The likelihood of the emitted token w by each
route at a scored position of an Alg. 1 text: Q(w) 1{u_t < min(1, P(w)/Q(w))} (the draft was accepted
iff u_t is below its ratio, line 7), R(w) ρ(u_t) with ρ(u) = P(reject | u) = Σ_v Q(v) 1{P(v)/Q(v) ≤ u}
(interpolated from :data:`REJECTION_KNOTS` knots), and P(w). With true-random acceptance (``hu``,
``dathathri``) and at repeated contexts (where generation drew u at random): min(P, Q)(w),
(P − Q)+(w), P(w). Given the generator's K (``lookahead``) a forward-backward pass over Alg. 1's
steps (the state: drafts accepted so far in the step; a bonus token only after K of them) turns these
into posterior routes (:func:`.draft_routes.step_posterior`; our construction). Without K each token is taken on
its own, and a bonus token only where nothing else explains it. With ``source`` records the true
routes are used (the Oracle of this family).

Each token's term searches the streams whose posterior share is at least ``min_share`` (our choice,
default 0.01): min over them of c^κ E^κ, c^κ from the stream's law (Q for the draft stream; R or P,
the likelier watermarked alternative, for the target stream). Under H0 the minimum of independent
c^κ Exp(1) is exactly c Exp(1) with c = 1 / Σ_κ 1/c^κ, so the statistic stays a weighted sum of
independent Exp(1) (one per token) and the tail above applies unchanged. A linear mix of the
streams' LLRs by the posterior would also keep that form, but a stream weighed by mistake then adds
c·Exp(1) of noise. ``method="basic"`` scores the target stream with P alone (the basic watermark;
an Alg. 1 text scored that way stays exact, with less power).

**SynthID (Eq. 3-4).** Under the tournament the emitted token's layer-l g-value is Bernoulli(½ + e_l)
with e_l = (1 − E‖p_{l−1}‖²)/4 (p_{l−1} the distribution entering layer l; the layers are unbiased,
so P(g_l = 1) = E[G(2 − G)] with G the mass of layer l's g = 1 tokens). ‖p_0‖² = Σ P², and one layer
maps E‖p‖² exactly to ‖p‖²(5 + ‖p‖²)/4 − Σp³/2 given p; later layers (our approximation, it only sets
weights) iterate c ↦ c(5 − c)/4, the same map for a uniform p. The weight of g_{t,l} is its LLR
log((1 + 2e)/(1 − 2e)) (0 for a sure token), times the posterior share of its stream (draft stream:
Q; target stream: R or P; shares below ``min_share`` set to 0), rounded on a lattice of at most
:data:`SYNTHID_LEVELS` steps per weight (our choice; the rounded integers are the statistic's
weights, so nothing is approximated in the null). Statistic
U = Σ a g; p = P(U ≥ observed) = P(Σ a (1 − g) ≤ Σ a − observed), exact (:func:`.exact_tails.two_point_sum_log_cdf`).
This replaces SynthID's weighted mean (layer weights 10 → 1, :func:`.synthid.synthid_weights`).

**KGW (Kirchenbauer et al. 2023).** Each scored token is green with probability γ' under H0. The
weight of token t is the LLR of its green indicator, log((γ' + Δ)/γ') − log((1 − γ' − Δ)/(1 − γ')),
with Δ_t = γ'α(S_t − 1/(1 + z)) / (1 + (α − 1)γ') the spike-entropy lower bound on the green
probability's excess over γ' (their Def. 4.1 and Thm 4.2: S_t = Σ_v P_t(v) / (1 + z P_t(v)), modulus
z = (1 − γ')(α − 1) / (1 + (α − 1)γ'), α = e^{bias}; Δ = 0 for a sure token). Departures: γ' for γ
(this package's list has exactly ⌊γV⌋ tokens), bias = δ/T (this package adds δ before the
temperature), weights rounded on a lattice of at most :data:`KGW_LEVELS` steps. p = P(Σ a green ≥
observed), exact.

**Granularity of the keyed values.** The uniforms are the 2^23 odd multiples of 2^−24
(:func:`wmspec_jax.prf.to_uniform`), treated as U(0, 1) as by the key-only Gamma tests: each term's
CDF is exact up to 2^−24, so a text's p-value up to n 2^−24 (n scored tokens) in absolute terms.
"""

from __future__ import annotations

import math
from typing import Optional

import jax.numpy as jnp
import numpy as np

from wmspec_jax.decoders import green_list_size
from wmspec_jax.detect.common import Scores
from wmspec_jax.detect.draft_routes import StreamPosterior, check_method, draft_posterior
from wmspec_jax.detect.exact_tails import geometric_sum_log_cdf, lattice_test
from wmspec_jax.detect.kgw import GreenCount
from wmspec_jax.detect.provenance import Provenance, ProvenanceMismatch, check_compatible
from wmspec_jax.detect.streams_types import GumbelStats, SynthIDStats, check_statistics
from wmspec_jax.detect.token_probs import STREAMS, TokenProbs, as_token_probs, check_probability_array, with_variant_axis

DEFAULT_MIN_PROB = 1e-3
"""Probabilities are clipped to [this, 1] before they set a weight (module doc)."""
DEFAULT_GRID = 1024
"""Gumbel-max: the quantisation step h is the text's total weight over this (module doc)."""
NEGLIGIBLE_STEPS = 32.0
"""Gumbel-max: a term whose weight is below h / this is left out of the statistic (it could move the
quantised total with probability e^{−32} < 1e-13; leaving it out is a rule on the weights, so the null
stays exact)."""
OVERFLOW_GRIDS = 64
"""Gumbel-max: an observed total above this many grids is reported as p = 1 (conservative: under H0
P(total > 64 grids) ≤ 1/64 by Markov, so only p-values above 63/64 are rounded up)."""

SYNTHID_LEVELS = 16
KGW_LEVELS = 64



def _check_min_prob(min_prob: float) -> float:
    x = float(min_prob)
    if not 0.0 < x < 1.0:
        raise ValueError(f"min_prob must lie in (0, 1), got {min_prob}")
    return x


def _check_family(stats, kind, family: str, provenance: Optional[Provenance]):
    stats = check_statistics(stats, kind)
    prov = stats.provenance
    if prov is not None:
        if prov.decoder != family or prov.draft_decoder is not None:
            raise ProvenanceMismatch(f"these are {prov.describe()} statistics; the model-assisted {family} "
                                     f"detector scores {family} statistics only (its weights are {family}'s law)")
        if prov.siblings != 1:
            raise ProvenanceMismatch("multi-draft statistics (siblings > 1) have no model-assisted detector: "
                                     "score them with the key-only detectors")
    check_compatible(prov, provenance)
    return stats


# ---------------------------------------------------------------------------
# Gumbel-max
# ---------------------------------------------------------------------------

DEFAULT_MIN_SHARE = 0.01
"""A stream enters a token's search when its posterior share is at least this (module doc): only a
stream the posterior all but rules out is left out, as a search costs less than a wrong stream."""


def gumbel_weights(prob, min_prob: float = DEFAULT_MIN_PROB) -> np.ndarray:
    """c = 1/p − 1 with p clipped to [min_prob, 1]: the weight of E = −log y in the LLR (Eq. 2's law)."""
    p = np.clip(np.asarray(prob, np.float64), _check_min_prob(min_prob), 1.0)
    return 1.0 / p - 1.0


def gumbel_terms(post: StreamPosterior, y_draft, y_target, mask, *, min_prob: float = DEFAULT_MIN_PROB,
                 min_share: float = DEFAULT_MIN_SHARE) -> tuple:
    """Per-token weights and Exp(1) values of the model-assisted Gumbel-max statistic.

    A stream is searched at token t when its share is at least ``min_share``; the term is
    min over the searched streams κ of c^κ_t E^κ_t (E = −log y, c from :func:`gumbel_weights` of the
    stream's law), which under H0 is c_t E'_t with c_t = 1 / Σ_κ 1/c^κ_t and E'_t ~ Exp(1) (the
    minimum of independent exponentials), and under the watermark small in the producing stream.

    Returns:
      (c float64[B, L], E' float64[B, L]): c = 0 where no stream is searched or a searched stream
      is sure (then the token carries no evidence).
    """
    if not 0.0 < float(min_share) <= 1.0:
        raise ValueError(f"min_share must lie in (0, 1], got {min_share}")
    mask = np.asarray(mask, bool)
    with np.errstate(divide="ignore"):
        e_draft = -np.log(np.asarray(y_draft, np.float64))
        e_target = -np.log(np.asarray(y_target, np.float64))
    c_draft = np.where(post.draft_share >= min_share, gumbel_weights(post.draft_prob, min_prob), np.inf)
    c_target = np.where(post.target_share >= min_share, gumbel_weights(post.target_prob, min_prob), np.inf)
    searched = mask & (np.isfinite(c_draft) | np.isfinite(c_target))
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.minimum(c_draft * e_draft, c_target * e_target)
        c = 1.0 / (1.0 / c_draft + 1.0 / c_target)
        c = np.where(searched, c, 0.0)
        e = np.where(c > 0, value / np.where(c > 0, c, 1.0), 0.0)
    return c, e


def _gumbel_one_text(c, e, grid: int):
    """(log p, centred statistic) of one text's terms c > 0, E' (module doc)."""
    if c.size == 0:
        return 0.0, 0.0
    h = c.sum() / grid
    keep = c * NEGLIGIBLE_STEPS >= h
    c, e = c[keep], e[keep]
    x = np.floor(c * e / h)
    total = x.sum()
    score = float(c.sum() - h * total)
    if not np.isfinite(total) or total > OVERFLOW_GRIDS * grid:
        return 0.0, score
    ratio = h / c
    return min(geometric_sum_log_cdf(np.exp(-ratio), -np.expm1(-ratio), int(total)), 0.0), score


def _generated_positions(stats) -> np.ndarray:
    pos = np.arange(np.shape(stats.mask)[1])[None]
    return (pos >= np.asarray(stats.starts)[:, None]) & (pos < np.asarray(stats.lengths)[:, None])


def score_gumbel_model_assisted(stats: GumbelStats, token_probs, *, method: str = "pseudorandom",
                                lookahead: Optional[int] = None, source=None, min_prob: float = DEFAULT_MIN_PROB,
                                min_share: float = DEFAULT_MIN_SHARE, grid: int = DEFAULT_GRID,
                                provenance: Optional[Provenance] = None) -> Scores:
    """Model-assisted Gumbel-max detection (Eq. 2's law, Alg. 1's streams) with exact p-values.

    Per scored token the term c_t E'_t of :func:`gumbel_terms` (the streams the posterior of
    :func:`.draft_routes.draft_posterior` allows, each weighted by 1/prob − 1 of its law); the statistic is
    G = Σ_t ⌊c_t E'_t / h⌋ (h = Σ c / ``grid``), and p = P_H0(G ≤ observed) exactly (module doc).

    Args:
      stats: Gumbel-max :class:`.streams.GumbelStats` ``[B, L]`` (decoder ``"gumbel"``, one chain).
      token_probs: :class:`.token_probs.TokenProbs` (``[B, L]`` fields aligned with the statistics), or a bare
        float[B, L] of target probabilities (basic watermark).
      method: how the texts were generated (:data:`wmspec_jax.methods.METHODS`): ``"basic"``
        (target stream, law P), ``"pseudorandom"`` (Alg. 1: u_t enters the posterior), ``"hu"``,
        ``"dathathri"`` (true-random acceptance).
      lookahead: the generator's K: the posterior follows Alg. 1's steps (:func:`.draft_routes.step_posterior`;
        recommended); None: token by token.
      source: int8[B, L] generation records: each token in its true stream (an Oracle).
      min_prob: probabilities are clipped to [min_prob, 1]. min_share: see :func:`gumbel_terms`.
      grid: quantisation grid (module doc).
      provenance: the expected provenance (settings, key fingerprint); checked when given.

    Returns:
      :class:`.common.Scores` ``[B]``: ``score`` the centred statistic Σ c − h G (about 0 under H0,
      larger = more watermark-like; NaN where nothing is scored), ``log_pvalue`` exact (0 where no
      token has weight), ``num_scored`` the scored positions.

    Raises:
      ProvenanceMismatch: statistics of another decoder, multi-draft statistics, or other settings.
      ValueError / TypeError: probabilities of another shape, NaN or outside [0, 1] at scored
        positions; a speculative method without the draft's probabilities; bad settings.
    """
    stats = _check_family(stats, GumbelStats, "gumbel", provenance)
    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 16:
        raise ValueError(f"grid must be an int >= 16, got {grid!r}")
    min_prob = _check_min_prob(min_prob)
    mask = np.asarray(stats.mask, bool)
    post = draft_posterior(stats.u, as_token_probs(token_probs), method, mask=mask,
                           valid=_generated_positions(stats), lookahead=lookahead, source=source)
    c, e = gumbel_terms(post, stats.y_draft, stats.y_target, mask, min_prob=min_prob, min_share=min_share)
    n = mask.sum(axis=1)
    log_p = np.zeros(n.shape)
    score = np.full(n.shape, np.nan)
    for b in np.flatnonzero(n > 0):
        keep = c[b] > 0
        log_p[b], score[b] = _gumbel_one_text(c[b][keep], e[b][keep], int(grid))
    return _scores(score, n, log_p)


def _scores(score, n, log_p) -> Scores:
    return Scores(jnp.asarray(score, jnp.float32), jnp.asarray(n, jnp.int32), jnp.asarray(log_p, jnp.float32),
                  jnp.asarray(np.exp(log_p), jnp.float32))


# ---------------------------------------------------------------------------
# SynthID
# ---------------------------------------------------------------------------


def tournament_excess(collision, cube, num_layers: int) -> np.ndarray:
    """e_l, l = 1..m: the excess over ½ of the emitted token's layer-l g-value under the tournament.

    e_l = (1 − c_{l−1})/4 with c_0 = Σ P² (exact for layer 1), c_1 = c_0(5 + c_0)/4 − Σ P³/2 (the
    exact expected collision after one layer), then c ↦ c(5 − c)/4 (module doc; Eq. 4's update).

    Args:
      collision, cube: float[...] Σ P², Σ P³ of the distribution entering the tournament.
      num_layers: m.

    Returns:
      float64[..., m] in [0, 1/4] (0 for a one-hot distribution).
    """
    c = np.clip(np.asarray(collision, np.float64), 0.0, 1.0)
    s = np.clip(np.asarray(cube, np.float64), 0.0, 1.0)
    out = [(1.0 - c) / 4.0]
    c = np.clip(c * (5.0 + c) / 4.0 - s / 2.0, c, 1.0)
    for _ in range(1, int(num_layers)):
        out.append((1.0 - c) / 4.0)
        c = np.clip(c * (5.0 - c) / 4.0, 0.0, 1.0)
    return np.stack(out, axis=-1)


def bernoulli_llr_weight(base: float, excess) -> np.ndarray:
    """log((b + e)/b) − log((1 − b − e)/(1 − b)): the LLR weight of an indicator that is Bernoulli(b + e)
    under the watermark and Bernoulli(b) under H0 (float64, the shape of ``excess``)."""
    e = np.clip(np.asarray(excess, np.float64), 0.0, (1.0 - base) * (1.0 - 1e-9))
    return np.log1p(e / base) - np.log1p(-e / (1.0 - base))


def score_synthid_model_assisted(stats: SynthIDStats, token_probs: TokenProbs, *, method: str = "pseudorandom",
                                 lookahead: Optional[int] = None, source=None, min_share: float = DEFAULT_MIN_SHARE,
                                 levels: int = SYNTHID_LEVELS,
                                 provenance: Optional[Provenance] = None) -> Scores:
    """Model-assisted SynthID detection (Eq. 3-4's tournament) with an exact p-value.

    Weight of g^κ_{t,l}: the posterior share of stream κ (:func:`.draft_routes.draft_posterior`; 0 below
    ``min_share``) times the LLR weight of layer l's g-value under that stream's law (Q; R or P),
    :func:`tournament_excess`, rounded on a lattice (:func:`.exact_tails.lattice_steps`). U = Σ a g;
    p = P_H0(U ≥ observed), exact. (Shares rather than a search over the streams: a g-value's weight
    is at most log 3, so a stream weighed by mistake adds little noise.)

    Args:
      stats: :class:`.streams.SynthIDStats` (g-values [B, L, m]).
      token_probs: :class:`.token_probs.TokenProbs` with ``collision`` and ``cube`` (and ``target``; ``draft``,
        ``residual``, ``rejection`` for speculative methods, as :func:`score_gumbel_model_assisted`).
      method, lookahead, source, min_share, provenance: as :func:`score_gumbel_model_assisted`.
      levels: lattice steps of the largest weight.

    Returns:
      :class:`.common.Scores`: ``score`` the weighted mean g-value U / Σ a (½ under H0; ½ with p = 1
      where no token has weight; NaN where nothing is scored), exact ``log_pvalue``.
    """
    stats = _check_family(stats, SynthIDStats, "synthid", provenance)
    tp = as_token_probs(token_probs)
    mask = np.asarray(stats.mask, bool)
    m = int(np.shape(stats.g_target)[-1])
    post = draft_posterior(stats.u, tp, method, mask=mask, valid=_generated_positions(stats), lookahead=lookahead,
                           source=source)
    speculative = check_method(method).speculative
    variants = max(tp.draft_variants, 1)
    moments = []
    for name in ("collision", "cube"):
        x = with_variant_axis(getattr(tp, name), 3)
        if speculative:
            moments.append(check_probability_array(x, name, mask.shape + (len(STREAMS), variants), mask))
        else:  # only P enters
            moments.append(check_probability_array(None if x is None else x[:, :, :1, :1], name,
                                                    mask.shape + (1, 1), mask))
    coll, cube = moments

    def excess_of(stream: int, variant) -> np.ndarray:  # [B, L, m]
        pick = lambda x: np.take_along_axis(x[:, :, stream], variant[..., None], axis=-1)[..., 0]  # noqa: E731
        return tournament_excess(pick(coll), pick(cube), m)

    draft_share = np.where(post.draft_share >= min_share, post.draft_share, 0.0)
    target_share = np.where(post.target_share >= min_share, post.target_share, 0.0)
    no_variant = np.zeros(mask.shape, np.int64)
    w_target = bernoulli_llr_weight(0.5, excess_of(0, no_variant))
    w_draft = np.zeros(w_target.shape)
    if speculative:
        w_draft = bernoulli_llr_weight(0.5, excess_of(1, post.draft_variant)) * draft_share[..., None]
        w_target = np.where(post.target_is_residual[..., None],
                            bernoulli_llr_weight(0.5, excess_of(2, post.residual_variant)), w_target)
    w_target = w_target * target_share[..., None]
    w_draft = np.where(mask[..., None], w_draft, 0.0)
    w_target = np.where(mask[..., None], w_target, 0.0)
    g_draft = np.asarray(stats.g_draft, np.int64)
    g_target = np.asarray(stats.g_target, np.int64)
    n = mask.sum(axis=1)
    log_p = np.zeros(n.shape)
    score = np.full(n.shape, np.nan)
    for b in np.flatnonzero(n > 0):
        w = np.concatenate([w_draft[b].ravel(), w_target[b].ravel()])
        g = np.concatenate([g_draft[b].ravel(), g_target[b].ravel()])
        log_p[b], score[b] = lattice_test(w, g, 0.5, levels)
    return _scores(score, n, log_p)


# ---------------------------------------------------------------------------
# KGW
# ---------------------------------------------------------------------------


def spike_modulus(green_fraction: float, bias: float) -> float:
    """KGW's spike-entropy modulus z = (1 − γ)(α − 1) / (1 + (α − 1)γ), α = e^bias (Kirchenbauer et al.
    2023, Thm 4.2). ``bias``: the logit bias on the scale of the sampled distribution (δ/T here)."""
    g = float(green_fraction)
    if not 0.0 < g < 1.0:
        raise ValueError(f"green fraction must lie in (0, 1), got {green_fraction}")
    if not float(bias) >= 0.0:
        raise ValueError(f"bias must be >= 0, got {bias}")
    a1 = math.expm1(float(bias))
    return (1.0 - g) * a1 / (1.0 + a1 * g)


def spike_entropy(probs, modulus: float) -> np.ndarray:
    """S(P, z) = Σ_v P(v) / (1 + z P(v)) over the last axis (Kirchenbauer et al. 2023, Def. 4.1): float64[...]."""
    p = np.asarray(probs, np.float64)
    return np.sum(p / (1.0 + float(modulus) * p), axis=-1)


def kgw_green_excess(spike, green_fraction: float, bias: float) -> np.ndarray:
    """Δ = γα(S − 1/(1 + z)) / (1 + (α − 1)γ) ≥ 0: the lower bound of Thm 4.2 on P(green) − γ."""
    g = float(green_fraction)
    z = spike_modulus(g, bias)
    alpha = math.exp(float(bias))
    s = np.asarray(spike, np.float64)
    return np.maximum(g * alpha * (s - 1.0 / (1.0 + z)) / (1.0 + (alpha - 1.0) * g), 0.0)


def score_kgw_model_assisted(stats: GumbelStats, token_probs: TokenProbs, *, gamma: float, vocab_size: int,
                             bias: float, levels: int = KGW_LEVELS,
                             provenance: Optional[Provenance] = None) -> Scores:
    """Model-assisted KGW detection: the green count weighted by spike entropy, exact p-value.

    Args:
      stats: KGW statistics (:func:`.streams.statistics` with a KGW decoder; ``[B, L]``).
      token_probs: :class:`.token_probs.TokenProbs` with ``spike_entropy`` computed at
        ``spike_modulus(⌊γV⌋/V, bias)`` (:func:`.token_probs.token_probs_from_distributions`).
      gamma: KGW's γ; vocab_size: V (the list has ⌊γV⌋ tokens; γ' = ⌊γV⌋/V).
      bias: δ/T, the green bias on the scale of the sampled distribution (δ before the temperature).
      levels: lattice steps of the largest weight.
      provenance: the expected provenance; checked when given.

    Returns:
      :class:`.common.Scores`: ``score`` the weighted green fraction Σ a·green / Σ a (NaN where
      nothing is scored), exact ``log_pvalue`` of P_H0(Σ a·green ≥ observed).
    """
    stats = _check_family(stats, GumbelStats, "kgw", provenance)
    tp = as_token_probs(token_probs)
    mask = np.asarray(stats.mask, bool)
    green_fraction = green_list_size(gamma, vocab_size) / int(vocab_size)
    z = spike_modulus(green_fraction, bias)
    if tp.spike_entropy is None or tp.spike_modulus is None:
        raise ValueError("token_probs.spike_entropy is needed (token_probs_from_distributions(..., "
                         "spike_modulus=spike_modulus(⌊γV⌋/V, δ/T)))")
    if not math.isclose(float(tp.spike_modulus), z, rel_tol=1e-6):
        raise ValueError(f"token_probs.spike_entropy was computed at modulus {tp.spike_modulus}, the detector's "
                         f"γ' = {green_fraction:g} and bias {bias:g} give {z:g}")
    spike = np.asarray(tp.spike_entropy, np.float64)
    if spike.shape != mask.shape:
        raise ValueError(f"token_probs.spike_entropy has shape {spike.shape}, the statistics {mask.shape}")
    if np.isnan(spike[mask]).any():
        raise ValueError("token_probs.spike_entropy is NaN at scored positions")
    weights = bernoulli_llr_weight(green_fraction, kgw_green_excess(spike, green_fraction, bias))
    weights = np.where(mask, weights, 0.0)
    prov = stats.provenance or Provenance("kgw")
    green, rate = GreenCount(prov, float(gamma), int(vocab_size)).green(stats)
    n = mask.sum(axis=1)
    log_p = np.zeros(n.shape)
    score = np.full(n.shape, np.nan)
    for b in np.flatnonzero(n > 0):
        log_p[b], score[b] = lattice_test(weights[b], green[b].astype(np.int64), rate, levels)
    return _scores(score, n, log_p)


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


def score_model_assisted(stats, token_probs, *, method: str = "pseudorandom", lookahead: Optional[int] = None,
                         source=None, min_prob: float = DEFAULT_MIN_PROB, min_share: float = DEFAULT_MIN_SHARE,
                         grid: int = DEFAULT_GRID, gamma: Optional[float] = None, vocab_size: Optional[int] = None,
                         bias: Optional[float] = None, provenance: Optional[Provenance] = None) -> Scores:
    """Model-assisted detection of any family, chosen by the statistics (module doc).

    Gumbel-max statistics → :func:`score_gumbel_model_assisted`; SynthID →
    :func:`score_synthid_model_assisted`; KGW (``gamma``, ``vocab_size``, ``bias`` = δ/T required) →
    :func:`score_kgw_model_assisted`. ``token_probs``: a :class:`.token_probs.TokenProbs`, or a float[B, L] array
    of target probabilities. Returns :class:`.common.Scores` ``[B]``.
    """
    if isinstance(stats, SynthIDStats):
        return score_synthid_model_assisted(stats, token_probs, method=method, lookahead=lookahead, source=source,
                                            min_share=min_share, provenance=provenance)
    prov = getattr(stats, "provenance", None)
    if prov is not None and prov.decoder == "kgw":
        if gamma is None or vocab_size is None or bias is None:
            raise ValueError("KGW statistics: pass gamma, vocab_size and bias (δ/T)")
        return score_kgw_model_assisted(stats, token_probs, gamma=gamma, vocab_size=vocab_size, bias=bias,
                                        provenance=provenance)
    return score_gumbel_model_assisted(stats, token_probs, method=method, lookahead=lookahead, source=source,
                                       min_prob=min_prob, min_share=min_share, grid=grid, provenance=provenance)


__all__ = [
    "DEFAULT_GRID", "DEFAULT_MIN_PROB", "DEFAULT_MIN_SHARE", "KGW_LEVELS", "SYNTHID_LEVELS", "bernoulli_llr_weight",
    "gumbel_terms", "gumbel_weights", "kgw_green_excess", "score_gumbel_model_assisted", "score_kgw_model_assisted",
    "score_model_assisted", "score_synthid_model_assisted", "spike_entropy", "spike_modulus", "tournament_excess",
]
