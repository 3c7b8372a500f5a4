"""Model Explorer output, loaded through the ai-edge-model-explorer package's own API (its
config entry points and its graph_builder / node_data_builder dataclasses, which reject
unknown or missing fields) and compared with the IR and the analysis."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from typer.testing import CliRunner

from irbridge import serde
from irbridge.analysis import analyze, resolve_target
from irbridge.atomic import OUTPUT_MARKER
from irbridge.cli.main import app
from irbridge.converters.modelexplorer import write
from irbridge.errors import IrbridgeError
from irbridge.formats import load_model
from irbridge.ir import Graph, Model, Provenance
from irbridge.ops import registry

model_explorer = pytest.importorskip("model_explorer")
gb = pytest.importorskip("model_explorer.graph_builder")
ndb = pytest.importorskip("model_explorer.node_data_builder")

OVERLAYS = ("latency", "flops", "bound")


@pytest.fixture(scope="module")
def resnet() -> Model:
    return load_model("resnet18")


@pytest.fixture(scope="module")
def written(resnet: Model, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(resnet, tmp_path_factory.mktemp("me") / "resnet18.json", hardware="h100-sxm")


def _value(v: Any) -> Any:
    return gb.NodeIdsNodeAttributeValue(**v) if isinstance(v, dict) else v


def _kvs(items: list[dict[str, Any]]) -> list[Any]:
    return [gb.KeyValue(key=kv.pop("key"), value=_value(kv.pop("value")), **kv) for kv in items]


def load_graphs(path: Path) -> Any:
    """The package's GraphCollection for a graph JSON file (strict: every dataclass
    constructor raises on an unknown or missing field)."""
    raw = json.loads(path.read_text())
    graphs = []
    for g in raw.pop("graphs"):
        nodes = []
        for n in g.pop("nodes"):
            nodes.append(gb.GraphNode(
                attrs=_kvs(n.pop("attrs")),
                incomingEdges=[gb.IncomingEdge(**e) for e in n.pop("incomingEdges")],
                outputsMetadata=[gb.MetadataItem(id=m["id"], attrs=_kvs(m["attrs"]))
                                 for m in n.pop("outputsMetadata")],
                inputsMetadata=[gb.MetadataItem(id=m["id"], attrs=_kvs(m["attrs"]))
                                for m in n.pop("inputsMetadata")],
                **n))
        graphs.append(gb.Graph(nodes=nodes, **g))
    return gb.GraphCollection(graphs=graphs, **raw)


def load_node_data(path: Path) -> Any:
    """The package's ModelNodeData for a node-data file (graph id -> GraphNodeData)."""
    raw = json.loads(path.read_text())
    data = {}
    for graph_id, d in raw.items():
        results = {k: ndb.NodeDataResult(**v) for k, v in d.pop("results").items()}
        data[graph_id] = ndb.GraphNodeData(
            results=results, thresholds=[ndb.ThresholdItem(**t) for t in d.pop("thresholds")],
            gradient=[ndb.GradientItem(**t) for t in d.pop("gradient")], **d)
    return ndb.ModelNodeData(graphsData=data)


def test_package_loads_graph_and_overlays(written: Path) -> None:
    config = model_explorer.config().add_model_from_path(str(written))
    for name in OVERLAYS:
        config.add_node_data_from_path(str(written.with_name(f"resnet18.{name}.json")))
    encoded = json.loads(unquote(config.to_url_param_value()))
    assert encoded["models"] == [{"url": str(written.resolve())}]
    assert len(encoded["nodeData"]) == 3
    for url in [encoded["models"][0]["url"], *encoded["nodeData"]]:
        assert Path(url).is_file()
    collection = load_graphs(written)
    # The file is exactly what the package's adapters serialise for this collection.
    assert dataclasses.asdict(collection) == json.loads(written.read_text())
    assert collection.label == "resnet18" and [g.id for g in collection.graphs] == ["main"]
    for name in OVERLAYS:
        path = written.with_name(f"resnet18.{name}.json")
        data = load_node_data(path)
        assert json.loads(data.to_json_string()) == json.loads(path.read_text())
        assert list(data.graphsData) == ["main"] and data.graphsData["main"].results


def test_graph_matches_the_ir(resnet: Model, written: Path) -> None:
    graph = resnet.graphs[0]
    me = load_graphs(written).graphs[0]
    ops = {n.id: n for n in me.nodes if not n.id.startswith(("input:", "output:"))}
    assert len(ops) == len(graph.nodes) == 69
    assert len(me.nodes) == len(graph.nodes) + len(graph.inputs) + len(graph.outputs)
    for node in graph.nodes:
        got = ops[str(node.id)]
        assert got.label == node.op
        assert got.namespace == node.provenance.module_path.replace(".", "/")
    assert {n.namespace for n in ops.values()} >= {"layer1/0/conv1", "layer4/1/bn2", "fc"}
    expected = set()
    for node in graph.nodes:
        for port, value in enumerate(node.inputs):
            if value is None or value.tensor is not None:
                continue
            if value.producer is not None:
                source = str(value.producer.id)
                out = value.producer.outputs.index(value)
            else:
                source, out = f"input:{graph.inputs.index(value)}", 0
            expected.add((source, str(out), str(node.id), str(port)))
    edges = {(e.sourceNodeId, e.sourceNodeOutputId, n.id, e.targetNodeInputId)
             for n in me.nodes for e in n.incomingEdges if not n.id.startswith("output:")}
    assert edges == expected
    out_node = next(n for n in me.nodes if n.id == "output:0")
    assert [e.sourceNodeId for e in out_node.incomingEdges] == [str(graph.outputs[0].producer.id)]
    groups = me.groupNodeAttributes
    assert groups is not None and groups["layer1/0"]["module"] == "layer1.0"
    assert groups["layer1/0"]["ir nodes"] == str(sum(
        1 for n in graph.nodes if n.provenance.module_path.startswith("layer1.0.")
        or n.provenance.module_path == "layer1.0"))


def test_overlays_match_the_analysis(resnet: Model, written: Path) -> None:
    run = analyze(resnet, [resolve_target("h100-sxm")]).runs[0]
    mapping = run.mappings[0]
    flops = load_node_data(written.with_name("resnet18.flops.json")).graphsData["main"].results
    for node in resnet.graphs[0].nodes:
        assert flops[str(node.id)].value == registry.node_cost(node).flops
    latency = load_node_data(written.with_name("resnet18.latency.json")).graphsData["main"]
    total_us = sum(r.value for r in latency.results.values())
    assert math.isclose(total_us, mapping.total_latency * 1e6, rel_tol=1e-9)
    bound = load_node_data(written.with_name("resnet18.bound.json")).graphsData["main"].results
    by_part = {r.partition.id: r.bound for r in mapping.estimates}
    for node in resnet.graphs[0].nodes:
        expected = by_part[run.partitioning.of_node[node.id]]
        assert bound[str(node.id)].value == {"compute": 1, "memory": 0}[expected]
        assert bound[str(node.id)].bgColor == {"compute": "#fdb863",
                                               "memory": "#92c5de"}[expected]
    assert {r.value for r in bound.values()} == {0, 1}


def test_folder_output_and_cli(resnet: Model, tmp_path: Path) -> None:
    source = serde.save(resnet, tmp_path / "r.irb", weights="none")
    result = CliRunner().invoke(app, ["export", str(source), "--to", "model-explorer", "-o",
                                      str(tmp_path / "me"), "--hardware", "jetson-orin-nano"])
    assert result.exit_code == 0, result.stderr
    names = sorted(os.listdir(tmp_path / "me"))
    assert names == [OUTPUT_MARKER, "resnet18.bound.json", "resnet18.flops.json",
                     "resnet18.json", "resnet18.latency.json"]
    assert load_graphs(tmp_path / "me" / "resnet18.json").label == "resnet18"
    data = load_node_data(tmp_path / "me" / "resnet18.latency.json")
    assert "jetson-orin-nano" in data.graphsData["main"].name


def shapeless() -> Model:
    model = Model(name="noshapes")
    graph = Graph()
    model.graphs.append(graph)
    x = graph.add_input("x", None)
    y = graph.add_node("relu", [x], ["y"], provenance=Provenance(module_path="act"))
    graph.set_outputs(y.outputs)
    return model


def test_bad_input_writes_nothing(resnet: Model, tmp_path: Path) -> None:
    old = tmp_path / "r.json"
    old.write_text("earlier")
    with pytest.raises(IrbridgeError, match="unknown target 'nope'"):
        write(resnet, old, hardware="nope")
    (tmp_path / "r.bound.json").mkdir()  # the last overlay cannot be written
    with pytest.raises(IrbridgeError, match="is a folder"):
        write(resnet, old, hardware="h100-sxm")
    with pytest.raises(IrbridgeError, match="no node of noshapes has known shapes") as info:
        write(shapeless(), tmp_path / "n.json", hardware="h100-sxm")
    assert "\n" not in str(info.value)
    with pytest.raises(IrbridgeError, match="does not exist"):
        write(resnet, tmp_path / "missing" / "r.json", hardware="h100-sxm")
    assert old.read_text() == "earlier"
    assert sorted(os.listdir(tmp_path)) == ["r.bound.json", "r.json"]
