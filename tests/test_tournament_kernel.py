"""SynthID's tournament on the CPU kernel (wmspec_jax.decoders.synthid_scheme.tournament_packed): Eq. (3)
against a float64 reference and XLA's loop, a row independent of the others, and where the kernel runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.decoders import synthid_scheme
from wmspec_jax.models import cpu_kernels

needs_kernel = pytest.mark.skipif(cpu_kernels.library() is None,
                                  reason=f"the kernels are not built here: {cpu_kernels.problem()}")


def _operands(rows, size, layers, seed=0):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(size, 0.3), size=rows).astype(np.float32)
    words = rng.integers(0, 2 ** 32, size=(rows, size, -(-layers // 32)), dtype=np.uint64).astype(np.uint32)
    return probs, words


def reference(probs, words, layers):
    """Eq. (3) in float64, one layer at a time."""
    p = probs.astype(np.float64)
    for layer in range(layers):
        g = (words[..., layer // 32] >> np.uint32(layer % 32)) & 1
        mass = np.sum(np.where(g == 1, p, 0.0), axis=-1, keepdims=True)
        p = p * (1.0 + g - mass)
    return p


@needs_kernel
@pytest.mark.parametrize("rows,size,layers", [(1, 49152, 30), (5, 20000, 30), (2, 13, 30), (3, 1003, 32), (4, 100, 1)])
def test_the_kernel_computes_eq_3(rows, size, layers):
    # 13 and 1003 reach the tails of the 8-lane passes; 5 rows of 20,000 the threads
    probs, words = _operands(rows, size, layers)
    tournament = jax.jit(lambda p, w: synthid_scheme.tournament_packed(p, w, layers))
    assert synthid_scheme.TOURNAMENT_TARGET in tournament.lower(probs, words).as_text()
    got = np.asarray(tournament(probs, words))
    # each layer's factor (1 + g - M) carries M's float32 rounding into p; with 13 tokens 1 - M gets small
    # and the relative error large (XLA's loop: 8.3e-5 there, 1e-6 on the large cases; the kernel 4.7e-6)
    rtol = 2e-4 if size < 100 else 1e-5
    np.testing.assert_allclose(got, reference(probs, words, layers), rtol=rtol, atol=1e-9)
    xla = np.asarray(jax.jit(lambda p, w: synthid_scheme._tournament_xla(p, w, layers))(probs, words))
    np.testing.assert_allclose(got, xla, rtol=rtol, atol=1e-9)


@needs_kernel
def test_a_row_is_the_same_whatever_the_other_rows():
    probs, words = _operands(6, 30000, 30, seed=1)
    tournament = jax.jit(lambda p, w: synthid_scheme.tournament_packed(p, w, 30))
    together = np.asarray(tournament(probs, words))
    for r in (0, 3, 5):
        np.testing.assert_array_equal(np.asarray(tournament(probs[r:r + 1], words[r:r + 1]))[0], together[r])
    mapped = jax.vmap(lambda p, w: synthid_scheme.tournament_packed(p, w, 30))(probs[:, None], words[:, None])
    np.testing.assert_array_equal(np.asarray(mapped)[:, 0], together)


def test_more_than_32_layers_run_in_xla():
    probs, words = _operands(2, 64, 40)
    lowered = jax.jit(lambda p, w: synthid_scheme.tournament_packed(p, w, 40)).lower(probs, words).as_text()
    assert synthid_scheme.TOURNAMENT_TARGET not in lowered
    np.testing.assert_allclose(np.asarray(synthid_scheme.tournament_packed(probs, words, 40)),
                               reference(probs, words, 40), rtol=1e-4, atol=1e-9)
