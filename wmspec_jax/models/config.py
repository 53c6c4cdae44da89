"""Architecture description shared by the Llama and Gemma (v1) families.

A :class:`TransformerConfig` is a frozen, hashable dataclass, so it can be a
static argument of ``jax.jit``. :func:`config_from_hf` reads a Hugging Face
``config.json`` dictionary (both the transformers 4.x ``rope_theta`` /
``rope_scaling`` keys and the 5.x ``rope_parameters`` key) and rejects
anything this implementation would compute differently from the reference.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

FAMILIES = ("llama", "gemma")


class UnsupportedModelError(ValueError):
    """A checkpoint uses an architecture or option this package does not implement."""


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Static hyper-parameters of a decoder-only transformer.

    ``family`` selects the family-specific pieces:

    * ``"llama"``: RMSNorm ``w * x / rms(x)``, SwiGLU, no embedding scale.
    * ``"gemma"``: RMSNorm ``(1 + w) * x / rms(x)``, GeGLU (tanh gelu), the
      embedding multiplied by ``sqrt(hidden_size)`` rounded to the params dtype.

    ``rope_scaling`` is ``None`` or a tuple of ``(key, value)`` pairs (a
    tuple rather than a dict so the config stays hashable).
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

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UnsupportedModelError(
                f"unknown family {self.family!r}; supported: {FAMILIES}")
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

    @property
    def q_per_kv(self) -> int:
        """Query heads sharing one key/value head (GQA group size)."""
        return self.num_heads // self.num_kv_heads

    def replace(self, **changes) -> "TransformerConfig":
        return dataclasses.replace(self, **changes)

    def rope_inv_freq(self) -> np.ndarray:
        """float32[head_dim // 2] inverse frequencies, including any scaling.

        Mirrors ``transformers.modeling_rope_utils`` for the rope types we
        accept (``default``, ``linear``, ``llama3``).
        """
        dim = self.head_dim
        inv = 1.0 / (self.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64)
                                         .astype(np.float32) / dim))
        inv = inv.astype(np.float32)
        scaling = dict(self.rope_scaling or ())
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            return inv
        if kind == "linear":
            return (inv / float(scaling["factor"])).astype(np.float32)
        if kind == "llama3":
            factor = float(scaling["factor"])
            low = float(scaling["low_freq_factor"])
            high = float(scaling["high_freq_factor"])
            old_len = float(scaling["original_max_position_embeddings"])
            low_wavelen = old_len / low
            high_wavelen = old_len / high
            wavelen = 2 * math.pi / inv
            out = np.where(wavelen > low_wavelen, inv / factor, inv)
            smooth = (old_len / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * out / factor + smooth * out
            medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
            return np.where(medium, smoothed, out).astype(np.float32)
        raise UnsupportedModelError(f"unsupported rope scaling type {kind!r}")


def _family_of(hf: Mapping[str, Any]) -> str:
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type in FAMILIES:
        family = model_type
    else:
        raise UnsupportedModelError(
            f"unsupported architecture: model_type={model_type!r}, "
            f"architectures={archs!r}; supported model_type values: {FAMILIES} "
            "(Llama and Gemma v1)")
    known = {"llama": ("LlamaForCausalLM",), "gemma": ("GemmaForCausalLM",)}[family]
    bad = [a for a in archs if a not in known]
    if bad:
        raise UnsupportedModelError(
            f"unsupported architecture {bad!r} for model_type={model_type!r}; "
            f"expected one of {known}")
    return family


def _single_id(value) -> int | None:
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else None
    return None if value is None else int(value)


def config_from_hf(hf: Mapping[str, Any]) -> TransformerConfig:
    """Builds a :class:`TransformerConfig` from a parsed ``config.json``.

    Raises :class:`UnsupportedModelError` for other architectures and for
    options that change the computation but are not implemented (attention or
    MLP biases, sliding windows, unknown activations, rope types).
    """
    family = _family_of(hf)
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        raise UnsupportedModelError("attention_bias / mlp_bias are not supported")
    if family == "llama":
        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"Llama hidden_act {act!r} is not supported (silu only)")
    else:
        # HF maps Gemma's legacy "gelu" to the tanh approximation as well.
        act = hf.get("hidden_activation") or hf.get("hidden_act", "gelu_pytorch_tanh")
        if act not in ("gelu", "gelu_pytorch_tanh", "gelu_tanh"):
            raise UnsupportedModelError(f"Gemma activation {act!r} is not supported")
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise UnsupportedModelError("pretraining_tp > 1 is not supported")

    rope = dict(hf.get("rope_parameters") or {})
    theta = rope.pop("rope_theta", hf.get("rope_theta", 10000.0))
    scaling = rope or dict(hf.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ("default", "linear", "llama3"):
        raise UnsupportedModelError(f"unsupported rope scaling type {kind!r}")
    scaling_t = None if kind == "default" else tuple(sorted(
        (k, v) for k, v in scaling.items() if not isinstance(v, (list, dict))))

    hidden = int(hf["hidden_size"])
    heads = int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim") or hidden // heads
    default_tie = family == "gemma"
    return TransformerConfig(
        family=family,
        vocab_size=int(hf["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        rope_theta=float(theta),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", default_tie)),
        rope_scaling=scaling_t,
        bos_token_id=_single_id(hf.get("bos_token_id")),
        eos_token_id=_single_id(hf.get("eos_token_id")),
    )
