r"""Every decoder under every watermarking method on a language model: the comparison table.

For each decoder (``--decoders``: Gumbel-max, SynthID, inverse transform, DiPmark, γ-reweight, KGW) and
method (``--methods``: ``basic``; ``dathathri``, the dual-key speculative watermark inference engines
deploy; ``pseudorandom``, Alg. 1) it generates ``--num_prompts`` answers of the pair (default: the
built-in pair and questions) and reports

* AATPS (accepted tokens per step) and LOGPPL (mean −log P of the generated tokens under the target at
  T = 1, read off the loop's own target forwards);
* TPR at 1 % FPR at each of ``--lengths`` scored tokens of the answer alone (as a user pastes it: its
  first h tokens are context only), from each text's exact p-value, with the decoder's
  key-only detector: Ars-Prior (Eq. 12; p = the run's share of accepted drafts, 0 for ``basic``) for
  the uniform-statistic decoders, the mean g-value of both streams for SynthID, the green count for KGW;
* the same detector's FPR at 1 % on the human answers of the same prompts, each under the run's keys.

  python -m experiments.decoders --output_dir=results/decoders
  python -m experiments.decoders --decoders=gumbel,kgw --methods=pseudorandom --num_prompts=64

Every text has its own keys (:func:`wmspec_jax.keys.text_keys` of the run and index). Resumable: the
generations are appended to ``<output_dir>/generations.jsonl`` (one writer per directory) and a rerun
with the same flags generates only what is missing; ``decoders.json``, ``decoders.csv`` and
``decoders.png`` are rewritten atomically from them. The watermark secret comes from
``$WMSPEC_SECRET`` (or ``--secret_env`` / ``--secret_file``; ``--demo_secret`` for the public one).
"""

from __future__ import annotations

import csv
import io
import os
import time

import numpy as np
from absl import app, flags

from wmspec_jax import decoders, keys, prf, speculative, storage
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.lab import data, pairs, runs
from wmspec_jax.lab.harness import script_main

cli_flags.define_pair_flags()
cli_flags.define_secret_flags(demo_flag=True)
flags.DEFINE_string("dataset", "builtin-eli5", "prompts (and their human answers): builtin-eli5, eli5:PATH, ...")
flags.DEFINE_list("decoders", ["gumbel", "synthid", "inverse_transform", "dipmark", "gamma_reweight", "kgw"],
                  f"decoders ({', '.join(decoders.DECODER_NAMES)}), each with its default settings")
flags.DEFINE_list("methods", ["basic", "dathathri", "pseudorandom"], "watermarking methods")
flags.DEFINE_integer("num_prompts", 32, "answers per (decoder, method)", lower_bound=2)
flags.DEFINE_integer("max_new_tokens", 96, "tokens per answer (the largest of --lengths is useful)", lower_bound=8)
flags.DEFINE_list("lengths", ["48", "96"], "numbers of tokens at which TPR and FPR are reported")
flags.DEFINE_integer("lookahead", 3, "K of the speculative methods", lower_bound=1)
flags.DEFINE_float("temperature", 0.7, "temperature of P and Q", lower_bound=0.0)
flags.DEFINE_integer("synthid_layers", 30, "SynthID's m", lower_bound=1)
flags.DEFINE_integer("batch_size", 16, "texts per generation call", lower_bound=1)
flags.DEFINE_integer("max_prompt_tokens", 128, "longest prompt (tokens; longer ones lose their start)",
                     lower_bound=8)
flags.DEFINE_integer("seed", 0, "true-randomness seed")
flags.DEFINE_string("output_dir", "results/decoders", "where outputs go")
FLAGS = flags.FLAGS

ALPHA = 0.01


def check_flags() -> tuple:
    """(decoder names, lengths): every flag checked before any model loads."""
    for name in FLAGS.decoders:
        if name not in decoders.DECODER_NAMES:
            raise app.UsageError(f"--decoders: unknown decoder {name!r}; known: {', '.join(decoders.DECODER_NAMES)}")
    for method in FLAGS.methods:
        if method not in speculative.METHODS or not speculative.METHODS[method].watermarks:
            raise app.UsageError(f"--methods: {method!r} is not a watermarking method")
    try:
        lengths = sorted({int(x) for x in FLAGS.lengths})
    except ValueError:
        raise app.UsageError(f"--lengths must be integers, got {FLAGS.lengths}") from None
    if not lengths or lengths[0] < 1 or lengths[-1] > FLAGS.max_new_tokens:
        raise app.UsageError(f"--lengths must lie in [1, --max_new_tokens={FLAGS.max_new_tokens}]")
    if not 0 < FLAGS.temperature < float("inf"):
        raise app.UsageError("--temperature must be a finite number > 0 (at 0 nothing is watermarked)")
    if len(FLAGS.decoders) != len(set(FLAGS.decoders)) or len(FLAGS.methods) != len(set(FLAGS.methods)):
        raise app.UsageError("--decoders and --methods must not repeat a name")
    return list(FLAGS.decoders), lengths


def pvalues(decoder: decoders.WatermarkDecoder, texts: list, text_keys, vocab_size: int, draft_fraction: float,
            num_tokens: list) -> dict:
    """{n: each text's p-value on its first n scored tokens} from the decoder's key-only detector
    (:data:`wmspec_jax.detect.DEFAULTS` of its family); the answer alone, its first h tokens context only."""
    from wmspec_jax import detect

    tokens, lengths = pad(texts)
    stats = detect.statistics(decoder, tokens, text_keys, vocab_size=vocab_size, lengths=lengths)
    options = {decoders.KGW: {"gamma": decoder.gamma, "vocab_size": vocab_size},
               decoders.GUMBEL: {"draft_fraction": draft_fraction}}
    detector = detect.make(detect.DEFAULTS[decoder.family], stats.provenance, **options.get(decoder.family, {}))
    return {n: np.asarray(detector.score(detect.truncate(stats, n)).pvalue, np.float64) for n in num_tokens}


def pad(rows) -> tuple:
    """(int32[B, L] right-padded token ids, int32[B] lengths) of lists of ids."""
    width = max(len(r) for r in rows)
    out = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.array([len(r) for r in rows], np.int32)


def evaluate(run: runs.RunSpec, records: list, human: list, secret, vocab_size: int, lengths: list) -> dict:
    """One table row: speed, quality, TPR and human FPR at each length."""
    decoder = run.watermark_decoder
    text_keys = keys.text_keys(secret, [r["index"] for r in records], run=run.name)
    sources = np.concatenate([np.asarray(r["source"]) for r in records])
    drafts = float(np.mean(sources == speculative.SOURCE_DRAFT)) if sources.size else 0.0
    row = {"decoder": decoder.name, "label": decoder.label, "method": run.method, "run": run.name,
           "num_texts": len(records), "aatps": float(np.mean([r["aatps"] for r in records])),
           "logppl": float(np.mean([r["logppl"] for r in records])), "draft_fraction": drafts,
           "tpr_at_1pct": {}, "human_fpr_at_1pct": {}, "num_human": 0}
    counts = [int(n) for n in lengths]
    for n, p in pvalues(decoder, [r["tokens"] for r in records], text_keys, vocab_size, drafts, counts).items():
        row["tpr_at_1pct"][str(n)] = float(np.mean(p <= ALPHA))
    usable = [i for i, h in enumerate(human) if len(h) > prf.DEFAULT_CONTEXT_WIDTH]  # a scored token at least
    row["num_human"] = len(usable)
    if usable:
        h_keys = keys.text_keys(secret, usable, run=run.name)
        for n, p in pvalues(decoder, [human[i] for i in usable], h_keys, vocab_size, drafts, counts).items():
            row["human_fpr_at_1pct"][str(n)] = float(np.mean(p <= ALPHA))
    return row


def write_outputs(out: str, rows: list, settings: dict) -> None:
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
    lengths = list(rows[0]["tpr_at_1pct"]) if rows else []
    head = ("| decoder | method | AATPS | LOGPPL | " + " | ".join(f"TPR@1% ({n})" for n in lengths) + " | "
            + " | ".join(f"human FPR ({n})" for n in lengths) + " |")
    lines = [head, "|" + "---|" * (4 + 2 * len(lengths))]
    for r in rows:
        lines.append(f"| {r['label']} | {r['method']} | {r['aatps']:.2f} | {r['logppl']:.3f} | "
                     + " | ".join(f"{r['tpr_at_1pct'][n]:.2f}" for n in lengths) + " | "
                     + " | ".join(f"{r['human_fpr_at_1pct'].get(n, float('nan')):.2f}" for n in lengths) + " |")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    names, lengths = check_flags()
    try:
        secret, source = cli_flags.secret_from_flags(allow_demo=FLAGS.demo_secret)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    pairs.check_pair_spec(FLAGS.target, FLAGS.draft, FLAGS.dtype)
    prompt_set = data.load_prompt_set(FLAGS.dataset).take(FLAGS.num_prompts, seed=FLAGS.seed)
    if len(prompt_set) < FLAGS.num_prompts:
        raise app.UsageError(f"--dataset={FLAGS.dataset} has {len(prompt_set)} prompts, fewer than --num_prompts")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    store = runs.open_generations(FLAGS.output_dir)
    t0 = time.perf_counter()
    pair = pairs.load_pair(FLAGS.target, FLAGS.draft, FLAGS.dtype)
    prompts, prompt_lengths = pairs.encode_prompts(pair, prompt_set.prompts, prompt_set.kind,
                                                   FLAGS.max_prompt_tokens, too_long="truncate")
    human = [list(pair.encode_text(e.human))[: FLAGS.max_new_tokens] if e.human.strip() else []
             for e in prompt_set.examples]
    print(f"pair {pair.name} loaded in {time.perf_counter() - t0:.1f}s; secret from {source}", flush=True)
    rows = []
    for name in names:
        for method in FLAGS.methods:
            k = FLAGS.lookahead if speculative.METHODS[method].speculative else 0
            run = runs.RunSpec(method, name, k, FLAGS.temperature, FLAGS.synthid_layers)
            records = runs.generate_run(run, pair, prompts, prompt_lengths, store, secret=secret, seed=FLAGS.seed,
                                        max_new_tokens=FLAGS.max_new_tokens, batch_size=FLAGS.batch_size,
                                        eos_id=pair.eos_id)
            rows.append(evaluate(run, records, human, secret, pair.vocab_size, [str(n) for n in lengths]))
            r = rows[-1]
            print(f"{r['label']:18s} {method:13s} AATPS {r['aatps']:.2f}  LOGPPL {r['logppl']:.3f}  TPR@1% "
                  + " ".join(f"{n}:{v:.2f}" for n, v in r["tpr_at_1pct"].items()), flush=True)
    settings = {f: FLAGS[f].value for f in ("target", "draft", "dtype", "dataset", "num_prompts", "max_new_tokens",
                                            "lookahead", "temperature", "synthid_layers", "seed")}
    settings["key_fingerprint"] = secret.fingerprint
    write_outputs(FLAGS.output_dir, rows, settings)
    print(markdown(rows))
    print(f"wrote decoders.json, decoders.csv, decoders.png to {FLAGS.output_dir} in {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    app.run(script_main(main))
