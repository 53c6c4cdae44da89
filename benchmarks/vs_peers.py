r"""Per-token time of our generation beside the tools people run on a CPU, on the same weights.

At batch 1, one prompt, ``--max_new_tokens`` tokens at temperature ``--temperature`` (no top-k,
no early stop), in ``--repeats`` interleaved rounds, on the built-in target
(SmolLM2-135M-Instruct) read from its GGUF file:

* ``hf_plain``, ``hf_synthid``: transformers' ``generate`` (PyTorch on the CPU, its
  ``LlamaForCausalLM`` holding our float32 weights dequantised from the GGUF, copied by
  :func:`benchmarks.hf_baseline.load_weights`; transformers' own GGUF loader would need
  ``accelerate``), plain sampling and with transformers' SynthID-Text watermark
  (``SynthIDTextWatermarkingConfig``, n-gram 5, 30 keys);
* ``llama_cpp``: llama.cpp on the GGUF file itself (its 4-bit Q4_1 blocks, through
  ``llama-cpp-python``; optional: built from its source package, ``pip install
  llama-cpp-python``; skipped with the reason when it does not import);
* ``plain``, ``basic``, ``pseudorandom``: ours (float32, the target in the CPU weight layout of
  :func:`wmspec_jax.models.pairs.load_pair`): plain sampling, the basic Gumbel-max watermark and
  Alg. 1 with the built-in draft at ``--lookahead``.

Each system runs with ``--threads`` threads (torch's ``set_num_threads``, llama.cpp's
``n_threads``; XLA:CPU sizes its pool to the machine's cores, so ``--threads`` defaults to
those). A call's time includes its prompt's prefill, the same prompt for all. The ratios are
peer / ours per token: above 1, ours is faster.

  python -m benchmarks.vs_peers
  python -m benchmarks.vs_peers --repeats=7 --max_new_tokens=48 --output=results/vs_peers.json

Writes ``--output`` (JSON) atomically and prints the table.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from absl import app, flags

flags.DEFINE_integer("max_new_tokens", 48, "tokens generated per call", lower_bound=1)
flags.DEFINE_float("temperature", 0.7, "sampling temperature of every system")
flags.DEFINE_integer("lookahead", 3, "K of Alg. 1")
flags.DEFINE_integer("repeats", 5, "interleaved rounds (median)", lower_bound=1)
flags.DEFINE_integer("threads", 0, "threads per system (0: the machine's cores)", lower_bound=0)
flags.DEFINE_list("systems", ["hf_plain", "hf_synthid", "llama_cpp", "plain", "basic", "pseudorandom"],
                  "systems to time")
flags.DEFINE_string("question", "Why do we dream?", "the prompt (through the chat template)")
flags.DEFINE_string("output", "results/vs_peers.json", "JSON output")
FLAGS = flags.FLAGS

# Benchmark-only SynthID keys (public; a deployment draws its own).
SYNTHID_KEYS = [654, 400, 836, 123, 340, 443, 597, 160, 57, 29, 590, 639, 13, 715, 468, 990, 966, 226, 324, 585,
                118, 504, 421, 521, 129, 669, 732, 225, 90, 960]


def transformers_systems(prompt_ids: list, threads: int) -> dict:
    """{name: callable generating ``--max_new_tokens`` tokens} for transformers' ``generate``."""
    import jax.numpy as jnp
    import torch
    import transformers

    from benchmarks import hf_baseline
    from wmspec_jax.models import builtin

    torch.set_num_threads(threads)
    checkpoint = builtin.load_target(jnp.float32)
    model = hf_baseline.torch_model(checkpoint.config, "float32", "cpu")
    hf_baseline.load_weights(model, checkpoint.config, checkpoint.params)
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    n = FLAGS.max_new_tokens
    common = dict(do_sample=True, temperature=FLAGS.temperature, top_k=0, top_p=1.0, max_new_tokens=n,
                  min_new_tokens=n, pad_token_id=0, attention_mask=torch.ones_like(ids))
    synthid = transformers.SynthIDTextWatermarkingConfig(ngram_len=5, keys=SYNTHID_KEYS)

    def run(**extra):
        with torch.no_grad():
            out = model.generate(ids, **common, **extra)
        return int(out.shape[1] - ids.shape[1])

    return {"hf_plain": run, "hf_synthid": lambda: run(watermarking_config=synthid)}


def llama_cpp_system(gguf_path: str, prompt_ids: list, threads: int):
    """(callable, None) for llama.cpp, or (None, why it cannot run)."""
    try:
        import llama_cpp
    except ImportError as e:
        return None, f"llama-cpp-python does not import ({e}); pip install llama-cpp-python builds it"
    llm = llama_cpp.Llama(model_path=gguf_path, n_threads=threads, n_threads_batch=threads, n_ctx=512,
                          seed=0, verbose=False)

    def run():
        llm.reset()
        count = 0
        for _ in llm.generate(prompt_ids, temp=FLAGS.temperature, top_k=0, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0, reset=True):
            count += 1
            if count == FLAGS.max_new_tokens:
                break
        return count

    return run, None


def our_systems(names: list) -> dict:
    """{name: callable} for our methods, compiled ahead of the rounds."""
    import jax

    from wmspec_jax import prf, speculative
    from wmspec_jax.models import pairs

    pair = pairs.load_pair("builtin", "builtin")
    prompts, lengths = pairs.encode_prompts(pair, [FLAGS.question], "question", 64)
    keys = prf.stream_keys(["vs-peers-0"])
    rng = jax.random.split(jax.random.key(0), 1)
    out = {}
    for name in names:
        spec = speculative.METHODS[name]
        config = speculative.SpeculativeConfig(method=name, lookahead=FLAGS.lookahead if spec.speculative else 0,
                                               max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature)
        extra = dict(draft=pair.draft, draft_params=pair.draft_params) if spec.speculative else {}
        args = (pair.target, pair.target_params, prompts, lengths, keys, rng, config)
        speculative.precompile(*args, **extra)

        def run(args=args, extra=extra):
            res = speculative.generate(*args, **extra)
            return int(np.asarray(res.lengths)[0] - np.asarray(res.prompt_lengths)[0])

        out[name] = run
    return out, [int(t) for t in np.asarray(prompts)[0, : int(lengths[0])]]


def main(argv):
    del argv
    from wmspec_jax import storage
    from wmspec_jax.models import builtin

    threads = FLAGS.threads or os.cpu_count()
    ours = [s for s in FLAGS.systems if s in ("plain", "basic", "pseudorandom")]
    systems, prompt_ids = our_systems(ours)
    skipped = {}
    gguf = builtin.gguf_path()
    if {"hf_plain", "hf_synthid"} & set(FLAGS.systems):
        hf = transformers_systems(prompt_ids, threads)
        systems.update({k: v for k, v in hf.items() if k in FLAGS.systems})
    if "llama_cpp" in FLAGS.systems:
        run, why = llama_cpp_system(gguf, prompt_ids, threads)
        if run is None:
            skipped["llama_cpp"] = why
            print(f"llama_cpp skipped: {why}", file=sys.stderr)
        else:
            systems["llama_cpp"] = run
    for run in systems.values():  # warm-up: first-call costs out of the rounds
        run()
    seconds = {name: [] for name in systems}
    tokens = {}
    for r in range(FLAGS.repeats):
        for name, run in systems.items():
            t0 = time.perf_counter()
            tokens[name] = run()
            seconds[name].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{FLAGS.repeats}", file=sys.stderr, flush=True)
    rows = {}
    for name, s in seconds.items():
        s = np.asarray(s)
        rows[name] = {"ms_per_token_median": 1e3 * float(np.median(s)) / tokens[name],
                      "ms_per_token_min": 1e3 * float(s.min()) / tokens[name],
                      "ms_per_token_max": 1e3 * float(s.max()) / tokens[name], "tokens": tokens[name]}
    pairs_of_interest = [("hf_plain", "plain"), ("hf_synthid", "pseudorandom"), ("hf_synthid", "basic"),
                         ("llama_cpp", "plain"), ("basic", "pseudorandom")]
    ratios = {f"{a}/{b}": rows[a]["ms_per_token_median"] / rows[b]["ms_per_token_median"]
              for a, b in pairs_of_interest if a in rows and b in rows}
    print(f"\nbuilt-in target, batch 1, {FLAGS.max_new_tokens} tokens, T = {FLAGS.temperature}, {threads} threads, "
          f"median of {FLAGS.repeats} interleaved rounds ({os.cpu_count()} cores)")
    print(f"{'system':14s} {'ms/token':>9s} {'(min-max)':>15s}")
    for name, row in rows.items():
        print(f"{name:14s} {row['ms_per_token_median']:9.2f} "
              f"{'(%.1f-%.1f)' % (row['ms_per_token_min'], row['ms_per_token_max']):>15s}")
    for key, value in ratios.items():
        print(f"  {key:26s} {value:6.2f}")
    for name, why in skipped.items():
        print(f"  {name}: {why}")
    storage.atomic_write_json(FLAGS.output, {
        "max_new_tokens": FLAGS.max_new_tokens, "temperature": FLAGS.temperature, "lookahead": FLAGS.lookahead,
        "threads": threads, "cpu_count": os.cpu_count(), "repeats": FLAGS.repeats, "rows": rows,
        "ratios": ratios, "skipped": skipped, "seconds": seconds})
    print(f"wrote {FLAGS.output}")
    return 0


if __name__ == "__main__":
    app.run(main)
