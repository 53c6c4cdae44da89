"""Megatron-style tensor-parallel layout of the transformer on a (data, model) mesh.

Each parameter gets a ``PartitionSpec`` over the mesh axes ``"data"`` and
``"model"`` (:mod:`wmspec_jax.sharding` builds the mesh):

=====================================  ==========================  ======================
parameter                              split over ``model``        why
=====================================  ==========================  ======================
``wq`` [D, H*Dh], ``bq``               query heads (columns)       heads are independent
``wk``, ``wv`` [D, Hkv*Dh], biases     key/value heads (columns)   idem
``wo`` [H*Dh, D]                       query heads (rows)          one all-reduce per layer
``w_gate``, ``w_up`` [D, F]            hidden units (columns)      elementwise GLU
``w_down`` [F, D]                      hidden units (rows)         one all-reduce per layer
``embed`` [V, D], ``lm_head`` [D, V]   vocabulary                  logits split over V
norms                                  replicated                  tiny
draft ``head_rows`` [K, D]             kept ids (rows)             logits split over K
draft ``head_ids`` [K]                 replicated                  tiny
draft ``fc`` [2D, D]                   replicated                  its output feeds all heads
=====================================  ==========================  ======================

The last three rows are for drafts (:mod:`wmspec_jax.models.draft`,
:mod:`wmspec_jax.models.feature_draft`): a reduced-vocabulary head and a
feature draft's input projection.

Every layer's arrays get the same specs. The KV cache (each layer's
``k, v: [B, S, Hkv, Dh]``) is split over ``data`` (rows) and
``model`` (key/value heads), its ``lengths`` over ``data``. A dimension is
split only when the ``model`` axis size divides its number of heads (units,
vocabulary entries); otherwise it is replicated, e.g. Qwen2.5-7B's 4
key/value heads on ``model=8`` (the query heads and MLP are still split).
XLA (GSPMD) inserts the collectives; the results equal the unsharded ones up
to float reassociation in the sharded contractions.

:func:`shard_params` places a params pytree in this layout and :func:`place` one
array as any ``NamedSharding`` (across processes too); they live here, beside the
layout, so that the models' loaders place their params without importing
:mod:`wmspec_jax.sharding`, which imports the models (it offers both under the
same names).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from wmspec_jax.models.cache import KVCache
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.transformer import layer_shapes, param_shapes

DATA = "data"
MODEL = "model"

# layer parameter -> (dimension split over `model` in the in_out layout, what that dimension counts)
_SPLIT = {
    "wq": (1, "heads"), "bq": (0, "heads"), "wo": (0, "heads"),
    "wk": (1, "kv_heads"), "wv": (1, "kv_heads"), "bk": (0, "kv_heads"), "bv": (0, "kv_heads"),
    "w_gate": (1, "ffn"), "w_up": (1, "ffn"), "w_down": (0, "ffn"),
}


def _divides(config: TransformerConfig, model_size: int) -> dict:
    return {"heads": config.num_heads % model_size == 0,
            "kv_heads": config.num_kv_heads % model_size == 0,
            "ffn": config.intermediate_size % model_size == 0,
            "vocab": config.vocab_size % model_size == 0}


def _spec(ndim: int, dim: int | None) -> P:
    return P(*(MODEL if i == dim else None for i in range(ndim)))


def param_partition_specs(config: TransformerConfig, model_size: int, params: dict | None = None) -> dict:
    """PartitionSpecs with the structure of :func:`param_shapes` (module doc), or of ``params``
    when given: a draft's extra entries (``head_rows``, ``head_ids``, ``fc``) get theirs and any
    other unknown entry raises ValueError."""
    ok = _divides(config, int(model_size))
    shapes = param_shapes(config)
    layer = {}
    for name, shape in layer_shapes(config).items():
        dim, unit = _SPLIT.get(name, (None, None))
        if dim is not None and len(shape) == 2 and config.weight_layout == "out_in":
            dim = 1 - dim  # the same split of the same matrix, stored transposed
        layer[name] = _spec(len(shape), dim if unit and ok[unit] else None)
    out = {"embed": _spec(2, 0 if ok["vocab"] else None),
           "layers": [dict(layer) for _ in range(config.num_layers)], "final_norm": P()}
    if "lm_head" in shapes:
        out["lm_head"] = _spec(2, (0 if config.weight_layout == "out_in" else 1) if ok["vocab"] else None)
    if params is None:
        return out
    for name in set(params) - set(out):
        if name == "head_rows":
            kept = params[name].shape[0]
            out[name] = _spec(2, 0 if kept % int(model_size) == 0 else None)
        elif name in ("head_ids", "fc"):
            out[name] = P()
        else:
            raise ValueError(f"no tensor-parallel layout for parameter {name!r} of {config.family} "
                             f"(known: {sorted(out) + ['fc', 'head_ids', 'head_rows']})")
    return {k: out[k] for k in params}


def cache_partition_specs(config: TransformerConfig, model_size: int) -> KVCache:
    """PartitionSpecs of a :class:`KVCache`: rows over ``data``, kv heads over ``model``."""
    heads = MODEL if _divides(config, int(model_size))["kv_heads"] else None
    kv = (P(DATA, None, heads, None),) * config.num_layers
    return KVCache(k=kv, v=kv, lengths=P(DATA))


def _named(mesh, specs):
    return jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), specs,
                                  is_leaf=lambda s: isinstance(s, P))


def param_shardings(config: TransformerConfig, mesh: jax.sharding.Mesh, params: dict | None = None) -> dict:
    """NamedShardings of every parameter on ``mesh`` (axes ``data``, ``model``); with ``params``
    its structure (see :func:`param_partition_specs`)."""
    return _named(mesh, param_partition_specs(config, mesh.shape[MODEL], params))


def cache_shardings(config: TransformerConfig, mesh: jax.sharding.Mesh) -> KVCache:
    """NamedShardings of the KV cache on ``mesh``."""
    return _named(mesh, cache_partition_specs(config, mesh.shape[MODEL]))


def place(x, sharding: NamedSharding):
    """``x`` (a host value or a jax.Array, typed PRNG keys included) laid out as ``sharding``.

    Across processes every process passes the same value and supplies only
    the shards of its own devices (``device_put`` cannot target devices of
    other processes).
    """
    if isinstance(x, jax.Array):
        if sharding.is_fully_addressable:
            return jax.device_put(x, sharding)
    else:
        x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def shard_params(params: dict, config: TransformerConfig, mesh: Mesh) -> dict:
    """Places a params pytree tensor-parallel on ``mesh`` (layout: the module doc).

    For checkpoints prefer ``hf.load_checkpoint(..., mesh=mesh)``, which
    places each tensor as it is read instead of going through one device. Drafts' extra
    entries (reduced head, feature input) are placed too
    (:func:`param_partition_specs`).
    """
    shardings = param_shardings(config, mesh, params)
    return jax.tree_util.tree_map(place, params, shardings)


__all__ = ["DATA", "MODEL", "cache_partition_specs", "cache_shardings", "param_partition_specs", "param_shardings",
           "place", "shard_params"]
