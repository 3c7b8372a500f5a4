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


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside `target`; it replaces `target` (a folder,
    which must not be a non-empty folder of something else's) when the block succeeds."""
    target = Path(target)
    _check_parent(target)
    if target.exists() and not target.is_dir():
        raise IrbridgeError(f"{target}: exists and is not a folder")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
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
