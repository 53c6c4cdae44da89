"""False positives of key-only detection on repetitive human text, per text and per key.

    python -m benchmarks.repetitive_fpr --output=results/repetitive_fpr.json

For each corpus of :mod:`wmspec_jax.lab.corpora` (``--num_texts`` texts, built-in tokenizer, first
``--max_tokens`` tokens) and each scheme's default detector (:data:`wmspec_jax.detect.DEFAULTS`:
Ars-Prior with p = 0.5 for Gumbel-max, the mean g-value of both streams for SynthID with
``--synthid_layers``, the green count for KGW with γ = 0.25), the texts are scored under each of
``--num_secrets`` secrets used directly as the key (the tools' deployment keys: one key for every
text), without and with corpus-level dedup (:func:`wmspec_jax.detect.corpus.dedup_corpus`, in input
order). A text is flagged when p ≤ ``--alpha``. Reported per (corpus, scheme, dedup):

* per-text FPR: flagged / (secrets × texts), whose expectation is at most α whatever the corpus
  (each text's p-value is exact over keys), with the half-width of its Student-t interval over
  secrets (valid under any dependence between texts) and the pooled Clopper–Pearson interval (valid
  only when the verdicts are independent: with dedup);
* per-key FPR: the distribution over secrets of the share of the n texts one key flags (quantiles,
  largest), the dispersion index var(count) / (n α (1 − α)) (1 for Binomial(n, α)), and the share of
  secrets whose count exceeds the Binomial(n, α) 99.99 % and 99 % quantiles, with the share
  Binomial(n, α) itself gives;
* mean scored tokens per text and the share of texts with at least 8 scored tokens (the tools'
  ``--min_tokens``), i.e. what the dedup costs.

Keyed values are functions of (key, context, token) alone, so each distinct scored window is hashed
once per key and scattered back to the positions holding it (:mod:`wmspec_jax.lab.key_sweep`; checked
against ``detect.statistics`` on the first texts of every corpus and scheme), several secrets per batch
(``--secrets_per_batch``, one key per row); the dedup mask is a function of the tokens alone, computed
once per corpus and applied to every secret's statistics. Writes one JSON file atomically.
"""

from __future__ import annotations

import os
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from wmspec_jax import decoders, prf
from wmspec_jax import storage
from wmspec_jax.detect import corpus as corpus_lib
from wmspec_jax.lab import corpora
from wmspec_jax.lab.key_sweep import (check_against_direct, corpus_statistics, distinct_windows, per_key_summary,
                                      secret_words)

FLAGS = flags.FLAGS
flags.DEFINE_list("corpora", list(corpora.BUILDERS), "Corpora of wmspec_jax.lab.corpora.")
flags.DEFINE_list("schemes", ["gumbel", "synthid", "kgw"], "Decoders whose default detector is measured.")
flags.DEFINE_integer("num_texts", 300, "Texts per corpus.")
flags.DEFINE_integer("num_secrets", 100, "Secrets (keys) each corpus is scored under.")
flags.DEFINE_integer("secrets_per_batch", 10, "Secrets scored in one batch (texts tiled over them).")
flags.DEFINE_integer("max_tokens", 256, "Tokens kept per text (its first).")
flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m (the tools' default).")
flags.DEFINE_integer("context_width", prf.DEFAULT_CONTEXT_WIDTH, "Context width h.")
flags.DEFINE_float("alpha", 0.01, "Flag a text iff p <= alpha.")
flags.DEFINE_integer("min_tokens", 8, "Scored tokens a text needs for a verdict in the tools (reported only).")
flags.DEFINE_integer("seed", 0, "Seed of the corpora.")
flags.DEFINE_string("output", "results/repetitive_fpr.json", "Where the JSON goes.")

DETECTOR_OPTIONS = {"gumbel": {"draft_fraction": 0.5}, "synthid": {}, "kgw": {"gamma": 0.25}}


def measure_corpus(name: str, scheme: str, tokenized, within_mask: np.ndarray, dedup_mask: np.ndarray) -> dict:
    """Flag counts of every secret, without and with dedup, for one corpus and one scheme."""
    from wmspec_jax import detect
    from wmspec_jax.detect import metrics

    tokens, lengths, vocab = tokenized.tokens, tokenized.lengths, tokenized.vocab_size
    num_texts, width = tokens.shape[0], FLAGS.context_width
    decoder = decoders.WatermarkDecoder.from_name(scheme, FLAGS.synthid_layers)
    table = distinct_windows(tokens, within_mask, width)
    log_alpha = np.log(FLAGS.alpha)
    counts = {"none": [], "corpus": []}
    scored = {"none": [], "corpus": []}
    detector = None
    t0 = time.perf_counter()
    for first in range(0, FLAGS.num_secrets, FLAGS.secrets_per_batch):
        batch = list(range(first, min(first + FLAGS.secrets_per_batch, FLAGS.num_secrets)))
        words = np.stack([secret_words(i) for i in batch])
        stats = corpus_statistics(decoder, table, words, tokens.shape, lengths, vocab)
        if detector is None:
            options = dict(DETECTOR_OPTIONS[decoder.family])
            if decoder.family == "kgw":
                options["vocab_size"] = vocab
            detector = detect.make(detect.DEFAULTS[decoder.family], stats.provenance, **options)
            check_against_direct(decoder, detector, table, tokenized, words[0], width)
        for mode, st in (("none", stats),
                         ("corpus", stats._replace(mask=jnp.asarray(np.tile(dedup_mask, (len(batch), 1)))))):
            sc = detector.score(st)
            flagged = (np.asarray(sc.log_pvalue) <= log_alpha).reshape(len(batch), num_texts)
            counts[mode].append(flagged.sum(axis=1))
            scored[mode].append(np.asarray(sc.num_scored).reshape(len(batch), num_texts))
    seconds = time.perf_counter() - t0
    out = {"corpus": name, "scheme": scheme, "detector": detect.registry.name_of(detector),
           "num_texts": num_texts, "num_secrets": FLAGS.num_secrets, "distinct_windows": len(table[0]),
           "seconds": seconds, "dedup": {}}
    for mode in counts:
        c = np.concatenate(counts[mode])
        n_tok = np.concatenate(scored[mode])[0]  # key-independent: the first secret's
        per_text = metrics.clopper_pearson(int(c.sum()), c.size * num_texts)
        by_secret, half = metrics.mean_ci(c / num_texts)
        out["dedup"][mode] = {
            # pooled over secrets x texts: the Clopper-Pearson interval assumes independent verdicts,
            # which only dedup gives; the mean over secrets (independent draws) with its Student-t
            # interval holds either way
            "per_text_fpr": {"rate": per_text.value, "low": per_text.lower, "high": per_text.upper,
                             "over_secrets_half_width": half},
            "per_key": per_key_summary(c, num_texts, FLAGS.alpha),
            "flag_counts": c.tolist(),
            "mean_scored_tokens": float(n_tok.mean()),
            "texts_with_min_tokens": float(np.mean(n_tok >= FLAGS.min_tokens)),
        }
    return out


def main(argv):
    del argv
    started = time.perf_counter()
    rows, corpus_rows = [], []
    for name in FLAGS.corpora:
        c = corpora.build(name, FLAGS.num_texts, FLAGS.seed)
        tokenized = corpora.tokenize(c.texts, max_tokens=FLAGS.max_tokens)
        from wmspec_jax import detect

        # the within-text mask is key-independent: any key gives it
        within = detect.gumbel_statistics(tokenized.tokens, secret_words(0), vocab_size=tokenized.vocab_size,
                                          lengths=tokenized.lengths, context_width=FLAGS.context_width)
        deduped, windows = corpus_lib.dedup_corpus(within, tokenized.tokens, context_width=FLAGS.context_width)
        per_text_share = corpus_lib.shared_context_fraction(within, tokenized.tokens, context_width=FLAGS.context_width)
        contexts = corpus_lib.count_windows(within, tokenized.tokens, context_width=FLAGS.context_width,
                                            unit=corpus_lib.CONTEXT)
        corpus_rows.append({
            "corpus": name, "source": c.source, "num_texts": len(c), "mean_tokens": float(tokenized.lengths.mean()),
            "shared_fraction": windows.shared_fraction, "shared_context_only_fraction": contexts.shared_fraction,
            "per_text_shared_median": float(np.nanmedian(per_text_share)),
            "warning": corpus_lib.shared_context_warning(windows) is not None,
        })
        print(f"{name:20s} {len(c)} texts, {tokenized.lengths.mean():.0f} tokens, shared windows "
              f"{windows.shared_fraction:.3f} (warning: {corpus_rows[-1]['warning']})", flush=True)
        dedup_mask = np.asarray(deduped.mask)
        for scheme in FLAGS.schemes:
            row = measure_corpus(name, scheme, tokenized, np.asarray(within.mask), dedup_mask)
            rows.append(row)
            for mode, r in row["dedup"].items():
                k = r["per_key"]
                print(f"  {scheme:8s} dedup={mode:6s} per-text FPR {r['per_text_fpr']['rate']:.4f}  per-key: "
                      f"none {k['secrets_flagging_none']:.2f}, median {k['flagged_share_quantiles']['0.5']:.3f}, "
                      f"max {k['flagged_share_max']:.3f}, >q99.99 {k['secrets_above_q9999']:.2f}, "
                      f"dispersion {k['dispersion_index']:.2f}, scored {r['mean_scored_tokens']:.0f}  "
                      f"({row['seconds']:.0f} s)", flush=True)
    meta = {"flags": {f: FLAGS[f].value for f in ("corpora", "schemes", "num_texts", "num_secrets", "max_tokens",
                                                  "synthid_layers", "context_width", "alpha", "min_tokens", "seed")},
            "date": time.strftime("%Y-%m-%d"), "seconds": time.perf_counter() - started,
            "backend": jax.default_backend(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__}
    out = pathlib.Path(FLAGS.output)
    storage.atomic_write_json(out, {"meta": meta, "corpora": corpus_rows, "rows": rows})
    print(f"wrote {out} ({meta['seconds']:.0f} s)")


if __name__ == "__main__":
    app.run(main)
