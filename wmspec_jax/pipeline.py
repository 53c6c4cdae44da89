"""The paper's LLM experiments as functions: Tables 1-2 and Figs. 2 and 5.

``experiments/speculative.py``, ``experiments/detection.py`` and
``experiments/reproduce.py`` are thin absl wrappers around
:func:`run_speculative` and :func:`run_detection`. Both share one record
store (``<output_dir>/generations.jsonl``, :mod:`wmspec_jax.runs`), so the
Alg. 1 and standard K = ``detect_lookahead`` runs of the speed table are the
positives and negatives of the detection experiment, and a rerun (or an
interrupted run) only generates what is missing.

Outputs under ``output_dir`` (all written atomically):

* ``generations.jsonl`` — one record per generated text (resumable);
* ``speculative.json`` / ``speculative.csv`` — Tables 1-2 layout;
  ``aatps.png`` — Fig. 2 left (AATPS with 95 % CIs);
* ``detection.json`` / ``detection.csv`` — TPR at 1 % FPR per length and
  detector, ROC curves; ``tpr_vs_length.png`` (Fig. 2 middle/right),
  ``roc.png`` (Fig. 5).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import time
from typing import Optional, Sequence

import numpy as np

from wmspec_jax import data, decoders, evaluation, pairs, prf, results, runs

GUMBEL, SYNTHID = decoders.GUMBEL, decoders.SYNTHID


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything an experiment run depends on (saved next to its outputs)."""

    target: str = pairs.BUILTIN
    draft: str = pairs.BUILTIN
    dtype: str = "float32"
    dataset: str = "builtin-eli5"
    num_prompts: int = 16  # texts per run of the speed table
    num_detection_texts: int = 48  # texts per detection run (half train, half test)
    max_new_tokens: int = 48
    max_prompt_tokens: int = 96
    batch_size: int = 8
    lookaheads: tuple = (2, 3, 4)
    detect_lookahead: int = 3
    gumbel_temperature: float = 0.5
    synthid_temperature: float = 0.7
    synthid_layers: int = 30
    top_k: Optional[int] = None
    stop_at_eos: bool = False
    tpr_lengths: tuple = (8, 16, 24, 32, 48)
    roc_length_gumbel: int = 200
    roc_length_synthid: int = 100
    num_resamples: int = 1000
    secret: str = "wmspec-demo-secret"
    seed: int = 0

    def public(self) -> dict:
        """The settings without the secret (results never hold key material)."""
        out = dataclasses.asdict(self)
        out["secret"] = "<not stored>"
        return out

    def temperature(self, decoder: str) -> float:
        return self.gumbel_temperature if decoder == GUMBEL else self.synthid_temperature


# Settings that change the generated texts: a resumed output_dir must keep them. (The secret is
# not stored, so it cannot be checked: use a new output_dir for a new secret.)
GENERATION_FIELDS = ("target", "draft", "dtype", "dataset", "max_new_tokens", "max_prompt_tokens",
                     "synthid_layers", "top_k", "stop_at_eos", "seed", "gumbel_temperature",
                     "synthid_temperature")


def speed_runs(s: Settings) -> list:
    """The runs of Tables 1-2: basic, standard and Alg. 1 for each decoder and K."""
    out = []
    for dec in (GUMBEL, SYNTHID):
        t = s.temperature(dec)
        out.append(runs.RunSpec("basic", dec, 0, t, s.synthid_layers))
        for k in s.lookaheads:
            out.append(runs.RunSpec("standard", dec, k, t, s.synthid_layers))
            out.append(runs.RunSpec("pseudorandom", dec, k, t, s.synthid_layers))
    return out


def detection_runs(s: Settings, decoder: str) -> tuple:
    """(positives, negatives): Alg. 1 and standard speculative sampling at K = ``detect_lookahead``."""
    t = s.temperature(decoder)
    return (runs.RunSpec("pseudorandom", decoder, s.detect_lookahead, t, s.synthid_layers),
            runs.RunSpec("standard", decoder, s.detect_lookahead, t, s.synthid_layers))


def log(msg: str) -> None:
    """Timestamped progress line on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Session:
    """Loaded pair, encoded prompts and the record store of one output directory."""

    def __init__(self, s: Settings, output_dir: str, pair: Optional[pairs.ModelPair] = None):
        self.settings, self.output_dir = s, output_dir
        os.makedirs(output_dir, exist_ok=True)
        settings_path = os.path.join(output_dir, "settings.json")
        if os.path.exists(settings_path) and os.path.exists(os.path.join(output_dir, "generations.jsonl")):
            with open(settings_path, encoding="utf-8") as f:
                old = json.load(f)
            changed = {k: (old.get(k), v) for k, v in s.public().items()
                       if k in GENERATION_FIELDS and json.loads(json.dumps(v)) != old.get(k)}
            if changed:
                raise ValueError(f"{output_dir} holds generations made with other settings {changed}; "
                                 "use a new --output_dir (records are reused on resume)")
        results.atomic_write_json(settings_path, s.public())
        need = max(s.num_prompts, s.num_detection_texts)
        prompt_set = data.load_prompt_set(s.dataset)
        if len(prompt_set) < need:
            raise ValueError(f"dataset {s.dataset!r} has {len(prompt_set)} prompts; the settings need {need} "
                             "(lower --num_prompts / --num_detection_texts or pass a larger --dataset)")
        self.prompt_set = prompt_set.take(need, seed=s.seed)
        t0 = time.perf_counter()
        self.pair = pair or pairs.load_pair(s.target, s.draft, s.dtype)
        log(f"pair {self.pair.name} ready in {time.perf_counter() - t0:.1f}s; "
             f"{need} prompts from {prompt_set.name}")
        self.prompts, self.prompt_lengths = pairs.encode_prompts(
            self.pair, self.prompt_set.prompts, self.prompt_set.kind, s.max_prompt_tokens)
        self.store = results.JsonlStore(os.path.join(output_dir, "generations.jsonl"))

    def records(self, run: runs.RunSpec, num_texts: int) -> list:
        s = self.settings
        return runs.generate_run(
            run, self.pair, self.prompts[:num_texts], self.prompt_lengths[:num_texts], self.store,
            secret=s.secret, seed=s.seed, max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
            eos_id=self.pair.eos_id if s.stop_at_eos else None, top_k=s.top_k, log=log)


def _write_csv(path: str, rows: Sequence[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    results.atomic_write_text(path, buf.getvalue())


def _label(run: runs.RunSpec) -> str:
    dec = "Gumbel-max" if run.decoder == GUMBEL else f"SynthID(m={run.num_layers})"
    return {"basic": f"basic {dec}", "standard": "Std. SpecSampl",
            "pseudorandom": f"Alg. 1 {dec}"}.get(run.method, f"{run.method} {dec}")


def run_speculative(session: Session) -> dict:
    """Tables 1-2: AATPS, PTT and LOGPPL with 95 % CIs for every speed run."""
    s = session.settings
    rows = []
    for run in speed_runs(s):
        recs = session.records(run, s.num_prompts)
        row = evaluation.speculative_row(run.name, recs)
        rows.append({"decoder": run.decoder, "temperature": run.temperature, "lookahead": run.lookahead,
                     "method": _label(run), "method_id": run.method, **row})
    summary = {"settings": s.public(), "pair": session.pair.name, "rows": rows,
               "checks": speculative_checks(rows)}
    results.atomic_write_json(os.path.join(session.output_dir, "speculative.json"), summary)
    _write_csv(os.path.join(session.output_dir, "speculative.csv"), rows)
    plot_aatps(rows, os.path.join(session.output_dir, "aatps.png"))
    return summary


def speculative_checks(rows: Sequence[dict]) -> dict:
    """The unbiasedness / efficiency checks of the issue, evaluated on the table.

    ``aatps_matches_standard``: per decoder and K, |AATPS(Alg. 1) −
    AATPS(standard)| ≤ the half-widths' root-sum-square (an approximate
    95 % test of equal means). ``logppl_agrees``: every run's LOGPPL CI
    overlaps the basic watermark's of the same decoder and temperature.
    """
    out = {"aatps_matches_standard": {}, "logppl_agrees": {}}
    by = {(r["decoder"], r["lookahead"], r["method_id"]): r for r in rows}
    for (dec, k, method), r in by.items():
        if method == "pseudorandom":
            std = by[(dec, k, "standard")]
            tol = float(np.hypot(r["aatps_ci"], std["aatps_ci"]))
            out["aatps_matches_standard"][f"{dec}-K{k}"] = bool(abs(r["aatps"] - std["aatps"]) <= tol)
    for r in rows:
        base = by[(r["decoder"], 0, "basic")]
        lo, hi = r["logppl"] - r["logppl_ci"], r["logppl"] + r["logppl_ci"]
        blo, bhi = base["logppl"] - base["logppl_ci"], base["logppl"] + base["logppl_ci"]
        out["logppl_agrees"][r["run"]] = bool(lo <= bhi and blo <= hi)
    return out


def run_detection(session: Session) -> dict:
    """Fig. 2 (TPR at 1 % FPR vs length) and Fig. 5 (ROC) for both decoders."""
    s, pair = session.settings, session.pair
    out = {"settings": s.public(), "pair": pair.name}
    for dec in (GUMBEL, SYNTHID):
        pos_run, neg_run = detection_runs(s, dec)
        pos = session.records(pos_run, s.num_detection_texts)
        neg = session.records(neg_run, s.num_detection_texts)
        (ptr, pte), (ntr, nte) = evaluation.split_half(pos), evaluation.split_half(neg)
        texts = {k: evaluation.texts_from_records(v, session.prompts, s.secret)
                 for k, v in (("ptr", ptr), ("pte", pte), ("ntr", ntr), ("nte", nte))}
        common = dict(lengths=s.tpr_lengths, vocab_size=pair.vocab_size, context_width=prf.DEFAULT_CONTEXT_WIDTH,
                      seed=s.seed, num_resamples=s.num_resamples)
        log(f"detection: scoring {dec} ({len(pos)} watermarked, {len(neg)} unwatermarked texts)")
        if dec == GUMBEL:
            res = evaluation.evaluate_gumbel(texts["ptr"], texts["pte"], texts["nte"],
                                             roc_length=s.roc_length_gumbel, **common)
        else:
            res = evaluation.evaluate_synthid(texts["ptr"], texts["ntr"], texts["pte"], texts["nte"],
                                              num_layers=s.synthid_layers, roc_length=s.roc_length_synthid,
                                              **common)
        res.update(positives=pos_run.name, negatives=neg_run.name, temperature=pos_run.temperature)
        out[dec] = res
    results.atomic_write_json(os.path.join(session.output_dir, "detection.json"), out)
    rows = []
    for dec in (GUMBEL, SYNTHID):
        for name, curve in out[dec]["tpr"].items():
            for length, est in zip(out[dec]["lengths"], curve):
                rows.append({"decoder": dec, "detector": name, "tokens": length, "tpr": est["value"],
                             "tpr_lower": est["lower"], "tpr_upper": est["upper"]})
    _write_csv(os.path.join(session.output_dir, "detection.csv"), rows)
    plot_detection(out, os.path.join(session.output_dir, "tpr_vs_length.png"),
                   os.path.join(session.output_dir, "roc.png"))
    return out


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------


def plot_aatps(rows: Sequence[dict], path: str) -> None:
    """Fig. 2 left: AATPS of Alg. 1 vs standard speculative sampling per K (95 % CIs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = [r for r in rows if r["lookahead"] > 0]
    groups = sorted({(r["decoder"], r["lookahead"]) for r in spec})
    methods = ["Std. SpecSampl", "Alg. 1"]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    width = 0.38
    for j, m in enumerate(methods):
        vals, errs = [], []
        for g in groups:
            r = next(r for r in spec if (r["decoder"], r["lookahead"]) == g and r["method"].startswith(m))
            vals.append(r["aatps"])
            errs.append(r["aatps_ci"])
        ax.bar(np.arange(len(groups)) + (j - 0.5) * width, vals, width, yerr=errs, capsize=3, label=m)
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels([f"{'Gumbel' if d == GUMBEL else 'SynthID'}\nK={k}" for d, k in groups])
    ax.set_ylabel("AATPS")
    ax.set_ylim(1, None)
    ax.legend(frameon=False)
    ax.set_title("Average accepted tokens per step (95% CI)")
    fig.tight_layout()
    results.atomic_savefig(fig, path, dpi=130)
    plt.close(fig)


def plot_detection(out: dict, tpr_path: str, roc_path: str) -> None:
    """Fig. 2 middle/right (TPR at 1 % FPR vs tokens) and Fig. 5 (ROC)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, dec in zip(axes, (GUMBEL, SYNTHID)):
        res = out[dec]
        for name, curve in res["tpr"].items():
            v = [e["value"] for e in curve]
            ax.plot(res["lengths"], v, marker="o", ms=3, label=name)
            ax.fill_between(res["lengths"], [e["lower"] for e in curve], [e["upper"] for e in curve], alpha=0.15)
        title = "Gumbel-max" if dec == GUMBEL else f"SynthID (m={res['num_layers']})"
        ax.set_title(f"{title}, T={res['temperature']:g}: TPR at 1% FPR")
        ax.set_xlabel("tokens")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    results.atomic_savefig(fig, tpr_path, dpi=130)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, dec in zip(axes, (GUMBEL, SYNTHID)):
        res = out[dec]
        for name, roc in res["roc"].items():
            ax.plot(roc["fpr"], roc["tpr"], label=f"{name} (AUC {roc['auc']:.3f})")
        ax.plot([0, 1], [0, 1], color="gray", lw=0.5, ls=":")
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlim(0, 1)
        title = "Gumbel-max" if dec == GUMBEL else "SynthID"
        ax.set_title(f"{title}: ROC at {res['roc_length']} tokens")
        ax.set_xlabel("FPR")
        ax.set_ylabel("TPR")
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    results.atomic_savefig(fig, roc_path, dpi=130)
    plt.close(fig)


# ---------------------------------------------------------------------------
# Command-line flags (absl), shared by the experiment scripts
# ---------------------------------------------------------------------------

FLAG_HELP = {
    "target": "'builtin', 'toy' or a local Hugging Face checkpoint directory (target P)",
    "draft": "'builtin', 'toy' or a local Hugging Face checkpoint directory (draft Q)",
    "dtype": "params dtype of checkpoints: float32 or bfloat16",
    "dataset": "builtin-eli5[:split], builtin-c4[:split], eli5:PATH or c4:PATH (wmspec_jax.data)",
    "num_prompts": "texts per run of the speed table (Tables 1-2)",
    "num_detection_texts": "texts per detection run (half train, half test)",
    "max_new_tokens": "generated tokens per text",
    "max_prompt_tokens": "prompts keep their last this many tokens",
    "batch_size": "rows per jitted generation call",
    "lookaheads": "K values of the speed table",
    "detect_lookahead": "K of the detection runs",
    "gumbel_temperature": "temperature of the Gumbel-max runs (paper: 0.5)",
    "synthid_temperature": "temperature of the SynthID runs (paper: 0.7)",
    "synthid_layers": "SynthID tournament layers m (paper: 30)",
    "top_k": "top-k for P and Q (0: none)",
    "stop_at_eos": "stop a text at the EOS token (default: fixed-length texts)",
    "tpr_lengths": "token lengths of the TPR curves",
    "roc_length_gumbel": "tokens of the Gumbel ROC curves (paper: 200)",
    "roc_length_synthid": "tokens of the SynthID ROC curves (paper: 100)",
    "num_resamples": "bootstrap resamples of the TPR intervals",
    "secret": "watermark secret (never written to results)",
    "seed": "seed of prompt choice and true randomness",
}


def define_flags(defaults: Settings = Settings(), *, required_defaults: bool = True) -> None:
    """Defines one absl flag per :class:`Settings` field.

    With ``required_defaults=False`` every flag defaults to ``None`` (the
    caller fills unset ones from a preset, see ``experiments/reproduce.py``).
    """
    from absl import flags

    for field in dataclasses.fields(Settings):
        value = getattr(defaults, field.name) if required_defaults else None
        help_ = FLAG_HELP[field.name]
        if field.name in ("lookaheads", "tpr_lengths"):
            flags.DEFINE_list(field.name, None if value is None else [str(v) for v in value], help_)
        elif field.type in ("int", "Optional[int]"):
            flags.DEFINE_integer(field.name, None if value is None else (value or 0), help_)
        elif field.type == "float":
            flags.DEFINE_float(field.name, value, help_)
        elif field.type == "bool":
            flags.DEFINE_bool(field.name, value, help_)
        else:
            flags.DEFINE_string(field.name, value, help_)


def settings_from_flags(base: Settings = Settings()) -> Settings:
    """:class:`Settings` from the parsed flags; unset (None) flags keep ``base``."""
    from absl import flags

    values = {}
    for field in dataclasses.fields(Settings):
        v = flags.FLAGS[field.name].value
        if v is None:
            continue
        if field.name in ("lookaheads", "tpr_lengths"):
            v = tuple(int(x) for x in v)
        if field.name == "top_k":
            v = v or None
        values[field.name] = v
    return dataclasses.replace(base, **values)


# ---------------------------------------------------------------------------
# Markdown tables (printed by the scripts, pasted into the README)
# ---------------------------------------------------------------------------


def speculative_markdown(rows: Sequence[dict]) -> str:
    """Tables 1-2 as markdown: one line per run, mean ± 95 % CI half-width."""
    lines = ["| decoder (T) | K | method | AATPS | PTT (ms) | LOGPPL |", "|---|---|---|---|---|---|"]
    for r in rows:
        dec = "Gumbel-max" if r["decoder"] == GUMBEL else "SynthID"
        lines.append(f"| {dec} ({r['temperature']:g}) | {r['lookahead'] or '-'} | {r['method']} | "
                     f"{r['aatps']:.2f} ± {r['aatps_ci']:.2f} | {r['ptt_ms']:.1f} ± {r['ptt_ms_ci']:.1f} | "
                     f"{r['logppl']:.2f} ± {r['logppl_ci']:.2f} |")
    return "\n".join(lines)


def detection_markdown(out: dict) -> str:
    """TPR at 1 % FPR per length and detector (value [95 % CI])."""
    blocks = []
    for dec in (GUMBEL, SYNTHID):
        res = out[dec]
        head = "Gumbel-max" if dec == GUMBEL else f"SynthID (m={res['num_layers']})"
        lines = [f"**{head}**, T = {res['temperature']:g}: {res['test_texts']} test texts, "
                 f"{res['test_negatives']} unwatermarked test texts",
                 "", "| detector | " + " | ".join(f"{n} tokens" for n in res["lengths"]) + " | AUC at "
                 f"{res['roc_length']} |", "|---" * (len(res["lengths"]) + 2) + "|"]
        for name, curve in res["tpr"].items():
            cells = [f"{e['value']:.2f} [{e['lower']:.2f}, {e['upper']:.2f}]" for e in curve]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {res['roc'][name]['auc']:.3f} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
