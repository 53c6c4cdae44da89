r"""How much editing the watermark survives: TPR at 1 % FPR, AUC and per-stream evidence vs edit rate.

Runs the detection experiment (``experiments/detection.py``: Alg. 1 and
plain sampling from the target, detectors fitted and saved) plus the basic
watermark of both decoders on the same prompts, then edits the test texts'
generated tokens — substitution, insertion, deletion, span reordering,
mixing into human text — at ``--edit_rates`` and scores them with every
detector (``wmspec_jax.lab.robustness``). Outputs under
``--output_dir``: ``robustness.json`` / ``.csv`` / ``.md``, ``robustness.png``,
``robustness_streams.png`` (and the detection experiment's outputs).
With ``--paraphrase`` the test answers are also rewritten by a language model
(the experiment's target, or ``--paraphraser=DIR`` a local checkpoint) and
scored key-only, windowed and model-assisted beside token substitutions at the
same edit distance (``wmspec_jax.lab.paraphrase_robustness``): ``paraphrase.json``
/ ``.csv`` / ``.md`` and ``paraphrases.jsonl``.
Resumable: generations, finished cells and rewrites are reused on a rerun. The secret:
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
from wmspec_jax.lab import paraphrase, paraphrase_robustness, robustness

script_flags.define_flags()
script_flags.define_robustness_flags()
flags.DEFINE_string("output_dir", "results/robustness", "where outputs go")
flags.DEFINE_bool("paraphrase", False, "also score the test answers rewritten by a language model")
flags.DEFINE_string("paraphraser", "", "the rewriting model: '' = the experiment's target, else a local Hugging "
                    "Face checkpoint directory")
_P = paraphrase.ParaphraseSettings()
flags.DEFINE_float("paraphrase_temperature", _P.temperature, "sampling temperature of the rewrites (0: greedy)")
flags.DEFINE_integer("paraphrase_max_new_tokens", _P.max_new_tokens, "longest rewrite in tokens")
flags.DEFINE_integer("paraphrase_batch_size", _P.batch_size, "rewrites per generation call")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()  # a multi-process launch joins one JAX runtime first
    settings = script_flags.settings_from_flags()
    rs = script_flags.robustness_settings_from_flags()
    f = flags.FLAGS
    try:
        ps = paraphrase.ParaphraseSettings(temperature=f.paraphrase_temperature,
                                           max_new_tokens=f.paraphrase_max_new_tokens,
                                           batch_size=f.paraphrase_batch_size)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    if f.paraphraser and not os.path.isdir(f.paraphraser):
        raise app.UsageError(f"--paraphraser={f.paraphraser}: checkpoint directory not found")
    with experiment.Session(settings, f.output_dir, parts=("detection",)) as harness:
        summary = robustness.run_robustness(harness, rs)
        if f.paraphrase:
            model = paraphrase.load_paraphraser_pair(f.paraphraser, settings.dtype) if f.paraphraser else harness.pair
            result = paraphrase_robustness.run_paraphrase(harness, ps, paraphrase.model_paraphraser(model, ps))
    print(robustness.robustness_markdown(summary))
    if f.paraphrase:
        print(paraphrase_robustness.paraphrase_markdown(result))
    check = summary["zero_edit_check"]
    if check.get("compared"):
        experiment.log(f"0 % edits vs the detection experiment (Gumbel detectors, {check['length']} tokens): "
                       f"{'identical TPR' if check['all_equal'] else 'DIFFERENT: ' + str(check['detectors'])}")


if __name__ == "__main__":
    app.run(experiment.script_main(main))
