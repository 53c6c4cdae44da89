r"""Per-token time of every generation method, as ratios to standard speculative sampling.

All methods run in one process on the same pair, prompts and shapes;
compilation happens ahead of time (``speculative.precompile``) and each
method is timed over ``--repeats`` interleaved rounds (median), so the ratios
are robust to a machine's background load even when absolute times are not.

  python benchmarks/bench_speculative.py --pair=toy
  python benchmarks/bench_speculative.py --pair=builtin --batch_size=8 --max_new_tokens=32

Writes ``--output`` (JSON) atomically and prints a table.
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from wmspec_jax import data, decoders, pairs, results, runs, speculative  # noqa: E402

flags.DEFINE_enum("pair", "toy", ["toy", "builtin"], "model pair")
flags.DEFINE_enum("decoder", "gumbel", ["gumbel", "synthid"], "watermark decoder")
flags.DEFINE_integer("lookahead", 3, "K of the speculative methods")
flags.DEFINE_integer("batch_size", 8, "rows per call")
flags.DEFINE_integer("max_new_tokens", 64, "generated tokens per row")
flags.DEFINE_float("temperature", 0.7, "temperature")
flags.DEFINE_integer("repeats", 5, "interleaved timing rounds (median)")
flags.DEFINE_string("output", "results/bench_speculative.json", "JSON output")
FLAGS = flags.FLAGS

METHODS = ("plain", "basic", "standard", "hu", "dathathri", "pseudorandom")


def main(argv):
    del argv
    pair = pairs.load_pair(FLAGS.pair, FLAGS.pair)
    questions = data.load_prompt_set("builtin-eli5").take(FLAGS.batch_size, seed=0)
    prompts, lengths = pairs.encode_prompts(pair, questions.prompts, "question", 64)
    keys = runs.text_keys("bench", range(FLAGS.batch_size))
    dec = decoders.WatermarkDecoder(FLAGS.decoder, 30)
    calls = {}
    for method in METHODS:
        spec = speculative.METHODS[method]
        cfg = speculative.SpeculativeConfig(method=method, decoder=dec,
                                            lookahead=FLAGS.lookahead if spec.speculative else 0,
                                            max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature)
        draft = dict(draft=pair.draft, draft_params=pair.draft_params) if spec.speculative else {}
        args = (pair.target, pair.target_params, prompts, lengths, keys, runs.text_rngs(0, method, range(len(lengths))), cfg)
        speculative.precompile(*args, **draft)
        calls[method] = (args, draft)
    times = {m: [] for m in METHODS}
    tokens = {}
    for r in range(FLAGS.repeats):
        for method, (args, draft) in calls.items():
            t0 = time.perf_counter()
            res = speculative.generate(*args, **draft)
            jax.block_until_ready(res.tokens)
            times[method].append(time.perf_counter() - t0)
            tokens[method] = int(np.sum(np.asarray(res.lengths) - np.asarray(res.prompt_lengths)))
        print(f"round {r + 1}/{FLAGS.repeats} done", file=sys.stderr, flush=True)
    base = np.median(times["standard"]) / tokens["standard"]
    rows = []
    print(f"{'method':14s} {'ms/token':>9s} {'ratio to standard':>18s}")
    for method in METHODS:
        per_token = np.median(times[method]) / tokens[method]
        rows.append({"method": method, "ms_per_token": 1000 * per_token, "ratio_to_standard": per_token / base,
                     "seconds": times[method], "tokens": tokens[method]})
        print(f"{method:14s} {1000 * per_token:9.3f} {per_token / base:18.2f}")
    results.atomic_write_json(FLAGS.output, {
        "pair": pair.name, "decoder": FLAGS.decoder, "lookahead": FLAGS.lookahead, "batch_size": FLAGS.batch_size,
        "max_new_tokens": FLAGS.max_new_tokens, "temperature": FLAGS.temperature, "repeats": FLAGS.repeats,
        "devices": [str(d) for d in jax.devices()], "rows": rows})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
