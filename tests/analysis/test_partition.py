"""Fusion partitioning by op category and dataflow."""

from __future__ import annotations

from graphs import F32, at, new_model, resnet_block_model, two_tower_model, weight

from irbridge.analysis.concurrency import concurrency
from irbridge.analysis.cost import cost_model
from irbridge.analysis.partition import Partitioning, partition
from irbridge.ir import Model, TensorType


def _parts(model: Model, strategy: str = "fused") -> Partitioning:
    return partition(model, cost_model(model), strategy)


def _ops(p: Partitioning) -> list[list[str]]:
    return [[n.op for n in part.nodes] for part in p.partitions]


def test_residual_block_fuses_conv_with_its_epilogue() -> None:
    model = resnet_block_model(1)
    fused = _parts(model)
    assert _ops(fused) == [["conv", "batch_norm", "relu"],
                           ["conv", "batch_norm", "add", "relu"]]
    assert [p.kind for p in fused.partitions] == ["conv+epilogue", "conv+epilogue"]
    first, second = fused.partitions
    act, w, bn = 16 * 8 * 8 * 4, 16 * 16 * 9 * 4, 4 * 16 * 4
    assert (first.external_read, first.external_written, first.internal_bytes) == \
        (act + w + bn, act, 2 * act)
    # the second kernel also reads the block input for the residual add
    assert (second.external_read, second.external_written, second.internal_bytes) == \
        (2 * act + w + bn, act, 3 * act)
    assert "ends: #3 conv is a matmul-like anchor" in first.reason
    assert "graph output" in second.reason
    assert first.intensity == first.cost.flops / first.external_bytes
    assert sum(p.cost.macs for p in fused.partitions) == cost_model(model).total.macs


def test_unfused_is_one_op_per_partition() -> None:
    model = resnet_block_model(1)
    unfused = _parts(model, "unfused")
    assert len(unfused.partitions) == len(model.graph.nodes)
    assert all(p.internal_bytes == 0 for p in unfused.partitions)
    assert {n.id: p.id for p in unfused.partitions for n in p.nodes} == unfused.of_node
    fused_bytes = sum(p.external_bytes for p in _parts(model).partitions)
    assert fused_bytes < sum(p.external_bytes for p in unfused.partitions)


def test_decomposed_attention_is_one_block() -> None:
    model, graph, b = new_model("attn")
    q = graph.add_input("q", TensorType(F32, (1, 4, 16, 8)))
    k = graph.add_input("k", TensorType(F32, (1, 4, 16, 8)))
    v = graph.add_input("v", TensorType(F32, (1, 4, 16, 8)))
    kt = b.op("permute", [k], {"perm": (0, 1, 3, 2)})
    s = b.op("matmul", [q, kt], provenance=at("attn"))
    s = b.op("mul", [s, b.constant(0.35, "scale")], provenance=at("attn"))
    p = b.op("softmax", [s], {"axis": -1}, provenance=at("attn"))
    y = b.op("matmul", [p, v], provenance=at("attn"))
    graph.set_outputs([y])
    fused = _parts(model)
    kinds = {part.kind: [n.op for n in part.nodes] for part in fused.partitions}
    assert kinds["attention"] == ["matmul", "mul", "softmax", "matmul"]
    assert kinds["data_movement"] == ["permute"]
    assert kinds["constant"] == ["constant"]
    block = next(part for part in fused.partitions if part.kind == "attention")
    assert block.internal_bytes == 2 * 1 * 4 * 16 * 16 * 4 + 1 * 4 * 16 * 16 * 4
    assert next(part for part in fused.partitions if part.kind == "constant").free


def test_views_join_their_producer_and_views_of_inputs_are_free() -> None:
    model, graph, b = new_model("views")
    x = graph.add_input("x", TensorType(F32, (2, 3, 4)))
    flat = b.op("reshape", [x], {"shape": (2, 12)})
    h = b.op("linear", [flat, weight(b, "w", 6, 12)])
    h = b.op("reshape", [h], {"shape": (2, 2, 3)})
    graph.set_outputs([b.op("relu", [h])])
    fused = _parts(model)
    assert _ops(fused) == [["reshape"], ["linear", "reshape", "relu"]]
    view, kernel = fused.partitions
    assert view.free and view.kind == "view" and view.external_bytes == 0
    assert kernel.kind == "matmul+epilogue"
    assert kernel.external_read == 2 * 12 * 4 + 6 * 12 * 4  # x read once, through the view
    assert kernel.external_written == 2 * 6 * 4
    unfused = _parts(model, "unfused")
    assert [p.free for p in unfused.partitions] == [True, False, True, False]


def test_elementwise_chain_and_norm_block() -> None:
    model, graph, b = new_model("chain")
    x = graph.add_input("x", TensorType(F32, (4, 64)))
    # a decomposed layer norm: reductions, broadcasts back, elementwise
    mean = b.op("reduce_mean", [x], {"axes": (-1,), "keepdims": True})
    d = b.op("sub", [x, mean])
    var = b.op("reduce_mean", [b.op("mul", [d, d])], {"axes": (-1,), "keepdims": True})
    y = b.op("mul", [d, b.op("rsqrt", [var])])
    y = b.op("tanh", [b.op("mul", [y, weight(b, "gamma", 64)])])
    graph.set_outputs([y])
    fused = _parts(model)
    kernels = fused.kernels
    assert len(kernels) == 1 and kernels[0].kind == "reduction"
    assert kernels[0].external_read == 4 * 64 * 4 + 64 * 4
    assert kernels[0].external_written == 4 * 64 * 4


def test_broadcasting_beyond_the_kernel_starts_a_new_one() -> None:
    model, graph, b = new_model("broadcast")
    x = graph.add_input("x", TensorType(F32, (1, 8)))
    big = graph.add_input("big", TensorType(F32, (16, 8)))
    h = b.op("linear", [x, weight(b, "w", 8, 8)])
    graph.set_outputs([b.op("add", [h, big])])
    fused = _parts(model)
    assert _ops(fused) == [["linear"], ["add"]]
    assert "larger than kernel 0's iteration space" in fused.partitions[1].reason


def test_fusion_never_creates_a_cycle() -> None:
    model, graph, b = new_model("diamond")
    x = graph.add_input("x", TensorType(F32, (4, 16)))
    a = b.op("linear", [x, weight(b, "w1", 16, 16)])
    c = b.op("linear", [a, weight(b, "w2", 16, 16)])
    r = b.op("relu", [a])  # joins a's kernel, which c depends on
    graph.set_outputs([b.op("add", [r, c])])
    fused = _parts(model)
    assert _ops(fused) == [["linear", "relu"], ["linear", "add"]]
    assert "would form a cycle" in fused.partitions[0].reason
    conc = concurrency(model, fused)  # raises on a cyclic partition graph
    assert conc.stages == 2


def test_two_towers_and_ids_across_graphs() -> None:
    model = two_tower_model()
    fused = _parts(model)
    assert [p.kind for p in fused.partitions].count("matmul+epilogue") == 6
    assert len(fused.of_node) == len(model.graph.nodes)


def test_shape_arithmetic_is_free_metadata() -> None:
    import numpy as np

    from irbridge.ir import SymDim

    model, graph, b = new_model("dynamic")
    x = graph.add_input("x", TensorType(F32, (SymDim("s0"), 4, 8)))
    batch = b.op("shape_of", [x], {"start": 0, "end": 1})
    target = b.op("concat", [batch, b.constant(np.array([32], np.int64), "rest")], {"axis": 0})
    h = b.op("reshape", [b.op("relu", [x]), target])
    graph.set_outputs([b.op("linear", [h, weight(b, "w", 16, 32)])])
    from irbridge.analysis.binding import bound

    with bound(model, batch=2):
        fused = _parts(model)
    kinds = {p.kind: p for p in fused.partitions}
    assert kinds["metadata"].free and [n.op for n in kinds["metadata"].nodes] == [
        "shape_of", "concat"]
    assert [p.kind for p in fused.kernels] == ["elementwise", "matmul"]


def _view_with_computed_target(tail: str) -> Model:
    """relu(x) permuted, then reshaped to a target shape built from the permuted value's own
    shape and a `tail` operand: a small int64 initializer ("weight") or a runtime int64
    vector ("input"), as ONNX exporters write dynamic reshapes."""
    import numpy as np

    from irbridge.ir import DType, SymDim, Tensor

    model, graph, b = new_model("dynamic_reshape")
    x = graph.add_input("x", TensorType(F32, (SymDim("s0"), 4, 8)))
    t = b.op("permute", [b.op("relu", [x])], {"perm": (0, 2, 1)})
    dims = b.op("slice", [b.op("shape_of", [t], {"start": 0, "end": 0})],
                {"starts": (0,), "ends": (2,), "axes": (0,), "steps": (1,)})
    rest = (b.parameter(Tensor("rest", DType.INT64, (1,), np.array([4], np.int64)))
            if tail == "weight" else graph.add_input("rest", TensorType(DType.INT64, (1,))))
    target = b.op("concat", [dims, rest], {"axis": 0})
    graph.set_outputs([b.op("reshape", [t, target])])
    return model


def test_a_view_whose_target_shape_comes_from_another_kernel_forms_no_cycle() -> None:
    # The target's concat reads a runtime vector: a kernel of its own that depends on the
    # relu kernel (through shape_of), so the reshape cannot join the relu kernel too.
    model = _view_with_computed_target("input")
    fused = _parts(model)
    reshape = next(p for p in fused.partitions if p.nodes[-1].op == "reshape")
    assert reshape.free and "would form a cycle" in reshape.reason
    conc = concurrency(model, fused)  # raises on a cyclic partition graph
    assert conc.kernels >= 2


def test_a_target_shape_from_a_small_integer_initializer_is_metadata() -> None:
    # shape_of, slice and concat only compute the target shape (metadata, no kernel of
    # their own), so the reshape joins the permute's kernel with them; with a runtime
    # vector instead (the test above) the concat is a kernel of its own.
    model = _view_with_computed_target("weight")
    fused = _parts(model)
    assert [[n.op for n in p.nodes] for p in fused.kernels] == [
        ["relu"], ["permute", "shape_of", "slice", "concat", "reshape"]]
    concurrency(model, fused)
