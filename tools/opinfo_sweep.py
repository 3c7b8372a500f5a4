"""PyTorch's own operator database (OpInfo `op_db`) through irbridge and through torch.onnx.

    uv run python tools/opinfo_sweep.py --jobs 2 --state /work/opinfo-state   # all ops, writes
    uv run python tools/opinfo_sweep.py --only add atan2 cumsum               # some ops, prints
    uv run python tools/opinfo_sweep.py --state DIR --report                  # doc from DIR

Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db` is tried,
except the ones set aside (`set_aside`: random or uninitialised outputs, sparse layouts),
at float32, or for an op with no float32 CPU support at the first of `OTHER_DTYPES` it
supports (bitwise ops and shifts at int64, `view_as_real` at complex64). For each op, the
first sample of `op.sample_inputs("cpu", dtype)` (seeded from the op's name) is wrapped in an
`nn.Module` whose forward takes the sample's tensors as inputs and calls
`op.op(*args, **kwargs)` with everything else fixed. Paths, side by side:

* `irbridge` - `capture(frontend="export")` + `verify` (the IR executor against eager);
* `onnx`     - that IR through irbridge's ONNX exporter (`to_onnx`) into onnxruntime;
* `stablehlo`- that IR through irbridge's StableHLO exporter into the StableHLO reference
  interpreter (`evaluate`);
* `torch.onnx` - the peer: `torch.onnx.export(model, args, dynamo=True)` into onnxruntime.

A second input per op (the float tensors scaled elementwise by a seeded factor in
[0.85, 1.0]: same shapes, same signs and zeros; integer and bool tensors unchanged) is fed
to the IR and to the exported files and compared with eager on that input, which catches
values baked in from the example input. Factors are drawn again where rounding would tie
two distinct values (ties make sort indices implementation-defined), and an IR result
that misses eager float32 but matches the op in float64 while eager float32 does not is
a pass with a note (eager is the inaccurate side).

Each op runs in a forked child of this process (the imports happen once, here; no torch
computation runs in the parent) under a per-path time limit; a child that dies or times
out is recorded as `crash` / `timeout` for the path it was on and the op's remaining paths
run in a fresh child. Results go to `--state DIR` (one JSON file per op), so an
interrupted run resumes where it stopped. Linux only (fork).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import sys
import time
import traceback
import urllib.parse
import warnings
import zlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "pytorch-opinfo.md"
BASELINE = ROOT / "tests" / "data" / "pytorch_opinfo_baseline.json"
PATHS = ("irbridge", "onnx", "stablehlo", "torch.onnx")
STATUSES = ("pass", "mismatch", "unsupported", "error", "crash", "timeout", "no IR")
PATH_TIMEOUT_S = 120.0
COMMAND = "uv run python tools/opinfo_sweep.py --jobs 2 --state /work/opinfo-state"

# torch.testing.assert_close's defaults (torch/testing/_comparison.py, `_DTYPE_PRECISIONS`):
# |actual - expected| <= atol + rtol * |expected| per element; integers and bool exact.
TORCH_TOLERANCES = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
}  # dtype: (rtol, atol)

# Set aside, with the reason (kept in the doc). Random ops draw fresh values on every call
# (no exporter can match them); `empty*` return uninitialised memory; sparse layouts are
# outside the dense IR. Ops found nondeterministic at run time (two eager calls under
# different seeds differ) are set aside too, as `nondeterministic`.
RANDOM = ("bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
          "normal", "rand_like", "randint", "randint_like", "randn", "randn_like", "uniform",
          "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
          "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
          "nn.functional.rrelu", "nn.functional.gumbel_softmax")
UNINITIALISED = ("empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                 "new_empty_strided")


OTHER_DTYPES = ("int64", "int32", "bool", "uint8", "complex64", "float64")
"""The dtypes an op with no float32 CPU support is swept at: the first it supports."""


def sample_dtype(op: Any) -> Any:
    """float32, else the first of OTHER_DTYPES the op supports on CPU (None: none)."""
    import torch

    supported = op.supported_dtypes("cpu")
    for name in ("float32", *OTHER_DTYPES):
        if getattr(torch, name) in supported:
            return getattr(torch, name)
    return None


def set_aside(name: str) -> str | None:
    base = name.split(".", 1)[0] if not name.startswith("nn.") else name
    if name in RANDOM or base in RANDOM or name.split(".")[0] in ("bernoulli", "normal"):
        return "random values"
    if name in UNINITIALISED:
        return "uninitialised output"
    if "sparse" in name:
        return "sparse layout"
    return None


# -- the op database ----------------------------------------------------------------------

def op_key(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def database() -> tuple[dict[str, Any], dict[str, str]]:
    """(ops to try by key, key -> why set aside) over the whole op_db."""
    from torch.testing._internal.common_methods_invocations import op_db

    tried: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for op in op_db:
        key = op_key(op)
        if sample_dtype(op) is None:
            skipped[key] = "no float32 or integer type on CPU"
            continue
        why = set_aside(key)
        if why:
            skipped[key] = why
            continue
        if key in tried:
            raise SystemExit(f"error: two OpInfos share the key {key!r}")
        tried[key] = op
    return tried, skipped


def preload() -> None:
    """Imports the children use, once, here. No torch computation: forking after OpenMP
    started its threads is not safe, so torch runs single-threaded and nothing runs yet."""
    warnings.filterwarnings("ignore")
    import onnxruntime  # noqa: F401
    import torch

    torch.set_num_threads(1)
    import torch.onnx
    import torch.testing._internal.common_methods_invocations

    import irbridge.converters.onnx
    import irbridge.converters.pytorch
    import irbridge.converters.stablehlo.evaluate
    import irbridge.converters.stablehlo.export  # noqa: F401
    with contextlib.suppress(ImportError):
        import onnxscript  # noqa: F401


def warm_up(ops: Mapping[str, Any], paths: Sequence[str]) -> None:
    """One op through every path here, before any fork: the first torch.export, Dynamo and
    torch.onnx calls initialise caches and registries for seconds (measured: 3.5 s each),
    which every child would otherwise repeat. torch runs single-threaded and onnxruntime
    sessions with one thread, so no thread pool exists when the children fork."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_op(ops["add"], "add", paths)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if threads > 1:
        print(f"note: {threads} threads after the warm-up; children fork anyway",
              file=sys.stderr)


# -- one op, in a child -------------------------------------------------------------------

def one_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()[0].strip() if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    line = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", line)
    line = re.sub(r"/tmp/[^\s:'\"]+", "/tmp/...", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Sample:
    """The op's first CPU sample at `sample_dtype` (float32 for most) as a module with
    tensor inputs, and a second, perturbed input of the same shapes."""

    def __init__(self, op: Any, key: str) -> None:
        import torch
        import torch.utils._pytree as pytree

        seed = zlib.crc32(key.encode())
        torch.manual_seed(seed)
        sample = next(iter(op.sample_inputs("cpu", sample_dtype(op), requires_grad=False)))
        leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args),
                                            dict(sample.kwargs)))
        positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.leaves = [x.detach().clone() if isinstance(x, torch.Tensor) else x
                       for x in leaves]
        self.spec = spec
        self.positions = positions
        self.inputs = tuple(self.leaves[i] for i in positions)
        gen = torch.Generator().manual_seed(seed + 1)
        second = []
        for t in self.inputs:
            if t.is_floating_point() or t.is_complex():
                second.append(self._scaled(t, gen))
            else:
                second.append(t.clone())
        self.second = tuple(second)
        self.module = self._module(op.op if key not in SIGN_FREE
                                   else _sign_normalised(op.op, *SIGN_FREE[key]))
        self.describe = ", ".join(
            f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in self.inputs)

    @staticmethod
    def _scaled(t: Any, gen: Any) -> Any:
        """`t` scaled elementwise by factors in [0.85, 1.0]. Factors are drawn again (up to
        20 times) when rounding the scaled values to t's dtype makes two distinct values
        equal: a tie the example input did not have makes the order of equal elements
        (sort and argsort indices, topk, ...) implementation-defined, which every path
        would then fail for a reason that is not the op's."""
        import torch

        distinct = int(torch.unique(t).numel()) if not t.is_complex() else None
        for _ in range(20):
            factor = torch.rand(t.shape, generator=gen, dtype=torch.float64) * 0.15 + 0.85
            out = ((t.double() * factor).to(t.dtype) if not t.is_complex()
                   else t * factor.to(t.dtype))
            if distinct is None or int(torch.unique(out).numel()) >= distinct:
                break
        return out

    def _module(self, fn: Any) -> Any:
        import torch
        import torch.utils._pytree as pytree

        leaves, spec, positions = self.leaves, self.spec, self.positions
        names = [f"x{i}" for i in range(len(positions))]

        def call(*tensors: Any) -> Any:
            filled = list(leaves)
            for i, t in zip(positions, tensors, strict=True):
                filled[i] = t
            inp, args, kwargs = pytree.tree_unflatten(filled, spec)
            return fn(inp, *args, **kwargs)

        # an explicit signature (x0, x1, ...): both exporters name inputs after it
        scope: dict[str, Any] = {"call": call}
        exec(f"def forward(self, {', '.join(names)}):\n    return call({', '.join(names)})\n"
             if names else "def forward(self):\n    return call()\n", scope)
        cls = type("OpInfoModule", (torch.nn.Module,), {"forward": scope["forward"]})
        return cls()

    def eager(self, inputs: tuple[Any, ...]) -> list[Any]:
        import torch

        from irbridge.converters.pytorch._util import tensor_leaves

        with torch.no_grad():
            out = self.module(*[t.clone() for t in inputs])
        # resolve_conj: fft.ifft / fft.ihfft return a lazily conjugated view
        return [t.detach().resolve_conj().numpy() if t.dtype != torch.bfloat16
                else t.float().numpy() for t in tensor_leaves(out)]


# Ops whose vectors are unique only up to a sign per column (LAPACK builds differ in the
# signs they return): the module under test returns them sign-normalised, the registry's
# rule (irbridge/ops/linalg.py): each column of output `vectors` has its largest-magnitude
# entry positive (the first of equal ones), output `partner` (if any) flipped with it, by
# column or by row. Every path captures the same rule, so eager and each export are
# compared on the part that is unique; a sign difference alone is no mismatch.
SIGN_FREE = {"linalg.eigh": (1, None, False),  # (vectors, partner, partner by rows)
             "linalg.svd": (0, 2, True), "svd": (0, 2, False)}


def _sign_normalised(fn: Any, vectors: int, partner: int | None, rows: bool) -> Any:
    import torch

    def call(*args: Any, **kwargs: Any) -> Any:
        out = list(fn(*args, **kwargs))
        v = out[vectors]
        if v.numel() == 0:
            return tuple(out)
        peak = torch.gather(v, -2, v.abs().argmax(dim=-2, keepdim=True))
        signs = torch.where(peak < 0, -1.0, 1.0).to(v.dtype)  # (..., 1, c)
        out[vectors] = v * signs
        if partner is not None:
            k = out[partner].shape[-2 if rows else -1]
            s = signs[..., :k]
            out[partner] = out[partner] * (s.mT if rows else s)
        return tuple(out)
    return call


def compare(got: Sequence[Any], ref: Sequence[Any], tol: str = "torch") -> str | None:
    """None when `got` matches `ref`, else why. tol="torch": torch.testing's per-element
    tolerance; tol="verify": irbridge verify's (atol + rtol * max |ref|)."""
    import numpy as np

    from irbridge.converters.pytorch.verify import TOLERANCES
    from irbridge.dtypes import DType

    if len(got) != len(ref):
        return f"{len(got)} outputs, eager has {len(ref)}"
    for index, (g, r) in enumerate(zip(got, ref, strict=True)):
        g = np.asarray(g)
        r = np.asarray(r)
        if r.dtype.kind == "c" and g.dtype.kind == "f" and g.shape == (*r.shape, 2):
            g = g[..., 0] + 1j * g[..., 1]  # complex as a trailing (real, imag) pair
        if g.shape != r.shape:
            return f"output {index}: shape {list(g.shape)} != eager {list(r.shape)}"
        if r.size == 0:
            continue
        name = r.dtype.name
        if r.dtype.kind in "fc":
            if tol == "torch":
                rtol, atol = TORCH_TOLERANCES.get(name, (1.3e-6, 1e-5))
            else:
                atol, rtol = TOLERANCES.get(DType.from_numpy(r.dtype), (1e-5, 1e-4))
        else:
            rtol, atol = 0.0, 0.0
        a = g.astype(np.complex128 if r.dtype.kind == "c" else np.float64)
        b = r.astype(np.complex128 if r.dtype.kind == "c" else np.float64)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a - b)
            same = (a == b) | (nan_a & nan_b)
            diff = np.where(same, 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)
            finite = np.abs(b[np.isfinite(b)])
            scale = float(finite.max()) if finite.size else 0.0
            if tol == "torch":
                bound = atol + rtol * np.where(np.isfinite(b), np.abs(b), 0.0)
            else:
                bound = np.full(b.shape, atol + rtol * scale)
            bad = diff > bound
        if bad.any():
            max_abs = float(diff.max())
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = diff / np.where(np.abs(b) > 0, np.abs(b), np.inf)
                max_rel = float(np.where(np.isfinite(b), rel, np.where(diff > 0, np.inf, 0)).max())
            where = "per element" if tol == "torch" else "of max |eager|"
            return (f"output {index}: max abs err {max_abs:.3g}, max rel err {max_rel:.3g} "
                    f"(tolerance atol {atol:g} + rtol {rtol:g} {where}; "
                    f"{int(bad.sum())}/{bad.size} elements off)")
    return None


def run_op(op: Any, key: str, paths: Sequence[str],
           emit: Any = None) -> dict[str, Any]:
    """Run `paths` of one op; `emit(record)` is called after the sample is built ("meta")
    and after each path, so a parent learns how far a child got."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    record: dict[str, Any] = {"op": key, "paths": {}}

    def send(kind: str, **data: Any) -> None:
        if emit is not None:
            emit({"kind": kind, **data})

    def result(path: str, status: str, message: str = "", **extra: Any) -> None:
        entry = {"status": status, "message": message, **extra}
        record["paths"][path] = entry
        send("path", path=path, result=entry)

    try:
        sample = Sample(op, key)
        ref1 = sample.eager(sample.inputs)
    except Exception as exc:
        record["sample_error"] = one_line(exc)
        send("meta", sample_error=record["sample_error"])
        return record
    torch.manual_seed(12345)
    ref1_again = sample.eager(sample.inputs)
    if len(ref1) != len(ref1_again) or not all(
            np.array_equal(a, b, equal_nan=True) for a, b in zip(ref1, ref1_again,
                                                                   strict=True)):
        record["set_aside"] = "nondeterministic (two eager calls differ)"
        send("meta", set_aside=record["set_aside"])
        return record
    try:
        ref2: list[Any] | None = sample.eager(sample.second)
    except Exception as exc:  # e.g. a factorisation of the perturbed matrix fails
        ref2 = None
        record["second_input"] = f"eager fails on it: {one_line(exc)}"
    record["sample"] = sample.describe
    send("meta", sample=sample.describe, second_input=record.get("second_input", ""))
    inputs = [(1, sample.inputs, ref1)] + ([(2, sample.second, ref2)] if ref2 is not None
                                           else [])

    cap = None
    ir_wanted = [p for p in paths if p in ("irbridge", "onnx", "stablehlo")]
    if ir_wanted:
        from irbridge.converters.pytorch import capture, verify
        from irbridge.executor import run_graphs

        try:
            cap = capture(sample.module, sample.inputs, frontend="export")
        except Exception as exc:
            if "irbridge" in paths:
                result("irbridge", "error", one_line(exc))
        if cap is not None:
            opaque = dict(sorted(cap.stats.opaque.items()))
            record["opaque"] = opaque
            names = {id(t): i for i, t in enumerate(sample.inputs)}
            order = [names.get(id(t)) for t in cap.inputs.values()]
            feeds_of = {n: [ins[i] for i in order] for n, ins, _ in inputs}  # type: ignore
            in_names = list(cap.inputs)
            mapping = cap.outputs
            single = len(cap.model.graphs) == 1 and all(
                m is not None and m[0] == 0 for m in mapping)
            out_names = ([cap.model.graphs[0].outputs[m[1]].name for m in mapping
                          if m is not None] if single else [])
        if cap is not None and "irbridge" in paths:
            if opaque:
                result("irbridge", "unsupported", "opaque: " + ", ".join(
                    f"{k} x{v}" for k, v in opaque.items()), opaque=opaque)
            else:
                try:
                    report = verify(cap, sample.module)
                    if report.error:
                        result("irbridge", "error", report.error)
                    elif not report.passed:
                        bad = [o for o in report.outputs if not o.passed]
                        if not bad:  # nothing compared (no tensor output): say so
                            result("irbridge", "error", "verify compared no output")
                        else:
                            o = bad[0]
                            why = o.note or (f"output {o.index}: max abs err "
                                             f"{o.max_abs_error:.3g}, max rel err "
                                             f"{o.max_rel_error:.3g} (tolerance atol "
                                             f"{o.atol:g} + rtol {o.rtol:g} of max |eager|)")
                            result("irbridge", "mismatch", f"input 1: {why}")
                    else:
                        why, note, inaccurate = None, "", False
                        if ref2 is not None:
                            feeds = {n: t.numpy() for n, t in zip(in_names, feeds_of[2],
                                                                  strict=True)}
                            outs = run_graphs(cap.model, feeds)
                            got = [outs[g][p] for g, p in mapping]  # type: ignore[misc]
                            why = compare(got, ref2, "verify")
                            inaccurate = bool(why) and _eager_inaccurate(sample, got, ref2)
                            if inaccurate:
                                note = (f"input 2: eager float32 is the inaccurate side "
                                        f"({why}); the IR agrees with eager float64")
                                why = None
                        if why:  # verify passed: a user would not have been told
                            result("irbridge", "mismatch", f"input 2: {why}",
                                   silently_wrong=True)
                        else:
                            result("irbridge", "pass", note,
                                   **({"eager_inaccurate": True} if inaccurate else {}))
                except Exception as exc:
                    result("irbridge", "error", one_line(exc))

    if "onnx" in paths:
        if cap is None:
            result("onnx", "no IR")
        elif not single:
            result("onnx", "error", "capture mapped outputs outside one graph")
        else:
            _onnx_path(cap, in_names, out_names, feeds_of, inputs, bool(opaque), result)

    if "stablehlo" in paths:
        if cap is None:
            result("stablehlo", "no IR")
        elif not single:
            result("stablehlo", "error", "capture mapped outputs outside one graph")
        else:
            _stablehlo_path(cap, in_names, out_names, feeds_of, inputs, bool(opaque), result)

    if "torch.onnx" in paths:
        _torch_onnx_path(sample, inputs, result)
    return record


def _eager_inaccurate(sample: Sample, got: Sequence[Any], ref: Sequence[Any]) -> bool:
    """Whether eager float32 is the inaccurate side of a mismatch: the same op on the
    second input widened to float64 agrees with the IR (verify's tolerance) and not with
    eager float32. Near a pole or a cancellation (polygamma close to a negative integer)
    torch's float32 kernels lose digits that the IR's float64 references keep; the IR is
    then right and eager is not, which is not a silently wrong capture (the record says
    so in its message)."""
    import torch

    try:
        wide = tuple(t.double() if t.dtype == torch.float32 else t for t in sample.second)
        ref64 = sample.eager(wide)
    except Exception:
        return False
    return compare(got, ref64, "verify") is None and compare(ref, ref64, "verify") is not None


def _float_outputs(data: bytes) -> bytes:
    """onnxruntime's Python API cannot return bfloat16 arrays ("No corresponding Numpy
    type"): each bfloat16 graph output gets a Cast to float32 (exact) under its own name,
    so the values the file computes can be compared. Other outputs are untouched."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load_from_string(data)
    graph = model.graph
    bf16 = [o for o in graph.output if o.type.tensor_type.elem_type == TensorProto.BFLOAT16]
    if not bf16:
        return data
    for out in bf16:
        inner = f"{out.name}__bf16"
        for node in graph.node:
            node.output[:] = [inner if n == out.name else n for n in node.output]
            node.input[:] = [inner if n == out.name else n for n in node.input]
        graph.node.append(helper.make_node("Cast", [inner], [out.name],
                                           to=TensorProto.FLOAT))
        out.type.tensor_type.elem_type = TensorProto.FLOAT
    return model.SerializeToString()


def _ort_session(data: bytes) -> Any:
    import onnxruntime as ort

    data = _float_outputs(data)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _check_runs(run: Any, inputs: Sequence[tuple[int, Any, Any]]) -> str | None:
    """Run each input through `run(n, tensors)` and compare with eager (torch tolerance)."""
    for n, tensors, ref in inputs:
        why = compare(run(n, tensors), ref, "torch")
        if why:
            return f"input {n}: {why}"
    return None


def _onnx_path(cap: Any, in_names: list[str], out_names: list[str],
               feeds_of: Mapping[int, Any], inputs: Sequence[tuple[int, Any, Any]],
               opaque: bool, result: Any) -> None:
    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.onnx._complex import complex_values, from_pairs, to_pairs

    try:
        proto = to_onnx(cap.model)
    except Exception as exc:
        result("onnx", "unsupported" if opaque else "error", one_line(exc))
        return
    # exported without complaint: from here on, any failure is silently wrong
    try:
        session = _ort_session(proto.SerializeToString())
    except Exception as exc:
        result("onnx", "error", f"onnxruntime cannot load it: {one_line(exc)}",
               silently_wrong=True)
        return
    wanted = {i.name for i in session.get_inputs()}
    outs = [o.name for o in session.get_outputs()]
    paired = complex_values(proto)  # complex inputs and outputs: (real, imag) pairs

    def run(n: int, tensors: Any) -> list[Any]:
        feeds = {name: to_pairs(t.resolve_conj().numpy()) if name in paired else t.numpy()
                 for name, t in zip(in_names, feeds_of[n], strict=True) if name in wanted}
        got = dict(zip(outs, session.run(None, feeds), strict=True))
        return [from_pairs(got[name], paired[name]) if name in paired else got[name]
                for name in out_names]

    try:
        why = _check_runs(run, inputs)
    except Exception as exc:
        result("onnx", "error", f"onnxruntime fails running it: {one_line(exc)}",
               silently_wrong=True)
        return
    if why:
        result("onnx", "mismatch", why, silently_wrong=True)
    else:
        result("onnx", "pass")


def _stablehlo_path(cap: Any, in_names: list[str], out_names: list[str],
                    feeds_of: Mapping[int, Any], inputs: Sequence[tuple[int, Any, Any]],
                    opaque: bool, result: Any) -> None:
    from irbridge.converters.stablehlo.evaluate import evaluate
    from irbridge.converters.stablehlo.export import build_module

    try:
        module = build_module(cap.model)
    except Exception as exc:
        result("stablehlo", "unsupported" if opaque else "error", one_line(exc))
        return
    where = {name: i for i, name in enumerate(in_names)}
    results = list(module.output_names)

    def run(n: int, tensors: Any) -> list[Any]:
        arrays = [feeds_of[n][where[name]].numpy() for name in module.input_names]
        got = dict(zip(results, evaluate(module, arrays), strict=True))
        return [got[name] for name in out_names]

    try:
        why = _check_runs(run, inputs)
    except Exception as exc:
        result("stablehlo", "error", one_line(exc))
        return
    result("stablehlo", "mismatch" if why else "pass", why or "")


def _torch_onnx_path(sample: Sample, inputs: Sequence[tuple[int, Any, Any]],
                     result: Any) -> None:
    import torch

    try:
        program = torch.onnx.export(sample.module, sample.inputs, dynamo=True,
                                    verbose=False, report=False)
        data = program.model_proto.SerializeToString()  # type: ignore[union-attr]
    except Exception as exc:
        result("torch.onnx", "error", one_line(exc))
        return
    try:
        session = _ort_session(data)
    except Exception as exc:
        result("torch.onnx", "error", f"onnxruntime cannot load it: {one_line(exc)}",
               silently_wrong=True)
        return
    names = [i.name for i in session.get_inputs()]

    def run(n: int, tensors: Any) -> list[Any]:
        by_name = {f"x{i}": t.numpy() for i, t in enumerate(tensors)}
        if all(name in by_name for name in names):
            feeds = {name: by_name[name] for name in names}
        else:
            feeds = {name: t.numpy() for name, t in zip(names, tensors, strict=False)}
        return list(session.run(None, feeds))

    try:
        why = _check_runs(run, inputs)
    except Exception as exc:
        result("torch.onnx", "error", f"onnxruntime fails running it: {one_line(exc)}",
               silently_wrong=True)
        return
    if why:
        result("torch.onnx", "mismatch", why, silently_wrong=True)
    else:
        result("torch.onnx", "pass")


# -- the parent: forked children under time limits ----------------------------------------

class Child:
    def __init__(self, op: Any, key: str, paths: list[str], timeout: float,
                 log: Path | None) -> None:
        self.key = key
        self.paths = paths
        self.timeout = timeout
        self.buffer = b""
        self.lines: list[dict[str, Any]] = []
        sys.stdout.flush()
        sys.stderr.flush()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.close(read)
                out = os.open(log if log else os.devnull,
                              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
                warnings.filterwarnings("ignore")
                channel = os.fdopen(write, "w", buffering=1)

                def emit(data: dict[str, Any]) -> None:
                    channel.write(json.dumps(data, default=str) + "\n")
                    channel.flush()

                run_op(op, key, paths, emit)
                emit({"kind": "done"})
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(write)
        self.pid = pid
        self.fd = read
        self.deadline = time.monotonic() + timeout

    def feed(self) -> bool:
        """Read what the child wrote; False at end of file."""
        data = os.read(self.fd, 1 << 16)
        if not data:
            return False
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.lines.append(json.loads(line))
            if self.lines[-1].get("kind") == "path":  # each path gets its own time
                self.deadline = time.monotonic() + self.timeout
        return True

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def reap(self) -> str:
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit status {os.WEXITSTATUS(status)}"


def result_file(state: Path, key: str) -> Path:
    return state / "ops" / (urllib.parse.quote(key, safe="") + ".json")


def sweep(ops: Mapping[str, Any], keys: Sequence[str], *, paths: Sequence[str], jobs: int,
          timeout: float, state: Path | None, quiet: bool = False) -> dict[str, dict[str, Any]]:
    """Run `keys` (resuming from `state`); returns key -> record."""
    done: dict[str, dict[str, Any]] = {}
    todo: list[tuple[str, list[str], dict[str, Any]]] = []
    for key in keys:
        if state is not None and result_file(state, key).exists():
            done[key] = json.loads(result_file(state, key).read_text())
            continue
        todo.append((key, list(paths), {"op": key, "paths": {}}))
    if state is not None:
        (state / "ops").mkdir(parents=True, exist_ok=True)
    log = state / "children.log" if state is not None else None
    running: dict[int, tuple[Child, dict[str, Any]]] = {}
    total = len(todo)
    start = time.monotonic()
    finished = 0
    todo.reverse()
    while todo or running:
        while todo and len(running) < jobs:
            key, remaining, record = todo.pop()
            child = Child(ops[key], key, remaining, timeout, log)
            running[child.fd] = (child, record)
        now = time.monotonic()
        wait = max(0.0, min(c.deadline for c, _ in running.values()) - now)
        ready, _, _ = select.select(list(running), [], [], wait)
        for fd in list(running):
            child, record = running[fd]
            eof = False
            if fd in ready:
                eof = not child.feed()
            timed_out = not eof and time.monotonic() > child.deadline
            if not eof and not timed_out:
                continue
            if timed_out:
                child.kill()
            how = child.reap()
            del running[fd]
            completed = False
            for line in child.lines:
                if line["kind"] == "meta":
                    record.update({k: v for k, v in line.items() if k != "kind" and v})
                elif line["kind"] == "path":
                    record["paths"][line["path"]] = line["result"]
                    if "opaque" in line["result"]:
                        record["opaque"] = line["result"]["opaque"]
                elif line["kind"] == "done":
                    completed = True
            left = [p for p in child.paths if p not in record["paths"]]
            if (not completed and "set_aside" not in record and "sample_error" not in record
                    and left):
                current = left[0]
                status = "timeout" if timed_out else "crash"
                message = (f"no answer within {timeout:.0f} s" if timed_out
                           else f"the process died ({how})")
                if not child.lines and not timed_out:
                    record["sample_error"] = f"crash building the sample ({how})"
                else:
                    record["paths"][current] = {"status": status, "message": message}
                    if current == "irbridge":  # the IR is what crashed: do not retry it
                        for p in ("onnx", "stablehlo"):
                            if p in left:
                                record["paths"][p] = {"status": "no IR",
                                                      "message": ""}
                    rest = [p for p in left if p not in record["paths"]]
                    if rest:
                        todo.append((child.key, rest, record))
                        continue
            finished += 1
            done[child.key] = record
            if state is not None:
                target = result_file(state, child.key)
                tmp = target.with_suffix(".tmp")
                tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
                os.replace(tmp, target)
            if not quiet:
                took = time.monotonic() - start
                brief = " ".join(f"{p}={record['paths'].get(p, {}).get('status', '-')}"
                                 for p in paths)
                print(f"[{finished}/{total} {took:.0f}s] {child.key}: "
                      f"{record.get('set_aside') or record.get('sample_error') or brief}",
                      flush=True)
    return done


# -- the report ---------------------------------------------------------------------------

def classify(records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Totals, passing sets and silently wrong ops from per-op records."""
    tried = sorted(k for k, r in records.items() if "set_aside" not in r)
    status: dict[str, dict[str, str]] = {p: {} for p in PATHS}
    for key in tried:
        r = records[key]
        for p in PATHS:
            if "sample_error" in r:
                status[p][key] = "error"
            elif p in r["paths"]:
                status[p][key] = r["paths"][p]["status"]
    counts = {p: dict(sorted(Counter(status[p].values()).items())) for p in PATHS}
    passing = {p: sorted(k for k, s in status[p].items() if s == "pass") for p in PATHS}
    silent = {p: sorted(k for k in tried if records[k]["paths"].get(p, {})
                        .get("silently_wrong")) for p in PATHS}
    verified = set(passing["irbridge"])
    onnx_ok = sorted(verified & set(passing["onnx"]))
    return {"tried": tried, "status": status, "counts": counts, "passing": passing,
            "silent": silent, "onnx_of_verified": onnx_ok}


def pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "n/a"


def md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def write_report(records: Mapping[str, Mapping[str, Any]], skipped: Mapping[str, str],
                 total_ops: int, paths: Sequence[str]) -> None:
    c = classify(records)
    tried = c["tried"]
    n = len(tried)
    aside_run = sorted(k for k, r in records.items() if "set_aside" in r)
    verified = len(c["passing"]["irbridge"])
    peer = len(c["passing"]["torch.onnx"])
    onnx_ok = len(c["onnx_of_verified"])
    baseline = {
        "summary": {"tried": n, "database_ops": total_ops, "paths": c["counts"],
                    "irbridge_verified": verified, "torch_onnx_correct": peer,
                    "onnx_correct_of_verified": onnx_ok,
                    "silently_wrong": {p: len(c["silent"][p]) for p in PATHS}},
        "passing": c["passing"],
        "silently_wrong": c["silent"],
    }
    BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")

    lines = [
        "# PyTorch OpInfo sweep: irbridge and torch.onnx on PyTorch's operator database",
        "",
        "<!-- generated by tools/opinfo_sweep.py; do not edit by hand -->",
        "",
        "Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db`, on "
        "the first sample of `op.sample_inputs('cpu', torch.float32)` (seeded per op; for "
        f"an op with no float32 CPU support, the first of {', '.join(OTHER_DTYPES)} it "
        "supports), wrapped in an `nn.Module` "
        "whose forward takes the sample's tensors as inputs and calls `op.op(...)`. "
        "How the tool works, and each path: the docstring of `tools/opinfo_sweep.py`. "
        "Regenerate with",
        "",
        f"    {COMMAND}",
        "",
        "(resumes from the state folder: delete it, or use a new one, after changing irbridge; "
        "`--report` rewrites this page and the baseline from the folder without running "
        "anything). `tests/pytorch/test_opinfo_baseline.py` holds "
        "`tests/data/pytorch_opinfo_baseline.json`: coverage can only go up.",
        "",
        "## Headline",
        "",
        f"- Ops tried: **{n}** of the {total_ops} OpInfos in `op_db` "
        f"({len(skipped)} set aside before the run, {len(aside_run)} found nondeterministic "
        "during it; lists below).",
        f"- irbridge (`capture(frontend='export')` + `verify`, and a second input): "
        f"**{verified} verified ({pct(verified, n)})**.",
        f"- torch.onnx (`torch.onnx.export(dynamo=True)` -> onnxruntime), same run: "
        f"**{peer} correct ({pct(peer, n)})**.",
        f"- IR -> ONNX -> onnxruntime correct on **{onnx_ok} of the {verified} "
        f"irbridge-verified ops ({pct(onnx_ok, verified)})**.",
        "- Silently wrong: " + ", ".join(f"{p} {len(c['silent'][p])}" for p in PATHS
                                         if p != "stablehlo") + " (lists below).",
        "",
        "## Paths and verdicts",
        "",
        "- `irbridge`: `irbridge.converters.pytorch.capture(module, inputs, "
        "frontend='export')`, then `verify` (the IR executor against eager on the example "
        "input, verify's tolerance: atol 1e-5 + rtol 1e-4 x max |eager| for float32), then "
        "the IR executor on the second input against eager under the same tolerance. "
        "`unsupported`: the capture left opaque nodes (named). A pass of verify followed by "
        "a wrong second input is **silently wrong** (values baked in).",
        "- `onnx`: that IR through `irbridge.converters.onnx.to_onnx` (checker on) into "
        "onnxruntime, both inputs, against eager. An export refused with an error is "
        "`error` (`unsupported` when the IR has opaque nodes); a file exported without "
        "complaint that onnxruntime cannot load or run, or that gives wrong numbers, is "
        "**silently wrong**.",
        "- `stablehlo`: that IR through `build_module` (the StableHLO exporter) into the "
        "StableHLO reference interpreter (`irbridge.converters.stablehlo.evaluate`), both "
        "inputs, against eager.",
        "- `torch.onnx`: the peer, `torch.onnx.export(module, inputs, dynamo=True)` into "
        "onnxruntime, both inputs, against eager; judged like `onnx`.",
        "- Tolerance for `onnx`, `stablehlo` and `torch.onnx`: torch.testing.assert_close's "
        "defaults, per element |got - eager| <= atol + rtol x |eager|: float32 rtol 1.3e-6, "
        "atol 1e-5 (float64 1e-7/1e-7, float16 1e-3/1e-5, bfloat16 1.6e-2/1e-5); integers "
        "and booleans exact; NaN matches NaN, infinities match themselves; shapes must be "
        "equal.",
        "- Second input: every float tensor scaled elementwise by a seeded factor in "
        "[0.85, 1.0] (same shapes, signs and zeros; factors drawn again when rounding "
        "would make two distinct values equal, since a new tie makes sort and argsort "
        "indices implementation-defined); integer and bool tensors (indices, masks) "
        "unchanged. When eager itself fails on it, only the example input counts (noted "
        "per op). When the IR misses eager float32 on it but agrees with the same op run "
        "in float64 (on the second input widened) while eager float32 does not, eager is "
        "the inaccurate side (near a pole, say): that is a pass, listed below.",
        "- onnxruntime's Python API cannot return bfloat16 arrays: a bfloat16 output of "
        "either ONNX file is read through an appended exact Cast to float32.",
        "- `crash` / `timeout`: the forked child running the op died or gave no answer "
        f"within {PATH_TIMEOUT_S:.0f} s on that path; `no IR`: capture failed, so the "
        "IR paths have nothing to export.",
        "",
        "## Totals",
        "",
        "| path | " + " | ".join(STATUSES) + " |",
        "|---|" + "---|" * len(STATUSES),
    ]
    for p in PATHS:
        cnt = c["counts"][p]
        lines.append(f"| {p} | " + " | ".join(
            f"{cnt.get(s, 0)} ({pct(cnt.get(s, 0), n)})" if s == "pass" else
            str(cnt.get(s, 0)) for s in STATUSES) + " |")
    lines += ["", "## Silently wrong", ""]
    for p in PATHS:
        if p == "stablehlo":
            continue
        ops = c["silent"][p]
        lines.append(f"- `{p}` ({len(ops)}): " + (", ".join(
            f"`{k}` ({md(records[k]['paths'][p]['message'])})" for k in ops) or "none"))
    accurate = [k for k in tried
                if records[k].get("paths", {}).get("irbridge", {}).get("eager_inaccurate")]
    lines += ["", "## Passes where eager float32 was the inaccurate side", "",
              "- " + (", ".join(f"`{k}` ({md(records[k]['paths']['irbridge']['message'])})"
                              for k in accurate) or "none")]
    # opaque nodes grouped by aten op
    by_node: dict[str, list[str]] = defaultdict(list)
    for key in tried:
        for node in records[key].get("opaque", {}) or {}:
            by_node[node].append(key)
    lines += ["", "## Opaque nodes left by capture, by node", "",
              f"{sum(1 for k in tried if records[k].get('opaque'))} captures left opaque "
              "nodes. Node (number of ops): ops.", ""]
    for node, keys in sorted(by_node.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- `{node}` ({len(keys)}): " + ", ".join(f"`{k}`" for k in keys))
    lines += ["", "## Failure classes", "",
              "Errors grouped by exact message (counts); mismatches are listed per op "
              "in the table below.", ""]
    for p in PATHS:
        msgs: dict[str, list[str]] = defaultdict(list)
        for key in tried:
            r = records[key]
            if "sample_error" in r:
                msgs[f"sample: {r['sample_error']}"].append(key)
                continue
            e = r["paths"].get(p)
            if e and e["status"] in ("error", "crash", "timeout"):
                msgs[f"{e['status']}: {e['message']}"].append(key)
        lines += [f"### {p}", ""]
        if not msgs:
            lines += ["none", ""]
            continue
        lines += ["| count | message | ops |", "|---|---|---|"]
        for msg, keys in sorted(msgs.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(keys[:8]) + (f", ... ({len(keys) - 8} more)"
                                           if len(keys) > 8 else "")
            lines.append(f"| {len(keys)} | {md(msg)} | {md(shown)} |")
        lines.append("")
    lines += ["## Per op", "",
              "| op | sample inputs | " + " | ".join(PATHS) + " |",
              "|---|---|" + "---|" * len(PATHS)]
    for key in tried:
        r = records[key]
        cells = []
        for p in PATHS:
            if "sample_error" in r:
                cells.append("error (sample)")
                continue
            e = r["paths"].get(p)
            if e is None:
                cells.append("-")
                continue
            text = e["status"]
            if e.get("silently_wrong"):
                text = f"**{text} (silent)**"
            if e["status"] in ("mismatch", "unsupported") or e.get("silently_wrong"):
                text += f": {e['message']}"
            cells.append(md(text))
        note = r.get("sample", "") + (f" (2nd input: {r['second_input']})"
                                      if r.get("second_input") else "")
        lines.append(f"| `{key}` | {md(note)} | " + " | ".join(cells) + " |")
    lines += ["", "## Set aside", ""]
    reasons: dict[str, list[str]] = defaultdict(list)
    for key, why in skipped.items():
        reasons[why].append(key)
    for key in aside_run:
        reasons[records[key]["set_aside"]].append(key)
    explain = {
        "no float32 or integer type on CPU": "the OpInfo declares none of float32, "
                                             f"{', '.join(OTHER_DTYPES)} on CPU "
                                             "(CUDA-only or other dtypes only)",
        "random values": "draws random numbers on every call: no exporter can match eager",
        "uninitialised output": "returns uninitialised memory (values undefined)",
        "sparse layout": "sparse tensors are outside the dense IR",
    }
    for why, keys in sorted(reasons.items()):
        lines.append(f"- {explain.get(why, why)} ({len(keys)}): "
                     + ", ".join(f"`{k}`" for k in sorted(keys)))
    if len(paths) < len(PATHS):
        lines += ["", f"Paths run: {', '.join(paths)} (the others were skipped by flags)."]
    DOC.write_text("\n".join(lines) + "\n")


def load_state(state: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for f in sorted((state / "ops").glob("*.json")):
        r = json.loads(f.read_text())
        out[r["op"]] = r
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="OpInfo keys to run (name or name.variant); prints, writes "
                             "nothing unless --write")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--state", type=Path, help="folder of per-op results; a run resumes")
    parser.add_argument("--timeout", type=float, default=PATH_TIMEOUT_S,
                        help="seconds per op and path")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"comma-separated subset of {','.join(PATHS)}")
    parser.add_argument("--write", action="store_true",
                        help="write the doc and baseline (default without --only)")
    parser.add_argument("--report", action="store_true",
                        help="only write the doc and baseline from --state")
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if bad or not paths:
        print(f"error: --paths: unknown path {bad[0] if bad else '(none)'}; choose from "
              f"{', '.join(PATHS)}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    if args.report and args.state is None:
        print("error: --report needs --state", file=sys.stderr)
        return 2
    if args.state is not None and args.state.exists() and not args.state.is_dir():
        print(f"error: --state {args.state}: not a folder", file=sys.stderr)
        return 2
    preload()
    from torch.testing._internal.common_methods_invocations import op_db

    ops, skipped = database()
    if args.only:
        unknown = [k for k in args.only if k not in ops]
        if unknown:
            why = skipped.get(unknown[0], "not in op_db")
            print(f"error: --only {unknown[0]}: {why} (keys are OpInfo name or "
                  "name.variant_test_name)", file=sys.stderr)
            return 2
        keys = sorted(set(args.only))
    else:
        keys = sorted(ops)
    if args.report:
        records = {k: r for k, r in load_state(args.state).items() if k in ops}
    else:
        warm_up(ops, paths)
        start = time.monotonic()
        records = sweep(ops, keys, paths=paths, jobs=args.jobs, timeout=args.timeout,
                        state=args.state)
        print(f"ran {len(keys)} ops in {time.monotonic() - start:.0f} s", flush=True)
        if args.state is not None and not args.only:
            records = {k: r for k, r in load_state(args.state).items() if k in ops}
    c = classify(records)
    n = len(c["tried"])
    for p in paths:
        print(f"{p}: " + ", ".join(f"{s} {v}" for s, v in c["counts"][p].items())
              + f"  (pass {pct(len(c['passing'][p]), n)} of {n})")
        if c["silent"][p]:
            print(f"  silently wrong: {', '.join(c['silent'][p])}")
    if args.write or args.report or not args.only:
        write_report(records, skipped, len(op_db), paths)
        print(f"wrote {DOC.relative_to(ROOT)} and {BASELINE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
