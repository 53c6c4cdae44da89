"""Fig. 2 (TPR at 1 % FPR vs length) and Fig. 5 (ROC) for Alg. 1 with each decoder
(``experiments/detection.py``; protocol in :mod:`wmspec_jax.lab.evaluation`).

Beside the key-only detectors each decoder's result holds a model-assisted row
(:mod:`wmspec_jax.lab.model_assisted_rows`: the pair's probabilities weigh each
token; calibrated, exact p-values).

Outputs under the experiment's output directory: ``detection.json`` / ``.csv``,
``tpr_vs_length.png``, ``roc.png`` and the fitted detectors
``detectors/*.npz`` (key-free, with their provenance), which
``wmspec-detect --detector=PATH`` and the robustness experiment reuse.
"""

from __future__ import annotations

import dataclasses
import os

import jax

from wmspec_jax import detect, prf, storage
from wmspec_jax.lab import detection_rows, evaluation, model_assisted_rows, runs
from wmspec_jax.lab.plots import plot_detection
from wmspec_jax.lab.harness import Session, log
from wmspec_jax.lab.settings import GUMBEL, SYNTHID, Settings
from wmspec_jax.lab.tables import write_csv

DETECTORS_DIR = "detectors"


def detection_runs(s: Settings, decoder: str) -> tuple:
    """(positives, negatives): Alg. 1 at K = ``detect_lookahead`` and plain sampling from the target.

    The negatives' law is the target's P either way; plain sampling is used rather than standard
    speculative sampling (the same law, Thm. 4.1) because it costs less per token at a batch.
    """
    t = s.temperature(decoder)
    return (runs.RunSpec("pseudorandom", decoder, s.detect_lookahead, t, s.synthid_layers),
            runs.RunSpec("plain", decoder, 0, t, s.synthid_layers))


def detection_texts(harness: Session, decoder: str, multi_draft: bool = True) -> dict:
    """The detection experiment's texts of one decoder (generated where missing).

    Returns:
      dict of :class:`wmspec_jax.lab.detection_rows.TextRows` —
      ``ptr``, ``pte`` (Alg. 1, train / test parts: ``num_detection_train``
      texts train), ``ntr``, ``nte`` (plain sampling from the target),
      ``htr``, ``hte`` (human answers of the same prompts, or None) — every
      text keyed with the positive run's key of its index; plus ``runs``
      (positive, negative :class:`RunSpec`) and ``multi``: draft shape ->
      the test part of Alg. 1 with that shape (the ``draft_trees`` that apply
      at K = ``detect_lookahead``), keyed with its own run's keys, with
      ``siblings`` and ``run`` (empty with ``multi_draft=False``).
    """
    s = harness.settings
    pos_run, neg_run = detection_runs(s, decoder)
    pos = harness.records(pos_run, s.num_detection_texts, s.detection_rows)
    neg = harness.records(neg_run, s.num_detection_texts, s.detection_rows)
    (ptr, pte), (ntr, nte) = (detection_rows.split_train_test(r, s.num_detection_train) for r in (pos, neg))

    def texts(recs):  # every text is scored under the positive run's key of its index
        return detection_rows.texts_from_records(recs, harness.prompts,
                                             harness.keys_for(pos_run, [r["index"] for r in recs]))

    t = {"ptr": texts(ptr), "pte": texts(pte), "ntr": texts(ntr), "nte": texts(nte), "runs": (pos_run, neg_run),
         "multi": {}}
    for shape in s.shapes_at(s.detect_lookahead) if multi_draft else []:
        run = dataclasses.replace(pos_run, drafts=shape)
        _, test = detection_rows.split_train_test(harness.records(run, s.num_detection_texts, s.detection_rows),
                                              s.num_detection_train)
        part = detection_rows.texts_from_records(test, harness.prompts, harness.keys_for(run, [r["index"] for r in test]))
        t["multi"][shape] = part.replace(siblings=run.siblings, run=run.name)
    p_draft = detect.draft_fraction(t["ptr"].source, t["ptr"].source >= 0)
    rng = jax.random.key(s.seed + 7)
    human_ids = harness.human_token_ids(s.num_detection_texts)
    for name, part in (("htr", ptr), ("hte", pte)):
        idx = detection_rows.with_human(human_ids, [r["index"] for r in part])
        t[name] = (detection_rows.texts_from_human(harness.prompts, harness.prompt_lengths, human_ids, idx,
                                               harness.keys_for(pos_run, idx), p_draft,
                                               jax.random.fold_in(rng, len(name)))
                   if idx else None)
    return t


def run_detection(harness: Session) -> dict:
    """Fig. 2 (TPR at 1 % FPR vs length) and Fig. 5 (ROC) for both decoders; FPR on model and human negatives."""
    s, pair = harness.settings, harness.pair
    out = {"settings": s.public(), "pair": pair.name}
    detector_dir = os.path.join(harness.output_dir, DETECTORS_DIR)
    for dec in (GUMBEL, SYNTHID):
        t = detection_texts(harness, dec)
        pos_run, neg_run = t["runs"]
        log(f"detection: scoring {dec} ({sum(len(t[k]) for k in ('ptr', 'pte'))} watermarked, "
            f"{sum(len(t[k]) for k in ('ntr', 'nte'))} unwatermarked, "
            f"{sum(len(t[k]) for k in ('htr', 'hte') if t[k])} human texts)")
        res = evaluation.evaluate(dec, t, lengths=s.tpr_lengths, vocab_size=pair.vocab_size,
                                  context_width=prf.DEFAULT_CONTEXT_WIDTH, num_layers=s.synthid_layers, seed=s.seed,
                                  num_resamples=s.num_resamples, mixture=s.synthid_mixture, save_dir=detector_dir,
                                  roc_length=s.roc_length_gumbel if dec == GUMBEL else s.roc_length_synthid,
                                  multi_draft=t["multi"])
        for shape, part in t["multi"].items():
            res["multi_draft"][shape]["run"] = part.run
        res.update(positives=pos_run.name, negatives_run=neg_run.name, temperature=pos_run.temperature)
        log(f"detection: {dec} model-assisted (the pair's probabilities of every test text)")
        res["model_assisted"] = model_assisted_rows.model_assisted_row(pair, dec, t, pos_run, res,
                                                                       num_layers=s.synthid_layers, top_k=s.top_k)
        out[dec] = res
    storage.atomic_write_json(os.path.join(harness.output_dir, "detection.json"), out)
    rows = []
    for dec in (GUMBEL, SYNTHID):
        for drafts, res in [("1", out[dec])] + list(out[dec].get("multi_draft", {}).items()):
            for name, curve in res["tpr"].items():
                for length, est in zip(res["lengths"], curve):
                    rows.append({"decoder": dec, "drafts": drafts, "detector": name, "tokens": length,
                                 "tpr": est["value"], "tpr_lower": est["lower"], "tpr_upper": est["upper"]})
        assisted = out[dec]["model_assisted"]
        rows += [{"decoder": dec, "drafts": "1", "detector": assisted["label"], "tokens": length, "tpr": est["value"],
                  "tpr_lower": est["lower"], "tpr_upper": est["upper"]}
                 for length, est in zip(assisted["lengths"], assisted["tpr"])]
    write_csv(os.path.join(harness.output_dir, "detection.csv"), rows)
    plot_detection(out, os.path.join(harness.output_dir, "tpr_vs_length.png"),
                   os.path.join(harness.output_dir, "roc.png"))
    return out


__all__ = ["DETECTORS_DIR", "detection_runs", "detection_texts", "run_detection"]
