"""Integer ONNX ops of quantised models, written in neutral ops: MatMulInteger and
ConvInteger (`onnxruntime.quantization.quantize_dynamic`), QLinearConv and QLinearMatMul
(QOperator files), and onnxruntime's fusions of dynamic quantisation (com.microsoft
MatMulIntegerToFloat, DynamicQuantizeMatMul), which a session at level EXTENDED writes.

All subtract the zero points and accumulate products in int32.

* **MatMulInteger** becomes `matmul` in int32 of (a - a_zero_point) and (b - b_zero_point),
  each cast to int32 first: the neutral matmul computes integer operands in their own
  type, as ONNX's int32 MatMul does, so the result equals onnxruntime's exactly.
* **ConvInteger** becomes float32 `conv`s whose results are cast to int32 and summed in
  int32. No runtime has an integer convolution that a file can name (ONNX's Conv takes
  floats, onnxruntime has no float64 Conv), so the convolution runs in float32, which is
  exact while every partial sum stays an integer of magnitude <= 2^24. A bound is
  computed at import time: per output channel, the sum over input channels and kernel of
  |w - w_zero_point| (from the weights when they and the zero point are constants, else
  the type's range times the kernel size) times the largest |x - x_zero_point| the input
  type and zero point allow. The input channels are cut into consecutive groups whose
  bound is <= 2^24 (each a convolution of the channel slices; MACs unchanged); a node
  whose single input channel already exceeds it, or a grouped convolution that would need
  cutting, is refused (kept opaque with that reason). Any summation order of such
  integers is exact, so the result does not depend on the runtime's kernel (im2col and
  GEMM, direct; not Winograd or FFT, which round intermediates).
* **QLinearConv / QLinearMatMul** are the same accumulations (+ QLinearConv's int32 bias)
  followed by onnxruntime's requantisation: float32(acc) times the float32 multiplier
  a_scale * b_scale / y_scale, rounded half to even, plus y_zero_point, saturated.
* **QLinearAdd / Mul / Sigmoid / LeakyRelu / GlobalAveragePool / Concat / Softmax, QGemm**
  (com.microsoft, what QOperator files hold around the convolutions) are the float op
  between a dequantisation and a requantisation (QGemm: the int32 accumulation first).
* **MatMulIntegerToFloat / DynamicQuantizeMatMul** end in float32(acc) * (a_scale *
  b_scale) + bias; DynamicQuantizeMatMul first quantises A as DynamicQuantizeLinear does.
* **MatMulNBits / GatherBlockQuantized** (com.microsoft; onnxruntime's weight-only block
  quantisation of LLMs) dequantise per block, (q - zero_point) * scale in the scales'
  type, then `linear` / after a `gather`. Constant packed uint8 weights are unpacked at
  import time into uint2 / uint4 / uint8 initializers of the same packed bytes (no
  neutral op unpacks bits).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from irbridge.converters.onnx._import_contrib import contrib
from irbridge.converters.onnx._import_ops import (
    Results,
    _axis,
    _dtype,
    _window_attrs,
    blocked,
    handles,
)
from irbridge.converters.onnx.importer import NodeCtx, Unsupported
from irbridge.dtypes import DType
from irbridge.ir import Value

EXACT_LIMIT = 1 << 24
"""Largest magnitude up to which float32 holds every integer."""

_INT8 = (DType.INT8, DType.UINT8)


def _minus_zero_point(ctx: NodeCtx, x: Value, zp: int, dtype: DType,
                      row_axis: int | None = None) -> Value:
    """cast(x) - cast(zero point `zp`) in `dtype`. A vector zero point of more than one
    element is reshaped to broadcast along `row_axis` counted from the end (None: as
    given)."""
    y = ctx.op("cast", [x], {"dtype": dtype})
    if not ctx.has(zp):
        return y
    z = ctx.x(zp)
    if _dtype(z) != _dtype(x):
        raise Unsupported(f"zero point (input {zp}) type differs from its operand's")
    shape = ctx.shape(zp)
    if row_axis is not None and len(shape) == 1 and shape[0] != 1:
        z = ctx.op("reshape", [z], {"shape": (-1, *(1,) * (row_axis - 1))})
    return ctx.op("sub", [y, ctx.op("cast", [z], {"dtype": dtype})])


@handles("MatMulInteger")
def _matmul_integer(ctx: NodeCtx) -> Results:
    if _dtype(ctx.x(0)) not in _INT8 or _dtype(ctx.x(1)) not in _INT8:
        raise Unsupported("operands must be int8 or uint8")
    a = _minus_zero_point(ctx, ctx.x(0), 2, DType.INT32, row_axis=2)  # per-row [M] -> [M, 1]
    b = _minus_zero_point(ctx, ctx.x(1), 3, DType.INT32)              # per-column [N]
    return [ctx.op("matmul", [a, b])]


def _largest_offset(ctx: NodeCtx, index: int, zp: int) -> int:
    """max |x - zero point| over x's type range (and the zero point's value when it is a
    constant, else its whole range)."""
    info = ml_dtypes.iinfo(_dtype(ctx.x(index)).numpy)
    zero = ctx.const(zp) if ctx.has(zp) else np.zeros(1, np.int64)
    if zero is None:
        return int(info.max) - int(info.min)
    zero = np.asarray(zero, np.int64)
    return int(max(np.max(np.abs(info.min - zero)), np.max(np.abs(info.max - zero))))


def _weight_sums(ctx: NodeCtx, w_index: int, zp: int, kernel: tuple[int, ...]) -> np.ndarray:
    """[Cout, Cin/groups]: sum over the kernel of |w - w_zero_point|, exact from constant
    weights, else the largest the type allows."""
    w = ctx.const(w_index)
    zero = ctx.const(zp) if ctx.has(zp) else np.zeros(1, np.int64)
    if w is not None and zero is not None:
        w = np.asarray(w, np.int64)
        zero = np.asarray(zero, np.int64)
        if zero.size > 1:
            zero = zero.reshape(-1, *(1,) * (w.ndim - 1))
        return np.abs(w - zero).reshape(w.shape[0], w.shape[1], -1).sum(axis=2)
    shape = ctx.static(w_index)
    span = _largest_offset(ctx, w_index, zp)
    return np.full(shape[:2], span * int(np.prod(kernel)), np.int64)


def _channel_groups(sums: np.ndarray, offset: int, groups: int, where: str
                    ) -> list[tuple[int, int]]:
    """Consecutive input-channel ranges whose worst partial sum is <= EXACT_LIMIT."""
    cin = sums.shape[1]
    if groups != 1:
        if offset * int(sums.sum(axis=1).max(initial=0)) > EXACT_LIMIT:
            raise Unsupported(f"{where}: a grouped integer convolution whose float32 sums "
                              "could exceed 2^24 (not exact)")
        return [(0, cin)]
    ranges: list[tuple[int, int]] = []
    start = 0
    running = np.zeros(sums.shape[0], np.int64)
    for channel in range(cin):
        column = sums[:, channel] * offset
        if int(column.max(initial=0)) > EXACT_LIMIT:
            raise Unsupported(f"{where}: input channel {channel} alone can exceed 2^24 in "
                              "float32 (not exact)")
        if int((running + column).max(initial=0)) > EXACT_LIMIT:
            ranges.append((start, channel))
            start, running = channel, np.zeros_like(running)
        running += column
    ranges.append((start, cin))
    return ranges


def _integer_conv(ctx: NodeCtx, x_index: int, xzp: int, w_index: int, wzp: int) -> Value:
    """int32 sum over (x - x_zero_point) * (w - w_zero_point): float32 convolutions of
    input-channel groups that stay exact, cast to int32 and added."""
    x, w = ctx.x(x_index), ctx.x(w_index)
    if _dtype(x) not in _INT8 or _dtype(w) not in _INT8:
        raise Unsupported("operands must be int8 or uint8")
    if ctx.has(xzp) and ctx.shape(xzp) not in ((), (1,)):
        raise Unsupported("x_zero_point must be a scalar")
    kernel = tuple(int(k) for k in ctx.a("kernel_shape") or ctx.static(w_index)[2:])
    attrs = _window_attrs(ctx, x, kernel)
    attrs["groups"] = groups = int(ctx.a("group", 1))
    ranges = _channel_groups(_weight_sums(ctx, w_index, wzp, kernel),
                             _largest_offset(ctx, x_index, xzp), groups, ctx.base)
    xf = _minus_zero_point(ctx, x, xzp, DType.FLOAT32)
    wf = _minus_zero_point(ctx, w, wzp, DType.FLOAT32, row_axis=len(kernel) + 2)
    total: Value | None = None
    for start, end in ranges:
        xs, ws = xf, wf
        if len(ranges) > 1:
            cut = {"starts": (start,), "ends": (end,), "axes": (1,)}
            xs, ws = ctx.op("slice", [xf], cut), ctx.op("slice", [wf], cut)
        part = ctx.op("cast", [ctx.op("conv", [xs, ws], attrs)], {"dtype": DType.INT32})
        total = part if total is None else ctx.op("add", [total, part])
    assert total is not None
    return total


@handles("ConvInteger")
def _conv_integer(ctx: NodeCtx) -> Results:
    return [_integer_conv(ctx, 0, 2, 1, 3)]


# -- QOperator: QLinearConv, QLinearMatMul ---------------------------------------------------------

def _requantize(ctx: NodeCtx, acc: Value, scales: tuple[int, int, int], zp: int,
                channel_axis: int | None) -> Value:
    """onnxruntime's requantisation of an int32 accumulator: float32(acc) * (a_scale *
    b_scale / y_scale), rounded half to even, plus y_zero_point, saturated. A per-channel
    b scale is reshaped to broadcast along `channel_axis` (None: as given)."""
    a_scale, b_scale, y_scale = (ctx.x(i) for i in scales)
    if any(_dtype(v) != DType.FLOAT32 for v in (a_scale, b_scale, y_scale)):
        raise Unsupported("scales must be float32")
    if channel_axis is not None and len(ctx.shape(scales[1])) == 1 \
            and ctx.shape(scales[1])[0] != 1:
        b_scale = ctx.op("reshape", [b_scale], {"shape": (-1, *(1,) * channel_axis)})
    multiplier = ctx.op("div", [ctx.op("mul", [a_scale, b_scale]), y_scale])
    y = ctx.op("round", [ctx.op("mul", [ctx.op("cast", [acc], {"dtype": DType.FLOAT32}),
                                        multiplier])])
    return _saturated(ctx, y, zp, DType.UINT8)


def _saturated(ctx: NodeCtx, y: Value, zp: int, default: DType) -> Value:
    """Rounded float32 `y` plus the zero point (input `zp`), saturated into and cast to
    the zero point's type (`default` without one): the last step of every requantisation."""
    target = _dtype(ctx.x(zp)) if ctx.has(zp) else default
    if target not in _INT8:
        raise Unsupported(f"quantized output type {target.short}")
    if ctx.has(zp):
        y = ctx.op("add", [y, ctx.op("cast", [ctx.x(zp)], {"dtype": DType.FLOAT32})])
    info = ml_dtypes.iinfo(target.numpy)
    y = ctx.op("clip", [y], {"min": float(info.min), "max": float(info.max)})
    return ctx.op("cast", [y], {"dtype": target})


@handles("QLinearConv")
def _qlinear_conv(ctx: NodeCtx) -> Results:
    """x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32): the integer
    convolution (as ConvInteger), + B, requantised."""
    acc = _integer_conv(ctx, 0, 2, 3, 5)
    rank = ctx.rank(0)
    if ctx.has(8):
        acc = ctx.op("add", [acc, ctx.op("reshape", [ctx.x(8)],
                                         {"shape": (-1, *(1,) * (rank - 2))})])
    return [_requantize(ctx, acc, (1, 4, 6), 7, rank - 2)]


@handles("QLinearMatMul")
def _qlinear_matmul(ctx: NodeCtx) -> Results:
    """a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp: the int32 matmul (as
    MatMulInteger), requantised."""
    if _dtype(ctx.x(0)) not in _INT8 or _dtype(ctx.x(3)) not in _INT8:
        raise Unsupported("operands must be int8 or uint8")
    if ctx.shape(1) not in ((), (1,)) or ctx.shape(2) not in ((), (1,)):
        raise Unsupported("a per-row a_scale / a_zero_point")
    a = _minus_zero_point(ctx, ctx.x(0), 2, DType.INT32)
    b = _minus_zero_point(ctx, ctx.x(3), 5, DType.INT32)
    return [_requantize(ctx, ctx.op("matmul", [a, b]), (1, 4, 6), 7, None)]


# -- onnxruntime's fusions of dynamic quantisation (com.microsoft) ------------------------------

def _to_float(ctx: NodeCtx, acc: Value, a_scale: Value, b_scale: Value, bias: int) -> Value:
    """onnxruntime's output stage: float32(acc) * (a_scale * b_scale) (+ bias)."""
    if _dtype(a_scale) != DType.FLOAT32 or _dtype(b_scale) != DType.FLOAT32:
        raise Unsupported("scales must be float32")
    y = ctx.op("mul", [ctx.op("cast", [acc], {"dtype": DType.FLOAT32}),
                       ctx.op("mul", [a_scale, b_scale])])
    return ctx.op("add", [y, ctx.x(bias)]) if ctx.has(bias) else y


def _per_tensor(ctx: NodeCtx, *indices: int) -> None:
    for index in indices:
        if ctx.has(index) and ctx.shape(index) not in ((), (1,)):
            raise Unsupported(f"input {index} must be per tensor (one element)")


@contrib("MatMulIntegerToFloat")
def _matmul_integer_to_float(ctx: NodeCtx) -> Results:
    """(A - a_zero_point) @ (B - b_zero_point) in int32, then float32(acc) * (a_scale *
    b_scale) + bias; A's scale and zero point per tensor, B's per tensor or column."""
    _per_tensor(ctx, 2, 4)
    if _dtype(ctx.x(0)) not in _INT8 or _dtype(ctx.x(1)) not in _INT8:
        raise Unsupported("operands must be int8 or uint8")
    a = _minus_zero_point(ctx, ctx.x(0), 4, DType.INT32)
    b = _minus_zero_point(ctx, ctx.x(1), 5, DType.INT32)
    return [_to_float(ctx, ctx.op("matmul", [a, b]), ctx.x(2), ctx.x(3), 6)]


@contrib("DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(ctx: NodeCtx) -> Results:
    """A (float32) quantised to uint8 as DynamicQuantizeLinear does (range widened to
    include 0, scale = range / 255, zero point and values rounded half to even and
    saturated), then as MatMulIntegerToFloat with B, b_scale, b_zero_point, bias."""
    x = ctx.x(0)
    if _dtype(x) != DType.FLOAT32 or _dtype(ctx.x(1)) not in _INT8:
        raise Unsupported("A must be float32 and B int8 or uint8")
    every = {"axes": tuple(range(ctx.rank(0))), "keepdims": False}
    zero = ctx.constant(0.0, DType.FLOAT32)
    low = ctx.op("minimum", [ctx.op("reduce_min", [x], every), zero])
    high = ctx.op("maximum", [ctx.op("reduce_max", [x], every), zero])
    scale = ctx.op("div", [ctx.op("sub", [high, low]),
                           ctx.constant(255.0, DType.FLOAT32)])
    saturate = {"min": 0.0, "max": 255.0}
    zero_point = ctx.op("clip", [ctx.op("round", [ctx.op("div", [ctx.op("sub", [zero, low]),
                                                                 scale])])], saturate)
    q = ctx.op("clip", [ctx.op("add", [ctx.op("round", [ctx.op("div", [x, scale])]),
                                       zero_point])], saturate)
    # q - zero_point holds integers in [-255, 255]: exact in int32 after the casts
    a = ctx.op("sub", [ctx.op("cast", [q], {"dtype": DType.INT32}),
                       ctx.op("cast", [zero_point], {"dtype": DType.INT32})])
    b = _minus_zero_point(ctx, ctx.x(1), 3, DType.INT32)
    return [_to_float(ctx, ctx.op("matmul", [a, b]), scale, ctx.x(2), 4)]


# -- weight-only block quantisation of LLM files (onnxruntime's 4-bit quantizer) -----------------

_UNSIGNED = {2: DType.UINT2, 4: DType.UINT4, 8: DType.UINT8}


def _unpacked(ctx: NodeCtx, index: int, bits: int, shape: tuple[int, ...], what: str) -> Value:
    """A constant uint8 input of `bits`-bit values packed low-order bits first, unpacked at
    import time into a uint{bits} initializer (the input's shape, its last dim 8 / bits
    times longer: the same bytes, so analyses count the file's packed size; one per
    packed initializer however many nodes read it), reshaped to `shape`."""
    packed = ctx.need_const(index, what)
    if packed.dtype != np.uint8:
        raise Unsupported(f"{what} (input {index}) is {packed.dtype}, not packed uint8")
    if packed.size * 8 // bits != int(np.prod(shape)):
        raise Unsupported(f"{what} (input {index}) of shape {list(packed.shape)} does not "
                          f"hold {list(shape)} {bits}-bit values")
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    values = values.reshape(*packed.shape[:-1], -1) if packed.ndim else values.reshape(-1)
    value = ctx.initializer(values, _UNSIGNED[bits], f"{ctx.node.input[index]}_unpacked{bits}")
    return value if values.shape == shape else ctx.op("reshape", [value], {"shape": shape})


def _block_attrs(ctx: NodeCtx, default_block: int | None) -> tuple[int, int]:
    bits = int(ctx.a("bits", 4))
    block = int(ctx.a("block_size", default_block))
    if bits not in _UNSIGNED:
        raise Unsupported(f"bits {bits} (2, 4 or 8)")
    if block < 1:
        raise Unsupported(f"block_size {block}")
    return bits, block


@contrib("MatMulNBits")
def _matmul_nbits(ctx: NodeCtx) -> Results:
    """A @ W + bias, W [K, N] dequantised per block of `block_size` along K: W[k, n] =
    (q[n, k] - zero_point[n, k // block_size]) * scales[n, k // block_size]. B (uint8 [N,
    k_blocks, blob]) is unpacked at import time into a uint{bits} initializer [N, k_blocks,
    block_size] of the same bytes; packed zero points likewise (unpacked ones are floats
    of A's type; absent: 2^(bits - 1)). The dequantisation (cast, sub, mul) runs in A's
    type and the product is a `linear` of A and W^T [N, K]. `accuracy_level` only allows
    onnxruntime to compute at lower precision (4: A quantised to int8 per block); the
    import computes at full precision."""
    bits, block = _block_attrs(ctx, None)
    k, n = int(ctx.a("K")), int(ctx.a("N"))
    if ctx.has(4):
        raise Unsupported("g_idx (deprecated)")
    if ctx.a("weight_prepacked", 0):
        raise Unsupported(f"weight_prepacked {ctx.a('weight_prepacked')}")
    a = ctx.x(0)
    dtype = _dtype(a)
    blocks = -(-k // block)
    w = ctx.op("cast", [_unpacked(ctx, 1, bits, (n, blocks, block), "B")], {"dtype": dtype})
    if ctx.has(3) and _dtype(ctx.x(3)) == DType.UINT8:
        per_row = -(-blocks * bits // 8) * 8 // bits
        zero = _unpacked(ctx, 3, bits, (n, per_row), "zero_points")
        if per_row != blocks:
            zero = ctx.op("slice", [zero], {"starts": (0,), "ends": (blocks,), "axes": (1,)})
        zero = ctx.op("cast", [zero], {"dtype": dtype})
    elif ctx.has(3):
        zero = ctx.x(3)
    else:
        zero = ctx.constant(float(1 << (bits - 1)), dtype)
    per_block = {"shape": (n, blocks, 1)}
    if ctx.has(3):
        zero = ctx.op("reshape", [zero], per_block)
    w = ctx.op("sub", [w, zero])
    w = ctx.op("mul", [w, ctx.op("reshape", [ctx.x(2)], per_block)])
    w = ctx.op("reshape", [w], {"shape": (n, blocks * block)})
    if blocks * block != k:
        w = ctx.op("slice", [w], {"starts": (0,), "ends": (k,), "axes": (1,)})
    return [ctx.op("linear", [a, w] + ([ctx.x(5)] if ctx.has(5) else []))]


@contrib("GatherBlockQuantized")
def _gather_block_quantized(ctx: NodeCtx) -> Results:
    """Gather of a block-quantised table: the rows of data, scales and zero points at the
    indices (gather_axis), then (q - zero_point) * scale with each block's parameters
    repeated along quantize_axis. int4 / uint4 data as it is; uint8 data of `bits` < 8
    (packed along the last axis) unpacked at import time into a uint{bits} initializer of
    the same bytes. Default zero point: 0 for int4 / uint4, 2^(bits - 1) for uint8. Out
    of range indices are not modelled (onnxruntime gives zero rows)."""
    bits, block = _block_attrs(ctx, 128)
    rank, q_rank = ctx.rank(0), ctx.rank(1)
    gather_axis = _axis(ctx, int(ctx.a("gather_axis", 0)), rank)
    quant_axis = _axis(ctx, int(ctx.a("quantize_axis", 1)), rank)
    if gather_axis == quant_axis:
        raise Unsupported(f"gather_axis {gather_axis} equal to quantize_axis")
    data_type = _dtype(ctx.x(0))
    data, zero = ctx.x(0), ctx.opt(3)
    if data_type == DType.UINT8 and bits < 8:
        last = ctx.static(0)[-1] * 8 // bits
        data = _unpacked(ctx, 0, bits, (*ctx.static(0)[:-1], last), "data")
        if zero is not None:
            zero = _unpacked(ctx, 3, bits, (*ctx.static(3)[:-1], ctx.static(3)[-1] * 8 // bits),
                             "zero_points")
    elif data_type not in (DType.INT4, DType.UINT4, DType.UINT8):
        raise Unsupported(f"data of type {data_type.short}")
    dtype = _dtype(ctx.x(2))
    out_axis = quant_axis if quant_axis < gather_axis else quant_axis + q_rank - 1
    assert data.type is not None and data.type.shape is not None
    length = data.type.shape[quant_axis]

    def gathered(value: Value) -> Value:
        rows = ctx.op("gather", [value, ctx.x(1)], {"axis": gather_axis})
        return ctx.op("cast", [rows], {"dtype": dtype}) if _dtype(value) != dtype else rows

    y = gathered(data)
    if zero is not None:
        y = ctx.op("sub", [y, blocked(ctx, gathered(zero), out_axis, block, length)])
    elif data_type == DType.UINT8:
        y = ctx.op("sub", [y, ctx.constant(float(1 << (bits - 1)), dtype)])
    return [ctx.op("mul", [y, blocked(ctx, gathered(ctx.x(2)), out_axis, block, length)])]



# -- QOperator elementwise, pooling and softmax ops (com.microsoft) -----------------------------
# onnxruntime.quantization's QOperator format writes these around QLinearConv / QLinearMatMul
# (residual adds, SE-block muls, global pooling, the classifier's QGemm, attention softmax).
# Each is the float op between a dequantisation, (x - zero_point) * scale, and a
# requantisation, saturate(round_half_even(v / y_scale) + y_zero_point), all per tensor;
# onnxruntime's kernels compute the same in float32 (MLAS QLinearAdd: a_scale / c_scale
# times (a - a_zero_point) plus the same for b) or through a lookup table (QLinearSigmoid,
# QLinearLeakyRelu, QLinearSoftmax), so an element can land one quantisation step away
# where the exact value sits on a rounding boundary.

def _dequantized(ctx: NodeCtx, x: int, scale: int, zp: int) -> Value:
    """float32 (x - zero_point) * scale of a per-tensor quantised int8 / uint8 input."""
    _per_tensor(ctx, scale, zp)
    if _dtype(ctx.x(x)) not in _INT8:
        raise Unsupported(f"input {x} must be int8 or uint8")
    if _dtype(ctx.x(scale)) != DType.FLOAT32:
        raise Unsupported("scales must be float32")
    v = ctx.op("cast", [ctx.x(x)], {"dtype": DType.FLOAT32})
    if ctx.has(zp):
        v = ctx.op("sub", [v, ctx.op("cast", [ctx.x(zp)], {"dtype": DType.FLOAT32})])
    return ctx.op("mul", [v, ctx.x(scale)])


def _quantized(ctx: NodeCtx, v: Value, scale: int, zp: int, like: int) -> Value:
    """saturate(round(v / scale) + zero_point) in the zero point's type (else that of input
    `like`), as QuantizeLinear does."""
    _per_tensor(ctx, scale, zp)
    y = ctx.op("round", [ctx.op("div", [v, ctx.x(scale)])])
    return _saturated(ctx, y, zp, _dtype(ctx.x(like)))


@contrib("QLinearAdd", "QLinearMul")
def _qlinear_binary(ctx: NodeCtx) -> Results:
    """A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point."""
    a, b = _dequantized(ctx, 0, 1, 2), _dequantized(ctx, 3, 4, 5)
    op = "add" if ctx.node.op_type == "QLinearAdd" else "mul"
    return [_quantized(ctx, ctx.op(op, [a, b]), 6, 7, 0)]


@contrib("QLinearSigmoid", "QLinearLeakyRelu")
def _qlinear_activation(ctx: NodeCtx) -> Results:
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point (+ LeakyRelu's alpha)."""
    x = _dequantized(ctx, 0, 1, 2)
    y = ctx.op("sigmoid", [x]) if ctx.node.op_type == "QLinearSigmoid" else \
        ctx.op("leaky_relu", [x], {"alpha": float(ctx.a("alpha", 0.01))})
    return [_quantized(ctx, y, 3, 4, 0)]


@contrib("QLinearGlobalAveragePool")
def _qlinear_global_average_pool(ctx: NodeCtx) -> Results:
    """X, x_scale, x_zero_point, y_scale, y_zero_point; `channels_last` = 1 puts the
    channels last (NHWC), else NCHW: the mean over the spatial dims, kept as size 1."""
    rank = ctx.rank(0)
    spatial = list(range(1, rank - 1)) if ctx.a("channels_last", 0) else list(range(2, rank))
    x = _dequantized(ctx, 0, 1, 2)
    y = ctx.op("reduce_mean", [x], {"axes": tuple(spatial), "keepdims": True})
    return [_quantized(ctx, y, 3, 4, 0)]


@contrib("QLinearSoftmax")
def _qlinear_softmax(ctx: NodeCtx) -> Results:
    """X, X_scale, x_zero_point, y_scale, y_zero_point; `axis` (default -1) as Softmax-13
    reads it (the attribute `opset` < 13 flattens from `axis` on, as Softmax-1 did)."""
    axis = int(ctx.a("axis", -1))
    x = _dequantized(ctx, 0, 1, 2)
    if int(ctx.a("opset", 13)) < 13:
        rank = ctx.rank(0)
        if axis % rank != rank - 1:
            raise Unsupported("a Softmax-1 style axis other than the last")
    y = ctx.op("softmax", [x], {"axis": axis})
    return [_quantized(ctx, y, 3, 4, 0)]


@contrib("QLinearConcat")
def _qlinear_concat(ctx: NodeCtx) -> Results:
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input; `axis`."""
    count = len(ctx.node.input)
    if count < 5 or (count - 2) % 3:
        raise Unsupported("inputs must be Y_scale, Y_zero_point and triples")
    parts = [_dequantized(ctx, i, i + 1, i + 2) for i in range(2, count, 3)]
    y = ctx.op("concat", parts, {"axis": int(ctx.a("axis"))})
    return [_quantized(ctx, y, 0, 1, 2)]


@contrib("QGemm")
def _qgemm(ctx: NodeCtx) -> Results:
    """A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (int32 bias, scale alpha *
    a_scale * b_scale), y_scale, y_zero_point: alpha * A' B' + C accumulated in int32
    (b's zero point and scale per tensor or per column), then requantised with y_scale,
    or float32 when y_scale is absent."""
    if _dtype(ctx.x(0)) not in _INT8 or _dtype(ctx.x(3)) not in _INT8:
        raise Unsupported("operands must be int8 or uint8")
    _per_tensor(ctx, 1, 2)
    a = _minus_zero_point(ctx, ctx.x(0), 2, DType.INT32)
    if ctx.a("transA", 0):
        a = ctx.op("permute", [a], {"perm": (1, 0)})
    transposed = bool(ctx.a("transB", 0))
    # a per-column zero point [N] broadcasts along the rows of a transposed B [N, K], along
    # the last axis of B [K, N] as it is
    b = _minus_zero_point(ctx, ctx.x(3), 5, DType.INT32, row_axis=2 if transposed else None)
    if transposed:
        b = ctx.op("permute", [b], {"perm": (1, 0)})
    acc = ctx.op("matmul", [a, b])
    if ctx.has(6):
        acc = ctx.op("add", [acc, ctx.x(6)])
    if any(_dtype(ctx.x(i)) != DType.FLOAT32 for i in (1, 4)):
        raise Unsupported("scales must be float32")
    scale = ctx.op("mul", [ctx.x(1), ctx.x(4)])
    alpha = float(ctx.a("alpha", 1.0))
    if alpha != 1.0:
        scale = ctx.op("mul", [scale, ctx.constant(np.array(alpha, np.float32), DType.FLOAT32)])
    y = ctx.op("mul", [ctx.op("cast", [acc], {"dtype": DType.FLOAT32}), scale])
    if not ctx.has(7):
        return [y]
    return [_quantized(ctx, y, 7, 8, 0)]
