"""Tree attention (``LanguageModel.step_tree``): every node of a token tree scored in one forward
equals the node's root-to-node path fed to ``step``, for global and sliding-window layers, soft-capped
scores and the block-by-block cache read; refusals at the boundary."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.lm import tree_ancestors, tree_depths
from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig

CONFIG = TransformerConfig(family="llama", vocab_size=40, hidden_size=32, intermediate_size=48, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)
# root, its 3 children, 2 grandchildren under the first and one under the third, one great-grandchild
PARENTS = (-1, 0, 0, 0, 1, 1, 3, 5)


def _path(parents, node):
    out = [node]
    while parents[out[-1]] >= 0:
        out.append(parents[out[-1]])
    return out[::-1]


def test_tree_helpers():
    assert tree_depths(PARENTS).tolist() == [0, 1, 1, 1, 2, 2, 2, 3]
    anc = tree_ancestors(PARENTS)
    assert anc[7].tolist() == [True, True, False, False, False, True, False, True]
    assert anc.sum() == sum(len(_path(PARENTS, i)) for i in range(len(PARENTS)))
    for bad in [(), (0, 0), (-1, 1), (-1, 0, 2), (-1, -1)]:
        with pytest.raises(ValueError, match="parents"):
            tree_depths(bad)


@pytest.mark.parametrize("variant,block", [("global", 256), ("global", 4), ("sliding", 4), ("softcap", 256)])
def test_each_node_equals_its_path_fed_to_step(variant, block):
    config = {"global": CONFIG, "sliding": CONFIG.replace(family="mistral", sliding_window=6),
              "softcap": CONFIG.replace(attn_logit_softcap=2.0)}[variant]
    params = transformer.init_params(config, jax.random.key(1), scale=0.3)
    lm = protocol.make_language_model(config, name="tiny", attention_block=block)
    rng = np.random.default_rng(0)
    prefix_lengths = np.array([9, 3])
    prefix = rng.integers(0, config.vocab_size, (2, 9)).astype(np.int32)
    cache = lm.init_cache(2, 32)
    _, cache = lm.step(params, cache, prefix, prefix_lengths)
    nodes = rng.integers(0, config.vocab_size, (2, len(PARENTS))).astype(np.int32)
    logits, hidden, tree_cache = lm.step_tree(params, cache, nodes, PARENTS, return_hidden=True)
    assert np.array_equal(np.asarray(tree_cache.lengths), prefix_lengths)
    for node in range(len(PARENTS)):
        path = _path(PARENTS, node)
        want, want_hidden, _ = lm.step_hidden(params, cache, nodes[:, path], np.full(2, len(path)))
        np.testing.assert_allclose(np.asarray(logits[:, node]), np.asarray(want[:, -1]), atol=2e-5, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(hidden[:, node]), np.asarray(want_hidden[:, -1]), atol=2e-5, rtol=1e-5)
    # the tree's keys sit in slots length + i: a path moved into place continues like a plain decode
    path = _path(PARENTS, 7)
    base = prefix_lengths[:, None]
    moved = jax.tree_util.tree_map(
        lambda x: x if x.ndim < 2 else x.at[np.arange(2)[:, None], base + np.arange(len(path))].set(
            x[np.arange(2)[:, None], base + np.asarray(path)]), tree_cache)
    moved = lm.rewind(moved, prefix_lengths + len(path))
    nxt = rng.integers(0, config.vocab_size, (2, 1)).astype(np.int32)
    got, _ = lm.step(params, moved, nxt, np.ones(2, np.int32))
    _, direct = lm.step(params, cache, nodes[:, path], np.full(2, len(path)))
    want, _ = lm.step(params, direct, nxt, np.ones(2, np.int32))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=1e-5)


def test_bad_trees_are_refused():
    params = transformer.init_params(CONFIG, jax.random.key(0))
    lm = protocol.make_language_model(CONFIG, name="tiny")
    cache = lm.init_cache(1, 8)
    with pytest.raises(ValueError, match="one per node"):
        lm.step_tree(params, cache, jnp.zeros((1, 3), jnp.int32), PARENTS)
    with pytest.raises(ValueError, match="capacity"):
        lm.step_tree(params, lm.rewind(cache, np.array([4])), jnp.zeros((1, 8), jnp.int32), PARENTS)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lm.step_tree(params, cache, jnp.full((1, 8), CONFIG.vocab_size, jnp.int32), PARENTS)
    narrow = CONFIG.replace(family="mistral", sliding_window=3)
    with pytest.raises(ValueError, match="attention windows"):
        protocol.make_language_model(narrow, name="tiny").step_tree(
            transformer.init_params(narrow, jax.random.key(0)), cache, jnp.zeros((1, 8), jnp.int32), PARENTS)
