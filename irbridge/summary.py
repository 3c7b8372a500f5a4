"""Model summaries: the facts `irbridge info` and `irbridge convert` print."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from irbridge.errors import IrbridgeError
from irbridge.ir import Cost, Model, Node, Value
from irbridge.ops import registry


@dataclass
class ModelSummary:
    name: str
    source_format: str
    ir_version: int
    opset_version: int
    producer: str
    graphs: int
    nodes: int
    opaque_nodes: int
    parameters: int
    parameter_bytes: int
    weights: str  # "stored", "shape-only", "none"
    inputs: list[str]
    outputs: list[str]
    op_histogram: list[tuple[str, int]]
    opaque_ops: list[tuple[str, int]]
    cost: Cost
    uncosted_nodes: int
    metadata: dict[str, str] = field(default_factory=dict)


def summarize(model: Model) -> ModelSummary:
    """Counts, sizes and total cost of a model (all graphs, control-flow bodies included)."""
    histogram: Counter[str] = Counter()
    opaque: Counter[str] = Counter()
    uncosted = 0

    def cost_of(nodes: list[Node]) -> Cost:
        """The nodes' cost, control-flow bodies combined as the registry says (loops times
        their static trip count, the costlier branch of an `if`)."""
        nonlocal uncosted
        total = Cost()
        for node in nodes:
            histogram[node.qualified_op] += 1
            if node.is_opaque:
                opaque[node.qualified_op] += 1
            total = total + registry.bodies_cost(node, [cost_of(sub.nodes)
                                                        for sub in node.subgraphs()])
            if not _static(node):
                uncosted += 1  # symbolic or unknown shapes: no static cost until bound
                continue
            try:
                total = total + registry.node_cost(node)
            except IrbridgeError:
                uncosted += 1
        return total

    total = sum((cost_of(graph.nodes) for graph in model.graphs), Cost())
    nodes = sum(histogram.values())
    tensors = model.tensors.values()
    if not model.tensors:
        weights = "none"
    elif all(t.data is None for t in tensors):
        weights = "shape-only"
    else:
        weights = "stored"
    first = model.graphs[0] if model.graphs else None
    return ModelSummary(
        name=model.name, source_format=model.source_format, ir_version=model.ir_version,
        opset_version=model.opset_version,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        graphs=len(model.graphs), nodes=nodes, opaque_nodes=sum(opaque.values()),
        parameters=model.parameter_count(), parameter_bytes=sum(t.nbytes for t in tensors),
        weights=weights,
        inputs=[_describe(v) for v in first.inputs] if first else [],
        outputs=[_describe(v) for v in model.graphs[-1].outputs] if first else [],
        op_histogram=histogram.most_common(), opaque_ops=opaque.most_common(), cost=total,
        uncosted_nodes=uncosted, metadata=dict(model.metadata))


def _static(node: Node) -> bool:
    return all(v.type is not None and v.type.is_static
               for v in (*node.inputs, *node.outputs) if v is not None)


def _describe(value: Value) -> str:
    return f"{value.name}: {value.type if value.type is not None else '?'}"


def _three_digits(x: float) -> str:
    """Three significant digits without scientific notation: 1.81, 22.3, 1002."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def human_count(n: float, unit: str = "") -> str:
    """1234567 -> '1.23 M'; 3.35e12 with unit 'B/s' -> '3.35 TB/s'."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{_three_digits(n / factor)} {prefix}{unit}"
    text = _three_digits(n) if isinstance(n, float) else str(n)
    return f"{text} {unit}".rstrip()


def human_bytes(n: int) -> str:
    for factor, prefix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= factor:
            return f"{_three_digits(n / factor)} {prefix}"
    return f"{n} B"
