"""operator.* and arithmetic with Python fallbacks, functional entries fx and Dynamo keep
as calls, higher-order ops and optional torchvision functions."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Refused, Sym, Unsupported
from ._base import (
    FUNCTIONS,
    INT64_MAX,
    METHODS,
    Args,
    Handler,
    _alias,
    _aten_fn,
    _axis,
    _binary,
    _compare,
    _fn,
    _is_tensorish,
    _pick,
    _reshape_to,
    aten,
    dropout,
)
from .attention import (
    multi_head_attention,
)
from .creation import (
    _arange,
    _full,
)
from .elementwise import (
    _bitwise_not,
    _divide,
    _pow,
    _scaled,
    bitwise,
    shift,
)
from .linear import bilinear
from .norm import (
    _rms_norm,
    batch_norm,
)
from .pooling import (
    max_pool,
    resize,
)
from .reduction import (
    _max_dim,
    _reduce,
    _softmax_fn,
)
from .shapes import (
    _chunk,
    _index,
    _pad,
    _select_index,
    _sizes_from_meta,
    _split,
    _squeeze,
)

# -- operator.* and arithmetic with Python fallbacks ------------------------------------

_PY_BINARY: list[tuple[Any, str, Any]] = [
    (operator.add, "add", aten.add.Tensor), (operator.iadd, "add", aten.add.Tensor),
    (operator.sub, "sub", aten.sub.Tensor), (operator.isub, "sub", aten.sub.Tensor),
    (operator.mul, "mul", aten.mul.Tensor), (operator.imul, "mul", aten.mul.Tensor),
    (operator.truediv, "div", aten.div.Tensor), (operator.itruediv, "div", aten.div.Tensor),
    (operator.floordiv, "floor_div", aten.floor_divide.default),
    (operator.mod, "mod", aten.remainder.Tensor), (operator.pow, "pow", aten.pow.Tensor_Tensor),
    (operator.matmul, "matmul", aten.matmul.default),
    (operator.eq, "equal", aten.eq.Tensor), (operator.ne, "not_equal", aten.ne.Tensor),
    (operator.lt, "less", aten.lt.Tensor), (operator.le, "less_equal", aten.le.Tensor),
    (operator.gt, "greater", aten.gt.Tensor), (operator.ge, "greater_equal", aten.ge.Tensor),
    (operator.and_, "logical_and", aten.bitwise_and.Tensor),
    (operator.or_, "logical_or", aten.bitwise_or.Tensor),
    (operator.xor, "logical_xor", aten.bitwise_xor.Tensor),
    (operator.iand, "logical_and", aten.bitwise_and.Tensor),
    (operator.ior, "logical_or", aten.bitwise_or.Tensor),
    (operator.ixor, "logical_xor", aten.bitwise_xor.Tensor),
    (operator.lshift, "shift_left", aten.__lshift__.Tensor),
    (operator.ilshift, "shift_left", aten.__lshift__.Tensor),
    (operator.rshift, "shift_right", aten.__rshift__.Tensor),
    (operator.irshift, "shift_right", aten.__rshift__.Tensor),
]


def _symbolic_int_op(em: Emitter, name: str, x: Any, y: Any) -> Sym:
    """Arithmetic on symbolic sizes (i64 scalars); comparisons give a bool scalar."""
    op = {"add": "add", "sub": "sub", "mul": "mul", "floor_div": "floor_div",
          "mod": "mod", "equal": "equal", "not_equal": "not_equal", "less": "less",
          "less_equal": "less_equal", "greater": "greater",
          "greater_equal": "greater_equal"}.get(name)
    if op is None:
        raise Unsupported(f"{name} on symbolic sizes")
    xv = em.cast(em.value(x, DType.INT64), DType.INT64)
    yv = em.cast(em.value(y, DType.INT64), DType.INT64)
    return Sym(em.op(op, [xv, yv]), None)


def _py_binary(name: str, op: Any) -> Handler:
    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x, y = args[0], args[1]
        if not _is_tensorish(x) and not _is_tensorish(y):
            return _fold(em, x, y)
        if isinstance(x, Sym | int) and isinstance(y, Sym | int) and not isinstance(
                em.meta, torch.Tensor):
            if isinstance(em.meta, int):
                return int(em.meta)
            if isinstance(em.meta, torch.SymBool):  # a range check on symbolic sizes
                known = em.lowerer.owner.decide(em.meta)
                if known is not None:
                    return known
            return _symbolic_int_op(em, name, x, y)
        if name == "matmul":
            return em.op("matmul", [em.value(x), em.value(y)])
        if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
            return _compare(em, name, x, y)
        if name.startswith("logical_"):  # & | ^: logical on booleans, else bitwise
            return bitwise(em, name.removeprefix("logical_"), x, y)
        if name.startswith("shift_"):
            return shift(em, name == "shift_left", x, y)
        if name == "div":
            return _divide(em, x, y, None)
        if name == "pow":
            return _pow(em, {"self": x, "exponent": y})
        return _binary(em, name, x, y)
    return handler


def _fold(em: Emitter, *_: Any) -> Any:
    node = em.node
    assert node is not None
    args, kwargs = em.lowerer.map_args(node)
    return node.target(*args, **kwargs)  # type: ignore[operator]


for _target, _name, _ in _PY_BINARY:
    FUNCTIONS[_target] = _py_binary(_name, _target)
for _target, _name, _ in _PY_BINARY:
    if _target in (operator.iadd, operator.isub, operator.imul, operator.itruediv):
        continue
    _method_name = {operator.add: "add", operator.sub: "sub", operator.mul: "mul",
               operator.truediv: "div", operator.floordiv: "floor_divide",
               operator.mod: "remainder", operator.eq: "eq", operator.ne: "ne",
               operator.lt: "lt", operator.le: "le", operator.gt: "gt",
               operator.ge: "ge"}.get(_target)
    if _method_name is not None:
        METHODS[_method_name] = _py_binary(_name, _target)
        METHODS[f"__{_method_name}__"] = _py_binary(_name, _target)
for _inplace, _name in (("add_", "add"), ("sub_", "sub"), ("mul_", "mul"), ("div_", "div"),
                        ("__iand__", "logical_and"), ("__ior__", "logical_or"),
                        ("__ixor__", "logical_xor"), ("bitwise_and_", "logical_and"),
                        ("bitwise_or_", "logical_or"), ("bitwise_xor_", "logical_xor"),
                        ("__ilshift__", "shift_left"), ("__irshift__", "shift_right"),
                        ("bitwise_left_shift_", "shift_left"),
                        ("bitwise_right_shift_", "shift_right")):
    METHODS[_inplace] = _py_binary(_name, None)


def _with_alpha(base: Handler) -> Handler:
    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        alpha = kwargs.pop("alpha", None)
        x, y = args[0], _pick(args, kwargs, 1, "other")
        if alpha is not None and alpha != 1:
            y = _scaled(em, y, alpha, em.out_dtype())
        return base(em, (x, y), {})
    return handler


for _torch_fn, _n in ((torch.add, "add"), (torch.sub, "sub"), (torch.subtract, "sub")):
    FUNCTIONS[_torch_fn] = _with_alpha(_py_binary(_n, _torch_fn))
METHODS["add"] = _with_alpha(_py_binary("add", None))
METHODS["sub"] = _with_alpha(_py_binary("sub", None))
METHODS["add_"] = _with_alpha(_py_binary("add", None))
METHODS["sub_"] = _with_alpha(_py_binary("sub", None))
_TORCH_BINARY: list[tuple[Any, str]] = [
    (torch.mul, "mul"), (torch.multiply, "mul"), (torch.eq, "equal"),
    (torch.ne, "not_equal"), (torch.lt, "less"), (torch.le, "less_equal"),
    (torch.gt, "greater"), (torch.ge, "greater_equal"),
    (torch.floor_divide, "floor_div"), (torch.remainder, "mod")]
for _binary_fn, _n in _TORCH_BINARY:
    FUNCTIONS[_binary_fn] = _py_binary(_n, _binary_fn)


@_fn(torch.div, torch.divide, torch.true_divide, "div", "divide", "true_divide", "div_")
def _torch_div(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x, y = args[0], _pick(args, kwargs, 1, "other")
    mode = kwargs.get("rounding_mode")
    if not _is_tensorish(x) and not _is_tensorish(y):
        return _fold(em)
    return _divide(em, x, y, mode)


@_fn(operator.neg, "__neg__")
def _py_neg(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not _is_tensorish(x):
        return -x
    if isinstance(x, Sym):
        return Sym(em.op("neg", [x.value]), None)
    return em.op("neg", [em.value(x)])


@_fn(operator.invert, "__invert__", "bitwise_not", torch.bitwise_not)
def _py_invert(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not _is_tensorish(x):
        return ~x
    return _bitwise_not(em, {"self": x})


@_fn(operator.not_, operator.truth, operator.is_, operator.is_not, operator.contains, len,
     abs, min, max, int, float, bool, math.ceil, math.floor, math.sqrt, operator.index,
     torch._assert, torch.fx._symbolic_trace._assert_is_none, isinstance, hasattr,
     torch._C._get_tracing_state)
def _python_only(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    flat = list(args) + list(kwargs.values())
    if any(_is_tensorish(x) for x in flat):
        if em.node is not None and em.node.target is abs and isinstance(args[0], Value):
            return em.op("abs", [args[0]])
        raise Unsupported("a Python builtin applied to a tensor")
    return _fold(em)


@_fn(operator.getitem)
def _getitem(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    container, index = args[0], args[1]
    if isinstance(container, Value):
        return tensor_getitem(em, container, index)
    if isinstance(container, Deferred):
        container = container.resolve()
    if isinstance(container, Value):
        return tensor_getitem(em, container, index)
    result = container[index]
    return result


def tensor_getitem(em: Emitter, x: Value, index: Any) -> Value:
    """x[index] for ints, slices, None, Ellipsis and one integer index tensor."""
    items = list(index) if isinstance(index, tuple) else [index]
    rank = em.rank(x)
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if any(i is Ellipsis for i in items):
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items = items[:at] + [slice(None)] * (rank - used) + items[at + 1:]
    items += [slice(None)] * (rank - sum(1 for i in items if i is not None))
    tensor_dims = [k for k, i in enumerate(items) if isinstance(i, Value)]
    if len(tensor_dims) > 1:
        if all(isinstance(i, Value) or i == slice(None) for i in items):
            return _index(em, {"self": x, "indices": [i if isinstance(i, Value) else None
                                                      for i in items]})
        raise Unsupported("indexing with several tensors")
    y = x
    dim = 0
    squeeze: list[int] = []
    unsqueeze: list[int] = []
    out_dim = 0
    for item in items:
        if item is None:
            unsqueeze.append(out_dim)
            out_dim += 1
            continue
        if isinstance(item, Sym):
            raise Unsupported("indexing with a symbolic int")
        if isinstance(item, bool):
            raise Unsupported("boolean index")
        if isinstance(item, int):
            y = _select_index(em, y, dim, int(item))
            continue
        if isinstance(item, slice):
            start, stop, step = item.start, item.stop, item.step
            if any(isinstance(v, Sym | Value) for v in (start, stop, step)):
                raise Unsupported("slice with symbolic bounds")
            if not (start in (None, 0) and stop is None and step in (None, 1)):
                y = em.op("slice", [y], starts=(0 if start is None else int(start),),
                          ends=(INT64_MAX if stop is None else int(stop),), axes=(dim,),
                          steps=(1 if step is None else int(step),))
            dim += 1
            out_dim += 1
            continue
        if isinstance(item, Value):
            if em.type(item).dtype == DType.BOOL:
                raise Unsupported("boolean mask indexing")
            y = em.op("gather", [y, item], axis=dim)
            extra = em.rank(item)
            dim += extra
            out_dim += extra
            continue
        raise Unsupported(f"index of type {type(item).__name__}")
    del squeeze
    if unsqueeze:
        y = em.op("unsqueeze", [y], axes=tuple(unsqueeze))
    return y


@_fn(getattr)
def _getattr(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    obj, name = args[0], args[1]
    if isinstance(obj, Value):
        meta = em.meta
        if name == "shape":
            return _shape_tuple(em, obj)
        if name in ("dtype", "device", "is_cuda", "requires_grad", "layout", "ndim"):
            if name == "ndim":
                return em.rank(obj)
            source = em.node.args[0] if em.node is not None else None
            from ..lower import example_value

            example = example_value(source) if isinstance(source, torch.fx.Node) else None
            if isinstance(example, torch.Tensor):
                return getattr(example, name)
            return meta
        if name in ("T", "mT"):
            rank = em.rank(obj)
            perm = tuple(reversed(range(rank))) if name == "T" else (
                *range(rank - 2), rank - 1, rank - 2)
            return em.op("permute", [obj], perm=perm)
        raise Unsupported(f"tensor attribute {name!r}")
    if len(args) > 2:
        return getattr(obj, name, args[2])
    return getattr(obj, name)


def _shape_tuple(em: Emitter, x: Value) -> Any:
    shape = em.shape(x)
    dims: list[Any] = []
    for i, d in enumerate(shape):
        dims.append(d if isinstance(d, int) else em.size_of(x, i))
    return torch.Size(dims) if all(isinstance(d, int) for d in dims) else tuple(dims)


@_fn("size")
def _size(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    dim = _pick(args, kwargs, 1, "dim")
    meta = em.meta
    if isinstance(meta, int) and dim is not None:
        return meta
    if dim is None:
        if isinstance(meta, torch.Size) and all(isinstance(d, int) for d in meta):
            return meta
        return _shape_tuple(em, x)
    return em.size_of(x, _axis(int(dim), em.rank(x)))


@_fn("dim", "ndimension")
def _dim(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.rank(args[0])


@_fn("numel", torch.numel)
def _numel(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if isinstance(em.meta, int):
        return em.meta
    raise Unsupported("numel of a symbolic shape")


@_fn("contiguous", "detach", "cpu", "clone", "requires_grad_", "cuda")
def _method_identity(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.value(args[0])


@_fn("to", "type", "float", "half", "double", "long", "int", "bool", "bfloat16", "short",
     "char", "byte")
def _method_cast(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not isinstance(x, Value):
        raise Unsupported("cast of a non-tensor")
    if not isinstance(em.meta, torch.Tensor):
        raise Unsupported("cast without an example output")
    return em.cast(x, em.out_dtype())


@_fn("view_as", "reshape_as")
def _view_as(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(args[0])
    other = em.value(_pick(args, kwargs, 1, "other"))
    shape = em.shape(other)
    dims = [d if isinstance(d, int) else em.size_of(other, i) for i, d in enumerate(shape)]
    return _reshape_to(em, x, dims)


@_fn("split", torch.split)
def _py_split(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(args[0])
    sizes = _pick(args, kwargs, 1, "split_size_or_sections",
                  kwargs.get("split_size", kwargs.get("split_sizes")))
    dim = int(_pick(args, kwargs, 2, "dim", 0))
    axis = _axis(dim, em.rank(x))
    if isinstance(sizes, int):
        return _split(em, {"self": x, "split_size": sizes, "dim": axis})
    return _split(em, {"self": x, "split_sizes": list(sizes), "dim": axis})


@_fn("chunk", torch.chunk)
def _py_chunk(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _chunk(em, {"self": em.value(args[0]),
                       "chunks": int(_pick(args, kwargs, 1, "chunks")),
                       "dim": int(_pick(args, kwargs, 2, "dim", 0))})


@_fn("squeeze", torch.squeeze)
def _py_squeeze(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    dim = _pick(args, kwargs, 1, "dim")
    return _squeeze(em, {"self": args[0], "dim": dim})


def _py_reduce(name: str) -> Handler:
    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = em.value(args[0])
        dim = _pick(args, kwargs, 1, "dim")
        keep = bool(_pick(args, kwargs, 2, "keepdim", False))
        dtype = kwargs.get("dtype")
        return _reduce(name)(em, {"self": x, "dim": dim, "keepdim": keep, "dtype": dtype})
    return handler


for _names, _red in (((torch.sum, "sum"), "reduce_sum"), ((torch.mean, "mean"), "reduce_mean"),
                     ((torch.prod, "prod"), "reduce_prod")):
    for _reducer in _names:
        if isinstance(_reducer, str):
            METHODS[_reducer] = _py_reduce(_red)
        else:
            FUNCTIONS[_reducer] = _py_reduce(_red)


def _py_max(kind: str) -> Handler:
    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = args[0]
        other = _pick(args, kwargs, 1, "dim")
        if isinstance(other, Value):
            return _binary(em, "maximum" if kind == "max" else "minimum", x, other)
        if other is None:
            return em.op("reduce_max" if kind == "max" else "reduce_min", [em.value(x)],
                         axes=(), keepdims=False)
        keep = bool(_pick(args, kwargs, 2, "keepdim", False))
        fn = _max_dim("reduce_max" if kind == "max" else "reduce_min",
                      "argmax" if kind == "max" else "argmin")
        values, indices = fn(em, {"self": x, "dim": other, "keepdim": keep})
        return torch.return_types.max((values, indices)) if kind == "max" else \
            torch.return_types.min((values, indices))
    return handler


FUNCTIONS[torch.max] = METHODS["max"] = _py_max("max")
FUNCTIONS[torch.min] = METHODS["min"] = _py_max("min")


@_fn(F.relu, F.relu6, F.silu, F.hardswish, F.hardsigmoid, F.mish, F.sigmoid, F.tanh, F.elu,
     F.leaky_relu, F.softplus, F.relu_)
def _py_activation(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    target = em.node.target if em.node is not None else None
    x = em.value(args[0] if args else kwargs["input"])
    if target in (F.relu, F.relu_):
        return em.op("relu", [x])
    if target is F.relu6:
        return em.op("clip", [x], min=0.0, max=6.0)
    if target is F.silu:
        return em.op("silu", [x])
    if target is F.hardswish:
        return em.op("hardswish", [x])
    if target is F.hardsigmoid:
        return em.op("hardsigmoid", [x], alpha=1 / 6, beta=0.5)
    if target is F.mish:
        return em.op("mish", [x])
    if target is F.sigmoid:
        return em.op("sigmoid", [x])
    if target is F.tanh:
        return em.op("tanh", [x])
    if target is F.elu:
        return em.op("elu", [x], alpha=float(_pick(args, kwargs, 1, "alpha", 1.0)))
    if target is F.leaky_relu:
        return em.op("leaky_relu", [x],
                     alpha=float(_pick(args, kwargs, 1, "negative_slope", 0.01)))
    if target is F.softplus:
        return em.op("softplus", [x], beta=float(_pick(args, kwargs, 1, "beta", 1.0)),
                     threshold=float(_pick(args, kwargs, 2, "threshold", 20.0)))
    raise Unsupported("activation")


@_fn(F.softmax, F.log_softmax, "softmax", "log_softmax")
def _py_softmax(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    target = em.node.target if em.node is not None else None
    x = em.value(args[0] if args else kwargs["input"])
    dim = _pick(args, kwargs, 1, "dim")
    if dim is None:
        raise Unsupported("softmax without dim")
    name = "log_softmax" if target in (F.log_softmax, "log_softmax") else "softmax"
    return _softmax_fn(name)(em, {"self": x, "dim": dim})


@_fn(F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
     F.feature_alpha_dropout, torch.dropout)
def _py_dropout(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ("input", "p", "train" if em.node is not None and em.node.target is torch.dropout
             else "training")
    a = {**dict(zip(names, args, strict=False)), **kwargs}
    return dropout(em, a["input"], a.get("p", 0.5), a.get(names[2], True))


@_fn(F.batch_norm)
def _py_batch_norm(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["input", "running_mean", "running_var", "weight", "bias", "training",
             "momentum", "eps"]
    defaults = {"weight": None, "bias": None, "training": False, "momentum": 0.1,
                "eps": 1e-5}
    a = {n: _pick(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])[0]


@_fn(F.rms_norm)
def _py_rms_norm(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["input", "normalized_shape", "weight", "eps"]
    a = {n: _pick(args, kwargs, i, n) for i, n in enumerate(names)}
    return _rms_norm(em, a)


@_fn(F.max_pool1d, F.max_pool2d, F.max_pool3d)
def _py_max_pool(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
             "return_indices"]
    defaults: dict[str, Any] = {"stride": None, "padding": 0, "dilation": 1,
                                "ceil_mode": False, "return_indices": False}
    a = {n: _pick(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    if a["return_indices"]:
        raise Unsupported("max pool indices")
    spatial = {F.max_pool1d: 1, F.max_pool2d: 2, F.max_pool3d: 3}[em.node.target]  # type: ignore[index, union-attr]
    return max_pool(em, a["input"], spatial, a["kernel_size"], a["stride"], a["padding"],
                    a["dilation"], a["ceil_mode"])


@_fn(F.interpolate, F.upsample)
def _py_interpolate(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["input", "size", "scale_factor", "mode", "align_corners",
             "recompute_scale_factor", "antialias"]
    a = {n: _pick(args, kwargs, i, n) for i, n in enumerate(names)}
    if a["antialias"]:
        raise Unsupported("antialiased interpolation")
    # torch maps coordinates with the given scale_factor unless a size is given or the
    # factor is recomputed from the sizes; `resize` takes the sizes from the output then
    scale = None if a["size"] is not None or a["recompute_scale_factor"] else a["scale_factor"]
    return resize(em, a["input"], a["mode"] or "nearest", scale, a["align_corners"])


@_fn(F.embedding)
def _py_embedding(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    indices = _pick(args, kwargs, 0, "input")
    weight = _pick(args, kwargs, 1, "weight")
    if kwargs.get("max_norm") is not None or (len(args) > 3 and args[3] is not None):
        raise Unsupported("embedding with max_norm")
    return em.op("embedding", [em.value(weight), em.value(indices)])


@_fn(F.pad)
def _py_pad(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["input", "pad", "mode", "value"]
    a = {n: _pick(args, kwargs, i, n) for i, n in enumerate(names)}
    a["self"] = a.pop("input")
    a["mode"] = a["mode"] or "constant"
    return _pad(em, a)


@_fn(F.normalize)
def _py_normalize(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(_pick(args, kwargs, 0, "input"))
    p = float(_pick(args, kwargs, 1, "p", 2.0))
    dim = int(_pick(args, kwargs, 2, "dim", 1))
    eps = float(_pick(args, kwargs, 3, "eps", 1e-12))
    if p != 2.0:
        raise Unsupported("normalize with p != 2")
    axis = _axis(dim, em.rank(x))
    norm = em.op("reduce_l2", [x], axes=(axis,), keepdims=True)
    norm = em.op("maximum", [norm, em.scalar(eps, em.type(x).dtype)])
    return em.op("div", [x, norm])


@_fn(torch.arange)
def _py_arange(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    else:
        start = args[0]
        end = args[1]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    if "end" in kwargs:
        end = kwargs["end"]
    if "start" in kwargs:
        start = kwargs["start"]
    return _arange(em, {"start": start, "end": end, "step": step})


@_fn(torch.zeros, torch.ones, torch.full, torch.empty)
def _py_full(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    target = em.node.target if em.node is not None else None
    if target is torch.full:
        sizes, value = _pick(args, kwargs, 0, "size"), _pick(args, kwargs, 1, "fill_value")
    else:
        sizes = args[0] if len(args) == 1 and isinstance(args[0], list | tuple | torch.Size) \
            else list(args)
        sizes = kwargs.get("size", sizes)
        value = 1 if target is torch.ones else 0
    if isinstance(value, Value | Sym):
        raise Unsupported("full with a tensor value")
    return _full(em, _sizes_from_meta(em, list(sizes)), value, em.out_dtype())


@_fn(torch.tensor, torch.as_tensor)
def _py_tensor(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    meta = em.meta
    if isinstance(meta, torch.Tensor):
        from .._util import has_data

        if has_data(meta):
            return em.const_tensor(meta)
    data = args[0] if args else kwargs.get("data")
    leaves = [data] if not isinstance(data, list | tuple) else list(np.asarray(data).ravel())
    if any(_is_tensorish(x) for x in leaves):
        raise Unsupported("torch.tensor of runtime values")
    return em.const(np.asarray(data), em.out_dtype())


@_fn(torch.finfo, torch.iinfo, torch.is_tensor, torch.is_floating_point,
     torch.get_default_dtype, torch.Size, torch._C._has_torch_function,
     torch._C._has_torch_function_unary, torch._C._has_torch_function_variadic,
     torch.is_grad_enabled, torch.is_autocast_enabled)
def _py_query(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if any(_is_tensorish(x) for x in list(args) + list(kwargs.values())):
        target = em.node.target if em.node is not None else None
        if target is torch.is_floating_point and isinstance(args[0], Value):
            return em.type(args[0]).dtype.is_float
        if target is torch.is_tensor:
            return True
        raise Unsupported("a query of a tensor")
    return _fold(em)


def _py_grad_mode(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return None  # autograd state does not change what the graph computes


for _grad_fn in (torch._C._set_grad_enabled,
                 getattr(torch.autograd.grad_mode, "_enter_inference_mode", None),
                 getattr(torch.autograd.grad_mode, "_exit_inference_mode", None)):
    if _grad_fn is not None:
        FUNCTIONS[_grad_fn] = _py_grad_mode


@_fn(F.hardtanh, F.hardtanh_)
def _py_hardtanh(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(_pick(args, kwargs, 0, "input"))
    lo = float(_pick(args, kwargs, 1, "min_val", -1.0))
    hi = float(_pick(args, kwargs, 2, "max_val", 1.0))
    return em.op("clip", [x], min=lo, max=hi)


@_fn(torch._C._log_api_usage_once)
def _py_no_op(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return None


@_fn(F.multi_head_attention_forward)
def _py_mha_forward(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight",
             "in_proj_bias", "bias_k", "bias_v", "add_zero_attn", "dropout_p",
             "out_proj_weight", "out_proj_bias", "training", "key_padding_mask",
             "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
             "k_proj_weight", "v_proj_weight", "static_k", "static_v",
             "average_attn_weights", "is_causal"]
    defaults: dict[str, Any] = {"training": True, "need_weights": True,
                                "use_separate_proj_weight": False,
                                "average_attn_weights": True, "is_causal": False}
    a = {n: _pick(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    if a["bias_k"] is not None or a["add_zero_attn"] or a["static_k"] is not None \
            or a["static_v"] is not None or (a["training"] and a["dropout_p"]):
        raise Unsupported("multi_head_attention_forward with bias_k/zero_attn/static kv/dropout")
    qkv = None
    if a["use_separate_proj_weight"]:
        qkv = [a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"]]
    causal = bool(a["is_causal"]) and a["attn_mask"] is None
    return multi_head_attention(
        em, a["query"], a["key"], a["value"], int(a["embed_dim_to_check"]),
        int(a["num_heads"]), None if qkv else a["in_proj_weight"], a["in_proj_bias"],
        a["out_proj_weight"], a["out_proj_bias"], qkv_weights=qkv,
        key_padding_mask=a["key_padding_mask"], attn_mask=a["attn_mask"],
        need_weights=bool(a["need_weights"]), average_weights=bool(a["average_attn_weights"]),
        batch_first=False, causal=causal)


def _hop(index_of_module: int) -> Handler:
    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sub = args[index_of_module]
        if not isinstance(sub, torch.fx.GraphModule):
            raise Unsupported("higher-order op without a graph module")
        return em.lowerer.inline(sub, args[index_of_module + 1:])
    return handler


for _hop_name, _position in (("wrap_with_set_grad_enabled", 1), ("wrap_with_autocast", 4),
                             ("wrap", 0)):
    _hop_op = getattr(torch.ops.higher_order, _hop_name, None)
    if _hop_op is not None:
        FUNCTIONS[_hop_op] = _hop(_position)


@_fn(F.bilinear, torch.bilinear)
def _py_bilinear(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x1, x2, weight = (em.value(_pick(args, kwargs, i, n, None))
                      for i, n in enumerate(("input1", "input2", "weight")))
    bias = _pick(args, kwargs, 3, "bias", None)
    return bilinear(em, x1, x2, weight, None if bias is None else em.value(bias))


def _shape_in_place(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`y.unsqueeze_(0)` & co. change a tensor's shape in place. Dynamo's example
    values are the tensors after the change (its fake tensors ran the op), so a re-trace
    would apply it twice: refused. fx (real values per node) re-traces it right."""
    if em.lowerer.owner.capture.method == "dynamo":
        node = em.node
        raise Refused(f"{node.name if node is not None else 'a node'}: an in-place shape "
                      f"change ({node.target if node is not None else ''}) in a Dynamo "
                      "graph; use frontend='export' or 'fx'")
    raise Unsupported("in-place shape change")


for _name in ("unsqueeze_", "squeeze_", "transpose_", "t_", "swapaxes_", "swapdims_",
              "resize_", "resize_as_", "as_strided_"):
    METHODS[_name] = _shape_in_place


def _cond(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torch.cond(pred, on_true, on_false, operands): both branches (torch requires them
    to return the same structure, shapes and dtypes, and to have no side effects) computed
    and each output chosen with `where` on the 0-d predicate. A Python bool predicate
    keeps its branch only."""
    pred, on_true, on_false, operands = args[:4]
    if not (isinstance(on_true, torch.fx.GraphModule)
            and isinstance(on_false, torch.fx.GraphModule)):
        raise Unsupported("torch.cond without branch graphs")
    if isinstance(pred, bool):
        return em.lowerer.inline(on_true if pred else on_false, tuple(operands))
    cond = em.value(pred)
    if em.type(cond).dtype != DType.BOOL or em.rank(cond) != 0:
        raise Unsupported("torch.cond predicate that is not a 0-d bool tensor")
    taken, other = (em.lowerer.inline(g, tuple(operands)) for g in (on_true, on_false))
    if not isinstance(taken, tuple | list) or not isinstance(other, tuple | list) \
            or len(taken) != len(other):
        raise Unsupported("torch.cond branches with different outputs")
    return tuple(em.op("where", [cond, em.value(a), em.value(b)])
                 for a, b in zip(taken, other, strict=True))


def _enter_autocast(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Dynamo writes `with torch.autocast(...)` as enter/exit calls around ops that hold
    no casts (autocast casts at dispatch): a region that is switched on is refused, one
    switched off (`enabled=False`, full precision: what the IR computes) is nothing."""
    enabled = _pick(args, kwargs, 2, "enabled", True)
    if enabled:
        raise Refused("torch.autocast region: Dynamo's graph does not hold its casts to "
                      f"{_pick(args, kwargs, 1, 'dtype', None)}; use frontend='export'")


def _exit_autocast(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    return None


FUNCTIONS[torch.amp.autocast_mode._enter_autocast] = _enter_autocast
FUNCTIONS[torch.amp.autocast_mode._exit_autocast] = _exit_autocast


if getattr(torch.ops.higher_order, "cond", None) is not None:
    FUNCTIONS[torch.ops.higher_order.cond] = _cond


def _while_loop(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torch while_loop(cond_fn, body_fn, carried, additional) as the IR's `loop`: the
    condition is evaluated once before the loop and again at the end of each body (as
    StableHLO's while is imported); the additional inputs (lifted parameters, captured
    tensors) are read from the enclosing graph."""
    from irbridge.ir import Graph, TensorType

    from ..lower import GraphLowerer

    cond_fn, body_fn = args[0], args[1]
    carried, extra = tuple(args[2]), tuple(args[3]) if len(args) > 3 else ()
    if not (isinstance(cond_fn, torch.fx.GraphModule)
            and isinstance(body_fn, torch.fx.GraphModule)):
        raise Unsupported("while_loop without cond and body graphs")
    if not all(isinstance(x, Value) for x in (*carried, *extra)):
        raise Unsupported("while_loop with a carried value that is not a tensor")
    outer = em.lowerer
    first = outer.inline(cond_fn, (*carried, *extra))
    keep_going = em.op("reshape", [em.value(_single(first))], shape=())
    body = Graph("while_body")
    body.add_input("iteration", TensorType(DType.INT64, ()))
    body.add_input("cond_in", TensorType(DType.BOOL, ()))
    state = [body.add_input(f"carried_{i}", em.type(v)) for i, v in enumerate(carried)]
    inner = GraphLowerer(outer.owner, None, body, outer.index, parent=outer,
                         provenance=em.provenance, depth=outer.depth + 1)
    new_state = inner.inline(body_fn, (*state, *extra))
    new_state = list(new_state) if isinstance(new_state, tuple | list) else [new_state]
    if len(new_state) != len(carried):
        raise Unsupported("while_loop body returns a different number of values")
    again = inner.inline(cond_fn, (*new_state, *extra))
    inner_em = Emitter(inner, None, em.provenance)
    outputs = [inner_em.op("reshape", [inner_em.value(_single(again))], shape=()),
               *(inner_em.value(v) for v in new_state)]
    outputs = [v if v.producer is not None and v.producer in body.nodes
               else inner_em.op("identity", [v]) for v in outputs]
    body.set_outputs(outputs)
    return tuple(em.ops("loop", [None, keep_going, *carried], count=len(carried), body=body))


def _single(result: Any) -> Any:
    """The one value a condition graph returns (fx wraps it in a tuple or list)."""
    while isinstance(result, tuple | list):
        if len(result) != 1:
            raise Unsupported("a while_loop condition with several results")
        result = result[0]
    return result


if getattr(torch.ops.higher_order, "while_loop", None) is not None:
    FUNCTIONS[torch.ops.higher_order.while_loop] = _while_loop


def _vmap_marker(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torch.func.vmap in a Dynamo graph: batch-dim markers around the per-example ops,
    which only torch.export's decomposition pass batches."""
    raise Refused("torch.func.vmap in a Dynamo graph (batch-dim markers around per-example "
                  "ops); use frontend='export', which batches them")


def _register_vmap_markers() -> None:
    try:
        from torch._functorch import predispatch
    except ImportError:  # a torch without it has no such markers either
        return
    for name in ("lazy_load_decompositions", "_vmap_increment_nesting", "_add_batch_dim",
                 "_remove_batch_dim", "_vmap_decrement_nesting"):
        marker = getattr(predispatch, name, None)
        if marker is not None:
            FUNCTIONS[marker] = _vmap_marker


_register_vmap_markers()


@_aten_fn(aten.diff.default)
def _diff(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    dim = _axis(int(a["dim"]), em.rank(x))
    parts = [em.value(p) for p in (a["prepend"], x, a["append"]) if p is not None]
    if len(parts) > 1:
        dtype = em.out_dtype()
        x = em.op("concat", [em.cast(p, dtype) for p in parts], axis=dim)
    for _ in range(int(a["n"])):
        head = em.op("slice", [x], starts=(1,), ends=(INT64_MAX,), axes=(dim,))
        tail = em.op("slice", [x], starts=(0,), ends=(-1,), axes=(dim,))
        if em.type(x).dtype == DType.BOOL:
            x = em.op("logical_xor", [head, tail])
        else:
            x = em.op("sub", [head, tail])
    return x


_alias(torch.diff, aten.diff.default)
_alias(torch.gru_cell, aten.gru_cell.default)
_alias(torch.swapaxes, aten.swapaxes.default)
_alias(torch.swapdims, aten.swapdims.default)
_alias("swapaxes", aten.swapaxes.default)
_alias("swapdims", aten.swapdims.default)


def _register_torchvision() -> None:
    """torchvision functions that fx leaves as calls (imported only if available)."""
    try:
        from torchvision.ops import stochastic_depth
    except Exception:  # torchvision missing or broken: nothing to register
        return

    def _stochastic_depth(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return dropout(em, _pick(args, kwargs, 0, "input"), float(_pick(args, kwargs, 1, "p", 0.0)),
                       _pick(args, kwargs, 3, "training", True))

    FUNCTIONS[stochastic_depth] = _stochastic_depth


_register_torchvision()
