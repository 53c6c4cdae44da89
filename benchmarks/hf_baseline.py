"""Hugging Face ``transformers`` generation as a speed baseline (PyTorch; optional, for benchmarks only).

Builds a random ``transformers`` model with the shape of a
:class:`~wmspec_jax.models.config.TransformerConfig` (Llama or Gemma family)
and times ``generate`` with a fixed number of new tokens, by default with
its static cache (``cache_implementation="static"``; on CUDA ``transformers``
then compiles the forward with ``torch.compile`` on its own, the fastest
setting it offers) and with its default dynamic cache ("eager"). Sampling at
temperature 1 with top-k and top-p off, as our plain decoding at T = 1.

Used by ``benchmarks/bench_paper_scale.py`` (``--hf_baseline``), which
interleaves these calls with its own methods. torch is imported lazily;
nothing in the package needs it.
"""

from __future__ import annotations

import time

from wmspec_jax.models.config import TransformerConfig

_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "gemma": ("GemmaConfig", "GemmaForCausalLM")}


def available(require_gpu: bool = True) -> tuple[bool, str]:
    """(whether the baseline can run, why not): torch and transformers importable, and a CUDA
    device unless ``require_gpu`` is False."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        return False, f"torch / transformers not importable ({e})"
    if require_gpu and not torch.cuda.is_available():
        return False, "no CUDA device for torch"
    return True, ""


def torch_model(config: TransformerConfig, dtype: str = "bfloat16", device: str | None = None):
    """A random-weight ``transformers`` causal LM of ``config``'s shape, on ``device`` (default:
    CUDA when available, else CPU), in ``dtype``, in eval mode."""
    import torch
    import transformers

    if config.family not in _CLASSES:
        raise ValueError(f"no transformers baseline for family {config.family!r} (have {sorted(_CLASSES)})")
    config_cls, model_cls = (getattr(transformers, n) for n in _CLASSES[config.family])
    hf_config = config_cls(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim, rms_norm_eps=config.rms_norm_eps, rope_theta=config.rope_theta,
        tie_word_embeddings=config.tie_word_embeddings, max_position_embeddings=4096)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = getattr(torch, dtype)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)  # the weights are created in dtype, not cast after
    try:
        with torch.device(device):
            model = model_cls(hf_config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


# our layer param -> its transformers module inside ``model.layers.{i}.`` (Llama family)
_LAYER_NAMES = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
                "wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
                "wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj",
                "w_down": "mlp.down_proj"}


def load_weights(model, config: TransformerConfig, params: dict) -> None:
    """Copies our params (``in_out`` layout, Llama family) into ``model`` from :func:`torch_model`, so
    that both run the same weights (e.g. the built-in target's, dequantised from its GGUF file)."""
    import numpy as np
    import torch

    if config.weight_layout != "in_out" or config.family != "llama":
        raise ValueError("load_weights copies Llama-family params in the in_out layout")
    state = {"model.embed_tokens.weight": params["embed"], "model.norm.weight": params["final_norm"]}
    if not config.tie_word_embeddings:
        state["lm_head.weight"] = np.asarray(params["lm_head"]).T
    for i, lp in enumerate(params["layers"]):
        for ours, theirs in _LAYER_NAMES.items():
            w = np.asarray(lp[ours])
            state[f"model.layers.{i}.{theirs}.weight"] = w.T if w.ndim == 2 else w
    tensors = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()}  # writable copies
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"weights do not match the torch model: missing {missing[:4]}, unexpected {unexpected[:4]}")
    if config.tie_word_embeddings:
        model.tie_weights()


def generate_call(model, batch_size: int, prompt_length: int, new_tokens: int, static_cache: bool = True,
                  seed: int = 0):
    """A function running one ``model.generate`` of exactly ``new_tokens`` per row on random
    prompts and waiting for the device; it returns the number of new tokens generated."""
    import torch

    device = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch_size, prompt_length), generator=gen).to(device)
    mask = torch.ones_like(ids)
    kwargs = dict(attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                  temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
    if static_cache:
        kwargs["cache_implementation"] = "static"

    def call() -> int:
        with torch.no_grad():
            out = model.generate(ids, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return int((out.shape[1] - prompt_length) * batch_size)

    return call


def time_once(call) -> tuple[float, int]:
    """(seconds, tokens) of one call."""
    t0 = time.perf_counter()
    tokens = call()
    return time.perf_counter() - t0, tokens
