"""Reductions and softmax."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Unsupported
from ._base import (
    Args,
    AtenFn,
    _aten_fn,
    _axis,
    _dims,
    _op,
    aten,
    result_dtype,
)

# -- reductions and softmax ---------------------------------------------------------------


def _lift_0d(fn: AtenFn) -> AtenFn:
    """torch lets a 0-d tensor stand for a 1-element vector in every dim-taking op (dim 0
    or -1, keepdim or not) and gives 0-d results. The IR's ops want a real axis: a 0-d
    `self` is reshaped to [1], the op runs along axis 0, and each tensor result is reshaped
    back to 0-d."""
    def lifted(em: Emitter, a: Args) -> Any:
        x = a.get("self")
        if not isinstance(x, Value) or em.rank(x) != 0:
            return fn(em, a)
        result = fn(em, {**a, "self": em.op("reshape", [x], shape=(1,))})

        def scalar(v: Any) -> Any:
            if isinstance(v, Deferred):
                return Deferred(lambda: scalar(v.resolve()))
            if isinstance(v, Value) and em.rank(v) != 0:
                return em.op("reshape", [v], shape=())
            return v
        if isinstance(result, tuple):
            return tuple(scalar(v) for v in result)
        return scalar(result)
    return lifted



def _reduce(name: str, dim_key: str = "dim") -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"])
        dtype = a.get("dtype")
        out = em.out_dtype()
        # torch accumulates sums and products of integers and booleans in int64, and
        # computes a mean or a logsumexp in its result's type (an integer input's in the
        # default float type): the input is cast to the result's type
        if dtype is not None or (name in ("reduce_mean", "reduce_sum", "reduce_prod",
                                          "reduce_log_sum_exp")
                                 and out != em.type(x).dtype):
            x = em.cast(x, out)
        axes = _dims(a.get(dim_key), em.rank(x))
        return em.op(name, [x], axes=axes, keepdims=bool(a.get("keepdim", False)))
    return fn


_aten_fn(aten.sum.dim_IntList, aten.sum.default)(_lift_0d(_reduce("reduce_sum")))
_aten_fn(aten.mean.dim, aten.mean.default)(_lift_0d(_reduce("reduce_mean")))
_aten_fn(aten.amax.default)(_lift_0d(_reduce("reduce_max")))
_aten_fn(aten.amin.default)(_lift_0d(_reduce("reduce_min")))
_aten_fn(aten.prod.dim_int, aten.prod.default)(_lift_0d(_reduce("reduce_prod")))
_aten_fn(aten.logsumexp.default)(_lift_0d(_reduce("reduce_log_sum_exp")))


@_aten_fn(aten.max.default, aten.min.default)
def _max_all(em: Emitter, a: Args) -> Value:
    name = "reduce_max" if a["__op__"] is aten.max.default else "reduce_min"
    return em.op(name, [em.value(a["self"])], axes=(), keepdims=False)


def _max_dim(name: str, arg: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        x = em.value(a["self"])
        axis = _axis(int(a["dim"]), em.rank(x))
        keep = bool(a["keepdim"])
        values = em.op(name, [x], axes=(axis,), keepdims=keep)
        indices = Deferred(lambda: em.op(arg, [x], axis=axis, keepdims=keep))
        return values, indices
    return fn


_aten_fn(aten.max.dim)(_lift_0d(_max_dim("reduce_max", "argmax")))
_aten_fn(aten.min.dim)(_lift_0d(_max_dim("reduce_min", "argmin")))


def _arg_fn(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"])
        keep = bool(a["keepdim"])
        if a["dim"] is None:
            flat = em.op("reshape", [x], shape=(-1,))
            y = em.op(name, [flat], axis=0, keepdims=False)
            if keep:
                y = em.op("reshape", [y], shape=(1,) * em.rank(x))
            return y
        return em.op(name, [x], axis=_axis(int(a["dim"]), em.rank(x)), keepdims=keep)
    return fn


_aten_fn(aten.argmax.default)(_lift_0d(_arg_fn("argmax")))
_aten_fn(aten.argmin.default)(_lift_0d(_arg_fn("argmin")))


@_aten_fn(aten.var.correction, aten.var.dim, aten.std.correction, aten.std.dim,
          aten.var_mean.correction)
@_lift_0d
def _var(em: Emitter, a: Args) -> Any:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    rank = em.rank(x)
    axes = _dims(a.get("dim"), rank)
    keep = bool(a.get("keepdim", False))
    correction = a.get("correction")
    if correction is None:
        correction = 1 if a.get("unbiased", True) else 0
    shape = em.shape(x)
    n = 1
    for i in axes:
        if not isinstance(shape[i], int):
            raise Unsupported("variance over a symbolic dim")
        n *= shape[i]  # type: ignore[operator]
    dtype = em.type(x).dtype
    mean = em.op("reduce_mean", [x], axes=axes, keepdims=True)
    c = em.op("sub", [x, mean])
    total = em.op("reduce_sum", [em.op("mul", [c, c])], axes=axes, keepdims=keep)
    var = em.op("div", [total, em.scalar(max(n - float(correction), 0.0), dtype)])
    target = a.get("__op__")
    if target in (aten.std.correction, aten.std.dim):
        return em.op("sqrt", [var])
    if target is aten.var_mean.correction:
        m = mean if keep else em.op("squeeze", [mean], axes=axes)
        return var, m
    return var


@_aten_fn(aten.linalg_vector_norm.default)
@_lift_0d
def _vector_norm(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    return _p_norm(em, x, _dims(a.get("dim"), em.rank(x)), bool(a["keepdim"]),
                   float(a["ord"]))


def _p_norm(em: Emitter, x: Value, axes: tuple[int, ...], keep: bool, order: float) -> Value:
    """torch's vector p-norm over `axes`: (sum |x|^p)^(1/p); p = 0 counts the nonzeros,
    +-inf is the largest / smallest |x|."""
    if order == 2:
        return em.op("reduce_l2", [x], axes=axes, keepdims=keep)
    if order == 1:
        return em.op("reduce_sum", [em.op("abs", [x])], axes=axes, keepdims=keep)
    if math.isinf(order):
        return em.op("reduce_max" if order > 0 else "reduce_min", [em.op("abs", [x])],
                     axes=axes, keepdims=keep)
    dtype = em.type(x).dtype
    if order == 0:
        nonzero = em.cast(em.op("not_equal", [x, em.scalar(0, dtype)]), dtype)
        return em.op("reduce_sum", [nonzero], axes=axes, keepdims=keep)
    powered = em.op("pow", [em.op("abs", [x]), em.scalar(order, dtype)])
    total = em.op("reduce_sum", [powered], axes=axes, keepdims=keep)
    return em.op("pow", [total, em.scalar(1.0 / order, dtype)])


@_aten_fn(aten.dist.default)
def _dist(em: Emitter, a: Args) -> Value:
    """The p-norm of self - other (broadcast) over every element."""
    out = em.out_dtype()
    diff = em.op("sub", [em.cast(em.value(a["self"]), out), em.cast(em.value(a["other"]), out)])
    return _p_norm(em, diff, tuple(range(em.rank(diff))), False, float(a["p"]))


@_aten_fn(aten._cdist_forward.default)
def _cdist(em: Emitter, a: Args) -> Value:
    """Pairwise p-norm distances between the rows of x1 (.., P, M) and x2 (.., R, M). For
    p = 2 torch takes the matmul form sqrt(max(|a|^2 + |b|^2 - 2 a.b, 1e-30)) when
    compute_mode is 1, or None with P or R above 25; the same form is written here then."""
    x1, x2 = em.value(a["x1"]), em.value(a["x2"])
    p, mode = float(a["p"]), a["compute_mode"]
    rows1, rows2 = em.static_shape(x1)[-2], em.static_shape(x2)[-2]
    if p == 2 and (mode == 1 or (mode in (None, 0) and max(rows1, rows2) > 25)):
        return _euclidean_by_matmul(em, x1, x2)
    diff = em.op("sub", [em.op("unsqueeze", [x1], axes=(-2,)),
                         em.op("unsqueeze", [x2], axes=(-3,))])
    return _p_norm(em, diff, (em.rank(diff) - 1,), False, p)


def _euclidean_by_matmul(em: Emitter, x1: Value, x2: Value) -> Value:
    """ATen's _euclidean_dist: [-2 a, |a|^2, 1] . [b, 1, |b|^2], clamped at 1e-30, sqrt."""
    dtype = em.type(x1).dtype
    last = em.rank(x1) - 1

    def squares(x: Value) -> Value:
        return em.op("reduce_sum", [em.op("mul", [x, x])], axes=(last,), keepdims=True)

    def ones(x: Value) -> Value:
        shape = (*em.static_shape(x)[:-1], 1)
        return em.op("full", [], shape=shape, value=1.0, dtype=dtype)

    left = em.op("concat", [em.op("mul", [x1, em.scalar(-2.0, dtype)]), squares(x1), ones(x1)],
                 axis=last)
    right = em.op("concat", [x2, ones(x2), squares(x2)], axis=last)
    perm = (*range(last - 1), last, last - 1)
    product = em.op("matmul", [left, em.op("permute", [right], perm=perm)])
    return em.op("sqrt", [em.op("clip", [product], min=1e-30)])


@_aten_fn(aten._pdist_forward.default)
def _pdist(em: Emitter, a: Args) -> Value:
    """p-norm distances between the rows i < j of a (N, M) matrix, row-major over (i, j)."""
    x = em.value(a["self"])
    n = em.static_shape(x)[0]
    first, second = np.triu_indices(n, 1)
    if first.size == 0:  # fewer than two rows: no pairs
        return em.op("full", [], shape=(0,), value=0.0, dtype=em.type(x).dtype)
    rows = [em.op("gather", [x, em.const(i.astype(np.int64), DType.INT64)], axis=0)
            for i in (first, second)]
    return _p_norm(em, em.op("sub", rows), (1,), False, float(a["p"]))


def _softmax_fn(name: str, **extra: bool) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.cast(em.value(a["self"]), em.out_dtype())
        return em.op(name, [x], axis=_axis(int(a["dim"]), max(em.rank(x), 1)), **extra)
    return fn


_aten_fn(aten.softmax.int, aten._softmax.default)(_lift_0d(_softmax_fn("softmax")))
# _safe_softmax (SDPA's masked softmax): rows of all -inf give 0, not softmax's NaN
_aten_fn(_op("_safe_softmax"))(_lift_0d(_softmax_fn("softmax", safe=True)))
_aten_fn(aten.log_softmax.int, aten._log_softmax.default)(_lift_0d(_softmax_fn("log_softmax")))


@_aten_fn(aten.cumsum.default, aten.cumsum_.default if hasattr(aten, "cumsum_") else None)
@_lift_0d
def _cumsum(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    return em.op("cumsum", [x], axis=_axis(int(a["dim"]), em.rank(x)))


# -- linalg helper: scans (issue 13) --------------------------------------------------------
def _scan_fn(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.cast(em.value(a["self"]), em.out_dtype())
        if em.rank(x) == 0:  # torch scans a 0-d tensor as one element: the value itself
            return x
        return em.op(name, [x], axis=_axis(int(a["dim"]), em.rank(x)))
    return fn


_aten_fn(aten.cumprod.default)(_scan_fn("cumprod"))
_aten_fn(aten.logcumsumexp.default)(_scan_fn("logcumsumexp"))


def _cum_extreme_fn(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        x = em.value(a["self"])
        if em.rank(x) == 0:
            raise Unsupported(f"{name} of a 0-d tensor")
        values, indices = em.ops(name, [x], axis=_axis(int(a["dim"]), em.rank(x)))
        return values, indices
    return fn


_aten_fn(aten.cummax.default)(_cum_extreme_fn("cummax"))
_aten_fn(aten.cummin.default)(_cum_extreme_fn("cummin"))
# -- end linalg helper: scans --------------------------------------------------------------


@_aten_fn(aten.topk.default)
@_lift_0d
def _topk(em: Emitter, a: Args) -> Any:
    x = em.value(a["self"])
    values, indices = em.ops("topk", [x], k=int(a["k"]), axis=_axis(int(a["dim"]), em.rank(x)),
                             largest=bool(a["largest"]), sorted=bool(a["sorted"]))
    return values, indices


@_aten_fn(aten.sort.default, aten.sort.stable)
@_lift_0d
def _sort(em: Emitter, a: Args) -> Any:
    x = em.value(a["self"])
    values, indices = em.ops("sort", [x], axis=_axis(int(a["dim"]), em.rank(x)),
                             descending=bool(a["descending"]))
    return values, indices


@_aten_fn(aten.argsort.default, _op("argsort", "stable"))
@_lift_0d
def _argsort(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    _, indices = em.ops("sort", [x], axis=_axis(int(a["dim"]), em.rank(x)),
                        descending=bool(a["descending"]))
    return indices


@_aten_fn(aten.any.default, aten.any.dim, _op("any", "dims"), aten.all.default, aten.all.dim,
          _op("all", "dims"), aten._is_any_true.default, aten._is_all_true.default)
@_lift_0d
def _any_all(em: Emitter, a: Args) -> Value:
    """any / all; `_is_any_true` / `_is_all_true` (a bool tensor's any / all as a 0-d bool,
    what `torch._check` on a tensor condition traces to) are the whole-tensor forms."""
    x = em.cast(em.value(a["self"]), DType.BOOL)
    target = a.get("__op__")
    is_any = target in (aten.any.default, aten.any.dim, _op("any", "dims"),
                        aten._is_any_true.default)
    ints = em.cast(x, DType.INT32)
    dims = a.get("dim")
    axes = _dims(dims, em.rank(x))
    r = em.op("reduce_max" if is_any else "reduce_min", [ints], axes=axes,
              keepdims=bool(a.get("keepdim", False)))
    # bool, except of a uint8 input: uint8 0 / 1 (torch keeps that legacy type)
    return em.cast(em.cast(r, DType.BOOL), em.out_dtype())


# -- order statistics: median, nanmedian, kthvalue, mode ---------------------------------------
# A stable ascending sort (NaN last) and a pick at a per-row position. On ties torch returns
# the index its in-place selection happens to leave there (not reproducible); the sort gives
# the lowest index holding the value. Values always agree.


def _nan_count(em: Emitter, x: Value, axis: int) -> Value | None:
    """Number of non-NaN elements along `axis` (kept as a size-1 dim), None for ints."""
    if not em.type(x).dtype.is_float:
        return None
    ok = em.cast(em.op("logical_not", [em.op("isnan", [x])]), DType.INT64)
    return em.op("reduce_sum", [ok], axes=(axis,), keepdims=True)


def _ascending_order(em: Emitter, x: Value, axis: int) -> Value:
    """Indices of a stable ascending sort of `x` along `axis`, NaN last (torch's order).
    The sort sees NaN as +inf, then a second stable sort of the NaN flags moves the NaNs
    behind the real infinities: no back-end's NaN ordering is relied on (ONNX TopK leaves
    it unspecified)."""
    if not em.type(x).dtype.is_float:
        return em.ops("sort", [x], axis=axis, descending=False)[1]
    nan = em.op("isnan", [x])
    key = em.op("where", [nan, em.scalar(math.inf, em.type(x).dtype), x])
    first = em.ops("sort", [key], axis=axis, descending=False)[1]
    flags = em.op("gather_elements", [em.cast(nan, em.type(x).dtype), first], axis=axis)
    second = em.ops("sort", [flags], axis=axis, descending=False)[1]
    return em.op("gather_elements", [first, second], axis=axis)


def _pick_sorted(em: Emitter, x: Value, axis: int, position: Value,
                 keep: bool) -> tuple[Value, Value]:
    """Values and indices of the sorted `x` at `position` (int64, x's shape with size 1 along
    `axis`)."""
    i = em.op("gather_elements", [_ascending_order(em, x, axis), position], axis=axis)
    v = em.op("gather_elements", [x, i], axis=axis)
    if not keep:
        v, i = (em.op("squeeze", [t], axes=(axis,)) for t in (v, i))
    return v, i


def _median_position(em: Emitter, x: Value, axis: int, ignore_nan: bool) -> Value:
    """torch's lower median: sorted position (n - 1) // 2 of the n elements; with NaN, the
    first NaN (median) or the lower median of the m non-NaN elements (nanmedian; 0 when
    there are none)."""
    shape = list(em.static_shape(x))
    n = shape[axis]
    shape[axis] = 1
    middle = em.const(np.full(shape, (n - 1) // 2, np.int64), DType.INT64)
    m = _nan_count(em, x, axis)
    if m is None:
        return middle
    if ignore_nan:
        half = em.op("floor_div", [em.op("sub", [m, em.scalar(1, DType.INT64)]),
                                   em.scalar(2, DType.INT64)])
        return em.op("maximum", [half, em.scalar(0, DType.INT64)])
    return em.op("where", [em.op("less", [m, em.scalar(n, DType.INT64)]), m, middle])


def _median_all(em: Emitter, a: Args) -> Value:
    flat = em.op("reshape", [em.value(a["self"])], shape=(-1,))
    ignore_nan = a["__op__"] is not aten.median.default
    v, _ = _pick_sorted(em, flat, 0, _median_position(em, flat, 0, ignore_nan), False)
    return v


_aten_fn(aten.median.default, aten.nanmedian.default)(_median_all)


@_aten_fn(aten.median.dim, aten.nanmedian.dim)
@_lift_0d
def _median_dim(em: Emitter, a: Args) -> Any:
    x = em.value(a["self"])
    axis = _axis(int(a["dim"]), em.rank(x))
    position = _median_position(em, x, axis, a["__op__"] is aten.nanmedian.dim)
    return _pick_sorted(em, x, axis, position, bool(a["keepdim"]))


@_aten_fn(aten.kthvalue.default)
@_lift_0d
def _kthvalue(em: Emitter, a: Args) -> Any:
    """The k-th smallest (1-based; NaN counts as the largest)."""
    x = em.value(a["self"])
    axis = _axis(int(a["dim"]), em.rank(x))
    shape = list(em.static_shape(x))
    k = int(a["k"])
    if not 1 <= k <= shape[axis]:
        raise Unsupported(f"kthvalue k={k} out of range for a dim of size {shape[axis]}")
    shape[axis] = 1
    position = em.const(np.full(shape, k - 1, np.int64), DType.INT64)
    return _pick_sorted(em, x, axis, position, bool(a["keepdim"]))


@_aten_fn(aten.mode.default)
@_lift_0d
def _mode(em: Emitter, a: Args) -> Any:
    """torch's mode: the smallest of the most frequent values along `dim`, and the last index
    holding it. Counts come from comparing every pair along the dim (n^2 per row)."""
    x = em.value(a["self"])
    axis = _axis(int(a["dim"]), em.rank(x))
    keep = bool(a["keepdim"])
    dtype = em.type(x).dtype
    shape = em.static_shape(x)
    pairs = em.op("equal", [em.op("unsqueeze", [x], axes=(axis + 1,)),
                            em.op("unsqueeze", [x], axes=(axis,))])
    counts = em.op("reduce_sum", [em.cast(pairs, DType.INT64)], axes=(axis + 1,),
                   keepdims=False)
    most = em.op("equal", [counts, em.op("reduce_max", [counts], axes=(axis,), keepdims=True)])
    big: float | int = (math.inf if dtype.is_float
                        else int(np.iinfo(dtype.numpy).max) if dtype.is_integer else 1)
    value = em.op("reduce_min", [em.op("where", [most, x, em.scalar(big, dtype)])],
                  axes=(axis,), keepdims=True)
    iota_shape = [1] * len(shape)
    iota_shape[axis] = shape[axis]
    iota = em.const(np.arange(shape[axis], dtype=np.int64).reshape(iota_shape), DType.INT64)
    where_value = em.op("where", [em.op("equal", [x, value]), iota,
                                  em.scalar(-1, DType.INT64)])
    index = em.op("reduce_max", [where_value], axes=(axis,), keepdims=keep)
    if not keep:
        value = em.op("squeeze", [value], axes=(axis,))
    return value, index


# -- bucketize, searchsorted, histc -------------------------------------------------------------


def _bucket_index(em: Emitter, values: Value, edges: Value, right: bool,
                  out_int32: bool) -> Value:
    """How many of `edges` (sorted along the last dim, broadcast against values' leading
    dims) lie below each value (or at most at it, `right`): torch's binary search result.
    NaN values go past the end, as torch's search leaves them."""
    dtype = em.out_dtype()
    v = em.op("unsqueeze", [values], axes=(-1,))
    e = edges if em.rank(edges) == 1 else em.op("unsqueeze", [edges], axes=(-2,))
    below = em.op("less_equal" if right else "less", [e, v])
    count = em.op("reduce_sum", [em.cast(below, DType.INT64)], axes=(-1,), keepdims=False)
    if em.type(values).dtype.is_float:
        size = em.static_shape(edges)[-1]
        count = em.op("where", [em.op("isnan", [values]), em.scalar(size, DType.INT64), count])
    return em.cast(count, DType.INT32 if out_int32 else dtype)


@_aten_fn(aten.bucketize.Tensor)
def _bucketize(em: Emitter, a: Args) -> Value:
    x, edges = em.value(a["self"]), em.value(a["boundaries"])
    out = result_dtype(em, x, edges)
    return _bucket_index(em, em.cast(x, out), em.cast(edges, out), bool(a["right"]),
                         bool(a["out_int32"]))


@_aten_fn(aten.searchsorted.Tensor)
def _searchsorted(em: Emitter, a: Args) -> Value:
    seq, x = em.value(a["sorted_sequence"]), em.value(a["self"])
    if a.get("sorter") is not None:
        seq = em.op("gather_elements", [seq, em.value(a["sorter"])], axis=em.rank(seq) - 1)
    out = result_dtype(em, x, seq)
    right = bool(a["right"]) or a.get("side") == "right"
    return _bucket_index(em, em.cast(x, out), em.cast(seq, out), right, bool(a["out_int32"]))


def _data_range(em: Emitter, flat: Value, widen: float) -> tuple[Value, Value]:
    """The smallest and largest element of a 1-d `flat`, each moved out by `widen` when
    they are equal (the histogram functions' range when none is given)."""
    lo = em.op("reduce_min", [flat], axes=(0,), keepdims=False)
    hi = em.op("reduce_max", [flat], axes=(0,), keepdims=False)
    same = em.op("equal", [lo, hi])
    step = em.scalar(widen, em.type(flat).dtype)
    return (em.op("where", [same, em.op("sub", [lo, step]), lo]),
            em.op("where", [same, em.op("add", [hi, step]), hi]))


@_aten_fn(aten.histc.default)
def _histc(em: Emitter, a: Args) -> Value:
    """torch's histc: `bins` equal bins over [min, max] (over the data's range when min ==
    max, widened by 1 on both sides when that is one value); bin (x - lo) * bins / (hi - lo)
    truncated, the top edge in the last bin; values outside and NaN are not counted."""
    x = em.value(a["self"])
    dtype = em.type(x).dtype
    bins, lo_arg, hi_arg = int(a["bins"]), float(a["min"]), float(a["max"])
    flat = em.op("reshape", [x], shape=(-1,))
    if lo_arg == hi_arg:
        lo, hi = _data_range(em, flat, 1.0)
    else:
        lo, hi = em.scalar(lo_arg, dtype), em.scalar(hi_arg, dtype)
    inside = em.op("logical_and", [em.op("greater_equal", [flat, lo]),
                                   em.op("less_equal", [flat, hi])])
    scaled = em.op("div", [em.op("mul", [em.op("sub", [flat, lo]), em.scalar(bins, dtype)]),
                           em.op("sub", [hi, lo])])
    zero = em.scalar(0.0, dtype)
    position = em.op("minimum", [em.op("floor", [em.op("where", [inside, scaled, zero])]),
                                 em.scalar(bins - 1, dtype)])
    counts = em.op("full", [], shape=(bins,), value=0.0, dtype=dtype)
    return em.op("scatter_elements", [counts, em.cast(position, DType.INT64),
                                      em.cast(inside, dtype)], axis=0, reduction="add")


# -- segment_reduce ----------------------------------------------------------------------------

_SEGMENT = {"sum": ("add", 0.0), "mean": ("add", 0.0), "prod": ("mul", 1.0),
            "max": ("max", -math.inf), "min": ("min", math.inf)}


@_aten_fn(aten.segment_reduce.default)
def _segment_reduce(em: Emitter, a: Args) -> Value:
    """Consecutive segments of `data` along axis 0 (given by lengths or offsets) reduced:
    every element is scattered onto its segment, the segment of row j being the number of
    segment starts <= j, less one. torch's conventions: the reduction starts from `initial`
    when given (mean: (initial + sum) / count), an empty segment is `initial`, else the
    reduction's identity (mean: NaN)."""
    data = em.value(a["data"])
    reduce = str(a["reduce"])
    if reduce not in _SEGMENT or int(a["axis"]) not in (0, -em.rank(data)):
        raise Unsupported(f"segment_reduce {reduce} along axis {a['axis']}")
    dtype = em.type(data).dtype
    if a["lengths"] is not None:
        lengths = em.cast(em.value(a["lengths"]), DType.INT64)
        starts = em.op("sub", [em.op("cumsum", [lengths], axis=0), lengths])
    elif a["offsets"] is not None:
        offsets = em.cast(em.value(a["offsets"]), DType.INT64)
        count = em.static_shape(offsets)[0]
        starts = em.op("slice", [offsets], starts=(0,), ends=(count - 1,), axes=(0,))
    else:
        raise Unsupported("segment_reduce by indices")
    if em.rank(starts) != 1:
        raise Unsupported("segment_reduce with batched lengths")
    segments = em.static_shape(starts)[0]
    shape = em.static_shape(data)
    rows = em.const(np.arange(shape[0], dtype=np.int64)[:, None], DType.INT64)
    started = em.op("less_equal", [em.op("unsqueeze", [starts], axes=(0,)), rows])
    segment = em.op("sub", [em.op("reduce_sum", [em.cast(started, DType.INT64)], axes=(1,),
                                  keepdims=False), em.scalar(1, DType.INT64)])
    spread = em.op("expand", [em.op("reshape", [segment], shape=(-1,) + (1,) * (len(shape) - 1))],
                   shape=shape)
    reduction, identity = _SEGMENT[reduce]
    initial = a.get("initial")
    start = float(initial) if initial is not None and reduce != "mean" else identity
    out_shape = (segments, *shape[1:])
    base = em.op("full", [], shape=out_shape, value=start, dtype=dtype)
    total = em.op("scatter_elements", [base, spread, data], axis=0, reduction=reduction)
    if reduce != "mean":
        return total
    counts = em.op("scatter_elements", [em.op("full", [], shape=out_shape, value=0.0,
                                              dtype=dtype), spread,
                                        em.op("full", [], shape=shape, value=1.0, dtype=dtype)],
                   axis=0, reduction="add")
    if initial is None:
        return em.op("div", [total, counts])
    value = em.scalar(float(initial), dtype)
    mean = em.op("div", [em.op("add", [total, value]),
                         em.op("maximum", [counts, em.scalar(1.0, dtype)])])
    return em.op("where", [em.op("equal", [counts, em.scalar(0.0, dtype)]), value, mean])


@_aten_fn(aten.histogram.bin_ct)
def _histogram(em: Emitter, a: Args) -> Any:
    """torch.histogram with a bin count: edges as torch.linspace lays them out (from the
    front for the first half, from the back for the rest) over `range` or the data's range
    (widened by 0.5 on both sides when that is one value); an element's bin is the number
    of edges at or below it, less one, the top edge in the last bin; values outside and NaN
    are not counted; optional weights and density (count / (total * bin width))."""
    x = em.value(a["self"])
    dtype = em.type(x).dtype
    bins = int(a["bins"])
    flat = em.op("reshape", [x], shape=(-1,))
    bounds = a.get("range")
    if bounds is not None:
        lo, hi = em.scalar(float(bounds[0]), dtype), em.scalar(float(bounds[1]), dtype)
    else:
        lo, hi = _data_range(em, flat, 0.5)
    step = em.op("div", [em.op("sub", [hi, lo]), em.scalar(bins, dtype)])
    index = np.arange(bins + 1)
    front = em.op("add", [lo, em.op("mul", [step, em.const(index.astype(dtype.numpy), dtype)])])
    back = em.op("sub", [hi, em.op("mul", [step, em.const((bins - index).astype(dtype.numpy),
                                                          dtype)])])
    edges = em.op("where", [em.const(index < (bins + 1) // 2), front, back])
    inside = em.op("logical_and", [em.op("greater_equal", [flat, lo]),
                                   em.op("less_equal", [flat, hi])])
    at_or_below = em.op("less_equal", [em.op("unsqueeze", [edges], axes=(0,)),
                                       em.op("unsqueeze", [flat], axes=(1,))])
    position = em.op("sub", [em.op("reduce_sum", [em.cast(at_or_below, DType.INT64)],
                                   axes=(1,), keepdims=False), em.scalar(1, DType.INT64)])
    position = em.op("minimum", [em.op("maximum", [position, em.scalar(0, DType.INT64)]),
                                 em.scalar(bins - 1, DType.INT64)])
    weight = em.cast(inside, dtype)
    if a.get("weight") is not None:
        given = em.op("reshape", [em.cast(em.value(a["weight"]), dtype)], shape=(-1,))
        weight = em.op("where", [inside, given, em.scalar(0.0, dtype)])
    counts = em.op("full", [], shape=(bins,), value=0.0, dtype=dtype)
    hist = em.op("scatter_elements", [counts, position, weight], axis=0, reduction="add")
    if a.get("density"):
        widths = em.op("sub", [em.op("slice", [edges], starts=(1,), ends=(bins + 1,), axes=(0,)),
                               em.op("slice", [edges], starts=(0,), ends=(bins,), axes=(0,))])
        total = em.op("reduce_sum", [hist], axes=(0,), keepdims=False)
        hist = em.op("div", [hist, em.op("mul", [total, widths])])
    return hist, edges
