"""Reshape with allowzero=1 (what torch.onnx's dynamo exporter writes for view/reshape):
imported as the neutral reshape with `allowzero` (a 0 entry is a dim of size 0, not a copy
of the input's dim), run by the reference executor and exported back to ONNX, each against
onnxruntime on the original node. The run-time shapes include a 0 entry, where the two
conventions differ (ONNX's default would copy the input's dim and fail)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnxtools import onnx_model, ort_run, tensor

from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.executor import run_model


def _reshape_model(target: list[int] | None) -> object:
    """y = Reshape(x, shape, allowzero=1); `shape` is a graph input (run time) when
    `target` is None, else an initializer."""
    inputs = [tensor("x", TensorProto.FLOAT, ["a", "b", "c"])]
    inits = {}
    if target is None:
        inputs.append(tensor("shape", TensorProto.INT64, [2]))
    else:
        inits["shape"] = np.array(target, np.int64)
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    return onnx_model([node], inputs, [tensor("y", TensorProto.FLOAT, ["p", "q"])], inits)


@pytest.mark.parametrize(("x_shape", "target"), [
    ((2, 0, 3), [0, 6]),    # 0 is a size: (0, 6); ONNX's default would copy 2
    ((2, 3, 4), [6, 4]),
    ((2, 3, 4), [-1, 8]),
])
def test_run_time_shape_with_allowzero(x_shape: tuple[int, ...], target: list[int]) -> None:
    proto = _reshape_model(None)
    model, coverage = from_onnx(proto)  # type: ignore[arg-type]
    assert coverage.fully_neutral
    (node,) = model.graph.nodes
    assert node.op == "reshape" and node.attrs["allowzero"] is True
    x = np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape)
    feeds = {"x": x, "shape": np.array(target, np.int64)}
    expected = ort_run(proto, feeds)[0]  # type: ignore[arg-type]
    got = run_model(model, feeds)[0]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    back = to_onnx(model)
    (written,) = [n for n in back.graph.node if n.op_type == "Reshape"]
    assert helper.get_attribute_value(written.attribute[0]) == 1
    np.testing.assert_array_equal(ort_run(back, feeds)[0], expected)


def test_constant_zero_entry_with_allowzero_is_a_zero_size_dim() -> None:
    proto = _reshape_model([0, 6])
    model, coverage = from_onnx(proto)  # type: ignore[arg-type]
    assert coverage.fully_neutral
    x = np.zeros((2, 0, 3), np.float32)
    expected = ort_run(proto, {"x": x})[0]  # type: ignore[arg-type]
    assert expected.shape == (0, 6)
    assert run_model(model, {"x": x})[0].shape == (0, 6)
    assert ort_run(to_onnx(model), {"x": x})[0].shape == (0, 6)
