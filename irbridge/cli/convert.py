"""`irbridge convert` and `irbridge models`: capture a model into an IR file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from irbridge.cli.render import console


def convert(
    model: Annotated[str, typer.Argument(help="A zoo name (see `irbridge models`), "
                                              "path/to/file.py:Name or package.module:factory.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="IR file to write.")] = None,
) -> None:
    """Convert a model into an irbridge IR file and print its summary."""
    console.print(f"convert {model} -> {output}: front-ends not wired yet")
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command()(convert)
