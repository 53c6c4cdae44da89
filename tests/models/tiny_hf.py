"""Tiny random Hugging Face models used by the parity tests."""

import numpy as np
import pytest

TINY = {
    # GQA (4 query heads / 2 kv heads), rope_theta != 10000, untied embeddings.
    "llama_gqa": dict(family="llama", vocab_size=96, hidden_size=32, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      rope_theta=5000.0, tie_word_embeddings=False, rms_norm_eps=1e-5),
    # Tied embeddings, another rope_theta.
    "llama_tied": dict(family="llama", vocab_size=80, hidden_size=24, intermediate_size=40,
                       num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2,
                       rope_theta=100000.0, tie_word_embeddings=True, rms_norm_eps=1e-6),
    # Multi-query attention, head_dim (16) != hidden / heads (8).
    "gemma_mqa": dict(family="gemma", vocab_size=88, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                      head_dim=16, rope_theta=20000.0, rms_norm_eps=1e-6),
    # Llama-3.2-style: llama3 rope scaling (wavelengths on both sides of the
    # 4..16 ramp), large theta, tied embeddings, explicit head_dim.
    "llama3_tied": dict(family="llama", vocab_size=72, hidden_size=32, intermediate_size=48,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=8, rope_theta=500000.0, tie_word_embeddings=True,
                        rms_norm_eps=1e-5,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=16)),
    # Qwen2.5-style: q/k/v biases, tied embeddings; layer 1 uses a sliding window of 4.
    "qwen2_bias": dict(family="qwen2", vocab_size=76, hidden_size=32, intermediate_size=40,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6,
                       use_sliding_window=True, sliding_window=4, max_window_layers=1),
    # Qwen3-style: per-head q/k RMSNorm, head_dim (16) != hidden / heads (8).
    "qwen3_qknorm": dict(family="qwen3", vocab_size=84, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, rope_theta=1000000.0, tie_word_embeddings=False,
                         rms_norm_eps=1e-6),
    # Mistral: every layer slides with a window (4) shorter than the sequences.
    "mistral_sliding": dict(family="mistral", vocab_size=64, hidden_size=32, intermediate_size=56,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                            rope_theta=10000.0, tie_word_embeddings=False, sliding_window=4),
    # Gemma-2: soft-capping small enough to bite, alternating sliding (4) / global layers,
    # sandwich norms, query_pre_attn_scalar != head_dim.
    "gemma2_softcap": dict(family="gemma2", vocab_size=68, hidden_size=32, intermediate_size=48,
                           num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
                           attn_logit_softcapping=1.5, final_logit_softcapping=4.0,
                           rope_theta=10000.0, rms_norm_eps=1e-6),
}

# The families beyond the paper's Llama-2 / Gemma-v1.
NEW_FAMILIES = ("llama3_tied", "qwen2_bias", "qwen3_qknorm", "mistral_sliding", "gemma2_softcap")

_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
}


def make_torch_model(spec: dict, seed: int = 0):
    """A random transformers model whose weights are large enough for logits of order 1."""
    torch = pytest.importorskip("torch", reason="torch (CPU) is needed for the parity reference")
    import transformers

    spec = dict(spec)
    family = spec.pop("family")
    config_cls, model_cls = (getattr(transformers, n) for n in _CLASSES[family])
    cfg = config_cls(**spec, max_position_embeddings=256)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    gemma_style = family in ("gemma", "gemma2")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                # Non-trivial norm weights exercise Llama's w vs Gemma's (1 + w).
                offset = 0.0 if gemma_style else 1.0
                p.copy_(0.5 * torch.randn(p.shape, generator=gen) + offset)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / np.sqrt(p.shape[-1])))
    return model
