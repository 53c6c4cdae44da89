"""Another engine's watermark through the generation loop (``ForeignScheme.decoder``): transformers'
SynthID-Text and vLLM's ``gumbel`` key the target stream with their own pseudorandom functions, under
basic sampling, Alg. 1, Dathathri et al.'s method and draft trees; the text's law is P's (Thm 4.1 (a))
and the engines' own scoring reads the texts."""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from tests.cli_calls import lines, run_tool
from wmspec_jax import executable_store, prf, speculative, toy
from wmspec_jax.interop import engine_gumbel, foreign, hf_kgw, hf_synthid
from wmspec_jax.lines import text_line

SYNTHID = {"ngram_len": 3, "keys": [11, 22, 33, 44, 55, 66, 77, 88]}
VLLM = {"algorithm": "gumbel", "key": 42, "context_width": 2}
VLLM_DUAL = {"algorithm": "dual_key_gumbel", "key": 42, "context_width": 2}
ENGINES = {"synthid": SYNTHID, "vllm": VLLM, "vllm-dual": VLLM_DUAL}
V, N = 4, 6000
P_TAB, Q_TAB = toy.markov_pair(V, 0.35, concentration=2.0, seed=3)  # the law tests' pair
PROMPT = np.array([0, 1, 2, 3])


def run_toy(decoder, method, k, tree=None, n=N, new=3, temperature=1.0):
    cfg = speculative.SpeculativeConfig(method=method, decoder=decoder, lookahead=k, max_new_tokens=new,
                                        temperature=temperature, context_width=decoder.own_context_width,
                                        draft_tree=tree)
    model = toy.markov_model(V)
    # independent target words per row: an independent copy of the engine's stream per text (the law is
    # over keys; the tools use zero words, the engine's own stream)
    return speculative.generate(model, toy.log_table(P_TAB), np.broadcast_to(PROMPT, (n, 4)), np.full(n, 4),
                                prf.stream_keys(list(range(n))), jax.random.key(0), cfg, draft=model,
                                draft_params=toy.log_table(Q_TAB))


@pytest.mark.parametrize("engine,method,k,tree", [
    *[(e, m, k, t) for e in ("synthid", "vllm") for m, k, t in [
        ("basic", 0, None), ("pseudorandom", 2, None), ("dathathri", 2, None), ("coupled", 2, None),
        ("pseudorandom", 2, (2, 1))]],
    ("vllm-dual", "pseudorandom", 2, None), ("vllm-dual", "dathathri", 2, None)])
def test_the_law_is_the_targets_under_an_engines_prf(engine, method, k, tree):
    # Thm 4.1 (a) with the engine's PRF: the first three tokens' law is P's. The engine keys its first
    # tokens by its own padding, so a context of real tokens can repeat the padded one: the repeated-context
    # rule and every stream must read the engine's contexts (the law breaks otherwise: p < 1e-40).
    decoder = foreign.from_dict(ENGINES[engine]).decoder()
    toks = np.asarray(run_toy(decoder, method, k, tree).tokens[:, 4:7])
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), f"{engine} {method} {tree}")


KGW = {"greenlist_ratio": 0.5, "bias": 1.5, "hashing_key": 15485863}


def kgw_sequence_law(table, first: int, k: int, delta: float) -> np.ndarray:
    """float64[V**3]: the law of three tokens after ``first`` when each context (the last token) has its own
    green list, uniform among the k-subsets and independent across contexts, re-used where a context
    repeats, and δ is added to the green tokens' logits at every position (transformers' processor)."""
    size = table.shape[0]
    subsets = list(itertools.combinations(range(size), k))
    rows = np.zeros((size, len(subsets), size))
    for c in range(size):
        for s, subset in enumerate(subsets):
            w = table[c] * np.exp(delta * np.isin(np.arange(size), subset))
            rows[c, s] = w / w.sum()
    law = np.zeros((size,) * 3)
    t = np.arange(size)
    for assign in itertools.product(range(len(subsets)), repeat=size):
        b = rows[t, np.asarray(assign)]  # [context, next token] under this assignment
        law += b[first][:, None, None] * b[:, :, None] * b[None, :, :]
    return (law / len(subsets) ** size).ravel()


@pytest.mark.parametrize("method,k,temperature", [("basic", 0, 1.0), ("pseudorandom", 2, 1.0),
                                                   ("dathathri", 2, 1.0), ("pseudorandom", 2, 0.5)])
def test_transformers_kgw_has_its_own_law_under_every_method(method, k, temperature):
    # transformers biases every position, a repeated context with the same green list, and adds δ after
    # the temperature (before it, T = 0.5 would double δ): the enumerated law
    decoder = foreign.from_dict(KGW).decoder()
    toks = np.asarray(run_toy(decoder, method, k, temperature=temperature).tokens[:, 4:7])
    counts = np.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V**3)
    tempered = P_TAB ** (1 / temperature) / (P_TAB ** (1 / temperature)).sum(1, keepdims=True)
    stats.assert_counts_match(counts, kgw_sequence_law(tempered, PROMPT[-1], 2, 1.5), f"transformers KGW {method}")
    with pytest.raises(AssertionError, match="chi2"):  # and it is not P's law
        stats.assert_counts_match(counts, toy.sequence_probs(P_TAB, PROMPT[-1], 3), "KGW vs P")


def test_the_target_stream_is_the_engines_own():
    rng = np.random.default_rng(0)
    b, vocab = 64, 300
    logits = rng.standard_normal((b, vocab)).astype(np.float32) * 2
    probs = jax.nn.softmax(jnp.asarray(logits), axis=-1)
    zero = jnp.zeros((b, 2), jnp.uint32)
    # transformers: the processor's distribution after a context of ngram_len - 1 tokens
    config = hf_synthid.HFSynthIDConfig(**SYNTHID)
    scheme = hf_synthid.HFSynthIDScheme(config)
    ctx = rng.integers(0, vocab, (b, 2))
    seeds = scheme.context_seeds(zero, jnp.asarray(ctx, jnp.int32), prf.Stream.TARGET)
    ours = scheme.distribution(probs, None, seeds)
    theirs = jnp.exp(hf_synthid.watermarked_log_probs(config, ctx, logits))
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=2e-5, atol=1e-7)
    # candidates (top-k ids) read the same g-values as the whole vocabulary
    ids = jnp.asarray(np.argsort(-logits, axis=1)[:, :20], jnp.int32)
    sub = jnp.take_along_axis(probs, ids, axis=1)
    g_all = scheme._g_values(seeds, jnp.arange(vocab, dtype=jnp.uint32))
    np.testing.assert_array_equal(scheme._g_values(seeds, ids.astype(jnp.uint32)),
                                  jnp.take_along_axis(g_all, ids[..., None], axis=1))
    assert np.all(np.asarray(scheme.distribution(sub, ids, seeds)) >= 0)
    # vLLM: its uniforms of every token after the context, and its Gumbel-max token
    vconfig = engine_gumbel.VllmGumbelConfig(key=42, context_width=2)
    vscheme = engine_gumbel.VllmGumbelScheme(vconfig)
    vctx = np.where(rng.random((b, 2)) < 0.2, -1, rng.integers(0, vocab, (b, 2)))
    vseeds = vscheme.context_seeds(zero, jnp.asarray(vctx, jnp.int32), prf.Stream.TARGET)
    kw = engine_gumbel.key_words(42)
    u = vscheme.uniforms(vseeds[:, None, :], jnp.arange(vocab, dtype=jnp.uint32))
    np.testing.assert_array_equal(np.asarray(u), np.asarray(engine_gumbel.vocab_uniforms_jax(kw, vctx, vocab)))
    token = vscheme.watermark_index(probs, None, vseeds)
    np.testing.assert_array_equal(np.asarray(token), np.asarray(engine_gumbel.gumbel_argmax_jax(kw, logits, vctx)))
    # transformers' KGW: its green lists, added after temperature and top-k
    kconfig = hf_kgw.HFKGWConfig.from_dict(KGW)
    kscheme = hf_kgw.HFKGWScheme(kconfig)
    kseeds = kscheme.context_seeds(zero, jnp.asarray(ctx[:, -1:], jnp.int32), prf.Stream.TARGET)
    np.testing.assert_array_equal(np.asarray(kscheme.green(kseeds, vocab)),
                                  np.asarray(hf_kgw.green_mask(kconfig, ctx[:, -1:], vocab)))
    # vLLM's dual key: the draft stream is key A's, the target stream key B's (its speculative decoding's roles)
    dual = foreign.from_dict({**VLLM_DUAL, "key": 42}).decoder()
    for stream, key in ((prf.Stream.DRAFT, dual.config.key_a), (prf.Stream.TARGET, dual.config.key_b)):
        seeds_ = dual.context_seeds(zero, jnp.asarray(vctx, jnp.int32), stream)
        np.testing.assert_array_equal(
            np.asarray(dual.uniforms(seeds_[:, None, :], jnp.arange(vocab, dtype=jnp.uint32))),
            np.asarray(engine_gumbel.vocab_uniforms_jax(engine_gumbel.key_words(key), vctx, vocab)))
    # other words: another stream of the same construction
    other = vscheme.context_seeds(jnp.ones((b, 2), jnp.uint32), jnp.asarray(vctx, jnp.int32), prf.Stream.DRAFT)
    assert np.mean(np.asarray(vscheme.watermark_index(probs, None, other) == token)) < 0.5


def test_an_engine_scheme_names_what_it_cannot_do():
    with pytest.raises(ValueError, match="context_width must be 2"):
        speculative.SpeculativeConfig(decoder=foreign.from_dict(SYNTHID).decoder(), context_width=4)
    with pytest.raises(ValueError, match="no key_sequence"):
        speculative.SpeculativeConfig(decoder=foreign.from_dict(VLLM).decoder(), context_width=2, key_sequence=16)
    with pytest.raises(ValueError, match="single_turn"):
        foreign.from_dict({**VLLM, "deduplicate_contexts": "all"}).decoder()
    dual_keys = foreign.from_dict(VLLM_DUAL).stream_keys()  # its draft stream is vLLM's key A
    assert not dual_keys[prf.Stream.DRAFT].any() and dual_keys[prf.Stream.ACCEPT].any()
    with pytest.raises(ValueError, match="lefthash"):
        foreign.from_dict({**KGW, "seeding_scheme": "selfhash", "context_width": 4}).decoder()
    with pytest.raises(ValueError, match="num_drafts / draft_tree"):
        speculative.SpeculativeConfig(decoder=foreign.from_dict(KGW).decoder(), context_width=1, draft_tree=(2, 1),
                                      lookahead=2)
    with pytest.raises(ValueError, match="skip_first_ngram_calls"):
        foreign.from_dict({**SYNTHID, "skip_first_ngram_calls": True}).decoder()
    scheme = foreign.from_dict(VLLM)
    keys_ = scheme.stream_keys()
    assert keys_.shape == (prf.NUM_STREAMS, 2) and not keys_[prf.Stream.TARGET].any()
    assert keys_[prf.Stream.DRAFT].any() and keys_[prf.Stream.ACCEPT].any()
    assert not (keys_ == foreign.from_dict({**VLLM, "key": 43}).stream_keys()).all()
    assert "42" not in repr(scheme.decoder()) and scheme.fingerprint in repr(scheme.decoder())
    # the engine's key is a constant of the compiled loop: the executable store never keeps it
    assert executable_store.describe(scheme.decoder()) is None
    assert executable_store.describe(speculative.SpeculativeConfig(decoder=scheme.decoder(), context_width=2)) is None
    assert executable_store.describe(speculative.SpeculativeConfig()) is not None
    assert set(text_line.ENGINE_DECODERS) == {hf_synthid.HFSynthIDScheme.kind, engine_gumbel.VllmGumbelScheme.kind,
                                              hf_kgw.HFKGWScheme.kind}


def test_the_tools_generate_with_an_engines_config_and_its_scoring_flags_the_texts(tmp_path):
    from wmspec_jax.cli import detect as detect_cli
    from wmspec_jax.cli import generate as generate_cli

    config = tmp_path / "vllm.json"
    config.write_text(json.dumps({"algorithm": "gumbel", "key": 987654321}))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Why is the sky blue?\nHow do bees make honey?\n")
    out = tmp_path / "gen.jsonl"
    args = [str(prompts), f"--scheme_config={config}", "--method=coupled", "--lookahead=2", "--max_new_tokens=40",
            "--temperature=1.0", "--stop_at_eos=false", f"--output={out}"]
    rc, _, err = run_tool(generate_cli, args, "987654321")
    assert rc == 0, err
    records = lines(out.read_text())
    assert [r["decoder"] for r in records] == ["vllm-gumbel"] * 2 and records[0]["key_derivation"] == "engine"
    assert records[0]["decoder_options"]["key_fingerprint"] == foreign.load(str(config)).fingerprint
    rc, stdout, err = run_tool(detect_cli, [str(out), f"--scheme_config={config}", "--format=json"], "987654321")
    assert rc == 0, err
    res = lines(stdout)
    assert all(r["verdict"] == "watermarked" and r["num_scored"] >= 36 for r in res), [r["log_pvalue"] for r in res]
    rc, _, err = run_tool(detect_cli, [str(out), "--demo_secret"], "987654321")
    assert rc != 0 and "--scheme_config" in err
    rc, _, err = run_tool(generate_cli, args[:-1] + ["--decoder=synthid", f"--output={tmp_path / 'x.jsonl'}"],
                          "987654321")
    assert rc == 2 and "drop --decoder" in err
    rc, _, err = run_tool(generate_cli, args[:-1] + ["--keys=per_text", f"--output={tmp_path / 'z.jsonl'}"],
                          "987654321")
    assert rc == 2 and "drop --keys" in err  # the engine's key is one for every text
    dual = tmp_path / "dual.json"
    dual.write_text(json.dumps({"algorithm": "dual_key_gumbel", "key": 987654321}))
    rc, _, err = run_tool(generate_cli, [str(prompts), f"--scheme_config={dual}", "--method=basic",
                                         f"--output={tmp_path / 'y.jsonl'}"], "987654321")
    assert rc == 2 and "key A" in err and "--method=basic" in err
