"""`irbridge info`, `irbridge show` and `irbridge validate`: look inside an IR file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from irbridge import serde
from irbridge.cli.render import console, print_summary
from irbridge.errors import FileFormatError, IrbridgeError
from irbridge.formats import (
    IR_SUFFIXES,
    ONNX_SUFFIXES,
    STABLEHLO_SUFFIXES,
    bound_dims,
    read_file,
)
from irbridge.ir import Graph, Model, Node
from irbridge.ops import registry
from irbridge.sanitize import clean
from irbridge.summary import human_bytes, human_count, summarize
from irbridge.verify import verify

FileArg = Annotated[Path, typer.Argument(
    help="An irbridge file (.irb or .irbt), or an ONNX or StableHLO file (imported first).")]
BindOpt = Annotated[list[str] | None, typer.Option(
    help="Bind a symbolic dim, NAME=SIZE (repeatable): an ONNX file's input dims before its "
         "shapes are inferred, a shape-polymorphic StableHLO program's before its shapes "
         "are refined (which it needs to be read at all), an IR file's value types.")]


@contextlib.contextmanager
def _opened(file: Path, bind: list[str] | None, *, weights: bool = True) -> Iterator[Model]:
    """`_read`, with `--bind` applied for the duration of the command."""
    dims: dict[str, int] = {}
    if bind:
        from irbridge.cli.analyze import parse_bindings

        dims = parse_bindings(bind)
    model = _read(file, weights=weights, dims=dims)
    with bound_dims(model, str(file), dims):
        yield model


def _read(file: Path, *, weights: bool = True, dims: dict[str, int] | None = None) -> Model:
    """An IR file as stored; a file of another format imported (`irbridge convert` reads
    it the same way). Only the IR path is on the start-up budget: the importers are
    imported when a file needs them."""
    if file.suffix in ONNX_SUFFIXES + STABLEHLO_SUFFIXES:
        return read_file(file, weights=weights, dims=dims or None)
    try:
        return serde.load(file, weights=weights)
    except FileFormatError as exc:  # a model to capture (.pt, .pt2, .py, ...) or another file
        if file.suffix not in IR_SUFFIXES and exc.hint is None:
            exc.hint = ("this command reads irbridge, ONNX and StableHLO files; capture a "
                        f"PyTorch model first: irbridge convert {file} -o model.irb")
        raise


def info(file: FileArg, bind: BindOpt = None) -> None:
    """Graphs, nodes, op histogram, parameters, source and IR version of a file."""
    with _opened(file, bind, weights=False) as model:
        print_summary(summarize(model), title=str(file))  # print_summary cleans


def show(
    file: FileArg,
    graph: Annotated[int, typer.Option(help="Index of the graph to show.")] = 0,
    node_range: Annotated[str | None, typer.Option(
        "--range", help="Positions START:END in topological order, e.g. 10:20.")] = None,
    around: Annotated[str | None, typer.Option(
        help="A node id, output value name or module path; shows its neighbourhood.")] = None,
    radius: Annotated[int, typer.Option(help="Dataflow hops shown around --around.")] = 2,
    max_nodes: Annotated[int, typer.Option("--max", help="Show at most this many nodes.")] = 50,
    bind: BindOpt = None,
) -> None:
    """A text graph explorer: nodes with shapes, provenance and cost."""
    with _opened(file, bind, weights=False) as model:
        _show(file, model, graph, node_range, around, radius, max_nodes)


def _show(file: Path, model: Model, graph: int, node_range: str | None, around: str | None,
          radius: int, max_nodes: int) -> None:
    from rich.table import Table  # lazy: keeps rich out of start-up

    if not 0 <= graph < len(model.graphs):
        raise IrbridgeError(f"{file}: no graph {graph}; the model has {len(model.graphs)}")
    g = model.graphs[graph]
    nodes = _select(g, node_range, around, radius)
    table = Table(show_edge=False, title=clean(f"{file} graph {graph} ({g.name}): "
                  f"{len(nodes)} of {len(g.nodes)} nodes"), title_justify="left")
    for column in ("id", "op", "inputs", "outputs", "module", "source op", "FLOPs", "bytes"):
        table.add_column(column, justify="right" if column in ("id", "FLOPs", "bytes") else "left")
    for node in nodes[:max_nodes]:
        flops, traffic = _cost_cells(node)
        table.add_row(*map(clean, (
            str(node.id), node.qualified_op,
            ", ".join("-" if v is None else v.name for v in node.inputs),
            ", ".join(f"{v.name}: {v.type or '?'}" for v in node.outputs),
            node.provenance.module_path, node.provenance.source_op, flops, traffic)))
    console.print(table)
    if len(nodes) > max_nodes:
        console.print(f"... {len(nodes) - max_nodes} more nodes (raise --max)")


def validate(file: FileArg, bind: BindOpt = None) -> None:
    """Check the structural rules of a file; exit 1 if there is an error."""
    with _opened(file, bind) as model:
        problems = verify(model)
    for problem in problems:
        typer.echo(clean(str(problem)))
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = len(problems) - errors
    typer.echo(f"{clean(str(file))}: {errors} errors, {warnings} warnings")
    if errors:
        raise typer.Exit(1)


def _select(g: Graph, node_range: str | None, around: str | None, radius: int) -> list[Node]:
    if node_range and around:
        raise IrbridgeError("--range and --around cannot be combined")
    if node_range:
        start_text, sep, end_text = node_range.partition(":")
        try:
            start = int(start_text) if start_text else 0
            end = int(end_text) if end_text else len(g.nodes)
        except ValueError:
            raise IrbridgeError(f"--range {node_range!r}: expected START:END, e.g. 10:20") from None
        if not sep:
            end = start + 1
        return g.nodes[start:end]
    if around:
        center = _find(g, around)
        keep = {id(center)}
        frontier = [center]
        for _ in range(radius):
            nxt = []
            for node in frontier:
                near = [v.producer for v in node.inputs if v is not None and v.producer]
                near += [user for out in node.outputs for user, _ in out.uses]
                for other in near:
                    if other is not None and id(other) not in keep:
                        keep.add(id(other))
                        nxt.append(other)
            frontier = nxt
        return [n for n in g.nodes if id(n) in keep]
    return list(g.nodes)


def _find(g: Graph, key: str) -> Node:
    for node in g.nodes:
        if str(node.id) == key or any(v.name == key for v in node.outputs):
            return node
    for node in g.nodes:
        if node.provenance.module_path == key:
            return node
    raise IrbridgeError(f"no node with id, output or module path {key!r} in graph {g.name!r}")


def _cost_cells(node: Node) -> tuple[str, str]:
    try:
        cost = registry.node_cost(node)
    except IrbridgeError:
        return "?", "?"
    return human_count(cost.flops), human_bytes(cost.bytes_read + cost.bytes_written)




def register(app: typer.Typer) -> None:
    app.command()(info)
    app.command()(show)
    app.command()(validate)
