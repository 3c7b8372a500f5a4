"""Timeloop export: every problem YAML parsed with PyYAML and checked against the torch
modules' own sizes (from a forward pass), the conv output-size relation, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn
from torch_layers import layer_shapes
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters import timeloop
from irbridge.converters.pytorch import capture
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import Graph, Model, SymDim, Tensor, TensorType


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 16, 3, padding=1, groups=8)  # depthwise, multiplier 2
        self.dilated = nn.Conv2d(16, 8, (3, 5), padding=(2, 4), dilation=2, stride=(1, 2))
        self.fc = nn.Linear(8 * 8 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.dilated(self.dw(self.stem(x))), 1))


def _check(folder: Path, module: nn.Module, shapes: dict[str, tuple[tuple[int, ...], ...]]
           ) -> int:
    """Every layer file against its torch module; returns the number of layers."""
    index = yaml.safe_load((folder / "index.yaml").read_text())
    by_module = {entry["module_path"]: entry for entry in index["layers"]}
    assert set(by_module) == set(shapes)
    assert len({e["file"] for e in index["layers"]}) == len(index["layers"])
    modules = dict(module.named_modules())
    for path, entry in by_module.items():
        doc = yaml.safe_load((folder / entry["file"]).read_text())["problem"]
        assert doc["version"] == "0.4"
        inst, shape = doc["instance"], doc["shape"]
        assert set(inst) >= set(shape["dimensions"])
        for space in shape["data_spaces"]:
            for term in (t for expr in space["projection"] for t in expr):
                assert term[0] in shape["dimensions"]
        sub = modules[path]
        if isinstance(sub, nn.Linear):
            assert (inst["M"], inst["N"], inst["K"]) == (
                math.prod(shapes[path][0][:-1]), sub.out_features, sub.in_features)
            assert shape["name"] == "gemm_ABZ"
            continue
        assert isinstance(sub, nn.Conv2d)
        (n, _, h, w), out = shapes[path]
        g = sub.groups
        assert inst.get("G", 1) == g
        assert (inst["C"] * g, inst["M"] * g) == (sub.in_channels, sub.out_channels)
        assert (inst["S"], inst["R"]) == sub.kernel_size  # S: height, R: width
        assert (inst["Hstride"], inst["Wstride"]) == sub.stride
        assert (inst["Hdilation"], inst["Wdilation"]) == sub.dilation
        assert (inst["N"], inst["Q"], inst["P"]) == (n, out[2], out[3])
        ph, pw = sub.padding  # type: ignore[misc]
        for size, pad, k, d, s, o in ((h, ph, inst["S"], inst["Hdilation"], inst["Hstride"],
                                       inst["Q"]),
                                      (w, pw, inst["R"], inst["Wdilation"], inst["Wstride"],
                                       inst["P"])):
            assert o == (size + 2 * pad - d * (k - 1) - 1) // s + 1
        assert entry["input_hw"] == [h, w]
        assert entry["pads_top_left_bottom_right"] == [ph, pw, ph, pw]
    return len(index["layers"])


def test_small_model_layers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Small().eval()
    x = torch.randn(2, 3, 16, 16)
    model = capture(module, (x,), frontend="fx", weights=False).model
    out = timeloop.write(model, tmp_path / "tl")
    assert _check(out, module, layer_shapes(module, x)) == 4
    dw = yaml.safe_load(next(out.glob("001_*.yaml")).read_text())["problem"]["shape"]
    assert dw["name"] == "grouped_conv2D" and dw["dimensions"][0] == "G"


def test_batched_matmul_has_group_dim(tmp_path: Path) -> None:
    model = Model(name="bmm")
    graph = Graph()
    model.graphs.append(graph)
    a = graph.add_input("a", TensorType(DType.FLOAT32, (SymDim("b"), 4, 8, 16)))
    b = graph.add_input("b", TensorType(DType.FLOAT32, (1, 4, 16, 32)))
    node = graph.add_node("matmul", [a, b], ["y"], output_types=[
        TensorType(DType.FLOAT32, (SymDim("b"), 4, 8, 32))])
    graph.set_outputs(node.outputs)
    out = timeloop.write(model, tmp_path / "tl")
    doc = yaml.safe_load((out / "000_matmul.yaml").read_text())["problem"]
    assert doc["instance"] == {"G": 4, "M": 8, "N": 32, "K": 16}
    assert yaml.safe_load((out / "index.yaml").read_text())["symbols_bound"] == {"b": 1}


def test_bad_input(tmp_path: Path) -> None:
    model = Model(name="lin")
    graph = Graph()
    model.graphs.append(graph)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1, SymDim("seq"), 64)))
    w = graph.add_parameter(model.add_tensor(Tensor("w", DType.FLOAT32, (16, 64))))
    graph.set_outputs(graph.add_node("linear", [x, w], ["y"], output_types=[
        TensorType(DType.FLOAT32, (1, SymDim("seq"), 16))]).outputs)
    with pytest.raises(IrbridgeError, match="unknown target 'nope'"):
        timeloop.write(model, tmp_path / "a", hardware="nope")
    with pytest.raises(IrbridgeError, match=r"node #0 linear: input x .*not static \(seq\)"
                       r" \(hint: bind it, e\.g\. --bind seq=128\)"):
        timeloop.write(model, tmp_path / "b")
    # a dim that is an expression of symbols (an ONNX reshape's 2*seq): the symbol to bind
    x.type = TensorType(DType.FLOAT32, (1, SymDim("2*seq"), 64))
    with pytest.raises(IrbridgeError, match=r"not static \(2\*seq\) \(hint: .*--bind seq="):
        timeloop.write(model, tmp_path / "b")
    x.type = TensorType(DType.FLOAT32, (1, SymDim("seq"), 64))
    out = timeloop.write(model, tmp_path / "c", symbols={"seq": 128})
    assert yaml.safe_load((out / "000_linear.yaml").read_text())["problem"]["instance"] == {
        "M": 128, "N": 16, "K": 64}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


@pytest.fixture(scope="module")
def resnet18_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("r18") / "tl"
    result = CliRunner().invoke(app, ["export", "resnet18", "--to", "timeloop", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_resnet18_cli_every_layer_matches_torch(resnet18_dir: Path) -> None:
    import torchvision

    module = torchvision.models.resnet18(weights=None).eval()
    shapes = layer_shapes(module, torch.randn(1, 3, 224, 224))
    assert _check(resnet18_dir, module, shapes) == 21
