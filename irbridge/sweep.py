"""Design-space sweeps: a grid of models x targets x batch x sequence length x phase x dtype
x tensor parallelism, analysed cell by cell (`irbridge sweep`).

- **Groups.** Cells that share (model, phase, batch, sequence length) share one capture
  (shape-only, meta device); each group is one unit of work that captures once and
  analyses all its (target, dtype, tp) cells. Phase `none` is the model's own forward
  pass (`analyze`); `prefill` / `decode` are serving steps with a static KV cache of
  `seq_len` positions (`analysis/serving.py`, prompt = cache = seq_len for prefill).
- **Engines.** `local` runs groups in worker processes on this machine (`--jobs`);
  `ray` runs the same function as Ray tasks (`ray.init(address)`, a local cluster when no
  address). Both return the same rows: every column is computed from the graph, none from
  the clock, so the result sets are identical.
- **Result set.** Rows sorted by cell, one per cell, with `status` ok or the one-line error
  of that cell (a bad cell never stops the sweep). Written as Parquet after each finished
  group (atomically: a killed sweep leaves the last complete set), and at the end as CSV,
  JSON, a Markdown summary and plots beside it. Re-running the same command resumes: cells
  already in the Parquet file are not run again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from irbridge.atomic import not_a_file
from irbridge.errors import IrbridgeError

PHASES = ("none", "prefill", "decode")
ENGINES = ("local", "ray")
KEY = ("model", "phase", "batch", "seq_len", "target", "dtype", "tp")
COLUMNS = (*KEY, "status", "kv_len", "latency_s", "tokens_per_s", "flops", "bytes",
           "intensity", "weight_bytes", "kv_bytes", "memory_bytes", "capacity_bytes", "fits",
           "closed_form_s")
"""Result columns: the cell's key, then its figures (per device where TP applies; latency is
the step: TTFT for prefill, TPOT for decode, the forward pass for none)."""


@dataclass(frozen=True)
class Group:
    """Cells sharing one capture."""

    model: str
    phase: str
    batch: int
    seq_len: int
    cells: tuple[tuple[str, str, int], ...]  # (target, dtype, tp)

    def cell_keys(self) -> list[tuple[Any, ...]]:
        return [(self.model, self.phase, self.batch, self.seq_len, *c) for c in self.cells]


@dataclass(frozen=True)
class Grid:
    models: tuple[str, ...]
    targets: tuple[str, ...]
    batches: tuple[int, ...]
    seq_lens: tuple[int, ...]
    phases: tuple[str, ...]
    dtypes: tuple[str, ...]
    tps: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum(len(g.cells) for g in self.groups())

    def keys(self) -> set[tuple[Any, ...]]:
        """The key of every cell of the grid (as `KEY` orders a result row's fields)."""
        return {k for g in self.groups() for k in g.cell_keys()}

    def groups(self, done: set[tuple[Any, ...]] = frozenset()) -> list[Group]:  # type: ignore[assignment]
        """The groups with at least one cell not in `done`, each with only those cells.
        Tensor parallelism applies to serving phases: a `none` cell has tp 1 only."""
        out = []
        for model, phase, batch, seq in product(self.models, self.phases, self.batches,
                                                self.seq_lens):
            tps = self.tps if phase != "none" else (1,)
            cells = tuple(c for c in product(self.targets, self.dtypes, tps)
                          if (model, phase, batch, seq, *c) not in done)
            if cells:
                out.append(Group(model, phase, batch, seq, cells))
        return out


def parse_grid(*, models: str, hardware: str, batch: str, seq_len: str, phase: str,
               dtype: str, tp: str) -> Grid:
    """Comma-separated axes (`--hardware all` = the whole catalog), checked up front."""
    from irbridge.analysis.binding import COMPUTE_DTYPES
    from irbridge.analysis.hardware import catalog, resolve_targets

    names = _items(models, "--models")
    for name in names:
        _check_model(name)
    if hardware.strip() == "all":
        targets = tuple(sorted(catalog()))
    else:
        targets = tuple(t.name for t in resolve_targets(hardware))
    phases = _items(phase, "--phase")
    for p in phases:
        if p not in PHASES:
            raise IrbridgeError(f"--phase {p!r}: use {', '.join(PHASES)} (comma-separated)")
    dtypes = _items(dtype, "--dtype")
    for d in dtypes:
        if d not in COMPUTE_DTYPES:
            raise IrbridgeError(f"--dtype {d!r}: known {', '.join(COMPUTE_DTYPES)}")
    return Grid(names, targets, _ints(batch, "--batch"), _ints(seq_len, "--seq-len"),
                phases, dtypes, _ints(tp, "--tp"))


def _check_model(name: str) -> None:
    """A zoo name (hf:TYPE, timm:NAME and diffusers:ClassName included) or an existing model
    file; anything else is refused before any work starts."""
    from irbridge.formats import is_model_file, is_model_folder

    if is_model_folder(name):  # a Hugging Face model folder
        return
    if is_model_file(name):
        if not Path(name).is_file():
            raise IrbridgeError(f"--models: {name}: {not_a_file(name)}")
        return
    from irbridge.converters.pytorch.zoo.registry import _unknown, is_zoo_name

    if not is_zoo_name(name):
        raise _unknown(name)


def _items(text: str, option: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not items:
        raise IrbridgeError(f"{option}: give at least one value")
    return items


def _ints(text: str, option: str) -> tuple[int, ...]:
    out = []
    for part in _items(text, option):
        try:
            n = int(part)
        except ValueError:
            raise IrbridgeError(f"{option} {text!r}: expected integers like 1,8,64") from None
        if not 1 <= n <= 1 << 24:
            raise IrbridgeError(f"{option} {text!r}: values must be between 1 and {1 << 24}")
        out.append(n)
    return tuple(out)


# -- one group (runs in a worker) ----------------------------------------------------------


def run_group(group: Group) -> list[dict[str, Any]]:
    """Capture once, analyse every cell; a failure becomes the `status` of the cells it
    concerns. Deterministic: no clock or host figure in the rows."""
    from irbridge.analysis.hardware import resolve_target

    try:
        model = _capture(group)
    except Exception as exc:
        return [_row(key, status=_one_line(exc)) for key in group.cell_keys()]
    rows = []
    for key, (target_name, dtype, tp) in zip(group.cell_keys(), group.cells, strict=True):
        try:
            target = resolve_target(target_name)
            rows.append(_analyse(key, model, target, dtype, tp, group))
        except Exception as exc:
            rows.append(_row(key, status=_one_line(exc)))
    return rows


def _capture(group: Group) -> Any:
    if group.phase != "none":
        from irbridge.converters.pytorch.phases import capture_phase

        return capture_phase(group.model, group.phase, batch=group.batch,
                             seq_len=group.seq_len, kv_len=group.seq_len)
    from irbridge.formats import is_model_file, read_file

    if is_model_file(group.model):
        return read_file(Path(group.model), weights=False)
    from irbridge.converters.pytorch import capture, zoo

    built = zoo.build(group.model, batch=group.batch, seq_len=group.seq_len, device="meta")
    result = capture(built.module, built.args, built.kwargs, weights=False)
    result.model.name = built.name
    return result.model


def _analyse(key: tuple[Any, ...], model: Any, target: Any, dtype: str, tp: int,
             group: Group) -> dict[str, Any]:
    from irbridge.analysis import driver

    if not target.has_peak(dtype):
        return _row(key, status=f"target {target.name} has no {dtype} peak")
    batches = [group.batch] if group.phase == "none" and _is_file(group.model) else [None]
    run = driver.analyze(model, [target], dtype=dtype, batches=batches).runs[0]
    mapping = run.mappings[0]
    flops = run.costs.total.flops
    moved = mapping.external_bytes
    row = _row(key, status="ok", flops=flops, bytes=moved,
               intensity=flops / moved if moved else None,
               weight_bytes=run.costs.weight_bytes, latency_s=mapping.total_latency)
    if group.phase == "none":
        row["memory_bytes"] = run.costs.weight_bytes
        capacity = target.memory_capacity.value if target.memory_capacity else None
        row["capacity_bytes"] = capacity
        row["fits"] = None if capacity is None else run.costs.weight_bytes <= capacity
        return row
    from irbridge.analysis.serving import serving

    s = serving(model, target, dtype=dtype, tp=tp, source=group.model)
    row.update(kv_len=s.info.kv_len, latency_s=s.step_seconds,
               tokens_per_s=s.tokens_per_second, weight_bytes=s.weight_bytes,
               kv_bytes=s.kv_bytes, memory_bytes=s.memory_bytes, capacity_bytes=s.capacity,
               fits=s.fits, closed_form_s=s.closed_form_seconds)
    return row


def _is_file(spec: str) -> bool:
    from irbridge.formats import is_model_file

    return is_model_file(spec)


def _row(key: tuple[Any, ...], **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(zip(KEY, key, strict=True))
    row.update(values)
    return row


def _one_line(exc: BaseException) -> str:
    """irbridge's own errors as their message (without the hint), others with their type."""
    from irbridge.sanitize import clean

    if isinstance(exc, IrbridgeError):
        text = (exc.args[0] if exc.args else str(exc)).strip().splitlines()
        return clean(text[0] if text else type(exc).__name__)[:300]
    text = str(exc).strip().splitlines()
    return clean(f"{type(exc).__name__}: {text[0] if text else ''}")[:300]


# -- engines ---------------------------------------------------------------------------------


Progress = Callable[[int, int], None]


def check_run_options(engine: str, jobs: int, address: str | None) -> None:
    """The engine options, checked before anything is parsed or printed."""
    if engine not in ENGINES:
        raise IrbridgeError(f"--engine {engine!r}: use {' or '.join(ENGINES)}")
    if jobs < 1:
        raise IrbridgeError(f"--jobs {jobs}: must be at least 1")
    if address is not None and engine != "ray":
        raise IrbridgeError("--address applies to --engine ray only")


def run(grid: Grid, output: Path, *, engine: str = "local", jobs: int = 2,
        address: str | None = None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Run every cell of `grid` not already in `output` (Parquet) and write the result set
    there after each group; return all rows (sorted by cell)."""
    check_run_options(engine, jobs, address)
    rows = {row_key(r): r for r in read_results(output)} if output.exists() else {}
    wanted = grid.keys()
    groups = grid.groups(done=set(rows) & wanted)
    total = len(wanted)
    done = len(wanted & set(rows))
    if progress:
        progress(done, total)
    for finished in _engine(engine)(groups, jobs, address):
        for row in finished:
            rows[row_key(row)] = row
        done += len(finished)
        write_results(output, sorted(rows.values(), key=_sort_key))
        if progress:
            progress(done, total)
    result = sorted(rows.values(), key=_sort_key)
    write_results(output, result)
    return result


def _engine(name: str) -> Callable[[list[Group], int, str | None],
                                   Iterable[list[dict[str, Any]]]]:
    return _local if name == "local" else _ray


def _local(groups: list[Group], jobs: int, address: str | None
           ) -> Iterable[list[dict[str, Any]]]:
    if not groups:
        return
    if jobs == 1:
        for g in groups:
            yield run_group(g)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: torch's threads do not survive a fork safely.
    with ProcessPoolExecutor(max_workers=min(jobs, len(groups)),
                             mp_context=multiprocessing.get_context("spawn"),
                             initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(run_group, g) for g in groups]
        for future in as_completed(futures):
            yield future.result()


def _die_with_parent(parent: int) -> None:
    """A worker ends when the sweep is killed (kill -9 leaves no orphan capturing on for
    minutes; the result set keeps the groups finished so far and resumes from them)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


UV_RUN_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


@contextlib.contextmanager
def _no_uv_run_propagation() -> Iterator[None]:
    """A local cluster's workers run this interpreter (Ray's default). Under `uv run`, Ray
    would instead start each worker with `uv run` and ship the current folder to it as its
    working_dir: the whole project with its .venv, 9.1 GB copied into /tmp/ray per session
    and 95 s for a two-group sweep. Ray reads the switch when it is imported and again at
    `ray.init`; both are covered, and restored after."""
    before = os.environ.get(UV_RUN_ENV)
    os.environ[UV_RUN_ENV] = "0"
    constants: Any = None
    with contextlib.suppress(ImportError):   # else the environment variable alone
        from ray._private import ray_constants as constants
    flag = getattr(constants, UV_RUN_ENV, None)
    if flag is not None:
        setattr(constants, UV_RUN_ENV, False)
    try:
        yield
    finally:
        if flag is not None:
            setattr(constants, UV_RUN_ENV, flag)
        if before is None:
            os.environ.pop(UV_RUN_ENV, None)
        else:
            os.environ[UV_RUN_ENV] = before


def _ray(groups: list[Group], jobs: int, address: str | None
         ) -> Iterable[list[dict[str, Any]]]:
    try:
        import ray
    except ImportError:
        raise IrbridgeError("--engine ray needs Ray: install irbridge[ray] "
                            "(pip install 'ray==2.60.0')") from None
    if not groups:
        return
    started = not ray.is_initialized()
    if started:
        if address is not None:
            _probe(address)
        try:
            with _quiet_stderr():  # Ray's C++ client logs each failed retry on fd 2
                if address is None:
                    with _no_uv_run_propagation():
                        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, log_to_driver=False)
        except Exception as exc:
            raise IrbridgeError(f"--engine ray: cannot start or reach the cluster "
                                f"({_one_line(exc)})") from None
    try:
        task = ray.remote(run_group)
        pending = [task.remote(g) for g in groups]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        if started:
            ray.shutdown()


PROBE_SECONDS = 10.0
"""How long `--address HOST:PORT` may take to accept a TCP connection: Ray itself retries
an unreachable cluster for minutes."""


def _probe(address: str) -> None:
    """Refuse an --address whose HOST:PORT does not accept a connection, in bounded time
    (`auto` and other forms without a port are left to Ray)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECONDS):
            pass
    except (OSError, ValueError, OverflowError) as exc:
        raise IrbridgeError(f"--engine ray: cannot reach the cluster at {address} "
                            f"({_one_line(exc)})") from None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send what is written on file descriptor 2 (C++ logs) to /dev/null meanwhile."""

    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # captured (tests): nothing to redirect
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


# -- result set ------------------------------------------------------------------------------


def row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A result row's cell key, as `Grid.keys` gives them."""
    return tuple(row[k] for k in KEY)


def _sort_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(str(row[k]) if isinstance(row[k], str) else row[k] for k in KEY)


def _schema() -> Any:
    import pyarrow as pa

    types = {"model": pa.string(), "phase": pa.string(), "batch": pa.int64(),
             "seq_len": pa.int64(), "target": pa.string(), "dtype": pa.string(),
             "tp": pa.int64(), "status": pa.string(), "kv_len": pa.int64(),
             "latency_s": pa.float64(), "tokens_per_s": pa.float64(), "flops": pa.int64(),
             "bytes": pa.int64(), "intensity": pa.float64(), "weight_bytes": pa.int64(),
             "kv_bytes": pa.int64(), "memory_bytes": pa.int64(),
             "capacity_bytes": pa.float64(), "fits": pa.bool_(), "closed_form_s": pa.float64()}
    return pa.schema([(c, types[c]) for c in COLUMNS])


def write_results(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from irbridge.atomic import atomic_file

    table = pa.Table.from_pylist(list(rows), schema=_schema())
    with atomic_file(path) as tmp:
        pq.write_table(table, tmp)


def read_results(path: Path) -> list[dict[str, Any]]:
    """Rows of a result set written by `write_results` (one line error otherwise)."""
    import pyarrow.parquet as pq

    from irbridge.atomic import check_output

    check_output(path)
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise IrbridgeError(f"{path}: not a sweep result set to resume "
                            f"({_one_line(exc)}); give another -o") from None
    if tuple(table.column_names) != COLUMNS:
        raise IrbridgeError(f"{path}: its columns are not a sweep result set of this "
                            "version; give another -o")
    return list(table.to_pylist())


def write_reports(output: Path, rows: Sequence[dict[str, Any]]) -> list[Path]:
    """CSV, JSON, Markdown summary and plots beside the Parquet file."""
    import csv
    import io

    from irbridge.atomic import atomic_file

    written = []
    stem = output.with_suffix("")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    for path, text in ((stem.with_suffix(".csv"), buffer.getvalue()),
                       (stem.with_suffix(".json"), json.dumps(list(rows), indent=1) + "\n"),
                       (stem.with_suffix(".md"), summary(rows))):
        with atomic_file(path) as tmp:
            tmp.write_text(text)
        written.append(path)
    written += _plots(stem, rows)
    return written


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown summary: counts, then the fastest fitting cell per (model, phase)."""
    from irbridge.analysis.report import human_seconds

    ok = [r for r in rows if r["status"] == "ok"]
    lines = [f"# Sweep: {len(rows)} cells, {len(ok)} analysed, {len(rows) - len(ok)} "
             "not (see `status`)", ""]
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in ok:
        if r["fits"] is False:
            continue
        k = (r["model"], r["phase"])
        if k not in best or r["latency_s"] < best[k]["latency_s"]:
            best[k] = r
    lines += ["| model | phase | fastest fitting cell | latency | tokens/s |",
              "|---|---|---|---|---|"]
    for (model, phase), r in sorted(best.items()):
        cell = f"{r['target']} {r['dtype']} batch {r['batch']} seq {r['seq_len']} tp {r['tp']}"
        tps = f"{r['tokens_per_s']:,.1f}" if r["tokens_per_s"] is not None else "-"
        lines.append(f"| {model} | {phase} | {cell} | {human_seconds(r['latency_s'])} | {tps} |")
    errors: dict[str, int] = {}
    for r in rows:
        if r["status"] != "ok":
            errors[r["status"]] = errors.get(r["status"], 0) + 1
    if errors:
        lines += ["", "| cells | not analysed because |", "|---|---|"]
        lines += [f"| {n} | {msg.replace('|', '/')} |" for msg, n in
                  sorted(errors.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines) + "\n"


def _plots(stem: Path, rows: Sequence[dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return []
    out = []
    fig, ax = plt.subplots(figsize=(8, 5))
    series: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
    for r in ok:
        k = (r["model"], r["phase"], r["target"], r["dtype"], r["seq_len"], r["tp"])
        series.setdefault(k, []).append((r["batch"], r["latency_s"]))
    for k, points in sorted(series.items(), key=lambda kv: str(kv[0]))[:40]:
        points.sort()
        ax.plot([p[0] for p in points], [p[1] * 1e3 for p in points], marker="o",
                label=" ".join(str(x) for x in k))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch")
    ax.set_ylabel("step latency (ms)")
    ax.set_title("latency vs batch per target")
    if len(series) <= 12:
        ax.legend(fontsize=6)
    out.append(_save(fig, stem.with_name(stem.name + ".latency.png")))
    fig, ax = plt.subplots(figsize=(8, 5))
    for target in sorted({r["target"] for r in ok}):  # one device (flops are the step's)
        pts = [(r["intensity"], r["flops"] / r["latency_s"]) for r in ok
               if r["target"] == target and r["tp"] == 1 and r["intensity"] and r["latency_s"]]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, label=target)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attained FLOP/s")
    ax.set_title("roofline: every cell (TP 1)")
    if ax.get_legend_handles_labels()[0]:  # no TP-1 cell: nothing to label
        ax.legend(fontsize=6)
    out.append(_save(fig, stem.with_name(stem.name + ".roofline.png")))
    return out


def _save(fig: Any, path: Path) -> Path:
    """Write a figure as PNG atomically and close it."""
    import matplotlib.pyplot as plt

    from irbridge.atomic import atomic_file

    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return path
