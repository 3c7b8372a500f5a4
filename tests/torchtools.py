"""Helpers shared by tests that capture small torch programs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class FnModule(torch.nn.Module):
    """An nn.Module whose forward calls `fn` on its inputs: a function as a capturable
    model."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)
