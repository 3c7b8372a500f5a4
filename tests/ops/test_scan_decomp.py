"""The registry decompositions of cummax, cummin and logcumsumexp
(irbridge/ops/_misc_decomp.py), exported to ONNX (onnxruntime) and StableHLO (the reference
interpreter), against eager torch and numpy.

cummax / cummin are exact: values bit for bit (NaN where torch has NaN) and the same int64
indices, ties and NaN included. logcumsumexp is computed in float64 like torch's CPU kernel
(which accumulates float32 in double) but combined in a log-step order instead of left to
right, so results differ from torch's by float64 rounding only: float32 results within one
float32 ulp (rtol 1.2e-7), float64 within rtol 1e-13 (a few dozen float64 roundings of
log(1 + exp(.)) per element, each at most one ulp of a value of the output's size).
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
from irbridge.errors import ExportError
from irbridge.ir import Graph, Model, TensorType


def _model(op: str, x: np.ndarray, attrs: dict[str, object]) -> Model:
    graph = Graph()
    value = graph.add_input("x", TensorType(DType.from_numpy(x.dtype), x.shape))
    outs = GraphBuilder(graph).op_multi(op, [value], attrs)
    graph.set_outputs(outs)
    return Model(graphs=[graph], name=op)


def _exported(op: str, x: np.ndarray, **attrs: object) -> dict[str, list[np.ndarray]]:
    model = _model(op, x, attrs)
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return {"onnxruntime": session.run(None, {"x": x}),
            "stablehlo": [np.asarray(v) for v in evaluate(to_mlir_text(model), [x])]}


def _awkward(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    """Small integers (many ties), with NaN and +-inf sprinkled in for floats."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, flat.size // 6, replace=False)] = np.nan
        flat[rng.choice(flat.size, flat.size // 8, replace=False)] = np.inf
        flat[rng.choice(flat.size, flat.size // 8, replace=False)] = -np.inf
    return x


CASES = [((5, 5, 5), 1), ((7,), 0), ((3, 13), -1), ((1, 4), 0), ((2, 33), 1), ((4, 1), 1),
         ((16, 3), 0)]


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize(("shape", "axis"), CASES)
def test_cum_extreme_matches_torch_exactly(op: str, dtype: type, shape: tuple[int, ...],
                                           axis: int) -> None:
    x = _awkward(shape, dtype, seed=len(shape) * 10 + shape[0])
    want_values, want_indices = getattr(torch, op)(torch.from_numpy(x), axis)
    for backend, (values, indices) in _exported(op, x, axis=axis).items():
        where = f"{op} {shape} axis {axis} {np.dtype(dtype).name} in {backend}"
        assert values.dtype == x.dtype and indices.dtype == np.int64, where
        np.testing.assert_array_equal(values, want_values.numpy(), err_msg=where)
        np.testing.assert_array_equal(indices, want_indices.numpy(), err_msg=where)


def _log_cum_sum_exp(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """numpy's left-to-right logaddexp in float64 (the exclusive / reverse forms too)."""
    moved = np.moveaxis(x.astype(np.float64), axis, 0)
    if reverse:
        moved = moved[::-1]
    y = np.logaddexp.accumulate(moved, axis=0)
    if exclusive:
        y = np.concatenate([np.full_like(y[:1], -np.inf), y[:-1]])
    if reverse:
        y = y[::-1]
    return np.moveaxis(y, 0, axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis"), CASES)
def test_logcumsumexp_matches_torch(dtype: type, shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(shape[0])
    # wide range: later elements far above earlier ones (no global shift may lose them)
    spread = (rng.standard_normal(shape) * 40).astype(dtype)
    for x in (spread, _awkward(shape, dtype, seed=3)):
        with np.errstate(invalid="ignore"):
            want = torch.logcumsumexp(torch.from_numpy(x), axis).numpy()
        for backend, (got,) in _exported("logcumsumexp", x, axis=axis).items():
            rtol = 1.2e-7 if dtype == np.float32 else 1e-13
            np.testing.assert_allclose(got, want, rtol=rtol, atol=0,
                                       err_msg=f"{shape} axis {axis} in {backend}")


@pytest.mark.parametrize(("exclusive", "reverse"), [(True, False), (False, True), (True, True)])
def test_logcumsumexp_exclusive_and_reverse(exclusive: bool, reverse: bool) -> None:
    x = (np.random.default_rng(1).standard_normal((3, 9)) * 5).astype(np.float64)
    want = _log_cum_sum_exp(x, 1, exclusive, reverse)
    for backend, (got,) in _exported("logcumsumexp", x, axis=1, exclusive=exclusive,
                                     reverse=reverse).items():
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0, err_msg=backend)


def test_logcumsumexp_axis_as_a_tensor_input_is_refused_in_one_line() -> None:
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.FLOAT32, (2, 3)))
    axis = graph.add_input("axis", TensorType(DType.INT64, (1,)))
    graph.set_outputs([GraphBuilder(graph).op("logcumsumexp", [x, axis])])
    with pytest.raises(ExportError) as info:
        to_onnx(Model(graphs=[graph], name="m"))
    message = str(info.value)
    assert "\n" not in message and "logcumsumexp" in message and "tensor input" in message
