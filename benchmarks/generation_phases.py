r"""Where a one-text generation's time goes: each phase of what ``wmspec-generate`` does, timed in fresh
processes with the tools' persistent compilation cache.

Phases (seconds, in order): ``import_jax``; ``import_wmspec`` (the generation modules); ``load_pair``
(the built-in pair: tokenizer, mapped weights, draft); ``trace`` and ``lower`` (the generation loop
for these shapes: JAX's persistent cache holds compiled programs keyed by the lowered program, so
a process that compiles through ``jax.jit`` pays them); ``compile`` (a hit in the persistent cache:
loading the compiled loop); with ``--path=store`` (what ``wmspec-generate`` does) ``trace`` and
``lower`` are 0 and ``compile`` is getting the loop from :mod:`wmspec_jax.executable_store` (a
cold process traces, lowers, compiles and stores it; a warm one loads it); ``generate`` (the loop,
one row, 96 tokens by default, Alg. 1 with Gumbel-max and K = 3, as ``wmspec-generate``'s defaults;
``--method=basic``: the watermarked target alone, one token per step, the floor a draft has to
beat). The first process
runs with an empty cache directory ("cold"), ``--repeats`` more with the one it filled ("warm":
median, min and max per phase).

  python -m benchmarks.generation_phases
  python -m benchmarks.generation_phases --repeats=5 --output=results/generation_phases.json
  python -m benchmarks.generation_phases --method=basic --dtype=bfloat16
  python -m benchmarks.generation_phases --path=jit      # traced and lowered in every process

Writes ``--output`` (JSON) atomically: ``cold`` and ``warm`` phase tables, the loop's steps and
tokens, the load average before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

flags.DEFINE_integer("repeats", 3, "warm processes", lower_bound=1)
flags.DEFINE_integer("max_new_tokens", 96, "tokens of the generated answer", lower_bound=1)
flags.DEFINE_enum("method", "pseudorandom", ["pseudorandom", "basic"],
                  "pseudorandom: Alg. 1 with the built-in draft (wmspec-generate's default); basic: the "
                  "watermarked target alone, one token per step (the floor a draft has to beat)")
flags.DEFINE_integer("lookahead", 3, "draft tokens per step (K) of the pseudorandom method", lower_bound=1)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "the pair's weights and caches")
flags.DEFINE_enum("path", "store", ["store", "jit"],
                  "store: the loop through wmspec_jax.executable_store, as wmspec-generate (a warm process "
                  "loads it without tracing); jit: traced, lowered and looked up in JAX's persistent cache")
flags.DEFINE_string("output", "results/generation_phases.json", "JSON output")
flags.DEFINE_bool("child", False, "time the phases in this process and print them as one JSON line")
FLAGS = flags.FLAGS

SECRET = b"generation-phases-benchmark-secret"  # public: a benchmark's texts are not secret
PROMPT = "Why is the sky blue?"
PHASES = ("import_jax", "import_wmspec", "load_pair", "trace", "lower", "compile", "generate")


def _child() -> dict:
    times, last = {}, [time.perf_counter()]

    def done(phase: str) -> None:
        now = time.perf_counter()
        times[phase], last[0] = now - last[0], now

    import jax

    done("import_jax")
    from wmspec_jax import decoders, sampling, speculative
    from wmspec_jax.cli import flags as cli_flags
    from wmspec_jax.models import pairs

    cli_flags.enable_compilation_cache()
    done("import_wmspec")
    pair = pairs.load_pair(pairs.BUILTIN, pairs.BUILTIN, FLAGS.dtype)
    prompts, lengths = pairs.encode_prompts(pair, [PROMPT], "question", 256, too_long="error")
    done("load_pair")
    config = speculative.SpeculativeConfig.from_setting(
        FLAGS.method, decoders.GumbelMax(), FLAGS.lookahead if FLAGS.method == "pseudorandom" else 0,
        max_new_tokens=FLAGS.max_new_tokens, eos_id=None,
        pad_id=pair.pad_id)
    draft = (pair.draft, pair.draft_params) if config.lookahead else (None, None)
    args = speculative._loop_arguments(pair.target, pair.target_params, prompts, lengths, SECRET,
                                       sampling.text_rngs(0, [0], run="phases"), config, *draft)
    if FLAGS.path == "store":
        done("trace")
        done("lower")
        compiled = speculative._stored_program(args)
        if compiled is None:
            raise SystemExit("the built-in pair's loop has no key in the executable store")
        done("compile")
    else:
        traced = speculative._generate_jit.trace(*args)
        done("trace")
        lowered = traced.lower()
        done("lower")
        compiled = lowered.compile()
        done("compile")
    result, _ = compiled(*args[3:])
    jax.block_until_ready(result.tokens)
    done("generate")
    return {"seconds": times, "steps": int(np.asarray(result.num_steps)[0]),
            "tokens": int(np.asarray(result.lengths - result.prompt_lengths)[0])}


def _process(env: dict) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.generation_phases", "--child",
           f"--max_new_tokens={FLAGS.max_new_tokens}", f"--method={FLAGS.method}",
           f"--lookahead={FLAGS.lookahead}", f"--dtype={FLAGS.dtype}", f"--path={FLAGS.path}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"the timed process failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    if FLAGS.child:
        print(json.dumps(_child()), flush=True)
        return
    from wmspec_jax import storage

    load_before = os.getloadavg()
    scratch = tempfile.mkdtemp(prefix="wmspec-phases-")
    try:
        env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
        env["WMSPEC_CACHE_DIR"] = os.path.join(scratch, "cache")
        cold = _process(env)
        warm = [_process(env) for _ in range(FLAGS.repeats)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = {p: {"median": float(np.median([w["seconds"][p] for w in warm])),
                 "min": min(w["seconds"][p] for w in warm), "max": max(w["seconds"][p] for w in warm)}
             for p in PHASES}
    for p in PHASES:
        print(f"  {p:14s} cold {cold['seconds'][p]:6.2f} s   warm {table[p]['median']:6.2f} s "
              f"({table[p]['min']:.2f}-{table[p]['max']:.2f})")
    total = sum(table[p]["median"] for p in PHASES)
    print(f"  {'sum':14s} cold {sum(cold['seconds'].values()):6.2f} s   warm {total:6.2f} s; "
          f"{cold['tokens']} tokens in {cold['steps']} steps")
    storage.atomic_write_json(FLAGS.output, {
        "repeats": FLAGS.repeats, "path": FLAGS.path, "method": FLAGS.method, "lookahead": FLAGS.lookahead,
        "dtype": FLAGS.dtype,
        "cpu_count": os.cpu_count(), "cold": cold["seconds"], "warm": table,
        "steps": cold["steps"], "tokens": cold["tokens"], "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg())})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
