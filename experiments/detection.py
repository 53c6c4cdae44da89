r"""Fig. 2 (TPR at 1 % FPR vs length) and Fig. 5 (ROC) for Alg. 1 with each decoder.

Generates Alg. 1 texts (Gumbel-max at ``--gumbel_temperature``, SynthID with
``--synthid_layers`` at ``--synthid_temperature``) and unwatermarked plain
samples of the target on the same prompts (the law of standard speculative
sampling too), trains the detectors on the first ``--num_detection_train``
texts (default half; Ars-τ, Ars-Prior, soft; Bayes-Prior, Bayes-MLP,
Oracles) and reports the rest: ``detection.json`` / ``.csv``,
``tpr_vs_length.png``, ``roc.png`` and the fitted ``detectors/*.npz`` under
``--output_dir``. Human answers of the dataset (the built-in ELI5 stand-in
has them) are SynthID's negatives as in the paper (App. D); the FPR is
reported on both the human and the model negatives. Resumable. The secret:
``$WMSPEC_SECRET`` / ``--secret_env`` / ``--secret_file`` (as
``experiments/speculative.py``).

  python -m experiments.detection --output_dir=results/detection
  python -m experiments.detection --target=/ckpt/llama-2-7b --draft=/ckpt/llama-68m \
      --dataset=eli5:/data/eli5.jsonl --num_detection_texts=2000 --max_new_tokens=200 \
      --tpr_lengths=25,50,100,150,200 --batch_size=32
"""

import os

from absl import app, flags


from wmspec_jax import sharding
from wmspec_jax import lab as experiment
from experiments import flags as script_flags

script_flags.define_flags()
flags.DEFINE_string("output_dir", "results/detection", "where outputs go")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()  # a multi-process launch joins one JAX runtime first
    settings = script_flags.settings_from_flags()
    with experiment.Session(settings, flags.FLAGS.output_dir, parts=("detection",)) as session:
        out = experiment.run_detection(session)
    print(experiment.detection_markdown(out))


if __name__ == "__main__":
    app.run(experiment.script_main(main))
