"""Elementwise ops: unary math, binary arithmetic, comparisons, logic, casts, copies and no-ops."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Refused, Sym, Unsupported
from ._base import (
    ATEN,
    Args,
    AtenFn,
    _aten_fn,
    _axis,
    _binary,
    _compare,
    _expand_to,
    _is_python_number,
    _is_tensorish,
    _op,
    _operand,
    _reshape_to,
    _schema_handler,
    aten,
    dropout,
)

# -- elementwise: unary ---------------------------------------------------------------

_UNARY: dict[str, list[Any]] = {
    "neg": [aten.neg.default], "abs": [aten.abs.default], "exp": [aten.exp.default],
    "log": [aten.log.default], "sqrt": [aten.sqrt.default], "rsqrt": [aten.rsqrt.default],
    "reciprocal": [aten.reciprocal.default], "sin": [aten.sin.default],
    "cos": [aten.cos.default], "tan": [aten.tan.default], "erf": [aten.erf.default],
    "floor": [aten.floor.default], "ceil": [aten.ceil.default], "sign": [aten.sign.default],
    "tanh": [aten.tanh.default, aten.tanh_.default],
    "sigmoid": [aten.sigmoid.default, aten.sigmoid_.default],
    "relu": [aten.relu.default, aten.relu_.default],
    "silu": [aten.silu.default, aten.silu_.default],
    "mish": [aten.mish.default, _op("mish_")],
    "hardswish": [aten.hardswish.default, aten.hardswish_.default],
    "isnan": [aten.isnan.default], "isinf": [aten.isinf.default],
    "logical_not": [aten.logical_not.default],
}


def _unary(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"])
        out = em.out_dtype()
        if out.is_float and not em.type(x).dtype.is_float:
            x = em.cast(x, out)
        return em.op(name, [x])
    return fn


for _name, _ops in _UNARY.items():
    _aten_fn(*_ops)(_unary(_name))


@_aten_fn(aten.round.default)
def _round(em: Emitter, a: Args) -> Value:
    return em.op("round", [em.value(a["self"])])


@_aten_fn(aten.bitwise_not.default)
def _bitwise_not(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    dtype = em.type(x).dtype
    if dtype == DType.BOOL:
        return em.op("logical_not", [x])
    if not dtype.is_integer:
        raise Unsupported(f"bitwise_not of {dtype.short}")
    return em.op("bitwise_not", [x])


@_aten_fn(aten.gelu.default, aten.gelu_.default)
def _gelu(em: Emitter, a: Args) -> Value:
    return em.op("gelu", [em.value(a["self"])], approximate=str(a["approximate"] or "none"))


@_aten_fn(aten.hardsigmoid.default, aten.hardsigmoid_.default)
def _hardsigmoid(em: Emitter, a: Args) -> Value:
    return em.op("hardsigmoid", [em.value(a["self"])], alpha=1 / 6, beta=0.5)


@_aten_fn(aten.leaky_relu.default, aten.leaky_relu_.default)
def _leaky_relu(em: Emitter, a: Args) -> Value:
    return em.op("leaky_relu", [em.value(a["self"])], alpha=float(a["negative_slope"]))


@_aten_fn(aten.rrelu.default, _op("rrelu_"), aten.rrelu_with_noise.default,
          _op("rrelu_with_noise_"), _op("rrelu_with_noise_functional"))
def _rrelu(em: Emitter, a: Args) -> Any:
    """Randomized leaky ReLU: in eval mode the fixed slope (lower + upper) / 2; in
    training mode each element draws its slope, which the IR cannot reproduce."""
    lower, upper = float(a["lower"]), float(a["upper"])
    if a["training"] and lower != upper:
        raise Refused(f"rrelu {em.node.name if em.node is not None else ''} is in training "
                      "mode: eager torch draws a random slope per element and the IR would "
                      "not; call model.eval() before capturing")
    y = em.op("leaky_relu", [em.value(a["self"])], alpha=(lower + upper) / 2)
    if a.get("__op__") is _op("rrelu_with_noise_functional"):
        return (y, a["noise"])
    return y


@_aten_fn(aten.elu.default, aten.elu_.default)
def _elu(em: Emitter, a: Args) -> Value:
    """torch: scale * x for x > 0, else scale * alpha * (exp(input_scale * x) - 1) (selu and
    celu are elu with scales)."""
    x = em.value(a["self"])
    alpha, scale, input_scale = float(a["alpha"]), float(a["scale"]), float(a["input_scale"])
    if input_scale == 1.0:
        y = em.op("elu", [x], alpha=alpha)
        return y if scale == 1.0 else _binary(em, "mul", y, scale)
    dtype = em.type(x).dtype
    negative = _binary(em, "mul", em.op("sub", [em.op("exp", [_binary(em, "mul", x, input_scale)]),
                                                em.scalar(1.0, dtype)]), scale * alpha)
    return em.op("where", [em.op("greater", [x, em.scalar(0.0, dtype)]),
                           _binary(em, "mul", x, scale), negative])


@_aten_fn(aten.softplus.default)
def _softplus(em: Emitter, a: Args) -> Value:
    return em.op("softplus", [em.value(a["self"])], beta=float(a["beta"]),
                 threshold=float(a["threshold"]))


@_aten_fn(aten.hardtanh.default, aten.hardtanh_.default)
def _hardtanh(em: Emitter, a: Args) -> Value:
    return em.op("clip", [em.value(a["self"])], min=float(a["min_val"]),
                 max=float(a["max_val"]))


@_aten_fn(aten.clamp.default, _op("clamp_"), aten.clamp.Tensor, _op("clamp_", "Tensor"))
def _clamp(em: Emitter, a: Args) -> Value:
    return _clip(em, a["self"], a["min"], a["max"])


@_aten_fn(aten.clamp_min.default, _op("clamp_min_"), aten.clamp_min.Tensor)
def _clamp_min(em: Emitter, a: Args) -> Value:
    return _clip(em, a["self"], a["min"], None)


@_aten_fn(aten.clamp_max.default, _op("clamp_max_"), aten.clamp_max.Tensor)
def _clamp_max(em: Emitter, a: Args) -> Value:
    return _clip(em, a["self"], None, a["max"])


def _clip(em: Emitter, x: Any, lo: Any, hi: Any) -> Value:
    out = em.out_dtype()
    xv = em.cast(em.value(x), out)
    if _is_tensorish(lo) or _is_tensorish(hi):
        inputs: list[Value | None] = [xv, None if lo is None else _operand(em, lo, out),
                                      None if hi is None else _operand(em, hi, out)]
        return em.op("clip", inputs)
    attrs: dict[str, float] = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    return em.op("clip", [xv], **attrs)


@_aten_fn(aten.log1p.default)
def _log1p(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("log", [_binary(em, "add", x, 1.0)])


@_aten_fn(aten.expm1.default)
def _expm1(em: Emitter, a: Args) -> Value:
    # an integer input is promoted first (exp in its own type truncated: exp(1) -> 2,
    # and wrapped in uint8)
    x = em.cast(em.value(a["self"]), em.out_dtype())
    return _binary(em, "sub", em.op("exp", [x]), 1.0)


@_aten_fn(aten.square.default)
def _square(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    return em.op("mul", [x, x])


@_aten_fn(aten.log2.default)
def _log2(em: Emitter, a: Args) -> Value:
    return _binary(em, "div", em.op("log", [em.cast(em.value(a["self"]), em.out_dtype())]),
                   math.log(2.0))


@_aten_fn(aten.prelu.default, _op("_prelu_kernel"))
def _prelu(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    w = em.value(a["weight"])
    rank, wshape = em.rank(x), em.shape(w)
    if rank >= 2 and len(wshape) == 1 and wshape[0] != 1:
        w = em.op("reshape", [w], shape=(-1, *([1] * (rank - 2))))
    return em.op("prelu", [x, w])


# -- elementwise math and special functions (issue 13) ---------------------------------
# Each exact ATen overload maps to one neutral op of irbridge/ops/elementwise.py (inputs
# promoted to the result dtype torch reports, as torch does for integer and bool inputs).

_MATH_UNARY: dict[str, list[Any]] = {
    "acos": [aten.acos.default, _op("acos_")], "asin": [aten.asin.default, _op("asin_")],
    "atan": [aten.atan.default, _op("atan_")], "sinh": [aten.sinh.default, _op("sinh_")],
    "cosh": [aten.cosh.default, _op("cosh_")], "asinh": [aten.asinh.default, _op("asinh_")],
    "acosh": [aten.acosh.default, _op("acosh_")], "atanh": [aten.atanh.default, _op("atanh_")],
    "trunc": [aten.trunc.default, _op("trunc_")], "erfc": [aten.erfc.default, _op("erfc_")],
    "erfinv": [aten.erfinv.default, _op("erfinv_")],
    "lgamma": [aten.lgamma.default, _op("lgamma_")],
    "digamma": [aten.digamma.default, _op("digamma_")],
    "i0": [aten.i0.default, _op("i0_"), _op("special_modified_bessel_i0")],
    "i0e": [_op("special_i0e")], "i1": [_op("special_i1"), _op("special_modified_bessel_i1")],
    "i1e": [_op("special_i1e")], "k0": [_op("special_modified_bessel_k0")],
    "k1": [_op("special_modified_bessel_k1")], "k0e": [_op("special_scaled_modified_bessel_k0")],
    "k1e": [_op("special_scaled_modified_bessel_k1")],
    "bessel_j0": [_op("special_bessel_j0")], "bessel_j1": [_op("special_bessel_j1")],
    "bessel_y0": [_op("special_bessel_y0")], "bessel_y1": [_op("special_bessel_y1")],
    "spherical_bessel_j0": [_op("special_spherical_bessel_j0")],
    "ndtri": [_op("special_ndtri")], "erfcx": [_op("special_erfcx")],
    "airy_ai": [_op("special_airy_ai")],
}



def _math_unary(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"] if "self" in a else a["x"])  # special_* name it `x`
        return em.op(name, [em.cast(x, em.out_dtype())])
    return fn


for _name, _ops in _MATH_UNARY.items():
    _aten_fn(*[o for o in _ops if o is not None])(_math_unary(_name))


@_aten_fn(aten.signbit.default)
def _signbit(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    if em.type(x).dtype == DType.BOOL:
        x = em.cast(x, DType.INT32)
    return em.op("signbit", [x])


@_aten_fn(aten.polygamma.default, _op("polygamma_"))
def _polygamma(em: Emitter, a: Args) -> Value:
    n = int(a["n"])
    if n < 0:
        raise Unsupported(f"polygamma of negative order {n}")
    return em.op("polygamma", [em.cast(em.value(a["self"]), em.out_dtype())], n=n)


_MATH_BINARY: dict[str, list[Any]] = {
    "atan2": [aten.atan2.default, _op("atan2_"), _op("arctan2")],
    "copysign": [aten.copysign.Tensor, aten.copysign.Scalar, _op("copysign_", "Tensor"),
                 _op("copysign_", "Scalar")],
    "fmod": [aten.fmod.Tensor, aten.fmod.Scalar, _op("fmod_", "Tensor"),
             _op("fmod_", "Scalar")],
    "fmin": [aten.fmin.default], "fmax": [aten.fmax.default],
    "hypot": [aten.hypot.default, _op("hypot_")],
    "nextafter": [aten.nextafter.default, _op("nextafter_")],
    "zeta": [_op("special_zeta"), _op("special_zeta", "self_scalar"),
             _op("special_zeta", "other_scalar")],
    "igamma": [aten.igamma.default, _op("igamma_"), _op("special_gammainc")],
    "igammac": [aten.igammac.default, _op("igammac_"), _op("special_gammaincc")],
}


def _math_binary(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return _binary(em, name, a["self"], a["other"], em.out_dtype())
    return fn


for _name, _ops in _MATH_BINARY.items():
    _aten_fn(*[o for o in _ops if o is not None])(_math_binary(_name))


# torch.special's orthogonal polynomials P_n(x): one neutral op, the family as its `kind`
_POLYNOMIALS = {
    "chebyshev_t": "chebyshev_polynomial_t", "chebyshev_u": "chebyshev_polynomial_u",
    "chebyshev_v": "chebyshev_polynomial_v", "chebyshev_w": "chebyshev_polynomial_w",
    "shifted_chebyshev_t": "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_u": "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_v": "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_w": "shifted_chebyshev_polynomial_w",
    "hermite_h": "hermite_polynomial_h", "hermite_he": "hermite_polynomial_he",
    "laguerre_l": "laguerre_polynomial_l", "legendre_p": "legendre_polynomial_p",
}


def _polynomial(kind: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        out = em.out_dtype()
        return em.op("orthogonal_polynomial", [_operand(em, a["x"], out),
                                               _operand(em, a["n"], out)], kind=kind)
    return fn


for _kind, _aten_name in _POLYNOMIALS.items():
    _aten_fn(*[o for o in (_op(f"special_{_aten_name}", overload)
                           for overload in ("default", "x_scalar", "n_scalar"))
               if o is not None])(_polynomial(_kind))


@_aten_fn(_op("frexp", "Tensor"))
def _frexp(em: Emitter, a: Args) -> Any:
    mantissa, exponent = em.ops("frexp", [em.value(a["self"])])
    return mantissa, exponent


@_aten_fn(aten.log10.default, _op("log10_"))
def _log10(em: Emitter, a: Args) -> Value:
    return _binary(em, "div", em.op("log", [em.cast(em.value(a["self"]), em.out_dtype())]),
                   math.log(10.0))


@_aten_fn(aten.exp2.default, _op("exp2_"))
def _exp2(em: Emitter, a: Args) -> Value:
    out = em.out_dtype()
    return em.op("pow", [em.scalar(2.0, out), em.cast(em.value(a["self"]), out)])


@_aten_fn(aten.ldexp.Tensor, _op("ldexp_"))
def _ldexp(em: Emitter, a: Args) -> Value:
    """torch: self * 2 ** other, in the result dtype."""
    out = em.out_dtype()
    scale = em.op("pow", [em.scalar(2.0, out), _operand(em, a["other"], out)])
    return em.op("mul", [_operand(em, a["self"], out), scale])


@_aten_fn(aten.round.decimals, _op("round_", "decimals"))
def _round_decimals(em: Emitter, a: Args) -> Value:
    """torch's kernel: nearbyint(x * 10^d) / 10^d for d > 0, else
    nearbyint(x / 10^-d) * 10^-d, with 10^|d| in the tensor's dtype."""
    x = em.value(a["self"])
    decimals = int(a["decimals"])
    dtype = em.type(x).dtype
    if not dtype.is_float:
        raise Unsupported("round with decimals of an integer tensor")
    factor = em.scalar(10.0 ** abs(decimals), dtype)
    if decimals > 0:
        return em.op("div", [em.op("round", [em.op("mul", [x, factor])]), factor])
    return em.op("mul", [em.op("round", [em.op("div", [x, factor])]), factor])


# -- elementwise: binary --------------------------------------------------------------


def _scaled(em: Emitter, value: Any, alpha: Any, dtype: DType) -> Any:
    if alpha is None or alpha == 1:
        return value
    if _is_python_number(value):
        return value * alpha
    return _binary(em, "mul", value, alpha, dtype)


@_aten_fn(aten.add.Tensor, aten.add_.Tensor, aten.add.Scalar, _op("add_", "Scalar"))
def _add(em: Emitter, a: Args) -> Value:
    dtype = em.out_dtype()
    return _binary(em, "add", a["self"], _scaled(em, a["other"], a.get("alpha"), dtype), dtype)


@_aten_fn(aten.sub.Tensor, aten.sub_.Tensor, aten.sub.Scalar, _op("sub_", "Scalar"))
def _sub(em: Emitter, a: Args) -> Value:
    dtype = em.out_dtype()
    return _binary(em, "sub", a["self"], _scaled(em, a["other"], a.get("alpha"), dtype), dtype)


@_aten_fn(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(em: Emitter, a: Args) -> Value:
    dtype = em.out_dtype()
    return _binary(em, "sub", a["other"], _scaled(em, a["self"], a.get("alpha"), dtype), dtype)


@_aten_fn(aten.mul.Tensor, aten.mul_.Tensor, aten.mul.Scalar, _op("mul_", "Scalar"))
def _mul(em: Emitter, a: Args) -> Value:
    return _binary(em, "mul", a["self"], a["other"])


@_aten_fn(aten.div.Tensor, aten.div_.Tensor, aten.div.Scalar, _op("div_", "Scalar"),
          aten.div.Tensor_mode, _op("div_", "Tensor_mode"), aten.div.Scalar_mode)
def _div(em: Emitter, a: Args) -> Value:
    return _divide(em, a["self"], a["other"], a.get("rounding_mode"))


def _divide(em: Emitter, x: Any, y: Any, mode: str | None) -> Value:
    out = em.out_dtype()
    if mode is None:
        return _binary(em, "div", x, y, out)
    if mode == "floor":
        return _binary(em, "floor_div", x, y, out)
    if mode == "trunc":
        if not out.is_float:
            q = _binary(em, "div", x, y, DType.FLOAT64)
            q = em.op("where", [em.op("less", [q, em.scalar(0.0, DType.FLOAT64)]),
                                em.op("ceil", [q]), em.op("floor", [q])])
            return em.cast(q, out)
        q = _binary(em, "div", x, y, out)
        return em.op("where", [em.op("less", [q, em.scalar(0.0, out)]), em.op("ceil", [q]),
                               em.op("floor", [q])])
    raise Unsupported(f"rounding_mode {mode!r}")


@_aten_fn(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(em: Emitter, a: Args) -> Value:
    return _binary(em, "floor_div", a["self"], a["other"])


@_aten_fn(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(em: Emitter, a: Args) -> Value:
    return _binary(em, "mod", a["self"], a["other"])


@_aten_fn(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar,
          _op("pow_", "Scalar"), _op("pow_", "Tensor"))
def _pow(em: Emitter, a: Args) -> Value:
    base = a["self"]
    exponent = a["exponent"]
    out = em.out_dtype()
    if isinstance(exponent, int | float) and not isinstance(exponent, bool):
        xv = em.cast(em.value(base), out)
        if exponent == 2:
            return em.op("mul", [xv, xv])
        if exponent == 1:
            return em.op("identity", [xv])
        if exponent == 0.5:
            return em.op("sqrt", [xv])
        if exponent == -1:
            return em.op("reciprocal", [xv])
    return _binary(em, "pow", base, exponent, out)


@_aten_fn(aten.maximum.default)
def _maximum(em: Emitter, a: Args) -> Value:
    return _binary(em, "maximum", a["self"], a["other"])


@_aten_fn(aten.minimum.default)
def _minimum(em: Emitter, a: Args) -> Value:
    return _binary(em, "minimum", a["self"], a["other"])


_COMPARISONS = {
    "equal": [aten.eq.Tensor, aten.eq.Scalar], "not_equal": [aten.ne.Tensor, aten.ne.Scalar],
    "less": [aten.lt.Tensor, aten.lt.Scalar], "less_equal": [aten.le.Tensor, aten.le.Scalar],
    "greater": [aten.gt.Tensor, aten.gt.Scalar],
    "greater_equal": [aten.ge.Tensor, aten.ge.Scalar],
}


def _comparison(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return _compare(em, name, a["self"], a["other"])
    return fn


for _name, _ops in _COMPARISONS.items():
    _aten_fn(*_ops)(_comparison(name=_name))


def _logical(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.cast(em.value(a["self"]), DType.BOOL)
        y = em.cast(em.value(a["other"], DType.BOOL), DType.BOOL)
        return em.op(name, [x, y])
    return fn


_aten_fn(aten.logical_and.default)(_logical("logical_and"))
_aten_fn(aten.logical_or.default)(_logical("logical_or"))
_aten_fn(aten.logical_xor.default)(_logical("logical_xor"))


def bitwise(em: Emitter, name: str, x: Any, y: Any) -> Value:
    """torch's `x & y`, `x | y`, `x ^ y` (name: and / or / xor): logical on booleans,
    bitwise on integers of the promoted type."""
    out = em.out_dtype()
    if out == DType.BOOL:
        return _logical(f"logical_{name}")(em, {"self": x, "other": y})
    if not out.is_integer:
        raise Unsupported(f"bitwise_{name} of {out.short}")
    return _binary(em, f"bitwise_{name}", x, y, out)


def shift(em: Emitter, left: bool, x: Any, y: Any) -> Value:
    """torch's `x << y` / `x >> y` on integers of the promoted type. torch shifts an
    amount that is negative or at least the bit width to 0 (left) or to all sign bits
    (right), as the IR's shifts do with the amount read unsigned; a right shift is
    arithmetic on signed types and logical on unsigned ones (uint8: zeros come in)."""
    out = em.out_dtype()
    if not out.is_integer:
        raise Unsupported(f"bit shift of {out.short}")
    name = "shift_left" if left else (
        "shift_right_logical" if out.numpy.kind == "u" else "shift_right_arithmetic")
    return _binary(em, name, x, y, out)


def _bitwise(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return bitwise(em, name, a["self"], a["other"])
    return fn


def _shift(left: bool) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return shift(em, left, a["self"], a["other"])
    return fn


def _overloads(names: tuple[str, ...], overloads: tuple[str, ...]) -> list[Any]:
    return [_op(n, o) for n in names for o in overloads]


# the functional ops, their in-place forms (x &= y, x.bitwise_and_(y)) and operator aliases
_TENSOR_SCALAR = ("Tensor", "Scalar", "Scalar_Tensor", "Tensor_Scalar")
for _word in ("and", "or", "xor"):
    _aten_fn(*_overloads((f"bitwise_{_word}", f"bitwise_{_word}_", f"__{_word}__",
                          f"__i{_word}__"), _TENSOR_SCALAR))(_bitwise(_word))
_aten_fn(*_overloads(("bitwise_left_shift", "bitwise_left_shift_", "__lshift__",
                      "__ilshift__"), _TENSOR_SCALAR))(_shift(True))
_aten_fn(*_overloads(("bitwise_right_shift", "bitwise_right_shift_", "__rshift__",
                      "__irshift__"), _TENSOR_SCALAR))(_shift(False))
_aten_fn(_op("bitwise_not_"))(_bitwise_not)


@_aten_fn(aten.where.self, _op("where", "ScalarSelf"), _op("where", "ScalarOther"),
          _op("where", "Scalar"))
def _where(em: Emitter, a: Args) -> Value:
    out = em.out_dtype()
    cond = em.cast(em.value(a["condition"]), DType.BOOL)
    return em.op("where", [cond, _operand(em, a["self"], out), _operand(em, a["other"], out)])


@_aten_fn(aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.masked_fill_.Scalar,
          aten.masked_fill_.Tensor)
def _masked_fill(em: Emitter, a: Args) -> Value:
    out = em.out_dtype()
    mask = em.cast(em.value(a["mask"]), DType.BOOL)
    return em.op("where", [mask, _operand(em, a["value"], out), _operand(em, a["self"], out)])


# -- casts, copies and no-ops -----------------------------------------------------------


@_aten_fn(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device,
          aten.to.other, aten.type_as.default, _op("_autocast_to_reduced_precision"),
          _op("_autocast_to_full_precision"), aten.to.prim_Device, aten.to.prim_dtype)
def _to(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.cast(x, em.out_dtype())


@_aten_fn(aten.clone.default, aten.alias.default, aten.detach.default, aten.detach_.default,
          aten.lift_fresh_copy.default, aten.contiguous.default, _op("lift_fresh"),
          aten.positive.default,
          aten.resolve_conj.default, aten.resolve_neg.default, _op("_conj"),
          aten.view_as.default if hasattr(aten, "view_as") else None)
def _no_op(em: Emitter, a: Args) -> Value:
    x = a["self"] if "self" in a else a["input"]
    v = em.value(x)
    if "other" in a and isinstance(a["other"], Value):  # view_as
        return _reshape_to(em, v, em.out_shape())
    return v


@_aten_fn(aten.dropout.default, aten.dropout_.default, aten.feature_dropout.default,
          aten.alpha_dropout.default, aten.feature_alpha_dropout.default,
          _op("feature_dropout_"), _op("alpha_dropout_"))
def _dropout(em: Emitter, a: Args) -> Value:
    return dropout(em, a["input"], a["p"], a["train"])


@_aten_fn(aten.native_dropout.default)
def _native_dropout(em: Emitter, a: Args) -> Any:
    x = dropout(em, a["input"], a["p"], a["train"])  # train=None: training
    mask = Deferred(lambda: em.op("full", [], shape=em.static_shape(x), value=1.0,
                                  dtype=DType.BOOL))
    return (x, mask)


def _nothing(em: Emitter, a: Args) -> None:
    return None


def _assert_scalar(em: Emitter, a: Args) -> None:
    """A runtime check torch.export emits on symbolic sizes (u0 <= numel, ...). A check
    the lowering decided (the comparison folded to True: the bounds the registry proved
    imply it) goes; one that fails at capture is refused, and one only the data can
    decide stays, as an opaque node holding the condition (the IR has no assert op)."""
    cond = a["self"]
    if isinstance(cond, torch.SymBool):
        cond = em.lowerer.owner.decide(cond)
    if cond is True or (isinstance(cond, int) and not isinstance(cond, bool) and cond != 0):
        return None
    if cond is False or cond == 0:
        raise Unsupported(f"the check always fails: {a.get('assert_msg', '')}")
    raise Unsupported("a runtime check on symbolic sizes that the IR cannot express")


if _op("_assert_scalar") is not None:
    ATEN[_op("_assert_scalar")] = _schema_handler(_op("_assert_scalar"), _assert_scalar)

for _assert in (_op("_assert_tensor_metadata"), _op("_assert_async"),
                _op("_assert_async", "msg"),
                _op("sym_constrain_range_for_size"), _op("sym_constrain_range"),
                _op("_functional_sym_constrain_range_for_size"),
                _op("_functional_assert_async", "msg"), _op("_functional_sym_constrain_range")):
    if _assert is not None:
        ATEN[_assert] = _schema_handler(_assert, _nothing)


@_aten_fn(aten.copy_.default, aten.copy.default)
def _copy_(em: Emitter, a: Args) -> Value:
    dst = em.value(a["self"])
    src = em.cast(em.value(a["src"]), em.type(dst).dtype)
    if em.shape(src) == em.shape(dst):
        return em.op("identity", [src])
    return _expand_to(em, src, em.shape(dst))


@_aten_fn(aten.sym_size.int)
def _sym_size(em: Emitter, a: Args) -> Any:
    meta = em.meta
    if isinstance(meta, int):
        return int(meta)
    if isinstance(meta, torch.SymInt) and getattr(meta.node.expr, "is_number", False):
        return int(meta.node.expr)
    x = em.value(a["self"])
    return em.size_of(x, _axis(int(a["dim"]), em.rank(x)))


@_aten_fn(_op("sym_storage_offset"))
def _sym_storage_offset(em: Emitter, a: Args) -> Any:
    """A view's storage offset. The IR has no storage (each value is its own array), so
    nothing computes it; torch's only use is its range check (>= 0), which holds by
    definition: the symbol stays a Python value with that range."""
    meta = em.meta
    if isinstance(meta, int):
        return int(meta)
    if not isinstance(meta, torch.SymInt):
        raise Unsupported("storage offset without an example value")
    em.lowerer.owner.assume(meta, f"{em.name}_offset", 0, None)
    return meta


@_aten_fn(_op("sym_numel"))
def _sym_numel(em: Emitter, a: Args) -> Any:
    meta = em.meta
    if isinstance(meta, int):
        return int(meta)
    x = em.value(a["self"])
    n = em.op("shape_of", [x])
    return Sym(em.op("reduce_prod", [n]), None)
