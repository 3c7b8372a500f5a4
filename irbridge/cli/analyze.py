"""`irbridge analyze` and `irbridge hardware`: costs, fusion, roofline on hardware targets."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated

import typer

from irbridge import serde
from irbridge.cli.render import console
from irbridge.errors import IrbridgeError
from irbridge.formats import load_model
from irbridge.ir import Model


class Fusion(enum.StrEnum):
    unfused = "unfused"
    fused = "fused"
    both = "both"


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def resolve_model(spec: str, *, weights: bool = False) -> Model:
    """FILE_OR_MODEL -> a model: an IR file, an ONNX file, or a zoo name converted on the fly."""
    return load_model(spec, weights=weights)


def parse_batches(text: str | None) -> list[int | None]:
    if text is None:
        return [None]
    sizes: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        try:
            size = int(part)
        except ValueError:
            raise IrbridgeError(f"--batch {text!r}: expected N or a list like 1,8,32") from None
        if size < 1:
            raise IrbridgeError(f"--batch {text!r}: batch sizes must be at least 1")
        if size not in sizes:
            sizes.append(size)
    return sizes


def parse_bindings(items: list[str] | None) -> dict[str, int]:
    symbols: dict[str, int] = {}
    for item in items or []:
        for part in item.split(","):
            name, sep, size = part.partition("=")
            try:
                if not sep or not name.strip():
                    raise ValueError
                symbols[name.strip()] = int(size)
            except ValueError:
                raise IrbridgeError(f"--bind {part!r}: expected NAME=SIZE, e.g. s0=8") from None
    return symbols


def analyze(
    file_or_model: Annotated[str, typer.Argument(
        show_default=False, help="An IR, ONNX or StableHLO file, or a zoo model name (captured on the fly, shape-only).")],
    hardware: Annotated[str, typer.Option(
        "--hardware", "-H", help="Targets, comma-separated: catalog names or aliases "
                                 "(see `irbridge hardware`) or target .yaml files.")] = "h100-sxm",
    dtype: Annotated[str | None, typer.Option(
        help="Compute dtype: fp32, tf32, bf16, fp16, fp8, int8 (default: the model's). "
             "Float tensors are costed at its size.")] = None,
    batch: Annotated[str | None, typer.Option(
        help="Batch size N, or a sweep 1,8,32: binds a symbolic leading input dim, or "
             "rescales a static one and re-infers shapes.")] = None,
    bind: Annotated[list[str] | None, typer.Option(
        help="Bind a symbolic dim, NAME=SIZE (repeatable).")] = None,
    fusion: Annotated[Fusion, typer.Option(help="Partitioning strategy.")] = Fusion.fused,
    output_format: Annotated[Format, typer.Option(
        "--format", help="table, json, csv or markdown (to stdout).")] = Format.table,
    plot: Annotated[Path | None, typer.Option(
        help="Write a roofline plot: NAME.png and NAME.svg.")] = None,
    top: Annotated[int, typer.Option(help="Show the N slowest kernels.")] = 10,
    by_module: Annotated[int | None, typer.Option(
        "--by-module", metavar="DEPTH",
        help="Per-module rollup down to DEPTH levels of module paths.")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the IR annotated with costs, partitions and estimates.")
    ] = None,
) -> None:
    """Cost, fusion partitions and a roofline estimate of a model on hardware targets."""
    from irbridge.analysis import driver, report
    from irbridge.analysis.hardware import resolve_targets

    targets = resolve_targets(hardware)
    batches = parse_batches(batch)
    if output is not None and len(batches) > 1:
        raise IrbridgeError("-o writes one analysis: give a single --batch, not a sweep")
    if by_module is not None and by_module < 1:
        raise IrbridgeError(f"--by-module must be at least 1, got {by_module}")
    if top < 0:
        raise IrbridgeError(f"--top must be at least 0, got {top}")
    model = resolve_model(file_or_model, weights=output is not None)
    strategies = ("unfused", "fused") if fusion is Fusion.both else (fusion.value,)
    result = driver.analyze(model, targets, dtype=dtype, batches=batches,
                            strategies=strategies, symbols=parse_bindings(bind),
                            module_depth=by_module)
    if output_format is Format.json:
        typer.echo(json.dumps(report.to_dict(result, top), indent=1))
    elif output_format is Format.csv:
        typer.echo(report.to_csv(result), nl=False)
    elif output_format is Format.markdown:
        typer.echo(report.to_markdown(result, top))
    else:
        report.print_tables(result, console, top)
    if plot is not None:
        from irbridge.analysis.plot import roofline_plot

        run = result.runs[-1] if fusion is Fusion.both else result.runs[0]
        written = roofline_plot(run, plot, title=f"{result.name} ({result.dtype})")
        typer.echo(f"wrote {', '.join(map(str, written))}", err=True)
    if output is not None:
        run = result.runs[-1]  # fused when both strategies ran
        driver.annotate(model, run)
        serde.save(model, output)
        typer.echo(f"wrote {output} ({run.strategy}, {len(run.partitioning.partitions)} "
                   f"partitions, {len(run.mappings)} targets)", err=True)


def hardware(
    targets: Annotated[list[str] | None, typer.Argument(
        metavar="[TARGET]...", help="Show these targets (names, aliases or .yaml files) "
                                    "with every figure's source.")] = None,
    output_format: Annotated[Format, typer.Option(
        "--format", help="table, json or markdown.")] = Format.table,
) -> None:
    """List the hardware catalog: dense peaks (TFLOPS/TOPS), bandwidth, on-chip memory."""
    from rich.table import Table

    from irbridge.analysis import report
    from irbridge.analysis.hardware import catalog, resolve_targets

    chosen = resolve_targets(targets) if targets else list(catalog().values())
    if output_format is Format.json:
        typer.echo(json.dumps([report.target_dict(t) for t in chosen], indent=1))
        return
    header, rows = report.catalog_rows(chosen)
    if output_format is Format.csv:
        raise IrbridgeError("irbridge hardware: --format csv is not supported; use json")
    if output_format is Format.markdown:
        typer.echo(report._md_table(header, rows))
        return
    if targets:
        for target in chosen:
            report.print_target(target, console)
        return
    table = Table(title="hardware targets (dense peaks in TFLOPS / TOPS; ridge in FLOP/B)",
                  title_justify="left", show_edge=False)
    for column in header:
        table.add_column(column, justify="left" if column in ("target", "kind") else "right",
                         no_wrap=column == "target", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("`irbridge hardware NAME` shows every figure with its source; "
                  "`--hardware my.yaml` loads your own target.")


def register(app: typer.Typer) -> None:
    app.command()(analyze)
    app.command()(hardware)
