"""The central guard of irbridge/cli/main.py: every exception becomes one escaped line,
exit 2; OS errors name the path and errno; `--debug` keeps the traceback."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from outputs.ir_models import cnn
from typer.testing import CliRunner

from irbridge import serde
from irbridge.cli.main import INTERNAL_ERROR, app, error_line, one_line
from irbridge.errors import FileFormatError

runner = CliRunner()


def test_file_strings_with_newlines_and_escapes_stay_on_one_line(tmp_path: Path) -> None:
    hostile = tmp_path / "a\nerror: forged\x1b[2J.irb"
    result = runner.invoke(app, ["info", str(hostile)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "\x1b" not in result.stderr
    assert "forged" in result.stderr and "no such file" in result.stderr


def test_os_errors_name_the_path_and_the_errno(tmp_path: Path) -> None:
    model = serde.save(cnn(), tmp_path / "m.irb")
    # a folder that cannot exist under /proc: the write fails with ENOENT on the real fs
    result = runner.invoke(app, ["convert", str(model), "-o", "/proc/irbridge-no/x.irb"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "/proc/irbridge-no" in result.stderr and "Traceback" not in result.output
    line = error_line(OSError(errno.ENOSPC, "No space left on device", "/data/m.irb"))
    assert line == "/data/m.irb: No space left on device (ENOSPC)"
    line = error_line(OSError(errno.EROFS, "Read-only file system", "/ro/.m.irb.tmp"))
    assert line == "/ro/.m.irb.tmp: Read-only file system (EROFS)"


def test_memory_recursion_and_unexpected_errors_are_one_line() -> None:
    assert error_line(MemoryError()).startswith("out of memory")
    assert "nested too deeply" in error_line(RecursionError("maximum recursion depth"))
    line = error_line(KeyError("conv.w"))
    assert line.startswith(f"{INTERNAL_ERROR}: KeyError: 'conv.w'") and "--debug" in line
    assert error_line(FileFormatError("x.irb: truncated", hint="re-save it")) == \
        "x.irb: truncated (hint: re-save it)"
    assert one_line("a\r\nb\x07\u2028c") == "a\\r\\nb\\x07\\u2028c"
    # a right-to-left override in a name from a file would reverse the rest of the line
    assert one_line("node 'a\u202egnp.exe' \u2066x\u200b\U000e0001 é") == \
        "node 'a\\u202egnp.exe' \\u2066x\\u200b\\U000e0001 é"


def test_debug_keeps_the_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--debug", "info", str(tmp_path / "missing.irb")])
    assert isinstance(result.exception, FileFormatError)


@pytest.mark.parametrize("args", [["info", "--graph"], ["analyze", "x.irb", "--fusion", "odd"]])
def test_usage_errors_stay_clicks(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and INTERNAL_ERROR not in result.output


def _onnx_with_an_opaque_conv(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], dilations=[1])  # 1 value, 2 dims
    graph = helper.make_graph([conv], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_warnings_are_one_line_and_dropped_when_the_command_fails(tmp_path: Path) -> None:
    source = _onnx_with_an_opaque_conv(tmp_path / "m.onnx")
    ok = runner.invoke(app, ["convert", str(source), "-o", str(tmp_path / "m.irb")])
    assert ok.exit_code == 0, ok.output
    warned = [line for line in ok.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "kept as opaque" in warned[0]
    assert "importer.py" not in ok.stderr  # not Python's two-line warning format
    # the opaque conv leaves Timeloop nothing to map: the importer warned, then the error
    failed = runner.invoke(app, ["export", str(source), "--to", "timeloop", "-o", str(tmp_path / "tl")])
    assert failed.exit_code == 2 and failed.stderr.count("\n") == 1, failed.stderr


def test_memory_and_recursion_lines_name_the_input(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """MemoryError and RecursionError carry no path: the guard names the argument the
    command was given, also below a sub-command group (`simulate scalesim FOLDER`)."""
    model = serde.save(cnn(), tmp_path / "m.irb")
    folder = tmp_path / "ss"
    exported = runner.invoke(app, ["export", str(model), "--to", "scalesim", "-o", str(folder)])
    assert exported.exit_code == 0, exported.output
    (folder / "run.json").write_text("[" * 100_000 + "]" * 100_000)  # json recurses
    result = runner.invoke(app, ["simulate", "scalesim", str(folder)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr == f"error: {folder}: input nested too deeply (Python recursion " \
                            "limit reached)\n"

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError()

    monkeypatch.setattr(serde, "load", exhausted)  # the failure injected where files load
    result = runner.invoke(app, ["info", str(model)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {model}: out of memory")


def test_an_error_about_a_megabyte_name_keeps_its_start_and_end(tmp_path: Path) -> None:
    """A file may name a node in a megabyte: the error line keeps the file and the start
    of the name, the problem at its end, and says how long it was."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Thing", ["x"], ["y"], name="n" * 1_000_000, domain="com.x")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "long.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert len(result.stderr) < 2_100, len(result.stderr)
    assert result.stderr.startswith(f"error: {path}: node 'nnn")
    assert "characters) ...nnn" in result.stderr
    assert result.stderr.endswith("which the model does not import (unknown domain)\n")
