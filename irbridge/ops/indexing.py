"""Advanced-index writes: `index_put` (torch's `x[i, :, j] = v` / `index_put`).

Index tensors apply to the axes `index_axes` names (one per index tensor, ascending; a bool
mask of rank r at axis a covers axes a .. a + r - 1); every other axis is taken whole.
The semantics are NumPy's (and torch's) advanced indexing: the integer index tensors
broadcast together; when they sit on consecutive axes the broadcast dims replace those
axes in place, otherwise they come first; `values` broadcast to that indexed shape.
With `accumulate` the values are added (repeated positions add up); without it a
repeated position takes one of its values (which one is unspecified, as in torch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import TensorType
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


def _numel(t: TensorType) -> int:
    n = t.numel()
    return n if n is not None else 0


def _infer(ctx: OpContext) -> list[TensorType]:
    x, values = ctx.input(0), ctx.input(1)
    if values.dtype != x.dtype:
        raise ctx.fail(f"values are {values.dtype.short}, x is {x.dtype.short}")
    axes = list(ctx.attrs["index_axes"])
    count = len(ctx.input_types) - 2
    if count < 1 or count != len(axes):
        raise ctx.fail(f"needs one index tensor per entry of index_axes ({len(axes)}), got "
                       f"{count}")
    if axes != sorted(set(axes)) or (axes and axes[0] < 0):
        raise ctx.fail(f"index_axes {axes} must be distinct, ascending and non-negative")
    rank = len(x.shape) if x.shape is not None else None
    end = 0
    for i, axis in enumerate(axes):
        t = ctx.input(2 + i)
        if not (t.dtype.is_integer or t.dtype == DType.BOOL):
            raise ctx.fail(f"index {i} must be an integer or bool tensor, got {t}")
        if axis < end:
            raise ctx.fail(f"index {i} at axis {axis} overlaps the previous bool mask")
        width = len(t.shape) if t.dtype == DType.BOOL and t.shape is not None else 1
        end = axis + width
    if rank is not None and end > rank:
        raise ctx.fail(f"indices reach axis {end - 1} of a rank-{rank} x")
    return [x]


def _key(x: np.ndarray, indices: list[np.ndarray], axes: list[int]) -> tuple[Any, ...]:
    key: list[Any] = []
    axis = 0
    for index, at in zip(indices, axes, strict=True):
        key += [slice(None)] * (at - axis)
        key.append(index.astype(bool) if index.dtype == np.bool_ else index.astype(np.int64))
        axis = at + (index.ndim if index.dtype == np.bool_ else 1)
    return tuple(key)


def _reference(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x, values = xs[0], xs[1]
    assert x is not None and values is not None
    indices = [i for i in xs[2:] if i is not None]
    key = _key(x, indices, list(attrs["index_axes"]))
    y = x.copy()
    try:
        if attrs["accumulate"]:
            np.add.at(y, key, values)
        else:
            y[key] = values
    except IndexError as exc:
        raise OpError(f"{ctx.where or 'index_put'}: index out of range ({exc})") from None
    return [y]


def _cost(ctx: OpContext) -> Flops:
    # accumulate adds each value once; a plain write moves bytes only
    return Flops(other=_numel(ctx.input(1)) if ctx.attrs["accumulate"] else 0)


define("index_put", Category.DATA_MOVEMENT, inputs=inputs("x", "values", "indices*"),
       attrs=(attr("index_axes", AttrKind.INTS, doc="the axis each index tensor starts at"),
              attr("accumulate", AttrKind.BOOL, False, "add the values instead of writing")),
       infer=_infer, cost=_cost, reference=_reference, updates=(0, 1),
       cost_doc="1 per value when accumulate, else 0 (bytes only)",
       doc="A copy of x with x[idx] = values (or += with accumulate), idx the index tensors "
           "on `index_axes`, other axes whole (torch index_put, NumPy advanced indexing).")
