"""The ONNX exporter is never silently wrong, by class: every registry op, at every element
type its type inference allows, exports to a file that passes the ONNX checker and runs in
the real onnxruntime with the IR reference executor's results, or is refused with one line
naming the node; and no emitter drops an attribute."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.converters.onnx.verify import verify_onnx
from irbridge.dtypes import DType
from irbridge.errors import ExportError, IrbridgeError
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Tensor, TensorType, Value
from irbridge.ops import registry
from irbridge.ops.examples import OpExample, examples

F32, F64, I64, BOOL = DType.FLOAT32, DType.FLOAT64, DType.INT64, DType.BOOL
DTYPES = [DType.BOOL, DType.INT8, DType.UINT8, DType.INT32, DType.INT64, DType.FLOAT16,
          DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64]
OPSETS = [13, 18, 21]  # oldest supported, the default, one with newer op versions


def _data(ty: TensorType, rng: np.random.Generator) -> np.ndarray:
    shape = ty.static_shape()
    if ty.dtype.is_float:
        return rng.standard_normal(shape).astype(ty.dtype.numpy)
    if ty.dtype is DType.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    signed = np.issubdtype(ty.dtype.numpy, np.signedinteger)
    values = rng.integers(-3 if signed else 1, 4, shape)
    return np.where(values == 0, 1, values).astype(ty.dtype.numpy)  # no division by 0


def _retyped(name: str, ex: OpExample, dtype: DType) -> tuple[Model, dict[str, np.ndarray]]:
    """The op's registry example with its data inputs (float32 ones, else bool ones) of
    `dtype`; index, axis, shape and condition inputs keep theirs."""
    rng = np.random.default_rng(0)
    graph = Graph(name)
    model = Model(graphs=[graph], name=name)
    b = GraphBuilder(graph, model)
    operands: list[Value | None] = []
    feeds: dict[str, np.ndarray] = {}
    data = F32 if any(t is not None and t.dtype is F32 for t in ex.inputs) else BOOL
    for index, ty in enumerate(ex.inputs):
        if ty is None:
            operands.append(None)
            continue
        if ty.dtype is data:
            ty = TensorType(dtype, ty.shape)
        if index in ex.values:
            data = np.asarray(ex.values[index]).astype(ty.dtype.numpy)
            operands.append(b.parameter(Tensor.from_array(f"in{index}", data)))
        else:
            value = graph.add_input(f"in{index}", ty)
            feeds[value.name] = _data(ty, rng)
            operands.append(value)
    count = {"split": 2, "if": 1, "loop": 2}.get(name)
    graph.set_outputs(b.op_multi(name, operands, ex.attrs, num_outputs=count))
    return model, feeds


INTEGER_ROUNDED = {"attention"}
"""Ops whose reference computes q @ k^T in the integer type itself (int8 wraps around):
no float export can match it; their integer cases are left out."""


def _cases() -> list[Any]:
    cases = []
    for name, ex in examples().items():
        for dtype in DTYPES:
            if name in INTEGER_ROUNDED and not dtype.is_float:
                continue
            try:
                model, feeds = _retyped(name, ex, dtype)
                run_model(model, feeds)
            except IrbridgeError:
                continue  # type inference refuses it, or the reference has no such case
            cases.append(pytest.param(name, dtype, id=f"{name}-{dtype.short}"))
    return cases


CASES = _cases()


def test_the_sweep_covers_every_op_at_several_types() -> None:
    ops = {p.values[0] for p in CASES}
    assert ops == set(examples())
    assert len(CASES) > 3 * len(ops)
    assert {p.values[1] for p in CASES if p.values[0] == "mul"} == set(DTYPES)


@pytest.mark.parametrize(("name", "dtype"), CASES)
def test_every_op_at_every_type_exports_right_or_is_refused(name: str, dtype: DType) -> None:
    model, feeds = _retyped(name, examples()[name], dtype)
    for opset in OPSETS:
        try:
            proto = to_onnx(model, opset=opset, optimize=False)  # checker, full_check
        except ExportError as exc:
            text = str(exc)
            # refused on purpose, with the node and the op named: never the checker
            assert "\n" not in text and f"node #0 {name}" in text, text
            assert "fails the ONNX checker" not in text, text
            assert ("cannot export to ONNX" in text or "needs opset" in text
                    or "has no ONNX mapping" in text), text  # special functions (erfinv, ...)
            continue
        report = verify_onnx(model, proto, feeds)
        assert not report.error, f"opset {opset}: {report.error}"
        # integer outputs of float math (exp of int8, ...) are cast once from the float
        # result: truncation may land one unit apart when the float sits at an integer
        slack = 1.0 if name in _float_math() and not dtype.is_float else 0.0
        for check in report.outputs:
            assert check.passed or (check.dtype not in ("f16", "f32", "f64", "bf16")
                                    and check.max_abs_error <= slack), \
                f"opset {opset}: {report.summary()} {check}"


def _float_math() -> set[str]:
    from irbridge.converters.onnx.export import FLOAT_MATH

    return FLOAT_MATH


UNSPECIFIED = {("topk", "sorted")}
"""Attribute values whose result the op leaves open (topk sorted=False: any order)."""


def _attr_variants() -> list[Any]:
    """Every numeric / bool / choice attribute of every op moved off its example value."""
    from irbridge.ops.registry import AttrKind

    cases = []
    for name, ex in examples().items():
        for spec in registry.get(name).attrs:
            if (name, spec.name) in UNSPECIFIED:
                continue
            current = ex.attrs.get(spec.name, spec.default)
            number = current if isinstance(current, int | float) and np.isfinite(current) else 0
            values: list[Any] = {
                AttrKind.BOOL: [not current],
                AttrKind.FLOAT: [number * 1.7 + 0.3, 0.0],
                AttrKind.INT: [int(number) + 1, int(number) - 1, 0],
            }.get(spec.kind, [c for c in spec.choices if c != current])
            for value in values:
                variant = OpExample(ex.inputs, {**ex.attrs, spec.name: value}, ex.values)
                try:
                    model, feeds = _retyped(name, variant, F32)
                    run_model(model, feeds)
                except IrbridgeError:
                    continue  # not a valid attribute value for this example
                cases.append(pytest.param(name, spec.name, value,
                                          id=f"{name}-{spec.name}={value}"))
    return cases


@pytest.mark.parametrize(("name", "attr", "value"), _attr_variants())
def test_no_attribute_is_dropped(name: str, attr: str, value: Any) -> None:
    """An emitter that ignores an attribute (softplus's threshold did) is caught: each
    attribute moved off its example value still gives the IR's result in onnxruntime."""
    ex = examples()[name]
    model, feeds = _retyped(name, OpExample(ex.inputs, {**ex.attrs, attr: value}, ex.values),
                            F32)
    try:
        proto = to_onnx(model, optimize=False)
    except ExportError as exc:  # refused on purpose (e.g. needs a newer opset), one line
        assert "\n" not in str(exc) and "fails the ONNX checker" not in str(exc)
        return
    report = verify_onnx(model, proto, feeds)
    assert report.passed, report.summary()
