"""The experiments' figures (matplotlib, Agg backend, written atomically)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from wmspec_jax import storage
from wmspec_jax.decoders import WatermarkDecoder
from wmspec_jax.lab.settings import GUMBEL, SYNTHID


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_aatps(rows: Sequence[dict], path: str) -> None:
    """Fig. 2 left: AATPS of Alg. 1 vs standard speculative sampling per K (95 % CIs)."""
    plt = _pyplot()
    spec = [r for r in rows if r["lookahead"] > 0]
    groups = sorted({(r["decoder"], r["lookahead"], r.get("drafts", "1")) for r in spec},
                    key=lambda g: (g[0], g[1], g[2] != "1", g[2]))
    methods = {"Std. SpecSampl": "standard", "Alg. 1": "pseudorandom"}
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(groups)), 3.4))
    width = 0.38
    for j, (m, method_id) in enumerate(methods.items()):
        vals, errs = [], []
        for g in groups:
            r = next(r for r in spec if (r["decoder"], r["lookahead"], r.get("drafts", "1")) == g
                     and r["method_id"] == method_id)
            vals.append(r["aatps"])
            errs.append(r["aatps_ci"])
        ax.bar(np.arange(len(groups)) + (j - 0.5) * width, vals, width, yerr=errs, capsize=3, label=m)
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels([f"{WatermarkDecoder.from_name(d).family_label.split('-')[0]}\nK={k}"
                        + ("" if drafts == "1" else f"\n{drafts}") for d, k, drafts in groups])
    ax.set_ylabel("AATPS")
    ax.set_ylim(1, None)
    ax.legend(frameon=False)
    ax.set_title("Average accepted tokens per step (95% CI)")
    fig.tight_layout()
    storage.atomic_savefig(fig, path, dpi=130)
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
        title = WatermarkDecoder.from_name(dec, res.get("num_layers") or 30).label
        ax.set_title(f"{title}, T={res['temperature']:g}: TPR at 1% FPR")
        ax.set_xlabel("tokens")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    storage.atomic_savefig(fig, tpr_path, dpi=130)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, dec in zip(axes, (GUMBEL, SYNTHID)):
        res = out[dec]
        for name, roc in res["roc"].items():
            ax.plot(roc["fpr"], roc["tpr"], label=f"{name} (AUC {roc['auc']:.3f})")
        ax.plot([0, 1], [0, 1], color="gray", lw=0.5, ls=":")
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlim(0, 1)
        title = WatermarkDecoder.from_name(dec).family_label
        ax.set_title(f"{title}: ROC at {res['roc_length']} tokens")
        ax.set_xlabel("FPR")
        ax.set_ylabel("TPR")
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    storage.atomic_savefig(fig, roc_path, dpi=130)
    plt.close(fig)


__all__ = ["plot_aatps", "plot_detection"]
