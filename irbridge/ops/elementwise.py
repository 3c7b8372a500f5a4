"""Elementwise ops: unary math, activations, binary arithmetic with broadcasting,
comparisons, logic, `where`, `cast` and `clip`.

Non-matmul FLOPs per output element are the constants in each op's `cost_doc`; they count
the arithmetic of a straightforward implementation (e.g. sigmoid = exp, add, divide = 3 is
rounded to 4 with the negation) and are the documented convention of docs/ops.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import TensorType, Value
from irbridge.ops._numeric import widen
from irbridge.ops._shapes import broadcast_shapes, promote
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
)

_gamma_decomp = LazyDecompositions("irbridge.ops._gamma_decomp")
_bessel = LazyDecompositions("irbridge.ops._bessel_decomp")
_misc = LazyDecompositions("irbridge.ops._misc_decomp")

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder

ArrayFn = Callable[..., np.ndarray]


def _same_type(ctx: OpContext) -> list[TensorType]:
    return [ctx.input(0)]


def _per_element(flops: int) -> Callable[[OpContext], Flops]:
    def cost(ctx: OpContext) -> Flops:
        return Flops(other=flops * ctx.out_numel())
    return cost


def _keep_dtype(fn: ArrayFn) -> Callable[[list[np.ndarray | None], dict[str, Any], RefContext],
                                         list[np.ndarray]]:
    """Compute in float64 (or natively for ints/bools) and cast back to the output dtype."""
    def reference(xs: list[np.ndarray | None], attrs: dict[str, Any],
                  ctx: RefContext) -> list[np.ndarray]:
        out_type = ctx.output_types[0]
        args = [x for x in xs]
        result = np.asarray(fn(*args, **attrs))
        dtype = out_type.dtype.numpy if out_type is not None else args[0].dtype  # type: ignore[union-attr]
        return [result.astype(dtype, copy=False)]
    return reference


def _unary(name: str, fn: ArrayFn, flops: int, doc: str, category: Category = Category.ELEMENTWISE,
           attrs: tuple = (), bool_out: bool = False) -> None:
    def infer(ctx: OpContext) -> list[TensorType]:
        t = ctx.input(0)
        return [TensorType(DType.BOOL, t.shape) if bool_out else t]

    define(name, category, inputs=inputs("x"), attrs=attrs, infer=infer,
           cost=_per_element(flops), cost_doc=f"{flops} per output element",
           reference=_keep_dtype(lambda x, **a: fn(widen(x), **a)), doc=doc)


def _erf(x: np.ndarray) -> np.ndarray:
    import scipy.special  # lazy: scipy costs ~0.3 s of start-up; only reference runs need it

    return scipy.special.erf(x)


def _expit(x: np.ndarray) -> np.ndarray:
    import scipy.special

    if np.iscomplexobj(x):  # scipy's expit takes no complex numbers
        return 1 / (1 + np.exp(-x))
    return scipy.special.expit(x)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)


_unary("neg", np.negative, 1, "Negation, -x.")
_unary("abs", np.abs, 1, "Absolute value.")
_unary("exp", np.exp, 1, "e to the power x.")
_unary("log", np.log, 1, "Natural logarithm.")
_unary("sqrt", np.sqrt, 1, "Square root.")
_unary("rsqrt", lambda x: 1 / np.sqrt(x), 2, "Reciprocal square root, 1/sqrt(x).")
_unary("reciprocal", lambda x: 1 / x, 1, "1/x.")
_unary("sin", np.sin, 1, "Sine.")
_unary("cos", np.cos, 1, "Cosine.")
_unary("tan", np.tan, 1, "Tangent.")
_unary("erf", _erf, 1, "Gauss error function.")
_unary("floor", np.floor, 1, "Round down.")
_unary("ceil", np.ceil, 1, "Round up.")
_unary("round", _round_half_even, 1, "Round to nearest, ties to even.")
_unary("sign", np.sign, 1, "-1, 0 or 1.")
_unary("logical_not", np.logical_not, 1, "Boolean not.", bool_out=True)
_unary("isnan", np.isnan, 1, "True where x is NaN.", bool_out=True)
_unary("isinf", np.isinf, 1, "True where x is +-inf.", bool_out=True)
_unary("tanh", np.tanh, 4, "Hyperbolic tangent.", Category.ACTIVATION)
_unary("sigmoid", _expit, 4, "Logistic sigmoid 1/(1+exp(-x)).",
       Category.ACTIVATION)
_unary("relu", lambda x: np.maximum(x, 0), 1, "max(x, 0).", Category.ACTIVATION)
_unary("gelu", _gelu, 8, "Gaussian error linear unit; `approximate` = none | tanh.",
       Category.ACTIVATION, attrs=(attr("approximate", AttrKind.STRING, "none",
                                         choices=("none", "tanh")),))
_unary("silu", lambda x: x * _expit(x), 5, "x * sigmoid(x) (swish).",
       Category.ACTIVATION)
_unary("mish", lambda x: x * np.tanh(np.logaddexp(0, x)), 8, "x * tanh(softplus(x)).",
       Category.ACTIVATION)
_unary("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6, 4, "x * relu6(x + 3) / 6.",
       Category.ACTIVATION)
_unary("hardsigmoid", lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1), 3,
       "clip(alpha * x + beta, 0, 1).", Category.ACTIVATION,
       attrs=(attr("alpha", AttrKind.FLOAT, 1 / 6), attr("beta", AttrKind.FLOAT, 0.5)))
_unary("leaky_relu", lambda x, alpha: np.where(x >= 0, x, alpha * x), 2,
       "x if x >= 0 else alpha * x.", Category.ACTIVATION,
       attrs=(attr("alpha", AttrKind.FLOAT, 0.01),))
_unary("elu", lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))), 3,
       "x if x > 0 else alpha * (exp(x) - 1).", Category.ACTIVATION,
       attrs=(attr("alpha", AttrKind.FLOAT, 1.0),))
_unary("softplus", lambda x, beta, threshold: np.where(
           beta * x > threshold, x, np.logaddexp(0, beta * x) / beta), 3,
       "log(1 + exp(beta * x)) / beta, linear above `threshold`.", Category.ACTIVATION,
       attrs=(attr("beta", AttrKind.FLOAT, 1.0), attr("threshold", AttrKind.FLOAT, 20.0)))


def _clip_infer(ctx: OpContext) -> list[TensorType]:
    return [ctx.input(0)]


def _clip_ref(xs: list[np.ndarray | None], attrs: dict[str, Any],
              ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    lo = xs[1] if len(xs) > 1 and xs[1] is not None else attrs["min"]
    hi = xs[2] if len(xs) > 2 and xs[2] is not None else attrs["max"]
    y = x
    if lo is not None and not (isinstance(lo, float) and np.isneginf(lo)):
        y = np.maximum(y, np.asarray(lo, dtype=x.dtype))
    if hi is not None and not (isinstance(hi, float) and np.isposinf(hi)):
        y = np.minimum(y, np.asarray(hi, dtype=x.dtype))
    return [y.astype(x.dtype, copy=False)]


define("clip", Category.ACTIVATION, inputs=inputs("x", "min?", "max?"),
       attrs=(attr("min", AttrKind.FLOAT, float("-inf"), "used when input `min` is absent"),
              attr("max", AttrKind.FLOAT, float("inf"), "used when input `max` is absent")),
       infer=_clip_infer, cost=_per_element(2), cost_doc="2 per output element",
       reference=_clip_ref, doc="Clamp x into [min, max] (relu6 is clip(0, 6)).")


def _binary(name: str, fn: ArrayFn, flops: int, doc: str, bool_out: bool = False,
            category: Category = Category.ELEMENTWISE) -> None:
    def infer(ctx: OpContext) -> list[TensorType]:
        a, b = ctx.input(0), ctx.input(1)
        shape = broadcast_shapes([a.shape, b.shape], ctx.where or name)
        dtype = DType.BOOL if bool_out else promote([a, b], ctx.where or name)
        return [TensorType(dtype, shape)]

    def reference(xs: list[np.ndarray | None], attrs: dict[str, Any],
                  ctx: RefContext) -> list[np.ndarray]:
        a, b = xs[0], xs[1]
        assert a is not None and b is not None
        out_t = ctx.output_types[0]
        result = np.asarray(fn(widen(a), widen(b)))
        return [result.astype(out_t.dtype.numpy if out_t else result.dtype, copy=False)]

    define(name, category, inputs=inputs("a", "b"), infer=infer, cost=_per_element(flops),
           cost_doc=f"{flops} per output element", reference=reference,
           doc=doc + " Numpy-style broadcasting.")


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a / b).astype(np.result_type(a, b))  # C-style integer division
    return a / b


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer pow is StableHLO's: exact, wrapping on overflow; a negative exponent gives
    1 for base 1, +-1 for base -1 (by the exponent's parity) and 0 for every other base."""
    if a.dtype.kind not in "iub" or b.dtype.kind not in "iub":
        return np.power(a, b)
    a, b = np.broadcast_arrays(a, b)
    dtype = np.result_type(a, b)
    if dtype.kind == "b":
        dtype = np.dtype(np.int8)
    a, b = a.astype(dtype), b.astype(dtype)
    negative = b < 0
    with np.errstate(over="ignore"):
        result = np.power(a, np.where(negative, 0, b))
    if negative.any():
        one = np.ones((), dtype)
        minus_one_power = np.where((b & 1) == 1, -one, one)
        inverse = np.where(a == 1, one, np.where(a == -1, minus_one_power, np.zeros((), dtype)))
        result = np.where(negative, inverse, result)
    return result


_binary("add", np.add, 1, "a + b.")
_binary("sub", np.subtract, 1, "a - b.")
_binary("mul", np.multiply, 1, "a * b.")
_binary("div", _div, 1, "a / b; integer inputs truncate toward zero.")
_binary("floor_div", np.floor_divide, 1, "floor(a / b).")
_binary("mod", np.mod, 1, "a mod b with the sign of b (Python semantics).")
_binary("pow", _pow, 1, "a to the power b; on integers exact and wrapping, with StableHLO's "
        "negative exponents (1 for base 1, +-1 for base -1, else 0).")
_binary("maximum", np.maximum, 1, "Elementwise maximum.")
_binary("minimum", np.minimum, 1, "Elementwise minimum.")
_binary("prelu", lambda x, slope: np.where(x >= 0, x, slope * x), 2,
        "x if x >= 0 else slope * x; slope broadcasts.", category=Category.ACTIVATION)
_binary("equal", np.equal, 1, "a == b.", bool_out=True)
_binary("not_equal", np.not_equal, 1, "a != b.", bool_out=True)
_binary("less", np.less, 1, "a < b.", bool_out=True)
_binary("less_equal", np.less_equal, 1, "a <= b.", bool_out=True)
_binary("greater", np.greater, 1, "a > b.", bool_out=True)
_binary("greater_equal", np.greater_equal, 1, "a >= b.", bool_out=True)
_binary("logical_and", np.logical_and, 1, "Boolean and.", bool_out=True)
_binary("logical_or", np.logical_or, 1, "Boolean or.", bool_out=True)
_binary("logical_xor", np.logical_xor, 1, "Boolean xor.", bool_out=True)


def _where_infer(ctx: OpContext) -> list[TensorType]:
    cond, a, b = ctx.input(0), ctx.input(1), ctx.input(2)
    shape = broadcast_shapes([cond.shape, a.shape, b.shape], ctx.where or "where")
    return [TensorType(promote([a, b], ctx.where or "where"), shape)]


def _where_ref(xs: list[np.ndarray | None], attrs: dict[str, Any],
               ctx: RefContext) -> list[np.ndarray]:
    cond, a, b = xs
    assert cond is not None and a is not None and b is not None
    out_t = ctx.output_types[0]
    result = np.where(cond.astype(bool), a, b)
    return [result.astype(out_t.dtype.numpy if out_t else result.dtype, copy=False)]


define("where", Category.ELEMENTWISE, inputs=inputs("condition", "a", "b"),
       infer=_where_infer, cost=_per_element(1), cost_doc="1 per output element",
       reference=_where_ref, doc="a where condition is true, else b; all three broadcast.")


def _cast_infer(ctx: OpContext) -> list[TensorType]:
    return [TensorType(ctx.attrs["dtype"], ctx.input(0).shape)]


def _cast_ref(xs: list[np.ndarray | None], attrs: dict[str, Any],
              ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    target: DType = attrs["dtype"]
    if target.is_integer and x.dtype.kind == "f":
        x = np.trunc(x)
    return [x.astype(target.numpy)]


define("cast", Category.ELEMENTWISE, inputs=inputs("x"),
       attrs=(attr("dtype", AttrKind.DTYPE, doc="target element type"),),
       infer=_cast_infer, cost=_per_element(0), cost_doc="0 (bytes only)",
       reference=_cast_ref, doc="Convert to another element type; floats to ints truncate.")


# == Elementwise math and special functions (issue 13) =========================================
#
# Inverse trigonometric and hyperbolic functions, rounding and sign helpers, NaN-aware
# extrema and the special functions of `torch.special` / `scipy.special`. References compute
# in float64 (float64 in, float64 out; narrower floats are rounded back) with numpy or scipy.
# Cost convention (docs/ops.md): a call to a library transcendental or special function counts
# as 1 FLOP like exp, log, erf and tan above; ops defined by a formula count its arithmetic.
#
# Ops with a `decompose` are written by the ONNX and StableHLO exporters as that graph of
# neutral ops when the exporter has no direct mapping. The gamma family (lgamma, digamma,
# polygamma, zeta), erfinv, ndtri and erfcx decompose into torch's own algorithms
# (irbridge/ops/_gamma_decomp.py); the Bessel family (i0 ... airy_ai) into torch's own
# Cephes approximations computed in float64 (irbridge/ops/_bessel_decomp.py); igamma,
# igammac, nextafter and frexp into irbridge/ops/_misc_decomp.py. A special function
# without a decomposition is refused by the exporters with a one-line error naming the
# node instead of written as an approximation.


def _f64(fn: ArrayFn) -> ArrayFn:
    """fn applied in float64 to float inputs (integers and bools too: torch promotes them)."""
    def apply(*xs: np.ndarray, **attrs: Any) -> np.ndarray:
        wide = [np.asarray(x, dtype=np.float64) if np.asarray(x).dtype.kind in "biuf" else x
                for x in xs]
        with np.errstate(all="ignore"):
            return np.asarray(fn(*wide, **attrs))
    return apply


def _scipy(name: str) -> ArrayFn:
    def fn(*xs: np.ndarray, **attrs: Any) -> np.ndarray:
        import scipy.special  # lazy, see _erf

        return getattr(scipy.special, name)(*xs, **attrs)
    return fn


def _math_unary(name: str, fn: ArrayFn, flops: int, doc: str, *,
                decompose: Any = None, bool_out: bool = False,
                attrs: tuple = ()) -> None:
    def infer(ctx: OpContext) -> list[TensorType]:
        t = ctx.input(0)
        return [TensorType(DType.BOOL, t.shape) if bool_out else t]

    define(name, Category.ELEMENTWISE, inputs=inputs("x"), attrs=attrs, infer=infer,
           cost=_per_element(flops), cost_doc=f"{flops} per output element",
           reference=_keep_dtype(_f64(fn)), decompose=decompose, doc=doc)


def _math_binary(name: str, fn: ArrayFn, flops: int, doc: str, *, decompose: Any = None,
                 native: bool = False) -> None:
    """native: the reference runs in the operands' own dtype (nextafter's result depends on
    the precision)."""
    def infer(ctx: OpContext) -> list[TensorType]:
        a, b = ctx.input(0), ctx.input(1)
        shape = broadcast_shapes([a.shape, b.shape], ctx.where or name)
        return [TensorType(promote([a, b], ctx.where or name), shape)]

    def reference(xs: list[np.ndarray | None], attrs: dict[str, Any],
                  ctx: RefContext) -> list[np.ndarray]:
        a, b = xs[0], xs[1]
        assert a is not None and b is not None
        out_t = ctx.output_types[0]
        dtype = out_t.dtype.numpy if out_t is not None else np.result_type(a, b)
        if native:
            with np.errstate(all="ignore"):
                result = np.asarray(fn(a.astype(dtype), b.astype(dtype)))
        elif a.dtype.kind in "iu" and b.dtype.kind in "iu" and np.dtype(dtype).kind in "iu":
            with np.errstate(all="ignore"):
                result = np.asarray(fn(a, b))
        else:
            result = _f64(fn)(a, b)
        return [result.astype(dtype, copy=False)]

    define(name, Category.ELEMENTWISE, inputs=inputs("a", "b"), infer=infer,
           cost=_per_element(flops), cost_doc=f"{flops} per output element",
           reference=reference, decompose=decompose, doc=doc + " Numpy-style broadcasting.")


def _gtype(v: Value | None) -> TensorType:
    assert v is not None and v.type is not None
    return v.type


def _k(gb: GraphBuilder, value: float, like: Value) -> Value:
    """A scalar constant of `like`'s dtype."""
    return gb.constant(value, "c", dtype=_gtype(like).dtype)


def _signbit_graph(gb: GraphBuilder, x: Value) -> Value:
    """x < 0, or x == -0.0 (found as 1/x == -inf); the sign of a NaN is not observable
    without a bit cast (NaN inputs give False)."""
    zero = _k(gb, 0, x)
    negative = gb.op("less", [x, zero])
    if not _gtype(x).dtype.is_float:
        return negative
    negative_zero = gb.op("logical_and", [gb.op("equal", [x, zero]),
                                          gb.op("less", [gb.op("reciprocal", [x]), zero])])
    return gb.op("logical_or", [negative, negative_zero])


def _signbit_decompose(gb: GraphBuilder, xs: list[Value | None],
                       attrs: dict[str, Any]) -> list[Value]:
    assert xs[0] is not None
    return [_signbit_graph(gb, xs[0])]


def _sign_factor(gb: GraphBuilder, negative: Value, like: Value) -> Value:
    """-1 where `negative`, else 1, in `like`'s dtype. Decompositions give results their
    sign by multiplying with this rather than selecting a negated value: a -0.0 picked by
    a `where` keeps its sign in numpy and StableHLO but not in every runtime (onnxruntime's
    Where returns +0.0 from its true branch)."""
    return gb.op("where", [negative, _k(gb, -1.0, like), _k(gb, 1.0, like)])


def _trunc_decompose(gb: GraphBuilder, xs: list[Value | None],
                     attrs: dict[str, Any]) -> list[Value]:
    """floor(|x|) with the sign of x (so trunc(-0.5) is -0.0)."""
    x = xs[0]
    assert x is not None
    if not _gtype(x).dtype.is_float:
        return [gb.op("identity", [x])]
    magnitude = gb.op("floor", [gb.op("abs", [x])])
    return [gb.op("mul", [magnitude, _sign_factor(gb, _signbit_graph(gb, x), x)])]


def _erfc_decompose(gb: GraphBuilder, xs: list[Value | None],
                    attrs: dict[str, Any]) -> list[Value]:
    x = xs[0]
    assert x is not None
    return [gb.op("sub", [_k(gb, 1.0, x), gb.op("erf", [x])])]


def _digamma(x: np.ndarray) -> np.ndarray:
    import scipy.special

    # torch: digamma(+-0) = -+inf (scipy gives -inf for both)
    return np.where(x == 0, np.copysign(np.inf, -np.copysign(1.0, x)), scipy.special.psi(x))


def _polygamma(x: np.ndarray, n: int) -> np.ndarray:
    import scipy.special

    return _digamma(x) if n == 0 else scipy.special.polygamma(n, x)


def _airy_ai(x: np.ndarray) -> np.ndarray:
    import scipy.special

    return scipy.special.airy(x)[0]


def _spherical_j0(x: np.ndarray) -> np.ndarray:
    import scipy.special

    return scipy.special.spherical_jn(0, x)


_math_unary("acos", np.arccos, 1, "Inverse cosine, in [0, pi]; NaN outside [-1, 1].")
_math_unary("asin", np.arcsin, 1, "Inverse sine, in [-pi/2, pi/2]; NaN outside [-1, 1].")
_math_unary("atan", np.arctan, 1, "Inverse tangent, in (-pi/2, pi/2).")
_math_unary("sinh", np.sinh, 4, "Hyperbolic sine, (exp(x) - exp(-x)) / 2.")
_math_unary("cosh", np.cosh, 4, "Hyperbolic cosine, (exp(x) + exp(-x)) / 2.")
_math_unary("asinh", np.arcsinh, 5, "Inverse hyperbolic sine, log(x + sqrt(x^2 + 1)).")
_math_unary("acosh", np.arccosh, 5,
            "Inverse hyperbolic cosine, log(x + sqrt(x^2 - 1)); NaN below 1.")
_math_unary("atanh", np.arctanh, 4,
            "Inverse hyperbolic tangent, log((1 + x) / (1 - x)) / 2; NaN outside [-1, 1].")
_math_unary("trunc", np.trunc, 1, "Round toward zero (integers unchanged).",
            decompose=_trunc_decompose)
_math_unary("signbit", np.signbit, 1, "True where the sign bit is set (x < 0, -0.0, -NaN).",
            decompose=_signbit_decompose, bool_out=True)
_math_unary("erfc", _scipy("erfc"), 2, "Complementary error function 1 - erf(x).",
            decompose=_erfc_decompose)
_math_unary("erfinv", _scipy("erfinv"), 1, "Inverse error function; +-inf at +-1, NaN outside.",
            decompose=_gamma_decomp.erfinv_decompose)
_math_unary("erfcx", _scipy("erfcx"), 1, "Scaled complementary error function "
            "exp(x^2) * erfc(x).", decompose=_gamma_decomp.erfcx_decompose)
_math_unary("lgamma", _scipy("gammaln"), 1, "log |Gamma(x)|; +inf at the poles 0, -1, -2, ...",
            decompose=_gamma_decomp.lgamma_decompose)
_math_unary("digamma", _digamma, 1, "Digamma psi(x) = d/dx lgamma(x); -+inf at +-0, NaN at "
            "the negative integers.", decompose=_gamma_decomp.digamma_decompose)
_math_unary("polygamma", _polygamma, 1, "n-th derivative of digamma (n = 0 is digamma).",
            attrs=(attr("n", AttrKind.INT, 0, "derivative order, >= 0"),),
            decompose=_gamma_decomp.polygamma_decompose)
_math_unary("ndtri", _scipy("ndtri"), 1, "Inverse of the standard normal CDF; -+inf at 0, 1.",
            decompose=_gamma_decomp.ndtri_decompose)
_math_unary("i0", _scipy("i0"), 1, "Modified Bessel function of the first kind, order 0.",
            decompose=_bessel.i0_decompose)
_math_unary("i0e", _scipy("i0e"), 1, "Exponentially scaled i0: exp(-|x|) * i0(x).",
            decompose=_bessel.i0e_decompose)
_math_unary("i1", _scipy("i1"), 1, "Modified Bessel function of the first kind, order 1.",
            decompose=_bessel.i1_decompose)
_math_unary("i1e", _scipy("i1e"), 1, "Exponentially scaled i1: exp(-|x|) * i1(x).",
            decompose=_bessel.i1e_decompose)
_math_unary("k0", _scipy("k0"), 1, "Modified Bessel function of the second kind, order 0.",
            decompose=_bessel.k0_decompose)
_math_unary("k1", _scipy("k1"), 1, "Modified Bessel function of the second kind, order 1.",
            decompose=_bessel.k1_decompose)
_math_unary("k0e", _scipy("k0e"), 1, "Exponentially scaled k0: exp(x) * k0(x).",
            decompose=_bessel.k0e_decompose)
_math_unary("k1e", _scipy("k1e"), 1, "Exponentially scaled k1: exp(x) * k1(x).",
            decompose=_bessel.k1e_decompose)
_math_unary("bessel_j0", _scipy("j0"), 1, "Bessel function of the first kind, order 0.",
            decompose=_bessel.bessel_j0_decompose)
_math_unary("bessel_j1", _scipy("j1"), 1, "Bessel function of the first kind, order 1.",
            decompose=_bessel.bessel_j1_decompose)
_math_unary("bessel_y0", _scipy("y0"), 1, "Bessel function of the second kind, order 0.",
            decompose=_bessel.bessel_y0_decompose)
_math_unary("bessel_y1", _scipy("y1"), 1, "Bessel function of the second kind, order 1.",
            decompose=_bessel.bessel_y1_decompose)
_math_unary("spherical_bessel_j0", _spherical_j0, 1,
            "Spherical Bessel function of the first kind, order 0: sin(x) / x.",
            decompose=_bessel.spherical_bessel_j0_decompose)
_math_unary("airy_ai", _airy_ai, 1, "Airy function Ai(x).",
            decompose=_bessel.airy_ai_decompose)


def _atan2_decompose(gb: GraphBuilder, xs: list[Value | None],
                     attrs: dict[str, Any]) -> list[Value]:
    """atan2(y, x) = sign(y) * atan2(|y|, x), as C defines it for every sign of zero and
    infinity: the magnitude is atan(|y| / x), plus pi where x < 0 or x = -0; where both
    are zero it is 0 or pi, where both are infinite pi/4 or 3pi/4."""
    y, x = xs[0], xs[1]
    assert y is not None and x is not None
    left = _signbit_graph(gb, x)

    def pick(if_left: float, otherwise: float) -> Value:
        return gb.op("where", [left, _k(gb, if_left, y), _k(gb, otherwise, y)])

    m = gb.op("atan", [gb.op("div", [gb.op("abs", [y]), x])])
    m = gb.op("where", [left, gb.op("add", [m, _k(gb, math.pi, m)]), m])
    zero = _k(gb, 0, x)
    both_zero = gb.op("logical_and", [gb.op("equal", [x, zero]), gb.op("equal", [y, zero])])
    m = gb.op("where", [both_zero, pick(math.pi, 0.0), m])
    both_inf = gb.op("logical_and", [gb.op("isinf", [x]), gb.op("isinf", [y])])
    m = gb.op("where", [both_inf, pick(3 * math.pi / 4, math.pi / 4), m])
    return [gb.op("mul", [m, _sign_factor(gb, _signbit_graph(gb, y), m)])]


def _copysign_decompose(gb: GraphBuilder, xs: list[Value | None],
                        attrs: dict[str, Any]) -> list[Value]:
    a, b = xs[0], xs[1]
    assert a is not None and b is not None
    magnitude = gb.op("abs", [a])
    return [gb.op("mul", [magnitude, _sign_factor(gb, _signbit_graph(gb, b), magnitude)])]


def _nan_aware(extremum: str) -> Any:
    def decompose(gb: GraphBuilder, xs: list[Value | None],
                  attrs: dict[str, Any]) -> list[Value]:
        a, b = xs[0], xs[1]
        assert a is not None and b is not None
        m = gb.op(extremum, [a, b])
        if not (_gtype(a).dtype.is_float or _gtype(b).dtype.is_float):
            return [m]
        m = gb.op("where", [gb.op("isnan", [a]), b, m])
        return [gb.op("where", [gb.op("isnan", [b]), a, m])]
    return decompose


def _hypot_decompose(gb: GraphBuilder, xs: list[Value | None],
                     attrs: dict[str, Any]) -> list[Value]:
    """m * sqrt(1 + (n / m)^2) with m = max(|a|, |b|), n = min(|a|, |b|): no overflow or
    underflow of the squares; 0 where both are 0, +inf where either is infinite (C)."""
    a, b = xs[0], xs[1]
    assert a is not None and b is not None
    x, y = gb.op("abs", [a]), gb.op("abs", [b])
    m, n = gb.op("maximum", [x, y]), gb.op("minimum", [x, y])
    q = gb.op("div", [n, m])
    r = gb.op("mul", [m, gb.op("sqrt", [gb.op("add", [_k(gb, 1.0, q), gb.op("mul", [q, q])])])])
    r = gb.op("where", [gb.op("equal", [m, _k(gb, 0.0, m)]), _k(gb, 0.0, m), r])
    either_inf = gb.op("logical_or", [gb.op("isinf", [a]), gb.op("isinf", [b])])
    return [gb.op("where", [either_inf, _k(gb, math.inf, r), r])]


def _zeta(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    import scipy.special

    return scipy.special.zeta(x, q)


def _atan2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """np.arctan2; of complex numbers -i log((x + i y) / sqrt(x^2 + y^2)), as StableHLO
    defines it."""
    if np.iscomplexobj(y) or np.iscomplexobj(x):
        return -1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))
    return np.arctan2(y, x)


_math_binary("atan2", _atan2, 1, "Angle of the point (b, a): atan2(a, b) in [-pi, pi].",
             decompose=_atan2_decompose)
_math_binary("copysign", np.copysign, 1, "|a| with the sign bit of b.",
             decompose=_copysign_decompose)
_math_binary("fmod", np.fmod, 1, "C fmod: a - trunc(a / b) * b, the sign of a.")
_math_binary("fmin", np.fmin, 1, "Elementwise minimum ignoring NaN (NaN only if both are).",
             decompose=_nan_aware("minimum"))
_math_binary("fmax", np.fmax, 1, "Elementwise maximum ignoring NaN (NaN only if both are).",
             decompose=_nan_aware("maximum"))
_math_binary("hypot", np.hypot, 6, "sqrt(a^2 + b^2) without overflow.",
             decompose=_hypot_decompose)
_math_binary("nextafter", np.nextafter, 1,
             "The next representable value after a toward b, in the operands' dtype.",
             native=True, decompose=_misc.nextafter_decompose)
_math_binary("zeta", _zeta, 1, "Hurwitz zeta function zeta(a, b) = sum_k (k + b)^-a.",
             decompose=_gamma_decomp.zeta_decompose)
_math_binary("igamma", _scipy("gammainc"), 1, "Regularized lower incomplete gamma function "
             "P(a, x) = gamma(a, x) / Gamma(a); NaN for a < 0 or x < 0.",
             decompose=_misc.igamma_decompose)
_math_binary("igammac", _scipy("gammaincc"), 1, "Regularized upper incomplete gamma function "
             "Q(a, x) = 1 - P(a, x); NaN for a < 0 or x < 0.",
             decompose=_misc.igammac_decompose)


def _frexp_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    if not x.dtype.is_float:
        raise ctx.fail(f"frexp takes a floating tensor, got {x.dtype.name}")
    return [x, TensorType(DType.INT32, x.shape)]


def _frexp_ref(xs: list[np.ndarray | None], attrs: dict[str, Any],
               ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    mantissa, exponent = np.frexp(x)
    return [mantissa.astype(x.dtype), exponent.astype(np.int32)]


define("frexp", Category.ELEMENTWISE, inputs=inputs("x"), outputs=("mantissa", "exponent"),
       infer=_frexp_infer, cost=_per_element(2), cost_doc="2 per output element",
       reference=_frexp_ref, decompose=_misc.frexp_decompose,
       doc="x = mantissa * 2^exponent with |mantissa| in [0.5, 1) (C frexp): the mantissa "
           "in x's dtype, the exponent int32; 0 gives (0, 0), inf and NaN keep their value "
           "with exponent 0.")
