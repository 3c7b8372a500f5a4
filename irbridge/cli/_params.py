"""Start-up: command-line parameters coerced without importing pydantic where none is needed.

typer (0.29+) coerces every parameter, even `--help` left unset, through a pydantic
`TypeAdapter` built on first use, and importing pydantic costs about 0.2 s of CPU: more
than a third of what `irbridge info FILE` spends in total. `lean_params` gives each
parameter of a command a coercion that needs no pydantic for the values that need no
schema: an unset value (None, as typer's own coercion returns), a bool flag's bool, and a
plain `Path` from its string (`Path(value)`, as pydantic's `Path` validator does, then
typer's own `coerce_cli_path`, which makes every check the option asks for: `exists`,
`dir_okay`, `readable`, ...). Any other value goes to typer's own coercion, built on
demand, so behaviour and error messages stay typer's. It relies on typer internals
(`_TyperParameter._runtime_param`, `RuntimeParam`, `build_runtime_param`); when they are
not there it changes nothing, and commands behave the same, only slower to start
(tests/cli/test_startup.py checks which modules `irbridge info` imports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:  # typer internals: optional, see the module docstring
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path
except ImportError:  # pragma: no cover - a typer without them: nothing to speed up
    RuntimeParam = None  # type: ignore[assignment,misc]


if RuntimeParam is not None:

    class _LeanParam(RuntimeParam):
        """No pydantic for a bool flag's bool or a plain Path; typer's coercion otherwise."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            descriptor = param.type_descriptor
            if descriptor.annotation is bool and isinstance(value, bool):
                return value
            if (descriptor.annotation is Path and isinstance(value, str)
                    and descriptor.file_annotation is None
                    and getattr(self.parameter_info, "parser", None) is None):
                return coerce_cli_path(Path(value), self.parameter_info, path_type=Path,
                                       param=param, ctx=ctx)
            param._runtime_param = build_runtime_param(descriptor)  # typer's own, kept
            return param._runtime_param._coerce_value(value, param=param, ctx=ctx)


def lean_params(command: Any, ctx: Any) -> None:
    """Give `command`'s parameters, `--help` included, the coercion above (those whose
    coercion typer has not built yet)."""
    if RuntimeParam is None or command is None:
        return
    try:
        params = command.get_params(ctx)
    except Exception:
        return
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", True) is not None:
            continue
        param._runtime_param = _LeanParam(parameter_info=descriptor.parameter_info,
                                          annotation=descriptor.annotation)
