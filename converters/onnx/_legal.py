"""Element types of emitted ONNX nodes: every node the exporter writes takes input types
that its ONNX op accepts at the export opset, and that onnxruntime's CPU kernels run.

The exporter knows the element type of every ONNX value it names (graph inputs, weights,
constants, and the outputs of each node it emits, inferred from the op's schema). Before
a default-domain node is written, `plan` binds each type parameter of the op's schema
(`onnx.defs.get_schema(op, opset).type_constraints`) to the types of the inputs that use
it; a type the parameter does not allow, in the schema or (with onnxruntime installed, as
irbridge depends on it) in any of onnxruntime's CPU kernels for that op version, is
replaced by the first type of `WIDER` that the op accepts and that holds every value of
the original exactly (bool -> int32 for `Mul`/`ArgMax`/`TopK`, int8 -> int32, bfloat16
-> float32, ...): inputs are cast to it and outputs of that parameter are cast back.
float16 is written as it is wherever the schema takes it and onnxruntime has a float32
kernel: onnxruntime's CPU provider runs such a node in float32 itself (its
InsertCastTransformer, which also drops the float16 rounding between two such nodes), so
the file keeps the model's float16 ops as they were, and onnxruntime computes them as it
computes the original model (an export with explicit casts rounds every intermediate to
float16 instead: 2 ulps off the expected values of onnx's fp16 attention test).
Logical ops (`Not`, `And`, `Or`, `Xor`, and `NonZero`) take any other type as bool (`x != 0`), which is
what the neutral logical ops mean. When no such type exists (int64 or float64 where the
kernel lacks it: a float64 `Conv` in onnxruntime) the export is refused with one line
naming the node, never written as a file the checker rejects or onnxruntime cannot load.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from onnx import TensorProto

from irbridge.converters.onnx._common import dtype_from_onnx, dtype_to_onnx
from irbridge.dtypes import DType

D = DType
WIDER: dict[DType, tuple[DType, ...]] = {
    # types that hold every value of the key exactly, in order of preference
    D.BOOL: (D.INT32, D.INT64, D.FLOAT32, D.UINT8, D.INT8, D.FLOAT64),
    D.INT8: (D.INT32, D.INT16, D.INT64, D.FLOAT32, D.FLOAT64),
    D.UINT8: (D.INT32, D.INT16, D.UINT16, D.INT64, D.FLOAT32, D.FLOAT64),
    D.INT16: (D.INT32, D.INT64, D.FLOAT32, D.FLOAT64),
    D.UINT16: (D.INT32, D.UINT32, D.INT64, D.FLOAT32, D.FLOAT64),
    D.INT32: (D.INT64, D.FLOAT64),
    D.UINT32: (D.INT64, D.UINT64, D.FLOAT64),
    D.FLOAT16: (D.FLOAT32, D.FLOAT64),
    D.BFLOAT16: (D.FLOAT32, D.FLOAT64),
    D.FLOAT32: (D.FLOAT64,),
    D.INT4: (D.INT8, D.INT32, D.INT16, D.INT64, D.FLOAT32, D.FLOAT64),
    D.UINT4: (D.UINT8, D.INT32, D.INT8, D.INT16, D.UINT16, D.INT64, D.FLOAT32, D.FLOAT64),
    D.INT2: (D.INT8, D.INT32, D.INT16, D.INT64, D.FLOAT32, D.FLOAT64),
    D.UINT2: (D.UINT8, D.INT32, D.INT8, D.INT16, D.UINT16, D.INT64, D.FLOAT32, D.FLOAT64),
    D.FLOAT8_E4M3FNUZ: (D.FLOAT16, D.FLOAT32, D.FLOAT64),   # no -0 or infinities to lose
    D.FLOAT8_E5M2FNUZ: (D.FLOAT16, D.FLOAT32, D.FLOAT64),
    D.FLOAT4_E2M1FN: (D.FLOAT16, D.FLOAT32, D.FLOAT64),
    D.FLOAT8_E8M0FNU: (D.FLOAT32, D.FLOAT64),  # 2^-127 .. 2^127: float32 (subnormal) holds it
}
LOGICAL = {"Not", "And", "Or", "Xor", "NonZero"}
"""Ops whose inputs mean truth values: any type is taken as bool (x != 0)."""


def type_string(dtype: DType) -> str:
    return f"tensor({TensorProto.DataType.Name(dtype_to_onnx(dtype)).lower()})"


_FROM_STRING: dict[str, DType] = {}
for _code in TensorProto.DataType.values():
    _dtype = dtype_from_onnx(_code)
    if _dtype is not None:
        _FROM_STRING[f"tensor({TensorProto.DataType.Name(_code).lower()})"] = _dtype


@functools.cache
def schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


@functools.cache
def _runtime_kernels() -> dict[str, list[tuple[int, int, dict[str, list[str]]]]]:
    """onnxruntime's CPU kernels of the default domain: op -> [(first, last version,
    type constraints)]; empty when onnxruntime is not installed."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    except ImportError:
        return {}
    table: dict[str, list[tuple[int, int, dict[str, list[str]]]]] = {}
    for kernel in ort_state.get_all_opkernel_def():
        if kernel.provider != "CPUExecutionProvider" or kernel.domain not in ("", "ai.onnx"):
            continue
        first, last = kernel.version_range
        table.setdefault(kernel.op_name, []).append((first, last,
                                                     dict(kernel.type_constraints)))
    return table


@functools.cache
def allowed(op: str, opset: int) -> dict[str, frozenset[DType]]:
    """Type parameter -> the IR dtypes the op takes there at `opset`: the schema's, less
    those no onnxruntime CPU kernel of that op version registers."""
    found = schema(op, opset)
    if found is None:
        return {}
    out: dict[str, frozenset[DType]] = {}
    kernels = [k for first, last, k in _runtime_kernels().get(op, ())
               if first <= found.since_version <= last]
    body = _function_types(found, opset) if not kernels and _runtime_kernels() else None
    first = _formal_type(found, 0, outputs=False)  # the parameter the body types are of
    for constraint in found.type_constraints:
        types = {_FROM_STRING[t] for t in constraint.allowed_type_strs if t in _FROM_STRING}
        name = constraint.type_param_str
        runtime = [set(k[name]) for k in kernels if name in k]
        if runtime:
            kernel = {_FROM_STRING[t] for t in set().union(*runtime) if t in _FROM_STRING}
            if DType.FLOAT32 in kernel:
                kernel.add(DType.FLOAT16)  # run in float32 by onnxruntime itself (see above)
            types &= kernel
        elif body is not None and name == first:
            types &= body
        out[name] = frozenset(types)
    return out


def _function_types(found: onnx.defs.OpSchema, opset: int) -> frozenset[DType] | None:
    """For an op onnxruntime has no kernel for but runs as its ONNX function (HardSwish,
    Mish, ...; GroupNormalization and the losses, whose body onnx builds per node): the
    types every default-domain op of the body takes as its first input. They bound the
    op's own first-input type parameter only (a bfloat16 GroupNormalization is widened to
    float32: onnxruntime expands its body and has no bfloat16 Mul)."""
    if getattr(found, "has_function", False):  # (not in onnx's type stubs)
        body = list(found.function_body.node)
    elif getattr(found, "has_context_dependent_function", False):
        body = _context_body(found, opset)  # GroupNormalization, LayerNormalization-17, ...
    else:
        return None
    types: frozenset[DType] | None = None
    for node in body:
        if node.domain not in ("", "ai.onnx") or node.op_type == found.name:
            continue
        inner = schema(node.op_type, opset)
        param = _formal_type(inner, 0, outputs=False) if inner is not None else None
        accepted = allowed(node.op_type, opset).get(param or "")
        if accepted is not None:
            types = accepted if types is None else types & accepted
    return types


_DUMMY_ATTRS = {
    onnx.defs.OpSchema.AttrType.INT: 1, onnx.defs.OpSchema.AttrType.FLOAT: 1.0,
    onnx.defs.OpSchema.AttrType.INTS: [1], onnx.defs.OpSchema.AttrType.FLOATS: [1.0],
    onnx.defs.OpSchema.AttrType.STRING: "", onnx.defs.OpSchema.AttrType.STRINGS: [""],
}


def _context_body(found: onnx.defs.OpSchema, opset: int) -> list[onnx.NodeProto]:
    """The body onnx builds for an op whose function depends on the node (its attributes
    and input types): built for float32 inputs and placeholder values of the required
    attributes, for the ops it uses (their types are what matters here). Empty when onnx
    cannot build it for such a node."""
    attrs: dict[str, Any] = {}
    for name, attr in found.attributes.items():
        if attr.required:
            if attr.type not in _DUMMY_ATTRS:
                return []
            attrs[name] = _DUMMY_ATTRS[attr.type]
    inputs = [f"in{k}" for k in range(len(found.inputs))]
    node = onnx.helper.make_node(found.name, inputs, [f"out{k}" for k in
                                                      range(len(found.outputs))], **attrs)
    types = [onnx.helper.make_tensor_type_proto(TensorProto.FLOAT, None).SerializeToString()
             for _ in inputs]
    # (neither attribute is in onnx's type stubs)
    versions = [v for v in getattr(found, "context_dependent_function_opset_versions", ())
                if v <= opset]
    try:
        built = found.get_context_dependent_function_with_opset_version(  # type: ignore[attr-defined]
            max(versions, default=opset), node.SerializeToString(), types)
    except Exception:  # onnx refuses the placeholder node: no body to read
        return []
    function = onnx.FunctionProto()
    function.ParseFromString(built)
    return list(function.node)


def _formal_type(found: onnx.defs.OpSchema, index: int, outputs: bool) -> str | None:
    formals = found.outputs if outputs else found.inputs
    if not formals:
        return None
    if index < len(formals):
        return str(formals[index].type_str)
    last = formals[-1]
    variadic = last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    return str(last.type_str) if variadic else None


class Plan:
    """What `plan` decided for one node: per input index the type to cast it to, per
    output index the type the node computes it in (to be cast back to `back[index]`)."""

    def __init__(self) -> None:
        self.cast_inputs: dict[int, DType] = {}
        self.computed: dict[int, DType] = {}
        self.back: dict[int, DType] = {}


class IllegalType(Exception):
    """No type the op accepts holds the values of `dtype` exactly."""

    def __init__(self, op: str, param: str, dtype: DType, accepted: frozenset[DType]) -> None:
        names = ", ".join(sorted(d.short for d in accepted)) or "none"
        holds = "" if op == "Cast" else \
            f", and none of those holds every {dtype.short} value"
        super().__init__(f"ONNX {op} takes no {dtype.short} for {param} (accepted by the "
                         f"schema and onnxruntime's CPU kernels: {names}){holds}")


def check_cast(opset: int, to: int) -> None:
    """A Cast's target type (an attribute, bound to no input): raises IllegalType when
    neither the schema nor onnxruntime's kernels produce it (complex: ONNX has no Cast
    to complex types)."""
    target = dtype_from_onnx(to)
    accepted = allowed("Cast", opset).get("T2")
    if target is not None and accepted is not None and target not in accepted:
        raise IllegalType("Cast", "its result type T2", target, accepted)


def first_legal_opset(op: str, start: int, stop: int, in_types: Sequence[DType | None],
                      attrs: Mapping[str, Any]) -> int | None:
    """The first opset in start..stop at which `plan` accepts the node, else None."""
    for opset in range(start, stop + 1):
        try:
            plan(op, opset, in_types, attrs)
        except IllegalType:
            continue
        return opset
    return None


def plan(op: str, opset: int, in_types: Sequence[DType | None],
         attrs: Mapping[str, Any] | None = None) -> Plan | None:
    """The casts node `op` needs, or None when its input types are accepted as they are.
    Raises IllegalType when no accepted type holds an input's values (or, for a Cast,
    when its target type `attrs["to"]` cannot be produced)."""
    if op == "Cast" and attrs is not None and "to" in attrs:
        check_cast(opset, int(attrs["to"]))
    found = schema(op, opset)
    if found is None:
        return None
    accepts = allowed(op, opset)
    bound: dict[str, DType] = {}
    for index, dtype in enumerate(in_types):
        param = _formal_type(found, index, outputs=False)
        if dtype is not None and param in accepts and param not in bound:
            bound[param] = dtype
    result = Plan()
    for param, dtype in bound.items():
        ok = accepts[param]
        if dtype in ok:
            continue
        target: DType | None = DType.BOOL if op in LOGICAL and DType.BOOL in ok else \
            next((w for w in WIDER.get(dtype, ()) if w in ok), None)
        if target is None or op == "Cast":  # widening would take a Cast of the same input
            raise IllegalType(op, param, dtype, ok)
        for index, _ in enumerate(in_types):
            if _formal_type(found, index, outputs=False) == param:
                result.cast_inputs[index] = target
        if target is DType.BOOL and op in LOGICAL:
            continue  # the result is the truth value: bool, as the neutral op's
        for index in range(max(len(found.outputs), 1)):
            if _formal_type(found, index, outputs=True) == param:
                result.computed[index] = target
                result.back[index] = dtype
    return result if result.cast_inputs else None


def output_types(op: str, opset: int, in_types: Sequence[DType | None], count: int,
                 attrs: Mapping[str, Any]) -> list[DType | None]:
    """The element types of a node's outputs, from its schema and its inputs' types."""
    if op == "Cast":
        return [dtype_from_onnx(int(attrs["to"]))]
    if op == "CastLike":
        return [in_types[1] if len(in_types) > 1 else None]
    if op in ("Constant", "ConstantOfShape"):
        value = attrs.get("value")
        if isinstance(value, TensorProto):
            return [dtype_from_onnx(value.data_type)]
        return [DType.FLOAT32 if op == "ConstantOfShape" else None]
    found = schema(op, opset)
    if found is None:
        return [None] * count
    bound: dict[str, DType] = {}
    for index, dtype in enumerate(in_types):
        param = _formal_type(found, index, outputs=False)
        if dtype is not None and param is not None and param not in bound:
            bound[param] = dtype
    out: list[DType | None] = []
    for index in range(count):
        param = _formal_type(found, index, outputs=True)
        if param is None:
            out.append(None)
        elif param in bound:
            out.append(bound[param])
        elif param in _FROM_STRING:
            out.append(_FROM_STRING[param])
        else:
            schema_types = [c for c in found.type_constraints if c.type_param_str == param]
            strs = schema_types[0].allowed_type_strs if schema_types else []
            out.append(_FROM_STRING.get(strs[0]) if len(strs) == 1 else None)
    return out
