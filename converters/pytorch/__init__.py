"""PyTorch front-ends: capture an `nn.Module` with torch.fx, TorchDynamo or torch.export
and lower it into the irbridge IR.

    result = capture(model, (x,), frontend="auto")
    report = verify(result, model)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from irbridge.errors import CaptureError, IrbridgeError
from irbridge.ir import Model

from .capture import (
    Capture,
    DynamicSpec,
    capture_mode,
    one_line,
    run_capture,
    warm_up,
)
from .lower import LoweringStats, lower_capture
from .verify import VerifyReport, verify

FRONTENDS = ("auto", "fx", "export", "dynamo")

AUTO_ORDER = ("fx", "export", "dynamo")
"""Order `auto` tries. Measured here (CPU, see facts.md section 2 and the test logs):
fx symbolic tracing is the fastest by far when it works (resnet18 0.02 s) but fails on
data-dependent Python (YOLO, Hugging Face models); torch.export is next (0.2-3 s) and
gives one whole graph with module paths; Dynamo is slowest (several seconds) but never
fails outright, splitting the model at graph breaks instead."""


@dataclass
class CaptureResult:
    model: Model
    method: str
    attempts: list[tuple[str, str]]  # (method, "ok" or the one-line reason it failed)
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    capture: Capture | None = None
    stats: LoweringStats = field(default_factory=LoweringStats)
    seconds: float = 0.0

    @property
    def opaque_count(self) -> int:
        return sum(1 for _, n in self.model.all_nodes() if n.is_opaque)

    @property
    def outputs(self) -> list[tuple[int, int] | None]:
        """Per tensor leaf of the eager output: (graph index, graph output position)."""
        return self.capture.outputs if self.capture is not None else []

    @property
    def inputs(self) -> dict[str, torch.Tensor]:
        """IR input name -> example tensor."""
        return self.capture.inputs if self.capture is not None else {}


def capture(model: torch.nn.Module, args: tuple[Any, ...] | Any, kwargs: Mapping[str, Any]
            | None = None, *, frontend: str = "auto", weights: bool = True,
            dynamic: DynamicSpec | None = None, decompose: bool = False, strict: bool = False,
            warmup: bool | None = None) -> CaptureResult:
    """Capture `model(*args, **kwargs)` into an irbridge Model.

    frontend: auto | fx | export | dynamo. A warm-up forward pass runs first (unless
    warmup=False or the model is on the meta device) so lazily initialised state exists;
    buffers it changes are restored. `auto` then tries `AUTO_ORDER` and keeps the first
    method that captures and lowers with no opaque node (else the one with the fewest). weights=False (or a model on the meta device)
    gives shape-only tensors. dynamic={"batch": (1, 64)} makes dim 0 of every input
    symbolic (export and dynamo). decompose=True lowers torch.export graphs from core ATen.
    """
    if not isinstance(args, tuple):
        args = (args,)
    kwargs = dict(kwargs or {})
    if frontend not in FRONTENDS:
        raise CaptureError(f"unknown PyTorch front-end {frontend!r}; choose one of "
                           f"{', '.join(FRONTENDS)}")
    on_meta = _on_meta(model)
    if warmup is None:
        # Every front-end warms up by default: export and dynamo fail on lazily built
        # state (YOLO's anchors) as surely as auto would. Meta-device models cannot run
        # eagerly (no data for .item() and friends) and are not warmed up.
        warmup = not on_meta
    if warmup:
        try:
            warm_up(model, args, kwargs)
        except Exception as exc:
            raise CaptureError(f"the model's own forward pass failed on the example inputs: "
                               f"{one_line(exc)}; check the inputs") from exc
    if frontend == "auto":
        methods = [m for m in AUTO_ORDER if not (dynamic and m == "fx")]
    else:
        methods = [frontend]
    attempts: list[tuple[str, str]] = []
    best: CaptureResult | None = None
    for method in methods:
        start = time.perf_counter()
        try:
            with capture_mode():
                cap = run_capture(method, model, args, kwargs, dynamic=dynamic,
                                  decompose=decompose, strict=strict)
            ir, stats = lower_capture(cap, weights=weights)
            if cap.real_values:  # fx kept every activation for lowering: free them now
                for cg in cap.graphs:
                    for node in cg.gm.graph.nodes:
                        node.meta.pop("val", None)
                cap.real_values = False
        except Exception as exc:  # every failure is reported per method
            attempts.append((method, one_line(exc)))
            continue
        result = CaptureResult(ir, method, [], args, kwargs, cap, stats,
                               time.perf_counter() - start)
        opaque = result.opaque_count
        notes = [f"{opaque} opaque nodes"] if opaque else []
        if "dynamo.uncaptured_inputs" in cap.metadata or "dynamo.uncaptured_outputs" in \
                cap.metadata:
            notes.append("incomplete: Dynamo ran part of forward as Python outside its graphs")
        attempts.append((method, "ok" if not notes else "ok, " + "; ".join(notes)))
        if best is None or opaque < best.opaque_count:
            best = result
        if opaque == 0:
            break
    if best is None:
        reasons = "; ".join(f"{m}: {r}" for m, r in attempts)
        hint = ("try another frontend=" if frontend != "auto" else
                "check the example inputs, or capture a submodule")
        raise CaptureError(f"could not capture {type(model).__name__} ({reasons}); {hint}")
    best.attempts = attempts
    _record_metadata(best, frontend, dynamic, decompose)
    return best


def _on_meta(model: torch.nn.Module) -> bool:
    return any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))


def _record_metadata(result: CaptureResult, frontend: str, dynamic: DynamicSpec | None,
                     decompose: bool) -> None:
    meta = result.model.metadata
    meta["capture.frontend"] = frontend
    meta["capture.method"] = result.method
    meta["capture.attempts"] = "; ".join(f"{m}: {r}" for m, r in result.attempts)
    meta["capture.seconds"] = f"{result.seconds:.3f}"
    meta["torch.version"] = torch.__version__
    meta["capture.weights"] = str(not result.model.is_shape_only)
    if dynamic:
        meta["capture.dynamic"] = ", ".join(f"{k}={v}" for k, v in dynamic.items())
    if result.method == "export":
        meta["capture.decompose"] = str(decompose)
    if result.capture is not None:
        meta.update(result.capture.metadata)
    stats = result.stats
    if stats.retraced:
        meta["lowering.retraced"] = ", ".join(f"{k} x{v}" for k, v in
                                              sorted(stats.retraced.items()))
    if stats.opaque:
        meta["lowering.opaque"] = ", ".join(f"{k} x{v}" for k, v in sorted(stats.opaque.items()))
    if stats.type_mismatches:
        meta["lowering.type_mismatches"] = str(len(stats.type_mismatches))


__all__ = ["AUTO_ORDER", "FRONTENDS", "CaptureError", "CaptureResult", "IrbridgeError",
           "VerifyReport", "capture", "verify"]
