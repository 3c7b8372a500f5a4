"""One emitter per neutral op: the ONNX node(s) that compute it at the target opset.

An emitter writes the node's outputs under the names in `e.outs`. Neutral ops that
promote mixed input dtypes get Casts in front (ONNX ops want equal types). Ops without
an emitter here (attention, adaptive_avg_pool with general sizes, ...) are lowered by
the exporter through the registry's decomposition; an emitter may also raise
NeedDecompose to ask for that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from irbridge.converters.onnx import _export_dynamic, _legal
from irbridge.converters.onnx._common import TYPE_OPSET, dtype_to_onnx
from irbridge.converters.onnx.export import (
    CANONICAL,
    EMITTERS,
    FLOAT_MATH,
    Emitter,
    NeedDecompose,
    NodeEmit,
    OpsetTooOld,
)
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.ops import registry
from irbridge.ops._shapes import promote


def register(op: str, fn: Emitter, canonical: str | None = None) -> None:
    EMITTERS[op] = fn
    if canonical:
        CANONICAL.add((op, canonical))


def _operand_dtype(e: NodeEmit, indices: Sequence[int]) -> DType | None:
    types = [e.in_type(i) for i in indices if e.has(i)]
    if any(t is None for t in types):
        return None
    return promote([t for t in types if t is not None], e.where)


def _i64_input(e: NodeEmit, index: int) -> str:
    """An integer parameter input as int64 (ONNX wants int64 axes, pads, repeats, ...)."""
    return e.as_dtype(index, DType.INT64)


def _known_ints(e: NodeEmit, index: int) -> tuple[int, ...] | None:
    """The values of a parameter input that is a model tensor or a constant node (for
    opsets whose ONNX op wants them as an attribute), else None."""
    if not e.has(index):
        return None
    value = registry.constant_value(e.node.inputs[index])
    return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))


def _shaped(e: NodeEmit, index: int, rank: int, dtype: DType | None = None) -> str:
    """A one-element parameter input as a scalar (rank 0) or a 1-element vector (rank 1),
    cast to `dtype` when given."""
    name = e.input(index) if dtype is None else e.as_dtype(index, dtype)
    t = e.in_type(index)
    if t is not None and t.rank == rank:
        return name
    return e.one("Reshape", [name, e.i64([1] * rank, "shape")])


# -- elementwise ---------------------------------------------------------------------------

FLOAT_MATH.update({  # float math: on integer / bool data, written in float and cast back once
    "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "erf", "floor", "ceil",
    "round", "tanh", "sigmoid", "isnan", "isinf", "silu", "gelu", "mish", "hardswish",
    "hardsigmoid", "leaky_relu", "elu", "softplus", "batch_norm", "layer_norm", "group_norm",
    "rms_norm", "reduce_mean", "reduce_l2", "reduce_log_sum_exp", "avg_pool",
    "adaptive_avg_pool", "attention",
    # elementwise math written as a decomposition (its float steps must not truncate)
    "erfc", "atan2", "hypot", "copysign",
    "erfinv", "erfcx", "ndtri", "lgamma", "digamma", "polygamma", "zeta"})

def _unary(onnx_op: str) -> Emitter:
    def emit(e: NodeEmit) -> None:
        e.out(onnx_op, [e.input(0)])
    return emit


for _op, _onnx in {"neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
                   "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos", "tan": "Tan",
                   "erf": "Erf", "floor": "Floor", "ceil": "Ceil", "round": "Round",
                   "sign": "Sign", "logical_not": "Not", "isnan": "IsNaN", "isinf": "IsInf",
                   "tanh": "Tanh", "sigmoid": "Sigmoid", "identity": "Identity",
                   "non_zero": "NonZero"}.items():
    register(_op, _unary(_onnx), _onnx)


def _relu(e: NodeEmit) -> None:
    dtype = e.in_dtype(0)
    if dtype is not None and dtype not in _legal.allowed("Relu", e.opset).get("T", {dtype}):
        e.out("Max", [e.input(0), e.scalar(0, dtype)])  # exact where Relu has no kernel
        return
    e.out("Relu", [e.input(0)])


register("relu", _relu, "Relu")


def _hardswish(e: NodeEmit) -> None:
    if e.opset >= 14:
        e.out("HardSwish", [e.input(0)])
        return
    x = e.input(0)
    e.out("Mul", [x, e.one("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])


register("hardswish", _hardswish, "HardSwish")


def _rsqrt(e: NodeEmit) -> None:
    e.out("Reciprocal", [e.one("Sqrt", [e.input(0)])])


register("rsqrt", _rsqrt)


def _gelu(e: NodeEmit) -> None:
    approximate = e.attrs["approximate"]
    if e.opset >= 20:
        e.out("Gelu", [e.input(0)], approximate=approximate)
        return
    x, dtype = e.input(0), e.in_dtype(0)
    half = e.one("Mul", [x, e.scalar(0.5, dtype)])
    if approximate == "tanh":
        cube = e.one("Mul", [e.one("Mul", [x, x]), x])
        inner = e.one("Add", [x, e.one("Mul", [cube, e.scalar(0.044715, dtype)])])
        t = e.one("Tanh", [e.one("Mul", [inner, e.scalar(math.sqrt(2 / math.pi), dtype)])])
    else:
        t = e.one("Erf", [e.one("Div", [x, e.scalar(math.sqrt(2), dtype)])])
    e.out("Mul", [half, e.one("Add", [t, e.scalar(1, dtype)])])


register("gelu", _gelu, "Gelu")


def _silu(e: NodeEmit) -> None:
    x = e.input(0)
    e.out("Mul", [x, e.one("Sigmoid", [x])])


register("silu", _silu)


def _mish(e: NodeEmit) -> None:
    x = e.input(0)
    if e.opset >= 18:
        e.out("Mish", [x])
        return
    e.out("Mul", [x, e.one("Tanh", [e.one("Softplus", [x])])])


register("mish", _mish, "Mish")


def _hardsigmoid(e: NodeEmit) -> None:
    e.out("HardSigmoid", [e.input(0)], alpha=e.attrs["alpha"], beta=e.attrs["beta"])


def _leaky_relu(e: NodeEmit) -> None:
    e.out("LeakyRelu", [e.input(0)], alpha=e.attrs["alpha"])


def _elu(e: NodeEmit) -> None:
    e.out("Elu", [e.input(0)], alpha=e.attrs["alpha"])


register("hardsigmoid", _hardsigmoid, "HardSigmoid")
register("leaky_relu", _leaky_relu, "LeakyRelu")
register("elu", _elu, "Elu")


def _softplus(e: NodeEmit) -> None:
    """torch's softplus: x where beta * x > threshold, else log(1 + exp(beta * x)) / beta.
    ONNX Softplus has neither beta nor threshold: with the defaults (1, 20) it is the op
    itself (above 20 the two differ by less than exp(-20) = 2e-9, under float32's
    rounding of x); otherwise the exact form with `Where`."""
    beta, threshold = e.attrs["beta"], e.attrs["threshold"]
    x, dtype = e.input(0), e.in_dtype(0)
    if beta == 1.0 and threshold >= 20.0:
        e.out("Softplus", [x])
        return
    scaled = x if beta == 1.0 else e.one("Mul", [x, e.scalar(beta, dtype)])
    soft = e.one("Softplus", [scaled])
    if beta != 1.0:
        soft = e.one("Div", [soft, e.scalar(beta, dtype)])
    linear = e.one("Greater", [scaled, e.scalar(threshold, dtype)])
    e.out("Where", [linear, x, soft])


register("softplus", _softplus, "Softplus")


def _clip(e: NodeEmit) -> None:
    dtype = e.in_dtype(0)
    x = e.input(0)
    tensors = [i for i in (1, 2) if e.has(i)]
    if any((t := e.in_type(i)) is None or t.rank != 0 for i in tensors):
        # bounds that are tensors (torch.clamp(x, min_tensor, max_tensor)): ONNX Clip takes
        # scalars only; min(max(x, lo), hi) is torch's clamp, broadcasting included
        y = x
        for slot, op in ((1, "Max"), (2, "Min")):
            if e.has(slot):
                y = e.one(op, [y, e.as_dtype(slot, e.out_dtype())])
            elif math.isfinite(e.attrs["min" if slot == 1 else "max"]):
                y = e.one(op, [y, e.scalar(e.attrs["min" if slot == 1 else "max"], dtype)])
        e.out("Identity", [y])
        return
    bounds: list[str | None] = [None, None]
    for slot, key in ((1, "min"), (2, "max")):
        if e.has(slot):
            bounds[slot - 1] = e.as_dtype(slot, dtype)
        elif math.isfinite(e.attrs[key]):
            value = e.attrs[key]
            if dtype is not None and dtype.is_integer:
                value = math.ceil(value) if key == "min" else math.floor(value)
            bounds[slot - 1] = e.scalar(value, dtype)
    while bounds and bounds[-1] is None:
        bounds.pop()
    e.out("Clip", [x, *bounds])


register("clip", _clip, "Clip")


_SATURATING = (DType.FLOAT8_E4M3FN, DType.FLOAT8_E5M2, DType.FLOAT8_E4M3FNUZ,
               DType.FLOAT8_E5M2FNUZ)
"""Float8 targets ONNX's Cast saturates by default: the IR's cast (ml_dtypes) does not, so
the export says saturate=0. (float8e8m0, below, is also rounded up by default.)"""


def _cast(e: NodeEmit) -> None:
    target: DType = e.attrs["dtype"]
    if target in TYPE_OPSET:
        e.need_opset(TYPE_OPSET[target], f"casting to {target.short}")
    if target in _SATURATING:  # ONNX saturates by default; the IR's cast (ml_dtypes) does not
        e.out("Cast", [e.input(0)], to=dtype_to_onnx(target), saturate=0)
        return
    if target is DType.FLOAT8_E8M0FNU:  # the IR's cast rounds to nearest (ties up), ml_dtypes'
        e.out("Cast", [e.input(0)], to=dtype_to_onnx(target), saturate=0, round_mode="nearest")
        return
    e.out("Cast", [e.input(0)], to=dtype_to_onnx(target))


register("cast", _cast, "Cast")


def _bitcast(e: NodeEmit) -> None:
    """ONNX BitCast (opset 26) reinterprets elements of one bit width as another type of
    the same width; a bitcast that splits or joins elements (u32 to u8[4]) has no ONNX
    form."""
    source, target = e.in_dtype(0), e.attrs["dtype"]
    if source is None or source.bits != target.bits or DType.BOOL in (source, target):
        raise ExportError(f"{e.where}: cannot export to ONNX: bitcast of "
                          f"{source.short if source else '?'} to {target.short} changes the "
                          "element width (or reads booleans), which ONNX BitCast cannot (it "
                          "keeps the width)")
    e.need_opset(26, "bitcast (ONNX BitCast)")
    e.out("BitCast", [e.input(0)], to=dtype_to_onnx(target))


register("bitcast", _bitcast, "BitCast")


def _binary(onnx_op: str, compare: bool = False) -> Emitter:
    def emit(e: NodeEmit) -> None:
        dtype = _operand_dtype(e, (0, 1)) if compare else e.out_dtype()
        if onnx_op == "Div" and dtype is DType.BOOL:  # true division, as the reference
            y = e.one("Div", [e.as_dtype(0, DType.FLOAT32), e.as_dtype(1, DType.FLOAT32)])
            e.out("Cast", [y], to=dtype_to_onnx(DType.BOOL))
            return
        e.out(onnx_op, [e.as_dtype(0, dtype), e.as_dtype(1, dtype)])
    return emit


for _op, _onnx in {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div"}.items():
    register(_op, _binary(_onnx), _onnx)

_NARROW_INTS = {DType.INT8, DType.INT16, DType.UINT8, DType.UINT16}


def _extremum(onnx_op: str) -> Emitter:
    """Max / Min; narrow integers go through int32 (common runtimes lack those kernels)."""
    def emit(e: NodeEmit) -> None:
        dtype = e.out_dtype()
        if dtype not in _NARROW_INTS:
            e.out(onnx_op, [e.as_dtype(0, dtype), e.as_dtype(1, dtype)])
            return
        y = e.one(onnx_op, [e.as_dtype(0, DType.INT32), e.as_dtype(1, DType.INT32)])
        e.out("Cast", [y], to=dtype_to_onnx(dtype) if dtype else None)
    return emit


register("maximum", _extremum("Max"), "Max")
register("minimum", _extremum("Min"), "Min")

_POW_TYPES = {DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32,
              DType.INT64}


def _pow(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    if dtype is None or dtype in _POW_TYPES:
        e.out("Pow", [e.as_dtype(0, dtype), e.as_dtype(1, dtype)])
        return
    wide = DType.INT64 if dtype.is_integer else DType.FLOAT32  # ONNX Pow lacks this type
    y = e.one("Pow", [e.as_dtype(0, wide), e.as_dtype(1, wide)])
    e.out("Cast", [y], to=dtype_to_onnx(dtype))


register("pow", _pow, "Pow")
for _op, _onnx in {"equal": "Equal", "less": "Less", "less_equal": "LessOrEqual",
                   "greater": "Greater", "greater_equal": "GreaterOrEqual",
                   "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}.items():
    register(_op, _binary(_onnx, compare=True), _onnx)


def _not_equal(e: NodeEmit) -> None:
    dtype = _operand_dtype(e, (0, 1))
    e.out("Not", [e.one("Equal", [e.as_dtype(0, dtype), e.as_dtype(1, dtype)])])


register("not_equal", _not_equal)


def _floor_div(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    a, b = e.as_dtype(0, dtype), e.as_dtype(1, dtype)
    if dtype is None or dtype.is_float:
        e.out("Floor", [e.one("Div", [a, b])])
        return
    if dtype.name.startswith("UINT"):
        e.out("Div", [a, b])
        return
    quotient = e.one("Div", [a, b])  # truncates toward zero
    rest = e.one("Sub", [a, e.one("Mul", [quotient, b])])
    zero = e.scalar(0, dtype)
    inexact = e.one("Not", [e.one("Equal", [rest, zero])])
    signs_differ = e.one("Xor", [e.one("Less", [a, zero]), e.one("Less", [b, zero])])
    adjust = e.one("Cast", [e.one("And", [inexact, signs_differ])], to=dtype_to_onnx(dtype))
    e.out("Sub", [quotient, adjust])


register("floor_div", _floor_div)


def _mod(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    a, b = e.as_dtype(0, dtype), e.as_dtype(1, dtype)
    if dtype is not None and not dtype.is_float:
        e.out("Mod", [a, b], fmod=0)
        return
    rest = e.one("Mod", [a, b], fmod=1)  # sign of the dividend; move to the divisor's
    zero = e.scalar(0, dtype)
    fix = e.one("And", [e.one("Not", [e.one("Equal", [rest, zero])]),
                        e.one("Xor", [e.one("Less", [rest, zero]), e.one("Less", [b, zero])])])
    e.out("Where", [fix, e.one("Add", [rest, b]), rest])


register("mod", _mod)


def _prelu(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    x, slope = e.as_dtype(0, dtype), e.as_dtype(1, dtype)
    xt, st = e.in_type(0), e.in_type(1)
    if xt is not None and st is not None and xt.shape is not None and st.shape is not None \
            and len(st.shape) <= len(xt.shape) and all(
                s == 1 or s == d for s, d in zip(reversed(st.shape), reversed(xt.shape),
                                                 strict=False)):
        e.out("PRelu", [x, slope])
        return
    zero = e.scalar(0, dtype)
    e.out("Where", [e.one("GreaterOrEqual", [x, zero]), x, e.one("Mul", [x, slope])])


register("prelu", _prelu, "PRelu")


def _where(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    cond = e.as_dtype(0, DType.BOOL)
    a, b = e.as_dtype(1, dtype), e.as_dtype(2, dtype)
    if dtype is DType.BOOL:  # onnxruntime has no boolean Where kernel: (c and a) or (!c and b)
        not_cond = e.one("Not", [cond])
        e.out("Or", [e.one("And", [cond, a]), e.one("And", [not_cond, b])])
        return
    e.out("Where", [cond, a, b])


register("where", _where, "Where")


# -- matmul family, convolution --------------------------------------------------------------

def _matmul(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    e.out("MatMul", [e.as_dtype(0, dtype), e.as_dtype(1, dtype)])


register("matmul", _matmul, "MatMul")


def _gemm(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    inputs = [e.as_dtype(i, dtype) for i in range(3) if e.has(i)]
    a = e.attrs
    e.out("Gemm", inputs, transA=int(a["trans_a"]), transB=int(a["trans_b"]),
          alpha=float(a["alpha"]), beta=float(a["beta"]))


register("gemm", _gemm, "Gemm")


def _linear(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    x, w = e.as_dtype(0, dtype), e.as_dtype(1, dtype)
    b = e.as_dtype(2, dtype) if e.has(2) else None
    if e.rank(0) == 2:
        e.out("Gemm", [x, w] + ([b] if b else []), transB=1)
        return
    wt = e.one("Transpose", [w], perm=[1, 0])
    if b is None:
        e.out("MatMul", [x, wt])
        return
    e.out("Add", [e.one("MatMul", [x, wt]), b])


register("linear", _linear)


def _window(e: NodeEmit, d: int, default_strides: Sequence[int] | None = None
            ) -> dict[str, list[int]]:
    a = e.attrs
    strides = list(a["strides"]) or list(default_strides or [1] * d)
    pads = list(a["pads"]) or [0] * (2 * d)
    out = {"strides": strides, "pads": pads}
    if "dilations" in a:
        out["dilations"] = list(a["dilations"]) or [1] * d
    return out


def _conv(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    d = e.rank(0) - 2
    inputs = [e.as_dtype(i, dtype) for i in range(3) if e.has(i)]
    e.out("Conv", inputs, group=e.attrs["groups"], **_window(e, d))


register("conv", _conv, "Conv")


def _conv_transpose(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    d = e.rank(0) - 2
    inputs = [e.as_dtype(i, dtype) for i in range(3) if e.has(i)]
    out_pad = list(e.attrs["output_padding"]) or None
    e.out("ConvTranspose", inputs, group=e.attrs["groups"], output_padding=out_pad,
          **_window(e, d))


register("conv_transpose", _conv_transpose, "ConvTranspose")


# -- normalisation, softmax -------------------------------------------------------------------

def _batch_norm(e: NodeEmit) -> None:
    e.out("BatchNormalization", [e.input(i) for i in range(5)], epsilon=e.attrs["epsilon"])


register("batch_norm", _batch_norm, "BatchNormalization")


def _normalised_shape(e: NodeEmit, axis: int) -> tuple[int, ...]:
    t = e.in_type(0)
    if t is None or t.shape is None:
        raise NeedDecompose()
    dims = t.shape[axis % len(t.shape):]
    if not all(isinstance(d, int) for d in dims):
        raise NeedDecompose()
    return tuple(int(d) for d in dims if isinstance(d, int))


def _ones(e: NodeEmit, shape: Sequence[int], value: float = 1.0) -> str:
    dtype = e.in_dtype(0) or DType.FLOAT32
    return e.const(np.full(tuple(shape), value, dtype=dtype.numpy), "ones" if value else "zeros")


def _manual_norm(e: NodeEmit, axes: list[int], epsilon: float, rms: bool) -> None:
    x, dtype = e.input(0), e.in_dtype(0)
    if rms:
        centred = x
    else:
        mean = _reduce_op(e, "ReduceMean", x, axes, True)
        centred = e.one("Sub", [x, mean])
    var = _reduce_op(e, "ReduceMean", e.one("Mul", [centred, centred]), axes, True)
    denom = e.one("Sqrt", [e.one("Add", [var, e.scalar(epsilon, dtype)])])
    y = e.one("Div", [centred, denom])
    steps = [("Mul", 1)] + ([] if rms else [("Add", 2)])
    present = [(op, i) for op, i in steps if e.has(i)]
    for k, (op, index) in enumerate(present):
        last = k == len(present) - 1
        y = e.one(op, [y, e.as_dtype(index, dtype)], e.outs[0] if last else None)
    if not present:
        e.out("Identity", [y])


def _layer_norm(e: NodeEmit) -> None:
    rank = e.rank(0)
    axis = e.attrs["axis"] % rank
    if e.opset < 17:
        _manual_norm(e, list(range(axis, rank)), e.attrs["epsilon"], rms=False)
        return
    scale = e.input(1) if e.has(1) else _ones(e, _normalised_shape(e, axis))
    inputs = [e.input(0), scale] + ([e.input(2)] if e.has(2) else [])
    e.emit("LayerNormalization", inputs, [e.outs[0]], axis=axis, epsilon=e.attrs["epsilon"])


register("layer_norm", _layer_norm, "LayerNormalization")


def _rms_norm(e: NodeEmit) -> None:
    rank = e.rank(0)
    axis = e.attrs["axis"] % rank
    if e.opset < 23:
        _manual_norm(e, list(range(axis, rank)), e.attrs["epsilon"], rms=True)
        return
    scale = e.input(1) if e.has(1) else _ones(e, _normalised_shape(e, axis))
    e.out("RMSNormalization", [e.input(0), scale], axis=axis, epsilon=e.attrs["epsilon"])


register("rms_norm", _rms_norm, "RMSNormalization")


def _group_norm(e: NodeEmit) -> None:
    t = e.in_type(0)
    if t is None or t.shape is None or not isinstance(t.shape[1], int):
        raise ExportError(f"{e.where}: group_norm needs a static channel dim to export")
    channels, groups = t.shape[1], e.attrs["num_groups"]
    rank = len(t.shape)
    scale = e.input(1) if e.has(1) else _ones(e, [channels])
    bias = e.input(2) if e.has(2) else _ones(e, [channels], 0.0)
    if e.opset >= 21:
        e.out("GroupNormalization", [e.input(0), scale, bias], num_groups=groups,
              epsilon=e.attrs["epsilon"])
        return
    # InstanceNormalization over [N, G, rest]: each group normalised over its elements
    x = e.input(0)
    grouped = e.one("Reshape", [x, e.i64([0, groups, -1])])
    normed = e.one("InstanceNormalization", [grouped, _ones(e, [groups]),
                                             _ones(e, [groups], 0.0)],
                   epsilon=e.attrs["epsilon"])
    y = e.one("Reshape", [normed, e.one("Shape", [x])])
    per_channel = e.i64([channels] + [1] * (rank - 2))
    y = e.one("Mul", [y, e.one("Reshape", [scale, per_channel])])
    e.out("Add", [y, e.one("Reshape", [bias, per_channel])])


register("group_norm", _group_norm, "GroupNormalization")


def _softmax(onnx_op: str) -> Emitter:
    def emit(e: NodeEmit) -> None:
        if not e.attrs.get("safe", False):
            e.out(onnx_op, [e.input(0)], axis=e.attrs["axis"])
            return
        # safe: rows of all -inf give 0 (ONNX Softmax gives NaN there)
        x, dtype = e.input(0), e.in_dtype(0)
        y = e.one(onnx_op, [x], axis=e.attrs["axis"])
        peak = _reduce_op(e, "ReduceMax", x, [e.attrs["axis"]], True)
        empty = e.one("Equal", [peak, e.scalar(-np.inf, dtype)])
        e.out("Where", [empty, e.scalar(0, dtype), y])
    return emit


register("softmax", _softmax("Softmax"), "Softmax")
register("log_softmax", _softmax("LogSoftmax"), "LogSoftmax")


# -- reductions ---------------------------------------------------------------------------------

def _reduce_op(e: NodeEmit, onnx_op: str, x: str, axes: Sequence[int], keepdims: bool,
               output: str | None = None) -> str:
    axes_input_since = 13 if onnx_op == "ReduceSum" else 18
    if not axes:
        return e.one(onnx_op, [x], output, keepdims=int(keepdims))
    if e.opset >= axes_input_since:
        return e.one(onnx_op, [x, e.i64(list(axes))], output, keepdims=int(keepdims))
    return e.one(onnx_op, [x], output, axes=list(axes), keepdims=int(keepdims))


def _reduce(onnx_op: str) -> Emitter:
    def emit(e: NodeEmit) -> None:
        a = e.attrs
        since = 13 if onnx_op == "ReduceSum" else 18
        known = _known_ints(e, 1)
        # all / any: onnxruntime reduces no booleans before opset 20 and none over an
        # empty set after, so reduce uint8 (0 / 1) and cast back: an empty set gives 0 for
        # max and 255 for min, false and true, the identities of any and all
        boolean = e.in_dtype(0) is DType.BOOL and onnx_op in ("ReduceMin", "ReduceMax")
        attribute = known is not None and e.opset < since
        if attribute:  # a constant input: the attribute form
            a = {**a, "axes": known}
        runtime = e.has(1) and not attribute  # axes known at run time
        if not runtime and not a["axes"] and a["noop_with_empty_axes"]:
            e.out("Abs" if onnx_op == "ReduceL2" else "Identity", [e.input(0)])  # sqrt(x^2), x
            return
        x = e.as_dtype(0, DType.UINT8) if boolean else e.input(0)
        result = e.ge.ex.fresh(f"{e.outs[0]}_u8") if boolean else e.outs[0]
        if runtime:
            e.need_opset(since, f"{onnx_op} with run-time axes")
            e.one(onnx_op, [x, _i64_input(e, 1)], result, keepdims=int(a["keepdims"]),
                  noop_with_empty_axes=1 if a["noop_with_empty_axes"] else None)
        else:
            _reduce_op(e, onnx_op, x, a["axes"], a["keepdims"], result)
        if boolean:
            e.out("Cast", [result], to=dtype_to_onnx(DType.BOOL))
    return emit


for _op, _onnx in {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean",
                   "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
                   "reduce_prod": "ReduceProd", "reduce_l2": "ReduceL2",
                   "reduce_log_sum_exp": "ReduceLogSumExp"}.items():
    register(_op, _reduce(_onnx), _onnx)


def _arg(onnx_op: str) -> Emitter:
    def emit(e: NodeEmit) -> None:
        a = e.attrs
        e.out(onnx_op, [e.input(0)], axis=a["axis"], keepdims=int(a["keepdims"]),
              select_last_index=int(a["select_last_index"]))
    return emit


register("argmax", _arg("ArgMax"), "ArgMax")
register("argmin", _arg("ArgMin"), "ArgMin")


def _cumprod_unrolled(e: NodeEmit) -> None:
    """CumProd before opset 26: a chain of Muls over the slices of a static axis."""
    a = e.attrs
    if e.has(1):
        known = _known_ints(e, 1)
        if known is None:
            raise OpsetTooOld(f"{e.where}: cumprod with a run-time axis needs opset 26 "
                              "(ONNX CumProd) to export", 26)
        a = {**a, "axis": known[0]}
    t = e.in_type(0)
    rank = e.rank(0)
    axis = a["axis"] % rank
    n = t.shape[axis] if t is not None and t.shape is not None else None
    if not isinstance(n, int) or n > 256:
        raise OpsetTooOld(f"{e.where}: cumprod needs opset 26 (ONNX CumProd), or a static "
                          f"axis of at most 256 elements, to export", 26)
    dtype = e.in_dtype(0) or DType.FLOAT32
    x = e.input(0)
    pieces = [e.one("Slice", [x, e.i64([i]), e.i64([i + 1]), e.i64([axis])]) for i in range(n)]
    order = list(range(n))[::-1] if a["reverse"] else list(range(n))
    running: str | None = None
    results: dict[int, str] = {}
    for i in order:
        if a["exclusive"]:
            if running is None:
                shape_like = pieces[i]
                results[i] = e.one("Add", [e.one("Mul", [shape_like, e.scalar(0, dtype)]),
                                           e.scalar(1, dtype)])
            else:
                results[i] = running
            running = pieces[i] if running is None else e.one("Mul", [running, pieces[i]])
        else:
            running = pieces[i] if running is None else e.one("Mul", [running, pieces[i]])
            results[i] = running
    e.out("Concat", [results[i] for i in range(n)], axis=axis)


def _cumulative(onnx_op: str) -> Emitter:
    def emit(e: NodeEmit) -> None:
        if onnx_op == "CumProd" and e.opset < 26:
            _cumprod_unrolled(e)
            return
        a = e.attrs
        axis = _shaped(e, 1, 0, DType.INT64) if e.has(1) else \
            e.const(np.array(a["axis"], dtype=np.int64), "axis")
        e.out(onnx_op, [e.input(0), axis], exclusive=int(a["exclusive"]),
              reverse=int(a["reverse"]))
    return emit


register("cumsum", _cumulative("CumSum"), "CumSum")
register("cumprod", _cumulative("CumProd"), "CumProd")


# -- pooling ------------------------------------------------------------------------------------

def _max_pool(e: NodeEmit) -> None:
    kernel = list(e.attrs["kernel"])
    window = _window(e, len(kernel), kernel)
    e.emit("MaxPool", [e.input(0)], [e.outs[0]], kernel_shape=kernel,
           ceil_mode=int(e.attrs["ceil_mode"]), **window)


def _avg_pool(e: NodeEmit) -> None:
    kernel = list(e.attrs["kernel"])
    window = _window(e, len(kernel), kernel)
    if all(d == 1 for d in window["dilations"]):
        del window["dilations"]  # AveragePool takes dilations from opset 19 only
    else:
        e.need_opset(19, "dilated avg_pool")
    e.out("AveragePool", [e.input(0)], kernel_shape=kernel, ceil_mode=int(e.attrs["ceil_mode"]),
          count_include_pad=int(e.attrs["count_include_pad"]), **window)


register("max_pool", _max_pool, "MaxPool")
register("avg_pool", _avg_pool, "AveragePool")


def _adaptive_avg_pool(e: NodeEmit) -> None:
    if all(o == 1 for o in e.attrs["output_size"]):
        e.out("GlobalAveragePool", [e.input(0)])
        return
    raise NeedDecompose()


register("adaptive_avg_pool", _adaptive_avg_pool, "GlobalAveragePool")


def _adaptive_max_pool(e: NodeEmit) -> None:
    outs = e.attrs["output_size"]
    if all(o == 1 for o in outs):
        e.out("GlobalMaxPool", [e.input(0)])
        return
    sizes = e.static(0)[2:]
    if all(n % o == 0 for n, o in zip(sizes, outs, strict=True)):
        kernel = [n // o for n, o in zip(sizes, outs, strict=True)]
        e.out("MaxPool", [e.input(0)], kernel_shape=kernel, strides=kernel)
        return
    y = e.input(0)
    for axis, (n, o) in enumerate(zip(sizes, outs, strict=True), start=2):
        if n == o:
            continue
        parts = []
        for i in range(o):
            start, end = i * n // o, -(-(i + 1) * n // o)
            piece = e.one("Slice", [y, e.i64([start]), e.i64([end]), e.i64([axis])])
            parts.append(_reduce_op(e, "ReduceMax", piece, [axis], True))
        y = e.one("Concat", parts, axis=axis)
    e.out("Identity", [y])


register("adaptive_max_pool", _adaptive_max_pool, "GlobalMaxPool")


# -- shapes ---------------------------------------------------------------------------------------

def _static_out(e: NodeEmit) -> tuple[int, ...] | None:
    t = e.out_type()
    return t.static_shape() if t is not None and t.is_static else None


def _flatten(e: NodeEmit) -> None:
    rank = max(e.rank(0), 1)
    start = e.attrs["start_axis"] % rank
    end = e.attrs["end_axis"] % rank
    if start == 1 and end == rank - 1:
        e.out("Flatten", [e.input(0)], axis=1)
        return
    static = _static_out(e)
    if static is not None:
        e.out("Reshape", [e.input(0), e.i64(list(static), "shape")])
        return
    x = e.input(0)
    shape = e.one("Shape", [x])
    parts = []
    if start > 0:
        parts.append(e.one("Slice", [shape, e.i64([0]), e.i64([start])]))
    parts.append(e.i64([-1]))
    if end < rank - 1:
        parts.append(e.one("Slice", [shape, e.i64([end + 1]), e.i64([rank])]))
    target = e.one("Concat", parts, axis=0) if len(parts) > 1 else parts[0]
    e.out("Reshape", [x, target])


register("flatten", _flatten, "Flatten")


def _reshape(e: NodeEmit) -> None:
    shape = e.input(1) if e.has(1) else e.i64(list(e.attrs["shape"]), "shape")
    if e.attrs.get("allowzero", False) and (e.has(1) or 0 in e.attrs["shape"]):
        e.need_opset(14, "reshape with allowzero")
        e.out("Reshape", [e.input(0), shape], allowzero=1)
        return
    e.out("Reshape", [e.input(0), shape])


register("reshape", _reshape, "Reshape")


def _shape_of(e: NodeEmit) -> None:
    start, end = e.attrs["start"], e.attrs["end"]
    if e.opset >= 15:
        e.out("Shape", [e.input(0)], start=start or None, end=end or None)
        return
    shape = e.one("Shape", [e.input(0)])
    if start == 0 and end == 0:
        e.out("Identity", [shape])
        return
    stop = end if end != 0 else 2**62
    e.out("Slice", [shape, e.i64([start]), e.i64([stop])])


register("shape_of", _shape_of, "Shape")


def _squeeze(e: NodeEmit) -> None:
    if e.has(1):
        e.out("Squeeze", [e.input(0), _i64_input(e, 1)])
        return
    axes = list(e.attrs["axes"])
    e.out("Squeeze", [e.input(0)] + ([e.i64(axes, "axes")] if axes else []))


def _unsqueeze(e: NodeEmit) -> None:
    axes = _i64_input(e, 1) if e.has(1) else e.i64(list(e.attrs["axes"]), "axes")
    e.out("Unsqueeze", [e.input(0), axes])


register("squeeze", _squeeze, "Squeeze")
register("unsqueeze", _unsqueeze, "Unsqueeze")


# -- data movement ------------------------------------------------------------------------------

def _concat(e: NodeEmit) -> None:
    dtype = e.out_dtype()
    e.out("Concat", [e.as_dtype(i, dtype) for i in range(len(e.ins))], axis=e.attrs["axis"])


register("concat", _concat, "Concat")


def _embedding(e: NodeEmit) -> None:
    e.out("Gather", [e.input(0), e.input(1)], axis=0)


register("embedding", _embedding)


def _expand(e: NodeEmit) -> None:
    if e.has(1):
        shape = e.input(1)
        minus = e.one("Equal", [shape, e.i64(-1)])
        shape = e.one("Where", [minus, e.i64(1), shape])
    else:
        shape = e.i64([1 if d == -1 else d for d in e.attrs["shape"]], "shape")
    e.out("Expand", [e.input(0), shape])


register("expand", _expand, "Expand")


def _gather(e: NodeEmit) -> None:
    e.out("Gather", [e.input(0), e.input(1)], axis=e.attrs["axis"])


def _gather_elements(e: NodeEmit) -> None:
    e.out("GatherElements", [e.input(0), e.input(1)], axis=e.attrs["axis"])


def _scatter_elements(e: NodeEmit) -> None:
    reduction = e.attrs["reduction"]
    if reduction != "none":
        e.need_opset(18 if reduction in ("max", "min") else 16,
                     f"scatter_elements with reduction {reduction}")
    dtype = e.in_dtype(0)
    attrs = {"axis": e.attrs["axis"], "reduction": None if reduction == "none" else reduction}
    if dtype in (DType.FLOAT16, DType.BFLOAT16):  # onnxruntime's kernel refuses them at run
        y = e.one("ScatterElements", [e.as_dtype(0, DType.FLOAT32), e.input(1),
                                      e.as_dtype(2, DType.FLOAT32)], **attrs)
        e.out("Cast", [y], to=dtype_to_onnx(dtype))
        return
    e.out("ScatterElements", [e.input(0), e.input(1), e.input(2)], **attrs)


register("gather", _gather, "Gather")
register("gather_elements", _gather_elements, "GatherElements")
register("scatter_elements", _scatter_elements, "ScatterElements")


def _pad(e: NodeEmit) -> None:
    mode = e.attrs["mode"]
    if mode == "wrap":
        e.need_opset(19, "pad with mode wrap")
    pads = _i64_input(e, 1) if e.has(1) else e.i64(list(e.attrs["pads"]), "pads")
    inputs = [e.input(0), pads]
    dtype = e.in_dtype(0) or DType.FLOAT32
    if mode == "constant" and e.has(2):
        inputs.append(_shaped(e, 2, 0, dtype))
    elif mode == "constant" and e.attrs["value"] != 0.0:
        inputs.append(e.scalar(e.attrs["value"], dtype, "value"))
    e.out("Pad", inputs, mode=mode)


register("pad", _pad, "Pad")


def _permute(e: NodeEmit) -> None:
    e.out("Transpose", [e.input(0)], perm=list(e.attrs["perm"]))


register("permute", _permute, "Transpose")


def _resize_input(e: NodeEmit, attrs: dict[str, object]) -> None:
    """Resize with scales (input 1) or sizes (input 2) known at run time, given per
    spatial dim or per dim of x."""
    rank = e.rank(0)
    x = e.input(0)
    index = 1 if e.has(1) else 2
    t = e.in_type(index)
    length = t.shape[0] if t is not None and t.shape is not None and len(t.shape) == 1 \
        else None
    if length not in (rank, rank - 2):
        raise ExportError(f"{e.where}: resize {'scales' if index == 1 else 'sizes'} of "
                          "unknown length cannot be exported")
    value = e.as_dtype(index, DType.FLOAT32 if index == 1 else DType.INT64)
    if length == rank - 2:   # full-rank, never `axes` (see _resize)
        if index == 1:
            value = e.one("Concat", [e.const(np.ones(2, np.float32), "scales"), value], axis=0)
        else:
            head = e.one("Slice", [e.one("Shape", [x]), e.i64([0]), e.i64([2])])
            value = e.one("Concat", [head, value], axis=0)
    inputs = [x, "", value] if index == 1 else [x, "", "", value]
    e.out("Resize", inputs, **attrs)


def _resize(e: NodeEmit) -> None:
    a = e.attrs
    x = e.input(0)
    attrs = {"mode": a["mode"], "coordinate_transformation_mode": a["coordinate_mode"],
             "nearest_mode": a["nearest_mode"], "cubic_coeff_a": -0.75}
    if e.has(1) or e.has(2):
        _resize_input(e, attrs)
        return
    # Scales / sizes are written for every dim (1 / the input's size on N and C), never
    # with opset 18's `axes`: IREE's ONNX importer cannot lower a Resize with `axes`, and
    # the full-rank form means the same at every opset.
    if a["sizes"]:
        t = e.in_type(0)
        lead = t.shape[:2] if t is not None and t.shape is not None else (None, None)
        if all(isinstance(d, int) for d in lead):
            sizes = e.i64([*lead, *a["sizes"]], "sizes")  # type: ignore[list-item]
        else:
            head = e.one("Slice", [e.one("Shape", [x]), e.i64([0]), e.i64([2])])
            sizes = e.one("Concat", [head, e.i64(list(a["sizes"]))], axis=0)
        e.out("Resize", [x, "", "", sizes], **attrs)
        return
    if a["coordinate_mode"] == "align_corners" and _resize_fractional(e):
        _resize_gathered(e)
        return
    scales = e.const(np.array([1.0, 1.0, *a["scales"]], dtype=np.float32), "scales")
    e.out("Resize", [x, "", scales], **attrs)


def _resize_fractional(e: NodeEmit) -> bool:
    """Whether a scale gives a fractional resized length (size 4 at 0.6 is 2.4): ONNX
    align_corners divides by it, onnxruntime's Resize by the whole output size."""
    from irbridge.ops.nn import resized_length

    t = e.in_type(0)
    if t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape[2:]):
        return False
    for n, scale in zip(t.shape[2:], e.attrs["scales"], strict=True):
        assert isinstance(n, int)
        out = math.floor(n * scale)
        if resized_length(n, out, 1 / scale) != out:
            return True
    return False


def _resize_gathered(e: NodeEmit) -> None:
    """Resize as the registry computes it: per spatial axis, Gathers of each tap's source
    rows (constant indices) weighted by constant weights and summed."""
    from irbridge.ops.nn import _resize_taps

    a = e.attrs
    t = e.in_type(0)
    assert t is not None and t.shape is not None
    dtype = e.in_dtype(0) or DType.FLOAT32
    y = e.input(0)
    if a["mode"] != "nearest" and not dtype.is_float:
        y = e.one("Cast", [y], to=dtype_to_onnx(DType.FLOAT32))
    work = dtype if dtype.is_float else DType.FLOAT32
    rank = len(t.shape)
    for axis, (n, scale) in enumerate(zip(t.shape[2:], a["scales"], strict=True), start=2):
        assert isinstance(n, int)
        index, weights = _resize_taps(a, n, math.floor(n * scale), 1 / scale)
        total: str | None = None
        for tap in range(index.shape[1]):
            taken = e.one("Gather", [y, e.i64(index[:, tap].tolist())], axis=axis)
            if a["mode"] == "nearest":
                total = taken
                break
            shape = (len(index), *(1,) * (rank - 1 - axis))
            w = e.const(weights[:, tap].astype(work.numpy).reshape(shape), "weights")
            term = e.one("Mul", [taken, w])
            total = term if total is None else e.one("Add", [total, term])
        assert total is not None
        y = total
    if a["mode"] != "nearest" and not dtype.is_float:
        y = e.one("Cast", [y], to=dtype_to_onnx(dtype))
    e.out("Identity", [y])


register("resize", _resize, "Resize")

# run-time slices (interop): converters/onnx/_export_dynamic.py
register("dynamic_slice", _export_dynamic.dynamic_slice)
register("dynamic_update_slice", _export_dynamic.dynamic_update_slice)
for _bitwise_op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
    register(_bitwise_op, _export_dynamic.bitwise)
for _bitwise_op in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
    register(_bitwise_op, _export_dynamic.shift)
register("popcnt", _export_dynamic.popcnt)
register("count_leading_zeros", _export_dynamic.count_leading_zeros)


def _slice(e: NodeEmit) -> None:
    a = e.attrs
    if not any(e.has(i) for i in range(1, 5)):
        count = len(a["starts"])
        axes = list(a["axes"]) or list(range(count))
        steps = list(a["steps"]) or [1] * count
        e.out("Slice", [e.input(0), e.i64(list(a["starts"]), "starts"),
                        e.i64(list(a["ends"]), "ends"), e.i64(axes, "axes"),
                        e.i64(steps, "steps")])
        return
    # run-time bounds: each input as int64, else its attribute (empty axes / steps: omitted)
    inputs: list[str | None] = [e.input(0)]
    for index, name in enumerate(("starts", "ends", "axes", "steps"), start=1):
        if e.has(index):
            inputs.append(_i64_input(e, index))
        elif a[name] or name in ("starts", "ends"):
            inputs.append(e.i64(list(a[name]), name))
        else:
            inputs.append(None)
    while inputs[-1] is None:
        inputs.pop()
    e.out("Slice", inputs)


register("slice", _slice, "Slice")


def _split(e: NodeEmit) -> None:
    sizes = _i64_input(e, 1) if e.has(1) else e.i64(list(e.attrs["sizes"]), "split")
    e.emit("Split", [e.input(0), sizes], e.outs, axis=e.attrs["axis"])


register("split", _split, "Split")


def _tile(e: NodeEmit) -> None:
    repeats = _i64_input(e, 1) if e.has(1) else e.i64(list(e.attrs["repeats"]), "repeats")
    e.out("Tile", [e.input(0), repeats])


register("tile", _tile, "Tile")


def _trilu(e: NodeEmit) -> None:
    k = e.attrs["k"]
    if e.has(1):
        known = _known_ints(e, 1)
        if e.opset >= 14 or known is None:
            e.need_opset(14, "trilu with a run-time k")
            e.out("Trilu", [e.input(0), _shaped(e, 1, 0, DType.INT64)],
                  upper=int(e.attrs["upper"]))
            return
        k = known[0]
    if e.opset < 14:  # no Trilu yet: a constant mask over the (static) last two dims
        t = e.in_type(0)
        dims = t.shape[-2:] if t is not None and t.shape is not None else ()
        if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
            raise ExportError(f"{e.where}: trilu needs opset 14, or static last dims")
        rows, cols = (int(d) for d in dims if isinstance(d, int))
        ones = np.ones((rows, cols), dtype=bool)
        keep = np.triu(ones, k) if e.attrs["upper"] else np.tril(ones, k)
        zero = e.scalar(0, e.in_dtype(0))
        e.out("Where", [e.const(keep, "mask"), e.input(0), zero])
        return
    k = e.const(np.array(e.attrs["k"], dtype=np.int64), "k")
    e.out("Trilu", [e.input(0), k], upper=int(e.attrs["upper"]))


register("trilu", _trilu, "Trilu")


# -- constants -------------------------------------------------------------------------------------

INLINE = 1 << 20
"""Constant nodes above this many bytes are written as initializers."""


def _constant(e: NodeEmit) -> None:
    from irbridge.converters.onnx._common import tensor_to_proto

    tensor = e.attrs["value"]
    if tensor.data is None:
        raise ExportError(f"{e.where}: constant {tensor.name!r} has no data (shape-only IR)")
    if tensor.nbytes > INLINE:
        e.ge.ex.initializers.append(tensor_to_proto(tensor, e.outs[0]))
        return
    e.out("Constant", [], value=tensor_to_proto(tensor, e.outs[0]))


register("constant", _constant, "Constant")


def _full(e: NodeEmit) -> None:
    dtype: DType = e.attrs["dtype"]
    value = np.array([e.attrs["value"]]).astype(dtype.numpy)
    from irbridge.converters.onnx._common import array_to_proto

    e.out("ConstantOfShape", [e.i64(list(e.attrs["shape"]), "shape")],
          value=array_to_proto(value, "value"))


register("full", _full, "ConstantOfShape")

_RANGE_TYPES = {DType.FLOAT32, DType.FLOAT64, DType.INT16, DType.INT32, DType.INT64}


def _range(e: NodeEmit) -> None:
    a = e.attrs
    if any(e.has(i) for i in range(3)):  # run-time bounds: scalars of the inputs' dtype
        out = e.out_dtype() or DType.INT64
        if out in (DType.FLOAT16, DType.BFLOAT16):
            _narrow_range(e, out)
            return
        if out not in _RANGE_TYPES:
            raise ExportError(f"{e.where}: ONNX Range lacks {out.short}")
        e.out("Range", [_shaped(e, i, 0) if e.has(i) else e.scalar(a[name], out, name)
                        for i, name in enumerate(("start", "limit", "delta"))])
        return
    dtype: DType = a["dtype"]
    if dtype not in _RANGE_TYPES:
        n = max(math.ceil((a["limit"] - a["start"]) / a["delta"]), 0)
        values = (a["start"] + a["delta"] * np.arange(n)).astype(dtype.numpy)
        e.out("Identity", [e.const(values, "range")])
        return
    e.out("Range", [e.scalar(a["start"], dtype, "start"), e.scalar(a["limit"], dtype, "limit"),
                    e.scalar(a["delta"], dtype, "delta")])


def _narrow_range(e: NodeEmit, out: DType) -> None:
    """float16 / bfloat16 Range (ONNX's before opset 27 takes neither): Range in float64,
    which holds start + i * delta exactly for every output that fits in memory (float16
    values are multiples of 2^-24 below 2^17; bfloat16 spans over 45 bits need over 2^38
    elements), then rounded once to `out`, as the reference rounds it (numpy: float16
    directly; ml_dtypes: bfloat16 through float32, which is onnxruntime's Cast). For
    float16, onnxruntime's Cast from float64 also goes through float32, which rounds twice:
    where the float32 value f is a float16 half-way point and v != f, the float16 neighbour
    on v's side is taken instead (`twice` = 2f - h, the other neighbour of f's rounding h)."""
    wide = [e.ge.cast(_shaped(e, i, 0), out, DType.FLOAT64) if e.has(i) else
            e.scalar(e.attrs[name], DType.FLOAT64, name)
            for i, name in enumerate(("start", "limit", "delta"))]
    values = e.one("Range", wide)
    if out is DType.BFLOAT16:
        e.out("Cast", [values], to=dtype_to_onnx(out))
        return
    f32, f16 = dtype_to_onnx(DType.FLOAT32), dtype_to_onnx(DType.FLOAT16)
    f = e.one("Cast", [values], to=f32)
    rest = e.one("Sub", [values, e.one("Cast", [f], to=dtype_to_onnx(DType.FLOAT64))])
    h = e.one("Cast", [e.one("Cast", [f], to=f16)], to=f32)
    twice = e.one("Sub", [e.one("Add", [f, f]), h])
    half_way = e.one("And", [e.one("Equal", [e.one("Cast", [e.one("Cast", [twice], to=f16)],
                                                    to=f32), twice]),
                             e.one("Not", [e.one("Equal", [twice, h])])])
    zero = e.scalar(0.0, DType.FLOAT64, "zero")
    up = e.one("And", [half_way, e.one("Greater", [rest, zero])])
    down = e.one("And", [half_way, e.one("Less", [rest, zero])])
    chosen = e.one("Where", [up, e.one("Max", [h, twice]),
                             e.one("Where", [down, e.one("Min", [h, twice]), h])])
    e.out("Cast", [chosen], to=f16)


register("range", _range, "Range")


# -- selection, one-hot ---------------------------------------------------------------------------

def _topk(e: NodeEmit) -> None:
    a = e.attrs
    k = _shaped(e, 1, 1, DType.INT64) if e.has(1) else e.i64([a["k"]], "k")
    dtype = e.in_dtype(0)
    if dtype is not None and dtype.is_float:
        _nan_ordered_topk(e, k, a["axis"] % e.rank(0), bool(a["largest"]))
        return
    e.emit("TopK", [e.input(0), k], e.outs, axis=a["axis"],
           largest=int(a["largest"]), sorted=int(a["sorted"]))


def _axis_length(e: NodeEmit, axis: int) -> str:
    t = e.in_type(0)
    dim = t.shape[axis] if t is not None and t.shape is not None else None
    if isinstance(dim, int):
        return e.i64([dim], "k")
    if e.opset >= 15:  # Shape's start and end attributes
        return e.one("Shape", [e.input(0)], start=axis, end=axis + 1)
    return e.one("Slice", [e.one("Shape", [e.input(0)]), e.i64([axis]), e.i64([axis + 1])])


def _nan_ordered_topk(e: NodeEmit, k: str | None, axis: int, largest: bool) -> None:
    """TopK of float data in the IR's order, NaN as the largest value and ties in index
    order: onnxruntime's TopK leaves NaN anywhere, so sort the data with NaN zeroed, then
    stably by the NaN flag (TopK puts equal keys in index order), and take the first k."""
    x = e.input(0)
    nan = e.one("IsNaN", [x])
    clean = e.one("Where", [nan, e.scalar(0, e.in_dtype(0), "zero"), x])
    n = _axis_length(e, axis)
    first = e.emit("TopK", [clean, n], 2, axis=axis, largest=int(largest), sorted=1)[1]
    flags = e.one("Cast", [e.one("GatherElements", [nan, first], axis=axis)],
                  to=dtype_to_onnx(DType.FLOAT32))
    second = e.emit("TopK", [flags, n], 2, axis=axis, largest=int(largest), sorted=1)[1]
    order = e.one("GatherElements", [first, second], axis=axis)
    if k is not None:
        order = e.one("Slice", [order, e.i64([0], "start"), k, e.i64([axis], "axis")])
    e.emit("Identity", [order], [e.outs[1]])
    e.emit("GatherElements", [x, e.outs[1]], [e.outs[0]], axis=axis)


register("topk", _topk, "TopK")


def _sort(e: NodeEmit) -> None:
    a = e.attrs
    axis = a["axis"] % e.rank(0)
    dtype = e.in_dtype(0)
    if dtype is not None and dtype.is_float:
        _nan_ordered_topk(e, None, axis, bool(a["descending"]))
        return
    e.emit("TopK", [e.input(0), _axis_length(e, axis)], e.outs, axis=axis,
           largest=int(a["descending"]), sorted=1)


register("sort", _sort)


def _one_hot(e: NodeEmit) -> None:
    """OneHot over int64 indices and depth with int64 or float values, cast to the
    neutral dtype otherwise: onnxruntime has kernels for those combinations only."""
    a = e.attrs
    dtype: DType = a["dtype"]
    kind = dtype if dtype in (DType.INT64, DType.FLOAT32) else DType.INT64
    values = e.const(np.array([0, 1]).astype(kind.numpy), "values")
    # a run-time depth as int64 (truncated, as ONNX reads it)
    depth = e.as_dtype(1, DType.INT64) if e.has(1) else \
        e.const(np.array(a["depth"], dtype=np.int64), "depth")
    indices = e.as_dtype(0, DType.INT64)
    if kind == dtype:
        e.out("OneHot", [indices, depth, values], axis=a["axis"])
        return
    hot = e.one("OneHot", [indices, depth, values], axis=a["axis"])
    e.out("Cast", [hot], to=dtype_to_onnx(dtype))


register("one_hot", _one_hot)  # import gives one_hot + where: regrouped


# -- control flow ----------------------------------------------------------------------------------

def _if(e: NodeEmit) -> None:
    then_branch = e.ge.subgraph(e.attrs["then_branch"])
    else_branch = e.ge.subgraph(e.attrs["else_branch"])
    cond = e.as_dtype(0, DType.BOOL)
    e.emit("If", [cond], e.outs, then_branch=then_branch, else_branch=else_branch)


def _loop(e: NodeEmit) -> None:
    body = e.ge.subgraph(e.attrs["body"])
    e.emit("Loop", [n or "" for n in e.ins], e.outs, body=body)


register("if", _if, "If")
register("loop", _loop, "Loop")


# -- elementwise math (issue 13; helper "math") ----------------------------------------------------
# Direct ONNX ops where they exist. trunc, erfc, signbit, atan2, copysign, fmin, fmax and hypot
# have no emitter: the exporter writes their registry decomposition (irbridge/ops/
# elementwise.py), as for erfinv, lgamma, digamma, polygamma, ndtri, erfcx and zeta (torch's
# algorithms, irbridge/ops/_gamma_decomp.py). Special functions with neither (Bessel,
# nextafter, ...): export refuses them naming the node, as ONNX has no exact form for them.

def _math_unary(onnx_op: str) -> Emitter:
    def emit(e: NodeEmit) -> None:
        source, out = e.in_dtype(0), e.out_dtype()
        if source is None or source.is_float:
            e.out(onnx_op, [e.input(0)])
            return
        y = e.one(onnx_op, [e.ge.cast(e.input(0), source, DType.FLOAT32)])
        e.out("Cast", [y], to=dtype_to_onnx(out or source))
    return emit


for _op, _onnx in {"acos": "Acos", "asin": "Asin", "atan": "Atan", "sinh": "Sinh",
                   "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh",
                   "atanh": "Atanh"}.items():
    register(_op, _math_unary(_onnx), _onnx)


def _fmod(e: NodeEmit) -> None:
    """C fmod (sign of the dividend) is ONNX Mod with fmod=1, for floats and integers."""
    dtype = e.out_dtype()
    if dtype == DType.BOOL:  # torch has no bool fmod either; Mod would divide by false
        raise ExportError(f"{e.where}: fmod of bool tensors cannot export to ONNX (Mod would "
                          "divide by false; torch has no bool fmod)")
    e.out("Mod", [e.as_dtype(0, dtype), e.as_dtype(1, dtype)], fmod=1)


register("fmod", _fmod)


# -- index_put ----------------------------------------------------------------------------------
def _index_put(e: NodeEmit) -> None:
    """Integer index tensors on consecutive axes a..a+k-1 as one ScatterND: x transposed so
    those axes lead, coordinates = the broadcast indices stacked (negatives wrapped), the
    values broadcast to the indexed shape (pre + B + post, NumPy's rule for consecutive
    advanced indices) and moved to B + pre + post; accumulate is reduction add (opset 16).
    Symbolic sizes are read at run time (`Shape`), B as the shape of the indices' sum
    (their broadcast); the index tensors' ranks must be known."""
    axes = list(e.attrs["index_axes"])
    count = len(axes)
    rank = e.rank(0)
    index_types = [e.in_type(2 + j) for j in range(count)]
    if any(t is None or t.dtype == DType.BOOL for t in index_types):
        raise ExportError(f"{e.where}: index_put with a bool mask has no exact ONNX form here "
                          "(a data-dependent number of positions)")
    if axes != list(range(axes[0], axes[0] + count)):
        raise ExportError(f"{e.where}: index_put on non-adjacent axes {axes} is not exported "
                          "to ONNX")
    if e.attrs["accumulate"]:
        e.need_opset(16, "index_put with accumulate (ScatterND reduction add)")
    first = axes[0]
    x_type = e.in_type(0)
    indices = [e.as_dtype(2 + j, DType.INT64) for j in range(count)]
    if x_type is not None and x_type.is_static and all(
            t is not None and t.is_static for t in index_types):
        shape = e.static(0)
        batch_dims = tuple(int(d) for d in np.broadcast_shapes(
            *(e.static(2 + j) for j in range(count))))
        batch = e.i64(list(batch_dims))
        sizes = [e.i64([shape[first + j]]) for j in range(count)]
        target = e.i64([*shape[:first], *batch_dims, *shape[first + count:]])
        nb = len(batch_dims)
    else:
        if any(t is None or t.shape is None for t in index_types):
            raise ExportError(f"{e.where}: index_put with symbolic sizes exports when its "
                              "index tensors' ranks are known")
        nb = max(len(t.shape or ()) for t in index_types if t is not None)
        x_shape = e.one("Shape", [e.input(0)])
        total = indices[0]
        for i in indices[1:]:   # (Add broadcasts: its result has B's shape)
            total = e.one("Add", [total, i])
        batch = e.one("Shape", [total])
        sizes = [e.one("Slice", [x_shape, e.i64([first + j]), e.i64([first + j + 1])])
                 for j in range(count)]
        target = e.one("Concat", [e.one("Slice", [x_shape, e.i64([0]), e.i64([first])]), batch,
                                  e.one("Slice", [x_shape, e.i64([first + count]),
                                                  e.i64([rank])])], axis=0)
    coords = []
    for i, size in zip(indices, sizes, strict=True):
        wrapped = e.one("Where", [e.one("Less", [i, e.i64(0)]), e.one("Add", [i, size]), i])
        full = e.one("Expand", [wrapped, batch])
        coords.append(e.one("Unsqueeze", [full, e.i64([-1])]))
    index = coords[0] if count == 1 else e.one("Concat", coords, axis=-1)
    lead = list(range(first, first + count))
    perm = lead + [d for d in range(rank) if d not in lead]
    xt = e.one("Transpose", [e.input(0)], perm=perm)
    values = e.one("Expand", [e.as_dtype(1, e.in_dtype(0)), target])
    npre, total_rank = first, nb + rank - count
    vperm = list(range(npre, npre + nb)) + list(range(npre)) + list(
        range(npre + nb, total_rank))
    vt = e.one("Transpose", [values], perm=vperm)
    yt = e.one("ScatterND", [xt, index, vt],
               reduction="add" if e.attrs["accumulate"] else None)
    e.out("Transpose", [yt], perm=[perm.index(d) for d in range(rank)])


register("index_put", _index_put)


# -- linalg helper: linear algebra (issue 13) ----------------------------------------------
# Only det has an ONNX operator (Det, opset 11, batched over leading dims); inverse, cholesky
# and solve have none and are refused in one line naming the node (no approximate export).

def _det(e: NodeEmit) -> None:
    e.out("Det", [e.input(0)])


register("det", _det, "Det")
# -- end linalg helper ---------------------------------------------------------------------
