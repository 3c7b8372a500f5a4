"""Run the real irbridge CLI on a hostile file in a child process, under a wall-clock
timeout and an address-space cap, so that a regression (a segfault, a hang, a memory
bomb) fails the test instead of taking pytest down with it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MEMORY_CAP = 2 << 30
"""Address-space cap of the child: irbridge with torch-mlir and onnx loaded needs well under
this, every bomb here asks for more."""


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, cwd: Path, timeout: float = 120,
            memory_cap: int = MEMORY_CAP, env: dict[str, str] | None = None) -> Outcome:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))

    command = [sys.executable, "-c", "from irbridge.cli.main import app; app()",
               *(str(a) for a in args)]
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit, env={**os.environ, "COLUMNS": "200", **(env or {})})
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_error(outcome: Outcome, *needles: str) -> str:
    """Exit 2 and exactly one line on stderr, `error: ...`, holding every needle."""
    assert outcome.returncode == 2, (outcome.returncode, outcome.stderr[-2000:])
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr[-2000:]
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in line, line
    for needle in needles:
        assert needle in line, line
    return line


def make_special(path: Path, kind: str) -> bool:
    """Make `path` a FIFO (opening it for reading blocks), a link to /dev/zero (endless) or
    a folder, by `kind`; False, touching nothing, for any other kind."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    elif kind == "folder":
        path.mkdir()
    else:
        return False
    return True
