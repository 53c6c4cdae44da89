"""Watermark detection (Sec. 4.2, App. D-E): everything from token ids and the key.

Pipeline (see ``docs/detection.md``):

1. statistics — :func:`gumbel_statistics` / :func:`synthid_statistics`
   rebuild, per position, the emitted token's draft- and target-stream
   values and the acceptance uniform u_t, plus the repeated-context mask
   (identical to generation). No model, no logits. Pass the keys generation
   used (:func:`wmspec_jax.keys.text_keys`); the statistics carry their
   :class:`Provenance` (settings + key fingerprint), detectors check it.
2. detectors — small typed objects with one ``score(stats)`` method, made
   by name from :mod:`.registry` (the registry the CLI, the experiments
   and the notebooks share: :func:`make`) or fitted. Gumbel-max:
   :class:`SingleStream`, :class:`ArsTau` (Eq. 11, τ from
   :func:`fit_ars_tau`), :class:`ArsPrior` (Eq. 12), :class:`Oracle`,
   :class:`Soft` (beyond the paper, :func:`fit_soft`); all with calibrated
   p-values. SynthID: :class:`MeanTest` (plain / weighted mean, exact null),
   :class:`Bayes` (App. D) trained by :func:`train_bayes` in modes single /
   prior (Bayes-Prior) / mlp (Bayes-MLP) / oracle. The functions
   :func:`score_ars_tau`, :func:`score_oracle`, ... are the same tests as
   plain functions.
3. windows — :mod:`.windows`: the best window of a partly watermarked text
   and its p-value corrected for the windows tried.
4. metrics — :mod:`.metrics`: ROC, AUC, TPR at FPR (threshold from
   negatives or from p-values) with bootstrap CIs, TPR vs length.
5. :func:`save_detector` / :func:`load_detector` — key-free archives.
"""

from wmspec_jax.detect import gumbel, io, metrics, provenance, pvalues, registry, streams, synthid, weighted, windows
from wmspec_jax.detect.common import Detector, Scores, TokenTerms, decision_scores
from wmspec_jax.detect.provenance import Provenance, ProvenanceMismatch, check_compatible
from wmspec_jax.detect.gumbel import (
    TAU_GRID,
    ArsPrior,
    ArsTau,
    Oracle,
    SingleStream,
    Soft,
    text_rngs,
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
from wmspec_jax.detect.registry import DEFAULTS, from_saved, make
from wmspec_jax.detect.synthid import (
    Bayes,
    BayesConfig,
    MeanTest,
    TrainConfig,
    make_dataset,
    mean_test,
    score_bayes,
    synthid_weights,
    train_bayes,
)


def score(detector: Detector, stats, *, source=None, rng=None) -> Scores:
    """``detector.score(stats, source=source, rng=rng)`` (kept as a function for older code).

    Args:
      detector: any detector object (:func:`make`, :func:`fit_ars_tau`,
        :func:`fit_soft`, :func:`train_bayes`, :func:`load_detector`).
      stats: statistics of the matching decoder.
      source: int8[B, L] token sources (the Oracles only).
      rng: ``jax.random`` key or per-text keys (Ars-Prior only; default
        ``jax.random.key(detector.seed)``).

    Raises:
      ProvenanceMismatch: the statistics were computed with other settings
        (decoder, m, h, PRF version) or another key than the detector's.
    """
    if not isinstance(detector, Detector):
        raise TypeError(f"expected a detector object (wmspec_jax.detect.make / fit_* / load_detector), got "
                        f"{type(detector).__name__}")
    return detector.score(stats, source=source, rng=rng)


__all__ = [
    "ArsPrior", "ArsTau", "Bayes", "DEFAULTS", "MeanTest", "Oracle", "SingleStream", "Soft", "TokenTerms",
    "from_saved", "make", "registry", "text_rngs", "windows",
    "BayesConfig", "Detector", "GumbelStats", "Provenance", "ProvenanceMismatch", "Records", "Scores",
    "SynthIDStats", "TAU_GRID", "TrainConfig", "check_compatible", "provenance", "take", "weighted",
    "ars_prior_detector", "binomial_half_log_sf", "decision_scores", "draft_fraction", "fit_ars_tau", "fit_soft",
    "gamma_log_sf", "gamma_test", "gumbel", "gumbel_statistics", "io", "load_detector", "make_dataset",
    "mean_test", "metrics", "pseudo_source", "pvalues", "records_from_generation", "save_detector", "score",
    "score_ars_prior", "score_ars_tau", "score_bayes", "score_oracle", "score_single", "score_soft", "streams",
    "synthid", "synthid_statistics", "synthid_weights", "train_bayes", "truncate",
]
