"""KGW detection (beyond the paper): the green-token count with its exact binomial p-value.

A KGW text's tokens come from logits whose green tokens got + δ, the green list being the first
⌊γV⌋ places of the TARGET stream's keyed permutation of the vocabulary at each position, for draft and
target tokens alike (:meth:`wmspec_jax.decoders.WatermarkDecoder.bias`). The statistics
(:func:`.streams.statistics` with a KGW decoder) hold the emitted token's place π(w) in that
permutation; the token is green when π(w) < ⌊γV⌋. Under H0 the text is independent of the key, so each
scored token is green with probability ⌊γV⌋ / V independently (the repeated-context rule leaves one
score per context) and the count of green tokens is Binomial(n, ⌊γV⌋ / V): the p-value
P(Binomial(n, ⌊γV⌋ / V) >= k) is exact. Kirchenbauer et al. (2023) and transformers' ``WatermarkDetector``
report the z-score (k − γn) / sqrt(n γ (1 − γ)) and threshold it with the normal approximation; here
the z-score (with γ = ⌊γV⌋ / V) is the detector's score and the p-value the exact binomial tail, summed
in log space (no underflow).

Texts of PRF v1 (``prf_version`` ``"wmspec-prf-v1"``) had a random-size list (each token green with
probability γ, from its target-stream uniform U: green when U >= 1 − γ); their statistics hold U and
are scored with that rule and Binomial(n, γ).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping, Optional

import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf
from wmspec_jax.decoders import DEFAULT_KGW_GAMMA, green_list_size
from wmspec_jax.detect.common import Detector, Scores, config_provenance
from wmspec_jax.detect.provenance import Provenance
from wmspec_jax.detect.streams_types import GumbelStats, check_statistics


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
      vocab_size: V, which fixes the list's size ⌊γV⌋ (required for texts of the current PRF version;
        v1 texts need none).
    """

    provenance: Provenance
    gamma: float = DEFAULT_KGW_GAMMA
    vocab_size: Optional[int] = None
    info: Mapping = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "kgw_green"
    decoder: ClassVar[str] = "kgw"

    def __post_init__(self):
        if not 0.0 < float(self.gamma) < 1.0:
            raise ValueError(f"KGW's gamma must lie in (0, 1), got {self.gamma}")
        if self.vocab_size is not None:
            if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, (int, np.integer)):
                raise ValueError(f"vocab_size must be an int, got {self.vocab_size!r}")
            green_list_size(self.gamma, self.vocab_size)

    @property
    def label(self) -> str:
        return f"green count (γ={self.gamma:g})"

    def green(self, stats) -> tuple:
        """(bool[B, L] green scored tokens, the null rate of a token being green)."""
        mask = np.asarray(stats.mask, bool)
        y = np.asarray(stats.y_target)
        if stats.provenance is not None and stats.provenance.prf_version == prf.PRF_V1:
            return (y >= 1.0 - np.float32(self.gamma)) & mask, float(self.gamma)
        if self.vocab_size is None:
            raise ValueError("KGW's green list has ⌊γV⌋ tokens: the green count needs vocab_size (V of the "
                             "generator's tokenizer)")
        k = green_list_size(self.gamma, self.vocab_size)
        return (y < k) & mask, k / int(self.vocab_size)

    def score(self, stats, *, source=None, rng=None) -> Scores:
        stats = check_statistics(stats, GumbelStats)
        self.check(stats)
        mask = np.asarray(stats.mask, bool)
        green, g = self.green(stats)
        n = mask.sum(axis=1)
        k = green.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(n > 0, (k - g * n) / np.sqrt(np.maximum(n, 1) * g * (1.0 - g)), np.nan)
        log_p = binomial_log_sf(k, n, g)
        return Scores(jnp.asarray(z, jnp.float32), jnp.asarray(n, jnp.int32), jnp.asarray(log_p, jnp.float32),
                      jnp.asarray(np.exp(log_p), jnp.float32))

    def settings(self) -> dict:
        extra = {} if self.vocab_size is None else {"vocab_size": int(self.vocab_size)}
        return {"gamma": float(self.gamma), **extra, **self.info}

    @classmethod
    def from_saved(cls, config, params) -> "GreenCount":
        rest = {k: v for k, v in config.items()
                if k not in ("gamma", "vocab_size", "provenance", "prf_version", "context_width", "decoder")}
        v = config.get("vocab_size")
        return cls(config_provenance(config), float(config.get("gamma", DEFAULT_KGW_GAMMA)),
                   None if v is None else int(v), info=rest)


__all__ = ["GreenCount", "binomial_log_sf"]
