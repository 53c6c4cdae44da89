"""Position-indexed key sequences: the watermark streams keyed by a token's place in the text, not by
the tokens before it (Kuditipudi et al. 2023, "Robust distortion-free watermarks for language models").

Kuditipudi et al. draw a key sequence ξ_0, ..., ξ_{n-1} from the secret (n = 256 in their
experiments) and a random offset s per generation, and generate the text's i-th token with
ξ_{(s + i) mod n}. Detection does not know s and aligns the text with the key by an edit distance
(:mod:`wmspec_jax.detect.edit_alignment`), so insertions and deletions only cost the alignment a few cells
instead of desynchronising every later token, as they do for context-keyed streams.

Here ξ_l of stream σ ∈ {draft, accept, target} is the seed pair
``prf.context_seeds(K_σ ^ SEQUENCE_DOMAIN, [l])`` (:func:`sequence_seeds`), so every decoder of
:mod:`wmspec_jax.decoders` reads ξ_l through its usual hash of (seed, token): Gumbel-max with a key
sequence is Kuditipudi et al.'s EXP scheme (ξ_l's uniforms over the vocabulary), and Alg. 1's acceptance
uniform u at that token is the accept stream's ξ_l. The domain constant keeps these seeds apart from
the context-keyed seeds of the same secret. The offset s of a row is drawn from the row's true
randomness (:func:`row_shifts`; the reference code draws it with ``torch.randint``), so one prompt
generated twice under one key gives two texts; it is not recorded.

Every position of a text at most n tokens long has its own ξ_l, so no repeated-context rule applies
and every token is drawn from its stream. A text longer than n reuses ξ from token n on, as the
reference code does; tokens i and i + n then share their key element, so the joint law of such a text
is not exactly the model's (each token's law still is).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf, sampling

SEQUENCE_DOMAIN = 0x4B534551
"""Domain separation of key-sequence seeds (the bytes "KSEQ"), xored into both key words."""

PURPOSE_SHIFT = 3
"""The true-randomness purpose of a row's offset (one the loop's draws do not use)."""

MAX_KEY_LENGTH = 1 << 16
"""The longest key sequence (n)."""

DEFAULT_KEY_LENGTH = 256
"""Kuditipudi et al.'s n."""


def check_key_length(n) -> int:
    """n as an int: 0 (streams keyed by context, the default) or 1 <= n <= :data:`MAX_KEY_LENGTH`."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"key_sequence must be an int (0: keyed by context), got {n!r}")
    n = int(n)
    if not 0 <= n <= MAX_KEY_LENGTH:
        raise ValueError(f"key_sequence must be 0 (keyed by context) or 1..{MAX_KEY_LENGTH}, got {n}")
    return n


def sequence_seeds(stream_keys: jax.Array, index: jax.Array) -> jax.Array:
    """Seeds of ξ_l: uint32[..., 2] from one stream's key words uint32[..., 2] and key indices l int[...]
    (broadcast)."""
    keys = jnp.asarray(stream_keys).astype(jnp.uint32) ^ jnp.uint32(SEQUENCE_DOMAIN)
    return prf.context_seeds(keys, jnp.asarray(index, jnp.int32)[..., None])


def row_shifts(words: jax.Array, n: int) -> jax.Array:
    """Each row's offset s in [0, n): int32[B] from its true-randomness words uint32[B, 2]."""
    u = sampling.true_uniforms(words, jnp.full(words.shape[:-1], -1, jnp.int32), PURPOSE_SHIFT)
    return jnp.minimum(jnp.floor(u * n).astype(jnp.int32), n - 1)


def key_index(positions: jax.Array, start: jax.Array, shift: jax.Array, n: int) -> jax.Array:
    """l = (s + i) mod n of the token at buffer ``positions`` (int32[B] or [B, T]), i = position −
    ``start`` (the row's prompt length, int32[B]); ``shift``: s, int32[B]."""
    positions = jnp.asarray(positions, jnp.int32)
    extra = (1,) * (positions.ndim - 1)
    start = jnp.reshape(start, start.shape + extra)
    shift = jnp.reshape(shift, shift.shape + extra)
    return jnp.mod(positions - start + shift, n)


def position_seeds(keys: jax.Array, stream: int, positions: jax.Array, start: jax.Array, words: jax.Array,
                   n: int) -> jax.Array:
    """Seeds of ζ for one stream at one position per row under a key sequence of length n: uint32[B, 2]
    (the counterpart of :func:`wmspec_jax.sampling.position_seeds`). ``keys`` uint32[B, NUM_STREAMS, 2];
    ``words`` the rows' true-randomness words (their offsets)."""
    return sequence_seeds(keys[:, stream], key_index(positions, start, row_shifts(words, n), n))


__all__ = ["DEFAULT_KEY_LENGTH", "MAX_KEY_LENGTH", "PURPOSE_SHIFT", "SEQUENCE_DOMAIN", "check_key_length",
           "key_index", "position_seeds", "row_shifts", "sequence_seeds"]
