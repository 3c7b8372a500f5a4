"""Registry decompositions of torch.special's orthogonal polynomials and of the gamma family
(lgamma, digamma, polygamma, zeta) and the error-function inverses (erfinv, ndtri, erfcx),
built from other neutral ops so that the ONNX and StableHLO exporters can write them.

Each follows the algorithm of torch's CPU kernel (ATen/native/Math.h) in the precision that
kernel computes in, so that special values (0, +-inf, NaN, poles, negative arguments) and
the rounding of float32 results come out as eager torch computes them. Iterations whose
count depends on the data (the polynomials' recurrence up to the degree, zeta's direct sum)
are a `loop` op: a while loop over the whole tensor with a per-element mask, stopping when
no element is still live (ONNX Loop, stablehlo.while); fixed short iterations are unrolled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Graph, TensorType, Value

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder

class B:
    """A GraphBuilder computing in one float dtype, with cached scalar constants."""

    def __init__(self, gb: GraphBuilder, dtype: DType) -> None:
        self.gb, self.dt = gb, dtype
        self._consts: dict[tuple[str, DType], Value] = {}

    def c(self, value: float, dtype: DType | None = None) -> E:
        dtype = dtype or self.dt
        key = (repr(float(value)), dtype)  # repr tells -0.0 from 0.0
        if key not in self._consts:
            self._consts[key] = self.gb.constant(value, "c", dtype=dtype)
        return E(self, self._consts[key])

    def e(self, x: E | float | int, like: E | None = None) -> E:
        if isinstance(x, E):
            return x
        return self.c(float(x), like.dtype if like is not None else None)

    def op(self, name: str, *xs: E | float | int, **attrs: Any) -> E:
        like = next((x for x in xs if isinstance(x, E)), None)
        values = [self.e(x, like).v for x in xs]
        return E(self, self.gb.op(name, values, attrs or None))

    def where(self, cond: E, a: E | float, b: E | float) -> E:
        like = a if isinstance(a, E) else b if isinstance(b, E) else None
        return E(self, self.gb.op("where", [cond.v, self.e(a, like).v, self.e(b, like).v]))

    def cast(self, x: E, dtype: DType) -> E:
        return x if x.dtype == dtype else self.op("cast", x, dtype=dtype)

    def any(self, mask: E) -> E:
        """True where any element of the bool tensor is (a scalar)."""
        as_int = self.cast(mask, DType.INT32)
        return self.op("greater", self.op("reduce_max", as_int, axes=(), keepdims=False),
                       self.c(0, DType.INT32))

    def polevl(self, x: E, coefficients: Sequence[float]) -> E:
        """Horner's rule, highest power first (Cephes polevl, its first step folded)."""
        acc = self.c(coefficients[0])
        for a in coefficients[1:]:
            acc = acc * x + a
        return acc

    def p1evl(self, x: E, coefficients: Sequence[float]) -> E:
        """Cephes p1evl: polevl with a leading coefficient of 1 left out."""
        acc = x + coefficients[0]
        for a in coefficients[1:]:
            acc = acc * x + a
        return acc

    def loop(self, trip: E | None, carried: Sequence[E],
             step: Callable[[B, E, list[E]], tuple[E, list[E]]]) -> list[E]:
        """A while loop: `step(b, i, values)` gives (keep going, next values) for iteration
        i (int64); at most `trip` iterations when given. Every value the body reads is
        carried (the body reads nothing from outside)."""
        body = Graph("body")
        i = body.add_input("i", TensorType(DType.INT64, ()))
        body.add_input("cond_in", TensorType(DType.BOOL, ()))
        state = [body.add_input(f"v{k}", v.v.type) for k, v in enumerate(carried)]
        from irbridge.builder import GraphBuilder

        inner = B(GraphBuilder(body), self.dt)
        go, nxt = step(inner, E(inner, i), [E(inner, v) for v in state])
        body.set_outputs([go.v, *(n.v for n in nxt)])
        start = self.c(1, DType.BOOL)
        outs = self.gb.op_multi("loop", [None if trip is None else trip.v, start.v,
                                         *(v.v for v in carried)],
                                {"body": body}, num_outputs=len(carried))
        return [E(self, v) for v in outs]


class E:
    """A value with arithmetic operators that emit neutral ops (comparisons give bool)."""

    __slots__ = ("b", "v")

    def __init__(self, b: B, v: Value) -> None:
        self.b, self.v = b, v

    @property
    def dtype(self) -> DType:
        assert self.v.type is not None
        return self.v.type.dtype

    def _bin(self, name: str, other: E | float | int, swap: bool = False) -> E:
        o = self.b.e(other, self)
        return self.b.op(name, o, self) if swap else self.b.op(name, self, o)

    def __add__(self, o: E | float | int) -> E:
        return self._bin("add", o)

    def __radd__(self, o: E | float | int) -> E:
        return self._bin("add", o, True)

    def __sub__(self, o: E | float | int) -> E:
        return self._bin("sub", o)

    def __rsub__(self, o: E | float | int) -> E:
        return self._bin("sub", o, True)

    def __mul__(self, o: E | float | int) -> E:
        return self._bin("mul", o)

    def __rmul__(self, o: E | float | int) -> E:
        return self._bin("mul", o, True)

    def __truediv__(self, o: E | float | int) -> E:
        return self._bin("div", o)

    def __rtruediv__(self, o: E | float | int) -> E:
        return self._bin("div", o, True)

    def __neg__(self) -> E:
        return self.b.op("neg", self)

    def __lt__(self, o: E | float | int) -> E:
        return self._bin("less", o)

    def __le__(self, o: E | float | int) -> E:
        return self._bin("less_equal", o)

    def __gt__(self, o: E | float | int) -> E:
        return self._bin("greater", o)

    def __ge__(self, o: E | float | int) -> E:
        return self._bin("greater_equal", o)

    def eq(self, o: E | float | int) -> E:
        return self._bin("equal", o)

    def ne(self, o: E | float | int) -> E:
        return self._bin("not_equal", o)

    def __and__(self, o: E) -> E:
        return self.b.op("logical_and", self, o)

    def __or__(self, o: E) -> E:
        return self.b.op("logical_or", self, o)

    def __invert__(self) -> E:
        return self.b.op("logical_not", self)

    def f(self, name: str) -> E:
        """A unary neutral op (abs, floor, exp, log, sin, ...)."""
        return self.b.op(name, self)


def _one_input(xs: list[Value | None], where: str) -> Value:
    x = xs[0]
    if x is None or x.type is None:
        raise OpError(f"{where}: needs a typed input")
    return x


def _float_dtype(x: Value, where: str) -> DType:
    assert x.type is not None
    dtype = x.type.dtype
    if dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise OpError(f"{where}: decomposed for float32 and float64 only, got {dtype.name}")
    return dtype


def _broadcast(b: B, a: E, c: E) -> tuple[E, E]:
    """a and c broadcast against each other (a `where` on an all-true mask keeps -0.0)."""
    everywhere_c = c.eq(c) | c.ne(c)
    everywhere_a = a.eq(a) | a.ne(a)
    return b.where(everywhere_c, a, a), b.where(everywhere_a, c, c)


def _library(b: B, name: str, x: E) -> E:
    """x.f(name) rounded from float64, as a correctly rounded C library function gives it
    (onnxruntime's float32 sin, cos and log are up to 2-3 ulps off; their float64 kernels
    are the C library's)."""
    if x.dtype == DType.FLOAT64:
        return x.f(name)
    return b.cast(b.cast(x, DType.FLOAT64).f(name), x.dtype)


def _acos(b: B, y: E) -> E:
    """acos(y) for |y| <= 1 as accurate as float64 allows: float32 acos (onnxruntime has no
    float64 Acos, and its float32 one is 4 ulps off) refined by two Newton steps on
    cos(t) = y in float64; near +-1, where float32 cannot start it, from the asymptotic
    forms sqrt(2 (1 - y)) and pi - sqrt(2 (1 + y))."""
    f64 = DType.FLOAT64
    y64 = b.cast(y, f64)
    t = b.cast(b.cast(y, DType.FLOAT32).f("acos"), f64)
    t = b.where(t < 1e-4, (2.0 * (1.0 - y64)).f("sqrt"), t)
    t = b.where(t > 3.1415, np.pi - (2.0 * (1.0 + y64)).f("sqrt"), t)
    for _ in range(2):
        t = t + (t.f("cos") - y64) / t.f("sin")
    return b.cast(t, y.dtype)


# == orthogonal polynomials =====================================================================

_BIG = {"t": 6, "u": 8, "v": 8, "w": 8}
_BIG_SHIFTED = {"t": 6, "u": 6, "v": 6, "w": 4}


def _degree(b: B, n: E) -> E:
    """torch's static_cast<int64_t>(n) as a float: truncation; a non-finite degree or one
    past int64 (x86 gives INT64_MIN there) counts as -1."""
    if not n.dtype.is_float:
        return b.cast(n, b.dt)
    n = b.cast(n, b.dt)
    magnitude = n.f("abs")
    whole = magnitude.f("floor")
    truncated = b.where(n < 0, -whole, whole)
    valid = magnitude < 2.0 ** 63  # false for inf and NaN too
    return b.where(valid, truncated, -1.0)


def orthogonal_polynomial_decompose(gb: GraphBuilder, xs: list[Value | None],
                                    attrs: dict[str, Any]) -> list[Value]:
    """torch's *_polynomial_*_forward (Math.h), element by element: the special cases, the
    closed trigonometric forms of the Chebyshev kinds for large degrees inside (-1, 1), and
    the three-term recurrence as a `loop` up to the largest degree that needs it (a masked
    step per element, stopping early once every live value is NaN, as torch stops)."""
    x_in, n_in = xs[0], xs[1]
    assert x_in is not None and n_in is not None and x_in.type is not None \
        and n_in.type is not None
    kind: str = attrs["kind"]
    from irbridge.ops._shapes import promote

    dtype = promote([x_in.type, n_in.type], "orthogonal_polynomial")
    if dtype not in (DType.FLOAT32, DType.FLOAT64):
        raise OpError(f"orthogonal_polynomial decomposes for float32 and float64 only, got "
                      f"{dtype.name}")
    b = B(gb, dtype)
    x, n = _broadcast(b, b.cast(E(b, x_in), dtype), E(b, n_in))
    n = _degree(b, n)
    one = 1.0
    half_n = n * 0.5
    even = half_n.f("floor").eq(half_n)
    odd_sign = b.where(even, 1.0, -1.0)
    n1 = n + 1.0
    two_n1 = n + n + 1.0
    shifted = kind.startswith("shifted_")
    y = x + x - one if shifted else x
    # (mask, value) pairs, the first that holds wins (torch's order of returns)
    cases: list[tuple[E, E | float]] = [(n < 0, 0.0)]
    if "chebyshev" in kind:
        letter = kind[-1]
        if shifted:
            top, bottom = x.eq(one), x.eq(0.0)
        else:
            at_one = x.f("abs").eq(one)
            top = at_one & (x > 0.0)
            bottom = at_one & ~(x > 0.0)
        at_top: dict[str, E | float] = {"t": one, "u": n1, "v": one, "w": two_n1}
        cases.append((top, at_top[letter]))
        cases.append((bottom, {"t": odd_sign, "u": odd_sign * n1, "v": odd_sign * two_n1,
                               "w": odd_sign}[letter]))
        big = (_BIG_SHIFTED if shifted else _BIG)[letter]
        inside = (n > float(big)) & (y.f("abs") < one)
        theta = _acos(b, b.where(inside, y, 0.0))

        def sin(v: E) -> E:
            return _library(b, "sin", v)

        def cos(v: E) -> E:
            return _library(b, "cos", v)

        if letter == "t":
            cases.append((inside, cos(n * theta)))
        elif letter == "u":
            s = sin(theta)
            nonzero = s.ne(0.0)
            cases.append((inside & nonzero, sin(n1 * theta) / b.where(nonzero, s, one)))
            cases.append((inside, n1 * cos(n1 * theta) / y))
        else:
            half = theta / 2.0
            angle = (n + 0.5) * theta
            if letter == "v":
                ok = sin(half).ne(one)
                cases.append((inside & ok, cos(angle) / cos(half)))
                cases.append((inside, odd_sign * two_n1))
            else:
                ok = cos(half).ne(one)
                cases.append((inside & ok, sin(angle) / b.where(ok, sin(half), one)))
                if not shifted:
                    cases.append((inside & (x > 0.0), two_n1))
                cases.append((inside, odd_sign))
        first = {"t": y, "u": y + y, "v": y + y - one, "w": y + y + one}[letter]
    elif kind.startswith("hermite"):
        limit = 128.0 if dtype == DType.FLOAT32 else 512.0
        cases.append((n > limit, float("nan")))
        first = x + x if kind == "hermite_h" else x
    elif kind == "laguerre_l":
        cases.append((x.f("abs").eq(0.0), one))
        first = one - x
    else:  # legendre_p
        at_one = x.f("abs").eq(one)
        cases.append((at_one & ((x > 0.0) | even), one))
        cases.append((at_one, -one))
        first = x
    cases.append((n.eq(0.0), one))
    cases.append((n.eq(1.0), first))
    done = cases[0][0]
    for mask, _ in cases[1:]:
        done = done | mask
    recurrence = _recurrence(b, kind, x, y, b.where(done, 0.0, n), first)
    out = recurrence
    for mask, value in reversed(cases):
        out = b.where(mask, value, out)
    return [out.v]


def _recurrence(b: B, kind: str, x: E, y: E, degree: E, first: E) -> E:
    """P_degree by the three-term recurrence from (P_0, P_1) = (1, first), degree >= 2
    (elsewhere 0: no step runs for it)."""
    ones = b.where(degree.eq(degree), 1.0, 1.0)
    q0 = b.where(degree.eq(degree), first, first)
    steps = b.op("reduce_max", degree, axes=(), keepdims=False) - 1.0
    trip = b.cast(b.op("maximum", steps, 0.0), DType.INT64)
    arg = y if "chebyshev" in kind else x

    def step(s: B, i: E, values: list[E]) -> tuple[E, list[E]]:
        p, q, a, deg = values
        j = s.cast(i, s.dt) + 1.0
        live = (deg > j) & q.eq(q)  # a NaN stays NaN: torch stops there too
        if "chebyshev" in kind:
            r = (a + a) * q - p
        elif kind == "hermite_h":
            r = (a + a) * q - (j + j) * p
        elif kind == "hermite_he":
            r = a * q - j * p
        elif kind == "laguerre_l":
            r = (((j + j) + (1.0 - a)) * q - j * p) / (j + 1.0)
        else:  # legendre_p
            r = (((j + j + 1.0) * a) * q - j * p) / (j + 1.0)
        p_next = s.where(live, q, p)
        q_next = s.where(live, r, q)
        still = (deg > j + 1.0) & q_next.eq(q_next)
        return s.any(still), [p_next, q_next, a, deg]

    _, q, _, _ = b.loop(trip, [ones, q0, b.where(degree.eq(degree), arg, arg), degree], step)
    return q
