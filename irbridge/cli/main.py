"""Entry point of the `irbridge` command: the app, global options and error handling.

Exit codes: 0 success; 1 the command ran and found a problem (validation errors, a
failed --verify); 2 bad usage or bad input (unknown option, unreadable file, a model that
cannot be captured). Errors print one line, `error: ...`, with a hint where one helps;
`--debug` shows the traceback instead. Usage errors (an unknown option, a value that
does not parse, a missing argument) are one line too, naming the command's `--help`.

The guard in `_Group.invoke` is the one place that turns exceptions into that line:
irbridge errors print their message; OS errors (read-only folder, full disk, permission,
a folder where a file was expected ...) name the path and the problem; MemoryError and
RecursionError say what ran out; anything else is a bug and says so (`internal error`,
rerun with `--debug`). Every line is escaped to stay one line (file-provided strings can
hold newlines or terminal control characters).

Without `--debug`, torch's log records below errors are off (`TORCH_LOGS=-all`, unless
the environment sets TORCH_LOGS): the capture summary reports attempts and graph breaks.
"""

from __future__ import annotations

import os
import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from irbridge import __version__
from irbridge.cli._params import lean_params
from irbridge.errors import IrbridgeError
from irbridge.sanitize import clean, clip

EXIT_PROBLEM = 1
EXIT_BAD_INPUT = 2


LINE_HEAD, LINE_TAIL = 1500, 500
"""An error or warning line longer than their sum keeps its start (the file, the node) and
its end (the problem): a file may name a node in a megabyte."""

INTERNAL_ERROR = "internal error"
"""Marks the line of an unexpected exception: a bug, never a proper validation error
(the fuzz suite counts these as crashes)."""


def one_line(text: str) -> str:
    """`text` escaped onto one line: newlines and carriage returns become `\\n` and `\\r`, a
    tab a space, and everything `irbridge.sanitize.clean` escapes for other output (control
    characters and terminal escapes, bidi overrides and isolates, zero-width characters)
    is escaped the same way."""
    return clean(text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", " "))


def _os_error_message(exc: OSError) -> str:
    """`PATH: problem (ERRNO)`; the errno name tells scripts EROFS from ENOSPC."""
    import errno

    problem = exc.strerror or exc.__class__.__name__
    if exc.errno is not None and exc.errno in errno.errorcode:
        problem = f"{problem} ({errno.errorcode[exc.errno]})"
    paths = [p for p in (exc.filename, exc.filename2) if p is not None]
    if not paths:
        return f"{problem}" if exc.strerror else f"{problem}: {exc}"
    return f"{' -> '.join(map(str, paths))}: {problem}"


def error_line(exc: BaseException) -> str:
    """The one line (without the `error: ` prefix) printed for an exception."""
    if isinstance(exc, IrbridgeError):
        return str(exc)
    if isinstance(exc, MemoryError):
        detail = f" ({exc})" if str(exc) else ""
        return f"out of memory{detail}; the input needs more memory than this process may use"
    if isinstance(exc, RecursionError):
        return "input nested too deeply (Python recursion limit reached)"
    if isinstance(exc, OSError):
        return _os_error_message(exc)
    return (f"{INTERNAL_ERROR}: {exc.__class__.__name__}: {exc}; this is a bug in irbridge, "
            "rerun with --debug for the traceback")


def _is_cli_framework(exc: Exception) -> bool:
    """typer's and click's own exits and usage errors (their classes live in their
    packages, vendored or not): they print and exit by themselves."""
    return type(exc).__module__.split(".")[0] in ("typer", "click", "_typer")


def _usage_line(exc: Exception) -> str | None:
    """The one line for a usage error of typer's or click's (an unknown option, a value
    that does not parse, a missing argument), which they would print as a usage block;
    None for anything else (their exits included, and the help a command given no
    arguments prints)."""
    if not _is_cli_framework(exc) or not hasattr(exc, "format_message") \
            or getattr(exc, "exit_code", None) != EXIT_BAD_INPUT \
            or type(exc).__name__ == "NoArgsIsHelpError":
        return None
    ctx = getattr(exc, "ctx", None)
    where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
    return one_line(f"{exc.format_message().rstrip('.')}{where}")


class _Group(TyperGroup):
    """Turns every exception a command raises into one line: exit 2 (130 on Ctrl-C)."""

    def invoke(self, ctx: Any) -> Any:  # typer vendors click; its Context type is private
        # Warnings (an importer keeping nodes opaque, a library's notes) print as one
        # `warning: ...` line each once the command has finished; a command that fails
        # prints only its error line.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            try:
                result = super().invoke(ctx)
            except KeyboardInterrupt:
                typer.echo("error: interrupted", err=True)
                raise typer.Exit(130) from None
            except Exception as exc:
                debug = (ctx.obj or {}).get("debug")
                usage = None if debug else _usage_line(exc)
                if usage is not None:
                    typer.echo(f"error: {usage}", err=True)
                    raise typer.Exit(EXIT_BAD_INPUT) from None
                if _is_cli_framework(exc) or debug:
                    _print_warnings(caught)
                    raise
                try:
                    line = error_line(exc)
                    if isinstance(exc, (MemoryError, RecursionError)):
                        where = _input_of(ctx)  # these exceptions name nothing themselves
                        line = f"{where}: {line}" if where else line
                except Exception as inner:  # a __str__ that fails must not escape either
                    line = f"{INTERNAL_ERROR}: {exc.__class__.__name__} " \
                           f"({inner.__class__.__name__} while formatting it); rerun with " \
                           "--debug for the traceback"
                typer.echo(f"error: {clip(one_line(line), LINE_HEAD, tail=LINE_TAIL)}",
                           err=True)
                raise typer.Exit(EXIT_BAD_INPUT) from None
            _print_warnings(caught)
            return result

    def parse_args(self, ctx: Any, args: list[str]) -> Any:
        lean_params(self, ctx)  # start-up: no pydantic where a value needs no schema
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:  # the group's own options (`irbridge --bogus`)
            usage = _usage_line(exc)
            if usage is None:
                raise
            typer.echo(f"error: {usage}", err=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        lean_params(command, ctx)
        ctx.meta[_INVOKED] = (name, command, list(rest))
        return name, command, rest


_INVOKED = "irbridge.invoked"
"""`ctx.meta` key: the command the group resolved and its arguments, for `_input_of`."""


def _input_of(ctx: Any) -> str | None:
    """The first argument given to the command that failed (the file, folder or model it
    reads, whatever nesting of sub-commands leads to it), parsed again without running
    anything; None when there is none. Duck-typed: typer vendors its own click."""
    found = ctx.meta.get(_INVOKED)
    if found is None:
        return None
    name, command, args = found
    try:
        for _ in range(4):  # irbridge GROUP COMMAND at most; a bound all the same
            sub = command.make_context(name, list(args), parent=ctx, resilient_parsing=True)
            if not hasattr(command, "resolve_command"):
                break
            rest = [*getattr(sub, "_protected_args", []), *sub.args]
            if not rest:
                return None
            name, command, args = command.resolve_command(sub, rest)
            ctx = sub
        param = next((p for p in command.params
                      if getattr(p, "param_type_name", "") == "argument"), None)
        value = sub.params.get(param.name) if param is not None and param.name else None
    except Exception:  # naming the input is a courtesy: never a second failure
        return None
    return str(value) if value not in (None, "", ()) else None


def _print_warnings(caught: list[warnings.WarningMessage]) -> None:
    seen: set[str] = set()
    for w in caught:
        line = clip(one_line(str(w.message)), LINE_HEAD, tail=LINE_TAIL)
        if line not in seen:
            seen.add(line)
            typer.echo(f"warning: {line}", err=True)


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
    if not debug:
        # torch's own log records (Dynamo's graph-break advice, export's "unable to find
        # user code") repeat what the capture summary says, dozens of lines a model: only
        # its errors, unless the user set TORCH_LOGS or asked for --debug. Read by torch
        # when it is imported, which no command has done yet.
        os.environ.setdefault("TORCH_LOGS", "-all")


def _register() -> None:
    from irbridge.cli import analyze, compare, convert, inspect, simulate, sweep

    inspect.register(app)
    convert.register(app)
    analyze.register(app)
    compare.register(app)
    simulate.register(app)
    sweep.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
