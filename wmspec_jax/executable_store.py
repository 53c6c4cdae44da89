"""Compiled programs kept on disk and loaded without tracing: a fresh process's start-up.

JAX's persistent compilation cache (which the command-line tools turn on) keys a compiled program by
its lowered HLO, so every process traces and lowers a program before it can look it up: for the
generation loop of the built-in pair that is about 0.8 s of a 5 s one-text ``wmspec-generate``. This
store keys the compiled executable by what fixes the program before tracing and loads it with
:mod:`jax.experimental.serialize_executable`, so a warm process skips tracing and lowering.

**The key** is a SHA-256 over

* the package's source: the path and bytes of every ``.py`` file of ``wmspec_jax`` (an edit or an
  upgrade gives new keys);
* the Python, JAX, jaxlib, NumPy and ml_dtypes versions, the CPU kernels' sources and whether they are
  built (:func:`wmspec_jax.models.cpu_kernels.fingerprint`), the backend's platform and platform
  version, the devices (kind, id, process) and the number of processes;
* ``XLA_FLAGS`` and every ``JAX_*``, ``XLA_*`` and ``TPU_*`` environment variable, and
  ``jax.config``'s values;
* the program's name and a description of each static argument that does not depend on the process
  (:func:`describe`: a model by the package functions and settings it was built from, a config by
  its class and every field, the decoders it holds included);
* the other arguments' tree structure, shapes, dtypes, weak types and shardings.

A static argument without such a description (a model built by a user's own code, a decoder class
from outside the package, a model whose cache is split over a mesh) turns the store off for that
call, which then compiles through ``jax.jit`` as usual; so do several JAX processes and a store that
is not enabled (:func:`enable`; the tools enable it beside JAX's cache). The arguments' values
(weights, keys, prompts) are never part of a program.

**Safety.** An entry is JAX's serialised executable, a pickle: loading one can run code. Entries are
written with mode 0600 into a directory of mode 0700, and only files owned by this user, in a
directory owned by this user, neither writable by group or others, are ever read; a damaged or
foreign entry is ignored (compiled anew and replaced). Only a program this process compiled is
stored, never one JAX loaded from its persistent cache (XLA:CPU serialises a loaded executable
again without some of its kernels): the store's compilation bypasses that cache (:func:`_compile`).
The ``MAX_ENTRIES`` most recently used entries are kept (about 1 MB each for the built-in pair).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
import zlib
from typing import Callable, Optional, Sequence

from wmspec_jax import storage, user_cache

FORMAT = 1
MAX_ENTRIES = 16
SUFFIX = ".executable"
_ENV_PREFIXES = ("JAX_", "XLA_", "TPU_")

_state = {"directory": None, "source": None}
_loaded: dict = {}  # key -> jax.stages.Compiled, this process


def enable(directory: Optional[str]) -> Optional[str]:
    """Keeps compiled programs in ``directory`` (created with mode 0700); None turns the store off.

    Returns the directory, or None when it cannot be used safely (not owned by this user, or
    writable by group or others).
    """
    _state["directory"] = None
    if not directory:
        return None
    with contextlib.suppress(OSError):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.stat(directory)
        if user_cache.owned_by_user(st) and st.st_mode & 0o077:
            os.chmod(directory, 0o700)
    if not user_cache.private(directory):
        return None
    _state["directory"] = directory
    return directory


def forget() -> None:
    """Drops the programs this process loaded or compiled through the store (each holds its
    machine code mapped while kept); a later call loads them from the store again."""
    _loaded.clear()


def discard(program) -> None:
    """Removes ``program`` (returned by :func:`compiled`) from this process and its entry from the
    store: a stored program that failed to run is compiled anew by the next process."""
    for k, p in list(_loaded.items()):
        if p is program:
            del _loaded[k]
            folder = _state["directory"]
            if folder is not None:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, k + SUFFIX))


def directory() -> Optional[str]:
    """The enabled store's directory, or None."""
    return _state["directory"]


def _multi_process() -> bool:
    # a program of several processes is compiled by each (their devices differ); never stored
    import jax

    return jax.process_count() > 1


def source_digest() -> str:
    """SHA-256 over the path and bytes of every ``.py`` file of the package (computed once)."""
    if _state["source"] is None:
        root = os.path.dirname(os.path.abspath(__file__))
        h = hashlib.sha256()
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
        _state["source"] = h.hexdigest()
    return _state["source"]


def _environment() -> list:
    import jax
    import jaxlib
    import ml_dtypes
    import numpy

    devices = jax.devices()
    client = devices[0].client
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))
    config = sorted((k, repr(v)) for k, v in jax.config.values.items())
    from wmspec_jax.models import cpu_kernels

    return [sys.version, jax.__version__, jaxlib.__version__, numpy.__version__, ml_dtypes.__version__,
            cpu_kernels.fingerprint(),  # also registers the kernels before a stored program is loaded
            client.platform, client.platform_version,
            [(d.device_kind, d.id, d.process_index) for d in devices], jax.process_count(), env, config]


def _arguments(dynamic: Sequence) -> list:
    import jax

    leaves, tree = jax.tree_util.tree_flatten(tuple(dynamic))
    described = [repr(tree)]
    for leaf in leaves:
        aval = jax.typeof(leaf)
        described.append((str(aval), bool(getattr(aval, "weak_type", False)),
                          repr(getattr(leaf, "sharding", None))))
    return described


def key(name: str, statics: Sequence[Optional[str]], dynamic: Sequence) -> Optional[str]:
    """The store's key of program ``name`` (module doc), or None when a static argument has no
    description (``None`` in ``statics``)."""
    if any(s is None for s in statics):
        return None
    parts = [FORMAT, source_digest(), _environment(), name, list(statics), _arguments(dynamic)]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def compiled(name: str, jitted, args: tuple, num_static: int,
             statics: Sequence[Optional[str]]) -> Optional[Callable]:
    """The compiled ``jitted`` for ``args`` (its first ``num_static`` positional arguments static,
    described by ``statics``), from this process, the store, or compiled and stored now.

    Returns a callable of the other arguments, or None when the store is off or a static argument
    has no description (the caller then calls ``jitted`` itself).
    """
    folder = _state["directory"]
    if folder is None or _multi_process():
        return None
    k = key(name, statics, args[num_static:])
    if k is None:
        return None
    if k in _loaded:
        return _loaded[k]
    path = os.path.join(folder, k + SUFFIX)
    program = _read(path, k)
    if program is None:
        program, fresh = _compile(jitted, args)
        if fresh:
            _write(folder, path, k, program)
    _loaded[k] = program
    return program


# The default value of a debug option: the same program under another key in JAX's persistent cache
# than the jit path's, and JAX does not write it there (below), so the store's compilation is fresh.
_COMPILER_OPTIONS = {"xla_embed_ir_in_executable": False}
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_MIN_COMPILE_TIME = "jax_persistent_cache_min_compile_time_secs"


def _compile(jitted, args: tuple):
    """(program, fresh). XLA:CPU serialises an executable JAX loaded from its persistent cache
    without some of its kernels (a stored copy failed with NOT_FOUND when run), so the store
    compiles afresh: its variant of the program has its own key in JAX's cache and is kept out of
    it. A program that still came from JAX's cache is not fresh: it is used but not stored."""
    import jax

    hits = []

    def listener(event, **kwargs):
        if event == _CACHE_HIT:
            hits.append(event)

    jax.monitoring.register_event_listener(listener)
    previous = getattr(jax.config, _MIN_COMPILE_TIME)
    jax.config.update(_MIN_COMPILE_TIME, 1e18)
    try:
        program = jitted.trace(*args).lower().compile(compiler_options=_COMPILER_OPTIONS)
    finally:
        jax.config.update(_MIN_COMPILE_TIME, previous)
        jax.monitoring.unregister_event_listener(listener)
    return program, not hits


def _read(path: str, k: str):
    from jax.experimental import serialize_executable

    if not (user_cache.private(os.path.dirname(path)) and user_cache.private(path)):
        return None
    try:
        with open(path, "rb") as f:
            stored = pickle.loads(zlib.decompress(f.read()))
        fmt, stored_key, blob, in_tree, out_tree = stored
        if fmt != FORMAT or stored_key != k:
            return None
        program = serialize_executable.deserialize_and_load(blob, in_tree, out_tree)
    except Exception:  # a damaged or foreign entry is compiled anew and replaced
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return program


def _write(folder: str, path: str, k: str, program) -> None:
    from jax.experimental import serialize_executable

    try:
        blob, in_tree, out_tree = serialize_executable.serialize(program)
        data = zlib.compress(pickle.dumps((FORMAT, k, blob, in_tree, out_tree)), 1)
    except (ValueError, NotImplementedError, TypeError, pickle.PicklingError):
        return  # a program JAX cannot serialise is compiled by every process

    def write(f) -> None:
        if hasattr(os, "fchmod"):
            os.fchmod(f.fileno(), 0o600)
        f.write(data)

    with contextlib.suppress(OSError):
        storage.atomic_write(path, write)
        _prune(folder)


def _prune(folder: str) -> None:
    entries = []
    for name in os.listdir(folder):
        if name.endswith(SUFFIX):
            with contextlib.suppress(OSError):
                entries.append((os.stat(os.path.join(folder, name)).st_mtime, name))
    for _, name in sorted(entries)[:-MAX_ENTRIES]:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))


def describe(value) -> Optional[str]:
    """A process-independent description of a static argument for a key, or None.

    Described: None, booleans, numbers, strings, bytes, enums, dtypes; tuples, lists and dicts of
    described values; frozen dataclasses of the package, by their class and every field (not by ``repr``,
    which a class may shorten); package functions by their qualified name, and ``functools.partial``
    of one with described arguments. Anything else (a lambda, a closure, a user's class or function,
    an array) gives None, and so does a value whose ``compiles_in_secret`` is true (another engine's
    scheme: its key is a constant of the compiled program, which the store must not keep on disk).
    """
    import dataclasses
    import enum
    import functools
    import types

    if value is None or isinstance(value, (bool, int, float, str, bytes, enum.Enum)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, list)):
        parts = [describe(v) for v in value]
        return None if None in parts else f"{type(value).__name__}({', '.join(parts)})"
    if isinstance(value, dict):
        parts = [(describe(k), describe(v)) for k, v in value.items()]
        if any(None in p for p in parts):
            return None
        return "dict(" + ", ".join(f"{k}: {v}" for k, v in sorted(parts)) + ")"
    if isinstance(value, functools.partial):
        parts = [describe(value.func), describe(value.args), describe(value.keywords)]
        return None if None in parts else f"partial({', '.join(parts)})"
    dtype = _dtype_name(value)
    if dtype is not None:
        return f"dtype:{dtype}"
    cls = type(value)
    if isinstance(value, (type, types.FunctionType)):  # not a bound method, not a callable object
        name = _package_name(value)
        return None if name is None else f"{type(value).__name__}:{name}"
    if not (dataclasses.is_dataclass(value) and cls.__dataclass_params__.frozen):
        return None
    if getattr(value, "compiles_in_secret", False):  # its key is a constant of the program: never stored
        return None
    name = _package_name(cls)
    parts = [describe(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if name is None or None in parts:
        return None
    fields = ", ".join(f"{f.name}={p}" for f, p in zip(dataclasses.fields(value), parts))
    return f"{name}({fields})"


def _dtype_name(value) -> Optional[str]:
    import numpy as np

    if isinstance(value, np.dtype) or isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    if isinstance(value, type) and hasattr(value, "dtype") and isinstance(value.dtype, np.dtype):
        return value.dtype.name  # jax.numpy's scalar types (jnp.float32)
    return None


def _package_name(obj) -> Optional[str]:
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", "") or ""
    if not (module == "wmspec_jax" or module.startswith("wmspec_jax.")) or not qualname or "<" in qualname:
        return None
    return f"{module}.{qualname}"


__all__ = ["FORMAT", "MAX_ENTRIES", "SUFFIX", "compiled", "describe", "directory", "discard", "enable", "forget",
           "key", "source_digest"]
