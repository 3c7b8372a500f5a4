"""The verifier names the node and value at fault and says what is wrong."""

from __future__ import annotations

import pytest

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.errors import VerificationError
from irbridge.ir import Graph, GraphLink, Model, Provenance, Tensor, TensorType
from irbridge.verify import check, verify

F32 = DType.FLOAT32


def build() -> tuple[Model, Graph, GraphBuilder]:
    model = Model(name="toy")
    graph = Graph()
    model.graphs.append(graph)
    return model, graph, GraphBuilder(graph, model)


def errors(model: Model) -> list[str]:
    return [f"{p.where}: {p.message}" for p in verify(model) if p.severity == "error"]


def test_valid_graph_has_no_problems() -> None:
    model, graph, b = build()
    x = graph.add_input("x", TensorType(F32, (2, 3)))
    y = b.op("relu", [x], provenance=Provenance(module_path="block.act"))
    graph.set_outputs([b.op("add", [y, x])])
    assert verify(model) == []
    check(model)


def test_out_of_order_node_is_named() -> None:
    model, graph, b = build()
    x = graph.add_input("x", TensorType(F32, (2,)))
    y = b.op("relu", [x], provenance=Provenance(module_path="layer1.act"))
    z = b.op("neg", [y])
    graph.set_outputs([z])
    graph.nodes.reverse()
    [message] = errors(model)
    assert "node #1 neg" in message and "reads 'relu'" in message
    assert "not defined before this node" in message


def test_wrong_recorded_shape_is_named_with_both_types() -> None:
    model, graph, _b = build()
    x = graph.add_input("x", TensorType(F32, (2, 3)))
    graph.add_node("relu", [x], ["y"], output_types=[TensorType(F32, (3, 2))])
    [message] = errors(model)
    assert "output 'y' is f32[3,2] but relu infers f32[2,3]" in message


def test_unknown_op_bad_attribute_and_arity() -> None:
    model, graph, _ = build()
    x = graph.add_input("x", TensorType(F32, (2,)))
    graph.add_node("frobnicate", [x], ["a"])
    graph.add_node("gelu", [x], ["b"], {"approx": "tanh"})
    graph.add_node("add", [x], ["c"])
    graph.add_node("gelu", [x], ["d"], {"approximate": "cubic"})
    found = errors(model)
    assert any("unknown op 'frobnicate'" in m and "non-empty domain" in m for m in found)
    assert any("has no attribute 'approx'; known: approximate" in m for m in found)
    assert any("op 'add' takes (a, b), got 1 inputs" in m for m in found)
    assert any("must be one of none, tanh, got 'cubic'" in m for m in found)


def test_duplicate_ids_parameters_outputs_and_links() -> None:
    model, graph, b = build()
    x = graph.add_input("x", TensorType(F32, (2,)))
    b.op("relu", [x])
    graph.add_node("neg", [x], ["n"], id=0, output_types=[TensorType(F32, (2,))])
    stray = Tensor("w", F32, (2,))
    graph.add_parameter(stray)  # never added to the model
    other = Graph("other")
    ghost = other.add_input("ghost", TensorType(F32, (2,)))
    graph.outputs.append(ghost)
    model.links.append(GraphLink(0, "relu", 3, "x"))
    found = errors(model)
    assert any("node id 0 is also used by" in m for m in found)
    assert any("parameter 'w'" in m and "not a tensor of the model" in m for m in found)
    assert any("output 'ghost'" in m and "not produced" in m for m in found)
    assert any("graph index out of range (model has 1)" in m for m in found)


def test_opaque_nodes_are_warnings_not_errors() -> None:
    model, graph, _ = build()
    x = graph.add_input("x", TensorType(F32, (2,)))
    node = graph.add_node("my_op", [x], ["y"], domain="vendor",
                          output_types=[TensorType(F32, (2,))])
    graph.set_outputs(node.outputs)
    problems = verify(model)
    assert [p.severity for p in problems] == ["warning"]
    assert "opaque op vendor::my_op" in problems[0].message


def test_check_raises_with_count_and_hint() -> None:
    model, graph, _ = build()
    x = graph.add_input("x", TensorType(F32, (2,)))
    graph.add_node("nope1", [x], ["a"])
    graph.add_node("nope2", [x], ["b"])
    with pytest.raises(VerificationError, match=r"unknown op 'nope1'.*\(and 1 more\)"):
        check(model)


def test_subgraph_may_read_outer_values_but_not_later_ones() -> None:
    model, graph, b = build()
    x = graph.add_input("x", TensorType(F32, (2,)))
    body = Graph("body")
    inner = body.add_node("relu", [x], ["inner"], output_types=[TensorType(F32, (2,))], id=100)
    body.set_outputs(inner.outputs)
    graph.add_node("opaque_loop", [], ["out"], {"body": body}, domain="test",
                   output_types=[TensorType(F32, (2,))])
    assert errors(model) == []
    later = b.op("neg", [x])
    body.add_node("neg", [later], ["bad"], output_types=[TensorType(F32, (2,))], id=101)
    assert any("reads 'neg'" in m for m in errors(model))


def test_negative_dims_and_non_positive_window_attributes_are_errors() -> None:
    """issue 12 item 13: such graphs gave negative MACs and ONNX that onnxruntime refuses."""
    import numpy as np

    model = Model(name="c")
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1, -4, 8, 8)))
    w = graph.add_parameter(model.add_tensor(Tensor.from_array(
        "w", np.ones((4, 4, 3, 3), np.float32))))
    y = graph.add_node("conv", [x, w], ["y"], attrs={"groups": 0},
                       output_types=[TensorType(DType.FLOAT32, (1, 4, 6, 6))])
    s = graph.add_node("max_pool", y.outputs, ["s"], attrs={"kernel": (2, 2), "strides": (0, 1)},
                       output_types=[TensorType(DType.FLOAT32, (1, 4, 3, 3))])
    graph.set_outputs(s.outputs)
    model.graphs.append(graph)
    messages = [str(p) for p in verify(model) if p.severity == "error"]
    assert "error: graph 0 (main) input 'x': value 'x' has a negative dim: f32[1,-4,8,8]" \
        in messages
    assert "error: graph 0 (main) node #0 conv: groups must be >= 1, got 0" in messages
    assert any(m.startswith("error: graph 0 (main) node #1 max_pool: strides and dilations "
                            "must be >= 1") for m in messages), messages
