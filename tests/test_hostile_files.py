"""Hostile or odd-but-valid files found by hunting beyond the mutation fuzz (issue 12's
contract: exit 0 with correct output, or exit 2 with one `error:` line; nothing written
on failure). Each test names what broke before its fix. Format-specific importer cases
live in tests/onnx/test_onnx_hostile.py and tests/stablehlo/test_stablehlo_hostile.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_cli import run_cli

from irbridge import serde
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, TensorType


def _relu_of_rank(path: Path, rank: int) -> Path:
    model = Model(name="rank")
    graph = Graph("main")
    model.graphs.append(graph)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1,) * rank))
    graph.set_outputs([GraphBuilder(graph, model).op("relu", [x])])
    serde.save(model, path)
    return path


@pytest.mark.parametrize(("rank", "ran"), [(64, True), (65, False), (300, False)])
def test_compare_of_inputs_past_numpys_rank_limit_reports_why(tmp_path: Path, rank: int,
                                                              ran: bool) -> None:
    # found by hunting: an input of 300 dims (valid in ONNX and the IR) made compare's
    # example inputs raise numpy's ValueError, an internal error
    path = _relu_of_rank(tmp_path / "r.irb", rank)
    result = run_cli("compare", path, path, "--format", "json", cwd=tmp_path)
    # exit 1: compare's documented "found differences" (numbers not compared is one)
    assert result.returncode == (0 if ran else 1), result.stderr[-2000:]
    assert not result.stderr.strip()
    numerics = json.loads(result.stdout)["numerics"]
    assert numerics["ran"] is ran
    if not ran:
        assert numerics["reason"] == (f"input 'x' has {rank} dims; numpy arrays hold at most "
                                      "64, cannot make an example for it")
