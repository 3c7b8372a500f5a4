"""torch.special's orthogonal polynomials (issue 13): each of the twelve ATen ops captures
into the neutral `orthogonal_polynomial` op, the IR executor matches eager torch on a grid
of degrees (negative, 0, 1, the recurrence range, the closed trigonometric forms past
degree 6 / 8 / 4) and arguments (inside and outside [-1, 1], the special points +-1 and
0), on the example input and on a perturbed second one, and both exporters write its
registry decomposition with eager torch's numbers.

Tolerance. Eager torch runs the same recurrences in float32, but its compiled kernel fuses
multiply-adds (x * x - 1 comes out exact) where numpy rounds twice, so the two drift apart
by a few float32 roundings per recurrence step; up to degree 12 that stays below
rtol 1e-4 relative to the largest |P_k| met on the way. The check uses
atol = 1e-4 * max |eager| per polynomial (the scale of the intermediate terms) plus
rtol 1e-4; special values (degree < 0, +-1, 0) must match exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchtools import FnModule

from irbridge.converters.onnx import to_onnx
from irbridge.converters.pytorch import capture
from irbridge.converters.stablehlo import build_module
from irbridge.executor import run_graphs

NAMES = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
         "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
         "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p"]

DEGREES = [-2.0, 0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 12.0, 2.6]  # 2.6 truncates to 2
SPECIAL_X = [-1.0, 1.0, 0.0]


def _inputs(name: str, perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7 + perturb)
    lo, hi = (0.0, 1.0) if name.startswith("shifted") else (-1.3, 1.3)
    x = torch.rand((5, 1), generator=gen) * (hi - lo) + lo
    x = torch.cat([x, torch.tensor(SPECIAL_X).reshape(3, 1)])  # (8, 1)
    n = torch.tensor(DEGREES).reshape(1, -1)  # broadcast to (8, 10)
    return x, n


def _special_points(name: str) -> list[float]:
    """The arguments torch answers from a closed formula before any recurrence."""
    if name.startswith("shifted"):
        return [0.0, 1.0]
    if name.startswith(("chebyshev", "legendre")):
        return [-1.0, 1.0]
    return [0.0] if name.startswith("laguerre") else []


def _capture(name: str) -> tuple[FnModule, object]:
    module = FnModule(getattr(torch.special, name))
    return module, capture(module, _inputs(name, False), frontend="export")


@pytest.mark.parametrize("name", NAMES)
def test_executor_matches_eager(name: str) -> None:
    module, result = _capture(name)
    assert result.opaque_count == 0, result.stats.notes  # type: ignore[attr-defined]
    ops = {n.op for _, n in result.model.all_nodes()}  # type: ignore[attr-defined]
    assert "orthogonal_polynomial" in ops
    graph = result.model.graphs[0]  # type: ignore[attr-defined]
    for perturb in (False, True):
        x, n = _inputs(name, perturb)
        want = module(x, n).numpy()
        feeds = {v.name: t.numpy() for v, t in zip(graph.inputs, (x, n), strict=True)}
        got = np.asarray(run_graphs(result.model, feeds)[-1][0])  # type: ignore[attr-defined]
        assert got.dtype == want.dtype and got.shape == want.shape
        scale = float(np.nanmax(np.abs(want)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=f"{name} perturbed={perturb}")
        # degree < 0 (column 0) and the family's special points: exact
        np.testing.assert_array_equal(got[:, 0], want[:, 0])
        rows = [5 + SPECIAL_X.index(v) for v in _special_points(name)]
        np.testing.assert_array_equal(got[rows], want[rows])


@pytest.mark.parametrize("name", ["hermite_polynomial_h", "chebyshev_polynomial_t",
                                  "legendre_polynomial_p"])
def test_degree_edges_match_eager(name: str) -> None:
    """Non-finite degrees count as negative, Hermite past degree 128 is NaN in float32,
    NaN arguments propagate; the closed form of a large Chebyshev degree."""
    fn = getattr(torch.special, name)
    x = torch.tensor([0.3, -0.7, float("nan"), 2.0, 0.9])
    n = torch.tensor([float("inf"), float("nan"), 3.0, 200.0, 1000.0])
    result = capture(FnModule(fn), (x, n), frontend="export")
    graph = result.model.graphs[0]
    feeds = {v.name: t.numpy() for v, t in zip(graph.inputs, (x, n), strict=True)}
    got = np.asarray(run_graphs(result.model, feeds)[-1][0])
    want = fn(x, n).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[:3], want[:3], rtol=0, atol=0)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-3)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
@pytest.mark.parametrize("name", NAMES)
def test_exports_match_eager(name: str, perturb: bool) -> None:
    """The captured op through its registry decomposition: onnxruntime and the StableHLO
    interpreter give eager torch's numbers within torch.testing's float32 tolerance (rtol
    1.3e-6, atol 1e-5); both compute the recurrence in float32 as torch does, and the
    closed forms from a float64-accurate acos, sin and cos."""
    import onnxruntime as ort

    from irbridge.converters.stablehlo import evaluate

    fn, result = _capture(name)
    x, n = _inputs(name, perturb)
    if perturb:
        x = x * 0.9
    want = fn(x, n).numpy()
    inputs = [v.name for v in result.model.graphs[0].inputs]  # type: ignore[attr-defined]
    feeds = dict(zip(inputs, (x.numpy(), n.numpy()), strict=True))
    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),  # type: ignore[attr-defined]
                                   providers=["CPUExecutionProvider"])
    module = build_module(result.model)  # type: ignore[attr-defined]
    for backend, got in (("onnxruntime", session.run(None, feeds)[0]),
                         ("stablehlo", evaluate(module.artifact(),
                                                [feeds[k] for k in inputs])[0])):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1.3e-6, atol=1e-5,
                                   err_msg=f"{name} in {backend}")
