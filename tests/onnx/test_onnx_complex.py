"""Complex values in the ONNX export (converters/onnx/_complex.py): every complex tensor is
a float [..., 2] (real, imag) tensor in the file. The exported pairs run in the real
onnxruntime and are compared with numpy (and eager torch, for the semantics numpy does
not share) on complex inputs, complex graph inputs and outputs included.

Tolerances: complex64 results are computed in float64 inside the file and rounded once,
so they sit within a few float32 ulps of numpy's float64 result: rtol 1e-6, atol 1e-6
(inputs of magnitude ~1, transforms of <= 16 points). complex128 ones within 1e-12 (the
forward DFT of onnxruntime measured 5e-15 off numpy in float64)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnxtools import model_of, session

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.converters.onnx._complex import (
    MODEL_META_COMPLEX,
    complex_values,
    from_pairs,
    to_pairs,
)
from irbridge.converters.onnx.verify import export_verified, verify_onnx
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Tensor, TensorType, Value
from irbridge.ops.examples import build_example

C64, C128, F32, F64 = DType.COMPLEX64, DType.COMPLEX128, DType.FLOAT32, DType.FLOAT64
COMPLEX_OPS = ["complex", "polar", "real", "imag", "conj", "complex_abs", "angle",
               "view_as_real", "view_as_complex", "fft_r2c", "fft_c2c", "fft_c2r"]
TOL = {C64: (1e-6, 1e-6), F32: (1e-6, 1e-6), C128: (1e-12, 1e-12), F64: (1e-12, 1e-12)}


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The file on `feeds` (complex ones fed as pairs), complex outputs read back."""
    paired = complex_values(proto)
    sess = session(proto)
    got = sess.run(None, {k: to_pairs(v) if k in paired else v for k, v in feeds.items()})
    return [from_pairs(g, paired[o.name]) if o.name in paired else g
            for o, g in zip(sess.get_outputs(), got, strict=True)]


def _complex(shape: Sequence[int], dtype: DType, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype.numpy)


def _model(build: Callable[[GraphBuilder, list[Value]], list[Value]],
           *types: TensorType) -> Model:
    graph = Graph("g")
    b = GraphBuilder(graph)
    ins = [graph.add_input(f"x{i}", t) for i, t in enumerate(types)]
    graph.set_outputs(build(b, ins))
    return model_of(graph)


def _close(got: np.ndarray, want: np.ndarray, dtype: DType) -> None:
    rtol, atol = TOL[dtype]
    assert got.dtype == dtype.numpy and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- every registry example ---------------------------------------------------------------

@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize("name", COMPLEX_OPS)
def test_every_complex_op_exports_on_pairs(name: str, opset: int) -> None:
    """The registry example of each complex op: the file (pairs in, pairs out) against the
    IR reference executor (numpy), at the DFT's opset 17 form, the default and the opset
    20 form; the imported file is a real model on pairs with the same numbers."""
    built = build_example(name)
    model = model_of(built.graph)
    feeds = {k: (_complex(v.shape, DType.from_numpy(v.dtype), 3) if v.dtype.kind == "c"
                 else v) for k, v in built.feeds.items()}
    expected = run_model(model, feeds)
    proto = to_onnx(model, opset=opset)
    for got, want in zip(_run(proto, feeds), expected, strict=True):
        _close(got, want, DType.from_numpy(want.dtype))
    if name.startswith("fft_"):  # DFT imports as an opaque node the executor cannot run
        return
    # imported back: a real model whose inputs and outputs are the pairs
    back, _ = from_onnx(proto)
    paired = complex_values(proto)
    again = run_model(back, {k: to_pairs(v) if k in paired else v for k, v in feeds.items()})
    names = [o.name for o in proto.graph.output]
    for name_, got, want in zip(names, again, expected, strict=True):
        ref = to_pairs(want) if name_ in paired else want
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_dft_form_follows_the_opset() -> None:
    model = _model(lambda b, v: [b.op("fft_c2c", [v[0]], {"dims": (0,)})],
                   TensorType(C64, (8,)))
    old = next(n for n in to_onnx(model, opset=18).graph.node if n.op_type == "DFT")
    new = next(n for n in to_onnx(model, opset=20).graph.node if n.op_type == "DFT")
    assert {a.name for a in old.attribute} >= {"axis"} and len(old.input) == 1
    assert "axis" not in {a.name for a in new.attribute} and len(new.input) == 3
    with pytest.raises(ExportError, match=r"^node #0 fft_c2c: ONNX DFT needs opset 17"):
        to_onnx(model, opset=16)


# -- complex graph inputs and outputs against numpy ----------------------------------------

@pytest.mark.parametrize("opset", [18, 20])
@pytest.mark.parametrize("dtype", [C64, C128])
def test_complex_graph_input_and_output_against_numpy(dtype: DType, opset: int) -> None:
    def build(b: GraphBuilder, v: list[Value]) -> list[Value]:
        x, y = v
        prod = b.op("mul", [x, y])
        quot = b.op("div", [x, y])
        mixed = b.op("sub", [b.op("add", [b.op("neg", [x]), b.op("conj", [y])]), prod])
        fwd = b.op("fft_c2c", [x], {"dims": (0, 1), "normalization": "by_root_n"})
        inv = b.op("fft_c2c", [y], {"dims": (1,), "forward": False, "normalization": "by_n"})
        c2r = b.op("fft_c2r", [x], {"dims": (1,), "last_dim_size": 7})
        return [prod, quot, mixed, fwd, inv, c2r, b.op("complex_abs", [x]),
                b.op("real", [quot]), b.op("imag", [quot])]

    t = TensorType(dtype, (3, 4))
    model = _model(build, t, t)
    proto = to_onnx(model, opset=opset)
    # the file's own inputs and outputs are float [..., 2], and say so
    real = F32 if dtype == C64 else F64
    kind = onnx.helper.np_dtype_to_tensor_dtype(real.numpy)
    for info in [*proto.graph.input, proto.graph.output[0]]:
        assert info.type.tensor_type.elem_type == kind
        assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [3, 4, 2]
        assert "(real, imag)" in info.doc_string
    meta = {p.key: p.value for p in proto.metadata_props}
    assert MODEL_META_COMPLEX in meta and set(complex_values(proto)) >= {"x0", "x1"}
    x, y = _complex((3, 4), dtype, 1), _complex((3, 4), dtype, 2)
    got = _run(proto, {"x0": x, "x1": y})
    x128, y128 = x.astype(np.complex128), y.astype(np.complex128)
    want = [x128 * y128, x128 / y128, -x128 + np.conj(y128) - x128 * y128,
            np.fft.fftn(x128, norm="ortho"), np.fft.ifft(y128, axis=1),
            np.fft.irfft(x128, n=7, axis=1) * 7, np.abs(x128), (x128 / y128).real, (x128 / y128).imag]
    for g, w, out in zip(got, want, model.graphs[0].outputs, strict=True):
        assert out.type is not None
        _close(g, w.astype(out.type.dtype.numpy), out.type.dtype)


def test_angle_of_complex64_against_numpy_and_of_complex128_refused() -> None:
    """angle is the neutral atan2 on the parts: onnxruntime's Atan has no float64 kernel,
    so complex128's is refused (one line naming the node), complex64's written."""
    x = _complex((6,), C64, 8)
    model = _model(lambda b, v: [b.op("angle", v)], TensorType(C64, (6,)))
    (got,) = _run(to_onnx(model), {"x0": x})
    _close(got, np.angle(x.astype(np.complex128)).astype(np.float32), F32)
    wide = _model(lambda b, v: [b.op("angle", v)], TensorType(C128, (6,)))
    with pytest.raises(ExportError, match=r"^node #0 angle: cannot export to ONNX opset 18: "
                                          r"ONNX Atan takes no f64"):
        to_onnx(wide)


@pytest.mark.parametrize("onesided", [True, False])
@pytest.mark.parametrize("norm", ["none", "by_root_n", "by_n"])
def test_real_to_complex_transforms_against_numpy(onesided: bool, norm: str) -> None:
    model = _model(lambda b, v: [b.op("fft_r2c", [v[0]], {
        "dims": (0, 2), "onesided": onesided, "normalization": norm})],
        TensorType(F32, (5, 3, 6)))
    x = np.random.default_rng(4).standard_normal((5, 3, 6)).astype(np.float32)
    want = (np.fft.rfftn if onesided else np.fft.fftn)(x.astype(np.float64), axes=(0, 2))
    want = want / {"none": 1, "by_root_n": np.sqrt(30), "by_n": 30}[norm]
    (got,) = _run(to_onnx(model), {"x0": x})
    _close(got, want.astype(np.complex64), C64)


@pytest.mark.parametrize(("bins", "length"), [(4, 6), (4, 7), (6, 6), (3, 9), (5, 2)])
def test_complex_to_real_cuts_or_pads_the_half_spectrum_as_numpy(bins: int,
                                                                 length: int) -> None:
    """numpy's irfft: bins beyond L//2 dropped, missing ones zero; the imaginary parts of
    bin 0 (and of bin L/2 for even L) ignored -- a spectrum that is not Hermitian."""
    model = _model(lambda b, v: [b.op("fft_c2r", [v[0]], {
        "dims": (0,), "last_dim_size": length, "normalization": "by_n"})],
        TensorType(C128, (bins, 2)))
    x = _complex((bins, 2), C128, 5)
    (got,) = _run(to_onnx(model), {"x0": x})
    _close(got, np.fft.irfft(x, n=length, axis=0), F64)


# -- casts, plumbing, data movement -----------------------------------------------------

def test_casts_to_from_and_between_complex_types() -> None:
    def build(b: GraphBuilder, v: list[Value]) -> list[Value]:
        z = b.op("cast", [v[0]], {"dtype": C64})
        return [z, b.op("cast", [v[1]], {"dtype": F32}), b.op("cast", [v[1]], {"dtype": DType.BOOL}),
                b.op("cast", [v[1]], {"dtype": C128}), b.op("cast", [v[1]], {"dtype": DType.INT64})]

    model = _model(build, TensorType(DType.INT32, (5,)), TensorType(C64, (5,)))
    a = np.array([-2, 0, 3, 7, 1], np.int32)
    z = np.array([1.5 + 0j, 0j, -0.0 + 2j, 3.7 - 1j, np.nan + 0j], np.complex64)
    got = _run(to_onnx(model), {"x0": a, "x1": z})
    want = [a.astype(np.complex64), z.real, z != 0, z.astype(np.complex128),
            np.array([1, 0, 0, 3], np.int64)]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])
    np.testing.assert_array_equal(got[4][:4], want[4])  # NaN -> int is unspecified


def test_data_movement_on_complex_values() -> None:
    def build(b: GraphBuilder, v: list[Value]) -> list[Value]:
        x, c = v
        r = b.op("reshape", [x], {"shape": (4, 3)})
        p = b.op("permute", [r], {"perm": (1, 0)})
        s = b.op("slice", [p], {"starts": (1,), "ends": (3,), "axes": (-1,)})
        g = b.op("gather", [x, b.constant(np.array([2, 0], np.int64))], {"axis": -1})
        cat = b.op("concat", [s, b.op("unsqueeze", [b.op("squeeze", [
            b.op("reduce_sum", [x], {"axes": (1,), "keepdims": True})], {"axes": (1,)})],
            {"axes": (0,)})], {"axis": 0})
        pad = b.op("pad", [x], {"pads": (1, 0, 0, 2)})
        w = b.op("where", [c, x, b.op("conj", [x])])
        return [s, g, cat, pad, w, b.op("tile", [x], {"repeats": (1, 2)}),
                b.op("expand", [b.op("slice", [x], {"starts": (0,), "ends": (1,),
                                                    "axes": (0,)})], {"shape": (3, 2, 6)})]

    model = _model(build, TensorType(C64, (2, 6)), TensorType(DType.BOOL, (2, 6)))
    x = _complex((2, 6), C64, 6)
    c = np.random.default_rng(7).integers(0, 2, (2, 6)).astype(bool)
    got = _run(to_onnx(model), {"x0": x, "x1": c})
    s = x.reshape(4, 3).T[:, 1:3]
    want = [s, x[:, [2, 0]], np.concatenate([s, x.sum(axis=1)[None]], axis=0),
            np.pad(x, ((1, 0), (0, 2))), np.where(c, x, np.conj(x)), np.tile(x, (1, 2)),
            np.broadcast_to(x[:1], (3, 2, 6))]
    for g, w in zip(got, want, strict=True):
        _close(g, w.astype(np.complex64), C64)


def test_complex_and_polar_broadcast_and_special_values() -> None:
    model = _model(lambda b, v: [b.op("complex", v), b.op("polar", v)],
                   TensorType(F32, (4, 1)), TensorType(F32, (3,)))
    a = np.array([[0.0], [np.inf], [np.nan], [-2.5]], np.float32)
    b = np.array([0.0, -1.0, 3.0], np.float32)
    got = _run(to_onnx(model), {"x0": a, "x1": b})
    np.testing.assert_array_equal(got[0], (a + 0j) + 1j * b)
    with np.errstate(invalid="ignore"):
        want = torch.polar(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(got[1], want, rtol=1e-6, atol=1e-6)


def test_arithmetic_special_values_as_eager_torch() -> None:
    """c10::complex's division (Smith's, with its 0 / 0 branch) and modulus on inf, nan
    and zero operands: the file gives eager torch's numbers."""
    values = np.array([0, 1, -2, np.inf, -np.inf, np.nan, 1e-30, 3e30], np.float32)
    re, im = np.meshgrid(values, values)
    z = (re + 1j * im).astype(np.complex64).reshape(-1)
    w = z[::-1].copy()
    model = _model(lambda b, v: [b.op("div", v), b.op("mul", v), b.op("complex_abs", [v[0]]),
                                 b.op("angle", [v[0]])],
                   TensorType(C64, z.shape), TensorType(C64, z.shape))
    got = _run(to_onnx(model), {"x0": z, "x1": w})
    tz, tw = torch.from_numpy(z), torch.from_numpy(w)
    want = [(tz / tw).numpy(), (tz * tw).numpy(), tz.abs().numpy(), tz.angle().numpy()]
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=0, equal_nan=True)


# -- refusals, verification ---------------------------------------------------------------

def test_unmapped_complex_op_is_refused_with_one_line() -> None:
    model = _model(lambda b, v: [b.op("cumsum", [v[0]], {"axis": 0})], TensorType(C64, (4,)))
    with pytest.raises(ExportError) as exc:
        to_onnx(model)
    text = str(exc.value)
    assert text.startswith("node #0 cumsum: neutral op 'cumsum' on complex values has no "
                           "ONNX mapping") and "\n" not in text


def test_complex_pad_with_a_nonzero_value_is_refused() -> None:
    model = _model(lambda b, v: [b.op("pad", [v[0]], {"pads": (1, 1), "value": 2.0})],
                   TensorType(C64, (4,)))
    with pytest.raises(ExportError, match=r"^node #0 pad: cannot export to ONNX on \(real, "
                                          r"imag\) pairs: pad value 2.0"):
        to_onnx(model)


def test_verify_onnx_feeds_and_reads_pairs_and_catches_a_wrong_file() -> None:
    model = _model(lambda b, v: [b.op("fft_c2c", [b.op("mul", v)], {"dims": (1,)})],
                   TensorType(C64, (2, 5)), TensorType(C64, (2, 5)))
    proto = to_onnx(model)
    report = verify_onnx(model, proto)
    assert report.passed, report.summary()
    assert report.outputs[0].dtype == "c64" and report.outputs[0].max_abs_error < 1e-5
    # the same file with real and imaginary parts of the output swapped must fail
    last = proto.graph.node[-1]
    swapped = onnx.helper.make_node("Gather", [last.output[0] + "_pre", "swap"],
                                    [last.output[0]], axis=-1)
    last.output[0] += "_pre"
    proto.graph.node.append(swapped)
    proto.graph.initializer.append(onnx.numpy_helper.from_array(
        np.array([1, 0], np.int64), "swap"))
    report = verify_onnx(model, proto)
    assert not report.passed and not report.error


def test_captured_torch_fft_model_against_eager() -> None:
    """A torch module with complex intermediates (rfft, a complex weight, irfft) through
    capture and the export: the file against eager torch."""
    from irbridge.converters.pytorch import capture

    class Filter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(5, dtype=torch.complex64,
                                                    generator=torch.Generator().manual_seed(0)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.irfft(torch.fft.rfft(x) * self.w, n=8)

    module = Filter()
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    cap = capture(module, (x,), frontend="export")
    (got,) = _run(to_onnx(cap.model), {next(iter(cap.inputs)): x.numpy()})
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_matmul_comparisons_and_shape_of_complex_values() -> None:
    def build(b: GraphBuilder, v: list[Value]) -> list[Value]:
        x, y, w = v
        return [b.op("matmul", [x, y]), b.op("matmul", [w, y]), b.op("equal", [x, w]),
                b.op("not_equal", [x, w]), b.op("isnan", [x]), b.op("isinf", [x]),
                b.op("shape_of", [x], {"start": -1}), b.op("flatten", [y], {"start_axis": 0}),
                b.op("reciprocal", [w])]

    model = _model(build, TensorType(C64, (2, 3, 4)), TensorType(C64, (4, 5)),
                   TensorType(C64, (3, 4)))
    x, y, w = _complex((2, 3, 4), C64, 9), _complex((4, 5), C64, 10), _complex((3, 4), C64, 11)
    x[0, 0, 0], x[0, 1, 1], x[1, 2, 3] = complex(np.nan, 1), complex(1, -np.inf), w[2, 3]
    x[1, 0, 1] = complex(w[0, 1].real, 7)  # equal real parts only
    w[1, 1] = 0
    got = _run(to_onnx(model), {"x0": x, "x1": y, "x2": w})
    tx, ty, tw = (torch.from_numpy(a) for a in (x, y, w))
    finite = np.isfinite(x).all(axis=-1, keepdims=True)
    np.testing.assert_allclose(np.where(finite, got[0], 0), np.where(finite, (tx @ ty).numpy(), 0),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], (tw @ ty).numpy(), rtol=1e-5, atol=1e-5)
    for g, e in zip(got[2:6], [tx == tw, tx != tw, tx.isnan(), tx.isinf()], strict=True):
        np.testing.assert_array_equal(g, e.numpy())
    np.testing.assert_array_equal(got[6], [4])
    np.testing.assert_array_equal(got[7], y.reshape(-1))
    np.testing.assert_allclose(got[8], tw.reciprocal().numpy(), rtol=1e-6, atol=0,
                               equal_nan=True)


def test_export_verified_writes_a_file_with_a_complex_weight_input_and_output(
        tmp_path: Path) -> None:
    """The `irbridge export --verify` path: a complex weight (an initializer of pairs), a
    complex graph input (random real and imaginary parts) and output, written and checked
    against the IR; the file read back holds the pairs the metadata names."""
    graph = Graph("g")
    b = GraphBuilder(graph)
    x = graph.add_input("x", TensorType(C64, (2, 6)))
    w = b.parameter(Tensor.from_array("w", _complex((6,), C64, 12)))
    graph.set_outputs([b.op("fft_c2c", [b.op("mul", [x, w])], {"dims": (1,)})])
    model = model_of(graph)
    # optimize=False: the clean-up pass would fold the weight's part slices into constants
    report = export_verified(model, tmp_path / "m.onnx", optimize=False)
    assert report.passed and report.outputs[0].dtype == "c64"
    proto = onnx.load(str(tmp_path / "m.onnx"))
    weight = next(t for t in proto.graph.initializer if t.name == "w")
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(weight),
                                  to_pairs(_complex((6,), C64, 12)))
    assert set(complex_values(proto)) == {"x", proto.graph.output[0].name}
    x_value = _complex((2, 6), C64, 13)
    (got,) = _run(proto, {"x": x_value})
    want = np.fft.fft(x_value.astype(np.complex128) * _complex((6,), C64, 12), axis=1)
    _close(got, want.astype(np.complex64), C64)


def test_generated_complex_tensors_are_pair_constants() -> None:
    """full and range (StableHLO's iota) of a complex type: the file holds their pairs."""
    graph = Graph("g")
    b = GraphBuilder(graph)
    graph.set_outputs([b.op("full", [], {"shape": (2, 3), "value": -1.5, "dtype": C64}),
                       b.op("range", [], {"start": 1.0, "limit": 4.0, "dtype": C128})])
    got = _run(to_onnx(model_of(graph)), {})
    np.testing.assert_array_equal(got[0], np.full((2, 3), -1.5 + 0j, np.complex64))
    np.testing.assert_array_equal(got[1], np.array([1, 2, 3], np.complex128))
