"""Figures other watermark benchmarks report, for every decoder and method of the built-in pair
(``python -m experiments.field_metrics``).

Per decoder (Gumbel-max, SynthID) and method (Alg. 1, the basic watermark), on the detection
experiment's test texts, with the method's key-only detector (:data:`DETECTORS`; exact p-values):

* **Tokens to detect** (MarkMyWords' "size"): the running p-value of each text — the detector on
  its first ℓ generated tokens, ℓ = 1, 2, ... (:func:`running_log_pvalues`) — and the first ℓ at
  which it reaches p ≤ ``size_alpha`` (:func:`tokens_to_detect`); the median over texts (∞ when half
  or more never get there) and the share never detected within the text.
* **TPR at 1 % and 0.1 % FPR against length**: the share of texts with p ≤ α at ℓ tokens, and the
  FPR of the same rule on *null* scores — the same texts under ``null_keys`` other keys each
  (:func:`null_keys`: a wrong key makes a text independent of it, so its p-value is exact; 64 texts
  × 160 keys = 10,240 null scores per length, enough to see a 0.1 % rate) — plus the TPR at the
  threshold the null scores set themselves (the ⌊αN⌋ + 1-th smallest null p-value).
* **Quality at matched strength** (WaterBench's idea: compare at equal TPR): LOGPPL (mean −log P
  under the target at temperature 1) of the watermarked texts and of unwatermarked texts of the same
  prompts (plain sampling from the target, the negatives), over the whole texts and over their first
  ℓ* tokens, ℓ* the shortest length at which the method reaches TPR ≥ ``matched_tpr`` at 1 % FPR.

Outputs (atomic): ``field_metrics.json`` / ``.csv`` / ``.md`` and ``field_metrics.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from wmspec_jax import detect, keys, prf, storage
from wmspec_jax.decoders import WatermarkDecoder
from wmspec_jax.detect import metrics, pvalues
from wmspec_jax.detect.common import TokenTerms
from wmspec_jax.lab import detection_rows, evaluation
from wmspec_jax.lab.detection_rows import TextRows
from wmspec_jax.lab.detection_experiment import DETECTORS_DIR, detection_texts
from wmspec_jax.lab.harness import Session, log
from wmspec_jax.lab.plots import _pyplot
from wmspec_jax.lab.robustness import EXTRA, basic_run
from wmspec_jax.lab.settings import GUMBEL, SYNTHID
from wmspec_jax.lab.tables import write_csv

DETECTORS = {(GUMBEL, "alg1"): "Ars-tau", (GUMBEL, "basic"): "single (target stream)",
             (SYNTHID, "alg1"): "mean (both streams)", (SYNTHID, "basic"): "mean (target stream)"}
"""The key-only detector of each (decoder, method), as in the paraphrase table."""


@dataclasses.dataclass(frozen=True)
class FieldSettings:
    """What the field metrics compute (validated when built).

    Attributes:
      alphas: FPR levels of the TPR curves.
      size_alpha: the p-value a text's running p-value must reach to count as detected.
      null_keys: other keys each text is scored under (the null scores).
      lengths: token counts of the TPR curves.
      matched_tpr: the TPR at 1 % FPR at which quality is compared.
    """

    alphas: tuple = (0.01, 0.001)
    size_alpha: float = 0.01
    null_keys: int = 160
    lengths: tuple = (8, 16, 24, 32, 48, 64, 96)
    matched_tpr: float = 0.9

    def __post_init__(self):
        object.__setattr__(self, "alphas", tuple(sorted(self.alphas, reverse=True)))
        object.__setattr__(self, "lengths", tuple(sorted(self.lengths)))
        if not self.alphas or any(not 0 < a < 1 for a in self.alphas) or not 0 < self.size_alpha < 1:
            raise ValueError(f"--alphas and --size_alpha must lie in (0, 1), got {self.alphas}, {self.size_alpha}")
        if not self.lengths or any(int(x) < 1 for x in self.lengths):
            raise ValueError(f"--field_lengths must be positive ints, got {self.lengths}")
        if isinstance(self.null_keys, bool) or not isinstance(self.null_keys, int) or self.null_keys < 1:
            raise ValueError(f"--null_keys must be an int >= 1, got {self.null_keys!r}")
        if not 0 < self.matched_tpr <= 1:
            raise ValueError(f"--matched_tpr must lie in (0, 1], got {self.matched_tpr}")


# ---------------------------------------------------------------------------
# Running p-values and tokens to detect
# ---------------------------------------------------------------------------


def running_log_pvalues(terms: TokenTerms) -> np.ndarray:
    """float64[B, N]: entry ℓ − 1 is the log p-value of the detector on each text's first ℓ generated
    positions (N the longest text; NaN past a text's end, 0 while no token is scored).

    The detector's score is a sum of per-token terms with a known null (:class:`TokenTerms`), and the
    repeated-context rule looks back only, so the prefix sums are the scores of the truncated texts.
    """
    t, mask = np.asarray(terms.terms, np.float64), np.asarray(terms.mask, bool)
    starts, lengths = np.asarray(terms.starts), np.asarray(terms.lengths)
    size = np.maximum(lengths - starts, 0)
    n = int(max(size.max(), 1))
    idx = starts[:, None] + np.arange(n)[None]
    inside = np.arange(n)[None] < size[:, None]
    idx = np.minimum(idx, t.shape[1] - 1)
    rel = np.where(inside & np.take_along_axis(mask, idx, 1), np.take_along_axis(t, idx, 1), 0.0)
    count = np.cumsum(inside & np.take_along_axis(mask, idx, 1), axis=1)
    total = np.cumsum(rel, axis=1)
    if terms.null == "gamma":
        lp = pvalues.gamma_log_sf(jnp.asarray(count, jnp.float32), jnp.asarray(total, jnp.float32))
    else:
        lp = pvalues.binomial_half_log_sf(jnp.asarray(np.round(total), jnp.float32),
                                          jnp.asarray(count * int(terms.trials), jnp.float32))
    lp = np.where(count > 0, np.asarray(lp, np.float64), 0.0)
    return np.where(inside, lp, np.nan)


def tokens_to_detect(log_p: np.ndarray, alpha: float) -> np.ndarray:
    """float[B]: the first ℓ (1-based) at which the running p-value is ≤ ``alpha``; inf if it never is."""
    hit = np.nan_to_num(np.asarray(log_p, np.float64), nan=0.0) <= np.log(alpha)
    first = np.argmax(hit, axis=1).astype(np.float64) + 1
    return np.where(hit.any(axis=1), first, np.inf)


def size_summary(ttd) -> dict:
    """Median tokens to detect (∞ when half or more texts are never detected) and the share never detected."""
    ttd = np.asarray(ttd, np.float64)
    med = float(np.median(ttd)) if ttd.size else float("nan")
    finite = ttd[np.isfinite(ttd)]
    return {"median": med, "never_share": float(np.mean(~np.isfinite(ttd))), "texts": int(ttd.size),
            "median_of_detected": float(np.median(finite)) if finite.size else float("nan")}


def rates_at(log_p: np.ndarray, length: int, alpha: float) -> dict:
    """Share of the texts with ≥ ``length`` positions whose p-value at ``length`` is ≤ ``alpha`` (Clopper–Pearson)."""
    col = np.asarray(log_p)[:, length - 1] if length <= np.shape(log_p)[1] else np.full(len(log_p), np.nan)
    col = col[np.isfinite(col)]
    e = metrics.clopper_pearson(int(np.sum(col <= np.log(alpha))), int(col.size)) if col.size else None
    return {"value": e.value if e else float("nan"), "lower": e.lower if e else float("nan"),
            "upper": e.upper if e else float("nan"), "texts": int(col.size)}


def matched_length(log_p: np.ndarray, tpr: float, alpha: float = evaluation.ALPHA):
    """The shortest ℓ at which the share of texts with p ≤ α at ℓ reaches ``tpr`` (None if none does)."""
    lp = np.asarray(log_p)
    shares = np.mean(np.nan_to_num(lp, nan=0.0) <= np.log(alpha), axis=0)
    hit = np.flatnonzero(shares >= tpr)
    return int(hit[0]) + 1 if hit.size else None


# ---------------------------------------------------------------------------
# Null scores: the texts under other keys
# ---------------------------------------------------------------------------


def null_keys(secret, run_name: str, indices, count: int, first: int = 0) -> list:
    """``count`` key sets for the texts ``indices``, none of them the generator's: the keys of runs
    ``"<run>/null-j"`` under the same secret (the detectors' provenance still matches)."""
    return [keys.text_keys(secret, [int(i) for i in indices], run=f"{run_name}/null-{j}")
            for j in range(first, first + count)]


def null_running(decoder: str, texts: TextRows, detector, secret, run_name: str, count: int, *, vocab_size: int,
                 num_layers: int) -> np.ndarray:
    """Running log p-values of the texts under ``count`` other keys each: float64[count · B, N]."""
    dec = WatermarkDecoder.from_name(decoder, num_layers)
    out = []
    for k in null_keys(secret, run_name, texts.indices, count):
        stats = detect.statistics(dec, texts.tokens, k, vocab_size=vocab_size, lengths=texts.lengths,
                                  starts=texts.starts)
        out.append(running_log_pvalues(detector.token_terms(stats, source=texts.source)))
    return np.concatenate(out)


# ---------------------------------------------------------------------------
# Quality
# ---------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("target",))
def _token_nll(target, params, tokens):
    cache = target.init_cache(tokens.shape[0], tokens.shape[1])
    logits, _ = target.step(params, cache, tokens, jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32))
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.concatenate([jnp.zeros_like(nll[:, :1]), nll], axis=1)


def token_nll(pair, texts: TextRows, batch_size: int = 8) -> np.ndarray:
    """float64[B, L]: −log P(w_t | w_<t) under the target at temperature 1 (0 at t = 0); LOGPPL's terms."""
    tok = np.asarray(texts.tokens, np.int32)
    out = []
    for lo in range(0, tok.shape[0], batch_size):
        chunk = np.zeros((batch_size, tok.shape[1]), np.int32)
        part = tok[lo:lo + batch_size]
        chunk[:part.shape[0]] = part
        out.append(np.asarray(_token_nll(pair.target, pair.target_params, jnp.asarray(chunk)))[:part.shape[0]])
    return np.concatenate(out).astype(np.float64)


def logppl(nll: np.ndarray, texts: TextRows, length=None) -> np.ndarray:
    """float64[B]: mean NLL of each text's generated tokens (its first ``length`` of them when given)."""
    starts, lengths = np.asarray(texts.starts), np.asarray(texts.lengths)
    ends = lengths if length is None else np.minimum(lengths, starts + int(length))
    pos = np.arange(nll.shape[1])[None]
    inside = (pos >= starts[:, None]) & (pos < ends[:, None])
    return np.where(inside, nll, 0.0).sum(1) / np.maximum(inside.sum(1), 1)


def compare_quality(marked, unmarked) -> dict:
    """LOGPPL of watermarked vs unwatermarked texts: means with t half-widths, difference, Welch p."""
    a, b = metrics.mean_ci(marked), metrics.mean_ci(unmarked)
    return {"watermarked": list(a), "unwatermarked": list(b), "difference": a[0] - b[0],
            "welch_p": float(sps.ttest_ind(marked, unmarked, equal_var=False).pvalue)}


# ---------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------


def method_metrics(positive: np.ndarray, null: np.ndarray, fs: FieldSettings) -> dict:
    """Tokens to detect and the TPR / null-FPR curves of one (decoder, method) from running log p-values."""
    n = positive.shape[1]
    lengths = [int(x) for x in fs.lengths if x <= n] or [n]
    curves = {}
    for alpha in fs.alphas:
        rows = []
        for ell in lengths:
            pos_col, null_col = positive[:, ell - 1], null[:, ell - 1]
            pos_col, null_col = pos_col[np.isfinite(pos_col)], null_col[np.isfinite(null_col)]
            tpr_null, _ = metrics.tpr_at_fpr(-pos_col, -null_col, alpha)
            rows.append({"tokens": ell, "tpr": rates_at(positive, ell, alpha), "null_fpr": rates_at(null, ell, alpha),
                         "tpr_at_null_threshold": tpr_null, "null_scores": int(null_col.size)})
        curves[f"{alpha:g}"] = rows
    ttd = tokens_to_detect(positive, fs.size_alpha)
    null_ttd = tokens_to_detect(null, fs.size_alpha)
    return {"size": size_summary(ttd), "tokens_to_detect": [None if not np.isfinite(x) else int(x) for x in ttd],
            "null_ever_detected": float(np.mean(np.isfinite(null_ttd))), "curves": curves,
            "matched_length": matched_length(positive, fs.matched_tpr), "max_tokens": n}


def _sets(harness: Session, dec: str) -> dict:
    """method -> (run, test rows) of one decoder, and the unwatermarked test rows (``"none"``)."""
    s = harness.settings
    t = detection_texts(harness, dec, multi_draft=False)
    brun = basic_run(s, dec)
    _, btest = detection_rows.split_train_test(harness.records(brun, s.num_detection_texts, s.detection_rows),
                                               s.num_detection_train)
    basic = detection_rows.texts_from_records(btest, harness.prompts, harness.keys_for(brun, [r["index"] for r in btest]))
    return {"alg1": (t["runs"][0], t["pte"]), "basic": (brun, basic), "none": (t["runs"][1], t["nte"]),
            "train": t["ptr"]}


def run_field_metrics(harness: Session, fs: FieldSettings = FieldSettings()) -> dict:
    """Computes the field metrics (module doc) in the harness's directory, where the detection experiment
    saved its detectors; returns the summary it writes."""
    s, pair = harness.settings, harness.pair
    out = {"settings": s.public(), "pair": pair.name, "field": dataclasses.asdict(fs), "cells": {}}
    for dec in (GUMBEL, SYNTHID):
        sets = _sets(harness, dec)
        m = WatermarkDecoder.from_name(dec, s.synthid_layers).num_layers
        provenance = detect.streams.statistics_provenance(sets["train"].keys, dec, m, prf.DEFAULT_CONTEXT_WIDTH)
        detectors = evaluation.load_set(dec, os.path.join(harness.output_dir, DETECTORS_DIR), provenance, EXTRA[dec])
        unmarked_run, unmarked = sets["none"]
        nll_none = token_nll(pair, unmarked)
        for method in ("alg1", "basic"):
            run, texts = sets[method]
            detector = detectors[DETECTORS[dec, method]]
            log(f"field metrics: {dec}/{method}: running p-values of {len(texts)} texts under "
                f"{fs.null_keys + 1} keys each")
            stats = detect.statistics(WatermarkDecoder.from_name(dec, s.synthid_layers), texts.tokens, texts.keys,
                                      vocab_size=pair.vocab_size, lengths=texts.lengths, starts=texts.starts)
            positive = running_log_pvalues(detector.token_terms(stats, source=texts.source))
            full = np.asarray(detector.score(stats, source=texts.source).log_pvalue, np.float64)
            null = null_running(dec, texts, detector, s.secret, run.name, fs.null_keys, vocab_size=pair.vocab_size,
                                num_layers=s.synthid_layers)
            cell = method_metrics(positive, null, fs)
            ends = np.asarray(texts.lengths - texts.starts) - 1
            cell["path_check_max_error"] = float(np.max(np.abs(positive[np.arange(len(ends)), ends] - full)))
            nll = token_nll(pair, texts)
            cell["quality"] = {"full": compare_quality(logppl(nll, texts), logppl(nll_none, unmarked))}
            if cell["matched_length"] is not None:
                ell = cell["matched_length"]
                cell["quality"]["matched"] = {"tokens": ell, **compare_quality(logppl(nll, texts, ell),
                                                                               logppl(nll_none, unmarked, ell))}
            cell.update(decoder=dec, method=method, run=run.name, unwatermarked_run=unmarked_run.name,
                        detector=DETECTORS[dec, method], temperature=run.temperature)
            out["cells"][f"{dec}/{method}"] = cell
    d = harness.output_dir
    storage.atomic_write_json(os.path.join(d, "field_metrics.json"), out)
    write_csv(os.path.join(d, "field_metrics.csv"), csv_rows(out))
    storage.atomic_write_text(os.path.join(d, "field_metrics.md"), field_markdown(out) + "\n")
    plot_field(out, os.path.join(d, "field_metrics.png"))
    return out


# ---------------------------------------------------------------------------
# Tables and figure
# ---------------------------------------------------------------------------


def _label(cell: dict) -> str:
    method = "Alg. 1" if cell["method"] == "alg1" else "basic"
    return f"{WatermarkDecoder.from_name(cell['decoder']).family_label}, {method}"


def csv_rows(out: dict) -> list:
    rows = []
    for cell in out["cells"].values():
        for alpha, curve in cell["curves"].items():
            for r in curve:
                rows.append({"decoder": cell["decoder"], "method": cell["method"], "detector": cell["detector"],
                             "alpha": float(alpha), "tokens": r["tokens"], "tpr": r["tpr"]["value"],
                             "tpr_lower": r["tpr"]["lower"], "tpr_upper": r["tpr"]["upper"],
                             "null_fpr": r["null_fpr"]["value"], "null_scores": r["null_scores"],
                             "tpr_at_null_threshold": r["tpr_at_null_threshold"],
                             "median_tokens_to_detect": cell["size"]["median"],
                             "never_detected": cell["size"]["never_share"]})
    return rows


def _fmt(x) -> str:
    return "∞" if x is None or not np.isfinite(x) else f"{x:g}"


def field_markdown(out: dict) -> str:
    """Three tables: tokens to detect; TPR (null FPR) at each α and length; LOGPPL at matched strength."""
    fs = out["field"]
    cells = list(out["cells"].values())
    lines = [f"Tokens to detect (running p ≤ {fs['size_alpha']:g}):", "",
             "| scheme, method | detector | median tokens | share never detected | median of detected | "
             "null texts ever detected |", "|---|---|---|---|---|---|"]
    for c in cells:
        z = c["size"]
        lines.append(f"| {_label(c)} | {c['detector']} | {_fmt(z['median'])} (of {c['max_tokens']}) | "
                     f"{z['never_share']:.3f} | {_fmt(z['median_of_detected'])} | {c['null_ever_detected']:.3f} |")
    for alpha in (f"{a:g}" for a in fs["alphas"]):
        ells = [r["tokens"] for r in cells[0]["curves"][alpha]]
        lines += ["", f"TPR at {float(alpha) * 100:g} % FPR (p ≤ {alpha}) and, in brackets, the FPR of the same rule "
                  f"on {cells[0]['curves'][alpha][0]['null_scores']:,} null scores:", "",
                  "| scheme, method | " + " | ".join(f"{e} tokens" for e in ells) + " |", "|---" * (len(ells) + 1) + "|"]
        for c in cells:
            vals = [f"{r['tpr']['value']:.3f} ({r['null_fpr']['value']:.4f})" for r in c["curves"][alpha]]
            lines.append(f"| {_label(c)} | " + " | ".join(vals) + " |")
    lines += ["", f"LOGPPL (nats/token, target at T = 1) of watermarked vs unwatermarked texts; matched: over the "
              f"first ℓ* tokens, ℓ* the shortest length with TPR ≥ {fs['matched_tpr']:g} at 1 % FPR:", "",
              "| scheme, method | full: watermarked | full: unwatermarked | Welch p | ℓ* | matched: watermarked | "
              "matched: unwatermarked | Welch p |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        q = c["quality"]
        f = q["full"]
        row = (f"| {_label(c)} | {f['watermarked'][0]:.3f} ± {f['watermarked'][1]:.3f} | {f['unwatermarked'][0]:.3f} ± "
               f"{f['unwatermarked'][1]:.3f} | {f['welch_p']:.2f} |")
        mm = q.get("matched")
        row += (f" {mm['tokens']} | {mm['watermarked'][0]:.3f} ± {mm['watermarked'][1]:.3f} | "
                f"{mm['unwatermarked'][0]:.3f} ± {mm['unwatermarked'][1]:.3f} | {mm['welch_p']:.2f} |" if mm else
                " not reached | – | – | – |")
        lines.append(row)
    return "\n".join(lines)


def plot_field(out: dict, path: str) -> None:
    """TPR at each α against length (dotted: the null FPR) and the share of texts detected by ℓ tokens."""
    plt = _pyplot()
    alphas = [f"{a:g}" for a in out["field"]["alphas"]]
    fig, axes = plt.subplots(1, len(alphas) + 1, figsize=(3.4 * (len(alphas) + 1), 3.0))
    for k, c in enumerate(out["cells"].values()):
        for ax, alpha in zip(axes, alphas):
            curve = c["curves"][alpha]
            ells = [r["tokens"] for r in curve]
            ax.plot(ells, [r["tpr"]["value"] for r in curve], marker="o", ms=3, color=f"C{k}", label=_label(c))
            ax.plot(ells, [r["null_fpr"]["value"] for r in curve], ls=":", color=f"C{k}", lw=1)
            ax.set_title(f"TPR at {float(alpha) * 100:g} % FPR", fontsize=9)
            ax.set_xlabel("generated tokens", fontsize=8)
        ttd = np.asarray([np.inf if x is None else x for x in c["tokens_to_detect"]], np.float64)
        grid = np.arange(1, c["max_tokens"] + 1)
        axes[-1].step(grid, [np.mean(ttd <= g) for g in grid], where="post", color=f"C{k}", label=_label(c))
    axes[-1].set_title(f"detected by ℓ tokens (p ≤ {out['field']['size_alpha']:g})", fontsize=9)
    axes[-1].set_xlabel("ℓ", fontsize=8)
    for ax in axes:
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
    axes[0].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    storage.atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


__all__ = ["DETECTORS", "FieldSettings", "compare_quality", "csv_rows", "field_markdown", "logppl", "matched_length",
           "method_metrics", "null_keys", "null_running", "plot_field", "rates_at", "run_field_metrics",
           "running_log_pvalues", "size_summary", "token_nll", "tokens_to_detect"]
