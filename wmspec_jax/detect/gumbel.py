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
  fraction), drawn with a caller-provided ``jax.random`` key.
* **Oracle**: the true source from the generation records.
* **Soft** (beyond the paper, :func:`fit_soft`): the per-token mixture
  likelihood ratio log(π(u_t) r_D(y^D_t) + (1 − π(u_t)) r_T(y^T_t)), where
  π(u) = P(draft | u) and the density ratios r are learned on the training
  split. Its null given the observed u's is a sum of independent discrete
  terms with exactly known per-term distributions, so its p-value is the
  saddlepoint tail of an exactly known CGF — calibrated conditional on u.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import validation
from wmspec_jax.detect import pvalues
from wmspec_jax.detect.common import Detector, Scores, TokenTerms, check_unit, config_provenance, fitted_provenance
from wmspec_jax.detect.provenance import Provenance, check_compatible
from wmspec_jax.detect.streams import SOURCE_DRAFT, GumbelStats, arrays_only, check_source, check_statistics

TAU_GRID = np.linspace(0.0, 1.0, 101)
"""Ars-τ candidates (App. E.1: evenly spaced over [0, 1]; 101 values so the
step is 0.01 and both pure rules, τ = 0 (always y^T) and τ = 1 (always
y^D), are included)."""


def _check_stats(stats) -> GumbelStats:
    return check_statistics(stats, GumbelStats)


# ---------------------------------------------------------------------------
# The Gamma test
# ---------------------------------------------------------------------------


def ars_terms(y: jax.Array) -> jax.Array:
    """Per-token score −log(1 − y): Exp(1) under H0 (+inf at y = 1)."""
    return -jnp.log1p(-jnp.asarray(y, jnp.float32))


@jax.jit
def _sum_terms(y, mask):
    terms = jnp.where(mask, ars_terms(y), 0.0)
    return jnp.sum(terms, axis=1), jnp.sum(mask, axis=1, dtype=jnp.int32)


@jax.jit
def _sum_given_terms(terms, mask):
    return jnp.sum(jnp.where(mask, terms, 0.0), axis=1), jnp.sum(mask, axis=1, dtype=jnp.int32)


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


def choose_prior(shape, draft_fraction: float, rng) -> jax.Array:
    """Eq. (12): the draft statistic with probability p, independently per token.

    Args:
      shape: (B, L).
      draft_fraction: p, the estimated share of accepted draft tokens.
      rng: a ``jax.random`` key (the choice is reproducible given it), or
        typed keys [B], one per text (:func:`text_rngs`): then the coin of
        position t of text b is a function of (key_b, t) only, so a text's
        choice does not depend on its batch, its row or the padding.
    """
    p = check_unit(draft_fraction, "draft fraction p")
    if _per_text_keys(rng, shape[0]):
        return _per_text_uniforms(rng, int(shape[1])) < jnp.float32(p)
    return jax.random.bernoulli(rng, p, tuple(shape))


def _per_text_keys(rng, batch: int) -> bool:
    dtype = getattr(rng, "dtype", None)
    if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return False
    if rng.ndim == 0:
        return False
    if rng.shape != (batch,):
        raise ValueError(f"per-text keys must be [{batch}] (one per text), got shape {rng.shape}")
    return True


@functools.partial(jax.jit, static_argnames=("length",))
def _per_text_uniforms(rngs, length: int):
    positions = jnp.arange(length, dtype=jnp.uint32)
    return jax.vmap(lambda k: jax.vmap(lambda t: jax.random.uniform(jax.random.fold_in(k, t)))(positions))(rngs)


def text_rngs(seed: int, ids) -> jax.Array:
    """Typed ``jax.random`` keys [B], one per text id: ``fold_in(key(seed), id)``.

    Detectors with a random per-token choice (Ars-Prior) given these keys
    score a text identically in any batch (ids: e.g. the texts' indices).
    """
    ids = np.asarray(ids, np.int64)
    if ids.ndim != 1 or (ids < 0).any() or (ids >= 2**32).any():
        raise ValueError("text ids must be a 1-D array of integers in [0, 2^32)")
    base = jax.random.key(int(seed))
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(ids.astype(np.uint32)))


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


def score_ars_prior(stats: GumbelStats, draft_fraction: float, rng) -> Scores:
    """Ars-Prior (Eq. 12) with exact Gamma(n, 1) p-values."""
    stats = _check_stats(stats)
    choice = choose_prior(stats.mask.shape, draft_fraction, rng)
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

    def choose_draft(self, stats: GumbelStats, source, rng) -> jax.Array:
        """bool[B, L]: use y^D at a position (else y^T)."""
        raise NotImplementedError

    def score(self, stats, *, source=None, rng=None) -> Scores:
        stats = _check_stats(stats)
        self.check(stats)
        return gamma_test(select(stats, self.choose_draft(stats, source, rng)), stats.mask)

    def token_terms(self, stats, *, source=None, rng=None) -> TokenTerms:
        stats = _check_stats(stats)
        self.check(stats)
        y = select(stats, self.choose_draft(stats, source, rng))
        terms = jnp.where(stats.mask, ars_terms(y), 0.0)
        return TokenTerms(terms, stats.mask, stats.starts, stats.lengths, "gamma", 1)


@dataclasses.dataclass(frozen=True, eq=False)
class SingleStream(GammaDetector):
    """The basic (non-speculative) watermark's detector: y^T_t (= Ars-τ at τ = 0)."""

    provenance: Provenance
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "single"

    label = property(lambda self: "single (target stream)")

    def choose_draft(self, stats, source, rng):
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

    def choose_draft(self, stats, source, rng):
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
    """Ars-Prior (Eq. 12): y^D_t with probability p per token, from a ``jax.random`` key.

    ``score(stats, rng=...)``: a key, or per-text keys (:func:`text_rngs`);
    without one, ``jax.random.key(seed)``.
    """

    provenance: Provenance
    draft_fraction: float
    seed: int = 0
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "ars_prior"

    def __post_init__(self):
        object.__setattr__(self, "draft_fraction", check_unit(self.draft_fraction, "draft fraction p"))

    label = property(lambda self: "Ars-Prior")

    def choose_draft(self, stats, source, rng):
        return choose_prior(stats.mask.shape, self.draft_fraction, jax.random.key(self.seed) if rng is None else rng)

    def settings(self) -> dict:
        return {"draft_fraction": self.draft_fraction, **({"seed": self.seed} if self.seed else {}), **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "ArsPrior":
        known, rest = split_settings(config, ("draft_fraction", "seed"))
        return cls(config_provenance(config), info=rest, **known)


@dataclasses.dataclass(frozen=True, eq=False)
class Oracle(GammaDetector):
    """Oracle: the statistic of the stream that produced each token (``source`` from the records)."""

    provenance: Provenance
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "gumbel_oracle"
    needs_source: ClassVar[bool] = True

    label = property(lambda self: "Oracle")

    def choose_draft(self, stats, source, rng):
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


@dataclasses.dataclass(frozen=True, eq=False)
class Soft(Detector):
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

    @property
    def params(self) -> dict:
        return dict(self.arrays)

    @classmethod
    def from_saved(cls, config, params) -> "Soft":
        known, rest = split_settings(config, ("num_u_bins", "smoothing", "oracle"))
        return cls(config_provenance(config), dict(params), info=rest, **known)


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
    edges = np.asarray(e_edges, np.float64)
    if edges.ndim != 1 or edges.size < 2 or edges[0] != 0 or (np.diff(edges) <= 0).any():
        raise ValueError("e_edges must be strictly increasing and start at 0")
    if not isinstance(num_u_bins, int) or num_u_bins < 1:
        raise ValueError(f"num_u_bins must be a positive int, got {num_u_bins!r}")
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


def _check_kind(detector, kind: str) -> None:
    if not isinstance(detector, Detector) or detector.kind != kind:
        got = getattr(detector, "kind", type(detector).__name__)
        raise TypeError(f"expected a fitted '{kind}' detector, got {got!r}")
