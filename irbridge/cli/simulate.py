"""`irbridge simulate`: run a simulator on a folder written by `irbridge export`.

    irbridge simulate astrasim DIR [--mode replay|roofline] [--backend unaware|aware]
    irbridge simulate scalesim DIR [--results DIR]
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from irbridge.atomic import check_folder_entries
from irbridge.cli.render import console  # the shared console, made on first use
from irbridge.errors import IrbridgeError

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Run a simulator on a folder written by `irbridge export`.")


def _folder(path: Path, what: str) -> Path:
    """The folder an export wrote, with nothing in it the simulator could block on."""
    if not path.is_dir():
        raise IrbridgeError(f"{path}: not a folder; pass the folder `irbridge export --to "
                            f"{what} -o DIR` wrote")
    check_folder_entries(path, f"the {what} folder", recursive=True)
    return path


def _trace_stage_ns(folder: Path, workload: str, ranks: int) -> dict[int, float]:
    """stage_latency_ns of each rank's trace metadata (its roofline compute)."""
    from irbridge.converters.chakra.predict import read_messages

    out: dict[int, float] = {}
    for rank in range(ranks):
        meta, _ = read_messages(folder / f"{workload}.{rank}.et")
        for a in meta.attr:
            if a.name == "stage_latency_ns":
                out[rank] = a.double_val
    return out


@app.command()
def astrasim(
    folder: Annotated[Path, typer.Argument(help="A folder from `irbridge export --to chakra`.")],
    mode: Annotated[str, typer.Option(help=(
        "replay: compute nodes take duration_micros; roofline: ASTRA-sim times them from "
        "num_ops and tensor_size with the target's peak and bandwidth."))] = "replay",
    backend: Annotated[str, typer.Option(help=(
        "ASTRA-sim analytical network: unaware (congestion-unaware) or aware."))] = "unaware",
) -> None:
    """Run ASTRA-sim (built once per machine, cached) on Chakra traces; per-rank times."""
    from irbridge.converters.chakra import astrasim as sim
    from irbridge.converters.chakra.predict import predict

    if mode not in ("replay", "roofline"):
        raise IrbridgeError(f"--mode {mode!r}: one of replay, roofline")
    if backend not in sim.BACKENDS:
        raise IrbridgeError(f"--backend {backend!r}: one of {', '.join(sim.BACKENDS)}")
    folder = _folder(folder, "chakra")
    manifest_path = folder / "astrasim" / "run.json"
    if not manifest_path.is_file():
        raise IrbridgeError(f"{folder}: no astrasim/run.json; write the folder with "
                            "`irbridge export MODEL --to chakra -o DIR`")
    if sim.cached_binary(backend) is None:
        console.print(f"building ASTRA-sim once (cached in {sim.cache_root()}; about 10-15 "
                      "minutes on 2 cores)...", markup=False)
    result = sim.run(folder, mode=mode, backend=backend)
    manifest = json.loads(manifest_path.read_text())
    ranks = int(manifest.get("ranks", len(result.cycles)))
    compute = _trace_stage_ns(folder, str(manifest["workload"]), ranks)
    predicted = predict(folder, mode, backend)
    from rich.table import Table  # lazy: keeps rich out of start-up

    table = Table(title=f"ASTRA-sim ({backend}, {mode}) on {folder}", title_justify="left",
                  show_edge=False)
    for column in ("rank", "ASTRA-sim ns", "exposed comm", "irbridge ns", "ratio",
                   "compute ns"):
        table.add_column(column, justify="right")
    for rank in range(ranks):
        cycles = result.cycles.get(rank)
        if cycles is None:
            raise IrbridgeError(f"{folder}: ASTRA-sim printed no time for rank {rank}")
        pred = predicted[rank]
        table.add_row(str(rank), f"{cycles:,}", f"{result.exposed_comm.get(rank, 0):,}",
                      f"{pred:,.0f}", f"{cycles / pred:.5f}" if pred else "-",
                      f"{compute[rank]:,.0f}" if rank in compute else "-")
    console.print(table)
    step = max(result.cycles[r] for r in range(ranks))
    want = max(predicted[r] for r in range(ranks))
    console.print(f"step time (slowest rank): ASTRA-sim {step / 1e3:,.2f} us, irbridge "
                  f"{want / 1e3:,.2f} us ({step / want - 1:+.3%})", markup=False)
    console.print("(ns = cycles; irbridge: the two-stream schedule of "
                  "irbridge.converters.chakra.predict; compute: the rank's roofline compute)",
                  markup=False)
    if ranks == 1:
        console.print("one rank: ASTRA-sim ran it as 2 NPUs with an idle rank 1 "
                      "(astrasim/one-rank/)", markup=False)


@app.command()
def scalesim(
    folder: Annotated[Path, typer.Argument(help="A folder from `irbridge export --to scalesim`.")],
    results: Annotated[Path | None, typer.Option(help=(
        "Keep SCALE-Sim's reports here (default: a temporary folder)."))] = None,
) -> None:
    """Run SCALE-Sim on an exported folder; per-layer and total cycles and seconds."""
    from irbridge.converters.scalesim import run as run_scalesim

    folder = _folder(folder, "scalesim")
    info_path = folder / "run.json"
    if not info_path.is_file():
        raise IrbridgeError(f"{folder}: no run.json; write the folder with `irbridge export "
                            "MODEL --to scalesim -o DIR`")
    try:
        info = json.loads(info_path.read_text())
        clock = float(info["clock_hz"])
    except (ValueError, KeyError, TypeError) as err:
        raise IrbridgeError(f"{info_path}: no valid clock_hz ({err})") from None
    if not clock > 0:
        raise IrbridgeError(f"{info_path}: clock_hz must be positive, not {clock}")
    if results is not None:
        rows = run_scalesim(folder, results)
    else:
        with tempfile.TemporaryDirectory(prefix="irbridge-scalesim-") as scratch:
            rows = run_scalesim(folder, scratch)
    from rich.table import Table  # lazy: keeps rich out of start-up

    table = Table(title=f"SCALE-Sim on {folder} ({info.get('target')}, {info.get('dtype')}, "
                        f"clock {clock / 1e9:.4g} GHz)", title_justify="left", show_edge=False)
    for column, justify in (("layer", "left"), ("file", "left"), ("cycles", "right"),
                            ("stall cycles", "right"), ("seconds", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(row.name, row.topology, f"{row.total_cycles:,}", f"{row.stall_cycles:,}",
                      f"{row.total_cycles / clock:.4g}")
    console.print(table)
    total = sum(r.total_cycles for r in rows)
    console.print(f"total: {len(rows)} layers, {total:,} cycles, {total / clock:.6g} s "
                  f"at {clock:.6g} Hz", markup=False)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="simulate")
