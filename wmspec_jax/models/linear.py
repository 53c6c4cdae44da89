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
    if config.weight_layout == "in_out":
        return jnp.matmul(h, w, **dot_kwargs)
    lead = h.shape[:-1]
    rows = h.reshape(-1, h.shape[-1])
    if config.row_kernel and rows_matmul.usable(rows, w) and dot_kwargs.get("preferred_element_type", jnp.float32) == jnp.float32:
        return rows_matmul.rows_matmul(rows, w).reshape(lead + (w.shape[0],))
    out = jax.lax.dot_general(w, rows, (((1,), (1,)), ((), ())), **dot_kwargs)
    out = jax.lax.optimization_barrier(out)
    return out.T.reshape(lead + (w.shape[0],))


__all__ = ["MATRICES", "linear"]
