"""Meshes, tensor/data-parallel placement and multi-host helpers (wmspec_jax.sharding).

The 8-device checks need XLA_FLAGS before jax starts, so they run in a
subprocess (tests/multidevice.py).
"""

import json
import textwrap

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests.multidevice import run_on_devices
from wmspec_jax import sharding
from wmspec_jax.models import partitioning
from wmspec_jax.models.config import TransformerConfig

# Qwen2.5-7B's shape: 28 query heads, 4 key/value heads, F = 18944, V = 152064.
QWEN7B = TransformerConfig(family="qwen2", vocab_size=152064, hidden_size=3584,
                           intermediate_size=18944, num_layers=28, num_heads=28, num_kv_heads=4,
                           head_dim=128, tie_word_embeddings=False, qkv_bias=True)


@pytest.mark.parametrize("text, want", [
    ("data=2,model=4", sharding.MeshSpec(2, 4)),
    (" model = 8 ", sharding.MeshSpec(-1, 8)),
    ("", sharding.MeshSpec(-1, 1)),
    ("data=8", sharding.MeshSpec(8, 1)),
])
def test_parse_mesh_spec(text, want):
    assert sharding.parse_mesh_spec(text) == want


@pytest.mark.parametrize("text, message", [
    ("data=2,tensor=4", "unknown mesh axis 'tensor'"),
    ("data=2,data=4", "given twice"),
    ("model=0", "must be positive"),
    ("model:4", "expected name=size"),
])
def test_bad_mesh_specs_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        sharding.parse_mesh_spec(text)


def test_mesh_spec_resolution():
    assert sharding.MeshSpec(-1, 4).resolve(8) == sharding.MeshSpec(2, 4)
    assert sharding.MeshSpec(2, -1).resolve(8) == sharding.MeshSpec(2, 4)
    with pytest.raises(ValueError, match="needs 8 devices, but 4 are available"):
        sharding.MeshSpec(2, 4).resolve(4)
    with pytest.raises(ValueError, match="cannot be split into 3"):
        sharding.MeshSpec(-1, 3).resolve(8)
    mesh = sharding.make_mesh("data=1,model=1", devices=jax.devices()[:1])
    assert dict(mesh.shape) == {"data": 1, "model": 1}
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


def test_megatron_layout_and_its_fallback_for_indivisible_heads():
    on4 = partitioning.param_partition_specs(QWEN7B, 4)
    assert len(on4["layers"]) == QWEN7B.num_layers
    assert all(layer == on4["layers"][0] for layer in on4["layers"])  # every layer alike
    layer4 = on4["layers"][0]
    assert layer4["wq"] == P(None, "model") and layer4["bq"] == P("model")
    assert layer4["wk"] == P(None, "model")  # 4 kv heads / 4
    assert layer4["wo"] == P("model", None)
    assert layer4["w_down"] == P("model", None)
    assert on4["embed"] == P("model", None) and on4["lm_head"] == P(None, "model")
    assert layer4["attn_norm"] == P(None) and on4["final_norm"] == P()
    layer8 = partitioning.param_partition_specs(QWEN7B, 8)["layers"][0]
    # 28 query heads and 4 kv heads do not split 8 ways: replicated; the MLP still splits.
    assert layer8["wq"] == P(None, None) and layer8["wk"] == P(None, None)
    assert layer8["w_up"] == P(None, "model")
    cache4 = partitioning.cache_partition_specs(QWEN7B, 4)
    assert len(cache4.k) == QWEN7B.num_layers and cache4.k[0] == P("data", None, "model", None)
    assert partitioning.cache_partition_specs(QWEN7B, 8).k[0] == P("data", None, None, None)


def test_maybe_initialize_distributed_only_for_multi_process_launches():
    calls = []

    def fake(**kwargs):
        calls.append(kwargs)

    for env in ({}, {"SLURM_NTASKS": "1"}, {"TPU_WORKER_HOSTNAMES": "localhost"}):
        info = sharding.maybe_initialize_distributed(env, initialize=fake)
        assert not info.initialized and info.process_count == 1
    assert calls == []
    sharding.maybe_initialize_distributed(
        {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4",
         "JAX_PROCESS_ID": "2"}, initialize=fake)
    assert calls[-1] == {"coordinator_address": "10.0.0.1:1234", "num_processes": 4, "process_id": 2}
    for env in ({"SLURM_NTASKS": "16"}, {"OMPI_COMM_WORLD_SIZE": "2"},
                {"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3"}, {"WMSPEC_DISTRIBUTED": "1"}):
        sharding.maybe_initialize_distributed(env, initialize=fake)
        assert calls[-1] == {}  # jax.distributed auto-detects the cluster
    assert len(calls) == 5


def test_process_shard_names():
    assert sharding.process_shard_name("generations.jsonl", 3, 8) == "generations.3.jsonl"
    assert sharding.process_shard_name("generations.jsonl", 0, 1) == "generations.jsonl"
    assert sharding.process_shard_name("generations.jsonl") == "generations.jsonl"


def test_seven_billion_parameter_target_memory_per_device_from_shapes_alone():
    """Abstract arrays: nothing of the 7B model is allocated."""
    import jax.numpy as jnp

    from wmspec_jax.models import transformer

    shapes = transformer.param_shapes(QWEN7B)
    total = sum(int(np.prod(s)) for s in jax.tree_util.tree_leaves(
        shapes, is_leaf=lambda s: isinstance(s, tuple)))
    assert 7.0e9 < total < 7.8e9  # Qwen2.5-7B has 7.6e9 parameters
    mesh = sharding.make_mesh("data=1,model=1", devices=jax.devices()[:1])
    specs = partitioning.param_shardings(QWEN7B, mesh)
    abstract = jax.tree_util.tree_map(
        lambda s, sh: jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sh), shapes, specs,
        is_leaf=lambda s: isinstance(s, tuple))
    (only,) = sharding.per_device_bytes(abstract).values()
    assert only == 2 * total


SCRIPT = textwrap.dedent(
    """
    import json, jax, jax.numpy as jnp, numpy as np
    from wmspec_jax import decoders, prf, sharding, speculative
    from wmspec_jax.models import draft, protocol, transformer
    from wmspec_jax.models.config import TransformerConfig
    assert jax.device_count() == 8
    # Gemma-2 features (sliding + global layers, soft-capping, sandwich norms); 8 query
    # heads, 4 kv heads: split 4 ways on model=4, replicated on model=8.
    cfg = TransformerConfig(family="gemma2", vocab_size=128, hidden_size=64, intermediate_size=96,
                            num_layers=2, num_heads=8, num_kv_heads=4, head_dim=8, sliding_window=6,
                            layer_types=("sliding_attention", "full_attention"), attn_logit_softcap=20.0,
                            final_logit_softcap=10.0, sandwich_norms=True, query_pre_attn_scalar=8)
    params = transformer.init_params(cfg, jax.random.PRNGKey(0), scale=0.08)
    dcfg, dparams = cfg.select_layers([0]), draft.draft_params(params, [0])
    rng = np.random.default_rng(0)
    batch = (rng.integers(0, 128, (8, 6)), rng.integers(2, 7, 8), prf.stream_keys(list(range(8))),
             jax.random.split(jax.random.key(1), 8))
    ids = jnp.asarray(rng.integers(0, 128, (8, 5)), jnp.int32)

    def run(mesh):
        t = protocol.make_language_model(cfg, name="t", mesh=mesh)
        d = protocol.make_language_model(dcfg, name="d", mesh=mesh)
        p, dp, args = params, dparams, batch
        if mesh is not None:
            p, dp = sharding.shard_params(params, cfg, mesh), sharding.shard_params(dparams, dcfg, mesh)
            args = sharding.shard_batch(batch, mesh)
        out = {}
        for method in ("pseudorandom",):  # standard on a mesh: tests/models/test_draft_sharding.py
            c = speculative.SpeculativeConfig(method=method, decoder=decoders.WatermarkDecoder("gumbel"),
                                              lookahead=2, max_new_tokens=8)
            r = speculative.generate(t, p, *args, c, draft=d, draft_params=dp)
            out[method] = np.asarray(r.tokens).tolist()
            out[method + "_sharding"] = list(r.tokens.sharding.spec) if mesh is not None else None
        # multi-draft: the target verifies the tree with tree attention on its sharded cache
        c = speculative.SpeculativeConfig(method="pseudorandom", decoder=decoders.WatermarkDecoder("gumbel"),
                                          lookahead=2, max_new_tokens=8, draft_tree=(2, 2))
        out["tree"] = np.asarray(speculative.generate(t, p, *args, c, draft=d, draft_params=dp).tokens).tolist()
        logits, cache = jax.jit(t.step)(p, t.init_cache(8, 8), ids, jnp.full((8,), 5, jnp.int32))
        out["logits"] = np.asarray(logits)
        if mesh is not None:
            out["wq_shard"] = list(p["layers"][0]["wq"].addressable_shards[0].data.shape)
            out["wk_spec"] = list(p["layers"][0]["wk"].sharding.spec)
            out["cache_spec"] = list(cache.k[0].sharding.spec)
            per_device = sharding.per_device_bytes(p)
            out["param_bytes"] = [min(per_device.values()), max(per_device.values())]
        return out

    ref = run(None)
    total = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
    report = {"total_param_bytes": int(total)}
    # pure data parallelism (replicated weights) is covered by test_sharded_runs.py's two-process run
    for spec in ("data=2,model=4", "data=1,model=8"):
        got = run(sharding.make_mesh(spec))
        got["logit_diff"] = float(np.abs(got.pop("logits") - ref["logits"]).max())
        for m in ("pseudorandom", "tree"):
            got[m + "_same"] = got.pop(m) == ref[m]
        report[spec] = got
    report["ref_distinct_tokens"] = len(set(np.ravel(ref["pseudorandom"])))
    report["tree_differs_from_chain"] = ref["tree"] != ref["pseudorandom"]

    # A safetensors checkpoint loaded straight into the model=4 layout.
    import os, sys, tempfile
    from safetensors.numpy import save_file
    from wmspec_jax.models import hf
    lcfg = TransformerConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=48,
                             num_layers=2, num_heads=4, num_kv_heads=4, head_dim=8,
                             tie_word_embeddings=False, max_position_embeddings=64)
    lp = jax.tree_util.tree_map(np.asarray, transformer.init_params(lcfg, jax.random.PRNGKey(3), scale=0.2))
    tensors = {"model.embed_tokens.weight": lp["embed"], "model.norm.weight": lp["final_norm"],
               "lm_head.weight": np.ascontiguousarray(lp["lm_head"].T)}
    for name, (key, transpose) in hf.layer_tensor_map(lcfg).items():
        for i in range(lcfg.num_layers):
            w = lp["layers"][i][key]
            tensors[f"model.layers.{i}.{name}"] = np.ascontiguousarray(w.T if transpose else w)
    path = tempfile.mkdtemp()
    save_file(tensors, os.path.join(path, "model.safetensors"))
    json.dump({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
               "num_hidden_layers": 2, "num_attention_heads": 4, "tie_word_embeddings": False,
               "max_position_embeddings": 64}, open(os.path.join(path, "config.json"), "w"))
    mesh = sharding.make_mesh("data=2,model=4")
    ck = hf.load_checkpoint(path, tokenizer=False, mesh=mesh)
    same = jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: bool(np.array_equal(np.asarray(a), b)), ck.params, lp))
    report["loaded"] = {"same": same, "w_up": list(ck.params["layers"][0]["w_up"].sharding.spec),
                        "w_up_shard": list(ck.params["layers"][0]["w_up"].addressable_shards[0].data.shape)}
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def eight_device_report():
    report = run_on_devices(SCRIPT, 8)
    print(json.dumps(report, indent=1))
    return report


@pytest.mark.parametrize("spec", ["data=2,model=4", "data=1,model=8"])
def test_meshes_give_the_one_device_tokens(eight_device_report, spec):
    """Bit-identical Alg. 1 tokens, one chain and a (2, 2) draft tree; logits within 1e-5 (float32
    reassociation in the sharded contractions)."""
    got = eight_device_report[spec]
    assert eight_device_report["ref_distinct_tokens"] > 30  # the comparison is not vacuous
    assert eight_device_report["tree_differs_from_chain"]
    assert got["pseudorandom_same"] and got["tree_same"]
    assert got["logit_diff"] < 1e-5
    data = int(spec.split(",")[0].split("=")[1])
    assert got["pseudorandom_sharding"] == (["data"] if data > 1 else [])


def test_weights_and_caches_are_really_sharded(eight_device_report):
    total = eight_device_report["total_param_bytes"]
    tp4 = eight_device_report["data=2,model=4"]
    assert tp4["wq_shard"] == [64, 16] and tp4["wk_spec"] == [None, "model"]
    assert tp4["cache_spec"] == ["data", None, "model"]
    tp8 = eight_device_report["data=1,model=8"]
    assert tp8["wq_shard"] == [64, 8]
    assert tp8["wk_spec"] == [None, None]  # 4 kv heads: replicated on 8
    # Everything but the norms (and the replicated k/v projections on model=8) is split:
    # measured 0.256 (model=4) and 0.234 (model=8) of the total per device.
    assert tp8["param_bytes"][1] < tp4["param_bytes"][1] < 0.27 * total
    assert tp8["param_bytes"][1] < 0.24 * total


def test_checkpoint_loads_straight_into_the_tensor_parallel_layout(eight_device_report):
    loaded = eight_device_report["loaded"]
    assert loaded["same"] and loaded["w_up"] == [None, "model"] and loaded["w_up_shard"] == [32, 12]
