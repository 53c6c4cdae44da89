"""The benchmarks run anywhere: the accelerator check on the CPU at reduced shapes produces every part of its
JSON; the comparison benchmarks write their rows; the peer baseline runs our weights."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_accelerator_check_runs_on_the_cpu_at_reduced_shapes(tmp_path):
    env = dict(os.environ, CHECK_REDUCE="32", CHECK_REPEATS="1", CHECK_NEW_TOKENS="4", CHECK_LAYERS="1",
               CHECK_PAPER_RUNS="--pairs=llama2 --methods=plain", CHECK_PAPER_MORE_RUNS="none",
               CHECK_MULTIDRAFT_RUNS="--pairs=llama2 --methods=pseudorandom --lookaheads=2 --draft_trees=2x1 "
                                     "--hf_baseline=off",
               CHECK_DECODE_FLAGS="--capacities=64 --filled=16 --steps=2",
               CHECK_INVARIANCE_FLAGS="--num_prompts=1 --dtypes=float32 --decoders=gumbel",
               CHECK_TESTS="float64_reference and 64 and 5-None", CHECK_TIMEOUT="300")
    done = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "accelerator_check.sh"), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "accelerator_check.json").read_text())
    assert set(report["parts"]) == {"device", "paper_scale", "decode_step", "memory_7b", "batch_invariance",
                                    "tests", "multidraft"}
    assert all(p["exit_status"] == 0 for p in report["parts"].values()), report["parts"]
    assert report["device"]["backend"] == "cpu"
    labels = {row["label"] for row in report["paper_scale"]["rows"]}
    assert labels == {"llama2/plain/K0/gumbel/b1"}
    (tree,) = report["multidraft"]["rows"]
    assert tree["draft_shape"] == "2x1" and 1 <= tree["tokens_per_step"] <= 3  # K + 1 at most
    assert all(row["step_over_floor"] > 0 and row["compile_s"] > 0 for row in report["paper_scale"]["rows"])
    assert {"ours@64", "minimal@64", "rolled@64"} <= set(report["decode_step"]["ms_per_step"])
    assert report["memory_7b"]["memory_7b"]["llama2-7b"][0]["params"] > 6.7e9
    assert report["batch_invariance"]["settings"][0]["rows"] == 1
    assert report["tests"] and all(t["outcome"] == "passed" for t in report["tests"])


def test_accelerator_check_past_its_deadline_records_every_part_as_skipped(tmp_path):
    env = dict(os.environ, CHECK_DEADLINE="1")
    done = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "accelerator_check.sh"), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "accelerator_check.json").read_text())
    assert set(report["parts"]) == {"device", "paper_scale", "decode_step", "tests", "batch_invariance",
                                    "memory_7b", "multidraft", "paper_scale_more"}
    assert all(p["skipped"] and p["exit_status"] is None for p in report["parts"].values())
    assert report["paper_scale"] is None and "parts failed or skipped" in done.stdout


def test_the_decoder_comparison_writes_one_row_per_decoder_and_method(tmp_path):
    out = tmp_path / "decoders.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.compare_decoders", "--num_texts=100", "--max_new_tokens=8",
                           "--decoders=inverse_transform", "--methods=basic,pseudorandom",
                           "--draft_target=gumbel:inverse_transform", f"--output={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["draft_decoder"], r["decoder"], r["method"]) for r in rows] == [
        (None, "inverse_transform", "basic"), (None, "inverse_transform", "pseudorandom"),
        ("gumbel", "inverse_transform", "pseudorandom")]  # a draft decoder only where the draft is watermarked
    assert all(set(r["tpr_at_1pct"]) == {"ars-tau", "ars-prior", "single", "oracle"} for r in rows)
    assert rows[0]["tokens_per_step"] == 1.0 and rows[1]["tokens_per_step"] > 1.0


def test_the_multidraft_comparison_writes_one_row_per_draft_shape(tmp_path):
    out = tmp_path / "multidraft.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.compare_multidraft", "--num_texts=100",
                           "--max_new_tokens=3", "--draft_trees=2d", f"--output={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["decoder"], r["draft_shape"], r["siblings"], r["settings"]) for r in rows] == [
        (d, "2d", 2, {"num_drafts": 2, "distinct_drafts": True}) for d in ("Gumbel-max", "SynthID(m=8)")]
    assert all(0 <= x <= 1 for r in rows for x in [*r["tpr"].values(), r["fpr_searched"], r.get("tpr_oracle", 0)])
    assert all(set(r["tpr"]) == set(r["median_log10_p"]) == {"records", "sibling0", "searched", "searched_equal"}
               for r in rows)
    assert "tpr_oracle" in rows[0] and "tpr_oracle" not in rows[1]  # the Oracle is Gumbel-max's


def test_the_cli_startup_benchmark_reports_help_and_a_small_jsonl_file(tmp_path):
    out = tmp_path / "startup.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_cli_startup", "--parts=help,jsonl", "--repeats=1",
                           "--jsonl_mb=0.05", f"--output={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["commands"]) == {"wmspec-detect --help", "wmspec-generate --help"}
    for row in report["commands"].values():
        assert 0 < row["warm_min_s"] <= row["warm_s"] <= row["warm_max_s"] and row["cold_s"] > 0
        assert row["cold_max_rss_mb"] > 0 and row["warm_max_rss_mb"] > 0
    jsonl = report["jsonl"]
    assert 0.05 <= jsonl["megabytes"] < 0.1 and jsonl["lines"] > 1 and jsonl["cache"] == "cold"
    assert jsonl["median_wall_s"] > 0 and jsonl["median_max_rss_mb"] > 0
    assert report["parts"] == ["help", "jsonl"] and len(report["load_average_before"]) == 3


def test_the_transformers_baseline_runs_our_weights():
    # vs_peers times transformers' generate on the built-in target's weights copied into its Llama:
    # a wrong copy (a transposed matrix, a missed tie) would time another model.
    import jax
    import numpy as np
    import torch

    from benchmarks import hf_baseline
    from wmspec_jax.models import transformer
    from wmspec_jax.models.config import TransformerConfig

    for tied in (True, False):
        config = TransformerConfig(family="llama", vocab_size=40, hidden_size=16, intermediate_size=24, num_layers=2,
                                   num_heads=4, num_kv_heads=2, head_dim=4, rope_theta=10000.0,
                                   rms_norm_eps=1e-5, tie_word_embeddings=tied)
        params = transformer.init_params(config, jax.random.key(0), scale=0.3)
        model = hf_baseline.torch_model(config, "float32", "cpu")
        hf_baseline.load_weights(model, config, params)
        ids = np.array([[3, 17, 5, 29, 11, 2]])
        with torch.no_grad():
            theirs = model(torch.as_tensor(ids)).logits.numpy()
        ours, _ = transformer.forward(config, params, ids, np.arange(6)[None], _cache(config), np.array([6]))
        assert np.std(theirs) > 0.3
        np.testing.assert_allclose(np.asarray(ours), theirs, atol=1e-4, rtol=0)


def _cache(config):
    from wmspec_jax.models import cache

    return cache.init_cache(config, 1, 8)


def test_the_pass_profile_reports_every_layout_against_the_floor(tmp_path):
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.profile_passes", "--tokens=1,2", "--repeats=1",
                           "--profile_repeats=1", "--top=3", "--stream_mib=16", "--filled=8", "--capacity=32",
                           f"--output={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {(r["layout"], r["tokens"]): r for r in report["rows"]}
    layouts = ("in_out", "out_in_xla", "out_in")
    assert set(rows) == {(layout, t) for layout in layouts for t in (1, 2)}
    assert rows["in_out", 1]["over_decode_step"] == 1.0 and rows["out_in", 2]["over_floor"] > 0
    assert all(r["max_logit_difference_vs_first_layout"] < 1e-3 for r in rows.values())
    assert report["weight_bytes"] > 5e8 and report["floor_ms"] > 0
    assert set(report["profiles"]) == {f"{layout} T={t}" for layout in layouts for t in (1, 2)}
    assert all(p["top_ops"] and p["total_ms"] > 0 for p in report["profiles"].values())


def test_the_products_stream_is_reported_against_a_plain_read(tmp_path):
    out = tmp_path / "stream.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.stream_products", "--rows=1,3", "--layers=2",
                           "--hidden=64", "--kv_width=16", "--intermediate=96", "--repeats=2", f"--output={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["rows"] for r in report["rows"]] == [1, 3]
    assert report["bytes"] == 2 * 4 * (64 * 64 * 2 + 16 * 64 * 2 + 96 * 64 * 3)
    assert all(r["over_sum"] > 0 and r["ms_min"] <= r["ms_median"] <= r["ms_max"] for r in report["rows"])


def test_an_engines_detector_is_reported_on_the_texts_generated_with_its_watermark(tmp_path):
    out = tmp_path / "engine.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.engine_generation", "--engines=vllm",
                           "--methods=plain,pseudorandom:2", "--texts=2", "--max_new_tokens=12", f"--output={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["engine"], r["method"], r["lookahead"]) for r in rows] == [("vllm/gumbel", "plain", 0),
                                                                         ("vllm/gumbel", "pseudorandom", 2)]
    assert all(r["texts"] == 2 and r["rate_95"][0] <= r["rate"] <= r["rate_95"][1] for r in rows)
    assert rows[0]["aatps"] == 1.0 and rows[1]["aatps"] >= 1.0 and rows[1]["median_scored"] > 0
