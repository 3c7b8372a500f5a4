"""Graphviz pictures: DOT that `dot` accepts, SVG whose nodes are the IR's nodes (or the
collapsed modules), colours by roofline bound, PNG headers, and bad input."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from browser import require_tool
from typer.testing import CliRunner

from irbridge import serde
from irbridge.analysis import analyze, resolve_target
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.converters.graphviz import write
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.formats import load_model
from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType, Value

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
# The documented fill colours (docs/viewers.md).
COMPUTE, MEMORY = "#fdb863", "#92c5de"
F32 = DType.FLOAT32


@pytest.fixture(scope="module")
def resnet() -> Model:
    return load_model("resnet18")


def encoder_model(layers: int = 12, width: int = 64, seq: int = 16) -> Model:
    """A BERT-like encoder built op by op (no capture): 2 + 20 nodes per layer, module
    paths `encoder.layer.N.attention.self.query` etc., and one unattributed op."""
    model = Model(name="encoder", source_format="test")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)

    def linear(x: Value, path: str, cin: int, cout: int) -> Value:
        w = b.parameter(Tensor(f"{path}.weight", F32, (cout, cin)))
        bias = b.parameter(Tensor(f"{path}.bias", F32, (cout,)))
        return b.op("linear", [x, w, bias], provenance=Provenance(module_path=path))

    def norm(x: Value, path: str) -> Value:
        w = b.parameter(Tensor(f"{path}.weight", F32, (width,)))
        bias = b.parameter(Tensor(f"{path}.bias", F32, (width,)))
        return b.op("layer_norm", [x, w, bias], provenance=Provenance(module_path=path))

    x = graph.add_input("x", TensorType(F32, (1, seq, width)))
    x = b.op("relu", [x])  # no module path: stays an op when collapsed
    x = norm(x, "embeddings.LayerNorm")
    for i in range(layers):
        at = f"encoder.layer.{i}"
        q, k, v = (linear(x, f"{at}.attention.self.{n}", width, width)
                   for n in ("query", "key", "value"))
        here = Provenance(module_path=f"{at}.attention.self")
        kt = b.op("permute", [k], {"perm": (0, 2, 1)}, provenance=here)
        s = b.op("softmax", [b.op("matmul", [q, kt], provenance=here)], {"axis": -1},
                 provenance=here)
        h = b.op("matmul", [s, v], provenance=here)
        h = linear(h, f"{at}.attention.output.dense", width, width)
        x = norm(b.op("add", [h, x], provenance=Provenance(module_path=f"{at}.attention.output")),
                 f"{at}.attention.output.LayerNorm")
        f = b.op("gelu", [linear(x, f"{at}.intermediate.dense", width, 4 * width)],
                 provenance=Provenance(module_path=f"{at}.intermediate"))
        f = linear(f, f"{at}.output.dense", 4 * width, width)
        for _ in range(5):  # a chain of elementwise ops, as a captured model has
            f = b.op("relu", [f], provenance=Provenance(module_path=f"{at}.output.act"))
        x = norm(b.op("add", [f, x], provenance=Provenance(module_path=f"{at}.output")),
                 f"{at}.output.LayerNorm")
    pooled = b.op("tanh", [linear(x, "pooler.dense", width, width)],
                  provenance=Provenance(module_path="pooler"))
    graph.set_outputs([x, pooled])
    return model


@pytest.fixture(scope="module")
def encoder() -> Model:
    return encoder_model(layers=24)


def svg_nodes(path: Path) -> dict[str, ET.Element]:
    """SVG id -> <g class="node ..."> element."""
    root = ET.parse(path).getroot()
    return {g.get("id", ""): g for g in root.iter(f"{SVG}g")
            if (g.get("class") or "").split()[:1] == ["node"]}


def classes(g: ET.Element) -> list[str]:
    return (g.get("class") or "").split()


def fill(g: ET.Element) -> str:
    shapes = [e for e in g.iter() if e.tag in (f"{SVG}path", f"{SVG}polygon")
              and e.get("fill") not in (None, "none")]
    return shapes[0].get("fill", "")


def tooltip(g: ET.Element) -> str:
    return next((a.get(f"{XLINK}title", "") for a in g.iter(f"{SVG}a")), "")


def test_dot_parses_and_svg_has_one_node_per_ir_node(resnet: Model, tmp_path: Path) -> None:
    dot = require_tool("dot", "graphviz")
    text = write(resnet, tmp_path / "r.dot", hardware="h100-sxm", fmt="dot")
    done = subprocess.run([dot, "-Tsvg", str(text), "-o", str(tmp_path / "by-hand.svg")],
                          capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    out = write(resnet, tmp_path / "r.svg", hardware="h100-sxm", fmt="svg")
    nodes = svg_nodes(out)
    graph = resnet.graphs[0]
    ops = {k for k, g in nodes.items() if "op" in classes(g)}
    assert len(ops) == len(graph.nodes) == 69
    assert ops == {f"g0n{n.id}" for n in graph.nodes}
    assert sum("input" in classes(g) for g in nodes.values()) == len(graph.inputs)
    assert sum("output" in classes(g) for g in nodes.values()) == len(graph.outputs)
    # One edge per (producer, consumer) pair of the IR, graph inputs and outputs included.
    pairs = {(f"g0n{v.producer.id}", f"g0n{n.id}") for n in graph.nodes for v in n.inputs
             if v is not None and v.producer is not None}
    root = ET.parse(out).getroot()
    titles = [g.findtext(f"{SVG}title") for g in root.iter(f"{SVG}g")
              if g.get("class") == "edge"]
    drawn = {tuple(t.split("->")) for t in titles if t}
    assert pairs <= drawn
    assert len(drawn) == len(pairs) + len(graph.inputs) + len(graph.outputs)


def test_colours_and_clusters_follow_the_analysis(resnet: Model, tmp_path: Path) -> None:
    require_tool("dot", "graphviz")
    out = write(resnet, tmp_path / "r.svg", hardware="jetson-orin-nano", fmt="svg")
    nodes = svg_nodes(out)
    run = analyze(resnet, [resolve_target("jetson-orin-nano")]).runs[0]
    bound = {r.partition.id: r.bound for r in run.mappings[0].estimates}
    graph = resnet.graphs[0]
    conv = next(n for n in graph.nodes if n.op == "conv")
    pool = next(n for n in graph.nodes if n.op == "max_pool")
    fc = next(n for n in graph.nodes if n.op == "linear")
    seen = set()
    for node in (conv, pool, fc):
        expected = bound[run.partitioning.of_node[node.id]]
        seen.add(expected)
        assert fill(nodes[f"g0n{node.id}"]) == {"compute": COMPUTE, "memory": MEMORY}[expected]
        assert expected in classes(nodes[f"g0n{node.id}"])
    assert seen == {"compute", "memory"}  # both colours are exercised
    root = ET.parse(out).getroot()
    clusters = [g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"]
    fused = [p for p in run.partitioning.partitions if len(p.nodes) > 1]
    assert len(clusters) == len(fused) > 0
    # Members of a fused kernel are drawn inside its cluster's box.
    first = fused[0]
    box = next(g for g in clusters if g.findtext(f"{SVG}title") == f"cluster_k{first.id}")
    outline = next(box.iter(f"{SVG}path")).get("d", "")  # rounded: a path, not a polygon
    xs = [float(x) for x in re.findall(r"(-?[\d.]+),-?[\d.]+", outline)]
    for node in first.nodes:
        text = nodes[f"g0n{node.id}"].find(f".//{SVG}text")
        assert text is not None and min(xs) <= float(text.get("x", "nan")) <= max(xs)


def test_png_is_a_png(resnet: Model, tmp_path: Path) -> None:
    require_tool("dot", "graphviz")
    out = write(resnet, tmp_path / "r.png", hardware="h100-sxm", fmt="png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    assert (length, kind) == (13, b"IHDR")
    assert 200 < width < 5000 and 1000 < height < 20000  # a tall single-column graph


def check_collapsed(model: Model, tmp_path: Path) -> None:
    """Auto-collapsed: at most 100 boxes, every top module and unattributed op shown; at
    depth 1 exactly one box per top module, edges deduplicated."""
    require_tool("dot", "graphviz")
    graph = model.graphs[0]
    assert len(graph.nodes) > 300
    bert = model
    out = write(bert, tmp_path / "b.svg", hardware="h100-sxm", fmt="svg")
    nodes = svg_nodes(out)
    drawn = [g for g in nodes.values() if not {"input", "output"} & set(classes(g))]
    assert len(drawn) <= 100 < len(graph.nodes)
    tops = {n.provenance.module_path.split(".")[0] for n in graph.nodes
            if n.provenance.module_path}
    assert tops == {"embeddings", "encoder", "pooler"}  # both models name them so
    places = [g.findtext(f"{SVG}title", "").split(":", 1)[-1] for g in drawn
              if "module" in classes(g)] + [tooltip(g) for g in drawn if "op" in classes(g)]
    for top in tops:
        assert any(p == top or p.startswith(f"{top}.") for p in places), top
    unattributed = sum(1 for n in graph.nodes if not n.provenance.module_path)
    assert sum("op" in classes(g) for g in drawn) >= unattributed
    # Depth 1 through the API: exactly one box per top module, edges deduplicated.
    out1 = write(bert, tmp_path / "b1.svg", hardware="h100-sxm", fmt="svg", depth=1)
    nodes1 = svg_nodes(out1)
    boxes = {g.findtext(f"{SVG}title") for g in nodes1.values() if "module" in classes(g)}
    assert boxes == {f"g0m:{t}" for t in tops}
    root = ET.parse(out1).getroot()
    edges = [g.findtext(f"{SVG}title") for g in root.iter(f"{SVG}g") if g.get("class") == "edge"]
    assert len(edges) == len(set(edges))
    encoder = next(g for g in nodes1.values() if g.findtext(f"{SVG}title") == "g0m:encoder")
    count = sum(1 for n in graph.nodes if n.provenance.module_path.startswith("encoder."))
    assert f"{count} ops" in " ".join(t.text or "" for t in encoder.iter(f"{SVG}text"))


def test_large_graph_collapses_by_module(encoder: Model, tmp_path: Path) -> None:
    assert len(encoder.graphs[0].nodes) == 2 + 24 * 20 + 2
    check_collapsed(encoder, tmp_path)


@pytest.mark.slow
def test_bert_collapses_by_module(tmp_path: Path) -> None:
    check_collapsed(load_model("bert-base-uncased"), tmp_path)


def shapeless() -> Model:
    model = Model(name="noshapes")
    graph = Graph()
    model.graphs.append(graph)
    x = graph.add_input("x", None)
    y = graph.add_node("relu", [x], ["y"], provenance=Provenance(module_path="block.act"))
    z = graph.add_node("add", [y.outputs[0], x], ["z"], provenance=Provenance(module_path="block"))
    graph.set_outputs(z.outputs)
    return model


def test_model_without_shapes_draws_uncoloured(tmp_path: Path) -> None:
    require_tool("dot", "graphviz")
    out = write(shapeless(), tmp_path / "n.svg", hardware="h100-sxm", fmt="svg")
    nodes = svg_nodes(out)
    ops = [g for g in nodes.values() if "op" in classes(g)]
    assert len(ops) == 2
    assert all("unknown" in classes(g) and fill(g) == "#ffffff" for g in ops)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = shapeless()
    # Each check below runs before Graphviz is looked for: none of them needs `dot`.
    with pytest.raises(IrbridgeError, match="unknown target 'nope'"):
        write(model, tmp_path / "a.dot", hardware="nope", fmt="dot")
    with pytest.raises(IrbridgeError, match="does not exist"):
        write(model, tmp_path / "missing" / "a.dot", hardware="h100-sxm", fmt="dot")
    with pytest.raises(IrbridgeError, match="does not match format png"):
        write(model, tmp_path / "a.svg", hardware="h100-sxm", fmt="png")
    with pytest.raises(IrbridgeError, match="depth must be"):
        write(model, tmp_path / "a.dot", hardware="h100-sxm", fmt="dot", depth=0)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(IrbridgeError, match="needs Graphviz `dot`") as info:
        write(model, tmp_path / "a.svg", hardware="h100-sxm", fmt="svg")
    assert "\n" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["empty-bin"]


def test_cli_export_svg_from_zoo_name(tmp_cwd: Path) -> None:
    require_tool("dot", "graphviz")
    result = CliRunner().invoke(app, ["export", "resnet18", "--to", "svg", "-o", "r.svg"])
    assert result.exit_code == 0, result.stderr
    assert len(svg_nodes(tmp_cwd / "r.svg")) == 69 + 2


def test_cli_bad_hardware_and_png(resnet: Model, tmp_path: Path) -> None:
    require_tool("dot", "graphviz")
    source = serde.save(resnet, tmp_path / "r.irb", weights="none")
    runner = CliRunner()
    bad = runner.invoke(app, ["export", str(source), "--to", "png", "-o",
                              str(tmp_path / "r.png"), "--hardware", "h1000"])
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and "unknown target 'h1000'" in bad.stderr
    assert not (tmp_path / "r.png").exists()
    ok = runner.invoke(app, ["export", str(source), "--to", "png", "-o",
                             str(tmp_path / "r.png"), "--hardware", "a100-80gb"])
    assert ok.exit_code == 0, ok.stderr
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_dtype_types_are_shown(resnet: Model, tmp_path: Path) -> None:
    text = write(resnet, tmp_path / "r.gv", hardware="h100-sxm", fmt="dot").read_text()
    conv = next(n for n in resnet.graphs[0].nodes if n.op == "conv")
    out_type = conv.outputs[0].type
    assert isinstance(out_type, TensorType) and out_type.dtype == DType.FLOAT32
    shape = ",".join(str(d) for d in out_type.static_shape())
    assert f'"g0n{conv.id}" [label="conv\\nf32[{shape}]\\n' in text
