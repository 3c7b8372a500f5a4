"""Small IR models shared by the output tests, built with the IR builder."""

from __future__ import annotations

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Tensor, TensorType

F32 = DType.FLOAT32


def cnn() -> Model:
    """conv -> relu -> permute (a kernel without FLOPs) -> flatten -> linear."""
    model = Model(name="cnn")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (2, 3, 16, 16)))
    w = b.parameter(Tensor("conv.w", F32, (8, 3, 3, 3)))
    bias = b.parameter(Tensor("conv.b", F32, (8,)))
    y = b.op("conv", [x, w, bias], {"strides": (1, 1), "pads": (1, 1, 1, 1)}, name="conv")
    y = b.op("relu", [y])
    y = b.op("permute", [y], {"perm": (0, 2, 3, 1)})
    y = b.op("flatten", [y], {"start_axis": 1})
    fc = b.parameter(Tensor("fc.w", F32, (10, 8 * 16 * 16)))
    graph.set_outputs([b.op("linear", [y, fc], name="fc")])
    return model
