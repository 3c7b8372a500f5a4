"""Chakra execution traces (MLCommons; read by ASTRA-sim) from the IR and its analysis.

    from irbridge.converters import chakra
    chakra.write(model, Path("traces"), hardware="h100-sxm", devices=2)
    # traces/{model}.0.et, traces/{model}.1.et

One compute node per fused kernel with FLOPs (`num_ops`, `tensor_size`, the roofline
latency as `duration_micros`), data dependencies from the IR's dataflow; with `devices` > 1
a pipeline split balanced by latency and send/recv pairs for the tensors that cross a cut.
The schema is vendored in schemas/chakra/et_def.proto; docs/simulators.md describes every
field. Only this package imports the generated bindings (`_proto`).
"""

from __future__ import annotations

from pathlib import Path

from irbridge.analysis import resolve_target
from irbridge.converters.chakra.parallel import Layout, layout
from irbridge.converters.chakra.plan import ComputeNode, Plan, Transfer, plan, split_balanced
from irbridge.converters.chakra.writer import (
    CHAKRA_VERSION,
    duration_micros,
    layout_files,
    write_files,
    write_plan,
)
from irbridge.errors import IrbridgeError
from irbridge.ir import Model


def write(model: Model, path: Path, *, hardware: str = "h100-sxm", devices: int = 1,
          dtype: str | None = None, dp: int | None = None, pp: int | None = None,
          tp: int | None = None, microbatches: int | None = None,
          zero: int | None = None) -> Path:
    """Write one trace per rank into the folder `path`, `{model}.{rank}.et`, atomically.
    Everything is checked and encoded before anything is written.

    Without `dp`/`pp`/`tp`/`microbatches`/`zero`: the inference forward pass split into
    `devices` pipeline stages. With any of them: one training step of a DP x PP job
    (converters/chakra/parallel.py)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise IrbridgeError(f"{path}: exists and is not a folder; chakra writes a folder "
                            "of traces")
    training = any(v is not None for v in (dp, pp, tp, microbatches, zero))
    if training and devices != 1:
        raise IrbridgeError("--devices (an inference pipeline) cannot be combined with "
                            "--dp/--tp/--pp/--microbatches/--zero (a training step); use --pp")
    if training and "train.loss" in model.metadata:
        raise IrbridgeError(f"{model.name or path}: already one training step (`convert "
                            "--train`: forward, backward, optimizer); --dp/--tp/--pp/"
                            "--microbatches/--zero build the step from a forward capture")
    target = resolve_target(hardware)
    laid_out = plan(model, target, devices=devices, dtype=dtype,
                    source=model.name or str(path))
    if training:
        lay = layout(laid_out, dp=1 if dp is None else dp, pp=1 if pp is None else pp,
                     tp=1 if tp is None else tp,
                     microbatches=1 if microbatches is None else microbatches,
                     zero=0 if zero is None else zero)
        return write_files(layout_files(lay), path)
    return write_plan(laid_out, path)


__all__ = ["CHAKRA_VERSION", "ComputeNode", "Layout", "Plan", "Transfer", "duration_micros", "layout", "plan",
           "split_balanced", "write"]
