"""Lowering tables: exact fx targets -> neutral IR.

Four tables, all keyed by the exact object the fx graph holds, never by a name pattern:

* `ATEN`      ATen `OpOverload`s (torch.export and make_fx graphs), handlers take the
              arguments bound to the op's schema (names and defaults from `_schema`);
* `FUNCTIONS` Python callables (`torch.relu`, `torch.nn.functional.layer_norm`,
              `operator.add`, ...) of fx and Dynamo graphs;
* `METHODS`   `Tensor` method names of call_method nodes (`"view"`, `"size"`, ...);
* `MODULES`   `nn.Module` classes of call_module nodes (fx leaf modules).

Many Python-level entries are aliases of an ATen op: their arguments are bound to that
op's schema and the ATen handler runs. Everything else falls back to the engine's
re-trace to ATen (lower.py).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from irbridge.dtypes import DType
from irbridge.ir import Value

from ._util import to_dtype, to_torch_dtype
from .lower import Deferred, Emitter, Sym, Unsupported

aten = torch.ops.aten
Args = dict[str, Any]
Handler = Callable[[Emitter, tuple[Any, ...], dict[str, Any]], Any]
AtenFn = Callable[[Emitter, Args], Any]

ATEN: dict[Any, Handler] = {}
FUNCTIONS: dict[Any, Handler] = {}
METHODS: dict[str, Handler] = {}
MODULES: dict[type, Handler] = {}
INT64_MAX = 2**63 - 1


def lookup(node: torch.fx.Node, gm: torch.fx.GraphModule) -> Handler | None:
    if node.op == "call_function":
        if isinstance(node.target, torch._ops.OpOverload):
            return ATEN.get(node.target)
        try:
            return FUNCTIONS.get(node.target)
        except TypeError:  # unhashable target
            return None
    if node.op == "call_method":
        return METHODS.get(str(node.target))
    if node.op == "call_module":
        try:
            module = gm.get_submodule(str(node.target))
        except AttributeError:
            return None
        return module_handler(type(module))
    return None


def module_handler(cls: type) -> Handler | None:
    handler = MODULES.get(cls)
    if handler is not None:
        return handler
    # A subclass that keeps its base's forward computes what the base computes.
    for base in cls.__mro__[1:]:
        if base in MODULES and getattr(cls, "forward", None) is getattr(base, "forward", None):
            return MODULES[base]
    return None


# -- binding --------------------------------------------------------------------------


def bind_schema(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any],
                *, rename_input: bool = False) -> Args:
    """Arguments by schema name, defaults filled in. `rename_input` maps the Python API's
    `input` keyword onto a schema's `self`."""
    bound: Args = {}
    positional = [a for a in op._schema.arguments if not a.kwarg_only]
    if len(args) > len(positional):
        raise Unsupported(f"{op}: too many positional arguments")
    for a, value in zip(positional, args, strict=False):
        bound[a.name] = value
    for key, value in kwargs.items():
        name = "self" if rename_input and key == "input" else key
        bound[name] = value
    for a in op._schema.arguments:
        if a.name not in bound:
            bound[a.name] = a.default_value if a.has_default_value() else None
    bound["__op__"] = op
    return bound


def _aten(*ops: Any) -> Callable[[AtenFn], AtenFn]:
    def deco(fn: AtenFn) -> AtenFn:
        for op in ops:
            if op is None:
                continue
            ATEN[op] = _schema_handler(op, fn)
        return fn
    return deco


def _schema_handler(op: torch._ops.OpOverload, fn: AtenFn) -> Handler:
    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return fn(em, bind_schema(op, args, kwargs))
    return handler


def _alias(target: Any, op: Any, *, varargs: str | None = None) -> None:
    """A Python function (or, for a str, a Tensor method) that means the ATen `op`."""
    fn = ATEN.get(op)
    if fn is None:
        raise KeyError(f"no ATen handler for {op}")

    def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if varargs is not None and len(args) >= 2 and varargs not in kwargs:
            rest = args[1:]
            if not (len(rest) == 1 and isinstance(rest[0], list | tuple)):
                args = (args[0], tuple(rest))
        if "input" in kwargs and not args:
            args = (kwargs.pop("input"),)
        bound = bind_schema(op, args, {("self" if k == "input" else k): v
                                       for k, v in kwargs.items()})
        return ATEN_FN[op](em, bound)

    if isinstance(target, str):
        METHODS[target] = handler
    else:
        FUNCTIONS[target] = handler


ATEN_FN: dict[Any, AtenFn] = {}


def _aten_fn(*ops: Any) -> Callable[[AtenFn], AtenFn]:
    """Register an ATen handler that other tables may alias."""
    def deco(fn: AtenFn) -> AtenFn:
        _aten(*ops)(fn)
        for op in ops:
            if op is not None:
                ATEN_FN[op] = fn
        return fn
    return deco


def _op(name: str, overload: str = "default") -> Any:
    """An ATen overload that may not exist in every torch version (None if absent)."""
    packet = getattr(aten, name, None)
    return getattr(packet, overload, None) if packet is not None else None


def _fn(*targets: Any) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for t in targets:
            if isinstance(t, str):
                METHODS[t] = fn
            else:
                FUNCTIONS[t] = fn
        return fn
    return deco


def _module(*classes: type) -> Callable[[Callable[[Emitter, Any, tuple[Any, ...],
                                                    dict[str, Any]], Any]], None]:
    def deco(fn: Callable[[Emitter, Any, tuple[Any, ...], dict[str, Any]], Any]) -> None:
        def handler(em: Emitter, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return fn(em, em.module(), args, kwargs)
        for cls in classes:
            MODULES[cls] = handler
    return deco


def _pick(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str,
          default: Any = None) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if index < len(args) else default


# -- small helpers --------------------------------------------------------------------


def _axis(axis: int, rank: int) -> int:
    if rank == 0:
        return 0
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _tuple(value: Any, count: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (int(value),) * count
    items = tuple(int(v) for v in value)
    if len(items) == 1 and count > 1:
        return items * count
    if len(items) != count:
        raise Unsupported(f"expected {count} values, got {list(items)}")
    return items


def _dims(value: Any, rank: int) -> tuple[int, ...]:
    """Reduction dims: None or [] means every dim."""
    if value is None:
        return tuple(range(rank))
    if isinstance(value, int):
        return (_axis(value, rank),)
    items = tuple(_axis(int(v), rank) for v in value)
    return items if items else tuple(range(rank))


def _dummy(em: Emitter, x: Any) -> Any:
    if isinstance(x, Value):
        t = em.type(x)
        shape: tuple[int, ...] = () if t.rank == 0 else (1,)
        return torch.empty(shape, dtype=to_torch_dtype(t.dtype))
    if isinstance(x, Sym):
        return 1
    if isinstance(x, torch.SymInt):
        return 1
    if isinstance(x, torch.SymFloat):
        return 1.0
    if isinstance(x, torch.Tensor):
        return torch.empty((1,) if x.dim() else (), dtype=x.dtype)
    return x


def result_dtype(em: Emitter, a: Any, b: Any) -> DType:
    """torch's type promotion of two operands (0-d tensors and scalars rank lower)."""
    da, db = _dummy(em, a), _dummy(em, b)
    if not isinstance(da, torch.Tensor) and not isinstance(db, torch.Tensor):
        return to_dtype(torch.result_type(torch.tensor(da), db))
    return to_dtype(torch.result_type(da, db))


def _operand(em: Emitter, x: Any, dtype: DType) -> Value:
    return em.cast(em.value(x, dtype), dtype)


def _binary(em: Emitter, op: str, a: Any, b: Any, dtype: DType | None = None) -> Value:
    dtype = dtype or em.out_dtype()
    return em.op(op, [_operand(em, a, dtype), _operand(em, b, dtype)])


def _compare(em: Emitter, op: str, a: Any, b: Any) -> Value:
    dtype = result_dtype(em, a, b)
    return em.op(op, [_operand(em, a, dtype), _operand(em, b, dtype)])


def _is_python_number(x: Any) -> bool:
    return isinstance(x, bool | int | float) and not isinstance(x, Value)


def _is_tensorish(x: Any) -> bool:
    return isinstance(x, Value | Sym | Deferred)


# -- elementwise: unary ---------------------------------------------------------------

_UNARY: dict[str, list[Any]] = {
    "neg": [aten.neg.default], "abs": [aten.abs.default], "exp": [aten.exp.default],
    "log": [aten.log.default], "sqrt": [aten.sqrt.default], "rsqrt": [aten.rsqrt.default],
    "reciprocal": [aten.reciprocal.default], "sin": [aten.sin.default],
    "cos": [aten.cos.default], "tan": [aten.tan.default], "erf": [aten.erf.default],
    "floor": [aten.floor.default], "ceil": [aten.ceil.default], "sign": [aten.sign.default],
    "tanh": [aten.tanh.default, aten.tanh_.default],
    "sigmoid": [aten.sigmoid.default, aten.sigmoid_.default],
    "relu": [aten.relu.default, aten.relu_.default],
    "silu": [aten.silu.default, aten.silu_.default],
    "mish": [aten.mish.default, _op("mish_")],
    "hardswish": [aten.hardswish.default, aten.hardswish_.default],
    "isnan": [aten.isnan.default], "isinf": [aten.isinf.default],
    "logical_not": [aten.logical_not.default],
}


def _unary(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"])
        out = em.out_dtype()
        if out.is_float and not em.type(x).dtype.is_float:
            x = em.cast(x, out)
        return em.op(name, [x])
    return fn


for _name, _ops in _UNARY.items():
    _aten_fn(*_ops)(_unary(_name))


@_aten_fn(aten.round.default)
def _round(em: Emitter, a: Args) -> Value:
    return em.op("round", [em.value(a["self"])])


@_aten_fn(aten.bitwise_not.default)
def _bitwise_not(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    if em.type(x).dtype != DType.BOOL:
        raise Unsupported("bitwise_not of integers")
    return em.op("logical_not", [x])


@_aten_fn(aten.gelu.default, aten.gelu_.default)
def _gelu(em: Emitter, a: Args) -> Value:
    return em.op("gelu", [em.value(a["self"])], approximate=str(a["approximate"] or "none"))


@_aten_fn(aten.hardsigmoid.default, aten.hardsigmoid_.default)
def _hardsigmoid(em: Emitter, a: Args) -> Value:
    return em.op("hardsigmoid", [em.value(a["self"])], alpha=1 / 6, beta=0.5)


@_aten_fn(aten.leaky_relu.default, aten.leaky_relu_.default)
def _leaky_relu(em: Emitter, a: Args) -> Value:
    return em.op("leaky_relu", [em.value(a["self"])], alpha=float(a["negative_slope"]))


@_aten_fn(aten.elu.default, aten.elu_.default)
def _elu(em: Emitter, a: Args) -> Value:
    if float(a["scale"]) != 1.0 or float(a["input_scale"]) != 1.0:
        raise Unsupported("elu with scale")
    return em.op("elu", [em.value(a["self"])], alpha=float(a["alpha"]))


@_aten_fn(aten.softplus.default)
def _softplus(em: Emitter, a: Args) -> Value:
    return em.op("softplus", [em.value(a["self"])], beta=float(a["beta"]),
                 threshold=float(a["threshold"]))


@_aten_fn(aten.hardtanh.default, aten.hardtanh_.default)
def _hardtanh(em: Emitter, a: Args) -> Value:
    return em.op("clip", [em.value(a["self"])], min=float(a["min_val"]),
                 max=float(a["max_val"]))


@_aten_fn(aten.clamp.default, _op("clamp_"), aten.clamp.Tensor, _op("clamp_", "Tensor"))
def _clamp(em: Emitter, a: Args) -> Value:
    return _clip(em, a["self"], a["min"], a["max"])


@_aten_fn(aten.clamp_min.default, _op("clamp_min_"), aten.clamp_min.Tensor)
def _clamp_min(em: Emitter, a: Args) -> Value:
    return _clip(em, a["self"], a["min"], None)


@_aten_fn(aten.clamp_max.default, _op("clamp_max_"), aten.clamp_max.Tensor)
def _clamp_max(em: Emitter, a: Args) -> Value:
    return _clip(em, a["self"], None, a["max"])


def _clip(em: Emitter, x: Any, lo: Any, hi: Any) -> Value:
    out = em.out_dtype()
    xv = em.cast(em.value(x), out)
    if _is_tensorish(lo) or _is_tensorish(hi):
        inputs: list[Value | None] = [xv, None if lo is None else _operand(em, lo, out),
                                      None if hi is None else _operand(em, hi, out)]
        return em.op("clip", inputs)
    attrs: dict[str, float] = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    return em.op("clip", [xv], **attrs)


@_aten_fn(aten.log1p.default)
def _log1p(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("log", [_binary(em, "add", x, 1.0)])


@_aten_fn(aten.expm1.default)
def _expm1(em: Emitter, a: Args) -> Value:
    return _binary(em, "sub", em.op("exp", [em.value(a["self"])]), 1.0)


@_aten_fn(aten.square.default)
def _square(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    return em.op("mul", [x, x])


@_aten_fn(aten.log2.default)
def _log2(em: Emitter, a: Args) -> Value:
    return _binary(em, "div", em.op("log", [em.cast(em.value(a["self"]), em.out_dtype())]),
                   math.log(2.0))


@_aten_fn(aten.prelu.default, _op("_prelu_kernel"))
def _prelu(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    w = em.value(a["weight"])
    rank, wshape = em.rank(x), em.shape(w)
    if rank >= 2 and len(wshape) == 1 and wshape[0] != 1:
        w = em.op("reshape", [w], shape=(-1, *([1] * (rank - 2))))
    return em.op("prelu", [x, w])


# -- elementwise: binary --------------------------------------------------------------


def _scaled(em: Emitter, value: Any, alpha: Any, dtype: DType) -> Any:
    if alpha is None or alpha == 1:
        return value
    if _is_python_number(value):
        return value * alpha
    return _binary(em, "mul", value, alpha, dtype)


@_aten_fn(aten.add.Tensor, aten.add_.Tensor, aten.add.Scalar, _op("add_", "Scalar"))
def _add(em: Emitter, a: Args) -> Value:
    dtype = em.out_dtype()
    return _binary(em, "add", a["self"], _scaled(em, a["other"], a.get("alpha"), dtype), dtype)


@_aten_fn(aten.sub.Tensor, aten.sub_.Tensor, aten.sub.Scalar, _op("sub_", "Scalar"))
def _sub(em: Emitter, a: Args) -> Value:
    dtype = em.out_dtype()
    return _binary(em, "sub", a["self"], _scaled(em, a["other"], a.get("alpha"), dtype), dtype)


@_aten_fn(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(em: Emitter, a: Args) -> Value:
    dtype = em.out_dtype()
    return _binary(em, "sub", a["other"], _scaled(em, a["self"], a.get("alpha"), dtype), dtype)


@_aten_fn(aten.mul.Tensor, aten.mul_.Tensor, aten.mul.Scalar, _op("mul_", "Scalar"))
def _mul(em: Emitter, a: Args) -> Value:
    return _binary(em, "mul", a["self"], a["other"])


@_aten_fn(aten.div.Tensor, aten.div_.Tensor, aten.div.Scalar, _op("div_", "Scalar"),
          aten.div.Tensor_mode, _op("div_", "Tensor_mode"), aten.div.Scalar_mode)
def _div(em: Emitter, a: Args) -> Value:
    return _divide(em, a["self"], a["other"], a.get("rounding_mode"))


def _divide(em: Emitter, x: Any, y: Any, mode: str | None) -> Value:
    out = em.out_dtype()
    if mode is None:
        return _binary(em, "div", x, y, out)
    if mode == "floor":
        return _binary(em, "floor_div", x, y, out)
    if mode == "trunc":
        if not out.is_float:
            q = _binary(em, "div", x, y, DType.FLOAT64)
            q = em.op("where", [em.op("less", [q, em.scalar(0.0, DType.FLOAT64)]),
                                em.op("ceil", [q]), em.op("floor", [q])])
            return em.cast(q, out)
        q = _binary(em, "div", x, y, out)
        return em.op("where", [em.op("less", [q, em.scalar(0.0, out)]), em.op("ceil", [q]),
                               em.op("floor", [q])])
    raise Unsupported(f"rounding_mode {mode!r}")


@_aten_fn(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(em: Emitter, a: Args) -> Value:
    return _binary(em, "floor_div", a["self"], a["other"])


@_aten_fn(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(em: Emitter, a: Args) -> Value:
    return _binary(em, "mod", a["self"], a["other"])


@_aten_fn(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar,
          _op("pow_", "Scalar"), _op("pow_", "Tensor"))
def _pow(em: Emitter, a: Args) -> Value:
    base = a["self"]
    exponent = a["exponent"]
    out = em.out_dtype()
    if isinstance(exponent, int | float) and not isinstance(exponent, bool):
        xv = em.cast(em.value(base), out)
        if exponent == 2:
            return em.op("mul", [xv, xv])
        if exponent == 1:
            return em.op("identity", [xv])
        if exponent == 0.5:
            return em.op("sqrt", [xv])
        if exponent == -1:
            return em.op("reciprocal", [xv])
    return _binary(em, "pow", base, exponent, out)


@_aten_fn(aten.maximum.default)
def _maximum(em: Emitter, a: Args) -> Value:
    return _binary(em, "maximum", a["self"], a["other"])


@_aten_fn(aten.minimum.default)
def _minimum(em: Emitter, a: Args) -> Value:
    return _binary(em, "minimum", a["self"], a["other"])


_COMPARISONS = {
    "equal": [aten.eq.Tensor, aten.eq.Scalar], "not_equal": [aten.ne.Tensor, aten.ne.Scalar],
    "less": [aten.lt.Tensor, aten.lt.Scalar], "less_equal": [aten.le.Tensor, aten.le.Scalar],
    "greater": [aten.gt.Tensor, aten.gt.Scalar],
    "greater_equal": [aten.ge.Tensor, aten.ge.Scalar],
}


def _comparison(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return _compare(em, name, a["self"], a["other"])
    return fn


for _name, _ops in _COMPARISONS.items():
    _aten_fn(*_ops)(_comparison(name=_name))


def _logical(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.cast(em.value(a["self"]), DType.BOOL)
        y = em.cast(em.value(a["other"], DType.BOOL), DType.BOOL)
        return em.op(name, [x, y])
    return fn


_aten_fn(aten.logical_and.default)(_logical("logical_and"))
_aten_fn(aten.logical_or.default)(_logical("logical_or"))
_aten_fn(aten.logical_xor.default)(_logical("logical_xor"))


def _bitwise(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        if em.out_dtype() != DType.BOOL:
            raise Unsupported("bitwise ops on integers")
        return _logical(name)(em, a)
    return fn


_aten_fn(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, _op("__and__", "Tensor"))(
    _bitwise("logical_and"))
_aten_fn(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, _op("__or__", "Tensor"))(
    _bitwise("logical_or"))
_aten_fn(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, _op("__xor__", "Tensor"))(
    _bitwise("logical_xor"))


@_aten_fn(aten.where.self, _op("where", "ScalarSelf"), _op("where", "ScalarOther"),
          _op("where", "Scalar"))
def _where(em: Emitter, a: Args) -> Value:
    out = em.out_dtype()
    cond = em.cast(em.value(a["condition"]), DType.BOOL)
    return em.op("where", [cond, _operand(em, a["self"], out), _operand(em, a["other"], out)])


@_aten_fn(aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.masked_fill_.Scalar,
          aten.masked_fill_.Tensor)
def _masked_fill(em: Emitter, a: Args) -> Value:
    out = em.out_dtype()
    mask = em.cast(em.value(a["mask"]), DType.BOOL)
    return em.op("where", [mask, _operand(em, a["value"], out), _operand(em, a["self"], out)])


# -- casts, copies and no-ops -----------------------------------------------------------


@_aten_fn(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device,
          aten.to.other, aten.type_as.default, _op("_autocast_to_reduced_precision"),
          _op("_autocast_to_full_precision"), aten.to.prim_Device, aten.to.prim_dtype)
def _to(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.cast(x, em.out_dtype())


@_aten_fn(aten.clone.default, aten.alias.default, aten.detach.default, aten.detach_.default,
          aten.lift_fresh_copy.default, aten.contiguous.default, _op("lift_fresh"),
          aten.dropout.default, aten.dropout_.default, aten.feature_dropout.default,
          aten.alpha_dropout.default, aten.feature_alpha_dropout.default,
          _op("feature_dropout_"), _op("alpha_dropout_"), aten.positive.default,
          aten.resolve_conj.default, aten.resolve_neg.default, _op("_conj"),
          aten.view_as.default if hasattr(aten, "view_as") else None)
def _no_op(em: Emitter, a: Args) -> Value:
    x = a["self"] if "self" in a else a["input"]
    v = em.value(x)
    if "other" in a and isinstance(a["other"], Value):  # view_as
        return _reshape_to(em, v, em.out_shape())
    return v


@_aten_fn(aten.native_dropout.default)
def _native_dropout(em: Emitter, a: Args) -> Any:
    x = em.value(a["input"])
    mask = Deferred(lambda: em.op("full", [], shape=em.static_shape(x), value=1.0,
                                  dtype=DType.BOOL))
    return (x, mask)


def _nothing(em: Emitter, a: Args) -> None:
    return None


for _assert in (_op("_assert_tensor_metadata"), _op("_assert_async"),
                _op("_assert_async", "msg"), _op("_assert_scalar"),
                _op("sym_constrain_range_for_size"), _op("sym_constrain_range"),
                _op("_functional_sym_constrain_range_for_size"),
                _op("_functional_assert_async", "msg"), _op("_functional_sym_constrain_range")):
    if _assert is not None:
        ATEN[_assert] = _schema_handler(_assert, _nothing)


@_aten_fn(aten.copy_.default, aten.copy.default)
def _copy_(em: Emitter, a: Args) -> Value:
    dst = em.value(a["self"])
    src = em.cast(em.value(a["src"]), em.type(dst).dtype)
    if em.shape(src) == em.shape(dst):
        return em.op("identity", [src])
    return _expand_to(em, src, em.shape(dst))


@_aten_fn(aten.sym_size.int)
def _sym_size(em: Emitter, a: Args) -> Any:
    meta = em.meta
    if isinstance(meta, int):
        return int(meta)
    if isinstance(meta, torch.SymInt) and getattr(meta.node.expr, "is_number", False):
        return int(meta.node.expr)
    x = em.value(a["self"])
    return em.size_of(x, _axis(int(a["dim"]), em.rank(x)))


@_aten_fn(_op("sym_numel"))
def _sym_numel(em: Emitter, a: Args) -> Any:
    meta = em.meta
    if isinstance(meta, int):
        return int(meta)
    x = em.value(a["self"])
    n = em.op("shape_of", [x])
    return Sym(em.op("reduce_prod", [n]), None)


# -- matmul family ----------------------------------------------------------------------


@_aten_fn(aten.linear.default)
def _linear(em: Emitter, a: Args) -> Value:
    b = a["bias"]
    return em.op("linear", [em.value(a["input"]), em.value(a["weight"]),
                            None if b is None else em.value(b)])


@_aten_fn(aten.addmm.default)
def _addmm(em: Emitter, a: Args) -> Value:
    return em.op("gemm", [em.value(a["mat1"]), em.value(a["mat2"]), em.value(a["self"])],
                 alpha=float(a["alpha"]), beta=float(a["beta"]))


@_aten_fn(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _matmul(em: Emitter, a: Args) -> Value:
    x = a["self"]
    y = a.get("mat2", a.get("other"))
    return em.op("matmul", [em.value(x), em.value(y)])


@_aten_fn(aten.baddbmm.default)
def _baddbmm(em: Emitter, a: Args) -> Value:
    out = em.out_dtype()
    prod = em.op("matmul", [em.value(a["batch1"]), em.value(a["batch2"])])
    prod = _scaled(em, prod, a["alpha"], out)
    if float(a["beta"]) == 0.0:
        return prod
    return _binary(em, "add", _scaled(em, em.value(a["self"]), a["beta"], out), prod, out)


@_aten_fn(aten.t.default, _op("numpy_T"))
def _t(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    if rank < 2:
        return x
    return em.op("permute", [x], perm=tuple(reversed(range(rank))))


# -- convolution -------------------------------------------------------------------------


def conv(em: Emitter, x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any,
         groups: int, transposed: bool = False, output_padding: Any = 0) -> Value:
    xv, wv = em.value(x), em.value(w)
    bv = None if b is None else em.value(b)
    spatial = em.rank(wv) - 2
    unbatched = em.rank(xv) == spatial + 1
    if unbatched:
        xv = em.op("unsqueeze", [xv], axes=(0,))
    strides, dilations = _tuple(stride, spatial), _tuple(dilation, spatial)
    if isinstance(padding, str):
        if padding == "valid":
            pads: tuple[int, ...] = (0,) * (2 * spatial)
        elif padding == "same":
            kernel = em.static_shape(wv)[2:]
            totals = [d * (k - 1) for d, k in zip(dilations, kernel, strict=True)]
            pads = tuple(t // 2 for t in totals) + tuple(t - t // 2 for t in totals)
        else:
            raise Unsupported(f"padding {padding!r}")
    else:
        p = _tuple(padding, spatial)
        pads = p + p
    if transposed:
        y = em.op("conv_transpose", [xv, wv, bv], strides=strides, pads=pads,
                  dilations=dilations, groups=int(groups),
                  output_padding=_tuple(output_padding, spatial))
    else:
        y = em.op("conv", [xv, wv, bv], strides=strides, pads=pads, dilations=dilations,
                  groups=int(groups))
    return em.op("squeeze", [y], axes=(0,)) if unbatched else y


@_aten_fn(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
          _op("conv1d", "padding"), _op("conv2d", "padding"), _op("conv3d", "padding"))
def _conv_nd(em: Emitter, a: Args) -> Value:
    return conv(em, a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"])


@_aten_fn(aten.convolution.default, aten._convolution.default)
def _convolution(em: Emitter, a: Args) -> Value:
    return conv(em, a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"], bool(a["transposed"]), a["output_padding"])


@_aten_fn(aten.conv_transpose1d.default, aten.conv_transpose2d.input,
          aten.conv_transpose3d.input)
def _conv_transpose(em: Emitter, a: Args) -> Value:
    return conv(em, a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"], True, a["output_padding"])


# -- normalisation -------------------------------------------------------------------------


def _channel_vector(em: Emitter, x: Value, v: Any, fill: float) -> Value:
    if v is not None:
        return em.value(v)
    channels = em.shape(x)[1]
    if not isinstance(channels, int):
        raise Unsupported("batch norm without weights needs a static channel count")
    return em.const(np.full((channels,), fill, dtype=em.type(x).dtype.numpy),
                    em.type(x).dtype)


def batch_norm(em: Emitter, x: Any, weight: Any, bias: Any, mean: Any, var: Any,
               training: bool, momentum: float, eps: float) -> tuple[Value, Any, Any, Any, Any]:
    """(y, batch mean, batch rstd, new running mean, new running var); the last four are
    deferred (built only when used)."""
    xv = em.value(x)
    scale = _channel_vector(em, xv, weight, 1.0)
    shift = _channel_vector(em, xv, bias, 0.0)
    rank = em.rank(xv)
    axes = (0, *range(2, rank))
    if not training and mean is not None and var is not None:
        y = em.op("batch_norm", [xv, scale, shift, em.value(mean), em.value(var)],
                  epsilon=float(eps))
        empty = Deferred(lambda: em.const(np.zeros((0,), dtype=em.type(xv).dtype.numpy),
                                          em.type(xv).dtype))
        return y, empty, empty, Deferred(lambda: em.value(mean)), Deferred(
            lambda: em.value(var))
    # batch statistics (training mode or no running stats)
    bmean = em.op("reduce_mean", [xv], axes=axes, keepdims=True)
    centered = em.op("sub", [xv, bmean])
    bvar = em.op("reduce_mean", [em.op("mul", [centered, centered])], axes=axes,
                 keepdims=True)
    dtype = em.type(xv).dtype
    rstd = em.op("rsqrt", [em.op("add", [bvar, em.scalar(eps, dtype)])])
    shape = (-1, *([1] * (rank - 2)))
    y = em.op("mul", [centered, rstd])
    y = em.op("add", [em.op("mul", [y, em.op("reshape", [scale], shape=shape)]),
                      em.op("reshape", [shift], shape=shape)])

    def stat(v: Value) -> Value:
        return em.op("reshape", [v], shape=(-1,))

    def running(old: Any, new: Value, unbias: bool) -> Value:
        if old is None:
            return stat(new)
        n = 1
        for d in (em.shape(xv)[i] for i in axes):
            if not isinstance(d, int):
                raise Unsupported("running stats of a symbolic batch")
            n *= d
        value = stat(new)
        if unbias and n > 1:
            value = em.op("mul", [value, em.scalar(n / (n - 1), dtype)])
        m = float(momentum if momentum is not None else 0.1)
        return em.op("add", [em.op("mul", [em.value(old), em.scalar(1 - m, dtype)]),
                             em.op("mul", [value, em.scalar(m, dtype)])])

    return (y, Deferred(lambda: stat(bmean)), Deferred(lambda: stat(rstd)),
            Deferred(lambda: running(mean, bmean, False)),
            Deferred(lambda: running(var, bvar, True)))


@_aten_fn(aten.batch_norm.default)
def _batch_norm(em: Emitter, a: Args) -> Value:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])[0]


@_aten_fn(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(em: Emitter, a: Args) -> Any:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], False, a["momentum"], a["eps"])[:3]


@_aten_fn(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _native_bn(em: Emitter, a: Args) -> Any:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])[:3]


@_aten_fn(aten._native_batch_norm_legit_functional.default)
def _bn_functional(em: Emitter, a: Args) -> Any:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])


def layer_norm(em: Emitter, x: Any, normalized_shape: Sequence[int], weight: Any, bias: Any,
               eps: float) -> tuple[Value, Any, Any]:
    xv = em.value(x)
    k = len(normalized_shape)
    y = em.op("layer_norm", [xv, None if weight is None else em.value(weight),
                             None if bias is None else em.value(bias)],
              axis=-k, epsilon=float(eps))
    rank = em.rank(xv)
    axes = tuple(range(rank - k, rank))

    def mean() -> Value:
        return em.op("reduce_mean", [xv], axes=axes, keepdims=True)

    def rstd() -> Value:
        m = mean()
        c = em.op("sub", [xv, m])
        var = em.op("reduce_mean", [em.op("mul", [c, c])], axes=axes, keepdims=True)
        return em.op("rsqrt", [em.op("add", [var, em.scalar(eps, em.type(var).dtype)])])

    return y, Deferred(mean), Deferred(rstd)


@_aten_fn(aten.layer_norm.default)
def _layer_norm(em: Emitter, a: Args) -> Value:
    return layer_norm(em, a["input"], a["normalized_shape"], a["weight"], a["bias"],
                      a["eps"])[0]


@_aten_fn(aten.native_layer_norm.default)
def _native_layer_norm(em: Emitter, a: Args) -> Any:
    return layer_norm(em, a["input"], a["normalized_shape"], a["weight"], a["bias"], a["eps"])


@_aten_fn(aten.group_norm.default)
def _group_norm(em: Emitter, a: Args) -> Value:
    return em.op("group_norm", [em.value(a["input"]), _opt(em, a["weight"]),
                                _opt(em, a["bias"])],
                 num_groups=int(a["num_groups"]), epsilon=float(a["eps"]))


@_aten_fn(aten.native_group_norm.default)
def _native_group_norm(em: Emitter, a: Args) -> Any:
    y = em.op("group_norm", [em.value(a["input"]), _opt(em, a["weight"]), _opt(em, a["bias"])],
              num_groups=int(a["group"]), epsilon=float(a["eps"]))

    def unsupported() -> Value:
        raise Unsupported("group norm statistics")
    return y, Deferred(unsupported), Deferred(unsupported)


@_aten_fn(_op("rms_norm"))
def _rms_norm(em: Emitter, a: Args) -> Value:
    x = em.value(a["input"])
    eps = a["eps"]
    if eps is None:
        eps = float(torch.finfo(to_torch_dtype(em.type(x).dtype)).eps)
    return em.op("rms_norm", [x, _opt(em, a["weight"])], axis=-len(a["normalized_shape"]),
                 epsilon=float(eps))


def _opt(em: Emitter, v: Any) -> Value | None:
    return None if v is None else em.value(v)


# -- attention ----------------------------------------------------------------------------


def attention(em: Emitter, q: Any, k: Any, v: Any, mask: Any, causal: bool,
              scale: float | None) -> Value:
    qv, kv, vv = em.value(q), em.value(k), em.value(v)
    mv = None
    if mask is not None:
        mv = em.value(mask)
        if em.type(mv).dtype != DType.BOOL:
            mv = em.cast(mv, em.type(qv).dtype)
    return em.op("attention", [qv, kv, vv, mv], causal=bool(causal),
                 scale=float(scale) if scale else 0.0)


@_aten_fn(aten.scaled_dot_product_attention.default)
def _sdpa(em: Emitter, a: Args) -> Value:
    return attention(em, a["query"], a["key"], a["value"], a["attn_mask"], a["is_causal"],
                     a["scale"])


@_aten_fn(_op("_scaled_dot_product_flash_attention_for_cpu"))
def _sdpa_flash_cpu(em: Emitter, a: Args) -> Any:
    y = attention(em, a["query"], a["key"], a["value"], a.get("attn_mask"), a["is_causal"],
                  a["scale"])
    return (y, Deferred(lambda: _unsupported("attention log-sum-exp")))


@_aten_fn(_op("_scaled_dot_product_efficient_attention"))
def _sdpa_efficient(em: Emitter, a: Args) -> Any:
    y = attention(em, a["query"], a["key"], a["value"], a.get("attn_bias"), a["is_causal"],
                  a["scale"])
    missing = Deferred(lambda: _unsupported("attention statistics"))
    return (y, missing, missing, missing)


@_aten_fn(_op("_scaled_dot_product_flash_attention"))
def _sdpa_flash(em: Emitter, a: Args) -> Any:
    y = attention(em, a["query"], a["key"], a["value"], None, a["is_causal"], a["scale"])
    missing = Deferred(lambda: _unsupported("attention statistics"))
    return (y, *([missing] * 8))


def _unsupported(what: str) -> Value:
    raise Unsupported(what)


def multi_head_attention(em: Emitter, query: Any, key: Any, value: Any, embed_dim: int,
                         heads: int, in_weight: Any, in_bias: Any, out_weight: Any,
                         out_bias: Any, *, qkv_weights: Sequence[Any] | None = None,
                         key_padding_mask: Any = None, attn_mask: Any = None,
                         need_weights: bool = False, average_weights: bool = True,
                         batch_first: bool = True, causal: bool = False) -> tuple[Value, Any]:
    """nn.MultiheadAttention: q/k/v projections, per-head attention, output projection."""
    q, k, v = em.value(query), em.value(key), em.value(value)
    unbatched = em.rank(q) == 2
    if unbatched:
        q, k, v = (em.op("unsqueeze", [t], axes=(0 if batch_first else 1,)) for t in (q, k, v))
    if not batch_first:
        q, k, v = (em.op("permute", [t], perm=(1, 0, 2)) for t in (q, k, v))
    head_dim = embed_dim // heads
    dtype = em.type(q).dtype

    def project(x: Value, index: int) -> Value:
        if qkv_weights is not None:
            w = em.value(qkv_weights[index])
        else:
            w = em.op("slice", [em.value(in_weight)], starts=(index * embed_dim,),
                      ends=((index + 1) * embed_dim,), axes=(0,))
        b = None
        if in_bias is not None:
            b = em.op("slice", [em.value(in_bias)], starts=(index * embed_dim,),
                      ends=((index + 1) * embed_dim,), axes=(0,))
        y = em.op("linear", [x, w, b])
        y = em.op("reshape", [y], shape=(0, 0, heads, head_dim))
        return em.op("permute", [y], perm=(0, 2, 1, 3))

    qh, kh, vh = project(q, 0), project(k, 1), project(v, 2)
    mask: Value | None = None
    if attn_mask is not None:
        mask = em.value(attn_mask)
        if em.type(mask).dtype == DType.BOOL:
            mask = em.op("logical_not", [mask])  # MHA: True = masked out
        else:
            mask = em.cast(mask, dtype)
        if em.rank(mask) == 3:  # [N * heads, L, S]
            mask = em.op("reshape", [mask], shape=(-1, heads, *em.static_shape(mask)[1:]))
    if key_padding_mask is not None:
        kpm = em.value(key_padding_mask)
        kpm = em.op("unsqueeze", [kpm], axes=(1, 2))  # [N, 1, 1, S]
        if em.type(kpm).dtype == DType.BOOL:
            kpm = em.op("logical_not", [kpm])
            if mask is not None and em.type(mask).dtype == DType.BOOL:
                mask = em.op("logical_and", [mask, kpm])
            elif mask is not None:
                minus = em.op("where", [kpm, em.scalar(0.0, dtype),
                                        em.scalar(-math.inf, dtype)])
                mask = em.op("add", [mask, minus])
            else:
                mask = kpm
        else:
            kpm = em.cast(kpm, dtype)
            mask = kpm if mask is None else em.op("add", [em.cast(mask, dtype)
                                                          if em.type(mask).dtype == DType.BOOL
                                                          else mask, kpm])
    weights: Any = None
    if need_weights:
        scores = em.op("matmul", [qh, em.op("permute", [kh], perm=(0, 1, 3, 2))])
        scores = em.op("mul", [scores, em.scalar(1 / math.sqrt(head_dim), dtype)])
        if mask is not None:
            if em.type(mask).dtype == DType.BOOL:
                scores = em.op("where", [mask, scores, em.scalar(-math.inf, dtype)])
            else:
                scores = em.op("add", [scores, mask])
        probs = em.op("softmax", [scores], axis=-1)
        ctx = em.op("matmul", [probs, vh])
        weights = em.op("reduce_mean", [probs], axes=(1,)) if average_weights else probs
        if unbatched:
            weights = em.op("squeeze", [weights], axes=(0,))
    else:
        ctx = em.op("attention", [qh, kh, vh, mask], causal=bool(causal))
    ctx = em.op("permute", [ctx], perm=(0, 2, 1, 3))
    ctx = em.op("reshape", [ctx], shape=(0, 0, embed_dim))
    out = em.op("linear", [ctx, em.value(out_weight), _opt(em, out_bias)])
    if not batch_first:
        out = em.op("permute", [out], perm=(1, 0, 2))
    if unbatched:
        out = em.op("squeeze", [out], axes=(0 if batch_first else 1,))
    return out, weights


@_aten_fn(_op("_native_multi_head_attention"))
def _native_mha(em: Emitter, a: Args) -> Any:
    mask_type = a.get("mask_type")
    kpm = attn = None
    if a["mask"] is not None:
        if mask_type == 1:
            kpm = a["mask"]
        else:
            attn = a["mask"]
    out, weights = multi_head_attention(
        em, a["query"], a["key"], a["value"], int(a["embed_dim"]), int(a["num_head"]),
        a["qkv_weight"], a["qkv_bias"], a["proj_weight"], a["proj_bias"],
        key_padding_mask=kpm, attn_mask=attn, need_weights=bool(a["need_weights"]),
        average_weights=bool(a["average_attn_weights"]), batch_first=True)
    if weights is None:
        weights = Deferred(lambda: em.const(np.zeros((0,), dtype=np.float32)))
    return out, weights


# -- pooling and resizing --------------------------------------------------------------


def _batched(em: Emitter, x: Value, spatial: int) -> tuple[Value, bool]:
    if em.rank(x) == spatial + 1:
        return em.op("unsqueeze", [x], axes=(0,)), True
    return x, False


def _unbatch(em: Emitter, y: Value, unbatched: bool) -> Value:
    return em.op("squeeze", [y], axes=(0,)) if unbatched else y


def max_pool(em: Emitter, x: Any, spatial: int, kernel: Any, stride: Any, padding: Any,
             dilation: Any, ceil_mode: bool) -> Value:
    xv, unbatched = _batched(em, em.value(x), spatial)
    k = _tuple(kernel, spatial)
    s = _tuple(stride, spatial) if stride else k
    p = _tuple(padding, spatial)
    y = em.op("max_pool", [xv], kernel=k, strides=s, pads=p + p,
              dilations=_tuple(dilation, spatial), ceil_mode=bool(ceil_mode))
    return _unbatch(em, y, unbatched)


def _max_pool_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return max_pool(em, a["self"], spatial, a["kernel_size"], a["stride"], a["padding"],
                        a["dilation"], a["ceil_mode"])
    return fn


def _max_pool_indices_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        y = _max_pool_fn(spatial)(em, a)
        return y, Deferred(lambda: _unsupported("max-pool indices"))
    return fn


_aten_fn(aten.max_pool1d.default)(_max_pool_fn(1))
_aten_fn(aten.max_pool2d.default)(_max_pool_fn(2))
_aten_fn(aten.max_pool3d.default)(_max_pool_fn(3))
_aten_fn(aten.max_pool2d_with_indices.default)(_max_pool_indices_fn(2))
_aten_fn(aten.max_pool3d_with_indices.default)(_max_pool_indices_fn(3))
_aten_fn(_op("max_pool1d_with_indices"))(_max_pool_indices_fn(1))


def avg_pool(em: Emitter, x: Any, spatial: int, kernel: Any, stride: Any, padding: Any,
             ceil_mode: bool, count_include_pad: bool, divisor: Any = None) -> Value:
    if divisor is not None:
        raise Unsupported("avg_pool divisor_override")
    xv, unbatched = _batched(em, em.value(x), spatial)
    k = _tuple(kernel, spatial)
    s = _tuple(stride, spatial) if stride else k
    p = _tuple(padding, spatial)
    y = em.op("avg_pool", [xv], kernel=k, strides=s, pads=p + p, ceil_mode=bool(ceil_mode),
              count_include_pad=bool(count_include_pad))
    return _unbatch(em, y, unbatched)


def _avg_pool_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return avg_pool(em, a["self"], spatial, a["kernel_size"], a["stride"], a["padding"],
                        a["ceil_mode"], a["count_include_pad"], a.get("divisor_override"))
    return fn


_aten_fn(aten.avg_pool1d.default)(_avg_pool_fn(1))
_aten_fn(aten.avg_pool2d.default)(_avg_pool_fn(2))
_aten_fn(aten.avg_pool3d.default)(_avg_pool_fn(3))


def _adaptive_avg_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return _adaptive(em, a["self"], spatial, a["output_size"], "adaptive_avg_pool")
    return fn


def _adaptive(em: Emitter, x: Any, spatial: int, output_size: Any, op: str) -> Value:
    xv, unbatched = _batched(em, em.value(x), spatial)
    shape = em.shape(xv)
    sizes = [output_size] * spatial if isinstance(output_size, int) else list(output_size)
    if len(sizes) == 1 and spatial > 1:
        sizes = sizes * spatial
    resolved: list[int] = []
    for i, s in enumerate(sizes):
        d = shape[2 + i] if s is None else s
        if not isinstance(d, int):
            raise Unsupported("adaptive pooling to a symbolic size")
        resolved.append(int(d))
    y = em.op(op, [xv], output_size=tuple(resolved))
    return _unbatch(em, y, unbatched)


_aten_fn(aten.adaptive_avg_pool1d.default)(_adaptive_avg_fn(1))
_aten_fn(aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default)(
    _adaptive_avg_fn(2))
_aten_fn(aten.adaptive_avg_pool3d.default, aten._adaptive_avg_pool3d.default)(
    _adaptive_avg_fn(3))


def _adaptive_max_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        y = _adaptive(em, a["self"], spatial, a["output_size"], "adaptive_max_pool")
        return y, Deferred(lambda: _unsupported("adaptive max-pool indices"))
    return fn


_aten_fn(aten.adaptive_max_pool1d.default)(_adaptive_max_fn(1))
_aten_fn(aten.adaptive_max_pool2d.default)(_adaptive_max_fn(2))
_aten_fn(aten.adaptive_max_pool3d.default)(_adaptive_max_fn(3))


def resize(em: Emitter, x: Any, mode: str, scale_factors: Any,
           align_corners: bool | None) -> Value:
    """torch's interpolate. `scale_factors` only when torch maps coordinates with them
    (else, and for integer factors, the output sizes say the same)."""
    xv = em.value(x)
    spatial = em.rank(xv) - 2
    attrs: dict[str, Any] = {}
    if mode in ("nearest", "nearest-exact"):
        attrs["mode"] = "nearest"
        if mode == "nearest":
            attrs.update(coordinate_mode="asymmetric", nearest_mode="floor")
        else:
            attrs.update(coordinate_mode="half_pixel", nearest_mode="round_prefer_ceil")
    elif mode in ("linear", "bilinear", "trilinear", "bicubic"):
        attrs["mode"] = "cubic" if mode == "bicubic" else "linear"
        attrs["coordinate_mode"] = "align_corners" if align_corners else "half_pixel"
    else:
        raise Unsupported(f"interpolation mode {mode!r}")
    out_shape = em.out_shape()
    in_shape = em.shape(xv)
    if scale_factors is not None and not align_corners:
        scales = _float_tuple(scale_factors, spatial)
        sizes = [in_shape[2 + i] for i in range(spatial)]
        exact = all(isinstance(s, int) and float(sc).is_integer() for s, sc in
                    zip(sizes, scales, strict=True))
        if exact:  # torch uses in/out for integer factors: sizes say the same
            attrs["sizes"] = tuple(int(d) for d in out_shape[2:])  # type: ignore[arg-type]
        else:
            attrs["scales"] = scales
    else:
        dims = out_shape[2:]
        if not all(isinstance(d, int) for d in dims):
            raise Unsupported("resize to a symbolic size")
        attrs["sizes"] = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    return em.op("resize", [xv], **attrs)


def _float_tuple(value: Any, count: int) -> tuple[float, ...]:
    if isinstance(value, int | float):
        return (float(value),) * count
    items = tuple(float(v) for v in value)
    return items * count if len(items) == 1 and count > 1 else items


def _upsample(mode: str, spatial: int, vec: bool) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = a["input"] if "input" in a else a["self"]
        align = a.get("align_corners")
        if vec:
            scales = a["scale_factors"] if a["output_size"] is None else None
            return resize(em, x, mode, scales, align)
        given = [a[k] for k in ("scales_d", "scales_h", "scales_w", "scales") if k in a]
        use = given if given and all(g is not None for g in given) else None
        return resize(em, x, mode, use, align)
    return fn


for _mode, _sp, _packet in (("nearest", 1, "upsample_nearest1d"),
                            ("nearest", 2, "upsample_nearest2d"),
                            ("nearest", 3, "upsample_nearest3d"),
                            ("nearest-exact", 1, "_upsample_nearest_exact1d"),
                            ("nearest-exact", 2, "_upsample_nearest_exact2d"),
                            ("nearest-exact", 3, "_upsample_nearest_exact3d"),
                            ("linear", 1, "upsample_linear1d"),
                            ("bilinear", 2, "upsample_bilinear2d"),
                            ("trilinear", 3, "upsample_trilinear3d"),
                            ("bicubic", 2, "upsample_bicubic2d")):
    _aten_fn(_op(_packet, "vec"))(_upsample(_mode, _sp, True))
    _aten_fn(_op(_packet, "default"))(_upsample(_mode, _sp, False))


# -- reductions and softmax ---------------------------------------------------------------


def _reduce(name: str, dim_key: str = "dim") -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"])
        dtype = a.get("dtype")
        out = em.out_dtype()
        if dtype is not None or (name in ("reduce_mean",) and out != em.type(x).dtype) or (name == "reduce_sum" and out != em.type(x).dtype):
            x = em.cast(x, out)
        axes = _dims(a.get(dim_key), em.rank(x))
        return em.op(name, [x], axes=axes, keepdims=bool(a.get("keepdim", False)))
    return fn


_aten_fn(aten.sum.dim_IntList, aten.sum.default)(_reduce("reduce_sum"))
_aten_fn(aten.mean.dim, aten.mean.default)(_reduce("reduce_mean"))
_aten_fn(aten.amax.default)(_reduce("reduce_max"))
_aten_fn(aten.amin.default)(_reduce("reduce_min"))
_aten_fn(aten.prod.dim_int, aten.prod.default)(_reduce("reduce_prod"))
_aten_fn(aten.logsumexp.default)(_reduce("reduce_log_sum_exp"))


@_aten_fn(aten.max.default, aten.min.default)
def _max_all(em: Emitter, a: Args) -> Value:
    name = "reduce_max" if a["__op__"] is aten.max.default else "reduce_min"
    return em.op(name, [em.value(a["self"])], axes=(), keepdims=False)


def _max_dim(name: str, arg: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        x = em.value(a["self"])
        axis = _axis(int(a["dim"]), em.rank(x))
        keep = bool(a["keepdim"])
        values = em.op(name, [x], axes=(axis,), keepdims=keep)
        indices = Deferred(lambda: em.op(arg, [x], axis=axis, keepdims=keep))
        return values, indices
    return fn


_aten_fn(aten.max.dim)(_max_dim("reduce_max", "argmax"))
_aten_fn(aten.min.dim)(_max_dim("reduce_min", "argmin"))


def _arg_fn(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["self"])
        keep = bool(a["keepdim"])
        if a["dim"] is None:
            flat = em.op("reshape", [x], shape=(-1,))
            y = em.op(name, [flat], axis=0, keepdims=False)
            if keep:
                y = em.op("reshape", [y], shape=(1,) * em.rank(x))
            return y
        return em.op(name, [x], axis=_axis(int(a["dim"]), em.rank(x)), keepdims=keep)
    return fn


_aten_fn(aten.argmax.default)(_arg_fn("argmax"))
_aten_fn(aten.argmin.default)(_arg_fn("argmin"))


@_aten_fn(aten.var.correction, aten.var.dim, aten.std.correction, aten.std.dim,
          aten.var_mean.correction)
def _var(em: Emitter, a: Args) -> Any:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    rank = em.rank(x)
    axes = _dims(a.get("dim"), rank)
    keep = bool(a.get("keepdim", False))
    correction = a.get("correction")
    if correction is None:
        correction = 1 if a.get("unbiased", True) else 0
    shape = em.shape(x)
    n = 1
    for i in axes:
        if not isinstance(shape[i], int):
            raise Unsupported("variance over a symbolic dim")
        n *= shape[i]  # type: ignore[operator]
    dtype = em.type(x).dtype
    mean = em.op("reduce_mean", [x], axes=axes, keepdims=True)
    c = em.op("sub", [x, mean])
    total = em.op("reduce_sum", [em.op("mul", [c, c])], axes=axes, keepdims=keep)
    var = em.op("div", [total, em.scalar(max(n - float(correction), 0.0), dtype)])
    target = a.get("__op__")
    if target in (aten.std.correction, aten.std.dim):
        return em.op("sqrt", [var])
    if target is aten.var_mean.correction:
        m = mean if keep else em.op("squeeze", [mean], axes=axes)
        return var, m
    return var


@_aten_fn(aten.linalg_vector_norm.default)
def _vector_norm(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    axes = _dims(a.get("dim"), em.rank(x))
    keep = bool(a["keepdim"])
    order = float(a["ord"])
    if order == 2:
        return em.op("reduce_l2", [x], axes=axes, keepdims=keep)
    if order == 1:
        return em.op("reduce_sum", [em.op("abs", [x])], axes=axes, keepdims=keep)
    if math.isinf(order):
        return em.op("reduce_max" if order > 0 else "reduce_min", [em.op("abs", [x])],
                     axes=axes, keepdims=keep)
    raise Unsupported(f"vector norm of order {order}")


def _softmax_fn(name: str) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.cast(em.value(a["self"]), em.out_dtype())
        return em.op(name, [x], axis=_axis(int(a["dim"]), max(em.rank(x), 1)))
    return fn


_aten_fn(aten.softmax.int, aten._softmax.default, _op("_safe_softmax"))(_softmax_fn("softmax"))
_aten_fn(aten.log_softmax.int, aten._log_softmax.default)(_softmax_fn("log_softmax"))


@_aten_fn(aten.cumsum.default, aten.cumsum_.default if hasattr(aten, "cumsum_") else None)
def _cumsum(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), em.out_dtype())
    return em.op("cumsum", [x], axis=_axis(int(a["dim"]), em.rank(x)))


@_aten_fn(aten.topk.default)
def _topk(em: Emitter, a: Args) -> Any:
    x = em.value(a["self"])
    values, indices = em.ops("topk", [x], k=int(a["k"]), axis=_axis(int(a["dim"]), em.rank(x)),
                             largest=bool(a["largest"]), sorted=bool(a["sorted"]))
    return values, indices


@_aten_fn(aten.sort.default, aten.sort.stable)
def _sort(em: Emitter, a: Args) -> Any:
    x = em.value(a["self"])
    values, indices = em.ops("sort", [x], axis=_axis(int(a["dim"]), em.rank(x)),
                             descending=bool(a["descending"]))
    return values, indices


@_aten_fn(aten.argsort.default, _op("argsort", "stable"))
def _argsort(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    _, indices = em.ops("sort", [x], axis=_axis(int(a["dim"]), em.rank(x)),
                        descending=bool(a["descending"]))
    return indices


@_aten_fn(aten.any.default, aten.any.dim, _op("any", "dims"), aten.all.default, aten.all.dim,
          _op("all", "dims"))
def _any_all(em: Emitter, a: Args) -> Value:
    x = em.cast(em.value(a["self"]), DType.BOOL)
    target = a.get("__op__")
    is_any = target in (aten.any.default, aten.any.dim, _op("any", "dims"))
    ints = em.cast(x, DType.INT32)
    dims = a.get("dim")
    axes = _dims(dims, em.rank(x))
    r = em.op("reduce_max" if is_any else "reduce_min", [ints], axes=axes,
              keepdims=bool(a.get("keepdim", False)))
    return em.cast(r, DType.BOOL)


# -- shapes ----------------------------------------------------------------------------------


def _reshape_to(em: Emitter, x: Value, sizes: Sequence[Any]) -> Value:
    items = [s.resolve() if isinstance(s, Deferred) else s for s in sizes]
    if any(isinstance(s, int) and s == 0 for s in items):
        raise Unsupported("reshape to a zero-size dim")
    shape = em.ints(items)
    if isinstance(shape, tuple):
        return em.op("reshape", [x], shape=shape)
    return em.op("reshape", [x, shape])


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


def _expand_to(em: Emitter, x: Value, sizes: Sequence[Any]) -> Value:
    items = [s.resolve() if isinstance(s, Deferred) else s for s in sizes]
    in_shape = em.shape(x)
    offset = len(items) - len(in_shape)
    resolved: list[Any] = []
    for j, s in enumerate(items):
        if isinstance(s, int) and s == -1 and j >= offset:
            d = in_shape[j - offset]
            resolved.append(d if isinstance(d, int) else em.size_of(x, j - offset))
        else:
            resolved.append(s)
    if all(isinstance(s, int) for s in resolved) and tuple(resolved) == tuple(in_shape):
        return x
    shape = em.ints(resolved)
    if isinstance(shape, tuple):
        return em.op("expand", [x], shape=shape)
    return em.op("expand", [x, shape])


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


@_aten_fn(aten.narrow.default)
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
    kept = [em.cast(t, out) for t in tensors
            if not (em.type(t).shape == (0,) and em.rank(tensors[0]) != 1)]
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
    x = em.value(a["self"])
    return em.op("gather", [x, em.value(a["index"])], axis=_axis(int(a["dim"]), em.rank(x)))


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


@_aten_fn(aten.one_hot.default)
def _one_hot(em: Emitter, a: Args) -> Value:
    classes = int(a["num_classes"])
    if classes < 0:
        raise Unsupported("one_hot without num_classes")
    return em.op("one_hot", [em.value(a["self"])], depth=classes, dtype=DType.INT64)


@_aten_fn(aten.nonzero.default)
def _nonzero(em: Emitter, a: Args) -> Value:
    nz = em.op("non_zero", [em.value(a["self"])])
    return em.op("permute", [nz], perm=(1, 0))


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
]


def _symbolic_int_op(em: Emitter, name: str, x: Any, y: Any) -> Sym:
    """Arithmetic on symbolic sizes (i64 scalars)."""
    op = {"add": "add", "sub": "sub", "mul": "mul", "floor_div": "floor_div",
          "mod": "mod"}.get(name)
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
            return _symbolic_int_op(em, name, x, y)
        if name == "matmul":
            return em.op("matmul", [em.value(x), em.value(y)])
        if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
            return _compare(em, name, x, y)
        if name.startswith("logical_"):
            if em.out_dtype() != DType.BOOL:
                raise Unsupported("bitwise operators on integers")
            return em.op(name, [em.cast(em.value(x, DType.BOOL), DType.BOOL),
                                em.cast(em.value(y, DType.BOOL), DType.BOOL)])
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
for _inplace, _name in (("add_", "add"), ("sub_", "sub"), ("mul_", "mul"), ("div_", "div")):
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
            from .lower import example_value

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
    return em.value(args[0] if args else kwargs["input"])


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
        from ._util import has_data

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


# -- modules (fx leaf modules) ------------------------------------------------------------


def _input(args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "input") -> Any:
    if args:
        return args[0]
    if name in kwargs:
        return kwargs[name]
    return next(iter(kwargs.values()))


def _mparam(em: Emitter, module: nn.Module, name: str) -> Value | None:
    t = getattr(module, name, None)
    if t is None:
        return None
    path = em.provenance.module_path
    return em.param(f"{path}.{name}" if path else name, t)


@_module(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def _m_conv(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(_input(args, kwargs))
    padding = m.padding
    if m.padding_mode != "zeros":
        mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[m.padding_mode]
        x = pad(em, x, list(m._reversed_padding_repeated_twice), mode, 0.0)
        padding = 0
    return conv(em, x, _mparam(em, m, "weight"), _mparam(em, m, "bias"), m.stride, padding,
                m.dilation, m.groups)


@_module(nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
def _m_conv_t(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) > 1 or kwargs.get("output_size") is not None:
        raise Unsupported("conv transpose with output_size")
    return conv(em, _input(args, kwargs), _mparam(em, m, "weight"), _mparam(em, m, "bias"),
                m.stride, m.padding, m.dilation, m.groups, True, m.output_padding)


@_module(nn.Linear)
def _m_linear(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.op("linear", [em.value(_input(args, kwargs)), _mparam(em, m, "weight"),
                            _mparam(em, m, "bias")])


@_module(nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
def _m_batch_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    use_batch = m.training or m.running_mean is None
    return batch_norm(em, _input(args, kwargs), _mparam(em, m, "weight"), _mparam(em, m, "bias"),
                      _mparam(em, m, "running_mean"), _mparam(em, m, "running_var"),
                      use_batch, m.momentum, m.eps)[0]


@_module(nn.LayerNorm)
def _m_layer_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return layer_norm(em, _input(args, kwargs), m.normalized_shape, _mparam(em, m, "weight"),
                      _mparam(em, m, "bias"), m.eps)[0]


@_module(nn.GroupNorm)
def _m_group_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.op("group_norm", [em.value(_input(args, kwargs)), _mparam(em, m, "weight"),
                                _mparam(em, m, "bias")],
                 num_groups=int(m.num_groups), epsilon=float(m.eps))


if hasattr(nn, "RMSNorm"):
    @_module(nn.RMSNorm)
    def _m_rms_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _rms_norm(em, {"input": _input(args, kwargs), "normalized_shape":
                              m.normalized_shape, "weight": m.weight if m.weight is None
                              else _mparam(em, m, "weight"), "eps": m.eps})


_SIMPLE_ACTIVATIONS: dict[type, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    nn.ReLU: ("relu", lambda m: {}), nn.SiLU: ("silu", lambda m: {}),
    nn.Sigmoid: ("sigmoid", lambda m: {}), nn.Tanh: ("tanh", lambda m: {}),
    nn.Hardswish: ("hardswish", lambda m: {}), nn.Mish: ("mish", lambda m: {}),
    nn.Hardsigmoid: ("hardsigmoid", lambda m: {"alpha": 1 / 6, "beta": 0.5}),
    nn.GELU: ("gelu", lambda m: {"approximate": m.approximate}),
    nn.LeakyReLU: ("leaky_relu", lambda m: {"alpha": float(m.negative_slope)}),
    nn.ELU: ("elu", lambda m: {"alpha": float(m.alpha)}),
    nn.Softplus: ("softplus", lambda m: {"beta": float(m.beta), "threshold": float(m.threshold)}),
    nn.ReLU6: ("clip", lambda m: {"min": 0.0, "max": 6.0}),
    nn.Hardtanh: ("clip", lambda m: {"min": float(m.min_val), "max": float(m.max_val)}),
}


def _activation_module(name: str, attrs: Callable[[Any], dict[str, Any]]) -> Callable[
        [Emitter, Any, tuple[Any, ...], dict[str, Any]], Any]:
    def fn(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return em.op(name, [em.value(_input(args, kwargs))], **attrs(m))
    return fn


for _cls, (_opname, _attrs) in _SIMPLE_ACTIVATIONS.items():
    _module(_cls)(_activation_module(_opname, _attrs))


@_module(nn.PReLU)
def _m_prelu(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _prelu(em, {"self": _input(args, kwargs), "weight": _mparam(em, m, "weight")})


@_module(nn.Softmax, nn.LogSoftmax)
def _m_softmax(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.dim is None:
        raise Unsupported("softmax without dim")
    name = "log_softmax" if isinstance(m, nn.LogSoftmax) else "softmax"
    return _softmax_fn(name)(em, {"self": _input(args, kwargs), "dim": m.dim})


@_module(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
         nn.FeatureAlphaDropout, nn.Identity)
def _m_identity(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.value(_input(args, kwargs))


@_module(nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
def _m_max_pool(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.return_indices:
        raise Unsupported("max pool indices")
    spatial = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3}[type(m)]
    return max_pool(em, _input(args, kwargs), spatial, m.kernel_size, m.stride, m.padding,
                    m.dilation, m.ceil_mode)


@_module(nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
def _m_avg_pool(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    spatial = {nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}[type(m)]
    return avg_pool(em, _input(args, kwargs), spatial, m.kernel_size, m.stride, m.padding,
                    m.ceil_mode, m.count_include_pad, getattr(m, "divisor_override", None))


@_module(nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)
def _m_adaptive_avg(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    spatial = {nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2, nn.AdaptiveAvgPool3d: 3}[type(m)]
    return _adaptive(em, _input(args, kwargs), spatial, m.output_size, "adaptive_avg_pool")


@_module(nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
def _m_adaptive_max(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.return_indices:
        raise Unsupported("adaptive max pool indices")
    spatial = {nn.AdaptiveMaxPool1d: 1, nn.AdaptiveMaxPool2d: 2, nn.AdaptiveMaxPool3d: 3}[type(m)]
    return _adaptive(em, _input(args, kwargs), spatial, m.output_size, "adaptive_max_pool")


@_module(nn.Flatten)
def _m_flatten(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _flatten(em, {"self": _input(args, kwargs), "start_dim": m.start_dim,
                         "end_dim": m.end_dim})


@_module(nn.Unflatten)
def _m_unflatten(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _unflatten(em, {"self": _input(args, kwargs), "dim": m.dim,
                           "sizes": list(m.unflattened_size)})


@_module(nn.Upsample)
def _m_upsample(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if getattr(m, "recompute_scale_factor", None):
        raise Unsupported("recompute_scale_factor")
    scale = None if m.size is not None else m.scale_factor
    return resize(em, _input(args, kwargs), m.mode, scale, m.align_corners)


@_module(nn.Embedding)
def _m_embedding(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.max_norm is not None:
        raise Unsupported("embedding with max_norm")
    return em.op("embedding", [_mparam(em, m, "weight"), em.value(_input(args, kwargs))])


@_module(nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d, nn.ConstantPad1d, nn.ConstantPad2d,
         nn.ConstantPad3d, nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d,
         nn.ReplicationPad1d, nn.ReplicationPad2d, nn.ReplicationPad3d)
def _m_pad(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    mode = "constant"
    if isinstance(m, nn.ReflectionPad1d | nn.ReflectionPad2d | nn.ReflectionPad3d):
        mode = "reflect"
    elif isinstance(m, nn.ReplicationPad1d | nn.ReplicationPad2d | nn.ReplicationPad3d):
        mode = "edge"
    return pad(em, _input(args, kwargs), list(m.padding), mode, getattr(m, "value", 0.0))


@_module(nn.MultiheadAttention)
def _m_mha(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal"]
    defaults: dict[str, Any] = {"need_weights": True, "average_attn_weights": True,
                                "is_causal": False}
    a = {n: _pick(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    if m.bias_k is not None or m.add_zero_attn or (m.dropout and m.training):
        raise Unsupported("MultiheadAttention with bias_k/add_zero_attn/train dropout")
    qkv = None
    if not m._qkv_same_embed_dim:
        qkv = [_mparam(em, m, "q_proj_weight"), _mparam(em, m, "k_proj_weight"),
               _mparam(em, m, "v_proj_weight")]
    causal = bool(a["is_causal"]) and a["attn_mask"] is None
    out, weights = multi_head_attention(
        em, a["query"], a["key"], a["value"], int(m.embed_dim), int(m.num_heads),
        None if qkv else _mparam(em, m, "in_proj_weight"), _mparam(em, m, "in_proj_bias"),
        em.param(_child(em, "out_proj.weight"), m.out_proj.weight),
        None if m.out_proj.bias is None else em.param(_child(em, "out_proj.bias"),
                                                      m.out_proj.bias),
        qkv_weights=qkv, key_padding_mask=a["key_padding_mask"], attn_mask=a["attn_mask"],
        need_weights=bool(a["need_weights"]),
        average_weights=bool(a["average_attn_weights"]), batch_first=bool(m.batch_first),
        causal=causal)
    return out, weights


def _child(em: Emitter, name: str) -> str:
    path = em.provenance.module_path
    return f"{path}.{name}" if path else name


def mutated_input(node: torch.fx.Node, gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The fx node an in-place op writes to (its later uses see the new value)."""
    first = node.args[0] if node.args else None
    if not isinstance(first, torch.fx.Node):
        return None
    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
        args = target._schema.arguments
        if args and args[0].alias_info is not None and args[0].alias_info.is_write:
            return first
        return None
    if node.op == "call_function" and target in (operator.iadd, operator.isub, operator.imul,
                                                 operator.itruediv, torch.relu_, F.relu_):
        return first
    if node.op == "call_function" and target in (F.relu, F.relu6, F.silu, F.hardswish,
                                                 F.hardsigmoid, F.elu, F.leaky_relu,
                                                 F.hardtanh, F.mish, F.dropout):
        return first if node.kwargs.get("inplace") else None
    if node.op == "call_method" and target in _INPLACE_METHODS:
        return first
    if node.op == "call_module":
        try:
            module = gm.get_submodule(str(target))
        except AttributeError:
            return None
        return first if getattr(module, "inplace", False) is True else None
    return None


_INPLACE_METHODS = {"add_", "sub_", "mul_", "div_", "relu_", "clamp_", "masked_fill_",
                    "zero_", "fill_", "copy_", "sigmoid_", "tanh_"}


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
        training = _pick(args, kwargs, 3, "training", True)
        p = float(_pick(args, kwargs, 1, "p", 0.0))
        if training and p > 0.0:
            raise Unsupported("stochastic depth in training mode (random)")
        return em.value(_pick(args, kwargs, 0, "input"))

    FUNCTIONS[stochastic_depth] = _stochastic_depth


_register_torchvision()
