"""Ops whose output length depends on the data: masked_select, unique, unique_consecutive
(non_zero lives with the tensor ops and shares `data_dim`).

The data-dependent dim is a `SymDim` bounded by what the op's semantics guarantee (at
least 0, at most the elements the op reads), never by the example data. Its name is
kept when the output already carries one (a re-inference keeps the lowering's name), else
it is made from the node (`<op><id>_n`), so that two such dims never share a name (a
shared name would claim equal sizes).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Dim, SymDim, TensorType
from irbridge.ops._shapes import broadcast_shapes
from irbridge.ops.registry import (
    Category,
    Flops,
    OpContext,
    RefContext,
    define,
    inputs,
)

Arrays = list[np.ndarray | None]
Attrs = dict[str, Any]


def max_numel(t: TensorType) -> int | None:
    """The most elements a value of type `t` can hold: static dims and SymDim maxima."""
    if t.shape is None:
        return None
    total = 1
    for d in t.shape:
        bound = d if isinstance(d, int) else d.max if isinstance(d, SymDim) else None
        if bound is None:
            return None
        total *= bound
    return total


def fits(dim: Dim, size: int) -> bool:
    """Whether a run's `size` agrees with an inferred dim: unknown, equal, or a SymDim
    whose bounds hold it."""
    if dim is None or isinstance(dim, int):
        return dim is None or dim == size
    return (dim.min or 0) <= size and (dim.max is None or size <= dim.max)


def data_dim(ctx: OpContext, output: int, axis: int, bound: int | None) -> SymDim:
    """The data-dependent dim `axis` of output `output`: 0 to `bound` elements."""
    t = ctx.output_types[output] if output < len(ctx.output_types) else None
    current: Dim = None
    if t is not None and t.shape is not None and axis < len(t.shape):
        current = t.shape[axis]
    if isinstance(current, SymDim):
        name = current.name
    else:
        found = re.search(r"#(\d+)", ctx.where)
        name = f"{ctx.op}{found.group(1) if found else ''}_n"
    return SymDim(name, 0, bound)


def _numel(t: TensorType) -> int:
    n = t.numel()
    return int(n) if n is not None else 0


def _arg(xs: Arrays, index: int, ctx: RefContext) -> np.ndarray:
    x = xs[index] if index < len(xs) else None
    if x is None:
        raise OpError(f"{ctx.where}: input {index} is missing")
    return x


# -- masked_select ----------------------------------------------------------------------

def _masked_select_infer(ctx: OpContext) -> list[TensorType]:
    x, mask = ctx.input(0), ctx.input(1)
    if mask.dtype != DType.BOOL:
        raise ctx.fail(f"mask must be bool, got {mask.dtype}")
    if x.shape is None or mask.shape is None:
        return [TensorType(x.dtype, (data_dim(ctx, 0, 0, None),))]
    shape = broadcast_shapes([x.shape, mask.shape], ctx.where)
    return [TensorType(x.dtype, (data_dim(ctx, 0, 0, max_numel(TensorType(x.dtype, shape))),))]


def _masked_select_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x, mask = np.broadcast_arrays(_arg(xs, 0, ctx), _arg(xs, 1, ctx).astype(bool))
    return [np.ascontiguousarray(x[mask]).reshape(-1)]


define("masked_select", Category.OTHER, inputs=inputs("x", "mask"),
       infer=_masked_select_infer,
       cost=lambda ctx: Flops(other=_numel(ctx.input(0))),
       cost_doc="input numel (one test per element)", reference=_masked_select_ref,
       doc="The elements of x where the bool mask is true, as a 1-D tensor in row-major "
           "order; x and mask broadcast (numpy rules). The length is data dependent: a "
           "SymDim from 0 to the broadcast numel.")


# -- unique -----------------------------------------------------------------------------

_UNIQUE_OUTPUTS = ("values", "inverse", "counts")


def _unique_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    bound = max_numel(x)
    n = data_dim(ctx, 0, 0, bound)
    return [TensorType(x.dtype, (n,)), TensorType(DType.INT64, x.shape),
            TensorType(DType.INT64, (n,))]


def _sort_cost(ctx: OpContext) -> Flops:
    n = _numel(ctx.input(0))
    return Flops(other=n * max(1, math.ceil(math.log2(max(n, 2)))))


def _unique_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    flat = x.reshape(-1)
    kwargs: dict[str, Any] = {"equal_nan": False} if flat.dtype.kind in "fc" else {}
    values, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True,
                                        **kwargs)
    return [values.astype(x.dtype), inverse.reshape(x.shape).astype(np.int64),
            counts.astype(np.int64)]


define("unique", Category.OTHER, inputs=inputs("x"), outputs=_UNIQUE_OUTPUTS,
       infer=_unique_infer, cost=_sort_cost, cost_doc="n*ceil(log2 n) comparisons (a sort)",
       reference=_unique_ref,
       doc="The distinct elements of x (flattened), sorted ascending; `inverse` (x's "
           "shape, int64) is each element's position in `values` and `counts` (int64) how "
           "often each value occurs. NaNs are all distinct (torch.unique). The length of "
           "values and counts is data dependent: a SymDim from 0 to x's numel.")


# -- unique_consecutive -----------------------------------------------------------------

def _unique_consecutive_ref(xs: Arrays, attrs: Attrs,
                            ctx: RefContext) -> list[np.ndarray]:
    x = _arg(xs, 0, ctx)
    flat = x.reshape(-1)
    starts = np.ones(flat.shape, dtype=bool)
    starts[1:] = flat[1:] != flat[:-1]
    first = np.flatnonzero(starts)
    counts = np.diff(np.append(first, flat.size))
    inverse = np.cumsum(starts) - 1
    return [flat[first].astype(x.dtype), inverse.reshape(x.shape).astype(np.int64),
            counts.astype(np.int64)]


define("unique_consecutive", Category.OTHER, inputs=inputs("x"), outputs=_UNIQUE_OUTPUTS,
       infer=_unique_infer,
       cost=lambda ctx: Flops(other=_numel(ctx.input(0))),
       cost_doc="input numel (one comparison with the previous element)",
       reference=_unique_consecutive_ref,
       doc="x (flattened) with each run of equal consecutive elements kept once; "
           "`inverse` (x's shape, int64) is each element's run index and `counts` (int64) "
           "each run's length. NaNs never equal each other (each starts a run). The length "
           "of values and counts is data dependent: a SymDim from 0 to x's numel.")
