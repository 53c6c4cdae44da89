r"""Wall time and peak memory of the command-line tools at a user's desk: ``--help``, a one-text
generation and a one-text detection (each cold and warm), and scoring a large JSONL file.

Each measurement is a fresh process (what a user's shell starts). "Cold" runs
with an empty cache directory (``WMSPEC_CACHE_DIR``: no compiled programs, no
saved built-in tokenizer, no converted weights), "warm" with the directory the
cold run filled. ``--repeats`` warm runs each (median, min, max). Peak memory
is the child's maximum resident set size (``ru_maxrss`` from ``os.wait4``).

  python -m benchmarks.bench_cli_startup
  python -m benchmarks.bench_cli_startup --repeats=5 --output=results/bench_cli_startup.json
  python -m benchmarks.bench_cli_startup --parts=help,jsonl --jsonl_mb=1   # quick

Parts (``--parts``):

* ``help``: ``wmspec-detect --help`` and ``wmspec-generate --help``.
* ``generate``: ``wmspec-generate`` of one 96-token answer (``--max_new_tokens=96
  --nostop_at_eos``, the defaults otherwise: Alg. 1, Gumbel-max, the built-in
  pair, deployment keys), each run into a new output file.
* ``detect``: ``wmspec-detect`` of that answer as a plain-text file (the
  built-in tokenizer, the default detector).
* ``jsonl``: ``wmspec-detect FILE --output=...`` of a JSONL file of about
  ``--jsonl_mb`` MB: the built-in human texts (``wmspec-detect
  --write_human_texts``) repeated with distinct ids. Run ``--jsonl_repeats``
  times with the warm cache of ``detect`` (a cold one when ``detect`` is not
  among the parts; ``cache`` says which).

Writes ``--output`` (JSON) atomically: ``commands`` (one entry per command:
``cold_s``, ``warm_s``, ``warm_min_s``, ``warm_max_s``, ``cold_max_rss_mb``,
``warm_max_rss_mb``), ``jsonl`` (file size, lines, ``wall_s`` and
``max_rss_mb`` per run) and the load average before and after.
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

PARTS = ("help", "generate", "detect", "jsonl")

flags.DEFINE_integer("repeats", 3, "warm runs per command", lower_bound=1)
flags.DEFINE_string("output", "results/bench_cli_startup.json", "JSON output")
flags.DEFINE_list("parts", list(PARTS), f"what to measure: any of {', '.join(PARTS)}")
flags.DEFINE_float("jsonl_mb", 50.0, "size of the JSONL file the jsonl part scores (MB, 10^6 bytes)",
                   lower_bound=0.0)
flags.DEFINE_integer("jsonl_repeats", 1, "runs of the jsonl part", lower_bound=1)
flags.DEFINE_integer("max_new_tokens", 96, "tokens of the generated answer", lower_bound=1)
FLAGS = flags.FLAGS

SECRET = "bench-cli-startup-secret-0123456789"
PROMPT = "Why is the sky blue?"
FALLBACK_ANSWER = ("The sky looks blue because the air scatters the short blue wavelengths of sunlight much more "
                   "than the long red ones, so blue light reaches our eyes from every direction of the sky.")


def _run(cmd, env) -> tuple[float, float]:
    """(wall seconds, peak resident memory in MB) of one fresh process running ``cmd``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode("utf-8", "replace")[-2000:]
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {tail}")
    return seconds, usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def _cold_and_warm(name: str, command, env, repeats: int) -> dict:
    """Runs ``command(i)`` (i = 0 cold, then 1..repeats warm) with one cache directory."""
    cold, cold_rss = _run(command(0), env)
    warm = [_run(command(i + 1), env) for i in range(repeats)]
    times = [w[0] for w in warm]
    row = {"cold_s": cold, "warm_s": float(np.median(times)), "warm_min_s": min(times), "warm_max_s": max(times),
           "cold_max_rss_mb": cold_rss, "warm_max_rss_mb": float(np.median([w[1] for w in warm]))}
    print(f"  {name:26s} cold {cold:6.2f} s ({cold_rss:5.0f} MB)   warm {row['warm_s']:6.2f} s "
          f"({min(times):.2f}-{max(times):.2f}; {row['warm_max_rss_mb']:5.0f} MB)", flush=True)
    return row


def write_jsonl(tool: str, path: str, megabytes: float, scratch: str, env) -> tuple[int, int]:
    """Writes ~``megabytes`` MB of JSONL (the built-in human texts, repeated with distinct ids, at
    least one line); returns (bytes, lines)."""
    human = os.path.join(scratch, "human.jsonl")
    _run([tool, f"--write_human_texts={human}"], env)
    with open(human, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    target = int(megabytes * 1e6)
    size = lines = 0
    with open(path, "w", encoding="utf-8") as f:
        while lines == 0 or size < target:
            for row in rows:
                line = json.dumps({**row, "id": f"{row['id']}#{lines}"}, ensure_ascii=False) + "\n"
                f.write(line)
                size += len(line.encode("utf-8"))
                lines += 1
                if size >= target:
                    break
    return size, lines


def main(argv):
    del argv
    parts = [p.strip() for p in FLAGS.parts if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise app.UsageError(f"--parts: unknown {unknown}; choose from {list(PARTS)}")
    bindir = os.path.dirname(sys.executable)
    tool = {name: os.path.join(bindir, name) for name in ("wmspec-detect", "wmspec-generate")}
    load_before = os.getloadavg()
    scratch = tempfile.mkdtemp(prefix="wmspec-startup-")
    rows, jsonl = {}, None
    try:
        key = os.path.join(scratch, "key.txt")
        with open(key, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(key, 0o600)
        base = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}

        def env_for(name: str) -> dict:
            return dict(base, WMSPEC_CACHE_DIR=os.path.join(scratch, "cache-" + name.replace(" ", "_")))

        if "help" in parts:
            for name in ("wmspec-detect --help", "wmspec-generate --help"):
                cmd = [tool[name.split()[0]], "--help"]
                rows[name] = _cold_and_warm(name, lambda i, cmd=cmd: cmd, env_for(name), FLAGS.repeats)
        answer_text = FALLBACK_ANSWER
        if "generate" in parts:
            prompt = os.path.join(scratch, "prompt.txt")
            with open(prompt, "w") as f:
                f.write(PROMPT + "\n")
            name = "wmspec-generate one text"

            def generate(i: int) -> list:
                return [tool["wmspec-generate"], prompt, f"--secret_file={key}",
                        f"--output={os.path.join(scratch, f'answer{i}.jsonl')}",
                        f"--max_new_tokens={FLAGS.max_new_tokens}", "--nostop_at_eos"]

            rows[name] = _cold_and_warm(name, generate, env_for(name), FLAGS.repeats)
            with open(os.path.join(scratch, "answer0.jsonl")) as f:
                answer_text = json.loads(f.readline())["text"]
        detect_env = env_for("wmspec-detect one text")
        if "detect" in parts:
            answer = os.path.join(scratch, "answer.txt")
            with open(answer, "w") as f:
                f.write(answer_text)
            name = "wmspec-detect one text"
            cmd = [tool["wmspec-detect"], answer, f"--secret_file={key}", "--format=json"]
            rows[name] = _cold_and_warm(name, lambda i: cmd, detect_env, FLAGS.repeats)
        if "jsonl" in parts:
            path = os.path.join(scratch, "texts.jsonl")
            size, lines = write_jsonl(tool["wmspec-detect"], path, FLAGS.jsonl_mb, scratch, base)
            runs = []
            for i in range(FLAGS.jsonl_repeats):
                out = os.path.join(scratch, f"scores{i}.jsonl")
                runs.append(_run([tool["wmspec-detect"], path, f"--secret_file={key}", f"--output={out}"], detect_env))
                os.remove(out)
            jsonl = {"megabytes": size / 1e6, "bytes": size, "lines": lines,
                     "cache": "warm" if "detect" in parts else "cold",
                     "wall_s": [r[0] for r in runs], "max_rss_mb": [r[1] for r in runs],
                     "median_wall_s": float(np.median([r[0] for r in runs])),
                     "median_max_rss_mb": float(np.median([r[1] for r in runs]))}
            print(f"  wmspec-detect {size / 1e6:.2f} MB JSONL ({lines} lines, {jsonl['cache']} cache): "
                  f"{jsonl['median_wall_s']:.2f} s, {jsonl['median_max_rss_mb']:.0f} MB peak", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    storage.atomic_write_json(FLAGS.output, {
        "repeats": FLAGS.repeats, "cpu_count": os.cpu_count(), "commands": rows, "jsonl": jsonl,
        "parts": parts, "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())})
    print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
