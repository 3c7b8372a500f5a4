"""The viewer's data as one JSON-able dict. Nodes, edges, names and per-node figures come
from the shared view model (`irbridge.graphview.build_view`, every op kept: the browser
folds modules itself), so the HTML, Model Explorer and DOT outputs agree; this module adds
what a details panel needs beyond it: provenance, the cost breakdown and each kernel's
roofline figures."""

from __future__ import annotations

import math
from typing import Any

from irbridge.analysis import Target
from irbridge.analysis.driver import Result
from irbridge.analysis.partition import category
from irbridge.graphview import ViewNode, build_view
from irbridge.ir import Model, Node


def _kernels(result: Result, target: Target) -> tuple[dict[int, dict[str, Any]],
                                                      dict[tuple[int, int], dict[str, Any]],
                                                      dict[str, Any]]:
    """Kernel records by partition id, node facts by (graph index, node id), and model
    totals, from the analysis the view was built from (one target, fused)."""
    run = result.runs[0]
    mapping = run.mappings[0]
    kernels: dict[int, dict[str, Any]] = {}
    for roof in mapping.estimates:
        part = roof.partition
        intensity = roof.intensity
        kernels[part.id] = {
            "id": part.id, "kind": part.kind, "reason": part.reason, "free": part.free,
            "members": [n.id for n in part.nodes], "flops": part.cost.flops,
            "ext": part.external_bytes, "int": part.internal_bytes,
            "latency": roof.latency_seconds, "compute": roof.compute_seconds,
            "memory": roof.memory_seconds, "bound": "free" if part.free else roof.bound,
            "attained": roof.attained,
            "intensity": intensity if math.isfinite(intensity) else None}
    facts: dict[tuple[int, int], dict[str, Any]] = {}
    for nc in run.costs.by_node.values():
        c = nc.cost
        facts[(nc.graph_index, nc.node.id)] = {
            "flops": c.flops, "macs": c.macs, "mm": c.matmul_flops, "other": c.other_flops,
            "read": c.bytes_read, "written": c.bytes_written, "params": c.param_bytes,
            "status": nc.status, "note": nc.note}
    dist = mapping.bound_distribution()
    total = run.costs.total
    totals = {"flops": total.flops, "macs": total.macs, "peak": mapping.peak,
              "bandwidth": mapping.bandwidth, "ridge": mapping.ridge,
              "attained": mapping.attained, "compute_kernels": dist["compute"][0],
              "memory_kernels": dist["memory"][0], "title": target.title}
    return kernels, facts, totals


def _provenance(node: Node) -> dict[str, Any]:
    prov = node.provenance
    loc = prov.location
    cat = category(node)
    return {"id": node.id, "name": node.name, "src": prov.source_op,
            "srcnode": prov.source_node, "fmt": prov.source_format,
            "loc": f"{loc.file}:{loc.line}" if loc is not None and loc.file else "",
            "code": loc.code if loc is not None else "",
            "cat": cat.value if cat is not None else ("opaque" if node.is_opaque else "other"),
            "body": sum(len(g.nodes) for g in node.subgraphs())}


def view_data(model: Model, target: Target) -> dict[str, Any]:
    """Everything the page shows (analysed on `target` at the model's own dtype with fused
    kernels, as `irbridge analyze` does by default)."""
    view = build_view(model, target)
    assert view.analysis is not None
    kernels, facts, totals = _kernels(view.analysis, target)
    ir_nodes = {(gi, n.id): n for gi, g in enumerate(model.graphs) for n in g.nodes}
    multi = len(model.graphs) > 1
    index: dict[str, int] = {}
    nodes: list[dict[str, Any]] = []

    def item(vn: ViewNode) -> dict[str, Any]:
        prefix = [f"{vn.graph_index}: {view.graph_names[vn.graph_index]}"] if multi else []
        m = vn.metrics
        out: dict[str, Any] = {
            "i": len(nodes), "key": vn.key, "kind": vn.kind if vn.kind != "module" else "op",
            "op": vn.op or vn.kind, "label": vn.label, "g": vn.graph_index,
            "ns": prefix + list(vn.namespace), "path": vn.module_path, "cls": vn.module_class,
            "outs": [list(o) for o in vn.outputs] or [[vn.label, vn.shape or "?"]],
            "ins": [[name, t or "?", name in view.weights] if name else ["(omitted)", "", False]
                    for name, t in vn.inputs],
            "attrs": sorted([k, v] for k, v in vn.attrs.items()),
            "lat": m.latency_seconds, "comp": m.compute_bound_seconds,
            "mem": m.memory_bound_seconds, "known": m.known,
            "k": vn.partition_ids[0] if vn.partition_ids else None}
        if vn.kind == "op" and vn.node_ids:
            key = (vn.graph_index, vn.node_ids[0])
            out.update(_provenance(ir_nodes[key]))
            out["cost"] = facts.get(key)
        if vn.kind == "output":
            out["ins"] = [[vn.label, vn.shape or "?", False]]
        return out

    for vn in view.nodes:
        index[vn.key] = len(nodes)
        nodes.append(item(vn))
    edges = [[index[e.source], index[e.target], ", ".join(v.type or "?" for v in e.values)]
             for e in view.edges if e.source in index and e.target in index]
    return {
        "model": {"name": view.name, "source": model.source_format,
                  "graphs": len(model.graphs), "ops": view.op_nodes,
                  "params": model.parameter_count(), "target": view.target,
                  "dtype": view.dtype, "strategy": view.strategy,
                  "latency": view.total_latency_seconds, "warnings": view.warnings, **totals},
        "nodes": nodes, "edges": edges,
        "kernels": {str(k): v for k, v in kernels.items()}}
