"""`irbridge sweep`: a design-space grid (models x targets x batch x sequence x phase x dtype
x TP), analysed cell by cell on this machine or on Ray (see `irbridge/sweep.py`).

    irbridge sweep --models llama-3-8b,mistral-7b --hardware all --batch 1,8,64 \\
        --seq-len 128,2048 --phase decode --dtype bf16,fp8 -o results.parquet
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from irbridge.cli.render import console
from irbridge.errors import IrbridgeError


def sweep(
    models: Annotated[str, typer.Option(
        "--models", help="Zoo model names or model files, comma-separated.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="Result set (.parquet); CSV, JSON, Markdown and plots are "
                               "written beside it. An existing one is resumed.")],
    hardware: Annotated[str, typer.Option(
        "--hardware", "-H", help="Targets, comma-separated, or `all` (the catalog).")
    ] = "h100-sxm",
    batch: Annotated[str, typer.Option(help="Batch sizes, e.g. 1,8,64.")] = "1",
    seq_len: Annotated[str, typer.Option(
        "--seq-len", help="Sequence lengths (prompt and KV-cache length for phases).")
    ] = "128",
    phase: Annotated[str, typer.Option(
        help="none (the forward pass), prefill, decode; comma-separated.")] = "none",
    dtype: Annotated[str, typer.Option(help="Compute dtypes, e.g. bf16,fp8.")] = "bf16",
    tp: Annotated[str, typer.Option(
        "--tp", help="Tensor-parallel ways for prefill/decode cells, e.g. 1,2,4,8.")] = "1",
    engine: Annotated[str, typer.Option(help="local (processes here) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(
        help="--engine ray: the cluster's HOST:PORT (default: a local cluster).")] = None,
    jobs: Annotated[int, typer.Option(help="Worker processes (local, or a local Ray "
                                           "cluster's CPUs).")] = 2,
) -> None:
    """Analyse every cell of a grid; one capture per (model, phase, batch, seq-len)."""
    from irbridge import sweep as sw

    sw.check_run_options(engine, jobs, address)
    if output.suffix != ".parquet":
        raise IrbridgeError(f"-o {output}: the result set is a .parquet file")
    grid = sw.parse_grid(models=models, hardware=hardware, batch=batch, seq_len=seq_len,
                         phase=phase, dtype=dtype, tp=tp)
    if grid.size > 1_000_000:
        raise IrbridgeError(f"the grid has {grid.size:,} cells; at most 1,000,000")
    open_line = [False]  # a progress line without its newline yet
    announced = [False]

    def progress(done: int, total: int) -> None:
        if not announced[0]:  # first call: the options and a result set to resume are read
            captures = len(grid.groups())
            print(f"sweep: {_count(grid.size, 'cell')} in {_count(captures, 'capture')}, "
                  f"engine {engine}", file=sys.stderr, flush=True)
            announced[0] = True
        print(f"\r  {done:,}/{total:,} cells", end="" if done < total else "\n",
              file=sys.stderr, flush=True)
        open_line[0] = done < total

    try:
        rows = sw.run(grid, output, engine=engine, jobs=jobs, address=address,
                      progress=progress)
    finally:
        if open_line[0]:  # an error's line starts on its own line
            print(file=sys.stderr, flush=True)
    written = sw.write_reports(output, rows)
    keys = grid.keys()
    mine = [r for r in rows if sw.row_key(r) in keys]
    ok = sum(r["status"] == "ok" for r in mine)
    kept = len(rows) - len(mine)  # a result set keeps the cells of earlier grids
    earlier = f"; {_count(kept, 'cell')} of earlier grids kept in it" if kept else ""
    console.print(f"{ok:,} of {len(mine):,} cells analysed; wrote {output}{earlier}, "
                  f"{', '.join(p.name for p in written)}", markup=False)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def register(app: typer.Typer) -> None:
    app.command()(sweep)
