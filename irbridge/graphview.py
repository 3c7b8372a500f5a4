"""A viewer-neutral "view model" of an IR model: what every graph viewer draws, computed once
so the Model Explorer JSON, the Graphviz pictures and the HTML viewer agree on names,
module hierarchy, edges and figures.

    from irbridge.graphview import build_view
    view = build_view(model, "h100-sxm")               # every op node
    view = build_view(model, "h100-sxm", depth=2)      # modules deeper than 2 become one box
    view = build_view(model, "h100-sxm", depth="auto") # collapse only large graphs

`View` (all lists in topological order, graph by graph):

- `nodes: list[ViewNode]`, each with a unique `key` and `kind`:
  `op` (one IR node), `module` (every IR node under a module path prefix, when collapsed),
  `input` / `output` (graph inputs and outputs; weights are not drawn).
  ViewNode fields: `label` (op name or last module path part), `op`, `module_path`,
  `module_class`, `namespace` (module path split into parts: the hierarchy a viewer folds),
  `shape` (main output type, e.g. `f32[1,64,56,56]`, "" when unknown), `outputs` / `inputs`
  ((name, type) per port of an op, weights included; an input node has one output), `attrs`
  (op attributes as text), `graph_index`, `index` (position among the graph's inputs or
  outputs),
  `node_ids` (IR node ids it stands for), `partition_ids` (fused kernels it belongs to),
  `metrics`.
- `edges: list[ViewEdge]`: one per (source key, target key), deduplicated; `values` keeps
  each IR value carried (name, type, source output index, target input index). Edges inside
  one collapsed module are dropped; graph links (graph breaks) join output to input nodes.
- `namespaces: dict[str, Namespace]`: every prefix of every module path (`layer1`,
  `layer1.0`, `layer1.0.conv1`) with its parent, depth, IR node count, class and metrics.
- `partitions: dict[int, PartitionView]`: fused kernels: kind, member keys, latency, bound.
- `depth`: the collapse depth used (None: not collapsed); `target`, `dtype`, `strategy`,
  `total_latency_seconds`, `weights` (names of weight values), `warnings` (from the
  analysis).

`Metrics` per node come from the analysis (`irbridge.analysis.analyze`, one target, fused):
FLOPs and MACs are the node's own cost; bytes are its unfused reads + writes. The roofline
is per kernel, so a kernel's latency is shared among its members in proportion to each
member's stand-alone roofline time (max of FLOPs / peak and bytes / bandwidth): node
latencies add up to the model total. A node's `bound` is its kernel's (`compute` or
`memory`), `none` for free kernels (views) and zero-latency ones; a collapsed module takes the
bound holding most of its latency. `known` is False when the node's output shapes or cost
are unknown (viewers leave such nodes uncoloured).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from irbridge.analysis.driver import Result, Run, analyze
from irbridge.analysis.hardware import Target, resolve_target
from irbridge.analysis.roofline import Mapping
from irbridge.errors import IrbridgeError
from irbridge.ir import Cost, Graph, Model, Node, Value

# Graphs with more op nodes than this are collapsed by depth="auto" ...
AUTO_COLLAPSE_NODES = 300
# ... to the deepest module depth that leaves at most this many boxes.
AUTO_MAX_BOXES = 100

Depth = int | Literal["auto"] | None


@dataclass
class Metrics:
    """Figures of one view node (or an aggregate of several)."""

    flops: int = 0
    macs: int = 0
    bytes: int = 0  # unfused bytes read + written
    latency_seconds: float = 0.0
    compute_bound_seconds: float = 0.0  # share of the latency in compute-bound kernels
    memory_bound_seconds: float = 0.0
    known: bool = True

    @property
    def bound(self) -> str:
        """`compute`, `memory` or `none` (no latency): where most of the time goes."""
        if self.compute_bound_seconds <= 0 and self.memory_bound_seconds <= 0:
            return "none"
        return ("compute" if self.compute_bound_seconds >= self.memory_bound_seconds
                else "memory")

    def add(self, other: Metrics) -> None:
        self.flops += other.flops
        self.macs += other.macs
        self.bytes += other.bytes
        self.latency_seconds += other.latency_seconds
        self.compute_bound_seconds += other.compute_bound_seconds
        self.memory_bound_seconds += other.memory_bound_seconds
        self.known = self.known and other.known


@dataclass
class ViewNode:
    key: str
    kind: str  # op | module | input | output
    label: str
    graph_index: int
    op: str = ""
    module_path: str = ""
    module_class: str = ""
    shape: str = ""
    node_ids: list[int] = field(default_factory=list)
    partition_ids: list[int] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    attrs: dict[str, str] = field(default_factory=dict)  # op attributes, as text
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (value name, type) per port
    inputs: list[tuple[str, str]] = field(default_factory=list)  # weights too; ("", "") omitted
    index: int = 0  # position among the graph's inputs or outputs

    @property
    def namespace(self) -> tuple[str, ...]:
        return tuple(self.module_path.split(".")) if self.module_path else ()


@dataclass
class EdgeValue:
    name: str
    type: str  # "" when unknown
    source_port: int  # output index at the source (0 for inputs and modules' first)
    target_port: int  # input index at the target


@dataclass
class ViewEdge:
    source: str
    target: str
    values: list[EdgeValue] = field(default_factory=list)


@dataclass
class Namespace:
    path: str
    parent: str  # "" at the top
    depth: int
    nodes: int = 0  # IR nodes at or under this path
    module_class: str = ""
    metrics: Metrics = field(default_factory=Metrics)


@dataclass
class PartitionView:
    id: int
    graph_index: int
    kind: str
    free: bool
    latency_seconds: float
    bound: str  # compute | memory | none
    members: list[str] = field(default_factory=list)  # view node keys (op nodes)


@dataclass
class View:
    name: str
    target: str
    dtype: str
    strategy: str
    depth: int | None
    nodes: list[ViewNode]
    edges: list[ViewEdge]
    namespaces: dict[str, Namespace]
    partitions: dict[int, PartitionView]
    total_latency_seconds: float
    graph_names: list[str]
    op_nodes: int  # IR nodes of the top-level graphs (before collapsing)
    warnings: list[str] = field(default_factory=list)
    weights: set[str] = field(default_factory=set)
    analysis: Result | None = field(default=None, repr=False)  # what the metrics came from

    def node(self, key: str) -> ViewNode:
        for n in self.nodes:
            if n.key == key:
                return n
        raise KeyError(key)


def build_view(model: Model, hardware: str | Target, *, depth: Depth = None,
               dtype: str | None = None) -> View:
    """The view of `model` on `hardware` (catalog name, alias, .yaml or a Target).

    depth: None keeps every op; an int >= 1 folds every node whose module path is deeper
    into one box per path prefix of that depth; "auto" does so only for graphs of more than
    AUTO_COLLAPSE_NODES nodes, at the deepest depth with at most AUTO_MAX_BOXES boxes."""
    if not model.graphs:
        raise IrbridgeError(f"model {model.name or '?'}: has no graph to draw")
    target = hardware if isinstance(hardware, Target) else resolve_target(hardware)
    result = analyze(model, [target], dtype=dtype)
    run = result.runs[0]
    chosen = auto_depth(model) if depth == "auto" else depth
    if chosen is not None and (not isinstance(chosen, int) or chosen < 1):
        raise IrbridgeError(f"depth must be a positive integer, 'auto' or None, got {depth!r}")
    metrics = _node_metrics(run, run.mappings[0])
    view = View(result.name, target.name, result.dtype, run.strategy, chosen, [], [], {}, {},
                run.mappings[0].total_latency, _graph_names(model),
                sum(len(g.nodes) for g in model.graphs), list(result.warnings),
                analysis=result)
    _add_partitions(view, run, run.mappings[0])
    for gi, graph in enumerate(model.graphs):
        _add_graph(view, gi, graph, metrics, chosen)
    _add_links(view, model)
    _add_namespaces(view, model, metrics)
    for vn in view.nodes:
        if vn.kind == "module" and not vn.module_class and vn.module_path in view.namespaces:
            vn.module_class = view.namespaces[vn.module_path].module_class
    return view


def auto_depth(model: Model, max_boxes: int = AUTO_MAX_BOXES,
               threshold: int = AUTO_COLLAPSE_NODES) -> int | None:
    """None when the largest graph has at most `threshold` nodes; else the deepest module
    depth whose boxes number at most `max_boxes` (1 when even depth 1 has more)."""
    if max(len(g.nodes) for g in model.graphs) <= threshold:
        return None
    deepest = max((len(n.provenance.module_path.split(".")) for g in model.graphs
                   for n in g.nodes if n.provenance.module_path), default=0)
    best = 1
    for d in range(1, deepest + 1):
        if max(box_count(g, d) for g in model.graphs) <= max_boxes:
            best = d
        else:
            break
    return best


def box_count(graph: Graph, depth: int) -> int:
    """Op nodes plus module boxes left in `graph` when collapsed at `depth`."""
    boxes: set[str] = set()
    for i, node in enumerate(graph.nodes):
        box = _box_of(node, depth)
        boxes.add(box if box is not None else f"#{i}")
    return len(boxes)


def human_seconds(seconds: float) -> str:
    """0.0000032 -> '3.2 µs' (short, for labels)."""
    if seconds <= 0:
        return "0 s"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def human_flops(flops: float) -> str:
    """236027904 -> '236 MFLOP'."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(flops) >= factor:
            return f"{flops / factor:.3g} {prefix}FLOP"
    return f"{int(flops)} FLOP"


# -- building --------------------------------------------------------------------------------

def _graph_names(model: Model) -> list[str]:
    """Graph names, made unique (graph breaks may repeat a name)."""
    names: list[str] = []
    for i, graph in enumerate(model.graphs):
        name = graph.name or f"graph{i}"
        names.append(name if name not in names else f"{name}_{i}")
    return names


def _box_of(node: Node, depth: int | None) -> str | None:
    """The module path prefix `node` folds into at `depth`; None when it stays an op."""
    path = node.provenance.module_path
    if depth is None or not path:
        return None
    parts = path.split(".")
    return ".".join(parts[:depth]) if len(parts) >= depth else None


def _op_key(gi: int, node: Node) -> str:
    return f"g{gi}n{node.id}"


def _node_metrics(run: Run, mapping: Mapping) -> dict[int, Metrics]:
    """id(node) -> Metrics for every top-level node (bodies of control flow included in
    their node's figures)."""
    roofs = {r.partition.id: r for r in mapping.estimates}
    peak, bandwidth = mapping.peak, mapping.bandwidth
    out: dict[int, Metrics] = {}
    for part in run.partitioning.partitions:
        roof = roofs[part.id]
        costs: list[tuple[Node, Cost, bool]] = []
        for node in part.nodes:
            nc = run.costs.by_node.get(id(node))
            cost = nc.cost if nc is not None else Cost()
            known = (nc is not None and nc.status in ("ok", "opaque", "partial")
                     and all(v.type is not None and v.type.shape is not None
                             for v in node.outputs))
            costs.append((node, cost, known))
        weights = [max(c.flops / peak, (c.bytes_read + c.bytes_written) / bandwidth)
                   for _, c, _ in costs]
        total = sum(weights)
        latency = roof.latency_seconds
        busy = not part.free and latency > 0
        for (node, cost, known), weight in zip(costs, weights, strict=True):
            share = (weight / total if total > 0 else 1 / len(costs)) * latency
            m = Metrics(cost.flops, cost.macs, cost.bytes_read + cost.bytes_written, share,
                        known=known)
            if busy and roof.bound == "compute":
                m.compute_bound_seconds = share
            elif busy:
                m.memory_bound_seconds = share
            out[id(node)] = m
    return out


def _add_partitions(view: View, run: Run, mapping: Mapping) -> None:
    for roof in mapping.estimates:
        part = roof.partition
        busy = not part.free and roof.latency_seconds > 0
        view.partitions[part.id] = PartitionView(
            part.id, part.graph_index, part.kind, part.free, roof.latency_seconds,
            roof.bound if busy else "none", [_op_key(part.graph_index, n) for n in part.nodes])


def _type_text(value: Value | None) -> str:
    return str(value.type) if value is not None and value.type is not None else ""


def _attr_text(value: object) -> str:
    if isinstance(value, Graph):
        return f"<graph {value.name}: {len(value.nodes)} nodes>"
    if isinstance(value, tuple) and value and isinstance(value[0], Graph):
        return ", ".join(_attr_text(v) for v in value)
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _add_graph(view: View, gi: int, graph: Graph, metrics: dict[int, Metrics],
               depth: int | None) -> None:
    key_of_value: dict[int, tuple[str, int]] = {}  # id(value) -> (view key, output index)
    view.weights.update(v.name for v in graph.parameters)
    view.weights.update(v.name for n in graph.nodes for v in n.inputs
                        if v is not None and v.tensor is not None)
    for i, value in enumerate(graph.inputs):
        key = f"g{gi}i{i}"
        view.nodes.append(ViewNode(key, "input", value.name, gi, shape=_type_text(value),
                                   outputs=[(value.name, _type_text(value))], index=i))
        key_of_value[id(value)] = (key, 0)
    boxes: dict[str, ViewNode] = {}
    members: dict[str, list[Node]] = {}
    placed: list[tuple[Node, ViewNode]] = []
    partition_of = view.partitions
    of_node = {n: p.id for p in partition_of.values() if p.graph_index == gi for n in p.members}
    for node in graph.nodes:
        m = metrics.get(id(node), Metrics(known=False))
        pid = of_node.get(_op_key(gi, node))
        box = _box_of(node, depth)
        if box is None:
            vn = ViewNode(_op_key(gi, node), "op", node.qualified_op, gi, node.qualified_op,
                          node.provenance.module_path, node.provenance.module_class,
                          _type_text(node.outputs[0] if node.outputs else None), [node.id],
                          [pid] if pid is not None else [],
                          Metrics(m.flops, m.macs, m.bytes, m.latency_seconds,
                                  m.compute_bound_seconds, m.memory_bound_seconds, m.known),
                          {k: _attr_text(v) for k, v in node.attrs.items()},
                          [(v.name, _type_text(v)) for v in node.outputs],
                          [("", "") if v is None else (v.name, _type_text(v))
                           for v in node.inputs])
            view.nodes.append(vn)
        else:
            vn = boxes.get(box) or ViewNode(f"g{gi}m:{box}", "module", box, gi,
                                            module_path=box)
            if box not in boxes:
                boxes[box] = vn
                members[box] = []
                view.nodes.append(vn)
            vn.node_ids.append(node.id)
            members[box].append(node)
            if pid is not None and pid not in vn.partition_ids:
                vn.partition_ids.append(pid)
            vn.metrics.add(m)
            if node.outputs:
                vn.shape = _type_text(node.outputs[0])  # the module's last output
            if node.provenance.module_path == box and node.provenance.module_class:
                vn.module_class = node.provenance.module_class
        placed.append((node, vn))
        for index, value in enumerate(node.outputs):
            key_of_value[id(value)] = (vn.key, index)
    for box, vn in boxes.items():
        vn.label = box
        vn.op = "+".join(dict.fromkeys(n.qualified_op for n in members[box]))
    edges: dict[tuple[str, str], ViewEdge] = {}

    def connect(value: Value, target: str, port: int) -> None:
        source = key_of_value.get(id(value))
        if source is None or source[0] == target:
            return  # a weight, a constant without producer, or inside one module box
        edge = edges.setdefault((source[0], target), ViewEdge(source[0], target))
        edge.values.append(EdgeValue(value.name, _type_text(value), source[1], port))

    for node, vn in placed:
        for port, operand in enumerate(node.inputs):
            if operand is not None:
                connect(operand, vn.key, port)
    for i, value in enumerate(graph.outputs):
        key = f"g{gi}o{i}"
        view.nodes.append(ViewNode(key, "output", value.name, gi, shape=_type_text(value),
                                   index=i))
        connect(value, key, 0)
    view.edges.extend(edges.values())


def _add_links(view: View, model: Model) -> None:
    """Graph breaks: an edge from the producing graph's output to the next graph's input."""
    for link in model.links:
        src = _index_of(model.graphs[link.from_graph].outputs, link.from_output)
        dst = _index_of(model.graphs[link.to_graph].inputs, link.to_input)
        if src is None or dst is None:
            continue
        value = model.graphs[link.from_graph].outputs[src]
        view.edges.append(ViewEdge(f"g{link.from_graph}o{src}", f"g{link.to_graph}i{dst}",
                                   [EdgeValue(value.name, _type_text(value), 0, 0)]))


def _index_of(values: Iterable[Value], name: str) -> int | None:
    return next((i for i, v in enumerate(values) if v.name == name), None)


def _add_namespaces(view: View, model: Model, metrics: dict[int, Metrics]) -> None:
    for graph in model.graphs:
        for node in graph.nodes:
            path = node.provenance.module_path
            if not path:
                continue
            parts = path.split(".")
            m = metrics.get(id(node), Metrics(known=False))
            for d in range(1, len(parts) + 1):
                prefix = ".".join(parts[:d])
                ns = view.namespaces.get(prefix)
                if ns is None:
                    ns = view.namespaces[prefix] = Namespace(prefix, ".".join(parts[:d - 1]), d)
                ns.nodes += 1
                ns.metrics.add(m)
                if d == len(parts) and node.provenance.module_class and not ns.module_class:
                    ns.module_class = node.provenance.module_class
