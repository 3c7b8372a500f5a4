"""ASTRA-sim's analytical backends: build once per machine (cached by content hash), run.

The sources are the offline tarball `astra-sim-src.tar.gz` and its `build-astrasim.sh`
(docs/simulators.md, "Running ASTRA-sim"). `binary()` unpacks the tarball into a scratch
folder, runs the script (apt tools only, about 10-15 minutes on 2 cores, `nice`d) and keeps
the two binaries in a cache folder outside the clone keyed by the SHA-256 of the tarball
and the script: `$IRBRIDGE_ASTRASIM_CACHE` or `~/.cache/irbridge/astrasim`, then
`<key>/bin/AstraSim_Analytical_Congestion_{Unaware,Aware}`. Later calls, other clones and
other test workers reuse it (a file lock makes concurrent callers wait for one build).

`run()` runs one binary on a Chakra trace folder written by `irbridge export --to chakra`
(its `astrasim/` configs) and returns every rank's finishing time in cycles (1 cycle =
1 ns on the analytical network).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from irbridge.errors import IrbridgeError

TARBALL = "astra-sim-src.tar.gz"
SCRIPT = "build-astrasim.sh"
BACKENDS = {"unaware": "AstraSim_Analytical_Congestion_Unaware",
            "aware": "AstraSim_Analytical_Congestion_Aware"}
_REPO = Path(__file__).resolve().parents[2]
PATCHES = Path(__file__).resolve().parent / "patches"
"""irbridge's own fixes to the ASTRA-sim sources, applied by build-astrasim.sh after the
tarball's patches (it applies every `patches/*.patch` of the unpacked folder in name
order): 03-collective-plan-shared-impl.patch stops communicator-group plans from
deleting shared collective implementations (a double free that aborted TP x DP runs)."""


class AstraSimUnavailable(IrbridgeError):
    """The sources or the build tools are missing, so ASTRA-sim cannot be built here."""


def sources() -> Path:
    """The folder holding the tarball and the build script: `$IRBRIDGE_ASTRASIM_SOURCES`,
    else `../shared/simulators` next to the clone."""
    env = os.environ.get("IRBRIDGE_ASTRASIM_SOURCES")
    folder = Path(env) if env else _REPO.parent / "shared" / "simulators"
    if not (folder / TARBALL).is_file() or not (folder / SCRIPT).is_file():
        raise AstraSimUnavailable(
            f"{folder}: no {TARBALL} and {SCRIPT} here; set IRBRIDGE_ASTRASIM_SOURCES to the "
            "folder holding them")
    return folder


def cache_root() -> Path:
    env = os.environ.get("IRBRIDGE_ASTRASIM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "irbridge" / "astrasim"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _patches() -> list[Path]:
    return sorted(PATCHES.glob("*.patch"))


def build_key(folder: Path | None = None) -> str:
    """First 16 hex digits of SHA-256(sha256(tarball) + sha256(script) + sha256 of each of
    irbridge's patches, in name order)."""
    folder = folder or sources()
    joined = _sha256(folder / TARBALL) + _sha256(folder / SCRIPT) + "".join(
        _sha256(p) for p in _patches())
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def missing_tools() -> list[str]:
    """The apt packages build-astrasim.sh needs that this machine lacks."""
    missing = [pkg for tool, pkg in (("cmake", "cmake"), ("g++", "g++"), ("make", "make"),
                                     ("patch", "patch"), ("protoc", "protobuf-compiler"))
               if shutil.which(tool) is None]
    if not Path("/usr/include/google/protobuf/message.h").exists():
        missing.append("libprotobuf-dev")
    return missing


def cached_binary(backend: str = "unaware") -> Path | None:
    """The cached binary if it was built already (never builds)."""
    try:
        exe = cache_root() / build_key() / "bin" / BACKENDS[backend]
    except AstraSimUnavailable:
        return None
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _unpack(tarball: Path, into: Path) -> Path:
    with tarfile.open(tarball) as archive:
        archive.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise AstraSimUnavailable(f"{tarball}: expected one top folder, found {len(tops)}")
    return tops[0]


def binary(backend: str = "unaware", *, jobs: int | None = None,
           log: Path | None = None) -> Path:
    """The ASTRA-sim analytical binary, built into the cache first if needed.

    Raises AstraSimUnavailable when the sources or apt tools are missing and IrbridgeError
    when the build fails (its log is kept in the cache folder)."""
    if backend not in BACKENDS:
        raise IrbridgeError(f"unknown ASTRA-sim backend {backend!r}; one of "
                            f"{', '.join(BACKENDS)}")
    folder = sources()
    key = build_key(folder)
    root = cache_root()
    final = root / key
    exe = final / "bin" / BACKENDS[backend]
    if exe.is_file():
        return exe
    missing = missing_tools()
    if missing:
        raise AstraSimUnavailable(
            f"cannot build ASTRA-sim: missing {' '.join(missing)} (apt-get install -y "
            "cmake g++ make patch protobuf-compiler libprotobuf-dev, or bash "
            "tools/setup-system.sh)")
    with _locked(root / f"{key}.lock"):
        if exe.is_file():          # built by another process while we waited
            return exe
        work = Path(tempfile.mkdtemp(prefix=f"{key}.build-", dir=root))
        log_path = log or work / "build.log"
        started = time.monotonic()
        try:
            src = _unpack(folder / TARBALL, work)
            for patch in _patches():  # after the tarball's own (name order)
                shutil.copy2(patch, src / "patches" / patch.name)
            script = folder / SCRIPT
            jobs = jobs or int(os.environ.get("IRBRIDGE_ASTRASIM_JOBS", "2"))
            with log_path.open("w") as out:
                result = subprocess.run(
                    ["nice", "-n", "10", "bash", str(script), str(src), str(jobs)],
                    stdout=out, stderr=subprocess.STDOUT, check=False)
            if result.returncode != 0:
                kept = root / f"{key}.build-failed.log"
                shutil.copy2(log_path, kept)
                tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
                raise IrbridgeError(f"ASTRA-sim build failed (exit {result.returncode}); "
                                    f"log: {kept}: {' | '.join(tail)}")
            built = src / "astra-sim" / "build" / "astra_analytical" / "build" / "bin"
            staged = work / "final"
            (staged / "bin").mkdir(parents=True)
            for name in BACKENDS.values():
                if (built / name).is_file():
                    shutil.copy2(built / name, staged / "bin" / name)
            shutil.copy2(log_path, staged / "build.log")
            (staged / "manifest.json").write_text(json.dumps({
                "key": key, "tarball_sha256": _sha256(folder / TARBALL),
                "script_sha256": _sha256(folder / SCRIPT), "sources": str(folder),
                "patches": {p.name: _sha256(p) for p in _patches()},
                "build_seconds": round(time.monotonic() - started, 1),
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
            os.replace(staged, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if not exe.is_file():
        raise IrbridgeError(f"ASTRA-sim build finished without {exe.name}")
    return exe


# -- running -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AstraResult:
    """One ASTRA-sim run: every rank's finishing time in cycles (ns) and its full output."""
    cycles: dict[int, int]
    exposed_comm: dict[int, int]
    stdout: str
    command: list[str]
    returncode: int = 0  # non-zero: crashed in teardown after every rank finished


_FINISHED = re.compile(r"sys\[(\d+)\],?\s*finished,\s*(\d+)\s*cycles"
                       r"(?:,\s*exposed communication\s*(\d+)\s*cycles)?")


def parse_output(text: str) -> tuple[dict[int, int], dict[int, int]]:
    """`sys[r] finished, C cycles, exposed communication E cycles.` lines -> ({r: C}, {r: E})."""
    cycles: dict[int, int] = {}
    exposed: dict[int, int] = {}
    for match in _FINISHED.finditer(text):
        rank = int(match.group(1))
        cycles[rank] = int(match.group(2))
        if match.group(3) is not None:
            exposed[rank] = int(match.group(3))
    return cycles, exposed


def run(folder: Path, *, mode: str = "replay", backend: str = "unaware",
        exe: Path | None = None, timeout: float = 600.0) -> AstraResult:
    """Run ASTRA-sim on a folder written by `irbridge export --to chakra`.

    `mode` picks the system config: `replay` (times from `duration_micros`) or `roofline`
    (times from `num_ops` / `tensor_size` and the target's peak and bandwidth)."""
    folder = Path(folder)
    manifest_path = folder / "astrasim" / "run.json"
    if not manifest_path.is_file():
        raise IrbridgeError(f"{folder}: not a Chakra export of irbridge (no astrasim/run.json); "
                            "write it with `irbridge export MODEL --to chakra -o DIR`")
    try:
        manifest = json.loads(manifest_path.read_text())
        system = manifest["system"][mode]
        workload = manifest["workload"]
        network = manifest["network"]
        memory = manifest["remote_memory"]
        npus = int(manifest.get("npus", 0))
    except KeyError as err:
        if mode not in ("replay", "roofline"):
            raise IrbridgeError(f"unknown mode {mode!r}; one of replay, roofline") from None
        raise IrbridgeError(f"{manifest_path}: missing key {err}") from None
    except (ValueError, TypeError) as err:
        raise IrbridgeError(f"{manifest_path}: not valid JSON ({err})") from None
    _check_traces(folder, str(workload), npus)
    exe = exe or binary(backend)
    folder = folder.resolve()
    command = [str(exe), f"--workload-configuration={folder / workload}",
               f"--system-configuration={folder / system}",
               f"--network-configuration={folder / network}",
               f"--remote-memory-configuration={folder / memory}"]
    if manifest.get("comm_groups"):
        command.append(f"--comm-group-configuration={folder / manifest['comm_groups']}")
    # Upstream ASTRA-sim aborted on a double free of its own in teardown (or just before
    # the last rank reported), depending on heap layout; patches/03-... fixes the cause
    # we found (shared collective implementations). Should another such abort appear,
    # the simulation itself is deterministic: a run killed by a signal is repeated (at
    # most 3 tries in all), and an abort after every rank reported keeps its results
    # (AstraResult.returncode says so).
    for _ in range(3):
        result = _run_once(command, folder, timeout)
        text = result.stdout + result.stderr
        cycles, exposed = parse_output(text)
        npus = npus or len(cycles)
        # an abort after every rank has finished and printed its time: the run is complete
        finished = sorted(cycles) == list(range(npus)) and "Exiting" in text
        if result.returncode >= 0 or finished:
            break
    if (result.returncode != 0 and not finished) or not cycles or "nan" in text.lower():
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise IrbridgeError(f"{folder}: ASTRA-sim failed (exit {result.returncode}): {tail}")
    return AstraResult(cycles=cycles, exposed_comm=exposed, stdout=text, command=command,
                       returncode=result.returncode)


def _check_traces(folder: Path, workload: str, npus: int) -> None:
    """Every rank's trace is there and decodes, before ASTRA-sim runs (it aborts on a
    missing or damaged file with a C++ exception, or reads garbage)."""
    from irbridge.converters.chakra.predict import read_messages

    for rank in range(npus):
        path = folder / f"{workload}.{rank}.et"
        if not path.is_file():
            raise IrbridgeError(f"{path}: missing; {folder}/astrasim/run.json lists {npus} "
                                "ranks")
        read_messages(path)


def _run_once(command: list[str], folder: Path, timeout: float,
              ) -> subprocess.CompletedProcess[str]:
    # ASTRA-sim writes its log folder into the working directory: a scratch one.
    with tempfile.TemporaryDirectory(prefix="irbridge-astrasim-") as scratch:
        try:
            return subprocess.run([*command, f"--logging-folder={scratch}/log"],
                                  capture_output=True, text=True, check=False,
                                  timeout=timeout, cwd=scratch)
        except subprocess.TimeoutExpired:
            raise IrbridgeError(f"{folder}: ASTRA-sim ran past {timeout:.0f} s") from None


def main() -> None:  # pragma: no cover - `python -m irbridge.converters.chakra.astrasim`
    exe = binary("unaware")
    print(exe)
    print(binary("aware"))


if __name__ == "__main__":  # pragma: no cover
    main()
