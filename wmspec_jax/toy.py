"""A toy draft/target pair with exactly known distributions.

Both models are first-order Markov chains over a small vocabulary: the
next-token distribution depends only on the current token, through a
row-stochastic table ``T[prev, next]`` (the params are ``log T``). They
implement the :mod:`wmspec_jax.lm` protocol with a cache that only tracks
lengths, so the speculative loop runs them exactly like transformers.

:func:`markov_pair` builds a target P and a draft Q with
TV(Q(·|c), P(·|c)) = ``tv`` for *every* context c, so the per-position
acceptance probability of speculative sampling is the constant 1 − tv
(Thm 4.1(b)) and tokens per step follow (1 − α^{K+1}) / (1 − α). Like the
paper's simulated pair (App. C.1), the draft is more peaked than the target.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.lm import LanguageModel


@functools.lru_cache(maxsize=None)
def markov_model(vocab_size: int) -> LanguageModel:
    """LanguageModel of a first-order Markov chain; params = float32[V, V] log T."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")

    def init_cache(batch_size: int, max_length: int):
        del max_length
        return {"lengths": jnp.zeros((batch_size,), jnp.int32)}

    def step(params, cache, tokens, num_new):
        logits = jnp.take(jnp.asarray(params, jnp.float32), jnp.asarray(tokens, jnp.int32), axis=0)
        return logits, {"lengths": cache["lengths"] + jnp.asarray(num_new, jnp.int32)}

    def step_tree(params, cache, tokens, parents, return_hidden=False):
        # a Markov chain's next token depends on the node's own token only
        if return_hidden:
            raise ValueError("a Markov chain has no hidden states")
        return step(params, cache, tokens, 0)[0], None, cache

    def rewind(cache, lengths):
        return {"lengths": jnp.asarray(lengths, jnp.int32)}

    return LanguageModel(
        name=f"markov{vocab_size}",
        vocab_size=vocab_size,
        init_cache=init_cache,
        step=step,
        step_tree=step_tree,
        rewind=rewind,
        cache_lengths=lambda cache: cache["lengths"],
    )


def markov_pair(vocab_size: int = 8, tv: float = 0.3, concentration: float = 1.0, seed: int = 0):
    """Target/draft transition tables with TV(Q(·|c), P(·|c)) = tv for every c.

    P's rows are Dirichlet(concentration) draws. Q moves mass ``tv`` from the
    tokens other than each row's most likely token onto that token
    (proportionally), so Q ≥ 0 needs 1 − max_w P(w|c) ≥ tv; rows failing that
    are redrawn.

    Returns:
      (target_probs float64[V, V], draft_probs float64[V, V]) row-stochastic.
    """
    if not 0.0 <= tv < 1.0:
        raise ValueError(f"tv must be in [0, 1), got {tv}")
    rng = np.random.default_rng(seed)
    p = np.empty((vocab_size, vocab_size))
    for row in range(vocab_size):
        for _ in range(10_000):
            draw = rng.dirichlet(np.full(vocab_size, concentration))
            if 1.0 - draw.max() >= tv + 1e-9 and draw.min() > 1e-6:
                break
        else:
            raise ValueError(f"could not draw a row with 1 - max P >= tv={tv}; lower tv or raise concentration")
        p[row] = draw
    q = p.copy()
    top = p.argmax(axis=1)
    for row in range(vocab_size):
        others = np.arange(vocab_size) != top[row]
        q[row, others] -= tv * p[row, others] / p[row, others].sum()
        q[row, top[row]] += tv
    return p, q


def log_table(probs: np.ndarray) -> jax.Array:
    """Params (float32 log T) of :func:`markov_model` from a probability table."""
    with np.errstate(divide="ignore"):
        return jnp.asarray(np.log(probs), jnp.float32)


def sequence_probs(probs: np.ndarray, last_prompt_token: int, length: int) -> np.ndarray:
    """Exact joint distribution of the next ``length`` tokens: float64[V]*length."""
    probs = np.asarray(probs, np.float64)
    joint = probs[last_prompt_token]
    for _ in range(length - 1):
        # joint[..., a] * T[a, b] -> joint[..., a, b]
        joint = joint[..., None] * probs.reshape((1,) * (joint.ndim - 1) + probs.shape)
    return joint


__all__ = ["log_table", "markov_model", "markov_pair", "sequence_probs"]
