r"""Time per token and per step of every generation method, as ratios measured in one run.

All methods run in one process on the same pair, prompts and shapes;
compilation happens ahead of time (``speculative.precompile``), and the
methods and a bare cached decode step of the target are timed in
``--repeats`` interleaved rounds (median, with min and max), so the ratios
are robust to a machine's background load even when absolute times are not.

Reported ratios (also in the JSON, under ``ratios``):

* plain decoding through ``generate`` against the same model work done by
  hand (a jitted prefill and jitted cached decode steps with the cache
  donated): the whole call over prefill + steps x decode step, and the
  marginal cost of one loop step (runs at the budget and at half of it)
  over one decode step — the loop's overhead over the model;
* ``<method> / plain``, ``<method> / basic`` and ``<method> / standard`` per token (the paper's
  Table 1 compares with the basic watermark);
* the verification pass (the target over K + 1 tokens) and one draft step, each timed alone,
  over a decode step; and what each speculative step costs beyond its model passes (the call less
  the target's bare prefill, per loop step, minus the pass and K draft steps) over a decode step:
  the loop's own work (the draft's prefill is in it);
* per step, each watermarking method over the same method without a
  watermark (``basic / plain``; ``hu``, ``dathathri``, ``pseudorandom`` over
  ``standard``): what the watermark costs — the median over rounds of the
  ratio within a round (the two ran back to back), with its range.

  python -m benchmarks.bench_speculative --pair=builtin --batch_size=1 --max_new_tokens=48
  python -m benchmarks.bench_speculative --pair=builtin --batch_size=1 --num_calls=8 \
      --methods=plain,standard --lookahead=1      # 8 questions one at a time, summed
  python -m benchmarks.bench_speculative --pair=tiny_llama --decoder=synthid --top_k=100 --batch_size=32
  # several drafts per step (beyond the paper): one chain, 2 and 3 chains, a (3, 2, 1) tree
  python -m benchmarks.bench_speculative --pair=builtin --batch_size=1 --num_calls=8 \
      --methods=plain,standard,pseudorandom --draft_trees=1,2,3,3x2x1

``--draft_trees`` times each speculative method once per draft shape: ``n`` is n chains
(``num_drafts=n``), ``3x2x1`` a static tree of K depths (``draft_tree=(3, 2, 1)``), and a trailing
``d`` (``3d``, ``3x2x1d``) draws siblings without replacement (``distinct_drafts``); rows of other
shapes than one chain are labelled ``method@shape`` and compared per token with the method's
one chain (``<method>@<shape>/<method> per token``).

``--pair=tiny_llama`` is a random 2-layer Llama (d = 128, V = 32000) with a
1-layer draft (``benchmarks/shapes.py``): the shape of the comparison with
the paper's PyTorch code. Writes ``--output`` (JSON) atomically and prints a
table.
"""

import dataclasses
import os
import sys
import time

from absl import app, flags


import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import decoders, multidraft, prf, speculative, storage

flags.DEFINE_enum("pair", "toy", ["toy", "builtin", "tiny_llama"], "model pair")
flags.DEFINE_string("builtin_draft", "builtin", "--pair=builtin: the draft ('builtin' = the default, "
                    "'builtin:v2', ...)")
flags.DEFINE_enum("weight_layout", "auto", ["auto", "in_out", "out_in"], "--pair=builtin: the target's weight "
                  "layout (wmspec_jax.models.pairs.load_pair; auto: out_in on CPU)")
flags.DEFINE_enum("decoder", "gumbel", list(decoders.DECODER_NAMES), "watermark decoder")
flags.DEFINE_integer("num_layers", 30, "SynthID tournament layers m")
flags.DEFINE_integer("lookahead", 3, "K of the speculative methods")
flags.DEFINE_integer("batch_size", 8, "rows per call")
flags.DEFINE_integer("num_calls", 1, "calls per method and round, each on the next batch_size prompts "
                     "(times and tokens summed): at batch 1 one prompt's acceptance is far from the mean",
                     lower_bound=1)
flags.DEFINE_integer("max_new_tokens", 64, "generated tokens per row")
flags.DEFINE_integer("prompt_length", 32, "prompt tokens (toy / tiny_llama: random ids; builtin: questions, padded)")
flags.DEFINE_float("temperature", 0.7, "temperature")
flags.DEFINE_integer("top_k", 0, "top-k applied to P and Q (0: none)")
flags.DEFINE_list("methods", list(speculative.METHODS), "methods to time")
flags.DEFINE_integer("repeats", 5, "interleaved timing rounds (median)")
flags.DEFINE_list("draft_trees", ["1"], "draft shapes of the speculative methods: n (n chains) or b1xb2x... "
                  "(a static tree of K depths), with a trailing d: siblings without replacement")
flags.DEFINE_string("output", "results/bench_speculative.json", "JSON output")
FLAGS = flags.FLAGS

# the same method without a watermark (for the per-step watermark overhead)
UNWATERMARKED = {"basic": "plain", "hu": "standard", "dathathri": "standard", "pseudorandom": "standard"}


def load_pair():
    """(name, target, target_params, draft, draft_params, prompts int32[C * B, P], lengths int32[C * B]),
    C = ``--num_calls``."""
    b, p = FLAGS.batch_size * FLAGS.num_calls, FLAGS.prompt_length
    if FLAGS.pair == "builtin":
        from wmspec_jax import text_data as data
        from wmspec_jax.models import pairs

        pair = pairs.load_pair("builtin", FLAGS.builtin_draft, weight_layout=FLAGS.weight_layout)
        questions = data.load_prompt_set("builtin-eli5").take(b, seed=0)
        prompts, lengths = pairs.encode_prompts(pair, questions.prompts, "question", max(p, 64), too_long="truncate")
        return pair.name, pair.target, pair.target_params, pair.draft, pair.draft_params, prompts, lengths
    if FLAGS.pair == "toy":
        from wmspec_jax.models import pairs

        pair = pairs.load_pair("toy", "toy")
        target, tp, draft, dp, vocab = pair.target, pair.target_params, pair.draft, pair.draft_params, pair.vocab_size
        name = pair.name
    else:
        from benchmarks import shapes

        rp = shapes.tiny_llama_pair()
        target, tp, draft, dp, vocab, name = rp.target, rp.target_params, rp.draft, rp.draft_params, 32000, rp.name
    prompts = np.random.default_rng(0).integers(0, vocab, size=(b, p)).astype(np.int32)
    return name, target, tp, draft, dp, prompts, np.full(b, p, np.int32)


def bare_model_calls(target, params, prompts, lengths, capacity: int):
    """The model work of plain decoding done by hand: a jitted prefill and a jitted
    cached decode step (T = 1, cache donated and fed back, as a hand-written
    decode loop would), with their arguments."""
    bsz, width = prompts.shape
    prefill = jax.jit(lambda p, t, n: target.step(p, target.init_cache(bsz, capacity), t, n)[1])
    prefill_args = (params, jnp.asarray(prompts[:, : width - 1]), jnp.asarray(lengths - 1))
    cache = jax.block_until_ready(prefill(*prefill_args))
    decode = jax.jit(lambda p, c, t: target.step(p, c, t, jnp.ones((bsz,), jnp.int32)), donate_argnums=1)
    token = jnp.ones((bsz, 1), jnp.int32)
    context = np.asarray(target.cache_lengths(cache))  # a host copy: the cache is donated

    def decode_steps(count: int) -> float:
        """Seconds per step over ``count`` consecutive steps from the prompt's cache."""
        nonlocal cache
        cache = target.rewind(cache, jnp.asarray(context))
        t0 = time.perf_counter()
        for _ in range(count):
            _, cache = decode(params, cache, token)
        jax.block_until_ready(cache)
        return (time.perf_counter() - t0) / count

    decode_steps(2)  # compile
    return (lambda: jax.block_until_ready(prefill(*prefill_args))), decode_steps


def bare_pass(model, params, cache, tokens_per_pass: int, context):
    """Seconds of one jitted ``model.step`` of ``tokens_per_pass`` tokens per row from ``context``
    (the cache donated and rewound before every call): the verification pass of a speculative
    step when ``model`` is the target and ``tokens_per_pass`` = K + 1, a draft step at 1 (a draft
    that reads the target's features gets zeros of their shape: the same work)."""
    bsz = len(context)
    tokens = jnp.ones((bsz, tokens_per_pass), jnp.int32)
    num = jnp.full((bsz,), tokens_per_pass, jnp.int32)
    extra = ((jnp.zeros((bsz, tokens_per_pass, model.feature_size), jnp.float32),)
             if getattr(model, "uses_target_features", False) else ())
    # The logits are returned (and waited for): a program that drops them would skip the head.
    run = jax.jit(lambda p, c: (lambda out: (out[0], out[-1]))(model.step(p, c, tokens, num, *extra)),
                  donate_argnums=1)
    state = {"cache": cache}

    def once() -> float:
        c = model.rewind(state["cache"], jnp.asarray(context))
        t0 = time.perf_counter()
        _, state["cache"] = jax.block_until_ready(run(params, c))
        return time.perf_counter() - t0

    once()  # compile
    return once


def main(argv):
    del argv
    name, target, tp, draft, dp, all_prompts, all_lengths = load_pair()
    bsz, num_calls = FLAGS.batch_size, FLAGS.num_calls
    all_keys = prf.stream_keys([f"bench-{i}" for i in range(bsz * num_calls)])
    all_rngs = jax.random.split(jax.random.key(0), bsz * num_calls)
    rows_of = [slice(c * bsz, (c + 1) * bsz) for c in range(num_calls)]
    dec = decoders.WatermarkDecoder.from_name(FLAGS.decoder, FLAGS.num_layers)
    calls = {}  # method -> ([args of each call], extra): every call has the same shapes (one executable)
    shapes = {text: multidraft.parse_shape(text) for text in FLAGS.draft_trees}
    for method in FLAGS.methods:
        spec = speculative.METHODS[method]
        for text, shape in (shapes.items() if spec.speculative else [("1", {})]):
            label = method if not shape else f"{method}@{text}"
            cfg = speculative.SpeculativeConfig(
                method=method, decoder=dec, lookahead=FLAGS.lookahead if spec.speculative else 0,
                max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature, top_k=FLAGS.top_k or None,
                **shape)
            extra = dict(draft=draft, draft_params=dp) if spec.speculative else {}
            per_call = [(target, tp, all_prompts[r], all_lengths[r], all_keys[r], all_rngs[r], cfg) for r in rows_of]
            t0 = time.perf_counter()
            speculative.precompile(*per_call[0], **extra)
            print(f"compiled {label} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            calls[label] = (per_call, extra)
    # plain decoding again at half the budget: the difference of the two is the
    # marginal cost of a loop step, free of the prefill and the call's fixed costs
    half = None
    if "plain" in calls:
        per_call, extra = calls["plain"]
        half_cfg = dataclasses.replace(per_call[0][-1], max_new_tokens=max(1, FLAGS.max_new_tokens // 2))
        half = ([args[:-1] + (half_cfg,) for args in per_call], extra)
        speculative.precompile(*half[0][0], **half[1])
    prompts, lengths = all_prompts[rows_of[0]], all_lengths[rows_of[0]]
    capacity = int(prompts.shape[1]) + FLAGS.max_new_tokens + FLAGS.lookahead + 8
    prefill, decode_steps = bare_model_calls(target, tp, prompts, lengths, capacity)
    # The model passes of a speculative step, each alone: what the step costs beyond them is the
    # loop's own work (sampling, watermark, acceptance, bookkeeping).
    speculative_run = any(speculative.METHODS[m].speculative for m in FLAGS.methods)
    context = np.asarray(lengths) + FLAGS.max_new_tokens // 2
    passes = {}
    if speculative_run:
        passes["bare_verify"] = bare_pass(target, tp, target.init_cache(bsz, capacity), FLAGS.lookahead + 1, context)
        passes["bare_draft"] = bare_pass(draft, dp, draft.init_cache(bsz, capacity), 1, context)

    timed = dict(calls)
    if half is not None:
        timed["plain_half"] = half
    times = {m: [] for m in timed}
    times["bare_decode"], times["bare_prefill"] = [], []
    times.update({name: [] for name in passes})
    counts = {}
    for r in range(FLAGS.repeats):
        for method, (per_call, extra) in timed.items():
            tokens = steps = 0
            t0 = time.perf_counter()
            for args in per_call:
                res = speculative.generate(*args, **extra)
                jax.block_until_ready(res.tokens)
                tokens += int(np.sum(np.asarray(res.lengths) - np.asarray(res.prompt_lengths)))
                steps += int(np.max(np.asarray(res.num_steps)))
            times[method].append(time.perf_counter() - t0)
            counts[method] = (tokens, steps)  # summed over the calls (the same every round)
        t0 = time.perf_counter()
        prefill()
        times["bare_prefill"].append(time.perf_counter() - t0)
        times["bare_decode"].append(decode_steps(min(FLAGS.max_new_tokens, 16)))
        for pass_name, once in passes.items():
            times[pass_name].append(float(np.median([once() for _ in range(5)])))
        print(f"round {r + 1}/{FLAGS.repeats} done", file=sys.stderr, flush=True)

    rows = {}
    for method in calls:
        tokens, steps = counts[method]
        t = np.asarray(times[method])
        rows[method] = {
            "seconds_median": float(np.median(t)), "seconds_min": float(t.min()), "seconds_max": float(t.max()),
            "tokens": tokens, "loop_steps": steps,
            "ms_per_token": 1e3 * float(np.median(t)) / tokens,
            "ms_per_step": 1e3 * float(np.median(t)) / steps,
            "ms_per_step_range": [1e3 * float(t.min()) / steps, 1e3 * float(t.max()) / steps],
            "tokens_per_step": tokens / (steps * bsz),
        }
    bare_ms = 1e3 * float(np.median(times["bare_decode"]))
    prefill_ms = 1e3 * float(np.median(times["bare_prefill"]))
    ratios = {}
    if "plain" in rows:
        steps = rows["plain"]["loop_steps"]
        ratios["plain call/(bare prefill + steps x bare decode)"] = (
            1e3 * rows["plain"]["seconds_median"] / (num_calls * prefill_ms + steps * bare_ms))
        half_steps = counts["plain_half"][1]
        marginal_ms = 1e3 * (rows["plain"]["seconds_median"] - float(np.median(times["plain_half"]))) / (
            steps - half_steps)
        rows["plain"]["marginal_ms_per_step"] = marginal_ms
        ratios["plain marginal step/bare decode step"] = marginal_ms / bare_ms
    # Per token against the two methods without a draft: what speculation buys (the paper's Table 1
    # compares each method with the basic watermark; standard speculative sampling with plain decoding).
    for base in ("plain", "basic", "standard"):
        if base in rows:
            for method in rows:
                if method != base:
                    ratios[f"{method}/{base} per token"] = rows[method]["ms_per_token"] / rows[base]["ms_per_token"]
    for label in rows:
        if "@" in label and label.split("@")[0] in rows:
            chain = label.split("@")[0]
            ratios[f"{label}/{chain} per token"] = rows[label]["ms_per_token"] / rows[chain]["ms_per_token"]
    pass_ms = {pass_name: 1e3 * float(np.median(times[pass_name])) for pass_name in passes}
    if passes:
        ratios[f"verification pass (T={FLAGS.lookahead + 1})/bare decode step"] = pass_ms["bare_verify"] / bare_ms
        ratios["draft step/bare decode step"] = pass_ms["bare_draft"] / bare_ms
        for method in rows:
            if method in speculative.METHODS and speculative.METHODS[method].speculative:
                # a step: the call less the target's prefill, over the loop's steps
                step_ms = (1e3 * rows[method]["seconds_median"] - num_calls * prefill_ms) / rows[method]["loop_steps"]
                model_ms = pass_ms["bare_verify"] + FLAGS.lookahead * pass_ms["bare_draft"]
                rows[method]["step_ms_without_prefill"] = step_ms
                rows[method]["step_overhead_ms"] = step_ms - model_ms
                ratios[f"{method} step beyond its model passes/bare decode step"] = (
                    rows[method]["step_overhead_ms"] / bare_ms)
    spreads = {}
    for method, base in UNWATERMARKED.items():
        if method in rows and base in rows:
            # paired by round (both ran back to back), so slow drifts of the machine cancel
            per_round = (np.asarray(times[method]) / counts[method][1]) / (np.asarray(times[base]) / counts[base][1])
            key = f"{method}/{base} per step"
            ratios[key] = float(np.median(per_round))
            spreads[key] = [float(per_round.min()), float(per_round.max())]

    print(f"\n{name}, {dec.label}, K={FLAGS.lookahead}, batch {bsz} x {num_calls} calls, "
          f"{FLAGS.max_new_tokens} new tokens, "
          f"T={FLAGS.temperature}, top-k={FLAGS.top_k or 'none'}, median of {FLAGS.repeats} rounds "
          f"({jax.devices()[0].platform})")
    print(f"{'method':22s} {'ms/token':>9s} {'ms/step':>9s} {'(min-max)':>17s} {'tok/step':>8s}")
    for method, row in rows.items():
        lo, hi = row["ms_per_step_range"]
        print(f"{method:22s} {row['ms_per_token']:9.3f} {row['ms_per_step']:9.3f} {f'({lo:.2f}-{hi:.2f})':>17s} "
              f"{row['tokens_per_step']:8.2f}")
    print(f"{'bare decode':14s} {'':9s} {bare_ms:9.3f}   (bare prefill {prefill_ms:.3f} ms)")
    for pass_name, ms in pass_ms.items():
        print(f"{pass_name:14s} {'':9s} {ms:9.3f}")
    if "plain" in rows:
        print(f"{'plain marginal':14s} {'':9s} {rows['plain']['marginal_ms_per_step']:9.3f}   "
              f"(step cost beyond the prefill: runs at {FLAGS.max_new_tokens} and {FLAGS.max_new_tokens // 2} tokens)")
    for key, value in ratios.items():
        spread = f"   (rounds: {spreads[key][0]:.3f}-{spreads[key][1]:.3f})" if key in spreads else ""
        print(f"  {key:48s} {value:6.3f}{spread}")
    storage.atomic_write_json(FLAGS.output, {
        "pair": name, "weight_layout": FLAGS.weight_layout if FLAGS.pair == "builtin" else None,
        "decoder": dec.label, "lookahead": FLAGS.lookahead, "batch_size": bsz,
        "num_calls": num_calls, "draft_trees": FLAGS.draft_trees,
        "max_new_tokens": FLAGS.max_new_tokens, "temperature": FLAGS.temperature, "top_k": FLAGS.top_k or None,
        "repeats": FLAGS.repeats, "devices": [str(d) for d in jax.devices()], "rows": rows,
        "bare_decode_ms_per_step": bare_ms, "bare_prefill_ms": prefill_ms, "bare_pass_ms": pass_ms, "ratios": ratios,
        "ratio_spreads": spreads,
        "seconds": times})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
