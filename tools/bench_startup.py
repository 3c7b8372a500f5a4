"""Start-up CPU time: `irbridge info resnet18.irb` (and the other read-only commands)
against `python -c "import onnx"`, measured side by side in paired, interleaved runs.

    uv run python tools/bench_startup.py              # 25 rounds, writes docs/benchmarks.md
    uv run python tools/bench_startup.py --rounds 5 --no-write

The tool builds resnet18 (torchvision, random weights) once, captures it with
`capture(..., frontend="fx", weights=True)` and saves `resnet18.irb` (+ sidecar) to a
temporary folder: untimed. Then, in each round, it runs every command once as its own
process, in an order that rotates from round to round, and takes the child's CPU time
(user + system, from `os.wait4`): CPU rather than wall time, because other workers share
the machine, and paired rounds so that a busy spell hits both sides. The figure is the
median over rounds of the per-round ratio command / `import onnx`, with the spread (the
25th and 75th percentiles and the extremes) in the table. `irbridge` is the console
script next to this Python (`irbridge info FILE`, as a user or a simulator script runs
it), with its output discarded.

Target (issue 15): `irbridge info resnet18.irb` within 1.5x the CPU time of `python -c
"import onnx"`. Writes its own section of docs/benchmarks.md (markers `bench_startup`).
Linux only (`os.wait4`, /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pytorch import write_section
from frontend_matrix import ROOT, machine_info, machine_lines

SECTION = "bench_startup"
BASELINE = "python -c 'import onnx'"
TARGET = "irbridge info resnet18.irb"
HEAVY = ("torch", "scipy", "onnx", "onnxruntime", "transformers", "jax", "torch_mlir",
         "pydantic", "rich", "numpy")


def _irbridge_cmd() -> list[str]:
    script = Path(sys.executable).parent / "irbridge"
    return [str(script)] if script.exists() else [sys.executable, "-m", "irbridge.cli.main"]


def commands(irb: Path) -> dict[str, list[str]]:
    irbridge = _irbridge_cmd()
    return {
        BASELINE: [sys.executable, "-c", "import onnx"],
        "python -c 'pass'": [sys.executable, "-c", "pass"],
        TARGET: [*irbridge, "info", str(irb)],
        "irbridge validate resnet18.irb": [*irbridge, "validate", str(irb)],
        "irbridge show resnet18.irb": [*irbridge, "show", str(irb)],
        "irbridge analyze resnet18.irb": [*irbridge, "analyze", str(irb)],
    }


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The children's environment: bytecode caching on, as in any Python installation after its
first run, where PYTHONDONTWRITEBYTECODE (set on this project's CI machines) would make
every run compile every module it imports from source, on both sides."""


def cpu_seconds(argv: Sequence[str]) -> tuple[float, float, int]:
    """(CPU seconds user+system, wall seconds, exit status) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=CHILD_ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (usage.ru_utime + usage.ru_stime, time.perf_counter() - start, proc.returncode)


def imported_modules(argv: Sequence[str]) -> list[str]:
    """Which of HEAVY the command imports (`-X importtime`, a separate untimed run)."""
    if Path(argv[0]).name == "irbridge":
        argv = [sys.executable, "-m", "irbridge.cli.main", *argv[1:]]
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True,
                          text=True, check=False, env=CHILD_ENV)
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return [h for h in HEAVY if h in names]


def build_irb(folder: Path) -> Path:
    import torch
    import torchvision

    from irbridge import serde
    from irbridge.converters.pytorch import capture

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    result = capture(model, (torch.randn(1, 3, 224, 224),), frontend="fx", weights=True)
    path = folder / "resnet18.irb"
    serde.save(result.model, path)
    return path


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(runs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    rounds = sorted({r["round"] for r in runs})
    base = {r["round"]: r["cpu"] for r in runs if r["command"] == BASELINE}
    for name in names:
        mine = {r["round"]: r for r in runs if r["command"] == name}
        cpu = [mine[k]["cpu"] for k in rounds if k in mine]
        ratios = [mine[k]["cpu"] / base[k] for k in rounds if k in mine and k in base]
        table[name] = {
            "cpu": cpu, "median": statistics.median(cpu),
            "wall_median": statistics.median(mine[k]["wall"] for k in rounds if k in mine),
            "ratio_median": statistics.median(ratios) if ratios else None,
            "ratio_p25": _pct(ratios, 0.25) if ratios else None,
            "ratio_p75": _pct(ratios, 0.75) if ratios else None,
            "ratio_min": min(ratios) if ratios else None,
            "ratio_max": max(ratios) if ratios else None,
            "failed": sum(1 for k in rounds if k in mine and mine[k]["rc"] != 0),
        }
    return table


def render(table: Mapping[str, Any], imports: Mapping[str, list[str]], info: Mapping[str, Any],
           rounds: int, command: str, total_s: float) -> str:
    target = table[TARGET]
    met = target["ratio_median"] is not None and target["ratio_median"] <= 1.5
    out = [
        "## Start-up: read-only commands against `import onnx`",
        "",
        "Generated by `tools/bench_startup.py` (rerun it rather than editing the table).",
        "",
        f"Command: `{command}` (total {total_s / 60:.1f} min)",
        "",
        "Machine:",
        "",
        *machine_lines(info),
        "",
        "### What is measured",
        "",
        "- Each command is its own process; the figure is its **CPU time** (user + system, "
        "`os.wait4`), which other workers on a shared machine disturb less than wall time.",
        f"- **Paired, interleaved rounds**: each of the {rounds} rounds runs every command "
        "once, in an order that rotates from round to round; **ratio** is, per round, the "
        f"command's CPU time over `{BASELINE}`'s in the same round, and the table gives "
        "the median ratio with its spread (25th-75th percentile, and the extremes).",
        "- `resnet18.irb`: torchvision resnet18 (random weights) captured with the fx "
        "front-end and saved with its weights sidecar, before timing. `irbridge` is the "
        "installed console script; output goes to /dev/null.",
        "- **Bytecode caches on**: the children run without `PYTHONDONTWRITEBYTECODE`, "
        "so the untimed first run of each command leaves the `.pyc` files that any Python "
        "installation has after its first run (installed packages come compiled: "
        "`compile-bytecode` in pyproject.toml); with it, every run compiles every module "
        "it imports from source, on both sides.",
        "- **imports** lists which of " + ", ".join(f"`{h}`" for h in HEAVY)
        + " the command imports (a separate `-X importtime` run).",
        "",
        f"**Target** (`{TARGET}` within 1.5x the CPU time of `{BASELINE}`): "
        + ("met" if met else "not met") + f"; median ratio {target['ratio_median']:.2f}x "
        f"(25th-75th percentile {target['ratio_p25']:.2f}x-{target['ratio_p75']:.2f}x).",
        "",
        "| command | CPU s (median) | wall s (median) | ratio to import onnx (median) "
        "| 25th-75th pct | min-max | imports | failed runs |",
        "|---|---:|---:|---:|---|---|---|---:|",
    ]
    for name, cell in table.items():
        ratio = "-" if cell["ratio_median"] is None else f"{cell['ratio_median']:.2f}x"
        spread = ("-" if cell["ratio_p25"] is None else
                  f"{cell['ratio_p25']:.2f}x-{cell['ratio_p75']:.2f}x")
        extremes = ("-" if cell["ratio_min"] is None else
                    f"{cell['ratio_min']:.2f}x-{cell['ratio_max']:.2f}x")
        out.append(f"| `{name}` | {cell['median']:.3f} | {cell['wall_median']:.3f} | "
                   f"{ratio} | {spread} | {extremes} | "
                   f"{', '.join(imports.get(name, [])) or '-'} | {cell['failed']} |")
    out += ["", "Raw rows: `build/bench_startup.json` of the run (not kept in the repository)."]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench_startup.json")
    parser.add_argument("--no-write", dest="write", action="store_false",
                        help="print only; do not write the markdown")
    args = parser.parse_args(argv)
    command = "uv run python tools/bench_startup.py" + "".join(
        f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    began = time.perf_counter()
    info = machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        irb = build_irb(Path(tmp))
        cmds = commands(irb)
        names = list(cmds)
        imports = {name: imported_modules(cmds[name]) for name in names}
        for name in names:  # one untimed run each: page cache and .pyc files warm
            cpu_seconds(cmds[name])
        runs: list[dict[str, Any]] = []
        for rnd in range(args.rounds):
            k = rnd % len(names)
            for name in names[k:] + names[:k]:
                cpu, wall, rc = cpu_seconds(cmds[name])
                runs.append({"round": rnd, "command": name, "cpu": round(cpu, 4),
                             "wall": round(wall, 4), "rc": rc})
            print(f"round {rnd + 1}/{args.rounds}: " + ", ".join(
                f"{r['command'].split(' resnet18')[0]} {r['cpu']:.2f}" for r in runs
                if r["round"] == rnd), flush=True)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    total = time.perf_counter() - began
    table = summarize(runs, names)
    for name, cell in table.items():
        print(f"{name:34} CPU {cell['median']:.3f} s  ratio {cell['ratio_median']:.2f}x "
              f"[{cell['ratio_p25']:.2f}-{cell['ratio_p75']:.2f}]  "
              f"imports {','.join(imports[name]) or '-'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "command": command, "runs": runs,
                                     "imports": imports, "summary": table,
                                     "total_seconds": round(total, 1)}, indent=1) + "\n")
    if args.write:
        write_section(args.md, SECTION, render(table, imports, info, args.rounds, command,
                                               total))
        print(f"wrote the {SECTION} section of {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
