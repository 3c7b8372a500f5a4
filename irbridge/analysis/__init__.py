"""The analysis backend: cost, fusion partitions, concurrency and roofline mapping.

Works on the neutral IR only: costs come from the op registry (`irbridge.ops.node_cost`),
partitions from op categories and dataflow, so a model gives the same answer whichever
front-end captured it.

    from irbridge.analysis import analyze, annotate, resolve_targets
    result = analyze(model, resolve_targets("h100,a100"), dtype="bf16", batches=[1, 8])
    annotate(model, result.runs[0])   # costs, partition ids, model.analysis

Modules: `binding` (symbols, batch, storage dtype), `cost` (per node, totals, per module),
`partition` (unfused / fused kernels), `concurrency` (stages, critical path), `hardware`
(the YAML catalog), `roofline` (per-kernel estimates), `driver` (all of it), `report`
(tables, JSON, CSV, Markdown) and `plot` (roofline PNG / SVG).
"""

from __future__ import annotations

from irbridge.analysis.driver import Result, Run, analyze, annotate
from irbridge.analysis.hardware import Target, catalog, resolve_target, resolve_targets

__all__ = ["Result", "Run", "Target", "analyze", "annotate", "catalog", "resolve_target",
           "resolve_targets"]
