"""Registry decompositions of scans and float-format ops (issue 13): cummax, cummin,
logcumsumexp, frexp, nextafter, igamma and igammac, written with neutral ops so that the ONNX and StableHLO exporters can emit them.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Graph, TensorType, Value
from irbridge.ops._bessel_decomp import Num, Wide, polevl
from irbridge.ops._shapes import broadcast_shapes, promote

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
    _format("logcumsumexp", dtype)  # refuses complex and exotic floats
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
    """The float format the op computes in: its own, float64 for integers and bools (as
    numpy does, whose result the registry's reference casts back)."""
    fmt = _FORMATS.get(dtype)
    if fmt is None and (dtype.is_integer or dtype == DType.BOOL):
        return _FORMATS[DType.FLOAT64]
    if fmt is None:
        raise OpError(f"{op}: the decomposition takes float16, bfloat16, float32, float64, "
                      f"integer or bool input, got {dtype.short}")
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


# == igamma, igammac: the regularized incomplete gamma functions ==============================
#
# torch's calc_igamma / calc_igammac (aten/src/ATen/native/Math.h, from SciPy's Cephes igam.c),
# in float64 with the double-precision constants: the boundary values first, then the uniform
# asymptotic expansion where a is large and x near a (DLMF 8.12.3/8.12.4), the power series
# (DLMF 8.11.4), the series for the upper function (DLMF 8.7.3) or the continued fraction
# (DLMF 8.9.2), each where torch uses it. The three iterations keep torch's stopping rule per
# element (a term below machine epsilon relative to the sum, at most 2,000 iterations): each is
# a `loop` over the whole tensor that freezes an element once it has converged and stops when
# every element it serves has. The asymptotic expansion's 25 x 25 coefficient table is summed
# in full for each of its 25 terms (torch stops adding a term's coefficients once they fall
# below machine epsilon relative to the term: the rest change it by less than that) with
# torch's stopping rule over the terms. std::lgamma (for a > 0 only here) is the Lanczos sum
# torch's own lanczos_sum_expg_scaled uses, log(sum) + (a - 1/2)(log(a + g - 1/2) - 1), within
# 1e-15 absolute of the C library's; erfc is Cephes' (as in SciPy).

_MACHEP = 1.11022302462515654042e-16
_MAXLOG = 7.09782712893383996843e2
_LANCZOS_G = 6.024680040776729583740234375
_IGAM_MAXITER = 2000
_BIG = 4.503599627370496e15
_BIGINV = 2.22044604925031308085e-16
_PI_FLOAT = 3.1415927410125732  # c10::pi<float>, which torch's asymptotic series uses

# Cephes erf / erfc (ndtr.c): erfc = exp(-x^2) P(x) / Q(x) on [1, 8), R / S beyond; erf =
# x T(x^2) / U(x^2) below 1 (Q, S, U with an implicit leading 1)
_ERFC_P = (
    2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
    4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
    9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2,
)
_ERFC_Q = (
    1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
    9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
    1.65666309194161350182e3, 5.57535340817727675546e2,
)
_ERFC_R = (
    5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
    6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0,
)
_ERFC_S = (
    1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
    1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0,
)
_ERF_T = (
    9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
    7.00332514112805075473e3, 5.55923013010394962768e4,
)
_ERF_U = (
    1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
    2.26290000613890934246e4, 4.92673942608635921086e4,
)
_LANCZOS_NUM = (
    0.006061842346248906525783753964555936883222, 0.5098416655656676188125178644804694509993,
    19.51992788247617482847860966235652136208, 449.9445569063168119446858607650988409623,
    6955.999602515376140356310115515198987526, 75999.29304014542649875303443598909137092,
    601859.6171681098786670226533699352302507, 3481712.15498064590882071018964774556468,
    14605578.08768506808414169982791359218571, 43338889.32467613834773723740590533316085,
    86363131.28813859145546927288977868422342, 103794043.1163445451906271053616070238554,
    56906521.91347156388090791033559122686859,
)
_LANCZOS_DENOM = (
    1., 66., 1925., 32670., 357423., 2637558., 13339535., 45995730., 105258076., 150917976.,
    120543840., 39916800., 0.,
)
_IGAM_D = (
    -3.3333333333333333e-1, 8.3333333333333333e-2, -1.4814814814814815e-2, 1.1574074074074074e-3,
    3.527336860670194e-4, -1.7875514403292181e-4, 3.9192631785224378e-5, -2.1854485106799922e-6,
    -1.85406221071516e-6, 8.296711340953086e-7, -1.7665952736826079e-7, 6.7078535434014986e-9,
    1.0261809784240308e-8, -4.3820360184533532e-9, 9.1476995822367902e-10, -2.551419399494625e-11,
    -5.8307721325504251e-11, 2.4361948020667416e-11, -5.0276692801141756e-12,
    1.1004392031956135e-13, 3.3717632624009854e-13, -1.3923887224181621e-13,
    2.8534893807047443e-14, -5.1391118342425726e-16, -1.9752288294349443e-15,
    -1.8518518518518519e-3, -3.4722222222222222e-3, 2.6455026455026455e-3, -9.9022633744855967e-4,
    2.0576131687242798e-4, -4.0187757201646091e-7, -1.8098550334489978e-5, 7.6491609160811101e-6,
    -1.6120900894563446e-6, 4.6471278028074343e-9, 1.378633446915721e-7, -5.752545603517705e-8,
    1.1951628599778147e-8, -1.7543241719747648e-11, -1.0091543710600413e-9,
    4.1627929918425826e-10, -8.5639070264929806e-11, 6.0672151016047586e-14,
    7.1624989648114854e-12, -2.9331866437714371e-12, 5.9966963656836887e-13,
    -2.1671786527323314e-16, -4.9783399723692616e-14, 2.0291628823713425e-14,
    -4.13125571381061e-15, 4.1335978835978836e-3, -2.6813271604938272e-3, 7.7160493827160494e-4,
    2.0093878600823045e-6, -1.0736653226365161e-4, 5.2923448829120125e-5, -1.2760635188618728e-5,
    3.4235787340961381e-8, 1.3721957309062933e-6, -6.298992138380055e-7, 1.4280614206064242e-7,
    -2.0477098421990866e-10, -1.4092529910867521e-8, 6.228974084922022e-9, -1.3670488396617113e-9,
    9.4283561590146782e-13, 1.2872252400089318e-10, -5.5645956134363321e-11,
    1.1975935546366981e-11, -4.1689782251838635e-15, -1.0940640427884594e-12,
    4.6622399463901357e-13, -9.905105763906906e-14, 1.8931876768373515e-17,
    8.8592218725911273e-15, 6.4943415637860082e-4, 2.2947209362139918e-4, -4.6918949439525571e-4,
    2.6772063206283885e-4, -7.5618016718839764e-5, -2.3965051138672967e-7, 1.1082654115347302e-5,
    -5.6749528269915966e-6, 1.4230900732435884e-6, -2.7861080291528142e-11,
    -1.6958404091930277e-7, 8.0994649053880824e-8, -1.9111168485973654e-8, 2.3928620439808118e-12,
    2.0620131815488798e-9, -9.4604966618551322e-10, 2.1541049775774908e-10,
    -1.388823336813903e-14, -2.1894761681963939e-11, 9.7909989511716851e-12,
    -2.1782191880180962e-12, 6.2088195734079014e-17, 2.126978363279737e-13,
    -9.3446887915174333e-14, 2.0453671226782849e-14, -8.618882909167117e-4, 7.8403922172006663e-4,
    -2.9907248030319018e-4, -1.4638452578843418e-6, 6.6414982154651222e-5, -3.9683650471794347e-5,
    1.1375726970678419e-5, 2.5074972262375328e-10, -1.6954149536558306e-6, 8.9075075322053097e-7,
    -2.2929348340008049e-7, 2.956794137544049e-11, 2.8865829742708784e-8, -1.4189739437803219e-8,
    3.4463580499464897e-9, -2.3024517174528067e-13, -3.9409233028046405e-10,
    1.8602338968504502e-10, -4.356323005056618e-11, 1.2786001016296231e-15,
    4.6792750266579195e-12, -2.1492464706134829e-12, 4.9088156148096522e-13,
    -6.3385914848915603e-18, -5.0453320690800944e-14, -3.3679855336635815e-4,
    -6.9728137583658578e-5, 2.7727532449593921e-4, -1.9932570516188848e-4, 6.7977804779372078e-5,
    1.419062920643967e-7, -1.3594048189768693e-5, 8.0184702563342015e-6, -2.2914811765080952e-6,
    -3.252473551298454e-10, 3.4652846491085265e-7, -1.8447187191171343e-7, 4.8240967037894181e-8,
    -1.7989466721743515e-14, -6.3061945000135234e-9, 3.1624176287745679e-9,
    -7.8409242536974293e-10, 5.1926791652540407e-15, 9.3589442423067836e-11,
    -4.5134262161632782e-11, 1.0799129993116827e-11, -3.661886712685252e-17,
    -1.210902069055155e-12, 5.6807435849905643e-13, -1.3249659916340829e-13,
    5.3130793646399222e-4, -5.9216643735369388e-4, 2.7087820967180448e-4, 7.9023532326603279e-7,
    -8.1539693675619688e-5, 5.6116827531062497e-5, -1.8329116582843376e-5, -3.0796134506033048e-9,
    3.4651553688036091e-6, -2.0291327396058604e-6, 5.7887928631490037e-7, 2.338630673826657e-13,
    -8.8286007463304835e-8, 4.7435958880408128e-8, -1.2545415020710382e-8, 8.6496488580102925e-14,
    1.6846058979264063e-9, -8.5754928235775947e-10, 2.1598224929232125e-10,
    -7.6132305204761539e-16, -2.6639822008536144e-11, 1.3065700536611057e-11,
    -3.1799163902367977e-12, 4.7109761213674315e-18, 3.6902800842763467e-13,
    3.4436760689237767e-4, 5.1717909082605922e-5, -3.3493161081142236e-4, 2.812695154763237e-4,
    -1.0976582244684731e-4, -1.2741009095484485e-7, 2.7744451511563644e-5, -1.8263488805711333e-5,
    5.7876949497350524e-6, 4.9387589339362704e-10, -1.0595367014026043e-6, 6.1667143761104075e-7,
    -1.7562973359060462e-7, -1.2974473287015439e-12, 2.695423606288966e-8, -1.4578352908731271e-8,
    3.887645959386175e-9, -3.8810022510194121e-17, -5.3279941738772867e-10,
    2.7437977643314845e-10, -6.9957960920705679e-11, 2.5899863874868481e-17,
    8.8566890996696381e-12, -4.403168815871311e-12, 1.0865561947091654e-12,
    -6.5262391859530942e-4, 8.3949872067208728e-4, -4.3829709854172101e-4, -6.969091458420552e-7,
    1.6644846642067548e-4, -1.2783517679769219e-4, 4.6299532636913043e-5, 4.5579098679227077e-9,
    -1.0595271125805195e-5, 6.7833429048651666e-6, -2.1075476666258804e-6,
    -1.7213731432817145e-11, 3.7735877416110979e-7, -2.1867506700122867e-7, 6.2202288040189269e-8,
    6.5977038267330006e-16, -9.5903864974256858e-9, 5.2132144922808078e-9, -1.3991589583935709e-9,
    5.382058999060575e-16, 1.9484714275467745e-10, -1.0127287556389682e-10,
    2.6077347197254926e-11, -5.0904186999932993e-18, -3.3721464474854592e-12,
    -5.9676129019274625e-4, -7.2048954160200106e-5, 6.7823088376673284e-4, -6.4014752602627585e-4,
    2.7750107634328704e-4, 1.8197008380465151e-7, -8.4795071170685032e-5, 6.105192082501531e-5,
    -2.1073920183404862e-5, -8.8585890141255994e-10, 4.5284535953805377e-6,
    -2.8427815022504408e-6, 8.7082341778646412e-7, 3.6886101871706965e-12, -1.5344695190702061e-7,
    8.862466778790695e-8, -2.5184812301826817e-8, -1.0225912098215092e-14, 3.8969470758154777e-9,
    -2.1267304792235635e-9, 5.7370135528051385e-10, -1.887749850169741e-19,
    -8.0931538694657866e-11, 4.2382723283449199e-11, -1.1002224534207726e-11,
    1.3324454494800656e-3, -1.9144384985654775e-3, 1.1089369134596637e-3, 9.932404122642299e-7,
    -5.0874501293093199e-4, 4.2735056665392884e-4, -1.6858853767910799e-4, -8.1301893922784998e-9,
    4.5284402370562147e-5, -3.127053674781734e-5, 1.044986828530338e-5, 4.8435226265680926e-11,
    -2.1482565873456258e-6, 1.329369701097492e-6, -4.0295693092101029e-7, -1.7567877666323291e-13,
    7.0145043163668257e-8, -4.040787734999483e-8, 1.1474026743371963e-8, 3.9642746853563325e-18,
    -1.7804938269892714e-9, 9.7480262548731646e-10, -2.6405338676507616e-10,
    5.794875163403742e-18, 3.7647749553543836e-11, 1.579727660730835e-3, 1.6251626278391582e-4,
    -2.0633421035543276e-3, 2.1389686185689098e-3, -1.0108559391263003e-3, -3.9912705529919201e-7,
    3.6235025084764691e-4, -2.8143901463712154e-4, 1.0449513336495887e-4, 2.1211418491830297e-9,
    -2.5779417251947842e-5, 1.7281818956040463e-5, -5.6413773872904282e-6,
    -1.1024320105776174e-11, 1.1223224418895175e-6, -6.8693396379526735e-7, 2.0653236975414887e-7,
    4.6714772409838506e-14, -3.5609886164949055e-8, 2.0470855345905963e-8, -5.8091738633283358e-9,
    -1.332821287582869e-16, 9.0354604391335133e-10, -4.9598782517330834e-10,
    1.3481607129399749e-10, -4.0725121195140166e-3, 6.4033628338080698e-3, -4.0410161081676618e-3,
    -2.183732802866233e-6, 2.1740441801254639e-3, -1.9700440518418892e-3, 8.3595469747962458e-4,
    1.9445447567109655e-8, -2.5779387120421696e-4, 1.9009987368139304e-4, -6.7696499937438965e-5,
    -1.4440629666426572e-10, 1.5712512518742269e-5, -1.0304008744776893e-5, 3.304517767401387e-6,
    7.9829760242325709e-13, -6.4097794149313004e-7, 3.8894624761300056e-7, -1.1618347644948869e-7,
    -2.816808630596451e-15, 1.9878012911297093e-8, -1.1407719956357511e-8, 3.2355857064185555e-9,
    4.1759468293455945e-20, -5.0423112718105824e-10, -5.9475779383993003e-3,
    -5.4016476789260452e-4, 8.7910413550767898e-3, -9.8576315587856125e-3, 5.0134695031021538e-3,
    1.2807521786221875e-6, -2.0626019342754683e-3, 1.7109128573523058e-3, -6.7695312714133799e-4,
    -6.9011545676562133e-9, 1.8855128143995902e-4, -1.3395215663491969e-4, 4.6263183033528039e-5,
    4.0034230613321351e-11, -1.0255652921494033e-5, 6.612086372797651e-6, -2.0913022027253008e-6,
    -2.0951775649603837e-13, 3.9756029041993247e-7, -2.3956211978815887e-7, 7.1182883382145864e-8,
    8.925574873053455e-16, -1.2101547235064676e-8, 6.9350618248334386e-9, -1.9661464453856102e-9,
    1.7402027787522711e-2, -2.9527880945699121e-2, 2.0045875571402799e-2, 7.0289515966903407e-6,
    -1.2375421071343148e-2, 1.1976293444235254e-2, -5.4156038466518525e-3, -6.3290893396418616e-8,
    1.8855118129005065e-3, -1.473473274825001e-3, 5.5515810097708387e-4, 5.2406834412550662e-10,
    -1.4357913535784836e-4, 9.9181293224943297e-5, -3.3460834749478311e-5,
    -3.5755837291098993e-12, 7.1560851960630076e-6, -4.5516802628155526e-6, 1.4236576649271475e-6,
    1.8803149082089664e-14, -2.6623403898929211e-7, 1.5950642189595716e-7, -4.7187514673841102e-8,
    -6.5107872958755177e-17, 7.9795091026746235e-9, 3.0249124160905891e-2, 2.4817436002649977e-3,
    -4.9939134373457022e-2, 5.9915643009307869e-2, -3.2483207601623391e-2, -5.7212968652103441e-6,
    1.5085251778569354e-2, -1.3261324005088445e-2, 5.5515262632426148e-3, 3.0263182257030016e-8,
    -1.7229548406756723e-3, 1.2893570099929637e-3, -4.6845138348319876e-4, -1.830259937893045e-10,
    1.1449739014822654e-4, -7.7378565221244477e-5, 2.5625836246985201e-5, 1.0766165333192814e-12,
    -5.3246809282422621e-6, 3.349634863064464e-6, -1.0381253128684018e-6, -5.608909920621128e-15,
    1.9150821930676591e-7, -1.1418365800203486e-7, 3.3654425209171788e-8, -9.9051020880159045e-2,
    1.7954011706123486e-1, -1.2989606383463778e-1, -3.1478872752284357e-5, 9.0510635276848131e-2,
    -9.2828824411184397e-2, 4.4412112839877808e-2, 2.7779236316835888e-7, -1.7229543805449697e-2,
    1.4182925050891573e-2, -5.6214161633747336e-3, -2.39598509186381e-9, 1.6029634366079908e-3,
    -1.1606784674435773e-3, 4.1001337768153873e-4, 1.8365800754090661e-11, -9.5844256563655903e-5,
    6.3643062337764708e-5, -2.076250624489065e-5, -1.1806020912804483e-13, 4.2131808239120649e-6,
    -2.6262241337012467e-6, 8.0770620494930662e-7, 6.0125912123632725e-16, -1.4729737374018841e-7,
    -1.9994542198219728e-1, -1.5056113040026424e-2, 3.6470239469348489e-1, -4.6435192311733545e-1,
    2.6640934719197893e-1, 3.4038266027147191e-5, -1.3784338709329624e-1, 1.276467178337056e-1,
    -5.6213828755200985e-2, -1.753150885483011e-7, 1.9235592956768113e-2, -1.5088821281095315e-2,
    5.7401854451350123e-3, 1.0622382710310225e-9, -1.5335082692563998e-3, 1.0819320643228214e-3,
    -3.7372510193945659e-4, -6.6170909729031985e-12, 8.4263617380909628e-5,
    -5.5150706827483479e-5, 1.7769536448348069e-5, 3.8827923210205533e-14, -3.53513697488768e-6,
    2.1865832130045269e-6, -6.6812849447625594e-7, 7.2438608504029431e-1, -1.3918010932653375,
    1.0654143352413968, 1.876173868950258e-4, -8.2705501176152696e-1, 8.9352433347828414e-1,
    -4.4971003995291339e-1, -1.6107401567546652e-6, 1.9235590165271091e-1, -1.6597702160042609e-1,
    6.8882222681814333e-2, 1.3910091724608687e-8, -2.146911561508663e-2, 1.6228980898865892e-2,
    -5.9796016172584256e-3, -1.1287469112826745e-10, 1.5167451119784857e-3,
    -1.0478634293553899e-3, 3.5539072889126421e-4, 8.1704322111801517e-13, -7.7773013442452395e-5,
    5.0291413897007722e-5, -1.6035083867000518e-5, 1.2469354315487605e-14, 3.1369106244517615e-6,
    1.6668949727276811, 1.165462765994632e-1, -3.3288393225018906, 4.4692325482864037,
    -2.6977693045875807, -2.600667859891061e-4, 1.5389017615694539, -1.4937962361134612,
    6.8881964633233148e-1, 1.3077482004552385e-6, -2.5762963325596288e-1, 2.1097676102125449e-1,
    -8.3714408359219882e-2, -7.7920428881354753e-9, 2.4267923064833599e-2, -1.7813678334552311e-2,
    6.3970330388900056e-3, 4.9430807090480523e-11, -1.5554602758465635e-3, 1.0561196919903214e-3,
    -3.5277184460472902e-4, 9.3002334645022459e-14, 7.5285855026557172e-5, -4.8186515569156351e-5,
    1.5227271505597605e-5, -6.6188298861372935, 1.3397985455142589e+1, -1.0789350606845146e+1,
    -1.4352254537875018e-3, 9.2333694596189809, -1.0456552819547769e+1, 5.5105526029033471,
    1.2024439690716742e-5, -2.5762961164755816, 2.3207442745387179, -1.0045728797216284,
    -1.0207833290021914e-7, 3.3975092171169466e-1, -2.6720517450757468e-1, 1.0235252851562706e-1,
    8.4329730484871625e-10, -2.7998284958442595e-2, 2.0066274144976813e-2, -7.0554368915086242e-3,
    1.9402238183698188e-12, 1.6562888105449611e-3, -1.1082898580743683e-3, 3.654545161310169e-4,
    -5.1290032026971794e-11, -7.6340103696869031e-5, -1.7112706061976095e+1, -1.1208044642899116,
    3.7131966511885444e+1, -5.2298271025348962e+1, 3.3058589696624618e+1, 2.4791298976200222e-3,
    -2.061089403411526e+1, 2.088672775145582e+1, -1.0045703956517752e+1, -1.2238783449063012e-5,
    4.0770134274221141, -3.473667358470195, 1.4329352617312006, 7.1359914411879712e-8,
    -4.4797257159115612e-1, 3.4112666080644461e-1, -1.2699786326594923e-1,
    -2.8953677269081528e-10, 3.3125776278259863e-2, -2.3274087021036101e-2, 8.0399993503648882e-3,
    -1.177805216235265e-9, -1.8321624891071668e-3, 1.2108282933588665e-3, -3.9479941246822517e-4,
    7.389033153567425e+1, -1.5680141270402273e+2, 1.322177542759164e+2, 1.3692876877324546e-2,
    -1.2366496885920151e+2, 1.4620689391062729e+2, -8.0365587724865346e+1, -1.1259851148881298e-4,
    4.0770132196179938e+1, -3.8210340013273034e+1, 1.719522294277362e+1, 9.3519707955168356e-7,
    -6.2716159907747034, 5.1168999071852637, -2.0319658112299095, -4.9507215582761543e-9,
    5.9626397294332597e-1, -4.4220765337238094e-1, 1.6079998700166273e-1, -2.4733786203223402e-8,
    -4.0307574759979762e-2, 2.7849050747097869e-2, -9.4751858992054221e-3, 6.419922235909132e-6,
    2.1250180774699461e-3, 2.1216837098382522e+2, 1.3107863022633868e+1, -4.9698285932871748e+2,
    7.3121595266969204e+2, -4.8213821720890847e+2, -2.8817248692894889e-2, 3.2616720302947102e+2,
    -3.4389340280087117e+2, 1.7195193870816232e+2, 1.4038077378096158e-4, -7.52594195897599e+1,
    6.651969984520934e+1, -2.8447519748152462e+1, -7.613702615875391e-7, 9.5402237105304373,
    -7.5175301113311376, 2.8943997568871961, -4.6612194999538201e-7, -8.0615149598794088e-1,
    5.8483006570631029e-1, -2.0845408972964956e-1, 1.4765818959305817e-4, 5.1000433863753019e-2,
    -3.3066252141883665e-2, 1.5109265210467774e-2, -9.8959643098322368e+2, 2.1925555360905233e+3,
    -1.9283586782723356e+3, -1.5925738122215253e-1, 1.9569985945919857e+3, -2.4072514765081556e+3,
    1.3756149959336496e+3, 1.2920735237496668e-3, -7.525941715948055e+2, 7.3171668742208716e+2,
    -3.4137023466220065e+2, -9.9857390260608043e-6, 1.3356313181291573e+2, -1.1276295161252794e+2,
    4.6310396098204458e+1, -7.9237387133614756e-6, -1.4510726927018646e+1, 1.1111771248100563e+1,
    -4.1690817945270892, 3.1008219800117808e-3, 1.1220095449981468, -7.6052379926149916e-1,
    3.6262236505085254e-1, 2.216867741940747e-1, 4.8683443692930507e-1,
)


def _log1p(w: Wide, t: Num) -> Num:
    """log(1 + t) to a few ulp for small t: log(u) t / (u - 1), u = 1 + t (Goldberg)."""
    u = t + 1.0
    return w.where(u.eq(1.0), t, w.fn("log", u) * t / (u - 1.0))


def _expm1(w: Wide, y: Num) -> Num:
    """exp(y) - 1 to a few ulp for small y: (u - 1) y / log(u), u = exp(y) (Kahan)."""
    u = w.fn("exp", y)
    out = w.where(u.eq(1.0), y, (u - 1.0) * y / w.fn("log", u))
    out = w.where((u - 1.0).eq(-1.0), -1.0, out)
    return w.where(w.isinf(u), u, out)


def _erfc(w: Wide, z: Num) -> Num:
    """Cephes erfc (accurate relative to the result in both tails)."""
    ax = w.fn("abs", z)
    zz = z * z
    small = 1.0 - z * polevl(zz, _ERF_T) / polevl(zz, _ERF_U)
    e = w.fn("exp", -zz)
    tail = w.where(ax < 8.0, e * polevl(ax, _ERFC_P) / polevl(ax, _ERFC_Q),
                   e * polevl(ax, _ERFC_R) / polevl(ax, _ERFC_S))
    tail = w.where(-zz < -_MAXLOG, 0.0, tail)
    tail = w.where(z < 0.0, 2.0 - tail, tail)
    return w.where(ax < 1.0, small, tail)


def _lanczos_sum_expg_scaled(w: Wide, x: Num) -> Num:
    """torch's ratevl of the Lanczos sum: in x up to |x| = 1, in 1/x beyond."""
    near = polevl(x, _LANCZOS_NUM) / polevl(x, _LANCZOS_DENOM)
    y = 1.0 / x
    far = polevl(y, _LANCZOS_NUM[::-1]) / polevl(y, _LANCZOS_DENOM[::-1])
    return w.where(w.fn("abs", x) > 1.0, far, near)


def _lgamma_positive(w: Wide, a: Num) -> Num:
    return w.fn("log", _lanczos_sum_expg_scaled(w, a)) \
        + (a - 0.5) * (w.fn("log", a + (_LANCZOS_G - 0.5)) - 1.0)


def _igam_fac(w: Wide, a: Num, x: Num) -> Num:
    """torch's _igam_helper_fac: x^a exp(-x) / Gamma(a)."""
    direct = a * w.fn("log", x) - x - _lgamma_positive(w, a)
    direct = w.where(direct < -_MAXLOG, 0.0, w.fn("exp", direct))
    fac = a + _LANCZOS_G - 0.5
    res = w.fn("sqrt", fac / math.e) / _lanczos_sum_expg_scaled(w, a)
    moderate = res * (w.fn("exp", a - x) * w.op("pow", (x / fac).v, a.v))
    numfac = (x - a - _LANCZOS_G + 0.5) / fac
    large = res * w.fn("exp", a * (_log1p(w, numfac) - numfac) + x * (0.5 - _LANCZOS_G) / fac)
    lanczos = w.where(w.all(a < 200.0, x < 200.0), moderate, large)
    return w.where(w.fn("abs", a - x) > 0.4 * w.fn("abs", a), direct, lanczos)


Step = Callable[[Wide, list[Num]], tuple[list[Num], Value]]


def _iterate(gb: GraphBuilder, state: list[Num], active: Value, step: Step,
             max_iterations: int) -> list[Num]:
    """Run `step` (state -> new state, converged) as a `loop`: an element's state is frozen
    once it converged (or from the start where `active` is false); the loop stops when no
    element is left or after max_iterations."""
    from irbridge.builder import GraphBuilder  # a cycle at import time: builder imports ops

    w = state[0].ctx
    done = gb.op("logical_not", [active])
    body = Graph("body")
    bb = GraphBuilder(body)
    body.add_input("i", TensorType(DType.INT64, ()))
    body.add_input("cond", TensorType(DType.BOOL, ()))
    bw = Wide(bb)
    inner = [Num(bw, body.add_input(f"s{i}", _type(s.v))) for i, s in enumerate(state)]
    inner_done = body.add_input("done", _type(done))
    new, converged = step(bw, inner)
    frozen = [bw.where(inner_done, old, n) for old, n in zip(inner, new, strict=True)]
    now_done = bb.op("logical_or", [inner_done, converged])
    body.set_outputs([_any_left(bb, now_done), *(f.v for f in frozen), now_done])
    limit = gb.constant(np.array(max_iterations, np.int64), "limit", dtype=DType.INT64)
    outs = gb.op_multi("loop", [limit, _any_left(gb, done), *(s.v for s in state), done],
                       {"body": body}, num_outputs=len(state) + 1)
    return [Num(w, v) for v in outs[:-1]]


def _any_left(gb: GraphBuilder, done: Value) -> Value:
    """A scalar bool: some element is not done."""
    left = gb.op("cast", [gb.op("logical_not", [done])], {"dtype": DType.FLOAT32})
    most = gb.op("reduce_max", [left], {"axes": [], "keepdims": False})
    return gb.op("greater", [most, gb.constant(0.5, "half", dtype=DType.FLOAT32)])


def _igam_series(w: Wide, a: Num, x: Num, active: Value) -> Num:
    """torch's _igam_helper_series: the power series of the lower function."""
    ax = _igam_fac(w, a, x)
    active = w.all(active, w.gb.op("logical_not", [ax.eq(0.0)]))

    def step(v: Wide, s: list[Num]) -> tuple[list[Num], Value]:
        r, c, ans, aa, xx = s
        r = r + 1.0
        c = c * (xx / r)
        ans = ans + c
        return [r, c, ans, aa, xx], c <= ans * _MACHEP

    one = w.where(a.eq(a), 1.0, 1.0)  # ones of the broadcast shape
    _, _, ans, _, _ = _iterate(w.gb, [a, one, one, a, x], active, step, _IGAM_MAXITER)
    return w.where(ax.eq(0.0), 0.0, ans * ax / a)


def _igamc_series(w: Wide, a: Num, x: Num, active: Value) -> Num:
    """torch's _igamc_helper_series: the series of the upper function for small x."""
    def step(v: Wide, s: list[Num]) -> tuple[list[Num], Value]:
        n, fac, total, aa, xx = s
        fac = fac * (-xx / n)
        term = fac / (aa + n)
        total = total + term
        return [n + 1.0, fac, total, aa, xx], v.fn("abs", term) <= v.fn("abs", total) * _MACHEP

    one = w.where(a.eq(a), 1.0, 1.0)
    _, _, total, _, _ = _iterate(w.gb, [one, one, one * 0.0, a, x], active, step,
                                 _IGAM_MAXITER - 1)
    logx = w.fn("log", x)
    term = -_expm1(w, a * logx - _lgamma_positive(w, a + 1.0))
    return term - w.fn("exp", a * logx - _lgamma_positive(w, a)) * total


def _igamc_fraction(w: Wide, a: Num, x: Num, active: Value) -> Num:
    """torch's _igamc_helper_continued_fraction (upper function, x > 1.1)."""
    ax = _igam_fac(w, a, x)
    active = w.all(active, w.gb.op("logical_not", [ax.eq(0.0)]))
    y = 1.0 - a
    z = x + y + 1.0
    zero = a * 0.0
    pkm1 = x + 1.0
    qkm1 = z * x
    ans = pkm1 / qkm1
    one = w.where(a.eq(a), 1.0, 1.0)

    def step(v: Wide, s: list[Num]) -> tuple[list[Num], Value]:
        y, z, c, pkm2, pkm1, qkm2, qkm1, ans = s
        c = c + 1.0
        y = y + 1.0
        z = z + 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        nonzero = v.gb.op("logical_not", [qk.eq(0.0)])
        r = pk / qk
        t = v.where(nonzero, v.fn("abs", (ans - r) / r), 1.0)
        ans = v.where(nonzero, r, ans)
        pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
        big = v.fn("abs", pk) > _BIG
        pkm2, pkm1, qkm2, qkm1 = (v.where(big, p * _BIGINV, p) for p in (pkm2, pkm1, qkm2, qkm1))
        return [y, z, c, pkm2, pkm1, qkm2, qkm1, ans], t <= _MACHEP

    state = [y, z, zero, one, pkm1, x, qkm1, ans]
    *_, ans = _iterate(w.gb, state, active, step, _IGAM_MAXITER)
    return w.where(ax.eq(0.0), 0.0, ans * ax)


def _igam_asymptotic(w: Wide, a: Num, x: Num, lower: bool) -> Num:
    """torch's _igam_helper_asymptotic_series (DLMF 8.12.3 / 8.12.4)."""
    sgn = -1.0 if lower else 1.0
    lam = x / a
    sigma = (x - a) / a
    eta0 = w.fn("sqrt", -2.0 * (_log1p(w, sigma) - sigma))
    eta = w.where(lam > 1.0, eta0, w.where(lam < 1.0, -eta0, 0.0))
    res = 0.5 * _erfc(w, sgn * eta * w.fn("sqrt", a / 2.0))
    gb = w.gb
    # every coefficient c_k = sum_n d[k][n] eta^n at once: [eta^0 .. eta^24] @ d^T
    powers = w.op("pow", gb.op("unsqueeze", [eta.v], {"axes": [-1]}),
                  gb.constant(np.arange(25, dtype=np.float64), "n", dtype=DType.FLOAT64))
    table = np.array(_IGAM_D, dtype=np.float64).reshape(25, 25).T
    coefficients = gb.op("matmul", [powers.v, gb.constant(table, "d", dtype=DType.FLOAT64)])
    def coefficient(k: int) -> Num:
        return Num(w, gb.op("squeeze", [gb.op("slice", [coefficients], {
            "starts": [k], "ends": [k + 1], "axes": [-1]})], {"axes": [-1]}))

    total = coefficient(0)  # the first term (afac = 1) is always taken
    old = w.fn("abs", total)
    stopped = old < w.fn("abs", total) * _MACHEP
    afac = 1.0 / a
    for k in range(1, 25):
        term = coefficient(k) * afac
        size = w.fn("abs", term)
        stop = w.any(stopped, size > old)  # the terms started to grow: stop before this one
        total = w.where(stop, total, total + term)
        stopped = w.any(stop, size < w.fn("abs", total) * _MACHEP)
        old = size
        afac = afac / a
    return res + sgn * w.fn("exp", -0.5 * a * eta * eta) * total \
        / w.fn("sqrt", 2.0 * _PI_FLOAT * a)


def _igamma_parts(gb: GraphBuilder, xs: list[Value | None], op: str,
                  ) -> tuple[Wide, Num, Num, DType]:
    a_in, x_in = xs[0], xs[1]
    assert a_in is not None and x_in is not None
    ta, tx = _type(a_in), _type(x_in)
    dtype = promote([ta, tx], op)
    if dtype not in _FORMATS:
        raise OpError(f"{op}: the decomposition takes floating input, got {dtype.short}")
    shape = broadcast_shapes([ta.shape, tx.shape], op)
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise OpError(f"{op}: the decomposition needs static shapes (got {shape})")
    w = Wide(gb)
    a, x = _wide(gb, w, a_in), _wide(gb, w, x_in)
    a = Num(w, gb.op("expand", [a.v], {"shape": list(shape)}))
    x = Num(w, gb.op("expand", [x.v], {"shape": list(shape)}))
    return w, a, x, dtype


def _asymptotic_regime(w: Wide, a: Num, x: Num) -> Value:
    ratio = w.fn("abs", x - a) / a
    moderate = w.all(a > 20.0, a < 200.0, ratio < 0.3)
    large = w.all(a > 200.0, ratio < 4.5 / w.fn("sqrt", a))
    return w.any(moderate, large)


def _not(w: Wide, v: Value) -> Value:
    return w.gb.op("logical_not", [v])


def _boundaries(w: Wide, a: Num, x: Num, out: Num, lower: bool) -> Num:
    """The boundary values of calc_igamma (lower) / calc_igammac, applied last-first."""
    zero_x, one_x = (0.0, 1.0) if lower else (1.0, 0.0)
    out = w.where(w.isinf(x), one_x, out)
    out = w.where(w.isinf(a), w.where(w.isinf(x), math.nan, zero_x), out)
    out = w.where(x.eq(0.0), zero_x, out)
    out = w.where(a.eq(0.0), w.where(x > 0.0, one_x, math.nan), out)
    return w.where(w.any(x < 0.0, a < 0.0), math.nan, out)


def _regular(w: Wide, a: Num, x: Num) -> Value:
    """Where none of the boundary cases applies (the iterations serve these only)."""
    edge = w.any(x < 0.0, a < 0.0, a.eq(0.0), x.eq(0.0), w.isinf(a), w.isinf(x),
                 w.isnan(a), w.isnan(x))
    return _not(w, edge)


def igamma_decompose(gb: GraphBuilder, xs: list[Value | None],
                     attrs: dict[str, Any]) -> list[Value]:
    w, a, x, dtype = _igamma_parts(gb, xs, "igamma")
    regular = _regular(w, a, x)
    asymptotic = _asymptotic_regime(w, a, x)
    upper = w.all(x > 1.0, x > a)  # 1 - igammac, by its fraction or (x <= 1.1) its series
    fraction = w.all(regular, _not(w, asymptotic), upper, x > 1.1)
    upper_series = w.all(regular, _not(w, asymptotic), upper, _not(w, x > 1.1))
    series = w.all(regular, _not(w, asymptotic), _not(w, upper))
    out = w.where(asymptotic, _igam_asymptotic(w, a, x, True),
                  w.where(upper, 1.0 - w.where(x > 1.1, _igamc_fraction(w, a, x, fraction),
                                               _igamc_series(w, a, x, upper_series)),
                          _igam_series(w, a, x, series)))
    return [_narrow(gb, _boundaries(w, a, x, out, True), dtype)]


def igammac_decompose(gb: GraphBuilder, xs: list[Value | None],
                      attrs: dict[str, Any]) -> list[Value]:
    w, a, x, dtype = _igamma_parts(gb, xs, "igammac")
    regular = _regular(w, a, x)
    asymptotic = _asymptotic_regime(w, a, x)
    beyond, near_zero = x > 1.1, x <= 0.5
    # 1 - igamma's series where calc_igammac takes it, else its fraction or its series
    lower = w.any(w.all(beyond, x < a), w.all(near_zero, -0.4 / w.fn("log", x) < a),
                  w.all(_not(w, beyond), _not(w, near_zero), x * 1.1 < a))
    iterated = w.all(regular, _not(w, asymptotic))
    series = w.all(iterated, lower)
    fraction = w.all(iterated, _not(w, lower), beyond)
    upper_series = w.all(iterated, _not(w, lower), _not(w, beyond))
    own = w.where(beyond, _igamc_fraction(w, a, x, fraction), _igamc_series(w, a, x, upper_series))
    out = w.where(asymptotic, _igam_asymptotic(w, a, x, False),
                  w.where(lower, 1.0 - _igam_series(w, a, x, series), own))
    return [_narrow(gb, _boundaries(w, a, x, out, False), dtype)]
