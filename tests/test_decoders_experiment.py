"""experiments/decoders.py at the toy pair's sizes: one row per (decoder, method), resumable, flags checked first."""

import json
import os
import subprocess
import sys

from wmspec_jax import keys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ["--target=toy", "--draft=toy", "--num_prompts=8", "--max_new_tokens=16", "--lengths=8,12",
         "--batch_size=8", "--decoders=inverse_transform,kgw", "--methods=basic,pseudorandom", "--demo_secret"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.decoders", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_the_comparison_writes_its_table_and_resumes(tmp_path):
    done = run(f"--output_dir={tmp_path}", *SIZES)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "decoders.json").read_text())
    assert [(r["decoder"], r["method"]) for r in doc["rows"]] == [
        ("inverse_transform", "basic"), ("inverse_transform", "pseudorandom"),
        ("kgw_g0.25_d2", "basic"), ("kgw_g0.25_d2", "pseudorandom")]
    for r in doc["rows"]:
        assert r["num_texts"] == 8 and set(r["tpr_at_1pct"]) == {"8", "12"} and r["logppl"] > 0
        assert (r["aatps"] == 1.0) == (r["method"] == "basic")
    assert (tmp_path / "decoders.png").stat().st_size > 10_000
    assert (tmp_path / "decoders.csv").read_text().count("\n") == 5
    assert doc["settings"]["key_fingerprint"] == keys.Secret(keys.DEMO_SECRET).fingerprint
    again = run(f"--output_dir={tmp_path}", *SIZES)  # everything generated: nothing compiles, same table
    assert again.returncode == 0 and "compiled" not in again.stdout + again.stderr, again.stderr[-2000:]
    assert json.loads((tmp_path / "decoders.json").read_text())["rows"] == doc["rows"]


def test_bad_flags_fail_before_any_model_loads(tmp_path):
    for flag, message in (("--decoders=nope", "unknown decoder 'nope'"),
                          ("--methods=standard", "not a watermarking method"),
                          ("--lengths=8,400", "--lengths must lie in")):
        done = run(f"--output_dir={tmp_path}", "--target=toy", "--draft=toy", "--demo_secret", flag)
        assert done.returncode != 0 and message in done.stderr and "loaded" not in done.stdout, done.stderr[-2000:]
