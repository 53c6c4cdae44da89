r"""Prefill and per-token decode time of the built-in target and draft.

Each measurement is a jitted call timed with ``block_until_ready``; the first
(compiling) call is excluded and the median over ``--repeats`` is reported.
Target and draft calls are interleaved so both see the same background load.
Prefill runs ``step`` over a ``--prompt_len`` prompt with the logits dropped
(as the speculative loop does, so XLA removes the LM head); decode is one
``step`` with T = 1 at a context of ``--context`` tokens.

  python -m benchmarks.bench_models --json=results/bench_models.json            # default draft
  python -m benchmarks.bench_models --draft=drafts/smollm2_draft.npz --batch_sizes=1   # the first draft (v1)
  python -m benchmarks.bench_models --draft=drafts/smollm2_draft.npz --head_sizes=4096,8192,16384  # cost only
  python -m benchmarks.bench_models --batch_sizes=1 --layer_counts=2,3,4      # fewer layers, cost only

``--draft`` is a shipped draft name (``builtin.DRAFTS``) or a draft file (LoRA adapters or a
feature draft).
``--head_sizes`` times that draft with a reduced-vocabulary head of each size
(kept ids 0..N-1: the cost does not depend on which ids are kept; 0 = the
full head, i.e. what the draft costs without its reduced head), to choose a
head size before training one; ``--layer_counts`` times it cut to its first N
layers, to choose a depth before training one.
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags


import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.models import builtin, draft, feature_draft

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["1", "32"], "batch sizes to time")
flags.DEFINE_integer("prompt_len", 64, "prefill length")
flags.DEFINE_integer("context", 128, "tokens already in the cache when decoding")
flags.DEFINE_integer("repeats", 20, "timed repeats (median reported)")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "params dtype")
flags.DEFINE_string("json", "", "write the results here")
flags.DEFINE_string("draft", "", "built-in draft name or adapter file ('' = the default draft)")
flags.DEFINE_list("head_sizes", [], "also time the draft with reduced heads of these sizes "
                  "(0: the full head)")
flags.DEFINE_list("layer_counts", [], "also time the draft cut to its first N layers (its own head; "
                  "cost only: the cut adapters were not trained for it)")


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
    # a feature draft also reads one feature vector per input token (values do not change the cost)
    features = ((lambda t: (jnp.zeros((batch, t, lm.feature_size), ckpt.dtype),))
                if lm.uses_target_features else (lambda t: ()))
    prefill = jax.jit(lambda p, c, t, n, *f: lm.step(p, c, t, n, *f)[-1])
    decode = jax.jit(lm.step)
    cache = lm.init_cache(batch, capacity)
    prefill_args = (ckpt.params, cache, jnp.ones((batch, FLAGS.prompt_len), jnp.int32),
                    jnp.full((batch,), FLAGS.prompt_len, jnp.int32), *features(FLAGS.prompt_len))
    cache = lm.rewind(cache, jnp.full((batch,), FLAGS.context, jnp.int32))
    decode_args = (ckpt.params, cache, jnp.ones((batch, 1), jnp.int32),
                   jnp.ones((batch,), jnp.int32), *features(1))
    return (prefill, prefill_args), (decode, decode_args)


def main(argv):
    del argv
    target = builtin.load_target(jnp.dtype(FLAGS.dtype))
    if FLAGS.draft in builtin.DRAFTS or not FLAGS.draft:
        drafted = builtin.load_draft(target, name=FLAGS.draft or builtin.DEFAULT_DRAFT)
    else:
        drafted = builtin.load_draft(target, adapters_path=FLAGS.draft)
    drafts = {"draft": drafted}
    adapter_file = (builtin.draft_asset_path(FLAGS.draft or builtin.DEFAULT_DRAFT)
                    if FLAGS.draft in builtin.DRAFTS or not FLAGS.draft else FLAGS.draft)
    if (FLAGS.head_sizes or FLAGS.layer_counts) and feature_draft.is_feature_draft_file(adapter_file):
        raise app.UsageError("--head_sizes / --layer_counts take a LoRA draft file (e.g. drafts/smollm2_draft_v3.npz)")
    for size in map(int, FLAGS.head_sizes):
        layers, adapters, _ = draft.load_adapters(adapter_file)
        adapters.pop("head_ids", None)
        if size:
            adapters["head_ids"] = jnp.arange(size, dtype=jnp.int32)
        drafts[f"head{size or 'full'}"] = draft.make_draft(target, layers, adapters)
    for count in map(int, FLAGS.layer_counts):
        layers, adapters, _ = draft.load_adapters(adapter_file)
        if not 1 <= count <= len(layers):
            raise app.UsageError(f"--layer_counts: {count} is not in 1..{len(layers)}")
        cut = {k: (v if k in ("final_norm", "head_ids") else
                   {n: w[:count] for n, w in v.items()} if isinstance(v, dict) else v[:count])
               for k, v in adapters.items()}
        drafts[f"layers{count}"] = draft.make_draft(target, layers[:count], cut)
    results = {"device": str(jax.devices()[0]), "dtype": FLAGS.dtype, "draft": drafted.name,
               "draft_head": int(drafted.params["head_ids"].shape[0]) if "head_ids" in drafted.params
               else target.config.vocab_size,
               "prompt_len": FLAGS.prompt_len, "context": FLAGS.context,
               "target_layers": target.config.num_layers, "draft_layers": drafted.config.num_layers,
               "rows": []}
    print(f"{'model':10} {'batch':>5} {'prefill ms':>11} {'decode ms/step':>15} {'ms/token':>9}")
    for b in map(int, FLAGS.batch_sizes):
        models = {"target": target, **drafts}
        pre_calls, dec_calls = zip(*(calls_for(m, b) for m in models.values()))
        pre = dict(zip(models, median_times(list(pre_calls))))
        dec = dict(zip(models, median_times(list(dec_calls))))
        row = {"batch": b}
        for name in models:
            row[name] = {"prefill_ms": 1e3 * pre[name], "decode_ms_per_step": 1e3 * dec[name],
                         "decode_ms_per_token": 1e3 * dec[name] / b}
            print(f"{name:10} {b:5d} {1e3 * pre[name]:11.2f} {1e3 * dec[name]:15.2f} "
                  f"{1e3 * dec[name] / b:9.3f}", flush=True)
        for name in drafts:
            suffix = "" if name == "draft" else f"_{name}"
            row[f"draft_over_target_decode{suffix}"] = dec[name] / dec["target"]
            row[f"draft_over_target_prefill{suffix}"] = pre[name] / pre["target"]
            print(f"{'ratio ' + name:10} {b:5d} {pre[name] / pre['target']:11.3f} "
                  f"{dec[name] / dec['target']:15.3f}", flush=True)
        results["rows"].append(row)
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
