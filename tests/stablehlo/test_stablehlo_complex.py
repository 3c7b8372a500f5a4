"""StableHLO programs on complex numbers -> IR: complex constants (lists, splats, hex
parts, raw hex data), the elementwise ops on complex operands, convert, the shape ops and
dot_general, FFTs. Every expected value comes from the StableHLO reference interpreter
(`evaluate`) running the same program text; the IR runs it through the reference
executor, and its export back to StableHLO runs in the interpreter again."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from shlotools import assert_close

from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import build_module, evaluate, from_mlir
from irbridge.errors import ExportError
from irbridge.executor import run_model

RNG = np.random.default_rng(7)


def _c(shape: tuple[int, ...], dtype: type = np.complex64) -> np.ndarray:
    return (RNG.uniform(0.5, 2.0, shape) + 1j * RNG.uniform(-2.0, 2.0, shape)).astype(dtype)


def _program(body: str, args: str, results: str) -> str:
    return f"func.func @main({args}) -> ({results}) {{\n{body}\n}}"


UNARY = ("negate", "exponential", "log", "sqrt", "rsqrt", "sine", "cosine", "tanh", "sign",
         "logistic", "exponential_minus_one", "log_plus_one", "cbrt")


@pytest.mark.parametrize("element", ["complex<f32>", "complex<f64>"])
@pytest.mark.parametrize("op", UNARY)
def test_unary_op_of_complex_operand(op: str, element: str) -> None:
    t = f"tensor<2x3x{element}>"
    text = _program(f"  %0 = stablehlo.{op} %a : {t}\n  func.return %0 : {t}",
                    f"%a: {t}", t)
    dtype = np.complex64 if element == "complex<f32>" else np.complex128
    _check(text, [_c((2, 3), dtype)], rtol=1e-5 if dtype == np.complex64 else 1e-12)


BINARY = ("add", "subtract", "multiply", "divide", "power", "atan2")


@pytest.mark.parametrize("op", BINARY)
def test_binary_op_of_complex_operands(op: str) -> None:
    t = "tensor<4xcomplex<f64>>"
    text = _program(f"  %0 = stablehlo.{op} %a, %b : {t}\n  func.return %0 : {t}",
                    f"%a: {t}, %b: {t}", t)
    _check(text, [_c((4,), np.complex128), _c((4,), np.complex128)], rtol=1e-12)


def test_abs_real_imag_complex_compare_select_convert() -> None:
    c, f = "tensor<3xcomplex<f32>>", "tensor<3xf32>"
    text = _program(f"""
  %abs = "stablehlo.abs"(%a) : ({c}) -> {f}
  %re = stablehlo.real %a : ({c}) -> {f}
  %im = stablehlo.imag %a : ({c}) -> {f}
  %back = stablehlo.complex %im, %re : {c}
  %eq = stablehlo.compare EQ, %a, %b : ({c}, {c}) -> tensor<3xi1>
  %ne = stablehlo.compare NE, %a, %back : ({c}, {c}) -> tensor<3xi1>
  %sel = stablehlo.select %eq, %a, %back : tensor<3xi1>, {c}
  %to_real = stablehlo.convert %a : ({c}) -> {f}
  %to_bool = stablehlo.convert %b : ({c}) -> tensor<3xi1>
  %to_int = stablehlo.convert %a : ({c}) -> tensor<3xi32>
  %from_real = stablehlo.convert %re : ({f}) -> tensor<3xcomplex<f64>>
  %re_of_real = stablehlo.real %re : {f}
  %im_of_real = stablehlo.imag %re : {f}
  func.return %abs, %re, %im, %back, %eq, %ne, %sel, %to_real, %to_bool, %to_int, %from_real,
      %re_of_real, %im_of_real : {f}, {f}, {f}, {c}, tensor<3xi1>, tensor<3xi1>, {c}, {f},
      tensor<3xi1>, tensor<3xi32>, tensor<3xcomplex<f64>>, {f}, {f}""",
                    f"%a: {c}, %b: {c}",
                    f"{f}, {f}, {f}, {c}, tensor<3xi1>, tensor<3xi1>, {c}, {f}, tensor<3xi1>, "
                    f"tensor<3xi32>, tensor<3xcomplex<f64>>, {f}, {f}")
    a = np.array([3 + 4j, -1.5 + 2j, 7.25 - 1j], np.complex64)
    b = np.array([3 + 4j, 0 + 1j, 0 + 0j], np.complex64)  # (0, 1) converts to false
    _check(text, [a, b], rtol=1e-6)


def test_shape_ops_and_dot_general_on_complex() -> None:
    t = "tensor<2x3xcomplex<f32>>"
    text = _program(f"""
  %t = stablehlo.transpose %a, dims = [1, 0] : ({t}) -> tensor<3x2xcomplex<f32>>
  %r = stablehlo.reshape %a : ({t}) -> tensor<6xcomplex<f32>>
  %s = stablehlo.slice %a [0:2, 1:3] : ({t}) -> tensor<2x2xcomplex<f32>>
  %c = stablehlo.concatenate %a, %a, dim = 0 : ({t}, {t}) -> tensor<4x3xcomplex<f32>>
  %b = stablehlo.broadcast_in_dim %a, dims = [1, 2] : ({t}) -> tensor<2x2x3xcomplex<f32>>
  %d = stablehlo.dot_general %a, %t, contracting_dims = [1] x [0] : ({t}, tensor<3x2xcomplex<f32>>) -> tensor<2x2xcomplex<f32>>
  func.return %t, %r, %s, %c, %b, %d : tensor<3x2xcomplex<f32>>, tensor<6xcomplex<f32>>,
      tensor<2x2xcomplex<f32>>, tensor<4x3xcomplex<f32>>, tensor<2x2x3xcomplex<f32>>,
      tensor<2x2xcomplex<f32>>""",
                    f"%a: {t}",
                    "tensor<3x2xcomplex<f32>>, tensor<6xcomplex<f32>>, tensor<2x2xcomplex<f32>>, "
                    "tensor<4x3xcomplex<f32>>, tensor<2x2x3xcomplex<f32>>, "
                    "tensor<2x2xcomplex<f32>>")
    _check(text, [_c((2, 3))], rtol=1e-5)


def test_complex_constants_lists_splats_hex_parts_and_raw_data() -> None:
    big = ", ".join(f"({i}.25, {-i}.5)" for i in range(150))  # printed back as raw hex data
    text = _program(f"""
  %0 = stablehlo.constant dense<[(1.5, -2.0), (0x7FC00000, 0x7F800000), (0.0, -0.0)]> : tensor<3xcomplex<f32>>
  %1 = stablehlo.constant dense<(0.1, 0.30000000000000004)> : tensor<2x2xcomplex<f64>>
  %2 = stablehlo.constant dense<[{big}]> : tensor<150xcomplex<f32>>
  %3 = stablehlo.add %1, %1 : tensor<2x2xcomplex<f64>>
  func.return %0, %1, %2, %3 : tensor<3xcomplex<f32>>, tensor<2x2xcomplex<f64>>,
      tensor<150xcomplex<f32>>, tensor<2x2xcomplex<f64>>""", "",
                    "tensor<3xcomplex<f32>>, tensor<2x2xcomplex<f64>>, tensor<150xcomplex<f32>>, "
                    "tensor<2x2xcomplex<f64>>")
    model = _check(text, [], rtol=0)
    # the splat stays one element in the IR (bound lazily): the add reads a 1x1 constant
    add = next(n for _, n in model.all_nodes() if n.op == "add")
    assert [x.type.static_shape() for x in add.inputs] == [(1, 1), (1, 1)]
    got = run_model(model, [])[0]
    assert np.isnan(got[1].real) and np.isposinf(got[1].imag)  # the parts read separately
    assert np.signbit(got[2].imag) and not np.signbit(got[2].real)


@pytest.mark.parametrize("kind, length, shape, element", [
    ("FFT", [4], (3, 4), "complex<f64>"),
    ("IFFT", [2, 4], (2, 4), "complex<f64>"),
    ("RFFT", [4], (3, 4), "f64"),
    ("IRFFT", [6], (2, 4), "complex<f64>"),
])
def test_fft_imports_to_the_registry_transforms(kind: str, length: list[int],
                                                shape: tuple[int, ...], element: str) -> None:
    """The interpreter cannot run stablehlo.fft (it aborts): the expected values are
    numpy's transforms, with StableHLO's conventions (inverse ones scaled by 1/N)."""
    dims = "x".join(str(d) for d in shape)
    out_shape = list(shape)
    if kind == "RFFT":
        out_shape[-1] = shape[-1] // 2 + 1
    if kind == "IRFFT":
        out_shape[-1] = length[-1]
    out_element = {"RFFT": "complex<f64>", "IRFFT": "f64"}.get(kind, element)
    out = f"tensor<{'x'.join(map(str, out_shape))}x{out_element}>"
    text = _program(f"  %0 = stablehlo.fft %a, type = {kind}, length = {length} : "
                    f"(tensor<{dims}x{element}>) -> {out}\n  func.return %0 : {out}",
                    f"%a: tensor<{dims}x{element}>", out)
    x = _c(shape, np.complex128) if element.startswith("complex") else \
        RNG.standard_normal(shape)
    axes = list(range(len(shape) - len(length), len(shape)))
    want = {"FFT": lambda: np.fft.fftn(x, axes=axes),
            "IFFT": lambda: np.fft.ifftn(x, axes=axes),
            "RFFT": lambda: np.fft.rfftn(x, axes=axes),
            "IRFFT": lambda: np.fft.irfftn(x, s=length, axes=axes)}[kind]()
    model = _imported(text)
    assert_close(run_model(model, [x]), [want], rtol=1e-12, atol=1e-12)


def test_onnx_export_of_complex_runs_on_pairs_or_is_refused_in_one_line() -> None:
    """ONNX writes complex values as float [..., 2] (real, imag) pairs: a complex multiply
    runs in onnxruntime with the interpreter's result; an op not mapped on pairs (sine)
    is refused with one line naming the node."""
    import onnxruntime as ort

    from irbridge.converters.onnx._complex import complex_values, from_pairs, to_pairs

    t = "tensor<3xcomplex<f32>>"
    text = _program(f"  %0 = stablehlo.multiply %a, %b : {t}\n  func.return %0 : {t}",
                    f"%a: {t}, %b: {t}", t)
    a, b = _c((3,)), _c((3,))
    proto = to_onnx(_imported(text))
    paired = complex_values(proto)
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    (got,) = session.run(None, {n: to_pairs(v) for n, v in zip(names, (a, b), strict=True)})
    out = session.get_outputs()[0].name
    assert set(paired) == {*names, out}
    assert_close([from_pairs(got, paired[out])], evaluate(text, [a, b]), rtol=1e-6, atol=1e-6)
    t = "tensor<3xcomplex<f32>>"
    text = _program(f"  %0 = stablehlo.sine %a : {t}\n  func.return %0 : {t}", f"%a: {t}", t)
    with pytest.raises(ExportError, match=r"node #\d+ sin: neutral op 'sin' on complex "
                                          r"values has no ONNX mapping") as info:
        to_onnx(_imported(text))
    assert "\n" not in str(info.value)


def _imported(text: str):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may become opaque
        return from_mlir(text)


def _check(text: str, feeds: list[np.ndarray], *, rtol: float):  # type: ignore[no-untyped-def]
    """The IR (and its export back to StableHLO) against the interpreter on `text`.
    Tolerance: `rtol` relative (plus as much absolute) -- the executor computes complex
    math with numpy, the interpreter with its own C++ formulas, both in the program's
    precision; 0 where nothing is computed."""
    want = evaluate(text, feeds)
    model = _imported(text)
    atol = rtol
    assert_close(run_model(model, feeds), want, rtol=rtol, atol=atol)
    assert_close(evaluate(build_module(model), feeds), want, rtol=rtol, atol=atol)
    return model
