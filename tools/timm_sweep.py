"""How much of timm (PyTorch Image Models) irbridge handles: capture, ONNX, onnxruntime, analyze.

    uv run python tools/timm_sweep.py                 # one model per timm family (module)
    uv run python tools/timm_sweep.py --all           # every timm model
    uv run python tools/timm_sweep.py --models resnet18 vit_tiny_patch16_224   # just these
    uv run python tools/timm_sweep.py --retry-failed  # run again what failed in the state

A family is a module of ``timm.models`` (``timm.list_modules()``: resnet, vision_transformer,
convnext, ...); its representative is its model with the fewest parameters, counted once by
building every model on the meta device (cached in the state file). For each model, in its
own forked child process under a timeout (``--timeout``, 120 s) and a memory cap
(``--mem-gib``, on top of what the parent already holds), the sweep

1. builds ``timm:NAME`` from the zoo (random weights after the zoo's seed, the input size of
   the model's own pretrained config, nothing downloaded) and runs it eagerly;
2. captures it with the default front-end (``capture(...)``, ``frontend="auto"``); opaque
   nodes fail this stage (the exporters refuse them);
3. exports the IR to ONNX (``to_onnx``);
4. runs the ONNX file in onnxruntime (CPU) and compares every output with the eager model:
   ``|ort - eager| <= 1e-4 * max(1, max|eager|) + 1e-3 * |eager|`` (the tolerance of
   tests/onnx/test_onnx_pytorch.py): float32 end to end through tens to hundreds of layers,
   where onnxruntime's kernels (conv algorithms, blocked matmuls, its own GELU, softmax and
   normalisations) sum in other orders than torch's, which moves the last bits of every op;
   errors of a wrong lowering are orders of magnitude larger. Where that fails, a float64
   copy of the eager model decides: onnxruntime passes when it is no further from it than
   float32 eager is (times 2), i.e. the difference is float32 rounding in a model whose
   random-weight activations grow large (the row says ``float64_reference``);
5. analyzes the IR (``irbridge analyze``'s driver, on h100-sxm): a failing or uncosted node
   fails this stage.

A model passes when every stage does; otherwise its row holds the first failing stage and
a one-line reason. Results go to a resumable state file (``--state``: a finished model is
not run again; ``--fresh`` starts over), then to docs/pytorch-timm.md and
tests/data/timm_baseline.json (``--no-write`` leaves them alone). Linux only (fork, /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import frontend_matrix as fm  # noqa: E402

STATE = ROOT / "out" / "timm_sweep_state.json"
"""In the ignored out/ folder."""
DOC = ROOT / "docs" / "pytorch-timm.md"
BASELINE = ROOT / "tests" / "data" / "timm_baseline.json"
STAGES = ("build", "capture", "onnx", "onnxruntime", "analyze")
RTOL = 1e-3
ATOL = 1e-4
"""onnxruntime against eager: ``|ort - eager| <= ATOL * max(1, max|eager|) + RTOL * |eager|``."""


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


# -- which models ----------------------------------------------------------------------------


def count_parameters() -> dict[str, Any]:
    """{model: [module, parameters]} for every timm model, each built on the meta device
    (run in a child: the parent does no torch work before it forks)."""
    import timm
    import torch

    counts: dict[str, Any] = {}
    for module in timm.list_modules():
        for name in timm.list_models(module=module):
            try:
                with torch.device("meta"):
                    model = timm.create_model(name, pretrained=False)
                counts[name] = [module, sum(p.numel() for p in model.parameters())]
            except Exception:
                counts[name] = [module, None]
    return counts


def representatives(counts: Mapping[str, Sequence[Any]]) -> dict[str, str]:
    """{module: its model with the fewest parameters} (ties by name; a model that could
    not be counted on meta comes last)."""
    best: dict[str, tuple[float, str]] = {}
    for name, (module, params) in counts.items():
        key = (float(params) if params is not None else float("inf"), name)
        if module not in best or key < best[module]:
            best[module] = key
    return {module: name for module, (_, name) in sorted(best.items())}


# -- one model -------------------------------------------------------------------------------


def compare(actual: Any, expected: Any) -> str | None:
    """None when ``actual`` (onnxruntime) is within the tolerance of ``expected`` (eager),
    else why not."""
    import numpy as np

    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != eager {list(expected.shape)}"
    if not np.issubdtype(expected.dtype, np.floating):
        return None if np.array_equal(actual, expected) else "integer values differ"
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return "NaN where eager has none (or the reverse)"
    finite = np.isfinite(e) & np.isfinite(a)
    if not np.array_equal(a[~finite & ~np.isnan(e)], e[~finite & ~np.isnan(e)]):
        return "infinities differ"
    scale = max(float(np.abs(e[finite]).max(initial=0.0)), 1.0)
    err = np.abs(a[finite] - e[finite])
    bound = ATOL * scale + RTOL * np.abs(e[finite])
    if np.all(err <= bound):
        return None
    return (f"max |ort - eager| = {float(err.max()):.3g} over the tolerance "
            f"(max |eager| {scale:.3g}, atol {ATOL * scale:.3g}, rtol {RTOL})")


def eager_float64(module: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """The eager outputs of a float64 copy of the model on the same (widened) inputs."""
    import copy

    import torch

    def wide(x: Any) -> Any:
        return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    wide_module = copy.deepcopy(module).double()
    with torch.no_grad():
        out = wide_module(*torch.utils._pytree.tree_map(wide, tuple(args)),
                          **torch.utils._pytree.tree_map(wide, dict(kwargs)))
    return [t.numpy() for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


def rounding_only(actual: Any, expected: Any, exact: Any, why: str) -> str | None:
    """Where onnxruntime misses the fixed tolerance: None when it is no further from the
    float64 eager model than float32 eager is (times 2): the difference is float32 rounding
    in a model whose activations grow large (random weights: efficientnetv2_rw_t's logits
    reach 843, where float32 eager itself is 0.78 off float64), not a wrong lowering."""
    import numpy as np

    a, e, x = (np.asarray(v, np.float64) for v in (actual, expected, exact))
    if a.shape != x.shape or not (np.isfinite(a).all() and np.isfinite(x).all()):
        return why
    own = float(np.abs(e - x).max(initial=0.0))
    off = float(np.abs(a - x).max(initial=0.0))
    if off <= 2 * own:
        return None
    return f"{why}; float64 eager: ort {off:.3g} off, float32 eager {own:.3g} off"


def run_model(name: str) -> dict[str, Any]:
    """Build, capture, export, run and analyze one timm model (in a child process)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from irbridge.analysis import driver
    from irbridge.analysis.hardware import resolve_targets
    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.pytorch import capture, zoo

    row: dict[str, Any] = {"model": name, "status": "fail"}
    stage = "build"
    start = time.perf_counter()

    def done(what: str) -> None:
        nonlocal start
        row[f"{what}_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()

    try:
        built = zoo.build(f"timm:{name}")
        row["parameters"] = built.num_parameters
        row["inputs"] = built.input_desc
        with torch.no_grad():
            eager = built.module(*built.args, **built.kwargs)
        done(stage)
        stage = "capture"
        result = capture(built.module, built.args, built.kwargs, weights=True)
        model = result.model
        row["method"] = result.method
        row["nodes"] = sum(1 for _ in model.all_nodes())
        done(stage)
        if result.opaque_count:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(result.stats.opaque.items()))
            raise RuntimeError(f"{result.opaque_count} opaque nodes: {ops}")
        stage = "onnx"
        proto = to_onnx(model)
        done(stage)
        stage = "onnxruntime"
        options = ort.SessionOptions()
        options.log_severity_level = 4
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        feeds = {k: v.detach().numpy() for k, v in result.inputs.items()}
        got = session.run(None, feeds)
        leaves = [t for t in torch.utils._pytree.tree_leaves(eager)
                  if isinstance(t, torch.Tensor)]
        if len(leaves) != len(result.outputs):
            raise RuntimeError(f"{len(result.outputs)} captured outputs for {len(leaves)} "
                               "eager ones")
        worst = 0.0
        reference64: list[Any] | None = None
        for i, (leaf, where) in enumerate(zip(leaves, result.outputs, strict=True)):
            if where is None:
                raise RuntimeError(f"eager output {i} was not captured")
            expected = leaf.detach().numpy()
            why = compare(got[where[1]], expected)
            if why is not None:
                if reference64 is None:
                    reference64 = eager_float64(built.module, built.args, built.kwargs)
                why = rounding_only(got[where[1]], expected, reference64[i], why)
                row["float64_reference"] = True
            if why is not None:
                raise RuntimeError(f"output {i}: {why}")
            if expected.size and np.issubdtype(expected.dtype, np.floating):
                worst = max(worst, float(np.abs(np.asarray(got[where[1]], np.float64)
                                                - expected).max()))
        row["max_abs_error"] = worst
        done(stage)
        stage = "analyze"
        analysis = driver.analyze(model, resolve_targets("h100-sxm"))
        costs = analysis.runs[0].costs
        bad = costs.errors + costs.uncosted
        if bad:
            raise RuntimeError("; ".join(costs.warnings()))
        row["gflops"] = round(costs.total.flops / 1e9, 3)
        done(stage)
        row["status"] = "pass"
    except Exception as exc:
        row["stage"] = stage
        row["error"] = fm.one_line(exc, 300)
        done(stage)
    return row


def capped(fn: Callable[[], dict[str, Any]], mem_gib: float) -> Callable[[], dict[str, Any]]:
    """``fn`` under a data-segment cap of ``mem_gib`` GiB above what the process holds now."""

    def run() -> dict[str, Any]:
        held = 0
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmData:"):
                held = int(line.split()[1]) * 1024
        cap = held + int(mem_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
        return fn()

    return run


# -- the sweep -------------------------------------------------------------------------------


def load_state(path: Path, fresh: bool) -> dict[str, Any]:
    if fresh or not path.exists():
        return {"counts": {}, "results": {}}
    data: dict[str, Any] = json.loads(path.read_text())
    data.setdefault("counts", {})
    data.setdefault("results", {})
    return data


def save_state(path: Path, state: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(path)


def summarise(rows: Mapping[str, Mapping[str, Any]], families: Mapping[str, str],
              all_models: bool) -> dict[str, Any]:
    """The baseline: totals, and per family (module) its model and outcome."""
    by_stage: dict[str, int] = {}
    for row in rows.values():
        if row["status"] != "pass":
            by_stage[row.get("stage", "crash")] = by_stage.get(row.get("stage", "crash"), 0) + 1
    family_rows = {module: rows[name] for module, name in families.items() if name in rows}
    passing = sorted(m for m, r in family_rows.items() if r["status"] == "pass")
    out: dict[str, Any] = {
        "summary": {
            "families": len(families),
            "families_tried": len(family_rows),
            "families_passed": len(passing),
            "models_tried": len(rows),
            "models_passed": sum(1 for r in rows.values() if r["status"] == "pass"),
            "failed_at": dict(sorted(by_stage.items())),
            "all_models": all_models,
        },
        "families": {m: {k: family_rows[m].get(k) for k in
                         ("model", "status", "stage", "error", "parameters")}
                     for m in sorted(family_rows)},
        "passing_families": passing,
    }
    if all_models:
        out["passing_models"] = sorted(n for n, r in rows.items() if r["status"] == "pass")
    return out


def write_doc(baseline: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]],
              info: Mapping[str, Any], command: str) -> str:
    s = baseline["summary"]
    lines = [
        "# timm coverage",
        "",
        "<!-- generated by tools/timm_sweep.py; do not edit by hand -->",
        "",
        "How much of [timm](https://github.com/huggingface/pytorch-image-models) (PyTorch Image",
        "Models) irbridge handles. One model per timm family (a module of `timm.models`: its",
        "model with the fewest parameters), each built as `timm:NAME` (random weights, the",
        "input size of its own pretrained config), captured with the default front-end,",
        "exported to ONNX, run in onnxruntime against the eager model",
        f"(`|ort - eager| <= {ATOL:g} * max(1, max|eager|) + {RTOL:g} * |eager|`, float32;",
        "where that fails, onnxruntime passes when it is no further from a float64 copy of",
        "the eager model than float32 eager is, times 2: float32 rounding where random",
        "weights make the activations large)",
        "and analyzed on h100-sxm. Each model runs in its own child process with a timeout and",
        "a memory cap; the reason is the first failing stage's error, in one line.",
        "",
        f"Command: `{command}`",
        "",
        *fm.machine_lines(info),
        f"- timm {info.get('timm', '?')}",
        "",
        "Results are kept in a resumable state file across runs; they come from the code at "
        + ", ".join(f"`{c}`" for c in sorted({str(r.get("commit", "?")) for r in rows.values()}))
        + ".",
        "",
        "## Totals",
        "",
        f"- Families: **{s['families_passed']} of {s['families_tried']} pass** "
        f"({pct(s['families_passed'], s['families_tried'])}; timm has {s['families']})",
        f"- Models tried: {s['models_tried']}, passed: {s['models_passed']}",
        "- Failures by stage: "
        + (", ".join(f"{k} {v}" for k, v in s["failed_at"].items()) or "none"),
        "",
        "## Families",
        "",
        "| family | model | parameters | result | stage | reason |",
        "|---|---|---:|---|---|---|",
    ]
    for module, fam in baseline["families"].items():
        params = fam.get("parameters")
        lines.append(
            f"| {module} | `{fam['model']}` | {params / 1e6:.2f} M |" if params else
            f"| {module} | `{fam['model']}` | - |")
        lines[-1] += (f" {fam['status']} | {fam.get('stage') or ''} | "
                      f"{fm.md_escape(fam.get('error') or '')} |")
    extra = sorted(set(rows) - {f["model"] for f in baseline["families"].values()})
    if extra:
        lines += ["", "## Other models", "",
                  "Models run with `--models` besides the representatives (here: the smallest "
                  "model of each name prefix within a family, where it is not the "
                  "representative, up to 60 M parameters).", "",
                  "| model | result | stage | reason |", "|---|---|---|---|"]
        for name in extra:
            r = rows[name]
            lines.append(f"| `{name}` | {r['status']} | {r.get('stage') or ''} | "
                         f"{fm.md_escape(r.get('error') or '')} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every timm model, not one per family")
    parser.add_argument("--models", nargs="+", help="only these timm models")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per model")
    parser.add_argument("--mem-gib", type=float, default=8.0, help="memory cap per model")
    parser.add_argument("--state", type=Path, default=STATE, help="resumable state file")
    parser.add_argument("--fresh", action="store_true", help="ignore the state file")
    parser.add_argument("--retry-failed", action="store_true", help="run failures again")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/irbridge-timm-sweep"))
    parser.add_argument("--no-write", action="store_true",
                        help="do not write docs/pytorch-timm.md and the baseline")
    args = parser.parse_args(argv)

    fm.preload()
    import timm

    info = fm.machine_info()
    info["timm"] = timm.__version__
    state = load_state(args.state, args.fresh)
    if not state["counts"]:
        print("counting parameters of every timm model on the meta device ...", flush=True)
        counted = fm.run_forked(count_parameters, timeout=1800, log=args.log_dir / "count.log")
        if "status" in counted and "error" in counted:
            print(f"counting failed: {counted['error']}", file=sys.stderr)
            return 1
        state["counts"] = counted
        save_state(args.state, state)
    families = representatives(state["counts"])
    if args.models:
        todo = list(args.models)
    elif args.all:
        todo = sorted(state["counts"])
    else:
        todo = list(families.values())
    results: dict[str, Any] = state["results"]
    for i, name in enumerate(todo, 1):
        old = results.get(name)
        if old is not None and not (args.retry_failed and old["status"] != "pass"):
            continue
        start = time.perf_counter()
        row = fm.run_forked(capped(lambda n=name: run_model(n), args.mem_gib),  # type: ignore[misc]
                         timeout=args.timeout, log=args.log_dir / f"{name}.log")
        if "model" not in row:  # timeout or crash: no row from the child
            row = {"model": name, "status": "fail", "stage": row["status"],
                   "error": row["error"]}
        row["seconds"] = round(time.perf_counter() - start, 1)
        row["commit"] = info["git"]
        results[name] = row
        save_state(args.state, state)
        print(f"[{i}/{len(todo)}] {name}: {row['status']}"
              + (f" at {row.get('stage')}: {row.get('error')}" if row["status"] != "pass" else "")
              + f" ({row['seconds']} s)", flush=True)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    # every model the state holds a result for (earlier runs' --models too)
    rows = {n: results[n] for n in sorted(results) if n in state["counts"]}
    baseline = summarise(rows, families, all(n in results for n in state["counts"]))
    s = baseline["summary"]
    print(f"families: {s['families_passed']} of {s['families_tried']} pass; models: "
          f"{s['models_passed']} of {s['models_tried']}")
    if args.no_write:
        return 0
    command = "uv run python tools/timm_sweep.py" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:]))
    baseline = {"timm": timm.__version__, "torch": info["torch"], "date": info["date"],
                "command": command, "tolerance": {"rtol": RTOL, "atol_per_max": ATOL},
                **baseline}
    BASELINE.write_text(json.dumps(baseline, indent=1) + "\n")
    DOC.write_text(write_doc(baseline, rows, info, command))
    print(f"wrote {DOC.relative_to(ROOT)} and {BASELINE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
