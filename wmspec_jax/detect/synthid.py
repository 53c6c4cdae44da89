"""SynthID watermark detection: the mean g-value tests (calibrated, no training).

Per scored token t the detector has the g-values of the emitted token under
both streams, g^D_t, g^T_t ∈ {0, 1}^m, and the acceptance uniform u_t
(:mod:`.streams`). Under H0 every g-value is an independent Bernoulli(1/2).

Mean scores (calibrated, no training):

* :func:`mean_test` — mean g-value of any selection of layers/streams with
  its exact Binomial(n·m, 1/2) p-value; with ``weights`` the weighted mean
  of SynthID (layer weights decreasing from 10 to 1) with an exact p-value
  for short texts and a proven upper bound beyond (:mod:`.weighted`).

The Bayesian detectors of App. D are in :mod:`.bayes`, their training in
:mod:`.bayes_training`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import validation
from wmspec_jax.detect import pvalues, weighted
from wmspec_jax.detect.common import Detector, Scores, TokenTerms, config_provenance
from wmspec_jax.detect.provenance import Provenance
from wmspec_jax.detect.streams_types import SynthIDStats, check_statistics

MODES = ("single", "prior", "mlp", "oracle")
MIXTURES = ("layer", "token")


def _check_stats(stats) -> SynthIDStats:
    return check_statistics(stats, SynthIDStats)


# ---------------------------------------------------------------------------
# Mean and weighted-mean scores
# ---------------------------------------------------------------------------


def synthid_weights(num_layers: int) -> np.ndarray:
    """SynthID's weighted-mean layer weights: linear from 10 (layer 1) to 1 (layer m),
    rescaled to mean 1 (earlier layers carry more signal)."""
    w = np.linspace(10.0, 1.0, int(num_layers))
    return (w / w.mean()).astype(np.float32)


def select_g(stats: SynthIDStats, choose_draft) -> jax.Array:
    """g-values of the selected stream per token: uint8[B, L, m]."""
    stats = _check_stats(stats)
    choose = jnp.asarray(choose_draft, bool)
    if choose.shape != stats.mask.shape:
        raise ValueError(f"selection has shape {choose.shape}, statistics {stats.mask.shape}")
    return jnp.where(choose[..., None], stats.g_draft, stats.g_target)


def both_g(stats: SynthIDStats) -> jax.Array:
    """g-values of both streams side by side (the "average both" score): uint8[B, L, 2m]."""
    stats = _check_stats(stats)
    return jnp.concatenate([stats.g_draft, stats.g_target], axis=-1)


@jax.jit
def _mean_test(g, mask):
    g = g.astype(jnp.float32)
    m = g.shape[-1]
    k = jnp.sum(jnp.where(mask[..., None], g, 0.0), axis=(1, 2))
    n = jnp.sum(mask, axis=1, dtype=jnp.int32)
    trials = (n * m).astype(jnp.float32)
    log_p = jnp.where(n > 0, pvalues.binomial_half_log_sf(k, trials), 0.0)
    return Scores(jnp.where(n > 0, k / jnp.maximum(trials, 1.0), jnp.nan), n, log_p, jnp.exp(log_p))


def _check_g(g, mask):
    g = jnp.asarray(g)
    mask = jnp.asarray(mask, bool)
    if g.ndim != 3 or g.shape[:2] != mask.shape:
        raise ValueError(f"g must be [B, L, m] matching mask [B, L], got {g.shape} and {mask.shape}")
    values = None if g.dtype == jnp.bool_ else validation.concrete(g)
    if values is not None:
        bad = (values != 0) & (values != 1)
        if bad.any():
            raise ValueError(f"g-values must be 0 or 1 (SynthID's g ~ Bernoulli(1/2)), got e.g. "
                             f"{np.unique(values[bad])[:5].tolist()}")
    return g, mask


def mean_test(g, mask, weights: Optional[Sequence[float]] = None) -> Scores:
    """(Weighted) mean g-value over scored tokens and layers with its null p-value.

    Args:
      g: {0,1}[B, L, m'] g-values (one stream, a selection, or both streams).
      mask: bool[B, L].
      weights: optional float[m'] positive layer weights (e.g.
        :func:`synthid_weights`); ``None`` for the plain mean.

    Returns:
      :class:`Scores`. The plain mean's p-value is exact (Binomial(n m', ½)).
      The weighted mean's is exact for n ≤ ``weighted.exact_max_tokens(m', Σa)``
      scored tokens (57 for SynthID's m' = 30 weights) and a proven upper bound beyond
      (:mod:`.weighted`: tilted Chernoff with a Berry–Esseen allowance), so
      it never overstates significance.

    Raises:
      ValueError: shapes disagree, a g-value is not 0/1, or bad weights.
    """
    g, mask = _check_g(g, mask)
    if weights is None:
        return _mean_test(g, mask)
    w = np.asarray(weights, np.float64)
    if w.shape != (g.shape[-1],) or (w <= 0).any() or not np.isfinite(w).all():
        raise ValueError(f"weights must be {g.shape[-1]} positive finite numbers, got shape {w.shape}")
    lat = weighted.lattice(w)
    gh = np.asarray(g, np.int64)
    mh = np.asarray(mask)
    n = mh.sum(axis=1)
    observed = np.einsum("blm,m->bl", gh, np.asarray(lat.lower, np.int64))
    k = np.where(mh, observed, 0).sum(axis=1)
    log_p = weighted.log_sf(k, n, lat)
    total = np.where(mh, np.einsum("blm,m->bl", gh.astype(np.float64), w), 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(n > 0, total / (n * w.sum()), np.nan)
    return Scores(jnp.asarray(score, jnp.float32), jnp.asarray(n, jnp.int32), jnp.asarray(log_p, jnp.float32),
                  jnp.asarray(np.exp(log_p), jnp.float32))


def score_mean_single(stats: SynthIDStats, weights=None) -> Scores:
    """Mean score of the basic (non-speculative) SynthID watermark: the TARGET stream."""
    stats = _check_stats(stats)
    return mean_test(stats.g_target, stats.mask, weights)


_BASE_KEYS = ("prf_version", "context_width", "decoder", "provenance")
STREAMS = ("both", "target", "draft")


def _split_settings(config: Mapping[str, Any], known: Sequence[str]) -> tuple:
    rest = {k: v for k, v in config.items() if k not in _BASE_KEYS}
    return {k: rest.pop(k) for k in known if k in rest}, rest


@dataclasses.dataclass(frozen=True, eq=False)
class MeanTest(Detector):
    """SynthID's mean g-value test as a detector (calibrated, no training).

    Attributes:
      provenance: the settings (decoder, m, h; key where known).
      streams: ``"both"`` (the g-values of both streams side by side — the
        key-only choice for Alg. 1 texts), ``"target"`` (the basic
        watermark) or ``"draft"``.
      weighted: SynthID's weighted mean (:func:`synthid_weights`); its
        p-value is exact for short texts and a proven bound beyond.
    """

    provenance: Provenance
    streams: str = "both"
    weighted: bool = False
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "synthid_mean"
    decoder: ClassVar[str] = "synthid"

    def __post_init__(self):
        if self.streams not in STREAMS:
            raise ValueError(f"streams must be one of {STREAMS}, got {self.streams!r}")

    @property
    def label(self) -> str:
        return f"{'weighted mean' if self.weighted else 'mean'} ({self.streams} stream{'s' if self.streams == 'both' else ''})"

    def g(self, stats: SynthIDStats) -> jax.Array:
        """The tested g-values: uint8[B, L, m'] (m' = 2m for both streams)."""
        if self.streams == "both":
            return both_g(stats)
        return stats.g_target if self.streams == "target" else stats.g_draft

    def weights(self) -> Optional[np.ndarray]:
        if not self.weighted:
            return None
        w = synthid_weights(self.provenance.num_layers)
        return np.concatenate([w, w]) if self.streams == "both" else w

    def score(self, stats, *, source=None, rng=None) -> Scores:
        stats = _check_stats(stats)
        self.check(stats)
        return mean_test(self.g(stats), stats.mask, self.weights())

    def token_terms(self, stats, *, source=None, rng=None) -> TokenTerms:
        if self.weighted:
            return super().token_terms(stats)
        stats = _check_stats(stats)
        self.check(stats)
        g = self.g(stats)
        ones = jnp.sum(g.astype(jnp.float32), axis=-1)
        return TokenTerms(jnp.where(stats.mask, ones, 0.0), stats.mask, stats.starts, stats.lengths, "binomial",
                          int(g.shape[-1]))

    def settings(self) -> dict:
        return {"streams": self.streams, "weighted": self.weighted, **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "MeanTest":
        known, rest = _split_settings(config, ("streams", "weighted"))
        return cls(config_provenance(config), info=rest, **known)


__all__ = ["MIXTURES", "MODES", "MeanTest", "STREAMS", "both_g", "mean_test", "score_mean_single", "select_g",
           "synthid_weights"]
