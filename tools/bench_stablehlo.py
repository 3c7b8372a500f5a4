"""Benchmark: IR -> StableHLO (irbridge) versus torch-mlir's PyTorch -> StableHLO, in one run.

    uv run python tools/bench_stablehlo.py [--models resnet18,gpt2] [--no-torch-mlir]
                                           [--json results.json]

For each model (built offline by the zoo with random weights, default inputs; bert at
128 tokens):

1. capture: PyTorch -> IR (`capture(..., frontend="auto")`), seconds;
2. irbridge: IR -> a parsed and verified StableHLO module with the weights as constants
   (`build_module`), seconds; then the portable artifact (`.artifact()`), seconds;
3. torch-mlir: `torch_mlir.fx.export_and_import(module, *args, output_type="stablehlo")`,
   seconds, or why it failed; and whether its module is pure StableHLO (it keeps
   `arith.constant`);
4. MACs (matmul-like FLOPs / 2) of the PyTorch capture, of irbridge's StableHLO imported
   back into the IR, and of torch-mlir's StableHLO imported into the IR.

Speedup = torch-mlir seconds / irbridge IR -> StableHLO seconds (capture + export in
brackets). A markdown table is printed; timings are never asserted anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

MODELS = ["resnet18", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert-base-uncased",
          "gpt2", "yolov8n", "facebook/detr-resnet-50"]


@dataclass
class Row:
    model: str
    nodes: int = 0
    capture_s: float = float("nan")
    export_s: float = float("nan")
    artifact_s: float = float("nan")
    artifact_mb: float = float("nan")
    torch_mlir_s: float = float("nan")
    torch_mlir: str = ""
    macs_capture: int = 0
    macs_irbridge_shlo: int = 0
    macs_torch_mlir_shlo: int = 0
    error: str = ""


def _macs(model: Any) -> int:
    from irbridge.ops import registry

    return sum(registry.node_cost(n).macs for _, n in model.all_nodes() if not n.is_opaque)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:77] + "...") if len(text) > 80 else text


@contextlib.contextmanager
def _stderr_into(sink: list[str]) -> Iterator[None]:
    """Capture what native code writes to file descriptor 2 (MLIR diagnostics)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture_file:
        os.dup2(capture_file.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture_file.seek(0)
            sink.append(capture_file.read().decode("utf-8", "replace"))


def _torch_mlir_reason(exc: BaseException, diagnostics: str) -> str:
    """The op torch-mlir could not legalize, else the exception's first words."""
    match = re.search(r"failed to legalize operation '([^']+)'", diagnostics + str(exc))
    if match:
        return f"failed: cannot legalize {match[1]}"
    return "failed: " + _first_line(exc)


def bench(name: str, use_torch_mlir: bool) -> Row:
    import torch

    from irbridge.converters.pytorch import capture, zoo
    from irbridge.converters.stablehlo import build_module, from_mlir

    row = Row(name)
    built = zoo.build(name, seq_len=128 if "bert" in name else None)
    start = time.perf_counter()
    result = capture(built.module, built.args, built.kwargs)
    row.capture_s = time.perf_counter() - start
    model = result.model
    row.nodes = sum(1 for _ in model.all_nodes())
    row.macs_capture = _macs(model)
    try:
        start = time.perf_counter()
        module = build_module(model)
        row.export_s = time.perf_counter() - start
        start = time.perf_counter()
        artifact = module.artifact()
        row.artifact_s = time.perf_counter() - start
        row.artifact_mb = len(artifact) / 2**20
        row.macs_irbridge_shlo = _macs(from_mlir(artifact))
        del module, artifact
    except Exception as exc:  # reported in the table
        row.error = _first_line(exc)
    gc.collect()
    if use_torch_mlir:
        from torch_mlir import fx

        start = time.perf_counter()
        diagnostics: list[str] = []
        try:
            with warnings.catch_warnings(), torch.no_grad(), _stderr_into(diagnostics):
                warnings.simplefilter("ignore")
                out = fx.export_and_import(built.module, *built.args, **built.kwargs,
                                           output_type="stablehlo")
            row.torch_mlir_s = time.perf_counter() - start
            text = str(out)
            row.torch_mlir = "ok, has arith.constant" if "arith.constant" in text else "ok"
            del out
            try:
                row.macs_torch_mlir_shlo = _macs(from_mlir(text))
            except Exception as exc:
                row.torch_mlir += f"; import failed: {_first_line(exc)}"
            del text
        except Exception as exc:
            row.torch_mlir_s = time.perf_counter() - start
            row.torch_mlir = _torch_mlir_reason(exc, "".join(diagnostics))
        gc.collect()
    return row


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if value != value else f"{value:.{digits}f}"


def _ratio(a: int, b: int) -> str:
    return "-" if not a or not b else f"{b / a:.4f}"


def table(rows: list[Row]) -> str:
    lines = ["| model | nodes | capture s | IR->StableHLO s | artifact s (MB) | torch-mlir s | "
             "speedup | MACs (capture) | irbridge SHLO / capture | torch-mlir SHLO / capture |"
             " torch-mlir |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = "-"
        if r.export_s == r.export_s and r.torch_mlir_s == r.torch_mlir_s and \
                r.torch_mlir.startswith("ok"):
            speed = (f"{r.torch_mlir_s / r.export_s:.0f}x "
                     f"({r.torch_mlir_s / (r.export_s + r.capture_s):.1f}x)")
        lines.append(
            f"| {r.model} | {r.nodes} | {_fmt(r.capture_s)} | {_fmt(r.export_s)} | "
            f"{_fmt(r.artifact_s)} ({_fmt(r.artifact_mb, 0)}) | {_fmt(r.torch_mlir_s)} | "
            f"{speed} | {r.macs_capture:,} | {_ratio(r.macs_capture, r.macs_irbridge_shlo)} | "
            f"{_ratio(r.macs_capture, r.macs_torch_mlir_shlo)} | "
            f"{r.torch_mlir or '-'}{'; irbridge: ' + r.error if r.error else ''} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated zoo names (default: the eight benchmark models)")
    parser.add_argument("--no-torch-mlir", action="store_true", help="skip torch-mlir")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        row = bench(name, not args.no_torch_mlir)
        print(f"{name}: capture {row.capture_s:.2f}s, IR->StableHLO {row.export_s:.2f}s, "
              f"torch-mlir {row.torch_mlir_s:.2f}s ({row.torch_mlir or 'skipped'})",
              flush=True)
        rows.append(row)
    print()
    print(table(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(r) for r in rows], handle, indent=1)


if __name__ == "__main__":
    main()
