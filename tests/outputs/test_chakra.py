"""Chakra execution traces: decoded here with the vendored schema's bindings and a framing
reader of this file's own, then checked against the IR, the analysis and the wire facts
of the Chakra schema (field numbers, attribute kinds ASTRA-sim's feeder reads)."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ir_models import cnn
from typer.testing import CliRunner

from irbridge import serde
from irbridge.analysis import analyze, resolve_target
from irbridge.atomic import OUTPUT_MARKER
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.converters import chakra
from irbridge.converters.chakra._proto import et_def_pb2 as et
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import Graph, GraphLink, Model, SymDim, Tensor, TensorType

F32 = DType.FLOAT32


# -- an independent decoder ---------------------------------------------------------------------
@dataclass
class Trace:
    metadata: et.GlobalMetadata
    nodes: list[et.Node]
    meta_attrs: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def by_id(self) -> dict[int, et.Node]:
        return {n.id: n for n in self.nodes}

    def compute(self) -> list[et.Node]:
        return [n for n in self.nodes if n.type == et.COMP_NODE]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        assert shift < 35, "length prefix longer than a varint32"


def attrs(message: et.Node | et.GlobalMetadata) -> dict[str, tuple[str, Any]]:
    """name -> (oneof case, value)."""
    out: dict[str, tuple[str, Any]] = {}
    for a in message.attr:
        case = a.WhichOneof("value")
        assert case is not None, f"attribute {a.name} has no value"
        value = getattr(a, case)
        out[a.name] = (case, list(value.values) if case.endswith("_list") else value)
    return out


def read_trace(path: Path) -> Trace:
    data = path.read_bytes()
    pos = 0
    chunks = []
    while pos < len(data):
        size, pos = _varint(data, pos)
        chunks.append(data[pos:pos + size])
        pos += size
    assert pos == len(data), f"{path}: last message runs past the end of the file"
    assert chunks, f"{path}: empty trace"
    meta = et.GlobalMetadata.FromString(chunks[0])
    nodes = [et.Node.FromString(c) for c in chunks[1:]]
    return Trace(meta, nodes, attrs(meta))


def read_folder(folder: Path, prefix: str, ranks: int) -> list[Trace]:
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([OUTPUT_MARKER, "README.md", "astrasim",
                            *(f"{prefix}.{r}.et" for r in range(ranks))])
    return [read_trace(folder / f"{prefix}.{r}.et") for r in range(ranks)]


def check_trace(traces: list[Trace]) -> None:
    """The properties every trace must have, whatever the model."""
    for rank, trace in enumerate(traces):
        assert trace.metadata.version
        assert trace.meta_attrs["rank"] == ("int64_val", rank)
        assert trace.meta_attrs["world_size"] == ("int64_val", len(traces))
        ids = [n.id for n in trace.nodes]
        assert len(ids) == len(set(ids)), "node ids repeat"
        seen: set[int] = set()
        for node in trace.nodes:
            for dep in [*node.data_deps, *node.ctrl_deps]:
                assert dep in seen, f"rank {rank} node {node.id} depends on {dep}, which is " \
                                    "not an earlier node of the file"
            seen.add(node.id)
            a = attrs(node)
            assert a["is_cpu_op"] == ("bool_val", False)
            if node.type == et.COMP_NODE:
                assert a["num_ops"][0] == "int64_val" and a["num_ops"][1] > 0
                assert a["tensor_size"][0] == "uint64_val" and a["tensor_size"][1] > 0
                assert node.duration_micros >= 1
                assert a["latency_ns"][0] == "double_val"
            else:
                assert node.type in (et.COMM_SEND_NODE, et.COMM_RECV_NODE)
                for name in ("comm_src", "comm_dst", "comm_tag"):
                    assert a[name][0] == "int32_val"
                assert a["comm_size"][0] == "int64_val" and a["comm_size"][1] > 0
    # Every send has exactly one recv with the same tag, size and endpoints.
    sends = {}
    recvs = {}
    for rank, trace in enumerate(traces):
        for node in trace.nodes:
            a = attrs(node)
            if node.type == et.COMM_SEND_NODE:
                assert a["comm_src"][1] == rank
                key = a["comm_tag"][1]
                assert key not in sends
                sends[key] = (a["comm_src"][1], a["comm_dst"][1], a["comm_size"][1])
            elif node.type == et.COMM_RECV_NODE:
                assert a["comm_dst"][1] == rank
                key = a["comm_tag"][1]
                assert key not in recvs
                recvs[key] = (a["comm_src"][1], a["comm_dst"][1], a["comm_size"][1])
                readers = [n for n in trace.nodes if node.id in n.data_deps]
                assert readers and all(n.type == et.COMP_NODE for n in readers), \
                    "a recv must feed compute nodes"
    assert sends == recvs


def latencies(traces: list[Trace]) -> list[float]:
    return [sum(float(attrs(n)["latency_ns"][1]) for n in t.compute())
            for t in traces]


def total_ops(traces: list[Trace]) -> int:
    return sum(int(attrs(n)["num_ops"][1]) for t in traces for n in t.compute())


# -- small models built with the IR builder ----------------------------------------------------
def mlp(layers: int = 12, width: int = 256, name: str = "mlp") -> Model:
    """Residual blocks x + relu(linear(x)); the residual crosses every pipeline cut."""
    model = Model(name=name)
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (32, width)))
    for i in range(layers):
        w = b.parameter(Tensor(f"l{i}.w", F32, (width, width)))
        x = b.op("add", [x, b.op("relu", [b.op("linear", [x, w], name=f"l{i}")])],
                 name=f"res{i}")
    graph.set_outputs([x])
    return model


def h100_flops(model: Model) -> int:
    return analyze(model, [resolve_target("h100")]).runs[0].costs.total.flops


# -- wire facts ---------------------------------------------------------------------------------
def test_vendored_schema_has_the_chakra_wire_numbers() -> None:
    """Field numbers from the Chakra schema (docs: facts section 6), not from our code."""
    expected: dict[Any, dict[str, int]] = {
        et.Node: {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5,
                  "start_time_micros": 6, "duration_micros": 7, "inputs": 8, "outputs": 9,
                  "attr": 10},
        et.IOInfo: {"values": 1, "shapes": 2, "types": 3},
        et.GlobalMetadata: {"version": 1, "attr": 2},
        et.AttributeProto: {"name": 1, "doc_string": 2, "double_val": 3, "int64_val": 9,
                            "int64_list": 10, "uint32_val": 11, "uint64_val": 13,
                            "uint64_list": 14, "bool_val": 27, "bool_list": 28,
                            "string_val": 29, "string_list": 30, "bytes_val": 31},
    }
    for message, fields in expected.items():
        numbers = {f.name: f.number for f in message.DESCRIPTOR.fields}
        assert {k: numbers.get(k) for k in fields} == fields, message.DESCRIPTOR.name
    assert et.DESCRIPTOR.package == "ChakraProtoMsg"
    assert (et.MEM_LOAD_NODE, et.MEM_STORE_NODE, et.COMP_NODE, et.COMM_SEND_NODE,
            et.COMM_RECV_NODE, et.COMM_COLL_NODE) == (2, 3, 4, 5, 6, 7)
    assert (et.ALL_REDUCE, et.BARRIER) == (0, 9)


def test_framing_reads_past_a_two_byte_length_prefix(tmp_path: Path) -> None:
    """Messages over 127 bytes need a multi-byte varint prefix; the whole file decodes."""
    chakra.write(mlp(layers=2), tmp_path / "t", hardware="h100")
    data = (tmp_path / "t" / "mlp.0.et").read_bytes()
    assert data[0] & 0x80  # the metadata message is longer than 127 bytes
    trace = read_trace(tmp_path / "t" / "mlp.0.et")
    assert len(trace.compute()) == 2


# -- single-device traces ----------------------------------------------------------------------
def test_cnn_trace_one_node_per_arithmetic_kernel(tmp_path: Path) -> None:
    model = cnn()
    out = chakra.write(model, tmp_path / "traces", hardware="h100")
    [trace] = read_folder(out, "cnn", 1)
    check_trace([trace])
    assert trace.meta_attrs["hardware"] == ("string_val", "h100-sxm")
    # conv+relu is one kernel, the permute (0 FLOPs) folds into the linear's node.
    compute = trace.compute()
    assert [n.type for n in trace.nodes] == [et.COMP_NODE, et.COMP_NODE]
    conv, fc = compute
    assert list(fc.data_deps) == [conv.id]
    assert total_ops([trace]) == h100_flops(cnn())
    # conv: 2*8*16*16 outputs x 27 MACs, x2 FLOPs, + bias and relu (1 FLOP per element each)
    outputs = 2 * 8 * 16 * 16
    assert attrs(conv)["num_ops"] == ("int64_val", 2 * outputs * 27 + 2 * outputs)
    # linear: 2 x 2048 x 10 MACs
    assert attrs(fc)["num_ops"] == ("int64_val", 2 * 2 * 2048 * 10)
    ir_ids = {int(i) for i in attrs(fc)["ir_node_ids"][1]}
    ops = {n.id: n.op for _, n in model.all_nodes()}
    assert {ops[i] for i in ir_ids} == {"permute", "flatten", "linear"}
    assert fc.inputs.shapes.startswith("[[2,8,16,16]")


def test_duration_is_the_roofline_latency_rounded_never_zero(tmp_path: Path) -> None:
    [trace] = read_folder(chakra.write(cnn(), tmp_path / "t", hardware="h100"), "cnn", 1)
    for node in trace.compute():
        ns = float(attrs(node)["latency_ns"][1])
        assert node.duration_micros == max(1, round(ns / 1000))
    mapping = analyze(cnn(), [resolve_target("h100")]).runs[0].mappings[0]
    kernels = sum(float(attrs(n)["kernels_latency_ns"][1]) for n in trace.compute())
    assert kernels == pytest.approx(mapping.total_latency * 1e9, rel=1e-9)


def roofline_ns(node: et.Node, peak: float, bandwidth: float) -> float:
    """ASTRA-sim's roofline (Workload::issue_comp): num_ops / min(bw * intensity, peak)."""
    a = attrs(node)
    ops, size = int(a["num_ops"][1]), int(a["tensor_size"][1])
    return ops / min(bandwidth * ops / size, peak) * 1e9


@pytest.mark.parametrize(("hardware", "dtype", "peak_tflops", "bw_gbps"),
                         [("h100", None, 67.0, 3350.0), ("a100-80gb", "bf16", 312.0, 2039.0)])
def test_latency_ns_is_what_astrasim_roofline_computes(
        tmp_path: Path, hardware: str, dtype: str | None, peak_tflops: float,
        bw_gbps: float) -> None:
    """latency_ns = max(num_ops / peak, tensor_size / bandwidth) of the node's own totals,
    with the catalog's figures (written here from the vendor sheets), also for nodes that
    merge a zero-FLOP kernel into an arithmetic one (cnn's permute joins the linear)."""
    model = cnn()
    out = chakra.write(model, tmp_path / "t", hardware=hardware, dtype=dtype)
    [trace] = read_folder(out, "cnn", 1)
    target = resolve_target(hardware)
    eff_peak = peak_tflops * 1e12 * target.compute_efficiency
    eff_bw = bw_gbps * 1e9 * target.memory_efficiency
    for node in trace.compute():
        assert float(attrs(node)["latency_ns"][1]) == pytest.approx(
            roofline_ns(node, eff_peak, eff_bw), rel=1e-12)
        # the members' own latencies never undercut the merged node's roofline
        assert float(attrs(node)["kernels_latency_ns"][1]) >= \
            float(attrs(node)["latency_ns"][1]) * (1 - 1e-12)
    system = json.loads((out / "astrasim" / "system-roofline.json").read_text())
    assert system["peak-perf"] == pytest.approx(peak_tflops * target.compute_efficiency)
    assert system["local-mem-bw"] == pytest.approx(bw_gbps * target.memory_efficiency)
    assert system["roofline-enabled"] == 1
    replay = json.loads((out / "astrasim" / "system-replay.json").read_text())
    assert replay["roofline-enabled"] == 0
    assert trace.meta_attrs["stage_latency_ns"][1] == pytest.approx(sum(latencies([trace])))


def test_one_rank_export_pads_to_two_npus(tmp_path: Path) -> None:
    out = chakra.write(cnn(), tmp_path / "t", hardware="h100")
    run = json.loads((out / "astrasim" / "run.json").read_text())
    assert (run["ranks"], run["npus"], run["workload"]) == (1, 2, "astrasim/one-rank/cnn")
    assert "npus_count: [ 2 ]" in (out / "astrasim" / "network.yml").read_text()
    assert (out / "astrasim" / "one-rank" / "cnn.0.et").read_bytes() == \
        (out / "cnn.0.et").read_bytes()
    idle = read_trace(out / "astrasim" / "one-rank" / "cnn.1.et")
    assert idle.meta_attrs["rank"] == ("int64_val", 1)
    # one tiny node: ASTRA-sim aborts on a trace without nodes
    [node] = idle.nodes
    assert attrs(node)["num_ops"] == ("int64_val", 1) and node.duration_micros == 0
    readme = (out / "README.md").read_text()
    assert "--workload-configuration=astrasim/one-rank/cnn" in readme
    assert "irbridge simulate astrasim" in readme


def test_multi_rank_configs_name_every_rank(tmp_path: Path) -> None:
    out = chakra.write(mlp(layers=6), tmp_path / "t", hardware="h100", devices=3)
    run = json.loads((out / "astrasim" / "run.json").read_text())
    assert (run["ranks"], run["npus"], run["workload"]) == (3, 3, "mlp")
    assert "npus_count: [ 3 ]" in (out / "astrasim" / "network.yml").read_text()
    assert not (out / "astrasim" / "one-rank").exists()
    assert json.loads((out / "astrasim" / "remote-memory.json").read_text()) == {
        "memory-type": "NO_MEMORY_EXPANSION"}


def test_shape_only_irb_file_through_the_cli(tmp_path: Path) -> None:
    src = serde.save(mlp(layers=6), tmp_path / "mlp.irb", weights="none")
    result = CliRunner().invoke(app, ["export", str(src), "--to", "chakra", "-o",
                                      str(tmp_path / "out"), "--hardware", "a100-80gb",
                                      "--devices", "2"])
    assert result.exit_code == 0, result.output
    traces = read_folder(tmp_path / "out", "mlp", 2)
    check_trace(traces)
    assert traces[0].meta_attrs["hardware"] == ("string_val", "a100-80gb")


def test_graph_links_become_dependencies(tmp_path: Path) -> None:
    """Two graphs (a graph break): the second graph's kernel depends on the first's."""
    model = Model(name="two")
    for index in range(2):
        graph = Graph(f"g{index}")
        graph.reserve_ids(100 * index)  # node ids are unique across the model
        model.graphs.append(graph)
        b = GraphBuilder(graph, model)
        x = graph.add_input("x", TensorType(F32, (8, 64)))
        w = b.parameter(Tensor(f"w{index}", F32, (64, 64)))
        graph.set_outputs([b.op("linear", [x, w], name=f"y{index}")])
    model.links.append(GraphLink(0, "y0", 1, "x"))
    [trace] = read_folder(chakra.write(model, tmp_path / "t", hardware="h100"), "two", 1)
    check_trace([trace])
    first, second = trace.compute()
    assert list(second.data_deps) == [first.id]
    assert [attrs(n)["num_ops"][1] for n in (first, second)] == [2 * 8 * 64 * 64] * 2


# -- pipelines ----------------------------------------------------------------------------------
@pytest.mark.parametrize("devices", [2, 3, 4])
def test_mlp_pipeline_balanced_with_a_send_recv_per_cut_tensor(tmp_path: Path,
                                                              devices: int) -> None:
    model = mlp(layers=12)
    traces = read_folder(chakra.write(model, tmp_path / "p", hardware="h100", devices=devices),
                         "mlp", devices)
    check_trace(traces)
    lat = latencies(traces)
    assert max(lat) / min(lat) - 1 <= 0.2
    assert total_ops(traces) == h100_flops(mlp(layers=12))
    # Which IR node runs on which rank, from the trace; then the tensors crossing ranks,
    # from the IR's own dataflow.
    rank_of = {int(i): r for r, t in enumerate(traces) for n in t.compute()
               for i in attrs(n)["ir_node_ids"][1]}
    assert sorted(rank_of) == sorted(n.id for _, n in model.all_nodes())
    crossing = set()
    for _, node in model.all_nodes():
        for value in node.inputs:
            if value is not None and value.producer is not None \
                    and rank_of[value.producer.id] != rank_of[node.id]:
                assert value.type is not None
                crossing.add((value.name, rank_of[value.producer.id], rank_of[node.id],
                              value.type.nbytes()))
    found = set()
    for trace in traces:
        for node in trace.nodes:
            if node.type == et.COMM_SEND_NODE:
                a = attrs(node)
                name = node.inputs.values.strip('[]"')
                found.add((name, a["comm_src"][1], a["comm_dst"][1], a["comm_size"][1]))
    assert found == crossing
    assert len(crossing) == devices - 1  # only the residual stream crosses each cut


def test_split_balanced_is_optimal() -> None:
    """Against brute force over every set of cut points."""
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(1, 9)
        weights = [rng.choice([0.0, rng.random(), rng.random() * 10]) for _ in range(n)]
        parts = rng.randint(1, n)
        stages = chakra.split_balanced(weights, parts)
        assert [i for s in stages for i in s] == list(range(n))
        assert all(stages)
        got = max(sum(weights[i] for i in s) for s in stages)
        best = min(max(sum(weights[a:b]) for a, b in zip((0, *cuts), (*cuts, n), strict=True))
                   for cuts in itertools.combinations(range(1, n), parts - 1))
        assert got == pytest.approx(best)


# -- bad input: one line, nothing written ------------------------------------------------------
def _fails(tmp_path: Path, model: Model, out: Path, match: str, **options: Any) -> None:
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(IrbridgeError, match=match) as info:
        chakra.write(model, out, **options)
    assert "\n" not in str(info.value)
    assert sorted(tmp_path.rglob("*")) == before


def test_unknown_hardware(tmp_path: Path) -> None:
    _fails(tmp_path, cnn(), tmp_path / "t", "no-such-gpu", hardware="no-such-gpu")


def test_more_devices_than_kernels(tmp_path: Path) -> None:
    _fails(tmp_path, cnn(), tmp_path / "t", r"--devices 3: .*only 2 compute kernel",
           hardware="h100", devices=3)


def test_model_without_static_shapes(tmp_path: Path) -> None:
    model = Model(name="dyn")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (SymDim("batch"), 64)))
    graph.set_outputs([b.op("relu", [b.op("linear", [x, b.parameter(
        Tensor("w", F32, (64, 64), np.zeros((64, 64), np.float32)))])])])
    _fails(tmp_path, model, tmp_path / "t", "dyn: 2 node.*no static shapes", hardware="h100")


def test_unwritable_destination(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    _fails(tmp_path, cnn(), tmp_path / "file" / "t", "does not exist", hardware="h100")
    _fails(tmp_path, cnn(), tmp_path / "file", "not a folder", hardware="h100")


def test_read_only_filesystem(tmp_path: Path) -> None:
    """/proc refuses new folders even to root, where permission bits would not."""
    with pytest.raises(IrbridgeError, match="/proc/irbridge-trace") as info:
        chakra.write(cnn(), Path("/proc/irbridge-trace"), hardware="h100")
    assert "\n" not in str(info.value)
    assert not Path("/proc/irbridge-trace").exists()


def test_folder_with_other_files_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _fails(tmp_path, cnn(), out, "holds files irbridge did not write", hardware="h100")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    # An earlier export is replaced as a whole.
    chakra.write(mlp(layers=2), tmp_path / "again", hardware="h100", devices=2)
    chakra.write(cnn(), tmp_path / "again", hardware="h100")
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == [
        OUTPUT_MARKER, "README.md", "astrasim", "cnn.0.et"]


def test_cli_error_is_one_line_exit_2(tmp_path: Path) -> None:
    src = serde.save(cnn(), tmp_path / "cnn.irb", weights="none")
    result = CliRunner().invoke(app, ["export", str(src), "--to", "chakra", "-o",
                                      str(tmp_path / "out"), "--devices", "9"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--devices 9" in result.stderr
    assert not (tmp_path / "out").exists()


# -- real models (slow: captures take 10-20 s each on two shared cores) -----------------------
@pytest.mark.slow
def test_resnet18_trace_via_cli(tmp_path: Path) -> None:
    from irbridge.formats import load_model

    result = CliRunner().invoke(app, ["export", "resnet18", "--to", "chakra", "-o",
                                      str(tmp_path / "r18"), "--hardware", "h100"])
    assert result.exit_code == 0, result.output
    [trace] = read_folder(tmp_path / "r18", "resnet18", 1)
    check_trace([trace])
    assert trace.meta_attrs["model"] == ("string_val", "resnet18")
    # resnet18 at 224: 1,814,073,344 MACs (docs/analysis.md, checked against torch's
    # FlopCounterMode), plus the non-matmul FLOPs the analysis counts.
    model = load_model("resnet18")
    costs = analyze(model, [resolve_target("h100")]).runs[0].costs
    assert costs.total.macs == 1_814_073_344
    assert total_ops([trace]) == costs.total.flops
    assert len(trace.compute()) == 23  # fused kernels, every one does arithmetic


@pytest.mark.slow
def test_bert_two_stage_pipeline(tmp_path: Path) -> None:
    from irbridge.formats import load_model

    model = load_model("bert-base-uncased")
    costs = analyze(model, [resolve_target("h100")]).runs[0].costs
    assert costs.total.macs == 11_174_215_680  # docs/analysis.md, seq 128
    out = chakra.write(model, tmp_path / "bert", hardware="h100", devices=2)
    traces = read_folder(out, "bert-base-uncased", 2)
    check_trace(traces)
    lat = latencies(traces)
    assert max(lat) / min(lat) - 1 <= 0.2
    assert total_ops(traces) == costs.total.flops
    assert any(n.type == et.COMM_RECV_NODE for n in traces[1].nodes)
    assert not any(n.type == et.COMM_RECV_NODE for n in traces[0].nodes)


def test_no_compute_node_is_faster_than_a_nanosecond(tmp_path: Path) -> None:
    """ASTRA-sim's roofline truncates to whole ns and aborts on a 0-ns node: a 2x2 linear
    (a few dozen bytes) is charged at least the bytes the target moves in 1.5 ns."""
    model = mlp(layers=1, width=2, name="tiny")
    [trace] = read_folder(chakra.write(model, tmp_path / "t", hardware="h100"), "tiny", 1)
    bandwidth = 3350e9 * resolve_target("h100").memory_efficiency
    for node in trace.compute():
        assert attrs(node)["tensor_size"][1] == math.ceil(bandwidth * 1.5e-9)
        assert float(attrs(node)["latency_ns"][1]) >= 1.5
