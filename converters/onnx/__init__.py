"""ONNX interop: export irbridge IR to ONNX and import ONNX models into the IR.

Public API:

* `export_onnx(model, path, opset=None) -> Path`: write an IR model as an ONNX file (opset: the lowest that represents it)
  (atomically; weights as initializers, external data beyond 2 GiB).
* `import_onnx(path) -> Model`: read an ONNX file into an IR model.

`to_onnx` / `from_onnx` do the same on in-memory `onnx.ModelProto`s. See docs/onnx.md.
"""

from irbridge.converters.onnx._common import DEFAULT_OPSET
from irbridge.converters.onnx.export import export_onnx, to_onnx
from irbridge.converters.onnx.importer import (
    Coverage,
    coverage_of,
    from_onnx,
    import_onnx,
    import_onnx_with_coverage,
)

__all__ = ["DEFAULT_OPSET", "Coverage", "coverage_of", "export_onnx", "from_onnx",
           "import_onnx", "import_onnx_with_coverage", "to_onnx"]
