"""The ASTRA-sim build cache (fast: no build here): its key is the content hash of the
tarball, the build script and irbridge's patches, a missing source folder is a one-line error, and ASTRA-sim's
output lines are parsed into per-rank times."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from irbridge.converters.chakra import astrasim


def _sources(folder: Path, tarball: bytes, script: bytes) -> Path:
    folder.mkdir()
    (folder / astrasim.TARBALL).write_bytes(tarball)
    (folder / astrasim.SCRIPT).write_bytes(script)
    return folder


def test_key_is_the_content_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _sources(tmp_path / "a", b"tar", b"#!/bin/sh\n")
    patches = "".join(hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted(astrasim.PATCHES.glob("*.patch")))
    assert patches  # irbridge's own fixes are part of the key
    want = hashlib.sha256((hashlib.sha256(b"tar").hexdigest()
                           + hashlib.sha256(b"#!/bin/sh\n").hexdigest()
                           + patches).encode()).hexdigest()
    assert astrasim.build_key(a) == want[:16]
    b = _sources(tmp_path / "b", b"tar", b"#!/bin/sh\necho changed\n")
    assert astrasim.build_key(b) != astrasim.build_key(a)
    # a cached build under that key is found without building; another key is not
    monkeypatch.setenv("IRBRIDGE_ASTRASIM_SOURCES", str(a))
    monkeypatch.setenv("IRBRIDGE_ASTRASIM_CACHE", str(tmp_path / "cache"))
    assert astrasim.cached_binary() is None
    exe = tmp_path / "cache" / want[:16] / "bin" / astrasim.BACKENDS["unaware"]
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert astrasim.cached_binary() == exe
    assert astrasim.binary() == exe
    monkeypatch.setenv("IRBRIDGE_ASTRASIM_SOURCES", str(b))
    assert astrasim.cached_binary() is None


def test_missing_sources_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRBRIDGE_ASTRASIM_SOURCES", str(tmp_path))
    with pytest.raises(astrasim.AstraSimUnavailable, match=r"no astra-sim-src\.tar\.gz") as info:
        astrasim.binary()
    assert "\n" not in str(info.value)
    with pytest.raises(astrasim.IrbridgeError, match="unknown ASTRA-sim backend 'ns3'"):
        astrasim.binary("ns3")


def test_parse_output() -> None:
    text = ("[2026-11-23 22:25:38.897] [workload] [info] sys[1] finished, 2 cycles, exposed "
            "communication 0 cycles.\n[2026-11-23 22:25:38.897] [workload] [info] sys[0] "
            "finished, 56547 cycles, exposed communication 1200 cycles.\n")
    assert astrasim.parse_output(text) == ({1: 2, 0: 56547}, {1: 0, 0: 1200})


def test_patches_apply_to_the_shared_sources(tmp_path: Path) -> None:
    """Each of irbridge's patches applies cleanly (patch --dry-run, as build-astrasim.sh
    runs it: -p1 in the astra-sim folder) to the file it names in the tarball."""
    import os
    import re
    import shutil
    import subprocess
    import tarfile

    try:
        folder = astrasim.sources()
        if shutil.which("patch") is None:
            raise astrasim.AstraSimUnavailable("no patch tool (apt-get install patch)")
    except astrasim.AstraSimUnavailable as exc:
        if os.environ.get("CI"):  # CI has both: a missing one is a failure there
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    for p in sorted(astrasim.PATCHES.glob("*.patch")):
        target = re.search(r"^\+\+\+ b/(\S+)", p.read_text(), re.M)
        assert target, p.name
        with tarfile.open(folder / astrasim.TARBALL) as archive:
            member = next(m for m in archive.getmembers()
                          if m.name.endswith("/astra-sim/" + target.group(1)))
            archive.extract(member, tmp_path, filter="data")
        root = tmp_path / member.name[: -len(target.group(1))]
        done = subprocess.run(["patch", "-p1", "--dry-run", "-d", str(root)],
                              input=p.read_bytes(), capture_output=True, check=False)
        assert done.returncode == 0, (p.name, done.stdout, done.stderr)
