r"""Tables 1-2: AATPS, per-token time and log-perplexity of each method.

Runs basic Gumbel-max / SynthID, standard speculative sampling and Alg. 1
(pseudorandom acceptance) with each decoder for every K in ``--lookaheads``,
on the same prompts, and writes ``speculative.json`` / ``.csv`` and
``aatps.png`` (95 % confidence intervals) under ``--output_dir``. Resumable:
rerunning with the same flags only generates what is missing.

  python -m experiments.speculative --output_dir=results/speculative
  WMSPEC_SECRET=... python -m experiments.speculative --target=/ckpt/llama-2-7b --draft=/ckpt/llama-68m \
      --dataset=eli5:/data/eli5.jsonl --num_prompts=500 --max_new_tokens=200 --batch_size=32

The watermark secret comes from ``$WMSPEC_SECRET`` (or ``--secret_env`` /
``--secret_file``); without one the public demo secret is used, with a
warning. Every flag is validated before any work; one process at a time may
write an output directory. Flags: ``experiments.flags.FLAG_HELP``
(``--helpfull``).
"""

import os

from absl import app, flags


from wmspec_jax import sharding
from wmspec_jax import lab as experiment
from experiments import flags as script_flags

script_flags.define_flags()
flags.DEFINE_string("output_dir", "results/speculative", "where outputs go")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()  # a multi-process launch joins one JAX runtime first
    settings = script_flags.settings_from_flags()
    with experiment.Session(settings, flags.FLAGS.output_dir, parts=("speculative",)) as session:
        summary = experiment.run_speculative(session)
    print(experiment.speculative_markdown(summary["rows"]))


if __name__ == "__main__":
    app.run(experiment.script_main(main))
