"""StableHLO -> IR: text (.mlir) and portable artifacts (.mlirbc) into an irbridge Model.

The module is parsed (or deserialized) with the MLIR Python bindings and `@main` is
walked op by op; `func.call`s and unrecognised `stablehlo.composite`s are inlined, and
every op goes through a handler of `_import_ops.HANDLERS` that emits neutral ops. An op
without a handler, or one whose form a handler cannot express (`Unsupported`), becomes
an opaque node of its dialect's domain, with a warning: never a failure, never dropped.

Broadcasts are kept implicit where the IR allows it: `broadcast_in_dim` gives a value
whose IR shape only broadcasts to its StableHLO shape (size-1 dims), which elementwise
consumers use as is (numpy broadcasting) and other consumers expand on first use. That
keeps JAX's and torch-mlir's scalar broadcasts out of the graph.

Provenance: every node gets source_format "stablehlo", source_op the StableHLO op name,
module_path the outermost name of the op's location, source_node the next one, and the
file:line of the location (irbridge's own exports write `loc("module.path"("source
op"("file":line:0)))`, so a round trip keeps all three).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from irbridge._gc import gc_paused
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.errors import CaptureError, FileFormatError, OpError
from irbridge.ir import (
    AttrValue,
    Graph,
    Model,
    Node,
    Provenance,
    SourceLocation,
    Tensor,
    TensorType,
    Value,
    normalize_attr,
)
from irbridge.ops import registry

from .._budget import inline_budget as _inline_budget
from ._bind import bind_main, main_function, require_static
from ._chlo import legalize_chlo, uses_chlo
from ._jax_exported import MAX_SERIALIZATION_VERSION, NotExported, read_exported
from ._mlir import (
    BYTECODE_MAGIC,
    MAX_BRACKET_DEPTH,
    MAX_BYTECODE_DEPTH,
    RankedType,
    artifact_version,
    attr_to_array,
    bytecode_depth,
    complex_literal_mismatch,
    current_version,
    diagnostics_line,
    huge_list_index,
    minimum_version,
    new_context,
    one_line,
    parse_location,
    ranked_type,
    string_value,
    text_too_deep,
    version_tuple,
)
from ._shardy import is_shardy_problem, shardy_to_generic, uses_shardy_syntax

SOURCE_FORMAT = "stablehlo"
OPAQUE_REASON = "stablehlo.opaque_reason"
"""Annotation value on opaque nodes: why the importer could not map the op."""

SHARDING_PREFIX = "stablehlo.sharding."
"""Model metadata key prefix: `stablehlo.sharding.VALUE` holds the sharding annotation of the
graph value named VALUE (an argument's or result's `sdy.sharding` / `mhlo.sharding`, a
`with_sharding_constraint`, an op's sharding attribute), as the file wrote it; several
different annotations of one value are joined by ' then ' in program order."""

MESH_PREFIX = "stablehlo.mesh."
"""Model metadata key prefix: `stablehlo.mesh.NAME` holds the axes of the Shardy mesh
symbol @NAME as the file wrote them (`["dp"=2, "tp"=4]`)."""

_SHARDING_ATTRS = ("sdy.sharding", "mhlo.sharding")

SMALL_CONSTANT = 16
"""Constants with at most this many elements become `constant` nodes; larger ones model
tensors (weights)."""


class StableHLOImportWarning(UserWarning):
    """Some ops were kept as opaque nodes (the rest of the graph imported)."""


class Unsupported(Exception):
    """A handler cannot express this op in neutral ops; it becomes an opaque node."""


@dataclass
class ImportReport:
    source: str
    version: str | None = None
    opaque: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    ops: Counter[str] = field(default_factory=Counter)


# -- entry points -------------------------------------------------------------------------------

def import_stablehlo(path: str | os.PathLike[str], *,
                     dims: Mapping[str, int] | None = None) -> Model:
    """Read a StableHLO module (.mlir text, or a .mlirbc portable artifact / MLIR
    bytecode) into an IR model. `dims` gives a shape-polymorphic program's symbolic dims
    sizes (`{"b": 8}`; see `_bind.py`), whose shapes are then refined to static ones."""
    return import_stablehlo_with_report(path, dims=dims)[0]


def import_stablehlo_with_report(path: str | os.PathLike[str], *,
                                 dims: Mapping[str, int] | None = None
                                 ) -> tuple[Model, ImportReport]:
    p = Path(path)
    try:
        kind = p.stat().st_mode
        if not stat.S_ISREG(kind):  # a FIFO would block, /dev/zero never end
            what = "a folder" if stat.S_ISDIR(kind) else "not a regular file"
            raise FileFormatError(f"{p}: is {what}, not a StableHLO module")
        data = p.read_bytes()
    except OSError as exc:
        raise FileFormatError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    model, report = _from_bytes(data, str(p), dims)
    if not model.name:
        model.name = p.stem
    return model, report


def from_mlir(source: str | bytes | ir.Module, *, name: str = "") -> Model:
    """Import StableHLO text, portable-artifact bytes, or a parsed module."""
    if isinstance(source, ir.Module):
        model, _ = _Importer(source, "<module>", None, None).run()
    else:
        data = source.encode("utf-8") if isinstance(source, str) else bytes(source)
        model, _ = _from_bytes(data, "<string>")
    if name:
        model.name = name
    return model


MAX_REGION_DEPTH = 64
"""Deepest nesting of regions (control-flow bodies, reducers) plus inlined calls the
importer follows; deeper programs are refused before the walk (which recurses per level)."""

_STACK_BYTES = 512 << 20
"""Stack of the thread that runs MLIR's deserialiser and the walk on bytecode: MLIR
recurses once per nesting level (a few KB each); the pre-scans bound the depth, this is
the margin for a bytecode the scan cannot read (MLIR's reader then refuses it)."""


@gc_paused
def _from_bytes(data: bytes, source: str,
                dims: Mapping[str, int] | None = None) -> tuple[Model, ImportReport]:
    """Parse and import in a thread with a large stack (warnings and errors come back to
    the caller's thread); the module is freed in that thread too."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcome["result"] = _parse_and_import(data, source, dims)
            except BaseException as exc:  # re-raised in the caller's thread
                if exc.__traceback__ is not None:  # free MLIR objects here, not there
                    traceback.clear_frames(exc.__traceback__)
                outcome["error"] = exc
        outcome["warnings"] = caught

    stack = _STACK_BYTES if data.startswith(BYTECODE_MAGIC) else 64 << 20
    previous = threading.stack_size()
    threading.stack_size(stack)
    try:
        thread = threading.Thread(target=work, name="irbridge-stablehlo-import")
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    for record in outcome.get("warnings", []):
        warnings.warn(record.message, stacklevel=3)
    if "error" in outcome:
        raise outcome["error"]
    result: tuple[Model, ImportReport] = outcome["result"]
    return result


def _parse_and_import(data: bytes, source: str,
                      dims: Mapping[str, int] | None = None) -> tuple[Model, ImportReport]:
    if not data.strip():
        raise FileFormatError(f"{source}: empty file, not a StableHLO module")
    if not data.startswith(BYTECODE_MAGIC):
        data = _unwrap_jax_exported(data, source)
    diagnostics: list[str] = []
    ctx = new_context(allow_unregistered=True, diagnostics=diagnostics)
    version: str | None = None
    text: str | None = None
    with ctx:
        if data.startswith(BYTECODE_MAGIC):
            depth = bytecode_depth(data, MAX_BYTECODE_DEPTH)
            if depth is not None and depth > MAX_BYTECODE_DEPTH:
                raise FileFormatError(f"{source}: regions nest more than {MAX_BYTECODE_DEPTH} "
                                      "levels deep in the bytecode; refusing to deserialize "
                                      "(no real program nests this deep)")
            _probe_bytecode(data, source)
            version = artifact_version(data)
            if version is not None:
                _check_artifact_version(version, source)
            try:
                if version is not None:
                    module = _stablehlo.deserialize_portable_artifact(ctx, data)
                else:
                    module = ir.Module.parse(data)
            except Exception as exc:
                problem = diagnostics_line(exc, diagnostics)
                if not is_shardy_problem(problem):
                    what = f"cannot deserialize the StableHLO v{version} portable artifact" \
                        if version is not None else \
                        "not a StableHLO portable artifact, and not readable MLIR bytecode"
                    raise FileFormatError(f"{source}: {what}: {problem}") from exc
                text = shardy_to_generic(data, source)
                module = _parse_text(text, source)
        else:
            if b"\0" in data:  # before decoding: a sparse file of zeros is gigabytes of them
                raise FileFormatError(f"{source}: neither MLIR text (it holds NUL bytes) nor MLIR "
                                      "bytecode")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FileFormatError(f"{source}: neither MLIR text (not UTF-8) nor MLIR "
                                      "bytecode") from exc
            text = text.removeprefix("\ufeff")  # a byte order mark (editors on Windows)
            line = text_too_deep(text)
            if line is not None:
                raise FileFormatError(f"{source}: line {line}: brackets nest deeper than "
                                      f"{MAX_BRACKET_DEPTH} levels; refusing to parse (no "
                                      "real program nests this deep)")
            huge = huge_list_index(text)
            if huge is not None:
                raise FileFormatError(f"{source}: line {huge[0]}: {huge[1]} in a dimension "
                                      "or index list; no tensor has that many dims or "
                                      "elements along one")
            mismatch = complex_literal_mismatch(text)
            if mismatch is not None:
                raise FileFormatError(f"{source}: line {mismatch[0]}: a complex literal "
                                      f"(re, im) for a {mismatch[1]} constant")
            if uses_shardy_syntax(text):  # jaxlib legalises CHLO on the way
                text = shardy_to_generic(text.encode("utf-8"), source)
            elif uses_chlo(text):
                text = legalize_chlo(text, source)
            module = _parse_text(text, source)
        try:
            if dims:
                bind_main(module, dims, source)
                text = None  # refined: the parsed text no longer describes the module
            else:
                require_static(module, source)
            return _Importer(module, source, version, text).run()
        finally:
            del module


def _parse_text(text: str, source: str) -> ir.Module:
    try:
        return ir.Module.parse(text)
    except Exception as exc:
        raise FileFormatError(f"{source}: {_parse_problem(exc)}") from exc


_PROBE = """
import resource, sys
# never outlive the reader that started it (a parent killed with SIGKILL cannot kill it):
# the kernel stops it past its CPU seconds, and at once when the parent dies
seconds = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL (Linux)
except (OSError, AttributeError):
    pass
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo
data = sys.stdin.buffer.read()
ctx = ir.Context()
_stablehlo.register_dialect(ctx)
ctx.allow_unregistered_dialects = True
ctx.attach_diagnostic_handler(lambda diagnostic: True)
with ctx:
    try:
        if data[4:64].find(b"StableHLO_v") >= 0:
            module = _stablehlo.deserialize_portable_artifact(ctx, data)
        else:
            module = ir.Module.parse(data)
        module.operation.get_asm(large_elements_limit=64)  # reads every attribute
    except Exception:
        pass
"""


PROBE_SECONDS = 10
"""Time MLIR's bytecode reader gets in the probe child, plus one second per 20 MB."""


def _probe_bytecode(data: bytes, source: str) -> None:
    """Read the bytecode once in a child process first: on some corrupt inputs MLIR's
    reader (VHLO's attribute readers) corrupts the heap and aborts the whole process
    (found by mutating exported artifacts; one flipped byte of the attribute offsets is
    enough), which no check here can foresee. Errors are left to the real read in this
    process, which reports them in one line; only a crash or a hang is reported here."""
    # seconds: a real artifact reads in well under a second plus its bytes at far more than
    # 20 MB/s; a mutated one can keep MLIR's reader busy for minutes (a count read from a
    # flipped varint: a 19 KB .jaxexport ran past 100 s), which is refused at the limit
    limit = PROBE_SECONDS + len(data) // (20 << 20)
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(limit + 5)], input=data,
                              timeout=limit,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise FileFormatError(f"{source}: MLIR's bytecode reader did not finish in {limit} s "
                              "(corrupt or hostile bytecode?); refusing") from exc
    except OSError as exc:
        raise FileFormatError(f"{source}: cannot start the bytecode check: {exc}") from exc
    if proc.returncode != 0:
        how = (f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               and -proc.returncode in signal.valid_signals() else f"exit {proc.returncode}")
        raise FileFormatError(f"{source}: MLIR's bytecode reader crashed on this file ({how}); "
                              "the bytecode is corrupt")


def _unwrap_jax_exported(data: bytes, source: str) -> bytes:
    """The portable artifact inside a serialized `jax.export` Exported, else `data`."""
    try:
        module, _, version = read_exported(data)
    except NotExported:
        return data
    if version > MAX_SERIALIZATION_VERSION:
        warnings.warn(f"{source}: jax.export serialization version {version} is newer than "
                      f"the {MAX_SERIALIZATION_VERSION} this reader was checked against; "
                      "reading its StableHLO module", StableHLOImportWarning, stacklevel=3)
    return module


def _check_artifact_version(version: str, source: str) -> None:
    current, minimum = current_version(), minimum_version()
    try:
        wanted = version_tuple(version)
    except ValueError as exc:
        raise FileFormatError(f"{source}: portable artifact has an unreadable version "
                              f"{version!r}") from exc
    if wanted > version_tuple(current):
        raise FileFormatError(f"{source}: portable artifact targets StableHLO v{version}, newer "
                              f"than this reader (v{minimum} to v{current}); serialize it for "
                              f"target {current} or older")
    if wanted < version_tuple(minimum):
        raise FileFormatError(f"{source}: portable artifact targets StableHLO v{version}, older "
                              f"than this reader supports (v{minimum} to v{current})")


def _parse_problem(exc: BaseException) -> str:
    line = diagnostics_line(exc)
    match = re.search(r"[Dd]ialect `([\w.]+)' not found for custom op '([\w.]+)'", line)
    if match:
        where = line.split(": ", 1)[0] if line.startswith("line ") else ""
        return (f"{where + ': ' if where else ''}op '{match[2]}' belongs to unknown dialect "
                f"'{match[1]}' (this reader knows func and stablehlo; ops of other dialects "
                "import as opaque nodes only in MLIR's generic form)")
    return f"malformed MLIR: {line}"


# -- importer -------------------------------------------------------------------------------------

@dataclass
class Bound:
    """An IR value standing for a StableHLO value of static `shape`: its own shape is
    either `shape` or broadcasts to it (same rank, size-1 dims) when `lazy`."""

    value: Value
    shape: tuple[int, ...]

    @property
    def lazy(self) -> bool:
        t = self.value.type
        return t is None or t.shape != self.shape


class Scope:
    """Values of one region or inlined function; regions see their parents' values."""

    def __init__(self, builder: GraphBuilder, parent: Scope | None = None,
                 isolated: bool = False) -> None:
        self.builder = builder
        self.parent = None if isolated else parent
        self.env: dict[ir.Value, Bound] = {}
        self.tuples: dict[ir.Value, tuple[Any, ...]] = {}  # of Bounds and nested tuples

    @property
    def graph(self) -> Graph:
        return self.builder.graph

    def find(self, value: ir.Value) -> tuple[Bound, Scope] | None:
        scope: Scope | None = self
        while scope is not None:
            bound = scope.env.get(value)
            if bound is not None:
                return bound, scope
            scope = scope.parent
        return None

    def find_tuple(self, value: ir.Value) -> tuple[Any, ...] | None:
        scope: Scope | None = self
        while scope is not None:
            items = scope.tuples.get(value)
            if items is not None:
                return items
            scope = scope.parent
        return None

    def child(self, builder: GraphBuilder | None = None) -> Scope:
        return Scope(builder or self.builder, self)


class _Importer:
    def __init__(self, module: ir.Module, source: str, version: str | None,
                 text: str | None) -> None:
        self.module = module
        self.source = source
        self.text = text
        self.report = ImportReport(source, version)
        self.model = Model(source_format=SOURCE_FORMAT)
        self.funcs: dict[str, Any] = {}
        self.inlining: list[str] = []
        self._resources: dict[str, bytes] | None = None
        self.tensor_names: set[str] = set()
        self.shardings: list[tuple[Value, str]] = []

    # -- driver ---------------------------------------------------------------------------------
    def run(self) -> tuple[Model, ImportReport]:
        for op in self.module.body.operations:
            if op.operation.name == "func.func":
                self.funcs[_symbol(op)] = op
            elif op.operation.name == "sdy.mesh" and "mesh" in op.attributes:
                mesh = str(op.attributes["mesh"])
                axes = mesh.removeprefix("#sdy.mesh<").removesuffix(">")
                self.model.metadata[MESH_PREFIX + _symbol(op)] = axes
        main = main_function(self.module)
        if main is None:
            public = [op for op in self.funcs.values()
                      if "sym_visibility" not in op.attributes
                      or _str(op.attributes["sym_visibility"]) == "public"]
            raise FileFormatError(f"{self.source}: the module has no @main function (and "
                                  f"{len(public)} public functions)")
        self.check_program(_symbol(main))
        module_op = self.module.operation
        if "sym_name" in module_op.attributes:
            self.model.name = _str(module_op.attributes["sym_name"])
        for key in ("irbridge.producer", "mhlo.num_partitions", "mhlo.num_replicas"):
            if key in module_op.attributes:
                self.model.metadata[f"stablehlo.{key}"] = _attr_text(module_op.attributes[key])
        graph = Graph("main")
        self.model.graphs.append(graph)
        builder = GraphBuilder(graph, self.model)
        scope = Scope(builder)
        block = main.regions[0].blocks[0]
        names: set[str] = set()
        for index, arg in enumerate(block.arguments):
            rt = self.static_type(arg.type, f"{self.source}: @main argument {index}")
            loc = parse_location(str(arg.location))
            base = _value_name(loc.names[0] if loc.names else f"arg{index}")
            name = base if base not in names else graph.unique_name(base)
            names.add(name)
            value = graph.add_input(name, TensorType(_dtype(rt, f"@main argument {index}"),
                                                     rt.static_shape()))
            scope.env[arg] = Bound(value, rt.static_shape())
            self.note_sharding(value, _sharding_in(main, "arg_attrs", index))
        results = self.block(scope, block)
        outputs = [self.materialize(scope, r) for r in results]
        outputs = self.output_values(graph, builder, outputs, main)
        graph.set_outputs(outputs)
        for index, value in enumerate(outputs):
            self.note_sharding(value, _sharding_in(main, "res_attrs", index))
        self.finish()
        return self.model, self.report

    def check_program(self, main: str) -> None:
        """Refuse what the walk cannot import in bounded stack, time and memory, before
        it starts: regions and inlined calls nested deeper than MAX_REGION_DEPTH, and more
        than the inlined-op budget once every call is expanded (40 functions that each
        call the next twice are 2^40 ops). Iterative; each function is scanned once."""
        limit = _inline_budget()
        scanned: dict[str, tuple[int, int, list[tuple[str, int]], str | None]] = {}
        total: dict[str, int] = {}
        depth: dict[str, int] = {}
        on_path: set[str] = set()
        stack: list[tuple[str, bool]] = [(main, False)]
        while stack:
            name, done = stack.pop()
            if done:
                ops, own_depth, calls, _ = scanned[name]
                count, deepest = ops, own_depth
                for callee, site in calls:
                    count += total[callee]
                    deepest = max(deepest, site + depth[callee])
                total[name], depth[name] = min(count, limit + 1), deepest
                on_path.discard(name)
                continue
            if name in total:
                continue
            if name in on_path:
                raise CaptureError(f"{self.source}: @{name} calls itself (directly or through "
                                   "other functions); recursion cannot be inlined")
            func = self.funcs.get(name)
            scanned[name] = (0, 0, [], None) if func is None else _scan_function(func)
            construct = scanned[name][3]
            if construct is not None:
                raise CaptureError(
                    f"{self.source}: @{name}: {construct} makes it a per-device SPMD program "
                    "(each device computes its shard and exchanges data with the others); "
                    "irbridge imports global programs only: lower the function with jax.jit "
                    "and in_shardings/out_shardings or with_sharding_constraint instead of "
                    "shard_map or pmap")
            on_path.add(name)
            stack.append((name, True))
            for callee, _ in scanned[name][2]:
                if callee not in total:
                    if callee in on_path:
                        raise CaptureError(f"{self.source}: @{callee} calls itself (directly "
                                           "or through other functions); recursion cannot "
                                           "be inlined")
                    stack.append((callee, False))
        if depth[main] > MAX_REGION_DEPTH:
            raise FileFormatError(f"{self.source}: @{main} nests regions and calls "
                                  f"{depth[main]} levels deep, more than the "
                                  f"{MAX_REGION_DEPTH} the importer follows")
        if total[main] > limit:
            raise FileFormatError(f"{self.source}: @{main} expands to more than {limit:,} ops "
                                  "once its calls are inlined; refusing (set "
                                  "IRBRIDGE_MAX_INLINED_OPS to raise the limit)")

    def output_values(self, graph: Graph, builder: GraphBuilder, outputs: list[Value],
                      main: Any) -> list[Value]:
        """Name the outputs after the result attributes (irbridge.name, jax.result_info)
        where possible; inputs, parameters and repeats get an identity node."""
        names: list[str | None] = [None] * len(outputs)
        if "res_attrs" in main.attributes:
            for i, attrs in enumerate(main.attributes["res_attrs"]):
                for key in ("irbridge.name", "jax.result_info"):
                    if i < len(names) and key in attrs:
                        names[i] = _value_name(_str(attrs[key]))
                        break
        final: list[Value] = []
        seen: set[int] = set()
        for value, name in zip(outputs, names, strict=True):
            if value.producer is None or id(value) in seen or value.producer.op == "constant":
                value = builder.op("identity", [value], name=name or "output")
            seen.add(id(value))
            if name and value.name != name and value.tensor is None:
                other = graph.values.get(name)
                if other is not None and other.tensor is None and \
                        id(other) not in {id(v) for v in final}:
                    _rename(graph, other, graph.unique_name(f"{name}_inner"))
                if name not in graph.values:
                    _rename(graph, value, name)
            final.append(value)
        return final

    def note_sharding(self, value: Value, text: str | None) -> None:
        """Record a sharding annotation of `value` (written to the metadata by finish):
        shardings say how devices split a value, never what it is."""
        if text:
            self.shardings.append((value, text))

    def op_shardings(self, scope: Scope, op: Any) -> None:
        """Record an op's own sharding attribute (`sdy.sharding`, a per-value list, or
        `mhlo.sharding`, a tuple sharding for several results) on its results."""
        text = next((_attr_text(op.attributes[key]) for key in _SHARDING_ATTRS
                     if key in op.attributes), None)
        if text is None:
            return
        results = list(op.results)
        parts = _per_value(text, len(results))
        for result, part in zip(results, parts, strict=True):
            found = scope.find(result)
            if found is not None:
                self.note_sharding(found[0].value, part)

    def write_shardings(self) -> None:
        alive = {id(v) for graph in self.model.graphs for v in _all_values(graph)}
        meta = self.model.metadata
        for value, text in self.shardings:
            if id(value) not in alive:
                continue
            key = SHARDING_PREFIX + value.name
            prior = meta.get(key)
            if prior is None:
                meta[key] = text
            elif not prior.endswith(text):
                meta[key] = f"{prior} then {text}"

    def finish(self) -> None:
        """Drop what the handlers emitted but nothing reads (iotas of recognised
        arg-max patterns, replaced constants), number nodes uniquely across all graphs,
        and record what was not mapped."""
        for graph in self.model.graphs:
            _prune(graph)
        used = {v.tensor.name for graph in self.model.graphs for v in _all_parameters(graph)
                if v.tensor is not None}
        for name in [n for n in self.model.tensors if n not in used]:
            del self.model.tensors[name]
        taken: set[str] = set()
        for graph in self.model.graphs:
            _distinct_names(graph, taken, top=True)
        self.model.renumber_nodes()
        self.write_shardings()
        report = self.report
        meta = self.model.metadata
        meta["stablehlo.source"] = self.source
        if report.version:
            meta["stablehlo.artifact_version"] = report.version
        if report.opaque:
            summary = ", ".join(f"{k} x{v}" for k, v in sorted(report.opaque.items()))
            meta["stablehlo.opaque"] = summary
            warnings.warn(f"{self.source}: kept {sum(report.opaque.values())} op(s) as opaque "
                          f"nodes: {summary}", StableHLOImportWarning, stacklevel=4)

    # -- walking --------------------------------------------------------------------------------
    def block(self, scope: Scope, block: Any) -> list[ir.Value]:
        """Import the ops of a block; return the operands of its terminator."""
        for op in block.operations:
            name = op.operation.name
            if name in ("func.return", "stablehlo.return"):
                return list(op.operands)
            self.op(scope, op)
        return []

    def op(self, scope: Scope, op: Any) -> None:
        from ._import_ops import HANDLERS

        name = op.operation.name
        self.report.ops[name] += 1
        loc = parse_location(str(op.location))
        where = self.where(name, loc)
        if name in ("stablehlo.tuple", "stablehlo.get_tuple_element"):
            self.tuple_op(scope, op, where)
            return
        computed = name == "stablehlo.custom_call" and "call_target_name" in op.attributes \
            and _str(op.attributes["call_target_name"]) in SHAPES_COMPUTED
        types = [self.static_type(r.type, f"{where}: result {i}", dims_unknown=computed)
                 for i, r in enumerate(op.results)]
        saved = scope.builder.provenance
        scope.builder.provenance = self.provenance(name, loc)
        try:
            handler = HANDLERS.get(name)
            if handler is None:
                self.opaque(scope, op, types, f"no mapping of {name} to neutral ops")
                return
            try:
                outs = handler(self, scope, op, types)
            except Unsupported as exc:
                if not all(rt.is_static for rt in types):   # no type for an opaque node
                    raise CaptureError(f"{where}: a result has a dynamic shape and the op "
                                       f"cannot be imported: {exc}") from exc
                self.opaque(scope, op, types, str(exc))
                return
            except (OpError, ValueError, KeyError, IndexError, TypeError) as exc:
                raise CaptureError(f"{where}: cannot import: {one_line(str(exc))}") from exc
            if computed:   # the result types the handler's values have
                types = [dataclasses.replace(rt, shape=_value_shape(out))
                         for rt, out in zip(types, outs, strict=True)]
            self.bind(scope, op, outs, types, where)
            self.op_shardings(scope, op)
        finally:
            scope.builder.provenance = saved

    def tuple_op(self, scope: Scope, op: Any, where: str) -> None:
        """Tuples only group values: a tuple is its elements, get_tuple_element one."""
        if op.operation.name == "stablehlo.tuple":
            items: list[Any] = []
            for v in op.operands:
                nested = scope.find_tuple(v)
                items.append(nested if nested is not None else self.lookup(scope, v)[0])
            scope.tuples[op.results[0]] = tuple(items)
            return
        found = scope.find_tuple(op.operands[0])
        if found is None:
            raise CaptureError(f"{where}: reads a tuple that is not built by stablehlo.tuple "
                               "in the program")
        item = found[int(ir.IntegerAttr(op.attributes["index"]).value)]
        if isinstance(item, tuple):
            scope.tuples[op.results[0]] = item
        else:
            scope.env[op.results[0]] = item

    def bind(self, scope: Scope, op: Any, outs: Sequence[Value | Bound],
             types: list[RankedType], where: str) -> None:
        results = list(op.results)
        if len(outs) != len(results):
            raise CaptureError(f"{where}: internal error: {len(outs)} values for "
                               f"{len(results)} results")
        for result, out, rt in zip(results, outs, types, strict=True):
            bound = out if isinstance(out, Bound) else Bound(out, rt.static_shape())
            bound = self.conform(scope, bound, rt, where)
            scope.env[result] = bound

    def conform(self, scope: Scope, bound: Bound, rt: RankedType, where: str) -> Bound:
        """Check an emitted value against the StableHLO result type; fix dtype and
        (same element count) shape differences."""
        value, shape = bound.value, rt.static_shape()
        dtype = _dtype(rt, where)
        t = value.type
        if t is None or not t.is_static:
            raise CaptureError(f"{where}: internal error: imported value has type {t}")
        have = t.static_shape()
        if have != shape:
            fits = len(have) == len(shape) and all(h in (1, s) for h, s in
                                                   zip(have, shape, strict=True))
            if not fits:
                if int(np.prod(have)) != int(np.prod(shape)):
                    raise CaptureError(f"{where}: internal error: imported value has shape "
                                       f"{list(have)}, StableHLO says {list(shape)}")
                value = scope.builder.op("reshape", [value], {"shape": shape})
        if t.dtype != dtype:
            value = scope.builder.op("cast", [value], {"dtype": dtype})
        return Bound(value, shape)

    # -- values ------------------------------------------------------------------------------------
    def lookup(self, scope: Scope, value: ir.Value) -> tuple[Bound, Scope]:
        found = scope.find(value)
        if found is None and scope.find_tuple(value) is not None:
            raise CaptureError(f"{self.source}: a tuple is used as a tensor (returned, passed "
                               "to a call or an op); the importer reads tuples only through "
                               "stablehlo.get_tuple_element")
        if found is None:
            raise CaptureError(f"{self.source}: internal error: a value is used before it "
                               "is defined")
        return found

    def lazy(self, scope: Scope, value: ir.Value) -> Value:
        """The IR value of an operand; it may only broadcast to the StableHLO shape."""
        return self.lookup(scope, value)[0].value

    def materialize(self, scope: Scope, value: ir.Value) -> Value:
        """The IR value of an operand with exactly its StableHLO shape (a lazy broadcast
        is expanded, once per scope)."""
        bound, owner = self.lookup(scope, value)
        if not bound.lazy:
            return bound.value
        data = registry.constant_value(bound.value)
        if data is not None and int(np.prod(bound.shape)) <= SMALL_CONSTANT:
            full = self.constant(scope, np.broadcast_to(data, bound.shape).copy())
        else:
            full = scope.builder.op("expand", [bound.value], {"shape": bound.shape})
        if owner is scope:
            scope.env[value] = Bound(full, bound.shape)
        return full

    def shape(self, value: ir.Value) -> tuple[int, ...]:
        rt = ranked_type(value.type)
        assert rt is not None and rt.is_static
        return rt.static_shape()

    def const_array(self, scope: Scope, value: ir.Value) -> np.ndarray | None:
        """The data of a StableHLO value known at import time (broadcast to its shape)."""
        found = scope.find(value)
        if found is None:
            return None
        data = registry.constant_value(found[0].value)
        if data is None:
            return None
        return np.broadcast_to(data, found[0].shape)

    def constant(self, scope: Scope, array: np.ndarray, name: str = "const") -> Value:
        """A small constant node, or a model tensor for a large one."""
        array = np.asarray(array)
        if array.size <= SMALL_CONSTANT:
            return scope.builder.constant(array, name=_value_name(name),
                                          dtype=DType.from_numpy(array.dtype))
        tensor = Tensor.from_array(self.tensor_name(_value_name(name), scope.graph),
                                   np.ascontiguousarray(array))
        return scope.builder.parameter(tensor)

    def tensor_name(self, base: str, graph: Graph) -> str:
        """A model tensor name used by no tensor and no value of `graph`."""
        base = base or "const"
        name, index = base, 1
        while name in self.tensor_names or name in self.model.tensors or name in graph.values:
            name = f"{base}_{index}"
            index += 1
        self.tensor_names.add(name)
        return name

    def resource(self, key: str) -> bytes | None:
        """Data of a dense_resource blob, read from the module's text."""
        if self._resources is None:
            text = self.text if self.text is not None else str(self.module)
            self._resources = {}
            start = text.find("dialect_resources")
            if start >= 0:
                for match in re.finditer(r'([\w.$\-]+|"[^"]*")\s*:\s*"0x([0-9A-Fa-f]*)"',
                                         text[start:]):
                    self._resources[match[1].strip('"')] = bytes.fromhex(match[2])
        blob = self._resources.get(key)
        return None if blob is None else blob[4:]  # the first 4 bytes hold the alignment

    # -- types, provenance, opaque nodes --------------------------------------------------------
    def static_type(self, t: ir.Type, where: str, dims_unknown: bool = False) -> RankedType:
        """The type `t` names, which must be static (`dims_unknown`: its dims may be
        dynamic, the handler computes them)."""
        rt = ranked_type(t)
        if rt is None:
            raise CaptureError(f"{where} has type {t}, not a ranked tensor; the importer "
                               "reads tensor programs only")
        if not rt.is_static and not dims_unknown:
            raise CaptureError(f"{where} has dynamic shape {t}, which the importer cannot "
                               "resolve; export the program with static shapes")
        if rt.dtype is None:
            raise CaptureError(f"{where}: element type {rt.element} has no irbridge dtype")
        return rt

    def where(self, op: str, loc: Any) -> str:
        place = ""
        if loc.file:
            place = f"{loc.file}:{loc.line}:{loc.col}" if loc.file != "-" else \
                f"{self.source}:{loc.line}:{loc.col}"
        elif loc.names:
            place = loc.names[0]
        return f"{self.source}: {op}" + (f" at {place}" if place else "")

    def provenance(self, op: str, loc: Any) -> Provenance:
        location = None
        if loc.file:
            location = SourceLocation(self.source if loc.file == "-" else loc.file, loc.line)
        return Provenance(SOURCE_FORMAT, op, loc.names[1] if len(loc.names) > 1 else "",
                          loc.names[0] if loc.names else "", "", location)

    def opaque(self, scope: Scope, op: Any, types: list[RankedType], reason: str) -> None:
        name = op.operation.name
        domain, _, short = name.partition(".")
        inputs = [self.materialize(scope, v) for v in op.operands]
        attrs: dict[str, AttrValue] = {}
        for key in _attribute_names(op):
            attrs[_value_name(key)] = _attr_value(op.attributes[key])
        graph = scope.graph
        outs: list[str] = []
        for i in range(len(types)):
            base = short or name if len(types) == 1 else f"{short or name}_{i}"
            out = graph.unique_name(base)
            while out in outs:
                out = graph.unique_name(f"{out}_{i}")
            outs.append(out)
        node = graph.add_node(short or name, inputs, outs, attrs,
                              output_types=[TensorType(_dtype(t, name), t.static_shape())
                                            for t in types],
                              domain=domain if short else "mlir",
                              provenance=scope.builder.provenance)
        node.annotations.values[OPAQUE_REASON] = reason
        for result, value in zip(op.results, node.outputs, strict=True):
            scope.env[result] = Bound(value, self.shape(result))
        qualified = node.qualified_op
        self.report.opaque[qualified] += 1
        self.report.warnings.append(f"{self.where(name, parse_location(str(op.location)))}: "
                                    f"kept as opaque node: {reason}")

    # -- nested code -----------------------------------------------------------------------------
    def call(self, scope: Scope, callee: str, operands: Sequence[ir.Value], where: str
             ) -> list[Bound]:
        """Inline a function: its body sees the caller's values as its arguments."""
        func = self.funcs.get(callee)
        if func is None:
            raise CaptureError(f"{where}: calls @{callee}, which the module does not define")
        if callee in self.inlining:
            raise CaptureError(f"{where}: @{callee} calls itself; recursion cannot be inlined")
        if not len(func.regions[0].blocks):
            raise CaptureError(f"{where}: calls @{callee}, a declaration without a body; "
                               "there is nothing to inline")
        self.inlining.append(callee)
        try:
            inner = Scope(scope.builder, scope, isolated=True)
            block = func.regions[0].blocks[0]
            for arg, operand in zip(block.arguments, operands, strict=True):
                inner.env[arg] = self.lookup(scope, operand)[0]
            results = self.block(inner, block)
            return [self.lookup(inner, r)[0] for r in results]
        finally:
            self.inlining.pop()

    def region_graph(self, scope: Scope, region: Any, name: str,
                     inputs: Sequence[tuple[str, TensorType]] = (),
                     args: Sequence[Value] | None = None) -> tuple[Graph, list[Value]]:
        """Import a region as a subgraph: block arguments become graph inputs (or are bound
        to `args`); values of enclosing scopes are read directly."""
        graph = Graph(name)
        builder = GraphBuilder(graph, self.model)
        inner = scope.child(builder)
        block = region.blocks[0]
        values = list(args) if args is not None else [graph.add_input(n, t) for n, t in inputs]
        for arg, value in zip(block.arguments, values, strict=False):
            inner.env[arg] = Bound(value, self.shape(arg))
        results = self.block(inner, block)
        outs = []
        for r in results:
            value = self.materialize(inner, r)
            if value.producer is None or value.producer not in graph.nodes:
                value = builder.op("identity", [value])
            outs.append(value)
        return graph, outs


_COLLECTIVES = frozenset(f"stablehlo.{name}" for name in (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
    "collective_broadcast"))
_DEVICE_INDEX = frozenset(("stablehlo.partition_id", "stablehlo.replica_id"))
_SHARD_SHAPE_TARGETS = frozenset(("SPMDFullToShardShape", "SPMDShardToFullShape"))


def _per_device_construct(name: str, attrs: Any) -> str | None:
    """What makes an op part of a per-device SPMD program (a shard_map or pmap body), or
    None: such a program computes one device's shard and exchanges data between devices,
    which a single global graph does not express."""
    if name == "sdy.manual_computation":
        return "shard_map body (sdy.manual_computation)"
    if name in _COLLECTIVES:
        return f"cross-device collective {name}"
    if name in _DEVICE_INDEX:
        return f"{name} (the index of the device running it)"
    if name == "stablehlo.custom_call" and "call_target_name" in attrs:
        target = _str(attrs["call_target_name"])
        if target in _SHARD_SHAPE_TARGETS:
            return f"shard_map/pmap body (custom_call @{target})"
    return None


def _scan_function(func: Any) -> tuple[int, int, list[tuple[str, int]], str | None]:
    """A function's own op count, its deepest region nesting (its body is level 1), its
    calls (callee, level of the call site; composites count as calls of their
    decomposition) and the first per-device SPMD construct it holds. Iterative, so any
    depth is safe to scan."""
    ops, deepest = 0, 0
    calls: list[tuple[str, int]] = []
    spmd: str | None = None
    stack = [(region, 1) for region in func.regions]
    while stack:
        region, level = stack.pop()
        deepest = max(deepest, level)
        for block in region.blocks:
            for op in block.operations:
                ops += 1
                name = op.operation.name
                attrs = op.operation.attributes
                if name == "func.call" and "callee" in attrs:
                    calls.append((_str(attrs["callee"]), level))
                elif name == "stablehlo.composite" and "decomposition" in attrs:
                    calls.append((_str(attrs["decomposition"]), level))
                elif spmd is None:
                    spmd = _per_device_construct(name, attrs)
                stack.extend((inner, level + 1) for inner in op.operation.regions)
    return ops, deepest, calls, spmd


def _rename(graph: Graph, value: Value, name: str) -> None:
    del graph.values[value.name]
    value.name = name
    graph.values[name] = value


def _prune(graph: Graph) -> None:
    """Remove neutral nodes (and parameters) whose values nothing reads; opaque nodes stay."""
    for node in graph.nodes:
        for sub in node.subgraphs():
            _prune(sub)
    outputs = {id(v) for v in graph.outputs}
    dead: list[Node] = []
    gone: set[int] = set()
    for node in reversed(graph.nodes):   # users come after producers: decide backwards
        if node.is_opaque or any(id(v) in outputs or any(id(u) not in gone for u, _ in v.uses)
                                 for v in node.outputs):
            continue
        dead.append(node)
        gone.add(id(node))
    graph.remove_nodes(dead)
    graph.parameters = [v for v in graph.parameters if v.uses or id(v) in outputs]
    kept = {id(v) for v in graph.parameters}
    for name in [n for n, v in graph.values.items()
                 if v.tensor is not None and id(v) not in kept]:
        del graph.values[name]


def _distinct_names(graph: Graph, taken: set[str], top: bool = False) -> None:
    """Rename values of control-flow bodies that repeat a name of an enclosing graph:
    bodies read outer values by name, so a repeated name would shadow them."""
    values = [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]
    for value in values:
        if value.name in taken and not top:
            base, index = value.name, 1
            while f"{base}_{index}" in taken or f"{base}_{index}" in graph.values:
                index += 1
            _rename(graph, value, f"{base}_{index}")
        taken.add(value.name)
    for node in graph.nodes:
        for sub in node.subgraphs():
            _distinct_names(sub, taken)


def _all_values(graph: Graph) -> list[Value]:
    found = list(graph.values.values())
    for node in graph.nodes:
        for sub in node.subgraphs():
            found += _all_values(sub)
    return found


def _sharding_in(func: Any, key: str, index: int) -> str | None:
    """The `sdy.sharding` / `mhlo.sharding` of argument or result `index` of a function
    (`key` is arg_attrs or res_attrs), or None."""
    if key not in func.attributes:
        return None
    attrs = list(func.attributes[key])
    if index >= len(attrs):
        return None
    for name in _SHARDING_ATTRS:
        if name in attrs[index]:
            return _attr_text(attrs[index][name])
    return None


_PER_VALUE = "#sdy.sharding_per_value<"


def _per_value(text: str, count: int) -> list[str]:
    """One sharding per result: the items of Shardy's `#sdy.sharding_per_value<[<...>,
    ...]>` (each as `#sdy.sharding<...>`) or of a GSPMD tuple sharding `{{...}, {...}}` of
    several results; else the annotation as is, for each result."""
    shardy = text.startswith(_PER_VALUE) and text.endswith(">")
    if count == 1 and not shardy:
        return [text]
    body = text[len(_PER_VALUE):-1].strip() if shardy else text.strip()
    if len(body) > 1 and body[0] + body[-1] in ("[]", "{}"):
        opening, closing = ("<[{(", ">]})") if shardy else ("[{(", "]})")  # GSPMD has `<=`
        items, depth, start = [], 0, 1
        for i, ch in enumerate(body[1:-1], start=1):
            depth += ch in opening
            depth -= ch in closing
            if ch == "," and depth == 0:
                items.append(body[start:i].strip())
                start = i + 1
        items.append(body[start:-1].strip())
        if len(items) == count:
            return [f"#sdy.sharding{item}" for item in items] if shardy else items
    return [text] * count


SHAPES_COMPUTED = frozenset({"stablehlo.dynamic_reduce_window"})
"""custom_call targets whose result shapes the importer computes from the operands:
shape refinement (--bind) makes the operands static but leaves the custom call's result
types dynamic."""


def _value_shape(out: Value | Bound) -> tuple[int | None, ...]:
    if isinstance(out, Bound):
        return tuple(out.shape)
    t = out.type
    if t is None or not t.is_static:
        raise CaptureError(f"value {out.name!r} has no static shape")
    return t.static_shape()


def _all_parameters(graph: Graph) -> list[Value]:
    found = list(graph.parameters)
    for node in graph.nodes:
        for sub in node.subgraphs():
            found += _all_parameters(sub)
    return found


# -- attribute helpers ---------------------------------------------------------------------------

def _symbol(op: Any) -> str:
    return _str(op.attributes["sym_name"])


def _str(attr: Any) -> str:
    if isinstance(attr, ir.StringAttr | ir.FlatSymbolRefAttr):
        return string_value(attr)
    return str(attr).strip('"')


def _attr_text(attr: Any) -> str:
    return _str(attr) if isinstance(attr, ir.StringAttr) else str(attr)


def _attr_value(attr: Any) -> AttrValue:
    """An MLIR attribute as an IR attribute value (its text where no IR kind fits)."""
    try:
        if isinstance(attr, ir.BoolAttr):
            return bool(attr.value)
        if isinstance(attr, ir.IntegerAttr):
            return int(attr.value)
        if isinstance(attr, ir.FloatAttr):
            return float(attr.value)
        if isinstance(attr, ir.StringAttr):
            return string_value(attr)
        if isinstance(attr, ir.DenseI64ArrayAttr | ir.DenseI32ArrayAttr):
            return tuple(int(v) for v in attr)
        if isinstance(attr, ir.DenseBoolArrayAttr):
            return tuple(int(bool(v)) for v in attr)
        if isinstance(attr, ir.DenseIntElementsAttr) and len(attr) <= 64:
            return tuple(int(v) for v in np.asarray(attr).reshape(-1))
        if isinstance(attr, ir.ArrayAttr):
            items = [_attr_value(a) for a in attr]
            return normalize_attr(items) if items else ()
    except (TypeError, ValueError):
        pass
    return str(attr)


def _attribute_names(op: Any) -> list[str]:
    names = []
    for item in op.attributes:
        names.append(item if isinstance(item, str) else item.name)
    return names


def _dtype(rt: RankedType, where: str) -> DType:
    if rt.dtype is None:
        raise CaptureError(f"{where}: element type {rt.element} has no irbridge dtype")
    return rt.dtype


def _value_name(text: str) -> str:
    name = re.sub(r"[^\w.\-:/\[\]]+", "_", text).strip("_") or "value"
    return name


def constant_data(importer: _Importer, attr: Any, rt: RankedType, where: str) -> np.ndarray:
    """The data of a constant's `value` attribute (dense or dense_resource)."""
    if isinstance(attr, ir.DenseResourceElementsAttr) or str(attr).startswith("dense_resource<"):
        key = str(attr)[len("dense_resource<"):].split(">")[0]
        blob = importer.resource(key)
        if blob is None:
            raise CaptureError(f"{where}: dense_resource {key!r} has no data in the module")
        dtype = _dtype(rt, where)
        data = np.frombuffer(blob, dtype=dtype.numpy)
        if data.size != int(np.prod(rt.static_shape(), dtype=object)):
            raise CaptureError(f"{where}: dense_resource {key!r} holds {data.size} elements, "
                               f"the type says {list(rt.static_shape())}")
        return data.reshape(rt.static_shape()).copy()
    if not isinstance(attr, ir.DenseElementsAttr):
        raise Unsupported(f"constant attribute {one_line(str(attr), 80)} is not dense")
    return attr_to_array(attr, rt, lazy_splat=True)


def module_ops(module: ir.Module) -> Counter[str]:
    """Op names of a module (all functions, nested regions included)."""
    counts: Counter[str] = Counter()

    def visit(op: Any) -> Any:
        counts[op.name] += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return counts


__all__ = [
    "SOURCE_FORMAT",
    "Bound",
    "ImportReport",
    "Scope",
    "StableHLOImportWarning",
    "Unsupported",
    "constant_data",
    "from_mlir",
    "import_stablehlo",
    "import_stablehlo_with_report",
    "module_ops",
]
