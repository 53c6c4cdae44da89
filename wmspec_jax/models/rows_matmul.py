"""A product of a few activation rows with an ``[out, in]`` weight matrix on XLA:CPU, as a custom call.

XLA:CPU runs a model's products one at a time on one thread. With one row of activations (a decode
step at batch 1) its matrix-vector product streams the weights near the speed of one core's reads;
with 2-8 rows (a speculative verification pass of K + 1 tokens, a small batch) its library GEMM
reads them at about half that speed (``python -m benchmarks.profile_passes``). The kernel of
``cpu_kernels/rows_matmul.cc`` reads each weight row once for all rows and splits the output rows
over XLA's intra-op thread pool, so both cores stream weights.

**Same sums for any number of rows.** Every output element is summed in one fixed order whatever
the number of rows, the row group or the thread (the source's header), so a product's row is bit
for bit the same in a one-token step and in a verification pass, and does not depend on the other
rows of the product. The order differs from XLA's dot, so logits differ from the ``in_out``
layout's, and from ``row_kernel=False``, in the last bits.

**Build.** The C++ source is compiled on first use with ``$CXX`` (default ``c++``) and
``-O3 -march=native`` against the XLA FFI headers that jaxlib ships, into the user's cache
(:mod:`wmspec_jax.user_cache`, ``kernels/``; a private temporary directory when the cache is off),
named by a SHA-256 over the source, the flags, the compiler's version, jaxlib's version and the
processor's model and flags, so a home directory shared by different machines never loads another
processor's build. A library is loaded only under the cache's trust rule (owned by the user, not
writable by others); with the cache off it is built for the process alone in a private temporary
folder. It needs an x86-64 processor with AVX2 and FMA and a C++17 compiler. Where it cannot be
built (no compiler, another processor: :func:`problem` says why) or ``WMSPEC_CPU_KERNEL=0`` is set,
products use XLA's dot; a build that fails on a machine that has both warns once.

Used by :func:`wmspec_jax.models.linear.linear` in the ``out_in`` layout for float32 products with at
most :data:`MAX_ROWS` rows when ``TransformerConfig.row_kernel`` is set (the default; part of the
compiled programs' keys), on the CPU platform only (``jax.lax.platform_dependent``: the same program
lowered for a GPU or TPU uses XLA's dot). It has a JVP (XLA's products of the tangents), so it can
be differentiated. Under a mesh, XLA's partitioner gives a custom call whole operands, so sharded
weights are gathered first: the ``out_in`` layout is for one CPU device.
"""

from __future__ import annotations

import ctypes
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
import jax.numpy as jnp

from wmspec_jax import user_cache

MAX_ROWS = 8
"""Products with at most this many rows use the kernel; longer ones (a prompt's prefill) use XLA's GEMM,
which is compute-bound there and faster."""

ENV_VAR = "WMSPEC_CPU_KERNEL"
TARGET = "wmspec_rows_matmul"
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_kernels", "rows_matmul.cc")
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")
_lock = threading.Lock()
_state: dict = {"library": None, "tried": False, "problem": None}


def enabled() -> bool:
    """Whether the kernel may be used in this process: ``WMSPEC_CPU_KERNEL`` is not ``0`` (read when a
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

    h = hashlib.sha256()
    with open(_SOURCE, "rb") as f:
        h.update(f.read())
    for part in (" ".join(_FLAGS), compiler_version, jaxlib.__version__, _processor()):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:32]


def _compile(path: str) -> None:
    """Compiles the source to ``path`` (atomically: a temporary name, then a rename)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    command = _compiler() + list(_FLAGS) + ["-I", jax.ffi.include_dir(), _SOURCE, "-o", tmp]
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
    """The kernel cannot run where the process runs (no compiler, another processor): XLA's dot, silently."""


def _library_path() -> tuple[str, Optional[str]]:
    """(path of a built library, a temporary folder to delete once it is loaded, or None)."""
    compiler = _compiler()
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise _Unsupported(f"the kernel is written for x86-64 with AVX2 and FMA, not {platform.machine()}")
    flags = _processor().split()
    if os.path.exists("/proc/cpuinfo") and not {"avx2", "fma"} <= set(flags):
        raise _Unsupported("the processor lacks AVX2 or FMA")
    if shutil.which(compiler[0]) is None:
        raise _Unsupported(f"no C++ compiler {compiler[0]!r} (set CXX)")
    version = subprocess.run(compiler + ["--version"], capture_output=True, text=True, timeout=60).stdout
    name = f"rows_matmul-{_build_key(version)}.so"
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
    """The loaded kernel library with its target registered for XLA:CPU, or None where the kernel is off
    or cannot be built (module doc; the reason is in :func:`problem`). Tried once per process; a build
    that fails on a machine that should run it warns once."""
    if not enabled():
        return None
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            scratch = None
            try:
                path, scratch = _library_path()
                lib = ctypes.cdll.LoadLibrary(path)
                jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.WmspecRowsMatmul), platform="cpu")
                _state["library"] = lib
            except _Unsupported as e:
                _state["problem"] = str(e)
            except Exception as e:  # noqa: BLE001 - any other failure means XLA's dot, said once
                _state["problem"] = str(e)
                warnings.warn(f"the CPU kernel for products with few rows is not used ({e}); XLA's dot "
                              "computes them, slower for speculative verification", RuntimeWarning, stacklevel=3)
            finally:
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)  # a loaded library needs no file
    return _state["library"]


def problem() -> Optional[str]:
    """Why the kernel could not be built or loaded in this process (None: it was, or was not tried)."""
    return _state["problem"]


def fingerprint() -> str:
    """What decides whether traced programs contain the kernel: for keys of stored executables."""
    if not enabled():
        return "off"
    with open(_SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"{digest}:{'built' if library() is not None else 'unavailable'}"


def usable(rows: jax.Array, w: jax.Array) -> bool:
    """Whether ``rows @ w^T`` goes to the kernel on CPU (shapes and dtypes are static under ``jit``)."""
    return (rows.ndim == 2 and w.ndim == 2 and rows.shape[0] <= MAX_ROWS and rows.shape[-1] == w.shape[-1]
            and rows.dtype == jnp.float32 and w.dtype == jnp.float32 and library() is not None)


def _xla_product(rows: jax.Array, w: jax.Array) -> jax.Array:
    out = jax.lax.dot_general(w, rows, (((1,), (1,)), ((), ())))
    return jax.lax.optimization_barrier(out).T


def _xla_products(rows: jax.Array, *ws: jax.Array) -> tuple:
    return tuple(_xla_product(rows, w) for w in ws)


def _kernel_call(rows: jax.Array, *ws: jax.Array) -> tuple:
    outs = [jax.ShapeDtypeStruct((rows.shape[0], w.shape[0]), jnp.float32) for w in ws]
    return tuple(jax.ffi.ffi_call(TARGET, outs, vmap_method="sequential")(rows, *ws))


@jax.custom_jvp
def _kernel_products(rows: jax.Array, *ws: jax.Array) -> tuple:
    return jax.lax.platform_dependent(rows, *ws, cpu=_kernel_call, default=_xla_products)


@_kernel_products.defjvp
def _kernel_products_jvp(primals, tangents):
    rows, *ws = primals
    d_rows, *d_ws = tangents
    return _kernel_products(rows, *ws), tuple(d_rows @ w.T + rows @ d_w.T for w, d_w in zip(ws, d_ws))


def rows_matmul_many(rows: jax.Array, ws) -> tuple:
    """``tuple(rows @ w.T for w in ws)``: float32[M, in] rows times float32[out_j, in] matrices that share
    them (a layer's q, k and v projections; its gate and up), float32[M, out_j] each.

    One kernel call for all of them on CPU when each is :func:`usable` (module doc): the pool is woken
    once and its threads share the rows of every matrix; each output is the sum :func:`rows_matmul`
    computes, bit for bit. Else XLA's product of each in the weight-first form.
    """
    ws = tuple(ws)
    if ws and all(usable(rows, w) for w in ws):
        return _kernel_products(rows, *ws)
    return _xla_products(rows, *ws)


def rows_matmul(rows: jax.Array, w: jax.Array) -> jax.Array:
    """``rows @ w.T``: float32[M, in] rows times a float32[out, in] matrix, float32[M, out].

    The kernel on CPU when :func:`usable` (module doc), else XLA's product in the weight-first form.
    """
    return rows_matmul_many(rows, (w,))[0]


__all__ = ["ENV_VAR", "MAX_ROWS", "TARGET", "enabled", "fingerprint", "library", "problem", "rows_matmul",
           "rows_matmul_many", "usable"]
