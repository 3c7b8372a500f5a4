"""Tensor creation: constants, ranges, fills and factories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Sym, Unsupported
from ._base import (
    Args,
    _alias,
    _aten_fn,
    _expand_to,
    _op,
    aten,
)
from .shapes import (
    _sizes_from_meta,
)

# -- creation --------------------------------------------------------------------------------


def _full(em: Emitter, sizes: Sequence[Any], value: Any, dtype: DType) -> Value:
    items = [s.resolve() if isinstance(s, Deferred) else s for s in sizes]
    fill = float(value) if not isinstance(value, bool) else float(int(value))
    if all(isinstance(s, int) for s in items):
        return em.op("full", [], shape=tuple(int(s) for s in items), value=fill, dtype=dtype)
    shape = em.ints(items)
    assert isinstance(shape, Value)
    return em.op("expand", [em.scalar(value, dtype), shape])


@_aten_fn(aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format,
          _op("new_full"), aten.new_zeros.default, aten.new_ones.default,
          aten.new_empty.default, _op("empty", "default"), _op("empty_permuted"),
          aten.zeros.names if hasattr(aten.zeros, "names") else None)
def _creation(em: Emitter, a: Args) -> Value:
    target = a.get("__op__")
    sizes = a.get("size")
    if sizes is None:
        raise Unsupported("no size")
    if isinstance(sizes, int | Sym):
        sizes = [sizes]
    value: Any = a.get("fill_value", 0)
    if target in (aten.ones.default, aten.new_ones.default):
        value = 1
    if isinstance(value, Value | Sym):
        raise Unsupported("fill with a tensor value")
    return _full(em, _sizes_from_meta(em, list(sizes)), value, em.out_dtype())


@_aten_fn(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
          aten.empty_like.default, aten.fill.Scalar, aten.fill_.Scalar, aten.zero_.default,
          _op("zero"), aten.fill.Tensor, aten.fill_.Tensor)
def _like(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    target = a.get("__op__")
    value: Any = a.get("fill_value", a.get("value", 0))
    if target is aten.ones_like.default:
        value = 1
    out = em.out_dtype()
    if isinstance(value, Value):  # fill.Tensor
        return _expand_to(em, em.cast(value, out), list(em.shape(x)))
    shape = em.shape(x)
    if all(isinstance(d, int) for d in shape):
        return em.op("full", [], shape=tuple(int(d) for d in shape),  # type: ignore[arg-type]
                     value=float(value), dtype=out)
    dims = [d if isinstance(d, int) else em.size_of(x, i) for i, d in enumerate(shape)]
    return _full(em, dims, value, out)


@_aten_fn(aten.scalar_tensor.default)
def _scalar_tensor(em: Emitter, a: Args) -> Value:
    value = a["s"]
    out = em.out_dtype()
    if isinstance(value, Sym):
        return em.cast(value.value, out)
    return em.scalar(value, out)


@_aten_fn(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(em: Emitter, a: Args) -> Value:
    start = a.get("start", 0)
    end = a["end"]
    step = a.get("step", 1)
    start = 0 if start is None else start
    step = 1 if step is None else step
    out = em.out_dtype()
    if isinstance(end, Sym) or isinstance(start, Sym) or isinstance(step, Sym):
        return _symbolic_arange(em, start, end, step, out)
    return em.op("range", [], start=float(start), limit=float(end), delta=float(step),
                 dtype=out)


def _symbolic_arange(em: Emitter, start: Any, end: Any, step: Any, out: DType) -> Value:
    """arange with symbolic bounds: a `range` op fed by i64 scalars."""
    bounds = [em.cast(em.value(v, DType.INT64), DType.INT64) if isinstance(v, Sym)
              else em.scalar(v, DType.INT64) for v in (start, end, step)]
    if any(isinstance(v, float) for v in (start, end, step)):
        raise Unsupported("arange with symbolic and float bounds")
    indices = em.set_shape(em.op("range", bounds), em.out_shape())
    return em.cast(indices, out)


@_aten_fn(aten.tril_indices.default, aten.triu_indices.default)
def _tri_indices(em: Emitter, a: Args) -> Value:
    """The [2, n] (row, column) indices of a row x col triangle: they depend only on the
    op's integer arguments, so they are a constant (a symbolic size is not supported)."""
    sizes = [a["row"], a["col"], a.get("offset", 0)]
    if not all(isinstance(v, int) for v in sizes):
        raise Unsupported("triangle indices of a symbolic size")
    rows, cols = (np.tril_indices if a.get("__op__") == aten.tril_indices.default
                  else np.triu_indices)(int(sizes[0]), int(sizes[2]), int(sizes[1]))
    return em.const(np.stack([rows, cols]), em.out_dtype())


@_aten_fn(aten.one_hot.default)
def _one_hot(em: Emitter, a: Args) -> Value:
    classes = int(a["num_classes"])
    if classes < 0:
        raise Unsupported("one_hot without num_classes")
    return em.op("one_hot", [em.value(a["self"])], depth=classes, dtype=DType.INT64)


@_aten_fn(aten.nonzero.default, aten.argwhere.default)
def _nonzero(em: Emitter, a: Args) -> Value:
    nz = em.op("non_zero", [em.value(a["self"])])
    return em.op("permute", [nz], perm=(1, 0))


@_aten_fn(aten.masked_select.default)
def _masked_select(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("masked_select", [x, em.cast(em.value(a["mask"]), DType.BOOL)])


def _unique_outputs(em: Emitter, op: str, x: Value, inverse: bool, counts: bool) -> Any:
    """values, inverse, counts of the neutral op; an output torch was not asked for is
    its empty int64 placeholder (shape [0])."""
    values, inv, cnt = em.ops(op, [x], 3)
    empty = Deferred(lambda: em.const(np.zeros((0,), np.int64)))
    return (values, inv if inverse else empty, cnt if counts else empty)


@_aten_fn(_op("_unique2"))
def _unique2(em: Emitter, a: Args) -> Any:
    """torch.unique without dim (sorted or not: torch's CPU kernels sort either way, and
    the order of sorted=False is unspecified)."""
    return _unique_outputs(em, "unique", em.value(a["self"]), bool(a["return_inverse"]),
                           bool(a["return_counts"]))


@_aten_fn(_op("_unique"))
def _unique(em: Emitter, a: Args) -> Any:
    values, inverse, _ = _unique_outputs(em, "unique", em.value(a["self"]),
                                         bool(a["return_inverse"]), False)
    return (values, inverse)


@_aten_fn(_op("unique_consecutive"))
def _unique_consecutive(em: Emitter, a: Args) -> Any:
    if a.get("dim") is not None:
        raise Unsupported("unique_consecutive along a dim")
    return _unique_outputs(em, "unique_consecutive", em.value(a["self"]),
                           bool(a["return_inverse"]), bool(a["return_counts"]))


# =====================================================================================
# Python-level tables: fx (symbolic_trace) and Dynamo graphs
# =====================================================================================

_ALIASES: list[tuple[Any, Any]] = [
    (torch.relu, aten.relu.default), (torch.relu_, aten.relu_.default),
    (torch.sigmoid, aten.sigmoid.default), (torch.tanh, aten.tanh.default),
    (torch.exp, aten.exp.default), (torch.log, aten.log.default),
    (torch.sqrt, aten.sqrt.default), (torch.rsqrt, aten.rsqrt.default),
    (torch.abs, aten.abs.default), (torch.neg, aten.neg.default),
    (torch.sin, aten.sin.default), (torch.cos, aten.cos.default),
    (torch.erf, aten.erf.default), (torch.floor, aten.floor.default),
    (torch.ceil, aten.ceil.default), (torch.reciprocal, aten.reciprocal.default),
    (torch.sign, aten.sign.default), (torch.isnan, aten.isnan.default),
    (torch.isinf, aten.isinf.default), (torch.logical_not, aten.logical_not.default),
    (torch.log1p, aten.log1p.default), (torch.square, aten.square.default),
    (F.gelu, aten.gelu.default), (F.hardtanh, aten.hardtanh.default),
    (torch.clamp, aten.clamp.default), (torch.clip, aten.clamp.default),
    (torch.clamp_min, aten.clamp_min.default), (torch.clamp_max, aten.clamp_max.default),
    (torch.maximum, aten.maximum.default), (torch.minimum, aten.minimum.default),
    (torch.pow, aten.pow.Tensor_Scalar), (torch.where, aten.where.self),
    (torch.masked_fill, aten.masked_fill.Scalar),
    (torch.logical_and, aten.logical_and.default), (torch.logical_or, aten.logical_or.default),
    (F.linear, aten.linear.default), (torch.matmul, aten.matmul.default),
    (torch.bmm, aten.bmm.default), (torch.mm, aten.mm.default),
    (torch.addmm, aten.addmm.default), (torch.baddbmm, aten.baddbmm.default),
    (torch.conv1d, aten.conv1d.default), (torch.conv2d, aten.conv2d.default),
    (torch.conv3d, aten.conv3d.default),
    (torch.conv_transpose1d, aten.conv_transpose1d.default),
    (torch.conv_transpose2d, aten.conv_transpose2d.input),
    (torch.conv_transpose3d, aten.conv_transpose3d.input),
    (F.layer_norm, aten.layer_norm.default), (torch.layer_norm, aten.layer_norm.default),
    (F.group_norm, aten.group_norm.default), (torch.group_norm, aten.group_norm.default),
    (torch.batch_norm, aten.batch_norm.default),
    (F.scaled_dot_product_attention, aten.scaled_dot_product_attention.default),
    (F.avg_pool1d, aten.avg_pool1d.default), (F.avg_pool2d, aten.avg_pool2d.default),
    (F.avg_pool3d, aten.avg_pool3d.default),
    (F.adaptive_avg_pool1d, aten.adaptive_avg_pool1d.default),
    (F.adaptive_avg_pool2d, aten.adaptive_avg_pool2d.default),
    (F.adaptive_avg_pool3d, aten.adaptive_avg_pool3d.default),
    (torch.max_pool1d, aten.max_pool1d.default), (torch.max_pool2d, aten.max_pool2d.default),
    (torch.max_pool3d, aten.max_pool3d.default),
    (torch.flatten, aten.flatten.using_ints), (torch.reshape, aten.reshape.default),
    (torch.permute, aten.permute.default), (torch.transpose, aten.transpose.int),
    (torch.t, aten.t.default), (torch.unsqueeze, aten.unsqueeze.default),
    (torch.cat, aten.cat.default), (torch.concat, aten.cat.default),
    (torch.stack, aten.stack.default), (torch.narrow, aten.narrow.default),
    (torch.index_select, aten.index_select.default), (torch.gather, aten.gather.default),
    (torch.tril, aten.tril.default), (torch.triu, aten.triu.default),
    (torch.cumsum, aten.cumsum.default), (torch.topk, aten.topk.default),
    (torch.flip, aten.flip.default), (torch.roll, aten.roll.default),
    (torch.zeros_like, aten.zeros_like.default), (torch.ones_like, aten.ones_like.default),
    (torch.full_like, aten.full_like.default), (torch.empty_like, aten.empty_like.default),
    (torch.embedding, aten.embedding.default), (torch.argmax, aten.argmax.default),
    (torch.argmin, aten.argmin.default), (torch.amax, aten.amax.default),
    (torch.amin, aten.amin.default), (torch.logsumexp, aten.logsumexp.default),
    (torch.unbind, aten.unbind.int), (torch.repeat_interleave, None),
    (torch._C._nn.pad, aten.pad.default), (torch.constant_pad_nd, aten.constant_pad_nd.default),
    (F.one_hot, aten.one_hot.default), (torch.nonzero, aten.nonzero.default),
    (torch.scalar_tensor, aten.scalar_tensor.default),
    (torch.softmax, aten.softmax.int), (torch.log_softmax, aten.log_softmax.int),
    (torch.detach, aten.detach.default), (torch.clone, aten.clone.default),
]
for _target, _aten_op in _ALIASES:
    if _aten_op is not None:
        _alias(_target, _aten_op)

_METHOD_ALIASES: list[tuple[str, Any, str | None]] = [
    ("relu", aten.relu.default, None), ("relu_", aten.relu_.default, None),
    ("sigmoid", aten.sigmoid.default, None), ("tanh", aten.tanh.default, None),
    ("exp", aten.exp.default, None), ("log", aten.log.default, None),
    ("sqrt", aten.sqrt.default, None), ("rsqrt", aten.rsqrt.default, None),
    ("abs", aten.abs.default, None), ("neg", aten.neg.default, None),
    ("sin", aten.sin.default, None), ("cos", aten.cos.default, None),
    ("erf", aten.erf.default, None), ("floor", aten.floor.default, None),
    ("reciprocal", aten.reciprocal.default, None), ("sign", aten.sign.default, None),
    ("clamp", aten.clamp.default, None), ("clip", aten.clamp.default, None),
    ("clamp_min", aten.clamp_min.default, None), ("clamp_max", aten.clamp_max.default, None),
    ("clamp_", aten.clamp.default, None),
    ("pow", aten.pow.Tensor_Scalar, None), ("masked_fill", aten.masked_fill.Scalar, None),
    ("masked_fill_", aten.masked_fill_.Scalar, None),
    ("matmul", aten.matmul.default, None), ("bmm", aten.bmm.default, None),
    ("mm", aten.mm.default, None),
    ("view", aten.view.default, "size"), ("reshape", aten.reshape.default, "shape"),
    ("permute", aten.permute.default, "dims"), ("transpose", aten.transpose.int, None),
    ("t", aten.t.default, None), ("flatten", aten.flatten.using_ints, None),
    ("unflatten", aten.unflatten.int, None),
    ("unsqueeze", aten.unsqueeze.default, None), ("expand", aten.expand.default, "size"),
    ("repeat", aten.repeat.default, "repeats"), ("narrow", aten.narrow.default, None),
    ("index_select", aten.index_select.default, None), ("gather", aten.gather.default, None),
    ("tril", aten.tril.default, None), ("triu", aten.triu.default, None),
    ("cumsum", aten.cumsum.default, None), ("topk", aten.topk.default, None),
    ("flip", aten.flip.default, "dims"), ("roll", aten.roll.default, None),
    ("argmax", aten.argmax.default, None), ("argmin", aten.argmin.default, None),
    ("amax", aten.amax.default, None), ("amin", aten.amin.default, None),
    ("logsumexp", aten.logsumexp.default, None), ("unbind", aten.unbind.int, None),
    ("softmax", aten.softmax.int, None), ("log_softmax", aten.log_softmax.int, None),
    ("type_as", aten.type_as.default, None), ("expand_as", aten.expand_as.default, None),
    ("maximum", aten.maximum.default, None), ("minimum", aten.minimum.default, None),
    ("logical_not", aten.logical_not.default, None),
    ("new_zeros", aten.new_zeros.default, "size"), ("new_ones", aten.new_ones.default, "size"),
    ("new_empty", aten.new_empty.default, "size"),
    ("zero_", aten.zero_.default, None), ("fill_", aten.fill_.Scalar, None),
    ("gelu", aten.gelu.default, None), ("square", aten.square.default, None),
    ("nonzero", aten.nonzero.default, None),
]
for _method, _aten_op, _varargs in _METHOD_ALIASES:
    _alias(_method, _aten_op, varargs=_varargs)
