"""experiments/drafter_sensitivity.py at the toy pair's sizes: its cells, spreads and files, resumable,
flags checked before any model loads."""

import json
import os
import subprocess
import sys

import pytest

from wmspec_jax.lab import drafter_sensitivity as ds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ["--target=toy", "--drafts=a=toy,b=toy", "--sweep_draft=b", "--draft_temperatures=0.7,1.5",
         "--num_prompts=8", "--max_new_tokens=16", "--lengths=8,16", "--batch_size=8", "--decoders=gumbel",
         "--methods=pseudorandom,coupled", "--demo_secret"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.drafter_sensitivity", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_experiment_writes_its_cells_and_spreads_and_resumes(tmp_path):
    done = run(f"--output_dir={tmp_path}", *SIZES)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "drafter_sensitivity.json").read_text())
    cells = [(r["method"], r["draft"], r["draft_temperature"]) for r in doc["rows"]]
    # basic once (no draft); each method with a and b at P's temperature, then b with Q at 1.5
    # (0.7 in --draft_temperatures is P's temperature: the cell b already is)
    assert cells == [("basic", None, None), ("pseudorandom", "a", 0.7), ("coupled", "a", 0.7),
                     ("pseudorandom", "b", 0.7), ("coupled", "b", 0.7), ("pseudorandom", "b", 1.5), ("coupled", "b", 1.5)]
    names = [r["run"] for r in doc["rows"]]
    assert names[1] == "pseudorandom-gumbel-K3-T0.7@a" and names[5] == "pseudorandom-gumbel-K3-T0.7-Q1.5@b"
    for r in doc["rows"]:
        assert r["num_texts"] == 8 and set(r["tpr"]) == set(ds.DETECTORS)
        for est in r["tpr"][ds.KEY_ONLY].values():
            assert est["trials"] == 8 and est["lower"] <= est["value"] <= est["upper"]
        # acceptance from steps (a coupled text records every token as the target's draw)
        assert (r["acceptance"] == 0) == (r["method"] == "basic") and set(r["human_fpr"]) <= {"8", "16"}
    # per method, detector and length: one spread over the drafts (a, b) and one over Q's temperatures
    assert len(doc["spreads"]) == 2 * 2 * 2 * 2
    for sp in doc["spreads"]:
        assert sp["cells"] == 2 and 0 <= sp["spread"] <= 1
        assert sp["equal_tpr_pvalue"] is None or 0 <= sp["equal_tpr_pvalue"] <= 1
    assert (tmp_path / "drafter_sensitivity.png").stat().st_size > 10_000
    assert (tmp_path / "drafter_sensitivity.csv").read_text().count("\n") == 1 + 7 * 2 * 2
    again = run(f"--output_dir={tmp_path}", *SIZES)  # everything generated: nothing compiles, same table
    assert again.returncode == 0 and "compiled" not in again.stdout + again.stderr, again.stderr[-2000:]
    assert json.loads((tmp_path / "drafter_sensitivity.json").read_text())["rows"] == doc["rows"]


def test_the_spread_and_its_test_of_equal_tprs():
    def row(draft, temperature, flagged):
        est = {"value": flagged / 100, "lower": 0.0, "upper": 1.0, "flagged": flagged, "trials": 100}
        return {"decoder": "gumbel", "method": "pseudorandom", "draft": draft, "temperature": 0.7,
                "draft_temperature": temperature, "tpr": {d: {"32": est} for d in ds.DETECTORS}}

    rows = [row("v1", 0.7, 50), row("f3", 0.7, 80), row("f3", 1.5, 52)]
    out = {(s["over"], s["detector"]): s for s in ds.spreads(rows, [32], "f3")}
    drafts = out["drafts", ds.KEY_ONLY]
    assert drafts["spread"] == pytest.approx(0.30) and (drafts["lowest"], drafts["highest"]) == (
        "v1 @ Q T=0.7", "f3 @ Q T=0.7")
    assert drafts["equal_tpr_pvalue"] < 1e-4  # 50/100 against 80/100
    temps = out["draft temperatures", ds.KEY_ONLY]
    assert temps["cells"] == 2 and temps["spread"] == pytest.approx(0.28)
    same = ds.spreads([row("v1", 0.7, 50), row("f3", 0.7, 51)], [32], "f3")
    assert same[0]["equal_tpr_pvalue"] > 0.5 and len(same) == len(ds.DETECTORS)  # no sweep: one cell only


GOOD = dict(decoders=("gumbel",), methods=("pseudorandom",), drafts=(("a", "toy"),), sweep_draft="a",
            draft_temperatures=(1.5,), temperature=0.7, lookahead=3, synthid_layers=30, lengths=(8,),
            max_new_tokens=16, num_prompts=8, batch_size=8, seed=0)


@pytest.mark.parametrize("fields, message", [
    ({"drafts": (("a", "toy"), ("a", "toy"))}, "each once"),
    ({"sweep_draft": "zz"}, "is not one of --drafts"),
    ({"methods": ("basic",)}, "not a speculative watermarking method"),
    ({"decoders": ("kgw",)}, "compares gumbel and synthid"),
    ({"lengths": (8, 400)}, "--lengths must be ascending"),
    ({"draft_temperatures": (0.0,)}, "--draft_temperatures must be finite numbers > 0"),
])
def test_bad_settings_are_refused(fields, message):
    ds.SensitivitySettings(**GOOD)
    with pytest.raises(ValueError, match=message):
        ds.SensitivitySettings(**{**GOOD, **fields})


def test_bad_flags_fail_before_any_model_loads(tmp_path):
    for flag, message in (("--drafts=toy", "expected name=spec"), ("--sweep_draft=zz", "is not one of --drafts")):
        done = run(f"--output_dir={tmp_path}", "--target=toy", "--drafts=a=toy", "--sweep_draft=a", "--demo_secret",
                   "--max_new_tokens=16", "--lengths=8", flag)
        assert done.returncode != 0 and message in done.stderr and "draft settings" not in done.stdout, \
            done.stderr[-2000:]
