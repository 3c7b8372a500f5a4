"""One call that runs the whole backend: bind shapes, cost, partition, map, annotate."""

from __future__ import annotations

from collections.abc import Mapping as MappingABC
from collections.abc import Sequence
from dataclasses import dataclass, field

from irbridge._gc import gc_paused
from irbridge.analysis.binding import (
    COMPUTE_DTYPES,
    Binding,
    bound,
    model_compute_dtype,
    parse_compute_dtype,
)
from irbridge.analysis.check import check_cost, check_shapes, check_structure
from irbridge.analysis.concurrency import concurrency
from irbridge.analysis.cost import CostReport, ModuleRow, cost_model, module_table
from irbridge.analysis.hardware import Target
from irbridge.analysis.partition import STRATEGIES, Partitioning, partition
from irbridge.analysis.roofline import Mapping, map_partitions
from irbridge.errors import IrbridgeError
from irbridge.ir import Analysis, Model


@dataclass
class Run:
    """The analysis of one batch size with one fusion strategy on every target."""

    batch: int | None
    binding: Binding
    strategy: str
    costs: CostReport
    partitioning: Partitioning
    mappings: list[Mapping]
    modules: list[ModuleRow] | None = None


@dataclass
class Result:
    model: Model
    dtype: str
    dtype_given: bool
    targets: list[Target]
    runs: list[Run]
    warnings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.model.name or "model"


@gc_paused
def analyze(model: Model, targets: Sequence[Target], *, dtype: str | None = None,
            batches: Sequence[int | None] = (None,), strategies: Sequence[str] = ("fused",),
            symbols: MappingABC[str, int] | None = None,
            module_depth: int | None = None) -> Result:
    """Analyse `model` on each target, for each batch size and fusion strategy.

    dtype: a compute dtype (`bf16`, ...); None takes the model's own. When it differs from
    the model's, float tensors are costed at its size. Targets without a peak for the dtype
    are skipped with a warning (an error when none is left)."""
    if not model.graphs:
        raise IrbridgeError("the model has no graph to analyse")
    check_structure(model)
    check_shapes(model)
    own = model_compute_dtype(model)
    chosen = parse_compute_dtype(dtype) if dtype is not None else own
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise IrbridgeError(f"unknown fusion strategy {strategy!r}; known: "
                                f"{', '.join(STRATEGIES)}")
    usable = [t for t in targets if t.has_peak(chosen)]
    warnings = [f"target {t.name} has no {chosen} peak (it has {', '.join(t.peaks)}); skipped"
                for t in targets if not t.has_peak(chosen)]
    if not usable:
        raise IrbridgeError(f"no target has a {chosen} peak: "
                            + "; ".join(f"{t.name} has {', '.join(t.peaks)}" for t in targets),
                            hint="pick another --dtype")
    storage = COMPUTE_DTYPES[chosen] if COMPUTE_DTYPES[chosen] != COMPUTE_DTYPES[own] else None
    result = Result(model, chosen, dtype is not None, list(usable), [], warnings)
    for batch in batches:
        with bound(model, symbols=symbols, batch=batch, storage=storage) as binding:
            check_shapes(model)
            costs = cost_model(model, binding)
            for nc in costs.by_node.values():
                check_cost(nc.node, nc.cost)
            modules = module_table(costs, module_depth) if module_depth else None
            for strategy in strategies:
                parts = partition(model, costs, strategy)
                mappings = []
                for target in usable:
                    mapping = map_partitions(parts, target, chosen)
                    mapping.concurrency = concurrency(model, parts, mapping.latencies())
                    mappings.append(mapping)
                result.runs.append(Run(batch, binding, strategy, costs, parts, mappings,
                                       modules))
        for line in costs.warnings():
            if line not in result.warnings:
                result.warnings.append(line)
    return result


def annotate(model: Model, run: Run) -> None:
    """Write a run into the model: each node's cost and partition id, and `model.analysis`
    with the partitions and one HardwareMapping per target. Costs are those of the run's
    binding (batch, dtype), which metadata `analysis.binding` records; the file keeps its
    own value types."""
    for nc in run.costs.by_node.values():
        node = nc.node
        node.annotations.cost = nc.own_cost
        node.annotations.partition_id = run.partitioning.of_node.get(node.id)
    model.analysis = Analysis(run.strategy, [p.to_ir() for p in run.partitioning.partitions],
                              [m.to_ir() for m in run.mappings])
    described = run.binding.describe()
    storage = run.binding.storage.short if run.binding.storage is not None else ""
    model.metadata["analysis.binding"] = ", ".join(
        x for x in (described, f"storage={storage}" if storage else "") if x) or "as captured"
    if run.mappings:
        model.metadata["analysis.dtype"] = run.mappings[0].dtype
