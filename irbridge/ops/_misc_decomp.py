"""Registry decompositions of scans and float-format ops (issue 13): cummax, cummin,
logcumsumexp, frexp and nextafter, written with neutral ops so that the ONNX and StableHLO exporters can emit them.

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

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import TensorType, Value
from irbridge.ops._bessel_decomp import Num, Wide
from irbridge.ops._shapes import promote

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


# == frexp and nextafter without a bit cast ====================================================
#
# ONNX opset 18 has no bitcast, so the exponent of a float is found by exact arithmetic in
# float64: |x| is scaled into [1, 2) by conditional multiplications with powers of two
# (2^k for k = 512, 256, ..., 1 down, then the same up), each exact, the exponent summed
# alongside. Every float64, float32, float16 and bfloat16 value, subnormals included, is
# covered; zero, inf and NaN are set apart with `where`.

@dataclasses.dataclass(frozen=True)
class _Format:
    digits: int            # significand bits, the implicit one included
    tiny: float            # the smallest subnormal
    largest: float         # the largest finite value
    down: tuple[int, ...]  # scalings by 2^-k that bring any finite value below 2
    up: tuple[int, ...]    # scalings by 2^k that bring any nonzero value below 2 to [1, 2)


_POW2 = (512, 256, 128, 64, 32, 16, 8, 4, 2, 1)
_FORMATS = {
    DType.FLOAT64: _Format(53, 2.0 ** -1074, 1.7976931348623157e308, _POW2, (512, *_POW2)),
    DType.FLOAT32: _Format(24, 2.0 ** -149, 3.4028234663852886e38, _POW2[3:], _POW2[2:]),
    DType.BFLOAT16: _Format(8, 2.0 ** -133, 3.3895313892515355e38, _POW2[3:], _POW2[2:]),
    DType.FLOAT16: _Format(11, 2.0 ** -24, 65504.0, _POW2[6:], _POW2[5:]),
}


def _format(op: str, dtype: DType) -> _Format:
    fmt = _FORMATS.get(dtype)
    if fmt is None:
        raise OpError(f"{op}: the decomposition takes float16, bfloat16, float32 or float64, "
                      f"got {dtype.short}")
    return fmt


def _frexp_parts(w: Wide, magnitude: Num, fmt: _Format,
                 exponent: bool = True) -> tuple[Num, Num | None]:
    """(m, e) with magnitude = m * 2^e, m in [0.5, 1), e a float64 integer (None unless
    `exponent`), for finite positive magnitudes (0 and inf give m = magnitude / 2, NaN NaN)."""
    m = magnitude
    e: Num | float = 0.0
    for k in fmt.down:
        big = m >= 2.0 ** k
        m = w.where(big, m * 2.0 ** -k, m)
        e = w.where(big, e + float(k), e) if exponent else e
    for k in fmt.up:
        small = m < 2.0 ** (1 - k)
        m = w.where(small, m * 2.0 ** k, m)
        e = w.where(small, e - float(k), e) if exponent else e
    return m * 0.5, (e + 1.0 if isinstance(e, Num) else None)


def _signed(w: Wide, magnitude: Num, negative: Value) -> Num:
    """|magnitude| with the sign `negative` (by a product, so that zeros keep it)."""
    return w.fn("abs", magnitude) * w.where(negative, -1.0, 1.0)


def _sign_bit(w: Wide, x: Num) -> Value:
    """x < 0 or x is -0.0 (1/x = -inf)."""
    negative_zero = w.all(x.eq(0.0), (1.0 / x) < 0.0)
    return w.any(x < 0.0, negative_zero)


def _wide(gb: GraphBuilder, w: Wide, x: Value) -> Num:
    dtype = _type(x).dtype
    return Num(w, x if dtype == DType.FLOAT64 else gb.op("cast", [x], {"dtype": DType.FLOAT64}))


def _narrow(gb: GraphBuilder, x: Num, dtype: DType) -> Value:
    return x.v if dtype == DType.FLOAT64 else gb.op("cast", [x.v], {"dtype": dtype})


def frexp_decompose(gb: GraphBuilder, xs: list[Value | None],
                    attrs: dict[str, Any]) -> list[Value]:
    """mantissa in [0.5, 1) with x's sign (-0.0 kept), exponent int32; 0, +-inf and NaN
    give themselves and exponent 0 (C frexp, torch)."""
    assert xs[0] is not None
    dtype = _type(xs[0]).dtype
    fmt = _format("frexp", dtype)
    w = Wide(gb)
    x = _wide(gb, w, xs[0])
    m, e = _frexp_parts(w, w.fn("abs", x), fmt)
    assert e is not None
    mantissa = _signed(w, m, _sign_bit(w, x))
    special = w.any(x.eq(0.0), w.isinf(x), w.isnan(x))
    exponent = w.where(special, 0.0, e)
    return [_narrow(gb, mantissa, dtype), gb.op("cast", [exponent.v], {"dtype": DType.INT32})]


def nextafter_decompose(gb: GraphBuilder, xs: list[Value | None],
                        attrs: dict[str, Any]) -> list[Value]:
    """C nextafter in the result's dtype: a moved by one unit in the last place toward b
    (the ulp above |a| when moving away from zero; below a power of two, toward zero, half
    of it; never below the smallest subnormal); b where a == b; NaN if either is; from 0
    the smallest subnormal, from +-inf the largest finite value; a zero result keeps a's
    sign (nextafter(-tiny, 1) = -0.0)."""
    a_in, b_in = xs[0], xs[1]
    assert a_in is not None and b_in is not None
    dtype = promote([_type(a_in), _type(b_in)], "nextafter")  # the node's result type
    fmt = _format("nextafter", dtype)
    w = Wide(gb)
    a, b = _wide(gb, w, a_in), _wide(gb, w, b_in)
    up = b > a
    m, _ = _frexp_parts(w, w.fn("abs", a), fmt, exponent=False)
    power = w.fn("abs", a) / (m * 2.0)  # 2^(e - 1) exactly (2^e may overflow)
    above = w.op("maximum", (power * 2.0 ** (1 - fmt.digits)).v, w.value(fmt.tiny))
    below = w.where(m.eq(0.5), w.op("maximum", (above * 0.5).v, w.value(fmt.tiny)), above)
    away = gb.op("not_equal", [up, a < 0.0])
    step = w.where(away, above, below)
    r = a + w.where(up, step, -step)
    r = w.where(a.eq(0.0), w.where(up, fmt.tiny, -fmt.tiny), r)
    r = w.where(w.isinf(a), w.where(a > 0.0, fmt.largest, -fmt.largest), r)
    same = a.eq(b)
    r = w.where(same, b, r)
    r = w.where(w.any(w.isnan(a), w.isnan(b)), math.nan, r)
    negative = w.any(r < 0.0, w.all(r.eq(0.0), w.gb.op("where", [same, _sign_bit(w, b),
                                                                 a < 0.0])))
    return [_narrow(gb, _signed(w, r, negative), dtype)]
