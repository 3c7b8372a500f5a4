"""PyTorch -> IR -> StableHLO -> the StableHLO reference interpreter, against eager torch.

Small models run by default. The real models are marked slow (the reference interpreter
runs about 1.5 M multiply-adds per second here, so inputs are small):

    uv run pytest tests/stablehlo/test_stablehlo_pytorch.py -m slow -n 0

resnet18 and mobilenet_v2 at 1x3x32x32 (25 s and 6 s in the interpreter), vit_b_16 built
for 16x16 images (one patch plus the class token; 150 s), bert-tiny with 16 tokens (6 s),
yolov8n at 1x3x64x64 (31 s).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from shlotools import assert_close, module_dialects, total_macs
from torch import nn

from irbridge.converters.pytorch import capture, zoo
from irbridge.converters.stablehlo import build_module, evaluate, from_mlir
from irbridge.ir import Model


def _leaves(value: Any) -> list[torch.Tensor]:
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def check_model(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
                *, rtol: float = 1e-4, atol: float = 1e-5) -> Model:
    """Capture, export, serialize, evaluate in the interpreter, compare with eager."""
    kwargs = kwargs or {}
    result = capture(module, args, kwargs)
    model = result.model
    assert result.opaque_count == 0 and len(model.graphs) == 1
    built = build_module(model)
    assert module_dialects(built.module) <= {"builtin", "func", "stablehlo"}
    artifact = built.artifact()
    assert artifact.startswith(b"ML\xefR")
    feeds = [result.inputs[v.name].numpy() for v in model.graph.inputs]
    got = evaluate(artifact, feeds)
    with torch.no_grad():
        expected = [t.numpy() for t in _leaves(module(*args, **kwargs))]
    for index, want in enumerate(expected):
        where = result.outputs[index]
        assert where is not None
        assert_close([got[where[1]]], [want], rtol=rtol, atol=atol, scale=True)
    return model


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1, groups=4), nn.Hardswish(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.LayerNorm(32),
                                 nn.Dropout(0.1), nn.Linear(32, 4), nn.Softmax(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class AttentionBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, t, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(y.transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("factory, shape", [(ConvNet, (2, 3, 16, 16)), (Mlp, (3, 12)),
                                            (AttentionBlock, (2, 5, 16))])
def test_small_models(factory: type[nn.Module], shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    check_model(factory().eval(), (torch.randn(*shape),))


# -- real models (slow) ----------------------------------------------------------------------

SIZES: dict[str, dict[str, Any]] = {
    "resnet18": {"input_shape": (1, 3, 32, 32)},
    "mobilenet_v2": {"input_shape": (1, 3, 32, 32)},
    "bert-tiny": {"seq_len": 16},
    "yolov8n": {"input_shape": (1, 3, 64, 64)},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SIZES))
def test_real_model_in_the_interpreter(name: str) -> None:
    built = zoo.build(name, **SIZES[name])
    check_model(built.module, built.args, built.kwargs)


@pytest.mark.slow
def test_vit_b_16_in_the_interpreter() -> None:
    """vit_b_16 (all 12 layers) for 16x16 images: one patch plus the class token."""
    import torchvision

    torch.manual_seed(0)
    module = torchvision.models.vit_b_16(weights=None, image_size=16).eval()
    nn.init.normal_(module.heads.head.weight, std=0.02)  # torchvision zero-initialises it
    check_model(module, (torch.randn(1, 3, 16, 16),))


@pytest.mark.slow
def test_yolov8n_where_torch_mlir_fails() -> None:
    """torch-mlir cannot lower yolov8n to StableHLO; irbridge's module serializes as a
    portable artifact and evaluates to the eager outputs."""
    fx = pytest.importorskip("torch_mlir.fx")
    built = zoo.build("yolov8n", **SIZES["yolov8n"])
    check_model(built.module, built.args, built.kwargs)
    built = zoo.build("yolov8n", **SIZES["yolov8n"])  # torch-mlir's attempt alters buffers
    with pytest.raises(Exception, match=r"failed to legalize|Lowering"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fx.export_and_import(built.module, *built.args, **built.kwargs,
                             output_type="stablehlo")


@pytest.mark.slow
@pytest.mark.parametrize("name, torch_mlir", [("resnet18", True), ("mobilenet_v2", True),
                                              ("bert-tiny", False), ("yolov8n", False)])
def test_macs_of_imported_stablehlo_match_the_capture(name: str, torch_mlir: bool) -> None:
    """MACs (matmul-like FLOPs / 2) of StableHLO-imported IR equal the PyTorch capture's
    within 0.5%: for irbridge's own StableHLO, and for torch-mlir's where torch-mlir can
    lower the model (it fails on bert and yolov8n here)."""
    built = zoo.build(name, **({"seq_len": 32} if name == "bert-tiny" else {}))
    result = capture(built.module, built.args, built.kwargs)
    reference = total_macs(result.model)
    assert reference > 0 and np.isfinite(reference)
    imported = [from_mlir(build_module(result.model).artifact())]
    if torch_mlir:
        fx = pytest.importorskip("torch_mlir.fx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = fx.export_and_import(built.module, *built.args, **built.kwargs,
                                          output_type="stablehlo")
        imported.append(from_mlir(str(module)))
    for model in imported:
        assert abs(total_macs(model) - reference) <= 0.005 * reference
