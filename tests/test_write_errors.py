"""Outputs that must not be written (issue 12 items 4 and 13): special files, folders,
read-only folders, a full disk, a file size limit. Each is one line on stderr, exit 2,
nothing left behind, whatever the writer: convert (serde), export --to irb / onnx /
stablehlo, and atomic.py's writers."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from irbridge import serde
from irbridge.atomic import atomic_dir, atomic_file
from irbridge.errors import IrbridgeError

IRBRIDGE = str(Path(sys.executable).parent / "irbridge")


@pytest.fixture
def onnx_model(tmp_path: Path) -> Path:
    """A MatMul with a random 64x64 weight (16 KiB, no splat): hits small size limits."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [w])
    path = tmp_path / "src" / "m.onnx"
    path.parent.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def writers(src: Path, out: Path) -> dict[str, list[str]]:
    return {"convert": ["convert", str(src), "-o", str(out / "m.irb")],
            "export-irb": ["export", str(src), "--to", "irb", "-o", str(out / "m.irbt")],
            "export-onnx": ["export", str(src), "--to", "onnx", "-o", str(out / "m.onnx")],
            "export-stablehlo": ["export", str(src), "--to", "stablehlo",
                                 "-o", str(out / "m.mlir")]}


def run(args: list[str], fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return subprocess.run([IRBRIDGE, *args], capture_output=True, text=True, timeout=300,
                          preexec_fn=limit)


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


SPECIAL = ["fifo", "socket", "char-device-link", "folder"]
# Each case starts the CLI (seconds): the default suite runs convert; the rest are slow.
WRITERS = ["convert", *(pytest.param(w, marks=pytest.mark.slow)
                        for w in ("export-irb", "export-onnx", "export-stablehlo"))]


def make_special(kind: str, target: Path) -> Iterator[None] | None:
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    elif kind == "char-device-link":
        target.symlink_to("/dev/null")
    else:
        target.mkdir()
    return None


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("writer", WRITERS)
def test_special_outputs_are_refused(onnx_model: Path, tmp_path: Path, kind: str,
                                     writer: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    args = writers(onnx_model, out)[writer]
    target = Path(args[-1])
    make_special(kind, target)
    before = sorted(p.name for p in out.iterdir())
    result = run(args)
    one_line_error(result, str(target))
    assert ("is a folder" if kind == "folder" else "not a regular file") in result.stderr
    assert sorted(p.name for p in out.iterdir()) == before
    assert os.path.exists("/dev/null") and not Path("/dev/null").is_file()


def test_atomic_writers_refuse_special_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(IrbridgeError, match="FIFO"), atomic_file(tmp_path / "pipe"):
        pytest.fail("the block must not run")
    with pytest.raises(IrbridgeError, match="not a regular file"), \
            atomic_dir(tmp_path / "pipe"):
        pytest.fail("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.parametrize("writer", WRITERS)
def test_file_size_limit_is_one_line_and_leaves_nothing(onnx_model: Path, tmp_path: Path,
                                                        writer: str) -> None:
    """RLIMIT_FSIZE (ulimit -f) of 4 KiB: the 16 KiB weight cannot be written (EFBIG)."""
    out = tmp_path / "out"
    out.mkdir()
    result = run(writers(onnx_model, out)[writer], fsize=4096)
    one_line_error(result, str(out / "m."))
    assert list(out.iterdir()) == []


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs root; skipped elsewhere unless CI is set)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs: {done.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("writer", WRITERS)
def test_full_disk_is_one_line_and_leaves_nothing(onnx_model: Path, small_fs: Path,
                                                  writer: str) -> None:
    (small_fs / "filler").write_bytes(b"\0" * 56 * 1024)  # leave < 16 KiB free
    result = run(writers(onnx_model, small_fs)[writer])
    one_line_error(result, str(small_fs / "m."))
    assert sorted(p.name for p in small_fs.iterdir()) == ["filler"]


@pytest.mark.parametrize("writer", WRITERS)
def test_read_only_folder_is_one_line(onnx_model: Path, small_fs: Path, writer: str) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    result = run(writers(onnx_model, small_fs)[writer])
    one_line_error(result, str(small_fs / "m."))
    assert list(small_fs.iterdir()) == []


def test_serde_save_full_disk_keeps_the_old_model(small_fs: Path) -> None:
    from test_serde import small_model
    path = serde.save(small_model(), small_fs / "m.irb", weights="external")
    before = path.read_bytes()
    big = small_model()
    from irbridge.ir import Tensor
    big.graph.add_parameter(big.add_tensor(Tensor.from_array(
        "big", np.ones((128, 128), np.float32))))  # 64 KiB: more than is free
    with pytest.raises(IrbridgeError, match=r"cannot write \(No space left on device\)"):
        serde.save(big, path, weights="external")
    assert path.read_bytes() == before
    assert serde.load(path).name == "small"


@pytest.mark.parametrize("args", [
    ["convert", "{src}", "-o", "{out}/"],
    ["convert", "{src}", "-o", "{out}.irb/"],
    ["convert", "{src}", "--to", "onnx", "-o", "{out}/"],
    ["export", "{src}", "--to", "onnx", "-o", "{out}/"],
    ["export", "{src}", "--to", "stablehlo", "-o", "{out}.mlir/"],
    ["export", "{src}", "--to", "html", "-o", "{out}/"],
    ["analyze", "{src}", "-o", "{out}/"],
])
def test_a_file_output_spelled_as_a_folder_is_refused(onnx_model: Path, tmp_path: Path,
                                                      args: list[str]) -> None:
    """`-o out/` names a folder: a writer of one file must not write a file named `out`
    (pathlib drops the separator)."""
    out = tmp_path / "out"
    result = run([a.format(src=onnx_model, out=out) for a in args])
    one_line_error(result, "ends with '/', so it names a folder")
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parametrize("fmt", ["chakra", "scalesim", "timeloop"])
def test_folder_outputs_may_end_with_a_separator(onnx_model: Path, tmp_path: Path,
                                                 fmt: str) -> None:
    result = run(["export", str(onnx_model), "--to", fmt, "-o", f"{tmp_path / 'out'}/"])
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").is_dir() and any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("fmt,suffix", [
    ("irb", ".irb"), ("onnx", ".onnx"), ("stablehlo", ".mlir"), ("stablehlo", ".mlirbc"),
    ("html", ".html"), ("dot", ".dot"), ("model-explorer", ".json")])
def test_one_file_outputs_need_their_folder(onnx_model: Path, tmp_path: Path, fmt: str,
                                            suffix: str) -> None:
    """Every one-file writer refuses `-o missing/deeper/m.x` the same way (the StableHLO
    exporter created the folders), and creates no folder."""
    target = tmp_path / "missing" / "deeper" / f"m{suffix}"
    one_line_error(run(["export", str(onnx_model), "--to", fmt, "-o", str(target)]),
                   str(target), "does not exist")
    assert not (tmp_path / "missing").exists()


def test_long_output_names_write_or_fail_in_one_line(onnx_model: Path, tmp_path: Path) -> None:
    """A legal name (at most 255 bytes) must never fail on irbridge's own temporaries; an
    output whose companion file (the .irb sidecar, ONNX external data) would get an illegal
    name, or whose own name is illegal, is one line before anything is left behind."""
    from irbridge.atomic import remove_stale, temp_prefix
    from irbridge.converters.onnx import export_onnx, import_onnx

    model = import_onnx(onnx_model)  # its 16 KiB weight goes to the sidecar
    fine = tmp_path / ("a" * 225 + ".irb")  # its temporaries would be ~265 bytes in full
    serde.save(model, fine, weights="external")  # the sidecar: 225 + 4 + 22 = 251 bytes
    sidecars = list(tmp_path.glob("a*.irb.*.data"))
    assert len(sidecars) == 1 and len(os.fsencode(sidecars[0].name)) == 251
    back = serde.load(fine)
    assert all(np.array_equal(back.tensors[n].data, t.data) for n, t in model.tensors.items())
    stale = fine.with_name(f"{temp_prefix(fine).replace(str(os.getpid()), '999999999')}x.tmp")
    stale.write_bytes(b"left by a kill")  # a dead writer's temporary of that long name
    assert len(os.fsencode(stale.name)) <= 255 and remove_stale(fine) == [stale]

    for target, call, companion in (
            (tmp_path / ("b" * 240 + ".irb"), lambda p: serde.save(model, p, weights="external"),
             "weights sidecar"),
            (tmp_path / ("c" * 248 + ".onnx"), lambda p: export_onnx(model, p, external_data=True),
             "external data file")):
        before = sorted(tmp_path.iterdir())
        with pytest.raises(IrbridgeError, match=f"the name is too long for its {companion}"):
            call(target)
        assert sorted(tmp_path.iterdir()) == before
    with pytest.raises(IrbridgeError, match="the file name is 264 bytes, longer than this "
                                            "file system allows"):
        serde.save(model, tmp_path / ("d" * 260 + ".irb"))
