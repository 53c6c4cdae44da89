"""Saving and loading fitted detectors (key-free).

Format ``wmspec-detector-v2``: one NumPy ``.npz`` archive holding

* ``__meta__`` — UTF-8 JSON: format tag, detector kind, its configuration,
  which always includes the detector's provenance (decoder, m, context width
  h, PRF version, and the key's *fingerprint* — a hash, never the key):
  everything needed to reuse the detector *except the secret*, which the
  caller supplies again when computing statistics (scoring then checks the
  fingerprint);
* ``param:<path>`` — one array per parameter leaf, ``<path>`` the
  ``/``-joined keys of the nested parameter dict (list items by index).

Any detector object (:class:`~wmspec_jax.detect.common.Detector`) saves: its
``kind``, ``config`` and ``params`` are the file; :func:`load_detector`
rebuilds the typed object through :func:`.registry.from_saved`.

Saving refuses secret-derived material of any type anywhere in the
detector: :class:`wmspec_jax.keys.Secret`, :class:`~wmspec_jax.keys.StreamKeys`,
``prf.WatermarkKey``, bytes, uint32 arrays (stream key words are uint32;
no detector parameter is) and typed ``jax.random`` keys. The file is written
atomically. Loading refuses other formats, other PRF versions and files that
are not ``.npz`` archives (``allow_pickle`` stays off); ``v1`` archives load
with an unknown key fingerprint.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import jax
import numpy as np

from wmspec_jax import keys as keys_lib
from wmspec_jax import prf, storage
from wmspec_jax.detect.common import KINDS, Detector, config_provenance
from wmspec_jax.detect.registry import from_saved

FORMAT = "wmspec-detector-v2"
_OLD_FORMATS = ("wmspec-detector-v1",)
_PREFIX = "param:"
_SECRET_TYPES = (keys_lib.Secret, keys_lib.StreamKeys, prf.WatermarkKey, bytes, bytearray, memoryview)


def _refuse_secret(obj, where: str) -> None:
    if isinstance(obj, _SECRET_TYPES):
        raise TypeError(f"{where} holds key material ({type(obj).__name__}); detectors are saved key-free")
    dtype = getattr(obj, "dtype", None)
    if dtype is not None:
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            raise TypeError(f"{where} is a jax.random key; detectors are saved key-free")
        if np.dtype(dtype) == np.uint32:
            raise TypeError(f"{where} is a uint32 array, the type of watermark stream key words; detectors are "
                            "saved key-free (store such data elsewhere)")


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
        _refuse_secret(tree, f"parameter {prefix[:-1]!r}")
        arr = np.asarray(tree)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise TypeError(f"parameter {prefix[:-1]!r} is not a numeric array")
        _refuse_secret(arr, f"parameter {prefix[:-1]!r}")
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
    _refuse_secret(obj, where)
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_json(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_json(v, f"{where}[{i}]")
    elif not (obj is None or isinstance(obj, (str, bool, int, float))):
        raise TypeError(f"{where} is not JSON-serialisable: {type(obj).__name__}")


def save_detector(path, detector: Detector) -> str:
    """Writes a fitted detector to ``path`` atomically (``.npz`` appended if missing); returns the path.

    Raises:
      TypeError: the detector holds key material (module doc) or non-JSON config.
    """
    if not isinstance(detector, Detector) or detector.kind not in KINDS:
        raise TypeError(f"expected a detector of kind {KINDS}, got {type(detector).__name__}")
    config = dict(detector.config)
    _check_json(config)
    config_provenance(config)  # a valid provenance record
    meta = json.dumps({"format": FORMAT, "kind": detector.kind, "config": config}, sort_keys=True)
    flat: dict = {}
    _flatten(dict(detector.params), "", flat)
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    arrays = {_PREFIX + k: v for k, v in flat.items()}
    storage.atomic_savez(path, __meta__=np.frombuffer(meta.encode("utf-8"), np.uint8), **arrays)
    return path


def load_detector(path) -> Detector:
    """Reads a detector written by :func:`save_detector`: the typed object of its kind (:mod:`.registry`).

    Raises:
      ValueError: not a detector archive (e.g. not an ``.npz`` file),
        another format, or another PRF version.
    """
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):  # np.load would try pickle and suggest allow_pickle
        raise ValueError(f"{path}: not a wmspec detector archive (expected an .npz file written by save_detector)")
    with np.load(path, allow_pickle=False) as data:
        if "__meta__" not in data.files:
            raise ValueError(f"{path}: not a wmspec detector archive (no __meta__)")
        try:
            meta = json.loads(bytes(data["__meta__"]).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: corrupt detector metadata ({e})") from None
        fmt = meta.get("format")
        if fmt != FORMAT and fmt not in _OLD_FORMATS:
            raise ValueError(f"{path}: unsupported detector format {fmt!r} (expected {FORMAT})")
        if meta.get("kind") not in KINDS:
            raise ValueError(f"{path}: unknown detector kind {meta.get('kind')!r}")
        version = meta["config"].get("prf_version")
        if version != prf.PRF_VERSION:
            raise ValueError(f"{path}: detector was built for PRF {version!r}, this package has {prf.PRF_VERSION!r}")
        params: dict = {}
        for name in data.files:
            if name.startswith(_PREFIX):
                _insert(params, name[len(_PREFIX):].split("/"), np.array(data[name]))
    params = _lists(params)
    config = meta["config"]
    if fmt == "wmspec-detector-v1" and isinstance(params.get("mlp"), list):
        # v1 stored the MLP as [{"w", "b"}] * 3; v2 as the TauMLP module's nnx.Param dict
        params["mlp"] = {name: {"kernel": layer["w"], "bias": layer["b"]}
                         for name, layer in zip(("hidden1", "hidden2", "output"), params["mlp"])}
    config_provenance(config)
    return from_saved(meta["kind"], config, params)


__all__ = ["FORMAT", "load_detector", "save_detector"]
