"""Writing an ONNX file with the weights streamed in, one tensor at a time.

`export_onnx` builds the ModelProto with **pending** initializers: a TensorProto with its
name, type and shape but no data (marked as external data at the location `PENDING`),
and a `payloads` map from its name to a function that returns its array (the IR's own
array, or a fold `_optimize` computes again on demand). `write_model` then writes the
file without ever holding the serialised model or a second copy of the weights:

* **one file** (under protobuf's 2 GiB): the protobuf stream is written field by field.
  The ModelProto's fields other than `graph` are serialised as usual; the graph is a
  length-delimited field whose length is known in advance (every pending tensor's size
  follows from its type and shape), so its header goes first, then the graph's own
  fields, then each initializer as a length-delimited field whose `raw_data` (field 9,
  itself length-delimited) is copied straight from the array. Protobuf parsers merge
  fields in any order, so the result is the same message `SerializeToString` would give.
* **external data** (`<file>.data`): each pending tensor, and each other tensor of 1 KiB
  or more (Constant nodes' values included), is appended to the data file with its
  offset and length recorded, the onnx external-data format; the small ModelProto left
  is then serialised as usual.

Peak memory above the ModelProto without weights is about the largest tensor (plus the
inputs of a fold being recomputed), instead of the whole model twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np
import onnx
from onnx import GraphProto, ModelProto, TensorProto, helper

from irbridge._wire import varint

PENDING = "irbridge:pending"
"""The external-data location of an initializer whose data `write_model` streams in."""

STREAM_MIN_BYTES = 64 * 1024
"""Tensors at least this big are left pending (smaller ones are built in memory)."""

EXTERNAL_MIN_BYTES = 1024
"""In external-data mode, tensors at least this big go to the data file."""

Payloads = Mapping[str, Callable[[], np.ndarray]]

_RAW_DATA = TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_INITIALIZER = GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_GRAPH = ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_LEN = 2  # protobuf wire type of length-delimited fields


_BYTE_FLOATS = frozenset(np.dtype(t) for t in (
    ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz))
"""ml_dtypes floats of whole bytes (numpy kind "V"): raw_data is their bytes too. The
sub-byte ones (int4, float4) are packed two to a byte in ONNX and are not streamed."""


def streamable(array: np.ndarray) -> bool:
    """Fixed-size numbers whose ONNX raw_data is the array's little-endian bytes."""
    return (array.dtype.kind in "biuf" or array.dtype in _BYTE_FLOATS) \
        and array.dtype.itemsize in (1, 2, 4, 8) and array.nbytes >= STREAM_MIN_BYTES


def pending(name: str, shape: Iterable[int], dtype: np.dtype) -> TensorProto:
    """An initializer without data, to be streamed in by `write_model`."""
    t = TensorProto()
    t.name = name
    t.dims.extend(int(d) for d in shape)
    t.data_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", PENDING
    return t


def is_pending(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == PENDING for e in t.external_data)


def nbytes(t: TensorProto) -> int:
    """Payload bytes of a tensor from its type and shape."""
    itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


def materialize(proto: ModelProto, payloads: Payloads) -> None:
    """Fill every pending initializer with its data (the in-memory ModelProto of to_onnx)."""
    for t in proto.graph.initializer:
        if is_pending(t):
            del t.external_data[:]
            t.ClearField("data_location")
            t.raw_data = _bytes_of(payloads[t.name](), t)


def write_model(proto: ModelProto, payloads: Payloads, path: Path,
                data_path: Path | None = None) -> None:
    """Write `proto` to `path`, streaming the pending initializers' data in; with
    `data_path`, weights go to that external data file (its name is the location)."""
    if data_path is None:
        with open(path, "wb") as out:
            _write_inline(proto, payloads, out)
        return
    with open(data_path, "wb") as data:
        offset = 0
        for t in proto.graph.initializer:
            offset = _externalize(t, payloads, data, data_path.name, offset)
        for node in proto.graph.node:  # constant values written as attributes
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    offset = _externalize(attr.t, payloads, data, data_path.name, offset)
    with open(path, "wb") as out:
        out.write(proto.SerializeToString())


def _externalize(t: TensorProto, payloads: Payloads, data: BinaryIO, location: str,
                 offset: int) -> int:
    if is_pending(t):
        array = payloads[t.name]()
    elif t.data_location != TensorProto.EXTERNAL and t.HasField("raw_data") \
            and nbytes(t) >= EXTERNAL_MIN_BYTES:
        array = None
    else:
        return offset
    if array is not None:
        length = _write_array(data, array, t)
    else:
        raw = t.raw_data
        data.write(raw)
        length = len(raw)
        t.ClearField("raw_data")
    del t.external_data[:]
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return offset + length


def _write_inline(proto: ModelProto, payloads: Payloads, out: BinaryIO) -> None:
    head = ModelProto()
    for field, value in proto.ListFields():
        if field.name != "graph":
            _copy_field(head, field, value)
    graph = GraphProto()
    for field, value in proto.graph.ListFields():
        if field.name != "initializer":
            _copy_field(graph, field, value)
    graph_bytes = graph.SerializeToString()
    entries: list[tuple[TensorProto, bytes, int]] = []  # (tensor, bytes before data, size)
    total = len(graph_bytes)
    for t in proto.graph.initializer:
        if is_pending(t):
            header = TensorProto()
            header.CopyFrom(t)
            del header.external_data[:]
            header.ClearField("data_location")
            size = nbytes(t)
            prefix = header.SerializeToString() + _tag(_RAW_DATA) + varint(size)
            body = len(prefix) + size
        else:
            prefix = t.SerializeToString()
            size = -1
            body = len(prefix)
        lead = _tag(_INITIALIZER) + varint(body)
        entries.append((t, lead + prefix, size))
        total += len(lead) + body
    out.write(head.SerializeToString())
    out.write(_tag(_GRAPH) + varint(total))
    out.write(graph_bytes)
    for t, prefix, size in entries:
        out.write(prefix)
        if size >= 0:
            written = _write_array(out, payloads[t.name](), t)
            if written != size:
                raise ValueError(f"tensor {t.name!r}: {written} bytes of data, its type and "
                                 f"shape say {size}")


def _copy_field(target: ModelProto | GraphProto, field: Any, value: Any) -> None:
    name = field.name
    if hasattr(value, "extend"):  # a repeated field
        getattr(target, name).extend(value)
    elif hasattr(value, "CopyFrom"):  # a message
        getattr(target, name).CopyFrom(value)
    else:
        setattr(target, name, value)


def _array_for(array: np.ndarray, t: TensorProto) -> np.ndarray:
    want = helper.tensor_dtype_to_np_dtype(t.data_type)
    array = np.asarray(array)
    if array.dtype != want:
        raise ValueError(f"tensor {t.name!r}: data is {array.dtype}, declared {want}")
    if tuple(array.shape) != tuple(t.dims):
        array = array.reshape(tuple(t.dims))
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array)


def _write_array(out: BinaryIO, array: np.ndarray, t: TensorProto) -> int:
    flat = _array_for(array, t).reshape(-1).view(np.uint8)
    step = 64 << 20
    for start in range(0, flat.size, step):
        out.write(flat[start:start + step].data)  # a buffer view, no copy
    return int(flat.size)


def _bytes_of(array: np.ndarray, t: TensorProto) -> bytes:
    return _array_for(array, t).tobytes()


def _tag(field_number: int) -> bytes:
    return varint((field_number << 3) | _LEN)


