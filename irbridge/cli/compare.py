"""`irbridge compare LEFT RIGHT`: how two captures of a model differ (docs/compare.md)."""

from __future__ import annotations

import contextlib
import enum
from pathlib import Path
from typing import Annotated

import typer

from irbridge.cli.analyze import parse_bindings
from irbridge.cli.render import console
from irbridge.errors import IrbridgeError
from irbridge.formats import bound_dims
from irbridge.sanitize import clean
from irbridge.summary import human_count

EXIT_PROBLEM = 1


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


def compare(
    left: Annotated[str, typer.Argument(help="IR, ONNX or StableHLO file, or a zoo model name.")],
    right: Annotated[str | None, typer.Argument(
        help="The same for the other side; default: LEFT again (a model name compared "
        "across two capture methods).")] = None,
    left_how: Annotated[str | None, typer.Option(
        "--left", help="How to bring a model name in: fx, dynamo, export, auto, onnx "
        "(torch.onnx.export(dynamo=True), imported) or stablehlo (torch-mlir); "
        "default dynamo.")] = None,
    right_how: Annotated[str | None, typer.Option(
        "--right", help="The same for RIGHT; default onnx.")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="Terminal output.")] = Format.table,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the report to a file: .html, .json or .md.")] = None,
    html_path: Annotated[Path | None, typer.Option(
        "--html", help="Also write the side-by-side HTML report here.")] = None,
    hardware: Annotated[str, typer.Option(help="Target for latency estimates.")] = "h100",
    depth: Annotated[int | None, typer.Option(
        help="Module depth of the cost table (default: the first depth with 6 modules).")
    ] = None,
    numerics: Annotated[bool, typer.Option(
        "--numerics/--no-numerics", help="Run both sides on the same inputs.")] = True,
    rtol: Annotated[float, typer.Option(help="Relative tolerance of the numeric check.")] = 1e-3,
    atol: Annotated[float, typer.Option(help="Absolute tolerance of the numeric check.")] = 1e-5,
    top: Annotated[int, typer.Option(help="Rows per table in the terminal.")] = 20,
    bind: Annotated[list[str] | None, typer.Option(
        "--bind", help="A symbolic dim of the files, NAME=SIZE (repeatable): an ONNX file's "
                       "input dims are bound before its shapes are inferred, so numbers "
                       "can be compared on a model with dynamic axes; each file binds the "
                       "names it has (a dynamic export against a static one).")] = None,
) -> None:
    """Match the nodes of two captures, compare their costs and numbers; exit 1 when
    something is flagged (a failed capture, a changed layer, a divergence ...); exit 2
    when a file cannot be read."""
    from irbridge.compare.html import write_html
    from irbridge.compare.report import compare_models, to_json, to_markdown
    from irbridge.compare.sources import load_sides

    if depth is not None and depth < 1:
        raise IrbridgeError(f"--depth must be at least 1, got {depth}")
    if rtol < 0 or atol < 0:
        raise IrbridgeError("--rtol and --atol must not be negative")
    if output is not None and output.suffix not in (".html", ".htm", ".json", ".md"):
        raise IrbridgeError(f"{output}: cannot tell the report format from suffix "
                            f"{output.suffix!r}; use .html, .json or .md")
    from irbridge.atomic import check_output

    for path in (output, html_path):  # before the report is printed, not after
        if path is not None:
            check_output(path)
    dims = parse_bindings(bind)
    sides = load_sides(left, right if right is not None else left, left_how, right_how,
                       dims=dims)
    for loaded in sides:   # a file that cannot be read is bad input, not a difference
        if loaded.how == "file" and not loaded.ok:
            raise IrbridgeError(loaded.error)
    for name in dims:  # each side binds the dims it has; a name neither has is a typo
        if all(name not in loaded.bound for loaded in sides):
            raise IrbridgeError(f"cannot bind {name!r}: no symbolic dim of "
                                f"{' or '.join(dict.fromkeys(s.spec for s in sides))} is named so")
    with contextlib.ExitStack() as stack:
        for loaded in sides:  # IR files: bound on their value types
            if loaded.model is not None:
                stack.enter_context(bound_dims(loaded.model, loaded.spec, loaded.bound))
        result = compare_models(*sides, target=hardware, depth=depth, numerics=numerics,
                                rtol=rtol, atol=atol)
    if fmt is Format.json:
        typer.echo(to_json(result))
    elif fmt is Format.markdown:
        typer.echo(to_markdown(result), nl=False)
    else:
        _print_table(result, top)
    for path in (output, html_path):
        if path is None:
            continue
        if path.suffix in (".html", ".htm") or path is html_path:
            write_html(result, path)
        else:
            text = to_json(result) + "\n" if path.suffix == ".json" else to_markdown(result)
            from irbridge.atomic import atomic_file

            with atomic_file(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {clean(str(path))}", err=True)
    if result.differences:
        raise typer.Exit(EXIT_PROBLEM)


def _print_table(result: object, top: int) -> None:
    from rich.table import Table  # lazy: keeps rich out of start-up

    from irbridge.compare.report import Comparison, _pct, _time, headline

    assert isinstance(result, Comparison)
    lines = headline(result)
    console.print(clean(lines[0]), style="bold")
    for line in lines[1:]:
        console.print(clean(line))
    matching = result.matching
    if matching is not None and matching.decompositions():
        table = Table(title="decompositions and fusions", title_justify="left", show_edge=False)
        for column in ("kind", "left -> right", "groups"):
            table.add_column(column, justify="right" if column == "groups" else "left")
        for kind, signature, count in matching.decompositions()[:top]:
            table.add_row(clean(kind), clean(signature), str(count))
        console.print(table)
    if result.costs is not None:
        costs = result.costs
        table = Table(title=clean(f"cost by module (depth {costs.depth}, {costs.target}, "
                                  f"{costs.dtype})"), title_justify="left", show_edge=False)
        for column in ("module", "mm FLOPs L", "mm FLOPs R", "delta", "other L", "other R",
                       "latency L", "latency R"):
            table.add_column(column, justify="left" if column == "module" else "right")
        rows = [*costs.rows[:top], costs.total]
        for row in rows:
            table.add_row(clean(row.module), human_count(row.left.matmul_flops),
                          human_count(row.right.matmul_flops),
                          _pct(row.left.matmul_flops, row.right.matmul_flops),
                          human_count(row.left.other_flops), human_count(row.right.other_flops),
                          _time(row.left.latency), _time(row.right.latency))
        console.print(table)
    if result.differences:
        console.print(f"differences ({len(result.differences)})", style="bold")
        for difference in result.differences[:top]:
            where = f" {difference.module}" if difference.module else ""
            group = f" [group {difference.group}]" if difference.group is not None else ""
            console.print(clean(f"  {difference.kind}{where}: {difference.message}{group}"))
        if len(result.differences) > top:
            console.print(f"  ... {len(result.differences) - top} more (see --format json)")
    else:
        console.print("differences: none")


def register(app: typer.Typer) -> None:
    app.command()(compare)
