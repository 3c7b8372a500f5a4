"""StableHLO conformance: StableHLO's own interpreter tests through irbridge.

The corpus is `../shared/conformance/stablehlo-interpret/` (the `.mlir` files of
`stablehlo/tests/interpret/`, see its README): each file holds functions separated by
`// -----`; each function builds its operands with `stablehlo.constant`, applies ops and
states the expected result with `check.expect_*` ops. For every function this tool

1. rewrites it into a program the importer accepts: the `check.*` ops are removed and the
   values they check become the results of `@main` (the rest of the text is unchanged);
2. takes the expected values from the `check` literals, parsed from their text into numpy
   (ml_dtypes for the narrow types), independently of irbridge (`expect_eq` /
   `expect_almost_eq` between two values compare those two values);
3. runs the program through three paths and compares each with the expected values:
   * `ir`        - `from_mlir` (irbridge's importer) then the IR executor;
   * `stablehlo` - that IR exported back to StableHLO, run in the reference interpreter;
   * `onnx`      - that IR exported to ONNX, run in onnxruntime;
   and, as a check of this tool itself, the rewritten program as written through the
   StableHLO reference interpreter (`interpreter`).

Comparisons follow the check dialect: `expect_eq*` exact (NaN equal to NaN),
`expect_almost_eq*` per element |a - b| <= tolerance (default 1e-4, or the case's own
`tolerance`), equal signs, NaN only against NaN, infinities only against themselves, as
`areApproximatelyEqual` in StableHLO's reference `Element.cpp` does.

Functions the single-device IR cannot express are counted apart, never dropped: collectives
and multi-process programs (`interpreter.run_parallel`, all_reduce, send/recv, ...),
interpreter-only probes and printing (`interpreter.probe`, `check.expect_serialized_eq`),
and functions with arguments (they exist only to be called by `run_parallel`).

Each file runs in a worker subprocess; a worker that dies (an MLIR abort) or times out is
restarted after the function it was on, which is recorded as `crash` / `timeout`.

    uv run python tools/stablehlo_conformance.py              # all files, writes the doc
    uv run python tools/stablehlo_conformance.py -k add,sort  # some files, prints only
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "conformance" / "stablehlo-interpret"
DOC = ROOT / "docs" / "stablehlo-conformance.md"
BASELINE = ROOT / "tests" / "data" / "stablehlo_conformance_baseline.json"
PATHS = ("ir", "stablehlo", "onnx", "interpreter")
DEFAULT_TOLERANCE = 1e-4
CASE_TIMEOUT_S = 60.0

COLLECTIVE_MARKERS = (
    "interpreter.run_parallel", "stablehlo.all_gather", "stablehlo.all_reduce",
    "stablehlo.all_to_all", "stablehlo.collective_broadcast", "stablehlo.collective_permute",
    "stablehlo.reduce_scatter", "stablehlo.partition_id", "stablehlo.replica_id",
    "stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed")
PROBE_MARKERS = ("interpreter.probe", "check.expect_serialized_eq", "interpreter.print",
                 "check.print")


# --------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Check:
    kind: str                 # eq_const, almost_eq_const, eq, almost_eq, close
    value: str                # the checked SSA value, e.g. "%2"
    other: str | None         # the second value of expect_eq / expect_almost_eq
    literal: str | None       # the dense<...> literal of the *_const forms
    type: str                 # the checked value's type
    tolerance: float | None
    max_ulp: int | None = None


@dataclass
class Case:
    file: str
    index: int
    name: str
    text: str
    category: str = "runnable"   # runnable, collective, probe, has-arguments, unparsed
    reason: str = ""
    checks: list[Check] = field(default_factory=list)
    program: str = ""            # the rewritten module (runnable cases)

    @property
    def id(self) -> str:
        return f"{self.file}:{self.name}"


def files(corpus: Path = CORPUS) -> list[Path]:
    return sorted(corpus.glob("*.mlir"))


def cases_of(path: Path) -> list[Case]:
    chunks = re.split(r"^// -----\s*$", path.read_text(), flags=re.M)
    out: list[Case] = []
    for index, chunk in enumerate(chunks):
        body = "\n".join(line for line in chunk.splitlines()
                         if not line.lstrip().startswith("//"))
        if "func.func" not in body:
            continue
        names = re.findall(r"func\.func\s+(?:public\s+|private\s+)?@([\w.$-]+)", body)
        case = Case(path.stem, index, names[0] if names else f"#{index}", body)
        _classify(case)
        out.append(case)
    return out


def _classify(case: Case) -> None:
    text = case.text
    if any(marker in text for marker in COLLECTIVE_MARKERS):
        case.category, case.reason = "collective", "needs several processes or collectives"
        return
    if any(marker in text for marker in PROBE_MARKERS):
        case.category, case.reason = "probe", "interpreter-only probe or printing"
        return
    try:
        checks, program = rewrite(text)
    except ValueError as exc:
        case.category, case.reason = "unparsed", str(exc)
        return
    if program is None:
        case.category, case.reason = "has-arguments", "test function takes arguments"
        return
    case.checks, case.program = checks, program


def _balanced(text: str, start: int, open_: str = "<", close: str = ">") -> int:
    """Index just past the bracket closing the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced {open_}{close} at offset {start}")


def _type_at(text: str, pos: int) -> tuple[str, int]:
    """A type (`tensor<...>`, `!stablehlo.token`, `i32` ...) starting at `pos`."""
    m = re.compile(r"\s*([!\w.]+)").match(text, pos)
    if m is None:
        raise ValueError(f"no type at offset {pos}")
    end = m.end()
    if end < len(text) and text[end] == "<":
        end = _balanced(text, end)
    return text[m.start(1):end], end


_CHECK = re.compile(r"check\.expect_(almost_eq_const|eq_const|almost_eq|eq|close)\b")


def rewrite(text: str) -> tuple[list[Check], str | None]:
    """The checks of the function holding them, and the module with those checks turned
    into the results of `@main` (None when that function takes arguments)."""
    checks: list[Check] = []
    pieces: list[str] = []
    pos = 0
    for m in _CHECK.finditer(text):
        kind = m.group(1)
        cur = m.end()
        vm = re.compile(r"\s*(%[\w#.$-]+)").match(text, cur)
        if vm is None:
            raise ValueError(f"check.expect_{kind}: no operand")
        value, cur = vm.group(1), vm.end()
        other = literal = None
        tolerance: float | None = None
        max_ulp: int | None = None
        if kind.endswith("_const"):
            lm = re.compile(r"\s*,\s*dense<").match(text, cur)
            if lm is None:
                raise ValueError(f"check.expect_{kind}: no dense literal")
            lit_start = lm.end() - len("dense<")
            cur = _balanced(text, lm.end() - 1)
            literal = text[lit_start:cur]
        else:
            om = re.compile(r"\s*,\s*(%[\w#.$-]+)").match(text, cur)
            if om is None:
                raise ValueError(f"check.expect_{kind}: no second operand")
            other, cur = om.group(1), om.end()
            am = re.compile(r"\s*,\s*(tolerance|max_ulp_difference)\s*=\s*([-+\w.]+)"
                            ).match(text, cur)
            if am is not None:
                if am.group(1) == "tolerance":
                    tolerance = float(am.group(2))
                else:
                    max_ulp = int(am.group(2))
                cur = am.end()
        cm = re.compile(r"\s*:").match(text, cur)
        if cm is None:
            raise ValueError(f"check.expect_{kind}: no type")
        type_, cur = _type_at(text, cm.end())
        rest = re.compile(r"\s*,\s*").match(text, cur)
        if kind == "close" and rest is not None:   # `: tensor<..>, tensor<..>`
            _, cur = _type_at(text, rest.end())
        dm = re.compile(r"[ \t]*\{([^}]*)\}").match(text, cur)
        if dm is not None:
            tm = re.search(r"tolerance\s*=\s*([-+\w.]+)", dm.group(1))
            if tm is not None:
                tolerance = float(tm.group(1))
            cur = dm.end()
        checks.append(Check(kind, value, other, literal, type_, tolerance, max_ulp))
        pieces.append(text[pos:m.start()])
        pos = cur
    pieces.append(text[pos:])
    body = "".join(pieces)
    if not checks:
        raise ValueError("no check.expect_* op")
    # The function that held the checks: the one whose body contains the first check.
    first = text[:_CHECK.search(text).start()]  # type: ignore[union-attr]
    heads = list(re.finditer(r"func\.func\s+(?:public\s+|private\s+)?@([\w.$-]+)\s*\(",
                             body))
    head = [h for h in heads if h.start() < len(first)][-1]
    args_end = _balanced(body, head.end() - 1, "(", ")")
    if body[head.end():args_end - 1].strip():
        return checks, None
    brace = body.index("{", args_end)
    close = _balanced(body, brace, "{", "}")
    results: list[tuple[str, str]] = []
    for c in checks:
        results.append((c.value, c.type))
        if c.other is not None:
            results.append((c.other, c.type))
    types = ", ".join(t for _, t in results)
    inner = body[brace + 1:close - 1]
    returns = list(re.finditer(r"(func\.)?return\b[^\n]*", inner))
    if not returns:
        raise ValueError("no func.return in the test function")
    last = returns[-1]
    ret = (f"func.return {', '.join(v for v, _ in results)} : {types}")
    inner = inner[:last.start()] + ret + inner[last.end():]
    name = head.group(1)
    renamed = body[:head.start()] + f"func.func @main() -> ({types}) {{" + inner + "}" + \
        body[close:]
    if name != "main":
        renamed = re.sub(rf"@{re.escape(name)}\b", "@main", renamed)
    return checks, renamed


_ELEMENTS = {
    "i1": "bool", "i2": "int2", "i4": "int4", "i8": "int8", "i16": "int16", "i32": "int32",
    "i64": "int64", "si2": "int2", "si4": "int4", "si8": "int8", "si16": "int16",
    "si32": "int32", "si64": "int64", "ui2": "uint2", "ui4": "uint4", "ui8": "uint8",
    "ui16": "uint16", "ui32": "uint32", "ui64": "uint64", "f16": "float16",
    "bf16": "bfloat16", "f32": "float32", "f64": "float64", "complex<f32>": "complex64",
    "complex<f64>": "complex128", "f8E3M4": "float8_e3m4", "f8E4M3": "float8_e4m3",
    "f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E4M3B11FNUZ": "float8_e4m3b11fnuz", "f8E5M2": "float8_e5m2",
    "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E8M0FNU": "float8_e8m0fnu",
    "f4E2M1FN": "float4_e2m1fn", "f6E2M3FN": "float6_e2m3fn", "f6E3M2FN": "float6_e3m2fn"}


def numpy_type(type_: str) -> tuple[np.dtype, tuple[int, ...]]:
    """The numpy dtype (ml_dtypes for the narrow ones) and shape of `tensor<AxBxE>`."""
    import ml_dtypes

    m = re.fullmatch(r"tensor<((?:\d+x)*)(.+)>", type_.strip())
    if m is None or m.group(2) not in _ELEMENTS:
        raise ValueError(f"type {type_} has no numpy form")
    shape = tuple(int(d) for d in m.group(1).split("x") if d)
    name = _ELEMENTS[m.group(2)]
    dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
    return dtype, shape


def parse_dense(literal: str, type_: str) -> np.ndarray:
    """A `dense<...>` literal of `type_` as a numpy array, parsed from its text (hex
    elements of float types are bit patterns, as MLIR prints them)."""
    dtype, shape = numpy_type(type_)
    body = literal.strip()[len("dense<"):-1].strip()
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    tokens = re.findall(r"\(|\)|\[|\]|,|[^\s,\[\]()]+", body)
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

    def scalar(tok: str, dt: np.dtype) -> Any:
        if tok in ("true", "false"):
            return tok == "true"
        if tok.lower().startswith(("0x", "-0x")) and dt.kind not in "iub":
            return np.array(int(tok, 16), bits[dt.itemsize]).view(dt)[()]
        if dt.name == "float8_e8m0fnu" and float(tok) == 0:
            # e8m0 has no zero: MLIR's APFloat reads 0 as the smallest value (bits 0x00),
            # ml_dtypes as NaN
            return np.array(0, np.uint8).view(dt)[()]
        return int(tok, 0) if dt.kind in "iub" or (dt.kind == "V" and "int" in dt.name) \
            else float(tok)

    part = np.dtype(np.float32 if dtype == np.complex64 else np.float64) \
        if dtype.kind == "c" else dtype
    pos = 0

    def parse() -> Any:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "[":
            items: list[Any] = []
            while tokens[pos] != "]":
                items.append(parse())
                if tokens[pos] == ",":
                    pos += 1
            pos += 1
            return items
        if tok == "(":
            re_ = parse()
            pos += 1   # ","
            im = parse()
            pos += 1   # ")"
            return complex(float(re_), float(im))
        return scalar(tok, part)

    value = parse()
    array = np.array(value, dtype=object)
    if array.shape == () and shape != ():
        array = np.full(shape, value, dtype=object)
    out = np.empty(array.shape, dtype=dtype)
    for index, item in np.ndenumerate(array):
        out[index] = item
    return out.reshape(shape)


# --------------------------------------------------------------------------- compare


def close(kind: str, actual: np.ndarray, expected: np.ndarray,
          tolerance: float | None, max_ulp: int | None = None) -> str | None:
    """None when `actual` passes the check, else why not."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} vs expected {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} vs expected {expected.dtype}"
    if actual.size == 0:
        return None
    if not kind.startswith("almost") and kind != "close":
        if np.issubdtype(expected.dtype, np.inexact) or expected.dtype.kind == "V":
            a = actual.astype(np.complex128 if np.iscomplexobj(expected) else np.float64)
            e = expected.astype(a.dtype)
            same = (a == e) | (np.isnan(a) & np.isnan(e))
        else:
            same = actual == expected
        if bool(np.all(same)):
            return None
        bad = np.argwhere(~np.asarray(same))[0]
        return (f"element {tuple(int(i) for i in bad)}: {actual[tuple(bad)]!r} vs expected "
                f"{expected[tuple(bad)]!r}")
    if kind == "close":
        return _ulp_close(actual, expected, 1 if max_ulp is None else max_ulp)
    tol = DEFAULT_TOLERANCE if tolerance is None else tolerance
    parts = ([actual.real, actual.imag], [expected.real, expected.imag]) \
        if np.iscomplexobj(expected) else ([actual], [expected])
    for a_part, e_part in zip(*parts, strict=True):
        a = a_part.astype(np.float64)
        e = e_part.astype(np.float64)
        with np.errstate(invalid="ignore"):
            ok = (a == e) | (np.isnan(a) & np.isnan(e))
            finite = np.isfinite(a) & np.isfinite(e)
            ok |= finite & (np.signbit(a) == np.signbit(e)) & (np.abs(a - e) <= tol)
            ok |= finite & ((a == 0) | (e == 0)) & (np.abs(a - e) <= tol)
        if not bool(np.all(ok)):
            bad = tuple(int(i) for i in np.argwhere(~ok)[0])
            return (f"element {bad}: {actual[bad]!r} vs expected {expected[bad]!r} "
                    f"(tolerance {tol:g})")
    return None


def _ulp_close(actual: np.ndarray, expected: np.ndarray, max_ulp: int) -> str | None:
    """`expect_close`: at most `max_ulp` representable values apart (same float type)."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[actual.dtype.itemsize]

    def ordered(x: np.ndarray) -> np.ndarray:   # float bits -> integers in value order
        i = x.view(bits).astype(np.int64)
        sign_bit = np.int64(1) << (8 * actual.dtype.itemsize - 1)
        return np.where(i < 0, -(i & ~(-sign_bit)), i)

    distance = np.abs(ordered(actual) - ordered(expected))
    nan = np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    ok = nan | (distance <= max_ulp)
    if bool(np.all(ok)):
        return None
    bad = tuple(int(i) for i in np.argwhere(~ok)[0])
    return (f"element {bad}: {actual[bad]!r} vs expected {expected[bad]!r} "
            f"({int(distance[bad])} ulp apart, at most {max_ulp})")


# --------------------------------------------------------------------------- worker


@dataclass
class Result:
    file: str
    name: str
    category: str
    reason: str = ""
    paths: dict[str, str] = field(default_factory=dict)    # path -> status
    why: dict[str, str] = field(default_factory=dict)      # path -> message
    ops: list[str] = field(default_factory=list)


def _one_line(exc: BaseException | str, limit: int = 240) -> str:
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ops(program: str) -> list[str]:
    return sorted(set(re.findall(r"\b(stablehlo\.[a-z_]+)", program)) - {"stablehlo.constant"})


def run_case(case: Case, skip: Sequence[str] = ()) -> Result:
    """Classify one function (in the worker process); paths in `skip` are not run (a
    worker restarted after a crash goes on with the paths after the one that died)."""
    result = Result(case.file, case.name, case.category, case.reason)
    if case.category != "runnable":
        return result
    result.ops = _ops(case.program)
    from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text

    try:
        expected = _expected(case)
    except Exception as exc:
        result.category, result.reason = "unparsed", "expected value: " + _one_line(exc)
        return result
    runs: list[tuple[str, Any]] = []
    _stage("import")
    model = None
    try:
        with _quiet():
            model = from_mlir(case.program, name=case.name)
    except Exception as exc:
        for path in PATHS[:3]:
            result.paths[path], result.why[path] = "import-refused", _one_line(exc)
    opaque = sorted({n.op for g in model.graphs for n in g.nodes if n.domain}) \
        if model is not None else []
    if opaque:
        for path in PATHS[:3]:
            result.paths[path] = "opaque"
            result.why[path] = "opaque nodes: " + ", ".join(opaque)
    elif model is not None:
        def ir_path() -> list[np.ndarray]:
            from irbridge.executor import run_model
            return run_model(model, [])

        def shlo_path() -> list[np.ndarray]:
            return evaluate(to_mlir_text(model), [])

        def onnx_path() -> list[np.ndarray]:
            import onnxruntime as ort

            from irbridge.converters.onnx import to_onnx
            from irbridge.converters.onnx._complex import complex_values, from_pairs
            proto = to_onnx(model)
            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
            paired = complex_values(proto)  # complex outputs: float [..., 2] (real, imag)
            return [from_pairs(_ort_array(v), paired[o.name]) if o.name in paired
                    else _ort_array(v) for o, v in zip(session.get_outputs(),
                                                       session.run_with_ort_values(None, {}),
                                                       strict=True)]

        runs += [("ir", ir_path), ("stablehlo", shlo_path), ("onnx", onnx_path)]
    for path in PATHS[:3]:
        if path in result.paths and path not in skip:
            _report(path, result)
    runs.append(("interpreter", lambda: evaluate(case.program, [])))
    for path, fn in runs:
        if path in skip:
            continue
        _stage(path)
        try:
            with _quiet():
                outputs = fn()
        except Exception as exc:
            result.paths[path], result.why[path] = "error", _one_line(exc)
            _report(path, result)
            continue
        problem = _compare_all(case.checks, outputs, expected)
        if problem is None:
            result.paths[path] = "pass"
        else:
            result.paths[path], result.why[path] = "mismatch", problem
        _report(path, result)
    return result


_ORT_NUMPY = {f"tensor({t})" for t in ("float", "double", "float16", "bool", "int8", "int16",
                                       "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                       "complex64", "complex128")}


def _ort_array(value: Any) -> np.ndarray:
    """An onnxruntime result as numpy; the types its numpy bridge refuses (bfloat16,
    float8, the packed int4 / int2) are read as ONNX raw data by numpy_helper."""
    import ctypes

    from onnx import TensorProto, numpy_helper

    kind = value.data_type()  # "tensor(float8e4m3fn)": the ONNX type name, lower case
    if kind in _ORT_NUMPY:
        return np.asarray(value.numpy())
    size = value.tensor_size_in_bytes()
    proto = TensorProto(dims=value.shape(),
                        data_type=TensorProto.DataType.Value(kind[len("tensor("):-1].upper()),
                        raw_data=ctypes.string_at(value.data_ptr(), size) if size else b"")
    return np.asarray(numpy_helper.to_array(proto))


def _report(path: str, result: Result) -> None:
    print(json.dumps({"path": path, "status": result.paths[path],
                      "why": result.why.get(path, "")}), flush=True)


def _expected(case: Case) -> list[np.ndarray | None]:
    """One expected array per checked result, parsed from the `check` literal (None for
    the values of an expect_eq pair: they are compared with each other)."""
    out: list[np.ndarray | None] = []
    for c in case.checks:
        out.append(parse_dense(c.literal, c.type) if c.literal is not None else None)
        if c.other is not None:
            out.append(None)
    return out


def _compare_all(checks: Sequence[Check], outputs: Sequence[np.ndarray],
                 expected: Sequence[np.ndarray | None]) -> str | None:
    if len(outputs) != len(expected):
        return f"{len(outputs)} results, expected {len(expected)}"
    index = 0
    for c in checks:
        if c.other is None:
            problem = close(c.kind, outputs[index], expected[index], c.tolerance)  # type: ignore[arg-type]
            index += 1
        else:
            problem = close(c.kind, outputs[index], outputs[index + 1], c.tolerance,
                            c.max_ulp)
            index += 2
        if problem is not None:
            return f"{c.value}: {problem}"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()):
            yield


def _stage(name: str) -> None:
    """Tell the driver which stage runs, so an abort is charged to the right path."""
    print(json.dumps({"stage": name}), flush=True)


def worker(path: Path, start: int, skip: Sequence[str] = ()) -> None:
    """Run the cases of one file from position `start`, one JSON line each; the first
    one without the paths in `skip`."""
    for position, case in enumerate(cases_of(path)):
        if position < start:
            continue
        print(json.dumps({"start": position}), flush=True)
        result = run_case(case, skip if position == start else ())
        print(json.dumps({"result": asdict(result)}), flush=True)


# --------------------------------------------------------------------------- driver


def run_file(path: Path, timeout: float = CASE_TIMEOUT_S) -> list[Result]:
    cases = cases_of(path)
    results: list[Result] = []
    start = 0
    skip: list[str] = []
    carried: dict[str, tuple[str, str]] = {}
    while start < len(cases):
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(path), "--start", str(start),
             "--skip", ",".join(skip)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        assert proc.stdout is not None
        current = start
        stage = "tool"
        partial: dict[str, tuple[str, str]] = {}
        deadline = time.monotonic() + timeout * (len(cases) - start)
        failed: str | None = None
        for line in proc.stdout:
            msg = json.loads(line)
            if "start" in msg:
                current, stage = msg["start"], "tool"
                partial = dict(carried) if current == start else {}
            elif "stage" in msg:
                stage = msg["stage"]
            elif "path" in msg:
                partial[msg["path"]] = (msg["status"], msg["why"])
            else:
                result = Result(**msg["result"])
                if current == start and carried:   # paths that ran before a crash
                    for p, (status, why) in carried.items():
                        result.paths.setdefault(p, status)
                        if why:
                            result.why.setdefault(p, why)
                results.append(result)
                current += 1
            if time.monotonic() > deadline:
                proc.kill()
                failed = "timeout"
                break
        code = proc.wait()
        if current >= len(cases):
            break
        failed = failed or ("timeout" if code == -9 else f"crash (exit {code})")
        case = cases[current]
        if stage == "tool":   # the tool's own parsing died: a tool gap
            results.append(Result(case.file, case.name, "unparsed",
                                  f"the tool itself: {failed}", ops=_ops(case.program)))
            start, skip, carried = current + 1, [], {}
            continue
        # Record the crash against the stage that died and go on with the same case's
        # later paths in a fresh worker.
        carried = dict(partial)
        died = (failed.split()[0], f"{failed} in the {stage} stage")
        for p in (PATHS[:3] if stage == "import" else (stage,)):   # import: no IR at all
            carried[p] = died
        skip = list(carried)
        start = current
    return results


def run(paths: Sequence[Path], jobs: int = 2) -> list[Result]:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [r for rs in pool.map(run_file, paths) for r in rs]


# --------------------------------------------------------------------------- report


def summarize(results: Sequence[Result]) -> dict[str, Any]:
    categories = Counter(r.category for r in results)
    runnable = [r for r in results if r.category == "runnable"]
    by_path = {p: dict(Counter(r.paths.get(p, "?") for r in runnable)) for p in PATHS}
    return {"functions": len(results), "files": len({r.file for r in results}),
            "categories": dict(sorted(categories.items())), "runnable": len(runnable),
            "paths": by_path,
            "mismatches": {p: sum(r.paths.get(p) == "mismatch" for r in runnable)
                           for p in PATHS[:3]},
            "crashes": sum(any(r.paths.get(p) in ("crash", "timeout") for p in PATHS[:3])
                           for r in runnable)}


def _cause(result: Result, path: str) -> str:
    status = result.paths.get(path, "?")
    why = result.why.get(path, "")
    if status == "opaque":
        return "opaque: " + why.split(": ", 1)[-1]
    if status in ("import-refused", "error"):
        text = re.sub(r"%[\w#.$-]+|\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", why)
        text = re.sub(r"<string>:?|'[^']*'|\"[^\"]*\"", "", text)
        return f"{status}: {text[:110]}"
    return status


def write_doc(results: Sequence[Result], summary: dict[str, Any], seconds: float) -> None:
    runnable = [r for r in results if r.category == "runnable"]
    n = len(runnable)

    def pct(k: int) -> str:
        return f"{100 * k / n:.1f}%" if n else "-"

    lines = [
        "# StableHLO conformance: StableHLO's interpreter tests through irbridge",
        "",
        "Generated by `uv run python tools/stablehlo_conformance.py` (do not edit by hand); "
        f"this run took {seconds:.0f} s on 2 cores. "
        "`tests/stablehlo/test_stablehlo_conformance.py` holds the baseline "
        "(`tests/data/stablehlo_conformance_baseline.json`): pass counts can only go up "
        "and mismatches stay at 0.",
        "",
        "The corpus is StableHLO's own `stablehlo/tests/interpret/` files (StableHLO 1.20.0, "
        "`../shared/conformance/stablehlo-interpret/`). Each function's `check.*` ops are "
        "turned into results of `@main`; the expected values come from the `check` "
        "constants evaluated by the StableHLO reference interpreter, never from irbridge. "
        "Paths: **ir** = irbridge's importer then the IR executor; **stablehlo** = that IR "
        "exported back to StableHLO and run in the reference interpreter; **onnx** = that "
        "IR exported to ONNX and run in onnxruntime; **interpreter** = the rewritten "
        "program as written, run in the reference interpreter (a check of this tool: "
        "where it fails, the reference interpreter or irbridge's wrapper of it is at "
        "fault, not the import). Tolerances are the check dialect's: "
        "exact for `expect_eq*`, |a - b| <= 1e-4 (or the case's `tolerance`) for "
        "`expect_almost_eq*`, ulp distance for `expect_close`. The expected values are "
        "parsed from the `check` literals' text into numpy (ml_dtypes for narrow types).",
        "",
        "## Totals",
        "",
        f"{summary['functions']} functions in {summary['files']} files.",
        "",
        "| category | functions | meaning |",
        "|---|---:|---|",
    ]
    meaning = {
        "runnable": "single-device programs: run through every path below",
        "collective": "collectives / several processes (`run_parallel`, all_reduce, "
                      "send/recv, infeed/outfeed, replica/partition ids): outside a "
                      "single-device IR, counted apart",
        "probe": "interpreter-only probes and printing (`interpreter.probe`, "
                 "`expect_serialized_eq`)",
        "has-arguments": "functions with arguments, called only from `run_parallel`",
        "unparsed": "the tool could not rewrite the function (a tool gap)",
    }
    for cat, count in summary["categories"].items():
        lines.append(f"| {cat} | {count} | {meaning.get(cat, '')} |")
    lines += ["", f"Of the {n} runnable functions:", "",
              "| path | pass | mismatch | error | import refused | opaque | crash/timeout |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for p in PATHS:
        c = summary["paths"][p]
        lines.append(f"| {p} | {c.get('pass', 0)} ({pct(c.get('pass', 0))}) | "
                     f"{c.get('mismatch', 0)} | {c.get('error', 0)} | "
                     f"{c.get('import-refused', 0)} | {c.get('opaque', 0)} | "
                     f"{c.get('crash', 0) + c.get('timeout', 0)} |")
    lines += ["", "## Causes (ir path)", "",
              "Every runnable function that does not pass through the IR executor, grouped "
              "by cause (numbers and value names folded).", "",
              "| cause | functions | examples |", "|---|---:|---|"]
    causes: dict[str, list[str]] = defaultdict(list)
    for r in runnable:
        if r.paths.get("ir") != "pass":
            causes[_cause(r, "ir")].append(f"{r.file}:{r.name}")
    for cause, names in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(f"`{x}`" for x in names[:4]) + (" ..." if len(names) > 4 else "")
        lines.append(f"| {cause.replace('|', '/')} | {len(names)} | {shown} |")
    lines += ["", "## By file (op)", "",
              "| file | runnable | ir | stablehlo | onnx | interpreter | other categories |",
              "|---|---:|---:|---:|---:|---:|---|"]
    per_file: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        per_file[r.file].append(r)
    for name, rs in sorted(per_file.items()):
        run_ = [r for r in rs if r.category == "runnable"]
        other = Counter(r.category for r in rs if r.category != "runnable")
        cells = [str(sum(r.paths.get(p) == "pass" for r in run_)) for p in PATHS]
        lines.append(f"| {name} | {len(run_)} | " + " | ".join(cells) + " | " +
                     ", ".join(f"{k} {v}" for k, v in sorted(other.items())) + " |")
    lines += ["", "## Failures with their messages", "",
              "| function | path | status | message |", "|---|---|---|---|"]
    for r in runnable:
        for p in PATHS:
            if r.paths.get(p) != "pass":
                msg = r.why.get(p, "").replace("|", "/")
                lines.append(f"| `{r.file}:{r.name}` | {p} | {r.paths.get(p)} | {msg} |")
    DOC.write_text("\n".join(lines) + "\n")


def baseline(results: Sequence[Result], summary: dict[str, Any]) -> dict[str, Any]:
    return {"summary": summary,
            "passing": {p: sorted(f"{r.file}:{r.name}" for r in results
                                  if r.paths.get(p) == "pass") for p in PATHS},
            "crashing": {p: sorted(f"{r.file}:{r.name}" for r in results
                                   if r.paths.get(p) in ("crash", "timeout"))
                         for p in PATHS[:3]}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", help="comma-separated file stems to run (prints only)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--skip", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(Path(args.worker), args.start, [x for x in args.skip.split(",") if x])
        return 0
    paths = files()
    if not paths:
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    if args.k:
        wanted = set(args.k.split(","))
        paths = [p for p in paths if p.stem in wanted]
    t0 = time.monotonic()
    results = run(paths, jobs=args.jobs)
    seconds = time.monotonic() - t0
    summary = summarize(results)
    print(json.dumps(summary, indent=1))
    if args.k:
        for r in results:
            if r.category == "runnable" and any(r.paths.get(p) != "pass" for p in PATHS):
                print(r.file, r.name, r.paths, r.why)
        return 0
    write_doc(results, summary, seconds)
    BASELINE.write_text(json.dumps(baseline(results, summary), indent=1, sort_keys=True)
                        + "\n")
    print(f"wrote {DOC.relative_to(ROOT)} and {BASELINE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
