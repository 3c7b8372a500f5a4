"""Linear algebra (issue 13): torch.linalg inv / det / cholesky / solve (and the inverse / det
aliases) capture into the registry's `linalg` ops with no opaque node; the IR executor
matches eager torch on the example input and on a perturbed second input; det exports to
ONNX Det and the others through their registry decompositions (onnxruntime matches eager).

Inputs are batched (2 x 4 x 4) symmetric positive-definite matrices A = G G^T / 4 + I, whose
eigenvalues lie in [1, 1 + |G|^2 / 4]; the test asserts their 2-norm condition number is
below 50. Backward-stable LAPACK factorisations in float32 then have relative errors of order
n * cond * eps = 4 * 50 * 6e-8 = 1.2e-5 (eager torch) against the executor's float64 result
rounded to float32, so rtol 1e-4 leaves a margin of 8; atol 1e-5 covers entries of inverse
and solve that cancel to near zero (their magnitudes are <= |A^-1| |B| <= 10).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from irbridge.converters.pytorch import capture
from irbridge.errors import ExportError
from irbridge.executor import run_graphs

TOL = {"rtol": 1e-4, "atol": 1e-5}


class Linalg(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.linalg.inv(a), torch.inverse(a), torch.linalg.det(a), torch.det(a),
                torch.linalg.cholesky(a), torch.linalg.cholesky(a, upper=True),
                torch.linalg.solve(a, b))


def _inputs(perturb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5 if perturb else 2)
    g = torch.randn((2, 4, 4), generator=gen)
    a = g @ g.mT / 4 + torch.eye(4)
    assert float(torch.linalg.cond(a.double()).max()) < 50
    return a, torch.randn((2, 4, 3), generator=gen)


@pytest.fixture(scope="module")
def captured() -> Any:
    return capture(Linalg(), _inputs(False), frontend="export")


def _feeds(result: Any, args: tuple[torch.Tensor, ...]) -> dict[str, np.ndarray]:
    names = [v.name for v in result.model.graphs[0].inputs]
    return {name: x.numpy() for name, x in zip(names, args, strict=True)}


def test_linalg_ops_lower_to_registry_ops(captured: Any) -> None:
    assert captured.opaque_count == 0, captured.stats.notes
    assert {"inverse", "det", "cholesky", "solve"} <= {n.op for _, n in captured.model.all_nodes()}


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_executor_matches_eager(captured: Any, perturb: bool) -> None:
    args = _inputs(perturb)
    got = run_graphs(captured.model, _feeds(captured, args))[-1]
    with torch.no_grad():
        want = Linalg()(*args)
    for index, w in enumerate(want):
        where = captured.outputs[index]
        assert where is not None
        g = np.asarray(got[where[1]])
        assert g.shape == tuple(w.shape) and g.dtype == np.float32, (index, g.shape)
        np.testing.assert_allclose(g, w.numpy(), err_msg=f"output {index}", **TOL)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_det_onnx_matches_eager(perturb: bool) -> None:
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx

    class Det(torch.nn.Module):
        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return torch.linalg.det(a)

    a, _ = _inputs(False)
    result = capture(Det(), (a,), frontend="export")
    proto = to_onnx(result.model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x, _ = _inputs(perturb)
    (got,) = session.run(None, _feeds(result, (x,)))
    np.testing.assert_allclose(got, torch.linalg.det(x).numpy(), **TOL)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_factorisations_export_to_onnx_and_match_eager(captured: Any, perturb: bool) -> None:
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx

    session = ort.InferenceSession(to_onnx(captured.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    args = _inputs(perturb)
    got = session.run(None, _feeds(captured, args))
    with torch.no_grad():
        want = Linalg()(*args)
    for index, w in enumerate(want):
        where = captured.outputs[index]
        assert where is not None
        np.testing.assert_allclose(got[where[1]], w.numpy(), err_msg=f"output {index}", **TOL)


def test_a_matrix_too_large_to_unroll_is_refused_by_onnx_in_one_line() -> None:
    from irbridge.converters.onnx import to_onnx
    from irbridge.ops._linalg_decomp import UNROLL_LIMIT

    class Inv(torch.nn.Module):
        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return torch.linalg.inv(a)

    n = UNROLL_LIMIT + 1
    result = capture(Inv(), (torch.eye(n) * 2,), frontend="export")
    with pytest.raises(ExportError, match=rf"node #\d+ inverse: .*stops at {UNROLL_LIMIT}") \
            as info:
        to_onnx(result.model)
    assert "\n" not in str(info.value)


def test_costs_are_lapack_flop_counts(captured: Any) -> None:
    """Per 4 x 4 matrix, batch 2: inverse 2n^3 = 128, det 2n^3/3 = 43, cholesky n^3/3 = 21,
    solve with 3 right-hand sides 2n^3/3 + 2n^2 k = 43 + 96 = 139."""
    from irbridge.ops import node_cost

    want = {"inverse": 2 * 128, "det": 2 * 43, "cholesky": 2 * 21, "solve": 2 * 139}
    seen = set()
    for _, node in captured.model.all_nodes():
        if node.op in want:
            assert node_cost(node).other_flops == want[node.op], node.op
            seen.add(node.op)
    assert seen == set(want)


@pytest.mark.parametrize("strategy", ["unfused", "fused"])
def test_partitioning_gives_linalg_ops_their_own_kind(captured: Any, strategy: str) -> None:
    from irbridge.analysis.cost import cost_model
    from irbridge.analysis.partition import partition

    parts = partition(captured.model, cost_model(captured.model), strategy)
    kinds = {p.kind for p in parts.partitions}
    assert "linalg" in kinds, kinds


@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
def test_cholesky_reads_one_triangle_only(upper: bool) -> None:
    """torch.linalg.cholesky reads the lower triangle (upper=True: the upper one) and
    ignores the other: a non-symmetric input whose ignored triangle holds other values
    (here, large ones that would make the full matrix indefinite) gives torch's factor."""
    class Chol(torch.nn.Module):
        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return torch.linalg.cholesky(a, upper=upper)

    a, _ = _inputs(False)
    ignored = torch.triu(torch.full_like(a, 50.0), 1)  # the triangle torch does not read
    a = a + (ignored.mT if upper else ignored)
    result = capture(Chol(), (a,), frontend="export")
    assert result.opaque_count == 0
    got = run_graphs(result.model, _feeds(result, (a,)))[-1][0]
    np.testing.assert_allclose(got, Chol()(a).numpy(), **TOL)
