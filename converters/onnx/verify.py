"""Numeric verification of an exported ONNX file: run it in onnxruntime and compare every
output with the IR's reference executor (`irbridge.executor`) on the same inputs.

`verify_onnx(model, onnx_file, inputs=None, *, rtol=None, atol=None, seed=0)` returns a
`VerifyReport` (irbridge/tolerance.py, the report of the PyTorch verifier too): one
`OutputCheck` per output with its max abs and rel error, pass / fail, and `error` with a
one-line reason when a side cannot run (onnxruntime cannot load or run the file, the
reference executor fails, the signatures differ). It never raises for a bad file.

Complex values: the exporter writes a complex graph input or output as a float tensor
of shape [..., 2] (real, imag) and lists it in the file's `irbridge.complex_values`
metadata (converters/onnx/_complex.py). onnxruntime is fed `view_as_real` of the
complex arrays and its pair outputs are read back with `view_as_complex` before the
comparison, which therefore compares the same complex numbers (the conversion is exact);
random complex inputs draw both parts.

`export_verified(model, path, ...)` writes the file only when that check passes (the
`irbridge export --to onnx --verify` path). Inputs: the caller's arrays by name (or by
position), else seeded random ones of the model's input types (`compare.numeric`: normal
floats, integers 0..9, booleans true). Tolerances: `irbridge.tolerance.TOLERANCES` by
dtype (float32: atol 1e-5, rtol 1e-4 of the output's largest magnitude; integers and
booleans exact); `rtol` / `atol` replace them for every floating output.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from irbridge.converters.onnx._complex import REAL_OF, complex_values, from_pairs, to_pairs
from irbridge.dtypes import DType
from irbridge.errors import ExportError, IrbridgeError
from irbridge.ir import Graph, Model, SymDim, Value
from irbridge.tolerance import EXACT, TOLERANCES, OutputCheck, VerifyReport, compare_output

__all__ = ["OnnxVerifyError", "export_verified", "reference_feeds", "verify_onnx"]

Inputs = Mapping[str, np.ndarray] | Sequence[np.ndarray]


class OnnxVerifyError(ExportError):
    """`export_verified`: the written file does not match the IR; `report` says by how much."""

    def __init__(self, message: str, report: VerifyReport) -> None:
        super().__init__(message)
        self.report = report


def _user_inputs(model: Model) -> list[Value]:
    linked = {(lk.to_graph, lk.to_input) for lk in model.links}
    return [v for i, g in enumerate(model.graphs) for v in g.inputs if (i, v.name) not in linked]


def check_static_inputs(model: Model) -> None:
    """Refuse, before any work, a model whose inputs have symbolic dims: verification
    makes random arrays of the inputs' static types and cannot size `batch` or `seq`."""
    for v in _user_inputs(model):
        if v.type is None or not v.type.is_static:
            shape = v.type.shape if v.type is not None and v.type.shape else ()
            named = list(dict.fromkeys(d.name for d in shape if isinstance(d, SymDim)))
            hint = (" ".join(f"--bind {name}=SIZE" for name in named) if named else
                    "give the model static input shapes")
            raise IrbridgeError(f"--verify needs static input shapes: input {v.name!r} is "
                                f"{v.type or 'untyped'}", hint=hint)


def reference_feeds(model: Model, inputs: Inputs | None = None, *, seed: int = 0
                    ) -> dict[str, np.ndarray]:
    """The arrays both sides run on, by IR input name: `inputs` by name or position,
    else seeded random arrays of the inputs' static types. Raises IrbridgeError."""
    from irbridge.compare.numeric import _check_example_bytes, _random_for

    given: Mapping[str, np.ndarray]
    values = _user_inputs(model)
    if inputs is None:
        given = {}
    elif isinstance(inputs, Mapping):
        given = inputs
        unknown = sorted(set(given) - {v.name for v in values})
        if unknown:
            raise IrbridgeError(f"input {unknown[0]!r} is not an input of the model (inputs: "
                                f"{', '.join(v.name for v in values) or 'none'})")
    else:
        if len(inputs) != len(values):
            raise IrbridgeError(f"{len(inputs)} input arrays for a model of {len(values)} "
                                "inputs")
        given = {v.name: np.asarray(a) for v, a in zip(values, inputs, strict=True)}
    _check_example_bytes(values, given)
    rng = np.random.default_rng(seed)  # seed 0: the arrays of `irbridge compare`
    feeds = {}
    for v in values:
        if v.name in given:
            feeds[v.name] = np.asarray(given[v.name])
        elif v.type is not None and v.type.dtype in REAL_OF:  # both parts random
            parts = [_random_for(v, rng).real for _ in range(2)]
            feeds[v.name] = (parts[0] + 1j * parts[1]).astype(v.type.dtype.numpy)
        else:
            feeds[v.name] = _random_for(v, rng)
    return feeds


def _session(source: str | os.PathLike[str] | onnx.ModelProto) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    data = source.SerializeToString() if isinstance(source, onnx.ModelProto) else str(source)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


_ML_DTYPES = {
    onnx.TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    onnx.TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    onnx.TensorProto.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    onnx.TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    onnx.TensorProto.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
}
"""Element types onnxruntime's numpy interface has no numpy type for (it refuses them in
and out of `InferenceSession.run`), with the ml_dtypes type that holds the same bits."""

_ML_ENUMS = {dtype: enum for enum, dtype in _ML_DTYPES.items()}
_ML_TYPE_STRINGS = {f"tensor({onnx.TensorProto.DataType.Name(e).lower()})" for e in _ML_DTYPES}
"""The same types as onnxruntime names a session's inputs and outputs (`tensor(bfloat16)`)."""


def run_session(session: Any, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """`session.run(None, feeds)`, also for models whose inputs or outputs are bfloat16
    or float8: those tensors go in and come back as OrtValues, their bytes read as the
    ml_dtypes type of the same bits (no conversion, so nothing is rounded)."""
    import onnxruntime as ort

    if not any(np.asarray(a).dtype in _ML_ENUMS for a in feeds.values()) and not any(
            o.type in _ML_TYPE_STRINGS for o in session.get_outputs()):
        return list(session.run(None, dict(feeds)))
    values = {}
    for name, array in feeds.items():
        array = np.ascontiguousarray(array)
        if array.dtype in _ML_ENUMS:
            bits = array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8)
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                bits, onnx_element_type=_ML_ENUMS[array.dtype])
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
    return [_from_ort_value(v) for v in session.run_with_ort_values(None, values)]


def _from_ort_value(value: Any) -> np.ndarray:
    dtype = _ML_DTYPES.get(value.element_type()) if value.is_tensor() else None
    if dtype is None:
        return np.asarray(value.numpy())
    shape = tuple(value.shape())
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(value.data_ptr())
    return np.frombuffer(raw, np.uint8).copy().view(dtype).reshape(shape)


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    # onnxruntime prefixes "[ONNXRuntimeError] : 1 : FAIL : "; keep what follows
    return text.rsplit(" : ", 1)[-1][:300] if text.startswith("[ONNXRuntimeError]") \
        else text[:300]


def verify_onnx(model: Model | Graph, onnx_file: str | os.PathLike[str] | onnx.ModelProto,
                inputs: Inputs | None = None, *, rtol: float | None = None,
                atol: float | None = None, seed: int = 0) -> VerifyReport:
    """Run `onnx_file` (a path, or an in-memory ModelProto) in onnxruntime (CPU) and the
    IR `model` (or one graph, its weights as parameters) in the reference executor on the
    same inputs; compare each output of the model's last graph with the ONNX graph's
    output at the same position. `seed` picks other random inputs (0: those of `irbridge
    compare` / `reference_feeds`)."""
    from irbridge.executor import run_graphs

    if isinstance(model, Graph):
        model = Model(graphs=[model], tensors={v.tensor.name: v.tensor for v in
                                               model.parameters if v.tensor is not None})
    report = VerifyReport()
    start = time.perf_counter()
    what = "the ONNX model" if isinstance(onnx_file, onnx.ModelProto) else str(onnx_file)

    def fail(reason: str) -> VerifyReport:
        report.error = reason
        report.seconds = time.perf_counter() - start
        return report

    try:
        feeds = reference_feeds(model, inputs, seed=seed)
    except IrbridgeError as exc:
        return fail(f"no inputs to run: {exc.message}")
    try:
        session = _session(onnx_file)
    except Exception as exc:  # onnxruntime's own exception types (Fail, InvalidGraph, ...)
        return fail(f"onnxruntime cannot load {what}: {_first_line(exc)}")
    ort_inputs = session.get_inputs()
    if len(ort_inputs) != len(feeds):
        return fail(f"{what} takes {len(ort_inputs)} inputs, the IR takes {len(feeds)}")
    try:
        expected = run_graphs(model, feeds)[-1]
    except IrbridgeError as exc:
        return fail(f"the reference executor failed: {exc.message}")
    paired = complex_values(session.get_modelmeta().custom_metadata_map)
    try:
        got = run_session(session, {i.name: to_pairs(a) if i.name in paired else a
                                    for i, a in zip(ort_inputs, feeds.values(), strict=True)})
    except Exception as exc:
        return fail(f"onnxruntime cannot run {what}: {_first_line(exc)}")
    try:  # complex outputs back from their (real, imag) pairs
        got = [from_pairs(a, paired[o.name]) if o.name in paired else a
               for o, a in zip(session.get_outputs(), got, strict=True)]
    except ExportError as exc:
        return fail(f"{what}: {exc.message}")
    names = [v.name for v in model.graphs[-1].outputs]
    if len(got) != len(expected):
        return fail(f"{what} has {len(got)} outputs, the IR has {len(expected)}")
    for index, (name, ref, out) in enumerate(zip(names, expected, got, strict=True)):
        ref = np.asarray(ref)
        out = np.asarray(out)
        dtype = DType.from_numpy(ref.dtype)
        tol = TOLERANCES.get(dtype, EXACT)
        if dtype.is_float or dtype in REAL_OF:
            tol = (tol[0] if atol is None else atol, tol[1] if rtol is None else rtol)
        if out.dtype != ref.dtype:
            report.outputs.append(OutputCheck(
                index, name, dtype.short, tuple(ref.shape), float("inf"), float("inf"),
                tol[0], tol[1], False, f"dtype {out.dtype} != IR {ref.dtype}"))
            continue
        report.outputs.append(compare_output(index, name, out, ref, dtype, *tol))
    report.seconds = time.perf_counter() - start
    return report


@contextlib.contextmanager
def _staging(folder: Path) -> Iterator[Path]:
    stage = Path(tempfile.mkdtemp(prefix=".irbridge-verify-", dir=folder))
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def export_verified(model: Model, path: str | os.PathLike[str], inputs: Inputs | None = None,
                    *, rtol: float | None = None, atol: float | None = None, seed: int = 0,
                    **options: Any) -> VerifyReport:
    """`export_onnx(model, path, **options)`, written only when `verify_onnx` passes on
    the file: it is exported into a temporary folder beside `path`, checked there, then
    renamed into place (with its `.data` file). Raises `OnnxVerifyError` (with the
    report) when the check fails; the previous file at `path` is left as it was."""
    from irbridge.atomic import check_output
    from irbridge.converters.onnx.export import export_onnx

    target = Path(path)
    check_output(target)  # no folder, device, FIFO or socket is replaced
    with _staging(target.parent) as stage:
        staged = export_onnx(model, stage / target.name, **options)
        report = verify_onnx(model, staged, inputs, rtol=rtol, atol=atol, seed=seed)
        if not report.passed:
            bad = next((o for o in report.outputs if not o.passed), None)
            detail = report.error or (
                f"output {bad.index} ({bad.name}): max abs error {bad.max_abs_error:.3g} > "
                f"atol {bad.atol:g} + rtol {bad.rtol:g} x scale {bad.note}".rstrip()
                if bad else "no outputs")
            raise OnnxVerifyError(f"{target}: not written: the ONNX file does not match the "
                                  f"IR: {detail}", report)
        data = stage / (target.name + ".data")
        if data.exists():
            os.replace(data, target.parent / data.name)
        os.replace(staged, target)
    return report
