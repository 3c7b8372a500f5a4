"""ONNX -> IR: small hand-made models, shape folding, opaque nodes and their coverage
report, control flow, function bodies, provenance, old opsets; and ONNX -> IR -> ONNX
keeping the semantics (onnxruntime on both sides)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnxtools import BOOL, I64, F, assert_close, onnx_model, ort_run, tensor

from irbridge.converters.onnx import (
    coverage_of,
    from_onnx,
    import_onnx,
    import_onnx_with_coverage,
    to_onnx,
)
from irbridge.executor import run_model
from irbridge.ir import SymDim
from irbridge.verify import verify

RNG = np.random.default_rng(0)


def _weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def cnn() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn1"),
        helper.make_node("Relu", ["n"], ["r"], name="relu1"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    inits = {"w": _weights(4, 3, 3, 3), "b": _weights(4), "s": _weights(4) + 1,
             "bb": _weights(4), "m": _weights(4), "v": np.abs(_weights(4)) + 0.5,
             "fw": _weights(5, 4), "fb": _weights(5)}
    return onnx_model(nodes, [tensor("x", F, ["N", 3, 8, 8])], [tensor("y", F, ["N", 5])],
                      inits)


def test_cnn_maps_to_neutral_ops_with_weights_and_provenance() -> None:
    proto = cnn()
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral
    assert [n.op for n in model.graph.nodes] == ["conv", "batch_norm", "relu", "max_pool",
                                                "adaptive_avg_pool", "flatten", "gemm"]
    assert set(model.tensors) == {"w", "b", "s", "bb", "m", "v", "fw", "fb"}
    assert model.tensors["w"].data is not None and model.tensors["w"].shape == (4, 3, 3, 3)
    assert model.graph.inputs[0].type is not None
    assert model.graph.inputs[0].type.shape == (SymDim("N"), 3, 8, 8)
    conv = model.graph.nodes[0]
    p = conv.provenance
    assert (p.source_format, p.source_op, p.source_node) == ("onnx", "Conv", "conv1")
    assert model.source_format == "onnx"
    assert not [e for e in verify(model) if e.severity == "error"]
    feeds = {"x": RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    assert_close(run_model(model, feeds), ort_run(proto, feeds))


def test_onnx_to_ir_to_onnx_keeps_semantics() -> None:
    original = cnn()
    model, _ = from_onnx(original)
    exported = to_onnx(model)
    feeds = {"x": RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)}
    assert_close(ort_run(exported, feeds), ort_run(original, feeds))


def _reshape_model(batch: int | str) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64),
             "minus_one": np.array([-1], np.int64)}
    return onnx_model(nodes, [tensor("x", F, [batch, 3, 4])], [tensor("y", F, [batch, 12])],
                      inits)


def test_shape_chain_on_static_shapes_folds_into_a_reshape_attribute() -> None:
    model, coverage = from_onnx(_reshape_model(2))
    assert coverage.fully_neutral
    assert [n.op for n in model.graph.nodes] == ["reshape"]
    node = model.graph.nodes[0]
    assert node.attrs == {"shape": (2, -1)} and len(node.inputs) == 1
    assert model.graph.outputs[0].type is not None
    assert model.graph.outputs[0].type.shape == (2, 12)


def test_shape_chain_on_symbolic_shapes_feeds_the_reshape_shape_input() -> None:
    proto = _reshape_model("batch")
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral
    ops = [n.op for n in model.graph.nodes]
    assert ops[-1] == "reshape" and "shape_of" in ops
    assert len(model.graph.nodes[-1].inputs) == 2  # the shape input is connected
    x = RNG.standard_normal((5, 3, 4)).astype(np.float32)
    assert_close(run_model(model, {"x": x}), [x.reshape(5, 12)])
    assert_close(ort_run(to_onnx(model), {"x": x}), [x.reshape(5, 12)])


def test_unmapped_and_custom_domain_ops_stay_opaque_and_are_reported() -> None:
    nodes = [helper.make_node("GlobalLpPool", ["x"], ["d"], name="lp"),
             helper.make_node("Fancy", ["d"], ["y"], domain="com.example", name="fancy",
                              level=3)]
    proto = onnx_model(nodes, [tensor("x", F, [2, 3, 3])], [tensor("y", F, [2])],
                       extra_opsets={"com.example": 2})
    model, coverage = from_onnx(proto)
    lp, fancy = model.graph.nodes
    assert (lp.domain, lp.op) == ("onnx", "GlobalLpPool")  # no neutral mapping
    assert (fancy.domain, fancy.op, fancy.attrs) == ("com.example", "Fancy", {"level": 3})
    assert fancy.outputs[0].type is not None  # types from ONNX shape inference where known
    assert coverage.opaque == {"onnx::GlobalLpPool": 1, "com.example::Fancy": 1}
    assert "no neutral mapping" in coverage.reasons["onnx::GlobalLpPool"]
    assert any("opaque" in line and "GlobalLpPool" in line for line in coverage.lines())
    assert set(coverage_of(model)) == {"onnx::GlobalLpPool", "com.example::Fancy"}
    again = to_onnx(model)
    assert [(n.domain, n.op_type) for n in again.graph.node] == [("", "GlobalLpPool"),
                                                                ("com.example", "Fancy")]
    assert {(o.domain, o.version) for o in again.opset_import} == {("", 18),
                                                                  ("com.example", 2)}


def test_opaque_onnx_ops_round_trip_through_onnxruntime() -> None:
    # GlobalLpPool (p = 2) has no neutral mapping: kept opaque, written back as it was
    proto = onnx_model([helper.make_node("GlobalLpPool", ["x"], ["y"])],
                       [tensor("x", F, [2, 3, 3])], [tensor("y", F, [2, 3, 1])])
    model, _ = from_onnx(proto)
    assert [n.op for n in model.graph.nodes] == ["GlobalLpPool"]
    feeds = {"x": RNG.standard_normal((2, 3, 3)).astype(np.float32)}
    want = np.sqrt((feeds["x"] ** 2).sum(axis=2, keepdims=True))
    assert_close(ort_run(to_onnx(model), feeds), [want], rtol=1e-5)


def test_det_imports_as_the_neutral_op() -> None:
    proto = onnx_model([helper.make_node("Det", ["x"], ["y"])], [tensor("x", F, [2, 3, 3])],
                       [tensor("y", F, [2])])
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral and [n.op for n in model.graph.nodes] == ["det"]
    feeds = {"x": RNG.standard_normal((2, 3, 3)).astype(np.float32)}
    assert_close(ort_run(to_onnx(model), feeds), [np.linalg.det(feeds["x"])], rtol=1e-4)


def _branch(name: str, op: str) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_y"])], name, [],
                             [tensor(f"{name}_y", F, [3])])


def test_if_loop_and_scan_keep_their_subgraphs() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Relu", ["acc_out"], ["scan_out"])],
        "body", [tensor("i", I64, []), tensor("cond_in", BOOL, []), tensor("acc", F, [3])],
        [tensor("cond_out", BOOL, []), tensor("acc_out", F, [3]), tensor("scan_out", F, [3])])
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s", "e"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["e_out"])],
        "scan_body", [tensor("s", F, [3]), tensor("e", F, [3])],
        [tensor("s_out", F, [3]), tensor("e_out", F, [3])])
    nodes = [
        helper.make_node("If", ["flag"], ["chosen"], then_branch=_branch("then", "Relu"),
                         else_branch=_branch("else", "Neg")),
        helper.make_node("Loop", ["trips", "", "chosen"], ["final", "scans"], body=body),
        helper.make_node("Scan", ["final", "scans"], ["total", "partial"], body=scan_body,
                         num_scan_inputs=1),
    ]
    proto = onnx_model(nodes, [tensor("x", F, [3]), tensor("flag", BOOL, []),
                               tensor("trips", I64, [])],
                       [tensor("total", F, [3]), tensor("partial", F, [None, 3])])
    model, coverage = from_onnx(proto)
    ops = [n.qualified_op for n in model.graph.nodes]
    assert ops == ["if", "loop", "onnx::Scan"]
    assert coverage.opaque == {"onnx::Scan": 1}
    scan = model.graph.nodes[2]
    assert [n.op for n in scan.attrs["body"].nodes] == ["add", "identity"]  # type: ignore[union-attr]
    feeds = {"x": np.array([1.0, -2.0, 3.0], np.float32), "flag": np.array(False),
             "trips": np.array(3, np.int64)}
    assert_close(ort_run(to_onnx(model), feeds), ort_run(proto, feeds))


def test_standard_functions_are_expanded_into_neutral_ops() -> None:
    nodes = [helper.make_node("MeanVarianceNormalization", ["x"], ["m"]),
             helper.make_node("Celu", ["m"], ["y"], alpha=0.7)]
    proto = onnx_model(nodes, [tensor("x", F, [2, 3, 4, 4])], [tensor("y", F, [2, 3, 4, 4])],
                       opset=18)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral
    assert coverage.mapped["Celu"] == 1  # Celu has its own mapping
    assert coverage.expanded["MeanVarianceNormalization"] == 1
    sources = {n.provenance.source_op for n in model.graph.nodes}
    assert sources == {"MeanVarianceNormalization", "Celu"}  # the ONNX node each came from
    feeds = {"x": RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)}
    assert_close(run_model(model, feeds), ort_run(proto, feeds), rtol=1e-4, atol=1e-5)


def test_local_functions_are_inlined() -> None:
    function = helper.make_function(
        "com.local", "Square", ["a"], ["b"], [helper.make_node("Mul", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 18)])
    proto = onnx_model([helper.make_node("Square", ["x"], ["y"], domain="com.local")],
                       [tensor("x", F, [4])], [tensor("y", F, [4])],
                       extra_opsets={"com.local": 1})
    proto.functions.append(function)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral and [n.op for n in model.graph.nodes] == ["mul"]


def test_torch_dynamo_metadata_gives_module_path_class_and_location() -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    for key, value in {
        "pkg.torch.onnx.name_scopes": "['', 'block', 'block.act', 'relu']",
        "pkg.torch.onnx.class_hierarchy": "['m.M', 'm.B', 'torch.nn.modules.activation.ReLU', "
                                          "'aten.relu.default']",
        "pkg.torch.onnx.stack_trace": 'File "model.py", line 7, in forward\n    return self.act(x)',
    }.items():
        entry = node.metadata_props.add()
        entry.key, entry.value = key, value
    proto = onnx_model([node], [tensor("x", F, [2])], [tensor("y", F, [2])])
    relu = from_onnx(proto)[0].graph.nodes[0]
    p = relu.provenance
    assert (p.module_path, p.module_class) == ("block.act", "torch.nn.modules.activation.ReLU")
    assert p.source_node == "node_relu" and p.source_op == "Relu"
    assert p.location is not None and (p.location.file, p.location.line) == ("model.py", 7)
    assert p.location.code == "return self.act(x)"


def test_old_opsets_import_directly() -> None:
    nodes = [helper.make_node("Upsample", ["x", "scales"], ["u"], mode="nearest"),
             helper.make_node("Softmax", ["u"], ["y"], axis=1)]
    proto = onnx_model(nodes, [tensor("x", F, [1, 2, 2, 2])], [tensor("y", F, [1, 2, 4, 4])],
                       {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=9, ir_version=4)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral
    assert "resize" in [n.op for n in model.graph.nodes]
    feeds = {"x": RNG.standard_normal((1, 2, 2, 2)).astype(np.float32)}
    assert_close(run_model(model, feeds), ort_run(proto, feeds))
    assert_close(ort_run(to_onnx(model), feeds), ort_run(proto, feeds))


def test_opsets_before_7_go_through_the_version_converter() -> None:
    proto = onnx_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", F, [3])],
                       [tensor("y", F, [3])], opset=6, ir_version=3)
    model, _ = from_onnx(proto)
    assert [n.op for n in model.graph.nodes] == ["relu"]
    assert model.metadata["onnx.opset_import"] == "ai.onnx=7"
    assert model.metadata["onnx.converted_from_opset"] == "6"


def test_import_from_file_with_coverage(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(cnn(), str(path))
    model = import_onnx(path)
    assert model.graph.nodes[0].op == "conv"
    _, coverage = import_onnx_with_coverage(path)
    assert coverage.mapped["Conv"] == 1 and not coverage.opaque


def test_light_model_round_trip_matches_expected_output() -> None:
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    proto = onnx.load(str(folder / "light_squeezenet.onnx"))
    expected = onnx.numpy_helper.to_array(onnx.load_tensor(
        str(folder / "light_squeezenet_output_0.pb")))
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral
    n = 3 * 224 * 224
    x = (np.arange(n).reshape(1, 3, 224, 224) / n).astype(np.float32)
    assert_close(ort_run(to_onnx(model, opset=13), {"data_0": x}), [expected], rtol=1e-3,
                 atol=1e-7)


@pytest.mark.parametrize("op,attrs,shape", [
    ("LRN", {"size": 3}, [1, 5, 4, 4]),
    ("InstanceNormalization", {}, [2, 3, 4]),
    ("HardSwish", {}, [2, 3]),
    ("Selu", {}, [2, 3]),
    ("Shrink", {"lambd": 0.3, "bias": 0.1}, [2, 3]),
])
def test_ops_lowered_to_neutral_sequences_match_onnxruntime(op: str, attrs: dict[str, object],
                                                            shape: list[int]) -> None:
    inputs = ["x"]
    inits: dict[str, np.ndarray] = {}
    if op == "InstanceNormalization":
        inputs += ["s", "b"]
        inits = {"s": _weights(shape[1]) + 1, "b": _weights(shape[1])}
    proto = onnx_model([helper.make_node(op, inputs, ["y"], **attrs)], [tensor("x", F, shape)],
                       [tensor("y", F, shape)], inits)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    assert_close(run_model(model, feeds), ort_run(proto, feeds), rtol=1e-4, atol=1e-5)


def test_model_metadata_and_fields_survive_a_round_trip() -> None:
    """An imported file's metadata_props came back as `onnx.metadata.KEY` entries, and
    its doc_string, domain and model_version were dropped (onnxruntime then read
    model_version 2^63 - 1). They are written back under their own keys and fields, and
    a second round trip (irbridge's own keys read back from its file) still gives one
    entry per key."""
    proto = onnx_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", F, [2])],
                       [tensor("y", F, [2])])
    helper.set_model_props(proto, {"labels": "cat,dog", "license": "MIT"})
    proto.doc_string, proto.domain, proto.model_version = "my model", "org.example", 42
    again = to_onnx(from_onnx(proto)[0])
    twice = to_onnx(from_onnx(again)[0])
    for out in (again, twice):
        onnx.checker.check_model(out)  # refuses a metadata key given twice
        props = {p.key: p.value for p in out.metadata_props}
        assert len(props) == len(out.metadata_props)
        assert props["labels"] == "cat,dog" and props["license"] == "MIT"
        assert not any(key.startswith("onnx.metadata.") for key in props)
        assert (out.doc_string, out.domain, out.model_version) == \
            ("my model", "org.example", 42)


@pytest.mark.parametrize("data_shape, index_shape, batch_dims", [
    (["N", 4, 5], ["K", 2], 0),       # k = 2 over a symbolic first dim
    ([3, "M", 5], [6, 3], 0),         # k = 3, the symbolic dim in the middle
    (["N", "M"], [2, 1], 0),          # k = 1: whole rows
    ([2, "N", 5, 3], [2, 4, 2], 1),   # one batch dim, then k = 2 over a symbolic dim
    ([2, 3, 4, 5], [2, 3, 6, 1], 2),  # two batch dims, static
])
def test_gather_nd_over_symbolic_dims_and_batch_dims(data_shape: list[int | str],
                                                     index_shape: list[int | str],
                                                     batch_dims: int) -> None:
    """GatherND where data has symbolic dims (torch.onnx's advanced indexing with dynamic
    axes; the row strides are read at run time) or batch dims: both stayed opaque (a static
    data shape and batch_dims 0 were needed). Indices include negatives; against
    onnxruntime, exact."""
    node = helper.make_node("GatherND", ["data", "idx"], ["y"], batch_dims=batch_dims)
    k = index_shape[-1]
    assert isinstance(k, int)
    out_rank = len(index_shape) - 1 + len(data_shape) - batch_dims - k
    proto = onnx_model([node], [tensor("data", F, data_shape), tensor("idx", I64, index_shape)],
                       [tensor("y", F, [None] * out_rank)])
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    rng = np.random.default_rng(4)
    sizes = {"N": 7, "M": 6, "K": 5}
    data = rng.standard_normal([sizes.get(d, d) for d in data_shape]).astype(np.float32)
    lead = [int(sizes.get(d, d)) for d in index_shape[:-1]]
    idx = np.stack([rng.integers(-data.shape[batch_dims + i], data.shape[batch_dims + i], lead)
                    for i in range(k)], axis=-1).astype(np.int64)
    feeds = {"data": data, "idx": idx}
    (want,) = ort_run(proto, feeds)
    np.testing.assert_array_equal(run_model(model, feeds)[0], want)
    np.testing.assert_array_equal(ort_run(to_onnx(model), feeds)[0], want)


@pytest.mark.parametrize("data_shape, index_shape, reduction", [
    ([4, 5, 6], [3, 1], "none"),            # whole [5, 6] slices
    (["N", 5, 6], [2, 2, 2], "none"),       # [6] rows, a symbolic first dim
    ([4, "M", 6], [7, 3], "add"),           # elements, duplicates accumulate
    (["N", "M"], ["K", 1], "add"),          # rows of a fully symbolic matrix
])
def test_scatter_nd_imports_as_index_put(data_shape: list[int | str],
                                         index_shape: list[int | str], reduction: str) -> None:
    """ScatterND (torch.onnx's slice assignment and index_put; Swin's attention mask) was
    unmapped: 18 opaque nodes in torchvision's swin_t. Now index_put, exported back as
    ScatterND with the symbolic sizes read at run time. Negative indices; against
    onnxruntime, exact (the added values are small integers, so the order of additions
    does not matter)."""
    node = helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], reduction=reduction)
    k = index_shape[-1]
    assert isinstance(k, int)
    upd_shape = [*index_shape[:-1], *data_shape[k:]]
    proto = onnx_model([node], [tensor("data", F, data_shape), tensor("idx", I64, index_shape),
                                tensor("upd", F, upd_shape)],
                       [tensor("y", F, data_shape)], opset=18)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    rng = np.random.default_rng(9)
    sizes = {"N": 4, "M": 5, "K": 6}
    data = rng.integers(-5, 5, [sizes.get(d, d) for d in data_shape]).astype(np.float32)
    lead = [int(sizes.get(d, d)) for d in index_shape[:-1]]
    if reduction == "none":   # distinct tuples: ONNX leaves duplicates' order undefined
        flat = rng.permutation(math.prod(data.shape[:k]))[:math.prod(lead)]
        tuples = np.stack(np.unravel_index(flat, data.shape[:k]), axis=-1)
        tuples -= np.array(data.shape[:k]) * rng.integers(0, 2, tuples.shape)  # negatives
        idx = tuples.reshape(*lead, k).astype(np.int64)
    else:
        idx = np.stack([rng.integers(-data.shape[i], data.shape[i], lead) for i in range(k)],
                       axis=-1).astype(np.int64)
    upd = rng.integers(-3, 4, [*lead, *data.shape[k:]]).astype(np.float32)
    feeds = {"data": data, "idx": idx, "upd": upd}
    (want,) = ort_run(proto, feeds)
    np.testing.assert_array_equal(run_model(model, feeds)[0], want)
    again = to_onnx(model)
    assert [n.op_type for n in again.graph.node].count("ScatterND") == 1
    np.testing.assert_array_equal(ort_run(again, feeds)[0], want)
