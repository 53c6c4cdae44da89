"""Figure 1: trade-off curves between watermark strength and sampling efficiency.

    python -m experiments.tradeoff_curves --output_dir=results/tradeoff
    python -m experiments.tradeoff_curves --q=0.5,0.3,0.2 --p=0.2,0.3,0.5 --num_samples=1000000

Writes ``tradeoff.json`` (every curve as arrays of SE and WS with standard
errors, the inputs, sample counts, seed and provenance) and ``tradeoff.png``
(the two panels of Fig. 1) to ``--output_dir``:

* left — linear classes (Eq. 9-10) for Gumbel-max and SynthID (m = ∞), the
  standard SpecSampl cross (1 − TV, 0), the two decoders' strength-maintained
  points (both models watermarked with one ζ), the optimum star (1 − TV, Ent(P));
* right — Hu's and Google's classes (App. C.2) for both decoders, Google's
  class with finite-m SynthID (the lower gray curve), the optimum star.

``--extra_decoders=dipmark,gamma_reweight,inverse_transform`` (beyond the
paper) adds, per decoder, Google's class by Monte Carlo (right panel), its
strength-maintained end and Alg. 1's point (for a non-degenerate decoder SE
stays 1 − TV and WS falls below Ent(P)).

``--published_hu`` draws Hu's class as the paper's released simulation
computed it (unnormalised residual), clearly labelled; the JSON always holds
both the correct and the as-published Hu curves.

Every Monte Carlo result is cached under ``<output_dir>/cache`` keyed by its
inputs, so an interrupted run resumes where it stopped (``--force`` ignores
the cache). All files are written atomically (``wmspec_jax.storage.atomic_write``). The
computation is :mod:`wmspec_jax.lab.tradeoff_experiment`.
"""

from __future__ import annotations

import pathlib

from absl import app, flags

from wmspec_jax.lab import tradeoff_experiment as experiment
from wmspec_jax.lab.harness import script_main
from wmspec_jax.tradeoff import montecarlo

FLAGS = flags.FLAGS
PAPER_Q = "0.4,0.10,0.12,0.11,0.08,0.06,0.05,0.035,0.025,0.02"
PAPER_P = "0.1,0.13,0.155,0.115,0.235,0.065,0.055,0.05,0.06,0.035"
flags.DEFINE_list("q", PAPER_Q.split(","), "Draft distribution Q (comma list). Default: App. C.1.")
flags.DEFINE_list("p", PAPER_P.split(","), "Target distribution P (comma list). Default: App. C.1.")
flags.DEFINE_integer("num_samples", 10_000_000, "Monte Carlo samples of ζ per estimate (App. C.1 uses 1e7).")
flags.DEFINE_integer("synthid_layers", 30, "Tournament layers m of the finite-m SynthID curve (gray).")
flags.DEFINE_integer("synthid_limit_layers", 30, "Layers applied before the one-hot in SynthID m=∞ (App. C.1: 30).")
flags.DEFINE_integer("seed", 0, "Seed of the Monte Carlo ζ (PRF stream keys).")
flags.DEFINE_string("output_dir", "results/tradeoff", "Where tradeoff.json, tradeoff.png and cache/ go.")
flags.DEFINE_bool("published_hu", False, "Plot Hu's class as published (unnormalised residual), labelled as such.")
flags.DEFINE_integer("num_gammas", 51, "γ values on [0, 1] for Hu's and Google's classes.")
flags.DEFINE_integer("num_levels", 101, "Strength levels on [0, Ent(P)] for the linear classes.")
flags.DEFINE_integer("block_size", montecarlo.DEFAULT_BLOCK_SIZE, "Samples per on-device reduction block.")
flags.DEFINE_integer("blocks_per_chunk", montecarlo.DEFAULT_BLOCKS_PER_CHUNK, "Blocks per jitted chunk (memory knob).")
flags.DEFINE_bool("linear_finite_synthid", False,
                  "Also compute the linear class for finite-m SynthID (slow: one MC pass per zoom round).")
flags.DEFINE_bool("force", False, "Recompute everything, ignoring the cache.")
flags.DEFINE_list("extra_decoders", [], "Unbiased decoders beyond the paper to add (inverse_transform, dipmark, "
                  "gamma_reweight): Google's class, strength-maintained and Alg. 1 points, by Monte Carlo.")


def settings_from_flags() -> experiment.TradeoffSettings:
    return experiment.TradeoffSettings(
        num_samples=FLAGS.num_samples, seed=FLAGS.seed, synthid_layers=FLAGS.synthid_layers,
        synthid_limit_layers=FLAGS.synthid_limit_layers, num_gammas=FLAGS.num_gammas, num_levels=FLAGS.num_levels,
        block_size=FLAGS.block_size, blocks_per_chunk=FLAGS.blocks_per_chunk,
        linear_finite_synthid=FLAGS.linear_finite_synthid, extra_decoders=tuple(FLAGS.extra_decoders),
        published_hu=FLAGS.published_hu)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    settings = settings_from_flags()
    try:  # a bad flag is a usage error, shown with the script's help
        q, p = experiment.parse_dist(FLAGS.q, "q"), experiment.parse_dist(FLAGS.p, "p")
        experiment.check_inputs(q, p, settings)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    out = pathlib.Path(FLAGS.output_dir)
    result = experiment.run_tradeoff(q, p, settings, out, force=FLAGS.force)
    print("\n".join(experiment.summary_lines(result)))
    hits = result["cache_hits"]
    print(f"wrote {out / 'tradeoff.json'} and {out / 'tradeoff.png'} in {result['total_seconds']:.1f}s"
          + (f" (cache hits: {', '.join(hits)})" if hits else ""))


if __name__ == "__main__":
    app.run(script_main(main))
