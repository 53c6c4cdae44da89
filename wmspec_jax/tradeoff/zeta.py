"""The decoders of the trade-off study and the ζ they are integrated over.

In the trade-off curves ζ is an integration variable. It is drawn with the
package's own counter-based PRF (:mod:`wmspec_jax.prf`, ``wmspec-prf-v1``)
rather than ``jax.random``: sample i's ζ is the PRF's value at the context
(i,) under stream keys derived from the run's seed (:func:`run_keys`). So

* ζ is a pure function of (seed, i): the estimate does not depend on the
  chunk size, the block size or the number of devices (bit for bit);
* the g-values and uniforms are exactly the kind generation uses (same lanes,
  24-bit uniforms in (0, 1), 32 g-layers per hash);
* it compiles in a fraction of a second (threefry2x32 took 2-5 s per chunk
  function on the 2-core CPU this was written on).

Streams: ``DRAFT`` holds the ζ shared by draft and target, ``TARGET`` the
independent ξ of Google's residual (and ζ^T of Alg. 1), ``ACCEPT`` the
acceptance uniforms of Alg. 1.

Decoders are :class:`wmspec_jax.decoders.WatermarkDecoder` (the same
description generation uses), batched over samples here:

* ``WatermarkDecoder(GUMBEL)`` — Gumbel-max, Eq. (2); ζ = V uniforms in (0, 1).
* ``WatermarkDecoder(SYNTHID, m)`` — SynthID tournament with m layers, Eq. (3)-(4);
  ζ = m·V Bernoulli(1/2) g-values, packed 32 layers per uint32 word and
  unpacked one layer at a time (memory O(V) per sample, not O(m·V)).
* ``WatermarkDecoder(SYNTHID_LIMIT, m)`` — SynthID m = ∞ as App. C.1 approximates it:
  m layers, then the one-hot of the most likely token (a degenerate decoder,
  unbiased up to the finite-m approximation).

Draft and target that "share ζ" use the same draw; Google's residual uses an
independent draw ξ of the same decoder (App. C.2).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import decoders as _decoders
from wmspec_jax import prf

# One decoder description for generation, detection and the curves.
GUMBEL, SYNTHID, SYNTHID_LIMIT = _decoders.GUMBEL, _decoders.SYNTHID, _decoders.SYNTHID_LIMIT
KINDS = _decoders.DECODER_KINDS
WatermarkDecoder = _decoders.WatermarkDecoder
gumbel = _decoders.gumbel
synthid = _decoders.synthid_decoder
synthid_limit = _decoders.synthid_limit_decoder


def run_keys(seed) -> np.ndarray:
    """Stream key words uint32[3, 2] (DRAFT, TARGET, ACCEPT) of a Monte Carlo run.

    Args:
      seed: a non-negative int (or an existing uint32[3, 2] array, returned as is).
    """
    if isinstance(seed, (np.ndarray, jax.Array)) and np.shape(seed) == (prf.NUM_STREAMS, 2):
        return np.asarray(seed, np.uint32)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return prf.stream_keys(f"wmspec_jax.tradeoff/monte-carlo/{int(seed)}")


def seeds(stream_key: jax.Array, index: jax.Array) -> jax.Array:
    """PRF position seeds uint32[n, 2] of samples ``index`` (uint32[n]) in one stream."""
    return prf.context_seeds(stream_key, jnp.asarray(index, jnp.uint32)[:, None])


def draw(decoder: WatermarkDecoder, stream_key: jax.Array, index: jax.Array, vocab_size: int) -> jax.Array:
    """ζ of the samples ``index`` in one stream.

    Args:
      stream_key: uint32[2], one row of :func:`run_keys`.
      index: uint32[n] global sample indices.

    Returns:
      Gumbel: float32[n, V] uniforms in (0, 1) (:func:`wmspec_jax.prf.vocab_uniforms`).
      SynthID kinds: uint32[n, V, W] packed g-values, bit (l mod 32) of word l // 32 is
      g_{l, w}; W = ceil(m / 32) (the layout of :func:`wmspec_jax.prf.token_gbits`).
    """
    return decoder.vocab_zeta(seeds(stream_key, index), vocab_size)


def unpack_gvalues(words: jax.Array, num_layers: int) -> jax.Array:
    """float32[..., m, V] g-values (layer 0 first) from uint32[..., V, W] words —
    the layout :func:`wmspec_jax.decoders.synthid` takes."""
    layers = jnp.arange(num_layers)
    w = jnp.take(words, layers // 32, axis=-1)  # [..., V, m]
    g = (w >> (layers % 32).astype(jnp.uint32)) & jnp.uint32(1)
    return jnp.swapaxes(g, -1, -2).astype(jnp.float32)


def decode(decoder: WatermarkDecoder, probs: jax.Array, zeta: jax.Array) -> jax.Array:
    """S(P, ζ) for a batch of ζ: float32[n, V].

    Args:
      probs: float[V] (or float[n, V]) a distribution; zero entries stay zero.
      zeta: a batch from :func:`draw`.
    """
    return decoder.apply(probs, zeta)


def token(decoder: WatermarkDecoder, probs: jax.Array, zeta: jax.Array) -> jax.Array:
    """The token of a degenerate decoder: int32[n] with S(P, ζ) = δ_token.

    Raises:
      ValueError: for finite-m SynthID (not degenerate).
    """
    return decoder.point(probs, zeta)


__all__ = [
    "GUMBEL",
    "SYNTHID",
    "SYNTHID_LIMIT",
    "WatermarkDecoder",
    "run_keys",
    "seeds",
    "gumbel",
    "synthid",
    "synthid_limit",
    "draw",
    "decode",
    "token",
    "unpack_gvalues",
]
