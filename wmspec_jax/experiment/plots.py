"""The experiments' figures (matplotlib, Agg backend, written atomically)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from wmspec_jax import results
from wmspec_jax.experiment.settings import GUMBEL, SYNTHID


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_aatps(rows: Sequence[dict], path: str) -> None:
    """Fig. 2 left: AATPS of Alg. 1 vs standard speculative sampling per K (95 % CIs)."""
    plt = _pyplot()
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
    plt = _pyplot()
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


_EDIT_TITLES = {"substitute": "substitution", "insert": "insertion", "delete": "deletion",
                "reorder": "span reordering", "mix": "mixed into human text"}


def plot_robustness(summary: dict, path: str) -> None:
    """TPR at 1 % FPR vs edit rate: one row per decoder, one column per edit; every detector on the Alg. 1
    texts (95 % bootstrap bands), the basic watermark's own detector dashed."""
    from wmspec_jax.experiment.robustness import BASIC_DETECTOR, EXTRA, cell_id

    plt = _pyplot()
    rs = summary["robustness"]
    decs = list(summary["decoders"])
    fig, axes = plt.subplots(len(decs), len(rs["edits"]), figsize=(3.0 * len(rs["edits"]), 2.9 * len(decs)),
                             squeeze=False, sharey=True)
    rates = np.asarray(rs["rates"]) * 100
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
            ax.set_title(f"{'Gumbel-max' if dec == 'gumbel' else 'SynthID'}: {_EDIT_TITLES.get(kind, kind)}",
                         fontsize=8)
            if i == len(decs) - 1:
                ax.set_xlabel("human tokens (%)" if kind == "mix" else "edit rate (%)", fontsize=8)
            if j == 0:
                ax.set_ylabel("TPR at 1% FPR", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[i, -1].legend(frameon=False, fontsize=6, loc="upper right")
    fig.tight_layout()
    results.atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


def plot_streams(summary: dict, path: str) -> None:
    """Per-stream evidence of the Alg. 1 texts vs edit rate, relative to the unedited texts (draft stream,
    target stream, acceptance u), and the share of tokens still in their original context."""
    from wmspec_jax.experiment.robustness import cell_id

    plt = _pyplot()
    rs = summary["robustness"]
    decs = list(summary["decoders"])
    fig, axes = plt.subplots(len(decs), len(rs["edits"]), figsize=(3.0 * len(rs["edits"]), 2.7 * len(decs)),
                             squeeze=False, sharey=True)
    rates = np.asarray(rs["rates"]) * 100
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
            ax.set_title(f"{'Gumbel-max' if dec == 'gumbel' else 'SynthID'}: {_EDIT_TITLES.get(kind, kind)}",
                         fontsize=8)
            if i == len(decs) - 1:
                ax.set_xlabel("human tokens (%)" if kind == "mix" else "edit rate (%)", fontsize=8)
            if j == 0:
                ax.set_ylabel("evidence / unedited", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[i, -1].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    results.atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


__all__ = ["plot_aatps", "plot_detection", "plot_robustness", "plot_streams"]
