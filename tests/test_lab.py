"""Experiment machinery on the toy pair: runs, summaries, the scripts' outputs, resume, validation,
per-(run, text) keys, no secret in any output, and a run killed with SIGKILL."""

import csv
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from wmspec_jax import detect, keys, lab, sampling, sources, speculative, storage, text_record, toy
from wmspec_jax.lab import detection_rows, evaluation, runs
from wmspec_jax.models import pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "test-secret-that-must-not-leak"
SMALL = lab.Settings(
    target="toy", draft="toy", num_prompts=6, num_detection_texts=12, num_detection_train=5, max_new_tokens=20,
    batch_size=4, detection_batch_size=6,
    lookaheads=(2,), detect_lookahead=2, synthid_layers=4, tpr_lengths=(4, 8, 16), num_resamples=50,
    max_prompt_tokens=128, secret=SECRET)  # K = 2 everywhere: the scripts' tests below reuse its compiled programs


def leaked(data: bytes, secret: str, words) -> list:
    """What of the secret or its derived stream key words occurs in ``data`` (text or binary): the
    secret's bytes, a word pair's little-endian bytes, or a word as a whole decimal / 8-digit hex number."""
    found = [secret] if secret.encode() in data else []
    text = data.decode("latin-1")
    numbers = set(re.findall(r"(?<![0-9.])[0-9]+(?![0-9])", text))
    hexes = {h.lower() for h in re.findall(r"(?<![0-9a-zA-Z])[0-9a-fA-F]{8}(?![0-9a-zA-Z])", text)}
    for w in np.asarray(words, np.uint32).reshape(-1, 2):
        if w.astype("<u4").tobytes() in data:
            found.append(f"bytes of {w.tolist()}")
        found += [f"word {v}" for v in w.tolist() if str(v) in numbers or f"{v:08x}" in hexes]
    return found


@pytest.fixture(scope="module")
def toy_pair():
    return pairs.load_pair("toy", "toy")


@pytest.fixture(scope="module")
def prompts(toy_pair):
    texts = ["What is a watermark?", "Why is the sky blue?", "Tell me a joke.", "How do bees fly?",
             "Where is Paris?", "Who wrote Hamlet?", "What is speculative sampling?"]
    return pairs.encode_prompts(toy_pair, texts, "question", 32)


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
        runs.RunSpec("basic", "aar", 0, 0.5)
    assert runs.RunSpec("pseudorandom", "kgw", 3, 0.7).name == "pseudorandom-kgw_g0.25_d2-K3-T0.7"
    assert runs.RunSpec("basic", "gamma_reweight", 0, 0.7).watermark_decoder.alpha == 0.5
    # multi-draft runs: the one-chain name is unchanged, a shape is named and validated (a tree's depth is K)
    tree = runs.RunSpec("pseudorandom", "gumbel", 3, 0.7, drafts="3x2x1d")
    assert tree.name == "pseudorandom-gumbel-K3-T0.7-D3x2x1d" and tree.siblings == 3
    assert tree.config(8).draft_tree == (3, 2, 1) and tree.config(8).distinct_drafts
    assert runs.RunSpec("standard", "gumbel", 2, 0.7, drafts="4").config(8).draft_tree == (4, 1)
    with pytest.raises(ValueError, match="depth|lookahead"):
        runs.RunSpec("pseudorandom", "gumbel", 2, 0.7, drafts="3x2x1")
    with pytest.raises(ValueError, match="draft_trees"):
        lab.Settings(target="toy", draft="toy", lookaheads=(2,), detect_lookahead=2, draft_trees=("3x2x1",))
    with pytest.raises(ValueError, match="draft_trees"):
        lab.Settings(target="toy", draft="toy", draft_trees=("1",))
    assert lab.Settings(target="toy", draft="toy", lookaheads=(2, 3), draft_trees=["3", "2x2x1d"]).shapes_at(2) == ["3"]


def test_the_tool_and_the_experiments_build_one_config_for_one_setting():
    """wmspec-generate's flags and RunSpec go through SpeculativeConfig.from_setting: the same setting gives
    equal configs, whatever the draft shape."""
    from absl import flags

    from wmspec_jax.cli import generate as cli_generate

    for drafts, shape_flags in [("1", []), ("3", ["--num_drafts=3"]), ("3x2x1d", ["--draft_tree=3, 2,1",
                                                                                 "--distinct_drafts"])]:
        fv = flags.FlagValues()
        cli_generate.define_flags(fv)
        fv(["wmspec-generate", "--method=pseudorandom", "--lookahead=3", "--temperature=0.7", "--max_new_tokens=8",
            "--nostop_at_eos"] + shape_flags)
        pair = type("Pair", (), {"eos_id": None, "pad_id": 0})()
        spec = runs.RunSpec("pseudorandom", "gumbel", 3, 0.7, drafts=drafts)
        assert cli_generate._config(fv, pair) == spec.config(8), drafts
    with pytest.raises(ValueError, match="draft shape"):
        speculative.SpeculativeConfig.from_setting("pseudorandom", spec.watermark_decoder, 3, drafts="3y")


def test_runs_resume_and_do_not_depend_on_the_batch(tmp_path, toy_pair, prompts):
    toks, lens = prompts
    run = runs.RunSpec("pseudorandom", "gumbel", 3, 0.7)
    kw = dict(secret=SECRET, seed=1, max_new_tokens=12)
    part = storage.JsonlStore(tmp_path / "a.jsonl")
    runs.generate_run(run, toy_pair, toks[:3], lens[:3], part, batch_size=2, **kw)  # "interrupted"
    size = os.path.getsize(tmp_path / "a.jsonl")
    resumed = runs.generate_run(run, toy_pair, toks, lens, storage.JsonlStore(tmp_path / "a.jsonl"),
                                batch_size=2, **kw)
    fresh = runs.generate_run(run, toy_pair, toks, lens, storage.JsonlStore(tmp_path / "b.jsonl"),
                              batch_size=5, **kw)
    assert os.path.getsize(tmp_path / "a.jsonl") > size
    assert [r["index"] for r in resumed] == list(range(len(lens)))
    for a, b in zip(resumed, fresh):
        assert a["tokens"] == b["tokens"] and a["source"] == b["source"] and a["num_steps"] == b["num_steps"]
        assert a["logppl"] == pytest.approx(b["logppl"], rel=1e-6)
        assert a["watermarked_tokens"] == b["watermarked_tokens"] > 0
    plain = runs.generate_run(runs.RunSpec("plain", "gumbel", 0, 0.7), toy_pair, toks[:2], lens[:2],
                              storage.JsonlStore(tmp_path / "c.jsonl"), batch_size=2, **kw)
    assert [r["watermarked_tokens"] for r in plain] == [0, 0]  # saved records say when nothing is watermarked
    again = runs.generate_run(run, toy_pair, toks, lens, storage.JsonlStore(tmp_path / "a.jsonl"),
                              batch_size=2, **kw)
    assert again == resumed  # nothing left to generate
    assert not any(SECRET in line for line in open(tmp_path / "a.jsonl"))


def test_each_run_gets_its_own_keys_so_table_rows_are_independent_draws(tmp_path, toy_pair, prompts):
    """Alg. 1 is deterministic given key and context: with one key per text shared by every run, the
    K = 2 and K = 3 rows of Tables 1-2 were largely the same texts (measured: 43-81 % identical)."""
    toks, lens = prompts
    idx = list(range(len(lens)))
    spec = {k: runs.RunSpec("pseudorandom", "gumbel", k, 0.7) for k in (2, 3)}

    def generate(k, key_run):
        out = speculative.generate(toy_pair.target, toy_pair.target_params, toks, lens,
                                   keys.text_keys(SECRET, idx, run=key_run), sampling.text_rngs(1, idx, run=spec[k].name),
                                   spec[k].config(16, pad_id=toy_pair.pad_id),
                                   draft=toy_pair.draft, draft_params=toy_pair.draft_params)
        return [out.generated(i) for i in idx]

    def agreement(a, b):
        return float(np.mean([np.mean(x == y) for x, y in zip(a, b)]))

    own2, own3 = generate(2, spec[2].name), generate(3, spec[3].name)
    shared = generate(3, spec[2].name)  # the old scheme: K = 3 keyed like K = 2
    print(f"\nAlg. 1 K=2 vs K=3 token agreement: per-run keys {agreement(own2, own3):.2f}, "
          f"shared keys {agreement(own2, shared):.2f}")
    assert agreement(own2, shared) > 0.4 and agreement(own2, own3) < 0.15
    # and generate_run uses exactly these per-(run, text) keys
    store = storage.JsonlStore(tmp_path / "g.jsonl")
    recs = runs.generate_run(spec[3], toy_pair, toks, lens, store, secret=SECRET, seed=1, max_new_tokens=16,
                             batch_size=7)
    assert all(r["tokens"] == t.tolist() for r, t in zip(recs, own3))


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
    texts = [text_record.GeneratedText(index=i, prompt_length=3, tokens=(0,) * (10 + i), source=(2,) * (10 + i),
                                       num_steps=10, logppl=2.0, watermarked_tokens=10, stopped="length")
             for i in range(6)]  # AATPS 1.0, 1.1, ..., 1.5
    recs = [text_record.generation_line(t, "x", batch=t.index // 2, batch_seconds=1.0 + (t.index // 2),
                                        batch_tokens=100, batch_rows=2) for t in texts]
    row = evaluation.speculative_row("x", recs)
    assert row["batches"] == 3 and row["ptt_ms"] == pytest.approx(20.0)
    assert row["aatps"] == pytest.approx(1.25) and row["aatps_ci"] > 0 and row["logppl_ci"] == 0
    with pytest.raises(ValueError, match="no records"):
        evaluation.speculative_row("x", [])


@pytest.fixture(scope="module")
def pipeline_outputs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pipeline"))
    session = lab.Session(SMALL, out)
    return out, session, lab.run_speculative(session), lab.run_detection(session)


def test_the_speed_runs_are_generated_in_turns(pipeline_outputs):
    # one batch of every run, then the next batch of every run: a load change during the table
    # weighs on every run's PTT alike (lab.generate_in_turns)
    out, *_ = pipeline_outputs
    speed = {r.name for r in lab.speed_runs(SMALL)}
    with open(os.path.join(out, "generations.jsonl"), encoding="utf-8") as f:
        order = [json.loads(line)["run"] for line in f if line.strip()]
    order = [r for r in order if r in speed][:SMALL.num_prompts * len(speed)]  # detection may add more later
    first_batch = SMALL.batch_size * len(speed)
    assert set(order[:first_batch]) == speed and all(order.count(r) == SMALL.num_prompts for r in speed)
    assert all(order[i] != order[i + SMALL.batch_size] for i in range(first_batch - SMALL.batch_size))


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
    # the headline checks hold on the toy pair (Thm 4.1: Alg. 1 keeps standard speculative sampling's
    # acceptance; every method samples the target's distribution)
    checks = spec["checks"]
    assert set(checks["aatps_matches_standard"]) == {f"{d}-K{k}" for d in ("gumbel", "synthid") for k in SMALL.lookaheads}
    assert all(checks["aatps_matches_standard"].values()), checks["aatps_matches_standard"]
    assert len(checks["logppl_agrees"]) == len(rows) and all(checks["logppl_agrees"].values()), checks
    # speculation accepts drafts (AATPS > 1); the non-speculative rows take one token per step
    assert all((r["aatps"] > 1.1) if r["lookahead"] else (r["aatps"] == 1.0) for r in rows)
    assert os.path.getsize(os.path.join(out, "aatps.png")) > 10_000


def test_detection_outputs_are_complete(pipeline_outputs):
    out, _, _, det = pipeline_outputs
    with open(os.path.join(out, "detection.csv")) as f:
        table = list(csv.DictReader(f))
    for dec, names in (("gumbel", {"Ars-tau", "Ars-Prior", "Oracle"}), ("synthid", {"Bayes-Prior", "Bayes-MLP", "Oracle"})):
        res = det[dec]
        assert names <= set(res["tpr"]) and res["lengths"] == list(SMALL.tpr_lengths)
        assert res["test_texts"] == SMALL.num_detection_texts - SMALL.num_detection_train
        for name, curve in res["tpr"].items():
            assert len(curve) == len(res["lengths"])
            assert all(0 <= e["lower"] <= e["value"] <= e["upper"] <= 1 for e in curve if np.isfinite(e["value"]))
            rows = [t for t in table if t["decoder"] == dec and t["detector"] == name and t["drafts"] == "1"]
            assert [float(t["tpr"]) for t in rows] == pytest.approx([e["value"] for e in curve], nan_ok=True)
            assert 0 <= res["roc"][name]["auc"] <= 1
    # FPR on both sets of negatives: the built-in ELI5 stand-in has human answers
    assert det["synthid"]["negatives"] == "human" and det["synthid"]["test_human_negatives"] > 0
    # fewer than 1/alpha human texts: the model negatives are pooled with them to set the threshold
    syn = det["synthid"]
    assert syn["test_human_negatives"] < evaluation.MIN_THRESHOLD_NEGATIVES
    for used, total in zip(syn["threshold_negatives_per_length"], syn["negatives_per_length"]):
        assert used["model"] == SMALL.num_detection_texts - SMALL.num_detection_train and sum(used.values()) == total
    assert "pooled with the model negatives" in lab.detection_markdown(det)
    for dec in ("gumbel", "synthid"):
        assert set(det[dec]["fpr"]) == {"model", "human"}
        for rates in det[dec]["fpr"].values():
            assert all(0 <= r["flagged"] <= r["negatives"] for r in rates.values())
    assert "FPR on human" in lab.detection_markdown(det)
    assert {t["drafts"] for t in table} == {"1"} and "multi_draft" not in det["gumbel"]
    for name in ("tpr_vs_length.png", "roc.png"):
        assert os.path.getsize(os.path.join(out, name)) > 10_000
    # the model-assisted row: calibrated, at every length, FPR on both sets of negatives
    for dec in ("gumbel", "synthid"):
        row = det[dec]["model_assisted"]
        assert row["lengths"] == det[dec]["lengths"] and len(row["tpr"]) == len(row["lengths"])
        assert all(0 <= e["lower"] <= e["value"] <= e["upper"] <= 1 for e in row["tpr"])
        assert set(row["fpr"]) == {"model", "human"} and row["fpr_length"] == det[dec]["roc_length"]
        assert row["fpr"]["model"]["negatives"] == SMALL.num_detection_texts - SMALL.num_detection_train
        csv_rows = [t for t in table if t["decoder"] == dec and t["detector"] == "model-assisted"]
        assert [float(t["tpr"]) for t in csv_rows] == pytest.approx([e["value"] for e in row["tpr"]])
    assert "model-assisted (the pair's probabilities" in lab.detection_markdown(det)
    # the fitted detectors are saved, key-free, with the experiment's key fingerprint
    saved = sorted(os.listdir(os.path.join(out, "detectors")))
    assert saved == sorted(["gumbel-ars-tau.npz", "gumbel-ars-prior.npz", "gumbel-soft.npz", "synthid-bayes-prior.npz",
                            "synthid-bayes-mlp.npz", "synthid-oracle.npz"])
    for name in saved:
        d = detect.load_detector(os.path.join(out, "detectors", name))
        assert d.provenance.key_fingerprint == keys.Secret(SECRET).fingerprint


def test_multi_draft_shapes_run_next_to_one_chain(tmp_path):
    """--draft_trees: the speed table gets standard and Alg. 1 rows per shape (a tree only at its depth) and
    the Alg. 1 check per shape; the detection experiment scores multi-draft Alg. 1 texts with one chain's
    detectors over their sibling streams (exact p-values: the FPR on the negatives is reported)."""
    # SMALL's sizes: the one-chain detection runs reuse the pipeline fixture's compiled programs
    s = dataclasses.replace(SMALL, lookaheads=(2, 3), draft_trees=("2d", "2x2x1"), tpr_lengths=(4, 8))
    names = [r.name for r in lab.speed_runs(s) if r.decoder == "gumbel"]
    assert names == ["basic-gumbel-K0-T0.5"] + [f"{m}-gumbel-K{k}-T0.5{d}" for k, shapes in
                                                ((2, ("", "-D2d")), (3, ("", "-D2d", "-D2x2x1")))
                                                for d in shapes for m in ("standard", "pseudorandom")]
    rows = [{"decoder": "gumbel", "lookahead": k, "method_id": m, "drafts": d, "run": f"{m}{k}{d}", "aatps": a,
             "aatps_ci": 0.1, "logppl": 1.0, "logppl_ci": 0.1}
            for (k, m, d, a) in ((0, "basic", "1", 1.0), (2, "standard", "1", 1.5), (2, "pseudorandom", "1", 1.52),
                                 (2, "standard", "2d", 1.7), (2, "pseudorandom", "2d", 2.0))]
    assert lab.speculative_checks(rows)["aatps_matches_standard"] == {"gumbel-K2": True, "gumbel-K2-D2d": False}
    harness = lab.Session(s, str(tmp_path))
    t = lab.detection_texts(harness, "gumbel")
    assert list(t["multi"]) == ["2d"]  # the tree's depth is 3, not --detect_lookahead
    multi = t["multi"]["2d"]
    assert multi.siblings == 2 and multi.run == "pseudorandom-gumbel-K2-T0.5-D2d"
    assert multi.candidate.max() == 1 and multi.candidate[multi.source != sources.SOURCE_DRAFT].max() == 0
    res = evaluation.evaluate("gumbel", t, lengths=s.tpr_lengths, roc_length=8, vocab_size=harness.pair.vocab_size,
                              context_width=4, num_resamples=s.num_resamples, multi_draft=t["multi"])
    md = res["multi_draft"]["2d"]
    assert md["searched"] and md["lengths"] == [4, 8] and {"Ars-tau", "Ars-Prior", "Oracle", "soft (ours)"} <= set(md["tpr"])
    assert all(r["negatives"] == SMALL.num_detection_texts - SMALL.num_detection_train for r in md["fpr_model"].values())
    block = lab.tables._multi_draft_markdown("Gumbel-max", "2d", md)
    assert "searches 2 sibling streams" in block and "FPR on model at 8" in block


def test_detection_runs_use_their_batch_size_and_plain_negatives(pipeline_outputs):
    out, _, _, det = pipeline_outputs
    with open(os.path.join(out, "generations.jsonl")) as f:
        records = [json.loads(line) for line in f]
    for dec in ("gumbel", "synthid"):
        pos, neg = lab.detection_runs(SMALL, dec)
        assert neg.method == "plain" and neg.lookahead == 0 and det[dec]["negatives_run"] == neg.name
        made_here = [r for r in records if r["run"] == neg.name or (r["run"] == pos.name and r["index"] >= SMALL.num_prompts)]
        assert len(made_here) == 2 * SMALL.num_detection_texts - SMALL.num_prompts
        assert {r["batch_rows"] for r in made_here} == {SMALL.detection_batch_size}
        # texts from the speed table (same run, same index) are reused, not regenerated
        assert {r["batch_rows"] for r in records if r["run"] == pos.name and r["index"] < SMALL.num_prompts} == {
            SMALL.batch_size}


def test_split_train_test_takes_the_lowest_indices_for_training():
    recs = [{"index": i} for i in (5, 0, 3, 1, 4, 2, 6)]
    train, test = detection_rows.split_train_test(recs, 2)
    assert [r["index"] for r in train] == [0, 1] and [r["index"] for r in test] == [2, 3, 4, 5, 6]
    assert [len(part) for part in detection_rows.split_train_test(recs)] == [3, 4]
    for n in (1, 6):
        with pytest.raises(ValueError, match="at least 2 training and 2 test"):
            detection_rows.split_train_test(recs, n)


def test_no_output_holds_the_secret_or_its_keys(pipeline_outputs):
    out, session, _, _ = pipeline_outputs
    words = np.concatenate([np.asarray(session.keys_for(run, range(SMALL.num_detection_texts)))
                            for run in lab.speed_runs(SMALL)])
    words = np.concatenate([words, np.asarray(SMALL.secret.stream_keys())[None]])
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    assert len(files) >= 12
    # the search finds what it looks for (negative control)
    assert leaked(json.dumps({"w": int(words[3, 1, 0])}).encode(), SECRET, words)
    assert leaked(b"\x00" + words[5].astype("<u4").tobytes(), SECRET, words) and leaked(SECRET.encode(), SECRET, words)
    for path in files:
        with open(path, "rb") as f:
            assert not leaked(f.read(), SECRET, words), path
    for text in (repr(SMALL), str(SMALL.public()), repr(session.keys_for(lab.speed_runs(SMALL)[0], [0]))):
        assert not leaked(text.encode(), SECRET, words)


def test_resuming_with_other_generation_settings_or_secret_is_refused(pipeline_outputs):
    out, session, _, _ = pipeline_outputs
    with pytest.raises(ValueError, match="max_new_tokens"):
        lab.Session(dataclasses.replace(SMALL, max_new_tokens=SMALL.max_new_tokens + 1), out,
                         pair=session.pair)
    with pytest.raises(ValueError, match="another secret"):
        lab.Session(dataclasses.replace(SMALL, secret="another"), out, pair=session.pair)
    # sizes and batching may change: records are per text and batch-invariant
    lab.Session(dataclasses.replace(SMALL, batch_size=2, num_prompts=3), out, pair=session.pair)


def test_text_rows_are_one_typed_batch_the_statistics_take_and_take_rows_of():
    rng = np.random.default_rng(3)
    texts = [text_record.GeneratedText(index=i, prompt_length=2 + i, tokens=tuple(rng.integers(0, 50, 6 + i).tolist()),
                                       source=(0, 1, 2, 0, 1, 2) + (0,) * i, num_steps=3, logppl=1.0,
                                       watermarked_tokens=6, stopped="length") for i in range(4)]
    prompts = rng.integers(0, 50, size=(4, 8)).astype(np.int32)
    rows = detection_rows.texts_from_records([t.record() for t in texts], prompts, keys.text_keys(SECRET, range(4)))
    assert len(rows) == 4 and rows.tokens.shape == rows.source.shape == (4, 2 + 3 + 6 + 3)
    assert list(rows.starts) == [2, 3, 4, 5] and list(rows.lengths) == [8, 10, 12, 14]
    typed = detect.gumbel_statistics(rows, rows.keys, vocab_size=50)
    fields = detect.gumbel_statistics(rows.tokens, rows.keys, lengths=rows.lengths, starts=rows.starts, vocab_size=50)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(typed[:-1], fields[:-1]))
    two = rows.take([3, 1])
    assert list(two.indices) == [3, 1] and np.array_equal(two.tokens, rows.tokens[[3, 1]])
    assert np.array_equal(np.asarray(two.keys), np.asarray(rows.keys)[[3, 1]])
    assert np.array_equal(np.asarray(detect.gumbel_statistics(two, two.keys, vocab_size=50).y_target),
                          np.asarray(typed.y_target)[[3, 1]])
    assert list(rows.take(rows.indices % 2 == 0).indices) == [0, 2]


def test_detection_texts_rebuild_generation(pipeline_outputs):
    """Statistics of the stored texts reproduce generation's acceptance uniforms (same keys, same rule)."""
    _, session, _, _ = pipeline_outputs
    run, _ = lab.detection_runs(SMALL, "gumbel")
    recs = session.records(run, SMALL.num_detection_texts)
    idx = [r["index"] for r in recs]
    texts = detection_rows.texts_from_records(recs, session.prompts, session.keys_for(run, idx))
    stats = evaluation.FAMILIES["gumbel"].statistics(texts, {"vocab_size": session.pair.vocab_size, "context_width": 4})
    assert stats.provenance.key_fingerprint == SMALL.secret.fingerprint
    cfg = run.config(SMALL.max_new_tokens, pad_id=session.pair.pad_id)
    gen = speculative.generate(session.pair.target, session.pair.target_params, session.prompts[idx],
                               session.prompt_lengths[idx], keys.text_keys(SECRET, idx, run=run.name),
                               sampling.text_rngs(SMALL.seed, idx, run=run.name), cfg,
                               draft=session.pair.draft, draft_params=session.pair.draft_params)
    wm = np.asarray(gen.watermarked)[:, : stats.mask.shape[1]]
    assert np.array_equal(np.asarray(stats.mask), wm)
    u_gen = np.asarray(gen.accept_u)[:, : stats.mask.shape[1]]
    tested = np.isfinite(u_gen) & wm
    assert tested.any() and np.array_equal(np.asarray(stats.u)[tested], u_gen[tested])


# ---------------------------------------------------------------------------
# Settings and inputs are validated before any work
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("change,match", [
    (dict(batch_size=0), "--batch_size"), (dict(max_new_tokens=0), "--max_new_tokens"),
    (dict(lookaheads=(2, 0)), "--lookaheads"), (dict(lookaheads=()), "--lookaheads"),
    (dict(gumbel_temperature=-0.5), "--gumbel_temperature"), (dict(synthid_temperature=float("nan")), "temperature"),
    (dict(top_k=-1), "--top_k"), (dict(num_detection_texts=3), "--num_detection_texts"),
    (dict(batch_size=True), "--batch_size"), (dict(synthid_mixture="tokens"), "--synthid_mixture"),
    (dict(dtype="float16"), "--dtype"), (dict(tpr_lengths=(4, -8)), "--tpr_lengths"),
    (dict(num_detection_train=1), "--num_detection_train"), (dict(num_detection_train=11), "fewer than 2 .* to test"),
    (dict(detection_batch_size=0), "--detection_batch_size"),
])
def test_bad_settings_are_refused_when_built(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(SMALL, **change)


def test_preflight_checks_inputs_before_any_model_is_loaded(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        lab.preflight(dataclasses.replace(SMALL, dataset=f"eli5:{tmp_path / 'missing.jsonl'}"))
    with pytest.raises(FileNotFoundError, match="checkpoint directory not found"):
        lab.preflight(dataclasses.replace(SMALL, target=str(tmp_path / "t"), draft=str(tmp_path / "d")))
    with pytest.raises(ValueError, match="both be 'builtin' or both 'toy'"):
        lab.preflight(dataclasses.replace(SMALL, draft="builtin"))
    with pytest.raises(ValueError, match="exceed --max_new_tokens"):
        lab.preflight(dataclasses.replace(SMALL, tpr_lengths=(8, 40)))
    lab.preflight(dataclasses.replace(SMALL, tpr_lengths=(8, 40)), parts=("speculative",))
    # a part needs only its own prompts (experiments/speculative.py --num_prompts=4 on a small dataset)
    eli5 = tmp_path / "five.jsonl"
    eli5.write_text("\n".join(json.dumps({"title": f"question {i}?"}) for i in range(5)))
    small = dataclasses.replace(SMALL, dataset=f"eli5:{eli5}", num_prompts=4)
    assert len(lab.preflight(small, parts=("speculative",))) == 5
    with pytest.raises(ValueError, match="has 5 prompts; the settings need 12 .*--num_detection_texts"):
        lab.preflight(small)


def test_a_prompt_longer_than_the_limit_is_an_error_not_a_silent_cut(tmp_path, toy_pair):
    with pytest.raises(ValueError, match="longer than max_length=8"):
        lab.Session(dataclasses.replace(SMALL, max_prompt_tokens=8), str(tmp_path), pair=toy_pair)
    # opt-in truncation drops the start of the text, never BOS / the template's end
    with pytest.warns(UserWarning, match="1 prompt"):
        ids, lens = pairs.encode_prompts(toy_pair, ["x" * 50 + "end?"], "question", 8, too_long="truncate")
    assert lens.tolist() == [8] and toy_pair.encode_prompt("xxxxend?", "question") == ids[0].tolist()


def test_script_flags_fail_before_any_work(tmp_path):
    """Bad flags, a bad dataset, a missing secret for the paper preset, a locked directory: each fails in
    seconds, before the trade-off stage or any model is loaded."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(keys.ENV_VAR, None)
    script = ["-m", "experiments.reproduce"]
    out = tmp_path / "out"
    cases = [
        (["--preset=quick", f"--dataset=eli5:{tmp_path / 'missing.jsonl'}"], "file not found"),
        (["--preset=quick", "--batch_size=0"], "--batch_size must be an int >= 1"),
        (["--preset=paper", "--target=toy", "--draft=toy"], "refuses the public demo secret"),
        (["--preset=quick", "--secret_file=" + str(tmp_path / "nope")], "cannot read the watermark secret file"),
    ]
    for args, message in cases:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, *script, f"--output_dir={out}"] + args, env=env, capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert proc.returncode != 0 and message in proc.stderr + proc.stdout, (args, proc.stderr[-2000:])
        assert not (out / "tradeoff").exists() and time.perf_counter() - t0 < 60
    with storage.DirectoryLock(out):  # another writer holds the directory
        proc = subprocess.run([sys.executable, "-m", "experiments.speculative", "--target=toy",
                               "--draft=toy", f"--output_dir={out}", "--max_prompt_tokens=128"], env=env,
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "being written by another process" in proc.stderr
    assert "speculative.py: error:" in proc.stderr and "Traceback" not in proc.stderr  # a message, not a crash


def test_speculative_script_killed_mid_run_loses_nothing(tmp_path):
    """SIGKILL a real experiments/speculative.py run while it appends records, rerun it: every record is
    there exactly once, no line is torn, the records written before the kill are unchanged, and the
    texts equal those of an uninterrupted run."""
    env = dict(os.environ, PYTHONPATH=ROOT, WMSPEC_SECRET=SECRET)
    flags_ = ["--target=toy", "--draft=toy", "--num_prompts=6", "--batch_size=2", "--max_new_tokens=8",
              "--lookaheads=2", "--synthid_layers=4", "--max_prompt_tokens=128"]
    cmd = [sys.executable, "-m", "experiments.speculative"] + flags_
    killed, fresh = tmp_path / "killed", tmp_path / "fresh"
    jsonl = killed / "generations.jsonl"
    proc = subprocess.Popen(cmd + [f"--output_dir={killed}"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if jsonl.exists() and jsonl.read_bytes().count(b"\n") >= 10:  # mid-way through 36 records
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    before = jsonl.read_bytes()
    kept = before[: before.rfind(b"\n") + 1]  # a torn tail, if any, is the only thing that may go
    assert 10 <= kept.count(b"\n") < 36
    subprocess.run(cmd + [f"--output_dir={killed}"], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run(cmd + [f"--output_dir={fresh}"], env=env, check=True, capture_output=True, timeout=300)
    after = jsonl.read_bytes()
    assert after.startswith(kept)
    lines = after.decode().splitlines()
    records = [json.loads(line) for line in lines]  # no torn line
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == 36  # nothing lost, nothing duplicated
    reference = {r["id"]: r for r in map(json.loads, (fresh / "generations.jsonl").read_text().splitlines())}
    for r in records:
        assert r["tokens"] == reference[r["id"]]["tokens"] and r["source"] == reference[r["id"]]["source"]
    table = json.loads((killed / "speculative.json").read_text())
    assert all(row["texts"] == 6 for row in table["rows"])


def test_reproduce_script_runs_and_resumes(tmp_path):
    out = tmp_path / "quick"
    # SMALL's sizes with K = 2 only: the script reuses the programs the pipeline fixture compiled
    cmd = [sys.executable, "-m", "experiments.reproduce", "--preset=quick", "--target=toy",
           "--draft=toy", f"--output_dir={out}", "--skip=tradeoff", "--num_prompts=6", "--num_detection_texts=12",
           "--max_new_tokens=20", "--batch_size=4", "--detection_batch_size=6", "--num_detection_train=5",
           "--lookaheads=2", "--detect_lookahead=2", "--synthid_layers=4",
           "--tpr_lengths=4,8,16", "--num_resamples=50", "--top_k=0", "--max_prompt_tokens=128"]
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(SECRET + "\n")
    os.chmod(secret_file, 0o600)
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(keys.ENV_VAR, None)
    first = subprocess.run(cmd + [f"--secret_file={secret_file}"], check=True, env=env, capture_output=True,
                           timeout=600)
    jsonl = (out / "generations.jsonl").read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    assert {"speculative.json", "detection.json", "summary.md", "aatps.png", "roc.png"} <= set(summary["files"])
    assert summary["settings"]["secret"] == "<not stored>"
    assert summary["settings"]["key_fingerprint"] == keys.Secret(SECRET).fingerprint
    env[keys.ENV_VAR] = SECRET  # the same secret from the environment: the same keys, so it resumes
    proc = subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=600)
    assert (out / "generations.jsonl").read_bytes() == jsonl  # resumed: nothing regenerated
    assert b"compiled" not in proc.stdout
    # no output, no saved detector and no log line holds the secret or a derived key word
    s = dataclasses.replace(SMALL, lookaheads=(2,))
    words = np.concatenate([np.asarray(keys.text_keys(SECRET, range(12), run=r.name)) for r in lab.speed_runs(s)])
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    assert any(f.endswith(".npz") for f in files)
    for path in files:
        with open(path, "rb") as f:
            assert not leaked(f.read(), SECRET, words), path
    for log in (first.stdout, first.stderr, proc.stdout, proc.stderr):
        assert not leaked(log, SECRET, words)


def test_a_zero_flag_means_the_settings_default():
    """--top_k=0, --detection_batch_size=0 and --num_detection_train=0 are "none" / "the default"."""
    from absl import flags as absl_flags

    from experiments import flags as script_flags

    fv = absl_flags.FlagValues()
    script_flags.define_flags(required_defaults=False, fv=fv)
    fv(["prog", "--detection_batch_size=0", "--num_detection_train=0", "--top_k=0", "--batch_size=3"])
    base = dataclasses.replace(SMALL, top_k=5)
    got = script_flags.settings_from_flags(base, fv=fv)
    assert (got.detection_batch_size, got.num_detection_train, got.top_k, got.batch_size) == (None, None, None, 3)
    assert got.detection_rows == 3 and got.max_new_tokens == SMALL.max_new_tokens
