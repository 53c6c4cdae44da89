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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax import decoders, prf

# purposes of true-random uniforms at one position
PURPOSE_DRAFT = 0
PURPOSE_ACCEPT = 1
PURPOSE_TARGET = 2


def as_row_keys(rng, batch_size: int) -> jax.Array:
    """Per-row true-randomness key words, uint32[B, 2], from ``jax.random`` keys.

    ``rng`` is one key (``jax.random.key(seed)`` or legacy ``PRNGKey`` data),
    split per row as ``fold_in(rng, row)``, or already [B] keys. Pass [B] keys
    when a row's output must not depend on its index in the batch. The words
    are drawn once with ``jax.random.bits``; inside the loop they are expanded
    with the package's cheap counter hash (a threefry call per position would
    triple the loop's compile time for no statistical gain).
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
    if keys.ndim == 0:
        keys = jax.vmap(lambda i: jax.random.fold_in(keys, i))(jnp.arange(batch_size))
    if keys.shape != (batch_size,):
        raise ValueError(f"rng must be one key or {batch_size} keys, got shape {keys.shape}")
    return jax.vmap(lambda k: jax.random.bits(k, (2,), jnp.uint32))(keys)


def true_uniforms(row_words: jax.Array, positions: jax.Array, purpose: int) -> jax.Array:
    """U(0, 1) per row from (row key words, position, purpose): float32[B]."""
    counter = jnp.stack([positions.astype(jnp.int32), jnp.full_like(positions, purpose, jnp.int32)], axis=-1)
    return prf.position_uniforms(prf.context_seeds(row_words, counter))


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


def watermarked_token(decoder: decoders.WatermarkDecoder, probs: jax.Array, seeds: jax.Array) -> jax.Array:
    """A token drawn from S(P, ζ) as a deterministic function of ζ.

    Gumbel-max (Eq. 2) is a point mass; SynthID (Eq. 3-4) is sampled by
    inverse CDF with the stream's per-position uniform (independent of its
    g-values), so the token is a function of the key and the context alone.

    Args:
      decoder: static decoder description.
      probs: float32[B, V] the (processed) distribution P, Q or the residual.
      seeds: uint32[B, 2] from :func:`position_seeds`.

    Returns:
      int32[B].
    """
    vocab = probs.shape[-1]
    if decoder.kind == decoders.GUMBEL:
        return decoders.gumbel_max_token(jnp.log(probs), prf.vocab_uniforms(seeds, vocab))
    g = prf.vocab_gbits(seeds, vocab, decoder.num_layers)
    return decoders.sample_token(decoders.tournament(probs, g), prf.position_uniforms(seeds))


def sample(
    decoder: decoders.WatermarkDecoder,
    probs: jax.Array,
    seeds: jax.Array,
    uniform: jax.Array,
    use_watermark: jax.Array,
) -> jax.Array:
    """Watermarked token where ``use_watermark`` else a plain inverse-CDF draw
    with the true-random ``uniform``: int32[B]."""
    plain = decoders.sample_token(probs, uniform)
    return jnp.where(use_watermark, watermarked_token(decoder, probs, seeds), plain)
