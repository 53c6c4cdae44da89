"""Meshes, tensor- and data-parallel placement, and multi-host start-up.

JAX is the distributed engine: a named :class:`jax.sharding.Mesh` with axes
``data`` and ``model``, ``NamedSharding`` placements of the inputs, GSPMD
inserting the collectives, ``jax.distributed`` across hosts. Nothing here
communicates by hand.

* ``model``: Megatron-style tensor parallelism inside each layer (attention
  heads, MLP hidden units, vocabulary; layout in
  :mod:`wmspec_jax.models.partitioning`), KV caches split over key/value heads.
* ``data``: the batch (prompts, watermark keys, per-row randomness, caches)
  split over rows.

The speculative loop runs unchanged under a mesh: it is one ``jax.jit`` whose
inputs carry their shardings; the models' caches are created inside it with
their layout (``Checkpoint.language_model(mesh)``)::

    mesh = sharding.make_mesh("data=2,model=4")
    target, draft = hf.load_pair(target_dir, draft_dir, jnp.bfloat16, mesh=mesh)
    prompts, lengths, keys, rngs = sharding.shard_batch((prompts, lengths, keys, rngs), mesh)
    result = speculative.generate(target.language_model(mesh), target.params, prompts, lengths,
                                  keys, rngs, config, draft=draft.language_model(mesh),
                                  draft_params=draft.params)

Launching on a GPU node or a TPU pod slice: docs/sharding.md.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Mapping, NamedTuple, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from wmspec_jax.models import partitioning
# defined beside the layout, where the models' loaders reach them without importing this module
from wmspec_jax.models.partitioning import place, shard_params

DATA = partitioning.DATA
MODEL = partitioning.MODEL
AXES = (DATA, MODEL)


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """Sizes of the ``data`` and ``model`` axes; -1 means "the devices left over"."""

    data: int = -1
    model: int = 1

    def resolve(self, num_devices: int) -> "MeshSpec":
        """Concrete sizes whose product is ``num_devices``."""
        data, model = self.data, self.model
        if data == -1 and model == -1:
            raise ValueError("at most one mesh axis may be -1 (inferred)")
        if data == -1 or model == -1:
            known = model if data == -1 else data
            if num_devices % known:
                raise ValueError(f"{num_devices} devices cannot be split into {known} along "
                                 f"{MODEL if data == -1 else DATA}")
            data, model = ((num_devices // known, model) if data == -1
                           else (data, num_devices // known))
        if data * model != num_devices:
            raise ValueError(f"mesh data={data} x model={model} needs {data * model} devices, "
                             f"but {num_devices} are available")
        return MeshSpec(data, model)

    def __str__(self) -> str:
        return f"{DATA}={self.data},{MODEL}={self.model}"


_SPEC_ITEM = re.compile(r"^\s*(\w+)\s*=\s*(-?\d+)\s*$")


def parse_mesh_spec(text: str) -> MeshSpec:
    """Parses ``"data=2,model=4"`` (the experiments' ``--mesh`` flag).

    An omitted axis is ``model=1`` / ``data=-1`` (all remaining devices), so
    ``"model=8"`` on 16 devices is ``data=2,model=8`` and ``""`` is pure data
    parallelism.
    """
    sizes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        m = _SPEC_ITEM.match(item)
        if not m:
            raise ValueError(f"bad mesh item {item!r} in {text!r}: expected name=size, e.g. "
                             "'data=2,model=4'")
        name, size = m.group(1), int(m.group(2))
        if name not in AXES:
            raise ValueError(f"unknown mesh axis {name!r} in {text!r}; axes are {AXES}")
        if name in sizes:
            raise ValueError(f"mesh axis {name!r} given twice in {text!r}")
        if size == 0 or size < -1:
            raise ValueError(f"mesh axis {name}={size} must be positive (or -1: inferred)")
        sizes[name] = size
    return MeshSpec(**sizes)


def make_mesh(spec: MeshSpec | str = "", devices: Sequence[Any] | None = None) -> Mesh:
    """A ``(data, model)`` mesh over ``devices`` (default: all devices of all processes).

    Uses ``jax.make_mesh`` (topology-aware device order on TPU) with
    ``AxisType.Auto`` axes, so XLA propagates shardings from the inputs.
    """
    if isinstance(spec, str):
        spec = parse_mesh_spec(spec)
    devices = list(jax.devices() if devices is None else devices)
    sizes = spec.resolve(len(devices))
    auto = jax.sharding.AxisType.Auto
    return jax.make_mesh((sizes.data, sizes.model), AXES, axis_types=(auto, auto),
                         devices=devices)


def batch_sharding(mesh: Mesh, ndim: int = 1) -> NamedSharding:
    """Leading (row) axis over ``data``, the rest replicated."""
    return NamedSharding(mesh, P(DATA, *([None] * (ndim - 1))))


def shard_batch(arrays, mesh: Mesh):
    """Splits the leading (row) axis of each array in a pytree over ``data``.

    Works for token arrays, lengths, per-row watermark key words and typed
    ``jax.random`` key arrays. The row count must be a multiple of the
    ``data`` axis size.
    """
    data = mesh.shape[DATA]

    def put(x):
        shape = np.shape(x)
        if not shape or shape[0] % data:
            raise ValueError(f"a batch of shape {shape} cannot be split over data={data}: "
                             "the number of rows must be a multiple of the data axis")
        return place(x, batch_sharding(mesh, len(shape)))

    return jax.tree_util.tree_map(put, arrays)


def local_rows(x: jax.Array) -> tuple[np.ndarray, np.ndarray]:
    """(row indices, host values) of the rows of ``x`` held by this process's devices.

    For a result split over ``data``, each process writes these rows (e.g. to
    ``generations.<process_index>.jsonl``); together the processes cover
    every row exactly once after :func:`process_shard_name` files are merged.
    """
    pieces = {}
    for shard in x.addressable_shards:
        rows = shard.index[0] if shard.index else slice(None)
        start, stop, _ = rows.indices(x.shape[0])
        pieces.setdefault(start, (stop, shard.data))  # model replicas hold the same rows
    if not pieces:
        return np.zeros((0,), np.int64), np.zeros((0,) + x.shape[1:], x.dtype)
    order = sorted(pieces)
    index = np.concatenate([np.arange(s, pieces[s][0]) for s in order])
    values = np.concatenate([np.asarray(pieces[s][1]) for s in order])
    return index, values


def process_shard_name(file_name: str, process_index: int | None = None,
                       process_count: int | None = None) -> str:
    """``generations.jsonl`` -> ``generations.<process_index>.jsonl`` when there are several processes."""
    index = jax.process_index() if process_index is None else int(process_index)
    count = jax.process_count() if process_count is None else int(process_count)
    if count == 1:
        return file_name
    stem, ext = os.path.splitext(file_name)
    return f"{stem}.{index}{ext}"


class DistributedInfo(NamedTuple):
    """This process's place in a (possibly single-process) run."""

    initialized: bool
    process_index: int
    process_count: int


# Environment variables of launchers whose processes must join one JAX runtime.
_MULTI_PROCESS_HINTS = (
    ("JAX_COORDINATOR_ADDRESS", None),  # explicit (with JAX_NUM_PROCESSES, JAX_PROCESS_ID)
    ("WMSPEC_DISTRIBUTED", "1"),  # opt-in: let jax.distributed detect the cluster
    ("SLURM_NTASKS", "multi"),  # srun with several tasks
    ("OMPI_COMM_WORLD_SIZE", "multi"),  # mpirun
    ("TPU_WORKER_HOSTNAMES", "list"),  # multi-host TPU slice (GKE / TPU VM)
    ("MEGASCALE_COORDINATOR_ADDRESS", None),  # multi-slice TPU
)


def _wants_distributed(env: Mapping[str, str]) -> str | None:
    for var, kind in _MULTI_PROCESS_HINTS:
        value = env.get(var)
        if value in (None, ""):
            continue
        if kind is None or (kind == "1" and value == "1"):
            return var
        if kind == "multi" and value.isdigit() and int(value) > 1:
            return var
        if kind == "list" and "," in value:
            return var
    return None


def maybe_initialize_distributed(env: Mapping[str, str] | None = None,
                                 initialize=None) -> DistributedInfo:
    """Calls ``jax.distributed.initialize()`` when launched as one of several processes.

    Must run before any other JAX call of the program. Recognised launches
    (module constant ``_MULTI_PROCESS_HINTS``): ``JAX_COORDINATOR_ADDRESS``
    (+ ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``), ``WMSPEC_DISTRIBUTED=1``
    (cluster auto-detection: SLURM, Open MPI, Cloud TPU, Kubernetes),
    ``srun`` with ``SLURM_NTASKS > 1``, ``mpirun``, multi-host TPU slices.
    A plain single-process run does nothing.

    Args:
      env: the environment to inspect (default ``os.environ``).
      initialize: the function to call (default ``jax.distributed.initialize``;
        tests pass a fake).
    """
    env = os.environ if env is None else env
    initialize = jax.distributed.initialize if initialize is None else initialize
    reason = _wants_distributed(env)
    if reason is None or jax.distributed.is_initialized():
        return DistributedInfo(jax.distributed.is_initialized(), jax.process_index(),
                               jax.process_count())
    kwargs = {}
    if reason == "JAX_COORDINATOR_ADDRESS":
        kwargs["coordinator_address"] = env["JAX_COORDINATOR_ADDRESS"]
        for var, arg in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
            if env.get(var):
                kwargs[arg] = int(env[var])
    initialize(**kwargs)
    return DistributedInfo(True, jax.process_index(), jax.process_count())


def per_device_bytes(tree) -> dict[Any, int]:
    """Bytes each device holds for a pytree of arrays (or ``ShapeDtypeStruct``s with shardings)."""
    out: dict[Any, int] = {}
    for leaf in jax.tree_util.tree_leaves(tree):
        sharding = leaf.sharding
        shard_shape = sharding.shard_shape(leaf.shape)
        nbytes = int(np.prod(shard_shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
        for device in sharding.device_set:
            out[device] = out.get(device, 0) + nbytes
    return out


__all__ = ["AXES", "DATA", "DistributedInfo", "MODEL", "MeshSpec", "batch_sharding", "local_rows", "make_mesh",
           "maybe_initialize_distributed", "parse_mesh_spec", "per_device_bytes", "place", "process_shard_name",
           "shard_batch", "shard_params"]
