"""Sweep engines: a grid of about 1,000 cells run by `irbridge sweep`'s local engine
(worker processes) and by a local Ray cluster, side by side in one run, with wall time,
cells per second and whether the two result sets are identical. Writes the `bench_sweep`
section of docs/benchmarks.md.

    uv run python tools/bench_sweep.py [--jobs 2] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

GRID = dict(models="llama-tiny,mistral-tiny,qwen2-tiny,gemma-tiny,mixtral-tiny",
            hardware="all", batch="1,8,64", seq_len="128", phase="prefill,decode",
            dtype="bf16,fp8", tp="1,2")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-write", dest="write", action="store_false")
    args = parser.parse_args(argv)
    import pyarrow.parquet as pq

    from irbridge import sweep as sw

    grid = sw.parse_grid(**GRID)
    times: dict[str, float] = {}
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("local", "ray"):
            out = Path(tmp) / f"{engine}.parquet"
            start = time.perf_counter()
            rows = sw.run(grid, out, engine=engine, jobs=args.jobs)
            times[engine] = time.perf_counter() - start
            tables[engine] = pq.read_table(out)
            ok = sum(r["status"] == "ok" for r in rows)
            print(f"{engine}: {len(rows)} cells ({ok} analysed) in {times[engine]:.1f} s",
                  flush=True)
    same = tables["local"].equals(tables["ray"])
    command = "uv run python tools/bench_sweep.py" + "".join(
        f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    cells, groups = grid.size, len(grid.groups())
    body = "\n".join([
        "## Sweeps: local engine and Ray",
        "",
        f"`{command}` on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.jobs} workers per engine: a grid of {cells:,} cells ({groups} captures; "
        f"models {GRID['models']}; phases {GRID['phase']}; batch {GRID['batch']}; "
        f"seq-len {GRID['seq_len']}; every catalog target; dtypes {GRID['dtype']}; TP "
        f"{GRID['tp']}). Cells a target cannot take (no fp8 peak, no interconnect for TP) "
        "are rows with that status, as in any sweep.",
        "",
        "| engine | wall time | cells/s | ratio to local |",
        "|---|---|---|---|",
        *(f"| {e} | {times[e]:.1f} s | {cells / times[e]:.1f} | "
          f"{times[e] / times['local']:.2f}x |" for e in ("local", "ray")),
        "",
        f"Result sets identical (pyarrow `Table.equals`): {'yes' if same else 'NO'}. "
        "Ray's figure includes starting the local cluster.",
    ])
    print(body)
    if args.write:
        from bench_pytorch import write_section

        write_section(args.md, "bench_sweep", body)
        print(f"wrote the bench_sweep section of {args.md}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
