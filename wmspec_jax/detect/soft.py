"""The soft Gumbel-max detector (beyond the paper): the per-token mixture likelihood ratio.

log(π(u_t) r_D(y^D_t) + (1 − π(u_t)) r_T(y^T_t)), where π(u) = P(draft | u)
and the density ratios r of −log(1 − y) are learned on a training split
(:func:`fit_soft`). Its null given the observed u's is a sum of independent
discrete terms with exactly known per-term distributions, so its p-value is
the saddlepoint tail of an exactly known CGF — calibrated conditional on u
(:func:`score_soft`). With ``oracle=True`` it reads the true sources instead
of π(u): the Oracle of the same statistic family.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.detect import pvalues
from wmspec_jax.detect.common import FittedDetector, Scores, config_provenance, fitted_provenance
from wmspec_jax.detect.gumbel import _check_kind, _check_stats, split_settings
from wmspec_jax.detect.provenance import Provenance, check_compatible
from wmspec_jax.detect.streams_batches import arrays_only
from wmspec_jax.detect.streams_types import GumbelStats, check_source
from wmspec_jax.sources import SOURCE_DRAFT


@dataclasses.dataclass(frozen=True, eq=False)
class Soft(FittedDetector):
    """The soft Gumbel detector (beyond the paper; :func:`fit_soft`, :func:`score_soft`).

    With ``oracle=True`` it uses the true sources (``score(stats, source=...)``):
    the Oracle of the same statistic family.
    """

    provenance: Provenance
    arrays: Mapping
    num_u_bins: int = 16
    smoothing: float = 16.0
    oracle: bool = False
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "gumbel_soft"
    decoder: ClassVar[str] = "gumbel"

    @property
    def label(self) -> str:
        return "soft oracle" if self.oracle else "soft (ours)"

    @property
    def needs_source(self) -> bool:
        return self.oracle

    def score(self, stats, *, source=None, rng=None) -> Scores:
        if self.oracle and source is None:
            raise ValueError("the soft oracle needs the token sources (generation records)")
        return score_soft(self, stats, source if self.oracle else None)

    def with_oracle(self, oracle: bool = True) -> "Soft":
        """The same fitted tables, scoring with (``True``) or without the true sources."""
        return dataclasses.replace(self, oracle=bool(oracle))

    def settings(self) -> dict:
        out = {"num_u_bins": self.num_u_bins, "smoothing": self.smoothing}
        if self.oracle:
            out["oracle"] = True
        return {**out, **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "Soft":
        known, rest = split_settings(config, ("num_u_bins", "smoothing", "oracle"))
        return cls(config_provenance(config), dict(params), info=rest, **known)


# ---------------------------------------------------------------------------
# Soft detector: per-token mixture likelihood ratio, calibrated given u
# ---------------------------------------------------------------------------

DEFAULT_E_EDGES = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0, 1.4, 1.9, 2.5, 3.2, 4.0, 5.0, 6.5, 8.5)
"""Bin edges of E = −log(1 − y) (the last bin is [8.5, ∞)). Finer where
watermarked tokens concentrate (large E); the null mass of bin k is
exp(−e_k) − exp(−e_{k+1}) exactly."""


def _e_bins(y, edges):
    e = -jnp.log1p(-jnp.asarray(y, jnp.float32))
    return jnp.clip(jnp.searchsorted(edges, e, side="right") - 1, 0, edges.shape[0] - 1)


def _u_bins(u, num_bins):
    return jnp.clip(jnp.floor(jnp.asarray(u, jnp.float32) * num_bins).astype(jnp.int32), 0, num_bins - 1)


def _checked_bins(e_edges, num_u_bins) -> np.ndarray:
    """The E bin edges as float64 (strictly increasing from 0), ``num_u_bins`` checked."""
    edges = np.asarray(e_edges, np.float64)
    if edges.ndim != 1 or edges.size < 2 or edges[0] != 0 or (np.diff(edges) <= 0).any():
        raise ValueError("e_edges must be strictly increasing and start at 0")
    if not isinstance(num_u_bins, int) or num_u_bins < 1:
        raise ValueError(f"num_u_bins must be a positive int, got {num_u_bins!r}")
    return edges


def fit_soft(
    positives: GumbelStats,
    source,
    *,
    num_u_bins: int = 16,
    e_edges: Sequence[float] = DEFAULT_E_EDGES,
    smoothing: float = 16.0,
    context_width: Optional[int] = None,
) -> Soft:
    """Fits the soft Gumbel detector on watermarked training texts with records.

    Model of one watermarked token given its u-bin b (u split into
    ``num_u_bins`` equal bins): the token came from the draft stream with
    probability π_b; the producing stream's E = −log(1 − y) falls in bin k
    with probability f_κ(k); the other stream's value is uniform. The
    per-token log-likelihood ratio against H0 (both uniform) is

        s_t = log( π_b f_D(i)/p0(i) + (1 − π_b) f_T(j)/p0(j) ),

    i, j the bins of y^D_t, y^T_t and p0 the null bin masses — the Gumbel
    analogue of App. D's two-stream mixture (Eq. (17); one value per stream
    and token here, so the mixture is per token), with P(ζ = ζ^D | u) =
    π_b a function of u. π_b and f_κ are frequencies on the training split
    (true sources from the records), smoothed towards the null (Beta(1, 1)
    for π, ``smoothing`` pseudo-tokens spread as p0 for f), so rare bins
    carry no spurious evidence. The model only shapes the statistic; its
    p-values stay exact-null-based whatever the fit (see :func:`score_soft`).

    Args:
      positives: statistics of watermarked training texts.
      source: int8[B, L] their token sources (generation records).
      num_u_bins: number of equal-width bins of u.
      e_edges: increasing bin edges of E, starting at 0.
      smoothing: pseudo-count mass of the null prior on f_D and f_T.
      context_width: as in :func:`fit_ars_tau`.

    Returns:
      :class:`Soft`: params ``e_edges``, ``table``
      [nb, ny, ny] (the s values), ``log_null`` [ny], ``pi`` [nb], ``f_draft``,
      ``f_target``.
    """
    positives = _check_stats(positives)
    prov = fitted_provenance(positives, "gumbel", context_width)
    src = check_source(source, positives.mask.shape)
    edges = _checked_bins(e_edges, num_u_bins)
    mask = np.asarray(positives.mask) & (src >= 0)
    if not mask.any():
        raise ValueError("no scored watermarked tokens with a known source to fit on")
    upper = np.append(np.exp(-edges[1:]), 0.0)
    p0 = np.exp(-edges) - upper  # null mass of each E bin
    ub = np.asarray(_u_bins(positives.u, num_u_bins))[mask]
    idx_d = np.asarray(_e_bins(positives.y_draft, jnp.asarray(edges, jnp.float32)))[mask]
    idx_t = np.asarray(_e_bins(positives.y_target, jnp.asarray(edges, jnp.float32)))[mask]
    is_draft = src[mask] == SOURCE_DRAFT
    n_draft = np.bincount(ub[is_draft], minlength=num_u_bins)
    n_all = np.bincount(ub, minlength=num_u_bins)
    pi = (n_draft + 1.0) / (n_all + 2.0)
    ny = edges.size

    def density(idx):
        counts = np.bincount(idx, minlength=ny).astype(np.float64)
        return (counts + smoothing * p0) / (counts.sum() + smoothing)

    f_draft = density(idx_d[is_draft])
    f_target = density(idx_t[~is_draft])
    ratio_d = f_draft / p0
    ratio_t = f_target / p0
    table = np.log(pi[:, None, None] * ratio_d[None, :, None] + (1 - pi)[:, None, None] * ratio_t[None, None, :])
    params = {
        "e_edges": edges.astype(np.float32),
        "table": table.astype(np.float32),
        "log_null": np.log(p0).astype(np.float32),
        "pi": pi.astype(np.float32),
        "f_draft": f_draft.astype(np.float32),
        "f_target": f_target.astype(np.float32),
    }
    return Soft(prov, params, num_u_bins=num_u_bins, smoothing=float(smoothing))


def _soft_inputs(detector: Soft, stats: GumbelStats, source):
    """(table, bins): the u-bin table extended by two rows, "known draft"
    (s = log r_D(i)) and "known target" (s = log r_T(j)); bins are the u-bins,
    or with ``source`` the known rows. One table shape for both uses, so the
    scoring function compiles once."""
    p = detector.params
    table = jnp.asarray(p["table"])
    nb = table.shape[0]
    log_null = jnp.asarray(p["log_null"])
    ny = log_null.shape[0]
    log_rd = jnp.log(jnp.asarray(p["f_draft"])) - log_null
    log_rt = jnp.log(jnp.asarray(p["f_target"])) - log_null
    known = jnp.stack([jnp.broadcast_to(log_rd[:, None], (ny, ny)), jnp.broadcast_to(log_rt[None, :], (ny, ny))])
    if source is None:
        bins = _u_bins(stats.u, nb)
    else:
        src = jnp.asarray(check_source(source, stats.mask.shape))
        bins = jnp.where(src == SOURCE_DRAFT, nb, nb + 1).astype(jnp.int32)
    return jnp.concatenate([table, known]), bins


def soft_token_scores(detector: Soft, stats: GumbelStats, source=None):
    """Per-token s_t and the bin of each position: (float32[B, L], int32[B, L])."""
    _check_kind(detector, "gumbel_soft")
    stats = _check_stats(stats)
    check_compatible(stats.provenance, detector.provenance)
    table, bins = _soft_inputs(detector, stats, source)
    return _soft_tokens(table, jnp.asarray(detector.params["e_edges"]), arrays_only(stats), bins)


@jax.jit
def _soft_tokens(table, edges, stats, bins):
    i = _e_bins(stats.y_draft, edges)
    j = _e_bins(stats.y_target, edges)
    return table[bins, i, j], bins


@functools.partial(jax.jit, static_argnames=("iters",))
def _soft_test(table, edges, log_null, stats, bins, iters: int = 40):
    nb, ny, _ = table.shape
    s_tok, b = _soft_tokens(table, edges, stats, bins)
    total = jnp.sum(jnp.where(stats.mask, s_tok, 0.0), axis=1)
    counts = jnp.sum(jax.nn.one_hot(b, nb, dtype=jnp.float32) * stats.mask[..., None], axis=1)  # [B, nb]
    n = jnp.sum(stats.mask, axis=1, dtype=jnp.int32)

    # Exact per-token null given the u-bin: y^D, y^T independent uniforms,
    # so cell (i, j) has probability p0_i p0_j.
    logp_cell = (log_null[:, None] + log_null[None, :]).reshape(-1)  # [C]
    cells = table.reshape(nb, -1)  # [nb, C]
    mean_b = jnp.sum(jnp.exp(logp_cell)[None] * cells, axis=1)  # [nb]
    centred = cells - mean_b[:, None]
    d = total - counts @ mean_b

    p_cell = jnp.exp(logp_cell)
    resid = jnp.sum(p_cell[None] * centred, axis=1)  # float rounding of the zero mean, ~1e-8

    def cgf(lam):  # λ: [B]; centred CGF of Σ_b n_b (per-token term of bin b)
        # K_b(λ) = log Σ_c p_c e^{λ s̃_c} written as log1p(Σ_c p_c expm1(λ s̃_c)) with
        # expm1(x) − x summed separately: K_b(0) = 0 exactly and no O(1) terms cancel,
        # so K stays accurate where it is O(λ²) (near the mean).
        x = lam[:, None, None] * centred[None]  # [B, nb, C]
        a = pvalues.expm1_minus_x(x)
        lin = lam[:, None] * resid[None]
        z1 = jnp.sum(p_cell * a, axis=-1) + lin  # Σ p (e^x − 1)
        kc = jnp.log1p(z1)
        ex = a + x + 1.0  # e^x
        zz = 1.0 + z1
        m1 = (jnp.sum(p_cell * centred[None] * (a + x), axis=-1) + resid[None]) / zz
        e2 = jnp.sum(p_cell * centred[None] ** 2 * ex, axis=-1) / zz
        e3 = jnp.sum(p_cell * centred[None] ** 3 * ex, axis=-1) / zz
        m2 = jnp.maximum(e2 - m1**2, 0.0)
        m3 = e3 - 3 * m1 * m2 - m1**3
        return tuple(jnp.sum(counts * v, axis=1) for v in (kc, m1, m2, m3))

    def slope(lam):  # (K', K'') only, for the Newton iterations: one expm1 per cell
        em1 = jnp.expm1(lam[:, None, None] * centred[None])
        zz = 1.0 + jnp.sum(p_cell * em1, axis=-1)
        m1 = (jnp.sum(p_cell * centred[None] * em1, axis=-1) + resid[None]) / zz
        e2 = jnp.sum(p_cell * centred[None] ** 2 * (em1 + 1.0), axis=-1) / zz
        return jnp.sum(counts * m1, axis=1), jnp.sum(counts * jnp.maximum(e2 - m1**2, 0.0), axis=1)

    span = jnp.max(cells) - jnp.min(cells)
    bound = 60.0 / jnp.maximum(span, 1e-3)  # keeps λ·s inside float32's exp range
    log_p = pvalues.saddlepoint_log_sf(d, cgf, lower=-bound, upper=bound, iters=iters, slope=slope)
    # the largest attainable total has an exactly known (atomic) probability
    smax = jnp.max(cells, axis=1)
    at_max = jnp.isclose(cells, smax[:, None], rtol=0, atol=1e-6)
    log_p_max = jnp.log(jnp.sum(jnp.where(at_max, jnp.exp(logp_cell)[None], 0.0), axis=1))  # [nb]
    total_max = counts @ smax
    log_p = jnp.where(total >= total_max - 1e-4 * jnp.maximum(1.0, jnp.abs(total_max)), counts @ log_p_max, log_p)
    log_p = jnp.where(n > 0, log_p, 0.0)
    return Scores(jnp.where(n > 0, total, jnp.nan), n, log_p, jnp.exp(log_p))


def score_soft(detector: Soft, stats: GumbelStats, source=None) -> Scores:
    """Soft detector: Σ_t s_t with p-values conditional on the observed u's.

    With ``source`` (int8[B, L] records) the per-token mixture is replaced
    by the true stream's ratio, log r_D(i) or log r_T(j): the Oracle of the
    same statistic family, for measuring how much of the gap the soft use
    of u closes.

    Under H0 the y's are i.i.d. U(0, 1) and independent of u, so given the
    u-bins the tokens' s_t are independent with exactly known discrete
    distributions (cell (i, j) of bin b has probability p0_i p0_j). The
    p-value is the Lugannani–Rice saddlepoint tail of that exact CGF
    (relative error O(1/n)), with the exact atom at the maximal total.
    """
    _check_kind(detector, "gumbel_soft")
    stats = _check_stats(stats)
    check_compatible(stats.provenance, detector.provenance)
    table, bins = _soft_inputs(detector, stats, source)
    p = detector.params
    return _soft_test(table, jnp.asarray(p["e_edges"]), jnp.asarray(p["log_null"]), arrays_only(stats), bins)


__all__ = ["DEFAULT_E_EDGES", "Soft", "fit_soft", "score_soft", "soft_token_scores"]
