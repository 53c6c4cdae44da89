r"""Figures other watermark benchmarks report, per decoder and method: tokens to detect (MarkMyWords'
"size"), TPR at 1 % and 0.1 % FPR against length with the FPR measured on null scores (the texts under
many other keys), and LOGPPL of watermarked vs unwatermarked texts at matched strength (WaterBench's
equal-TPR comparison) — ``wmspec_jax.lab.field_metrics``; ``docs/detection.md`` says which benchmark
each figure matches and where the definitions depart.

Runs (or reuses) the detection experiment in ``--output_dir`` and the basic watermark of both decoders
(the robustness experiment's runs: one directory serves both). Outputs: ``field_metrics.json`` /
``.csv`` / ``.md`` and ``field_metrics.png``. The secret: ``$WMSPEC_SECRET`` / ``--secret_env`` /
``--secret_file`` (the public demo secret with a warning otherwise).

  python -m experiments.field_metrics --output_dir=results/robustness --num_detection_texts=96 \
      --num_detection_train=32 --max_new_tokens=96 --gumbel_temperature=1.0 --synthid_temperature=1.0
"""

from absl import app, flags

from wmspec_jax import lab as experiment
from wmspec_jax import sharding
from experiments import flags as script_flags
from wmspec_jax.lab import field_metrics, robustness
from wmspec_jax.lab.detection_experiment import run_detection

script_flags.define_flags()
flags.DEFINE_string("output_dir", "results/field_metrics", "where outputs go")
_F = field_metrics.FieldSettings()
flags.DEFINE_list("alphas", [f"{a:g}" for a in _F.alphas], "FPR levels of the TPR curves")
flags.DEFINE_float("size_alpha", _F.size_alpha, "p-value a running p-value must reach to count as detected")
flags.DEFINE_integer("null_keys", _F.null_keys, "other keys each text is scored under (the null scores)")
flags.DEFINE_list("field_lengths", [str(x) for x in _F.lengths], "token counts of the TPR curves")
flags.DEFINE_float("matched_tpr", _F.matched_tpr, "TPR at 1 % FPR at which quality is compared")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()
    settings = script_flags.settings_from_flags()
    f = flags.FLAGS
    try:
        fs = field_metrics.FieldSettings(alphas=tuple(float(a) for a in f.alphas), size_alpha=f.size_alpha,
                                         null_keys=f.null_keys, lengths=tuple(int(x) for x in f.field_lengths),
                                         matched_tpr=f.matched_tpr)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    with experiment.Session(settings, f.output_dir, parts=("detection",)) as harness:
        if robustness.saved_detection(harness) is None:
            run_detection(harness)
        else:
            experiment.log("field metrics: reusing detection.json and the detectors it saved (same settings)")
        out = field_metrics.run_field_metrics(harness, fs)
    print(field_metrics.field_markdown(out))


if __name__ == "__main__":
    app.run(experiment.script_main(main))
