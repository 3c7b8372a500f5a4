"""An ONNX file with external data is a pair (`model.onnx` + its data file), and ONNX has no
checksum: the old export renamed `model.onnx.data` into place before `model.onnx`, so a
kill -9 between the two left the old model reading the new model's bytes, wrong numbers
without an error. Now the new data takes a fresh name when `<file>.data` exists, the model
rename is the single commit point (under the folder lock irbridge writers share), and old
data files go only after it. Real processes killed at each stage (atomic.KILL_HOOK); after
each, onnxruntime runs the file on disk and gets one of the two models' outputs exactly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from irbridge.atomic import KILL_HOOK

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from irbridge.builder import GraphBuilder
    from irbridge.converters.onnx import export_onnx
    from irbridge.dtypes import DType
    from irbridge.ir import Graph, Model, Tensor, TensorType

    value = float(sys.argv[2])
    model = Model(name="pair")
    graph = Graph("main")
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1, 64)))
    w = b.parameter(Tensor.from_array("w", np.full((64, 64), value, np.float32)))
    graph.set_outputs([b.op("matmul", [x, w])])
    export_onnx(model, sys.argv[1], external_data=True)
""")


def _write(path: Path, value: float, kill_at: str | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if k != KILL_HOOK}
    if kill_at:
        env[KILL_HOOK] = kill_at
    return subprocess.run([sys.executable, "-c", WRITER, str(path), str(value)], env=env,
                          timeout=300).returncode


def _run(path: Path) -> float:
    """The model on disk run by onnxruntime on ones: 64 x the weight value."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = session.run(None, {"x": np.ones((1, 64), np.float32)})[0]
    assert np.all(out == out.flat[0])
    return float(out.flat[0]) / 64


def _data_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".data"))


@pytest.mark.parametrize("kill_at", ["onnx-data-renamed", "onnx-model-renamed"])
def test_a_kill_at_each_stage_leaves_one_model_whole(tmp_path: Path, kill_at: str) -> None:
    path = tmp_path / "m.onnx"
    assert _write(path, 1.0) == 0
    assert _run(path) == 1.0 and _data_files(tmp_path) == ["m.onnx.data"]
    assert _write(path, 2.0, kill_at=kill_at) == -9   # SIGKILL, at that stage
    # before the commit the old model with its own data; after it the new one
    assert _run(path) == (1.0 if kill_at == "onnx-data-renamed" else 2.0)
    # the next export commits whole and removes what the killed one left
    assert _write(path, 3.0) == 0
    assert _run(path) == 3.0 and len(_data_files(tmp_path)) == 1


def test_repeated_exports_alternate_names_and_leave_one_data_file(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    for value in (1.0, 2.0, 3.0):
        assert _write(path, value) == 0
        assert _run(path) == value
        assert len(_data_files(tmp_path)) == 1


def test_two_writers_racing_leave_one_model_whole(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    assert _write(path, 1.0) == 0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(v)])
             for v in (5.0, 6.0)]
    codes = [p.wait(timeout=300) for p in procs]
    assert all(c in (0, 1) for c in codes), codes   # a loser may refuse, never tear
    assert _run(path) in (5.0, 6.0)
    assert len(_data_files(tmp_path)) == 1
