"""Benchmark of the analysis backend: time grows linearly with graph size.

    uv run python tools/bench_analysis.py [--repeat 3]

1. A ResNet basic block (conv-bn-relu, conv-bn, residual add, relu) repeated 1x, 10x and
   100x, analysed (cost, fused and unfused partitions, roofline and concurrency) on one
   target; prints seconds and microseconds per node, which stays flat when growth is linear.
2. A 32-layer Llama-style decoder (hidden 4096, 32 heads, SwiGLU 11008, seq 2048, bf16),
   built shape-only with GraphBuilder from linear / rms_norm / attention / silu / mul ops,
   analysed for five targets.
Timings are printed, never asserted (the unit tests stay free of timing checks).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from irbridge.analysis.driver import Result, analyze
from irbridge.analysis.hardware import resolve_targets
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType, Value

F32, BF16 = DType.FLOAT32, DType.BFLOAT16


def _weight(b: GraphBuilder, name: str, *shape: int, dtype: DType = F32) -> Value:
    return b.parameter(Tensor(name, dtype, shape))


def _conv_bn(b: GraphBuilder, x: Value, name: str, channels: int) -> Value:
    w = _weight(b, f"{name}.weight", channels, channels, 3, 3)
    y = b.op("conv", [x, w], {"pads": (1, 1, 1, 1)}, provenance=Provenance(module_path=name))
    stats = [_weight(b, f"{name}.bn.{p}", channels) for p in ("weight", "bias", "mean", "var")]
    return b.op("batch_norm", [y, *stats], provenance=Provenance(module_path=f"{name}.bn"))


def resnet_blocks(repeats: int, channels: int = 64, size: int = 56) -> Model:
    model = Model(name=f"resnet-blocks-{repeats}")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (1, channels, size, size)))
    for i in range(repeats):
        p = f"layers.{i}"
        h = b.op("relu", [_conv_bn(b, x, f"{p}.conv1", channels)],
                 provenance=Provenance(module_path=f"{p}.relu"))
        h = b.op("add", [_conv_bn(b, h, f"{p}.conv2", channels), x],
                 provenance=Provenance(module_path=p))
        x = b.op("relu", [h], provenance=Provenance(module_path=f"{p}.relu"))
    graph.set_outputs([x])
    return model


def llama(layers: int = 32, hidden: int = 4096, heads: int = 32, ffn: int = 11008,
          seq: int = 2048, batch: int = 1) -> Model:
    model = Model(name=f"llama-{layers}x{hidden}")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("hidden", TensorType(BF16, (batch, seq, hidden)))
    head = hidden // heads

    def at(path: str) -> Provenance:
        return Provenance(module_path=path)

    def linear(h: Value, name: str, n: int, k: int, path: str) -> Value:
        return b.op("linear", [h, _weight(b, name, n, k, dtype=BF16)], provenance=at(path))

    for i in range(layers):
        p = f"layers.{i}"
        h = b.op("rms_norm", [x, _weight(b, f"{p}.in_norm", hidden, dtype=BF16)],
                 provenance=at(f"{p}.input_layernorm"))
        qkv = []
        for proj in "qkv":
            t = linear(h, f"{p}.{proj}", hidden, hidden, f"{p}.self_attn.{proj}_proj")
            t = b.op("reshape", [t], {"shape": (0, 0, heads, head)}, provenance=at(p))
            qkv.append(b.op("permute", [t], {"perm": (0, 2, 1, 3)}, provenance=at(p)))
        a = b.op("attention", qkv, {"causal": True}, provenance=at(f"{p}.self_attn"))
        a = b.op("reshape", [b.op("permute", [a], {"perm": (0, 2, 1, 3)})],
                 {"shape": (0, 0, hidden)}, provenance=at(p))
        x = b.op("add", [x, linear(a, f"{p}.o", hidden, hidden, f"{p}.self_attn.o_proj")],
                 provenance=at(p))
        h = b.op("rms_norm", [x, _weight(b, f"{p}.post_norm", hidden, dtype=BF16)],
                 provenance=at(f"{p}.post_attention_layernorm"))
        gate = linear(h, f"{p}.gate", ffn, hidden, f"{p}.mlp.gate_proj")
        up = linear(h, f"{p}.up", ffn, hidden, f"{p}.mlp.up_proj")
        m = b.op("mul", [b.op("silu", [gate], provenance=at(f"{p}.mlp.act_fn")), up],
                 provenance=at(f"{p}.mlp"))
        x = b.op("add", [x, linear(m, f"{p}.down", hidden, ffn, f"{p}.mlp.down_proj")],
                 provenance=at(p))
    graph.set_outputs([x])
    return model


def best_of(repeat: int, fn: Callable[[], Result]) -> tuple[float, Result]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs")
    args = parser.parse_args()

    print("repeated ResNet basic block, fused + unfused, 1 target (h100-sxm), best of "
          f"{args.repeat}")
    print(f"{'blocks':>7} {'nodes':>7} {'build s':>9} {'analyse s':>10} {'us/node':>9}")
    h100 = resolve_targets("h100-sxm")
    for repeats in (1, 10, 100):
        start = time.perf_counter()
        model = resnet_blocks(repeats)
        built = time.perf_counter() - start
        nodes = len(model.graph.nodes)
        seconds, _ = best_of(args.repeat, lambda m=model: analyze(  # type: ignore[misc]
            m, h100, strategies=("unfused", "fused")))
        print(f"{repeats:>7} {nodes:>7} {built:>9.3f} {seconds:>10.4f} "
              f"{seconds / nodes * 1e6:>9.1f}")

    five = resolve_targets("h100-sxm,a100-80gb,l4,tpu-v5e,xeon-8480plus")
    start = time.perf_counter()
    model = llama()
    built = time.perf_counter() - start
    seconds, result = best_of(args.repeat, lambda: analyze(model, five, dtype="bf16",
                                                           strategies=("fused",)))
    run = result.runs[0]
    print(f"\n{model.name}: {len(model.graph.nodes)} nodes, {len(run.partitioning.kernels)} "
          f"fused kernels, {run.costs.total.matmul_flops / 1e12:.2f} TFLOPs matmul-like "
          f"(seq 2048, batch 1); built in {built:.3f} s")
    print(f"analysed for {len(five)} targets (bf16, fused) in {seconds:.3f} s (best of "
          f"{args.repeat})")
    for mapping in run.mappings:
        dist = mapping.bound_distribution()
        print(f"  {mapping.target.name:<15} {mapping.total_latency * 1e3:9.2f} ms  "
              f"{dist['compute'][0]:>4} compute-bound, {dist['memory'][0]:>4} memory-bound "
              f"kernels, {mapping.attained:.1%} of peak")


if __name__ == "__main__":
    main()
