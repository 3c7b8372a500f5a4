"""Binding a shape-polymorphic StableHLO program's dynamic dims to sizes (`--bind NAME=SIZE`).

`jax.export` with symbolic shapes (`export.symbolic_shape("b")`) writes a `@main` whose
arguments have `?` dims, computes every shape from them at run time, and checks its
assumptions with `stablehlo.custom_call @shape_assertion`, whose error messages spell the
specification: `args[0].shape = (b, 16)`. The importer needs static shapes. Given sizes for
the symbols, the arguments get concrete types and StableHLO's own shape refinement
(`stablehlo-refine-arguments`, `stablehlo-refine-shapes`) makes every type static; the
shape assertions, now on constants, are checked and dropped (a failed one is an error
quoting JAX's message).

A `?` dim gets its name from that specification (a symbol like `b`, or an expression of
symbols such as `2*b + 1`, evaluated with + - * on integers); a program that carries no
specification names its dims `arg<i>_<j>` (argument i, dim j).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch_mlir import ir, passmanager
from torch_mlir._mlir_libs import _stablehlo

from irbridge.errors import CaptureError, FileFormatError

from .._dims import check_bindings
from ._mlir import ranked_type, string_value

_SPEC = re.compile(r"args\[(\d+)\]\.shape = \(")
_TOKEN = re.compile(r"\s*(\d+|[A-Za-z_][A-Za-z0-9_]*|[-+*()])")
_passes_registered = False


def main_function(module: ir.Module) -> Any:
    """The program's entry: `@main`, else its one public function (None when neither)."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    named = [op for op in funcs if string_value(ir.StringAttr(op.attributes["sym_name"])) == "main"]
    if named:
        return named[0]
    public = [op for op in funcs if "sym_visibility" not in op.attributes
              or string_value(ir.StringAttr(op.attributes["sym_visibility"])) == "public"]
    return public[0] if len(public) == 1 else None


def _walk(op: Any) -> Any:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner
                yield from _walk(inner.operation)


def _specs(module: ir.Module) -> dict[int, list[str]]:
    """JAX's polymorphic shape specification per argument index, from the error messages
    of its shape assertions (empty when the program has none)."""
    found: dict[int, list[str]] = {}
    for func in module.body.operations:
        for op in _walk(func.operation):
            if op.operation.name != "stablehlo.custom_call" \
                    or "error_message" not in op.attributes:
                continue
            message = string_value(ir.StringAttr(op.attributes["error_message"]))
            for match in _SPEC.finditer(message):
                items, depth, current = [], 0, ""
                for char in message[match.end():]:
                    if char == ")" and depth == 0:
                        break
                    depth += char == "("
                    depth -= char == ")"
                    if char == "," and depth == 0:
                        items.append(current.strip())
                        current = ""
                    else:
                        current += char
                items.append(current.strip())
                found.setdefault(int(match[1]), items)
    return found


def symbolic_dims(module: ir.Module) -> list[tuple[int, int, str]]:
    """(argument index, dim index, name or expression) of every `?` dim of `@main`."""
    main = main_function(module)
    if main is None:
        return []
    specs = _specs(module)
    dims = []
    for index, arg in enumerate(main.regions[0].blocks[0].arguments):
        rt = ranked_type(arg.type)
        if rt is None:
            continue
        spec = specs.get(index, [])
        for j, size in enumerate(rt.shape):
            if size is None:
                name = spec[j] if j < len(spec) and spec[j] else f"arg{index}_{j}"
                dims.append((index, j, name))
    return dims


def _symbols(expression: str) -> list[str]:
    return [t for t in _TOKEN.findall(expression) if t[0].isalpha() or t[0] == "_"]


def _evaluate(expression: str, sizes: Mapping[str, int]) -> int:
    """An integer polynomial of symbols (+, -, *, parentheses), nothing else."""
    tokens = _TOKEN.findall(expression)
    if "".join(tokens) != re.sub(r"\s+", "", expression) or len(tokens) > 64:
        raise ValueError(expression)
    pos = 0

    def atom() -> int:
        nonlocal pos
        token = tokens[pos] if pos < len(tokens) else ""
        pos += 1
        if token == "(":
            value = total()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise ValueError(expression)
            pos += 1
            return value
        if token == "-":
            return -atom()
        if token.isdigit():
            return int(token)
        if token in sizes:
            return int(sizes[token])
        raise ValueError(expression)

    def product() -> int:
        nonlocal pos
        value = atom()
        while pos < len(tokens) and tokens[pos] == "*":
            pos += 1
            value *= atom()
        return value

    def total() -> int:
        nonlocal pos
        value = product()
        while pos < len(tokens) and tokens[pos] in "+-":
            sign = 1 if tokens[pos] == "+" else -1
            pos += 1
            value += sign * product()
        return value

    value = total()
    if pos != len(tokens):
        raise ValueError(expression)
    return value


def require_static(module: ir.Module, source: str) -> None:
    """A one-line error naming the dynamic dims and how to bind them, when there are any."""
    dims = symbolic_dims(module)
    if dims:
        index = dims[0][0]
        main = main_function(module)
        t = main.regions[0].blocks[0].arguments[index].type
        names = sorted({s for _, _, spec in dims for s in _symbols(spec)} or
                       {spec for _, _, spec in dims})
        raise CaptureError(f"{source}: @main argument {index} has dynamic shape {t}; bind "
                           f"its symbolic dims with --bind NAME=SIZE (import_stablehlo(..., "
                           f"dims=...)): {', '.join(names)}")


def bind_main(module: ir.Module, sizes: Mapping[str, int], source: str) -> None:
    """Give `@main`'s dynamic dims the sizes of their symbols and refine every shape of
    the program (in place); check and drop the shape assertions."""
    global _passes_registered
    dims = symbolic_dims(module)
    known = sorted({s for _, _, spec in dims for s in _symbols(spec)})
    check_bindings(sizes, known, source, dim="dynamic dim of @main",
                   dims_named="symbolic dims")
    missing = sorted({s for s in known if s not in sizes})
    if missing:
        raise FileFormatError(f"{source}: bind every symbolic dim of @main: "
                              f"{', '.join(missing)} not given")
    main = main_function(module)
    args = list(main.regions[0].blocks[0].arguments)
    concrete = {}
    for index, j, spec in dims:
        try:
            value = _evaluate(spec, sizes)
        except (ValueError, IndexError):
            raise FileFormatError(f"{source}: @main argument {index} dim {j} is "
                                  f"{spec!r}, which --bind cannot evaluate (sums and "
                                  "products of symbols only)") from None
        if value < 0:
            raise FileFormatError(f"{source}: @main argument {index} dim {j} = {spec} is "
                                  f"{value} for these sizes")
        concrete[(index, j)] = value
    types = []
    for index, arg in enumerate(args):
        rt = ranked_type(arg.type)
        if rt is None or all(d is not None for d in rt.shape):
            types.append(str(arg.type))
            continue
        shape = [concrete[(index, j)] if d is None else d for j, d in enumerate(rt.shape)]
        types.append(f"tensor<{''.join(f'{d}x' for d in shape)}{rt.element}>")
    if not _passes_registered:
        _stablehlo.register_stablehlo_passes()
        _passes_registered = True
    # Calls inlined first: JAX emits shared private helpers (`@_where`, `@clip`) called
    # with different symbolic dims from several places, which shape refinement refuses to
    # refine twice ("refined with incompatible refinement keys"); JAX's own refinement
    # inlines too. symbol-dce then drops the helpers, now unused.
    pipeline = ("builtin.module(inline,symbol-dce,stablehlo-refine-arguments{types='" +
                ",".join(types) + "'},stablehlo-refine-shapes)")
    try:
        passmanager.PassManager.parse(pipeline).run(module.operation)
    except Exception as exc:
        raise CaptureError(f"{source}: refining the program's shapes for "
                           f"{', '.join(f'{k}={v}' for k, v in sizes.items())} failed: "
                           f"{_first_diagnostic(exc)}") from exc
    _drop_shape_assertions(module, source)


def _constant_int(value: Any) -> int | None:
    """The integer a scalar `stablehlo.constant` holds, else None."""
    owner = value.owner
    if getattr(owner, "name", None) != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    if not attr.is_splat:
        return None
    try:
        return int(ir.IntegerAttr(attr.get_splat_value()).value)
    except (TypeError, ValueError):
        return None


def _first_diagnostic(exc: Exception) -> str:
    """The first error MLIR reported (`'op' message at LOCATION`): the exception's own
    text begins with `Failure while executing pass pipeline:` and nothing else."""
    for diagnostic in getattr(exc, "error_diagnostics", None) or []:
        message = " ".join(str(diagnostic.message).split())
        if message:
            return message[:300]
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " ".join(lines[:2])[:300] if lines else type(exc).__name__


def _drop_shape_assertions(module: ir.Module, source: str) -> None:
    doomed = []
    for func in module.body.operations:
        for op in _walk(func.operation):
            if op.operation.name != "stablehlo.custom_call" or string_value(ir.StringAttr(
                    op.attributes["call_target_name"])) != "shape_assertion":
                continue
            predicate = op.operands[0].owner
            holds = None
            if predicate.name == "stablehlo.constant":
                attr = ir.DenseElementsAttr(predicate.attributes["value"])
                if attr.is_splat:
                    splat = attr.get_splat_value()
                    holds = bool(splat.value if isinstance(splat, ir.BoolAttr)
                                 else ir.IntegerAttr(splat).value)
            if holds is None:
                raise CaptureError(f"{source}: a JAX shape assertion still depends on run-time "
                                   "values after binding; cannot check it")
            if not holds:
                message = string_value(ir.StringAttr(op.attributes["error_message"]))
                for index, operand in enumerate(list(op.operands)[1:]):
                    value = _constant_int(operand)  # JAX's {0}, {1}: the values found
                    if value is not None:
                        message = message.replace(f"{{{index}}}", str(value))
                raise FileFormatError(f"{source}: the bound sizes fail the program's shape "
                                      f"assertion: {message.splitlines()[0][:300]}")
            doomed.append(op)
    for op in doomed:
        op.operation.erase()
