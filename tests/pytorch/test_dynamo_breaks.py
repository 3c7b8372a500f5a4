"""Dynamo: every graph around graph breaks, in order, wired by links."""

from __future__ import annotations

from pathlib import Path

import torch
from pytorch_toys import check
from torch import nn
from typer.testing import CliRunner

from irbridge.cli.main import app
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


LOOP_BROKEN = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(y) + x


class LoopBroken(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        x = self.pre(x)
        for block in self.blocks:
            x = block(x)
        return x
'''


def test_an_incomplete_capture_is_never_exported_as_the_model(tmp_path: Path) -> None:
    """A graph break inside a loop: Dynamo runs that frame as Python, so graph inputs are
    fed by Python outside the graphs. Such an IR may be kept as .irb (it says so) but every
    export (ONNX, StableHLO, simulators, viewers) refuses it in one line."""
    (tmp_path / "loop.py").write_text(LOOP_BROKEN)
    spec = f"{tmp_path / 'loop.py'}:LoopBroken"
    runner = CliRunner()
    for target in ("x.onnx", "x.mlir"):
        out = tmp_path / target
        result = runner.invoke(app, ["convert", spec, "--frontend", "dynamo",
                                     "--input-shape", "4,8", "-o", str(out)])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "is an incomplete Dynamo capture" in lines[0]
        assert "graph inputs come from Python that ran outside the graphs" in lines[0]
        assert not out.exists()
    irb = tmp_path / "x.irb"
    result = runner.invoke(app, ["convert", spec, "--frontend", "dynamo", "--input-shape",
                                 "4,8", "-o", str(irb)])
    assert result.exit_code == 0, result.output
    assert "incomplete" in result.stdout
    for fmt, name in (("onnx", "y.onnx"), ("stablehlo", "y.mlir"), ("chakra", "chakra"),
                      ("dot", "y.dot")):
        result = runner.invoke(app, ["export", str(irb), "--to", fmt, "-o",
                                     str(tmp_path / name)])
        assert result.exit_code == 2, (fmt, result.output)
        assert "incomplete Dynamo capture" in result.stderr and f"to {fmt}" in result.stderr
        assert not (tmp_path / name).exists()
