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
}


def make_torch_model(spec: dict, seed: int = 0):
    """A random transformers model whose weights are large enough for logits of order 1."""
    torch = pytest.importorskip("torch", reason="torch (CPU) is needed for the parity reference")
    import transformers

    spec = dict(spec)
    family = spec.pop("family")
    if family == "llama":
        cfg = transformers.LlamaConfig(**spec, max_position_embeddings=256)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.GemmaConfig(**spec, max_position_embeddings=256)
        cls = transformers.GemmaForCausalLM
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                # Non-trivial norm weights exercise Llama's w vs Gemma's (1 + w).
                p.copy_(0.5 * torch.randn(p.shape, generator=gen) + (0.0 if family == "gemma" else 1.0))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / np.sqrt(p.shape[-1])))
    return model

