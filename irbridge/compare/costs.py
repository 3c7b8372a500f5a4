"""Cost comparison through the analysis backend: FLOPs (matmul-like and other), bytes moved
(unfused: read + written) and estimated latency (fused kernels, roofline on one target)
per module and in total, side by side.

Modules are normalised module paths cut at one depth, so both sides' spellings meet. A
fused kernel's latency goes to the module of its heaviest node (most FLOPs, then bytes):
kernels are what the roofline estimates, and a kernel mostly does its anchor's work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from irbridge.analysis.driver import analyze
from irbridge.analysis.hardware import Target
from irbridge.compare.match import node_path
from irbridge.ir import Model, Node

UNATTRIBUTED = "(no module)"
TOTAL = "(total)"
FLOPS_TOLERANCE = 0.005
"""Relative matmul-FLOPs difference a module may show before it is flagged (issue: 0.5%)."""


@dataclass
class Figures:
    matmul_flops: int = 0
    other_flops: int = 0
    bytes: int = 0
    latency: float = 0.0  # seconds
    nodes: int = 0


@dataclass
class CostRow:
    module: str
    left: Figures = field(default_factory=Figures)
    right: Figures = field(default_factory=Figures)

    @property
    def matmul_delta(self) -> int:
        return self.right.matmul_flops - self.left.matmul_flops

    @property
    def flagged(self) -> bool:
        """Matmul-like FLOPs differ beyond FLOPS_TOLERANCE (other FLOPs and bytes change
        legitimately with fusion and decomposition, so they are shown, not flagged)."""
        a, b = self.left.matmul_flops, self.right.matmul_flops
        return abs(a - b) > FLOPS_TOLERANCE * max(a, b)


@dataclass
class CostComparison:
    target: str
    dtype: str
    depth: int
    rows: list[CostRow]
    total: CostRow
    warnings: list[str] = field(default_factory=list)


def _prefix(path: str, depth: int) -> str:
    if not path:
        return UNATTRIBUTED
    return ".".join(path.split(".")[:depth])


def _rollup(model: Model, target: Target, depth: int, paths: Mapping[int, str]
            ) -> tuple[dict[str, Figures], Figures, str, list[str]]:
    result = analyze(model, [target], strategies=("fused",))
    run = result.runs[0]
    rows: dict[str, Figures] = {}
    total = Figures()

    def module_of(node: Node) -> str:
        return _prefix(paths.get(id(node), node_path(node)), depth)

    for nc in run.costs.nodes:
        key = module_of(nc.node)
        for figures in (rows.setdefault(key, Figures()), total):
            figures.matmul_flops += nc.cost.matmul_flops
            figures.other_flops += nc.cost.other_flops
            figures.bytes += nc.cost.bytes_read + nc.cost.bytes_written
            figures.nodes += 1
    for roof in run.mappings[0].estimates:
        members = roof.partition.nodes
        heaviest = max(members, key=lambda n: (run.costs.of(n).cost.flops,
                                               run.costs.of(n).cost.bytes_read))
        key = module_of(heaviest)
        rows.setdefault(key, Figures()).latency += roof.latency_seconds
        total.latency += roof.latency_seconds
    return rows, total, result.dtype, result.warnings


def auto_depth(models: list[Model], rows_wanted: int = 6, limit: int = 6) -> int:
    """The smallest depth at which the module paths split into at least `rows_wanted`
    modules (so a model wrapped in one top module still gets a useful table)."""
    paths = {node_path(n) for m in models for _, n in m.all_nodes()} - {""}
    for depth in range(1, limit + 1):
        if len({_prefix(p, depth) for p in paths}) >= rows_wanted:
            return depth
    return limit


def compare_costs(left: Model, right: Model, target: Target, depth: int | None = None,
                  right_paths: Mapping[int, str] | None = None) -> CostComparison:
    """Per-module and total cost of both sides on `target`, rows in the left's order.
    `right_paths` (id(node) -> module path) books right nodes under their left partner's
    module: a conv that an exporter fused with the batch norm after it carries the norm's
    module path, but its FLOPs are the conv's."""
    chosen = depth if depth is not None else auto_depth([left, right])
    left_rows, left_total, dtype, warnings_l = _rollup(left, target, chosen, {})
    right_rows, right_total, _, warnings_r = _rollup(right, target, chosen, right_paths or {})
    names = list(dict.fromkeys([*left_rows, *right_rows]))
    if UNATTRIBUTED in names:  # keep the catch-all row last
        names.remove(UNATTRIBUTED)
        names.append(UNATTRIBUTED)
    rows = [CostRow(name, left_rows.get(name, Figures()), right_rows.get(name, Figures()))
            for name in names]
    warnings = [f"left: {w}" for w in warnings_l] + [f"right: {w}" for w in warnings_r]
    return CostComparison(target.name, dtype, chosen, rows,
                          CostRow(TOTAL, left_total, right_total), warnings)
