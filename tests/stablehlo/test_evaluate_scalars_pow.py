"""The StableHLO interpreter wrapper feeds 0-d inputs as 0-d tensors, and the IR's integer
`pow` is StableHLO's (negative exponents included), checked against the real reference
interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text
from irbridge.converters.stablehlo._mlir import ELEMENT_TYPES
from irbridge.dtypes import DType
from irbridge.executor import run_model

SCALAR_DTYPES = [DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT8,
                 DType.INT16, DType.INT32, DType.INT64, DType.UINT8, DType.UINT16,
                 DType.UINT32, DType.UINT64, DType.BOOL]


@pytest.mark.parametrize("dtype", SCALAR_DTYPES, ids=lambda d: d.short)
def test_evaluate_feeds_0d_inputs_as_scalars(dtype: DType) -> None:
    el = ELEMENT_TYPES[dtype]
    # a 0-d and a one-element 1-d argument side by side: neither may take the other's type
    program = f"""
func.func @main(%a: tensor<{el}>, %b: tensor<1x{el}>, %c: tensor<2x{el}>)
    -> (tensor<{el}>, tensor<1x{el}>, tensor<2x{el}>) {{
  %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<{el}>) -> tensor<2x{el}>
  %1 = stablehlo.maximum %0, %c : tensor<2x{el}>
  return %a, %b, %1 : tensor<{el}>, tensor<1x{el}>, tensor<2x{el}>
}}"""
    a = np.array(1, dtype=dtype.numpy)
    b = np.array([0], dtype=dtype.numpy)
    c = np.array([0, 1 if dtype is DType.BOOL else 2], dtype=dtype.numpy)
    got = evaluate(program, [a, b, c])
    assert [g.shape for g in got] == [(), (1,), (2,)]
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[1], b)
    np.testing.assert_array_equal(got[2], np.maximum(np.broadcast_to(a, (2,)), c))


def test_evaluate_scalar_result_of_scalar_arithmetic() -> None:
    program = """
func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.multiply %a, %b : tensor<f32>
  return %0 : tensor<f32>
}"""
    (got,) = evaluate(program, [np.float32(1.5), np.float32(-4.0)])
    assert got.shape == () and got.dtype == np.float32 and float(got) == -6.0


def test_evaluate_scalar_bf16() -> None:
    program = """
func.func @main(%a: tensor<bf16>) -> tensor<bf16> {
  %0 = stablehlo.add %a, %a : tensor<bf16>
  return %0 : tensor<bf16>
}"""
    (got,) = evaluate(program, [np.array(1.25, dtype=ml_dtypes.bfloat16)])
    assert got.shape == () and float(got) == 2.5


# StableHLO's own table (stablehlo/tests/interpret/power.mlir): exact expectations
SPEC_CASES = [
    ("i64", [-1, -1, -3, 1, -3, 0], [1, 0, -3, -3, 3, 2], [-1, 1, 0, 1, -27, 0]),
    ("ui64", [0, 0, 1, 1, 5], [0, 1, 0, 2, 5], [1, 0, 1, 1, 3125]),
]


def _pow_program(el: str, n: int) -> str:
    t = f"tensor<{n}x{el}>"
    return f"""
func.func @main(%a: {t}, %b: {t}) -> {t} {{
  %0 = stablehlo.power %a, %b : {t}
  return %0 : {t}
}}"""


@pytest.mark.parametrize(("el", "lhs", "rhs", "want"), SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_integer_pow_matches_the_spec_table(el: str, lhs: list[int], rhs: list[int],
                                             want: list[int]) -> None:
    dtype = np.int64 if el == "i64" else np.uint64
    model = from_mlir(_pow_program(el, len(lhs)))
    (got,) = run_model(model, [np.array(lhs, dtype), np.array(rhs, dtype)])
    np.testing.assert_array_equal(got, np.array(want, dtype))
    assert got.dtype == dtype


@pytest.mark.parametrize("dtype", [DType.INT8, DType.INT16, DType.INT32, DType.INT64,
                                   DType.UINT8, DType.UINT32], ids=lambda d: d.short)
def test_integer_pow_matches_the_reference_interpreter(dtype: DType) -> None:
    """Every base in -5..5 against every exponent in -4..9 (negative exponents, odd and
    even, overflow wrapping for the narrow types): IR executor, and the IR exported back to
    StableHLO, equal the reference interpreter run on the program as written."""
    info = np.iinfo(dtype.numpy)
    bases = np.arange(max(-5, info.min), 6)
    exps = np.arange(max(-4, info.min), 10)
    lhs, rhs = (x.reshape(-1).astype(dtype.numpy) for x in np.meshgrid(bases, exps))
    program = _pow_program(ELEMENT_TYPES[dtype], lhs.size)
    (want,) = evaluate(program, [lhs, rhs])
    model = from_mlir(program)
    (got,) = run_model(model, [lhs, rhs])
    np.testing.assert_array_equal(got, want)
    (back,) = evaluate(to_mlir_text(model), [lhs, rhs])
    np.testing.assert_array_equal(back, want)
