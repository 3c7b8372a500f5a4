"""sort and topk of float data with NaN through ONNX: onnxruntime's TopK leaves NaN
anywhere (it ranked [3, nan, 1, inf, 2, nan] as 1, inf, nan, 2, 3, nan), so the exporter
orders by the NaN flag after the values. Expected values come from torch's stable sort
(NaN largest, ties in index order) and, for topk, from the IR executor (torch's topk order
of ties is unspecified)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torchtools import FnModule

from irbridge.converters.onnx import to_onnx
from irbridge.converters.pytorch import capture
from irbridge.executor import run_model

NAN, INF = float("nan"), float("inf")
X = torch.tensor([[3, NAN, 1, INF, 2, NAN, 1, -INF], [0, 0, NAN, 5, -1, 0, 2, 2],
                  [NAN, NAN, NAN, 1, NAN, 0, -1, NAN]])


def _ort(proto: object, x: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(),  # type: ignore[attr-defined]
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sort_with_nan_equals_torch(descending: bool, dtype: torch.dtype) -> None:
    x = X.to(dtype)
    module = FnModule(lambda t: torch.sort(t, dim=-1, descending=descending, stable=True))
    values, indices = _ort(to_onnx(capture(module, (x,), frontend="export").model), x)
    expected = torch.sort(x, dim=-1, descending=descending, stable=True)
    np.testing.assert_array_equal(indices, expected.indices.numpy())
    np.testing.assert_array_equal(values, expected.values.numpy())  # NaN equals NaN here


@pytest.mark.parametrize("k,largest", [(3, True), (3, False), (8, True), (1, False)])
def test_topk_with_nan_equals_the_ir(k: int, largest: bool) -> None:
    module = FnModule(lambda t: torch.topk(t, k, dim=-1, largest=largest))
    model = capture(module, (X,), frontend="export").model
    got = _ort(to_onnx(model), X)
    reference = run_model(model, {model.graph.inputs[0].name: X.numpy()})
    for a, b in zip(got, reference, strict=True):
        np.testing.assert_array_equal(a, b)
    # the values are torch's (only the order of tied indices is unspecified there)
    np.testing.assert_array_equal(got[0], torch.topk(X, k, dim=-1, largest=largest).values)
