r"""Per-token and per-step time at the paper's model shapes, against the memory-bandwidth floor.

Random-init targets and drafts shaped like the paper's pairs
(``benchmarks/shapes.py``: Llama-2-7B + Llama-68M, Gemma-7B + Gemma-2B), in
bfloat16, K = 1..4, every method. A decode step of a large model is
memory-bound: it must read every weight once (and the KV cache). The floor
of one loop step is

    (target weights + K x draft weights + KV cache bytes read) / bandwidth

for a speculative method (one target forward over K + 1 positions and K
draft forwards) and (target weights + KV cache) / bandwidth for plain
decoding. The benchmark prints each method's median step time, its ratio to
that floor and the bandwidth used (``--bandwidth_gbs``, or a device table,
or — on a CPU or an unknown device — a measured streaming-read bandwidth).

  # CPU (reduced shapes: width, depth and vocabulary / 8)
  python benchmarks/bench_paper_scale.py --reduce=8 --pairs=llama2 --lookaheads=2,3
  # GPU (full shapes)
  python benchmarks/bench_paper_scale.py --pairs=llama2,gemma

Random weights give near-uniform distributions, so acceptance (tokens per
step) says nothing about real pairs; the per-step time is the measurement.

``--hf_baseline`` (default ``auto``: when torch and a CUDA device are there)
also times Hugging Face ``transformers``' ``generate`` on a random model of
the same target shape, dtype, batch, prompt and number of new tokens, with
its static cache (compiled by ``transformers`` on CUDA;
``benchmarks/hf_baseline.py``), in the same interleaved rounds, and prints our
plain decoding's per-token time over it. Give JAX room for both models:
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (``benchmarks/accelerator_check.sh``
sets it). Writes ``--output`` (JSON) atomically: per method the rounds' times,
median ms per token and per step, the floor, compile seconds.
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import hf_baseline  # noqa: E402
import shapes  # noqa: E402
from wmspec_jax import decoders, methods, prf, results, speculative  # noqa: E402

flags.DEFINE_list("pairs", ["llama2", "gemma"], "paper pairs: llama2 (7B + 68M), gemma (7B + 2B)")
flags.DEFINE_list("lookaheads", ["1", "2", "3", "4"], "K values of the speculative methods")
flags.DEFINE_list("methods", list(methods.METHODS), "methods to time")
flags.DEFINE_integer("reduce", None, "divide width, depth and vocabulary by this (default: 1 on GPU/TPU, 8 on CPU)")
flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "params dtype")
flags.DEFINE_enum("decoder", "gumbel", ["gumbel", "synthid"], "watermark decoder")
flags.DEFINE_integer("top_k", 0, "top-k (0: none; the paper samples SynthID with 100)")
flags.DEFINE_integer("batch_size", 1, "rows per call")
flags.DEFINE_integer("prompt_length", 64, "random prompt tokens")
flags.DEFINE_integer("max_new_tokens", 64, "generated tokens per row")
flags.DEFINE_float("temperature", 1.0, "temperature")
flags.DEFINE_integer("repeats", 3, "interleaved timing rounds (median)")
flags.DEFINE_float("bandwidth_gbs", None, "memory bandwidth in GB/s for the floor (default: device table or measured)")
flags.DEFINE_enum("hf_baseline", "auto", ["auto", "on", "off"],
                  "time transformers' generate with its static cache on the same target shape (auto: when torch "
                  "and a CUDA device are there; on: also on a CPU)")
flags.DEFINE_bool("hf_eager", False, "with the baseline, also time transformers' default (dynamic) cache")
flags.DEFINE_string("output", "results/bench_paper_scale.json", "JSON output")
FLAGS = flags.FLAGS

# Peak HBM bandwidth of common accelerators (vendor data sheets), GB/s.
BANDWIDTH_GBS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0, "L4": 300.0, "TPU v5 lite": 819.0, "TPU v4": 1200.0}


def measured_bandwidth_gbs() -> float:
    """Streaming-read bandwidth of the default device: a jitted sum over 256 MiB (best of 5)."""
    x = jnp.ones((64 * 1024 * 1024,), jnp.float32)
    total = jax.jit(jnp.sum)
    jax.block_until_ready(total(x))
    best = min(_timed(lambda: jax.block_until_ready(total(x))) for _ in range(5))
    return x.size * 4 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bandwidth() -> tuple[float, str]:
    if FLAGS.bandwidth_gbs:
        return FLAGS.bandwidth_gbs, "--bandwidth_gbs"
    kind = jax.devices()[0].device_kind
    for name, gbs in BANDWIDTH_GBS.items():
        if name.lower() in kind.lower():
            return gbs, f"data sheet ({kind})"
    return measured_bandwidth_gbs(), f"measured streaming read ({kind})"


def kv_bytes(config, batch: int, context: int, dtype_bytes: int) -> int:
    """Bytes of keys and values one forward reads at ``context`` cached tokens."""
    return 2 * config.num_layers * batch * context * config.num_kv_heads * config.head_dim * dtype_bytes


def main(argv):
    del argv
    on_cpu = jax.devices()[0].platform == "cpu"
    reduce = FLAGS.reduce or (8 if on_cpu else 1)
    dtype = jnp.dtype(FLAGS.dtype)
    gbs, source = bandwidth()
    print(f"device {jax.devices()[0].device_kind}, bandwidth {gbs:.0f} GB/s ({source}), shapes / {reduce}, "
          f"{FLAGS.dtype}", flush=True)
    dec = decoders.WatermarkDecoder(FLAGS.decoder, 30)
    hf_ok, hf_why = hf_baseline.available(require_gpu=FLAGS.hf_baseline == "auto")
    use_hf = FLAGS.hf_baseline != "off" and hf_ok
    if FLAGS.hf_baseline == "on" and not hf_ok:
        raise SystemExit(f"--hf_baseline=on: {hf_why}")
    b = FLAGS.batch_size
    out = {"device": jax.devices()[0].device_kind, "bandwidth_gbs": gbs, "bandwidth_source": source,
           "reduce": reduce, "dtype": FLAGS.dtype, "decoder": dec.label, "top_k": FLAGS.top_k or None,
           "batch_size": b, "max_new_tokens": FLAGS.max_new_tokens, "rows": [],
           "hf_baseline": None if use_hf else f"not run: {hf_why or '--hf_baseline=off'}"}
    for pair_name in FLAGS.pairs:
        pair = shapes.paper_pair(pair_name, reduce, dtype)
        tbytes, dbytes = shapes.param_bytes(pair.target_params), shapes.param_bytes(pair.draft_params)
        print(f"\n{pair_name}: target {tbytes / 1e9:.3f} GB, draft {dbytes / 1e9:.3f} GB", flush=True)
        vocab = pair.target_config.vocab_size
        prompts = np.random.default_rng(0).integers(0, vocab, size=(b, FLAGS.prompt_length)).astype(np.int32)
        lengths = np.full(b, FLAGS.prompt_length, np.int32)
        keys = prf.stream_keys([f"paper-scale-{i}" for i in range(b)])
        rngs = jax.random.split(jax.random.key(0), b)
        calls, compile_s = {}, {}
        for method in FLAGS.methods:
            spec = methods.METHODS[method]
            for k in (map(int, FLAGS.lookaheads) if spec.speculative else [0]):
                cfg = speculative.SpeculativeConfig(method=method, decoder=dec, lookahead=k,
                                                    max_new_tokens=FLAGS.max_new_tokens,
                                                    temperature=FLAGS.temperature, top_k=FLAGS.top_k or None)
                extra = dict(draft=pair.draft, draft_params=pair.draft_params) if k else {}
                args = (pair.target, pair.target_params, prompts, lengths, keys, rngs, cfg)
                t0 = time.perf_counter()
                speculative.precompile(*args, **extra)
                compile_s[(method, k)] = time.perf_counter() - t0
                print(f"  compiled {method} K={k} in {compile_s[(method, k)]:.1f} s", flush=True)
                calls[(method, k)] = (args, extra)
        hf_calls = {}
        if use_hf and pair.target_config.family in ("llama", "gemma"):
            hf_calls = hf_calls_for(pair.target_config, prompts.shape, compile_s)
        times = {c: [] for c in list(calls) + list(hf_calls)}
        counts = {}
        for r in range(FLAGS.repeats):
            for c, (args, extra) in calls.items():
                t0 = time.perf_counter()
                res = speculative.generate(*args, **extra)
                jax.block_until_ready(res.tokens)
                times[c].append(time.perf_counter() - t0)
                counts[c] = (int(np.sum(np.asarray(res.lengths - res.prompt_lengths))),
                             int(np.max(np.asarray(res.num_steps))))
            for c, call in hf_calls.items():
                seconds, tokens = hf_baseline.time_once(call)
                times[c].append(seconds)
                counts[c] = (tokens, FLAGS.max_new_tokens)
            print(f"  round {r + 1}/{FLAGS.repeats}", flush=True)
        context = FLAGS.prompt_length + FLAGS.max_new_tokens // 2
        print(f"  {'method':13s} {'K':>2s} {'ms/token':>9s} {'ms/step':>9s} {'floor ms':>9s} {'/floor':>7s} "
              f"{'tok/step':>8s}")
        for (method, k), t in times.items():
            tokens, steps = counts[(method, k)]
            med = float(np.median(t))
            if method.startswith("transformers"):
                row = {"pair": pair_name, "method": method, "lookahead": 0, "seconds": t, "tokens": tokens,
                       "ms_per_token": 1e3 * med / tokens, "first_call_s": compile_s[(method, k)]}
                out["rows"].append(row)
                print(f"  {method:13s}  - {row['ms_per_token']:9.3f}", flush=True)
                continue
            kv = kv_bytes(pair.target_config, b, context, dtype.itemsize)
            floor_bytes = tbytes + kv + (k * (dbytes + kv_bytes(pair.draft_config, b, context, dtype.itemsize))
                                         if k else 0)
            floor_ms = 1e3 * floor_bytes / (gbs * 1e9)
            row = {"pair": pair_name, "method": method, "lookahead": k, "seconds": t, "tokens": tokens,
                   "loop_steps": steps, "ms_per_token": 1e3 * med / tokens, "ms_per_step": 1e3 * med / steps,
                   "floor_bytes_per_step": floor_bytes, "floor_ms_per_step": floor_ms,
                   "step_over_floor": 1e3 * med / steps / floor_ms, "tokens_per_step": tokens / (steps * b),
                   "compile_s": compile_s[(method, k)]}
            out["rows"].append(row)
            print(f"  {method:13s} {k:2d} {row['ms_per_token']:9.3f} {row['ms_per_step']:9.3f} {floor_ms:9.3f} "
                  f"{row['step_over_floor']:7.2f} {row['tokens_per_step']:8.2f}", flush=True)
        if ("plain", 0) in times:
            for c in hf_calls:
                ours = np.asarray(times[("plain", 0)]) / counts[("plain", 0)][0]
                theirs = np.asarray(times[c]) / counts[c][0]
                speedup = theirs / ours  # within each round: both ran back to back
                out.setdefault("speedup_over_transformers", {})[f"{pair_name}/{c[0]}"] = [
                    float(np.median(speedup)), float(speedup.min()), float(speedup.max())]
                print(f"  plain decoding is {np.median(speedup):.2f}x faster per token than {c[0]} "
                      f"(rounds: {speedup.min():.2f}-{speedup.max():.2f})", flush=True)
        results.atomic_write_json(FLAGS.output, out)
    print(f"wrote {FLAGS.output}")


def hf_calls_for(target_config, prompt_shape, compile_s: dict) -> dict:
    """{(name, 0): call} of transformers' generate on the target's shape (warmed up: the first
    call compiles, its time goes to ``compile_s``)."""
    batch, prompt_length = prompt_shape
    model = hf_baseline.torch_model(target_config, FLAGS.dtype)
    calls = {}
    for name, static in (("transformers_static", True), ("transformers_eager", False)):
        if not static and not FLAGS.hf_eager:
            continue
        call = hf_baseline.generate_call(model, batch, prompt_length, FLAGS.max_new_tokens, static_cache=static)
        seconds, _ = hf_baseline.time_once(call)  # compiles (static cache on CUDA) and warms up
        hf_baseline.time_once(call)
        compile_s[(name, 0)] = seconds
        print(f"  {name}: first call {seconds:.1f} s", flush=True)
        calls[(name, 0)] = call
    return calls


if __name__ == "__main__":
    app.run(main)
