"""Bad input to the StableHLO importer and evaluator: one clear line naming the problem
(and the op and its location where there is one); unknown ops become opaque nodes with a
warning when the rest of the program is sound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shlotools import example_model, opaque_ops

from irbridge.converters.stablehlo import (
    StableHLOImportWarning,
    build_module,
    current_version,
    evaluate,
    from_mlir,
    import_stablehlo,
    import_stablehlo_with_report,
)
from irbridge.errors import CaptureError, ExportError, FileFormatError
from irbridge.executor import run_model


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def _module(body: str, args: str = "%arg0: tensor<2x3xf32>",
            results: str = "tensor<2x3xf32>") -> str:
    return f"func.func @main({args}) -> {results} {{\n{body}\n}}\n"


def test_malformed_mlir(tmp_path: Path) -> None:
    path = tmp_path / "bad.mlir"
    path.write_text(_module("  %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32\n"
                            "  return %0 : tensor<2x3xf32>"))
    with pytest.raises(FileFormatError) as exc:
        import_stablehlo(path)
    line = _one_line(exc)
    assert line.startswith(f"{path}: malformed MLIR: line 2:") and "expected" in line


def test_unknown_dialect_names_the_op_and_location() -> None:
    # (chlo ops are legalised to StableHLO first; a dialect nobody knows is refused)
    text = _module("  %0 = mydialect.erf %arg0 : tensor<2x3xf32> -> tensor<2x3xf32>\n"
                   "  return %0 : tensor<2x3xf32>")
    with pytest.raises(FileFormatError) as exc:
        from_mlir(text)
    line = _one_line(exc)
    assert "line 2:" in line and "op 'mydialect.erf'" in line
    assert "unknown dialect 'mydialect'" in line


def test_unknown_op_in_generic_form_becomes_opaque_with_a_warning() -> None:
    text = _module('  %0 = "mydialect.frobnicate"(%arg0) {level = 3 : i64} : '
                   '(tensor<2x3xf32>) -> tensor<2x3xf32> loc("block.frob")\n'
                   "  %1 = stablehlo.exponential %0 : tensor<2x3xf32>\n"
                   "  return %1 : tensor<2x3xf32>")
    with pytest.warns(StableHLOImportWarning, match="mydialect::frobnicate x1"):
        model = from_mlir(text)
    assert opaque_ops(model) == ["mydialect::frobnicate"]
    node = model.graph.nodes[0]
    assert node.attrs["level"] == 3 and node.provenance.module_path == "block.frob"
    assert node.outputs[0].type is not None and node.outputs[0].type.static_shape() == (2, 3)
    assert model.graph.nodes[-1].op == "exp"


def test_custom_call_is_kept_opaque(tmp_path: Path) -> None:
    text = _module('  %0 = stablehlo.custom_call @my_kernel(%arg0) {backend_config = "fast"} : '
                   "(tensor<2x3xf32>) -> tensor<2x3xf32>\n"
                   "  %1 = stablehlo.add %0, %arg0 : tensor<2x3xf32>\n"
                   "  return %1 : tensor<2x3xf32>")
    path = tmp_path / "cc.mlir"
    path.write_text(text)
    with pytest.warns(StableHLOImportWarning):
        model, report = import_stablehlo_with_report(path)
    assert report.opaque == {"stablehlo::custom_call": 1}
    assert "kept as opaque node" in report.warnings[0] and str(path) in report.warnings[0]
    node = model.graph.nodes[0]
    assert node.attrs["call_target_name"] == "my_kernel"
    assert model.metadata["stablehlo.opaque"] == "stablehlo::custom_call x1"
    # the interpreter refuses (rather than aborting the process on) a custom call
    with pytest.raises(ExportError, match=r"cannot run stablehlo\.custom_call"):
        evaluate(text, [np.zeros((2, 3), np.float32)])


def test_unsupported_artifact_versions(tmp_path: Path) -> None:
    model, _ = example_model("relu")
    artifact = build_module(model).artifact()
    current = f"StableHLO_v{current_version()}".encode()
    assert current in artifact[:64]
    for version, word in (("9.99.0", "newer"), ("0.0.1", "older")):
        patched = artifact.replace(current, f"StableHLO_v{version}".ljust(len(current),
                                                                       "0").encode(), 1)
        path = tmp_path / f"v{version}.mlirbc"
        path.write_bytes(patched)
        with pytest.raises(FileFormatError) as exc:
            import_stablehlo(path)
        assert f"targets StableHLO v{version}" in _one_line(exc) and word in _one_line(exc)


def test_truncated_artifact_and_garbage(tmp_path: Path) -> None:
    model, _ = example_model("relu")
    artifact = build_module(model).artifact()
    cases = {"truncated.mlirbc": artifact[: len(artifact) // 2], "empty.mlir": b"  \n",
             "garbage.mlirbc": b"ML\xefR\x00\x01\x02", "latin1.mlir": b"\xff\xfe module"}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(FileFormatError) as exc:
            import_stablehlo(path)
        assert _one_line(exc).startswith(str(path))
    with pytest.raises(FileFormatError, match="cannot read"):
        import_stablehlo(tmp_path / "missing.mlir")


def test_dynamic_shapes_are_refused_with_the_op() -> None:
    text = _module("  %0 = stablehlo.exponential %arg0 : tensor<?x3xf32>\n"
                   "  return %0 : tensor<?x3xf32>", "%arg0: tensor<?x3xf32>", "tensor<?x3xf32>")
    with pytest.raises(CaptureError) as exc:
        from_mlir(text)
    assert "argument 0" in _one_line(exc) and "dynamic shape" in _one_line(exc)
    text = _module("  %s = stablehlo.constant dense<[3, 2]> : tensor<2xi64>\n"
                   "  %0 = stablehlo.dynamic_reshape %arg0, %s : (tensor<2x3xf32>, tensor<2xi64>)"
                   " -> tensor<?x?xf32>\n"
                   "  %1 = stablehlo.abs %0 : tensor<?x?xf32>\n"
                   "  %2 = stablehlo.reshape %1 : (tensor<?x?xf32>) -> tensor<2x3xf32>\n"
                   "  return %2 : tensor<2x3xf32>")
    with pytest.raises(CaptureError) as exc:
        from_mlir(text)
    line = _one_line(exc)
    assert "stablehlo.dynamic_reshape" in line and ":3:" in line and "tensor<?x?xf32>" in line


def test_dynamic_op_with_a_static_result_is_resolved() -> None:
    text = _module("  %s = stablehlo.constant dense<[3, 2]> : tensor<2xi64>\n"
                   "  %0 = stablehlo.dynamic_reshape %arg0, %s : (tensor<2x3xf32>, tensor<2xi64>)"
                   " -> tensor<3x2xf32>\n"
                   "  %1 = stablehlo.get_dimension_size %0, dim = 1 : (tensor<3x2xf32>) -> "
                   "tensor<i32>\n"
                   "  %2 = stablehlo.convert %1 : (tensor<i32>) -> tensor<f32>\n"
                   "  %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<f32>) -> "
                   "tensor<3x2xf32>\n"
                   "  %4 = stablehlo.multiply %0, %3 : tensor<3x2xf32>\n"
                   "  return %4 : tensor<3x2xf32>", results="tensor<3x2xf32>")
    model = from_mlir(text)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_model(model, [x])[0], x.reshape(3, 2) * 2)


def test_no_main_and_non_tensor_arguments() -> None:
    two = ("func.func @a(%x: tensor<2xf32>) -> tensor<2xf32> { return %x : tensor<2xf32> }\n"
           "func.func @b(%x: tensor<2xf32>) -> tensor<2xf32> { return %x : tensor<2xf32> }\n")
    with pytest.raises(FileFormatError, match="no @main function"):
        from_mlir(two)
    token = "func.func @main(%t: !stablehlo.token) -> !stablehlo.token { return %t : !stablehlo.token }"
    with pytest.raises(CaptureError, match=r"argument 0 has type !stablehlo\.token, not a ranked"):
        from_mlir(token)


def test_evaluate_checks_its_inputs() -> None:
    model, feeds = example_model("relu")
    built = build_module(model)
    with pytest.raises(ExportError, match="takes 1 arguments, got 2"):
        evaluate(built, [*feeds, *feeds])
    with pytest.raises(ExportError, match=r"argument 0: got shape \[3\]"):
        evaluate(built, [np.zeros(3, np.float32)])
    with pytest.raises(FileFormatError, match="cannot read the StableHLO module"):
        evaluate("func.func @main(", feeds)


def test_evaluate_reads_complex_results_back_instead_of_aborting() -> None:
    # the bindings abort the process (nanobind terminate) reading a complex result back:
    # the evaluator reads its real and imaginary parts instead
    text = _module("  %0 = stablehlo.convert %arg0 : (tensor<2xi1>) -> tensor<2xcomplex<f64>>\n"
                   "  return %0 : tensor<2xcomplex<f64>>",
                   args="%arg0: tensor<2xi1>", results="tensor<2xcomplex<f64>>")
    (got,) = evaluate(text, [np.array([True, False])])
    assert got.dtype == np.complex128
    assert got.tolist() == [1 + 0j, 0j]


def test_evaluate_refuses_an_empty_contraction_instead_of_aborting() -> None:
    # (3 x 0) . (0 x 3): the interpreter aborts the process; refused in one line, while an
    # empty result (the empty dim not contracted) still runs
    dot = ("  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [{c}] x [0] : "
           "(tensor<{a}xf32>, tensor<{b}xf32>) -> tensor<{r}xf32>\n  return %0 : tensor<{r}xf32>")
    text = _module(dot.format(c=1, a="3x0", b="0x3", r="3x3"),
                   args="%arg0: tensor<3x0xf32>, %arg1: tensor<0x3xf32>", results="tensor<3x3xf32>")
    with pytest.raises(ExportError, match=r"cannot run stablehlo\.dot_general with an empty "
                                          r"contracting dimension") as info:
        evaluate(text, [np.zeros((3, 0), np.float32), np.zeros((0, 3), np.float32)])
    assert "\n" not in str(info.value)
    fine = _module(dot.format(c=1, a="0x2", b="2x3", r="0x3"),
                   args="%arg0: tensor<0x2xf32>, %arg1: tensor<2x3xf32>", results="tensor<0x3xf32>")
    (got,) = evaluate(fine, [np.zeros((0, 2), np.float32), np.ones((2, 3), np.float32)])
    assert got.shape == (0, 3)


def test_a_matmul_over_an_empty_dimension_exports_as_zeros() -> None:
    # (2, 3, 0) x (0, 4): an empty sum is 0; the export writes the zeros, not the
    # dot_general the interpreter would abort on
    from shlotools import single_op

    model, feeds = single_op("matmul", [np.zeros((2, 3, 0), np.float32),
                                        np.zeros((0, 4), np.float32)])
    built = build_module(model)
    assert "dot_general" not in built.text()
    (got,) = evaluate(built, feeds)
    want = run_model(model, dict(zip([v.name for v in model.graphs[0].inputs], feeds,
                                     strict=True)))
    assert got.shape == (2, 3, 4) and not got.any()
    np.testing.assert_array_equal(got, want[0])
