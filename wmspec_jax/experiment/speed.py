"""Tables 1-2: AATPS, per-token time and log-perplexity of basic watermarks, standard speculative
sampling and Alg. 1, for each decoder and K (``experiments/speculative.py``)."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from wmspec_jax import evaluation, results, runs
from wmspec_jax.experiment.plots import plot_aatps
from wmspec_jax.experiment.session import Session
from wmspec_jax.experiment.settings import GUMBEL, SYNTHID, Settings
from wmspec_jax.experiment.tables import write_csv


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


def method_label(run: runs.RunSpec) -> str:
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
                     "method": method_label(run), "method_id": run.method, **row})
    summary = {"settings": s.public(), "pair": session.pair.name, "rows": rows,
               "checks": speculative_checks(rows)}
    results.atomic_write_json(os.path.join(session.output_dir, "speculative.json"), summary)
    write_csv(os.path.join(session.output_dir, "speculative.csv"), rows)
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


__all__ = ["method_label", "run_speculative", "speculative_checks", "speed_runs"]
