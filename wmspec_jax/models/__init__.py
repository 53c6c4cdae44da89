"""Functional transformers implementing the :mod:`wmspec_jax.lm` protocol.

* :mod:`~wmspec_jax.models.config` — ``TransformerConfig`` (Llama / Gemma v1), ``config_from_hf``.
* :mod:`~wmspec_jax.models.transformer` — ``forward`` / ``hidden_states`` / ``lm_logits`` over a KV cache.
* :mod:`~wmspec_jax.models.cache` — static-shape ``KVCache`` with per-row lengths.
* :mod:`~wmspec_jax.models.protocol` — ``make_language_model`` (``step`` / ``rewind`` / ...).
* :mod:`~wmspec_jax.models.hf` — local Hugging Face checkpoints: ``load_checkpoint``,
  ``load_pair``, ``check_compatible``.
* :mod:`~wmspec_jax.models.gguf_loader`, :mod:`~wmspec_jax.models.tokenizer` — llama.cpp GGUF files.
* :mod:`~wmspec_jax.models.builtin` — the built-in SmolLM2-135M-Instruct target and its draft.
* :mod:`~wmspec_jax.models.draft` — self-speculative drafts (layer subset + LoRA adapters).

Submodules are imported lazily by the caller; importing this package pulls in
only the config (no torch, no transformers, no file I/O).
"""

from wmspec_jax.models.config import TransformerConfig, UnsupportedModelError, config_from_hf

__all__ = ["TransformerConfig", "UnsupportedModelError", "config_from_hf"]
