"""KGW detection (beyond the paper): the green-token count with its exact binomial p-value.

A KGW text's tokens come from distributions whose green logits got + δ, the green list being the
TARGET stream's at each position for draft and target tokens alike (:meth:`wmspec_jax.decoders.
WatermarkDecoder.bias`). The statistics (:func:`.streams.statistics` with a KGW decoder) hold the
emitted token's target-stream uniform U_w; the token is green when U_w >= 1 − γ. Under H0 the text is
independent of the key, so each scored token is green with probability γ independently (the
repeated-context rule leaves one score per context) and the count of green tokens is Binomial(n, γ):
the p-value P(Binomial(n, γ) >= k) is exact. Kirchenbauer et al. (2023) report the z-score
(k − γn) / sqrt(n γ (1 − γ)) and threshold it with the normal approximation; here the z-score is the
detector's score and the p-value the exact binomial tail, summed in log space (no underflow).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping

import jax.numpy as jnp
import numpy as np

from wmspec_jax.decoders import DEFAULT_KGW_GAMMA, kgw_green
from wmspec_jax.detect.common import Detector, Scores, config_provenance
from wmspec_jax.detect.provenance import Provenance
from wmspec_jax.detect.streams import GumbelStats, check_statistics


def binomial_log_sf(k, n, p: float) -> np.ndarray:
    """log P(X >= k) for X ~ Binomial(n, p), exact in float64 (log-sum-exp of the pmf): float64[B].

    Args:
      k: int[B] observed counts; n: int[B] trials; p: success probability in (0, 1).
      k <= 0 gives 0; k > n gives −inf.
    """
    from scipy.special import gammaln, logsumexp

    k = np.asarray(k, np.int64)
    n = np.asarray(n, np.int64)
    j = np.arange(int(n.max(initial=0)) + 1)[None, :]
    nn, kk = n[:, None], k[:, None]
    logpmf = (gammaln(nn + 1.0) - gammaln(j + 1.0) - gammaln(np.maximum(nn - j, 0) + 1.0)
              + j * np.log(p) + np.maximum(nn - j, 0) * np.log1p(-p))
    terms = np.where((j >= kk) & (j <= nn), logpmf, -np.inf)
    out = logsumexp(terms, axis=1)
    out = np.where(k <= 0, 0.0, out)
    return np.minimum(out, 0.0)


@dataclasses.dataclass(frozen=True)
class GreenCount(Detector):
    """KGW's green-token count as a detector (calibrated, no training).

    Attributes:
      provenance: the settings (decoder ``"kgw"``, h; key where known).
      gamma: the green fraction γ of the generator (the p-value is exact for any γ; the generator's
        gives the power).
    """

    provenance: Provenance
    gamma: float = DEFAULT_KGW_GAMMA
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "kgw_green"
    decoder: ClassVar[str] = "kgw"

    def __post_init__(self):
        if not 0.0 < float(self.gamma) < 1.0:
            raise ValueError(f"KGW's gamma must lie in (0, 1), got {self.gamma}")

    @property
    def label(self) -> str:
        return f"green count (γ={self.gamma:g})"

    def score(self, stats, *, source=None, rng=None) -> Scores:
        stats = check_statistics(stats, GumbelStats)
        self.check(stats)
        mask = np.asarray(stats.mask, bool)
        green = np.asarray(kgw_green(stats.y_target, self.gamma)) & mask
        n = mask.sum(axis=1)
        k = green.sum(axis=1)
        g = float(self.gamma)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(n > 0, (k - g * n) / np.sqrt(np.maximum(n, 1) * g * (1.0 - g)), np.nan)
        log_p = binomial_log_sf(k, n, g)
        return Scores(jnp.asarray(z, jnp.float32), jnp.asarray(n, jnp.int32), jnp.asarray(log_p, jnp.float32),
                      jnp.asarray(np.exp(log_p), jnp.float32))

    def settings(self) -> dict:
        return {"gamma": float(self.gamma), **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "GreenCount":
        rest = {k: v for k, v in config.items()
                if k not in ("gamma", "provenance", "prf_version", "context_width", "decoder")}
        return cls(config_provenance(config), float(config.get("gamma", DEFAULT_KGW_GAMMA)), info=rest)


__all__ = ["GreenCount", "binomial_log_sf"]
