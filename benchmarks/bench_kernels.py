r"""The sampler's kernels against the forms the package used before, on XLA.

Each pair computes the same thing; the "before" form is the one the
generation loop used until the loop was rewritten, kept here as the
baseline. Times are medians of ``--repeats`` calls of the jitted function
(compiled first), the two forms interleaved.

  python -m benchmarks.bench_kernels --batch_sizes=1,32 --vocab=32000

Kernels (V tokens, per row):

* top-k: the threshold ``top_k(x, k)[0][..., -1:]`` (slicing the values
  makes XLA:CPU lower ``top_k`` to a full sort) vs the k candidates' values
  and ids from :func:`wmspec_jax.candidates.select_top_k` (two exact stages,
  outputs used whole);
* argmax: ``jnp.argmax`` vs :func:`wmspec_jax.decoders.first_argmax`;
* Gumbel-max token: argmax of log P − log(−log U) vs first argmax of log(U) / P;
* SynthID(m = 30) tournament: float multiplies on unpacked uint8 g-values
  [m, V] vs ``where`` on packed uint32 g-bits (:func:`decoders.tournament_packed`);
* inverse-CDF sampling: a full cumulative sum vs :func:`decoders.inverse_cdf`
  (two levels).
"""

import os
import time

from absl import app, flags


import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import candidates, decoders, prf, storage

flags.DEFINE_list("batch_sizes", ["1", "32"], "rows")
flags.DEFINE_integer("vocab", 32000, "V")
flags.DEFINE_integer("top_k", 100, "k of the top-k kernel")
flags.DEFINE_integer("num_layers", 30, "SynthID layers m")
flags.DEFINE_integer("repeats", 30, "timed calls per kernel (median)")
flags.DEFINE_string("output", "results/bench_kernels.json", "JSON output")
FLAGS = flags.FLAGS


def before_tournament(probs, g):  # uint8 [B, m, V], float multiplies (the former decoders.tournament)
    def body(p, layer):
        gf = layer.astype(jnp.float32)
        mass = jnp.sum(p * gf, axis=-1, keepdims=True)
        return p * (1.0 + gf - mass), None

    return jax.lax.scan(body, probs, jnp.moveaxis(g, -2, 0))[0]


def before_inverse_cdf(p, u):  # the former decoders.sample_token
    cdf = jnp.cumsum(p, axis=-1)
    idx = jnp.sum(cdf <= u[..., None] * cdf[..., -1:], axis=-1)
    last = p.shape[-1] - 1 - jnp.argmax(jnp.flip(p > 0, axis=-1), axis=-1)
    return jnp.minimum(idx, last)


def kernels(batch: int):
    v, k, m = FLAGS.vocab, FLAGS.top_k, FLAGS.num_layers
    x = jax.random.normal(jax.random.key(0), (batch, v)) * 3
    p = jax.nn.softmax(x, axis=-1)
    logp = jnp.log(p)
    seeds = jnp.asarray(np.random.default_rng(0).integers(0, 2**32, (batch, 2)), jnp.uint32)
    uniforms = prf.vocab_uniforms(seeds, v)
    gbits = prf.vocab_gbits(seeds, v, m)
    tokens = jnp.arange(v, dtype=jnp.uint32)
    words = jnp.stack([prf.hash_values(seeds[:, None, :], tokens, prf.Lane.GBITS + b)
                       for b in range(-(-m // 32))], axis=-1)
    u = jnp.full((batch,), 0.37, jnp.float32)
    return {
        "top-k": ((lambda x: jax.lax.top_k(x, k)[0][..., -1:], (x,)),
                  (lambda x: candidates.select_top_k(x, k), (x,))),
        "argmax": ((lambda x: jnp.argmax(x, axis=-1), (x,)), (decoders.first_argmax, (x,))),
        "Gumbel-max token": ((lambda lp, uu: jnp.argmax(lp - jnp.log(-jnp.log(uu)), axis=-1), (logp, uniforms)),
                             (decoders.gumbel_max_index, (p, uniforms))),
        f"SynthID(m={m}) tournament": ((before_tournament, (p, gbits)),
                                       (lambda pp, w: decoders.tournament_packed(pp, w, m), (p, words))),
        "inverse-CDF sample": ((before_inverse_cdf, (p, u)), (decoders.inverse_cdf, (p, u))),
    }


def main(argv):
    del argv
    out = {"device": str(jax.devices()[0]), "vocab": FLAGS.vocab, "rows": []}
    print(f"{'kernel':28s} {'B':>3s} {'before ms':>10s} {'now ms':>9s} {'speed-up':>9s}")
    for batch in map(int, FLAGS.batch_sizes):
        for name, pair in kernels(batch).items():
            fns = [(jax.jit(f), a) for f, a in pair]
            for f, a in fns:
                jax.block_until_ready(f(*a))
            times = [[], []]
            for _ in range(FLAGS.repeats):
                for i, (f, a) in enumerate(fns):
                    t0 = time.perf_counter()
                    jax.block_until_ready(f(*a))
                    times[i].append(time.perf_counter() - t0)
            before, now = (1e3 * float(np.median(t)) for t in times)
            out["rows"].append({"kernel": name, "batch": batch, "before_ms": before, "now_ms": now})
            print(f"{name:28s} {batch:3d} {before:10.3f} {now:9.3f} {before / now:8.1f}x", flush=True)
    storage.atomic_write_json(FLAGS.output, out)
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
