"""Pieces shared by the ONNX importer and exporter: element types, tensors, attributes,
opset bounds and the metadata keys that carry provenance through ONNX files."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.ir import Tensor

DEFAULT_OPSET = 18
"""Opset of the default ONNX domain that `export_onnx` writes unless told otherwise."""

MIN_EXPORT_OPSET = 13
"""Oldest opset the exporter writes (Split/Squeeze/ReduceSum take axes as inputs from 13)."""

MIN_IMPORT_OPSET = 7
"""Oldest opset the importer reads directly; older models go through the version converter."""


def max_opset() -> int:
    """Newest opset of the default domain the installed onnx package knows."""
    return int(onnx.defs.onnx_opset_version())


ONNX_DOMAINS = ("", "ai.onnx")
OPAQUE_ONNX_DOMAIN = "onnx"
"""IR domain of opaque nodes of the default ONNX domain (custom domains keep their name)."""

# metadata_props keys written on exported nodes and read back on import
META_OP = "irbridge.op"            # the neutral op a node was emitted for
META_NODE = "irbridge.node"        # id of that neutral node (groups the nodes of a lowering)
META_ATTRS = "irbridge.attrs"      # JSON attributes of the neutral node (lowered groups only)
META_INPUTS = "irbridge.inputs"    # JSON list of its ONNX input names ("" = omitted)
META_OUTPUTS = "irbridge.outputs"  # JSON list of its ONNX output names
META_MODULE_PATH = "irbridge.module_path"
META_MODULE_CLASS = "irbridge.module_class"
META_SOURCE_OP = "irbridge.source_op"
META_SOURCE_FORMAT = "irbridge.source_format"
META_SOURCE_NODE = "irbridge.source_node"
META_LOCATION = "irbridge.location"

MODEL_META_OPSETS = "onnx.opset_import"
"""IR model metadata key: the source model's opsets, "domain=version" joined by ","."""

OPAQUE_REASON = "onnx.opaque_reason"
"""Annotation value on opaque nodes: why the importer could not map the node."""

_TO_IR: dict[int, DType] = {
    TensorProto.FLOAT: DType.FLOAT32,
    TensorProto.FLOAT16: DType.FLOAT16,
    TensorProto.BFLOAT16: DType.BFLOAT16,
    TensorProto.DOUBLE: DType.FLOAT64,
    TensorProto.FLOAT8E4M3FN: DType.FLOAT8_E4M3FN,
    TensorProto.FLOAT8E5M2: DType.FLOAT8_E5M2,
    TensorProto.INT8: DType.INT8,
    TensorProto.INT16: DType.INT16,
    TensorProto.INT32: DType.INT32,
    TensorProto.INT64: DType.INT64,
    TensorProto.UINT8: DType.UINT8,
    TensorProto.UINT16: DType.UINT16,
    TensorProto.UINT32: DType.UINT32,
    TensorProto.UINT64: DType.UINT64,
    TensorProto.BOOL: DType.BOOL,
    TensorProto.COMPLEX64: DType.COMPLEX64,
    TensorProto.COMPLEX128: DType.COMPLEX128,
    TensorProto.INT4: DType.INT4,
    TensorProto.UINT4: DType.UINT4,
    TensorProto.INT2: DType.INT2,
    TensorProto.UINT2: DType.UINT2,
    TensorProto.FLOAT8E4M3FNUZ: DType.FLOAT8_E4M3FNUZ,
    TensorProto.FLOAT8E5M2FNUZ: DType.FLOAT8_E5M2FNUZ,
    TensorProto.FLOAT8E8M0: DType.FLOAT8_E8M0FNU,
    TensorProto.FLOAT4E2M1: DType.FLOAT4_E2M1FN,
}
_TO_ONNX: dict[DType, int] = {v: k for k, v in _TO_IR.items()}

TYPE_OPSET: dict[DType, int] = {
    DType.FLOAT8_E4M3FN: 19, DType.FLOAT8_E5M2: 19, DType.FLOAT8_E4M3FNUZ: 19,
    DType.FLOAT8_E5M2FNUZ: 19, DType.INT4: 21, DType.UINT4: 21, DType.FLOAT4_E2M1FN: 23,
    DType.FLOAT8_E8M0FNU: 24, DType.INT2: 25, DType.UINT2: 25,
}
"""The first opset of the default domain whose ops take each of these element types (the
opset that introduced it); the other types exist from the oldest opset exported."""


def onnx_type_name(elem_type: int) -> str:
    try:
        return str(TensorProto.DataType.Name(elem_type))
    except ValueError:
        return f"type {elem_type}"


def dtype_from_onnx(elem_type: int) -> DType | None:
    """The IR dtype of an ONNX element type, or None when the IR has no such type."""
    return _TO_IR.get(elem_type)


def dtype_to_onnx(dtype: DType) -> int:
    """The ONNX element type of an IR dtype; ExportError for the few ONNX lacks (the
    float6 types, float8 e3m4 / e4m3 / e4m3b11fnuz of StableHLO)."""
    found = _TO_ONNX.get(dtype)
    if found is None:
        raise ExportError(f"element type {dtype.short} ({dtype.name.lower()}) has no ONNX "
                          "equivalent")
    return found


def tensor_from_proto(proto: TensorProto, name: str | None = None,
                      base_dir: str | None = None) -> Tensor:
    """An IR tensor from an ONNX tensor (external data read from `base_dir`).
    Raises ValueError for element types the IR lacks."""
    dtype = dtype_from_onnx(proto.data_type)
    if dtype is None:
        raise ValueError(f"element type {onnx_type_name(proto.data_type)} has no IR equivalent")
    if proto.HasField("raw_data") and proto.data_location != TensorProto.EXTERNAL:
        need = packed_bytes(dtype, math.prod(proto.dims))
        if len(proto.raw_data) != need:  # numpy_helper drops surplus packed bytes silently
            raise ValueError(f"raw_data holds {len(proto.raw_data)} bytes, "
                             f"{dtype.short}{list(proto.dims)} needs {need}")
    array = numpy_helper.to_array(proto, base_dir or "")
    array = np.asarray(array)
    if array.dtype != dtype.numpy:
        array = array.view(dtype.numpy) if array.dtype.itemsize == dtype.itemsize \
            else array.astype(dtype.numpy)
    return make_tensor(name if name is not None else proto.name, array, dtype)


def packed_bytes(dtype: DType, count: int) -> int:
    """Bytes ONNX stores `count` elements of `dtype` in (sub-byte types packed)."""
    return (count * dtype.bits + 7) // 8


def make_tensor(name: str, array: np.ndarray, dtype: DType | None = None) -> Tensor:
    """An IR tensor holding `array` with its exact shape (0-d arrays stay 0-d)."""
    array = np.asarray(array)
    return Tensor(name, dtype or DType.from_numpy(array.dtype), array.shape, array)


def tensor_data(tensor: Tensor) -> np.ndarray:
    """A tensor's data in its declared shape."""
    if tensor.data is None:
        raise ValueError(f"tensor {tensor.name!r} has no data (shape-only IR)")
    return tensor.data.reshape(tensor.shape)


def tensor_to_proto(tensor: Tensor, name: str | None = None) -> TensorProto:
    return array_to_proto(tensor_data(tensor), name if name is not None else tensor.name)


def array_to_proto(array: np.ndarray, name: str) -> TensorProto:
    array = np.asarray(array)
    proto = numpy_helper.from_array(array, name)
    return proto


# -- attributes of neutral nodes as JSON (provenance of lowered groups) ----------------------

def attrs_to_json(attrs: Mapping[str, Any]) -> str | None:
    """JSON text of neutral attributes, or None when one cannot be written (tensor, graph)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, DType):
            out[key] = {"dtype": value.short}
        elif isinstance(value, bool | int | str):
            out[key] = value
        elif isinstance(value, float):
            out[key] = {"float": repr(value)}
        elif isinstance(value, tuple) and all(isinstance(v, int | str) for v in value):
            out[key] = list(value)
        elif isinstance(value, tuple) and all(isinstance(v, int | float) for v in value):
            out[key] = {"floats": [repr(float(v)) for v in value]}
        else:
            return None
    return json.dumps(out, sort_keys=True)


def attrs_from_json(text: str) -> dict[str, Any]:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("attributes are not a JSON object")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict) and "dtype" in value:
            out[key] = DType.parse(value["dtype"])
        elif isinstance(value, dict) and "float" in value:
            out[key] = float(value["float"])
        elif isinstance(value, dict) and "floats" in value:
            out[key] = tuple(float(v) for v in value["floats"])
        elif isinstance(value, list):
            out[key] = tuple(value)
        elif isinstance(value, bool | int | str):
            out[key] = value
        else:
            raise ValueError(f"attribute {key!r} has an unreadable value")
    return out


# -- weight-free copies for the checker and shape inference --------------------------------

LIGHT_INITIALIZER_BYTES = 1024
"""Initializers above this size are left out of checking and shape inference (their
shapes and types are all those need; data propagation only uses small constants)."""


def without_large_initializers(proto: ModelProto) -> tuple[ModelProto, list[onnx.TensorProto], set[str]]:
    """The model with its large or externally stored initializers turned into typed graph
    inputs: the checker and shape inference then need neither the data nor its folder, and
    do not serialize gigabytes of weights. Also returns the moved tensors and the names
    of the inputs added for them."""
    moved = [t for t in proto.graph.initializer
             if t.data_location == onnx.TensorProto.EXTERNAL or _size(t) > LIGHT_INITIALIZER_BYTES]
    if not moved:
        return proto, [], set()
    names = {t.name for t in moved}
    light = ModelProto()
    for field_name in ("ir_version", "producer_name", "producer_version", "domain",
                       "model_version", "doc_string"):
        setattr(light, field_name, getattr(proto, field_name))
    light.opset_import.extend(proto.opset_import)
    light.functions.extend(proto.functions)
    graph = light.graph
    graph.name = proto.graph.name
    graph.node.extend(proto.graph.node)
    graph.initializer.extend(t for t in proto.graph.initializer if t.name not in names)
    graph.sparse_initializer.extend(proto.graph.sparse_initializer)
    graph.input.extend(proto.graph.input)
    graph.output.extend(proto.graph.output)
    graph.value_info.extend(proto.graph.value_info)
    declared = {vi.name for vi in graph.input}  # initializers listed as inputs (IR < 4) stay
    added = set()
    for tensor in moved:
        if tensor.name not in declared:
            graph.input.append(helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
            added.add(tensor.name)
    return light, moved, added


def _size(tensor: onnx.TensorProto) -> int:
    return len(tensor.raw_data) if tensor.HasField("raw_data") else tensor.ByteSize()


def restore_initializers(proto: ModelProto, moved: list[onnx.TensorProto],
                      added: set[str]) -> ModelProto:
    if not moved:
        return proto
    inputs = [vi for vi in proto.graph.input if vi.name not in added]
    del proto.graph.input[:]
    proto.graph.input.extend(inputs)
    proto.graph.initializer.extend(moved)
    return proto


META_PROPS = "onnx.metadata."
"""IR metadata key prefix of an imported file's metadata_props (written back without it)."""
MODEL_FIELDS = {"doc_string": "onnx.doc_string", "domain": "onnx.domain",
                "model_version": "onnx.model_version"}
"""ModelProto fields kept as IR metadata on import and written back as the fields."""
