"""The IR verifier: structural rules, checked with messages that say what and where.

Like torch.fx's linter, it names the offending node (id, op, module path) and value, and
says what would be right. `verify` collects every problem; `check` raises on the first
error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from irbridge._gc import gc_paused
from irbridge.errors import IrbridgeError, VerificationError
from irbridge.ir import Graph, Model, Node, TensorType, Value
from irbridge.ops import registry


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" or "warning"
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"


@gc_paused
def verify(model: Model, *, check_types: bool = True) -> list[Problem]:
    """All problems of a model, errors first."""
    problems: list[Problem] = []
    seen_ids: dict[int, str | _Where] = {}
    for index, graph in enumerate(model.graphs):
        _verify_graph(model, graph, f"graph {index} ({graph.name})", [], seen_ids, problems,
                      check_types)
    _verify_links(model, problems)
    return sorted(problems, key=lambda p: p.severity != "error")


def check(model: Model) -> None:
    """Raise VerificationError for the first error (warnings pass)."""
    errors = [p for p in verify(model) if p.severity == "error"]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise VerificationError(f"{errors[0].where}: {errors[0].message}{more}",
                                hint="run `irbridge validate FILE` for the full list")


def _verify_graph(model: Model, graph: Graph, gwhere: str, outer: list[set[int]],
                  seen_ids: dict[int, str | _Where], problems: list[Problem],
                  check_types: bool) -> None:
    def error(where: str, message: str) -> None:
        problems.append(Problem("error", where, message))

    def warn(where: str, message: str) -> None:
        problems.append(Problem("warning", where, message))

    defined: set[int] = set()  # ids of Value objects available so far
    names: dict[str, Value] = {}

    def define(value: Value, where: str | _Where) -> None:
        if names.setdefault(value.name, value) is not value:
            error(str(where), f"value name {value.name!r} is defined twice in {gwhere}")
            names[value.name] = value
        defined.add(id(value))
        shape = value.type.shape if value.type is not None else None
        if shape is not None and any(isinstance(d, int) and d < 0 for d in shape):
            error(str(where), f"value {value.name!r} has a negative dim: {value.type}")

    for value in graph.inputs:
        define(value, f"{gwhere} input {value.name!r}")
        if value.type is None:
            warn(f"{gwhere} input {value.name!r}", "has no type")
    for value in graph.parameters:
        define(value, f"{gwhere} parameter {value.name!r}")
        if value.tensor is None or model.tensors.get(value.name) is not value.tensor:
            error(f"{gwhere} parameter {value.name!r}",
                  "is not a tensor of the model (add it with Model.add_tensor)")

    scopes = [*outer, defined]
    shared: dict[int, set[tuple[int, int]]] = {}   # a much-used value -> its uses, a set

    def recorded(value: Value, node: Node, index: int) -> bool:
        """Whether `value.uses` holds (node, index): a scan of a short list, a set kept
        for a value used many times (a weight shared by every layer)."""
        uses = value.uses
        if len(uses) <= 8:
            return any(n is node and i == index for n, i in uses)
        found = shared.get(id(value))
        if found is None:
            found = shared[id(value)] = {(id(n), i) for n, i in uses}
        return (id(node), index) in found

    for node in graph.nodes:
        # the node's place in words only when a problem names it (a string per node was
        # a large part of the pass on a big graph)
        where = _Where(gwhere, node)
        if node.id in seen_ids:
            error(str(where), f"node id {node.id} is also used by {seen_ids[node.id]}")
        seen_ids[node.id] = where
        for index, operand in enumerate(node.inputs):
            if operand is None:
                continue
            if not any(id(operand) in scope for scope in scopes):
                error(str(where), f"input {index} reads {operand.name!r}, which is not defined "
                                  "before this node (graph out of topological order, or a "
                                  "dangling value)")
            if not recorded(operand, node, index):
                error(str(where), f"input {index} ({operand.name!r}) is missing from that "
                                  "value's uses")
        for sub_index, sub in enumerate(node.subgraphs()):
            _verify_graph(model, sub, f"{where} body {sub_index} ({sub.name})", scopes,
                          seen_ids, problems, check_types)
        for value in node.outputs:
            define(value, where)
            if value.producer is not node:
                error(str(where), f"output {value.name!r} does not record this node as "
                                  "producer")
            if value.type is None:
                warn(str(where), f"output {value.name!r} has no type")
        if node.is_opaque:
            warn(str(where), f"opaque op {node.qualified_op} (not in the neutral op set)")
            continue
        _verify_op(node, where, error, check_types)

    for value in graph.outputs:
        if id(value) not in defined and not any(id(value) in s for s in outer):
            error(f"{gwhere} output {value.name!r}", "is not produced by any node or input")


Report = Callable[[str, str], None]


class _Where:
    """A node's place in a problem's words (`graph 0 (main) node #3 add`), spelt out only
    when a problem is reported."""

    __slots__ = ("graph", "node")

    def __init__(self, graph: str, node: Node) -> None:
        self.graph, self.node = graph, node

    @property
    def short(self) -> str:
        return registry.node_where(self.node)

    def __str__(self) -> str:
        return f"{self.graph} {self.short}"


def _verify_op(node: Node, at: _Where, report: Report, check_types: bool) -> None:
    schema = registry.lookup(node.op)
    if schema is None:
        report(str(at), f"unknown op {node.op!r} in the neutral op set; use a non-empty "
                        "domain for an opaque op")
        return
    short = at.short   # the registry's checks name the node in their errors
    try:
        schema.check_arity(len(node.inputs), short)
        schema.resolve_attrs(node.attrs, short)
        if not schema.variadic_outputs and len(node.outputs) != len(schema.outputs):
            report(str(at), f"has {len(node.outputs)} outputs; {node.op} has "
                            f"{len(schema.outputs)} ({', '.join(schema.outputs)})")
            return
        if not check_types or any(v is not None and v.type is None for v in node.inputs):
            return
        inferred = registry.infer_types(node)
    except IrbridgeError as exc:
        where = str(at)
        report(where, exc.message.removeprefix(where + ": ").removeprefix(short + ": "))
        return
    for value, expected in zip(node.outputs, inferred, strict=False):
        if value.type is not None and not _compatible(value.type, expected):
            report(str(at), f"output {value.name!r} is {value.type} but {node.op} infers "
                            f"{expected} from its inputs")


def _compatible(recorded: TensorType, inferred: TensorType) -> bool:
    if recorded.dtype != inferred.dtype:
        return False
    if recorded.shape is None or inferred.shape is None:
        return True
    if len(recorded.shape) != len(inferred.shape):
        return False
    return all(not (isinstance(a, int) and isinstance(b, int)) or a == b
               for a, b in zip(recorded.shape, inferred.shape, strict=True))


def _verify_links(model: Model, problems: list[Problem]) -> None:
    for link in model.links:
        where = f"link graph {link.from_graph}.{link.from_output} -> graph {link.to_graph}.{link.to_input}"
        count = len(model.graphs)
        if not (0 <= link.from_graph < count and 0 <= link.to_graph < count):
            problems.append(Problem("error", where, f"graph index out of range (model has {count})"))
            continue
        if link.from_graph >= link.to_graph:
            problems.append(Problem("error", where, "links must go forward in execution order"))
        if link.from_output not in {v.name for v in model.graphs[link.from_graph].outputs}:
            problems.append(Problem("error", where, f"{link.from_output!r} is not an output"))
        if link.to_input not in {v.name for v in model.graphs[link.to_graph].inputs}:
            problems.append(Problem("error", where, f"{link.to_input!r} is not an input"))
