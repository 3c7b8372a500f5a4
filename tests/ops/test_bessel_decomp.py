"""The registry decompositions of the Bessel-family special functions
(irbridge/ops/_bessel_decomp.py), exported to ONNX (run in onnxruntime) and to StableHLO (run
in the reference interpreter), against eager torch on a grid and on the special values
(+-0, poles, the branch points of torch's kernels, large arguments, +-inf, NaN).

Expected values are torch's own kernels (aten/src/ATen/native/Math.h) in float64, except
the finite values of j0, j1, y0, y1 and airy_ai, which are SciPy's: those torch kernels
leave out the implicit leading 1 of Cephes' p1evl denominators (the decompositions keep it,
as SciPy and the registry's reference do) and are off by up to 9e-7 (J, Y) and 2.9e-6 (Ai)
absolute, which a separate test bounds. The decompositions compute in float64 with the same
coefficients and branches, so:

* float64: NaN where torch gives NaN, the same infinities, and finite values within
  1e-12 x max(1, |torch|). Measured: at most 1.6e-15 for the modified Bessel functions and
  2.6e-12 relative (2.2e-16 absolute) for j0 / j1 / y0 / y1 / airy_ai, whose relative error
  near their zeros follows onnxruntime's sin and cos (the bound relative to max(1, |torch|)
  is what the test checks).
* float32: the float64 result rounded once, compared with torch's float64 result rounded
  to float32: within 2 float32 ulp (rtol 2.4e-7) plus 1e-44 for subnormal results.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
import scipy.special
import torch

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import evaluate, to_mlir_text
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, TensorType
from irbridge.ops import registry

TORCH: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "i0": torch.special.i0, "i0e": torch.special.i0e,
    "i1": torch.special.i1, "i1e": torch.special.i1e,
    "k0": torch.special.modified_bessel_k0, "k1": torch.special.modified_bessel_k1,
    "k0e": torch.special.scaled_modified_bessel_k0,
    "k1e": torch.special.scaled_modified_bessel_k1,
    "bessel_j0": torch.special.bessel_j0, "bessel_j1": torch.special.bessel_j1,
    "bessel_y0": torch.special.bessel_y0, "bessel_y1": torch.special.bessel_y1,
    "spherical_bessel_j0": torch.special.spherical_bessel_j0,
    "airy_ai": torch.special.airy_ai,
}

# branch points of torch's kernels (8 for i*, 2 for k*, 5 for j* / y*, 0.5 for the
# spherical j0, +-2.09, 8.32 and 103.892 for airy_ai), each side of them, signed zeros,
# tiny and huge arguments, +-inf and NaN
SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 9.99e-6, 0.5, -0.5, 0.49, 2.0, 2.0001,
           -2.0, 5.0, 5.0001, -5.0, -5.0001, 8.0, 8.0001, -8.0, 2.09, 2.0899, -2.09, -2.0901,
           8.3203353, 8.33, 103.892, 103.9, 30.0, -30.0, 90.0, 200.0, -200.0, 700.0,
           np.inf, -np.inf, np.nan]
X64 = np.concatenate([np.linspace(-30.0, 30.0, 1201), SPECIAL])


def _model(op: str, dtype: DType, n: int) -> Model:
    graph = Graph()
    x = graph.add_input("x", TensorType(dtype, (n,)))
    graph.set_outputs([GraphBuilder(graph).op(op, [x])])
    return Model(graphs=[graph], name=op)


def _exported(op: str, x: np.ndarray) -> dict[str, np.ndarray]:
    model = _model(op, DType.from_numpy(x.dtype), x.size)
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return {"onnxruntime": session.run(None, {"x": x})[0],
            "stablehlo": np.asarray(evaluate(to_mlir_text(model), [x])[0])}


def _torch64(op: str, x: np.ndarray) -> np.ndarray:
    return TORCH[op](torch.from_numpy(x.astype(np.float64))).numpy()


CEPHES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "bessel_j0": scipy.special.j0, "bessel_j1": scipy.special.j1,
    "bessel_y0": scipy.special.y0, "bessel_y1": scipy.special.y1,
    "airy_ai": lambda x: scipy.special.airy(x)[0],
}
"""Ops whose torch kernel drops Cephes' implicit leading coefficients (see the docstring)."""


def _expected64(op: str, x: np.ndarray) -> np.ndarray:
    """torch's float64 result; SciPy's where that is finite, for the ops in CEPHES."""
    want = _torch64(op, x)
    if op in CEPHES:
        with np.errstate(all="ignore"):
            cephes = CEPHES[op](x.astype(np.float64))
        want = np.where(np.isfinite(want), cephes, want)
    return want


@pytest.mark.parametrize("op", sorted(CEPHES))
def test_torch_kernels_without_the_leading_coefficient_stay_close(op: str) -> None:
    """torch's j0 / j1 / y0 / y1 / airy_ai against SciPy's, both float64: within 3e-6
    absolute (relative to max(1, |value|)), far inside the float32 tolerance the sweep
    compares with (atol 1e-5)."""
    finite = X64[np.isfinite(X64)]
    torch_values, cephes = _torch64(op, finite), _expected64(op, finite)
    with np.errstate(invalid="ignore"):  # y0, y1 below 0: NaN on both sides
        error = np.abs(torch_values - cephes) / np.maximum(np.abs(cephes), 1.0)
    assert np.nanmax(error) <= 3e-6


@pytest.mark.parametrize("op", sorted(TORCH))
def test_float64_matches_torch(op: str) -> None:
    want = _expected64(op, X64)
    for backend, got in _exported(op, X64).items():
        where = f"{op} in {backend}"
        assert got.dtype == np.float64, where
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=where)
        infinite = np.isinf(want)
        np.testing.assert_array_equal(got[infinite], want[infinite], err_msg=where)
        finite = np.isfinite(want)
        error = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), 1.0)
        assert error.max() <= 1e-12, (where, X64[finite][error.argmax()], error.max())


@pytest.mark.parametrize("op", sorted(TORCH))
def test_float32_is_torch_float64_rounded(op: str) -> None:
    x = X64.astype(np.float32)
    with np.errstate(over="ignore"):  # i0(90) and the like overflow float32: inf both sides
        want = _expected64(op, x).astype(np.float32)
    for backend, got in _exported(op, x).items():
        assert got.dtype == np.float32, (op, backend)
        np.testing.assert_allclose(got, want, rtol=2.4e-7, atol=1e-44,
                                   err_msg=f"{op} in {backend}")


@pytest.mark.parametrize("op", sorted(TORCH))
def test_decomposition_is_registered_and_uses_neutral_ops(op: str) -> None:
    """The exporters write the decomposition, which must not call the op itself."""
    schema = registry.get(op)
    assert schema.decompose is not None
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.FLOAT32, (3,)))
    outs = schema.decompose(GraphBuilder(graph), [x], {})
    assert outs[0].type == TensorType(DType.FLOAT32, (3,))
    assert op not in {n.op for n in graph.nodes}
