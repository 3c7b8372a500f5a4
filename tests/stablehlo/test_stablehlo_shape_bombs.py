"""StableHLO programs whose declared shapes are huge must not make the importer allocate
what they declare: a dynamic_update_slice into a tensor<3000000000x2xf32> made a 24 GB
window mask (killed), a gather with batching dims over 3e9 rows spent 23 s building index
ranges. Arrays a handler makes up from declared dims are constants only up to
`_import_ops.SYNTHESIS_LIMIT` elements, nodes the graph computes past it; the node path is
checked here against the StableHLO reference interpreter with the limit at 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile_cli import MEMORY_CAP

from irbridge.converters.stablehlo import _import_ops, evaluate, from_mlir
from irbridge.executor import run_model

BIG = 3_000_000_000
"""Rows of the declared tensors: 3e9 float32 rows are 12 GB (the int64 index range 24 GB)."""

UPDATE_SLICE = """
func.func @main(%x: tensor<{n}x2xf32>, %u: tensor<2x1xf32>) -> tensor<{n}x2xf32> {{
  %c = stablehlo.constant dense<1> : tensor<i32>
  %y = stablehlo.dynamic_update_slice %x, %u, %c, %c
       : (tensor<{n}x2xf32>, tensor<2x1xf32>, tensor<i32>, tensor<i32>) -> tensor<{n}x2xf32>
  return %y : tensor<{n}x2xf32>
}}
"""

BATCHED_GATHER = """
func.func @main(%x: tensor<{n}x3x4xf32>, %i: tensor<{n}x1xi32>) -> tensor<{n}x4xf32> {{
  %g = "stablehlo.gather"(%x, %i) {{dimension_numbers = #stablehlo.gather<offset_dims = [1],
       collapsed_slice_dims = [1], operand_batching_dims = [0],
       start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 1>,
       slice_sizes = array<i64: 1, 1, 4>, indices_are_sorted = false}}
       : (tensor<{n}x3x4xf32>, tensor<{n}x1xi32>) -> tensor<{n}x4xf32>
  return %g : tensor<{n}x4xf32>
}}
"""

SCATTER = """
func.func @main(%x: tensor<4x{n}xf32>, %i: tensor<2x1xi32>, %u: tensor<2x{n}xf32>)
    -> tensor<4x{n}xf32> {{
  %s = "stablehlo.scatter"(%x, %i, %u) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %t = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %t : tensor<f32>
  }}) {{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1],
       inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>,
       indices_are_sorted = false, unique_indices = false}}
       : (tensor<4x{n}xf32>, tensor<2x1xi32>, tensor<2x{n}xf32>) -> tensor<4x{n}xf32>
  return %s : tensor<4x{n}xf32>
}}
"""

PROGRAMS = {"update_slice": UPDATE_SLICE, "batched_gather": BATCHED_GATHER, "scatter": SCATTER}

_CHILD = """
import json, sys
from irbridge.analysis import analyze, resolve_targets
from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import import_stablehlo, to_mlir_text
done = {}
for path in sys.argv[1:]:
    model = import_stablehlo(path)
    analyze(model, resolve_targets("h100-sxm"))
    to_onnx(model)
    to_mlir_text(model)
    done[path] = sorted({n.op for n in model.graphs[0].nodes})
print(json.dumps(done))
"""


def test_programs_declaring_huge_tensors_stay_small(tmp_path: Path) -> None:
    """Import, analysis and both exports in one child under a 2 GiB address-space cap."""
    paths = []
    for name, text in PROGRAMS.items():
        path = tmp_path / f"{name}.mlir"
        path.write_text(text.format(n=BIG))
        paths.append(str(path))
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP}))"
    proc = subprocess.run([sys.executable, "-c", f"{limit}\n{_CHILD}", *paths],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "range" in ops[paths[0]] and "where" in ops[paths[0]]   # the window, as nodes
    assert "range" in ops[paths[1]]


def _inputs(name: str, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "update_slice":
        return [rng.standard_normal((n, 2)).astype(np.float32),
                rng.standard_normal((2, 1)).astype(np.float32)]
    if name == "batched_gather":   # 5 starts past the end: clamped as gather does
        return [rng.standard_normal((n, 3, 4)).astype(np.float32),
                rng.integers(0, 5, (n, 1)).astype(np.int32)]
    # indices 1 (inside) and 7 (out of range: StableHLO skips that update)
    return [rng.standard_normal((4, n)).astype(np.float32), np.array([[1], [7]], np.int32),
            rng.standard_normal((2, n)).astype(np.float32)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_node_path_agrees_with_the_interpreter(name: str, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    """The same programs at n = 5, imported with the made-up arrays as constants and (limit
    0) as nodes: both equal StableHLO's reference interpreter exactly (gather, scatter-add
    of one update per element and select move or add values once: no rounding freedom)."""
    text = PROGRAMS[name].format(n=5)
    inputs = _inputs(name, 5)
    want = evaluate(text, inputs)[0]
    for limit in (_import_ops.SYNTHESIS_LIMIT, 0):
        monkeypatch.setattr(_import_ops, "SYNTHESIS_LIMIT", limit)
        model = from_mlir(text)
        ops = {n.op for n in model.graphs[0].nodes}
        if limit == 0:
            assert ops & {"range", "full"}, ops   # the node path was taken
        got = run_model(model, inputs)[0]
        np.testing.assert_array_equal(got, want)
