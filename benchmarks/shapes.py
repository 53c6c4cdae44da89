"""Random-init model pairs of fixed shapes for the benchmarks (no checkpoints needed).

* ``tiny_llama_pair``: the shape used to compare with the paper's PyTorch code:
  a 2-layer Llama target, d = 128, 4 heads, V = 32000, and a
  1-layer draft of the same width. The weights are random (seeded), so
  acceptance is whatever random models give; the benchmark reports time per
  step as well as per token.
* ``paper_pair``: targets and drafts shaped like the paper's pairs
  (Llama-2-7B + Llama-68M, Gemma-7B + Gemma-2B), full or reduced by a factor,
  in any dtype; used by ``bench_paper_scale.py``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig

TINY_LLAMA = TransformerConfig(family="llama", vocab_size=32000, hidden_size=128, intermediate_size=344,
                               num_layers=2, num_heads=4, num_kv_heads=4, head_dim=32, tie_word_embeddings=False)

# Shapes from the public config.json of each checkpoint.
PAPER_SHAPES = {
    "llama2-7b": TransformerConfig(family="llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                   num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128,
                                   tie_word_embeddings=False, rms_norm_eps=1e-5),
    "llama-68m": TransformerConfig(family="llama", vocab_size=32000, hidden_size=768, intermediate_size=3072,
                                   num_layers=2, num_heads=12, num_kv_heads=12, head_dim=64,
                                   tie_word_embeddings=False, rms_norm_eps=1e-6),
    "gemma-7b": TransformerConfig(family="gemma", vocab_size=256000, hidden_size=3072, intermediate_size=24576,
                                  num_layers=28, num_heads=16, num_kv_heads=16, head_dim=256),
    "gemma-2b": TransformerConfig(family="gemma", vocab_size=256000, hidden_size=2048, intermediate_size=16384,
                                  num_layers=18, num_heads=8, num_kv_heads=1, head_dim=256),
}
PAPER_PAIRS = {"llama2": ("llama2-7b", "llama-68m"), "gemma": ("gemma-7b", "gemma-2b")}


@dataclasses.dataclass(frozen=True)
class RandomPair:
    name: str
    target: object
    target_params: dict
    draft: object
    draft_params: dict
    target_config: TransformerConfig
    draft_config: TransformerConfig


def _model(config: TransformerConfig, seed: int, dtype, name: str):
    params = transformer.init_params(config, jax.random.key(seed), dtype=dtype)
    return protocol.make_language_model(config, name=name, dtype=dtype), params


def tiny_llama_pair(dtype=jnp.float32) -> RandomPair:
    draft_config = TINY_LLAMA.replace(num_layers=1)
    target, tp = _model(TINY_LLAMA, 0, dtype, "tiny-llama-2l")
    draft, dp = _model(draft_config, 1, dtype, "tiny-llama-1l")
    return RandomPair("tiny-llama", target, tp, draft, dp, TINY_LLAMA, draft_config)


def reduce(config: TransformerConfig, factor: int) -> TransformerConfig:
    """The same architecture with width, depth and vocabulary divided by ``factor`` (CPU runs)."""
    if factor == 1:
        return config
    heads = max(1, config.num_heads // factor)
    kv = max(1, min(heads, config.num_kv_heads // factor))
    while heads % kv:
        kv -= 1
    return config.replace(hidden_size=max(64, config.hidden_size // factor),
                          intermediate_size=max(64, config.intermediate_size // factor),
                          num_layers=max(1, config.num_layers // factor), num_heads=heads, num_kv_heads=kv,
                          head_dim=max(16, config.head_dim // factor),
                          vocab_size=max(1024, config.vocab_size // factor))


def paper_pair(which: str, factor: int = 1, dtype=jnp.bfloat16) -> RandomPair:
    target_name, draft_name = PAPER_PAIRS[which]
    tc, dc = reduce(PAPER_SHAPES[target_name], factor), reduce(PAPER_SHAPES[draft_name], factor)
    dc = dc.replace(vocab_size=tc.vocab_size)
    target, tp = _model(tc, 0, dtype, target_name)
    draft, dp = _model(dc, 1, dtype, draft_name)
    return RandomPair(which, target, tp, draft, dp, tc, dc)


def param_bytes(params) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
