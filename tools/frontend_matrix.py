"""Front-end x model matrix for the eight PyTorch benchmark models.

    uv run python tools/frontend_matrix.py                  # all 8 models x fx, dynamo, export, auto
    uv run python tools/frontend_matrix.py --models resnet18 gpt2 --frontends export auto

For every (model, front-end) cell: build the model from the zoo (offline, random weights,
seed 0), `capture(..., frontend=F, weights=True)`, count graphs, nodes and opaque nodes,
run `verify` against the eager model, and record the capture wall time, the method `auto`
chose (with the per-method attempts) and, where a method fails, its one-line reason.

Isolation: the parent process imports torch, torchvision, transformers, ultralytics and
irbridge once and runs no torch computation; every cell then runs in its own forked
child process (fresh memory, fresh TorchDynamo state, the model built in the child) under
a timeout, and returns its row as JSON. A crash, a kill or a timeout is recorded as the
cell's failure. Child output goes to a log file per cell (`--log-dir`).

Writes docs/pytorch-matrix.md (tables, machine, command) and tests/data/pytorch_matrix.json.
Linux only (fork, /proc).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# (zoo name, zoo.build keyword arguments): the inputs the benchmark names
MODELS: dict[str, dict[str, Any]] = {
    "resnet18": {},
    "mobilenet_v2": {},
    "efficientnet_b0": {},
    "vit_b_16": {},
    "bert-base-uncased": {"seq_len": 128},
    "gpt2": {"seq_len": 128},
    "yolov8n": {"input_shape": (1, 3, 640, 640)},
    "detr-resnet-50": {},
}
FRONTENDS = ("fx", "dynamo", "export", "auto")


# -- machine and process helpers (also used by tools/bench_pytorch.py) ----------------------


def machine_info() -> dict[str, Any]:
    """CPU count (affinity, as `nproc`), RAM, CPU model, versions, date, load."""
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
                break
    except OSError:
        pass
    import subprocess

    import torch

    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True,
                                  check=False).stdout.strip()
        except OSError:
            return ""

    dirty = git("status", "--porcelain", "--", "converters", "irbridge")
    return {
        "git": git("rev-parse", "--short", "HEAD")
        + (" + uncommitted changes in converters/ or irbridge/" if dirty else ""),
        "nproc": len(os.sched_getaffinity(0)),
        "ram_gib": round(mem_kib / 2**20, 1),
        "cpu_model": cpu_model,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def machine_lines(info: Mapping[str, Any]) -> list[str]:
    return [
        f"- CPU: {info['cpu_model'] or 'unknown'}, `nproc` = {info['nproc']} "
        f"(torch threads {info['torch_threads']})",
        f"- RAM: {info['ram_gib']} GiB; no GPU used",
        f"- torch {info['torch']}, Python {info['python']}, {info['platform']}",
        f"- code: commit {info.get('git') or 'unknown'}",
        f"- date: {info['date']}; 1/5/15-minute load average at start: "
        f"{' / '.join(str(x) for x in info['loadavg_start'])}"
        + (f", at end: {' / '.join(str(x) for x in info['loadavg_end'])}"
           if info.get("loadavg_end") else ""),
    ]


def preload() -> None:
    """Import everything the cells use, once, in the parent (no torch computation here:
    forking after OpenMP has started its threads is not safe)."""
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("YOLO_OFFLINE", "1")
    import torch  # noqa: F401
    import torchvision  # noqa: F401
    import transformers  # noqa: F401
    import ultralytics  # noqa: F401

    import irbridge.converters.pytorch  # noqa: F401


def run_forked(fn: Callable[[], dict[str, Any]], *, timeout: float, log: Path,
               ) -> dict[str, Any]:
    """Run `fn` in a forked child with a timeout; return its dict, or
    {"status": "timeout"|"crash", "error": ...} when it produced none."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd, tmp = tempfile.mkstemp(prefix="irbridge-cell-", suffix=".json")
    os.close(fd)
    result_path = Path(tmp)
    log.parent.mkdir(parents=True, exist_ok=True)
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(out, 2)
            warnings.filterwarnings("ignore")
            result_path.write_text(json.dumps(fn(), default=str))
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout
    status = 0
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"status": "timeout", "error": f"timed out after {timeout:.0f} s"}
            time.sleep(0.1)
        text = result_path.read_text() if result_path.exists() else ""
        if text:
            data: dict[str, Any] = json.loads(text)
            return data
        if os.WIFSIGNALED(status):
            why = f"child killed by signal {os.WTERMSIG(status)}"
            if os.WTERMSIG(status) == signal.SIGKILL:
                why += " (out of memory?)"
        else:
            why = f"child exited with status {os.WEXITSTATUS(status)}"
        return {"status": "crash", "error": f"{why}: {last_line(log)}"}
    finally:
        result_path.unlink(missing_ok=True)


def last_line(log: Path) -> str:
    try:
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def one_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- one cell ---------------------------------------------------------------------------


def measure_cell(name: str, frontend: str, build_kwargs: Mapping[str, Any], *,
                 warmup: bool | None = None) -> dict[str, Any]:
    """One cell. warmup=None is capture()'s default (only `auto` warms up)."""
    from irbridge.converters.pytorch import capture, verify, zoo

    row: dict[str, Any] = {"model": name, "frontend": frontend, "warmup": warmup}
    start = time.perf_counter()
    built = zoo.build(name, **build_kwargs)
    row["build_s"] = round(time.perf_counter() - start, 3)
    row["inputs"] = built.input_desc
    row["parameters"] = built.num_parameters
    start = time.perf_counter()
    try:
        result = capture(built.module, built.args, built.kwargs, frontend=frontend,
                         weights=True, warmup=warmup)
    except Exception as exc:
        row.update(status="fail", capture_s=round(time.perf_counter() - start, 3),
                   error=one_line(exc, 1200))
        return row
    wall = time.perf_counter() - start
    model = result.model
    meta = model.metadata
    row.update(
        status="ok",
        capture_s=round(wall, 3),
        method_s=round(result.seconds, 3),
        method=result.method,
        attempts=[[m, r] for m, r in result.attempts],
        graphs=len(model.graphs),
        nodes=sum(1 for _ in model.all_nodes()),
        opaque=result.opaque_count,
        opaque_ops=dict(result.stats.opaque),
        retraced=dict(result.stats.retraced),
        type_mismatches=len(result.stats.type_mismatches),
        links=len(model.links),
        break_reasons=[g.break_reason for g in model.graphs if g.break_reason],
        ir_parameters=model.parameter_count(),
        dynamo={k: v for k, v in meta.items() if k.startswith("dynamo.")},
    )
    start = time.perf_counter()
    try:
        report = verify(result, built.module)
    except Exception as exc:
        row["verify"] = {"passed": False, "error": one_line(exc, 600),
                         "seconds": round(time.perf_counter() - start, 3)}
        return row
    failing = [f"output {o.index} ({o.name or 'not captured'}): {o.note or 'error too large'}"
               for o in report.outputs if not o.passed]
    row["verify"] = {
        "passed": report.passed,
        "summary": report.summary(),
        "outputs": len(report.outputs),
        "max_abs_error": report.max_abs_error,
        "max_rel_error": report.max_rel_error,
        "error": report.error,
        "failing": failing,
        "seconds": round(report.seconds, 3),
    }
    weak = _weak_outputs(built.module, built.args, built.kwargs)
    if weak is not None:
        # every float output of the eager model is constant (torchvision's ViT zero-
        # initialises its head, so random-weight logits are all 0) or smaller than the
        # float32 atol (1e-5), so the output check alone proves little: compare every
        # intermediate fx node with its IR value as well
        row["verify"]["weak_outputs"] = weak
        try:
            row["verify"]["node_check"] = node_check(result)
        except Exception as exc:
            row["verify"]["node_check"] = f"could not run: {one_line(exc, 300)}"
    return row


def node_check(result: Any, *, rtol: float = 1e-3, atol: float = 1e-6) -> str:
    """Compare every fx node's eager value with the IR value lowered from it.

    Runs each captured fx graph eagerly on the example values (cloning every node's result,
    so later in-place ops cannot change what was recorded), then the IR in the reference
    executor, and reports how many values were compared, the worst relative error, and the
    first value off by more than `rtol` of its magnitude (+ `atol`)."""
    import numpy as np
    import torch
    import torch.fx
    import torch.utils._pytree as pytree

    from irbridge.converters.pytorch._util import tensor_leaves, tensor_to_numpy
    from irbridge.executor import run_graphs
    from irbridge.ir import walk_nodes

    capture = result.capture
    model = result.model
    class Recorder(torch.fx.Interpreter):
        values: dict[str, Any]

        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            self.values[n.name] = pytree.tree_map_only(torch.Tensor,
                                                       lambda t: t.detach().clone(), out)
            return out

    eager: dict[tuple[int, str], list[Any]] = {}
    for index, cg in enumerate(capture.graphs):
        recorder = Recorder(cg.gm)
        recorder.values = {}
        with torch.no_grad():
            recorder.run(*[s.value for s in cg.slots])
        for name, out in recorder.values.items():
            eager[(index, name)] = tensor_leaves(out)
    wanted: dict[tuple[int, str], tuple[str, int]] = {}
    for (index, fx_name), names in result.stats.node_values.items():
        for position, value_name in enumerate(names):
            wanted[(index, value_name)] = (fx_name, position)
    graph_of = {id(n): i for i, g in enumerate(model.graphs) for _, n in walk_nodes(g)}
    compared = 0
    worst = 0.0
    first: str = ""

    def hook(node: Any, arrays: list[Any]) -> None:
        nonlocal compared, worst, first
        index = graph_of.get(id(node))
        if index is None:
            return
        for value, array in zip(node.outputs, arrays, strict=False):
            key = wanted.get((index, value.name))
            if key is None:
                continue
            refs = eager.get((index, key[0]), [])
            if key[1] >= len(refs) or tuple(refs[key[1]].shape) != tuple(np.shape(array)):
                continue
            b = tensor_to_numpy(refs[key[1]]).astype(np.float64)
            if b.size == 0:
                continue
            a = np.asarray(array).astype(np.float64)
            err = float(np.nanmax(np.abs(a - b)))
            scale = float(np.nanmax(np.abs(b)))
            compared += 1
            rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
            worst = max(worst, rel)
            if not first and err > rtol * scale + atol:
                first = (f"graph {index} fx node {key[0]} (IR value {value.name}): max abs "
                         f"{err:.3g}, rel {rel:.3g}")

    feeds = {name: tensor_to_numpy(t) for name, t in capture.inputs.items()}
    run_graphs(model, feeds, on_node=hook)
    if first:
        return f"{compared} values compared; first divergence: {first}"
    return (f"all {compared} compared values agree (worst relative error {worst:.2g}, "
            f"limit rtol {rtol:g})")


def _weak_outputs(module: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                  ) -> list[str] | None:
    """When every float output of the eager model is constant or below 1e-5 in magnitude
    (so verify's atol alone would pass it), a description of each; else None."""
    import torch

    from irbridge.converters.pytorch._util import tensor_leaves

    with torch.no_grad():
        leaves = [t.detach().double() for t in tensor_leaves(module(*args, **kwargs))
                  if t.is_floating_point() and t.numel()]
    described: list[str] = []
    for t in leaves:
        scale = float(t.abs().max())
        if bool((t == t.reshape(-1)[0]).all()):
            described.append(f"{list(t.shape)} constant {float(t.reshape(-1)[0]):g}")
        elif scale < 1e-5:
            described.append(f"{list(t.shape)} max |y| {scale:.2g}")
        else:
            return None
    return described or None


# -- report -----------------------------------------------------------------------------


def _good(row: Mapping[str, Any]) -> bool:
    return (row.get("status") == "ok" and bool(row.get("verify", {}).get("passed"))
            and not row.get("opaque"))


def _warm_text(row: Mapping[str, Any]) -> str:
    warm = row.get("with_warmup")
    if not warm:
        return ""
    if warm.get("status") != "ok":
        if warm.get("error") == row.get("error"):
            return " With a warm-up forward pass first (`warmup=True`): fails the same way."
        return f" With a warm-up forward pass first (`warmup=True`): fails: {warm.get('error')}"
    v = warm.get("verify") or {}
    return (f" With a warm-up forward pass first (`warmup=True`): captures, "
            f"{warm.get('graphs')} graph(s), {warm.get('nodes')} nodes, "
            f"{warm.get('opaque')} opaque, verify {v.get('summary') or v.get('error')}")


def _fmt_err(x: Any) -> str:
    return f"{x:.2e}" if isinstance(x, float) else "-"


def _cell_brief(row: Mapping[str, Any]) -> str:
    if row.get("status") != "ok":
        return f"**fails** ({row.get('status')})" if row.get("status") != "fail" else "**fails**"
    v = row.get("verify", {})
    verdict = "verify PASS" if v.get("passed") else "**verify FAIL**"
    if v.get("passed") and v.get("weak_outputs"):
        verdict += "*"
    text = f"ok, {verdict}"
    if row.get("opaque"):
        text += f", **{row['opaque']} opaque**"
    if row.get("frontend") == "auto":
        text += f" → {row.get('method')}"
    return text


def targets(rows: Sequence[Mapping[str, Any]], models: Sequence[str],
            frontends: Sequence[str]) -> list[str]:
    def ok(m: str, f: str) -> bool:
        return any(r["model"] == m and r["frontend"] == f and r.get("status") == "ok"
                   for r in rows)

    lines = []
    for f in ("export", "dynamo", "auto"):
        if f not in frontends:
            continue
        good = [m for m in models if ok(m, f)]
        mark = "met" if len(good) == len(models) else "**not met**"
        missing = [m for m in models if m not in good]
        lines.append(f"- `{f}` captures all {len(models)}: {mark} ({len(good)}/{len(models)}"
                     + (f"; fails on {', '.join(missing)}" if missing else "") + ")")
    if "fx" in frontends:
        good = [m for m in models if ok(m, "fx")]
        lines.append(f"- `fx` captures {len(good)}/{len(models)}: "
                     f"{', '.join(good) or 'none'} (the issue asks only where FX can trace)")
    captured = [r for r in rows if r.get("status") == "ok"]
    failed_v = [f"{r['model']}/{r['frontend']}" for r in captured
                if not r.get("verify", {}).get("passed")]
    lines.append(f"- verify passes through every front-end that captured: "
                 f"{'met' if not failed_v else '**not met**'} "
                 f"({len(captured) - len(failed_v)}/{len(captured)} captured cells pass"
                 + (f"; fails: {', '.join(failed_v)}" if failed_v else "") + ")")
    opaque = [f"{r['model']}/{r['frontend']} ({r['opaque']})" for r in captured if r.get("opaque")]
    lines.append(f"- zero opaque nodes: {'met' if not opaque else '**not met**'}"
                 + (f" ({', '.join(opaque)})" if opaque else
                    f" ({len(captured)} captured cells, 0 opaque nodes)"))
    return lines


def render(rows: Sequence[Mapping[str, Any]], info: Mapping[str, Any], models: Sequence[str],
           frontends: Sequence[str], command: str, total_s: float) -> str:
    by = {(r["model"], r["frontend"]): r for r in rows}
    out = [
        "# PyTorch front-end matrix",
        "",
        "Generated by `tools/frontend_matrix.py` (do not edit by hand; rerun it). Every cell:",
        "build the model from the zoo (offline, random weights, seed 0), "
        "`capture(model, args, kwargs, frontend=F, weights=True)`, count graphs, nodes and",
        "opaque nodes, then `verify` the IR against the eager model in the reference executor",
        "(tolerances in [pytorch.md](pytorch.md#verification)). Each cell runs in its own",
        "forked process (fresh memory and TorchDynamo state) after the parent imported the",
        "libraries once; the model is built inside the cell. Raw data:",
        "[tests/data/pytorch_matrix.json](../tests/data/pytorch_matrix.json).",
        "",
        f"Command: `{command}` (total {total_s / 60:.1f} min)",
        "",
        "Machine:",
        "",
        *machine_lines(info),
        "",
        "The CPU is shared with other jobs, so the seconds below carry noise; they are one run",
        "each. For timings against the peer tools see [benchmarks.md](benchmarks.md).",
        "",
        "## Targets (issue 3)",
        "",
        *targets(rows, models, frontends),
        "",
        "## Summary",
        "",
        "| model | " + " | ".join(frontends) + " |",
        "|---|" + "---|" * len(frontends),
    ]
    for m in models:
        cells = [_cell_brief(by.get((m, f), {"status": "missing"})) for f in frontends]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    out += [
        "",
        "`*`: with these random weights the eager output is constant or smaller than the "
        "float32 atol (1e-5), so the output check alone proves little; the notes give the "
        "node-by-node comparison made as well.",
        "",
        "## Details",
        "",
        "`capture s` is the wall time of the `capture()` call (for `auto`: warm-up forward "
        "plus every attempt); `verify` gives the largest absolute and relative (to the "
        "output's largest magnitude) error over all outputs; `re-traced` counts FX nodes "
        "lowered through the make_fx fallback.",
        "",
        "| model | inputs | front-end | status | method | graphs | nodes | opaque | re-traced "
        "| capture s | verify | max abs | max rel |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for m in models:
        for f in frontends:
            r = by.get((m, f))
            if r is None:
                continue
            inputs = md_escape(str(r.get("inputs", "")))
            if r.get("status") != "ok":
                out.append(f"| {m} | {inputs} | {f} | {r.get('status')} | - | - | - | - | - "
                           f"| {r.get('capture_s', '-')} | - | - | - |")
                continue
            v = r.get("verify", {})
            verdict = "PASS" if v.get("passed") else "**FAIL**"
            retraced = sum(r.get("retraced", {}).values())
            out.append(
                f"| {m} | {inputs} | {f} | ok | {r['method']} | {r['graphs']} | {r['nodes']} "
                f"| {r['opaque']} | {retraced} | {r['capture_s']:.2f} | {verdict} "
                f"| {_fmt_err(v.get('max_abs_error'))} | {_fmt_err(v.get('max_rel_error'))} |")
    failures = [r for r in rows if r.get("status") != "ok"]
    notes: list[str] = []
    for r in rows:
        if r.get("status") != "ok":
            continue
        v = r.get("verify", {})
        if not v.get("passed"):
            why = v.get("error") or "; ".join(v.get("failing", [])) or v.get("summary", "")
            notes.append(f"- {r['model']} / {r['frontend']}: verify fails: "
                         f"{md_escape(why + _warm_text(r))}")
        if v.get("weak_outputs"):
            notes.append(f"- {r['model']} / {r['frontend']}: weak output check, eager output "
                         f"{md_escape('; '.join(v['weak_outputs']))}; node-level check: "
                         f"{v.get('node_check')}")
        if r.get("opaque"):
            ops = ", ".join(f"{k} x{n}" for k, n in sorted(r.get("opaque_ops", {}).items()))
            notes.append(f"- {r['model']} / {r['frontend']}: opaque nodes: {ops}")
        if r["frontend"] == "auto":
            tried = "; ".join(f"{a}: {b}" for a, b in r.get("attempts", []))
            notes.append(f"- {r['model']} / auto chose `{r['method']}`; attempts: "
                         f"{md_escape(tried)}")
        if r.get("break_reasons"):
            notes.append(f"- {r['model']} / {r['frontend']}: {r['graphs']} graphs, "
                         f"{r['links']} links; break reasons: "
                         + md_escape("; ".join(r["break_reasons"])))
        if r.get("dynamo", {}).get("dynamo.uncaptured_inputs"):
            notes.append(f"- {r['model']} / {r['frontend']}: inputs computed outside the "
                         f"graphs: {md_escape(r['dynamo']['dynamo.uncaptured_inputs'])}")
    out += ["", "## Failures", ""]
    if failures:
        for r in failures:
            out.append(f"- {r['model']} / {r['frontend']} ({r.get('status')}): "
                       f"{md_escape(str(r.get('error', '')) + _warm_text(r))}")
    else:
        out.append("None: every front-end captured every model.")
    out += ["", "## Notes per cell", ""]
    out += notes or ["None."]
    out.append("")
    return "\n".join(out)


# -- driver -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--frontends", nargs="+", default=list(FRONTENDS), choices=FRONTENDS)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    parser.add_argument("--no-diagnose", dest="diagnose", action="store_false",
                        help="do not retry failing fx/dynamo/export cells with a warm-up pass")
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "pytorch-matrix.md")
    parser.add_argument("--json", type=Path, default=ROOT / "tests" / "data" /
                        "pytorch_matrix.json")
    parser.add_argument("--log-dir", type=Path, default=ROOT / "build" / "frontend_matrix")
    args = parser.parse_args(argv)
    command = "uv run python tools/frontend_matrix.py" + "".join(
        f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    began = time.perf_counter()
    preload()
    info = machine_info()
    rows: list[dict[str, Any]] = []
    for name in args.models:
        for frontend in args.frontends:
            log = args.log_dir / f"{name.replace('/', '_')}.{frontend}.log"

            def cell(name: str = name, frontend: str = frontend) -> dict[str, Any]:
                return measure_cell(name, frontend, MODELS[name])

            t0 = time.perf_counter()
            row = run_forked(cell, timeout=args.timeout, log=log)
            row.setdefault("model", name)
            row.setdefault("frontend", frontend)
            row["cell_s"] = round(time.perf_counter() - t0, 2)
            if args.diagnose and frontend != "auto" and not _good(row):
                # diagnostic: the same cell with a warm-up forward pass first (lazily
                # initialised models such as YOLO need one; only `auto` does it by default)
                def warm(name: str = name, frontend: str = frontend) -> dict[str, Any]:
                    return measure_cell(name, frontend, MODELS[name], warmup=True)

                again = run_forked(warm, timeout=args.timeout, log=log.with_suffix(".warm.log"))
                row["with_warmup"] = {k: again.get(k) for k in
                                      ("status", "error", "verify", "nodes", "opaque",
                                       "graphs", "capture_s")}
            rows.append(row)
            detail = (row.get("verify", {}).get("summary", row.get("verify", {}).get("error"))
                      if row.get("status") == "ok" else row.get("error", ""))
            print(f"{name:18} {frontend:7} {row.get('status'):8} "
                  f"{row.get('method', '-'):7} capture {row.get('capture_s', '-')} s "
                  f"nodes {row.get('nodes', '-')} opaque {row.get('opaque', '-')} | "
                  f"{str(detail)[:160]}", flush=True)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    total = time.perf_counter() - began
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text(render(rows, info, args.models, args.frontends, command, total))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "command": command,
                                     "total_seconds": round(total, 1), "models": MODELS,
                                     "rows": rows}, indent=1, default=str) + "\n")
    print(f"wrote {args.md} and {args.json} in {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
