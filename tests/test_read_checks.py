"""An `.irb` from anywhere is checked structurally before any command builds on it: a
file whose graph the validator calls invalid (a type its op cannot produce, a duplicate
node id) is refused in one line with exit 2 by every command that reads it, instead of
reaching a writer or an analysis that assumes a valid graph (fuzzing found IndexErrors
in the Timeloop / SCALE-Sim layer extraction and internal errors in the StableHLO
emitter this way)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from irbridge import serde
from irbridge.cli.main import app
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import Model, TensorType

sys.path.insert(0, str(Path(__file__).resolve().parent / "outputs"))
from ir_models import cnn


def _wrong_type(model: Model) -> None:
    conv = model.graphs[0].nodes[0]
    conv.outputs[0].type = TensorType(DType.FLOAT32, (1,))   # conv cannot give [1]


def _duplicate_id(model: Model) -> None:
    nodes = model.graphs[0].nodes
    nodes[1].id = nodes[0].id


COMMANDS = [["analyze"], ["export", "--to", "timeloop"], ["export", "--to", "scalesim"],
            ["export", "--to", "stablehlo"], ["export", "--to", "onnx"],
            ["export", "--to", "chakra"], ["export", "--to", "dot"]]


@pytest.mark.parametrize("corrupt", [_wrong_type, _duplicate_id])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
def test_invalid_irb_is_refused_in_one_line(tmp_path: Path, command: list[str],
                                            corrupt: Callable[[Model], None]) -> None:
    model = cnn()
    corrupt(model)
    path = tmp_path / "bad.irb"
    serde.save(model, path)
    out = tmp_path / "out"
    args = [command[0], str(path), *command[1:]]
    if command[0] == "export":
        args += ["-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "node #" in lines[0]
    assert not out.exists()


def test_a_dim_past_int64_is_refused_on_write(tmp_path: Path) -> None:
    """Corrupt inputs can yield such a type (fuzz: an ONNX Flatten of a huge shape); the
    writer refuses it in one line naming the value instead of protobuf's ValueError."""
    model = cnn()
    model.graphs[0].inputs[0].type = TensorType(DType.FLOAT32, (1, 2**67))
    path = tmp_path / "big.irb"
    with pytest.raises(IrbridgeError) as err:
        serde.save(model, path)
    assert "'x'" in str(err.value) and "\n" not in str(err.value)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_compare_of_an_unreadable_file_is_one_line_exit_2(tmp_path: Path) -> None:
    good = tmp_path / "good.irb"
    serde.save(cnn(), good)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a protobuf at all")
    result = CliRunner().invoke(app, ["compare", str(good), str(broken)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "broken.onnx" in lines[0]
