"""Per-node cost, model totals and a per-module rollup, all from the op registry.

The registry (`irbridge.ops.node_cost`) is the only place that knows what an op costs; this
module only sums. Conventions (docs/ir-spec.md): MACs of matmul-like ops, matmul-like
FLOPs = 2 x MACs, other FLOPs at the per-op constants of docs/ops.md, bytes read and
written per tensor (unfused), parameter bytes.

Special nodes:
- opaque nodes (a domain other than the neutral one) cost their bytes only; they are
  counted and named in a warning, never treated as free without saying so;
- nodes with symbolic dims (`s0`, `batch`) have no static cost: they are reported as
  uncosted with their symbols (bind them with `binding.bound(symbols=..., batch=...)`);
- data-dependent sizes (`non_zero`, `masked_select`, `unique`, ...) are named symbolic
  sizes bounded by the input (e.g. `non_zero0_n` in [0, numel]): like other symbols they
  are uncosted until bound (`binding.bound(symbols={"non_zero0_n": ...})`, the bound's
  maximum for a worst case);
- nodes with dims unknown even after binding (no name, `?`) keep the registry's cost of
  their static parts and are reported as partial (lower bounds);
- control-flow nodes (`if`, `loop`) carry the cost of their bodies, each body node once,
  or times the trip count where the op knows it statically (`Flops.repeats`: a loop with a
  constant trip count and no cond input); of the two branches of an `if`, which are
  alternatives, the costlier counts (FLOPs, then bytes): an upper bound of one execution.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from irbridge.analysis.binding import Binding, node_symbols
from irbridge.errors import IrbridgeError
from irbridge.ir import Cost, Model, Node, SymDim
from irbridge.ops import registry


@dataclass
class NodeCost:
    node: Node
    graph_index: int
    cost: Cost  # the node's cost; for control-flow nodes including their bodies
    status: str = "ok"  # ok | opaque | uncosted | partial | error
    note: str = ""
    own: Cost | None = None  # control-flow nodes: the node alone, bodies excluded

    @property
    def own_cost(self) -> Cost:
        return self.own if self.own is not None else self.cost


@dataclass
class CostReport:
    """Costs of every top-level node (control-flow nodes include their bodies)."""

    nodes: list[NodeCost]
    by_node: dict[int, NodeCost]  # id(node) -> cost, body nodes included
    total: Cost
    binding: Binding | None = None
    body_nodes: int = 0
    weight_bytes: int = 0  # distinct weights read, at the types costed (bound dtype)
    opaque: Counter[str] = field(default_factory=Counter)
    uncosted: list[NodeCost] = field(default_factory=list)
    partial: list[NodeCost] = field(default_factory=list)
    errors: list[NodeCost] = field(default_factory=list)

    def of(self, node: Node) -> NodeCost:
        return self.by_node[id(node)]

    def warnings(self) -> list[str]:
        """One line per kind of problem: opaque, uncosted, partial and failed nodes."""
        lines = []
        if self.opaque:
            count = sum(self.opaque.values())
            names = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in self.opaque.most_common())
            lines.append(f"{count} opaque node{'s' if count != 1 else ''} costed at their bytes "
                         f"only (0 FLOPs): {names}")
        if self.uncosted:
            symbols = sorted({s for nc in self.uncosted for s in nc.note.split(", ") if s})
            lines.append(f"{len(self.uncosted)} node{'s' if len(self.uncosted) != 1 else ''} "
                         f"uncosted (symbolic dims {', '.join(symbols)}): bind them with "
                         "--batch N or --bind NAME=N")
        if self.partial:
            ops = Counter(nc.node.qualified_op for nc in self.partial)
            lines.append(f"{len(self.partial)} node{'s' if len(self.partial) != 1 else ''} with "
                         "data-dependent sizes costed as lower bounds: "
                         + ", ".join(f"{op} x{n}" if n > 1 else op for op, n in ops.most_common()))
        for nc in self.errors:
            lines.append(f"node #{nc.node.id} {nc.node.qualified_op} not costed: {nc.note}")
        return lines


def cost_node(node: Node, graph_index: int = 0) -> NodeCost:
    """The registry's cost of one node, with its status."""
    symbols = node_symbols(node)
    try:
        cost = registry.node_cost(node)
    except IrbridgeError as exc:
        return NodeCost(node, graph_index, Cost(), "error", exc.message)
    if node.is_opaque:
        return NodeCost(node, graph_index, cost, "opaque")
    if symbols:
        named = [s for s in symbols if s != "?"]
        if named or _has_symbolic(node):
            return NodeCost(node, graph_index, Cost(), "uncosted", ", ".join(named))
        return NodeCost(node, graph_index, cost, "partial", "data-dependent sizes")
    return NodeCost(node, graph_index, cost)


def _has_symbolic(node: Node) -> bool:
    for value in [*node.inputs, *node.outputs]:
        if value is not None and value.type is not None and value.type.shape is not None and any(
                isinstance(d, SymDim) for d in value.type.shape):
            return True
    return False


def cost_model(model: Model, binding: Binding | None = None) -> CostReport:
    """Cost every node of every graph. Call inside `binding.bound()` to cost at other
    shapes or dtypes."""
    nodes: list[NodeCost] = []
    by_node: dict[int, NodeCost] = {}
    report = CostReport(nodes, by_node, Cost(), binding)
    total = Cost()
    for graph_index, graph in enumerate(model.graphs):
        for node in graph.nodes:
            nc = cost_node(node, graph_index)
            by_node[id(node)] = nc
            _record(report, nc)
            own = nc.cost
            body, bodies = _bodies(node, graph_index, report)
            if bodies:
                nc.cost = own + body
                nc.own = own
                repeats = _repeats(node)
                nc.note = f"includes {bodies} body nodes, " + (
                    "the costlier branch counted" if _one_body(node) else
                    "each counted once" if repeats is None else f"run {repeats} times")
                report.body_nodes += bodies
            nodes.append(nc)
            total = total + nc.cost
    report.total = total
    weights: dict[str, int] = {}
    for _, node in model.all_nodes():
        for value in node.inputs:
            if value is not None and value.tensor is not None and value.type is not None:
                weights[value.tensor.name] = value.type.nbytes() or 0
    report.weight_bytes = sum(weights.values())
    return report


def _repeats(node: Node) -> int | None:
    try:
        return registry.body_repeats(node)
    except IrbridgeError:  # the node's own cost failed: reported with it
        return None


def _one_body(node: Node) -> bool:
    try:
        return registry.one_body_runs(node)
    except IrbridgeError:  # the node's own cost failed: reported with it
        return False


def _bodies(node: Node, graph_index: int, report: CostReport) -> tuple[Cost, int]:
    """Cost of the bodies of a control-flow node (nested bodies included), each node times
    the runs of the loops around it where they are static; and how many body nodes."""
    costs, count = [], 0
    for sub in node.subgraphs():
        body = Cost()
        for inner in sub.nodes:
            inner_cost = cost_node(inner, graph_index)
            report.by_node[id(inner)] = inner_cost
            _record(report, inner_cost)
            nested, nested_count = _bodies(inner, graph_index, report)
            body = body + inner_cost.cost + nested
            count += 1 + nested_count
        costs.append(body)
    return registry.bodies_cost(node, costs), count


def _record(report: CostReport, nc: NodeCost) -> None:
    if nc.status == "opaque":
        report.opaque[nc.node.qualified_op] += 1
    elif nc.status == "uncosted":
        report.uncosted.append(nc)
    elif nc.status == "partial":
        report.partial.append(nc)
    elif nc.status == "error":
        report.errors.append(nc)


# -- per-module rollup -----------------------------------------------------------------------

ROOT = "(model)"
UNATTRIBUTED = "(no module)"


@dataclass
class ModuleRow:
    """One row of the hierarchical profile: a module path prefix and what ran under it."""

    path: str
    depth: int
    nodes: int = 0
    parameters: int = 0
    output: str = ""
    cost: Cost = field(default_factory=Cost)

    @property
    def memory(self) -> int:
        """Bytes moved by the module's nodes, unfused (read + written)."""
        return self.cost.bytes_read + self.cost.bytes_written


def module_table(report: CostReport, depth: int) -> list[ModuleRow]:
    """Rollup by `provenance.module_path` prefixes down to `depth` (1 = `layer1`,
    2 = `layer1.0`, ...), in tree order, with a root row for the whole model. Nodes without
    a module path are gathered under `(no module)`. Parameters count each distinct tensor
    read under a module once."""
    if depth < 1:
        raise IrbridgeError(f"--by-module depth must be at least 1, got {depth}")
    root = ModuleRow(ROOT, 0)
    rows: dict[str, ModuleRow] = {}
    first_seen: dict[str, int] = {}
    tensors: dict[str, dict[str, int]] = {ROOT: {}}
    for nc in report.nodes:
        node = nc.node
        parts = node.provenance.module_path.split(".") if node.provenance.module_path else []
        prefixes = [".".join(parts[:d]) for d in range(1, min(depth, len(parts)) + 1)]
        if not prefixes:
            prefixes = [UNATTRIBUTED]
        params = {v.tensor.name: v.tensor.numel for v in node.inputs
                  if v is not None and v.tensor is not None}
        output = str(node.outputs[0].type) if node.outputs and node.outputs[0].type else "?"
        for target in (root, *(_row(rows, first_seen, tensors, p) for p in prefixes)):
            target.nodes += 1
            target.cost = target.cost + nc.cost
            target.output = output
            tensors[target.path].update(params)
    for row in (root, *rows.values()):
        row.parameters = sum(tensors[row.path].values())

    def key(path: str) -> tuple[int, ...]:
        if path == UNATTRIBUTED:
            return (first_seen[path],)
        parts = path.split(".")
        return tuple(first_seen[".".join(parts[:i])] for i in range(1, len(parts) + 1))

    return [root, *sorted(rows.values(), key=lambda r: key(r.path))]


def _row(rows: dict[str, ModuleRow], first_seen: dict[str, int],
         tensors: dict[str, dict[str, int]], path: str) -> ModuleRow:
    row = rows.get(path)
    if row is None:
        depth = 1 if path == UNATTRIBUTED else path.count(".") + 1
        row = rows[path] = ModuleRow(path, depth)
        first_seen[path] = len(first_seen)
        tensors[path] = {}
    return row
