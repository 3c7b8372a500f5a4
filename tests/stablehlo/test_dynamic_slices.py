"""Run-time start indices: `lax.fori_loop` / `lax.scan` bodies and clamped dynamic slices
printed by JAX (`jax.jit(f).lower(...).as_text()`) import with no opaque node, and the IR
executor, the IR exported back to StableHLO (reference interpreter) and to ONNX
(onnxruntime) reproduce JAX's outputs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text
from irbridge.dtypes import DType
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Node, TensorType

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(0)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _fori_reverse_rows(x: Any) -> Any:
    """Row i of x, scaled by i + 1, written at row n - 1 - i: dynamic_slice and
    dynamic_update_slice at the loop counter."""
    def body(i: Any, acc: Any) -> Any:
        row = lax.dynamic_slice(x, (i, 0), (1, x.shape[1]))
        return lax.dynamic_update_slice(acc, row * (i + 1).astype(x.dtype),
                                        (x.shape[0] - 1 - i, 0))
    return lax.fori_loop(0, x.shape[0], body, jnp.zeros_like(x))


W_X, W_H, B = _f32(3, 8), _f32(2, 8), _f32(8)


def _lstm(xs: Any) -> Any:
    """A hand-written LSTM over time with lax.scan (what flax.linen.RNN lowers to)."""
    def step(carry: Any, x: Any) -> Any:
        c, h = carry
        gates = x @ W_X + h @ W_H + B
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h
    zeros = jnp.zeros((xs.shape[1], 2), xs.dtype)
    (c, _h), ys = lax.scan(step, (zeros, zeros), xs)
    return ys, c


def _clamped(x: Any, i: Any) -> Any:
    """Starts past either end of x: StableHLO clamps them into range."""
    return (lax.dynamic_slice(x, (i, i + 3), (2, 3)),
            lax.dynamic_update_slice(x, jnp.full((2, 2), 7.0, x.dtype), (i - 9, i * 2)))


CASES: dict[str, tuple[Callable[..., Any], list[np.ndarray]]] = {
    "fori_loop": (_fori_reverse_rows, [_f32(5, 4)]),
    "scan_lstm": (_lstm, [_f32(6, 2, 3)]),
    "clamped_low": (_clamped, [_f32(5, 6), np.array(-4, np.int32)]),
    "clamped_mid": (_clamped, [_f32(5, 6), np.array(1, np.int32)]),
    "clamped_high": (_clamped, [_f32(5, 6), np.array(40, np.int32)]),
}


def _nodes(graph: Graph) -> Iterator[Node]:
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            if isinstance(value, Graph):
                yield from _nodes(value)


def _check(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    # float32 arithmetic in another order than XLA's: 1e-5 of each output's scale
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * max(1.0, float(np.abs(w).max())))


def _imported(fn: Callable[..., Any], args: list[np.ndarray]
              ) -> tuple[Model, list[np.ndarray]]:
    """`fn` lowered by JAX (`jax.jit(fn).lower(*args).as_text()`) and imported, and JAX's
    own outputs on `args`."""
    want = [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    return from_mlir(jax.jit(fn).lower(*args).as_text()), want


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_runtime_indices_round_trip(name: str) -> None:
    fn, args = CASES[name]
    model, want = _imported(fn, args)
    ops = {n.qualified_op for g in model.graphs for n in _nodes(g)}
    assert not [op for op in ops if "::" in op], ops  # no opaque node anywhere
    assert ops & {"dynamic_slice", "dynamic_update_slice"}
    _check(run_model(model, args), want)
    _check(evaluate(to_mlir_text(model), args), want)
    _check(_onnxruntime(model, args), want)


def _onnxruntime(model: Model, args: list[np.ndarray]) -> list[np.ndarray]:
    """The model exported to ONNX, run in onnxruntime."""
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return [np.asarray(a) for a in session.run(None, dict(zip(names, args, strict=True)))]


def _one(op: str, x: np.ndarray, starts: list[int], update: np.ndarray | None = None,
         **attrs: Any) -> Model:
    graph = Graph()
    model = Model(graphs=[graph], name=op)
    b = GraphBuilder(graph, model)
    xv = graph.add_input("x", TensorType(DType.from_numpy(x.dtype), x.shape))
    operands = [xv]
    if update is not None:
        operands.append(graph.add_input("u", TensorType(DType.from_numpy(update.dtype),
                                                        update.shape)))
    for i, _ in enumerate(starts):
        operands.append(graph.add_input(f"s{i}", TensorType(DType.INT32, ())))
    graph.set_outputs([b.op(op, operands, attrs)])
    return model


def _feeds(x: np.ndarray, starts: list[int], update: np.ndarray | None = None
           ) -> list[np.ndarray]:
    return [x, *([] if update is None else [update]),
            *[np.array(s, np.int32) for s in starts]]


X = np.arange(20, dtype=np.float32).reshape(4, 5)


@pytest.mark.parametrize(("starts", "rows", "cols"), [
    ([1, 1], (1, 3), (1, 4)),
    ([3, -2], (2, 4), (0, 3)),    # row start 3 clamps to 4 - 2, column start -2 to 0
    ([-7, 99], (0, 2), (2, 5)),
])
def test_dynamic_slice_clamps_and_exports(starts: list[int], rows: tuple[int, int],
                                          cols: tuple[int, int]) -> None:
    model = _one("dynamic_slice", X, starts, sizes=(2, 3))
    want = X[rows[0]:rows[1], cols[0]:cols[1]]
    _all_paths_equal(model, _feeds(X, starts), want)


def _all_paths_equal(model: Model, feeds: list[np.ndarray], want: np.ndarray) -> None:
    """IR executor, StableHLO export (interpreter) and ONNX export (onnxruntime)."""
    np.testing.assert_array_equal(run_model(model, feeds)[0], want)
    np.testing.assert_array_equal(evaluate(to_mlir_text(model), feeds)[0], want)
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    np.testing.assert_array_equal(session.run(None, dict(zip(names, feeds, strict=True)))[0],
                                  want)


@pytest.mark.parametrize(("starts", "at"), [([0, 0], (0, 0)), ([3, 4], (2, 3)),
                                            ([-1, 2], (0, 2))])
def test_dynamic_update_slice_clamps_and_exports(starts: list[int], at: tuple[int, int]
                                                 ) -> None:
    update = np.full((2, 2), -1.0, np.float32)
    model = _one("dynamic_update_slice", X, starts, update)
    want = X.copy()
    want[at[0]:at[0] + 2, at[1]:at[1] + 2] = -1.0
    _all_paths_equal(model, _feeds(X, starts, update), want)


def test_bad_start_count_is_one_clear_error() -> None:
    from irbridge.errors import IrbridgeError

    with pytest.raises(IrbridgeError, match=r"dynamic_slice.*needs 2 start indices"):
        _one("dynamic_slice", X, [1], sizes=(2, 3))


# -- gather / scatter indices outside the operand --------------------------------------------
# StableHLO clamps a gather's start indices into the operand and skips a scatter update
# whose index falls outside it; JAX relies on both (x[i] clamps, `.at[i].add` drops). The
# importer's direct forms (embedding-style gather, take_along_axis, row scatter) used the
# neutral ops, which wrap a negative index and refuse one past the end.

IDX = np.array([0, 9, -2, -9, 5], np.int32)   # in range, past the end, negative (JAX wraps
ROWS = np.arange(42, dtype=np.float32).reshape(7, 6)  # -2 to 5 before the gather), below 0

OUT_OF_RANGE: dict[str, tuple[Callable[..., Any], list[np.ndarray]]] = {
    "getitem_rows": (lambda x, i: x[i], [ROWS, IDX]),
    "getitem_cols": (lambda x, i: x[:, i], [ROWS, IDX]),
    "take_fill": (lambda x, i: jnp.take(x, i, axis=0), [ROWS, IDX]),
    "get_clip": (lambda x, i: x.at[i].get(mode="clip"), [ROWS, IDX]),
    "take_along_axis": (lambda x, i: jnp.take_along_axis(
        x, jnp.broadcast_to(i[None, :], (7, 5)), axis=1, mode="clip"), [ROWS, IDX]),
    "at_add": (lambda x, i, u: x.at[i].add(u), [ROWS, IDX, _f32(5, 6)]),
    "at_set": (lambda x, i, u: x.at[i].set(u), [ROWS, IDX, _f32(5, 6)]),
    "at_max_cols": (lambda x, i, u: x.at[:, i].max(u), [ROWS, IDX, _f32(7, 5)]),
    "at_mul_elements": (lambda x, i, u: x.at[jnp.arange(5), i].mul(u),
                        [ROWS, IDX, _f32(5)]),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_jax_gather_and_scatter_with_indices_outside_the_operand(name: str) -> None:
    fn, args = OUT_OF_RANGE[name]
    model, want = _imported(fn, args)
    assert not [n for g in model.graphs for n in _nodes(g) if "::" in n.qualified_op]
    for got in (run_model(model, args), evaluate(to_mlir_text(model), args),
                _onnxruntime(model, args)):
        for g, w in zip(got, want, strict=True):   # moved and added, never computed
            np.testing.assert_array_equal(np.asarray(g), w)   # differently: exact
