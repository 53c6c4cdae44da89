"""The LanguageModel protocol: step appends ragged chunks, rewind only moves lengths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.models import cache as cache_lib
from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig

CFG = TransformerConfig(family="llama", vocab_size=50, hidden_size=32, intermediate_size=40,
                        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                        rope_theta=10000.0, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def model():
    params = transformer.init_params(CFG, jax.random.PRNGKey(0), scale=0.3)
    lm = protocol.make_language_model(CFG, name="tiny")
    return lm, params, jax.jit(lm.step)


def test_step_advances_lengths_by_num_new_and_leaves_idle_rows_untouched(model):
    lm, params, step = model
    cache = lm.init_cache(3, 16)
    np.testing.assert_array_equal(lm.cache_lengths(cache), [0, 0, 0])
    tokens = jnp.asarray([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], jnp.int32)
    logits, cache = step(params, cache, tokens, jnp.asarray([4, 2, 0], jnp.int32))
    assert logits.shape == (3, 4, CFG.vocab_size) and logits.dtype == jnp.float32
    assert np.isfinite(np.asarray(logits)).all()  # including the i >= num_new garbage
    np.testing.assert_array_equal(lm.cache_lengths(cache), [4, 2, 0])
    # Row 2 had num_new = 0: its cache is bit-for-bit untouched.
    assert not np.asarray(jnp.stack(cache.k)[:, 2]).any() and not np.asarray(jnp.stack(cache.v)[:, 2]).any()
    # Row 1 wrote exactly slots 0 and 1.
    written = np.abs(np.asarray(jnp.stack(cache.k)[:, 1])).sum(axis=(0, 2, 3)) > 0
    np.testing.assert_array_equal(np.flatnonzero(written), [0, 1])

    before = jax.tree_util.tree_map(np.asarray, cache)
    logits, cache = step(params, cache, tokens[:, :2], jnp.asarray([0, 1, 2], jnp.int32))
    np.testing.assert_array_equal(lm.cache_lengths(cache), [4, 3, 2])
    np.testing.assert_array_equal(np.stack(cache.k)[:, 0], np.stack(before.k)[:, 0])
    assert np.isfinite(np.asarray(logits)).all()


def test_logits_only_depend_on_the_row_prefix(model):
    """logits[b, i] is the distribution after the row's cache plus tokens[b, :i + 1]."""
    lm, params, step = model
    seq = np.arange(1, 9, dtype=np.int32)
    whole, _ = step(params, lm.init_cache(1, 16), jnp.asarray(seq[None]), jnp.asarray([8]))
    cache = lm.init_cache(2, 16)
    # Row 0 gets the sequence in chunks of 3, 1, 4; row 1 is fed other tokens alongside.
    parts = []
    for lo, hi in ((0, 3), (3, 4), (4, 8)):
        toks = np.zeros((2, hi - lo), np.int32)
        toks[0] = seq[lo:hi]
        toks[1] = (seq[lo:hi] * 7) % CFG.vocab_size
        out, cache = step(params, cache, jnp.asarray(toks), jnp.asarray([hi - lo, hi - lo]))
        parts.append(np.asarray(out[0]))
    np.testing.assert_allclose(np.concatenate(parts), np.asarray(whole[0]), atol=1e-5)


def test_rewind_then_decode_matches_fresh_decode(model):
    lm, params, step = model
    prefix = jnp.asarray([[3, 1, 4, 1, 5], [2, 7, 1, 8, 2]], jnp.int32)
    cache = lm.init_cache(2, 16)
    _, cache = step(params, cache, prefix, jnp.asarray([5, 3]))
    # Speculate 3 tokens that get rejected, then roll back to the prefix.
    _, cache = step(params, cache, jnp.asarray([[9, 9, 9], [6, 6, 6]]), jnp.asarray([3, 3]))
    np.testing.assert_array_equal(lm.cache_lengths(cache), [8, 6])
    cache = lm.rewind(cache, jnp.asarray([5, 3], jnp.int32))
    np.testing.assert_array_equal(lm.cache_lengths(cache), [5, 3])
    after = jnp.asarray([[2, 6], [4, 4]], jnp.int32)
    got, _ = step(params, cache, after, jnp.asarray([2, 2]))

    fresh = lm.init_cache(2, 16)
    _, fresh = step(params, fresh, prefix, jnp.asarray([5, 3]))
    want, _ = step(params, fresh, after, jnp.asarray([2, 2]))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
    # A different continuation really gives different logits (the check has teeth).
    other, _ = step(params, fresh, after[:, ::-1], jnp.asarray([2, 2]))
    assert np.abs(np.asarray(other) - np.asarray(want)).max() > 1e-3


def test_prefill_logits_are_dead_code_when_unused(model):
    """Prefill under jit with the logits dropped never builds the [B, T, V] projection."""
    lm, params, _ = model

    def prefill(params, cache, tokens, n):
        return lm.step(params, cache, tokens, n)[1]

    tokens = jnp.zeros((2, 7), jnp.int32)
    hlo = jax.jit(prefill).lower(params, lm.init_cache(2, 16), tokens,
                                 jnp.asarray([7, 7])).compile().as_text()
    full = jax.jit(lm.step).lower(params, lm.init_cache(2, 16), tokens,
                                  jnp.asarray([7, 7])).compile().as_text()
    shape = f"f32[2,7,{CFG.vocab_size}]"
    assert shape in full and shape not in hlo


def test_bad_inputs_are_rejected(model):
    lm, params, _ = model
    cache = lm.init_cache(2, 8)
    with pytest.raises(ValueError, match="tokens must be"):
        lm.step(params, cache, jnp.zeros((3, 1), jnp.int32), jnp.ones((3,), jnp.int32))
    with pytest.raises(ValueError, match="num_new must be"):
        lm.step(params, cache, jnp.zeros((2, 1), jnp.int32), jnp.ones((3,), jnp.int32))
    with pytest.raises(TypeError, match="integers"):
        lm.step(params, cache, jnp.zeros((2, 1), jnp.float32), jnp.ones((2,), jnp.int32))
    with pytest.raises(ValueError, match="lengths must have shape"):
        lm.rewind(cache, jnp.zeros((3,), jnp.int32))
    with pytest.raises(ValueError, match="positive"):
        lm.init_cache(0, 8)
    with pytest.raises(ValueError, match="multiple of"):
        CFG.replace(num_kv_heads=3)


# ---- bad inputs at the public boundary ------------------------------------------------


def test_eager_step_past_the_cache_capacity_raises(model):
    lm, params, _ = model
    cache = lm.init_cache(2, 8)
    _, cache = lm.step(params, cache, jnp.ones((2, 6), jnp.int32), jnp.asarray([6, 2]))
    with pytest.raises(ValueError, match="past the cache capacity 8: row 0 holds 6 tokens and appends 3"):
        lm.step(params, cache, jnp.ones((2, 3), jnp.int32), jnp.asarray([3, 3]))
    # Exactly filling the cache is fine; the unwritten tail of a row never counts.
    logits, cache = lm.step(params, cache, jnp.ones((2, 3), jnp.int32), jnp.asarray([2, 3]))
    np.testing.assert_array_equal(lm.cache_lengths(cache), [8, 5])
    assert np.isfinite(np.asarray(logits)).all()


def test_eager_step_refuses_token_ids_outside_the_vocabulary(model):
    lm, params, _ = model
    cache = lm.init_cache(2, 8)
    for bad in (CFG.vocab_size, -1):
        tokens = jnp.asarray([[1, 2], [3, bad]], jnp.int32)
        with pytest.raises(ValueError, match=f"token id {bad} at row 1, position 1 is outside"):
            lm.step(params, cache, tokens, jnp.asarray([2, 2]))
        # Not written (i >= num_new): garbage is allowed and its logits stay finite.
        logits, _ = lm.step(params, cache, tokens, jnp.asarray([2, 1]))
        assert np.isfinite(np.asarray(logits)).all()


def test_traced_bad_inputs_give_nan_logits_not_wrong_numbers(model):
    """Inside jit nothing can raise: the affected positions are NaN, the rest unchanged."""
    lm, params, step = model
    cache = lm.init_cache(2, 8)
    good = jnp.asarray([[1, 2, 3], [4, 5, 6]], jnp.int32)
    ref, _ = step(params, cache, good, jnp.asarray([3, 3]))
    for bad in (CFG.vocab_size, -1):  # an error, not NaN for >= V nor -1 wrapped to V - 1
        logits, _ = step(params, cache, good.at[1, 1].set(bad), jnp.asarray([3, 3]))
        logits = np.asarray(logits)
        # The bad position and every later one that attends to it are NaN ...
        assert np.isnan(logits[1, 1:]).all()
        # ... earlier positions and other rows are bit-for-bit unaffected.
        np.testing.assert_array_equal(logits[0], np.asarray(ref[0]))
        np.testing.assert_array_equal(logits[1, 0], np.asarray(ref[1, 0]))
    # Row 0 overflows the 8-slot cache at its last token (slot 8): that position is NaN.
    full = lm.rewind(cache, jnp.asarray([6, 0], jnp.int32))
    logits, out = step(params, full, good, jnp.asarray([3, 3]))
    logits = np.asarray(logits)
    assert np.isnan(logits[0, 2]).all() and np.isfinite(logits[0, :2]).all()
    assert np.isfinite(logits[1]).all()
    with pytest.raises(ValueError, match="past the cache capacity"):
        protocol.check_step_inputs(full, good, jnp.asarray([3, 3]), CFG.vocab_size)


def test_cache_longer_than_max_position_embeddings_is_refused():
    cfg = CFG.replace(max_position_embeddings=16)
    lm = protocol.make_language_model(cfg, name="short")
    assert lm.init_cache(1, 16).capacity == 16
    with pytest.raises(ValueError, match="17 positions exceeds the model's max_position_embeddings=16"):
        lm.init_cache(1, 17)


def test_padded_logit_width_is_minus_inf_and_maps_extra_ids(model):
    """A model padded to a wider vocabulary (pairs whose checkpoints pad one tokenizer differently)."""
    lm, params, _ = model
    wide = protocol.make_language_model(CFG, name="wide", vocab_size=CFG.vocab_size + 6)
    assert wide.vocab_size == CFG.vocab_size + 6
    tokens = jnp.asarray([[3, CFG.vocab_size + 2]], jnp.int32)
    logits, _ = wide.step(params, wide.init_cache(1, 4), tokens, jnp.asarray([2]))
    logits = np.asarray(logits)
    assert np.isneginf(logits[..., CFG.vocab_size:]).all()
    # An id of the padding is embedded as id 0.
    ref, _ = lm.step(params, lm.init_cache(1, 4), jnp.asarray([[3, 0]], jnp.int32), jnp.asarray([2]))
    np.testing.assert_array_equal(logits[..., :CFG.vocab_size], np.asarray(ref))
    with pytest.raises(ValueError, match="outside the vocabulary \\[0, 56\\)"):
        wide.step(params, wide.init_cache(1, 4), jnp.asarray([[56]], jnp.int32), jnp.asarray([1]))


def test_a_layer_stack_is_traced_once_and_inlined_as_the_plain_loop(monkeypatch):
    """Layers are traced once per (shapes, window) and inlined: the jaxpr holds every layer's
    equations (no nested call), and the hidden states equal the plain Python loop's exactly."""
    # A config no other test traces, so the trace cache starts empty for it.
    cfg = TransformerConfig(family="llama", vocab_size=37, hidden_size=24, intermediate_size=28, num_layers=4,
                            num_heads=3, num_kv_heads=1, head_dim=8, rope_theta=10000.0, tie_word_embeddings=True)
    params = transformer.init_params(cfg, jax.random.PRNGKey(1), scale=0.3)
    tokens = jnp.asarray([[3, 7, 11, 2, 5]], jnp.int32)
    positions = jnp.arange(5, dtype=jnp.int32)[None]

    def hidden(p):
        cache = cache_lib.init_cache(cfg, 1, 8)
        return transformer.hidden_states(cfg, p, tokens, positions, cache, jnp.asarray([5], jnp.int32))[0]

    traced = []
    attention = transformer.attention
    monkeypatch.setattr(transformer, "attention", lambda *a, **k: traced.append(1) or attention(*a, **k))
    jaxpr = jax.make_jaxpr(hidden)(params)
    assert len(traced) == 1  # one trace for the four same-shaped layers
    calls = [e.params.get("name") for e in jaxpr.eqns if "jaxpr" in e.params]
    assert "_layer" not in calls, f"the layers were not inlined: {calls}"
    inlined = jax.jit(lambda p: hidden(p))(params)
    monkeypatch.setattr(transformer, "_layer", transformer._layer.__wrapped__)  # the plain loop
    assert len(traced) == 1
    plain = jax.jit(lambda p: hidden(p))(params)
    assert len(traced) == 1 + cfg.num_layers
    np.testing.assert_array_equal(np.asarray(inlined), np.asarray(plain))
