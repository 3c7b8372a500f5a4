"""ONNX emitters of the data-dependent-size ops (irbridge/ops/datadep.py): masked_select
as Compress, unique as Unique, unique_consecutive as a decomposition (a run-start mask,
Compress, CumSum, NonZero)."""

from __future__ import annotations

import numpy as np

from irbridge.converters.onnx import _export_ops  # noqa: F401  (its emitters first: non_zero is replaced below)
from irbridge.converters.onnx.export import CANONICAL, EMITTERS, NodeEmit
from irbridge.dtypes import DType


def _masked_select(e: NodeEmit) -> None:
    x, mask = e.input(0), e.as_dtype(1, DType.BOOL)
    # Where broadcasts x against mask; Compress without an axis reads x flattened
    wide = e.one("Where", [mask, x, x])
    flat_mask = e.one("Reshape", [e.one("Expand", [mask, e.one("Shape", [wide])]),
                                  e.i64([-1], "shape")])
    e.out("Compress", [wide, flat_mask])


def _unique(e: NodeEmit) -> None:
    values, _, inverse, counts = e.emit("Unique", [e.input(0)], 4, sorted=1)
    e.one("Identity", [values], e.outs[0])
    e.one("Reshape", [inverse, e.one("Shape", [e.input(0)])], e.outs[1])
    e.one("Identity", [counts], e.outs[2])


def _unique_consecutive(e: NodeEmit) -> None:
    flat = e.one("Reshape", [e.input(0), e.i64([-1], "shape")])
    head = e.one("Slice", [flat, e.i64([0]), e.i64([-1]), e.i64([0])])
    tail = e.one("Slice", [flat, e.i64([1]), e.i64([2**62]), e.i64([0])])
    changed = e.one("Not", [e.one("Equal", [tail, head])])
    # the first element starts a run: [True] ++ changed, cut to n (0 elements: empty)
    size = e.one("Shape", [flat])
    joined = e.one("Concat", [e.const(np.array([True])), changed], axis=0)
    starts = e.one("Slice", [joined, e.i64([0]), size, e.i64([0])])
    e.one("Compress", [flat, starts], e.outs[0])
    runs = e.one("CumSum", [e.one("Cast", [starts], to=7), e.i64(0)])
    inverse = e.one("Sub", [runs, e.i64([1])])
    e.one("Reshape", [inverse, e.one("Shape", [e.input(0)])], e.outs[1])
    begins = e.one("Reshape", [e.one("NonZero", [starts]), e.i64([-1], "shape")])
    ends = e.one("Concat", [e.one("Slice", [begins, e.i64([1]), e.i64([2**62]), e.i64([0])]),
                           size], axis=0)
    e.one("Sub", [ends, begins], e.outs[2])


EMITTERS["masked_select"] = _masked_select
EMITTERS["unique"] = _unique
EMITTERS["unique_consecutive"] = _unique_consecutive
CANONICAL.add(("masked_select", "Compress"))


def _non_zero(e: NodeEmit) -> None:
    """NonZero; onnxruntime reads a 0-d input as one element ([1, count]) where the op is
    [0, count] (torch.nonzero of a scalar): the row is cut away."""
    if e.rank(0) != 0:
        e.out("NonZero", [e.input(0)])
        return
    rows = e.one("NonZero", [e.one("Reshape", [e.input(0), e.i64([1], "shape")])])
    e.out("Slice", [rows, e.i64([0]), e.i64([0]), e.i64([0])])


EMITTERS["non_zero"] = _non_zero  # replaces the plain NonZero of _export_ops (0-d inputs)
