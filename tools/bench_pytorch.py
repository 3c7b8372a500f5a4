"""Conversion wall time and peak memory: irbridge's PyTorch front-ends against
torch.onnx.export(dynamo=True) and torch-mlir's StableHLO import, in the same run.

    uv run python tools/bench_pytorch.py          # 8 models; 3 runs (torch-mlir, auto: 1)
    uv run python tools/bench_pytorch.py --models resnet18 --repeat 1 --no-write

Tools measured on the same model object and the same example inputs:

* `irbridge:fx|dynamo|export|auto`: `capture(model, args, kwargs, frontend=F,
  weights=True)`: capture and lowering into an in-memory IR with the weights, plus a
  warm-up forward pass when capture() decides one is needed (`auto` includes every
  attempt it made). Writing the result with `serde.save` is timed separately.
* `torch.onnx`: `torch.onnx.export(model, args, PATH, kwargs=kwargs, dynamo=True)` to a
  file in a temporary directory (its defaults: opset 18, ONNX graph optimisation on).
* `torch-mlir`: `torch_mlir.fx.export_and_import(model, *args, output_type="stablehlo",
  **kwargs)`, an in-memory MLIR module.

Method: the parent imports torch, torchvision, transformers, ultralytics, irbridge,
torch.onnx, onnxscript and torch_mlir once. Per model, it builds the model (zoo, random
weights, seed 0) and runs one untimed eager forward pass (so lazily initialised models
such as YOLO are in the same state for every tool), with torch limited to one thread so
that no OpenMP thread pool exists when it forks. Every single measurement is then a forked
child process: it restores the thread count, collects garbage, resets the kernel's RSS
high-water mark (`/proc/self/clear_refs` = 5), reads VmRSS as the baseline and times the
first call of the tool in that process. Peak memory = VmHWM after the call - that
baseline (imports, the model and its inputs are excluded). Runs are interleaved (run 1 of
every tool, then run 2, ...) and the median is reported.

Writes its own section of docs/benchmarks.md (between marker comments, see
`write_section`; tools/bench_onnx.py writes another). Linux only (fork, /proc).
"""

from __future__ import annotations

import argparse
import fcntl
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

from frontend_matrix import (
    MODELS,
    ROOT,
    machine_info,
    machine_lines,
    md_escape,
    one_line,
    preload,
    run_forked,
)

IRBRIDGE = ("fx", "dynamo", "export", "auto")
SECTION = "bench_pytorch"
PAGE_HEADER = """# Benchmarks

Generated: each section below is written by the tool it names, between its own marker
comments, and a tool rewrites only its section. Rerun the tools rather than editing the
tables.
"""
TOOLS = (*(f"irbridge:{f}" for f in IRBRIDGE), "torch.onnx", "torch-mlir")
PEERS = ("torch.onnx", "torch-mlir")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def prepare(name: str, build_kwargs: Mapping[str, Any]) -> Any:
    """Build the model in the parent with torch on one thread (so no OpenMP thread pool
    exists when the measurements fork) and run one untimed eager forward pass, so every
    tool sees the same initialised model (YOLO builds its anchors lazily)."""
    import torch

    from irbridge.converters.pytorch import zoo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        built = zoo.build(name, **build_kwargs)
        with torch.no_grad():
            built.module(*built.args, **built.kwargs)
    finally:
        torch.set_num_threads(threads)
    return built


def measure(name: str, built: Any, tool: str, threads: int) -> dict[str, Any]:
    """One measurement, run inside a forked child on the parent's model."""
    import torch

    torch.set_num_threads(threads)
    gc.collect()
    reset = _reset_peak()
    base = _status_kib("VmRSS")
    hwm0 = _status_kib("VmHWM")
    row: dict[str, Any] = {"model": name, "tool": tool, "inputs": built.input_desc,
                           "peak_reset": reset}
    extra: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        if tool.startswith("irbridge:"):
            from irbridge.converters.pytorch import capture

            result = capture(built.module, built.args, built.kwargs,
                             frontend=tool.split(":", 1)[1], weights=True)
            extra = {"method": result.method, "opaque": result.opaque_count,
                     "nodes": sum(1 for _ in result.model.all_nodes()),
                     "method_seconds": round(result.seconds, 3),
                     "warmup": result.model.metadata.get("capture.warmup", "")}
        elif tool == "torch.onnx":
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "model.onnx"
                torch.onnx.export(built.module, built.args, str(path), kwargs=built.kwargs,
                                  dynamo=True)
                size = sum(p.stat().st_size for p in Path(tmp).iterdir())
            extra = {"bytes_written": size}
        elif tool == "torch-mlir":
            import torch_mlir.fx

            module = torch_mlir.fx.export_and_import(built.module, *built.args,
                                                     output_type="stablehlo", **built.kwargs)
            extra = {"mlir_ops": len(module.body.operations)}
        else:
            raise ValueError(f"unknown tool {tool}")
    except Exception as exc:
        row.update(status="fail", seconds=round(time.perf_counter() - start, 3),
                   error=error_text(exc))
        return row
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    row.update(status="ok", seconds=round(seconds, 3),
               peak_mib=round((peak - (base if reset else hwm0)) / 1024, 1),
               baseline_mib=round(base / 1024, 1), **extra)
    if tool.startswith("irbridge:"):
        from irbridge import serde

        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            serde.save(result.model, Path(tmp) / "model.irb")
            row["save_seconds"] = round(time.perf_counter() - start, 3)
            row["bytes_written"] = sum(p.stat().st_size for p in Path(tmp).iterdir())
        row["peak_with_save_mib"] = round((_status_kib("VmHWM") - base) / 1024, 1)
    return row


def write_section(md: Path, key: str, body: str) -> None:
    """Put `body` between `<!-- BEGIN key -->` and `<!-- END key -->` in the page `md`,
    leaving every other section as it is. A section not yet on the page is appended; a
    page without any marker (or no page) starts afresh from PAGE_HEADER."""
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    block = f"{begin}\n{body.strip()}\n{end}\n"
    md.parent.mkdir(parents=True, exist_ok=True)
    # two generators finishing at once must not lose each other's section: read, edit and
    # replace the page under an exclusive lock on its folder
    folder = os.open(md.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        _replace_section(md, begin, end, block)
    finally:
        os.close(folder)


def _replace_section(md: Path, begin: str, end: str, block: str) -> None:
    from irbridge.atomic import atomic_file

    text = md.read_text() if md.exists() else ""
    if begin in text and end in text.split(begin, 1)[1]:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        page = head + block + ("\n" + tail if tail else "")
    elif "<!-- BEGIN " in text:
        page = text.rstrip("\n") + "\n\n" + block
    else:
        page = PAGE_HEADER + "\n" + block
    with atomic_file(md) as tmp:
        tmp.write_text(page)


def error_text(exc: BaseException) -> str:
    """The exception's first line, plus its first `error:` diagnostic when the message
    goes on (torch-mlir puts the real reason on a later line)."""
    text = one_line(exc, 400)
    lines = [x.strip() for x in str(exc).splitlines()[1:] if x.strip()]
    detail = next((x for x in lines if "error:" in x.lower()), None)
    if detail:
        text += " " + (detail if len(detail) <= 300 else detail[:297] + "...")
    return text


def _log_error(log: Path) -> str:
    """The first `error: ...` diagnostic line a child printed."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in lines:
        at = line.find("error: ")
        if at >= 0:
            text = line[at:].strip()
            return text if len(text) <= 300 else text[:297] + "..."
    return ""


# -- summary ----------------------------------------------------------------------------


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
                if "save_seconds" in ok[0]:
                    cell["save_seconds"] = statistics.median(r["save_seconds"] for r in ok)
                    cell["method_seconds"] = statistics.median(r["method_seconds"] for r in ok)
                if "method" in ok[0]:
                    cell["method"] = ok[0]["method"]
                    cell["warmup"] = sorted({str(r.get("warmup", "")) for r in ok})
                    cell["opaque"] = max(r.get("opaque", 0) for r in ok)
            failed = [r for r in mine if r.get("status") != "ok"]
            if failed:
                cell["error"] = failed[0].get("error", failed[0].get("status"))
            table[m][t] = cell
        irb = {t: c for t, c in table[m].items() if t.startswith("irbridge:") and
               t != "irbridge:auto" and "seconds" in c and not c.get("opaque")}
        fastest = min(irb, key=lambda t: irb[t]["seconds"]) if irb else None
        onnx = table[m].get("torch.onnx", {})
        table[m]["_"] = {"fastest": fastest}
        if fastest and "seconds" in onnx:
            table[m]["_"]["ratio"] = onnx["seconds"] / irb[fastest]["seconds"]
            with_save = irb[fastest]["seconds"] + irb[fastest].get("save_seconds", 0.0)
            table[m]["_"]["ratio_with_save"] = onnx["seconds"] / with_save
    return table


def _target_lines(table: Mapping[str, Mapping[str, Mapping[str, Any]]],
                  models: Sequence[str]) -> list[str]:
    ratios = {m: table[m]["_"].get("ratio") for m in models}
    met = [m for m, r in ratios.items() if r is not None and r >= 3]
    missed = [f"{m} ({r:.2f}x)" if r is not None else f"{m} (no ratio)"
              for m, r in ratios.items() if m not in met]
    verdict = "met" if not missed else "**not met**"
    return [f"**Target** (irbridge's fastest working front-end >= 3x faster than "
            f"torch.onnx.export on every model): {verdict}; 3x or more on {len(met)} of "
            f"{len(models)} models" + (f", below on {', '.join(missed)}." if missed else ".")
            + " The irbridge times include a warm-up forward pass only where `capture()` "
            "ran one (`warm-up` column of the last table)."]


def _time_cell(cell: Mapping[str, Any], bold: bool) -> str:
    if "seconds" not in cell:
        return "fails" if cell.get("runs") else "-"
    text = f"{cell['seconds']:.2f}"
    if cell.get("ok", 0) < cell.get("runs", 0):
        text += f" ({cell['ok']}/{cell['runs']} ok)"
    return f"**{text}**" if bold else text


def render(table: Mapping[str, Mapping[str, Mapping[str, Any]]], runs: Sequence[Mapping[str, Any]],
           info: Mapping[str, Any], models: Sequence[str], tools: Sequence[str],
           repeats: Mapping[str, int], command: str, total_s: float) -> str:
    inputs = {r["model"]: r.get("inputs", "") for r in runs if r.get("inputs")}
    rep_text = ", ".join(f"{t}: {n}" for t, n in repeats.items())
    out = [
        "## Conversion: irbridge against torch.onnx and torch-mlir",
        "",
        "Generated by `tools/bench_pytorch.py` (rerun it rather than editing the tables).",
        "",
        f"Command: `{command}` (total {total_s / 60:.1f} min)",
        "",
        "Machine:",
        "",
        *machine_lines(info),
        "",
        "**Noise.** This is a shared 2-core machine and other workers were using the CPU "
        "while this ran (see the load averages above), so every figure carries noise: "
        "each is the median of the runs listed, and differences under ~20% mean little.",
        f"Runs per figure: {rep_text}.",
        "",
        *_target_lines(table, models),
        "",
        "### What is measured",
        "",
        "- **irbridge fx / dynamo / export / auto**: `capture(model, args, kwargs, "
        "frontend=F, weights=True)`: capture and lowering into an in-memory IR with the "
        "weights (the IR shares the memory of the model's parameters; buffers are copied), "
        "plus a warm-up forward pass if `capture()` decides it needs one (lazy parameters, "
        "or an attempt that builds state lazily; `warm-up` column of the last table). "
        "`auto` includes every attempt it made. Writing the `.irb` file (`serde.save`) is "
        "timed separately (last table).",
        "- **torch.onnx**: `torch.onnx.export(model, args, path, kwargs=kwargs, dynamo=True)` "
        "to a temporary file, with its defaults (opset 18, graph optimisation on).",
        "- **torch-mlir**: `torch_mlir.fx.export_and_import(model, *args, "
        "output_type=\"stablehlo\", **kwargs)`, an in-memory MLIR module.",
        "- The parent process imports the libraries once (imports are not timed), builds "
        "each model (random weights, seed 0) and runs one untimed eager forward pass, so "
        "every tool sees the same initialised model (YOLO builds its anchors lazily); it "
        "does this with torch on one thread, so that no OpenMP thread pool exists when it "
        "forks. Every measurement is its own forked child process, which restores the "
        "thread count and times the first call of the tool in that process: one-time costs "
        "inside the call (lazy imports, registries, Dynamo start-up) are included, as a "
        "command-line conversion pays them.",
        "- **Peak memory** is the RSS high-water mark from `/proc/self/status` (VmHWM) "
        "after the call, minus the RSS (VmRSS) just before it; the high-water mark is reset "
        "first (`echo 5 > /proc/self/clear_refs`), so imports, the model and its inputs "
        "are excluded.",
        "- **ratio** = torch.onnx median time / the fastest irbridge front-end's median "
        "time (fx, dynamo or export; only front-ends that captured with no opaque node "
        "count). The issue's target is >= 3x on every model.",
        "",
        "### Wall time (seconds, median)",
        "",
        "The fastest working irbridge front-end is in bold.",
        "",
        "| model | inputs | " + " | ".join(tools) + " | ratio torch.onnx / fastest | >= 3x |",
        "|---|---|" + "---:|" * len(tools) + "---:|---|",
    ]
    for m in models:
        row = table[m]
        fastest = row["_"].get("fastest")
        cells = [_time_cell(row[t], t == fastest) for t in tools]
        ratio = row["_"].get("ratio")
        ratio_text = f"{ratio:.2f}x" if ratio is not None else "-"
        verdict = "-" if ratio is None else ("yes" if ratio >= 3 else "**no**")
        out.append(f"| {m} | {md_escape(inputs.get(m, ''))} | " + " | ".join(cells)
                   + f" | {ratio_text} | {verdict} |")
    out += [
        "",
        "### Peak memory above the baseline (MiB, median)",
        "",
        "| model | " + " | ".join(tools) + " |",
        "|---|" + "---:|" * len(tools),
    ]
    for m in models:
        cells = [f"{table[m][t]['peak_mib']:.0f}" if "peak_mib" in table[m][t] else
                 ("fails" if table[m][t].get("runs") else "-") for t in tools]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    irb_tools = [t for t in tools if t.startswith("irbridge:")]
    if irb_tools:
        out += [
            "",
            "### irbridge: method chosen by auto, warm-up, and writing the file",
            "",
            "`save s` is `serde.save` of the fastest front-end's IR to `.irb` (+ sidecar); "
            "the ratio with it included compares like with like against torch.onnx, "
            "which writes its file inside the timed call.",
            "",
            "`method s` is the part of the fastest front-end's `capture()` call spent in the "
            "successful capture method and its lowering (`CaptureResult.seconds`); `warm-up` "
            "is why `capture()` ran a warm-up forward pass (`capture.warmup` metadata; `no`: "
            "none ran).",
            "",
            "| model | auto chose | fastest | warm-up | fastest s | method s | save s | "
            "ratio incl. save |",
            "|---|---|---|---|---:|---:|---:|---:|",
        ]
        for m in models:
            row = table[m]
            fastest = row["_"].get("fastest")
            auto = row.get("irbridge:auto", {}).get("method", "-")
            fc = row.get(fastest, {}) if fastest else {}
            rs = row["_"].get("ratio_with_save")
            warm = ", ".join(fc.get("warmup", [])) or "-"
            out.append(f"| {m} | {auto} | {fastest or '-'} | {md_escape(warm)} | "
                       f"{fc.get('seconds', float('nan')):.2f} | "
                       f"{fc.get('method_seconds', float('nan')):.2f} | "
                       f"{fc.get('save_seconds', float('nan')):.2f} | "
                       + (f"{rs:.2f}x" if rs is not None else "-") + " |")
    out += failures_and_runs(table, models, tools, "build/bench_pytorch.json")
    return "\n".join(out)


def failures_and_runs(table: Mapping[str, Mapping[str, Mapping[str, Any]]],
                      models: Sequence[str], tools: Sequence[str], raw: str) -> list[str]:
    """The closing markdown of a benchmark section: failures, then every run's seconds."""
    failures = [(m, t, table[m][t]["error"]) for m in models for t in tools
                if table[m][t].get("error")]
    out = ["", "### Failures", ""]
    out += [f"- {m} / {t}: {md_escape(str(e))}" for m, t, e in failures] or ["None."]
    out += ["", "### Every run (seconds)", "",
            "| model | " + " | ".join(tools) + " |", "|---|" + "---|" * len(tools)]
    for m in models:
        cells = [", ".join(f"{s:.2f}" for s in table[m][t].get("all_seconds", [])) or "-"
                 for t in tools]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    out += ["", f"Raw rows: `{raw}` of the run (not kept in the repository).", ""]
    return out


# -- driver -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per irbridge front-end and torch.onnx")
    parser.add_argument("--slow-repeat", type=int, default=1,
                        help="runs for torch-mlir (the slowest) and irbridge:auto (not "
                             "part of the ratio)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds per measurement")
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench_pytorch.json")
    parser.add_argument("--log-dir", type=Path, default=ROOT / "build" / "bench_pytorch")
    parser.add_argument("--no-write", dest="write", action="store_false",
                        help="print only; do not write the markdown")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="measure nothing: rewrite the markdown from a previous run's "
                             "JSON (--json of that run)")
    args = parser.parse_args(argv)
    if args.render is not None:
        return _rerender(args.render, args.md)
    command = "uv run python tools/bench_pytorch.py" + "".join(
        f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    slow = ("torch-mlir", "irbridge:auto")
    repeats = {t: (args.slow_repeat if t in slow else args.repeat) for t in args.tools}
    began = time.perf_counter()
    preload()
    import onnxscript  # noqa: F401
    import torch
    import torch.onnx
    import torch_mlir.fx  # noqa: F401

    info = machine_info()
    runs: list[dict[str, Any]] = []
    threads = torch.get_num_threads()
    for name in args.models:
        print(f"{name}: building and warming up in the parent", flush=True)
        built = prepare(name, MODELS[name])
        for rep in range(max(repeats.values())):
            for tool in args.tools:
                if rep >= repeats[tool]:
                    continue
                log = args.log_dir / f"{name.replace('/', '_')}.{tool.replace(':', '_')}.{rep}.log"

                def one(tool: str = tool, name: str = name, built: Any = built,
                        ) -> dict[str, Any]:
                    return measure(name, built, tool, threads)

                row = run_forked(one, timeout=args.timeout, log=log)
                if row.get("status") != "ok":
                    # MLIR prints its diagnostics to stderr, not into the exception
                    detail = _log_error(log)
                    if detail and detail not in str(row.get("error")):
                        row["error"] = f"{row.get('error')} [stderr: {detail}]"
                row.setdefault("model", name)
                row.setdefault("tool", tool)
                row["run"] = rep
                runs.append(row)
                what = (f"{row['seconds']:.2f} s, peak {row.get('peak_mib')} MiB"
                        if row.get("status") == "ok" else
                        f"{row.get('status')}: {str(row.get('error'))[:150]}")
                print(f"{name:18} {tool:16} run {rep + 1}: {what}", flush=True)
        del built
        gc.collect()
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    total = time.perf_counter() - began
    table = summarize(runs, args.models, args.tools)
    for m in args.models:
        meta = table[m]["_"]
        ratio = meta.get("ratio")
        print(f"{m:18} fastest {meta.get('fastest')} ratio "
              + (f"{ratio:.2f}x" if ratio is not None else "-"))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "command": command, "runs": runs,
                                     "models": args.models, "tools": args.tools,
                                     "repeats": repeats, "summary": table,
                                     "total_seconds": round(total, 1)},
                                    indent=1, default=str) + "\n")
    if args.write:
        write_section(args.md, SECTION, render(table, runs, info, args.models, args.tools,
                                               repeats, command, total))
        print(f"wrote the {SECTION} section of {args.md}")
    print(f"total {total / 60:.1f} min")
    return 0


def _rerender(path: Path, md: Path) -> int:
    data = json.loads(path.read_text())
    runs: list[dict[str, Any]] = data["runs"]
    models = data.get("models") or list(dict.fromkeys(r["model"] for r in runs))
    tools = data.get("tools") or list(dict.fromkeys(r["tool"] for r in runs))
    repeats = data.get("repeats") or {
        t: max((sum(1 for r in runs if r["tool"] == t and r["model"] == m) for m in models),
               default=0) for t in tools}
    table = summarize(runs, models, tools)
    write_section(md, SECTION, render(table, runs, data["machine"], models, tools, repeats,
                                      data["command"], float(data["total_seconds"])))
    print(f"wrote the {SECTION} section of {md} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
