"""Detection over a corpus scored under one secret: corpus-level dedup, the shared-context warning,
and calibration of a key on the user's own human texts.

**Why.** A text's p-value is exact *over keys*: under H0 (the text does not depend on the key) every
scored position's keyed value is a fresh uniform, because the repeated-context rule
(:func:`wmspec_jax.context.scored_mask`) scores each context at most once per text. A deployment
scores thousands of texts under *one* secret. Two texts that share a (context, token) window share
its keyed values — the same y^D, y^T, u (Gumbel family), the same g-values (SynthID), the same place
in the green list's permutation (KGW) — so the texts' scores are dependent and the number of false
positives of one key over a corpus is not Binomial(n, α). Templated human text (form letters,
boilerplate, tables) shares most of its windows: a few keys then flag many texts and most flag none.

**Corpus-level dedup** (:func:`dedup_corpus`) extends the repeated-context rule across texts: a
position stays scored iff the within-text rule scores it and its window (the h context tokens and
the token, h from the statistics' provenance) was not scored at an earlier position of the corpus —
earlier texts first, in input order, then earlier positions of the same text. Every window is then
scored at most once per corpus, so under H0 the scored values of the whole corpus are distinct keyed
values:

* Gumbel family (Gumbel-max, inverse transform, DiPmark, γ-reweight): y^D, y^T of distinct (context,
  token) windows are independent uniforms. Two kept windows may share a context (another token after
  the same h tokens), and with it the acceptance uniform u, which is a function of the context alone;
  every Gumbel detector chooses between y^D and y^T from u alone (Ars-τ, Ars-Prior's keyed coins, the
  soft detector's u-bins), and given the u's the scores are functions of disjoint sets of independent
  y's: texts' p-values are independent, and exact (the soft detector's conditional null included).
* SynthID: the g-values of distinct windows are independent Bernoulli(½) bits.
* KGW: the places of *different* tokens in *one* context's keyed permutation are drawn without
  replacement, so two kept windows with one context are green together with probability
  g(g − 1) / (V(V − 1)) instead of (g / V)² (g = ⌊γV⌋): a negative correlation of −γ(1 − γ)/(V − 1)
  (−3.8e-6 at V = 49,152, γ = 0.25), which can only narrow the spread of the count of flagged texts.
  ``unit="context"`` removes it: it keeps one window per *context*, every value of the corpus then
  independent for every scheme, at the cost of more dropped tokens.

Each text's own p-value stays exact: the dedup mask is a function of the corpus's tokens alone (never
of the key), and any key-independent choice of scored positions keeps the null. So per-key false positives
over a deduped corpus are a sum of independent Bernoulli(≤ α) variables (= α for continuous nulls,
≤ α for the discrete ones or texts left with nothing to score): never above Binomial(n, α) in
distribution. The price is power on texts whose windows an earlier text already holds: a watermarked
text that quotes a template keeps only its own windows. Departure from the published schemes: none of
them dedups across texts; this is our addition for corpus-level false-positive control.

Windows are hashed to 64 bits (:func:`window_hashes`: a splitmix64 chain over the h + 1 token ids). A
collision makes two different windows look equal and drops the later one: a key-independent mask
still, so it costs a scored token and never validity (at 10⁶ distinct windows the chance of any
collision is 3e-8).

**Shared-context measure** (:func:`shared_context_fraction`, :attr:`CorpusWindows.shared_fraction`):
the share of a text's scored windows that are scored in another text of the input too;
:func:`shared_context_warning` returns a message when the corpus-wide share reaches
:data:`SHARED_CONTEXT_THRESHOLD` (most of the texts' windows shared), the case where per-key
false positives without dedup are far from binomial (``docs/repetitive_text.md``: form letters 0.89,
tables and lists 0.81; source code 0.13, ordinary prose 0.06).

**Calibration** (:func:`calibrate`): the false-positive rate of one key on the user's human texts —
flagged at α — with its exact Clopper–Pearson interval, and a warning when the interval lies above α.

The corpus state (:class:`CorpusWindows`) is a sorted array of window hashes with the number of texts
that scored each, so a tool that streams its input in batches carries it from batch to batch: the
dedup and the measure are then those of the whole input, in input order.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional

import numpy as np

from wmspec_jax import prf

WINDOW = "window"
"""Dedup unit: the (h context tokens, token) window — the unit keyed values are functions of."""
CONTEXT = "context"
"""Dedup unit: the h context tokens alone (one scored position per context per corpus)."""
UNITS = (WINDOW, CONTEXT)

SHARED_CONTEXT_THRESHOLD = 0.5
"""Corpus-wide share of scored windows that also occur in another text at which
:func:`shared_context_warning` warns: most windows shared. Ordinary prose shares a few per cent
(common phrases), templated text most; measured in ``docs/repetitive_text.md``."""

DEFAULT_LEVEL = 0.95
"""Confidence level of :func:`calibrate`'s interval."""

_SPLITMIX_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_SPLITMIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
_SPLITMIX_M2 = np.uint64(0x94D049BB133111EB)
_WINDOW_DOMAIN = np.uint64(0x77696E646F777331)  # "windows1": hashes of this module only


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele et al. 2014): a bijection of uint64 with full avalanche."""
    z = (z ^ (z >> np.uint64(30))) * _SPLITMIX_M1
    z = (z ^ (z >> np.uint64(27))) * _SPLITMIX_M2
    return z ^ (z >> np.uint64(31))


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"dedup unit must be one of {UNITS}, got {unit!r}")
    return unit


def window_hashes(tokens, context_width: int, *, unit: str = WINDOW) -> np.ndarray:
    """64-bit hash of each position's window: tokens[p − h : p] and (``unit="window"``) tokens[p].

    Context tokens before index 0 are −1, as in :func:`wmspec_jax.prf.gather_contexts`, so a
    position's hash is a function of exactly what its keyed values are a function of.

    Args:
      tokens: int[B, L] token ids (padding is hashed too; callers keep only scored positions).
      context_width: h.
      unit: :data:`WINDOW` or :data:`CONTEXT`.

    Returns:
      uint64[B, L]. Vectorised over positions: h + 1 passes over the array, no loop over tokens.
    """
    h = prf.check_context_width(context_width)
    _check_unit(unit)
    tok = np.asarray(tokens)
    if tok.ndim != 2 or not np.issubdtype(tok.dtype, np.integer):
        raise ValueError(f"tokens must be int[B, L], got {tok.dtype}{list(tok.shape)}")
    bsz, length = tok.shape
    padded = np.concatenate([np.full((bsz, h), -1, np.int64), tok.astype(np.int64)], axis=1)
    columns = h + (1 if unit == WINDOW else 0)
    acc = np.full((bsz, length), _WINDOW_DOMAIN ^ np.uint64(columns), np.uint64)
    with np.errstate(over="ignore"):
        for j in range(columns):  # column j holds tokens[p − h + j]
            ids = padded[:, j: j + length].astype(np.uint64)  # −1 wraps to 2^64 − 1: distinct from any id
            acc = _mix64(acc + _SPLITMIX_GAMMA + ids)
    return acc


class CorpusWindows(NamedTuple):
    """The scored windows of a corpus so far (the state :func:`dedup_corpus` carries across batches).

    Attributes:
      hashes: uint64[N] sorted distinct window hashes scored (within-text rule) in some text.
      counts: int64[N] how many texts scored each.
      context_width: h of the statistics they came from.
      unit: :data:`WINDOW` or :data:`CONTEXT`.
      num_texts: texts counted so far.
    """

    hashes: np.ndarray
    counts: np.ndarray
    context_width: int
    unit: str = WINDOW
    num_texts: int = 0

    @property
    def num_scored(self) -> int:
        """Scored windows summed over texts (each text's windows counted once)."""
        return int(self.counts.sum())

    @property
    def shared_fraction(self) -> float:
        """Share of the texts' scored windows that are scored in at least one other text too (NaN
        before any scored window): Σ counts[counts ≥ 2] / Σ counts."""
        total = self.num_scored
        return float(self.counts[self.counts >= 2].sum() / total) if total else float("nan")


def empty_windows(context_width: int, unit: str = WINDOW) -> CorpusWindows:
    """The state of a corpus with no text yet."""
    return CorpusWindows(np.zeros((0,), np.uint64), np.zeros((0,), np.int64), prf.check_context_width(context_width),
                         _check_unit(unit), 0)


def _context_width(stats, context_width: Optional[int]) -> int:
    prov = getattr(stats, "provenance", None)
    if prov is not None:
        if context_width is not None and int(context_width) != prov.context_width:
            raise ValueError(f"context_width={context_width} but the statistics were computed with h = "
                             f"{prov.context_width}")
        return prov.context_width
    if context_width is None:
        raise ValueError("statistics without a provenance: pass context_width (h of the watermark)")
    return prf.check_context_width(context_width)


def _scored_windows(stats, tokens, windows: Optional[CorpusWindows], context_width: Optional[int], unit: str):
    """(mask bool[B, L], hashes uint64[B, L], the corpus state) with all shapes and settings checked."""
    mask = np.asarray(stats.mask, bool)
    tok = np.asarray(tokens)
    if mask.ndim != 2:
        raise ValueError(f"statistics mask must be [B, L], got shape {mask.shape}")
    if tok.shape != mask.shape:
        raise ValueError(f"tokens {tok.shape} must be the [B, L] token ids the statistics {mask.shape} were "
                         "computed from")
    h = _context_width(stats, context_width)
    if windows is None:
        windows = empty_windows(h, unit)
    elif not isinstance(windows, CorpusWindows):
        raise TypeError(f"windows must be a CorpusWindows (from empty_windows / dedup_corpus), got "
                        f"{type(windows).__name__}")
    elif (windows.context_width, windows.unit) != (h, unit):
        raise ValueError(f"the corpus state holds windows of h = {windows.context_width}, unit {windows.unit!r}; "
                         f"these statistics have h = {h}, unit {unit!r}: one state per setting")
    return mask, window_hashes(tok, h, unit=unit), windows


def _lookup(sorted_hashes: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """counts[i] where values == sorted_hashes[i], else 0: int64 of values' shape."""
    if sorted_hashes.size == 0:
        return np.zeros(values.shape, np.int64)
    idx = np.minimum(np.searchsorted(sorted_hashes, values), sorted_hashes.size - 1)
    return np.where(sorted_hashes[idx] == values, counts[idx], 0)


def _batch_counts(rows: np.ndarray, hashes: np.ndarray) -> tuple:
    """(distinct hashes, the number of distinct rows holding each) of the scored windows of a batch."""
    if hashes.size == 0:
        return np.zeros((0,), np.uint64), np.zeros((0,), np.int64)
    order = np.lexsort((rows, hashes))
    h, r = hashes[order], rows[order]
    new_pair = np.ones(h.size, bool)
    new_pair[1:] = (h[1:] != h[:-1]) | (r[1:] != r[:-1])  # a window twice in one text counts one text
    uniq, counts = np.unique(h[new_pair], return_counts=True)
    return uniq, counts.astype(np.int64)


def _merged(windows: CorpusWindows, uniq: np.ndarray, counts: np.ndarray, num_texts: int) -> CorpusWindows:
    all_hashes = np.concatenate([windows.hashes, uniq])
    all_counts = np.concatenate([windows.counts, counts])
    merged, inverse = np.unique(all_hashes, return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=all_counts, minlength=merged.size).astype(np.int64)
    return windows._replace(hashes=merged, counts=total, num_texts=windows.num_texts + int(num_texts))


def count_windows(stats, tokens, windows: Optional[CorpusWindows] = None, *, context_width: Optional[int] = None,
                  unit: str = WINDOW) -> CorpusWindows:
    """The corpus state after adding these texts' scored windows (no dedup): for the shared-context
    measure when scoring without :func:`dedup_corpus`.

    Args:
      stats: statistics of B texts (any detection statistics: ``GumbelStats``, ``SynthIDStats``;
        only ``mask`` and the provenance's h are read).
      tokens: int[B, L] the token ids the statistics were computed from.
      windows: the state of the texts before (None: a new corpus).
      context_width: h, only for statistics without a provenance.
      unit: :data:`WINDOW` (default) or :data:`CONTEXT`.
    """
    mask, hashes, windows = _scored_windows(stats, tokens, windows, context_width, unit)
    rows = np.nonzero(mask)[0]
    return _merged(windows, *_batch_counts(rows, hashes[mask]), mask.shape[0])


def first_occurrences(mask, hashes, windows: Optional[CorpusWindows] = None) -> np.ndarray:
    """bool[B, L]: scored positions whose window is scored nowhere earlier — not in ``windows``
    (earlier batches), not in an earlier row, not earlier in the row.

    Args:
      mask: bool[B, L] positions scored by the within-text rule.
      hashes: uint64[B, L] their windows (:func:`window_hashes`).
      windows: the corpus state before this batch (None: nothing earlier).
    """
    mask = np.asarray(mask, bool)
    hashes = np.asarray(hashes, np.uint64)
    if hashes.shape != mask.shape:
        raise ValueError(f"hashes {hashes.shape} and mask {mask.shape} must have one shape")
    scored = hashes[mask]  # row-major: input order
    _, first = np.unique(scored, return_index=True)  # index of each window's first occurrence
    keep = np.zeros(scored.size, bool)
    keep[first] = True
    if windows is not None:
        keep &= _lookup(windows.hashes, scored, windows.counts) == 0
    out = np.zeros(mask.shape, bool)
    out[mask] = keep
    return out


def dedup_corpus(stats, tokens, windows: Optional[CorpusWindows] = None, *, context_width: Optional[int] = None,
                 unit: str = WINDOW) -> tuple:
    """Corpus-level dedup (module doc): each window scored at most once per corpus, at its first
    occurrence in input order.

    Args:
      stats: statistics of B texts, rows in input order (``GumbelStats`` for Gumbel-family and KGW
        texts, ``SynthIDStats``; only ``mask`` changes).
      tokens: int[B, L] the token ids the statistics were computed from (the same padding).
      windows: the corpus state after the earlier batches (None: this batch is the whole corpus).
      context_width: h, only for statistics without a provenance.
      unit: :data:`WINDOW` (default: (context, token)) or :data:`CONTEXT` (one position per context).

    Returns:
      (the statistics with ``mask`` = within-text mask ∧ first occurrence in the corpus, same type
      and provenance; the corpus state after this batch, which counts every text's windows scored by
      the within-text rule, so its :attr:`~CorpusWindows.shared_fraction` describes the texts).

    Rows that repeat an earlier row (padding rows of a batch) lose every position and add nothing.
    """
    mask, hashes, windows = _scored_windows(stats, tokens, windows, context_width, unit)
    keep = first_occurrences(mask, hashes, windows)
    rows = np.nonzero(mask)[0]
    after = _merged(windows, *_batch_counts(rows, hashes[mask]), mask.shape[0])
    new_mask = keep if isinstance(stats.mask, np.ndarray) else _like(stats.mask, keep)
    return stats._replace(mask=new_mask), after


def _like(template, values: np.ndarray):
    import jax.numpy as jnp

    return jnp.asarray(values, dtype=jnp.asarray(template).dtype)


def shared_context_fraction(stats, tokens, windows: Optional[CorpusWindows] = None, *,
                            context_width: Optional[int] = None, unit: str = WINDOW) -> np.ndarray:
    """Per text, the share of its scored windows that are scored in another text of the batch or
    of ``windows`` (earlier batches).

    Args: as :func:`count_windows`.

    Returns:
      float64[B] in [0, 1]; NaN for a text with no scored position.
    """
    mask, hashes, windows = _scored_windows(stats, tokens, windows, context_width, unit)
    rows = np.nonzero(mask)[0]
    scored = hashes[mask]
    uniq, counts = _batch_counts(rows, scored)
    in_batch = _lookup(uniq, scored, counts)  # texts of the batch holding the window, this one included
    earlier = _lookup(windows.hashes, scored, windows.counts)
    shared = (in_batch + earlier) >= 2
    n = mask.sum(axis=1)
    per_text = np.bincount(rows, weights=shared, minlength=mask.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, per_text / np.maximum(n, 1), np.nan)


def shared_context_warning(windows: CorpusWindows, *, threshold: float = SHARED_CONTEXT_THRESHOLD) -> Optional[str]:
    """A message when the texts of a corpus share most of their scored windows, else None.

    Args:
      windows: the corpus state (:func:`count_windows` / :func:`dedup_corpus`).
      threshold: the share at which to warn (:data:`SHARED_CONTEXT_THRESHOLD`).
    """
    if not 0.0 < float(threshold) <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    share = windows.shared_fraction
    if windows.num_texts < 2 or not share >= threshold:  # NaN (nothing scored) does not warn
        return None
    return (f"{share:.0%} of the scored (context, token) windows of these {windows.num_texts} texts occur in "
            f"more than one text (templated or boilerplate text): texts that share windows share their keyed "
            f"values, so under one key their false positives are not independent and the count over the "
            f"corpus is not Binomial(n, alpha) — a key may flag many of them. Each text's p-value is still "
            f"exact. Score with corpus-level dedup (each window scored once per corpus) for a binomial count.")


# ---------------------------------------------------------------------------
# Calibration of one key on human texts
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The false-positive rate of one key on human texts (:func:`calibrate`).

    Attributes:
      alpha: the significance level texts are flagged at (p ≤ alpha).
      num_texts: texts counted (with at least ``min_tokens`` scored tokens).
      num_flagged: of them, flagged.
      fpr: num_flagged / num_texts.
      low, high: its exact Clopper–Pearson interval at ``level``.
      level: the interval's confidence level.
      band: (low, high) counts a calibrated key (Binomial(num_texts, alpha)) flags with probability
        ≥ ``level``: its (1 − level)/2 and (1 + level)/2 quantiles.
      num_excluded: texts left out for having fewer than ``min_tokens`` scored tokens.
      warning: a message when the interval lies above alpha (the exact one-sided binomial test
        rejects "false-positive rate ≤ alpha" at (1 − level)/2), else None.
    """

    alpha: float
    num_texts: int
    num_flagged: int
    fpr: float
    low: float
    high: float
    level: float
    band: tuple
    num_excluded: int
    warning: Optional[str]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """One line: flagged of counted, the rate, its interval and the band of a calibrated key."""
        left_out = f" ({self.num_excluded} with too few scored tokens left out)" if self.num_excluded else ""
        return (f"{self.num_flagged} of {self.num_texts} human texts flagged at alpha={self.alpha:g}: "
                f"false-positive rate {self.fpr:.4f}, {self.level:.0%} interval [{self.low:.4f}, {self.high:.4f}]; "
                f"a calibrated key flags {self.band[0]} to {self.band[1]} of them{left_out}")


def min_calibration_texts(alpha: float, level: float = DEFAULT_LEVEL) -> int:
    """The fewest texts :func:`calibrate` accepts: ⌈ln(2 / (1 − level)) / (2 alpha)⌉.

    Why: with n texts of which none is flagged, the Clopper–Pearson upper bound is
    1 − ((1 − level)/2)^(1/n) ≈ ln(2 / (1 − level)) / n. Below this n it exceeds 2 alpha even then, so
    no outcome could show that the key's false-positive rate is within a factor of two of alpha
    (185 texts at alpha = 0.01 and level 0.95; 37 at alpha = 0.05).
    """
    a, lv = _check_alpha_level(alpha, level)
    return int(math.ceil(math.log(2.0 / (1.0 - lv)) / (2.0 * a)))


def _check_alpha_level(alpha, level) -> tuple:
    a, lv = float(alpha), float(level)
    if not 0.0 < a < 1.0 or not math.isfinite(a):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if not 0.0 < lv < 1.0 or not math.isfinite(lv):
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    return a, lv


def calibrate(pvalues, *, alpha: float = 0.01, num_scored=None, min_tokens: int = 1,
              level: float = DEFAULT_LEVEL) -> Calibration:
    """The empirical false-positive rate of one key on human texts, with its exact interval.

    Score the user's human texts (which the key cannot have watermarked) under the deployment's key
    and detector — with corpus-level dedup if the deployment uses it — and pass their p-values.

    Args:
      pvalues: float[B] p-values of B human texts (``Scores.pvalue``).
      alpha: the deployment's significance level (flag iff p ≤ alpha).
      num_scored: int[B] scored tokens per text (``Scores.num_scored``); texts with fewer than
        ``min_tokens`` are left out (a tool gives them no verdict), and counted in ``num_excluded``.
      min_tokens: see ``num_scored``.
      level: confidence level of the interval.

    Returns:
      :class:`Calibration`.

    Raises:
      ValueError: p-values not 1-D, NaN (detectors without a calibrated null: their thresholds
        come from negatives) or outside [0, 1]; alpha or level outside (0, 1); ``num_scored`` of
        another shape; fewer texts left than :func:`min_calibration_texts` (the message says why).
    """
    from scipy import stats as sps

    from wmspec_jax.detect.metrics import clopper_pearson

    a, lv = _check_alpha_level(alpha, level)
    p = np.asarray(pvalues, np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"pvalues must be float[B] with B >= 1, got shape {p.shape}")
    if np.isnan(p).any():
        raise ValueError(f"{int(np.isnan(p).sum())} p-values are NaN: calibrate needs a detector with a "
                         "calibrated null (p-values); a Bayesian detector's threshold comes from negatives "
                         "(metrics.tpr_at_fpr)")
    if ((p < 0) | (p > 1)).any():
        raise ValueError("p-values must lie in [0, 1]")
    keep = np.ones(p.shape, bool)
    if num_scored is not None:
        n_tok = np.asarray(num_scored)
        if n_tok.shape != p.shape:
            raise ValueError(f"num_scored {n_tok.shape} must match pvalues {p.shape}")
        keep = n_tok >= int(min_tokens)
    n = int(keep.sum())
    need = min_calibration_texts(a, lv)
    if n < need:
        raise ValueError(
            f"calibration at alpha={a:g} needs at least {need} human texts with >= {int(min_tokens)} scored "
            f"tokens; got {n} ({int((~keep).sum())} left out for too few tokens). With fewer, even a key that "
            f"flags none of them has a {lv:.0%} upper bound on its false-positive rate above 2 alpha, so the "
            f"count cannot show the rate is near alpha (the minimum is ln(2 / (1 - level)) / (2 alpha))")
    k = int((p[keep] <= a).sum())
    est = clopper_pearson(k, n, lv)
    tail = (1.0 - lv) / 2.0
    band = (int(sps.binom.ppf(tail, n, a)), int(sps.binom.ppf(1.0 - tail, n, a)))
    warning = None
    if est.lower > a:
        warning = (f"this key flags {k} of {n} human texts at alpha={a:g} (false-positive rate {k / n:.4f}, "
                   f"{lv:.0%} interval [{est.lower:.4f}, {est.upper:.4f}]): above alpha, beyond the {band[1]} a "
                   f"calibrated key flags with probability {1 - tail:.1%}. These texts share keyed values "
                   f"(templated or repeated text; see the shared-context warning): score with corpus-level "
                   f"dedup, or treat verdicts on such texts at this key with care")
    return Calibration(a, n, k, k / n, float(est.lower), float(est.upper), lv, band, int((~keep).sum()), warning)


__all__ = ["CONTEXT", "Calibration", "CorpusWindows", "DEFAULT_LEVEL", "SHARED_CONTEXT_THRESHOLD", "UNITS", "WINDOW",
           "calibrate", "count_windows", "dedup_corpus", "empty_windows", "first_occurrences",
           "min_calibration_texts", "shared_context_fraction", "shared_context_warning", "window_hashes"]
