"""Detection of vLLM's Gumbel-max watermarks: contexts, scored positions, per-token scores, the score
of a text and its exact p-values (single and dual key), and vLLM's own p-value. Public face:
:mod:`wmspec_jax.interop.engine_gumbel`."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import numpy as np

from wmspec_jax.interop.engine_gumbel._config import _MASK, EngineConfig, VllmDualKeyGumbelConfig, VllmGumbelConfig
from wmspec_jax.interop.engine_gumbel._prf import uniforms

_DEDUP = ("context", "ngram", "none")


def _check_ids(ids, what: str) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.size and ids.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() > _MASK):
        raise ValueError("token ids must be in [0, 2**32)")
    return ids


def _check_text(input_ids) -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.ndim != 1:
        raise ValueError(f"input_ids must be one text, int[T], got shape {ids.shape}")
    return _check_ids(ids, "input_ids")


def _check_width(context_width) -> int:
    if isinstance(context_width, bool) or not isinstance(context_width, (int, np.integer)) or context_width < 1:
        raise ValueError(f"context_width must be an integer >= 1, got {context_width!r}")
    return int(context_width)


def _batch_contexts(texts: np.ndarray, width: int) -> np.ndarray:
    padded = np.concatenate([np.full(texts.shape[:-1] + (width,), -1, np.int64), texts], axis=-1)
    return np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)[..., : texts.shape[-1], :]


def contexts_of(input_ids, context_width: int) -> np.ndarray:
    """The context of every token as vLLM's detector builds it: the previous ``context_width``
    tokens, ``-1`` before the first (int[T] -> int64[T, C])."""
    return _batch_contexts(_check_text(input_ids), _check_width(context_width)).copy()


def _check_dedup(dedup) -> str:
    if dedup not in _DEDUP:
        raise ValueError(f"dedup must be one of {_DEDUP}, got {dedup!r}")
    return dedup


def _scored_mask(texts: np.ndarray, ctx: np.ndarray, valid: np.ndarray, dedup: str) -> np.ndarray:
    """bool[B, T]: the tokens scored in each row (first occurrences within the row)."""
    if dedup == "none":
        return valid
    b, t = texts.shape
    rows = [np.broadcast_to(np.arange(b)[:, None, None], (b, t, 1)), ctx]
    if dedup == "ngram":
        rows.append(texts[..., None])
    rows = np.concatenate(rows, axis=-1)[valid]  # [N, 1 + C (+ 1)], row-major order kept
    flat = np.flatnonzero(valid.ravel())
    _, first = np.unique(rows, axis=0, return_index=True)  # stable: index of the first occurrence
    mask = np.zeros(b * t, bool)
    mask[flat[first]] = True
    return mask.reshape(b, t)


def scored_positions(input_ids, context_width: int, dedup: str = "context") -> np.ndarray:
    """Indices of the scored tokens (ascending).

    ``dedup``: ``"context"`` -- the first occurrence of each context (vLLM's detector default);
    ``"ngram"`` -- the first occurrence of each (context, token); ``"none"`` -- every token
    (vLLM's ``deduplicate_contexts=False``; the Gamma null is then not exact on texts that
    repeat an n-gram).
    """
    dedup = _check_dedup(dedup)
    ids = _check_text(input_ids)[None]
    ctx = _batch_contexts(ids, _check_width(context_width))
    return np.flatnonzero(_scored_mask(ids, ctx, np.ones(ids.shape, bool), dedup)[0])


def token_scores(key: int, contexts, tokens) -> np.ndarray:
    """Per-token Aaronson scores ``-log1p(-u)`` in float64 (int[N, C], int[N] -> float64[N])."""
    ctx = np.asarray(contexts)
    tok = np.asarray(tokens)
    if ctx.ndim != 2 or tok.shape != (ctx.shape[0],):
        raise ValueError(f"contexts must be [N, C] and tokens [N], got {ctx.shape} and {tok.shape}")
    u = uniforms(key, ctx, tok[:, None])[:, 0]
    return -np.log1p(-u.astype(np.float64))


class ScoreResult(NamedTuple):
    """``score`` (the sum), ``n`` (scored tokens), ``p_value`` (exact, P(null >= score))."""

    score: float
    n: int
    p_value: float


class BatchScores(NamedTuple):
    """Per text: ``score`` float64[B], ``n`` int64[B], ``p_value`` float64[B], ``log_p_value`` float64[B]."""

    score: np.ndarray
    n: np.ndarray
    p_value: np.ndarray
    log_p_value: np.ndarray


def _weights(config: EngineConfig, alpha) -> Tuple[float, float]:
    if not isinstance(config, VllmDualKeyGumbelConfig):
        if alpha is not None:
            raise ValueError("alpha applies to dual_key_gumbel only")
        return (1.0, 0.0)
    a = config.alpha if alpha is None else alpha
    if isinstance(a, bool) or not isinstance(a, (int, float, np.floating, np.integer)) or not 0.0 <= float(a) <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1], got {a!r}")
    return (1.0 - float(a), float(a))


def _check_config(config) -> None:
    if not isinstance(config, VllmGumbelConfig):
        raise TypeError(f"config must be a VllmGumbelConfig or VllmDualKeyGumbelConfig, got {type(config).__name__}")


def score_batch(config: EngineConfig, texts, lengths=None, *, dedup: str = "context",
                alpha: Optional[float] = None) -> BatchScores:
    """:func:`score` for many texts at once (vectorised over texts and tokens).

    Args:
      config, dedup, alpha: as :func:`score`.
      texts: int[B, T] generated tokens, one text per row.
      lengths: optional int[B], the length of each text (tokens beyond it are padding and
        ignored); default: every row is T tokens long.

    Returns:
      :class:`BatchScores`.
    """
    _check_config(config)
    w_a, w_b = _weights(config, alpha)
    dedup = _check_dedup(dedup)
    texts = np.asarray(texts)
    if texts.ndim != 2:
        raise ValueError(f"texts must be int[B, T], got shape {texts.shape}")
    b, t = texts.shape
    if lengths is None:
        valid = np.ones((b, t), bool)
    else:
        lengths = np.asarray(lengths)
        if lengths.shape != (b,) or lengths.dtype.kind not in "iu" or (lengths.size and (
                lengths.min() < 0 or lengths.max() > t)):
            raise ValueError(f"lengths must be int[{b}] in [0, {t}], got {lengths!r}")
        valid = np.arange(t)[None, :] < lengths[:, None]
    texts = np.where(valid, texts, 0) if texts.size else texts.astype(np.int64)
    texts = _check_ids(texts, "texts")
    ctx = _batch_contexts(texts, config.context_width)
    mask = _scored_mask(texts, ctx, valid, dedup)
    row = np.broadcast_to(np.arange(b)[:, None], (b, t))[mask]
    sel_ctx, sel_tok = ctx[mask], texts[mask]
    n = np.bincount(row, minlength=b).astype(np.int64)
    keys = config.keys()
    if len(keys) == 1:
        per_token = token_scores(keys[0], sel_ctx, sel_tok)
    else:
        per_token = np.stack([token_scores(k, sel_ctx, sel_tok) for k in keys], axis=-1) @ np.array([w_a, w_b])
    total = np.bincount(row, weights=per_token, minlength=b).astype(np.float64)
    if w_b == 0.0:
        log_p = _gamma_log_sf_many(n, total)
    else:
        log_p = np.array([dual_key_log_sf(int(k), float(x), w_b) for k, x in zip(n, total)], np.float64)
    return BatchScores(total, n, np.exp(log_p), log_p)


def score(config: EngineConfig, input_ids, *, dedup: str = "context", alpha: Optional[float] = None) -> ScoreResult:
    """Score one text for vLLM's Gumbel-max watermark, with an exact p-value.

    Args:
      config: :class:`VllmGumbelConfig` or :class:`VllmDualKeyGumbelConfig` (key and width as
        generated).
      input_ids: int[T], the *generated* tokens only (vLLM's contexts never include the prompt),
        in the generating model's tokenizer.
      dedup: see :func:`scored_positions`; the default, ``"context"``, is vLLM's detector, so
        ``score`` and ``n`` equal ``GumbelWatermarkDetector.detect`` /
        ``DualKeyGumbelWatermarkDetector.detect`` (up to float64 summation order).
      alpha: dual key only: the weight of key B in the score (default ``config.alpha``; vLLM's
        detector defaulted to 0.2 in v0.30.0 and 0.1 later).

    Returns:
      :class:`ScoreResult`. Single key: score = Σ −log(1 − u_t), p = P(Gamma(n, 1) >= score).
      Dual key: score = Σ (1 − alpha)(−log(1 − u^A_t)) + alpha(−log(1 − u^B_t)), p exact
      (:func:`dual_key_log_sf`). No scored token: (0.0, 0, 1.0). :func:`score_batch` also
      returns log p (finite where p underflows).

    Under H0 (text independent of the key) the scored PRF inputs are distinct, so their
    uniforms are i.i.d. U(0, 1) and the null is exact for every text (Aaronson 2022; Fernandez
    et al. 2023 for scoring repeated inputs once).
    """
    ids = _check_text(input_ids)
    out = score_batch(config, ids[None], dedup=dedup, alpha=alpha)
    return ScoreResult(float(out.score[0]), int(out.n[0]), float(out.p_value[0]))


def log_p_value(config: EngineConfig, score_value: float, n: int, *, alpha: Optional[float] = None) -> float:
    """Exact log p-value of a :func:`score` (float; finite far below float64's smallest p)."""
    _check_config(config)
    w_a, w_b = _weights(config, alpha)
    if w_b == 0.0:
        return gamma_log_sf(n, score_value)
    return dual_key_log_sf(n, score_value, w_b)


def engine_p_value(config: EngineConfig, score_value: float, n: int, *, alpha: Optional[float] = None) -> float:
    """vLLM's own p-value for the same score (for parity with its detector).

    Single key: ``_gamma_survival_integer_shape`` (exact, = exp of :func:`gamma_log_sf`).
    Dual key: moment-matched ``Gamma(n / v, scale v)``, ``v = (1 - alpha)^2 + alpha^2``; its
    integer-shape series for alpha in {0, 0.5, 1} (then exact), else ``gammaincc`` -- an
    approximation of the true null (:func:`dual_key_log_sf`).
    """
    from scipy.special import gammaincc

    _check_config(config)
    w_a, w_b = _weights(config, alpha)
    n = _check_n(n)
    if n == 0:
        return 1.0
    if not isinstance(config, VllmDualKeyGumbelConfig):
        return float(math.exp(gamma_log_sf(n, score_value)))
    a = w_b
    var = (1.0 - a) ** 2 + a**2
    if a in (0.0, 0.5, 1.0):
        return min(1.0, float(math.exp(min(0.0, gamma_log_sf(round(n / var), score_value / var)))))
    return float(gammaincc(n / var, score_value / var))


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    return int(n)


def _log_poisson_cdf_table(m_max: int, x: float) -> np.ndarray:
    """log P(Gamma(m, 1) >= x) = log P(Poisson(x) <= m - 1) for m = 1..m_max (float64[m_max])."""
    from scipy.special import gammaln

    j = np.arange(m_max, dtype=np.float64)
    log_terms = j * math.log(x) - x - gammaln(j + 1.0)
    return np.logaddexp.accumulate(log_terms)


def _gamma_log_sf_many(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Vectorised :func:`gamma_log_sf`: int[B], float[B] -> float64[B]."""
    from scipy.special import gammaln, logsumexp

    n = np.asarray(n, np.int64)
    s = np.asarray(s, np.float64)
    out = np.zeros(n.shape, np.float64)
    live = (n > 0) & (s > 0)
    if live.any():
        nl, sl = n[live], s[live]
        j = np.arange(int(nl.max()), dtype=np.float64)
        terms = j[None, :] * np.log(sl)[:, None] - gammaln(j + 1.0)[None, :]
        terms = np.where(j[None, :] < nl[:, None], terms, -np.inf)
        out[live] = np.minimum(0.0, logsumexp(terms, axis=1) - sl)
    return out


def gamma_log_sf(n: int, s: float) -> float:
    """Exact ``log P(Gamma(n, 1) >= s)`` for integer n >= 0: ``-s + log Σ_{k<n} s^k / k!``.

    The same series as vLLM's ``_gamma_survival_integer_shape``, in log space (all terms
    positive, so no cancellation; finite for p far below 1e-308).
    """
    n = _check_n(n)
    s = float(s)
    if not math.isfinite(s):
        raise ValueError(f"score must be finite, got {s}")
    if n == 0 or s <= 0.0:
        return 0.0
    return min(0.0, float(_log_poisson_cdf_table(n, s)[-1]))


def dual_key_log_sf(n: int, s: float, alpha: float, *, rel_tol: float = 1e-15) -> float:
    """Exact ``log P((1 − α) X + α Y >= s)`` for independent X, Y ~ Gamma(n, 1).

    With ``lo = min(α, 1 − α)``, ``hi = max(...)`` and ``r = hi / lo``, ``r·Gamma(n, 1)`` is the
    negative-binomial mixture ``Σ_k NB(k; n, 1/r) Gamma(n + k, 1)`` (compare the moment
    generating functions), so ``S / lo`` is ``Σ_k NB(k; n, 1/r) Gamma(2n + k, 1)`` and

        p = Σ_k C(n + k − 1, k) r^−n (1 − 1/r)^k · P(Gamma(2n + k, 1) >= s / lo),

    a sum of positive terms evaluated in log space. It is truncated at k_max where the
    remaining negative-binomial mass (bounded by a geometric series: the pmf ratio
    (n + k)(1 − q)/(k + 1) decreases in k) is below ``rel_tol · p``, so the relative error is
    below rel_tol. α in {0, 1} reduces to :func:`gamma_log_sf` (s / max weight), α = 1/2 to
    Gamma(2n, 1/2).
    """
    from scipy.special import gammaln

    n = _check_n(n)
    s = float(s)
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not math.isfinite(s):
        raise ValueError(f"score must be finite, got {s}")
    if n == 0 or s <= 0.0:
        return 0.0
    lo, hi = sorted((alpha, 1.0 - alpha))
    if lo == 0.0:
        return gamma_log_sf(n, s / hi)
    x = s / lo
    q = lo / hi  # = 1 / r, in (0, 1]
    if q == 1.0:
        return gamma_log_sf(2 * n, x)
    log_q, log_1mq = math.log(q), math.log1p(-q)

    def log_nb(k):
        return gammaln(n + k) - gammaln(k + 1.0) - gammaln(n) + n * log_q + k * log_1mq

    mean = n * (1.0 - q) / q
    sd = math.sqrt(n * (1.0 - q)) / q
    k_max = int(mean + 12.0 * sd + 64)
    while True:
        k = np.arange(k_max + 1, dtype=np.float64)
        log_q_tab = _log_poisson_cdf_table(2 * n + k_max, x)[2 * n - 1:]  # m = 2n .. 2n + k_max
        terms = log_nb(k) + np.minimum(log_q_tab, 0.0)
        top = terms.max()
        log_p = float(top + math.log(np.exp(terms - top).sum()))
        ratio = (n + k_max + 1.0) * (1.0 - q) / (k_max + 2.0)  # pmf(j + 1) / pmf(j) <= ratio for j > k_max
        if ratio < 1.0:
            log_tail = float(log_nb(float(k_max + 1))) - math.log1p(-ratio)
            if log_tail <= log_p + math.log(rel_tol):
                return min(0.0, log_p)
        k_max *= 2


__all__ = ["BatchScores", "ScoreResult", "contexts_of", "dual_key_log_sf", "engine_p_value", "gamma_log_sf",
           "log_p_value", "score", "score_batch", "scored_positions", "token_scores"]
