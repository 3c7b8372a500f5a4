"""Binding an ONNX file's symbolic input dims at import (`import_onnx(path, dims=...)`,
CLI `--bind NAME=SIZE` on convert, export and analyze): the dims are set before ONNX shape
inference runs, so shapes computed from them (a reshape whose target is built with Shape,
Gather and Concat, as torch.onnx writes for a dynamic batch) come out static, and the model
exports where static shapes are required (StableHLO, Chakra). Checked against onnxruntime
on the original file and the StableHLO reference interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.onnx import from_onnx, import_onnx
from irbridge.converters.stablehlo import to_mlir_text
from irbridge.converters.stablehlo.evaluate import evaluate
from irbridge.errors import IrbridgeError
from irbridge.executor import run_model

runner = CliRunner()


def _dynamic_model() -> onnx.ModelProto:
    """x: f32[batch, seq, 8] -> matmul (8 -> 8) -> reshape to [batch, seq, -1, 4], the
    target's leading dims taken from Shape at run time -> transpose -> relu. ONNX shape
    inference cannot size the -1 of a symbolic shape: the reshape's output has an unknown
    dim unless batch and seq are bound first."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), "w")
    heads = numpy_helper.from_array(np.array([-1, 4], np.int64), "heads")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Shape", ["h"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["lead"]),
        helper.make_node("Concat", ["lead", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["h", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    inits = [w, heads, numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "two")]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "seq", 4])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@pytest.fixture
def dynamic_file(tmp_path: Path) -> Path:
    path = tmp_path / "dyn.onnx"
    onnx.save(_dynamic_model(), path)
    return path


def _types(model: object) -> dict[str, str]:
    return {v.name: str(v.type) for _, n in model.all_nodes()  # type: ignore[attr-defined]
            for v in n.outputs}


def test_unbound_shapes_stay_unknown_and_bound_ones_are_static(dynamic_file: Path) -> None:
    free = import_onnx(dynamic_file)
    assert "?" in _types(free)["r"]
    model = import_onnx(dynamic_file, dims={"batch": 3, "seq": 5})
    assert _types(model)["r"] == "f32[3,5,2,4]"
    assert _types(model)["y"] == "f32[3,2,5,4]"
    assert all(v.type is not None and v.type.is_static for _, n in model.all_nodes()
               for v in n.outputs)
    # the numbers: irbridge's executor and the StableHLO export (reference interpreter)
    # against onnxruntime running the original dynamic file on a 3x5 input
    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    expected = ort.InferenceSession(str(dynamic_file)).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_model(model, [x])[0], expected, rtol=1e-6, atol=1e-6)
    got = evaluate(to_mlir_text(model), [x])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)  # float32 matmul of 8


def test_binding_leaves_the_callers_proto_as_it_was() -> None:
    proto = _dynamic_model()
    before = proto.SerializeToString()
    model, _ = from_onnx(proto, dims={"batch": 2})
    assert proto.SerializeToString() == before
    assert str(model.graph.inputs[0].type).startswith("f32[2,")


@pytest.mark.parametrize(("dims", "needle"), [
    ({"bogus": 2}, "cannot bind 'bogus': no graph input dim is named so (its symbolic "
                   "input dims: batch, seq)"),
    ({"batch": 0}, "cannot bind 'batch' to 0: a size must be an integer of at least 1"),
])
def test_bad_bindings_are_one_line_errors(dynamic_file: Path, dims: dict[str, int],
                                          needle: str) -> None:
    with pytest.raises(IrbridgeError) as info:
        import_onnx(dynamic_file, dims=dims)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_cli_export_convert_and_analyze_bind(dynamic_file: Path, tmp_path: Path) -> None:
    mlir = tmp_path / "dyn.mlir"
    refused = runner.invoke(app, ["export", str(dynamic_file), "--to", "stablehlo", "-o",
                                  str(mlir)])
    assert refused.exit_code == 2 and "needs static shapes" in refused.stderr
    assert not mlir.exists()
    done = runner.invoke(app, ["export", str(dynamic_file), "--to", "stablehlo", "-o",
                               str(mlir), "--bind", "batch=3", "--bind", "seq=5"])
    assert done.exit_code == 0, done.stderr
    assert "tensor<3x5x8xf32>" in mlir.read_text()
    irb = tmp_path / "dyn.irb"
    converted = runner.invoke(app, ["convert", str(dynamic_file), "-o", str(irb),
                                    "--bind", "batch=1,seq=7"])
    assert converted.exit_code == 0, converted.stderr
    assert "x: f32[1,7,8]" in converted.stdout
    unbound = runner.invoke(app, ["analyze", str(dynamic_file), "--bind", "batch=3",
                                  "--bind", "seq=5"])
    # bound after import (an IR file) the reshape's size is data-dependent; bound at
    # import (the ONNX file) it is not
    assert unbound.exit_code == 0, unbound.stderr
    assert "data-dependent" not in unbound.stdout + unbound.stderr
    bad = runner.invoke(app, ["export", str(dynamic_file), "--to", "onnx", "-o",
                              str(tmp_path / "x.onnx"), "--bind", "seq"])
    assert bad.exit_code == 2 and "--bind 'seq': expected NAME=SIZE" in bad.stderr


def test_cli_bind_needs_a_model_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["export", "resnet18", "--to", "onnx", "-o",
                                 str(tmp_path / "r.onnx"), "--bind", "batch=1"])
    assert result.exit_code == 2
    assert "--bind applies to model files" in result.stderr
    assert not (tmp_path / "r.onnx").exists()


def test_cli_compare_binds_both_files(dynamic_file: Path) -> None:
    unbound = runner.invoke(app, ["compare", str(dynamic_file), "--format", "json"])
    assert unbound.exit_code == 1 and "numbers not compared" in unbound.stdout
    bound = runner.invoke(app, ["compare", str(dynamic_file), "--format", "json",
                                "--bind", "batch=2,seq=3"])
    assert bound.exit_code == 0, bound.stdout + bound.stderr
    assert '"differences": []' in bound.stdout
