"""A GGUF file's metadata and tensor table, read in one pass (llama.cpp's format, versions 2 and 3).

Layout: ``GGUF`` magic, version (uint32), tensor count and metadata count
(uint64); the metadata key/value pairs; one info record per tensor (name,
dims fastest-varying first, GGML type, offset); padding to
``general.alignment`` (default 32); the tensor data. The ``gguf`` package's
``GGUFReader`` builds a memory-mapped view per field part, which for a
tokenizer of 49k tokens and 48k merges takes seconds; this reader parses the
same bytes with ``struct`` (tens of milliseconds) and maps the tensor data
with one ``numpy.memmap``. Tensors keep ``GGUFReader``'s shapes (numpy order;
quantised types as bytes per row), so ``gguf.quants.dequantize`` applies as is.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Any

import numpy as np

from wmspec_jax.models.hf import CheckpointError

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
# GGUF value type -> (struct format, numpy dtype) of the fixed-size types.
_SCALARS = {
    0: ("<B", np.uint8), 1: ("<b", np.int8), 2: ("<H", np.uint16), 3: ("<h", np.int16),
    4: ("<I", np.uint32), 5: ("<i", np.int32), 6: ("<f", np.float32), 7: ("<?", np.bool_),
    10: ("<Q", np.uint64), 11: ("<q", np.int64), 12: ("<d", np.float64),
}
# Plain (unquantised) GGML tensor types -> numpy dtype; the rest are stored as blocks of bytes.
_PLAIN_TENSORS = {0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32, 27: np.int64,
                  28: np.float64}


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    """One tensor: ``data`` is a read-only view of the file in numpy order (``shape``
    reversed from GGUF's dims); quantised types are uint8[..., bytes per row]."""

    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple
    data: np.ndarray


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    """``metadata``: key -> value (int / float / bool / str; arrays as list[str]
    or a numpy array); ``tensors`` in file order."""

    path: str
    version: int
    metadata: dict
    tensors: list

    def field(self, key: str, default=None):
        """A metadata value; ``default`` when absent, or CheckpointError without one."""
        if key in self.metadata:
            return self.metadata[key]
        if default is not None:
            return default
        raise CheckpointError(f"GGUF metadata key {key!r} is missing")


class _Cursor:
    def __init__(self, buf, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str):
        try:
            values = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise CheckpointError(f"GGUF file {self.path!r} ends inside its header") from None
        self.pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise CheckpointError(f"GGUF file {self.path!r} ends inside its header")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, kind: int):
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("<IQ")
            if item == _STRING:
                return [self.string() for _ in range(count)]
            if item not in _SCALARS:
                raise CheckpointError(f"GGUF file {self.path!r}: unsupported array item type {item}")
            dtype = np.dtype(_SCALARS[item][1]).newbyteorder("<")
            end = self.pos + count * dtype.itemsize
            if end > len(self.buf):
                raise CheckpointError(f"GGUF file {self.path!r} ends inside its header")
            out = np.frombuffer(self.buf, dtype, count, self.pos).copy()
            self.pos = end
            return out
        if kind not in _SCALARS:
            raise CheckpointError(f"GGUF file {self.path!r}: unsupported value type {kind}")
        v = self.unpack(_SCALARS[kind][0])
        return bool(v) if kind == 7 else v


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Parses a GGUF file's header and maps its tensors (read-only, nothing copied)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import quant_shape_to_byte_shape

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"GGUF file {path!r} does not exist")
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(mm, path)
    if bytes(mm[:4]) != _MAGIC:
        raise CheckpointError(f"{path!r} is not a GGUF file (no GGUF magic)")
    cur.pos = 4
    version = cur.unpack("<I")
    if version not in (2, 3):
        raise CheckpointError(f"GGUF file {path!r} has version {version}; versions 2 and 3 are supported")
    n_tensors, n_kv = cur.unpack("<QQ")
    metadata = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.unpack("<I"))
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        dims = [cur.unpack("<Q") for _ in range(n_dims)]
        infos.append((name, dims, cur.unpack("<I"), cur.unpack("<Q")))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
    start = -(-cur.pos // alignment) * alignment
    tensors, names = [], set()
    for name, dims, raw_type, offset in infos:
        if name in names:
            raise CheckpointError(f"GGUF file {path!r} holds tensor {name!r} twice")
        names.add(name)
        qtype = GGMLQuantizationType(raw_type)
        shape = tuple(reversed(dims))
        n_elems = int(np.prod(dims, dtype=np.int64))
        if raw_type in _PLAIN_TENSORS:
            dtype, count, view_shape = np.dtype(_PLAIN_TENSORS[raw_type]), n_elems, shape
        else:
            block, type_size = GGML_QUANT_SIZES[qtype]
            dtype, count, view_shape = np.dtype(np.uint8), n_elems * type_size // block, \
                quant_shape_to_byte_shape(shape, qtype)
        begin = start + offset
        if begin + count * dtype.itemsize > mm.size:
            raise CheckpointError(f"GGUF file {path!r} ends inside tensor {name!r}")
        data = np.frombuffer(mm, dtype.newbyteorder("<"), count, begin).reshape(view_shape)
        tensors.append(GGUFTensor(name, qtype, shape, data))
    return GGUFFile(path=path, version=version, metadata=metadata, tensors=tensors)


__all__ = ["GGUFFile", "GGUFTensor", "read_gguf"]
