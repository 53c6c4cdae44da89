"""The CPU kernel for products with few rows (wmspec_jax.models.rows_matmul): its sums, its place in the
models, its build and the rule for loading a built library."""

import os
import stat
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.models import linear, protocol, rows_matmul, transformer
from wmspec_jax.models.config import TransformerConfig

needs_kernel = pytest.mark.skipif(rows_matmul.library() is None,
                                  reason=f"the kernel is not built here: {rows_matmul.problem()}")


def _operands(rows, n_in, n_out, seed=0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.standard_normal((rows, n_in)), jnp.float32),
            jnp.asarray(rng.standard_normal((n_out, n_in)), jnp.float32))


@needs_kernel
@pytest.mark.parametrize("rows,n_in,n_out", [(1, 576, 1536), (2, 577, 1537), (3, 64, 8), (4, 576, 20000),
                                             (5, 13, 100), (8, 576, 576), (7, 1, 3)])
def test_the_kernel_computes_the_product(rows, n_in, n_out):
    # odd sizes reach the tails (in not a multiple of 8, out not a multiple of the tile), the large
    # one the threads, 5 and 7 rows a second row group
    x, w = _operands(rows, n_in, n_out)
    assert rows_matmul.usable(x, w)
    got = np.asarray(jax.jit(rows_matmul.rows_matmul)(x, w), np.float64)
    want = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
    # float32 sums of n_in terms of unit normals: error ~ sqrt(n_in) * 2^-24 * |terms|
    assert np.max(np.abs(got - want)) <= 1e-5 * np.sqrt(n_in) * 4


@needs_kernel
def test_a_row_is_the_same_sum_whatever_the_other_rows():
    x, w = _operands(8, 577, 4099, seed=1)
    product = jax.jit(rows_matmul.rows_matmul)
    together = np.asarray(product(x, w))
    for r in range(8):
        np.testing.assert_array_equal(np.asarray(product(x[r:r + 1], w))[0], together[r])
    np.testing.assert_array_equal(np.asarray(product(x[2:5], w)), together[2:5])


@needs_kernel
def test_products_sharing_their_rows_are_each_products_sum():
    """One call for a layer's q, k and v (or gate and up) gives each matrix's product bit for bit, for
    matrices too small to share out alone and large ones split over the threads, and differentiates
    like the separate products."""
    rng = np.random.default_rng(3)
    for rows in (1, 4):
        x = jnp.asarray(rng.standard_normal((rows, 577)), jnp.float32)
        ws = [jnp.asarray(rng.standard_normal((n, 577)), jnp.float32) for n in (3000, 40, 1537)]
        together = jax.jit(lambda x, *ws: rows_matmul.rows_matmul_many(x, ws))(x, *ws)
        assert len(together) == 3
        for w, got in zip(ws, together):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(rows_matmul.rows_matmul)(x, w)))
    x, w1, w2 = _operands(3, 40, 24, seed=4) + (_operands(3, 40, 16, seed=5)[1],)
    got = jax.grad(lambda x, a, b: sum(jnp.sum(jnp.sin(y)) for y in rows_matmul.rows_matmul_many(x, (a, b))),
                   argnums=(0, 1, 2))(x, w1, w2)
    want = jax.grad(lambda x, a, b: jnp.sum(jnp.sin(x @ a.T)) + jnp.sum(jnp.sin(x @ b.T)), argnums=(0, 1, 2))(x, w1, w2)
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_the_kernel_differentiates_and_maps_like_the_product():
    x, w = _operands(3, 40, 24, seed=2)

    def loss(f):
        return lambda x, w: jnp.sum(jnp.sin(f(x, w)))

    got = jax.grad(loss(rows_matmul.rows_matmul), argnums=(0, 1))(x, w)
    want = jax.grad(loss(lambda x, w: x @ w.T), argnums=(0, 1))(x, w)
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-5)
    mapped = jax.vmap(rows_matmul.rows_matmul, in_axes=(0, None))(jnp.stack([x, 2 * x]), w)
    np.testing.assert_allclose(mapped[1], 2 * mapped[0], rtol=1e-6, atol=1e-6)


def test_other_products_go_to_xla():
    x, w = _operands(rows_matmul.MAX_ROWS + 1, 16, 8)
    assert not rows_matmul.usable(x, w)  # a prefill's rows
    assert not rows_matmul.usable(x[:2].astype(jnp.bfloat16), w.astype(jnp.bfloat16))
    np.testing.assert_allclose(rows_matmul.rows_matmul(x, w), x @ w.T, rtol=1e-5, atol=1e-5)


def _tiny_config(**fields):
    return TransformerConfig(family="llama", vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=2,
                             num_heads=4, num_kv_heads=2, head_dim=8, weight_layout="out_in", **fields)


@needs_kernel
def test_the_models_use_the_kernel_where_the_config_says():
    config = _tiny_config()
    x = jnp.ones((1, 4, 32), jnp.float32)
    w = jnp.ones((48, 32), jnp.float32)
    with_kernel = jax.jit(lambda x, w: linear.linear(x, w, config)).lower(x, w).as_text()
    assert rows_matmul.TARGET in with_kernel
    off = config.replace(row_kernel=False)
    without = jax.jit(lambda x, w: linear.linear(x, w, off)).lower(x, w).as_text()
    assert rows_matmul.TARGET not in without
    prefill = jax.jit(lambda x, w: linear.linear(x, w, config)).lower(jnp.ones((1, 16, 32)), w).as_text()
    assert rows_matmul.TARGET not in prefill
    with pytest.raises(ValueError, match="row_kernel"):
        _tiny_config(row_kernel=1)


@needs_kernel
def test_a_model_gives_the_same_logits_with_and_without_the_kernel():
    config = _tiny_config()
    params = transformer.init_params(config, jax.random.PRNGKey(0), jnp.float32)
    tokens = jnp.asarray([[3, 14, 15, 92]], jnp.int32)
    logits = {}
    for kernel in (True, False):
        lm = protocol.make_language_model(config.replace(row_kernel=kernel), name=f"kernel={kernel}")
        logits[kernel], _ = jax.jit(lm.step)(params, lm.init_cache(1, 8), tokens, jnp.array([4], jnp.int32))
    np.testing.assert_allclose(logits[True], logits[False], rtol=1e-5, atol=1e-5)


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


PROBE = ("import warnings; warnings.simplefilter('always')\n"
         "from wmspec_jax.models import rows_matmul as r\n"
         "print('built' if r.library() is not None else 'none', r.problem())\n")


@needs_kernel
def test_a_library_others_could_write_is_rebuilt_not_loaded(tmp_path):
    cache = tmp_path / "cache"
    first = _run(PROBE, {"WMSPEC_CACHE_DIR": str(cache)})
    assert first.stdout.startswith("built"), first.stderr
    (built,) = (cache / "kernels").iterdir()
    os.chmod(built, 0o777)  # as if another user or a group could have replaced it
    second = _run(PROBE, {"WMSPEC_CACHE_DIR": str(cache)})
    assert second.stdout.startswith("built"), second.stderr
    assert not os.stat(built).st_mode & (stat.S_IWGRP | stat.S_IWOTH)  # a fresh build took its place


def test_no_compiler_or_the_switch_means_xla_dot(tmp_path):
    switched = _run(PROBE, {"WMSPEC_CPU_KERNEL": "0", "WMSPEC_CACHE_DIR": str(tmp_path)})
    assert switched.stdout.split()[0] == "none" and "not used" not in switched.stderr
    missing = _run(PROBE, {"CXX": str(tmp_path / "no-such-compiler"), "WMSPEC_CACHE_DIR": str(tmp_path)})
    assert missing.stdout.split()[0] == "none", missing.stderr


@needs_kernel
def test_a_failed_build_warns_once_and_falls_back(tmp_path):
    compiler = tmp_path / "broken-c++"
    compiler.write_text("#!/bin/sh\necho 'broken compiler' >&2\nexit 1\n")
    compiler.chmod(0o755)
    code = PROBE + "print(r.library() is None)\n"
    out = _run(code, {"CXX": str(compiler), "WMSPEC_CACHE_DIR": str(tmp_path / "c")})
    assert out.stdout.split()[0] == "none" and out.stdout.strip().endswith("True")
    assert out.stderr.count("not used") == 1, out.stderr
