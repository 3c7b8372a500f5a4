"""Usage errors (an unknown option or command, a value that does not parse, a missing
argument or option value) are one `error:` line naming the option and the command's
--help, exit 2, like every other error; typer and click would print a usage block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

IRBRIDGE = str(Path(sys.executable).parent / "irbridge")


@pytest.mark.parametrize("args, needles", [
    (["analyze", "resnet18", "--top", "abc"], ["--top", "irbridge analyze --help"]),
    (["analyze", "resnet18", "--bogus"], ["No such option: --bogus", "analyze --help"]),
    (["analyze"], ["Missing argument", "analyze --help"]),
    (["analyze", "resnet18", "--fusion", "magic"], ["--fusion", "magic"]),
    (["export", "resnet18", "-o", "x.onnx"], ["Missing option '--to'", "export --help"]),
    (["export", "resnet18", "--to", "onnx", "-o", "x.onnx", "--opset"], ["--opset"]),
    (["convert", "resnet18", "--batch", "1e3"], ["--batch"]),
    (["simulate", "scalesim", "--nope", "d"], ["--nope", "simulate scalesim --help"]),
    (["--bogus"], ["No such option: --bogus", "'irbridge --help'"]),
    (["nosuchcommand"], ["No such command 'nosuchcommand'"]),
])
def test_usage_errors_are_one_line(args: list[str], needles: list[str]) -> None:
    result = subprocess.run([IRBRIDGE, *args], capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("args", [[], ["simulate"]])
def test_a_group_without_a_command_still_prints_its_help(args: list[str]) -> None:
    result = subprocess.run([IRBRIDGE, *args], capture_output=True, text=True, timeout=120)
    assert "Usage: irbridge" in result.stdout + result.stderr
    assert "Commands:" in result.stdout + result.stderr


def test_debug_keeps_the_framework_usage_block() -> None:
    result = subprocess.run([IRBRIDGE, "--debug", "analyze", "resnet18", "--top", "abc"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Usage: irbridge analyze" in result.stderr
