"""An output never replaces what the run reads, and never a file the tool did not write.

Every file a run reads through a flag (the secret file, a saved detector, a file of a tokenizer directory)
is refused as an output by path and by device and inode, with a message naming both flags; an existing
output that is not the tool's own JSONL is refused and left byte for byte as it was; only a torn last line
of the tool's own JSONL is removed before appending, and the message says which. Every refusal happens
before a model or tokenizer loads: the calls that would get past the checks name a missing tokenizer or
checkpoint directory, so they stop at the next check instead of loading one."""

import json
import os
import types

import pytest

from tests.cli_calls import run_tool
from wmspec_jax import keys
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate
from wmspec_jax.cli import path_guards
from wmspec_jax.cli.texts import InputError

SECRET = "output-guards-secret-never-printed"
TEXT = "The sky looks blue because the air scatters short blue wavelengths of sunlight more than red ones."
NO_TOKENIZER = "--tokenizer=/nonexistent-wmspec-tokenizer"
NO_MODEL = ["--target=/nonexistent-wmspec-target", "--draft=/nonexistent-wmspec-draft"]
RECORD = {"format_version": 3, "id": "g/0", "run": "g", "index": 0, "text": TEXT}


@pytest.fixture(autouse=True)
def no_env_secret(monkeypatch):
    monkeypatch.delenv(keys.ENV_VAR, raising=False)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A directory (the working directory) with a key file K, a text, prompts and notes without a final
    newline."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "K").write_text(SECRET + "\n")
    os.chmod(tmp_path / "K", 0o600)
    (tmp_path / "a.txt").write_text(TEXT + "\n")
    (tmp_path / "p.txt").write_text("Why is the sky blue?\n")
    (tmp_path / "notes.txt").write_bytes(b"first note\nsecond note, no final newline")
    return tmp_path


def call(tool, args):
    return run_tool(tool, args, SECRET)


def refused(tool, args, *needles):
    rc, out, err = call(tool, args)
    assert rc == 2, (args, err)
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out and "tokenizer directory not found" not in err and "checkpoint" not in err, err  # refused first
    return err


def test_the_secret_file_is_never_an_output(files):
    key = (files / "K").read_bytes()
    os.link("K", "K-hard")
    os.symlink("K", "K-link")
    for output, key_flag in [("K", "K"), ("./K", "K"), ("K-hard", "K"), ("K", "K-link"), (str(files / "K"), "K")]:
        for tool, args, flag in [(cli_detect, ["a.txt", NO_TOKENIZER, f"--output={output}"], "--output"),
                                 (cli_detect, [f"--write_human_texts={output}"], "--write_human_texts"),
                                 (cli_generate, ["p.txt", *NO_MODEL, f"--output={output}"], "--output")]:
            refused(tool, [f"--secret_file={key_flag}", *args], f"{flag}={output} is the file of "
                    f"--secret_file={key_flag}, which the run reads", f"choose another {flag}")
            assert (files / "K").read_bytes() == key


def test_a_saved_detector_is_never_the_output(files):
    (files / "tau.npz").write_bytes(b"a saved detector")
    refused(cli_detect, ["a.txt", "--secret_file=K", NO_TOKENIZER, "--detector=tau.npz,auto", "--output=tau.npz"],
            "--output=tau.npz is the file of --detector=tau.npz, which the run reads")
    assert (files / "tau.npz").read_bytes() == b"a saved detector"


def test_a_file_of_the_tokenizer_directory_is_never_the_output(files):
    tok = files / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    refused(cli_detect, ["a.txt", "--secret_file=K", f"--tokenizer={tok}", f"--output={tok / 'tokenizer.json'}"],
            f"inside the directory of --tokenizer={tok}, which the run reads")
    assert (tok / "tokenizer.json").read_text() == "{}"


def test_the_lock_file_of_the_output_is_never_a_file_the_run_reads(files):
    os.rename("K", ".out.jsonl.lock")
    refused(cli_generate, ["p.txt", "--secret_file=.out.jsonl.lock", *NO_MODEL, "--output=out.jsonl"],
            "the lock file", "--secret_file=.out.jsonl.lock, which the run reads")
    assert (files / ".out.jsonl.lock").read_text() == SECRET + "\n" and not (files / "out.jsonl").exists()


def test_an_existing_file_that_is_not_the_tools_own_jsonl_is_left_alone(files):
    notes = (files / "notes.txt").read_bytes()
    mixed = files / "mixed.jsonl"
    mixed.write_text(json.dumps(RECORD) + "\nplain words after a record\n")
    results = files / "results.jsonl"
    results.write_text(json.dumps({"input": "a.txt", "verdict": "not watermarked"}) + "\n")
    for output in ["notes.txt", str(mixed), str(results)]:
        before = open(output, "rb").read()
        refused(cli_generate, ["p.txt", "--secret_file=K", *NO_MODEL, f"--output={output}"],
                f"--output={output} already exists and is not text lines of wmspec-generate")
        assert open(output, "rb").read() == before
    for output in ["notes.txt", "mixed.jsonl"]:
        refused(cli_detect, ["a.txt", "--secret_file=K", NO_TOKENIZER, f"--output={output}"],
                f"--output={output} already exists and is not result lines of wmspec-detect")
        refused(cli_detect, [f"--write_human_texts={output}"], "already exists and is not built-in human texts")
    assert (files / "notes.txt").read_bytes() == notes


def test_the_tools_own_outputs_still_pass(files):
    """A file of the tool's own lines (a torn last one included), an empty file and a new path pass."""
    gen = files / "gen.jsonl"
    gen.write_text(json.dumps(RECORD) + "\n" + '{"format_version": 3, "id": "g/1", "ru')
    results = files / "results.jsonl"
    results.write_text(json.dumps({"input": "a.txt", "verdict": "not watermarked"}) + "\n")
    (files / "empty.jsonl").write_text("")
    for output in [gen, files / "empty.jsonl", files / "new.jsonl"]:
        rc, _, err = call(cli_generate, ["p.txt", "--secret_file=K", *NO_MODEL, f"--output={output}"])
        assert rc == 2 and "checkpoint directory not found" in err, err
    for output in [results, files / "empty.jsonl"]:
        rc, _, err = call(cli_detect, ["a.txt", "--secret_file=K", NO_TOKENIZER, f"--output={output}"])
        assert rc == 2 and "tokenizer directory not found" in err, err


def _open(path):
    """``wmspec-generate``'s opening of an existing output (lock, repair, resume), its stderr, no model."""
    import io

    err = io.StringIO()
    store, lock, done = cli_generate._open_output(types.SimpleNamespace(output=str(path)), "g", err)
    lock.release()
    return store, done, err.getvalue()


def test_only_a_torn_last_line_of_the_tools_own_jsonl_is_removed_and_named(tmp_path):
    out = tmp_path / "out.jsonl"
    whole = json.dumps(RECORD) + "\n" + json.dumps({**RECORD, "id": "g/1", "index": 1}) + "\n"
    torn = '{"format_version": 3, "id": "g/2", "run": "g", "text": "cut sh'
    out.write_text(whole + torn)
    _, done, err = _open(out)
    assert sorted(done) == [0, 1] and out.read_text() == whole
    assert f"removed its last line 3 ({len(torn)} bytes, no final newline, starting " in err, err
    assert "the 2 line(s) before it are kept" in err
    only = tmp_path / "only.jsonl"  # nothing but a cut line: not shown to be the tool's own
    only.write_text(torn)
    with pytest.raises(InputError, match="no line of it is a complete JSON object"):
        _open(only)
    assert only.read_text() == torn
    damaged_first = tmp_path / "damaged-first.jsonl"  # a cut line kept from before, then the tool's lines
    damaged_first.write_text('{"id": "g/9", "ru\n' + whole + torn)
    with pytest.warns(UserWarning, match=r"skipped 1 unreadable line\(s\) \(line 1\); they stay in the file"):
        _, done, err = _open(damaged_first)
    assert sorted(done) == [0, 1] and damaged_first.read_text() == '{"id": "g/9", "ru\n' + whole
    assert "removed its last line 4 (" in err
    no_newline = tmp_path / "no-newline.jsonl"  # a complete last object without its newline is kept
    no_newline.write_text(json.dumps(RECORD) + "\n" + json.dumps({"id": "x", "run": "g", "text": "kept"}))
    _, done, err = _open(no_newline)
    assert no_newline.read_text().endswith('"text": "kept"}\n') and "removed" not in err


def test_a_line_nested_too_deeply_in_the_output_is_kept_and_reported(tmp_path):
    out = tmp_path / "out.jsonl"
    deep = '{"id": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    out.write_text(json.dumps(RECORD) + "\n" + deep)
    with pytest.warns(UserWarning, match=r"skipped 1 unreadable line\(s\) \(line 2\)"):
        _, done, _ = _open(out)
    assert sorted(done) == [0] and out.read_text().endswith(deep)


def test_files_no_flag_names_are_guarded_when_given(tmp_path):
    """A file the run reads without a flag (a record found beside an input) is refused as an output too;
    a flag the tool writes instead of reading is left to the tool."""
    beside = tmp_path / "in.jsonl.record.json"
    beside.write_text("{}")
    with pytest.raises(InputError, match="is the file of the record beside an input .*in.jsonl.record.json"):
        path_guards.check_output({}, "--output", str(beside), [], "wmspec-detect",  # {}: no flags given
                                 also_reads=[("the record beside an input", str(beside))])
    assert path_guards.tool_reads({"secret_file": types.SimpleNamespace(value=str(beside))}, [],
                                  written=("secret_file",)) == []


def test_check_own_jsonl_reads_lines_not_names(tmp_path):
    path = tmp_path / "o.txt"
    path.write_text(json.dumps({"input": "x", "verdict": "watermarked"}) + "\n\n")
    assert path_guards.check_own_jsonl("--output", str(path), "wmspec-detect") is None
    with pytest.raises(InputError, match="line 1 is not one of them"):
        path_guards.check_own_jsonl("--output", str(path), "wmspec-generate")
    path.write_bytes(b"\xef\xbb\xbfnot json\n")
    with pytest.raises(InputError, match="line 1 is not a JSON object"):
        path_guards.check_own_jsonl("--output", str(path), "human texts")
