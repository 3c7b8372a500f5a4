"""Write outputs all-or-nothing: a file or a folder is built under a temporary name beside
its destination and renamed into place only when complete, so a failure never leaves a
half-written output behind (nor destroys an earlier one).

Rules every writer shares (one place):
- an output that exists must be a regular file (or, for folder outputs, an empty folder or
  an earlier irbridge output folder): `-o ./null` on a device, FIFO or socket is refused;
- temporaries are named `.<output>.<host>-<pid>.<random>.tmp` (an output name over 160
  bytes by its first bytes and a hash, so that a legal name never gives an illegal
  temporary); a later write to the same output removes the ones whose writing process
  (same host) is gone, i.e. left by a kill;
- an output whose name, or whose companion's (sidecar, external data), the file system
  does not take is refused in one line before anything is written;
- any OSError while writing (full disk, read-only folder, file size limit) becomes a
  one-line IrbridgeError naming the output, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from irbridge.errors import IrbridgeError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


_HOST = _host_tag()


TEMP_NAME_BYTES = 160
"""Longest output name a temporary carries whole: the temporary adds about 40 bytes (and a
sidecar's more), and file names stop at 255 bytes."""


def _temp_stem(target: Path) -> str:
    """The output's name as its temporaries carry it: whole when short, else a prefix and a
    hash of the whole name (a legal 250-byte name must not give an illegal temporary)."""
    name = target.name
    encoded = os.fsencode(name)
    if len(encoded) <= TEMP_NAME_BYTES:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:16]
    head = os.fsdecode(encoded[:TEMP_NAME_BYTES - 17].decode("utf-8", "ignore").encode())
    return f"{head}~{digest}"


def temp_prefix(target: Path) -> str:
    """Prefix of the temporaries this process writes for `target` (see `remove_stale`)."""
    return f".{_temp_stem(target)}.{_HOST}-{os.getpid()}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(target: Path) -> list[Path]:
    """Remove temporaries of earlier writes to `target` whose writer (a process on this
    host) no longer runs: what a kill -9 or a power cut left. Only names of our own pattern
    are touched; a live writer's files (or another host's) are kept. Returns what went."""
    pattern = re.compile(rf"\.{re.escape(_temp_stem(target))}\.{_HOST}-(\d+)\.[A-Za-z0-9_]+"
                         r"(\.data)?\.tmp")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def check_output(target: Path, *, folder: bool = False) -> None:
    """Refuse outputs that must not be replaced: missing or unwritable parent folder, an
    existing folder (for a file output), a device, FIFO, socket or other special file."""
    parent = target.parent
    if not parent.is_dir():
        raise IrbridgeError(f"{target}: folder {parent} does not exist")
    limit = name_max(parent)
    if len(os.fsencode(target.name)) > limit:
        raise IrbridgeError(f"{target}: the file name is {len(os.fsencode(target.name))} bytes, "
                            f"longer than this file system allows ({limit})")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise IrbridgeError(f"{target}: cannot check the output ({exc.strerror})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            if not folder:
                raise IrbridgeError(f"{target}: is a folder; expected a file name")
        elif not stat.S_ISREG(st.st_mode):
            raise IrbridgeError(f"{target}: exists and is not a regular file ({_kind(st)}); "
                                "irbridge replaces only regular files")
        elif folder:
            raise IrbridgeError(f"{target}: exists and is not a folder")
    if not os.access(parent, os.W_OK):
        ro = False
        with contextlib.suppress(OSError):
            ro = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
        raise IrbridgeError(f"{target}: folder {parent} is "
                            + ("on a read-only file system" if ro else "not writable"))


def name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system of `folder` takes."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def check_companion_name(target: Path, name: str, what: str) -> None:
    """Refuse an output whose companion file (`what`: a weights sidecar, external data)
    would get a name the file system does not take: the output's own name is legal, the
    companion's (the output's name plus a suffix) is not."""
    limit = name_max(target.parent)
    if len(os.fsencode(name)) > limit:
        raise IrbridgeError(f"{target}: the name is too long for its {what} ({name!r} would be "
                            f"{len(os.fsencode(name))} bytes, more than the file system's "
                            f"{limit})", hint="use a shorter output name")


def not_a_file(path: str | os.PathLike[str], what: str = "file") -> str:
    """Why `path`, which `Path.is_file()` rejected, cannot be read as the `what` expected:
    "no such checkpoint file", "a folder, not a checkpoint file", "not a regular file (a
    FIFO), not a checkpoint file" ...; the words after `PATH: ` in an error line, so that
    a FIFO or a device is never called missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"no such {what}"
    except OSError as exc:
        return f"cannot read it ({exc.strerror or type(exc).__name__})"
    if stat.S_ISDIR(st.st_mode):
        return f"a folder, not a {what}"
    return f"not a regular file ({_kind(st)})" + ("" if what == "file" else f", not a {what}")


FOLDER_ENTRIES_LIMIT = 100_000
"""Entries of an input folder looked at (model folders, simulator folders hold tens)."""


def check_folder_entries(folder: Path, what: str, *, recursive: bool = False) -> None:
    """Refuse an input folder holding anything but regular files and folders (symbolic
    links followed, as a hub cache snapshot links its files; a link that leads nowhere is
    left to the reader): the tool that reads the folder opens its files by name, and a
    FIFO would block that read forever, a device never end. `what` names the folder in
    the error line."""
    pending, seen = [folder], 0
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    seen += 1
                    if seen > FOLDER_ENTRIES_LIMIT:
                        raise IrbridgeError(f"{folder}: more than {FOLDER_ENTRIES_LIMIT:,} "
                                            f"entries, not {what}")
                    try:
                        st = os.stat(entry.path)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if recursive and not entry.is_symlink():
                            pending.append(Path(entry.path))
                    elif not stat.S_ISREG(st.st_mode):
                        raise IrbridgeError(f"{entry.path}: not a regular file ({_kind(st)}); "
                                            f"refusing to read {what}")
        except OSError as exc:
            raise IrbridgeError(f"{current}: cannot list {what} "
                                f"({exc.strerror or type(exc).__name__})") from exc


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def write_error(target: Path, exc: OSError) -> IrbridgeError:
    """One line for an OSError met while writing `target`."""
    reason = exc.strerror or str(exc)
    hints = {errno.ENOSPC: "free some space or write elsewhere",
             errno.EDQUOT: "free some space or write elsewhere",
             errno.EFBIG: "the file size limit (ulimit -f) or the file system's is too small",
             errno.EROFS: "write to another folder"}
    return IrbridgeError(f"{target}: cannot write ({reason})", hint=hints.get(exc.errno or 0))


def fsync_dir(folder: Path) -> None:
    """Make renames in `folder` durable (best effort: not every file system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `target`; it replaces `target` when the block ends
    without an exception, and is removed otherwise."""
    target = Path(target)
    check_output(target)
    remove_stale(target)
    try:
        fd, name = tempfile.mkstemp(prefix=temp_prefix(target), suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise write_error(target, exc) from None
    os.close(fd)
    tmp = Path(name)
    try:
        try:
            yield tmp
            os.chmod(tmp, 0o666 & ~_umask())
            check_output(target)  # it may have become a special file meanwhile
            os.replace(tmp, target)
        except OSError as exc:
            raise write_error(target, exc) from exc
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
    try:
        check_output(target, folder=True)
    except IrbridgeError as exc:
        raise IrbridgeError(str(exc).replace(str(target), str(shown), 1)) from None
    if target.is_dir() and any(target.iterdir()) and not (target / OUTPUT_MARKER).is_file():
        raise IrbridgeError(f"{shown}: folder exists and holds files irbridge did not write; "
                            "choose a new folder or empty it")
    remove_stale(target)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".tmp",
                                    dir=target.parent))
    except OSError as exc:
        raise write_error(shown, exc) from None
    old = target.with_name(f"{temp_prefix(target)}old.tmp")
    try:
        try:
            yield tmp
            (tmp / OUTPUT_MARKER).write_text(
                "Written by irbridge export; the next export to this folder replaces it "
                "whole.\n", encoding="utf-8")
            os.chmod(tmp, 0o777 & ~_umask())
            if target.exists():
                os.replace(target, old)
                os.replace(tmp, target)
            else:
                os.replace(tmp, target)
        except OSError as exc:
            raise write_error(shown, exc) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


KILL_HOOK = "IRBRIDGE_TEST_KILL_AT"
"""Tests only: name of a write stage at which the writing process SIGKILLs itself, to prove
that a kill at any stage leaves the old or the new file whole (tests/test_serde_crash.py,
tests/onnx/test_onnx_external_pair.py)."""


def kill_point(name: str) -> None:
    """A named stage of a multi-file write (see KILL_HOOK)."""
    if os.environ.get(KILL_HOOK) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Serialise the commit step of irbridge writers in `folder` (flock on the folder
    itself, so no lock file is left behind; best effort where flock is unsupported)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


GENERATION_DIGITS = 16
"""Hex digits of a data file's generation name `<file>.<generation>.data`: the data file
of a pair (`.irb` + sidecar, `.onnx` + external data) that a new write puts beside the one
the file it replaces may still read; the file's rename is the commit point."""


def generation_name(target: Path) -> str:
    """A fresh data file name for `target`: `<name>.<16 random hex digits>.data`."""
    return f"{target.name}.{secrets.token_hex(GENERATION_DIGITS // 2)}.data"


def data_file_pattern(target: Path) -> re.Pattern[str]:
    """Names of `target`'s data files: any generation, and the plain `<name>.data`."""
    return re.compile(rf"{re.escape(target.name)}(\.[0-9a-f]{{{GENERATION_DIGITS}}})?\.data")


def remove_old_data_files(target: Path, keep: str | None) -> None:
    """After the commit: `target`'s data files other than `keep` (the one it reads now)."""
    pattern = data_file_pattern(target)
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            if entry.name != keep and pattern.fullmatch(entry.name) \
                    and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
