"""Write a model as Timeloop v0.4 problem files: one self-contained YAML per convolution
or GEMM layer (instance plus the full `shape`: dimensions, coefficients, data spaces with
projections), and `index.yaml` listing layer -> file.

Conventions (docs/simulators.md): Timeloop's conv2D names R, P (and Wstride, Wdilation)
along the width and S, Q (Hstride, Hdilation) along the height; padding is implicit in
Timeloop (the input extent follows from P, Q, strides and dilations), so pads and the
unpadded input size are recorded in the index and the file's header comment. Grouped
convs (depthwise included) use the grouped shape `grouped_conv2D` with a G dimension
and C, M per group. GEMMs use `gemm_ABZ` (A[M,K] x B[N,K] -> Z[M,N]); independent
products of one node (batched matmul, attention heads) add a G dimension.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from irbridge.analysis.hardware import resolve_target
from irbridge.atomic import atomic_dir
from irbridge.converters._layers import (
    ConvLayer,
    GemmLayer,
    Layer,
    extract_layers,
    safe_name,
    static_shapes,
)
from irbridge.errors import IrbridgeError
from irbridge.ir import Model
from irbridge.sanitize import clean

VERSION = "0.4"

_COEFFICIENTS = [{"name": n, "default": 1} for n in ("Wstride", "Hstride", "Wdilation",
                                                      "Hdilation")]


class _Dumper(yaml.SafeDumper):
    """No anchors or aliases: every file reads on its own, by any YAML reader."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def conv_shape(grouped: bool) -> dict[str, Any]:
    """Timeloop's conv2D problem shape (optionally with a group dim G)."""
    g = [["G"]] if grouped else []
    return {
        "name": "grouped_conv2D" if grouped else "conv2D",
        "dimensions": (["G"] if grouped else []) + ["C", "M", "R", "S", "N", "P", "Q"],
        "coefficients": [dict(c) for c in _COEFFICIENTS],
        "data_spaces": [
            {"name": "Weights", "projection": [*([g] if grouped else []), [["C"]], [["M"]],
                                               [["R"]], [["S"]]]},
            {"name": "Inputs", "projection": [[["N"]], *([g] if grouped else []), [["C"]],
                                              [["R", "Wdilation"], ["P", "Wstride"]],
                                              [["S", "Hdilation"], ["Q", "Hstride"]]]},
            {"name": "Outputs", "projection": [[["N"]], *([g] if grouped else []), [["M"]],
                                               [["Q"]], [["P"]]],
             "read_write": True},
        ],
    }


def gemm_shape(batched: bool) -> dict[str, Any]:
    """A[M, K] x B[N, K] -> Z[M, N], optionally G independent products."""
    g = [[["G"]]] if batched else []
    return {
        "name": "batched_gemm_ABZ" if batched else "gemm_ABZ",
        "dimensions": (["G"] if batched else []) + ["M", "N", "K"],
        "coefficients": [],
        "data_spaces": [
            {"name": "A", "projection": [*g, [["M"]], [["K"]]]},
            {"name": "B", "projection": [*g, [["N"]], [["K"]]]},
            {"name": "Z", "projection": [*g, [["M"]], [["N"]]], "read_write": True},
        ],
    }


def problem(layer: Layer) -> dict[str, Any]:
    """The `problem:` document of one layer."""
    instance: dict[str, int]
    if isinstance(layer, ConvLayer):
        grouped = layer.groups > 1
        instance = {**({"G": layer.groups} if grouped else {}),
                    "C": layer.channels_per_group, "M": layer.filters_per_group,
                    "R": layer.kernel_w, "S": layer.kernel_h, "N": layer.batch,
                    "P": layer.out_w, "Q": layer.out_h,
                    "Wstride": layer.stride_w, "Hstride": layer.stride_h,
                    "Wdilation": layer.dilation_w, "Hdilation": layer.dilation_h}
        shape = conv_shape(grouped)
    else:
        batched = layer.count > 1
        instance = {**({"G": layer.count} if batched else {}),
                    "M": layer.m, "N": layer.n, "K": layer.k}
        shape = gemm_shape(batched)
    return {"problem": {"version": VERSION, "shape": shape, "instance": instance}}


def _record(layer: Layer, file: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": layer.name, "file": file, "node": layer.node_id,
                             "op": layer.op, "module_path": layer.module_path,
                             "kind": layer.kind, "macs": layer.macs}
    if isinstance(layer, ConvLayer):
        entry.update({"groups": layer.groups, "depthwise": layer.depthwise,
                      "input_hw": [layer.in_h, layer.in_w],
                      "pads_top_left_bottom_right": [layer.pad_top, layer.pad_left,
                                                     layer.pad_bottom, layer.pad_right]})
    elif isinstance(layer, GemmLayer) and layer.note:
        entry["note"] = layer.note
    return entry


def _header(model: Model, layer: Layer) -> str:
    # names from the model file, cleaned to one line: a newline would end the comment
    lines = [f"# Timeloop v{VERSION} problem: {clean(model.name or 'model')} layer {layer.name}",
             f"# IR node #{layer.node_id} {layer.op}"
             + (f" ({clean(layer.module_path)})" if layer.module_path else "")]
    if isinstance(layer, ConvLayer):
        lines.append(f"# input {layer.in_h}x{layer.in_w} (H x W), pads top/left/bottom/right "
                     f"{layer.pad_top}/{layer.pad_left}/{layer.pad_bottom}/{layer.pad_right}, "
                     f"groups {layer.groups}")
    elif layer.note:
        lines.append(f"# {layer.note}")
    return "\n".join(lines) + "\n"


def write(model: Model, path: str | os.PathLike[str], *, hardware: str = "h100-sxm",
          symbols: dict[str, int] | None = None) -> Path:
    """Write the folder `path` (atomically): one `NNN_<layer>.yaml` per layer and
    `index.yaml`. `hardware` is checked but does not change the problems (they describe
    the workload; architectures are Timeloop's own files). Returns `path`."""
    resolve_target(hardware)
    with static_shapes(model, symbols) as bound_symbols:
        layers = extract_layers(model)
    width = max(3, len(str(len(layers) - 1)))
    out = Path(path)
    try:
        with atomic_dir(out) as tmp:
            index = []
            for i, layer in enumerate(layers):
                file = f"{i:0{width}d}_{safe_name(layer.name)}.yaml"
                body = yaml.dump(problem(layer), Dumper=_Dumper, sort_keys=False,
                                 default_flow_style=None)
                (tmp / file).write_text(_header(model, layer) + body, encoding="utf-8")
                index.append(_record(layer, file))
            document = {"model": model.name or "model", "timeloop_problem_version": VERSION,
                        "symbols_bound": dict(bound_symbols), "layers": index}
            (tmp / "index.yaml").write_text(yaml.safe_dump(document, sort_keys=False),
                                            encoding="utf-8")
    except OSError as exc:
        raise IrbridgeError(f"{out}: cannot write the folder ({exc.strerror or exc})") from None
    return out
