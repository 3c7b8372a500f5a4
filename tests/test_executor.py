"""The reference executor: multi-graph models with links, subgraphs, and clear failures."""

from __future__ import annotations

import numpy as np
import pytest

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.executor import ExecutionError, run_graph, run_graphs, run_model
from irbridge.ir import Graph, GraphLink, Model, Tensor, TensorType

F32 = DType.FLOAT32


def two_graph_model() -> Model:
    """Graph 0: h = relu(x) * w; graph 1: y = h + x (x fed again from the model inputs)."""
    model = Model()
    g0, g1 = Graph("g0"), Graph("g1")
    g1.reserve_ids(100)
    b0, b1 = GraphBuilder(g0, model), GraphBuilder(g1, model)
    x0 = g0.add_input("x", TensorType(F32, (3,)))
    w = b0.parameter(Tensor.from_array("w", np.array([1.0, 2.0, 3.0], np.float32)))
    g0.set_outputs([b0.op("mul", [b0.op("relu", [x0]), w], name="h")])
    h_in = g1.add_input("h_in", TensorType(F32, (3,)))
    x1 = g1.add_input("x", TensorType(F32, (3,)))
    g1.set_outputs([b1.op("add", [h_in, x1], name="y")])
    model.graphs = [g0, g1]
    model.links = [GraphLink(0, "h", 1, "h_in")]
    return model


def test_links_feed_later_graphs_and_every_graph_output_is_returned() -> None:
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    all_outputs = run_graphs(two_graph_model(), {"x": x})
    np.testing.assert_array_equal(all_outputs[0][0], np.maximum(x, 0) * [1, 2, 3])
    np.testing.assert_array_equal(run_model(two_graph_model(), [x])[0],
                                  np.maximum(x, 0) * [1, 2, 3] + x)


def test_node_hook_sees_every_node() -> None:
    seen: list[str] = []
    run_model(two_graph_model(), {"x": np.zeros(3, np.float32)},
              on_node=lambda node, outs: seen.append(node.op))
    assert seen == ["relu", "mul", "add"]


@pytest.mark.parametrize("feed, message", [
    ({}, "no data fed for input 'x'"),
    ({"x": np.zeros(3, np.float64)}, "got dtype float64, expected f32"),
    ({"x": np.zeros(4, np.float32)}, "got shape [4], expected f32[3]"),
])
def test_bad_feeds(feed: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(ExecutionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_graph(two_graph_model().graphs[0], feed)


def test_shape_only_and_opaque_nodes_cannot_run() -> None:
    model = two_graph_model()
    model.tensors["w"].data = None
    with pytest.raises(ExecutionError, match=r"tensor .w. has no data .*without --no-weights"):
        run_model(model, {"x": np.zeros(3, np.float32)})
    graph = Graph()
    x = graph.add_input("x", TensorType(F32, (3,)))
    graph.set_outputs(graph.add_node("mystery", [x], ["y"], domain="vendor").outputs)
    with pytest.raises(ExecutionError, match="opaque op vendor::mystery has no reference"):
        run_graph(graph, {"x": np.zeros(3, np.float32)})


def test_numpy_failure_names_the_node() -> None:
    graph = Graph()
    b = GraphBuilder(graph)
    x = graph.add_input("x", TensorType(F32, (2, 3)))
    y = graph.add_input("y", TensorType(F32, (4, 5)))
    graph.add_node("matmul", [x, y], ["z"])  # types skipped on purpose: inference would refuse
    del b
    with pytest.raises(ExecutionError, match=r"node #0 matmul: reference implementation failed"):
        run_graph(graph, {"x": np.zeros((2, 3), np.float32), "y": np.zeros((4, 5), np.float32)})


def test_ieee_specials_are_values_not_warnings() -> None:
    """log(0) = -inf, 0/0 = NaN and a cast of -inf to an integer are what the runtimes
    compute too (T5's and ProphetNet's relative position buckets): no numpy RuntimeWarning
    reaches the user's terminal."""
    import warnings

    model, graph = Model(), Graph("g")
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (3,)))
    log = b.op("log", [x])
    ratio = b.op("div", [x, x])
    graph.set_outputs([b.op("cast", [log], {"dtype": DType.INT64}), ratio])
    model.graphs = [graph]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        as_int, nan = run_model(model, [np.array([0.0, 1.0, np.e], np.float32)])
    assert as_int.dtype == np.int64 and list(as_int[1:]) == [0, 1]
    assert np.isnan(nan[0]) and list(nan[1:]) == [1.0, 1.0]
