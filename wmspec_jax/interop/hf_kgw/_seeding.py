"""The 32-bit mt19937 seeds transformers' KGW ``set_seed`` derives from a context (lefthash and
selfhash, with selfhash's fixed table). Public face: :mod:`wmspec_jax.interop.hf_kgw`."""

from __future__ import annotations

import numpy as np

from wmspec_jax.interop.hf_kgw._config import _M64, TABLE_SIZE, HFKGWConfig, _check_config
from wmspec_jax.interop.hf_kgw._mt19937 import _U, _fy_prefix_np, _swap_targets_np


def _mul32_wide(a, b):
    """uint32 a * b as (hi, lo) uint32 words, from 16-bit halves (numpy or jax arrays)."""
    m16 = _U(0xFFFF)
    a0, a1, b0, b1 = a & m16, a >> _U(16), b & m16, b >> _U(16)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U(16)) + (p01 & m16) + (p10 & m16)
    lo = (p00 & m16) | (mid << _U(16))
    hi = p11 + (p01 >> _U(16)) + (p10 >> _U(16)) + (mid >> _U(16))
    return hi, lo


def _key_words(config: HFKGWConfig):
    """(K0, K1): the 32-bit words of hashing_key mod (2^64 − 1) (Python's floor modulo)."""
    K = config.hashing_key % _M64
    return K & 0xFFFFFFFF, K >> 32


def _lefthash_seed32(xp, k0, k1, t):
    """((K * t) mod (2^64 − 1)) mod 2^32 with uint32 words only (K = K1·2^32 + K0 < 2^64 − 1).

    K·t = b1·2^64 + (b0 + a1)·2^32 + a0 with (a1, a0) = K0·t and (b1, b0) = K1·t; as 2^64 ≡ 1
    (mod 2^64 − 1) the residue is lo + hi (lo = the low 64 bits, hi = b1 + carry < 2^32), folded.
    """
    ones = _U(0xFFFFFFFF)
    a1, a0 = _mul32_wide(k0, t)
    b1, b0 = _mul32_wide(k1, t)
    c = b0 + a1
    hi = b1 + xp.where(c < b0, _U(1), _U(0))
    s0 = a0 + hi
    carry0 = s0 < a0
    s1 = c + xp.where(carry0, _U(1), _U(0))
    wrapped = carry0 & (c == ones)           # lo + hi >= 2^64: add the 1 that 2^64 leaves
    s0 = s0 + xp.where(wrapped, _U(1), _U(0))
    return xp.where((s0 == ones) & (s1 == ones), _U(0), s0)


def _fixed_table_prefix(config: HFKGWConfig, length: int) -> np.ndarray:
    """``torch.randperm(1_000_003, generator=manual_seed(hashing_key))[:length]``: int64[length]."""
    length = int(min(max(length, 1), TABLE_SIZE))
    j = _swap_targets_np(np.array([config.hashing_key % 2**32], np.uint64), TABLE_SIZE, length)
    return _fy_prefix_np(j)[0]


def _selfhash_seed32(config: HFKGWConfig, windows: np.ndarray) -> np.ndarray:
    """Seeds of selfhash windows int64[..., L] (last entry = the scored / candidate token): uint32[...].

    seed = min_i(key * (T[w_i] + 1) * (T[w_-1] + 1)) in wrapping int64 (torch's), then Python's
    ``% (2**64 - 1)`` (a negative h becomes h + 2^64 − 1), then mt19937's mod 2^32.
    """
    idx = windows % TABLE_SIZE
    table = _fixed_table_prefix(config, int(idx.max(initial=0)) + 1)
    a = table[idx] + 1
    with np.errstate(over="ignore"):
        h = (np.int64(config.hashing_key) * a) * a[..., -1:]
    h = h.min(axis=-1)
    s = h.astype(np.uint64) - (h < 0).astype(np.uint64)
    return (s & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def mt_seeds(config: HFKGWConfig, context_ids) -> np.ndarray:
    """The 32-bit mt19937 seeds transformers' ``set_seed`` derives: uint32[...] for int[..., L].

    ``context_ids`` is ``_get_greenlist_ids``' ``input_seq``: lefthash uses its last token;
    selfhash its last ``context_width`` tokens, the last one being the candidate / scored token.
    """
    config = _check_config(config)
    ids = np.asarray(context_ids)
    if ids.ndim < 1 or ids.shape[-1] < 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"context_ids must be int[..., L >= 1], got {ids.dtype} {ids.shape}")
    ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError("context_ids must be non-negative token ids")
    if config.seeding_scheme == "selfhash":
        return _selfhash_seed32(config, ids[..., -config.context_width:])
    k0, k1 = _key_words(config)
    with np.errstate(over="ignore"):
        return _lefthash_seed32(np, np.full(ids.shape[:-1], k0, np.uint32),
                                np.full(ids.shape[:-1], k1, np.uint32), ids[..., -1].astype(np.uint32))


__all__ = ["mt_seeds"]
