"""ONNX export wall time and peak memory: irbridge's IR -> ONNX exporter against
torch.onnx.export(dynamo=True), on the same models and inputs, in the same run.

    uv run python tools/bench_onnx.py          # 8 models, 3 runs each
    uv run python tools/bench_onnx.py --models resnet18 --repeat 1 --no-write

Tools, each timed in its own forked child:

* `irbridge:export_onnx`: `export_onnx(ir, PATH)` (converters/onnx: IR -> ONNX ModelProto,
  the ONNX checker with full_check, and the atomic write of the file) of an IR the same
  child captured first, untimed, with `capture(model, args, kwargs, frontend=F,
  weights=True)`. The capture, its lowering and the warm-up are NOT included.
* `irbridge:capture+export`: the same two calls, both timed: nn.Module to ONNX file, which
  is the like-for-like comparison with torch.onnx.export.
* `torch.onnx`: `torch.onnx.export(model, args, PATH, kwargs=kwargs, dynamo=True)` to a
  file, opset_version=OPSET, otherwise its defaults (graph optimisation on).

F is `auto` unless --frontend says otherwise (the front-end `irbridge convert` uses;
`auto` includes the attempts that failed before the one that worked). Both write opset
OPSET (--opset, default 20: what torch.onnx writes by default with this torch);
irbridge's exporter runs its clean-up pass and, unless --no-fold-batch-norm, folds
BatchNormalization into the Conv before it (torch.onnx does that for a model in eval mode).

Then, per model, one more forked child loads the files (first run's) in onnxruntime with
the same session options and inputs, checks their outputs against the eager model, and
times --latency-runs inferences of each, interleaved (`latency()`): irbridge's default
file, torch.onnx's, and (unless --no-ort-target) irbridge's onnxruntime-targeted file,
`export_onnx(ir, PATH, target="onnxruntime")` of the same IR, written untimed after the
first `irbridge:export_onnx` run. For relative comparisons on a loaded machine use
--latency-threads 1 and the CPU ratio (process CPU time per run). --ort-graphs DIR saves
the graph onnxruntime actually runs for each file (its optimised model) and prints the
node types whose counts differ between the files.

Method: as tools/bench_pytorch.py (whose helpers it uses): libraries imported once in the
parent, each model built there (random weights, seed 0) and run once eagerly with torch on
one thread; every measurement a forked child that restores the thread count, resets the
RSS high-water mark and times the first call of the tool in that process; runs
interleaved, median reported. Peak memory = VmHWM after the timed call - VmRSS before it.

Writes its own section of docs/benchmarks.md (markers `bench_onnx`); tools/bench_pytorch.py
writes another. Linux only (fork, /proc).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pytorch import (
    _reset_peak,
    _status_kib,
    error_text,
    failures_and_runs,
    prepare,
    write_section,
)
from frontend_matrix import (
    MODELS,
    ROOT,
    machine_info,
    machine_lines,
    md_escape,
    preload,
    run_forked,
)

TOOLS = ("irbridge:export_onnx", "irbridge:capture+export", "torch.onnx")
SECTION = "bench_onnx"


def measure(name: str, built: Any, tool: str, threads: int, frontend: str, opset: int,
            fold_batch_norm: bool, keep: Path | None = None,
            keep_ort: Path | None = None) -> dict[str, Any]:
    """One measurement, run inside a forked child on the parent's model. `keep`: a folder
    to copy the written model.onnx (and any external data) into, for the latency runs.
    `keep_ort` (irbridge tools): a folder for a second file of the same IR exported with
    `target="onnxruntime"`, written after the timed call (untimed)."""
    import torch

    torch.set_num_threads(threads)
    row: dict[str, Any] = {"model": name, "tool": tool, "inputs": built.input_desc}
    result: Any = None
    try:
        if tool == "irbridge:export_onnx":  # capture first, untimed
            from irbridge.converters.pytorch import capture

            start = time.perf_counter()
            result = capture(built.module, built.args, built.kwargs, frontend=frontend,
                             weights=True)
            row["capture_seconds"] = round(time.perf_counter() - start, 3)
            row["largest_tensor_mib"] = round(max(
                (t.nbytes for t in result.model.tensors.values()), default=0) / 2**20, 1)
            row["weights_mib"] = round(sum(
                t.nbytes for t in result.model.tensors.values()) / 2**20, 1)
    except Exception as exc:
        row.update(status="fail", seconds=0.0, error="capture: " + error_text(exc))
        return row
    gc.collect()
    reset = _reset_peak()
    base = _status_kib("VmRSS")
    hwm0 = _status_kib("VmHWM")
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        start = time.perf_counter()
        try:
            if tool.startswith("irbridge:"):
                from irbridge.converters.onnx import export_onnx

                if result is None:
                    from irbridge.converters.pytorch import capture

                    result = capture(built.module, built.args, built.kwargs,
                                     frontend=frontend, weights=True)
                    row["capture_seconds"] = round(time.perf_counter() - start, 3)
                export_onnx(result.model, path, opset=opset,
                            fold_batch_norm=fold_batch_norm)
                extra = {"method": result.method,
                         "warmup": result.model.metadata.get("capture.warmup", "")}
            elif tool == "torch.onnx":
                torch.onnx.export(built.module, built.args, str(path), kwargs=built.kwargs,
                                  dynamo=True, opset_version=opset)
            else:
                raise ValueError(f"unknown tool {tool}")
        except Exception as exc:
            row.update(status="fail", seconds=round(time.perf_counter() - start, 3),
                       error=error_text(exc))
            return row
        seconds = time.perf_counter() - start
        peak = _status_kib("VmHWM")
        extra["bytes_written"] = sum(p.stat().st_size for p in Path(tmp).iterdir())
        extra["onnx_nodes"] = _onnx_nodes(path)
        if keep is not None:  # a folder: model.onnx and any external data beside it
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(tmp, keep)
    if keep_ort is not None and result is not None:
        try:
            from irbridge.converters.onnx import export_onnx

            shutil.rmtree(keep_ort, ignore_errors=True)
            keep_ort.mkdir(parents=True)
            export_onnx(result.model, keep_ort / "model.onnx", opset=opset,
                        fold_batch_norm=fold_batch_norm, target=ORT_TARGET)
            extra["ort_target_nodes"] = _onnx_nodes(keep_ort / "model.onnx")
        except Exception as exc:
            extra["ort_target_error"] = error_text(exc)
    row.update(status="ok", seconds=round(seconds, 3),
               peak_mib=round((peak - (base if reset else hwm0)) / 1024, 1),
               baseline_mib=round(base / 1024, 1), **extra)
    return row


LATENCY_TOOLS = ("irbridge:export_onnx", "torch.onnx")
"""The tools whose files' onnxruntime latency is compared (irbridge's exporter,
torch.onnx's)."""

ORT_TARGET = "onnxruntime"
ORT_FILE = "irbridge:export_onnx[target=onnxruntime]"
"""irbridge's second file, `export_onnx(..., target="onnxruntime")` of the same IR: forms
onnxruntime runs faster (converters/onnx/_ort_fusions.py), timed beside the other two."""

ATOL, RTOL = 1e-4, 1e-3
"""An output agrees with the eager model when max |onnx - eager| <= ATOL + RTOL * max |eager|:
float32 kernels in another order (fused attention, folded batch norm) differ by rounding,
which grows with the depth of the network; 1e-3 of the output's magnitude is far above
that rounding and far below any real mapping error."""


def latency(name: str, built: Any, files: Mapping[str, Path], threads: int, runs: int,
            warmup: int, graphs: Path | None = None) -> dict[str, Any]:
    """onnxruntime inference latency of each file, in one forked child: the same session
    options and the same inputs for every file, runs interleaved (the order rotates each
    round), and each file's outputs checked against the eager model. `graphs`: a folder
    to save the graph onnxruntime runs for each file into (its optimised model, same
    options), whose node types go into the row (`ort_ops`)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from irbridge.converters.pytorch._util import tensor_leaves

    torch.set_num_threads(threads)
    row: dict[str, Any] = {"model": name, "tool": "latency", "status": "ok"}
    with torch.no_grad():
        expected = [t.detach().cpu().numpy() for t in
                    tensor_leaves(built.module(*built.args, **built.kwargs))]
    given = [*built.args, *built.kwargs.values()]
    given_names = [None] * len(built.args) + list(built.kwargs)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    sessions: dict[str, Any] = {}
    feeds: dict[str, dict[str, Any]] = {}
    checks: dict[str, Any] = {}
    ort_ops: dict[str, dict[str, int]] = {}
    for tool, path in files.items():
        if graphs is not None:
            ort_ops[tool] = _ort_graph(path, graphs / f"{tool.replace(':', '_')}.onnx",
                                       threads, ort)
        try:
            session = ort.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:
            checks[tool] = {"error": "session: " + error_text(exc)}
            continue
        inputs = session.get_inputs()
        by_name = {n: v for n, v in zip(given_names, given, strict=True) if n}
        feed: dict[str, Any] = {}
        for k, spec in enumerate(inputs):
            value = by_name.get(spec.name, given[k] if k < len(given) else None)
            if value is None:
                break
            feed[spec.name] = value.detach().cpu().numpy()
        if len(feed) != len(inputs):
            checks[tool] = {"error": f"inputs {[i.name for i in inputs]} do not match "
                                     f"the model's {len(given)} inputs"}
            continue
        got = session.run(None, feed)
        checks[tool] = _agreement(got, expected, np)
        sessions[tool], feeds[tool] = session, feed
    times: dict[str, list[float]] = {tool: [] for tool in sessions}
    for tool in sessions:
        for _ in range(warmup):
            sessions[tool].run(None, feeds[tool])
    cpu: dict[str, list[float]] = {tool: [] for tool in sessions}
    order = list(sessions)
    for rnd in range(runs):
        # every file takes every position equally often (rotated, and reversed every
        # other cycle): a run right after another file's is measured ~2% slower here
        k = rnd % len(order)
        turn = order[k:] + order[:k]
        for tool in (turn if (rnd // len(order)) % 2 == 0 else turn[::-1]):
            start, start_cpu = time.perf_counter(), time.process_time()
            sessions[tool].run(None, feeds[tool])
            times[tool].append(time.perf_counter() - start)
            cpu[tool].append(time.process_time() - start_cpu)
    row.update(times=times, cpu_times=cpu, checks=checks, runs=runs, threads=threads)
    if ort_ops:
        row["ort_ops"] = ort_ops
    return row


def _ort_graph(path: Path, out: Path, threads: int, ort: Any) -> dict[str, int]:
    """Save the graph onnxruntime's default session runs for `path` (the latency runs'
    options; weights to a .data file beside it) and count its node types."""
    import onnx

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    out.parent.mkdir(parents=True, exist_ok=True)
    options.optimized_model_filepath = str(out)
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", out.name + ".data")
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        nodes = onnx.load(str(out), load_external_data=False).graph.node
    except Exception as exc:
        return {"error: " + error_text(exc)[:100]: 1}
    counts: dict[str, int] = {}
    for n in nodes:
        key = f"{n.domain}:{n.op_type}" if n.domain else n.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts


def _print_ort_ops(name: str, ops: Mapping[str, Mapping[str, int]]) -> None:
    """The node types whose counts differ between the files' executed graphs."""
    tools = list(ops)
    kinds = sorted({k for counts in ops.values() for k in counts})
    print(f"{name}: graph onnxruntime runs, node types that differ ("
          + ", ".join(f"{t}: {sum(ops[t].values())} nodes" for t in tools) + ")")
    for kind in kinds:
        counts = [ops[t].get(kind, 0) for t in tools]
        if len(set(counts)) > 1:
            print(f"  {kind:44} " + " ".join(f"{c:6d}" for c in counts))


def _agreement(got: Sequence[Any], expected: Sequence[Any], np: Any) -> dict[str, Any]:
    """Compare the session's outputs with the eager ones, in order (pytree order, which
    both exporters follow); max abs error and its ratio to the output's magnitude."""
    if len(got) != len(expected):
        return {"error": f"{len(got)} outputs, the eager model has {len(expected)}"}
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for a, b in zip(got, expected, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return {"error": f"output shape {list(a.shape)} != eager {list(b.shape)}"}
        if b.size == 0:
            continue
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        scale = float(np.max(np.abs(b.astype(np.float64))))
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / scale if scale else (0.0 if diff == 0 else 1.0))
        ok = ok and diff <= ATOL + RTOL * scale
    return {"max_abs": worst_abs, "max_rel": worst_rel, "ok": ok, "outputs": len(got)}


def _onnx_nodes(path: Path) -> int | None:
    """Nodes of the main graph (untimed; read without the weights)."""
    try:
        import onnx

        return len(onnx.load(str(path), load_external_data=False).graph.node)
    except Exception:
        return None


# -- report -----------------------------------------------------------------------------


def summarize(runs: Sequence[Mapping[str, Any]], models: Sequence[str],
              tools: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for m in models:
        table[m] = {}
        for t in tools:
            mine = [r for r in runs if r["model"] == m and r["tool"] == t]
            ok = [r for r in mine if r.get("status") == "ok"]
            cell: dict[str, Any] = {"runs": len(mine), "ok": len(ok)}
            if ok:
                cell["seconds"] = statistics.median(r["seconds"] for r in ok)
                cell["all_seconds"] = [r["seconds"] for r in ok]
                cell["peak_mib"] = statistics.median(r["peak_mib"] for r in ok)
                cell["bytes"] = ok[0].get("bytes_written")
                cell["nodes"] = ok[0].get("onnx_nodes")
                if "ort_target_nodes" in ok[0]:
                    cell["ort_target_nodes"] = ok[0]["ort_target_nodes"]
                if "ort_target_error" in ok[0]:
                    cell["ort_target_error"] = ok[0]["ort_target_error"]
                if "method" in ok[0]:
                    cell["method"] = ok[0]["method"]
                    cell["warmup"] = sorted({str(r.get("warmup", "")) for r in ok})
                largest = [r["largest_tensor_mib"] for r in ok if "largest_tensor_mib" in r]
                if largest:
                    cell["largest_tensor_mib"] = largest[0]
                    cell["weights_mib"] = ok[0].get("weights_mib")
                caps = [r["capture_seconds"] for r in ok if "capture_seconds" in r]
                if caps:
                    cell["capture_seconds"] = statistics.median(caps)
            failed = [r for r in mine if r.get("status") != "ok"]
            if failed:
                cell["error"] = failed[0].get("error", failed[0].get("status"))
            table[m][t] = cell
        onnx = table[m].get("torch.onnx", {}).get("seconds")
        meta: dict[str, Any] = {}
        for t in ("irbridge:export_onnx", "irbridge:capture+export"):
            mine_s = table[m].get(t, {}).get("seconds")
            if onnx and mine_s:
                meta[t] = onnx / mine_s
        lat = next((r for r in runs if r["model"] == m and r.get("tool") == "latency"), None)
        if lat is not None:
            meta["latency"] = _latency_summary(lat)
        table[m]["_"] = meta
    return table


def _latency_summary(row: Mapping[str, Any]) -> dict[str, Any]:
    if row.get("status") != "ok":
        return {"error": str(row.get("error") or row.get("status"))}
    out: dict[str, Any] = {"checks": row.get("checks", {}), "runs": row.get("runs")}
    times = row.get("times", {})
    for tool, values in times.items():
        if values:
            ms = sorted(v * 1e3 for v in values)
            out[tool] = {"median": statistics.median(ms), "p25": _pct(ms, 0.25),
                         "p75": _pct(ms, 0.75)}
    cpu = row.get("cpu_times", {})
    for key, file in (("", "irbridge:export_onnx"), ("ort_", ORT_FILE)):
        mine, theirs = times.get(file), times.get("torch.onnx")
        if mine and theirs:
            pairs = sorted(a / b for a, b in zip(mine, theirs, strict=False) if b > 0)
            out[key + "ratio"] = statistics.median(mine) / statistics.median(theirs)
            out[key + "pair_p25"] = _pct(pairs, 0.25)
            out[key + "pair_p75"] = _pct(pairs, 0.75)
        mine, theirs = cpu.get(file), cpu.get("torch.onnx")
        if mine and theirs and statistics.median(theirs) > 0:
            out[key + "cpu_ratio"] = statistics.median(mine) / statistics.median(theirs)
    out["threads"] = row.get("threads")
    return out


def _pct(ordered: Sequence[float], q: float) -> float:
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _cell(cell: Mapping[str, Any], fmt: str = "{:.2f}") -> str:
    if "seconds" not in cell:
        return "fails" if cell.get("runs") else "-"
    text = fmt.format(cell["seconds"])
    if cell.get("ok", 0) < cell.get("runs", 0):
        text += f" ({cell['ok']}/{cell['runs']} ok)"
    return text


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _mib(n: int | None) -> str:
    return f"{n / 2**20:.1f}" if n else "-"


def render(table: Mapping[str, Mapping[str, Mapping[str, Any]]],
           runs: Sequence[Mapping[str, Any]], info: Mapping[str, Any],
           models: Sequence[str], tools: Sequence[str], repeat: int, frontend: str,
           command: str, total_s: float, opset: int = 20,
           fold_batch_norm: bool = True) -> str:
    inputs = {r["model"]: r.get("inputs", "") for r in runs if r.get("inputs")}
    e2e = "irbridge:capture+export"
    only = "irbridge:export_onnx"
    out = [
        "## ONNX export: irbridge's exporter against torch.onnx",
        "",
        "Generated by `tools/bench_onnx.py` (rerun it rather than editing the tables).",
        "",
        f"Command: `{command}` (total {total_s / 60:.1f} min)",
        "",
        "Machine:",
        "",
        *machine_lines(info),
        "",
        "**Noise.** A shared 2-core machine (see the load averages above): every figure is "
        f"the median of {repeat} run(s), and differences under ~20% mean little.",
        "",
        "### What is measured",
        "",
        f"- **irbridge:export_onnx**: `export_onnx(ir, path)` only (converters/onnx: IR to "
        "ONNX ModelProto, `onnx.checker` with `full_check=True`, atomic write of the file), "
        f"on an IR the same process captured just before with `capture(model, args, kwargs, "
        f"frontend=\"{frontend}\", weights=True)`, untimed. Capture, lowering and any "
        "warm-up are **not** included: this column is the exporter alone.",
        "- **irbridge:capture+export**: the same two calls, both timed: `nn.Module` to "
        "ONNX file, the like-for-like comparison with torch.onnx.export (`irbridge convert "
        "MODEL --to onnx` does this work). It includes every attempt `auto` made and a "
        "warm-up forward pass where `capture()` ran one.",
        "- **torch.onnx**: `torch.onnx.export(model, args, path, kwargs=kwargs, "
        f"dynamo=True, opset_version={opset})` to a file, otherwise its defaults (graph "
        f"optimisation on). Both tools write opset {opset} with the weights inside the "
        "file; irbridge's `export_onnx(ir, path, opset="
        f"{opset}{', fold_batch_norm=True' if fold_batch_norm else ''})`.",
        "- Method as in the conversion section: the parent imports the libraries (untimed), "
        "builds each model (random weights, seed 0) and runs it once eagerly with torch on "
        "one thread; every measurement is a forked child that times the first call of the "
        "tool in that process (lazy imports and registries included); runs are interleaved "
        "and the median is reported. **Peak memory** is VmHWM after the timed call minus "
        "VmRSS just before it, the high-water mark reset first (for `export_onnx` the "
        "captured IR is part of the baseline).",
        "- **ratio** = torch.onnx median time / irbridge median time.",
        "",
        "### Wall time (seconds, median)",
        "",
        "| model | inputs | front-end | " + " | ".join(tools)
        + " | ratio export only | ratio capture+export |",
        "|---|---|---|" + "---:|" * len(tools) + "---:|---:|",
    ]
    for m in models:
        row = table[m]
        method = row.get(e2e, {}).get("method") or row.get(only, {}).get("method") or "-"
        cells = [_cell(row[t]) for t in tools]
        out.append(f"| {m} | {md_escape(inputs.get(m, ''))} | {method} | "
                   + " | ".join(cells) + f" | {_ratio(row['_'].get(only))} | "
                   f"{_ratio(row['_'].get(e2e))} |")
    out += [
        "",
        "`front-end` is the method `capture()` used; `capture s` below is the untimed "
        "capture the `export_onnx` runs made first (so export only + capture s is close "
        "to capture+export).",
        "",
        "### Peak memory above the baseline (MiB, median) and the files",
        "",
        "| model | " + " | ".join(tools) + " | capture s | irbridge file MiB | "
        "irbridge ONNX nodes | torch.onnx file MiB | torch.onnx ONNX nodes |",
        "|---|" + "---:|" * len(tools) + "---:|---:|---:|---:|---:|",
    ]
    for m in models:
        row = table[m]
        cells = [f"{row[t]['peak_mib']:.0f}" if "peak_mib" in row[t] else
                 ("fails" if row[t].get("runs") else "-") for t in tools]
        mine = row.get(only, {}) if "bytes" in row.get(only, {}) else row.get(e2e, {})
        torch_cell = row.get("torch.onnx", {})
        cap = row.get(only, {}).get("capture_seconds")
        out.append(f"| {m} | " + " | ".join(cells)
                   + f" | {f'{cap:.2f}' if cap is not None else '-'}"
                   + f" | {_mib(mine.get('bytes'))} | {mine.get('nodes') or '-'}"
                   + f" | {_mib(torch_cell.get('bytes'))} | {torch_cell.get('nodes') or '-'} |")
    out += _lean_sections(table, models, opset, fold_batch_norm)
    out += failures_and_runs(table, models, tools, "build/bench_onnx.json")
    return "\n".join(out)


def _ort_target_table(table: Mapping[str, Mapping[str, Mapping[str, Any]]],
                      models: Sequence[str]) -> list[str]:
    """The onnxruntime-targeted file (`target="onnxruntime"`) against torch.onnx's, from
    the same latency runs (its own rows: empty when it was not timed)."""
    only, theirs = "irbridge:export_onnx", "torch.onnx"
    rows, met = [], 0
    for m in models:
        lat = table[m]["_"].get("latency") or {}
        ratio = lat.get("ort_ratio")
        cell = lat.get(ORT_FILE)
        mine = table[m].get(only, {})
        if ratio is None and cell is None:
            if "ort_target_error" in mine:
                rows.append(f"| {m} | fails: {md_escape(str(mine['ort_target_error'])[:80])}"
                            " | | | | | | | |")
            continue
        checks = lat.get("checks", {})
        check = checks.get(ORT_FILE) or {}
        agree = bool(check.get("ok")) and bool((checks.get(theirs) or {}).get("ok"))
        ok = ratio is not None and ratio <= 1.0
        met += ok and agree
        theirs_cell = lat.get(theirs)

        def ms(c: Mapping[str, Any] | None) -> str:
            return f"{c['median']:.2f} ({c['p25']:.2f}-{c['p75']:.2f})" if c else "-"

        eager = ("-" if not check else "fails: " + md_escape(str(check["error"])[:80])
                 if "error" in check else
                 f"{'ok' if check['ok'] else 'MISMATCH'} ({check['max_rel']:.1e})")
        rows.append(
            f"| {m} | {mine.get('ort_target_nodes') or '-'} | "
            f"{table[m].get(theirs, {}).get('nodes') or '-'} | {ms(cell)} | "
            f"{ms(theirs_cell)} | "
            + (f"{ratio:.2f}x ({lat['ort_pair_p25']:.2f}x-{lat['ort_pair_p75']:.2f}x)"
               if ratio is not None else "-")
            + f" | {'yes' if ok else 'no'} | "
            + (f"{lat['ort_cpu_ratio']:.2f}x" if "ort_cpu_ratio" in lat else "-")
            + (f" | {lat['cpu_ratio']:.2f}x" if "cpu_ratio" in lat else " | -")
            + f" | {eager} |")
    if not rows:
        return []
    return [
        "",
        "### irbridge's onnxruntime-targeted file against torch.onnx",
        "",
        "**irbridge ORT file**: the same IR exported with `export_onnx(ir, path, "
        "target=\"onnxruntime\")` (`--target onnxruntime`; converters/onnx/_ort_fusions.py: "
        "forms onnxruntime's CPU provider runs faster, with its contrib MultiHeadAttention), "
        "timed in the "
        "same child and rounds as the two files above, with the same options. **ratio** "
        "and **CPU ratio** = ORT file / torch.onnx; **default CPU ratio** repeats the "
        "default file's CPU ratio from the table above for comparison.",
        "",
        f"**Target** (latency <= 1.0x, outputs agreeing with eager): {met} of "
        f"{len(models)}.",
        "",
        "| model | irbridge ORT file nodes | torch.onnx nodes | irbridge ORT file ms | "
        "torch.onnx ms | ratio | <= 1.0x | CPU ratio | default CPU ratio | "
        "ORT file vs eager |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---|",
        *rows,
    ]


def _lean_sections(table: Mapping[str, Mapping[str, Mapping[str, Any]]],
                   models: Sequence[str], opset: int, fold_batch_norm: bool) -> list[str]:
    only, theirs = "irbridge:export_onnx", "torch.onnx"
    rows, met_nodes, met_latency, measured = [], 0, 0, 0
    for m in models:
        row = table[m]
        lat = row["_"].get("latency") or {}
        mine_nodes, torch_nodes = row.get(only, {}).get("nodes"), row.get(theirs, {}).get("nodes")
        nodes_ok = mine_nodes is not None and torch_nodes is not None \
            and mine_nodes <= torch_nodes
        ratio = lat.get("ratio")
        lat_ok = ratio is not None and ratio <= 1.0
        checks = lat.get("checks", {})
        agree = all(checks.get(t, {}).get("ok") for t in (only, theirs))
        if mine_nodes is not None and torch_nodes is not None:
            measured += 1
        met_nodes += nodes_ok
        met_latency += lat_ok and agree

        def ms(tool: str, lat: Mapping[str, Any] = lat) -> str:
            cell = lat.get(tool)
            return (f"{cell['median']:.2f} ({cell['p25']:.2f}-{cell['p75']:.2f})"
                    if cell else "-")

        def check(tool: str, checks: Mapping[str, Any] = checks) -> str:
            c = checks.get(tool)
            if not c:
                return "-"
            if "error" in c:
                return "fails: " + md_escape(str(c["error"])[:80])
            return f"{'ok' if c['ok'] else 'MISMATCH'} ({c['max_rel']:.1e})"

        rows.append(
            f"| {m} | {mine_nodes or '-'} | {torch_nodes or '-'} | "
            f"{'yes' if nodes_ok else 'no'} | {ms(only)} | {ms(theirs)} | "
            + (f"{ratio:.2f}x ({lat['pair_p25']:.2f}x-{lat['pair_p75']:.2f}x)"
               if ratio is not None else md_escape(str(lat.get("error", "-"))[:80]))
            + f" | {'yes' if lat_ok else 'no'} | "
            + (f"{lat['cpu_ratio']:.2f}x" if "cpu_ratio" in lat else "-")
            + f" | {check(only)} | {check(theirs)} |")
    used = sorted({int(t) for m in models
                   if (t := (table[m]["_"].get("latency") or {}).get("threads"))})
    threads_text = ("= " + ", ".join(str(t) for t in used)) if used else "as torch's"
    out = [
        "",
        "### Lean ONNX: node count and onnxruntime latency against torch.onnx",
        "",
        "**irbridge** in this table is the default file (`export_onnx(ir, path)`, "
        "`target=\"onnx\"`: runtime-neutral forms); the next table times the "
        "onnxruntime-targeted file. "
        f"Both files at opset {opset}; irbridge's with its default clean-up pass "
        "(converters/onnx/_optimize.py: constants as initializers, constant folding, "
        "no-op removal, shared initializers)"
        + (" and `fold_batch_norm=True` (BatchNormalization folded into the Conv before "
           "it, as torch.onnx does for a model in eval mode)" if fold_batch_norm else "")
        + ". Latency: onnxruntime CPU, one forked child per model, the same "
        "`SessionOptions` for both files (default graph optimisation, intra-op threads "
        f"{threads_text}, inter-op 1), the same inputs, warm-up runs first, then "
        "runs interleaved with the order rotating each round. Times are the median "
        "with the 25th-75th percentile in brackets; **ratio** = irbridge median / "
        "torch.onnx median, with the 25th-75th percentile of the per-round ratios; "
        "**CPU ratio** the same for the process CPU time of each run (user + system: other "
        "load on the machine moves it less than wall time; with one thread it is the "
        "run's work). "
        f"**vs eager**: max |onnx - eager| <= {ATOL} + {RTOL} x max |eager| over every "
        "output (the relative error in brackets).",
        "",
        f"**Target** (nodes <= torch.onnx's and latency <= 1.0x on every model, outputs "
        f"agreeing with eager): nodes on {met_nodes} of {len(models)}, latency on "
        f"{met_latency} of {len(models)}.",
        "",
        "| model | irbridge nodes | torch.onnx nodes | nodes <= | irbridge ms | "
        "torch.onnx ms | ratio | <= 1.0x | CPU ratio | irbridge vs eager | "
        "torch.onnx vs eager |",
        "|---|---:|---:|---|---:|---:|---:|---|---:|---|---|",
        *rows,
        *_ort_target_table(table, models),
        "",
        "### Memory of export_onnx against the largest tensor",
        "",
        "`export_onnx` peak above the captured IR (first table's column) against the "
        "issue's limit: 1.2 x the model's largest tensor + 50 MiB.",
        "",
        "| model | weights MiB | largest tensor MiB | export_onnx peak MiB | limit MiB | "
        "within |",
        "|---|---:|---:|---:|---:|---|",
    ]
    del measured
    for m in models:
        cell = table[m].get(only, {})
        largest, peak = cell.get("largest_tensor_mib"), cell.get("peak_mib")
        if largest is None or peak is None:
            out.append(f"| {m} | - | - | - | - | - |")
            continue
        limit = 1.2 * largest + 50
        out.append(f"| {m} | {cell.get('weights_mib', 0):.0f} | {largest:.1f} | {peak:.0f} | "
                   f"{limit:.0f} | {'yes' if peak <= limit else 'no'} |")
    return out


# -- driver -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--frontend", default="auto",
                        choices=("auto", "fx", "export", "dynamo"),
                        help="capture() front-end for the irbridge tools")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool and model")
    parser.add_argument("--opset", type=int, default=20,
                        help="ONNX opset both tools write (20: torch.onnx's default here)")
    parser.add_argument("--no-fold-batch-norm", dest="fold_batch_norm",
                        action="store_false",
                        help="irbridge: keep BatchNormalization nodes (default: fold them "
                             "into the Conv before, as torch.onnx does for an eval model)")
    parser.add_argument("--latency-runs", type=int, default=40,
                        help="onnxruntime runs per file (0: no latency measurement)")
    parser.add_argument("--latency-warmup", type=int, default=5)
    parser.add_argument("--ort-graphs", type=Path, default=None, metavar="DIR",
                        help="save the graph onnxruntime runs for each file (its "
                             "optimised model, SessionOptions.optimized_model_filepath, "
                             "the latency runs' options) under DIR/MODEL/ and print the "
                             "node types whose counts differ between the files")
    parser.add_argument("--no-ort-target", dest="ort_target", action="store_false",
                        help="time only irbridge's default file against torch.onnx's (by "
                             "default a third file, export_onnx(..., target=\"onnxruntime\") "
                             "of the same IR, is timed beside them)")
    parser.add_argument("--latency-threads", type=int, default=0,
                        help="onnxruntime intra-op threads for the latency runs (default: "
                             "torch's thread count); 1 makes each run's CPU time its work")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds per measurement")
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench_onnx.json")
    parser.add_argument("--log-dir", type=Path, default=ROOT / "build" / "bench_onnx")
    parser.add_argument("--no-write", dest="write", action="store_false",
                        help="print only; do not write the markdown")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="measure nothing: rewrite the section from a previous run's "
                             "JSON (--json of that run)")
    args = parser.parse_args(argv)
    if args.render is not None:
        data = json.loads(args.render.read_text())
        table = summarize(data["runs"], data["models"], data["tools"])
        write_section(args.md, SECTION, render(
            table, data["runs"], data["machine"], data["models"], data["tools"],
            int(data["repeat"]), data["frontend"], data["command"],
            float(data["total_seconds"]), int(data.get("opset", 18)),
            bool(data.get("fold_batch_norm", False))))
        print(f"wrote the {SECTION} section of {args.md} from {args.render}")
        return 0
    command = "uv run python tools/bench_onnx.py" + "".join(
        f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    began = time.perf_counter()
    preload()
    import onnx  # noqa: F401
    import onnxscript  # noqa: F401
    import torch
    import torch.onnx

    import irbridge.converters.onnx  # noqa: F401

    info = machine_info()
    runs: list[dict[str, Any]] = []
    threads = torch.get_num_threads()
    for name in args.models:
        print(f"{name}: building and warming up in the parent", flush=True)
        built = prepare(name, MODELS[name])
        for rep in range(args.repeat):
            for tool in args.tools:
                log = (args.log_dir /
                       f"{name.replace('/', '_')}.{tool.replace(':', '_').replace('+', '_')}"
                       f".{rep}.log")

                keep = (args.log_dir / "files" / name / tool.replace(":", "_")
                        if rep == 0 and tool in LATENCY_TOOLS else None)
                keep_ort = (args.log_dir / "files" / name / "irbridge_ort_target"
                            if keep is not None and args.ort_target
                            and tool == "irbridge:export_onnx" else None)

                def one(tool: str = tool, name: str = name, built: Any = built,
                        keep: Path | None = keep, keep_ort: Path | None = keep_ort
                        ) -> dict[str, Any]:
                    return measure(name, built, tool, threads, args.frontend, args.opset,
                                   args.fold_batch_norm, keep, keep_ort)

                row = run_forked(one, timeout=args.timeout, log=log)
                row.setdefault("model", name)
                row.setdefault("tool", tool)
                row["run"] = rep
                runs.append(row)
                what = (f"{row['seconds']:.2f} s, peak {row.get('peak_mib')} MiB"
                        if row.get("status") == "ok" else
                        f"{row.get('status')}: {str(row.get('error'))[:150]}")
                print(f"{name:18} {tool:24} run {rep + 1}: {what}", flush=True)
        files = {t: args.log_dir / "files" / name / t.replace(":", "_") / "model.onnx"
                 for t in LATENCY_TOOLS if t in args.tools}
        if args.ort_target:
            files[ORT_FILE] = (args.log_dir / "files" / name / "irbridge_ort_target"
                               / "model.onnx")
        files = {t: f for t, f in files.items() if f.exists()}
        if args.latency_runs and files:
            def lat(name: str = name, built: Any = built,
                    files: dict[str, Path] = files) -> dict[str, Any]:
                return latency(name, built, files, args.latency_threads or threads,
                               args.latency_runs, args.latency_warmup,
                               args.ort_graphs / name if args.ort_graphs else None)

            row = run_forked(lat, timeout=args.timeout * 3,
                             log=args.log_dir / f"{name.replace('/', '_')}.latency.log")
            row.setdefault("model", name)
            row["tool"] = "latency"
            runs.append(row)
            if row.get("status") == "ok":
                med = {t: statistics.median(v) * 1e3 for t, v in row["times"].items() if v}
                print(f"{name:18} latency ms: " + ", ".join(
                    f"{t} {m:.2f}" for t, m in med.items())
                    + f"; checks {row['checks']}", flush=True)
                if row.get("ort_ops"):
                    _print_ort_ops(name, row["ort_ops"])
            else:
                print(f"{name:18} latency: {row.get('status')}: {row.get('error')}",
                      flush=True)
        shutil.rmtree(args.log_dir / "files" / name, ignore_errors=True)
        del built
        gc.collect()
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    total = time.perf_counter() - began
    table = summarize(runs, args.models, args.tools)
    for m in args.models:
        meta = table[m]["_"]
        print(f"{m:18} ratio export only {_ratio(meta.get('irbridge:export_onnx'))}, "
              f"capture+export {_ratio(meta.get('irbridge:capture+export'))}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "command": command, "runs": runs,
                                     "models": args.models, "tools": args.tools,
                                     "repeat": args.repeat, "frontend": args.frontend,
                                     "opset": args.opset,
                                     "fold_batch_norm": args.fold_batch_norm,
                                     "summary": table, "total_seconds": round(total, 1)},
                                    indent=1, default=str) + "\n")
    if args.write:
        write_section(args.md, SECTION, render(table, runs, info, args.models, args.tools,
                                               args.repeat, args.frontend, command, total,
                                               args.opset, args.fold_batch_norm))
        print(f"wrote the {SECTION} section of {args.md}")
    print(f"total {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
