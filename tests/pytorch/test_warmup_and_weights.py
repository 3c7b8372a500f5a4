"""capture()'s warm-up policy (only when needed, model left as it was), shared weights,
error hints, and first_divergence on graphs with in-place ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_toys import FRONTENDS, check, example
from torch import nn

from irbridge.converters.pytorch import capture
from irbridge.converters.pytorch.verify import first_divergence
from irbridge.errors import CaptureError


class LazyAnchors(nn.Module):
    """State built on the first forward and kept as a plain attribute (YOLO's Detect
    head builds its anchors like this); no lazy parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 6)
        self.anchors: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.anchors is None:
            self.anchors = torch.arange(6, dtype=x.dtype) * 0.5
        return self.fc(x) + self.anchors


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_no_warm_up_when_nothing_is_lazy(frontend: str) -> None:
    model, args, kwargs = example("convnet")
    result = capture(model, args, kwargs, frontend=frontend)
    assert result.model.metadata["capture.warmup"] == "no"
    check(result, model)


@pytest.mark.parametrize("frontend", ["fx", "dynamo"])
def test_lazily_built_state_is_undone_then_warmed_up(frontend: str) -> None:
    torch.manual_seed(0)
    model = LazyAnchors().eval()
    x = torch.randn(3, 5)
    result = capture(model, (x,), frontend=frontend)
    reason = result.model.metadata["capture.warmup"]
    assert reason == f"{frontend} attempt set LazyAnchors.anchors"
    # what tracing stored (an fx Proxy, Dynamo's replayed side effect) was undone, and so
    # was the warm-up's: capture leaves the model as it found it
    assert model.anchors is None
    check(result, model)


def test_export_undoes_attribute_assignment_itself() -> None:
    # torch.export restores plain tensor attributes a forward assigns (with a warning):
    # the graph computes the anchors, as the first eager call does, and no warm-up runs
    torch.manual_seed(0)
    model = LazyAnchors().eval()
    result = capture(model, (torch.randn(3, 5),), frontend="export")
    assert result.model.metadata["capture.warmup"] == "no"
    assert model.anchors is None
    check(result, model)


def test_warmup_false_still_leaves_the_model_as_it_was() -> None:
    torch.manual_seed(0)
    model = LazyAnchors().eval()
    x = torch.randn(3, 5)
    result = capture(model, (x,), frontend="dynamo", warmup=False)
    assert result.model.metadata["capture.warmup"] == "no"
    assert model.anchors is None  # Dynamo's replayed assignment was undone
    check(result, model)  # the IR computes the anchors itself, as the first call does


def test_explicit_warm_up_is_recorded() -> None:
    model, args, kwargs = example("mlp")
    result = capture(model, args, kwargs, frontend="fx", warmup=True)
    assert result.model.metadata["capture.warmup"] == "requested"


def test_fixed_frontend_error_names_real_options() -> None:
    model, args, _kwargs = example("mlp")
    with pytest.raises(CaptureError) as info:
        capture(model, args, frontend="fx", dynamic={"batch": (1, 8)})
    text = str(info.value)
    assert "--frontend" in text and "frontend=" in text
    assert not text.endswith("frontend=")


class WithBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_parameters_are_shared_read_only_and_buffers_copied(frontend: str) -> None:
    torch.manual_seed(0)
    model = WithBatchNorm().eval()
    result = capture(model, (torch.randn(3, 4),), frontend=frontend)
    tensors = result.model.tensors
    weight = tensors["fc.weight"].data
    assert weight is not None
    assert np.shares_memory(weight, model.fc.weight.detach().numpy())
    with pytest.raises(ValueError, match="read-only"):
        weight[0, 0] = 1.0
    mean = tensors["bn.running_mean"].data
    assert mean is not None
    assert not np.shares_memory(mean, model.bn.running_mean.numpy())
    # sharing means an in-place change of the parameter shows in the IR ...
    with torch.no_grad():
        model.fc.weight.mul_(2)
    np.testing.assert_array_equal(weight, model.fc.weight.detach().numpy())
    check(result, model)


def test_copy_weights_gives_an_independent_copy() -> None:
    torch.manual_seed(0)
    model = WithBatchNorm().eval()
    result = capture(model, (torch.randn(3, 4),), frontend="fx", copy_weights=True)
    weight = result.model.tensors["fc.weight"].data
    assert weight is not None
    before = model.fc.weight.detach().numpy().copy()
    with torch.no_grad():
        model.fc.weight.mul_(2)
    assert not np.shares_memory(weight, model.fc.weight.detach().numpy())
    np.testing.assert_array_equal(weight, before)


class OddParameters(nn.Module):
    """A non-contiguous parameter (must be copied) and a bfloat16 one (shared view)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4).t())  # 4x6, not contiguous
        self.h = nn.Parameter(torch.randn(6).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w + self.h.float()


def test_non_contiguous_and_bfloat16_parameters() -> None:
    torch.manual_seed(0)
    model = OddParameters().eval()
    result = capture(model, (torch.randn(2, 4),), frontend="export")
    w = result.model.tensors["w"].data
    h = result.model.tensors["h"].data
    assert w is not None and h is not None
    np.testing.assert_array_equal(w, model.w.detach().numpy())
    assert w.flags.c_contiguous and not np.shares_memory(w, model.w.detach().numpy())
    assert str(h.dtype) == "bfloat16" and not h.flags.writeable
    np.testing.assert_array_equal(h.astype(np.float32), model.h.detach().float().numpy())
    check(result, model)


class InPlaceRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def test_first_divergence_is_not_fooled_by_in_place_ops() -> None:
    torch.manual_seed(0)
    model = InPlaceRelu().eval()
    x = torch.randn(4, 8)
    assert (model.fc1(x) < 0).any()  # the in-place ReLU changes fc1's output
    result = capture(model, (x,), frontend="fx")
    check(result, model)
    assert first_divergence(result) is None


class Split(nn.Module):
    """Iterates over a traced value (like ultralytics' C2f): symbolic tracing fails here."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = list(self.fc(x).chunk(2, 1))
        return a * torch.sigmoid(b)


class VarArgsModel(nn.Module):
    """forward(x, *args, **kwargs) as ultralytics models have, a block fx cannot trace
    into, a tuple output, and a tensor constant made in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.block = Split()  # under half of the parameters, so it may become a leaf
        self.head = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x: torch.Tensor, *args: object, **kwargs: object) -> tuple[
            torch.Tensor, torch.Tensor]:
        y = self.block(torch.relu(self.stem(x)))
        return self.head(y), y + torch.tensor([1.0, 2.0, 3.0, 4.0])


def test_fx_turns_untraceable_blocks_into_leaves() -> None:
    torch.manual_seed(0)
    model = VarArgsModel().eval()
    x = torch.randn(3, 4)
    result = capture(model, (x,), frontend="fx")
    assert result.method == "fx" and result.attempts == [("fx", "ok")]
    assert result.stats.retraced == {"call_module:test_warmup_and_weights.Split": 1}
    assert result.model.metadata["capture.warmup"] == "no"
    assert not any(k.startswith("_tensor_constant") for k in vars(model))
    check(result, model)
    # auto's fx attempt does not fall back to leaves (costly on transformer stacks)
    auto = capture(model, (x,))
    assert auto.attempts[0][0] == "fx" and auto.attempts[0][1] != "ok"
    assert auto.method == "export"
    check(auto, model)


class _Box:
    """Not a pytree: make_fx cannot re-trace a module that returns one."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


class RowsInABox(nn.Module):
    def forward(self, x: torch.Tensor) -> _Box:
        return _Box(torch.stack([r * 2 for r in x]))  # iterating a tensor: fx cannot trace


class BoxedModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.rows = RowsInABox()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rows(self.lin(x)).t + 1


def test_fx_fails_when_a_leaf_cannot_be_lowered() -> None:
    """A leaf that neither traces nor re-traces makes the fx capture fail with the leaf
    named, instead of an IR with an opaque hole (which would fail verify later)."""
    model = BoxedModel().eval()
    with pytest.raises(CaptureError, match=r"fx traced RowsInABox as leaf modules but could "
                                           r"not lower .*RowsInABox x1"):
        capture(model, (torch.randn(3, 4),), frontend="fx")
    auto = capture(model, (torch.randn(3, 4),))
    assert auto.method != "fx"
    check(auto, model)
