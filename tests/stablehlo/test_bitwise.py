"""Bitwise ops on integers (and, or, xor, not, shifts, popcnt, count_leading_zeros): the
IR's registry ops equal the StableHLO reference interpreter on the same program, for
every integer width, both signs, shift amounts past the bit width and negative ones; the
IR exported back to StableHLO too, and exported to ONNX in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text
from irbridge.converters.stablehlo._mlir import ELEMENT_TYPES
from irbridge.dtypes import DType
from irbridge.executor import run_model

BINARY = ["and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"]
UNARY = ["not", "popcnt", "count_leading_zeros"]
DTYPES = [DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32, DType.UINT32,
          DType.INT64, DType.UINT64]


def _program(el: str, n: int) -> str:
    t = f"tensor<{n}x{el}>"
    lines = [f"  %b{i} = stablehlo.{op} %a, %s : {t}" for i, op in enumerate(BINARY)]
    lines += [f"  %u{i} = stablehlo.{op} %a : {t}" for i, op in enumerate(UNARY)]
    results = [f"%b{i}" for i in range(len(BINARY))] + [f"%u{i}" for i in range(len(UNARY))]
    count = len(results)
    return (f"func.func @main(%a: {t}, %s: {t}) -> ({', '.join([t] * count)}) {{\n"
            + "\n".join(lines)
            + f"\n  return {', '.join(results)} : {', '.join([t] * count)}\n}}")


def _operands(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype.numpy)
    bits = info.bits
    rng = np.random.default_rng(bits)
    values = np.array([0, 1, 2, 5, info.max, info.min, info.max // 3, info.min + 1],
                      dtype=dtype.numpy)
    values = np.concatenate([values, rng.integers(info.min, info.max, 8, dtype=dtype.numpy,
                                                  endpoint=True)])
    amounts = [0, 1, 3, bits - 1, bits, bits + 5, 2 * bits]
    if info.min < 0:
        amounts += [-1, -bits]
    shifts = np.resize(np.array(amounts, dtype=dtype.numpy), values.shape)
    return values, shifts


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_bitwise_ops_match_the_reference_interpreter(dtype: DType) -> None:
    a, s = _operands(dtype)
    program = _program(ELEMENT_TYPES[dtype], a.size)
    want = evaluate(program, [a, s])
    model = from_mlir(program)
    assert not [n for n in model.graphs[0].nodes if n.is_opaque]
    got = run_model(model, [a, s])
    for name, g, w in zip(BINARY + UNARY, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
        assert g.dtype == w.dtype, name
    back = evaluate(to_mlir_text(model), [a, s])
    for name, g, w in zip(BINARY + UNARY, back, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_shifts_popcnt_clz_in_onnxruntime(dtype: DType) -> None:
    """The ONNX decompositions (BitShift on the unsigned view, selects on int64, a byte
    table for popcnt, a binary search for clz) equal the reference interpreter."""
    a, s = _operands(dtype)
    program = _program(ELEMENT_TYPES[dtype], a.size)
    want = evaluate(program, [a, s])
    proto = to_onnx(from_mlir(program))
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, dict(zip(names, [a, s], strict=True)))
    for name, g, w in zip(BINARY + UNARY, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("dtype", [*DTYPES, DType.BOOL], ids=lambda d: d.short)
def test_bitwise_and_or_xor_not_in_onnxruntime(dtype: DType) -> None:
    el = ELEMENT_TYPES[dtype]
    t = f"tensor<6x{el}>"
    program = (f"func.func @main(%a: {t}, %b: {t}) -> ({t}, {t}, {t}, {t}) {{\n"
               f"  %0 = stablehlo.and %a, %b : {t}\n  %1 = stablehlo.or %a, %b : {t}\n"
               f"  %2 = stablehlo.xor %a, %b : {t}\n  %3 = stablehlo.not %a : {t}\n"
               f"  return %0, %1, %2, %3 : {t}, {t}, {t}, {t}\n}}")
    if dtype is DType.BOOL:
        a = np.array([0, 0, 1, 1, 0, 1], bool)
        b = np.array([0, 1, 0, 1, 1, 1], bool)
    else:
        a, _ = _operands(dtype)
        a, b = a[:6], a[6:12]
    want = evaluate(program, [a, b])
    proto = to_onnx(from_mlir(program))
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for g, w in zip(session.run(None, dict(zip(names, [a, b], strict=True))), want,
                    strict=True):
        np.testing.assert_array_equal(g, w)
