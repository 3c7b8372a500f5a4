"""Elementwise ops: unary math, activations, binary arithmetic with broadcasting,
comparisons, logic, `where`, `cast` and `clip`.

Non-matmul FLOPs per output element are the constants in each op's `cost_doc`; they count
the arithmetic of a straightforward implementation (e.g. sigmoid = exp, add, divide = 3 is
rounded to 4 with the negation) and are the documented convention of docs/ops.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import TensorType
from irbridge.ops._numeric import widen
from irbridge.ops._shapes import broadcast_shapes, promote
from irbridge.ops.registry import (
    AttrKind,
    Category,
    Flops,
    OpContext,
    RefContext,
    attr,
    define,
    inputs,
)

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
