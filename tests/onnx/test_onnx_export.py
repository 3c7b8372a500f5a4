"""IR -> ONNX: every neutral op, representative models built with GraphBuilder, checked by
onnx.checker (inside to_onnx) and by onnxruntime against the IR reference executor; and
IR -> ONNX -> IR keeping the compute-op histogram and the matmul-like FLOPs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxtools import assert_close, compute_histogram, matmul_flops, model_of, ort_run

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import export_onnx, from_onnx, import_onnx, to_onnx
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Node, Provenance, SourceLocation, SymDim, Tensor, TensorType
from irbridge.ops.examples import build_example, examples

COMPLEX_OPS = {"complex", "polar", "real", "imag", "conj", "complex_abs", "angle", "view_as_real",
                "view_as_complex", "fft_r2c", "fft_c2c", "fft_c2r"}

F32 = DType.FLOAT32
# a bitcast that changes the element width (the op's example: f32 -> 2 x i16; ONNX
# BitCast keeps the width, test_bitcast_of_the_same_width below) and StableHLO's
# reduce_precision: refused
NO_ONNX_FORM = {"bitcast", "reduce_precision"}
"""Ops ONNX cannot express exactly: export refuses them (never approximates). The special
functions, scans, float-format ops and factorisations export through their registry
decompositions."""
# complex numbers and FFTs (irbridge/ops/complex.py) export on (real, imag) pairs: their
# files take and give pairs, checked in test_onnx_complex.py
EXAMPLES = sorted(set(examples()) - NO_ONNX_FORM - COMPLEX_OPS)


@pytest.mark.parametrize("name", sorted(NO_ONNX_FORM))
def test_special_functions_without_an_exact_onnx_form_are_refused(name: str) -> None:
    model, _ = _example_model(name)
    why = "cannot export to ONNX: bitcast of f32 to i16 changes the element width" \
        if name == "bitcast" else \
        f"neutral op '{name}' has no ONNX"
    with pytest.raises(ExportError, match=rf"node #\d+ {name}: {why}"):
        to_onnx(model)


@pytest.mark.parametrize("source, target", [
    (DType.UINT32, DType.FLOAT32),    # jax.random's uniform bits -> float (threefry)
    (DType.FLOAT32, DType.INT32), (DType.FLOAT64, DType.UINT64), (DType.INT64, DType.FLOAT64),
    (DType.FLOAT16, DType.BFLOAT16), (DType.INT8, DType.UINT8),
])
def test_bitcast_of_the_same_width_exports_as_onnx_bitcast(source: DType,
                                                          target: DType) -> None:
    """ONNX BitCast (opset 26) reinterprets the bits, as StableHLO's bitcast_convert does:
    the export raises the opset to 26 by itself, onnxruntime gives the executor's bits, and
    the file imports back as the IR's bitcast. Bit patterns compared exactly."""
    g = Graph()
    x = g.add_input("x", TensorType(source, (3, 4)))
    node = g.add_node("bitcast", [x], ["y"], {"dtype": target},
                      output_types=[TensorType(target, (3, 4))])
    g.set_outputs(node.outputs)
    model = Model(graphs=[g])
    raw = np.random.default_rng(5).integers(0, 256, 3 * 4 * source.itemsize, dtype=np.uint8)
    feeds = {"x": raw.view(source.numpy).reshape(3, 4)}
    if source.is_float:   # no NaN payloads: runtimes may quieten a signalling NaN on copy
        feeds["x"] = np.where(np.isfinite(feeds["x"]), feeds["x"], 0).astype(source.numpy)
    (want,) = run_model(model, feeds)
    proto = to_onnx(model)
    assert [o.version for o in proto.opset_import if o.domain == ""] == [26]
    assert [n.op_type for n in proto.graph.node] == ["BitCast"]
    if target is not DType.BFLOAT16:   # onnxruntime's Python API hands out no bfloat16
        (got,) = ort_run(proto, feeds)
        assert got.tobytes() == want.tobytes()
    back, _ = from_onnx(proto)
    assert [n.op for n in back.graph.nodes] == ["bitcast"]
    assert run_model(back, feeds)[0].tobytes() == want.tobytes()

# ops whose ONNX form depends on the opset (and the oldest opset each form needs)
VERSIONED = ["gelu", "mish", "hardswish", "layer_norm", "group_norm", "rms_norm", "reduce_mean",
             "reduce_max", "shape_of", "trilu", "cumprod", "resize", "softplus", "silu",
             "adaptive_max_pool", "sort", "attention", "linear", "floor_div", "mod"]


def _example_model(name: str) -> tuple[Model, dict[str, np.ndarray]]:
    built = build_example(name)
    return model_of(built.graph), built.feeds


def _roundtrip_checks(model: Model, feeds: dict[str, np.ndarray], opset: int) -> None:
    with np.errstate(all="ignore"):
        expected = run_model(model, feeds)
    # the default export is the lean one (converters/onnx/_optimize.py): same numbers
    lean = to_onnx(model, opset=opset)  # runs onnx.checker.check_model(full_check=True)
    assert_close(ort_run(lean, feeds), expected)
    with np.errstate(all="ignore"):
        assert_close(run_model(from_onnx(lean)[0], feeds), expected)
    # without the clean-up pass the file rebuilds the very same neutral ops
    proto = to_onnx(model, opset=opset, optimize=False)
    assert_close(ort_run(proto, feeds), expected)
    back, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    assert compute_histogram(back) == compute_histogram(model)
    assert matmul_flops(back) == matmul_flops(model)
    with np.errstate(all="ignore"):
        assert_close(run_model(back, feeds), expected)


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_neutral_op_exports_and_round_trips(name: str) -> None:
    model, feeds = _example_model(name)
    _roundtrip_checks(model, feeds, opset=18)


@pytest.mark.parametrize("opset", [13, 17, 21, 23, 26])
@pytest.mark.parametrize("name", VERSIONED)
def test_opset_dependent_lowerings(name: str, opset: int) -> None:
    model, feeds = _example_model(name)
    _roundtrip_checks(model, feeds, opset=opset)


@pytest.mark.parametrize("opset", [13, 14, 17])
@pytest.mark.parametrize("dtype", [DType.FLOAT32, DType.INT64])
def test_sort_over_a_symbolic_axis_before_opset_15(opset: int, dtype: DType) -> None:
    """The length of a symbolic axis is read at run time: Shape's start/end attributes
    only exist from opset 15 (SSDlite exported by torch.onnx at opset 11 re-exported with them
    and failed the checker), so earlier opsets slice the Shape."""
    graph = Graph("g")
    x = graph.add_input("x", TensorType(dtype, (2, SymDim("n"))))
    b = GraphBuilder(graph)
    values, indices = b.op_multi("sort", [x], {"axis": 1, "descending": True})
    graph.set_outputs([values, indices])
    proto = to_onnx(model_of(graph), opset=opset)
    assert proto.opset_import[0].version == opset
    data = np.array([[3, 1, 2, 5, 4], [0, 9, 8, 7, 6]]).astype(dtype.numpy)
    got_values, got_indices = ort_run(proto, {"x": data})
    np.testing.assert_array_equal(got_values, -np.sort(-data, axis=1))
    np.testing.assert_array_equal(got_indices, np.argsort(-data, axis=1, kind="stable"))


def test_opset_choice_changes_the_ops_written() -> None:
    model, _ = _example_model("group_norm")
    old = {n.op_type for n in to_onnx(model, opset=18).graph.node}
    new = {n.op_type for n in to_onnx(model, opset=21).graph.node}
    assert "InstanceNormalization" in old and "GroupNormalization" not in old
    assert "GroupNormalization" in new
    assert to_onnx(model).opset_import[0].version == 18


# -- representative models -----------------------------------------------------------------

def _param(b: GraphBuilder, name: str, shape: tuple[int, ...], seed: int) -> object:
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.2
    return b.parameter(Tensor.from_array(name, data))


def _provenance(path: str, op: str) -> Provenance:
    return Provenance("torch.export", op, op.split(".")[1], path,
                      "torch.nn.modules.conv.Conv2d", SourceLocation("model.py", 12, "x"))


def small_cnn() -> tuple[Model, dict[str, np.ndarray]]:
    """conv, batch_norm, relu, max_pool, adaptive_avg_pool, flatten, linear."""
    graph = Graph("cnn")
    model = Model(name="cnn")
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (SymDim("batch"), 3, 16, 16)))
    b.provenance = _provenance("features.0", "aten.conv2d.default")
    w, bias = _param(b, "features.0.weight", (8, 3, 3, 3), 1), _param(b, "features.0.bias", (8,), 2)
    y = b.op("conv", [x, w, bias], {"pads": (1, 1, 1, 1)})  # type: ignore[list-item]
    b.provenance = Provenance("torch.export", "aten.batch_norm.default", "bn", "features.1")
    stats = [_param(b, f"features.1.{n}", (8,), 3 + i) for i, n in enumerate(("w", "b", "m"))]
    var = b.parameter(Tensor.from_array("features.1.v", np.full(8, 0.5, np.float32)))
    y = b.op("batch_norm", [y, *stats, var])  # type: ignore[list-item]
    b.provenance = None
    y = b.op("relu", [y])
    y = b.op("max_pool", [y], {"kernel": (2, 2), "strides": (2, 2)})
    y = b.op("adaptive_avg_pool", [y], {"output_size": (1, 1)})
    y = b.op("flatten", [y], {"start_axis": 1})
    b.provenance = Provenance("torch.export", "aten.linear.default", "fc", "classifier")
    y = b.op("linear", [y, _param(b, "fc.w", (10, 8), 7), _param(b, "fc.b", (10,), 8)])  # type: ignore[list-item]
    graph.set_outputs([y])
    model.graphs = [graph]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    return model, feeds


def transformer_block() -> tuple[Model, dict[str, np.ndarray]]:
    """layer_norm, linear q/k/v, heads split, causal attention (decomposed), gelu MLP."""
    graph = Graph("block")
    model = Model(name="block")
    b = GraphBuilder(graph, model)
    d, heads, length = 32, 4, 8
    x = graph.add_input("x", TensorType(F32, (SymDim("batch"), length, d)))
    h = b.op("layer_norm", [x, _param(b, "ln.w", (d,), 1), _param(b, "ln.b", (d,), 2)])  # type: ignore[list-item]

    def heads_of(name: str, seed: int) -> object:
        v = b.op("linear", [h, _param(b, f"{name}.w", (d, d), seed), _param(b, f"{name}.b", (d,), seed + 1)])  # type: ignore[list-item]
        v = b.op("reshape", [v], {"shape": (0, length, heads, d // heads)})
        return b.op("permute", [v], {"perm": (0, 2, 1, 3)})

    q, k, v = heads_of("q", 3), heads_of("k", 5), heads_of("v", 7)
    a = b.op("attention", [q, k, v], {"causal": True})  # type: ignore[list-item]
    a = b.op("reshape", [b.op("permute", [a], {"perm": (0, 2, 1, 3)})], {"shape": (0, length, d)})
    y = b.op("add", [x, b.op("linear", [a, _param(b, "o.w", (d, d), 9)])])  # type: ignore[list-item]
    m = b.op("gelu", [b.op("linear", [y, _param(b, "up.w", (2 * d, d), 10)])])  # type: ignore[list-item]
    y = b.op("add", [y, b.op("linear", [m, _param(b, "down.w", (d, 2 * d), 11)])])  # type: ignore[list-item]
    graph.set_outputs([y])
    model.graphs = [graph]
    feeds = {"x": np.random.default_rng(1).standard_normal((2, length, d)).astype(np.float32)}
    return model, feeds


def resize_split_model() -> tuple[Model, dict[str, np.ndarray]]:
    graph = Graph("resize_split")
    b = GraphBuilder(graph, Model())
    x = graph.add_input("x", TensorType(F32, (1, 6, 5, 5)))
    up = b.op("resize", [x], {"mode": "linear", "scales": (2.0, 2.0)})
    parts = b.op_multi("split", [up], {"axis": 1, "sizes": (2, 4)}, num_outputs=2)
    cubic = b.op("resize", [parts[0]], {"mode": "cubic", "sizes": (7, 3),
                                        "coordinate_mode": "align_corners"})
    near = b.op("resize", [parts[1]], {"mode": "nearest", "sizes": (20, 20),
                                       "nearest_mode": "round_prefer_ceil"})
    graph.set_outputs([cubic, near, parts[1]])
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 6, 5, 5)).astype(np.float32)}
    return model_of(graph), feeds


def control_flow_model() -> tuple[Model, dict[str, np.ndarray]]:
    """An if choosing between two branches that read an outer value, inside a loop body."""
    graph = Graph("control")
    b = GraphBuilder(graph, Model())
    x = graph.add_input("x", TensorType(F32, (3,)))
    flag = graph.add_input("flag", TensorType(DType.BOOL, ()))
    then_g, else_g = Graph("then"), Graph("else")
    tb, eb = GraphBuilder(then_g), GraphBuilder(else_g)
    then_g.set_outputs([tb.op("mul", [x, tb.constant(np.float32(2.0), "two")])])
    else_g.set_outputs([eb.op("neg", [x])])
    chosen = b.op("if", [flag], {"then_branch": then_g, "else_branch": else_g})
    body = Graph("body")
    bb = GraphBuilder(body)
    body.add_input("i", TensorType(DType.INT64, ()))
    cond = body.add_input("c", TensorType(DType.BOOL, ()))
    acc = body.add_input("acc", TensorType(F32, (3,)))
    nxt = bb.op("add", [acc, chosen])
    body.set_outputs([bb.op("identity", [cond]), nxt, bb.op("relu", [nxt])])
    trips = b.constant(np.array(4, np.int64), "trips")
    final, scans = b.op_multi("loop", [trips, None, x], {"body": body}, num_outputs=2)
    graph.set_outputs([final, scans])
    feeds = {"x": np.array([1.0, -2.0, 0.5], np.float32), "flag": np.array(False)}
    return model_of(graph), feeds


MODELS = {"cnn": small_cnn, "transformer": transformer_block, "resize_split": resize_split_model,
          "control_flow": control_flow_model}


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_representative_models(kind: str) -> None:
    model, feeds = MODELS[kind]()
    _roundtrip_checks(model, feeds, opset=18)


def test_control_flow_maps_to_if_and_loop() -> None:
    model, feeds = control_flow_model()
    proto = to_onnx(model)
    assert {"If", "Loop"} <= {n.op_type for n in proto.graph.node}
    for flag in (True, False):
        feeds["flag"] = np.array(flag)
        assert_close(ort_run(proto, feeds), run_model(model, feeds))


def test_weights_initializers_symbolic_dims_and_provenance() -> None:
    model, _ = small_cnn()
    proto = to_onnx(model)
    assert {t.name for t in proto.graph.initializer} >= set(model.tensors)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, 16, 16]
    conv = next(n for n in proto.graph.node if n.op_type == "Conv")
    meta = {p.key: p.value for p in conv.metadata_props}
    assert meta["irbridge.module_path"] == "features.0"
    assert meta["irbridge.source_op"] == "aten.conv2d.default"
    assert meta["irbridge.module_class"] == "torch.nn.modules.conv.Conv2d"
    assert meta["irbridge.location"] == "model.py:12"
    assert conv.name.startswith("features.0/")
    gemm = next(n for n in proto.graph.node if n.op_type == "Gemm")
    assert gemm.name.startswith("classifier/")
    # provenance survives the way back
    back = import_model(proto)
    node = next(n for _, n in back.all_nodes() if n.op == "conv")
    assert node.provenance.module_path == "features.0"
    assert node.provenance.source_format == "onnx" and node.provenance.source_op == "Conv"
    linear = next(n for _, n in back.all_nodes() if n.op == "linear")
    assert linear.provenance.module_path == "classifier"


def import_model(proto: onnx.ModelProto) -> Model:
    return from_onnx(proto)[0]


def test_lowered_groups_are_rebuilt_on_import() -> None:
    model, _ = transformer_block()
    proto = to_onnx(model, optimize=False)
    ops = {n.op_type for n in proto.graph.node}
    assert "Softmax" in ops and "MatMul" in ops  # attention went through its decomposition
    back = import_model(proto)
    assert compute_histogram(back)["attention"] == 1
    assert compute_histogram(back) == compute_histogram(model)
    # without regrouping the lowered ops stay as they are, and the FLOPs still agree
    plain, _ = from_onnx(proto, regroup=False)
    assert compute_histogram(plain)["attention"] == 0
    assert matmul_flops(plain) == matmul_flops(model)


def test_export_onnx_writes_atomically(tmp_path: Path) -> None:
    model, feeds = small_cnn()
    target = tmp_path / "cnn.onnx"
    assert export_onnx(model, target) == target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx"]
    onnx.checker.check_model(str(target), full_check=True)
    loaded = onnx.load(str(target))
    assert_close(ort_run(loaded, feeds), run_model(model, feeds))
    back = import_onnx(target)
    assert compute_histogram(back) == compute_histogram(model)


def test_export_onnx_external_data(tmp_path: Path) -> None:
    model, feeds = transformer_block()  # weights of 4 KiB and more go to the data file
    target = tmp_path / "block.onnx"
    export_onnx(model, target, external_data=True, optimize=False)  # weights as they are
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block.onnx", "block.onnx.data"]
    proto = onnx.load(str(target), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    back = import_onnx(target)
    assert_close(run_model(back, feeds), run_model(model, feeds))
    for name, tensor in model.tensors.items():
        assert back.tensors[name] == tensor


def test_opaque_nodes_are_written_back_with_their_domain() -> None:
    graph = Graph("g")
    x = graph.add_input("x", TensorType(F32, (2, 3)))
    node = graph.add_node("Fancy", [x], ["y"], {"alpha": 0.5, "mode": "fast"},
                          output_types=[TensorType(F32, (2, 3))], domain="com.example")
    graph.set_outputs(node.outputs)
    proto = to_onnx(Model(graphs=[graph]), allow_custom_ops=True)  # asked for explicitly
    written = proto.graph.node[0]
    assert (written.domain, written.op_type) == ("com.example", "Fancy")
    assert {o.domain for o in proto.opset_import} == {"", "com.example"}
    back = import_model(proto)
    again: Node = back.graph.nodes[0]
    assert again.is_opaque and again.domain == "com.example"
    assert again.attrs == {"alpha": 0.5, "mode": "fast"}


def test_multi_graph_models_are_joined_through_their_links() -> None:
    from irbridge.ir import GraphLink

    first, second = Graph("g0"), Graph("g1")
    b0, b1 = GraphBuilder(first), GraphBuilder(second)
    x = first.add_input("x", TensorType(F32, (4,)))
    first.set_outputs([b0.op("relu", [x])])
    z = second.add_input("z", TensorType(F32, (4,)))
    w = second.add_input("w", TensorType(F32, (4,)))
    second.set_outputs([b1.op("mul", [z, w])])
    model = Model(graphs=[first, second], links=[GraphLink(0, first.outputs[0].name, 1, "z")])
    proto = to_onnx(model)
    assert [i.name for i in proto.graph.input] == ["x", "w"]
    feeds = {"x": np.array([-1, 2, -3, 4], np.float32), "w": np.full(4, 2.0, np.float32)}
    assert_close(ort_run(proto, feeds), run_model(model, feeds))


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_with_symbolic_sizes_broadcasts_its_indices_at_run_time(
        accumulate: bool) -> None:
    """x[i0, i1] = v with x f32[N, 6, 4], i0 [K, 1] and i1 [3] (broadcast to [K, 3]), v [3, 4]
    broadcast over K: the sizes are symbolic, so the broadcast shape is read at run time
    (it was refused unless every index tensor had one shape). Against the IR executor in
    onnxruntime, exact (small integer values: the order of additions does not matter)."""
    n, k = SymDim("N"), SymDim("K")
    g = Graph()
    x = g.add_input("x", TensorType(F32, (n, 6, 4)))
    i0 = g.add_input("i0", TensorType(DType.INT64, (k, 1)))
    i1 = g.add_input("i1", TensorType(DType.INT64, (3,)))
    v = g.add_input("v", TensorType(F32, (3, 4)))
    node = g.add_node("index_put", [x, v, i0, i1], ["y"],
                      {"index_axes": (0, 1), "accumulate": accumulate},
                      output_types=[TensorType(F32, (n, 6, 4))])
    g.set_outputs(node.outputs)
    model = Model(graphs=[g])
    rng = np.random.default_rng(3)
    feeds = {"x": rng.integers(-4, 4, (5, 6, 4)).astype(np.float32),
             "i0": np.array([[0], [-1], [2]], np.int64) if not accumulate
             else np.array([[0], [-1], [4], [0]], np.int64),
             "i1": np.array([1, -2, 5], np.int64),
             "v": rng.integers(-3, 4, (3, 4)).astype(np.float32)}
    (want,) = run_model(model, feeds)
    proto = to_onnx(model)
    assert "ScatterND" in [n.op_type for n in proto.graph.node]
    (got,) = ort_run(proto, feeds)
    np.testing.assert_array_equal(got, want)
