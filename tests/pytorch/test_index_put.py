"""Advanced-index writes (`x[i, :, j] = v`, `index_put`, `index_put_` with accumulate,
bool masks) capture as the registry's `index_put`, match eager torch on the example
inputs and on a second set of values, and export to ONNX (ScatterND) with the same
numbers in onnxruntime, or are refused in one line. Index movement is exact, so the
tolerance is 0 except for accumulate, where float32 additions may reorder (1e-6)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from irbridge.converters.onnx import export_onnx
from irbridge.converters.onnx.verify import verify_onnx
from irbridge.converters.pytorch import capture
from irbridge.converters.pytorch.verify import verify
from irbridge.dtypes import DType
from irbridge.errors import ExportError


class SetItem(torch.nn.Module):
    def forward(self, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        z = y.clone()
        z[:, :, idx[0], idx[1]] = 0.5  # the write must never be lost
        return z


class Accumulate(torch.nn.Module):
    def forward(self, y: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.index_put(y, [None, i], v, True)


class Broadcast(torch.nn.Module):
    def forward(self, y: torch.Tensor, i: torch.Tensor, j: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        z = y.clone()
        z[i, j] = v  # i [2, 1] and j [3] broadcast to [2, 3]; v to [2, 3, 4]
        return z


class Mask(torch.nn.Module):
    def forward(self, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        z = y.clone()
        z[m] = -2.0
        return z


def _cases() -> dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...], float]]:
    g = torch.Generator().manual_seed(0)
    return {
        "setitem": (SetItem(), (torch.randn(2, 3, 5, 6, generator=g),
                                torch.tensor([[0, 4, -1], [1, 2, 5]])), 0.0),
        "accumulate": (Accumulate(), (torch.randn(4, 5, generator=g),
                                      torch.tensor([0, 2, 2, -1]),
                                      torch.randn(4, 4, generator=g)), 1e-6),
        "broadcast": (Broadcast(), (torch.randn(5, 6, 4, generator=g),
                                    torch.tensor([[4], [1]]), torch.tensor([0, 5, 2]),
                                    torch.randn(4, generator=g)), 0.0),
        "mask": (Mask(), (torch.randn(3, 4, generator=g),
                          torch.randn(3, 4, generator=g) > 0), 0.0),
    }


CASES = _cases()


def _second(args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The same shapes and indices, other float values."""
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(a.shape, generator=g) if a.is_floating_point() else a
                 for a in args)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("frontend", ["export", "auto", "dynamo"])
def test_capture_matches_eager(name: str, frontend: str) -> None:
    module, args, tol = CASES[name]
    result = capture(module, args, frontend=frontend)
    ops = [n.op for n in result.model.graph.nodes]
    assert "index_put" in ops and not any(n.is_opaque for _, n in result.model.all_nodes())
    second = _second(args)
    position = {id(a): k for k, a in enumerate(args)}
    assert all(id(t) in position for t in result.inputs.values())
    assert result.capture is not None
    again = dataclasses.replace(result, args=second, capture=dataclasses.replace(
        result.capture, inputs={name: second[position[id(t)]]
                                for name, t in result.inputs.items()}))
    for run in (result, again):  # the second: values baked in from the example would show
        report = verify(run, module, tolerances={DType.FLOAT32: (tol, 0.0)})
        assert report.passed, report.summary()


@pytest.mark.parametrize("name", ["setitem", "accumulate", "broadcast"])
def test_onnx_scatter_nd(tmp_path: Path, name: str) -> None:
    module, args, tol = CASES[name]
    model = capture(module, args, frontend="export").model
    path = tmp_path / "m.onnx"
    export_onnx(model, path)
    for inputs in (args, _second(args)):
        report = verify_onnx(model, path, [a.numpy() for a in inputs])
        assert report.passed, report.summary()
        assert max(c.max_abs_error for c in report.outputs) <= tol
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds: dict[str, Any] = {i.name: a.numpy() for i, a in
                             zip(session.get_inputs(), args, strict=True)}
    np.testing.assert_allclose(session.run(None, feeds)[0], module(*args).numpy(), rtol=0,
                               atol=tol)


def test_onnx_refuses_a_mask_in_one_line(tmp_path: Path) -> None:
    module, args, _ = CASES["mask"]
    model = capture(module, args, frontend="export").model
    with pytest.raises(ExportError, match="index_put with a bool mask") as info:
        export_onnx(model, tmp_path / "m.onnx")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "m.onnx").exists()
