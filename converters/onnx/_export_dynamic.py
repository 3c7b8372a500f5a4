"""ONNX emitters of `dynamic_slice` and `dynamic_update_slice` (run-time starts), and of
the bitwise ops on integers.

The starts (one integer scalar per dim) become one int64 vector clamped into
[0, dim - window] as StableHLO defines it (`Max` / `Min`); `dynamic_slice` is then a
`Slice` from the clamped starts, `dynamic_update_slice` a `ScatterND` of the update at the
window's coordinates (a constant grid of the update's shape plus the starts).
"""

from __future__ import annotations

import numpy as np

from irbridge.converters.onnx.export import NodeEmit
from irbridge.dtypes import DType
from irbridge.errors import ExportError


def _clamped_starts(e: NodeEmit, first: int, window: tuple[int, ...]) -> str:
    rank = e.rank(0)
    if len(e.ins) - first != rank:
        raise ExportError(f"{e.where}: needs {rank} start indices, got {len(e.ins) - first}")
    parts = [e.one("Reshape", [e.as_dtype(i, DType.INT64), e.i64([1])])
             for i in range(first, first + rank)]
    starts = parts[0] if rank == 1 else e.one("Concat", parts, axis=0)
    t = e.in_type(0)
    if t is not None and t.is_static:
        limit = e.i64([d - w for d, w in zip(t.static_shape(), window, strict=True)])
    else:
        limit = e.one("Sub", [e.one("Shape", [e.input(0)]), e.i64(list(window))])
    return e.one("Min", [e.one("Max", [starts, e.i64([0] * rank)]), limit])


def dynamic_slice(e: NodeEmit) -> None:
    sizes = tuple(int(n) for n in e.attrs["sizes"])
    if e.rank(0) == 0:
        e.out("Identity", [e.input(0)])
        return
    starts = _clamped_starts(e, 1, sizes)
    ends = e.one("Add", [starts, e.i64(list(sizes))])
    e.out("Slice", [e.input(0), starts, ends])


def dynamic_update_slice(e: NodeEmit) -> None:
    if e.rank(0) == 0:
        e.out("Identity", [e.input(1)])
        return
    window = e.static(1)
    starts = _clamped_starts(e, 2, window)
    grid = np.moveaxis(np.indices(window, dtype=np.int64), 0, -1)  # window + [rank]
    indices = e.one("Add", [e.const(grid, "window"), starts])
    e.out("ScatterND", [e.input(0), indices, e.input(1)])


# -- bitwise ops (interop) -------------------------------------------------------------------

_BITWISE = {"bitwise_and": ("BitwiseAnd", "And"), "bitwise_or": ("BitwiseOr", "Or"),
            "bitwise_xor": ("BitwiseXor", "Xor"), "bitwise_not": ("BitwiseNot", "Not")}


def bitwise(e: NodeEmit) -> None:
    """ONNX's Bitwise* ops (opset 18) on integers, the logical ops on booleans."""
    integer_op, bool_op = _BITWISE[e.node.op]
    dtype = e.out_dtype()
    if dtype is DType.BOOL:
        e.out(bool_op, [e.as_dtype(i, DType.BOOL) for i in range(len(e.ins))])
        return
    e.need_opset(18, f"{e.node.op} of integers (ONNX {integer_op})")
    e.out(integer_op, [e.as_dtype(i, dtype) for i in range(len(e.ins))])


# -- shifts, popcnt, count_leading_zeros ----------------------------------------------------
# ONNX's BitShift works on unsigned types only; selects and comparisons run on int64 (a
# value of any integer type cast to int64 and back keeps its bits), so every step uses
# kernels onnxruntime has for these types.

_UNSIGNED = {1: DType.UINT8, 2: DType.UINT16, 4: DType.UINT32, 8: DType.UINT64}
_SIGNED = {1: DType.INT8, 2: DType.INT16, 4: DType.INT32, 8: DType.INT64}


def _bits_of(e: NodeEmit) -> tuple[DType, DType, int]:
    """The output type, the unsigned type the bits are worked on (uint16 is widened to
    uint32: onnxruntime has no 16-bit BitShift) and the bit width of the output type."""
    dtype = e.out_dtype()
    if dtype is None or not dtype.is_integer:
        raise ExportError(f"{e.where}: {e.node.op} needs an integer type, got {dtype}")
    work = _UNSIGNED[max(dtype.itemsize, 4) if dtype.itemsize == 2 else dtype.itemsize]
    return dtype, work, dtype.itemsize * 8


def _bits_view(e: NodeEmit, name: str, dtype: DType, unsigned: DType) -> str:
    """The bits of `name` (of `dtype`) as `unsigned`, zero-extended when that is wider."""
    if dtype is unsigned:
        return name
    view = _cast(e, name, unsigned)
    if unsigned.itemsize > dtype.itemsize:  # a signed cast sign-extends: keep the low bits
        e.need_opset(18, f"{e.node.op} of {dtype.short} (ONNX BitwiseAnd)")
        view = e.one("BitwiseAnd", [view, e.scalar((1 << dtype.itemsize * 8) - 1, unsigned)])
    return view


def _cast(e: NodeEmit, name: str, target: DType) -> str:
    from irbridge.converters.onnx._common import dtype_to_onnx

    return e.one("Cast", [name], to=dtype_to_onnx(target))


def shift(e: NodeEmit) -> None:
    """shift_left / shift_right_logical / shift_right_arithmetic as StableHLO defines them
    (amounts read unsigned; at least the bit width: 0, or the sign fill)."""
    dtype, unsigned, bits = _bits_of(e)
    a = e.as_dtype(0, dtype)
    b64 = _cast(e, e.as_dtype(1, dtype), DType.INT64)  # uint64 past 2^63: negative, big
    big = e.one("Or", [e.one("Less", [b64, e.i64(0)]),
                       e.one("GreaterOrEqual", [b64, e.i64(bits)])])
    arithmetic = e.node.op == "shift_right_arithmetic"
    if arithmetic:
        e.need_opset(18, f"{e.node.op} (ONNX BitwiseNot)")
    amount = e.one("Where", [big, e.i64(bits - 1 if arithmetic else 0), b64])
    amount = _cast(e, amount, unsigned)
    if arithmetic and unsigned.itemsize > dtype.itemsize:  # widened: sign-extend the bits
        ua = _cast(e, _cast(e, a, _SIGNED[dtype.itemsize]), unsigned)
    else:
        ua = _bits_view(e, a, dtype, unsigned)
    if e.node.op == "shift_left":
        shifted = e.one("BitShift", [ua, amount], direction="LEFT")
    else:
        shifted = e.one("BitShift", [ua, amount], direction="RIGHT")
    wide = _cast(e, shifted, DType.INT64)
    if arithmetic:  # negative: not(not(a) >> s)
        filled = e.one("BitwiseNot", [e.one("BitShift", [e.one("BitwiseNot", [ua]), amount],
                                            direction="RIGHT")])
        signed = _cast(e, _cast(e, ua, _SIGNED[dtype.itemsize]), DType.INT64)
        negative = e.one("Less", [signed, e.i64(0)])
        wide = e.one("Where", [negative, _cast(e, filled, DType.INT64), wide])
    else:
        wide = e.one("Where", [big, e.i64(0), wide])
    e.out("Cast", [wide], to=_onnx_type(dtype))


def _onnx_type(dtype: DType) -> int:
    from irbridge.converters.onnx._common import dtype_to_onnx

    return int(dtype_to_onnx(dtype))


def popcnt(e: NodeEmit) -> None:
    """The set bits of each byte from a 256-entry table, summed over the bytes."""
    dtype, unsigned, bits = _bits_of(e)
    e.need_opset(18, "popcnt (ONNX BitwiseAnd)")
    ua = _bits_view(e, e.as_dtype(0, dtype), dtype, unsigned)
    table = e.const(np.array([bin(i).count("1") for i in range(256)], np.int64), "popcnt")
    mask = e.scalar(255, unsigned)
    total: str | None = None
    for k in range(bits // 8):
        byte = ua if k == 0 else e.one("BitShift", [ua, e.scalar(8 * k, unsigned)],
                                       direction="RIGHT")
        byte = _cast(e, e.one("BitwiseAnd", [byte, mask]), DType.INT64)
        count = e.one("Gather", [table, byte], axis=0)
        total = count if total is None else e.one("Add", [total, count])
    assert total is not None
    e.out("Cast", [total], to=_onnx_type(dtype))


def count_leading_zeros(e: NodeEmit) -> None:
    """Binary search: for s = bits/2, ..., 1, when the top s bits are 0 count them and
    shift left by s; a last top bit of 0 (x = 0) counts one more."""
    dtype, unsigned, narrow = _bits_of(e)
    bits = unsigned.itemsize * 8  # the work width; the widening's zeros are taken off
    x = _bits_view(e, e.as_dtype(0, dtype), dtype, unsigned)
    total = e.one("Mul", [_cast(e, x, DType.INT64), e.i64(0)])
    if bits != narrow:
        total = e.one("Sub", [total, e.i64(bits - narrow)])
    step = bits // 2
    while step:
        top = _cast(e, e.one("BitShift", [x, e.scalar(bits - step, unsigned)],
                             direction="RIGHT"), DType.INT64)
        zero = e.one("Equal", [top, e.i64(0)])
        total = e.one("Add", [total, e.one("Where", [zero, e.i64(step), e.i64(0)])])
        moved = _cast(e, e.one("BitShift", [x, e.scalar(step, unsigned)], direction="LEFT"),
                      DType.INT64)
        x = _cast(e, e.one("Where", [zero, moved, _cast(e, x, DType.INT64)]), unsigned)
        step //= 2
    top = _cast(e, e.one("BitShift", [x, e.scalar(bits - 1, unsigned)], direction="RIGHT"),
                DType.INT64)
    total = e.one("Add", [total, e.one("Where", [e.one("Equal", [top, e.i64(0)]), e.i64(1),
                                                 e.i64(0)])])
    e.out("Cast", [total], to=_onnx_type(dtype))
