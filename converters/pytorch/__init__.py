"""PyTorch front-ends: capture an `nn.Module` with torch.fx, TorchDynamo or torch.export
and lower it into the irbridge IR.

    result = capture(model, (x,), frontend="auto")
    report = verify(result, model)
"""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from irbridge.errors import CaptureError, IrbridgeError
from irbridge.ir import Model

from ._util import sparse_problem, torchscript_problem, unwrapped
from .capture import (
    FX_LEAF_CLASSES,
    Capture,
    DynamicSpec,
    ModuleState,
    ambient_autocast,
    capture_mode,
    has_lazy_parameters,
    keep_buffers,
    keep_global_modes,
    one_line,
    run_capture,
    warm_up,
)
from .lower import LoweringStats, lower_capture
from .repeat import MIN_BLOCKS, NotRepeated, capture_repeated, find_blocks
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
            warmup: bool | None = None, copy_weights: bool = False,
            repeat_blocks: bool = False) -> CaptureResult:
    """Capture `model(*args, **kwargs)` into an irbridge Model.

    frontend: auto | fx | export | dynamo. `auto` tries `AUTO_ORDER` and keeps the first
    method that captures and lowers completely with no opaque node (else the complete one
    with the fewest; an incomplete Dynamo capture, which ran part of forward as Python
    outside its graphs, only when nothing else captured).

    warmup: an eager forward pass (buffers it changes are restored) so that lazily
    initialised state exists before tracing. True: always; False: never; None (default):
    only when needed, i.e. the model has uninitialised `nn.Lazy*` parameters, or a capture
    attempt reassigned model attributes (lazily built state such as YOLO's anchors: the
    attempt's changes are undone and the method runs again after the warm-up), or every
    method failed without one. Models on the meta device are never warmed up. The reason
    is recorded in `model.metadata["capture.warmup"]` ("no" when none ran).

    The model is left as it was found, whether capture succeeds or fails: what the
    attempts and the warm-up changed (attributes, flags, forward hooks and pre-hooks,
    torch's global module hooks, buffers, children) is undone. The one exception is an
    `nn.Lazy*` module the warm-up initialised: it keeps its inferred parameters.

    weights=False (or a model on the meta device) gives shape-only tensors. With weights,
    the IR shares the memory of the model's CPU parameters (read-only numpy views, no
    copy): in-place changes to them after capture show in the IR; copy_weights=True
    copies instead (see `_util.make_tensor`). dynamic={"batch": (1, 64)} makes dim 0 of
    every input symbolic (export and dynamo). decompose=True lowers torch.export graphs
    from core ATen. frontend="fx" turns submodules symbolic tracing cannot follow into
    leaves (see `capture._trace_with_leaves`); auto's fx attempt does not.

    repeat_blocks=True: a shape-only capture of a deep stack of alike layers traces the
    model with the stack cut to 2 and 3 layers and writes the rest as copies of the last,
    when the two traces show one layer repeated (see `repeat`); else it traces the whole
    model. `model.metadata["capture.repeated_blocks"]` says which happened.
    """
    if not isinstance(args, tuple):
        args = (args,)
    kwargs = dict(kwargs or {})
    if frontend not in FRONTENDS:
        raise CaptureError(f"unknown PyTorch front-end {frontend!r}; choose one of "
                           f"{', '.join(FRONTENDS)}")
    model = unwrapped(model)
    problem = torchscript_problem(model) or sparse_problem(model, (args, kwargs))
    if problem is not None:
        raise CaptureError(problem)
    on_meta = _on_meta(model)
    # warm-up policy: True always, False never, None (default) only when needed: the model
    # has lazy (uninitialised) parameters, or a capture attempt ran code that builds state
    # lazily (it reassigned model attributes; every attempt's reassignments are undone),
    # or every method failed without one (the warm-up then either explains the failure or
    # lets a retry succeed). Meta-device models cannot run eagerly and are never warmed up.
    adaptive = warmup is None and not on_meta
    # Capture leaves the model as it found it: attributes, flags, hooks (the model's and
    # torch's global ones), parameters, buffers, children; whatever the attempts and the
    # warm-up did is undone when capture() returns, successful or not.
    entry_state = ModuleState(model)
    try:
        with keep_global_modes(), keep_buffers(model, (args, kwargs)):
            return _capture(model, args, kwargs, frontend=frontend, weights=weights,
                            dynamic=dynamic, decompose=decompose, strict=strict,
                            warmup=warmup, copy_weights=copy_weights, adaptive=adaptive,
                            repeat=repeat_blocks and (not weights or on_meta))
    finally:
        entry_state.restore()


def _incomplete(result: CaptureResult) -> bool:
    from irbridge.formats import INCOMPLETE_KEYS

    meta = result.capture.metadata if result.capture is not None else {}
    return any(key in meta for key in INCOMPLETE_KEYS)


def _rank(result: CaptureResult) -> tuple[bool, int]:
    """Order of preference among the captures auto made: complete first, then fewer
    opaque nodes."""
    return _incomplete(result), result.opaque_count


def _capture(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *,
             frontend: str, weights: bool, dynamic: DynamicSpec | None, decompose: bool,
             strict: bool, warmup: bool | None, copy_weights: bool,
             adaptive: bool, repeat: bool = False) -> CaptureResult:
    warm_reason = ""
    attempted = False

    def do_warm_up(reason: str) -> None:
        nonlocal warm_reason
        try:
            warm_up(model, args, kwargs)
        except CaptureError:   # the forward ran; its output is what cannot be captured
            raise
        except Exception as exc:
            if attempted:
                # The attempts' changes were undone, so this is the model's own forward;
                # still, say what ran before it rather than blame the inputs outright.
                raise CaptureError(
                    f"the model's forward pass failed on the example inputs after a capture "
                    f"attempt ({one_line(exc)}); if it runs eagerly on these inputs, a "
                    "capture attempt changed the model in a way irbridge could not undo "
                    "(please report it), else check the inputs") from exc
            raise CaptureError(f"the model's own forward pass failed on the example inputs: "
                               f"{one_line(exc)}; check the inputs") from exc
        warm_reason = reason

    if warmup or (adaptive and has_lazy_parameters(model)):
        do_warm_up("requested" if warmup else "lazy parameters")
    if frontend == "auto":
        methods = [m for m in AUTO_ORDER if not (dynamic and m == "fx")]
    else:
        methods = [frontend]
    attempts: list[tuple[str, str]] = []
    best: CaptureResult | None = None

    autocast = ambient_autocast(model, (args, kwargs))

    def run(method: str) -> tuple[CaptureResult | None, str]:
        # Each attempt starts from the buffers and inputs as they were on entry: a failed
        # attempt may have run the forward for real (fx's shape propagation runs the
        # traced graph), and its in-place updates (`self.n += 1`) must not become the
        # next attempt's constants.
        with keep_buffers(model, (args, kwargs)):
            return _attempt(method, model, args, kwargs, weights=weights,
                            copy_weights=copy_weights, dynamic=dynamic, decompose=decompose,
                            strict=strict, leaf_fallback=frontend == "fx", repeat=repeat)

    def attempt(method: str) -> CaptureResult | None:
        nonlocal best, attempted
        if autocast and method != "export":
            # as for a torch.autocast region inside forward: only torch.export records
            # the casts autocast makes at dispatch; fx and Dynamo would give a graph of
            # the model's own dtypes typed by autocast's example values (neither model)
            attempts.append((method, f"torch.autocast is on around the capture ({autocast})"
                                     f" and {method} does not record its casts; use "
                                     "frontend='export', or capture outside autocast"))
            return None
        attempted = True
        state = ModuleState(model)
        result, reason = run(method)
        changed = state.changed()
        if changed:
            # the forward assigned model attributes (lazily built state): what tracing
            # stored there (fx Proxies, fake tensors) is undone, so capturing leaves the
            # model as it was; unless warmed up already (or told not to), the model then
            # runs once eagerly and the method captures again
            state.restore()
            if adaptive and not warm_reason:
                do_warm_up(f"{method} attempt set {', '.join(sorted(set(changed))[:3])}")
                state = ModuleState(model)
                result, reason = run(method)
                if state.changed():
                    state.restore()
        if result is None:
            attempts.append((method, reason))
            return None
        opaque = result.opaque_count
        notes = [f"{opaque} opaque nodes"] if opaque else []
        if _incomplete(result):
            meta = result.capture.metadata if result.capture is not None else {}
            notes.append("incomplete: Dynamo ran part of forward as Python outside its graphs"
                         + (" and its graphs hold values read from the example's tensors"
                            if "dynamo.value_dependent" in meta else ""))
        attempts.append((method, "ok" if not notes else "ok, " + "; ".join(notes)))
        # a complete capture (an opaque node stands for what it could not lower) beats an
        # incomplete one, whose graphs may compute a fraction of forward (nn.Transformer
        # run as Python left Dynamo's graph computing only the mask)
        if best is None or _rank(result) < _rank(best):
            best = result
        return result

    def good(done: CaptureResult | None) -> bool:
        return done is not None and _rank(done) == (False, 0)

    for method in methods:
        if good(attempt(method)):
            break
    if best is None and adaptive and not warm_reason:
        # nothing captured without a warm-up: run the model once (a failing forward pass
        # is the clearer error) and try again
        do_warm_up("every method failed without one")
        failed = attempts
        attempts = []
        for method in methods:
            if good(attempt(method)):
                break
        if best is None:  # report each distinct failure once
            again = [(m if (m, r) in failed else f"{m} after a warm-up", r)
                     for m, r in attempts]
            attempts = failed + [a for a in again if a not in failed]
    if best is None:
        reasons = "; ".join(f"{m}: {r}" for m, r in attempts)
        hint = ("try another front-end (frontend=auto, fx, export or dynamo; CLI --frontend)"
                if frontend != "auto" else
                "check the example inputs, or capture a submodule")
        raise CaptureError(f"could not capture {type(model).__name__} ({reasons}); {hint}")
    best.model.metadata["capture.warmup"] = warm_reason or "no"
    if autocast:
        best.model.metadata["capture.autocast"] = autocast
    best.attempts = attempts
    _record_metadata(best, frontend, dynamic, decompose)
    return best


def _attempt(method: str, model: torch.nn.Module, args: tuple[Any, ...],
             kwargs: dict[str, Any], *, weights: bool, copy_weights: bool,
             dynamic: DynamicSpec | None, decompose: bool, strict: bool,
             leaf_fallback: bool = False,
             repeat: bool = False) -> tuple[CaptureResult | None, str]:
    """One capture method, capture and lowering: (result, "") or (None, why it failed).
    `repeat`: try the repeated-blocks capture first (shape-only captures only)."""
    start = time.perf_counter()

    def trace(weights: bool) -> tuple[Capture, Model, LoweringStats]:
        with capture_mode():
            cap = run_capture(method, model, args, kwargs, dynamic=dynamic,
                              decompose=decompose, strict=strict,
                              leaf_fallback=leaf_fallback)
        ir, stats = lower_capture(cap, weights=weights, copy_weights=copy_weights)
        if stats.opaque and FX_LEAF_CLASSES in cap.metadata:
            # a leaf that could neither be traced nor re-traced: fx did not capture the
            # model, and an IR with opaque holes would only fail later (verify, export)
            raise CaptureError(
                f"fx traced {cap.metadata[FX_LEAF_CLASSES]} as leaf modules but could not "
                "lower " + ", ".join(f"{k} x{v}" for k, v in sorted(stats.opaque.items())))
        if cap.real_values:  # fx kept every activation for lowering: free them now
            for cg in cap.graphs:
                for node in cg.gm.graph.nodes:
                    node.meta.pop("val", None)
            cap.real_values = False
        return cap, ir, stats

    note = ""
    blocks = find_blocks(model) if repeat else None
    if repeat and blocks is None:
        note = f"no: no ModuleList of {MIN_BLOCKS} or more alike layers"
    if blocks is not None:
        traced: list[tuple[Capture, LoweringStats]] = []

        def trace_short() -> Model:
            cap, short, short_stats = trace(False)
            traced.append((cap, short_stats))
            return short

        try:
            ir, note = capture_repeated(model, blocks, trace_short)
        except NotRepeated as exc:
            note = f"no: {exc}"
        except Exception as exc:  # a short trace failed: the whole model may still trace
            note = f"no: the model cut to 2 or 3 layers did not capture ({one_line(exc)})"
        else:
            ir.metadata["capture.repeated_blocks"] = note
            cap, stats = traced[-1]
            # the copies' opaque nodes count too (the trace saw 3 layers)
            stats.opaque = collections.Counter(n.qualified_op for _, n in ir.all_nodes()
                                               if n.is_opaque)
            return CaptureResult(ir, method, [], args, kwargs, cap, stats,
                                 time.perf_counter() - start), ""
    try:
        cap, ir, stats = trace(weights)
    except Exception as exc:  # every failure is reported per method
        return None, one_line(exc)
    if note:
        ir.metadata["capture.repeated_blocks"] = note
    return CaptureResult(ir, method, [], args, kwargs, cap, stats,
                         time.perf_counter() - start), ""


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
