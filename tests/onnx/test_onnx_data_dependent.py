"""The data-dependent-size ops (irbridge/ops/datadep.py, non_zero) export to ONNX and
onnxruntime gives what numpy/torch give on the edge cases: empty inputs, NaNs (never equal
to each other in torch.unique_consecutive, so each starts a run), a 0-d non_zero, and a
mask that broadcasts. Expected values come from eager torch; all outputs are integers or
copies of input elements, compared exactly (NaNs in the same places)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from onnxtools import model_of, ort_run

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.dtypes import DType
from irbridge.executor import run_graph
from irbridge.ir import Graph, Model, TensorType


def _export(op: str, arrays: list[np.ndarray]) -> tuple[Model, list[str]]:
    graph = Graph("main")
    model = model_of(graph)
    inputs = [graph.add_input(f"x{i}", TensorType(DType.from_numpy(a.dtype), a.shape))
              for i, a in enumerate(arrays)]
    outs = GraphBuilder(graph, model).op_multi(op, inputs)
    graph.set_outputs(outs)
    return model, [v.name for v in inputs]


def _run(op: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's results, after checking that the reference executor's are the same."""
    model, names = _export(op, arrays)
    feeds = dict(zip(names, arrays, strict=True))
    got = ort_run(to_onnx(model), feeds)
    reference = run_graph(model.graphs[0], feeds)
    for g, r in zip(got, reference, strict=True):
        np.testing.assert_array_equal(g, r)
    return got


def _same(got: list[np.ndarray], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.numpy())


VALUES = [np.array([1.0, np.nan, np.nan, 2.0, 2.0, -0.0, 0.0], np.float32),
          np.zeros((0,), np.float32), np.array([[3, 3], [3, 1]], np.int64)]


@pytest.mark.parametrize("index", range(len(VALUES)))
def test_unique_consecutive(index: int) -> None:
    x = VALUES[index]
    want = torch.unique_consecutive(torch.from_numpy(x), return_inverse=True,
                                    return_counts=True)
    _same(_run("unique_consecutive", [x]), list(want))


@pytest.mark.parametrize("index", [0, 2])
def test_unique(index: int) -> None:
    x = VALUES[index][np.isfinite(VALUES[index])] if index == 0 else VALUES[index]
    want = torch.unique(torch.from_numpy(x), return_inverse=True, return_counts=True)
    _same(_run("unique", [x]), list(want))


CASES: list[tuple[str, list[np.ndarray], Callable[..., torch.Tensor]]] = [
    ("non_zero", [np.array(0.0, np.float32)], lambda x: torch.nonzero(x).T),
    ("non_zero", [np.array(2.0, np.float32)], lambda x: torch.nonzero(x).T),
    ("non_zero", [np.zeros((2, 0), np.float32)], lambda x: torch.nonzero(x).T),
    ("masked_select", [np.arange(6, dtype=np.float32).reshape(2, 3),
                       np.array([True, False, True])], torch.masked_select),
    ("masked_select", [np.array([5.0], np.float32), np.array([[True], [False], [True]])],
     torch.masked_select),
]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_selection(index: int) -> None:
    op, arrays, fn = CASES[index]
    _same(_run(op, arrays), [fn(*[torch.from_numpy(a) for a in arrays])])


def test_unique_reference_keeps_nans_apart() -> None:
    """torch.unique gives each NaN its own entry (last, after the numbers); so does the
    reference (onnxruntime's Unique is not asked about NaNs)."""
    x = VALUES[0]
    model, names = _export("unique", [x])
    got = run_graph(model.graphs[0], dict(zip(names, [x], strict=True)))
    want = torch.unique(torch.from_numpy(x), return_inverse=True, return_counts=True)
    _same(got, list(want))
