"""Numeric verification: run the captured IR through the numpy reference executor and
compare every output with the eager PyTorch model.

Tolerances are scale-aware: an output passes when

    max |ir - torch| <= atol + rtol * max |torch|

per dtype (`TOLERANCES`, in irbridge/tolerance.py, shared with the ONNX verifier). Why
these numbers: the reference executor and torch compute the
same float32 math with different kernels (numpy/BLAS matmuls and a direct convolution
versus oneDNN/MKL with blocked, Winograd or FFT-like summation orders, fused
multiply-adds, and softmax/erf implementations of their own). Each changes rounding: a
length-K dot product may differ by about sqrt(K) * eps * sum|terms| (eps = 1.2e-7 for
float32), and the differences compound through depth. Measured here on the target
models (resnet18, mobilenet_v2, efficientnet_b0, vit_b_16, bert-base, gpt2, yolov8n,
detr-resnet-50; every front-end), outputs agree to 2e-7 .. 5e-6 of their output scale;
rtol = 1e-4 leaves a 20x margin while still catching any real lowering mistake (a wrong
axis, pad or epsilon shows up at 1e-2 or more). atol covers outputs that are nearly all
zeros. Half precisions get the same reasoning with
their own eps (f16 9.8e-4, bf16 7.8e-3); integers and booleans must match exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from irbridge.dtypes import DType
from irbridge.executor import run_graph, run_graphs
from irbridge.tolerance import EXACT, TOLERANCES, OutputCheck, VerifyReport
from irbridge.tolerance import compare_output as _compare

from ._util import ieee_float32, tensor_leaves, tensor_to_numpy, unwrapped

if TYPE_CHECKING:
    from . import CaptureResult

__all__ = ["EXACT", "TOLERANCES", "OutputCheck", "VerifyReport", "first_divergence", "verify"]


def verify(result: CaptureResult, eager_module: torch.nn.Module, *,
           tolerances: Mapping[DType, tuple[float, float]] | None = None) -> VerifyReport:
    """Compare the IR's outputs with `eager_module(*result.args, **result.kwargs)`."""
    from irbridge.errors import IrbridgeError

    eager_module = unwrapped(eager_module)  # eager, not inductor's nor a replica's
    table = dict(TOLERANCES)
    table.update(tolerances or {})
    report = VerifyReport()
    start = time.perf_counter()
    from .capture import keep_buffers

    with torch.no_grad(), keep_buffers(eager_module, (result.args, result.kwargs)), \
            ieee_float32():
        expected = tensor_leaves(eager_module(*result.args, **result.kwargs))
    feeds = {name: tensor_to_numpy(t) for name, t in result.inputs.items()}
    try:
        actual = run_graphs(result.model, feeds)
    except IrbridgeError as exc:
        report.error = f"the reference executor failed: {exc}"
        report.seconds = time.perf_counter() - start
        return report
    mapping = result.outputs
    for index, ref in enumerate(expected):
        where = mapping[index] if index < len(mapping) else None
        ref_np = tensor_to_numpy(ref)
        dtype = DType.from_numpy(ref_np.dtype)
        atol, rtol = table.get(dtype, EXACT)
        if where is None:
            report.outputs.append(OutputCheck(index, "", dtype.short, tuple(ref_np.shape),
                                              float("inf"), float("inf"), atol, rtol, False,
                                              "not produced by any captured graph"))
            continue
        graph_index, position = where
        got = actual[graph_index][position]
        name = result.model.graphs[graph_index].outputs[position].name
        report.outputs.append(_compare(index, name, got, ref_np, dtype, atol, rtol))
    report.seconds = time.perf_counter() - start
    return report


def describe(report: VerifyReport) -> list[dict[str, Any]]:
    return [o.__dict__ for o in report.outputs]


@dataclass
class Divergence:
    graph: int
    node: str  # fx node name
    source_op: str
    value: str  # IR value name
    max_abs_error: float
    max_rel_error: float


def first_divergence(result: CaptureResult, *, rtol: float = 1e-3) -> Divergence | None:
    """Localise a numeric mismatch: re-run every captured fx graph eagerly on the example
    values, run the IR with a hook, and return the first fx node whose IR value differs
    by more than `rtol` of its magnitude (None when all agree)."""
    capture = result.capture
    if capture is None:
        return None
    seen: dict[str, np.ndarray] = {}

    def hook(node: Any, arrays: list[np.ndarray]) -> None:
        for value, array in zip(node.outputs, arrays, strict=True):
            seen[value.name] = array

    feeds = {name: tensor_to_numpy(t) for name, t in capture.inputs.items()}
    results: list[list[np.ndarray]] = []
    for index, graph in enumerate(result.model.graphs):
        graph_feeds: dict[str, np.ndarray] = {}
        for value in graph.inputs:
            link = next((lk for lk in result.model.links
                         if lk.to_graph == index and lk.to_input == value.name), None)
            if link is not None:
                producer = result.model.graphs[link.from_graph]
                position = [v.name for v in producer.outputs].index(link.from_output)
                graph_feeds[value.name] = results[link.from_graph][position]
            elif value.name in feeds:
                graph_feeds[value.name] = feeds[value.name]
        for name, array in graph_feeds.items():
            seen[name] = array
        results.append(run_graph(graph, graph_feeds, on_node=hook))
        cg = capture.graphs[index]
        recorder = _Recorder(cg.gm)
        from .capture import keep_buffers

        with torch.no_grad(), keep_buffers(capture.root, [s.value for s in cg.slots]), \
                ieee_float32():
            recorder.run(*[s.value for s in cg.slots])
        values = recorder.values
        for node in cg.gm.graph.nodes:
            names = result.stats.node_values.get((index, node.name), [])
            tensors = tensor_leaves(values.get(node.name))
            for name, ref in zip(names, tensors, strict=False):
                if name not in seen or tuple(ref.shape) != seen[name].shape:
                    continue
                b = tensor_to_numpy(ref).astype(np.float64)
                a = seen[name].astype(np.float64)
                if b.size == 0:
                    continue
                err = float(np.nanmax(np.abs(a - b)))
                scale = float(np.nanmax(np.abs(b))) or 1.0
                if err > rtol * scale + 1e-6:
                    return Divergence(index, node.name, str(node.target), name, err, err / scale)
    return None


class _Recorder(torch.fx.Interpreter):
    """Runs an fx graph eagerly and keeps a copy of every node's result: a later in-place
    op (`relu_`, `nn.ReLU(inplace=True)`, `add_`) would otherwise change the values kept
    for the nodes before it."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n.name] = pytree.tree_map_only(torch.Tensor,
                                                   lambda t: t.detach().clone(), out)
        return out
