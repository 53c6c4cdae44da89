"""What the generator's models say of each token: :class:`TokenProbs`, from the models' full distributions.

Model-assisted detection (:mod:`.model_assisted`) weighs each token by the probabilities the target P and
the draft Q gave it (Eq. 2-4, Alg. 1): P(w), Q(w), the residual R(w) = (P − Q)+(w) / Σ(P − Q)+, the
rejection curve ρ(u) = P(reject | u), and the moments SynthID's and KGW's weights need.
:func:`token_probs_from_distributions` computes them, jitted, from [B, L, V] distributions; the
probabilities are checked at the public boundary (:func:`check_probability_array`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import theory

REJECTION_KNOTS = 33
"""Knots u = 0, 1/32, ..., 1 at which ρ(u) = P(reject | u) is tabulated (:class:`TokenProbs`)."""

STREAMS = ("target", "draft", "residual")
"""The distributions :attr:`TokenProbs.collision` and :attr:`TokenProbs.cube` describe, in order."""


class TokenProbs(NamedTuple):
    """What the generator's models say of each position of a batch of texts (aligned with the statistics).

    All arrays are float32 and indexed like the statistics' ``[B, L]`` positions: entry ``t`` describes
    the distribution token ``t`` was drawn from (after temperature and top-k, as the decoder used it).
    Values at positions outside the generated text are ignored (NaN there is fine).

    The draft's distribution at a position may depend on where the position falls in Alg. 1's step:
    a draft that reads the target's hidden states reads its own estimates for the 2nd, ..., K-th draft
    of a step. The draft-side fields therefore carry a trailing axis of S variants: variant s is Q (and
    R, ρ) when the position is the (s + 1)-th draft of its step (the last variant also serves later
    ones); S = 1 for a draft that reads the tokens only. A [B, L] array is read as S = 1.

    Attributes:
      target: [B, L] P_t(w_t), the target's probability of the emitted token.
      draft: [B, L, S] Q_t(w_t), the draft's (speculative methods), or None.
      residual: [B, L, S] R_t(w_t), R = (P − Q)+ normalised (P where the residual mass is below
        :data:`wmspec_jax.theory.RESIDUAL_MASS_EPS`, as the sampler does), or None.
      rejection: [B, L, S, K] ρ_t(u_k) = Σ_v Q_t(v) 1{P_t(v)/Q_t(v) ≤ u_k} at the knots u_k = k/(K − 1)
        (K = :data:`REJECTION_KNOTS`): the probability that a draft is rejected given the acceptance
        uniform u (Alg. 1 line 7), or None.
      collision: [B, L, 3, S] Σ_v D(v)² for D = P, Q, R (:data:`STREAMS`; P's repeated over S; SynthID's
        weights), or None.
      cube: [B, L, 3, S] Σ_v D(v)³ likewise, or None.
      spike_entropy: [B, L] KGW's spike entropy Σ_v P_t(v) / (1 + z P_t(v)), or None.
      spike_modulus: the z of ``spike_entropy`` (:func:`.model_assisted.spike_modulus`), or None.
    """

    target: np.ndarray
    draft: Optional[np.ndarray] = None
    residual: Optional[np.ndarray] = None
    rejection: Optional[np.ndarray] = None
    collision: Optional[np.ndarray] = None
    cube: Optional[np.ndarray] = None
    spike_entropy: Optional[np.ndarray] = None
    spike_modulus: Optional[float] = None

    @property
    def draft_variants(self) -> int:
        """S, the number of draft variants (0 without a draft)."""
        return 0 if self.draft is None else (1 if np.ndim(self.draft) == 2 else int(np.shape(self.draft)[-1]))

    def take(self, rows) -> "TokenProbs":
        """The same fields for texts ``rows`` (an index array or slice along B)."""
        return TokenProbs(*(x if x is None or isinstance(x, float) else np.asarray(x)[rows] for x in self))


def with_variant_axis(x, base_ndim: int):
    """``x`` with the trailing variant axis S (added as S = 1 when absent), or None."""
    if x is None:
        return None
    arr = np.asarray(x)
    return arr[..., None] if arr.ndim == base_ndim else arr


_PROB_SLACK = 1e-5  # float32 softmax outputs may exceed 1 by a few ulps


def check_probability_array(x, name: str, shape: tuple, mask: np.ndarray) -> np.ndarray:
    """``x`` as float64 probabilities of ``shape``, checked (no NaN, in [0, 1]) at the positions of
    ``mask`` and set to 0 elsewhere."""
    if x is None:
        raise ValueError(f"token_probs.{name} is needed here and is None")
    arr = np.asarray(x)
    if arr.shape != shape:
        raise ValueError(f"token_probs.{name} has shape {arr.shape}, the statistics {shape} (one value per "
                         "position of the same texts, aligned as the statistics' tokens)")
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"token_probs.{name} must hold probabilities (floats), got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    where = np.broadcast_to(mask.reshape(mask.shape + (1,) * (arr.ndim - mask.ndim)), arr.shape)
    vals = arr[where]
    if np.isnan(vals).any():
        rows = np.flatnonzero(np.isnan(np.where(where, arr, 0.0)).reshape(shape[0], -1).any(axis=1))
        raise ValueError(f"token_probs.{name} is NaN at scored positions of rows {rows[:10].tolist()}")
    bad = (vals < 0.0) | (vals > 1.0 + _PROB_SLACK)
    if bad.any():
        raise ValueError(f"token_probs.{name} must lie in [0, 1] at scored positions, got e.g. "
                         f"{vals[bad][:3].tolist()}")
    return np.clip(np.where(where, arr, 0.0), 0.0, 1.0)


def as_token_probs(token_probs) -> TokenProbs:
    """A :class:`TokenProbs` from itself or a bare float[B, L] array of target probabilities.

    Raises:
      ValueError: a [B, L, V] array (full distributions need the tokens: use
        :func:`token_probs_from_distributions`).
    """
    if isinstance(token_probs, TokenProbs):
        return token_probs
    arr = np.asarray(token_probs)
    if arr.ndim == 3:
        raise ValueError(f"got full distributions {arr.shape}: turn them into per-token probabilities with "
                         "token_probs_from_distributions(tokens, distributions) (the statistics hold no tokens)")
    return TokenProbs(arr)


@functools.partial(jax.jit, static_argnames=("with_draft", "knots"))
def _summaries(tokens, target, draft, modulus, with_draft: bool, knots: int):
    """Per-position summaries: target [B, L, V], draft [B, L, S, V] (or a dummy without a draft)."""
    tok = tokens[..., None]

    def at_token(d):  # d [B, L, ..., V] -> [B, L, ...]
        index = tok.reshape(tok.shape[:2] + (1,) * (d.ndim - 2))
        return jnp.take_along_axis(d, index, axis=-1)[..., 0]

    def moments(d):
        return jnp.sum(d * d, axis=-1), jnp.sum(d * d * d, axis=-1)

    out = {"target": at_token(target), "spike": jnp.sum(target / (1.0 + modulus * target), axis=-1)}
    target_moments = moments(target)
    if not with_draft:
        out["collision"], out["cube"] = (x[..., None, None] for x in target_moments)
        return out
    p = target[:, :, None, :]
    excess = jnp.maximum(p - draft, 0.0)
    mass = jnp.sum(excess, axis=-1, keepdims=True)
    residual = jnp.where(mass > theory.RESIDUAL_MASS_EPS, excess / jnp.maximum(mass, theory.RESIDUAL_MASS_EPS), p)
    out["draft"] = at_token(draft)
    out["residual"] = at_token(residual)
    ratio = jnp.where(draft > 0, p / jnp.where(draft > 0, draft, 1.0), jnp.inf)
    index = jnp.ceil(ratio * (knots - 1))  # the first knot u_k >= P/Q
    index = jnp.where(jnp.isfinite(index), jnp.clip(index, 0, knots), knots).astype(jnp.int32)
    rows = index.reshape(-1, index.shape[-1])
    weights = draft.reshape(-1, draft.shape[-1])
    hist = jax.vmap(lambda i, w: jax.ops.segment_sum(w, i, num_segments=knots + 1))(rows, weights)
    out["rejection"] = jnp.cumsum(hist[:, :knots], axis=-1).reshape(index.shape[:-1] + (knots,))
    for name, t_m, d_m, r_m in zip(("collision", "cube"), target_moments, moments(draft), moments(residual)):
        out[name] = jnp.stack([jnp.broadcast_to(t_m[..., None], d_m.shape), d_m, r_m], axis=2)  # [B, L, 3, S]
    return out


def _checked_inputs(tokens, target, draft, lengths, starts, vocab_size, rejection_knots) -> tuple:
    """(int[B, L] tokens, {"target": [B, L, V], "draft": [B, L, S, V]} distributions, bool[B, L] described
    positions), checked as :func:`token_probs_from_distributions` documents."""
    tok = np.asarray(tokens)
    if tok.ndim != 2 or not np.issubdtype(tok.dtype, np.integer):
        raise TypeError(f"tokens must be int[B, L], got {tok.dtype}{list(tok.shape)}")
    bsz, length = tok.shape
    dists = {"target": np.asarray(target)}
    if dists["target"].ndim != 3 or dists["target"].shape[:2] != tok.shape:
        raise ValueError(f"target distributions must be [B, L, V] with [B, L] = {tok.shape}, got "
                         f"{dists['target'].shape}")
    vocab = dists["target"].shape[-1]
    if draft is not None:
        d = np.asarray(draft)
        d = d[:, :, None, :] if d.ndim == 3 else d
        if d.ndim != 4 or d.shape[:2] != tok.shape:
            raise ValueError(f"draft distributions must be [B, L, V] or [B, L, S, V] with [B, L] = {tok.shape}, got "
                             f"{np.shape(draft)}")
        if d.shape[-1] != vocab:
            raise ValueError(f"draft distributions have V = {d.shape[-1]}, the target's {vocab} (the pair must share "
                             "one vocabulary)")
        dists["draft"] = d
    if vocab_size is not None and int(vocab_size) != vocab:
        raise ValueError(f"vocabulary mismatch: the distributions have V = {vocab}, the tokenizer {vocab_size}")
    lens = np.full(bsz, length) if lengths is None else np.broadcast_to(np.asarray(lengths), (bsz,))
    st = np.full(bsz, 1) if starts is None else np.broadcast_to(np.asarray(starts), (bsz,))
    if (lens < 0).any() or (lens > length).any() or (st < 0).any():
        raise ValueError("lengths must lie in [0, L] and starts be >= 0")
    pos = np.arange(length)[None]
    valid = (pos >= np.maximum(st, 1)[:, None]) & (pos < lens[:, None])
    outside = valid & ((tok < 0) | (tok >= vocab))
    if outside.any():
        raise ValueError(f"vocabulary mismatch: token ids outside the distributions' vocabulary [0, {vocab}) in rows "
                         f"{np.flatnonzero(outside.any(axis=1))[:10].tolist()}")
    for name, d in dists.items():
        if not np.issubdtype(d.dtype, np.floating):
            raise TypeError(f"{name} distributions must hold floats, got {d.dtype}")
        rows = d[valid]
        if np.isnan(rows).any():
            raise ValueError(f"{name} distributions hold NaN at described positions")
        if (rows < 0).any() or (rows > 1.0 + _PROB_SLACK).any():
            raise ValueError(f"{name} distributions must lie in [0, 1]")
        sums = rows.sum(axis=-1, dtype=np.float64)
        if sums.size and np.abs(sums - 1.0).max() > 1e-3:
            raise ValueError(f"{name} distributions must sum to 1 over the vocabulary (got sums up to "
                             f"{np.abs(sums - 1.0).max() + 1:.4f})")
    if isinstance(rejection_knots, bool) or not isinstance(rejection_knots, (int, np.integer)) or rejection_knots < 2:
        raise ValueError(f"rejection_knots must be an int >= 2, got {rejection_knots!r}")
    return tok, dists, valid


def token_probs_from_distributions(tokens, target, draft=None, *, lengths=None, starts=None,
                                   vocab_size: Optional[int] = None, spike_modulus: Optional[float] = None,
                                   rejection_knots: int = REJECTION_KNOTS) -> TokenProbs:
    """:class:`TokenProbs` of texts from the models' full next-token distributions (the P and Q of Eq. 2-4
    and Alg. 1).

    Args:
      tokens: int[B, L] the texts' token ids (prompt + text, as given to the statistics).
      target: float[B, L, V]: ``target[b, t]`` is P_t, the distribution token ``t`` was drawn from
        (temperature and top-k applied). Rows outside ``[starts, lengths)`` are ignored.
      draft: float[B, L, V] Q_t likewise (speculative methods), or float[B, L, S, V] with one
        distribution per variant (:class:`TokenProbs`: the (s + 1)-th draft of a step), or None.
      lengths: int[B] valid lengths (default L); starts: int or int[B] first position described
        (default 1: position 0 has no distribution).
      vocab_size: V of the statistics' tokenizer; checked against the distributions' V when given.
      spike_modulus: z for KGW's spike entropy (:func:`.model_assisted.spike_modulus`), or None.
      rejection_knots: K of :attr:`TokenProbs.rejection`.

    Returns:
      :class:`TokenProbs` (float32, NaN outside the described positions); ``draft``, ``residual``,
      ``rejection`` only with ``draft``; ``collision`` / ``cube`` hold P's alone ([B, L, 1, 1])
      without it.

    Raises:
      ValueError / TypeError: shapes that disagree, a vocabulary of another size than ``vocab_size``,
        token ids outside the distributions' vocabulary, NaN, negative or > 1 probabilities, or rows
        that do not sum to 1 (within 1e-3) in the described positions.
    """
    tok, dists, valid = _checked_inputs(tokens, target, draft, lengths, starts, vocab_size, rejection_knots)
    safe_tok = np.where(valid, tok, 0).astype(np.int32)
    target_arr = np.where(valid[..., None], dists["target"], 0.0).astype(np.float32)
    if draft is not None:
        draft_arr = np.where(valid[..., None, None], dists["draft"], 0.0).astype(np.float32)
    else:
        draft_arr = np.zeros((1, 1, 1, 1), np.float32)
    modulus = 0.0 if spike_modulus is None else float(spike_modulus)
    out = {k: np.asarray(v, np.float32) for k, v in _summaries(
        jnp.asarray(safe_tok), jnp.asarray(target_arr), jnp.asarray(draft_arr), jnp.float32(modulus),
        draft is not None, int(rejection_knots)).items()}

    def masked(x):
        return np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x, np.float32(np.nan))

    return TokenProbs(
        target=masked(out["target"]),
        draft=masked(out["draft"]) if draft is not None else None,
        residual=masked(out["residual"]) if draft is not None else None,
        rejection=masked(out["rejection"]) if draft is not None else None,
        collision=masked(out["collision"]), cube=masked(out["cube"]),
        spike_entropy=masked(out["spike"]) if spike_modulus is not None else None,
        spike_modulus=None if spike_modulus is None else float(spike_modulus),
    )


__all__ = ["REJECTION_KNOTS", "STREAMS", "TokenProbs", "as_token_probs", "check_probability_array",
           "token_probs_from_distributions", "with_variant_axis"]
