r"""Where a decode step and a verification pass of the built-in target go, against their floor.

A speculative step of K draft tokens ends with one target pass over T = K + 1 tokens; it pays
only if that pass costs about one decode step (T = 1). This benchmark times, at batch 1, the
target's cached pass (``LanguageModel.step``, jitted, cache donated, ``--filled`` tokens already
in the cache) for every T in ``--tokens`` and both weight layouts
(:mod:`wmspec_jax.models.transformer`), interleaved over ``--repeats`` rounds, and reports:

* each pass's median time (min-max) and its ratio to the decode step of the same layout;
* the floor of a decode step: the bytes it must read (every weight once, the head's embedding
  included, plus the filled keys and values) over the bandwidth that a large jitted streaming
  read (a sum over ``--stream_mib`` MiB) reaches in the same run; ``decode / floor``;
* a per-operation profile of each pass (XLA:CPU's per-thunk trace events, from
  ``jax.profiler``): time per operation kind and the top operations with their output shapes.
  Thunk times are summed over XLA's threads, so they can add up to more than the wall time.

  python -m benchmarks.profile_passes
  python -m benchmarks.profile_passes --repeats=21 --tokens=1,2,3,4 --output=results/profile_passes.json

Writes ``--output`` (JSON) atomically and prints the tables.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from wmspec_jax import storage

flags.DEFINE_list("tokens", ["1", "2", "3", "4"], "tokens per pass T (1 = a decode step; K + 1 = verification)")
flags.DEFINE_list("layouts", ["in_out", "out_in_xla", "out_in"],
                  "weight layouts of the target; out_in_xla: out_in with XLA's dot for every product "
                  "(TransformerConfig.row_kernel=False), out_in: with the CPU kernel of "
                  "wmspec_jax.models.rows_matmul where it is built")
flags.DEFINE_integer("filled", 64, "tokens already in the cache", lower_bound=1)
flags.DEFINE_integer("capacity", 384, "cache slots", lower_bound=8)
flags.DEFINE_integer("repeats", 15, "interleaved timing rounds (median)", lower_bound=1)
flags.DEFINE_integer("profile_repeats", 5, "passes traced per profile (0: no profile)", lower_bound=0)
flags.DEFINE_integer("top", 8, "operations listed per profile", lower_bound=1)
flags.DEFINE_integer("stream_mib", 1024, "MiB read by the streaming-bandwidth probe", lower_bound=16)
flags.DEFINE_string("output", "results/profile_passes.json", "JSON output")
FLAGS = flags.FLAGS


def tree_bytes(tree) -> int:
    return sum(int(x.size) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree))


def stream_bandwidth(mib: int, repeats: int) -> dict:
    """GB/s of a jitted sum over a float32 array of ``mib`` MiB (median and best of ``repeats``)."""
    x = jnp.ones((mib * 2 ** 18,), jnp.float32)
    total = jax.jit(jnp.sum)
    total(x).block_until_ready()
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total(x).block_until_ready()
        seconds.append(time.perf_counter() - t0)
    nbytes = x.size * 4
    return {"bytes": nbytes, "gb_per_s_median": nbytes / np.median(seconds) / 1e9,
            "gb_per_s_best": nbytes / np.min(seconds) / 1e9}


def stream_bandwidth_threads(mib: int, repeats: int) -> dict:
    """GB/s of NumPy sums over ``os.cpu_count()`` slices of a ``mib`` MiB float32 array, one thread each
    (NumPy releases the GIL): what every core together streams, the floor of a multi-threaded pass."""
    import concurrent.futures

    x = np.ones((mib * 2 ** 18,), np.float32)
    parts = np.array_split(x, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(np.sum, parts))
        seconds = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(np.sum, parts))
            seconds.append(time.perf_counter() - t0)
    return {"bytes": x.nbytes, "gb_per_s_median": x.nbytes / np.median(seconds) / 1e9,
            "gb_per_s_best": x.nbytes / np.min(seconds) / 1e9}


def make_pass(model, t: int, compiler_options=None):
    """A jitted pass of ``t`` tokens over a donated cache: (params, cache, tokens) -> (logits, cache)."""
    num = jnp.full((1,), t, jnp.int32)
    return jax.jit(lambda p, c, tok: model.step(p, c, tok, num), donate_argnums=1,
                   compiler_options=compiler_options)


class Runner:
    """One layout's passes over a cache that holds ``filled`` tokens before every call."""

    def __init__(self, model, params, prompt, filled: int, capacity: int):
        self.model, self.params, self.filled = model, params, filled
        prefill = jax.jit(lambda p, tok: model.step(p, model.init_cache(1, capacity), tok,
                                                     jnp.full((1,), tok.shape[1], jnp.int32))[1])
        self.cache = jax.block_until_ready(prefill(params, prompt))

    def call(self, fn, tokens):
        # Rewinding keeps every call at the same fill; the donated cache is written in place.
        cache = self.model.rewind(self.cache, jnp.full((1,), self.filled, jnp.int32))
        logits, self.cache = fn(self.params, cache, tokens)
        return jax.block_until_ready(logits)


def op_profile(runner: Runner, fn, tokens, repeats: int, top: int) -> dict:
    """Per-operation thunk times (ms per pass) of ``fn``, compiled with XLA:CPU's trace events on."""
    from jax._src.lib import _profile_data

    runner.call(fn, tokens)
    hlo = fn.lower(runner.params, runner.cache, tokens).compile().as_text()
    shapes = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) [\w\-]+\(", line)
        if m:
            shapes[m.group(1)] = m.group(2)
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            for _ in range(repeats):
                runner.call(fn, tokens)
        data = _profile_data.ProfileData.from_file(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)[0])
        per_op, per_kind = collections.Counter(), collections.Counter()
        for plane in data.planes:
            for line in plane.lines:
                if not line.name.startswith("tf_XLA"):
                    continue
                for event in line.events:
                    if event.name.startswith(("ThunkExecutor", "SlinkyThreadPool")):
                        continue
                    per_op[event.name] += event.duration_ns
                    per_kind[re.sub(r"[.\d]+$", "", event.name)] += event.duration_ns
    scale = 1e-6 / repeats
    return {"total_ms": scale * sum(per_op.values()),
            "kinds_ms": {k: scale * v for k, v in per_kind.most_common()},
            "top_ops": [{"op": k, "ms": scale * v, "shape": shapes.get(k, "")} for k, v in per_op.most_common(top)]}


def main(argv):
    del argv
    from wmspec_jax.models import builtin, protocol

    if jax.default_backend() != "cpu" and FLAGS.profile_repeats:
        print("the per-operation profile reads XLA:CPU's trace events; other backends: "
              "--profile_repeats=0", file=sys.stderr)
        return 1
    token_counts = [int(t) for t in FLAGS.tokens]
    checkpoint = builtin.load_target(jnp.float32)
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(rng.integers(0, checkpoint.config.vocab_size, (1, FLAGS.filled)), jnp.int32)
    inputs = {t: jnp.asarray(rng.integers(0, checkpoint.config.vocab_size, (1, t)), jnp.int32)
              for t in token_counts}
    runners, passes, logits = {}, {}, {}
    for layout in FLAGS.layouts:
        ck = checkpoint.with_weight_layout(layout.removesuffix("_xla"))
        config = ck.config.replace(row_kernel=not layout.endswith("_xla"))
        model = protocol.make_language_model(config, name=layout)
        runners[layout] = Runner(model, ck.params, prompt, FLAGS.filled, FLAGS.capacity)
        for t in token_counts:
            passes[layout, t] = make_pass(model, t)
            logits[layout, t] = np.asarray(runners[layout].call(passes[layout, t], inputs[t]))
    config = checkpoint.config
    weight_bytes = tree_bytes(checkpoint.params)
    cache_bytes = 2 * config.num_layers * FLAGS.filled * config.num_kv_heads * config.head_dim * 4
    bandwidth = stream_bandwidth(FLAGS.stream_mib, 5)
    all_cores = stream_bandwidth_threads(FLAGS.stream_mib, 5)

    times = {key: [] for key in passes}
    for r in range(FLAGS.repeats):
        for key, fn in passes.items():
            t0 = time.perf_counter()
            runners[key[0]].call(fn, inputs[key[1]])
            times[key].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{FLAGS.repeats}", file=sys.stderr, flush=True)
    bandwidth_after = stream_bandwidth(FLAGS.stream_mib, 5)
    all_cores_after = stream_bandwidth_threads(FLAGS.stream_mib, 5)
    gbps = max(bandwidth["gb_per_s_median"], bandwidth_after["gb_per_s_median"],
               all_cores["gb_per_s_median"], all_cores_after["gb_per_s_median"])
    floor_ms = 1e3 * (weight_bytes + cache_bytes) / (gbps * 1e9)

    rows = []
    for (layout, t), seconds in times.items():
        ms = 1e3 * np.asarray(seconds)
        decode_ms = 1e3 * np.median(times[layout, 1]) if (layout, 1) in times else float("nan")
        row = {"layout": layout, "tokens": t, "ms_median": float(np.median(ms)), "ms_min": float(ms.min()),
               "ms_max": float(ms.max()), "over_decode_step": float(np.median(ms) / decode_ms),
               "over_floor": float(np.median(ms) / floor_ms),
               "max_logit_difference_vs_first_layout": float(np.max(np.abs(
                   logits[layout, t] - logits[FLAGS.layouts[0], t])))}
        rows.append(row)
    profiles = {}
    if FLAGS.profile_repeats:
        for layout in FLAGS.layouts:
            for t in sorted({token_counts[0], token_counts[-1]}):
                traced = make_pass(runners[layout].model, t, {"xla_cpu_enable_xprof_traceme": True})
                profiles[f"{layout} T={t}"] = op_profile(runners[layout], traced, inputs[t],
                                                         FLAGS.profile_repeats, FLAGS.top)

    print(f"\nbuilt-in target, batch 1, {FLAGS.filled} tokens in a {FLAGS.capacity}-slot cache, "
          f"median of {FLAGS.repeats} interleaved rounds ({os.cpu_count()} cores, {jax.default_backend()})")
    print(f"floor of a decode step: {(weight_bytes + cache_bytes) / 1e6:.0f} MB "
          f"(weights {weight_bytes / 1e6:.0f} MB + cache {cache_bytes / 1e6:.1f} MB) at {gbps:.1f} GB/s "
          f"(the faster of a jitted sum and {os.cpu_count()} threads' NumPy sums over {FLAGS.stream_mib} MiB; "
          f"before/after the rounds: jitted {bandwidth['gb_per_s_median']:.1f}/{bandwidth_after['gb_per_s_median']:.1f}, "
          f"threads {all_cores['gb_per_s_median']:.1f}/{all_cores_after['gb_per_s_median']:.1f}) = {floor_ms:.2f} ms")
    print(f"{'layout':10s} {'T':>2s} {'ms':>8s} {'(min-max)':>15s} {'/decode':>8s} {'/floor':>7s} {'logit diff':>10s}")
    for row in rows:
        print(f"{row['layout']:10s} {row['tokens']:2d} {row['ms_median']:8.2f} "
              f"{'(%.1f-%.1f)' % (row['ms_min'], row['ms_max']):>15s} {row['over_decode_step']:8.2f} "
              f"{row['over_floor']:7.2f} {row['max_logit_difference_vs_first_layout']:10.1e}")
    for name, prof in profiles.items():
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in list(prof["kinds_ms"].items())[:5])
        print(f"\nprofile {name}: {prof['total_ms']:.1f} ms of thunks per pass; by kind (ms): {kinds}")
        for op in prof["top_ops"]:
            print(f"   {op['ms']:7.2f} ms  {op['op']:28s} {op['shape']}")
    storage.atomic_write_json(FLAGS.output, {
        "filled": FLAGS.filled, "capacity": FLAGS.capacity, "repeats": FLAGS.repeats, "cpu_count": os.cpu_count(),
        "backend": jax.default_backend(), "weight_bytes": weight_bytes, "cache_bytes": cache_bytes,
        "stream_bandwidth": [bandwidth, bandwidth_after], "stream_bandwidth_all_cores": [all_cores, all_cores_after], "floor_ms": floor_ms, "rows": rows,
        "profiles": profiles, "seconds": {f"{k[0]} T={k[1]}": v for k, v in times.items()}})
    print(f"wrote {FLAGS.output}")
    return 0


if __name__ == "__main__":
    app.run(main)
