"""The PRF's versioned constants and key words, without JAX (:mod:`wmspec_jax.prf` re-exports them).

What a command-line tool, the key handling (:mod:`wmspec_jax.keys`) and the
NumPy twin (:mod:`wmspec_jax.prf_numpy`) need of the construction of
:mod:`wmspec_jax.prf` — its version, the streams and lanes, the multiplicative
constants and the derivation of the per-stream key words from a secret
(SHA-256) — importable without starting JAX.
"""

from __future__ import annotations

import enum
import hashlib
import numbers
from typing import Sequence, Union

import numpy as np

PRF_VERSION = "wmspec-prf-v2"
"""Identifier of the bit-exact construction. Any change to the functions in
this module must bump it; detectors record it so old text stays detectable.

v2 (domain separation per scheme): the inverse transform's and DiPmark's keyed permutations and KGW's
green list each read lanes of their own (:class:`Lane`), where v1 ordered both permutations and drew
KGW's (random-size) list from Gumbel-max's token lane, so that under one secret a detector of one
scheme "detected" another's texts. Everything else is unchanged: Gumbel-max and SynthID values, the
acceptance uniforms and the key derivation are bit for bit v1's, and v1 texts of those decoders are v2
texts (:func:`same_construction`)."""

PRF_V1 = "wmspec-prf-v1"
PRF_VERSIONS = (PRF_V1, PRF_VERSION)
"""Versions whose texts this package scores (a record names its version; :func:`check_prf_version`)."""

_KEY_HASH_VERSION = PRF_V1
"""The version string hashed into the stream key words (:class:`WatermarkKey`): v1's, so that a
secret gives the same words in every version."""

UNCHANGED_SINCE_V1 = ("gumbel", "synthid")
"""Statistics (``WatermarkDecoder.statistic``) whose values v2 left as they were in v1."""


def check_prf_version(version) -> str:
    """``version`` if this package scores texts of it (:data:`PRF_VERSIONS`), else ValueError."""
    if version not in PRF_VERSIONS:
        raise ValueError(f"PRF version {version!r} is not one this package implements ({', '.join(PRF_VERSIONS)})")
    return version


def same_construction(statistic: str, version: str) -> str:
    """The version that names ``statistic``'s values under ``version``: the current one for the
    statistics v2 left unchanged (:data:`UNCHANGED_SINCE_V1`), ``version`` otherwise."""
    check_prf_version(version)
    return PRF_VERSION if statistic in UNCHANGED_SINCE_V1 else version

DEFAULT_CONTEXT_WIDTH = 4
"""Default number h of previous tokens that key each position's ζ."""

# Multiplicative constants (odd) and the lowbias32 finaliser constants.
_MUL_TOKEN = 0x9E3779B1
_MUL_LANE = 0x85EBCA77
_MUL_CONTEXT = 0xC2B2AE3D
_MUL_CANDIDATE = 0x27D4EB2F  # sibling streams of multi-draft sampling (prf.candidate_seeds)
_MIX_1 = 0x7FEB352D
_MIX_2 = 0x846CA68B
_PAD_TOKEN = 0xFFFFFFFF  # stands for "before the start of the buffer"

NUM_GBITS_PER_HASH = 32


class Stream(enum.IntEnum):
    """Independent pseudorandom streams of Alg. 1 (ζ = (ζ^D, ζ^T, ζ^R))."""

    DRAFT = 0
    TARGET = 1
    ACCEPT = 2


NUM_STREAMS = len(Stream)


class Lane(enum.IntEnum):
    """Domain separation of the values drawn for one (stream, context)."""

    TOKEN_UNIFORM = 0  # Gumbel-max uniforms U_w, one per token (v1: also the permutations' order and KGW)
    POSITION_UNIFORM = 1  # one uniform per position (acceptance / sampler)
    SEARCH = 2  # detection only: the randomisation of SynthID's search over sibling streams
    INVERSE_ORDER = 3  # v2: the inverse transform's permutation order, one hash per token
    DIPMARK_ORDER = 4  # v2: DiPmark's permutation order, one hash per token
    KGW_ORDER = 8  # v2: KGW's keyed permutation of the vocabulary, one hash per token
    GBITS = 16  # SynthID g-values: lane GBITS + b holds layers 32b..32b+31


# ---------------------------------------------------------------------------
# Secret keys
# ---------------------------------------------------------------------------

KeyLike = Union[bytes, bytearray, str, int, "WatermarkKey"]


class WatermarkKey:
    """A secret watermark key; derives one 64-bit key per :class:`Stream`.

    Accepts ``bytes``, ``str`` (UTF-8) or a non-negative ``int``. The key is
    hashed with SHA-256 together with the version string ``"wmspec-prf-v1"``
    (:data:`_KEY_HASH_VERSION`: every version derives the same words) and a type tag (so
    ``1``, ``"1"`` and ``b"1"`` are different keys). ``repr``/``str`` never
    show key material; nothing in the package writes it to results.
    """

    __slots__ = ("_digest",)

    def __init__(self, key: KeyLike):
        if isinstance(key, WatermarkKey):
            self._digest = key._digest
            return
        self._digest = hashlib.sha256(
            _KEY_HASH_VERSION.encode() + b"\x00" + _key_bytes(key)
        ).digest()

    def stream_keys(self) -> np.ndarray:
        """uint32[NUM_STREAMS, 2]: the per-stream key words (k0, k1)."""
        words = []
        for stream in Stream:
            d = hashlib.sha256(
                self._digest + b"stream:" + stream.name.encode()
            ).digest()
            words.append(np.frombuffer(d[:8], dtype="<u4"))
        return np.stack(words).astype(np.uint32)

    def __repr__(self) -> str:
        return "WatermarkKey(<secret>)"

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, WatermarkKey) and other._digest == self._digest

    def __hash__(self) -> int:
        return hash(self._digest)

    def __reduce__(self):
        raise TypeError("WatermarkKey is not picklable: never store the secret key")


def _key_bytes(key) -> bytes:
    if isinstance(key, (bytes, bytearray)):
        return b"b:" + bytes(key)
    if isinstance(key, str):
        return b"s:" + key.encode("utf-8")
    if isinstance(key, bool) or not isinstance(key, numbers.Integral):
        hint = ""
        if hasattr(key, "dtype"):
            hint = (
                " (a jax.random key is the *true-randomness* key; the watermark"
                " key is a secret bytes/str/int)"
            )
        raise TypeError(
            f"watermark key must be bytes, str or a non-negative int, got "
            f"{type(key).__name__}{hint}"
        )
    key = int(key)
    if key < 0:
        raise ValueError("watermark key must be a non-negative int")
    return b"i:" + key.to_bytes(max(1, (key.bit_length() + 7) // 8), "big")


def stream_keys(keys: Union[KeyLike, Sequence[KeyLike]]) -> np.ndarray:
    """Stream key words for one key (``[NUM_STREAMS, 2]``) or a list (``[B, NUM_STREAMS, 2]``).

    A list gives each row of a batch its own key (used by Monte Carlo tests
    and by multi-tenant serving).
    """
    if isinstance(keys, (list, tuple)):
        if not keys:
            raise ValueError("empty list of watermark keys")
        return np.stack([WatermarkKey(k).stream_keys() for k in keys])
    return WatermarkKey(keys).stream_keys()


MAX_CONTEXT_WIDTH = 64
"""Largest context width h accepted (the paper uses 4): a context costs h gathered tokens per position."""


def check_context_width(h) -> int:
    """Validates the context width h (number of previous tokens keying ζ): an int in [1, 64]."""
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= MAX_CONTEXT_WIDTH:
        raise ValueError(f"context width h must be an int in [1, {MAX_CONTEXT_WIDTH}], got {h!r}")
    return int(h)


__all__ = ["DEFAULT_CONTEXT_WIDTH", "KeyLike", "Lane", "MAX_CONTEXT_WIDTH", "NUM_GBITS_PER_HASH", "NUM_STREAMS",
           "PRF_V1", "PRF_VERSION", "PRF_VERSIONS", "Stream", "UNCHANGED_SINCE_V1", "WatermarkKey",
           "check_context_width", "check_prf_version", "same_construction", "stream_keys"]
