r"""What another engine's detector sees of texts generated here with its watermark, per method.

Generates ``--texts`` answers of ``--max_new_tokens`` tokens to the built-in questions with the built-in
pair under transformers' SynthID-Text and KGW (lefthash) and vLLM's ``gumbel`` and ``dual_key_gumbel``
(``ForeignScheme.decoder``: the engine's PRF keys the target stream; ``docs/interop.md``), for each method
of ``--methods`` (``name[:K[:tree]]``), and scores the generated tokens with that engine's own statistic
and exact p-value (``ForeignScheme.score``). Reports per (engine, method): the share of texts with p <= 0.01 with its
Clopper-Pearson 95 % interval, the median log p-value and scored tokens, AATPS and seconds.

  python -m benchmarks.engine_generation
  python -m benchmarks.engine_generation --engines=vllm --methods=basic,pseudorandom:3 --texts=8
  python -m benchmarks.engine_generation --engines=vllm-dual --methods=plain,pseudorandom:3,dathathri:3
"""

from __future__ import annotations

import time

import jax
import numpy as np
from absl import app, flags
from scipy import stats

from wmspec_jax import speculative, storage, text_data
from wmspec_jax.interop import foreign
from wmspec_jax.models import pairs

# Keys of the benchmark's own (public) configurations: the detector's power does not depend on them.
CONFIGS = {"synthid": {"ngram_len": 5, "keys": [654, 400, 836, 123, 340, 443, 597, 160, 57, 29, 590, 639, 13, 715,
                                                468, 990, 966, 226, 324, 585, 118, 504, 421, 521, 129, 669, 732,
                                                225, 90, 960]},
           "vllm": {"algorithm": "gumbel", "key": 42},
           "vllm-dual": {"algorithm": "dual_key_gumbel", "key": 42},
           "kgw": {"greenlist_ratio": 0.25, "bias": 2.0, "hashing_key": 15485863, "seeding_scheme": "lefthash",
                   "context_width": 1}}

flags.DEFINE_list("engines", ["vllm", "synthid", "kgw"], f"engines: {', '.join(CONFIGS)}")
flags.DEFINE_list("methods", ["plain", "basic", "pseudorandom:3", "pseudorandom:3:3x2x1", "coupled:3"],
                  "methods as name[:K[:tree]]")
flags.DEFINE_integer("texts", 16, "answers per (engine, method)", lower_bound=1)
flags.DEFINE_integer("max_new_tokens", 128, "tokens per answer", lower_bound=1)
flags.DEFINE_float("temperature", 0.7, "temperature of P and Q", lower_bound=0.0)
flags.DEFINE_list("top_k", ["vllm=0", "vllm-dual=0", "synthid=50", "kgw=50"],
                  "top-k per engine (0: none; transformers' default is 50)")
flags.DEFINE_string("pair", "builtin", "model pair (builtin or checkpoint directories: target,draft)")
flags.DEFINE_string("output", "results/engine_generation.json", "JSON output")
FLAGS = flags.FLAGS


def parse_method(text: str) -> tuple:
    name, *rest = text.split(":")
    k = int(rest[0]) if rest else 0
    tree = tuple(int(b) for b in rest[1].split("x")) if len(rest) > 1 else None
    return name, k, tree


def power(passed: int, n: int) -> tuple:
    lo = stats.beta.ppf(0.025, passed, n - passed + 1) if passed else 0.0
    hi = stats.beta.ppf(0.975, passed + 1, n - passed) if passed < n else 1.0
    return passed / n, float(lo), float(hi)


def run_cell(pair, prompts, lengths, scheme, method: str, k: int, tree, top_k) -> dict:
    decoder = scheme.decoder()
    if getattr(decoder, "dual_key", False) and method != "plain" and not speculative.METHODS[method].watermark_draft:
        raise ValueError("dual_key_gumbel draws drafts with key A and the target's tokens with key B: it needs a "
                         "method that watermarks the draft")
    config = speculative.SpeculativeConfig(method=method, decoder=decoder, lookahead=k, draft_tree=tree,
                                           max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature,
                                           top_k=top_k, context_width=decoder.own_context_width)
    keys = np.broadcast_to(scheme.stream_keys(), (len(prompts),) + scheme.stream_keys().shape)
    start = time.perf_counter()
    res = speculative.generate(pair.target, pair.target_params, prompts, lengths, keys, jax.random.key(1), config,
                               draft=pair.draft, draft_params=pair.draft_params)
    texts = [res.generated(r).tolist() for r in range(len(prompts))]
    seconds = time.perf_counter() - start
    scores = scheme.score(texts, pair.vocab_size)
    flagged = int(np.sum(scores.log_pvalue <= np.log(0.01)))
    rate, lo, hi = power(flagged, len(texts))
    return {"engine": scheme.name, "method": method, "lookahead": k, "draft_tree": None if tree is None else list(tree),
            "top_k": top_k, "texts": len(texts), "flagged_at_0.01": flagged, "rate": rate, "rate_95": [lo, hi],
            "median_log_pvalue": float(np.median(scores.log_pvalue)),
            "median_scored": float(np.median(scores.num_scored)),
            "aatps": float(res.tokens_per_step_mean().mean()), "seconds": round(seconds, 1)}


def main(argv):
    del argv
    target, _, draft = FLAGS.pair.partition(",")
    pair = pairs.load_pair(target, draft or target)
    questions = text_data.builtin_questions().prompts[:FLAGS.texts]
    prompts, lengths = pairs.encode_prompts(pair, questions, "question", 96, too_long="truncate")
    top_k = {e: int(v) or None for e, v in (item.split("=") for item in FLAGS.top_k)}
    rows = []
    for engine in FLAGS.engines:
        scheme = foreign.from_dict(CONFIGS[engine])
        for spec in FLAGS.methods:
            try:
                row = run_cell(pair, prompts, lengths, scheme, *parse_method(spec), top_k.get(engine))
            except ValueError as e:  # a cell the scheme does not run (KGW over a tree)
                print(f"{scheme.name:22s} {spec:22s} skipped: {e}", flush=True)
                rows.append({"engine": scheme.name, "method": spec, "skipped": str(e)})
                continue
            rows.append(row)
            print(f"{row['engine']:22s} {spec:22s} p<=0.01 {row['flagged_at_0.01']}/{row['texts']} "
                  f"[{row['rate_95'][0]:.2f}, {row['rate_95'][1]:.2f}]  median log p {row['median_log_pvalue']:7.1f}  "
                  f"AATPS {row['aatps']:.2f}  {row['seconds']:.0f} s", flush=True)
            storage.atomic_write_json(FLAGS.output, {"pair": pair.name, "temperature": FLAGS.temperature,
                                                     "max_new_tokens": FLAGS.max_new_tokens, "rows": rows})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
