"""The converted-weights cache of GGUF models: the same arrays bit for bit, rebuilt when damaged, off on request."""

import os

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf.quants import quantize

from wmspec_jax.models import gguf_file, gguf_loader

D, HEADS, KV_HEADS, FF, LAYERS, VOCAB = 64, 2, 1, 128, 2, 96


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A two-layer llama with Q8_0, Q4_1 and float32 tensors and an untied output matrix."""
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(D)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(D // HEADS)
    w.add_feed_forward_length(FF)
    w.add_block_count(LAYERS)
    w.add_context_length(128)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_token_list([f"t{i}" for i in range(VOCAB)])
    rng = np.random.default_rng(0)
    hd = D // HEADS

    def add(name, shape, kind):
        x = rng.standard_normal(shape).astype(np.float32)
        if kind == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, x)
        else:
            w.add_tensor(name, quantize(x, kind), raw_dtype=kind)

    q8, q41, f32 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.F32
    add("token_embd.weight", (VOCAB, D), q8)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", (D,), f32)
        add(f"blk.{i}.attn_q.weight", (HEADS * hd, D), q41)
        add(f"blk.{i}.attn_k.weight", (KV_HEADS * hd, D), q41)
        add(f"blk.{i}.attn_v.weight", (KV_HEADS * hd, D), q8)
        add(f"blk.{i}.attn_output.weight", (D, HEADS * hd), q41)
        add(f"blk.{i}.ffn_norm.weight", (D,), f32)
        add(f"blk.{i}.ffn_gate.weight", (FF, D), q41)
        add(f"blk.{i}.ffn_up.weight", (FF, D), q8)
        add(f"blk.{i}.ffn_down.weight", (D, FF), q41)
    add("output_norm.weight", (D,), f32)
    add("output.weight", (VOCAB, D), q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def _reference(path, dtype=jnp.float32):
    reader = gguf_file.read_gguf(path)
    config = gguf_loader.config_from_gguf(reader)
    return config, gguf_loader.params_from_gguf(reader, config, dtype)


def _assert_same(params, reference):
    got, want = jax.tree_util.tree_leaves_with_path(params), jax.tree_util.tree_leaves_with_path(reference)
    assert [k for k, _ in got] == [k for k, _ in want]
    for (key, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, key
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(key))


def _entries(cache):
    folder = os.path.join(cache, gguf_loader.CACHE_PART)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_a_second_load_maps_the_cached_arrays_and_they_equal_the_conversion(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("WMSPEC_CACHE_DIR", str(tmp_path))
    config, reference = _reference(tiny_gguf)
    calls = []

    def reader():
        calls.append(1)
        return gguf_file.read_gguf(tiny_gguf)

    first_config, first = gguf_loader.load_gguf_model(tiny_gguf, reader=reader, name="tiny")
    (entry,) = _entries(str(tmp_path))
    assert entry.startswith("tiny-") and entry.endswith(".params") and calls == [1]
    again_config, again = gguf_loader.load_gguf_model(tiny_gguf, reader=reader, name="tiny")
    assert calls == [1]  # the file was not parsed again
    assert first_config == again_config == config and "lm_head" in again
    _assert_same(first, reference)
    _assert_same(again, reference)
    _, bf16 = gguf_loader.load_gguf_model(tiny_gguf, jnp.bfloat16, reader=reader, name="tiny")
    _assert_same(bf16, _reference(tiny_gguf, jnp.bfloat16)[1])


def test_a_damaged_entry_is_rebuilt_and_the_cache_can_be_off(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("WMSPEC_CACHE_DIR", str(tmp_path))
    _, reference = _reference(tiny_gguf)
    gguf_loader.load_gguf_model(tiny_gguf, name="tiny")
    (entry,) = _entries(str(tmp_path))
    path = os.path.join(tmp_path, gguf_loader.CACHE_PART, entry)
    whole = open(path, "rb").read()
    for damaged in (whole[:-100], b"not a cache file", whole[:8] + b"\xff" * 8 + whole[16:]):
        with open(path, "wb") as f:
            f.write(damaged)
        _, params = gguf_loader.load_gguf_model(tiny_gguf, name="tiny")
        _assert_same(params, reference)
        assert open(path, "rb").read() == whole  # rewritten whole
    monkeypatch.setenv("WMSPEC_CACHE_DIR", "")
    _, params = gguf_loader.load_gguf_model(tiny_gguf, name="other")
    _assert_same(params, reference)
    assert _entries(str(tmp_path)) == [entry]


def test_a_changed_gguf_file_replaces_its_entry(tiny_gguf, tmp_path, monkeypatch):
    """One entry per model name: a newer file (another modification time) rebuilds and the old entry goes."""
    monkeypatch.setenv("WMSPEC_CACHE_DIR", str(tmp_path))
    gguf_loader.load_gguf_model(tiny_gguf, name="tiny")
    (old,) = _entries(str(tmp_path))
    st = os.stat(tiny_gguf)
    os.utime(tiny_gguf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _, params = gguf_loader.load_gguf_model(tiny_gguf, name="tiny")
    (new,) = _entries(str(tmp_path))
    assert new != old
    _assert_same(params, _reference(tiny_gguf)[1])
