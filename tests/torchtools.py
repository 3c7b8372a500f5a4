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


def backend_outputs(result: Any, args: tuple[torch.Tensor, ...]) -> dict[str, list[Any]]:
    """A capture's outputs on `args` in the IR executor, in onnxruntime (the ONNX export)
    and in the StableHLO reference interpreter (the StableHLO export), by back-end."""
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.onnx.verify import run_session
    from irbridge.converters.stablehlo import build_module, evaluate
    from irbridge.executor import run_graphs

    inputs = result.model.graphs[0].inputs
    feeds = {v.name: t.numpy() for v, t in zip(inputs, args, strict=True)}
    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return {"executor": run_graphs(result.model, feeds)[-1],
            "onnxruntime": run_session(session, feeds),  # bfloat16 outputs too
            "stablehlo": evaluate(build_module(result.model).artifact(),
                                  [feeds[v.name] for v in inputs])}


def assert_outputs_match(backend: str, got: list[Any], want: Any, result: Any,
                         rtol: float = 0.0, atol: float = 0.0) -> None:
    """Each eager output against the capture's output it maps to: same dtype and shape,
    floats within rtol/atol (0: exact), everything else exact."""
    import numpy as np

    from irbridge.converters.pytorch._util import tensor_to_numpy
    from irbridge.dtypes import DType

    for index, expected in enumerate(want):
        where = result.outputs[index]
        assert where is not None
        actual, wanted = np.asarray(got[where[1]]), tensor_to_numpy(expected)  # bf16 too
        assert actual.dtype == wanted.dtype and actual.shape == wanted.shape, \
            f"{backend} output {index}: {actual.dtype}{actual.shape}, eager " \
            f"{wanted.dtype}{wanted.shape}"
        if DType.from_numpy(wanted.dtype).is_float and (rtol or atol):
            np.testing.assert_allclose(actual.astype(np.float64), wanted.astype(np.float64),
                                       rtol=rtol, atol=atol,
                                       err_msg=f"{backend} output {index}")
        else:
            np.testing.assert_array_equal(actual, wanted, err_msg=f"{backend} output {index}")


def assert_backends_match_eager(module: torch.nn.Module, result: Any,
                                args: tuple[torch.Tensor, ...], rtol: float = 0.0,
                                atol: float = 0.0) -> None:
    """The capture `result` of `module`, run on `args` in every back-end
    (`backend_outputs`), against eager `module(*args)` (`assert_outputs_match`)."""
    with torch.no_grad():
        want = module(*args)
    for backend, got in backend_outputs(result, args).items():
        assert_outputs_match(backend, got, want, result, rtol, atol)


def capture_neutral(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> Any:
    """`capture(frontend="export")` of `module`, asserted to leave no opaque node."""
    from irbridge.converters.pytorch import capture

    result = capture(module, args, frontend="export")
    assert result.opaque_count == 0, result.stats.notes
    return result


def assert_matches_eager_everywhere(module: torch.nn.Module,
                                    inputs: Callable[[bool], tuple[torch.Tensor, ...]],
                                    rtol: float = 0.0, atol: float = 0.0) -> None:
    """Capture `module` on `inputs(False)` (no opaque node), then run the capture in every
    back-end on that example and on the perturbed `inputs(True)` against eager."""
    result = capture_neutral(module, inputs(False))
    for perturb in (False, True):
        assert_backends_match_eager(module, result, inputs(perturb), rtol, atol)
