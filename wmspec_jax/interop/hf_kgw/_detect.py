"""Detection of transformers' KGW watermark with exact binomial p-values (:func:`score`).
Public face: :mod:`wmspec_jax.interop.hf_kgw`."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from wmspec_jax.interop.hf_kgw._config import DEDUP_RULES, HFKGWConfig, _check_config, _check_vocab, _k
from wmspec_jax.interop.hf_kgw._greenlist import _green_of, _positions


class KGWScore(NamedTuple):
    """Per-text detection result (all [B]).

    Attributes:
      z: float64 transformers' z-score (g − γn) / sqrt(nγ(1 − γ)), γ = greenlist_ratio; NaN at n = 0.
      n: int64 number of scored tokens.
      green: int64 number of green scored tokens g.
      p_value: float64 exact P(Binomial(n, γ_eff) >= g), γ_eff = k / V (1 at n = 0).
    """

    z: np.ndarray
    n: np.ndarray
    green: np.ndarray
    p_value: np.ndarray


def _first_occurrences(keys: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row of keys int64[N, m]."""
    if keys.shape[0] == 0:
        return np.zeros(0, np.int64)
    _, first = np.unique(keys, axis=0, return_index=True)
    return np.sort(first)


def _checked_ids(config: HFKGWConfig, input_ids, V: int, bos_token_id, mask) -> tuple:
    """(int64[B, T] ids, bool[B, T] valid) as :func:`score` takes them: checked, the BOS column dropped
    where every row starts with it, masked positions set to 0."""
    raw = np.asarray(input_ids)
    if raw.ndim != 2:
        raise ValueError(f"input_ids must be int[B, T], got shape {raw.shape}")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {raw.dtype}")
    ids = raw.astype(np.int64)
    valid = np.ones(ids.shape, bool) if mask is None else np.asarray(mask)
    if valid.shape != ids.shape or valid.dtype != bool:
        raise ValueError(f"mask must be bool{list(ids.shape)}, got {valid.dtype} {valid.shape}")
    if bos_token_id is not None and ids.shape[1] > 0:
        has_bos = ids[:, 0] == int(bos_token_id)
        if has_bos.any() != has_bos.all():
            raise ValueError("some rows start with the BOS token and some do not "
                             "(transformers' detector rejects this too)")
        if has_bos.all():
            ids, valid = ids[:, 1:], valid[:, 1:]
    if ids.shape[1] - config.context_width < 1:
        raise ValueError(f"need at least one token after the first context_width="
                         f"{config.context_width} tokens, got T = {ids.shape[1]}")
    if (ids[valid] < 0).any() or (ids[valid] >= V).any():
        raise ValueError(f"input_ids hold token ids outside [0, {V}) at unmasked positions")
    return np.where(valid, ids, 0), valid


def _scored_positions(config: HFKGWConfig, ids, valid, dedup: str) -> tuple:
    """(seeds, tokens [B, P], flat indices of the scored positions, row [B, P]) under ``dedup``
    (:func:`score`): a position is scored when its whole n-gram is valid, once per dedup key."""
    B = ids.shape[0]
    seeds, tokens, ngrams, _ = _positions(config, ids)
    P = tokens.shape[1]
    ok = np.lib.stride_tricks.sliding_window_view(valid, ngrams.shape[-1], axis=1).all(axis=-1)
    row = np.broadcast_to(np.arange(B)[:, None], (B, P))
    sel = np.nonzero(ok.reshape(-1))[0]
    r_sel = row.reshape(-1)[sel]
    if dedup == "seed":
        keys = np.stack([r_sel, seeds.reshape(-1)[sel].astype(np.int64)], axis=1)
    elif dedup == "seed_token":
        keys = np.stack([r_sel, seeds.reshape(-1)[sel].astype(np.int64), tokens.reshape(-1)[sel]], axis=1)
    elif dedup == "ngram":
        keys = np.concatenate([r_sel[:, None], ngrams.reshape(-1, ngrams.shape[-1])[sel]], axis=1)
    else:
        keys = None
    if keys is not None:
        sel = sel[_first_occurrences(keys)]
    return seeds, tokens, sel, row


def score(config: HFKGWConfig, input_ids, vocab_size: int, *, dedup: str = "seed",
          bos_token_id: int | None = None, mask=None) -> KGWScore:
    """Detect transformers' KGW watermark with exact p-values: :class:`KGWScore` of [B] arrays.

    Args:
      input_ids: int[B, T] token ids in [0, V) (the text, not the prompt, as transformers advises).
      vocab_size: the model config's V.
      dedup: which positions are scored (within each text):
        ``"seed"`` (default) — the first position of each distinct 32-bit mt19937 seed;
        ``"seed_token"`` — the first of each distinct (seed, token);
        ``"ngram"`` — the first of each distinct n-gram (``WatermarkDetector(ignore_repeated_ngrams=True)``);
        ``"none"`` — every position (the detector's default).
      bos_token_id: as the detector: when every row starts with it, that column is dropped; rows
        that disagree are an error. None: nothing is dropped.
      mask: optional bool[B, T], False on padding; a position is scored when all tokens of its
        n-gram are unmasked.

    Null. Under H0 the text is fixed independently of the key. Treating the key-derived seeds and
    mt19937 streams as ideal randomness (the assumption behind every KGW p-value), a seed's
    shuffle is a uniform permutation, so a fixed token is green with probability exactly k / V =
    γ_eff, and shuffles of different seeds are independent. With ``"seed"`` every scored position
    has its own seed, so g ~ Binomial(n, γ_eff) exactly. This holds for selfhash too: that the seed
    depends on the scored token itself does not matter, as the token is fixed before the key is
    drawn (with context_width = 1 the colour is a fixed function of the token, so repeats of a
    token are one draw, not many). Remaining inexactness: modulo bias of ``random() % (V − i)``
    (below V / 2^32 per step) and the PRF idealisation.
    ``"seed_token"`` also scores distinct tokens under a shared seed (lefthash: the same previous
    token followed by different tokens). They sit in one permutation, so their green count is
    hypergeometric, a Poisson-binomial law; g is then Poisson-binomial with mean nγ_eff and, by
    Hoeffding (1956), P(g >= c) <= P(Binomial(n, γ_eff) >= c) for c >= nγ_eff + 1: the p-value is
    valid (conservative) wherever it is below about 1/2, not exact.
    ``"ngram"`` is exact only when distinct n-grams have distinct seeds: lefthash with
    context_width > 1 seeds with the last context token alone, so n-grams differing only earlier
    repeat one coin and the binomial p-value is anti-conservative. ``"none"`` counts repeats of
    one coin (repeated phrases) many times and is not valid on repetitive text.

    Departure from transformers: its p-value is the normal tail of z; ours is the binomial tail.
    """
    from wmspec_jax.detect.kgw import binomial_log_sf

    config = _check_config(config)
    V = _check_vocab(vocab_size)
    k = _k(config, V)
    if dedup not in DEDUP_RULES:
        raise ValueError(f"dedup must be one of {DEDUP_RULES}, got {dedup!r}")
    ids, valid = _checked_ids(config, input_ids, V, bos_token_id, mask)
    B = ids.shape[0]
    seeds, tokens, sel, row = _scored_positions(config, ids, valid, dedup)
    green = _green_of(seeds.reshape(-1)[sel], tokens.reshape(-1)[sel], V, k)
    r = row.reshape(-1)[sel]
    n = np.bincount(r, minlength=B).astype(np.int64)
    g = np.bincount(r, weights=green, minlength=B).astype(np.int64)
    gamma = config.greenlist_ratio
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (g - gamma * n) / np.sqrt(n * gamma * (1.0 - gamma))
    z = np.where(n > 0, z, np.nan)
    p = np.exp(binomial_log_sf(g, n, k / V)) if B else np.zeros(0)
    return KGWScore(z.astype(np.float64), n, g, np.where(n > 0, p, 1.0).astype(np.float64))


__all__ = ["KGWScore", "score"]
