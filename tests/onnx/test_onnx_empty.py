"""Zero-size tensors and empty graphs through the ONNX exporter, into the real onnxruntime.

A node whose outputs all have a static shape with a zero-size dim computes nothing: it is
exported as an empty Constant of that shape. onnxruntime has kernels that fail on empty
operands (its FusedMatMul broadcasting a zero batch, Pad in wrap mode), so a faithful
op-for-op export of such a node gives a file that loads and then fails to run. A model
with no output at all is refused in one line (onnxruntime cannot load an empty graph).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnxtools import ort_run
from torchtools import FnModule

from irbridge.converters.onnx import to_onnx
from irbridge.converters.pytorch import capture
from irbridge.errors import ExportError

F = torch.nn.functional
CASES = {
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (3, 4, 5)), (0, 8, 8, 8, 8)),
    "pad_circular": (lambda x: F.pad(x, (1, 2), mode="circular"), (0, 3, 3)),
    "linear_zero_rows": (lambda x: x @ torch.ones(4, 5) + 1, (2, 0, 4)),
    "softmax_zero_batch": (lambda x: torch.softmax(x * 2, dim=-1), (0, 7)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_zero_size_outputs_run_in_onnxruntime(name: str) -> None:
    fn, shape = CASES[name]
    x = torch.randn(shape)
    module = FnModule(fn)
    ir = capture(module, (x,), frontend="export").model
    proto = to_onnx(ir)
    got = ort_run(proto, {proto.graph.input[0].name: x.numpy()})
    want = module(x).numpy()
    assert got[0].shape == want.shape and got[0].dtype == want.dtype
    assert {n.op_type for n in proto.graph.node} <= {"Constant"} or not proto.graph.node


def test_non_empty_outputs_are_computed_as_before() -> None:
    fn, _ = CASES["pad_circular"]
    x = torch.randn(2, 3, 3)
    ir = capture(FnModule(fn), (x,), frontend="export").model
    proto = to_onnx(ir)
    assert "Pad" in {n.op_type for n in proto.graph.node}
    got = ort_run(proto, {proto.graph.input[0].name: x.numpy()})
    np.testing.assert_array_equal(got[0], fn(x).numpy())


def test_a_model_with_no_output_is_refused_in_one_line() -> None:
    ir = capture(FnModule(lambda: torch.broadcast_shapes((2, 1), (1, 3))), (),
                 frontend="export").model
    with pytest.raises(ExportError, match="no graph has an output") as info:
        to_onnx(ir)
    assert "\n" not in str(info.value)
