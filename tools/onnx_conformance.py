"""ONNX conformance of irbridge's ONNX import and export.

For every generated node test case of the installed onnx package
(`onnx.backend.test.case.node.collect_testcases`) and the 9 "light" real models under
`onnx/backend/test/data/light/`, the case's model is imported into the IR
(`irbridge.converters.onnx.from_onnx`), exported back to ONNX (`to_onnx`, opset = the
case's opset clamped to what onnxruntime runs), run in onnxruntime and compared with the
expected outputs. Each case is classified:

* pass        - the round trip reproduces the expected outputs
* mismatch    - it runs but differs, or onnxruntime refuses the exported model while it
                runs the original
* unsupported - import or export refused the model (with the reason), or onnxruntime
                cannot run the original model either
* crash       - an unexpected exception in irbridge (must be zero)

It also reports how many cases import *fully neutral* (no opaque node) and, for those,
whether the IR reference executor (`irbridge.executor.run_model`) itself reproduces the
expected outputs.

Tolerances are those of each test case (rtol / atol of onnx's own backend test runner:
rtol 1e-3, atol 1e-7 unless the case sets others, and at least 2**-6 relative on bfloat16
outputs, two bfloat16 ulps, as that runner allows; the light models' data.json sets rtol 1e-3
or 2e-3): the same bar onnx holds every backend to.

    uv run python tools/onnx_conformance.py                 # all cases, write the docs table
    uv run python tools/onnx_conformance.py --sample 150    # the fixed sample of the fast test
    uv run python tools/onnx_conformance.py -k conv --verbose
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import re
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "onnx-conformance.md"
BASELINE = ROOT / "tests" / "data" / "onnx_conformance_baseline.json"
SAMPLE_SIZE = 150


@dataclass
class Case:
    name: str
    operator: str
    kind: str  # "node" or "light"
    model: Any  # onnx.ModelProto
    data_sets: list[tuple[list[np.ndarray], list[np.ndarray]]]
    rtol: float
    atol: float


@dataclass
class Result:
    name: str
    operator: str
    kind: str
    opset: int
    status: str  # pass | mismatch | unsupported | crash
    reason: str = ""
    neutral: bool = False
    ir_status: str = ""  # "", pass, mismatch (neutral cases only)
    ir_reason: str = ""
    opaque: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)  # why nodes stayed opaque


# -- loading the cases ---------------------------------------------------------------------------

def _array(value: Any) -> Any:
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def node_cases() -> list[Case]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        raw = collect_testcases(None)
    by_name = {c.name: c for c in raw}
    cases = []
    for c in raw:
        data = [([_array(v) for v in ins], [_array(v) for v in outs])
                for ins, outs in c.data_sets or ()]
        cases.append(Case(c.name, _operator(c.name, c.model, by_name), "node", c.model, data,
                          float(c.rtol), float(c.atol)))
    return sorted(cases, key=lambda c: c.name)


def _operator(name: str, model: Any, by_name: dict[str, Any]) -> str:
    """The operator a node test case is about: its single node, or for an expanded
    function test the node of the case it expands."""
    base = name.split("_expanded")[0]
    if base != name and base in by_name and len(by_name[base].model.graph.node) == 1:
        model = by_name[base].model
    nodes = model.graph.node
    if not nodes:
        return "?"
    node = nodes[0] if len(nodes) == 1 else nodes[-1]
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") \
        else node.op_type


def light_cases() -> list[Case]:
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.loader import load_model_tests

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    tolerances = {t.model_name: (t.rtol, t.atol) for t in load_model_tests(kind="real")}
    cases = []
    for path in sorted(glob.glob(str(folder / "light_*.onnx"))):
        model = onnx.load(path)
        key = Path(path).stem.removeprefix("light_")
        rtol, atol = tolerances.get(key, (1e-3, 1e-7))
        inits = {t.name for t in model.graph.initializer}
        inputs = []
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            # onnx's backend runner feeds these models arange(n) / n in the input's shape
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                          for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        outputs = []
        for index in range(len(model.graph.output)):
            proto = onnx.TensorProto()
            proto.ParseFromString(Path(path.replace(".onnx", f"_output_{index}.pb")).read_bytes())
            outputs.append(numpy_helper.to_array(proto))
        cases.append(Case(f"light_{key}", f"model:{key}", "light", model, [(inputs, outputs)],
                          rtol, atol))
    return cases


def sample(cases: Sequence[Case], size: int = SAMPLE_SIZE) -> list[Case]:
    """A fixed, evenly spread sample of the node cases (by sorted name)."""
    nodes = sorted((c for c in cases if c.kind == "node"), key=lambda c: c.name)
    if len(nodes) <= size:
        return list(nodes)
    step = len(nodes) / size
    return [nodes[int(i * step)] for i in range(size)]


# -- running one case ----------------------------------------------------------------------------

_ORT_MAX: int | None = None


def ort_max_opset() -> int:
    """Newest default-domain opset the installed onnxruntime accepts."""
    global _ORT_MAX
    if _ORT_MAX is None:
        import onnx
        from onnx import helper

        for version in range(onnx.defs.onnx_opset_version(), 12, -1):
            graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                      [helper.make_tensor_value_info("x", 1, [1])],
                                      [helper.make_tensor_value_info("y", 1, [1])])
            opsets = [helper.make_opsetid("", version)]
            model = helper.make_model(graph, opset_imports=opsets)
            model.ir_version = helper.find_min_ir_version_for(opsets)
            try:
                _session(model.SerializeToString())
            except Exception:
                continue
            _ORT_MAX = version
            break
        else:
            _ORT_MAX = 18
    return _ORT_MAX


def _session(data: bytes) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _compare(got: Sequence[Any], expected: Sequence[Any], rtol: float, atol: float) -> str:
    """'' when equal within tolerance, else what differs."""
    if len(got) < len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for index, (g, e) in enumerate(zip(got, expected, strict=False)):
        g, e = np.asarray(g), np.asarray(e)
        if g.dtype != e.dtype and g.dtype.kind == "u" and e.dtype.itemsize == g.dtype.itemsize \
                and e.dtype.kind not in "iub":
            g = g.view(e.dtype)  # onnxruntime returns float8 / bfloat16 as raw bits
        if g.shape != e.shape:
            return f"output {index}: shape {list(g.shape)}, expected {list(e.shape)}"
        if e.dtype == object or g.dtype == object:
            if not np.array_equal(g.astype(str), e.astype(str)):
                return f"output {index}: values differ"
            continue
        if (e.dtype == bool) != (g.dtype == bool):
            return f"output {index}: dtype {g.dtype}, expected {e.dtype}"
        try:
            gf, ef = _float(g), _float(e)
        except (TypeError, ValueError):
            return f"output {index}: cannot compare dtype {g.dtype} with {e.dtype}"
        # onnx's own runner (assert_similar_outputs) allows two bfloat16 ulps on bfloat16
        # outputs: the expected values are rounded to bfloat16 once, any runtime that keeps
        # a float32 accumulator rounds differently.
        output_rtol = max(rtol, 2.0**-6) if e.dtype.name == "bfloat16" else rtol
        if not np.allclose(gf, ef, rtol=output_rtol, atol=atol, equal_nan=True):
            with np.errstate(all="ignore"):
                worst = float(np.nanmax(np.abs(gf - ef))) if gf.size else 0.0
            return f"output {index}: max abs difference {worst:.3g}"
    return ""


def _float(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iub":
        return a.astype(np.float64) if a.dtype.itemsize < 8 or a.dtype.kind == "b" else a
    if a.dtype.kind == "c":
        return a
    return a.astype(np.float64)


_EXOTIC = {"bfloat16": "BFLOAT16", "float8_e4m3fn": "FLOAT8E4M3FN", "float8_e5m2": "FLOAT8E5M2",
           "float8_e4m3fnuz": "FLOAT8E4M3FNUZ", "float8_e5m2fnuz": "FLOAT8E5M2FNUZ",
           "float8_e8m0fnu": "FLOAT8E8M0"}
_ORT_TYPES = {"tensor(bfloat16)": "bfloat16", "tensor(float8e4m3fn)": "float8_e4m3fn",
              "tensor(float8e5m2)": "float8_e5m2", "tensor(float8e4m3fnuz)": "float8_e4m3fnuz",
              "tensor(float8e5m2fnuz)": "float8_e5m2fnuz", "tensor(float8e8m0)": "float8_e8m0fnu"}
_PACKED = {"int4": "INT4", "uint4": "UINT4", "int2": "INT2", "uint2": "UINT2",
           "float4_e2m1fn": "FLOAT4E2M1"}
"""Sub-byte types onnxruntime holds packed (two or four elements per byte, as ONNX's
raw_data); numpy_helper packs and unpacks them."""


def _ort_run(session: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run with OrtValues, so that bfloat16 and float8 inputs and outputs (which
    onnxruntime's numpy bridge refuses) travel as raw bits."""
    import ctypes

    import ml_dtypes
    import onnxruntime as ort
    from onnx import TensorProto, numpy_helper

    values = {}
    for name, array in feeds.items():
        exotic = _EXOTIC.get(array.dtype.name)
        if array.dtype.name in _PACKED:
            # onnxruntime takes the shape from the array and reads its first bytes packed
            packed = numpy_helper.from_array(np.asarray(array)).raw_data
            buffer = np.zeros(array.shape, dtype=np.uint8)
            buffer.reshape(-1)[:len(packed)] = np.frombuffer(packed, dtype=np.uint8)
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                buffer, onnx_element_type=getattr(TensorProto, _PACKED[array.dtype.name]))
        elif exotic is None:
            values[name] = ort.OrtValue.ortvalue_from_numpy(np.require(array, requirements="C"))
        else:
            raw = np.require(array, requirements="C").view(f"u{array.dtype.itemsize}")
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                raw, onnx_element_type=getattr(TensorProto, exotic))
    outputs = []
    packed_types = {f"tensor({v.lower()})": v for v in _PACKED.values()}
    for value in session.run_with_ort_values(None, values):
        if value.data_type() in packed_types:
            size = value.tensor_size_in_bytes()
            proto = TensorProto(dims=value.shape(),
                                data_type=getattr(TensorProto, packed_types[value.data_type()]),
                                raw_data=ctypes.string_at(value.data_ptr(), size) if size else b"")
            outputs.append(numpy_helper.to_array(proto))
            continue
        kind = _ORT_TYPES.get(value.data_type())
        if kind is None:
            outputs.append(value.numpy())
            continue
        dtype = np.dtype(getattr(ml_dtypes, kind))
        size = int(np.prod(value.shape())) * dtype.itemsize
        data = ctypes.string_at(value.data_ptr(), size) if size else b""
        outputs.append(np.frombuffer(data, dtype=dtype).reshape(value.shape()).copy())
    return outputs


def _feeds(model: Any, inputs: Sequence[Any]) -> dict[str, Any]:
    inits = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    return {name: np.asarray(value) for name, value in zip(names, inputs, strict=False)}


def _source_opset(model: Any) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def run_case(case: Case, *, check_native: bool = True) -> Result:
    from irbridge.converters.onnx import coverage_of, from_onnx, to_onnx
    from irbridge.errors import IrbridgeError

    opset = _source_opset(case.model)
    result = Result(case.name, case.operator, case.kind, opset, "crash")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                model, coverage = from_onnx(case.model)
            except IrbridgeError as exc:
                result.status, result.reason = "unsupported", f"import: {exc}"
                return result
            result.opaque = sorted(coverage_of(model))
            result.blockers = sorted({_blocker(op, why) for op, why in coverage.reasons.items()})
            result.neutral = not result.opaque
            if result.neutral:
                _run_ir(case, model, result)
            export_opset = min(max(opset, 13), ort_max_opset())
            try:
                exported = to_onnx(model, opset=export_opset)
            except IrbridgeError as exc:
                result.status, result.reason = "unsupported", f"export: {exc}"
                return result
            _run_ort(case, exported.SerializeToString(), result, check_native)
    except Exception as exc:
        result.status = "crash"
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        result.reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}" \
                        f" ({where})"
    return result


def _blocker(op: str, reason: str) -> str:
    """A short class of why an op stayed opaque (for the summary tables)."""
    found = re.search(r"(\w+) \(input \d+\) is not a constant", reason)
    if found:
        return f"{op}: input '{found.group(1)}' known only at run time"
    if reason.startswith("domain "):
        return f"{op}: not the default ONNX domain"
    if reason.startswith("no neutral mapping"):
        return f"{op}: no neutral equivalent"
    reason = re.sub(r"node #\d+ \w+: ", "", reason.split(";")[0])
    return f"{op}: {reason[:80]}"


def _failure_class(r: Result) -> str:
    text = r.reason
    if r.status == "mismatch":
        return "mismatch"
    if "cannot represent" in text or "cannot hold" in text:
        return "import: a value type the IR cannot represent (string, sequence, optional)"
    if text.startswith("import"):
        return "import refused (other)"
    if text.startswith("export"):
        return "export refused: " + ("opaque op changed between the source and export opsets"
                                     if "changed by opset" in text or "does not exist" in text
                                     else "the exported op lacks a type at that opset")
    if "original model too" in text:
        return "onnxruntime differs from the expected outputs on the original model too"
    if "cannot run the original" in text:
        return "onnxruntime cannot run the original model (missing kernel, preview/training op, opset 27-28 without a lower export, random op)"
    return "other"


def _run_ir(case: Case, model: Any, result: Result) -> None:
    from irbridge.executor import run_model

    problems = []
    for inputs, expected in case.data_sets:
        try:
            with np.errstate(all="ignore"):
                got = run_model(model, _feeds(case.model, inputs))
        except Exception as exc:
            problems.append(f"executor: {str(exc).splitlines()[0] if str(exc) else exc!r}")
            break
        problem = _compare(got, expected, case.rtol, case.atol)
        if problem:
            problems.append(problem)
            break
    result.ir_status = "mismatch" if problems else "pass"
    result.ir_reason = problems[0] if problems else ""


def _ort_failed(case: Case, result: Result, check_native: bool, verb: str,
                exc: BaseException) -> None:
    """onnxruntime refused or failed on the export: unsupported when it cannot run the
    original model either, else a mismatch."""
    native = _native_problem(case) if check_native else "not checked"
    if native:
        result.status = "unsupported"
        result.reason = f"onnxruntime {verb} the export ({_line(exc)}) and cannot run " \
                        f"the original either ({native.removeprefix('load: ')})"
    else:
        result.status = "mismatch"
        result.reason = f"onnxruntime {verb} the export: {_line(exc)}"


def _run_ort(case: Case, exported: bytes, result: Result, check_native: bool) -> None:
    try:
        session = _session(exported)
    except Exception as exc:
        _ort_failed(case, result, check_native, "refuses", exc)
        return
    for inputs, expected in case.data_sets:
        try:
            got = _ort_run(session, _feeds(case.model, inputs))
        except Exception as exc:
            _ort_failed(case, result, check_native, "fails on", exc)
            return
        problem = _compare(got, expected, case.rtol, case.atol)
        if problem:
            native = _native_problem(case, compare=True) if check_native else ""
            if native and not native.startswith("load:"):
                result.status = "unsupported"
                result.reason = f"onnxruntime differs from the expected outputs on the " \
                                f"original model too ({native})"
            else:
                result.status, result.reason = "mismatch", problem
            return
    result.status = "pass"


def _native_problem(case: Case, compare: bool = False) -> str:
    """Why onnxruntime cannot run (or, with `compare`, reproduce) the original model;
    '' when it can. A refusal to load is prefixed 'load:'."""
    try:
        session = _session(case.model.SerializeToString())
    except Exception as exc:
        return "load: " + _line(exc)
    try:
        for inputs, expected in case.data_sets:
            got = _ort_run(session, _feeds(case.model, inputs))
            if compare:
                problem = _compare(got, expected, case.rtol, case.atol)
                if problem:
                    return problem
    except Exception as exc:
        return _line(exc)
    return ""


def _line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text[-240:]


# -- reporting -----------------------------------------------------------------------------------

@dataclass
class Summary:
    results: list[Result]

    def of(self, kind: str) -> list[Result]:
        return [r for r in self.results if r.kind == kind]

    def counts(self, kind: str) -> dict[str, int]:
        results = self.of(kind)
        c = Counter(r.status for r in results)
        return {"cases": len(results), "pass": c["pass"], "mismatch": c["mismatch"],
                "unsupported": c["unsupported"], "crash": c["crash"],
                "neutral": sum(r.neutral for r in results),
                "neutral_ir_pass": sum(r.neutral and r.ir_status == "pass" for r in results)}


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def per_operator(results: Sequence[Result]) -> list[tuple[str, dict[str, int]]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        row = table[r.operator]
        row["cases"] += 1
        row[r.status] += 1
        row["neutral"] += r.neutral
        row["ir"] += r.neutral and r.ir_status == "pass"
    return sorted(((op, dict(c)) for op, c in table.items()), key=lambda x: x[0].lower())


def render_markdown(summary: Summary, seconds: float) -> str:
    import onnx
    import onnxruntime

    node, light = summary.counts("node"), summary.counts("light")
    lines = [
        "# ONNX conformance",
        "",
        "<!-- Generated by tools/onnx_conformance.py; do not edit by hand. -->",
        "",
        f"onnx {onnx.__version__} ({node['cases']} generated node test cases, "
        f"{light['cases']} light models), onnxruntime {onnxruntime.__version__} "
        f"(opsets up to {ort_max_opset()}); run took {seconds:.0f} s.",
        "",
        "Each case is imported into the IR, exported back to ONNX (opset = the case's "
        "opset, clamped to 13..onnxruntime's newest) and run in onnxruntime; outputs are "
        "compared with the case's expected outputs at the case's own tolerances (onnx's "
        "backend test runner: rtol 1e-3, atol 1e-7 unless the case sets others; at least "
        "2^-6 relative, two bfloat16 ulps, on bfloat16 outputs, as that runner allows). "
        "*unsupported* means import or export refused the model with a reason, or "
        "onnxruntime cannot run the original model either. *Fully neutral* cases import "
        "without any opaque node; for them the IR reference executor is run as well.",
        "",
        "## Totals",
        "",
        "| | cases | pass | mismatch | unsupported | crash | fully neutral | neutral and IR executor reproduces |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, c in (("node cases", node), ("light models", light)):
        lines.append(f"| {label} | {c['cases']} | {c['pass']} ({_pct(c['pass'], c['cases'])}) "
                     f"| {c['mismatch']} | {c['unsupported']} | {c['crash']} | "
                     f"{c['neutral']} ({_pct(c['neutral'], c['cases'])}) | "
                     f"{c['neutral_ir_pass']} ({_pct(c['neutral_ir_pass'], c['cases'])}) |")
    lines += ["", "## Light models", "",
              "| model | round trip | fully neutral | IR executor | note |", "|---|---|---|---|---|"]
    for r in summary.of("light"):
        lines.append(f"| {r.name} | {r.status} | {'yes' if r.neutral else 'no'} | "
                     f"{r.ir_status or '-'} | {_md(r.reason or r.ir_reason)} |")
    nodes = summary.of("node")
    lines += ["", "## Why node cases do not pass", "", "| class | cases |", "|---|---|"]
    for label, count in Counter(_failure_class(r) for r in nodes if r.status != "pass"
                                ).most_common():
        lines.append(f"| {label} | {count} |")
    blockers: Counter[str] = Counter()
    for r in nodes:
        for b in r.blockers:
            blockers[b] += 1
    lines += ["", "## Why imported cases are not fully neutral", "",
              "Each opaque op of a case that imported, with why the importer kept it opaque "
              "(a case may count under several rows).", "",
              "| opaque op and reason | cases |", "|---|---|"]
    for label, count in blockers.most_common():
        lines.append(f"| {_md(label)} | {count} |")
    lines += ["", "## Node cases per operator", "",
              "| operator | cases | pass | mismatch | unsupported | crash | fully neutral | IR executor |",
              "|---|---|---|---|---|---|---|---|"]
    for op, c in per_operator(summary.of("node")):
        lines.append(f"| {op} | {c.get('cases', 0)} | {c.get('pass', 0)} | "
                     f"{c.get('mismatch', 0)} | {c.get('unsupported', 0)} | {c.get('crash', 0)} "
                     f"| {c.get('neutral', 0)} | {c.get('ir', 0)} |")
    lines += ["", "## Cases that do not pass", "", "| case | status | reason |", "|---|---|---|"]
    for r in summary.results:
        if r.status != "pass":
            lines.append(f"| {r.name} | {r.status} | {_md(r.reason)} |")
    lines += ["", "## Fully neutral cases the IR executor does not reproduce", "",
              "| case | reason |", "|---|---|"]
    for r in summary.results:
        if r.neutral and r.ir_status != "pass":
            lines.append(f"| {r.name} | {_md(r.ir_reason)} |")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def run(cases: Sequence[Case], *, verbose: bool = False, check_native: bool = True
        ) -> Summary:
    results = []
    for case in cases:
        result = run_case(case, check_native=check_native)
        results.append(result)
        if verbose:
            note = result.reason or result.ir_reason
            print(f"{result.status:11s} ir={result.ir_status or '-':8s} {case.name}: {note}",
                  flush=True)
    return Summary(results)


def baseline_record(summary: Summary, sample_summary: Summary | None) -> dict[str, Any]:
    record: dict[str, Any] = {"node": summary.counts("node"), "light": summary.counts("light")}
    if sample_summary is not None:
        record["sample"] = {**sample_summary.counts("node"), "size": SAMPLE_SIZE}
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="pattern", help="only cases whose name contains this")
    parser.add_argument("--sample", type=int, default=0, help="only the fixed sample of N cases")
    parser.add_argument("--no-light", action="store_true", help="skip the 9 light models")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per case")
    parser.add_argument("--write-doc", action="store_true",
                        help=f"write {DOC.relative_to(ROOT)} (default for a full run)")
    parser.add_argument("--update-baseline", action="store_true",
                        help=f"record the counts in {BASELINE.relative_to(ROOT)}")
    parser.add_argument("--json", type=Path, help="write every case's result as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    cases = node_cases()
    full = not args.pattern and not args.sample
    if args.sample:
        cases = sample(cases, args.sample)
    if args.pattern:
        cases = [c for c in cases if args.pattern in c.name]
    if not args.no_light and not args.sample:
        cases += [c for c in light_cases() if not args.pattern or args.pattern in c.name]
    start = time.perf_counter()
    summary = run(cases, verbose=args.verbose)
    seconds = time.perf_counter() - start

    for op, c in per_operator(summary.results):
        print(f"{op:32s} {c.get('cases', 0):4d} cases  pass {c.get('pass', 0):4d}  "
              f"mismatch {c.get('mismatch', 0):3d}  unsupported {c.get('unsupported', 0):3d}  "
              f"crash {c.get('crash', 0):2d}  neutral {c.get('neutral', 0):4d}  "
              f"ir {c.get('ir', 0):4d}")
    for kind in ("node", "light"):
        c = summary.counts(kind)
        if not c["cases"]:
            continue
        print(f"TOTAL {kind}: {c['cases']} cases, pass {c['pass']} ({_pct(c['pass'], c['cases'])}),"
              f" mismatch {c['mismatch']}, unsupported {c['unsupported']}, crash {c['crash']}; "
              f"fully neutral {c['neutral']} ({_pct(c['neutral'], c['cases'])}), neutral and "
              f"reproduced by the IR executor {c['neutral_ir_pass']} "
              f"({_pct(c['neutral_ir_pass'], c['cases'])})")
    print(f"({seconds:.1f} s)")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in summary.results], indent=1))
    if full or args.write_doc:
        DOC.write_text(render_markdown(summary, seconds))
        print(f"wrote {DOC.relative_to(ROOT)}")
    if args.update_baseline:
        if not full:
            print("--update-baseline needs a full run", file=sys.stderr)
            return 2
        sample_summary = Summary([r for r in summary.results
                                  if r.name in {c.name for c in sample(node_cases())}])
        BASELINE.write_text(json.dumps(baseline_record(summary, sample_summary), indent=2)
                            + "\n")
        print(f"wrote {BASELINE.relative_to(ROOT)}")
    return 1 if any(r.status == "crash" for r in summary.results) else 0


if __name__ == "__main__":
    sys.exit(main())
