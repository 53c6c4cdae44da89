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


def write_checkpoint(path, cfg: TransformerConfig, seed=0, words=None, **config_over):
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
            w = params["layers"][key][i]
            tensors[f"model.layers.{i}.{hf_name}.weight"] = np.ascontiguousarray(w.T if w.ndim == 2 else w)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(hf_config(cfg, **config_over)))
    if words is not None:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0]).save_pretrained(path)
    return params


WORDS = ["<unk>"] + [f"w{i}" for i in range(CFG.vocab_size - 1)]


def test_roundtrip_params_and_tokenizer(tmp_path):
    params = write_checkpoint(tmp_path / "m", CFG, words=WORDS)
    ckpt = hf.load_checkpoint(tmp_path / "m")
    assert ckpt.config == CFG.replace(bos_token_id=None, eos_token_id=None)
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
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
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

    small = CFG.replace(vocab_size=32, num_layers=1)
    write_checkpoint(tmp_path / "small", small, words=WORDS[:32])
    with pytest.raises(hf.IncompatibleModelsError, match="vocab_size=32.*vocab_size=40"):
        hf.load_pair(tmp_path / "target", tmp_path / "small")

    # Same size, different token -> id mapping.
    write_checkpoint(tmp_path / "shuffled", CFG.replace(num_layers=1), words=WORDS[:1] + WORDS[:0:-1])
    with pytest.raises(hf.IncompatibleModelsError, match="different ids"):
        hf.load_pair(tmp_path / "target", tmp_path / "shuffled")


def test_rope_parameters_of_transformers_v5_and_llama3_scaling():
    from wmspec_jax.models.config import config_from_hf

    v5 = config_from_hf(hf_config(CFG, rope_parameters={"rope_type": "default", "rope_theta": 123.0}))
    assert v5.rope_theta == 123.0 and v5.rope_scaling is None
    l3 = config_from_hf(hf_config(CFG, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}))
    base = CFG.rope_inv_freq()
    scaled = l3.rope_inv_freq()
    # High frequencies are kept, the lowest are divided by the factor.
    assert scaled[0] == base[0] and np.isclose(scaled[-1], base[-1] / 8.0)
