"""The edit-robust test of texts generated under a key sequence (Kuditipudi et al. 2023, "Robust
distortion-free watermarks for language models", and their reference code; :mod:`wmspec_jax.key_sequence`).

A text y_1..y_m of a key-sequence generation was drawn with ξ_{(s + i) mod n} for an offset s the
detector does not know, and may since have lost, gained or changed tokens. The test aligns y with the
key by a Levenshtein distance whose substitution cost is the watermark's evidence,

  A[i][j] = min(A[i−1][j] + γ, A[i][j−1] + γ, A[i−1][j−1] + c(y_i, ξ_{(s + j − 1) mod n})),
  A[i][0] = iγ, A[0][j] = jγ,

with c(y, ξ_l) = log(1 − v(y, ξ_l)) ≤ 0 (Kuditipudi et al.'s EXP-edit cost; v is the token's
statistic at key element l, U(0, 1) when the text does not depend on the key), and takes
φ(y, ξ) = min_s A[m][m] over the n offsets (the window k = m, as in the reference demo). Small φ is
evidence of the watermark. The p-value is their permutation test: φ under T further keys ξ^(1..T),
p = (1 + #{t : φ(y, ξ^(t)) ≤ φ(y, ξ)}) / (T + 1). Under H0 the text is independent of all T + 1 keys,
whose φ's are then exchangeable, so P(p ≤ α) ≤ α exactly (p takes values in multiples of 1 / (T + 1)).

Departures, ours:
* The T null keys are derived from the secret (:func:`null_stream_keys`), not drawn from a generator
  at detection time as in the reference code: a verdict is a function of key and tokens, which no
  re-submission can re-draw.
* Texts of speculative sampling carry two watermarked streams. v combines the draft and target
  streams' values r^D, r^T as max((r^D)^(1/w), (r^T)^(1/(1−w))) with weight w (0: the target stream
  alone, as in the paper's ``standard`` / ``basic``; 1/2 by default for methods that watermark both),
  which is again U(0, 1) when the text does not depend on the key. Multi-draft texts read the draft
  stream's weighted search over the siblings' streams (:func:`wmspec_jax.detect.gumbel_statistics`).
* The statistic of a decoder of the Gumbel-max family is its own ``token_statistic`` (for Gumbel-max,
  ξ_l's uniform of the token: the reference's EXP cost).

Cost: O((T + 1) n m²) per text, as in the reference; the DP runs in JAX along anti-diagonals, all offsets
and texts of a batch at once, one key at a time (:func:`_alignment`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import decoders, key_sequence, methods, prf
from wmspec_jax.detect.provenance import Provenance
from wmspec_jax.detect.streams_compute import (_check_siblings, _sibling_statistic, _texts_of, _uniform_statistic,
                                               check_sibling_weights, statistics_provenance)
from wmspec_jax.detect.streams_types import _check_keys, check_texts

NULL_DOMAIN = 0x45444954
"""Domain separation of the permutation test's null keys (the bytes "EDIT")."""

DEFAULT_NULL_KEYS = 99
"""T: the smallest p-value is 1 / (T + 1) = 0.01 (the reference demo uses 100)."""

DEFAULT_GAMMA = 0.0
"""γ of the reference's EXP-edit experiments."""

MAX_NULL_KEYS = 9999

WIDTH_STEP = 32
"""Texts are padded to a multiple of this many tokens (one compiled program per width step)."""


class EditTestResult(NamedTuple):
    """The edit test of a batch of texts.

    Attributes:
      pvalue: float64[B] permutation p-values (1.0 for a text with no token).
      statistic: float32[B] φ(y, ξ) under the secret's key (smaller: more evidence).
      null_statistics: float32[B, T] φ under the T null keys.
      offset: int32[B] the offset s at which the secret's key aligns best.
      num_scored: int32[B] tokens m of each text.
      provenance: of the statistics (key fingerprint, never the key).
    """

    pvalue: np.ndarray
    statistic: np.ndarray
    null_statistics: np.ndarray
    offset: np.ndarray
    num_scored: np.ndarray
    provenance: Provenance


def null_stream_keys(keys: jax.Array, num_null: int) -> jax.Array:
    """uint32[T + 1, B, 3, 2]: the texts' stream keys (index 0) and T null keys derived from them."""
    keys = jnp.asarray(keys, jnp.uint32)
    t = jnp.arange(1, num_null + 1, dtype=jnp.int32).reshape((num_null,) + (1,) * (keys.ndim - 1) + (1,))
    null = prf.context_seeds(keys[None] ^ jnp.uint32(NULL_DOMAIN), jnp.broadcast_to(t, (num_null,) + keys.shape[:-1] + (1,)))
    return jnp.concatenate([keys[None], null], axis=0)


def check_draft_weight(draft_weight) -> float:
    """w ∈ [0, 1] as a float."""
    w = float(draft_weight)
    if not 0.0 <= w <= 1.0:
        raise ValueError(f"draft_weight must lie in [0, 1], got {draft_weight!r}")
    return w


def method_draft_weight(method: str) -> float:
    """The default w of a generation method: 0 when only the target stream watermarks, 1 when only the
    draft stream does, 1/2 when both do."""
    if method not in methods.METHODS:
        raise ValueError(f"method must be one of {sorted(methods.METHODS)}, got {method!r}")
    spec = methods.METHODS[method]
    draft, target = spec.watermark_draft, spec.watermark_target or spec.watermark_residual
    return 0.5 if draft and target else (1.0 if draft else 0.0)


def _combined(r_draft, r_target, w: float):
    """v = max((r^D)^(1/w), (r^T)^(1/(1−w))): U(0, 1) when r^D, r^T are independent U(0, 1)."""
    if w == 0.0:
        return r_target
    if w == 1.0:
        return r_draft
    log_v = jnp.maximum(jnp.log(r_draft) / jnp.float32(w), jnp.log(r_target) / jnp.float32(1.0 - w))
    return jnp.exp(log_v)


def _costs(tokens, all_keys, n, statistic, draft_statistic, w, siblings, weights, version, vocab_size):
    """c(y_i, ξ_l) = log(1 − v): float32[T + 1, B, L, n] for text tokens int32[B, L]."""
    index = jnp.arange(n, dtype=jnp.int32)

    def stream_seeds(stream):  # [T + 1, B, 1, n, 2]
        return key_sequence.sequence_seeds(all_keys[:, :, None, stream, None, :], index[None, None, None, :])

    toks = tokens[None, :, :, None]
    r_target = _uniform_statistic(stream_seeds(prf.Stream.TARGET), toks, statistic, version, vocab_size)
    r_draft = r_target
    if w > 0.0:
        seeds = stream_seeds(prf.Stream.DRAFT)
        r_draft = (_sibling_statistic(seeds, toks, draft_statistic, siblings, None, weights, version, vocab_size)
                   if siblings > 1 else _uniform_statistic(seeds, toks, draft_statistic, version, vocab_size))
    v = jnp.clip(_combined(r_draft, r_target, w), 0.0, 1.0 - 2.0**-24)
    return jnp.log1p(-v)


def _alignment(costs, lengths, gamma):
    """min over offsets s of A[m][m] and its argmin: float32[B], int32[B] for one key's costs [B, L, n]
    (c(y_i, ξ_l) at [b, i, l]) and text lengths m int32[B].

    The recurrence runs along anti-diagonals d = i + j (cell (i, j) needs cells of diagonals d − 1 and
    d − 2 only), every offset at once: state [B, L + 1, n] over (row i, offset s), elementwise per step
    (no running minimum along a row), small enough to stay in cache for one key at a time. Cell (i, j)
    of offset s costs c(y_i, ξ_{(s + j − 1) mod n}) = R[i − 1, (s + d − 1) mod n] with R[i, t] =
    c[i, (t − i − 1) mod n], so each step reads one contiguous slice of R."""
    bsz, length, n = costs.shape
    rows = jnp.arange(length + 1)[:, None]  # i
    rolled = jnp.mod(jnp.arange(n)[None, :] - jnp.arange(length)[:, None] - 1, n)
    r = jnp.take_along_axis(costs, jnp.broadcast_to(rolled, costs.shape), axis=-1)
    r2 = jnp.concatenate([r, r], axis=-1)  # [B, L, 2n]: a window of n from any start
    inf = jnp.float32(jnp.inf)
    shape = (bsz, length + 1, n)
    d0 = jnp.broadcast_to(jnp.where(rows == 0, 0.0, inf), shape)  # A[0][0]
    d1 = jnp.broadcast_to(jnp.where(rows <= 1, gamma, inf), shape)  # A[0][1], A[1][0]
    best = jnp.broadcast_to(jnp.where((lengths == 0)[:, None], 0.0, inf), (bsz, n))
    pad = jnp.full((bsz, 1, n), inf)

    def step(carry, d):
        two_back, one_back, best = carry
        c = jax.lax.dynamic_slice_in_dim(r2, jnp.mod(d - 1, n), n, axis=-1)
        up = jnp.concatenate([pad, one_back[:, :-1]], axis=1)  # A[i − 1][j]
        diagonal = jnp.concatenate([pad, two_back[:, :-1] + c], axis=1)  # A[i − 1][j − 1] + cost
        cur = jnp.minimum(jnp.minimum(up, one_back) + gamma, diagonal)  # one_back at i: A[i][j − 1]
        j = d - rows
        cur = jnp.where((rows == 0) | (j == 0), d * gamma, cur)
        cur = jnp.where((j < 0) | (j > length), inf, cur)
        at_end = jnp.take_along_axis(cur, jnp.broadcast_to(lengths[:, None, None], (bsz, 1, n)), axis=1)[:, 0]
        best = jnp.where((2 * lengths == d)[:, None], at_end, best)
        return (one_back, cur, best), None

    (_, _, best), _ = jax.lax.scan(step, (d0, d1, best), jnp.arange(2, 2 * length + 1, dtype=jnp.int32))
    return best.min(-1), best.argmin(-1).astype(jnp.int32)


_STATIC_ARGNAMES = ("n", "num_null", "statistic", "draft_statistic", "w", "siblings", "weights", "version",
                    "vocab_size")


@functools.partial(jax.jit, static_argnames=_STATIC_ARGNAMES)
def _edit_statistics(tokens, lengths, keys, gamma, *, n, num_null, statistic, draft_statistic, w, siblings,
                     weights, version, vocab_size):
    def one_key(stream_keys):  # [B, 3, 2]: one key's costs and alignment at a time
        costs = _costs(tokens, stream_keys[None], n, statistic, draft_statistic, w, siblings, weights, version,
                       vocab_size)[0]
        return _alignment(costs, lengths, jnp.float32(gamma))

    return jax.lax.map(one_key, null_stream_keys(keys, num_null))


def _text_rows(tokens, lengths, starts, vocab_size):
    """Each text's scored tokens left-aligned: int32[B, L'] and their counts int32[B]."""
    tokens, lengths, starts = _texts_of(tokens, lengths, starts)
    starts = 0 if starts is None else starts
    tok, lens, st = check_texts(tokens, lengths, starts, vocab_size=vocab_size, context_width=1)
    counts = np.maximum(lens - st, 0).astype(np.int32)
    width = max(int(counts.max(initial=0)), 1)
    idx = np.minimum(st[:, None] + np.arange(width)[None], tok.shape[1] - 1)
    rows = np.where(np.arange(width)[None] < counts[:, None], np.take_along_axis(tok, idx, 1), 0)
    return rows.astype(np.int32), counts


def edit_test(tokens, key, *, key_length: int, vocab_size: int, lengths=None, starts=None, decoder=None,
              draft_decoder=None, method: str = "pseudorandom", draft_weight: Optional[float] = None,
              gamma: float = DEFAULT_GAMMA, null_keys: int = DEFAULT_NULL_KEYS, siblings: int = 1,
              sibling_weights=None, prf_version: str = prf.PRF_VERSION, batch_size: int = 8) -> EditTestResult:
    """Kuditipudi et al.'s edit-robust permutation test of texts generated under a key sequence.

    Args:
      tokens: int[B, L] token ids, or a :class:`GenerationRecords` batch (its lengths and starts too).
      key: the keys generation used (as :func:`wmspec_jax.detect.gumbel_statistics` takes them).
      key_length: n of the generation's ``SpeculativeConfig.key_sequence``.
      vocab_size: V (every scored token must lie in [0, V)).
      lengths: int[B] valid lengths (default L); starts: first scored position (default 0: the text
        without its prompt).
      decoder, draft_decoder: the generation's decoders (Gumbel-max family; default Gumbel-max).
      method: the generation method (sets the default ``draft_weight``: :func:`method_draft_weight`).
      draft_weight: w ∈ [0, 1] of the draft stream in v (module doc); None: the method's default.
      gamma: γ >= 0, the cost of an inserted or deleted token (finite).
      null_keys: T >= 1 null keys of the permutation test.
      siblings, sibling_weights: multi-draft texts (as for :func:`wmspec_jax.detect.gumbel_statistics`).
      prf_version: the PRF version the texts were generated with.
      batch_size: texts per compiled call (memory: a few batch_size · n · L floats per key; L rounded up
        to a multiple of :data:`WIDTH_STEP`).

    Returns:
      :class:`EditTestResult`.
    """
    n = key_sequence.check_key_length(key_length)
    if n == 0:
        raise ValueError("key_length must be the generation's key_sequence n >= 1 (texts keyed by context are "
                         "scored by the other detectors)")
    decoder = decoders.gumbel() if decoder is None else decoder
    draft_decoder = decoder if draft_decoder is None else draft_decoder
    for d in (decoder, draft_decoder):
        if d.family != decoders.GUMBEL or d.target_stream_statistic:
            raise ValueError(f"the edit test scores decoders of the Gumbel-max family; {d.label} is not")
    w = method_draft_weight(method) if draft_weight is None else check_draft_weight(draft_weight)
    gamma = float(gamma)
    if not (np.isfinite(gamma) and gamma >= 0.0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    if isinstance(null_keys, bool) or not isinstance(null_keys, (int, np.integer)) or not 1 <= null_keys <= MAX_NULL_KEYS:
        raise ValueError(f"null_keys must be an int in [1, {MAX_NULL_KEYS}], got {null_keys!r}")
    _check_siblings(siblings)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    weights = check_sibling_weights(sibling_weights, int(siblings)) if siblings > 1 else None
    version = prf.check_prf_version(prf_version)
    rows, counts = _text_rows(tokens, lengths, starts, vocab_size)
    keys = _check_keys(key, rows.shape[0])
    static = dict(n=n, num_null=int(null_keys), statistic=decoder.statistic, draft_statistic=draft_decoder.statistic,
                  w=w, siblings=int(siblings), weights=weights, version=version,
                  vocab_size=int(vocab_size) if decoder.statistic_needs_vocab else 0)
    phis, offsets = [], []
    # compiled shapes: rows a power of two up to batch_size, widths a multiple of WIDTH_STEP (padding rows
    # have no token; padded columns lie past A[m][m] and change nothing)
    rows_per_call = min(int(batch_size), 1 << max(rows.shape[0] - 1, 0).bit_length())
    for lo in range(0, rows.shape[0], rows_per_call):
        chunk_rows, chunk_counts = rows[lo:lo + rows_per_call], counts[lo:lo + rows_per_call]
        chunk_keys = keys[lo:lo + rows_per_call]
        pad = rows_per_call - chunk_rows.shape[0]
        width = -(-max(int(chunk_counts.max(initial=0)), 1) // WIDTH_STEP) * WIDTH_STEP
        tokens_in = np.zeros((rows_per_call, width), np.int32)
        tokens_in[: chunk_rows.shape[0], : min(width, chunk_rows.shape[1])] = chunk_rows[:, :width]
        counts_in = np.concatenate([chunk_counts, np.zeros(pad, np.int32)])
        keys_in = jnp.concatenate([chunk_keys, jnp.broadcast_to(chunk_keys[:1], (pad,) + chunk_keys.shape[1:])])
        phi, offset = _edit_statistics(jnp.asarray(tokens_in), jnp.asarray(counts_in), keys_in, gamma, **static)
        phis.append(np.asarray(phi)[:, : chunk_rows.shape[0]])
        offsets.append(np.asarray(offset)[:, : chunk_rows.shape[0]])
    phi = np.concatenate(phis, axis=1) if phis else np.zeros((int(null_keys) + 1, 0), np.float32)
    offset = np.concatenate(offsets, axis=1) if offsets else np.zeros((int(null_keys) + 1, 0), np.int32)
    observed, null = phi[0], phi[1:].T
    pvalue = (1.0 + (null <= observed[:, None]).sum(1)) / (null.shape[1] + 1.0)
    pvalue = np.where(counts > 0, pvalue, 1.0)
    prov = dataclasses.replace(statistics_provenance(key, decoder.statistic, 0, prf.DEFAULT_CONTEXT_WIDTH,
                                                     draft_decoder.statistic, int(siblings), prf_version=version),
                               key_sequence=n)
    return EditTestResult(pvalue, observed, null, offset[0], counts, prov)


__all__ = ["DEFAULT_GAMMA", "DEFAULT_NULL_KEYS", "EditTestResult", "MAX_NULL_KEYS", "NULL_DOMAIN",
           "check_draft_weight", "edit_test", "method_draft_weight", "null_stream_keys"]
