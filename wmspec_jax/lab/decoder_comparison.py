"""Beyond the paper: every decoder under every watermarking method on a language model, one table.

What ``python -m experiments.decoders`` computes: for each decoder (Gumbel-max, SynthID, inverse
transform, DiPmark, γ-reweight, KGW; ``docs/decoders.md``) and method (``basic``; ``dathathri``, the
dual-key speculative watermark inference engines deploy; ``pseudorandom``, Alg. 1) one row of

* AATPS (accepted tokens per step) and LOGPPL (mean −log P of the generated tokens under the target at
  T = 1, read off the loop's own target forwards) — the measures of Tables 1-2;
* TPR at 1 % FPR at each length of scored tokens of the answer alone (as a user pastes it: its first
  h tokens are context only), from each text's exact p-value, with the decoder's key-only detector
  (:data:`wmspec_jax.detect.DEFAULTS`: Ars-Prior, Eq. 12, with p = the run's share of accepted drafts
  for the uniform-statistic decoders; the mean g-value of both streams for SynthID; the green count
  for KGW) — the protocol of Fig. 2 without trained detectors;
* the same detector's FPR at 1 % on the human answers of the same prompts, each under the run's keys.

Every text has its own keys (:func:`wmspec_jax.keys.text_keys` of the run and index). The texts are
the records of :func:`wmspec_jax.lab.runs.generate_run`, read as
:class:`wmspec_jax.text_record.GeneratedText`.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import os
from typing import Callable, Sequence

import jax
import numpy as np

from wmspec_jax import decoders, keys, prf, speculative, storage, text_record
from wmspec_jax.sources import SOURCE_DRAFT
from wmspec_jax.lab import detection_rows, runs

ALPHA = 0.01
_SAY = functools.partial(print, flush=True)  # a row shows when it is done, also through a pipe


@dataclasses.dataclass(frozen=True)
class ComparisonSettings:
    """The generation settings of the table (the script's flags of the same names).

    Attributes:
      decoders: :data:`wmspec_jax.decoders.DECODER_NAMES` names, each with its default settings.
      methods: watermarking :data:`wmspec_jax.speculative.METHODS`.
      lengths: numbers of scored tokens at which TPR and FPR are reported (ascending).
      lookahead: K of the speculative methods; ``temperature``: of P and Q; ``synthid_layers``: m.
      max_new_tokens, batch_size, seed: tokens per answer, texts per generation call, true-randomness seed.
    """

    decoders: tuple
    methods: tuple
    lengths: tuple
    lookahead: int
    temperature: float
    synthid_layers: int
    max_new_tokens: int
    batch_size: int
    seed: int


def check_settings(names: Sequence[str], methods: Sequence[str], lengths: Sequence[str], max_new_tokens: int,
                   temperature: float) -> tuple[list, list]:
    """(decoder names, int lengths ascending): ValueError naming the flag before any model loads."""
    for name in names:
        if name not in decoders.DECODER_NAMES:
            raise ValueError(f"--decoders: unknown decoder {name!r}; known: {', '.join(decoders.DECODER_NAMES)}")
    for method in methods:
        if method not in speculative.METHODS or not speculative.METHODS[method].watermarks:
            raise ValueError(f"--methods: {method!r} is not a watermarking method")
    try:
        counts = sorted({int(x) for x in lengths})
    except ValueError:
        raise ValueError(f"--lengths must be integers, got {lengths}") from None
    if not counts or counts[0] < 1 or counts[-1] > max_new_tokens:
        raise ValueError(f"--lengths must lie in [1, --max_new_tokens={max_new_tokens}]")
    if not 0 < temperature < float("inf"):
        raise ValueError("--temperature must be a finite number > 0 (at 0 nothing is watermarked)")
    if len(names) != len(set(names)) or len(methods) != len(set(methods)):
        raise ValueError("--decoders and --methods must not repeat a name")
    return list(names), counts


def human_answers(pair, examples: Sequence, max_new_tokens: int) -> list:
    """Token ids of each example's human answer, at most ``max_new_tokens`` ([] where it has none)."""
    return [list(pair.encode_text(e.human))[:max_new_tokens] if e.human.strip() else [] for e in examples]


def answer_texts(texts: Sequence[text_record.GeneratedText], text_keys) -> detection_rows.TextRows:
    """The generated answers without their prompts as :class:`~wmspec_jax.lab.detection_rows.TextRows`
    (``text_keys`` in order)."""
    alone = [dataclasses.replace(t, prompt_length=0) for t in texts]
    no_prompts = np.zeros((max(t.index for t in texts) + 1, 0), np.int32)
    return detection_rows.texts_from_records(alone, no_prompts, text_keys)


def human_texts(human: Sequence[Sequence[int]], indices: Sequence[int], text_keys) -> detection_rows.TextRows:
    """The human answers ``indices`` alone, in the layout of :func:`answer_texts`. Their random sources
    (:func:`wmspec_jax.lab.detection_rows.texts_from_human`) are not read: key-only detectors need none."""
    no_prompts = np.zeros((len(human), 0), np.int32)
    return detection_rows.texts_from_human(no_prompts, np.zeros(len(human), np.int32), human, indices, text_keys,
                                       0.0, jax.random.key(0))


def pvalues(decoder: decoders.WatermarkDecoder, texts: detection_rows.TextRows, vocab_size: int, draft_fraction: float,
            num_tokens: Sequence[int]) -> dict:
    """{n: float64[N] each text's p-value on its first n scored tokens} of :func:`answer_texts`' texts
    from the decoder's key-only detector; the answer alone, its first h tokens context only."""
    from wmspec_jax import detect

    stats = detect.statistics(decoder, texts.tokens, texts.keys, vocab_size=vocab_size, lengths=texts.lengths)
    options = {decoders.KGW: {"gamma": decoder.gamma, "vocab_size": vocab_size},
               decoders.GUMBEL: {"draft_fraction": draft_fraction}}
    detector = detect.make(detect.DEFAULTS[decoder.family], stats.provenance, **options.get(decoder.family, {}))
    return {n: np.asarray(detector.score(detect.truncate(stats, n)).pvalue, np.float64) for n in num_tokens}


def evaluate(run: runs.RunSpec, records: Sequence[dict], human: Sequence[Sequence[int]], secret, vocab_size: int,
             lengths: Sequence[str]) -> dict:
    """One table row of ``run``'s records: AATPS, LOGPPL, draft fraction, TPR and human FPR at 1 % at
    each length (``lengths``: the row's keys, numbers as strings)."""
    decoder = run.watermark_decoder
    texts = [text_record.GeneratedText.from_record(r) for r in records]
    text_keys = keys.text_keys(secret, [t.index for t in texts], run=run.name)
    sources = np.concatenate([np.asarray(t.source, np.int64) for t in texts])
    drafts = float(np.mean(sources == SOURCE_DRAFT)) if sources.size else 0.0
    row = {"decoder": decoder.name, "label": decoder.label, "method": run.method, "run": run.name,
           "num_texts": len(texts), "aatps": float(np.mean([t.aatps for t in texts])),
           "logppl": float(np.mean([t.logppl for t in texts])), "draft_fraction": drafts,
           "tpr_at_1pct": {}, "human_fpr_at_1pct": {}, "num_human": 0}
    counts = [int(n) for n in lengths]
    for n, p in pvalues(decoder, answer_texts(texts, text_keys), vocab_size, drafts, counts).items():
        row["tpr_at_1pct"][str(n)] = float(np.mean(p <= ALPHA))
    usable = [i for i, h in enumerate(human) if len(h) > prf.DEFAULT_CONTEXT_WIDTH]  # a scored token at least
    row["num_human"] = len(usable)
    if usable:
        h_keys = keys.text_keys(secret, usable, run=run.name)
        for n, p in pvalues(decoder, human_texts(human, usable, h_keys), vocab_size, drafts, counts).items():
            row["human_fpr_at_1pct"][str(n)] = float(np.mean(p <= ALPHA))
    return row


def run_comparison(s: ComparisonSettings, pair, prompts: np.ndarray, prompt_lengths: np.ndarray,
                   human: Sequence[Sequence[int]], store, secret, log: Callable = _SAY) -> list:
    """The rows of the table, one per (decoder, method), generating into ``store`` what it lacks.

    Args:
      pair: a :class:`wmspec_jax.models.pairs.ModelPair`; ``prompts`` int32[N, P] its packed prompts and
        ``prompt_lengths`` int32[N]; ``human``: :func:`human_answers` of the same prompts.
      store: the record store (:func:`wmspec_jax.lab.runs.open_generations`); ``secret``: the
        watermark secret.
    """
    rows = []
    for name in s.decoders:
        for method in s.methods:
            k = s.lookahead if speculative.METHODS[method].speculative else 0
            run = runs.RunSpec(method, name, k, s.temperature, s.synthid_layers)
            records = runs.generate_run(run, pair, prompts, prompt_lengths, store, secret=secret, seed=s.seed,
                                        max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
                                        eos_id=pair.eos_id)
            rows.append(evaluate(run, records, human, secret, pair.vocab_size, [str(n) for n in s.lengths]))
            r = rows[-1]
            log(f"{r['label']:18s} {method:13s} AATPS {r['aatps']:.2f}  LOGPPL {r['logppl']:.3f}  TPR@1% "
                + " ".join(f"{n}:{v:.2f}" for n, v in r["tpr_at_1pct"].items()))
    return rows


def write_outputs(out: str, rows: list, settings: dict) -> None:
    """``decoders.json`` (settings and rows), ``decoders.csv`` and ``decoders.png`` under ``out``, atomically."""
    storage.atomic_write_json(os.path.join(out, "decoders.json"), {"settings": settings, "rows": rows})
    buf = io.StringIO()
    lengths = list(rows[0]["tpr_at_1pct"]) if rows else []
    fields = ["decoder", "method", "num_texts", "aatps", "logppl"] + [f"tpr_at_1pct_{n}" for n in lengths] + \
        [f"human_fpr_at_1pct_{n}" for n in lengths]
    writer = csv.DictWriter(buf, fields)
    writer.writeheader()
    for r in rows:
        writer.writerow({"decoder": r["decoder"], "method": r["method"], "num_texts": r["num_texts"],
                         "aatps": f"{r['aatps']:.4f}", "logppl": f"{r['logppl']:.4f}",
                         **{f"tpr_at_1pct_{n}": r["tpr_at_1pct"][n] for n in lengths},
                         **{f"human_fpr_at_1pct_{n}": r["human_fpr_at_1pct"].get(n, "") for n in lengths}})
    storage.atomic_write_text(os.path.join(out, "decoders.csv"), buf.getvalue())
    plot(rows, os.path.join(out, "decoders.png"))


def plot(rows: list, path: str) -> None:
    """Three bar panels per decoder and method: AATPS, LOGPPL and TPR at the longest length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(r["label"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    longest = max(rows[0]["tpr_at_1pct"], key=int)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    width = 0.8 / len(methods)
    for j, method in enumerate(methods):
        by_label = {r["label"]: r for r in rows if r["method"] == method}
        x = np.arange(len(labels)) + (j - (len(methods) - 1) / 2) * width
        for ax, key in zip(axes, ("aatps", "logppl", "tpr")):
            values = [by_label[lb]["tpr_at_1pct"][longest] if key == "tpr" else by_label[lb][key]
                      if lb in by_label else np.nan for lb in labels]
            ax.bar(x, values, width, label=method)
    for ax, title in zip(axes, ("tokens per step (AATPS)", "LOGPPL (target, T = 1)",
                                f"TPR at 1 % FPR, {longest} tokens")):
        ax.set_xticks(np.arange(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    try:
        storage.atomic_savefig(fig, path, dpi=120)
    finally:
        plt.close(fig)


def markdown(rows: list) -> str:
    """The table as markdown: decoder, method, AATPS, LOGPPL, TPR and human FPR at each length."""
    lengths = list(rows[0]["tpr_at_1pct"]) if rows else []
    head = ("| decoder | method | AATPS | LOGPPL | " + " | ".join(f"TPR@1% ({n})" for n in lengths) + " | "
            + " | ".join(f"human FPR ({n})" for n in lengths) + " |")
    lines = [head, "|" + "---|" * (4 + 2 * len(lengths))]
    for r in rows:
        lines.append(f"| {r['label']} | {r['method']} | {r['aatps']:.2f} | {r['logppl']:.3f} | "
                     + " | ".join(f"{r['tpr_at_1pct'][n]:.2f}" for n in lengths) + " | "
                     + " | ".join(f"{r['human_fpr_at_1pct'].get(n, float('nan')):.2f}" for n in lengths) + " |")
    return "\n".join(lines)


__all__ = ["ALPHA", "ComparisonSettings", "answer_texts", "check_settings", "evaluate", "human_answers",
           "human_texts", "markdown", "plot", "pvalues", "run_comparison", "write_outputs"]
