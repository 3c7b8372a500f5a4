"""Lookups (embedding, gather, gather_elements) read the rows they gather, not the table.

Every expected figure is computed by hand from the shapes: picked elements x item size of
the table, plus the whole index tensor.
"""

from __future__ import annotations

import pytest
from graphs import F32, new_model, weight

from irbridge.analysis.binding import bound
from irbridge.analysis.cost import cost_model
from irbridge.analysis.partition import partition
from irbridge.dtypes import DType
from irbridge.ir import Model, SymDim, TensorType
from irbridge.ops import node_cost
from irbridge.ops.registry import input_reads

I64 = DType.INT64
I32 = DType.INT32
BF16 = DType.BFLOAT16


def _embedding_model(vocab: int, dim: int, batch: object, seq: int,
                     dtype: DType = F32, index_dtype: DType = I64) -> Model:
    model, graph, b = new_model("emb")
    ids = graph.add_input("ids", TensorType(index_dtype, (batch, seq)))  # type: ignore[arg-type]
    table = weight(b, "embed.weight", vocab, dim, dtype=dtype)
    y = b.op("embedding", [table, ids])
    graph.set_outputs([b.op("relu", [y])])
    return model


def test_bert_base_embedding_reads_the_rows_it_gathers() -> None:
    # bert-base word embeddings: 30522 x 768 float32 (93.8 MB); 128 int64 token ids.
    model = _embedding_model(30522, 768, 1, 128)
    emb = model.graphs[0].nodes[0]
    cost = node_cost(emb)
    rows = 128 * 768 * 4
    index = 128 * 8
    assert cost.bytes_read == rows + index == 394_240
    assert cost.param_bytes == rows  # the weight bytes this node reads
    assert cost.bytes_written == rows
    assert input_reads(emb) == [rows, index]
    # The whole table still counts as a weight the model holds.
    assert cost_model(model).weight_bytes == 30522 * 768 * 4


@pytest.mark.parametrize("strategy", ["unfused", "fused"])
def test_lookup_kernel_external_bytes(strategy: str) -> None:
    model = _embedding_model(32000, 4096, 2, 16, dtype=BF16, index_dtype=I32)
    parts = partition(model, cost_model(model), strategy)
    kernel = next(p for p in parts.kernels if p.nodes[0].op == "embedding")
    picked = 2 * 16 * 4096 * 2
    index = 2 * 16 * 4
    assert kernel.external_read == picked + index
    if strategy == "unfused":
        assert kernel.external_written == picked


def test_repeated_indices_are_capped_at_the_table() -> None:
    # 1000 lookups into a 10 x 4 table: 16,000 bytes picked, but the table is 160 bytes.
    model = _embedding_model(10, 4, 1, 1000)
    cost = node_cost(model.graphs[0].nodes[0])
    assert cost.bytes_read == 10 * 4 * 4 + 1000 * 8


def test_gather_reads_the_picked_slices() -> None:
    _model, graph, b = new_model("gather")
    x = graph.add_input("x", TensorType(F32, (3, 100, 5)))
    idx = graph.add_input("idx", TensorType(I64, (7,)))
    y = b.op("gather", [x, idx], {"axis": 1})
    graph.set_outputs([y])
    cost = node_cost(y.producer)  # type: ignore[arg-type]
    assert cost.bytes_read == 3 * 7 * 5 * 4 + 7 * 8
    assert cost.param_bytes == 0


def test_gather_elements_reads_one_element_per_index() -> None:
    _model, graph, b = new_model("gather_elements")
    x = graph.add_input("x", TensorType(F32, (64, 50)))
    idx = graph.add_input("idx", TensorType(I64, (64, 3)))
    y = b.op("gather_elements", [x, idx], {"axis": 1})
    graph.set_outputs([y])
    assert node_cost(y.producer).bytes_read == 64 * 3 * 4 + 64 * 3 * 8  # type: ignore[arg-type]


def test_other_ops_still_read_whole_inputs() -> None:
    _model, graph, b = new_model("linear")
    x = graph.add_input("x", TensorType(F32, (4, 32)))
    w = weight(b, "w", 16, 32)
    y = b.op("linear", [x, w])
    graph.set_outputs([y])
    cost = node_cost(y.producer)  # type: ignore[arg-type]
    assert cost.bytes_read == 4 * 32 * 4 + 16 * 32 * 4
    assert cost.param_bytes == 16 * 32 * 4


def test_lookup_bytes_follow_a_bound_batch() -> None:
    model = _embedding_model(50257, 768, SymDim("batch"), 64)
    with bound(model, batch=8):
        cost = node_cost(model.graphs[0].nodes[0])
    assert cost.bytes_read == 8 * 64 * 768 * 4 + 8 * 64 * 8
