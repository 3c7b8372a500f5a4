"""Write outputs all-or-nothing: a file or a folder is built under a temporary name beside
its destination and renamed into place only when complete, so a failure never leaves a
half-written output behind (nor destroys an earlier one)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from irbridge.errors import IrbridgeError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_parent(target: Path) -> None:
    parent = target.parent
    if not parent.is_dir():
        raise IrbridgeError(f"{target}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise IrbridgeError(f"{target}: folder {parent} is not writable")


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `target`; it replaces `target` when the block ends
    without an exception, and is removed otherwise."""
    target = Path(target)
    _check_parent(target)
    if target.is_dir():
        raise IrbridgeError(f"{target}: is a folder; expected a file name")
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


OUTPUT_MARKER = ".irbridge-output"
"""Written into every folder `atomic_dir` creates: only such folders (or empty ones) may be
replaced by a later export, so `-o .` or `-o ~/project` can never wipe a user's files."""


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside `target`; it replaces `target` when the block
    succeeds. An existing `target` must be empty or an earlier irbridge output folder."""
    shown = Path(target)
    target = shown.resolve()
    _check_parent(target)
    if target.exists() and not target.is_dir():
        raise IrbridgeError(f"{shown}: exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not (target / OUTPUT_MARKER).exists():
        raise IrbridgeError(f"{shown}: folder exists and holds files irbridge did not write; "
                            "choose a new folder or empty it")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        (tmp / OUTPUT_MARKER).write_text(
            "Written by irbridge export; the next export to this folder replaces it whole.\n",
            encoding="utf-8")
        os.chmod(tmp, 0o777 & ~_umask())
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
