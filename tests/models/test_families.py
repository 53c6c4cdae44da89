"""Llama-3.x, Qwen2/2.5, Qwen3, Mistral and Gemma-2: configs, features and greedy generation.

Logit parity with transformers for these families is in test_parity.py (the
same parametrised test as the paper's Llama-2 / Gemma-v1 configs).
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax import speculative
from wmspec_jax.models import hf, protocol
from wmspec_jax.models.config import UnsupportedModelError
from wmspec_jax.models.hf_config import config_from_hf

from tiny_hf import NEW_FAMILIES

# The fields of published config.json files (values as on the Hugging Face Hub), the
# paper's Llama-2 / Gemma-v1 targets included.
REAL_CONFIGS = {
    "Llama-2-7b-hf": {
        "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"],
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000},
    "gemma-7b": {
        "architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu",
        "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 24576,
        "max_position_embeddings": 8192, "model_type": "gemma", "num_attention_heads": 16,
        "num_hidden_layers": 28, "num_key_value_heads": 16, "pad_token_id": 0,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
        "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": True,
        "vocab_size": 256000},
    "Llama-3.2-1B": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256},
    "Llama-3.1-8B-Instruct": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 128256},
    "Qwen2.5-7B": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
        "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
        "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
        "use_mrope": False, "use_sliding_window": False, "vocab_size": 152064},
    "Qwen3-8B": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
        "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
        "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 151936},
    "Mistral-7B-v0.1": {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000},
    "gemma-2-9b": {
        "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
        "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
        "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32",
        "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 256000},
}


def test_published_configs_parse_to_the_intended_architecture():
    c = {name: config_from_hf(raw) for name, raw in REAL_CONFIGS.items()}
    assert c["Llama-2-7b-hf"].max_position_embeddings == 4096 and c["gemma-7b"].gemma_style
    l1 = c["Llama-3.2-1B"]
    assert l1.tie_word_embeddings and dict(l1.rope_scaling)["factor"] == 32.0
    assert c["Llama-3.1-8B-Instruct"].eos_token_id == 128001
    assert (c["Qwen2.5-7B"].qkv_bias, c["Qwen2.5-7B"].sliding_window) == (True, None)
    assert (c["Qwen2.5-7B"].attention_windows() == 2 ** 30).all()
    assert c["Qwen3-8B"].qk_norm and c["Qwen3-8B"].head_dim == 128
    assert c["Qwen3-8B"].max_position_embeddings == 40960
    assert c["Mistral-7B-v0.1"].attention_windows().tolist() == [4096] * 32
    g = c["gemma-2-9b"]
    assert g.attention_windows().tolist()[:4] == [4096, 2 ** 30, 4096, 2 ** 30]
    assert (g.attn_logit_softcap, g.final_logit_softcap, g.attention_scale) == (50.0, 30.0, 1 / 16)
    assert g.sandwich_norms and g.tie_word_embeddings and g.gemma_style


@pytest.mark.parametrize("name, over, message", [
    ("Qwen2.5-7B", {"use_mrope": True}, "use_mrope=True"),
    ("Qwen3-8B", {"attention_bias": True}, "attention_bias=True"),
    ("Mistral-7B-v0.1", {"layer_types": ["sliding_attention"] * 32}, r"\['layer_types'\]"),
    ("gemma-2-9b", {"hidden_activation": "gelu"}, "hidden_activation='gelu'"),
    ("gemma-2-9b", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma-2-9b", {"sliding_window_size": 2048}, "disagree"),
    ("Llama-3.2-1B", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "'yarn'"),
    ("Llama-3.2-1B", {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta": 1}},
     r"fields not implemented for 'linear': \['beta'\]"),
    ("Qwen3-8B", {"model_type": "qwen3_moe"}, "qwen3_moe"),
])
def test_unimplemented_options_of_the_new_families_are_refused_by_name(name, over, message):
    with pytest.raises(UnsupportedModelError, match=message):
        config_from_hf(dict(REAL_CONFIGS[name], **over))


def test_llama3_rope_frequencies_equal_transformers():
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for name in ("Llama-3.2-1B", "Llama-3.1-8B-Instruct"):
        raw = copy.deepcopy(REAL_CONFIGS[name])  # transformers edits rope dicts in place
        ref, factor = ROPE_INIT_FUNCTIONS["llama3"](transformers.LlamaConfig(**{
            k: v for k, v in copy.deepcopy(raw).items() if k not in ("architectures", "model_type")}))
        ours = config_from_hf(raw).rope_inv_freq()
        assert factor == 1.0
        np.testing.assert_allclose(ours, ref.numpy(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name, changes", [
    ("mistral_sliding", dict(sliding_window=None)),
    ("qwen2_bias", dict(sliding_window=None, layer_types=None)),
    ("gemma2_softcap", dict(attn_logit_softcap=None)),
    ("gemma2_softcap", dict(final_logit_softcap=None)),
    ("gemma2_softcap", dict(layer_types=("sliding_attention",) * 3)),
    ("llama3_tied", dict(rope_scaling=None)),
])
def test_each_family_feature_changes_the_parity_models_logits(tiny_checkpoints, name, changes):
    """The parity test has teeth: switching a feature off moves the logits by >> 1e-4."""
    _, path = tiny_checkpoints[name]
    ckpt = hf.load_checkpoint(path, tokenizer=False)
    ids = jnp.asarray(np.random.default_rng(1).integers(0, ckpt.config.vocab_size, (1, 13)))

    def logits(config):
        lm = protocol.make_language_model(config, name="x")
        return np.asarray(jax.jit(lm.step)(ckpt.params, lm.init_cache(1, 13), ids, jnp.asarray([13]))[0])

    assert np.abs(logits(ckpt.config) - logits(ckpt.config.replace(**changes))).max() > 0.1


def torch_greedy(model, ids, max_new):
    import torch

    model.generation_config.eos_token_id = None  # generate exactly max_new tokens
    n, ids = len(ids), torch.as_tensor([ids])
    with torch.no_grad():  # explicit mask: id 0 in a prompt is a token, not padding
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new, min_new_tokens=max_new, pad_token_id=0)
    return out[0, n:].numpy()


@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_greedy_generation_through_the_loop_equals_transformers_generate(tiny_checkpoints, name):
    """T = 0 through speculative.generate (standard speculative sampling, a 1-layer
    self-draft) equals the PyTorch model's greedy generate, for prompts of 3 lengths."""
    from wmspec_jax.models import draft

    model, path = tiny_checkpoints[name]
    target = hf.load_checkpoint(path, tokenizer=False)
    drafted = draft.make_draft(target, [0])
    rng = np.random.default_rng(7)
    lens = [3, 9, 5]
    prompts = np.zeros((3, max(lens)), np.int32)
    for b, n in enumerate(lens):
        prompts[b, :n] = rng.integers(0, target.config.vocab_size, n)
    max_new = 10  # total length 19 > the sliding windows (4)
    cfg = speculative.SpeculativeConfig(method="standard", lookahead=2, max_new_tokens=max_new,
                                        temperature=0.0)
    res = speculative.generate(target.language_model(), target.params, prompts, lens, 0,
                               jax.random.key(0), cfg, draft=drafted.language_model(),
                               draft_params=drafted.params)
    for b, n in enumerate(lens):
        np.testing.assert_array_equal(res.generated(b), torch_greedy(model, prompts[b, :n].tolist(),
                                                                      max_new))
    assert int(np.asarray(res.num_steps).sum()) < 3 * max_new  # the draft was used
