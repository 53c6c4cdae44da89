"""Products of activations with a layer matrix in the config's weight layout.

``config.weight_layout`` (:data:`wmspec_jax.models.config.WEIGHT_LAYOUTS`) says how a model's
matrices are stored; :func:`linear` is the one place that knows what each layout computes
(:mod:`wmspec_jax.models.transformer`'s module doc: why there are two).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from wmspec_jax.models import rows_matmul
from wmspec_jax.models.config import TransformerConfig

# The layers' matrices: the params that the weight layout transposes.
MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def linear(h: jax.Array, w: jax.Array, config: TransformerConfig, **dot_kwargs) -> jax.Array:
    """``h`` dtype[..., in] times a layer matrix ``w`` stored in ``config.weight_layout``: [..., out].

    ``out_in``: ``w @ h^T`` over the rows of ``h``, kept in that orientation by an optimisation
    barrier, then transposed back (:mod:`wmspec_jax.models.transformer`: why); float32 products of
    at most :data:`~wmspec_jax.models.rows_matmul.MAX_ROWS` rows go to the CPU kernel of
    :mod:`wmspec_jax.models.rows_matmul` where it is built and ``config.row_kernel`` is set.
    """
    return linear_many(h, (w,), config, **dot_kwargs)[0]


def linear_many(h: jax.Array, ws, config: TransformerConfig, **dot_kwargs) -> tuple:
    """:func:`linear` of one input with several matrices (a layer's q, k and v; its gate and up): the
    same products, one kernel call for all of them where the CPU kernel computes them
    (:func:`wmspec_jax.models.rows_matmul.rows_matmul_many`; the same sums, bit for bit)."""
    ws = tuple(ws)
    if config.weight_layout == "in_out":
        return tuple(jnp.matmul(h, w, **dot_kwargs) for w in ws)
    lead = h.shape[:-1]
    rows = h.reshape(-1, h.shape[-1])
    if (config.row_kernel and all(rows_matmul.usable(rows, w) for w in ws)
            and dot_kwargs.get("preferred_element_type", jnp.float32) == jnp.float32):
        outs = rows_matmul.rows_matmul_many(rows, ws)
    else:
        outs = []
        for w in ws:
            out = jax.lax.dot_general(w, rows, (((1,), (1,)), ((), ())), **dot_kwargs)
            outs.append(jax.lax.optimization_barrier(out).T)
    return tuple(out.reshape(lead + (w.shape[0],)) for out, w in zip(outs, ws))


__all__ = ["MATRICES", "linear", "linear_many"]
