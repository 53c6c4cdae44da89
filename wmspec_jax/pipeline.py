"""The paper's LLM experiments as functions: Tables 1-2 and Figs. 2 and 5.

``experiments/speculative.py``, ``experiments/detection.py`` and
``experiments/reproduce.py`` are thin absl wrappers around
:func:`run_speculative` and :func:`run_detection`. Both share one record
store (``<output_dir>/generations.jsonl``, :mod:`wmspec_jax.runs`), so the
Alg. 1 and standard K = ``detect_lookahead`` runs of the speed table are the
positives and negatives of the detection experiment, and a rerun (or an
interrupted run) only generates what is missing.

Safety of the outputs: :class:`Settings` are validated when built, and
:func:`preflight` checks the dataset and the model paths, so a bad flag fails
before any work; a :class:`Session` holds the output directory's lock
(:class:`wmspec_jax.results.DirectoryLock`: a second writer is refused) and
refuses to resume a directory whose generations used other settings or
another secret (by its fingerprint). The secret (:class:`wmspec_jax.keys.Secret`)
is never printed, logged or written: ``settings.json`` holds its fingerprint.

Outputs under ``output_dir`` (all written atomically):

* ``generations.jsonl`` — one record per generated text (resumable);
* ``settings.json`` — the settings (no secret; its fingerprint);
* ``speculative.json`` / ``speculative.csv`` — Tables 1-2 layout;
  ``aatps.png`` — Fig. 2 left (AATPS with 95 % CIs);
* ``detection.json`` / ``detection.csv`` — TPR at 1 % FPR per length and
  detector, FPR on each set of negatives, ROC curves; ``tpr_vs_length.png``
  (Fig. 2 middle/right), ``roc.png`` (Fig. 5); ``detectors/*.npz`` — the
  fitted detectors (key-free, with their provenance).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import time
import warnings
from typing import Optional, Sequence

import jax
import numpy as np

from wmspec_jax import data, decoders, detect, evaluation, keys, pairs, prf, results, runs

GUMBEL, SYNTHID = decoders.GUMBEL, decoders.SYNTHID
PARTS = ("speculative", "detection")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything an experiment run depends on (saved next to its outputs, without the secret).

    Validated when built (:meth:`validate`): a bad value fails before any work.
    ``secret`` accepts a :class:`wmspec_jax.keys.Secret` or the secret itself
    (stored as a ``Secret``: its ``repr`` shows only the fingerprint).
    """

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
    synthid_mixture: str = "layer"
    top_k: Optional[int] = None
    stop_at_eos: bool = False
    tpr_lengths: tuple = (8, 16, 24, 32, 48)
    roc_length_gumbel: int = 200
    roc_length_synthid: int = 100
    num_resamples: int = 1000
    seed: int = 0
    secret: keys.Secret = dataclasses.field(default=keys.Secret(keys.DEMO_SECRET), repr=False)

    def __post_init__(self):
        if not isinstance(self.secret, keys.Secret):
            object.__setattr__(self, "secret", keys.Secret(self.secret))
        for name in ("lookaheads", "tpr_lengths"):
            value = getattr(self, name)
            if isinstance(value, (list, np.ndarray)):
                object.__setattr__(self, name, tuple(value))
        self.validate()

    def validate(self) -> None:
        """Raises ValueError (naming the flag) for any setting that would fail later."""
        def positive_int(name, value, low=1):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"--{name} must be an int >= {low}, got {value!r}")

        for name in ("num_prompts", "max_new_tokens", "max_prompt_tokens", "batch_size", "detect_lookahead",
                     "synthid_layers", "roc_length_gumbel", "roc_length_synthid", "num_resamples"):
            positive_int(name, getattr(self, name))
        positive_int("num_detection_texts", self.num_detection_texts, 4)  # train/test halves, train/val split
        positive_int("seed", self.seed, 0)
        for name in ("lookaheads", "tpr_lengths"):
            values = getattr(self, name)
            if not isinstance(values, tuple) or not values:
                raise ValueError(f"--{name} must be a non-empty list, got {values!r}")
            for v in values:
                positive_int(name, v)
        if self.top_k is not None:
            positive_int("top_k", self.top_k)
        for name in ("gumbel_temperature", "synthid_temperature"):
            t = getattr(self, name)
            if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)) or not (
                    math.isfinite(t) and t >= 0):
                raise ValueError(f"--{name} must be a finite number >= 0, got {t!r}")
            if t == 0:
                warnings.warn(f"--{name}=0: greedy decoding embeds no watermark (every distribution is one-hot)",
                              stacklevel=3)
        if self.synthid_mixture not in detect.synthid.MIXTURES:
            raise ValueError(f"--synthid_mixture must be one of {detect.synthid.MIXTURES}, got "
                             f"{self.synthid_mixture!r}")
        if not isinstance(self.stop_at_eos, bool):
            raise ValueError(f"--stop_at_eos must be a bool, got {self.stop_at_eos!r}")
        for name in ("target", "draft", "dtype", "dataset"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"--{name} must be a non-empty string")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"--dtype must be float32 or bfloat16, got {self.dtype!r}")

    def public(self) -> dict:
        """The settings without the secret (results never hold key material): its fingerprint instead."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "secret"}
        out.update(secret="<not stored>", key_fingerprint=self.secret.fingerprint,
                   key_derivation=keys.KEY_DERIVATION)
        return out

    def temperature(self, decoder: str) -> float:
        return self.gumbel_temperature if decoder == GUMBEL else self.synthid_temperature


# Settings that change the generated texts: a resumed output_dir must keep them. The secret is
# compared by its fingerprint (and the key derivation), so a new secret needs a new output_dir.
GENERATION_FIELDS = ("target", "draft", "dtype", "dataset", "max_new_tokens", "max_prompt_tokens",
                     "synthid_layers", "top_k", "stop_at_eos", "seed", "gumbel_temperature",
                     "synthid_temperature", "key_fingerprint", "key_derivation")


def prompts_needed(s: Settings, parts: Sequence[str] = PARTS) -> int:
    """Prompts the requested parts use (the speed table: ``num_prompts``; detection: ``num_detection_texts``)."""
    unknown = set(parts) - set(PARTS)
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty subset of {PARTS}, got {list(parts)}")
    return max(s.num_prompts if "speculative" in parts else 0,
               s.num_detection_texts if "detection" in parts else 0)


def preflight(s: Settings, parts: Sequence[str] = PARTS) -> data.PromptSet:
    """Checks everything that can be checked before loading models; returns the loaded prompt set.

    Raises ValueError / FileNotFoundError for a bad dataset spec or file, too
    few prompts for the requested parts, or bad ``--target`` / ``--draft``.
    """
    s.validate()
    if "detection" in parts and max(s.tpr_lengths) > s.max_new_tokens:
        raise ValueError(f"--tpr_lengths {list(s.tpr_lengths)} exceed --max_new_tokens={s.max_new_tokens}: "
                         "texts that short cannot be scored at those lengths")
    pairs.check_pair_spec(s.target, s.draft, s.dtype)
    data.parse_dataset_spec(s.dataset)
    need = prompts_needed(s, parts)
    prompt_set = data.load_prompt_set(s.dataset)
    if len(prompt_set) < need:
        what = " / ".join(f"--{n}" for n, part in (("num_prompts", "speculative"),
                                                   ("num_detection_texts", "detection")) if part in parts)
        raise ValueError(f"dataset {s.dataset!r} has {len(prompt_set)} prompts; the settings need {need} "
                         f"(lower {what} or pass a larger --dataset)")
    return prompt_set


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
    """Loaded pair, encoded prompts and the record store of one output directory.

    Args:
      s: the settings.
      output_dir: where everything goes; locked for this process while the
        session is open (:meth:`close`, or use it as a context manager).
      pair: an already loaded :class:`wmspec_jax.pairs.ModelPair` (tests).
      parts: the parts that will run (``"speculative"``, ``"detection"``):
        only their prompts are needed.

    Raises:
      wmspec_jax.results.OutputDirLocked: another process writes there.
      ValueError: the directory holds generations of other settings or of
        another secret, or a preflight check fails.
    """

    def __init__(self, s: Settings, output_dir: str, pair: Optional[pairs.ModelPair] = None,
                 parts: Sequence[str] = PARTS):
        self.settings, self.output_dir, self.parts = s, output_dir, tuple(parts)
        self._lock = results.DirectoryLock(output_dir)
        try:
            self._open(pair)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, pair) -> None:
        s, output_dir = self.settings, self.output_dir
        prompt_set = preflight(s, self.parts)
        settings_path = os.path.join(output_dir, "settings.json")
        if os.path.exists(settings_path) and os.path.exists(os.path.join(output_dir, "generations.jsonl")):
            with open(settings_path, encoding="utf-8") as f:
                old = json.load(f)
            changed = {k: (old.get(k), v) for k, v in s.public().items()
                       if k in GENERATION_FIELDS and json.loads(json.dumps(v)) != old.get(k)}
            if changed:
                hint = ""
                if "key_fingerprint" in changed:
                    hint = (" (written before keys had fingerprints: its texts used the old key derivation)"
                            if changed["key_fingerprint"][0] is None else " (another secret: its fingerprint differs)")
                raise ValueError(f"{output_dir} holds generations made with other settings {changed}{hint}; "
                                 "use a new --output_dir (records are reused on resume)")
        need = prompts_needed(s, self.parts)
        self.prompt_set = prompt_set.take(need, seed=s.seed)
        t0 = time.perf_counter()
        self.pair = pair or pairs.load_pair(s.target, s.draft, s.dtype)
        log(f"pair {self.pair.name} ready in {time.perf_counter() - t0:.1f}s; "
            f"{need} prompts from {prompt_set.name}")
        self.prompts, self.prompt_lengths = pairs.encode_prompts(
            self.pair, self.prompt_set.prompts, self.prompt_set.kind, s.max_prompt_tokens)
        results.atomic_write_json(settings_path, s.public())
        self.store = results.JsonlStore(os.path.join(output_dir, "generations.jsonl"))
        if self.store.load_report():
            log(self.store.load_report())

    def close(self) -> None:
        """Releases the output directory (records and outputs stay)."""
        if getattr(self, "store", None) is not None:
            self.store.close()
        self._lock.release()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def records(self, run: runs.RunSpec, num_texts: int) -> list:
        s = self.settings
        return runs.generate_run(
            run, self.pair, self.prompts[:num_texts], self.prompt_lengths[:num_texts], self.store,
            secret=s.secret, seed=s.seed, max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
            eos_id=self.pair.eos_id if s.stop_at_eos else None, top_k=s.top_k, log=log)

    def keys_for(self, run: runs.RunSpec, indices) -> keys.StreamKeys:
        """The stream keys run ``run`` generated texts ``indices`` with."""
        return keys.text_keys(self.settings.secret, [int(i) for i in indices], run=run.name)

    def human_token_ids(self, num_texts: int) -> list:
        """Token ids of the human answer / continuation of prompts 0..num_texts-1 ([] where the
        dataset has none), at most ``max_new_tokens`` tokens (their start)."""
        out = []
        for example in self.prompt_set.examples[:num_texts]:
            ids = list(self.pair.encode_text(example.human)) if example.human.strip() else []
            out.append(ids[: self.settings.max_new_tokens])
        return out


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
    """Fig. 2 (TPR at 1 % FPR vs length) and Fig. 5 (ROC) for both decoders; FPR on model and human negatives."""
    s, pair = session.settings, session.pair
    out = {"settings": s.public(), "pair": pair.name}
    detector_dir = os.path.join(session.output_dir, "detectors")
    human_ids = session.human_token_ids(s.num_detection_texts)
    for dec in (GUMBEL, SYNTHID):
        pos_run, neg_run = detection_runs(s, dec)
        pos = session.records(pos_run, s.num_detection_texts)
        neg = session.records(neg_run, s.num_detection_texts)
        (ptr, pte), (ntr, nte) = evaluation.split_half(pos), evaluation.split_half(neg)

        def texts(recs):  # every text is scored under the positive run's key of its index
            return evaluation.texts_from_records(recs, session.prompts,
                                                 session.keys_for(pos_run, [r["index"] for r in recs]))

        t = {"ptr": texts(ptr), "pte": texts(pte), "ntr": texts(ntr), "nte": texts(nte)}
        p_draft = detect.draft_fraction(t["ptr"]["source"], t["ptr"]["source"] >= 0)
        rng = jax.random.key(s.seed + 7)
        for name, part in (("htr", ptr), ("hte", pte)):
            idx = evaluation.with_human(human_ids, [r["index"] for r in part])
            t[name] = (evaluation.texts_from_human(session.prompts, session.prompt_lengths, human_ids, idx,
                                                   session.keys_for(pos_run, idx), p_draft,
                                                   jax.random.fold_in(rng, len(name)))
                       if idx else None)
        common = dict(lengths=s.tpr_lengths, vocab_size=pair.vocab_size, context_width=prf.DEFAULT_CONTEXT_WIDTH,
                      seed=s.seed, num_resamples=s.num_resamples, save_dir=detector_dir)
        log(f"detection: scoring {dec} ({len(pos)} watermarked, {len(neg)} unwatermarked, "
            f"{sum(len(t[k]['indices']) for k in ('htr', 'hte') if t[k])} human texts)")
        if dec == GUMBEL:
            res = evaluation.evaluate_gumbel(t["ptr"], t["pte"], t["nte"], roc_length=s.roc_length_gumbel,
                                             test_human=t["hte"], **common)
        else:
            res = evaluation.evaluate_synthid(t["ptr"], t["ntr"], t["pte"], t["nte"], num_layers=s.synthid_layers,
                                              roc_length=s.roc_length_synthid, train_human=t["htr"],
                                              test_human=t["hte"], mixture=s.synthid_mixture, **common)
        res.update(positives=pos_run.name, negatives_run=neg_run.name, temperature=pos_run.temperature)
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
    "num_detection_texts": "texts per detection run (half train, half test; >= 4)",
    "max_new_tokens": "generated tokens per text",
    "max_prompt_tokens": "longest prompt in tokens (a longer prompt is an error, never cut silently)",
    "batch_size": "rows per jitted generation call",
    "lookaheads": "K values of the speed table",
    "detect_lookahead": "K of the detection runs",
    "gumbel_temperature": "temperature of the Gumbel-max runs (paper: 0.5)",
    "synthid_temperature": "temperature of the SynthID runs (paper: 0.7)",
    "synthid_layers": "SynthID tournament layers m (paper: 30)",
    "synthid_mixture": "Bayesian SynthID detectors: 'layer' (the paper's per-(token, layer) mixture, App. D "
                       "Eq. 17) or 'token' (one source per token)",
    "top_k": "top-k for P and Q (0: none)",
    "stop_at_eos": "stop a text at the EOS token (default: fixed-length texts)",
    "tpr_lengths": "token lengths of the TPR curves",
    "roc_length_gumbel": "tokens of the Gumbel ROC curves (paper: 200)",
    "roc_length_synthid": "tokens of the SynthID ROC curves (paper: 100)",
    "num_resamples": "bootstrap resamples of the TPR intervals",
    "seed": "seed of prompt choice and true randomness",
}
SECRET_FLAGS = {
    "secret_env": f"name of the environment variable holding the watermark secret (default {keys.ENV_VAR})",
    "secret_file": "file holding the watermark secret (its text without the final newline)",
}


def define_flags(defaults: Settings = Settings(), *, required_defaults: bool = True) -> None:
    """Defines one absl flag per :class:`Settings` field, plus ``--secret_env`` / ``--secret_file``.

    There is no flag for the secret itself: argv is visible to every user of
    the machine (``ps``) and lands in shell histories.
    With ``required_defaults=False`` every flag defaults to ``None`` (the
    caller fills unset ones from a preset, see ``experiments/reproduce.py``).
    """
    from absl import flags

    for field in dataclasses.fields(Settings):
        if field.name == "secret":
            continue
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
    for name, help_ in SECRET_FLAGS.items():
        flags.DEFINE_string(name, None, help_)


def settings_from_flags(base: Settings = Settings(), *, allow_demo_secret: bool = True) -> Settings:
    """:class:`Settings` from the parsed flags; unset (None) flags keep ``base``.

    The secret comes from ``--secret_file``, else the environment variable
    (``--secret_env``, default ``$WMSPEC_SECRET``), else the public demo
    secret with a warning — refused when ``allow_demo_secret=False`` (the
    paper preset). Invalid values raise ``absl.app.UsageError`` naming the flag.
    """
    from absl import app, flags

    values = {}
    for field in dataclasses.fields(Settings):
        if field.name == "secret":
            continue
        v = flags.FLAGS[field.name].value
        if v is None:
            continue
        if field.name in ("lookaheads", "tpr_lengths"):
            try:
                v = tuple(int(x) for x in v)
            except ValueError:
                raise app.UsageError(f"--{field.name} must be a comma-separated list of ints, got {v}") from None
        if field.name == "top_k":
            v = v or None
        values[field.name] = v
    try:
        secret, source = keys.resolve(flags.FLAGS.secret_env, flags.FLAGS.secret_file, allow_demo=allow_demo_secret)
        settings = dataclasses.replace(base, secret=secret, **values)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    log(f"watermark secret from {source} (fingerprint {secret.fingerprint})")
    return settings


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
    """TPR at 1 % FPR per length and detector (value [95 % CI]) and the FPR on each set of negatives."""
    blocks = []
    for dec in (GUMBEL, SYNTHID):
        res = out[dec]
        if dec == GUMBEL:
            head = "Gumbel-max"
            how = "threshold p <= 0.01 (exact null)"
            fpr = res["fpr_at_alpha"]
        else:
            head = f"SynthID (m={res['num_layers']}, {res['mixture']} mixture)"
            how = (f"threshold: 1% FPR on the {res['negatives']} test negatives with at least that many tokens "
                   f"({', '.join(map(str, res['negatives_per_length']))} of them per length)")
            fpr = res["fpr_at_threshold"]
        lines = [f"**{head}**, T = {res['temperature']:g}: {res['test_texts']} watermarked test texts, "
                 f"{res['test_negatives']} unwatermarked model texts, {res['test_human_negatives']} human texts; "
                 f"{how}", "", "| detector | " + " | ".join(f"{n} tokens" for n in res["lengths"]) +
                 f" | AUC at {res['roc_length']} | " + " | ".join(f"FPR on {k}" for k in fpr) + " |",
                 "|---" * (len(res["lengths"]) + 2 + len(fpr)) + "|"]
        for name, curve in res["tpr"].items():
            cells = [f"{e['value']:.2f} [{e['lower']:.2f}, {e['upper']:.2f}]" for e in curve]
            rates = [f"{f[name]['flagged']}/{f[name]['negatives']}" for f in fpr.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {res['roc'][name]['auc']:.3f} | "
                         + " | ".join(rates) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
