"""Gumbel-max watermark detection (Sec. 4.2, App. E.1).

Each scored token t has two candidate statistics, the uniform of the
emitted token under the draft stream (y^D_t) and under the target stream
(y^T_t), plus the acceptance uniform u_t (:mod:`.streams`). A detector
picks (or weighs) one per token and tests Σ_t −log(1 − y_t) (Scott
Aaronson's score). Under H0 the text is independent of the key, so y^D_t,
y^T_t and u_t are i.i.d. U(0, 1) — over tokens, streams and positions —
and **any selection rule that does not look at the y's** leaves the selected
−log(1 − y_t) i.i.d. Exp(1): the score is Gamma(n, 1) with exact p-values
(:func:`.pvalues.gamma_log_sf`).

Detectors:

* single stream — the basic (non-speculative) watermark: y^T_t.
* **Ars-τ** (Eq. 11): y_t = y^D_t if u_t < τ else y^T_t. τ is chosen on a
  training split from a grid of 101 values to maximise TPR at the target
  FPR (:func:`fit_ars_tau`). Because the rule only looks at u_t, the null
  stays Gamma(n, 1) for every τ, so the threshold at each τ is the exact
  Gamma quantile and the training split needs watermarked texts only.
* **Ars-Prior** (Eq. 12): y^D_t with probability p (the training draft
  fraction), independently per token. The paper draws these coins with a
  random generator; here (our choice, a departure from Eq. 12) each coin is
  a keyed function of the token's acceptance uniform u_t
  (:func:`prior_uniforms`): the 24-bit integer k_t of u_t, xor
  :data:`PRIOR_COIN_DOMAIN`, through the PRF's bijection ``prf.mix``, as a
  uniform; coin_t = that uniform < p. The verdict is then a function of the
  key and the scored tokens alone: nothing outside them (a trailing
  newline, a batch, padding) and no seed can re-draw the coins, so a text
  cannot be re-scored until it comes out "watermarked". The null stays
  exactly Gamma(n, 1): under H0 the text is independent of the key, so u_t
  is independent of (y^D_t, y^T_t) and a function of u_t is a selection
  rule that does not look at the y's (above). Under H1 ``mix`` decorrelates
  the coin from u_t's magnitude — Ars-τ reads exactly that (u_t < τ, and an
  accepted draft token has u_t below its acceptance ratio); Ars-Prior's
  coins are meant to be independent of it, and among accepted draft tokens
  they come up 1 with frequency p as random coins would.
* **Oracle**: the true source from the generation records.
* **Soft** (beyond the paper): the per-token mixture likelihood ratio, in
  :mod:`.soft`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, validation
from wmspec_jax.detect import pvalues
from wmspec_jax.detect.common import (Detector, Scores, TokenTerms, check_unit, config_provenance, fitted_provenance,
                                      ignored_rng)
from wmspec_jax.detect.provenance import Provenance, ProvenanceMismatch, check_compatible
from wmspec_jax.detect.streams_batches import arrays_only
from wmspec_jax.detect.streams_types import GumbelStats, check_source, check_statistics
from wmspec_jax.sources import SOURCE_DRAFT

TAU_GRID = np.linspace(0.0, 1.0, 101)
"""Ars-τ candidates (App. E.1: evenly spaced over [0, 1]; 101 values so the
step is 0.01 and both pure rules, τ = 0 (always y^T) and τ = 1 (always
y^D), are included)."""


def _check_stats(stats) -> GumbelStats:
    """Gumbel-family statistics (one uniform per token and stream); statistics whose provenance names
    another family (KGW's places in its permutation) are refused, also by the bare ``score_*`` functions."""
    stats = check_statistics(stats, GumbelStats)
    prov = stats.provenance
    if prov is not None and prov.family != "gumbel":
        raise ProvenanceMismatch(f"these are {prov.decoder} statistics, scored by the {prov.family} detectors "
                                 "(wmspec_jax.detect.registry.DEFAULTS), not by a Gumbel-max detector")
    return stats


# ---------------------------------------------------------------------------
# The Gamma test
# ---------------------------------------------------------------------------


def ars_terms(y: jax.Array) -> jax.Array:
    """Per-token score −log(1 − y): Exp(1) under H0 (+inf at y = 1)."""
    return -jnp.log1p(-jnp.asarray(y, jnp.float32))


def tree_sum(x: jax.Array) -> jax.Array:
    """Σ over the last axis by a fixed pairwise tree (float32: error O(log L) ulps).

    The axis is padded with zeros to a power of two and halved level by level, so position t
    always meets the same partners: a text's sum is the same bit for bit whatever its padding or
    the batch's width (the extra zeros join as exact zeros), unlike ``jnp.sum``, whose order
    depends on the width. Used inside jit; the loop runs over the log2(L) levels at trace time.
    """
    x = jnp.asarray(x)
    n = x.shape[-1]
    size = 1 << max(n - 1, 0).bit_length()
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - n)])
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


@jax.jit
def _sum_terms(y, mask):
    terms = jnp.where(mask, ars_terms(y), 0.0)
    return tree_sum(terms), jnp.sum(mask, axis=1, dtype=jnp.int32)


@jax.jit
def _sum_given_terms(terms, mask):
    return tree_sum(jnp.where(mask, terms, 0.0)), jnp.sum(mask, axis=1, dtype=jnp.int32)


def _gamma_scores(total, n) -> Scores:
    # the [B, L] reduction and the [B] p-value are separate jitted pieces, so a new
    # text length does not recompile the (large) incomplete-gamma graph
    log_p = pvalues.gamma_log_sf(n, total)
    return Scores(jnp.where(n > 0, total, jnp.nan), n, log_p, jnp.exp(log_p))


def gamma_test(y, mask) -> Scores:
    """Σ_t −log(1 − y_t) over scored tokens with its exact Gamma(n, 1) p-value.

    Args:
      y: float[B, L] selected uniforms in [0, 1]. Statistics of this package
        lie in (0, 1) and are float32; a float64 ``y`` from elsewhere keeps its
        precision (−log(1 − y) is taken in float64, so 1 − 1e-9 scores 20.7,
        not +inf), and y = 1 exactly gives the limit log p = −inf.
      mask: bool[B, L] scored positions.

    Returns:
      :class:`Scores` (score NaN and p = 1 where no token is scored).

    Raises:
      ValueError: shapes differ, or a scored y is NaN or outside [0, 1].
    """
    mask = jnp.asarray(mask, bool)
    if np.shape(y) != mask.shape or mask.ndim != 2:
        raise ValueError(f"y and mask must both be [B, L], got {np.shape(y)} and {mask.shape}")
    y_host = validation.concrete(y)
    if y_host is None:  # traced: checked by the caller
        return _gamma_scores(*_sum_terms(y, mask))
    if not np.issubdtype(y_host.dtype, np.floating):
        raise TypeError(f"y must hold floats in [0, 1], got dtype {y_host.dtype}")
    m = np.asarray(mask)
    bad = m & ~((y_host >= 0) & (y_host <= 1))
    if bad.any():
        raise ValueError(f"y must lie in [0, 1] at scored positions; got e.g. {y_host[bad][:3].tolist()} in rows "
                         f"{np.flatnonzero(bad.any(axis=1))[:10].tolist()}")
    if y_host.dtype == np.float64:
        with np.errstate(divide="ignore"):
            terms = -np.log1p(-np.where(m, y_host, 0.0))
        return _gamma_scores(*_sum_given_terms(jnp.asarray(terms, jnp.float32), mask))
    return _gamma_scores(*_sum_terms(jnp.asarray(y, jnp.float32), mask))


def select(stats: GumbelStats, choose_draft) -> jax.Array:
    """y_t = y^D_t where ``choose_draft`` else y^T_t: float32[B, L]."""
    stats = _check_stats(stats)
    choose_draft = jnp.asarray(choose_draft, bool)
    if choose_draft.shape != stats.mask.shape:
        raise ValueError(f"selection has shape {choose_draft.shape}, statistics {stats.mask.shape}")
    return jnp.where(choose_draft, stats.y_draft, stats.y_target)


def choose_ars_tau(u, tau) -> jax.Array:
    """Eq. (11): the draft statistic iff u_t < τ. bool[B, L]."""
    return jnp.asarray(u) < jnp.float32(tau)


PRIOR_COIN_DOMAIN = 0x41525350
"""Domain separation of Ars-Prior's coins (the bytes "ARSP"): xored into the
24-bit integer of the acceptance uniform before ``prf.mix``, so the coins are
not a re-use of any value the watermark itself draws."""


@jax.jit
def prior_uniforms(u) -> jax.Array:
    """Ars-Prior's keyed uniform of each token, float32[...] in (0, 1), from its acceptance uniform.

    k_t = round(u_t 2^24) is the odd 24-bit integer of u_t (:func:`wmspec_jax.prf.to_uniform`), so
    the value is ``to_uniform(mix(k_t ^ PRIOR_COIN_DOMAIN))``: a function of (key, context) only,
    i.i.d. over scored positions under H0 and independent of the y's there (module doc). Non-finite
    u (values at unscored positions of statistics built by hand) count as 0.
    """
    u = jnp.asarray(u, jnp.float32)
    u = jnp.clip(jnp.where(jnp.isfinite(u), u, 0.0), 0.0, 1.0)
    k = jnp.round(u * jnp.float32(2.0**24)).astype(jnp.uint32)
    return prf.to_uniform(prf.mix(k ^ jnp.uint32(PRIOR_COIN_DOMAIN)))


def choose_prior(u, draft_fraction: float) -> jax.Array:
    """Eq. (12) with keyed coins: the draft statistic with probability p, independently per token.

    Args:
      u: float32[B, L] the acceptance uniforms (``GumbelStats.u``).
      draft_fraction: p, the estimated share of accepted draft tokens.

    Returns:
      bool[B, L]: :func:`prior_uniforms` (u) < p — a function of the key and the text's tokens only,
      so a text's choice does not depend on its batch, its row, the padding or any seed. Under H0 the
      coins are independent of the y's (module doc: the null stays Gamma(n, 1)).
    """
    p = check_unit(draft_fraction, "draft fraction p")
    return prior_uniforms(u) < jnp.float32(p)


def choose_oracle(source) -> jax.Array:
    """The true source: draft statistic iff the token is an accepted draft (source == 0)."""
    return jnp.asarray(source) == SOURCE_DRAFT


def score_single(stats: GumbelStats) -> Scores:
    """Single-stream detector for the basic (non-speculative) watermark: y^T_t."""
    stats = _check_stats(stats)
    return gamma_test(stats.y_target, stats.mask)


def score_ars_tau(stats: GumbelStats, tau: float) -> Scores:
    """Ars-τ (Eq. 11) with exact Gamma(n, 1) p-values."""
    stats = _check_stats(stats)
    tau = check_unit(tau, "tau")
    return gamma_test(select(stats, choose_ars_tau(stats.u, tau)), stats.mask)


def score_ars_prior(stats: GumbelStats, draft_fraction: float, rng=None) -> Scores:
    """Ars-Prior (Eq. 12, keyed coins: :func:`choose_prior`) with exact Gamma(n, 1) p-values.

    ``rng`` is ignored (the coins are keyed; see :func:`.common.ignored_rng`).
    """
    ignored_rng(rng)
    stats = _check_stats(stats)
    choice = choose_prior(stats.u, draft_fraction)
    return gamma_test(select(stats, choice), stats.mask)


def score_oracle(stats: GumbelStats, source) -> Scores:
    """Oracle: the statistic of the stream that actually produced each token.

    ``source`` is int8[B, L] from the generation records (or
    :func:`.streams.pseudo_source` for texts without records).
    """
    stats = _check_stats(stats)
    src = check_source(source, stats.mask.shape)
    return gamma_test(select(stats, choose_oracle(src)), stats.mask)


# ---------------------------------------------------------------------------
# The Gumbel detectors as objects (registry: :mod:`.registry`)
# ---------------------------------------------------------------------------

_BASE_KEYS = ("prf_version", "context_width", "decoder", "provenance")


def split_settings(config: Mapping[str, Any], known: Sequence[str]) -> tuple:
    """(known settings, the rest) of a saved config, without the provenance-derived keys."""
    rest = {k: v for k, v in config.items() if k not in _BASE_KEYS}
    return {k: rest.pop(k) for k in known if k in rest}, rest


class GammaDetector(Detector):
    """A Gumbel detector that picks y^D or y^T per token without looking at the y's.

    Its score Σ_t −log(1 − y_t) is then Gamma(n, 1) under H0 (module doc):
    exact p-values, and per-token terms for windowed scores.
    """

    decoder: ClassVar[str] = "gumbel"

    def choose_draft(self, stats: GumbelStats, source) -> jax.Array:
        """bool[B, L]: use y^D at a position (else y^T)."""
        raise NotImplementedError

    def score(self, stats, *, source=None, rng=None) -> Scores:
        ignored_rng(rng)
        stats = _check_stats(stats)
        self.check(stats)
        return gamma_test(select(stats, self.choose_draft(stats, source)), stats.mask)

    def token_terms(self, stats, *, source=None, rng=None) -> TokenTerms:
        ignored_rng(rng)
        stats = _check_stats(stats)
        self.check(stats)
        y = select(stats, self.choose_draft(stats, source))
        terms = jnp.where(stats.mask, ars_terms(y), 0.0)
        return TokenTerms(terms, stats.mask, stats.starts, stats.lengths, "gamma", 1)


@dataclasses.dataclass(frozen=True, eq=False)
class SingleStream(GammaDetector):
    """The basic (non-speculative) watermark's detector: y^T_t (= Ars-τ at τ = 0)."""

    provenance: Provenance
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "single"

    label = property(lambda self: "single (target stream)")

    def choose_draft(self, stats, source):
        return jnp.zeros(stats.mask.shape, bool)

    def settings(self) -> dict:
        return dict(self.info)

    @classmethod
    def from_saved(cls, config, params) -> "SingleStream":
        _, rest = split_settings(config, ())
        return cls(config_provenance(config), info=rest)


@dataclasses.dataclass(frozen=True, eq=False)
class ArsTau(GammaDetector):
    """Ars-τ (Eq. 11): y^D_t if u_t < τ else y^T_t. :func:`fit_ars_tau` chooses τ.

    Attributes:
      provenance: of the training statistics (or of the settings, key unknown).
      tau: τ ∈ [0, 1].
      target_fpr, calibration: how τ was chosen (None when set by hand).
      taus, train_tpr: the grid and its training TPR curve (None when set by hand).
      info: further key-free notes (saved with the config).
    """

    provenance: Provenance
    tau: float
    target_fpr: Optional[float] = None
    calibration: Optional[str] = None
    taus: Optional[np.ndarray] = None
    train_tpr: Optional[np.ndarray] = None
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "ars_tau"

    def __post_init__(self):
        object.__setattr__(self, "tau", check_unit(self.tau, "tau"))

    label = property(lambda self: "Ars-tau")

    def choose_draft(self, stats, source):
        return choose_ars_tau(stats.u, self.tau)

    def settings(self) -> dict:
        out = {"tau": self.tau}
        if self.target_fpr is not None:
            out["target_fpr"] = self.target_fpr
        if self.calibration is not None:
            out["calibration"] = self.calibration
        return {**out, **self.info}

    @property
    def params(self) -> dict:
        return {} if self.taus is None else {"taus": self.taus, "train_tpr": self.train_tpr}

    @classmethod
    def from_saved(cls, config, params) -> "ArsTau":
        known, rest = split_settings(config, ("tau", "target_fpr", "calibration"))
        return cls(config_provenance(config), taus=params.get("taus"), train_tpr=params.get("train_tpr"), info=rest,
                   **known)


@dataclasses.dataclass(frozen=True, eq=False)
class ArsPrior(GammaDetector):
    """Ars-Prior (Eq. 12): y^D_t with probability p per token, with keyed coins.

    The coin of token t is :func:`prior_uniforms` (u_t) < p, u_t its acceptance uniform: a
    deterministic function of the watermark key and the scored tokens, so no edit outside them and
    no seed can re-draw it. This departs from Eq. 12, which draws the coins with a random generator
    (our choice: a verdict that can be re-drawn can be shopped for). The null is still exactly
    Gamma(n, 1): under H0 the text is independent of the key, u_t is independent of
    (y^D_t, y^T_t), and a function of u_t is a selection rule that does not look at the y's. Under
    H1 ``prf.mix`` decorrelates the coin from u_t's magnitude (which Ars-τ thresholds), so the coins
    are 1 for a share p of the accepted draft tokens, as random coins are.

    Attributes:
      provenance: of the statistics it scores (or of the settings, key unknown).
      draft_fraction: p ∈ [0, 1].
      info: further key-free notes (saved with the config). Files saved with a ``seed`` (the random
        coins' seed) load; the seed is dropped.
    """

    provenance: Provenance
    draft_fraction: float
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "ars_prior"

    def __post_init__(self):
        object.__setattr__(self, "draft_fraction", check_unit(self.draft_fraction, "draft fraction p"))

    label = property(lambda self: "Ars-Prior")

    def choose_draft(self, stats, source):
        return choose_prior(stats.u, self.draft_fraction)

    def settings(self) -> dict:
        return {"draft_fraction": self.draft_fraction, **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "ArsPrior":
        known, rest = split_settings(config, ("draft_fraction", "seed"))
        known.pop("seed", None)  # the random coins' seed of older files: the coins are keyed now
        return cls(config_provenance(config), info=rest, **known)


@dataclasses.dataclass(frozen=True, eq=False)
class Oracle(GammaDetector):
    """Oracle: the statistic of the stream that produced each token (``source`` from the records)."""

    provenance: Provenance
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "gumbel_oracle"
    needs_source: ClassVar[bool] = True

    label = property(lambda self: "Oracle")

    def choose_draft(self, stats, source):
        if source is None:
            raise ValueError("the Oracle detector needs the token sources (generation records, or "
                             "detect.pseudo_source for texts without records)")
        return choose_oracle(check_source(source, stats.mask.shape))

    def settings(self) -> dict:
        return dict(self.info)

    @classmethod
    def from_saved(cls, config, params) -> "Oracle":
        _, rest = split_settings(config, ())
        return cls(config_provenance(config), info=rest)


# ---------------------------------------------------------------------------
# Ars-τ: choosing τ on a training split
# ---------------------------------------------------------------------------


@jax.jit
def _log_p_grid(stats: GumbelStats, taus):  # stats without provenance (arrays_only)
    def one(tau):
        y = jnp.where(stats.u < tau, stats.y_draft, stats.y_target)
        total, n = _sum_terms(y, stats.mask)
        return pvalues.gamma_log_sf(n, total)

    return jax.lax.map(one, taus)  # [T, B]


def fit_ars_tau(
    positives: GumbelStats,
    *,
    target_fpr: float = 0.01,
    taus: Optional[Sequence[float]] = None,
    negatives: Optional[GumbelStats] = None,
    context_width: Optional[int] = None,
) -> ArsTau:
    """Chooses Ars-τ's τ on a training split (App. E.1).

    For each τ on the grid, TPR at the target FPR is measured on the
    watermarked training texts and the best τ is kept (ties: the larger
    median −log p, then the smaller τ).

    Thresholds. By default (``negatives=None``) the threshold is the exact
    Gamma(n, 1) quantile, i.e. "p ≤ FPR": the selection rule looks only at
    u, so the null is exact for every τ and no unwatermarked training text
    is needed. With ``negatives`` the threshold at each τ is instead the
    empirical (1 − FPR) quantile of the negatives' −log p (the paper's
    protocol when a null is not trusted).

    Args:
      positives: statistics of watermarked training texts.
      target_fpr: FPR at which TPR is maximised.
      taus: candidate grid (default :data:`TAU_GRID`, 101 values).
      negatives: optional unwatermarked training texts.
      context_width: h used by the generator; by default taken from the
        statistics' provenance (an explicit value must agree with it).

    Returns:
      :class:`ArsTau` with ``tau``, ``target_fpr``, ``calibration``, the
      statistics' provenance, and the curve ``taus``, ``train_tpr``.

    Raises:
      ValueError: no scored token in the positives (or negatives): texts too
        short (< h + 1 tokens without their prompt) or all contexts repeated.
    """
    positives = _check_stats(positives)
    fpr = check_unit(target_fpr, "target FPR", open_interval=True)
    grid = np.asarray(TAU_GRID if taus is None else taus, np.float32)
    if grid.ndim != 1 or grid.size == 0 or (grid < 0).any() or (grid > 1).any():
        raise ValueError("taus must be a non-empty 1-D grid inside [0, 1]")
    _require_scored(positives, "positives")
    prov = fitted_provenance(positives, "gumbel", context_width)
    lp = np.asarray(_log_p_grid(arrays_only(positives), jnp.asarray(grid)))  # [T, B]
    if negatives is None:
        tpr = np.mean(lp <= np.log(fpr), axis=1)
        calibration = "exact-null"
    else:
        negatives = _check_stats(negatives)
        _require_scored(negatives, "negatives")
        check_compatible(negatives.provenance, prov, what="negatives", against="positives")
        lpn = np.asarray(_log_p_grid(arrays_only(negatives), jnp.asarray(grid)))
        from wmspec_jax.detect import metrics  # fitting only: it brings scipy.stats

        tpr, _ = metrics._tpr_np(-lp.astype(np.float64), -lpn.astype(np.float64), fpr)  # per τ
        calibration = "negatives"
    median_strength = np.median(-lp, axis=1)
    order = np.lexsort((grid, -median_strength, -tpr))  # primary: TPR, then strength, then small τ
    best = int(order[0])
    return ArsTau(prov, float(grid[best]), target_fpr=fpr, calibration=calibration, taus=grid,
                  train_tpr=tpr.astype(np.float32))


def _require_scored(stats, what: str) -> None:
    n = np.asarray(stats.mask).sum(axis=1)
    if not n.any():
        raise ValueError(f"no scored token in the {what}: every text is shorter than h + 1 tokens (without its "
                         "prompt) or repeats its contexts; nothing to fit on")


def ars_prior_detector(draft_fraction: float, context_width: Optional[int] = None, *,
                       provenance=None) -> ArsPrior:
    """Ars-Prior as a saveable detector (its only parameter is p, e.g. from
    :func:`.streams.draft_fraction` on the training records).

    ``provenance``: the training statistics' (``stats.provenance``) so that
    scoring checks the key too; without it only h and the decoder are known.
    """
    p = check_unit(draft_fraction, "draft fraction p")
    prov = fitted_provenance(provenance, "gumbel", context_width)
    return ArsPrior(prov, p)


def _check_kind(detector, kind: str) -> None:
    if not isinstance(detector, Detector) or detector.kind != kind:
        got = getattr(detector, "kind", type(detector).__name__)
        raise TypeError(f"expected a fitted '{kind}' detector, got {got!r}")


__all__ = ["ArsPrior", "ArsTau", "GammaDetector", "Oracle", "PRIOR_COIN_DOMAIN", "SingleStream", "TAU_GRID",
           "ars_prior_detector", "ars_terms", "choose_ars_tau", "choose_oracle", "choose_prior", "fit_ars_tau",
           "gamma_test", "prior_uniforms", "score_ars_prior", "score_ars_tau", "score_oracle", "score_single",
           "select", "split_settings", "tree_sum"]
