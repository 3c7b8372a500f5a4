"""Run the real SCALE-Sim (package `scalesim`, 3.x) on a folder written by `write` and read
back the cycles of every topology row.

scalesim 3.0.0 calls `int(max(column))` on numpy column arrays, which numpy >= 2.4 rejects
("only 0-dimensional arrays can be converted to Python scalars"). While it runs, the
`max` its two memory modules see reduces a numpy column to its largest element, which is
what that code means; nothing else in SCALE-Sim is changed.
"""

from __future__ import annotations

import builtins
import contextlib
import csv
import gc
import importlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from irbridge.errors import IrbridgeError

_PATCHED_MODULES = ("scalesim.memory.read_buffer", "scalesim.memory.double_buffered_scratchpad_mem")


def _column_max(*args: Any, **kwargs: Any) -> Any:
    """builtins.max, except that numpy arrays reduce to one scalar element."""
    import numpy as np

    if kwargs or not args:
        return builtins.max(*args, **kwargs)
    items = args[0] if len(args) == 1 else args
    if isinstance(items, np.ndarray):
        return items.max()
    if isinstance(items, list | tuple) and items and all(
            isinstance(a, np.ndarray) for a in items):
        return builtins.max(a.max() for a in items)
    return builtins.max(*args)


@contextlib.contextmanager
def numpy2_compat() -> Iterator[None]:
    """Give scalesim's memory modules a numpy-2-safe `max` for the block."""
    modules = [importlib.import_module(name) for name in _PATCHED_MODULES]
    try:
        for module in modules:
            setattr(module, "max", _column_max)  # noqa: B010  (a module global)
        yield
    finally:
        for module in modules:
            if "max" in vars(module):
                delattr(module, "max")


@dataclass(frozen=True)
class RowCycles:
    """SCALE-Sim's result for one topology row (depthwise rows sum their channels)."""

    name: str
    topology: str
    total_cycles: int
    stall_cycles: int
    sim_layers: int


def _topology_rows(path: Path) -> list[tuple[str, int]]:
    """(name, SCALE-Sim layers it becomes): a `DP` row runs once per channel."""
    rows = []
    with path.open(encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        for fields in reader:
            if not fields:
                continue
            name = fields[0].strip()
            layers = int(fields[5]) if "DP" in name and len(header) > 7 else 1
            rows.append((name, layers))
    return rows


def run(folder: str | os.PathLike[str], results: str | os.PathLike[str]) -> list[RowCycles]:
    """Run SCALE-Sim on every topology in `folder` (conv, then GEMM) with its .cfg,
    reports under `results`; cycles per topology row, in file order."""
    from scalesim.scale_sim import scalesim

    folder, results = Path(folder), Path(results)
    configs = sorted(folder.glob("*.cfg"))
    layouts = sorted(folder.glob("*_layout.csv"))
    if len(configs) != 1 or len(layouts) != 1:
        raise IrbridgeError(f"{folder}: expected one .cfg and one _layout.csv from "
                            "`irbridge export --to scalesim`")
    out: list[RowCycles] = []
    for kind, gemm in (("conv", False), ("gemm", True)):
        topologies = sorted(folder.glob(f"*_{kind}.csv"))
        if not topologies:
            continue
        top = results / kind
        top.mkdir(parents=True, exist_ok=True)
        with numpy2_compat(), warnings.catch_warnings():
            # SCALE-Sim leaves the topology and layout files open: its leak, not a
            # warning for the user (collected here, while it is ignored)
            warnings.simplefilter("ignore", ResourceWarning)
            sim = scalesim(save_disk_space=True, verbose=False, config=str(configs[0]),
                           topology=str(topologies[0]), layout=str(layouts[0]),
                           input_type_gemm=gemm)
            sim.run_scale(top_path=str(top))
            del sim
            gc.collect()
        reports = list(top.glob("*/COMPUTE_REPORT.csv"))
        if len(reports) != 1:
            raise IrbridgeError(f"{top}: SCALE-Sim wrote no COMPUTE_REPORT.csv")
        with reports[0].open(encoding="utf-8") as f:
            lines = [[c.strip() for c in line] for line in csv.reader(f)][1:]
        lines = [line for line in lines if line and line[0]]
        index = 0
        for name, layers in _topology_rows(topologies[0]):
            chunk = lines[index:index + layers]
            index += layers
            if len(chunk) != layers:
                raise IrbridgeError(f"{reports[0]}: fewer layers than {topologies[0].name} has")
            out.append(RowCycles(name, topologies[0].name,
                                 sum(int(float(line[2])) for line in chunk),
                                 sum(int(float(line[3])) for line in chunk), layers))
    return out
