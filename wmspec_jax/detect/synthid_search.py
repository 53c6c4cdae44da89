"""SynthID's key-only search over the sibling streams of a multi-draft text.

Under multi-draft sampling (``docs/multidraft.md``) an accepted draft token
of sibling c carries the watermark of the draft stream's sibling c; a text
without its ``candidate`` records does not say which. Gumbel-max's search
takes max_c y_c^(1/w_c) of the n sibling uniforms
(:func:`~wmspec_jax.detect.streams.gumbel_statistics`). SynthID's g-values
are bits; here each sibling's count is first made an exact uniform, the
same weighted search is taken, and the result is mapped back onto one
stream's null law, so that every SynthID detector (the mean tests with their
exact p-values, the Bayesian ones) scores searched statistics as it scores
one chain's.

Per scored position, with m layers, n siblings and weights w_c (Σ w_c = 1;
:func:`~wmspec_jax.detect.streams.check_sibling_weights`):

1. S_c = Σ_l g^D_{t,c,l}, independent Binomial(m, ½) counts under H0 (B: their CDF).
2. V_c = B(S_c − 1) + W_c · P(S_c), with W_c uniform: each V_c ~ U(0, 1)
   exactly under H0 (the randomised probability integral transform of a
   discrete variable), independent across c.
3. Y = max_c V_c^(1/w_c): P(Y ≤ x) = Π_c x^(w_c) = x, so Y ~ U(0, 1).
4. S' = B^{-1}(Y), the smallest k with B(k) ≥ Y: Binomial(m, ½) under H0.
5. The searched g-values are S' ones placed on a uniformly random subset of
   the m layers (the layers ranked by m more uniforms). A Binomial(m, ½)
   count spread uniformly is m independent Bernoulli(½) bits: under H0 the
   searched g^D_t has exactly the law of one stream's.

The W_c and the ranking values are hashes of the position's acceptance-stream
seeds on a lane that generation never draws (:attr:`wmspec_jax.prf.Lane.SEARCH`):
independent of every g-value under H0, and fixed by key and text, so a score
is reproducible. Under H1 the watermarked sibling raises its V_c and so S'.
Exact up to the float32 rounding of the tables and uniforms (upper tails
are carried as survival probabilities, so they keep their relative
precision). The layer order of the searched bits carries no information
(step 5): a detector that weighs layers differently sees only their count.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import jax.numpy as jnp
import numpy as np

from wmspec_jax import prf


@functools.lru_cache(maxsize=None)
def tables(num_layers: int) -> tuple:
    """float32[m + 2] CDF B(k) and survival function P(count > k) of a Binomial(m, ½) count, at
    k = −1..m (index k + 1); exact integer sums, rounded once."""
    counts = [math.comb(num_layers, j) for j in range(num_layers + 1)]
    k = range(-1, num_layers + 1)
    cdf = np.array([sum(counts[: j + 1]) for j in k], np.float64) / 2.0**num_layers
    sf = np.array([sum(counts[j + 1:]) for j in k], np.float64) / 2.0**num_layers
    return np.asarray(cdf, np.float32), np.asarray(sf, np.float32)


def searched_gbits(sibling_gbits: jnp.ndarray, accept_seeds: jnp.ndarray,
                   weights: Optional[tuple] = None) -> jnp.ndarray:
    """The searched draft g-values of each position (module doc).

    Args:
      sibling_gbits: uint8[B, L, n, m] g-values of the token in each sibling's draft stream.
      accept_seeds: uint32[B, L, 2] the position's acceptance-stream seeds (sibling 0).
      weights: n weights summing to 1, or None for equal ones
        (:func:`~wmspec_jax.detect.streams.check_sibling_weights`).

    Returns:
      uint8[B, L, m]: m independent Bernoulli(½) bits under H0.
    """
    n, m = sibling_gbits.shape[-2:]
    cdf, sf = (jnp.asarray(t) for t in tables(int(m)))
    counts = jnp.sum(sibling_gbits.astype(jnp.int32), axis=-1)  # S_c, [B, L, n]
    draws = prf.hash_values(accept_seeds[..., None, :], jnp.arange(n + m, dtype=jnp.uint32), prf.Lane.SEARCH)
    w = prf.to_uniform(draws[..., :n])
    mass = cdf[counts + 1] - cdf[counts]
    mass = jnp.where(counts <= m // 2, mass, sf[counts] - sf[counts + 1])  # P(S = S_c), the accurate side
    v = cdf[counts] + w * mass
    v_sf = sf[counts + 1] + (1.0 - w) * mass  # 1 - V_c, kept small and exact in the upper tail
    log_v = jnp.where(v <= 0.5, jnp.log(jnp.maximum(v, 1e-37)), jnp.log1p(-v_sf))
    exponents = jnp.full((n,), float(n), jnp.float32) if weights is None else \
        jnp.asarray([1.0 / x for x in weights], jnp.float32)
    log_y = jnp.max(log_v * exponents, axis=-1)  # log Y
    y, y_sf = jnp.exp(log_y), -jnp.expm1(log_y)
    # S' = smallest k with B(k) >= Y, i.e. with P(count > k) <= 1 - Y
    low = jnp.sum(cdf[1:] < y[..., None], axis=-1)
    high = jnp.sum(sf[1:] > y_sf[..., None], axis=-1)
    count = jnp.where(y <= 0.5, low, high)
    ranks = jnp.argsort(jnp.argsort(draws[..., n:], axis=-1), axis=-1)
    return (ranks < count[..., None]).astype(jnp.uint8)


__all__ = ["searched_gbits", "tables"]
