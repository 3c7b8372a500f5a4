"""Lowerings of neutral ops to StableHLO, one function per op (table `LOWERINGS`).

Each lowering gets the emitted operands (`Sym`s of static type), the node's resolved
attributes and its output types, and returns one `Sym` per output. Ops StableHLO has
map directly (convolution, dot_general, reduce, reduce_window, gather, scatter, sort,
batch_norm_inference, ...); ops with a registry decomposition and no better direct form
(gemm, attention, embedding, adaptive_avg_pool) go through `schema.decompose`
(see export.py); the rest are short op sequences written here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from irbridge.dtypes import NARROW_FLOATS, DType
from irbridge.ir import Node
from irbridge.ops.nn import _resize_taps, _Window

from ._emitter import Emitter, Shape, Sym, TypeSpec, identity_of, int_list, ints, padding_attr


class Unsupported(Exception):
    """The node cannot be expressed (message says why); export raises ExportError."""


@dataclass
class Lowering:
    em: Emitter
    node: Node
    xs: list[Sym | None]
    attrs: dict[str, Any]
    outs: list[TypeSpec]

    def x(self, index: int = 0) -> Sym:
        value = self.xs[index] if index < len(self.xs) else None
        if value is None:
            raise Unsupported(f"input {index} is missing")
        return value

    def opt(self, index: int) -> Sym | None:
        return self.xs[index] if index < len(self.xs) else None

    @property
    def out(self) -> TypeSpec:
        return self.outs[0]

    @property
    def out_dtype(self) -> DType:
        return self.outs[0][0]

    @property
    def out_shape(self) -> Shape:
        return self.outs[0][1]


LowerFn = Callable[[Lowering], list[Sym]]
LOWERINGS: dict[str, LowerFn] = {}


def lowers(*names: str) -> Callable[[LowerFn], LowerFn]:
    def register(fn: LowerFn) -> LowerFn:
        for name in names:
            LOWERINGS[name] = fn
        return fn
    return register


def _axis(axis: int, rank: int) -> int:
    return axis % rank if rank else 0


# -- elementwise -------------------------------------------------------------------------------

_UNARY = {"neg": "stablehlo.negate", "abs": "stablehlo.abs", "exp": "stablehlo.exponential",
          "log": "stablehlo.log", "sqrt": "stablehlo.sqrt", "rsqrt": "stablehlo.rsqrt",
          "sin": "stablehlo.sine", "cos": "stablehlo.cosine", "tan": "stablehlo.tan",
          "floor": "stablehlo.floor", "ceil": "stablehlo.ceil",
          "round": "stablehlo.round_nearest_even", "sign": "stablehlo.sign",
          "tanh": "stablehlo.tanh", "sigmoid": "stablehlo.logistic"}
_FLOAT_ONLY = {"floor", "ceil", "round"}


@lowers(*_UNARY)
def _unary(lw: Lowering) -> list[Sym]:
    x = lw.x()
    if x.dtype in _COMPLEX and lw.node.op not in _FLOAT_ONLY:  # StableHLO's complex forms
        return [lw.em.op(_UNARY[lw.node.op], [x], lw.out_dtype, x.shape)]
    if lw.node.op in _FLOAT_ONLY and not x.dtype.is_float:
        return [x]
    if not x.dtype.is_float and lw.node.op not in ("neg", "abs", "sign"):
        x = lw.em.convert(x, DType.FLOAT32)
        return [lw.em.convert(lw.em.unary(_UNARY[lw.node.op], x), lw.out_dtype)]
    return [lw.em.unary(_UNARY[lw.node.op], x)]


_COMPLEX = (DType.COMPLEX64, DType.COMPLEX128)
_REAL_OF = {DType.COMPLEX64: DType.FLOAT32, DType.COMPLEX128: DType.FLOAT64}


def _complex_of(em: Emitter, re: Sym, im: Sym, dtype: DType) -> Sym:
    re, im = em.to_common([re, im], _REAL_OF[dtype])
    return em.op("stablehlo.complex", [re, im], dtype, re.shape)


def _part(em: Emitter, op: str, x: Sym) -> Sym:
    return em.op(op, [x], _REAL_OF[x.dtype], x.shape)


@lowers("complex")
def _complex(lw: Lowering) -> list[Sym]:
    return [_complex_of(lw.em, lw.x(0), lw.x(1), lw.out_dtype)]


@lowers("polar")
def _polar(lw: Lowering) -> list[Sym]:
    em = lw.em
    r, theta = em.to_common([lw.x(0), lw.x(1)], _REAL_OF[lw.out_dtype])
    return [_complex_of(em, em.mul(r, em.unary("stablehlo.cosine", theta)),
                        em.mul(r, em.unary("stablehlo.sine", theta)), lw.out_dtype)]


@lowers("real", "imag", "complex_abs")
def _to_real(lw: Lowering) -> list[Sym]:
    op = {"real": "stablehlo.real", "imag": "stablehlo.imag", "complex_abs": "stablehlo.abs"}
    return [_part(lw.em, op[lw.node.op], lw.x())]


@lowers("conj")
def _conj(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    return [_complex_of(em, _part(em, "stablehlo.real", x),
                        em.unary("stablehlo.negate", _part(em, "stablehlo.imag", x)), x.dtype)]


@lowers("angle")
def _angle(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    return [_atan2(em, _part(em, "stablehlo.imag", x), _part(em, "stablehlo.real", x))]


@lowers("view_as_real")
def _view_as_real(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    parts = [em.reshape(_part(em, op, x), (*x.shape, 1))
             for op in ("stablehlo.real", "stablehlo.imag")]
    return [em.concat(parts, x.rank)]


@lowers("view_as_complex")
def _view_as_complex(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    re, im = (em.reshape(em.slice_axis(x, x.rank - 1, i, i + 1), x.shape[:-1])
              for i in (0, 1))
    return [_complex_of(em, re, im, lw.out_dtype)]


@lowers("identity")
def _identity(lw: Lowering) -> list[Sym]:
    return [lw.x()]


@lowers("logical_not")
def _logical_not(lw: Lowering) -> list[Sym]:
    return [lw.em.unary("stablehlo.not", lw.em.convert(lw.x(), DType.BOOL))]


@lowers("reciprocal")
def _reciprocal(lw: Lowering) -> list[Sym]:
    x = lw.x()
    return [lw.em.div(lw.em.scalar_like(1, x), x)]


@lowers("isnan")
def _isnan(lw: Lowering) -> list[Sym]:
    x = lw.x()
    if not x.dtype.is_float:
        return [lw.em.splat(False, DType.BOOL, x.shape)]
    return [lw.em.compare("NE", x, x)]


@lowers("isinf")
def _isinf(lw: Lowering) -> list[Sym]:
    x = lw.x()
    if not x.dtype.is_float:
        return [lw.em.splat(False, DType.BOOL, x.shape)]
    return [lw.em.compare("EQ", lw.em.unary("stablehlo.abs", x), lw.em.scalar_like(np.inf, x))]


_ERF_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
              -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
              -1.60960333262415e-02)
_ERF_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
             -7.37332916720468e-03, -1.42647390514189e-02)


def erf(em: Emitter, x: Sym) -> Sym:
    """XLA's float32 rational approximation of erf (|error| < 1e-7 in f32): x clamped to
    [-4, 4], x * P(x^2) / Q(x^2), clamped to [-1, 1]."""
    x = em.op("stablehlo.clamp", [em.splat(-4.0, x.dtype), x, em.splat(4.0, x.dtype)],
              x.dtype, x.shape)
    x2 = em.mul(x, x)

    def horner(coefficients: tuple[float, ...]) -> Sym:
        acc = em.scalar_like(coefficients[0], x)
        for c in coefficients[1:]:
            acc = em.add_scalar(em.mul(acc, x2), c)
        return acc

    y = em.div(em.mul(x, horner(_ERF_ALPHA)), horner(_ERF_BETA))
    return em.op("stablehlo.clamp", [em.splat(-1.0, x.dtype), y, em.splat(1.0, x.dtype)],
                 x.dtype, x.shape)


@lowers("erf")
def _erf(lw: Lowering) -> list[Sym]:
    return [erf(lw.em, lw.x())]


@lowers("relu")
def _relu(lw: Lowering) -> list[Sym]:
    x = lw.x()
    return [lw.em.maximum(x, lw.em.scalar_like(0, x))]


@lowers("gelu")
def _gelu(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    if lw.attrs["approximate"] == "tanh":
        cube = em.mul(em.mul(x, x), x)
        inner = em.mul_scalar(em.add(x, em.mul_scalar(cube, 0.044715)), math.sqrt(2 / math.pi))
        gate = em.add_scalar(em.unary("stablehlo.tanh", inner), 1.0)
    else:
        gate = em.add_scalar(erf(em, em.mul_scalar(x, 1 / math.sqrt(2))), 1.0)
    return [em.mul(em.mul_scalar(x, 0.5), gate)]


@lowers("silu")
def _silu(lw: Lowering) -> list[Sym]:
    x = lw.x()
    return [lw.em.mul(x, lw.em.unary("stablehlo.logistic", x))]


def _softplus(em: Emitter, x: Sym) -> Sym:
    """log(1 + exp(x)) computed stably: max(x, 0) + log1p(exp(-|x|))."""
    tail = em.unary("stablehlo.log_plus_one", em.unary(
        "stablehlo.exponential", em.unary("stablehlo.negate", em.unary("stablehlo.abs", x))))
    return em.add(em.maximum(x, em.scalar_like(0, x)), tail)


@lowers("softplus")
def _softplus_op(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    beta, threshold = lw.attrs["beta"], lw.attrs["threshold"]
    bx = em.mul_scalar(x, beta) if beta != 1.0 else x
    soft = _softplus(em, bx)
    if beta != 1.0:
        soft = em.mul_scalar(soft, 1 / beta)
    return [em.select(em.compare("GT", bx, em.scalar_like(threshold, bx)), x, soft)]


@lowers("mish")
def _mish(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    return [em.mul(x, em.unary("stablehlo.tanh", _softplus(em, x)))]


def _clamp(em: Emitter, lo: float, x: Sym, hi: float) -> Sym:
    return em.op("stablehlo.clamp", [em.splat(lo, x.dtype), x, em.splat(hi, x.dtype)],
                 x.dtype, x.shape)


@lowers("hardswish")
def _hardswish(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    return [em.mul_scalar(em.mul(x, _clamp(em, 0.0, em.add_scalar(x, 3.0), 6.0)), 1 / 6)]


@lowers("hardsigmoid")
def _hardsigmoid(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    return [_clamp(em, 0.0, em.add_scalar(em.mul_scalar(x, lw.attrs["alpha"]),
                                          lw.attrs["beta"]), 1.0)]


@lowers("leaky_relu")
def _leaky_relu(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    return [em.select(em.compare("GE", x, em.scalar_like(0, x)), x,
                      em.mul_scalar(x, lw.attrs["alpha"]))]


@lowers("elu")
def _elu(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    neg = em.mul_scalar(em.unary("stablehlo.exponential_minus_one",
                                 em.minimum(x, em.scalar_like(0, x))), lw.attrs["alpha"])
    return [em.select(em.compare("GT", x, em.scalar_like(0, x)), x, neg)]


@lowers("prelu")
def _prelu(lw: Lowering) -> list[Sym]:
    em = lw.em
    x, slope = em.to_common([lw.x(0), lw.x(1)], lw.out_dtype)
    return [em.select(em.compare("GE", x, em.scalar_like(0, x)), x, em.mul(slope, x))]


_BINARY = {"add": "stablehlo.add", "sub": "stablehlo.subtract", "mul": "stablehlo.multiply",
           "div": "stablehlo.divide", "pow": "stablehlo.power", "maximum": "stablehlo.maximum",
           "minimum": "stablehlo.minimum",
           # bitwise ops (irbridge/ops/bitwise.py): StableHLO's own semantics
           "bitwise_and": "stablehlo.and", "bitwise_or": "stablehlo.or",
           "bitwise_xor": "stablehlo.xor", "shift_left": "stablehlo.shift_left",
           "shift_right_logical": "stablehlo.shift_right_logical",
           "shift_right_arithmetic": "stablehlo.shift_right_arithmetic"}


@lowers(*_BINARY)
def _binary(lw: Lowering) -> list[Sym]:
    return [lw.em.binary(_BINARY[lw.node.op], lw.x(0), lw.x(1), lw.out_dtype)]


_LOGICAL = {"logical_and": "stablehlo.and", "logical_or": "stablehlo.or",
            "logical_xor": "stablehlo.xor"}


@lowers(*_LOGICAL)
def _logical(lw: Lowering) -> list[Sym]:
    return [lw.em.binary(_LOGICAL[lw.node.op], lw.x(0), lw.x(1), DType.BOOL)]


_COMPARE = {"equal": "EQ", "not_equal": "NE", "less": "LT", "less_equal": "LE",
            "greater": "GT", "greater_equal": "GE"}


@lowers(*_COMPARE)
def _compare(lw: Lowering) -> list[Sym]:
    return [lw.em.compare(_COMPARE[lw.node.op], lw.x(0), lw.x(1))]


def _sign_differs(em: Emitter, r: Sym, b: Sym) -> Sym:
    """r != 0 and sign(r) != sign(b): where fmod-style results need a floor correction."""
    zero = em.scalar_like(0, r)
    differs = em.binary("stablehlo.xor", em.compare("LT", r, zero),
                        em.compare("LT", b, em.scalar_like(0, b)), DType.BOOL)
    return em.binary("stablehlo.and", em.compare("NE", r, zero), differs, DType.BOOL)


@lowers("mod")
def _mod(lw: Lowering) -> list[Sym]:
    em = lw.em
    a, b = em.to_common([lw.x(0), lw.x(1)], lw.out_dtype)
    r = em.op("stablehlo.remainder", [a, b], a.dtype, a.shape)
    return [em.select(_sign_differs(em, r, b), em.add(r, b), r)]


@lowers("floor_div")
def _floor_div(lw: Lowering) -> list[Sym]:
    em = lw.em
    a, b = em.to_common([lw.x(0), lw.x(1)], lw.out_dtype)
    if a.dtype.is_float:
        return [em.unary("stablehlo.floor", em.div(a, b))]
    q = em.div(a, b)
    r = em.op("stablehlo.remainder", [a, b], a.dtype, a.shape)
    return [em.select(_sign_differs(em, r, b), em.sub(q, em.scalar_like(1, q)), q)]


@lowers("where")
def _where(lw: Lowering) -> list[Sym]:
    return [lw.em.select(lw.x(0), lw.x(1), lw.x(2))]


@lowers("cast")
def _cast(lw: Lowering) -> list[Sym]:
    return [lw.em.convert(lw.x(), lw.attrs["dtype"])]


@lowers("clip")
def _clip(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    y = x
    lo_in, hi_in = lw.opt(1), lw.opt(2)
    lo, hi = lw.attrs["min"], lw.attrs["max"]
    if x.dtype.is_integer:  # the reference casts the bounds to x's dtype
        lo = int(max(lo, np.iinfo(x.dtype.numpy).min)) if lo_in is None and lo > -np.inf else lo
        hi = int(min(hi, np.iinfo(x.dtype.numpy).max)) if hi_in is None and hi < np.inf else hi
    if lo_in is not None:
        y = em.maximum(y, em.convert(lo_in, x.dtype))
    elif lo > -np.inf:
        y = em.maximum(y, em.scalar_like(lo, x))
    if hi_in is not None:
        y = em.minimum(y, em.convert(hi_in, x.dtype))
    elif hi < np.inf:
        y = em.minimum(y, em.scalar_like(hi, x))
    return [y]


# -- matmul and convolution --------------------------------------------------------------------

@lowers("matmul")
def _matmul(lw: Lowering) -> list[Sym]:
    em, (dtype, out_shape) = lw.em, lw.out
    a, b = em.convert(lw.x(0), dtype), em.convert(lw.x(1), dtype)
    if a.rank == 1:
        a = em.reshape(a, (1, a.shape[0]))
    if b.rank == 1:
        b = em.reshape(b, (b.shape[0], 1))
    if a.shape[-1] == 0:  # an empty sum: zeros (the interpreter aborts on such a dot_general)
        return [em.splat(0, dtype, tuple(int(d) for d in out_shape))]
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    if not batch_b:  # [..., M, K] x [K, N]: one dot_general, no broadcast
        y = em.dot_general(a, b, [], [], [a.rank - 1], [0])
    elif not batch_a:  # [M, K] x [..., K, N] -> [M, ..., N], then move M
        nb = len(batch_b)
        y = em.dot_general(a, b, [], [], [1], [nb])
        y = em.transpose(y, (*range(1, nb + 1), 0, nb + 1))
    else:
        batch = tuple(int(d) for d in np.broadcast_shapes(batch_a, batch_b))
        a = em.broadcast(a, (*batch, *a.shape[-2:]))
        b = em.broadcast(b, (*batch, *b.shape[-2:]))
        nb = len(batch)
        y = em.dot_general(a, b, range(nb), range(nb), [nb + 1], [nb])
    return [em.reshape(y, out_shape)]


@lowers("linear")
def _linear(lw: Lowering) -> list[Sym]:
    em, dtype = lw.em, lw.out_dtype
    x, w = em.convert(lw.x(0), dtype), em.convert(lw.x(1), dtype)
    y = em.dot_general(x, w, [], [], [x.rank - 1], [1])
    b = lw.opt(2)
    return [y if b is None else em.add(y, em.convert(b, dtype))]


def _conv_dims(d: int) -> str:
    spatial = ", ".join(str(i) for i in range(d))
    return f"#stablehlo.conv<[b, f, {spatial}]x[o, i, {spatial}]->[b, f, {spatial}]>"


def convolution(em: Emitter, x: Sym, w: Sym, out_shape: Shape, strides: list[int],
                padding: list[tuple[int, int]], lhs_dilation: list[int],
                rhs_dilation: list[int], groups: int, kernel_layout: str = "o, i") -> Sym:
    d = x.rank - 2
    spatial = ", ".join(str(i) for i in range(d))
    dims = (f"#stablehlo.conv<[b, f, {spatial}]x[{kernel_layout}, {spatial}]->"
            f"[b, f, {spatial}]>")
    return em.op("stablehlo.convolution", [x, w], x.dtype, out_shape,
                 f"batch_group_count = 1 : i64, dimension_numbers = {dims}, "
                 f"feature_group_count = {groups} : i64, lhs_dilation = {ints(lhs_dilation)}, "
                 f"padding = {padding_attr(padding)}, rhs_dilation = {ints(rhs_dilation)}, "
                 f"window_strides = {ints(strides)}")


def _bias(em: Emitter, y: Sym, b: Sym | None) -> Sym:
    if b is None:
        return y
    return em.add(y, em.broadcast_in_dim(em.convert(b, y.dtype), y.shape, [1]))


@lowers("conv")
def _conv(lw: Lowering) -> list[Sym]:
    em, (dtype, out_shape) = lw.em, lw.out
    x, w = em.convert(lw.x(0), dtype), em.convert(lw.x(1), dtype)
    window = _Window.of(lw.attrs, w.shape[2:], "")
    pads = list(zip(window.begins, window.ends, strict=True))
    y = convolution(em, x, w, out_shape, list(window.strides), pads, [1] * (x.rank - 2),
                    list(window.dilations), lw.attrs["groups"])
    return [_bias(em, y, lw.opt(2))]


@lowers("conv_transpose")
def _conv_transpose(lw: Lowering) -> list[Sym]:
    """A convolution of the input dilated by the strides with the flipped kernel, its
    in/out feature dims swapped (per group), padded by dilation * (k - 1) - pads."""
    em, (dtype, out_shape) = lw.em, lw.out
    x, w = em.convert(lw.x(0), dtype), em.convert(lw.x(1), dtype)
    g, d = lw.attrs["groups"], x.rank - 2
    window = _Window.of(lw.attrs, w.shape[2:], "")
    out_pad = list(lw.attrs["output_padding"] or [0] * d)
    cin, cout_g, kernel = w.shape[0], w.shape[1], w.shape[2:]
    if g == 1:
        layout = "i, o"
    else:
        w = em.reshape(w, (g, cin // g, cout_g, *kernel))
        w = em.transpose(w, (0, 2, 1, *range(3, 3 + d)))
        w = em.reshape(w, (g * cout_g, cin // g, *kernel))
        layout = "o, i"
    w = em.reverse(w, range(2, 2 + d))
    padding = []
    for i in range(d):
        span = window.dilations[i] * (kernel[i] - 1)
        padding.append((span - window.begins[i], span - window.ends[i] + out_pad[i]))
    y = convolution(em, x, w, out_shape, [1] * d, padding, list(window.strides),
                    list(window.dilations), g, layout)
    return [_bias(em, y, lw.opt(2))]


@lowers("batch_norm")
def _batch_norm(lw: Lowering) -> list[Sym]:
    """(x - mean) / sqrt(var + eps) * scale + bias, folded per channel as the reference
    does (the reference interpreter has no batch_norm_inference)."""
    em, dtype = lw.em, lw.out_dtype
    x, scale, bias, mean, var = (em.convert(lw.x(i), dtype) for i in range(5))
    a = em.div(scale, em.unary("stablehlo.sqrt", em.add_scalar(var, lw.attrs["epsilon"])))
    shift = em.sub(bias, em.mul(mean, a))
    return [em.add(em.mul(x, em.broadcast_in_dim(a, x.shape, [1])),
                   em.broadcast_in_dim(shift, x.shape, [1]))]


# -- normalisation and softmax -----------------------------------------------------------------

def _mean(em: Emitter, x: Sym, axes: list[int]) -> Sym:
    count = math.prod(x.shape[a] for a in axes)
    return em.mul_scalar(em.reduce(x, axes, "add", keepdims=True), 1 / count) if count else \
        em.reduce(x, axes, "add", keepdims=True)


def _normalise(em: Emitter, x: Sym, axes: list[int], epsilon: float) -> Sym:
    centred = em.sub(x, _mean(em, x, axes))
    variance = _mean(em, em.mul(centred, centred), axes)
    return em.mul(centred, em.unary("stablehlo.rsqrt", em.add_scalar(variance, epsilon)))


@lowers("layer_norm")
def _layer_norm(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    axes = list(range(_axis(lw.attrs["axis"], x.rank), x.rank))
    y = _normalise(em, x, axes, lw.attrs["epsilon"])
    scale, bias = lw.opt(1), lw.opt(2)
    if scale is not None:
        y = em.mul(y, em.convert(scale, y.dtype))
    if bias is not None:
        y = em.add(y, em.convert(bias, y.dtype))
    return [y]


@lowers("rms_norm")
def _rms_norm(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    axes = list(range(_axis(lw.attrs["axis"], x.rank), x.rank))
    mean_square = _mean(em, em.mul(x, x), axes)
    y = em.mul(x, em.unary("stablehlo.rsqrt", em.add_scalar(mean_square, lw.attrs["epsilon"])))
    scale = lw.opt(1)
    return [y if scale is None else em.mul(y, em.convert(scale, y.dtype))]


@lowers("group_norm")
def _group_norm(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    groups = lw.attrs["num_groups"]
    grouped = em.reshape(x, (x.shape[0], groups, x.numel // (x.shape[0] * groups)))
    y = em.reshape(_normalise(em, grouped, [2], lw.attrs["epsilon"]), x.shape)
    scale, bias = lw.opt(1), lw.opt(2)
    if scale is not None:
        y = em.mul(y, em.broadcast_in_dim(em.convert(scale, y.dtype), y.shape, [1]))
    if bias is not None:
        y = em.add(y, em.broadcast_in_dim(em.convert(bias, y.dtype), y.shape, [1]))
    return [y]


@lowers("softmax", "log_softmax")
def _softmax(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    axis = _axis(lw.attrs["axis"], x.rank)
    peak = em.expand_reduced(em.reduce(x, [axis], "max"), x.shape, [axis])
    shifted = em.sub(x, peak)
    exp = em.unary("stablehlo.exponential", shifted)
    total = em.expand_reduced(em.reduce(exp, [axis], "add"), x.shape, [axis])
    if lw.node.op == "log_softmax":
        return [em.sub(shifted, em.unary("stablehlo.log", total))]
    y = em.div(exp, total)
    if lw.attrs.get("safe", False):  # rows of all -inf: 0, not NaN
        empty = em.compare("EQ", peak, em.scalar_like(-np.inf, peak))
        y = em.select(empty, em.scalar_like(0, y), y)
    return [y]


# -- reductions ----------------------------------------------------------------------------------

def _reduce_axes(lw: Lowering, x: Sym) -> list[int]:
    axes = lw.attrs["axes"]
    if not axes and lw.attrs.get("noop_with_empty_axes", False):
        return []
    return sorted({_axis(a, x.rank) for a in axes}) if axes else list(range(x.rank))


_REDUCE_KIND = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min",
                "reduce_prod": "mul"}


def _wide(em: Emitter, x: Sym) -> Sym:
    """Low-precision floats are reduced in float32, as the reference does."""
    if x.dtype in (DType.FLOAT16, DType.BFLOAT16) or x.dtype in NARROW_FLOATS:
        return em.convert(x, DType.FLOAT32)
    return x


@lowers(*_REDUCE_KIND, "reduce_mean", "reduce_l2", "reduce_log_sum_exp")
def _reduce(lw: Lowering) -> list[Sym]:
    em, x0 = lw.em, lw.x()
    x = _wide(em, x0)
    axes = _reduce_axes(lw, x)
    keep = bool(lw.attrs["keepdims"])
    op = lw.node.op
    if op in _REDUCE_KIND:
        kind = _REDUCE_KIND[op]
        if x.dtype is DType.BOOL:
            kind = {"add": "or", "mul": "and"}.get(kind, kind)
        y = em.reduce(x, axes, kind, keep)
    elif op == "reduce_mean":
        y = _mean(em, x, axes) if keep else em.reshape(_mean(em, x, axes), lw.out_shape)
    elif op == "reduce_l2":
        y = em.unary("stablehlo.sqrt", em.reduce(em.mul(x, x), axes, "add", keep))
    else:  # log-sum-exp, max subtracted
        peak = em.reduce(x, axes, "max", True)
        finite = em.select(em.compare("EQ", em.unary("stablehlo.abs", peak),
                                      em.scalar_like(np.inf, peak)), em.scalar_like(0, peak), peak)
        total = em.reduce(em.unary("stablehlo.exponential", em.sub(x, finite)), axes, "add", True)
        y = em.reshape(em.add(em.unary("stablehlo.log", total), finite), lw.out_shape)
    return [em.convert(em.reshape(y, lw.out_shape), lw.out_dtype)]


@lowers("argmax", "argmin")
def _arg_reduce(lw: Lowering) -> list[Sym]:
    """A two-operand reduce over (x, iota): the better value wins, ties go to the lower
    (or, with select_last_index, the higher) index; NaN counts as the extreme value."""
    em, x = lw.em, lw.x()
    axis = _axis(lw.attrs["axis"], x.rank)
    better = "GT" if lw.node.op == "argmax" else "LT"
    tie = "GT" if lw.attrs["select_last_index"] else "LT"
    index = em.iota(DType.INT64, x.shape, axis)
    init_value = em.splat(identity_of("max" if better == "GT" else "min", x.dtype), x.dtype)
    init_index = em.splat(0, DType.INT64)
    region = em.region([(x.dtype, ()), (DType.INT64, ()), (x.dtype, ()), (DType.INT64, ())])
    with region as (a, ai, b, bi):
        wins = em.compare(better, a, b)
        if x.dtype.is_float:
            wins = em.binary("stablehlo.or", wins, em.compare("NE", a, a), DType.BOOL)
            b_nan = em.compare("NE", b, b)
            wins = em.binary("stablehlo.and", wins, em.unary("stablehlo.not", b_nan), DType.BOOL)
            both_nan = em.binary("stablehlo.and", em.compare("NE", a, a), b_nan, DType.BOOL)
            same = em.binary("stablehlo.or", em.compare("EQ", a, b), both_nan, DType.BOOL)
        else:
            same = em.compare("EQ", a, b)
        earlier = em.binary("stablehlo.and", same, em.compare(tie, ai, bi), DType.BOOL)
        take = em.binary("stablehlo.or", wins, earlier, DType.BOOL)
        em.ret([em.select(take, a, b), em.select(take, ai, bi)])
    shape = [d for i, d in enumerate(x.shape) if i != axis]
    _, indices = em.emit("stablehlo.reduce", [x, index, init_value, init_index],
                         [(x.dtype, tuple(shape)), (DType.INT64, tuple(shape))],
                         f"dimensions = {ints([axis])}", [region.text])
    return [em.reshape(indices, lw.out_shape)]


@lowers("cumsum", "cumprod")
def _scan(lw: Lowering) -> list[Sym]:
    """A reduce_window whose window spans the whole axis, padded in front: a prefix scan."""
    em, x0 = lw.em, lw.x()
    x = _wide(em, x0)
    axis = _axis(lw.attrs["axis"], x.rank)
    kind = "add" if lw.node.op == "cumsum" else "mul"
    if x.dtype is DType.BOOL:
        raise Unsupported("a scan of booleans")
    n = x.shape[axis]
    if lw.attrs["reverse"]:
        x = em.reverse(x, [axis])
    if n == 0:
        return [x0]
    window = [1] * x.rank
    window[axis] = n
    padding = [(0, 0)] * x.rank
    padding[axis] = (n - 1, 0)
    y = em.reduce_window(x, kind, window, [1] * x.rank, padding)
    if lw.attrs["exclusive"]:
        low, high = [0] * x.rank, [0] * x.rank
        low[axis], high[axis] = 1, -1
        y = em.pad(y, em.splat(identity_of(kind, y.dtype), y.dtype), low, high)
    if lw.attrs["reverse"]:
        y = em.reverse(y, [axis])
    return [em.convert(y, lw.out_dtype)]


# -- pooling -----------------------------------------------------------------------------------

def _pool_geometry(lw: Lowering, x: Sym) -> tuple[_Window, list[tuple[int, int]]]:
    kernel = lw.attrs["kernel"]
    window = _Window.of(lw.attrs, kernel, "", default_strides=kernel)
    padding = [(0, 0), (0, 0)]
    for i, n in enumerate(x.shape[2:]):
        out = window.out_dim(i, n)
        assert isinstance(out, int)
        needed = (out - 1) * window.strides[i] + window.extent(i)
        padding.append((window.begins[i], max(0, needed - n - window.begins[i])))
    return window, padding


@lowers("max_pool")
def _max_pool(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    window, padding = _pool_geometry(lw, x)
    y = em.reduce_window(x, "max", [1, 1, *window.kernel], [1, 1, *window.strides], padding,  # type: ignore[list-item]
                         [1, 1, *window.dilations])
    return [y]


@lowers("avg_pool")
def _avg_pool(lw: Lowering) -> list[Sym]:
    """A windowed sum over the zero-padded input, divided by PyTorch's divisor (computed
    here exactly as the reference does, as a constant)."""
    em, x0 = lw.em, lw.x()
    x = _wide(em, x0)
    window, padding = _pool_geometry(lw, x)
    total = em.reduce_window(x, "add", [1, 1, *window.kernel], [1, 1, *window.strides],  # type: ignore[list-item]
                             padding, [1, 1, *window.dilations])
    divisor = np.ones(())  # the window taps inside the padded input (or the input)
    for axis, size in enumerate(x.shape[2:]):
        start = np.arange(total.shape[2 + axis]) * window.strides[axis] - window.begins[axis]
        taps = start[:, None] + window.dilations[axis] * np.arange(lw.attrs["kernel"][axis])
        low, high = (-window.begins[axis], size + window.ends[axis]) \
            if lw.attrs["count_include_pad"] else (0, size)
        divisor = np.multiply.outer(divisor, ((taps >= low) & (taps < high)).sum(axis=1))
    div = em.const(np.asarray(divisor, dtype=x.dtype.numpy), x.dtype)
    div = em.broadcast_in_dim(div, total.shape, range(2, total.rank)) if div.rank else \
        em.broadcast(div, total.shape)
    return [em.convert(em.div(total, div), lw.out_dtype)]


@lowers("adaptive_max_pool")
def _adaptive_max_pool(lw: Lowering) -> list[Sym]:
    em, y = lw.em, lw.x()
    sizes, outs = y.shape[2:], lw.attrs["output_size"]
    if all(n % o == 0 for n, o in zip(sizes, outs, strict=True)):
        kernel = [n // o for n, o in zip(sizes, outs, strict=True)]
        return [em.reduce_window(y, "max", [1, 1, *kernel], [1, 1, *kernel], [(0, 0)] * y.rank)]
    for axis, out in enumerate(outs, start=2):
        size = y.shape[axis]
        parts = []
        for i in range(out):
            start, end = i * size // out, -(-(i + 1) * size // out)
            parts.append(em.reduce(em.slice_axis(y, axis, start, end), [axis], "max", True))
        y = em.concat(parts, axis)
    return [y]


# -- shape ops -------------------------------------------------------------------------------------

@lowers("reshape", "flatten", "squeeze", "unsqueeze")
def _reshape(lw: Lowering) -> list[Sym]:
    return [lw.em.reshape(lw.x(), lw.out_shape)]


@lowers("permute")
def _permute(lw: Lowering) -> list[Sym]:
    return [lw.em.transpose(lw.x(), lw.attrs["perm"])]


@lowers("expand")
def _expand(lw: Lowering) -> list[Sym]:
    return [lw.em.broadcast(lw.x(), lw.out_shape)]


@lowers("shape_of", "constant", "full", "range")
def _fold(lw: Lowering) -> list[Sym]:
    """Ops whose value is known at export time (static shapes) become constants."""
    raise AssertionError("folded by the exporter")  # handled in export.py


@lowers("slice")
def _slice(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    starts, ends = lw.attrs["starts"], lw.attrs["ends"]
    axes = lw.attrs["axes"] or tuple(range(len(starts)))
    steps = lw.attrs["steps"] or (1,) * len(starts)
    lo, hi, stride = [0] * x.rank, list(x.shape), [1] * x.rank
    flip = []
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        a = _axis(axis, x.rank)
        n = x.shape[a]
        begin, stop, st = slice(start, end, step).indices(n)
        count = len(range(begin, stop, st))
        if count == 0:
            lo[a], hi[a], stride[a] = 0, 0, 1
            continue
        if st < 0:  # reverse the axis, then slice forwards
            flip.append(a)
            begin, st = n - 1 - begin, -st
        lo[a], hi[a], stride[a] = begin, begin + (count - 1) * st + 1, st
    return [em.slice(em.reverse(x, flip), lo, hi, stride)]


@lowers("concat")
def _concat(lw: Lowering) -> list[Sym]:
    em = lw.em
    xs = [em.convert(x, lw.out_dtype) for x in lw.xs if x is not None]
    axis = _axis(lw.attrs["axis"], xs[0].rank)
    xs = [x for x in xs if x.shape[axis] > 0] or xs[:1]
    return [em.concat(xs, axis)]


@lowers("split")
def _split(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    axis = _axis(lw.attrs["axis"], x.rank)
    outs, start = [], 0
    for size in lw.attrs["sizes"]:
        outs.append(em.slice_axis(x, axis, start, start + size))
        start += size
    return outs


@lowers("tile")
def _tile(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    repeats = lw.attrs["repeats"]
    wide = [v for r, d in zip(repeats, x.shape, strict=True) for v in (r, d)]
    y = em.broadcast_in_dim(x, wide, [2 * i + 1 for i in range(x.rank)])
    return [em.reshape(y, lw.out_shape)]


@lowers("trilu")
def _trilu(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    rows = em.iota(DType.INT64, x.shape, x.rank - 2)
    cols = em.iota(DType.INT64, x.shape, x.rank - 1)
    diff = em.sub(cols, rows)
    keep = em.compare("GE" if lw.attrs["upper"] else "LE", diff,
                      em.splat(lw.attrs["k"], DType.INT64, x.shape))
    return [em.select(keep, x, em.scalar_like(0, x))]


@lowers("pad")
def _pad(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    pads, mode, r = lw.attrs["pads"], lw.attrs["mode"], x.rank
    low, high = list(pads[:r]), list(pads[r:])
    if mode == "constant":
        fill = lw.opt(2)
        if fill is None or fill.const is not None:  # a constant is in the attributes
            value = em.splat(lw.attrs["value"], x.dtype)
        else:  # a run-time fill value (a one-element tensor)
            value = em.convert(em.reshape(fill, ()), x.dtype) if fill.dtype != x.dtype \
                else em.reshape(fill, ())
        return [em.pad(x, value, low, high)]
    # crop first (negative pads), then build each padded dim from slices
    x = em.pad(x, em.splat(0, x.dtype), [min(p, 0) for p in low], [min(p, 0) for p in high])
    for axis in range(r):
        b, e, n = max(low[axis], 0), max(high[axis], 0), x.shape[axis]
        if b == 0 and e == 0:
            continue
        parts = []
        if mode == "edge":
            if b:
                edge = em.slice_axis(x, axis, 0, 1)
                parts.append(em.broadcast_in_dim(edge, _with(x.shape, axis, b), range(r)))
            parts.append(x)
            if e:
                edge = em.slice_axis(x, axis, n - 1, n)
                parts.append(em.broadcast_in_dim(edge, _with(x.shape, axis, e), range(r)))
        elif mode == "reflect":
            if b:
                parts.append(em.reverse(em.slice_axis(x, axis, 1, b + 1), [axis]))
            parts.append(x)
            if e:
                parts.append(em.reverse(em.slice_axis(x, axis, n - 1 - e, n - 1), [axis]))
        else:  # wrap
            if b > n or e > n:
                raise Unsupported(f"wrap padding of {max(b, e)} exceeds dim {axis} ({n})")
            if b:
                parts.append(em.slice_axis(x, axis, n - b, n))
            parts.append(x)
            if e:
                parts.append(em.slice_axis(x, axis, 0, e))
        x = em.concat(parts, axis)
    return [x]


def _with(shape: Shape, axis: int, size: int) -> Shape:
    return (*shape[:axis], size, *shape[axis + 1:])


# -- gather and scatter ------------------------------------------------------------------------

def _wrap_indices(em: Emitter, idx: Sym, size: int) -> Sym:
    """Negative indices count from the back (numpy.take / torch.gather)."""
    if idx.dtype.name.startswith("UINT"):
        return idx
    if idx.const is not None:
        data = np.asarray(idx.const)
        if not np.any(data < 0):
            return idx
        return em.const(np.where(data < 0, data + size, data).astype(data.dtype), idx.dtype)
    neg = em.compare("LT", idx, em.scalar_like(0, idx))
    return em.select(neg, em.add(idx, em.scalar_like(size, idx)), idx)


def _gather_dims(**fields: list[int] | int) -> str:
    parts = []
    for name, value in fields.items():
        if isinstance(value, int):
            parts.append(f"{name} = {value}")
        elif value:
            parts.append(f"{name} = {int_list(value)}")
    return f"#stablehlo.gather<{', '.join(parts)}>"


@lowers("gather")
def _gather(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x(0)
    axis = _axis(lw.attrs["axis"], x.rank)
    idx = _wrap_indices(em, lw.x(1), x.shape[axis])
    r, ri = x.rank, idx.rank
    offset = [*range(axis), *range(axis + ri, ri + r - 1)]
    sizes = list(x.shape)
    sizes[axis] = 1
    dims = _gather_dims(offset_dims=offset, collapsed_slice_dims=[axis], start_index_map=[axis],
                        index_vector_dim=ri)
    return [em.op("stablehlo.gather", [x, idx], x.dtype, lw.out_shape,
                  f"dimension_numbers = {dims}, indices_are_sorted = false, "
                  f"slice_sizes = {ints(sizes)}")]


@lowers("gather_elements")
def _gather_elements(lw: Lowering) -> list[Sym]:
    """torch.gather: a gather whose every dim but `axis` is a batching dim."""
    em, x = lw.em, lw.x(0)
    axis = _axis(lw.attrs["axis"], x.rank)
    idx = _wrap_indices(em, lw.x(1), x.shape[axis])
    limits = [x.shape[d] if d == axis else idx.shape[d] for d in range(x.rank)]
    x = em.slice(x, [0] * x.rank, limits)  # y[i][j] reads x[idx][j] with j < idx.shape
    batch = [d for d in range(x.rank) if d != axis]
    dims = _gather_dims(collapsed_slice_dims=[axis], operand_batching_dims=batch,
                        start_indices_batching_dims=batch, start_index_map=[axis],
                        index_vector_dim=x.rank)
    return [em.op("stablehlo.gather", [x, idx], x.dtype, idx.shape,
                  f"dimension_numbers = {dims}, indices_are_sorted = false, "
                  f"slice_sizes = {ints([1] * x.rank)}")]


@lowers("scatter_elements")
def _scatter_elements(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x(0)
    axis = _axis(lw.attrs["axis"], x.rank)
    idx = _wrap_indices(em, lw.x(1), x.shape[axis])
    updates = em.convert(lw.x(2), x.dtype)
    r = x.rank
    if all(idx.shape[d] == x.shape[d] for d in range(r) if d != axis):
        batch = [d for d in range(r) if d != axis]
        fields = (f"inserted_window_dims = {int_list([axis])}, "
                  f"input_batching_dims = {int_list(batch)}, "
                  f"scatter_indices_batching_dims = {int_list(batch)}, "
                  f"scatter_dims_to_operand_dims = {int_list([axis])}, index_vector_dim = {r}")
    else:  # full coordinates: iotas for the other dims, the indices for `axis`
        column = (*idx.shape, 1)
        parts = [em.reshape(idx, column) if d == axis else em.iota(idx.dtype, column, d)
                 for d in range(r)]
        idx = em.concat(parts, r)
        fields = (f"inserted_window_dims = {int_list(range(r))}, "
                  f"scatter_dims_to_operand_dims = {int_list(range(r))}, index_vector_dim = {r}")
    kind = lw.attrs["reduction"]
    region = em.region([(x.dtype, ()), (x.dtype, ())])
    with region as (current, update):
        if kind == "none":
            em.ret([update])
        else:
            if x.dtype is DType.BOOL:
                kind = {"add": "or", "mul": "and"}.get(kind, kind)
            em.ret([em.op({"add": "stablehlo.add", "mul": "stablehlo.multiply",
                           "max": "stablehlo.maximum", "min": "stablehlo.minimum",
                           "or": "stablehlo.or", "and": "stablehlo.and"}[kind],
                          [current, update], x.dtype, ())])
    return [em.op("stablehlo.scatter", [x, idx, updates], x.dtype, x.shape,
                  f"indices_are_sorted = false, scatter_dimension_numbers = "
                  f"#stablehlo.scatter<{fields}>, unique_indices = false", [region.text])]


@lowers("one_hot")
def _one_hot(lw: Lowering) -> list[Sym]:
    em, idx = lw.em, lw.x()
    depth, dtype = lw.attrs["depth"], lw.attrs["dtype"]
    axis = _axis(lw.attrs["axis"], idx.rank + 1)
    wrapped = em.convert(_wrap_indices(em, idx, depth), DType.INT64)
    shape = lw.out_shape
    spread = em.broadcast_in_dim(wrapped, shape, [d for d in range(len(shape)) if d != axis])
    hot = em.compare("EQ", spread, em.iota(DType.INT64, shape, axis))
    return [em.convert(hot, dtype)]


# -- sorting -----------------------------------------------------------------------------------

def _sort(em: Emitter, x: Sym, axis: int, descending: bool) -> tuple[Sym, Sym]:
    """Values and (int32 where the axis fits, else int64) indices along `axis`. The int32
    iota matters to consumers: IREE rewrites sort + slice into `chlo.top_k`, which only
    allows i32 indices; callers convert the indices to the IR's int64 after slicing."""
    index_dtype = DType.INT32 if x.shape[axis] <= 2**31 - 1 else DType.INT64
    index = em.iota(index_dtype, x.shape, axis)
    region = em.region([(x.dtype, ()), (x.dtype, ()), (index_dtype, ()), (index_dtype, ())])
    with region as (a, b, _, _):
        # floats compare in total order: NaN sorts as the largest value (numpy)
        em.ret([em.compare("GT" if descending else "LT", a, b,
                           total_order=x.dtype.is_float)])
    values, indices = em.emit("stablehlo.sort", [x, index],
                              [(x.dtype, x.shape), (index_dtype, x.shape)],
                              f"dimension = {axis} : i64, is_stable = true", [region.text])
    return values, indices


def _int64(em: Emitter, indices: Sym) -> Sym:
    return indices if indices.dtype == DType.INT64 else em.convert(indices, DType.INT64)


@lowers("sort")
def _sort_op(lw: Lowering) -> list[Sym]:
    x = lw.x()
    values, indices = _sort(lw.em, x, _axis(lw.attrs["axis"], x.rank), lw.attrs["descending"])
    return [values, _int64(lw.em, indices)]


@lowers("topk")
def _topk(lw: Lowering) -> list[Sym]:
    em, x = lw.em, lw.x()
    axis = _axis(lw.attrs["axis"], x.rank)
    values, indices = _sort(em, x, axis, lw.attrs["largest"])
    k = lw.attrs["k"]
    return [em.slice_axis(values, axis, 0, k),
            _int64(em, em.slice_axis(indices, axis, 0, k))]


# -- resize ------------------------------------------------------------------------------------

@lowers("resize")
def _resize(lw: Lowering) -> list[Sym]:
    """Separable, as the reference: per spatial axis a gather of each tap's source rows
    (indices from the registry's own tap computation) weighted and summed."""
    em, y = lw.em, lw.x()
    attrs = lw.attrs
    ins = y.shape[2:]
    if attrs["sizes"]:
        outs = list(attrs["sizes"])
        inverses = [n / o for n, o in zip(ins, outs, strict=True)]
    else:
        outs = [math.floor(n * s) for n, s in zip(ins, attrs["scales"], strict=True)]
        inverses = [1 / s for s in attrs["scales"]]
    out_dtype = y.dtype
    if attrs["mode"] != "nearest" and not y.dtype.is_float:
        y = em.convert(y, DType.FLOAT32)
    for axis, (n, o, inverse) in enumerate(zip(ins, outs, inverses, strict=True), start=2):
        index, weights = _resize_taps(attrs, n, o, inverse)
        if attrs["mode"] == "nearest" and np.array_equal(index[:, 0], np.arange(n)) and n == o:
            continue
        total: Sym | None = None
        for t in range(index.shape[1]):
            taken = _take(em, y, index[:, t], axis)
            if attrs["mode"] == "nearest":
                total = taken
                break
            w = em.const(weights[:, t].astype(y.dtype.numpy), y.dtype)
            term = em.mul(taken, em.broadcast_in_dim(w, taken.shape, [axis]))
            total = term if total is None else em.add(total, term)
        assert total is not None
        y = total
    return [em.convert(y, out_dtype)]


def _take(em: Emitter, x: Sym, index: np.ndarray, axis: int) -> Sym:
    """x gathered along `axis` at constant indices."""
    idx = em.const(index.astype(np.int64), DType.INT64)
    offset = [d for d in range(x.rank) if d != axis]
    sizes = list(x.shape)
    sizes[axis] = 1
    dims = _gather_dims(offset_dims=offset, collapsed_slice_dims=[axis],
                        start_index_map=[axis], index_vector_dim=1)
    # output: index dim first at position `axis`? gather puts batch dims where offsets are not
    return em.op("stablehlo.gather", [x, idx], x.dtype, _with(x.shape, axis, len(index)),
                 f"dimension_numbers = {dims}, indices_are_sorted = false, "
                 f"slice_sizes = {ints(sizes)}")


# -- bitwise ops -------------------------------------------------------------------------------

_BIT_UNARY = {"bitwise_not": "stablehlo.not", "popcnt": "stablehlo.popcnt",
              "count_leading_zeros": "stablehlo.count_leading_zeros"}


@lowers(*_BIT_UNARY)
def _bit_unary(lw: Lowering) -> list[Sym]:
    return [lw.em.unary(_BIT_UNARY[lw.node.op], lw.x())]


# -- dynamic_slice / dynamic_update_slice (run-time starts) ------------------------------------

def _starts(lw: Lowering, first: int) -> list[Sym]:
    """The start operands, all i64 (StableHLO wants one integer type for them all)."""
    return [lw.em.convert(lw.x(i), DType.INT64) if lw.x(i).dtype != DType.INT64 else lw.x(i)
            for i in range(first, len(lw.xs))]


@lowers("dynamic_slice")
def _dynamic_slice(lw: Lowering) -> list[Sym]:
    x = lw.x()
    sizes = [int(n) for n in lw.attrs["sizes"]]
    return [lw.em.op("stablehlo.dynamic_slice", [x, *_starts(lw, 1)], x.dtype, sizes,
                     f"slice_sizes = {ints(sizes)}")]


@lowers("dynamic_update_slice")
def _dynamic_update_slice(lw: Lowering) -> list[Sym]:
    x = lw.x()
    update = lw.x(1)
    return [lw.em.op("stablehlo.dynamic_update_slice", [x, update, *_starts(lw, 2)], x.dtype,
                     x.shape)]


# -- elementwise math (issue 13; helper "math") ------------------------------------------------
# StableHLO proper has atan2, log_plus_one and exponential_minus_one; the inverse trigonometric
# and hyperbolic functions are written in those (the formulas of CHLO's own legalisation).
# trunc, erfc, copysign, fmin, fmax and hypot go through their registry decompositions; the
# special functions (lgamma, digamma, erfinv, Bessel, zeta, nextafter, ...) have no lowering
# and no decomposition, so export refuses them naming the node.


def _float_operand(lw: Lowering, index: int = 0) -> Sym:
    x = lw.x(index)
    return x if x.dtype.is_float else lw.em.convert(x, DType.FLOAT32)


def _math(fn: Callable[[Emitter, Sym], Sym]) -> LowerFn:
    def lower(lw: Lowering) -> list[Sym]:
        return [lw.em.convert(fn(lw.em, _float_operand(lw)), lw.out_dtype)]
    return lower


def _atan2(em: Emitter, y: Sym, x: Sym) -> Sym:
    return em.binary("stablehlo.atan2", y, x)


def _one_minus_square(em: Emitter, x: Sym) -> Sym:
    """(1 - x) * (1 + x): no cancellation near |x| = 1."""
    one = em.scalar_like(1.0, x)
    return em.mul(em.sub(one, x), em.add(one, x))


def _asin(em: Emitter, x: Sym) -> Sym:
    """2 * atan2(x, 1 + sqrt(1 - x^2))."""
    root = em.unary("stablehlo.sqrt", _one_minus_square(em, x))
    return em.mul_scalar(_atan2(em, x, em.add_scalar(root, 1.0)), 2.0)


def _acos(em: Emitter, x: Sym) -> Sym:
    """2 * atan2(sqrt(1 - x^2), 1 + x), and pi at x = -1."""
    root = em.unary("stablehlo.sqrt", _one_minus_square(em, x))
    y = em.mul_scalar(_atan2(em, root, em.add_scalar(x, 1.0)), 2.0)
    return em.select(em.compare("EQ", x, em.scalar_like(-1.0, x)),
                     em.scalar_like(math.pi, x), y)


def _atan(em: Emitter, x: Sym) -> Sym:
    return _atan2(em, x, em.scalar_like(1.0, x))


def _exp_half(em: Emitter, x: Sym) -> Sym:
    """exp(x) / 2 as exp(x - log 2): finite wherever the result is."""
    return em.unary("stablehlo.exponential", em.add_scalar(x, -math.log(2.0)))


def _sinh(em: Emitter, x: Sym) -> Sym:
    """|x| < 1: (e + e / (e + 1)) / 2 with e = expm1(x) (no cancellation near 0); else
    exp(x) / 2 - exp(-x) / 2."""
    e = em.unary("stablehlo.exponential_minus_one", x)
    small = em.mul_scalar(em.add(e, em.div(e, em.add_scalar(e, 1.0))), 0.5)
    large = em.sub(_exp_half(em, x), _exp_half(em, em.unary("stablehlo.negate", x)))
    near_zero = em.compare("LT", em.unary("stablehlo.abs", x), em.scalar_like(1.0, x))
    return em.select(near_zero, small, large)


def _cosh(em: Emitter, x: Sym) -> Sym:
    return em.add(_exp_half(em, x), _exp_half(em, em.unary("stablehlo.negate", x)))


def _huge(x: Sym) -> float:
    """Above this, x^2 would overflow: the formulas switch to log(x) + log(2)."""
    return float(np.sqrt(np.finfo(x.dtype.numpy).max)) / 4


def _asinh(em: Emitter, x: Sym) -> Sym:
    """sign(x) * log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|; log(a) + log 2 for huge a."""
    a = em.unary("stablehlo.abs", x)
    root = em.unary("stablehlo.sqrt", em.add_scalar(em.mul(a, a), 1.0))
    y = em.unary("stablehlo.log_plus_one",
                 em.add(a, em.div(em.mul(a, a), em.add_scalar(root, 1.0))))
    big = em.add_scalar(em.unary("stablehlo.log", a), math.log(2.0))
    y = em.select(em.compare("GT", a, em.scalar_like(_huge(x), a)), big, y)
    return em.mul(em.unary("stablehlo.sign", x), y)


def _acosh(em: Emitter, x: Sym) -> Sym:
    """log1p(y + sqrt(y * (y + 2))), y = x - 1 (accurate near 1); log(x) + log 2 for huge
    x; NaN below 1 (sqrt of a negative)."""
    y = em.add_scalar(x, -1.0)
    z = em.unary("stablehlo.log_plus_one",
                 em.add(y, em.unary("stablehlo.sqrt", em.mul(y, em.add_scalar(y, 2.0)))))
    big = em.add_scalar(em.unary("stablehlo.log", x), math.log(2.0))
    return em.select(em.compare("GT", x, em.scalar_like(_huge(x), x)), big, z)


def _atanh(em: Emitter, x: Sym) -> Sym:
    """(log1p(x) - log1p(-x)) / 2: +-inf at +-1, NaN beyond."""
    return em.mul_scalar(em.sub(em.unary("stablehlo.log_plus_one", x),
                                em.unary("stablehlo.log_plus_one",
                                         em.unary("stablehlo.negate", x))), 0.5)


for _name, _fn in {"asin": _asin, "acos": _acos, "atan": _atan, "sinh": _sinh,
                   "cosh": _cosh, "asinh": _asinh, "acosh": _acosh, "atanh": _atanh}.items():
    LOWERINGS[_name] = _math(_fn)


@lowers("atan2")
def _atan2_op(lw: Lowering) -> list[Sym]:
    y, x = lw.em.to_common([lw.x(0), lw.x(1)], lw.out_dtype)
    return [_atan2(lw.em, y, x)]


@lowers("fmod")
def _fmod(lw: Lowering) -> list[Sym]:
    """stablehlo.remainder is C's fmod (the sign of the dividend), integers included."""
    a, b = lw.em.to_common([lw.x(0), lw.x(1)], lw.out_dtype)
    return [lw.em.binary("stablehlo.remainder", a, b)]


_SAME_WIDTH_INT = {2: DType.INT16, 4: DType.INT32, 8: DType.INT64}


@lowers("bitcast")
def _bitcast(lw: Lowering) -> list[Sym]:
    return [lw.em.op("stablehlo.bitcast_convert", [lw.x()], lw.out_dtype, lw.out_shape)]


@lowers("reduce_precision")
def _reduce_precision(lw: Lowering) -> list[Sym]:
    return [lw.em.op("stablehlo.reduce_precision", [lw.x()], lw.out_dtype, lw.out_shape,
                     f"exponent_bits = {int(lw.attrs['exponent_bits'])} : i32, "
                     f"mantissa_bits = {int(lw.attrs['mantissa_bits'])} : i32")]


@lowers("signbit")
def _signbit(lw: Lowering) -> list[Sym]:
    """The sign bit itself (bit cast to the integer of the same width): exact for -0.0 and
    negative NaNs too."""
    em, x = lw.em, lw.x()
    if x.dtype == DType.BOOL:
        return [em.splat(False, DType.BOOL, x.shape)]
    if x.dtype.is_float:
        x = em.op("stablehlo.bitcast_convert", [x], _SAME_WIDTH_INT[x.dtype.itemsize], x.shape)
    return [em.compare("LT", x, em.scalar_like(0, x))]


# -- linear algebra ----------------------------------------------------------------------------

@lowers("triangular_solve")
def _triangular_solve(lw: Lowering) -> list[Sym]:
    """stablehlo.triangular_solve has the neutral op's attributes, except that it leaves
    the result undefined when unit_diagonal is set and A's diagonal is not ones; the
    neutral op ignores the diagonal then, so the diagonal is overwritten with ones first."""
    em, attrs = lw.em, lw.attrs
    a, b = em.convert(lw.x(0), lw.out_dtype), em.convert(lw.x(1), lw.out_dtype)
    if attrs["unit_diagonal"]:
        rows = em.iota(DType.INT32, a.shape, a.rank - 2)
        cols = em.iota(DType.INT32, a.shape, a.rank - 1)
        a = em.select(em.compare("EQ", rows, cols), em.splat(1, a.dtype, a.shape), a)
    transpose = attrs["transpose_a"]
    if transpose == "ADJOINT" and a.dtype.numpy.kind != "c":
        transpose = "TRANSPOSE"  # the same for real matrices, and every consumer runs it
    flag = {True: "true", False: "false"}
    props = (f"left_side = {flag[bool(attrs['left_side'])]}, "
             f"lower = {flag[bool(attrs['lower'])]}, "
             f"unit_diagonal = {flag[bool(attrs['unit_diagonal'])]}, "
             f"transpose_a = #stablehlo<transpose {transpose}>")
    return [em.op("stablehlo.triangular_solve", [a, b], b.dtype, b.shape, props)]


__all__ = ["LOWERINGS", "Lowering", "Unsupported", "convolution", "erf"]
