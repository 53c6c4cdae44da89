"""The deployment rule of wmspec-detect: a verdict comes from the key holder's deployment (the secret and a
record signed with it), never from a line's own fields or from flags that contradict the record.

Shopping: 400 human paragraphs, each submitted under every claim a line or a flag can make (101 issued
indices, context widths 1..64, seven decoders, a grid of draft fractions), must stay within α's binomial
band when each text keeps its best verdict over all its submissions: at α = 0.01 at most the 1 − 1e-6
upper quantile of Binomial(n, 0.01) texts flagged (a false failure has probability below 1e-6).
Believing the claims flagged 256 (indices), 171 (context widths) and 17 (decoders) of 400 texts. The
cheap-to-catch claims are made for fewer texts: the 101 indices for the first 100 (10,100 lines instead of
40,400), where believing them flags 70 against a band of 8 (Binomial(100, 0.01) exceeds 8 with
probability 8.4e-7; the test asserts that power from the lines' uncorrected p-values), and the 64 context
widths for the first 200, against a band of 12 (exceeded with probability 1.6e-7). The decoders, whose believed claims barely leave the band, keep all 400."""

import json
import math
import os

import numpy as np
import pytest
from scipy import stats as sps

from tests.cli_calls import lines, run_tool, secret_file_flag
from wmspec_jax import deployment_record, keys
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate
from wmspec_jax.lab import corpora

SECRET = "deployment-test-secret-never-printed"
ALPHA = 0.01
NUM_HUMAN = 400
BAND = int(sps.binom.isf(1e-6, NUM_HUMAN, ALPHA))
"""The most texts of NUM_HUMAN flagged at ALPHA under H0, except with probability below 1e-6."""
NUM_CLAIMING = 100
CLAIM_BAND = int(sps.binom.isf(1e-6, NUM_CLAIMING, ALPHA))  # 8
NUM_DECLARING_WIDTHS = 200  # band 12 (module doc)
SETTINGS = {"decoder": "gumbel", "draft_decoder": None, "synthid_layers": None, "context_width": 4,
            "key_sequence": None, "draft_tree": None, "kgw_gamma": None, "method": "pseudorandom", "lookahead": 3}
DECODERS = ("gumbel", "synthid", "synthid_limit", "inverse_transform", "dipmark", "gamma_reweight", "kgw")


def detect(args, stdin=None):
    return run_tool(cli_detect, args, SECRET, stdin)


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_record(path, derivation=keys.DIRECT, issued=(), secret=SECRET, settings=None, draft_fraction=0.3) -> str:
    body = deployment_record.record_body(keys.Secret(secret), settings or SETTINGS, key_derivation=derivation,
                                         draft_fraction=draft_fraction,
                                         texts=[(run, i, [i]) for run, i in issued])
    deployment_record.write(str(path), body)
    return str(path)


def best_flagged(results, num_texts: int) -> int:
    """Texts whose best p-value over all their submissions is <= ALPHA (error lines never flag)."""
    best = np.ones(num_texts)
    for k, r in enumerate(results):
        if r["pvalue"] is not None:
            best[k % num_texts] = min(best[k % num_texts], r["pvalue"])
    return int((best <= ALPHA).sum())


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return secret_file_flag(tmp_path_factory.mktemp("key"), SECRET)


@pytest.fixture(scope="module")
def human():
    return list(corpora.prose(NUM_HUMAN, seed=3).texts)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    return {"direct": write_record(d / "direct.json"),
            "per_text": write_record(d / "per_text.json", keys.KEY_DERIVATION, [("shop", i) for i in range(101)])}


def test_claimed_indices_do_not_buy_a_verdict(tmp_path, key, human, records):
    """Each of 100 human texts under each of the 101 indices the record issued: every claim gets the same
    p-value, the best of the 101 texts' keys times 101, and the best claim per text stays in the band,
    which believing the claims (each text's best uncorrected p-value) leaves (module doc)."""
    rows = [{"text": t, "key_derivation": keys.KEY_DERIVATION, "run": "shop", "index": i}
            for i in range(101) for t in human[:NUM_CLAIMING]]
    rc, stdout, err = detect([write_jsonl(tmp_path / "claims.jsonl", rows), key, "--format=json",
                              f"--deployment={records['per_text']}"])
    assert rc == 0, err
    res = lines(stdout)
    assert len(res) == len(rows)
    p = np.array([r["pvalue"] for r in res]).reshape(101, NUM_CLAIMING)
    assert np.all(p == p[0])  # the claim changes nothing
    assert all(r["tried"]["keys"] == 101 for r in res[:NUM_CLAIMING])
    first = res[0]
    assert math.isclose(first["log_pvalue"], min(0.0, first["uncorrected_log_pvalue"] + math.log(101)), rel_tol=1e-9)
    flagged = best_flagged(res, NUM_CLAIMING)
    believed = sum(r["uncorrected_log_pvalue"] is not None and r["uncorrected_log_pvalue"] <= math.log(ALPHA)
                   for r in res[:NUM_CLAIMING])
    print(f"\nbest of 101 claimed indices: {flagged}/{NUM_CLAIMING} human texts flagged (band <= {CLAIM_BAND}); "
          f"believing the claims: {believed}")
    assert flagged <= CLAIM_BAND < believed
    # a claim outside what the record issued is an error naming the line; the other lines are scored
    rows = [{"text": human[0], "key_derivation": keys.KEY_DERIVATION, "run": "shop", "index": 101},
            {"text": human[1], "key_derivation": keys.KEY_DERIVATION, "run": "other", "index": 0}, {"text": human[2]}]
    rc, stdout, err = detect([write_jsonl(tmp_path / "outside.jsonl", rows), key, "--format=json",
                              f"--deployment={records['per_text']}"])
    res = lines(stdout)
    assert rc == 1 and "2 line(s) refused" in err
    assert [r["verdict"] for r in res[:2]] == ["error", "error"] and res[2]["verdict"] != "error"
    assert "outside.jsonl:1" in res[0]["error"] and "did not issue" in res[0]["error"]
    assert "outside.jsonl:2" in res[1]["error"]
    assert res[2]["pvalue"] == p[0, 2]  # a plain text: every issued key, corrected


@pytest.mark.parametrize("field,values,num_texts", [("context_width", range(1, 65), NUM_DECLARING_WIDTHS),
                                                     ("decoder", DECODERS, NUM_HUMAN)])
def test_declared_settings_do_not_buy_a_verdict(tmp_path, key, human, records, field, values, num_texts):
    """Each human text declaring each context width 1..64 (each decoder): lines that differ from the
    deployment are errors naming them; with --try_declared_settings each text gets one declared
    alternative per run and every p-value pays for two. Either way the best per text stays in the band."""
    band = int(sps.binom.isf(1e-6, num_texts, ALPHA))
    rows = [{"text": t, field: v} for v in values for t in human[:num_texts]]
    path = write_jsonl(tmp_path / "declared.jsonl", rows)
    rc, stdout, err = detect([path, key, "--format=json", f"--deployment={records['direct']}"])
    res = lines(stdout)
    differing = [r for r, row in zip(res, rows) if row[field] != SETTINGS[field]]
    assert rc == 1 and f"{len(differing)} line(s) refused" in err
    assert all(r["verdict"] == "error" and r["error"].startswith(r["input"] + ": the line declares " + field)
               for r in differing)
    flagged = best_flagged(res, num_texts)
    rc, stdout, err = detect([path, key, "--format=json", f"--deployment={records['direct']}",
                              "--try_declared_settings"])
    tried = lines(stdout)
    scored = [r for r in tried if r["verdict"] != "error"]
    assert len(scored) == 2 * num_texts  # the deployment's setting and the first other one of each text
    assert all(r["tried"]["settings"] == 2 for r in scored)
    assert any("already scored under other declared settings" in r.get("error", "") for r in tried)
    flagged_tried = best_flagged(tried, num_texts)
    print(f"\nbest of {len(values)} declared {field}s: {flagged} (refused) / {flagged_tried} (tried, corrected) "
          f"of {num_texts} human texts flagged (band <= {band})")
    assert flagged <= band and flagged_tried <= band


def test_a_line_draft_fraction_is_not_its_detector(tmp_path, key, human, records):
    """Ars-Prior's p is the deployment's: a grid of declared draft fractions gives every text one p-value."""
    grid = np.linspace(0.0, 1.0, 21)
    rows = [{"text": t, "draft_fraction": float(f)} for f in grid for t in human[:50]]
    rc, stdout, err = detect([write_jsonl(tmp_path / "fractions.jsonl", rows), key, "--format=json",
                              f"--deployment={records['direct']}"])
    assert rc == 0, err
    res = lines(stdout)
    assert {r["detector"]["settings"]["draft_fraction"] for r in res} == {0.3}
    p = np.array([r["pvalue"] for r in res]).reshape(len(grid), 50)
    assert np.all(p == p[0])


@pytest.mark.parametrize("flag", ["--context_width=3", "--decoder=synthid", "--draft_fraction=0.9", "--tau=0.3",
                                  "--detector=ars-tau", "--run=shop", "--index=3", "--keys=per_text",
                                  "--key_sequence=256", "--siblings=3"])
def test_flags_that_contradict_the_record_are_refused(tmp_path, key, human, records, flag):
    path = write_jsonl(tmp_path / "h.jsonl", [{"text": human[0]}])
    rc, stdout, err = detect([path, key, flag, f"--deployment={records['direct']}"])
    assert rc == 2 and stdout == "" and flag.split("=")[0] in err and records["direct"] in err
    agreeing = {"--context_width=3": "--context_width=4", "--decoder=synthid": "--decoder=gumbel",
                "--draft_fraction=0.9": "--draft_fraction=0.3", "--detector=ars-tau": "--detector=auto,single"}
    if flag in agreeing:
        rc, stdout, err = detect([path, key, agreeing[flag], f"--deployment={records['direct']}", "--format=json"])
        assert rc == 0, err


def test_a_forged_or_edited_record_is_refused(tmp_path, key, human, records):
    path = write_jsonl(tmp_path / "h.jsonl", [{"text": human[0]}])
    body = json.loads(open(records["per_text"]).read())
    assert SECRET not in open(records["per_text"]).read()
    edits = {"settings": {**body["settings"], "context_width": 3}, "issued": {"shop": [[0, 1000]]},
             "draft_fraction": 0.9, "key_derivation": keys.DIRECT, "mac": "0" * 64}
    for field, value in edits.items():
        forged = tmp_path / f"forged-{field}.json"
        forged.write_text(json.dumps({**body, field: value}))
        rc, stdout, err = detect([path, key, f"--deployment={forged}"])
        assert rc == 2 and stdout == "" and "signature does not match" in err and str(forged) in err, field
    other = write_record(tmp_path / "other.json", secret="another-secret-of-enough-length")
    rc, _, err = detect([path, key, f"--deployment={other}"])
    assert rc == 2 and "record of another secret" in err
    # beside an input it is found, and refused alike
    (tmp_path / "h.jsonl.deployment.json").write_text(json.dumps({**body, "draft_fraction": 0.9}))
    rc, stdout, err = detect([path, key])
    assert rc == 2 and stdout == "" and "h.jsonl.deployment.json" in err and "signature" in err


QUESTIONS = ["Why is the sky blue?", "What is a prime number?", "How do bees make honey?"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory, key):
    """Three Alg. 1 answers of up to 32 tokens with per-text keys, and the record beside them."""
    d = tmp_path_factory.mktemp("gen")
    (d / "prompts.txt").write_text("\n".join(QUESTIONS) + "\n")
    out = d / "out.jsonl"
    rc, _, err = run_tool(cli_generate, [str(d / "prompts.txt"), f"--output={out}", "--max_new_tokens=32",
                                         "--keys=per_text", "--run=dep-gen", "--temperature=1.0", key], SECRET)
    assert rc == 0, err
    return out, lines(out.read_text())


def test_generate_writes_a_signed_record_beside_its_output(generated, key):
    out, recs = generated
    text = open(deployment_record.beside(str(out))).read()
    assert SECRET not in text
    body = json.loads(text)
    assert body["key_derivation"] == keys.KEY_DERIVATION and body["issued"] == {"dep-gen": [[0, 3]]}
    assert body["settings"]["context_width"] == 4 and body["settings"]["method"] == "pseudorandom"
    assert len(body["texts"]) == 3 and body["draft_fraction"] == pytest.approx(np.mean([r["draft_fraction"]
                                                                                       for r in recs]))
    deployment_record.load(deployment_record.beside(str(out)), keys.Secret(SECRET))  # verifies
    rc, stdout, err = detect([str(out), key, "--format=json"])
    assert rc == 0, err
    res = lines(stdout)
    # each line's key is found from its token ids: one key tried, no correction
    assert all("tried" not in r and r["key"]["found_by"].startswith("its token ids") for r in res)
    assert [r["key"]["index"] for r in res] == [0, 1, 2]
    assert min(r["log10_pvalue"] for r in res) < -3


def test_a_tampered_setting_on_a_real_line_is_an_error_naming_it(generated, tmp_path, key):
    out, recs = generated
    rc, stdout, _ = detect([str(out), key, "--format=json"])
    clean = lines(stdout)
    tampered = [recs[0], {**recs[1], "context_width": 3}, recs[2]]
    path = write_jsonl(tmp_path / "tampered.jsonl", tampered)
    rc, stdout, err = detect([path, key, "--format=json", f"--deployment={deployment_record.beside(str(out))}"])
    res = lines(stdout)
    assert rc == 1 and "tampered.jsonl:2" in err
    assert res[1]["verdict"] == "error"
    assert "tampered.jsonl:2" in res[1]["error"] and "context_width=3" in res[1]["error"]
    assert [r["pvalue"] for r in (res[0], res[2])] == [clean[0]["pvalue"], clean[2]["pvalue"]]
    # a real line naming another issued text's key, or one never issued
    for claim, message in [({"index": 1}, "its token ids are text 0"), ({"index": 7}, "did not issue")]:
        path = write_jsonl(tmp_path / "claim.jsonl", [{**recs[0], **claim}])
        rc, stdout, err = detect([path, key, "--format=json", f"--deployment={deployment_record.beside(str(out))}"])
        assert rc == 1 and message in lines(stdout)[0]["error"]


def test_pasted_per_text_answer_pays_for_the_issued_keys(generated, tmp_path, key):
    """An answer pasted with a word put in front is no issued text: it is scored under the 3 issued keys and
    its best p-value multiplied by 3 (the answer as generated is found from its ids: one key, no correction)."""
    out, recs = generated
    pasted = tmp_path / "pasted.txt"
    pasted.write_text("Indeed. " + recs[0]["text"])
    rc, stdout, err = detect([str(pasted), key, "--format=json", f"--deployment={deployment_record.beside(str(out))}"])
    assert rc == 0, err
    r = lines(stdout)[0]
    assert r["tried"]["keys"] == 3 and r["key"]["found_by"].startswith("not a text the deployment issued")
    assert math.isclose(r["log_pvalue"], min(0.0, r["uncorrected_log_pvalue"] + math.log(3)), rel_tol=1e-9)


def test_outputs_without_their_record(generated, tmp_path, key):
    """Lines of per-text keys without the run's record are errors naming them and --keys=per_text is refused;
    wmspec-deployment records the key holder's old output, after which they are scored."""
    _, recs = generated
    path = write_jsonl(tmp_path / "old.jsonl", recs)
    rc, stdout, err = detect([path, key, "--format=json"])
    res = lines(stdout)
    assert rc == 1 and all(r["verdict"] == "error" and "per-text keys need the run's own deployment record"
                           in r["error"] for r in res)
    rc, _, err = detect([path, key, "--keys=per_text"])
    assert rc == 2 and "--keys=per_text" in err and "record" in err
    assert not os.path.exists(path + deployment_record.SUFFIX)
    # the key holder records the old output once; then each line's key is found from its ids
    from wmspec_jax.cli import deployment as cli_deployment

    rc, _, err = run_tool(cli_deployment, [path, key], SECRET)
    assert rc == 0 and "3 texts of 1 run(s)" in err, err
    rc, stdout, err = detect([path, key, "--format=json"])
    assert rc == 0 and [r["key"]["index"] for r in lines(stdout)] == [0, 1, 2], err
    # lines of another secret, or of other settings, make no record
    for name, row in [("foreign", {**recs[0], "key_fingerprint": "0123456789abcdef"}),
                      ("mixed", {**recs[0], "context_width": 3})]:
        bad = write_jsonl(tmp_path / f"{name}.jsonl", [recs[1], row])
        rc, _, err = run_tool(cli_deployment, [bad, key], SECRET)
        assert rc == 2 and f"{name}.jsonl:2" in err and not os.path.exists(bad + deployment_record.SUFFIX), err


def test_generate_to_stdout_records_where_deployment_says(tmp_path, key, records):
    """Standard output has no place beside it: --deployment names the record; a record of other settings
    is refused before any text is generated, and the lines on stdout are detected under the new one."""
    args = ["-", key, "--max_new_tokens=12", "--nostop_at_eos", "--run=stdout-run"]
    rc, stdout, err = run_tool(cli_generate, args + [f"--deployment={records['direct']}"], SECRET, b"Why?\n")
    assert rc == 2 and "holds other settings" in err and stdout == ""
    rc, stdout, err = run_tool(cli_generate, args, SECRET, b"Why?\n")
    assert rc == 0 and "no deployment record is written" in err
    record = tmp_path / "stdout.deployment.json"
    rc, stdout, err = run_tool(cli_generate, args + [f"--deployment={record}"], SECRET, b"Why?\n")
    assert rc == 0 and json.loads(record.read_text())["issued"] == {"stdout-run": [[0, 1]]}, err
    rc, out, err = detect(["-", key, "--format=json", f"--deployment={record}"], stdin=stdout.encode())
    assert rc == 0 and lines(out)[0]["verdict"] != "error", err


def test_the_record_holds_no_key_material(records):
    """Neither the secret, nor its stream key words, nor the signing key are in the file or a repr."""
    secret = keys.Secret(SECRET)
    text = open(records["per_text"]).read()
    words = [str(int(w)) for w in np.asarray(secret.stream_keys().words).ravel()]
    signing = deployment_record.mac_key(secret)
    assert SECRET not in text and not any(w in text for w in words) and signing.hex() not in text
    dep = deployment_record.load(records["per_text"], secret)
    assert signing.hex() not in repr(dep) and repr(signing) not in repr(dep) and SECRET not in repr(dep)
    assert dep.num_issued() == 101 and dep.is_issued("shop", 100) and not dep.is_issued("shop", 101)
