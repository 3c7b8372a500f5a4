"""The C++ reader of tools/cpp_reader/, built here with Debian's protoc and libprotobuf from
schemas/, reads .irb files written by irbridge: node count, op names, output shapes
(symbolic dims included) and per-node costs equal the Python objects and the analysis."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from browser import require_tool
from ir_models import cnn

from irbridge import serde
from irbridge.analysis import analyze, annotate, resolve_target
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, SymDim, Tensor, TensorType

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "cpp_reader" / "irb_reader.cpp"
PROTO = "irbridge/v1/irbridge.proto"
F32 = DType.FLOAT32


def _version(tool: str) -> str:
    return subprocess.run([tool, "--version"], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def reader(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled reader; cached by a hash of its inputs (compiling takes ~15 s)."""
    protoc = require_tool("protoc", "protobuf-compiler")
    gxx = require_tool("g++", "g++")
    if not Path("/usr/include/google/protobuf/message.h").exists():
        require_tool("libprotobuf-headers-missing", "libprotobuf-dev")
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), (ROOT / "schemas" / PROTO).read_bytes(),
                 _version(protoc).encode(), _version(gxx).encode()):
        key.update(hashlib.sha256(part).digest())
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("irb_reader") if cache is not None else tmp_path_factory.mktemp("bin")
    exe = Path(folder) / f"irb_reader-{key.hexdigest()[:16]}"
    if exe.exists():
        return exe
    build = tmp_path_factory.mktemp("irb_reader_build")
    subprocess.run([protoc, f"-I{ROOT / 'schemas'}", f"--cpp_out={build}", PROTO], check=True)
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{build}", str(SOURCE),
                    str(build / "irbridge" / "v1" / "irbridge.pb.cc"), "-lprotobuf",
                    "-pthread", "-o", str(build / "irb_reader")], check=True)
    shutil.copy2(build / "irb_reader", build / "irb_reader.tmp")
    os.replace(build / "irb_reader.tmp", exe)
    return exe


def run_reader(exe: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), str(path)], capture_output=True, text=True, check=False)


# -- what Python says, from the IR objects and the analysis --------------------------------------
def type_text(value_type: TensorType | None) -> str:
    if value_type is None:
        return "-"
    if value_type.shape is None:
        return f"{value_type.dtype.name}*"
    dims = ["?" if d is None else d.name if isinstance(d, SymDim) else str(d)
            for d in value_type.shape]
    return f"{value_type.dtype.name}[{','.join(dims)}]"


def annotated(model: Model) -> dict[int, tuple[int, int, int]]:
    """Annotate `model` with the analysis on h100; node id -> (MACs, FLOPs, bytes)."""
    run = analyze(model, [resolve_target("h100")]).runs[0]
    annotate(model, run)
    return {nc.node.id: (nc.own_cost.macs, nc.own_cost.flops,
                         nc.own_cost.bytes_read + nc.own_cost.bytes_written)
            for nc in run.costs.by_node.values()}


def expected_lines(model: Model, costs: dict[int, tuple[int, int, int]]) -> list[str]:
    lines = []
    for index, graph in enumerate(model.graphs):
        for node in graph.nodes:
            outs = ";".join(type_text(v.type) for v in node.outputs)
            macs, flops, moved = costs[node.id]
            lines.append(f"node\t{index}\t{node.id}\t{node.qualified_op}\t{outs}\t{macs}\t"
                         f"{flops}\t{moved}")
    return lines


def check(exe: Path, model: Model, path: Path, costs: dict[int, tuple[int, int, int]],
          *, external: int, shape_only: int) -> list[str]:
    result = run_reader(exe, path)
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    count = sum(len(g.nodes) for g in model.graphs)
    assert header.split("\t") == [
        "model", model.name, "ir_version", "1", "graphs", str(len(model.graphs)), "nodes",
        str(count), "tensors", str(len(model.tensors)), "external", str(external),
        "shape_only", str(shape_only)]
    assert lines == expected_lines(model, costs)
    return lines


# -- models ---------------------------------------------------------------------------------------
def dynamic_mlp() -> Model:
    """A symbolic batch and a 1 MiB weight with data (goes to the sidecar)."""
    model = Model(name="dyn")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (SymDim("batch", 1, 64), 512)))
    w = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
    y = b.op("linear", [x, b.parameter(Tensor("w", F32, (512, 512), w))])
    y = b.op("relu", [y])
    graph.set_outputs([b.op("add", [y, x])])
    return model


# -- tests ---------------------------------------------------------------------------------------
def test_reads_an_annotated_shape_only_file(reader: Path, tmp_path: Path) -> None:
    model = cnn()
    costs = annotated(model)
    path = serde.save(model, tmp_path / "cnn.irb", weights="none")
    lines = check(reader, model, path, costs, external=0, shape_only=3)
    # Spot values from the op definitions (docs/ops.md), not from the code under test.
    conv = lines[0].split("\t")
    assert conv[3:6] == ["conv", "FLOAT32[2,8,16,16]", str(2 * 8 * 16 * 16 * 27)]
    assert lines[3].split("\t")[3:5] == ["flatten", "FLOAT32[2,2048]"]


def test_symbolic_dims_and_sidecar(reader: Path, tmp_path: Path) -> None:
    model = dynamic_mlp()
    costs = annotated(model)
    path = serde.save(model, tmp_path / "dyn.irb")
    assert serde.sidecar_path(path).exists()
    lines = check(reader, model, path, costs, external=1, shape_only=0)
    assert lines[0].split("\t")[4] == "FLOAT32[batch,512]"
    # A truncated sidecar is an error naming the tensor.
    side = serde.sidecar_path(path)
    side.write_bytes(side.read_bytes()[:1000])
    result = run_reader(reader, path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and f"tensor w: sidecar {side.name} is truncated" \
        in result.stderr


def test_file_without_costs_prints_dashes(reader: Path, tmp_path: Path) -> None:
    model = cnn()
    path = serde.save(model, tmp_path / "plain.irb", weights="none")
    result = run_reader(reader, path)
    assert result.returncode == 0, result.stderr
    assert all(line.endswith("\t-\t-\t-") for line in result.stdout.splitlines()[1:])


def test_rejects_bad_magic_and_newer_versions(reader: Path, tmp_path: Path) -> None:
    path = serde.save(cnn(), tmp_path / "cnn.irb", weights="none")
    data = path.read_bytes()
    bad = tmp_path / "bad.irb"
    bad.write_bytes(b"PK\x03\x04" + data[4:])
    result = run_reader(reader, bad)
    assert result.returncode == 1 and "bad magic" in result.stderr
    # The Model starts with field 1 (ir_version) = 1: bytes 08 01 after the magic.
    assert data[8:10] == b"\x08\x01"
    newer = tmp_path / "newer.irb"
    newer.write_bytes(data[:9] + b"\x02" + data[10:])
    result = run_reader(reader, newer)
    assert result.returncode == 1 and "IR version 2 is newer" in result.stderr
    corrupt = tmp_path / "corrupt.irb"
    corrupt.write_bytes(data[:8] + b"\xff\xff\xff")
    assert run_reader(reader, corrupt).returncode == 1


@pytest.mark.slow
def test_reads_resnet18(reader: Path, tmp_path: Path) -> None:
    from irbridge.formats import load_model

    model = load_model("resnet18")
    costs = annotated(model)
    path = serde.save(model, tmp_path / "resnet18.irb", weights="none")
    lines = check(reader, model, path, costs, external=0, shape_only=len(model.tensors))
    # docs/analysis.md: resnet18 at 224 is 1,814,073,344 MACs.
    assert sum(int(line.split("\t")[5]) for line in lines) == 1_814_073_344
