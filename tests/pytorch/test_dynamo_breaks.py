"""Dynamo: every graph around graph breaks, in order, wired by links."""

from __future__ import annotations

import torch
from pytorch_toys import check
from torch import nn

from irbridge.converters.pytorch import capture, verify


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(y) + x


class Broken(nn.Module):
    """A graph break in the top-level forward and one inside a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.block = Block()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.pre(x).tanh()
        torch._dynamo.graph_break()
        h = self.block(h * 2)
        return self.head(h).softmax(-1), h


class LoopBroken(nn.Module):
    """A graph break inside a loop: Dynamo runs this frame eagerly."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for block in self.blocks:
            x = block(x)
        return x


def test_graph_breaks_give_every_graph_wired_in_order() -> None:
    torch.manual_seed(0)
    model = Broken().eval()
    result = capture(model, (torch.randn(4, 8),), frontend="dynamo")
    ir = result.model
    # pre | h * 2 (the outer frame breaks at the nested break) | block.a | block.b | head
    assert len(ir.graphs) == 5
    breaks = [g.break_reason for g in ir.graphs]
    assert all("graph_break()" in b for b in breaks[:3]), breaks
    assert breaks[3:] == ["", ""]
    assert ir.metadata["dynamo.graph_breaks"] == "3"
    # every graph after the first reads something an earlier graph produced
    for index in range(1, len(ir.graphs)):
        incoming = [lk for lk in ir.links if lk.to_graph == index]
        assert incoming, f"graph {index} has no link"
        for link in incoming:
            assert link.from_graph < index
            assert link.from_output in [v.name for v in ir.graphs[link.from_graph].outputs]
            assert link.to_input in [v.name for v in ir.graphs[index].inputs]
    # weights are shared tensors, named by module path
    assert {"pre.weight", "block.a.weight", "block.b.bias", "head.weight"} <= set(ir.tensors)
    paths = {n.provenance.module_path for _, n in ir.all_nodes() if n.op == "linear"}
    assert paths == {"pre", "block.a", "block.b", "head"}
    assert all(out is not None for out in result.outputs)
    check(result, model)


def test_loop_with_break_reports_what_runs_outside_graphs() -> None:
    torch.manual_seed(0)
    model = LoopBroken().eval()
    result = capture(model, (torch.randn(4, 8),), frontend="dynamo")
    ir = result.model
    # the nested frames are captured, re-rooted per loop iteration
    paths = [n.provenance.module_path for _, n in ir.all_nodes() if n.op == "linear"]
    assert "blocks.0.a" in paths and "blocks.1.b" in paths
    assert "dynamo.uncaptured_inputs" in ir.metadata
    assert result.attempts[0][1].startswith("ok, incomplete")
    report = verify(result, model)
    assert not report.passed
    assert "no data fed" in report.error
