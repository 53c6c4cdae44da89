"""NumPy twin of :mod:`wmspec_jax.prf` (same bits, no JAX).

Used by the tests to pin the construction bit for bit, and usable by anyone
who wants to verify a detector's inputs without JAX. Every function mirrors
the JAX function of the same name.
"""

from __future__ import annotations

import numpy as np

from wmspec_jax import prf_keys as prf

_U = np.uint32


def mix(x):
    x = np.asarray(x, dtype=_U)
    with np.errstate(over="ignore"):
        x = x ^ (x >> _U(16))
        x = x * _U(prf._MIX_1)
        x = x ^ (x >> _U(15))
        x = x * _U(prf._MIX_2)
        x = x ^ (x >> _U(16))
    return x


def context_seeds(keys, contexts):
    keys = np.asarray(keys, dtype=_U)
    ctx = np.asarray(contexts).astype(np.int64).astype(_U)  # -1 -> 0xFFFFFFFF
    h = ctx.shape[-1]
    shape = np.broadcast_shapes(keys.shape[:-1], ctx.shape[:-1])
    with np.errstate(over="ignore"):
        s0 = np.broadcast_to(keys[..., 0] ^ _U(h * prf._MUL_LANE & 0xFFFFFFFF), shape).astype(_U)
        s1 = np.broadcast_to(keys[..., 1], shape).astype(_U)
        for i in range(h):
            c = ctx[..., i]
            s0 = mix(s0 ^ (c * _U(prf._MUL_CONTEXT)))
            s1 = mix(s1 + s0 + c)
        return np.stack([mix(s0 ^ s1), mix(s1 + _U(prf._MUL_TOKEN) * s0)], axis=-1)


def hash_values(seeds, tokens, lane):
    seeds = np.asarray(seeds, dtype=_U)
    t = np.asarray(tokens).astype(np.int64).astype(_U)
    with np.errstate(over="ignore"):
        x = seeds[..., 0] ^ (t * _U(prf._MUL_TOKEN) + _U(int(lane)) * _U(prf._MUL_LANE))
        return mix(mix(x) + seeds[..., 1])


def to_uniform(values):
    v = np.asarray(values, dtype=_U)
    return ((v >> _U(8)) | _U(1)).astype(np.float32) * np.float32(2.0**-24)


def token_uniforms(seeds, tokens):
    return to_uniform(hash_values(seeds, tokens, prf.Lane.TOKEN_UNIFORM))


def position_uniforms(seeds):
    return to_uniform(hash_values(seeds, 0, prf.Lane.POSITION_UNIFORM))


def token_gbits(seeds, tokens, num_layers):
    blocks = []
    for b in range(-(-num_layers // prf.NUM_GBITS_PER_HASH)):
        v = hash_values(seeds, tokens, prf.Lane.GBITS + b)
        n = min(prf.NUM_GBITS_PER_HASH, num_layers - b * prf.NUM_GBITS_PER_HASH)
        blocks.append(((v[..., None] >> np.arange(n, dtype=_U)) & _U(1)).astype(np.uint8))
    return np.concatenate(blocks, axis=-1)


def keyed_permutation(seeds, tokens, vocab_size):
    seeds = np.asarray(seeds, dtype=_U)
    w = np.broadcast_to(np.asarray(tokens).astype(np.int64),
                        np.broadcast_shapes(np.shape(tokens), seeds.shape[:-1]))
    own = hash_values(seeds, w, prf.Lane.KGW_ORDER)
    v = np.arange(int(vocab_size))
    hv = hash_values(seeds[..., None, :], v, prf.Lane.KGW_ORDER)
    before = (hv < own[..., None]) | ((hv == own[..., None]) & (v < w[..., None]))
    return before.sum(axis=-1).astype(np.int32)


__all__ = ["context_seeds", "hash_values", "keyed_permutation", "mix", "position_uniforms", "to_uniform",
           "token_gbits", "token_uniforms"]
