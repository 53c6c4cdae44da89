"""KGW green lists in NumPy: a context's list, the colour of scored tokens, and the NumPy twin of
``WatermarkLogitsProcessor.__call__``. Public face: :mod:`wmspec_jax.interop.hf_kgw`."""

from __future__ import annotations

import numpy as np

from wmspec_jax.interop.hf_kgw._config import (_CHUNK, SELFHASH_CANDIDATES, HFKGWConfig, _check_config,
                                              _check_tokens, _check_vocab, _k)
from wmspec_jax.interop.hf_kgw._mt19937 import _fy_prefix_np, _swap_targets_np, _track_green
from wmspec_jax.interop.hf_kgw._seeding import _selfhash_seed32, mt_seeds


def _green_rows(seeds32: np.ndarray, vocab_size: int, k: int) -> np.ndarray:
    """Green lists in transformers' order for each seed: int64[R, k] (chunked over seeds)."""
    out = np.empty((seeds32.shape[0], k), np.int64)
    chunk = max(1, _CHUNK // k)
    for lo in range(0, seeds32.shape[0], chunk):   # over memory-sized chunks of seeds
        out[lo:lo + chunk] = _fy_prefix_np(_swap_targets_np(seeds32[lo:lo + chunk], vocab_size, k))
    return out


def greenlist(config: HFKGWConfig, context_ids, vocab_size: int) -> np.ndarray:
    """``WatermarkLogitsProcessor._get_greenlist_ids(input_seq)``: int64[k] or int64[B, k].

    Args:
      config: the watermark.
      context_ids: int[L] or int[B, L], L >= 1 (``input_seq``; for selfhash its last token is the
        candidate whose own green list this is).
      vocab_size: V of the model config.
    Returns the ids ``randperm(V)[:k]`` in transformers' order, k = int(V * greenlist_ratio).
    """
    config = _check_config(config)
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    ids = _check_tokens(context_ids, V, "context_ids")
    if ids.ndim > 2:
        raise ValueError(f"context_ids must be int[L] or int[B, L], got shape {ids.shape}")
    seeds = mt_seeds(config, ids.reshape(-1, ids.shape[-1]))
    rows = _green_rows(seeds, V, k)
    return rows[0] if ids.ndim == 1 else rows


def _green_of(seeds32: np.ndarray, tokens: np.ndarray, vocab_size: int, k: int) -> np.ndarray:
    """bool[Q]: tokens[q] in the green list of seeds32[q]; draws once per distinct seed."""
    uniq, inv = np.unique(seeds32, return_inverse=True)
    inv = inv.reshape(-1)
    green = np.zeros(tokens.shape[0], bool)
    chunk = max(1, _CHUNK // k)
    for lo in range(0, uniq.size, chunk):   # over memory-sized chunks of seeds
        j = _swap_targets_np(uniq[lo:lo + chunk], vocab_size, k)
        sel = np.nonzero((inv >= lo) & (inv < lo + chunk))[0]
        green[sel] = _track_green(j, inv[sel] - lo, tokens[sel], k)
    return green


def _positions(config: HFKGWConfig, ids: np.ndarray):
    """Scored positions as transformers' detector sees them, for ids int[B, T].

    Returns (seeds uint32[B, P], tokens int64[B, P], ngrams int64[B, P, n], first int) with
    P = T − context_width (+1 for selfhash), n = context_width + 1 (lefthash) or context_width
    (selfhash), and ``first`` the index in T of the first scored token.
    """
    cw = config.context_width
    self_ = config.seeding_scheme == "selfhash"
    n = cw + 1 - int(self_)
    B, T = ids.shape
    P = max(T - n + 1, 0)
    if P == 0:
        return (np.zeros((B, 0), np.uint32), np.zeros((B, 0), np.int64),
                np.zeros((B, 0, n), np.int64), n - 1)
    ngrams = np.lib.stride_tricks.sliding_window_view(ids, n, axis=1)   # [B, P, n]
    seeds = mt_seeds(config, ngrams if self_ else ngrams[..., :-1])
    return seeds, ngrams[..., -1], ngrams, n - 1


def is_green(config: HFKGWConfig, input_ids, vocab_size: int) -> np.ndarray:
    """Colour of every position transformers' detector scores: bool[B, P].

    Args:
      input_ids: int[B, T] (or int[T]) token ids in [0, V) (strip BOS / prompt beforehand).
    Returns P = T − context_width positions (tokens context_width .. T−1) for lefthash, and
    P = T − context_width + 1 (tokens context_width−1 .. T−1: the window includes the token) for
    selfhash; no repeated-n-gram rule applied (see :func:`score`).
    """
    config = _check_config(config)
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    ids = _check_tokens(input_ids, V, "input_ids")
    squeeze = ids.ndim == 1
    ids = ids.reshape(1, -1) if squeeze else ids
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be int[B, T], got shape {ids.shape}")
    seeds, tokens, _, _ = _positions(config, ids)
    out = _green_of(seeds.reshape(-1), tokens.reshape(-1), V, k).reshape(tokens.shape)
    return out[0] if squeeze else out


# ---------------------------------------------------------------------------
# The processor (NumPy twin of WatermarkLogitsProcessor.__call__)
# ---------------------------------------------------------------------------


def _add_bias(values, bias: float):
    """torch's ``x + bias`` for a float tensor: float32 arithmetic for float32 and the half types
    (torch's opmath), float64 for float64."""
    values = np.asarray(values)
    if values.dtype == np.float64:
        return values + np.float64(bias)
    return (values.astype(np.float32) + np.float32(bias)).astype(values.dtype)


def processor_call(config: HFKGWConfig, input_ids, scores, vocab_size: int | None = None) -> np.ndarray:
    """``WatermarkLogitsProcessor(vocab_size, ...)(input_ids, scores)`` in NumPy, both schemes.

    Args:
      input_ids: int[B, T] the sequences so far; scores: float[B, W] the (already warped) scores.
      vocab_size: the processor's V (the model config's); default W.
    Returns float[B, W]: ``scores`` unchanged when T < context_width; lefthash: + bias on the k
    green ids of each row; selfhash: + bias on those of the 40 top-scoring candidates that are green
    in their own list (stable descending sort: torch's unstable sort may differ on exact ties).
    """
    config = _check_config(config)
    s = np.asarray(scores)
    if s.ndim != 2 or not np.issubdtype(s.dtype, np.floating):
        raise ValueError(f"scores must be float[B, W], got {s.dtype} {s.shape}")
    V = _check_vocab(s.shape[1] if vocab_size is None else vocab_size)
    if V > s.shape[1]:
        raise ValueError(f"vocab_size {V} exceeds the scores' width {s.shape[1]}")
    k = _k(config, V)
    ids = _check_tokens(input_ids, V, "input_ids", min_len=0)
    if ids.ndim != 2 or ids.shape[0] != s.shape[0]:
        raise ValueError(f"input_ids must be int[B, T] with B = {s.shape[0]}, got shape {ids.shape}")
    out = s.copy()
    if ids.shape[1] < config.context_width:
        return out
    B = s.shape[0]
    rows = np.arange(B)[:, None]
    if config.seeding_scheme == "lefthash":
        gl = _green_rows(mt_seeds(config, ids[:, -1:]), V, k)
        out[rows, gl] = _add_bias(s[rows, gl], config.bias)
        return out
    if s.shape[1] < SELFHASH_CANDIDATES:
        raise ValueError(f"selfhash needs at least {SELFHASH_CANDIDATES} scores per row, got {s.shape[1]}")
    cand = np.argsort(-s, axis=1, kind="stable")[:, :SELFHASH_CANDIDATES]            # [B, 40]
    prev = np.broadcast_to(ids[:, ids.shape[1] - (config.context_width - 1):][:, None, :],
                           (B, SELFHASH_CANDIDATES, config.context_width - 1))
    windows = np.concatenate([prev, cand[..., None]], axis=-1)
    seeds = _selfhash_seed32(config, windows)
    green = _green_of(seeds.reshape(-1), cand.reshape(-1), V, k).reshape(cand.shape)
    sel_r, sel_c = np.broadcast_to(rows, cand.shape)[green], cand[green]
    out[sel_r, sel_c] = _add_bias(s[sel_r, sel_c], config.bias)
    return out


__all__ = ["greenlist", "is_green", "processor_call"]
