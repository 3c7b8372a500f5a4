"""Helpers of the StableHLO tests: one-node models, comparisons, op census of modules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch_mlir import ir

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Tensor, TensorType
from irbridge.ops import registry
from irbridge.ops.examples import build_example

F32 = DType.FLOAT32


def example_model(name: str) -> tuple[Model, list[np.ndarray]]:
    """The registry's example of op `name` as a model, with its feeds in input order."""
    ex = build_example(name)
    model = Model(graphs=[ex.graph], name=name)
    for value in ex.graph.parameters:
        assert value.tensor is not None
        model.add_tensor(value.tensor)
    return model, [ex.feeds[v.name] for v in ex.graph.inputs]


def single_op(op: str, inputs: Sequence[np.ndarray | TensorType | None],
              attrs: Mapping[str, Any] | None = None, *, const: Sequence[int] = (),
              num_outputs: int | None = None, seed: int = 0) -> tuple[Model, list[np.ndarray]]:
    """A model of one node. `inputs` holds arrays (fed as graph inputs, or model tensors
    for the indices in `const`), TensorTypes (random data) or None (omitted input)."""
    rng = np.random.default_rng(seed)
    graph = Graph()
    model = Model(graphs=[graph], name=op)
    b = GraphBuilder(graph, model)
    operands = []
    feeds = []
    for index, item in enumerate(inputs):
        if item is None:
            operands.append(None)
            continue
        if isinstance(item, TensorType):
            shape = item.static_shape()
            if item.dtype.is_float:
                data = rng.standard_normal(shape).astype(item.dtype.numpy)
            elif item.dtype is DType.BOOL:
                data = rng.integers(0, 2, shape).astype(bool)
            else:
                data = rng.integers(0, 3, shape).astype(item.dtype.numpy)
        else:
            data = np.asarray(item)
        if index in const:
            operands.append(b.parameter(Tensor.from_array(f"w{index}", data)))
        else:
            operands.append(graph.add_input(f"in{index}", TensorType(
                DType.from_numpy(data.dtype), data.shape)))
            feeds.append(data)
    outs = b.op_multi(op, operands, attrs, num_outputs=num_outputs)
    graph.set_outputs(outs)
    return model, feeds


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], *, rtol: float = 1e-4,
                 atol: float = 1e-5, scale: bool = False) -> None:
    """Same count, shapes and dtypes; values close (NaN equal to NaN). With `scale`, the
    tolerance is relative to each output's largest magnitude."""
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
            continue
        if np.iscomplexobj(w):  # both parts compared
            assert np.iscomplexobj(g), f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        wide = np.complex128 if np.iscomplexobj(w) else np.float64
        g64, w64 = g.astype(wide), w.astype(wide)
        tol = atol + (rtol * float(np.abs(w64).max()) if scale and w64.size else 0.0)
        np.testing.assert_allclose(g64, w64, rtol=rtol, atol=tol, err_msg=f"output {i}")


def reference(model: Model, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    return run_model(model, list(feeds))


def module_dialects(module: ir.Module) -> set[str]:
    """Dialects of every op in a module (nested regions included)."""
    found: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        found.add(op.name.split(".", 1)[0])
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def total_macs(model: Model) -> int:
    return sum(registry.node_cost(n).macs for _, n in model.all_nodes() if not n.is_opaque)


def opaque_ops(model: Model) -> list[str]:
    return [n.qualified_op for _, n in model.all_nodes() if n.is_opaque]


# FFTs: stablehlo.fft exists, but the reference interpreter aborts on it, so no export of
# it could be checked
NO_STABLEHLO_FORM = {"fft_r2c", "fft_c2c", "fft_c2r"}
"""Ops none the reference interpreter can check (FFTs): export refuses them naming the node.
The special functions export through their registry decompositions."""

NOT_LOWERED = {"index_put": "no stablehlo.scatter lowering yet"}
"""Ops the StableHLO exporter does not lower yet: export refuses them naming the node."""
