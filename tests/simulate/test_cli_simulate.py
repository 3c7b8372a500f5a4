"""`irbridge simulate`: bad folders and options are one-line errors (exit 2); SCALE-Sim
runs on an exported folder and the printed cycles are those of SCALE-Sim's own reports."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ir_models import cnn
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters import chakra, scalesim


def _error(args: list[str], match: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert re.search(match, result.stderr), result.stderr


def test_simulate_errors(tmp_path: Path) -> None:
    _error(["simulate", "astrasim", str(tmp_path / "missing")], "not a folder")
    _error(["simulate", "astrasim", str(tmp_path)], "no astrasim/run.json")
    _error(["simulate", "scalesim", str(tmp_path)], "no run.json")
    out = chakra.write(cnn(), tmp_path / "t", hardware="h100")
    _error(["simulate", "astrasim", str(out), "--mode", "fast"], "--mode 'fast'")
    _error(["simulate", "astrasim", str(out), "--backend", "ns3"], "--backend 'ns3'")
    ss = scalesim.write(cnn(), tmp_path / "ss", hardware="tpu-v4")
    (ss / "run.json").write_text("{\"clock_hz\": \"fast\"}")
    _error(["simulate", "scalesim", str(ss)], "run.json: no valid clock_hz")


def test_simulate_astrasim_checks_every_trace_before_running(tmp_path: Path) -> None:
    """A missing or damaged rank trace is one line naming the file, before ASTRA-sim
    runs (it aborted with a C++ exception about a missing attribute, or read garbage)."""
    out = chakra.write(cnn(), tmp_path / "t", hardware="h100", dp=2)
    trace = out / "cnn.1.et"
    data = trace.read_bytes()
    size, pos = 0, 0
    while True:  # the metadata message's varint length prefix
        size |= (data[pos] & 0x7F) << 7 * pos
        pos += 1
        if not data[pos - 1] & 0x80:
            break
    # its payload replaced by bytes that are no protobuf message: the framing is intact
    trace.write_bytes(data[:pos] + b"\xff" * size + data[pos + size:])
    _error(["simulate", "astrasim", str(out)], r"cnn\.1\.et: not a Chakra trace \(a message "
                                               r"does not decode\)$")
    trace.unlink()
    _error(["simulate", "astrasim", str(out), "--mode", "roofline"],
           r"cnn\.1\.et: missing; .*run\.json lists 2 ranks$")
    (out / "cnn.0.et").write_bytes(data[:-5])
    _error(["simulate", "astrasim", str(out)], r"cnn\.0\.et: not a Chakra trace \(framing\)")


def test_simulate_scalesim_prints_scalesims_cycles(tmp_path: Path) -> None:
    out = scalesim.write(cnn(), tmp_path / "ss", hardware="tpu-v4")
    readme = (out / "README.md").read_text()
    assert "irbridge simulate scalesim ." in readme
    clock = json.loads((out / "run.json").read_text())["clock_hz"]
    result = CliRunner().invoke(app, ["simulate", "scalesim", str(out), "--results",
                                      str(tmp_path / "res")])
    assert result.exit_code == 0, result.output
    # SCALE-Sim leaves its input files open: no `warning: unclosed file` lines for that
    assert result.stderr == "", result.stderr
    # SCALE-Sim's own reports, read here: column 2 is total cycles.
    cycles = []
    for kind in ("conv", "gemm"):
        [report] = (tmp_path / "res" / kind).glob("*/COMPUTE_REPORT.csv")
        with report.open() as f:
            rows = [r for r in list(csv.reader(f))[1:] if r and r[0].strip()]
        cycles += [int(float(r[2])) for r in rows]
    total = sum(cycles)
    assert total > 0
    assert f"total: {len(cycles)} layers, {total:,} cycles, {total / clock:.6g} s" in \
        result.output
    for c in cycles:
        assert f"{c:,}" in result.output


@pytest.mark.parametrize("mode", ["replay", "roofline"])
def test_simulate_astrasim_needs_the_sources(tmp_path: Path, mode: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the tarball the error names the folder and the variable to set."""
    monkeypatch.setenv("IRBRIDGE_ASTRASIM_SOURCES", str(tmp_path / "nowhere"))
    monkeypatch.setenv("IRBRIDGE_ASTRASIM_CACHE", str(tmp_path / "cache"))
    out = chakra.write(cnn(), tmp_path / "t", hardware="h100")
    _error(["simulate", "astrasim", str(out), "--mode", mode],
           r"nowhere: no astra-sim-src.tar.gz.*IRBRIDGE_ASTRASIM_SOURCES")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("kind", ["scalesim", "chakra"])
def test_a_fifo_in_an_exported_folder_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    """The simulators open the folder's files by name: a FIFO in place of a topology file
    or a trace (or anywhere below the folder) is one line before anything runs. In a child
    process with a time limit: without the check, SCALE-Sim's read blocks forever."""
    if kind == "scalesim":
        out = scalesim.write(cnn(), tmp_path / "f", hardware="tpu-v4")
        victim, command = next(out.glob("*_conv.csv")), "scalesim"
    else:
        out = chakra.write(cnn(), tmp_path / "f", hardware="h100")
        victim, command = out / "cnn.0.et", "astrasim"
    victim.unlink()
    os.mkfifo(victim)
    run = subprocess.run([sys.executable, "-c", "from irbridge.cli.main import app; app()",
                          "simulate", command, str(out)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2 and run.stderr == (
        f"error: {victim}: not a regular file (a FIFO); refusing to read the {kind} folder\n")


def test_long_model_and_module_names_give_legal_file_names(tmp_path: Path) -> None:
    """File names inside exported folders come from the model's name and its modules'
    paths, which a file may make any length: they are shortened with a hash (a 300-char
    ONNX graph name made `export --to chakra` and `--to scalesim` fail with ENAMETOOLONG)."""
    from irbridge.converters import timeloop
    from irbridge.converters._layers import safe_name

    model = cnn()
    model.name = "G" * 300
    for node in model.graphs[0].nodes:
        node.provenance.module_path = "m" * 400 + node.op
    folders = [chakra.write(model, tmp_path / "ch", hardware="h100"),
               scalesim.write(model, tmp_path / "ss", hardware="tpu-v4"),
               timeloop.write(model, tmp_path / "tl")]
    for folder in folders:
        names = [p.name for p in folder.rglob("*")]
        assert names and max(len(os.fsencode(n)) for n in names) <= 120, names
    run = CliRunner().invoke(app, ["simulate", "scalesim", str(folders[1])])
    assert run.exit_code == 0, run.output
    # two long names that share their first 96 characters stay apart; short ones as they were
    assert safe_name("x" * 200 + "a") != safe_name("x" * 200 + "b")
    assert safe_name("conv 1,a") == "conv_1_a" and len(safe_name("é" * 500)) <= 96
