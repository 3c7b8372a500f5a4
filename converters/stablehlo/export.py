"""IR -> StableHLO: an MLIR module in the `func` and `stablehlo` dialects only.

The exporter walks the graph in order and writes every node as StableHLO ops in MLIR's
generic text form (see `_emitter.py`); ops without a direct lowering go through their
registry decomposition (`schema.decompose`) and the ops that produces. The text is
parsed into a module in a context with the StableHLO dialect, large constants are
filled in through the Python API, and the module is verified. From there it is printed
(`.mlir`) or serialized as a versioned portable artifact (`.mlirbc`). `export_stablehlo`
writes `.mlir` text without filling the weights in: MLIR prints the module around them
and each weight's hex literal is streamed into the file a chunk at a time (peak memory
about the weights once, not the weights plus MLIR's copy plus twice their size in text);
a portable artifact needs the whole module in memory and is refused past
`PORTABLE_WEIGHT_LIMIT` bytes of embedded weights.

Provenance is kept as MLIR locations: every op of a node carries
`loc("<module path>"("<source op>"("<file>":<line>:0)))`, i.e. a NameLoc with the module
path wrapping a NameLoc with the source op, wrapping the source file position when known.
Graph inputs are named by their block-argument locations (`loc("x")`), outputs by a
`irbridge.name` result attribute.
"""

from __future__ import annotations

import binascii
import io
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from irbridge._gc import gc_paused
from irbridge.atomic import atomic_file, check_output
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.errors import ExportError, IrbridgeError, OpError
from irbridge.ir import Graph, Model, Node, TensorType, Value
from irbridge.ops import registry

from ._emitter import Emitter, Sym, TypeSpec
from ._export_ops import LOWERINGS, Lowering, Unsupported
from ._mlir import (
    current_version,
    dense_attr,
    diagnostics_line,
    escape,
    minimum_version,
    new_context,
    tensor_type,
    version_tuple,
)

PRODUCER = "irbridge"

_DECOMPOSE_FIRST = frozenset({"gemm", "attention", "embedding", "adaptive_avg_pool"})
"""Ops lowered through their registry decomposition rather than a direct lowering."""

_FOLDED = frozenset({"constant", "full", "range", "shape_of"})
"""Ops whose value is fixed at export time (static shapes): written as constants."""

FOLD_LIMIT = 4096
"""Nodes whose inputs are all constants and whose outputs hold at most this many elements
(shape arithmetic, index tables) are evaluated at export time and written as constants."""

_SMALL_WEIGHT = 64
"""Model tensors up to this size count as constants for folding (axes, shapes and other
parameters stored as initializers); larger ones are weights, kept as they are."""

_OVERRIDES: dict[str, dict[int, tuple[str, str]]] = {
    # op: {input index: (attribute, kind)}: ONNX-style inputs that replace an attribute
    "cumsum": {1: ("axis", "int")}, "cumprod": {1: ("axis", "int")},
    **{op: {1: ("axes", "ints")} for op in ("reduce_sum", "reduce_mean", "reduce_max",
                                            "reduce_min", "reduce_prod", "reduce_l2",
                                            "reduce_log_sum_exp")},
    "pad": {1: ("pads", "ints"), 2: ("value", "float")},
    "resize": {1: ("scales", "floats"), 2: ("sizes", "ints")},
    "slice": {1: ("starts", "ints"), 2: ("ends", "ints"), 3: ("axes", "ints"),
              4: ("steps", "ints")},
    "split": {1: ("sizes", "ints")}, "tile": {1: ("repeats", "ints")},
    "trilu": {1: ("k", "int")}, "topk": {1: ("k", "int")}, "one_hot": {1: ("depth", "int")},
}
"""The shape-only inputs (squeeze, unsqueeze, reshape, expand) need no entry: those
lowerings take the static output type."""


@dataclass
class ExportedModule:
    """A built and verified module, with what went into it."""

    context: ir.Context
    module: ir.Module
    input_names: list[str]
    output_names: list[str]
    weight_names: list[str] = field(default_factory=list)  # trailing arguments, if any
    seconds: float = 0.0
    deferred: list[tuple[int, np.ndarray, DType]] = field(default_factory=list)
    """(index among main's first ops, data, dtype) of constants left as zero splats for
    `write_text` to fill in (`build_module(defer_weights=True)`)."""

    def text(self, *, debug_info: bool = True) -> str:
        with self.context:
            return str(self.module.operation.get_asm(enable_debug_info=debug_info))

    def write_text(self, handle: BinaryIO) -> None:
        """Write `text()` (UTF-8) to `handle`, the deferred constants' hex literals streamed
        in a chunk at a time: the same bytes, never the whole text in memory."""
        text = self.text()
        if not self.deferred:
            handle.write(text.encode("utf-8"))
            return
        lines = text.split("\n")
        del text
        head = next((i for i, line in enumerate(lines)
                     if line.lstrip().startswith("func.func @main(")), None)
        if head is None:
            raise ExportError("internal error: no func.func @main line in the printed module")
        pending = {head + 1 + index: (array, dtype) for index, array, dtype in self.deferred}
        for number, line in enumerate(lines):
            if number:
                handle.write(b"\n")
            if number not in pending:
                handle.write(line.encode("utf-8"))
                continue
            array, dtype = pending[number]
            start = line.find("dense<")
            end = line.find(">", start)
            if start < 0 or end < 0 or f": {tensor_type(dtype, array.shape)}" not in line:
                raise ExportError(f"internal error: line {number + 1} of the printed module "
                                  f"is not the expected constant: {line[:120]}")
            handle.write(line[:start].encode("utf-8") + b'dense<"0x')
            flat = np.ascontiguousarray(array).reshape(-1)
            raw = flat.astype(flat.dtype.newbyteorder("<"), copy=False).view(np.uint8)
            for offset in range(0, raw.size, _HEX_CHUNK):
                chunk = raw[offset:offset + _HEX_CHUNK].tobytes()
                handle.write(binascii.hexlify(chunk).upper())
            handle.write(b'"' + line[end:].encode("utf-8"))

    def artifact(self, target_version: str | None = None) -> bytes:
        if self.deferred:
            raise ExportError("internal error: a module with deferred weights has no artifact")
        version = check_target_version(target_version)
        with self.context:
            try:
                # serialize_portable_artifact(module) legalizes the module to VHLO in
                # place; going through bytecode leaves this module as it is
                buffer = io.BytesIO()
                self.module.operation.write_bytecode(buffer)
                return bytes(_stablehlo.serialize_portable_artifact_str(buffer.getvalue(),
                                                                        version))
            except Exception as exc:
                raise ExportError(f"StableHLO portable serialization (target {version}) "
                                  f"failed: {diagnostics_line(exc)}") from exc


def check_target_version(target: str | None) -> str:
    """The target version to serialize for (default: the current one), checked to lie
    between the minimum and the current version this StableHLO build writes."""
    current, minimum = current_version(), minimum_version()
    if target is None:
        return current
    try:
        wanted = version_tuple(target, "target version")
    except ValueError as exc:
        raise ExportError(str(exc)) from exc
    if not version_tuple(minimum) <= wanted <= version_tuple(current):
        raise ExportError(f"target version {target} is outside the range this StableHLO "
                          f"build writes ({minimum} to {current})")
    return ".".join(str(p) for p in wanted)


@gc_paused
def build_module(model: Model, *, weights_as_args: bool = False,
                 defer_weights: bool = False) -> ExportedModule:
    """Lower a model into a verified StableHLO module.

    `defer_weights` leaves the large constants MLIR prints as hex (`_streamable`) as the
    zero splats the emitter wrote, listed in `deferred`, for `export_stablehlo` to write
    into the `.mlir` text itself: MLIR then never holds a copy of the weights."""
    start = time.perf_counter()
    text, placeholders, inputs, outputs, weights = _ModuleWriter(model, weights_as_args).write()
    ctx = new_context()
    deferred: list[tuple[int, np.ndarray, DType]] = []
    with ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except Exception as exc:  # a bug of the exporter: say where
            raise ExportError(f"internal error: the emitted StableHLO does not parse: "
                              f"{diagnostics_line(exc)}") from exc
        del text
        main = _function(module, "main")
        ops = main.regions[0].blocks[0].operations
        for index, (op, (array, dtype)) in enumerate(zip(ops, placeholders, strict=False)):
            if defer_weights and _streamable(array, dtype):
                deferred.append((index, array, dtype))
            else:
                op.attributes["value"] = dense_attr(array, dtype)
        try:
            module.operation.verify()
        except Exception as exc:
            raise ExportError(f"internal error: the emitted StableHLO does not verify: "
                              f"{diagnostics_line(exc)}") from exc
    return ExportedModule(ctx, module, inputs, outputs, weights, time.perf_counter() - start,
                          deferred)


_HEX_DTYPES = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64,
                         DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8,
                         DType.UINT16, DType.UINT32, DType.UINT64})
"""Element types whose dense literal MLIR prints as the hex of the little-endian bytes."""

_HEX_ABOVE = 100
"""MLIR's printer writes a dense literal of more than this many elements (not a splat) as
`dense<"0x...">`: the little-endian bytes in upper-case hex."""

_HEX_CHUNK = 1 << 22
"""Bytes of a weight turned into hex text at a time when streaming a `.mlir` file."""

PORTABLE_WEIGHT_LIMIT = 2 << 30
"""Largest total of embedded weight bytes `export_stablehlo` writes as a portable artifact
(`.mlirbc`): MLIR builds the whole module, its bytecode and the artifact in memory, several
copies of the weights. Past it, write `.mlir` text (streamed) or pass weights_as_args."""


def _streamable(array: np.ndarray, dtype: DType) -> bool:
    return dtype in _HEX_DTYPES and array.size > _HEX_ABOVE


def _function(module: ir.Module, name: str) -> Any:
    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    raise ExportError(f"internal error: no function @{name}")


@gc_paused
def to_mlir_text(model: Model, *, weights_as_args: bool = False, debug_info: bool = True) -> str:
    return build_module(model, weights_as_args=weights_as_args).text(debug_info=debug_info)


def export_stablehlo(model: Model, path: str | os.PathLike[str], *,
                     target_version: str | None = None, weights_as_args: bool = False) -> Path:
    """Write `model` as StableHLO: text for `.mlir`, a portable artifact for `.mlirbc`
    (and any other suffix). The write is atomic (irbridge.atomic)."""
    from irbridge.formats import check_complete

    check_complete(model, "stablehlo")  # an incomplete Dynamo capture is not the model
    out = Path(path)
    check_output(out)  # before building: no missing folder, folder, device or FIFO
    version = check_target_version(target_version)
    text = out.suffix == ".mlir"
    if not text and not weights_as_args:
        embedded = sum(t.data.nbytes for t in model.tensors.values() if t.data is not None)
        if embedded > PORTABLE_WEIGHT_LIMIT:
            raise ExportError(
                f"{out}: {embedded / 2**30:.2f} GiB of weights is more than a portable "
                f"artifact embeds ({PORTABLE_WEIGHT_LIMIT / 2**30:.0f} GiB: MLIR holds "
                "several copies in memory); write .mlir text (streamed) or pass "
                "weights_as_args=True")
    built = build_module(model, weights_as_args=weights_as_args, defer_weights=text)
    data = b"" if text else built.artifact(version)
    with atomic_file(out) as tmp, open(tmp, "wb") as handle:  # special files refused
        if text:  # the weights' hex streamed in, one chunk at a time
            built.write_text(handle)
        else:
            handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return out


# -- the writer ---------------------------------------------------------------------------------

def node_location(node: Node) -> str:
    """loc("<module path>"("<source op>"[("<file>":<line>:0)]))."""
    p = node.provenance
    inner = f'"{escape(p.source_op or node.op)}"'
    if p.location is not None and p.location.file:
        inner += f'("{escape(p.location.file)}":{max(p.location.line, 0)}:0)'
    return f'loc("{escape(p.module_path)}"({inner}))'


class _ModuleWriter:
    def __init__(self, model: Model, weights_as_args: bool) -> None:
        self.model = model
        self.weights_as_args = weights_as_args
        self.em = Emitter()
        self.env: dict[int, Sym] = {}  # id(Value) -> Sym
        self.weight_syms: dict[str, Sym] = {}

    def write(self) -> tuple[str, list[tuple[np.ndarray, DType]], list[str], list[str],
                             list[str]]:
        model = self.model
        if not model.graphs:
            raise ExportError("the model has no graph to export")
        args: list[str] = []
        input_names: list[str] = []
        linked = {(lk.to_graph, lk.to_input) for lk in model.links}
        for gi, graph in enumerate(model.graphs):
            for value in graph.inputs:
                if (gi, value.name) in linked:
                    continue
                dtype, shape = _static(value, f"graph {graph.name!r} input {value.name!r}")
                sym = Sym(f"%arg{len(args)}", dtype, shape)
                args.append(f"{sym.ref}: {sym.type} loc(\"{escape(value.name)}\")")
                input_names.append(value.name)
                self.env[id(value)] = sym
        weights: list[str] = []
        if self.weights_as_args:
            for tensor in model.tensors.values():
                sym = Sym(f"%arg{len(args)}", tensor.dtype, tensor.shape)
                args.append(f"{sym.ref}: {sym.type} {{irbridge.weight = true}} "
                            f"loc(\"{escape(tensor.name)}\")")
                weights.append(tensor.name)
                self.weight_syms[tensor.name] = sym
        outputs: list[Sym] = []
        produced: dict[tuple[int, str], Sym] = {}
        for gi, graph in enumerate(model.graphs):
            for value in graph.inputs:
                link = next((lk for lk in model.links
                             if lk.to_graph == gi and lk.to_input == value.name), None)
                if link is not None:
                    self.env[id(value)] = produced[(link.from_graph, link.from_output)]
            outputs = self.graph(graph)
            for value, sym in zip(graph.outputs, outputs, strict=True):
                produced[(gi, value.name)] = sym
        last = model.graphs[-1]
        output_names = [v.name for v in last.outputs]
        results = ", ".join(f"{s.type} {{irbridge.name = \"{escape(n)}\"}}"
                            for s, n in zip(outputs, output_names, strict=True))
        name = escape(model.name or "model")
        lines = [f'module @"{name}" attributes {{irbridge.producer = '
                 f'"{PRODUCER} {escape(model.producer_version)}"}} {{',
                 f"func.func @main({', '.join(args)}) -> ({results}) {{",
                 *self.em.hoisted, *self.em.body,
                 f'"func.return"({", ".join(s.ref for s in outputs)}) : '
                 f'({", ".join(s.type for s in outputs)}) -> () loc(unknown)',
                 "}", "}"]
        return "\n".join(lines), self.em.placeholders, input_names, output_names, weights

    # -- graphs and nodes ------------------------------------------------------------------------
    def graph(self, graph: Graph) -> list[Sym]:
        for value in graph.parameters:
            self.env[id(value)] = self.weight(value)
        for node in graph.nodes:
            self.node(node)
        return [self.lookup(v, f"graph {graph.name!r} output") for v in graph.outputs]

    def weight(self, value: Value) -> Sym:
        tensor = value.tensor
        assert tensor is not None
        sym = self.weight_syms.get(tensor.name)
        if sym is not None:
            return sym
        if tensor.data is None:
            raise ExportError(f"tensor {tensor.name!r} has no data (shape-only IR); export "
                              "with weights_as_args=True or convert again with weights")
        sym = self.em.const(tensor.data, tensor.dtype, loc=f'loc("{escape(tensor.name)}")',
                            hoist=True)
        sym = Sym(sym.ref, sym.dtype, sym.shape, sym.const, weight=sym.numel > _SMALL_WEIGHT)
        self.weight_syms[tensor.name] = sym
        return sym

    def lookup(self, value: Value, where: str) -> Sym:
        sym = self.env.get(id(value))
        if sym is None:
            if value.tensor is not None:
                sym = self.weight(value)
                self.env[id(value)] = sym
                return sym
            raise ExportError(f"{where}: value {value.name!r} is not defined before its use")
        return sym

    def node(self, node: Node, where: str | None = None) -> None:
        where = where or registry.node_where(node)
        if node.is_opaque:
            raise ExportError(f"{where}: opaque op {node.qualified_op} has no StableHLO "
                              "lowering (only neutral ops can be exported)")
        schema = registry.lookup(node.op)
        if schema is None:
            raise ExportError(f"{where}: unknown op {node.op!r}")
        try:
            attrs = schema.resolve_attrs(node.attrs, where)
        except OpError as exc:
            raise ExportError(str(exc)) from exc
        xs = [None if v is None else self.lookup(v, where) for v in node.inputs]
        outs = [_static(v, f"{where} output {v.name!r}") for v in node.outputs]
        saved_loc = self.em.loc
        self.em.loc = node_location(node)
        try:
            results = self.lower(node, schema, xs, attrs, outs, where)
        finally:
            self.em.loc = saved_loc
        if len(results) != len(node.outputs):
            raise ExportError(f"{where}: internal error: lowered to {len(results)} values, "
                              f"expected {len(node.outputs)}")
        em = self.em
        for value, sym, (dtype, shape) in zip(node.outputs, results, outs, strict=True):
            if sym.shape != shape:
                if sym.numel != int(np.prod(shape, dtype=np.int64)):
                    raise ExportError(f"{where}: internal error: lowered output "
                                      f"{value.name!r} has shape {list(sym.shape)}, the IR "
                                      f"says {list(shape)}")
                sym = em.reshape(sym, shape)
            self.env[id(value)] = em.convert(sym, dtype)

    def generated(self, op: str, xs: list[Sym | None], attrs: dict[str, Any], out: TypeSpec
                  ) -> Sym:
        """A big `full` or `range` as a splat or an iota expression, not an array the size
        of the output (a 3-billion-element iota would take 22 GiB to fold)."""
        em = self.em
        dtype, shape = out
        if op == "full":
            return em.splat(np.asarray(attrs["value"]).astype(dtype.numpy)[()], dtype, shape)
        given = [*xs, None, None, None][:3]
        start, _, delta = (attrs[name] if x is None else _const_of(x).reshape(-1)[0].item()
                           for x, name in zip(given, ("start", "limit", "delta"), strict=True))
        exact = dtype.is_integer and float(start).is_integer() and float(delta).is_integer()
        wide = DType.INT64 if exact else DType.FLOAT64  # as the registry's reference computes
        index = em.iota(wide, shape, 0)
        values = em.add(em.mul(index, em.splat(int(delta) if exact else delta, wide, shape)),
                        em.splat(int(start) if exact else start, wide, shape))
        return em.convert(values, dtype)

    def lower(self, node: Node, schema: registry.OpSchema, xs: list[Sym | None],
              attrs: dict[str, Any], outs: list[TypeSpec], where: str) -> list[Sym]:
        em = self.em
        foldable = node.op not in ("if", "loop") and all(x is None or (x.const is not None
                                                                        and not x.weight)
                                                         for x in xs) \
            and sum(int(np.prod(shape)) for _, shape in outs) <= FOLD_LIMIT
        if node.op in ("full", "range") and sum(int(np.prod(s)) for _, s in outs) > FOLD_LIMIT \
                and all(x is None or x.const is not None for x in xs):
            return [self.generated(node.op, xs, attrs, outs[0])]
        if node.op in _FOLDED or foldable:
            if node.op != "shape_of" and any(x is not None and x.const is None for x in xs):
                raise ExportError(f"{where}: its inputs are known only at run time; StableHLO "
                                  "export needs them constant")
            ctx = registry.RefContext([TensorType(d, s) for d, s in outs], _no_graph, where)
            args = [None if x is None else _const_of(x) for x in xs]
            with np.errstate(all="ignore"):
                arrays = schema.reference(args, attrs, ctx)
            return [em.const(np.asarray(a), dtype) for a, (dtype, _) in zip(arrays, outs,
                                                                              strict=True)]
        attrs = _apply_overrides(node.op, xs, attrs, where)
        if node.op == "if":
            return self.lower_if(node, xs, attrs, outs, where)
        if node.op == "loop":
            return self.lower_loop(node, xs, attrs, outs, where)
        fn = LOWERINGS.get(node.op)
        if (fn is None or node.op in _DECOMPOSE_FIRST) and schema.decompose is not None:
            return self.decompose(node, schema, xs, attrs, where)
        if fn is None:
            raise ExportError(f"{where}: op {node.op!r} has no StableHLO lowering and no "
                              "registry decomposition")
        try:
            return fn(Lowering(em, node, xs, attrs, outs))
        except Unsupported as exc:
            raise ExportError(f"{where}: cannot lower to StableHLO: {exc}") from exc
        except IrbridgeError:
            raise
        except (ValueError, KeyError, AssertionError) as exc:
            raise ExportError(f"{where}: internal error lowering to StableHLO: {exc}") from exc

    def decompose(self, node: Node, schema: registry.OpSchema, xs: list[Sym | None],
                  attrs: dict[str, Any], where: str) -> list[Sym]:
        """Lower the registry decomposition of `node` (a small graph built on the fly)."""
        assert schema.decompose is not None
        graph = Graph(f"decompose_{node.op}")
        inputs: list[Value | None] = []
        for index, sym in enumerate(xs):
            if sym is None:
                inputs.append(None)
                continue
            value = graph.add_input(f"in{index}", TensorType(sym.dtype, sym.shape))
            self.env[id(value)] = sym
            inputs.append(value)
        try:
            outputs = schema.decompose(GraphBuilder(graph), inputs, attrs)
        except OpError as exc:
            raise ExportError(f"{where}: decomposition failed: {exc}") from exc
        for inner in graph.nodes:
            inner.provenance = node.provenance
            self.node(inner, f"{where} (decomposed: {inner.op})")
        return [self.lookup(v, where) for v in outputs]

    # -- control flow ------------------------------------------------------------------------
    def lower_if(self, node: Node, xs: list[Sym | None], attrs: dict[str, Any],
                 outs: list[TypeSpec], where: str) -> list[Sym]:
        em = self.em
        cond = xs[0]
        assert cond is not None
        pred = em.reshape(em.convert(cond, DType.BOOL), ())
        regions = []
        for key in ("then_branch", "else_branch"):
            branch: Graph = attrs[key]
            region = em.region()
            with region:
                results = self.graph(branch)
                results = [em.convert(em.reshape(s, shape), dtype)
                           for s, (dtype, shape) in zip(results, outs, strict=True)]
                em.ret(results)
            regions.append(region.text)
        return em.emit("stablehlo.if", [pred], outs, regions=regions)

    def lower_loop(self, node: Node, xs: list[Sym | None], attrs: dict[str, Any],
                   outs: list[TypeSpec], where: str) -> list[Sym]:
        """ONNX Loop as stablehlo.while over (iteration, keep_going, carried..., scans...);
        scan outputs are written into preallocated buffers (static trip count only)."""
        em = self.em
        body: Graph = attrs["body"]
        trip, cond = xs[0], xs[1]
        carried = [x for x in xs[2:] if x is not None]
        n = len(carried)
        scan_types = outs[n:]
        if scan_types and any(shape[0] is None for _, shape in scan_types):
            raise ExportError(f"{where}: a loop with scan outputs needs a static trip count")
        i64, boolean = (DType.INT64, ()), (DType.BOOL, ())
        use_body_cond = cond is not None or trip is None
        iteration = em.splat(0, DType.INT64)
        keep = em.reshape(em.convert(cond, DType.BOOL), ()) if cond is not None else \
            em.splat(True, DType.BOOL)
        limit = em.reshape(em.convert(trip, DType.INT64), ()) if trip is not None else None
        scans = [em.splat(0, dtype, shape) for dtype, shape in scan_types]
        state = [iteration, keep, *carried, *scans]
        types: list[TypeSpec] = [i64, boolean, *((s.dtype, s.shape) for s in carried),
                                 *scan_types]
        cond_region = em.region(types)
        with cond_region as args:
            go = args[1]
            if limit is not None:
                go = em.binary("stablehlo.and", go, em.compare("LT", args[0], limit), DType.BOOL)
            em.ret([go])
        body_region = em.region(types)
        with body_region as args:
            step, flag, values, buffers = args[0], args[1], args[2:2 + n], args[2 + n:]
            inner_in = [step, flag, *values]
            for value, sym in zip(body.inputs, inner_in, strict=True):
                dtype, shape = _static(value, f"{where} body input {value.name!r}")
                self.env[id(value)] = em.convert(em.reshape(sym, shape), dtype)
            results = self.graph(body)
            new_flag = em.reshape(em.convert(results[0], DType.BOOL), ()) if use_body_cond \
                else flag
            new_values = [em.convert(em.reshape(r, s.shape), s.dtype)
                          for r, s in zip(results[1:1 + n], values, strict=True)]
            new_buffers = []
            for result, buffer in zip(results[1 + n:], buffers, strict=True):
                if buffer.shape[0] == 0:  # no iteration runs: nothing to write
                    new_buffers.append(buffer)
                    continue
                row = em.reshape(em.convert(result, buffer.dtype), (1, *buffer.shape[1:]))
                zeros = [em.splat(0, DType.INT64)] * (buffer.rank - 1)
                new_buffers.append(em.op("stablehlo.dynamic_update_slice",
                                         [buffer, row, step, *zeros], buffer.dtype,
                                         buffer.shape))
            next_step = em.add(step, em.splat(1, DType.INT64))
            em.ret([next_step, new_flag, *new_values, *new_buffers])
        final = em.emit("stablehlo.while", state, types,
                        regions=[cond_region.text, body_region.text])
        return final[2:]


_RUNTIME_INPUTS = {("pad", "value")}
"""Parameter inputs whose lowering takes a run-time operand (pad's fill value)."""


def _apply_overrides(op: str, xs: list[Sym | None], attrs: dict[str, Any],
                     where: str) -> dict[str, Any]:
    """Fold ONNX-style parameter inputs (axes, pads, k, sizes, ...) into the attributes the
    lowerings read; they must be constants."""
    table = _OVERRIDES.get(op)
    if not table:
        return attrs
    attrs = dict(attrs)
    for index, (name, kind) in table.items():
        sym = xs[index] if index < len(xs) else None
        if sym is None:
            continue
        if sym.const is None:
            if (op, name) in _RUNTIME_INPUTS:  # the lowering reads the operand itself
                continue
            raise ExportError(f"{where}: input {name!r} is known only at run time; StableHLO "
                              "export needs it constant")
        flat = np.asarray(sym.const).reshape(-1)
        if kind == "int":
            attrs[name] = int(flat[0])
        elif kind == "float":
            attrs[name] = float(flat[0])
        elif kind == "floats":
            attrs[name] = tuple(float(v) for v in flat)
        else:
            attrs[name] = tuple(int(v) for v in flat)
    if op == "resize":
        x = xs[0]
        assert x is not None
        for name in ("scales", "sizes"):
            values = attrs.get(name) or ()
            if len(values) == x.rank and x.rank > 2:  # per dim of x: N and C stay
                attrs[name] = values[2:]
        if len(xs) > 2 and xs[2] is not None:
            attrs["scales"] = ()
        elif len(xs) > 1 and xs[1] is not None:
            attrs["sizes"] = ()
    return attrs


def _no_graph(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    raise ExportError("constant folding cannot run subgraphs")


def _const_of(sym: Sym) -> np.ndarray:
    if sym.const is None:
        return np.zeros(sym.shape, dtype=sym.dtype.numpy)  # shape_of reads only the shape
    return np.asarray(sym.const)


def _static(value: Value, where: str) -> TypeSpec:
    t = value.type
    if t is None or not t.is_static:
        raise ExportError(f"{where} has type {t if t is not None else 'unknown'}; StableHLO "
                          "export needs static shapes (capture with concrete input sizes)")
    return t.dtype, t.static_shape()


__all__ = ["ExportedModule", "build_module", "check_target_version", "export_stablehlo",
           "node_location", "tensor_type", "to_mlir_text"]
