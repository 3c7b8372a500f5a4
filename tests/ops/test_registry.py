"""Every registered op: documented, has an example, infers types, costs, and its reference
implementation produces exactly the inferred types. (Numerical correctness against
independent oracles is in test_nn_ops.py, test_tensor_ops.py and test_elementwise_ops.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from irbridge.executor import run_graph
from irbridge.ops import all_ops, node_cost
from irbridge.ops.datadep import fits
from irbridge.ops.examples import build_example, examples

EXAMPLES = examples()
SCHEMAS = {s.name: s for s in all_ops()}


def test_every_op_has_exactly_one_example() -> None:
    assert sorted(set(SCHEMAS) - set(EXAMPLES)) == []
    assert sorted(set(EXAMPLES) - set(SCHEMAS)) == []


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_infers_costs_and_runs(name: str) -> None:
    schema = SCHEMAS[name]
    assert schema.doc and schema.cost_doc, f"{name}: doc and cost_doc are required"
    built = build_example(name)
    graph, outputs, feeds = built.graph, built.outputs, built.feeds
    assert all(v.type is not None for v in outputs)
    cost = node_cost(graph.nodes[-1])
    assert cost.matmul_flops == 2 * cost.macs
    assert (cost.macs > 0) == schema.category.matmul_like, f"{name}: MACs {cost.macs}"
    assert cost.bytes_written == sum(v.type.nbytes() or 0 for v in outputs if v.type)
    with np.errstate(all="ignore"):
        results = run_graph(graph, feeds)
    for value, array in zip(outputs, results, strict=True):
        assert value.type is not None
        assert array.dtype == value.type.dtype.numpy, f"{name} {value.name}: {array.dtype}"
        assert value.type.shape is not None and array.ndim == len(value.type.shape)
        for dim, size in zip(value.type.shape, array.shape, strict=True):
            # a data-dependent dim (SymDim) holds the run's size within its bounds
            assert fits(dim, size), f"{name}: inferred {value.type}, ran {array.shape}"
