"""Scans (issue 13): cumprod and logcumsumexp capture into the neutral `cumprod` /
`logcumsumexp` ops (no opaque node), the IR executor matches eager torch on the example
input and on a perturbed second input, and both export to ONNX (onnxruntime) and StableHLO
(the reference interpreter) with eager's numbers (logcumsumexp, which neither format has as
a scan, through its registry decomposition).

Tolerances. Eager torch scans in float32; the executor scans in float64 rounded to float32.
cumprod over 5 factors in [0.5, 1.5] has relative error <= 5 ulp in float32 (rtol 2e-6
leaves 16 ulp); logcumsumexp's logaddexp steps are each within a few ulp of the float64
value, and the scaled input (x * 30, range ~[-90, 90]) checks that no global shift loses
small early terms (torch's own scan keeps them): rtol 1e-5, atol 1e-5 on values of
magnitude <= 100.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from irbridge.converters.pytorch import capture
from irbridge.executor import run_graphs

TOL = {"rtol": 1e-5, "atol": 1e-5}


class Scans(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.cumprod(x, 1), torch.cumprod(x, -1), torch.logcumsumexp(x, -1),
                torch.logcumsumexp(x * 30, 0))


def _input(perturb: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7 if perturb else 3)
    return torch.rand((3, 5), generator=gen) + 0.5  # factors in [0.5, 1.5)


@pytest.fixture(scope="module")
def captured() -> Any:
    return capture(Scans(), (_input(False),), frontend="export")


def _feeds(result: Any, x: torch.Tensor) -> dict[str, np.ndarray]:
    return {result.model.graphs[0].inputs[0].name: x.numpy()}


def test_scans_lower_to_neutral_ops(captured: Any) -> None:
    assert captured.opaque_count == 0, captured.stats.notes
    ops = {n.op for _, n in captured.model.all_nodes()}
    assert {"cumprod", "logcumsumexp"} <= ops


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_executor_matches_eager(captured: Any, perturb: bool) -> None:
    x = _input(perturb)
    got = run_graphs(captured.model, _feeds(captured, x))[-1]
    with torch.no_grad():
        want = Scans()(x)
    for index, w in enumerate(want):
        where = captured.outputs[index]
        assert where is not None
        g = np.asarray(got[where[1]])
        assert g.shape == tuple(w.shape) and g.dtype == np.float32
        np.testing.assert_allclose(g, w.numpy(), err_msg=f"output {index}", **TOL)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_cumprod_onnx_matches_eager(perturb: bool) -> None:
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx

    class Cumprod(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumprod(x, 1)

    result = capture(Cumprod(), (_input(False),), frontend="export")
    x = _input(perturb)
    proto = to_onnx(result.model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, _feeds(result, x))
    np.testing.assert_allclose(got, torch.cumprod(x, 1).numpy(), rtol=2e-6, atol=0)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_scans_export_and_match_eager(captured: Any, perturb: bool) -> None:
    """cumprod (ONNX CumProd / a StableHLO lowering) and logcumsumexp (its registry
    decomposition, irbridge/ops/_misc_decomp.py) through onnxruntime and the StableHLO
    reference interpreter."""
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.stablehlo import build_module, evaluate

    x = _input(perturb)
    session = ort.InferenceSession(to_onnx(captured.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    outputs = {"onnxruntime": session.run(None, _feeds(captured, x)),
               "stablehlo": evaluate(build_module(captured.model).artifact(), [x.numpy()])}
    with torch.no_grad():
        want = Scans()(x)
    for backend, got in outputs.items():
        for index, w in enumerate(want):
            where = captured.outputs[index]
            assert where is not None
            np.testing.assert_allclose(np.asarray(got[where[1]]), w.numpy(),
                                       err_msg=f"output {index} in {backend}", **TOL)


def test_logcumsumexp_keeps_tiny_early_terms() -> None:
    """A shift by the row's max would flush exp(-200 - 0) to 0 in float32 and give -inf for
    the first element; the per-step logaddexp gives -200 and -200 + log(2) (torch's answers),
    and -inf entries (log of 0) stay -inf without NaN."""

    class Lcse(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.logcumsumexp(x, 0)

    x = torch.tensor([-200.0, -200.0, 0.0, float("-inf")])
    result = capture(Lcse(), (torch.zeros(4),), frontend="export")
    where = result.outputs[0]
    assert where is not None
    got = np.asarray(run_graphs(result.model, _feeds(result, x))[-1][where[1]])
    want = torch.logcumsumexp(x, 0).numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, **TOL)


class Extremes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*torch.cummax(x, 1), *torch.cummin(x, 0))


NAN = float("nan")
# ties (torch takes the later index), NaN (propagates with the index of the latest NaN)
TIES = torch.tensor([[1.0, 1.0, NAN, 2.0, NAN, 0.0], [3.0, 1.0, 3.0, 0.0, 0.0, 5.0],
                     [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [-1.0, 2.0, -1.0, 2.0, 5.0, 5.0]])


@pytest.mark.parametrize("case", ["example", "perturbed", "ties_and_nan"])
def test_cummax_cummin_values_and_indices_match_eager(case: str) -> None:
    """Exact equality: both are selections (no arithmetic), so values and int64 indices
    must be torch's bit for bit, NaN positions included."""
    gen = torch.Generator().manual_seed(11)
    example = torch.randn((4, 6), generator=gen)
    result = capture(Extremes(), (example,), frontend="export")
    assert result.opaque_count == 0, result.stats.notes
    assert {"cummax", "cummin"} <= {n.op for _, n in result.model.all_nodes()}
    x = {"example": example, "perturbed": torch.randn((4, 6), generator=gen),
         "ties_and_nan": TIES}[case]
    got = run_graphs(result.model, _feeds(result, x))[-1]
    with torch.no_grad():
        want = Extremes()(x)
    for index, w in enumerate(want):
        where = result.outputs[index]
        assert where is not None
        g = np.asarray(got[where[1]])
        assert g.dtype == w.numpy().dtype
        np.testing.assert_array_equal(g, w.numpy(), err_msg=f"output {index}")
