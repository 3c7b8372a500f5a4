"""All-or-nothing outputs: irbridge/atomic.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from irbridge.atomic import OUTPUT_MARKER, atomic_dir, atomic_file
from irbridge.errors import IrbridgeError


def test_folder_of_user_files_is_never_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    for target in (".", str(tmp_path)):
        with pytest.raises(IrbridgeError, match="holds files irbridge did not write"), \
                atomic_dir(target):
            pytest.fail("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_earlier_output_is_replaced_whole_and_a_failure_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    with atomic_dir(out) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "b.txt"]
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        (tmp / "c.txt").write_text("3")
        raise RuntimeError("writer failed half way")
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporaries left


def test_file_failure_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed half way")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    with pytest.raises(IrbridgeError, match="does not exist"), \
            atomic_file(tmp_path / "missing" / "r.html"):
        pytest.fail("the block must not run")


def test_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path: Path) -> None:
    """A kill -9 leaves `.<name>.<host>-<pid>.<random>.tmp`; the next write to the same
    output removes those whose pid is gone, and keeps a live writer's and other names."""
    import subprocess
    import sys

    from irbridge.atomic import temp_prefix
    target = tmp_path / "r.html"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead_pid = int(child.stdout)  # exited: its pid is (almost surely) not reused yet
    host = temp_prefix(target).rsplit("-", 1)[0]
    dead_file = tmp_path / f"{host}-{dead_pid}.k3j_x9.tmp"
    dead_dir = tmp_path / f"{host}-{dead_pid}.old.tmp"
    dead_file.write_text("partial")
    dead_dir.mkdir()
    live = tmp_path / f"{temp_prefix(target)}abc.tmp"
    live.write_text("a write in progress")
    other = tmp_path / ".r.html.backup.tmp"
    other.write_text("not ours")
    with atomic_file(target) as tmp:
        tmp.write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, other.name, "r.html"])
