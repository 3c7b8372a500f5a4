"""The in-memory IR: models, graphs, nodes, values and tensors, free of protobuf.

A `Graph` owns its nodes (kept in topological order) and its values. Every `Value` knows
its producer (a node output, a graph input, or a model tensor) and its uses, so passes can
walk def-use chains without searching. `irbridge.serde` converts to and from the file
format; `irbridge.verify` checks the structural rules.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from irbridge.dtypes import DType

IR_VERSION = 1
"""Newest IR file version this code reads and writes (irbridge.v1.IrVersion)."""

NEUTRAL_DOMAIN = ""
"""Domain of the neutral op set; any other domain marks an opaque node."""


@dataclass(frozen=True, slots=True)
class SymDim:
    """A dimension fixed only at run time. Dims with the same name denote the same size;
    `==` also compares the bounds (shape logic that only needs the size compares names)."""

    name: str
    min: int | None = None
    max: int | None = None

    def __str__(self) -> str:
        return self.name


Dim = int | SymDim | None
"""A static size, a symbolic size, or None for unknown."""


@dataclass(frozen=True, slots=True)
class TensorType:
    """Element type and shape of a value. `shape is None` means the rank is unknown."""

    dtype: DType
    shape: tuple[Dim, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def static_shape(self) -> tuple[int, ...]:
        """The shape as ints; raises ValueError when a dim is symbolic or unknown."""
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            raise ValueError(f"shape {format_shape(self.shape)} is not static")
        return tuple(d for d in self.shape if isinstance(d, int))

    def numel(self) -> int | None:
        """Element count, or None unless the shape is static."""
        if self.shape is None:
            return None
        count = 1
        for d in self.shape:       # one pass (the analysis asks for this per value, often)
            if not isinstance(d, int):
                return None
            count *= d
        return count

    def nbytes(self) -> int | None:
        """Bytes the tensor moves, as costs count them: sub-byte elements packed (two int4
        a byte), though tensor data holds one a byte (docs/ir-spec.md)."""
        n = self.numel()
        return None if n is None else (n * self.dtype.bits + 7) // 8

    def __str__(self) -> str:
        return f"{self.dtype.short}{format_shape(self.shape)}"


def format_shape(shape: Sequence[Dim] | None) -> str:
    if shape is None:
        return "[?]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


class Tensor:
    """A constant tensor. `data is None` makes it shape-only (no weights stored)."""

    def __init__(self, name: str, dtype: DType, shape: Sequence[int],
                 data: np.ndarray | None = None) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        if data is not None:
            if data.dtype != dtype.numpy or tuple(data.shape) != self.shape:
                raise ValueError(
                    f"tensor {name!r}: data is {data.dtype}{list(data.shape)}, "
                    f"declared {dtype.short}{list(self.shape)}")
            data = np.require(data, requirements="C")  # ascontiguousarray makes 0-d 1-d
        self.data = data

    @classmethod
    def from_array(cls, name: str, array: np.ndarray) -> Tensor:
        array = np.asarray(array)
        return cls(name, DType.from_numpy(array.dtype), array.shape, array)

    @property
    def type(self) -> TensorType:
        return TensorType(self.dtype, self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        if (self.name, self.dtype, self.shape) != (other.name, other.dtype, other.shape):
            return False
        if self.data is None or other.data is None:
            return self.data is None and other.data is None
        return self.data.tobytes() == other.data.tobytes()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        kind = "shape-only" if self.data is None else "data"
        return f"Tensor({self.name!r}, {self.dtype.short}{list(self.shape)}, {kind})"


AttrValue = Union[
    int, float, str, bool, DType, Tensor, "Graph",
    tuple[int, ...], tuple[float, ...], tuple[str, ...], tuple["Graph", ...],
]


def normalize_attr(value: object) -> AttrValue:
    """Bring an attribute value into canonical form: sequences become tuples, numpy
    scalars become Python scalars, and a sequence mixing ints and floats becomes floats."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float | str | DType | Tensor | Graph):
        return value
    if isinstance(value, list | tuple):
        items = [v.item() if isinstance(v, np.generic) else v for v in value]
        if all(isinstance(v, Graph) for v in items) and items:
            return tuple(items)
        if all(isinstance(v, str) for v in items) and items:
            return tuple(items)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return tuple(int(v) for v in items)
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in items):
            return tuple(float(v) for v in items)
    raise TypeError(f"unsupported attribute value {value!r}")


@dataclass(slots=True)
class SourceLocation:
    file: str = ""
    line: int = 0
    code: str = ""


@dataclass(slots=True)
class Provenance:
    """Where a node came from, exactly as its source format wrote it."""

    source_format: str = ""
    source_op: str = ""
    source_node: str = ""
    module_path: str = ""
    module_class: str = ""
    location: SourceLocation | None = None


@dataclass(slots=True)
class Cost:
    """Cost of one op; see docs/ir-spec.md for the conventions."""

    macs: int = 0
    matmul_flops: int = 0
    other_flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    param_bytes: int = 0

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.other_flops

    def __add__(self, other: Cost) -> Cost:
        # field by field over the slots (dataclasses.astuple deep-copies: it was the
        # analysis's hottest call)
        return Cost(*(getattr(self, f) + getattr(other, f) for f in Cost.__slots__))

    def times(self, count: int) -> Cost:
        """This cost `count` times over (a loop body run `count` times)."""
        return Cost(*(getattr(self, f) * count for f in Cost.__slots__))


@dataclass(slots=True)
class NodeAnnotations:
    cost: Cost | None = None
    partition_id: int | None = None
    values: dict[str, AttrValue] = field(default_factory=dict)


class Value:
    """A named dataflow edge. Produced by exactly one of: a node, a graph input, a tensor."""

    __slots__ = ("name", "producer", "tensor", "type", "uses")

    def __init__(self, name: str, type: TensorType | None = None) -> None:
        self.name = name
        self.type = type
        self.producer: Node | None = None
        self.tensor: Tensor | None = None  # set when the value is a model tensor (weight)
        self.uses: list[tuple[Node, int]] = []

    @property
    def is_parameter(self) -> bool:
        return self.tensor is not None

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"


class Node:
    """One operation. Inputs may hold None for an omitted optional input."""

    __slots__ = (
        "annotations",
        "attrs",
        "domain",
        "id",
        "inputs",
        "name",
        "op",
        "outputs",
        "provenance",
    )

    def __init__(self, id: int, op: str, inputs: Sequence[Value | None],
                 outputs: Sequence[Value], attrs: Mapping[str, object] | None = None,
                 domain: str = NEUTRAL_DOMAIN, name: str = "",
                 provenance: Provenance | None = None,
                 annotations: NodeAnnotations | None = None) -> None:
        self.id = id
        self.op = op
        self.domain = domain
        self.name = name
        self.inputs: list[Value | None] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.attrs: dict[str, AttrValue] = {k: normalize_attr(v) for k, v in (attrs or {}).items()}
        self.provenance = provenance or Provenance()
        self.annotations = annotations or NodeAnnotations()

    @property
    def is_opaque(self) -> bool:
        return self.domain != NEUTRAL_DOMAIN

    @property
    def qualified_op(self) -> str:
        return self.op if not self.is_opaque else f"{self.domain}::{self.op}"

    def subgraphs(self) -> Iterator[Graph]:
        for value in self.attrs.values():
            if isinstance(value, Graph):
                yield value
            elif isinstance(value, tuple) and value and isinstance(value[0], Graph):
                yield from (g for g in value if isinstance(g, Graph))

    def __repr__(self) -> str:
        ins = ", ".join("-" if v is None else v.name for v in self.inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"Node(#{self.id} {self.qualified_op}({ins}) -> {outs})"


class Graph:
    """A dataflow graph: inputs, nodes in topological order, outputs."""

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.parameters: list[Value] = []
        self.break_reason = ""
        self.values: dict[str, Value] = {}
        self._ids = itertools.count()
        # Kept as nodes are added, so building a graph is linear: the ids in use (re-read
        # when `nodes` was changed other than through add_node / remove_nodes) and, per
        # base name, the next suffix `unique_name` tries.
        self._used_ids: set[int] = set()
        self._ids_seen = 0
        self._next_suffix: dict[str, int] = {}
        # TensorType is immutable: the values created here that have equal types share one
        # object (a transformer's thousands of [batch, seq, hidden] values hold one), so a
        # big graph takes less memory to hold and to walk
        self._types: dict[TensorType, TensorType] = {}

    # -- building -------------------------------------------------------------------
    def add_input(self, name: str, type: TensorType | None) -> Value:
        value = self._new_value(name, type)
        self.inputs.append(value)
        return value

    def add_parameter(self, tensor: Tensor) -> Value:
        """Make a model tensor readable in this graph under its own name."""
        existing = self.values.get(tensor.name)
        if existing is not None and existing.tensor is tensor:
            return existing
        value = self._new_value(tensor.name, tensor.type)
        value.tensor = tensor
        self.parameters.append(value)
        return value

    def add_node(self, op: str, inputs: Sequence[Value | None], output_names: Sequence[str],
                 attrs: Mapping[str, object] | None = None, *,
                 output_types: Sequence[TensorType | None] | None = None,
                 id: int | None = None, **kwargs: object) -> Node:
        """Append a node; its output values are created here and named as given."""
        types = list(output_types) if output_types is not None else [None] * len(output_names)
        outputs = [self._new_value(n, t) for n, t in zip(output_names, types, strict=True)]
        node = Node(self._next_id() if id is None else id, op, inputs, outputs, attrs,
                    **kwargs)  # type: ignore[arg-type]
        for value in outputs:
            value.producer = node
        for index, operand in enumerate(node.inputs):
            if operand is not None:
                operand.uses.append((node, index))
        self.nodes.append(node)
        self._used_ids.add(node.id)
        self._ids_seen = len(self.nodes)
        return node

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)

    def unique_name(self, base: str) -> str:
        """A value name not used yet in this graph, derived from `base`."""
        if base not in self.values:
            return base
        for i in itertools.count(self._next_suffix.get(base, 1)):
            candidate = f"{base}_{i}"
            if candidate not in self.values:
                self._next_suffix[base] = i + 1
                return candidate
        raise AssertionError("unreachable")

    def _new_value(self, name: str, type: TensorType | None) -> Value:
        if not name:
            raise ValueError(f"graph {self.name!r}: a value needs a non-empty name")
        if type is not None:
            type = self._types.setdefault(type, type)
        value = Value(name, type)
        if self.values.setdefault(name, value) is not value:   # one look-up, not two
            raise ValueError(f"graph {self.name!r}: value {name!r} is defined twice")
        return value

    def _next_id(self) -> int:
        if self._ids_seen != len(self.nodes):   # nodes changed behind add_node's back
            self._used_ids = {n.id for n in self.nodes}
            self._ids_seen = len(self.nodes)
        while True:
            candidate = next(self._ids)
            if candidate not in self._used_ids:
                return candidate

    def reserve_ids(self, start: int) -> None:
        """Continue node ids from `start` (models keep ids unique across graphs)."""
        self._ids = itertools.count(start)

    # -- editing --------------------------------------------------------------------
    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Point every use of `old` (and graph outputs) at `new`."""
        for node, index in old.uses:
            node.inputs[index] = new
            new.uses.append((node, index))
        old.uses = []
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove_node(self, node: Node) -> None:
        """Remove a node whose outputs are unused."""
        self.remove_nodes([node])

    def remove_nodes(self, nodes: Sequence[Node]) -> None:
        """Remove nodes whose outputs are unused except by each other (in one pass over
        the graph, however many)."""
        doomed = {id(n) for n in nodes}
        outputs = {id(v) for v in self.outputs}
        for node in nodes:
            for out in node.outputs:
                if id(out) in outputs or any(id(u) not in doomed for u, _ in out.uses):
                    raise ValueError(f"node #{node.id} output {out.name!r} is still used")
        touched: dict[int, Value] = {}
        for node in nodes:
            for out in node.outputs:
                del self.values[out.name]
                out.uses = []
            for value in node.inputs:
                if value is not None:
                    touched[id(value)] = value
        for value in touched.values():
            value.uses = [(n, i) for n, i in value.uses if id(n) not in doomed]
        count = len(doomed)
        if count and {id(n) for n in self.nodes[-count:]} == doomed:
            del self.nodes[-count:]   # the last nodes added (a rolled-back attempt): O(count)
        else:
            self.nodes = [n for n in self.nodes if id(n) not in doomed]
        self._ids_seen = len(self.nodes)

    # -- queries --------------------------------------------------------------------
    def node_by_id(self, node_id: int) -> Node:
        """The node with `node_id` (a linear search: build a dict for many look-ups)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"graph {self.name!r} has no node #{node_id}")

    def topological_sort(self) -> None:
        """Reorder nodes so every producer precedes its users (stable for sorted input).
        Raises ValueError naming a node on a cycle."""
        position = {id(n): i for i, n in enumerate(self.nodes)}
        pending = {id(n): sum(1 for v in _deps(n) if v.producer is not None
                              and id(v.producer) in position) for n in self.nodes}
        import heapq

        ready = [(position[id(n)], n.id, n) for n in self.nodes if pending[id(n)] == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, _, node = heapq.heappop(ready)
            order.append(node)
            for out in node.outputs:
                for user in {id(u): u for u, _ in out.uses}.values():
                    if id(user) not in pending:
                        continue
                    pending[id(user)] -= sum(1 for v in _deps(user) if v is out)
                    if pending[id(user)] == 0:
                        heapq.heappush(ready, (position[id(user)], user.id, user))
        if len(order) != len(self.nodes):
            stuck = next(n for n in self.nodes if pending[id(n)] > 0)
            raise ValueError(f"graph {self.name!r} has a cycle through node #{stuck.id} ({stuck.op})")
        self.nodes = order

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"


def _deps(node: Node) -> list[Value]:
    return [v for v in node.inputs if v is not None]


@dataclass
class GraphLink:
    """An output of one graph of a model feeds an input of a later one."""

    from_graph: int
    from_output: str
    to_graph: int
    to_input: str


@dataclass
class Partition:
    id: int
    node_ids: list[int]
    kind: str
    reason: str
    cost: Cost
    external_bytes: int
    internal_bytes: int
    graph_index: int = 0


@dataclass
class Estimate:
    partition_id: int
    compute_seconds: float
    memory_seconds: float
    latency_seconds: float
    bound: str


@dataclass
class HardwareMapping:
    target: str
    dtype: DType
    strategy: str
    estimates: list[Estimate]
    total_latency_seconds: float


@dataclass
class Analysis:
    strategy: str = ""
    partitions: list[Partition] = field(default_factory=list)
    mappings: list[HardwareMapping] = field(default_factory=list)


@dataclass
class Model:
    """A captured model: one or more graphs (in execution order) and shared tensors."""

    graphs: list[Graph] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    links: list[GraphLink] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    name: str = ""
    source_format: str = ""
    producer_name: str = "irbridge"
    producer_version: str = ""
    opset_version: int = 1
    ir_version: int = IR_VERSION
    analysis: Analysis | None = None

    def __post_init__(self) -> None:
        if not self.producer_version:
            from irbridge import __version__

            self.producer_version = __version__

    @property
    def graph(self) -> Graph:
        """The first (for most models: the only) graph."""
        if not self.graphs:
            raise ValueError("model has no graph")
        return self.graphs[0]

    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name in self.tensors and self.tensors[tensor.name] is not tensor:
            raise ValueError(f"model already has a tensor named {tensor.name!r}")
        self.tensors[tensor.name] = tensor
        return tensor

    def all_nodes(self) -> Iterator[tuple[Graph, Node]]:
        """Every node of every graph, subgraphs of control-flow nodes included."""
        for graph in self.graphs:
            yield from walk_nodes(graph)

    def renumber_nodes(self) -> None:
        """Number every node 0, 1, ... in `all_nodes` order (node ids are unique across
        the model, subgraphs included), and have every graph, subgraphs included, give
        new nodes ids after them."""
        count = 0
        for _, node in self.all_nodes():
            node.id = count
            count += 1
        pending = list(self.graphs)
        while pending:
            graph = pending.pop()
            graph.reserve_ids(count)
            pending.extend(sub for node in graph.nodes for sub in node.subgraphs())

    @property
    def is_shape_only(self) -> bool:
        return any(t.data is None for t in self.tensors.values())

    def parameter_count(self) -> int:
        return sum(t.numel for t in self.tensors.values())


def walk_nodes(graph: Graph) -> Iterator[tuple[Graph, Node]]:
    for node in graph.nodes:
        yield graph, node
        for sub in node.subgraphs():
            yield from walk_nodes(sub)
