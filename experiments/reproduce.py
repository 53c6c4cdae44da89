r"""The main job: every experiment of the paper, from one command.

1. Trade-off curves (Fig. 1, ``experiments/tradeoff_curves.py``) -> ``tradeoff/``.
2. Tables 1-2: AATPS / PTT / LOGPPL of basic watermarks, standard
   speculative sampling and Alg. 1 for K in ``--lookaheads``
   (``wmspec_jax.lab.run_speculative``) -> ``speculative.*``, ``aatps.png``.
3. Fig. 2 / Fig. 5: TPR at 1 % FPR vs length and ROC curves for the Gumbel-max
   and SynthID detectors (``run_detection``) -> ``detection.*``,
   ``tpr_vs_length.png``, ``roc.png``.
4. ``summary.md`` (the tables) and ``summary.json`` (checks, timings, files).

Presets (``--preset``); every other flag overrides the preset:

* ``quick``: the built-in pair (SmolLM2-135M-Instruct + feature draft f3),
  the built-in ELI5 stand-in, 16 prompts per speed run with K = 1, 2, 3
  (one text per call, as the paper times PTT: on a CPU a batch of 8 makes the
  verification of 8 x (K + 1) positions compute-bound), 144 texts per detection run and class (48 train / 96 test;
  batches of 32) at K = 1 — the pair's best lookahead by
  ``benchmarks/bench_draft_k.py`` (``docs/models.md``) — 96 new tokens, TPR
  at 16..96 tokens, 2e5 Monte Carlo samples for the curves. README has the
  measured time on a 2-core CPU.
* ``paper``: the paper's sizes (2,000 texts per detection run split 1,000 /
  1,000, 200 new tokens, 1e7 Monte Carlo samples). Give the models, the
  data and a secret: ``WMSPEC_SECRET=... python -m experiments.reproduce
  --preset=paper --target=/ckpt/Llama-2-7b-hf --draft=/ckpt/llama-68m
  --dataset=eli5:/data/eli5.jsonl`` (or Gemma-7B / Gemma-2B, ``c4:PATH``).
  This preset refuses to run with the public demo secret.

The watermark secret is read from ``$WMSPEC_SECRET``, ``--secret_env=VAR`` or
``--secret_file=PATH`` (never from argv; outputs hold only its fingerprint).
Every flag, the dataset and the model paths are checked before the first
stage, and the output directory is locked for the run. Everything is
resumable: rerun the same command after an interruption.

  python -m experiments.reproduce --preset=quick --output_dir=results/quick
"""

import os
import subprocess
import sys
import time

from absl import app, flags


from wmspec_jax import sharding, storage
from wmspec_jax import lab as experiment
from experiments import flags as script_flags

PARTS = ("tradeoff", "speculative", "detection")

PRESETS = {  # settings, Monte Carlo samples of the curves, whether the public demo secret is allowed
    # K = 1 is the built-in pair's best lookahead at the preset's batches (8 and 32) at T = 0.5, 0.7 and 1.0
    # (benchmarks/bench_draft_k.py, batch 8, with feature draft f1, of f3's cost and shape: 1.01 / 0.95 /
    # 1.09 x plain per token at K = 1, 1.10-1.32 at K = 2; docs/models.md; f3 at batch 8, T = 0.7: 1.04 at K = 1,
    # 1.34 at K = 3); at batch 1 it is about even at K = 1 (bench_speculative, T = 0.7, f3: standard / plain
    # 0.96 at K = 1, 1.20 at K = 3; docs/performance.md). The speed runs time one text per call (batch_size=1),
    # as the paper's PTT; the texts do not depend on the batch (docs/performance.md: rows and batches).
    # Detection: 144 of the built-in eval split's 150 questions, 48 train / 96 test texts
    # per class at 96 tokens (4 x the 24 test texts of an earlier quick preset: half the interval
    # width), generated 32 rows per call (more tokens per second than 8 on a CPU; the 128 Alg. 1 texts
    # the speed table has not made fill 4 calls exactly).
    "quick": (experiment.Settings(lookaheads=(1, 2, 3), batch_size=1, detect_lookahead=1, num_detection_texts=144,
                                  num_detection_train=48, detection_batch_size=32,
                                  max_new_tokens=96, tpr_lengths=(16, 32, 48, 64, 96)),
              200_000, True),
    "paper": (experiment.Settings(
        num_prompts=1000, num_detection_texts=2000, max_new_tokens=200, max_prompt_tokens=256, batch_size=32,
        tpr_lengths=(25, 50, 75, 100, 125, 150, 175, 200)), 10_000_000, False),
}

flags.DEFINE_enum("preset", "quick", list(PRESETS), "size of the run (module doc)")
flags.DEFINE_string("output_dir", None, "where outputs go (default: results/<preset>)")
flags.DEFINE_integer("tradeoff_samples", None, "Monte Carlo samples of the trade-off curves (default: preset)")
flags.DEFINE_list("skip", [], "parts to skip: tradeoff, speculative, detection")
script_flags.define_flags(required_defaults=False)
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sharding.maybe_initialize_distributed()  # a multi-process launch joins one JAX runtime first
    unknown = set(FLAGS.skip) - set(PARTS)
    if unknown:
        raise app.UsageError(f"--skip: unknown parts {sorted(unknown)}")
    base, samples, allow_demo = PRESETS[FLAGS.preset]
    settings = script_flags.settings_from_flags(base, allow_demo_secret=allow_demo)
    if FLAGS.tradeoff_samples is not None and FLAGS.tradeoff_samples < 1:
        raise app.UsageError(f"--tradeoff_samples must be >= 1, got {FLAGS.tradeoff_samples}")
    samples = FLAGS.tradeoff_samples or samples
    model_parts = [p for p in ("speculative", "detection") if p not in FLAGS.skip]
    if model_parts:  # dataset, prompt count and model paths: fail now, not after the first stage
        try:
            experiment.preflight(settings, model_parts)
        except (ValueError, FileNotFoundError) as e:
            raise app.UsageError(str(e)) from None
    out = FLAGS.output_dir or os.path.join("results", FLAGS.preset)
    lock = storage.DirectoryLock(out)  # one writer per output directory, for the whole run
    timings, t_all = {}, time.perf_counter()

    if "tradeoff" not in FLAGS.skip:
        experiment.log(f"[1/3] trade-off curves ({samples:,} samples per estimate)")
        t0 = time.perf_counter()
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        subprocess.run([sys.executable, "-m", "experiments.tradeoff_curves", f"--num_samples={samples}",
                        f"--output_dir={os.path.abspath(os.path.join(out, 'tradeoff'))}"], check=True, cwd=root)
        timings["tradeoff_seconds"] = time.perf_counter() - t0

    summary_md = [f"# wmspec_jax reproduction ({FLAGS.preset} preset)", ""]
    checks = {}
    session = None
    if model_parts:
        session = experiment.Session(settings, out, parts=model_parts)
        summary_md += [f"Pair: `{session.pair.name}`; prompts: `{settings.dataset}`; "
                       f"{settings.max_new_tokens} new tokens per text.", ""]
    if "speculative" not in FLAGS.skip:
        experiment.log("[2/3] speculative sampling: AATPS, PTT, LOGPPL (Tables 1-2)")
        t0 = time.perf_counter()
        spec = experiment.run_speculative(session)
        timings["speculative_seconds"] = time.perf_counter() - t0
        checks.update(spec["checks"])
        summary_md += ["## Tables 1-2: efficiency and unbiasedness (mean ± 95% CI)", "",
                       experiment.speculative_markdown(spec["rows"]), ""]
    if "detection" not in FLAGS.skip:
        experiment.log("[3/3] detection: TPR at 1% FPR vs length, ROC (Figs. 2 and 5)")
        t0 = time.perf_counter()
        det = experiment.run_detection(session)
        timings["detection_seconds"] = time.perf_counter() - t0
        summary_md += ["## Fig. 2: TPR at 1% FPR (95% bootstrap CI)", "", experiment.detection_markdown(det), ""]
    timings["total_seconds"] = time.perf_counter() - t_all
    storage.atomic_write_text(os.path.join(out, "summary.md"), "\n".join(summary_md))
    files = sorted(f for f in os.listdir(out) if os.path.isfile(os.path.join(out, f)) and not f.startswith(".")) + ["summary.json"]
    storage.atomic_write_json(os.path.join(out, "summary.json"), {
        "preset": FLAGS.preset, "settings": settings.public(), "tradeoff_samples": samples,
        "checks": checks, "timings": timings, "files": files})
    print("\n".join(summary_md))
    if session is not None:
        session.close()
    lock.release()
    experiment.log(f"done in {timings['total_seconds']:.0f}s; outputs in {out}")


if __name__ == "__main__":
    app.run(experiment.script_main(main))
