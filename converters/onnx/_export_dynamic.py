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
