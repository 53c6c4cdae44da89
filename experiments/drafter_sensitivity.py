r"""Does Alg. 1's detection power depend on the draft? Six drafts of one target and Q's own temperature.

For each decoder (``--decoders``: Gumbel-max, SynthID) and speculative watermarking method
(``--methods``: ``pseudorandom`` = Alg. 1, ``hu``, ``dathathri``, ``coupled``) it generates ``--num_prompts`` answers
of ``--max_new_tokens`` tokens with every draft of ``--drafts`` (Q at ``--temperature``, P's), and with
``--sweep_draft`` at each of ``--draft_temperatures`` (the text's law stays P: Thm 4.1); the basic
watermark is the drafter-free reference. Per cell: acceptance, AATPS, LOGPPL, TPR at p ≤ 0.01 at each
of ``--lengths`` for the key-only default detector and the model-assisted one (Clopper–Pearson 95 %
intervals), the human FPR; per method and detector the spread of TPR over drafts and over Q's
temperatures with a chi-square test of equal TPRs (:mod:`wmspec_jax.lab.drafter_sensitivity`).

  python -m experiments.drafter_sensitivity --output_dir=results/drafter_sensitivity
  python -m experiments.drafter_sensitivity --decoders=gumbel --methods=pseudorandom --num_prompts=32

A draft is ``name=spec`` (``spec`` as ``--draft`` of the other scripts: ``builtin`` for the shipped f3,
``builtin:PATH`` for a draft file, a checkpoint directory); the defaults are the built-in target's six
drafts, five of them files of the repository's ``drafts/`` folder (run from its root). Resumable: the
generations are appended to ``<output_dir>/generations.jsonl`` (one writer per directory) and a rerun
with the same flags generates only what is missing; ``drafter_sensitivity.json``, ``.csv`` and ``.png``
are rewritten atomically. The watermark secret comes from ``$WMSPEC_SECRET`` (or ``--secret_env`` /
``--secret_file``; ``--demo_secret`` for the public one).
"""

from __future__ import annotations

import time

from absl import app, flags

from experiments import table_flags
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.lab import drafter_sensitivity as sensitivity
from wmspec_jax.lab.harness import script_main
from wmspec_jax.models import pairs

BUILTIN_DRAFTS = ["v1=builtin:drafts/smollm2_draft.npz", "v2=builtin:drafts/smollm2_draft_v2.npz",
                  "v3=builtin:drafts/smollm2_draft_v3.npz", "f1=builtin:drafts/smollm2_feature_draft_f1.npz",
                  "f2=builtin:drafts/smollm2_feature_draft_f2.npz", "f3=builtin"]

cli_flags.define_secret_flags(demo_flag=True)
flags.DEFINE_string("target", "builtin", "the target (builtin, or a local checkpoint directory)")
flags.DEFINE_list("drafts", BUILTIN_DRAFTS, "the drafts compared, each name=spec (spec as --draft of the other "
                  "scripts)")
flags.DEFINE_string("sweep_draft", "f3", "the draft (a name of --drafts) also run at each --draft_temperatures")
flags.DEFINE_list("draft_temperatures", ["0.5", "1.0", "1.5"], "Q's own temperatures for --sweep_draft")
flags.DEFINE_string("dtype", "float32", "params dtype of checkpoints (float32 or bfloat16)")
flags.DEFINE_string("dataset", "builtin-eli5", "prompts (and their human answers): builtin-eli5, eli5:PATH, ...")
flags.DEFINE_list("decoders", ["gumbel", "synthid"], "decoders (gumbel, synthid)")
flags.DEFINE_list("methods", ["pseudorandom", "hu", "dathathri", "coupled"], "speculative watermarking methods "
                  "(coupled: the draft drawn with the target's stream; its text is the basic watermark's)")
flags.DEFINE_integer("num_prompts", 64, "answers per cell", lower_bound=2)
flags.DEFINE_integer("max_new_tokens", 128, "tokens per answer (every answer runs to it: no stop at EOS)",
                     lower_bound=8)
flags.DEFINE_list("lengths", ["32", "64", "128"], "generated tokens at which TPR and FPR are reported")
table_flags.define_table_flags("results/drafter_sensitivity", "P's temperature (and Q's outside the sweep)", "K")
FLAGS = flags.FLAGS


def settings_from_flags() -> sensitivity.SensitivitySettings:
    """The checked settings: every flag before any model loads (a bad one is a usage error)."""
    try:
        drafts = []
        for item in FLAGS.drafts:
            name, sep, spec = item.partition("=")
            if not sep or not name or not spec:
                raise ValueError(f"--drafts: expected name=spec, got {item!r}")
            drafts.append((name, spec))
        lengths = tuple(int(x) for x in FLAGS.lengths)
        temps = tuple(float(x) for x in FLAGS.draft_temperatures)
        return sensitivity.SensitivitySettings(
            decoders=tuple(FLAGS.decoders), methods=tuple(FLAGS.methods), drafts=tuple(drafts),
            sweep_draft=FLAGS.sweep_draft, draft_temperatures=temps, temperature=FLAGS.temperature,
            lookahead=FLAGS.lookahead, synthid_layers=FLAGS.synthid_layers, lengths=lengths,
            max_new_tokens=FLAGS.max_new_tokens, num_prompts=FLAGS.num_prompts, batch_size=FLAGS.batch_size,
            seed=FLAGS.seed)
    except ValueError as e:
        raise app.UsageError(str(e)) from None


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    s = settings_from_flags()
    secret, source, prompt_set, store = table_flags.start_table([spec for _, spec in s.drafts])
    t0 = time.perf_counter()
    print(f"secret from {source}; {len(s.draft_settings())} draft settings x {len(s.decoders)} decoders x "
          f"{len(s.methods)} methods, + basic", flush=True)
    result = sensitivity.run_experiment(
        s, lambda spec: pairs.load_pair(FLAGS.target, spec, FLAGS.dtype), prompt_set, FLAGS.max_prompt_tokens,
        store, secret, log=lambda msg: print(msg, flush=True))
    settings = {f: FLAGS[f].value for f in ("target", "drafts", "sweep_draft", "draft_temperatures", "dtype",
                                            "dataset", "decoders", "methods", "num_prompts", "max_new_tokens",
                                            "lengths", "lookahead", "temperature", "synthid_layers", "seed")}
    settings["key_fingerprint"] = secret.fingerprint
    sensitivity.write_outputs(FLAGS.output_dir, result, settings)
    print(sensitivity.markdown(result))
    print(f"wrote drafter_sensitivity.json, .csv, .png to {FLAGS.output_dir} in {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    app.run(script_main(main))
