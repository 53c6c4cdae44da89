r"""How fast the CPU kernel streams a model's layer matrices, against a plain streaming read of as many bytes.

A decode step or verification pass of the built-in target at batch 1 is mostly its layer products
(:mod:`wmspec_jax.models.rows_matmul`): per layer the q / k / v call, the output projection, the gate /
up call and the down projection, four kernel calls over 0.4-7 MB each. This benchmark runs exactly
those calls for ``--layers`` layers of random float32 weights of the built-in target's shapes (each
layer its own matrices, so the 425 MB never sit in a cache), chained so that each call waits for the
one before, for every number of rows M in ``--rows``, interleaved over ``--repeats`` rounds with a
jitted sum over the same number of bytes. It reports, per M, the median milliseconds (min-max), the
GB/s, and the products' time over the sum's: 1.00 means the products stream the weights as fast as the
machine's plain read.

  python -m benchmarks.stream_products
  python -m benchmarks.stream_products --rows=1,2,3,4 --repeats=25 --output=results/stream_products.json
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from wmspec_jax import storage
from wmspec_jax.models import rows_matmul

flags.DEFINE_list("rows", ["1", "2", "3", "4"], "rows M of every product (1: a decode step; K + 1: verification)")
flags.DEFINE_integer("layers", 30, "layers, each with its own matrices", lower_bound=1)
flags.DEFINE_integer("hidden", 576, "model width (the built-in target's)", lower_bound=8)
flags.DEFINE_integer("kv_width", 192, "key / value projection width", lower_bound=8)
flags.DEFINE_integer("intermediate", 1536, "MLP width", lower_bound=8)
flags.DEFINE_integer("repeats", 25, "interleaved rounds (median)", lower_bound=1)
flags.DEFINE_string("output", "results/stream_products.json", "JSON output")
FLAGS = flags.FLAGS


def layer_weights(rng: np.random.Generator) -> dict:
    d, kv, f = FLAGS.hidden, FLAGS.kv_width, FLAGS.intermediate

    def matrix(out, inp):
        return jnp.asarray(rng.standard_normal((out, inp), dtype=np.float32) * 0.02)

    return dict(q=matrix(d, d), k=matrix(kv, d), v=matrix(kv, d), o=matrix(d, d), gate=matrix(f, d),
                up=matrix(f, d), down=matrix(d, f))


@jax.jit
def layer_products(x, layers):
    """The four kernel calls of every layer, each input depending on the call before."""
    for w in layers:
        q, k, v = rows_matmul.rows_matmul_many(x, (w["q"], w["k"], w["v"]))
        x = x + rows_matmul.rows_matmul(q + jnp.sum(k) + jnp.sum(v), w["o"])
        gate, up = rows_matmul.rows_matmul_many(x, (w["gate"], w["up"]))
        x = x + rows_matmul.rows_matmul(gate * up, w["down"])
    return x


def main(argv):
    del argv
    if rows_matmul.library() is None:
        print(f"the kernel is not built here ({rows_matmul.problem()}); these are XLA's products")
    rng = np.random.default_rng(0)
    layers = [layer_weights(rng) for _ in range(FLAGS.layers)]
    nbytes = sum(int(a.size) * 4 for w in layers for a in w.values())
    flat = jnp.ones((nbytes // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    inputs = {int(m): jnp.ones((int(m), FLAGS.hidden), jnp.float32) for m in FLAGS.rows}
    seconds = {m: [] for m in inputs}
    seconds["sum"] = []
    for x in inputs.values():
        jax.block_until_ready(layer_products(x, layers))
    jax.block_until_ready(total(flat))
    for r in range(FLAGS.repeats):
        for m, x in inputs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(layer_products(x, layers))
            seconds[m].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            jax.block_until_ready(total(flat))
            seconds["sum"].append(time.perf_counter() - t0)
    rows = []
    read = float(np.median(seconds["sum"]))
    print(f"{FLAGS.layers} layers, {nbytes / 1e6:.0f} MB of float32 weights; a jitted sum over them: "
          f"{read * 1e3:.2f} ms ({nbytes / read / 1e9:.1f} GB/s), median of {len(seconds['sum'])}")
    print(f"{'M':>3} {'ms':>8} {'(min-max)':>14} {'GB/s':>6} {'/ sum':>6}")
    for m in inputs:
        t = np.asarray(seconds[m])
        row = {"rows": m, "ms_median": float(np.median(t) * 1e3), "ms_min": float(t.min() * 1e3),
               "ms_max": float(t.max() * 1e3), "gb_per_s": nbytes / float(np.median(t)) / 1e9,
               "over_sum": float(np.median(t)) / read}
        rows.append(row)
        print(f"{m:>3} {row['ms_median']:8.2f} ({row['ms_min']:5.1f}-{row['ms_max']:5.1f}) {row['gb_per_s']:6.1f} "
              f"{row['over_sum']:6.2f}")
    storage.atomic_write_json(FLAGS.output, {
        "layers": FLAGS.layers, "bytes": nbytes, "repeats": FLAGS.repeats,
        "kernel_built": rows_matmul.library() is not None, "sum_ms_median": read * 1e3, "sum_gb_per_s": nbytes / read / 1e9, "rows": rows})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
