"""Watermark detection (Sec. 4.2, App. D-E): everything from token ids and the key.

Pipeline (see ``docs/detection.md``):

1. statistics — :func:`gumbel_statistics` / :func:`synthid_statistics`
   rebuild, per position, the emitted token's draft- and target-stream
   values and the acceptance uniform u_t, plus the repeated-context mask
   (identical to generation). No model, no logits. Pass the keys generation
   used (:func:`wmspec_jax.keys.text_keys`); the statistics carry their
   :class:`Provenance` (settings + key fingerprint), detectors check it.
2. detectors — Gumbel-max: :func:`score_single`, :func:`score_ars_tau`
   (Eq. 11, τ from :func:`fit_ars_tau`), :func:`score_ars_prior` (Eq. 12),
   :func:`score_oracle`, :func:`score_soft` (beyond the paper); all with
   calibrated p-values. SynthID: :func:`mean_test` (plain / weighted mean,
   exact null), Bayesian detectors (App. D) trained by :func:`train_bayes`
   in modes single / prior (Bayes-Prior) / mlp (Bayes-MLP) / oracle.
3. metrics — :mod:`.metrics`: ROC, AUC, TPR at FPR (threshold from
   negatives or from p-values) with bootstrap CIs, TPR vs length.
4. :func:`save_detector` / :func:`load_detector` — key-free archives.
"""

from wmspec_jax.detect import gumbel, io, metrics, provenance, pvalues, streams, synthid, weighted
from wmspec_jax.detect.common import Detector, Scores, decision_scores
from wmspec_jax.detect.provenance import Provenance, ProvenanceMismatch, check_compatible
from wmspec_jax.detect.gumbel import (
    TAU_GRID,
    ars_prior_detector,
    fit_ars_tau,
    fit_soft,
    gamma_test,
    score_ars_prior,
    score_ars_tau,
    score_oracle,
    score_single,
    score_soft,
)
from wmspec_jax.detect.io import load_detector, save_detector
from wmspec_jax.detect.pvalues import binomial_half_log_sf, gamma_log_sf
from wmspec_jax.detect.streams import (
    GumbelStats,
    Records,
    SynthIDStats,
    draft_fraction,
    gumbel_statistics,
    pseudo_source,
    records_from_generation,
    synthid_statistics,
    take,
    truncate,
)
from wmspec_jax.detect.synthid import (
    BayesConfig,
    TrainConfig,
    make_dataset,
    mean_test,
    score_bayes,
    synthid_weights,
    train_bayes,
)


def score(detector: Detector, stats, *, source=None, rng=None) -> Scores:
    """Scores texts with any fitted detector.

    Args:
      detector: from :func:`fit_ars_tau`, :func:`ars_prior_detector`,
        :func:`fit_soft`, :func:`train_bayes` or :func:`load_detector`.
      stats: statistics of the matching decoder.
      source: int8[B, L] token sources (Bayesian Oracle only).
      rng: ``jax.random`` key (Ars-Prior only).

    Raises:
      ProvenanceMismatch: the statistics were computed with other settings
        (decoder, m, h, PRF version) or another key than the detector's.
    """
    if not isinstance(detector, Detector):
        raise TypeError(f"expected a Detector, got {type(detector).__name__}")
    check_compatible(getattr(stats, "provenance", None), detector.provenance)
    if detector.kind == "ars_tau":
        return score_ars_tau(stats, detector.config["tau"])
    if detector.kind == "ars_prior":
        if rng is None:
            raise ValueError("Ars-Prior draws its per-token choice from a jax.random key: pass rng=")
        return score_ars_prior(stats, detector.config["draft_fraction"], rng)
    if detector.kind == "gumbel_soft":
        return score_soft(detector, stats)
    if detector.kind == "bayes":
        return score_bayes(detector, stats, source)
    raise ValueError(f"unknown detector kind {detector.kind!r}")


__all__ = [
    "BayesConfig", "Detector", "GumbelStats", "Provenance", "ProvenanceMismatch", "Records", "Scores",
    "SynthIDStats", "TAU_GRID", "TrainConfig", "check_compatible", "provenance", "take", "weighted",
    "ars_prior_detector", "binomial_half_log_sf", "decision_scores", "draft_fraction", "fit_ars_tau", "fit_soft",
    "gamma_log_sf", "gamma_test", "gumbel", "gumbel_statistics", "io", "load_detector", "make_dataset",
    "mean_test", "metrics", "pseudo_source", "pvalues", "records_from_generation", "save_detector", "score",
    "score_ars_prior", "score_ars_tau", "score_bayes", "score_oracle", "score_single", "score_soft", "streams",
    "synthid", "synthid_statistics", "synthid_weights", "train_bayes", "truncate",
]
