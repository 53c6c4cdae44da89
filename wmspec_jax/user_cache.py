"""Where the package keeps what it can rebuild but should not rebuild on every run.

One directory, ``$WMSPEC_CACHE_DIR`` or ``~/.cache/wmspec_jax``: ``xla/`` (the
command-line tools' persistent compilation cache), ``executables/`` (their
generation loops, loaded without tracing: :mod:`wmspec_jax.executable_store`), ``tokenizers/`` (the
built-in tokenizer, which takes seconds to rebuild from the GGUF file's
metadata and a tenth of a second to load) and ``weights/`` (the built-in
target's dequantised float32 weights, ~0.5 GB, which take seconds to convert
and are mapped without a copy: :func:`wmspec_jax.models.gguf_loader.load_gguf_model`).
Everything in it is derived from files the package reads and keyed by their
identity and the library versions, so deleting it is always safe. ``WMSPEC_CACHE_DIR=""`` turns it off.
"""

from __future__ import annotations

import os
from typing import Optional

ENV_VAR = "WMSPEC_CACHE_DIR"


def directory(part: str) -> Optional[str]:
    """``<cache root>/<part>``, created; None when the cache is off or cannot be created."""
    root = os.environ.get(ENV_VAR)
    if root is None:
        root = os.path.join(os.path.expanduser("~"), ".cache", "wmspec_jax")
    if not root:
        return None
    path = os.path.join(root, part)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path if os.access(path, os.W_OK) else None


__all__ = ["ENV_VAR", "directory"]
