"""Entry point of the `irbridge` command: the app, global options and error handling.

Exit codes: 0 success; 1 the command ran and found a problem (validation errors, a
failed --verify); 2 bad usage or bad input (unknown option, unreadable file, a model that
cannot be captured). Errors print one line, `error: ...`, with a hint where one helps;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from irbridge import __version__
from irbridge.cli._params import lean_params
from irbridge.errors import IrbridgeError

EXIT_PROBLEM = 1
EXIT_BAD_INPUT = 2


class _Group(TyperGroup):
    """Turns irbridge errors raised by any command into one line and exit code 2."""

    def invoke(self, ctx: Any) -> Any:  # typer vendors click; its Context type is private
        try:
            return super().invoke(ctx)
        except IrbridgeError as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:
            typer.echo("error: interrupted", err=True)
            raise typer.Exit(130) from None

    def parse_args(self, ctx: Any, args: list[str]) -> Any:
        lean_params(self, ctx)  # start-up: no pydantic where a value needs no schema
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        lean_params(command, ctx)
        return name, command, rest


app = typer.Typer(
    cls=_Group, name="irbridge", no_args_is_help=True, add_completion=False,
    help="Convert ML models to one neutral graph IR, analyse it, and export it.",
    pretty_exceptions_enable=False, rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"irbridge {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    ctx.obj = {"debug": debug}


def _register() -> None:
    from irbridge.cli import analyze, compare, convert, inspect, simulate

    inspect.register(app)
    convert.register(app)
    analyze.register(app)
    compare.register(app)
    simulate.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
