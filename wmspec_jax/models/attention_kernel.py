"""Attention of a few queries per row over a KV cache on XLA:CPU, as a custom call.

XLA:CPU computes :func:`wmspec_jax.models.attention.attend` as a loop over cache blocks, and before each
block's products it copies the block's keys and values from the cache's ``[B, S, Hkv, Dh]`` layout into
the dot's. In a decode step or a verification pass of the built-in target at batch 1 that loop, its
copies and the small operations around them cost many times what reading the filled cache takes
(``python -m benchmarks.profile_passes``; figures in ``docs/performance.md``). The kernel of ``cpu_kernels/attend_few.cc``
reads, for each query, the keys and values of the slots it sees where they lie.

**The same attention.** The same visibility rule as :func:`~wmspec_jax.models.attention.attend` (causal,
sliding windows, token trees), the same scores (scaled, soft-capped), a softmax in float32. The sums run
in another order than XLA's online softmax over blocks, so the outputs differ from XLA's in the last
bits; each query's output is computed alone, over its visible slots in ascending order, so it is the
same bit for bit whatever the other queries, rows or number of tokens of the call (a decode step and a
verification pass agree), and ``attend``'s ``block`` does not change it.

Used by :func:`~wmspec_jax.models.attention.attend` where the products use the CPU kernel of
:mod:`wmspec_jax.models.rows_matmul` (the ``out_in`` layout with ``TransformerConfig.row_kernel``, one
CPU device), for float32 caches and at most :data:`MAX_QUERIES` queries per row; longer passes (a long
prompt's prefill) use XLA's loop. On other platforms the same program uses XLA's loop
(``jax.lax.platform_dependent``); its derivatives are XLA's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.cpu_kernels import library

MAX_QUERIES = 64
"""Passes with at most this many tokens per row use the kernel (decode steps, verification passes,
token trees, short prompts)."""

TARGET = "wmspec_attend_few"


def usable(config: TransformerConfig, q: jax.Array, keys: jax.Array, values: jax.Array) -> bool:
    """Whether :func:`~wmspec_jax.models.attention.attend` of these operands goes to the kernel on CPU
    (static under ``jit``: the config, shapes and dtypes)."""
    return (config.weight_layout == "out_in" and config.row_kernel and q.shape[1] <= MAX_QUERIES
            and q.dtype == keys.dtype == values.dtype == jnp.float32 and library() is not None)


def call(config: TransformerConfig, window: int, is_tree: bool, q: jax.Array, keys: jax.Array,
         values: jax.Array, positions: jax.Array, base: jax.Array, ancestors: jax.Array) -> jax.Array:
    """The kernel's attention (module doc): float32[B, T, H, Dh].

    Args:
      q: float32[B, T, H, Dh] queries (RoPE applied); keys, values: float32[B, S, Hkv, Dh].
      positions: int32[B, T]; window: static int (at least S: global).
      is_tree: static; base int32[B] and ancestors int32[T, T] (any values when not a tree).
    """
    cap = config.attn_logit_softcap
    out = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    return jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        q, keys, values, positions.astype(jnp.int32), base.astype(jnp.int32), ancestors.astype(jnp.int32),
        window=np.int64(min(window, 2 ** 62)), scale=np.float32(config.attention_scale),
        softcap=np.float32(0.0 if cap is None else cap), tree=bool(is_tree))


__all__ = ["MAX_QUERIES", "TARGET", "call", "usable"]
