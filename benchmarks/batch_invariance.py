r"""Does a row's output depend on the rest of its batch? Counted per dtype and decoder, on this device.

A random Llama-68M-shaped target (``benchmarks/shapes.py``) with a one-layer
draft cut from it generates ``--num_prompts`` texts with Alg. 1
(``pseudorandom``), K = 3, ``--max_new_tokens`` tokens, once as one batch and
once row by row (batch 1, each row with its own watermark key and
true-random key either way), in float32 and bfloat16, with Gumbel-max and
SynthID(m = 30). It reports, per setting, how many rows differ between the two
runs and where the first difference lies, and whether the tokens change with
the true-random key (they must not for Alg. 1 away from repeated contexts).
It also compares the target's logits on the same prompts computed in one
batch and row by row (the largest difference): a model whose matrix products
round differently for different batch shapes makes rows differ wherever a
sampler is sensitive to the last bits of the distribution.

  python -m benchmarks.batch_invariance                   # this device
  python -m benchmarks.batch_invariance --num_prompts=4 --max_new_tokens=8 --reduce=16   # a CPU

Writes ``--output`` (JSON) atomically.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from benchmarks import shapes
from wmspec_jax import decoders, prf, speculative, storage
from wmspec_jax.models import draft as draft_lib
from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig

flags.DEFINE_integer("num_prompts", 8, "rows")
flags.DEFINE_integer("prompt_length", 16, "random prompt tokens")
flags.DEFINE_integer("max_new_tokens", 32, "generated tokens per row")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "params dtypes")
flags.DEFINE_list("decoders", ["gumbel", "synthid"], "watermark decoders")
flags.DEFINE_integer("reduce", 1, "divide the target's width, depth and vocabulary by this (CPU runs)", lower_bound=1)
flags.DEFINE_string("output", "results/batch_invariance.json", "JSON output")
FLAGS = flags.FLAGS

# Llama-68M's shape (the paper's draft, here the target: small enough for any device).
TARGET = TransformerConfig(family="llama", vocab_size=32000, hidden_size=768, intermediate_size=3072,
                           num_layers=2, num_heads=12, num_kv_heads=12, head_dim=64,
                           tie_word_embeddings=False, rms_norm_eps=1e-6)


def _setting(config: TransformerConfig, dtype_name: str, decoder_name: str, prompts, lengths, keys, rngs) -> dict:
    dtype = jnp.dtype(dtype_name)
    params = transformer.init_params(config, jax.random.key(0), dtype=dtype, scale=0.05)
    target = protocol.make_language_model(config, name="llama-68m-shaped", dtype=dtype)
    draft = protocol.make_language_model(config.select_layers([0]), name="draft", dtype=dtype)
    draft_params = draft_lib.draft_params(params, [0])
    config = speculative.SpeculativeConfig(method="pseudorandom", decoder=decoders.WatermarkDecoder(decoder_name, 30),
                                           lookahead=3, max_new_tokens=FLAGS.max_new_tokens, temperature=1.0)
    kw = dict(draft=draft, draft_params=draft_params)

    def run(rows, rng_keys):
        res = speculative.generate(target, params, prompts[rows], lengths[rows], keys[rows], rng_keys[rows],
                                   config, **kw)
        return np.asarray(res.tokens)

    everyone = np.arange(len(prompts))
    batched = run(everyone, rngs)
    alone = np.concatenate([run(np.asarray([i]), rngs) for i in everyone])
    other_rngs = jax.random.split(jax.random.key(12345), len(prompts))
    reseeded = run(everyone, other_rngs)
    differ = [i for i in everyone if not np.array_equal(batched[i], alone[i])]
    first = [int(np.flatnonzero(batched[i] != alone[i])[0]) - int(lengths[i]) for i in differ]

    step = jax.jit(target.step)
    cache = target.init_cache(len(prompts), prompts.shape[1])
    logits_batched, _ = step(params, cache, jnp.asarray(prompts), jnp.asarray(lengths))
    logits_alone = [step(params, target.init_cache(1, prompts.shape[1]), jnp.asarray(prompts[i:i + 1]),
                         jnp.asarray(lengths[i:i + 1]))[0][0] for i in everyone]
    logit_diff = max(float(jnp.max(jnp.abs(logits_batched[i] - logits_alone[i]))) for i in everyone)
    return {"dtype": dtype_name, "decoder": decoder_name, "rows": len(prompts),
            "rows_differing_batched_vs_alone": len(differ), "first_difference_at_new_token": first,
            "rows_changed_by_true_random_key": int(sum(not np.array_equal(a, b)
                                                       for a, b in zip(batched, reseeded))),
            "max_logit_difference_batched_vs_alone": logit_diff}


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    config = shapes.reduce(TARGET, FLAGS.reduce)
    n, p = FLAGS.num_prompts, FLAGS.prompt_length
    prompts = rng.integers(0, config.vocab_size, size=(n, p)).astype(np.int32)
    lengths = np.full(n, p, np.int32)
    keys = np.asarray(prf.stream_keys([f"batch-invariance-{i}" for i in range(n)]))
    rngs = jax.random.split(jax.random.key(0), n)
    device = jax.devices()[0]
    out = {"device": device.device_kind, "backend": jax.default_backend(), "max_new_tokens": FLAGS.max_new_tokens,
           "reduce": FLAGS.reduce, "settings": []}
    print(f"device {device.device_kind}: {n} rows, Alg. 1, K = 3, {FLAGS.max_new_tokens} new tokens")
    for dtype_name in FLAGS.dtypes:
        for decoder_name in FLAGS.decoders:
            row = _setting(config, dtype_name, decoder_name, prompts, lengths, keys, rngs)
            out["settings"].append(row)
            print(f"  {dtype_name:9s} {decoder_name:8s} rows differing batched vs alone: "
                  f"{row['rows_differing_batched_vs_alone']}/{n} (first at {row['first_difference_at_new_token']}); "
                  f"changed by the true-random key: {row['rows_changed_by_true_random_key']}/{n}; "
                  f"max |logit diff| batched vs alone {row['max_logit_difference_batched_vs_alone']:.2e}",
                  flush=True)
    storage.atomic_write_json(FLAGS.output, out)
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
