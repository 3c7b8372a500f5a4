"""`torch.export.save` archives (`.pt2`) as model sources: `zoo.build("m.pt2",
trust_checkpoint=True)` loads the ExportedProgram and captures its module with the archive's
own weights and example inputs. Loading runs code from the file (tests/pytorch/test_trust.py),
so it needs the trust flag. The captures are checked against the eager model that was exported,
not against the reloaded one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchtools import assert_backends_match_eager
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.pytorch import capture, zoo
from irbridge.converters.pytorch.zoo import ZooError


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc(y) * scale, y


def _exported(tmp_path: Path, *, with_inputs: bool = True) -> tuple[torch.nn.Module, Path,
                                                                   tuple[torch.Tensor, ...]]:
    torch.manual_seed(1)
    net = _Net()
    with torch.no_grad():  # running statistics that are not the defaults
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    net.eval()
    args = (torch.randn(2, 3, 6, 6), torch.tensor(0.5))
    program = torch.export.export(net, args)
    if not with_inputs:
        program._example_inputs = None
    path = tmp_path / "net.pt2"
    torch.export.save(program, path)
    return net, path, args


@pytest.mark.parametrize("frontend", ["export", "dynamo", "auto"])
def test_an_archive_captures_what_the_exported_model_computes(tmp_path: Path,
                                                              frontend: str) -> None:
    net, path, args = _exported(tmp_path)
    built = zoo.build(str(path), trust_checkpoint=True)
    assert built.weights == f"file {path}"
    assert [tuple(a.shape) for a in built.args] == [(2, 3, 6, 6), ()]
    assert all(torch.equal(a, b) for a, b in zip(built.args, args, strict=True))
    result = capture(built.module, built.args, frontend=frontend)
    assert result.opaque_count == 0
    # float32 through conv/bn/linear: the back-ends sum in other orders (1e-5 relative)
    assert_backends_match_eager(net, result, args, rtol=1e-5, atol=1e-6)


def test_an_archive_without_example_inputs_gets_inputs_of_its_shapes(tmp_path: Path) -> None:
    net, path, args = _exported(tmp_path, with_inputs=False)
    built = zoo.build(str(path), trust_checkpoint=True)
    assert [(tuple(a.shape), a.dtype) for a in built.args] == \
        [(tuple(a.shape), a.dtype) for a in args]
    result = capture(built.module, built.args, frontend="export")
    assert_backends_match_eager(net, result, tuple(built.args), rtol=1e-5, atol=1e-6)


def test_a_damaged_archive_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ZooError, match=r"could not load torch.export archive .*bad.pt2"):
        zoo.build(str(bad), trust_checkpoint=True)
    missing = tmp_path / "missing.pt2"
    result = CliRunner().invoke(app, ["convert", str(missing), "--trust-checkpoint", "-o",
                                      str(tmp_path / "m.irb")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == \
        [f"error: no such torch.export archive: {missing}"]
    assert not (tmp_path / "m.irb").exists()
