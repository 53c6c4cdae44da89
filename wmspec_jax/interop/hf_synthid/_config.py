"""transformers' SynthID-Text settings (:class:`HFSynthIDConfig`), its CPU sampling table (MT19937 in
NumPy) and the integer checks the other SynthID modules share. Public face:
:mod:`wmspec_jax.interop.hf_synthid`."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import operator
from typing import Any, Mapping, Optional, Sequence

import numpy as np

MULTIPLIER = 6364136223846793005  # accumulate_hash's LCG multiplier (newlib / musl), as transformers
INCREMENT = 1
MAX_TABLE_SIZE = 2 ** 24  # SynthIDTextWatermarkingConfig.validate's bound
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_MASK64 = 2 ** 64 - 1
_U64 = np.uint64
_FIELDS = ("ngram_len", "keys", "context_history_size", "sampling_table_seed", "sampling_table_size",
           "skip_first_ngram_calls")
_IGNORED_FIELDS = ("debug_mode",)


def _is_int(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def _check_int(value, name: str, low: int, high: Optional[int] = None) -> int:
    if not _is_int(value):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    v = operator.index(value)
    if v < low or (high is not None and v > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {bound}, got {v}")
    return v


# ------------------------------------------------------------------------------------------------ config


@dataclasses.dataclass(frozen=True, repr=False)
class HFSynthIDConfig:
    """The settings of transformers' ``SynthIDTextWatermarkingConfig`` that decide the watermark.

    Attributes:
      ngram_len: n, the tokens hashed per g-value: the ``ngram_len - 1`` context tokens and the scored
        token (>= 1).
      keys: the watermark SECRET, one int64 per depth (tournament layer); depth = ``len(keys)``.
        Never shown by ``repr``/``str``/:meth:`record`, which show :attr:`keys_fingerprint`.
      context_history_size: how many past context hashes the repetition rule remembers (>= 0).
      sampling_table_seed: the seed of the CPU sampling table (``torch.Generator.manual_seed``).
      sampling_table_size: S, the table's length, in [1, 2**24].
      skip_first_ngram_calls: leave the first ``ngram_len - 1`` generated tokens unwatermarked.
    """

    ngram_len: int
    keys: tuple
    context_history_size: int = 1024
    sampling_table_seed: int = 0
    sampling_table_size: int = 2 ** 16
    skip_first_ngram_calls: bool = False

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)
        set_("ngram_len", _check_int(self.ngram_len, "ngram_len", 1))
        keys = self.keys
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) and not hasattr(keys, "__iter__"):
            raise ValueError("keys must be a sequence of integers (the watermark secret)")
        keys = tuple(keys)
        if not keys:
            raise ValueError("keys must not be empty: one integer key per tournament layer")
        bad = [i for i, k in enumerate(keys) if not _is_int(k)]
        if bad:
            raise ValueError(f"keys must all be integers; entries {bad[:5]} are not")
        keys = tuple(operator.index(k) for k in keys)
        if any(k < _INT64_MIN or k > _INT64_MAX for k in keys):
            raise ValueError("keys must fit in int64 (transformers stores them in a torch.int64 tensor)")
        set_("keys", keys)
        set_("context_history_size", _check_int(self.context_history_size, "context_history_size", 0))
        set_("sampling_table_seed", _check_int(self.sampling_table_seed, "sampling_table_seed",
                                               _INT64_MIN, _MASK64))
        set_("sampling_table_size", _check_int(self.sampling_table_size, "sampling_table_size", 1,
                                               MAX_TABLE_SIZE))
        if not isinstance(self.skip_first_ngram_calls, (bool, np.bool_)):
            raise ValueError("skip_first_ngram_calls must be a bool")
        set_("skip_first_ngram_calls", bool(self.skip_first_ngram_calls))

    @property
    def depth(self) -> int:
        """The number of tournament layers, ``len(keys)``."""
        return len(self.keys)

    @property
    def keys_fingerprint(self) -> str:
        """First 16 hex digits of SHA-256 over the keys as little-endian int64 (8 bytes each, in order)."""
        return hashlib.sha256(np.asarray(self.keys, dtype="<i8").tobytes()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"HFSynthIDConfig(ngram_len={self.ngram_len}, depth={self.depth}, "
                f"keys_fingerprint={self.keys_fingerprint!r}, context_history_size={self.context_history_size}, "
                f"sampling_table_seed={self.sampling_table_seed}, sampling_table_size={self.sampling_table_size}, "
                f"skip_first_ngram_calls={self.skip_first_ngram_calls})")

    __str__ = __repr__

    def record(self) -> dict:
        """A JSON-able description WITHOUT the keys (their fingerprint instead), for run records."""
        return {
            "scheme": "hf-synthid-text",
            "mirrors": "transformers.SynthIDTextWatermarkLogitsProcessor",
            "ngram_len": self.ngram_len,
            "depth": self.depth,
            "keys_fingerprint": self.keys_fingerprint,
            "context_history_size": self.context_history_size,
            "sampling_table_seed": self.sampling_table_seed,
            "sampling_table_size": self.sampling_table_size,
            "sampling_table_generator": "torch CPU mt19937",
            "skip_first_ngram_calls": self.skip_first_ngram_calls,
        }

    def to_dict(self) -> dict:
        """``SynthIDTextWatermarkingConfig(**d)``'s arguments. CONTAINS THE SECRET KEYS."""
        d = {f: getattr(self, f) for f in _FIELDS}
        d["keys"] = list(self.keys)
        d["debug_mode"] = False
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HFSynthIDConfig":
        """From ``SynthIDTextWatermarkingConfig.to_dict()`` (what a user saves as JSON).

        ``ngram_len`` and ``keys`` are required; the other fields default as in transformers.
        ``debug_mode`` is accepted and dropped; any other unknown field raises ValueError.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"from_dict needs a mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_FIELDS) - set(_IGNORED_FIELDS))
        if unknown:
            raise ValueError(f"unknown SynthID-Text config fields: {unknown}")
        missing = [f for f in ("ngram_len", "keys") if f not in d]
        if missing:
            raise ValueError(f"SynthID-Text config lacks {missing}")
        if "debug_mode" in d and not isinstance(d["debug_mode"], (bool, np.bool_)):
            raise ValueError("debug_mode must be a bool")
        kwargs = {f: d[f] for f in _FIELDS if f in d}
        keys = kwargs["keys"]
        if hasattr(keys, "tolist"):
            keys = keys.tolist()
        if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
            raise ValueError("keys must be a sequence of integers (the watermark secret)")
        kwargs["keys"] = tuple(keys)
        return cls(**kwargs)

    @classmethod
    def from_transformers(cls, cfg: Any) -> "HFSynthIDConfig":
        """From a ``SynthIDTextWatermarkingConfig`` (duck-typed: ``to_dict()`` or the attributes)."""
        if hasattr(cfg, "to_dict") and callable(cfg.to_dict):
            d = dict(cfg.to_dict())
        else:
            d = {f: getattr(cfg, f) for f in _FIELDS + _IGNORED_FIELDS if hasattr(cfg, f)}
        d = {k: v for k, v in d.items() if k in _FIELDS + _IGNORED_FIELDS}
        return cls.from_dict(d)


# ------------------------------------------------------------------------------------------------ table


def _mt19937_outputs(seed32: int, n: int) -> np.ndarray:
    """The first ``n`` tempered outputs of MT19937 seeded by ``init_genrand(seed32)``: uint32[n]."""
    N = 624  # state words; the twist reads 397 words ahead
    state = [seed32 & 0xFFFFFFFF]
    for i in range(1, N):  # the 623-step seeding recurrence (done once per table)
        prev = state[-1]
        state.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    mt = np.array(state, dtype=np.uint64)
    upper, lower, matrix = _U64(0x80000000), _U64(0x7FFFFFFF), _U64(0x9908B0DF)
    one = _U64(1)

    def twist_range(lo, hi, nxt, far):
        y = (mt[lo:hi] & upper) | (nxt & lower)
        mt[lo:hi] = far ^ (y >> one) ^ np.where((y & one) == one, matrix, _U64(0))

    blocks = []
    for _ in range(-(-n // N)):
        # element i uses the old mt[i + 1] and mt[(i + 397) % 624], which is new once i >= 227:
        # three slices keep every read on the value the sequential loop would see
        twist_range(0, 227, mt[1:228].copy(), mt[397:624].copy())
        twist_range(227, 454, mt[228:455].copy(), mt[0:227].copy())
        twist_range(454, 623, mt[455:624].copy(), mt[227:396].copy())
        twist_range(623, 624, mt[0:1].copy(), mt[396:397].copy())
        y = mt.copy()
        y ^= y >> _U64(11)
        y ^= (y << _U64(7)) & _U64(0x9D2C5680)
        y ^= (y << _U64(15)) & _U64(0xEFC60000)
        y &= _U64(0xFFFFFFFF)
        y ^= y >> _U64(18)
        blocks.append(y)
    return np.concatenate(blocks)[:n].astype(np.uint32)


@functools.lru_cache(maxsize=8)
def _table(seed: int, size: int) -> np.ndarray:
    seed32 = (seed & _MASK64) & 0xFFFFFFFF  # manual_seed takes the seed modulo 2**64; mt19937 its low word
    t = (_mt19937_outputs(seed32, size) & np.uint32(1)).astype(np.int64)
    t.setflags(write=False)
    return t


def sampling_table(config: HFSynthIDConfig) -> np.ndarray:
    """transformers' CPU sampling table: int64[S] of 0/1 (read-only), the keys play no part.

    Equal to ``torch.randint(0, 2, (S,), generator=torch.Generator("cpu").manual_seed(seed))``.
    """
    _check_config(config)
    return _table(config.sampling_table_seed, config.sampling_table_size)


def _check_config(config):
    if not isinstance(config, HFSynthIDConfig):
        raise ValueError(f"config must be an HFSynthIDConfig, got {type(config).__name__}")


__all__ = ["HFSynthIDConfig", "INCREMENT", "MAX_TABLE_SIZE", "MULTIPLIER", "sampling_table"]
