"""Registry decompositions of scans and float-format ops (issue 13): cummax, cummin,
logcumsumexp, written with neutral ops so that the ONNX and StableHLO exporters can emit them.

Scans run as a log-step (Hillis-Steele) scan over the static axis length n: ceil(log2 n)
rounds, round k combining every element with the running result 2^k places earlier. The
combining step is associative, so the result is torch's sequential scan's:

* cummax / cummin: (value, index) pairs; the later element wins when it is NaN, or when it
  ties or beats a non-NaN earlier value (torch's `cummax_cummin_helper`: the last index of
  equal extremes; the last NaN once one was seen). Positions with nothing 2^k places
  earlier combine with themselves (a no-op), so no identity value is needed and every
  dtype works.
* logcumsumexp: torch's `_log_add_exp_helper` (log1p(exp(min - max)) + max; two equal
  infinities give themselves; NaN propagates), in float64 as torch's CPU kernel accumulates
  (acc_type of float32 is double), cast back once; positions with nothing earlier combine
  with -inf, the identity.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import TensorType, Value

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder


def _type(v: Value | None) -> TensorType:
    assert v is not None and v.type is not None
    return v.type


def _scan_axis(op: str, x: Value, axis: int) -> tuple[int, int]:
    """(normalised axis, its static length); refuses dynamic lengths in one line."""
    t = _type(x)
    if t.shape is None:
        raise OpError(f"{op}: the decomposition needs the input's rank (unknown here)")
    rank = len(t.shape)
    ax = axis + rank if axis < 0 else axis
    n = t.shape[ax]
    if not isinstance(n, int):
        raise OpError(f"{op}: the decomposition needs a static length along axis {axis} "
                      f"(got {n})")
    return ax, n


def _slice(gb: GraphBuilder, x: Value, axis: int, start: int, end: int) -> Value:
    return gb.op("slice", [x], {"starts": [start], "ends": [end], "axes": [axis]})


def _earlier(gb: GraphBuilder, y: Value, axis: int, n: int, step: int) -> Value:
    """y shifted `step` places later along axis, its first `step` positions y's own."""
    return gb.op("concat", [_slice(gb, y, axis, 0, step), _slice(gb, y, axis, 0, n - step)],
                 {"axis": axis})


def _cum_extreme(greater: bool) -> Any:
    name = "cummax" if greater else "cummin"

    def decompose(gb: GraphBuilder, xs: list[Value | None],
                  attrs: dict[str, Any]) -> list[Value]:
        x = xs[0]
        assert x is not None
        axis, n = _scan_axis(name, x, attrs["axis"])
        rank = len(_type(x).shape or ())
        positions = np.arange(n, dtype=np.int64).reshape([n if i == axis else 1
                                                          for i in range(rank)])
        shape = _type(x).shape or ()
        static = all(isinstance(d, int) for d in shape)
        index = gb.op("expand", [gb.constant(positions, "positions", dtype=DType.INT64)]
                      + ([] if static else [gb.op("shape_of", [x])]),
                      {"shape": list(shape)} if static else None)
        value = x
        is_float = _type(x).dtype.is_float
        step = 1
        while step < n:
            v_before = _earlier(gb, value, axis, n, step)
            i_before = _earlier(gb, index, axis, n, step)
            wins = gb.op("greater_equal" if greater else "less_equal", [value, v_before])
            if is_float:  # a NaN wins; nothing beats an earlier NaN but a later one
                before_ok = gb.op("logical_not", [gb.op("isnan", [v_before])])
                wins = gb.op("logical_or", [gb.op("isnan", [value]),
                                            gb.op("logical_and", [wins, before_ok])])
            value = gb.op("where", [wins, value, v_before])
            index = gb.op("where", [wins, index, i_before])
            step *= 2
        if value is x:  # length 1 (or 0): the input itself
            value = gb.op("identity", [x])
        return [value, index]
    return decompose


cummax_decompose = _cum_extreme(True)
cummin_decompose = _cum_extreme(False)


def _log_add_exp(gb: GraphBuilder, a: Value, b: Value) -> Value:
    """torch's _log_add_exp_helper in a's dtype: log1p(exp(min - max)) + max (as
    log(1 + .): the absolute error stays at the dtype's resolution); equal infinities give
    themselves; NaN propagates whatever the runtime's min / max do with it."""
    dtype = _type(a).dtype

    def k(value: float) -> Value:
        return gb.constant(value, "c", dtype=dtype)

    hi, lo = gb.op("maximum", [a, b]), gb.op("minimum", [a, b])
    r = gb.op("add", [gb.op("log", [gb.op("add", [k(1.0), gb.op("exp", [gb.op("sub", [lo, hi])])])]),
                      hi])
    same_infinity = gb.op("logical_and", [gb.op("equal", [a, b]), gb.op("isinf", [a])])
    r = gb.op("where", [same_infinity, a, r])
    nan = gb.op("logical_or", [gb.op("isnan", [a]), gb.op("isnan", [b])])
    return gb.op("where", [nan, k(math.nan), r])


def _shift(gb: GraphBuilder, y: Value, axis: int, rank: int, step: int, reverse: bool,
           fill: float) -> Value:
    """y moved `step` places along axis (toward the end, or the start when reverse), the
    vacated places `fill`."""
    pads = [0] * (2 * rank)
    pads[axis], pads[rank + axis] = (-step, step) if reverse else (step, -step)
    return gb.op("pad", [y], {"pads": pads, "value": fill})


def logcumsumexp_decompose(gb: GraphBuilder, xs: list[Value | None],
                           attrs: dict[str, Any]) -> list[Value]:
    x = xs[0]
    assert x is not None
    if len(xs) > 1 and xs[1] is not None:
        raise OpError("logcumsumexp: the decomposition takes the axis as an attribute, not "
                      "as a tensor input")
    dtype = _type(x).dtype
    if not dtype.is_float:
        raise OpError(f"logcumsumexp: the decomposition takes floating input, got "
                      f"{dtype.short}")
    axis, n = _scan_axis("logcumsumexp", x, attrs["axis"])
    rank = len(_type(x).shape or ())
    reverse = bool(attrs["reverse"])
    y = x if dtype == DType.FLOAT64 else gb.op("cast", [x], {"dtype": DType.FLOAT64})
    step = 1
    while step < n:
        y = _log_add_exp(gb, _shift(gb, y, axis, rank, step, reverse, -math.inf), y)
        step *= 2
    if attrs["exclusive"] and n > 0:
        y = _shift(gb, y, axis, rank, 1, reverse, -math.inf)
    if dtype != DType.FLOAT64:
        return [gb.op("cast", [y], {"dtype": dtype})]
    return [y if y is not x else gb.op("identity", [x])]
