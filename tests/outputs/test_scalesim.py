"""SCALE-Sim export: topology rows checked against the torch modules (sizes taken from a
forward pass, not from irbridge), the real scalesim package run on the output, bad input."""

from __future__ import annotations

import configparser
import csv
import math
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn
from torch_layers import layer_shapes
from typer.testing import CliRunner

from irbridge import serde
from irbridge.analysis.hardware import resolve_target
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.converters import scalesim
from irbridge.converters.pytorch import capture
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import Graph, Model, SymDim, Tensor, TensorType


class Small(nn.Module):
    """Every conv form SCALE-Sim sees: strided (odd padded size), depthwise, grouped,
    dilated, rectangular kernel, plus a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.grouped = nn.Conv2d(8, 16, 3, padding=1, groups=2)
        self.dilated = nn.Conv2d(16, 8, 3, padding=2, dilation=2)
        self.rect = nn.Conv2d(8, 4, (1, 3), padding=(0, 1))
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.rect(self.dilated(self.grouped(self.dw(self.stem(x)))))
        return self.fc(torch.flatten(x, 1))


def _expected_rows(module: nn.Module, shapes: dict[str, tuple[tuple[int, ...], ...]]
                   ) -> tuple[Counter[tuple[object, ...]], Counter[tuple[object, ...]]]:
    """(conv rows, gemm rows) as (module path, fields...) multisets, from torch alone."""
    conv: Counter[tuple[object, ...]] = Counter()
    gemm: Counter[tuple[object, ...]] = Counter()
    for name, sub in module.named_modules():
        if name not in shapes:
            continue
        (n, *_), out = shapes[name]
        if isinstance(sub, nn.Linear):
            gemm[(name, math.prod(shapes[name][0][:-1]), sub.out_features, sub.in_features)] += 1
            continue
        assert isinstance(sub, nn.Conv2d)
        kh, kw = sub.kernel_size
        g, cin, cout = sub.groups, sub.in_channels, sub.out_channels
        oh, ow = out[2], out[3]
        if sub.dilation != (1, 1) or sub.stride[0] != sub.stride[1]:
            gemm[(name, n * oh * ow, cout // g, cin // g * kh * kw)] += g
            continue
        s = sub.stride[0]
        covered = ((oh - 1) * s + kh, (ow - 1) * s + kw)
        if g == cin and g > 1:
            conv[(name, *covered, kh, kw, cin, cout // cin, s)] += n
        else:
            conv[(name, *covered, kh, kw, cin // g, cout // g, s)] += n * g
    return conv, gemm


def _read_rows(folder: Path) -> tuple[Counter[tuple[object, ...]], Counter[tuple[object, ...]]]:
    with (folder / "layers.csv").open() as f:
        module_of = {r["row"]: r["module_path"] for r in csv.DictReader(f)}
    found: list[Counter[tuple[object, ...]]] = []
    for kind in ("conv", "gemm"):
        rows: Counter[tuple[object, ...]] = Counter()
        files = list(folder.glob(f"*_{kind}.csv"))
        if files:
            lines = files[0].read_text().splitlines()
            for line in lines[1:]:
                assert line.endswith(","), line
                name, *fields = [c.strip() for c in line[:-1].split(",")]
                rows[(module_of[name], *map(int, fields))] += 1
        found.append(rows)
    return found[0], found[1]


@pytest.fixture(scope="module")
def small() -> tuple[Model, dict[str, tuple[tuple[int, ...], ...]], nn.Module]:
    torch.manual_seed(0)
    module = Small().eval()
    x = torch.randn(1, 3, 16, 16)
    model = capture(module, (x,), frontend="fx", weights=False).model
    model.name = "small"
    return model, layer_shapes(module, x), module


def test_rows_match_torch_modules(small, tmp_path: Path) -> None:
    model, shapes, module = small
    out = scalesim.write(model, tmp_path / "ss", hardware="tpu-v4")
    conv, gemm = _read_rows(out)
    want_conv, want_gemm = _expected_rows(module, shapes)
    assert conv == want_conv
    assert gemm == want_gemm
    names = (out / "small_conv.csv").read_text()
    assert sum("DP" in line.split(",")[0] for line in names.splitlines()) == 1  # only dw
    with (out / "layers.csv").open() as f:
        macs = sum(int(r["macs"]) for r in csv.DictReader(f))
    torch_macs = 0
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Conv2d):
            o = shapes[name][1]
            torch_macs += math.prod(o) * sub.in_channels // sub.groups * math.prod(sub.kernel_size)
        elif isinstance(sub, nn.Linear):
            torch_macs += sub.in_features * sub.out_features
    assert macs == torch_macs


def test_scalesim_runs_every_row(small, tmp_path: Path) -> None:
    model, _, module = small
    out = scalesim.write(model, tmp_path / "ss", hardware="tpu-v4")
    results = scalesim.run(out, tmp_path / "results")
    conv, gemm = _read_rows(out)
    assert len(results) == sum(conv.values()) + sum(gemm.values())
    assert all(r.total_cycles > 0 for r in results)
    dw = [r for r in results if "DP" in r.name]
    assert [r.sim_layers for r in dw] == [module.dw.in_channels]


def test_cfg_from_target_is_read_by_scalesim(small, tmp_path: Path) -> None:
    from scalesim.scale_config import scale_config

    model, _, _ = small
    for name, rows, df in (("tpu-v4", 128, "ws"), ("h100-sxm", 32, "os")):
        out = scalesim.write(model, tmp_path / name, hardware=name)
        path = out / "small.cfg"
        config = scale_config()
        config.read_conf_file(str(path))
        assert config.valid_conf_flag
        assert (config.array_rows, config.array_cols, config.df) == (rows, rows, df)
        parser = configparser.ConfigParser()
        parser.read(path)
        bw = int(parser["architecture_presets"]["Bandwidth"])
        # The array stands for the whole chip: its clock makes rows*cols MACs the peak,
        # and the words per cycle keep the target's bytes per second.
        target = resolve_target(name)
        dtype = "bf16" if name == "tpu-v4" else "fp32"
        word = {"bf16": 2, "fp32": 4}[dtype]
        clock = target.peak(dtype) / (2 * rows * rows)
        assert abs(bw * word * clock - target.bandwidth) <= 0.5 * word * clock
        sizes = [int(parser["architecture_presets"][k])
                 for k in ("IfmapSramSzkB", "FilterSramSzkB", "OfmapSramSzkB")]
        assert all(s > 0 for s in sizes)


def _tiny_transformer() -> tuple[Model, nn.Module]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()
    x = torch.randn(1, 8, 32)
    return capture(layer, (x,), weights=False).model, layer


def test_transformer_gemm_form_runs(tmp_path: Path) -> None:
    model, _ = _tiny_transformer()
    out = scalesim.write(model, tmp_path / "tf", hardware="tpu-v5e")
    assert not list(out.glob("*_conv.csv"))
    _, gemm = _read_rows(out)
    mnk = Counter(fields[1:] for fields in gemm.elements())
    # q/k/v in-projection, out-projection, two feed-forward linears, all on 8 tokens;
    # attention: 4 heads x (8x8 scores over 8 dims, 8x8 values over 8 keys).
    assert mnk[(8, 64, 32)] == 1 and mnk[(8, 32, 64)] == 1
    assert mnk[(8, 8, 8)] == 8
    results = scalesim.run(out, tmp_path / "results")
    assert len(results) == sum(gemm.values()) and all(r.total_cycles > 0 for r in results)


# -- bad input --------------------------------------------------------------------------------

def _nothing_left(parent: Path) -> None:
    assert [p.name for p in parent.iterdir()] == []


def _linear_model(x_shape: tuple[int | SymDim, ...] | None) -> Model:
    """x @ w^T with w [16, 64]; x typed as given (None: no shape at all)."""
    model = Model(name="lin")
    graph = Graph()
    model.graphs.append(graph)
    x = graph.add_input("x", None if x_shape is None else TensorType(DType.FLOAT32, x_shape))
    w = graph.add_parameter(model.add_tensor(Tensor("w", DType.FLOAT32, (16, 64))))
    y_type = None if x_shape is None else TensorType(DType.FLOAT32, (*x_shape[:-1], 16))
    node = graph.add_node("linear", [x, w], ["y"], output_types=[y_type])
    graph.set_outputs(node.outputs)
    return model


def test_unknown_hardware(small, tmp_path: Path) -> None:
    with pytest.raises(IrbridgeError, match="unknown target 'tpu-v9'"):
        scalesim.write(small[0], tmp_path / "out", hardware="tpu-v9")
    _nothing_left(tmp_path)


def test_unwritable_folder(small, tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    target = parent / "out" if not os.access(parent, os.W_OK) else Path("/proc/irbridge-out")
    try:
        with pytest.raises(IrbridgeError) as err:
            scalesim.write(small[0], target, hardware="tpu-v4")
        assert str(target) in str(err.value) and "\n" not in str(err.value)
    finally:
        parent.chmod(0o700)
    assert not target.exists()


def test_symbolic_batch_bound_to_one_and_other_symbols_rejected(tmp_path: Path) -> None:
    out = scalesim.write(_linear_model((SymDim("batch"), 64)), tmp_path / "a",
                         hardware="tpu-v4")
    assert (out / "lin_gemm.csv").read_text().splitlines()[1] == "linear, 1, 16, 64,"
    with pytest.raises(IrbridgeError, match=r"node #\d+ linear: input x .* is not static"):
        scalesim.write(_linear_model((1, SymDim("seq"), 64)), tmp_path / "b",
                       hardware="tpu-v4")
    assert not (tmp_path / "b").exists()


def test_model_without_shapes(tmp_path: Path) -> None:
    with pytest.raises(IrbridgeError, match=r"node #\d+ linear: input x has no shape"):
        scalesim.write(_linear_model(None), tmp_path / "out", hardware="tpu-v4")
    _nothing_left(tmp_path)


def test_model_without_layers(tmp_path: Path) -> None:
    model = Model(name="relu")
    graph = Graph()
    model.graphs.append(graph)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1, 8)))
    graph.set_outputs([GraphBuilder(graph).op("relu", [x])])
    with pytest.raises(IrbridgeError, match="no convolution or matmul-like node"):
        scalesim.write(model, tmp_path / "out", hardware="tpu-v4")
    _nothing_left(tmp_path)


def test_cli_export_file(small, tmp_path: Path) -> None:
    path = serde.save(small[0], tmp_path / "small.irb", weights="none")
    result = CliRunner().invoke(app, ["export", str(path), "--to", "scalesim", "--hardware",
                                      "tpu-v4", "-o", str(tmp_path / "ss")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ss" / "small.cfg").is_file()
    bad = CliRunner().invoke(app, ["export", str(path), "--to", "scalesim", "--hardware",
                                   "nope", "-o", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "unknown target 'nope'" in bad.output
    assert not (tmp_path / "bad").exists()


# -- resnet18, end to end (slow: capture plus about three minutes of SCALE-Sim) -----------------

@pytest.mark.slow
def test_resnet18_cli_and_scalesim_cycles_per_layer(tmp_path: Path) -> None:
    import torchvision

    result = CliRunner().invoke(app, ["export", "resnet18", "--to", "scalesim", "--hardware",
                                      "tpu-v4", "-o", str(tmp_path / "r18")])
    assert result.exit_code == 0, result.output
    module = torchvision.models.resnet18(weights=None).eval()
    shapes = layer_shapes(module, torch.randn(1, 3, 224, 224))
    conv, gemm = _read_rows(tmp_path / "r18")
    assert (conv, gemm) == _expected_rows(module, shapes)
    results = scalesim.run(tmp_path / "r18", tmp_path / "results")
    with (tmp_path / "r18" / "layers.csv").open() as f:
        module_of = {r["row"]: r["module_path"] for r in csv.DictReader(f)}
    cycles = {module_of[r.name]: r.total_cycles for r in results}
    assert set(cycles) == set(shapes)  # every Conv2d and the Linear: 21 layers
    assert all(c > 0 for c in cycles.values())
