"""grouped_matmul (MoE experts) written by the ONNX exporter and run by onnxruntime, and by
the StableHLO exporter and run by the reference interpreter, through its registry
decomposition (row group = number of offs <= row, clamped; gathered weights; batched
matmul; rows past offs[-1] zeroed), against transformers' grouped_mm_fallback in eager
torch, with empty groups and rows past offs[-1], in both weight layouts."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)
from shlotools import single_op

from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo.evaluate import evaluate
from irbridge.converters.stablehlo.export import build_module


@pytest.mark.parametrize("transpose_w", [False, True])
@pytest.mark.parametrize("offs", [[0, 3, 3, 7, 9], [2, 2, 5, 11, 11], [0, 0, 0, 0, 0]])
def test_grouped_matmul_exports_match_torch(transpose_w: bool, offs: list[int]) -> None:
    rng = np.random.default_rng(sum(offs))
    x = rng.standard_normal((11, 8)).astype(np.float32)
    w = rng.standard_normal((5, 8, 6)).astype(np.float32)
    offsets = np.array(offs, np.int32)
    stored = np.ascontiguousarray(np.swapaxes(w, 1, 2)) if transpose_w else w
    model, feeds = single_op("grouped_matmul", [x, stored, offsets],
                             {"transpose_w": transpose_w})
    want = torch.ops.transformers.grouped_mm_fallback(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(offsets)).numpy()
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    got = {"onnxruntime": session.run(None, dict(zip(names, feeds, strict=True)))[0],
           "stablehlo": evaluate(build_module(model), feeds)[0]}
    for backend, y in got.items():
        assert y.dtype == np.float32 and y.shape == (11, 6), backend
        # float32 sums of 8 products in another order: 1e-5
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5, err_msg=backend)
        assert not np.asarray(y)[offs[-1]:].any(), f"{backend}: rows past offs[-1] not zero"
