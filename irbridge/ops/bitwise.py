"""Bitwise ops on integers (and booleans): and / or / xor / not, shifts, popcnt and
count_leading_zeros, as StableHLO defines them.

Shifts take the shift amount as an unsigned number of the operand's width: an amount of
at least the bit width (a negative amount included) gives 0 for `shift_left` and
`shift_right_logical` and fills with the sign bit for `shift_right_arithmetic`. Logical
shifts see the bits as unsigned, arithmetic shifts as signed, whatever the integer type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import TensorType
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

Arrays = list[np.ndarray | None]


def _integer(ctx: OpContext, index: int, bool_ok: bool) -> TensorType:
    t = ctx.input(index)
    if not (t.dtype.is_integer or (bool_ok and t.dtype is DType.BOOL)):
        kinds = "integer or boolean" if bool_ok else "integer"
        raise ctx.fail(f"input {index} must be {kinds}, got {t}")
    return t


def _per_element(ctx: OpContext) -> Flops:
    return Flops(other=ctx.out_numel())


def _bits(x: np.ndarray) -> int:
    """The bit width of x's integer type (4 for int4, which ml_dtypes keeps in a byte)."""
    return DType.from_numpy(x.dtype).bits if x.dtype.kind == "V" else x.dtype.itemsize * 8


def _unsigned(x: np.ndarray) -> np.ndarray:
    """x's bits read unsigned; a sub-byte type (int4, uint2, ...) as a uint8 pattern."""
    if x.dtype.kind == "V":
        return (x.astype(np.int16) & ((1 << _bits(x)) - 1)).astype(np.uint8)
    return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.kind == "i" else x


def _signed(x: np.ndarray) -> np.ndarray:
    """x's bits read signed; a sub-byte type as int8, sign-extended from its top bit."""
    if x.dtype.kind == "V":
        half = 1 << (_bits(x) - 1)
        return ((_unsigned(x).astype(np.int16) ^ half) - half).astype(np.int8)
    return x.view(np.dtype(f"i{x.dtype.itemsize}")) if x.dtype.kind == "u" else x


def _as(pattern: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Bits computed in `_unsigned` / `_signed` form back as `dtype` (a sub-byte type keeps
    the low bits: ml_dtypes' cast of an integer wraps)."""
    return pattern.astype(dtype) if dtype.kind == "V" else pattern.view(dtype)


def _binary_infer(bool_ok: bool) -> Callable[[OpContext], list[TensorType]]:
    def infer(ctx: OpContext) -> list[TensorType]:
        a, b = _integer(ctx, 0, bool_ok), _integer(ctx, 1, bool_ok)
        where = ctx.where or "bitwise"
        return [TensorType(promote([a, b], where), broadcast_shapes([a.shape, b.shape], where))]
    return infer


def _binary_ref(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
                ) -> Callable[[Arrays, dict[str, Any], RefContext], list[np.ndarray]]:
    def reference(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
        a, b = xs[0], xs[1]
        assert a is not None and b is not None
        out = ctx.output_types[0]
        dtype = out.dtype.numpy if out is not None else np.result_type(a, b)
        a, b = np.broadcast_arrays(a.astype(dtype), b.astype(dtype))
        return [np.asarray(fn(a, b)).astype(dtype, copy=False)]
    return reference


def _logical_shift(shift: Callable[[np.ndarray, np.ndarray], np.ndarray]
                   ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A shift of the bits read unsigned; 0 where the amount is at least the bit width."""
    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = _bits(a)
        ua, ub = _unsigned(a), _unsigned(b)
        big = ub >= bits
        out = shift(ua, np.where(big, 0, ub).astype(ua.dtype))
        return _as(np.where(big, 0, out).astype(ua.dtype), a.dtype)
    return fn


_shift_left = _logical_shift(np.left_shift)
_shift_right_logical = _logical_shift(np.right_shift)


def _shift_right_arithmetic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = _bits(a)
    sa, ub = _signed(a), _unsigned(b)
    amount = np.minimum(ub, bits - 1).astype(sa.dtype)  # bits - 1 fills with the sign
    return _as(np.right_shift(sa, amount), a.dtype)


_BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], bool, str]] = {
    "bitwise_and": (np.bitwise_and, True, "Bitwise and of integers (logical and of booleans)."),
    "bitwise_or": (np.bitwise_or, True, "Bitwise or of integers (logical or of booleans)."),
    "bitwise_xor": (np.bitwise_xor, True, "Bitwise xor of integers (logical xor of booleans)."),
    "shift_left": (_shift_left, False,
                   "a << b, wrapping; 0 where b (read unsigned) is at least the bit width."),
    "shift_right_logical": (_shift_right_logical, False,
                            "a >> b on the bits read unsigned (zeros shifted in); 0 where b "
                            "(read unsigned) is at least the bit width."),
    "shift_right_arithmetic": (_shift_right_arithmetic, False,
                               "a >> b on the bits read signed (the sign bit shifted in); "
                               "where b (read unsigned) is at least the bit width, all sign "
                               "bits (-1 or 0)."),
}

for _name, (_fn, _bool_ok, _doc) in _BINARY.items():
    define(_name, Category.ELEMENTWISE, inputs=inputs("a", "b"), infer=_binary_infer(_bool_ok),
           cost=_per_element, cost_doc="1 per output element", reference=_binary_ref(_fn),
           doc=_doc + " Numpy-style broadcasting; StableHLO's semantics.")


def _unary_infer(bool_ok: bool) -> Callable[[OpContext], list[TensorType]]:
    def infer(ctx: OpContext) -> list[TensorType]:
        return [_integer(ctx, 0, bool_ok)]
    return infer


def _popcnt(x: np.ndarray) -> np.ndarray:
    u = _unsigned(x)
    count = np.zeros(u.shape, np.int64)
    for bit in range(_bits(x)):
        count += ((u >> u.dtype.type(bit)) & u.dtype.type(1)).astype(np.int64)
    return count.astype(x.dtype)


def _clz(x: np.ndarray) -> np.ndarray:
    u = _unsigned(x)
    bits = _bits(x)
    count = np.full(u.shape, bits, np.int64)  # 0 has `bits` leading zeros
    for bit in range(bits):  # the highest set bit decides
        count = np.where((u >> u.dtype.type(bit)) & u.dtype.type(1), bits - 1 - bit, count)
    return count.astype(x.dtype)


def _unary_ref(fn: Callable[[np.ndarray], np.ndarray]
               ) -> Callable[[Arrays, dict[str, Any], RefContext], list[np.ndarray]]:
    def reference(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
        x = xs[0]
        assert x is not None
        return [np.asarray(fn(x)).astype(x.dtype, copy=False)]
    return reference


define("bitwise_not", Category.ELEMENTWISE, inputs=inputs("x"), infer=_unary_infer(True),
       cost=_per_element, cost_doc="1 per output element",
       reference=_unary_ref(np.invert),
       doc="Bitwise not of integers (logical not of booleans).")
define("popcnt", Category.ELEMENTWISE, inputs=inputs("x"), infer=_unary_infer(False),
       cost=_per_element, cost_doc="1 per output element", reference=_unary_ref(_popcnt),
       doc="Number of set bits of each integer (its bits read unsigned), in x's type.")
define("count_leading_zeros", Category.ELEMENTWISE, inputs=inputs("x"),
       infer=_unary_infer(False), cost=_per_element, cost_doc="1 per output element",
       reference=_unary_ref(_clz),
       doc="Number of leading zero bits of each integer (the bit width for 0), in x's type.")


# -- bitcast and reduce_precision (StableHLO's bitcast_convert and reduce_precision) -------


def _element_bits(dtype: DType) -> int:
    """Bit width of an element for bitcast: booleans count one bit (StableHLO's i1)."""
    return 1 if dtype is DType.BOOL else 8 * dtype.itemsize


def _bitcast_infer(ctx: OpContext) -> list[TensorType]:
    t = ctx.input(0)
    target: DType = ctx.attrs["dtype"]
    if any(d is not DType.BOOL and d.bits < 8 for d in (t.dtype, target)):
        raise ctx.fail(f"bitcast of a sub-byte type ({t.dtype.short} to {target.short}) is "
                       "not supported")
    have, want = _element_bits(t.dtype), _element_bits(target)
    if have == want:
        return [TensorType(target, t.shape)]
    if t.shape is None:
        raise ctx.fail(f"input rank must be known to change the bit width, got {t}")
    if have > want:  # one element becomes have / want: a new last dim
        return [TensorType(target, (*t.shape, have // want))]
    if not t.shape or t.shape[-1] != want // have:
        raise ctx.fail(f"to bitcast {t.dtype.short} to {target.short} the last dim must be "
                       f"{want // have}, got {t}")
    return [TensorType(target, tuple(t.shape[:-1]))]


def _bitcast_ref(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    target: DType = attrs["dtype"]
    x = np.array(x, order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if DType.from_numpy(x.dtype) is target:
        return [x.copy()]
    if x.dtype == np.bool_:  # little-endian bits: element i is bit i
        raw = np.packbits(x, axis=-1, bitorder="little")
        return [np.ascontiguousarray(raw).view(target.numpy).reshape(x.shape[:-1])]
    raw = x.reshape(*x.shape, 1).view(np.uint8)  # (..., bytes) little-endian
    if target is DType.BOOL:
        return [np.unpackbits(raw, axis=-1, bitorder="little").astype(bool)]
    out = raw.reshape(*x.shape[:-1], -1).view(target.numpy) if x.ndim else \
        raw.reshape(-1).view(target.numpy)
    want = _bitcast_out_shape(x.shape, x.dtype.itemsize, target.itemsize)
    return [out.reshape(want)]


def _bitcast_out_shape(shape: tuple[int, ...], have: int, want: int) -> tuple[int, ...]:
    if have == want:
        return shape
    if have > want:
        return (*shape, have // want)
    return shape[:-1]


define("bitcast", Category.ELEMENTWISE, inputs=inputs("x"),
       attrs=(attr("dtype", AttrKind.DTYPE, doc="target element type"),),
       infer=_bitcast_infer, cost=lambda ctx: Flops(), cost_doc="0 (bytes only)",
       reference=_bitcast_ref,
       doc="The bits of x read as another element type (StableHLO's bitcast_convert, "
           "little-endian; booleans are one bit each, element i bit i). A narrower target "
           "adds a last dim of width ratio; a wider one consumes a last dim of that size.")


_FLOAT_LAYOUT = {DType.FLOAT16: (5, 10), DType.BFLOAT16: (8, 7), DType.FLOAT32: (8, 23),
                 DType.FLOAT64: (11, 52)}
"""(exponent bits, mantissa bits) of the float types reduce_precision takes."""


def _reduce_precision_infer(ctx: OpContext) -> list[TensorType]:
    t = ctx.input(0)
    if t.dtype not in _FLOAT_LAYOUT:
        raise ctx.fail(f"input must be f16, bf16, f32 or f64, got {t}")
    if int(ctx.attrs["exponent_bits"]) < 1 or int(ctx.attrs["mantissa_bits"]) < 0:
        raise ctx.fail("exponent_bits must be >= 1 and mantissa_bits >= 0")
    return [t]


def _reduce_precision_ref(xs: Arrays, attrs: dict[str, Any], ctx: RefContext
                          ) -> list[np.ndarray]:
    """XLA's / StableHLO's algorithm on the bits: round the mantissa to nearest even,
    then overflow to signed infinity and underflow to signed zero; NaNs stay NaN (become
    +inf when no mantissa bit is left)."""
    x = xs[0]
    assert x is not None
    exp_bits, man_bits = _FLOAT_LAYOUT[DType.from_numpy(x.dtype)]
    width = 8 * x.dtype.itemsize
    u = np.dtype(f"u{x.dtype.itemsize}").type
    bits = np.array(x, order="C").view(u)
    exponent_bits, mantissa_bits = int(attrs["exponent_bits"]), int(attrs["mantissa_bits"])
    with np.errstate(over="ignore"):
        if mantissa_bits < man_bits:
            shift = man_bits - mantissa_bits
            last = u(1 << shift)
            bias = ((bits & last) >> u(shift)) + u((1 << (shift - 1)) - 1)
            bits = (bits + bias) & u(~((1 << shift) - 1) & ((1 << width) - 1))
        if exponent_bits < exp_bits:
            exp_mask = ((1 << exp_bits) - 1) << man_bits
            bias_src = (1 << (exp_bits - 1)) - 1
            reduced = (1 << (exponent_bits - 1)) - 1
            exponent = bits & u(exp_mask)
            sign = bits & u(1 << (width - 1))
            bits = np.where(exponent > u((bias_src + reduced) << man_bits), sign | u(exp_mask),
                            np.where(exponent <= u((bias_src - reduced) << man_bits), sign,
                                     bits))
    y = np.asarray(bits, dtype=u).view(x.dtype)
    nan = np.isnan(x)
    y = np.where(nan, x if mantissa_bits > 0 else np.asarray(np.inf, x.dtype), y)
    return [np.asarray(y, dtype=x.dtype)]


define("reduce_precision", Category.ELEMENTWISE, inputs=inputs("x"),
       attrs=(attr("exponent_bits", AttrKind.INT, doc="exponent bits of the narrower format"),
              attr("mantissa_bits", AttrKind.INT, doc="mantissa bits of the narrower format")),
       infer=_reduce_precision_infer, cost=_per_element, cost_doc="1 per output element",
       reference=_reduce_precision_ref,
       doc="Round x to the float format with `exponent_bits` and `mantissa_bits` and back "
           "(StableHLO's reduce_precision): mantissa rounded to nearest even, overflow to "
           "signed infinity, underflow to signed zero, NaNs kept (+inf without mantissa).")
