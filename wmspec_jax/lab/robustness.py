"""How much editing the watermark survives (``experiments/robustness.py``).

Takes the detection experiment's texts — Alg. 1 (``pseudorandom``) and the
basic watermark of both decoders, the standard speculative samples of the
same prompts as negatives — and edits their generated tokens at rates
0-50 % (:mod:`wmspec_jax.lab.edits`: substitution, insertion, deletion, span
reordering, mixing into human text). Every edited batch is scored with the
detection experiment's detectors (the fitted ones it saved under
``detectors/``, and the key-only ones of the registry), and per edit and
rate the experiment reports:

* **TPR at 1 % FPR** with a 95 % bootstrap CI for every detector, on the
  Alg. 1 texts and on the basic-watermark texts: p ≤ 0.01 for the detectors
  with exact p-values (every Gumbel detector, the SynthID mean tests), the
  threshold from the *edited* negatives for the Bayesian SynthID detectors
  (edited unwatermarked text is still unwatermarked), and the FPR on the
  edited negatives (calibration under edits);
* **AUC** (edited positives vs edited negatives) with a bootstrap CI;
* **per-stream evidence** of the Alg. 1 texts, from the key alone: the mean
  excess of the draft stream's and of the target stream's per-token
  statistic over its null mean (Gumbel: −log(1 − y) − 1; SynthID: mean g −
  ½), and the *acceptance-u* evidence — how much u still tells which stream
  produced a token: the mean of (E^D − E^T)·sign(½ − u) (Gumbel; SynthID:
  (ḡ^D − ḡ^T)·sign(½ − u)), 0 under H0 and for the basic watermark; plus the
  share of generated tokens still in their original context (:func:`edits_lib.intact`);
* **orderings**: exact McNemar tests of Oracle vs Ars-τ, soft vs Ars-τ and
  Ars-τ vs Ars-Prior (SynthID: Oracle vs Bayes-MLP vs Bayes-Prior) on the
  same texts at each rate.

At 0 % edits the texts are the detection experiment's, scored identically
(same detectors, same keyed Ars-Prior coins, same sources), so every Gumbel
detector's TPR equals ``detection.json``'s at the full text length:
``robustness.json`` → ``zero_edit_check``. (The SynthID detectors are
thresholded on negatives of other sets there — human answers that reach the
length — and on the edited model negatives here, so they are not compared.)

Resumable: each (decoder, edit, rate) cell is one record of
``robustness_cells.jsonl``; a rerun computes only missing cells, and reuses
``detection.json`` and the saved detectors when they were made with the same
settings, secret fingerprint and pair (:func:`saved_detection`). Outputs
(atomic): ``robustness.json``, ``robustness.csv``, ``robustness.md``,
``robustness.png`` (TPR vs edit rate) and ``robustness_streams.png``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from typing import Sequence

import jax
import numpy as np

from wmspec_jax import detect, prf, storage
from wmspec_jax.decoders import WatermarkDecoder
from wmspec_jax.lab import detection_rows, evaluation, runs
from wmspec_jax.lab.detection_rows import TextRows
from wmspec_jax.lab import edits as edits_lib
from wmspec_jax.detect import metrics
from wmspec_jax.lab.detection_experiment import DETECTORS_DIR, detection_runs, detection_texts, run_detection
from wmspec_jax.lab.harness import Session, log
from wmspec_jax.lab.settings import GUMBEL, SYNTHID, Settings
from wmspec_jax.lab.plots import _pyplot
from wmspec_jax.lab.tables import write_csv

ALPHA = evaluation.ALPHA
CELLS = "robustness_cells.jsonl"
SETS = ("alg1", "basic")
BASIC_DETECTOR = {GUMBEL: "single (target stream)", SYNTHID: "mean (target stream)"}
EXTRA = {GUMBEL: {}, SYNTHID: {"mean (target stream)": "synthid-mean-target"}}
ORDERINGS = {GUMBEL: (("Oracle", "Ars-tau"), ("soft (ours)", "Ars-tau"), ("Ars-tau", "Ars-Prior")),
             SYNTHID: (("Oracle", "Bayes-MLP"), ("Bayes-MLP", "Bayes-Prior"))}


@dataclasses.dataclass(frozen=True)
class RobustnessSettings:
    """What the robustness experiment edits (validated when built).

    Attributes:
      edits: edit kinds (:data:`wmspec_jax.edits_lib.EDITS`).
      rates: edit rates in [0, 1] (0 = the detection experiment's texts).
      span: tokens per span of the ``reorder`` edit.
      num_auc_resamples: bootstrap resamples of the AUC intervals.
    """

    edits: tuple = edits_lib.EDITS
    rates: tuple = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    span: int = edits_lib.DEFAULT_SPAN
    num_auc_resamples: int = 300

    def __post_init__(self):
        for name in ("edits", "rates"):
            if isinstance(getattr(self, name), (list, np.ndarray)):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        if not self.edits or any(e not in edits_lib.EDITS for e in self.edits) or len(set(self.edits)) != len(self.edits):
            raise ValueError(f"--edits must be distinct names from {edits_lib.EDITS}, got {list(self.edits)}")
        if not self.rates or any(not (0.0 <= float(r) <= 1.0) for r in self.rates) or len(set(self.rates)) != len(
                self.rates):
            raise ValueError(f"--edit_rates must be distinct numbers in [0, 1], got {list(self.rates)}")
        object.__setattr__(self, "rates", tuple(sorted(float(r) for r in self.rates)))
        for name in ("span", "num_auc_resamples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"--{'reorder_span' if name == 'span' else name} must be an int >= 1, got {v!r}")


def basic_run(s: Settings, decoder: str) -> runs.RunSpec:
    """The basic (non-speculative) watermark of ``decoder`` at the detection runs' temperature."""
    return runs.RunSpec("basic", decoder, 0, s.temperature(decoder), s.synthid_layers)


def human_pool(session: Session) -> np.ndarray:
    """Token ids of every human answer / continuation of the session's prompt set, concatenated."""
    ids = [session.pair.encode_text(e.human) for e in session.prompt_set.examples if e.human.strip()]
    if not ids:
        raise ValueError(f"dataset {session.settings.dataset!r} has no human texts to mix into; drop 'mix' from "
                         "--edits")
    return np.concatenate([np.asarray(x, np.int32) for x in ids])


# ---------------------------------------------------------------------------
# Editing a batch of texts
# ---------------------------------------------------------------------------


def edit_texts(texts: TextRows, kind: str, rate: float, *, seed: Sequence[int], width: int, vocab_size: int,
               human=None, span: int = edits_lib.DEFAULT_SPAN,
               context_width: int = prf.DEFAULT_CONTEXT_WIDTH) -> TextRows:
    """:class:`~wmspec_jax.lab.detection_rows.TextRows` with their generated part edited.

    The prompt stays; the generated tokens are edited with a generator seeded
    by ``seed + [text index]`` (a text's edit does not depend on its batch).
    Sources follow the tokens (−1 for new ones); ``intact`` marks generated
    tokens still in their original context. Rows are padded to ``width``.
    """
    n = len(texts)
    tokens = np.zeros((n, width), np.int32)
    source = np.full((n, width), -1, np.int8)
    intact = np.zeros((n, width), bool)
    lengths = np.zeros(n, np.int32)
    for row in range(n):
        start, end = int(texts.starts[row]), int(texts.lengths[row])
        gen = texts.tokens[row, start:end]
        rng = np.random.default_rng(list(seed) + [int(texts.indices[row])])
        e = edits_lib.apply(kind, gen, rate, rng, vocab_size=vocab_size, human=human, span=span)
        total = start + e.tokens.size
        if total > width:
            raise ValueError(f"an edited text has {total} tokens, more than the batch width {width}")
        tokens[row, :start] = texts.tokens[row, :start]
        tokens[row, start:total] = e.tokens
        src = texts.source[row, start:end]
        source[row, start:total] = np.where(e.origin >= 0, src[np.maximum(e.origin, 0)], -1)
        intact[row, start:total] = edits_lib.intact(e.origin, context_width, prefix=start)
        lengths[row] = max(total, 1)
    candidate = np.zeros((n, width), np.int8)  # edited texts are scored as one chain's
    return texts.replace(tokens=tokens, source=source, lengths=lengths, candidate=candidate, intact=intact)


# ---------------------------------------------------------------------------
# One cell: a decoder, an edit, a rate
# ---------------------------------------------------------------------------


def _statistics(decoder: str, texts: TextRows, vocab_size: int, num_layers: int):
    return detect.statistics(WatermarkDecoder.from_name(decoder, num_layers), texts, texts.keys, vocab_size=vocab_size)


def stream_evidence(stats, intact) -> dict:
    """Per-text evidence of each stream (module doc), averaged over texts with a t interval.

    Returns:
      {"draft", "target", "accept_u", "intact_fraction", "scored_fraction"}: each (mean, CI half-width).
    """
    mask = np.asarray(stats.mask)
    u = np.asarray(stats.u, np.float64)
    draft, target = stats.excess()
    align = (draft - target) * np.sign(0.5 - u)
    n = mask.sum(1)
    ok = n > 0

    def per_text(x):
        return np.where(ok, np.where(mask, x, 0.0).sum(1) / np.maximum(n, 1), np.nan)

    gen_len = np.maximum(np.asarray(stats.lengths) - np.asarray(stats.starts), 1)
    out = {name: metrics.mean_ci(per_text(x)) for name, x in (("draft", draft), ("target", target),
                                                                 ("accept_u", align))}
    out["intact_fraction"] = metrics.mean_ci(np.asarray(intact).sum(1) / gen_len)
    out["scored_fraction"] = metrics.mean_ci(n / gen_len)
    return {k: [float(a), float(b)] for k, (a, b) in out.items()}


def _estimate(e) -> list:
    return [float(e.value), float(e.lower), float(e.upper)]


def score_cell(decoder: str, detectors: dict, sets: dict, negatives: dict, *, vocab_size: int, num_layers: int,
               num_resamples: int, num_auc_resamples: int, rng) -> dict:
    """Metrics of one edited cell (module doc): TPR, AUC, FPR, stream evidence, orderings."""
    neg_stats = _statistics(decoder, negatives, vocab_size, num_layers)
    neg_scores = evaluation.score_set(detectors, neg_stats, negatives)
    out = {"fpr": {}, "sets": {}}
    for label, sc in neg_scores.items():
        if detectors[label].calibrated:
            flags_ = evaluation.flagged(True, np.asarray(detect.decision_scores(sc)), None)
            out["fpr"][label] = _estimate(metrics.clopper_pearson(int(flags_.sum()), flags_.size))
    for k, (set_name, texts) in enumerate(sets.items()):
        stats = _statistics(decoder, texts, vocab_size, num_layers)
        pos_scores = evaluation.score_set(detectors, stats, texts)
        res = {"tpr": {}, "auc": {}, "flags": {}}
        for j, (label, sc) in enumerate(pos_scores.items()):
            key = jax.random.fold_in(rng, 10 * k + j)
            pos_d = np.asarray(detect.decision_scores(sc), np.float64)
            neg_d = np.asarray(detect.decision_scores(neg_scores[label]), np.float64)
            pos_d, neg_d = np.nan_to_num(pos_d, nan=0.0), np.nan_to_num(neg_d, nan=0.0)  # no token scored: no evidence
            calibrated = detectors[label].calibrated
            est = evaluation.tpr_estimate(calibrated, pos_d, neg_d, key, num_resamples=num_resamples)
            flagged = evaluation.flagged(calibrated, pos_d, neg_d)
            res["tpr"][label] = _estimate(est)
            res["auc"][label] = _estimate(metrics.bootstrap_auc(pos_d, neg_d, jax.random.fold_in(key, 1),
                                                                num_resamples=num_auc_resamples))
            res["flags"][label] = flagged.astype(int).tolist()
        res["evidence"] = stream_evidence(stats, texts.intact)
        res["orderings"] = {}
        for better, worse in ORDERINGS[decoder]:
            cmp = metrics.paired_comparison(np.asarray(res["flags"][better], bool), np.asarray(res["flags"][worse], bool))
            res["orderings"][f"{better} vs {worse}"] = cmp._asdict()
        out["sets"][set_name] = res
    out["negatives_evidence"] = stream_evidence(neg_stats, negatives.intact)
    return out


# ---------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------


def _texts_of(harness: Session, run: runs.RunSpec, records: list) -> TextRows:
    return detection_rows.texts_from_records(records, harness.prompts,
                                             harness.keys_for(run, [r["index"] for r in records]))


def cell_id(decoder: str, kind: str, rate: float) -> str:
    return f"{decoder}/{kind}/{rate:g}"


def run_robustness(harness: Session, rs: RobustnessSettings = RobustnessSettings(), *, detection=None) -> dict:
    """Runs (or resumes) the robustness experiment in the harness's directory; returns the summary.

    ``detection``: the detection experiment's result on the same harness
    (:func:`run_detection`); run here when not given (it also saves the
    fitted detectors this experiment loads).
    """
    s, pair = harness.settings, harness.pair
    out_dir = harness.output_dir
    if detection is None:
        detection = saved_detection(harness)
        if detection is None:
            detection = run_detection(harness)
        else:
            log("robustness: reusing detection.json and the detectors it saved (same settings and secret)")
    detector_dir = os.path.join(out_dir, DETECTORS_DIR)
    store = storage.JsonlStore(os.path.join(out_dir, CELLS))
    pool = human_pool(harness) if "mix" in rs.edits else None
    width = int(harness.prompts.shape[1]) + 2 * s.max_new_tokens + 1  # insertion at most doubles a text
    todo = [(d, e, r) for d in (GUMBEL, SYNTHID) for e in rs.edits for r in rs.rates
            if not _complete(store, cell_id(d, e, r), s, rs)]
    log(f"robustness: {len(todo)} of {2 * len(rs.edits) * len(rs.rates)} cells to compute")
    progress = storage.Progress(len(todo), "robustness") if todo else None
    summary = {"settings": s.public(), "robustness": dataclasses.asdict(rs), "pair": pair.name, "decoders": {}}
    for di, dec in enumerate((GUMBEL, SYNTHID)):
        t = detection_texts(harness, dec, multi_draft=False)
        pos_run, neg_run = t["runs"]
        brun = basic_run(s, dec)
        _, basic_test = detection_rows.split_train_test(harness.records(brun, s.num_detection_texts, s.detection_rows),
                                                    s.num_detection_train)
        sets = {"alg1": t["pte"], "basic": _texts_of(harness, brun, basic_test)}
        provenance = detect.streams.statistics_provenance(
            t["ptr"].keys, dec, WatermarkDecoder.from_name(dec, s.synthid_layers).num_layers,
            prf.DEFAULT_CONTEXT_WIDTH)
        detectors = evaluation.load_set(dec, detector_dir, provenance, EXTRA[dec])
        summary["decoders"][dec] = {"runs": {"alg1": pos_run.name, "basic": brun.name, "negatives": neg_run.name},
                                    "detectors": list(detectors), "calibrated": [k for k, d in detectors.items()
                                                                                 if d.calibrated]}
        for ei, kind in enumerate(rs.edits):
            for rate in rs.rates:
                cid = cell_id(dec, kind, rate)
                if (dec, kind, rate) not in todo:
                    continue
                base_seed = [s.seed, di, ei, int(round(rate * 1000))]
                edit = dict(width=width, vocab_size=pair.vocab_size, human=pool, span=rs.span)
                edited = {name: edit_texts(x, kind, rate, seed=base_seed + [k], **edit)
                          for k, (name, x) in enumerate(sets.items())}
                negatives = edit_texts(t["nte"], kind, rate, seed=base_seed + [9], **edit)
                cell = score_cell(dec, detectors, edited, negatives, vocab_size=pair.vocab_size,
                                  num_layers=s.synthid_layers, num_resamples=s.num_resamples,
                                  num_auc_resamples=rs.num_auc_resamples,
                                  rng=jax.random.fold_in(jax.random.key(s.seed + 11), zlib.crc32(cid.encode())))
                store.add([{"id": cid, "decoder": dec, "edit": kind, "rate": rate, "settings": _fingerprint(s, rs),
                            **cell}])
                progress.update(1)
    store.close()
    cells = {cell_id(d, e, r): store.records[cell_id(d, e, r)] for d in (GUMBEL, SYNTHID) for e in rs.edits
             for r in rs.rates}
    summary["cells"] = {k: {kk: vv for kk, vv in v.items() if kk != "settings"} for k, v in cells.items()}
    summary["zero_edit_check"] = zero_edit_check(summary, detection, harness)
    storage.atomic_write_json(os.path.join(out_dir, "robustness.json"), summary)
    write_csv(os.path.join(out_dir, "robustness.csv"), csv_rows(summary))
    storage.atomic_write_text(os.path.join(out_dir, "robustness.md"), robustness_markdown(summary) + "\n")

    plot_robustness(summary, os.path.join(out_dir, "robustness.png"))
    plot_streams(summary, os.path.join(out_dir, "robustness_streams.png"))
    return summary


def saved_detection(session: Session):
    """The session directory's ``detection.json`` if a detection run with the same settings (and secret
    fingerprint) and pair wrote it together with every fitted detector; None otherwise (run it again)."""
    out_dir = session.output_dir
    try:
        with open(os.path.join(out_dir, "detection.json")) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return None
    same = (isinstance(saved, dict) and saved.get("pair") == session.pair.name
            and saved.get("settings") == json.loads(json.dumps(session.settings.public())))
    files = [os.path.join(out_dir, DETECTORS_DIR, f"{name}.npz") for names in evaluation.SAVED.values()
             for name in names.values()]
    return saved if same and all(os.path.exists(f) for f in files) else None


def _fingerprint(s: Settings, rs: RobustnessSettings) -> dict:
    """What a stored cell depends on beyond its id (a changed value recomputes it)."""
    out = {"num_detection_texts": s.num_detection_texts, "num_resamples": s.num_resamples, "span": rs.span,
           "num_auc_resamples": rs.num_auc_resamples, "synthid_mixture": s.synthid_mixture,
           "key_fingerprint": s.secret.fingerprint, "detect_lookahead": s.detect_lookahead,
           "negatives": detection_runs(s, GUMBEL)[1].method}  # they train SynthID's detectors without human text
    if s.num_detection_train is not None:  # absent = half, as in cells stored before the field existed
        out["num_detection_train"] = s.num_detection_train
    return out


def _complete(store, cid: str, s: Settings, rs: RobustnessSettings) -> bool:
    rec = store.records.get(cid)
    return rec is not None and rec.get("settings") == _fingerprint(s, rs) and "sets" in rec


def zero_edit_check(summary: dict, detection: dict, harness: Session) -> dict:
    """Gumbel detectors: TPR of the Alg. 1 texts at 0 % edits here vs ``detection.json`` at the full length."""
    out = {}
    if 0.0 not in summary["robustness"]["rates"]:
        return {"compared": False, "why": "0 is not among --edit_rates"}
    t = detection_texts(harness, GUMBEL, multi_draft=False)["pte"]
    full = int(np.max(t.lengths - t.starts))
    res = detection[GUMBEL]
    if full not in res["lengths"] or int(np.min(t.lengths - t.starts)) != full:
        return {"compared": False, "why": f"the detection experiment's TPR lengths {res['lengths']} do not include "
                                          f"the texts' full length {full} (or texts differ in length)"}
    at = res["lengths"].index(full)
    for kind in summary["robustness"]["edits"]:
        cell = summary["cells"][cell_id(GUMBEL, kind, 0.0)]["sets"]["alg1"]["tpr"]
        for label, curve in res["tpr"].items():
            mine, theirs = cell[label][0], curve[at]["value"]
            out.setdefault(label, {"robustness": mine, "detection": theirs, "equal": True})
            out[label]["equal"] &= bool(mine == theirs)
    return {"compared": True, "length": full, "detectors": out, "all_equal": all(v["equal"] for v in out.values())}


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------


def csv_rows(summary: dict) -> list:
    rows = []
    for cid, cell in summary["cells"].items():
        for set_name, res in cell["sets"].items():
            for label, (v, lo, hi) in res["tpr"].items():
                a, alo, ahi = res["auc"][label]
                f = cell["fpr"].get(label, [float("nan")] * 3)
                rows.append({"decoder": cell["decoder"], "edit": cell["edit"], "rate": cell["rate"], "texts": set_name,
                             "detector": label, "tpr": v, "tpr_lower": lo, "tpr_upper": hi, "auc": a, "auc_lower": alo,
                             "auc_upper": ahi, "fpr_on_edited_negatives": f[0]})
    return rows


def robustness_markdown(summary: dict) -> str:
    """Per decoder: TPR at 1 % FPR of every detector on the Alg. 1 texts (and the basic watermark's own
    detector on its texts) per edit and rate; CIs and AUCs are in ``robustness.json`` / ``.csv``."""
    blocks = []
    rs = summary["robustness"]
    for dec, info in summary["decoders"].items():
        labels = info["detectors"]
        basic = BASIC_DETECTOR[dec]
        head = "| edit | rate | " + " | ".join(labels) + f" | basic wm: {basic} |"
        lines = [f"**{WatermarkDecoder.from_name(dec).family_label}**: TPR at 1% FPR (Alg. 1 texts unless noted)", "",
                 head, "|---" * (len(labels) + 3) + "|"]
        for kind in rs["edits"]:
            for rate in rs["rates"]:
                cell = summary["cells"][cell_id(dec, kind, rate)]["sets"]
                vals = [f"{cell['alg1']['tpr'][k][0]:.2f}" for k in labels]
                lines.append(f"| {kind} | {rate:g} | " + " | ".join(vals) + f" | {cell['basic']['tpr'][basic][0]:.2f} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


_EDIT_TITLES = {"substitute": "substitution", "insert": "insertion", "delete": "deletion",
                "reorder": "span reordering", "mix": "mixed into human text"}


def plot_robustness(summary: dict, path: str) -> None:
    """TPR at 1 % FPR vs edit rate: one row per decoder, one column per edit; every detector on the Alg. 1
    texts (95 % bootstrap bands), the basic watermark's own detector dashed."""

    plt, fig, axes, rs, decs, rates = _panel_grid(summary, 2.9)
    for i, dec in enumerate(decs):
        labels = summary["decoders"][dec]["detectors"]
        basic = BASIC_DETECTOR[dec]
        for j, kind in enumerate(rs["edits"]):
            ax = axes[i, j]
            cells = [summary["cells"][cell_id(dec, kind, r)]["sets"] for r in rs["rates"]]
            for k, label in enumerate(labels):
                if label in EXTRA[dec]:  # the basic watermark's extra detector: dashed line below
                    continue
                est = np.asarray([c["alg1"]["tpr"][label] for c in cells])
                ax.plot(rates, est[:, 0], marker="o", ms=2.5, color=f"C{k}", label=label)
                ax.fill_between(rates, est[:, 1], est[:, 2], color=f"C{k}", alpha=0.12)
            est = np.asarray([c["basic"]["tpr"][basic] for c in cells])
            ax.plot(rates, est[:, 0], ls="--", color="k", lw=1, label=f"basic watermark: {basic}")
            ax.set_ylim(-0.02, 1.02)
            _label_panel(ax, dec, kind, "TPR at 1% FPR", bottom=i == len(decs) - 1, left=j == 0)
        axes[i, -1].legend(frameon=False, fontsize=6, loc="upper right")
    fig.tight_layout()
    storage.atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


def _panel_grid(summary: dict, row_height: float):
    """(pyplot, figure, axes[decoder, edit], the robustness settings, decoders, edit rates in %)."""
    plt = _pyplot()
    rs = summary["robustness"]
    decs = list(summary["decoders"])
    fig, axes = plt.subplots(len(decs), len(rs["edits"]), figsize=(3.0 * len(rs["edits"]), row_height * len(decs)),
                             squeeze=False, sharey=True)
    return plt, fig, axes, rs, decs, np.asarray(rs["rates"]) * 100


def _label_panel(ax, decoder: str, kind: str, ylabel: str, *, bottom: bool, left: bool) -> None:
    """Title of one (decoder, edit) panel; axis labels on the grid's bottom row and left column."""
    ax.set_title(f"{WatermarkDecoder.from_name(decoder).family_label}: {_EDIT_TITLES.get(kind, kind)}", fontsize=8)
    if bottom:
        ax.set_xlabel("human tokens (%)" if kind == "mix" else "edit rate (%)", fontsize=8)
    if left:
        ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)


def plot_streams(summary: dict, path: str) -> None:
    """Per-stream evidence of the Alg. 1 texts vs edit rate, relative to the unedited texts (draft stream,
    target stream, acceptance u), and the share of tokens still in their original context."""

    plt, fig, axes, rs, decs, rates = _panel_grid(summary, 2.7)
    names = {"draft": "draft stream", "target": "target stream", "accept_u": "acceptance u"}
    for i, dec in enumerate(decs):
        for j, kind in enumerate(rs["edits"]):
            ax = axes[i, j]
            ev = [summary["cells"][cell_id(dec, kind, r)]["sets"]["alg1"]["evidence"] for r in rs["rates"]]
            for k, (name, label) in enumerate(names.items()):
                v = np.asarray([e[name][0] for e in ev])
                base = v[0] if rs["rates"][0] == 0 and abs(v[0]) > 1e-12 else 1.0
                ax.plot(rates, v / base, marker="o", ms=2.5, color=f"C{k}", label=label)
            ax.plot(rates, [e["intact_fraction"][0] for e in ev], ls="--", color="gray", lw=1,
                    label="tokens in original context")
            ax.axhline(0, color="k", lw=0.4)
            _label_panel(ax, dec, kind, "evidence / unedited", bottom=i == len(decs) - 1, left=j == 0)
        axes[i, -1].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    storage.atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


__all__ = ["RobustnessSettings", "basic_run", "cell_id", "csv_rows", "edit_texts", "human_pool",
           "plot_robustness", "plot_streams", "robustness_markdown", "run_robustness", "saved_detection", "score_cell",
           "stream_evidence", "zero_edit_check"]
