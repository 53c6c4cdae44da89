"""A corpus scored under many keys at the cost of its distinct windows.

A keyed value is a function of (key, context, token) alone, so each distinct scored (context, token)
window of a corpus is hashed once per key and scattered back to every position that holds it: the
statistics of :func:`wmspec_jax.detect.statistics` on the texts (checked by
:func:`check_against_direct`), for S keys at once. ``benchmarks/repetitive_fpr.py`` measures the
per-key false-positive rate of repetitive corpora over many secrets this way.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import decoders, keys, prf


def secret_words(index: int) -> np.ndarray:
    """uint32[3, 2] the stream words of the benchmark's ``index``-th secret, used directly as the key."""
    return np.asarray(keys.Secret(f"repetitive-fpr/{index}").stream_keys())


def per_key_summary(counts: np.ndarray, num_texts: int, alpha: float) -> dict:
    """The distribution over secrets of the number of texts one key flags, against Binomial(n, α)."""
    from scipy import stats as sps

    n = int(num_texts)
    share = counts / n
    q9999 = int(sps.binom.ppf(0.9999, n, alpha))
    q99 = int(sps.binom.ppf(0.99, n, alpha))
    return {
        "flagged_share_quantiles": {q: float(np.quantile(share, float(q))) for q in ("0.1", "0.5", "0.9")},
        "flagged_share_max": float(share.max()),
        "flagged_share_mean": float(share.mean()),
        "secrets_flagging_none": float(np.mean(counts == 0)),
        "binomial_none": float(sps.binom.pmf(0, n, alpha)),
        "dispersion_index": float(counts.var(ddof=1) / (n * alpha * (1 - alpha))),
        "binomial_q9999": q9999,
        "secrets_above_q9999": float(np.mean(counts > q9999)),
        "binomial_above_q9999": float(sps.binom.sf(q9999, n, alpha)),
        "binomial_q99": q99,
        "secrets_above_q99": float(np.mean(counts > q99)),
        "binomial_above_q99": float(sps.binom.sf(q99, n, alpha)),
    }


def distinct_windows(tokens: np.ndarray, within_mask: np.ndarray, width: int) -> tuple:
    """The distinct scored (context, token) windows of a corpus: (windows int32[N, h + 1], rows, cols
    int[M] of the M scored positions, inverse int[M]: each position's window). Exact (rows compared,
    no hashing)."""
    rows, cols = np.nonzero(within_mask)
    if (cols < width).any():
        raise ValueError("a scored position without a full context: the benchmark scores texts without prompts")
    all_windows = tokens[rows[:, None], cols[:, None] + np.arange(-width, 1)[None]]
    windows, inverse = np.unique(all_windows, axis=0, return_inverse=True)
    return windows.astype(np.int32), rows, cols, inverse.reshape(-1)


@functools.partial(jax.jit, static_argnames=("statistic", "num_layers", "vocab_size", "one_stream"))
def _window_values(contexts, tokens, words, statistic: str, num_layers: int, vocab_size: int, one_stream: bool):
    """(draft, target, u) of N windows under S keys, as :func:`wmspec_jax.detect.streams.statistics`
    computes them at one position: float32[S, N] (SynthID: g-values uint8[S, N, m])."""
    seeds = prf.context_seeds(words[:, :, None, :], contexts[None, None])  # [S, 3, N, 2]
    u = prf.position_uniforms(seeds[:, prf.Stream.ACCEPT])
    if num_layers:
        return (prf.token_gbits(seeds[:, prf.Stream.DRAFT], tokens[None], num_layers),
                prf.token_gbits(seeds[:, prf.Stream.TARGET], tokens[None], num_layers), u)
    scheme = decoders.scheme_class(statistic).build()
    target = scheme.token_statistic(seeds[:, prf.Stream.TARGET], tokens[None], version=prf.PRF_VERSION,
                                    vocab_size=vocab_size)
    draft = target if one_stream else scheme.token_statistic(seeds[:, prf.Stream.DRAFT], tokens[None],
                                                             version=prf.PRF_VERSION, vocab_size=vocab_size)
    return draft, target, u


def corpus_statistics(decoder, table: tuple, words: np.ndarray, shape: tuple, lengths: np.ndarray, vocab: int):
    """Statistics of a corpus [B, L] under S keys (``words`` uint32[S, 3, 2]) as a batch [S B, L].

    A keyed value is a function of (key, context, token) alone, so each distinct scored window is
    hashed once per key and scattered back to every position that holds it: the values of
    ``detect.statistics`` on the texts (checked in :func:`measure_corpus`) at the cost of the distinct
    windows only — KGW's statistic costs V hashes per value."""
    from wmspec_jax.detect.streams_compute import statistics_provenance
    from wmspec_jax.detect.streams_types import GumbelStats, SynthIDStats

    windows, rows, cols, inverse = table
    num_keys, (num_texts, length), width = words.shape[0], shape, windows.shape[1] - 1
    values = _window_values(jnp.asarray(windows[:, :width]), jnp.asarray(windows[:, width]), jnp.asarray(words),
                            decoder.statistic, decoder.num_layers if decoder.family == decoders.SYNTHID else 0,
                            vocab if decoder.statistic_needs_vocab else 0, bool(decoder.target_stream_statistic))
    per_token = []
    for v in values:
        v = np.asarray(v)
        full = np.zeros((num_keys, num_texts, length) + v.shape[2:], v.dtype)
        full[:, rows, cols] = v[:, inverse]
        per_token.append(jnp.asarray(full.reshape((num_keys * num_texts, length) + v.shape[2:])))
    mask = np.zeros((num_texts, length), bool)
    mask[rows, cols] = True
    kind = SynthIDStats if decoder.family == decoders.SYNTHID else GumbelStats
    prov = statistics_provenance(words, decoder.statistic, per_token[0].shape[2] if per_token[0].ndim == 3
                                 else 0, width)
    return kind(*per_token, jnp.asarray(np.tile(mask, (num_keys, 1))), jnp.full((num_keys * num_texts,), width, jnp.int32),
                jnp.asarray(np.tile(lengths, num_keys).astype(np.int32)), prov)


def check_against_direct(decoder, detector, table, tokenized, words: np.ndarray, width: int, rows: int = 16) -> None:
    """The first ``rows`` texts' scores under one key equal those of ``detect.statistics`` on the texts."""
    from wmspec_jax import detect

    tokens, lengths = tokenized.tokens[:rows], tokenized.lengths[:rows]
    direct = detect.statistics(decoder, tokens, words, vocab_size=tokenized.vocab_size, lengths=lengths,
                               context_width=width)
    windows, r, c, inverse = table
    keep = r < rows
    small = corpus_statistics(decoder, (windows, r[keep], c[keep], inverse[keep]), words[None],
                              (rows, tokenized.tokens.shape[1]), lengths, tokenized.vocab_size)
    a, b = detector.score(direct), detector.score(small)
    a_n, b_n = np.asarray(a.num_scored), np.asarray(b.num_scored)
    a_p, b_p = np.asarray(a.log_pvalue), np.asarray(b.log_pvalue)
    if not (np.array_equal(a_n, b_n) and np.allclose(a_p, b_p, rtol=1e-5, atol=1e-6)):
        raise AssertionError(f"{decoder.label}: scattered statistics differ from detect.statistics "
                             f"({a_n} vs {b_n}; {a_p} vs {b_p})")


__all__ = ["check_against_direct", "corpus_statistics", "distinct_windows", "per_key_summary", "secret_words"]
