"""StableHLO -> IR for ops the conformance corpus exercised only on constants:
bitcast_convert, reduce_precision, convolutions with input dilation and strides or batch
groups, dynamic_conv / dynamic_pad / dynamic_iota, windowed reductions with base dilation
and negative padding, several-operand sorts and map. Inputs are run-time arguments (no
import-time folding); expected values come from the StableHLO reference interpreter on the
same program (for dynamic_conv, which it cannot run, on the equivalent convolution); the
IR's export back to StableHLO runs in the interpreter too. Integer and bit results are
compared exactly; float results within 1e-6 relative (the executor and the interpreter
round the same operations, in the program's type)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from shlotools import assert_close

from irbridge.converters.stablehlo import build_module, evaluate, from_mlir
from irbridge.executor import run_model

RNG = np.random.default_rng(11)


def _check(text: str, feeds: list[np.ndarray], want_text: str | None = None) -> None:
    want = evaluate(want_text or text, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may become opaque
        model = from_mlir(text)
    assert_close(run_model(model, feeds), want, rtol=1e-6, atol=0)
    if want_text is None:
        assert_close(evaluate(build_module(model), feeds), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("src, dst, shape, out", [
    ("f32", "i16", (2, 3), (2, 3, 2)),
    ("i64", "f64", (4,), (4,)),
    ("i64", "i1", (3,), (3, 64)),
    ("i1", "i64", (2, 64), (2,)),
    ("i8", "i32", (3, 4), (3,)),
    ("complex<f64>", "complex<f32>", (2,), (2, 2)),
])
def test_bitcast_convert(src: str, dst: str, shape: tuple[int, ...],
                         out: tuple[int, ...]) -> None:
    def t(s: tuple[int, ...], e: str) -> str:
        return f"tensor<{''.join(f'{d}x' for d in s)}{e}>"

    text = (f"func.func @main(%a: {t(shape, src)}) -> {t(out, dst)} {{\n"
            f"  %0 = stablehlo.bitcast_convert %a : ({t(shape, src)}) -> {t(out, dst)}\n"
            f"  func.return %0 : {t(out, dst)}\n}}")
    if src == "i1":
        x: np.ndarray = RNG.integers(0, 2, shape).astype(bool)
    elif src.startswith("complex"):
        x = RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)
    else:
        dtype = {"f32": np.float32, "i64": np.int64, "i8": np.int8}[src]
        x = (RNG.standard_normal(shape) * 1e3).astype(dtype) if src == "f32" else \
            RNG.integers(-2**62, 2**62, shape).astype(dtype) if src == "i64" else \
            RNG.integers(-128, 128, shape).astype(dtype)
    _check(text, [x])


@pytest.mark.parametrize("element", ["f32", "f64"])
@pytest.mark.parametrize("exponent, mantissa", [(5, 10), (8, 7), (5, 0), (4, 3), (2, 1)])
def test_reduce_precision(element: str, exponent: int, mantissa: int) -> None:
    values = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-30, 65504.0, 65505.0, 65520.0,
              1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 3.0, -2.5, 1e38, 6e-5, 6.1e-5, 2.0**-24]
    x = np.array(values, dtype=np.float32 if element == "f32" else np.float64)
    x = np.concatenate([x, (RNG.standard_normal(30) * 10.0 ** RNG.integers(-8, 8, 30))
                        .astype(x.dtype)])
    t = f"tensor<{x.size}x{element}>"
    text = (f"func.func @main(%a: {t}) -> {t} {{\n"
            f"  %0 = stablehlo.reduce_precision %a, format = e{exponent}m{mantissa} : {t}\n"
            f"  func.return %0 : {t}\n}}")
    _check(text, [x])


_CONV = """func.func @main(%lhs: tensor<2x5x5x4xi64>, %rhs: tensor<3x3x2x4xi64>) -> {out} {{
  %r = stablehlo.convolution(%lhs, %rhs)
    dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
    window = {{stride = [{stride}], pad = [[1, 2], [-1, 1]], lhs_dilate = [2, 3],
              rhs_dilate = [1, 2]}}
    {{batch_group_count = {bg} : i64, feature_group_count = {fg} : i64}}
    : (tensor<2x5x5x4xi64>, tensor<3x3x2x4xi64>) -> {out}
  func.return %r : {out}
}}"""


@pytest.mark.parametrize("stride, bg, fg, out", [
    ("3, 2", 1, 2, "tensor<2x4x5x4xi64>"),
    ("1, 1", 1, 2, "tensor<2x10x9x4xi64>"),
    ("2, 3", 2, 1, "tensor<1x5x3x4xi64>"),
])
def test_convolution_with_input_dilation_strides_and_groups(stride: str, bg: int, fg: int,
                                                            out: str) -> None:
    """The lhs has 4 features: 2 feature groups of 2 (the kernel takes 2), or 2 batch
    groups each seeing all 4 (the kernel takes 4)."""
    text = _CONV.format(stride=stride, bg=bg, fg=fg, out=out)
    if bg != 1:
        text = text.replace("3x3x2x4xi64", "3x3x4x4xi64")
    lhs = RNG.integers(-5, 6, (2, 5, 5, 4))
    rhs = RNG.integers(-5, 6, (3, 3, 4 if bg != 1 else 2, 4))
    _check(text, [lhs, rhs])


def test_dynamic_conv_with_a_constant_padding_is_the_convolution() -> None:
    conv = _CONV.format(stride="3, 2", bg=1, fg=2, out="tensor<2x4x5x4xi64>")
    dynamic = """func.func @main(%lhs: tensor<2x5x5x4xi64>, %rhs: tensor<3x3x2x4xi64>) -> tensor<2x4x5x4xi64> {
  %p = stablehlo.constant dense<[[1, 2], [-1, 1]]> : tensor<2x2xi64>
  %r = "stablehlo.dynamic_conv"(%lhs, %rhs, %p) {
    window_strides = array<i64: 3, 2>, lhs_dilation = array<i64: 2, 3>,
    rhs_dilation = array<i64: 1, 2>,
    dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
    batch_group_count = 1 : i64, feature_group_count = 2 : i64
  } : (tensor<2x5x5x4xi64>, tensor<3x3x2x4xi64>, tensor<2x2xi64>) -> tensor<2x4x5x4xi64>
  func.return %r : tensor<2x4x5x4xi64>
}"""
    _check(dynamic, [RNG.integers(-5, 6, (2, 5, 5, 4)), RNG.integers(-5, 6, (3, 3, 2, 4))],
           want_text=conv)


@pytest.mark.parametrize("body, init", [("add", "0"), ("maximum", "-9223372036854775808")])
def test_reduce_window_with_base_dilation_and_negative_padding(body: str, init: str) -> None:
    text = f"""func.func @main(%x: tensor<5x6xi64>) -> tensor<4x5xi64> {{
  %init = stablehlo.constant dense<{init}> : tensor<i64>
  %r = "stablehlo.reduce_window"(%x, %init) ({{
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %0 = stablehlo.{body} %a, %b : tensor<i64>
      stablehlo.return %0 : tensor<i64>
  }}) {{
    base_dilations = array<i64: 2, 1>, padding = dense<[[2, -1], [-1, 2]]> : tensor<2x2xi64>,
    window_dilations = array<i64: 3, 1>, window_dimensions = array<i64: 2, 3>,
    window_strides = array<i64: 2, 1>
  }} : (tensor<5x6xi64>, tensor<i64>) -> tensor<4x5xi64>
  func.return %r : tensor<4x5xi64>
}}"""
    _check(text, [RNG.integers(-100, 100, (5, 6))])  # odd sums: no integer average


def test_sort_of_several_operands_keyed_on_the_first_is_stable() -> None:
    t = "tensor<4x6xi64>"
    text = f"""func.func @main(%k: {t}, %v: {t}, %w: tensor<4x6xf32>) -> ({t}, {t}, tensor<4x6xf32>) {{
  %r:3 = "stablehlo.sort"(%k, %v, %w) ({{
    ^bb0(%a: tensor<i64>, %b: tensor<i64>, %c: tensor<i64>, %d: tensor<i64>, %e: tensor<f32>, %f: tensor<f32>):
      %p = stablehlo.compare GT, %a, %b : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
  }}) {{dimension = 1 : i64, is_stable = true}} : ({t}, {t}, tensor<4x6xf32>) -> ({t}, {t}, tensor<4x6xf32>)
  func.return %r#0, %r#1, %r#2 : {t}, {t}, tensor<4x6xf32>
}}"""
    keys = RNG.integers(0, 3, (4, 6))  # many ties: stability decides
    _check(text, [keys, np.arange(24).reshape(4, 6),
                  RNG.standard_normal((4, 6)).astype(np.float32)])


def test_dynamic_pad_and_dynamic_iota_with_constant_shapes() -> None:
    text = """func.func @main(%x: tensor<3x4xf32>, %v: tensor<f32>) -> (tensor<5x8xf32>, tensor<5x8xi32>) {
  %lo = stablehlo.constant dense<[1, -1]> : tensor<2xi64>
  %hi = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
  %in = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
  %p = stablehlo.dynamic_pad %x, %v, %lo, %hi, %in
    : (tensor<3x4xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5x8xf32>
  %s = stablehlo.constant dense<[5, 8]> : tensor<2xi64>
  %i = stablehlo.dynamic_iota %s, dim = 1 : (tensor<2xi64>) -> tensor<5x8xi32>
  func.return %p, %i : tensor<5x8xf32>, tensor<5x8xi32>
}"""
    _check(text, [RNG.standard_normal((3, 4)).astype(np.float32), np.array(-7.5, np.float32)])


def test_map_applies_its_body_to_whole_operands() -> None:
    t = "tensor<3x4xf32>"
    text = f"""func.func @main(%a: {t}, %b: {t}) -> ({t}, {t}) {{
  %r = "stablehlo.map"(%a, %b) ({{
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %c = stablehlo.constant dense<2.5> : tensor<f32>
      %m = stablehlo.multiply %x, %c : tensor<f32>
      %g = stablehlo.compare GT, %m, %y : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %s = stablehlo.select %g, %m, %y : tensor<i1>, tensor<f32>
      stablehlo.return %s : tensor<f32>
  }}) {{dimensions = array<i64: 0, 1>}} : ({t}, {t}) -> {t}
  %k = "stablehlo.map"(%a) ({{
    ^bb0(%x: tensor<f32>):
      %c = stablehlo.constant dense<1.0> : tensor<f32>
      stablehlo.return %c : tensor<f32>
  }}) {{dimensions = array<i64: 0, 1>}} : ({t}) -> {t}
  func.return %r, %k : {t}, {t}
}}"""
    _check(text, [RNG.standard_normal((3, 4)).astype(np.float32),
                  RNG.standard_normal((3, 4)).astype(np.float32)])


_GATHER = """func.func @main(%x: tensor<3x4x2xf32>) -> tensor<2x3x2x2xf32> {
  %i = stablehlo.constant dense<[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]]> : tensor<2x3x2xi64>
  %r = "stablehlo.gather"(%x, %i) {
    dimension_numbers = #stablehlo.gather<offset_dims = [2, 3], collapsed_slice_dims = [0],
                                          start_index_map = [1, 0], index_vector_dim = 2>,
    slice_sizes = array<i64: 1, 2, 2>, indices_are_sorted = false
  } : (tensor<3x4x2xf32>, tensor<2x3x2xi64>) -> tensor<2x3x2x2xf32>
  func.return %r : tensor<2x3x2x2xf32>
}"""

_SCATTER = """func.func @main(%x: tensor<3x4x2xf32>, %u: tensor<2x3x2x2xf32>) -> tensor<3x4x2xf32> {
  %i = stablehlo.constant dense<[[[0, 2], [1, 0], [2, 1]], [[0, 1], [1, 0], [0, 9]]]> : tensor<2x3x2xi64>
  %r = "stablehlo.scatter"(%x, %i, %u) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %0 = stablehlo.BODY %a, %b : tensor<f32>
      stablehlo.return %0 : tensor<f32>
  }) {
    scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [2, 3],
      inserted_window_dims = [0], scatter_dims_to_operand_dims = [1, 0], index_vector_dim = 2>,
    indices_are_sorted = false, unique_indices = false
  } : (tensor<3x4x2xf32>, tensor<2x3x2xi64>, tensor<2x3x2x2xf32>) -> tensor<3x4x2xf32>
  func.return %r : tensor<3x4x2xf32>
}"""


def test_gather_of_a_general_form_with_constant_indices() -> None:
    """Starts past the end ([0, 9]) are clamped, as StableHLO says."""
    _check(_GATHER, [RNG.standard_normal((3, 4, 2)).astype(np.float32)])


@pytest.mark.parametrize("body", ["add", "maximum", "multiply"])
def test_scatter_of_a_general_form_with_constant_indices(body: str) -> None:
    """Windows partly out of bounds drop those elements, as StableHLO says."""
    _check(_SCATTER.replace("BODY", body),
           [RNG.standard_normal((3, 4, 2)).astype(np.float32),
            RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)])


@pytest.mark.parametrize("direction", ["GE", "GT", "LT"])
def test_select_and_scatter_of_a_constant_operand(direction: str) -> None:
    """Overlapping windows (several sources land on one element) and padded windows."""
    operand = RNG.integers(0, 4, (5, 6)).astype(np.float32)  # ties: GE keeps the first
    # written out element by element: numpy's printing follows process-wide print options
    literal = "[" + ", ".join("[" + ", ".join(f"{v:.1f}" for v in row) + "]"
                              for row in operand) + "]"
    text = f"""func.func @main(%s: tensor<3x3xf32>) -> tensor<5x6xf32> {{
  %o = stablehlo.constant dense<{literal}> : tensor<5x6xf32>
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%o, %s, %init) ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %0 = stablehlo.compare {direction}, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %0 : tensor<i1>
  }}, {{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %0 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %0 : tensor<f32>
  }}) {{
    window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 2, 2>,
    padding = dense<[[1, 1], [0, 1]]> : tensor<2x2xi64>
  }} : (tensor<5x6xf32>, tensor<3x3xf32>, tensor<f32>) -> tensor<5x6xf32>
  func.return %r : tensor<5x6xf32>
}}"""
    _check(text, [RNG.standard_normal((3, 3)).astype(np.float32)])


def test_select_and_scatter_from_another_initial_value_stays_opaque() -> None:
    """The spec says init + the selected sources; the reference interpreter adds the
    initial value once more per source: no form is imported until they agree."""
    text = """func.func @main(%s: tensor<2xf32>) -> tensor<4xf32> {
  %o = stablehlo.constant dense<[1.0, 5.0, 2.0, 0.0]> : tensor<4xf32>
  %init = stablehlo.constant dense<0.5> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%o, %s, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %0 = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %0 : tensor<i1>
  }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %0 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %0 : tensor<f32>
  }) {window_dimensions = array<i64: 2>, window_strides = array<i64: 2>}
    : (tensor<4xf32>, tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}"""
    s = np.array([10.0, 100.0], np.float32)
    assert evaluate(text, [s])[0].tolist() == [0.5, 11.0, 101.0, 0.5]  # not 10.5, 100.5
    with pytest.warns(UserWarning, match="opaque"):
        model = from_mlir(text)
    assert [n.op for _, n in model.all_nodes() if n.domain] == ["select_and_scatter"]


def test_tuples_group_values_and_get_tuple_element_reads_them() -> None:
    text = """func.func @main(%a: tensor<2xf32>, %b: tensor<i64>) -> (tensor<2xf32>, tensor<i64>) {
  %e = stablehlo.tuple : tuple<>
  %t1 = stablehlo.tuple %b, %e : tuple<tensor<i64>, tuple<>>
  %t = stablehlo.tuple %a, %t1 : tuple<tensor<2xf32>, tuple<tensor<i64>, tuple<>>>
  %x = stablehlo.get_tuple_element %t[0] : (tuple<tensor<2xf32>, tuple<tensor<i64>, tuple<>>>) -> tensor<2xf32>
  %u = stablehlo.get_tuple_element %t[1] : (tuple<tensor<2xf32>, tuple<tensor<i64>, tuple<>>>) -> tuple<tensor<i64>, tuple<>>
  %y = stablehlo.get_tuple_element %u[0] : (tuple<tensor<i64>, tuple<>>) -> tensor<i64>
  %z = stablehlo.add %x, %x : tensor<2xf32>
  func.return %z, %y : tensor<2xf32>, tensor<i64>
}"""
    _check(text, [np.array([1.5, -2.0], np.float32), np.array(7)])


def test_gather_of_a_general_form_with_run_time_indices() -> None:
    """The same gather with the indices an argument: clamping done by IR ops."""
    text = _GATHER.replace("(%x: tensor<3x4x2xf32>)",
                           "(%x: tensor<3x4x2xf32>, %j: tensor<2x3x2xi32>)")
    text = text.replace("  %i = stablehlo.constant", "  %c = stablehlo.constant")
    text = text.replace('"stablehlo.gather"(%x, %i)', '"stablehlo.gather"(%x, %j)')
    text = text.replace("(tensor<3x4x2xf32>, tensor<2x3x2xi64>)",
                        "(tensor<3x4x2xf32>, tensor<2x3x2xi32>)")
    index = np.array([[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]], np.int32)
    index[1, 1] = [-4, 3]  # clamped up to 0
    _check(text, [RNG.standard_normal((3, 4, 2)).astype(np.float32), index])


def test_gather_with_batching_dims_and_run_time_indices() -> None:
    text = """func.func @main(%x: tensor<2x3x4x2xf32>, %i: tensor<2x2x3x2xi64>) -> tensor<2x2x3x2x2xf32> {
  %r = "stablehlo.gather"(%x, %i) {
    dimension_numbers = #stablehlo.gather<offset_dims = [3, 4], collapsed_slice_dims = [1],
      operand_batching_dims = [0], start_indices_batching_dims = [1],
      start_index_map = [2, 1], index_vector_dim = 3>,
    slice_sizes = array<i64: 1, 1, 2, 2>, indices_are_sorted = false
  } : (tensor<2x3x4x2xf32>, tensor<2x2x3x2xi64>) -> tensor<2x2x3x2x2xf32>
  func.return %r : tensor<2x2x3x2x2xf32>
}"""
    _check(text, [RNG.standard_normal((2, 3, 4, 2)).astype(np.float32),
                  RNG.integers(-1, 5, (2, 2, 3, 2))])


@pytest.mark.parametrize("body", ["add", "maximum"])
def test_scatter_of_a_general_form_with_run_time_indices(body: str) -> None:
    """Out-of-bounds update elements (partly outside windows, negative starts) dropped
    by IR ops: they go to a spare element."""
    text = _SCATTER.replace("BODY", body)
    text = text.replace("%u: tensor<2x3x2x2xf32>)", "%u: tensor<2x3x2x2xf32>, %j: tensor<2x3x2xi64>)")
    text = text.replace('"stablehlo.scatter"(%x, %i, %u)', '"stablehlo.scatter"(%x, %j, %u)')
    index = np.array([[[0, 2], [1, 0], [2, 1]], [[0, 1], [-1, 0], [0, 9]]], np.int64)
    _check(text, [RNG.standard_normal((3, 4, 2)).astype(np.float32),
                  RNG.standard_normal((2, 3, 2, 2)).astype(np.float32), index])
