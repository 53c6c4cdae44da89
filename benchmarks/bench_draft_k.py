r"""Which lookahead K pays on the built-in pair: AATPS and per-token time vs plain decoding.

For each temperature T in ``--temperatures`` and each K in ``--lookaheads``,
standard speculative sampling (``--method``) generates ``--max_new_tokens``
tokens for ``--num_prompts`` held-out built-in questions (the ``eval`` split
of ``builtin-eli5``, chat template, stopping at the end-of-turn token), in
calls of ``--batch_size`` rows; plain decoding of the same prompts at the
same T is the baseline. Compilation happens first (``speculative.precompile``);
then ``--repeats`` rounds each run every configuration once, interleaved,
so that each ratio ``speculative / plain`` (per generated token) is taken
within a round (the two ran back to back) and reported as the median over
rounds with its range. AATPS is the mean over rows of generated tokens /
loop steps (``GenerationResult.tokens_per_step_mean``), from the first round
(each round draws the same tokens: same keys and seeds).

  python -m benchmarks.bench_draft_k --output=results/bench_draft_k.json
  python -m benchmarks.bench_draft_k --draft=v1 --lookaheads=1,2,3 --temperatures=0.7

Writes ``--output`` (JSON) atomically and prints one table per temperature
with the best K (the lowest median time ratio).
"""

import dataclasses
import os
import sys
import time

from absl import app, flags


import jax
import numpy as np

from wmspec_jax import decoders, prf, speculative, storage
from wmspec_jax import text_data as data
from wmspec_jax.models import pairs

flags.DEFINE_string("draft", "", "a draft file of the built-in target ('' = the shipped default)")
flags.DEFINE_list("temperatures", ["0.5", "0.7", "1.0"], "temperatures")
flags.DEFINE_list("lookaheads", ["1", "2", "3", "4", "5", "6"], "K values")
flags.DEFINE_string("method", "standard", "speculative method timed against plain decoding")
flags.DEFINE_enum("decoder", "gumbel", ["gumbel", "synthid"], "watermark decoder (unused by standard)")
flags.DEFINE_integer("num_prompts", 16, "held-out questions")
flags.DEFINE_integer("batch_size", 8, "rows per generate call (num_prompts must be a multiple; the quick preset uses 8)")
flags.DEFINE_integer("max_new_tokens", 48, "token budget per row")
flags.DEFINE_integer("prompt_length", 64, "prompt slots (longer questions are cut from the start)")
flags.DEFINE_integer("repeats", 3, "interleaved timing rounds")
flags.DEFINE_string("output", "results/bench_draft_k.json", "JSON output")
FLAGS = flags.FLAGS


def load():
    from wmspec_jax.models import builtin

    pair = pairs.load_pair("builtin", "builtin")
    name = FLAGS.draft or builtin.DEFAULT_DRAFT
    if name != builtin.DEFAULT_DRAFT:
        d = builtin.load_draft(builtin.load_target(), adapters_path=name)
        pair = dataclasses.replace(pair, draft=d.language_model(), draft_params=d.params)
    questions = data.load_prompt_set("builtin-eli5").take(FLAGS.num_prompts, seed=0)
    prompts, lengths = pairs.encode_prompts(pair, questions.prompts, "question", FLAGS.prompt_length,
                                            too_long="truncate")
    return pair, name, np.asarray(prompts), np.asarray(lengths)


def main(argv):
    del argv
    pair, draft_name, prompts, lengths = load()
    n, bsz = len(prompts), FLAGS.batch_size
    if n % bsz:
        raise ValueError(f"--num_prompts={n} is not a multiple of --batch_size={bsz}")
    keys = prf.stream_keys([f"bench-k-{i}" for i in range(n)])
    rngs = jax.random.split(jax.random.key(0), n)
    dec = decoders.WatermarkDecoder(FLAGS.decoder)
    configs = {}  # (T, K) -> SpeculativeConfig; K = 0 is plain decoding
    for t in map(float, FLAGS.temperatures):
        for k in [0] + [int(k) for k in FLAGS.lookaheads]:
            configs[(t, k)] = speculative.SpeculativeConfig(
                method="plain" if k == 0 else FLAGS.method, decoder=dec, lookahead=k,
                max_new_tokens=FLAGS.max_new_tokens, temperature=t, eos_id=pair.eos_id,
                pad_id=pair.pad_id)

    def call(cfg, lo):
        sl = slice(lo, lo + bsz)
        extra = dict(draft=pair.draft, draft_params=pair.draft_params) if cfg.lookahead else {}
        return (pair.target, pair.target_params, prompts[sl], lengths[sl], keys[sl], rngs[sl], cfg), extra

    for (t, k), cfg in configs.items():
        t0 = time.perf_counter()
        args, extra = call(cfg, 0)
        speculative.precompile(*args, **extra)
        print(f"compiled T={t} K={k} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    seconds = {c: [] for c in configs}
    tokens, aatps = {}, {}
    for r in range(FLAGS.repeats):
        for c, cfg in configs.items():
            total, gen, per_row = 0.0, 0, []
            for lo in range(0, n, bsz):
                args, extra = call(cfg, lo)
                t0 = time.perf_counter()
                res = speculative.generate(*args, **extra)
                jax.block_until_ready(res.tokens)
                total += time.perf_counter() - t0
                gen += int(np.sum(np.asarray(res.lengths) - np.asarray(res.prompt_lengths)))
                per_row.append(res.tokens_per_step_mean())
            seconds[c].append(total)
            if r == 0:
                tokens[c], aatps[c] = gen, np.concatenate(per_row)
        print(f"round {r + 1}/{FLAGS.repeats} done", file=sys.stderr, flush=True)

    rows, best = [], {}
    for t in map(float, FLAGS.temperatures):
        plain = np.asarray(seconds[(t, 0)]) / tokens[(t, 0)]
        print(f"\nT={t}: plain {1e3 * np.median(plain):.2f} ms/token "
              f"(batch {bsz}, {n} held-out prompts, {FLAGS.max_new_tokens} tokens, {FLAGS.repeats} rounds)")
        print(f"{'K':>3s} {'AATPS':>6s} {'± 95%':>6s} {'ms/token':>9s} {'/ plain':>8s} {'(range)':>15s}")
        for k in [int(k) for k in FLAGS.lookaheads]:
            per_token = np.asarray(seconds[(t, k)]) / tokens[(t, k)]
            ratio = per_token / plain  # within each round
            a = aatps[(t, k)]
            half = 1.96 * a.std(ddof=1) / np.sqrt(a.size)
            row = {"temperature": t, "lookahead": k, "aatps": float(a.mean()), "aatps_ci95": float(half),
                   "aatps_per_row": a.tolist(),  # same prompts, keys and seeds per row: drafts pair up
                   "ms_per_token": 1e3 * float(np.median(per_token)),
                   "plain_ms_per_token": 1e3 * float(np.median(plain)),
                   "ratio_to_plain": float(np.median(ratio)),
                   "ratio_range": [float(ratio.min()), float(ratio.max())],
                   "tokens": tokens[(t, k)], "plain_tokens": tokens[(t, 0)]}
            rows.append(row)
            print(f"{k:3d} {row['aatps']:6.2f} {half:6.2f} {row['ms_per_token']:9.2f} "
                  f"{row['ratio_to_plain']:8.3f} {f'({ratio.min():.3f}-{ratio.max():.3f})':>15s}")
        b = min((r for r in rows if r["temperature"] == t), key=lambda r: r["ratio_to_plain"])
        best[str(t)] = b["lookahead"]
        print(f"best K at T={t}: {b['lookahead']} ({b['ratio_to_plain']:.3f} x plain per token)")
    storage.atomic_write_json(FLAGS.output, {
        "pair": pair.name, "draft": draft_name, "method": FLAGS.method, "num_prompts": n,
        "batch_size": bsz, "max_new_tokens": FLAGS.max_new_tokens, "repeats": FLAGS.repeats,
        "devices": [str(d) for d in jax.devices()], "rows": rows, "best_lookahead": best,
        "seconds": {f"T={t},K={k}": v for (t, k), v in seconds.items()}})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
