r"""How much editing the watermark survives: TPR at 1 % FPR, AUC and per-stream evidence vs edit rate.

Runs the detection experiment (``experiments/detection.py``: Alg. 1 and
plain sampling from the target, detectors fitted and saved) plus the basic
watermark of both decoders on the same prompts, then edits the test texts'
generated tokens — substitution, insertion, deletion, span reordering,
mixing into human text — at ``--edit_rates`` and scores them with every
detector (``wmspec_jax.lab.robustness``). Outputs under
``--output_dir``: ``robustness.json`` / ``.csv`` / ``.md``, ``robustness.png``,
``robustness_streams.png`` (and the detection experiment's outputs).
Resumable: generations and finished cells are reused on a rerun. The secret:
``$WMSPEC_SECRET`` / ``--secret_env`` / ``--secret_file`` (the public demo
secret with a warning otherwise).

  python -m experiments.robustness --output_dir=results/robustness
  python -m experiments.robustness --output_dir=results/robustness --num_detection_texts=64 --max_new_tokens=64 \
      --gumbel_temperature=1.0 --synthid_temperature=1.0 --tpr_lengths=16,32,64 --edit_rates=0,0.1,0.2,0.3,0.4,0.5
"""

import os

from absl import app, flags


from wmspec_jax import sharding
from wmspec_jax import lab as experiment
from experiments import flags as script_flags
from wmspec_jax.lab import robustness

script_flags.define_flags()
script_flags.define_robustness_flags()
flags.DEFINE_string("output_dir", "results/robustness", "where outputs go")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()  # a multi-process launch joins one JAX runtime first
    settings = script_flags.settings_from_flags()
    rs = script_flags.robustness_settings_from_flags()
    with experiment.Session(settings, flags.FLAGS.output_dir, parts=("detection",)) as session:
        summary = robustness.run_robustness(session, rs)
    print(robustness.robustness_markdown(summary))
    check = summary["zero_edit_check"]
    if check.get("compared"):
        experiment.log(f"0 % edits vs the detection experiment (Gumbel detectors, {check['length']} tokens): "
                       f"{'identical TPR' if check['all_equal'] else 'DIFFERENT: ' + str(check['detectors'])}")


if __name__ == "__main__":
    app.run(experiment.script_main(main))
