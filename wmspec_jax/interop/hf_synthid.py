"""Hugging Face transformers' SynthID-Text watermark, bit for bit, without torch.

SynthID-Text (Dathathri et al., "Scalable watermarking for identifying large language model outputs",
Nature 634, 2024) as transformers implements it in ``SynthIDTextWatermarkingConfig``
(``generation/configuration_utils.py``), ``SynthIDTextWatermarkLogitsProcessor`` and
``SynthIDTextWatermarkState`` (``generation/logits_process.py``) and ``SynthIDTextWatermarkDetector``
(``generation/watermarking.py``). Everything below reproduces transformers' integers exactly with
NumPy (uint64 arithmetic, which wraps modulo 2**64 like torch's int64) and with JAX in 32-bit words
(x64 stays disabled: a 64-bit value is a pair of uint32 words).

The construction, as transformers computes it
---------------------------------------------
* Sampling table: ``torch.randint(0, 2, (S,), generator=torch.Generator("cpu").manual_seed(seed))``.
  On the CPU torch draws each entry as ``mt19937() % 2`` (MT19937 seeded with ``seed & 0xffffffff``
  by the reference ``init_genrand``); :func:`sampling_table` runs the same MT19937 in NumPy.
  A processor built on a CUDA device draws its table with torch's CUDA generator (Philox) instead, a
  different table: only the CPU table is reproduced here.
* Hash: ``accumulate_hash(h, x) = (h + x) * 6364136223846793005 + 1`` in int64 with two's-complement
  wrap-around, folded over the values left to right from ``h = 1``. The key of an n-gram at depth l is
  ``accumulate_hash(accumulate_hash(1, ngram), [keys[l]])``; its g-value is
  ``table[key mod S]`` with the floor (Python) modulo of the signed int64, in ``[0, S)``.
* Scores: ``update_scores`` turns the scores into probabilities and applies, for each depth l in turn,
  ``p <- p * (1 + g_l - sum(g_l * p))`` (the tournament with two candidates per match, Dathathri et
  al.'s Bernoulli(0.5) case), then returns ``log p`` with ``-inf`` replaced by the float32 minimum.
* State: the processor's context starts as ``ngram_len - 1`` zeros, NOT the prompt; each later call
  shifts in ``input_ids[:, -1]``, the token sampled at the previous call. A context whose 64-bit hash
  is among the last ``context_history_size`` context hashes (a history that starts filled with zeros)
  is not watermarked: the raw scores pass through unchanged. With ``skip_first_ngram_calls`` the
  first ``ngram_len - 1`` calls pass the scores through and leave the history untouched.
* Order in ``generate``: the processor runs LAST, after every other processor and after the sampling
  warpers (temperature, top-k (default 50), top-p, min-p, typical, epsilon, eta), and before
  ``LogitNormalization``; ``generate`` then samples from ``softmax`` of its output.
* Detection in transformers (``SynthIDTextWatermarkDetector``) scores the g-values of every n-gram of
  the given ids under the mask ``context_repetition_mask * eos_token_mask[:, ngram_len - 1:]``
  with a trained Bayesian classifier (``BayesianDetectorModel``), which gives a posterior, no p-value.

What differs here
-----------------
* :func:`score` is a calibrated test instead of the trained classifier: its p-value is exact under
  H0 ("the text is independent of the keys"), see :func:`score` for the model and its proof.
* :func:`g_values` and :func:`context_repetition_mask` return empty arrays for texts shorter than
  ``ngram_len`` (transformers raises); ``eos_token_id`` may be a list of ids.
* ``generation_start=True`` (detection) prepends the processor's initial all-zeros context, so that
  the first ``ngram_len - 1`` generated tokens, which transformers watermarks with that zero context,
  are scored too; transformers' detector never scores them.
* ``debug_mode`` (uniform scores before watermarking, a test switch) is accepted by
  :meth:`HFSynthIDConfig.from_dict` and dropped: nothing here reproduces it.

Public functions: :class:`HFSynthIDConfig`, :func:`sampling_table`, :func:`accumulate_hash`,
:func:`ngram_keys`, :func:`sample_g_values`, :func:`g_values`, :func:`context_repetition_mask`,
:func:`eos_token_mask` (NumPy, exact integers); :func:`vocab_g_values`, :func:`update_scores`,
:func:`watermarked_log_probs`, :class:`SynthIDState`, :func:`init_state`, :func:`process_scores`
(JAX, jit-able); :func:`score`, :func:`null_distribution`, :func:`weighted_mean_score` (detection).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import operator
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import validation

__all__ = [
    "HFSynthIDConfig", "sampling_table", "accumulate_hash", "ngram_keys", "sample_g_values", "g_values",
    "context_repetition_mask", "eos_token_mask", "vocab_g_values", "update_scores", "watermarked_log_probs",
    "SynthIDState", "init_state", "process_scores", "SynthIDScores", "score", "null_distribution",
    "weighted_mean_score",
]

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


# ------------------------------------------------------------------------------------------------ NumPy hash


def _as_u64(x) -> np.ndarray:
    return np.asarray(x).astype(np.int64).view(np.uint64)


def _lcg(h: np.ndarray, x: np.ndarray, multiplier=MULTIPLIER, increment=INCREMENT) -> np.ndarray:
    """``(h + x) * multiplier + increment`` modulo 2**64 on uint64 arrays (torch's int64 wrap-around)."""
    with np.errstate(over="ignore"):
        return (h + x) * _U64(multiplier & _MASK64) + _U64(increment & _MASK64)


def _keys_u64(config) -> np.ndarray:
    return np.asarray(config.keys, dtype=np.int64).view(np.uint64)


def accumulate_hash(current_hash, data, multiplier: int = MULTIPLIER, increment: int = INCREMENT) -> np.ndarray:
    """``SynthIDTextWatermarkLogitsProcessor.accumulate_hash``: int64[...].

    Args:
      current_hash: int64[...] (broadcastable with ``data[..., 0]``).
      data: int64[..., L]; folded left to right: ``h <- (h + data[..., i]) * multiplier + increment``,
        with int64 two's-complement wrap-around.
    """
    h = _as_u64(current_hash)
    d = _as_u64(data)
    for i in range(d.shape[-1]):  # over the n-gram's positions, not over tokens
        h = _lcg(h, d[..., i], multiplier, increment)
    return np.asarray(h).view(np.int64)


def _check_ids(input_ids, name: str = "input_ids") -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"{name} must have shape (batch_size, length), got {ids.shape}")
    ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError(f"{name} holds negative token ids (min {ids.min()})")
    return ids


def _windows(ids: np.ndarray, width: int) -> np.ndarray:
    """int64[B, T - width + 1, width] sliding windows (empty when T < width)."""
    b, t = ids.shape
    if t < width:
        return np.zeros((b, 0, width), np.int64)
    return np.lib.stride_tricks.sliding_window_view(ids, width, axis=1)


def _ngram_hashes(ids: np.ndarray, ngram_len: int) -> np.ndarray:
    """uint64[B, T - n + 1]: ``accumulate_hash(1, ngram)`` of every n-gram (before the keys)."""
    w = _as_u64(_windows(ids, ngram_len))
    h = np.ones(w.shape[:2], np.uint64)
    for i in range(ngram_len):
        h = _lcg(h, w[..., i])
    return h


def _keyed(config, hashes: np.ndarray) -> np.ndarray:
    """uint64[..., depth]: ``accumulate_hash(hash, [key_l])`` for each key."""
    return _lcg(hashes[..., None], _keys_u64(config))


def _lookup(config, keyed_u64: np.ndarray) -> np.ndarray:
    table = _table(config.sampling_table_seed, config.sampling_table_size)
    return table[keyed_u64.view(np.int64) % np.int64(config.sampling_table_size)]


def ngram_keys(config: HFSynthIDConfig, ngrams) -> np.ndarray:
    """``compute_ngram_keys``: int64[B, N, depth] for n-grams int[B, N, ngram_len] (the same int64 bits)."""
    _check_config(config)
    g = np.asarray(ngrams)
    if g.ndim != 3 or g.shape[2] != config.ngram_len:
        raise ValueError(f"ngrams must have shape (batch_size, num_ngrams, {config.ngram_len}), got {g.shape}")
    if g.dtype == np.bool_ or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"ngrams must hold integer token ids, got dtype {g.dtype}")
    h = np.ones(g.shape[:2], np.uint64)
    w = _as_u64(g)
    for i in range(config.ngram_len):
        h = _lcg(h, w[..., i])
    return _keyed(config, h).view(np.int64)


def sample_g_values(config: HFSynthIDConfig, keys_int64) -> np.ndarray:
    """``sample_g_values``: int64[...] = ``table[keys mod S]`` (floor modulo of the signed int64)."""
    _check_config(config)
    k = np.asarray(keys_int64)
    if k.dtype == np.bool_ or not np.issubdtype(k.dtype, np.integer):
        raise ValueError(f"ngram keys must be integers, got dtype {k.dtype}")
    return _lookup(config, k.astype(np.int64).view(np.uint64))


def g_values(config: HFSynthIDConfig, input_ids) -> np.ndarray:
    """``SynthIDTextWatermarkLogitsProcessor.compute_g_values``: int64[B, T - (ngram_len - 1), depth].

    Entry ``[b, j, l]`` is the g-value of token ``input_ids[b, j + ngram_len - 1]`` after its context
    ``input_ids[b, j : j + ngram_len - 1]`` at depth l. Empty along axis 1 when T < ngram_len.
    """
    _check_config(config)
    ids = _check_ids(input_ids)
    return _lookup(config, _keyed(config, _ngram_hashes(ids, config.ngram_len)))


def _context_hashes(ids: np.ndarray, ngram_len: int) -> np.ndarray:
    """uint64[B, T - n + 1]: hash of each n-gram's context ``ids[:, j : j + n - 1]``."""
    b, t = ids.shape
    num = max(t - ngram_len + 1, 0)
    h = np.ones((b, num), np.uint64)
    if ngram_len > 1 and num:
        w = _as_u64(_windows(ids[:, : t - 1], ngram_len - 1))
        for i in range(ngram_len - 1):
            h = _lcg(h, w[..., i])
    return h


def _first_in_window(hashes: np.ndarray, history: int) -> np.ndarray:
    """bool[B, N]: True where ``hashes[b, j]`` is NOT among the last ``history`` values of row b nor
    (while j < history) equal to 0, the value the history starts filled with; as the processor's
    first-in, first-out history of size ``history``. Vectorised: each value's previous occurrence
    comes from one lexicographic sort of (row, value, position)."""
    b, n = hashes.shape
    pos = np.broadcast_to(np.arange(n), (b, n))
    rows = np.broadcast_to(np.arange(b)[:, None], (b, n))
    flat_h, flat_p, flat_r = hashes.ravel(), pos.ravel(), rows.ravel()
    order = np.lexsort((flat_p, flat_h, flat_r))
    r, h, p = flat_r[order], flat_h[order], flat_p[order]
    prev_sorted = np.full(b * n, -1, np.int64)
    if b * n > 1:
        same = (r[1:] == r[:-1]) & (h[1:] == h[:-1])
        prev_sorted[1:] = np.where(same, p[:-1], -1)
    prev = np.empty(b * n, np.int64)
    prev[order] = prev_sorted
    prev = prev.reshape(b, n)
    repeated = (prev >= 0) & (prev >= pos - history)
    repeated |= (hashes == 0) & (pos < history)
    return ~repeated


def context_repetition_mask(config: HFSynthIDConfig, input_ids) -> np.ndarray:
    """``compute_context_repetition_mask``: bool[B, T - (ngram_len - 1)], True = first occurrence.

    Position j is False when the hash of its context ``input_ids[:, j : j + ngram_len - 1]`` equals one
    of the previous ``context_history_size`` context hashes of the row, or is 0 while fewer than
    ``context_history_size`` contexts came before (the processor's history starts filled with zeros).
    """
    _check_config(config)
    ids = _check_ids(input_ids)
    return _first_in_window(_context_hashes(ids, config.ngram_len), config.context_history_size)


def _eos_ids(eos_token_id) -> Optional[np.ndarray]:
    if eos_token_id is None:
        return None
    values = [eos_token_id] if _is_int(eos_token_id) else eos_token_id
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"eos_token_id must be an int, a sequence of ints or None, got {eos_token_id!r}")
    values = list(values)
    if not values or not all(_is_int(v) and operator.index(v) >= 0 for v in values):
        raise ValueError(f"eos_token_id must hold non-negative integers, got {eos_token_id!r}")
    return np.asarray([operator.index(v) for v in values], np.int64)


def eos_token_mask(input_ids, eos_token_id) -> np.ndarray:
    """``compute_eos_token_mask``: bool[B, T], True before the row's first end-of-sequence token.

    ``eos_token_id`` is an int (as transformers) or a sequence of ints (any of them ends the text).
    """
    ids = _check_ids(input_ids)
    eos = _eos_ids(eos_token_id)
    if eos is None:
        raise ValueError("eos_token_mask needs an eos_token_id")
    return np.cumsum(np.isin(ids, eos), axis=1) == 0


# ------------------------------------------------------------------------------------------------ JAX


def _split64(value: int) -> tuple[int, int]:
    u = value & _MASK64
    return u >> 32, u & 0xFFFFFFFF


_M_HI, _M_LO = _split64(MULTIPLIER)


def _mul_wide(a, b_const: int):
    """(hi, lo) uint32 words of the 64-bit product of uint32 ``a`` and a 32-bit constant."""
    m16 = jnp.uint32(0xFFFF)
    b0, b1 = jnp.uint32(b_const & 0xFFFF), jnp.uint32(b_const >> 16)
    a0, a1 = a & m16, a >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 16) + (p01 & m16) + (p10 & m16)
    hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
    lo = (mid << 16) | (p00 & m16)
    return hi, lo


def _add64(a_hi, a_lo, b_hi, b_lo):
    lo = a_lo + b_lo
    return a_hi + b_hi + (lo < a_lo).astype(jnp.uint32), lo


def _lcg64(h_hi, h_lo, x_hi, x_lo):
    """``(h + x) * MULTIPLIER + 1`` modulo 2**64 on (hi, lo) uint32 word pairs."""
    s_hi, s_lo = _add64(h_hi, h_lo, x_hi, x_lo)
    p_hi, p_lo = _mul_wide(s_lo, _M_LO)
    p_hi = p_hi + s_lo * jnp.uint32(_M_HI) + s_hi * jnp.uint32(_M_LO)
    return _add64(p_hi, p_lo, jnp.uint32(0), jnp.uint32(INCREMENT))


def _floor_mod64(hi, lo, size: int):
    """Floor modulo ``size`` (<= 2**24) of the signed int64 held in (hi, lo): uint32 in [0, size)."""
    if size & (size - 1) == 0:  # power of two: the low bits of the two's complement
        return lo & jnp.uint32(size - 1)
    s = jnp.uint32(size)
    r = jnp.zeros(jnp.shape(lo), jnp.uint32)
    for word in (hi, lo):  # Horner over the 8 bytes: r * 256 + byte < 2**32 since r < size <= 2**24
        for shift in (24, 16, 8, 0):
            r = (r * jnp.uint32(256) + ((word >> shift) & jnp.uint32(0xFF))) % s
    c = (2 ** 64) % size  # a negative int64 is its unsigned value minus 2**64
    return jnp.where(hi >= jnp.uint32(2 ** 31), (r + jnp.uint32(size - c)) % s, r)


def _context_hash64(context):
    """(hi, lo) uint32[B]: ``accumulate_hash(1, context)`` of int32[B, n - 1] (non-negative ids)."""
    b = context.shape[0]
    h_hi, h_lo = jnp.zeros((b,), jnp.uint32), jnp.ones((b,), jnp.uint32)
    zero = jnp.uint32(0)
    for i in range(context.shape[1]):
        h_hi, h_lo = _lcg64(h_hi, h_lo, zero, context[:, i].astype(jnp.uint32))
    return h_hi, h_lo


def _vocab_g(table, contexts, config: HFSynthIDConfig, vocab_size: int):
    """int32[B, V, depth] (traceable; ``table`` int32[S])."""
    size = config.sampling_table_size
    keys = [_split64(k) for k in config.keys]
    k_hi = jnp.asarray(np.array([k[0] for k in keys], np.uint32))
    k_lo = jnp.asarray(np.array([k[1] for k in keys], np.uint32))
    v = jnp.arange(vocab_size, dtype=jnp.uint32)
    if size & (size - 1) == 0:
        # the index is the low log2(S) bits, which only depend on the low words: 32-bit arithmetic
        lo = jnp.ones((contexts.shape[0],), jnp.uint32)
        ml = jnp.uint32(_M_LO)
        for i in range(contexts.shape[1]):
            lo = (lo + contexts[:, i].astype(jnp.uint32)) * ml + jnp.uint32(1)
        lo_v = (lo[:, None] + v[None, :]) * ml + jnp.uint32(1)
        lo_vl = (lo_v[..., None] + k_lo) * ml + jnp.uint32(1)
        idx = lo_vl & jnp.uint32(size - 1)
    else:
        h_hi, h_lo = _context_hash64(contexts)
        t_hi, t_lo = _lcg64(h_hi[:, None], h_lo[:, None], jnp.uint32(0), v[None, :])
        f_hi, f_lo = _lcg64(t_hi[..., None], t_lo[..., None], k_hi, k_lo)
        idx = _floor_mod64(f_hi, f_lo, size)
    return table[idx.astype(jnp.int32)]


@functools.lru_cache(maxsize=8)
def _device_table(seed: int, size: int) -> np.ndarray:
    """The table as int32 NumPy (read-only): handed to the jitted functions as an argument, so it is
    neither baked into each compiled program nor a cached device array that a trace could capture."""
    t = _table(seed, size).astype(np.int32)
    t.setflags(write=False)
    return t


@functools.partial(jax.jit, static_argnames=("config", "vocab_size"))
def _vocab_g_jit(table, contexts, config, vocab_size):
    return _vocab_g(table, contexts, config, vocab_size)


def _dtype(x):
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def _check_token_array(x, width: int, name: str):
    """int32[B, width] from int[B, width] token ids in [0, 2**31) (values checked when concrete)."""
    shape = np.shape(x)
    if len(shape) != 2 or shape[1] != width:
        raise ValueError(f"{name} must have shape (batch_size, {width}), got {shape}")
    dtype = _dtype(x)
    if dtype == np.bool_ or not np.issubdtype(dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {dtype}")
    contexts = x
    c = validation.concrete(contexts)
    if c is not None and c.size and (c.min() < 0 or c.max() >= 2 ** 31):
        raise ValueError(f"{name} must hold token ids in [0, 2**31)")
    return jnp.asarray(contexts).astype(jnp.int32) if c is None else jnp.asarray(c.astype(np.int32))


def _check_contexts(config, contexts):
    return _check_token_array(contexts, config.ngram_len - 1, "contexts")


def vocab_g_values(config: HFSynthIDConfig, contexts, vocab_size: int) -> jax.Array:
    """g-values of every candidate next token after each context: int32[B, vocab_size, depth] (JAX).

    ``[b, v, l]`` equals :func:`g_values` of the n-gram ``(*contexts[b], v)`` at depth l, i.e. what
    ``SynthIDTextWatermarkLogitsProcessor._compute_keys`` + ``sample_g_values`` give. 64-bit hashes
    are computed in uint32 word pairs (x64 stays off); for a power-of-two table size only the low
    words matter and the computation is pure uint32.

    Args:
      config: the watermark settings (static under jit).
      contexts: int[B, ngram_len - 1] token ids in [0, 2**31), oldest first.
      vocab_size: V, the scores' width (static).
    """
    _check_config(config)
    vocab_size = _check_int(vocab_size, "vocab_size", 1, 2 ** 31 - 1)
    contexts = _check_contexts(config, contexts)
    table = _device_table(config.sampling_table_seed, config.sampling_table_size)
    return _vocab_g_jit(table, contexts, config=config, vocab_size=vocab_size)


@jax.jit
def _update_scores_jit(scores, g):
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=1)

    def layer(p, g_l):
        mass = jnp.sum(g_l * p, axis=1, keepdims=True)
        return p * (1.0 + g_l - mass), None

    probs, _ = jax.lax.scan(layer, probs, jnp.moveaxis(g.astype(jnp.float32), 2, 0))
    log_probs = jnp.log(probs)
    return jnp.where(jnp.isfinite(log_probs), log_probs, jnp.finfo(jnp.float32).min)


def update_scores(scores, g: jax.Array) -> jax.Array:
    """``SynthIDTextWatermarkLogitsProcessor.update_scores``: float32[B, V] watermarked log-probs.

    ``p = softmax(scores)``; for each depth l in order ``p <- p * (1 + g_l - sum_v g_l[v] p[v])``;
    returns ``log p`` with non-finite entries (p = 0, e.g. tokens a top-k warper set to -inf) replaced
    by ``finfo(float32).min``, as transformers.

    Args:
      scores: float[B, V] logits or log-probabilities (after the warpers); no NaN, no row all -inf.
      g: int[B, V, depth] in {0, 1}, e.g. from :func:`vocab_g_values`.
    """
    validation.check_logits(scores, "scores")
    s, g = np.shape(scores), np.shape(g)
    if len(s) != 2 or len(g) != 3 or g[:2] != s:
        raise ValueError(f"scores must be (B, V) and g_values (B, V, depth); got {s} and {g}")
    return _update_scores_jit(jnp.asarray(scores, jnp.float32), jnp.asarray(g))


def watermarked_log_probs(config: HFSynthIDConfig, contexts, logits) -> jax.Array:
    """The processor's output for non-repeated contexts: float32[B, V] (JAX, jit-able).

    ``update_scores(logits, vocab_g_values(config, contexts, V))``: sampling from its softmax is
    sampling from transformers' watermarked distribution. In ``generate`` the processor runs after
    the warpers, so ``logits`` must be what they produce: the model's float32 logits divided by the
    temperature, then top-k (transformers' default top_k is 50), top-p, min-p ... applied (-inf on
    removed tokens). A context that repeats one of the last ``context_history_size`` contexts is not
    watermarked by transformers (its scores pass through): :func:`process_scores` follows that rule
    and the processor's zero-initialised context; this function does not.

    Args:
      config: the watermark settings (static).
      contexts: int[B, ngram_len - 1] the previous ngram_len - 1 tokens of each row, oldest first.
      logits: float[B, V] warped logits.
    """
    _check_config(config)
    _check_contexts(config, contexts)
    validation.check_logits(logits, "logits")
    shape = np.shape(logits)
    if len(shape) != 2 or shape[0] != np.shape(contexts)[0]:
        raise ValueError(f"logits must have shape (batch_size, vocab_size) matching contexts, got {shape}")
    g = vocab_g_values(config, contexts, shape[1])
    return _update_scores_jit(jnp.asarray(logits, jnp.float32), g)


class SynthIDState(NamedTuple):
    """``SynthIDTextWatermarkState`` as a JAX pytree.

    Attributes:
      context: int32[B, ngram_len - 1] the current context (zeros before the first call).
      history_hi, history_lo: uint32[B, context_history_size] the words of the last context hashes,
        newest first (zeros at the start, as transformers).
      num_calls: int32[] how many scores the processor has seen.
    """

    context: jax.Array
    history_hi: jax.Array
    history_lo: jax.Array
    num_calls: jax.Array


def init_state(config: HFSynthIDConfig, batch_size: int) -> SynthIDState:
    """The processor's state before its first call (its ``_init_state``)."""
    _check_config(config)
    batch_size = _check_int(batch_size, "batch_size", 1)
    h = config.context_history_size
    return SynthIDState(
        context=jnp.zeros((batch_size, config.ngram_len - 1), jnp.int32),
        history_hi=jnp.zeros((batch_size, h), jnp.uint32),
        history_lo=jnp.zeros((batch_size, h), jnp.uint32),
        num_calls=jnp.zeros((), jnp.int32),
    )


@functools.partial(jax.jit, static_argnames=("config",))
def _process_jit(table, state, last_token, scores, config):
    n = config.ngram_len
    first = state.num_calls == 0
    shifted = jnp.concatenate([state.context, last_token[:, None]], axis=1)[:, 1:]
    context = jnp.where(first, state.context, shifted)
    num_calls = state.num_calls + 1
    g = _vocab_g(table, context, config, scores.shape[1])
    updated = _update_scores_jit(scores, g)
    c_hi, c_lo = _context_hash64(context)
    repeated = jnp.any((state.history_hi == c_hi[:, None]) & (state.history_lo == c_lo[:, None]), axis=1)
    hist_hi = jnp.concatenate([c_hi[:, None], state.history_hi], axis=1)[:, :-1]
    hist_lo = jnp.concatenate([c_lo[:, None], state.history_lo], axis=1)[:, :-1]
    out = jnp.where(repeated[:, None], scores, updated)
    if config.skip_first_ngram_calls:
        skip = num_calls < n
        out = jnp.where(skip, scores, out)
        hist_hi = jnp.where(skip, state.history_hi, hist_hi)
        hist_lo = jnp.where(skip, state.history_lo, hist_lo)
    return out, SynthIDState(context, hist_hi, hist_lo, num_calls)


def process_scores(config: HFSynthIDConfig, state: SynthIDState, last_token, scores):
    """One call of ``SynthIDTextWatermarkLogitsProcessor.__call__``, as a pure function (JAX).

    Returns ``(new_scores float32[B, V], new_state)``. On the first call (``num_calls == 0``) the
    context stays the initial zeros and ``last_token`` is ignored (transformers ignores the prompt);
    later calls shift ``last_token`` (the token sampled at the previous call, ``input_ids[:, -1]``)
    into the context. Rows whose context hash is in the history get ``scores`` back unchanged, the
    others :func:`update_scores`; with ``skip_first_ngram_calls`` the first ``ngram_len - 1`` calls
    return ``scores`` and leave the history as it was.

    Args:
      config: the watermark settings (static).
      state: from :func:`init_state` or the previous call.
      last_token: int[B] the last token of each row.
      scores: float[B, V] the warped logits (see :func:`watermarked_log_probs` for the order).
    """
    _check_config(config)
    validation.check_logits(scores, "scores")
    b = np.shape(scores)[0]
    if len(np.shape(scores)) != 2 or np.shape(last_token) != (b,) or np.shape(state.context)[0] != b:
        raise ValueError(f"scores (B, V), last_token (B,) and the state must share B; got {np.shape(scores)}, "
                         f"{np.shape(last_token)}, {np.shape(state.context)}")
    last = _check_token_array(np.reshape(last_token, (b, 1)) if validation.is_concrete(last_token)
                              else jnp.reshape(last_token, (b, 1)), 1, "last_token")[:, 0]
    table = _device_table(config.sampling_table_seed, config.sampling_table_size)
    return _process_jit(table, state, last, jnp.asarray(scores, jnp.float32), config=config)


# ------------------------------------------------------------------------------------------------ detection


class SynthIDScores(NamedTuple):
    """Per-text detection results.

    Attributes:
      mean_score: float64[B] mean of the scored g-values (transformers' / Dathathri et al.'s mean
        score); NaN where nothing is scored.
      num_scored: int64[B] n, the scored n-gram positions (each contributes ``depth`` g-values).
      p_value: float64[B] P(score sum >= observed) under H0; 1 where nothing is scored.
    """

    mean_score: np.ndarray
    num_scored: np.ndarray
    p_value: np.ndarray


def _scored(config, input_ids, eos_token_id, generation_start):
    """(hashes uint64[B, N] of the n-grams before the keys, mask bool[B, N]) as the detector scores."""
    _check_config(config)
    ids = _check_ids(input_ids)
    eos = _eos_ids(eos_token_id)
    n = config.ngram_len
    b, t = ids.shape
    if generation_start and not config.skip_first_ngram_calls:
        # the processor's first context is n - 1 zeros: n-gram j of the padded ids ends at ids[:, j]
        padded = np.concatenate([np.zeros((b, n - 1), np.int64), ids], axis=1)
        keep = np.ones((b, t), bool) if eos is None else np.cumsum(np.isin(ids, eos), axis=1) == 0
    else:
        # with skip_first_ngram_calls the first watermarked context is ids[:, :n - 1] either way
        padded = ids
        keep = np.ones((b, max(t - n + 1, 0)), bool)
        if eos is not None:
            keep = (np.cumsum(np.isin(ids, eos), axis=1) == 0)[:, n - 1:]
    mask = _first_in_window(_context_hashes(padded, n), config.context_history_size) & keep
    return _ngram_hashes(padded, n), mask


def _sum_tail(layer_pmf: np.ndarray, depth: int, s: int) -> float:
    """P(X_1 + ... + X_depth >= s) for i.i.d. X_l with law ``layer_pmf`` (float64[n + 1] on 0..n).

    The depth-fold convolution is evaluated by FFT after an exponential tilt: with
    ``w_theta(x) = layer_pmf(x) e^(theta x) / M(theta)`` and theta chosen so that w_theta's mean is
    s / depth, ``P(sum = k) = w_theta^{*depth}(k) M(theta)^depth e^(-theta k)`` and the FFT's
    absolute rounding error (~1e-16 of the tilted law's peak, which sits at k ~ s) stays far below
    the terms that make up the tail: the p-value keeps ~1e-10 relative accuracy down to
    ~1e-300, where a plain FFT would lose everything below ~1e-16.
    """
    from scipy import fft as sfft

    def logsumexp(v):
        top = np.max(v)
        return top + np.log(np.sum(np.exp(v - top))) if np.isfinite(top) else top

    support = np.flatnonzero(layer_pmf > 0)
    lo, hi = int(support[0]), int(support[-1])
    if s <= depth * lo:
        return 1.0
    if s > depth * hi:
        return 0.0
    x = np.arange(hi + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logp = np.log(layer_pmf[: hi + 1])

    def tilted(theta):
        logw = logp + theta * x
        log_m = logsumexp(logw)
        return np.exp(logw - log_m), log_m

    theta = 0.0
    target = min(s, depth * hi - 0.5) / depth
    if float((x * layer_pmf[: hi + 1]).sum()) < target:
        a, b = 0.0, 1.0
        while float((x * tilted(b)[0]).sum()) < target and b < 2.0 ** 20:
            b *= 2.0
        for _ in range(40):  # bisection on the tilted mean, increasing in theta (any theta is exact;
            # one near the target only keeps the rounding small)
            mid = 0.5 * (a + b)
            a, b = (mid, b) if float((x * tilted(mid)[0]).sum()) < target else (a, mid)
        theta = a
    w, log_m = tilted(theta)
    length = depth * hi + 1
    size = sfft.next_fast_len(length, real=True)
    conv = sfft.irfft(sfft.rfft(w, size) ** depth, size)[:length]
    k = np.arange(s, length)
    with np.errstate(divide="ignore"):
        log_terms = np.log(np.clip(conv[s:], 0.0, None)) + depth * log_m - theta * k
    return float(min(1.0, np.exp(logsumexp(log_terms))))


@functools.lru_cache(maxsize=4)
def _shifted_table_fft(seed: int, size: int) -> np.ndarray:
    """rfft of ``T'[x] = table[(x * MULTIPLIER + 1) mod S]`` (S a power of two)."""
    x = np.arange(size, dtype=np.uint64)
    idx = _lcg(np.zeros(size, np.uint64), x) & _U64(size - 1)
    return np.fft.rfft(_table(seed, size)[idx.astype(np.int64)].astype(np.float64))


def _resolve_null(config, null: str) -> str:
    if null not in ("auto", "keys", "binomial"):
        raise ValueError(f"null must be 'auto', 'keys' or 'binomial', got {null!r}")
    pow2 = config.sampling_table_size & (config.sampling_table_size - 1) == 0
    if null == "auto":
        return "keys" if pow2 else "binomial"
    if null == "keys" and not pow2:
        raise ValueError("null='keys' needs a power-of-two sampling_table_size; use null='binomial'")
    return null


def _key_shift_pmfs(config, hashes, mask) -> list:
    """Per text, the law of one layer's sum X(k) = sum_t T'[(h_t + k) mod S] for k uniform on Z/S."""
    size = config.sampling_table_size
    tfft = _shifted_table_fft(config.sampling_table_seed, size)
    out = []
    chunk = max(1, 2 ** 22 // size)
    for start in range(0, hashes.shape[0], chunk):  # over texts, in blocks bounded in memory
        h, m = hashes[start:start + chunk], mask[start:start + chunk]
        rows = np.broadcast_to(np.arange(h.shape[0])[:, None], h.shape)[m]
        residues = (h[m] & _U64(size - 1)).astype(np.int64)
        counts = np.zeros((h.shape[0], size))
        np.add.at(counts, (rows, residues), 1.0)
        # circular cross-correlation: X[k] = sum_a counts[a] T'[a + k]
        x = np.fft.irfft(np.conj(np.fft.rfft(counts, axis=1)) * tfft, n=size, axis=1)
        xi = np.rint(x)
        if np.abs(x - xi).max(initial=0.0) > 0.25:
            raise RuntimeError("FFT rounding failed for the key-shift law")
        for r in range(h.shape[0]):
            n = int(m[r].sum())
            out.append(np.bincount(xi[r].astype(np.int64), minlength=n + 1)[: n + 1] / size)
    return out


def null_distribution(config: HFSynthIDConfig, input_ids, eos_token_id=None, *, generation_start: bool = False,
                      null: str = "auto") -> list:
    """Per text, the H0 law of ONE depth's score sum (its scored g-values summed over positions):
    a list of B float64 pmfs of length ``n_b + 1``, entry x = P(X = x). The statistic of :func:`score`
    is the sum of ``depth`` i.i.d. copies of X.

    ``null``: ``"keys"`` (the exact law over random keys, power-of-two table sizes: a multiple of
    1 / S), ``"binomial"`` (Binomial(n, q), q the table's fraction of ones) or ``"auto"`` (the first
    when it applies). Other arguments as :func:`score`.
    """
    kind = _resolve_null(config, null)
    hashes, mask = _scored(config, input_ids, eos_token_id, generation_start)
    if kind == "binomial":
        from scipy import stats

        q = float(_table(config.sampling_table_seed, config.sampling_table_size).mean())
        return [stats.binom.pmf(np.arange(int(n) + 1), int(n), q) for n in mask.sum(axis=1)]
    return _key_shift_pmfs(config, hashes, mask)


def score(config: HFSynthIDConfig, input_ids, eos_token_id=None, *, generation_start: bool = False,
          null: str = "auto") -> SynthIDScores:
    """Detects transformers' SynthID-Text watermark with an exact p-value: mean score, n, p-value.

    The scored positions are transformers' detector's (``SynthIDTextWatermarkDetector``): the n-grams
    of ``input_ids`` whose context is a first occurrence (:func:`context_repetition_mask`) and that
    end before the first ``eos_token_id`` (:func:`eos_token_mask`, cut by ``ngram_len - 1``).
    Statistic: the sum of their g-values over all depths; ``mean_score`` = sum / (n * depth).

    The null law (``null="keys"``, the default for power-of-two table sizes such as transformers'
    65536). H0: the keys are independent of the text; model them as uniformly random. With
    S = 2**m, the table index of position t at depth l is
    ``((h_t + k_l) * MULTIPLIER + 1) mod S = f(a_t + r_l)`` where ``h_t`` is the n-gram hash,
    ``a_t = h_t mod S``, ``r_l = k_l mod S`` and ``f(x) = (x * MULTIPLIER + 1) mod S``: the modulo of
    a power of two commutes with the wrap-around arithmetic, so only the low m bits of the keys count.
    Depth l's sum is then ``X(r_l) = sum_t T'[a_t + r_l]`` with ``T' = table o f`` and, the r_l being
    i.i.d. uniform on Z/S, the depths' sums are i.i.d. copies of X(r) with r uniform: the exact law
    of the statistic is the depth-fold convolution of the law of X(r) (:func:`null_distribution`),
    which is computed for all S values of r at once (one circular cross-correlation by FFT,
    integer-exact after rounding); the convolution's tail is summed after an exponential tilt
    (relative error ~1e-12 down to ~1e-300, below which the p-value underflows to 0). Text,
    masks and table are held fixed, so collisions of table indices (two positions or depths reading
    one entry, inevitable with ~n * depth reads out of 65536) are accounted for exactly, which an
    i.i.d. Bernoulli model is not. The p-value is super-uniform over the keys: P(p <= alpha) <= alpha.
    Consequences of the construction worth knowing: keys equal modulo S are the same layer (k and
    k + 65536 give identical g-values); and every key list reads the same table, so the g-values of
    a text watermarked with list K, read with another FIXED list K', correlate with the watermark
    through the table's autocorrelation at the lags k' - k (about 1/sqrt(S) each). Each text's
    p-value stays exact over a random K', but many texts scored with one fixed wrong list have
    correlated p-values: false positives then cluster instead of being independent.

    ``null="binomial"``: P(Binomial(n * depth, q) >= sum), q the table's exact fraction of ones, exact
    under the idealisation that every read is a fresh Bernoulli(q) (ignores index collisions); the
    only choice for table sizes that are not powers of two. Both agree closely for texts of a few
    hundred tokens (each layer's X has mean n q and variance n q (1 - q) up to the table's
    autocorrelations and the collisions).

    Departures from transformers: transformers' detector is a trained Bayesian classifier
    (``BayesianDetectorModel``) that outputs a posterior and no p-value; here nothing is trained and
    the p-value is exact. ``generation_start=True`` also scores the first ``ngram_len - 1`` tokens,
    which transformers watermarks with its all-zeros initial context (pass exactly the generated
    ids, prompt removed); no effect with ``skip_first_ngram_calls``.

    Args:
      config: the watermark settings (with the keys to test for).
      input_ids: int[B, T] token ids (the generated text; left padding should be removed).
      eos_token_id: None, an int or ints; everything from a row's first one on is not scored.
      generation_start: see above.
      null: ``"auto"``, ``"keys"`` or ``"binomial"``.

    Returns:
      :class:`SynthIDScores` ``(mean_score float64[B], num_scored int64[B], p_value float64[B])``.
    """
    kind = _resolve_null(config, null)
    hashes, mask = _scored(config, input_ids, eos_token_id, generation_start)
    d = config.depth
    g = _lookup(config, _keyed(config, hashes))
    sums = (g * mask[..., None]).sum(axis=(1, 2)).astype(np.int64)
    n = mask.sum(axis=1).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, sums / np.maximum(n * d, 1), np.nan)
    if kind == "binomial":
        from scipy import stats

        q = float(_table(config.sampling_table_seed, config.sampling_table_size).mean())
        p = np.where(n > 0, stats.binom.sf(sums - 1, n * d, q), 1.0)
    else:
        layers = _key_shift_pmfs(config, hashes, mask)
        p = np.array([_sum_tail(law, d, int(k)) if nn > 0 else 1.0 for law, k, nn in zip(layers, sums, n)])
    return SynthIDScores(mean.astype(np.float64), n, np.clip(p, 0.0, 1.0).astype(np.float64))


def weighted_mean_score(config: HFSynthIDConfig, input_ids, eos_token_id=None, *, weights=None,
                        generation_start: bool = False) -> np.ndarray:
    """Dathathri et al.'s weighted mean score: float64[B] (no p-value).

    ``sum_{t, l} w_l g[t, l] / (n * depth)`` over the scored positions, with ``w`` (default
    ``linspace(10, 1, depth)``, the reference code's) rescaled to sum to ``depth``; NaN where nothing
    is scored. Arguments as :func:`score`; ``weights``: float[depth], non-negative.
    """
    hashes, mask = _scored(config, input_ids, eos_token_id, generation_start)
    d = config.depth
    w = np.linspace(10.0, 1.0, d) if weights is None else np.asarray(weights, np.float64)
    if w.shape != (d,) or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {d} non-negative finite floats, not all zero")
    w = w * (d / w.sum())
    g = _lookup(config, _keyed(config, hashes)).astype(np.float64)
    n = mask.sum(axis=1)
    total = (g * w * mask[..., None]).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n * d, 1), np.nan)
