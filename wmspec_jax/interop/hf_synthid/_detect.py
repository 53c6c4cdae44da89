"""Detection of transformers' SynthID-Text watermark: the scored positions, the exact null law over
the keys (or the binomial one) and the p-value. Public face: :mod:`wmspec_jax.interop.hf_synthid`."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from wmspec_jax.interop.hf_synthid._config import _U64, HFSynthIDConfig, _check_config, _table
from wmspec_jax.interop.hf_synthid._hash import (_check_ids, _context_hashes, _eos_ids, _first_in_window, _keyed,
                                                _lcg, _lookup, _ngram_hashes)


class SynthIDScores(NamedTuple):
    """Per-text detection results.

    Attributes:
      mean_score: float64[B] mean of the scored g-values (transformers' / Dathathri et al.'s mean
        score); NaN where nothing is scored.
      num_scored: int64[B] n, the scored n-gram positions (each contributes ``depth`` g-values).
      p_value: float64[B] P(score sum >= observed) under H0; 1 where nothing is scored.
    """

    mean_score: np.ndarray
    num_scored: np.ndarray
    p_value: np.ndarray


def _scored(config, input_ids, eos_token_id, generation_start):
    """(hashes uint64[B, N] of the n-grams before the keys, mask bool[B, N]) as the detector scores."""
    _check_config(config)
    ids = _check_ids(input_ids)
    eos = _eos_ids(eos_token_id)
    n = config.ngram_len
    b, t = ids.shape
    if generation_start and not config.skip_first_ngram_calls:
        # the processor's first context is n - 1 zeros: n-gram j of the padded ids ends at ids[:, j]
        padded = np.concatenate([np.zeros((b, n - 1), np.int64), ids], axis=1)
        keep = np.ones((b, t), bool) if eos is None else np.cumsum(np.isin(ids, eos), axis=1) == 0
    else:
        # with skip_first_ngram_calls the first watermarked context is ids[:, :n - 1] either way
        padded = ids
        keep = np.ones((b, max(t - n + 1, 0)), bool)
        if eos is not None:
            keep = (np.cumsum(np.isin(ids, eos), axis=1) == 0)[:, n - 1:]
    mask = _first_in_window(_context_hashes(padded, n), config.context_history_size) & keep
    return _ngram_hashes(padded, n), mask


def _sum_tail(layer_pmf: np.ndarray, depth: int, s: int) -> float:
    """P(X_1 + ... + X_depth >= s) for i.i.d. X_l with law ``layer_pmf`` (float64[n + 1] on 0..n).

    The depth-fold convolution is evaluated by FFT after an exponential tilt: with
    ``w_theta(x) = layer_pmf(x) e^(theta x) / M(theta)`` and theta chosen so that w_theta's mean is
    s / depth, ``P(sum = k) = w_theta^{*depth}(k) M(theta)^depth e^(-theta k)`` and the FFT's
    absolute rounding error (~1e-16 of the tilted law's peak, which sits at k ~ s) stays far below
    the terms that make up the tail: the p-value keeps ~1e-10 relative accuracy down to
    ~1e-300, where a plain FFT would lose everything below ~1e-16.
    """
    from scipy import fft as sfft

    def logsumexp(v):
        top = np.max(v)
        return top + np.log(np.sum(np.exp(v - top))) if np.isfinite(top) else top

    support = np.flatnonzero(layer_pmf > 0)
    lo, hi = int(support[0]), int(support[-1])
    if s <= depth * lo:
        return 1.0
    if s > depth * hi:
        return 0.0
    x = np.arange(hi + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logp = np.log(layer_pmf[: hi + 1])

    def tilted(theta):
        logw = logp + theta * x
        log_m = logsumexp(logw)
        return np.exp(logw - log_m), log_m

    theta = 0.0
    target = min(s, depth * hi - 0.5) / depth
    if float((x * layer_pmf[: hi + 1]).sum()) < target:
        a, b = 0.0, 1.0
        while float((x * tilted(b)[0]).sum()) < target and b < 2.0 ** 20:
            b *= 2.0
        for _ in range(40):  # bisection on the tilted mean, increasing in theta (any theta is exact;
            # one near the target only keeps the rounding small)
            mid = 0.5 * (a + b)
            a, b = (mid, b) if float((x * tilted(mid)[0]).sum()) < target else (a, mid)
        theta = a
    w, log_m = tilted(theta)
    length = depth * hi + 1
    size = sfft.next_fast_len(length, real=True)
    conv = sfft.irfft(sfft.rfft(w, size) ** depth, size)[:length]
    k = np.arange(s, length)
    with np.errstate(divide="ignore"):
        log_terms = np.log(np.clip(conv[s:], 0.0, None)) + depth * log_m - theta * k
    return float(min(1.0, np.exp(logsumexp(log_terms))))


@functools.lru_cache(maxsize=4)
def _shifted_table_fft(seed: int, size: int) -> np.ndarray:
    """rfft of ``T'[x] = table[(x * MULTIPLIER + 1) mod S]`` (S a power of two)."""
    x = np.arange(size, dtype=np.uint64)
    idx = _lcg(np.zeros(size, np.uint64), x) & _U64(size - 1)
    return np.fft.rfft(_table(seed, size)[idx.astype(np.int64)].astype(np.float64))


def _resolve_null(config, null: str) -> str:
    if null not in ("auto", "keys", "binomial"):
        raise ValueError(f"null must be 'auto', 'keys' or 'binomial', got {null!r}")
    pow2 = config.sampling_table_size & (config.sampling_table_size - 1) == 0
    if null == "auto":
        return "keys" if pow2 else "binomial"
    if null == "keys" and not pow2:
        raise ValueError("null='keys' needs a power-of-two sampling_table_size; use null='binomial'")
    return null


def _key_shift_pmfs(config, hashes, mask) -> list:
    """Per text, the law of one layer's sum X(k) = sum_t T'[(h_t + k) mod S] for k uniform on Z/S."""
    size = config.sampling_table_size
    tfft = _shifted_table_fft(config.sampling_table_seed, size)
    out = []
    chunk = max(1, 2 ** 22 // size)
    for start in range(0, hashes.shape[0], chunk):  # over texts, in blocks bounded in memory
        h, m = hashes[start:start + chunk], mask[start:start + chunk]
        rows = np.broadcast_to(np.arange(h.shape[0])[:, None], h.shape)[m]
        residues = (h[m] & _U64(size - 1)).astype(np.int64)
        counts = np.zeros((h.shape[0], size))
        np.add.at(counts, (rows, residues), 1.0)
        # circular cross-correlation: X[k] = sum_a counts[a] T'[a + k]
        x = np.fft.irfft(np.conj(np.fft.rfft(counts, axis=1)) * tfft, n=size, axis=1)
        xi = np.rint(x)
        if np.abs(x - xi).max(initial=0.0) > 0.25:
            raise RuntimeError("FFT rounding failed for the key-shift law")
        for r in range(h.shape[0]):
            n = int(m[r].sum())
            out.append(np.bincount(xi[r].astype(np.int64), minlength=n + 1)[: n + 1] / size)
    return out


def null_distribution(config: HFSynthIDConfig, input_ids, eos_token_id=None, *, generation_start: bool = False,
                      null: str = "auto") -> list:
    """Per text, the H0 law of ONE depth's score sum (its scored g-values summed over positions):
    a list of B float64 pmfs of length ``n_b + 1``, entry x = P(X = x). The statistic of :func:`score`
    is the sum of ``depth`` i.i.d. copies of X.

    ``null``: ``"keys"`` (the exact law over random keys, power-of-two table sizes: a multiple of
    1 / S), ``"binomial"`` (Binomial(n, q), q the table's fraction of ones) or ``"auto"`` (the first
    when it applies). Other arguments as :func:`score`.
    """
    kind = _resolve_null(config, null)
    hashes, mask = _scored(config, input_ids, eos_token_id, generation_start)
    if kind == "binomial":
        from scipy import stats

        q = float(_table(config.sampling_table_seed, config.sampling_table_size).mean())
        return [stats.binom.pmf(np.arange(int(n) + 1), int(n), q) for n in mask.sum(axis=1)]
    return _key_shift_pmfs(config, hashes, mask)


def score(config: HFSynthIDConfig, input_ids, eos_token_id=None, *, generation_start: bool = False,
          null: str = "auto") -> SynthIDScores:
    """Detects transformers' SynthID-Text watermark with an exact p-value: mean score, n, p-value.

    The scored positions are transformers' detector's (``SynthIDTextWatermarkDetector``): the n-grams
    of ``input_ids`` whose context is a first occurrence (:func:`context_repetition_mask`) and that
    end before the first ``eos_token_id`` (:func:`eos_token_mask`, cut by ``ngram_len - 1``).
    Statistic: the sum of their g-values over all depths; ``mean_score`` = sum / (n * depth).

    The null law (``null="keys"``, the default for power-of-two table sizes such as transformers'
    65536). H0: the keys are independent of the text; model them as uniformly random. With
    S = 2**m, the table index of position t at depth l is
    ``((h_t + k_l) * MULTIPLIER + 1) mod S = f(a_t + r_l)`` where ``h_t`` is the n-gram hash,
    ``a_t = h_t mod S``, ``r_l = k_l mod S`` and ``f(x) = (x * MULTIPLIER + 1) mod S``: the modulo of
    a power of two commutes with the wrap-around arithmetic, so only the low m bits of the keys count.
    Depth l's sum is then ``X(r_l) = sum_t T'[a_t + r_l]`` with ``T' = table o f`` and, the r_l being
    i.i.d. uniform on Z/S, the depths' sums are i.i.d. copies of X(r) with r uniform: the exact law
    of the statistic is the depth-fold convolution of the law of X(r) (:func:`null_distribution`),
    which is computed for all S values of r at once (one circular cross-correlation by FFT,
    integer-exact after rounding); the convolution's tail is summed after an exponential tilt
    (relative error ~1e-12 down to ~1e-300, below which the p-value underflows to 0). Text,
    masks and table are held fixed, so collisions of table indices (two positions or depths reading
    one entry, inevitable with ~n * depth reads out of 65536) are accounted for exactly, which an
    i.i.d. Bernoulli model is not. The p-value is super-uniform over the keys: P(p <= alpha) <= alpha.
    Consequences of the construction worth knowing: keys equal modulo S are the same layer (k and
    k + 65536 give identical g-values); and every key list reads the same table, so the g-values of
    a text watermarked with list K, read with another FIXED list K', correlate with the watermark
    through the table's autocorrelation at the lags k' - k (about 1/sqrt(S) each). Each text's
    p-value stays exact over a random K', but many texts scored with one fixed wrong list have
    correlated p-values: false positives then cluster instead of being independent.

    ``null="binomial"``: P(Binomial(n * depth, q) >= sum), q the table's exact fraction of ones, exact
    under the idealisation that every read is a fresh Bernoulli(q) (ignores index collisions); the
    only choice for table sizes that are not powers of two. Both agree closely for texts of a few
    hundred tokens (each layer's X has mean n q and variance n q (1 - q) up to the table's
    autocorrelations and the collisions).

    Departures from transformers: transformers' detector is a trained Bayesian classifier
    (``BayesianDetectorModel``) that outputs a posterior and no p-value; here nothing is trained and
    the p-value is exact. ``generation_start=True`` also scores the first ``ngram_len - 1`` tokens,
    which transformers watermarks with its all-zeros initial context (pass exactly the generated
    ids, prompt removed); no effect with ``skip_first_ngram_calls``.

    Args:
      config: the watermark settings (with the keys to test for).
      input_ids: int[B, T] token ids (the generated text; left padding should be removed).
      eos_token_id: None, an int or ints; everything from a row's first one on is not scored.
      generation_start: see above.
      null: ``"auto"``, ``"keys"`` or ``"binomial"``.

    Returns:
      :class:`SynthIDScores` ``(mean_score float64[B], num_scored int64[B], p_value float64[B])``.
    """
    kind = _resolve_null(config, null)
    hashes, mask = _scored(config, input_ids, eos_token_id, generation_start)
    d = config.depth
    g = _lookup(config, _keyed(config, hashes))
    sums = (g * mask[..., None]).sum(axis=(1, 2)).astype(np.int64)
    n = mask.sum(axis=1).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, sums / np.maximum(n * d, 1), np.nan)
    if kind == "binomial":
        from scipy import stats

        q = float(_table(config.sampling_table_seed, config.sampling_table_size).mean())
        p = np.where(n > 0, stats.binom.sf(sums - 1, n * d, q), 1.0)
    else:
        layers = _key_shift_pmfs(config, hashes, mask)
        p = np.array([_sum_tail(law, d, int(k)) if nn > 0 else 1.0 for law, k, nn in zip(layers, sums, n)])
    return SynthIDScores(mean.astype(np.float64), n, np.clip(p, 0.0, 1.0).astype(np.float64))


def weighted_mean_score(config: HFSynthIDConfig, input_ids, eos_token_id=None, *, weights=None,
                        generation_start: bool = False) -> np.ndarray:
    """Dathathri et al.'s weighted mean score: float64[B] (no p-value).

    ``sum_{t, l} w_l g[t, l] / (n * depth)`` over the scored positions, with ``w`` (default
    ``linspace(10, 1, depth)``, the reference code's) rescaled to sum to ``depth``; NaN where nothing
    is scored. Arguments as :func:`score`; ``weights``: float[depth], non-negative.
    """
    hashes, mask = _scored(config, input_ids, eos_token_id, generation_start)
    d = config.depth
    w = np.linspace(10.0, 1.0, d) if weights is None else np.asarray(weights, np.float64)
    if w.shape != (d,) or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {d} non-negative finite floats, not all zero")
    w = w * (d / w.sum())
    g = _lookup(config, _keyed(config, hashes)).astype(np.float64)
    n = mask.sum(axis=1)
    total = (g * w * mask[..., None]).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n * d, 1), np.nan)


__all__ = ["SynthIDScores", "null_distribution", "score", "weighted_mean_score"]
