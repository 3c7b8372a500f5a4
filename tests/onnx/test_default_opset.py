"""The default ONNX export opset is the lowest that represents the model, and ONNX's own
node cases (onnx's generated backend test data) come back right through it, run in the
real onnxruntime: opaque ops read at a newer opset keep their version (GridSample at 22),
ops that only widened their types since go back to a runnable opset (Compress read at 28),
element types an older op version lacks raise the opset (Cast from float8: 19), emitters
that need a newer opset raise it (CumProd with a run-time axis: 26)."""

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
    # opaque; GridSample-22 only widened GridSample-20's types, and 20 changed 16's
    ("test_gridsample_bilinear", 22, 20),
    ("test_gridsample_volumetric_nearest_align_corners_1", 22, 20),
    ("test_compress_0", 28, DEFAULT_OPSET),      # Compress-28 only widened Compress-11's types
    ("test_unique_sorted_with_axis", 28, DEFAULT_OPSET),
    ("test_cast_FLOAT8E4M3FN_to_FLOAT", 28, 19),  # Cast reads float8 from opset 19
    ("test_cumprod_1d", 26, 26),                 # CumProd with a run-time axis
    ("test_relu", None, DEFAULT_OPSET),          # neutral only
])
def test_default_opset_round_trip(cases: dict[str, Any], name: str, source: int | None,
                                  expected: int) -> None:
    case = cases[name]
    if source is not None:
        assert _opset(case.model) == source
    opset, got = _round_trip(case)
    assert opset == expected
    assert opset <= ORT_NEWEST
    _expect(case, got)


def test_explicit_opset_is_kept(cases: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir, _ = from_onnx(cases["test_gridsample_bilinear"].model)
    with pytest.raises(ExportError, match=r"GridSample was imported at opset 22 and changed by "
                                          r"opset 18; export at opset 22 instead"):
        to_onnx(ir, opset=18)


def test_cli_default_path_writes_the_lowest_opset(cases: dict[str, Any], tmp_path) -> None:
    from irbridge.formats import read_file, write_model

    case = cases["test_gridsample_bilinear"]
    source = tmp_path / "grid.onnx"
    onnx.save(case.model, source)
    model = read_file(source)
    target = tmp_path / "back.onnx"
    write_model(model, target, "onnx")
    back = onnx.load(target)
    assert _opset(back) == 20
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
