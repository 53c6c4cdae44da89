r"""Would feature-major activations make a verification pass cheaper on CPU? A probe on the built-in target.

On XLA:CPU a target pass over T = K + 1 = 4 tokens costs about twice a one-token decode step, and 30
MLPs alone run about twice as fast with weights ``[out, in]`` and activations kept ``[D, N]`` between
the products (``docs/measurements/2026-11-28-generation-startup.md``). This probe builds that layout
for the whole decoder of the built-in target (SmolLM2-135M, Llama family: no biases, no head norms,
no sandwich norms): the residual stream ``[D, B*T]`` from the embedding to the final norm, weights
transposed once here, RMSNorm over the feature axis, RoPE on ``[heads, Dh, B, T]``, the cache and
:func:`wmspec_jax.models.attention.attend` unchanged (queries, keys and values transposed to
token-major there), the final norm and the tied head token-major. It checks the logits against
:func:`wmspec_jax.models.transformer.forward` and times both, jitted, in interleaved rounds, at
T = 1 and T = 4 over a cache holding ``--filled`` tokens.

  python -m benchmarks.layout_probe
  python -m benchmarks.layout_probe --repeats=31 --output=results/layout_probe.json

Writes ``--output`` (JSON) atomically: per T, the largest logit difference and the medians (ms).
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from wmspec_jax import storage
from wmspec_jax.models import builtin, transformer
from wmspec_jax.models import cache as cache_lib
from wmspec_jax.models.attention import attend
from wmspec_jax.models.norms import rms_norm

flags.DEFINE_integer("filled", 64, "tokens already in the cache", lower_bound=1)
flags.DEFINE_integer("capacity", 384, "cache slots", lower_bound=8)
flags.DEFINE_integer("repeats", 15, "interleaved timing rounds (median)", lower_bound=1)
flags.DEFINE_string("output", "results/layout_probe.json", "JSON output")
FLAGS = flags.FLAGS

MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def _norm_features(x, w, eps):
    """RMSNorm of x [D, N] over D (float32 inside, as the model's)."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=0, keepdims=True) + eps) * w[:, None]).astype(x.dtype)


def _rope_features(x, positions, inv_freq):
    """rotate_half RoPE of x [heads, Dh, B, T] (wmspec_jax.models.rope.apply_rope's layout otherwise)."""
    freqs = positions.astype(jnp.float32)[None] * inv_freq[:, None, None]
    emb = jnp.concatenate([freqs, freqs], axis=0)[None]
    half = x.shape[1] // 2
    rotated = jnp.concatenate([-x[:, half:], x[:, :half]], axis=1)
    return x * jnp.cos(emb) + rotated * jnp.sin(emb)


def _layer(config, lp, x, k_cache, v_cache, positions, inv_freq, window):
    nh, nkv, dh = config.num_heads, config.num_kv_heads, config.head_dim
    b, t = positions.shape
    h = _norm_features(x, lp["attn_norm"], config.rms_norm_eps)
    q = _rope_features((lp["wq"] @ h).reshape(nh, dh, b, t), positions, inv_freq)
    k = _rope_features((lp["wk"] @ h).reshape(nkv, dh, b, t), positions, inv_freq)
    v = (lp["wv"] @ h).reshape(nkv, dh, b, t)
    rows = jnp.arange(b)[:, None]
    k_cache = k_cache.at[rows, positions].set(jnp.transpose(k, (2, 3, 0, 1)), mode="drop")
    v_cache = v_cache.at[rows, positions].set(jnp.transpose(v, (2, 3, 0, 1)), mode="drop")
    out = attend(config, jnp.transpose(q, (2, 3, 0, 1)), k_cache, v_cache, positions, window)
    x = x + lp["wo"] @ jnp.transpose(out, (2, 3, 0, 1)).reshape(nh * dh, b * t)
    h = _norm_features(x, lp["mlp_norm"], config.rms_norm_eps)
    return x + lp["w_down"] @ (jax.nn.silu(lp["w_gate"] @ h) * (lp["w_up"] @ h)), k_cache, v_cache


def feature_major_forward(config, params, tokens, positions, cache):
    """Logits float32[B, T, V] of ``tokens`` with params whose matrices are ``[out, in]``."""
    b, t = tokens.shape
    x = jnp.take(params["embed"], tokens, axis=0).reshape(b * t, -1).T
    inv_freq = jnp.asarray(config.rope_inv_freq())
    ks, vs = list(cache.k), list(cache.v)
    for i, (lp, window) in enumerate(zip(params["layers"], config.attention_windows().tolist())):
        x, ks[i], vs[i] = _layer(config, lp, x, ks[i], vs[i], positions, inv_freq, window)
    h = rms_norm(x.T, params["final_norm"], config.rms_norm_eps, False)
    logits = jnp.einsum("nd,vd->nv", h, params["embed"], preferred_element_type=jnp.float32)
    return logits.reshape(b, t, -1), cache_lib.KVCache(tuple(ks), tuple(vs), cache.lengths)


def main(argv):
    del argv
    checkpoint = builtin.load_target(jnp.float32)
    config, params = checkpoint.config, checkpoint.params
    transposed = dict(params, layers=[{k: (jnp.asarray(np.asarray(v).T.copy()) if k in MATRICES else v)
                                       for k, v in lp.items()} for lp in params["layers"]])
    token_major = jax.jit(lambda p, tok, pos, c: transformer.forward(config, p, tok, pos, c, c.lengths))
    feature_major = jax.jit(lambda p, tok, pos, c: feature_major_forward(config, p, tok, pos, c))
    rng = np.random.default_rng(0)
    cache = cache_lib.init_cache(config, 1, FLAGS.capacity, dtype=jnp.float32)
    prompt = jnp.asarray(rng.integers(0, config.vocab_size, (1, FLAGS.filled)), jnp.int32)
    _, cache = token_major(params, prompt, jnp.arange(FLAGS.filled)[None], cache)
    cache = cache._replace(lengths=jnp.full((1,), FLAGS.filled, jnp.int32))
    results = {}
    for t in (1, 4):
        tokens = jnp.asarray(rng.integers(0, config.vocab_size, (1, t)), jnp.int32)
        positions = FLAGS.filled + jnp.arange(t)[None]
        runs = {"token_major": (token_major, params), "feature_major": (feature_major, transposed)}
        logits = {name: np.asarray(fn(p, tokens, positions, cache)[0]) for name, (fn, p) in runs.items()}
        times = {name: [] for name in runs}
        for _ in range(FLAGS.repeats):
            for name, (fn, p) in runs.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(p, tokens, positions, cache))
                times[name].append(time.perf_counter() - start)
        row = {"max_abs_logit_difference": float(np.max(np.abs(logits["token_major"] - logits["feature_major"])))}
        row.update({f"{name}_ms": 1e3 * float(np.median(v)) for name, v in times.items()})
        results[f"T={t}"] = row
        print(f"T = {t}: token-major {row['token_major_ms']:.1f} ms, feature-major {row['feature_major_ms']:.1f} ms "
              f"(medians of {FLAGS.repeats}); logits differ by at most {row['max_abs_logit_difference']:.2e}")
    storage.atomic_write_json(FLAGS.output, {"filled": FLAGS.filled, "capacity": FLAGS.capacity,
                                             "repeats": FLAGS.repeats, "cpu_count": os.cpu_count(),
                                             "backend": jax.default_backend(), "results": results})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
