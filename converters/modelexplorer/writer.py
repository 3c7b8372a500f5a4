"""Model Explorer graph JSON and node-data overlays, written without importing the
`ai-edge-model-explorer` package (a dev dependency): the JSON has exactly the fields its
`graph_builder` / `node_data_builder` dataclasses serialise to (version 0.1.34), which is
what the package's Python adapters hand to its web app and what its JSON loader reads."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from irbridge.atomic import atomic_dir, atomic_file
from irbridge.converters.graphviz.writer import BOUND_COLOURS
from irbridge.errors import ExportError
from irbridge.graphview import View, ViewNode, build_view, human_flops, human_seconds
from irbridge.ir import Model

# Overlay name -> file suffix part; `-o resnet18.json` also writes resnet18.<name>.json.
OVERLAYS = ("latency", "flops", "bound")
# Node-data value of the bound overlay (the colours are those of the Graphviz pictures).
BOUND_VALUES = {"compute": 1, "memory": 0}
GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 1, "bgColor": "#d7301f"}]


def write(model: Model, path: str | os.PathLike[str], *, hardware: str,
          dtype: str | None = None) -> Path:
    """Write the graph JSON and its overlays, all or nothing.

    `path` ending in .json: the graph there and `<stem>.latency.json`, `<stem>.flops.json`,
    `<stem>.bound.json` beside it. Any other `path`: a folder holding `<model>.json` and the
    three overlays."""
    path = Path(path)
    view = build_view(model, hardware, dtype=dtype)
    if not any(n.metrics.known for n in view.nodes if n.kind == "op"):
        raise ExportError(f"{path}: no node of {view.name} has known shapes, so there is no "
                          f"latency, FLOPs or bound to overlay",
                          hint="bind its symbolic dims with --bind NAME=SIZE, or export a "
                               "model captured with shapes")
    files = render(view)
    if path.suffix.lower() == ".json":
        names = {"graph": path.name, **{k: f"{path.stem}.{k}.json" for k in OVERLAYS}}
        with contextlib.ExitStack() as stack:
            temps = {k: stack.enter_context(atomic_file(path.with_name(n)))
                     for k, n in names.items()}
            for key, tmp in temps.items():
                tmp.write_text(files[key], encoding="utf-8")
        return path
    stem = _file_stem(view.name)
    with atomic_dir(path) as tmp_dir:
        (tmp_dir / f"{stem}.json").write_text(files["graph"], encoding="utf-8")
        for key in OVERLAYS:
            (tmp_dir / f"{stem}.{key}.json").write_text(files[key], encoding="utf-8")
    return path


def output_files(path: str | os.PathLike[str], model_name: str) -> dict[str, Path]:
    """Where `write(model, path)` puts the graph and each overlay."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return {"graph": path, **{k: path.with_name(f"{path.stem}.{k}.json") for k in OVERLAYS}}
    stem = _file_stem(model_name or "model")
    return {"graph": path / f"{stem}.json",
            **{k: path / f"{stem}.{k}.json" for k in OVERLAYS}}


def render(view: View) -> dict[str, str]:
    """JSON texts: "graph" and one per overlay name."""
    texts = {"graph": json.dumps(graph_collection(view), indent=1, ensure_ascii=False) + "\n"}
    for key in OVERLAYS:
        texts[key] = json.dumps(node_data(view, key), indent=1, ensure_ascii=False) + "\n"
    return texts


def node_id(node: ViewNode) -> str:
    """The Model Explorer node id: the IR node id for ops, `input:N` / `output:N` else."""
    if node.kind == "op":
        return str(node.node_ids[0])
    return f"{node.kind}:{node.index}"


def graph_collection(view: View) -> dict[str, Any]:
    """A `graph_builder.GraphCollection` as the package serialises it (dataclasses.asdict)."""
    if view.depth is not None:
        raise ExportError("Model Explorer folds namespaces itself: build the view uncollapsed")
    ids = {n.key: node_id(n) for n in view.nodes}
    incoming: dict[str, list[dict[str, str]]] = {}
    for edge in view.edges:
        for value in edge.values:
            incoming.setdefault(edge.target, []).append(
                {"sourceNodeId": ids[edge.source], "sourceNodeOutputId": str(value.source_port),
                 "targetNodeInputId": str(value.target_port)})
    graphs = []
    for gi, name in enumerate(view.graph_names):
        nodes = [_node(n, incoming.get(n.key, []), ids, view) for n in view.nodes
                 if n.graph_index == gi]
        groups = {"": _graph_attrs(view, gi)}
        for ns in view.namespaces.values():
            groups[namespace_of(ns.path)] = {
                "module": ns.path, "class": ns.module_class or "-", "ir nodes": str(ns.nodes),
                **_figures(ns.metrics.flops, ns.metrics.latency_seconds, ns.metrics.bound)}
        graphs.append({"id": name, "nodes": nodes, "groupNodeAttributes": groups,
                       "groupNodeConfigs": None, "nodeLabelsToHide": None, "tasksData": None,
                       "layoutConfigs": None})
    return {"label": view.name, "graphs": graphs, "graphSorting": "node_count_desc"}


def node_data(view: View, key: str) -> dict[str, Any]:
    """A `node_data_builder.ModelNodeData` as its `to_json_string` writes it:
    graph id -> GraphNodeData. Nodes without known figures are left out."""
    out: dict[str, Any] = {}
    for gi, name in enumerate(view.graph_names):
        results: dict[str, dict[str, Any]] = {}
        for n in view.nodes:
            if n.graph_index != gi or n.kind != "op" or not n.metrics.known:
                continue
            m = n.metrics
            if key == "latency":
                results[node_id(n)] = {"value": m.latency_seconds * 1e6}
            elif key == "flops":
                results[node_id(n)] = {"value": m.flops}
            elif m.bound in BOUND_VALUES:
                results[node_id(n)] = {"value": BOUND_VALUES[m.bound],
                                       "bgColor": BOUND_COLOURS[m.bound]}
        title = {"latency": f"estimated latency (µs) on {view.target}",
                 "flops": "FLOPs",
                 "bound": f"roofline bound on {view.target} (1 compute, 0 memory)"}[key]
        out[name] = {"results": results, "name": title,
                     "thresholds": [], "gradient": [] if key == "bound" else GRADIENT,
                     "hideInAggregatedStatsTable": False, "hideInChildrenStatsTable": False,
                     "showExpandedSummaryOnGroupNode": False,
                     "showLabelCountColumnsInChildrenStatsTable": False}
    return out


def namespace_of(module_path: str) -> str:
    """`layer1.0.conv1` -> `layer1/0/conv1`: Model Explorer's layer path."""
    return module_path.replace(".", "/")


def _node(n: ViewNode, incoming: list[dict[str, str]], ids: dict[str, str],
          view: View) -> dict[str, Any]:
    attrs: list[dict[str, Any]] = []
    if n.kind == "op":
        label = n.op
        attrs += [{"key": k, "value": v} for k, v in n.attrs.items()]
        attrs += [{"key": "module_path", "value": n.module_path or "-"},
                  {"key": "module_class", "value": n.module_class or "-"}]
        m = n.metrics
        if m.known:
            attrs += [{"key": k, "value": v} for k, v in
                      _figures(m.flops, m.latency_seconds, m.bound).items()]
        for pid in n.partition_ids:
            part = view.partitions[pid]
            attrs.append({"key": "kernel", "value": f"{pid} ({part.kind}, {part.bound}, "
                                                    f"{human_seconds(part.latency_seconds)})"})
            attrs.append({"key": "kernel nodes", "value": {
                "type": "node_ids", "nodeIds": [ids[k] for k in part.members if k in ids]}})
    else:
        label = f"{n.kind} {n.label}"
        attrs.append({"key": "name", "value": n.label})
    outputs = [{"id": str(index), "attrs": [{"key": "tensor_shape", "value": text or "?"},
                                            {"key": "name", "value": name}]}
               for index, (name, text) in enumerate(n.outputs)]
    inputs = [{"id": str(port), "attrs": [
        {"key": "__tensor_tag", "value": name}, {"key": "tensor_shape", "value": text or "?"},
        *([{"key": "weight", "value": "yes"}] if name in view.weights else [])]}
        for port, (name, text) in enumerate(n.inputs) if name]
    return {"id": ids[n.key], "label": label,
            "namespace": namespace_of(n.module_path) if n.kind == "op" else "",
            "subgraphIds": [], "attrs": attrs,
            "incomingEdges": sorted(incoming, key=lambda e: int(e["targetNodeInputId"])),
            "outputsMetadata": outputs,
            "inputsMetadata": inputs,
            "style": None, "config": None}


def _figures(flops: int, latency: float, bound: str) -> dict[str, str]:
    return {"flops": f"{flops} ({human_flops(flops)})",
            "latency": human_seconds(latency), "bound": bound}


def _graph_attrs(view: View, gi: int) -> dict[str, str]:
    return {"model": view.name, "graph": view.graph_names[gi], "target": view.target,
            "dtype": view.dtype, "fusion": view.strategy,
            "estimated latency (model)": human_seconds(view.total_latency_seconds),
            "ir nodes": str(sum(1 for n in view.nodes if n.graph_index == gi
                                and n.kind == "op"))}


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"
