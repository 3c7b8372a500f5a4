"""Capture leaves the user's module exactly as it found it.

Models that install hooks lazily on their first forward (transformers 5's output capturing
does: hooks on submodules plus a flag on the model) are captured with every front-end and
warm-up policy; the hooks (the model's and torch's global ones), attributes, flags,
parameters, buffers and children must be the same objects with the same contents afterwards,
and the model's eager output unchanged.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn.modules.module as module_mod
from torch import nn

from irbridge.converters.pytorch import capture, verify
from irbridge.errors import CaptureError


def _contents(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, id(v)) for k, v in value.items())
    if isinstance(value, list | set):
        return tuple(id(v) for v in value)
    return None


def fingerprint(model: nn.Module) -> dict[str, Any]:
    """Every attribute of every submodule by identity, containers (hook dicts) by contents,
    buffers by value, and torch's global module hooks."""
    out: dict[str, Any] = {}
    for name, m in model.named_modules():
        out[name] = {k: (id(v), _contents(v)) for k, v in vars(m).items()
                     if k != "_is_torch_compile"}
        out[name + "#buffers"] = {k: b.clone() for k, b in m._buffers.items() if b is not None}
    for name in dir(module_mod):
        if name.startswith("_global_") and isinstance(getattr(module_mod, name), dict):
            out[name] = _contents(getattr(module_mod, name))
    return out


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys()
    for key in before:
        if key.endswith("#buffers"):
            assert before[key].keys() == after[key].keys(), key
            for name, value in before[key].items():
                assert torch.equal(value, after[key][name]), f"{key}.{name}"
        else:
            assert before[key] == after[key], key


class LazyHooks(nn.Module):
    """On its first forward, registers a forward hook, a pre-hook (with kwargs) and a global
    forward hook, then sets a flag: what transformers 5 does. Each hook changes the output,
    so installing them twice changes what the model computes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not getattr(self, "_hooks_installed", False):
            self.fc1.register_forward_hook(lambda m, i, o: o * 2)
            self.fc2.register_forward_pre_hook(lambda m, a, k: ((a[0] + 1,), k), with_kwargs=True)
            self._global = module_mod.register_module_forward_hook(
                lambda m, i, o: o + 0.5 if m is self.fc2 else None)
            self._hooks_installed = True
        self.calls += 1
        return self.fc2(torch.relu(self.fc1(x)))


def _fresh() -> tuple[LazyHooks, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = LazyHooks().eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        reference = LazyHooks().eval()
        reference.load_state_dict(model.state_dict())
        expected = reference(x)  # the first (and only) forward of an untouched twin
        reference._global.remove()
    return model, x, expected


@pytest.mark.parametrize("frontend", ["auto", "fx", "export", "dynamo"])
@pytest.mark.parametrize("warmup", [None, True])
def test_lazily_installed_hooks_are_undone(frontend: str, warmup: bool | None) -> None:
    model, x, expected = _fresh()
    before = fingerprint(model)
    # whether this toy captures is not the point; what capture leaves behind is
    with contextlib.suppress(CaptureError):
        capture(model, (x,), frontend=frontend, warmup=warmup)
    assert_same(before, fingerprint(model))
    assert not hasattr(model, "_hooks_installed")
    with torch.no_grad():
        assert torch.equal(model(x), expected)  # hooks installed once, as on a fresh model
    model._global.remove()


def test_segformer_captures_and_is_left_as_found() -> None:
    """The reported case: a small-config Hugging Face Segformer (random weights) that runs
    eagerly failed every front-end with 'mat1 and mat2 shapes cannot be multiplied ...;
    check the inputs' because restored state kept transformers' hooks."""
    transformers = pytest.importorskip("transformers")
    config = transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
        decoder_hidden_size=16, mlp_ratios=[2, 2])
    torch.manual_seed(0)
    model = transformers.SegformerForSemanticSegmentation(config).eval()
    x = torch.randn(1, 3, 32, 32)
    before = fingerprint(model)
    result = capture(model, (x,), frontend="fx")
    assert result.method == "fx"
    assert_same(before, fingerprint(model))
    with torch.no_grad():
        eager = model(x).logits
    assert eager.shape == (1, 2, 8, 8)
    report = verify(result, model)  # the IR computes what the untouched model computes
    assert report.passed, report.summary()


@pytest.mark.slow
@pytest.mark.parametrize("frontend", ["export", "dynamo", "auto"])
def test_segformer_every_frontend(frontend: str) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
        decoder_hidden_size=16, mlp_ratios=[2, 2])
    torch.manual_seed(0)
    model = transformers.SegformerForSemanticSegmentation(config).eval()
    x = torch.randn(1, 3, 32, 32)
    before = fingerprint(model)
    capture(model, (x,), frontend=frontend)
    assert_same(before, fingerprint(model))


class Fragile(nn.Module):
    """Its forward works once per class, and fx cannot trace it (data-dependent branch)."""

    calls = 0

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        if type(self).calls > 1:
            raise RuntimeError("state broken by an earlier call")
        y = self.fc(x)
        return y if y.sum() > 0 else -y


def test_a_failing_warm_up_after_an_attempt_does_not_just_blame_the_inputs() -> None:
    model = Fragile()
    with pytest.raises(CaptureError) as info:
        capture(model, (torch.randn(2, 4),), frontend="fx")
    text = str(info.value)
    assert "after a capture attempt" in text and "could not undo" in text
    # A model that fails on its very first forward is still an input problem.
    with pytest.raises(CaptureError, match=r"own forward pass failed .*; check the inputs"):
        capture(nn.Linear(4, 4), (torch.randn(2, 5),), frontend="fx", warmup=True)
