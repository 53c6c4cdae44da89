"""Experiment machinery on the toy pair: runs, summaries, the scripts' outputs and resume."""

import csv
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from wmspec_jax import evaluation, pairs, pipeline, results, runs, speculative, toy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "test-secret-that-must-not-leak"
SMALL = pipeline.Settings(
    target="toy", draft="toy", num_prompts=6, num_detection_texts=12, max_new_tokens=20, batch_size=4,
    lookaheads=(2, 3), synthid_layers=4, tpr_lengths=(4, 8, 16), num_resamples=50, secret=SECRET)


@pytest.fixture(scope="module")
def toy_pair():
    return pairs.load_pair("toy", "toy")


@pytest.fixture(scope="module")
def prompts(toy_pair):
    texts = ["What is a watermark?", "Why is the sky blue?", "Tell me a joke.", "How do bees fly?",
             "Where is Paris?", "Who wrote Hamlet?", "What is speculative sampling?"]
    return pairs.encode_prompts(toy_pair, texts, "question", 16)


def test_pair_flags_are_checked():
    with pytest.raises(ValueError, match="must both be 'builtin' or both 'toy'"):
        pairs.load_pair("toy", "builtin")
    with pytest.raises(ValueError, match="dtype"):
        pairs.load_pair("toy", "toy", dtype="float16")
    with pytest.raises(Exception, match="not found|missing|No such|does not exist"):
        pairs.load_pair("/nonexistent/target", "/nonexistent/draft")


def test_run_spec_names_and_validation():
    assert runs.RunSpec("pseudorandom", "synthid", 3, 0.7, 30).name == "pseudorandom-synthid30-K3-T0.7"
    with pytest.raises(ValueError, match="lookahead"):
        runs.RunSpec("basic", "gumbel", 2, 0.5)
    with pytest.raises(ValueError, match="decoder"):
        runs.RunSpec("basic", "kgw", 0, 0.5)


def test_runs_resume_and_do_not_depend_on_the_batch(tmp_path, toy_pair, prompts):
    toks, lens = prompts
    run = runs.RunSpec("pseudorandom", "gumbel", 3, 0.7)
    kw = dict(secret=SECRET, seed=1, max_new_tokens=12)
    part = results.JsonlStore(tmp_path / "a.jsonl")
    runs.generate_run(run, toy_pair, toks[:3], lens[:3], part, batch_size=2, **kw)  # "interrupted"
    size = os.path.getsize(tmp_path / "a.jsonl")
    resumed = runs.generate_run(run, toy_pair, toks, lens, results.JsonlStore(tmp_path / "a.jsonl"),
                                batch_size=2, **kw)
    fresh = runs.generate_run(run, toy_pair, toks, lens, results.JsonlStore(tmp_path / "b.jsonl"),
                              batch_size=5, **kw)
    assert os.path.getsize(tmp_path / "a.jsonl") > size
    assert [r["index"] for r in resumed] == list(range(len(lens)))
    for a, b in zip(resumed, fresh):
        assert a["tokens"] == b["tokens"] and a["source"] == b["source"] and a["num_steps"] == b["num_steps"]
        assert a["logppl"] == pytest.approx(b["logppl"], rel=1e-6)
    again = runs.generate_run(run, toy_pair, toks, lens, results.JsonlStore(tmp_path / "a.jsonl"),
                              batch_size=2, **kw)
    assert again == resumed  # nothing left to generate
    assert not any(SECRET in line for line in open(tmp_path / "a.jsonl"))


def test_log_perplexity_is_the_mean_target_nll_of_the_generated_tokens(toy_pair):
    p_tab, _ = toy.markov_pair(pairs.TOY_VOCAB, tv=pairs.TOY_TV, concentration=1.0, seed=0)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, pairs.TOY_VOCAB, size=(3, 10)).astype(np.int32)
    plen, length = np.array([2, 4, 1]), np.array([10, 7, 5])
    got = runs.log_perplexity(toy_pair.target, toy_pair.target_params, tokens, plen, length)
    for b in range(3):
        nll = [-np.log(p_tab[tokens[b, t - 1], tokens[b, t]]) for t in range(plen[b], length[b])]
        assert got[b] == pytest.approx(np.mean(nll), rel=1e-5)


def test_speculative_row_has_t_intervals():
    recs = [{"batch": i // 2, "batch_seconds": 1.0 + (i // 2), "batch_tokens": 100, "aatps": 1.0 + 0.1 * i,
             "logppl": 2.0, "tokens": [0] * 10} for i in range(6)]
    row = evaluation.speculative_row("x", recs)
    assert row["batches"] == 3 and row["ptt_ms"] == pytest.approx(20.0)
    assert row["aatps"] == pytest.approx(1.25) and row["aatps_ci"] > 0 and row["logppl_ci"] == 0
    with pytest.raises(ValueError, match="no records"):
        evaluation.speculative_row("x", [])


@pytest.fixture(scope="module")
def pipeline_outputs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pipeline"))
    session = pipeline.Session(SMALL, out)
    return out, session, pipeline.run_speculative(session), pipeline.run_detection(session)


def test_speculative_outputs_match_their_json(pipeline_outputs):
    out, _, spec, _ = pipeline_outputs
    rows = spec["rows"]
    assert len(rows) == 2 * (1 + 2 * len(SMALL.lookaheads))
    with open(os.path.join(out, "speculative.csv")) as f:
        table = list(csv.DictReader(f))
    assert [r["run"] for r in table] == [r["run"] for r in rows]
    for r, t in zip(rows, table):
        assert float(t["aatps"]) == pytest.approx(r["aatps"]) and float(t["logppl"]) == pytest.approx(r["logppl"])
        assert r["texts"] == SMALL.num_prompts
        assert 1.0 <= r["aatps"] <= r["lookahead"] + 1
    assert json.load(open(os.path.join(out, "speculative.json")))["rows"] == json.loads(json.dumps(rows))
    assert all(isinstance(v, bool) for d in spec["checks"].values() for v in d.values())
    assert os.path.getsize(os.path.join(out, "aatps.png")) > 10_000


def test_detection_outputs_are_complete(pipeline_outputs):
    out, _, _, det = pipeline_outputs
    with open(os.path.join(out, "detection.csv")) as f:
        table = list(csv.DictReader(f))
    for dec, names in (("gumbel", {"Ars-tau", "Ars-Prior", "Oracle"}), ("synthid", {"Bayes-Prior", "Bayes-MLP", "Oracle"})):
        res = det[dec]
        assert names <= set(res["tpr"]) and res["lengths"] == list(SMALL.tpr_lengths)
        assert res["test_texts"] == SMALL.num_detection_texts // 2
        for name, curve in res["tpr"].items():
            assert len(curve) == len(res["lengths"])
            assert all(0 <= e["lower"] <= e["value"] <= e["upper"] <= 1 for e in curve)
            rows = [t for t in table if t["decoder"] == dec and t["detector"] == name]
            assert [float(t["tpr"]) for t in rows] == pytest.approx([e["value"] for e in curve])
            assert 0 <= res["roc"][name]["auc"] <= 1
    for name in ("tpr_vs_length.png", "roc.png"):
        assert os.path.getsize(os.path.join(out, name)) > 10_000
    # No output holds the secret.
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            assert SECRET.encode() not in f.read(), name


def test_resuming_with_other_generation_settings_is_refused(pipeline_outputs):
    out, session, _, _ = pipeline_outputs
    with pytest.raises(ValueError, match="max_new_tokens"):
        pipeline.Session(dataclasses.replace(SMALL, max_new_tokens=SMALL.max_new_tokens + 1), out,
                         pair=session.pair)
    # sizes and batching may change: records are per text and batch-invariant
    pipeline.Session(dataclasses.replace(SMALL, batch_size=2, num_prompts=3), out, pair=session.pair)


def test_detection_texts_rebuild_generation(pipeline_outputs):
    """Statistics of the stored texts reproduce generation's acceptance uniforms (same keys, same rule)."""
    _, session, _, _ = pipeline_outputs
    run, _ = pipeline.detection_runs(SMALL, "gumbel")
    recs = session.records(run, SMALL.num_detection_texts)
    texts = evaluation.texts_from_records(recs, session.prompts, SECRET)
    stats = evaluation._gumbel_stats(texts, session.pair.vocab_size, 4)
    cfg = run.config(SMALL.max_new_tokens, pad_id=session.pair.pad_id)
    idx = texts["indices"]
    gen = speculative.generate(session.pair.target, session.pair.target_params, session.prompts[idx],
                               session.prompt_lengths[idx], runs.text_keys(SECRET, idx),
                               runs.text_rngs(SMALL.seed, run.name, idx), cfg,
                               draft=session.pair.draft, draft_params=session.pair.draft_params)
    wm = np.asarray(gen.watermarked)[:, : stats.mask.shape[1]]
    assert np.array_equal(np.asarray(stats.mask), wm)
    u_gen = np.asarray(gen.accept_u)[:, : stats.mask.shape[1]]
    tested = np.isfinite(u_gen) & wm
    assert tested.any() and np.array_equal(np.asarray(stats.u)[tested], u_gen[tested])


def test_reproduce_script_runs_and_resumes(tmp_path):
    out = tmp_path / "quick"
    cmd = [sys.executable, os.path.join(ROOT, "experiments", "reproduce.py"), "--preset=quick", "--target=toy",
           "--draft=toy", f"--output_dir={out}", "--skip=tradeoff", "--num_prompts=4", "--num_detection_texts=8",
           "--max_new_tokens=12", "--batch_size=4", "--lookaheads=2", "--synthid_layers=4",
           "--tpr_lengths=4,8", "--num_resamples=20", "--top_k=0"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=600)
    jsonl = (out / "generations.jsonl").read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    assert {"speculative.json", "detection.json", "summary.md", "aatps.png", "roc.png"} <= set(summary["files"])
    assert summary["settings"]["secret"] == "<not stored>"
    proc = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True, timeout=600)
    assert (out / "generations.jsonl").read_bytes() == jsonl  # resumed: nothing regenerated
    assert "compiled" not in proc.stdout
