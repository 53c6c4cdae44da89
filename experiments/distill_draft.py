r"""Distils the adapter draft (kept target layers + LoRA) from SmolLM2-135M-Instruct.

The draft of :mod:`wmspec_jax.models.draft` keeps a subset of the target's
layers (``--layers``) and adds rank-``--rank`` LoRA and norm adapters, with an
optional reduced output head (``--head_size``); this script trains those
adapters by self-distillation from the target. Stages (``--mode``), each
resumable and writing atomically under ``--workdir``:

* ``sample``: target continuations (``--new_tokens`` each, at every
  ``--temperatures``) of the built-in *train* prompts, with the target's
  top-k (``--top_k``) next-token log-probabilities at every generated
  position, saved per chunk of ``--sample_batch`` rows; ``--repeats`` passes
  with new seeds. ``--prompt_source=self_chat`` continues chat questions the
  target writes itself instead (``--self_chat_tries``, ``--question_tokens``,
  ``--self_chat_examples``; chunks named ``train-selfchat_*``).
* ``train``: fits the adapters so that the draft's next-token distribution
  matches the target's on those contexts (forward KL + total variation at
  T = 1 and T = 0.7); ``--steps`` steps of ``--batch`` sequences, cosine
  schedule peaking at ``--lr``; starts from ``--init`` adapters or zero LoRA;
  a reduced head keeps the ``--head_size`` tokens ranked by ``--head_rank`` on
  the chunks ``--head_from`` (or the head of ``--init`` with
  ``--keep_init_head``). Checkpoints every ``--save_every`` steps and resumes
  from the last one, picking up the sample chunks written since it started
  (a run resumed with a larger ``--steps`` rebuilds the schedule for its own
  ``--steps``: a warm restart); finally writes the adapters to ``--out``.
* ``export``: writes the adapters of the last training checkpoint to ``--out``.
* ``eval``: on held-out *eval* prompts (``--eval_prompts`` per temperature),
  samples target continuations and reports the mean per-position acceptance
  alpha = E[1 - TV(Q_T, P_T)], the target's mass on the draft's support (< 1
  for a reduced head), the implied AATPS (1 - alpha^(K+1)) / (1 - alpha) for
  K = 1..4, alpha split by prompt kind (chat questions / plain-text
  openings), and the draft/target per-token decode-time ratio measured in the
  same run (``--timing_batches``; empty: no timing). ``--adapters`` picks the
  file (default ``--out``; ``none``: the plain truncation, no adapters);
  ``--eval_head_sizes`` scores the same adapters with other heads in the same
  pass. Writes ``--eval_json``.

The KL term is the forward KL of the teacher's top-k tokens plus the lumped
remainder, not of the full 49152-token distributions (which would mean storing
or recomputing the target's logits at every training step: ~100x the data, or
the target's forward pass in every step).

The train and eval prompts are a hash split of :mod:`wmspec_jax.text_data`'s
prompts, so ``eval`` never scores a prompt the draft was trained on.

Run from the repository root, e.g. (``W`` is any work folder; give it room for
the sample chunks and checkpoints)::

  W=results/draft/work
  python -m experiments.distill_draft --mode=sample --workdir=$W --repeats=1 \
      --temperatures=0.7,1.0
  python -m experiments.distill_draft --mode=train --workdir=$W --head_size=16384 \
      --head_rank=count --steps=700 --lr=1e-3 --save_every=25 --out=$W/draft.npz
  python -m experiments.distill_draft --mode=eval --workdir=$W --adapters=$W/draft.npz \
      --timing_batches=1,8 --eval_json=$W/eval.json

The recipe is :mod:`wmspec_jax.lab.distill` (samples: :mod:`wmspec_jax.lab.distill_data`). Load the
result with ``--draft=builtin:PATH`` in the tools. The commands,
data and CPU time that made the drafts v1-v3 in ``drafts/`` are in
``docs/measurements/2026-11-27-draft-distillation-recipes.md``.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from wmspec_jax.lab import distill, distill_data

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "eval", ["sample", "train", "export", "eval"], "stage to run")
flags.DEFINE_string("workdir", "results/draft", "samples, checkpoints and logs")
flags.DEFINE_string("out", os.path.join("results", "draft", "adapters.npz"),
                    "where train writes the final adapters (load them with --draft=builtin:PATH)")
flags.DEFINE_integer("head_size", 0, "train: keep this many output tokens in the draft's head, "
                     "the most frequent in the target's train samples (0: the full vocabulary)")
flags.DEFINE_string("head_from", "train_T*.npz", "train: sample files (glob under --workdir) "
                    "whose token counts rank the reduced head's ids")
flags.DEFINE_enum("head_rank", "mass", ["mass", "count"], "how --head_from ranks the tokens "
                  "(frequency_head_ids)")
flags.DEFINE_bool("keep_init_head", False, "train: keep the reduced head of the --init adapters (their "
                  "head_ids; --head_size must equal its size) instead of ranking new ids on --head_from")
flags.DEFINE_string("init", "", "train: start from these adapters (same layers and rank) instead "
                    "of zero LoRA (e.g. the v1 asset)")
flags.DEFINE_string("adapters", "", "eval: adapter file ('' = --out, 'none' = plain truncation)")
flags.DEFINE_list("layers", ["0", "1", "2", "3", "4", "5"], "target layers kept by the draft")
flags.DEFINE_integer("rank", 16, "LoRA rank")
flags.DEFINE_integer("prompt_len", 96, "prompts are left-aligned in this many slots")
flags.DEFINE_integer("new_tokens", 96, "continuation length sampled from the target")
flags.DEFINE_integer("sample_batch", 32, "rows per sampling chunk")
flags.DEFINE_integer("top_k", 64, "teacher log-probs kept per position")
flags.DEFINE_list("temperatures", ["0.7", "1.0"], "sampling / evaluation temperatures")
flags.DEFINE_integer("repeats", 2, "sample: passes over the train prompts (new seeds)")
flags.DEFINE_enum("prompt_source", "train", ["train", "self_chat"], "sample: continue the built-in "
                  "train prompts, or chat questions the target writes itself (more chat data than "
                  "the train split holds; chunks named train-selfchat_*)")
flags.DEFINE_integer("self_chat_tries", 1024, "sample --prompt_source=self_chat: user turns the target "
                     "writes (rounded up to --sample_batch); those ending within --question_tokens with "
                     ">= 3 words are kept")
flags.DEFINE_integer("question_tokens", 48, "sample --prompt_source=self_chat: longest question")
flags.DEFINE_integer("self_chat_examples", 0, "sample --prompt_source=self_chat: the target writes each "
                     "user turn after a conversation of this many train-split question/answer pairs "
                     "(drawn afresh per row), so its questions take the corpus's style; 0 (f1-f3's data): "
                     "after the bare user header")
flags.DEFINE_integer("steps", 300, "train: optimiser steps")
flags.DEFINE_integer("batch", 8, "train: sequences per step")
flags.DEFINE_float("lr", 2e-3, "train: peak learning rate")
flags.DEFINE_integer("save_every", 50, "train: checkpoint period (steps)")
flags.DEFINE_integer("eval_prompts", 64, "eval: held-out prompts per temperature")
flags.DEFINE_string("eval_json", "", "eval: write the report here as JSON")
flags.DEFINE_list("eval_head_sizes", [], "eval: also score the adapters with reduced heads of "
                  "these sizes (0: the full head), ids ranked by --head_rank on --head_from")
flags.DEFINE_list("timing_batches", ["1", "32"], "eval: batch sizes of the decode-time ratio")
flags.DEFINE_integer("seed", 0, "random seed")


def main(argv):
    del argv
    os.makedirs(os.path.join(FLAGS.workdir, "eval"), exist_ok=True)
    settings = distill_data.DistillSettings.from_flags(FLAGS.flag_values_dict())
    try:
        if FLAGS.mode == "eval":
            print(json.dumps(distill.evaluate(settings), indent=2))
        else:
            {"sample": distill_data.sample, "train": distill.train, "export": distill.export}[FLAGS.mode](settings)
    except distill_data.RecipeError as e:  # a setting or a missing input: the message, no traceback
        raise SystemExit(str(e)) from None


if __name__ == "__main__":
    app.run(main)
