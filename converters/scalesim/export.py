"""Write a model as SCALE-Sim inputs: a convolution topology CSV, a GEMM (M, N, K)
topology CSV, a .cfg derived from a hardware target, and a layer map back to the IR.

Conventions (docs/simulators.md has the full text):

- SCALE-Sim has no padding: IFMAP Height/Width are the zero-padded input rows/columns
  that some window reads, (P - 1) * stride + R, so SCALE-Sim's output size equals the
  model's (padding rows no window reaches are dropped).
- One CSV row is one SCALE-Sim layer run once; summing SCALE-Sim's cycles gives the model.
  A batch of N images gives N rows (`_img{i}`); SCALE-Sim's conv topology has no batch.
- Depthwise convs (one input channel per group) are named `..._DP`, which SCALE-Sim splits
  into one layer per channel; Num Filter is the depth multiplier. Other grouped convs get
  one row per group (`_g{j}`).
- Convs SCALE-Sim cannot express (dilation > 1, unequal strides, 3-D, transposed) go to
  the GEMM CSV in their im2col form, as do matmul, gemm, linear and attention (two
  products). Batched products with a per-batch right operand give one row per batch entry.
- Layer names never contain `DP` unless depthwise (SCALE-Sim matches the substring).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

from irbridge.analysis.binding import model_compute_dtype
from irbridge.analysis.hardware import Target, resolve_target
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
from irbridge.sanitize import clean, markdown

CONV_HEADER = ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
               "Num Filter, Strides,")
GEMM_HEADER = "Layer, M, N, K,"
LAYOUT_HEADER = "Layer name, IFMAP Height Intraline Factor,"

WORD_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class ArrayPreset:
    """The systolic array that stands for one target kind, and why."""

    rows: int
    cols: int
    dataflow: str
    why: str


ARRAYS: dict[str, ArrayPreset] = {
    "tpu": ArrayPreset(128, 128, "ws", "one 128x128 MXU (Google Cloud TPU system architecture "
                       "docs: TPU v2-v5e MXUs are 128x128), weight stationary as the MXU is"),
    "npu": ArrayPreset(64, 64, "ws", "an Edge-TPU-class 64x64 weight-stationary array "
                       "(4 TOPS int8 / 2 / ~0.5 GHz ~ 4096 MACs per cycle)"),
    "gpu": ArrayPreset(32, 32, "os", "one SM's tensor cores as a 32x32 array (A100: 1,024 "
                       "dense fp16 MACs per SM per clock); output stationary, as tensor-core "
                       "GEMMs keep the accumulator tile in registers"),
    "soc": ArrayPreset(32, 32, "os", "as gpu: an embedded GPU SM's tensor cores, 32x32, "
                       "output stationary"),
    "cpu": ArrayPreset(16, 16, "os", "a 16x16 matrix tile (Intel AMX TMUL-sized), output "
                       "stationary"),
}
"""Array geometry by target kind: the catalog has no systolic-array figures. Time and
bandwidth are then scaled so the array delivers the whole chip's dense peak (see
`derive_config`), so only fill, drain and tiling effects depend on this choice."""


@dataclass(frozen=True)
class SimConfig:
    """What goes into the .cfg, with the figures it was derived from."""

    target: Target
    dtype: str
    array: ArrayPreset
    clock_hz: float
    bandwidth_words: int
    sram_kwords: tuple[int, int, int]
    sram_source: str

    @property
    def word_bytes(self) -> int:
        return WORD_BYTES[self.dtype]


def derive_config(target: Target, dtype: str) -> SimConfig:
    """The array of the target's kind, clocked so that rows * cols MACs per cycle equal the
    target's dense peak for `dtype` (the whole chip as one array); interface bandwidth in
    words per such cycle from the target's memory bandwidth, which keeps the roofline ridge
    point; SRAM = the largest chip-wide on-chip memory, split 2:2:1 (ifmap, filter, ofmap)
    as SCALE-Sim's defaults are."""
    array = ARRAYS[target.kind]
    clock = target.peak(dtype) / (2 * array.rows * array.cols)
    word = WORD_BYTES[dtype]
    bandwidth = max(1, round(target.bandwidth / clock / word))
    chip_wide = {k: f for k, f in target.on_chip.items() if "per_" not in k}
    if chip_wide:
        key = max(chip_wide, key=lambda k: chip_wide[k].value)
        words = chip_wide[key].value / word
        kwords = max(3, int(words // 1024))
        sram = (kwords * 2 // 5, kwords * 2 // 5, kwords - 2 * (kwords * 2 // 5))
        source = f"on_chip {key} ({chip_wide[key].given:g} {chip_wide[key].unit})"
    else:
        sram = (256, 256, 128)
        source = "SCALE-Sim's defaults (the catalog gives no chip-wide on-chip memory)"
    return SimConfig(target, dtype, array, clock, bandwidth, sram, source)


def _pick_dtype(model: Model, target: Target, dtype: str | None) -> str:
    if dtype is not None:
        if not target.has_peak(dtype):
            raise IrbridgeError(f"target {target.name!r} has no {dtype!r} peak; it has "
                                f"{', '.join(target.peaks)}")
        return dtype
    own = model_compute_dtype(model)
    for choice in (own, "bf16", *target.peaks):
        if target.has_peak(choice):
            return choice
    raise IrbridgeError(f"target {target.name!r} has no peaks")  # parse_target forbids it


@dataclass(frozen=True)
class Row:
    """One SCALE-Sim layer: its CSV fields and where it came from."""

    file: str  # "conv" or "gemm"
    name: str
    fields: tuple[int, ...]
    layer: Layer
    part: str
    macs: int


def _sim_name(name: str, depthwise: bool = False) -> str:
    """SCALE-Sim treats any name containing 'DP' as depthwise."""
    clean = name.replace("DP", "Dp")
    return f"{clean}_DP" if depthwise else clean


def _conv_rows(layer: ConvLayer) -> list[Row] | None:
    if layer.dilation_h != 1 or layer.dilation_w != 1 or layer.stride_h != layer.stride_w:
        return None
    rows = []
    images = range(layer.batch)
    per_image = layer.macs // layer.batch
    for i in images:
        suffix = f"_img{i}" if layer.batch > 1 else ""
        geometry = (layer.covered_h, layer.covered_w, layer.kernel_h, layer.kernel_w)
        if layer.groups == 1 or layer.depthwise:
            name = _sim_name(layer.name + suffix, layer.depthwise)
            fields = (*geometry, layer.in_channels, layer.filters_per_group, layer.stride_h)
            part = "depthwise" if layer.depthwise else "conv"
            rows.append(Row("conv", name, fields, layer, part + suffix.replace("_", " "),
                            per_image))
            continue
        for g in range(layer.groups):
            name = _sim_name(f"{layer.name}{suffix}_g{g}")
            fields = (*geometry, layer.channels_per_group, layer.filters_per_group,
                      layer.stride_h)
            rows.append(Row("conv", name, fields, layer,
                            f"group {g} of {layer.groups}{suffix.replace('_', ' ')}",
                            per_image // layer.groups))
    return rows


def _gemm_rows(layer: GemmLayer) -> list[Row]:
    rows = []
    for i in range(layer.count):
        name = _sim_name(layer.name if layer.count == 1 else f"{layer.name}_{i}")
        part = layer.note or "gemm"
        if layer.count > 1:
            part += f" ({i + 1} of {layer.count})"
        rows.append(Row("gemm", name, (layer.m, layer.n, layer.k), layer, part,
                        layer.m * layer.n * layer.k))
    return rows


def rows_of(layers: list[Layer]) -> list[Row]:
    """SCALE-Sim rows for the layers; unique names."""
    rows: list[Row] = []
    for layer in layers:
        if isinstance(layer, ConvLayer):
            conv = _conv_rows(layer)
            if conv is not None:
                rows.extend(conv)
                continue
            why = ("dilated conv" if layer.dilation_h != 1 or layer.dilation_w != 1
                   else "conv with unequal strides")
            rows.extend(_gemm_rows(layer.as_gemm(f"{why} as its im2col GEMM")))
        else:
            rows.extend(_gemm_rows(layer))
    seen: dict[str, int] = {}
    unique = []
    for row in rows:
        count = seen.get(row.name, 0)
        seen[row.name] = count + 1
        if count:
            row = Row(row.file, f"{row.name}_{count}", row.fields, row.layer, row.part, row.macs)
        unique.append(row)
    return unique


def _cfg_text(run_name: str, cfg: SimConfig, offsets: tuple[int, int, int]) -> str:
    t, a = cfg.target, cfg.array
    ifmap, filt, ofmap = cfg.sram_kwords
    bw = cfg.bandwidth_words
    return f"""\
# SCALE-Sim config for {t.name} ({t.title}), written by irbridge.
# Array: {a.rows}x{a.cols} {a.dataflow} = {a.why}.
# Whole chip as this one array: clock {cfg.clock_hz / 1e9:.4g} GHz = {cfg.dtype} dense peak
#   {t.peak(cfg.dtype) / 1e12:.4g} TFLOPS / (2 x {a.rows * a.cols} MACs); seconds = cycles / clock.
# Bandwidth {bw} words/cycle = memory bandwidth {t.bandwidth / 1e9:.4g} GB/s / clock /
#   {cfg.word_bytes} B per {cfg.dtype} word (keeps the target's ridge point).
# SRAM (SCALE-Sim counts 1 byte per word, so sizes are kilo-words of {cfg.dtype}):
#   {cfg.sram_source}, split 2:2:1.
[general]
run_name = {run_name}

[architecture_presets]
ArrayHeight = {a.rows}
ArrayWidth = {a.cols}
IfmapSramSzkB = {ifmap}
FilterSramSzkB = {filt}
OfmapSramSzkB = {ofmap}
IfmapOffset = {offsets[0]}
FilterOffset = {offsets[1]}
OfmapOffset = {offsets[2]}
Bandwidth = {bw}
Dataflow = {a.dataflow}
MemoryBanks = 1
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = {bw}
IfmapSRAMBankNum = 1
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = {bw}
FilterSRAMBankNum = 1
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = USER
UseRamulatorTrace = False
"""


def _offsets(rows: list[Row]) -> tuple[int, int, int]:
    """Address bases far enough apart that no layer's operands overlap."""
    def operand_sizes(row: Row) -> tuple[int, int]:
        if row.file == "gemm":
            m, n, k = row.fields
            return m * k, k * n
        h, w, r, s, c, f, _ = row.fields
        return h * w * c, r * s * c * f

    ifmap = max(operand_sizes(r)[0] for r in rows)
    filt = max(operand_sizes(r)[1] for r in rows)
    step = 10 ** len(str(max(ifmap, filt)))
    return 0, step, 2 * step


def _csv(header: str, rows: list[Row]) -> str:
    lines = [header] + [", ".join([r.name, *map(str, r.fields)]) + "," for r in rows]
    return "\n".join(lines) + "\n"


def write(model: Model, path: str | os.PathLike[str], *, hardware: str = "h100-sxm",
          dtype: str | None = None, symbols: dict[str, int] | None = None) -> Path:
    """Write the SCALE-Sim folder `path` (atomically): `{model}_conv.csv`,
    `{model}_gemm.csv` (each only when it has rows), `{model}_layout.csv`, `{model}.cfg`,
    `layers.csv` (row -> IR node) and README.md. Returns `path`."""
    target = resolve_target(hardware)
    with static_shapes(model, symbols) as bound_symbols:
        layers = extract_layers(model)
    chosen = _pick_dtype(model, target, dtype)
    cfg = derive_config(target, chosen)
    rows = rows_of(layers)
    stem = safe_name(model.name or "model")
    conv = [r for r in rows if r.file == "conv"]
    gemm = [r for r in rows if r.file == "gemm"]
    files = {"conv": f"{stem}_conv.csv", "gemm": f"{stem}_gemm.csv"}
    out = Path(path)
    try:
        with atomic_dir(out) as tmp:
            if conv:
                (tmp / files["conv"]).write_text(_csv(CONV_HEADER, conv), encoding="utf-8")
            if gemm:
                (tmp / files["gemm"]).write_text(_csv(GEMM_HEADER, gemm), encoding="utf-8")
            (tmp / f"{stem}_layout.csv").write_text(LAYOUT_HEADER + "\n", encoding="utf-8")
            (tmp / f"{stem}.cfg").write_text(_cfg_text(f"{stem}_{target.name}", cfg,
                                                       _offsets(rows)), encoding="utf-8")
            (tmp / "layers.csv").write_text(_layer_map(rows, files), encoding="utf-8")
            (tmp / "run.json").write_text(json.dumps({
                "model": model.name or stem, "target": target.name, "dtype": chosen,
                "clock_hz": cfg.clock_hz, "config": f"{stem}.cfg"}, indent=1) + "\n",
                encoding="utf-8")
            (tmp / "README.md").write_text(
                _readme(model, stem, cfg, rows, layers, files, bound_symbols), encoding="utf-8")
    except OSError as exc:
        raise IrbridgeError(f"{out}: cannot write the folder ({exc.strerror or exc})") from None
    return out


def _layer_map(rows: list[Row], files: dict[str, str]) -> str:
    """CSV, quoted where a field needs it; module paths come from the model file, so they
    are cleaned to one line (a newline in a name would start a forged row)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["row", "file", "node", "op", "module_path", "part", "macs"])
    for r in rows:
        writer.writerow([r.name, files[r.file], r.layer.node_id, r.layer.op,
                         clean(r.layer.module_path).replace(",", "_"), r.part.replace(",", ";"),
                         r.macs])
    return out.getvalue()


def _readme(model: Model, stem: str, cfg: SimConfig, rows: list[Row], layers: list[Layer],
            files: dict[str, str], symbols: dict[str, int]) -> str:
    macs = sum(layer.macs for layer in layers)
    bound = ", ".join(f"{markdown(k)}={v}" for k, v in symbols.items()) or \
        "none (static shapes)"
    return f"""\
# SCALE-Sim inputs for {markdown(model.name or stem)}

Written by `irbridge export --to scalesim` for target {cfg.target.name} ({cfg.dtype}).
{len(layers)} layers ({len(rows)} SCALE-Sim rows), {macs:,} MACs.
Symbols bound: {bound}.

Run SCALE-Sim (the installed scalesim 3.x) on this folder and print per-layer and total
cycles and seconds:

    irbridge simulate scalesim .

From Python: `irbridge.converters.scalesim.run(".", "results")`. (scalesim 3.0.0's own
command line, `python -m scalesim.scale -c {stem}.cfg -t <topology> -l {stem}_layout.csv`,
stops under numpy >= 2.4 with "only 0-dimensional arrays can be converted to Python
scalars"; both ways above give its memory modules a numpy-2-safe `max` while it runs.)

Seconds on the target ~ total cycles / {cfg.clock_hz:.6g} Hz (the whole chip as one
{cfg.array.rows}x{cfg.array.cols} array, see {stem}.cfg). `layers.csv` maps every row back to
its IR node. Conventions: IFMAP sizes are the zero-padded input rows the windows cover,
(P - 1) * stride + R; `_DP` rows are depthwise (SCALE-Sim runs one layer per channel);
`_g<j>` rows are groups of a grouped conv; `_img<i>` rows are the images of a batch;
dilated or unequal-stride convs and all matmul-like ops are in the GEMM file.
"""
