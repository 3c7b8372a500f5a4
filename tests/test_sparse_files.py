"""A file that claims gigabytes it does not hold (a sparse file: `truncate -s 3G m.onnx`
costs nothing to make) is refused in one line, from its size or its first bytes, before
it is read whole; MLIR text that holds NUL bytes is refused before it is decoded and
scanned. Each run is a child process under a time limit and a 2 GiB address-space cap
(tests/hostile_cli.py): reading such a file whole would break the cap or the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_cli import assert_one_line_error, run_cli


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


@pytest.mark.parametrize("name, size, head, message", [
    ("m.onnx", 3 << 30, b"", "3,221,225,472 bytes, over protobuf's 2 GiB message limit, so "
                             "not an ONNX model"),
    ("m.irb", 3 << 30, b"", "not an irbridge file (missing .irb magic bytes)"),
    ("m.irb", 3 << 30, b"\x89IRB\r\n\x1a\n", "3,221,225,472 bytes, over protobuf's 2 GiB "
                                            "message limit; not a file irbridge writes"),
    ("m.irbt", 3 << 30, b"", "not an irbridge file (missing .irb magic bytes)"),
    ("m.mlir", 256 << 20, b"module {\n", "neither MLIR text (it holds NUL bytes) nor MLIR "
                                         "bytecode"),
])
def test_a_sparse_file_is_refused_before_it_is_read(tmp_path: Path, name: str, size: int,
                                                    head: bytes, message: str) -> None:
    path = _sparse(tmp_path / name, size, head)
    outcome = run_cli("info", path, cwd=tmp_path, timeout=60)
    assert_one_line_error(outcome, f"{path}: {message}")
