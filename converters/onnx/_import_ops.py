"""One handler per ONNX op (default domain): how the op is written in neutral ops.

A handler reads a `NodeCtx` (IR inputs, constant values, attributes, opset version) and
emits neutral ops through it, returning one IR value per ONNX output (None for an output
nothing reads). It raises `Unsupported` with a reason when the node needs something the
neutral op set cannot express (a run-time input no neutral input takes, an unsupported
mode, ...); the importer then tries the op's ONNX function body and otherwise keeps an
opaque node. Parameters that ONNX passes as tensor inputs become attributes when they are
constants, else the neutral op's optional input of the same meaning (`_param`).
Semantics follow the ONNX operator specification of the node's opset version.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import GraphProto, TensorProto, helper

from irbridge.converters.onnx._common import dtype_from_onnx, onnx_type_name
from irbridge.converters.onnx.importer import HANDLERS, NodeCtx, Unsupported
from irbridge.dtypes import DType
from irbridge.ir import Dim, Value

Results = Sequence[Value | None]
HandlerFn = Callable[[NodeCtx], Results]


def handles(*op_types: str) -> Callable[[HandlerFn], HandlerFn]:
    def register(fn: HandlerFn) -> HandlerFn:
        for op_type in op_types:
            if op_type in HANDLERS:
                raise ValueError(f"two handlers for {op_type}")
            HANDLERS[op_type] = fn
        return fn
    return register


# -- shared helpers ----------------------------------------------------------------------------

def _scalar(ctx: NodeCtx, value: float | int | bool, like: Value | DType) -> Value:
    dtype = like if isinstance(like, DType) else _dtype(like)
    return ctx.constant(np.asarray(value).astype(dtype.numpy), dtype)


def _dtype(value: Value) -> DType:
    if value.type is None:
        raise Unsupported(f"value {value.name!r} has no type")
    return value.type.dtype


def _axis(ctx: NodeCtx, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise Unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _onnx_dtype(elem_type: int) -> DType:
    dtype = dtype_from_onnx(elem_type)
    if dtype is None:
        raise Unsupported(f"element type {onnx_type_name(elem_type)} has no IR equivalent")
    return dtype


def _axes_input_or_attr(ctx: NodeCtx, since: int, index: int = 1) -> tuple[int, ...] | None:
    """Axes from attribute `axes` (older opsets) or input `index` (opset >= since), which
    must then be a constant."""
    if ctx.opset >= since:
        if not ctx.has(index):
            return None
        return ctx.ints(index, "axes")
    axes = ctx.a("axes")
    return None if axes is None else tuple(int(a) for a in axes)


def _param(ctx: NodeCtx, index: int, name: str, attrs: dict[str, Any],
           inputs: list[Value | None]) -> None:
    """An int-list parameter that ONNX passes as input `index`: its value as attribute
    `name` when it is a constant, else the input itself at position `index` of the neutral
    op's inputs (the neutral op's optional input of the same meaning)."""
    if not ctx.has(index):
        return
    value = ctx.const(index)
    if value is not None:
        attrs[name] = tuple(int(v) for v in np.asarray(value).reshape(-1))
        return
    while len(inputs) <= index:
        inputs.append(None)
    inputs[index] = ctx.x(index)


def _scalar_param(ctx: NodeCtx, index: int, name: str, attrs: dict[str, Any],
                  inputs: list[Value | None], at: int | None = None) -> None:
    """A one-element int parameter passed as ONNX input `index`: attribute `name` when
    constant, else the input at position `at` (default `index`) of the neutral op."""
    if not ctx.has(index):
        return
    value = ctx.const(index)
    if value is not None:
        flat = np.asarray(value).reshape(-1)
        if flat.size != 1:
            raise Unsupported(f"{name} (input {index}) must hold one element")
        attrs[name] = int(flat[0])
        return
    position = index if at is None else at
    while len(inputs) <= position:
        inputs.append(None)
    inputs[position] = ctx.x(index)


def _length(value: Value) -> int | None:
    """Static length of a 1-D value, else None."""
    shape = value.type.shape if value.type is not None else None
    if shape is None or len(shape) != 1 or not isinstance(shape[0], int):
        return None
    return shape[0]


def _static_dim(ctx: NodeCtx, value: Value, axis: int) -> int:
    shape = value.type.shape if value.type is not None else None
    if shape is None or not isinstance(shape[axis], int):
        raise Unsupported(f"dim {axis} of {value.name!r} must be static")
    dim = shape[axis]
    assert isinstance(dim, int)
    return dim


# -- elementwise ------------------------------------------------------------------------------

_UNARY = {
    "Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Reciprocal": "reciprocal", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Erf": "erf",
    "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Not": "logical_not",
    "IsNaN": "isnan", "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Mish": "mish",
    "HardSwish": "hardswish", "BitwiseNot": "bitwise_not",
}


def _unary_handler(neutral: str) -> HandlerFn:
    def handler(ctx: NodeCtx) -> Results:
        return [ctx.op(neutral, [ctx.x(0)])]
    return handler


for _onnx_op, _neutral in _UNARY.items():
    handles(_onnx_op)(_unary_handler(_neutral))

_BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "logical_and",
    "Or": "logical_or", "Xor": "logical_xor", "Equal": "equal", "Less": "less",
    "Greater": "greater", "LessOrEqual": "less_equal", "GreaterOrEqual": "greater_equal",
    "PRelu": "prelu", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}


def _binary_handler(neutral: str) -> HandlerFn:
    def handler(ctx: NodeCtx) -> Results:
        a, b = ctx.x(0), ctx.x(1)
        if _dtype(a) != _dtype(b) and neutral != "prelu":
            raise Unsupported("operands of different element types")
        return [ctx.op(neutral, [a, b])]
    return handler


for _onnx_op, _neutral in _BINARY.items():
    handles(_onnx_op)(_binary_handler(_neutral))


@handles("Identity")
def _identity(ctx: NodeCtx) -> Results:
    return [ctx.x(0)]


@handles("IsInf")
def _isinf(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    negative, positive = ctx.a("detect_negative", 1), ctx.a("detect_positive", 1)
    if negative and positive:
        return [ctx.op("isinf", [x])]
    if not negative and not positive:
        return [ctx.op("less", [x, x])]  # False everywhere, NaN included
    side = ctx.op("greater" if positive else "less", [x, _scalar(ctx, 0, x)])
    return [ctx.op("logical_and", [ctx.op("isinf", [x]), side])]


@handles("Gelu")
def _gelu(ctx: NodeCtx) -> Results:
    return [ctx.op("gelu", [ctx.x(0)], {"approximate": ctx.a("approximate", "none")})]


@handles("HardSigmoid")
def _hardsigmoid(ctx: NodeCtx) -> Results:
    return [ctx.op("hardsigmoid", [ctx.x(0)], {"alpha": ctx.a("alpha", 0.2),
                                               "beta": ctx.a("beta", 0.5)})]


@handles("LeakyRelu")
def _leaky_relu(ctx: NodeCtx) -> Results:
    return [ctx.op("leaky_relu", [ctx.x(0)], {"alpha": ctx.a("alpha", 0.01)})]


@handles("Elu")
def _elu(ctx: NodeCtx) -> Results:
    return [ctx.op("elu", [ctx.x(0)], {"alpha": ctx.a("alpha", 1.0)})]


@handles("Softplus")
def _softplus(ctx: NodeCtx) -> Results:
    # ONNX: log(exp(x) + 1); the neutral op's linear tail above 20 differs by < 3e-9
    return [ctx.op("softplus", [ctx.x(0)])]


@handles("Selu")
def _selu(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    alpha = ctx.a("alpha", 1.67326319217681884765625)
    gamma = ctx.a("gamma", 1.05070102214813232421875)
    return [ctx.op("mul", [ctx.op("elu", [x], {"alpha": alpha}), _scalar(ctx, gamma, x)])]


@handles("Celu")
def _celu(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    alpha = float(ctx.a("alpha", 1.0))
    if alpha == 1.0:
        return [ctx.op("elu", [x])]
    scaled = ctx.op("div", [x, _scalar(ctx, alpha, x)])
    return [ctx.op("mul", [ctx.op("elu", [scaled]), _scalar(ctx, alpha, x)])]


@handles("Softsign")
def _softsign(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    return [ctx.op("div", [x, ctx.op("add", [ctx.op("abs", [x]), _scalar(ctx, 1, x)])])]


@handles("ThresholdedRelu")
def _thresholded_relu(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    keep = ctx.op("greater", [x, _scalar(ctx, ctx.a("alpha", 1.0), x)])
    return [ctx.op("where", [keep, x, _scalar(ctx, 0, x)])]


@handles("Shrink")
def _shrink(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    bias, lambd = float(ctx.a("bias", 0.0)), float(ctx.a("lambd", 0.5))
    low = ctx.op("less", [x, _scalar(ctx, -lambd, x)])
    high = ctx.op("greater", [x, _scalar(ctx, lambd, x)])
    shifted_up = ctx.op("add", [x, _scalar(ctx, bias, x)])
    shifted_down = ctx.op("sub", [x, _scalar(ctx, bias, x)])
    inner = ctx.op("where", [high, shifted_down, _scalar(ctx, 0, x)])
    return [ctx.op("where", [low, shifted_up, inner])]


@handles("Swish")
def _swish(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    alpha = float(ctx.a("alpha", 1.0))
    if alpha == 1.0:
        return [ctx.op("silu", [x])]
    gate = ctx.op("sigmoid", [ctx.op("mul", [x, _scalar(ctx, alpha, x)])])
    return [ctx.op("mul", [x, gate])]


@handles("Acos", "Asin", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
def _inverse_and_hyperbolic(ctx: NodeCtx) -> Results:
    """The neutral ops of the same name (irbridge/ops/elementwise.py)."""
    return [ctx.op(ctx.op_type.lower(), [ctx.x(0)])]


@handles("Det")
def _det(ctx: NodeCtx) -> Results:
    """The neutral `det` (irbridge/ops/linalg.py): batched over leading dims, as ONNX's."""
    return [ctx.op("det", [ctx.x(0)])]


@handles("Pow")
def _pow(ctx: NodeCtx) -> Results:
    a, b = ctx.x(0), ctx.x(1)
    if _dtype(a) == _dtype(b):
        return [ctx.op("pow", [a, b])]
    if _dtype(a).is_float and _dtype(b).is_float and _dtype(a).itemsize >= _dtype(b).itemsize:
        return [ctx.op("pow", [a, ctx.op("cast", [b], {"dtype": _dtype(a)})])]
    if _dtype(a).is_float:
        return [ctx.op("pow", [a, ctx.op("cast", [b], {"dtype": _dtype(a)})])]
    # integer base: ONNX keeps the base's type
    wide = ctx.op("cast", [a], {"dtype": _dtype(b)}) if _dtype(b).is_float else a
    result = ctx.op("pow", [wide, b])
    return [ctx.op("cast", [result], {"dtype": _dtype(a)}) if _dtype(result) != _dtype(a)
            else result]


@handles("Mod")
def _mod(ctx: NodeCtx) -> Results:
    a, b = ctx.x(0), ctx.x(1)
    if not ctx.a("fmod", 0):
        return [ctx.op("mod", [a, b])]
    # C fmod: the sign of the dividend
    magnitude = ctx.op("mod", [ctx.op("abs", [a]), ctx.op("abs", [b])])
    return [ctx.op("mul", [ctx.op("sign", [a]), magnitude])]


@handles("BitShift")
def _bitshift(ctx: NodeCtx) -> Results:
    """x * 2^s (wrapping) for LEFT, floor(x / 2^s) (arithmetic) for RIGHT, computed in
    int64 with multiplications by 0/1 rather than selects (runtimes lack small-integer
    kernels); shifts outside [0, width) give 0, or the sign fill for RIGHT (opset 28)."""
    x, shift = ctx.x(0), ctx.x(1)
    dtype = _dtype(x)
    if not dtype.is_integer:
        raise Unsupported("BitShift of non-integer values")
    width = 8 * dtype.itemsize
    wide = dtype if width == 64 else DType.INT64
    xw = x if wide == dtype else ctx.op("cast", [x], {"dtype": wide})
    sw = shift if _dtype(shift) == wide else ctx.op("cast", [shift], {"dtype": wide})
    outside = ctx.op("logical_or", [ctx.op("less", [sw, _scalar(ctx, 0, wide)]),
                                    ctx.op("greater_equal", [sw, _scalar(ctx, width, wide)])])
    keep = ctx.op("cast", [ctx.op("logical_not", [outside])], {"dtype": wide})
    factor = ctx.op("pow", [_scalar(ctx, 2, wide), ctx.op("mul", [sw, keep])])
    if ctx.a("direction", "LEFT") == "LEFT":
        y = ctx.op("mul", [ctx.op("mul", [xw, factor]), keep])
    else:
        y = ctx.op("mul", [ctx.op("floor_div", [xw, factor]), keep])
        if dtype.name.startswith("INT"):  # sign fill: -1 for negative x shifted too far
            negative = ctx.op("cast", [ctx.op("less", [xw, _scalar(ctx, 0, wide)])],
                              {"dtype": wide})
            fill = ctx.op("mul", [negative, ctx.op("cast", [outside], {"dtype": wide})])
            y = ctx.op("sub", [y, fill])
    return [y if wide == dtype else ctx.op("cast", [y], {"dtype": dtype})]


def _variadic(neutral: str) -> HandlerFn:
    def handler(ctx: NodeCtx) -> Results:
        values = [ctx.x(i) for i in range(len(ctx.inputs))]
        if not values:
            raise Unsupported("no inputs")
        result = values[0]
        for other in values[1:]:
            result = ctx.op(neutral, [result, other])
        if ctx.op_type == "Mean" and len(values) > 1:
            result = ctx.op("div", [result, _scalar(ctx, len(values), result)])
        return [result]
    return handler


handles("Max")(_variadic("maximum"))
handles("Min")(_variadic("minimum"))
handles("Sum", "Mean")(_variadic("add"))


@handles("Where")
def _where_op(ctx: NodeCtx) -> Results:
    return [ctx.op("where", [ctx.x(0), ctx.x(1), ctx.x(2)])]


_FP8_MAX = {DType.FLOAT8_E4M3FN: 448.0, DType.FLOAT8_E5M2: 57344.0,
            DType.FLOAT8_E4M3FNUZ: 240.0, DType.FLOAT8_E5M2FNUZ: 57344.0}


def _cast_to(ctx: NodeCtx, x: Value, target: DType) -> Value:
    source = _dtype(x)
    if source == target:
        return ctx.op("identity", [x])
    if target is DType.FLOAT8_E8M0FNU and source.is_float:
        return _cast_to_e8m0(ctx, x)
    if target in _FP8_MAX and source.is_float and ctx.a("saturate", 1) and ctx.opset >= 19:
        limit = _FP8_MAX[target]
        x = ctx.op("clip", [x], {"min": -limit, "max": limit})  # infinities included
    return ctx.op("cast", [x], {"dtype": target})


def _cast_to_e8m0(ctx: NodeCtx, x: Value) -> Value:
    """Cast to float8e8m0 (powers of two 2^-127 .. 2^127). The IR's cast (ml_dtypes) rounds
    to the nearest power, ties up: ONNX's round_mode 'nearest'. ONNX's default 'up' (away
    from zero; the input is positive) doubles the nearest power where it lies below x;
    `saturate` (default) first clips to the type's range, so 0 and infinities do not give
    NaN. 'down' is refused."""
    mode = ctx.a("round_mode", "up")
    if mode not in ("up", "nearest"):
        raise Unsupported(f"round_mode {mode!r} of a cast to float8e8m0")
    wide = x if _dtype(x) is DType.FLOAT32 else ctx.op("cast", [x], {"dtype": DType.FLOAT32})
    if ctx.a("saturate", 1):
        wide = ctx.op("clip", [wide], {"min": 2.0**-127, "max": 2.0**127})
    nearest = ctx.op("cast", [wide], {"dtype": DType.FLOAT8_E8M0FNU})
    if mode == "nearest":
        return nearest
    power = ctx.op("cast", [nearest], {"dtype": DType.FLOAT32})
    below = ctx.op("less", [power, wide])
    up = ctx.op("where", [below, ctx.op("add", [power, power]), power])
    return ctx.op("cast", [up], {"dtype": DType.FLOAT8_E8M0FNU})


@handles("Cast")
def _cast(ctx: NodeCtx) -> Results:
    return [_cast_to(ctx, ctx.x(0), _onnx_dtype(int(ctx.a("to"))))]


@handles("BitCast")
def _bit_cast(ctx: NodeCtx) -> Results:
    target = _onnx_dtype(int(ctx.a("to")))
    if DType.BOOL in (_dtype(ctx.x(0)), target):
        # an ONNX bool is one byte holding 0 or 1 (the IR's bitcast reads booleans as one
        # bit each, StableHLO's i1): bool <-> an 8-bit integer is the cast
        return [ctx.op("cast", [ctx.x(0)], {"dtype": target})]
    return [ctx.op("bitcast", [ctx.x(0)], {"dtype": target})]


@handles("CastLike")
def _cast_like(ctx: NodeCtx) -> Results:
    return [_cast_to(ctx, ctx.x(0), _dtype(ctx.x(1)))]


@handles("Clip")
def _clip(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    if ctx.opset < 11:
        return [ctx.op("clip", [x], {"min": ctx.a("min", -math.inf),
                                     "max": ctx.a("max", math.inf)})]
    attrs: dict[str, Any] = {}
    inputs: list[Value | None] = [x, None, None]
    for index, key in ((1, "min"), (2, "max")):
        if not ctx.has(index):
            continue
        value = ctx.const(index)
        if value is not None and np.asarray(value).size == 1 and _dtype(x).is_float:
            attrs[key] = float(np.asarray(value).reshape(-1)[0])
        else:
            inputs[index] = ctx.x(index)
    while inputs[-1] is None:
        inputs.pop()
    return [ctx.op("clip", inputs, attrs)]


# -- matmul family, convolution ----------------------------------------------------------------

@handles("MatMul")
def _matmul(ctx: NodeCtx) -> Results:
    return [ctx.op("matmul", [ctx.x(0), ctx.x(1)])]


@handles("Gemm")
def _gemm(ctx: NodeCtx) -> Results:
    inputs = [ctx.x(0), ctx.x(1)] + ([ctx.x(2)] if ctx.has(2) else [])
    return [ctx.op("gemm", inputs, {
        "trans_a": bool(ctx.a("transA", 0)), "trans_b": bool(ctx.a("transB", 0)),
        "alpha": float(ctx.a("alpha", 1.0)), "beta": float(ctx.a("beta", 1.0))})]


def _same_pads(ctx: NodeCtx, sizes: Sequence[Dim], kernel: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int], mode: str) -> tuple[int, ...]:
    """Explicit pads of auto_pad SAME_UPPER / SAME_LOWER (output = ceil(in / stride))."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        if not isinstance(size, int):
            raise Unsupported("auto_pad SAME needs static spatial dims")
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(small if mode == "SAME_UPPER" else total - small)
        ends.append(total - small if mode == "SAME_UPPER" else small)
    return tuple(begins + ends)


def _window_attrs(ctx: NodeCtx, x: Value, kernel: Sequence[int]) -> dict[str, Any]:
    """strides, pads, dilations of a conv or pool node, auto_pad resolved."""
    d = len(kernel)
    strides = tuple(ctx.a("strides", [1] * d))
    dilations = tuple(ctx.a("dilations", [1] * d))
    auto_pad = ctx.a("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = (x.type.shape if x.type is not None and x.type.shape is not None
                 else (None,) * (d + 2))[2:]
        pads = _same_pads(ctx, sizes, kernel, strides, dilations, auto_pad)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * d)
    elif auto_pad == "NOTSET":
        pads = tuple(ctx.a("pads", [0] * (2 * d)))
    else:
        raise Unsupported(f"auto_pad {auto_pad!r}")
    return {"strides": strides, "pads": pads, "dilations": dilations}


def _kernel(ctx: NodeCtx, w: Value | None = None) -> tuple[int, ...]:
    kernel = ctx.a("kernel_shape")
    if kernel is not None:
        return tuple(int(k) for k in kernel)
    if w is None:
        raise Unsupported("kernel_shape is missing")
    return ctx.static(1)[2:]


@handles("Conv")
def _conv(ctx: NodeCtx) -> Results:
    x, w = ctx.x(0), ctx.x(1)
    attrs = _window_attrs(ctx, x, _kernel(ctx, w))
    attrs["groups"] = int(ctx.a("group", 1))
    inputs = [x, w] + ([ctx.x(2)] if ctx.has(2) else [])
    return [ctx.op("conv", inputs, attrs)]


@handles("ConvTranspose")
def _conv_transpose(ctx: NodeCtx) -> Results:
    x, w = ctx.x(0), ctx.x(1)
    kernel = _kernel(ctx, w)
    d = len(kernel)
    strides = tuple(ctx.a("strides", [1] * d))
    dilations = tuple(ctx.a("dilations", [1] * d))
    out_pad = tuple(ctx.a("output_padding", [0] * d))
    auto_pad = ctx.a("auto_pad", "NOTSET")
    output_shape = ctx.a("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = ctx.static(0)[2:]
        target = list(output_shape)[-d:] if output_shape is not None else \
            [n * s for n, s in zip(sizes, strides, strict=True)]
        begins, ends = [], []
        for n, k, s, dil, p, o in zip(sizes, kernel, strides, dilations, out_pad, target,
                                      strict=True):
            total = s * (n - 1) + p + (k - 1) * dil + 1 - o
            if total < 0:
                raise Unsupported("output_shape needs negative padding")
            half = total // 2
            begins.append(half if auto_pad == "SAME_UPPER" else total - half)
            ends.append(total - half if auto_pad == "SAME_UPPER" else half)
        pads = tuple(begins + ends)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * d)
    else:
        pads = tuple(ctx.a("pads", [0] * (2 * d)))
    inputs = [x, w] + ([ctx.x(2)] if ctx.has(2) else [])
    return [ctx.op("conv_transpose", inputs, {
        "strides": strides, "pads": pads, "dilations": dilations,
        "groups": int(ctx.a("group", 1)), "output_padding": out_pad})]


# -- pooling and normalisation -------------------------------------------------------------------

@handles("MaxPool")
def _max_pool(ctx: NodeCtx) -> Results:
    if ctx.used(1):
        raise Unsupported("the Indices output has no neutral equivalent")
    if ctx.a("storage_order", 0) != 0 and ctx.used(1):
        raise Unsupported("storage_order")
    x = ctx.x(0)
    kernel = _kernel(ctx)
    attrs = _window_attrs(ctx, x, kernel)
    attrs.update(kernel=kernel, ceil_mode=bool(ctx.a("ceil_mode", 0)))
    return [ctx.op("max_pool", [x], attrs), None]


@handles("AveragePool")
def _avg_pool(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    kernel = _kernel(ctx)
    attrs = _window_attrs(ctx, x, kernel)
    attrs.update(kernel=kernel, ceil_mode=bool(ctx.a("ceil_mode", 0)),
                 count_include_pad=bool(ctx.a("count_include_pad", 0)))
    return [ctx.op("avg_pool", [x], attrs)]


@handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    rank = ctx.rank(0)
    if rank < 3:
        raise Unsupported("global pooling needs spatial dims")
    op = "adaptive_avg_pool" if ctx.op_type == "GlobalAveragePool" else "adaptive_max_pool"
    return [ctx.op(op, [x], {"output_size": (1,) * (rank - 2)})]


@handles("BatchNormalization")
def _batch_norm(ctx: NodeCtx) -> Results:
    if ctx.a("training_mode", 0) or any(ctx.used(i) for i in range(1, 5)):
        raise Unsupported("training mode (running statistics outputs)")
    if ctx.opset < 9 and ctx.a("spatial", 1) != 1:
        raise Unsupported("spatial = 0")
    inputs = [ctx.x(i) for i in range(5)]
    return [ctx.op("batch_norm", inputs, {"epsilon": float(ctx.a("epsilon", 1e-5))})]


@handles("InstanceNormalization")
def _instance_norm(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    channels = _static_dim(ctx, x, 1)
    return [ctx.op("group_norm", [x, ctx.x(1), ctx.x(2)],
                   {"num_groups": channels, "epsilon": float(ctx.a("epsilon", 1e-5))})]


@handles("LayerNormalization")
def _layer_norm(ctx: NodeCtx) -> Results:
    if ctx.used(1) or ctx.used(2):
        raise Unsupported("the Mean / InvStdDev outputs have no neutral equivalent")
    inputs = [ctx.x(0), ctx.x(1)] + ([ctx.x(2)] if ctx.has(2) else [])
    y = ctx.op("layer_norm", inputs, {"axis": int(ctx.a("axis", -1)),
                                      "epsilon": float(ctx.a("epsilon", 1e-5))})
    return [y, None, None]


@handles("RMSNormalization")
def _rms_norm(ctx: NodeCtx) -> Results:
    return [ctx.op("rms_norm", [ctx.x(0), ctx.x(1)],
                   {"axis": int(ctx.a("axis", -1)), "epsilon": float(ctx.a("epsilon", 1e-5))})]


@handles("GroupNormalization")
def _group_norm(ctx: NodeCtx) -> Results:
    x, scale, bias = ctx.x(0), ctx.x(1), ctx.x(2)
    groups = int(ctx.a("num_groups"))
    channels = _static_dim(ctx, x, 1)
    if ctx.opset < 21 and groups != channels:  # GroupNormalization-18: per-group scale
        index = ctx.op("floor_div", [ctx.arange(channels), ctx.constant(
            np.array(channels // groups, np.int64), DType.INT64)])
        scale = ctx.op("gather", [scale, index], {"axis": 0})
        bias = ctx.op("gather", [bias, index], {"axis": 0})
    return [ctx.op("group_norm", [x, scale, bias],
                   {"num_groups": groups, "epsilon": float(ctx.a("epsilon", 1e-5))})]


@handles("LRN")
def _lrn(ctx: NodeCtx) -> Results:
    """x / (bias + alpha / size * sum of squares over a channel window) ^ beta, the window
    sum as an average pool (count_include_pad: divisor = size) over an added dim."""
    x = ctx.x(0)
    rank = ctx.rank(0)
    size = int(ctx.a("size"))
    alpha, beta, bias = float(ctx.a("alpha", 1e-4)), float(ctx.a("beta", 0.75)), \
        float(ctx.a("bias", 1.0))
    square = ctx.op("mul", [x, x])
    lifted = ctx.op("unsqueeze", [square], {"axes": (1,)})
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    kernel = (size,) + (1,) * (rank - 2)
    pads = (before,) + (0,) * (rank - 2) + (after,) + (0,) * (rank - 2)
    pooled = ctx.op("avg_pool", [lifted], {"kernel": kernel, "strides": (1,) * (rank - 1),
                                           "pads": pads, "count_include_pad": True})
    mean = ctx.op("squeeze", [pooled], {"axes": (1,)})
    scaled = ctx.op("add", [ctx.op("mul", [mean, _scalar(ctx, alpha, x)]),
                            _scalar(ctx, bias, x)])
    return [ctx.op("div", [x, ctx.op("pow", [scaled, _scalar(ctx, beta, x)])])]


@handles("LpNormalization")
def _lp_normalization(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    p = int(ctx.a("p", 2))
    axis = int(ctx.a("axis", -1))
    if p == 2:
        norm = ctx.op("reduce_l2", [x], {"axes": (axis,), "keepdims": True})
    elif p == 1:
        norm = ctx.op("reduce_sum", [ctx.op("abs", [x])], {"axes": (axis,), "keepdims": True})
    else:
        raise Unsupported(f"p = {p}")
    zero = _scalar(ctx, 0, x)
    return [ctx.op("where", [ctx.op("equal", [norm, zero]), zero, ctx.op("div", [x, norm])])]


def _coerced(ctx: NodeCtx, neutral: str, extra: dict[str, Any] | None = None) -> Value:
    """Softmax-style ops before opset 13 work on x coerced to 2-D at `axis`."""
    x = ctx.x(0)
    rank = ctx.rank(0)
    default = -1 if ctx.opset >= 13 else 1
    axis = _axis(ctx, int(ctx.a("axis", default)), rank)
    if ctx.opset >= 13 or axis == rank - 1:
        return ctx.op(neutral, [x], {"axis": axis, **(extra or {})})
    flat = ctx.op("reshape", [x], {"shape": (0,) * axis + (-1,)})
    y = ctx.op(neutral, [flat], {"axis": -1, **(extra or {})})
    shape = x.type.shape if x.type is not None else None
    if shape is not None and all(isinstance(d, int) for d in shape):
        return ctx.op("reshape", [y], {"shape": tuple(d for d in shape if isinstance(d, int))})
    return ctx.op("reshape", [y, ctx.op("shape_of", [x])])


@handles("Softmax")
def _softmax(ctx: NodeCtx) -> Results:
    return [_coerced(ctx, "softmax")]


@handles("LogSoftmax")
def _log_softmax(ctx: NodeCtx) -> Results:
    return [_coerced(ctx, "log_softmax")]


@handles("Hardmax")
def _hardmax(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    rank = ctx.rank(0)
    axis = _axis(ctx, int(ctx.a("axis", -1 if ctx.opset >= 13 else 1)), rank)
    if ctx.opset < 13 and axis != rank - 1:
        raise Unsupported("Hardmax before opset 13 on an inner axis")
    depth = _static_dim(ctx, x, axis)
    index = ctx.op("argmax", [x], {"axis": axis, "keepdims": False})
    return [ctx.op("one_hot", [index], {"depth": depth, "axis": axis, "dtype": _dtype(x)})]


# -- reductions ----------------------------------------------------------------------------------

_REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL2": "reduce_l2",
           "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceL1": "reduce_sum",
           "ReduceLogSum": "reduce_sum", "ReduceSumSquare": "reduce_sum"}


@handles(*_REDUCE)
def _reduce(ctx: NodeCtx) -> Results:
    """Axes from the attribute (older opsets) or input 1 (ReduceSum 13+, the others 18+):
    a constant becomes the attribute, a run-time tensor the neutral op's `axes` input.
    ReduceL1 / ReduceSumSquare / ReduceLogSum apply abs / square / log around the sum
    also when noop_with_empty_axes leaves the reduction out (ONNX's definition)."""
    x = ctx.x(0)
    since = 13 if ctx.op_type == "ReduceSum" else 18
    noop = bool(ctx.a("noop_with_empty_axes", 0))
    attrs: dict[str, Any] = {"keepdims": bool(ctx.a("keepdims", 1))}
    inputs: list[Value | None] = [x]
    if ctx.opset >= since:
        _param(ctx, 1, "axes", attrs, inputs)
    elif ctx.a("axes") is not None:
        attrs["axes"] = tuple(int(a) for a in ctx.a("axes"))
    if noop:
        attrs["noop_with_empty_axes"] = True
    operand = x
    if ctx.op_type == "ReduceL1":
        operand = inputs[0] = ctx.op("abs", [x])
    elif ctx.op_type == "ReduceSumSquare":
        operand = inputs[0] = ctx.op("mul", [x, x])
    if noop and len(inputs) == 1 and not attrs.get("axes"):  # no reduction at all
        if ctx.op_type == "ReduceL2":
            y = ctx.op("abs", [x])  # sqrt(x^2)
        else:
            y = ctx.op("identity", [x]) if operand is x else operand
    else:
        y = ctx.op(_REDUCE[ctx.op_type], inputs, attrs)
    if ctx.op_type == "ReduceLogSum":
        y = ctx.op("log", [y])
    return [y]


@handles("ArgMax", "ArgMin")
def _arg_reduce(ctx: NodeCtx) -> Results:
    op = "argmax" if ctx.op_type == "ArgMax" else "argmin"
    return [ctx.op(op, [ctx.x(0)], {"axis": int(ctx.a("axis", 0)),
                                    "keepdims": bool(ctx.a("keepdims", 1)),
                                    "select_last_index": bool(ctx.a("select_last_index", 0))})]


@handles("CumSum", "CumProd")
def _cumulative(ctx: NodeCtx) -> Results:
    op = "cumsum" if ctx.op_type == "CumSum" else "cumprod"
    attrs: dict[str, Any] = {"exclusive": bool(ctx.a("exclusive", 0)),
                             "reverse": bool(ctx.a("reverse", 0))}
    inputs: list[Value | None] = [ctx.x(0)]
    _scalar_param(ctx, 1, "axis", attrs, inputs)
    return [ctx.op(op, inputs, attrs)]


# -- shapes ----------------------------------------------------------------------------------------

@handles("Reshape")
def _reshape(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    allowzero = bool(ctx.a("allowzero", 0))
    shape = ctx.const(1)
    if shape is not None:
        target = tuple(int(v) for v in np.asarray(shape).reshape(-1))
        if allowzero and 0 in target:  # a literal 0: a dim of size 0
            return [ctx.op("reshape", [x], {"shape": target, "allowzero": True})]
        return [ctx.op("reshape", [x], {"shape": target})]
    # allowzero with a run-time shape: 0 entries are sizes, as in torch's view
    return [ctx.op("reshape", [x, ctx.x(1)], {"allowzero": True} if allowzero else {})]


@handles("Flatten")
def _flatten(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    rank = ctx.rank(0)
    axis = int(ctx.a("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank:
        raise Unsupported(f"axis {axis} out of range")
    if axis == 0:
        return [ctx.op("reshape", [x], {"shape": (1, -1)})]
    if axis == rank:
        return [ctx.op("reshape", [x], {"shape": (-1, 1)})]
    y = ctx.op("flatten", [x], {"start_axis": axis, "end_axis": -1}) if axis < rank - 1 else x
    if axis > 1:
        y = ctx.op("flatten", [y], {"start_axis": 0, "end_axis": axis - 1})
    return [y if y is not x else ctx.op("identity", [x])]


def _axes_op(ctx: NodeCtx, op: str) -> Value:
    """squeeze / unsqueeze: axes from the attribute (before opset 13) or input 1."""
    attrs: dict[str, Any] = {}
    inputs: list[Value | None] = [ctx.x(0)]
    if ctx.opset >= 13:
        _param(ctx, 1, "axes", attrs, inputs)
    elif ctx.a("axes") is not None:
        attrs["axes"] = tuple(int(a) for a in ctx.a("axes"))
    if op == "unsqueeze" and len(inputs) == 1 and not attrs.get("axes"):
        raise Unsupported("axes are missing")
    return ctx.op(op, inputs, attrs)


@handles("Squeeze")
def _squeeze(ctx: NodeCtx) -> Results:
    return [_axes_op(ctx, "squeeze")]


@handles("Unsqueeze")
def _unsqueeze(ctx: NodeCtx) -> Results:
    return [_axes_op(ctx, "unsqueeze")]


@handles("Transpose")
def _transpose(ctx: NodeCtx) -> Results:
    perm = ctx.a("perm")
    if perm is None:
        perm = list(range(ctx.rank(0)))[::-1]
    return [ctx.op("permute", [ctx.x(0)], {"perm": tuple(int(p) for p in perm)})]


@handles("Concat")
def _concat(ctx: NodeCtx) -> Results:
    values = [ctx.x(i) for i in range(len(ctx.inputs))]
    return [ctx.op("concat", values, {"axis": int(ctx.a("axis"))})]


@handles("Split")
def _split(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    rank = ctx.rank(0)
    axis = _axis(ctx, int(ctx.a("axis", 0)), rank)
    count = len(ctx.node.output)
    if ctx.opset >= 13 and ctx.has(1) and ctx.const(1) is None:  # sizes known at run time
        return ctx.ops("split", [x, ctx.x(1)], {"axis": axis}, count)
    if ctx.opset >= 13 and ctx.has(1):
        sizes = ctx.ints(1, "split")
    elif ctx.opset < 13 and ctx.a("split") is not None:
        sizes = tuple(int(s) for s in ctx.a("split"))
    else:
        dim = _static_dim(ctx, x, axis)
        parts = int(ctx.a("num_outputs", count))
        if ctx.opset >= 18 and ctx.a("num_outputs") is not None:
            chunk = -(-dim // parts)
            sizes = tuple([chunk] * (parts - 1) + [dim - chunk * (parts - 1)])
        else:
            if dim % parts:
                raise Unsupported(f"dim {dim} does not split evenly into {parts}")
            sizes = (dim // parts,) * parts
    if len(sizes) != count:
        raise Unsupported(f"{len(sizes)} sizes for {count} outputs")
    return ctx.ops("split", [x], {"axis": axis, "sizes": sizes}, count)


@handles("Slice")
def _slice(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    if ctx.opset < 10:
        starts = tuple(ctx.a("starts"))
        ends = tuple(ctx.a("ends"))
        axes = tuple(ctx.a("axes", range(len(starts))))
        steps: tuple[int, ...] = (1,) * len(starts)
        return [ctx.op("slice", [x], {"starts": starts, "ends": ends, "axes": axes,
                                      "steps": steps})]
    # each bound: a constant becomes the attribute, a run-time tensor the matching input
    attrs: dict[str, Any] = {}
    inputs: list[Value | None] = [x]
    for index, name in enumerate(("starts", "ends", "axes", "steps"), start=1):
        _param(ctx, index, name, attrs, inputs)
    return [ctx.op("slice", inputs, attrs)]


@handles("Gather")
def _gather(ctx: NodeCtx) -> Results:
    return [ctx.op("gather", [ctx.x(0), ctx.x(1)], {"axis": int(ctx.a("axis", 0))})]


@handles("GatherElements")
def _gather_elements(ctx: NodeCtx) -> Results:
    return [ctx.op("gather_elements", [ctx.x(0), ctx.x(1)], {"axis": int(ctx.a("axis", 0))})]


@handles("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeCtx) -> Results:
    reduction = ctx.a("reduction", "none")
    return [ctx.op("scatter_elements", [ctx.x(0), ctx.x(1), ctx.x(2)],
                   {"axis": int(ctx.a("axis", 0)), "reduction": reduction})]


@handles("Expand")
def _expand(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    shape = ctx.const(1)
    if shape is not None:
        target = tuple(int(v) for v in np.asarray(shape).reshape(-1))
        if any(t < 0 for t in target):
            raise Unsupported("negative dims in the target shape")
        return [ctx.op("expand", [x], {"shape": target})]
    return [ctx.op("expand", [x, ctx.x(1)])]


@handles("Tile")
def _tile(ctx: NodeCtx) -> Results:
    attrs: dict[str, Any] = {}
    inputs: list[Value | None] = [ctx.x(0)]
    _param(ctx, 1, "repeats", attrs, inputs)
    return [ctx.op("tile", inputs, attrs)]


@handles("Pad")
def _pad(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    rank = ctx.rank(0)
    mode = ctx.a("mode", "constant")
    if ctx.opset < 11:
        pads = tuple(int(p) for p in ctx.a("pads", ctx.a("paddings", [])))
        value = float(ctx.a("value", 0.0))
    else:
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise Unsupported(f"mode {mode!r}")
        inputs: list[Value | None] = [x, None, None]
        value = 0.0
        if ctx.has(2):
            fill = ctx.const(2)
            if fill is None:
                inputs[2] = ctx.x(2)
            else:
                fill = np.asarray(fill).reshape(-1)
                value = float(fill[0]) if fill.size else 0.0
        if ctx.has(3) and ctx.const(3) is None:  # axes known at run time
            inputs[1] = _pads_for_runtime_axes(ctx, rank)
            while inputs[-1] is None:
                inputs.pop()
            return [ctx.op("pad", inputs, {"mode": mode, "value": value})]
        axes = [_axis(ctx, a, rank) for a in ctx.ints(3, "axes")] if ctx.has(3) else None
        if ctx.const(1) is None:  # pads known at run time
            inputs[1] = ctx.x(1) if axes is None else _pads_for_axes(ctx, ctx.x(1), axes, rank)
            while inputs[-1] is None:
                inputs.pop()
            return [ctx.op("pad", inputs, {"mode": mode, "value": value})]
        pads = ctx.ints(1, "pads")
        if axes is not None:
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[rank + a] = pads[i], pads[len(axes) + i]
            pads = tuple(full)
        if inputs[2] is not None:
            if len(pads) != 2 * rank:
                raise Unsupported(f"{len(pads)} pads for rank {rank}")
            return [ctx.op("pad", [x, None, inputs[2]], {"pads": pads, "mode": mode})]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported(f"mode {mode!r}")
    if len(pads) != 2 * rank:
        raise Unsupported(f"{len(pads)} pads for rank {rank}")
    return [ctx.op("pad", [x], {"pads": pads, "mode": mode, "value": value})]


def _pads_for_axes(ctx: NodeCtx, pads: Value, axes: Sequence[int], rank: int) -> Value:
    """Run-time pads of some axes (Pad 18's `axes`) spread over every dim: a gather from
    the pads followed by a zero."""
    if len(set(axes)) != len(axes):
        raise Unsupported("repeated axes")
    n = len(axes)
    index = []
    for side in range(2):
        for dim in range(rank):
            index.append(side * n + axes.index(dim) if dim in axes else 2 * n)
    wide = pads if _dtype(pads) == DType.INT64 else ctx.op("cast", [pads], {"dtype": DType.INT64})
    padded = ctx.op("concat", [wide, ctx.constant(np.zeros(1, np.int64), DType.INT64)],
                    {"axis": 0})
    return ctx.op("gather", [padded, ctx.constant(np.array(index, np.int64), DType.INT64)],
                  {"axis": 0})


def _pads_for_runtime_axes(ctx: NodeCtx, rank: int) -> Value:
    """Pads of axes known only at run time spread over every dim: begins (and ends) are
    sum_i pads[i] * one_hot(axes[i] mod rank), so a dim that no axis names gets 0."""
    axes, pads = ctx.x(3), ctx.x(1)
    counts = [_length(axes), None if (m := _length(pads)) is None else m // 2]
    n = counts[0] if counts[0] is not None else counts[1]
    if n is None:
        raise Unsupported("run-time axes of unknown count")
    i64 = DType.INT64
    wide = axes if _dtype(axes) == i64 else ctx.op("cast", [axes], {"dtype": i64})
    wrapped = ctx.op("mod", [wide, _scalar(ctx, rank, i64)])
    hot = ctx.op("one_hot", [wrapped], {"depth": rank, "dtype": i64})  # [n, rank]
    pads64 = pads if _dtype(pads) == i64 else ctx.op("cast", [pads], {"dtype": i64})
    sides = []
    for side in range(2):
        part = ctx.op("slice", [pads64], {"starts": (side * n,), "ends": ((side + 1) * n,),
                                          "axes": (0,)})
        column = ctx.op("unsqueeze", [part], {"axes": (1,)})
        sides.append(ctx.op("reduce_sum", [ctx.op("mul", [column, hot])], {"axes": (0,)}))
    return ctx.op("concat", sides, {"axis": 0})


@handles("Trilu")
def _trilu(ctx: NodeCtx) -> Results:
    attrs: dict[str, Any] = {"upper": bool(ctx.a("upper", 1))}
    inputs: list[Value | None] = [ctx.x(0)]
    _scalar_param(ctx, 1, "k", attrs, inputs)
    return [ctx.op("trilu", inputs, attrs)]


@handles("Shape")
def _shape(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    start, end = int(ctx.a("start", 0)), ctx.a("end")
    shape = x.type.shape if x.type is not None else None
    if shape is not None:
        rank = len(shape)
        stop = rank if end is None else int(end)
        lo, hi = (min(max(b + rank if b < 0 else b, 0), rank) for b in (start, stop))
        dims = shape[lo:max(hi, lo)]
        if all(isinstance(d, int) for d in dims):
            return [ctx.constant(np.array(dims, dtype=np.int64), DType.INT64)]
    if end is not None and int(end) == 0:
        raise Unsupported("end = 0 (an empty slice)")
    return [ctx.op("shape_of", [x], {"start": start, "end": 0 if end is None else int(end)})]


@handles("Size")
def _size(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    if x.type is not None and x.type.is_static:
        return [ctx.constant(np.array(x.type.numel(), dtype=np.int64), DType.INT64)]
    return [ctx.op("reduce_prod", [ctx.op("shape_of", [x])], {"keepdims": False})]


@handles("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx) -> Results:
    value = ctx.tensor_attr("value")
    fill = np.zeros((1,), np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1:
        raise Unsupported("value must hold one element")
    dtype = DType.from_numpy(fill.dtype)
    shape = ctx.const(0)
    number = fill[0].item()
    if shape is not None and not isinstance(number, complex):
        dims = tuple(int(v) for v in np.asarray(shape).reshape(-1))
        if float(number) == number or isinstance(number, bool) or math.isnan(float(number)):
            return [ctx.op("full", [], {"shape": dims, "value": float(number), "dtype": dtype})]
    scalar = ctx.constant(fill.reshape(()), dtype)
    return [ctx.op("expand", [scalar, ctx.x(0)])]


@handles("Range")
def _range(ctx: NodeCtx) -> Results:
    if any(ctx.const(i) is None for i in range(3)):  # bounds known at run time
        return [ctx.op("range", [ctx.x(0), ctx.x(1), ctx.x(2)])]
    start, limit, delta = (np.asarray(ctx.need_const(i, name)).reshape(-1)[0]
                           for i, name in enumerate(("start", "limit", "delta")))
    dtype = _dtype(ctx.x(0))
    if dtype.is_integer and any(abs(int(v)) >= 2**53 for v in (start, limit, delta)):
        raise Unsupported("integer bounds beyond float precision")
    return [ctx.op("range", [], {"start": float(start), "limit": float(limit),
                                 "delta": float(delta), "dtype": dtype})]


@handles("OneHot")
def _one_hot(ctx: NodeCtx) -> Results:
    indices = ctx.x(0)
    values = ctx.x(2)
    if not _dtype(indices).is_integer:
        indices = ctx.op("cast", [indices], {"dtype": DType.INT64})
    attrs: dict[str, Any] = {"axis": int(ctx.a("axis", -1)), "dtype": DType.BOOL}
    depth = ctx.const(1)
    if depth is not None:
        attrs["depth"] = int(np.asarray(depth).reshape(-1)[0])
        hot = ctx.op("one_hot", [indices], attrs)
    else:  # depth known at run time (any numeric type, truncated)
        hot = ctx.op("one_hot", [indices, ctx.x(1)], attrs)
    pair = ctx.const(2)
    if pair is not None:
        off = ctx.constant(np.asarray(pair).reshape(-1)[0], _dtype(values))
        on = ctx.constant(np.asarray(pair).reshape(-1)[1], _dtype(values))
    else:
        off = ctx.op("gather", [values, ctx.constant(np.array(0), DType.INT64)], {"axis": 0})
        on = ctx.op("gather", [values, ctx.constant(np.array(1), DType.INT64)], {"axis": 0})
    return [ctx.op("where", [hot, on, off])]


@handles("NonZero")
def _non_zero(ctx: NodeCtx) -> Results:
    return [ctx.op("non_zero", [ctx.x(0)])]


@handles("TopK")
def _topk(ctx: NodeCtx) -> Results:
    attrs: dict[str, Any] = {"axis": int(ctx.a("axis", -1)),
                             "largest": bool(ctx.a("largest", 1)),
                             "sorted": bool(ctx.a("sorted", 1))}
    inputs: list[Value | None] = [ctx.x(0)]
    if ctx.opset < 10:
        attrs["k"] = int(ctx.a("k"))
    else:
        _scalar_param(ctx, 1, "k", attrs, inputs)
    return ctx.ops("topk", inputs, attrs, 2)


@handles("EyeLike")
def _eye_like(ctx: NodeCtx) -> Results:
    rows, cols = ctx.static(0)
    dtype = _onnx_dtype(int(ctx.a("dtype"))) if ctx.a("dtype") is not None else _dtype(ctx.x(0))
    return [ctx.eye(rows, cols, int(ctx.a("k", 0)), dtype)]


@handles("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    shape = ctx.shape(0)
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:]):
        raise Unsupported("needs a 4-D input with static C, H, W")
    c, h, w = (int(d) for d in shape[1:] if isinstance(d, int))
    b = int(ctx.a("blocksize"))
    if ctx.op_type == "SpaceToDepth":
        y = ctx.op("reshape", [x], {"shape": (0, c, h // b, b, w // b, b)})
        perm = (0, 3, 5, 1, 2, 4) if ctx.a("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
        y = ctx.op("permute", [y], {"perm": perm})
        return [ctx.op("reshape", [y], {"shape": (0, c * b * b, h // b, w // b)})]
    if ctx.a("mode", "DCR") == "DCR":
        y = ctx.op("reshape", [x], {"shape": (0, b, b, c // (b * b), h, w)})
        y = ctx.op("permute", [y], {"perm": (0, 3, 4, 1, 5, 2)})
    else:
        y = ctx.op("reshape", [x], {"shape": (0, c // (b * b), b, b, h, w)})
        y = ctx.op("permute", [y], {"perm": (0, 1, 4, 2, 5, 3)})
    return [ctx.op("reshape", [y], {"shape": (0, c // (b * b), h * b, w * b)})]


# -- resize ------------------------------------------------------------------------------------

_COORDINATES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")


def _resize_common(ctx: NodeCtx, x: Value, mode: str, coordinate: str, nearest: str,
                   scales: Sequence[float] | None, sizes: Sequence[int] | None,
                   axes: Sequence[int] | None) -> Value:
    rank = ctx.rank(0)
    if rank < 3:
        raise Unsupported("resize of a tensor without [N, C] leading dims")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode {mode!r}")
    if coordinate not in _COORDINATES:
        raise Unsupported(f"coordinate_transformation_mode {coordinate!r}")
    axes = [_axis(ctx, a, rank) for a in (axes or range(rank))]
    shape = ctx.shape(0)
    attrs: dict[str, Any] = {"mode": mode, "coordinate_mode": coordinate,
                             "nearest_mode": nearest}
    if sizes is not None:
        full: list[Dim] = list(shape)
        for a, size in zip(axes, sizes, strict=True):
            full[a] = int(size)
        for lead in (0, 1):
            if lead in axes and full[lead] != shape[lead]:
                raise Unsupported("resizing the batch or channel dim")
        spatial = full[2:]
        if not all(isinstance(d, int) for d in spatial):
            raise Unsupported("sizes of unresized spatial dims must be static")
        attrs["sizes"] = tuple(int(d) for d in spatial if isinstance(d, int))
    elif scales is not None:
        full_scales: list[float] = [1.0] * rank
        for a, scale in zip(axes, scales, strict=True):
            full_scales[a] = float(scale)
        if full_scales[0] != 1.0 or full_scales[1] != 1.0:
            raise Unsupported("resizing the batch or channel dim")
        attrs["scales"] = tuple(full_scales[2:])
    else:
        raise Unsupported("neither scales nor sizes")
    return ctx.op("resize", [x], attrs)


def _resize_runtime(ctx: NodeCtx, x: Value, mode: str, coordinate: str, nearest: str,
                    name: str, value: Value, axes: Sequence[int] | None) -> Value:
    """Resize with scales or sizes known only at run time: the neutral op's input of that
    name, per dim of x (N and C must stay, which its reference checks) or, for an `axes`
    attribute over spatial dims, spread to one value per spatial dim."""
    rank = ctx.rank(0)
    if rank < 3:
        raise Unsupported("resize of a tensor without [N, C] leading dims")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode {mode!r}")
    if coordinate not in _COORDINATES:
        raise Unsupported(f"coordinate_transformation_mode {coordinate!r}")
    attrs = {"mode": mode, "coordinate_mode": coordinate, "nearest_mode": nearest}
    dtype = DType.FLOAT32 if name == "scales" else DType.INT64
    if _dtype(value) != dtype:
        value = ctx.op("cast", [value], {"dtype": dtype})
    chosen = [_axis(ctx, a, rank) for a in axes] if axes is not None else list(range(rank))
    if len(set(chosen)) != len(chosen):
        raise Unsupported("repeated axes")
    if chosen != list(range(rank)) and chosen != list(range(2, rank)):
        if 0 in chosen or 1 in chosen:
            raise Unsupported("run-time resizing along the batch or channel axes")
        if name == "scales":
            fill = ctx.constant(np.ones(1, np.float32), DType.FLOAT32)
        else:  # the sizes of spatial dims that are not resized
            kept = [d for d in ctx.shape(0)[2:]]
            if not all(isinstance(d, int) for d in kept):
                raise Unsupported("sizes of unresized spatial dims must be static")
            fill = ctx.constant(np.array(kept, np.int64), DType.INT64)
        n = len(chosen)
        index = [chosen.index(d) if d in chosen else
                 (n if name == "scales" else n + d - 2) for d in range(2, rank)]
        joined = ctx.op("concat", [value, fill], {"axis": 0})
        value = ctx.op("gather", [joined, ctx.constant(np.array(index, np.int64),
                                                       DType.INT64)], {"axis": 0})
    inputs: list[Value | None] = [x, value] if name == "scales" else [x, None, value]
    return ctx.op("resize", inputs, attrs)


@handles("Resize")
def _resize(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    mode = ctx.a("mode", "nearest")
    if ctx.opset < 11:
        if ctx.const(1) is None:
            return [_resize_runtime(ctx, x, mode, "asymmetric", "floor", "scales", ctx.x(1),
                                    None)]
        old = tuple(float(s) for s in np.asarray(ctx.need_const(1, "scales")).reshape(-1))
        return [_resize_common(ctx, x, mode, "asymmetric", "floor", old, None, None)]
    if float(ctx.a("cubic_coeff_a", -0.75)) != -0.75 and mode == "cubic":
        raise Unsupported("cubic_coeff_a other than -0.75")
    if ctx.a("exclude_outside", 0) or ctx.a("antialias", 0):
        raise Unsupported("exclude_outside / antialias")
    if ctx.a("keep_aspect_ratio_policy", "stretch") != "stretch" and ctx.has(3):
        raise Unsupported("keep_aspect_ratio_policy other than stretch")
    coordinate = ctx.a("coordinate_transformation_mode", "half_pixel")
    nearest = ctx.a("nearest_mode", "round_prefer_floor")
    axes = ctx.a("axes")
    for index, name in ((3, "sizes"), (2, "scales")):
        if ctx.has(index) and ctx.const(index) is None:
            if name == "scales" and ctx.has(3):
                continue  # ONNX: sizes win; scales must then be empty
            return [_resize_runtime(ctx, x, mode, coordinate, nearest, name, ctx.x(index),
                                    axes)]
    sizes = ctx.ints(3, "sizes") if ctx.has(3) else None
    scales: tuple[float, ...] | None = None
    if sizes is None and ctx.has(2):
        given = tuple(float(s) for s in np.asarray(ctx.need_const(2, "scales")).reshape(-1))
        scales = given or None
    return [_resize_common(ctx, x, mode, coordinate, nearest, scales, sizes, axes)]


@handles("Upsample")
def _upsample(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    mode = ctx.a("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    if ctx.opset < 9:
        scales = tuple(float(s) for s in ctx.a("scales"))
    elif ctx.const(1) is None:
        return [_resize_runtime(ctx, x, mode, "asymmetric", "floor", "scales", ctx.x(1), None)]
    else:
        scales = tuple(float(s) for s in np.asarray(ctx.need_const(1, "scales")).reshape(-1))
    return [_resize_common(ctx, x, mode, "asymmetric", "floor", scales, None, None)]


# -- constants, dropout -------------------------------------------------------------------------

@handles("Constant")
def _constant(ctx: NodeCtx) -> Results:
    attrs = ctx.attrs
    if "value" in attrs:
        array = ctx.tensor_attr("value")
        assert array is not None
        return [ctx.constant(array, DType.from_numpy(array.dtype))]
    if "value_float" in attrs:
        return [ctx.constant(np.array(attrs["value_float"], np.float32), DType.FLOAT32)]
    if "value_floats" in attrs:
        return [ctx.constant(np.array(attrs["value_floats"], np.float32), DType.FLOAT32)]
    if "value_int" in attrs:
        return [ctx.constant(np.array(attrs["value_int"], np.int64), DType.INT64)]
    if "value_ints" in attrs:
        return [ctx.constant(np.array(attrs["value_ints"], np.int64), DType.INT64)]
    raise Unsupported(f"constant of kind {', '.join(attrs)}")


@handles("Dropout")
def _dropout(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    if ctx.opset >= 12 and ctx.has(2):
        training = ctx.const(2)
        if training is None or bool(np.asarray(training).reshape(-1)[0]):
            raise Unsupported("training mode")
    if ctx.opset < 7 and not ctx.a("is_test", 0):
        raise Unsupported("training mode")
    mask = None
    if ctx.used(1):
        shape = ctx.static(0)
        mask = ctx.op("full", [], {"shape": shape, "value": 1.0, "dtype": DType.BOOL})
    return [x, mask]


# -- control flow ---------------------------------------------------------------------------------

@handles("If")
def _if(ctx: NodeCtx) -> Results:
    then_branch = ctx.subgraph("then_branch")
    else_branch = ctx.subgraph("else_branch")
    if len(then_branch.outputs) != len(ctx.node.output):
        raise Unsupported("branch outputs do not match the node's outputs")
    return ctx.ops("if", [ctx.x(0)], {"then_branch": then_branch,
                                      "else_branch": else_branch}, len(ctx.node.output))


@handles("Loop")
def _loop(ctx: NodeCtx) -> Results:
    attribute = ctx.graph_attrs.get("body")
    if attribute is None:
        raise Unsupported("no body")
    body = GraphProto()
    body.CopyFrom(attribute.g)
    carried = len(ctx.inputs) - 2
    if len(body.input) != 2 + carried:
        raise Unsupported("body inputs do not match the carried values")
    _fill_type(body.input[0], TensorProto.INT64)
    _fill_type(body.input[1], TensorProto.BOOL)
    for index in range(carried):
        source = ctx.x(2 + index)
        if source.type is not None:
            _fill_type(body.input[2 + index], _to_elem(source.type.dtype))
    for vi in body.input:
        if vi.HasField("type"):
            ctx.gi.mi.types.setdefault(vi.name, vi.type)
    graph = ctx.gi.subgraph(body, "body")
    inputs: list[Value | None] = [ctx.opt(0), ctx.opt(1),
                                  *[ctx.x(2 + i) for i in range(carried)]]
    return ctx.ops("loop", inputs, {"body": graph}, len(ctx.node.output))


def _to_elem(dtype: DType) -> int:
    from irbridge.converters.onnx._common import dtype_to_onnx

    return dtype_to_onnx(dtype)


def _fill_type(vi: onnx.ValueInfoProto, elem_type: int) -> None:
    if vi.HasField("type") and vi.type.tensor_type.elem_type:
        return
    vi.type.CopyFrom(helper.make_tensor_type_proto(elem_type, None))


# -- attention ------------------------------------------------------------------------------------

@handles("Attention")
def _attention(ctx: NodeCtx) -> Results:
    if any(ctx.has(i) for i in (4, 5, 6)):
        raise Unsupported("KV cache inputs (past_key / past_value / nonpad_kv_seqlen)")
    if ctx.used(3) or float(ctx.a("softcap", 0.0)) != 0.0:
        raise Unsupported("softcap / qk_matmul_output")
    if ctx.a("left_window_size", -1) >= 0 or ctx.a("right_window_size", -1) >= 0:
        raise Unsupported("sliding window")
    q, k, v = ctx.x(0), ctx.x(1), ctx.x(2)
    rank = ctx.rank(0)
    mask = ctx.opt(3)
    three_d = rank == 3
    if three_d:
        heads_q, heads_kv = int(ctx.a("q_num_heads", 0)), int(ctx.a("kv_num_heads", 0))
        if not heads_q or not heads_kv:
            raise Unsupported("3-D inputs need q_num_heads and kv_num_heads")
        q = _split_heads(ctx, q, heads_q)
        k = _split_heads(ctx, k, heads_kv)
        v = _split_heads(ctx, v, heads_kv)
    elif rank != 4:
        raise Unsupported(f"rank {rank} inputs")
    if mask is not None:
        m_shape, k_shape = mask.type.shape if mask.type else None, k.type.shape if k.type else None
        if m_shape is None or k_shape is None or m_shape[-1] != k_shape[-2] \
                or not isinstance(m_shape[-1], int):
            raise Unsupported("an attention mask shorter than the key sequence")
    attrs = {"causal": bool(ctx.a("is_causal", 0)), "scale": float(ctx.a("scale", 0.0) or 0.0)}
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    y = ctx.op("attention", inputs, attrs)
    if three_d:
        y = ctx.op("permute", [y], {"perm": (0, 2, 1, 3)})
        y = ctx.op("reshape", [y], {"shape": (0, 0, -1)})
    present_k = ctx.x(1) if ctx.used(1) else None
    present_v = ctx.x(2) if ctx.used(2) else None
    return [y, present_k, present_v, None]


def _split_heads(ctx: NodeCtx, x: Value, heads: int) -> Value:
    y = ctx.op("reshape", [x], {"shape": (0, 0, heads, -1)})
    return ctx.op("permute", [y], {"perm": (0, 2, 1, 3)})


# -- quantization (per-tensor and per-axis, integer and float8 types) -----------------------------

def _per_axis(ctx: NodeCtx, value: Value, axis_attr: int, rank: int, block: int = 0,
              length: Dim = None) -> Value:
    """A scale or zero point: a scalar / 1-element tensor (per tensor) as it is, a vector
    (per axis) reshaped to broadcast along `axis` of a rank-`rank` tensor, a rank-`rank`
    tensor of blocks (`block` > 0) repeated `block` times along `axis` (cut to `length`)."""
    shape = value.type.shape if value.type is not None else None
    if block > 0:
        return blocked(ctx, value, _axis(ctx, axis_attr, rank), block, length)
    if shape is None or len(shape) > 1:
        raise Unsupported("a scale / zero point of rank > 1 needs block_size")
    if len(shape) == 0 or shape == (1,):
        return value
    axis = _axis(ctx, axis_attr, rank)
    dims = [1] * rank
    dims[axis] = -1
    return ctx.op("reshape", [value], {"shape": tuple(dims)})


def blocked(ctx: NodeCtx, value: Value, axis: int, block: int, length: Dim) -> Value:
    """Per-block parameters (one per `block` consecutive elements along `axis`, the last
    block possibly short) repeated to one per element: [.., B, ..] -> [.., length, ..]
    (unsqueeze, expand, reshape; a slice when B * block > length)."""
    shape = value.type.shape if value.type is not None else None
    if shape is None or not 0 <= axis < len(shape):
        raise Unsupported(f"per-block parameters need a known rank above axis {axis}")
    blocks, trailing = shape[axis], shape[axis + 1:]
    if not isinstance(blocks, int) or not all(isinstance(d, int) for d in trailing):
        raise Unsupported(f"per-block parameters of shape {list(shape)} need static dims "
                          f"from axis {axis} on")
    if isinstance(length, int) and blocks != -(-length // block):
        raise Unsupported(f"{blocks} blocks along axis {axis} do not cover {length} "
                          f"elements in blocks of {block}")
    rank = len(shape)
    y = ctx.op("unsqueeze", [value], {"axes": (axis + 1,)})
    y = ctx.op("expand", [y], {"shape": (1,) * (axis + 1) + (block,) + (1,) * (rank - axis - 1)})
    y = ctx.op("reshape", [y], {"shape": (0,) * axis + (-1,) + tuple(trailing)})
    if not isinstance(length, int):
        if block != 1:
            raise Unsupported(f"blocked quantization along axis {axis} of unknown size")
        return y
    if blocks * block != length:
        y = ctx.op("slice", [y], {"starts": (0,), "ends": (length,), "axes": (axis,)})
    return y


_QUANT = {DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32, DType.UINT32,
          DType.INT4, DType.UINT4, DType.INT2, DType.UINT2, DType.FLOAT8_E4M3FN,
          DType.FLOAT8_E5M2, DType.FLOAT8_E4M3FNUZ, DType.FLOAT8_E5M2FNUZ, DType.FLOAT4_E2M1FN}


def _quant_axis(ctx: NodeCtx, axis: int, rank: int) -> Callable[[Value], Value]:
    """How a Q/DQ node's scale and zero point broadcast against x (`_per_axis`)."""
    block = int(ctx.a("block_size", 0) or 0)
    if block < 0:
        raise Unsupported(f"block_size {block}")
    length = ctx.shape(0)[_axis(ctx, axis, rank)] if block else None
    return lambda value: _per_axis(ctx, value, axis, rank, block, length)


@handles("DequantizeLinear")
def _dequantize(ctx: NodeCtx) -> Results:
    """(x - zero_point) * scale in float32, per tensor, per axis or per block (opset 21
    block_size: a block's parameters repeated along `axis`), cast to the output type."""
    x, scale = ctx.x(0), ctx.x(1)
    rank = ctx.rank(0)
    axis = int(ctx.a("axis", 1))
    per = _quant_axis(ctx, axis, rank)
    out = _dtype(scale)
    if ctx.a("output_dtype"):
        out = _onnx_dtype(int(ctx.a("output_dtype")))
    compute = DType.FLOAT32
    value = ctx.op("cast", [x], {"dtype": compute})
    if ctx.has(2):
        zero = per(ctx.op("cast", [ctx.x(2)], {"dtype": compute}))
        value = ctx.op("sub", [value, zero])
    scale_f = per(ctx.op("cast", [scale], {"dtype": compute}) if _dtype(scale) != compute
                  else scale)
    y = ctx.op("mul", [value, scale_f])
    return [y if out == compute else ctx.op("cast", [y], {"dtype": out})]


@handles("QuantizeLinear")
def _quantize(ctx: NodeCtx) -> Results:
    x, scale = ctx.x(0), ctx.x(1)
    rank = ctx.rank(0)
    axis = int(ctx.a("axis", 1))
    per = _quant_axis(ctx, axis, rank)
    if ctx.has(2):
        target = _dtype(ctx.x(2))
    elif ctx.a("output_dtype"):
        target = _onnx_dtype(int(ctx.a("output_dtype")))
    else:
        target = DType.UINT8
    if target not in _QUANT:
        raise Unsupported(f"quantized type {target.short}")
    compute = DType.FLOAT32
    xf = ctx.op("cast", [x], {"dtype": compute}) if _dtype(x) != compute else x
    scale_f = per(ctx.op("cast", [scale], {"dtype": compute}) if _dtype(scale) != compute
                  else scale)
    y = ctx.op("div", [xf, scale_f])
    if target.is_integer:
        y = ctx.op("round", [y])
        if ctx.has(2):
            zero = per(ctx.op("cast", [ctx.x(2)], {"dtype": compute}))
            y = ctx.op("add", [y, zero])
        info = ml_dtypes.iinfo(target.numpy)
        y = ctx.op("clip", [y], {"min": float(info.min), "max": float(info.max)})
        return [ctx.op("cast", [y], {"dtype": target})]
    if ctx.has(2):
        zero = per(ctx.op("cast", [ctx.x(2)], {"dtype": compute}))
        y = ctx.op("add", [y, zero])
    return [_cast_to(ctx, y, target)]


# -- einsum ------------------------------------------------------------------------------------

def _einsum_terms(ctx: NodeCtx, equation: str, ranks: Sequence[int]
                  ) -> tuple[list[list[str]], list[str]]:
    """Operand and output labels, with '...' expanded to labels '.0', '.1', ... (right
    aligned, numpy broadcasting)."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"equation has {len(terms)} operands, node {len(ranks)}")
    ellipsis = 0
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            ellipsis = max(ellipsis, rank - len(term.replace("...", "")))
    dots = [f".{i}" for i in range(ellipsis)]

    def expand(term: str, rank: int | None) -> list[str]:
        if "..." not in term:
            if not all(ch.isalpha() for ch in term):
                raise Unsupported(f"cannot parse einsum term {term!r}")
            return list(term)
        head, _, tail = term.partition("...")
        count = len(dots) if rank is None else rank - len(head) - len(tail)
        return list(head) + dots[len(dots) - count:] + list(tail)

    labels = [expand(t, r) for t, r in zip(terms, ranks, strict=True)]
    for expanded, rank in zip(labels, ranks, strict=True):
        if len(expanded) != rank:
            raise Unsupported("einsum term does not match its operand's rank")
    if arrow:
        output = expand(rhs, None)
    else:
        counts: dict[str, int] = {}
        for expanded in labels:
            for label in expanded:
                counts[label] = counts.get(label, 0) + 1
        output = dots + sorted(k for k, n in counts.items() if n == 1 and not k.startswith("."))
    return labels, output


def _einsum_diagonal(ctx: NodeCtx, x: Value, labels: list[str]) -> tuple[Value, list[str]]:
    """Take the diagonal of every label repeated within one operand."""
    while len(set(labels)) != len(labels):
        label = next(lbl for lbl in labels if labels.count(lbl) > 1)
        p = labels.index(label)
        q = labels.index(label, p + 1)
        n = _static_dim(ctx, x, p)
        shape = [1] * len(labels)
        shape[p] = shape[q] = n
        mask = ctx.eye(n, n, 0, _dtype(x), shape)
        x = ctx.op("reduce_sum", [ctx.op("mul", [x, mask])], {"axes": (q,), "keepdims": False})
        labels = labels[:q] + labels[q + 1:]
    return x, labels


def _einsum_sum_out(ctx: NodeCtx, x: Value, labels: list[str], keep: set[str]
                    ) -> tuple[Value, list[str]]:
    axes = tuple(i for i, lbl in enumerate(labels) if lbl not in keep)
    if not axes:
        return x, labels
    y = ctx.op("reduce_sum", [x], {"axes": axes, "keepdims": False})
    return y, [lbl for lbl in labels if lbl in keep]


def _permuted(ctx: NodeCtx, x: Value, labels: list[str], order: list[str]) -> Value:
    perm = tuple(labels.index(lbl) for lbl in order)
    return x if perm == tuple(range(len(perm))) else ctx.op("permute", [x], {"perm": perm})


@handles("Einsum")
def _einsum(ctx: NodeCtx) -> Results:
    operands = [ctx.x(i) for i in range(len(ctx.inputs))]
    labels, output = _einsum_terms(ctx, str(ctx.a("equation")),
                                   [ctx.rank(i) for i in range(len(operands))])
    pairs = [_einsum_diagonal(ctx, x, list(t)) for x, t in zip(operands, labels, strict=True)]
    wanted = set(output)
    for i, (x, t) in enumerate(pairs):  # labels found in one operand only and not wanted
        others = {lbl for j, (_, u) in enumerate(pairs) if j != i for lbl in u}
        pairs[i] = _einsum_sum_out(ctx, x, t, wanted | others)
    if len(pairs) == 2:
        product = _einsum_matmul(ctx, pairs[0], pairs[1], output)
        if product is not None:
            return [product]
    # general: broadcast every operand over all labels, multiply, sum the rest
    summed = sorted({lbl for _, t in pairs for lbl in t} - wanted)
    order = output + summed
    result: Value | None = None
    for x, t in pairs:
        present = [lbl for lbl in order if lbl in t]
        y = _permuted(ctx, x, t, present)
        missing = tuple(i for i, lbl in enumerate(order) if lbl not in t)
        if missing:
            y = ctx.op("unsqueeze", [y], {"axes": missing})
        result = y if result is None else ctx.op("mul", [result, y])
    assert result is not None
    if summed:
        axes = tuple(range(len(output), len(order)))
        result = ctx.op("reduce_sum", [result], {"axes": axes, "keepdims": False})
    if result in operands:
        result = ctx.op("identity", [result])
    return [result]


def _einsum_matmul(ctx: NodeCtx, a_pair: tuple[Value, list[str]],
                   b_pair: tuple[Value, list[str]], output: list[str]) -> Value | None:
    """A two-operand contraction as one (batched) matmul, or None when it is not one."""
    (a, la), (b, lb) = a_pair, b_pair
    batch = [lbl for lbl in output if lbl in la and lbl in lb]
    contract = [lbl for lbl in la if lbl in lb and lbl not in output]
    left = [lbl for lbl in la if lbl not in lb]
    right = [lbl for lbl in lb if lbl not in la]
    if not contract:
        return None

    def dims(x: Value, labels: list[str], wanted: list[str]) -> list[int] | None:
        shape = x.type.shape if x.type is not None else None
        if shape is None:
            return None
        out = [shape[labels.index(lbl)] for lbl in wanted]
        return [d for d in out if isinstance(d, int)] if all(isinstance(d, int) for d in out) \
            else None

    left_dims, right_dims = dims(a, la, left), dims(b, lb, right)
    k_dims = dims(a, la, contract)
    if left_dims is None or right_dims is None or k_dims is None:
        return None
    k = math.prod(k_dims)
    nb = len(batch)
    a2 = ctx.op("reshape", [_permuted(ctx, a, la, batch + left + contract)],
                {"shape": (0,) * nb + (math.prod(left_dims), k)})
    b2 = ctx.op("reshape", [_permuted(ctx, b, lb, batch + contract + right)],
                {"shape": (0,) * nb + (k, math.prod(right_dims))})
    y = ctx.op("matmul", [a2, b2])
    y = ctx.op("reshape", [y], {"shape": (0,) * nb + tuple(left_dims) + tuple(right_dims)})
    return _permuted(ctx, y, batch + left + right, output)


@handles("ScatterND")
def _scatter_nd(ctx: NodeCtx) -> Results:
    """A copy of data with the slices the k-tuples of indices name (the last dim of
    indices, k long, over data's first k axes; negatives count back) written with updates,
    or added with reduction "add": `index_put` with one index tensor per tuple position.
    torch.onnx writes slice assignment (`mask[:, h, w] = n`, Swin's attention mask) and
    index_put this way."""
    reduction = ctx.a("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "add"):
        raise Unsupported(f"reduction {reduction!r} (only none and add map to index_put)")
    data, indices, updates = ctx.x(0), ctx.x(1), ctx.x(2)
    index_shape = ctx.shape(1)
    k = index_shape[-1] if index_shape else None
    rank = ctx.rank(0)
    if not isinstance(k, int) or not 1 <= k <= rank:
        raise Unsupported("the index tuple length must be static and at most data's rank")
    index = indices if _dtype(indices) == DType.INT64 else \
        ctx.op("cast", [indices], {"dtype": DType.INT64})
    parts = [ctx.op("gather", [index, ctx.constant(np.array(i, np.int64), DType.INT64)],
                    {"axis": -1}) for i in range(k)]
    return [ctx.op("index_put", [data, updates, *parts],
                   {"index_axes": tuple(range(k)), "accumulate": reduction == "add"})]


@handles("GatherND")
def _gather_nd(ctx: NodeCtx) -> Results:
    """The index tuples (the last dim of indices, k long) become flat row numbers of data
    reshaped to [b0 * ... * d(b+k-1), rest...], then one gather along axis 0: each tuple's
    row within its batch element (strides over d(b)..d(b+k-1), negatives counting back)
    plus the batch element's first row. Dims d(b)..d(b+k-1) that are symbolic are read at
    run time (`shape_of`), as a torch.onnx export with dynamic axes has them; the
    `batch_dims` b leading dims must be static."""
    b = int(ctx.a("batch_dims", 0))
    data, indices = ctx.x(0), ctx.x(1)
    shape = ctx.shape(0)
    index_shape = ctx.shape(1)
    k = index_shape[-1] if index_shape else None
    if not isinstance(k, int) or not 1 <= k <= len(shape) - b or b < 0 \
            or len(index_shape) <= b:
        raise Unsupported("the index tuple length must be static and fit the data's rank")
    batch = shape[:b]
    if not all(isinstance(d, int) for d in batch) or tuple(index_shape[:b]) != tuple(batch):
        raise Unsupported("the batch dims must be static and the same in data and indices")
    index = indices if _dtype(indices) == DType.INT64 else \
        ctx.op("cast", [indices], {"dtype": DType.INT64})
    lead = shape[b:b + k]
    if all(isinstance(d, int) for d in lead):
        static = [d for d in lead if isinstance(d, int)]
        dims = ctx.constant(np.array(static, dtype=np.int64), DType.INT64)
        strides = ctx.constant(np.array([math.prod(static[i + 1:]) for i in range(k)],
                                        dtype=np.int64), DType.INT64)
        block: Value = ctx.constant(np.array(math.prod(static), np.int64), DType.INT64)
    else:
        dims = ctx.op("shape_of", [data], {"start": b, "end": b + k})
        parts = [ctx.op("reduce_prod", [ctx.op("shape_of", [data],
                                               {"start": b + i + 1, "end": b + k})],
                        {"axes": (0,), "keepdims": True}) for i in range(k - 1)]
        one = ctx.constant(np.ones(1, np.int64), DType.INT64)
        strides = ctx.op("concat", [*parts, one], {"axis": 0}) if parts else one
        block = ctx.op("reduce_prod", [dims], {"axes": (0,), "keepdims": False})
    wrapped = ctx.op("mod", [index, dims])  # negatives count back
    flat = ctx.op("reduce_sum", [ctx.op("mul", [wrapped, strides])],
                  {"axes": (-1,), "keepdims": False})
    if b:   # each batch element's rows start at its number times its block of rows
        count = math.prod(d for d in batch if isinstance(d, int))
        first = ctx.arange(count, [*(d for d in batch if isinstance(d, int)),
                                   *(1,) * (len(index_shape) - b - 1)])
        flat = ctx.op("add", [flat, ctx.op("mul", [first, block])])
    rows = ctx.op("flatten", [data], {"start_axis": 0, "end_axis": b + k - 1})
    return [ctx.op("gather", [rows, flat], {"axis": 0})]
