"""Attention over the KV cache: the one-pass and block-by-block forms against a NumPy reference,
and a row's output independent of how long the other rows of its batch are."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.models import attention, protocol, transformer
from wmspec_jax.models.config import GLOBAL_WINDOW, TransformerConfig

GQA = TransformerConfig(family="llama", vocab_size=50, hidden_size=32, intermediate_size=48, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)


def reference(config, q, keys, values, positions, window):
    """float64 softmax attention with explicit loops over rows, queries and heads."""
    b, t, nh, dh = q.shape
    out = np.zeros((b, t, nh, dh))
    for r in range(b):
        for i in range(t):
            p = positions[r, i]
            slots = [s for s in range(keys.shape[1]) if p - window < s <= p]
            for h in range(nh):
                kv = h // config.q_per_kv
                s = np.array([q[r, i, h] @ keys[r, j, kv] for j in slots], np.float64) * config.attention_scale
                if config.attn_logit_softcap is not None:
                    s = np.tanh(s / config.attn_logit_softcap) * config.attn_logit_softcap
                w = np.exp(s - s.max())
                out[r, i, h] = (w / w.sum()) @ values[r, slots, kv].astype(np.float64)
    return out


@pytest.mark.parametrize("block", [64, 8, 7, 1])
@pytest.mark.parametrize("window,softcap", [(GLOBAL_WINDOW, None), (5, None), (GLOBAL_WINDOW, 3.0)])
def test_attend_matches_a_float64_reference(block, window, softcap):
    """Capacity 40: block 64 is the one-pass form; 8 divides it; 7 leaves a last block shifted
    left (overlapping slots masked); 1 reads slot by slot."""
    config = GQA.replace(attn_logit_softcap=softcap)
    rng = np.random.default_rng(0)
    b, t, cap = 3, 3, 40
    q = rng.normal(size=(b, t, 4, 8)).astype(np.float32)
    keys = rng.normal(size=(b, cap, 2, 8)).astype(np.float32)
    values = rng.normal(size=(b, cap, 2, 8)).astype(np.float32)
    # Rows at different depths, one of them at the very end of the cache.
    positions = np.array([[0, 1, 2], [17, 18, 19], [37, 38, 39]], np.int32)
    got = jax.jit(functools.partial(attention.attend, config, window=window, block=block))(
        q, keys, values, positions)
    np.testing.assert_allclose(np.asarray(got), reference(config, q, keys, values, positions, window),
                               atol=2e-5, rtol=0)


@pytest.mark.parametrize("window", [GLOBAL_WINDOW, 6])
def test_a_row_is_bit_identical_whatever_the_other_rows_lengths(window):
    """Blocked attention runs over the blocks any row of the batch needs; for a shorter row the
    extra blocks add exact zeros (and, with a window, so do the leading ones it cannot see).
    Same batch size and widths on both sides, so only the other row's length differs."""
    config = GQA.replace(sliding_window=window if window != GLOBAL_WINDOW else None)
    params = transformer.init_params(config, jax.random.key(1), scale=0.3)
    lm = protocol.make_language_model(config, name="tiny", attention_block=4)
    step = jax.jit(lm.step)
    rng = np.random.default_rng(2)
    short, other_short, long_ = (rng.integers(0, 50, size=n) for n in (6, 5, 37))

    def last_logits(rows, width=37):
        tokens = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            tokens[i, :len(r)] = r
        n = np.asarray([len(r) for r in rows], np.int32)
        cache = lm.init_cache(len(rows), 48)
        _, cache = step(params, cache, jnp.asarray(tokens[:, :-1]), jnp.asarray(n - 1))
        last = jnp.asarray(tokens[np.arange(len(rows)), n - 1][:, None])
        logits, _ = step(params, cache, last, jnp.ones(len(rows), jnp.int32))
        return np.asarray(logits[:, 0])

    beside_short = last_logits([short, other_short])  # 2 blocks of 4 slots
    beside_long = last_logits([short, long_])  # 10 blocks
    np.testing.assert_array_equal(beside_long[0], beside_short[0])
    assert not np.array_equal(beside_long[1], beside_short[1])


def test_one_pass_and_blocked_steps_agree_on_a_whole_generation_schedule():
    """The same model with a 64-slot cache read in one pass and in blocks of 8: prefill, then
    ragged decode steps, logits equal to float32 rounding."""
    params = transformer.init_params(GQA, jax.random.key(3), scale=0.3)
    rng = np.random.default_rng(4)
    outs = []
    for block in (256, 8):
        lm = protocol.make_language_model(GQA, name="tiny", attention_block=block)
        step = jax.jit(lm.step)
        cache = lm.init_cache(2, 64)
        rng = np.random.default_rng(4)
        got = []
        for t, n in [(20, (20, 11)), (3, (3, 1)), (1, (1, 1)), (4, (2, 4))] * 3:
            tokens = jnp.asarray(rng.integers(0, 50, size=(2, t)), jnp.int32)
            logits, cache = step(params, cache, tokens, jnp.asarray(n, jnp.int32))
            got.append(np.asarray(logits))
        outs.append(got)
    for one_pass, blocked in zip(*outs):
        np.testing.assert_allclose(blocked, one_pass, atol=1e-5, rtol=0)


def test_attention_block_is_validated():
    with pytest.raises(ValueError, match="attention_block must be >= 1"):
        protocol.make_language_model(GQA, name="tiny", attention_block=0)
    with pytest.raises(TypeError, match="attention_block must be an int"):
        protocol.make_language_model(GQA, name="tiny", attention_block=2.5)


def test_training_differentiates_through_one_block():
    """Teacher forcing (the distillation scripts) passes a block of the whole sequence: no loop with
    data-dependent bounds, so reverse-mode differentiation works; in several blocks, with traced
    positions, it cannot."""
    params = transformer.init_params(GQA, jax.random.key(5), scale=0.3)
    seq = jnp.asarray(np.random.default_rng(6).integers(0, 50, size=(2, 12)), jnp.int32)

    def loss(p, positions, block):
        cache = protocol.cache_lib.init_cache(GQA, 2, 12)
        h, _ = transformer.hidden_states(GQA, p, seq, positions, cache, jnp.full((2,), 12, jnp.int32),
                                         attention_block=block)
        return jnp.mean(transformer.lm_logits(GQA, p, h) ** 2)

    positions = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))
    grads = jax.jit(jax.grad(loss), static_argnums=2)(params, positions, 12)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree_util.tree_leaves(grads))
    assert float(jnp.abs(grads["layers"][0]["wq"]).max()) > 0
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.jit(jax.grad(loss), static_argnums=2)(params, positions, 4)
