"""Structural comparison of in-memory IR models, written independently of irbridge.serde
so that round-trip tests do not compare the serialiser with itself."""

from __future__ import annotations

import dataclasses

from irbridge.ir import Graph, Model, Node, Tensor, Value


def model_diff(a: Model, b: Model) -> list[str]:
    """Human-readable differences; empty when the models are equal."""
    diffs: list[str] = []
    for name in ("name", "source_format", "producer_name", "producer_version", "opset_version",
                 "ir_version", "metadata", "links", "analysis"):
        if getattr(a, name) != getattr(b, name):
            diffs.append(f"model.{name}: {getattr(a, name)!r} != {getattr(b, name)!r}")
    if list(a.tensors) != list(b.tensors):
        diffs.append(f"tensor names {list(a.tensors)} != {list(b.tensors)}")
    for name in a.tensors.keys() & b.tensors.keys():
        diffs += _tensor_diff(a.tensors[name], b.tensors[name], f"tensor {name!r}")
    if len(a.graphs) != len(b.graphs):
        diffs.append(f"{len(a.graphs)} graphs != {len(b.graphs)}")
    for i, (ga, gb) in enumerate(zip(a.graphs, b.graphs, strict=False)):
        diffs += _graph_diff(ga, gb, f"graph {i}")
    return diffs


def _tensor_diff(a: Tensor, b: Tensor, where: str) -> list[str]:
    diffs = []
    if (a.name, a.dtype, a.shape) != (b.name, b.dtype, b.shape):
        diffs.append(f"{where}: {a!r} != {b!r}")
    if (a.data is None) != (b.data is None):
        diffs.append(f"{where}: data presence differs")
    elif a.data is not None and b.data is not None and a.data.tobytes() != b.data.tobytes():
        diffs.append(f"{where}: data differs")
    return diffs


def _value_key(v: Value | None) -> tuple[object, ...] | None:
    return None if v is None else (v.name, v.type, v.tensor.name if v.tensor else None)


def _graph_diff(a: Graph, b: Graph, where: str) -> list[str]:
    diffs = []
    for name in ("name", "break_reason"):
        if getattr(a, name) != getattr(b, name):
            diffs.append(f"{where}.{name}: {getattr(a, name)!r} != {getattr(b, name)!r}")
    for part in ("inputs", "outputs", "parameters"):
        ka = [_value_key(v) for v in getattr(a, part)]
        kb = [_value_key(v) for v in getattr(b, part)]
        if ka != kb:
            diffs.append(f"{where}.{part}: {ka} != {kb}")
    if len(a.nodes) != len(b.nodes):
        diffs.append(f"{where}: {len(a.nodes)} nodes != {len(b.nodes)}")
    for na, nb in zip(a.nodes, b.nodes, strict=False):
        diffs += _node_diff(na, nb, f"{where} node #{na.id}")
    return diffs


def _node_diff(a: Node, b: Node, where: str) -> list[str]:
    diffs = []
    for name in ("id", "op", "domain", "name"):
        if getattr(a, name) != getattr(b, name):
            diffs.append(f"{where}.{name}: {getattr(a, name)!r} != {getattr(b, name)!r}")
    if [_value_key(v) for v in a.inputs] != [_value_key(v) for v in b.inputs]:
        diffs.append(f"{where}: inputs differ")
    if [_value_key(v) for v in a.outputs] != [_value_key(v) for v in b.outputs]:
        diffs.append(f"{where}: outputs differ")
    if dataclasses.asdict(a.provenance) != dataclasses.asdict(b.provenance):
        diffs.append(f"{where}: provenance {a.provenance} != {b.provenance}")
    if (a.annotations.cost, a.annotations.partition_id) != (b.annotations.cost,
                                                            b.annotations.partition_id):
        diffs.append(f"{where}: annotations differ")
    diffs += _attrs_diff(a.annotations.values, b.annotations.values, f"{where} annotation")
    diffs += _attrs_diff(a.attrs, b.attrs, f"{where} attribute")
    return diffs


def _attrs_diff(a: dict, b: dict, where: str) -> list[str]:
    if list(a) != list(b):
        return [f"{where} names {list(a)} != {list(b)}"]
    diffs = []
    for key in a:
        va, vb = a[key], b[key]
        if isinstance(va, Graph) and isinstance(vb, Graph):
            diffs += _graph_diff(va, vb, f"{where} {key!r}")
        elif isinstance(va, tuple) and va and isinstance(va[0], Graph):
            if not isinstance(vb, tuple) or len(va) != len(vb):
                diffs.append(f"{where} {key!r}: graph lists differ")
            else:
                for i, (ga, gb) in enumerate(zip(va, vb, strict=True)):
                    diffs += _graph_diff(ga, gb, f"{where} {key!r}[{i}]")
        elif isinstance(va, Tensor) and isinstance(vb, Tensor):
            diffs += _tensor_diff(va, vb, f"{where} {key!r}")
        elif type(va) is not type(vb) or va != vb:
            diffs.append(f"{where} {key!r}: {va!r} != {vb!r}")
    return diffs
