"""Helpers shared by the ONNX converter tests: building small ONNX models, running them in
onnxruntime, and summarising IR models (compute-op histogram, matmul-like FLOPs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from irbridge.ir import Graph, Model
from irbridge.ops import node_cost, registry

NON_COMPUTE = {"constant", "shape"}  # categories that only describe data


def model_of(graph: Graph) -> Model:
    """A model around a graph built with GraphBuilder (its parameters become tensors)."""
    tensors = {v.tensor.name: v.tensor for v in graph.parameters if v.tensor is not None}
    return Model(graphs=[graph], tensors=tensors, name=graph.name)


def session(proto: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def ort_run(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in session(proto).run(None, dict(feeds))]


def onnx_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto],
               initializers: Mapping[str, np.ndarray] | None = None, *, opset: int = 18,
               extra_opsets: Mapping[str, int] | None = None, name: str = "test",
               ir_version: int | None = None) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), inits)
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = ir_version or helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return model


def tensor(name: str, elem: int, shape: Sequence[int | str | None] | None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


F = onnx.TensorProto.FLOAT
I64 = onnx.TensorProto.INT64
BOOL = onnx.TensorProto.BOOL


def compute_histogram(model: Model) -> Counter[str]:
    """Op histogram of compute ops (constants and metadata-only shape ops left out)."""
    hist: Counter[str] = Counter()
    for _, node in model.all_nodes():
        if node.is_opaque:
            hist[node.qualified_op] += 1
        elif registry.get(node.op).category.value not in NON_COMPUTE:
            hist[node.op] += 1
    return hist


def matmul_flops(model: Model) -> int:
    return sum(node_cost(node).matmul_flops for _, node in model.all_nodes())


def assert_close(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float = 1e-4,
                 atol: float = 1e-5) -> None:
    assert len(got) == len(expected)
    for index, (g, e) in enumerate(zip(got, expected, strict=True)):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, f"output {index}: shape {g.shape} != {e.shape}"
        if e.dtype == bool or e.dtype.kind in "iu":
            np.testing.assert_array_equal(g, e, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"output {index}")
