"""`verify_onnx` / `export_verified` / `irbridge export --to onnx --verify`: the written file
runs in the real onnxruntime against the IR's reference executor; and opaque nodes of
non-ONNX domains are refused unless custom-domain nodes are asked for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnxtools import F, onnx_model, tensor
from typer.testing import CliRunner

from irbridge import serde
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.converters.onnx import export_onnx, to_onnx
from irbridge.converters.onnx.verify import OnnxVerifyError, export_verified, verify_onnx
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.ir import Graph, Model, Tensor, TensorType

F32 = DType.FLOAT32


def _mlp() -> Model:
    """x[2,8] -> linear(8->4) -> tanh, with random weights."""
    rng = np.random.default_rng(1)
    graph = Graph("mlp")
    model = Model(graphs=[graph], name="mlp")
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (2, 8)))
    w = b.parameter(Tensor.from_array("w", rng.standard_normal((4, 8)).astype(np.float32)))
    bias = b.parameter(Tensor.from_array("b", rng.standard_normal(4).astype(np.float32)))
    graph.set_outputs([b.op("tanh", [b.op("linear", [x, w, bias])])])
    return model


def _opaque() -> Model:
    """relu, then an opaque stablehlo node (what a PyTorch capture leaves for an op it
    cannot lower), then neg."""
    graph = Graph("g")
    b = GraphBuilder(graph)
    x = graph.add_input("x", TensorType(F32, (2, 3)))
    y = b.op("relu", [x])
    node = graph.add_node("dynamic_slice", [y], ["z"], {"sizes": (1, 3)},
                          output_types=[TensorType(F32, (1, 3))], domain="stablehlo")
    graph.set_outputs([b.op("neg", [node.outputs[0]])])
    return Model(graphs=[graph], name="opaque")


def test_verify_passes_on_a_correct_file_and_reports_every_output(tmp_path: Path) -> None:
    model = _mlp()
    path = export_onnx(model, tmp_path / "mlp.onnx")
    report = verify_onnx(model, path)
    assert report.passed, report.summary()
    assert len(report.outputs) == 1 and report.outputs[0].shape == (2, 4)
    # float32 default tolerance (irbridge/tolerance.py): atol 1e-5, rtol 1e-4 of the scale
    assert (report.outputs[0].atol, report.outputs[0].rtol) == (1e-5, 1e-4)
    assert report.max_abs_error < 1e-5
    # the caller's inputs (by name or position) and another seed run too
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    assert verify_onnx(model, path, {"x": x}).passed
    assert verify_onnx(model, path, [x], rtol=1e-3, atol=1e-4).outputs[0].rtol == 1e-3
    assert verify_onnx(model, path, seed=7).passed
    assert verify_onnx(model.graph, path).passed  # a graph, its weights as parameters


def test_verify_fails_on_a_file_that_computes_something_else(tmp_path: Path) -> None:
    """A file that does not compute the IR (sigmoid where the IR says tanh) fails, with
    the max errors of the output."""
    graph = Graph("g")
    b = GraphBuilder(graph)
    x = graph.add_input("x", TensorType(F32, (2, 3)))
    graph.set_outputs([b.op("tanh", [x])])
    model = Model(graphs=[graph])
    wrong = onnx_model([helper.make_node("Sigmoid", ["x"], ["y"])], [tensor("x", F, [2, 3])],
                       [tensor("y", F, [2, 3])])
    report = verify_onnx(model, wrong)
    assert not report.passed and not report.error
    check = report.outputs[0]
    # tanh(x) - sigmoid(x) on standard-normal inputs: at least 0.1 apart somewhere
    assert check.max_abs_error > 0.1 and not check.passed
    assert "FAIL" in report.summary()


def _mlp_of(dtype: DType, *, seed: int = 1, out: DType | None = None) -> Model:
    """x[2,8] of `dtype` -> linear (no bias) -> tanh [-> cast to `out`]."""
    rng = np.random.default_rng(seed)
    graph = Graph("mlp")
    model = Model(graphs=[graph], name="mlp")
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(dtype, (2, 8)))
    w = b.parameter(Tensor.from_array("w", rng.standard_normal((4, 8)).astype(dtype.numpy)))
    y = b.op("tanh", [b.op("linear", [x, w])])
    graph.set_outputs([y if out is None else b.op("cast", [y], {"dtype": out})])
    return model


@pytest.mark.parametrize(("dtype", "out"), [
    (DType.BFLOAT16, None), (F32, DType.FLOAT8_E4M3FN), (F32, DType.FLOAT8_E5M2),
    (DType.BFLOAT16, DType.FLOAT8_E4M3FN)])
def test_verify_runs_types_onnxruntime_numpy_has_no_type_for(tmp_path: Path, dtype: DType,
                                                             out: DType | None) -> None:
    """bfloat16 and float8 inputs and outputs (what a bf16 LLM or a float8 model has):
    onnxruntime's `run` refuses them as numpy arrays ("No corresponding Numpy type"), so
    they go through OrtValues with their bits unchanged. The file is checked for real: the
    same file against the IR with other weights fails."""
    model = _mlp_of(dtype, out=out)
    path = export_onnx(model, tmp_path / "mlp.onnx")
    report = verify_onnx(model, path)
    assert report.passed and not report.error, report.summary()
    assert report.outputs[0].dtype == (out or dtype).short
    other = verify_onnx(_mlp_of(dtype, seed=2, out=out), path)
    assert not other.passed and not other.error, other.summary()
    assert other.outputs[0].max_abs_error > 0.05


def test_cli_export_verify_of_a_bfloat16_model(tmp_path: Path) -> None:
    source = tmp_path / "bf16.irb"
    serde.save(_mlp_of(DType.BFLOAT16), source)
    result = CliRunner().invoke(app, ["export", str(source), "--to", "onnx", "-o",
                                      str(tmp_path / "bf16.onnx"), "--verify"])
    assert result.exit_code == 0, result.output
    assert "verify: PASS" in result.output and (tmp_path / "bf16.onnx").is_file()


def test_verify_fails_on_a_dtype_change() -> None:
    graph = Graph("g")
    b = GraphBuilder(graph)
    x = graph.add_input("x", TensorType(DType.INT64, (3,)))
    graph.set_outputs([b.op("neg", [x])])
    wrong = onnx_model([helper.make_node("Neg", ["c"], ["y"]),
                        helper.make_node("Cast", ["x"], ["c"], to=onnx.TensorProto.INT32)],
                       [tensor("x", onnx.TensorProto.INT64, [3])],
                       [tensor("y", onnx.TensorProto.INT32, [3])])
    report = verify_onnx(Model(graphs=[graph]), wrong)
    assert not report.passed and "dtype int32 != IR int64" in report.outputs[0].note


def test_verify_says_why_onnxruntime_cannot_load_the_file(tmp_path: Path) -> None:
    model = _opaque()
    path = export_onnx(model, tmp_path / "custom.onnx", allow_custom_ops=True)
    report = verify_onnx(model, path)
    assert not report.passed
    assert report.error.startswith(f"onnxruntime cannot load {path}: ")
    assert "dynamic_slice" in report.error and "\n" not in report.error


def test_opaque_nodes_of_other_front_ends_are_refused(tmp_path: Path) -> None:
    model = _opaque()
    with pytest.raises(ExportError) as exc:
        export_onnx(model, tmp_path / "custom.onnx")
    text = str(exc.value)
    assert "\n" not in text
    assert "node #1 dynamic_slice" in text and "stablehlo::dynamic_slice" in text
    assert "--allow-custom-ops" in text
    assert list(tmp_path.iterdir()) == []  # nothing written
    proto = to_onnx(model, allow_custom_ops=True)  # asked for: written as custom-domain node
    assert any(n.domain == "stablehlo" for n in proto.graph.node)


def test_export_verified_writes_only_a_file_that_matches(tmp_path: Path) -> None:
    target = tmp_path / "m.onnx"
    report = export_verified(_mlp(), target)
    assert report.passed and target.exists()
    target.write_bytes(b"previous")
    with pytest.raises(OnnxVerifyError) as exc:
        export_verified(_opaque(), target, allow_custom_ops=True)
    assert "not written" in str(exc.value) and not exc.value.report.passed
    assert target.read_bytes() == b"previous"  # the old file is left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no staging left


def _cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout + result.stderr


def test_cli_export_verify(tmp_path: Path) -> None:
    source = tmp_path / "mlp.irb"
    serde.save(_mlp(), source)
    out = tmp_path / "mlp.onnx"
    code, text = _cli("export", source, "--to", "onnx", "-o", out, "--verify")
    assert code == 0, text
    assert f"wrote {out}" in text and "verify: PASS: 1 outputs" in text
    assert onnx.load(str(out)).graph.output[0].name


def test_cli_export_verify_failure_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "opaque.irb"
    serde.save(_opaque(), source)
    out = tmp_path / "opaque.onnx"
    code, text = _cli("export", source, "--to", "onnx", "-o", out, "--verify",
                      "--allow-custom-ops")
    assert code == 1, text
    assert "verify: FAIL: onnxruntime cannot load" in text
    assert "not written" in text and not out.exists()


def test_cli_export_verify_of_symbolic_inputs_is_a_usage_error(tmp_path: Path) -> None:
    """An ONNX file with dynamic axes: --verify cannot make inputs of size `batch`, so it
    refuses before writing (exit 2, naming the dims to bind) instead of writing nothing
    with "verify: FAIL" as if the numbers disagreed; with --bind it runs."""
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])]
    source = tmp_path / "dyn.onnx"
    onnx.save(onnx_model(nodes, [tensor("x", F, ["batch", "seq", 4])],
                         [tensor("y", F, ["batch", "seq", 4])], {}), str(source))
    out = tmp_path / "dyn.re.onnx"
    code, text = _cli("export", source, "--to", "onnx", "-o", out, "--verify")
    assert code == 2, text
    assert text.strip().splitlines() == [
        "error: --verify needs static input shapes: input 'x' is f32[batch,seq,4] (hint: "
        "--bind batch=SIZE --bind seq=SIZE)"], text
    assert not out.exists()
    code, text = _cli("export", source, "--to", "onnx", "-o", out, "--verify",
                      "--bind", "batch=2", "--bind", "seq=3")
    assert code == 0 and "verify: PASS" in text and out.exists(), text


def test_cli_refuses_opaque_nodes_with_one_line(tmp_path: Path) -> None:
    source = tmp_path / "opaque.irb"
    serde.save(_opaque(), source)
    out = tmp_path / "opaque.onnx"
    code, text = _cli("export", source, "--to", "onnx", "-o", out)
    assert code == 2, text
    assert "stablehlo::dynamic_slice" in text and "Traceback" not in text
    assert not out.exists() and "wrote" not in text
    code, text = _cli("export", source, "--to", "onnx", "-o", out, "--allow-custom-ops")
    assert code == 0 and out.exists(), text


@pytest.mark.parametrize("option", ["--verify", "--allow-custom-ops"])
def test_cli_onnx_options_apply_to_onnx_only(tmp_path: Path, option: str) -> None:
    source = tmp_path / "mlp.irb"
    serde.save(_mlp(), source)
    code, text = _cli("export", source, "--to", "stablehlo", "-o", tmp_path / "m.mlir", option)
    assert code == 2 and f"{option} applies to --to onnx" in text
