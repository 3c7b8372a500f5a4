"""The text emitter behind the StableHLO exporter.

Ops are written in MLIR's generic form (`%3 = "stablehlo.add"(%1, %2) : (...) -> ...`),
which is uniform for every op and needs no per-op printing rules; the result is parsed
with `ir.Module.parse`, verified, and its large constants filled in afterwards through
the Python API (`dense_attr`), which is a memory copy instead of a hex round trip.

`Sym` is one emitted SSA value with its static type; helpers build the short op
sequences the lowerings share (broadcasts, converts, reductions, windows, slices).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np

from irbridge.dtypes import DType

from ._mlir import element_type, splat_literal, tensor_type

Shape = tuple[int, ...]
TypeSpec = tuple[DType, Shape]


@dataclass(frozen=True, eq=False)
class Sym:
    """An emitted SSA value; `const` holds its data when it is a known constant."""

    ref: str
    dtype: DType
    shape: Shape
    const: np.ndarray | None = field(default=None, repr=False)
    weight: bool = False  # a model tensor (folding leaves weights and their uses alone)

    @property
    def type(self) -> str:
        return tensor_type(self.dtype, self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def ints(values: Sequence[int]) -> str:
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>" if len(values) \
        else "array<i64>"


def int_list(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def padding_attr(pairs: Sequence[tuple[int, int]]) -> str:
    body = ", ".join(f"[{lo}, {hi}]" for lo, hi in pairs)
    return f"dense<[{body}]> : tensor<{len(pairs)}x2xi64>" if pairs else \
        "dense<> : tensor<0x2xi64>"


_BODY_OPS = {"add": "stablehlo.add", "mul": "stablehlo.multiply", "max": "stablehlo.maximum",
             "min": "stablehlo.minimum", "and": "stablehlo.and", "or": "stablehlo.or"}


def identity_of(kind: str, dtype: DType) -> object:
    """The neutral element of a reduction body."""
    if kind in ("add", "or"):
        return False if dtype is DType.BOOL else 0
    if kind in ("mul", "and"):
        return True if dtype is DType.BOOL else 1
    if dtype is DType.BOOL:
        return kind == "min"
    if dtype.is_float:
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(dtype.numpy)
    return int(info.min) if kind == "max" else int(info.max)


class Region:
    """`with em.region(types) as args:` collects the ops of one region (one block)."""

    def __init__(self, em: Emitter, arg_types: Sequence[TypeSpec]) -> None:
        self.em = em
        self.args = [Sym(em.fresh(), dt, tuple(sh)) for dt, sh in arg_types]
        self.text = ""

    def __enter__(self) -> list[Sym]:
        self.em._buffers.append([])
        self.em._cache.append({})
        return self.args

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        lines = self.em._buffers.pop()
        self.em._cache.pop()
        if kind is not None:
            return
        header = ""
        if self.args:
            header = "^bb0(" + ", ".join(f"{a.ref}: {a.type}" for a in self.args) + "):\n"
        self.text = "{\n" + header + "\n".join(lines) + "\n}"


class Emitter:
    """Collects the ops of one function body (and its nested regions) as text."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._buffers: list[list[str]] = [[]]
        self._cache: list[dict[tuple[str, str], Sym]] = [{}]
        self.hoisted: list[str] = []
        self.placeholders: list[tuple[np.ndarray, DType]] = []
        self.loc = "loc(unknown)"

    def fresh(self) -> str:
        return f"%{next(self._counter)}"

    @property
    def body(self) -> list[str]:
        return self._buffers[0]

    def region(self, arg_types: Sequence[TypeSpec] = ()) -> Region:
        return Region(self, arg_types)

    # -- raw ops -----------------------------------------------------------------------------
    def emit(self, op: str, operands: Sequence[Sym], results: Sequence[TypeSpec],
             props: str = "", regions: Sequence[str] = ()) -> list[Sym]:
        name = self.fresh()
        count = len(results)
        refs = [name] if count == 1 else [f"{name}#{i}" for i in range(count)]
        lhs = name if count == 1 else f"{name}:{count}"
        out_types = ", ".join(tensor_type(dt, sh) for dt, sh in results)
        if count != 1:
            out_types = f"({out_types})"
        text = (f'{lhs} = "{op}"({", ".join(s.ref for s in operands)})'
                + (f" <{{{props}}}>" if props else "")
                + (f" ({', '.join(regions)})" if regions else "")
                + f" : ({', '.join(s.type for s in operands)}) -> {out_types} {self.loc}")
        self._buffers[-1].append(text)
        return [Sym(ref, dt, tuple(sh)) for ref, (dt, sh) in zip(refs, results, strict=True)]

    def op(self, op: str, operands: Sequence[Sym], dtype: DType, shape: Sequence[int],
           props: str = "", regions: Sequence[str] = ()) -> Sym:
        return self.emit(op, operands, [(dtype, tuple(shape))], props, regions)[0]

    def ret(self, values: Sequence[Sym], op: str = "stablehlo.return") -> None:
        self._buffers[-1].append(
            f'"{op}"({", ".join(v.ref for v in values)}) : '
            f'({", ".join(v.type for v in values)}) -> () {self.loc}')

    # -- constants ---------------------------------------------------------------------------
    def splat(self, value: object, dtype: DType, shape: Sequence[int] = ()) -> Sym:
        shape = tuple(shape)
        literal = splat_literal(value, dtype)
        key = (literal, tensor_type(dtype, shape))
        cached = self._cache[-1].get(key)
        if cached is not None:
            return cached
        data = np.full(shape, value, dtype=dtype.numpy) if np.prod(shape) <= 64 else None
        sym = self.emit("stablehlo.constant", [], [(dtype, shape)],
                        f"value = dense<{literal}> : {key[1]}")[0]
        sym = Sym(sym.ref, dtype, shape, data if data is not None else
                  np.broadcast_to(np.asarray(value).astype(dtype.numpy), shape))
        self._cache[-1][key] = sym
        return sym

    def scalar_like(self, value: object, like: Sym) -> Sym:
        return self.splat(value, like.dtype, like.shape)

    def const(self, array: np.ndarray, dtype: DType | None = None, loc: str | None = None,
              hoist: bool = False) -> Sym:
        """A constant: a splat when all elements are equal, else a placeholder filled with
        the data after parsing. Placeholders (and, with `hoist`, splats) go to the top of
        the function, where every region can read them."""
        dtype = dtype or DType.from_numpy(array.dtype)
        array = np.asarray(array).astype(dtype.numpy, copy=False)
        shape = tuple(int(d) for d in array.shape)
        t = tensor_type(dtype, shape)
        name = self.fresh()
        if array.size == 0 or _all_equal(array):
            literal = splat_literal(array.reshape(-1)[0] if array.size else 0, dtype)
            line = (f'{name} = "stablehlo.constant"() <{{value = dense<{literal}> : {t}}}> '
                    f": () -> {t} {loc or self.loc}")
            if hoist:
                self.body.insert(0, line)  # before any use; placeholders stay first
            else:
                self._buffers[-1].append(line)
            return Sym(name, dtype, shape, array)
        zero = splat_literal(False if dtype is DType.BOOL else 0, dtype)
        self.hoisted.append(f'{name} = "stablehlo.constant"() <{{value = dense<{zero}> : {t}}}> '
                            f": () -> {t} {loc or self.loc}")
        self.placeholders.append((array, dtype))
        return Sym(name, dtype, shape, array)

    # -- shape and type helpers ---------------------------------------------------------------
    def convert(self, x: Sym, dtype: DType) -> Sym:
        if x.dtype is dtype:
            return x
        if dtype is DType.BOOL and x.dtype is not DType.BOOL:
            return self.compare("NE", x, self.scalar_like(0, x))
        return self.op("stablehlo.convert", [x], dtype, x.shape)

    def reshape(self, x: Sym, shape: Sequence[int]) -> Sym:
        shape = tuple(int(d) for d in shape)
        if x.shape == shape:
            return x
        if int(np.prod(shape, dtype=np.int64)) != x.numel:
            raise ValueError(f"cannot reshape {x.shape} to {shape}")
        return self.op("stablehlo.reshape", [x], x.dtype, shape)

    def transpose(self, x: Sym, perm: Sequence[int]) -> Sym:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(x.rank)):
            return x
        return self.op("stablehlo.transpose", [x], x.dtype, [x.shape[p] for p in perm],
                       f"permutation = {ints(perm)}")

    def broadcast_in_dim(self, x: Sym, shape: Sequence[int], dims: Sequence[int]) -> Sym:
        shape = tuple(int(d) for d in shape)
        if shape == x.shape and tuple(dims) == tuple(range(x.rank)):
            return x
        return self.op("stablehlo.broadcast_in_dim", [x], x.dtype, shape,
                       f"broadcast_dimensions = {ints(dims)}")

    def broadcast(self, x: Sym, shape: Sequence[int]) -> Sym:
        """Numpy-style broadcast of x to `shape` (leading dims added)."""
        shape = tuple(int(d) for d in shape)
        if x.shape == shape:
            return x
        offset = len(shape) - x.rank
        if x.const is not None and _all_equal(x.const) and x.const.size:
            return self.splat(x.const.reshape(-1)[0], x.dtype, shape)
        return self.broadcast_in_dim(x, shape, range(offset, len(shape)))

    def to_common(self, xs: Sequence[Sym], dtype: DType | None = None) -> list[Sym]:
        """Convert to one dtype and broadcast to the common shape."""
        target = dtype or xs[0].dtype
        shape = tuple(int(d) for d in np.broadcast_shapes(*(x.shape for x in xs)))
        return [self.broadcast(self.convert(x, target), shape) for x in xs]

    def binary(self, op: str, a: Sym, b: Sym, dtype: DType | None = None) -> Sym:
        a, b = self.to_common([a, b], dtype or a.dtype)
        return self.op(op, [a, b], a.dtype, a.shape)

    def add(self, a: Sym, b: Sym) -> Sym:
        return self.binary("stablehlo.add", a, b)

    def sub(self, a: Sym, b: Sym) -> Sym:
        return self.binary("stablehlo.subtract", a, b)

    def mul(self, a: Sym, b: Sym) -> Sym:
        return self.binary("stablehlo.multiply", a, b)

    def div(self, a: Sym, b: Sym) -> Sym:
        return self.binary("stablehlo.divide", a, b)

    def maximum(self, a: Sym, b: Sym) -> Sym:
        return self.binary("stablehlo.maximum", a, b)

    def minimum(self, a: Sym, b: Sym) -> Sym:
        return self.binary("stablehlo.minimum", a, b)

    def unary(self, op: str, x: Sym) -> Sym:
        return self.op(op, [x], x.dtype, x.shape)

    def mul_scalar(self, x: Sym, value: float) -> Sym:
        return self.mul(x, self.splat(value, x.dtype, x.shape))

    def add_scalar(self, x: Sym, value: float) -> Sym:
        return self.add(x, self.splat(value, x.dtype, x.shape))

    def compare(self, direction: str, a: Sym, b: Sym, total_order: bool = False) -> Sym:
        common = a.dtype if a.dtype == b.dtype else _promote(a.dtype, b.dtype)
        a, b = self.to_common([a, b], common)
        kind = ", compare_type = #stablehlo<comparison_type TOTALORDER>" if total_order else ""
        return self.op("stablehlo.compare", [a, b], DType.BOOL, a.shape,
                       f"comparison_direction = #stablehlo<comparison_direction {direction}>"
                       + kind)

    def select(self, pred: Sym, a: Sym, b: Sym) -> Sym:
        dtype = a.dtype if a.dtype == b.dtype else _promote(a.dtype, b.dtype)
        shape = tuple(int(d) for d in np.broadcast_shapes(pred.shape, a.shape, b.shape))
        pred = self.broadcast(self.convert(pred, DType.BOOL), shape)
        a, b = (self.broadcast(self.convert(v, dtype), shape) for v in (a, b))
        return self.op("stablehlo.select", [pred, a, b], dtype, shape)

    def slice(self, x: Sym, starts: Sequence[int], limits: Sequence[int],
              strides: Sequence[int] | None = None) -> Sym:
        strides = list(strides) if strides is not None else [1] * x.rank
        if list(starts) == [0] * x.rank and list(limits) == list(x.shape) and \
                all(s == 1 for s in strides):
            return x
        shape = [max(0, -(-(hi - lo) // st)) for lo, hi, st in zip(starts, limits, strides,
                                                                   strict=True)]
        return self.op("stablehlo.slice", [x], x.dtype, shape,
                       f"start_indices = {ints(starts)}, limit_indices = {ints(limits)}, "
                       f"strides = {ints(strides)}")

    def slice_axis(self, x: Sym, axis: int, start: int, stop: int, step: int = 1) -> Sym:
        starts, limits, strides = [0] * x.rank, list(x.shape), [1] * x.rank
        starts[axis], limits[axis], strides[axis] = start, stop, step
        return self.slice(x, starts, limits, strides)

    def reverse(self, x: Sym, dims: Sequence[int]) -> Sym:
        if not dims:
            return x
        return self.op("stablehlo.reverse", [x], x.dtype, x.shape,
                       f"dimensions = {ints(sorted(dims))}")

    def concat(self, xs: Sequence[Sym], axis: int) -> Sym:
        if len(xs) == 1:
            return xs[0]
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        return self.op("stablehlo.concatenate", list(xs), xs[0].dtype, shape,
                       f"dimension = {axis} : i64")

    def iota(self, dtype: DType, shape: Sequence[int], dim: int) -> Sym:
        return self.op("stablehlo.iota", [], dtype, shape, f"iota_dimension = {dim} : i64")

    def pad(self, x: Sym, value: Sym, low: Sequence[int], high: Sequence[int],
            interior: Sequence[int] | None = None) -> Sym:
        interior = list(interior) if interior is not None else [0] * x.rank
        if all(v == 0 for v in (*low, *high, *interior)):
            return x
        shape = [n + lo + hi + max(n - 1, 0) * it
                 for n, lo, hi, it in zip(x.shape, low, high, interior, strict=True)]
        return self.op("stablehlo.pad", [x, value], x.dtype, shape,
                       f"edge_padding_high = {ints(high)}, edge_padding_low = {ints(low)}, "
                       f"interior_padding = {ints(interior)}")

    # -- regions -----------------------------------------------------------------------------
    def binary_body(self, kind: str, dtype: DType) -> str:
        region = self.region([(dtype, ()), (dtype, ())])
        with region as (a, b):
            self.ret([self.op(_BODY_OPS[kind], [a, b], dtype, ())])
        return region.text

    def reduce(self, x: Sym, axes: Sequence[int], kind: str, keepdims: bool = False) -> Sym:
        axes = sorted({a % x.rank for a in axes}) if x.rank else []
        if not axes:
            return x
        init = self.splat(identity_of(kind, x.dtype), x.dtype)
        shape = [d for i, d in enumerate(x.shape) if i not in axes]
        y = self.op("stablehlo.reduce", [x, init], x.dtype, shape,
                    f"dimensions = {ints(axes)}", [self.binary_body(kind, x.dtype)])
        if keepdims:
            y = self.reshape(y, [1 if i in axes else d for i, d in enumerate(x.shape)])
        return y

    def expand_reduced(self, y: Sym, shape: Sequence[int], axes: Sequence[int]) -> Sym:
        """Broadcast a reduction result (axes removed) back to `shape`."""
        kept = [i for i in range(len(shape)) if i not in axes]
        return self.broadcast_in_dim(y, shape, kept)

    def reduce_window(self, x: Sym, kind: str, window: Sequence[int], strides: Sequence[int],
                      padding: Sequence[tuple[int, int]], dilations: Sequence[int] | None = None,
                      init: Sym | None = None) -> Sym:
        dilations = list(dilations) if dilations is not None else [1] * x.rank
        shape = []
        for n, w, s, (lo, hi), d in zip(x.shape, window, strides, padding, dilations,
                                        strict=True):
            span = n + lo + hi - (d * (w - 1) + 1)
            shape.append(span // s + 1 if span >= 0 else 0)
        init = init or self.splat(identity_of(kind, x.dtype), x.dtype)
        return self.op("stablehlo.reduce_window", [x, init], x.dtype, shape,
                       f"padding = {padding_attr(padding)}, window_dilations = {ints(dilations)}, "
                       f"window_dimensions = {ints(window)}, window_strides = {ints(strides)}",
                       [self.binary_body(kind, x.dtype)])

    def dot_general(self, a: Sym, b: Sym, lhs_batch: Sequence[int], rhs_batch: Sequence[int],
                    lhs_contract: Sequence[int], rhs_contract: Sequence[int],
                    dtype: DType | None = None) -> Sym:
        dtype = dtype or a.dtype
        batch = [a.shape[i] for i in lhs_batch]
        lhs_free = [d for i, d in enumerate(a.shape) if i not in (*lhs_batch, *lhs_contract)]
        rhs_free = [d for i, d in enumerate(b.shape) if i not in (*rhs_batch, *rhs_contract)]
        fields = []
        if lhs_batch:
            fields += [f"lhs_batching_dimensions = {int_list(lhs_batch)}",
                       f"rhs_batching_dimensions = {int_list(rhs_batch)}"]
        fields += [f"lhs_contracting_dimensions = {int_list(lhs_contract)}",
                   f"rhs_contracting_dimensions = {int_list(rhs_contract)}"]
        return self.op("stablehlo.dot_general", [a, b], dtype, [*batch, *lhs_free, *rhs_free],
                       f"dot_dimension_numbers = #stablehlo.dot<{', '.join(fields)}>")


def _all_equal(array: np.ndarray) -> bool:
    """Whether every element has the same bits (a splat); a sample rejects most weights
    before the full scan."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.size == 0:
        return True
    raw = flat.view(np.uint8).reshape(flat.size, -1) if flat.dtype.kind != "b" else flat
    sample = raw[:: max(1, flat.size // 64)]
    if not np.all(sample == raw[0]):
        return False
    return bool(np.all(raw == raw[0]))


def _promote(a: DType, b: DType) -> DType:
    if a.is_float or b.is_float:
        floats = [d for d in (a, b) if d.is_float]
        return max(floats, key=lambda d: d.itemsize)
    if a is DType.BOOL:
        return b
    if b is DType.BOOL:
        return a
    return max((a, b), key=lambda d: d.itemsize)


__all__ = ["Emitter", "Region", "Shape", "Sym", "TypeSpec", "element_type", "identity_of",
           "int_list", "ints", "padding_attr"]
