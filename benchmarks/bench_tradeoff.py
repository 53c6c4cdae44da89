"""Monte Carlo throughput of one trade-off point: JAX (chunked, jitted) vs plain NumPy.

    python -m benchmarks.bench_tradeoff --output=results/bench_tradeoff.json

The point: Google's class (App. C.2) at γ = 0.5 on the paper's (Q, P) — per sample,
watermarked draft Q_ζ, target P_ζ (shared ζ), watermarked residual S(R, ξ) with an
independent ξ, P' = (1 − γ) A_ξ ∘ Q_ζ + γ P_ζ, then SE = Σ min(Q_ζ, P') and
WS = KL(P' || P) — for Gumbel-max and for SynthID (m = 30). Both implementations
compute exactly this per sample (the JAX one via
:func:`wmspec_jax.tradeoff.kernel_curve_mc`; NumPy vectorised over a chunk of
samples with a Python loop only over SynthID's layers). Compilation is excluded
(a warm-up run first). Also reported: the coupling estimator (degenerate decoders
only), which needs just the pair of tokens per sample.

This is a benchmark, not a test: it prints and writes numbers, it asserts nothing
about time. It does check that the two estimates agree within their standard errors.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import jax
import numpy as np
from absl import app, flags

from wmspec_jax import storage as wm_results
from wmspec_jax import tradeoff as to
from wmspec_jax.tradeoff import kernels

FLAGS = flags.FLAGS
flags.DEFINE_integer("jax_samples", 4_000_000, "Samples for the JAX runs.")
flags.DEFINE_integer("numpy_samples", 400_000, "Samples for the NumPy runs.")
flags.DEFINE_integer("numpy_chunk", 32_768, "NumPy samples per vectorised chunk (bounded memory, like JAX).")
flags.DEFINE_float("gamma", 0.5, "The γ of the benchmarked point.")
flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m.")
flags.DEFINE_string("output", "results/bench_tradeoff.json", "Where the JSON goes.")

Q = np.array([0.4, 0.10, 0.12, 0.11, 0.08, 0.06, 0.05, 0.035, 0.025, 0.02])
P = np.array([0.1, 0.13, 0.155, 0.115, 0.235, 0.065, 0.055, 0.05, 0.06, 0.035])


# ---------------------------------------------------------------------------
# Plain NumPy reference of the same point
# ---------------------------------------------------------------------------


def _np_decode(kind: str, probs: np.ndarray, rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """S(probs, ζ) for n fresh ζ; probs float64[V] or [n, V] (broadcast). float64[n, V]."""
    v = probs.shape[-1]
    if kind == "gumbel":
        u = rng.random((n, v))
        with np.errstate(divide="ignore"):
            tok = np.argmax(np.log(probs) - np.log(-np.log(u)), axis=-1)
        return np.eye(v)[tok]
    words = rng.integers(0, 2**32, size=(n, v, -(-m // 32)), dtype=np.uint64).astype(np.uint32)
    out = np.broadcast_to(probs, (n, v)).copy()
    for layer in range(m):  # layers only; every layer is vectorised over the samples
        g = ((words[..., layer // 32] >> np.uint32(layer % 32)) & 1).astype(np.float64)
        out *= 1.0 + g - np.sum(out * g, axis=-1, keepdims=True)
    return out


def _np_decode_shared(kind, q, p, rng, n, m):
    """Draft and target decoded with one shared ζ."""
    v = q.size
    if kind == "gumbel":
        u = rng.random((n, v))
        with np.errstate(divide="ignore"):
            e = np.log(-np.log(u))
        return np.eye(v)[np.argmax(np.log(q) - e, -1)], np.eye(v)[np.argmax(np.log(p) - e, -1)]
    words = rng.integers(0, 2**32, size=(n, v, -(-m // 32)), dtype=np.uint64).astype(np.uint32)
    qz, pz = np.broadcast_to(q, (n, v)).copy(), np.broadcast_to(p, (n, v)).copy()
    for layer in range(m):
        g = ((words[..., layer // 32] >> np.uint32(layer % 32)) & 1).astype(np.float64)
        qz *= 1.0 + g - np.sum(qz * g, axis=-1, keepdims=True)
        pz *= 1.0 + g - np.sum(pz * g, axis=-1, keepdims=True)
    return qz, pz


def numpy_google_point(kind: str, gamma: float, n: int, chunk: int, m: int, seed: int = 0):
    """Mean and standard error of (SE, WS) at one γ of Google's class, plain NumPy (float64)."""
    rng = np.random.default_rng(seed)
    acc = np.minimum(1.0, P / Q)
    res = np.maximum(P - Q, 0.0)
    res /= res.sum()
    s1 = np.zeros(2)
    s2 = np.zeros(2)
    done = 0
    while done < n:
        k = min(chunk, n - done)
        qz, pz = _np_decode_shared(kind, Q, P, rng, k, m)
        rz = _np_decode(kind, res, rng, k, m)
        spec = acc * qz + np.sum((1 - acc) * qz, axis=-1, keepdims=True) * rz
        t = (1 - gamma) * spec + gamma * pz
        se = np.minimum(qz, t).sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ws = np.where(t > 0, t * np.log(t / P), 0.0).sum(-1)
        x = np.stack([se, ws], -1)
        s1 += x.sum(0)
        s2 += (x**2).sum(0)
        done += k
    mean = s1 / n
    return mean, np.sqrt((s2 / n - mean**2) / (n - 1))


# ---------------------------------------------------------------------------


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv):
    del argv
    q32, p32 = Q.astype(np.float32), P.astype(np.float32)
    gam = [FLAGS.gamma]
    rows = []
    for kind, dec in (("gumbel", to.gumbel()), ("synthid", to.synthid(FLAGS.synthid_layers))):
        jax_point = lambda n: to.kernel_curve_mc(q32, p32, dec, kernels.GOOGLE, gam, 1, n)
        jax_point(10_000)  # compile
        c, t_jax = timed(lambda: jax_point(FLAGS.jax_samples))
        (mean_np, se_np), t_np = timed(lambda: numpy_google_point(kind, FLAGS.gamma, FLAGS.numpy_samples,
                                                                   FLAGS.numpy_chunk, FLAGS.synthid_layers))
        z = np.abs(np.array([c.se[0], c.ws[0]]) - mean_np) / np.hypot([c.se_stderr[0], c.ws_stderr[0]], se_np)
        row = {
            "point": f"Google's class, {dec.label}, gamma={FLAGS.gamma}",
            "jax_samples": FLAGS.jax_samples, "jax_seconds": t_jax, "jax_samples_per_s": FLAGS.jax_samples / t_jax,
            "numpy_samples": FLAGS.numpy_samples, "numpy_seconds": t_np,
            "numpy_samples_per_s": FLAGS.numpy_samples / t_np,
            "jax_estimate": {"se": [c.se[0], c.se_stderr[0]], "ws": [c.ws[0], c.ws_stderr[0]]},
            "numpy_estimate": {"se": [mean_np[0], se_np[0]], "ws": [mean_np[1], se_np[1]]},
            "agreement_z": z.tolist(),
        }
        row["speedup"] = row["jax_samples_per_s"] / row["numpy_samples_per_s"]
        rows.append(row)
        if dec.degenerate:
            est = lambda n: to.estimate_coupling(q32, p32, dec, 1, n)
            est(10_000)
            _, t_c = timed(lambda: est(FLAGS.jax_samples))
            rows.append({"point": f"coupling of (X, Y), {dec.label} (evaluates every gamma of every class at once)",
                         "jax_samples": FLAGS.jax_samples, "jax_seconds": t_c,
                         "jax_samples_per_s": FLAGS.jax_samples / t_c})
    doc = {"rows": rows, "device": str(jax.devices()[0]), "device_count": jax.device_count(),
           "cpu_count": os.cpu_count(), "jax_version": jax.__version__, "numpy_version": np.__version__}
    print(f"{'point':78s} {'JAX samples/s':>14s} {'NumPy samples/s':>16s} {'ratio':>7s}")
    for r in rows:
        nps = r.get("numpy_samples_per_s")
        print(f"{r['point']:78s} {r['jax_samples_per_s']:14,.0f} "
              + (f"{nps:16,.0f} {r['speedup']:7.1f}" if nps else f"{'-':>16s} {'-':>7s}"))
        if "agreement_z" in r:
            print(f"{'':78s} JAX vs NumPy estimates differ by {max(r['agreement_z']):.2f} combined SEs")
    out = pathlib.Path(FLAGS.output)
    wm_results.atomic_write_text(out, json.dumps(doc, indent=1, default=float))
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
