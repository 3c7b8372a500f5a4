"""Run a StableHLO module through the StableHLO reference interpreter (`eval_module`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from irbridge.dtypes import DType
from irbridge.errors import ExportError, FileFormatError
from irbridge.ops.complex import REAL_OF

from ._mlir import (
    BYTECODE_MAGIC,
    RankedType,
    attr_to_array,
    dense_attr,
    diagnostics_line,
    new_context,
    ranked_type,
)
from .export import ExportedModule


def load_module(source: str | bytes | os.PathLike[str] | ExportedModule | ir.Module,
                ctx: ir.Context | None = None) -> tuple[ir.Context, ir.Module]:
    """A module from text, portable-artifact / bytecode bytes, a file path, or as is."""
    if isinstance(source, ExportedModule):
        return source.context, source.module
    if isinstance(source, ir.Module):
        return source.context, source
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                            and Path(source).suffix in (".mlir", ".mlirbc")):
        data = Path(source).read_bytes()
    else:
        data = source.encode("utf-8") if isinstance(source, str) else bytes(source)
    ctx = ctx or new_context()
    with ctx:
        try:
            if data.startswith(BYTECODE_MAGIC):
                try:
                    return ctx, _stablehlo.deserialize_portable_artifact(ctx, data)
                except Exception:
                    return ctx, ir.Module.parse(data)
            return ctx, ir.Module.parse(data.decode("utf-8"))
        except Exception as exc:
            raise FileFormatError(f"cannot read the StableHLO module: "
                                  f"{diagnostics_line(exc)}") from exc


INTERPRETER_UNSUPPORTED = frozenset({
    "stablehlo.batch_norm_grad", "stablehlo.batch_norm_inference",
    "stablehlo.batch_norm_training", "stablehlo.broadcast", "stablehlo.cholesky",
    "stablehlo.custom_call", "stablehlo.dot", "stablehlo.dynamic_conv",
    "stablehlo.dynamic_gather", "stablehlo.einsum", "stablehlo.unary_einsum", "stablehlo.fft",
    "stablehlo.rng", "stablehlo.rng_bit_generator", "stablehlo.torch_index_select"})
"""Ops the reference interpreter aborts the whole process on (probed with this build):
`evaluate` refuses modules holding them, or ops of dialects other than func and stablehlo."""


def _empty_contraction(op: ir.Operation) -> bool:
    """A dot_general whose operands are empty but whose result is not: the empty dim is
    contracted (batch and free dims all reach the result)."""
    def empty(value: ir.Value) -> bool:
        return 0 in ir.RankedTensorType(value.type).shape
    return any(empty(v) for v in op.operands) and not empty(op.results[0])


def unsupported_ops(module: ir.Module) -> list[str]:
    """Ops of `module` the reference interpreter cannot run."""
    found: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        name = op.name
        dialect = name.split(".", 1)[0]
        if name in INTERPRETER_UNSUPPORTED or dialect not in ("builtin", "func", "stablehlo"):
            found.add(name)
        elif name == "stablehlo.triangular_solve":
            # the interpreter aborts on batch dims ("Incompatible index and shape found
            # while flattening index") and crashes on ADJOINT of a real matrix; single
            # matrices with NO_TRANSPOSE or TRANSPOSE run
            if ir.RankedTensorType(op.operands[0].type).rank > 2:
                found.add(f"{name} with batch dims")
            if "ADJOINT" in str(op.attributes["transpose_a"]):
                found.add(f"{name} with transpose_a = ADJOINT")
        elif name == "stablehlo.dot_general" and _empty_contraction(op):
            # aborts ("Incompatible index and shape found while flattening index")
            found.add(f"{name} with an empty contracting dimension")
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return sorted(found)


def evaluate(source: str | bytes | os.PathLike[str] | ExportedModule | ir.Module,
             inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate `@main` of a StableHLO module on `inputs` (one array per argument, in
    order: graph inputs, then weights when they were exported as arguments) with the
    StableHLO reference interpreter; returns one array per result."""
    ctx, module = load_module(source)
    with ctx, ir.Location.unknown():
        bad = unsupported_ops(module)
        if bad:
            raise ExportError(f"the StableHLO reference interpreter cannot run {', '.join(bad)} "
                              "(it would abort the process)")
        main = _main(module)
        arg_types = list(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
                         .inputs)
        res_types = list(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
                         .results)
        for index, t in enumerate(res_types):
            rt = ranked_type(t)
            if rt is None or rt.dtype is None:
                # the bindings abort the process converting such a result back
                raise ExportError(f"@main result {index} has type {t}, which the evaluator "
                                  "cannot read back")
        if any(getattr(ranked_type(t), "dtype", None) in _COMPLEX for t in res_types):
            # the bindings abort the process reading a complex result: evaluate a module
            # whose @main returns the real and imaginary parts instead
            ctx, module = _split_complex_results(module, main, arg_types, res_types)
            with ctx, ir.Location.unknown():
                return _evaluate(module, inputs, arg_types, res_types)
        return _evaluate(module, inputs, arg_types, res_types)


_COMPLEX = (DType.COMPLEX64, DType.COMPLEX128)


def _split_complex_results(module: ir.Module, main: ir.Operation,
                           arg_types: Sequence[ir.Type], res_types: Sequence[ir.Type]
                           ) -> tuple[ir.Context, ir.Module]:
    """A copy of `module` whose @main calls the original (renamed) and returns each
    complex result as two results, its real and imaginary parts (in that order)."""
    inner = "__irbridge_complex_main"
    saved = {key: main.attributes[key] for key in ("sym_name", "sym_visibility")
             if key in main.attributes}
    main.attributes["sym_name"] = ir.StringAttr.get(inner)
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    text = str(module)
    del main.attributes["sym_visibility"]  # leave the caller's module as it was
    for key, value in saved.items():
        main.attributes[key] = value
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    refs = ", ".join(f"%a{i}" for i in range(len(arg_types)))
    ins = ", ".join(str(t) for t in arg_types)
    outs = ", ".join(str(t) for t in res_types)
    lines = [f"  %r:{len(res_types)} = func.call @{inner}({refs}) : ({ins}) -> ({outs})"]
    values, types = [], []
    for index, t in enumerate(res_types):
        rt = ranked_type(t)
        assert rt is not None and rt.dtype is not None
        if rt.dtype not in _COMPLEX:
            values.append(f"%r#{index}")
            types.append(str(t))
            continue
        part = str(t).replace(rt.element, rt.element[len("complex<"):-1])
        for op in ("real", "imag"):
            lines.append(f"  %{op}{index} = stablehlo.{op} %r#{index} : ({t}) -> {part}")
            values.append(f"%{op}{index}")
            types.append(part)
    lines.append(f"  func.return {', '.join(values)} : {', '.join(types)}")
    wrapper = (f"func.func @main({args}) -> ({', '.join(types)}) {{\n" + "\n".join(lines)
               + "\n}\n")
    resources = text.find("\n{-#")  # dialect resources (dense_resource data) follow it
    end = (text if resources < 0 else text[:resources]).rstrip().rindex("}")  # module's end
    return load_module(text[:end] + wrapper + text[end:])


def _evaluate(module: ir.Module, inputs: Sequence[np.ndarray], arg_types: Sequence[ir.Type],
              res_types: Sequence[ir.Type]) -> list[np.ndarray]:
    """Run `@main` of `module` (in the current context); `res_types` are the results of
    the program asked for (complex ones come back from `module` as two real parts)."""
    if len(inputs) != len(arg_types):
        raise ExportError(f"@main takes {len(arg_types)} arguments, got {len(inputs)} inputs")
    args = []
    for index, (array, t) in enumerate(zip(inputs, arg_types, strict=True)):
        rt = ranked_type(t)
        if rt is None or rt.dtype is None or not rt.is_static:
            raise ExportError(f"argument {index} has type {t}, which the evaluator cannot "
                              "feed")
        data = np.asarray(array)
        if tuple(data.shape) != rt.static_shape():
            raise ExportError(f"argument {index}: got shape {list(data.shape)}, expected "
                              f"{t}")
        args.append(dense_attr(data.astype(rt.dtype.numpy, copy=False), rt.dtype))
    try:
        results = _stablehlo.eval_module(module, args)
    except Exception as exc:
        raise ExportError(f"the StableHLO interpreter failed: {diagnostics_line(exc)}") \
            from exc
    out = []
    attrs = iter(results)
    for t in res_types:
        rt = ranked_type(t)
        assert rt is not None and rt.dtype is not None
        if rt.dtype in _COMPLEX:
            part = RankedType(REAL_OF[rt.dtype], rt.shape, rt.element[len("complex<"):-1])
            re, im = attr_to_array(next(attrs), part), attr_to_array(next(attrs), part)
            value = np.empty(re.shape, dtype=rt.dtype.numpy)
            value.real, value.imag = re, im
            out.append(value)
        else:
            out.append(attr_to_array(next(attrs), rt))
    return out


def _main(module: ir.Module) -> ir.Operation:
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    for op in funcs:
        if ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op.operation
    if len(funcs) == 1:
        return funcs[0].operation
    raise ExportError("the module has no @main function")


__all__ = ["INTERPRETER_UNSUPPORTED", "evaluate", "load_module", "unsupported_ops"]
