"""Hugging Face ``config.json`` -> :class:`~wmspec_jax.models.config.TransformerConfig`.

Every field of a config is accounted for, per family:

* **read**: it sets a :class:`TransformerConfig` field (sizes, RoPE, sliding
  windows, soft-capping, ...); missing optional fields take transformers'
  class defaults for that family, so a config means what it means there;
* **checked**: it must hold the one value implemented here (e.g.
  ``attention_bias: false``, ``use_mrope: false``, ``pretraining_tp: 1``);
* **no effect on the forward pass**: bookkeeping (``transformers_version``,
  ``torch_dtype``), training-only settings (``initializer_range``,
  ``attention_dropout``: dropout is off at inference) and generation-time
  settings (``use_cache``, ``pad_token_id``, ``cache_implementation``).

Any other field is refused by name (:class:`UnsupportedModelError`): a field
we do not know could change the computation (``quantization_config``,
``rope_scaling`` of a type we lack, ...) and is never silently ignored.
Both the transformers 4.x (``rope_theta`` + ``rope_scaling``) and 5.x
(``rope_parameters``) spellings are read.
"""

from __future__ import annotations

from typing import Any, Mapping

from wmspec_jax.models import rope
from wmspec_jax.models.config import (FULL_ATTENTION, GEMMA_FAMILIES, SLIDING_ATTENTION,
                                      TransformerConfig, UnsupportedModelError)

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
}

REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads")

_COMMON = frozenset({
    "model_type", "architectures", *REQUIRED, "num_key_value_heads", "head_dim",
    "rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "tie_word_embeddings",
    "bos_token_id", "eos_token_id", "max_position_embeddings", "hidden_act",
    # no effect on the forward pass (see module doc)
    "_name_or_path", "transformers_version", "torch_dtype", "dtype", "initializer_range",
    "use_cache", "pad_token_id", "attention_dropout", "output_attentions",
    "output_hidden_states", "return_dict", "tokenizer_class", "_from_model_config",
})

_FAMILY_KEYS = {
    "llama": {"attention_bias", "mlp_bias", "pretraining_tp"},
    "mistral": {"sliding_window"},
    "qwen2": {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types",
              "use_mrope"},
    "qwen3": {"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers",
              "layer_types"},
    "gemma": {"attention_bias", "hidden_activation", "use_bidirectional_attention"},
    "gemma2": {"attention_bias", "hidden_activation", "query_pre_attn_scalar", "sliding_window",
               "sliding_window_size", "layer_types", "final_logit_softcapping",
               "attn_logit_softcapping", "use_bidirectional_attention", "cache_implementation"},
}

# transformers' class defaults for fields a config.json may omit.
_DEFAULTS = {
    "llama": {"max_position_embeddings": 2048},
    "mistral": {"max_position_embeddings": 4096 * 32, "sliding_window": 4096},
    "qwen2": {"max_position_embeddings": 32768, "sliding_window": 4096, "max_window_layers": 28},
    "qwen3": {"max_position_embeddings": 32768, "sliding_window": 4096, "max_window_layers": 28,
              "head_dim": 128},
    "gemma": {"max_position_embeddings": 8192, "head_dim": 256},
    "gemma2": {"max_position_embeddings": 8192, "head_dim": 256, "query_pre_attn_scalar": 256,
               "sliding_window": 4096, "final_logit_softcapping": 30.0,
               "attn_logit_softcapping": 50.0},
}

_TANH_GELU = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new")


def _family_of(hf: Mapping[str, Any]) -> str:
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type not in ARCHITECTURES:
        raise UnsupportedModelError(
            f"unsupported architecture: model_type={model_type!r}, architectures={archs!r}; "
            f"supported model_type values: {tuple(ARCHITECTURES)}")
    bad = [a for a in archs if a != ARCHITECTURES[model_type]]
    if bad:
        raise UnsupportedModelError(
            f"unsupported architecture {bad!r} for model_type={model_type!r}; "
            f"expected {ARCHITECTURES[model_type]!r}")
    return model_type


def _single_id(value) -> int | None:
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else None
    return None if value is None else int(value)


def _refuse_unless(cond: bool, field: str, value, implemented: str) -> None:
    if not cond:
        raise UnsupportedModelError(
            f"config field {field}={value!r} is not supported (implemented: {implemented})")


def _check_fields(hf: Mapping[str, Any], family: str) -> None:
    """Unknown fields and fields whose value we do not implement, by name."""
    unknown = sorted(set(hf) - _COMMON - _FAMILY_KEYS[family])
    if unknown:
        raise UnsupportedModelError(
            f"config fields not implemented for model_type={family!r}: {unknown}")
    for field in ("attention_bias", "mlp_bias", "use_mrope", "use_bidirectional_attention"):
        if field in hf:
            _refuse_unless(not hf[field], field, hf[field], "false")
    if "pretraining_tp" in hf:
        _refuse_unless(hf["pretraining_tp"] in (1, None), "pretraining_tp", hf["pretraining_tp"], "1")
    if family in GEMMA_FAMILIES:
        acts = {"hidden_activation": hf.get("hidden_activation")}
        # transformers maps Gemma v1's legacy hidden_act="gelu" to the tanh approximation.
        acts["hidden_act"] = hf.get("hidden_act")
        legacy = ("gelu",) if family == "gemma" else ()
        for field, act in acts.items():
            if act is not None:
                _refuse_unless(act in _TANH_GELU + legacy, field, act, "gelu_pytorch_tanh")
    else:
        act = hf.get("hidden_act", "silu")
        _refuse_unless(act == "silu", "hidden_act", act, "silu")


def _rope(hf: Mapping[str, Any]) -> tuple[float, tuple | None]:
    params = dict(hf.get("rope_parameters") or {})
    theta = params.pop("rope_theta", hf.get("rope_theta", 10000.0))
    scaling = params or dict(hf.get("rope_scaling") or {})
    theta = scaling.pop("rope_theta", theta)  # some 4.x configs repeat it there
    if any(isinstance(v, Mapping) for v in scaling.values()):
        raise UnsupportedModelError(
            f"per-layer-type rope_parameters are not supported: {sorted(scaling)}")
    kind = rope.rope_type(scaling)
    if kind not in rope.ROPE_TYPES:
        raise UnsupportedModelError(
            f"unsupported rope scaling type {kind!r}; supported: {rope.ROPE_TYPES}")
    if kind == "default":
        return float(theta), None
    allowed = {"rope_type", "type", "factor"} | (set(rope.LLAMA3_KEYS) if kind == "llama3" else set())
    extra = sorted(set(scaling) - allowed)
    if extra:
        raise UnsupportedModelError(f"rope scaling fields not implemented for {kind!r}: {extra}")
    return float(theta), tuple(sorted(scaling.items()))


def _sliding(hf: Mapping[str, Any], family: str, num_layers: int, defaults: dict):
    """(sliding_window, layer_types) with transformers' per-family rules."""
    window = hf.get("sliding_window", defaults.get("sliding_window"))
    if family == "mistral":
        return window, None  # every layer, when set
    if family in ("qwen2", "qwen3"):
        window = window if hf.get("use_sliding_window", False) else None
        types = hf.get("layer_types")
        if types is None:
            first = int(hf.get("max_window_layers", defaults["max_window_layers"]))
            types = [SLIDING_ATTENTION if window is not None and i >= first else FULL_ATTENTION
                     for i in range(num_layers)]
        return window, tuple(types)
    if family == "gemma2":
        legacy = hf.get("sliding_window_size")
        if legacy is not None and legacy != window:
            raise UnsupportedModelError(
                f"sliding_window={window!r} and sliding_window_size={legacy!r} disagree")
        types = hf.get("layer_types") or [
            SLIDING_ATTENTION if (i + 1) % 2 else FULL_ATTENTION for i in range(num_layers)]
        return window, tuple(types)
    return None, None


def config_from_hf(hf: Mapping[str, Any]) -> TransformerConfig:
    """Builds a :class:`TransformerConfig` from a parsed ``config.json`` (module doc).

    Raises:
      UnsupportedModelError: another architecture, or a field (or field
        value) this package does not implement, named in the message.
      ValueError: a required field is missing or a value has the wrong type.
    """
    family = _family_of(hf)
    _check_fields(hf, family)
    missing = [k for k in REQUIRED if hf.get(k) is None]
    if missing:
        raise ValueError(f"config is missing required field(s) {missing}")
    defaults = _DEFAULTS[family]
    try:
        theta, scaling = _rope(hf)
        hidden = int(hf["hidden_size"])
        heads = int(hf["num_attention_heads"])
        layers = int(hf["num_hidden_layers"])
        head_dim = hf.get("head_dim") or defaults.get("head_dim") or hidden // heads
        window, layer_types = _sliding(hf, family, layers, defaults)
        gemma2 = family == "gemma2"

        def opt_float(key):
            value = hf.get(key, defaults.get(key)) if gemma2 else None
            return None if value is None else float(value)

        return TransformerConfig(
            family=family,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            rope_theta=theta,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", family in GEMMA_FAMILIES)),
            rope_scaling=scaling,
            bos_token_id=_single_id(hf.get("bos_token_id")),
            eos_token_id=_single_id(hf.get("eos_token_id")),
            max_position_embeddings=int(hf.get("max_position_embeddings")
                                        or defaults["max_position_embeddings"]),
            qkv_bias=family == "qwen2",
            qk_norm=family == "qwen3",
            sliding_window=None if window is None else int(window),
            layer_types=layer_types,
            attn_logit_softcap=opt_float("attn_logit_softcapping"),
            final_logit_softcap=opt_float("final_logit_softcapping"),
            query_pre_attn_scalar=opt_float("query_pre_attn_scalar"),
            sandwich_norms=gemma2,
        )
    except (TypeError, KeyError) as e:
        raise ValueError(f"config has a malformed field: {e!r}") from e


__all__ = ["ARCHITECTURES", "REQUIRED", "config_from_hf"]
