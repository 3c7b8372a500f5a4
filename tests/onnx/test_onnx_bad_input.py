"""Bad input on both sides: each refusal is an irbridge error with a one-line message that
names the file or node, and a failed export writes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnxtools import I64, F, onnx_model, tensor

from irbridge.converters.onnx import export_onnx, from_onnx, import_onnx, to_onnx
from irbridge.dtypes import DType
from irbridge.errors import CaptureError, ExportError, FileFormatError, IrbridgeError
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Tensor, TensorType


def _relu_model(**kwargs: object) -> onnx.ModelProto:
    return onnx_model([helper.make_node("Relu", ["x"], ["y"], name="act")],
                      [tensor("x", F, [2])], [tensor("y", F, [2])], **kwargs)  # type: ignore[arg-type]


def _one_line(exc: pytest.ExceptionInfo[IrbridgeError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def _save(tmp_path: Path, proto: onnx.ModelProto, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage that is not protobuf \xff" * 3])
def test_unreadable_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(FileFormatError) as exc:
        import_onnx(path)
    assert str(path) in _one_line(exc)


def test_truncated_file(tmp_path: Path) -> None:
    data = _relu_model(initializers={"w": np.ones((64, 64), np.float32)}).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises((FileFormatError, CaptureError)) as exc:
        import_onnx(path)
    assert str(path) in _one_line(exc)  # type: ignore[arg-type]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError) as exc:
        import_onnx(tmp_path / "nope.onnx")
    assert "nope.onnx" in _one_line(exc)


def _external_model(tmp_path: Path) -> Path:
    proto = onnx_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", F, [256])],
                       [tensor("y", F, [256])], {"w": np.arange(256, dtype=np.float32)})
    path = tmp_path / "ext.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True, location="ext.onnx.data",
                    size_threshold=0)
    return path


def test_external_data_is_read(tmp_path: Path) -> None:
    model = import_onnx(_external_model(tmp_path))
    data = model.tensors["w"].data
    assert data is not None and np.array_equal(data, np.arange(256, dtype=np.float32))


def test_missing_external_data_file(tmp_path: Path) -> None:
    path = _external_model(tmp_path)
    (tmp_path / "ext.onnx.data").unlink()
    with pytest.raises(FileFormatError) as exc:
        import_onnx(path)
    assert "ext.onnx.data" in _one_line(exc) and "missing" in str(exc.value)


def test_truncated_external_data_file(tmp_path: Path) -> None:
    path = _external_model(tmp_path)
    data = tmp_path / "ext.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(FileFormatError) as exc:
        import_onnx(path)
    assert "truncated" in _one_line(exc)


def test_external_data_outside_the_model_folder(tmp_path: Path) -> None:
    proto = onnx.load(str(_external_model(tmp_path)), load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../../etc/passwd"
    (tmp_path / "sub").mkdir()
    path = _save(tmp_path / "sub", proto)
    with pytest.raises(FileFormatError) as exc:
        import_onnx(path)
    assert "outside" in _one_line(exc)


def test_types_the_ir_cannot_hold_name_the_file_and_value(tmp_path: Path) -> None:
    """A string graph input, or a sequence value between nodes: one line naming the file
    (it named only the value) and the value."""
    strings = onnx_model([helper.make_node("Identity", ["x"], ["y"])],
                         [tensor("x", onnx.TensorProto.STRING, [3])],
                         [tensor("y", onnx.TensorProto.STRING, [3])])
    path = _save(tmp_path, strings, "strings.onnx")
    with pytest.raises(CaptureError) as exc:
        import_onnx(path)
    assert _one_line(exc) == (f"{path}: graph input 'x' has element type STRING, which the "
                              "IR cannot represent")
    sequence = onnx_model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
                           helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                          [tensor("x", F, [2])], [tensor("y", F, [4])])
    path = _save(tmp_path, sequence, "sequence.onnx")
    with pytest.raises(CaptureError) as exc:
        import_onnx(path)
    assert _one_line(exc).startswith(f"{path}: value 's' has ONNX type sequence")


def test_unknown_domain_names_the_node() -> None:
    proto = onnx_model([helper.make_node("Thing", ["x"], ["y"], name="mystery",
                                         domain="com.nowhere")],
                       [tensor("x", F, [2])], [tensor("y", F, [2])])
    with pytest.raises(CaptureError) as exc:
        from_onnx(proto)
    text = _one_line(exc)
    assert "mystery" in text and "com.nowhere" in text and "unknown domain" in text


def test_dangling_input_names_the_node() -> None:
    proto = onnx_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")],
                       [tensor("x", F, [2])], [tensor("y", F, [2])])
    with pytest.raises(CaptureError) as exc:
        from_onnx(proto)
    text = _one_line(exc)
    assert "adder" in text and "ghost" in text


def test_cycle_names_a_node_on_it() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    proto = onnx_model(nodes, [tensor("x", F, [2])], [tensor("a", F, [2])])
    with pytest.raises(CaptureError) as exc:
        from_onnx(proto)
    text = _one_line(exc)
    assert "cycle" in text and ("first" in text or "second" in text)


def test_nodes_out_of_order_are_sorted() -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="late"),
             helper.make_node("Neg", ["x"], ["a"], name="early")]
    proto = onnx_model(nodes, [tensor("x", F, [2])], [tensor("y", F, [2])])
    model, _ = from_onnx(proto)
    assert [n.op for n in model.graph.nodes] == ["neg", "relu"]


@pytest.mark.parametrize("second", ["x", "a"])
def test_a_name_defined_twice_names_the_second_definition(second: str) -> None:
    # in order otherwise: the one-pass check must not accept what the full analysis refuses
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], [second], name="again")]
    proto = onnx_model(nodes, [tensor("x", F, [2])], [tensor("a", F, [2])])
    with pytest.raises(CaptureError) as exc:
        from_onnx(proto)
    text = _one_line(exc)
    assert f"value {second!r} is defined twice" in text and "Relu" in text


def test_a_branch_reading_a_later_value_is_sorted_before_it() -> None:
    # the If node's own inputs are all defined before it; its branch reads "late", which a
    # node after it produces: an order only the subgraph's free names reveal
    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["late"], [f"{name}_out"])], name, [],
                                 [tensor(f"{name}_out", F, [2])])

    nodes = [helper.make_node("If", ["cond"], ["y"], name="choose",
                              then_branch=branch("then", "Neg"),
                              else_branch=branch("else", "Relu")),
             helper.make_node("Abs", ["x"], ["late"], name="producer")]
    proto = onnx_model(nodes, [tensor("x", F, [2]), tensor("cond", onnx.TensorProto.BOOL, [])],
                       [tensor("y", F, [2])])
    model, _ = from_onnx(proto)
    ops = [n.op for n in model.graph.nodes]
    assert ops.index("abs") < ops.index(next(op for op in ops if op != "abs"))
    x = np.array([-1.5, 2.0], np.float32)
    for cond, want in ((True, -np.abs(x)), (False, np.abs(x))):
        (got,) = run_model(model, {"x": x, "cond": np.array(cond)})
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [99, 29])
def test_opset_too_new(opset: int) -> None:
    proto = _relu_model()
    proto.opset_import[0].version = opset
    with pytest.raises(FileFormatError) as exc:
        from_onnx(proto, source="model.onnx")
    text = _one_line(exc)
    assert f"opset {opset}" in text and "supported range" in text and "model.onnx" in text


def test_opset_too_old_for_the_version_converter() -> None:
    proto = onnx_model([helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 2.0])],
                       [tensor("x", F, [2, 2])], [tensor("y", F, [2, 4])], opset=1,
                       ir_version=3)
    with pytest.raises((FileFormatError, CaptureError)) as exc:
        from_onnx(proto, source="old.onnx")
    assert "old.onnx" in _one_line(exc)  # type: ignore[arg-type]


def test_ir_version_too_new() -> None:
    proto = _relu_model()
    proto.ir_version = onnx.IR_VERSION + 1
    with pytest.raises(FileFormatError) as exc:
        from_onnx(proto)
    assert "IR version" in _one_line(exc)


def test_string_tensors_are_refused_with_the_reason() -> None:
    proto = onnx_model([helper.make_node("Identity", ["s"], ["t"])],
                       [tensor("s", onnx.TensorProto.STRING, [2])],
                       [tensor("t", onnx.TensorProto.STRING, [2])])
    with pytest.raises(CaptureError) as exc:
        from_onnx(proto)
    assert "STRING" in _one_line(exc)


# -- export ----------------------------------------------------------------------------

def _graph_model(shape_only: bool = False) -> Model:
    graph = Graph("g")
    x = graph.add_input("x", TensorType(DType.FLOAT32, (2,)))
    tensor_ = Tensor("w", DType.FLOAT32, (2,), None if shape_only else np.ones(2, np.float32))
    model = Model(graphs=[graph], tensors={"w": tensor_})
    w = graph.add_parameter(tensor_)
    graph.set_outputs(graph.add_node("add", [x, w], ["y"],
                                     output_types=[TensorType(DType.FLOAT32, (2,))]).outputs)
    return model


def test_export_of_a_shape_only_model() -> None:
    with pytest.raises(ExportError) as exc:
        to_onnx(_graph_model(shape_only=True))
    assert "shape-only" in _one_line(exc)


@pytest.mark.parametrize("opset", [7, 12, 99])
def test_export_opset_out_of_range(opset: int) -> None:
    with pytest.raises(ExportError) as exc:
        to_onnx(_graph_model(), opset=opset)
    assert "supported range" in _one_line(exc)


def test_export_of_an_untyped_graph_input() -> None:
    graph = Graph("g")
    x = graph.add_input("x", None)
    node = graph.add_node("Mystery", [x], ["y"], domain="com.x")
    graph.set_outputs(node.outputs)
    with pytest.raises(ExportError) as exc:
        to_onnx(Model(graphs=[graph]))
    assert "'x'" in _one_line(exc) and "no type" in str(exc.value)


def test_export_of_an_opaque_op_changed_since_its_opset() -> None:
    body = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s2"]),
                              helper.make_node("Identity", ["s2"], ["o"])], "b",
                             [tensor("s", F, [2]), tensor("e", F, [2])],
                             [tensor("s2", F, [2]), tensor("o", F, [2])])
    # with sequence_lens, which has no exact Scan-9 form (without, it exports as a Loop:
    # test_onnx_opaque_rewrites.py)
    proto = onnx_model([helper.make_node("Scan", ["lens", "init", "xs"], ["last", "all"],
                                         body=body, num_scan_inputs=1, name="scan")],
                       [tensor("lens", I64, [1]),
                        tensor("init", F, [1, 2]), tensor("xs", F, [1, 3, 2])],
                       [tensor("last", F, [1, 2]), tensor("all", F, [1, 3, 2])], opset=8,
                       ir_version=3)
    model, coverage = from_onnx(proto)
    assert coverage.opaque == {"onnx::Scan": 1}
    with pytest.raises(ExportError) as exc:
        to_onnx(model, opset=18)
    assert "Scan" in _one_line(exc) and "opset 8" in str(exc.value)


def test_failed_export_leaves_no_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "out.onnx"
    with pytest.raises(ExportError):
        export_onnx(_graph_model(shape_only=True), target)
    assert list(tmp_path.iterdir()) == []
    export_onnx(_graph_model(), target)
    before = target.read_bytes()
    with pytest.raises(ExportError):
        export_onnx(_graph_model(shape_only=True), target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


def test_export_into_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(IrbridgeError) as exc:   # the shared output check (irbridge.atomic)
        export_onnx(_graph_model(), tmp_path / "no" / "such" / "m.onnx")
    assert "does not exist" in _one_line(exc)


def test_int_inputs_have_no_float_only_surprises() -> None:
    proto = onnx_model([helper.make_node("Add", ["x", "one"], ["y"])], [tensor("x", I64, [2])],
                       [tensor("y", I64, [2])], {"one": np.array(1, np.int64)})
    model, _ = from_onnx(proto)
    assert to_onnx(model).graph.node[-1].op_type == "Add"
