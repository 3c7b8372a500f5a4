"""Matmul-like FLOPs of real models equal torch's FlopCounterMode exactly.

The reference runs so that it sees every matmul: autograd enabled (under no_grad
nn.MultiheadAttention takes a fused fast path FlopCounterMode does not count) and scaled
dot product attention forced to the math path. FlopCounterMode counts mm / addmm (bias
ignored) / bmm / convolution at 2 x MACs, which is exactly the IR's matmul-like FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow


def _torchvision(name: str, size: int = 224) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        return model, (torch.randn(1, 3, size, size),)
    return make


def _yolov8n() -> tuple[Any, tuple[Any, ...]]:
    from ultralytics import YOLO

    return YOLO("yolov8n.yaml", verbose=False).model, (torch.randn(1, 3, 640, 640),)


def _bert() -> tuple[Any, tuple[Any, ...]]:
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig())
    return model, (torch.randint(0, 30522, (1, 128)),)


MODELS = {
    "resnet18": _torchvision("resnet18"),
    "mobilenet_v2": _torchvision("mobilenet_v2"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "vit_b_16": _torchvision("vit_b_16"),
    "yolov8n": _yolov8n,
    "bert-base": _bert,
}


def _reference_flops(model: Any, args: tuple[Any, ...]) -> int:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH), \
            FlopCounterMode(display=False) as counter:
        model(*args)
    return int(counter.get_total_flops())


@pytest.mark.parametrize("name", list(MODELS))
def test_matmul_flops_equal_flop_counter_mode(name: str) -> None:
    from irbridge.analysis.cost import cost_model
    from irbridge.converters.pytorch import capture

    torch.manual_seed(0)
    model, args = MODELS[name]()
    model.eval()
    reference = _reference_flops(model, args)
    result = capture(model, args, weights=False)
    costs = cost_model(result.model)
    assert not costs.uncosted and not costs.errors, costs.warnings()
    assert costs.total.matmul_flops == reference, (
        f"{name} via {result.method}: IR {costs.total.matmul_flops:,} vs "
        f"FlopCounterMode {reference:,}; {costs.warnings()}")
    if name == "resnet18":
        assert costs.total.macs == 1_814_073_344
    if name == "bert-base":
        assert costs.total.macs == 11_174_215_680  # 22.35 GFLOPs with attention
    if name == "yolov8n":
        assert round(costs.total.matmul_flops / 1e9, 3) == 8.744
