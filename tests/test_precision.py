"""`irbridge.precision.widened`: the same graph with float32 made float64, checked on a real
capture that holds casts, constants and integer values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from irbridge.converters.pytorch import capture
from irbridge.dtypes import DType
from irbridge.executor import run_model
from irbridge.precision import widened
from irbridge.verify import verify


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.register_buffer("offset", torch.linspace(-1, 1, 4))

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rounded = x.to(torch.int32).to(torch.float32)          # casts through an integer
        y = self.fc(x + rounded * 0.1) + self.offset + torch.tensor(1.0 / 3.0)
        return torch.relu(y).gather(1, idx), idx + 1


def test_widened_is_float64_everywhere_and_computes_in_float64() -> None:
    torch.manual_seed(0)
    model = Mixed().eval()
    x = torch.randn(3, 6) * 3
    idx = torch.tensor([[0, 3], [1, 1], [2, 0]])
    ir = capture(model, (x, idx), {}, frontend="export").model
    wide = widened(ir)
    verify(wide)
    assert [n.op for n in wide.graph.nodes] == [n.op for n in ir.graph.nodes]
    for _graph, node in wide.all_nodes():
        for v in node.outputs:
            assert v.type is None or v.type.dtype != DType.FLOAT32, node
        assert DType.FLOAT32 not in node.attrs.values(), node  # cast targets widened
    assert any(DType.FLOAT64 in n.attrs.values() for _, n in wide.all_nodes())
    ints = [v.type.dtype for v in wide.graph.outputs if v.type is not None]
    assert ints[1] == DType.INT64  # integer values keep their type
    assert all(t.dtype == DType.FLOAT32 for t in ir.tensors.values())  # original untouched

    got = run_model(wide, [x.numpy().astype(np.float64), idx.numpy()])
    ref = Mixed().eval()
    ref.load_state_dict(model.state_dict())
    ref = ref.double()
    with torch.no_grad():
        want, want_idx = ref(x.double(), idx)
    assert got[0].dtype == np.float64
    # The only float32 left is in the constants the capture rounded (0.1, 1/3): ~3e-8
    # relative, far below float32 arithmetic's own error on this graph
    np.testing.assert_allclose(got[0], want.numpy(), rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(got[1], want_idx.numpy())


def test_widened_refuses_a_narrowing() -> None:
    ir = capture(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {}).model
    with pytest.raises(ValueError, match="not a float widening"):
        widened(ir, DType.FLOAT32, DType.INT32)


@pytest.mark.parametrize("op", ["if", "loop"])
def test_widened_reaches_subgraphs(op: str) -> None:
    """Control flow: the values of then/else branches and loop bodies are widened too, and
    the widened model runs in float64 to the original's float32 result."""
    from irbridge.ir import Model
    from irbridge.ops.examples import build_example

    built = build_example(op)
    model = Model(graphs=[built.graph], tensors={
        v.tensor.name: v.tensor for v in built.graph.parameters if v.tensor is not None})
    wide = widened(model)
    subgraphs = [g for _, n in wide.all_nodes() for g in n.subgraphs()]
    assert subgraphs
    for g in subgraphs:
        dtypes = {v.type.dtype for v in g.values.values() if v.type is not None}
        assert DType.FLOAT32 not in dtypes and DType.FLOAT64 in dtypes, g.name
    feeds = {k: a.astype(np.float64) if a.dtype == np.float32 else a
             for k, a in built.feeds.items()}
    got = run_model(wide, feeds)
    want = run_model(model, built.feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == (np.float64 if w.dtype == np.float32 else w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)  # float32 rounding, few ops
