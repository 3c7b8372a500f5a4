"""Layer shapes straight from torch, for checking simulator outputs independently of the
IR: forward hooks on every Conv2d and Linear."""

from __future__ import annotations

import torch
from torch import nn


def layer_shapes(module: nn.Module, x: torch.Tensor) -> dict[str, tuple[tuple[int, ...], ...]]:
    """module path -> (input shape, output shape) of every Conv2d / Linear, from torch."""
    seen: dict[str, tuple[tuple[int, ...], ...]] = {}
    hooks = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Conv2d | nn.Linear):
            def hook(m: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor,
                     name: str = name) -> None:
                seen[name] = (tuple(args[0].shape), tuple(out.shape))
            hooks.append(sub.register_forward_hook(hook))
    with torch.no_grad():
        module(x)
    for h in hooks:
        h.remove()
    return seen
