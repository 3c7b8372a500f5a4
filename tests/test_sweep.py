"""`irbridge sweep`: the same 24-cell grid gives the same result set from the local engine
(worker processes) and from a real local Ray cluster; a second run resumes without redoing
finished cells; every figure of a cell is what `analyze` (or the serving analysis) gives
for that cell on its own."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from irbridge import sweep as sw
from irbridge.analysis.hardware import resolve_targets
from irbridge.analysis.serving import serving
from irbridge.cli.main import app
from irbridge.converters.pytorch.phases import capture_phase
from irbridge.errors import IrbridgeError

GRID = dict(models="llama-tiny", hardware="h100,a100,l4", batch="1,2", seq_len="16",
            phase="decode", dtype="bf16,fp8", tp="1,2")


def _grid(**changes: str) -> sw.Grid:
    return sw.parse_grid(**{**GRID, **changes})


def test_local_and_ray_agree_and_resume(tmp_path: Path) -> None:
    grid = _grid()
    assert grid.size == 24 and len(grid.groups()) == 2
    local = tmp_path / "local.parquet"
    seen: list[tuple[int, int]] = []
    # First only batch 1 (12 cells), then the whole grid resumes from it.
    sw.run(_grid(batch="1"), local, engine="local", jobs=1)  # in this process
    rows = sw.run(grid, local, engine="local", jobs=2, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (12, 24) and seen[-1] == (24, 24)
    assert len(rows) == 24
    on_ray = tmp_path / "ray.parquet"
    sw.run(grid, on_ray, engine="ray", jobs=2)
    assert pq.read_table(local).equals(pq.read_table(on_ray))
    # The local cluster ran this interpreter: under `uv run` (the README's commands) Ray
    # would otherwise ship the working folder to every worker, 9.1 GB of this project and
    # its .venv copied into the session's runtime_resources.
    session = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "session_latest"
    shipped = sum(f.stat().st_size for f in (session / "runtime_resources").rglob("*")
                  if f.is_file())
    assert shipped < 1 << 20, f"{shipped:,} bytes of runtime resources in {session}"
    # a100 has no fp8 peak, l4 no interconnect (TP 2): those cells say so, the rest ran.
    status = {(r["target"], r["dtype"], r["tp"]): r["status"] for r in rows if r["batch"] == 2}
    assert status[("a100-80gb", "fp8", 1)] == "target a100-80gb has no fp8 peak"
    assert status[("l4", "bf16", 2)].startswith("--tp 2: target l4 has no interconnect_bandwidth")
    assert status[("h100-sxm", "fp8", 2)] == status[("l4", "fp8", 1)] == "ok"
    # A cell's figures are the serving analysis of that cell on its own.
    model = capture_phase("llama-tiny", "decode", batch=2, seq_len=16, kv_len=16)
    h100 = resolve_targets("h100")[0]
    alone = serving(model, h100, dtype="bf16", tp=2)
    (row,) = [r for r in rows if (r["batch"], r["target"], r["dtype"], r["tp"])
              == (2, "h100-sxm", "bf16", 2)]
    assert row["latency_s"] == pytest.approx(alone.step_seconds, rel=1e-12)
    assert row["memory_bytes"] == alone.memory_bytes
    assert row["tokens_per_s"] == pytest.approx(alone.tokens_per_second, rel=1e-12)
    # Reports beside the Parquet file.
    written = sw.write_reports(local, rows)
    assert {p.name for p in written} == {"local.csv", "local.json", "local.md",
                                         "local.latency.png", "local.roofline.png"}
    assert "fastest fitting cell" in (tmp_path / "local.md").read_text()


def test_bad_input_is_refused_up_front(tmp_path: Path) -> None:
    for changes, message in (({"models": "gpt2-tinyy"}, "unknown model 'gpt2-tinyy'"),
                             ({"phase": "train"}, "--phase 'train'"),
                             ({"batch": "0"}, "--batch"),
                             ({"dtype": "fp7"}, "--dtype 'fp7'"),
                             ({"models": str(tmp_path / "no.onnx")}, "no such file")):
        with pytest.raises(IrbridgeError, match=message):
            _grid(**changes)
    # every name family the zoo builds passes the check (diffusers: names were refused as
    # unknown, while the refusal's own hint listed them)
    for name in ("llama-tiny", "hf:gpt2", "timm:test_resnet", "diffusers:AutoencoderKL"):
        assert _grid(models=name).models == (name,)
    runner = CliRunner()
    not_parquet = tmp_path / "r.parquet"
    not_parquet.write_text("not parquet")
    for args, message in ((["-o", str(tmp_path / "r.csv")], "is a .parquet file"),
                          (["-o", str(not_parquet)], "not a sweep result set"),
                          (["-o", str(tmp_path / "x.parquet"), "--engine", "spark"],
                           "--engine 'spark'"),
                          (["-o", str(tmp_path / "x.parquet"), "--jobs", "0"],
                           "--jobs 0: must be at least 1"),
                          (["-o", str(tmp_path / "x.parquet"), "--address", "h:1"],
                           "--address applies to --engine ray only")):
        result = runner.invoke(app, ["sweep", "--models", "llama-tiny", *args])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert "sweep:" not in result.output  # refused before the grid is announced
    assert not_parquet.read_text() == "not parquet"  # nothing overwritten


def test_ray_unreachable_address_fails_fast_in_one_line(tmp_path: Path) -> None:
    """A HOST:PORT nothing listens on: Ray retried it for minutes (over 200 s), printing a
    C++ log line per retry; now refused before any capture, in bounded time."""
    import socket
    import time

    from hostile_cli import run_cli

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    out = run_cli("sweep", "--models", "llama-tiny", "-o", tmp_path / "r.parquet", "--engine",
                  "ray", "--address", f"127.0.0.1:{port}", cwd=tmp_path, timeout=120,
                  memory_cap=1 << 40)
    assert time.monotonic() - start < 60
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]  # progress: \r
    assert lines[-1] == (f"error: --engine ray: cannot reach the cluster at 127.0.0.1:{port} "
                         "(ConnectionRefusedError: [Errno 111] Connection refused)")
    assert lines[0].startswith("sweep: 1 cell in") and len(lines) <= 3, out.stderr
    assert not list(tmp_path.glob("r.*"))  # nothing written
    with pytest.raises(IrbridgeError, match=r"cannot reach the cluster at nohost\.invalid:6379"):
        sw.run(_grid(), tmp_path / "x.parquet", engine="ray", address="nohost.invalid:6379")


def _children(pid: int) -> set[int]:
    """Processes whose parent is `pid` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_kill_9_mid_run_leaves_a_result_set_that_resumes(tmp_path: Path) -> None:
    """kill -9 of a sweep after its first group: the result set holds the finished groups
    (written atomically), its worker processes end with it (they went on capturing as
    orphans), and a resume has only the killed group left to run (resuming itself:
    test_local_and_ray_agree_and_resume)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "r.parquet"
    # llama-tiny lands first; llama-3-70b (80 layers) is still being captured when killed
    args = dict(models="llama-tiny,llama-3-70b", hardware="h100", batch="1", seq_len="16",
                phase="decode", dtype="bf16", tp="1")
    proc = subprocess.Popen([sys.executable, "-c", "from irbridge.cli.main import app; app()",
                             "sweep", "--jobs", "2", "-o", str(out),
                             *(x for k, v in args.items()
                               for x in (f"--{k.replace('_', '-')}", v))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        workers = _children(proc.pid)
        assert workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    deadline = time.monotonic() + 5  # the 70b capture alone takes longer than this
    while any(Path(f"/proc/{w}").exists() and "Z" not in
              Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0]
              for w in workers if Path(f"/proc/{w}/stat").exists()) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert time.monotonic() < deadline, "workers outlived the killed sweep"
    first = pq.read_table(out).to_pylist()
    assert [(r["model"], r["status"]) for r in first] == [("llama-tiny", "ok")]
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]  # no temporary left
    # what a resume starts from: the finished cell done, the killed one still to run
    grid = sw.parse_grid(**args)
    done = {sw.row_key(r) for r in first}
    assert [g.model for g in grid.groups(done=done)] == ["llama-3-70b"]


def test_a_result_set_keeps_earlier_grids_and_says_so(tmp_path: Path) -> None:
    """Writing a second grid to the same result set keeps the first grid's cells; the
    summary line counts this grid's cells and names the kept ones apart (it said "2 of 2
    cells analysed" for a one-cell grid)."""
    out = tmp_path / "s.parquet"
    base = ["sweep", "--models", "llama-tiny", "--hardware", "h100", "--jobs", "1",
            "-o", str(out)]
    first = CliRunner().invoke(app, [*base, "--seq-len", "8"])
    assert first.exit_code == 0, first.output
    assert f"1 of 1 cells analysed; wrote {out}, " in first.stdout
    second = CliRunner().invoke(app, [*base, "--seq-len", "16"])
    assert second.exit_code == 0, second.output
    assert f"1 of 1 cells analysed; wrote {out}; 1 cell of earlier grids kept in it, " \
        in second.stdout
    assert sorted(r["seq_len"] for r in sw.read_results(out)) == [8, 16]
