"""CHLO in StableHLO text: legalised to StableHLO before import.

`jax.jit(f).lower(*args).as_text()` keeps ops of the `chlo` dialect (`chlo.square` in a
layer norm's variance, `chlo.erfc` in exact GELU, `chlo.top_k`, `chlo.lgamma`, the
`chlo.broadcast_*` binary ops, ...). The MLIR bindings irbridge parses with (torch-mlir's)
know only `func` and `stablehlo`, so a module holding `chlo` ops is first run through
StableHLO's own `chlo-legalize-to-stablehlo` pass with the MLIR bindings that ship with
`jaxlib` (whoever wrote CHLO text has JAX installed), and the legalised text is imported as
usual. The pass is upstream's definition of each CHLO op in StableHLO ops, so the imported
graph computes exactly what the CHLO op means (e.g. `chlo.erfc` becomes its polynomial
approximation, `chlo.top_k` a `sort` and a `slice`).
"""

from __future__ import annotations

import re

from irbridge.errors import FileFormatError

# An op of the dialect, not a `stablehlo.composite "chlo.erf"` name or a `@chlo.erf.impl`
# symbol (JAX wraps some CHLO ops into composites; the importer recognises those).
_CHLO_OP = re.compile(r"(?<![\"@\w.])chlo\.([a-z_0-9]+)")


def uses_chlo(text: str) -> bool:
    return _CHLO_OP.search(text) is not None


def chlo_ops(text: str) -> list[str]:
    return sorted({f"chlo.{m}" for m in _CHLO_OP.findall(text)})


def legalize_chlo(text: str, source: str) -> str:
    """`text` with every `chlo` op rewritten into StableHLO ops (a one-line FileFormatError
    when jaxlib is missing or the module does not parse or legalise)."""
    ops = ", ".join(chlo_ops(text)[:6])
    try:
        from jaxlib.mlir import ir, passmanager
        from jaxlib.mlir._mlir_libs import _chlo, _jax_mlir_ext, _stablehlo
    except ImportError as exc:
        raise FileFormatError(
            f"{source}: the module uses CHLO ops ({ops}); importing them needs jaxlib's MLIR "
            f"bindings to legalise CHLO to StableHLO (pip install jaxlib), or export "
            f"StableHLO without CHLO (jax.export's portable artifact)") from exc
    ctx = ir.Context()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    _chlo.register_dialect(ctx)
    _stablehlo.register_dialect(ctx)
    _stablehlo.register_stablehlo_passes()
    with ctx:
        try:
            module = ir.Module.parse(text)
        except Exception as exc:
            raise FileFormatError(f"{source}: malformed MLIR with CHLO ops ({ops}): "
                                  f"{_first_line(exc)}") from exc
        try:
            pm = passmanager.PassManager.parse(
                "builtin.module(func.func(chlo-legalize-to-stablehlo))")
            pm.run(module.operation)
        except Exception as exc:
            raise FileFormatError(f"{source}: cannot legalise its CHLO ops ({ops}) to "
                                  f"StableHLO: {_first_line(exc)}") from exc
        out = str(module.operation.get_asm(enable_debug_info=True))
    left = chlo_ops(out)
    if left:
        raise FileFormatError(f"{source}: CHLO ops left after legalisation: {', '.join(left)}")
    return out


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    text = " ".join(text.split())
    return text[:300]
