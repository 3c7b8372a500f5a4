"""Ops diffusers models use that the converters first failed on (tools/diffusers_sweep.py),
each on a tiny model built here, compared with eager torch through the IR executor
(`verify`) and through onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from irbridge.converters.onnx.export import to_onnx
from irbridge.converters.pytorch import capture, verify

ort = pytest.importorskip("onnxruntime")

# float32 resamplers: the IR sums the same float32 taps as ATen's kernel in another order,
# a few ulps of values of order 1 (inputs randn)
TOL = {"rtol": 1e-5, "atol": 1e-5}


class Resize(torch.nn.Module):
    def __init__(self, mode: str, antialias: bool, **how: object) -> None:
        super().__init__()
        self.mode, self.antialias, self.how = mode, antialias, how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, mode=self.mode, antialias=self.antialias, **self.how)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("how", [{"size": (5, 7)}, {"size": (23, 9)},
                                 {"scale_factor": 0.5}, {"scale_factor": 2.0},
                                 {"size": (6, 4), "align_corners": True}])
def test_antialiased_resize_matches_eager(mode: str, how: dict[str, object]) -> None:
    """AutoencoderRAE resizes with F.interpolate(mode="bicubic", antialias=True):
    aten._upsample_bicubic2d_aa, Keys' cubic filter (a = -0.5) widened by the scale when
    downsampling."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 10)
    model = Resize(mode, True, **how).eval()
    result = capture(model, (x,), frontend="export")
    assert result.opaque_count == 0
    report = verify(result, model)
    assert report.passed, report
    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {n: t.numpy() for n, t in result.inputs.items()})
    np.testing.assert_allclose(got, model(x).numpy(), **TOL)
