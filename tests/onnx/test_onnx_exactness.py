"""The cases of the OpInfo sweep (issue 13) the ONNX exporter got wrong, each checked against
torch: softplus's threshold, the lowerings of torch's logaddexp / isclose / isfinite /
logical_not on bool and float data, clamp with tensor bounds, a complex Cast, and
_safe_softmax rows of all -inf (IR reference, onnxruntime, StableHLO interpreter)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torchtools import FnModule

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.converters.onnx.verify import verify_onnx
from irbridge.dtypes import DType
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, TensorType, Value
from irbridge.ops import registry

F32, I64, BOOL = DType.FLOAT32, DType.INT64, DType.BOOL

# -- the cases of the OpInfo sweep ----------------------------------------------------------

def _model(build: Any, *types: TensorType) -> Model:
    graph = Graph("g")
    b = GraphBuilder(graph)
    xs = [graph.add_input(f"x{i}", t) for i, t in enumerate(types)]
    graph.set_outputs(list(build(b, *xs)))
    return Model(graphs=[graph])


def _check(model: Model, inputs: Sequence[np.ndarray], want: Sequence[np.ndarray],
           **tolerance: float) -> None:
    """IR reference and onnxruntime both give `want` (computed by torch)."""
    for got in (run_model(model, list(inputs)),):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, **tolerance)
    report = verify_onnx(model, to_onnx(model), list(inputs))
    assert report.passed, report.summary()


@pytest.mark.parametrize(("beta", "threshold"), [(2.0, 1.0), (0.5, 3.0), (1.0, 0.5),
                                                 (3.0, 20.0), (1.0, 20.0)])
def test_softplus_keeps_threshold(beta: float, threshold: float) -> None:
    """torch: x where beta * x > threshold, else log1p(exp(beta * x)) / beta. Dropping the
    threshold is off by up to log(2)/beta near it (0.0109 on the OpInfo sample)."""
    x = np.linspace(-4, 8, 97, dtype=np.float32)
    want = torch.nn.functional.softplus(torch.from_numpy(x), beta, threshold).numpy()
    model = _model(lambda b, v: [b.op("softplus", [v], {"beta": beta, "threshold": threshold})],
                   TensorType(F32, x.shape))
    _check(model, [x], [want], rtol=1e-6, atol=1e-6)  # float32 math on both sides
    got = verify_onnx(model, to_onnx(model), [x])
    assert got.max_abs_error < 1e-6


def test_bool_and_float_lowerings_of_logical_torch_ops() -> None:
    """The neutral lowerings of torch ops that met ONNX ops without bool / float kernels:
    logical_not of float (Not takes bool), a product of bools (Mul takes no bool), argmax
    of bool (ArgMax takes no bool), isfinite via abs / less / and."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    x[0, 1], x[1, 2], x[2, 3] = 0.0, np.inf, np.nan
    m = rng.integers(0, 2, (3, 5)).astype(bool)

    def build(b: GraphBuilder, xv: Value, mv: Value) -> list[Value]:
        nonzero = b.op("logical_not", [xv])                         # Not on float
        both = b.op("mul", [mv, b.op("logical_not", [mv])])          # Mul on bool
        first = b.op("argmax", [mv], {"axis": 1})                    # ArgMax on bool
        finite = b.op("less", [b.op("abs", [xv]), b.constant(np.float32(np.inf))])
        return [nonzero, both, first, finite]

    model = _model(build, TensorType(F32, x.shape), TensorType(BOOL, m.shape))
    tx, tm = torch.from_numpy(x), torch.from_numpy(m)
    want = [torch.logical_not(tx).numpy(), (tm * ~tm).numpy(),
            torch.argmax(tm.to(torch.int32), dim=1).numpy(), torch.isfinite(tx).numpy()]
    _check(model, [x, m], want)


def test_clip_with_tensor_bounds() -> None:
    """torch.clamp with tensor min / max: ONNX Clip takes scalar bounds only."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    lo = rng.uniform(-1, 0, (4, 1)).astype(np.float32)
    hi = rng.uniform(0, 1, (6,)).astype(np.float32)
    model = _model(lambda b, xv, lv, hv: [b.op("clip", [xv, lv, hv])],
                   TensorType(F32, x.shape), TensorType(F32, lo.shape), TensorType(F32, hi.shape))
    want = torch.clamp(torch.from_numpy(x), torch.from_numpy(lo), torch.from_numpy(hi))
    _check(model, [x, lo, hi], [want.numpy()])


def test_clip_of_ints_with_scalar_tensor_bounds() -> None:
    x = np.arange(-5, 7, dtype=np.int64).reshape(3, 4)
    lo, hi = np.array(-2, np.int64), np.array(3, np.int64)
    model = _model(lambda b, xv, lv, hv: [b.op("clip", [xv, lv, hv])],
                   TensorType(I64, x.shape), TensorType(I64, ()), TensorType(I64, ()))
    _check(model, [x, lo, hi], [np.clip(x, lo, hi)])


@pytest.mark.parametrize("axis", [-1, 0])
def test_safe_softmax_rows_of_all_minus_inf_give_zero(axis: int) -> None:
    """torch's _safe_softmax (fully masked attention rows): 0 where every element of the
    row is -inf, in the IR reference, in onnxruntime and in the StableHLO interpreter."""
    x = np.random.default_rng(5).standard_normal((4, 5)).astype(np.float32)
    x[1, :] = -np.inf
    x[:, 2] = -np.inf
    x[3, 0] = -np.inf
    model = _model(lambda b, v: [b.op("softmax", [v], {"axis": axis, "safe": True})],
                   TensorType(F32, x.shape))
    want = torch.ops.aten._safe_softmax(torch.from_numpy(x), axis).numpy()
    assert not np.isnan(want).any() and (want == 0).any()
    _check(model, [x], [want], rtol=1e-6, atol=1e-7)
    plain = _model(lambda b, v: [b.op("softmax", [v], {"axis": axis})], TensorType(F32, x.shape))
    assert np.isnan(run_model(plain, [x])[0]).any()  # the plain op keeps softmax's NaN

    from irbridge.converters.stablehlo import build_module, evaluate

    got = evaluate(build_module(model), [x])
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-7)


def test_registry_softmax_attrs() -> None:
    schema = registry.get("softmax")
    assert "safe" in {a.name for a in schema.attrs}


def _special_values() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(6)
    a = torch.randn(3, 5, generator=g)
    b = torch.randn(3, 5, generator=g)
    a[0, 0], a[0, 1], a[1, 1], b[2, 2] = 0.0, float("inf"), float("nan"), float("-inf")
    b[1, 0] = a[1, 0]
    return a, b


TORCH_CASES = {
    "logaddexp": (lambda a, b: torch.logaddexp(a, b), False),
    "isclose": (lambda a, b: torch.isclose(a, b, rtol=1e-3, atol=1e-2), True),
    "isfinite": (lambda a, b: torch.isfinite(a) & torch.isfinite(b), True),
    "logical_not": (lambda a, b: torch.logical_not(a), False),
    "clamp_tensor": (lambda a, b: torch.clamp(a, torch.minimum(a, b), b.abs()), False),
    "softplus": (lambda a, b: torch.nn.functional.softplus(a, beta=2.0, threshold=1.0), False),
    "masked_safe_softmax": (lambda a, b: torch.ops.aten._safe_softmax(
        a.masked_fill(b > 0.5, float("-inf")), -1), False),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_torch_ops_of_the_sweep_capture_and_export_right(name: str) -> None:
    """The OpInfo cases that the exporter got wrong, through irbridge's real PyTorch
    capture: the IR matches eager torch, and the ONNX file matches the IR in onnxruntime
    (with the special values the OpInfo samples carry: 0, inf, nan, -inf)."""
    from irbridge.converters.pytorch import capture, verify

    fn, _ = TORCH_CASES[name]
    a, b = _special_values()
    if name == "masked_safe_softmax":
        b = torch.tensor([[1.0] * 5, [0.0] * 5, [1.0, 0, 1, 0, 1]])  # row 0 fully masked
        a = a.nan_to_num(0.0, 1.0, -1.0)
    if name in ("logaddexp", "softplus", "clamp_tensor"):
        a = a.nan_to_num(0.0, 5.0, -5.0)
        b = b.nan_to_num(0.0, 5.0, -5.0)
    module = FnModule(fn)
    result = capture(module, (a, b))
    assert result.opaque_count == 0
    check = verify(result, module)
    assert check.passed, check.summary()
    report = verify_onnx(result.model, to_onnx(result.model), [a.numpy(), b.numpy()])
    assert report.passed, report.summary()
