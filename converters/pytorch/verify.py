"""Numeric verification: run the captured IR through the numpy reference executor and
compare every output with the eager PyTorch model.

Tolerances are scale-aware: an output passes when

    max |ir - torch| <= atol + rtol * max |torch|

per dtype (`TOLERANCES`). Why these numbers: the reference executor and torch compute the
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from irbridge.dtypes import DType
from irbridge.executor import run_graph, run_graphs

from ._util import tensor_leaves, tensor_to_numpy

if TYPE_CHECKING:
    from . import CaptureResult

TOLERANCES: dict[DType, tuple[float, float]] = {
    # dtype: (atol, rtol of the output's largest magnitude)
    DType.FLOAT64: (1e-9, 1e-7),
    DType.FLOAT32: (1e-5, 1e-4),
    DType.FLOAT16: (1e-3, 1e-2),
    DType.BFLOAT16: (1e-2, 5e-2),
}
EXACT = (0.0, 0.0)


@dataclass
class OutputCheck:
    index: int  # position among the tensors of the eager output
    name: str  # IR value name ("" when the output was not captured)
    dtype: str
    shape: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float  # max |ir - torch| / max |torch|
    atol: float
    rtol: float
    passed: bool
    note: str = ""


@dataclass
class VerifyReport:
    outputs: list[OutputCheck] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.outputs) and all(o.passed for o in self.outputs)

    @property
    def max_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=float("nan"))

    @property
    def max_rel_error(self) -> float:
        return max((o.max_rel_error for o in self.outputs), default=float("nan"))

    def summary(self) -> str:
        if self.error:
            return f"FAIL: {self.error}"
        state = "PASS" if self.passed else "FAIL"
        return (f"{state}: {len(self.outputs)} outputs, max abs error "
                f"{self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}")


def verify(result: CaptureResult, eager_module: torch.nn.Module, *,
           tolerances: Mapping[DType, tuple[float, float]] | None = None) -> VerifyReport:
    """Compare the IR's outputs with `eager_module(*result.args, **result.kwargs)`."""
    from irbridge.errors import IrbridgeError

    table = dict(TOLERANCES)
    table.update(tolerances or {})
    report = VerifyReport()
    start = time.perf_counter()
    from .capture import keep_buffers

    with torch.no_grad(), keep_buffers(eager_module):
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


def _compare(index: int, name: str, got: np.ndarray, ref: np.ndarray, dtype: DType,
             atol: float, rtol: float) -> OutputCheck:
    shape = tuple(ref.shape)
    if tuple(got.shape) != shape:
        return OutputCheck(index, name, dtype.short, shape, float("inf"), float("inf"), atol,
                           rtol, False, f"shape {list(got.shape)} != torch {list(shape)}")
    if ref.size == 0:
        return OutputCheck(index, name, dtype.short, shape, 0.0, 0.0, atol, rtol, True)
    a = np.asarray(got).astype(np.float64)
    b = np.asarray(ref).astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, np.abs(a - b))
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    diff = np.where(same_inf, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    max_abs = float(diff.max())
    finite = np.abs(b[np.isfinite(b)])
    scale = float(finite.max()) if finite.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    passed = max_abs <= atol + rtol * scale
    return OutputCheck(index, name, dtype.short, shape, max_abs, max_rel, atol, rtol, passed)


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

        with torch.no_grad(), keep_buffers(capture.root):
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
