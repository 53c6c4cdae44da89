"""Chunked, device-sharded Monte Carlo means with standard errors, in bounded memory.

Two estimators share one driver:

* :func:`moments` — means and standard errors of K per-sample statistics;
* :func:`counts` — exact integer counts of a per-sample category (the joint
  law of (draft token, target token) for degenerate decoders).

How the samples are laid out. The statistic function receives the run's key
(stream key words, :func:`wmspec_jax.tradeoff.zeta.run_keys`) and the global
indices of its samples and derives ζ from them with the counter-based PRF, so
sample i's ζ is a function of (key, i) alone. Sample i lives in block
``i // block_size``; a *chunk* is ``blocks_per_chunk`` consecutive blocks,
evaluated by one jitted call (``vmap`` over blocks); a host loop runs the
chunks, so memory is O(chunk) whatever the number of samples. The block axis
of a chunk is sharded over the devices (``jax.sharding``, one mesh axis
``"samples"``); since every block's randomness and its reduction are local to
the block, the estimate is the same on 1 or 8 devices and for any chunk size.

Precision. Per-sample statistics are float32. Each block (256 samples by
default) is reduced on the device to (count, mean, centred sum of squares)
— short float32 sums, relative error ~1e-7 — and the blocks are combined on the
host in float64 with Chan et al.'s parallel update, so neither the mean nor
the variance loses precision at 1e7 samples and no E[x²] − E[x]² cancellation
occurs. Counts are integers (int32 per chunk, int64 on the host): exact.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from wmspec_jax.tradeoff import zeta as zeta_lib

DEFAULT_BLOCK_SIZE = 256
DEFAULT_BLOCKS_PER_CHUNK = 128
_MAX_SAMPLES = 2**31 - 1  # sample indices are int32 on the device

ProgressFn = Callable[[int, int, float], None]


class Moments(NamedTuple):
    """Monte Carlo means of K statistics.

    Attributes:
      mean: float64[K].
      stderr: float64[K] standard error of the mean, std(ddof=1) / sqrt(n).
      num_samples: n.
    """

    mean: np.ndarray
    stderr: np.ndarray
    num_samples: int


def _check_run(num_samples: int, block_size: int, blocks_per_chunk: int) -> None:
    if not isinstance(num_samples, (int, np.integer)) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2, got {num_samples!r}")
    if num_samples > _MAX_SAMPLES:
        raise ValueError(f"num_samples must be < 2^31, got {num_samples}")
    if block_size < 1 or blocks_per_chunk < 1:
        raise ValueError(f"block_size and blocks_per_chunk must be >= 1, got {block_size}, {blocks_per_chunk}")


def _mesh(devices: Optional[Sequence[jax.Device]]) -> Mesh:
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("no devices to run on")
    return Mesh(np.array(devs), ("samples",))


def _block_indices(first_block, num_blocks: int, block_size: int, num_samples, mesh):
    """uint32[nb, B] global sample indices of a chunk (sharded over blocks) and their validity."""
    block_ids = first_block + jnp.arange(num_blocks, dtype=jnp.int32)
    index = block_ids[:, None] * block_size + jnp.arange(block_size, dtype=jnp.int32)[None, :]
    # Shard the block axis; everything per block below stays on the block's device.
    index = jax.lax.with_sharding_constraint(index, NamedSharding(mesh, PartitionSpec("samples")))
    return index.astype(jnp.uint32), index < num_samples


@functools.lru_cache(maxsize=64)
def _moments_chunk_fn(stat_fn, static, block_size: int, num_blocks: int, mesh: Mesh):
    out = NamedSharding(mesh, PartitionSpec("samples"))

    def chunk(params, key, first_block, num_samples):
        index, valid = _block_indices(first_block, num_blocks, block_size, num_samples, mesh)
        x = jax.vmap(lambda i: stat_fn(static, params, key, i))(index)  # [nb, B, K]
        x = jnp.asarray(x, jnp.float32)
        w = valid[..., None]
        n = jnp.sum(valid, axis=1).astype(jnp.float32)  # [nb]
        mean = jnp.sum(jnp.where(w, x, 0.0), axis=1) / jnp.maximum(n, 1.0)[:, None]
        m2 = jnp.sum(jnp.where(w, jnp.square(x - mean[:, None, :]), 0.0), axis=1)
        return n, mean, m2

    return jax.jit(chunk, out_shardings=(out, out, out))


@functools.lru_cache(maxsize=64)
def _counts_chunk_fn(cat_fn, static, block_size: int, num_blocks: int, num_categories: int, mesh: Mesh):
    def chunk(params, key, first_block, num_samples):
        index, valid = _block_indices(first_block, num_blocks, block_size, num_samples, mesh)
        cat = jax.vmap(lambda i: cat_fn(static, params, key, i))(index)  # [nb, B]
        cat = jnp.where(valid, cat, num_categories)  # out-of-range index: dropped below
        return jnp.zeros((num_categories,), jnp.int32).at[cat.reshape(-1)].add(1, mode="drop")

    return jax.jit(chunk)


def _drive(chunk_fn, params, key, num_samples, block_size, num_blocks, consume, progress):
    """Host loop over chunks; dispatches chunk c+1 before fetching chunk c (async dispatch)."""
    total_blocks = -(-num_samples // block_size)
    starts = range(0, total_blocks, num_blocks)
    n_arr = jnp.int32(num_samples)
    t0 = time.perf_counter()
    pending = None
    for start in starts:
        nxt = (start, chunk_fn(params, key, jnp.int32(start), n_arr))
        if pending is not None:
            consume(jax.device_get(pending[1]))
            if progress is not None:
                done = min(num_samples, (pending[0] + num_blocks) * block_size)
                progress(done, num_samples, time.perf_counter() - t0)
        pending = nxt
    consume(jax.device_get(pending[1]))
    if progress is not None:
        progress(num_samples, num_samples, time.perf_counter() - t0)


def _as_key(key) -> jax.Array:
    return jnp.asarray(zeta_lib.run_keys(key))


def moments(
    stat_fn: Callable[[Any, Any, jax.Array, int], jax.Array],
    static: Any,
    params: Any,
    key,
    num_samples: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    blocks_per_chunk: int = DEFAULT_BLOCKS_PER_CHUNK,
    devices: Optional[Sequence[jax.Device]] = None,
    progress: Optional[ProgressFn] = None,
) -> Moments:
    """E[stat(ζ)] and its standard error by chunked, sharded Monte Carlo.

    Args:
      stat_fn: ``stat_fn(static, params, key, index) -> float[n, K]``: derives the
        ζ of the samples ``index`` (uint32[n]) from ``key`` (uint32[3, 2] stream key
        words) and returns their statistics. Must be a module-level function (it
        keys the compilation cache).
      static: hashable configuration passed to ``stat_fn`` unchanged (e.g. a
        :class:`~wmspec_jax.decoders.WatermarkDecoder`).
      params: array pytree (distributions, γ grids) passed to ``stat_fn``; a new
        value does not recompile.
      key: an int seed or uint32[3, 2] stream key words (:func:`~wmspec_jax.tradeoff.zeta.run_keys`).
      num_samples: n, at least 2 and below 2^31.
      block_size: samples per block (the unit of on-device reduction).
      blocks_per_chunk: blocks per jitted call (memory knob; the result does not
        depend on it). Rounded up to a multiple of the device count.
      devices: devices to shard blocks over (default: all).
      progress: optional ``progress(done, total, seconds)`` called per chunk.

    Returns:
      :class:`Moments` with float64[K] mean and standard error.
    """
    _check_run(num_samples, block_size, blocks_per_chunk)
    mesh = _mesh(devices)
    nd = mesh.devices.size
    num_blocks = -(-blocks_per_chunk // nd) * nd
    fn = _moments_chunk_fn(stat_fn, static, block_size, num_blocks, mesh)
    acc = {"n": 0.0, "mean": None, "m2": None}

    def consume(out):
        n_b, mean_b, m2_b = (np.asarray(a, np.float64) for a in out)
        keep = n_b > 0
        n_b, mean_b, m2_b = n_b[keep], mean_b[keep], m2_b[keep]
        n_c = n_b.sum()
        mean_c = (n_b[:, None] * mean_b).sum(0) / n_c
        m2_c = m2_b.sum(0) + (n_b[:, None] * np.square(mean_b - mean_c)).sum(0)
        if acc["mean"] is None:
            acc.update(n=n_c, mean=mean_c, m2=m2_c)
            return
        n_a = acc["n"]
        delta = mean_c - acc["mean"]
        n = n_a + n_c
        acc["mean"] = acc["mean"] + delta * (n_c / n)
        acc["m2"] = acc["m2"] + m2_c + np.square(delta) * (n_a * n_c / n)
        acc["n"] = n

    _drive(fn, params, _as_key(key), int(num_samples), block_size, num_blocks, consume, progress)
    n = acc["n"]
    var = acc["m2"] / (n - 1.0)
    return Moments(mean=acc["mean"], stderr=np.sqrt(np.maximum(var, 0.0) / n), num_samples=int(n))


def counts(
    cat_fn: Callable[[Any, Any, jax.Array, int], jax.Array],
    static: Any,
    params: Any,
    key,
    num_samples: int,
    num_categories: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    blocks_per_chunk: int = DEFAULT_BLOCKS_PER_CHUNK,
    devices: Optional[Sequence[jax.Device]] = None,
    progress: Optional[ProgressFn] = None,
) -> np.ndarray:
    """Histogram of a per-sample category by chunked, sharded Monte Carlo.

    Args:
      cat_fn: ``cat_fn(static, params, key, index) -> int[n]`` in
        ``[0, num_categories)``; module-level (it keys the compilation cache).
      Other arguments as in :func:`moments`.

    Returns:
      int64[num_categories] counts summing to ``num_samples``.
    """
    _check_run(num_samples, block_size, blocks_per_chunk)
    if not isinstance(num_categories, (int, np.integer)) or num_categories < 1:
        raise ValueError(f"num_categories must be a positive integer, got {num_categories!r}")
    if blocks_per_chunk * block_size >= 2**31:
        raise ValueError("a chunk must hold fewer than 2^31 samples (int32 counts)")
    mesh = _mesh(devices)
    nd = mesh.devices.size
    num_blocks = -(-blocks_per_chunk // nd) * nd
    fn = _counts_chunk_fn(cat_fn, static, block_size, num_blocks, int(num_categories), mesh)
    total = np.zeros(num_categories, np.int64)

    def consume(out):
        total[:] += np.asarray(out, np.int64)

    _drive(fn, params, _as_key(key), int(num_samples), block_size, num_blocks, consume, progress)
    if total.sum() != num_samples:
        raise RuntimeError(f"counts sum to {total.sum()}, expected {num_samples} (category out of range?)")
    return total


__all__ = ["Moments", "moments", "counts", "DEFAULT_BLOCK_SIZE", "DEFAULT_BLOCKS_PER_CHUNK"]
