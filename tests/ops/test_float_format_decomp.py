"""The registry decompositions of frexp and nextafter (irbridge/ops/_misc_decomp.py), which
find a float's exponent by exact power-of-two scalings instead of a bit cast, exported to
ONNX (onnxruntime) and StableHLO (the reference interpreter), against eager torch.

Both are exact operations, so the check is bit for bit: the same values, the same signs of
zero (frexp(-0.0) = -0.0, nextafter(-tiny, 1) = -0.0), the same int32 exponents, NaN where
torch has NaN. Inputs cover zeros, subnormals (the smallest, the largest), the smallest
normal, powers of two (where the step toward zero halves), the largest finite value (the
step beyond it is inf), +-inf, NaN and random values over many binades.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import evaluate, to_mlir_text
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, TensorType

DTYPES = [np.float16, np.float32, np.float64]


def _values(dtype: type) -> np.ndarray:
    fi = np.finfo(dtype)
    tiny, sub = float(fi.tiny), float(fi.smallest_subnormal)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, sub, -sub, tiny - sub,
               tiny * 0.75, float(fi.max), -float(fi.max), 1.0, -1.0, 0.5, 0.75, 3.0, 2.0,
               -4.0, 1024.0]
    rng = np.random.default_rng(5)
    scale = 10.0 ** rng.integers(int(np.log10(tiny)), int(np.log10(float(fi.max))), 60)
    with np.errstate(over="ignore"):
        return np.concatenate([special, rng.standard_normal(60) * scale]).astype(dtype)


def _exported(op: str, arrays: list[np.ndarray], outputs: int) -> dict[str, list[np.ndarray]]:
    graph = Graph()
    ins = [graph.add_input(f"x{i}", TensorType(DType.from_numpy(a.dtype), a.shape))
           for i, a in enumerate(arrays)]
    graph.set_outputs(GraphBuilder(graph).op_multi(op, ins, num_outputs=outputs))
    model = Model(graphs=[graph], name=op)
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return {"onnxruntime": session.run(None, {f"x{i}": a for i, a in enumerate(arrays)}),
            "stablehlo": [np.asarray(v) for v in evaluate(to_mlir_text(model), arrays)]}


def _same_bits(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.dtype == want.dtype, where
    np.testing.assert_array_equal(got, want, err_msg=where)  # NaN equals NaN here
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]),
                                  np.signbit(want[~np.isnan(want)]), err_msg=where)


@pytest.mark.parametrize("dtype", DTYPES)
def test_frexp_matches_torch_bit_for_bit(dtype: type) -> None:
    x = _values(dtype)
    mantissa, exponent = torch.frexp(torch.from_numpy(x))
    for backend, (m, e) in _exported("frexp", [x], 2).items():
        _same_bits(m, mantissa.numpy(), f"mantissa in {backend}")
        np.testing.assert_array_equal(e, exponent.numpy(), err_msg=f"exponent in {backend}")
        assert e.dtype == np.int32


@pytest.mark.parametrize("dtype", DTYPES)
def test_nextafter_matches_torch_bit_for_bit(dtype: type) -> None:
    x = _values(dtype)
    a = np.repeat(x, 5)
    toward = np.tile(np.array([np.inf, -np.inf, 0.0, -0.0, np.nan], dtype), x.size)
    for b in (toward, np.random.default_rng(2).permutation(a), a):
        want = torch.nextafter(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        for backend, (got,) in _exported("nextafter", [a, b], 1).items():
            _same_bits(got, want, f"nextafter in {backend}")


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.bool_])
def test_nextafter_of_integers_is_the_float64_step_cast_back(dtype: type) -> None:
    """Integer and bool operands: numpy's nextafter in float (float64 here, a smaller float
    in numpy for narrow types: the truncated result is the same) cast back, as the
    registry's reference computes it: a - sign(a) toward zero, a away from it, b at a == b."""
    a = np.array([3, 3, 3, -2, -2, 0, 0, 1, 5], dtype=dtype)
    b = np.array([5, 1, 3, -7, 0, 4, -4, 0, 5], dtype=dtype)
    with np.errstate(all="ignore"):
        want = np.nextafter(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    for backend, (got,) in _exported("nextafter", [a, b], 1).items():
        assert got.dtype == want.dtype, backend
        np.testing.assert_array_equal(got, want, err_msg=backend)
