"""Shared pieces of the lowering tables: the tables themselves, schema binding, the
registration decorators and small helpers every op family uses."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from irbridge.dtypes import DType
from irbridge.ir import Value

from .._util import to_dtype, to_torch_dtype
from ..lower import Deferred, Emitter, Refused, Sym, Unsupported


class _AtenOps:
    """`torch.ops.aten`, where an op or overload this torch build lacks reads as None
    (the tables skip it) instead of failing the import: the tables name ops of the pinned
    torch, and an older build then lowers everything it has."""

    def __getattr__(self, name: str) -> Any:
        packet = getattr(torch.ops.aten, name, None)
        return _AbsentPacket() if packet is None else _Packet(packet)


class _Packet:
    def __init__(self, packet: Any) -> None:
        self._packet = packet

    def __getattr__(self, name: str) -> Any:
        return getattr(self._packet, name, None)


class _AbsentPacket:
    def __getattr__(self, name: str) -> None:
        return None


aten: Any = _AtenOps()
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
            handler = ATEN.get(node.target)
            if handler is None and _LATE and _register_late():
                handler = ATEN.get(node.target)
            return handler
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


_LATE: list[tuple[str, str, str, AtenFn]] = []
"""(namespace, op, overload, handler) of custom ops that exist only once a library has
registered them (`torch.ops.transformers.*` after `transformers.integrations.moe` is
imported): `lookup` adds them to `ATEN`, keyed by the op object, once they exist."""


def _late(namespace: str, name: str, overload: str = "default") -> Callable[[AtenFn], AtenFn]:
    """Register an ATen-style handler of a library's custom op (`namespace::name.overload`)
    that this process may not have loaded yet: the handler enters `ATEN` when a graph that
    holds the op is lowered (the op then exists), without importing the library here."""
    def deco(fn: AtenFn) -> AtenFn:
        _LATE.append((namespace, name, overload, fn))
        return fn
    return deco


def _register_late() -> bool:
    """Move the `_late` handlers whose custom ops now exist into `ATEN`; whether any moved."""
    moved = False
    for entry in list(_LATE):
        namespace, name, overload, fn = entry
        packet = getattr(getattr(torch.ops, namespace), name, None)
        op = getattr(packet, overload, None) if packet is not None else None
        if isinstance(op, torch._ops.OpOverload):
            _aten_fn(op)(fn)
            _LATE.remove(entry)
            moved = True
    return moved


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



def _reshape_to(em: Emitter, x: Value, sizes: Sequence[Any]) -> Value:
    items = [s.resolve() if isinstance(s, Deferred) else s for s in sizes]
    if any(isinstance(s, int) and s == 0 for s in items):
        # an empty result holds no data: any tensor of its shape is it (the IR's reshape
        # reads a 0 in its shape as "keep this dim", ONNX's convention)
        if all(isinstance(s, int) and s >= 0 for s in items):
            return em.op("full", [], shape=tuple(int(s) for s in items), value=0,
                         dtype=em.type(x).dtype)
        raise Unsupported("reshape to a zero-size dim")
    shape = em.ints(items)
    if isinstance(shape, tuple):
        return em.op("reshape", [x], shape=shape)
    return em.op("reshape", [x, shape])


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


def dropout(em: Emitter, x: Any, p: Any, training: Any) -> Value:
    """Dropout in eval mode (or with p = 0): the identity. An active one (training mode,
    p > 0) draws a random mask in eager torch that no IR computation reproduces: the
    capture is refused, naming the node, rather than written as something else."""
    if training is not False and p != 0:
        node = em.node.name if em.node is not None else "?"
        where = em.provenance.module_path
        root = em.lowerer.owner.capture.root
        hint = ("call model.eval() before capturing" if root.training else
                "the model is in eval mode but F.dropout's training argument defaults to "
                "True: pass training=self.training")
        raise Refused(f"dropout {node}{f' in {where}' if where else ''} (p={p}) is active "
                      "(training mode): eager torch zeroes random elements and the IR would "
                      f"not; {hint}")
    return em.value(x)


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
                                                 operator.itruediv, operator.iand, operator.ior,
                                                 operator.ixor, operator.ilshift,
                                                 operator.irshift, torch.relu_, F.relu_):
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
                    "zero_", "fill_", "copy_", "sigmoid_", "tanh_", "__iand__", "__ior__",
                    "__ixor__", "__ilshift__", "__irshift__", "bitwise_and_", "bitwise_or_",
                    "bitwise_xor_", "bitwise_left_shift_", "bitwise_right_shift_",
                    "bitwise_not_"}
