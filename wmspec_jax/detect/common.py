"""Result and detector containers shared by the detection modules."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf
from wmspec_jax.detect.provenance import Provenance, ProvenanceMismatch


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


class Detector(NamedTuple):
    """A fitted detector: key-free configuration plus arrays.

    Attributes:
      kind: "ars_tau", "ars_prior", "gumbel_soft" or "bayes".
      config: JSON-serialisable settings (never the watermark key); always
        holds ``provenance`` (a :class:`.provenance.Provenance` as a dict:
        decoder, m, h, PRF version, key fingerprint) and, for convenience,
        ``prf_version``, ``context_width`` and ``decoder``.
      params: nested dict of arrays (may be empty).
    """

    kind: str
    config: Mapping[str, Any]
    params: Mapping[str, Any]

    @property
    def provenance(self) -> Provenance:
        """Where the detector's training statistics came from; scoring checks it."""
        return config_provenance(self.config)


KINDS = ("ars_tau", "ars_prior", "gumbel_soft", "bayes")


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
    if prov.decoder != decoder:
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
