"""Roofline estimates, concurrency, the driver and annotations written into the IR."""

from __future__ import annotations

from pathlib import Path

import pytest
from graphs import F32, llama_model, new_model, resnet_block_model, two_tower_model, weight

from irbridge import serde
from irbridge.analysis.concurrency import concurrency
from irbridge.analysis.cost import cost_model
from irbridge.analysis.driver import analyze, annotate
from irbridge.analysis.hardware import catalog, resolve_targets
from irbridge.analysis.partition import partition
from irbridge.analysis.roofline import estimate, map_partitions
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import TensorType


def test_one_bound_rule_and_latency_is_the_max() -> None:
    h100 = catalog()["h100-sxm"]
    model = llama_model(1, hidden=1024, heads=8, ffn=2048, seq=512, batch=4)
    parts = partition(model, cost_model(model), "fused")
    mapping = map_partitions(parts, h100, "bf16")
    ridge = h100.ridge("bf16")
    assert ridge == pytest.approx(989.5e12 / 3.35e12)
    kinds = set()
    for roof in mapping.estimates:
        p = roof.partition
        assert roof.compute_seconds == pytest.approx(p.cost.flops / 989.5e12)
        assert roof.memory_seconds == pytest.approx(p.external_bytes / 3.35e12)
        assert roof.latency_seconds == max(roof.compute_seconds, roof.memory_seconds)
        assert roof.bound == ("compute" if p.intensity >= ridge else "memory")
        assert (roof.bound == "compute") == (roof.compute_seconds >= roof.memory_seconds)
        assert 0 <= roof.attained <= 1
        kinds.add((p.kind, roof.bound))
    assert ("matmul", "compute") in kinds or ("matmul+epilogue", "compute") in kinds
    assert ("data_movement", "memory") in kinds
    assert mapping.total_latency == pytest.approx(sum(r.latency_seconds
                                                      for r in mapping.estimates))
    dist = mapping.bound_distribution()
    assert dist["compute"][0] + dist["memory"][0] == len(parts.kernels)
    top = mapping.top(3)
    assert len(top) == 3 and top[0].latency_seconds >= top[-1].latency_seconds


def test_efficiency_factors_scale_peak_and_bandwidth(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text("name: slow\nsource: test\npeaks: {fp32: 10}\nmemory_bandwidth: 100\n"
                    "efficiency: {compute: 0.5, memory: 0.25}\n")
    [target] = resolve_targets(str(path))
    model = resnet_block_model(1)
    parts = partition(model, cost_model(model), "fused")
    roof = estimate(parts.partitions[0], target, "fp32")
    assert roof.compute_seconds == pytest.approx(parts.partitions[0].cost.flops / 5e12)
    assert roof.memory_seconds == pytest.approx(parts.partitions[0].external_bytes / 25e9)


def test_two_towers_run_in_parallel() -> None:
    model = two_tower_model()
    for strategy in ("unfused", "fused"):
        parts = partition(model, cost_model(model), strategy)
        conc = concurrency(model, parts)
        assert conc.max_width >= 2
        assert len(conc.critical_path) < len(parts.kernels) <= len(model.graph.nodes)
        assert conc.max_speedup > 1.3
    unfused = concurrency(model, partition(model, cost_model(model), "unfused"))
    assert unfused.widths == [2, 2, 2, 2, 2, 2, 1]
    assert len(unfused.critical_path) == 7 < len(model.graph.nodes) == 13


def test_a_chain_has_no_concurrency_and_latency_weights_the_path() -> None:
    model = resnet_block_model(2)
    parts = partition(model, cost_model(model), "unfused")
    mapping = map_partitions(parts, catalog()["a100-80gb"], "fp32")
    conc = concurrency(model, parts, mapping.latencies())
    assert conc.widths == [1] * 14 and conc.max_speedup == pytest.approx(1.0)
    assert conc.critical_seconds == pytest.approx(mapping.total_latency)


def test_analyze_skips_targets_without_the_dtype() -> None:
    model = resnet_block_model(1)
    result = analyze(model, resolve_targets("h100,hailo-8"), dtype="bf16")
    assert [t.name for t in result.targets] == ["h100-sxm"]
    assert "target hailo-8 has no bf16 peak (it has int8); skipped" in result.warnings
    with pytest.raises(IrbridgeError, match="no target has a bf16 peak: hailo-8 has int8"):
        analyze(model, resolve_targets("hailo-8"), dtype="bf16")
    int8 = analyze(model, resolve_targets("hailo-8"), dtype="int8")
    fp32 = analyze(model, resolve_targets("h100"))
    assert 4 * int8.runs[0].costs.total.bytes_read == fp32.runs[0].costs.total.bytes_read


def test_batch_sweep_and_strategies() -> None:
    from irbridge.ir import SymDim

    model = resnet_block_model(1, batch=SymDim("batch"))
    result = analyze(model, resolve_targets("h100,l4"), batches=[1, 8],
                     strategies=("unfused", "fused"), module_depth=1)
    assert [(r.batch, r.strategy) for r in result.runs] == [
        (1, "unfused"), (1, "fused"), (8, "unfused"), (8, "fused")]
    assert result.runs[2].costs.total.macs == 8 * result.runs[0].costs.total.macs
    assert all(len(r.mappings) == 2 and r.modules is not None for r in result.runs)
    assert result.runs[1].mappings[0].total_latency < result.runs[0].mappings[0].total_latency


def test_annotations_round_trip_through_a_file(tmp_path: Path) -> None:
    model = resnet_block_model(2)
    result = analyze(model, resolve_targets("h100,a100"), dtype="bf16")
    annotate(model, result.runs[0])
    path = serde.save(model, tmp_path / "annotated.irb")
    loaded = serde.load(path)
    assert loaded.analysis is not None and loaded.analysis.strategy == "fused"
    assert [m.target for m in loaded.analysis.mappings] == ["h100-sxm", "a100-80gb"]
    mapping = loaded.analysis.mappings[0]
    assert mapping.dtype is DType.BFLOAT16
    assert len(mapping.estimates) == len(loaded.analysis.partitions) == 4
    assert mapping.total_latency_seconds == pytest.approx(
        result.runs[0].mappings[0].total_latency)
    for node in loaded.graph.nodes:
        assert node.annotations.cost is not None and node.annotations.partition_id is not None
    member_ids = sorted(i for p in loaded.analysis.partitions for i in p.node_ids)
    assert member_ids == sorted(n.id for n in loaded.graph.nodes)
    assert loaded.metadata["analysis.binding"] == "storage=bf16"
    assert loaded.metadata["analysis.dtype"] == "bf16"


def test_opaque_nodes_in_a_partition_and_a_warning() -> None:
    model, graph, b = new_model("opaque")
    x = graph.add_input("x", TensorType(F32, (4, 8)))
    h = b.op("linear", [x, weight(b, "w", 8, 8)])
    node = graph.add_node("my_op", [h], ["y"], output_types=[TensorType(F32, (4, 8))],
                          domain="custom")
    graph.set_outputs(node.outputs)
    result = analyze(model, resolve_targets("h100"))
    assert any("1 opaque node costed at their bytes only (0 FLOPs): custom::my_op" in w
               for w in result.warnings)
    kinds = [p.kind for p in result.runs[0].partitioning.partitions]
    assert kinds == ["matmul", "opaque"]
    opaque = result.runs[0].mappings[0].estimates[1]
    assert opaque.memory_seconds > 0 and opaque.bound == "memory"


def test_graph_links_are_dependencies_across_graphs() -> None:
    from irbridge.builder import GraphBuilder
    from irbridge.ir import Graph, GraphLink

    model, first, b = new_model("two-graphs")
    x = first.add_input("x", TensorType(F32, (4, 16)))
    first.set_outputs([b.op("relu", [b.op("linear", [x, weight(b, "w1", 16, 16)])], name="y")])
    second = Graph("after_break")
    second.reserve_ids(100)
    model.graphs.append(second)
    b2 = GraphBuilder(second, model)
    y = second.add_input("y_in", TensorType(F32, (4, 16)))
    z = second.add_input("z", TensorType(F32, (4, 16)))  # a model input, no link
    second.set_outputs([b2.op("add", [b2.op("linear", [y, weight(b2, "w2", 16, 16)]), z])])
    model.links.append(GraphLink(0, "y", 1, "y_in"))
    result = analyze(model, resolve_targets("h100"))
    run = result.runs[0]
    parts = run.partitioning.partitions
    assert [(p.graph_index, p.kind) for p in parts] == [(0, "matmul+epilogue"),
                                                       (1, "matmul+epilogue")]
    assert len({p.id for p in parts}) == 2
    conc = run.mappings[0].concurrency
    assert conc is not None and conc.widths == [1, 1] and conc.critical_path == [0, 1]
    assert run.costs.total.macs == 2 * 4 * 16 * 16
