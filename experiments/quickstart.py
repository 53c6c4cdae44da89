"""Quick look at the paper's simulated pair (App. C.1): the numbers behind Fig. 1's markers.

    python -m experiments.quickstart --output_dir=results/quickstart

Prints and writes ``quickstart.json``: 1 − TV(Q, P) (the efficiency of
standard speculative sampling and of Alg. 1), Ent(P) (the maximal watermark
strength, attained by Alg. 1) and Monte Carlo watermark strengths of
Gumbel-max and SynthID(m) on P with the package's pseudorandom streams.
"""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
from absl import app, flags

from wmspec_jax import decoders, prf, storage, theory
from wmspec_jax.lab.harness import script_main

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "results/quickstart", "Where quickstart.json goes.")
flags.DEFINE_integer("num_samples", 100_000, "Monte Carlo samples of ζ.")
flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m.")
flags.DEFINE_integer("seed", 0, "Seed of the random contexts that index ζ.")

PAPER_Q = np.array([0.4, 0.10, 0.12, 0.11, 0.08, 0.06, 0.05, 0.035, 0.025, 0.02], np.float32)
PAPER_P = np.array([0.1, 0.13, 0.155, 0.115, 0.235, 0.065, 0.055, 0.05, 0.06, 0.035], np.float32)


def main(argv):
    del argv
    rng = np.random.default_rng(FLAGS.seed)
    contexts = rng.integers(0, 2**31, size=(FLAGS.num_samples, prf.DEFAULT_CONTEXT_WIDTH))
    seeds = prf.context_seeds(prf.stream_keys(b"quickstart")[prf.Stream.TARGET], contexts)
    v = PAPER_P.size
    gumbel = jax.vmap(decoders.gumbel_max, in_axes=(None, 0))(PAPER_P, prf.vocab_uniforms(seeds, v))
    synth = jax.vmap(decoders.synthid, in_axes=(None, 0))(
        PAPER_P, prf.vocab_gbits(seeds, v, FLAGS.synthid_layers)
    )
    ws_g, se_g = theory.watermark_strength(PAPER_P, gumbel)
    ws_s, se_s = theory.watermark_strength(PAPER_P, synth)
    result = {
        "one_minus_tv": float(1 - theory.total_variation(PAPER_Q, PAPER_P)),
        "entropy_P": float(theory.entropy(PAPER_P)),
        "ws_gumbel": [float(ws_g), float(se_g)],
        f"ws_synthid_m{FLAGS.synthid_layers}": [float(ws_s), float(se_s)],
        "num_samples": FLAGS.num_samples,
        "seed": FLAGS.seed,
        "prf_version": prf.PRF_VERSION,
    }
    print(json.dumps(result, indent=2))
    storage.atomic_write_json(pathlib.Path(FLAGS.output_dir) / "quickstart.json", result)


if __name__ == "__main__":
    app.run(script_main(main))
