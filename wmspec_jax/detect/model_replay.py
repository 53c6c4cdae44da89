"""What a loaded pair says of given texts: the inputs of model-assisted detection.

:func:`token_probs` runs one batched forward pass per model over prompt + text (per chunk of
``batch_size`` texts), turns the logits into the distributions the decoder sampled from — temperature
and top-k applied exactly as the generation loop applies them (:func:`wmspec_jax.candidates.process`),
P and Q alike — and hands them to :func:`wmspec_jax.detect.token_probs.token_probs_from_distributions`,
which keeps per position what the detectors need (the emitted token's P, Q and residual probability,
the rejection probability at the acceptance knots, the collision sums, KGW's spike entropy). The result
depends on the texts and the models only, not on a key: it is computed once per text and serves every
key it is scored under.

The target's distribution at position t is the one generation verified there: the target conditioned
on the text's first t tokens (LOGPPL's terms are the same forward at temperature 1,
:func:`wmspec_jax.lab.runs.log_perplexity`). A plain draft's Q_t is likewise the draft conditioned on
those tokens, wherever t falls in a step. A draft that reads the target's hidden states
(``FeatureDraftModel``) reads the target's state of every earlier position for the first draft of a
step, but its own estimates for the later ones (the target has not seen them yet): with the
generator's K (``lookahead``) the helper computes all K variants, as generation did — the first from
the teacher-forced forward, variant s (the (s + 1)-th draft of a step starting at position n) by
rolling the draft's cache back to n and feeding the s tokens that follow with its own features
(:meth:`wmspec_jax.lm.FeatureDraftModel.draft_next`), one scan over n per chunk. The detector picks
the variant from the posterior state of the step (:func:`wmspec_jax.detect.draft_routes.draft_posterior`).
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import candidates
from wmspec_jax.detect import token_probs as tprobs
from wmspec_jax.models.pairs import ModelPair


@functools.partial(jax.jit, static_argnames=("target", "draft", "temperature", "draft_temperature", "top_k",
                                             "variants"))
def _distributions(target, draft, target_params, draft_params, tokens, temperature, draft_temperature, top_k,
                   variants):
    """(P [B, T, V], Q [B, T, S, V] or None) float32: entry t is the distribution of token t (entry 0 and
    entries no step can reach: a uniform filler). ``tokens`` carry ``variants`` padding tokens at the end."""
    bsz, width = tokens.shape
    length = width - variants
    vocab = target.vocab_size
    num = jnp.full((bsz,), length, jnp.int32)
    text = tokens[:, :length]
    reads_features = draft is not None and draft.uses_target_features
    if reads_features:
        logits, hidden, _ = target.step_hidden(target_params, target.init_cache(bsz, length), text, num)
    else:
        logits, _ = target.step(target_params, target.init_cache(bsz, length), text, num)
    filler = jnp.full((bsz, 1, vocab), 1.0 / vocab, jnp.float32)

    def dense(x, temperature=temperature):
        return candidates.to_dense(candidates.from_logits(x, temperature, top_k), vocab)

    def draft_dense(x):  # Q at the draft's own temperature (Setting.draft_temperature)
        return dense(x, draft_temperature)

    p = jnp.concatenate([filler, dense(logits[:, :-1])], axis=1)
    if draft is None:
        return p, None
    draft_cache = draft.init_cache(bsz, width)
    if not reads_features:
        draft_logits = draft.step(draft_params, draft_cache, text, num)[0]
        return p, jnp.concatenate([filler, draft_dense(draft_logits[:, :-1])], axis=1)[:, :, None]
    features = jnp.concatenate([jnp.zeros_like(hidden[:, :1]), hidden[:, :-1]], axis=1).astype(jnp.float32)
    draft_logits, draft_hidden, draft_cache = draft.step(draft_params, draft_cache, text, num, features)
    first = jnp.concatenate([filler, draft_dense(draft_logits[:, :-1])], axis=1)
    if variants == 1:
        return p, first[:, :, None]

    def later_drafts(n):  # the step starting at position n: its drafts 2..S, fed with the draft's own features
        cache = draft.rewind(draft_cache, jnp.full((bsz,), n, jnp.int32))
        carry = jax.lax.dynamic_slice_in_dim(draft_hidden, n - 1, 1, axis=1)
        out = []
        for s in range(variants - 1):
            token = jax.lax.dynamic_slice_in_dim(tokens, n + s, 1, axis=1)
            step_logits, carry, cache = draft.step(draft_params, cache, token, jnp.ones((bsz,), jnp.int32), carry)
            out.append(draft_dense(step_logits[:, 0]))
        return jnp.stack(out, axis=1)  # [B, S − 1, V]: variant s + 1 at position n + s + 1

    later = jax.lax.map(later_drafts, jnp.arange(1, length, dtype=jnp.int32))  # [T − 1, B, S − 1, V]
    q = [first]
    for s in range(variants - 1):
        # variant s + 1 at position t comes from the step starting at n = t − s − 1 (map index n − 1)
        shifted = jnp.moveaxis(later[: length - s - 2, :, s], 0, 1)
        q.append(jnp.concatenate([jnp.broadcast_to(filler, (bsz, s + 2, vocab)), shifted], axis=1))
    return p, jnp.stack(q, axis=2)


def token_probs(pair: ModelPair, tokens, *, lengths=None, starts=None, temperature: float = 1.0,
                draft_temperature: Optional[float] = None, top_k: Optional[int] = None,
                lookahead: Optional[int] = None, with_draft: bool = True,
                spike_modulus: Optional[float] = None, batch_size: int = 4) -> tprobs.TokenProbs:
    """Per-position model probabilities of texts (module doc), for :mod:`wmspec_jax.detect.model_assisted`.

    Args:
      pair: a loaded :class:`wmspec_jax.models.pairs.ModelPair`.
      tokens: int[B, L] prompt + text ids, right-padded (the statistics' tokens).
      lengths: int[B] valid lengths (default L); starts: int or int[B] the prompt lengths (first
        described position; default 1).
      temperature, top_k: as generation used them (``SpeculativeConfig``).
      draft_temperature: Q's own temperature, as generation used it (None: ``temperature``).
      lookahead: the generator's K: a draft that reads the target's hidden states gets its K in-step
        variants (module doc); None (or a draft that reads tokens only): one variant.
      with_draft: also run the draft (speculative methods); False for the basic watermark.
      spike_modulus: KGW's z (:func:`wmspec_jax.detect.model_assisted.spike_modulus`), or None.
      batch_size: texts per forward pass (memory: float32 [batch_size, L, (1 + S), V] arrays).

    Returns:
      :class:`wmspec_jax.detect.token_probs.TokenProbs` with [B, L] fields (draft-side fields
      [B, L, S]; NaN outside ``[starts, lengths)``).
    """
    tok = np.asarray(tokens)
    if tok.ndim != 2 or not np.issubdtype(tok.dtype, np.integer):
        raise TypeError(f"tokens must be int[B, L], got {tok.dtype}{list(tok.shape)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    for name, value in (("temperature", temperature), ("draft_temperature", draft_temperature)):
        if value is not None and not float(value) >= 0.0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    draft_temperature = float(temperature if draft_temperature is None else draft_temperature)
    if lookahead is not None and (isinstance(lookahead, bool) or not isinstance(lookahead, (int, np.integer))
                                  or lookahead < 1):
        raise ValueError(f"lookahead must be the generator's K (an int >= 1) or None, got {lookahead!r}")
    bsz, length = tok.shape
    lens = np.broadcast_to(np.full(bsz, length) if lengths is None else np.asarray(lengths), (bsz,))
    st = np.broadcast_to(np.full(bsz, 1) if starts is None else np.asarray(starts), (bsz,))
    draft = pair.draft if with_draft else None
    draft_params = pair.draft_params if with_draft else None
    variants = int(lookahead) if draft is not None and draft.uses_target_features and lookahead else 1
    parts = []
    for lo in range(0, bsz, batch_size):
        rows = slice(lo, min(lo + batch_size, bsz))
        chunk = np.zeros((batch_size, length + variants), np.int32)  # one compiled shape for every chunk
        take = tok[rows]
        chunk[: take.shape[0], :length] = np.where((take >= 0) & (take < pair.vocab_size), take, 0)
        p, q = _distributions(pair.target, draft, pair.target_params, draft_params, jnp.asarray(chunk),
                              float(temperature), draft_temperature, None if top_k is None else int(top_k), variants)
        n = take.shape[0]
        parts.append(tprobs.token_probs_from_distributions(
            take, np.asarray(p)[:n], None if q is None else np.asarray(q)[:n], lengths=lens[rows], starts=st[rows],
            vocab_size=pair.vocab_size, spike_modulus=spike_modulus))
    return _concat(parts)


def _concat(parts) -> tprobs.TokenProbs:
    first = parts[0]
    fields = {}
    for name in tprobs.TokenProbs._fields:
        value = getattr(first, name)
        if name == "spike_modulus" or value is None:
            fields[name] = value
        else:
            fields[name] = np.concatenate([getattr(p, name) for p in parts])
    return tprobs.TokenProbs(**fields)


__all__ = ["token_probs"]
