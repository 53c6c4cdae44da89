"""The CPU kernel for attention of few queries (wmspec_jax.models.attention_kernel): its attention against
a float64 reference (windows, soft-capping, token trees, NaN keys, slots past the cache), a query's
output independent of the rest of the call, and its place in the models."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.models import attention, attention_kernel, cpu_kernels, protocol, transformer
from wmspec_jax.models.config import GLOBAL_WINDOW, TransformerConfig

needs_kernel = pytest.mark.skipif(cpu_kernels.library() is None,
                                  reason=f"the kernels are not built here: {cpu_kernels.problem()}")

CONFIG = TransformerConfig(family="llama", vocab_size=50, hidden_size=48, intermediate_size=48, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=12, tie_word_embeddings=False,
                           weight_layout="out_in")


def reference(config, q, keys, values, visible):
    """float64 softmax attention; visible(r, i, slot) -> bool."""
    b, t, nh, dh = q.shape
    out = np.zeros((b, t, nh, dh))
    for r in range(b):
        for i in range(t):
            slots = [s for s in range(keys.shape[1]) if visible(r, i, s)]
            for h in range(nh):
                if not slots:
                    continue
                kv = h // config.q_per_kv
                s = np.array([q[r, i, h].astype(np.float64) @ keys[r, j, kv] for j in slots]) * config.attention_scale
                if config.attn_logit_softcap is not None:
                    s = np.tanh(s / config.attn_logit_softcap) * config.attn_logit_softcap
                w = np.exp(s - s.max())
                out[r, i, h] = (w / w.sum()) @ values[r, slots, kv].astype(np.float64)
    return out


def _operands(b, t, cap, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(b, t, 4, 12)).astype(np.float32), rng.normal(size=(b, cap, 2, 12)).astype(np.float32),
            rng.normal(size=(b, cap, 2, 12)).astype(np.float32))


def _attend(config, window, tree=None):
    assert attention_kernel.usable(config, jnp.ones((1, 1, 4, 12)), jnp.ones((1, 8, 2, 12)), jnp.ones((1, 8, 2, 12)))
    return jax.jit(functools.partial(attention.attend, config, window=window, block=8, tree=tree))


@needs_kernel
@pytest.mark.parametrize("window,softcap", [(GLOBAL_WINDOW, None), (5, None), (GLOBAL_WINDOW, 3.0)])
def test_the_kernel_matches_a_float64_reference(window, softcap):
    config = CONFIG.replace(attn_logit_softcap=softcap)
    q, keys, values = _operands(3, 3, 40)
    # a row at the start, one in the middle, one at the very end of the cache, and a query past it (at 45:
    # with a window of 5 it sees no slot)
    positions = np.array([[0, 1, 2], [17, 18, 19], [38, 39, 45]], np.int32)
    got = np.asarray(_attend(config, window)(q, keys, values, positions))
    want = reference(config, q, keys, values,
                     lambda r, i, s: positions[r, i] - window < s <= positions[r, i])
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
    assert (not got[2, 2].any()) == (window == 5)
    xla = np.asarray(_attend_xla(config, window)(q, keys, values, positions))
    np.testing.assert_allclose(got, xla, atol=2e-6, rtol=0)


def _attend_xla(config, window, tree=None):
    return jax.jit(functools.partial(attention.attend, config.replace(row_kernel=False), window=window, block=8,
                                     tree=tree))


@needs_kernel
def test_tree_queries_see_the_committed_slots_and_their_ancestors():
    # a (2, 1) tree: nodes 0, 1 at depth 1, node 2 (child of 0) at depth 2
    ancestors = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1]], bool)
    depth = np.array([0, 0, 1])
    base = np.array([7, 30], np.int32)
    positions = base[:, None] + depth[None, :]
    q, keys, values = _operands(2, 3, 40, seed=1)
    for window in (GLOBAL_WINDOW, 4):
        tree = (jnp.asarray(base), ancestors)
        got = np.asarray(_attend(CONFIG, window, tree)(q, keys, values, jnp.asarray(positions)))

        def visible(r, i, s):
            rel = s - base[r]
            if rel < 0:
                return s > positions[r, i] - window
            return rel < 3 and ancestors[i, rel]

        np.testing.assert_allclose(got, reference(CONFIG, q, keys, values, visible), atol=2e-6, rtol=0)
        xla = np.asarray(_attend_xla(CONFIG, window, tree)(q, keys, values, jnp.asarray(positions)))
        np.testing.assert_allclose(got, xla, atol=2e-6, rtol=0)


@needs_kernel
def test_a_query_is_the_same_sum_whatever_the_rest_of_the_call():
    """A decode step and a verification pass give a query the same bits; so do other rows and longer
    caches (the large case runs over the threads)."""
    q, keys, values = _operands(4, 6, 300, seed=2)
    positions = np.array([[250 + i for i in range(6)], [i for i in range(6)], [100 + i for i in range(6)],
                          [290 + i for i in range(6)]], np.int32)
    attend = _attend(CONFIG, GLOBAL_WINDOW)
    together = np.asarray(attend(q, keys, values, positions))
    for r in range(4):
        for i in range(6):
            alone = attend(q[r:r + 1, i:i + 1], keys[r:r + 1], values[r:r + 1], positions[r:r + 1, i:i + 1])
            np.testing.assert_array_equal(np.asarray(alone)[0, 0], together[r, i])


@needs_kernel
def test_a_nan_key_makes_the_queries_that_see_it_nan():
    q, keys, values = _operands(1, 2, 16, seed=3)
    keys[0, 5, 1] = np.nan
    got = np.asarray(_attend(CONFIG, GLOBAL_WINDOW)(q, keys, values, np.array([[4, 5]], np.int32)))
    assert np.isfinite(got[0, 0]).all()  # slot 5 is not visible at position 4
    assert np.isnan(got[0, 1, 2:]).all() and np.isfinite(got[0, 1, :2]).all()  # heads 2, 3 read key head 1


@needs_kernel
def test_the_models_use_the_kernel_where_the_config_says():
    keys = values = jnp.ones((1, 32, 2, 12))

    def lowered(config, t=4):
        f = functools.partial(attention.attend, config, window=GLOBAL_WINDOW)
        return jax.jit(f).lower(jnp.ones((1, t, 4, 12)), keys, values, jnp.zeros((1, t), jnp.int32)).as_text()

    assert attention_kernel.TARGET in lowered(CONFIG)
    assert attention_kernel.TARGET not in lowered(CONFIG.replace(row_kernel=False))
    assert attention_kernel.TARGET not in lowered(CONFIG.replace(weight_layout="in_out"))
    assert attention_kernel.TARGET not in lowered(CONFIG, t=attention_kernel.MAX_QUERIES + 1)  # a long prefill


@needs_kernel
def test_a_model_steps_and_differentiates_as_with_xla():
    params = transformer.init_params(CONFIG, jax.random.PRNGKey(0), jnp.float32)
    tokens = jnp.asarray([[3, 14, 15, 9], [2, 7, 1, 8]], jnp.int32)
    logits = {}
    for kernel in (True, False):
        lm = protocol.make_language_model(CONFIG.replace(row_kernel=kernel), name=f"kernel={kernel}")
        step = jax.jit(lm.step)
        _, cache = step(params, lm.init_cache(2, 16), tokens, jnp.array([4, 3], jnp.int32))
        logits[kernel], _ = step(params, cache, tokens[:, :2], jnp.array([2, 2], jnp.int32))
    np.testing.assert_allclose(logits[True], logits[False], rtol=2e-5, atol=2e-5)

    q, keys, values = _operands(1, 2, 8, seed=4)
    positions = jnp.array([[6, 7]], jnp.int32)

    def loss(config):
        return lambda q, k, v: jnp.sum(jnp.sin(attention.attend(config, q, k, v, positions, GLOBAL_WINDOW, block=8)))

    got = jax.grad(loss(CONFIG), argnums=(0, 1, 2))(q, keys, values)
    want = jax.grad(loss(CONFIG.replace(row_kernel=False)), argnums=(0, 1, 2))(q, keys, values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
