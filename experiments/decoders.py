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
The comparison is :mod:`wmspec_jax.lab.decoder_comparison`.
"""

from __future__ import annotations

import time

from absl import app, flags

from wmspec_jax import decoders
from experiments import table_flags
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.models import pairs
from wmspec_jax.lab import decoder_comparison as comparison
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
table_flags.define_table_flags("results/decoders", "temperature of P and Q", "K of the speculative methods")
FLAGS = flags.FLAGS


def settings_from_flags() -> comparison.ComparisonSettings:
    """The checked settings: every flag before any model loads (a bad one is a usage error)."""
    try:
        names, lengths = comparison.check_settings(FLAGS.decoders, FLAGS.methods, FLAGS.lengths,
                                                   FLAGS.max_new_tokens, FLAGS.temperature)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    return comparison.ComparisonSettings(
        decoders=tuple(names), methods=tuple(FLAGS.methods), lengths=tuple(lengths), lookahead=FLAGS.lookahead,
        temperature=FLAGS.temperature, synthid_layers=FLAGS.synthid_layers, max_new_tokens=FLAGS.max_new_tokens,
        batch_size=FLAGS.batch_size, seed=FLAGS.seed)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    s = settings_from_flags()
    secret, source, prompt_set, store = table_flags.start_table([FLAGS.draft])
    t0 = time.perf_counter()
    pair = pairs.load_pair(FLAGS.target, FLAGS.draft, FLAGS.dtype)
    prompts, prompt_lengths = pairs.encode_prompts(pair, prompt_set.prompts, prompt_set.kind,
                                                   FLAGS.max_prompt_tokens, too_long="truncate")
    human = comparison.human_answers(pair, prompt_set.examples, FLAGS.max_new_tokens)
    print(f"pair {pair.name} loaded in {time.perf_counter() - t0:.1f}s; secret from {source}", flush=True)
    rows = comparison.run_comparison(s, pair, prompts, prompt_lengths, human, store, secret)
    settings = {f: FLAGS[f].value for f in ("target", "draft", "dtype", "dataset", "num_prompts", "max_new_tokens",
                                            "lookahead", "temperature", "synthid_layers", "seed")}
    settings["key_fingerprint"] = secret.fingerprint
    comparison.write_outputs(FLAGS.output_dir, rows, settings)
    print(comparison.markdown(rows))
    print(f"wrote decoders.json, decoders.csv, decoders.png to {FLAGS.output_dir} in {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    app.run(script_main(main))
