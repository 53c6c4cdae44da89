r"""Per-token and per-step time at the paper's model shapes, against the memory-bandwidth floor.

Random-init targets and drafts shaped like the paper's pairs
(``benchmarks/shapes.py``: Llama-2-7B + Llama-68M, Gemma-7B + Gemma-2B), in
bfloat16. A decode step of a large model is memory-bound: it must read every
weight once (and the KV cache). The floor of one loop step is

    (target weights + K x draft weights + KV cache bytes read) / bandwidth

for a speculative method (one target forward over K + 1 positions and K
draft forwards) and (target weights + KV cache) / bandwidth for plain
decoding. The benchmark prints each run's median step time, its ratio to
that floor and the bandwidth used (``--bandwidth_gbs``, or a device table,
or — on a CPU or an unknown device — a measured streaming-read bandwidth).

What runs: either every (pair, method, K) of ``--pairs`` x ``--methods`` x
``--lookaheads`` x ``--draft_trees`` (multi-draft shapes, ``docs/multidraft.md``) with one
``--decoder`` / ``--top_k`` / ``--batch_size``, or
``--preset=table``: the rows of the accelerator table in
``docs/performance.md`` (Llama-2-7B: plain, standard and Alg. 1 at K = 3 with
Gumbel-max; standard and Alg. 1 with SynthID(m = 30) top-k 100; plain and
standard at batch 16; Gemma-7B: plain and standard). ``--preset=table_head``
runs the table's first three rows (and the baseline), ``--preset=table_rest``
the others, so that a short lease measures the headline first. All runs of a
pair share its weights and are timed in ``--repeats`` interleaved rounds
(median), so their ratios come from one run.

  # CPU (reduced shapes: width, depth and vocabulary / 8)
  python -m benchmarks.bench_paper_scale --reduce=8 --pairs=llama2 --lookaheads=2,3
  # GPU (full shapes): the table of docs/performance.md plus the transformers baseline
  XLA_PYTHON_CLIENT_PREALLOCATE=false python -m benchmarks.bench_paper_scale --preset=table

Random weights give near-uniform distributions, so acceptance (tokens per
step) says nothing about real pairs; the per-step time is the measurement.

``--hf_baseline`` (default ``auto``: when torch and a CUDA device are there)
also times Hugging Face ``transformers``' ``generate`` on a random model of
the Llama-2 target's shape, dtype, batch, prompt and number of new tokens,
with its static cache (compiled by ``transformers`` on CUDA;
``benchmarks/hf_baseline.py``), in the same interleaved rounds, and prints our
plain decoding's speed-up per token over it. Give JAX room for both models:
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (``benchmarks/accelerator_check.sh``
sets it). Writes ``--output`` (JSON) atomically: per run the rounds' times,
median ms per token and per step, the floor, the compile seconds, and the
ratios (``ratios``) the targets in ``docs/performance.md`` are stated in.
"""

import dataclasses
import time

from absl import app, flags


import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import hf_baseline
from benchmarks import shapes
from wmspec_jax import decoders, methods, multidraft, prf, speculative, storage

flags.DEFINE_enum("preset", None, ["table", "table_head", "table_rest"],
                  "run the accelerator table's rows (all, first three, the others) instead of the product of "
                  "--pairs x --methods x --lookaheads")
flags.DEFINE_list("pairs", ["llama2", "gemma"], "paper pairs: llama2 (7B + 68M), gemma (7B + 2B)")
flags.DEFINE_list("lookaheads", ["1", "2", "3", "4"], "K values of the speculative methods")
flags.DEFINE_list("methods", list(methods.METHODS), "methods to time")
flags.DEFINE_integer("reduce", None, "divide width, depth and vocabulary by this (default: 1 on GPU/TPU, 8 on CPU)")
flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "params dtype")
flags.DEFINE_enum("decoder", "gumbel", ["gumbel", "synthid"], "watermark decoder")
flags.DEFINE_integer("top_k", 0, "top-k (0: none; the paper samples SynthID with 100)")
flags.DEFINE_integer("batch_size", 1, "rows per call")
flags.DEFINE_list("draft_trees", ["1"], "draft shapes of the speculative methods: n (n chains), b1xb2x... (a tree of "
                  "K depths); a trailing d draws siblings without replacement (docs/multidraft.md)")
flags.DEFINE_integer("prompt_length", 64, "random prompt tokens")
flags.DEFINE_integer("max_new_tokens", 64, "generated tokens per row")
flags.DEFINE_float("temperature", 1.0, "temperature")
flags.DEFINE_integer("repeats", 3, "interleaved timing rounds (median)")
flags.DEFINE_float("bandwidth_gbs", None, "memory bandwidth in GB/s for the floor (default: device table or measured)")
flags.DEFINE_enum("hf_baseline", "auto", ["auto", "on", "off"],
                  "time transformers' generate with its static cache on the Llama-2 target's shape (auto: when "
                  "torch and a CUDA device are there; on: also on a CPU)")
flags.DEFINE_bool("hf_eager", False, "with the baseline, also time transformers' default (dynamic) cache")
flags.DEFINE_string("output", "results/bench_paper_scale.json", "JSON output")
FLAGS = flags.FLAGS

# Peak HBM bandwidth of common accelerators (vendor data sheets), GB/s.
BANDWIDTH_GBS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0, "L4": 300.0, "TPU v5 lite": 819.0, "TPU v4": 1200.0}


@dataclasses.dataclass(frozen=True)
class Run:
    """One timed generation setting."""

    pair: str
    method: str
    lookahead: int
    decoder: str = "gumbel"
    top_k: int = 0
    batch_size: int = 1
    draft_shape: str = "1"  # --draft_trees entry: one chain, n chains, or b1xb2x... (trailing d: distinct)

    @property
    def label(self) -> str:
        dec = "synthid" + (f"-top{self.top_k}" if self.top_k else "") if self.decoder == "synthid" else (
            "gumbel" + (f"-top{self.top_k}" if self.top_k else ""))
        shape = "" if self.draft_shape == "1" else f"@{self.draft_shape}"
        return f"{self.pair}/{self.method}{shape}/K{self.lookahead}/{dec}/b{self.batch_size}"


# The rows of the accelerator table (docs/performance.md), K = 3 throughout.
TABLE_HEAD = (Run("llama2", "plain", 0), Run("llama2", "standard", 3), Run("llama2", "pseudorandom", 3))
TABLE = TABLE_HEAD + (
    Run("llama2", "standard", 3, "synthid", 100), Run("llama2", "pseudorandom", 3, "synthid", 100),
    Run("llama2", "plain", 0, batch_size=16), Run("llama2", "standard", 3, batch_size=16),
    Run("gemma", "plain", 0), Run("gemma", "standard", 3),
)


def runs_from_flags() -> list:
    if FLAGS.preset:
        return {"table": list(TABLE), "table_head": list(TABLE_HEAD), "table_rest": list(TABLE[len(TABLE_HEAD):])}[
            FLAGS.preset]
    out = []
    for pair in FLAGS.pairs:
        for method in FLAGS.methods:
            speculative_method = methods.METHODS[method].speculative
            for k in (map(int, FLAGS.lookaheads) if speculative_method else [0]):
                for shape in (FLAGS.draft_trees if speculative_method else ["1"]):
                    out.append(Run(pair, method, k, FLAGS.decoder, FLAGS.top_k, FLAGS.batch_size, shape))
    return out


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


def _call(pair, run: Run):
    """(generate's positional args, keyword args) of a run, on random prompts."""
    b = run.batch_size
    vocab = pair.target_config.vocab_size
    prompts = np.random.default_rng(0).integers(0, vocab, size=(b, FLAGS.prompt_length)).astype(np.int32)
    lengths = np.full(b, FLAGS.prompt_length, np.int32)
    keys = prf.stream_keys([f"paper-scale-{i}" for i in range(b)])
    rngs = jax.random.split(jax.random.key(0), b)
    cfg = speculative.SpeculativeConfig(method=run.method, decoder=decoders.WatermarkDecoder(run.decoder, 30),
                                        lookahead=run.lookahead, max_new_tokens=FLAGS.max_new_tokens,
                                        temperature=FLAGS.temperature, top_k=run.top_k or None,
                                        **(multidraft.parse_shape(run.draft_shape) if run.lookahead else {}))
    extra = dict(draft=pair.draft, draft_params=pair.draft_params) if run.lookahead else {}
    return (pair.target, pair.target_params, prompts, lengths, keys, rngs, cfg), extra


def _within_round(times: dict, a, b) -> list:
    """Median, min and max over rounds of the ratio a / b within a round (the two ran back to back)."""
    r = np.asarray(times[a]) / np.asarray(times[b])
    return [float(np.median(r)), float(r.min()), float(r.max())]


def main(argv):
    del argv
    on_cpu = jax.devices()[0].platform == "cpu"
    reduce = FLAGS.reduce or (8 if on_cpu else 1)
    dtype = jnp.dtype(FLAGS.dtype)
    gbs, source = bandwidth()
    print(f"device {jax.devices()[0].device_kind}, bandwidth {gbs:.0f} GB/s ({source}), shapes / {reduce}, "
          f"{FLAGS.dtype}", flush=True)
    hf_ok, hf_why = hf_baseline.available(require_gpu=FLAGS.hf_baseline == "auto")
    use_hf = FLAGS.hf_baseline != "off" and hf_ok
    if FLAGS.hf_baseline == "on" and not hf_ok:
        raise SystemExit(f"--hf_baseline=on: {hf_why}")
    all_runs = runs_from_flags()
    out = {"device": jax.devices()[0].device_kind, "bandwidth_gbs": gbs, "bandwidth_source": source,
           "reduce": reduce, "dtype": FLAGS.dtype, "prompt_length": FLAGS.prompt_length,
           "max_new_tokens": FLAGS.max_new_tokens, "repeats": FLAGS.repeats, "rows": [], "ratios": {},
           "hf_baseline": "run" if use_hf else f"not run: {hf_why or '--hf_baseline=off'}"}
    for pair_name in dict.fromkeys(r.pair for r in all_runs):
        pair = shapes.paper_pair(pair_name, reduce, dtype)
        tbytes, dbytes = shapes.param_bytes(pair.target_params), shapes.param_bytes(pair.draft_params)
        print(f"\n{pair_name}: target {tbytes / 1e9:.3f} GB, draft {dbytes / 1e9:.3f} GB", flush=True)
        calls, compile_s = {}, {}
        for run in (r for r in all_runs if r.pair == pair_name):
            args, extra = _call(pair, run)
            t0 = time.perf_counter()
            speculative.precompile(*args, **extra)
            compile_s[run] = time.perf_counter() - t0
            print(f"  compiled {run.label} in {compile_s[run]:.1f} s", flush=True)
            calls[run] = (args, extra)
        hf_calls = {}
        if use_hf and pair_name == "llama2" and Run(pair_name, "plain", 0) in calls:  # its ratio needs our plain
            hf_calls = hf_calls_for(pair.target_config, compile_s)
        times = {c: [] for c in list(calls) + list(hf_calls)}
        counts = {}
        for r in range(FLAGS.repeats):
            for run, (args, extra) in calls.items():
                t0 = time.perf_counter()
                res = speculative.generate(*args, **extra)
                jax.block_until_ready(res.tokens)
                times[run].append(time.perf_counter() - t0)
                counts[run] = (int(np.sum(np.asarray(res.lengths - res.prompt_lengths))),
                               int(np.max(np.asarray(res.num_steps))))
            for name, call in hf_calls.items():
                seconds, tokens = hf_baseline.time_once(call)
                times[name].append(seconds)
                counts[name] = (tokens, FLAGS.max_new_tokens)
            print(f"  round {r + 1}/{FLAGS.repeats}", flush=True)
        context = FLAGS.prompt_length + FLAGS.max_new_tokens // 2
        print(f"  {'run':40s} {'ms/token':>9s} {'ms/step':>9s} {'floor ms':>9s} {'/floor':>7s} {'tok/step':>8s} "
              f"{'compile s':>9s}")
        for run in calls:
            tokens, steps = counts[run]
            med = float(np.median(times[run]))
            b, k = run.batch_size, run.lookahead
            kv = kv_bytes(pair.target_config, b, context, dtype.itemsize)
            # a draft tree of R paths: the target reads the weights and one row of cache per text (tree
            # attention), the draft reads its weights once per depth and R rows of its cache
            paths = multidraft.num_paths(calls[run][0][-1].draft_tree or (1,))
            floor_bytes = tbytes + kv + (
                k * (dbytes + paths * kv_bytes(pair.draft_config, b, context, dtype.itemsize)) if k else 0)
            floor_ms = 1e3 * floor_bytes / (gbs * 1e9)
            row = {**dataclasses.asdict(run), "label": run.label, "seconds": times[run], "tokens": tokens,
                   "loop_steps": steps, "ms_per_token": 1e3 * med / tokens, "ms_per_step": 1e3 * med / steps,
                   "floor_bytes_per_step": floor_bytes, "floor_ms_per_step": floor_ms,
                   "step_over_floor": 1e3 * med / steps / floor_ms, "tokens_per_step": tokens / (steps * b),
                   "compile_s": compile_s[run]}
            out["rows"].append(row)
            print(f"  {run.label:40s} {row['ms_per_token']:9.3f} {row['ms_per_step']:9.3f} {floor_ms:9.3f} "
                  f"{row['step_over_floor']:7.2f} {row['tokens_per_step']:8.2f} {compile_s[run]:9.1f}", flush=True)
        for name in hf_calls:
            tokens, _ = counts[name]
            row = {"pair": pair_name, "method": name, "label": f"{pair_name}/{name}/b1", "seconds": times[name],
                   "tokens": tokens, "ms_per_token": 1e3 * float(np.median(times[name])) / tokens,
                   "first_call_s": compile_s[name]}
            out["rows"].append(row)
            print(f"  {row['label']:40s} {row['ms_per_token']:9.3f}", flush=True)
        out["ratios"].update(pair_ratios(pair_name, calls, times, counts, hf_calls))
        for name, (m, lo, hi) in out["ratios"].items():
            if name.startswith(pair_name):
                print(f"  {name:48s} {m:6.3f}  [{lo:.3f}, {hi:.3f}]", flush=True)
        storage.atomic_write_json(FLAGS.output, out)
    print(f"wrote {FLAGS.output}")


def pair_ratios(pair_name, calls, times, counts, hf_calls) -> dict:
    """Alg. 1 / standard per step for each (decoder, batch) that has both, and the transformers
    baselines' per-token time over our plain decoding's (a speed-up; > 1: ours is faster)."""
    ratios = {}
    per_step = {run: np.asarray(times[run]) / counts[run][1] for run in calls}
    for run in calls:
        if run.method != "pseudorandom":
            continue
        standard = dataclasses.replace(run, method="standard")
        if standard in calls:
            r = per_step[run] / per_step[standard]
            ratios[f"{run.label}: alg1/standard per step"] = [float(np.median(r)), float(r.min()), float(r.max())]
    plain = Run(pair_name, "plain", 0)
    if plain in calls:
        ours = np.asarray(times[plain]) / counts[plain][0]
        for name in hf_calls:
            theirs = np.asarray(times[name]) / counts[name][0]
            r = theirs / ours
            ratios[f"{pair_name}: {name} / plain per token"] = [float(np.median(r)), float(r.min()), float(r.max())]
    return ratios


def hf_calls_for(target_config, compile_s: dict) -> dict:
    """{name: call} of transformers' generate on the target's shape at batch 1 (warmed up: the first
    call compiles on CUDA; its time goes to ``compile_s``)."""
    model = hf_baseline.torch_model(target_config, FLAGS.dtype)
    calls = {}
    for name, static in (("transformers_static", True), ("transformers_eager", False)):
        if not static and not FLAGS.hf_eager:
            continue
        call = hf_baseline.generate_call(model, 1, FLAGS.prompt_length, FLAGS.max_new_tokens, static_cache=static)
        seconds, _ = hf_baseline.time_once(call)
        hf_baseline.time_once(call)
        compile_s[name] = seconds
        print(f"  {name}: first call {seconds:.1f} s", flush=True)
        calls[name] = call
    return calls


if __name__ == "__main__":
    app.run(main)
