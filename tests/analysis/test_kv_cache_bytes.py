"""How a KV cache's bytes are counted by the fused partitioning.

- A broadcast read only by matmul-like kernels (grouped-query attention's repeated K/V
  heads) is read in place with stride 0: no copy kernel, and the attention kernel reads
  the shared heads once. Anything else that reads a broadcast still gets the copy.
- A scatter whose data input nothing else reads (the decode step's cache write) updates it
  in place: it moves the updates and indices, not the whole cache.

Expected bytes are computed by hand from the shapes (float32, 4 bytes per element)."""

from __future__ import annotations

from graphs import F32, new_model

from irbridge.analysis.cost import cost_model
from irbridge.analysis.partition import partition
from irbridge.dtypes import DType
from irbridge.ir import Model, TensorType

B, KV, REP, S, D = 1, 2, 4, 16, 8  # 2 K/V heads shared by 8 query heads


def _gqa(consumer: str) -> Model:
    model, graph, b = new_model("gqa")
    q = graph.add_input("q", TensorType(F32, (B, KV * REP, 1, D)))
    k = graph.add_input("k", TensorType(F32, (B, KV, S, D)))
    v = graph.add_input("v", TensorType(F32, (B, KV, S, D)))

    def repeat(x):  # transformers' repeat_kv: x[:, :, None].expand(...).reshape(...)
        x = b.op("unsqueeze", [x], {"axes": [2]})
        x = b.op("expand", [x], {"shape": [B, KV, REP, S, D]})
        return b.op("reshape", [x], {"shape": [B, KV * REP, S, D]})

    kr, vr = repeat(k), repeat(v)
    # an elementwise reader (add) needs the copy
    y = b.op("attention", [q, kr, vr]) if consumer == "attention" else b.op("add", [kr, vr])
    graph.set_outputs([y])
    return model


def test_attention_reads_shared_heads_in_place() -> None:
    model = _gqa("attention")
    parts = partition(model, cost_model(model), "fused")
    kernels = parts.kernels
    assert [p.kind for p in kernels] == ["attention"]
    (attn,) = kernels
    q_bytes = B * KV * REP * 1 * D * 4
    kv_bytes = 2 * B * KV * S * D * 4  # K and V once each, not REP times
    assert attn.external_read == q_bytes + kv_bytes
    assert attn.external_written == B * KV * REP * 1 * D * 4


def test_unfused_and_elementwise_readers_keep_the_copy() -> None:
    model = _gqa("attention")
    unfused = partition(model, cost_model(model), "unfused")
    assert sum(p.nodes[0].op == "expand" for p in unfused.kernels) == 2
    model = _gqa("add")
    fused = partition(model, cost_model(model), "fused")
    expands = [p for p in fused.kernels if any(n.op == "expand" for n in p.nodes)]
    assert len(expands) == 2
    for p in expands:  # reads K (or V) once, writes the REP-times copy
        assert p.external_read == B * KV * S * D * 4
        assert p.external_written == B * KV * REP * S * D * 4


L = 64  # cache positions


def _cache_write(extra_reader: bool) -> Model:
    model, graph, b = new_model("cache")
    cache = graph.add_input("k0", TensorType(F32, (B, KV, L, D)))
    new = graph.add_input("k_new", TensorType(F32, (B, KV, 1, D)))
    pos = graph.add_input("pos", TensorType(DType.INT64, (B, KV, 1, D)))
    q = graph.add_input("q", TensorType(F32, (B, KV, 1, D)))
    written = b.op("scatter_elements", [cache, pos, new], {"axis": 2})
    y = b.op("attention", [q, written, written])
    outputs = [y, written]
    if extra_reader:  # the old cache is still needed: the write must copy
        outputs.append(b.op("relu", [cache]))
    graph.set_outputs(outputs)
    return model


def test_decode_cache_write_is_in_place() -> None:
    model = _cache_write(extra_reader=False)
    parts = partition(model, cost_model(model), "fused")
    (write,) = [p for p in parts.kernels if p.nodes[0].op == "scatter_elements"]
    updates = B * KV * 1 * D * 4
    indices = B * KV * 1 * D * 8
    assert write.external_read == updates + indices
    assert write.external_written == updates
    unfused = partition(model, cost_model(model), "unfused")
    (copy,) = [p for p in unfused.kernels if p.nodes[0].op == "scatter_elements"]
    whole = B * KV * L * D * 4
    assert copy.external_read == whole + updates + indices
    assert copy.external_written == whole


def test_cache_write_copies_when_the_old_cache_is_read() -> None:
    model = _cache_write(extra_reader=True)
    parts = partition(model, cost_model(model), "fused")
    (write,) = [p for p in parts.kernels if p.nodes[0].op == "scatter_elements"]
    whole = B * KV * L * D * 4
    assert write.external_read == whole + B * KV * D * (4 + 8)
    assert write.external_written == whole
