"""Architecture description of the decoder-only families this package runs.

A :class:`TransformerConfig` is a frozen, hashable dataclass, so it can be a
static argument of ``jax.jit``. ``family`` names the Hugging Face
``model_type`` a config came from and fixes the family-wide choices (norm
style, activation, embedding scale); the per-checkpoint options of the newer
families are explicit fields, so one functional transformer serves all of
them:

============  =========================================================================
family        what differs from Llama
============  =========================================================================
``llama``     (Llama-2, Llama-3.x: ``rope_scaling`` type ``llama3``, tied embeddings for 1B/3B)
``mistral``   ``sliding_window`` on every layer
``qwen2``     bias on the q/k/v projections (``qkv_bias``); optional sliding layers
``qwen3``     RMSNorm of every query / key head before RoPE (``qk_norm``)
``gemma``     RMSNorm ``(1 + w)``, GeGLU (tanh gelu), embedding times ``sqrt(hidden_size)``
``gemma2``    Gemma's choices plus attention / final-logit soft-capping, alternating
              sliding / global layers (``layer_types``), post-attention and
              post-feed-forward norms (``sandwich_norms``), attention scaled by
              ``query_pre_attn_scalar ** -0.5``
============  =========================================================================

:func:`~wmspec_jax.models.hf_config.config_from_hf` (also ``wmspec_jax.models.config_from_hf``)
reads a ``config.json`` and refuses, by name, every field it does not
implement.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from wmspec_jax.models import rope

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
GEMMA_FAMILIES = ("gemma", "gemma2")
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
# Window of a global layer in attention_windows(): larger than any position.
GLOBAL_WINDOW = 2 ** 30
# How the layers' matrices are stored: ``in_out`` ([in, out], ``x @ w``) or ``out_in`` ([out, in],
# PyTorch's ``nn.Linear.weight`` and GGUF's layout, products as ``w @ x^T``). See
# :mod:`wmspec_jax.models.transformer` for what each costs.
WEIGHT_LAYOUTS = ("in_out", "out_in")


class UnsupportedModelError(ValueError):
    """A checkpoint uses an architecture or option this package does not implement."""


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Static hyper-parameters of a decoder-only transformer (see module doc).

    ``rope_scaling`` is ``None`` or a tuple of ``(key, value)`` pairs (a
    tuple rather than a dict so the config stays hashable). ``layer_types``
    is ``None`` (every layer ``sliding_attention`` when ``sliding_window`` is
    set, else ``full_attention``) or one entry per layer.
    ``max_position_embeddings`` (``None``: unlimited) bounds the KV cache.
    ``weight_layout`` (one of :data:`WEIGHT_LAYOUTS`) says how the params store their matrices:
    the same model in either layout gives the same logits up to float rounding
    (:func:`wmspec_jax.models.transformer.to_weight_layout` converts). ``row_kernel``: in ``out_in``,
    float32 products with at most :data:`wmspec_jax.models.rows_matmul.MAX_ROWS` rows run on the CPU
    kernel of :mod:`wmspec_jax.models.rows_matmul` where it is built, and attention of at most
    :data:`wmspec_jax.models.attention_kernel.MAX_QUERIES` queries per row on the kernel of
    :mod:`wmspec_jax.models.attention_kernel` (False: XLA's dot and attention loop for all).
    """

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    max_position_embeddings: int | None = None
    qkv_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    query_pre_attn_scalar: float | None = None
    sandwich_norms: bool = False
    weight_layout: str = "in_out"
    row_kernel: bool = True

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UnsupportedModelError(
                f"unknown family {self.family!r}; supported: {FAMILIES}")
        if self.weight_layout not in WEIGHT_LAYOUTS:
            raise ValueError(f"weight_layout must be one of {WEIGHT_LAYOUTS}, got {self.weight_layout!r}")
        if not isinstance(self.row_kernel, bool):
            raise ValueError(f"row_kernel must be a bool, got {self.row_kernel!r}")
        for name in ("vocab_size", "hidden_size", "intermediate_size",
                     "num_layers", "num_heads", "num_kv_heads", "head_dim"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        for name in ("max_position_embeddings", "sliding_window"):
            value = getattr(self, name)
            if value is not None and int(value) <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        for name in ("attn_logit_softcap", "final_logit_softcap", "query_pre_attn_scalar"):
            value = getattr(self, name)
            if value is not None and not float(value) > 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_layers:
                raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                                 f"{self.num_layers} layers")
            bad = sorted(set(self.layer_types) - {FULL_ATTENTION, SLIDING_ATTENTION})
            if bad:
                raise UnsupportedModelError(f"unsupported layer_types {bad}")
            if SLIDING_ATTENTION in self.layer_types and self.sliding_window is None:
                raise ValueError("layer_types names sliding_attention layers but sliding_window is None")
        try:
            self.rope_inv_freq()
        except rope.UnsupportedRopeError as e:
            raise UnsupportedModelError(str(e)) from None

    @property
    def q_per_kv(self) -> int:
        """Query heads sharing one key/value head (GQA group size)."""
        return self.num_heads // self.num_kv_heads

    @property
    def gemma_style(self) -> bool:
        """RMSNorm ``(1 + w)``, tanh-GeGLU and a ``sqrt(D)`` embedding scale."""
        return self.family in GEMMA_FAMILIES

    @property
    def attention_scale(self) -> float:
        """Multiplier of q.k: ``query_pre_attn_scalar ** -0.5`` (Gemma-2) or ``head_dim ** -0.5``."""
        return float(self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def replace(self, **changes) -> "TransformerConfig":
        return dataclasses.replace(self, **changes)

    def select_layers(self, layers) -> "TransformerConfig":
        """The config of a model made of the given layers of this one (self-speculative drafts)."""
        layers = [int(i) for i in layers]
        types = None if self.layer_types is None else tuple(self.layer_types[i] for i in layers)
        return self.replace(num_layers=len(layers), layer_types=types)

    def attention_windows(self) -> np.ndarray:
        """int32[L] per-layer window: a query at p sees slots ``(p - w, p]`` (GLOBAL_WINDOW: all)."""
        types = self.layer_types
        if types is None:
            types = (SLIDING_ATTENTION if self.sliding_window else FULL_ATTENTION,) * self.num_layers
        return np.asarray([self.sliding_window if t == SLIDING_ATTENTION else GLOBAL_WINDOW
                           for t in types], np.int32)

    def rope_inv_freq(self) -> np.ndarray:
        """float32[head_dim // 2] inverse frequencies, including any scaling (:mod:`.rope`)."""
        return rope.inv_frequencies(self.head_dim, self.rope_theta, dict(self.rope_scaling or ()))


__all__ = ["FAMILIES", "TransformerConfig", "UnsupportedModelError", "WEIGHT_LAYOUTS"]
