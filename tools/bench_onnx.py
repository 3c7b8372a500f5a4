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
  file, with its defaults (opset 18, graph optimisation on).

F is `auto` unless --frontend says otherwise (the front-end `irbridge convert` uses;
`auto` includes the attempts that failed before the one that worked). Both write opset 18.

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


def measure(name: str, built: Any, tool: str, threads: int, frontend: str,
            ) -> dict[str, Any]:
    """One measurement, run inside a forked child on the parent's model."""
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
                export_onnx(result.model, path)
                extra = {"method": result.method,
                         "warmup": result.model.metadata.get("capture.warmup", "")}
            elif tool == "torch.onnx":
                torch.onnx.export(built.module, built.args, str(path), kwargs=built.kwargs,
                                  dynamo=True)
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
    row.update(status="ok", seconds=round(seconds, 3),
               peak_mib=round((peak - (base if reset else hwm0)) / 1024, 1),
               baseline_mib=round(base / 1024, 1), **extra)
    return row


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
                if "method" in ok[0]:
                    cell["method"] = ok[0]["method"]
                    cell["warmup"] = sorted({str(r.get("warmup", "")) for r in ok})
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
        table[m]["_"] = meta
    return table


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
           command: str, total_s: float) -> str:
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
        "dynamo=True)` to a file, with its defaults (opset 18, graph optimisation on). "
        "Both tools write opset 18 with the weights inside the file.",
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
    out += failures_and_runs(table, models, tools, "build/bench_onnx.json")
    return "\n".join(out)


# -- driver -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--frontend", default="auto",
                        choices=("auto", "fx", "export", "dynamo"),
                        help="capture() front-end for the irbridge tools")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool and model")
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
            float(data["total_seconds"])))
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

                def one(tool: str = tool, name: str = name, built: Any = built,
                        ) -> dict[str, Any]:
                    return measure(name, built, tool, threads, args.frontend)

                row = run_forked(one, timeout=args.timeout, log=log)
                row.setdefault("model", name)
                row.setdefault("tool", tool)
                row["run"] = rep
                runs.append(row)
                what = (f"{row['seconds']:.2f} s, peak {row.get('peak_mib')} MiB"
                        if row.get("status") == "ok" else
                        f"{row.get('status')}: {str(row.get('error'))[:150]}")
                print(f"{name:18} {tool:24} run {rep + 1}: {what}", flush=True)
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
                                     "summary": table, "total_seconds": round(total, 1)},
                                    indent=1, default=str) + "\n")
    if args.write:
        write_section(args.md, SECTION, render(table, runs, info, args.models, args.tools,
                                               args.repeat, args.frontend, command, total))
        print(f"wrote the {SECTION} section of {args.md}")
    print(f"total {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
