"""ONNX's sub-byte and narrow element types (INT4 packed two per byte, FLOAT8E4M3FNUZ,
FLOAT8E5M2FNUZ): import -> IR executor and import -> export -> onnxruntime reproduce
onnxruntime on the original model exactly (quantize, dequantize and casts round once, so
the outputs are bit-exact), the export is written at the opset that introduced the type,
and an explicit older opset is refused in one line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnxtools import onnx_model, ort_run, tensor

from irbridge import serde
from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.converters.onnx._common import dtype_to_onnx
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.executor import run_model

F = TensorProto.FLOAT
X = np.array([-9.0, -7.6, -3.2, -0.49, 0.0, 0.51, 1.5, 2.5, 6.9, 7.4, 40.0, np.nan],
             np.float32)


def _check(proto: object, feeds: dict[str, np.ndarray], dtype: DType, opset: int) -> None:
    expected = ort_run(proto, feeds)  # type: ignore[arg-type]
    model, _ = from_onnx(proto)  # type: ignore[arg-type]
    assert model.tensors and {t.dtype for t in model.tensors.values()} >= {dtype}
    back = serde.from_bytes(serde.to_bytes(model))  # the IR file keeps the type
    for ir_model in (model, back):
        got = run_model(ir_model, feeds)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_array_equal(g, e)
    plain = to_onnx(model, optimize=False)  # (the optimizer may fold the weight to float32)
    version = next(o.version for o in plain.opset_import if o.domain in ("", "ai.onnx"))
    assert version >= opset
    onnx_name = TensorProto.DataType.Name(dtype_to_onnx(dtype))
    assert onnx_name in [TensorProto.DataType.Name(t.data_type) for t in plain.graph.initializer]
    for exported in (plain, to_onnx(model)):
        for g, e in zip(ort_run(exported, feeds), expected, strict=True):
            np.testing.assert_array_equal(g, e)
    with pytest.raises(ExportError, match=rf"{dtype.short} needs ONNX opset {opset}"):
        to_onnx(model, opset=opset - 1)


def test_int4_quantize_dequantize_and_packed_weight_round_trip_through_onnxruntime() -> None:
    # 13 int4 weights: an odd count, so the packed initializer has a half-used last byte
    w = np.array([-8, -7, -1, 0, 1, 2, 3, 4, 5, 6, 7, -3, 2], ml_dtypes.int4)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
        helper.make_node("Cast", ["q"], ["q8"], to=TensorProto.INT8),
        helper.make_node("DequantizeLinear", ["w", "scale"], ["wf"]),
    ]
    proto = onnx_model(nodes, [tensor("x", F, [11])],
                       [tensor("y", F, [11]), tensor("q8", TensorProto.INT8, [11]),
                        tensor("wf", F, [13])],
                       {"scale": np.float32(0.5), "zero": np.array(1, ml_dtypes.int4), "w": w},
                       opset=21)
    assert next(t for t in proto.graph.initializer if t.name == "w").raw_data.__len__() == 7
    _check(proto, {"x": X[:-1]}, DType.INT4, 21)  # quantizing NaN: ONNX leaves it undefined


def test_float8_fnuz_saturating_casts_round_trip_through_onnxruntime() -> None:
    w = np.array([0.0, 1.0, -3.5, 57344.0, np.nan], ml_dtypes.float8_e5m2fnuz)
    nodes = [
        helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT8E4M3FNUZ),  # saturates
        helper.make_node("Cast", ["c"], ["y"], to=F),
        helper.make_node("Cast", ["x"], ["c2"], to=TensorProto.FLOAT8E4M3FNUZ, saturate=0),
        helper.make_node("Cast", ["c2"], ["y2"], to=F),
        helper.make_node("Cast", ["w"], ["wf"], to=F),
    ]
    proto = onnx_model(nodes, [tensor("x", F, [12])],
                       [tensor("y", F, [12]), tensor("y2", F, [12]), tensor("wf", F, [5])],
                       {"w": w}, opset=19)
    x = X * np.float32(40.0)  # past float8e4m3fnuz's largest value, 240
    _check(proto, {"x": x}, DType.FLOAT8_E5M2FNUZ, 19)


@pytest.mark.parametrize("round_mode", ["up", "nearest"])
def test_float8e8m0_cast_rounds_as_onnxruntime(round_mode: str) -> None:
    """ONNX's default rounds up to the next power of two (the IR's cast rounds to nearest:
    the importer adds the doubling), saturating 0 and infinity to the type's range."""
    x = np.array([0.0, 1.0, 1.5, 3.0, 3.1, 0.74, 2.0**-130, 2.0**126 * 1.9, 2.0**127, np.inf,
                  6.0, 1e-3, 1e20], np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["e"], to=TensorProto.FLOAT8E8M0,
                              round_mode=round_mode),
             helper.make_node("Cast", ["e"], ["y"], to=F)]
    proto = onnx_model(nodes, [tensor("x", F, [x.size])], [tensor("y", F, [x.size])],
                       opset=24)
    expected = ort_run(proto, {"x": x})
    if round_mode == "up":  # not the nearest power: the check can fail
        assert expected[0][4] == 4.0 and expected[0][5] == 1.0 and expected[0][3] == 4.0
    model, _ = from_onnx(proto)
    for got in (run_model(model, {"x": x}), ort_run(to_onnx(model), {"x": x})):
        np.testing.assert_array_equal(got[0], expected[0])
