"""Tests of irbridge/ops/tensor.py: shape inference (symbolic dims included), cost, and the
numpy references checked against torch or onnx's reference evaluator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.executor import run_graph
from irbridge.ir import Dim, Graph, SymDim, Tensor, TensorType, Value
from irbridge.ops import registry
from irbridge.ops.datadep import fits

B = SymDim("batch")
S = SymDim("seq")
F32, I64, BOOL = DType.FLOAT32, DType.INT64, DType.BOOL
BIG = 2**63 - 1
rng = np.random.default_rng(0)


# -- helpers -------------------------------------------------------------------------

def tt(*shape: Dim, dtype: DType = F32) -> TensorType:
    return TensorType(dtype, tuple(shape))


def _ctx(op: str, types: Sequence[TensorType | None], attrs: Mapping[str, Any] | None,
         constants: Sequence[np.ndarray | None] = ()) -> registry.OpContext:
    schema = registry.get(op)
    return registry.OpContext(op, list(types), schema.resolve_attrs(dict(attrs or {}), op),
                              constants=list(constants))


def infer(op: str, types: Sequence[TensorType | None], attrs: Mapping[str, Any] | None = None,
          constants: Sequence[np.ndarray | None] = ()) -> list[TensorType]:
    return registry.get(op).infer(_ctx(op, types, attrs, constants))


def shape(op: str, types: Sequence[TensorType | None], attrs: Mapping[str, Any] | None = None,
          constants: Sequence[np.ndarray | None] = ()) -> tuple[Dim, ...] | None:
    return infer(op, types, attrs, constants)[0].shape


def flops(op: str, types: Sequence[TensorType | None],
          attrs: Mapping[str, Any] | None = None) -> int:
    ctx = _ctx(op, types, attrs)
    ctx.output_types = list(registry.get(op).infer(ctx))
    result = registry.get(op).cost(ctx)
    assert result.macs == 0
    return result.other


def _type_of(a: np.ndarray | None) -> TensorType | None:
    return None if a is None else TensorType(DType.from_numpy(a.dtype), a.shape)


def _no_subgraphs(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    raise AssertionError("no subgraph expected")


def run(op: str, arrays: Sequence[np.ndarray | None],
        attrs: Mapping[str, Any] | None = None) -> list[np.ndarray]:
    """Infer output types (input values count as known constants), run the reference and
    check that every result fits its inferred type."""
    schema = registry.get(op)
    ctx = _ctx(op, [_type_of(a) for a in arrays], attrs, list(arrays))
    types = schema.infer(ctx)
    results = schema.reference(list(arrays), ctx.attrs,
                               registry.RefContext(list(types), _no_subgraphs, op))
    assert len(results) == len(types)
    for array, t in zip(results, types, strict=True):
        assert array.dtype == t.dtype.numpy, (array.dtype, t)
        assert t.shape is not None and array.ndim == len(t.shape), (array.shape, t)
        assert all(fits(d, n) for d, n in zip(t.shape, array.shape, strict=True)), \
            (array.shape, t)
    return results


def run1(op: str, arrays: Sequence[np.ndarray | None],
         attrs: Mapping[str, Any] | None = None) -> np.ndarray:
    return run(op, arrays, attrs)[0]


def onnx_ref(op_type: str, feeds: Sequence[np.ndarray | None], outputs: int = 1,
             **attrs: Any) -> list[np.ndarray]:
    """Run one ONNX node with onnx's reference evaluator (latest opset)."""
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(feeds)]
    node = helper.make_node(op_type, names, [f"out{i}" for i in range(outputs)], **attrs)
    data = {n: a for n, a in zip(names, feeds, strict=True) if a is not None}
    return list(ReferenceEvaluator(node).run(None, data))


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def randn(*dims: int) -> np.ndarray:
    return rng.standard_normal(dims).astype(np.float32)


def t_(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.copy())


# -- constants and creation ------------------------------------------------------------

def test_constant() -> None:
    data = randn(2, 3)
    tensor = Tensor.from_array("c", data)
    assert infer("constant", [], {"value": tensor}) == [tt(2, 3)]
    assert flops("constant", [], {"value": tensor}) == 0
    np.testing.assert_array_equal(run1("constant", [], {"value": tensor}), data)
    ctx = registry.RefContext([tt(2)], _no_subgraphs, "constant")
    with pytest.raises(OpError, match="no data"):
        registry.get("constant").reference([], {"value": Tensor("w", F32, (2,))}, ctx)


def test_full() -> None:
    attrs = {"shape": (2, 3), "value": 1.5, "dtype": DType.FLOAT16}
    assert shape("full", [], attrs) == (2, 3)
    assert flops("full", [], attrs) == 0
    np.testing.assert_array_equal(run1("full", [], attrs),
                                  torch.full((2, 3), 1.5, dtype=torch.float16).numpy())
    assert run1("full", [], {"shape": (2,)}).dtype == np.float32
    with pytest.raises(OpError, match="negative"):
        infer("full", [], {"shape": (2, -1)})


@pytest.mark.parametrize("start, limit, delta, dtype", [
    (0, 5, 1, I64), (2, 11, 3, I64), (5, 0, -2, I64), (3, 3, 1, I64), (4, 0, 1, I64),
    (0.0, 1.0, 0.3, F32), (-1.5, 2.0, 0.5, DType.FLOAT64)])
def test_range(start: float, limit: float, delta: float, dtype: DType) -> None:
    attrs = {"start": start, "limit": limit, "delta": delta, "dtype": dtype}
    wide = np.int64 if dtype.is_integer else np.float64
    expected = onnx_ref("Range", [np.array(v, wide) for v in (start, limit, delta)])[0]
    expected = expected.astype(dtype.numpy)
    assert shape("range", [], attrs) == expected.shape
    np.testing.assert_allclose(run1("range", [], attrs), expected, rtol=1e-6)
    assert flops("range", [], attrs) == 0


def test_range_rejects_zero_delta() -> None:
    with pytest.raises(OpError, match="delta"):
        infer("range", [], {"start": 0, "limit": 3, "delta": 0})


@pytest.mark.parametrize("start, end", [(0, 0), (1, 0), (-2, 0), (0, -1), (1, 3), (-10, 10),
                                        (3, 1)])
def test_shape_of(start: int, end: int) -> None:
    x = randn(2, 3, 4, 5)
    onnx_attrs = {"start": start} if end == 0 else {"start": start, "end": end}
    expected = onnx_ref("Shape", [x], **onnx_attrs)[0]
    np.testing.assert_array_equal(run1("shape_of", [x], {"start": start, "end": end}), expected)
    assert shape("shape_of", [tt(B, 3, S, 5)], {"start": start, "end": end}) == expected.shape


def test_shape_of_symbolic_and_unknown_rank() -> None:
    assert infer("shape_of", [tt(B, 3)]) == [tt(2, dtype=I64)]
    assert shape("shape_of", [TensorType(F32, None)]) == (None,)
    assert flops("shape_of", [tt(B, 3)]) == 0


# -- metadata-only ops ----------------------------------------------------------------

def test_identity() -> None:
    x = randn(2, 3)
    assert infer("identity", [tt(B, 3)]) == [tt(B, 3)]
    assert flops("identity", [tt(2, 3)]) == 0
    np.testing.assert_array_equal(run1("identity", [x]), x)


@pytest.mark.parametrize("target", [(6, 4), (-1,), (0, -1), (2, 0, 2, -1), (4, -1, 3), (0, 0, 4)])
def test_reshape_matches_onnx(target: tuple[int, ...]) -> None:
    x = randn(2, 3, 4)
    expected = onnx_ref("Reshape", [x, ints(*target)])[0]
    np.testing.assert_array_equal(run1("reshape", [x], {"shape": target}), expected)
    np.testing.assert_array_equal(run1("reshape", [x, ints(*target)]), expected)


@pytest.mark.parametrize("in_shape, target, expected", [
    ((B, 3, 4), (0, -1), (B, 12)),
    ((B, 3, 4), (-1, 3, 4), (B, 3, 4)),
    ((B, 3, 4), (-1, 4), (None, 4)),         # batch*3 is not one symbol
    ((B, 3, 4), (0, 12), (B, 12)),
    ((B, S, 8), (0, 0, 2, -1), (B, S, 2, 4)),
    ((B, S, 8), (-1, 8), (None, 8)),
    ((None, 3), (0, -1), (None, 3)),
    ((2, 3, 4), (-1,), (24,)),
])
def test_reshape_infer(in_shape: tuple[Dim, ...], target: tuple[int, ...],
                       expected: tuple[Dim, ...]) -> None:
    assert shape("reshape", [tt(*in_shape)], {"shape": target}) == expected


def test_reshape_shape_input() -> None:
    shape_t = tt(3, dtype=I64)
    assert shape("reshape", [tt(B, 4), shape_t]) == (None, None, None)  # value unknown
    assert shape("reshape", [tt(B, 4), shape_t], constants=[None, ints(0, 2, 2)]) == (B, 2, 2)
    assert shape("reshape", [tt(B, 4), tt(None, dtype=I64)]) is None
    assert flops("reshape", [tt(2, 6)], {"shape": (3, 4)}) == 0


@pytest.mark.parametrize("in_shape, target, problem", [
    ((2, 3), (4, 2), "cannot reshape"), ((2, 3), (-1, -1), "one -1"),
    ((2, 3), (5, -1), "cannot reshape"), ((2, 3), (0, 0, 0), "rank 2"),
    ((2, 0), (0, 0, -1), "other output dim is 0")])
def test_reshape_errors(in_shape: tuple[int, ...], target: tuple[int, ...], problem: str) -> None:
    with pytest.raises(OpError, match=problem):
        infer("reshape", [tt(*in_shape)], {"shape": target})


@pytest.mark.parametrize("axes", [(), (1,), (-1, 0), (0, 1, 3)])
def test_squeeze(axes: tuple[int, ...]) -> None:
    x = randn(1, 1, 3, 1)
    expected = torch.squeeze(t_(x), dim=axes).numpy() if axes else torch.squeeze(t_(x)).numpy()
    np.testing.assert_array_equal(run1("squeeze", [x], {"axes": axes}), expected)
    assert flops("squeeze", [tt(1, 3)], {"axes": axes[:1] and (0,)}) == 0


def test_squeeze_symbolic() -> None:
    assert shape("squeeze", [tt(B, 1, 3)], {"axes": (1,)}) == (B, 3)
    assert shape("squeeze", [tt(B, 1, 3)], {"axes": (0,)}) == (1, 3)  # batch promised to be 1
    assert shape("squeeze", [tt(B, 1, 3)]) is None                   # batch might be 1
    assert shape("squeeze", [tt(SymDim("n", min=2), 1, 3)]) == (SymDim("n", min=2), 3)
    with pytest.raises(OpError, match="size 3"):
        infer("squeeze", [tt(B, 1, 3)], {"axes": (2,)})


@pytest.mark.parametrize("axes", [(0,), (-1,), (1, 3), (-1, 0)])
def test_unsqueeze(axes: tuple[int, ...]) -> None:
    x = randn(2, 3)
    expected = onnx_ref("Unsqueeze", [x, ints(*axes)])[0]
    np.testing.assert_array_equal(run1("unsqueeze", [x], {"axes": axes}), expected)
    in_shape = (B, 3)
    inferred = shape("unsqueeze", [tt(*in_shape)], {"axes": axes})
    assert inferred is not None
    assert [d for d in inferred if d != 1] == [B, 3] and len(inferred) == expected.ndim
    assert flops("unsqueeze", [tt(2, 3)], {"axes": axes}) == 0


def test_unsqueeze_repeated_axis() -> None:
    with pytest.raises(OpError, match="repeated"):
        infer("unsqueeze", [tt(2, 3)], {"axes": (0, -4)})


@pytest.mark.parametrize("start, end", [(1, -1), (0, -1), (0, 1), (2, 2), (-2, -1)])
def test_flatten(start: int, end: int) -> None:
    x = randn(2, 3, 4)
    expected = torch.flatten(t_(x), start, end).numpy()
    attrs = {"start_axis": start, "end_axis": end}
    np.testing.assert_array_equal(run1("flatten", [x], attrs), expected)
    assert flops("flatten", [tt(2, 3, 4)], attrs) == 0


def test_flatten_symbolic_and_errors() -> None:
    assert shape("flatten", [tt(B, 3, 4)]) == (B, 12)
    assert shape("flatten", [tt(B, 3, 4)], {"start_axis": 0}) == (None,)
    assert shape("flatten", [tt(B, 1, 1)], {"start_axis": 0}) == (B,)
    assert shape("flatten", [tt()], {"start_axis": 0}) == (1,)
    with pytest.raises(OpError, match="after"):
        infer("flatten", [tt(2, 3, 4)], {"start_axis": 2, "end_axis": 1})


# -- data movement --------------------------------------------------------------------

def test_permute() -> None:
    x = randn(2, 3, 4)
    np.testing.assert_array_equal(run1("permute", [x], {"perm": (2, 0, 1)}),
                                  t_(x).permute(2, 0, 1).numpy())
    assert shape("permute", [tt(B, S, 4)], {"perm": (1, 2, 0)}) == (S, 4, B)
    assert flops("permute", [tt(2, 3)], {"perm": (1, 0)}) == 0
    with pytest.raises(OpError, match="permutation"):
        infer("permute", [tt(2, 3)], {"perm": (0, 0)})


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ((1,), (3,), (), ()),
    ((0, 1), (BIG, -1), (0, 1), ()),
    ((-1,), (-BIG,), (1,), (-1,)),
    ((10,), (-10,), (2,), (-2,)),
    ((-100, 2), (100, 1), (2, 0), (3, -1)),
    ((3,), (1,), (1,), ()),                   # empty
    ((0, 0), (-1, BIG), (-1, -3), (2, 1)),
])
def test_slice_matches_onnx(starts: tuple[int, ...], ends: tuple[int, ...],
                            axes: tuple[int, ...], steps: tuple[int, ...]) -> None:
    x = randn(4, 5, 6)
    feeds = [x, ints(*starts), ints(*ends), ints(*axes) if axes else None,
             ints(*steps) if steps else None]
    expected = onnx_ref("Slice", feeds)[0]
    attrs = {"starts": starts, "ends": ends, "axes": axes, "steps": steps}
    np.testing.assert_array_equal(run1("slice", [x], attrs), expected)
    assert flops("slice", [tt(4, 5, 6)], attrs) == 0


def test_slice_symbolic() -> None:
    assert shape("slice", [tt(B, 10)], {"starts": (2,), "ends": (BIG,), "axes": (1,)}) == (B, 8)
    assert shape("slice", [tt(B, S)], {"starts": (0,), "ends": (BIG,), "axes": (1,)}) == (B, S)
    assert shape("slice", [tt(B, S)], {"starts": (-1,), "ends": (-BIG,), "axes": (1,),
                                       "steps": (-1,)}) == (B, S)
    assert shape("slice", [tt(B, S)], {"starts": (1,), "ends": (BIG,), "axes": (1,)}) == (B, None)
    assert shape("slice", [tt(B, S)], {"starts": (0,), "ends": (4,), "axes": (1,)}) == (B, None)


@pytest.mark.parametrize("attrs, problem", [
    ({"starts": (0,), "ends": (1, 2)}, "same length"),
    ({"starts": (0,), "ends": (1,), "steps": (0,)}, "step is 0"),
    ({"starts": (0,), "ends": (1,), "axes": (2,)}, "out of range"),
    ({"starts": (0, 0), "ends": (1, 1), "axes": (1, -1)}, "repeated")])
def test_slice_errors(attrs: dict[str, Any], problem: str) -> None:
    with pytest.raises(OpError, match=problem):
        infer("slice", [tt(3, 4)], attrs)


def _single_op_graph(op: str, inputs: Sequence[tuple[str, TensorType]],
                     attrs: Mapping[str, Any], num_outputs: int | None = None) -> Graph:
    graph = Graph("g")
    values = [graph.add_input(name, t) for name, t in inputs]
    graph.set_outputs(GraphBuilder(graph).op_multi(op, values, attrs, num_outputs=num_outputs))
    return graph


def test_concat() -> None:
    a, b, c = randn(2, 3), randn(2, 1), randn(2, 0)
    expected = torch.cat([t_(a), t_(b), t_(c)], dim=-1).numpy()
    np.testing.assert_array_equal(run1("concat", [a, b, c], {"axis": -1}), expected)
    graph = _single_op_graph("concat", [("a", tt(B, 3)), ("b", tt(B, 1))], {"axis": 1})
    assert graph.outputs[0].type == tt(B, 4)
    np.testing.assert_array_equal(run_graph(graph, {"a": a, "b": b})[0],
                                  np.concatenate([a, b], axis=1))
    assert flops("concat", [tt(2, 3), tt(2, 1)], {"axis": 1}) == 0


def test_concat_infer() -> None:
    assert shape("concat", [tt(B, 2), tt(4, 2)], {"axis": 0}) == (None, 2)
    assert shape("concat", [tt(B, 2), tt(0, 2)], {"axis": 0}) == (B, 2)
    assert shape("concat", [tt(B, 2), tt(None, 3)], {"axis": 1}) == (B, 5)
    assert shape("concat", [tt(B, 2), TensorType(F32, None)], {"axis": 1}) == (B, None)
    assert infer("concat", [tt(2, dtype=DType.INT32), tt(3)], {"axis": 0}) == [tt(5)]
    with pytest.raises(OpError, match="differ"):
        infer("concat", [tt(2, 3), tt(3, 3)], {"axis": 1})
    with pytest.raises(OpError, match="rank"):
        infer("concat", [tt(2, 3), tt(3)], {"axis": 0})


def test_split() -> None:
    x = randn(2, 7)
    graph = _single_op_graph("split", [("x", tt(B, 7))], {"axis": 1, "sizes": (3, 4, 0)},
                             num_outputs=3)
    assert [v.type for v in graph.outputs] == [tt(B, 3), tt(B, 4), tt(B, 0)]
    results = run_graph(graph, {"x": x})
    for got, want in zip(results, torch.split(t_(x), [3, 4, 0], dim=1), strict=True):
        np.testing.assert_array_equal(got, want.numpy())
    assert shape("split", [tt(2, S)], {"axis": -1, "sizes": (1, 2)}) == (2, 1)
    assert flops("split", [tt(2, 7)], {"axis": 1, "sizes": (3, 4)}) == 0
    with pytest.raises(OpError, match="add up"):
        infer("split", [tt(2, 7)], {"axis": 1, "sizes": (3, 3)})


@pytest.mark.parametrize("axis, indices", [
    (0, ints(2, -1, 0)), (1, ints(3)[0]), (-1, np.array([[0, -2], [1, 1]], dtype=np.int32)),
    (1, ints())])
def test_gather(axis: int, indices: np.ndarray) -> None:
    x = randn(3, 4, 5)
    expected = onnx_ref("Gather", [x, np.asarray(indices)], axis=axis)[0]
    np.testing.assert_array_equal(run1("gather", [x, np.asarray(indices)], {"axis": axis}),
                                  expected)


def test_gather_infer() -> None:
    assert shape("gather", [tt(B, 10, 4), tt(dtype=I64)], {"axis": 1}) == (B, 4)
    assert shape("gather", [tt(100, 8), tt(B, S, dtype=I64)]) == (B, S, 8)
    assert flops("gather", [tt(100, 8), tt(5, dtype=I64)]) == 0
    with pytest.raises(OpError, match="integer"):
        infer("gather", [tt(3, 4), tt(2)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis: int) -> None:
    x = randn(3, 4)
    indices = rng.integers(0, x.shape[axis], size=(2, 3)).astype(np.int64)  # smaller than x
    expected = torch.gather(t_(x), axis % 2, t_(indices)).numpy()
    np.testing.assert_array_equal(run1("gather_elements", [x, indices], {"axis": axis}), expected)
    full = (2, 4) if axis == 0 else (3, 2)  # ONNX wants x's dims except along the axis
    negative = rng.integers(-x.shape[axis], 0, size=full).astype(np.int64)
    np.testing.assert_array_equal(run1("gather_elements", [x, negative], {"axis": axis}),
                                  onnx_ref("GatherElements", [x, negative], axis=axis % 2)[0])


def test_gather_elements_infer() -> None:
    assert shape("gather_elements", [tt(B, 4), tt(B, 2, dtype=I64)], {"axis": 1}) == (B, 2)
    assert flops("gather_elements", [tt(3, 4), tt(3, 2, dtype=I64)], {"axis": 1}) == 0
    with pytest.raises(OpError, match="rank"):
        infer("gather_elements", [tt(3, 4), tt(3, dtype=I64)], {"axis": 0})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(reduction: str, axis: int) -> None:
    x = randn(4, 5)
    indices = rng.integers(-x.shape[axis], x.shape[axis], size=(3, 2)).astype(np.int64)
    if reduction == "none":  # ONNX leaves repeated indices unspecified: keep them distinct
        indices = np.stack([rng.permutation(x.shape[axis])[:3] for _ in range(2)], axis=1) \
            if axis == 0 else np.stack([rng.permutation(x.shape[axis])[:2] for _ in range(3)])
    updates = randn(3, 2)
    expected = onnx_ref("ScatterElements", [x, indices, updates], axis=axis,
                        reduction=reduction)[0]
    got = run1("scatter_elements", [x, indices, updates], {"axis": axis, "reduction": reduction})
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert flops("scatter_elements", [tt(4, 5), tt(3, 2, dtype=I64), tt(3, 2)],
                 {"axis": axis, "reduction": reduction}) == (0 if reduction == "none" else 6)


def test_scatter_elements_infer() -> None:
    types = [tt(B, 5), tt(B, 2, dtype=I64), tt(B, 2)]
    assert infer("scatter_elements", types, {"axis": 1}) == [tt(B, 5)]
    with pytest.raises(OpError, match="updates"):
        infer("scatter_elements", [tt(3, 5), tt(3, 2, dtype=I64), tt(3, 3)], {"axis": 1})
    with pytest.raises(OpError, match="reduction"):
        infer("scatter_elements", types, {"axis": 1, "reduction": "mean"})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(1, 0, 2, 3), (0, 2, 0, 1)])
def test_pad_matches_onnx(mode: str, pads: tuple[int, ...]) -> None:
    x = randn(3, 4)
    extra = [np.array(2.5, dtype=np.float32)] if mode == "constant" else []
    expected = onnx_ref("Pad", [x, ints(*pads), *extra], mode=mode)[0]
    got = run1("pad", [x], {"pads": pads, "mode": mode, "value": 2.5})
    np.testing.assert_array_equal(got, expected)
    assert flops("pad", [tt(3, 4)], {"pads": pads, "mode": mode}) == 0


def test_pad_negative_crops() -> None:
    x = randn(3, 5)
    expected = torch.nn.functional.pad(t_(x), (-1, 2, 1, -2), value=-3.0).numpy()
    np.testing.assert_array_equal(run1("pad", [x], {"pads": (1, -1, -2, 2), "value": -3.0}),
                                  expected)
    np.testing.assert_array_equal(run1("pad", [x], {"pads": (0, -1, 0, 2), "mode": "reflect"}),
                                  np.pad(x[:, 1:], ((0, 0), (0, 2)), mode="reflect"))


def test_pad_infer() -> None:
    assert shape("pad", [tt(B, 3, S)], {"pads": (0, 1, 0, 0, 1, 0)}) == (B, 5, S)
    assert shape("pad", [tt(B, 3)], {"pads": (1, 0, 0, 0)}) == (None, 3)
    with pytest.raises(OpError, match="2 \\* rank"):
        infer("pad", [tt(2, 3)], {"pads": (1, 1)})
    with pytest.raises(OpError, match="reflect"):
        infer("pad", [tt(2, 3)], {"pads": (0, 3, 0, 0), "mode": "reflect"})
    with pytest.raises(OpError, match="below zero"):
        infer("pad", [tt(2, 3)], {"pads": (0, -2, 0, -2)})


@pytest.mark.parametrize("x_shape, target", [
    ((3, 1), (2, 3, 4)), ((1, 4), (3, 1)), ((2, 1, 4), (1,)), ((1,), (2, 2))])
def test_expand_matches_onnx(x_shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    x = randn(*x_shape)
    expected = onnx_ref("Expand", [x, ints(*target)])[0]
    np.testing.assert_array_equal(run1("expand", [x], {"shape": target}), expected)
    np.testing.assert_array_equal(run1("expand", [x, ints(*target)]), expected)
    assert flops("expand", [tt(*x_shape)], {"shape": target}) == 0


def test_expand_minus_one_and_symbolic() -> None:
    x = randn(2, 1, 4)
    np.testing.assert_array_equal(run1("expand", [x], {"shape": (3, -1, 5, -1)}),
                                  t_(x).expand(3, -1, 5, -1).numpy())
    assert shape("expand", [tt(B, 1, 4)], {"shape": (-1, 3, 4)}) == (B, 3, 4)
    assert shape("expand", [tt(B, 1, 4)], {"shape": (1, 3, 1)}) == (B, 3, 4)
    assert shape("expand", [tt(1, 4), tt(3, dtype=I64)]) == (None, None, 4)  # value unknown
    with pytest.raises(OpError, match="-1"):
        infer("expand", [tt(2)], {"shape": (-1, 2)})
    with pytest.raises(OpError, match="broadcast"):
        infer("expand", [tt(2, 3)], {"shape": (4, 3)})


def test_tile() -> None:
    x = randn(2, 3)
    np.testing.assert_array_equal(run1("tile", [x], {"repeats": (2, 3)}),
                                  t_(x).repeat(2, 3).numpy())
    assert shape("tile", [tt(B, 2, S)], {"repeats": (1, 3, 0)}) == (B, 6, 0)
    assert shape("tile", [tt(B, 2)], {"repeats": (2, 1)}) == (None, 2)
    assert flops("tile", [tt(2, 3)], {"repeats": (2, 3)}) == 0
    with pytest.raises(OpError, match="repeats"):
        infer("tile", [tt(2, 3)], {"repeats": (2,)})


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [0, 1, -2])
def test_trilu(upper: bool, k: int) -> None:
    x = randn(2, 4, 5)
    fn = torch.triu if upper else torch.tril
    np.testing.assert_array_equal(run1("trilu", [x], {"upper": upper, "k": k}),
                                  fn(t_(x), k).numpy())
    assert infer("trilu", [tt(B, S, S)], {"upper": upper, "k": k}) == [tt(B, S, S)]
    assert flops("trilu", [tt(2, 4, 5)]) == 0


def test_trilu_needs_matrix() -> None:
    with pytest.raises(OpError, match="rank >= 2"):
        infer("trilu", [tt(4)])


# -- reductions -----------------------------------------------------------------------

def _torch_prod(x: torch.Tensor, dim: tuple[int, ...], keepdim: bool) -> torch.Tensor:
    for d in sorted((d % x.ndim for d in dim), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


TORCH_REDUCTIONS = {
    "reduce_sum": lambda x, d, k: torch.sum(x, d, keepdim=k),
    "reduce_mean": lambda x, d, k: torch.mean(x, d, keepdim=k),
    "reduce_max": lambda x, d, k: torch.amax(x, d, keepdim=k),
    "reduce_min": lambda x, d, k: torch.amin(x, d, keepdim=k),
    "reduce_prod": _torch_prod,
    "reduce_l2": lambda x, d, k: torch.linalg.vector_norm(x, dim=d, keepdim=k),
    "reduce_log_sum_exp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
}


@pytest.mark.parametrize("op", sorted(TORCH_REDUCTIONS))
@pytest.mark.parametrize("axes, keepdims", [((), False), ((1,), True), ((-1, 0), False)])
def test_reductions(op: str, axes: tuple[int, ...], keepdims: bool) -> None:
    x = randn(3, 4, 5)
    dims = axes or (0, 1, 2)
    expected = TORCH_REDUCTIONS[op](t_(x), dims, keepdims).numpy()
    got = run1(op, [x], {"axes": axes, "keepdims": keepdims})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert flops(op, [tt(3, 4, 5)], {"axes": axes}) == (120 if op == "reduce_l2" else 60)


def test_reduction_infer() -> None:
    assert shape("reduce_sum", [tt(B, S, 8)], {"axes": (1,)}) == (B, 8)
    assert shape("reduce_mean", [tt(B, S, 8)], {"axes": (-1,), "keepdims": True}) == (B, S, 1)
    assert shape("reduce_max", [tt(B, S)]) == ()
    assert shape("reduce_min", [TensorType(F32, None)]) is None
    assert flops("reduce_sum", [tt(B, 8)]) == 0  # unknown element count
    assert run1("reduce_mean", [ints(1, 2)]).dtype == np.int64
    with pytest.raises(OpError, match="out of range"):
        infer("reduce_sum", [tt(2, 3)], {"axes": (2,)})


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis, keepdims, last", [(0, False, False), (-1, True, False),
                                                  (1, False, True)])
def test_arg_reductions(op: str, axis: int, keepdims: bool, last: bool) -> None:
    x = rng.integers(0, 3, size=(3, 4, 5)).astype(np.float32)  # many ties
    onnx_op = "ArgMax" if op == "argmax" else "ArgMin"
    expected = onnx_ref(onnx_op, [x], axis=axis, keepdims=int(keepdims),
                        select_last_index=int(last))[0]
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    np.testing.assert_array_equal(run1(op, [x], attrs), expected)
    if not last:
        torch_fn = torch.argmax if op == "argmax" else torch.argmin
        np.testing.assert_array_equal(run1(op, [x], attrs),
                                      torch_fn(t_(x), axis, keepdim=keepdims).numpy())
    assert infer(op, [tt(B, S, 4)], {"axis": 1}) == [tt(B, 4, dtype=I64)]
    assert flops(op, [tt(3, 4, 5)], attrs) == 60


# -- softmax and scans ----------------------------------------------------------------

@pytest.mark.parametrize("op, torch_fn", [("softmax", torch.softmax),
                                          ("log_softmax", torch.log_softmax)])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(op: str, torch_fn: Any, axis: int) -> None:
    x = randn(3, 4) * 50 + 1000  # large values: needs the max subtraction
    np.testing.assert_allclose(run1(op, [x], {"axis": axis}),
                               torch_fn(t_(x), axis).numpy(), rtol=1e-5, atol=1e-5)
    half = x.astype(np.float16)
    assert run1(op, [half], {"axis": axis}).dtype == np.float16
    assert infer(op, [tt(B, S, 8)], {"axis": axis}) == [tt(B, S, 8)]
    assert flops(op, [tt(3, 4)], {"axis": axis}) == 60
    with pytest.raises(OpError, match="float"):
        infer(op, [tt(3, dtype=I64)])


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, False), (False, True),
                                                (True, True)])
def test_scans(op: str, axis: int, exclusive: bool, reverse: bool) -> None:
    x = (rng.standard_normal((3, 4)) * 0.5 + 1).astype(np.float32)
    onnx_op = "CumSum" if op == "cumsum" else "CumProd"
    expected = onnx_ref(onnx_op, [x, np.array(axis)], exclusive=int(exclusive),
                        reverse=int(reverse))[0]
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    np.testing.assert_allclose(run1(op, [x], attrs), expected, rtol=1e-5)
    if not exclusive and not reverse:
        torch_fn = torch.cumsum if op == "cumsum" else torch.cumprod
        np.testing.assert_allclose(run1(op, [x], attrs), torch_fn(t_(x), axis).numpy(),
                                   rtol=1e-5)
    assert infer(op, [tt(B, S)], attrs) == [tt(B, S)]
    assert flops(op, [tt(3, 4)], attrs) == 12


def test_scan_keeps_int_dtype_and_empty_axis() -> None:
    with pytest.raises(OpError, match="rank >= 1"):
        infer("cumsum", [tt()], {"axis": 0})
    assert run1("cumsum", [ints(1, 2, 3)], {"axis": 0}).dtype == np.int64
    assert run1("cumsum", [np.zeros((0, 2), np.float32)],
                {"axis": 0, "exclusive": True}).shape == (0, 2)


# -- selection ------------------------------------------------------------------------

@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis, k", [(-1, 3), (0, 1), (1, 0), (1, 5)])
def test_topk(largest: bool, axis: int, k: int) -> None:
    x = rng.integers(0, 4, size=(3, 5)).astype(np.float32)  # ties: lower index first
    values, indices = onnx_ref("TopK", [x, ints(k)], outputs=2, axis=axis, largest=int(largest))
    got = run("topk", [x], {"k": k, "axis": axis, "largest": largest})
    np.testing.assert_array_equal(got[0], values)
    np.testing.assert_array_equal(got[1], indices)
    distinct = randn(3, 5)
    want = torch.topk(t_(distinct), k, dim=axis, largest=largest)
    got = run("topk", [distinct], {"k": k, "axis": axis, "largest": largest})
    np.testing.assert_array_equal(got[0], want.values.numpy())
    np.testing.assert_array_equal(got[1], want.indices.numpy())


def test_topk_infer_and_cost() -> None:
    assert infer("topk", [tt(B, 10)], {"k": 3}) == [tt(B, 3), tt(B, 3, dtype=I64)]
    assert infer("topk", [tt(B, S)], {"k": 3}) == [tt(B, 3), tt(B, 3, dtype=I64)]
    assert flops("topk", [tt(4, 10)], {"k": 3}) == 40 * 2
    assert flops("topk", [tt(4, 10)], {"k": 1}) == 40
    with pytest.raises(OpError, match="out of range"):
        infer("topk", [tt(4, 10)], {"k": 11})


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [-1, 0])
def test_sort(descending: bool, axis: int) -> None:
    x = rng.integers(0, 4, size=(4, 6)).astype(np.float32)
    x[1, 2] = np.nan
    want = torch.sort(t_(x), dim=axis, descending=descending, stable=True)
    got = run("sort", [x], {"axis": axis, "descending": descending})
    np.testing.assert_array_equal(got[0], want.values.numpy())
    np.testing.assert_array_equal(got[1], want.indices.numpy())
    assert infer("sort", [tt(B, S)], {"axis": axis}) == [tt(B, S), tt(B, S, dtype=I64)]
    assert flops("sort", [tt(4, 6)], {"axis": -1}) == 24 * 3
    assert flops("sort", [tt(4, S)], {"axis": -1}) == 0


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis: int) -> None:
    indices = np.array([[0, 2, -1], [1, 5, -4]], dtype=np.int64)  # 5 and -4 are out of range
    expected = onnx_ref("OneHot", [indices, np.array(3), np.array([0, 1], np.int64)], axis=axis)[0]
    np.testing.assert_array_equal(run1("one_hot", [indices], {"depth": 3, "axis": axis}),
                                  expected)
    valid = np.array([0, 2, 1])
    np.testing.assert_array_equal(
        run1("one_hot", [valid], {"depth": 4, "dtype": DType.FLOAT32}),
        torch.nn.functional.one_hot(t_(valid), 4).numpy().astype(np.float32))
    assert shape("one_hot", [tt(B, S, dtype=I64)], {"depth": 10, "axis": axis}) == \
        {-1: (B, S, 10), 0: (10, B, S), 1: (B, 10, S)}[axis]
    assert flops("one_hot", [tt(2, 3, dtype=I64)], {"depth": 4}) == 24
    with pytest.raises(OpError, match="integer"):
        infer("one_hot", [tt(2)], {"depth": 3})


def test_non_zero() -> None:
    x = np.array([[0, 1.5, 0], [2, 0, -1]], dtype=np.float32)
    np.testing.assert_array_equal(run1("non_zero", [x]), torch.nonzero(t_(x)).T.numpy())
    assert run1("non_zero", [np.array(3.0)]).shape == (0, 1)
    assert run1("non_zero", [np.zeros((2, 3), np.float32)]).shape == (2, 0)
    [nz] = infer("non_zero", [tt(B, 3)])
    assert nz.dtype == I64 and nz.shape is not None and nz.shape[0] == 2
    assert isinstance(nz.shape[1], SymDim) and nz.shape[1].min == 0 and nz.shape[1].max is None
    [nz] = infer("non_zero", [tt(2, 3)])  # at most numel nonzeros
    assert nz.shape is not None and isinstance(nz.shape[1], SymDim) and nz.shape[1].max == 6
    assert flops("non_zero", [tt(2, 3)]) == 6


# -- control flow ---------------------------------------------------------------------

def _branch(name: str, build: Any) -> Graph:
    """An input-less graph whose outputs `build(builder)` returns."""
    graph = Graph(name)
    graph.set_outputs(build(GraphBuilder(graph)))
    return graph


def _if_graph(x_type: TensorType) -> Graph:
    graph = Graph("main")
    x = graph.add_input("x", x_type)
    cond = graph.add_input("cond", tt(dtype=BOOL))
    then_b = _branch("then", lambda b: [b.op("mul", [x, b.constant(2.0)]),
                                        b.op("reduce_sum", [x], {"axes": (1,)})])
    else_b = _branch("else", lambda b: [b.op("sub", [x, b.constant(1.0)]),
                                        b.op("reduce_max", [x], {"axes": (1,)})])
    outs = GraphBuilder(graph).op_multi("if", [cond], {"then_branch": then_b,
                                                      "else_branch": else_b}, num_outputs=2)
    graph.set_outputs(outs)
    return graph


def _onnx_if_model() -> Any:
    f = TensorProto.FLOAT

    def branch(name: str, nodes: list[Any]) -> Any:
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("a", f, None),
                                                   helper.make_tensor_value_info("r", f, None)])

    two = helper.make_tensor("two", f, [], [2.0])
    one = helper.make_tensor("one", f, [], [1.0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    then_g = branch("then", [helper.make_node("Constant", [], ["c"], value=two),
                             helper.make_node("Mul", ["x", "c"], ["a"]),
                             helper.make_node("Constant", [], ["ax"], value=axes),
                             helper.make_node("ReduceSum", ["x", "ax"], ["r"], keepdims=0)])
    else_g = branch("else", [helper.make_node("Constant", [], ["c"], value=one),
                             helper.make_node("Sub", ["x", "c"], ["a"]),
                             helper.make_node("Constant", [], ["ax"], value=axes),
                             helper.make_node("ReduceMax", ["x", "ax"], ["r"], keepdims=0)])
    node = helper.make_node("If", ["cond"], ["y", "z"], then_branch=then_g, else_branch=else_g)
    graph = helper.make_graph([node], "main", [
        helper.make_tensor_value_info("x", f, [None, 3]),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", f, None), helper.make_tensor_value_info("z", f, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("flag", [True, False])
def test_if(flag: bool) -> None:
    graph = _if_graph(tt(B, 3))
    assert [v.type for v in graph.outputs] == [tt(B, 3), tt(B)]
    x, cond = randn(2, 3), np.array(flag)
    expected = ReferenceEvaluator(_onnx_if_model()).run(None, {"x": x, "cond": cond})
    for got, want in zip(run_graph(graph, {"x": x, "cond": cond}), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert registry.node_cost(graph.nodes[-1]).flops == 0


def test_if_infer_joins_branches() -> None:
    def branch(out_type: TensorType) -> Graph:
        graph = Graph("b")
        graph.set_outputs([Value("v", out_type)])
        return graph

    cond = [tt(dtype=BOOL)]
    attrs = {"then_branch": branch(tt(B, 3)), "else_branch": branch(tt(B, 4))}
    assert infer("if", cond, attrs) == [tt(B, None)]
    attrs["else_branch"] = branch(tt(B))
    assert infer("if", cond, attrs) == [TensorType(F32, None)]
    attrs["else_branch"] = branch(tt(B, 3, dtype=I64))
    with pytest.raises(OpError, match="i64"):
        infer("if", cond, attrs)
    with pytest.raises(OpError, match="bool"):
        infer("if", [tt(2, dtype=BOOL)], attrs)
    assert flops("if", cond, {"then_branch": branch(tt(2)), "else_branch": branch(tt(2))}) == 0


def _loop_body(outer: Value) -> Graph:
    """acc += i * outer; cond = acc.sum() < 20; scans: acc and i."""
    body = Graph("body")
    i = body.add_input("i", tt(dtype=I64))
    body.add_input("cond_in", tt(dtype=BOOL))
    acc = body.add_input("acc", tt(2))
    b = GraphBuilder(body)
    step = b.op("mul", [b.op("cast", [i], {"dtype": F32}), outer])
    new_acc = b.op("add", [acc, step])
    cond = b.op("less", [b.op("reduce_sum", [new_acc]), b.constant(20.0)])
    body.set_outputs([cond, new_acc, new_acc, b.op("unsqueeze", [i], {"axes": (0,)})])
    return body


def _onnx_loop_model() -> Any:
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    twenty = helper.make_tensor("t", f, [], [20.0])
    zero = helper.make_tensor("z", i64, [1], [0])
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=f),
         helper.make_node("Mul", ["fi", "w"], ["step"]),
         helper.make_node("Add", ["acc", "step"], ["new_acc"]),
         helper.make_node("ReduceSum", ["new_acc"], ["s"], keepdims=0),
         helper.make_node("Constant", [], ["twenty"], value=twenty),
         helper.make_node("Less", ["s", "twenty"], ["cond_out"]),
         helper.make_node("Identity", ["new_acc"], ["acc_scan"]),
         helper.make_node("Constant", [], ["zero"], value=zero),
         helper.make_node("Unsqueeze", ["i", "zero"], ["i_scan"])],
        "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", f, [2])],
        [helper.make_tensor_value_info(n, t, None)
         for n, t in [("cond_out", TensorProto.BOOL), ("new_acc", f), ("acc_scan", f),
                      ("i_scan", i64)]])
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc_final", "accs", "is"],
                            body=body)
    graph = helper.make_graph([node], "main", [
        helper.make_tensor_value_info("M", i64, []),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        helper.make_tensor_value_info("acc0", f, [2]),
        helper.make_tensor_value_info("w", f, [2])],
        [helper.make_tensor_value_info(n, t, None)
         for n, t in [("acc_final", f), ("accs", f), ("is", i64)]])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _loop_graph(with_cond: bool) -> Graph:
    graph = Graph("main")
    trips = graph.add_input("M", tt(dtype=I64))
    cond = graph.add_input("cond", tt(dtype=BOOL)) if with_cond else None
    acc0 = graph.add_input("acc0", tt(2))
    w = graph.add_input("w", tt(2))
    outs = GraphBuilder(graph).op_multi("loop", [trips, cond, acc0], {"body": _loop_body(w)},
                                        num_outputs=3)
    graph.set_outputs(outs)
    return graph


@pytest.mark.parametrize("trips, start", [(10, True), (2, True), (0, True), (10, False)])
def test_loop_matches_onnx(trips: int, start: bool) -> None:
    graph = _loop_graph(with_cond=True)
    assert [v.type for v in graph.outputs] == [tt(2), tt(None, 2), tt(None, 1, dtype=I64)]
    feeds = {"M": np.array(trips), "cond": np.array(start),
             "acc0": np.array([1.0, 0.5], np.float32), "w": np.array([1.0, 2.0], np.float32)}
    got = run_graph(graph, feeds)
    if trips and start:
        expected = ReferenceEvaluator(_onnx_loop_model()).run(None, feeds)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b)
        assert got[1].shape[0] == (5 if trips == 10 else 2)  # stopped by the body's cond
    else:  # no iteration: the initial value, empty scans of the body's output types
        np.testing.assert_array_equal(got[0], feeds["acc0"])
        assert got[1].shape == (0, 2) and got[2].shape == (0, 1) and got[2].dtype == np.int64
    assert registry.node_cost(graph.nodes[-1]).flops == 0


def test_loop_for_form_ignores_body_cond() -> None:
    graph = _loop_graph(with_cond=False)
    feeds = {"M": np.array(6), "acc0": np.zeros(2, np.float32),
             "w": np.array([1.0, 2.0], np.float32)}
    acc, accs, steps = run_graph(graph, feeds)
    np.testing.assert_array_equal(steps[:, 0], np.arange(6))
    np.testing.assert_allclose(acc, np.array([15.0, 30.0]))
    assert accs.shape == (6, 2)


def test_loop_infer() -> None:
    body = _loop_body(Value("w", tt(2)))
    types = [tt(dtype=I64), None, tt(2)]
    scan_types = [tt(6, 2), tt(6, 1, dtype=I64)]
    assert infer("loop", types, {"body": body}, constants=[ints(6)]) == [tt(2), *scan_types]
    assert infer("loop", types, {"body": body})[1] == tt(None, 2)  # trip count unknown
    with pytest.raises(OpError, match="body must take"):
        infer("loop", [*types, tt(2)], {"body": body})
    with pytest.raises(OpError, match="bool"):
        infer("loop", [tt(dtype=I64), tt(dtype=I64), tt(2)], {"body": body})
    assert flops("loop", types, {"body": body}) == 0


def test_every_op_is_documented() -> None:
    names = ["constant", "full", "range", "shape_of", "identity", "reshape", "permute", "slice",
             "concat", "split", "gather", "gather_elements", "scatter_elements", "pad",
             "expand", "squeeze", "unsqueeze", "flatten", "tile", "trilu", "reduce_sum",
             "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l2",
             "reduce_log_sum_exp", "argmax", "argmin", "softmax", "log_softmax", "cumsum",
             "cumprod", "topk", "sort", "one_hot", "non_zero", "if", "loop"]
    for name in names:
        schema = registry.get(name)
        assert schema.doc and schema.cost_doc, name
    shape_ops = {"reshape", "squeeze", "unsqueeze", "flatten", "identity"}
    for name in shape_ops:
        assert registry.get(name).category is registry.Category.SHAPE


# -- parameters given as tensor inputs (ONNX's form) ------------------------------------
# Each op's optional input overrides the attribute of the same meaning; the oracle is onnx's
# reference evaluator run on the same inputs. `run` treats every input as a known constant;
# `shape(..., constants=[None, ...])` checks inference when the values are not known.

_REDUCE_ONNX = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean",
                "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
                "reduce_prod": "ReduceProd", "reduce_l2": "ReduceL2",
                "reduce_log_sum_exp": "ReduceLogSumExp"}


@pytest.mark.parametrize("op", sorted(_REDUCE_ONNX))
@pytest.mark.parametrize("axes, keepdims, noop", [
    ((1,), True, False), ((0, -1), False, False), ((), False, False), ((), True, True),
    ((2,), False, True)])
def test_reduce_axes_input_matches_onnx(op: str, axes: tuple[int, ...], keepdims: bool,
                                        noop: bool) -> None:
    x = randn(2, 3, 4)
    expected = onnx_ref(_REDUCE_ONNX[op], [x, ints(*axes)], keepdims=int(keepdims),
                        noop_with_empty_axes=int(noop))[0]
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    np.testing.assert_allclose(run1(op, [x, ints(*axes)], attrs), expected, rtol=1e-5)
    # the attribute form means the same
    np.testing.assert_allclose(run1(op, [x], {**attrs, "axes": axes}), expected, rtol=1e-5)


def test_reduce_infer_with_run_time_axes() -> None:
    axes2 = tt(2, dtype=I64)
    assert shape("reduce_sum", [tt(B, 1, 4), axes2], {"keepdims": True}) == (None, 1, None)
    assert shape("reduce_sum", [tt(B, 3, 4), axes2]) == (None,)  # rank 3 - 2 axes
    assert shape("reduce_sum", [tt(B, 3, 4), tt(None, dtype=I64)]) is None
    assert shape("reduce_sum", [tt(B, 3, 4), tt(0, dtype=I64)]) == ()  # empty: all axes
    assert shape("reduce_sum", [tt(B, 3, 4), tt(0, dtype=I64)],
                 {"noop_with_empty_axes": True}) is None  # maybe all axes, maybe none
    assert shape("reduce_sum", [tt(B, 3, 4), axes2], constants=[None, ints(0, 2)]) == (3,)
    assert shape("reduce_max", [tt(B, 3)], {"noop_with_empty_axes": True}) == (B, 3)
    assert flops("reduce_sum", [tt(2, 3, 4), axes2]) == 24
    with pytest.raises(OpError, match="1-D integer"):
        infer("reduce_sum", [tt(2, 3), tt(2)])


@pytest.mark.parametrize("op, onnx_op, fill", [("reduce_max", "ReduceMax", -np.inf),
                                               ("reduce_min", "ReduceMin", np.inf)])
def test_reduce_max_min_of_nothing(op: str, onnx_op: str, fill: float) -> None:
    x = np.zeros((2, 0, 4), np.float32)
    expected = onnx_ref(onnx_op, [x, ints(1)], keepdims=1)[0]
    got = run1(op, [x], {"axes": (1,), "keepdims": True})
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, np.full((2, 1, 4), fill, np.float32))
    info = np.iinfo(np.int32)
    integer = run1(op, [x.astype(np.int32)], {"axes": (1,)})
    assert (integer == (info.min if fill < 0 else info.max)).all() and integer.shape == (2, 4)


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ((1,), (3,), (), ()), ((0, 1), (BIG, -1), (0, 1), ()), ((-1,), (-BIG,), (1,), (-1,)),
    ((-100, 2), (100, 1), (2, 0), (3, -1)), ((3,), (1,), (1,), ())])
def test_slice_inputs_match_onnx(starts: tuple[int, ...], ends: tuple[int, ...],
                                 axes: tuple[int, ...], steps: tuple[int, ...]) -> None:
    x = randn(4, 5, 6)
    feeds = [x, ints(*starts), ints(*ends), ints(*axes) if axes else None,
             ints(*steps) if steps else None]
    expected = onnx_ref("Slice", feeds)[0]
    np.testing.assert_array_equal(run1("slice", feeds), expected)
    # mixed: bounds as inputs, axes and steps as attributes
    attrs = {"axes": axes, "steps": steps}
    np.testing.assert_array_equal(run1("slice", feeds[:3], attrs), expected)


def test_slice_infer_with_run_time_bounds() -> None:
    one = tt(1, dtype=I64)
    unknown = [None] * 5
    assert shape("slice", [tt(B, 5, 6), one, one], constants=unknown) == (None, 5, 6)
    assert shape("slice", [tt(B, 5, 6), one, one], {"axes": (2,)}, unknown) == (B, 5, None)
    assert shape("slice", [tt(B, 5, 6), one, one, one], constants=unknown) == (None,) * 3
    assert shape("slice", [tt(B, 5, 6), one, one, one],
                 constants=[None, ints(1), ints(3), ints(1)]) == (B, 2, 6)
    assert shape("slice", [TensorType(F32, None), one, one]) is None
    with pytest.raises(OpError, match="integer"):
        infer("slice", [tt(2, 3), tt(1), one])


@pytest.mark.parametrize("start, limit, delta, dtype", [
    (0, 5, 1, np.int64), (10, 1, -3, np.int32), (1.0, 10.0, 2.5, np.float32),
    (-1.5, 2.0, 0.5, np.float64), (3, 3, 1, np.int64)])
def test_range_inputs_match_onnx(start: float, limit: float, delta: float,
                                 dtype: type) -> None:
    feeds = [np.array(v, dtype) for v in (start, limit, delta)]
    expected = onnx_ref("Range", feeds)[0]
    got = run1("range", feeds)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    scalar = tt(dtype=DType.from_numpy(np.dtype(dtype)))
    assert infer("range", [scalar] * 3) == [TensorType(scalar.dtype, (None,))]
    # an input next to attributes: start 0 (attribute), delta 1
    np.testing.assert_array_equal(run1("range", [None, np.array(4)]), np.arange(4))


def test_range_input_errors() -> None:
    with pytest.raises(OpError, match="share a dtype"):
        infer("range", [tt(dtype=I64), tt(dtype=F32)])
    with pytest.raises(OpError, match="one-element"):
        infer("range", [tt(2, dtype=I64)])
    with pytest.raises(OpError, match="limit"):
        infer("range", [], {"start": 0.0})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_inputs_match_onnx(mode: str) -> None:
    x = randn(3, 4)
    pads = ints(1, 0, 2, 3)
    value = np.array(2.5, dtype=np.float32)
    expected = onnx_ref("Pad", [x, pads, value], mode=mode)[0]
    np.testing.assert_array_equal(run1("pad", [x, pads, value], {"mode": mode}), expected)
    np.testing.assert_array_equal(run1("pad", [x, pads], {"mode": mode, "value": 2.5}),
                                  expected)


def test_pad_infer_with_run_time_pads() -> None:
    assert shape("pad", [tt(B, 3), tt(4, dtype=I64)], constants=[None, None]) == (None, None)
    assert shape("pad", [tt(B, 3), tt(4, dtype=I64)],
                 constants=[None, ints(0, 1, 0, 2)]) == (B, 6)
    with pytest.raises(OpError, match="one-element"):
        infer("pad", [tt(2, 3), tt(4, dtype=I64), tt(2)])


def test_tile_input_matches_onnx() -> None:
    x = randn(2, 3)
    expected = onnx_ref("Tile", [x, ints(2, 3)])[0]
    np.testing.assert_array_equal(run1("tile", [x, ints(2, 3)]), expected)
    assert shape("tile", [tt(B, 0, 3), tt(3, dtype=I64)]) == (None, 0, None)
    with pytest.raises(OpError, match="repeats"):
        run1("tile", [x, ints(2)])


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [0, 2, -1])
def test_trilu_k_input_matches_onnx(upper: bool, k: int) -> None:
    x = randn(2, 4, 5)
    expected = onnx_ref("Trilu", [x, np.array(k)], upper=int(upper))[0]
    np.testing.assert_array_equal(run1("trilu", [x, np.array(k)], {"upper": upper}), expected)
    assert infer("trilu", [tt(B, 4, 5), tt(dtype=I64)]) == [tt(B, 4, 5)]
    with pytest.raises(OpError, match="one-element"):
        infer("trilu", [tt(4, 5), tt(2, dtype=I64)])


@pytest.mark.parametrize("op, onnx_op", [("cumsum", "CumSum"), ("cumprod", "CumProd")])
@pytest.mark.parametrize("axis", [0, -1])
def test_scan_axis_input_matches_onnx(op: str, onnx_op: str, axis: int) -> None:
    x = (rng.standard_normal((3, 4)) * 0.5 + 1).astype(np.float32)
    for exclusive, reverse in ((0, 0), (1, 1)):
        expected = onnx_ref(onnx_op, [x, np.array(axis)], exclusive=exclusive,
                            reverse=reverse)[0]
        got = run1(op, [x, np.array(axis, np.int32)],
                   {"exclusive": bool(exclusive), "reverse": bool(reverse)})
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert infer(op, [tt(B, S), tt(dtype=I64)]) == [tt(B, S)]
    with pytest.raises(OpError, match="out of range"):
        infer(op, [tt(B, S), tt(dtype=I64)], constants=[None, np.array(2)])


@pytest.mark.parametrize("k", [0, 2, 5])
def test_topk_k_input_matches_onnx(k: int) -> None:
    x = rng.integers(0, 4, size=(3, 5)).astype(np.float32)
    values, indices = onnx_ref("TopK", [x, ints(k)], outputs=2, axis=1)
    got = run("topk", [x, ints(k)], {"axis": 1})
    np.testing.assert_array_equal(got[0], values)
    np.testing.assert_array_equal(got[1], indices)


def test_topk_infer_with_run_time_k() -> None:
    types = [tt(B, 10), tt(1, dtype=I64)]
    assert infer("topk", types) == [tt(B, None), tt(B, None, dtype=I64)]
    assert infer("topk", types, constants=[None, ints(3)]) == [tt(B, 3), tt(B, 3, dtype=I64)]
    assert flops("topk", [tt(4, 10), tt(1, dtype=I64)]) == 0  # k unknown: not guessed
    with pytest.raises(OpError, match="attribute k or input k"):
        infer("topk", [tt(4, 10)])


def test_split_sizes_input_matches_onnx() -> None:
    x = randn(2, 7)
    sizes = ints(3, 0, 4)
    expected = onnx_ref("Split", [x, sizes], outputs=3, axis=1)
    for got, want in zip(run("split", [x, sizes], {"axis": 1}), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    graph = _single_op_graph("split", [("x", tt(B, 7)), ("sizes", tt(3, dtype=I64))],
                             {"axis": 1}, num_outputs=3)
    assert [v.type for v in graph.outputs] == [tt(B, None)] * 3
    for got, want in zip(run_graph(graph, {"x": x, "sizes": sizes}), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(OpError, match="sizes"):
        infer("split", [tt(2, 7)], {"axis": 1})


@pytest.mark.parametrize("axes", [(1,), (-1, 0)])
def test_squeeze_axes_input_matches_onnx(axes: tuple[int, ...]) -> None:
    x = randn(1, 1, 3, 1)
    expected = onnx_ref("Squeeze", [x, ints(*axes)])[0]
    np.testing.assert_array_equal(run1("squeeze", [x, ints(*axes)]), expected)
    assert shape("squeeze", [tt(1, B, 1), tt(len(axes), dtype=I64)]) == \
        (None,) * (3 - len(axes))
    assert shape("squeeze", [tt(1, B, 1), tt(None, dtype=I64)]) is None


@pytest.mark.parametrize("axes", [(0,), (-1, 1), (3, 0)])
def test_unsqueeze_axes_input_matches_onnx(axes: tuple[int, ...]) -> None:
    x = randn(2, 3)
    expected = onnx_ref("Unsqueeze", [x, ints(*axes)])[0]
    np.testing.assert_array_equal(run1("unsqueeze", [x, ints(*axes)]), expected)
    assert shape("unsqueeze", [tt(B, 3), tt(len(axes), dtype=I64)]) == \
        (None,) * (2 + len(axes))
    np.testing.assert_array_equal(run1("unsqueeze", [x, ints()]), x)  # nothing inserted
    with pytest.raises(OpError, match="axes"):
        infer("unsqueeze", [tt(2, 3)])


@pytest.mark.parametrize("depth", [np.array(4), np.array(3.0, np.float32)])
def test_one_hot_depth_input_matches_onnx(depth: np.ndarray) -> None:
    indices = np.array([[0, 2, -1], [1, 5, -4]], dtype=np.int64)
    expected = onnx_ref("OneHot", [indices, depth, np.array([0, 1], np.int64)], axis=1)[0]
    np.testing.assert_array_equal(run1("one_hot", [indices, depth], {"axis": 1}), expected)
    # a one-element vector (ONNX allows rank 1) means the same
    np.testing.assert_array_equal(run1("one_hot", [indices, depth.reshape(1)], {"axis": 1}),
                                  expected)
    assert shape("one_hot", [tt(B, 3, dtype=I64), tt(dtype=I64)]) == (B, 3, None)
    # a fractional depth is cast to int64 (truncated) as the ONNX spec says
    assert run1("one_hot", [indices, np.array(3.7, np.float32)]).shape == (2, 3, 3)
    with pytest.raises(OpError, match="depth"):
        infer("one_hot", [tt(3, dtype=I64)])


def test_ops_accept_unknown_rank_where_the_output_follows() -> None:
    unknown = TensorType(F32, None)
    assert shape("permute", [unknown], {"perm": (1, 0, 2)}) == (None, None, None)
    assert shape("unsqueeze", [unknown], {"axes": (0,)}) is None
    assert shape("slice", [unknown], {"starts": (0,), "ends": (1,)}) is None
    graph = _single_op_graph("split", [("x", unknown)], {"axis": 0, "sizes": (1, 2)},
                             num_outputs=2)
    assert [v.type for v in graph.outputs] == [unknown, unknown]
