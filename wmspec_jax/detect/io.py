"""Saving and loading fitted detectors (key-free).

Format ``wmspec-detector-v1``: one NumPy ``.npz`` archive holding

* ``__meta__`` — UTF-8 JSON: format tag, detector kind, its configuration
  (which always includes the PRF version, the context width h and the
  decoder) — everything needed to reuse the detector *except the secret
  key*, which the caller supplies again when computing statistics;
* ``param:<path>`` — one array per parameter leaf, ``<path>`` the
  ``/``-joined keys of the nested parameter dict (list items by index).

Loading refuses archives of another format or PRF version (statistics
computed with another hash construction would be meaningless) and
reconstructs the nested dict exactly. ``allow_pickle`` stays off.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from wmspec_jax import prf
from wmspec_jax.detect.common import KINDS, Detector

FORMAT = "wmspec-detector-v1"
_PREFIX = "param:"


def _flatten(tree, prefix: str, out: dict) -> None:
    if isinstance(tree, dict):
        for k, v in tree.items():
            if "/" in str(k) or not str(k):
                raise ValueError(f"parameter names must be non-empty and contain no '/': {k!r}")
            _flatten(v, f"{prefix}{k}/", out)
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            _flatten(v, f"{prefix}#{i}/", out)
    else:
        arr = np.asarray(tree)
        if arr.dtype == object:
            raise TypeError(f"parameter {prefix[:-1]!r} is not a numeric array")
        out[prefix[:-1]] = arr


def _insert(tree: dict, parts, value) -> None:
    head, rest = parts[0], parts[1:]
    if not rest:
        tree[head] = value
        return
    _insert(tree.setdefault(head, {}), rest, value)


def _lists(tree):
    """Turns dicts keyed '#0', '#1', ... back into lists."""
    if not isinstance(tree, dict):
        return tree
    tree = {k: _lists(v) for k, v in tree.items()}
    if tree and all(k.startswith("#") for k in tree):
        return [tree[f"#{i}"] for i in range(len(tree))]
    return tree


def _check_json(obj: Any, where: str = "config") -> None:
    if isinstance(obj, prf.WatermarkKey) or isinstance(obj, (bytes, bytearray)):
        raise TypeError(f"{where} holds key material ({type(obj).__name__}); detectors are saved key-free")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_json(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_json(v, f"{where}[{i}]")
    elif not (obj is None or isinstance(obj, (str, bool, int, float))):
        raise TypeError(f"{where} is not JSON-serialisable: {type(obj).__name__}")


def save_detector(path, detector: Detector) -> str:
    """Writes a fitted detector to ``path`` (``.npz`` appended if missing); returns the path."""
    if not isinstance(detector, Detector) or detector.kind not in KINDS:
        raise TypeError(f"expected a fitted Detector of kind {KINDS}, got {detector!r:.80}")
    config = dict(detector.config)
    _check_json(config)
    meta = json.dumps({"format": FORMAT, "kind": detector.kind, "config": config}, sort_keys=True)
    flat: dict = {}
    _flatten(dict(detector.params), "", flat)
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    arrays = {_PREFIX + k: v for k, v in flat.items()}
    np.savez(path, __meta__=np.frombuffer(meta.encode("utf-8"), np.uint8), **arrays)
    return path


def load_detector(path) -> Detector:
    """Reads a detector written by :func:`save_detector`.

    Raises:
      ValueError: not a detector archive, another format, or another PRF version.
    """
    with np.load(os.fspath(path), allow_pickle=False) as data:
        if "__meta__" not in data.files:
            raise ValueError(f"{path}: not a wmspec detector archive (no __meta__)")
        meta = json.loads(bytes(data["__meta__"]).decode("utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: unsupported detector format {meta.get('format')!r} (expected {FORMAT})")
        if meta.get("kind") not in KINDS:
            raise ValueError(f"{path}: unknown detector kind {meta.get('kind')!r}")
        version = meta["config"].get("prf_version")
        if version != prf.PRF_VERSION:
            raise ValueError(f"{path}: detector was built for PRF {version!r}, this package has {prf.PRF_VERSION!r}")
        params: dict = {}
        for name in data.files:
            if name.startswith(_PREFIX):
                _insert(params, name[len(_PREFIX):].split("/"), np.array(data[name]))
    return Detector(meta["kind"], meta["config"], _lists(params))
