"""Paraphrase robustness: watermarked answers rewritten by a language model, scored three ways, beside
token substitutions at the same edit distance (``python -m experiments.robustness --paraphrase``).

Per decoder (Gumbel-max, SynthID) and method (Alg. 1, the basic watermark) the test answers of the
robustness experiment — each cut at its first end-of-turn token, the answer a reader would paraphrase —
are scored in four conditions:

* ``unedited``: the answers themselves;
* ``identity``: decoded to text and tokenised again (the round trip every rewrite goes through: a
  control that no paraphrase can beat);
* ``paraphrase``: rewritten by the paraphraser (:mod:`wmspec_jax.lab.paraphrase`; by default the
  pair's own target asked to paraphrase, plain sampling, no watermark) and tokenised with the
  detector's tokenizer, after the original prompt;
* ``substitution``: each answer with round(d · n) of its n tokens substituted at random, d the
  normalised Levenshtein distance of its paraphrase (token edits at the paraphrase's distance).

Each condition is scored by the decoder's key-only detector for that method (:data:`KEY_ONLY`), the
same detector's windowed score (:func:`wmspec_jax.detect.score_windows`, Bonferroni over windows) and
the model-assisted detector (:func:`wmspec_jax.detect.score_model_assisted`: the rewrite's tokens
weighted by the pair's probabilities under the *original* prompt). Every p-value is exact (windowed:
conservative), so TPR at 1 % FPR is the share of p ≤ 0.01 (Clopper–Pearson interval); the table also
gives the median p and what the rewrite kept (:func:`wmspec_jax.lab.paraphrase.rewrite_measures`).

Rewrites are stored in ``paraphrases.jsonl`` (one line per paraphraser, run and text, with the
paraphraser's description: another description is rewritten again), so a rerun scores without
paraphrasing. Outputs (atomic): ``paraphrase.json``, ``paraphrase.csv``, ``paraphrase.md``.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from wmspec_jax import detect, prf, storage
from wmspec_jax.decoders import WatermarkDecoder
from wmspec_jax.detect import metrics
from wmspec_jax.detect import model_replay as model_scores
from wmspec_jax.lab import detection_rows, evaluation
from wmspec_jax.lab.detection_rows import TextRows
from wmspec_jax.lab import paraphrase as para
from wmspec_jax.lab.detection_experiment import DETECTORS_DIR, detection_texts
from wmspec_jax.lab.harness import Session, log
from wmspec_jax.lab.robustness import EXTRA, basic_run
from wmspec_jax.lab.settings import GUMBEL, SYNTHID
from wmspec_jax.lab.tables import write_csv

ALPHA = evaluation.ALPHA
STORE = "paraphrases.jsonl"
CONDITIONS = ("unedited", "identity", "paraphrase", "substitution")
KINDS = ("key-only", "windowed", "model-assisted")
KEY_ONLY = {(GUMBEL, "alg1"): "Ars-tau", (GUMBEL, "basic"): "single (target stream)",
            (SYNTHID, "alg1"): "mean (both streams)", (SYNTHID, "basic"): "mean (target stream)"}
"""The key-only detector of each (decoder, method): Alg. 1's best key-only detector with an exact p-value
(Ars-τ with the τ the detection experiment fitted; SynthID's mean of both streams), the basic
watermark's own (the target stream)."""


def answers(texts: TextRows, eos_id: Optional[int]) -> TextRows:
    """Detection rows cut after their first generated ``eos_id`` (exclusive; at least one token kept)."""
    lengths = np.asarray(texts.lengths).copy()
    if eos_id is not None:
        for row in range(lengths.size):
            gen = para.generated(texts, row)
            hit = np.flatnonzero(gen == eos_id)
            if hit.size:
                lengths[row] = int(texts.starts[row]) + max(int(hit[0]), 1)
    return texts.replace(lengths=lengths.astype(np.int32))


def rewrite_set(store: storage.JsonlStore, paraphraser: para.Paraphraser, name: str, run_name: str, texts: TextRows,
                pair) -> list:
    """Token ids of each text's rewrite, from ``store`` or made now (module doc)."""
    description = para.describe(paraphraser, name)
    ids = [f"{name}/{run_name}/{int(i)}" for i in texts.indices]
    todo = [r for r, k in enumerate(ids) if store.records.get(k, {}).get("paraphraser") != description]
    if todo:
        log(f"paraphrase: {name} rewriting {len(todo)} texts of {run_name}")
        new = list(paraphraser([pair.decode(para.generated(texts, r)) for r in todo]))
        if len(new) != len(todo):
            raise ValueError(f"the paraphraser returned {len(new)} texts for {len(todo)}")
        store.add([{"id": ids[r], "paraphraser": description, "run": run_name, "index": int(texts.indices[r]),
                    "text": t, "tokens": [int(x) for x in pair.encode_text(t)]} for r, t in zip(todo, new)])
    return [store.records[k]["tokens"] or [pair.pad_id] for k in ids]


def fit_width(texts: TextRows, width: int) -> TextRows:
    """Rows padded (or cut) to ``width`` positions, so every condition shares one compiled forward pass."""
    out = {}
    for name, fill in (("tokens", 0), ("source", -1), ("candidate", 0)):
        x = np.asarray(getattr(texts, name))[:, :width]
        pad = np.full((x.shape[0], width), fill, x.dtype)
        pad[:, :x.shape[1]] = x
        out[name] = pad
    return texts.replace(**out, lengths=np.minimum(np.asarray(texts.lengths), width).astype(np.int32))


def _pvalues(dec: str, run, texts: TextRows, detector, pair, settings, min_window: int) -> dict:
    """p-values of every text under the three kinds of scores (module doc)."""
    stats = detect.statistics(WatermarkDecoder.from_name(dec, settings.synthid_layers), texts.tokens,
                              texts.keys, vocab_size=pair.vocab_size, lengths=texts.lengths,
                              starts=texts.starts)
    speculative = run.method != "basic"
    probs = model_scores.token_probs(pair, texts.tokens, lengths=texts.lengths, starts=texts.starts,
                                     temperature=run.temperature, draft_temperature=run.setting.draft_temperature,
                                     top_k=settings.top_k,
                                     lookahead=run.lookahead if speculative else None, with_draft=speculative)
    assisted = detect.score_model_assisted(stats, probs, method=run.method,
                                           lookahead=run.lookahead if speculative else None)
    windows = detect.windows.score_windows(detector, stats, source=texts.source, min_window=min_window)
    return {"key-only": detector.score(stats, source=texts.source).pvalue, "windowed": windows.pvalue,
            "model-assisted": assisted.pvalue}


def summarise(pvalues) -> dict:
    """TPR at 1 % FPR (p ≤ α, Clopper–Pearson 95 % interval) and the median p of one score."""
    p = np.asarray(pvalues, np.float64)
    e = metrics.clopper_pearson(int(np.sum(p <= ALPHA)), int(p.size))
    return {"tpr": [float(e.value), float(e.lower), float(e.upper)], "median_p": float(np.median(p)),
            "texts": int(p.size)}


def _measures_summary(m: dict) -> dict:
    return {k: float(np.mean(v)) for k, v in m.items()} | {"normalised_median": float(np.median(m["normalised"]))}


def conditions_of(harness: Session, dec: str, set_name: str, run, texts: TextRows, paraphraser, store) -> tuple:
    """(condition -> detection rows, condition -> what it kept) of one (decoder, method) (module doc)."""
    pair, s = harness.pair, harness.settings
    base = answers(texts, pair.eos_id)
    out = {"unedited": base}
    out["identity"] = para.rewrite_texts(base, rewrite_set(store, para.identity_paraphraser, "identity", run.name,
                                                           base, pair))
    out["paraphrase"] = para.rewrite_texts(base, rewrite_set(store, paraphraser, "model", run.name, base, pair))
    measures = {c: para.rewrite_measures(base, out[c]) for c in ("unedited", "identity", "paraphrase")}
    seed = [s.seed, 0 if dec == GUMBEL else 1, 0 if set_name == "alg1" else 1, 77]
    out["substitution"] = para.substitute_matched(base, measures["paraphrase"]["normalised"], seed=seed,
                                                  vocab_size=pair.vocab_size)
    measures["substitution"] = para.rewrite_measures(base, out["substitution"])
    return out, measures


def run_paraphrase(harness: Session, ps: para.ParaphraseSettings = para.ParaphraseSettings(),
                   paraphraser: Optional[para.Paraphraser] = None, decoders: tuple = (GUMBEL, SYNTHID)) -> dict:
    """Scores paraphrased answers (module doc) of ``decoders`` in the harness's directory, after the detection
    experiment saved its detectors there; ``paraphraser`` defaults to :func:`model_paraphraser` of the
    harness's pair."""
    s, pair = harness.settings, harness.pair
    paraphraser = paraphraser or para.model_paraphraser(pair, ps)
    store = storage.JsonlStore(os.path.join(harness.output_dir, STORE))
    summary = {"settings": s.public(), "pair": pair.name, "paraphraser": para.describe(paraphraser, "model"),
               "paraphrase": {k: getattr(ps, k) for k in ps.__dataclass_fields__}, "cells": {}, "examples": []}
    # one width for every condition (one compiled forward pass): room for the longest rewrite, which the
    # tokenizer's round trip may lengthen by a few tokens; longer rows are cut and counted ("cut")
    width = int(harness.prompts.shape[1]) + max(s.max_new_tokens, ps.max_new_tokens) + 32
    for dec in decoders:
        t = detection_texts(harness, dec, multi_draft=False)
        brun = basic_run(s, dec)
        _, btest = detection_rows.split_train_test(harness.records(brun, s.num_detection_texts, s.detection_rows),
                                                   s.num_detection_train)
        sets = {"alg1": (t["runs"][0], t["pte"]),
                "basic": (brun, detection_rows.texts_from_records(btest, harness.prompts, harness.keys_for(
                    brun, [r["index"] for r in btest])))}
        provenance = detect.streams.statistics_provenance(
            t["ptr"].keys, dec, WatermarkDecoder.from_name(dec, s.synthid_layers).num_layers,
            prf.DEFAULT_CONTEXT_WIDTH)
        detectors = evaluation.load_set(dec, os.path.join(harness.output_dir, DETECTORS_DIR), provenance, EXTRA[dec])
        for set_name, (run, texts) in sets.items():
            conds, measures = conditions_of(harness, dec, set_name, run, texts, paraphraser, store)
            for cond in CONDITIONS:
                log(f"paraphrase: scoring {dec}/{set_name}/{cond}")
                fitted = fit_width(conds[cond], width)
                measures[cond]["cut"] = list(np.asarray(conds[cond].lengths) > width)
                pv = _pvalues(dec, run, fitted, detectors[KEY_ONLY[dec, set_name]], pair, s, ps.min_window)
                summary["cells"][f"{dec}/{set_name}/{cond}"] = {
                    "decoder": dec, "method": set_name, "condition": cond, "run": run.name,
                    "key_only_detector": KEY_ONLY[dec, set_name], "measures": _measures_summary(measures[cond]),
                    **{kind: summarise(pv[kind]) for kind in KINDS}}
            if not summary["examples"]:
                summary["examples"] = _examples(conds, pair)
    store.close()
    out = harness.output_dir
    storage.atomic_write_json(os.path.join(out, "paraphrase.json"), summary)
    write_csv(os.path.join(out, "paraphrase.csv"), csv_rows(summary))
    storage.atomic_write_text(os.path.join(out, "paraphrase.md"), paraphrase_markdown(summary) + "\n")
    return summary


def _examples(conds: dict, pair, count: int = 2, chars: int = 300) -> list:
    return [{"original": pair.decode(para.generated(conds["unedited"], r))[:chars],
             "paraphrase": pair.decode(para.generated(conds["paraphrase"], r))[:chars]}
            for r in range(min(count, len(conds["unedited"])))]


def csv_rows(summary: dict) -> list:
    rows = []
    for cell in summary["cells"].values():
        for kind in KINDS:
            v, lo, hi = cell[kind]["tpr"]
            rows.append({"decoder": cell["decoder"], "method": cell["method"], "condition": cell["condition"],
                         "score": kind, "tpr": v, "tpr_lower": lo, "tpr_upper": hi, "median_p": cell[kind]["median_p"],
                         "texts": cell[kind]["texts"], **{f"mean_{k}": v for k, v in cell["measures"].items()}})
    return rows


def paraphrase_markdown(summary: dict) -> str:
    """One row per (decoder, method, condition): what the rewrite kept and TPR at 1 % FPR (median p) of
    each score."""
    head = ("| scheme | method | condition | norm. edit distance (mean / median) | context kept | length ratio | "
            + " | ".join(f"{k}: TPR (median p)" for k in KINDS) + " |")
    lines = [head, "|---" * (6 + len(KINDS)) + "|"]
    for cell in summary["cells"].values():
        m = cell["measures"]
        method = "Alg. 1" if cell["method"] == "alg1" else "basic"
        scores = " | ".join(f"{cell[k]['tpr'][0]:.2f} ({cell[k]['median_p']:.1e})" for k in KINDS)
        lines.append(f"| {WatermarkDecoder.from_name(cell['decoder']).family_label} | {method} | {cell['condition']} | "
                     f"{m['normalised']:.2f} / {m['normalised_median']:.2f} | {m['context_kept']:.2f} | "
                     f"{m['length_ratio']:.2f} | {scores} |")
    return "\n".join(lines)


__all__ = ["CONDITIONS", "KEY_ONLY", "KINDS", "STORE", "answers", "conditions_of", "csv_rows", "fit_width",
           "paraphrase_markdown",
           "rewrite_set", "run_paraphrase", "summarise"]
