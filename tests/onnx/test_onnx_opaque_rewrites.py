"""Opaque ONNX nodes that onnxruntime cannot run as imported, exported in exact equivalent
forms (`converters/onnx/_export_opaque.py`, `write_opaque`'s type legalisation), and the
boolean ReduceMax / ReduceMin over an empty set: onnxruntime runs each export and gives the
values of onnx's reference evaluator or of numpy, computed from the original model."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnxtools import onnx_model, ort_run, tensor

from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.executor import run_model

F, I32, I64, U8, BOOL, BF16 = (TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64,
                               TensorProto.UINT8, TensorProto.BOOL, TensorProto.BFLOAT16)


def _export(model: onnx.ModelProto) -> onnx.ModelProto:
    imported, _ = from_onnx(model)
    return to_onnx(imported)


# -- RNN / GRU / LSTM with layout=1 ------------------------------------------------------------

@pytest.mark.parametrize("op,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
@pytest.mark.parametrize("directions", [1, 2])
def test_batch_major_recurrent_ops_run_as_transposes(op: str, gates: int,
                                                     directions: int) -> None:
    batch, seq, size, hidden = 3, 5, 4, 6
    rng = np.random.default_rng(gates * 10 + directions)
    names = ["X", "W", "R", "B", "", "initial_h"] + (["initial_c"] if op == "LSTM" else [])
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    feeds = {
        "X": rng.standard_normal((batch, seq, size), dtype=np.float32),
        "W": rng.standard_normal((directions, gates * hidden, size), dtype=np.float32) / 2,
        "R": rng.standard_normal((directions, gates * hidden, hidden), dtype=np.float32) / 2,
        "B": rng.standard_normal((directions, 2 * gates * hidden), dtype=np.float32) / 2,
        "initial_h": rng.standard_normal((batch, directions, hidden), dtype=np.float32),
        "initial_c": rng.standard_normal((batch, directions, hidden), dtype=np.float32),
    }
    direction = "bidirectional" if directions == 2 else "forward"
    node = helper.make_node(op, names, outputs, hidden_size=hidden, layout=1,
                            direction=direction)
    # a dynamic sequence length keeps the node opaque (a static one is unrolled on import)
    shapes = {n: ([batch, "T", size] if n == "X" else list(feeds[n].shape)) for n in feeds}
    model = onnx_model([node], [tensor(n, F, shapes[n]) for n in names if n],
                       [tensor("Y", F, [batch, "T", directions, hidden])]
                       + [tensor(n, F, [batch, directions, hidden]) for n in outputs[1:]],
                       opset=22)
    feeds = {n: feeds[n] for n in names if n}
    expected = ReferenceEvaluator(model).run(None, feeds)
    imported, _ = from_onnx(model)
    assert [n.op for _, n in imported.all_nodes() if n.is_opaque] == [op]
    exported = to_onnx(imported)
    assert all(a.name != "layout" or a.i == 0 for n in exported.graph.node for a in n.attribute)
    got = ort_run(exported, feeds)
    assert [g.shape for g in got] == [e.shape for e in expected]
    for g, e in zip(got, expected, strict=True):
        # float32 recurrences of 5 steps: onnxruntime's MLAS GEMMs against numpy's
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


# -- ConvInteger with a zero point per output channel --------------------------------------------

def _conv_integer(x: np.ndarray, w: np.ndarray, xz: int, wz: np.ndarray, pads: int,
                  stride: int, group: int) -> np.ndarray:
    """sum (x - xz)(w - wz[m]) over each window, in int64 (x padded with xz)."""
    xs = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    ws = w.astype(np.int64) - wz.astype(np.int64).reshape(-1, 1, 1, 1)
    n, _, h, width = xs.shape
    m, per, kh, kw = ws.shape
    out = np.zeros((n, m, (h - kh) // stride + 1, (width - kw) // stride + 1), np.int64)
    for o in range(m):
        g = o // (m // group)
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                window = xs[:, g * per:(g + 1) * per, i * stride:i * stride + kh,
                            j * stride:j * stride + kw]
                out[:, o, i, j] = (window * ws[o]).sum(axis=(1, 2, 3))
    return out.astype(np.int32)


@pytest.mark.parametrize("pads,stride,group", [(1, 1, 1), (0, 2, 2), (2, 1, 2)])
def test_conv_integer_with_per_channel_zero_point(pads: int, stride: int, group: int) -> None:
    rng = np.random.default_rng(pads + stride + group)
    x = rng.integers(0, 256, (2, 4, 6, 7), dtype=np.uint8)
    w = rng.integers(0, 256, (6, 4 // group, 3, 3), dtype=np.uint8)
    xz, wz = np.uint8(17), rng.integers(0, 256, 6, dtype=np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"],
                            pads=[pads] * 4, strides=[stride] * 2, group=group)
    model = onnx_model([node], [tensor("x", U8, x.shape), tensor("w", U8, w.shape),
                                tensor("xz", U8, []), tensor("wz", U8, [6])],
                       [tensor("y", I32, [2, 6, None, None])], opset=10)
    feeds = {"x": x, "w": w, "xz": np.array(xz), "wz": wz}
    (got,) = ort_run(_export(model), feeds)
    np.testing.assert_array_equal(got, _conv_integer(x, w, int(xz), wz, pads, stride, group))


# -- Scan read at opset 8 -----------------------------------------------------------------------

def test_scan_8_with_a_batch_exports_as_a_loop_of_scan_9() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "a"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "b"], ["prod"])],
        "body", [tensor("acc", F, [2]), tensor("a", F, [2]), tensor("b", F, [2])],
        [tensor("acc_out", F, [2]), tensor("prod", F, [2])])
    node = helper.make_node("Scan", ["", "init", "xa", "xb"], ["final", "prods"],
                            num_scan_inputs=2, body=body, directions=[0, 1])
    model = onnx_model([node], [tensor("init", F, [3, 2]), tensor("xa", F, [3, 4, 2]),
                                tensor("xb", F, [3, 4, 2])],
                       [tensor("final", F, [3, 2]), tensor("prods", F, [3, 4, 2])], opset=8)
    rng = np.random.default_rng(8)
    init, xa, xb = (rng.standard_normal(s, dtype=np.float32)
                    for s in ((3, 2), (3, 4, 2), (3, 4, 2)))
    acc, prods = init.copy(), np.zeros_like(xa)
    for t in range(4):  # xa forward, xb reversed; outputs in iteration order
        acc = acc + xa[:, t]
        prods[:, t] = acc * xb[:, 3 - t]
    exported = _export(model)
    assert exported.opset_import[0].version >= 9
    final, got = ort_run(exported, {"init": init, "xa": xa, "xb": xb})
    np.testing.assert_allclose(final, acc, rtol=1e-6)  # the same float32 adds, in order
    np.testing.assert_allclose(got, prods, rtol=1e-6)


# -- bfloat16 data movement ---------------------------------------------------------------------

def test_bfloat16_compress_and_reverse_sequence_move_the_values() -> None:
    # bfloat16 Compress and ReverseSequence are opset 28 (onnxruntime runs up to 26)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=BF16),
             helper.make_node("Compress", ["xb", "keep"], ["kept"], axis=1),
             helper.make_node("ReverseSequence", ["kept", "lens"], ["rev"], batch_axis=1,
                              time_axis=0),
             helper.make_node("Cast", ["rev"], ["y"], to=F)]
    model = onnx_model(nodes, [tensor("x", F, [4, 5]), tensor("keep", BOOL, [5]),
                               tensor("lens", I64, [3])], [tensor("y", F, [4, 3])], opset=28)
    x = np.linspace(-3.3, 7.1, 20, dtype=np.float32).reshape(4, 5)
    keep = np.array([True, False, True, True, False])
    lens = np.array([4, 1, 2])
    expected = x.astype(ml_dtypes.bfloat16).astype(np.float32)[:, keep]
    for b, n in enumerate(lens):
        expected[:n, b] = expected[:n, b][::-1].copy()
    exported = _export(model)
    onnx.checker.check_model(exported, full_check=True)
    (got,) = ort_run(exported, {"x": x, "keep": keep, "lens": lens})
    np.testing.assert_array_equal(got, expected)


# -- boolean ReduceMax / ReduceMin over an empty set ----------------------------------------------

@pytest.mark.parametrize("op,identity", [("ReduceMax", False), ("ReduceMin", True)])
@pytest.mark.parametrize("runtime_axes", [True, False])
def test_bool_reduce_over_an_empty_set_gives_the_identity(op: str, identity: bool,
                                                          runtime_axes: bool) -> None:
    inputs = [tensor("x", BOOL, [2, 0, 4])]
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)]
    if runtime_axes:
        inputs.append(tensor("axes", I64, [1]))
    else:
        nodes.insert(0, helper.make_node("Constant", [], ["axes"], value=helper.make_tensor(
            "axes", I64, [1], [1])))
    model = onnx_model(nodes, inputs, [tensor("y", BOOL, [2, 1, 4])], opset=20)
    feeds = {"x": np.zeros((2, 0, 4), bool)}
    if runtime_axes:
        feeds["axes"] = np.array([1])
    expected = np.full((2, 1, 4), identity)  # any / all of nothing
    imported, _ = from_onnx(model)
    np.testing.assert_array_equal(run_model(imported, feeds)[0], expected)
    (got,) = ort_run(to_onnx(imported), feeds)
    np.testing.assert_array_equal(got, expected)
    data = np.array([[[True, False]], [[False, False]]]).reshape(2, 1, 2).repeat(2, axis=1)
    feeds["x"] = data  # and a non-empty set: any / all along axis 1
    model.graph.input[0].CopyFrom(tensor("x", BOOL, [2, 2, 2]))
    imported, _ = from_onnx(model)
    (got,) = ort_run(to_onnx(imported), feeds)
    np.testing.assert_array_equal(got, data.max(1, keepdims=True) if op == "ReduceMax"
                                  else data.min(1, keepdims=True))


# -- float16 ops written as they were --------------------------------------------------------------

def _backend_case(name: str) -> tuple[onnx.ModelProto, list[np.ndarray], list[np.ndarray]]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = next(c for c in collect_testcases(None) if c.name == name)
    inputs, outputs = case.data_sets[0]
    return case.model, [np.asarray(x) for x in inputs], [np.asarray(x) for x in outputs]


def test_float16_attention_exports_its_float16_ops_and_matches_onnx_expected_values() -> None:
    # onnx's backend test: Softmax / MatMul / Where on float16, which onnxruntime's CPU
    # provider runs in float32 itself; casts written around each of them would round every
    # intermediate to float16 and leave two outputs 2 ulps outside the case's rtol 1e-3
    model, inputs, (expected,) = _backend_case("test_attention_4d_causal_fp16_expanded")
    imported, _ = from_onnx(model)
    exported = to_onnx(imported)
    casts = sum(n.op_type == "Cast" for n in exported.graph.node)
    assert casts <= sum(n.op_type == "Cast" for n in model.graph.node)
    feeds = {v.name: x for v, x in zip(model.graph.input, inputs, strict=True)}
    (got,) = ort_run(exported, feeds)
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=1e-3, atol=1e-7)  # the case's own tolerance
    (native,) = ort_run(model, feeds)  # and what onnxruntime gives on the original
    np.testing.assert_array_equal(got, native)


# -- float16 / bfloat16 Range -------------------------------------------------------------------

RANGE_CASES = [
    (1.0, 5.0, 2.0),
    (-3.5, 7.25, 0.75),
    (10.0, -2.0, -1.5),
    (1000.0, 1001.0, 0.0010004),  # start + i * delta needs more than 24 bits
    (-2.0**-24, 1000.0, 256.25),  # 768.75 - 2^-24: float32 rounds it onto a float16 tie
    (2.0**-24, 1000.0, 256.25),
    (0.1, 0.2, 2.0**-20),
]


@pytest.mark.parametrize("elem,dtype", [(TensorProto.FLOAT16, np.float16),
                                        (BF16, ml_dtypes.bfloat16)])
def test_narrow_range_rounds_the_exact_values_once(elem: int, dtype: type) -> None:
    # float16 / bfloat16 Range is opset 27; the export (opset 26 at most) computes it in
    # float64: every output equals the exact start + i * delta rounded to the type as
    # numpy (float16) / ml_dtypes (bfloat16, through float32) round the float64 value
    nodes = [*(helper.make_node("Cast", [n], [f"{n}_t"], to=elem) for n in "sld"),
             helper.make_node("Range", ["s_t", "l_t", "d_t"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=F)]
    model = onnx_model(nodes, [tensor(n, F, []) for n in "sld"], [tensor("y", F, [None])],
                       opset=27)
    imported, _ = from_onnx(model)
    exported = to_onnx(imported)
    rng = np.random.default_rng(27)  # and 300 random ones with tiny to large spans
    starts = rng.standard_normal(300) * 10.0 ** rng.integers(-5, 4, 300)
    deltas = rng.standard_normal(300) * 10.0 ** rng.integers(-4, 2, 300)
    limits = starts + deltas * rng.integers(0, 40, 300)
    for start, limit, delta in [*RANGE_CASES, *zip(starts, limits, deltas, strict=True)]:
        s, top, d = (np.asarray(v, np.float32).astype(dtype).astype(np.float64)
                   for v in (start, limit, delta))
        if d == 0:
            continue  # a delta below the type's smallest value: no range
        exact = s + d * np.arange(max(int(np.ceil((top - s) / d)), 0))
        expected = exact.astype(dtype).astype(np.float32)
        feeds = {n: np.asarray(v, np.float32) for n, v in zip("sld", (start, limit, delta),
                                                                strict=True)}
        (got,) = ort_run(exported, feeds)
        np.testing.assert_array_equal(got, expected, err_msg=f"{start, limit, delta}")
        np.testing.assert_array_equal(run_model(imported, feeds)[0], expected)
