r"""One cached decode step of a deep model: ours against a minimal hand-written step and the rolled scan.

A decode step of a large model is a read of every weight plus the filled
part of the KV cache. This benchmark times, in interleaved rounds (median and
interquartile range), the jitted ``LanguageModel.step`` of
:mod:`wmspec_jax.models.protocol` (T = 1, cache donated and fed back, rows
holding ``--filled`` tokens) against two references built here on the same
weights:

* ``minimal``: the shortest correct unrolled decode step — per-layer weight
  arrays, per-layer caches, ``dynamic_update_slice`` writes and one masked
  attention pass over the whole cache, no input checks, no ragged rows, no
  NaN guards. What our step should cost.
* ``rolled``: the layer loop as a ``lax.scan`` over weights stacked on a
  leading layer axis with the stacked cache in the scan carry (the layout the
  transformer used before its layers were unrolled), for the "before" figure.

Each is timed at a short and a long cache capacity (``--capacities``, default
256 and 4096) with the same ``--filled`` tokens, so the long/short ratio shows
whether a step's cost follows the filled length or the capacity. Reported
ratios (JSON ``ratios``): ours / minimal at the short capacity, long / short
for each variant, rolled / ours at each capacity, and each variant's compile
time.

  # the 7B's depth at 1/8 of its width (32 layers, d = 512), float32
  python -m benchmarks.bench_decode_step
  # the built-in target (SmolLM2-135M-Instruct, 30 layers)
  python -m benchmarks.bench_decode_step --model=builtin
  # Llama-2-7B itself (an accelerator)
  python -m benchmarks.bench_decode_step --model=llama2-7b --dtype=bfloat16

Writes ``--output`` (JSON) atomically.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from wmspec_jax import storage
from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.rope import apply_rope

flags.DEFINE_enum("model", "deep", ["deep", "builtin", "llama2-7b"],
                  "deep: 32 layers, d = 512, 4 heads of 128, F = 1376, V = 4000 (the 7B's depth at 1/8 of its "
                  "width); builtin: the built-in target's weights; llama2-7b: the full shape, random weights")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "params and cache dtype")
flags.DEFINE_integer("layers", None, "deep / llama2-7b: this many layers instead (a quicker run)")
flags.DEFINE_integer("batch_size", 1, "rows")
flags.DEFINE_integer("filled", 128, "tokens already in each row's cache")
flags.DEFINE_list("capacities", ["256", "4096"], "cache capacities (slots per row); the first is the short one")
flags.DEFINE_integer("steps", 8, "decode steps per timed call")
flags.DEFINE_integer("repeats", 7, "interleaved timing rounds (median)")
flags.DEFINE_string("output", "results/bench_decode_step.json", "JSON output")
FLAGS = flags.FLAGS

DEEP = TransformerConfig(family="llama", vocab_size=4000, hidden_size=512, intermediate_size=1376,
                         num_layers=32, num_heads=4, num_kv_heads=4, head_dim=128, tie_word_embeddings=False,
                         rms_norm_eps=1e-5)
LLAMA2_7B = TransformerConfig(family="llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                              num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128,
                              tie_word_embeddings=False, rms_norm_eps=1e-5)


def load_model(name: str, dtype):
    if name == "builtin":
        from wmspec_jax.models import builtin

        ckpt = builtin.load_target(dtype)
        return ckpt.config, ckpt.params
    config = DEEP if name == "deep" else LLAMA2_7B
    if FLAGS.layers:
        config = config.replace(num_layers=FLAGS.layers)
    # Eager: init_params holds one float32 array at a time; jitting it compiles for minutes on a GPU at 7B.
    params = transformer.init_params(config, jax.random.key(0), dtype=dtype)
    return config, params


def _rms(x, w, eps):
    xf = x.astype(jnp.float32)
    return w * (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)).astype(x.dtype)


def _head(config, params, h):
    w = params["embed"].T if config.tie_word_embeddings else params["lm_head"]
    return jnp.einsum("btd,dv->btv", h, w, preferred_element_type=jnp.float32)


def _dense_attention(config, q, keys, values, lengths):
    """Queries [B, 1, H, Dh] at position ``lengths`` over a whole layer cache [B, S, Hkv, Dh]."""
    b = q.shape[0]
    qg = q.reshape(b, 1, config.num_kv_heads, config.q_per_kv, config.head_dim)
    s = jnp.einsum("btkgd,bskd->bkgts", qg, keys, preferred_element_type=jnp.float32) * config.attention_scale
    visible = jnp.arange(keys.shape[1])[None, :] <= lengths[:, None]
    s = jnp.where(visible[:, None, None, None], s, jnp.finfo(jnp.float32).min)
    p = jax.nn.softmax(s, axis=-1).astype(values.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", p, values).reshape(b, 1, -1)


def _qkv(config, lp, h, positions, inv_freq):
    b = h.shape[0]
    q = (h @ lp["wq"]).reshape(b, 1, config.num_heads, config.head_dim)
    k = (h @ lp["wk"]).reshape(b, 1, config.num_kv_heads, config.head_dim)
    v = (h @ lp["wv"]).reshape(b, 1, config.num_kv_heads, config.head_dim)
    return apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq), v


def _mlp(lp, h):
    return (jax.nn.silu(h @ lp["w_gate"]) * (h @ lp["w_up"])) @ lp["w_down"]


def minimal_step(config: TransformerConfig, params, cache, token):
    """The minimal unrolled Llama decode step (module doc). cache: (ks, vs, lengths int32[B])."""
    ks, vs, lengths = cache
    ks, vs = list(ks), list(vs)
    inv_freq = jnp.asarray(config.rope_inv_freq())
    positions = lengths[:, None]
    x = params["embed"][token]
    write = jax.vmap(lambda c, new, at: jax.lax.dynamic_update_slice_in_dim(c, new, at, 0))
    for i, lp in enumerate(params["layers"]):
        q, k, v = _qkv(config, lp, _rms(x, lp["attn_norm"], config.rms_norm_eps), positions, inv_freq)
        ks[i], vs[i] = write(ks[i], k, lengths), write(vs[i], v, lengths)
        x = x + _dense_attention(config, q, ks[i], vs[i], lengths) @ lp["wo"]
        x = x + _mlp(lp, _rms(x, lp["mlp_norm"], config.rms_norm_eps))
    h = _rms(x, params["final_norm"], config.rms_norm_eps)
    return _head(config, params, h), (tuple(ks), tuple(vs), lengths + 1)


def rolled_step(config: TransformerConfig, stacked_params, cache, token):
    """The layers as a ``lax.scan`` over stacked weights, the stacked cache [L, B, S, Hkv, Dh] in the
    carry (module doc). cache: (k, v, lengths int32[B])."""
    k_cache, v_cache, lengths = cache
    inv_freq = jnp.asarray(config.rope_inv_freq())
    positions = lengths[:, None]
    rows = jnp.arange(token.shape[0])[:, None]

    def layer(carry, inputs):
        x, k_cache, v_cache = carry
        lp, i = inputs
        q, k, v = _qkv(config, lp, _rms(x, lp["attn_norm"], config.rms_norm_eps), positions, inv_freq)
        k_cache = k_cache.at[i, rows, positions].set(k)
        v_cache = v_cache.at[i, rows, positions].set(v)
        x = x + _dense_attention(config, q, k_cache[i], v_cache[i], lengths) @ lp["wo"]
        x = x + _mlp(lp, _rms(x, lp["mlp_norm"], config.rms_norm_eps))
        return (x, k_cache, v_cache), None

    x = stacked_params["embed"][token]
    (x, k_cache, v_cache), _ = jax.lax.scan(
        layer, (x, k_cache, v_cache), (stacked_params["layers"], jnp.arange(config.num_layers)))
    h = _rms(x, stacked_params["final_norm"], config.rms_norm_eps)
    return _head(config, stacked_params, h), (k_cache, v_cache, lengths + 1)


def _variants(config, params, dtype, batch: int, capacity: int) -> dict:
    """name -> (jitted step(params, cache, token) -> (logits, cache), params, fresh cache, reset)."""
    shape = (batch, capacity, config.num_kv_heads, config.head_dim)
    # A fresh array each time: a donated cache takes its lengths with it.
    filled = lambda: jnp.full((batch,), FLAGS.filled, jnp.int32)  # noqa: E731
    lm = protocol.make_language_model(config, name="bench", dtype=dtype)
    ones = jnp.ones((batch,), jnp.int32)

    def ours_cache():
        return lm.rewind(lm.init_cache(batch, capacity), filled())

    def per_layer_cache():
        z = tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers))
        return (z, tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers)), filled())

    def stacked_cache():
        z = jnp.zeros((config.num_layers,) + shape, dtype)
        return (z, jnp.zeros_like(z), filled())

    stacked = dict(params, layers=transformer.stack_layers(params["layers"]))
    return {
        "ours": (jax.jit(lambda p, c, t: lm.step(p, c, t, ones), donate_argnums=1), params, ours_cache,
                 lambda c: lm.rewind(c, filled())),
        "minimal": (jax.jit(functools.partial(minimal_step, config), donate_argnums=1), params, per_layer_cache,
                    lambda c: (c[0], c[1], filled())),
        "rolled": (jax.jit(functools.partial(rolled_step, config), donate_argnums=1), stacked, stacked_cache,
                   lambda c: (c[0], c[1], filled())),
    }


def main(argv):
    del argv
    dtype = jnp.dtype(FLAGS.dtype)
    config, params = load_model(FLAGS.model, dtype)
    if config.family not in ("llama", "mistral", "qwen2", "qwen3") or config.qkv_bias or config.qk_norm \
            or config.sliding_window:
        raise SystemExit(f"the hand-written references are plain Llama layers; {FLAGS.model} is not one")
    batch = FLAGS.batch_size
    capacities = [int(c) for c in FLAGS.capacities]
    if FLAGS.filled + FLAGS.steps > min(capacities):
        raise SystemExit(f"--filled + --steps must fit the shortest capacity {min(capacities)}")
    device = jax.devices()[0]
    print(f"{FLAGS.model}: {config.num_layers} layers, d = {config.hidden_size}, {FLAGS.dtype}, batch {batch}, "
          f"{FLAGS.filled} tokens filled; device {device.device_kind} ({jax.default_backend()})", flush=True)
    token = jnp.ones((batch, 1), jnp.int32)
    calls, compile_s = {}, {}
    for capacity in capacities:
        for name, (fn, p, fresh, reset) in _variants(config, params, dtype, batch, capacity).items():
            t0 = time.perf_counter()
            cache = fresh()
            _, cache = fn(p, cache, token)
            jax.block_until_ready(cache)
            compile_s[f"{name}@{capacity}"] = time.perf_counter() - t0
            calls[(name, capacity)] = [fn, p, reset(cache), reset]

    def timed(key) -> float:
        fn, p, cache, reset = calls[key]
        cache = reset(cache)
        t0 = time.perf_counter()
        for _ in range(FLAGS.steps):
            _, cache = fn(p, cache, token)
        jax.block_until_ready(cache)
        calls[key][2] = cache
        return (time.perf_counter() - t0) / FLAGS.steps

    times = {key: [] for key in calls}
    for r in range(FLAGS.repeats):
        for key in calls:
            times[key].append(timed(key))
        print(f"  round {r + 1}/{FLAGS.repeats}", flush=True)

    short, long_ = capacities[0], capacities[-1]
    rows = []
    print(f"\n  {'variant':8s} {'capacity':>8s} {'ms/step':>9s} {'IQR':>17s} {'first call s':>12s}")
    for (name, capacity), ts in times.items():
        q1, med, q3 = np.percentile(np.asarray(ts) * 1e3, [25, 50, 75])
        rows.append({"variant": name, "capacity": capacity, "ms_per_step": med, "iqr_ms": [q1, q3],
                     "first_call_s": compile_s[f"{name}@{capacity}"]})
        print(f"  {name:8s} {capacity:8d} {med:9.3f} [{q1:7.3f}, {q3:7.3f}] {compile_s[f'{name}@{capacity}']:12.1f}")
    med = {(r["variant"], r["capacity"]): r["ms_per_step"] for r in rows}

    def within_round(a, b) -> list[float]:
        """The ratio a / b within each round (median, min, max): both ran back to back."""
        ratio = np.asarray(times[a]) / np.asarray(times[b])
        return [float(np.median(ratio)), float(ratio.min()), float(ratio.max())]

    ratios = {
        "ours_over_minimal": within_round(("ours", short), ("minimal", short)),
        **{f"{name}_long_over_short": within_round((name, long_), (name, short))
           for name in ("ours", "minimal", "rolled")},
        **{f"rolled_over_ours_at_{c}": within_round(("rolled", c), ("ours", c)) for c in capacities},
    }
    print("\n  ratios (median over rounds of the within-round ratio [min, max]):")
    for k, (m, lo, hi) in ratios.items():
        print(f"  {k:28s} {m:6.2f}  [{lo:.2f}, {hi:.2f}]")
    out = {"model": FLAGS.model, "config": {"layers": config.num_layers, "hidden": config.hidden_size,
                                            "vocab": config.vocab_size},
           "dtype": FLAGS.dtype, "batch_size": batch, "filled": FLAGS.filled, "capacities": capacities,
           "device": device.device_kind, "backend": jax.default_backend(), "cpu_count": _cpu_count(),
           "rows": rows, "ratios": ratios, "ms_per_step": {f"{k[0]}@{k[1]}": v for k, v in med.items()}}
    storage.atomic_write_json(FLAGS.output, out)
    print(f"wrote {FLAGS.output}")


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


if __name__ == "__main__":
    app.run(main)
