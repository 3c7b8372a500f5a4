"""The default ONNX export opset: an ONNX import is written at its source opset (clamped to
the newest onnxruntime loads: Compress read at 28 goes back to 26, which has the same
Compress), another front-end's model at 18 unless a node needs newer (CumProd with a
run-time axis: 26). ONNX's own node cases (onnx's generated backend test data) come back
right through it in the real onnxruntime."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.converters.onnx._common import DEFAULT_OPSET
from irbridge.errors import ExportError
from irbridge.executor import run_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from onnx_conformance import _ort_run, _session  # noqa: E402  (float8 feeds as raw bits)

ORT_NEWEST = 26  # onnxruntime 1.31 runs the default domain up to opset 26


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def _opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def _round_trip(case: Any, model: onnx.ModelProto | None = None,
                inputs: list[np.ndarray] | None = None) -> tuple[int, list[np.ndarray]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir, _ = from_onnx(model or case.model)
    exported = to_onnx(ir)
    feeds = [_array(a) for a in (inputs if inputs is not None else case.data_sets[0][0])]
    names = [i.name for i in exported.graph.input]
    return _opset(exported), ort_run(exported, dict(zip(names, feeds, strict=True)))


def ort_run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(_ort_run(_session(proto.SerializeToString()), feeds))


def _array(value: Any) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) \
        else np.asarray(value)


def _expect(case: Any, got: list[np.ndarray]) -> None:
    # onnx's backend runner compares at the case's rtol / atol (1e-3 / 1e-7 by default)
    for g, w in zip(got, case.data_sets[0][1], strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), _array(w).astype(np.float64),
                                   rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize(("name", "source", "expected"), [
    ("test_gridsample_bilinear", 22, 22),        # the source opset, runnable as is
    ("test_gridsample_volumetric_nearest_align_corners_1", 22, 22),
    ("test_attention_4d", 23, 23),
    ("test_compress_0", 28, ORT_NEWEST),         # Compress-28 only widened Compress-11's
    ("test_unique_sorted_with_axis", 28, ORT_NEWEST),  # types: onnxruntime's newest
    ("test_cast_FLOAT8E4M3FN_to_FLOAT", 28, ORT_NEWEST),
    ("test_cumprod_1d", 26, 26),
    ("test_relu", 14, 14),
    ("test_resize_upsample_scales_linear", 19, 19),
])
def test_default_opset_round_trip(cases: dict[str, Any], name: str, source: int,
                                  expected: int) -> None:
    case = cases[name]
    assert _opset(case.model) == source
    opset, got = _round_trip(case)
    assert opset == expected
    _expect(case, got)


def test_non_onnx_model_starts_at_18_and_rises_to_what_a_node_needs() -> None:
    """A model of another front-end: 18, unless an emitter needs newer (CumProd with a
    run-time axis: 26)."""
    from irbridge.builder import GraphBuilder
    from irbridge.dtypes import DType
    from irbridge.ir import Graph, Model, TensorType

    def model(runtime_axis: bool) -> Model:
        graph = Graph()
        m = Model(graphs=[graph], name="cumprod")
        b = GraphBuilder(graph, m)
        x = graph.add_input("x", TensorType(DType.FLOAT32, (2, 3)))
        if runtime_axis:
            axis = graph.add_input("axis", TensorType(DType.INT64, ()))
            graph.set_outputs([b.op("cumprod", [x, axis], {"axis": 0})])
        else:
            graph.set_outputs([b.op("cumprod", [x], {"axis": 1})])
        return m

    assert _opset(to_onnx(model(False))) == DEFAULT_OPSET
    proto = to_onnx(model(True))
    assert _opset(proto) == 26
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    got = ort_run(proto, {"x": x, "axis": np.array(1, np.int64)})
    np.testing.assert_array_equal(got[0], np.cumprod(x, axis=1))
    with pytest.raises(ExportError, match="needs opset 26"):
        to_onnx(model(True), opset=18)


def test_explicit_opset_is_kept(cases: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir, _ = from_onnx(cases["test_gridsample_bilinear"].model)
    with pytest.raises(ExportError, match=r"GridSample was imported at opset 22 and changed by "
                                          r"opset 18; export at opset 22 instead"):
        to_onnx(ir, opset=18)


def test_cli_default_path_writes_the_source_opset(cases: dict[str, Any], tmp_path) -> None:
    from irbridge.formats import read_file, write_model

    case = cases["test_gridsample_bilinear"]
    source = tmp_path / "grid.onnx"
    onnx.save(case.model, source)
    model = read_file(source)
    target = tmp_path / "back.onnx"
    write_model(model, target, "onnx")
    back = onnx.load(target)
    assert _opset(back) == 22
    feeds = dict(zip([i.name for i in back.graph.input], case.data_sets[0][0], strict=True))
    _expect(case, ort_run(back, feeds))


ALIGN = ["test_resize_downsample_scales_linear_align_corners",
         "test_resize_downsample_scales_cubic_align_corners",
         "test_resize_upsample_scales_linear_align_corners",
         "test_resize_upsample_scales_cubic_align_corners"]


@pytest.mark.parametrize("name", ALIGN)
def test_resize_align_corners_ir_executor(cases: dict[str, Any], name: str) -> None:
    """align_corners divides by ONNX's fractional resized length (4 * 0.6 = 2.4)."""
    case = cases[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir, _ = from_onnx(case.model)
    got = run_model(ir, list(case.data_sets[0][0]))
    # float32 arithmetic in another order than onnx's float64 reference: 1e-5 relative
    for g, w in zip(got, case.data_sets[0][1], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ALIGN)
def test_resize_align_corners_constant_scales_in_onnxruntime(cases: dict[str, Any],
                                                            name: str) -> None:
    """With constant scales the export reproduces ONNX's expected output in onnxruntime
    (whose own Resize divides by the whole output size: see docs/onnx.md)."""
    case = cases[name]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    scales = model.graph.input[1].name
    model.graph.initializer.append(numpy_helper.from_array(
        np.asarray(case.data_sets[0][0][1]), scales))
    del model.graph.input[1]
    _, got = _round_trip(case, model, [case.data_sets[0][0][0]])
    _expect(case, got)
