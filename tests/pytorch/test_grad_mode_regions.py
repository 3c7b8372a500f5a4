"""Grad-mode regions in a model's forward under torch.export.

torch.export records every `torch._C._set_grad_enabled` call and its
replace_set_grad_with_hop_pass splits, recompiles and re-inlines the whole graph around
them (2.7 s of Llama-3-70B's capture, for the two no-op calls of its rotary embedding's
`@torch.no_grad()`). capture_export erases calls that set the mode already in force
instead; a region that changes the mode still goes through torch's pass. Both must give
the model's own results.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch._export.passes import replace_set_grad_with_hop_pass as grad_pass

from irbridge.converters.pytorch import capture, verify
from irbridge.errors import CaptureError


class NoGradInside(torch.nn.Module):
    """Llama's pattern: a decorated helper and a `with` block, both no-ops under capture."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    @torch.no_grad()
    def angles(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x) * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = x.abs().mean() + 1
        return self.proj(x) * scale + self.angles(x)


class EnableGradInside(torch.nn.Module):
    """A region that changes the mode (grad on inside capture's no_grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            y = self.proj(x).relu()
        return y * 3 - x


@pytest.fixture
def pass_calls() -> Iterator[list[int]]:
    """How many graphs reached torch's own pass (a counting wrapper around the real one)."""
    calls: list[int] = []
    original = grad_pass.replace_set_grad_with_hop_pass

    def counted(gm: Any, signature: Any) -> Any:
        calls.append(1)
        return original(gm, signature)

    setattr(grad_pass, "replace_set_grad_with_hop_pass", counted)  # noqa: B010
    try:
        yield calls
    finally:
        setattr(grad_pass, "replace_set_grad_with_hop_pass", original)  # noqa: B010


def _set_grad_nodes(result: Any) -> int:
    return sum(1 for node in result.model.graph.nodes if "grad" in node.op)


def test_no_op_grad_regions_skip_torchs_pass_and_match_eager(pass_calls: list[int]) -> None:
    module = NoGradInside()
    result = capture(module, (torch.randn(3, 8),), frontend="export")
    assert pass_calls == []
    assert result.opaque_count == 0, result.stats.notes
    assert _set_grad_nodes(result) == 0
    report = verify(result, module)
    assert report.passed, report.summary()


def test_a_region_that_changes_the_mode_goes_through_torchs_pass(pass_calls: list[int]) -> None:
    module = EnableGradInside()
    result = capture(module, (torch.randn(3, 8),), frontend="export")
    assert len(pass_calls) >= 1
    assert result.opaque_count == 0, result.stats.notes
    report = verify(result, module)
    assert report.passed, report.summary()


def test_the_pass_is_torchs_own_again_after_capture() -> None:
    before = grad_pass.replace_set_grad_with_hop_pass
    capture(NoGradInside(), (torch.randn(3, 8),), frontend="export")
    assert grad_pass.replace_set_grad_with_hop_pass is before
    with pytest.raises(CaptureError):  # export fails inside the shortcut's context
        capture(NoGradInside(), (torch.randn(3, 5),), frontend="export")
    assert grad_pass.replace_set_grad_with_hop_pass is before


def test_overlapping_shortcut_contexts_put_torchs_pass_back_once_all_are_left() -> None:
    """Contexts left in another order than entered (captures on two threads): the shortcut
    stays in while any is open, torch's pass comes back when the last one leaves.
    (torch.export itself cannot run on two threads at once: its mode stacks are global.)"""
    from irbridge.converters.pytorch.capture import _grad_mode_pass_shortcut

    before = grad_pass.replace_set_grad_with_hop_pass
    first, second = _grad_mode_pass_shortcut(), _grad_mode_pass_shortcut()
    first.__enter__()
    installed = grad_pass.replace_set_grad_with_hop_pass
    assert installed is not before
    second.__enter__()
    assert grad_pass.replace_set_grad_with_hop_pass is installed
    first.__exit__(None, None, None)
    assert grad_pass.replace_set_grad_with_hop_pass is installed
    result = capture(NoGradInside(), (torch.randn(3, 8),), frontend="export")
    assert grad_pass.replace_set_grad_with_hop_pass is installed
    second.__exit__(None, None, None)
    assert grad_pass.replace_set_grad_with_hop_pass is before
    assert result.opaque_count == 0
