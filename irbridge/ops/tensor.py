"""Tensor ops: constants and creation, shape and data movement, reductions, softmax,
cumulative ops, top-k and sort, one-hot, non-zero, and control flow (`if`, `loop`).

Cost conventions (the `cost_doc` of each op is the reference): data movement and
metadata ops cost 0 FLOPs, because the registry counts their bytes; reductions, scans and
selections count one FLOP per input element unless noted; `if` and `loop` cost nothing
themselves, because the analysis backend costs their bodies separately.

Shape inference keeps symbolic dims (`SymDim`) where the result is still one symbol (a
copied or untouched dim) and falls back to None (unknown) for products such as batch*3.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Dim, Graph, SymDim, Tensor, TensorType
from irbridge.ops._numeric import widen
from irbridge.ops._shapes import broadcast_shapes, mul_dims, normalize_axes, normalize_axis, promote
from irbridge.ops.registry import (
    AttrKind,
    Category,
    Flops,
    LazyDecompositions,
    OpContext,
    RefContext,
    attr,
    define,
    inputs,
    lookup_reads,
)

_misc = LazyDecompositions("irbridge.ops._misc_decomp")

Arrays = list[np.ndarray | None]
Attrs = dict[str, Any]
Shape = tuple[Dim, ...]
CostFn = Callable[[OpContext], Flops]

HUGE = 2**31 - 1
"""Slice bounds at or beyond this mean "to the end" even for symbolic dims."""


# -- shared helpers ---------------------------------------------------------------------

def _where(ctx: OpContext) -> str:
    return ctx.where or ctx.op


def _known_shape(ctx: OpContext, index: int = 0) -> Shape:
    """Shape of an input whose rank must be known for the op to make sense."""
    shape = ctx.input(index).shape
    if shape is None:
        raise ctx.fail(f"input {index} needs a known rank")
    return shape


def _arg(xs: Arrays, index: int, ctx: RefContext) -> np.ndarray:
    x = xs[index] if index < len(xs) else None
    if x is None:
        raise OpError(f"{ctx.where}: input {index} is missing")
    return x


def _out_dtype(ctx: RefContext, index: int, fallback: np.dtype) -> np.dtype:
    t = ctx.output_types[index] if index < len(ctx.output_types) else None
    return t.dtype.numpy if t is not None else fallback


def _truth(array: np.ndarray, what: str, ctx: RefContext) -> bool:
    """Value of a one-element condition tensor."""
    flat = np.asarray(array).reshape(-1)
    if flat.size != 1:
        raise OpError(f"{ctx.where}: {what} must hold one element, got shape {list(array.shape)}")
    return bool(flat[0])


def _no_flops(ctx: OpContext) -> Flops:
    return Flops()


def _lookup_cost(ctx: OpContext) -> Flops:
    """No FLOPs; reads only what it picks from x (`registry.lookup_reads`)."""
    return Flops(reads=lookup_reads(ctx))


def _numel(t: TensorType | None) -> int:
    n = t.numel() if t is not None else None
    return int(n) if n is not None else 0


def _per_input_element(factor: int) -> CostFn:
    def cost(ctx: OpContext) -> Flops:
        return Flops(other=factor * _numel(ctx.input(0)))
    return cost


def _same_dim(a: Dim, b: Dim, where: str, what: str) -> Dim:
    """Two dims that must be equal: a static dim beats a symbol, which beats unknown."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise OpError(f"{where}: {what}: dims {a} and {b} differ")
        return a
    if isinstance(b, int) or a is None:
        return b
    return a


def _join_types(a: TensorType | None, b: TensorType | None, where: str,
                what: str) -> TensorType:
    """The type of a value that is either `a` or `b` (control flow): dims that differ
    become unknown, ranks that differ make the rank unknown."""
    if a is None or b is None:
        known = a if a is not None else b
        if known is None:
            raise OpError(f"{where}: {what} is untyped")
        return known
    if a.dtype != b.dtype:
        raise OpError(f"{where}: {what} is {a.dtype.short} in one place and "
                      f"{b.dtype.short} in the other")
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, tuple(x if x == y else None
                                     for x, y in zip(a.shape, b.shape, strict=True)))


def _split_dims(dims: Sequence[Dim]) -> tuple[int, list[str]] | None:
    """Static product and symbol names of dims; None when a dim is unknown."""
    product, symbols = 1, []
    for d in dims:
        if d is None:
            return None
        if isinstance(d, SymDim):
            symbols.append(d.name)
        else:
            product *= d
    return product, symbols


def _unknown_shape_values(ctx: OpContext, index: int) -> int | None:
    """Length of a 1-D shape input whose values are not known at conversion time."""
    t = ctx.input(index)
    if not t.dtype.is_integer or t.rank != 1:
        raise ctx.fail(f"input {index} (shape) must be a 1-D integer tensor, got {t}")
    return t.shape[0] if t.shape is not None and isinstance(t.shape[0], int) else None


# -- parameters given as an attribute or, overriding it, as an optional tensor input ------
#
# Ops whose parameters ONNX passes as run-time tensors (reshape's shape, reduction axes,
# slice bounds, pads, ...) take an optional input that, when connected, overrides the
# attribute of the same meaning. Type inference uses the input's value when it is a known
# constant (`ctx.constant`) and otherwise gives what still follows (usually the rank).

def _ints_input(ctx: OpContext, index: int, what: str) -> int | None:
    """Check that input `index` is a 1-D integer tensor; its static length, or None."""
    t = ctx.input(index)
    if not t.dtype.is_integer or (t.rank is not None and t.rank != 1):
        raise ctx.fail(f"input {index} ({what}) must be a 1-D integer tensor, got {t}")
    return t.shape[0] if t.shape is not None and isinstance(t.shape[0], int) else None


def _scalar_input(ctx: OpContext, index: int, what: str, integer: bool = True) -> None:
    """Check that input `index` holds one element (0-d, or 1-D of length 1)."""
    t = ctx.input(index)
    if (integer and not t.dtype.is_integer) or (t.rank is not None and t.rank > 1) \
            or t.numel() not in (None, 1):
        kind = "an integer" if integer else "a"
        raise ctx.fail(f"input {index} ({what}) must be {kind} one-element tensor, got {t}")


def _ints_param(ctx: OpContext, index: int, name: str) -> tuple[int, ...] | None:
    """Attribute `name`, overridden by input `index` when it is connected; None when that
    input's value is not a known constant."""
    if not ctx.has_input(index):
        return tuple(ctx.attrs[name])
    _ints_input(ctx, index, name)
    value = ctx.constant(index)
    return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))


def _int_param(ctx: OpContext, index: int, name: str) -> int | None:
    """One-element attribute `name`, overridden by input `index` (see `_ints_param`)."""
    if not ctx.has_input(index):
        return int(ctx.attrs[name])
    _scalar_input(ctx, index, name)
    value = ctx.constant(index)
    return None if value is None else _one(value, name, _where(ctx))


def _one(value: np.ndarray, what: str, where: str) -> int:
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise OpError(f"{where}: {what} must hold one element, got shape {list(value.shape)}")
    return int(flat[0])


def _given(xs: Arrays, index: int) -> np.ndarray | None:
    return xs[index] if index < len(xs) else None


def _ints_arg(xs: Arrays, index: int, attrs: Attrs, name: str) -> tuple[int, ...]:
    """Reference side of `_ints_param`: the input's values, else the attribute."""
    value = _given(xs, index)
    if value is None:
        return tuple(attrs[name])
    return tuple(int(v) for v in np.asarray(value).reshape(-1))


def _int_arg(xs: Arrays, index: int, attrs: Attrs, name: str, ctx: RefContext) -> int:
    value = _given(xs, index)
    return int(attrs[name]) if value is None else _one(value, name, ctx.where)


def _target_shape(ctx: OpContext) -> tuple[int, ...] | None:
    """Requested shape of reshape/expand: input 1 when connected (None when its value is
    not a known constant), else attribute `shape`."""
    return _ints_param(ctx, 1, "shape")


def _target_array(xs: Arrays, attrs: Attrs) -> tuple[int, ...]:
    return _ints_arg(xs, 1, attrs, "shape")


# -- constants and creation ------------------------------------------------------------

def _constant_infer(ctx: OpContext) -> list[TensorType]:
    tensor: Tensor = ctx.attrs["value"]
    return [tensor.type]


def _constant_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    tensor: Tensor = attrs["value"]
    if tensor.data is None:
        raise OpError(f"{ctx.where}: constant {tensor.name!r} has no data (shape-only IR)")
    return [tensor.data]


define("constant", Category.CONSTANT, inputs=inputs(),
       attrs=(attr("value", AttrKind.TENSOR, doc="the tensor, with data"),),
       infer=_constant_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_constant_ref, doc="A constant tensor held inline in the node.")


def _full_infer(ctx: OpContext) -> list[TensorType]:
    shape = ctx.attrs["shape"]
    if any(d < 0 for d in shape):
        raise ctx.fail(f"shape {list(shape)} has a negative dim")
    return [TensorType(ctx.attrs["dtype"], tuple(shape))]


def _full_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    return [np.full(attrs["shape"], attrs["value"], dtype=attrs["dtype"].numpy)]


define("full", Category.CONSTANT, inputs=inputs(),
       attrs=(attr("shape", AttrKind.INTS, doc="output shape"),
              attr("value", AttrKind.FLOAT, 0.0, "fill value, converted to `dtype`"),
              attr("dtype", AttrKind.DTYPE, DType.FLOAT32)),
       infer=_full_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_full_ref, doc="A tensor of the given shape filled with one value.")


_RANGE_PARAMS = ("start", "limit", "delta")


def _range_length(start: float, limit: float, delta: float, where: str) -> int:
    if delta == 0:
        raise OpError(f"{where}: delta must not be 0")
    if not all(math.isfinite(v) for v in (start, limit, delta)):
        raise OpError(f"{where}: start, limit and delta must be finite (limit has no default: "
                      "give the attribute or the input)")
    return max(math.ceil((limit - start) / delta), 0)


def _range_dtype(ctx: OpContext) -> DType:
    """The attribute `dtype`, or the common dtype of the connected inputs."""
    given = [ctx.input(i) for i in range(3) if ctx.has_input(i)]
    if not given:
        return cast(DType, ctx.attrs["dtype"])
    for i in range(3):
        if ctx.has_input(i):
            _scalar_input(ctx, i, _RANGE_PARAMS[i], integer=False)
    dtypes = {t.dtype for t in given}
    if len(dtypes) > 1:
        raise ctx.fail(f"inputs start, limit and delta must share a dtype, got "
                       f"{', '.join(sorted(d.short for d in dtypes))}")
    dtype = given[0].dtype
    if not (dtype.is_integer or dtype.is_float):
        raise ctx.fail(f"inputs must be integer or float, got {dtype.short}")
    return dtype


def _range_infer(ctx: OpContext) -> list[TensorType]:
    dtype = _range_dtype(ctx)
    values: list[float] = []
    for i, name in enumerate(_RANGE_PARAMS):
        if not ctx.has_input(i):
            values.append(ctx.attrs[name])
            continue
        value = ctx.constant(i)
        if value is None:
            return [TensorType(dtype, (None,))]
        values.append(np.asarray(value).reshape(-1)[0].item())
    start, limit, delta = values
    return [TensorType(dtype, (_range_length(start, limit, delta, _where(ctx)),))]


def _range_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    start, limit, delta = (attrs[name] if _given(xs, i) is None else
                           np.asarray(_given(xs, i)).reshape(-1)[0].item()
                           for i, name in enumerate(_RANGE_PARAMS))
    n = _range_length(start, limit, delta, ctx.where)
    given = [x for x in xs if x is not None]
    dtype = DType.from_numpy(given[0].dtype) if given else attrs["dtype"]
    if dtype.is_integer and float(start).is_integer() and float(delta).is_integer():
        values = int(start) + int(delta) * np.arange(n, dtype=np.int64)  # exact for big ints
    else:
        values = start + delta * np.arange(n, dtype=np.float64)
    return [values.astype(_out_dtype(ctx, 0, dtype.numpy))]


define("range", Category.CONSTANT, inputs=inputs("start?", "limit?", "delta?"),
       attrs=(attr("start", AttrKind.FLOAT, 0.0, "used when input `start` is absent"),
              attr("limit", AttrKind.FLOAT, math.nan,
                   "exclusive; used when input `limit` is absent (then required)"),
              attr("delta", AttrKind.FLOAT, 1.0, "used when input `delta` is absent"),
              attr("dtype", AttrKind.DTYPE, DType.INT64,
                   "used when no input is connected (else the inputs' dtype)")),
       infer=_range_infer, cost=_no_flops, cost_doc="0 (index generation, bytes only)",
       reference=_range_ref,
       doc="start, start + delta, ... up to but excluding limit; "
           "length max(ceil((limit - start) / delta), 0). One-element inputs start, limit, "
           "delta (ONNX Range) override the attributes; the output then has their dtype, and "
           "its length is unknown unless their values are known constants.")


def _shape_bounds(rank: int, start: int, end: int) -> tuple[int, int]:
    """ONNX Shape start/end (negatives count from the back, clamped), with end 0 = rank."""
    if end == 0:
        end = rank
    bounds = [b + rank if b < 0 else b for b in (start, end)]
    lo, hi = (min(max(b, 0), rank) for b in bounds)
    return lo, max(hi, lo)


def _shape_of_infer(ctx: OpContext) -> list[TensorType]:
    rank = ctx.input(0).rank
    if rank is None:
        return [TensorType(DType.INT64, (None,))]
    lo, hi = _shape_bounds(rank, ctx.attrs["start"], ctx.attrs["end"])
    return [TensorType(DType.INT64, (hi - lo,))]


def _shape_of_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    lo, hi = _shape_bounds(x.ndim, attrs["start"], attrs["end"])
    return [np.array(x.shape[lo:hi], dtype=np.int64)]


define("shape_of", Category.SHAPE, inputs=inputs("x"),
       attrs=(attr("start", AttrKind.INT, 0, "first dim; negative counts from the back"),
              attr("end", AttrKind.INT, 0, "dim after the last; 0 = to the end")),
       infer=_shape_of_infer, cost=_no_flops, cost_doc="0 (metadata only)",
       reference=_shape_of_ref, doc="The shape of x (or dims start..end) as a 1-D int64 tensor.")


# -- metadata-only reshapes ------------------------------------------------------------

def _identity_infer(ctx: OpContext) -> list[TensorType]:
    return [ctx.input(0)]


def _identity_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    return [_arg(xs, 0, ctx)]


define("identity", Category.SHAPE, inputs=inputs("x"), infer=_identity_infer,
       cost=_no_flops, cost_doc="0 (metadata only)", reference=_identity_ref,
       doc="x unchanged.")


def _infer_minus_one(in_dims: Sequence[Dim], out_dims: Sequence[Dim], where: str) -> Dim:
    """The dim a -1 stands for: the product of `in_dims` over that of `out_dims` (the other
    output dims), cancelling symbols that appear on both sides."""
    total, rest = _split_dims(in_dims), _split_dims(out_dims)
    if total is None or rest is None:
        return None
    (in_static, in_symbols), (out_static, out_symbols) = total, rest
    for name in list(out_symbols):
        if name in in_symbols:
            in_symbols.remove(name)
            out_symbols.remove(name)
    if out_symbols:
        return None
    if not in_symbols:
        if in_static % out_static:
            raise OpError(f"{where}: cannot reshape {in_static} elements into a multiple "
                          f"of {out_static}")
        return in_static // out_static
    if len(in_symbols) == 1 and in_static == out_static:
        return next(d for d in in_dims if isinstance(d, SymDim) and d.name == in_symbols[0])
    return None  # e.g. batch*3: not a single symbol


def _reshape_dims(in_shape: Shape | None, target: Sequence[int], where: str,
                  allowzero: bool = False) -> Shape:
    """Output dims of reshape: 0 copies the input dim at its index (with `allowzero`: a dim
    of size 0), -1 is inferred."""
    if sum(t == -1 for t in target) > 1 or any(t < -1 for t in target):
        raise OpError(f"{where}: shape {list(target)} may hold one -1 and no other negative")
    if allowzero and 0 in target:
        if -1 in target:
            raise OpError(f"{where}: shape {list(target)} with allowzero may not hold both "
                          "0 and -1")
        if in_shape is not None and all(isinstance(d, int) for d in in_shape) \
                and 0 not in in_shape:
            raise OpError(f"{where}: cannot reshape {list(in_shape)} into {list(target)} "
                          "(no elements)")
        return tuple(target)
    if in_shape is not None and len(target) > len(in_shape) and 0 in target[len(in_shape):]:
        raise OpError(f"{where}: shape {list(target)} copies (0) a dim beyond the input's "
                      f"rank {len(in_shape)}")
    dims: list[Dim] = [(None if in_shape is None else in_shape[i]) if t == 0 else t
                       for i, t in enumerate(target)]
    if in_shape is None:
        return tuple(None if t == -1 else d for t, d in zip(target, dims, strict=True))
    # copied dims are the same on both sides: leave them out of the element count
    in_rest = [d for i, d in enumerate(in_shape) if i >= len(target) or target[i] != 0]
    out_rest = [d for t, d in zip(target, dims, strict=True) if t > 0]
    if -1 in target:
        if 0 in dims:
            raise OpError(f"{where}: cannot infer the -1 in {list(target)} when another "
                          "output dim is 0")
        dims[target.index(-1)] = _infer_minus_one(in_rest, out_rest, where)
    else:
        a, b = _split_dims(in_rest), _split_dims(out_rest)
        if a is not None and b is not None and sorted(a[1]) == sorted(b[1]) and a[0] != b[0]:
            raise OpError(f"{where}: cannot reshape {list(in_shape)} into {list(target)}")
    return tuple(dims)


def _reshape_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    target = _target_shape(ctx)
    if target is None:
        n = _unknown_shape_values(ctx, 1)
        return [TensorType(x.dtype, None if n is None else (None,) * n)]
    return [TensorType(x.dtype, _reshape_dims(x.shape, target, _where(ctx),
                                              bool(ctx.attrs.get("allowzero", False))))]


def _reshape_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    target = list(_target_array(xs, attrs))
    if not attrs.get("allowzero", False):
        target = [x.shape[i] if t == 0 else t for i, t in enumerate(target)]
    elif 0 in target and -1 in target:
        raise OpError(f"{ctx.where}: shape {target} with allowzero may not hold both 0 "
                      "and -1")
    return [x.reshape(target)]


define("reshape", Category.SHAPE, inputs=inputs("x", "shape?"),
       attrs=(attr("shape", AttrKind.INTS, (), "used when input `shape` is absent"),
              attr("allowzero", AttrKind.BOOL, False,
                   "a 0 entry is a dim of size 0 instead of a copy (ONNX allowzero=1, "
                   "torch's view)")),
       infer=_reshape_infer, cost=_no_flops, cost_doc="0 (metadata only)",
       reference=_reshape_ref,
       doc="Same elements in a new shape (row-major). A -1 entry is inferred; a 0 entry "
           "copies the input dim at the same index (with `allowzero`: a dim of size 0). "
           "Input `shape` (1-D int64) overrides the attribute.")


def _squeeze_axes(shape: Shape, axes: Sequence[int], where: str) -> tuple[int, ...] | None:
    """Axes to drop; None when `axes` is empty and a non-static dim might be 1."""
    if axes:
        chosen = normalize_axes(axes, len(shape), where)
        for a in chosen:
            if isinstance(shape[a], int) and shape[a] != 1:
                raise OpError(f"{where}: cannot squeeze axis {a} of size {shape[a]}")
        return chosen
    if any(d is None or (isinstance(d, SymDim) and (d.min is None or d.min <= 1))
           for d in shape):
        return None
    return tuple(i for i, d in enumerate(shape) if d == 1)


def _squeeze_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    given = _ints_param(ctx, 1, "axes")
    if given is None:  # values unknown: the rank follows from their count, if known
        n = _ints_input(ctx, 1, "axes")
        if x.shape is None or n is None or n == 0:
            return [TensorType(x.dtype, None)]
        if n > len(x.shape):
            raise ctx.fail(f"cannot squeeze {n} axes of {x}")
        return [TensorType(x.dtype, (None,) * (len(x.shape) - n))]
    axes = None if x.shape is None else _squeeze_axes(x.shape, given, _where(ctx))
    if x.shape is None or axes is None:
        return [TensorType(x.dtype, None)]
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


def _squeeze_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    given = _ints_arg(xs, 1, attrs, "axes")
    axes = normalize_axes(given, x.ndim, ctx.where) if given else None
    if axes is not None:
        for a in axes:
            if x.shape[a] != 1:
                raise OpError(f"{ctx.where}: cannot squeeze axis {a} of size {x.shape[a]}")
    return [np.squeeze(x, axis=axes)]


define("squeeze", Category.SHAPE, inputs=inputs("x", "axes?"),
       attrs=(attr("axes", AttrKind.INTS, (), "empty = every size-1 dim; used when input "
                                              "`axes` is absent"),),
       infer=_squeeze_infer, cost=_no_flops, cost_doc="0 (metadata only)",
       reference=_squeeze_ref,
       doc="Drop size-1 dims. With empty `axes` the output rank is unknown when a symbolic "
           "dim might be 1 at run time (SymDim.min unset or <= 1). Input `axes` (1-D int64) "
           "overrides the attribute; when its values are not known constants only the "
           "output rank is inferred (from its length).")


def _unsqueeze_axes(given: tuple[int, ...], rank: int, where: str, has_input: bool
                    ) -> tuple[int, ...]:
    if not given and not has_input:
        raise OpError(f"{where}: needs attribute axes or input axes")
    return normalize_axes(given, rank + len(given), where)


def _unsqueeze_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    given = _ints_param(ctx, 1, "axes")
    if given is None:  # values unknown: rank + their count
        n = _ints_input(ctx, 1, "axes")
        if x.shape is None or n is None:
            return [TensorType(x.dtype, None)]
        return [TensorType(x.dtype, (None,) * (len(x.shape) + n))]
    if x.shape is None:
        if not given and not ctx.has_input(1):
            raise ctx.fail("needs attribute axes or input axes")
        return [TensorType(x.dtype, None)]
    shape = x.shape
    axes = _unsqueeze_axes(given, len(shape), _where(ctx), ctx.has_input(1))
    rest = iter(shape)
    rank = len(shape) + len(given)
    return [TensorType(x.dtype, tuple(1 if i in axes else next(rest) for i in range(rank)))]


def _unsqueeze_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    given = _ints_arg(xs, 1, attrs, "axes")
    axes = _unsqueeze_axes(given, x.ndim, ctx.where, _given(xs, 1) is not None)
    return [np.expand_dims(x, axes)]


define("unsqueeze", Category.SHAPE, inputs=inputs("x", "axes?"),
       attrs=(attr("axes", AttrKind.INTS, (), "positions in the output; negatives count "
                                              "from the output's back; required unless input "
                                              "`axes` is given"),),
       infer=_unsqueeze_infer, cost=_no_flops, cost_doc="0 (metadata only)",
       reference=_unsqueeze_ref,
       doc="Insert size-1 dims at the given output positions. Input `axes` (1-D int64) "
           "overrides the attribute (an empty value inserts nothing); when its values are "
           "not known constants the output has rank + its length, with unknown dims.")


def _flatten_range(rank: int, attrs: Attrs, where: str) -> tuple[int, int]:
    rank = max(rank, 1)  # a scalar flattens like a 1-element vector (torch)
    start = normalize_axis(attrs["start_axis"], rank, where)
    end = normalize_axis(attrs["end_axis"], rank, where)
    if start > end:
        raise OpError(f"{where}: start_axis {attrs['start_axis']} comes after end_axis "
                      f"{attrs['end_axis']}")
    return start, end


def _flatten_infer(ctx: OpContext) -> list[TensorType]:
    shape = _known_shape(ctx) or (1,)
    start, end = _flatten_range(len(shape), ctx.attrs, _where(ctx))
    dims = (*shape[:start], mul_dims(shape[start:end + 1]), *shape[end + 1:])
    return [TensorType(ctx.input(0).dtype, dims)]


def _flatten_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    shape = x.shape or (1,)
    start, end = _flatten_range(len(shape), attrs, ctx.where)
    merged = math.prod(shape[start:end + 1])
    return [x.reshape((*shape[:start], merged, *shape[end + 1:]))]


define("flatten", Category.SHAPE, inputs=inputs("x"),
       attrs=(attr("start_axis", AttrKind.INT, 1), attr("end_axis", AttrKind.INT, -1)),
       infer=_flatten_infer, cost=_no_flops, cost_doc="0 (metadata only)",
       reference=_flatten_ref,
       doc="Merge dims start_axis..end_axis (inclusive) into one, like torch.flatten.")


# -- data movement ---------------------------------------------------------------------

def _permute_infer(ctx: OpContext) -> list[TensorType]:
    perm = ctx.attrs["perm"]
    shape = ctx.input(0).shape
    if shape is None:  # the permutation names every dim: the rank is len(perm)
        if sorted(perm) != list(range(len(perm))):
            raise ctx.fail(f"perm {list(perm)} is not a permutation")
        return [TensorType(ctx.input(0).dtype, (None,) * len(perm))]
    if sorted(perm) != list(range(len(shape))):
        raise ctx.fail(f"perm {list(perm)} is not a permutation of the {len(shape)} dims")
    return [TensorType(ctx.input(0).dtype, tuple(shape[p] for p in perm))]


def _permute_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    return [np.ascontiguousarray(np.transpose(_arg(xs, 0, ctx), attrs["perm"]))]


define("permute", Category.DATA_MOVEMENT, inputs=inputs("x"),
       attrs=(attr("perm", AttrKind.INTS, doc="output dim i is input dim perm[i]"),),
       infer=_permute_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_permute_ref, doc="Reorder dims (transpose).")


_SLICE_PARAMS = ("starts", "ends", "axes", "steps")


def _slices(params: Sequence[tuple[int, ...]], rank: int,
            where: str) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, checked; `params` are starts, ends, axes
    and steps (empty axes / steps: the defaults)."""
    starts, ends, given_axes, given_steps = params
    axes = given_axes or tuple(range(len(starts)))
    steps = given_steps or (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OpError(f"{where}: starts, ends, axes and steps must have the same length")
    if 0 in steps:
        raise OpError(f"{where}: a step is 0")
    if starts and rank == 0:
        raise OpError(f"{where}: cannot slice a scalar")
    normalize_axes(axes, rank, where)  # checks range and repeats
    return [(normalize_axis(a, rank, where), s, e, st)
            for a, s, e, st in zip(axes, starts, ends, steps, strict=True)]


def _slice_dim(dim: Dim, start: int, end: int, step: int) -> Dim:
    """Length of one sliced dim; a symbolic dim survives only a whole-axis slice."""
    if isinstance(dim, int):
        return len(range(*slice(start, end, step).indices(dim)))
    forward_all = step == 1 and start == 0 and end >= HUGE
    backward_all = step == -1 and (start == -1 or start >= HUGE) and end <= -HUGE
    return dim if forward_all or backward_all else None


def _sliced_axes(ctx: OpContext, rank: int) -> set[int] | None:
    """Axes a slice with run-time bounds may change; None when they are unknown too."""
    axes = _ints_param(ctx, 3, "axes")
    if axes is None:
        return None
    if axes:
        return set(normalize_axes(axes, rank, _where(ctx)))
    for i, name in ((1, "starts"), (2, "ends")):  # default axes: 0..len(starts)-1
        n = _ints_input(ctx, i, name) if ctx.has_input(i) else len(ctx.attrs[name])
        if n is not None:
            return set(range(min(n, rank)))
    return None


def _slice_infer(ctx: OpContext) -> list[TensorType]:
    params = [_ints_param(ctx, i + 1, name) for i, name in enumerate(_SLICE_PARAMS)]
    if ctx.input(0).shape is None:
        return [TensorType(ctx.input(0).dtype, None)]
    dims = list(_known_shape(ctx))
    if any(p is None for p in params):  # bounds known only at run time: rank is kept
        changed = _sliced_axes(ctx, len(dims))
        return [TensorType(ctx.input(0).dtype, tuple(
            None if changed is None or i in changed else d for i, d in enumerate(dims)))]
    known = cast(list[tuple[int, ...]], params)
    for axis, start, end, step in _slices(known, len(dims), _where(ctx)):
        dims[axis] = _slice_dim(dims[axis], start, end, step)
    return [TensorType(ctx.input(0).dtype, tuple(dims))]


def _slice_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    index = [slice(None)] * x.ndim
    params = [_ints_arg(xs, i + 1, attrs, name) for i, name in enumerate(_SLICE_PARAMS)]
    for axis, start, end, step in _slices(params, x.ndim, ctx.where):
        index[axis] = slice(start, end, step)
    return [x[tuple(index)].copy()]


define("slice", Category.DATA_MOVEMENT, inputs=inputs("x", "starts?", "ends?", "axes?", "steps?"),
       attrs=(attr("starts", AttrKind.INTS, (), "used when input `starts` is absent"),
              attr("ends", AttrKind.INTS, (), "used when input `ends` is absent"),
              attr("axes", AttrKind.INTS, (), "empty = 0..len(starts)-1"),
              attr("steps", AttrKind.INTS, (), "empty = all 1", empty_means=1)),
       infer=_slice_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_slice_ref,
       doc="Python/ONNX slicing per axis: negative indices count from the back, bounds "
           "clamp (INT64_MAX = to the end), steps may be negative. Inputs starts, ends, axes, "
           "steps (1-D int64, ONNX Slice) override the attributes of the same name; when a "
           "value is not a known constant the rank is kept and the sliced dims are unknown.")


def _sum_dims(dims: Sequence[Dim]) -> Dim:
    """Sum of dims; symbolic only when one symbol is joined by zero-size parts."""
    if all(isinstance(d, int) for d in dims):
        return sum(d for d in dims if isinstance(d, int))
    nonzero = [d for d in dims if d != 0]
    return nonzero[0] if len(nonzero) == 1 else None


def _concat_infer(ctx: OpContext) -> list[TensorType]:
    where = _where(ctx)
    types = [ctx.input(i) for i in range(len(ctx.input_types))]
    if not types:
        raise ctx.fail("needs at least one input")
    dtype = promote(types, where)
    shapes = [t.shape for t in types if t.shape is not None]
    if not shapes:
        return [TensorType(dtype, None)]
    rank = len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes):
        raise ctx.fail(f"inputs must have one rank >= 1, got {[str(t) for t in types]}")
    axis = normalize_axis(ctx.attrs["axis"], rank, where)
    dims = list(shapes[0])
    for shape in shapes[1:]:
        for i, d in enumerate(shape):
            if i != axis:
                dims[i] = _same_dim(dims[i], d, where, f"non-concatenated dim {i}")
    all_known = len(shapes) == len(types)
    dims[axis] = _sum_dims([s[axis] for s in shapes]) if all_known else None
    return [TensorType(dtype, tuple(dims))]


def _concat_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    arrays = [_arg(xs, i, ctx) for i in range(len(xs))]
    dtype = _out_dtype(ctx, 0, arrays[0].dtype)
    return [np.concatenate([a.astype(dtype, copy=False) for a in arrays], axis=attrs["axis"])]


define("concat", Category.DATA_MOVEMENT, inputs=inputs("xs*"),
       attrs=(attr("axis", AttrKind.INT),),
       infer=_concat_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_concat_ref,
       doc="Join tensors along `axis`; other dims must match. Mixed dtypes promote like "
           "elementwise ops.")


def _split_infer(ctx: OpContext) -> list[TensorType]:
    dtype = ctx.input(0).dtype
    sizes = _ints_param(ctx, 1, "sizes")
    if ctx.input(0).shape is None:  # rank unknown: one output per node output (or size)
        count = len(ctx.output_types) or (len(sizes) if sizes else 1)
        return [TensorType(dtype, None)] * count
    shape = _known_shape(ctx)
    axis = normalize_axis(ctx.attrs["axis"], len(shape), _where(ctx))
    if sizes is None:  # values unknown: one output per node output, the axis unknown
        length = _ints_input(ctx, 1, "sizes")
        count = len(ctx.output_types) or length or 1
        return [TensorType(dtype, (*shape[:axis], None, *shape[axis + 1:]))] * count
    if not shape or not sizes or any(s < 0 for s in sizes):
        raise ctx.fail(f"needs a rank >= 1 input and non-negative sizes, got {list(sizes)}")
    if isinstance(shape[axis], int) and sum(sizes) != shape[axis]:
        raise ctx.fail(f"sizes {list(sizes)} do not add up to dim {axis} = {shape[axis]}")
    return [TensorType(dtype, (*shape[:axis], s, *shape[axis + 1:])) for s in sizes]


def _split_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    sizes = _ints_arg(xs, 1, attrs, "sizes")
    axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise OpError(f"{ctx.where}: sizes {list(sizes)} do not split dim {axis} of size "
                      f"{x.shape[axis]}")
    cuts = np.cumsum(sizes)[:-1]
    return [part.copy() for part in np.split(x, cuts, axis=axis)]


define("split", Category.DATA_MOVEMENT, inputs=inputs("x", "sizes?"), outputs=("ys",),
       variadic_outputs=True,
       attrs=(attr("axis", AttrKind.INT),
              attr("sizes", AttrKind.INTS, (), "one per output; required unless input "
                                               "`sizes` is given")),
       infer=_split_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_split_ref,
       doc="Cut x along `axis` into len(sizes) parts. Input `sizes` (1-D int64, ONNX Split) "
           "overrides the attribute; when its values are not known constants the parts' "
           "dims along `axis` are unknown.")


def _check_indices(ctx: OpContext, index: int) -> TensorType:
    t = ctx.input(index)
    if not t.dtype.is_integer:
        raise ctx.fail(f"input {index} (indices) must be integer, got {t.dtype.short}")
    return t


def _gather_infer(ctx: OpContext) -> list[TensorType]:
    shape = _known_shape(ctx)
    indices = _check_indices(ctx, 1)
    if not shape:
        raise ctx.fail("cannot gather from a scalar")
    axis = normalize_axis(ctx.attrs["axis"], len(shape), _where(ctx))
    if indices.shape is None:
        return [TensorType(ctx.input(0).dtype, None)]
    return [TensorType(ctx.input(0).dtype, (*shape[:axis], *indices.shape, *shape[axis + 1:]))]


def _gather_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x, indices = _arg(xs, 0, ctx), _arg(xs, 1, ctx)
    return [np.take(x, indices.astype(np.int64), axis=attrs["axis"])]


define("gather", Category.DATA_MOVEMENT, inputs=inputs("x", "indices"),
       attrs=(attr("axis", AttrKind.INT, 0),),
       infer=_gather_infer, cost=_lookup_cost,
       cost_doc="0 (bytes only: reads the picked slices of x, not all of x, and the indices)",
       reference=_gather_ref,
       doc="numpy.take: pick slices of x along `axis`; the axis is replaced by the indices' "
           "dims (removed for scalar indices). Negative indices wrap.")


def _elements_infer(ctx: OpContext) -> tuple[Shape, Shape | None, int]:
    """Shared checks of gather_elements and scatter_elements: x shape, indices shape, axis."""
    shape = _known_shape(ctx)
    indices = _check_indices(ctx, 1)
    if not shape:
        raise ctx.fail("needs an input of rank >= 1")
    if indices.shape is not None and len(indices.shape) != len(shape):
        raise ctx.fail(f"indices {indices} must have the rank of x {ctx.input(0)}")
    return shape, indices.shape, normalize_axis(ctx.attrs["axis"], len(shape), _where(ctx))


def _along_axis(indices: np.ndarray, axis: int, size: int,
                ctx: RefContext) -> tuple[np.ndarray, ...]:
    """Fancy index addressing x[..., indices[i, j, ...] at `axis`, ...] (torch.gather)."""
    wrapped = np.where(indices < 0, indices + size, indices).astype(np.int64)
    if np.any((wrapped < 0) | (wrapped >= size)):
        raise OpError(f"{ctx.where}: an index is out of range for a dim of size {size}")
    grid: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    grid[axis] = wrapped
    return tuple(grid)


def _gather_elements_infer(ctx: OpContext) -> list[TensorType]:
    _, indices_shape, _ = _elements_infer(ctx)
    return [TensorType(ctx.input(0).dtype, indices_shape)]


def _gather_elements_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x, indices = _arg(xs, 0, ctx), _arg(xs, 1, ctx)
    axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
    return [x[_along_axis(indices, axis, x.shape[axis], ctx)]]


define("gather_elements", Category.DATA_MOVEMENT, inputs=inputs("x", "indices"),
       attrs=(attr("axis", AttrKind.INT),),
       infer=_gather_elements_infer, cost=_lookup_cost,
       cost_doc="0 (bytes only: reads the picked elements of x, not all of x, and the indices)",
       reference=_gather_elements_ref,
       doc="y[i][j][k] = x[indices[i][j][k]][j][k] for axis 0 (torch.gather, ONNX "
           "GatherElements); y has the indices' shape.")


_SCATTER_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_infer(ctx: OpContext) -> list[TensorType]:
    _, indices_shape, _ = _elements_infer(ctx)
    x, updates = ctx.input(0), ctx.input(2)
    if updates.dtype != x.dtype:
        raise ctx.fail(f"updates are {updates.dtype.short}, x is {x.dtype.short}")
    if indices_shape is not None and updates.shape is not None:
        if len(updates.shape) != len(indices_shape):
            raise ctx.fail(f"updates {updates} must have the shape of the indices")
        for a, b in zip(indices_shape, updates.shape, strict=True):
            _same_dim(a, b, _where(ctx), "indices and updates")
    return [x]


def _scatter_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x, indices, updates = (_arg(xs, i, ctx) for i in range(3))
    axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
    index = _along_axis(indices, axis, x.shape[axis], ctx)
    y = x.copy()
    if attrs["reduction"] == "none":
        y[index] = updates
    else:
        _SCATTER_UFUNCS[attrs["reduction"]].at(y, index, updates)
    return [y]


def _scatter_cost(ctx: OpContext) -> Flops:
    return Flops(other=0 if ctx.attrs["reduction"] == "none" else _numel(ctx.input(2)))


define("scatter_elements", Category.DATA_MOVEMENT, inputs=inputs("x", "indices", "updates"),
       attrs=(attr("axis", AttrKind.INT),
              attr("reduction", AttrKind.STRING, "none", choices=("none", *_SCATTER_UFUNCS))),
       infer=_scatter_infer, cost=_scatter_cost,
       cost_doc="1 per update element when reduction is not none, else 0 (bytes only)",
       reference=_scatter_ref, updates=(0, 2),
       doc="A copy of x with y[indices[i][j]][j] = updates[i][j] for axis 0 (torch.scatter, "
           "ONNX ScatterElements); `reduction` combines with the existing value. Repeated "
           "indices with reduction none: the last update wins.")


def _grow_dim(d: Dim, by: int) -> Dim:
    if by == 0:
        return d
    return d + by if isinstance(d, int) else None


def _pad_infer(ctx: OpContext) -> list[TensorType]:
    shape = _known_shape(ctx)
    if ctx.has_input(2):
        _scalar_input(ctx, 2, "value", integer=False)
    pads, mode = _ints_param(ctx, 1, "pads"), ctx.attrs["mode"]
    if pads is None:  # values unknown: the rank is kept
        return [TensorType(ctx.input(0).dtype, (None,) * len(shape))]
    rank = len(shape)
    if len(pads) != 2 * rank:
        raise ctx.fail(f"pads needs 2 * rank = {2 * rank} entries, got {len(pads)}")
    dims = []
    for i, d in enumerate(shape):
        begin, end = pads[i], pads[rank + i]
        grown = _grow_dim(d, begin + end)
        if isinstance(grown, int) and grown < 0:
            raise ctx.fail(f"pads {begin}, {end} crop dim {i} of size {d} below zero")
        if isinstance(d, int) and mode != "constant" and max(begin, end) > 0:
            kept = d + min(begin, 0) + min(end, 0)
            if kept == 0 or (mode == "reflect" and max(begin, end) >= kept):
                raise ctx.fail(f"{mode} padding of {max(begin, end)} needs a larger dim {i} "
                               f"(size {kept} after cropping)")
        dims.append(grown)
    return [TensorType(ctx.input(0).dtype, tuple(dims))]


def _pad_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    pads, rank = _ints_arg(xs, 1, attrs, "pads"), x.ndim
    if len(pads) != 2 * rank:
        raise OpError(f"{ctx.where}: pads needs 2 * rank = {2 * rank} entries, got {len(pads)}")
    crop = tuple(slice(max(-pads[i], 0), x.shape[i] - max(-pads[rank + i], 0))
                 for i in range(rank))
    widths = [(max(pads[i], 0), max(pads[rank + i], 0)) for i in range(rank)]
    if attrs["mode"] == "constant":
        fill = _given(xs, 2)
        value = attrs["value"] if fill is None or not fill.size else fill.reshape(-1)[0]
        return [np.pad(x[crop], widths, mode="constant", constant_values=value)]
    return [np.pad(x[crop], widths, mode=attrs["mode"])]


define("pad", Category.DATA_MOVEMENT, inputs=inputs("x", "pads?", "value?"),
       attrs=(attr("pads", AttrKind.INTS, (), "begins of every dim, then ends; negative "
                                             "crops; required unless input `pads` is given"),
              attr("mode", AttrKind.STRING, "constant",
                   choices=("constant", "reflect", "edge", "wrap")),
              attr("value", AttrKind.FLOAT, 0.0, "fill value of constant mode")),
       infer=_pad_infer, cost=_no_flops, cost_doc="0 (bytes only)", reference=_pad_ref,
       doc="Pad (or, with negative pads, crop) every dim. Cropping happens first, so "
           "reflect/edge/wrap read the cropped tensor. Input `pads` (1-D int64) and the "
           "one-element input `value` (ONNX Pad's constant_value) override the attributes; "
           "when the pads are not known constants the rank is kept, the dims are unknown.")


def _expand_target(in_shape: Shape, target: Sequence[int], where: str) -> tuple[Dim, ...]:
    """Target shape with -1 replaced by the aligned input dim (torch expand)."""
    offset = len(target) - len(in_shape)
    dims: list[Dim] = []
    for j, t in enumerate(target):
        if t == -1 and j - offset >= 0:
            dims.append(in_shape[j - offset])
        elif t < 0:
            raise OpError(f"{where}: shape {list(target)}: only -1 over an existing dim is "
                          "allowed as a negative entry")
        else:
            dims.append(t)
    return tuple(dims)


def _expand_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    shape = _known_shape(ctx)
    target = _target_shape(ctx)
    if target is None:  # values unknown: only a static dim > 1 of x is certain
        n = _unknown_shape_values(ctx, 1)
        if n is None:
            return [TensorType(x.dtype, None)]
        rank = max(n, len(shape))
        padded = (None,) * (rank - len(shape)) + shape
        return [TensorType(x.dtype, tuple(d if isinstance(d, int) and d > 1 else None
                                          for d in padded))]
    where = _where(ctx)
    return [TensorType(x.dtype, broadcast_shapes([shape, _expand_target(shape, target, where)],
                                                 where))]


def _expand_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    target = cast(tuple[int, ...], _expand_target(x.shape, _target_array(xs, attrs), ctx.where))
    return [np.broadcast_to(x, np.broadcast_shapes(x.shape, target)).copy()]


define("expand", Category.DATA_MOVEMENT, inputs=inputs("x", "shape?"),
       attrs=(attr("shape", AttrKind.INTS, (), "used when input `shape` is absent"),),
       infer=_expand_infer, cost=_no_flops, cost_doc="0 (bytes only)",
       reference=_expand_ref, broadcast=True,
       doc="Broadcast x and `shape` against each other (ONNX Expand, so size-1 target dims "
           "keep x's dim); -1 keeps the input dim (torch expand). Input `shape` overrides "
           "the attribute.")


def _tile_infer(ctx: OpContext) -> list[TensorType]:
    shape = _known_shape(ctx)
    repeats = _ints_param(ctx, 1, "repeats")
    if repeats is None:  # values unknown: the rank is kept, empty dims stay empty
        return [TensorType(ctx.input(0).dtype, tuple(0 if d == 0 else None for d in shape))]
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise ctx.fail(f"repeats {list(repeats)} needs one non-negative entry per dim "
                       f"of {ctx.input(0)}")
    dims = tuple(0 if r == 0 else mul_dims([d, r]) for d, r in zip(shape, repeats, strict=True))
    return [TensorType(ctx.input(0).dtype, dims)]


def _tile_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    repeats = _ints_arg(xs, 1, attrs, "repeats")
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise OpError(f"{ctx.where}: repeats {list(repeats)} needs one non-negative entry per "
                      f"dim of x{list(x.shape)}")
    return [np.tile(x, repeats)]


define("tile", Category.DATA_MOVEMENT, inputs=inputs("x", "repeats?"),
       attrs=(attr("repeats", AttrKind.INTS, (), "one per dim; used when input `repeats` is "
                                                 "absent"),),
       infer=_tile_infer, cost=_no_flops, cost_doc="0 (bytes only)", reference=_tile_ref,
       doc="Repeat x `repeats[i]` times along each dim i. Input `repeats` (1-D int64, ONNX "
           "Tile) overrides the attribute; when its values are not known constants the rank "
           "is kept, the dims are unknown.")


def _trilu_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    if x.rank is not None and x.rank < 2:
        raise ctx.fail(f"needs rank >= 2, got {x}")
    if ctx.has_input(1):
        _scalar_input(ctx, 1, "k")
    return [x]


def _trilu_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    fn = np.triu if attrs["upper"] else np.tril
    return [fn(_arg(xs, 0, ctx), _int_arg(xs, 1, attrs, "k", ctx))]


define("trilu", Category.DATA_MOVEMENT, inputs=inputs("x", "k?"),
       attrs=(attr("upper", AttrKind.BOOL, True),
              attr("k", AttrKind.INT, 0, "diagonal offset; used when input `k` is absent")),
       infer=_trilu_infer, cost=_no_flops, cost_doc="0 (a masked copy, bytes only)",
       reference=_trilu_ref,
       doc="Keep the upper (torch.triu) or lower (torch.tril) triangle of the last two dims "
           "from diagonal k on; zero the rest. The one-element input `k` (ONNX Trilu) "
           "overrides the attribute.")


# -- reductions ------------------------------------------------------------------------

def _reduced_shape(shape: Shape, axes: tuple[int, ...], keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_axes(axes: Sequence[int], attrs: Attrs, rank: int,
                 where: str) -> tuple[int, ...] | None:
    """The reduced axes; None for no reduction at all (empty axes, noop_with_empty_axes)."""
    if axes:
        return normalize_axes(axes, rank, where)
    return None if attrs["noop_with_empty_axes"] else tuple(range(rank))


def _reduce_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    given = _ints_param(ctx, 1, "axes")
    keepdims = ctx.attrs["keepdims"]
    if given is None:  # axes known only at run time
        n = _ints_input(ctx, 1, "axes")
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        if keepdims:  # every dim stays or becomes 1
            return [TensorType(x.dtype, tuple(1 if d == 1 else None for d in x.shape))]
        if n is None or (n == 0 and ctx.attrs["noop_with_empty_axes"]):
            return [TensorType(x.dtype, None)]
        return [TensorType(x.dtype, (None,) * (len(x.shape) - n if n else 0))]
    if x.shape is None:
        return [TensorType(x.dtype, None)]
    axes = _reduce_axes(given, ctx.attrs, len(x.shape), _where(ctx))
    if axes is None:
        return [x]
    return [TensorType(x.dtype, _reduced_shape(x.shape, axes, keepdims))]


def _reduction(name: str, fn: Callable[[np.ndarray, tuple[int, ...]], np.ndarray],
               flops: int, doc: str, empty: str = "") -> None:
    """Define a reduction; `fn(x, axes)` must keep the reduced dims (keepdims=True)."""
    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        x = _arg(xs, 0, ctx)
        axes = _reduce_axes(_ints_arg(xs, 1, attrs, "axes"), attrs, x.ndim, ctx.where)
        if x.ndim == 0 and axes is not None:  # a scalar's dim 0 or -1 (torch): itself
            axes = ()
        if axes is None:  # no reduction, but the op's other arithmetic (reduce_l2: |x|)
            return [np.asarray(fn(widen(x), ())).astype(_out_dtype(ctx, 0, x.dtype))]
        y = np.asarray(fn(widen(x), axes))
        if not attrs["keepdims"]:
            y = np.squeeze(y, axis=axes)
        return [y.astype(_out_dtype(ctx, 0, x.dtype))]

    per = "" if flops == 1 else f"{flops} * "
    define(name, Category.REDUCTION, inputs=inputs("x", "axes?"),
           attrs=(attr("axes", AttrKind.INTS, (), "empty = all axes (see "
                                                  "noop_with_empty_axes); used when input "
                                                  "`axes` is absent"),
                  attr("keepdims", AttrKind.BOOL, False),
                  attr("noop_with_empty_axes", AttrKind.BOOL, False,
                       "empty axes reduce nothing instead of all axes (ONNX: the op's "
                       "other arithmetic still applies, so reduce_l2 gives abs(x))")),
           infer=_reduce_infer, cost=_per_input_element(flops),
           cost_doc=f"{per}input numel", reference=reference,
           doc=doc + " over `axes`; the result keeps x's dtype." + empty + " Input `axes` "
               "(1-D int64, ONNX opset 13/18) overrides the attribute; when its values are "
               "not known constants, keepdims gives the rank (dims unknown) and otherwise "
               "the input's length does.")


def _extreme(x: np.ndarray, largest: bool) -> float | int | bool:
    """The identity of max (largest) / min over x's dtype: an empty reduction's result."""
    if x.dtype == bool:
        return not largest
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return int(info.min if largest else info.max)
    return -np.inf if largest else np.inf


_reduction("reduce_sum", lambda x, a: np.sum(x, axis=a, keepdims=True), 1, "Sum")
_reduction("reduce_mean", lambda x, a: np.mean(x, axis=a, keepdims=True), 1, "Mean")
_reduction("reduce_max",
           lambda x, a: np.max(x, axis=a, keepdims=True, initial=_extreme(x, True)), 1,
           "Maximum", " An empty reduction gives -inf (the dtype's minimum for integers), as "
                      "in ONNX.")
_reduction("reduce_min",
           lambda x, a: np.min(x, axis=a, keepdims=True, initial=_extreme(x, False)), 1,
           "Minimum", " An empty reduction gives +inf (the dtype's maximum for integers), as "
                      "in ONNX.")
_reduction("reduce_prod", lambda x, a: np.prod(x, axis=a, keepdims=True), 1, "Product")
_reduction("reduce_l2", lambda x, a: np.sqrt(np.sum(np.square(x), axis=a, keepdims=True)), 2,
           "Euclidean norm sqrt(sum(x^2))")
def _logsumexp(x: np.ndarray, a: Any) -> np.ndarray:
    import scipy.special  # lazy: keeps scipy out of start-up (irbridge info, validate)

    y = scipy.special.logsumexp(x, axis=a, keepdims=True)
    # scipy gives a 0-d input with axis=() shape (1,): keep the keepdims shape exactly
    return np.reshape(y, tuple(1 if i in a else d for i, d in enumerate(x.shape)))


_reduction("reduce_log_sum_exp", _logsumexp, 1,
           "log(sum(exp(x))), computed stably (max subtracted first),")


def _arg_reduction(name: str, fn: Callable[..., np.ndarray], what: str) -> None:
    def infer(ctx: OpContext) -> list[TensorType]:
        shape = _known_shape(ctx)
        if not shape:
            raise ctx.fail("needs an input of rank >= 1")
        axis = normalize_axis(ctx.attrs["axis"], len(shape), _where(ctx))
        return [TensorType(DType.INT64, _reduced_shape(shape, (axis,), ctx.attrs["keepdims"]))]

    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        x = _arg(xs, 0, ctx)
        axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
        if attrs["select_last_index"]:
            y = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            y = fn(x, axis=axis, keepdims=True)
        return [(y if attrs["keepdims"] else np.squeeze(y, axis=axis)).astype(np.int64)]

    define(name, Category.REDUCTION, inputs=inputs("x"),
           attrs=(attr("axis", AttrKind.INT, 0), attr("keepdims", AttrKind.BOOL, False),
                  attr("select_last_index", AttrKind.BOOL, False, "ties: last index wins")),
           infer=infer, cost=_per_input_element(1), cost_doc="input numel (comparisons)",
           reference=reference,
           doc=f"Index (int64) of the {what} along `axis`; ties pick the first index unless "
               "select_last_index.")


_arg_reduction("argmax", np.argmax, "maximum")
_arg_reduction("argmin", np.argmin, "minimum")


# -- softmax and scans -----------------------------------------------------------------

def _same_type_along_axis(ctx: OpContext) -> list[TensorType]:
    """Output type = input type; checks attribute `axis` when the rank is known."""
    x = ctx.input(0)
    if x.rank == 0:
        raise ctx.fail("needs an input of rank >= 1")
    if x.rank is not None:
        normalize_axis(ctx.attrs["axis"], x.rank, _where(ctx))
    return [x]


def _softmax(name: str, log: bool, doc: str) -> None:
    def infer(ctx: OpContext) -> list[TensorType]:
        if not ctx.input(0).dtype.is_float:
            raise ctx.fail(f"needs a float input, got {ctx.input(0)}")
        return _same_type_along_axis(ctx)

    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        x = _arg(xs, 0, ctx)
        axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
        wide = widen(x)
        shifted = wide - np.max(wide, axis=axis, keepdims=True)
        exp_sum = np.sum(np.exp(shifted), axis=axis, keepdims=True)
        with np.errstate(invalid="ignore"):
            y = shifted - np.log(exp_sum) if log else np.exp(shifted) / exp_sum
        if not log and attrs["safe"]:  # rows of all -inf: 0, not NaN (torch's _safe_softmax)
            y = np.where(np.all(np.isneginf(wide), axis=axis, keepdims=True), 0, y)
        return [y.astype(_out_dtype(ctx, 0, x.dtype))]

    safe = () if log else (attr(
        "safe", AttrKind.BOOL, False, "rows (along `axis`) whose elements are all -inf give "
        "0 instead of NaN (torch's _safe_softmax, used for fully masked attention rows)"),)
    define(name, Category.SOFTMAX, inputs=inputs("x"),
           attrs=(attr("axis", AttrKind.INT, -1), *safe),
           infer=infer, cost=_per_input_element(5),
           cost_doc="5 per element: max, subtract, exp, sum, divide (log_softmax: log "
                    "and subtract in place of the divide, counted the same)",
           reference=reference, doc=doc + " along `axis`, computed stably (max subtracted)"
           + ("." if log else "; with `safe`, rows of all -inf give 0."))


_softmax("softmax", False, "exp(x) / sum(exp(x))")
_softmax("log_softmax", True, "x - log(sum(exp(x)))")


def _scan_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    if x.rank == 0:
        raise ctx.fail("needs an input of rank >= 1")
    axis = _int_param(ctx, 1, "axis")
    if x.rank is not None and axis is not None:
        normalize_axis(axis, x.rank, _where(ctx))
    return [x]


def _scan(name: str, ufunc: np.ufunc, identity: float, what: str,
          onnx: str | None = None, cost_per_element: int = 1,
          cost_doc: str = "input numel", decompose: Any = None) -> None:
    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        x = _arg(xs, 0, ctx)
        axis = normalize_axis(_int_arg(xs, 1, attrs, "axis", ctx), x.ndim, ctx.where)
        moved = np.moveaxis(widen(x), axis, 0)
        if attrs["reverse"]:
            moved = moved[::-1]
        y = ufunc.accumulate(moved, axis=0)
        if attrs["exclusive"]:  # shift by one, starting from the identity
            shifted = np.empty_like(y)
            shifted[:1] = identity
            shifted[1:] = y[:-1]
            y = shifted
        if attrs["reverse"]:
            y = y[::-1]
        return [np.moveaxis(y, 0, axis).astype(_out_dtype(ctx, 0, x.dtype))]

    define(name, Category.REDUCTION, inputs=inputs("x", "axis?"),
           attrs=(attr("axis", AttrKind.INT, 0, "used when input `axis` is absent"),
                  attr("exclusive", AttrKind.BOOL, False, "leave out the element itself"),
                  attr("reverse", AttrKind.BOOL, False, "run from the end of the axis")),
           infer=_scan_infer, cost=_per_input_element(cost_per_element), cost_doc=cost_doc,
           reference=reference, decompose=decompose, doc=f"Running {what} along `axis` (torch.{name}"
                                    + (f", ONNX {onnx}" if onnx else "") + "); keeps "
                                    "x's dtype. The one-element input `axis` (ONNX's form) "
                                    "overrides the attribute.")


_scan("cumsum", np.add, 0, "sum", "CumSum")
_scan("cumprod", np.multiply, 1, "product", "CumProd")
# -- linalg helper: scans (issue 13) --------------------------------------------------------
# log(sum(exp)) running along the axis, each step the stable logaddexp of the running value
# and the next element (no global max subtracted, so very negative early elements stay exact);
# exclusive starts from log(0) = -inf.
_scan("logcumsumexp", np.logaddexp, -np.inf, "log-sum-exp", None, 4,
      "4 x input numel (max, exp, log1p, add per step)", _misc.logcumsumexp_decompose)


def _cum_extreme_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    if x.rank == 0:
        raise ctx.fail("needs an input of rank >= 1")
    if x.rank is not None:
        normalize_axis(ctx.attrs["axis"], x.rank, _where(ctx))
    return [x, TensorType(DType.INT64, x.shape)]


def _cum_extreme(name: str, greater: bool) -> None:
    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        x = _arg(xs, 0, ctx)
        axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
        moved = np.moveaxis(x, axis, 0)
        values = moved.copy()
        indices = np.zeros(moved.shape, dtype=np.int64)
        for i in range(1, moved.shape[0]):
            best, cur = values[i - 1], moved[i]
            # torch: a new element wins when it is NaN, or ties or beats a non-NaN best
            # (the last index of equal extremes; NaN propagates with its own index)
            with np.errstate(invalid="ignore"):
                wins = (cur >= best) if greater else (cur <= best)
            if np.issubdtype(moved.dtype, np.floating):
                wins = np.isnan(cur) | (wins & ~np.isnan(best))
            values[i] = np.where(wins, cur, best)
            indices[i] = np.where(wins, i, indices[i - 1])
        return [np.moveaxis(values, 0, axis), np.moveaxis(indices, 0, axis)]

    what = "maximum" if greater else "minimum"
    define(name, Category.OTHER, inputs=inputs("x"), outputs=("values", "indices"),
           attrs=(attr("axis", AttrKind.INT, 0),),
           infer=_cum_extreme_infer, cost=_per_input_element(1),
           cost_doc="input numel (comparisons)", reference=reference,
           decompose=_misc.cummax_decompose if greater else _misc.cummin_decompose,
           doc=f"Running {what} along `axis` and the int64 index where it occurs "
               f"(torch.{name}): ties take the later index; a NaN propagates with its own "
               "index.")


_cum_extreme("cummax", True)
_cum_extreme("cummin", False)
# -- end linalg helper: scans --------------------------------------------------------------


# -- selection -------------------------------------------------------------------------

def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort along `axis`; equal values keep the lower index first either way.
    NaN sorts as the largest value (numpy and torch)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    # ascending stable sort of the flipped axis, flipped back: ties end up in index order
    flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.flip(x.shape[axis] - 1 - flipped, axis)


def _topk_infer(ctx: OpContext) -> list[TensorType]:
    shape = _known_shape(ctx)
    k = _int_param(ctx, 1, "k")
    if not shape:
        raise ctx.fail("needs an input of rank >= 1")
    axis = normalize_axis(ctx.attrs["axis"], len(shape), _where(ctx))
    size = shape[axis]
    if k is not None:
        if k < 0 and not ctx.has_input(1):
            raise ctx.fail("needs attribute k or input k")
        if k < 0 or (isinstance(size, int) and k > size):
            raise ctx.fail(f"k = {k} is out of range for dim {axis} of size {size}")
    dims = (*shape[:axis], k, *shape[axis + 1:])
    return [TensorType(ctx.input(0).dtype, dims), TensorType(DType.INT64, dims)]


def _topk_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
    k = _int_arg(xs, 1, attrs, "k", ctx)
    if not 0 <= k <= x.shape[axis]:
        raise OpError(f"{ctx.where}: k = {k} is out of range for dim {axis} of size "
                      f"{x.shape[axis]}")
    order = np.take(_order(x, axis, attrs["largest"]), np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int64)]


def _topk_cost(ctx: OpContext) -> Flops:
    k = _int_param(ctx, 1, "k")
    if k is None:  # the output's dim along the axis, when static
        out = ctx.output_types[0] if ctx.output_types else None
        shape = out.shape if out is not None else None
        dim = shape[normalize_axis(ctx.attrs["axis"], len(shape), _where(ctx))] \
            if shape else None
        if not isinstance(dim, int):
            return Flops()
        k = dim
    return Flops(other=_numel(ctx.input(0)) * math.ceil(math.log2(k + 1)))


define("topk", Category.OTHER, inputs=inputs("x", "k?"), outputs=("values", "indices"),
       attrs=(attr("k", AttrKind.INT, -1, "required unless input `k` is given"),
              attr("axis", AttrKind.INT, -1),
              attr("largest", AttrKind.BOOL, True),
              attr("sorted", AttrKind.BOOL, True, "the reference always sorts")),
       infer=_topk_infer, cost=_topk_cost,
       cost_doc="input numel * ceil(log2(k + 1)): every element passes a size-k heap (0 when "
                "k is known only at run time and the output dim is not static)",
       reference=_topk_ref,
       doc="The k largest (or smallest) elements along `axis` and their int64 indices; "
           "equal values come in index order. The one-element input `k` (ONNX TopK) "
           "overrides the attribute; when its value is not a known constant the dim along "
           "`axis` is unknown.")


def _sort_infer(ctx: OpContext) -> list[TensorType]:
    x = _same_type_along_axis(ctx)[0]
    return [x, TensorType(DType.INT64, x.shape)]


def _sort_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    axis = normalize_axis(attrs["axis"], x.ndim, ctx.where)
    order = _order(x, axis, attrs["descending"])
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int64)]


def _sort_cost(ctx: OpContext) -> Flops:
    x = ctx.input(0)
    if x.shape is None:
        return Flops()
    n = x.shape[normalize_axis(ctx.attrs["axis"], len(x.shape), _where(ctx))]
    length = n if isinstance(n, int) and n > 1 else 1
    return Flops(other=_numel(x) * math.ceil(math.log2(length)))


define("sort", Category.OTHER, inputs=inputs("x"), outputs=("values", "indices"),
       attrs=(attr("axis", AttrKind.INT, -1), attr("descending", AttrKind.BOOL, False),
              attr("stable", AttrKind.BOOL, True, "the reference is always stable")),
       infer=_sort_infer, cost=_sort_cost,
       cost_doc="input numel * ceil(log2(axis length)) comparisons (0 when not static)",
       reference=_sort_ref,
       doc="Sorted values along `axis` and their int64 indices into x.")


def _one_hot_infer(ctx: OpContext) -> list[TensorType]:
    shape = _known_shape(ctx)
    _check_indices(ctx, 0)
    depth: int | None = ctx.attrs["depth"]
    if ctx.has_input(1):  # ONNX allows any numeric type, converted to int64
        _scalar_input(ctx, 1, "depth", integer=False)
        value = ctx.constant(1)
        depth = None if value is None else _one(value, "depth", _where(ctx))
    if depth is not None and depth < 1:
        raise ctx.fail(f"depth must be >= 1, got {depth}")
    axis = normalize_axis(ctx.attrs["axis"], len(shape) + 1, _where(ctx))
    return [TensorType(ctx.attrs["dtype"], (*shape[:axis], depth, *shape[axis:]))]


def _one_hot_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    indices = _arg(xs, 0, ctx).astype(np.int64)
    depth = _int_arg(xs, 1, attrs, "depth", ctx)
    if depth < 1:
        raise OpError(f"{ctx.where}: depth must be >= 1, got {depth}")
    axis = normalize_axis(attrs["axis"], indices.ndim + 1, ctx.where)
    wrapped = np.where(indices < 0, indices + depth, indices)
    hot = wrapped[..., None] == np.arange(depth)
    return [np.moveaxis(hot, -1, axis).astype(attrs["dtype"].numpy)]


define("one_hot", Category.ELEMENTWISE, inputs=inputs("indices", "depth?"),
       attrs=(attr("depth", AttrKind.INT, 0, "required (>= 1) unless input `depth` is given"),
              attr("dtype", AttrKind.DTYPE, DType.INT64),
              attr("axis", AttrKind.INT, -1, "position of the new dim in the output")),
       infer=_one_hot_infer,
       cost=lambda ctx: Flops(other=ctx.out_numel()),
       cost_doc="1 per output element (a comparison)", reference=_one_hot_ref,
       doc="1 where the new dim's position equals the index, else 0. Negative indices "
           "count from depth (ONNX OneHot); indices out of range give an all-zero row. The "
           "one-element input `depth` (ONNX OneHot, any numeric type, truncated to an "
           "integer) overrides the attribute; when its value is not a known constant the "
           "new dim is unknown.")


def _non_zero_infer(ctx: OpContext) -> list[TensorType]:
    from irbridge.ops.datadep import data_dim, max_numel

    x = ctx.input(0)
    if x.rank is None:
        raise ctx.fail("input 0 needs a known rank")
    return [TensorType(DType.INT64, (x.rank, data_dim(ctx, 0, 1, max_numel(x))))]


def _non_zero_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    if x.ndim == 0:  # numpy refuses nonzero on scalars; ONNX gives [0, count]
        return [np.zeros((0, int(bool(x))), dtype=np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64)]


define("non_zero", Category.OTHER, inputs=inputs("x"), infer=_non_zero_infer,
       cost=_per_input_element(1), cost_doc="input numel (one test per element)",
       reference=_non_zero_ref,
       doc="Indices of the non-zero elements as int64 [rank, count], in row-major order; "
           "count is data dependent: a SymDim from 0 to x's numel.")


# -- control flow ----------------------------------------------------------------------

_CONTROL_COST = "0: the analysis backend costs the bodies separately"


def _check_condition(ctx: OpContext, index: int, what: str) -> None:
    t = ctx.input(index)
    if t.dtype is not DType.BOOL or t.numel() not in (None, 1):
        raise ctx.fail(f"{what} must be a one-element bool tensor, got {t}")


def _if_infer(ctx: OpContext) -> list[TensorType]:
    _check_condition(ctx, 0, "cond")
    then_branch: Graph = ctx.attrs["then_branch"]
    else_branch: Graph = ctx.attrs["else_branch"]
    if then_branch.inputs or else_branch.inputs:
        raise ctx.fail("branches take no inputs (they read outer values directly)")
    if len(then_branch.outputs) != len(else_branch.outputs):
        raise ctx.fail(f"then_branch has {len(then_branch.outputs)} outputs, else_branch "
                       f"{len(else_branch.outputs)}")
    return [_join_types(a.type, b.type, _where(ctx), f"branch output {i}")
            for i, (a, b) in enumerate(zip(then_branch.outputs, else_branch.outputs,
                                           strict=True))]


def _if_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    taken = _truth(_arg(xs, 0, ctx), "cond", ctx)
    return ctx.run_graph(attrs["then_branch" if taken else "else_branch"], [])


def _if_cost(ctx: OpContext) -> Flops:
    return Flops(one_body=True)


define("if", Category.CONTROL, inputs=inputs("cond"), outputs=("outputs",),
       variadic_outputs=True,
       attrs=(attr("then_branch", AttrKind.GRAPH, doc="runs when cond is true"),
              attr("else_branch", AttrKind.GRAPH, doc="runs when cond is false")),
       infer=_if_infer, cost=_if_cost,
       cost_doc="0: the analysis backend costs the branches separately and counts the "
                "costlier one (one branch runs)", reference=_if_ref,
       doc="Run one of two input-less branch graphs; outputs are that branch's outputs. "
           "Output types come from both branches: dims that differ are unknown.")


def _scalar_int(array: np.ndarray) -> int:
    return int(np.asarray(array).reshape(-1)[0])


def _loop_counts(body: Graph, carried: int, where: str) -> int:
    """Number of scan outputs; checks the body's signature."""
    if len(body.inputs) != 2 + carried or len(body.outputs) < 1 + carried:
        raise OpError(f"{where}: body must take (iteration, cond, {carried} carried) and return "
                      f"(cond, {carried} carried, scans...), got {len(body.inputs)} inputs and "
                      f"{len(body.outputs)} outputs")
    return len(body.outputs) - 1 - carried


def _static_trips(ctx: OpContext) -> int | None:
    """Iterations of a loop, static only for a constant trip count with no cond input."""
    trips = ctx.constant(0)
    return max(_scalar_int(trips), 0) if trips is not None and not ctx.has_input(1) else None


def _loop_cost(ctx: OpContext) -> Flops:
    return Flops(repeats=_static_trips(ctx))


def _loop_infer(ctx: OpContext) -> list[TensorType]:
    where = _where(ctx)
    body: Graph = ctx.attrs["body"]
    carried = len(ctx.input_types) - 2
    if carried < 0:
        raise ctx.fail("takes (max_trip_count?, cond?, carried*): pass None for an "
                       "omitted input")
    scans = _loop_counts(body, carried, where)
    if ctx.has_input(0) and (not ctx.input(0).dtype.is_integer or ctx.input(0).numel() not in
                             (None, 1)):
        raise ctx.fail(f"max_trip_count must be a one-element integer, got {ctx.input(0)}")
    if ctx.has_input(1):
        _check_condition(ctx, 1, "cond")
    count: Dim = _static_trips(ctx)
    finals = [_join_types(ctx.input(2 + i), body.outputs[1 + i].type, where,
                          f"carried value {i}") for i in range(carried)]
    stacked = []
    for j, value in enumerate(body.outputs[1 + carried:]):
        if value.type is None:
            raise ctx.fail(f"body scan output {j} ({value.name!r}) is untyped")
        shape = value.type.shape
        stacked.append(TensorType(value.type.dtype, None if shape is None else (count, *shape)))
    assert len(stacked) == scans
    return finals + stacked


def _empty_stack(t: TensorType | None) -> np.ndarray:
    """A scan output of zero iterations: unknown dims become 0 (no elements anyway)."""
    if t is None:
        return np.zeros((0,), dtype=np.float32)
    dims = [d if isinstance(d, int) else 0 for d in t.shape or ()]
    return np.zeros((0, *dims), dtype=t.dtype.numpy)


def _loop_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    body: Graph = attrs["body"]
    trip_input, cond_input = xs[0], xs[1]
    state = [_arg(xs, i, ctx) for i in range(2, len(xs))]
    n = len(state)
    scans: list[list[np.ndarray]] = [[] for _ in range(_loop_counts(body, n, ctx.where))]
    limit = None if trip_input is None else _scalar_int(trip_input)
    # ONNX: with a trip count and no cond input the body's cond is ignored (a for loop)
    use_body_cond = cond_input is not None or limit is None
    keep_going = True if cond_input is None else _truth(cond_input, "cond", ctx)
    step = 0
    while keep_going and (limit is None or step < limit):
        outs = ctx.run_graph(body, [np.array(step, dtype=np.int64), np.array(keep_going),
                                    *state])
        state = outs[1:1 + n]
        for acc, value in zip(scans, outs[1 + n:], strict=True):
            acc.append(value)
        if use_body_cond:
            keep_going = _truth(outs[0], "body cond output", ctx)
        step += 1
    scan_types = [v.type for v in body.outputs[1 + n:]]
    return state + [np.stack(acc) if acc else _empty_stack(t)
                    for acc, t in zip(scans, scan_types, strict=True)]


define("loop", Category.CONTROL, inputs=inputs("max_trip_count?", "cond?", "carried*"),
       outputs=("outputs",), variadic_outputs=True,
       attrs=(attr("body", AttrKind.GRAPH,
                   doc="inputs (iteration i64, cond bool, carried...), "
                       "outputs (cond, carried..., scans...)"),),
       infer=_loop_infer, cost=_loop_cost, reference=_loop_ref,
       cost_doc="0: the analysis backend costs the body, times a constant trip count with no "
                "cond input (else once)",
       doc="ONNX Loop: run `body` while cond holds and fewer than max_trip_count iterations "
           "ran. Outputs: the final carried values, then each scan output stacked on a new "
           "axis 0. With a trip count and no cond input the body's cond is ignored.")
