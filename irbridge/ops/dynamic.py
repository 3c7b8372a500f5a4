"""Slices at run-time positions: `dynamic_slice` and `dynamic_update_slice`.

Their start indices are tensors (one integer scalar per dim of x), known only when the
program runs, as in the bodies of `lax.scan` / `fori_loop` (StableHLO's ops of the same
names). Each start is clamped as StableHLO defines it: to [0, dim - window size], so the
window always lies inside x. They move bytes only (cost 0 FLOPs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

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


def _check_starts(ctx: OpContext, first: int, rank: int) -> None:
    count = len(ctx.input_types) - first
    if count != rank:
        raise ctx.fail(f"needs {rank} start indices (one per dim of x), got {count}")
    for i in range(first, len(ctx.input_types)):
        t = ctx.input(i)
        if not t.dtype.is_integer or (t.shape is not None and t.shape != ()):
            raise ctx.fail(f"start index {i - first} must be an integer scalar, got {t}")


def clamped_starts(starts: list[np.ndarray | None], dims: tuple[int, ...],
                   sizes: tuple[int, ...], where: str) -> list[int]:
    """StableHLO's clamp: each start into [0, dim - size]."""
    out = []
    for axis, (start, dim, size) in enumerate(zip(starts, dims, sizes, strict=True)):
        if start is None:
            raise ValueError(f"{where}: start index {axis} is missing")
        out.append(int(min(max(int(np.asarray(start).reshape(())), 0), dim - size)))
    return out


def _no_flops(ctx: OpContext) -> Flops:
    return Flops()


# -- dynamic_slice ---------------------------------------------------------------------------

def _slice_infer(ctx: OpContext) -> list[TensorType]:
    x = ctx.input(0)
    sizes = tuple(ctx.attrs["sizes"])
    if x.shape is not None:
        _check_starts(ctx, 1, len(x.shape))
        if len(sizes) != len(x.shape):
            raise ctx.fail(f"sizes {list(sizes)} must have one entry per dim of x {x}")
        for axis, (dim, size) in enumerate(zip(x.shape, sizes, strict=True)):
            if size < 0 or (isinstance(dim, int) and size > dim):
                raise ctx.fail(f"size {size} of dim {axis} is outside 0..{dim}")
    return [TensorType(x.dtype, sizes)]


def _slice_ref(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    sizes = tuple(attrs["sizes"])
    starts = clamped_starts(xs[1:], x.shape, sizes, ctx.where)
    window = tuple(slice(s, s + n) for s, n in zip(starts, sizes, strict=True))
    return [x[window].copy()]


def _slice_cost(ctx: OpContext) -> Flops:
    """Reads only the window of x (and the starts)."""
    x = ctx.input(0)
    return Flops(reads=(ctx.out_numel() * x.dtype.itemsize,))


define("dynamic_slice", Category.DATA_MOVEMENT, inputs=inputs("x", "starts*"),
       attrs=(attr("sizes", AttrKind.INTS, doc="window size per dim of x"),),
       infer=_slice_infer, cost=_slice_cost,
       cost_doc="0 FLOPs; reads the window of x only", reference=_slice_ref,
       doc="The window of x of the given sizes at run-time starts (one integer scalar per "
           "dim of x), each clamped to [0, dim - size] as StableHLO's dynamic_slice does.")


# -- dynamic_update_slice --------------------------------------------------------------------

def _update_infer(ctx: OpContext) -> list[TensorType]:
    x, update = ctx.input(0), ctx.input(1)
    if x.shape is not None:
        _check_starts(ctx, 2, len(x.shape))
        if update.shape is not None:
            if len(update.shape) != len(x.shape):
                raise ctx.fail(f"update {update} must have the rank of x {x}")
            for axis, (dim, size) in enumerate(zip(x.shape, update.shape, strict=True)):
                if isinstance(dim, int) and isinstance(size, int) and size > dim:
                    raise ctx.fail(f"update dim {axis} ({size}) is larger than x's ({dim})")
    if update.dtype != x.dtype:
        raise ctx.fail(f"update {update} must have x's element type {x.dtype.short}")
    return [x]


def _update_ref(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x, update = xs[0], xs[1]
    assert x is not None and update is not None
    starts = clamped_starts(xs[2:], x.shape, update.shape, ctx.where)
    y = x.copy()
    y[tuple(slice(s, s + n) for s, n in zip(starts, update.shape, strict=True))] = update
    return [y]


define("dynamic_update_slice", Category.DATA_MOVEMENT, inputs=inputs("x", "update", "starts*"),
       infer=_update_infer, cost=_no_flops, cost_doc="0 (bytes only)", reference=_update_ref,
       updates=(0, 1),
       doc="x with the window at run-time starts (one integer scalar per dim of x) replaced "
           "by update; each start is clamped to [0, dim - update dim] as StableHLO's "
           "dynamic_update_slice does.")
