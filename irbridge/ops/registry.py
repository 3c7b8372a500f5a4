"""The op registry: the one place that knows what every neutral op means.

An `OpSchema` holds an op's inputs and typed attributes, its output type inference, its
cost (MACs and non-matmul FLOPs; bytes are derived here from tensor types), its numpy
reference implementation and, optionally, a decomposition into other neutral ops for
back-ends that lack it. Op definitions live in the sibling modules and register
themselves at import time; `irbridge.ops` imports them all.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError, OpError
from irbridge.ir import AttrValue, Cost, Graph, Node, Tensor, TensorType, Value, normalize_attr

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder

OPSET_VERSION = 1
"""Version of the neutral op set. Changelog in docs/ops.md (generated): 1 = 2026-11-22."""


class Category(enum.Enum):
    """What kind of work an op does; analysis partitions by category, never by name."""

    MATMUL = "matmul"            # matmul, gemm, linear: matmul-like FLOPs
    CONV = "conv"                # convolutions: matmul-like FLOPs
    ATTENTION = "attention"      # scaled dot product attention: two matmuls + softmax
    NORM = "norm"                # batch/layer/group/RMS norm
    SOFTMAX = "softmax"
    ACTIVATION = "activation"
    ELEMENTWISE = "elementwise"  # arithmetic, comparisons, logic, casts
    REDUCTION = "reduction"
    POOL = "pool"
    SHAPE = "shape"              # metadata-only reshapes (no data movement needed)
    DATA_MOVEMENT = "data_movement"  # copies: transpose, slice, concat, gather, pad
    CONSTANT = "constant"
    CONTROL = "control"
    LINALG = "linalg"            # factorisations and solves: costs are LAPACK flop counts
    OTHER = "other"

    @property
    def matmul_like(self) -> bool:
        return self in (Category.MATMUL, Category.CONV, Category.ATTENTION)


class AttrKind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    STRING = "string"
    BOOL = "bool"
    INTS = "ints"
    FLOATS = "floats"
    STRINGS = "strings"
    DTYPE = "dtype"
    TENSOR = "tensor"
    GRAPH = "graph"
    GRAPHS = "graphs"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of an attribute that every node must set."""


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: AttrKind
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple[str, ...] = ()
    empty_means: int | None = None
    """INTS whose empty default stands for this value in every position (strides: 1)."""

    def same(self, a: Any, b: Any) -> bool:
        """Whether two resolved values mean the same: equal, or one empty and the other
        `empty_means` in every position (an ONNX dilations [1,1] and StableHLO's none)."""
        if a == b:
            return True
        if self.empty_means is None or not isinstance(a, tuple) or not isinstance(b, tuple):
            return False
        if a and b:
            return False
        return all(v == self.empty_means for v in a or b)

    def check(self, value: AttrValue, where: str) -> AttrValue:
        ok = {
            AttrKind.INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
            AttrKind.FLOAT: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            AttrKind.STRING: lambda v: isinstance(v, str),
            AttrKind.BOOL: lambda v: isinstance(v, bool) or v in (0, 1),
            AttrKind.INTS: lambda v: isinstance(v, tuple) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in v),
            AttrKind.FLOATS: lambda v: isinstance(v, tuple) and all(
                isinstance(x, int | float) for x in v),
            AttrKind.STRINGS: lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
            AttrKind.DTYPE: lambda v: isinstance(v, DType),
            AttrKind.TENSOR: lambda v: isinstance(v, Tensor),
            AttrKind.GRAPH: lambda v: isinstance(v, Graph),
            AttrKind.GRAPHS: lambda v: isinstance(v, tuple) and all(isinstance(x, Graph) for x in v),
        }[self.kind]
        if not ok(value):
            raise OpError(f"{where}: attribute {self.name!r} must be {self.kind.value}, got {value!r}")
        if self.choices and value not in self.choices:
            raise OpError(f"{where}: attribute {self.name!r} must be one of "
                          f"{', '.join(self.choices)}, got {value!r}")
        if self.kind is AttrKind.FLOAT:
            return float(value)  # type: ignore[arg-type]
        if self.kind is AttrKind.BOOL:
            return bool(value)
        return value


def attr(name: str, kind: AttrKind, default: Any = REQUIRED, doc: str = "",
         choices: Sequence[str] = (), empty_means: int | None = None) -> AttrSpec:
    return AttrSpec(name, kind, default, doc, tuple(choices), empty_means)


@dataclass(frozen=True)
class InputSpec:
    name: str
    optional: bool = False
    variadic: bool = False  # only the last input; takes all remaining operands


def inputs(*specs: str) -> tuple[InputSpec, ...]:
    """Parse compact input specs: "x", "bias?" (optional), "xs*" (variadic)."""
    parsed = []
    for spec in specs:
        if spec.endswith("?"):
            parsed.append(InputSpec(spec[:-1], optional=True))
        elif spec.endswith("*"):
            parsed.append(InputSpec(spec[:-1], variadic=True))
        else:
            parsed.append(InputSpec(spec))
    return tuple(parsed)


@dataclass
class OpContext:
    """What infer and cost functions see of one node."""

    op: str
    input_types: list[TensorType | None]
    attrs: dict[str, Any]
    output_types: list[TensorType | None] = field(default_factory=list)
    constants: list[np.ndarray | None] = field(default_factory=list)
    where: str = ""

    def input(self, index: int) -> TensorType:
        """Type of a present input, or an OpError naming the op."""
        if index >= len(self.input_types) or self.input_types[index] is None:
            raise OpError(f"{self.where or self.op}: input {index} is missing or untyped")
        t = self.input_types[index]
        assert t is not None
        return t

    def has_input(self, index: int) -> bool:
        return index < len(self.input_types) and self.input_types[index] is not None

    def shape(self, index: int) -> tuple[int, ...]:
        """Static shape of an input, or an OpError if it is symbolic."""
        t = self.input(index)
        if not t.is_static:
            raise OpError(f"{self.where or self.op}: input {index} has no static shape ({t})")
        return t.static_shape()

    def out_numel(self, index: int = 0) -> int:
        t = self.output_types[index] if index < len(self.output_types) else None
        n = t.numel() if t is not None else None
        return int(n) if n is not None else 0

    def constant(self, index: int) -> np.ndarray | None:
        return self.constants[index] if index < len(self.constants) else None

    def fail(self, problem: str) -> OpError:
        return OpError(f"{self.where or self.op}: {problem}")


@dataclass(frozen=True)
class Flops:
    """What an op's cost function returns; bytes are filled in by the registry.

    `reads` is for ops that touch only part of an input (lookups: gather, embedding): the
    bytes read from each input, by position; None (or a missing position) means the whole
    tensor, the default for every other op."""

    macs: int = 0
    other: int = 0
    reads: tuple[int | None, ...] = ()
    repeats: int | None = None
    """Control flow: how many times the bodies run, where the op knows it statically (a
    loop with a constant trip count and no cond); None: unknown, each body counted once."""
    one_body: bool = False
    """Control flow: the bodies are alternatives of which one runs per execution (`if`):
    the costliest counts, not their sum."""


@dataclass
class RefContext:
    """What reference implementations see beyond their inputs."""

    output_types: list[TensorType | None]
    run_graph: Callable[[Graph, Sequence[np.ndarray]], list[np.ndarray]]
    where: str = ""


InferFn = Callable[[OpContext], list[TensorType]]
CostFn = Callable[[OpContext], Flops]
ReferenceFn = Callable[[list[np.ndarray | None], dict[str, Any], RefContext], list[np.ndarray]]
DecomposeFn = Callable[["GraphBuilder", list[Value | None], dict[str, Any]], list[Value]]


class LazyDecompositions:
    """The decompositions of one module, imported when an exporter first calls one:
    `LazyDecompositions("irbridge.ops._gamma_decomp").lgamma_decompose` is a function that
    imports the module and calls its `lgamma_decompose`. The big decomposition modules
    (special functions, linear algebra) then stay out of the start-up of the commands that
    only read a file. `tests/ops` checks that every target exists."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name: str) -> DecomposeFn:
        if name.startswith("__"):
            raise AttributeError(name)
        module = self._module

        def decompose(gb: GraphBuilder, xs: list[Value | None],
                      attrs: dict[str, Any]) -> list[Value]:
            fn: DecomposeFn = getattr(importlib.import_module(module), name)
            return fn(gb, xs, attrs)

        decompose.__name__ = decompose.__qualname__ = name
        decompose.lazy_target = (module, name)  # type: ignore[attr-defined]
        return decompose


@dataclass(frozen=True)
class OpSchema:
    name: str
    category: Category
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...]
    infer: InferFn
    cost: CostFn
    reference: ReferenceFn
    doc: str
    decompose: DecomposeFn | None = None
    cost_doc: str = ""
    since_version: int = 1
    variadic_outputs: bool = False  # outputs[-1] repeats (split, loop)
    broadcast: bool = False
    """The output only repeats input 0's elements along broadcast dims (expand): a consumer
    can read input 0 in place with stride 0 instead of a materialised copy."""
    updates: tuple[int, int] | None = None
    """(data input, updates input) of an op whose output is its data input with some
    elements replaced (scatter): when nothing else reads the data, a kernel updates it in
    place, reading and writing only the updates."""

    def attr_spec(self, name: str) -> AttrSpec:
        for spec in self.attrs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def resolve_attrs(self, given: Mapping[str, AttrValue], where: str) -> dict[str, Any]:
        """Check attribute names and kinds, fill defaults; raise OpError naming the node."""
        known = {a.name for a in self.attrs}
        unknown = sorted(set(given) - known)
        if unknown:
            raise OpError(f"{where}: op {self.name!r} has no attribute {unknown[0]!r}; "
                          f"known: {', '.join(sorted(known)) or 'none'}")
        resolved: dict[str, Any] = {}
        for spec in self.attrs:
            if spec.name in given:
                resolved[spec.name] = spec.check(normalize_attr(given[spec.name]), where)
            elif spec.default is REQUIRED:
                raise OpError(f"{where}: op {self.name!r} needs attribute {spec.name!r}")
            else:
                resolved[spec.name] = spec.default
        return resolved

    def check_arity(self, count: int, where: str) -> None:
        required = sum(1 for s in self.inputs if not s.optional and not s.variadic)
        variadic = any(s.variadic for s in self.inputs)
        if count < required or (not variadic and count > len(self.inputs)):
            names = ", ".join(s.name + ("?" if s.optional else "*" if s.variadic else "")
                              for s in self.inputs)
            raise OpError(f"{where}: op {self.name!r} takes ({names}), got {count} inputs")


_REGISTRY: dict[str, OpSchema] = {}


def register(schema: OpSchema) -> OpSchema:
    if schema.name in _REGISTRY:
        raise ValueError(f"op {schema.name!r} registered twice")
    _REGISTRY[schema.name] = schema
    return schema


def define(name: str, category: Category, *, inputs: tuple[InputSpec, ...],
           infer: InferFn, cost: CostFn, reference: ReferenceFn, doc: str,
           outputs: Sequence[str] = ("y",), attrs: Sequence[AttrSpec] = (),
           decompose: DecomposeFn | None = None, cost_doc: str = "",
           variadic_outputs: bool = False, broadcast: bool = False,
           updates: tuple[int, int] | None = None) -> OpSchema:
    """Declare and register one op."""
    return register(OpSchema(name, category, inputs, tuple(outputs), tuple(attrs), infer, cost,
                             reference, doc.strip(), decompose, cost_doc, 1, variadic_outputs,
                             broadcast, updates))


def get(name: str) -> OpSchema:
    schema = _REGISTRY.get(name)
    if schema is None:
        raise OpError(f"unknown op {name!r} in the neutral op set (opset {OPSET_VERSION})")
    return schema


def lookup(name: str) -> OpSchema | None:
    return _REGISTRY.get(name)


def all_ops() -> list[OpSchema]:
    return sorted(_REGISTRY.values(), key=lambda s: (s.category.value, s.name))


def node_where(node: Node) -> str:
    path = f" ({node.provenance.module_path})" if node.provenance.module_path else ""
    return f"node #{node.id} {node.op}{path}"


def context_for(node: Node) -> OpContext:
    """Build the OpContext of a node of the neutral op set (attributes resolved)."""
    schema = get(node.op)
    where = node_where(node)
    schema.check_arity(len(node.inputs), where)
    constants = [constant_value(v) for v in node.inputs]
    return OpContext(node.op, [v.type if v is not None else None for v in node.inputs],
                     schema.resolve_attrs(node.attrs, where),
                     [v.type for v in node.outputs], constants, where)


def constant_value(value: Value | None) -> np.ndarray | None:
    """The data of a value known at build time: a model tensor or a `constant` node."""
    if value is None:
        return None
    if value.tensor is not None:
        return value.tensor.data
    producer = value.producer
    if producer is not None and producer.op == "constant" and not producer.is_opaque:
        tensor = producer.attrs.get("value")
        if isinstance(tensor, Tensor):
            return tensor.data
    return None


def infer_types(node: Node) -> list[TensorType]:
    """Infer the output types of a neutral node from its inputs and attributes."""
    return get(node.op).infer(context_for(node))


def node_cost(node: Node) -> Cost:
    """Cost of one node. Opaque nodes cost their bytes only (no FLOPs are guessed).

    Bytes read are the sizes of the inputs, except where the op's cost function says it
    reads less of an input (`Flops.reads`: the rows a lookup gathers)."""
    written = sum(_nbytes(v.type) for v in node.outputs)
    if node.is_opaque:
        reads = _whole_reads(node)
        flops = Flops()
    else:
        flops = get(node.op).cost(context_for(node))
        reads = _apply_reads(node, flops.reads)
    read = sum(reads)
    params = sum(n for v, n in zip(node.inputs, reads, strict=True)
                 if v is not None and v.is_parameter)
    return Cost(flops.macs, 2 * flops.macs, flops.other, read, written, params)


def body_repeats(node: Node) -> int | None:
    """How many times the bodies of a control-flow node run, when static (`Flops.repeats`)."""
    if node.is_opaque:
        return None
    return get(node.op).cost(context_for(node)).repeats


def one_body_runs(node: Node) -> bool:
    """Whether the bodies of a control-flow node are alternatives, one run per execution
    (`Flops.one_body`)."""
    if node.is_opaque:
        return False
    return get(node.op).cost(context_for(node)).one_body


def bodies_cost(node: Node, costs: Sequence[Cost]) -> Cost:
    """The cost of a control-flow node's bodies, from each body's own cost (in
    `node.subgraphs()` order): the costliest of alternatives (`if`: FLOPs, then bytes), else
    their sum, times the static trip count where the op knows it (`Flops.repeats`). An
    opaque node, or one whose own cost fails (reported with the node), sums its bodies."""
    if not costs:
        return Cost()
    if node.is_opaque:
        return sum(costs, Cost())
    try:
        flops = get(node.op).cost(context_for(node))
    except IrbridgeError:
        return sum(costs, Cost())
    if flops.one_body:
        total = max(costs, key=lambda c: (c.flops, c.bytes_read + c.bytes_written))
    else:
        total = sum(costs, Cost())
    return total if flops.repeats is None else total.times(flops.repeats)


def input_reads(node: Node) -> list[int]:
    """Bytes the node reads from each of its inputs (0 for absent ones): the whole tensor,
    or less where the op's cost function says so (lookups read the rows they gather)."""
    if node.is_opaque:
        return _whole_reads(node)
    return _apply_reads(node, get(node.op).cost(context_for(node)).reads)


def _whole_reads(node: Node) -> list[int]:
    return [_nbytes(v.type) if v is not None else 0 for v in node.inputs]


def _apply_reads(node: Node, reads: tuple[int | None, ...]) -> list[int]:
    whole = _whole_reads(node)
    return [min(w, r) if i < len(reads) and (r := reads[i]) is not None else w
            for i, w in enumerate(whole)]


def lookup_reads(ctx: OpContext) -> tuple[int | None, ...]:
    """`Flops.reads` of a lookup whose output has the table's dtype: from input 0 (the table)
    the elements it picks, which are the elements it writes, at most the whole table; the
    indices (input 1) whole. The convention for gather, gather_elements and embedding: a
    lookup reads the rows it gathers, not the table (a repeated index counts each time,
    capped at the table's size). Unknown output sizes keep the whole table."""
    out = ctx.output_types[0] if ctx.output_types else None
    picked = out.nbytes() if out is not None else None
    return () if picked is None else (int(picked),)


def _nbytes(t: TensorType | None) -> int:
    n = t.nbytes() if t is not None else None
    return int(n) if n is not None else 0
