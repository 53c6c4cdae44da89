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

**Build.** The C++ source is compiled on first use with the other CPU kernels
(:mod:`wmspec_jax.models.cpu_kernels`: where the library lives, the trust rule for loading it, and
``WMSPEC_CPU_KERNEL=0``); where it cannot be built, products use XLA's dot.

Used by :func:`wmspec_jax.models.linear.linear` in the ``out_in`` layout for float32 products with at
most :data:`MAX_ROWS` rows when ``TransformerConfig.row_kernel`` is set (the default; part of the
compiled programs' keys), on the CPU platform only (``jax.lax.platform_dependent``: the same program
lowered for a GPU or TPU uses XLA's dot). It has a JVP (XLA's products of the tangents), so it can
be differentiated. Under a mesh, XLA's partitioner gives a custom call whole operands, so sharded
weights are gathered first: the ``out_in`` layout is for one CPU device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax.models.cpu_kernels import ENV_VAR, enabled, fingerprint, library, problem

MAX_ROWS = 8
"""Products with at most this many rows use the kernel; longer ones (a prompt's prefill) use XLA's GEMM,
which is compute-bound there and faster."""

TARGET = "wmspec_rows_matmul"


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
