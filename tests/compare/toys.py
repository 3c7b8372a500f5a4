"""Small models for the comparison tests: a CNN and variants that differ in one layer."""

from __future__ import annotations

import copy

import torch
from torch import nn

from irbridge.compare.sources import Side, example_inputs
from irbridge.converters.pytorch import capture


class SmallCNN(nn.Module):
    """conv1-act1-conv2-act2-pool-head; `conv2` is the layer the variants change, `extra`
    an optional activation after act1 (None in the base model)."""

    def __init__(self, width: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.act1 = nn.ReLU()
        self.extra: nn.Module | None = None
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.conv1(x))
        if self.extra is not None:
            x = self.extra(x)
        x = self.pool(self.act2(self.conv2(x)))
        return self.head(torch.flatten(x, 1))


class SmallMLP(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def base_cnn() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN().eval()


def wider_kernel(model: SmallCNN) -> SmallCNN:
    """The same network with `conv2` a 5x5 conv (padding 2: same output shape); every
    other weight is shared."""
    other = copy.deepcopy(model)
    torch.manual_seed(1)
    other.conv2 = nn.Conv2d(8, 8, 5, padding=2)
    return other.eval()


def extra_activation(model: SmallCNN) -> SmallCNN:
    """The same network with an extra Tanh (`extra`) after act1; weights shared."""
    other = copy.deepcopy(model)
    other.extra = nn.Tanh()
    return other.eval()


def cnn_input() -> torch.Tensor:
    torch.manual_seed(2)
    return torch.randn(1, 3, 16, 16)


def side(module: nn.Module, x: torch.Tensor, frontend: str = "fx", label: str = "toy") -> Side:
    """A side captured by an irbridge front-end, with the example input for numerics."""
    model = capture(module, (x,), frontend=frontend, weights=True).model
    return Side(label, frontend, model, examples=example_inputs(module, (x,), {}))
