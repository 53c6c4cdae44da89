"""The GGUF reader agrees with the ``gguf`` package's reader field by field and tensor by tensor."""

import gguf
import numpy as np
import pytest
from gguf.quants import quantize

from wmspec_jax.models import gguf_file
from wmspec_jax.models.hf import CheckpointError


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    """Every metadata value type, string and numeric arrays, a custom alignment, plain and quantised tensors."""
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 1e-300)
    w.add_string("t.str", "héllo\nworld")
    w.add_array("t.strings", ["a", "", "ü b", "Ġthe"])
    w.add_array("t.ints", [3, -1, 7])
    w.add_array("t.floats", [0.5, -2.25])
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 7)).astype(np.float16))
    q = rng.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("q8", quantize(q, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("i32", np.arange(6, dtype=np.int32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_every_field_and_tensor_equals_the_gguf_packages(gguf_path):
    ours, theirs = gguf_file.read_gguf(gguf_path), gguf.GGUFReader(gguf_path)
    assert ours.version == 3
    assert set(ours.metadata) == {k for k in theirs.fields if not k.startswith("GGUF.")}
    for key, value in ours.metadata.items():
        expected = theirs.fields[key].contents()
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, np.asarray(expected), err_msg=key)
        else:
            assert value == expected and type(value) is type(expected), key
    assert ours.metadata["t.strings"] == ["a", "", "ü b", "Ġthe"]
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors] == ["f32", "f16", "q8", "i32"]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert a.tensor_type == b.tensor_type and a.data.dtype == b.data.dtype and a.data.shape == b.data.shape
        np.testing.assert_array_equal(a.data, b.data, err_msg=a.name)
        if a.name != "i32":  # gguf dequantises float and quantised types only
            np.testing.assert_array_equal(gguf.quants.dequantize(a.data, a.tensor_type),
                                          gguf.quants.dequantize(b.data, b.tensor_type))
        assert not a.data.flags.writeable  # a view of the file, never a place to write


def test_bad_files_are_clear_errors(gguf_path, tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        gguf_file.read_gguf(tmp_path / "absent.gguf")
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        gguf_file.read_gguf(tmp_path / "not.gguf")
    whole = gguf_path.read_bytes()
    last = whole.rindex(np.arange(6, dtype=np.int32).tobytes())  # the last tensor's data
    for cut, where in ((100, "header"), (last + 4, "tensor 'i32'")):
        (tmp_path / "cut.gguf").write_bytes(whole[:cut])
        with pytest.raises(CheckpointError, match=f"ends inside (its )?{where}"):
            gguf_file.read_gguf(tmp_path / "cut.gguf")
    with pytest.raises(CheckpointError, match="'t.absent' is missing"):
        gguf_file.read_gguf(gguf_path).field("t.absent")
