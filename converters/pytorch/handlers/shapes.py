"""Shapes: views, reshapes, slicing, concatenation, indexing."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from irbridge.dtypes import DType
from irbridge.ir import SymDim, Value

from ..lower import Deferred, Emitter, Sym, Unsupported
from ._base import (
    INT64_MAX,
    Args,
    AtenFn,
    _alias,
    _aten_fn,
    _axis,
    _expand_to,
    _is_python_number,
    _op,
    _operand,
    _reshape_to,
    aten,
)

# -- shapes ----------------------------------------------------------------------------------


@_aten_fn(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          _op("view_copy"))
def _view(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    sizes: Any = a.get("size", a.get("shape"))
    if isinstance(sizes, int | Sym):
        sizes = [sizes]
    return _reshape_to(em, x, _sizes_from_meta(em, list(sizes)))


def _sizes_from_meta(em: Emitter, sizes: list[Any]) -> list[Any]:
    """Use the static output dims where torch knows them (fewer runtime shape ops)."""
    try:
        out = em.out_shape()
    except Unsupported:
        return sizes
    if len(out) != len(sizes):
        return sizes
    resolved = []
    for s, d in zip(sizes, out, strict=True):
        resolved.append(d if isinstance(d, int) and not isinstance(s, int) else s)
    return resolved


@_aten_fn(aten.flatten.using_ints)
def _flatten(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    if rank == 0:
        return em.op("reshape", [x], shape=(1,))
    return em.op("flatten", [x], start_axis=_axis(int(a["start_dim"]), rank),
                 end_axis=_axis(int(a["end_dim"]), rank))


@_aten_fn(aten.unflatten.int)
def _unflatten(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    out = em.out_shape()
    if all(isinstance(d, int) for d in out):
        return em.op("reshape", [x], shape=tuple(int(d) for d in out))  # type: ignore[arg-type]
    rank = em.rank(x)
    dim = _axis(int(a["dim"]), rank)
    sizes = list(a["sizes"])
    items: list[Any] = [0] * dim + sizes + [0] * (rank - dim - 1)
    if 0 in sizes:
        raise Unsupported("unflatten with a zero size")
    return em.op("reshape", [x], shape=tuple(int(i) for i in items)) if all(
        isinstance(i, int) for i in items) else _reshape_to(em, x, items)


@_aten_fn(aten.permute.default, _op("permute_copy"))
def _permute(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    perm = tuple(_axis(int(d), rank) for d in a["dims"])
    if perm == tuple(range(rank)):
        return x
    return em.op("permute", [x], perm=perm)


@_aten_fn(aten.transpose.int, _op("transpose_copy", "int"), _op("swapaxes"), _op("swapdims"))
def _transpose(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    d0 = _axis(int(_first(a, "dim0", "axis0")), rank)
    d1 = _axis(int(_first(a, "dim1", "axis1")), rank)
    if d0 == d1:
        return x
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return em.op("permute", [x], perm=tuple(perm))


def _first(a: Args, *keys: str) -> Any:
    for key in keys:
        if a.get(key) is not None:
            return a[key]
    raise Unsupported(f"missing argument {keys[0]}")


@_aten_fn(aten.unsqueeze.default, _op("unsqueeze_copy"))
def _unsqueeze(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("unsqueeze", [x], axes=(_axis(int(a["dim"]), em.rank(x) + 1),))


@_aten_fn(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, _op("squeeze_copy", "dim"),
          _op("squeeze_copy", "dims"))
def _squeeze(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    shape = em.shape(x)
    rank = len(shape)
    dims = a.get("dim")
    candidates: list[int]
    if dims is None:
        candidates = list(range(rank))
    elif isinstance(dims, int):
        candidates = [_axis(dims, max(rank, 1))] if rank else []
    else:
        candidates = [_axis(int(d), max(rank, 1)) for d in dims] if rank else []
    axes = tuple(i for i in candidates if shape[i] == 1)
    if any(not isinstance(shape[i], int) for i in candidates):
        raise Unsupported("squeeze of a symbolic dim")
    if not axes:
        return x
    return em.op("squeeze", [x], axes=axes)


@_aten_fn(aten.expand.default, _op("expand_copy"))
def _expand(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return _expand_to(em, x, _sizes_from_meta(em, list(a["size"])))


@_aten_fn(aten.expand_as.default)
def _expand_as(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return _expand_to(em, x, list(em.out_shape()))


@_aten_fn(aten.slice.Tensor, _op("slice_copy", "Tensor"))
def _slice(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    dim = _axis(int(a["dim"]), rank)
    start, end, step = a["start"], a["end"], a["step"]
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    step = 1 if step is None else step
    size = em.shape(x)[dim]
    if isinstance(end, Sym | torch.SymInt) or isinstance(start, Sym | torch.SymInt):
        # a symbolic bound equal to the whole dim is a no-op
        if start in (0, None) and isinstance(end, Sym) and em.out_shape()[dim] == size:
            return x
        raise Unsupported("slice with symbolic bounds")
    start, end, step = int(start), int(end), int(step)
    if start == 0 and step == 1 and (end >= INT64_MAX or (isinstance(size, int)
                                                          and end >= size)):
        return x
    return em.op("slice", [x], starts=(start,), ends=(min(end, INT64_MAX),), axes=(dim,),
                 steps=(step,))


@_aten_fn(aten.narrow.default, _op("narrow_copy"))
def _narrow(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    start, length = int(a["start"]), int(a["length"])
    if start < 0:
        size = em.shape(x)[dim]
        if not isinstance(size, int):
            raise Unsupported("narrow from the back of a symbolic dim")
        start += size
    return em.op("slice", [x], starts=(start,), ends=(start + length,), axes=(dim,))


@_aten_fn(aten.select.int, _op("select_copy", "int"))
def _select(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    index = a["index"]
    if not isinstance(index, int):
        raise Unsupported("select with a symbolic index")
    return _select_index(em, x, dim, int(index))


def _select_index(em: Emitter, x: Value, dim: int, index: int) -> Value:
    end = INT64_MAX if index == -1 else index + 1
    part = em.op("slice", [x], starts=(index,), ends=(end,), axes=(dim,))
    return em.op("squeeze", [part], axes=(dim,))


@_aten_fn(aten.cat.default, _op("concat"), _op("concatenate"))
def _cat(em: Emitter, a: Args) -> Value:
    tensors = [em.value(t) for t in a["tensors"]]
    out = em.out_dtype()
    # torch skips 1-D empty tensors among tensors of another rank (an empty cache that a
    # first step concatenates to: torch.cat([torch.tensor([]), k], dim=-2)), wherever
    # they stand in the list
    other_rank = any(em.rank(t) != 1 for t in tensors)
    kept = [em.cast(t, out) for t in tensors
            if not (em.type(t).shape == (0,) and other_rank)]
    rank = em.rank(kept[0])
    axis = _axis(int(a["dim"]), rank)
    if len(kept) == 1:
        return kept[0]
    return em.op("concat", kept, axis=axis)


@_aten_fn(aten.stack.default)
def _stack(em: Emitter, a: Args) -> Value:
    tensors = [em.value(t) for t in a["tensors"]]
    out = em.out_dtype()
    rank = em.rank(tensors[0]) + 1
    axis = _axis(int(a["dim"]), rank)
    parts = [em.op("unsqueeze", [em.cast(t, out)], axes=(axis,)) for t in tensors]
    return parts[0] if len(parts) == 1 else em.op("concat", parts, axis=axis)


def _split_sizes(em: Emitter, x: Value, dim: int, sizes: Sequence[int]) -> list[Value]:
    if len(sizes) == 1:
        return [x]
    return em.ops("split", [x], count=len(sizes), axis=dim, sizes=tuple(int(s) for s in sizes))


@_aten_fn(aten.split.Tensor, aten.split_with_sizes.default, _op("split_with_sizes_copy"),
          _op("split_copy", "Tensor"))
def _split(em: Emitter, a: Args) -> list[Value]:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    size = em.shape(x)[dim]
    if "split_sizes" in a and a["split_sizes"] is not None:
        sizes = [int(s) for s in a["split_sizes"]]
    else:
        if not isinstance(size, int):
            raise Unsupported("split of a symbolic dim")
        step = int(a["split_size"])
        sizes = [min(step, size - i) for i in range(0, size, step)] if size else [0]
    return _split_sizes(em, x, dim, sizes)


@_aten_fn(aten.chunk.default)
def _chunk(em: Emitter, a: Args) -> list[Value]:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    size = em.shape(x)[dim]
    if not isinstance(size, int):
        raise Unsupported("chunk of a symbolic dim")
    step = -(-size // int(a["chunks"]))
    sizes = [min(step, size - i) for i in range(0, size, step)]
    return _split_sizes(em, x, dim, sizes)


@_aten_fn(aten.unbind.int, _op("unbind_copy", "int"))
def _unbind(em: Emitter, a: Args) -> list[Value]:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    size = em.shape(x)[dim]
    if not isinstance(size, int):
        raise Unsupported("unbind of a symbolic dim")
    parts = _split_sizes(em, x, dim, [1] * size)
    return [em.op("squeeze", [p], axes=(dim,)) for p in parts]


@_aten_fn(aten.index_select.default)
def _index_select(em: Emitter, a: Args) -> Value:
    x, index = em.value(a["self"]), em.value(a["index"])
    if em.rank(x) == 0:  # a 0-d tensor acts as one element; the result is 0-d again
        picked = em.op("gather", [em.op("reshape", [x], shape=(1,)),
                                  em.op("reshape", [index], shape=(-1,))], axis=0)
        return em.op("reshape", [picked], shape=())
    return em.op("gather", [x, index], axis=_axis(int(a["dim"]), em.rank(x)))


@_aten_fn(aten.unfold.default, _op("unfold_copy"))
def _unfold(em: Emitter, a: Args) -> Value:
    """Tensor.unfold: every window of `size` elements, `step` apart, along `dimension`; the
    windows replace the dim and their elements form a new last dim."""
    x = em.value(a["self"])
    size, step = int(a["size"]), int(a["step"])
    if em.rank(x) == 0:
        return em.op("reshape", [x], shape=(1,))  # torch: size must be 1
    axis = _axis(int(a["dimension"]), em.rank(x))
    n = em.static_shape(x)[axis]
    count = (n - size) // step + 1
    if count < 1 or size < 1:
        raise Unsupported(f"unfold of size {size} over a dim of {n}")
    windows = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    y = em.op("gather", [x, em.const(windows, DType.INT64)], axis=axis)  # dim -> (count, size)
    rank = em.rank(y)
    perm = [d for d in range(rank) if d != axis + 1] + [axis + 1]
    return y if axis + 1 == rank - 1 else em.op("permute", [y], perm=tuple(perm))


@_aten_fn(aten.put.default, _op("put_"))
def _put(em: Emitter, a: Args) -> Value:
    """Writes (or with accumulate adds) source into self read as a flat vector."""
    x = em.value(a["self"])
    flat = em.op("reshape", [x], shape=(-1,))
    index = em.op("reshape", [em.value(a["index"])], shape=(-1,))
    source = em.op("reshape", [em.cast(em.value(a["source"]), em.type(x).dtype)], shape=(-1,))
    y = em.op("scatter_elements", [flat, index, source], axis=0,
              reduction="add" if a["accumulate"] else "none")
    return em.op("reshape", [y], shape=em.static_shape(x))


@_aten_fn(aten.masked_scatter.default, _op("masked_scatter_"))
def _masked_scatter(em: Emitter, a: Args) -> Value:
    """The i-th True of the (broadcast) mask takes source's i-th element (row-major)."""
    out_shape = em.out_shape()
    x = _expand_to(em, em.value(a["self"]), list(out_shape))
    mask = _expand_to(em, em.cast(em.value(a["mask"]), DType.BOOL), list(out_shape))
    flat = em.op("reshape", [em.cast(mask, DType.INT64)], shape=(-1,))
    taken = em.op("sub", [em.op("cumsum", [flat], axis=0), em.scalar(1, DType.INT64)])
    taken = em.op("maximum", [taken, em.scalar(0, DType.INT64)])
    source = em.op("reshape", [em.cast(em.value(a["source"]), em.type(x).dtype)], shape=(-1,))
    picked = em.op("reshape", [em.op("gather", [source, taken], axis=0)],
                   shape=em.static_shape(x))
    return em.op("where", [mask, picked, x])


@_aten_fn(aten.gather.default)
def _gather(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("gather_elements", [x, em.value(a["index"])],
                 axis=_axis(int(a["dim"]), em.rank(x)))


@_aten_fn(aten.scatter.src, aten.scatter.value, aten.scatter_add.default,
          aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    out = em.type(x).dtype
    updates = a.get("src", a.get("value"))
    idx = em.value(a["index"])
    if _is_python_number(updates):
        updates = _expand_to(em, em.scalar(updates, out), list(em.shape(idx)))  # type: ignore[arg-type]
    target = a.get("__op__")
    reduction = "add" if target is aten.scatter_add.default else {
        None: "none", "add": "add", "multiply": "mul"}.get(a.get("reduce"), "none")
    return em.op("scatter_elements", [x, idx, _operand(em, updates, out)],
                 axis=_axis(int(a["dim"]), em.rank(x)), reduction=reduction)


# scatter_reduce / index_reduce: scatter_elements with a reduction, the data first set to the
# reduction's identity where an update lands if `include_self` is false; mean divides a sum by
# the number of contributions (floor division for integers, as torch does).
_REDUCTIONS = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "add"}


def _identity(reduce: str, dtype: DType) -> float | int:
    if reduce in ("amax", "amin"):
        info: Any = np.finfo(dtype.numpy) if dtype.is_float else np.iinfo(dtype.numpy)
        if dtype.is_float:
            return -np.inf if reduce == "amax" else np.inf
        return int(info.min) if reduce == "amax" else int(info.max)
    return 1 if reduce == "prod" else 0


def _scatter_reduce_values(em: Emitter, x: Value, axis: int, idx: Value, src: Value,
                           reduce: str, include_self: bool) -> Value:
    dtype = em.type(x).dtype
    if reduce not in _REDUCTIONS:
        raise Unsupported(f"scatter reduction {reduce!r}")
    if dtype == DType.BOOL or not (dtype.is_float or dtype.is_integer):
        raise Unsupported(f"scatter reduction {reduce} of {dtype.name}")
    src = em.cast(src, dtype)
    count = None
    if reduce == "mean" or not include_self:
        zeros = em.op("full", [], shape=em.static_shape(x), value=0, dtype=dtype)
        ones = em.op("full", [], shape=em.static_shape(src), value=1, dtype=dtype)
        count = em.op("scatter_elements", [zeros, idx, ones], axis=axis, reduction="add")
    base = x
    if not include_self:
        assert count is not None
        touched = em.op("greater", [count, em.scalar(0, dtype)])
        base = em.op("where", [touched, em.scalar(_identity(reduce, dtype), dtype), x])
    y = em.op("scatter_elements", [base, idx, src], axis=axis, reduction=_REDUCTIONS[reduce])
    if reduce != "mean":
        return y
    assert count is not None
    one = em.scalar(1, dtype)
    count = (em.op("add", [count, one]) if include_self
             else em.op("maximum", [count, one]))  # untouched: x / 1
    return em.op("div" if dtype.is_float else "floor_div", [y, count])


@_aten_fn(aten.scatter_reduce.two, _op("scatter_reduce_", "two"))
def _scatter_reduce(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    if em.rank(x) == 0:
        raise Unsupported("scatter_reduce of a 0-d tensor")
    return _scatter_reduce_values(em, x, _axis(int(a["dim"]), em.rank(x)),
                                  em.value(a["index"]), em.value(a["src"]), str(a["reduce"]),
                                  bool(a["include_self"]))


@_aten_fn(aten.index_reduce.default, _op("index_reduce_"))
def _index_reduce(em: Emitter, a: Args) -> Value:
    """x[..., index[i], ...] reduced with source[..., i, ...] along `dim`: a scatter with the
    1-d index spread over the source's shape. 0-d operands act as 1-element vectors."""
    x, source, index = em.value(a["self"]), em.value(a["source"]), em.value(a["index"])
    scalar = em.rank(x) == 0
    if scalar:
        x = em.op("reshape", [x], shape=(1,))
        source = em.op("reshape", [source], shape=(1,))
    rank = em.rank(x)
    axis = _axis(int(a["dim"]), rank)
    src_shape = em.static_shape(source)
    along = [1] * rank
    along[axis] = src_shape[axis]
    idx = em.op("expand", [em.op("reshape", [index], shape=tuple(along))], shape=src_shape)
    y = _scatter_reduce_values(em, x, axis, idx, source, str(a["reduce"]),
                               bool(a["include_self"]))
    return em.op("reshape", [y], shape=()) if scalar else y


@_aten_fn(aten.index_put.default, aten.index_put_.default, _op("_unsafe_index_put"),
          _op("_index_put_impl_"), _op("_index_put_impl"))
def _index_put(em: Emitter, a: Args) -> Value:
    """x[indices] = values (or += with accumulate): the registry's index_put, the index
    tensors placed on the axes they start at (a bool mask spans its rank of axes)."""
    x = em.value(a["self"])
    values = em.value(a["values"])
    dtype = em.type(x).dtype
    if em.type(values).dtype != dtype:
        values = em.cast(values, dtype)
    axes: list[int] = []
    tensors: list[Value] = []
    axis = 0
    for index in a["indices"]:
        if index is None:
            axis += 1
            continue
        v = em.value(index)
        axes.append(axis)
        tensors.append(v)
        rank = len(em.shape(v))
        axis += rank if em.type(v).dtype == DType.BOOL else 1
    if not tensors:
        raise Unsupported("index_put without index tensors")
    accumulate = bool(a.get("accumulate", False))
    if em.rank(x) == 1 and len(tensors) == 1 and em.rank(tensors[0]) == 1 \
            and em.type(tensors[0]).dtype.is_integer and em.rank(values) <= 1:
        # a vector written at a vector of positions (a MoE router's inverse permutation,
        # `inv[perm] = arange`) is a scatter_elements, which every exporter lowers
        index = tensors[0]
        if em.shape(values) != em.shape(index):
            values = _expand_to(em, values, em.shape(index))
        return em.op("scatter_elements", [x, index, values], axis=0,
                     reduction="add" if accumulate else "none")
    return em.op("index_put", [x, values, *tensors], index_axes=axes, accumulate=accumulate)


@_aten_fn(aten.index.Tensor, _op("_unsafe_index", "Tensor"))
def _index(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    indices = list(a["indices"])
    used = [i for i, t in enumerate(indices) if t is not None]
    if not used:
        return x
    values = [em.value(indices[i]) for i in used]
    if any(em.type(v).dtype == DType.BOOL for v in values):
        raise Unsupported("boolean mask indexing (data-dependent shape)")
    if used != list(range(used[0], used[0] + len(used))):
        raise Unsupported("advanced indexing over non-adjacent dims")
    first = used[0]
    if len(values) == 1:
        return em.op("gather", [x, values[0]], axis=first)
    # several adjacent index tensors: merge the indexed dims and combine the indices
    flat_index: Value | None = None
    for v, dim in zip(values, used, strict=True):
        v = em.cast(v, DType.INT64)
        size = em.size_of(x, dim)
        size_v = em.value(size, DType.INT64)
        v = em.op("where", [em.op("less", [v, em.scalar(0, DType.INT64)]),
                            em.op("add", [v, size_v]), v])
        flat_index = v if flat_index is None else em.op(
            "add", [em.op("mul", [flat_index, size_v]), v])
    merged = em.op("flatten", [x], start_axis=first, end_axis=first + len(used) - 1)
    shape = em.shape(x)
    em.set_shape(merged, (*shape[:first], em.lowerer.owner.product_dim(
        shape[first:first + len(used)]), *shape[first + len(used):]))
    assert flat_index is not None
    return em.op("gather", [merged, flat_index], axis=first)


@_aten_fn(aten.embedding.default)
def _embedding(em: Emitter, a: Args) -> Value:
    return em.op("embedding", [em.value(a["weight"]), em.value(a["indices"])])


@_aten_fn(aten.embedding_bag.default, aten.embedding_bag.padding_idx,
          aten._embedding_bag_forward_only.default, aten._embedding_bag.default)
def _embedding_bag(em: Emitter, a: Args) -> Any:
    """Bags of embedding rows reduced by sum, mean or max (F.embedding_bag): the rows
    gathered (times per_sample_weights), each scattered onto its bag, the bag of index j
    being the number of offsets <= j, less one. Rows equal to padding_idx are left out; an
    empty bag is 0. Only the first result (the bags) lowers."""
    weight, indices = em.value(a["weight"]), em.value(a["indices"])
    if em.rank(indices) != 1:
        raise Unsupported("embedding_bag with 2-d indices")
    mode = int(a["mode"])
    dtype = em.type(weight).dtype
    n = em.static_shape(indices)[0]
    dim = em.static_shape(weight)[1]
    offsets = em.value(a["offsets"])
    bags = em.static_shape(offsets)[0] - (1 if a["include_last_offset"] else 0)
    rows = em.op("gather", [weight, indices], axis=0)  # (n, dim)
    if a["per_sample_weights"] is not None:
        rows = em.op("mul", [rows, em.op("unsqueeze", [em.value(a["per_sample_weights"])],
                                         axes=(1,))])
    position = em.const(np.arange(n, dtype=np.int64)[:, None], DType.INT64)
    started = em.op("less_equal", [em.op("unsqueeze", [em.cast(offsets, DType.INT64)],
                                         axes=(0,)), position])
    bag = em.op("sub", [em.op("reduce_sum", [em.cast(started, DType.INT64)], axes=(1,),
                               keepdims=False), em.scalar(1, DType.INT64)])
    if a["include_last_offset"] and mode == 2:
        # torch's CPU max kernel runs the last bag to the end of the indices (sum and mean
        # stop at the last offset)
        bag = em.op("minimum", [bag, em.scalar(bags - 1, DType.INT64)])
    keep = em.op("less", [bag, em.scalar(bags, DType.INT64)])  # past the last bag: dropped
    padding = a.get("padding_idx")
    if padding is not None and int(padding) >= 0:
        keep = em.op("logical_and", [keep, em.op("not_equal", [
            em.cast(indices, DType.INT64), em.scalar(int(padding), DType.INT64)])])
    bag = em.op("where", [keep, bag, em.scalar(bags, DType.INT64)])  # a spare bag row
    spread = em.op("expand", [em.op("unsqueeze", [bag], axes=(1,))], shape=(n, dim))
    reduction = {0: "add", 1: "add", 2: "max"}.get(mode)
    if reduction is None:
        raise Unsupported(f"embedding_bag mode {mode}")
    start = -math.inf if mode == 2 else 0.0
    base = em.op("full", [], shape=(bags + 1, dim), value=start, dtype=dtype)
    total = em.op("slice", [em.op("scatter_elements", [base, spread, rows], axis=0,
                                  reduction=reduction)], starts=(0,), ends=(bags,), axes=(0,))
    counts = em.op("scatter_elements", [em.op("full", [], shape=(bags + 1,), value=0.0,
                                              dtype=dtype),
                                        bag, em.op("full", [], shape=(n,), value=1.0,
                                                   dtype=dtype)], axis=0, reduction="add")
    counts = em.op("unsqueeze", [em.op("slice", [counts], starts=(0,), ends=(bags,),
                                       axes=(0,))], axes=(1,))
    if mode == 1:
        total = em.op("div", [total, em.op("maximum", [counts, em.scalar(1.0, dtype)])])
    elif mode == 2:
        empty = em.op("equal", [counts, em.scalar(0.0, dtype)])
        total = em.op("where", [empty, em.scalar(0.0, dtype), total])
    rest = [Deferred(lambda: _unsupported_result("embedding_bag offset2bag / bag_size / "
                                                 "max_indices")) for _ in range(3)]
    return (total, *rest)


def _unsupported_result(what: str) -> Value:
    raise Unsupported(what)


@_aten_fn(_op("tensor_split", "tensor_indices_or_sections"))
def _tensor_split_at(em: Emitter, a: Args) -> list[Value]:
    """tensor_split at the positions a 1-D int tensor holds (known at run time only):
    piece j is x[idx[j-1]:idx[j]] along dim (Python slicing: negative positions count
    from the back, bounds clamp, a backward pair gives an empty piece). Each piece's
    length is a SymDim from 0 to the dim's size."""
    x, where = em.value(a["self"]), em.value(a["tensor_indices_or_sections"])
    if em.rank(where) != 1:
        raise Unsupported("tensor_split into a tensor number of sections")
    count = em.static_shape(where)[0]
    axis = _axis(int(a.get("dim", 0)), em.rank(x))
    where = em.cast(where, DType.INT64)
    size = em.shape(x)[axis]
    bound = size if isinstance(size, int) else size.max if isinstance(size, SymDim) else None
    axes = em.const(np.array([axis], np.int64))
    cuts = [em.const(np.zeros(1, np.int64))]
    cuts += [em.op("slice", [where], starts=(j,), ends=(j + 1,), axes=(0,))
             for j in range(count)]
    cuts.append(em.const(np.array([INT64_MAX], np.int64)))
    pieces = []
    for start, end in itertools.pairwise(cuts):
        piece = em.op("slice", [x, start, end, axes])
        shape = list(em.shape(piece))
        shape[axis] = SymDim(f"{piece.name}_n", 0, bound)
        pieces.append(em.set_shape(piece, shape))
    return pieces


# fx and Dynamo: positions in a tensor take the handler above; ints and lists of ints fall
# through it (Unsupported) to the re-trace, which specialises them
for _split_target in (torch.tensor_split, "tensor_split"):
    _alias(_split_target, _op("tensor_split", "tensor_indices_or_sections"))


@_aten_fn(_op("nonzero_static"))
def _nonzero_static(em: Emitter, a: Args) -> Value:
    """The coordinates of the first `size` nonzero elements (row-major), rows past the
    count filled with fill_value: the k-th nonzero's constant coordinates are scattered to
    row k (k from a cumsum of the mask), the rest to a spare row that is dropped."""
    x = em.value(a["self"])
    size, fill = int(a["size"]), int(a["fill_value"])
    shape = em.static_shape(x)
    rank, count = len(shape), int(np.prod(shape, dtype=np.int64))
    if size == 0 or rank == 0:
        if rank == 0 and size > 0:
            raise Unsupported("nonzero_static of a 0-d tensor")
        return em.op("full", [], shape=(size, rank), value=fill, dtype=DType.INT64)
    flat = em.op("reshape", [em.cast(x, DType.BOOL)], shape=(-1,))
    rank_of = em.op("sub", [em.op("cumsum", [em.cast(flat, DType.INT64)], axis=0),
                            em.scalar(1, DType.INT64)])
    keep = em.op("logical_and", [flat, em.op("less", [rank_of, em.scalar(size, DType.INT64)])])
    row = em.op("where", [keep, rank_of, em.scalar(size, DType.INT64)])
    coords = np.stack(np.unravel_index(np.arange(count), shape), axis=1).astype(np.int64)
    spread = em.op("expand", [em.op("unsqueeze", [row], axes=(1,))], shape=(count, rank))
    table = em.op("full", [], shape=(size + 1, rank), value=fill, dtype=DType.INT64)
    table = em.op("scatter_elements", [table, spread, em.const(coords, DType.INT64)], axis=0)
    return em.op("slice", [table], starts=(0,), ends=(size,), axes=(0,))


def _storage_positions(em: Emitter, a: Args) -> tuple[np.ndarray, tuple[int, ...]]:
    """Flat positions in `self`'s storage that as_strided(size, stride, storage_offset)
    reads, and the permutation of `self`'s dims that lays its elements out in storage
    order (`reshape(permute(self, order), -1)` is the storage). Known only when `self`'s
    example value is its whole storage, densely, in some dim order (contiguous, or a
    transposed or permuted view of a contiguous tensor, as Longformer's chunking reads);
    else Unsupported: the IR has no elements outside the view."""
    from ..lower import LAYOUT_UNKNOWN, example_value

    node = em.node.args[0] if em.node is not None and em.node.args else None
    example = example_value(node) if isinstance(node, torch.fx.Node) else None
    if isinstance(node, torch.fx.Node) and node.op != "placeholder" \
            and em.gm is not None and em.gm.meta.get(LAYOUT_UNKNOWN):
        example = None   # what it views is not known (a re-trace's make_fx values)
    order = _storage_order(example) if isinstance(example, torch.Tensor) else None
    if order is None:
        raise Unsupported("as_strided of a tensor that is not its whole storage, densely")
    assert isinstance(example, torch.Tensor)
    sizes, strides = [int(v) for v in a["size"]], [int(v) for v in a["stride"]]
    offset = int(a.get("storage_offset") or 0)
    positions = np.full(sizes, offset, np.int64)
    for axis, (n, step) in enumerate(zip(sizes, strides, strict=True)):
        shape = [1] * len(sizes)
        shape[axis] = n
        positions = positions + (np.arange(n, dtype=np.int64) * step).reshape(shape)
    if positions.size == 0 or positions.min() < 0 or positions.max() >= example.numel():
        raise Unsupported("as_strided outside its input or empty")
    return positions, order


def _storage_order(example: torch.Tensor) -> tuple[int, ...] | None:
    """The dims of `example` from the largest stride to the smallest when its elements
    fill its storage exactly once from offset 0 (dense, non-overlapping), else None."""
    try:
        sizes = [int(d) for d in example.shape]
        strides = [int(d) for d in example.stride()]
        if example.storage_offset() != 0 or example.untyped_storage().nbytes() \
                != example.numel() * example.element_size():
            return None
    except (RuntimeError, TypeError, NotImplementedError):  # symbolic or storage-less
        return None
    # size-1 dims step nowhere: they go last, in their own order (a stable sort)
    order = tuple(sorted(range(len(sizes)), key=lambda d: (sizes[d] == 1, -strides[d])))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def _storage(em: Emitter, x: Value, order: tuple[int, ...]) -> Value:
    """`x`'s elements in storage order, flat."""
    if order != tuple(range(len(order))):
        x = em.op("permute", [x], perm=order)
    return em.op("reshape", [x], shape=(-1,))


@_aten_fn(aten.as_strided.default, _op("as_strided_copy"), _op("as_strided_"))
def _as_strided(em: Emitter, a: Args) -> Value:
    """A strided view of a tensor that is its whole storage: a gather of constant flat
    positions from its elements in storage order."""
    positions, order = _storage_positions(em, a)
    flat = _storage(em, em.value(a["self"]), order)
    return em.op("gather", [flat, em.const(positions, DType.INT64)], axis=0)


@_aten_fn(_op("as_strided_scatter"))
def _as_strided_scatter(em: Emitter, a: Args) -> Value:
    """self with the strided view's elements replaced by src (positions in self's storage
    order, which the result keeps, as torch's clone of self does)."""
    positions, order = _storage_positions(em, a)
    x = em.value(a["self"])
    flat = _storage(em, x, order)
    src = em.op("reshape", [em.cast(em.value(a["src"]), em.type(x).dtype)], shape=(-1,))
    y = em.op("scatter_elements", [flat, em.const(positions.reshape(-1), DType.INT64), src],
              axis=0)
    shape = em.static_shape(x)
    y = em.op("reshape", [y], shape=tuple(shape[d] for d in order))
    if order != tuple(range(len(order))):
        y = em.op("permute", [y], perm=tuple(int(i) for i in np.argsort(order)))
    return y


@_aten_fn(aten.combinations.default)
def _combinations(em: Emitter, a: Args) -> Value:
    """Every r-combination of a 1-d tensor's elements (itertools order), as rows: a gather
    with a constant index table."""
    x = em.value(a["self"])
    if em.rank(x) != 1:
        raise Unsupported("combinations of a tensor that is not 1-d")
    n, r = em.static_shape(x)[0], int(a["r"])
    pick = (itertools.combinations_with_replacement if a["with_replacement"]
            else itertools.combinations)
    table = np.array(list(pick(range(n), r)), np.int64).reshape(-1, r)
    if r == 0 or table.shape[0] == 0:
        shape = (0,) if r == 0 else (0, r)
        return em.op("full", [], shape=shape, value=0, dtype=em.type(x).dtype)
    return em.op("gather", [x, em.const(table, DType.INT64)], axis=0)


@_aten_fn(aten.repeat.default)
def _repeat(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    repeats = [int(r) for r in a["repeats"]]
    rank = em.rank(x)
    if len(repeats) > rank:
        x = em.op("reshape", [x], shape=(*([1] * (len(repeats) - rank)), *em.static_shape(x)))
    return em.op("tile", [x], repeats=tuple(repeats))


@_aten_fn(aten.constant_pad_nd.default)
def _constant_pad(em: Emitter, a: Args) -> Value:
    return pad(em, a["self"], a["pad"], "constant", a["value"])


@_aten_fn(aten.pad.default)
def _pad(em: Emitter, a: Args) -> Value:
    mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
            "circular": "wrap"}.get(str(a["mode"]))
    if mode is None:
        raise Unsupported(f"pad mode {a['mode']!r}")
    return pad(em, a["self"], a["pad"], mode, a["value"])


def pad(em: Emitter, x: Any, torch_pads: Sequence[int], mode: str, value: Any) -> Value:
    xv = em.value(x)
    rank = em.rank(xv)
    pads = [int(p) for p in torch_pads]
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pads) // 2):
        dim = rank - 1 - i
        begins[dim], ends[dim] = pads[2 * i], pads[2 * i + 1]
    if not any(begins) and not any(ends):
        return xv
    return em.op("pad", [xv], pads=tuple(begins + ends), mode=mode,
                 value=float(value) if value is not None else 0.0)


def _pad_mode(mode: str, spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return pad(em, a["self"], a["padding"], mode, 0.0)
    return fn


for _sp in (1, 2, 3):
    _aten_fn(_op(f"reflection_pad{_sp}d"))(_pad_mode("reflect", _sp))
    _aten_fn(_op(f"replication_pad{_sp}d"))(_pad_mode("edge", _sp))


@_aten_fn(aten.tril.default, aten.triu.default, _op("tril_"), _op("triu_"))
def _trilu(em: Emitter, a: Args) -> Value:
    upper = a.get("__op__") in (aten.triu.default, _op("triu_"))
    return em.op("trilu", [em.value(a["self"])], upper=upper, k=int(a["diagonal"]))


@_aten_fn(aten.diagonal.default, _op("diagonal_copy"))
def _diagonal(em: Emitter, a: Args) -> Value:
    """torch.diagonal as exact data movement: move dim1, dim2 last, flatten them to n1 * n2
    and take every (n2 + 1)-th element from the first diagonal entry (a strided slice)."""
    x = em.value(a["self"])
    rank = em.rank(x)
    offset = int(a.get("offset", 0) or 0)
    d1 = _axis(int(a.get("dim1", 0)), rank)
    d2 = _axis(int(a.get("dim2", 1)), rank)
    if d1 == d2:
        raise Unsupported(f"diagonal with dim1 == dim2 ({d1})")
    shape = em.static_shape(x)
    n1, n2 = shape[d1], shape[d2]
    rest = [d for d in range(rank) if d not in (d1, d2)]
    if [*rest, d1, d2] != list(range(rank)):
        x = em.op("permute", [x], perm=(*rest, d1, d2))
    flat = em.op("reshape", [x], shape=(*(shape[d] for d in rest), n1 * n2))
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    start = offset if offset >= 0 else -offset * n2
    step = n2 + 1
    end = start + (length - 1) * step + 1 if length else start
    return em.op("slice", [flat], starts=(start,), ends=(end,), axes=(rank - 2,),
                 steps=(step,))


@_aten_fn(aten.diagonal_scatter.default)
def _diagonal_scatter(em: Emitter, a: Args) -> Value:
    """torch.diagonal_scatter: the inverse of _diagonal's layout (dim1, dim2 last, flattened)
    with the diagonal's flat positions written by index_put, then the layout undone."""
    x = em.value(a["self"])
    src = em.value(a["src"])
    if em.type(src).dtype != em.type(x).dtype:
        src = em.cast(src, em.type(x).dtype)
    rank = em.rank(x)
    offset = int(a.get("offset", 0) or 0)
    d1 = _axis(int(a.get("dim1", 0)), rank)
    d2 = _axis(int(a.get("dim2", 1)), rank)
    if d1 == d2:
        raise Unsupported(f"diagonal_scatter with dim1 == dim2 ({d1})")
    shape = em.static_shape(x)
    n1, n2 = shape[d1], shape[d2]
    rest = [d for d in range(rank) if d not in (d1, d2)]
    perm = (*rest, d1, d2)
    if list(perm) != list(range(rank)):
        x = em.op("permute", [x], perm=perm)
    flat = em.op("reshape", [x], shape=(*(shape[d] for d in rest), n1 * n2))
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    if length == 0:
        return em.value(a["self"])
    start = offset if offset >= 0 else -offset * n2
    positions = em.const(np.arange(length, dtype=np.int64) * (n2 + 1) + start)
    out = em.op("index_put", [flat, src, positions], index_axes=(rank - 2,),
                accumulate=False)
    out = em.op("reshape", [out], shape=tuple(shape[d] for d in perm))
    if list(perm) != list(range(rank)):
        out = em.op("permute", [out], perm=tuple(int(i) for i in np.argsort(perm)))
    return out


@_aten_fn(aten.flip.default)
def _flip(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    dims = tuple(_axis(int(d), rank) for d in a["dims"])
    if not dims:
        return x
    return em.op("slice", [x], starts=(-1,) * len(dims), ends=(-INT64_MAX,) * len(dims),
                 axes=dims, steps=(-1,) * len(dims))


@_aten_fn(aten.roll.default)
def _roll(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    shifts = [int(s) for s in (a["shifts"] if not isinstance(a["shifts"], int)
                               else [a["shifts"]])]
    dims = a["dims"]
    if not dims:
        raise Unsupported("roll over the flattened tensor")
    dims = [_axis(int(d), em.rank(x)) for d in (dims if not isinstance(dims, int) else [dims])]
    shape = em.shape(x)
    for shift, dim in zip(shifts, dims, strict=True):
        size = shape[dim]
        if not isinstance(size, int):
            raise Unsupported("roll of a symbolic dim")
        s = shift % size
        if s == 0:
            continue
        tail = em.op("slice", [x], starts=(size - s,), ends=(size,), axes=(dim,))
        head = em.op("slice", [x], starts=(0,), ends=(size - s,), axes=(dim,))
        x = em.op("concat", [tail, head], axis=dim)
    return x


@_aten_fn(aten.slice_scatter.default)
def _slice_scatter(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    src = em.cast(em.value(a["src"]), em.type(x).dtype)
    rank = em.rank(x)
    dim = _axis(int(a["dim"]), rank)
    size = em.shape(x)[dim]
    if not isinstance(size, int):
        raise Unsupported("slice_scatter on a symbolic dim")
    start = 0 if a["start"] is None else int(a["start"])
    end = size if a["end"] is None else min(int(a["end"]), size)
    step = int(a["step"] or 1)
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step != 1:
        # strided: scatter the rows start, start+step, ... of `dim`
        src_shape = em.static_shape(src)
        rows = np.arange(start, end, step, dtype=np.int64)
        if len(rows) != src_shape[dim]:
            raise Unsupported("slice_scatter source does not fit the slice")
        index = rows.reshape([-1 if d == dim else 1 for d in range(rank)])
        index = np.broadcast_to(index, src_shape).copy()
        return em.op("scatter_elements", [x, em.const(index, DType.INT64), src], axis=dim)
    parts = []
    if start > 0:
        parts.append(em.op("slice", [x], starts=(0,), ends=(start,), axes=(dim,)))
    parts.append(src)
    if end < size:
        parts.append(em.op("slice", [x], starts=(end,), ends=(size,), axes=(dim,)))
    return parts[0] if len(parts) == 1 else em.op("concat", parts, axis=dim)


@_aten_fn(aten.select_scatter.default)
def _select_scatter(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    src = em.op("unsqueeze", [em.cast(em.value(a["src"]), em.type(x).dtype)], axes=(dim,))
    size = em.shape(x)[dim]
    if not isinstance(size, int):
        raise Unsupported("select_scatter on a symbolic dim")
    index = int(a["index"]) % size
    parts = []
    if index > 0:
        parts.append(em.op("slice", [x], starts=(0,), ends=(index,), axes=(dim,)))
    parts.append(src)
    if index + 1 < size:
        parts.append(em.op("slice", [x], starts=(index + 1,), ends=(size,), axes=(dim,)))
    return parts[0] if len(parts) == 1 else em.op("concat", parts, axis=dim)
