"""ONNX ops whose parameters are run-time tensors (reduction axes, slice bounds, pads,
Resize scales / sizes, TopK's k, Range bounds, ...): the importer maps them to the neutral
op's optional input of the same meaning (constants still become attributes), the IR
executor reproduces onnxruntime, and the exporter writes them back as ONNX inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnxtools import F, assert_close, onnx_model, ort_run, tensor

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, TensorType

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# op type, attributes, run-time parameter inputs (name -> value), the neutral op expected
CASES: dict[str, tuple[str, dict[str, Any], dict[str, np.ndarray | None], str]] = {
    "reduce_sum": ("ReduceSum", {"keepdims": 0}, {"axes": i64(1, -1)}, "reduce_sum"),
    "reduce_max_noop": ("ReduceMax", {"noop_with_empty_axes": 1}, {"axes": i64()},
                        "reduce_max"),
    "reduce_l2": ("ReduceL2", {}, {"axes": i64(2)}, "reduce_l2"),
    "slice": ("Slice", {}, {"starts": i64(1, -3), "ends": i64(3, 100), "axes": i64(1, 3),
                            "steps": i64(1, 2)}, "slice"),
    "pad": ("Pad", {"mode": "reflect"}, {"pads": i64(0, 1, 0, 2, 0, 0, 1, 1)}, "pad"),
    "tile": ("Tile", {}, {"repeats": i64(1, 2, 1, 2)}, "tile"),
    "split": ("Split", {"axis": 3}, {"split": i64(2, 3)}, "split"),
    "squeeze": ("Squeeze", {}, {"axes": i64(-1)}, "squeeze"),
    "unsqueeze": ("Unsqueeze", {}, {"axes": i64(0, -1)}, "unsqueeze"),
    "topk": ("TopK", {"axis": 3}, {"K": i64(2)}, "topk"),
    "cumsum": ("CumSum", {"reverse": 1}, {"axis": np.array(2, np.int64)}, "cumsum"),
    "trilu": ("Trilu", {"upper": 0}, {"k": np.array(1, np.int64)}, "trilu"),
    "resize_scales": ("Resize", {"mode": "linear"},
                      {"roi": None, "scales": np.array([1, 1, 2, 0.5], np.float32)}, "resize"),
    "resize_sizes_axes": ("Resize", {"mode": "nearest", "axes": [3, 2]},
                          {"roi": None, "scales": None, "sizes": i64(7, 3)}, "resize"),
}


def _outputs(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray],
             names: list[str]) -> list[onnx.ValueInfoProto]:
    """Graph outputs typed with their element type and rank (dims unknown), found by
    running the nodes in onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph(nodes, "g", [], [helper.make_empty_tensor_value_info(n)
                                               for n in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    results = ReferenceEvaluator(model).run(None, feeds)
    return [tensor(n, helper.np_dtype_to_tensor_dtype(r.dtype), [None] * r.ndim)
            for n, r in zip(names, results, strict=True)]


def _inputs(feeds: dict[str, np.ndarray]) -> list[onnx.ValueInfoProto]:
    return [tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
            for n, a in feeds.items()]


def _model(op_type: str, attrs: dict[str, Any], feeds: dict[str, np.ndarray | None],
           outputs: int) -> onnx.ModelProto:
    """One node reading every feed as a graph input (None: an omitted input)."""
    names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op_type, [n if a is not None else "" for n, a in feeds.items()],
                            names, **attrs)
    given = {n: a for n, a in feeds.items() if a is not None}
    return onnx_model([node], _inputs(given), _outputs([node], given, names), opset=19)


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_time_parameters_import_neutral_and_round_trip(case: str) -> None:
    op_type, attrs, params, neutral = CASES[case]
    outputs = {"Split": 2, "TopK": 2}.get(op_type, 1)
    x = X[:, :, :, :1] if op_type == "Squeeze" else X
    proto = _model(op_type, attrs, {"x": x, **params}, outputs)
    feeds = {n: a for n, a in {"x": x, **params}.items() if a is not None}
    expected = ort_run(proto, feeds)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    node = next(n for n in model.graph.nodes if n.op == neutral)
    assert any(v is not None and not v.is_parameter for v in node.inputs[1:]), \
        f"{neutral} should read its parameter as an input"
    assert_close(run_model(model, feeds), expected)
    for opset in (19, 26):
        assert_close(ort_run(to_onnx(model, opset=opset), feeds), expected)


def test_constant_parameters_still_become_attributes() -> None:
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]),
             helper.make_node("ReduceMean", ["y", "r"], ["z"], keepdims=0)]
    proto = onnx_model(nodes, [tensor("x", F, [2, 3, 4, 5])], [tensor("z", F, [None, None])],
                       {"s": i64(1), "e": i64(3), "a": i64(2), "r": i64(0, 1)})
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral
    slice_node, reduce_node = (n for n in model.graph.nodes if n.op in ("slice", "reduce_mean"))
    assert len(slice_node.inputs) == 1 and slice_node.attrs["starts"] == (1,)
    assert len(reduce_node.inputs) == 1 and reduce_node.attrs["axes"] == (0, 1)
    assert reduce_node.outputs[0].type == TensorType(DType.FLOAT32, (2, 5))


def test_pad_with_run_time_axes_spreads_the_pads() -> None:
    node = helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"])
    feeds = {"x": X, "pads": i64(1, 2, 0, 3), "axes": i64(-1, 1)}
    proto = onnx_model([node], _inputs(feeds), _outputs([node], feeds, ["y"]))
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    expected = ort_run(proto, feeds)
    assert_close(run_model(model, feeds), expected)
    assert_close(ort_run(to_onnx(model), feeds), expected)


def test_range_and_one_hot_with_run_time_bounds() -> None:
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("OneHot", ["r", "depth", "values"], ["y"])]
    feeds = {"start": np.array(1), "limit": np.array(9), "delta": np.array(3),
             "depth": np.array(6), "values": np.array([-1.0, 2.0], np.float32)}
    proto = onnx_model(nodes, _inputs(feeds), _outputs(nodes, feeds, ["y"]))
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    assert {n.op for n in model.graph.nodes} >= {"range", "one_hot"}
    expected = ort_run(proto, feeds)
    assert_close(run_model(model, feeds), expected)
    assert_close(ort_run(to_onnx(model), feeds), expected)


def _one_op(op: str, param: TensorType, attrs: dict[str, Any]) -> Model:
    graph = Graph("g")
    x = graph.add_input("x", TensorType(DType.FLOAT32, (3, 4)))
    p = graph.add_input("p", param)
    graph.set_outputs([GraphBuilder(graph).op(op, [x, p], attrs)])
    return Model(graphs=[graph])


@pytest.mark.parametrize("op, param, opset, problem", [
    ("cumprod", TensorType(DType.INT64, ()), 25, "opset 26"),
    ("trilu", TensorType(DType.INT64, ()), 13, "opset 14"),
    ("reduce_mean", TensorType(DType.INT64, (1,)), 17, "opset 18"),
])
def test_run_time_parameters_need_an_opset_that_takes_them(op: str, param: TensorType,
                                                           opset: int, problem: str) -> None:
    model = _one_op(op, param, {})
    with pytest.raises(ExportError, match=problem):
        to_onnx(model, opset=opset)
    to_onnx(model, opset=max(opset + 1, 18))  # a newer opset takes the input


def test_exported_parameter_inputs_are_cast_to_int64() -> None:
    model = _one_op("reduce_sum", TensorType(DType.INT32, (1,)), {"keepdims": True})
    proto = to_onnx(model, opset=18)
    assert [n.op_type for n in proto.graph.node] == ["Cast", "ReduceSum"]
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    got = ort_run(proto, {"x": x, "p": np.array([1], np.int32)})
    assert_close(got, [x.sum(axis=1, keepdims=True)])
