"""Fusion partitioning: which nodes run together as one kernel.

Partitions are formed from op categories (`irbridge.ops.registry.Category`) and dataflow
only, never from op names. Two strategies:

- `unfused`: one op per partition, every intermediate tensor goes through memory;
- `fused`: nodes are visited in topological order and each one either joins the partition
  of one of its producers or starts a new one:
  * a matmul-like op (matmul, gemm, linear, conv, attention) is an *anchor*: it always starts
    a kernel, except that a matmul reading the softmax of an anchored matmul joins it
    (a decomposed attention block: q @ k^T, scale/mask, softmax, @ v);
  * elementwise ops, activations and norms join an anchor as its epilogue (bias, norm,
    activation, residual add), or a chain of elementwise / norm / softmax / reduction ops
    (elementwise chains and normalisation blocks); softmax joins a matmul anchor (the start
    of an attention block) or a chain; reductions join chains only;
  * a node joins only if its output is no larger than the partition's iteration space
    (no broadcasting beyond the kernel) and joining creates no cycle between partitions;
    among several producers it joins the most recent one;
  * metadata-only ops (SHAPE category: reshape, squeeze, flatten, ...) are free views that
    join the partition of their producer; a view of a graph input or a weight, and
    constants, form free partitions (no kernel, no bytes);
  * a broadcast (an op the registry marks `broadcast`, e.g. expand) whose every reader,
    through views, is a matmul-like anchor is read in place with stride 0 by those kernels
    (as grouped-query attention kernels read a shared K/V head): it is a free view, and the
    anchor reads the broadcast's input, not a materialised copy;
  * a scatter (registry `updates`) whose data input nothing else reads updates it in place:
    it reads and writes only the updates (and indices), as a KV-cache write does;
  * pooling accepts an elementwise epilogue; data movement, control flow, other ops and
    opaque nodes are partitions of their own.

Bytes: a partition's *external* bytes are the distinct tensors it reads from outside
(weights included) plus the tensors it writes that anything outside it reads (or that are
graph outputs or unused); *internal* bytes are tensors produced and consumed inside only,
which a fused kernel keeps on chip. Views alias their input, so a tensor read through a
reshape counts once. Arithmetic intensity = FLOPs (matmul-like + other) / external bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from irbridge.analysis.cost import CostReport
from irbridge.errors import IrbridgeError
from irbridge.ir import Cost, Graph, Model, Node, Value, walk_nodes
from irbridge.ir import Partition as IRPartition
from irbridge.ops.registry import Category, input_reads, lookup

STRATEGIES = ("unfused", "fused")

_ANCHORS = (Category.MATMUL, Category.CONV, Category.ATTENTION)
_POINTWISE = (Category.ELEMENTWISE, Category.ACTIVATION)
_CHAIN = (Category.ELEMENTWISE, Category.ACTIVATION, Category.NORM, Category.SOFTMAX,
          Category.REDUCTION)
_FREE = (Category.SHAPE, Category.CONSTANT)
_BASE_KIND = {Category.MATMUL: "matmul", Category.CONV: "conv", Category.ATTENTION: "attention",
              Category.NORM: "norm", Category.SOFTMAX: "softmax",
              Category.ACTIVATION: "elementwise", Category.ELEMENTWISE: "elementwise",
              Category.REDUCTION: "reduction", Category.POOL: "pool",
              Category.SHAPE: "view", Category.DATA_MOVEMENT: "data_movement",
              Category.CONSTANT: "constant", Category.CONTROL: "control",
              Category.LINALG: "linalg", Category.OTHER: "other"}


@dataclass
class Partition:
    """One kernel: member nodes (topological order), kind, why it was cut there, cost."""

    id: int
    graph_index: int
    nodes: list[Node]
    kind: str
    reason: str
    cost: Cost
    external_read: int
    external_written: int
    internal_bytes: int
    free: bool = False  # only views / constants: no kernel runs

    @property
    def external_bytes(self) -> int:
        return self.external_read + self.external_written

    @property
    def intensity(self) -> float:
        """FLOPs per external byte (inf when nothing is moved but something computed)."""
        if self.external_bytes:
            return self.cost.flops / self.external_bytes
        return math.inf if self.cost.flops else 0.0

    @property
    def node_ids(self) -> list[int]:
        return [n.id for n in self.nodes]

    def label(self) -> str:
        first = self.nodes[0]
        path = next((n.provenance.module_path for n in self.nodes if n.provenance.module_path),
                    "")
        ops = "+".join(dict.fromkeys(n.qualified_op for n in self.nodes if not _is_free(n)))
        where = path or (first.outputs[0].name if first.outputs else f"#{first.id}")
        return f"{where} [{ops or first.op}]"

    def to_ir(self) -> IRPartition:
        return IRPartition(self.id, self.node_ids, self.kind, self.reason, self.cost,
                           self.external_bytes, self.internal_bytes, self.graph_index)


@dataclass
class Partitioning:
    strategy: str
    partitions: list[Partition]
    of_node: dict[int, int] = field(default_factory=dict)  # node id -> partition id

    @property
    def kernels(self) -> list[Partition]:
        return [p for p in self.partitions if not p.free]


def category(node: Node) -> Category | None:
    """The registry category of a neutral node; None for opaque or unknown ops."""
    if node.is_opaque:
        return None
    schema = lookup(node.op)
    return schema.category if schema is not None else None


def _folded_broadcasts(graph: Graph, meta: set[int]) -> set[int]:
    """ids of broadcast nodes whose output reaches, through views only, matmul-like anchors
    only (and is no graph output): the anchors read the broadcast's input with stride 0."""
    users: dict[int, list[Node]] = {}
    for node in graph.nodes:
        for value in node.inputs:
            if value is not None:
                users.setdefault(id(value), []).append(node)
    outputs = {id(v) for v in graph.outputs}
    folded: set[int] = set()
    for node in graph.nodes:
        schema = None if node.is_opaque else lookup(node.op)
        if schema is None or not schema.broadcast or not node.outputs:
            continue
        frontier, readers, ok = list(node.outputs), 0, True
        while frontier and ok:
            value = frontier.pop()
            if id(value) in outputs:
                ok = False
                break
            for user in users.get(id(value), []):
                cat = Category.SHAPE if id(user) in meta else category(user)
                if cat is Category.SHAPE and next(iter(user.subgraphs()), None) is None:
                    frontier.extend(user.outputs)
                elif cat in _ANCHORS:
                    readers += 1
                else:
                    ok = False
                    break
        if ok and readers:
            folded.add(id(node))
    return folded


def _is_free(node: Node) -> bool:
    return category(node) in _FREE


def partition(model: Model, costs: CostReport, strategy: str = "fused") -> Partitioning:
    """Partition every graph of the model; ids are unique across graphs."""
    if strategy not in STRATEGIES:
        raise IrbridgeError(f"unknown fusion strategy {strategy!r}; known: "
                            f"{', '.join(STRATEGIES)}")
    result = Partitioning(strategy, [])
    for graph_index, graph in enumerate(model.graphs):
        builder = _GraphPartitioner(graph, graph_index, costs, strategy, len(result.partitions))
        for part in builder.run():
            result.partitions.append(part)
            for node in part.nodes:
                result.of_node[node.id] = part.id
                for sub in node.subgraphs():
                    for _, inner in walk_nodes(sub):
                        result.of_node[inner.id] = part.id
    return result


@dataclass
class _Part:
    index: int
    members: list[Node]
    anchor: Category | None
    min_pos: int
    max_pos: int
    space: int  # iteration space in elements: epilogues may not grow past it
    start_reason: str
    deps: set[int] = field(default_factory=set)
    softmax: bool = False  # an anchored matmul followed by softmax: attention may close it
    closed_attention: bool = False
    free: bool = False


class _GraphPartitioner:
    def __init__(self, graph: Graph, graph_index: int, costs: CostReport, strategy: str,
                 first_id: int) -> None:
        self.graph = graph
        self.graph_index = graph_index
        self.costs = costs
        self.strategy = strategy
        self.first_id = first_id
        self.pos = {id(n): i for i, n in enumerate(graph.nodes)}
        self.parts: list[_Part] = []
        self.part_of: dict[int, int] = {}  # id(node) -> part index
        self.rejections: dict[tuple[int, int], str] = {}  # (id(node), part) -> why not
        self.roots: dict[int, Value] = {}
        self.meta = _shape_arithmetic(graph)
        self.folded = _folded_broadcasts(graph, self.meta) if strategy == "fused" else set()
        # Nodes inside control-flow bodies act through their top-level owner.
        self.owner: dict[int, Node] = {}
        for node in graph.nodes:
            self.owner[id(node)] = node
            for sub in node.subgraphs():
                for _, inner in walk_nodes(sub):
                    self.owner[id(inner)] = node

    def cat(self, node: Node) -> Category | None:
        """The node's category; shape arithmetic and broadcasts read in place count as
        SHAPE (metadata, free)."""
        return Category.SHAPE if id(node) in self.meta or id(node) in self.folded \
            else category(node)

    def free(self, node: Node) -> bool:
        return self.cat(node) in _FREE

    # -- forming partitions ------------------------------------------------------------------
    def run(self) -> list[Partition]:
        for node in self.graph.nodes:
            if self.strategy == "unfused":
                self._new(node, "free: metadata only, no kernel" if self.free(node)
                          else "unfused: one op per kernel")
            else:
                self._place(node)
        return self._finish()

    def _new(self, node: Node, reason: str) -> _Part:
        cat = self.cat(node)
        part = _Part(len(self.parts), [node], cat if cat in _ANCHORS else None,
                     self.pos[id(node)], self.pos[id(node)], self._space(node, cat), reason,
                     free=cat in _FREE)
        for p in self._input_parts(node):
            part.deps.add(p)
        self.parts.append(part)
        self.part_of[id(node)] = part.index
        return part

    def _join(self, part: _Part, node: Node) -> None:
        part.members.append(node)
        part.max_pos = self.pos[id(node)]
        part.deps.update(p for p in self._input_parts(node) if p != part.index)
        cat = self.cat(node)
        if part.anchor is None and cat not in _FREE:
            part.space = max(part.space, self._space(node, cat))
        if part.free and cat not in _FREE:
            part.free = False
        self.part_of[id(node)] = part.index

    def _input_parts(self, node: Node) -> Iterable[int]:
        for value in node.inputs:
            if value is not None and value.producer is not None:
                index = self.part_of.get(id(value.producer))
                if index is not None:
                    yield index

    def _place(self, node: Node) -> None:
        cat = self.cat(node)
        if cat is None:
            self._new(node, "opaque node: a kernel of its own")
            return
        if cat in _FREE:
            producer = self._producer_part(node.inputs[0] if node.inputs else None)
            if producer is not None and cat is Category.SHAPE:
                if self._acyclic_join(producer, node):
                    self._join(producer, node)
                else:  # its target shape is computed from that kernel's output
                    self._new(node, f"free: view, no kernel (joining kernel "
                                    f"{self.first_id + producer.index} would form a cycle)")
            else:
                what = "constant" if cat is Category.CONSTANT else "view of a graph input or weight"
                self._new(node, f"free: {what}, no kernel")
            return
        if cat in _ANCHORS:
            if cat is Category.MATMUL:
                for value in node.inputs:
                    part = self._producer_part(value)
                    if part is not None and part.softmax and not part.closed_attention \
                            and self._acyclic_join(part, node):
                        self._join(part, node)
                        part.closed_attention = True
                        return
            self._new(node, f"{_BASE_KIND[cat]} anchor: a matmul-like op starts a kernel")
            return
        if cat in _CHAIN or cat is Category.POOL:
            joined = self._try_join(node, cat)
            if joined:
                return
        rejected = [self.rejections[(id(node), p)] for p in self._input_parts(node)
                    if (id(node), p) in self.rejections]
        if cat in _CHAIN:
            why = rejected[0] if rejected else "no producer kernel to join (reads graph inputs " \
                                               "or weights)"
            self._new(node, f"{_BASE_KIND[cat]} starts a kernel: {why}")
        else:
            self._new(node, f"{_BASE_KIND[cat]}: a kernel of its own")

    def _try_join(self, node: Node, cat: Category) -> bool:
        if cat is Category.POOL:
            return False  # pools start kernels; they accept epilogues below
        candidates: dict[int, Value] = {}
        for value in node.inputs:
            if value is None or value.producer is None:
                continue
            index = self.part_of.get(id(value.producer))
            if index is not None and not self.parts[index].free:
                candidates.setdefault(index, value)
        out = self._numel(node.outputs[0]) if node.outputs else 0
        for index in sorted(candidates, key=lambda i: -self.parts[i].max_pos):
            part = self.parts[index]
            why = self._refuse(part, cat, out)
            if why is None and not self._acyclic_join(part, node):
                why = f"joining kernel {self.first_id + index} would form a cycle"
            if why is None:
                self._join(part, node)
                if cat is Category.SOFTMAX and part.anchor is Category.MATMUL:
                    part.softmax = True
                return True
            self.rejections[(id(node), index)] = why
        return False

    def _refuse(self, part: _Part, cat: Category, out: int) -> str | None:
        """Why `part` does not take a node of `cat` with `out` output elements (None: it does)."""
        name = f"kernel {self.first_id + part.index}"
        head = self.cat(part.members[0])
        if part.anchor is not None:
            if part.closed_attention and cat is Category.SOFTMAX:
                return f"{name} already holds a complete attention block"
            if cat is Category.SOFTMAX and (part.anchor is not Category.MATMUL or part.softmax):
                return f"{name} ({_BASE_KIND[part.anchor]}) takes no softmax epilogue"
            if cat is Category.REDUCTION:
                return f"{name} is a {_BASE_KIND[part.anchor]} anchor; reductions do not join " \
                       "anchor epilogues"
        elif head is Category.POOL:
            if cat not in _POINTWISE:
                return f"{name} (pool) takes elementwise epilogues only"
        elif head not in _CHAIN:
            return f"{name} ({_BASE_KIND.get(head, 'opaque') if head else 'opaque'}) takes no " \
                   "epilogue"
        if out > part.space:
            return f"output ({out:,} elements) is larger than {name}'s iteration space " \
                   f"({part.space:,}): broadcasting ends the kernel"
        return None

    def _acyclic_join(self, part: _Part, node: Node) -> bool:
        """True when adding `node` to `part` keeps the partition graph acyclic: no other
        producer partition of `node` may depend (transitively) on `part`."""
        for other in set(self._input_parts(node)):
            if other != part.index and self._depends_on(other, part):
                return False
        return True

    def _depends_on(self, start: int, target: _Part) -> bool:
        stack, seen = [start], {start}
        while stack:
            index = stack.pop()
            if index == target.index:
                return True
            for dep in self.parts[index].deps:
                # Partitions that end before `target` starts cannot depend on it.
                if dep not in seen and self.parts[dep].max_pos >= target.min_pos:
                    seen.add(dep)
                    stack.append(dep)
        return False

    def _producer_part(self, value: Value | None) -> _Part | None:
        if value is None or value.producer is None:
            return None
        index = self.part_of.get(id(value.producer))
        return None if index is None else self.parts[index]

    # -- sizes -------------------------------------------------------------------------------
    @staticmethod
    def _numel(value: Value | None) -> int:
        if value is None or value.type is None:
            return 0
        n = value.type.numel()
        return int(n) if n is not None else 0

    @staticmethod
    def _nbytes(value: Value) -> int:
        n = value.type.nbytes() if value.type is not None else None
        return int(n) if n is not None else 0

    def _space(self, node: Node, cat: Category | None) -> int:
        """Elements a node iterates over: its output for anchors, else the largest of its
        runtime inputs and outputs (a reduction iterates over its input)."""
        outs = [self._numel(v) for v in node.outputs]
        if cat in _ANCHORS:
            return max(outs, default=0)
        ins = [self._numel(v) for v in node.inputs if v is not None and not v.is_parameter]
        return max([*outs, *ins], default=0)

    def _root(self, value: Value) -> Value:
        """The tensor a value aliases: through views whose output has the input's size."""
        cached = self.roots.get(id(value))
        if cached is not None:
            return cached
        root = value
        seen = 0
        while root.producer is not None and self.cat(root.producer) is Category.SHAPE \
                and root.producer.inputs and root.producer.inputs[0] is not None \
                and (self._nbytes(root) == self._nbytes(root.producer.inputs[0])
                     or id(root.producer) in self.folded) and seen < 10_000:
            root = root.producer.inputs[0]
            seen += 1
        self.roots[id(value)] = root
        return root

    # -- bytes and reasons -------------------------------------------------------------------
    def _finish(self) -> list[Partition]:
        # Which partitions read each tensor (by root), and which tensors leave the graph.
        readers: dict[int, set[int]] = {}
        reads: dict[int, int] = {}  # id(root) -> how many nodes read it
        root_values: dict[int, Value] = {}
        for node in self.graph.nodes:
            inner = [node, *(n for sub in node.subgraphs() for _, n in walk_nodes(sub))]
            for member in inner:
                if self.free(member):
                    continue
                index = self.part_of[id(self.owner[id(member)])]
                for value in member.inputs:
                    if value is None:
                        continue
                    root = self._root(value)
                    root_values[id(root)] = root
                    readers.setdefault(id(root), set()).add(index)
                    reads[id(root)] = reads.get(id(root), 0) + 1
        graph_outputs = {id(self._root(v)) for v in self.graph.outputs}
        result = []
        for part in self.parts:
            members = {id(n) for n in part.members}
            cost = Cost()
            for node in part.members:
                cost = cost + self.costs.of(node).cost
            read = written = internal = 0
            if not part.free:
                # Bytes read per outside tensor: the whole tensor, or what the registry
                # says a lookup reads of it (the rows it gathers); the largest read wins.
                outside: dict[int, int] = {}
                for node in part.members:
                    if self.free(node):
                        continue
                    partial = self._partial_reads(node)
                    donated = self._updated_in_place(node, reads, graph_outputs)
                    for value in self._reads(node):
                        if donated is not None and value is donated[0]:
                            continue  # updated in place: only the updates move
                        root = self._root(value)
                        if root.producer is None or id(self._owner_of(root.producer)) \
                                not in members or self.free(root.producer):
                            size = partial.get(id(value), self._nbytes(root))
                            outside[id(root)] = max(outside.get(id(root), 0), size)
                    for value in node.outputs:
                        users = readers.get(id(value), set())
                        if users - {part.index} or id(value) in graph_outputs or not users:
                            written += self._nbytes(value) if donated is None \
                                else min(self._nbytes(value), self._nbytes(donated[1]))
                        else:
                            internal += self._nbytes(value)
                read = sum(outside.values())
            result.append(Partition(
                self.first_id + part.index, self.graph_index, list(part.members),
                self._kind(part), self._reason(part, readers, graph_outputs), cost,
                read, written, internal, part.free))
        return result

    def _partial_reads(self, node: Node) -> dict[int, int]:
        """Inputs (by id) that the node reads only part of, with the bytes it reads
        (`registry.input_reads`; only ops whose cost says so, e.g. lookups)."""
        if node.is_opaque or next(iter(node.subgraphs()), None) is not None:
            return {}
        whole = sum(self._nbytes(v) for v in node.inputs if v is not None)
        if self.costs.of(node).cost.bytes_read >= whole:
            return {}  # the common case: every input read whole (no second cost call)
        try:
            reads = input_reads(node)
        except IrbridgeError:
            return {}
        return {id(v): n for v, n in zip(node.inputs, reads, strict=True)
                if v is not None and n < self._nbytes(v)}

    def _updated_in_place(self, node: Node, reads: dict[int, int], graph_outputs: set[int]
                          ) -> tuple[Value, Value] | None:
        """(data, updates) of a scatter (registry `updates`) whose data input nothing else
        reads and that is no weight or graph output: a fused kernel updates it in place
        (a KV-cache write), reading and writing only the updates. None: it copies."""
        if self.strategy != "fused" or node.is_opaque:
            return None
        schema = lookup(node.op)
        if schema is None or schema.updates is None:
            return None
        d, u = schema.updates
        if max(d, u) >= len(node.inputs):
            return None
        data, updates = node.inputs[d], node.inputs[u]
        if data is None or updates is None or data.is_parameter:
            return None
        root = self._root(data)
        if root.is_parameter or reads.get(id(root), 0) != 1 or id(root) in graph_outputs:
            return None
        return data, updates

    def _reads(self, node: Node) -> Iterable[Value]:
        yield from (v for v in node.inputs if v is not None)
        for sub in node.subgraphs():  # bodies read enclosing values by name
            for _, inner in walk_nodes(sub):
                for value in inner.inputs:
                    if value is None:
                        continue
                    outer = id(value.producer) in self.pos if value.producer is not None \
                        else value.name in self.graph.values
                    if outer:
                        yield value

    def _owner_of(self, node: Node) -> Node:
        return self.owner.get(id(node), node)

    def _kind(self, part: _Part) -> str:
        cats = [self.cat(n) for n in part.members]
        real = [c for c in cats if c not in _FREE]
        if part.free or not real:
            if any(id(n) in self.meta for n in part.members):
                return "metadata"
            return "constant" if Category.CONSTANT in cats else "view"
        if part.anchor is not None:
            if part.closed_attention:
                return "attention"
            base = _BASE_KIND[part.anchor]
            return f"{base}+epilogue" if len(real) > 1 else base
        if None in real:
            return "opaque"
        for cat, kind in ((Category.NORM, "norm"), (Category.SOFTMAX, "softmax"),
                          (Category.REDUCTION, "reduction"), (Category.POOL, "pool")):
            if cat in real:
                return kind if len(real) == 1 or cat is not Category.POOL else "pool+epilogue"
        head = real[0]
        assert head is not None
        return _BASE_KIND[head]

    def _reason(self, part: _Part, readers: dict[int, set[int]], graph_outputs: set[int]) -> str:
        if self.strategy == "unfused" or part.free:
            return part.start_reason
        ends = []
        for node in part.members:
            for value in node.outputs:
                if id(value) in graph_outputs:
                    ends.append("its output is a graph output")
                for user, _ in value.uses:
                    owner = self._owner_of(user)
                    index = self.part_of.get(id(owner))
                    if index is None or index == part.index:
                        continue
                    why = self.rejections.get((id(owner), part.index))
                    ucat = self.cat(owner)
                    if why is None:
                        if ucat in _ANCHORS:
                            why = f"#{owner.id} {owner.op} is a matmul-like anchor"
                        elif ucat in _FREE or index < part.index:
                            continue
                        elif owner is self.parts[index].members[0]:
                            kind = _BASE_KIND[ucat] if ucat is not None else "opaque"
                            why = f"#{owner.id} {owner.op} ({kind}) starts its own kernel"
                        else:
                            why = f"#{owner.id} {owner.op} joined kernel {self.first_id + index}"
                    else:
                        why = f"#{owner.id} {owner.op}: {why}"
                    ends.append(why)
        ends = list(dict.fromkeys(ends))
        members = len(part.members)
        text = part.start_reason if members == 1 else f"{part.start_reason}; {members} ops fused"
        if ends:
            more = f" (+{len(ends) - 2} more)" if len(ends) > 2 else ""
            text += "; ends: " + "; ".join(ends[:2]) + more
        return text


_SMALL = 16


def _small_int(value: Value) -> bool:
    t = value.type
    if t is None or not t.dtype.is_integer or t.shape is None or len(t.shape) > 1:
        return False
    n = t.numel()
    return n is not None and n <= _SMALL


def _shape_arithmetic(graph: Graph) -> set[int]:
    """Nodes (by id()) that only compute shapes: every runtime input is a shape value and
    every output a small integer vector (at most 16 elements). Shape values are outputs of
    constants, small integer initializers (the fixed parts of a target shape, as ONNX
    exporters store them), of SHAPE ops with small integer outputs (shape_of), integer
    scalar graph inputs (symbolic sizes) and of shape arithmetic itself. Such nodes (the concat that
    builds a reshape's target shape from a symbolic batch) are metadata: free, no kernel."""
    shape_values = {id(v) for v in graph.inputs if _small_int(v) and v.type is not None
                    and v.type.rank == 0}
    shape_values.update(id(v) for v in graph.parameters if _small_int(v))
    meta: set[int] = set()
    for node in graph.nodes:
        cat = category(node)
        if cat is None or cat.matmul_like or not node.outputs \
                or not all(_small_int(v) for v in node.outputs):
            continue
        operands = [v for v in node.inputs if v is not None]
        if cat in _FREE:  # constants, shape_of, views of shape vectors
            shape_values.update(id(v) for v in node.outputs)
            continue
        if operands and all(id(v) in shape_values for v in operands):
            meta.add(id(node))
            shape_values.update(id(v) for v in node.outputs)
    return meta
