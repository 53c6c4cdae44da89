"""Tables of the experiments: CSV files and the markdown the scripts print (and the README quotes)."""

from __future__ import annotations

import csv
import io
from typing import Sequence

from wmspec_jax import storage
from wmspec_jax.lab.settings import GUMBEL, SYNTHID


def write_csv(path: str, rows: Sequence[dict]) -> None:
    """Rows (dicts with the same keys) as a CSV file, written atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    storage.atomic_write_text(path, buf.getvalue())


def speculative_markdown(rows: Sequence[dict]) -> str:
    """Tables 1-2 as markdown: one line per run, mean ± 95 % CI half-width, and each run's PTT over
    the basic watermark's of its decoder and temperature (the paper's comparison; "-" without one)."""
    basic = {(r["decoder"], r["temperature"]): r["ptt_ms"] for r in rows if not r["lookahead"]}
    lines = ["| decoder (T) | K | method | AATPS | PTT (ms) | PTT / basic | LOGPPL |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        dec = "Gumbel-max" if r["decoder"] == GUMBEL else "SynthID"
        base = basic.get((r["decoder"], r["temperature"]))
        ratio = f"{r['ptt_ms'] / base:.2f}" if base else "-"
        lines.append(f"| {dec} ({r['temperature']:g}) | {r['lookahead'] or '-'} | {r['method']} | "
                     f"{r['aatps']:.2f} ± {r['aatps_ci']:.2f} | {r['ptt_ms']:.1f} ± {r['ptt_ms_ci']:.1f} | "
                     f"{ratio} | {r['logppl']:.2f} ± {r['logppl_ci']:.2f} |")
    return "\n".join(lines)


def detection_markdown(out: dict) -> str:
    """TPR at 1 % FPR per length and detector (value [95 % CI]) and the FPR on each set of negatives."""
    blocks = []
    for dec in (GUMBEL, SYNTHID):
        res = out[dec]
        head = ("Gumbel-max" if dec == GUMBEL else
                f"SynthID (m={res['num_layers']}, {res['mixture']} mixture)")
        how = f"threshold: {res['threshold']}"
        if not all(res["calibrated"].values()):
            how += (" (negatives per length: " + ", ".join(" + ".join(f"{n} {k}" for k, n in u.items())
                                                             for u in res["threshold_negatives_per_length"]) + ")")
        fpr = res["fpr"]
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
        assisted = res.get("model_assisted")
        if assisted:
            cells = [f"{e['value']:.2f} [{e['lower']:.2f}, {e['upper']:.2f}]" for e in assisted["tpr"]]
            rates = [f"{assisted['fpr'][k]['flagged']}/{assisted['fpr'][k]['negatives']}" if k in assisted["fpr"]
                     else "-" for k in fpr]
            lines.append(f"| {assisted['label']} (the pair's probabilities; p <= 0.01) | " + " | ".join(cells)
                         + " | - | " + " | ".join(rates) + " |")
        blocks.append("\n".join(lines))
        for drafts, multi in res.get("multi_draft", {}).items():
            blocks.append(_multi_draft_markdown(head, drafts, multi))
    return "\n\n".join(blocks)


def _multi_draft_markdown(head: str, drafts: str, res: dict) -> str:
    """TPR of multi-draft Alg. 1 texts under one chain's detectors, and their FPR on the model negatives."""
    weights = res.get("sibling_weights")
    how = (f"the draft statistic searches {res['siblings']} sibling streams"
           + (f" (weights {', '.join(f'{w:.2f}' for w in weights)})" if weights else "") if res["searched"] else
           "the key-only detectors score the sibling-0 stream") + "; the Oracles read each token's own stream"
    fpr = res.get("fpr_model") or {}
    lines = [f"**{head}, multi-draft Alg. 1 (drafts {drafts})**: {res['test_texts']} test texts; {how}", "",
             "| detector | " + " | ".join(f"{n} tokens" for n in res["lengths"])
             + (f" | FPR on model at {res['fpr_length']} |" if fpr else " |"),
             "|---" * (len(res["lengths"]) + 1 + bool(fpr)) + "|"]
    for name, curve in res["tpr"].items():
        cells = [f"{e['value']:.2f} [{e['lower']:.2f}, {e['upper']:.2f}]" for e in curve]
        rate = [f"{fpr[name]['flagged']}/{fpr[name]['negatives']}" if name in fpr else "-"] if fpr else []
        lines.append(f"| {name} | " + " | ".join(cells + rate) + " |")
    return "\n".join(lines)


__all__ = ["detection_markdown", "speculative_markdown", "write_csv"]
