"""Start-up: the commands that only read an .irb import no heavy library.

Each command runs in a fresh interpreter (a subprocess: the test process itself has
torch and onnx loaded) through the real `irbridge` entry point, and the test reads the
modules that interpreter had imported when the command finished. tools/bench_startup.py
measures the CPU time this saves against `python -c "import onnx"`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from irbridge import serde
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Tensor, TensorType

# never for a command that only reads a file
HEAVY = ("torch", "scipy", "onnx", "onnxruntime", "transformers", "jax", "torch_mlir",
         "tensorflow", "jaxlib", "ultralytics", "torchvision")
# not for `info` and `validate` either: pydantic (typer's coercion) and rich cost ~0.3 s
LIGHT_ONLY = ("pydantic", "rich")

RUNNER = """
import json, sys
sys.argv = ["irbridge", *json.loads(sys.argv[1])]
from irbridge.cli.main import main
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code or 0
with open(OUT, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    import numpy as np

    model = Model(name="toy", source_format="test")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (4, 8)))
    w = b.parameter(Tensor.from_array("scale", np.ones((4, 8), np.float32)))
    h = b.op("mul", [x, w])
    h = b.op("gelu", [h])  # an op whose reference needs scipy: not loaded by reading
    graph.set_outputs([b.op("sigmoid", [h])])
    return serde.save(model, tmp_path / "toy.irb")


def _run(args: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    out = tmp_path / "modules.json"
    code = RUNNER.replace("OUT", repr(str(out)))
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert out.exists(), proc.stderr
    data = json.loads(out.read_text())
    return data["code"], set(data["modules"])


def _top(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("command", ["info", "validate", "show", "analyze"])
def test_read_only_commands_import_no_heavy_library(model_file: Path, tmp_path: Path,
                                                    command: str) -> None:
    code, modules = _run([command, str(model_file)], tmp_path)
    assert code == 0
    assert "irbridge.serde" in modules  # the command did read the file
    loaded = _top(modules)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    if command in ("info", "validate"):
        assert not loaded & set(LIGHT_ONLY), sorted(loaded & set(LIGHT_ONLY))


def test_heavy_imports_come_back_where_needed(model_file: Path, tmp_path: Path) -> None:
    """The same runner does see a heavy import when a command needs one (so the test above
    can fail): `export --to onnx` loads onnx."""
    code, modules = _run(["export", str(model_file), "--to", "onnx", "-o",
                          str(tmp_path / "toy.onnx")], tmp_path)
    assert code == 0 and "onnx" in _top(modules)


def test_ops_references_load_scipy_when_run() -> None:
    """erf, sigmoid, silu, gelu and log-sum-exp import scipy inside their references."""
    import math

    import numpy as np

    from irbridge.ops import registry
    from irbridge.ops.registry import RefContext

    x = np.array([-1.0, 0.0, 2.0], np.float32)

    def run(op: str, **attrs: Any) -> np.ndarray:
        schema = registry.get(op)
        out = TensorType(DType.FLOAT32, (1,) if op == "reduce_log_sum_exp" else (3,))
        resolved = schema.resolve_attrs(attrs, op)
        return schema.reference([x], resolved, RefContext([out], run_graph=None))[0]  # type: ignore[arg-type]

    # expected values from the math module, not from the code under test (float32 output)
    xs = (-1.0, 0.0, 2.0)
    assert np.allclose(run("erf"), [math.erf(v) for v in xs], rtol=1e-6)
    assert np.allclose(run("gelu"), [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xs],
                       rtol=1e-6, atol=1e-7)
    sig = [1 / (1 + math.exp(-v)) for v in xs]
    assert np.allclose(run("sigmoid"), sig, rtol=1e-6)
    assert np.allclose(run("silu"), [v * s for v, s in zip(xs, sig, strict=True)], rtol=1e-6, atol=1e-7)
    assert np.allclose(run("reduce_log_sum_exp", axes=[0]),
                       [math.log(sum(math.exp(v) for v in xs))], rtol=1e-6)


def test_lean_parameters_keep_typer_behaviour(model_file: Path) -> None:
    """Values the pydantic-free coercion does not handle still get typer's checks."""
    runner = CliRunner()
    result = runner.invoke(app, ["show", str(model_file), "--graph", "x"])
    assert result.exit_code == 2 and "graph" in result.output
    result = runner.invoke(app, ["show", str(model_file), "--max", "1"])
    assert result.exit_code == 0 and "2 more nodes" in result.stdout
    result = runner.invoke(app, ["info", str(model_file)])
    assert result.exit_code == 0 and "3 (0 opaque)" in result.stdout
