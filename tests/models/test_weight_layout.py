"""The two weight layouts (models.transformer's module doc): same model, same logits, the
weight-first product kept as compiled, the tensor-parallel split of the same dimension."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from wmspec_jax.models import hf, linear, pairs, partitioning, transformer
from wmspec_jax.models.config import TransformerConfig


CONFIG = TransformerConfig(family="llama", vocab_size=48, hidden_size=16, intermediate_size=24, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=4, tie_word_embeddings=False)


def test_conversion_transposes_the_matrices_only_and_round_trips_exactly():
    params = transformer.init_params(CONFIG, jax.random.key(0))
    config, out_in = transformer.to_weight_layout(CONFIG, params, "out_in")
    assert config.weight_layout == "out_in" and config.replace(weight_layout="in_out") == CONFIG
    transformer.check_params(config, out_in)
    with pytest.raises(ValueError, match="expected"):
        transformer.check_params(CONFIG, out_in)
    for name in linear.MATRICES:
        np.testing.assert_array_equal(out_in["layers"][1][name], np.asarray(params["layers"][1][name]).T)
    np.testing.assert_array_equal(out_in["lm_head"], np.asarray(params["lm_head"]).T)
    assert out_in["embed"] is params["embed"] and out_in["layers"][0]["attn_norm"] is params["layers"][0]["attn_norm"]
    back_config, back = transformer.to_weight_layout(config, out_in, "in_out")
    assert back_config == CONFIG
    jax.tree_util.tree_map(np.testing.assert_array_equal, back, params)
    assert transformer.to_weight_layout(CONFIG, params, "in_out")[1] is params
    with pytest.raises(ValueError, match="weight_layout"):
        CONFIG.replace(weight_layout="row_major")


@pytest.mark.parametrize("name", ["llama_gqa", "llama_tied", "gemma2_softcap", "qwen2_bias"])
def test_both_layouts_give_the_same_logits(tiny_checkpoints, name):
    _, path = tiny_checkpoints[name]
    ckpt = hf.load_checkpoint(path, tokenizer=False)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, ckpt.config.vocab_size, (2, 9)), jnp.int32)
    logits = {}
    for layout in ("in_out", "out_in"):
        c = ckpt.with_weight_layout(layout)
        lm = c.language_model()
        logits[layout], _ = lm.step(c.params, lm.init_cache(2, 16), tokens, jnp.array([9, 6], jnp.int32))
    assert float(jnp.std(logits["in_out"])) > 0.3
    np.testing.assert_allclose(np.asarray(logits["out_in"]), np.asarray(logits["in_out"]), atol=2e-5, rtol=0)


def _dot_output_shapes(config, rows):
    w = jnp.zeros((24, 16) if config.weight_layout == "out_in" else (16, 24))
    hlo = jax.jit(lambda h, w: linear.linear(h, w, config)).lower(jnp.zeros((1, rows, 16)), w).compile().as_text()
    return re.findall(r"= f32\[([\d,]+)\]\{[\d,]*\} (?:dot|fusion)\(", hlo)


def test_the_out_in_product_stays_weight_first_when_compiled():
    # Without the optimisation barrier XLA folds the transpose into the product and emits
    # [rows, out] = h @ w^T, the form that costs 2.4 decode steps for 4 rows on CPU. (XLA's dot
    # computes the product where the CPU kernel does not: row_kernel=False, more rows, other backends.)
    assert "24,4" in _dot_output_shapes(CONFIG.replace(weight_layout="out_in", row_kernel=False), 4)
    assert "4,24" in _dot_output_shapes(CONFIG, 4)


def test_tensor_parallel_specs_split_the_same_dimension_in_both_layouts():
    out_in = CONFIG.replace(weight_layout="out_in")
    a = partitioning.param_partition_specs(CONFIG, 2)
    b = partitioning.param_partition_specs(out_in, 2)
    for name in linear.MATRICES:
        assert tuple(b["layers"][0][name]) == tuple(a["layers"][0][name])[::-1], name
        assert a["layers"][0][name] != P(None, None), name
    assert tuple(b["lm_head"]) == tuple(a["lm_head"])[::-1]
    shapes = transformer.param_shapes(out_in)
    assert shapes["lm_head"] == (CONFIG.vocab_size, CONFIG.hidden_size)
    assert shapes["layers"][0]["w_down"] == (CONFIG.hidden_size, CONFIG.intermediate_size)


def test_a_pair_puts_its_target_in_the_layout_asked_for(tmp_path):
    from tests.models.test_checkpoints import CFG as SMALL, WORDS, write_checkpoint

    write_checkpoint(tmp_path / "t", SMALL, seed=0, words=WORDS)
    write_checkpoint(tmp_path / "d", SMALL, seed=1, words=WORDS)
    assert pairs.target_weight_layout("auto") == ("out_in" if jax.default_backend() == "cpu" else "in_out")
    with pytest.raises(ValueError, match="weight_layout"):
        pairs.target_weight_layout("columns")
    d, f = SMALL.hidden_size, SMALL.intermediate_size
    logits = {}
    for layout, shape in (("in_out", (d, f)), ("out_in", (f, d))):
        pair = pairs.load_pair(str(tmp_path / "t"), str(tmp_path / "d"), weight_layout=layout)
        assert pair.target_params["layers"][0]["w_up"].shape == shape
        assert pair.draft_params["layers"][0]["w_up"].shape == shape
        tokens = jnp.arange(6, dtype=jnp.int32)[None] % SMALL.vocab_size
        logits[layout], _ = pair.target.step(pair.target_params, pair.target.init_cache(1, 8), tokens,
                                             jnp.array([6], jnp.int32))
    np.testing.assert_allclose(np.asarray(logits["out_in"]), np.asarray(logits["in_out"]), atol=2e-5, rtol=0)


def test_lora_adapters_refuse_a_target_in_the_out_in_layout():
    from wmspec_jax.models import draft
    from wmspec_jax.models.hf import Checkpoint

    config = CONFIG.replace(intermediate_size=16)  # square matrices: a wrong merge would not raise by itself
    params = transformer.init_params(config, jax.random.key(1))
    adapters = draft.init_adapters(params, [0], rank=2, key=jax.random.key(2))
    draft.make_draft(Checkpoint(name="t", config=config, params=params), [0], adapters)
    out_in = Checkpoint(name="t", config=config, params=params).with_weight_layout("out_in")
    with pytest.raises(ValueError, match="in_out weight layout"):
        draft.make_draft(out_in, [0], adapters)


def test_a_draft_with_a_reduced_head_gives_the_same_logits_in_both_layouts():
    from wmspec_jax.models import draft
    from wmspec_jax.models.hf import Checkpoint

    params = transformer.init_params(CONFIG, jax.random.key(3), scale=0.4)
    drafted = draft.make_draft(Checkpoint(name="t", config=CONFIG, params=params), [1],
                               {"head_ids": jnp.arange(0, CONFIG.vocab_size, 3)})
    tokens = jnp.asarray([[1, 5, 9, 2, 7]], jnp.int32)
    logits = {}
    for layout in ("in_out", "out_in"):
        d = drafted.with_weight_layout(layout)
        assert type(d) is type(drafted) and d.config.weight_layout == layout
        lm = d.language_model()
        logits[layout], _ = lm.step(d.params, lm.init_cache(1, 8), tokens, jnp.array([5], jnp.int32))
    assert np.isneginf(np.asarray(logits["out_in"])[..., 1]).all()
    finite = np.isfinite(np.asarray(logits["in_out"]))
    np.testing.assert_array_equal(np.isfinite(np.asarray(logits["out_in"])), finite)
    np.testing.assert_allclose(np.asarray(logits["out_in"])[finite], np.asarray(logits["in_out"])[finite],
                               atol=2e-5, rtol=0)
