"""Which stream produced each token of a speculative text, from the models and the acceptance uniforms.

A token of an Alg. 1 text is an accepted draft (draft stream ζ^D, law Q), a residual token after a
rejection (target stream ζ^T, law R) or a bonus token (ζ^T, law P). :func:`draft_posterior` infers the
route of each token from the models' probabilities (:class:`.token_probs.TokenProbs`) and the ACCEPT
stream's uniforms u only — never from the draft- and target-stream values the detectors then weigh, which
under H0 stay independent of it. Given the generator's K, :func:`step_posterior` ties the routes together
by Alg. 1's step structure (a forward-backward pass; our construction).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from wmspec_jax import methods as methods_lib
from wmspec_jax.detect.streams_types import check_source
from wmspec_jax.detect.token_probs import TokenProbs, as_token_probs, check_probability_array, with_variant_axis
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_RESIDUAL, SOURCE_TARGET


def check_method(method: str) -> methods_lib.Method:
    """The :class:`wmspec_jax.methods.Method` whose texts ``method``'s texts are for detection
    (:func:`wmspec_jax.methods.detected_as`: ``coupled`` texts are the basic watermark's); it must
    watermark some token."""
    if method not in methods_lib.METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(methods_lib.METHODS)}")
    m = methods_lib.METHODS[methods_lib.detected_as(method)]
    if not m.watermarks:
        raise ValueError(f"method {method!r} watermarks no token: nothing to detect")
    return m


class StreamPosterior(NamedTuple):
    """Where each token came from, as the models (and u) tell it (all [B, L]).

    Attributes:
      draft_share: float64 P(accepted draft | models, u): the draft stream, law Q.
      residual_share: float64 P(residual token | ...): the target stream, law R.
      bonus_share: float64 P(bonus or basic token | ...): the target stream, law P.
      draft_prob: float64 Q_t(w_t) of the likeliest draft variant (0 without a draft).
      target_prob: float64 the emitted token's probability under the target stream's more likely
        watermarked alternative: R_t(w_t) (residual) or P_t(w_t) (bonus / basic).
      target_share: float64 the posterior share of the target stream's watermarked alternatives
        (residual where the method watermarks it, bonus where it watermarks the target).
      target_is_residual: bool ``target_prob`` is R_t(w_t).
      draft_variant, residual_variant: int the variant (:class:`.token_probs.TokenProbs`) of Q and of R used.
    """

    draft_share: np.ndarray
    residual_share: np.ndarray
    bonus_share: np.ndarray
    draft_prob: np.ndarray
    target_prob: np.ndarray
    target_share: np.ndarray
    target_is_residual: np.ndarray
    draft_variant: np.ndarray
    residual_variant: np.ndarray


def _interpolate_rejection(curve: np.ndarray, u: np.ndarray) -> np.ndarray:
    """ρ(u) from its values at equally spaced knots: curve [..., K], u [...] -> [...]."""
    knots = curve.shape[-1] - 1
    x = np.clip(np.nan_to_num(u, nan=0.0), 0.0, 1.0) * knots
    lo = np.minimum(np.floor(x).astype(np.int64), knots - 1)
    frac = x - lo
    below = np.take_along_axis(curve, lo[..., None], axis=-1)[..., 0]
    above = np.take_along_axis(curve, lo[..., None] + 1, axis=-1)[..., 0]
    return below * (1.0 - frac) + above * frac


STEP_TRACKING_NOISE = 1e-3
"""Per-position probability that the step posterior forgets its state (spread uniformly), so a position
the models cannot explain (a slightly different Q, a token outside top-k) does not stall it."""


class StepPosterior(NamedTuple):
    """Output of :func:`step_posterior` (float64).

    Attributes:
      routes: [B, L, 3] posterior of (draft, residual, bonus) per position (0 at invalid positions).
      draft_state: [B, L, K] posterior of (state s, draft route): the token is the (s + 1)-th draft.
      residual_state: [B, L, K] posterior of (state s, residual route): s drafts were accepted first.
    """

    routes: np.ndarray
    draft_state: np.ndarray
    residual_state: np.ndarray


def step_posterior(draft_like, residual_like, bonus_like, valid, lookahead: int,
                   noise: float = STEP_TRACKING_NOISE) -> StepPosterior:
    """Posterior of each token's route through Alg. 1's steps (lines 2-17; forward-backward over the step).

    The state before position t is s = the number of drafts accepted so far in the current step
    (0..K). From s < K the token is an accepted draft (likelihood ``draft_like[..., s]``, next state
    s + 1) or a residual token after a rejection (``residual_like[..., s]``, next state 0); from s = K
    it is the bonus token (``bonus_like``, next state 0). The first position's state is uniform (the
    text may start inside a step); each transition forgets the state with probability ``noise``.

    Args:
      draft_like, residual_like: float64[B, L, K] likelihoods of the emitted token by each route in
        each state (or [B, L]: the same in every state).
      bonus_like: float64[B, L].
      valid: bool[B, L] the generated positions (a contiguous run per row; others are skipped).
      lookahead: K.
      noise: as :data:`STEP_TRACKING_NOISE`.

    Returns:
      :class:`StepPosterior`.
    """
    k = int(lookahead)
    states = k + 1
    bsz, length = np.shape(bonus_like)
    draft_like = np.broadcast_to(with_variant_axis(draft_like, 2), (bsz, length, k))
    residual_like = np.broadcast_to(with_variant_axis(residual_like, 2), (bsz, length, k))
    valid = np.asarray(valid, bool)
    prior = np.full((bsz, states), 1.0 / states)
    priors = np.zeros((bsz, length, states))

    def normalised(x):
        total = x.sum(axis=-1, keepdims=True)
        return np.where(total > 0, x / np.where(total > 0, total, 1.0), 1.0 / x.shape[-1])

    for t in range(length):
        v = valid[:, t, None]
        priors[:, t] = prior
        nxt = np.zeros((bsz, states))
        nxt[:, 1:] = prior[:, :k] * draft_like[:, t]
        nxt[:, 0] = (prior[:, :k] * residual_like[:, t]).sum(axis=1) + prior[:, k] * bonus_like[:, t]
        nxt = (1.0 - noise) * normalised(nxt) + noise / states
        prior = np.where(v, nxt, prior)
    after = np.ones((bsz, states))
    draft_state = np.zeros((bsz, length, k))
    residual_state = np.zeros((bsz, length, k))
    bonus = np.zeros((bsz, length))
    for t in range(length - 1, -1, -1):
        v = valid[:, t, None]
        ahead = (1.0 - noise) * after + noise * after.mean(axis=1, keepdims=True)
        al = priors[:, t]
        d = al[:, :k] * draft_like[:, t] * ahead[:, 1:]
        r = al[:, :k] * residual_like[:, t] * ahead[:, :1]
        bo = al[:, k] * bonus_like[:, t] * ahead[:, 0]
        total = d.sum(axis=1) + r.sum(axis=1) + bo
        scale = np.where(v[:, 0] & (total > 0), 1.0 / np.where(total > 0, total, 1.0), 0.0)
        draft_state[:, t], residual_state[:, t], bonus[:, t] = d * scale[:, None], r * scale[:, None], bo * scale
        back = np.zeros((bsz, states))
        back[:, :k] = draft_like[:, t] * ahead[:, 1:] + residual_like[:, t] * ahead[:, :1]
        back[:, k] = bonus_like[:, t] * ahead[:, 0]
        after = np.where(v, normalised(back), after)
    routes = np.stack([draft_state.sum(-1), residual_state.sum(-1), bonus], axis=-1)
    return StepPosterior(routes, draft_state, residual_state)


def steps_from_records(source, valid) -> np.ndarray:
    """int[B, L] the number of accepted drafts before each position in its step, from ``source`` records."""
    src = np.asarray(source)
    valid = np.asarray(valid, bool)
    count = np.zeros(src.shape[0], np.int64)
    out = np.zeros(src.shape, np.int64)
    for t in range(src.shape[1]):
        count = np.where(valid[:, t], count, 0)
        out[:, t] = count
        count = np.where(valid[:, t] & (src[:, t] == SOURCE_DRAFT), count + 1, 0)
    return out


def _route_likelihoods(u, tp: TokenProbs, m: methods_lib.Method, mask, p, q, resid, vshape: tuple) -> tuple:
    """Likelihoods of each emitted token by the draft, residual and bonus routes (:func:`draft_posterior`):
    (float64[B, L, S] draft, [B, L, S] residual, [B, L] bonus); 1 where nothing is known of a position."""
    # values at described but unscored positions, for the step structure (NaN there: uninformative)
    def described(x, checked, where):
        raw = np.clip(np.asarray(x, np.float64), 0.0, 1.0)
        return np.where(where, checked, raw)

    vmask = mask[..., None]
    p_all = described(tp.target, p, mask)
    q_all = described(with_variant_axis(tp.draft, 2), q, vmask)
    r_all = None if resid is None else described(with_variant_axis(tp.residual, 2), resid, vmask)
    unknown = ~mask & (np.isnan(p_all) | np.isnan(q_all).any(-1))
    p_all, q_all = np.nan_to_num(p_all), np.nan_to_num(q_all)
    pv = p_all[..., None]
    draft_like = np.minimum(pv, q_all)  # [B, L, S]
    residual_like = np.maximum(pv - q_all, 0.0)
    if m.pseudorandom_acceptance:
        uu = np.asarray(u, np.float64)[..., None]
        ratio = np.where(q_all > 0, np.minimum(1.0, pv / np.where(q_all > 0, q_all, 1.0)), 0.0)
        keyed_draft = np.where((q_all > 0) & (uu < ratio), q_all, 0.0)
        keyed_residual = residual_like
        if tp.rejection is not None and r_all is not None:
            curve_raw = with_variant_axis(tp.rejection, 3)
            if curve_raw.shape[-1] < 2:
                raise ValueError("token_probs.rejection needs at least 2 knots")
            curve = check_probability_array(curve_raw, "rejection", vshape + (curve_raw.shape[-1],), mask)
            keyed_residual = np.nan_to_num(r_all) * _interpolate_rejection(
                np.nan_to_num(curve), np.broadcast_to(uu, q_all.shape)) * (pv > q_all)
        draft_like = np.where(vmask, keyed_draft, draft_like)
        residual_like = np.where(vmask, keyed_residual, residual_like)
    bonus_like = np.where(unknown, 1.0, p_all)
    draft_like = np.where(unknown[..., None], 1.0, draft_like)
    residual_like = np.where(unknown[..., None], 1.0, residual_like)
    return draft_like, residual_like, bonus_like


def draft_posterior(u, token_probs: TokenProbs, method: str = "pseudorandom", *, mask=None, valid=None,
                    lookahead: Optional[int] = None, source=None) -> StreamPosterior:
    """The source of each token (draft, residual, bonus) from the models and u only (module doc; Alg. 1).

    Likelihood of the emitted token w by each route at a scored position of an Alg. 1 text (keyed u):
    accepted draft Q(w) 1{u < min(1, P(w)/Q(w))}; residual R(w) ρ(u) (ρ(u) = P(reject | u) from
    ``token_probs.rejection``; without it (P(w) − Q(w))+); bonus P(w). With true-random acceptance
    (``hu``, ``dathathri``) and at unscored positions (a repeated context: generation drew u at
    random there): min(P(w), Q(w)), (P(w) − Q(w))+, P(w). With ``lookahead`` the routes are tied
    together by the step structure (:func:`step_posterior`), and the state picks the draft variant
    (:class:`.token_probs.TokenProbs`); without it each token is on its own (first-draft variant) and a bonus token
    is recognised only where nothing else explains it.

    Args:
      u: float[B, L] the acceptance uniforms (``stats.u``).
      token_probs: :class:`.token_probs.TokenProbs` with ``target`` and, for speculative methods, ``draft``
        (``residual`` and ``rejection`` refine it).
      method: a name of :data:`wmspec_jax.methods.METHODS` that watermarks.
      mask: bool[B, L] scored positions (default all).
      valid: bool[B, L] generated positions the step structure runs over (default ``mask``).
      lookahead: the generator's K, or None.
      source: int8[B, L] generation records (``SOURCE_*``): the true routes and steps instead.

    Returns:
      :class:`StreamPosterior`: a function of u, the models' probabilities and the text only, never
      of the draft- and target-stream values it weighs, which under H0 stay independent of it.
    """
    m = check_method(method)
    tp = as_token_probs(token_probs)
    shape = np.shape(tp.target)
    mask = np.ones(shape, bool) if mask is None else np.asarray(mask, bool)
    valid = mask if valid is None else np.asarray(valid, bool) | mask
    p = check_probability_array(tp.target, "target", mask.shape, mask)
    zeros = np.zeros(p.shape)
    first = np.zeros(p.shape, np.int64)
    if not m.speculative:
        return StreamPosterior(zeros, zeros, np.ones(p.shape), zeros, p,
                               np.ones(p.shape) if m.watermark_target else zeros, np.zeros(p.shape, bool), first,
                               first)
    if tp.draft is None:
        raise ValueError(f"method {method!r} is speculative: the draft's probabilities (token_probs.draft) are "
                         "needed to tell the streams apart; method='basic' scores the target stream alone")
    if lookahead is not None and (isinstance(lookahead, bool) or not isinstance(lookahead, (int, np.integer))
                                  or lookahead < 1):
        raise ValueError(f"lookahead must be the generator's K (an int >= 1) or None, got {lookahead!r}")
    variants = tp.draft_variants
    vshape = p.shape + (variants,)
    q = check_probability_array(with_variant_axis(tp.draft, 2), "draft", vshape, mask)
    resid = None if tp.residual is None else check_probability_array(with_variant_axis(tp.residual, 2),
                                                                      "residual", vshape, mask)
    if source is not None:
        src = check_source(source, p.shape)
        routes = np.stack([src == SOURCE_DRAFT, src == SOURCE_RESIDUAL, src >= SOURCE_TARGET], -1).astype(np.float64)
        draft_variant = residual_variant = np.minimum(steps_from_records(src, valid), variants - 1)
    else:
        draft_like, residual_like, bonus_like = _route_likelihoods(u, tp, m, mask, p, q, resid, vshape)
        if lookahead is not None:
            k = int(lookahead)
            state_variant = np.minimum(np.arange(k), variants - 1)
            steps = step_posterior(draft_like[..., state_variant], residual_like[..., state_variant], bonus_like,
                                   valid, k)
            routes = steps.routes
            draft_variant = state_variant[steps.draft_state.argmax(-1)]
            residual_variant = state_variant[steps.residual_state.argmax(-1)]
        else:
            d, r = draft_like[..., 0], residual_like[..., 0]
            bonus_only = (d <= 0) & (r <= 0)
            total = d + r
            routes = np.stack([np.where(total > 0, d / np.where(total > 0, total, 1.0), 0.0),
                               np.where(total > 0, r / np.where(total > 0, total, 1.0), 0.0),
                               bonus_only.astype(np.float64)], -1)
            draft_variant = residual_variant = first
    draft_share, residual_share, bonus_share = routes[..., 0], routes[..., 1], routes[..., 2]
    residual_marked = residual_share * m.watermark_residual
    bonus_marked = bonus_share * m.watermark_target
    use_residual = (residual_marked >= bonus_marked) & (residual_marked > 0) & (resid is not None)
    pick = lambda x, v: np.take_along_axis(x, v[..., None], axis=-1)[..., 0]  # noqa: E731
    target_prob = np.where(use_residual, pick(resid, residual_variant) if resid is not None else p, p)
    return StreamPosterior(draft_share * m.watermark_draft, residual_share, bonus_share, pick(q, draft_variant),
                           target_prob, residual_marked + bonus_marked, use_residual, draft_variant, residual_variant)


__all__ = ["STEP_TRACKING_NOISE", "StepPosterior", "StreamPosterior", "check_method", "draft_posterior",
           "step_posterior", "steps_from_records"]
