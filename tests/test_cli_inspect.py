"""`irbridge --version`, `info`, `show`, `validate`, and the error contract of the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from irbridge import __version__, serde
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType

runner = CliRunner()


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    import numpy as np

    model = Model(name="toy", source_format="test")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (4, 8)))
    w = b.parameter(Tensor.from_array("scale", np.ones((4, 8), np.float32)))
    h = b.op("mul", [x, w], provenance=Provenance(module_path="block.scale", source_op="mul"))
    h = b.op("relu", [h], provenance=Provenance(module_path="block.act"))
    graph.set_outputs([b.op("tanh", [h], provenance=Provenance(module_path="head"))])
    return serde.save(model, tmp_path / "toy.irb")


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"irbridge {__version__}"


def test_info_prints_counts_histogram_and_parameters(model_file: Path) -> None:
    result = runner.invoke(app, ["info", str(model_file)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "nodes" in out and "3 (0 opaque)" in out
    assert "32 (128 B, stored)" in out  # 4x8 float32 parameter
    assert "x: f32[4,8]" in out and "relu" in out and "tanh" in out


def test_show_range_around_and_max(model_file: Path) -> None:
    result = runner.invoke(app, ["show", str(model_file), "--range", "1:2"])
    assert result.exit_code == 0, result.output
    assert "block.act" in result.stdout and "block.scale" not in result.stdout
    result = runner.invoke(app, ["show", str(model_file), "--around", "block.act", "--radius", "1"])
    assert all(p in result.stdout for p in ("block.scale", "block.act", "head"))
    result = runner.invoke(app, ["show", str(model_file), "--max", "1"])
    assert "2 more nodes" in result.stdout


def test_validate_clean_and_broken(model_file: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(model_file)])
    assert result.exit_code == 0 and "0 errors, 0 warnings" in result.stdout
    broken = serde.load(model_file)
    broken.graph.nodes[1].outputs[0].type = TensorType(DType.FLOAT32, (8, 4))
    path = serde.save(broken, tmp_path / "broken.irb")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert "output 'relu' is f32[8,4] but relu infers f32[4,8]" in result.stdout
    broken.graph.nodes.reverse()  # out of order: the file cannot even be read
    path = serde.save(broken, tmp_path / "unordered.irb")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "reads 'relu', which is not defined before it" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["info", "missing.irb"], "missing.irb: no such file"),
    (["show", "{file}", "--graph", "3"], "no graph 3; the model has 1"),
    (["show", "{file}", "--around", "nowhere"], "no node with id, output or module path"),
    (["show", "{file}", "--range", "a:b"], "expected START:END"),
])
def test_errors_are_one_line_with_exit_code_2(model_file: Path, args: list[str],
                                              message: str) -> None:
    result = runner.invoke(app, [a.replace("{file}", str(model_file)) for a in args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_corrupt_file_error_and_debug_traceback(model_file: Path) -> None:
    model_file.write_bytes(model_file.read_bytes()[:30])
    result = runner.invoke(app, ["info", str(model_file)])
    assert result.exit_code == 2 and "truncated or corrupt" in result.stderr
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["--debug", "info", str(model_file)])
    assert result.exception is not None and type(result.exception).__name__ == "FileFormatError"


def test_info_show_and_validate_read_onnx_and_stablehlo_files(model_file: Path,
                                                              tmp_path: Path) -> None:
    """The three commands take the other model formats as `analyze` does: imported first
    (the IR's counts, as `convert` would print them), and a wrong file is one line."""
    onnx_file = tmp_path / "toy.onnx"
    mlir_file = tmp_path / "toy.mlir"
    for path, fmt in ((onnx_file, "onnx"), (mlir_file, "stablehlo")):
        done = runner.invoke(app, ["export", str(model_file), "--to", fmt, "-o", str(path)])
        assert done.exit_code == 0, done.stderr
        info = runner.invoke(app, ["info", str(path)])
        assert info.exit_code == 0, info.stderr
        assert f"source           {fmt}" in info.stdout
        assert "inputs           x: f32[4,8]" in info.stdout
        show = runner.invoke(app, ["show", str(path)])
        assert show.exit_code == 0 and "tanh" in show.stdout
        check = runner.invoke(app, ["validate", str(path)])
        assert check.exit_code == 0 and "0 errors" in check.stdout
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    result = runner.invoke(app, ["info", str(broken)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
