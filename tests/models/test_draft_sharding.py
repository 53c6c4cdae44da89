"""Drafts with a reduced head (LoRA, models/draft.py) and feature drafts (models/feature_draft.py)
on a (data, model) mesh: their extra params get a layout, and the loop gives the one-device tokens.

XLA_FLAGS must be set before jax starts, so the 4-device run is a subprocess
(tests/multidevice.py)."""

import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests.models.test_draft_reduced_head import tiny_pair
from tests.multidevice import run_on_devices
from wmspec_jax.models import partitioning

SCRIPT = textwrap.dedent(
    """
    import json, jax, numpy as np
    from tests.models import test_feature_draft as tfd
    from tests.models.test_draft_reduced_head import tiny_pair as lora_pair
    from wmspec_jax import decoders, prf, sharding, speculative
    assert jax.device_count() == 4
    target, feature = tfd.tiny_pair()
    lora = lora_pair()[1]
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, 16, (4, 5)).astype(np.int32)
    lengths = np.array([5, 3, 4, 2], np.int32)

    def run(draft, method, mesh):
        place = (lambda c: c.params) if mesh is None else (lambda c: sharding.shard_params(c.params, c.config, mesh))
        cfg = speculative.SpeculativeConfig(method=method, decoder=decoders.WatermarkDecoder("gumbel"),
                                            lookahead=2, max_new_tokens=10, temperature=1.0)
        args = (prompts, lengths, prf.stream_keys([0, 1, 2, 3]))
        if mesh is not None:
            args = sharding.shard_batch(args, mesh)
        res = speculative.generate(target.language_model(mesh), place(target), *args, jax.random.key(5), cfg,
                                   draft=draft.language_model(mesh), draft_params=place(draft))
        return np.asarray(res.tokens), np.asarray(res.tokens_per_step), place(draft)

    mesh = sharding.make_mesh("data=2,model=2")
    report = {}
    # one method per draft: the mesh path of the draft does not depend on the acceptance rule (the
    # target-only mesh tests cover both methods)
    for name, draft, method in (("lora", lora, "standard"), ("feature", feature, "pseudorandom")):
        ref, ref_steps, _ = run(draft, method, None)
        got, got_steps, placed = run(draft, method, mesh)
        report[f"{name}/{method}"] = {
            "same": bool(np.array_equal(ref, got) and np.array_equal(ref_steps, got_steps)),
            "multi_token_steps": int((ref_steps > 1).sum()),
            "head_rows": list(placed["head_rows"].shape),
            "head_rows_shard": list(placed["head_rows"].addressable_shards[0].data.shape),
        }
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def four_device_report():
    return run_on_devices(SCRIPT, 4)


@pytest.mark.parametrize("case", ["lora/standard", "feature/pseudorandom"])
def test_drafts_on_a_mesh_give_the_one_device_tokens(four_device_report, case):
    """data=2, model=2: the same tokens and tokens per step as on one device; the head's
    kept rows are split over model (half per device)."""
    got = four_device_report[case]
    assert got["multi_token_steps"] > 0  # drafts were accepted: the comparison covers rollbacks
    assert got["same"]
    kept, d = got["head_rows"]
    assert got["head_rows_shard"] == [kept // 2, d]


def test_draft_param_layout():
    target, drafted = tiny_pair()
    specs = partitioning.param_partition_specs(drafted.config, 2, drafted.params)
    assert set(specs) == set(drafted.params)
    assert specs["head_rows"] == P("model", None) and specs["head_ids"] == P()
    odd = dict(drafted.params, head_rows=jnp.zeros((3, 16)))  # 3 kept ids: not divisible by 2
    assert partitioning.param_partition_specs(drafted.config, 2, odd)["head_rows"] == P(None, None)
    with pytest.raises(ValueError, match="no tensor-parallel layout for parameter 'lora_a'"):
        partitioning.param_partition_specs(drafted.config, 2, dict(drafted.params, lora_a=np.zeros(2)))
