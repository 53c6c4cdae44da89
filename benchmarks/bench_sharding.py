r"""Tensor/data-parallel speculative sampling: step time per mesh and memory per device.

Three parts, all in one process:

1. **Step time on CPU, 1 vs 8 devices.** With no accelerator the script forces
   8 host devices (``--xla_force_host_platform_device_count=8``, set before
   JAX starts). A reduced-shape random target (and a 1-layer self-draft) runs
   the speculative loop (``standard``, K = 3) on a 1-device mesh and on the
   8-device meshes ``data=8,model=1``, ``data=2,model=4``, ``data=1,model=8``;
   repeats are interleaved across meshes and the median (and interquartile
   range) of the time per loop step is reported, plus the ratio to the 1-device
   run of the same process. The forced devices share the machine's cores, so
   on CPU this measures the partitioning overhead, not a speed-up.
2. **7B-shaped target, memory per device from shapes.** Params (bfloat16) and
   a KV cache (``--batch_7b`` rows x ``--cache_7b`` slots, bfloat16) of a
   Llama-2-7B-shaped and a Qwen2.5-7B-shaped config, for model = 1, 2, 4, 8,
   computed from ``jax.ShapeDtypeStruct`` placements: nothing is allocated.
3. **GPU** (only when one is present): a random 7B-shaped target at
   ``model=1`` is allocated on the device and one decode step is run; the
   device's ``bytes_in_use`` / ``peak_bytes_in_use`` are reported. Without a
   GPU the script says that these figures are still to be measured.

  python -m benchmarks.bench_sharding --json=results/bench_sharding.json
"""

from __future__ import annotations

import json
import os
import tempfile
import time

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Must precede the first jax import; harmless on GPU / TPU (host platform only).
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()

from absl import app, flags  # noqa: E402


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from wmspec_jax import decoders, prf, sharding, speculative  # noqa: E402
from wmspec_jax.models import draft, partitioning, protocol, transformer  # noqa: E402
from wmspec_jax.models.config import TransformerConfig  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("meshes", ["data=8,model=1", "data=2,model=4", "data=1,model=8"],
                  "8-device meshes to time against one device")
flags.DEFINE_integer("batch", 8, "rows per generation (a multiple of every data axis)")
flags.DEFINE_integer("max_new_tokens", 32, "generated tokens per row")
flags.DEFINE_integer("lookahead", 3, "K")
flags.DEFINE_integer("repeats", 5, "timed repeats per mesh (interleaved; median reported)")
flags.DEFINE_integer("hidden", 512, "reduced target: hidden size")
flags.DEFINE_integer("layers", 4, "reduced target: layers")
flags.DEFINE_integer("vocab", 8192, "reduced target: vocabulary")
flags.DEFINE_integer("batch_7b", 8, "KV-cache rows for the 7B memory table")
flags.DEFINE_integer("cache_7b", 4096, "KV-cache slots per row for the 7B memory table")
flags.DEFINE_string("json", "", "write the results here (atomically)")
flags.DEFINE_list("parts", ["steps", "memory", "gpu"], "which of the three parts to run (module doc)")

LLAMA2_7B = TransformerConfig(family="llama", vocab_size=32000, hidden_size=4096,
                              intermediate_size=11008, num_layers=32, num_heads=32,
                              num_kv_heads=32, head_dim=128, tie_word_embeddings=False)
QWEN25_7B = TransformerConfig(family="qwen2", vocab_size=152064, hidden_size=3584,
                              intermediate_size=18944, num_layers=28, num_heads=28, num_kv_heads=4,
                              head_dim=128, tie_word_embeddings=False, qkv_bias=True)


def reduced_target() -> TransformerConfig:
    d = FLAGS.hidden
    return TransformerConfig(family="llama", vocab_size=FLAGS.vocab, hidden_size=d,
                             intermediate_size=3 * d, num_layers=FLAGS.layers, num_heads=8,
                             num_kv_heads=8, head_dim=d // 8, tie_word_embeddings=False)


def step_times(cfg: TransformerConfig) -> dict:
    """Median seconds per loop step for each mesh (interleaved repeats)."""
    params = transformer.init_params(cfg, jax.random.PRNGKey(0), scale=0.05)
    dcfg, dparams = cfg.select_layers([0]), draft.draft_params(params, [0])
    rng = np.random.default_rng(0)
    b = FLAGS.batch
    batch = (rng.integers(0, cfg.vocab_size, (b, 16)), np.full(b, 16), prf.stream_keys(list(range(b))),
             jax.random.split(jax.random.key(0), b))
    config = speculative.SpeculativeConfig(method="standard", decoder=decoders.WatermarkDecoder("gumbel"),
                                           lookahead=FLAGS.lookahead, max_new_tokens=FLAGS.max_new_tokens)
    setups = {}
    for name in ["1 device"] + list(FLAGS.meshes):
        devices = jax.devices()[:1] if name == "1 device" else None
        if devices is None and sharding.parse_mesh_spec(name).data * sharding.parse_mesh_spec(
                name).model != len(jax.devices()):
            print(f"  skipped {name}: {len(jax.devices())} devices here")
            continue
        mesh = sharding.make_mesh("data=1,model=1" if devices else name, devices=devices)
        t = protocol.make_language_model(cfg, name="target", mesh=mesh)
        d = protocol.make_language_model(dcfg, name="draft", mesh=mesh)
        args = (t, sharding.shard_params(params, cfg, mesh), *sharding.shard_batch(batch, mesh), config)
        kwargs = dict(draft=d, draft_params=sharding.shard_params(dparams, dcfg, mesh))
        t0 = time.perf_counter()
        first = speculative.generate(*args, **kwargs)  # compiles
        steps = int(np.asarray(first.num_steps).max())
        setups[name] = (args, kwargs, steps, np.asarray(first.tokens), time.perf_counter() - t0)
        print(f"  compiled {name}: {setups[name][4]:.1f} s (loop steps {steps})", flush=True)
    times = {name: [] for name in setups}
    for _ in range(FLAGS.repeats):
        for name, (args, kwargs, steps, _, _) in setups.items():
            t0 = time.perf_counter()
            jax.block_until_ready(speculative.generate(*args, **kwargs).tokens)
            times[name].append((time.perf_counter() - t0) / steps)
    base = np.median(times["1 device"])
    ref_tokens = setups["1 device"][3]
    out = {}
    for name, ts in times.items():
        q1, med, q3 = np.percentile(ts, [25, 50, 75])
        out[name] = {"ms_per_step": 1e3 * med, "iqr_ms": [1e3 * q1, 1e3 * q3],
                     "ratio_to_1_device": med / base, "steps": setups[name][2],
                     "same_tokens_as_1_device": bool(np.array_equal(setups[name][3], ref_tokens)),
                     "compile_s": setups[name][4]}
    return out


def memory_table(cfg: TransformerConfig, dtype=jnp.bfloat16) -> list[dict]:
    """Bytes per device of params + KV cache for model = 1, 2, 4, 8 (abstract: nothing allocated)."""
    rows = []
    shapes = transformer.param_shapes(cfg)
    n_params = sum(int(np.prod(s)) for s in jax.tree_util.tree_leaves(
        shapes, is_leaf=lambda s: isinstance(s, tuple)))
    for model in (1, 2, 4, 8):
        if model > len(jax.devices()):
            continue
        mesh = sharding.make_mesh(f"data=1,model={model}", devices=jax.devices()[:model])
        p = jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s, dtype, sharding=sh), shapes,
                                   partitioning.param_shardings(cfg, mesh),
                                   is_leaf=lambda s: isinstance(s, tuple))
        lm = protocol.make_language_model(cfg, name="7b", dtype=dtype, mesh=mesh)
        cache = jax.eval_shape(lambda: lm.init_cache(FLAGS.batch_7b, FLAGS.cache_7b))
        cache = jax.tree_util.tree_map(lambda c, sh: jax.ShapeDtypeStruct(c.shape, c.dtype, sharding=sh),
                                       cache, partitioning.cache_shardings(cfg, mesh))
        pb, cb = sharding.per_device_bytes(p), sharding.per_device_bytes(cache)
        rows.append({"model": model, "params": n_params,
                     "param_gib_per_device": max(pb.values()) / 2 ** 30,
                     "cache_gib_per_device": max(cb.values()) / 2 ** 30})
    return rows


def gpu_memory(cfg: TransformerConfig) -> dict | None:
    """Allocates a random bfloat16 target on one GPU and runs a decode step (GPU only)."""
    if jax.default_backend() != "gpu":
        return None
    device = jax.devices()[0]
    params = transformer.init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.bfloat16)
    lm = protocol.make_language_model(cfg, name="7b", dtype=jnp.bfloat16)
    cache = lm.init_cache(FLAGS.batch_7b, FLAGS.cache_7b)
    step = jax.jit(lm.step, donate_argnums=1)
    tokens = jnp.ones((FLAGS.batch_7b, FLAGS.lookahead + 1), jnp.int32)
    logits, cache = step(params, cache, tokens, jnp.full((FLAGS.batch_7b,), FLAGS.lookahead + 1))
    jax.block_until_ready(logits)
    t0 = time.perf_counter()
    for _ in range(5):
        logits, cache = step(params, cache, tokens, jnp.zeros((FLAGS.batch_7b,), jnp.int32))
    jax.block_until_ready(logits)
    stats = device.memory_stats() or {}
    return {"device": str(device), "bytes_in_use_gib": stats.get("bytes_in_use", 0) / 2 ** 30,
            "peak_gib": stats.get("peak_bytes_in_use", 0) / 2 ** 30,
            "verify_step_ms": 1e3 * (time.perf_counter() - t0) / 5}


def main(argv):
    del argv
    results = {"backend": jax.default_backend(), "devices": len(jax.devices()),
               "reduced_target": {"hidden": FLAGS.hidden, "layers": FLAGS.layers, "vocab": FLAGS.vocab},
               "batch": FLAGS.batch, "lookahead": FLAGS.lookahead, "max_new_tokens": FLAGS.max_new_tokens}
    print(f"backend {results['backend']}, {results['devices']} devices")
    if "steps" in FLAGS.parts:
        print("1) speculative loop (standard, K=%d), reduced target: time per loop step" % FLAGS.lookahead)
        results["step_times"] = step_times(reduced_target())
        print(f"{'mesh':16} {'ms/step':>9} {'IQR':>17} {'ratio':>6} {'same tokens':>12}")
        for name, r in results["step_times"].items():
            print(f"{name:16} {r['ms_per_step']:9.2f} {r['iqr_ms'][0]:8.2f}-{r['iqr_ms'][1]:<8.2f} "
                  f"{r['ratio_to_1_device']:6.2f} {str(r['same_tokens_as_1_device']):>12}", flush=True)
    if "memory" in FLAGS.parts:
        print(f"2) 7B-shaped targets, bfloat16, KV cache {FLAGS.batch_7b} x {FLAGS.cache_7b}: GiB per device")
        results["memory_7b"] = {}
        for name, cfg in (("llama2-7b", LLAMA2_7B), ("qwen2.5-7b", QWEN25_7B)):
            rows = memory_table(cfg)
            results["memory_7b"][name] = rows
            for r in rows:
                print(f"{name:11} model={r['model']}  params {r['params'] / 1e9:.2f}e9  "
                      f"weights {r['param_gib_per_device']:6.2f}  cache {r['cache_gib_per_device']:6.2f}")
    if "gpu" not in FLAGS.parts:
        pass
    elif (gpu := gpu_memory(LLAMA2_7B)) is None:
        results["gpu"] = None
        print("3) GPU: no GPU in this run: the measured memory per device of a 7B-shaped target at "
              "model=1 is still to be measured (run this script on a GPU node).")
    else:
        results["gpu"] = gpu
        print("3) GPU, llama2-7b shape, model=1:", results["gpu"])
    if FLAGS.json:
        directory = os.path.dirname(os.path.abspath(FLAGS.json))
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(results, f, indent=2)
        os.replace(tmp, FLAGS.json)
        print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
