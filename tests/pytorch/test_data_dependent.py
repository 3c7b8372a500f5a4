"""Data-dependent sizes (issue 13): nonzero, argwhere, masked_select, unique (sorted, with
inverse and counts), unique_consecutive and tensor_split at tensor positions capture with
torch.export into registry ops whose output length is a SymDim bounded by what the op can
return (the input's numel, the split dim's size). torch's range checks on those sizes
(u0 >= 0, u0 <= numel) are decided from the bounds and leave no node; a check the bounds
cannot decide stays visible as an opaque node. The IR executor and onnxruntime run the
graphs on inputs whose counts differ from the capture's example, and match eager torch.

Tolerances: index, count and selection outputs are integers or copies of input elements and
must match exactly. The model-level test's float outputs go through a 4x3 linear layer (the
same float32 dot products in numpy and torch, differing in summation order), a sum of at
most 12 terms and exp; float32 (eps 1.2e-7) rounding differences of such short chains stay
below 1e-6 relative, so rtol 1e-5 / atol 1e-6 leave a 10x margin while any wrong element
(a different selection or order) differs by O(1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from irbridge.converters.onnx import to_onnx
from irbridge.converters.pytorch import capture, verify
from irbridge.executor import run_graphs
from irbridge.ir import SymDim

TOL = {"rtol": 1e-5, "atol": 1e-6}


def _feeds(result: Any, args: tuple[torch.Tensor, ...]) -> dict[str, np.ndarray]:
    names = [v.name for v in result.model.graphs[0].inputs]
    return {name: x.numpy() for name, x in zip(names, args, strict=True)}


def _outputs(result: Any, got: list[np.ndarray]) -> list[np.ndarray]:
    """The IR's results in the order of the eager output's tensor leaves."""
    return [np.asarray(got[where[1]]) for where in result.outputs]


def _ort(result: Any, args: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, _feeds(result, args))
    return _outputs(result, got)


def _leaves(out: Any) -> list[np.ndarray]:
    return [t.detach().numpy() for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


def _assert_same(got: list[np.ndarray], want: list[np.ndarray], tol: dict[str, float]) -> None:
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, (index, g.shape, w.shape, g.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(g, w, err_msg=f"output {index}", **tol)


# -- every op at once ----------------------------------------------------------------------


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor, m: torch.Tensor, i: torch.Tensor) -> Any:
        return (torch.nonzero(x), torch.argwhere(x), torch.masked_select(x, m),
                torch.unique(x, return_inverse=True, return_counts=True),
                torch.unique(x),
                torch.unique_consecutive(x, return_inverse=True, return_counts=True),
                torch.tensor_split(x, i, dim=1))


EXAMPLE = (torch.tensor([[0.0, 1.0, 2.0, 2.0], [3.0, 0.0, 2.0, 1.0]]),
           torch.tensor([True, False, True, True]), torch.tensor([1, 3]))

SECOND = [
    # other counts: more nonzeros, other runs, pieces of other lengths (one backward pair)
    (torch.tensor([[5.0, 5.0, 5.0, 0.0], [-1.0, 4.0, 4.0, 5.0]]),
     torch.tensor([False, False, False, True]), torch.tensor([3, 1])),
    # nothing selected, one distinct value, negative and clamped positions
    (torch.zeros(2, 4), torch.tensor([False, False, False, False]), torch.tensor([-1, 9])),
]


@pytest.fixture(scope="module")
def captured() -> Any:
    return capture(DataDependent(), EXAMPLE, frontend="export")


def test_no_opaque_node_and_bounded_sizes(captured: Any) -> None:
    assert captured.opaque_count == 0, captured.stats.notes
    ops = {n.op for _, n in captured.model.all_nodes()}
    assert {"non_zero", "masked_select", "unique", "unique_consecutive", "slice"} <= ops
    graph = captured.model.graphs[0]
    by_op = {n.op: n for n in reversed(graph.nodes)}  # the first node of each op
    count = graph.outputs[0].type.shape[0]  # nonzero: [count, 2]
    assert isinstance(count, SymDim) and (count.min, count.max) == (0, 8)
    assert graph.outputs[0].type.shape[1] == 2
    selected = by_op["masked_select"].outputs[0].type.shape
    assert isinstance(selected[0], SymDim) and selected[0].max == 8  # mask broadcasts to 2x4
    values, inverse, counts = by_op["unique"].outputs
    assert isinstance(values.type.shape[0], SymDim) and values.type.shape[0].max == 8
    assert inverse.type.shape == (2, 4) and counts.type.shape == values.type.shape
    piece = graph.outputs[-1].type.shape
    assert piece[0] == 2 and isinstance(piece[1], SymDim) and piece[1].max == 4
    assert verify(captured, DataDependent()).passed


@pytest.mark.parametrize("index", range(len(SECOND)))
def test_executor_and_onnxruntime_match_eager_on_other_counts(captured: Any, index: int) -> None:
    args = SECOND[index]
    want = _leaves(DataDependent()(*args))
    assert want[0].shape[0] != 5  # a count other than the example's
    got = _outputs(captured, run_graphs(captured.model, _feeds(captured, args))[-1])
    _assert_same(got, want, {"rtol": 0.0, "atol": 0.0})
    _assert_same(_ort(captured, args), want, {"rtol": 0.0, "atol": 0.0})


class Checked(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.nonzero(x)
        torch._check(n.shape[0] <= 3)  # not implied by 0 <= count <= 6
        return n


class SameCount(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = x > 0
        # torch asserts Eq(count of masked_select, count of nonzero) to add them: true
        # for one mask, but not something the bounds decide
        return torch.masked_select(x, keep) + torch.nonzero(keep)[:, 1].to(x.dtype)


@pytest.mark.parametrize("model", [Checked(), SameCount()], ids=["user_check", "equal_counts"])
def test_a_check_the_bounds_cannot_decide_stays(model: torch.nn.Module) -> None:
    result = capture(model, (torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]),),
                     frontend="export")
    assert result.stats.opaque == {"aten::_assert_scalar.default": 1}, result.stats.opaque
    [check] = [n for _, n in result.model.all_nodes() if n.is_opaque]
    [cond] = check.inputs  # the comparison of the sizes, computed at run time
    assert cond is not None and cond.producer is not None
    assert cond.producer.op in ("less_equal", "equal"), cond.producer.op
    # nothing runs past a check it cannot make: the executor refuses, naming the node
    report = verify(result, model)
    assert not report.passed and "_assert_scalar" in report.error, report.error


# -- a model using them in the middle of a computation -------------------------------------


class Middle(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.lin(x)
        keep = h > 0
        picked = torch.masked_select(h, keep)
        where = torch.nonzero(keep)
        # the two counts are not combined elementwise: torch would assert their equality,
        # a check the bounds cannot decide (test_a_check_the_bounds_cannot_decide_stays)
        scored = (picked * 2.0).sum() + where[:, 1].to(h.dtype).sum()
        return scored + h.mean(), where, picked.exp()


def _middle_inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(4, 4, generator=gen), torch.randn(4, 4, generator=gen) * 3 + 1]


def test_model_with_data_dependent_middle() -> None:
    model = Middle().eval()
    first, second = _middle_inputs()
    with torch.no_grad():
        counts = [int((model.lin(x) > 0).sum()) for x in (first, second)]
    assert counts[0] != counts[1], counts
    result = capture(model, (first,), frontend="export")
    assert result.opaque_count == 0, result.stats.notes
    assert verify(result, model).passed
    for x in (first, second):
        with torch.no_grad():
            want = _leaves(model(x))
        got = _outputs(result, run_graphs(result.model, _feeds(result, (x,)))[-1])
        _assert_same(got, want, TOL)
        _assert_same(_ort(result, (x,)), want, TOL)
