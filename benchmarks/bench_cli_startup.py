r"""Wall time of the command-line tools at a user's desk: ``--help`` and a one-text detection, cold and warm.

Each measurement is a fresh process (what a user's shell starts). "Cold" runs
with an empty cache directory (``WMSPEC_CACHE_DIR``: no compiled programs, no
saved built-in tokenizer), "warm" with the directory the cold run filled.
``--repeats`` warm runs each (median, min, max).

  python -m benchmarks.bench_cli_startup
  python -m benchmarks.bench_cli_startup --repeats=5 --output=results/bench_cli_startup.json

The one text is a 96-token answer of ``wmspec-generate`` (generated once,
before the timings, into the scratch directory) scored with the built-in
tokenizer and the default detector. Writes ``--output`` (JSON) atomically.
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

from wmspec_jax import storage

flags.DEFINE_integer("repeats", 3, "warm runs per command")
flags.DEFINE_string("output", "results/bench_cli_startup.json", "JSON output")
FLAGS = flags.FLAGS

SECRET = "bench-cli-startup-secret-0123456789"


def _timed(cmd, env) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def main(argv):
    del argv
    bindir = os.path.dirname(sys.executable)
    tool = {name: os.path.join(bindir, name) for name in ("wmspec-detect", "wmspec-generate")}
    scratch = tempfile.mkdtemp(prefix="wmspec-startup-")
    try:
        key = os.path.join(scratch, "key.txt")
        with open(key, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(key, 0o600)
        base = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
        env_gen = dict(base, WMSPEC_CACHE_DIR=os.path.join(scratch, "gen-cache"))
        prompt = os.path.join(scratch, "prompt.txt")
        with open(prompt, "w") as f:
            f.write("Why is the sky blue?\n")
        out = os.path.join(scratch, "answer.jsonl")
        _timed([tool["wmspec-generate"], prompt, f"--secret_file={key}", f"--output={out}", "--max_new_tokens=96",
                "--nostop_at_eos"], env_gen)
        with open(out) as f:
            text = json.loads(f.readline())["text"]
        answer = os.path.join(scratch, "answer.txt")
        with open(answer, "w") as f:
            f.write(text)
        commands = {
            "wmspec-detect --help": [tool["wmspec-detect"], "--help"],
            "wmspec-generate --help": [tool["wmspec-generate"], "--help"],
            "wmspec-detect one text": [tool["wmspec-detect"], answer, f"--secret_file={key}", "--format=json"],
        }
        rows = {}
        for name, cmd in commands.items():
            cache = os.path.join(scratch, "cache-" + name.replace(" ", "_"))
            env = dict(base, WMSPEC_CACHE_DIR=cache)
            cold = _timed(cmd, env)
            warm = [_timed(cmd, env) for _ in range(FLAGS.repeats)]
            rows[name] = {"cold_s": cold, "warm_s": float(np.median(warm)), "warm_min_s": min(warm),
                          "warm_max_s": max(warm)}
            print(f"  {name:26s} cold {cold:6.2f} s   warm {np.median(warm):6.2f} s ({min(warm):.2f}-{max(warm):.2f})",
                  flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    storage.atomic_write_json(FLAGS.output, {"repeats": FLAGS.repeats, "cpu_count": os.cpu_count(),
                                             "commands": rows})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
