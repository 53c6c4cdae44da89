"""The C++ kernels of XLA:CPU custom calls: built on first use, loaded under the cache's trust rule.

Three kernels, each an XLA FFI handler in this folder, registered for the CPU platform:

* ``rows_matmul.cc`` (:mod:`wmspec_jax.models.rows_matmul`): products of a few activation rows with a
  weight matrix stored ``[out, in]``;
* ``attend_few.cc`` (:mod:`wmspec_jax.models.attention_kernel`): softmax attention of a few queries per
  row over a KV cache;
* ``tournament.cc`` (:func:`wmspec_jax.decoders.synthid_scheme.tournament_packed`): SynthID's tournament.

**Build.** The sources are compiled together on first use with ``$CXX`` (default ``c++``) and
``-O3 -march=native`` against the XLA FFI headers that jaxlib ships, into one library in the user's
cache (:mod:`wmspec_jax.user_cache`, ``kernels/``; a private temporary directory when the cache is off),
named by a SHA-256 over the sources, the flags, the compiler's version, jaxlib's version and the
processor's model and flags, so a home directory shared by different machines never loads another
processor's build. A library is loaded only under the cache's trust rule (owned by the user, not
writable by others); with the cache off it is built for the process alone in a private temporary
folder. It needs an x86-64 processor with AVX2 and FMA and a C++17 compiler. Where it cannot be built
(no compiler, another processor: :func:`problem` says why) or ``WMSPEC_CPU_KERNEL=0`` is set, the
models use XLA's operations; a build that fails on a machine that has both warns once.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from typing import Optional

import jax

from wmspec_jax import user_cache

ENV_VAR = "WMSPEC_CPU_KERNEL"
TARGETS = {"wmspec_rows_matmul": "WmspecRowsMatmul", "wmspec_attend_few": "WmspecAttendFew",
           "wmspec_tournament": "WmspecTournament"}
"""XLA custom-call target name -> the library's handler symbol."""

_FOLDER = os.path.dirname(os.path.abspath(__file__))
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")
_lock = threading.Lock()
_state: dict = {"library": None, "tried": False, "problem": None}


def _sources() -> list:
    return sorted(glob.glob(os.path.join(_FOLDER, "*.cc")))


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(_FOLDER, "*.cc")) + glob.glob(os.path.join(_FOLDER, "*.h"))):
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def enabled() -> bool:
    """Whether the kernels may be used in this process: ``WMSPEC_CPU_KERNEL`` is not ``0`` (read when a
    program is traced; set it before the first one)."""
    return os.environ.get(ENV_VAR, "1").strip() not in ("0", "false", "no", "off")


def _processor() -> str:
    fields = [platform.machine()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name = line.split(":", 1)[0].strip()
                if name in ("vendor_id", "model name", "cpu family", "model", "flags"):
                    fields.append(line.strip())
                if not line.strip():
                    break  # the first processor's block
    except OSError:
        fields.append(platform.processor())
    return "\n".join(fields)


def _compiler() -> list:
    return [os.environ.get("CXX") or "c++"]


def _build_key(compiler_version: str) -> str:
    import jaxlib

    h = hashlib.sha256(_source_digest().encode())
    for part in (" ".join(_FLAGS), compiler_version, jaxlib.__version__, _processor()):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:32]


def _compile(path: str) -> None:
    """Compiles the sources to ``path`` (atomically: a temporary name, then a rename)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    command = _compiler() + list(_FLAGS) + ["-I", jax.ffi.include_dir()] + _sources() + ["-o", tmp]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:1])} failed: {run.stderr.strip()[-600:]}")
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class _Unsupported(RuntimeError):
    """The kernels cannot run where the process runs (no compiler, another processor): XLA, silently."""


def _library_path() -> tuple[str, Optional[str]]:
    """(path of a built library, a temporary folder to delete once it is loaded, or None)."""
    compiler = _compiler()
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise _Unsupported(f"the kernels are written for x86-64 with AVX2 and FMA, not {platform.machine()}")
    flags = _processor().split()
    if os.path.exists("/proc/cpuinfo") and not {"avx2", "fma"} <= set(flags):
        raise _Unsupported("the processor lacks AVX2 or FMA")
    if shutil.which(compiler[0]) is None:
        raise _Unsupported(f"no C++ compiler {compiler[0]!r} (set CXX)")
    version = subprocess.run(compiler + ["--version"], capture_output=True, text=True, timeout=60).stdout
    name = f"cpu_kernels-{_build_key(version)}.so"
    folder, scratch = user_cache.directory("kernels"), None
    if folder is None:  # the cache is off: build for this process alone
        folder = scratch = tempfile.mkdtemp(prefix="wmspec-kernels-")
    path = os.path.join(folder, name)
    if not (os.path.exists(path) and user_cache.trusted(path)):
        _compile(path)
    if not user_cache.trusted(path):
        raise RuntimeError(f"the built library {path} is not private to this user")
    return path, scratch


def library() -> Optional[ctypes.CDLL]:
    """The loaded library with every target of :data:`TARGETS` registered for XLA:CPU, or None where the
    kernels are off or cannot be built (module doc; the reason is in :func:`problem`). Tried once per
    process; a build that fails on a machine that should run it warns once."""
    if not enabled():
        return None
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            scratch = None
            try:
                path, scratch = _library_path()
                lib = ctypes.cdll.LoadLibrary(path)
                for target, symbol in TARGETS.items():
                    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
                _state["library"] = lib
            except _Unsupported as e:
                _state["problem"] = str(e)
            except Exception as e:  # noqa: BLE001 - any other failure means XLA's operations, said once
                _state["problem"] = str(e)
                warnings.warn(f"the CPU kernels are not used ({e}); XLA computes the products and attention "
                              "of few rows, slower for speculative verification", RuntimeWarning, stacklevel=3)
            finally:
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)  # a loaded library needs no file
    return _state["library"]


def problem() -> Optional[str]:
    """Why the kernels could not be built or loaded in this process (None: they were, or were not tried)."""
    return _state["problem"]


def fingerprint() -> str:
    """What decides whether traced programs contain the kernels: for keys of stored executables."""
    if not enabled():
        return "off"
    return f"{_source_digest()[:16]}:{'built' if library() is not None else 'unavailable'}"


__all__ = ["ENV_VAR", "TARGETS", "enabled", "fingerprint", "library", "problem"]
