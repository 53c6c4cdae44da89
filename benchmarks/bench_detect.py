"""Detection throughput on CPU: tokens scored per second.

    python -m benchmarks.bench_detect --output=results/bench_detect.json

Measured end to end from token ids and the key, excluding compilation (one
warm-up call per shape first), for a batch of random texts:

* ``gumbel_three_streams`` — y^D, y^T, u and the repeated-context mask
  (:func:`wmspec_jax.detect.gumbel_statistics`) plus Ars-τ's score and exact
  Gamma p-value: the target of ≥ 1e6 tokens/s;
* its parts: the repeated-context mask alone, the hashes alone, the score
  alone; a NumPy baseline of the hashes (``prf_numpy``);
* ``gumbel_soft`` — the soft detector's score with its saddlepoint p-value;
* ``synthid_statistics`` (m layers, both streams) and ``bayes_mlp`` scoring.

This is a benchmark, not a test: it prints and writes numbers and asserts
nothing about time.
"""

from __future__ import annotations

import os
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

import wmspec_jax.detect as det
from wmspec_jax import context, prf, prf_numpy
from wmspec_jax import storage as wm_results

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch", 256, "Texts per batch.")
flags.DEFINE_integer("length", 1024, "Tokens per text.")
flags.DEFINE_integer("vocab", 32_000, "Vocabulary of the random token ids.")
flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m.")
flags.DEFINE_integer("repeats", 5, "Timed repetitions (the median is reported).")
flags.DEFINE_string("output", "results/bench_detect.json", "Where the JSON goes.")


def _time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile / warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv):
    del argv
    b, length, m = FLAGS.batch, FLAGS.length, FLAGS.synthid_layers
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, FLAGS.vocab, size=(b, length)).astype(np.int32)
    keys = prf.stream_keys([f"bench-{i}" for i in range(b)])
    n_tok = b * length
    results = {}

    def record(name, seconds, tokens_=n_tok):
        results[name] = {"seconds": seconds, "tokens_per_second": tokens_ / seconds}
        print(f"{name:28s} {tokens_ / seconds / 1e6:8.2f} M tokens/s   ({seconds * 1e3:8.1f} ms per batch)")

    record("gumbel_three_streams", _time(lambda: det.score_ars_tau(det.gumbel_statistics(tokens, keys, vocab_size=FLAGS.vocab), 0.5).log_pvalue,
                                         FLAGS.repeats))
    st = det.gumbel_statistics(tokens, keys, vocab_size=FLAGS.vocab)
    starts = jnp.full((b,), prf.DEFAULT_CONTEXT_WIDTH, jnp.int32)
    lengths = jnp.full((b,), length, jnp.int32)
    mask_fn = jax.jit(lambda t: context.scored_mask(t, lengths, starts, prf.DEFAULT_CONTEXT_WIDTH))
    record("  repeated-context mask", _time(lambda: mask_fn(jnp.asarray(tokens)), FLAGS.repeats))

    @jax.jit
    def hashes(t, k):
        pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), t.shape)
        seeds = prf.context_seeds(k[:, :, None, :], prf.gather_contexts(t, pos, prf.DEFAULT_CONTEXT_WIDTH)[:, None])
        return (prf.token_uniforms(seeds[:, 0], t), prf.token_uniforms(seeds[:, 1], t),
                prf.position_uniforms(seeds[:, 2]))

    record("  hashes (3 streams)", _time(lambda: hashes(jnp.asarray(tokens), jnp.asarray(keys)), FLAGS.repeats))
    record("  Ars-tau score + p-value", _time(lambda: det.score_ars_tau(st, 0.5).log_pvalue, FLAGS.repeats))

    def numpy_hashes():
        pos = np.arange(length)[None, :, None] + np.arange(-prf.DEFAULT_CONTEXT_WIDTH, 0)[None, None]  # [1, L, h]
        ctx = np.where(pos >= 0, tokens[np.arange(b)[:, None, None], np.clip(pos, 0, None)], -1)  # [B, L, h]
        out = []
        for s in range(3):
            seeds = prf_numpy.context_seeds(keys[:, s][:, None, :], ctx)
            out.append(prf_numpy.position_uniforms(seeds) if s == 2 else prf_numpy.token_uniforms(seeds, tokens))
        return out

    record("  NumPy twin, hashes", _time(numpy_hashes, max(1, FLAGS.repeats // 2)))

    src = np.where(rng.random((b, length)) < 0.5, 0, 2).astype(np.int8)
    soft = det.fit_soft(st, src)
    record("gumbel_soft", _time(lambda: det.score_soft(soft, st).log_pvalue, FLAGS.repeats))

    record("synthid_statistics", _time(lambda: det.synthid_statistics(tokens, keys, m, vocab_size=FLAGS.vocab).g_draft, FLAGS.repeats))
    sy = det.synthid_statistics(tokens, keys, m, vocab_size=FLAGS.vocab)
    cfg = det.BayesConfig(mode="mlp", num_layers=m)
    mlp = det.bayes.bayes_detector(cfg, det.bayes.init_params(cfg, jax.random.key(0)))
    record("bayes_mlp (scoring)", _time(lambda: det.score_bayes(mlp, sy).score, FLAGS.repeats))

    meta = {"batch": b, "length": length, "synthid_layers": m, "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "jax": jax.__version__}
    out = pathlib.Path(FLAGS.output)
    wm_results.atomic_write_json(out, {"meta": meta, "results": results})
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
