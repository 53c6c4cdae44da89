"""Per-position token sampling from a watermark stream or from true randomness.

Two sources of randomness meet in the speculative loop:

* the watermark streams ζ (:mod:`wmspec_jax.prf`), a function of the secret
  key and the position's context, which a detector can rebuild;
* "true" randomness for the unwatermarked parts (plain sampling, the
  baselines' acceptance coin, repeated contexts), from an ordinary
  ``jax.random`` key the caller passes — never from the watermark key.

True randomness is keyed by (row key, buffer position, purpose) rather than
by loop step, so a row's output does not depend on the batch it runs in or
on how many steps it took. Reusing a position's uniform after a rollback is
sound: whether a tentative token at position t is discarded is decided at
earlier positions, independently of position t's uniforms.

Samplers work on a distribution's candidates (:mod:`wmspec_jax.candidates`):
weights float32[B, C] with their token ids (None: the whole vocabulary) and
return a candidate index. Whether a draw may be watermarked at all is a
static choice of the method, so unwatermarked methods hash nothing.
"""

from __future__ import annotations

import zlib
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import candidates, decoders, prf

# purposes of true-random uniforms at one position
PURPOSE_DRAFT = 0
PURPOSE_ACCEPT = 1
PURPOSE_TARGET = 2
_PURPOSES = 4  # purposes per candidate (> the largest PURPOSE_*)


def text_rngs(seed: int, ids, run: Optional[str] = None) -> jax.Array:
    """Typed ``jax.random`` keys [B], one per text: ``fold_in(base, id)`` with ``base = key(seed)``, or,
    for the texts of a generation ``run``, ``fold_in(key(seed), crc32(run))`` — so two runs of one
    experiment draw their true randomness independently.

    The one source of a text's own true randomness: generation's (repeated contexts, the baselines'
    coins; ``run`` given) and Ars-Prior's per-token coins at detection (``run=None``, ids e.g. the
    texts' indices or a hash of their tokens). A text's keys depend on its seed, run and id only,
    never on its batch or row. ids: ints in [0, 2^32).
    """
    ids = np.asarray(ids, np.int64)
    if ids.ndim != 1 or (ids < 0).any() or (ids >= 2**32).any():
        raise ValueError("text ids must be a 1-D array of integers in [0, 2^32)")
    base = jax.random.key(int(seed))
    if run is not None:
        base = jax.random.fold_in(base, zlib.crc32(run.encode()) & 0x7FFFFFFF)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(ids.astype(np.uint32)))


def check_rng(rng, batch_size: int) -> jax.Array:
    """The true-randomness key(s) as a typed ``jax.random`` key array of shape () or [B].

    ``rng`` is one key (``jax.random.key(seed)`` or legacy ``PRNGKey`` data)
    or [B] such keys. Pass [B] keys when a row's output must not depend on its
    index in the batch. Host-side check: no device work.
    """
    if isinstance(rng, jax.Array) and jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        keys = rng
    elif hasattr(rng, "dtype") and rng.dtype == jnp.uint32 and rng.shape[-1:] == (2,):
        keys = jax.random.wrap_key_data(jnp.asarray(rng))
    else:
        raise TypeError(
            "rng must be a jax.random key (jax.random.key(seed)) or [B] such keys; "
            f"got {type(rng).__name__}. The watermark key is passed separately."
        )
    if keys.shape not in ((), (batch_size,)):
        raise ValueError(f"rng must be one key or {batch_size} keys, got shape {keys.shape}")
    return keys


def row_words(keys: jax.Array, batch_size: int) -> jax.Array:
    """Per-row true-randomness key words, uint32[B, 2], from :func:`check_rng`'s keys.

    One key is split per row as ``fold_in(rng, row)``. The words are drawn
    once with ``jax.random.bits``; inside the loop they are expanded with the
    package's cheap counter hash (a threefry call per position would triple
    the loop's compile time for no statistical gain).
    """
    if keys.ndim == 0:
        keys = jax.vmap(lambda i: jax.random.fold_in(keys, i))(jnp.arange(batch_size))
    return jax.vmap(lambda k: jax.random.bits(k, (2,), jnp.uint32))(keys)


def as_row_keys(rng, batch_size: int) -> jax.Array:
    """:func:`check_rng` then :func:`row_words`: uint32[B, 2]."""
    return row_words(check_rng(rng, batch_size), batch_size)


def true_uniforms(words: jax.Array, positions: jax.Array, purpose) -> jax.Array:
    """U(0, 1) per row from (row key words, position, purpose): float32[B]. ``purpose`` is one of
    ``PURPOSE_*`` or an int32[B] array of them (:func:`candidate_purpose` for the siblings of
    multi-draft sampling)."""
    purposes = jnp.broadcast_to(jnp.asarray(purpose, jnp.int32), positions.shape)
    counter = jnp.stack([positions.astype(jnp.int32), purposes], axis=-1)
    return prf.position_uniforms(prf.context_seeds(words, counter))


def candidate_purpose(purpose: int, candidate: jax.Array) -> jax.Array:
    """The true-randomness purpose of sibling ``candidate`` (int32[B]) of a multi-draft position:
    candidate 0 keeps ``purpose`` (one chain draws what the paper's loop draws), candidate c > 0
    gets a purpose no other draw uses."""
    return jnp.asarray(purpose, jnp.int32) + _PURPOSES * jnp.asarray(candidate, jnp.int32)


def position_seeds(keys: jax.Array, stream: int, tokens: jax.Array, positions: jax.Array, width: int) -> jax.Array:
    """Seeds of ζ for one stream at one position per row.

    Args:
      keys: uint32[B, NUM_STREAMS, 2] per-row stream keys.
      stream: a :class:`prf.Stream`.
      tokens: int32[B, L] buffer (the context is the h tokens before the position).
      positions: int32[B].
      width: h.

    Returns:
      uint32[B, 2].
    """
    ctx = prf.gather_contexts(tokens, positions[:, None], width)[:, 0]
    return prf.context_seeds(keys[:, stream], ctx)


def watermark_index(decoder: decoders.WatermarkDecoder, weights: jax.Array, ids: Optional[jax.Array],
                    seeds: jax.Array, uniform: Optional[jax.Array] = None) -> jax.Array:
    """A candidate drawn from S(P, ζ): int32[B], a function of ζ alone except for decoders that sample
    with private randomness (``uniform``; :meth:`wmspec_jax.decoders.WatermarkDecoder.watermark_index`)."""
    return decoder.watermark_index(weights, ids, seeds, uniform)


def draw(decoder: decoders.WatermarkDecoder, weights: jax.Array, ids: Optional[jax.Array],
         seeds: Optional[jax.Array], uniform: jax.Array, use_watermark: Optional[jax.Array]):
    """A candidate index and whether it carries a watermark.

    Args:
      weights: float32[B, C]; ids: int32[B, C] or None (see :func:`watermark_index`).
      seeds: uint32[B, 2] of the watermark stream, or None when the method
        never watermarks this draw (then nothing is hashed).
      uniform: float32[B] true-random uniform for the plain inverse-CDF draw (and the private draw of a
        decoder that samples its watermarked distribution with private randomness).
      use_watermark: bool[B] rows that draw from the watermark stream (new
        context, watermarking choice); None with ``seeds=None``.

    Returns:
      (int32[B] candidate index, bool[B] watermarked record: drawn from the
      watermark stream from a distribution that is not one-hot — a one-hot
      distribution, e.g. at temperature 0, carries no watermark).
    """
    plain = decoders.inverse_cdf(weights, uniform)
    if seeds is None:
        return plain, jnp.zeros(plain.shape, bool)
    index = jnp.where(use_watermark, watermark_index(decoder, weights, ids, seeds, uniform), plain)
    return index, use_watermark & ~candidates.is_one_hot(weights)


def sample(decoder: decoders.WatermarkDecoder, probs: jax.Array, seeds: jax.Array, uniform: jax.Array,
           use_watermark: jax.Array) -> jax.Array:
    """Token from full-vocabulary probs float32[B, V]: watermarked where
    ``use_watermark`` else a plain inverse-CDF draw with ``uniform``: int32[B]."""
    index, _ = draw(decoder, jnp.asarray(probs, jnp.float32), None, seeds, uniform, use_watermark)
    return index


def watermarked_token(decoder: decoders.WatermarkDecoder, probs: jax.Array, seeds: jax.Array,
                      uniform: Optional[jax.Array] = None) -> jax.Array:
    """A token drawn from S(P, ζ) over the whole vocabulary (probs float32[B, V]): int32[B] (``uniform``:
    the private uniform of a decoder that samples with private randomness)."""
    return watermark_index(decoder, jnp.asarray(probs, jnp.float32), None, seeds, uniform)


__all__ = ["PURPOSE_ACCEPT", "PURPOSE_DRAFT", "PURPOSE_TARGET", "as_row_keys", "candidate_purpose", "check_rng",
           "draw", "position_seeds", "row_words", "sample", "text_rngs", "true_uniforms", "watermark_index",
           "watermarked_token"]
