"""transformers' KGW ``WatermarkingConfig`` (:class:`HFKGWConfig`), its constants and the input checks
the other KGW modules share. Public face: :mod:`wmspec_jax.interop.hf_kgw`."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
from typing import Any, Mapping

import numpy as np

TABLE_SIZE = 1_000_003          # WatermarkLogitsProcessor.table_size
SELFHASH_CANDIDATES = 40        # WatermarkLogitsProcessor._score_rejection_sampling
SCHEMES = ("lefthash", "selfhash")
DEDUP_RULES = ("seed", "seed_token", "ngram", "none")
DEFAULT_HASHING_KEY = 15485863  # transformers' default: public, so anyone can detect with it
_FIELDS = ("greenlist_ratio", "bias", "hashing_key", "seeding_scheme", "context_width")
_M64 = 2**64 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CHUNK = 1 << 22                # elements per working array (draws, comparisons)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True, repr=False)
class HFKGWConfig:
    """transformers' ``WatermarkingConfig`` (KGW), validated; ``hashing_key`` is the secret.

    Attributes:
      greenlist_ratio: γ in (0, 1) exclusive (the processor's rule; ``WatermarkingConfig.validate``
        also lets 0 and 1 through, which the processor then rejects).
      bias: δ added to green logits (any finite float).
      hashing_key: int in [−2^63, 2^64 − 1] (what ``torch.Generator.manual_seed`` accepts);
        selfhash multiplies it into an int64 tensor, so there it must lie in [−2^63, 2^63 − 1].
      seeding_scheme: ``"lefthash"`` or ``"selfhash"``.
      context_width: int >= 1.

    ``repr``/``str``/:meth:`record` never show the key, only :attr:`fingerprint` (a SHA-256 prefix).
    A fingerprint identifies a key; it cannot protect a guessable one (a small integer, or
    transformers' public default 15485863, is found by trying keys).
    """

    greenlist_ratio: float = 0.25
    bias: float = 2.0
    hashing_key: int = DEFAULT_HASHING_KEY
    seeding_scheme: str = "lefthash"
    context_width: int = 1

    def __post_init__(self):
        r = self.greenlist_ratio
        if not _is_real(r) or not math.isfinite(float(r)) or not 0.0 < float(r) < 1.0:
            raise ValueError(f"greenlist_ratio must be a float in (0, 1) exclusive, got {r!r}")
        if not _is_real(self.bias) or not math.isfinite(float(self.bias)):
            raise ValueError(f"bias must be a finite float, got {self.bias!r}")
        if self.seeding_scheme not in SCHEMES:
            raise ValueError(f"seeding_scheme must be one of {SCHEMES}, got {self.seeding_scheme!r}")
        key = self.hashing_key
        if not _is_int(key):
            raise ValueError(f"hashing_key must be an int, got {type(key).__name__}")
        hi = _INT64_MAX if self.seeding_scheme == "selfhash" else _M64
        if not _INT64_MIN <= int(key) <= hi:
            raise ValueError(
                f"hashing_key must lie in [-2**63, {'2**63 - 1' if hi == _INT64_MAX else '2**64 - 1'}] "
                f"for {self.seeding_scheme} (torch's seed / int64 range)")
        cw = self.context_width
        if not _is_int(cw) or int(cw) < 1:
            raise ValueError(f"context_width must be a positive int, got {cw!r}")
        object.__setattr__(self, "greenlist_ratio", float(r))
        object.__setattr__(self, "bias", float(self.bias))
        object.__setattr__(self, "hashing_key", int(key))
        object.__setattr__(self, "context_width", int(cw))

    # -- display without the key --------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """First 16 hex digits of SHA-256("hf_kgw:" + decimal key): identifies, never reveals."""
        return hashlib.sha256(f"hf_kgw:{self.hashing_key}".encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"HFKGWConfig(greenlist_ratio={self.greenlist_ratio!r}, bias={self.bias!r}, "
                f"seeding_scheme={self.seeding_scheme!r}, context_width={self.context_width!r}, "
                f"hashing_key=<sha256:{self.fingerprint}>)")

    __str__ = __repr__

    def record(self) -> dict:
        """JSON-able description without the key (its fingerprint instead)."""
        return {"scheme": "hf_kgw", "greenlist_ratio": self.greenlist_ratio, "bias": self.bias,
                "seeding_scheme": self.seeding_scheme, "context_width": self.context_width,
                "hashing_key_fingerprint": self.fingerprint}

    def to_transformers_dict(self) -> dict:
        """``WatermarkingConfig(**d)`` arguments. CONTAINS THE SECRET KEY: do not log or store."""
        return {f: getattr(self, f) for f in _FIELDS}

    def greenlist_size(self, vocab_size: int) -> int:
        """k = int(vocab_size * greenlist_ratio), transformers' formula (float product, truncated)."""
        return int(_check_vocab(vocab_size) * self.greenlist_ratio)

    def gamma_eff(self, vocab_size: int) -> float:
        """k / V: the exact probability that a fixed token is green under H0."""
        return self.greenlist_size(vocab_size) / int(vocab_size)

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HFKGWConfig":
        """From ``WatermarkingConfig(...).to_dict()`` or a user's JSON; missing fields get
        transformers' defaults (as ``WatermarkingConfig(**d)`` would), unknown ones are an error."""
        if not isinstance(d, Mapping):
            raise ValueError(f"expected a mapping of {_FIELDS}, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise ValueError(f"unknown KGW watermarking field(s) {unknown}; expected a subset of "
                             f"{list(_FIELDS)} (a SynthID config is not a KGW config)")
        return cls(**{k: d[k] for k in _FIELDS if k in d})

    @classmethod
    def from_transformers(cls, cfg) -> "HFKGWConfig":
        """From a transformers ``WatermarkingConfig`` (duck-typed: ``to_dict()``, a mapping, or the
        five attributes)."""
        if isinstance(cfg, HFKGWConfig):
            return cfg
        if isinstance(cfg, Mapping):
            return cls.from_dict(cfg)
        if hasattr(cfg, "to_dict"):
            return cls.from_dict(cfg.to_dict())
        missing = [f for f in _FIELDS if not hasattr(cfg, f)]
        if missing:
            raise ValueError(f"{type(cfg).__name__} is not a KGW watermarking config (lacks {missing})")
        return cls(**{f: getattr(cfg, f) for f in _FIELDS})


def _check_config(config) -> HFKGWConfig:
    if not isinstance(config, HFKGWConfig):
        raise ValueError(f"config must be an HFKGWConfig (see HFKGWConfig.from_transformers), "
                         f"got {type(config).__name__}")
    return config


def _check_vocab(vocab_size) -> int:
    if not _is_int(vocab_size) or int(vocab_size) < 2 or int(vocab_size) >= 2**31:
        raise ValueError(f"vocab_size must be an int in [2, 2**31), got {vocab_size!r}")
    return int(vocab_size)


def _k(config: HFKGWConfig, vocab_size: int) -> int:
    k = config.greenlist_size(vocab_size)
    if k < 1:
        raise ValueError(f"empty green list: int({vocab_size} * {config.greenlist_ratio}) = 0")
    return k


def _check_tokens(x, vocab_size: int, name: str, min_len: int = 1) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim < 1 or a.shape[-1] < min_len:
        raise ValueError(f"{name} must have a last axis of length >= {min_len}, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= vocab_size):
        raise ValueError(f"{name} holds token ids outside [0, {vocab_size}) "
                         f"(min {a.min()}, max {a.max()})")
    return a


__all__ = ["DEDUP_RULES", "DEFAULT_HASHING_KEY", "HFKGWConfig", "SCHEMES", "SELFHASH_CANDIDATES", "TABLE_SIZE"]
