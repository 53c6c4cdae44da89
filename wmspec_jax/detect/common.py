"""Result containers and the detector base class shared by the detection modules."""

from __future__ import annotations

import abc
import warnings
from typing import Any, ClassVar, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf
from wmspec_jax.detect.provenance import Provenance, ProvenanceMismatch, check_compatible


class Scores(NamedTuple):
    """Per-text result of a detector (all [B]).

    Attributes:
      score: float32 the detector's statistic, larger = more watermark-like
        (Gumbel: Σ −log(1 − y_t) or a log-likelihood ratio; SynthID: the
        (weighted) mean g-value or the Bayesian log-odds). NaN where
        ``num_scored == 0``: such a text gets no score rather than a wrong one.
      num_scored: int32 number of scored tokens n.
      log_pvalue: float32 log P_H0(score ≥ observed | n) where the null is
        known (0 where n = 0); NaN for detectors without a calibrated null
        (the Bayesian ones: threshold them on negatives).
      pvalue: float32 exp(log_pvalue).
    """

    score: jax.Array
    num_scored: jax.Array
    log_pvalue: jax.Array
    pvalue: jax.Array


def decision_scores(scores: Scores) -> jax.Array:
    """One number per text for ROC/TPR metrics: −log p where a null is known, else the score.

    −log p ranks texts of different lengths on one scale (the raw score
    grows with n); Bayesian log-odds already do.
    """
    lp = scores.log_pvalue
    return jnp.where(jnp.isnan(lp), scores.score, -lp)


class TokenTerms(NamedTuple):
    """Per-token evidence of a detector whose score is a sum over tokens (for windowed scores).

    Attributes:
      terms: float32[B, L] the per-token term (0 at unscored positions).
        Gumbel gamma detectors: −log(1 − y_t), Exp(1) under H0; SynthID mean
        tests: the number of ones among the token's m' g-values,
        Binomial(m', ½) under H0.
      mask: bool[B, L] scored positions.
      starts, lengths: int32[B] as in the statistics.
      null: ``"gamma"`` or ``"binomial"``: the law of a sum of n terms under
        H0 (Gamma(n, 1), or Binomial(n m', ½)).
      trials: m' (g-values per token) for ``"binomial"``, 1 for ``"gamma"``.
    """

    terms: jax.Array
    mask: jax.Array
    starts: jax.Array
    lengths: jax.Array
    null: str
    trials: int


class Detector(abc.ABC):
    """A detector: a small typed object with one :meth:`score` method.

    Every detector of this package (Ars-τ, Ars-Prior, Oracle, single stream,
    soft; SynthID mean tests and Bayesian detectors) is a frozen dataclass
    subclass, listed by name in :mod:`.registry` (the one registry the CLI,
    the experiments and the notebooks use). It holds key-free settings and
    fitted arrays, and the :class:`.provenance.Provenance` of the statistics
    it was built for; :meth:`score` checks that provenance first.

    Class attributes:
      kind: the name in saved files (``"ars_tau"``, ``"bayes"``, ...).
      decoder: the family of statistics it scores, ``"gumbel"`` or ``"synthid"``
        (:attr:`.provenance.Provenance.family`; a detector's provenance names the decoder).
      calibrated: its p-values are exact / calibrated (False: Bayesian
        log-odds, threshold them on negatives).
      needs_source: scoring needs the generation records' token sources
        (the Oracles): not usable on text alone.
    """

    kind: ClassVar[str] = ""
    decoder: ClassVar[str] = ""
    calibrated: ClassVar[bool] = True
    needs_source: ClassVar[bool] = False

    provenance: Provenance  # a dataclass field of every subclass

    @abc.abstractmethod
    def score(self, stats, *, source=None, rng=None) -> Scores:
        """Scores a batch of texts' statistics.

        Args:
          stats: statistics of this detector's decoder (``GumbelStats`` /
            ``SynthIDStats``) with a compatible provenance.
          source: int8[B, L] token sources (the Oracles only; ignored by others).
          rng: ignored: no detector draws random numbers (Ars-Prior's coins
            are keyed, :func:`.gumbel.choose_prior`). Accepted so that callers
            written for random coins run; the Gumbel-max detectors warn
            (:func:`ignored_rng`).

        Raises:
          ProvenanceMismatch: the statistics were computed with other settings
            (decoder, m, h, PRF version) or another key than the detector's.
        """

    def token_terms(self, stats, *, source=None, rng=None) -> TokenTerms:
        """Per-token terms whose sum is the score (windowed scores); not every detector has them."""
        raise NotImplementedError(f"the {self.label} detector is not a sum of independent per-token terms "
                                  "with a known null; windowed scores need a gamma or mean-g detector")

    @property
    def windowable(self) -> bool:
        return type(self).token_terms is not Detector.token_terms

    @property
    def label(self) -> str:
        """Human-readable name (the figures' and tables' label)."""
        return self.kind

    def settings(self) -> dict:
        """The detector's own JSON-able settings (saved in its config next to the provenance)."""
        return {}

    @property
    def config(self) -> dict:
        """JSON-able configuration, as saved: the provenance (+ the settings it implies) and :meth:`settings`."""
        return detector_config(self.provenance, **self.settings())

    @property
    def params(self) -> dict:
        """Fitted arrays (nested dict; may be empty)."""
        return {}

    def describe(self) -> dict:
        """What a report needs to name the detector: label, kind, settings (no arrays, no key)."""
        return {"label": self.label, "kind": self.kind, "settings": self.settings()}

    def check(self, stats) -> None:
        """Raises ProvenanceMismatch unless ``stats`` may be scored by this detector."""
        check_compatible(getattr(stats, "provenance", None), self.provenance)


KINDS = ("single", "ars_tau", "ars_prior", "gumbel_oracle", "gumbel_soft", "synthid_mean", "bayes", "kgw_green")


class FittedDetector(Detector):
    """A detector whose fitted arrays are its ``arrays`` field (what it saves beside its config)."""

    @property
    def params(self) -> dict:
        return dict(self.arrays)


def config_provenance(config: Mapping[str, Any]) -> Provenance:
    if "provenance" in config:
        return Provenance.from_dict(config["provenance"])
    # detectors built before provenance existed: settings known, key unknown
    return Provenance(config["decoder"], int(config.get("num_layers", 0) if config["decoder"] == "synthid" else 0),
                      int(config["context_width"]), config["prf_version"])


def detector_config(provenance: Provenance, **extra) -> dict:
    """The configuration every detector records: its provenance (+ the settings it implies) and ``extra``."""
    if not isinstance(provenance, Provenance):
        raise TypeError(f"expected a Provenance, got {type(provenance).__name__}")
    cfg = {"prf_version": provenance.prf_version, "context_width": provenance.context_width,
           "decoder": provenance.decoder, "provenance": provenance.to_dict()}
    cfg.update(extra)
    return cfg


def fitted_provenance(source, decoder: str, context_width: Optional[int] = None, num_layers: int = 0) -> Provenance:
    """Provenance of a detector fitted on ``source`` (statistics, a Dataset, a Provenance or None).

    An explicit ``context_width`` / ``num_layers`` must agree with the
    recorded one; without a recorded provenance they (or the defaults) are
    used and the key stays unknown.
    """
    prov = source if isinstance(source, Provenance) or source is None else getattr(source, "provenance", None)
    if prov is None:
        h = prf.DEFAULT_CONTEXT_WIDTH if context_width is None else prf.check_context_width(context_width)
        return Provenance(decoder, int(num_layers), h)
    if prov.family != decoder:
        raise ProvenanceMismatch(f"a {decoder} detector cannot be fitted on {prov.decoder} statistics")
    if context_width is not None and int(context_width) != prov.context_width:
        raise ProvenanceMismatch(f"context_width={context_width} given, but the statistics were computed with "
                                 f"h={prov.context_width}")
    if num_layers and int(num_layers) != prov.num_layers:
        raise ProvenanceMismatch(f"num_layers={num_layers} given, but the statistics have m={prov.num_layers}")
    return prov


def check_unit(x, name: str, *, open_interval: bool = False) -> float:
    x = float(x)
    ok = 0.0 < x < 1.0 if open_interval else 0.0 <= x <= 1.0
    if not ok or np.isnan(x):
        raise ValueError(f"{name} must lie in {'(0, 1)' if open_interval else '[0, 1]'}, got {x}")
    return x


def ignored_rng(rng) -> None:
    """Warns (DeprecationWarning) when a caller passes ``rng``: no detector uses one any more.

    Ars-Prior's coins are keyed (:func:`.gumbel.choose_prior`), so a key or seed cannot
    change a score. The argument is accepted so that callers that pass a
    ``jax.random`` key for the coins run.
    """
    if rng is not None:
        warnings.warn("rng is ignored: Ars-Prior's coins are a function of the watermark key and the text "
                      "(no detector draws random numbers); stop passing rng", DeprecationWarning, stacklevel=3)


def score(detector: Detector, stats, *, source=None, rng=None) -> Scores:
    """``detector.score(stats, source=source, rng=rng)`` as a function: one call for any detector object,
    with a clear error for anything else.

    Args:
      detector: any detector object (:func:`make`, :func:`fit_ars_tau`,
        :func:`fit_soft`, :func:`train_bayes`, :func:`load_detector`).
      stats: statistics of the matching decoder.
      source: int8[B, L] token sources (the Oracles only).
      rng: ignored (see :meth:`Detector.score`).

    Raises:
      ProvenanceMismatch: the statistics were computed with other settings
        (decoder, m, h, PRF version) or another key than the detector's.
    """
    if not isinstance(detector, Detector):
        raise TypeError(f"expected a detector object (wmspec_jax.detect.make / fit_* / load_detector), got "
                        f"{type(detector).__name__}")
    return detector.score(stats, source=source, rng=rng)


__all__ = ["Detector", "FittedDetector", "KINDS", "Scores", "TokenTerms", "check_unit", "config_provenance", "decision_scores",
           "detector_config", "fitted_provenance", "ignored_rng", "score"]
