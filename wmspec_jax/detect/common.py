"""Result and detector containers shared by the detection modules."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf


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
        holds ``prf_version``, ``context_width`` and ``decoder``.
      params: nested dict of arrays (may be empty).
    """

    kind: str
    config: Mapping[str, Any]
    params: Mapping[str, Any]


KINDS = ("ars_tau", "ars_prior", "gumbel_soft", "bayes")


def base_config(decoder: str, context_width: int, **extra) -> dict:
    """The configuration every detector records."""
    cfg = {"prf_version": prf.PRF_VERSION, "context_width": int(prf.check_context_width(context_width)),
           "decoder": decoder}
    cfg.update(extra)
    return cfg


def check_unit(x, name: str, *, open_interval: bool = False) -> float:
    x = float(x)
    ok = 0.0 < x < 1.0 if open_interval else 0.0 <= x <= 1.0
    if not ok or np.isnan(x):
        raise ValueError(f"{name} must lie in {'(0, 1)' if open_interval else '[0, 1]'}, got {x}")
    return x
