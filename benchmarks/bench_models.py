r"""Prefill and per-token decode time of the built-in target and draft.

Each measurement is a jitted call timed with ``block_until_ready``; the first
(compiling) call is excluded and the median over ``--repeats`` is reported.
Target and draft calls are interleaved so both see the same background load.
Prefill runs ``step`` over a ``--prompt_len`` prompt with the logits dropped
(as the speculative loop does, so XLA removes the LM head); decode is one
``step`` with T = 1 at a context of ``--context`` tokens.

  /work/venv/bin/python benchmarks/bench_models.py --json=/tmp/bench_models.json
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from wmspec_jax.models import builtin  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["1", "32"], "batch sizes to time")
flags.DEFINE_integer("prompt_len", 64, "prefill length")
flags.DEFINE_integer("context", 128, "tokens already in the cache when decoding")
flags.DEFINE_integer("repeats", 20, "timed repeats (median reported)")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "params dtype")
flags.DEFINE_string("json", "", "write the results here")


def median_times(calls) -> list[float]:
    """Median seconds of each (fn, args) in ``calls``; repeats are interleaved.

    Interleaving the models (target, draft, target, ...) exposes both to the
    same background load, which keeps their ratio meaningful on a shared machine.
    """
    for fn, args in calls:
        jax.block_until_ready(fn(*args))  # compile + warm-up, not timed
    times = [[] for _ in calls]
    for _ in range(FLAGS.repeats):
        for i, (fn, args) in enumerate(calls):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[i].append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def calls_for(ckpt, batch: int):
    """(prefill, decode) jitted calls with their arguments."""
    lm = ckpt.language_model()
    capacity = max(FLAGS.prompt_len, FLAGS.context) + 8
    prefill = jax.jit(lambda p, c, t, n: lm.step(p, c, t, n)[1])
    decode = jax.jit(lm.step)
    cache = lm.init_cache(batch, capacity)
    prefill_args = (ckpt.params, cache, jnp.ones((batch, FLAGS.prompt_len), jnp.int32),
                    jnp.full((batch,), FLAGS.prompt_len, jnp.int32))
    cache = lm.rewind(cache, jnp.full((batch,), FLAGS.context, jnp.int32))
    decode_args = (ckpt.params, cache, jnp.ones((batch, 1), jnp.int32),
                   jnp.ones((batch,), jnp.int32))
    return (prefill, prefill_args), (decode, decode_args)


def main(argv):
    del argv
    target, drafted = builtin.load_builtin_pair(jnp.dtype(FLAGS.dtype))
    results = {"device": str(jax.devices()[0]), "dtype": FLAGS.dtype,
               "prompt_len": FLAGS.prompt_len, "context": FLAGS.context,
               "target_layers": target.config.num_layers, "draft_layers": drafted.config.num_layers,
               "rows": []}
    print(f"{'model':8} {'batch':>5} {'prefill ms':>11} {'decode ms/step':>15} {'ms/token':>9}")
    for b in map(int, FLAGS.batch_sizes):
        (tp, tpa), (td, tda) = calls_for(target, b)
        (dp, dpa), (dd, dda) = calls_for(drafted, b)
        t_pre, d_pre = median_times([(tp, tpa), (dp, dpa)])
        t_dec, d_dec = median_times([(td, tda), (dd, dda)])
        row = {"batch": b}
        for name, pre, dec in (("target", t_pre, t_dec), ("draft", d_pre, d_dec)):
            row[name] = {"prefill_ms": 1e3 * pre, "decode_ms_per_step": 1e3 * dec,
                         "decode_ms_per_token": 1e3 * dec / b}
            print(f"{name:8} {b:5d} {1e3 * pre:11.2f} {1e3 * dec:15.2f} {1e3 * dec / b:9.3f}",
                  flush=True)
        row["draft_over_target_decode"] = d_dec / t_dec
        row["draft_over_target_prefill"] = d_pre / t_pre
        print(f"{'ratio':8} {b:5d} {d_pre / t_pre:11.3f} {d_dec / t_dec:15.3f}", flush=True)
        results["rows"].append(row)
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
