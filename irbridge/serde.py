"""Serde: the only module that touches the generated protobuf code.

Converts the in-memory IR to `irbridge.v1.Model` messages and back, and reads and writes
the two file forms: binary `.irb` (8-byte magic + serialized Model) and text `.irbt`
(a header line + protobuf text format). Tensors above a size threshold go to a sidecar
file (`<file>.<generation>.data`) with offset, length and SHA-256, so that no file
approaches the 2 GiB protobuf limit. Loading parses data only; it never executes code.
Writes are atomic as a pair: the main file's rename is the single commit point (see
"files" below).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import io
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from google.protobuf import message as pb_message
from google.protobuf import text_format

from irbridge._gc import gc_paused
from irbridge._proto import irbridge_pb2 as pb
from irbridge.atomic import (
    check_companion_name,
    check_output,
    data_file_pattern,
    folder_lock,
    fsync_dir,
    generation_name,
    kill_point,
    remove_old_data_files,
    remove_stale,
    temp_prefix,
    write_error,
)
from irbridge.dtypes import DType
from irbridge.errors import FileFormatError, IrbridgeError
from irbridge.ir import (
    IR_VERSION,
    Analysis,
    AttrValue,
    Cost,
    Dim,
    Estimate,
    Graph,
    GraphLink,
    HardwareMapping,
    Model,
    Node,
    NodeAnnotations,
    Partition,
    Provenance,
    SourceLocation,
    SymDim,
    Tensor,
    TensorType,
    Value,
)

MAGIC = b"\x89IRB\r\n\x1a\n"
"""First 8 bytes of a binary .irb file (PNG-style: catches text-mode mangling)."""
TEXT_HEADER = "# irbridge-text"
DEFAULT_EXTERNAL_THRESHOLD = 1 << 20
"""Tensors of at least this many bytes go to the sidecar file when weights are external."""
_ALIGN = 64


# --------------------------------------------------------------------------- writing
@dataclass
class _Sidecar:
    """External tensor bytes, written to `handle` (a temporary file) one tensor at a time
    while a model is converted to protobuf: `save` never holds a second copy of the
    weights."""

    location: str
    threshold: int
    handle: BinaryIO
    size: int = 0
    placed: int = 0
    """Tensors placed so far."""

    def place(self, data: bytes | memoryview) -> pb.ExternalData:
        pad = -self.size % _ALIGN
        if pad:
            self.handle.write(b"\0" * pad)
        ext = pb.ExternalData(location=self.location, offset=self.size + pad,
                              length=len(data), sha256=hashlib.sha256(data).hexdigest())
        self.handle.write(data)
        self.size += pad + len(data)
        self.placed += 1
        if self.placed == 1:
            kill_point("writing.data")  # the sidecar is partly written
        return ext


def to_proto(model: Model, *, weights: bool = True, sidecar: _Sidecar | None = None,
             source: str | None = None) -> pb.Model:
    """Convert a model. `weights=False` writes tensors shape-only; with a sidecar, tensors
    of at least its threshold bytes are stored there instead of inline."""
    writer = _Writer(weights, sidecar)
    msg = pb.Model(
        ir_version=_wire(model.ir_version), producer_name=model.producer_name,
        producer_version=model.producer_version, source_format=model.source_format,
        opset_version=model.opset_version, name=model.name,
    )
    msg.metadata.update(model.metadata)
    msg.tensors.extend(writer.tensor(t) for t in model.tensors.values())
    try:
        msg.graphs.extend(writer.graph(g) for g in model.graphs)
    except (pb_message.DecodeError, pb_message.EncodeError, RecursionError) as exc:
        raise _too_deep(source or f"model {model.name!r}", exc) from None
    for link in model.links:
        msg.links.add(from_graph=link.from_graph, from_output=link.from_output,
                      to_graph=link.to_graph, to_input=link.to_input)
    if model.analysis is not None:
        msg.analysis.CopyFrom(_analysis_to_proto(model.analysis))
    return msg


class _Writer:
    def __init__(self, weights: bool, sidecar: _Sidecar | None) -> None:
        self.weights = weights
        self.sidecar = sidecar

    def tensor(self, tensor: Tensor) -> pb.Tensor:
        msg = pb.Tensor(name=tensor.name, dtype=_wire(tensor.dtype.value), dims=tensor.shape)
        if tensor.data is None or not self.weights:
            return msg
        data = _tensor_buffer(tensor)
        if self.sidecar is not None and len(data) >= self.sidecar.threshold:
            msg.external.CopyFrom(self.sidecar.place(data))
        else:
            msg.raw = bytes(data)
        return msg

    def graph(self, graph: Graph) -> pb.Graph:
        msg = pb.Graph(name=graph.name, break_reason=graph.break_reason)
        msg.inputs.extend(_value_to_proto(v) for v in graph.inputs)
        msg.outputs.extend(_value_to_proto(v) for v in graph.outputs)
        msg.parameters.extend(v.name for v in graph.parameters)
        for node in graph.nodes:
            msg.nodes.append(self.node(node))
            msg.value_info.extend(_value_to_proto(v) for v in node.outputs if v.type is not None)
        return msg

    def node(self, node: Node) -> pb.Node:
        msg = pb.Node(id=node.id, op=node.op, domain=node.domain, name=node.name,
                      inputs=["" if v is None else v.name for v in node.inputs],
                      outputs=[v.name for v in node.outputs])
        msg.attributes.extend(self.attribute(k, v) for k, v in node.attrs.items())
        msg.provenance.CopyFrom(_provenance_to_proto(node.provenance))
        ann = node.annotations
        if ann.cost is not None:
            msg.annotations.cost.CopyFrom(_cost_to_proto(ann.cost))
        if ann.partition_id is not None:
            msg.annotations.partition_id = ann.partition_id
        msg.annotations.values.extend(self.attribute(k, v) for k, v in ann.values.items())
        return msg

    def attribute(self, name: str, value: AttrValue) -> pb.Attribute:
        msg = pb.Attribute(name=name)
        if isinstance(value, bool):
            msg.b = value
        elif isinstance(value, int):
            msg.i = value
        elif isinstance(value, float):
            msg.f = value
        elif isinstance(value, str):
            msg.s = value
        elif isinstance(value, DType):
            msg.dtype = _wire(value.value)
        elif isinstance(value, Tensor):
            msg.tensor.CopyFrom(self.tensor(value))
        elif isinstance(value, Graph):
            msg.graph.CopyFrom(self.graph(value))
        elif isinstance(value, tuple):
            if value and all(isinstance(v, Graph) for v in value):
                msg.graphs.values.extend(self.graph(g) for g in value if isinstance(g, Graph))
            elif value and all(isinstance(v, str) for v in value):
                msg.strings.values.extend(value)
            elif any(isinstance(v, float) for v in value):
                msg.floats.values.extend(value)
            else:
                msg.ints.values.extend(value)
        else:
            raise TypeError(f"attribute {name!r}: cannot serialise {value!r}")
        return msg


def _tensor_buffer(tensor: Tensor) -> bytes | memoryview:
    """`_tensor_bytes`, as a view of the array's own memory where it already holds them
    (contiguous, little-endian, whole bytes): no copy of a large weight."""
    data = tensor.data
    assert data is not None
    if (tensor.dtype.bits >= 8 and data.flags.c_contiguous and data.dtype.kind != "O"
            and (data.dtype.byteorder == "<" or (data.dtype.byteorder in "=|"
                                                 and np.little_endian))):
        return data.reshape(-1).view(np.uint8).data
    return _tensor_bytes(tensor)


def _tensor_bytes(tensor: Tensor) -> bytes:
    """Little-endian row-major bytes. A sub-byte element takes one byte: its canonical bit
    pattern in the low bits, the high bits zero (ml_dtypes reads a byte with high bits set as
    some value; converting through float32 gives that value's canonical pattern)."""
    assert tensor.data is not None
    if tensor.dtype.bits < 8:
        canonical = tensor.data.astype(np.float32).astype(tensor.dtype.numpy)
        return (canonical.view(np.uint8) & ((1 << tensor.dtype.bits) - 1)).tobytes()
    return tensor.data.astype(tensor.data.dtype.newbyteorder("<"), copy=False).tobytes()


def _wire(number: int) -> Any:
    """Enum numbers go on the wire as they are (the DType values equal the proto's)."""
    return number


MAX_DIM = 2**62
"""Largest static dim written: beyond int64 protobuf cannot store it, and no tensor has
that many elements along one axis (such types come only from corrupt inputs)."""


def _value_to_proto(value: Value) -> pb.Value:
    msg = pb.Value(name=value.name)
    if value.type is not None and value.type.shape is not None:
        for d in value.type.shape:
            if isinstance(d, int) and d > MAX_DIM:   # (negative dims: the reader refuses)
                raise IrbridgeError(f"value {value.name!r} has type {value.type}: dim {d} "
                                    f"is past 2^62; refusing to write it")
    if value.type is not None:
        msg.type.CopyFrom(_type_to_proto(value.type))
    return msg


def _type_to_proto(t: TensorType) -> pb.TensorType:
    msg = pb.TensorType(dtype=_wire(t.dtype.value))
    if t.shape is not None:
        msg.shape.SetInParent()
        for d in t.shape:
            dim = msg.shape.dims.add()
            if isinstance(d, int):
                dim.size = d
            elif isinstance(d, SymDim):
                dim.symbol.name = d.name
                if d.min is not None:
                    dim.symbol.min = d.min
                if d.max is not None:
                    dim.symbol.max = d.max
    return msg


def _provenance_to_proto(p: Provenance) -> pb.Provenance:
    msg = pb.Provenance(source_format=p.source_format, source_op=p.source_op,
                        source_node=p.source_node, module_path=p.module_path,
                        module_class=p.module_class)
    if p.location is not None:
        msg.location.CopyFrom(pb.SourceLocation(file=p.location.file, line=p.location.line,
                                                code=p.location.code))
    return msg


def _cost_to_proto(c: Cost) -> pb.Cost:
    return pb.Cost(macs=c.macs, matmul_flops=c.matmul_flops, other_flops=c.other_flops,
                   bytes_read=c.bytes_read, bytes_written=c.bytes_written,
                   param_bytes=c.param_bytes)


def _analysis_to_proto(a: Analysis) -> pb.Analysis:
    msg = pb.Analysis(strategy=a.strategy)
    for p in a.partitions:
        msg.partitions.add(id=p.id, node_ids=p.node_ids, kind=p.kind, reason=p.reason,
                           cost=_cost_to_proto(p.cost), external_bytes=p.external_bytes,
                           internal_bytes=p.internal_bytes, graph_index=p.graph_index)
    for m in a.mappings:
        mapping = msg.mappings.add(target=m.target, dtype=_wire(m.dtype.value), strategy=m.strategy,
                                   total_latency_seconds=m.total_latency_seconds)
        for e in m.estimates:
            mapping.estimates.add(partition_id=e.partition_id, compute_seconds=e.compute_seconds,
                                  memory_seconds=e.memory_seconds,
                                  latency_seconds=e.latency_seconds, bound=e.bound)
    return msg


# --------------------------------------------------------------------------- reading
ExternalReader = Callable[[pb.ExternalData, str], bytes | bytearray]
"""Returns a tensor's bytes; a bytearray becomes the tensor's own memory (no copy)."""


def from_proto(msg: pb.Model, *, source: str = "<memory>",
               read_external: ExternalReader | None = None) -> Model:
    """Build a Model from a message. Any inconsistency raises FileFormatError naming
    `source`. Without `read_external`, external tensors load shape-only."""
    if msg.ir_version <= 0:
        raise FileFormatError(f"{source}: IR version {msg.ir_version} is not valid; "
                              "not an irbridge model")
    if msg.ir_version > IR_VERSION:
        raise FileFormatError(
            f"{source}: IR version {msg.ir_version} is newer than this irbridge reads "
            f"(up to {IR_VERSION})", hint="upgrade irbridge")
    try:
        return _Reader(source, read_external).model(msg)
    except FileFormatError:
        raise
    except (ValueError, KeyError, TypeError, OverflowError, IndexError) as exc:
        raise FileFormatError(f"{source}: invalid model: {exc}") from exc


class _Reader:
    def __init__(self, source: str, read_external: ExternalReader | None) -> None:
        self.source = source
        self.read_external = read_external
        self.tensors: dict[str, Tensor] = {}

    def fail(self, problem: str) -> FileFormatError:
        return FileFormatError(f"{self.source}: {problem}")

    def model(self, msg: pb.Model) -> Model:
        for t in msg.tensors:
            if t.name in self.tensors:
                raise self.fail(f"tensor {t.name!r} is defined twice")
            self.tensors[t.name] = self.tensor(t)
        model = Model(name=msg.name, source_format=msg.source_format,
                      producer_name=msg.producer_name, producer_version=msg.producer_version,
                      opset_version=msg.opset_version, ir_version=msg.ir_version,
                      metadata=dict(msg.metadata), tensors=dict(self.tensors))
        model.graphs = [self.graph(g, []) for g in msg.graphs]
        model.links = [GraphLink(lk.from_graph, lk.from_output, lk.to_graph, lk.to_input)
                       for lk in msg.links]
        if msg.HasField("analysis"):
            model.analysis = _analysis_from_proto(msg.analysis)
        # Unique ids are the verifier's rule; here new nodes just continue after the last.
        next_id = max((node.id for _, node in model.all_nodes()), default=-1) + 1
        for graph in model.graphs:
            graph.reserve_ids(next_id)
        return model

    def tensor(self, msg: pb.Tensor) -> Tensor:
        dtype = _dtype(msg.dtype, f"tensor {msg.name!r}")
        if any(d < 0 for d in msg.dims):
            raise self.fail(f"tensor {msg.name!r} has a negative dim {list(msg.dims)}")
        shape = tuple(msg.dims)
        nbytes = math.prod(shape) * dtype.itemsize
        kind = msg.WhichOneof("data")
        if kind is None:
            return Tensor(msg.name, dtype, shape)
        raw: bytes | bytearray
        if kind == "raw":
            raw = msg.raw
        else:
            if self.read_external is None:
                return Tensor(msg.name, dtype, shape)
            if msg.external.length != nbytes:
                raise self.fail(f"tensor {msg.name!r}: external length {msg.external.length} "
                                f"does not match {dtype.short}{list(shape)} ({nbytes} bytes)")
            raw = self.read_external(msg.external, msg.name)
        if len(raw) != nbytes:
            raise self.fail(f"tensor {msg.name!r}: {len(raw)} bytes of data for "
                            f"{dtype.short}{list(shape)} ({nbytes} bytes)")
        if dtype.bits < 8 and any(np.frombuffer(raw, dtype=np.uint8) >> dtype.bits):
            raise self.fail(f"tensor {msg.name!r}: a {dtype.short} element has bits set above "
                            f"its low {dtype.bits} (one element per byte, high bits zero)")
        # a bytearray (a sidecar read) is fresh memory the array may keep; bytes are not
        # the view makes the dtype native ("<f4" would stay the buffer's format without
        # a copy, and MLIR's bindings refuse a "<f" buffer)
        array = np.frombuffer(raw, dtype=dtype.numpy.newbyteorder("<")).astype(
            dtype.numpy, copy=not isinstance(raw, bytearray)).view(dtype.numpy).reshape(shape)
        return Tensor(msg.name, dtype, shape, array)

    def graph(self, msg: pb.Graph, outer: list[dict[str, Value]]) -> Graph:
        graph = Graph(msg.name)
        graph.break_reason = msg.break_reason
        types = {v.name: _type_from_proto(v.type) for v in msg.value_info if v.HasField("type")}
        for v in msg.inputs:
            graph.add_input(v.name, _type_from_proto(v.type) if v.HasField("type") else None)
        for name in msg.parameters:
            if name not in self.tensors:
                raise self.fail(f"graph {msg.name!r} reads tensor {name!r}, which the model "
                                "does not define")
            graph.add_parameter(self.tensors[name])
        scopes = [*outer, graph.values]

        def resolve(name: str, what: str) -> Value:
            for scope in reversed(scopes):
                found = scope.get(name)
                if found is not None:
                    return found
            raise self.fail(f"graph {msg.name!r}: {what} reads {name!r}, which is not "
                            "defined before it")

        for n in msg.nodes:
            where = f"node #{n.id} ({n.op})"
            node_inputs = [None if name == "" else resolve(name, where) for name in n.inputs]
            attrs = {a.name: self.attribute(a, scopes) for a in n.attributes}
            try:
                node = graph.add_node(n.op, node_inputs, list(n.outputs), attrs,
                                      output_types=[types.get(o) for o in n.outputs], id=n.id,
                                      domain=n.domain, name=n.name,
                                      provenance=_provenance_from_proto(n.provenance),
                                      annotations=self.annotations(n.annotations, scopes))
            except ValueError as exc:
                raise self.fail(f"graph {msg.name!r}, {where}: {exc}") from exc
            del node
        graph.outputs = [resolve(v.name, "graph output") for v in msg.outputs]
        return graph

    def annotations(self, msg: pb.NodeAnnotations, scopes: list[dict[str, Value]]
                    ) -> NodeAnnotations:
        return NodeAnnotations(
            cost=_cost_from_proto(msg.cost) if msg.HasField("cost") else None,
            partition_id=msg.partition_id if msg.HasField("partition_id") else None,
            values={a.name: self.attribute(a, scopes) for a in msg.values})

    def attribute(self, msg: pb.Attribute, scopes: list[dict[str, Value]]) -> AttrValue:
        kind = msg.WhichOneof("value")
        if kind is None:
            raise self.fail(f"attribute {msg.name!r} has no value")
        if kind in ("i", "f", "s", "b"):
            return getattr(msg, kind)  # type: ignore[no-any-return,unused-ignore]
        if kind == "dtype":
            return _dtype(msg.dtype, f"attribute {msg.name!r}")
        if kind == "ints":
            return tuple(msg.ints.values)
        if kind == "floats":
            return tuple(float(v) for v in msg.floats.values)
        if kind == "strings":
            return tuple(msg.strings.values)
        if kind == "tensor":
            return self.tensor(msg.tensor)
        if kind == "graph":
            return self.graph(msg.graph, scopes)
        return tuple(self.graph(g, scopes) for g in msg.graphs.values)


def _dtype(number: int, what: str) -> DType:
    try:
        return DType(number)
    except ValueError:
        raise ValueError(f"{what} has unknown dtype number {number}") from None


def _type_from_proto(msg: pb.TensorType) -> TensorType:
    dtype = _dtype(msg.dtype, "value type")
    if not msg.HasField("shape"):
        return TensorType(dtype, None)
    dims: list[Dim] = []
    for d in msg.shape.dims:
        kind = d.WhichOneof("kind")
        if kind == "size":
            if d.size < 0:
                raise ValueError(f"a value type has a negative dim {d.size}")
            dims.append(d.size)
        elif kind == "symbol":
            s = d.symbol
            dims.append(SymDim(s.name, s.min if s.HasField("min") else None,
                               s.max if s.HasField("max") else None))
        else:
            dims.append(None)
    return TensorType(dtype, tuple(dims))


def _provenance_from_proto(msg: pb.Provenance) -> Provenance:
    loc = None
    if msg.HasField("location"):
        loc = SourceLocation(msg.location.file, msg.location.line, msg.location.code)
    return Provenance(msg.source_format, msg.source_op, msg.source_node, msg.module_path,
                      msg.module_class, loc)


def _cost_from_proto(msg: pb.Cost) -> Cost:
    return Cost(msg.macs, msg.matmul_flops, msg.other_flops, msg.bytes_read,
                msg.bytes_written, msg.param_bytes)


def _analysis_from_proto(msg: pb.Analysis) -> Analysis:
    return Analysis(
        strategy=msg.strategy,
        partitions=[Partition(p.id, list(p.node_ids), p.kind, p.reason, _cost_from_proto(p.cost),
                              p.external_bytes, p.internal_bytes, p.graph_index)
                    for p in msg.partitions],
        mappings=[HardwareMapping(m.target, _dtype(m.dtype, f"mapping {m.target!r}"),
                                  m.strategy,
                                  [Estimate(e.partition_id, e.compute_seconds, e.memory_seconds,
                                            e.latency_seconds, e.bound) for e in m.estimates],
                                  m.total_latency_seconds)
                  for m in msg.mappings])


# --------------------------------------------------------------------------- bytes and text
def to_bytes(model: Model, *, weights: bool = True) -> bytes:
    """Binary form with all tensor data inline (for small models and tests)."""
    return MAGIC + _serialize(to_proto(model, weights=weights), "<memory>")


def from_bytes(data: bytes, *, source: str = "<bytes>") -> Model:
    return from_proto(_parse_binary(data, source), source=source)


def to_text(model: Model, *, weights: bool = True) -> str:
    """Human-readable protobuf text form, stable for diffs."""
    body = text_format.MessageToString(to_proto(model, weights=weights), as_utf8=True)
    return f"{TEXT_HEADER} ir_version={model.ir_version}\n{body}"


def from_text(text: str, *, source: str = "<text>") -> Model:
    return from_proto(_parse_text(text, source), source=source)


def _serialize(msg: pb.Model, source: str) -> bytes:
    try:
        return bytes(msg.SerializeToString())
    except (ValueError, pb_message.EncodeError) as exc:  # e.g. over the 2 GiB limit
        raise FileFormatError(f"{source}: cannot serialise model: {exc}",
                              hint="store weights externally") from exc


def _parse_binary(data: bytes, source: str) -> pb.Model:
    if not data.startswith(MAGIC):
        if data.startswith(TEXT_HEADER.encode()):
            raise FileFormatError(f"{source}: this is the text form; load it as .irbt")
        raise FileFormatError(f"{source}: not an irbridge file (missing .irb magic bytes)")
    msg = pb.Model()
    try:
        msg.ParseFromString(data[len(MAGIC):])
    except (pb_message.DecodeError, RecursionError, ValueError) as exc:
        raise FileFormatError(f"{source}: truncated or corrupt irbridge file ({exc})") from exc
    return msg


def _parse_text(text: str, source: str) -> pb.Model:
    first, _, body = text.partition("\n")
    if not first.startswith(TEXT_HEADER):
        raise FileFormatError(f"{source}: not an irbridge text file (missing "
                              f"{TEXT_HEADER!r} header line)")
    msg = pb.Model()
    try:
        text_format.Parse(body, msg)
    except (text_format.ParseError, RecursionError, ValueError) as exc:
        raise FileFormatError(f"{source}: corrupt irbridge text file ({exc})") from exc
    return msg


# --------------------------------------------------------------------------- files
# File layout (docs/ir-spec.md, "Files"): `<name>.irb` (or .irbt) plus at most one sidecar
# `<name>.irb.<generation>.data`, where <generation> is 16 random hex digits chosen per save.
# A save writes and fsyncs both under temporary names, then (holding a lock on the folder
# against other irbridge writers) renames the sidecar to its fresh generation name, then
# renames the main file: that rename is the single commit point. Only after it are sidecars
# of earlier generations (and the pre-generation name `<name>.irb.data`) removed. A reader
# that meets a vanished sidecar because the file was replaced under it reads the new file.
_MAX_MESSAGE = (1 << 31) - 1


def sidecar_pattern(path: Path) -> re.Pattern[str]:
    """Names of sidecars (any generation, and the pre-generation `<file>.data`) of `path`."""
    return data_file_pattern(path)


def sidecar_path(path: Path) -> Path:
    """The sidecar the saved file at `path` refers to (the newest generation on disk when
    the file cannot say): for tools and tests that want to look at it."""
    path = Path(path)
    with contextlib.suppress(FileFormatError, OSError):
        for location in _external_locations(path):
            return path.with_name(location)
    pattern = sidecar_pattern(path)
    found = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)] \
        if path.parent.is_dir() else []
    if found:
        return max(found, key=lambda p: p.stat().st_mtime_ns)
    return path.with_name(path.name + ".data")


def _external_locations(path: Path) -> list[str]:
    msg = _read_message(path, path.read_bytes())
    seen: dict[str, None] = {}
    for t in msg.tensors:
        if t.WhichOneof("data") == "external":
            seen.setdefault(t.external.location)
    return list(seen)


def is_text_path(path: Path) -> bool:
    return path.suffix == ".irbt"


def save(model: Model, path: str | os.PathLike[str], *, weights: str = "auto",
         external_threshold: int = DEFAULT_EXTERNAL_THRESHOLD) -> Path:
    """Write `model` to `path` (.irb binary, .irbt text), atomically (see the layout note
    above): a kill at any instant, or a concurrent save, leaves readers the old model or
    the new one, whole.

    weights: "auto" (tensors >= external_threshold bytes go to the sidecar
    `<path>.<generation>.data`), "inline" (all inline; fails past the 2 GiB limit),
    "external" (every tensor with data to the sidecar) or "none" (shape-only)."""
    path = Path(path)
    if weights not in ("auto", "inline", "external", "none"):
        raise ValueError(f"weights must be auto, inline, external or none, not {weights!r}")
    try:
        check_output(path)
    except IrbridgeError as exc:
        raise FileFormatError(exc.message, hint=exc.hint) from None
    side_name = generation_name(path)
    temps: list[Path] = []
    try:
        side_tmp = None
        if weights in ("auto", "external"):
            remove_stale(path)
            # the tensors go straight to the temporary sidecar as they are converted
            with _open_temp(path, ".data.tmp", temps) as handle:
                sidecar = _Sidecar(side_name, 0 if weights == "external" else
                                   external_threshold, handle)
                msg = to_proto(model, weights=True, sidecar=sidecar, source=str(path))
                _finish(handle)
            if sidecar.placed:
                side_tmp = temps[-1]
                kill_point("sidecar-written")
                check_companion_name(path, side_name, "weights sidecar")
        else:
            msg = to_proto(model, weights=weights != "none", source=str(path))
        nested = any(True for _, node in model.all_nodes() for _ in node.subgraphs())
        payload = _encode(msg, path, model.ir_version, nested)
        del msg
        remove_stale(path)
        main_tmp = _write_temp(path, [payload], ".tmp", temps)
        kill_point("main-written")
        with folder_lock(path.parent):
            check_output(path)  # it may have become a special file meanwhile
            if side_tmp is not None:
                os.replace(side_tmp, path.with_name(side_name))
                kill_point("sidecar-renamed")
                fsync_dir(path.parent)
            os.replace(main_tmp, path)  # the commit point
            kill_point("main-renamed")
            fsync_dir(path.parent)
            remove_old_data_files(path, keep=side_name if side_tmp is not None else None)
            kill_point("cleaned")
    except OSError as exc:
        raise FileFormatError(write_error(path, exc).message,
                              hint=write_error(path, exc).hint) from exc
    except IrbridgeError as exc:
        raise FileFormatError(exc.message, hint=exc.hint) from None
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return path


def _encode(msg: pb.Model, path: Path, ir_version: int, nested: bool) -> bytes:
    """The file's bytes, after checking that this irbridge's reader accepts them (protobuf's
    2 GiB message limit and its nesting limit): a save never writes a file `load` refuses."""
    binary = _serialize(msg, str(path))
    if len(binary) > _MAX_MESSAGE:
        raise FileFormatError(f"{path}: model is {len(binary)} bytes, over protobuf's 2 GiB "
                              "message limit", hint="store weights externally (weights=auto)")
    try:
        if nested:  # the only way a message the writer built can exceed the reader's limits
            pb.Model.FromString(binary)
    except (pb_message.DecodeError, RecursionError, ValueError) as exc:
        raise _too_deep(str(path), exc) from None
    if is_text_path(path):
        body = text_format.MessageToString(msg, as_utf8=True)
        return f"{TEXT_HEADER} ir_version={ir_version}\n{body}".encode()
    return MAGIC + binary


def _too_deep(where: str, exc: BaseException) -> FileFormatError:
    return FileFormatError(f"{where}: this model cannot be written: its reader would refuse "
                           f"it ({_one_line(exc)}); most likely subgraphs nest deeper than "
                           "protobuf's limit of 100 message levels",
                           hint="flatten nested control flow")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _write_temp(path: Path, chunks: list[bytes], suffix: str, temps: list[Path]) -> Path:
    with _open_temp(path, suffix, temps) as handle:
        for index, chunk in enumerate(chunks):
            handle.write(chunk)
            if index == len(chunks) // 2:
                kill_point("writing" + suffix.removesuffix(".tmp"))
        _finish(handle)
    return temps[-1]


def _open_temp(path: Path, suffix: str, temps: list[Path]) -> BinaryIO:
    """A new temporary file next to `path` (listed in `temps`), open for writing."""
    fd, name = tempfile.mkstemp(prefix=temp_prefix(path), suffix=suffix, dir=path.parent)
    temps.append(Path(name))
    handle = os.fdopen(fd, "wb")
    os.fchmod(handle.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600
    return handle


def _finish(handle: BinaryIO) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@gc_paused
def load(path: str | os.PathLike[str], *, weights: bool = True) -> Model:
    """Read a .irb or .irbt file. `weights=False` skips sidecar data (shape-only).

    If the file is replaced by a concurrent save while it is read (its sidecar then
    vanishes or changes), the read starts over on the new file."""
    path = Path(path)
    for attempt in range(5):
        before = _identity(path)
        try:
            return _load_once(path, weights)
        except FileFormatError:
            if attempt == 4 or before is None or _identity(path) == before:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _read_message(path: Path, data: bytes) -> pb.Model:
    data = data.removeprefix(b"\xef\xbb\xbf")  # a text file's byte order mark
    if data.startswith(TEXT_HEADER.encode()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileFormatError(f"{path}: text file is not valid UTF-8") from exc
        return _parse_text(text, str(path))
    return _parse_binary(data, str(path))


def _check_head(head: bytes, size: int, source: str) -> None:
    """Refuse from a file's first bytes and its size what `_read_message` would refuse
    only after reading it whole: no magic and no text header, or a binary file larger than
    a protobuf message can be (a sparse file of zeros, say, claims any size)."""
    head = head.removeprefix(b"\xef\xbb\xbf")
    if head.startswith(TEXT_HEADER.encode()[:len(head)]) and head:
        return
    if not head.startswith(MAGIC):
        _parse_binary(head, source)  # raises its "not an irbridge file" line
    if size > len(MAGIC) + _MAX_MESSAGE:
        raise FileFormatError(f"{source}: {size:,} bytes, over protobuf's 2 GiB message limit; "
                              "not a file irbridge writes (weights live in the sidecar)")


def _load_once(path: Path, weights: bool) -> Model:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileFormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FileFormatError(f"{path}: is a folder, not an irbridge file") from None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileFormatError(f"{path}: is a folder, not an irbridge file")
        raise FileFormatError(f"{path}: is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            head = handle.read(64)
            _check_head(head, st.st_size, str(path))  # before reading gigabytes of a non-model
            data = head + handle.read()
        except OSError as exc:
            raise FileFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    msg = _read_message(path, data)
    reader = _ExternalFiles(path) if weights else None
    try:
        return from_proto(msg, source=str(path), read_external=reader)
    finally:
        if reader is not None:
            reader.close()


class _ExternalFiles:
    """Reads external tensor bytes from sidecars next to the model file, checking sizes
    and checksums. Rules (docs/ir-spec.md): a location is a bare file name in the model's
    folder naming a regular file; the byte ranges of a sidecar's tensors do not overlap, so
    all reads together never exceed the sidecar's size."""

    def __init__(self, model_path: Path) -> None:
        self.model_path = model_path
        self.folder = model_path.resolve().parent
        self.handles: dict[str, tuple[io.BufferedReader, int]] = {}
        self.ranges: dict[str, list[tuple[int, int, str]]] = {}

    def __call__(self, ext: pb.ExternalData, tensor: str) -> bytearray:
        where = f"{self.model_path}: tensor {tensor!r}"
        location = ext.location
        if (not location or location in (".", "..") or "/" in location or "\\" in location
                or "\0" in location):
            raise FileFormatError(f"{where}: external location {location!r} is not a file "
                                  "name in the model's folder")
        target = (self.folder / location).resolve()
        if target.parent != self.folder:
            raise FileFormatError(f"{where}: external location {location!r} is outside "
                                  "the model's folder")
        opened = self.handles.get(location)
        if opened is None:
            opened = self.handles[location] = self._open(target, location, where)
        handle, size = opened
        end = ext.offset + ext.length
        if end > size:
            raise FileFormatError(f"{where}: sidecar {location!r} is {size} bytes, too short "
                                  f"for offset {ext.offset} + length {ext.length}")
        ranges = self.ranges.setdefault(location, [])
        index = bisect.bisect_left(ranges, (ext.offset, end, tensor))
        for other in ranges[max(index - 1, 0):index + 1]:
            if ext.length and other[0] < end and ext.offset < other[1]:
                raise FileFormatError(
                    f"{where}: sidecar range {ext.offset}..{end} of {location!r} overlaps "
                    f"tensor {other[2]!r} ({other[0]}..{other[1]}); tensors may not share "
                    "sidecar bytes")
        ranges.insert(index, (ext.offset, end, tensor))
        handle.seek(ext.offset)
        data = bytearray(ext.length)  # the tensor's memory once loaded (no second copy)
        if handle.readinto(data) != ext.length:
            raise FileFormatError(f"{where}: sidecar {location!r} ended early (changed "
                                  "while read)")
        if hashlib.sha256(data).hexdigest() != ext.sha256:
            raise FileFormatError(f"{where}: checksum mismatch in sidecar {location!r}",
                                  hint="the sidecar belongs to another save of the model")
        return data

    def _open(self, target: Path, location: str, where: str) -> tuple[io.BufferedReader, int]:
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise FileFormatError(f"{where}: sidecar file {location!r} is missing",
                                  hint="copy it next to the model file") from None
        except OSError as exc:
            raise FileFormatError(f"{where}: cannot open sidecar {location!r} "
                                  f"({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise FileFormatError(f"{where}: sidecar {location!r} is {kind}")
        return os.fdopen(fd, "rb"), st.st_size

    def close(self) -> None:
        for handle, _ in self.handles.values():
            handle.close()
