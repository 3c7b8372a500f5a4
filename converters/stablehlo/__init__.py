"""StableHLO interop: export irbridge IR to StableHLO and import StableHLO into the IR.

Public API:

* `export_stablehlo(model, path, *, target_version=None, weights_as_args=False) -> Path`:
  `.mlir` text or a `.mlirbc` portable artifact, written atomically.
* `to_mlir_text(model, ...) -> str`; `build_module(model, ...)` for the parsed module.
* `import_stablehlo(path) -> Model` (text or portable artifact); `from_mlir(text_or_bytes)`.
* `evaluate(module_or_text, inputs) -> list[np.ndarray]` through the StableHLO reference
  interpreter.

See docs/stablehlo.md.
"""

from irbridge.converters.stablehlo._mlir import current_version, minimum_version
from irbridge.converters.stablehlo.evaluate import evaluate, load_module
from irbridge.converters.stablehlo.export import (
    ExportedModule,
    build_module,
    check_target_version,
    export_stablehlo,
    to_mlir_text,
)
from irbridge.converters.stablehlo.importer import (
    ImportReport,
    StableHLOImportWarning,
    from_mlir,
    import_stablehlo,
    import_stablehlo_with_report,
)

__all__ = ["ExportedModule", "ImportReport", "StableHLOImportWarning", "build_module",
           "check_target_version", "current_version", "evaluate", "export_stablehlo",
           "from_mlir", "import_stablehlo", "import_stablehlo_with_report", "load_module",
           "minimum_version", "to_mlir_text"]
