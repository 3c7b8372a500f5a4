"""Regression (issue 13 item 3): an internal error while lowering one node (a
ZeroDivisionError on a zero-size dim, a dtype the IR lacks, a data-dependent guard) leaves
that node opaque with the reason recorded; it never ends the whole capture."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torchtools import FnModule

from irbridge.converters.pytorch import capture, verify


def test_roll_of_a_zero_size_dim_captures_and_verifies() -> None:
    module = FnModule(lambda x: torch.roll(x, 2, 0) + 1)
    result = capture(module, (torch.zeros(0, 3),), frontend="export")
    report = verify(result, module)
    assert report.passed, report.summary()


def test_complex32_leaves_its_nodes_opaque_with_the_reason() -> None:
    module = FnModule(lambda x: x.to(torch.complex32).real.float() * 2)
    result = capture(module, (torch.randn(3),), frontend="export")
    assert result.opaque_count >= 1
    notes = [n for n in result.stats.notes if n.startswith("opaque")]
    assert any("complex32" in n for n in notes), notes
    # the ops around the opaque node are still lowered
    assert any(not n.is_opaque and n.op == "mul" for _, n in result.model.all_nodes())


@pytest.mark.parametrize("frontend", ["export"])
def test_tensor_split_with_tensor_indices_does_not_end_the_capture(frontend: str) -> None:
    module = FnModule(lambda x, i: torch.tensor_split(x, i)[0] * 2)
    args = (torch.randn(6), torch.tensor([2, 4]))
    result = capture(module, args, frontend=frontend)
    if result.opaque_count:
        assert all(": " in n for n in result.stats.notes if n.startswith("opaque"))
    else:
        assert verify(result, module).passed


class FlashCpu(torch.nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, is_causal=self.causal)


@pytest.mark.parametrize("decompose", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_cpu_log_sum_exp(decompose: bool, causal: bool) -> None:
    """Regression (issue 13 item 3): the kernel's log-sum-exp output is [B, H, L] (with
    decompose=True it came out as the [B, H, L, S] attention weights); verify compares it
    with eager torch at the float32 tolerance of verify's table."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=gen) for s in ((2, 3, 4, 6), (2, 3, 5, 6), (2, 3, 5, 6)))
    module = FlashCpu(causal)
    result = capture(module, (q, k, v), frontend="export", decompose=decompose)
    assert result.opaque_count == 0, result.stats.notes
    report = verify(result, module)
    assert report.passed, report.summary()
    assert [o.shape for o in report.outputs] == [(2, 3, 4, 6), (2, 3, 4)]


def test_the_aten_tables_skip_ops_this_torch_lacks() -> None:
    """The handler tables name ops of the pinned torch; under a torch build without one
    (seen: torch 2.11 lacks aten.linalg_polar) the name reads as None and the table skips
    it, where `torch.ops.aten` raises and every capture failed on importing the tables."""
    import torch

    from irbridge.converters.pytorch.handlers._base import ATEN, _aten, aten

    assert aten.no_such_op_in_any_torch.default is None
    assert aten.relu.no_such_overload is None
    assert aten.relu.default is torch.ops.aten.relu.default
    before = dict(ATEN)
    _aten(aten.no_such_op_in_any_torch.default)(lambda em, args: None)
    assert before == ATEN


class _ListIndexOverConstant(torch.nn.Module):
    """timm's csatv2 stem: `x[:, :, self.permutation]` (a Python list index, lowered by
    retracing the node, whose graph holds the index as its `_tensor_constant0`) and
    `x / (self.var ** 0.5)` (computed while fx traces: the root graph's `_tensor_constant0`)."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.register_buffer("var", torch.rand(3, 32, generator=gen) + 0.5, persistent=False)
        self.permutation = [(5 * i) % 32 for i in range(32)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, self.permutation] / (self.var ** 0.5 + 1e-8)


def test_tensor_constants_of_two_graph_modules_keep_their_own_values() -> None:
    """Both constants were named `_tensor_constant0` and the model kept the first: the
    division read the int64 index (0 at the front: inf), so csatv2 came out all NaN."""
    import numpy as np
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx

    module = _ListIndexOverConstant().eval()
    x = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(1))
    result = capture(module, (x,), frontend="fx")
    assert result.opaque_count == 0
    report = verify(result, module)
    assert report.passed, report.summary()
    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {k: v.numpy() for k, v in result.inputs.items()})
    # float32 elementwise (a gather, a sqrt, a division): a few ulps
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-6, atol=0)


class _ConfigArithmetic(torch.nn.Module):
    """Reformer's `np.lcm(chunk_a, chunk_b)`: arithmetic on literals of the program that
    no table lowers, which every front-end hands over as an op of constant tensors."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = torch.lcm(torch.tensor(4), torch.tensor(6))
        g = torch.gcd(torch.tensor([12, 18]), torch.tensor([8, 27]))
        return x * k + g.sum()


@pytest.mark.parametrize("frontend", ["fx", "export", "dynamo"])
def test_an_unlowered_op_of_literals_is_folded_to_its_value(frontend: str) -> None:
    module = _ConfigArithmetic()
    result = capture(module, (torch.randn(3),), frontend=frontend)
    assert result.opaque_count == 0, result.stats.notes
    report = verify(result, module)
    assert report.passed, report.summary()
    if frontend != "fx":   # fx runs torch.tensor(...) ops eagerly while it traces
        assert any(n.startswith("folded") for n in result.stats.notes), result.stats.notes


class _NotLiterals(torch.nn.Module):
    def forward(self, n: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.gcd(n, torch.tensor([4, 6, 8])),     # reads a model input
                x + torch.poisson(torch.full((3,), 2.0)))   # a random draw


def test_ops_of_inputs_and_random_ops_are_never_folded() -> None:
    result = capture(_NotLiterals(), (torch.tensor([2, 3, 12]), torch.randn(3)),
                     frontend="export")
    opaque = sorted(n.op for _, n in result.model.all_nodes() if n.is_opaque)
    assert opaque == ["gcd.default", "poisson.default"], opaque
    assert not any(n.startswith("folded") for n in result.stats.notes)
