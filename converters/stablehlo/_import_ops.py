"""Handlers of the StableHLO importer, one per op name (table `HANDLERS`).

A handler gets the importer, the current scope, the op and its (static) result types,
emits neutral ops through `scope.builder` and returns one IR value (or `Bound`) per
result. It raises `Unsupported` for forms it cannot express; the op then becomes an
opaque node. Higher-level patterns are recognised where they decide costs: dot_general
becomes matmul / linear (batched when it has batch dims), convolution becomes conv (with
groups) or conv_transpose (input dilation), windowed reductions become pools or scans,
two-operand reductions over an iota become argmax / argmin.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from irbridge.dtypes import DType
from irbridge.errors import CaptureError
from irbridge.ir import Graph, TensorType, Value

from ._mlir import RankedType, op_constant_array, parse_location, ranked_type
from .importer import (
    Bound,
    Scope,
    Unsupported,
    _attr_text,
    _dtype,
    _Importer,
    _str,
    constant_data,
)

Handler = Callable[[_Importer, Scope, Any, list[RankedType]], list[Value | Bound]]
HANDLERS: dict[str, Handler] = {}

HUGE = 2**62

FOLD_LIMIT = 1 << 16
"""Largest constant (elements) a handler inspects element by element at import time."""

SYNTHESIS_LIMIT = FOLD_LIMIT
"""Largest array (elements) a handler makes up at import time from declared dims (an index
range, zeros, a window mask: `_arange`, `_zeros`); a bigger one is a node the graph
computes when it runs."""


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


# -- attribute readers -----------------------------------------------------------------------

def _ints(op: Any, name: str, default: Sequence[int] | None = None) -> list[int]:
    if name not in op.attributes:
        if default is None:
            raise Unsupported(f"attribute {name!r} is missing")
        return list(default)
    attr = op.attributes[name]
    if isinstance(attr, ir.DenseI64ArrayAttr | ir.DenseI32ArrayAttr):
        return [int(v) for v in attr]
    if isinstance(attr, ir.DenseIntElementsAttr):
        return [int(v) for v in np.asarray(attr).reshape(-1)]
    if isinstance(attr, ir.ArrayAttr):
        return [int(ir.IntegerAttr(a).value) for a in attr]
    raise Unsupported(f"attribute {name!r} = {attr} is not a list of integers")


def _int(op: Any, name: str, default: int | None = None) -> int:
    if name not in op.attributes:
        if default is None:
            raise Unsupported(f"attribute {name!r} is missing")
        return default
    return int(ir.IntegerAttr(op.attributes[name]).value)


def _bools(op: Any, name: str) -> list[bool]:
    if name not in op.attributes:
        return []
    attr = op.attributes[name]
    if isinstance(attr, ir.DenseBoolArrayAttr):
        return [bool(v) for v in attr]
    return [bool(v) for v in np.asarray(attr).reshape(-1)]


def _padding(op: Any, rank: int) -> list[tuple[int, int]]:
    if "padding" not in op.attributes:
        return [(0, 0)] * rank
    flat = np.asarray(op.attributes["padding"]).reshape(-1)
    if flat.size == 1:  # a splat
        return [(int(flat[0]), int(flat[0]))] * rank
    pairs = flat.reshape(-1, 2)
    return [(int(lo), int(hi)) for lo, hi in pairs]


def _direction(op: Any) -> str:
    return str(op.attributes["comparison_direction"]).rstrip(">").split()[-1]


def _producer(value: ir.Value) -> Any | None:
    """The op defining a value (None for block arguments)."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner


# -- small emitters -------------------------------------------------------------------------------

def _op(scope: Scope, name: str, inputs: Sequence[Value | None],
        attrs: dict[str, object] | None = None) -> Value:
    return scope.builder.op(name, inputs, attrs)


def _permute(scope: Scope, x: Value, perm: Sequence[int]) -> Value:
    perm = [int(p) for p in perm]
    if perm == list(range(len(perm))):
        return x
    return _op(scope, "permute", [x], {"perm": perm})


def _reshape(scope: Scope, x: Value, shape: Sequence[int]) -> Value:
    shape = [int(d) for d in shape]
    t = x.type
    if t is not None and t.shape == tuple(shape):
        return x
    return _op(scope, "reshape", [x], {"shape": shape})


def _cast(scope: Scope, x: Value, dtype: DType) -> Value:
    t = x.type
    if t is not None and t.dtype == dtype:
        return x
    return _op(scope, "cast", [x], {"dtype": dtype})


def _arange(imp: _Importer, scope: Scope, count: int, dims: Sequence[int]) -> Value:
    """0, 1, .., count - 1 as int64 shaped `dims`: a constant when small, else a `range`
    node. Counts come from declared dims, which a small file can make huge: what the
    importer synthesises from a shape is never allocated at import time past SYNTHESIS_LIMIT
    elements (the graph computes it when it runs)."""
    if count <= SYNTHESIS_LIMIT:
        return imp.constant(scope, np.arange(count, dtype=np.int64).reshape(dims), "iota")
    steps = _op(scope, "range", [], {"start": 0.0, "limit": float(count), "delta": 1.0,
                                     "dtype": DType.INT64})
    return _reshape(scope, steps, dims)


def _zeros(imp: _Importer, scope: Scope, shape: Sequence[int], dtype: DType,
           name: str = "zeros") -> Value:
    """Zeros of `shape`: a constant when small, else a `full` node (see `_arange`)."""
    if math.prod(shape) <= SYNTHESIS_LIMIT:
        return imp.constant(scope, np.zeros(tuple(shape), dtype.numpy), name)
    return _op(scope, "full", [], {"shape": tuple(int(d) for d in shape), "value": 0.0,
                                   "dtype": dtype})


def _shape_of(x: Value) -> tuple[int, ...]:
    t = x.type
    assert t is not None
    return t.static_shape()


def _inputs(imp: _Importer, scope: Scope, op: Any) -> list[Value]:
    return [imp.materialize(scope, v) for v in op.operands]


def _scalar(imp: _Importer, scope: Scope, value: ir.Value) -> float | int | bool | None:
    """The value of a constant all of whose elements are equal, else None."""
    found = scope.find(value)
    data = None if found is None else registry_constant(found[0].value)  # not broadcast
    if data is None or data.size == 0 or data.size > FOLD_LIMIT:
        return None
    flat = np.asarray(data).reshape(-1)
    first = flat[0]
    if not np.all((flat == first) | (np.isnan(flat) & np.isnan(first))
                  if flat.dtype.kind == "f" else flat == first):
        return None
    return first.item()


# -- constants ---------------------------------------------------------------------------------

@handles("stablehlo.constant", "arith.constant")
def _constant(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    rt = types[0]
    where = imp.where(op.operation.name, parse_location(str(op.location)))
    try:
        attr = op.attributes["value"]
    except TypeError as exc:  # the bindings cannot read complex dense attributes
        if rt.dtype not in (DType.COMPLEX64, DType.COMPLEX128):
            raise CaptureError(f"{where}: cannot read the constant's value ({rt.element} "
                               "constants are not supported)") from exc
        data = op_constant_array(str(op), rt, lazy_splat=True)  # read from its text
    else:
        data = constant_data(imp, attr, rt, where)
    loc = parse_location(str(op.location))
    name = loc.names[0] if loc.names else "const"
    shape = rt.static_shape()
    if data.size > 1 and all(stride == 0 for stride in data.strides):  # a splat: stays one
        small = np.asarray(data.reshape(-1)[:1]).reshape((1,) * len(shape))  # element
        return [Bound(imp.constant(scope, small.copy(), "const"), shape)]
    flat = data.reshape(-1)
    if data.size > 1 and np.all(flat.view(np.uint8).reshape(flat.size, -1) ==
                                flat[:1].view(np.uint8).reshape(1, -1)):
        small = np.asarray(flat[0]).reshape((1,) * len(shape))
        return [Bound(imp.constant(scope, small, "const"), shape)]
    return [imp.constant(scope, data, name)]


@handles("stablehlo.iota")
def _iota(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    rt = types[0]
    shape = rt.static_shape()
    dim = _int(op, "iota_dimension")
    dtype = _dtype(rt, "iota")
    values = _op(scope, "range", [], {"start": 0.0, "limit": float(shape[dim]), "delta": 1.0,
                                      "dtype": dtype})
    lazy = [1] * len(shape)
    lazy[dim] = shape[dim]
    return [Bound(_reshape(scope, values, lazy), shape)]


# -- elementwise ---------------------------------------------------------------------------------

_UNARY = {"stablehlo.negate": "neg", "stablehlo.abs": "abs", "stablehlo.exponential": "exp",
          "stablehlo.log": "log", "stablehlo.sqrt": "sqrt", "stablehlo.rsqrt": "rsqrt",
          "stablehlo.sine": "sin", "stablehlo.cosine": "cos", "stablehlo.tan": "tan",
          "stablehlo.tanh": "tanh", "stablehlo.logistic": "sigmoid",
          "stablehlo.floor": "floor", "stablehlo.ceil": "ceil",
          "stablehlo.round_nearest_even": "round", "stablehlo.sign": "sign"}


@handles(*_UNARY)
def _unary(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    x = imp.lazy(scope, op.operands[0])
    name = _UNARY[op.operation.name]
    if name == "abs" and _is_complex(x):  # the modulus, in the real type
        name = "complex_abs"
    return [_keep(op, types, _op(scope, name, [x]))]


_COMPLEX_DTYPES = (DType.COMPLEX64, DType.COMPLEX128)


def _is_complex(x: Value) -> bool:
    return x.type is not None and x.type.dtype in _COMPLEX_DTYPES


# -- complex numbers ------------------------------------------------------------------------------

@handles("stablehlo.complex")
def _complex(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    re, im = (imp.lazy(scope, v) for v in op.operands)
    return [_keep(op, types, _op(scope, "complex", [re, im]))]


@handles("stablehlo.real", "stablehlo.imag")
def _part(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """The real / imaginary part; of a real operand, the operand itself / zeros."""
    bound = imp.lookup(scope, op.operands[0])[0]
    real = op.operation.name == "stablehlo.real"
    if _is_complex(bound.value):
        return [_keep(op, types, _op(scope, "real" if real else "imag", [bound.value]))]
    if real:
        return [bound]
    zero = np.zeros((1,) * len(bound.shape), dtype=_dtype(types[0], "imag").numpy)
    return [Bound(imp.constant(scope, zero, "zero"), bound.shape)]


_FFT: dict[str, tuple[str, dict[str, object]]] = {
        "FFT": ("fft_c2c", {"forward": True, "normalization": "none"}),
        "IFFT": ("fft_c2c", {"forward": False, "normalization": "by_n"}),
        "RFFT": ("fft_r2c", {"onesided": True, "normalization": "none"}),
        "IRFFT": ("fft_c2r", {"normalization": "by_n"})}


@handles("stablehlo.fft")
def _fft(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """A DFT over the last len(fft_length) dims; the inverse ones scale by 1/N."""
    x = imp.materialize(scope, op.operands[0])
    kind = str(op.attributes["fft_type"]).rstrip(">").split()[-1]
    if kind not in _FFT:
        raise Unsupported(f"fft type {kind}")
    lengths = _ints(op, "fft_length")
    rank = len(_shape_of(x))
    name, attrs = _FFT[kind]
    attrs = {**attrs, "dims": list(range(rank - len(lengths), rank))}
    if kind == "IRFFT":
        attrs["last_dim_size"] = lengths[-1]
    elif tuple(lengths) != _shape_of(x)[rank - len(lengths):]:
        raise Unsupported(f"fft_length {lengths} differs from the operand's dims")
    return [_op(scope, name, [x], attrs)]


def _keep(op: Any, types: list[RankedType], value: Value) -> Bound:
    """A possibly lazily broadcast result of an elementwise op."""
    return Bound(value, types[0].static_shape())


_BINARY = {"stablehlo.add": "add", "stablehlo.subtract": "sub", "stablehlo.multiply": "mul",
           "stablehlo.divide": "div", "stablehlo.maximum": "maximum",
           "stablehlo.minimum": "minimum", "stablehlo.power": "pow", "stablehlo.atan2": "atan2"}
_BOOL_BINARY = {"stablehlo.and": "logical_and", "stablehlo.or": "logical_or",
                "stablehlo.xor": "logical_xor", "stablehlo.add": "logical_or",
                "stablehlo.maximum": "logical_or", "stablehlo.minimum": "logical_and",
                "stablehlo.multiply": "logical_and"}


@handles(*_BINARY, "stablehlo.and", "stablehlo.or", "stablehlo.xor")
def _binary(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    name = op.operation.name
    a, b = (imp.lazy(scope, v) for v in op.operands)
    if types[0].dtype is DType.BOOL:
        if name not in _BOOL_BINARY:
            raise Unsupported(f"{name} of booleans")
        return [_keep(op, types, _op(scope, _BOOL_BINARY[name], [a, b]))]
    if name in _BITWISE:
        return [_keep(op, types, _op(scope, _BITWISE[name], [a, b]))]
    return [_keep(op, types, _op(scope, _BINARY[name], [a, b]))]


_BITWISE = {"stablehlo.and": "bitwise_and", "stablehlo.or": "bitwise_or",
            "stablehlo.xor": "bitwise_xor", "stablehlo.shift_left": "shift_left",
            "stablehlo.shift_right_logical": "shift_right_logical",
            "stablehlo.shift_right_arithmetic": "shift_right_arithmetic"}


@handles("stablehlo.shift_left", "stablehlo.shift_right_logical",
         "stablehlo.shift_right_arithmetic")
def _shift(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    a, b = (imp.lazy(scope, v) for v in op.operands)
    return [_keep(op, types, _op(scope, _BITWISE[op.operation.name], [a, b]))]


@handles("stablehlo.not")
def _not(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    x = imp.lazy(scope, op.operands[0])
    if types[0].dtype is not DType.BOOL:
        return [_keep(op, types, _op(scope, "bitwise_not", [x]))]
    return [_keep(op, types, _op(scope, "logical_not", [x]))]


@handles("stablehlo.popcnt", "stablehlo.count_leading_zeros")
def _bit_count(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
               ) -> list[Value | Bound]:
    name = "popcnt" if op.operation.name == "stablehlo.popcnt" else "count_leading_zeros"
    return [_keep(op, types, _op(scope, name, [imp.lazy(scope, op.operands[0])]))]


@handles("stablehlo.remainder")
def _remainder(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """fmod (sign of the dividend): a - b * trunc(a / b)."""
    a, b = (imp.lazy(scope, v) for v in op.operands)
    q = _op(scope, "div", [a, b])
    if types[0].dtype is not None and types[0].dtype.is_float:
        q = _op(scope, "mul", [_op(scope, "sign", [q]),
                               _op(scope, "floor", [_op(scope, "abs", [q])])])
    return [_keep(op, types, _op(scope, "sub", [a, _op(scope, "mul", [b, q])]))]


def _scalar_const(scope: Scope, value: float, like: Value) -> Value:
    t = like.type
    assert t is not None
    return scope.builder.constant(np.asarray(value, dtype=t.dtype.numpy), "c", dtype=t.dtype)


@handles("stablehlo.exponential_minus_one", "stablehlo.log_plus_one", "stablehlo.cbrt",
         "stablehlo.is_finite", "stablehlo.round_nearest_afz")
def _composed_unary(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                    ) -> list[Value | Bound]:
    x = imp.lazy(scope, op.operands[0])
    name = op.operation.name
    if name == "stablehlo.exponential_minus_one":
        y = _op(scope, "sub", [_op(scope, "exp", [x]), _scalar_const(scope, 1.0, x)])
    elif name == "stablehlo.log_plus_one":
        y = _op(scope, "log", [_op(scope, "add", [x, _scalar_const(scope, 1.0, x)])])
    elif name == "stablehlo.cbrt" and _is_complex(x):  # the principal root
        y = _op(scope, "pow", [x, _scalar_const(scope, 1 / 3, x)])
    elif name == "stablehlo.cbrt":
        magnitude = _op(scope, "pow", [_op(scope, "abs", [x]), _scalar_const(scope, 1 / 3, x)])
        y = _op(scope, "mul", [_op(scope, "sign", [x]), magnitude])
    elif name == "stablehlo.is_finite":
        bad = _op(scope, "logical_or", [_op(scope, "isnan", [x]), _op(scope, "isinf", [x])])
        y = _op(scope, "logical_not", [bad])
    else:  # round half away from zero
        shifted = _op(scope, "add", [_op(scope, "abs", [x]), _scalar_const(scope, 0.5, x)])
        y = _op(scope, "mul", [_op(scope, "sign", [x]), _op(scope, "floor", [shifted])])
    return [_keep(op, types, y)]


_COMPARE = {"EQ": "equal", "NE": "not_equal", "LT": "less", "LE": "less_equal",
            "GT": "greater", "GE": "greater_equal"}


@handles("stablehlo.compare")
def _compare(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    a, b = (imp.lazy(scope, v) for v in op.operands)
    return [_keep(op, types, _op(scope, _COMPARE[_direction(op)], [a, b]))]


@handles("stablehlo.select")
def _select(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    pred, a, b = (imp.lazy(scope, v) for v in op.operands)
    return [_keep(op, types, _op(scope, "where", [pred, a, b]))]


@handles("stablehlo.clamp")
def _clamp(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    lo_v, x_v, hi_v = op.operands
    x = imp.lazy(scope, x_v)
    lo, hi = _scalar(imp, scope, lo_v), _scalar(imp, scope, hi_v)
    if lo is not None and hi is not None:
        y = _op(scope, "clip", [x], {"min": float(lo), "max": float(hi)})
    else:
        y = _op(scope, "clip", [x, imp.lazy(scope, lo_v), imp.lazy(scope, hi_v)])
    return [_keep(op, types, y)]


@handles("stablehlo.convert")
def _convert(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    x = imp.lazy(scope, op.operands[0])
    dtype = _dtype(types[0], "convert")
    data = imp.const_array(scope, op.operands[0])
    if _is_complex(x) and dtype not in _COMPLEX_DTYPES:  # complex -> real: the real part
        x = _op(scope, "real", [x])
        data = None if data is None else np.real(data)
    if data is not None and data.size <= 16:
        return [Bound(imp.constant(scope, np.asarray(registry_cast(data, dtype))),
                      types[0].static_shape())]
    return [_keep(op, types, _cast(scope, x, dtype))]


def registry_cast(data: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype.is_integer and data.dtype.kind == "f":
        data = np.trunc(data)
    return np.asarray(data).astype(dtype.numpy)


@handles("stablehlo.bitcast_convert")
def _bitcast_convert(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                     ) -> list[Value | Bound]:
    x = imp.materialize(scope, op.operands[0])
    return [_op(scope, "bitcast", [x], {"dtype": _dtype(types[0], "bitcast_convert")})]


@handles("stablehlo.reduce_precision")
def _reduce_precision(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                      ) -> list[Value | Bound]:
    x = imp.lazy(scope, op.operands[0])
    return [_keep(op, types, _op(scope, "reduce_precision", [x], {
        "exponent_bits": _int(op, "exponent_bits"), "mantissa_bits": _int(op, "mantissa_bits")}))]


@handles("stablehlo.map")
def _map(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """A body of elementwise ops on scalars, applied to the whole operands at once."""
    rank = len(types[0].shape)
    if sorted(_ints(op, "dimensions")) != list(range(rank)):
        raise Unsupported("a map over some of the dims")
    block = op.regions[0].blocks[0]
    env: dict[Any, Value] = dict(zip(block.arguments, _inputs(imp, scope, op), strict=True))
    for inner in block.operations:
        name = inner.operation.name
        if name in ("stablehlo.return", "func.return"):  # (a constant stays a lazy splat)
            return [Bound(env[v] if _shape_of(env[v]) else _reshape(scope, env[v], [1] * rank),
                          rt.static_shape())
                    for v, rt in zip(inner.operands, types, strict=True)]
        xs = [env.get(v) for v in inner.operands]
        if any(x is None for x in xs):
            raise Unsupported("a map body reading values from outside it")
        args = cast(list[Value], xs)
        rt = ranked_type(inner.results[0].type)
        if rt is None or rt.dtype is None:
            raise Unsupported(f"a map body with a {inner.results[0].type} value")
        if name == "stablehlo.constant" and rt.shape == ():
            data = constant_data(imp, inner.attributes["value"], rt, "map")
            value = imp.constant(scope, np.asarray(data).reshape(()), "c")
        elif name in _UNARY and rt.dtype not in _COMPLEX_DTYPES:
            value = _op(scope, _UNARY[name], args)
        elif name in _BINARY and rt.dtype is not DType.BOOL:
            value = _op(scope, _BINARY[name], args)
        elif name in _BITWISE and rt.dtype is not DType.BOOL:
            value = _op(scope, _BITWISE[name], args)
        elif name in _BOOL_BINARY and rt.dtype is DType.BOOL:
            value = _op(scope, _BOOL_BINARY[name], args)
        elif name == "stablehlo.compare":
            value = _op(scope, _COMPARE[_direction(inner)], args)
        elif name == "stablehlo.select":
            value = _op(scope, "where", args)
        elif name == "stablehlo.convert":
            value = _cast(scope, args[0], rt.dtype)
        else:
            raise Unsupported(f"{name} in a map body")
        env[inner.results[0]] = value
    raise Unsupported("a map body without a return")


@handles("stablehlo.optimization_barrier")
def _barrier(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    return [imp.lookup(scope, v)[0] for v in op.operands]


# -- shape ops -------------------------------------------------------------------------------------

@handles("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim")
def _broadcast_in_dim(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                      ) -> list[Value | Bound]:
    """A reshape (and permute) of the operand to the result's rank; the broadcast itself
    stays implicit until a consumer needs the full tensor."""
    bound = imp.lookup(scope, op.operands[0])[0]
    x = bound.value
    dims = _ints(op, "broadcast_dimensions")
    out_shape = types[0].static_shape()
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = _permute(scope, x, order)
    dims = [dims[i] for i in order]
    have = _shape_of(x)
    lazy = [1] * len(out_shape)
    for d, size in zip(dims, have, strict=True):
        lazy[d] = size
    data = registry_constant(x)
    if data is not None and data.size <= 16:
        return [Bound(imp.constant(scope, np.asarray(data).reshape(lazy)), out_shape)]
    return [Bound(_reshape(scope, x, lazy), out_shape)]


def registry_constant(x: Value) -> np.ndarray | None:
    from irbridge.ops import registry

    return registry.constant_value(x)


@handles("stablehlo.reshape", "stablehlo.dynamic_reshape")
def _reshape_op(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                ) -> list[Value | Bound]:
    shape = types[0].static_shape()
    data = imp.const_array(scope, op.operands[0])
    if data is not None and data.size <= 16:
        return [imp.constant(scope, np.asarray(data).reshape(shape))]
    bound = imp.lookup(scope, op.operands[0])[0]
    if bound.lazy and _only_adds_unit_dims(bound.shape, shape):  # keep it lazy
        lazy = _insert_units(_shape_of(bound.value), bound.shape, shape)
        if lazy is not None:
            return [Bound(_reshape(scope, bound.value, lazy), shape)]
    return [_reshape(scope, imp.materialize(scope, op.operands[0]), shape)]


def _only_adds_unit_dims(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    return [d for d in before if d != 1] == [d for d in after if d != 1]


def _insert_units(have: tuple[int, ...], before: tuple[int, ...],
                  after: tuple[int, ...]) -> list[int] | None:
    """The lazy shape after a reshape that only adds or drops size-1 dims."""
    kept = [h for h, b in zip(have, before, strict=True) if b != 1]
    out, it = [], iter(kept)
    for d in after:
        out.append(1 if d == 1 else next(it, None))
    return None if any(o is None for o in out) else [int(o) for o in out if o is not None]


@handles("stablehlo.transpose")
def _transpose(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    bound = imp.lookup(scope, op.operands[0])[0]
    perm = _ints(op, "permutation")
    return [Bound(_permute(scope, bound.value, perm), types[0].static_shape())]


@handles("stablehlo.slice")
def _slice(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    x = imp.materialize(scope, op.operands[0])
    starts, limits = _ints(op, "start_indices"), _ints(op, "limit_indices")
    strides = _ints(op, "strides", [1] * len(starts))
    return [_slice_value(scope, x, starts, limits, strides)]


def _slice_value(scope: Scope, x: Value, starts: Sequence[int], limits: Sequence[int],
                 strides: Sequence[int]) -> Value:
    shape = _shape_of(x)
    axes, s, e, st = [], [], [], []
    for axis, (lo, hi, step) in enumerate(zip(starts, limits, strides, strict=True)):
        if lo == 0 and hi == shape[axis] and step == 1:
            continue
        axes.append(axis)
        s.append(lo)
        e.append(hi)
        st.append(step)
    if not axes:
        return x
    attrs: dict[str, object] = {"starts": s, "ends": e, "axes": axes}
    if any(v != 1 for v in st):
        attrs["steps"] = st
    return _op(scope, "slice", [x], attrs)


@handles("stablehlo.dynamic_slice")
def _dynamic_slice(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                   ) -> list[Value | Bound]:
    x = imp.materialize(scope, op.operands[0])
    shape = _shape_of(x)
    sizes = _ints(op, "slice_sizes")
    known = [_scalar(imp, scope, v) for v in op.operands[1:]]
    if any(start is None for start in known):  # run-time starts: the registry's op
        values = [imp.materialize(scope, v) for v in op.operands[1:]]
        return [_op(scope, "dynamic_slice", [x, *values], {"sizes": list(sizes)})]
    starts = [min(max(int(cast(int, start)), 0), shape[axis] - sizes[axis])
              for axis, start in enumerate(known)]  # clamped
    return [_slice_value(scope, x, starts, [s + n for s, n in zip(starts, sizes, strict=True)],
                         [1] * len(sizes))]


@handles("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                          ) -> list[Value | Bound]:
    """where(inside the window, the update padded to x's shape, x)."""
    x = imp.materialize(scope, op.operands[0])
    update = imp.materialize(scope, op.operands[1])
    shape, size = _shape_of(x), _shape_of(update)
    known = [_scalar(imp, scope, v) for v in op.operands[2:]]
    if any(start is None for start in known):  # run-time starts: the registry's op
        starts_v = [imp.materialize(scope, v) for v in op.operands[2:]]
        return [_op(scope, "dynamic_update_slice", [x, update, *starts_v])]
    starts = [min(max(int(cast(int, start)), 0), shape[axis] - size[axis])
              for axis, start in enumerate(known)]
    rank = len(shape)
    if list(size) == list(shape):
        return [update]
    pads = starts + [n - s - k for n, s, k in zip(shape, starts, size, strict=True)]
    padded = _op(scope, "pad", [update], {"pads": pads})
    mask: Value | None = None
    for axis in range(rank):
        if size[axis] == shape[axis]:
            continue
        dims = [shape[axis] if a == axis else 1 for a in range(rank)]
        if shape[axis] <= SYNTHESIS_LIMIT:
            r = np.arange(shape[axis])
            inside = (r >= starts[axis]) & (r < starts[axis] + size[axis])
            part = imp.constant(scope, inside.reshape(dims), "window")
        else:   # computed when the graph runs (see _arange)
            r_v = _arange(imp, scope, shape[axis], dims)
            low, high = (imp.constant(scope, np.array(v, np.int64), "bound")
                         for v in (starts[axis], starts[axis] + size[axis]))
            part = _op(scope, "logical_and", [_op(scope, "greater_equal", [r_v, low]),
                                              _op(scope, "less", [r_v, high])])
        mask = part if mask is None else _op(scope, "logical_and", [mask, part])
    assert mask is not None
    return [_op(scope, "where", [mask, padded, x])]


@handles("stablehlo.concatenate")
def _concatenate(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                 ) -> list[Value | Bound]:
    xs = _inputs(imp, scope, op)
    return [_op(scope, "concat", xs, {"axis": _int(op, "dimension")})]


@handles("stablehlo.reverse")
def _reverse(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    x = imp.materialize(scope, op.operands[0])
    dims = _ints(op, "dimensions")
    if not dims:
        return [x]
    return [_reverse_value(scope, x, dims)]


def _reverse_value(scope: Scope, x: Value, dims: Sequence[int]) -> Value:
    return _op(scope, "slice", [x], {"starts": [-1] * len(dims), "ends": [-HUGE] * len(dims),
                                     "axes": list(dims), "steps": [-1] * len(dims)})


@handles("stablehlo.pad")
def _pad(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    low, high = _ints(op, "edge_padding_low"), _ints(op, "edge_padding_high")
    return _padded(imp, scope, op, low, high, _ints(op, "interior_padding", [0] * len(low)))


def _padded(imp: _Importer, scope: Scope, op: Any, low: list[int], high: list[int],
            interior: list[int]) -> list[Value | Bound]:
    x = imp.materialize(scope, op.operands[0])
    known = _scalar(imp, scope, op.operands[1])
    # a run-time padding value (a 0-d tensor) is the pad op's `value` input
    fill: Value | None = imp.materialize(scope, op.operands[1]) if known is None else None
    value = 0.0 if known is None else float(known)
    if any(i < 0 for i in interior):
        raise Unsupported("negative interior padding")
    for axis, step in enumerate(interior):
        if step:
            x = _interior_pad(scope, x, axis, step, value, fill)
    if all(v == 0 for v in (*low, *high)):
        return [x]
    return [_op(scope, "pad", [x, None, fill] if fill is not None else [x],
                {"pads": [*low, *high], "value": value})]


def _interior_pad(scope: Scope, x: Value, axis: int, step: int, value: float,
                  fill: Value | None = None) -> Value:
    """`step` fill elements between neighbours along `axis`: add a dim, pad it, merge."""
    shape = _shape_of(x)
    n = shape[axis]
    if n <= 1:
        return x
    y = _reshape(scope, x, [*shape[:axis + 1], 1, *shape[axis + 1:]])
    pads = [0] * (2 * (len(shape) + 1))
    pads[len(shape) + 1 + axis + 1] = step
    y = _op(scope, "pad", [y, None, fill] if fill is not None else [y],
            {"pads": pads, "value": value})
    y = _reshape(scope, y, [*shape[:axis], n * (step + 1), *shape[axis + 1:]])
    return _slice_value(scope, y, [0] * len(shape),
                        [*shape[:axis], n * (step + 1) - step, *shape[axis + 1:]],
                        [1] * len(shape))


@handles("stablehlo.dynamic_iota")
def _dynamic_iota(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                  ) -> list[Value | Bound]:
    """The result type is static: an iota of it (the shape operand says the same)."""
    return _iota(imp, scope, op, types)


@handles("stablehlo.dynamic_pad")
def _dynamic_pad(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                 ) -> list[Value | Bound]:
    """stablehlo.pad with the paddings as constant operands instead of attributes."""
    pads = []
    for name, value in zip(("low", "high", "interior"), list(op.operands)[2:], strict=True):
        data = imp.const_array(scope, value)
        if data is None:
            raise Unsupported(f"a dynamic_pad whose {name} padding is not a constant")
        pads.append([int(v) for v in np.asarray(data).reshape(-1)])
    return _padded(imp, scope, op, *pads)


@handles("stablehlo.get_dimension_size")
def _get_dimension_size(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                        ) -> list[Value | Bound]:
    size = imp.shape(op.operands[0])[_int(op, "dimension")]
    return [imp.constant(scope, np.asarray(size, dtype=_dtype(types[0], "size").numpy))]


# -- reductions ---------------------------------------------------------------------------------

_BODY_KIND = {"stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
              "stablehlo.minimum": "min", "stablehlo.or": "max", "stablehlo.and": "min"}
_REDUCE_OP = {"add": "reduce_sum", "mul": "reduce_prod", "max": "reduce_max",
              "min": "reduce_min"}


def _body_kind(region: Any) -> str | None:
    """add / mul / max / min when a two-argument body combines its arguments with one op."""
    block = region.blocks[0]
    ops = list(block.operations)
    args = list(block.arguments)
    if len(ops) != 2 or len(args) != 2:
        return None
    body, ret = ops
    if ret.operation.name not in ("stablehlo.return", "func.return"):
        return None
    operands = list(body.operands)
    if body.operation.name not in _BODY_KIND or len(operands) != 2:
        return None
    if set(map(_arg_index(args), operands)) != {0, 1} or ret.operands[0] != body.results[0]:
        return None
    return _BODY_KIND[body.operation.name]


def _arg_index(args: list[ir.Value]) -> Callable[[ir.Value], int]:
    def index(value: ir.Value) -> int:
        for i, a in enumerate(args):
            if a == value:
                return i
        return -1
    return index


def _trace_arg(value: ir.Value, args: list[ir.Value], depth: int = 6) -> int:
    """The block argument a comparator operand comes from, looking through the selects
    and converts JAX uses to canonicalise -0.0 and NaN (-1 when there is none)."""
    for i, a in enumerate(args):
        if a == value:
            return i
    producer = _producer(value)
    if producer is None or depth == 0:
        return -1
    name = producer.operation.name
    if name == "stablehlo.select":
        found = {_trace_arg(v, args, depth - 1) for v in list(producer.operands)[1:]} - {-1}
        return found.pop() if len(found) == 1 else -1
    if name in ("stablehlo.convert", "stablehlo.bitcast_convert"):
        return _trace_arg(producer.operands[0], args, depth - 1)
    return -1


def _is_identity(kind: str, value: object, dtype: DType) -> bool:
    if value is None:
        return False
    if kind == "add":
        return value == 0
    if kind == "mul":
        return value == 1
    if dtype is DType.BOOL:
        return bool(value) == (kind == "min")
    if dtype.is_float:
        return value == (-np.inf if kind == "max" else np.inf)
    info = np.iinfo(dtype.numpy)
    return value == (info.min if kind == "max" else info.max)


@handles("stablehlo.reduce")
def _reduce(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    count = len(op.operands) // 2
    dims = _ints(op, "dimensions")
    if count == 2:
        return _arg_reduce(imp, scope, op, types, dims)
    if count != 1:
        raise Unsupported(f"a reduction of {count} operands")
    kind = _body_kind(op.regions[0])
    if kind is None:
        raise Unsupported("a reduction body other than one add/mul/max/min/and/or")
    x = imp.materialize(scope, op.operands[0])
    y = _op(scope, _REDUCE_OP[kind], [x], {"axes": dims, "keepdims": False}) if dims else x
    init = _scalar(imp, scope, op.operands[1])
    if not _is_identity(kind, init, _dtype(types[0], "reduce")):
        combine = {"add": "add", "mul": "mul", "max": "maximum", "min": "minimum"}[kind]
        if types[0].dtype is DType.BOOL:
            combine = {"max": "logical_or", "min": "logical_and"}.get(kind, combine)
        y = _op(scope, combine, [y, imp.lazy(scope, op.operands[1])])
    return [y]


def _iota_dim(imp: _Importer, scope: Scope, value: ir.Value) -> int | None:
    """The dim along which a value counts 0, 1, 2, ... (an iota, maybe broadcast)."""
    producer = _producer(value)
    if producer is not None and producer.operation.name == "stablehlo.iota":
        return _int(producer, "iota_dimension")
    if producer is not None and producer.operation.name == "stablehlo.broadcast_in_dim":
        inner = _iota_dim(imp, scope, producer.operands[0])
        if inner is not None:
            return _ints(producer, "broadcast_dimensions")[inner]
    if producer is not None and producer.operation.name == "stablehlo.reshape":
        inner = _iota_dim(imp, scope, producer.operands[0])
        before, after = imp.shape(producer.operands[0]), imp.shape(value)
        if inner is not None and _only_adds_unit_dims(before, after):
            rank = sum(1 for d in before[:inner] if d != 1)  # non-unit dims before it
            positions = [i for i, d in enumerate(after) if d != 1]
            return positions[rank] if rank < len(positions) else None
    data = imp.const_array(scope, value)
    if data is not None and data.ndim and data.size <= FOLD_LIMIT:
        for dim in range(data.ndim):
            shape = [1] * data.ndim
            shape[dim] = data.shape[dim]
            if np.array_equal(data, np.broadcast_to(np.arange(data.shape[dim]).reshape(shape),
                                                    data.shape)):
                return dim
    return None


def _arg_reduce(imp: _Importer, scope: Scope, op: Any, types: list[RankedType],
                dims: list[int]) -> list[Value | Bound]:
    """(values, iota) reduced with a compare-and-select body: argmax or argmin."""
    if len(dims) != 1 or _iota_dim(imp, scope, op.operands[1]) != dims[0]:
        raise Unsupported("a two-operand reduction that is not an arg-max/min over an iota")
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    index = _arg_index(args)
    direction = None
    for inner in block.operations:
        if inner.operation.name != "stablehlo.compare":
            continue
        operands = [index(v) for v in inner.operands]
        if sorted(operands) == [0, 2]:
            d = _direction(inner)
            if d in ("GT", "GE", "LT", "LE"):
                swapped = operands[0] == 2
                greater = d in ("GT", "GE")
                direction = "max" if greater != swapped else "min"
                break
    if direction is None:
        raise Unsupported("a two-operand reduction body that is not a compare-and-select")
    x = imp.materialize(scope, op.operands[0])
    axis = dims[0]
    values = _op(scope, f"reduce_{direction}", [x], {"axes": [axis], "keepdims": False})
    indices = _op(scope, f"arg{direction}", [x], {"axis": axis, "keepdims": False})
    return [values, _cast(scope, indices, _dtype(types[1], "reduce"))]


@handles("stablehlo.reduce_window")
def _reduce_window(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                   ) -> list[Value | Bound]:
    if len(op.operands) != 2:
        raise Unsupported("a windowed reduction of several operands")
    rank = len(imp.shape(op.operands[0]))
    return [_windowed(imp, scope, op.operands[0], op.operands[1], _body_kind(op.regions[0]),
                      _ints(op, "window_dimensions"), _ints(op, "window_strides", [1] * rank),
                      _ints(op, "base_dilations", [1] * rank),
                      _ints(op, "window_dilations", [1] * rank), _padding(op, rank),
                      _dtype(types[0], "reduce_window"))]


def _dynamic_reduce_window(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                           ) -> list[Value | Bound]:
    """`custom_call @stablehlo.dynamic_reduce_window` (JAX's cumsum / pooling over a
    symbolic dim): reduce_window with the window, strides, dilations and padding as
    operands, which are constants once --bind has refined the shapes; the body is the
    function `called_computations` names."""
    if len(op.operands) != 7 or len(op.results) != 1:
        raise Unsupported("a dynamic windowed reduction of several operands")
    ints = []
    for index, what in enumerate(("window_dimensions", "window_strides", "base_dilations",
                                  "window_dilations", "padding"), start=2):
        data = imp.const_array(scope, op.operands[index])
        if data is None:
            raise Unsupported(f"a dynamic_reduce_window whose {what} is not a constant "
                              "(bind the symbolic dims with --bind)")
        ints.append([int(v) for v in np.asarray(data).reshape(-1)])
    window, strides, base, dilations, flat_padding = ints
    padding = [(lo, hi) for lo, hi in zip(flat_padding[::2], flat_padding[1::2], strict=True)]
    try:   # (MLIR's attribute map has no .get)
        callees = list(op.attributes["called_computations"])
    except KeyError:
        callees = []
    body = imp.funcs.get(_str(callees[0])) if len(callees) == 1 else None
    if body is None:
        raise Unsupported("a dynamic_reduce_window without its reducer function")
    return [_windowed(imp, scope, op.operands[0], op.operands[1], _body_kind(body.regions[0]),
                      window, strides, base, dilations, padding,
                      _dtype(types[0], "dynamic_reduce_window"))]


def _windowed(imp: _Importer, scope: Scope, operand: Any, init_operand: Any,
              kind: str | None, window: list[int], strides: list[int], base: list[int],
              dilations: list[int], padding: list[tuple[int, int]], dtype: DType) -> Value:
    """A windowed add / max / min / mul of `operand` from `init_operand`, StableHLO's
    reduce_window semantics."""
    x = imp.materialize(scope, operand)
    shape = _shape_of(x)
    rank = len(shape)
    init = _scalar(imp, scope, init_operand)
    if len(window) != rank or len(padding) != rank:
        raise Unsupported("window or padding of another rank than the operand's")
    if kind is None or kind not in ("add", "max", "min", "mul"):
        raise Unsupported("a windowed reduction body other than add, max, min or mul")
    if any(b != 1 for b in base) or any(lo < 0 or hi < 0 for lo, hi in padding):
        if init is None or not _is_identity(kind, init, dtype):
            raise Unsupported("base dilation or negative padding in a windowed reduction "
                              "whose initial value is not its identity")
        # holes of the identity between the elements, then negative padding cropped
        for axis, step in enumerate(base):
            if step != 1:
                x = _interior_pad(scope, x, axis, step - 1, float(init))
        shape = _shape_of(x)
        if any(lo < 0 or hi < 0 for lo, hi in padding):
            x = _slice_value(scope, x, [max(-lo, 0) for lo, _ in padding],
                             [n - max(-hi, 0) for n, (_, hi) in zip(shape, padding, strict=True)],
                             [1] * rank)
            padding = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
    # StableHLO starts each window at the initial value and pads with it: max / min of a
    # window with padding is max / min(init, the window's elements), a sum without
    # padding is init + the window's sum; the pooling below runs from the identity
    combine: Value | None = None
    if not _is_identity(kind, init, dtype):
        if kind == "mul" or dtype is DType.BOOL or (
                kind == "add" and any(p != (0, 0) for p in padding)):
            raise Unsupported(f"a windowed {kind} whose initial value is not its identity")
        combine = imp.materialize(scope, init_operand)
    if kind == "min":  # min = flip(max(flip(x))), flip order-reversing and exact
        flip = "neg" if dtype.is_float else "bitwise_not"
        x = _op(scope, flip, [x])
        result = _reduce_window_pooled(scope, x, "max", window, strides, dilations, padding)
        result = _op(scope, flip, [result])
    else:
        result = _reduce_window_pooled(scope, x, kind, window, strides, dilations, padding)
    if combine is not None:
        joined = {"max": "maximum", "min": "minimum", "add": "add"}[kind]
        result = _op(scope, joined, [result, combine])
    return result


def _reduce_window_pooled(scope: Scope, x: Value, kind: str, window: Sequence[int],
                          strides: Sequence[int], dilations: Sequence[int],
                          padding: Sequence[tuple[int, int]]) -> Value:
    """A windowed add / max / mul from its identity, as pooling (or a scan)."""
    shape = _shape_of(x)
    rank = len(shape)
    pooled = [d for d in range(rank) if window[d] != 1 or strides[d] != 1 or padding[d] != (0, 0)
              or dilations[d] != 1]
    # a scan: one axis, the window spans it, stride 1, padded in front (or behind)
    if len(pooled) == 1 and kind in ("add", "mul"):
        a = pooled[0]
        n = shape[a]
        if window[a] == n and strides[a] == 1 and dilations[a] == 1 and \
                padding[a] in ((n - 1, 0), (0, n - 1)):
            return _op(scope, "cumsum" if kind == "add" else "cumprod", [x],
                       {"axis": a, "reverse": padding[a] == (0, n - 1)})
    if kind == "mul" or not pooled:
        if not pooled:
            return x
        raise Unsupported("a windowed product")
    if kind == "add" and any(dilations[d] != 1 for d in pooled) and \
            not _has_attr("avg_pool", "dilations"):
        raise Unsupported("a dilated windowed sum")
    kept = [d for d in range(rank) if d not in pooled]
    y = _permute(scope, x, kept + pooled)
    kept_sizes = [shape[d] for d in kept]
    if len(kept) == 2:
        lead = kept_sizes
    elif len(kept) < 2:
        lead = [1] * (2 - len(kept)) + kept_sizes
    else:
        lead = [math.prod(kept_sizes[:-1]), kept_sizes[-1]]
    y = _reshape(scope, y, [*lead, *(shape[d] for d in pooled)])
    attrs: dict[str, object] = {
        "kernel": [window[d] for d in pooled], "strides": [strides[d] for d in pooled],
        "pads": [padding[d][0] for d in pooled] + [padding[d][1] for d in pooled]}
    if kind == "max":
        if any(dilations[d] != 1 for d in pooled):
            attrs["dilations"] = [dilations[d] for d in pooled]
        y = _op(scope, "max_pool", [y], attrs)
    else:  # a windowed sum: the average over full windows times the window size
        attrs["count_include_pad"] = True
        if any(dilations[d] != 1 for d in pooled):
            attrs["dilations"] = [dilations[d] for d in pooled]
        dtype = _shape_dtype(y)
        integer = dtype is not None and not dtype.is_float
        if integer:  # an integer average would truncate: sum in float64, round back
            y = _cast(scope, y, DType.FLOAT64)
        y = _op(scope, "avg_pool", [y], attrs)
        size = math.prod(window[d] for d in pooled)
        y = _op(scope, "mul", [y, _scalar_const(scope, float(size), y)])
        if integer and dtype is not None:
            y = _cast(scope, _op(scope, "round", [y]), dtype)
    out = _shape_of(y)
    y = _reshape(scope, y, [*kept_sizes, *out[2:]])
    inverse = [0] * rank
    for position, d in enumerate(kept + pooled):
        inverse[d] = position
    return _permute(scope, y, inverse)


def _shape_dtype(x: Value) -> DType | None:
    return None if x.type is None else x.type.dtype


def _has_attr(op: str, name: str) -> bool:
    """Whether the registry's op has an attribute (the op set grows)."""
    from irbridge.ops import registry

    return any(spec.name == name for spec in registry.get(op).attrs)


# -- matmul and convolution ---------------------------------------------------------------------

@handles("stablehlo.dot_general", "stablehlo.dot")
def _dot_general(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                 ) -> list[Value | Bound]:
    dtype = _dtype(types[0], "dot_general")
    a = _cast(scope, imp.materialize(scope, op.operands[0]), dtype)
    b = _cast(scope, imp.materialize(scope, op.operands[1]), dtype)
    sa, sb = _shape_of(a), _shape_of(b)
    if op.operation.name == "stablehlo.dot":
        lb, rb, lc, rc = [], [], [len(sa) - 1], [0]
    else:
        dn = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
        lb, rb = list(dn.lhs_batching_dimensions), list(dn.rhs_batching_dimensions)
        lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(len(sa)) if d not in lb + lc]
    rf = [d for d in range(len(sb)) if d not in rb + rc]
    if not lb and len(lc) == 1 and lc[0] == len(sa) - 1 and len(sa) >= 1 and len(sb) == 2:
        if rc == [0]:
            return [_op(scope, "matmul", [a, b])]
        if rc == [1]:
            return [_op(scope, "linear", [a, b])]
    a = _permute(scope, a, lb + lf + lc)
    b = _permute(scope, b, rb + rc + rf)
    batch = [sa[d] for d in lb]
    m, k = math.prod(sa[d] for d in lf), math.prod(sa[d] for d in lc)
    n = math.prod(sb[d] for d in rf)
    a = _reshape(scope, a, [*batch, m, k])
    b = _reshape(scope, b, [*batch, k, n])
    y = _op(scope, "matmul", [a, b])
    return [_reshape(scope, y, [*batch, *(sa[d] for d in lf), *(sb[d] for d in rf)])]


def _conv_padding(imp: _Importer, scope: Scope, op: Any, rank: int) -> list[tuple[int, int]]:
    """The padding attribute, or dynamic_conv's padding operand when it is a constant."""
    if op.operation.name != "stablehlo.dynamic_conv":
        return _padding(op, rank)
    data = imp.const_array(scope, op.operands[2])
    if data is None:
        raise Unsupported("a dynamic_conv whose padding is not a constant")
    pairs = np.asarray(data).reshape(rank, 2)
    return [(int(lo), int(hi)) for lo, hi in pairs]


@handles("stablehlo.convolution", "stablehlo.dynamic_conv")
def _convolution(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                 ) -> list[Value | Bound]:
    dtype = _dtype(types[0], "convolution")
    x = _cast(scope, imp.materialize(scope, op.operands[0]), dtype)
    w = _cast(scope, imp.materialize(scope, op.operands[1]), dtype)
    dn = _stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    spatial = list(dn.input_spatial_dimensions)
    d = len(spatial)
    batch_groups = _int(op, "batch_group_count", 1)
    if any(_bools(op, "window_reversal")):
        raise Unsupported("window reversal")
    groups = _int(op, "feature_group_count", 1)
    if batch_groups != 1 and groups != 1:
        raise Unsupported("both batch_group_count and feature_group_count > 1")
    strides = _ints(op, "window_strides", [1] * d)
    padding = _conv_padding(imp, scope, op, d)
    lhs_dil = _ints(op, "lhs_dilation", [1] * d)
    rhs_dil = _ints(op, "rhs_dilation", [1] * d)
    x = _permute(scope, x, [dn.input_batch_dimension, dn.input_feature_dimension, *spatial])
    w = _permute(scope, w, [dn.kernel_output_feature_dimension,
                            dn.kernel_input_feature_dimension, *dn.kernel_spatial_dimensions])
    kernel = _shape_of(w)[2:]
    if batch_groups != 1:  # batch group g pairs with output-feature group g: move the
        n, c, *rest = _shape_of(x)  # batch groups into the features, as feature groups
        x = _reshape(scope, x, [batch_groups, n // batch_groups, c, *rest])
        x = _reshape(scope, _permute(scope, x, [1, 0, *range(2, d + 3)]),
                     [n // batch_groups, batch_groups * c, *rest])
        groups = batch_groups
    transposed = None
    if any(s != 1 for s in lhs_dil) and all(s == 1 for s in strides):
        try:
            transposed = _transposed(scope, x, w, kernel, strides, padding, lhs_dil, rhs_dil,
                                     groups)
        except Unsupported:
            transposed = None
    if transposed is not None:
        y = transposed
    else:
        for axis, step in enumerate(lhs_dil):  # the input dilated explicitly: zeros between
            if step != 1:
                x = _interior_pad(scope, x, 2 + axis, step - 1, 0.0)
        if any(lo < 0 or hi < 0 for lo, hi in padding):  # negative padding crops the input
            xs = _shape_of(x)
            x = _slice_value(scope, x, [0, 0, *(max(-lo, 0) for lo, _ in padding)],
                             [xs[0], xs[1], *(n - max(-hi, 0) for n, (_, hi) in
                                              zip(xs[2:], padding, strict=True))], [1] * (d + 2))
            padding = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
        attrs: dict[str, object] = {"strides": strides, "groups": groups,
                                    "pads": [lo for lo, _ in padding] + [hi for _, hi in padding]}
        if any(v != 1 for v in rhs_dil):
            attrs["dilations"] = rhs_dil
        y = _op(scope, "conv", [x, w], attrs)
    out = [0] * (d + 2)
    out[dn.output_batch_dimension] = 0
    out[dn.output_feature_dimension] = 1
    for j, s in enumerate(dn.output_spatial_dimensions):
        out[s] = 2 + j
    return [_permute(scope, y, out)]


def _transposed(scope: Scope, x: Value, w: Value, kernel: tuple[int, ...], strides: list[int],
                padding: list[tuple[int, int]], lhs_dil: list[int], rhs_dil: list[int],
                groups: int) -> Value:
    """A convolution of the input dilated by s (lhs_dilation), stride 1, is the transposed
    convolution with stride s of the flipped kernel, in/out features swapped per group."""
    d = len(kernel)
    if any(s != 1 for s in strides):
        raise Unsupported("a convolution with both input dilation and window strides")
    pads_begin, pads_end, out_pad = [], [], []
    for i in range(d):
        span = rhs_dil[i] * (kernel[i] - 1)
        lo, hi = padding[i]
        if lo > span:
            raise Unsupported("input-dilated convolution with more padding than the kernel")
        pads_begin.append(span - lo)
        if hi <= span:
            pads_end.append(span - hi)
            out_pad.append(0)
        else:
            pads_end.append(0)
            out_pad.append(hi - span)
            if hi - span >= max(lhs_dil[i], rhs_dil[i]):
                raise Unsupported("input-dilated convolution with too much end padding")
    cout, cin_g = _shape_of(w)[:2]
    flipped = _reverse_value(scope, w, list(range(2, 2 + d)))
    if groups == 1:
        wt = _permute(scope, flipped, [1, 0, *range(2, 2 + d)])
    else:
        wt = _reshape(scope, flipped, [groups, cout // groups, cin_g, *kernel])
        wt = _permute(scope, wt, [0, 2, 1, *range(3, 3 + d)])
        wt = _reshape(scope, wt, [groups * cin_g, cout // groups, *kernel])
    attrs: dict[str, object] = {"strides": lhs_dil, "pads": pads_begin + pads_end,
                                "groups": groups}
    if any(v != 1 for v in rhs_dil):
        attrs["dilations"] = rhs_dil
    if any(out_pad):
        attrs["output_padding"] = out_pad
    return _op(scope, "conv_transpose", [x, wt], attrs)


@handles("stablehlo.batch_norm_inference")
def _batch_norm(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                ) -> list[Value | Bound]:
    x, scale, bias, mean, var = _inputs(imp, scope, op)
    axis = _int(op, "feature_index")
    rank = len(_shape_of(x))
    epsilon = float(ir.FloatAttr(op.attributes["epsilon"]).value)
    if rank < 2:
        raise Unsupported("batch norm of a tensor of rank < 2")
    perm = list(range(rank))
    if axis != 1:
        perm.remove(axis)
        perm.insert(1, axis)
    y = _op(scope, "batch_norm", [_permute(scope, x, perm), scale, bias, mean, var],
            {"epsilon": epsilon})
    inverse = [perm.index(i) for i in range(rank)]
    return [_permute(scope, y, inverse)]


# -- gather and scatter ------------------------------------------------------------------------

def _index_layout(idx_shape: tuple[int, ...], ivd: int) -> tuple[int, tuple[int, ...]]:
    """(index vector size, batch shape) of a gather/scatter index tensor."""
    if ivd == len(idx_shape):
        return 1, idx_shape
    return idx_shape[ivd], idx_shape[:ivd] + idx_shape[ivd + 1:]


def _drop_index_dim(scope: Scope, idx: Value, ivd: int) -> Value:
    shape = _shape_of(idx)
    if ivd == len(shape):
        return idx
    return _reshape(scope, idx, shape[:ivd] + shape[ivd + 1:])


def _concat_iota_index(imp: _Importer, scope: Scope, value: ir.Value, ivd: int,
                       start_map: list[int]) -> tuple[int, ir.Value] | None:
    """torch-mlir's torch.gather / scatter: indices = concat(iota, ..., IDX, ..., iota) along
    the index vector dim; returns (operand axis of IDX, IDX) when the pattern holds."""
    producer = _producer(value)
    if producer is None or producer.operation.name != "stablehlo.concatenate" or \
            _int(producer, "dimension") != ivd:
        return None
    parts = list(producer.operands)
    if len(parts) != len(start_map):
        return None
    found = None
    for j, part in enumerate(parts):
        if imp.shape(part)[ivd] != 1:
            return None
        dim = _iota_dim(imp, scope, part)
        operand_dim = start_map[j]
        batch_dim = operand_dim if operand_dim < ivd else operand_dim + 1  # dims around ivd
        if dim == batch_dim and dim != ivd:
            continue
        if found is not None:
            return None
        found = (operand_dim, part)
    return found


def _batched_index(imp: _Importer, scope: Scope, op: Any, ivd: int,
                   operand_batch: list[int], index_batch: list[int], axis: int, rank: int,
                   index_dims: int, what: str) -> tuple[Value, list[int]]:
    """torch.gather / scatter written with batching dims (every operand dim but `axis`):
    the index tensor without its index-vector dim, permuted to the operand's dim order,
    and that permutation (`order[d]` = the index dim that lines up with operand dim d)."""
    idx = _drop_index_dim(scope, imp.materialize(scope, op.operands[1]), ivd)
    batch_positions = [p if p < ivd else p - 1 for p in index_batch]
    rest = [p for p in range(index_dims) if p not in batch_positions]
    if not rest:   # one index per batch position: a unit dim along `axis`
        idx = _reshape(scope, idx, [*_shape_of(idx), 1])
        rest = [index_dims]
    if len(rest) != 1:
        raise Unsupported(f"a batched {what} with several {what}ed index dims")
    order = [rest[0] if dim == axis else batch_positions[operand_batch.index(dim)]
             for dim in range(rank)]
    return _permute(scope, idx, order), order


def _within(imp: _Importer, scope: Scope, indices: Any, size: int) -> bool:
    """Whether `indices` is a constant whose every value is a start in 0..size-1."""
    known = imp.const_array(scope, indices)
    return known is not None and bool(((known >= 0) & (known < size)).all())


def _clamped(imp: _Importer, scope: Scope, indices: Any, idx: Value, size: int) -> Value:
    """A gather's start indices along an axis of `size` (slice size 1 there) clamped into
    0..size-1, as StableHLO's gather clamps them (the neutral gather would read a negative
    index from the end and refuse one past it; JAX relies on the clamp for x[i])."""
    if _within(imp, scope, indices, size):
        return idx
    return _op(scope, "clip", [idx], {"min": 0.0, "max": float(size - 1)})


def _skipping_scatter(imp: _Importer, scope: Scope, x: Value, idx: Value, updates: Value,
                      axis: int, attrs: dict[str, Any], indices: Any) -> Value:
    """scatter_elements along `axis` with StableHLO's rule for an index outside the
    operand: that update is skipped (the neutral op would wrap a negative index and refuse
    one past the end; JAX's `.at[i].add` relies on the skip). Out-of-range indices are sent
    to one extra slice appended along `axis`, cut off after."""
    x_shape = _shape_of(x)
    size = x_shape[axis]
    if _within(imp, scope, indices, size):
        return _op(scope, "scatter_elements", [x, idx, updates], {"axis": axis, **attrs})
    inside = _in_range(imp, scope, idx, size)
    past = imp.constant(scope, np.array(size, _dtype_of(idx).numpy), "past")
    idx = _op(scope, "where", [inside, idx, past])
    spare_shape = [1 if d == axis else n for d, n in enumerate(x_shape)]
    spare = _zeros(imp, scope, spare_shape, _dtype_of(x), "spare")
    y = _op(scope, "concat", [x, spare], {"axis": axis})
    y = _op(scope, "scatter_elements", [y, idx, updates], {"axis": axis, **attrs})
    return _slice_value(scope, y, [0] * len(x_shape), list(x_shape), [1] * len(x_shape))


@handles("stablehlo.gather", "stablehlo.dynamic_gather")
def _gather(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    dn = _stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    x = imp.materialize(scope, op.operands[0])
    x_shape = _shape_of(x)
    r = len(x_shape)
    idx_shape = imp.shape(op.operands[1])
    ivd = dn.index_vector_dim
    vector, batch = _index_layout(idx_shape, ivd)
    if op.operation.name == "stablehlo.dynamic_gather":  # slice sizes as an operand
        data = imp.const_array(scope, op.operands[2])
        if data is None:
            raise Unsupported("a dynamic_gather whose slice sizes are not a constant")
        sizes = [int(v) for v in np.asarray(data).reshape(-1)]
    else:
        sizes = _ints(op, "slice_sizes")
    offset_dims = list(dn.offset_dims)
    collapsed = list(dn.collapsed_slice_dims)
    start_map = list(dn.start_index_map)
    operand_batch = list(dn.operand_batching_dims)
    index_batch = list(dn.start_indices_batching_dims)
    out_shape = types[0].static_shape()
    # torch.gather written with batching dims: every dim but `axis` is a batching dim
    if operand_batch and vector == 1 and len(start_map) == 1 and collapsed == start_map and \
            not offset_dims and all(s == 1 for s in sizes) and \
            sorted(operand_batch + start_map) == list(range(r)):
        a = start_map[0]
        idx, order = _batched_index(imp, scope, op, ivd, operand_batch, index_batch, a, r,
                                    len(batch), "gather")
        idx = _clamped(imp, scope, op.operands[1], idx, x_shape[a])
        y = _op(scope, "gather_elements", [x, idx], {"axis": a})
        y = _permute(scope, y, [order.index(p) for p in range(r)])
        return [_reshape(scope, y, out_shape)]   # (drops a unit dim of one index per batch)
    if operand_batch:
        return [_flat_gather(imp, scope, op, dn, x, sizes, out_shape)]
    # torch-mlir's torch.gather: full coordinates from iotas and one index tensor
    if vector == r and len(start_map) == r and sorted(collapsed) == list(range(r)) and \
            all(s == 1 for s in sizes) and not offset_dims and ivd == len(idx_shape) - 1:
        found = _concat_iota_index(imp, scope, op.operands[1], ivd, start_map)
        if found is not None:
            a, part = found
            idx = _drop_index_dim(scope, imp.materialize(scope, part), ivd)
            idx = _clamped(imp, scope, part, idx, x_shape[a])
            return [_op(scope, "gather_elements", [x, idx], {"axis": a})]
    # numpy.take / embedding: whole slices along one axis
    if vector == 1 and len(start_map) == 1 and sizes[start_map[0]] == 1 and \
            set(collapsed) <= set(start_map):
        a = start_map[0]
        limits = list(x_shape)
        for dim in range(r):
            if dim != a:
                limits[dim] = sizes[dim]
        x = _slice_value(scope, x, [0] * r, limits, [1] * r)
        idx = _drop_index_dim(scope, imp.materialize(scope, op.operands[1]), ivd)
        idx = _clamped(imp, scope, op.operands[1], idx, x_shape[a])
        y = _op(scope, "gather", [x, idx], {"axis": a})
        nb = len(batch)
        labels: list[tuple[str, int]] = [("op", d) for d in range(a)] + \
            [("b", k) for k in range(nb)] + [("op", d) for d in range(a + 1, r)]
        if a not in collapsed:  # the size-1 slice of `axis` stays, after the batch dims
            y = _reshape(scope, y, [*x_shape[:a], *batch, 1, *limits[a + 1:]])
            labels.insert(a + nb, ("op", a))
        kept = [d for d in range(r) if d not in collapsed]
        mlir: list[tuple[str, int]] = []
        counter = 0
        for p in range(len(out_shape)):
            if p in offset_dims:
                mlir.append(("op", kept[offset_dims.index(p)]))
            else:
                mlir.append(("b", counter))
                counter += 1
        return [_permute(scope, y, [labels.index(label) for label in mlir])]
    return [_flat_gather(imp, scope, op, dn, x, sizes, out_shape)]


def _flat_gather(imp: _Importer, scope: Scope, op: Any, dn: Any, x: Value, sizes: list[int],
                 out_shape: tuple[int, ...]) -> Value:
    """Any gather: each output element's flat position in the operand (computed at import
    time for constant indices), then one gather from the flattened operand."""
    x_shape = _shape_of(x)
    known = _constant_gather_index(imp, scope, op, dn, x_shape, sizes, out_shape)
    flat = imp.constant(scope, known, "index") if known is not None else \
        _runtime_gather_index(imp, scope, op, dn, x_shape, sizes, out_shape)
    return _op(scope, "gather", [_reshape(scope, x, [-1]), flat], {"axis": 0})


def _runtime_gather_index(imp: _Importer, scope: Scope, op: Any, dn: Any,
                          x_shape: tuple[int, ...], sizes: list[int],
                          out_shape: tuple[int, ...]) -> Value:
    """StableHLO's gather index arithmetic as IR ops on run-time indices: the sum over the
    operand dims of (clamped start + batching index + window offset) * that dim's stride."""
    parts = _runtime_operand_index(
        imp, scope, op.operands[1], dn.index_vector_dim, out_shape, list(dn.offset_dims),
        x_shape, list(dn.start_index_map), list(dn.collapsed_slice_dims),
        list(dn.operand_batching_dims), list(dn.start_indices_batching_dims), sizes)
    return _flat_index(imp, scope, parts, x_shape, out_shape)


def _flat_index(imp: _Importer, scope: Scope, parts: list[Value | None],
                x_shape: tuple[int, ...], shape: tuple[int, ...]) -> Value:
    """sum(parts[d] * stride of d) in `shape` (a missing part is 0)."""
    strides = np.cumprod((1, *x_shape[:0:-1]))[::-1]
    flat: Value | None = None
    for d, part in enumerate(parts):
        if part is None:
            continue
        term = _op(scope, "mul", [part, imp.constant(scope, np.array(strides[d]), "stride")])
        flat = term if flat is None else _op(scope, "add", [flat, term])
    if flat is None:
        flat = imp.constant(scope, np.zeros((1,) * len(shape), np.int64), "index")
    if _shape_of(flat) != shape:
        flat = _op(scope, "expand", [flat], {"shape": list(shape)})
    return flat


def _runtime_operand_index(imp: _Importer, scope: Scope, indices: ir.Value, ivd: int,
                           shape: tuple[int, ...], window_dims: list[int],
                           x_shape: tuple[int, ...], start_map: list[int], dropped: list[int],
                           operand_batch: list[int], index_batch: list[int],
                           sizes: list[int] | None) -> list[Value | None]:
    """`_operand_positions` as IR ops on run-time indices: per operand dim, the operand
    index of every element of `shape` (broadcastable to it; None where always 0)."""
    idx = _cast(scope, imp.materialize(scope, indices), DType.INT64)
    rank = len(shape)
    idx_shape = _shape_of(idx)
    if ivd == len(idx_shape):
        idx = _reshape(scope, idx, [*idx_shape, 1])
    else:  # the index vector last
        idx = _permute(scope, idx, [d for d in range(len(idx_shape)) if d != ivd] + [ivd])
    batch_shape = list(_shape_of(idx)[:-1])
    batch_dims = [d for d in range(rank) if d not in window_dims]
    parts: list[Value | None] = [None] * len(x_shape)

    def add(d: int, value: Value) -> None:
        current = parts[d]
        parts[d] = value if current is None else _op(scope, "add", [current, value])

    def iota_at(position: int) -> Value:
        dims = [1] * rank
        dims[position] = shape[position]
        return _arange(imp, scope, shape[position], dims)

    for k, d in enumerate(start_map):
        part = _slice_value(scope, idx, [0] * len(batch_shape) + [k], [*batch_shape, k + 1],
                            [1] * (len(batch_shape) + 1))
        if sizes is not None:  # gather: the slice must fit
            part = _op(scope, "clip", [part], {"min": 0.0, "max": float(x_shape[d] - sizes[d])})
        add(d, _reshape(scope, part, [shape[p] if p in batch_dims else 1 for p in range(rank)]))
    for d, d_start in zip(operand_batch, index_batch, strict=True):
        add(d, iota_at(batch_dims[d_start - (0 if d_start < ivd else 1)]))
    windowed = [d for d in range(len(x_shape)) if d not in dropped + operand_batch]
    for d, p in zip(windowed, window_dims, strict=True):
        add(d, iota_at(p))
    return parts


def _insert_dim(index: tuple[int, ...], ivd: int, rank: int) -> tuple[Any, ...]:
    """An index into the start indices: the index vector dim (if any) taken whole."""
    return (*index[:ivd], slice(None), *index[ivd:]) if ivd < rank else index


def _operand_positions(idx: np.ndarray, ivd: int, shape: tuple[int, ...],
                       window_dims: list[int], x_shape: tuple[int, ...], start_map: list[int],
                       dropped: list[int], operand_batch: list[int], index_batch: list[int],
                       sizes: list[int] | None) -> Iterator[tuple[int, tuple[int, ...], list[int]]]:
    """StableHLO's gather / scatter index arithmetic: for each element of `shape` (the
    gather result, the scatter updates) its position, index and operand index: the start
    read from `idx` (clamped so that a slice of `sizes` fits, as gather does), plus its
    batching index and its offset in the window (`dropped` dims have none)."""
    batch_dims = [d for d in range(len(shape)) if d not in window_dims]
    windowed = [d for d in range(len(x_shape)) if d not in dropped + operand_batch]
    for position, index in enumerate(np.ndindex(*shape)):
        batch_index = tuple(index[d] for d in batch_dims)
        start = idx[_insert_dim(batch_index, ivd, idx.ndim)].reshape(-1)
        full = [0] * len(x_shape)
        for k, d in enumerate(start_map):
            full[d] = int(start[k]) if sizes is None else \
                int(np.clip(start[k], 0, x_shape[d] - sizes[d]))
        for d, d_start in zip(operand_batch, index_batch, strict=True):
            full[d] += batch_index[d_start - (0 if d_start < ivd else 1)]
        for d, p in zip(windowed, window_dims, strict=True):
            full[d] += index[p]
        yield position, index, full


def _constant_gather_index(imp: _Importer, scope: Scope, op: Any, dn: Any,
                           x_shape: tuple[int, ...], sizes: list[int],
                           out_shape: tuple[int, ...]) -> np.ndarray | None:
    """StableHLO's gather on constant indices: the flat operand position of every output
    element, or None."""
    idx = imp.const_array(scope, op.operands[1])
    if idx is None or math.prod(out_shape) > FOLD_LIMIT:
        return None
    strides = np.cumprod((1, *x_shape[:0:-1]))[::-1]
    flat = np.zeros(out_shape, dtype=np.int64)
    for _, out_index, full in _operand_positions(
            np.asarray(idx).astype(np.int64), dn.index_vector_dim, out_shape,
            list(dn.offset_dims), x_shape, list(dn.start_index_map),
            list(dn.collapsed_slice_dims), list(dn.operand_batching_dims),
            list(dn.start_indices_batching_dims), sizes):
        flat[out_index] = int(np.dot(full, strides))
    return flat


_SELECT = {"GE": np.greater_equal, "GT": np.greater, "LE": np.less_equal, "LT": np.less}


@handles("stablehlo.select_and_scatter")
def _select_and_scatter(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                        ) -> list[Value | Bound]:
    """Of a constant operand: each window's selected element (the first that the select
    body keeps against every later one; padding is never selected) is found at import
    time, then the source is scattered there from the initial value."""
    select_block = op.regions[0].blocks[0]
    compares = [o for o in select_block.operations if o.operation.name == "stablehlo.compare"]
    args = list(select_block.arguments)
    if len(compares) != 1 or [_trace_arg(v, args) for v in compares[0].operands] != [0, 1] \
            or _direction(compares[0]) not in _SELECT:
        raise Unsupported("a select_and_scatter whose select body is not one compare")
    keep = _SELECT[_direction(compares[0])]
    kind = _scatter_kind(op.regions[1])
    dtype = _dtype(types[0], "select_and_scatter")
    if kind is None or kind == "none" or \
            not _is_identity(kind, _scalar(imp, scope, op.operands[2]), dtype):
        # (for other initial values the spec, init + the sources, and the reference
        # interpreter, which adds the initial value once more per source, disagree)
        raise Unsupported("a select_and_scatter other than add/mul/max/min from its identity")
    data = imp.const_array(scope, op.operands[0])
    source_shape = imp.shape(op.operands[1])
    if data is None or math.prod(source_shape) > FOLD_LIMIT:
        raise Unsupported("a select_and_scatter of a run-time operand")
    data = np.asarray(data)
    rank = data.ndim
    window = _ints(op, "window_dimensions")
    strides = _ints(op, "window_strides", [1] * rank)
    padding = _padding(op, rank)
    targets, sources = [], []
    for position, s_index in enumerate(np.ndindex(*source_shape)):
        selected: tuple[int, ...] | None = None
        for offset in np.ndindex(*window):
            at = tuple(i * st - lo + o for i, st, (lo, _), o in
                       zip(s_index, strides, padding, offset, strict=True))
            if not all(0 <= a < n for a, n in zip(at, data.shape, strict=True)):
                continue
            if selected is None or not keep(data[selected], data[at]):
                selected = at
        if selected is not None:
            targets.append(int(np.ravel_multi_index(selected, data.shape)))
            sources.append(position)
    init = imp.materialize(scope, op.operands[2])
    out_shape = types[0].static_shape()
    y = _op(scope, "expand", [_reshape(scope, init, [1] * rank)], {"shape": list(out_shape)})
    if not targets:
        return [y]
    picked = _op(scope, "gather", [_reshape(scope, imp.materialize(scope, op.operands[1]), [-1]),
                                   imp.constant(scope, np.array(sources, np.int64), "index")],
                 {"axis": 0})
    y = _op(scope, "scatter_elements",
            [_reshape(scope, y, [-1]), imp.constant(scope, np.array(targets, np.int64), "index"),
             picked], {"axis": 0, "reduction": "none" if kind == "none" else kind})
    return [_reshape(scope, y, list(out_shape))]


_SCATTER_KIND = {None: "none", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def _scatter_kind(region: Any) -> str | None:
    """none (the update replaces) or the combining op of a scatter body."""
    block = region.blocks[0]
    ops = list(block.operations)
    args = list(block.arguments)
    if len(ops) == 1 and len(args) == 2 and ops[0].operands[0] == args[1]:
        return "none"
    kind = _body_kind(region)
    return kind


@handles("stablehlo.scatter")
def _scatter(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    if len(op.operands) != 3:
        raise Unsupported("a scatter of several operands")
    kind = _scatter_kind(op.regions[0])
    if kind is None:
        raise Unsupported("a scatter body other than replace/add/mul/max/min")
    dn = _stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    x = imp.materialize(scope, op.operands[0])
    updates = imp.materialize(scope, op.operands[2])
    x_shape = _shape_of(x)
    r = len(x_shape)
    idx_shape = imp.shape(op.operands[1])
    ivd = dn.index_vector_dim
    vector, batch = _index_layout(idx_shape, ivd)
    window = list(dn.update_window_dims)
    inserted = list(dn.inserted_window_dims)
    to_operand = list(dn.scattered_dims_to_operand_dims)
    operand_batch = list(dn.input_batching_dims)
    index_batch = list(dn.scatter_indices_batching_dims)
    attrs = {"reduction": kind}
    if operand_batch and vector == 1 and len(to_operand) == 1 and inserted == to_operand and \
            not window and sorted(operand_batch + to_operand) == list(range(r)):
        a = to_operand[0]
        idx, order = _batched_index(imp, scope, op, ivd, operand_batch, index_batch, a, r,
                                    len(batch), "scatter")
        if len(batch) == len(operand_batch):   # updates then lack the unit dim too
            updates = _reshape(scope, updates, [*_shape_of(updates), 1])
        return [_skipping_scatter(imp, scope, x, idx, _permute(scope, updates, order), a,
                                  attrs, op.operands[1])]
    if operand_batch:
        return [_constant_scatter(imp, scope, op, dn, x, updates, kind)]
    if vector == r and len(to_operand) == r and sorted(inserted) == list(range(r)) and \
            not window and ivd == len(idx_shape) - 1:
        found = _concat_iota_index(imp, scope, op.operands[1], ivd, to_operand)
        if found is not None:
            a, part = found
            idx = _drop_index_dim(scope, imp.materialize(scope, part), ivd)
            return [_skipping_scatter(imp, scope, x, idx, updates, a, attrs, part)]
    # rows along one axis (index_put / embedding-gradient style)
    if vector == 1 and len(to_operand) == 1 and inserted == to_operand and \
            len(window) == r - 1:
        a = to_operand[0]
        idx = _drop_index_dim(scope, imp.materialize(scope, op.operands[1]), ivd)
        n = math.prod(batch)
        u_shape = _shape_of(updates)
        scatter_dims = [p for p in range(len(u_shape)) if p not in window]
        u = _permute(scope, updates, [*window[:a], *scatter_dims, *window[a:]])
        u = _reshape(scope, u, [*(u_shape[p] for p in window[:a]), n,
                                *(u_shape[p] for p in window[a:])])
        target = _shape_of(u)
        idx = _reshape(scope, idx, [n if dim == a else 1 for dim in range(r)])
        idx = _op(scope, "expand", [idx], {"shape": list(target)})
        return [_skipping_scatter(imp, scope, x, idx, u, a, attrs, op.operands[1])]
    return [_constant_scatter(imp, scope, op, dn, x, updates, kind)]


def _runtime_scatter(imp: _Importer, scope: Scope, op: Any, dn: Any, x: Value,
                     updates: Value, kind: str) -> Value:
    """A scatter with run-time indices: StableHLO's index arithmetic as IR ops; updates
    whose operand index is out of bounds go to one extra element, dropped after."""
    x_shape, u_shape = _shape_of(x), _shape_of(updates)
    parts = _runtime_operand_index(
        imp, scope, op.operands[1], dn.index_vector_dim, u_shape, list(dn.update_window_dims),
        x_shape, list(dn.scattered_dims_to_operand_dims), list(dn.inserted_window_dims),
        list(dn.input_batching_dims), list(dn.scatter_indices_batching_dims), None)
    flat = _flat_index(imp, scope, parts, x_shape, u_shape)
    size = math.prod(x_shape)
    inside: Value | None = None
    for d, part in enumerate(parts):
        if part is None:
            continue
        ok = _in_range(imp, scope, part, x_shape[d])
        inside = ok if inside is None else _op(scope, "logical_and", [inside, ok])
    if inside is not None:
        flat = _op(scope, "where", [inside, flat, imp.constant(scope, np.array(size), "past")])
    spare = imp.constant(scope, np.zeros(1, dtype=_dtype_of(x).numpy), "spare")
    y = _op(scope, "concat", [_reshape(scope, x, [-1]), spare], {"axis": 0})
    y = _op(scope, "scatter_elements", [y, _reshape(scope, flat, [-1]),
                                        _reshape(scope, updates, [-1])],
            {"axis": 0, "reduction": kind})
    return _reshape(scope, _slice_value(scope, y, [0], [size], [1]), list(x_shape))


def _in_range(imp: _Importer, scope: Scope, index: Value, size: int) -> Value:
    """0 <= index < size, element-wise (constants in the index's own type)."""
    kind = _dtype_of(index).numpy
    return _op(scope, "logical_and", [
        _op(scope, "greater_equal", [index, imp.constant(scope, np.array(0, kind), "zero")]),
        _op(scope, "less", [index, imp.constant(scope, np.array(size, kind), "size")])])


def _dtype_of(x: Value) -> DType:
    t = x.type
    assert t is not None
    return t.dtype


def _constant_scatter(imp: _Importer, scope: Scope, op: Any, dn: Any, x: Value,
                      updates: Value, kind: str) -> Value:
    """StableHLO's scatter index arithmetic (updates out of bounds skipped, as StableHLO
    does): on constant indices, every update element's flat position in the operand at
    import time, then one scatter_elements on the flattened operand."""
    idx = imp.const_array(scope, op.operands[1])
    u_shape = _shape_of(updates)
    x_shape = _shape_of(x)
    if idx is None or math.prod(u_shape) > FOLD_LIMIT:
        return _runtime_scatter(imp, scope, op, dn, x, updates, kind)
    strides = np.cumprod((1, *x_shape[:0:-1]))[::-1]
    targets: list[int] = []
    sources: list[int] = []
    for position, _, full in _operand_positions(
            np.asarray(idx).astype(np.int64), dn.index_vector_dim, u_shape,
            list(dn.update_window_dims), x_shape, list(dn.scattered_dims_to_operand_dims),
            list(dn.inserted_window_dims), list(dn.input_batching_dims),
            list(dn.scatter_indices_batching_dims), None):
        if all(0 <= v < n for v, n in zip(full, x_shape, strict=True)):
            targets.append(int(np.dot(full, strides)))
            sources.append(position)
    if not targets:
        return x
    flat_x = _reshape(scope, x, [-1])
    picked = _op(scope, "gather", [_reshape(scope, updates, [-1]),
                                   imp.constant(scope, np.array(sources, np.int64), "index")],
                 {"axis": 0})
    y = _op(scope, "scatter_elements",
            [flat_x, imp.constant(scope, np.array(targets, np.int64), "index"), picked],
            {"axis": 0, "reduction": kind})
    return _reshape(scope, y, list(x_shape))


# -- sorting -----------------------------------------------------------------------------------

@handles("stablehlo.sort")
def _sort(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    count = len(op.operands)
    axis = _int(op, "dimension", -1)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    with_iota = count == 2 and \
        _iota_dim(imp, scope, op.operands[1]) == axis % len(types[0].shape)
    if count > 1 and not with_iota and _uses_args(block, args[2:]):
        raise Unsupported("a sort of several operands compared on more than the first")
    orders = set()  # what the comparisons of the two values say about the order
    for inner in block.operations:
        if inner.operation.name != "stablehlo.compare":
            continue
        operands = [_trace_arg(v, args) for v in inner.operands]
        d = _direction(inner)
        if sorted(operands) == [0, 1] and d in ("GT", "GE", "LT", "LE"):
            orders.add((d in ("GT", "GE")) == (operands[0] == 0))
    descending = orders.pop() if len(orders) == 1 else None
    if descending is None:
        raise Unsupported("a sort comparator other than one compare of the values")
    x = imp.materialize(scope, op.operands[0])
    values, indices = scope.builder.op_multi("sort", [x], {"axis": axis,
                                                           "descending": descending})
    if count == 1:
        return [values]
    if with_iota:
        return [values, _cast(scope, indices, _dtype(types[1], "sort"))]
    # the other operands follow the first one's (stable) order
    return [values, *(_op(scope, "gather_elements", [imp.materialize(scope, v), indices],
                          {"axis": axis}) for v in list(op.operands)[1:])]


def _uses_args(block: Any, args: Sequence[ir.Value]) -> bool:
    """Whether any op of `block` reads one of `args`."""
    return any(v == a for inner in block.operations for v in inner.operands for a in args)


@handles("stablehlo.triangular_solve")
def _triangular_solve(imp: _Importer, scope: Scope, op: Any,
                      types: list[RankedType]) -> list[Value | Bound]:
    """The neutral triangular_solve has StableHLO's attributes. StableHLO leaves the result
    undefined when unit_diagonal is set and the diagonal is not ones; the neutral op does not
    read the diagonal then (torch's unitriangular), which is one of the allowed results."""
    transpose = str(op.attributes["transpose_a"]).rstrip(">").split()[-1]
    if transpose not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise Unsupported(f"transpose_a {transpose!r}")
    flags = {name: bool(ir.BoolAttr(op.attributes[name]).value)
             for name in ("left_side", "lower", "unit_diagonal")}
    a, b = (imp.materialize(scope, v) for v in op.operands)
    return [_op(scope, "triangular_solve", [a, b], {**flags, "transpose_a": transpose})]


# -- calls, composites, control flow, custom calls ------------------------------------------

@handles("func.call")
def _call(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    callee = _str(op.attributes["callee"])
    where = imp.where("func.call", parse_location(str(op.location)))
    return list(imp.call(scope, callee, list(op.operands), where))


_COMPOSITES = {"chlo.erf": "erf", "chlo.tan": "tan"}


@handles("stablehlo.composite")
def _composite(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
               ) -> list[Value | Bound]:
    """Known composites map to one neutral op; the rest inline their decomposition."""
    name = _str(op.attributes["name"])
    if name in _COMPOSITES and len(op.operands) == 1:
        x = imp.lazy(scope, op.operands[0])
        return [_keep(op, types, _op(scope, _COMPOSITES[name], [x]))]
    if name == "chlo.top_k" and "composite_attributes" in op.attributes:
        attrs = op.attributes["composite_attributes"]
        k = int(ir.IntegerAttr(attrs["k"]).value)
        x = imp.materialize(scope, op.operands[0])
        values, indices = scope.builder.op_multi("topk", [x], {"k": k, "axis": -1})
        return [values, _cast(scope, indices, _dtype(types[1], "top_k"))]
    where = imp.where("stablehlo.composite", parse_location(str(op.location)))
    return list(imp.call(scope, _str(op.attributes["decomposition"]), list(op.operands), where))


@handles("stablehlo.while")
def _while(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """stablehlo.while (cond region, body region) as a neutral loop: the condition is
    evaluated once before the loop and again at the end of each body."""
    carried = _inputs(imp, scope, op)
    cond_region, body_region = op.regions[0], op.regions[1]
    first = _region_values(imp, scope, cond_region, carried)
    if len(first) != 1:
        raise Unsupported("a while condition with several results")
    keep_going = _reshape(scope, first[0], [])
    graph = Graph("while_body")
    from irbridge.builder import GraphBuilder

    builder = GraphBuilder(graph, imp.model)
    inner = scope.child(builder)
    graph.add_input("iteration", TensorType(DType.INT64, ()))
    graph.add_input("cond_in", TensorType(DType.BOOL, ()))
    state = [graph.add_input(f"carried_{i}", v.type) for i, v in enumerate(carried)]
    new_state = _region_values(imp, inner, body_region, state)
    again = _region_values(imp, inner, cond_region, new_state)
    outputs = [_reshape(inner, again[0], []), *new_state]
    outputs = [v if v.producer is not None and v.producer in graph.nodes
               else builder.op("identity", [v]) for v in outputs]
    graph.set_outputs(outputs)
    trips = _counted_trips(keep_going, again[0], carried, state, new_state)
    if trips is not None:  # a for loop: the cond input goes, the trip count says it all
        count = scope.builder.constant(np.asarray(trips, np.int64), "trips")
        return list(scope.builder.op_multi("loop", [count, None, *carried], {"body": graph},
                                           num_outputs=len(carried)))
    return list(scope.builder.op_multi("loop", [None, keep_going, *carried], {"body": graph},
                                       num_outputs=len(carried)))


def _counted_trips(first: Value, again: Value, carried: Sequence[Value],
                   state: Sequence[Value], new_state: Sequence[Value]) -> int | None:
    """The trip count of a while that counts (JAX's scan and fori_loop): its cond is `i < N`
    for a constant N and a carried integer i that starts at a constant and that the body
    adds 1 to; None for any other while (the loop then keeps its cond)."""
    found = _less_than_constant(first, carried)
    if found is None or _less_than_constant(again, new_state) != found:
        return None
    k, limit = found
    start, step = registry_constant(carried[k]), new_state[k].producer
    if start is None or start.size != 1 or start.dtype.kind not in "iu" or \
            step is None or step.op != "add" or step.is_opaque:
        return None
    x, y = step.inputs
    one = y if x is state[k] else x if y is state[k] else None
    data = registry_constant(one) if one is not None else None
    if data is None or data.size != 1 or int(data.reshape(-1)[0]) != 1:
        return None
    return max(limit - int(start.reshape(-1)[0]), 0)


def _less_than_constant(cond: Value, counters: Sequence[Value]) -> tuple[int, int] | None:
    """(k, N) when `cond` is `counters[k] < N` for a one-element integer constant N."""
    node = cond.producer
    if node is None or node.op != "less" or node.is_opaque or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    limit = registry_constant(b) if b is not None else None
    if a is None or limit is None or limit.size != 1 or limit.dtype.kind not in "iu":
        return None
    k = next((i for i, c in enumerate(counters) if c is a), None)
    return None if k is None else (k, int(limit.reshape(-1)[0]))


def _region_values(imp: _Importer, scope: Scope, region: Any, args: Sequence[Value]
                   ) -> list[Value]:
    """Import a region inline (its block arguments bound to `args`), return its results."""
    inner = scope.child()
    block = region.blocks[0]
    for arg, value in zip(block.arguments, args, strict=True):
        inner.env[arg] = Bound(value, imp.shape(arg))
    results = imp.block(inner, block)
    return [imp.materialize(inner, r) for r in results]


@handles("stablehlo.if")
def _if(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    pred = _reshape(scope, imp.materialize(scope, op.operands[0]), [])
    then_graph, _ = _branch(imp, scope, op.regions[0], "then")
    else_graph, _ = _branch(imp, scope, op.regions[1], "else")
    return list(scope.builder.op_multi("if", [pred], {"then_branch": then_graph,
                                                      "else_branch": else_graph},
                                       num_outputs=len(types)))


def _branch(imp: _Importer, scope: Scope, region: Any, name: str) -> tuple[Graph, list[Value]]:
    graph, outs = imp.region_graph(scope, region, name)
    graph.set_outputs(outs)
    return graph, outs


@handles("stablehlo.case")
def _case(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """Nested ifs: branch k when index == k; an index out of range takes the last branch."""
    index = _reshape(scope, imp.materialize(scope, op.operands[0]), [])
    regions = list(op.regions)
    if len(regions) == 1:  # always taken: inline it
        return list(_region_values(imp, scope, regions[0], []))
    return list(_case_chain(imp, scope, index, regions, 0, len(types)))


def _case_chain(imp: _Importer, scope: Scope, index: Value, regions: list[Any], k: int,
                count: int) -> list[Value]:
    then_graph, _ = _branch(imp, scope, regions[k], f"branch{k}")
    if k + 2 == len(regions):
        else_graph, _ = _branch(imp, scope, regions[k + 1], f"branch{k + 1}")
    else:
        from irbridge.builder import GraphBuilder

        else_graph = Graph(f"branches{k + 1}")
        builder = GraphBuilder(else_graph, imp.model)
        inner = scope.child(builder)
        else_graph.set_outputs(_case_chain(imp, inner, index, regions, k + 1, count))
    is_k = _op(scope, "equal", [index, _scalar_const(scope, k, index)])
    return list(scope.builder.op_multi("if", [is_k], {"then_branch": then_graph,
                                                      "else_branch": else_graph},
                                       num_outputs=count))


# -- sharding annotations --------------------------------------------------------------------

@handles("sdy.sharding_constraint", "sdy.reshard")
def _sharding_constraint(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                         ) -> list[Value | Bound]:
    """Shardy's with_sharding_constraint (and reshard): the value itself; the sharding is
    recorded as an annotation of the value (a sharding never changes what it holds)."""
    bound = imp.lookup(scope, op.operands[0])[0]
    if "sharding" in op.attributes:
        imp.note_sharding(bound.value, _attr_text(op.attributes["sharding"]))
    return [bound]


# -- LAPACK custom calls (jax.numpy.linalg lowered for CPU) ------------------------------------
# JAX lowers linalg on CPU to `custom_call @lapack_<s|d><routine>_ffi`, operands and results
# as LAPACK has them (batched over leading dims), flags in `mhlo.backend_config` as the
# characters LAPACK takes (uplo = 'L', trans_x = 'T', ...). Each maps to the neutral
# linalg op computing the same factorisation. LAPACK's `info` result (0: success) is a
# zero here: on a matrix the routine would flag (not positive definite, singular) the
# executor's reference fails or the decomposition gives NaN, where JAX gives NaN.

def _lapack_flags(op: Any) -> dict[str, str]:
    if "mhlo.backend_config" not in op.attributes:
        return {}
    try:
        config = ir.DictAttr(op.attributes["mhlo.backend_config"])
        return {a.name: chr(int(ir.IntegerAttr(a.attr).value)) for a in config}
    except (ValueError, TypeError) as exc:   # another JAX's form: left opaque
        raise Unsupported(f"a LAPACK call whose backend_config is not flags ({exc})") from exc


def _no_info(imp: _Importer, scope: Scope, rt: RankedType) -> Value:
    return _zeros(imp, scope, rt.static_shape(), DType.INT32, "info")


def _potrf(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """The Cholesky factor in one triangle; LAPACK leaves the other as it was."""
    upper = _lapack_flags(op).get("uplo", "L") == "U"
    a = imp.materialize(scope, op.operands[0])
    factor = _op(scope, "cholesky", [a], {"upper": upper})
    rest = _op(scope, "trilu", [a], {"upper": not upper, "k": -1 if upper else 1})
    return [_op(scope, "add", [factor, rest]), _no_info(imp, scope, types[1])]


def _getrf(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    a = imp.materialize(scope, op.operands[0])
    lu, pivots = scope.builder.op_multi("lu_factor", [a])
    return [lu, pivots, _no_info(imp, scope, types[2])]


def _trsm(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    if len(op.operands) != 2:
        raise Unsupported("a trsm with alpha")
    flags = _lapack_flags(op)
    transpose = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}.get(
        flags.get("trans_x", "N"))
    if transpose is None:
        raise Unsupported(f"a trsm with trans_x {flags.get('trans_x')!r}")
    a, b = (imp.materialize(scope, v) for v in op.operands)
    return [_op(scope, "triangular_solve", [a, b],
                {"left_side": flags.get("side", "L") == "L",
                 "lower": flags.get("uplo", "L") == "L",
                 "unit_diagonal": flags.get("diag", "N") == "U", "transpose_a": transpose})]


def _geqrf(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    return list(scope.builder.op_multi("geqrf", [imp.materialize(scope, op.operands[0])]))


def _orgqr(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    a, tau = (imp.materialize(scope, v) for v in op.operands)
    return [_op(scope, "householder_product", [a, tau])]


def _syevd(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """Eigenvectors, eigenvalues, info (the neutral eigh gives eigenvalues first)."""
    upper = _lapack_flags(op).get("uplo", "L") == "U"
    w, v = scope.builder.op_multi("eigh", [imp.materialize(scope, op.operands[0])],
                                  {"upper": upper})
    return [v, w, _no_info(imp, scope, types[2])]


def _gesdd(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]) -> list[Value | Bound]:
    """(the input, overwritten: its contents are unspecified), S, U, VT, info."""
    mode = _lapack_flags(op).get("mode", "A")
    if mode not in ("A", "S"):
        raise Unsupported(f"a gesdd of mode {mode!r} (only A and S compute U and VT)")
    a = imp.materialize(scope, op.operands[0])
    u, s, vh = scope.builder.op_multi("svd", [a], {"full_matrices": mode == "A"})
    return [a, s, u, vh, _no_info(imp, scope, types[4])]


_LAPACK: dict[str, Callable[[_Importer, Scope, Any, list[RankedType]], list[Value | Bound]]] = {
    "potrf": _potrf, "getrf": _getrf, "trsm": _trsm, "geqrf": _geqrf, "orgqr": _orgqr,
    "syevd": _syevd, "gesdd": _gesdd}


@handles("stablehlo.custom_call")
def _custom_call(imp: _Importer, scope: Scope, op: Any, types: list[RankedType]
                 ) -> list[Value | Bound]:
    """GSPMD's with_sharding_constraint (`custom_call @Sharding`, its `mhlo.sharding`
    recorded by the importer) is the value itself; `@stablehlo.dynamic_reduce_window` is
    the reduce_window it stands for; JAX's LAPACK calls are the neutral linalg ops
    (`_LAPACK`); other targets stay opaque."""
    target = _str(op.attributes["call_target_name"]) if "call_target_name" in op.attributes \
        else "?"
    if target == "Sharding" and len(op.operands) == 1 and len(op.results) == 1 and \
            op.operands[0].type == op.results[0].type:
        return [imp.lookup(scope, op.operands[0])[0]]
    if target == "stablehlo.dynamic_reduce_window":
        return _dynamic_reduce_window(imp, scope, op, types)
    lapack = re.fullmatch(r"lapack_([sd])(\w+?)(_ffi)?", target)
    if lapack is not None and lapack[2] in _LAPACK:
        return _LAPACK[lapack[2]](imp, scope, op, types)
    raise Unsupported(f"no mapping of stablehlo.custom_call @{target} to neutral ops")


__all__ = ["HANDLERS"]
