"""Key sequences (Kuditipudi et al.): streams keyed by a token's place in the key, generated under Alg. 1
with the target's law, and detected by the edit-robust permutation test with exact p-values, also after
insertions and deletions."""

import jax
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, detect, key_sequence, keys, prf, sampling, speculative, toy
from wmspec_jax.detect import edit_alignment

V = 4
P_TAB, Q_TAB = toy.markov_pair(V, 0.35, concentration=2.0, seed=3)  # the law test's pair
DETECT_V = 16
DETECT_P, DETECT_Q = toy.markov_pair(DETECT_V, 0.3, concentration=1.0, seed=0)
PROMPT = np.array([0, 1, 2, 3])
N_KEY = 32  # key length n of the detection tests
NULL_KEYS = 49  # T: p-values in multiples of 1/50


@pytest.fixture(autouse=True, scope="module")
def _edit_test_compiled_at_full_optimisation():
    """The suite compiles at XLA's lowest backend optimisation level (``scripts/run_tests.sh``: programs
    compile faster and mostly run for milliseconds); the edit test's DP is a tight compute loop that runs
    about 15x slower there (the 96 texts below: 66 s against 4-5 s), so its program is compiled here at the
    default level. The same function: only the compiler's optimisation differs."""
    fast = jax.jit(edit_alignment._edit_statistics.__wrapped__, static_argnames=edit_alignment._STATIC_ARGNAMES,
                   compiler_options={"xla_backend_optimization_level": 3})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(edit_alignment, "_edit_statistics", fast)
        yield


def generate(keys_, n, *, key_length, new, method="pseudorandom", rng=0, tables=(DETECT_P, DETECT_Q), **extra):
    p_tab, q_tab = tables
    cfg = speculative.SpeculativeConfig(method=method, decoder=decoders.gumbel(),
                                        lookahead=2 if method not in ("plain", "basic") else 0,
                                        max_new_tokens=new, temperature=1.0, key_sequence=key_length, **extra)
    model = toy.markov_model(p_tab.shape[0])
    draft = dict(draft=model, draft_params=toy.log_table(q_tab)) if cfg.spec.speculative else {}
    return speculative.generate(model, toy.log_table(p_tab), np.broadcast_to(PROMPT, (n, 4)), np.full(n, 4), keys_,
                                jax.random.key(rng), cfg, **draft)


def reference_alignment(costs, gamma):
    """Kuditipudi et al.'s Levenshtein recurrence, cell by cell (their Cython loop), minimised over offsets:
    costs[i, l] is token i's cost at key element l."""
    m, n = costs.shape
    best = np.inf
    for s in range(n):
        a = np.zeros((m + 1, m + 1))
        for i in range(m + 1):
            for j in range(m + 1):
                if i == 0:
                    a[i, j] = j * gamma
                elif j == 0:
                    a[i, j] = i * gamma
                else:
                    a[i, j] = min(a[i - 1, j] + gamma, a[i, j - 1] + gamma,
                                  a[i - 1, j - 1] + costs[i - 1, (s + j - 1) % n])
        best = min(best, a[m, m])
    return best


@pytest.mark.parametrize("gamma", [0.0, 0.4])
def test_the_alignment_is_the_reference_levenshtein_recurrence(gamma):
    rng = np.random.default_rng(0)
    lengths = np.array([7, 3, 0, 5])
    costs = np.log1p(-rng.uniform(size=(2, 4, 7, 5))).astype(np.float32)  # 2 keys, 4 texts, L = 7, n = 5
    phi = np.stack([np.asarray(jax.jit(edit_alignment._alignment)(costs[k], lengths, np.float32(gamma))[0])
                    for k in range(2)])
    want = [[reference_alignment(costs[k, b, :lengths[b]], gamma) if lengths[b] else 0.0 for b in range(4)]
            for k in range(2)]
    np.testing.assert_allclose(np.asarray(phi), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("drafts", [{}, {"num_drafts": 2}])
def test_alg1_under_a_key_sequence_emits_the_targets_law(drafts):
    """Thm 4.1 (a) with key-sequence streams: the first three tokens' law over secrets (and offsets) is P's.
    A key index that did not move with the position (one ξ for the whole text) fails it: the three tokens
    would share their uniforms."""
    n = 6000
    res = generate(prf.stream_keys(list(range(n))), n, key_length=8, new=3, tables=(P_TAB, Q_TAB), **drafts)
    toks = np.asarray(res.tokens[:, 4:7])
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), f"key sequence {drafts}")
    assert np.asarray(res.watermarked[:, 4:7]).mean() > 0.99  # every position is drawn from its stream


@pytest.fixture(scope="module")
def marked():
    text_keys = keys.text_keys(b"key-sequence-secret", range(96), run="ks")
    res = generate(text_keys, 96, key_length=N_KEY, new=40, rng=1)
    return text_keys, res


def _test(tokens, text_keys, **kwargs):
    return edit_alignment.edit_test(tokens, text_keys, key_length=N_KEY, vocab_size=DETECT_V, null_keys=NULL_KEYS,
                               **kwargs)


def test_the_edit_test_finds_the_offset_and_survives_insertions_and_deletions(marked):
    text_keys, res = marked
    rec = detect.records_from_generation(res)
    found = _test(rec, text_keys)
    assert found.num_scored.tolist() == [40] * 96
    # the offset it aligns at is the row's own (drawn from the row's true randomness)
    words = sampling.as_row_keys(jax.random.key(1), 96)
    shifts = np.asarray(key_sequence.row_shifts(words, N_KEY))
    assert np.mean(found.offset == shifts) > 0.6, np.mean(found.offset == shifts)  # chance: 1/32
    assert np.mean(found.pvalue <= 0.02) > 0.6, np.mean(found.pvalue <= 0.02)  # null: 0.02
    # edits: drop 4 tokens and insert 4 random ones in each 40-token text (20 % of its tokens touched)
    rng = np.random.default_rng(5)
    text = np.asarray(res.tokens)[:, 4:44]
    edited = []
    for row in text:
        row = np.delete(row, rng.choice(40, 4, replace=False))
        for at in rng.choice(36, 4, replace=False):
            row = np.insert(row, at, rng.integers(DETECT_V))
        edited.append(row)
    robust = _test(np.asarray(edited), text_keys)
    assert np.mean(robust.pvalue <= 0.1) > 0.75, np.mean(robust.pvalue <= 0.1)
    # deterministic: no coin or seed enters a verdict
    again = _test(np.asarray(edited), text_keys)
    np.testing.assert_array_equal(again.pvalue, robust.pvalue)


def test_multi_draft_texts_under_a_key_sequence_are_detected_over_their_sibling_streams():
    """Two chains per step: the draft tokens read their sibling's re-keyed stream at their key element, and the
    edit test searches both sibling streams (exact under H0)."""
    text_keys = keys.text_keys(b"key-sequence-chains", range(48), run="ks2")
    rec = detect.records_from_generation(generate(text_keys, 48, key_length=N_KEY, new=40, rng=3, num_drafts=2))
    found = _test(rec, text_keys, siblings=2)
    assert np.mean(found.pvalue <= 0.02) > 0.5, np.mean(found.pvalue <= 0.02)  # null: 0.02; measured 0.73


def test_the_edit_tests_pvalues_are_exact_under_the_null(marked):
    """P(p <= 0.1) = 5/50 exactly when the text does not depend on the key: the same texts under another
    secret, and unwatermarked texts under the right one."""
    text_keys, res = marked
    other = keys.text_keys(b"another-secret", range(96), run="ks")
    plain = generate(text_keys, 96, key_length=N_KEY, new=40, method="plain", rng=2)
    pvalues = np.concatenate([_test(detect.records_from_generation(res), other).pvalue,
                              _test(detect.records_from_generation(plain), text_keys).pvalue])
    stats.assert_binomial_rate(int((pvalues <= 0.1).sum()), pvalues.size, 5 / 50, "edit test under H0")
    assert set(np.round(pvalues * 50).astype(int)) <= set(range(1, 51))


def test_key_sequences_are_checked_where_they_enter():
    with pytest.raises(ValueError, match="Gumbel-max family"):
        speculative.SpeculativeConfig(decoder=decoders.WatermarkDecoder("synthid"), key_sequence=16)
    with pytest.raises(ValueError, match="key_sequence must be 0"):
        speculative.SpeculativeConfig(key_sequence=-1)
    with pytest.raises(TypeError, match="must be an int"):
        speculative.SpeculativeConfig(key_sequence=2.5)
    tokens = np.zeros((1, 8), np.int32)
    with pytest.raises(ValueError, match="key_length must be"):
        edit_alignment.edit_test(tokens, b"k", key_length=0, vocab_size=4)
    with pytest.raises(ValueError, match="Gumbel-max family"):
        edit_alignment.edit_test(tokens, b"k", key_length=8, vocab_size=4, decoder=decoders.WatermarkDecoder("kgw"))
    with pytest.raises(ValueError, match="gamma must be"):
        edit_alignment.edit_test(tokens, b"k", key_length=8, vocab_size=4, gamma=-1.0)
    with pytest.raises(ValueError, match="null_keys must be"):
        edit_alignment.edit_test(tokens, b"k", key_length=8, vocab_size=4, null_keys=0)
    with pytest.raises(ValueError, match="draft_weight"):
        edit_alignment.edit_test(tokens, b"k", key_length=8, vocab_size=4, draft_weight=1.5)
    with pytest.raises(ValueError):
        edit_alignment.edit_test(np.full((1, 8), 9), b"k", key_length=8, vocab_size=4)  # a token outside V


def test_score_texts_routes_key_sequence_records_to_the_edit_test(marked):
    """The records of a key-sequence generation score through the tools' library path with the edit test (the
    same p-values as the function), per-text keys from each line; a conflicting override is an error."""
    from wmspec_jax.lines import text_line as lines_lib
    from wmspec_jax.lines import scoring

    text_keys, res = marked
    tokens = np.asarray(res.tokens)[:6, 4:44]
    records = [{"tokens": row.tolist(), "decoder": "gumbel", "method": "pseudorandom", "key_sequence": N_KEY,
                "run": "ks", "index": i, "key_derivation": keys.KEY_DERIVATION} for i, row in enumerate(tokens)]
    options = scoring.ScoringOptions(null_keys=NULL_KEYS, alpha=0.02)
    out = scoring.score_texts(records, keys.Secret(b"key-sequence-secret"), vocab_size=DETECT_V, options=options)
    want = _test(tokens, keys.text_keys(b"key-sequence-secret", range(6), run="ks"))
    np.testing.assert_allclose([r["pvalue"] for r in out], want.pvalue)
    assert all(r["detector"]["name"] == "edit" and r["provenance"]["key_sequence"] == N_KEY for r in out)
    assert [r["verdict"] for r in out] == ["watermarked" if p <= 0.02 else "not detected" for p in want.pvalue]
    # a plain text is told its key sequence by the override; a record that names another one conflicts
    plain = [{"text": "t", "tokens": records[0]["tokens"], "run": "ks", "index": 0,
              "key_derivation": keys.KEY_DERIVATION}]
    told = scoring.score_texts(plain, keys.Secret(b"key-sequence-secret"), vocab_size=DETECT_V, options=options,
                               overrides=lines_lib.Overrides(key_sequence=N_KEY))
    assert told[0]["pvalue"] == out[0]["pvalue"]
    with pytest.raises(lines_lib.LineError, match="key_sequence=32"):
        scoring.score_texts(records, keys.Secret(b"key-sequence-secret"), vocab_size=DETECT_V, options=options,
                            overrides=lines_lib.Overrides(key_sequence=16))
    with pytest.raises(lines_lib.LineError, match="raise `null_keys`"):
        scoring.score_texts(records, keys.Secret(b"key-sequence-secret"), vocab_size=DETECT_V,
                            options=scoring.ScoringOptions(null_keys=NULL_KEYS, alpha=0.01))


def test_the_tools_generate_and_detect_under_a_key_sequence(tmp_path):
    """wmspec-generate --key_sequence records n; wmspec-detect scores its lines, and the answers pasted as
    plain text with --key_sequence, by the edit test; a shortened answer is still detected; a conflicting
    n or a decoder the edit test cannot score is refused before any model loads."""
    from tests.cli_calls import lines, run_tool, secret_file_flag
    from wmspec_jax.cli import detect as detect_cli
    from wmspec_jax.cli import generate as generate_cli

    secret = "key-sequence-cli-secret-never-printed"
    key = secret_file_flag(tmp_path, secret)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Tell me about the history of tea.\nWhy do cats purr?\n")
    out = tmp_path / "gen.jsonl"
    rc, _, err = run_tool(generate_cli, [str(prompts), key, "--key_sequence=64", "--max_new_tokens=64",
                                         "--nostop_at_eos", "--temperature=1.0", "--run=key-sequence-tools",
                                         f"--output={out}"], secret)  # a fixed run: the same texts every time
    assert rc == 0, err
    records = lines(out.read_text())
    assert [(r["key_sequence"], r["format_version"]) for r in records] == [(64, 3)] * 2
    judged = ["--null_keys=49", "--alpha=0.02", "--format=json"]
    rc, stdout, err = run_tool(detect_cli, [str(out), key] + judged, secret)
    assert rc == 0, err
    res = lines(stdout)
    assert all(r["detector"]["name"] == "edit" and r["verdict"] == "watermarked" for r in res), \
        [(r["num_scored"], r["pvalue"]) for r in res]
    # the answers as plain text, their first ten words dropped (the offset search realigns them)
    for i, r in enumerate(records):
        (tmp_path / f"answer{i}.txt").write_text(" ".join(r["text"].split(" ")[10:]))
    pasted = [str(tmp_path / f"answer{i}.txt") for i in range(2)]
    rc, stdout, err = run_tool(detect_cli, pasted + [key, "--key_sequence=64"] + judged, secret)
    assert rc == 0, err
    assert [r["verdict"] for r in lines(stdout)] == ["watermarked"] * 2, [r["pvalue"] for r in lines(stdout)]
    rc, _, err = run_tool(detect_cli, [str(out), key, "--key_sequence=16"] + judged, secret)
    assert rc == 2 and "key_sequence=64" in err and "--key_sequence=16" in err
    rc, _, err = run_tool(generate_cli, [str(prompts), key, "--key_sequence=64", "--decoder=synthid",
                                         f"--output={tmp_path / 'bad.jsonl'}"], secret)
    assert rc == 2 and "--key_sequence=64" in err and "Gumbel-max family" in err
