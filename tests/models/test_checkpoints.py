"""Checkpoint loading errors, tokenizers and draft/target compatibility (no torch needed)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.models import hf, transformer
from wmspec_jax.models.config import TransformerConfig, UnsupportedModelError

CFG = TransformerConfig(family="llama", vocab_size=40, hidden_size=16, intermediate_size=24,
                        num_layers=2, num_heads=2, num_kv_heads=1, head_dim=8,
                        rope_theta=500000.0, tie_word_embeddings=False)


def hf_config(cfg: TransformerConfig, **over) -> dict:
    d = {"model_type": cfg.family, "architectures": ["LlamaForCausalLM"],
         "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
         "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
         "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
         "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_norm_eps,
         "tie_word_embeddings": cfg.tie_word_embeddings}
    d.update(over)
    return d


def write_checkpoint(path, cfg: TransformerConfig, seed=0, words=None, tokenizer_kw=None,
                     **config_over):
    """config.json + model.safetensors (HF names, torch layout) + optional tokenizer."""
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    params = jax.tree_util.tree_map(
        np.asarray, transformer.init_params(cfg, jax.random.PRNGKey(seed), scale=0.2))
    names = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
             "wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
             "wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj",
             "w_down": "mlp.down_proj"}
    tensors = {"model.embed_tokens.weight": params["embed"], "model.norm.weight": params["final_norm"]}
    if "lm_head" in params:
        tensors["lm_head.weight"] = np.ascontiguousarray(params["lm_head"].T)
    for key, hf_name in names.items():
        for i in range(cfg.num_layers):
            w = params["layers"][i][key]
            tensors[f"model.layers.{i}.{hf_name}.weight"] = np.ascontiguousarray(w.T if w.ndim == 2 else w)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(hf_config(cfg, **config_over)))
    if words is not None:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0],
                                **(tokenizer_kw or {})).save_pretrained(path)
    return params


WORDS = ["<unk>"] + [f"w{i}" for i in range(CFG.vocab_size - 1)]


def test_roundtrip_params_and_tokenizer(tmp_path):
    params = write_checkpoint(tmp_path / "m", CFG, words=WORDS)
    ckpt = hf.load_checkpoint(tmp_path / "m")
    # max_position_embeddings: transformers' LlamaConfig default when config.json omits it.
    assert ckpt.config == CFG.replace(bos_token_id=None, eos_token_id=None, max_position_embeddings=2048)
    jax.tree_util.tree_map(np.testing.assert_array_equal, ckpt.params,
                           jax.tree_util.tree_map(jnp.asarray, params))
    assert ckpt.tokenizer.encode("w3 w7", add_special_tokens=False) == [4, 8]
    logits, _ = jax.jit(ckpt.language_model().step)(
        ckpt.params, ckpt.language_model().init_cache(1, 4), jnp.asarray([[1, 2]]), jnp.asarray([2]))
    assert np.isfinite(np.asarray(logits)).all()


def test_missing_config(tmp_path):
    write_checkpoint(tmp_path / "m", CFG)
    (tmp_path / "m" / "config.json").unlink()
    with pytest.raises(hf.CheckpointError, match="missing config.json"):
        hf.load_checkpoint(tmp_path / "m", tokenizer=False)
    with pytest.raises(hf.CheckpointError, match="does not exist"):
        hf.load_checkpoint(tmp_path / "nowhere", tokenizer=False)


def test_missing_weights(tmp_path):
    write_checkpoint(tmp_path / "m", CFG)
    (tmp_path / "m" / "model.safetensors").rename(tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(hf.CheckpointError, match="missing weights.*only safetensors"):
        hf.load_checkpoint(tmp_path / "m", tokenizer=False)


def test_missing_tensor_and_missing_shard(tmp_path):
    from safetensors.numpy import load_file, save_file

    write_checkpoint(tmp_path / "m", CFG)
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(hf.CheckpointError, match="missing tensors.*layers.1.mlp.up_proj"):
        hf.load_checkpoint(tmp_path / "m", tokenizer=False)
    index = {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(hf.CheckpointError, match="shard files that are missing"):
        hf.load_checkpoint(tmp_path / "m", tokenizer=False)


def test_missing_tokenizer(tmp_path):
    write_checkpoint(tmp_path / "m", CFG)
    with pytest.raises(hf.CheckpointError, match="missing tokenizer"):
        hf.load_checkpoint(tmp_path / "m")


@pytest.mark.parametrize("over, message", [
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "unsupported architecture.*gpt2"),
    ({"architectures": ["MistralForCausalLM"]}, "unsupported architecture.*Mistral"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling type 'yarn'"),
])
def test_unsupported_architectures(tmp_path, over, message):
    write_checkpoint(tmp_path / "m", CFG, **over)
    with pytest.raises(UnsupportedModelError, match=message):
        hf.load_checkpoint(tmp_path / "m", tokenizer=False)


def test_vocabulary_mismatch_between_draft_and_target(tmp_path):
    write_checkpoint(tmp_path / "target", CFG, words=WORDS)
    write_checkpoint(tmp_path / "draft", CFG.replace(num_layers=1), seed=1, words=WORDS)
    target, draft = hf.load_pair(tmp_path / "target", tmp_path / "draft")
    assert draft.config.num_layers == 1

    # Without tokenizers the logit widths must agree.
    small = CFG.replace(vocab_size=32, num_layers=1)
    write_checkpoint(tmp_path / "small", small, words=WORDS[:32])
    bare = [hf.load_checkpoint(tmp_path / d, tokenizer=False) for d in ("small", "target")]
    with pytest.raises(hf.IncompatibleModelsError, match="vocab_size=32.*vocab_size=40"):
        hf.check_compatible(*bare)
    # With tokenizers, a different token -> id map is refused...
    with pytest.raises(hf.IncompatibleModelsError, match="different ids"):
        hf.load_pair(tmp_path / "target", tmp_path / "small")
    # ... and so is an embedding smaller than the shared tokenizer.
    write_checkpoint(tmp_path / "short", small, words=WORDS)
    with pytest.raises(hf.IncompatibleModelsError, match="tokenizer has 40 tokens.*vocab_size=32"):
        hf.load_pair(tmp_path / "target", tmp_path / "short")

    # Same size, different token -> id mapping.
    write_checkpoint(tmp_path / "shuffled", CFG.replace(num_layers=1), words=WORDS[:1] + WORDS[:0:-1])
    with pytest.raises(hf.IncompatibleModelsError, match="different ids"):
        hf.load_pair(tmp_path / "target", tmp_path / "shuffled")


def test_rope_parameters_of_transformers_v5_and_llama3_scaling():
    from wmspec_jax.models.hf_config import config_from_hf

    v5 = config_from_hf(hf_config(CFG, rope_parameters={"rope_type": "default", "rope_theta": 123.0}))
    assert v5.rope_theta == 123.0 and v5.rope_scaling is None
    l3 = config_from_hf(hf_config(CFG, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}))
    base = CFG.rope_inv_freq()
    scaled = l3.rope_inv_freq()
    # High frequencies are kept, the lowest are divided by the factor.
    assert scaled[0] == base[0] and np.isclose(scaled[-1], base[-1] / 8.0)


# ---- corrupt files name the file ----------------------------------------------------


def test_corrupt_or_incomplete_files_raise_a_checkpoint_error_naming_the_file(tmp_path):
    write_checkpoint(tmp_path / "m", CFG)
    cfg_file = tmp_path / "m" / "config.json"
    good = json.loads(cfg_file.read_text())

    def load():
        return hf.load_checkpoint(tmp_path / "m", tokenizer=False)

    cfg_file.write_text('{"model_type": "llama", ')  # truncated JSON (a clear error, not a JSONDecodeError)
    with pytest.raises(hf.CheckpointError, match="config.json.*Expecting"):
        load()
    cfg_file.write_text(json.dumps({k: v for k, v in good.items() if k != "hidden_size"}))
    with pytest.raises(hf.CheckpointError, match=r"config.json.*missing required field.*hidden_size"):
        load()  # a clear error, not KeyError('hidden_size')
    cfg_file.write_text(json.dumps(dict(good, num_hidden_layers="two")))
    with pytest.raises(hf.CheckpointError, match="config.json"):
        load()
    cfg_file.write_text(json.dumps(good))

    weights = tmp_path / "m" / "model.safetensors"
    blob = weights.read_bytes()
    weights.write_bytes(blob[: len(blob) // 2])  # truncated download (a clear error, not a SafetensorError)
    with pytest.raises(hf.CheckpointError, match="cannot read weights file .*model.safetensors"):
        load()
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(hf.CheckpointError, match="model.safetensors"):
        load()
    weights.write_bytes(blob)

    (tmp_path / "m" / "generation_config.json").write_text("{eos")
    with pytest.raises(hf.CheckpointError, match="generation_config.json"):
        load()


def test_unknown_config_fields_are_refused_by_name():
    from wmspec_jax.models.hf_config import config_from_hf

    base = hf_config(CFG)
    assert config_from_hf(base).family == "llama"
    with pytest.raises(UnsupportedModelError, match=r"not implemented.*\['quantization_config'\]"):
        config_from_hf(dict(base, quantization_config={"quant_method": "gptq"}))
    with pytest.raises(UnsupportedModelError, match="mlp_bias=True"):
        config_from_hf(dict(base, mlp_bias=True))


# ---- tokenizers, special tokens and EOS -----------------------------------------------

EOT_WORDS = WORDS[:-1] + ["<eot>"]  # id 39 is the end-of-turn token
CHAT = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} <eot> {% endfor %}"


def test_special_tokens_must_agree_between_draft_and_target(tmp_path):
    write_checkpoint(tmp_path / "target", CFG, words=EOT_WORDS, tokenizer_kw={"eos_token": "<eot>"})
    # Same strings and ids, but "<eot>" is an ordinary word for the draft.
    write_checkpoint(tmp_path / "draft", CFG.replace(num_layers=1), words=EOT_WORDS)
    with pytest.raises(hf.IncompatibleModelsError, match=r"special tokens differ.*only for the target: \[39\]"):
        hf.load_pair(tmp_path / "target", tmp_path / "draft")


def test_same_tokenizer_padded_to_different_sizes_pairs_at_the_larger_width(tmp_path):
    """Like Qwen2.5-0.5B (vocab_size 151936) drafting for Qwen2.5-7B (152064)."""
    write_checkpoint(tmp_path / "target", CFG.replace(vocab_size=48), words=WORDS)
    write_checkpoint(tmp_path / "draft", CFG.replace(num_layers=1), words=WORDS)
    target, draft = hf.load_pair(tmp_path / "target", tmp_path / "draft")
    assert (target.logit_width, draft.logit_width) == (None, 48)
    lm = draft.language_model()
    assert lm.vocab_size == target.language_model().vocab_size == 48
    logits, _ = lm.step(draft.params, lm.init_cache(1, 4), jnp.asarray([[1, 2]]), jnp.asarray([2]))
    assert np.isneginf(np.asarray(logits)[..., 40:]).all() and np.isfinite(np.asarray(logits)[..., :40]).all()


def test_stop_tokens_from_generation_config_and_the_chat_template(tmp_path):
    write_checkpoint(tmp_path / "m", CFG, words=EOT_WORDS, eos_token_id=2,
                     tokenizer_kw={"eos_token": "<eot>", "chat_template": CHAT})
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 39]}))
    ckpt = hf.load_checkpoint(tmp_path / "m")
    # generation_config first, then config.json, then the tokenizer (deduplicated).
    assert ckpt.stop_token_ids == (5, 39, 2)
    assert hf.chat_end_of_turn_id(ckpt.tokenizer) == 39
    assert hf.generation_eos_id(ckpt, chat=True) == 39
    assert hf.generation_eos_id(ckpt, chat=False) == 5

    write_checkpoint(tmp_path / "plain", CFG, words=WORDS, eos_token_id=[7, 8])
    plain = hf.load_checkpoint(tmp_path / "plain")
    assert plain.stop_token_ids == (7, 8) and hf.chat_end_of_turn_id(plain.tokenizer) is None
    assert hf.generation_eos_id(plain, chat=True) == 7


def test_experiment_pair_from_directories_uses_the_end_of_turn_and_the_padded_width(tmp_path):
    from wmspec_jax.models import pairs

    kw = {"eos_token": "<eot>", "chat_template": CHAT}
    write_checkpoint(tmp_path / "target", CFG.replace(vocab_size=44), words=EOT_WORDS,
                     tokenizer_kw=kw, eos_token_id=[2, 3])
    write_checkpoint(tmp_path / "draft", CFG.replace(num_layers=1), words=EOT_WORDS, tokenizer_kw=kw)
    pair = pairs.load_pair(str(tmp_path / "target"), str(tmp_path / "draft"))
    # config.json says [2, 3] (the loop stops on either); the chat template ends a reply with <eot>.
    assert pair.eos_id == 39 and pair.vocab_size == pair.draft.vocab_size == 44
    assert pair.encode_prompt("w1 w2", "question")[-1] == 39
