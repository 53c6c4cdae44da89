"""Functional transformers implementing the :mod:`wmspec_jax.lm` protocol.

Families: Llama-2 / Llama-3.x, Mistral, Qwen2 / Qwen2.5, Qwen3, Gemma, Gemma-2.

* :mod:`~wmspec_jax.models.config` — ``TransformerConfig`` (families and their options).
* :mod:`~wmspec_jax.models.hf_config` — ``config_from_hf``: config.json, every field accounted for.
* :mod:`~wmspec_jax.models.rope` — rotary embeddings (default, linear, llama3 scaling).
* :mod:`~wmspec_jax.models.norms` — RMSNorm in the Llama and Gemma styles.
* :mod:`~wmspec_jax.models.attention` — GQA over the cache: biases, q/k norms, sliding windows, soft-capping.
* :mod:`~wmspec_jax.models.transformer` — ``forward`` / ``hidden_states`` / ``lm_logits`` over a KV cache.
* :mod:`~wmspec_jax.models.cache` — static-shape ``KVCache`` with per-row lengths.
* :mod:`~wmspec_jax.models.protocol` — ``make_language_model`` (``step`` / ``rewind`` / ...), input checks.
* :mod:`~wmspec_jax.models.linear` — products in the config's weight layout; :mod:`~wmspec_jax.models.rows_matmul` —
  the CPU kernel for products with few rows, :mod:`~wmspec_jax.models.attention_kernel` — the one for attention of
  few queries (custom calls compiled on first use by :mod:`~wmspec_jax.models.cpu_kernels`).
* :mod:`~wmspec_jax.models.partitioning` — Megatron-style layout on a (data, model) mesh.
* :mod:`~wmspec_jax.models.hf` — local Hugging Face checkpoints: ``load_checkpoint``,
  ``load_pair``, ``check_compatible``, stop tokens.
* :mod:`~wmspec_jax.models.gguf_file`, :mod:`~wmspec_jax.models.gguf_loader`, :mod:`~wmspec_jax.models.tokenizer` — llama.cpp
  GGUF files (read, converted, tokenizer rebuilt).
* :mod:`~wmspec_jax.models.builtin` — the built-in SmolLM2-135M-Instruct target and its draft.
* :mod:`~wmspec_jax.models.pairs` — ``load_pair``: the pair a ``--target`` / ``--draft`` names (built-in, toy,
  checkpoints) and its prompts encoded and packed (``encode_prompts``, ``pack_prompts``).
* :mod:`~wmspec_jax.models.draft` — self-speculative drafts (layer subset + LoRA adapters).

Submodules are imported lazily by the caller; importing this package pulls in
only the config (no torch, no transformers, no file I/O).
"""

from wmspec_jax.models.config import TransformerConfig, UnsupportedModelError
from wmspec_jax.models.hf_config import config_from_hf

__all__ = ["TransformerConfig", "UnsupportedModelError", "config_from_hf"]
