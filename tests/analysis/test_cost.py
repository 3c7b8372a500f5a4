"""Per-node cost through the registry, totals, module rollup, opaque and symbolic nodes."""

from __future__ import annotations

import pytest
from graphs import F32, at, conv_bn, llama_model, new_model, resnet_block_model, weight

from irbridge.analysis.binding import bound, model_compute_dtype, parse_compute_dtype
from irbridge.analysis.cost import cost_model, module_table
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import Model, SymDim, TensorType
from irbridge.ops import node_cost
from irbridge.summary import summarize


def _conv_model(groups: int, dilation: int, stride: int = 1) -> Model:
    model, graph, b = new_model("conv")
    x = graph.add_input("x", TensorType(F32, (2, 32, 28, 28)))
    graph.set_outputs([conv_bn(b, x, "conv", 32, 64, k=3, stride=stride, groups=groups,
                               dilation=dilation)])
    return model


@pytest.mark.parametrize("groups, dilation, stride", [(1, 1, 1), (4, 1, 1), (32, 1, 2),
                                                      (1, 2, 1), (8, 3, 2)])
def test_grouped_and_dilated_conv_macs(groups: int, dilation: int, stride: int) -> None:
    costs = cost_model(_conv_model(groups, dilation, stride))
    out = (28 + 2 * dilation - dilation * 2 - 1) // stride + 1  # pad keeps 'same' at stride 1
    expected = 2 * 64 * out * out * (32 // groups) * 3 * 3
    assert costs.total.macs == expected
    assert costs.total.matmul_flops == 2 * expected
    conv = costs.nodes[0]
    assert conv.node.op == "conv" and conv.cost.macs == expected


def test_costs_come_from_the_registry_and_totals_add_up() -> None:
    model = resnet_block_model(2)
    costs = cost_model(model)
    for nc in costs.nodes:
        assert nc.cost == node_cost(nc.node)
        assert nc.status == "ok"
    assert costs.total.macs == sum(nc.cost.macs for nc in costs.nodes)
    assert costs.total.matmul_flops == 2 * costs.total.macs
    # 4 convs 16->16 3x3 on 8x8, batch 1
    assert costs.total.macs == 4 * 16 * 8 * 8 * 16 * 9
    assert costs.warnings() == []


def test_module_rollup_is_hierarchical() -> None:
    model = resnet_block_model(2)
    rows = module_table(cost_model(model), depth=2)
    assert [r.path for r in rows] == ["(model)", "layer1", "layer1.0", "layer1.1"]
    root, layer1, block0, block1 = rows
    assert root.cost == layer1.cost == block0.cost + block1.cost
    assert block0.parameters == 2 * (16 * 16 * 9 + 4 * 16)
    assert root.parameters == block0.parameters + block1.parameters
    assert block0.output == "f32[1,16,8,8]" and block0.nodes == 7
    deeper = [r.path for r in module_table(cost_model(model), depth=3)]
    assert deeper.index("layer1.0") < deeper.index("layer1.0.conv1") < deeper.index("layer1.1")
    with pytest.raises(IrbridgeError, match="at least 1"):
        module_table(cost_model(model), depth=0)


def test_unattributed_nodes_have_their_own_row() -> None:
    model, graph, b = new_model("plain")
    x = graph.add_input("x", TensorType(F32, (4, 8)))
    graph.set_outputs([b.op("relu", [x])])
    rows = module_table(cost_model(model), depth=1)
    assert [r.path for r in rows] == ["(model)", "(no module)"]


def _with_opaque() -> Model:
    model, graph, b = new_model("opaque")
    x = graph.add_input("x", TensorType(F32, (4, 8)))
    h = b.op("relu", [x], provenance=at("a"))
    node = graph.add_node("fancy_op", [h], ["fancy"], output_types=[TensorType(F32, (4, 8))],
                          domain="custom")
    graph.add_node("fancy_op", [node.outputs[0]], ["fancy2"],
                   output_types=[TensorType(F32, (4, 8))], domain="custom")
    graph.set_outputs([graph.values["fancy2"]])
    return model


def test_opaque_nodes_cost_bytes_only_and_are_named() -> None:
    costs = cost_model(_with_opaque())
    opaque = [nc for nc in costs.nodes if nc.status == "opaque"]
    assert len(opaque) == 2
    assert all(nc.cost.flops == 0 and nc.cost.bytes_read == 128 for nc in opaque)
    [line] = costs.warnings()
    assert line == "2 opaque nodes costed at their bytes only (0 FLOPs): custom::fancy_op x2"


def test_symbolic_nodes_are_uncosted_until_bound() -> None:
    batch = SymDim("s0", 1, 64)
    model = resnet_block_model(1, batch=batch)
    costs = cost_model(model)
    assert costs.total.macs == 0 and len(costs.uncosted) == len(costs.nodes)
    assert any("uncosted (symbolic dims s0)" in w for w in costs.warnings())
    with bound(model, batch=8) as binding:
        bound_costs = cost_model(model, binding)
    assert binding.symbols == {"s0": 8}
    assert bound_costs.total == cost_model(resnet_block_model(1, batch=8)).total
    assert model.graph.inputs[0].type == TensorType(F32, (batch, 16, 8, 8))  # restored
    with pytest.raises(IrbridgeError, match=r"s0=100 is outside .* \[1, 64\]"), \
            bound(model, batch=100):
        pass
    with pytest.raises(IrbridgeError, match="no symbolic dim 'seq' in the model; its "
                                            "symbols: s0"), bound(model, symbols={"seq": 4}):
        pass


def test_symbols_bind_by_name_and_derived_dims_are_reinferred() -> None:
    model = llama_model(1, hidden=64, heads=4, ffn=128, seq=SymDim("seq"), batch=2)
    with bound(model, symbols={"seq": 16}):
        costs = cost_model(model)
    static = cost_model(llama_model(1, hidden=64, heads=4, ffn=128, seq=16, batch=2))
    assert costs.total == static.total and not costs.uncosted


def test_static_batch_is_rescaled_by_reinference() -> None:
    model = resnet_block_model(1, batch=1)
    with bound(model, batch=4) as binding:
        costs = cost_model(model)
    assert costs.total == cost_model(resnet_block_model(1, batch=4)).total
    assert "static leading dim 1 of x rescaled" in binding.notes[0]
    assert model.graph.outputs[0].type == TensorType(F32, (1, 16, 8, 8))


def test_static_batch_baked_into_a_reshape_is_an_error() -> None:
    model, graph, b = new_model("baked")
    x = graph.add_input("x", TensorType(F32, (1, 4, 8)))
    graph.set_outputs([b.op("reshape", [x], {"shape": (1, 32)})])
    with pytest.raises(IrbridgeError, match="captured at batch 1 and a shape is baked"), \
            bound(model, batch=2):
        pass
    assert graph.outputs[0].type == TensorType(F32, (1, 32))


def test_storage_dtype_scales_bytes_not_flops() -> None:
    model = resnet_block_model(1)
    f32 = cost_model(model).total
    with bound(model, storage=DType.BFLOAT16):
        bf16 = cost_model(model).total
    assert bf16.macs == f32.macs and bf16.other_flops == f32.other_flops
    assert 2 * bf16.bytes_read == f32.bytes_read and 2 * bf16.param_bytes == f32.param_bytes
    assert model.graph.inputs[0].type is not None and model.graph.inputs[0].type.dtype == F32


def test_compute_dtype_of_a_model_and_parsing() -> None:
    assert model_compute_dtype(resnet_block_model(1)) == "fp32"
    assert model_compute_dtype(llama_model(1, hidden=64, heads=4, ffn=128)) == "bf16"
    assert parse_compute_dtype("bfloat16") == "bf16" and parse_compute_dtype("F16") == "fp16"
    with pytest.raises(IrbridgeError, match="unknown --dtype 'fp4'; known: fp64, fp32"):
        parse_compute_dtype("fp4")


def test_control_flow_nodes_carry_their_bodies() -> None:
    from irbridge.builder import GraphBuilder
    from irbridge.ir import Graph

    model, graph, b = new_model("branch")
    x = graph.add_input("x", TensorType(F32, (4, 8)))
    cond = graph.add_input("c", TensorType(DType.BOOL, ()))
    branches = []
    for name, op in (("then", "relu"), ("else", "tanh")):
        sub = Graph(name)
        sub.reserve_ids(100 if name == "then" else 200)
        sb = GraphBuilder(sub, model)
        sub.set_outputs([sb.op(op, [x], name=f"{name}_y")])
        branches.append(sub)
    y = b.op("if", [cond], {"then_branch": branches[0], "else_branch": branches[1]})
    graph.set_outputs([y])
    costs = cost_model(model)
    [nc] = costs.nodes
    assert costs.body_nodes == 2
    then_cost, else_cost = node_cost(branches[0].nodes[0]), node_cost(branches[1].nodes[0])
    assert then_cost.other_flops < else_cost.other_flops  # relu is cheaper than tanh
    assert nc.own_cost == node_cost(nc.node)
    # one branch runs: the costlier one counts, not the sum of both
    assert nc.cost == nc.own_cost + else_cost
    assert "the costlier branch counted" in nc.note
    assert summarize(model).cost == costs.total  # `irbridge info` agrees with the analysis


def _onnx_loop(trips: int, *, cond_input: bool = False, inner_trips: int | None = None
               ) -> Model:
    """ONNX Loop: acc += x (f32[2,3]) `trips` times, the add inside a second Loop of
    `inner_trips` when given; with `cond_input` the loop also takes a cond (true)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from irbridge.converters.onnx.importer import from_onnx

    def vi(name: str, elem: int, shape: list[int]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, shape)

    def body(name: str, nodes: list[onnx.NodeProto], acc_out: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Identity", [f"{name}_cin"], [f"{name}_cout"]), *nodes], name,
            [vi(f"{name}_i", TensorProto.INT64, []), vi(f"{name}_cin", TensorProto.BOOL, []),
             vi(f"{name}_acc", TensorProto.FLOAT, [2, 3])],
            [vi(f"{name}_cout", TensorProto.BOOL, []), vi(acc_out, TensorProto.FLOAT, [2, 3])])

    add = helper.make_node("Add", ["inner_acc" if inner_trips else "outer_acc", "x"], ["sum"])
    if inner_trips:
        inner = body("inner", [add], "sum")
        nodes = [helper.make_node("Loop", ["N", "", "outer_acc"], ["after"], body=inner)]
        outer = body("outer", nodes, "after")
    else:
        outer = body("outer", [add], "sum")
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"),
             numpy_helper.from_array(np.array(inner_trips or 1, np.int64), "N")]
    inputs = [vi("x", TensorProto.FLOAT, [2, 3])]
    if cond_input:
        inputs.append(vi("c", TensorProto.BOOL, []))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "c" if cond_input else "", "x"], ["y"], body=outer)],
        "loop", inputs, [vi("y", TensorProto.FLOAT, [2, 3])], initializer=inits)
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))[0]


def test_loop_bodies_cost_times_a_static_trip_count() -> None:
    # per iteration: one add of f32[2,3] (6 FLOPs, writes 24 B) and the identity passing
    # the bool cond on (1 B)
    [nc] = cost_model(_onnx_loop(4)).nodes
    assert nc.cost.other_flops == 4 * 6
    assert nc.cost.bytes_written - nc.own_cost.bytes_written == 4 * (24 + 1)
    assert "run 4 times" in nc.note
    # nested: 3 outer iterations of 2 inner ones
    nested = _onnx_loop(3, inner_trips=2)
    costs = cost_model(nested)
    assert costs.total.other_flops == 3 * 2 * 6 and costs.body_nodes == 4
    assert summarize(nested).cost.other_flops == 3 * 2 * 6  # `irbridge info` counted each once
    # zero iterations: the body never runs
    assert cost_model(_onnx_loop(0)).total.other_flops == 0
    # a cond input: the count depends on data, each body node is counted once
    [nc] = cost_model(_onnx_loop(4, cond_input=True)).nodes
    assert nc.cost.other_flops == 6 and "each counted once" in nc.note


def test_sub_byte_weights_count_packed_bytes() -> None:
    # an int4 weight [64, 32] (2048 elements) dequantized then used by a matmul: it moves
    # 1024 bytes (two a byte), not 2048 (one a byte, as tensor data holds it)
    model, graph, b = new_model("int4")
    x = graph.add_input("x", TensorType(F32, (2, 64)))
    w = weight(b, "w", 64, 32, dtype=DType.INT4)
    deq = b.op("mul", [b.op("cast", [w], {"dtype": DType.FLOAT32}),
                       b.constant(0.05, dtype=DType.FLOAT32)])
    graph.set_outputs([b.op("matmul", [x, deq])])
    costs = cost_model(model)
    cast = next(nc for nc in costs.nodes if nc.node.op == "cast")
    assert cast.cost.bytes_read == cast.cost.param_bytes == 1024
    assert cast.cost.bytes_written == 2048 * 4
    assert costs.weight_bytes == 1024
    # an odd count rounds up to whole bytes
    assert TensorType(DType.UINT4, (3,)).nbytes() == 2
    assert TensorType(DType.INT2, (5,)).nbytes() == 2
    assert TensorType(DType.FLOAT8_E4M3FN, (5,)).nbytes() == 5
