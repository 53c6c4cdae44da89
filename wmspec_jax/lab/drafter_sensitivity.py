"""Does a speculative watermark's detection power depend on the draft? The measured answer.

What ``python -m experiments.drafter_sensitivity`` computes. Alg. 1's text has the target's law P
whatever the draft Q (Thm 4.1), but which tokens come from the draft stream ζ^D and which from the
target's ζ^T, and so the evidence a detector sees, depend on Q (``docs/detection.md``, "Does detection
depend on the draft?", and the exact per-token law of :mod:`wmspec_jax.score_law`). Liu et al. (2026,
"Watermarkable multi-draft speculative sampling via Poisson processes") report 6–11 points of TPR
moving with the draft for the pseudorandom-acceptance method. Here, on one target:

* **cells**: each watermarking method (``pseudorandom`` = Alg. 1, ``hu``, ``dathathri``, and ``coupled``,
  whose text is the basic watermark's whatever the draft: :mod:`wmspec_jax.methods`) under each
  draft setting: every draft of ``drafts`` with Q at the target's temperature, and ``sweep_draft`` with
  Q at each of ``draft_temperatures`` (:attr:`wmspec_jax.setting.Setting.draft_temperature`: the law
  stays P); ``basic`` (no draft) is the drafter-free reference, one cell per decoder;
* **per cell**: acceptance (the share of tokens that are accepted drafts: 1 − steps / tokens), AATPS, LOGPPL; TPR at
  p ≤ 0.01 at each of ``lengths`` generated tokens with a Clopper–Pearson 95 % interval, for the
  decoder's default key-only detector (:data:`wmspec_jax.detect.DEFAULTS`, on the answer alone as a
  user pastes it, its first h tokens context only; Ars-Prior's p is the run's share of accepted
  drafts) and for the model-assisted detector (:mod:`wmspec_jax.detect.model_assisted`: the pair's
  P and Q of each token, prompt included, weigh its keyed statistic; exact p-values given the
  models); the default detector's FPR on the human answers of the same prompts under the run's keys;
* **spread** per (decoder, method, detector, length): the largest TPR minus the smallest over the
  drafts, and over the draft temperatures, with the p-value of a chi-square test that the TPRs are
  equal (a 2 × cells contingency table; None where every cell flags all or none).

Each (run, draft) has its own keys (:func:`wmspec_jax.keys.text_keys` of the run name, which ends in
``@<draft>``), so the cells are independent samples. All exact p-values: no threshold is fitted.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
from typing import Callable, Optional, Sequence

import numpy as np

from wmspec_jax import decoders, detect, keys, methods, prf, storage, text_record
from wmspec_jax.detect import metrics
from wmspec_jax.lab import decoder_comparison, detection_rows, model_assisted_rows, runs
from wmspec_jax.sources import SOURCE_DRAFT

ALPHA = 0.01
KEY_ONLY, MODEL_ASSISTED = "key-only", "model-assisted"
DETECTORS = (KEY_ONLY, MODEL_ASSISTED)
REFERENCE = "basic"
"""The drafter-free reference method: every token from the target's stream."""


@dataclasses.dataclass(frozen=True)
class DraftSetting:
    """One draft of the target, at its own temperature or the target's.

    Attributes:
      name: the draft's label (``f3``, ``v1``, ...): part of the run names, so of the keys.
      spec: how the pair loader finds it (``--draft`` of the scripts: ``builtin``, ``builtin:PATH``, a
        checkpoint directory).
      temperature: Q's temperature, None: the target's.
    """

    name: str
    spec: str
    temperature: Optional[float] = None

    @property
    def label(self) -> str:
        return self.name if self.temperature is None else f"{self.name} (Q at T={self.temperature:g})"


@dataclasses.dataclass(frozen=True)
class SensitivitySettings:
    """The experiment's settings (the script's flags of the same names).

    Attributes:
      decoders: decoder kinds (``gumbel``, ``synthid``).
      methods: the speculative watermarking methods compared (``basic`` is added as the reference).
      drafts: (name, spec) of each draft, each run with Q at ``temperature``.
      sweep_draft: the name of the draft also run at each of ``draft_temperatures``.
      temperature: P's temperature (and Q's, outside the sweep); lookahead: K; synthid_layers: m.
      lengths: generated tokens at which TPR and FPR are reported (ascending, <= max_new_tokens).
      max_new_tokens, num_prompts, batch_size, seed: as in the other experiments.
    """

    decoders: tuple
    methods: tuple
    drafts: tuple
    sweep_draft: str
    draft_temperatures: tuple
    temperature: float
    lookahead: int
    synthid_layers: int
    lengths: tuple
    max_new_tokens: int
    num_prompts: int
    batch_size: int
    seed: int

    def __post_init__(self):
        names = [name for name, _ in self.drafts]
        if not names or len(names) != len(set(names)):
            raise ValueError("--drafts must name at least one draft, each once")
        if self.sweep_draft not in names:
            raise ValueError(f"--sweep_draft={self.sweep_draft!r} is not one of --drafts ({', '.join(names)})")
        for kind in self.decoders:
            if kind not in (decoders.GUMBEL, decoders.SYNTHID):
                raise ValueError(f"--decoders: {kind!r}; the experiment compares gumbel and synthid")
        for method in self.methods:
            spec = methods.METHODS.get(method)
            if spec is None or not (spec.speculative and spec.watermarks):
                raise ValueError(f"--methods: {method!r} is not a speculative watermarking method")
        if not 0 < self.temperature < math.inf:
            raise ValueError("--temperature must be a finite number > 0 (at 0 nothing is watermarked)")
        for t in self.draft_temperatures:
            if not 0 < t < math.inf:
                raise ValueError(f"--draft_temperatures must be finite numbers > 0, got {t}")
        if not self.lengths or list(self.lengths) != sorted(set(self.lengths)) or self.lengths[0] < 1 \
                or self.lengths[-1] > self.max_new_tokens:
            raise ValueError(f"--lengths must be ascending integers in [1, --max_new_tokens={self.max_new_tokens}]")

    def draft_settings(self) -> list:
        """Every draft at the target's temperature, then the sweep draft at each other temperature of Q."""
        specs = dict(self.drafts)
        out = [DraftSetting(name, spec) for name, spec in self.drafts]
        out += [DraftSetting(self.sweep_draft, specs[self.sweep_draft], float(t))
                for t in self.draft_temperatures if float(t) != self.temperature]
        return out

    def run(self, decoder: str, method: str, draft: Optional[DraftSetting]) -> runs.RunSpec:
        """The run of a cell; its name (and so its keys) names the draft and Q's temperature."""
        if draft is None:
            return runs.RunSpec(REFERENCE, decoder, 0, self.temperature, self.synthid_layers)
        return runs.RunSpec(method, decoder, self.lookahead, self.temperature, self.synthid_layers,
                            draft_temperature=draft.temperature, draft_label=draft.name)


def _estimate(flags: np.ndarray) -> dict:
    e = metrics.clopper_pearson(int(np.sum(flags)), int(np.size(flags)))
    return {"value": e.value, "lower": e.lower, "upper": e.upper, "flagged": int(np.sum(flags)),
            "trials": int(np.size(flags))}


def evaluate_cell(run: runs.RunSpec, draft: Optional[DraftSetting], records: Sequence[dict], pair, prompts: np.ndarray,
                  human: Sequence[Sequence[int]], secret, lengths: Sequence[int]) -> dict:
    """One cell's row (module doc) from its generated ``records`` and the ``pair`` that generated them."""
    decoder = run.watermark_decoder
    texts = [text_record.GeneratedText.from_record(r) for r in records]
    text_keys = keys.text_keys(secret, [t.index for t in texts], run=run.name)
    sources = np.concatenate([np.asarray(t.source, np.int64) for t in texts])
    draft_share = float(np.mean(sources == SOURCE_DRAFT)) if sources.size else 0.0  # Ars-Prior's p
    tokens = sum(len(t.tokens) for t in texts)
    accepted = 1.0 - sum(t.num_steps for t in texts) / max(tokens, 1)  # every step ends with one target token
    row = {"decoder": decoder.kind, "label": decoder.label, "method": run.method, "run": run.name,
           "draft": None if draft is None else draft.name,
           "temperature": run.temperature, "draft_temperature": None if draft is None else run.setting.q_temperature,
           "num_texts": len(texts), "acceptance": accepted, "aatps": float(np.mean([t.aatps for t in texts])),
           "logppl": float(np.mean([t.logppl for t in texts])), "tpr": {}, "human_fpr": {}, "num_human": 0}
    key_only = decoder_comparison.pvalues(decoder, decoder_comparison.answer_texts(texts, text_keys),
                                          pair.vocab_size, draft_share, lengths)
    row["tpr"][KEY_ONLY] = {str(n): _estimate(p <= ALPHA) for n, p in key_only.items()}
    rows = detection_rows.texts_from_records(texts, prompts, text_keys)
    assisted = model_assisted_rows.pvalues_by_length(pair, decoder.kind, rows, run, lengths,
                                                     num_layers=max(decoder.num_layers, 1))
    row["tpr"][MODEL_ASSISTED] = {str(n): _estimate(p <= ALPHA) for n, p in assisted.items()}
    usable = [i for i, h in enumerate(human) if len(h) > prf.DEFAULT_CONTEXT_WIDTH]
    row["num_human"] = len(usable)
    if usable:
        h_keys = keys.text_keys(secret, usable, run=run.name)
        neg = decoder_comparison.pvalues(decoder, decoder_comparison.human_texts(human, usable, h_keys),
                                         pair.vocab_size, draft_share, lengths)
        row["human_fpr"] = {str(n): _estimate(p <= ALPHA) for n, p in neg.items()}
    return row


def spreads(rows: Sequence[dict], lengths: Sequence[int], sweep_draft: str) -> list:
    """Per (decoder, method, detector, length, over): the TPR range over the draft settings and the
    chi-square test of equal TPRs; ``over`` is ``drafts`` (every draft at the target's temperature) or
    ``draft temperatures`` (``sweep_draft`` at each temperature of Q, the target's included)."""
    from scipy import stats as sps

    out = []
    groups = {}
    for r in rows:
        if r["draft"] is not None:
            groups.setdefault((r["decoder"], r["method"]), []).append(r)
    for (decoder, method), cells in groups.items():
        for over, members in (("drafts", [r for r in cells if r["draft_temperature"] == r["temperature"]]),
                              ("draft temperatures", [r for r in cells if r["draft"] == sweep_draft])):
            if len(members) < 2:
                continue
            for detector in DETECTORS:
                for n in lengths:
                    est = [r["tpr"][detector][str(n)] for r in members]
                    values = [e["value"] for e in est]
                    table = np.array([[e["flagged"] for e in est], [e["trials"] - e["flagged"] for e in est]])
                    p = None
                    if table[0].sum() > 0 and table[1].sum() > 0:
                        p = float(sps.chi2_contingency(table, correction=False).pvalue)
                    lo, hi = int(np.argmin(values)), int(np.argmax(values))
                    out.append({"decoder": decoder, "method": method, "detector": detector, "length": int(n),
                                "over": over, "cells": len(members), "spread": values[hi] - values[lo],
                                "lowest": _cell_name(members[lo]), "highest": _cell_name(members[hi]),
                                "equal_tpr_pvalue": p})
    return out


def _cell_name(row: dict) -> str:
    t = row["draft_temperature"]
    return f"{row['draft']} @ Q T={t:g}"


def run_experiment(s: SensitivitySettings, load_pair: Callable, prompt_set, max_prompt_tokens: int, store, secret,
                   log: Callable = print) -> dict:
    """Generates every cell's texts into ``store`` (what it lacks) and returns ``{"rows", "spreads"}``.

    ``load_pair(draft_spec)``: the target with that draft (:func:`wmspec_jax.models.pairs.load_pair`).
    """
    from wmspec_jax.models import pairs

    rows = []
    by_spec = {}
    for d in s.draft_settings():
        by_spec.setdefault(d.spec, []).append(d)
    first = True
    for spec, drafts in by_spec.items():
        pair = load_pair(spec)
        prompts, prompt_lengths = pairs.encode_prompts(pair, prompt_set.prompts, prompt_set.kind, max_prompt_tokens,
                                                       too_long="truncate")
        human = decoder_comparison.human_answers(pair, prompt_set.examples, s.max_new_tokens)
        cells = [(dec, None, None) for dec in s.decoders] if first else []
        cells += [(dec, m, d) for d in drafts for dec in s.decoders for m in s.methods]
        first = False
        for dec, method, draft in cells:
            run = s.run(dec, method, draft)
            records = runs.generate_run(run, pair, prompts, prompt_lengths, store, secret=secret, seed=s.seed,
                                        max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
                                        eos_id=None, log=log)
            row = evaluate_cell(run, draft, records, pair, prompts, human, secret, s.lengths)
            rows.append(row)
            n = str(s.lengths[-1])
            log(f"{row['label']:15s} {row['method']:12s} {'-' if draft is None else draft.label:22s} "
                f"acc {row['acceptance']:.2f} AATPS {row['aatps']:.2f} TPR@{n} key-only "
                f"{row['tpr'][KEY_ONLY][n]['value']:.2f} model-assisted {row['tpr'][MODEL_ASSISTED][n]['value']:.2f}")
    return {"rows": rows, "spreads": spreads(rows, s.lengths, s.sweep_draft)}


def write_outputs(out: str, result: dict, settings: dict) -> None:
    """``drafter_sensitivity.json`` (settings, rows, spreads), ``.csv`` (one line per cell, detector and
    length) and ``.png`` under ``out``, each written atomically."""
    storage.atomic_write_json(os.path.join(out, "drafter_sensitivity.json"), {"settings": settings, **result})
    buf = io.StringIO()
    fields = ["decoder", "method", "draft", "draft_temperature", "acceptance", "aatps", "logppl", "detector",
              "length", "tpr", "tpr_lower", "tpr_upper", "human_fpr", "num_texts"]
    writer = csv.DictWriter(buf, fields)
    writer.writeheader()
    for r in result["rows"]:
        for detector, by_length in r["tpr"].items():
            for n, e in by_length.items():
                fpr = r["human_fpr"].get(n, {}).get("value", "") if detector == KEY_ONLY else ""
                writer.writerow({"decoder": r["decoder"], "method": r["method"], "draft": r["draft"] or "",
                                 "draft_temperature": "" if r["draft_temperature"] is None else r["draft_temperature"],
                                 "acceptance": f"{r['acceptance']:.4f}", "aatps": f"{r['aatps']:.4f}",
                                 "logppl": f"{r['logppl']:.4f}", "detector": detector, "length": n,
                                 "tpr": f"{e['value']:.4f}", "tpr_lower": f"{e['lower']:.4f}",
                                 "tpr_upper": f"{e['upper']:.4f}", "human_fpr": fpr, "num_texts": r["num_texts"]})
    storage.atomic_write_text(os.path.join(out, "drafter_sensitivity.csv"), buf.getvalue())
    plot(result["rows"], os.path.join(out, "drafter_sensitivity.png"))


def plot(rows: Sequence[dict], path: str) -> None:
    """One panel per (decoder, detector): TPR at the longest length against the cell's acceptance, one
    marker per method, with 95 % intervals; the basic watermark as a horizontal band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    decs = list(dict.fromkeys(r["decoder"] for r in rows))
    longest = max(rows[0]["tpr"][KEY_ONLY], key=int)
    fig, axes = plt.subplots(len(decs), len(DETECTORS), figsize=(5.2 * len(DETECTORS), 3.8 * len(decs)),
                             squeeze=False, constrained_layout=True)
    markers = dict(zip(("pseudorandom", "hu", "dathathri", "coupled"), ("o", "s", "^", "D")))
    for i, dec in enumerate(decs):
        for j, detector in enumerate(DETECTORS):
            ax = axes[i][j]
            for r in rows:
                if r["decoder"] != dec:
                    continue
                e = r["tpr"][detector][longest]
                if r["draft"] is None:
                    ax.axhspan(e["lower"], e["upper"], color="0.85", label="basic (no draft)")
                    continue
                ax.errorbar(r["acceptance"], e["value"], yerr=[[e["value"] - e["lower"]], [e["upper"] - e["value"]]],
                            fmt=markers.get(r["method"], "x"), color=f"C{list(markers).index(r['method']) % 10}"
                            if r["method"] in markers else "k", capsize=2, ms=5,
                            mfc="none" if r["draft_temperature"] != r["temperature"] else None)
            handles = {}
            for h, lb in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lb, h)
            for m in markers:
                if any(r["method"] == m for r in rows):
                    handles.setdefault(m, plt.Line2D([], [], marker=markers[m], ls="", color=f"C{list(markers).index(m)}"))
            handles["hollow: Q at its own T"] = plt.Line2D([], [], marker="o", ls="", color="k", mfc="none")
            ax.legend(handles.values(), [("Alg. 1" if k == "pseudorandom" else k) for k in handles], fontsize=7)
            ax.set_title(f"{rows[[r['decoder'] for r in rows].index(dec)]['label']}: {detector}, {longest} tokens",
                         fontsize=9)
            ax.set_xlabel("share of tokens from accepted drafts")
            ax.set_ylabel("TPR at p ≤ 0.01")
            ax.grid(alpha=0.3)
    try:
        storage.atomic_savefig(fig, path, dpi=120)
    finally:
        plt.close(fig)


def markdown(result: dict) -> str:
    """The cells (TPR at every length for both detectors, human FPR at the longest) and the spreads."""
    rows = result["rows"]
    lengths = list(rows[0]["tpr"][KEY_ONLY])
    head = ["decoder", "method", "draft (Q's T)", "acceptance", "AATPS"]
    head += [f"{d} TPR ({n})" for d in DETECTORS for n in lengths] + [f"human FPR ({lengths[-1]})"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        q = "— (no draft)" if r["draft"] is None else f"{r['draft']} ({r['draft_temperature']:g})"
        cells = [r["label"], "Alg. 1" if r["method"] == "pseudorandom" else r["method"], q,
                 f"{r['acceptance']:.2f}", f"{r['aatps']:.2f}"]
        for d in DETECTORS:
            for n in lengths:
                e = r["tpr"][d][n]
                cells.append(f"{e['value']:.2f} [{e['lower']:.2f}, {e['upper']:.2f}]")
        fpr = r["human_fpr"].get(lengths[-1])
        cells.append("—" if fpr is None else f"{fpr['value']:.2f} ({fpr['flagged']}/{fpr['trials']})")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "| decoder | method | detector | tokens | over | spread (max − min TPR) | lowest | highest | "
            "p (equal TPRs) |", "|---|---|---|---|---|---|---|---|---|"]
    for sp in result["spreads"]:
        p = "—" if sp["equal_tpr_pvalue"] is None else f"{sp['equal_tpr_pvalue']:.3g}"
        out.append(f"| {sp['decoder']} | {'Alg. 1' if sp['method'] == 'pseudorandom' else sp['method']} | "
                   f"{sp['detector']} | {sp['length']} | {sp['over']} ({sp['cells']}) | {sp['spread']:.2f} | "
                   f"{sp['lowest']} | {sp['highest']} | {p} |")
    return "\n".join(out)


__all__ = ["ALPHA", "DETECTORS", "DraftSetting", "KEY_ONLY", "MODEL_ASSISTED", "REFERENCE", "SensitivitySettings",
           "evaluate_cell", "markdown", "plot", "run_experiment", "spreads", "write_outputs"]
