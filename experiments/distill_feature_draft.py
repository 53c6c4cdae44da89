r"""Distils a feature-conditioned draft (:mod:`wmspec_jax.models.feature_draft`) for SmolLM2.

Uses the sample chunks of ``experiments/distill_draft.py --mode=sample`` (the
target's continuations of the train prompts, or of chat questions it wrote
itself, with its top-64 next-token log-probabilities) in the same
``--workdir``, and shares that script's flags (``--workdir --steps --batch
--lr --save_every --seed --temperatures --prompt_len --eval_prompts
--timing_batches --eval_json``). Stages (``--stage``), each resumable and
writing atomically:

* ``features``: the target's final hidden states at every position of every
  train chunk that has none yet (``<workdir>/feat/*.npy``, float16; the
  draft's inputs).
* ``train``: fits the draft's ``fc``, layer and final norm so that its
  next-token distribution matches the teacher's top-k (forward KL + TV at
  T = 1 and 0.7, :func:`wmspec_jax.lab.distill.teacher_loss`), in two passes per
  batch: with the target's features (the first draft of a step) and with the
  draft's own features of the previous position from the first pass (later
  drafts, which run before the target has seen the drafted tokens; weight
  ``--second_pass``), plus a small regression of the draft's hidden state
  onto the target's (``--feature_loss``). It trains on every chunk that has
  features when it starts. The draft starts from the target's last layer, or
  from ``--feature_init``'s weights with a fresh optimiser; its reduced head
  is that of ``--head_ids_from``. Optional regularisers: ``--weight_decay``
  (AdamW, matrices only) and ``--feature_noise`` (uniform noise on the
  target's features, as EAGLE trains); optional ``--third_pass``: a third
  pass on the own features of the second, as the third draft of a step reads
  them (EAGLE-3's training-time test, one step deeper). Warm-up then cosine
  decay from ``--lr`` over ``--steps``; checkpoints every ``--save_every``
  steps and resumes from the last one (a run resumed with a larger
  ``--steps`` rebuilds the schedule for its own ``--steps``: a warm
  restart); writes ``--feature_out``.
* ``eval``: held-out acceptance alpha = E[1 − TV(Q_T, P_T)] on the eval
  prompts (the same target samples as ``distill_draft --mode=eval``), for the
  first draft of a step (target features), the second (own features) and the
  third (own features of own features), a K = 3 tokens-per-step estimate
  from them (:func:`wmspec_jax.lab.distill_features.tokens_per_step_k3`),
  split by prompt kind, and the draft/target decode-time ratio; with ``--chunk_globs`` also alpha on
  sample chunks of the workdir (trained-on against unseen rounds: the
  generalisation gap). ``--feature_draft`` picks the file (default
  ``--feature_out``).

Run from the repository root, after ``distill_draft --mode=sample`` has
written chunks to ``$W`` (any work folder), e.g.::

  python -m experiments.distill_feature_draft --stage=features --workdir=$W
  python -m experiments.distill_feature_draft --stage=train --workdir=$W --steps=3000 \
      --lr=1.5e-3 --save_every=50 --weight_decay=0.05 --feature_noise=0.2 \
      --feature_out=$W/feature_draft.npz
  python -m experiments.distill_feature_draft --stage=eval --workdir=$W \
      --feature_draft=$W/feature_draft.npz --timing_batches=1 --eval_json=$W/eval.json

The recipe is :mod:`wmspec_jax.lab.distill_features`. Load the result with
``--draft=builtin:PATH`` in the tools. The commands,
data and CPU time that made the feature drafts f1-f3 (f3 is the default
built-in draft) are in ``docs/measurements/2026-11-27-draft-distillation-recipes.md``.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from experiments.distill_draft import FLAGS  # its flags (--workdir, --steps, ...) are shared
from wmspec_jax.lab import distill_data, distill_features

flags.DEFINE_enum("stage", "eval", ["features", "train", "eval"], "stage to run")
flags.DEFINE_string("feature_out", os.path.join("results", "draft", "feature_draft.npz"),
                    "train: the feature draft file written at the end (load it with --draft=builtin:PATH)")
flags.DEFINE_string("feature_draft", "", "eval: feature draft file ('' = --feature_out)")
flags.DEFINE_string("head_ids_from", "f3", "train: reduced head = the head ids of this draft: a shipped "
                    "draft's name or a draft file of either kind (f3 carries v3's ids; '' = full head)")
flags.DEFINE_float("feature_loss", 0.1, "train: weight of the hidden-state regression")
flags.DEFINE_float("second_pass", 0.5, "train: weight of the own-feature pass")
flags.DEFINE_float("third_pass", 0.0, "train: weight of a third pass, on the own features of the "
                   "second (the third draft of a step: EAGLE-3's training-time test, one step deeper; "
                   "off for f1-f3)")
flags.DEFINE_list("chunk_globs", [], "eval: also measure alpha (teacher-forced, each chunk at its own "
                  "temperature) on these sample chunks of --workdir, e.g. a trained-on round against an "
                  "unseen one (the generalisation gap)")
flags.DEFINE_string("feature_init", "", "train: start from this feature draft file's weights (e.g. the "
                    "f3 asset, whose training state is not shipped) with a fresh optimiser, instead of "
                    "the target's last layer; its head ids must equal --head_ids_from's")
flags.DEFINE_float("weight_decay", 0.0, "train: AdamW decay of fc and the layer's matrices (not norms)")
flags.DEFINE_float("feature_noise", 0.0, "train: half-width of uniform noise added to the target's "
                   "features in the first pass (EAGLE's augmentation; the features' RMS is ~2)")


def main(argv):
    del argv
    os.makedirs(os.path.join(FLAGS.workdir, "eval"), exist_ok=True)
    values = FLAGS.flag_values_dict()
    settings = distill_data.DistillSettings.from_flags(values)
    own = distill_features.FeatureSettings.from_flags(values)
    try:
        if FLAGS.stage == "features":
            distill_features.compute_features(settings)
        elif FLAGS.stage == "train":
            distill_features.train(settings, own)
        else:
            print(json.dumps(distill_features.evaluate(settings, own), indent=2))
    except distill_data.RecipeError as e:  # a setting or a missing input: the message, no traceback
        raise SystemExit(str(e)) from None


if __name__ == "__main__":
    app.run(main)
