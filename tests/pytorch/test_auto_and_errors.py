"""`auto` (warm-up, method order, attempts) and one-line errors."""

from __future__ import annotations

import pytest
import torch
from pytorch_toys import check, example
from torch import nn

from irbridge.converters.pytorch import AUTO_ORDER, capture
from irbridge.errors import CaptureError


class LazyModel(nn.Module):
    """Lazy layers and state created on the first forward (like YOLO's anchors)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.LazyLinear(6)
        self.anchors: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.anchors is None:
            self.anchors = torch.arange(6, dtype=x.dtype)
        return self.body(x) + self.anchors


class DataDependent(nn.Module):
    """Python control flow on a tensor value: symbolic tracing cannot follow it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        for _ in range(int(y.shape[0])):
            y = y + 1
        return y if bool(x.shape[1] == 4) else -y


class NoTensorOps(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("broken model")


def test_auto_picks_fx_when_it_works() -> None:
    model, args, kwargs = example("mlp")
    result = capture(model, args, kwargs)
    assert result.method == AUTO_ORDER[0] == "fx"
    assert result.attempts == [("fx", "ok")]
    assert result.model.metadata["capture.attempts"] == "fx: ok"


def test_auto_warms_up_lazy_models() -> None:
    torch.manual_seed(0)
    model = LazyModel().eval()
    x = torch.randn(2, 5)
    result = capture(model, (x,))
    assert result.model.tensors["body.weight"].shape == (6, 5)
    check(result, model)


def test_auto_falls_back_and_records_why() -> None:
    torch.manual_seed(0)
    model = DataDependent().eval()
    result = capture(model, (torch.randn(3, 4),))
    assert result.method == "export"
    method, reason = result.attempts[0]
    assert method == "fx" and reason != "ok" and "\n" not in reason
    check(result, model)


def test_errors_are_one_line_with_every_reason() -> None:
    with pytest.raises(CaptureError) as info:
        capture(NoTensorOps(), (torch.randn(2),), warmup=False)
    text = str(info.value)
    assert "\n" not in text
    for method in AUTO_ORDER:
        assert f"{method}:" in text
    with pytest.raises(CaptureError, match="forward pass failed"):
        capture(NoTensorOps(), (torch.randn(2),))


def test_unknown_frontend_and_fx_dynamic() -> None:
    model, args, _kwargs = example("mlp")
    with pytest.raises(CaptureError, match="unknown PyTorch front-end"):
        capture(model, args, frontend="onnx")
    with pytest.raises(CaptureError, match="fx capture has no symbolic shapes"):
        capture(model, args, frontend="fx", dynamic={"batch": (1, 8)})
