"""Sub-byte integers (i4, ui4, i2, ui2) and the narrow floats (f8 / f6 / f4 types): the IR's
registry ops equal the StableHLO reference interpreter on the same program, over every
pair of integer values (so every wraparound modulo 2^bits is exercised), and so does the IR
exported back to StableHLO. Exact comparisons: integer results and single roundings of the
narrow floats are bit-exact in both."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text
from irbridge.converters.stablehlo._mlir import ELEMENT_TYPES
from irbridge.dtypes import DType
from irbridge.executor import run_model

BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor",
          "shift_left", "shift_right_arithmetic", "shift_right_logical"]
UNARY = ["not", "negate", "abs"]  # negate and abs take signless (signed) integers only
SUB_BYTE = [DType.INT4, DType.UINT4, DType.INT2, DType.UINT2]


def _integer_program(el: str, n: int, unary: list[str]) -> str:
    t = f"tensor<{n}x{el}>"
    lines = [f"  %b{i} = stablehlo.{op} %a, %b : {t}" for i, op in enumerate(BINARY)]
    lines += [f"  %u{i} = stablehlo.{op} %a : {t}" for i, op in enumerate(unary)]
    lines += [f"  %c = stablehlo.compare LT, %a, %b : ({t}, {t}) -> tensor<{n}xi1>",
              f"  %w = stablehlo.convert %a : ({t}) -> tensor<{n}xi32>",
              f"  %big = stablehlo.multiply %w, %w : tensor<{n}xi32>",
              f"  %n = stablehlo.convert %big : (tensor<{n}xi32>) -> {t}"]
    results = [f"%b{i}" for i in range(len(BINARY))] + [f"%u{i}" for i in range(len(unary))]
    types = [t] * len(results) + [f"tensor<{n}xi1>", f"tensor<{n}xi32>", t]
    results += ["%c", "%w", "%n"]
    return (f"func.func @main(%a: {t}, %b: {t}) -> ({', '.join(types)}) {{\n"
            + "\n".join(lines)
            + f"\n  return {', '.join(results)} : {', '.join(types)}\n}}")


@pytest.mark.parametrize("dtype", SUB_BYTE, ids=lambda d: d.short)
def test_sub_byte_integer_arithmetic_wraps_as_the_reference_interpreter(dtype: DType) -> None:
    info = ml_dtypes.iinfo(dtype.numpy)
    values = range(int(info.min), int(info.max) + 1)
    pairs = np.array(list(itertools.product(values, values)), dtype=np.int64)
    a, b = pairs[:, 0].astype(dtype.numpy), pairs[:, 1].astype(dtype.numpy)
    unary = UNARY[:1] if dtype.name.startswith("U") else UNARY
    program = _integer_program(ELEMENT_TYPES[dtype], len(pairs), unary)
    want = evaluate(program, [a, b])
    model = from_mlir(program)
    assert not [n for n in model.graphs[0].nodes if n.is_opaque]
    names = BINARY + unary + ["compare", "convert to i32", "convert from i32"]
    assert {str(w.dtype) for w in want[:len(BINARY) + len(unary)]} == {dtype.numpy.name}
    # the interpreter's add wraps: max + 1 == min (checks the comparison below can fail)
    index = int(np.flatnonzero((pairs[:, 0] == info.max) & (pairs[:, 1] == 1))[0])
    assert int(want[0][index]) == int(info.min)
    for got in (run_model(model, [a, b]), evaluate(to_mlir_text(model), [a, b])):
        for name, g, w in zip(names, got, want, strict=True):
            assert g.dtype == w.dtype, name
            np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64),
                                          err_msg=name)


NARROW_FLOATS = [d for d in DType if d.is_float and d.itemsize == 1]


@pytest.mark.parametrize("dtype", NARROW_FLOATS, ids=lambda d: d.short)
def test_narrow_float_converts_and_adds_as_the_reference_interpreter(dtype: DType) -> None:
    """f32 -> narrow float rounds once; narrow + narrow and back to f32. NaN patterns are
    compared as NaN (the encodings of a NaN differ between the types' conventions)."""
    finfo = ml_dtypes.finfo(dtype.numpy)
    rng = np.random.default_rng(dtype.value)
    x = np.concatenate([
        np.array([0.0, 1.0, -1.0, 0.3, float(finfo.max), -float(finfo.max),
                  float(finfo.smallest_subnormal), 1.5 * float(finfo.smallest_normal)]),
        rng.uniform(-float(finfo.max), float(finfo.max), 24),
        rng.standard_normal(24)]).astype(np.float32)
    if dtype is DType.FLOAT8_E8M0FNU:  # powers of two only, positive
        x = np.abs(x) + np.float32(2.0**-100)
    el = ELEMENT_TYPES[dtype]
    t, f = f"tensor<{x.size}x{el}>", f"tensor<{x.size}xf32>"
    ops = [] if dtype is DType.FLOAT8_E8M0FNU else [
        f"  %s = stablehlo.add %n, %n : {t}", f"  %p = stablehlo.multiply %n, %n : {t}"]
    results = ["%n", "%back"] + (["%s", "%p"] if ops else [])
    types = [t, f] + ([t, t] if ops else [])
    program = (f"func.func @main(%x: {f}) -> ({', '.join(types)}) {{\n"
               f"  %n = stablehlo.convert %x : ({f}) -> {t}\n"
               f"  %back = stablehlo.convert %n : ({t}) -> {f}\n" + "\n".join(ops)
               + f"\n  return {', '.join(results)} : {', '.join(types)}\n}}")
    want = evaluate(program, [x])
    model = from_mlir(program)
    assert not [n for n in model.graphs[0].nodes if n.is_opaque]
    assert want[0].dtype == dtype.numpy
    for got in (run_model(model, [x]), evaluate(to_mlir_text(model), [x])):
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.dtype == w.dtype, index
            np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64),
                                          err_msg=f"result {index}")


@pytest.mark.parametrize("dtype", SUB_BYTE, ids=lambda d: d.short)
def test_sub_byte_division_clamp_and_float_convert_as_the_reference_interpreter(
        dtype: DType) -> None:
    """divide / remainder truncate toward zero (numpy's floor_divide of int4 does not), over
    every pair but a zero divisor and min / -1 (undefined in StableHLO)."""
    info = ml_dtypes.iinfo(dtype.numpy)
    values = range(int(info.min), int(info.max) + 1)
    pairs = np.array([(a, b) for a, b in itertools.product(values, values)
                      if b != 0 and not (a == info.min and b == -1)], dtype=np.int64)
    a, b = pairs[:, 0].astype(dtype.numpy), pairs[:, 1].astype(dtype.numpy)
    t, n = f"tensor<{len(pairs)}x{ELEMENT_TYPES[dtype]}>", len(pairs)
    types = [t, t, f"tensor<{n}xf32>", t]
    program = (f"func.func @main(%a: {t}, %b: {t}) -> ({', '.join(types)}) {{\n"
               f"  %d = stablehlo.divide %a, %b : {t}\n"
               f"  %r = stablehlo.remainder %a, %b : {t}\n"
               f"  %f = stablehlo.convert %a : ({t}) -> tensor<{n}xf32>\n"
               f"  %c = stablehlo.clamp %b, %a, %b : {t}\n"
               f"  return %d, %r, %f, %c : {', '.join(types)}\n}}")
    want = evaluate(program, [a, b])
    if dtype is DType.INT4:  # -7 / 2: truncation gives -3 where floor division gives -4
        index = int(np.flatnonzero((pairs[:, 0] == -7) & (pairs[:, 1] == 2))[0])
        assert int(want[0][index]) == -3
    model = from_mlir(program)
    for got in (run_model(model, [a, b]), evaluate(to_mlir_text(model), [a, b])):
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.dtype == w.dtype, index
            np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64),
                                          err_msg=f"result {index}")
