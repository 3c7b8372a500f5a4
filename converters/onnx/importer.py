"""ONNX -> irbridge IR.

`import_onnx(path)` reads an ONNX file (external data included), checks it, runs ONNX
shape inference, and converts every graph: initializers become model tensors, ONNX ops
that the neutral op set can express become neutral nodes (`irbridge.converters.onnx.
_import_ops` holds one handler per ONNX op), standard ops defined as ONNX functions are
expanded through their function bodies when every node of the body maps, and everything
else becomes an opaque node of domain "onnx" (or its own custom domain), never dropped.
Shape computations on constants are folded through the registry's reference
implementations, so that `Reshape(x, Concat(Shape(w), ...))` becomes a reshape with a
`shape` attribute.

Every node records where it came from: source format "onnx", the ONNX op type, the ONNX
node name, and the module path found in the node's metadata_props (irbridge's own keys
or those torch.onnx.export(dynamo=True) writes).
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import math
import os
import re
import stat
import warnings
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TypeProto,
    helper,
)

from irbridge._gc import gc_paused
from irbridge.builder import GraphBuilder
from irbridge.converters._budget import inline_budget
from irbridge.converters._dims import check_bindings
from irbridge.converters.onnx import _ort_schemas  # noqa: F401  (onnxruntime's ONNX-domain ops)
from irbridge.converters.onnx._common import (
    META_ATTRS,
    META_INPUTS,
    META_LOCATION,
    META_MODULE_CLASS,
    META_MODULE_PATH,
    META_NODE,
    META_OP,
    META_OUTPUTS,
    META_PROPS,
    META_SOURCE_NODE,
    MIN_IMPORT_OPSET,
    MODEL_FIELDS,
    MODEL_META_OPSETS,
    ONNX_DOMAINS,
    OPAQUE_ONNX_DOMAIN,
    OPAQUE_REASON,
    attrs_from_json,
    dtype_from_onnx,
    make_tensor,
    max_opset,
    onnx_type_name,
    packed_bytes,
    restore_initializers,
    tensor_data,
    tensor_from_proto,
    without_large_initializers,
)
from irbridge.dtypes import DType
from irbridge.errors import CaptureError, FileFormatError, IrbridgeError, OpError
from irbridge.ir import (
    AttrValue,
    Dim,
    Graph,
    Model,
    Node,
    Provenance,
    SourceLocation,
    SymDim,
    TensorType,
    Value,
)
from irbridge.ops import registry

STRICT = os.environ.get("IRBRIDGE_ONNX_STRICT", "") == "1"
"""Debugging aid: let handler bugs (not Unsupported) propagate instead of going opaque."""

FOLD_LIMIT = 1 << 16
"""Largest output (elements) that the importer computes at import time to fold shapes."""

SYNTHESIS_LIMIT = FOLD_LIMIT
"""Largest array (elements) a handler makes up at import time from declared dims (an
index range, zeros, an identity mask: `NodeCtx.arange`, `zeros`, `eye`); a bigger one is
a node the graph computes when it runs. Read at call time (tests lower it)."""


class OnnxImportWarning(UserWarning):
    """Some nodes were kept as opaque nodes because the file's shapes or types do not fit
    their op (the rest of the graph imported)."""


class Unsupported(Exception):
    """A handler cannot express this ONNX node in neutral ops (the node becomes opaque)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- coverage ---------------------------------------------------------------------------------

@dataclass
class Coverage:
    """What the importer did with each ONNX op type (all graphs, bodies included)."""

    mapped: Counter[str] = field(default_factory=Counter)     # op type -> nodes mapped
    expanded: Counter[str] = field(default_factory=Counter)   # ... through function bodies
    regrouped: Counter[str] = field(default_factory=Counter)  # neutral op -> lowered groups
    opaque: Counter[str] = field(default_factory=Counter)     # qualified op -> opaque nodes
    reasons: dict[str, str] = field(default_factory=dict)     # qualified op -> first reason
    invalid: dict[str, str] = field(default_factory=dict)     # node -> why it does not fit
    inconsistent: str = ""  # what ONNX's strict type and shape inference says is wrong

    @property
    def fully_neutral(self) -> bool:
        return not self.opaque

    def lines(self) -> list[str]:
        out = []
        for op, n in sorted(self.mapped.items()):
            out.append(f"mapped   {op}: {n}")
        for op, n in sorted(self.expanded.items()):
            out.append(f"expanded {op}: {n} (function body)")
        for op, n in sorted(self.regrouped.items()):
            out.append(f"regrouped {op}: {n} (irbridge lowering)")
        for op, n in sorted(self.opaque.items()):
            out.append(f"opaque   {op}: {n} ({self.reasons.get(op, '')})")
        return out


def coverage_of(model: Model) -> dict[str, tuple[int, str]]:
    """Opaque ops of an IR model with their counts and the importer's reason."""
    found: dict[str, tuple[int, str]] = {}
    for _, node in model.all_nodes():
        if node.is_opaque:
            count, reason = found.get(node.qualified_op, (0, ""))
            why = node.annotations.values.get(OPAQUE_REASON, "")
            found[node.qualified_op] = (count + 1, reason or str(why))
    return found


# -- public entry points ----------------------------------------------------------------------

def import_onnx(path: str | os.PathLike[str], *,
                dims: Mapping[str, int] | None = None) -> Model:
    """Read an ONNX model file (external data from its folder) into an IR model. `dims`
    binds symbolic input dims by name (`{"batch": 1, "seq": 128}`) before shape inference,
    so that every shape computed from them (a reshape's target built with Shape and
    Concat) comes out static."""
    return import_onnx_with_coverage(path, dims=dims)[0]


@gc_paused
def import_onnx_with_coverage(path: str | os.PathLike[str], *,
                              dims: Mapping[str, int] | None = None
                              ) -> tuple[Model, Coverage]:
    file = Path(path)
    proto = load_proto(file)
    return from_onnx(proto, source=str(file), base_dir=str(file.parent), dims=dims)


def load_proto(file: Path) -> ModelProto:
    """Parse an ONNX file without its external data; errors name the file."""
    if not file.is_file():
        raise FileFormatError(f"{file}: " + ("no such ONNX file" if not file.exists() else
                                             "not a regular file, not an ONNX model"))
    try:
        size = file.stat().st_size
        if size > onnx.checker.MAXIMUM_PROTOBUF:  # a sparse file of zeros claims any size
            raise FileFormatError(f"{file}: {size:,} bytes, over protobuf's 2 GiB message limit, "
                                  "so not an ONNX model (larger models keep their weights "
                                  "as external data)")
        data = file.read_bytes()
    except OSError as exc:
        raise FileFormatError(f"{file}: cannot read ({exc.strerror})") from exc
    return parse_proto(data, str(file))



def parse_proto(data: bytes, source: str) -> ModelProto:
    if not data:
        raise FileFormatError(f"{source}: empty file, not an ONNX model")
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise FileFormatError(f"{source}: not a readable ONNX model (truncated or corrupt: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                              ) from exc
    if not proto.HasField("graph") or not proto.opset_import:
        raise FileFormatError(f"{source}: not an ONNX model (no graph or no opset_import; "
                              "truncated or another file type?)")
    _check_strings(proto, source)
    return proto


def _check_strings(proto: ModelProto, source: str) -> None:
    """Every string field must be UTF-8: protobuf hands invalid ones over as bytes, which
    would travel into names, errors and the .irb writer. Iterative over the messages; a
    message's path (`model.graph.node[3]`) is spelt out only for the error."""
    stack: list[tuple[Any, _Path | None]] = [(proto, None)]
    while stack:
        message, path = stack.pop()
        for field_desc, value in message.ListFields():
            if field_desc.type == field_desc.TYPE_STRING:
                repeated = field_desc.is_repeated
                for index, item in enumerate(value if repeated else [value]):
                    if isinstance(item, bytes):
                        at = _spelt((path, field_desc.name, index if repeated else None))
                        raise FileFormatError(f"{source}: {at} is not valid UTF-8 text")
            elif field_desc.type == field_desc.TYPE_MESSAGE:
                if field_desc.is_repeated:
                    name = field_desc.name
                    stack.extend((item, (path, name, i)) for i, item in enumerate(value))
                else:
                    stack.append((value, (path, field_desc.name, None)))


_Path = tuple[Any, str, int | None]
"""Where a message sits: (its parent's path or None for the model, field name, index in a
repeated field or None)."""


def _spelt(path: _Path) -> str:
    parts: list[str] = []
    at: _Path | None = path
    while at is not None:
        at, name, index = at
        parts.append(name if index is None else f"{name}[{index}]")
    return ".".join(["model", *reversed(parts)])


def from_onnx(proto: ModelProto, *, source: str = "<memory>",
              base_dir: str | None = None, regroup: bool = True,
              strict: bool | None = None,
              dims: Mapping[str, int] | None = None) -> tuple[Model, Coverage]:
    """Convert an ONNX ModelProto; tensors with external data are read from `base_dir`.
    `regroup` rebuilds neutral ops that irbridge's exporter lowered to several ONNX
    nodes (recorded in node metadata_props). Nodes whose inputs do not fit their op
    become opaque with an OnnxImportWarning, or a CaptureError when `strict` (default:
    the IRBRIDGE_STRICT_IMPORT=1 environment variable). `dims` binds symbolic input dims
    by name (see `import_onnx`)."""
    original = _opset_map(proto, source).get("", 0)
    changed = _bind_input_dims(proto, dims, source) if dims else []
    try:
        proto, consistent = _prepare(proto, source, base_dir)
    finally:  # the caller's proto keeps its symbolic dims
        for dim, name in changed:
            dim.dim_param = name
    importer = _ModelImporter(proto, source, base_dir, regroup)
    if _opset_map(proto, source).get("", 0) != original:
        importer.model.metadata["onnx.converted_from_opset"] = str(original)
    try:
        model = importer.run()
    except IrbridgeError:
        raise
    except RecursionError as exc:
        raise CaptureError(f"{source}: graph nesting too deep to import") from exc
    importer.coverage.inconsistent = "" if consistent else _strict_inference_problem(proto)
    _report_invalid(importer.coverage, source, strict)
    return model, importer.coverage


def _bind_input_dims(proto: ModelProto, dims: Mapping[str, int],
                     source: str) -> list[tuple[Any, str]]:
    """Set the graph inputs' symbolic dims (dim_param) named in `dims` to their sizes, in
    place; returns what to restore. A name no input dim carries, or a size below 1, is an
    error."""
    named = {d.dim_param for value in proto.graph.input
             for d in value.type.tensor_type.shape.dim if d.dim_param}
    check_bindings(dims, named, source, dim="graph input dim",
                   dims_named="symbolic input dims")
    changed = []
    for value in proto.graph.input:
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param in dims:
                changed.append((d, d.dim_param))
                d.dim_value = dims[d.dim_param]  # clears dim_param (a oneof)
    return changed


def _report_invalid(coverage: Coverage, source: str, strict: bool | None) -> None:
    """Nodes kept opaque because their inputs do not fit the op (the file's shapes or
    types disagree) are a broken model, not a missing mapping: a warning line naming
    them, or with `strict` (IRBRIDGE_STRICT_IMPORT=1) an error."""
    default_opaque = sum(n for op, n in coverage.opaque.items()
                         if op.startswith(f"{OPAQUE_ONNX_DOMAIN}::"))
    if not coverage.invalid and not (coverage.inconsistent and default_opaque):
        return
    if strict is None:
        strict = os.environ.get("IRBRIDGE_STRICT_IMPORT", "") == "1"
    if coverage.invalid:
        names = list(coverage.invalid)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5
                                        else "")
        message = (f"{source}: {len(names)} node(s) do not type-check and were kept as "
                   f"opaque nodes: {shown} (first: {coverage.invalid[names[0]]})")
    else:
        message = (f"{source}: the model does not type-check ({coverage.inconsistent}); "
                   f"{default_opaque} ONNX node(s) were kept as opaque nodes")
    if strict:
        raise CaptureError(message)
    warnings.warn(message + "; IRBRIDGE_STRICT_IMPORT=1 makes this an error",
                  OnnxImportWarning, stacklevel=3)


# -- preparation: checks, opset conversion, shape inference --------------------------------------

def _prepare(proto: ModelProto, source: str,
             base_dir: str | None) -> tuple[ModelProto, bool]:
    """The model checked, upgraded to the supported opsets and shape-inferred, and whether
    ONNX's strict type and shape inference accepts it (False: `_strict_inference_problem`
    says what it rejects)."""
    if proto.ir_version > onnx.IR_VERSION:
        raise FileFormatError(f"{source}: ONNX IR version {proto.ir_version} is newer than "
                              f"this onnx package reads ({onnx.IR_VERSION})")
    opsets = _opset_map(proto, source)
    version = opsets.get("", 0)
    newest = max_opset()
    if version > newest:
        raise FileFormatError(f"{source}: opset {version} is outside the supported range "
                              f"{MIN_IMPORT_OPSET}..{newest}")
    _check_external_files(proto, source, base_dir)
    _check_structure(proto.graph, source, set())
    local = {(f.domain, f.name) for f in proto.functions}
    _check_domains(proto.graph, set(opsets), local, source)
    if proto.functions:
        _check_function_expansion(proto, source)
        try:
            from onnx import inliner

            proto = inliner.inline_local_functions(proto)
        except Exception as exc:
            raise CaptureError(f"{source}: cannot inline local functions: "
                               f"{_first_line(exc)}") from exc
    if version and version < MIN_IMPORT_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, MIN_IMPORT_OPSET)
        except Exception as exc:
            raise FileFormatError(f"{source}: opset {version} is outside the supported range "
                                  f"{MIN_IMPORT_OPSET}..{newest} and the ONNX version "
                                  f"converter cannot upgrade it ({_first_line(exc)})") from exc
    light, moved, added = without_large_initializers(proto)
    try:
        onnx.checker.check_model(light)
    except onnx.checker.ValidationError as exc:
        raise CaptureError(f"{source}: invalid ONNX model: {_first_line(exc)}") from exc
    except UnicodeDecodeError as exc:  # the checker's own message holds the bad bytes
        raise CaptureError(f"{source}: invalid ONNX model: a name or string is not valid "
                           f"UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except ValueError as exc:
        raise CaptureError(f"{source}: invalid ONNX model: {_first_line(exc)}") from exc
    # Strict inference first: on a consistent model its result is the lenient one's (the
    # flags only decide whether a conflict raises), so one pass serves both; only a model it
    # rejects pays for the lenient pass (and later for the message naming the problem).
    consistent = True
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except Exception:
        consistent = False
        try:
            inferred = onnx.shape_inference.infer_shapes(light, check_type=False,
                                                         strict_mode=False, data_prop=True)
        except Exception as exc:
            raise CaptureError(f"{source}: ONNX shape inference failed: "
                               f"{_first_line(exc)}") from exc
    return restore_initializers(inferred, moved, added), consistent


def _strict_inference_problem(proto: ModelProto) -> str:
    """The first complaint of ONNX's strict type and shape inference ("" when none)."""
    light, _, _ = without_large_initializers(proto)
    try:
        onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
    except Exception as exc:
        return _first_line(exc)
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    line = lines[0]
    if line.startswith("[ONNXRuntimeError]") or "==>" in line:
        line = lines[-1]
    return line[:300]


def _opset_map(proto: ModelProto, source: str) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain in ONNX_DOMAINS else entry.domain
        opsets[domain] = int(entry.version)
    if "" not in opsets and any(n.domain in ONNX_DOMAINS for n in proto.graph.node):
        raise FileFormatError(f"{source}: no opset_import for the default ONNX domain")
    return opsets


def _check_external_files(proto: ModelProto, source: str, base_dir: str | None) -> None:
    """Check every external-data reference before anything is read: the location is a
    relative path to a regular file inside the model's folder (no FIFO, device, folder
    or link out), offset and length are plain non-negative integers, and the range holds
    exactly the bytes the tensor's dims and type need, inside the file."""
    tensors = [_all_initializers(proto.graph), *(_node_tensors(f.node) for f in proto.functions)]
    for tensor in itertools.chain(*tensors):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        what = f"{source}: tensor {tensor.name!r}"
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if base_dir is None:
            raise FileFormatError(f"{what} has external data {location!r} but no folder was "
                                  "given to read it from")
        root = Path(base_dir).resolve()
        if not location or "\0" in location or Path(location).is_absolute():
            raise FileFormatError(f"{what}: external data location {location!r} is not a "
                                  "relative path inside the model's folder")
        target = (root / location).resolve()
        if root not in target.parents:
            raise FileFormatError(f"{what}: external data location {location!r} points "
                                  "outside the model's folder")
        if _links_in(root, location):
            raise FileFormatError(f"{what}: external data location {location!r} goes through "
                                  "a symbolic link (ONNX reads external data from regular "
                                  "files only)")
        try:
            status = target.stat()
        except OSError as exc:
            raise FileFormatError(f"{source}: external data file {location!r} of tensor "
                                  f"{tensor.name!r} is missing (looked in {root})") from exc
        if not stat.S_ISREG(status.st_mode):
            raise FileFormatError(f"{what}: external data location {location!r} is not a "
                                  "regular file")
        offset, length = (_external_int(info, key, what) for key in ("offset", "length"))
        need = _tensor_bytes(tensor)
        if length is not None and need is not None and length != need:
            raise FileFormatError(f"{what}: external data length {length} does not match the "
                                  f"{need} bytes its type and dims need")
        if length is None and need is not None and status.st_size - (offset or 0) > need:
            # without a length ONNX reads to the end of the file, whatever its size
            raise FileFormatError(f"{what}: external data file {location!r} holds "
                                  f"{status.st_size - (offset or 0)} bytes from offset "
                                  f"{offset or 0} but the tensor needs {need} and no length "
                                  "is given")
        size = length if length is not None else need
        end = (offset or 0) + (size or 0)
        if end > status.st_size:
            raise FileFormatError(f"{source}: external data file {location!r} is truncated "
                                  f"(tensor {tensor.name!r} needs bytes up to {end}, the file "
                                  f"has {status.st_size})")


def _links_in(root: Path, location: str) -> bool:
    """Whether any existing component of `location` below `root` is a symbolic link."""
    path = root
    for part in Path(location).parts:
        path = path / part
        if path.is_symlink():
            return True
    return False


def _external_int(info: dict[str, str], key: str, what: str) -> int | None:
    text = info.get(key, "")
    if text == "":
        return None
    if not re.fullmatch(r"\d{1,20}", text.strip()):
        raise FileFormatError(f"{what}: external data {key} {text!r} is not a non-negative "
                              "integer")
    return int(text)


def _tensor_bytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes a tensor's data takes by its dims and element type (None when unknown);
    ONNX packs sub-byte types (int4: two elements per byte)."""
    dtype = dtype_from_onnx(tensor.data_type)
    if dtype is None:
        return None
    count = 1
    for dim in tensor.dims:
        if dim < 0:
            raise FileFormatError(f"tensor {tensor.name!r} has negative dim {dim}")
        count *= int(dim)
    return packed_bytes(dtype, count)


def _all_initializers(graph: GraphProto) -> Iterator[onnx.TensorProto]:
    """Initializers and tensor attributes (Constant values) of a graph and its bodies."""
    yield from graph.initializer
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Iterable[NodeProto]) -> Iterator[onnx.TensorProto]:
    """Tensor attributes of nodes (a graph's or a model-local function's) and their bodies."""
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type == AttributeProto.TENSOR:
                yield attribute.t
            yield from attribute.tensors
            if attribute.type == AttributeProto.GRAPH:
                yield from _all_initializers(attribute.g)
            for sub in attribute.graphs:
                yield from _all_initializers(sub)


def _check_function_expansion(proto: ModelProto, source: str) -> None:
    """Refuse a graph that would grow past the inlining budget once its model-local
    functions are inlined (40 functions that each call the next twice are 2^40 nodes),
    before ONNX's inliner tries. Iterative; each function is scanned once; cycles are
    left to the inliner, which names them."""
    limit = inline_budget()
    functions = {(f.domain, f.name): f for f in proto.functions}
    scanned: dict[tuple[str, str], tuple[int, list[tuple[str, str]]]] = {}
    total: dict[tuple[str, str], int] = {}
    on_path: set[tuple[str, str]] = set()
    stack = [(key, False) for key in functions]
    while stack:
        key, done = stack.pop()
        if done:
            own, calls = scanned[key]
            total[key] = min(own + sum(total.get(c, 1) for c in calls), limit + 1)
            on_path.discard(key)
        elif key not in total and key not in on_path:
            scanned[key] = _own_nodes(functions[key].node, functions)
            on_path.add(key)
            stack.append((key, True))
            stack.extend((c, False) for c in scanned[key][1] if c not in total)
    own, calls = _own_nodes(proto.graph.node, functions)
    if own + sum(total[c] for c in calls) > limit:
        raise FileFormatError(f"{source}: the graph expands to more than {limit:,} nodes once "
                              "its model-local functions are inlined; refusing (set "
                              "IRBRIDGE_MAX_INLINED_OPS to raise the limit)")


def _own_nodes(nodes: Iterable[NodeProto], functions: Container[tuple[str, str]]
               ) -> tuple[int, list[tuple[str, str]]]:
    """Nodes that are not calls of a model-local function (bodies included), and the calls."""
    count, calls = 0, []
    for node in nodes:
        key = (node.domain, node.op_type)
        if key in functions:
            calls.append(key)
            continue
        count += 1
        for attribute in node.attribute:
            subs = [attribute.g] if attribute.type == AttributeProto.GRAPH else []
            for sub in [*subs, *attribute.graphs]:
                sub_count, sub_calls = _own_nodes(sub.node, functions)
                count += sub_count
                calls += sub_calls
    return count, calls


def _check_domains(graph: GraphProto, domains: set[str], local: set[tuple[str, str]],
                   source: str) -> None:
    for node in graph.node:
        domain = "" if node.domain in ONNX_DOMAINS else node.domain
        if domain not in domains and (node.domain, node.op_type) not in local:
            raise CaptureError(f"{source}: node {_node_label(node)} uses domain "
                               f"{node.domain!r}, which the model does not import (unknown "
                               "domain)")
        for attribute in node.attribute:
            subs = [attribute.g] if attribute.type == AttributeProto.GRAPH else []
            for sub in [*subs, *attribute.graphs]:
                _check_domains(sub, domains, local, source)


def _check_structure(graph: GraphProto, source: str, outer: set[str]) -> None:
    """Dangling inputs and cycles, with messages that name the node; sorts a graph whose
    nodes are merely out of order."""
    defined = set(outer) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    available = _in_order(graph, defined)
    if available is None:   # out of order, or a problem to name: the full analysis
        produced = {out for node in graph.node for out in node.output if out}
        for node in graph.node:
            for name in node.input:
                if name and name not in defined and name not in produced:
                    raise CaptureError(f"{source}: node {_node_label(node)} reads {name!r}, "
                                       "which no node, graph input or initializer defines")
        order = _topological_order(graph, defined, source)
        if order != list(range(len(graph.node))):
            nodes = [NodeProto() for _ in graph.node]
            for new, old in enumerate(order):
                nodes[new].CopyFrom(graph.node[old])
            del graph.node[:]
            graph.node.extend(nodes)
        available = defined | produced
    for node in graph.node:
        for attribute in node.attribute:
            subs = [attribute.g] if attribute.type == AttributeProto.GRAPH else []
            for sub in [*subs, *attribute.graphs]:
                _check_structure(sub, source, available)
    for out in graph.output:
        if out.name not in available:
            raise CaptureError(f"{source}: graph {graph.name!r} output {out.name!r} is not "
                               "produced by any node, input or initializer")


def _in_order(graph: GraphProto, defined: set[str]) -> set[str] | None:
    """The names defined in `graph` (`defined` and every node output) when each node reads
    only names defined before it and no name is defined twice, the way producers write
    their files; None otherwise. One pass and one set, where the full analysis builds a
    producer map, a dependency set per node and a depth-first order."""
    available = set(defined)
    for node in graph.node:
        reads = _reads(node) if node.attribute and _has_subgraph(node) else node.input
        for name in reads:
            if name and name not in available:
                return None
        for out in node.output:
            if out:
                if out in available:
                    return None
                available.add(out)
    return available


def _has_subgraph(node: NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _topological_order(graph: GraphProto, defined: set[str], source: str) -> list[int]:
    producer = {}
    for index, node in enumerate(graph.node):
        for out in node.output:
            if out:
                if out in producer or out in defined:
                    raise CaptureError(f"{source}: value {out!r} is defined twice (second by "
                                       f"node {_node_label(node)})")
                producer[out] = index
    deps: list[set[int]] = []
    for node in graph.node:
        needed = {producer[n] for n in _reads(node) if n in producer}
        deps.append(needed)
    order: list[int] = []
    done: set[int] = set()
    state = [0] * len(graph.node)  # 0 new, 1 on stack, 2 done
    for start in range(len(graph.node)):
        if state[start]:
            continue
        stack: list[tuple[int, Iterator[int]]] = [(start, iter(sorted(deps[start])))]
        state[start] = 1
        while stack:
            index, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[index] = 2
                done.add(index)
                order.append(index)
            elif state[nxt] == 1:
                raise CaptureError(f"{source}: graph {graph.name!r} has a cycle through node "
                                   f"{_node_label(graph.node[nxt])}")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
    return order


def _reads(node: NodeProto) -> set[str]:
    """Names a node reads, including the free names of its subgraphs."""
    names = {n for n in node.input if n}
    for attribute in node.attribute:
        subs = [attribute.g] if attribute.type == AttributeProto.GRAPH else []
        for sub in [*subs, *attribute.graphs]:
            names |= _free_names(sub)
    return names


def _free_names(graph: GraphProto) -> set[str]:
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    free: set[str] = set()
    for node in graph.node:
        free |= {n for n in _reads(node) if n not in local}
        local |= set(node.output)
    free |= {o.name for o in graph.output if o.name not in local}
    return free


def _node_label(node: NodeProto) -> str:
    name = f"{node.name!r} " if node.name else ""
    first = node.output[0] if node.output else "?"
    return f"{name}({node.op_type} -> {first!r})"


# -- types ---------------------------------------------------------------------------------------

_INFERRED_DIM = re.compile(r"unk__\d+")
"""Names ONNX shape inference makes up for unknown dims: unknown in the IR."""


def tensor_type(tp: TypeProto | None, what: str) -> TensorType | None:
    """The IR type of an ONNX tensor type (None: no type information).
    Raises CaptureError for non-tensor or string types, which the IR cannot hold."""
    if tp is None:
        return None
    kind = tp.WhichOneof("value")
    if kind is None:
        return None
    if kind != "tensor_type":
        raise CaptureError(f"{what} has ONNX type {kind.replace('_type', '')}, which the IR "
                           "cannot represent (tensors only)")
    tt = tp.tensor_type
    if tt.elem_type == 0:
        return None
    dtype = dtype_from_onnx(tt.elem_type)
    if dtype is None:
        raise CaptureError(f"{what} has element type {onnx_type_name(tt.elem_type)}, which the "
                           "IR cannot represent")
    if not tt.HasField("shape"):
        return TensorType(dtype, None)
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param and not _INFERRED_DIM.fullmatch(d.dim_param):
            dims.append(SymDim(d.dim_param))
        else:
            dims.append(None)
    return TensorType(dtype, tuple(dims))


def merge_types(ir: TensorType | None, onnx_type: TensorType | None) -> TensorType | None:
    """Refine the registry's type with ONNX's where the registry knows less."""
    if ir is None:
        return onnx_type
    if onnx_type is None or onnx_type.dtype != ir.dtype:
        return ir
    if ir.shape is None:
        return onnx_type
    if onnx_type.shape is None or len(onnx_type.shape) != len(ir.shape):
        return ir
    dims = tuple(a if a is not None else b for a, b in zip(ir.shape, onnx_type.shape,
                                                            strict=True))
    return TensorType(ir.dtype, dims)


# -- provenance from metadata_props -----------------------------------------------------------------

def provenance_of(node: NodeProto, source_op: str | None = None) -> Provenance:
    meta = {p.key: p.value for p in node.metadata_props}
    module_path = meta.get(META_MODULE_PATH, "")
    module_class = meta.get(META_MODULE_CLASS, "")
    if not module_path:
        module_path, torch_class = _torch_scope(meta)
        module_class = module_class or torch_class
    location = _location(meta)
    return Provenance("onnx", source_op or node.op_type, node.name, module_path, module_class,
                      location)


def _literal_list(text: str) -> list[str]:
    if not text:            # most files carry no torch.onnx scopes: skip the parser
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _torch_scope(meta: dict[str, str]) -> tuple[str, str]:
    """Module path and class from torch.onnx.export(dynamo=True) metadata: the name scopes
    list every enclosing module's path and ends with the op's own name."""
    scopes = _literal_list(meta.get("pkg.torch.onnx.name_scopes", ""))
    classes = _literal_list(meta.get("pkg.torch.onnx.class_hierarchy", ""))
    if len(scopes) >= 2:
        return scopes[-2], classes[-2] if len(classes) == len(scopes) else ""
    namespace = meta.get("namespace", "")
    if namespace:
        parts = [p.split(":", 1) for p in namespace.split("/")]
        if len(parts) >= 2:
            path, cls = parts[-2][0].strip(), parts[-2][1].strip() if len(parts[-2]) > 1 else ""
            return path, cls
    return "", ""


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _location(meta: dict[str, str]) -> SourceLocation | None:
    text = meta.get(META_LOCATION, "")
    if text:
        file, _, line = text.rpartition(":")
        return SourceLocation(file, int(line) if line.isdigit() else 0, "")
    trace = meta.get("pkg.torch.onnx.stack_trace", "")
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return None
    last = frames[-1]
    rest = trace[last.end():].split("\n")
    code = rest[1].strip() if len(rest) > 1 else ""
    return SourceLocation(last.group(1), int(last.group(2)), code)


# -- the model importer -------------------------------------------------------------------------

Handler = Callable[["NodeCtx"], Sequence["Value | None"]]
HANDLERS: dict[str, Handler] = {}
"""ONNX op type (default domain) -> handler; filled by _import_ops, _import_quant,
_import_rnn and _import_contrib."""
DOMAIN_HANDLERS: dict[tuple[str, str], Handler] = {}
"""(custom domain, op type) -> handler: onnxruntime's com.microsoft contrib ops, filled by
_import_contrib."""


class _ModelImporter:
    def __init__(self, proto: ModelProto, source: str, base_dir: str | None,
                 regroup: bool) -> None:
        from irbridge.converters.onnx import (  # noqa: F401  (fill the handler tables)
            _import_contrib,
            _import_ops,
            _import_quant,
            _import_rnn,
        )

        self.proto = proto
        self.source = source
        self.base_dir = base_dir
        self.regroup = regroup
        self.opsets = _opset_map(proto, source)
        self.coverage = Coverage()
        self.model = Model(name=proto.graph.name, source_format="onnx",
                           opset_version=registry.OPSET_VERSION)
        self.consts: dict[Value, np.ndarray] = {}
        self.types: dict[str, TypeProto] = {}
        self.reserved: set[str] = set()
        self.consumed: set[str] = set()
        self.protected: set[int] = set()  # ids of nodes that dead-code removal must keep
        self._collect(proto.graph)
        self._fresh = 0

    def _collect(self, graph: GraphProto) -> None:
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.HasField("type"):
                self.types.setdefault(vi.name, vi.type)
            self.reserved.add(vi.name)
        self.reserved |= {t.name for t in graph.initializer}
        self.consumed |= {o.name for o in graph.output}
        for node in graph.node:
            self.reserved |= {n for n in node.output if n}
            self.consumed |= {n for n in node.input if n}
            for attribute in node.attribute:
                subs = [attribute.g] if attribute.type == AttributeProto.GRAPH else []
                for sub in [*subs, *attribute.graphs]:
                    self._collect(sub)

    def fresh(self, base: str, graph: Graph) -> str:
        base = base or "v"
        name = base
        while name in self.reserved or name in graph.values:
            self._fresh += 1
            name = f"{base}_{self._fresh}"
        self.reserved.add(name)
        return name

    def run(self) -> Model:
        model = self.model
        meta = model.metadata
        meta[MODEL_META_OPSETS] = ",".join(f"{d or 'ai.onnx'}={v}"
                                           for d, v in sorted(self.opsets.items()))
        if self.proto.producer_name:
            meta["onnx.producer"] = (f"{self.proto.producer_name} "
                                     f"{self.proto.producer_version}").strip()
        meta["onnx.ir_version"] = str(self.proto.ir_version)
        for prop in self.proto.metadata_props:
            meta[f"{META_PROPS}{prop.key}"] = prop.value
        for name, key in MODEL_FIELDS.items():  # written back as the fields on export
            value = getattr(self.proto, name)
            if value:
                meta[key] = str(value)
        main = _GraphImporter(self, self.proto.graph, None, "main")
        graph = main.convert()
        model.graphs = [graph]
        _rebuild_uses(model.graphs)
        _remove_dead(model.graphs, self.protected)
        model.renumber_nodes()
        return model




class _GraphImporter:
    def __init__(self, mi: _ModelImporter, proto: GraphProto, parent: _GraphImporter | None,
                 name: str) -> None:
        self.mi = mi
        self.proto = proto
        self.parent = parent
        self.graph = Graph(proto.name or name)
        self.builder = GraphBuilder(self.graph, mi.model)
        self.env: dict[str, Value] = {}
        self.output_names = {o.name for o in proto.output}
        self._readers: dict[str, list[int]] | None = None

    # -- lookups ------------------------------------------------------------------------------
    def lookup(self, name: str) -> Value | None:
        scope: _GraphImporter | None = self
        while scope is not None:
            if name in scope.env:
                return scope.env[name]
            scope = scope.parent
        return None

    def value(self, name: str, where: str) -> Value:
        found = self.lookup(name)
        if found is None:
            raise CaptureError(f"{self.mi.source}: {where} reads {name!r}, which is not defined")
        return found

    def onnx_type(self, name: str) -> TensorType | None:
        return tensor_type(self.mi.types.get(name), f"{self.mi.source}: value {name!r}")

    # -- conversion ---------------------------------------------------------------------------
    def convert(self) -> Graph:
        mi, proto = self.mi, self.proto
        initializer_names = {t.name for t in proto.initializer}
        for tensor_proto in proto.initializer:
            self._add_initializer(tensor_proto)
        if proto.sparse_initializer:
            raise CaptureError(f"{mi.source}: sparse initializers are not supported")
        for vi in proto.input:
            if vi.name in initializer_names:
                continue  # an overridable initializer (IR < 4): kept as a weight
            t = tensor_type(vi.type if vi.HasField("type") else None,
                            f"{mi.source}: graph input {vi.name!r}")
            if vi.name in self.graph.values:
                raise CaptureError(f"{mi.source}: graph input {vi.name!r} is defined twice")
            self.env[vi.name] = self.graph.add_input(vi.name, t)
        self.convert_nodes(list(proto.node))
        outputs = []
        for vi in proto.output:
            value = self.value(vi.name, f"graph {proto.name!r} output")
            outputs.append(self._named_output(value, vi.name))
        self.graph.set_outputs(outputs)
        return self.graph

    def _add_initializer(self, tensor_proto: onnx.TensorProto) -> None:
        mi = self.mi
        try:
            tensor = tensor_from_proto(tensor_proto, tensor_proto.name, mi.base_dir)
        except ValueError as exc:
            raise CaptureError(f"{mi.source}: initializer {tensor_proto.name!r}: {exc}") from exc
        except OSError as exc:
            raise FileFormatError(f"{mi.source}: cannot read external data of tensor "
                                  f"{tensor_proto.name!r}: {exc}") from exc
        if tensor.name in mi.model.tensors:
            raise CaptureError(f"{mi.source}: initializer {tensor.name!r} is defined twice")
        mi.model.add_tensor(tensor)
        value = self.graph.add_parameter(tensor)
        self.env[tensor.name] = value
        if tensor.data is not None:
            mi.consts[value] = tensor_data(tensor)

    def _named_output(self, value: Value, name: str) -> Value:
        """Graph outputs keep their ONNX names: alias values get an identity node."""
        if value.name == name:
            return value
        if name in self.graph.values:
            raise CaptureError(f"{self.mi.source}: output {name!r} collides with another value")
        node = self.graph.add_node("identity", [value], [name], output_types=[value.type],
                                   provenance=Provenance("onnx", "Identity", "", "", ""))
        return node.outputs[0]

    def convert_nodes(self, nodes: list[NodeProto], *, trial: bool = False,
                      opsets: dict[str, int] | None = None) -> None:
        index = 0
        while index < len(nodes):
            node = nodes[index]
            if self.mi.regroup and not trial:
                run = self._group_run(nodes, index)
                if run > 0 and self._regroup(nodes[index:index + run], index):
                    index += run
                    continue
            self.convert_node(node, trial=trial, opsets=opsets)
            index += 1

    # -- one node ------------------------------------------------------------------------------
    def convert_node(self, node: NodeProto, *, trial: bool = False,
                     opsets: dict[str, int] | None = None) -> None:
        mi = self.mi
        opsets = opsets or mi.opsets
        domain = "" if node.domain in ONNX_DOMAINS else node.domain
        if domain not in opsets:
            raise CaptureError(f"{mi.source}: node {_node_label(node)} uses domain "
                               f"{node.domain!r}, which the model does not import (unknown "
                               "domain)")
        version = opsets[domain]
        reason = f"domain {domain!r} is not the default ONNX domain" if domain else ""
        invalid = False
        handler = HANDLERS.get(node.op_type) if not domain else \
            DOMAIN_HANDLERS.get((domain, node.op_type))
        if handler is None and (not domain or any(d == domain for d, _ in DOMAIN_HANDLERS)):
            reason = f"no neutral mapping for {node.op_type}"
        if handler is not None:
            with self._attempt() as attempt:
                ctx = NodeCtx(self, node, version)
                results = handler(ctx)
                self._bind(node, results, attempt.start, provenance_of(node))
            if attempt.ok:
                if not trial:
                    mi.coverage.mapped[f"{domain}::{node.op_type}" if domain
                                       else node.op_type] += 1
                    self._protect_if_dead(node)
                return
            reason, invalid = attempt.reason, attempt.invalid
        if not domain:
            with self._attempt() as attempt:
                self._expand(node, version)
            if attempt.ok:
                if not trial:
                    mi.coverage.expanded[node.op_type] += 1
                    self._protect_if_dead(node)
                return
            if attempt.reason and not attempt.reason.startswith("no function body"):
                reason = f"{reason}; function body: {attempt.reason}"
        if trial:
            raise Unsupported(f"{node.op_type}: {reason}")
        if invalid and not any(
                (v := self.env.get(n)) is not None and v.producer is not None
                and v.producer.is_opaque for n in node.input if n):  # not a knock-on effect
            mi.coverage.invalid.setdefault(_node_label(node), reason)
        self._opaque(node, domain, reason)

    def _protect_if_dead(self, node: NodeProto) -> None:
        """An ONNX node whose outputs nothing reads is kept, as the file gives it."""
        consumed = self.mi.consumed
        if any(n in consumed for n in node.output if n):
            return
        for name in node.output:
            value = self.env.get(name) if name else None
            if value is not None and value.producer is not None:
                self.mi.protected.add(id(value.producer))

    @contextlib.contextmanager
    def _attempt(self) -> Iterator[_Attempt]:
        """Run a conversion step; on Unsupported (or an op error) undo every node it added."""
        attempt = _Attempt(len(self.graph.nodes), len(self.env))
        try:
            yield attempt
        except (Unsupported, OpError, ValueError, IndexError, KeyError, TypeError,
                ArithmeticError) as exc:
            if STRICT and not isinstance(exc, Unsupported):
                raise
            attempt.ok = False
            attempt.invalid = not isinstance(exc, Unsupported)
            attempt.reason = exc.reason if isinstance(exc, Unsupported) else _first_line(exc)
            self._rollback(attempt.start, attempt.env)

    def _rollback(self, start: int, env_size: int) -> None:
        """Undo an attempt in time proportional to what it added (attempts roll back
        often: a whole-graph pass per rollback made imports quadratic)."""
        added = list(reversed(self.graph.nodes[start:]))
        for node in added:
            for out in node.outputs:
                out.uses = []
                self.mi.consts.pop(out, None)
        self.graph.remove_nodes(added)
        while len(self.env) > env_size:  # names are only ever added, never rebound
            self.env.popitem()

    def _bind(self, node: NodeProto, results: Sequence[Value | None], start: int,
              provenance: Provenance) -> None:
        """Give a handler's results the ONNX output names; check types; fold constants."""
        if len(results) > len(node.output) and any(r is not None
                                                   for r in results[len(node.output):]):
            raise Unsupported(f"handler returned {len(results)} outputs for "
                              f"{len(node.output)}")
        created = self.graph.nodes[start:]
        for emitted in created:
            emitted.provenance = Provenance(provenance.source_format, provenance.source_op,
                                            provenance.source_node, provenance.module_path,
                                            provenance.module_class, provenance.location)
        for index, name in enumerate(node.output):
            value = results[index] if index < len(results) else None
            if not name:
                continue
            if value is None:
                if name in self.mi.consumed:
                    raise Unsupported(f"output {index} ({name!r}) is used but has no neutral "
                                      "equivalent")
                continue
            expected = self.onnx_type(name)
            if expected is not None and value.type is not None \
                    and expected.dtype != value.type.dtype:
                raise Unsupported(f"output {name!r}: neutral ops give {value.type.dtype.short}, "
                                  f"ONNX says {expected.dtype.short}")
            own = value.producer is not None and any(value.producer is n for n in created)
            if own and value.name != name and name not in self.graph.values:
                self._rename(value, name)
            value.type = merge_types(value.type, expected) if own else value.type
            self.env[name] = value
        self._fold(created)

    def _rename(self, value: Value, name: str) -> None:
        del self.graph.values[value.name]
        value.name = name
        self.graph.values[name] = value

    def _fold(self, nodes: Sequence[Node]) -> None:
        consts = self.mi.consts
        for node in nodes:
            if node.is_opaque or node.op in ("if", "loop"):
                continue
            args = [None if v is None else consts.get(v) for v in node.inputs]
            if any(a is None and v is not None for a, v in zip(args, node.inputs, strict=True)):
                continue
            sizes = [t.numel() if (t := v.type) is not None else None for v in node.outputs]
            if node.op != "constant" and any(s is None or s > FOLD_LIMIT for s in sizes):
                continue
            schema = registry.get(node.op)
            try:
                attrs = schema.resolve_attrs(node.attrs, registry.node_where(node))
                ctx = registry.RefContext([v.type for v in node.outputs], _no_subgraph, "")
                with np.errstate(all="ignore"):
                    results = schema.reference(args, attrs, ctx)
            except Exception:
                continue
            for value, array in zip(node.outputs, results, strict=False):
                array = np.asarray(array)
                if node.op == "constant":
                    array = tensor_data(node.attrs["value"])  # type: ignore[arg-type]
                consts[value] = array
                value.type = TensorType(value.type.dtype if value.type else
                                        DType.from_numpy(array.dtype), tuple(array.shape))

    def _opaque(self, node: NodeProto, domain: str, reason: str) -> None:
        mi = self.mi
        label = _node_label(node)
        inputs: list[Value | None] = []
        for name in node.input:
            inputs.append(self.value(name, f"node {label}") if name else None)
        while inputs and inputs[-1] is None:
            inputs.pop()
        attrs = {a.name: self._attribute(a, label) for a in node.attribute}
        names: list[str] = []
        omitted: list[int] = []
        last = max((i for i, n in enumerate(node.output) if n), default=-1)
        for index, name in enumerate(node.output[:last + 1]):
            if not name:
                omitted.append(index)
                name = mi.fresh(f"{node.output[last]}__omitted{index}", self.graph)
            names.append(name)
        types = [self.onnx_type(n) for n in names]
        ir_domain = domain or OPAQUE_ONNX_DOMAIN
        qualified = f"{ir_domain}::{node.op_type}"
        created = self.graph.add_node(node.op_type, inputs, names, attrs, output_types=types,
                                      domain=ir_domain, name=node.name,
                                      provenance=provenance_of(node))
        created.annotations.values[OPAQUE_REASON] = reason
        if omitted:
            created.annotations.values["onnx.omitted_outputs"] = tuple(omitted)
        for name, value in zip(names, created.outputs, strict=True):
            self.env[name] = value
        mi.coverage.opaque[qualified] += 1
        mi.coverage.reasons.setdefault(qualified, reason)

    def _attribute(self, attribute: AttributeProto, label: str) -> AttrValue:
        kind = attribute.type
        where = f"{self.mi.source}: node {label} attribute {attribute.name!r}"
        if attribute.ref_attr_name:
            raise CaptureError(f"{where} refers to a function attribute outside a function")
        if kind == AttributeProto.FLOAT:
            return float(attribute.f)
        if kind == AttributeProto.INT:
            return int(attribute.i)
        if kind == AttributeProto.STRING:
            return _text(attribute.s, where)
        if kind == AttributeProto.TENSOR:
            try:
                return tensor_from_proto(attribute.t, attribute.t.name or attribute.name,
                                         self.mi.base_dir)
            except ValueError as exc:
                raise CaptureError(f"{where}: {exc}") from exc
        if kind == AttributeProto.GRAPH:
            return self.subgraph(attribute.g, attribute.name)
        if kind == AttributeProto.FLOATS:
            return tuple(float(v) for v in attribute.floats)
        if kind == AttributeProto.INTS:
            return tuple(int(v) for v in attribute.ints)
        if kind == AttributeProto.STRINGS:
            return tuple(_text(s, where) for s in attribute.strings)
        if kind == AttributeProto.GRAPHS:
            return tuple(self.subgraph(g, f"{attribute.name}_{i}")
                         for i, g in enumerate(attribute.graphs))
        raise CaptureError(f"{where} has kind {AttributeProto.AttributeType.Name(kind)}, which "
                           "the IR cannot hold")

    def subgraph(self, proto: GraphProto, name: str) -> Graph:
        sub = _GraphImporter(self.mi, proto, self, name)
        return sub.convert()

    # -- function bodies ------------------------------------------------------------------------
    def _expand(self, node: NodeProto, version: int) -> None:
        function = _function_body(node, version, self.mi.types)
        if function is None:
            raise Unsupported("no function body")
        body_opsets = dict(self.mi.opsets)
        for entry in function.opset_import:
            body_opsets["" if entry.domain in ONNX_DOMAINS else entry.domain] = entry.version
        nodes = _inline(node, function, self.mi)
        self._infer_body_types(node, nodes, body_opsets)
        start = len(self.graph.nodes)
        self.convert_nodes(nodes, trial=True, opsets=body_opsets)
        for created in self.graph.nodes[start:]:  # they all stand for the one ONNX node
            created.provenance.source_op = node.op_type
            created.provenance.source_node = node.name
        for name in node.output:
            if name and name not in self.env and name in self.mi.consumed:
                raise Unsupported(f"function body does not produce {name!r}")

    def _infer_body_types(self, node: NodeProto, nodes: list[NodeProto],
                          opsets: dict[str, int]) -> None:
        """Shape inference over an expanded body, so that its handlers see types."""
        inputs = []
        for name in dict.fromkeys(n for body in nodes for n in body.input if n):
            if any(name in body.output for body in nodes):
                continue
            found = self.lookup(name)
            if found is None:
                continue
            if found.type is None:
                inputs.append(helper.make_value_info(name, TypeProto()))
            else:
                inputs.append(_value_info(name, found.type))
        outputs = [helper.make_value_info(n, TypeProto()) for n in node.output if n]
        graph = helper.make_graph(nodes, "body", inputs, outputs)
        opset_ids = [helper.make_opsetid(d or "", v) for d, v in opsets.items()]
        model = helper.make_model(graph, opset_imports=opset_ids)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False,
                                                         strict_mode=False, data_prop=True)
        except Exception as exc:
            raise Unsupported(f"shape inference of the function body failed: "
                              f"{_first_line(exc)}") from exc
        for vi in [*inferred.graph.value_info, *inferred.graph.output]:
            if vi.HasField("type") and vi.name not in self.mi.types:
                self.mi.types[vi.name] = vi.type

    # -- regrouping irbridge's own lowerings ------------------------------------------------------
    def _group_run(self, nodes: list[NodeProto], index: int) -> int:
        meta = {p.key: p.value for p in nodes[index].metadata_props}
        key = meta.get(META_NODE)
        if key is None or META_ATTRS not in meta or META_OP not in meta:
            return 0
        end = index + 1
        while end < len(nodes) and any(p.key == META_NODE and p.value == key
                                       for p in nodes[end].metadata_props):
            end += 1
        return end - index

    def _only_inside(self, name: str, start: int, end: int) -> bool:
        """True when only the nodes start..end-1 of this graph read `name` (and it is no
        graph output)."""
        if self._readers is None:
            self._readers = _consumer_map(self.proto)
        readers = self._readers.get(name, [])
        return all(start <= i < end for i in readers) and name not in self.output_names

    def _regroup(self, run: list[NodeProto], start: int) -> bool:
        meta = {p.key: p.value for p in run[0].metadata_props}
        schema = registry.lookup(meta[META_OP])
        if schema is None:
            return False
        try:
            attrs = attrs_from_json(meta[META_ATTRS])
            input_names = json.loads(meta.get(META_INPUTS, "[]"))
            output_names = json.loads(meta.get(META_OUTPUTS, "[]"))
        except (ValueError, TypeError):
            return False
        if not isinstance(input_names, list) or not isinstance(output_names, list) \
                or not output_names or not all(isinstance(n, str) for n in input_names
                                               + output_names):
            return False
        produced = {o for n in run for o in n.output if o}
        if not set(output_names) <= produced:
            return False
        for name in produced - set(output_names):
            if name in self.mi.consumed and not self._only_inside(name, start,
                                                                  start + len(run)):
                return False
        inputs: list[Value | None] = []
        for name in input_names:
            if not name:
                inputs.append(None)
                continue
            found = self.lookup(name)
            if found is None:
                return False
            inputs.append(found)
        while inputs and inputs[-1] is None:
            inputs.pop()
        source_op = "+".join(dict.fromkeys(n.op_type for n in run))
        prov = provenance_of(run[0], source_op)
        prov.source_node = meta.get(META_SOURCE_NODE, run[0].name)
        with self._attempt() as attempt:
            outs = self.builder.op_multi(schema.name, inputs, attrs,
                                         num_outputs=len(output_names), name=output_names[0])
            fake = NodeProto()
            fake.output.extend(output_names)
            self._bind(fake, outs, attempt.start, prov)
        if attempt.ok:
            self.mi.coverage.regrouped[schema.name] += 1
        return attempt.ok


def _rebuild_uses(graphs: Sequence[Graph]) -> None:
    """Recompute every value's uses (rolled-back attempts may leave stale entries)."""
    everything = [g for graph in graphs for g in _graph_tree(graph)]
    for graph in everything:
        for value in graph.values.values():
            value.uses = []
    for graph in everything:
        for node in graph.nodes:
            for index, operand in enumerate(node.inputs):
                if operand is not None:
                    operand.uses.append((node, index))


def _graph_tree(graph: Graph) -> Iterator[Graph]:
    yield graph
    for node in graph.nodes:
        for sub in node.subgraphs():
            yield from _graph_tree(sub)


def _remove_dead(graphs: Sequence[Graph], protected: set[int]) -> None:
    """Drop neutral nodes whose outputs nothing reads: the shape computations that folding
    replaced by attributes. Opaque nodes and nodes given dead in the ONNX file stay."""
    changed = True
    while changed:
        changed = False
        for top in graphs:
            for graph in _graph_tree(top):
                outputs = {id(v) for v in graph.outputs}
                for node in reversed(list(graph.nodes)):
                    if node.is_opaque or id(node) in protected:
                        continue
                    if all(not v.uses and id(v) not in outputs for v in node.outputs):
                        graph.remove_node(node)
                        changed = True


def _consumer_map(graph: GraphProto) -> dict[str, list[int]]:
    """Value name -> indices of the nodes of `graph` that read it (subgraphs included)."""
    readers: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        for name in _reads(node):
            readers.setdefault(name, []).append(index)
    return readers


@dataclass
class _Attempt:
    start: int
    env: int
    ok: bool = True
    reason: str = ""
    invalid: bool = False  # failed on an error (a shape or type mismatch), not Unsupported


def _no_subgraph(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    raise Unsupported("control flow is not folded")


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaptureError(f"{where} is not UTF-8 text") from exc


def _value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    from irbridge.converters.onnx._common import dtype_to_onnx

    shape: list[int | str | None] | None = None
    if t.shape is not None:
        shape = [d if isinstance(d, int) else d.name if isinstance(d, SymDim) else None
                 for d in t.shape]
    return helper.make_tensor_value_info(name, dtype_to_onnx(t.dtype), shape)


def _function_body(node: NodeProto, version: int,
                   types: dict[str, TypeProto]) -> FunctionProto | None:
    """The ONNX function that defines a standard op at `version`, if it has one."""
    try:
        schema = onnx.defs.get_schema(node.op_type, version, "")
    except onnx.defs.SchemaError:
        return None
    dynamic: Any = schema  # the function accessors are missing from onnx's type stubs
    candidates = [v for v in dynamic.function_opset_versions if v <= version]
    if candidates:
        function = FunctionProto()
        function.ParseFromString(dynamic.get_function_with_opset_version(max(candidates)))
        return function
    dependent = [v for v in dynamic.context_dependent_function_opset_versions if v <= version]
    if not dependent:
        return None
    input_types = []
    for name in node.input:
        tp = types.get(name) if name else None
        input_types.append((tp or TypeProto()).SerializeToString())
    try:
        data = dynamic.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), input_types)
    except Exception:
        return None
    if not data:
        return None
    function = FunctionProto()
    function.ParseFromString(data)
    return function if function.node else None


def _inline(node: NodeProto, function: FunctionProto, mi: _ModelImporter) -> list[NodeProto]:
    """The body of `function` with its inputs, outputs and attributes bound to `node`."""
    prefix = (node.output[0] if node.output and node.output[0] else node.op_type) + "/"
    names: dict[str, str] = {}
    for index, formal in enumerate(function.input):
        names[formal] = node.input[index] if index < len(node.input) else ""
    for index, formal in enumerate(function.output):
        if index < len(node.output) and node.output[index]:
            names[formal] = node.output[index]
    given = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in function.attribute_proto}
    try:
        schema = onnx.defs.get_schema(node.op_type, function.opset_import[0].version
                                      if function.opset_import else 1, node.domain)
        for name, spec in schema.attributes.items():
            if spec.default_value.type and name not in defaults:
                defaults[name] = spec.default_value
    except onnx.defs.SchemaError:
        pass

    def rename(name: str) -> str:
        if not name:
            return ""
        if name not in names:
            names[name] = _fresh_proto_name(prefix + name, mi)
        return names[name]

    out: list[NodeProto] = []
    for body_node in function.node:
        copy = NodeProto()
        copy.CopyFrom(body_node)
        del copy.input[:]
        copy.input.extend(rename(n) for n in body_node.input)
        del copy.output[:]
        copy.output.extend(rename(n) for n in body_node.output)
        del copy.attribute[:]
        for attribute in body_node.attribute:
            if attribute.ref_attr_name:
                source = given.get(attribute.ref_attr_name) or \
                    defaults.get(attribute.ref_attr_name)
                if source is None:
                    continue
                bound = AttributeProto()
                bound.CopyFrom(source)
                bound.name = attribute.name
                copy.attribute.append(bound)
            else:
                copy.attribute.append(attribute)
        del copy.metadata_props[:]
        copy.metadata_props.extend(node.metadata_props)
        copy.name = f"{node.name}/{body_node.op_type}" if node.name else ""
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in copy.attribute):
            raise Unsupported("function bodies with subgraphs are not expanded")
        out.append(copy)
    for n in out:
        mi.consumed |= {i for i in n.input if i}
    return out


def _fresh_proto_name(base: str, mi: _ModelImporter) -> str:
    name = base
    counter = 0
    while name in mi.reserved:
        counter += 1
        name = f"{base}_{counter}"
    mi.reserved.add(name)
    return name


# -- the context a handler sees ---------------------------------------------------------------------

class NodeCtx:
    """One ONNX node as a handler sees it: IR inputs, constants, attributes and a builder."""

    def __init__(self, gi: _GraphImporter, node: NodeProto, opset: int) -> None:
        self.gi = gi
        self.node = node
        self.opset = opset
        self.op_type = node.op_type
        label = _node_label(node)
        self.inputs: list[Value | None] = [gi.value(n, f"node {label}") if n else None
                                           for n in node.input]
        self.attrs: dict[str, Any] = {}
        for attribute in node.attribute:
            if attribute.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                continue
            value = helper.get_attribute_value(attribute)
            if isinstance(value, bytes):
                value = value.decode("utf-8", errors="replace")
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode("utf-8", errors="replace") for v in value]
            self.attrs[attribute.name] = value
        self.graph_attrs = {a.name: a for a in node.attribute
                            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)}
        self.base = (node.output[0] if node.output and node.output[0] else node.op_type)

    # attributes
    def a(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def tensor_attr(self, name: str) -> np.ndarray | None:
        value = self.attrs.get(name)
        if value is None:
            return None
        if isinstance(value, onnx.TensorProto):
            try:
                return tensor_from_proto(value, "t", self.gi.mi.base_dir).data
            except ValueError as exc:
                raise Unsupported(str(exc)) from exc
        raise Unsupported(f"attribute {name!r} is not a tensor")

    # inputs
    def has(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def x(self, index: int = 0) -> Value:
        if not self.has(index):
            raise Unsupported(f"input {index} is missing")
        value = self.inputs[index]
        assert value is not None
        return value

    def opt(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def const(self, index: int) -> np.ndarray | None:
        if not self.has(index):
            return None
        return self.gi.mi.consts.get(self.x(index))

    def need_const(self, index: int, what: str) -> np.ndarray:
        value = self.const(index)
        if value is None:
            raise Unsupported(f"{what} (input {index}) is not a constant")
        return value

    def ints(self, index: int, what: str) -> tuple[int, ...]:
        return tuple(int(v) for v in np.asarray(self.need_const(index, what)).reshape(-1))

    def type(self, index: int = 0) -> TensorType:
        t = self.x(index).type
        if t is None:
            raise Unsupported(f"input {index} has no type")
        return t

    def dtype(self, index: int = 0) -> DType:
        return self.type(index).dtype

    def shape(self, index: int = 0) -> tuple[Dim, ...]:
        shape = self.type(index).shape
        if shape is None:
            raise Unsupported(f"input {index} has an unknown rank")
        return shape

    def rank(self, index: int = 0) -> int:
        return len(self.shape(index))

    def static(self, index: int = 0) -> tuple[int, ...]:
        t = self.type(index)
        if not t.is_static:
            raise Unsupported(f"input {index} needs a static shape, got {t}")
        return t.static_shape()

    def out_type(self, index: int = 0) -> TensorType | None:
        if index >= len(self.node.output) or not self.node.output[index]:
            return None
        return self.gi.onnx_type(self.node.output[index])

    def used(self, index: int) -> bool:
        return index < len(self.node.output) and bool(self.node.output[index]) \
            and self.node.output[index] in self.gi.mi.consumed

    # building
    def op(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any] | None = None
           ) -> Value:
        name = self.gi.mi.fresh(f"{self.base}/{op}", self.gi.graph)
        return self.gi.builder.op(op, inputs, attrs, name=name)

    def ops(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any] | None,
            count: int) -> list[Value]:
        name = self.gi.mi.fresh(f"{self.base}/{op}", self.gi.graph)
        for i in range(count):
            self.gi.mi.reserved.add(f"{name}_{i}")
        return self.gi.builder.op_multi(op, inputs, attrs, name=name, num_outputs=count)

    def constant(self, array: np.ndarray | float | int | bool, dtype: DType | None = None,
                 name: str = "const") -> Value:
        data = np.asarray(array, dtype=dtype.numpy if dtype is not None else None)
        if data.dtype == np.float64 and dtype is None:
            data = data.astype(np.float32)
        return self.op("constant", [], {"value": make_tensor(name, data)})

    def arange(self, count: int, shape: Sequence[int] | None = None,
               dtype: DType = DType.INT64) -> Value:
        """0, 1, .., count - 1 (reshaped to `shape`): a constant when small, else a `range`
        node. Counts come from declared dims, which a small file can make huge: what the
        importer synthesises from a shape is never allocated at import time past
        SYNTHESIS_LIMIT elements (the graph computes it when it runs)."""
        if count <= SYNTHESIS_LIMIT:
            data = np.arange(count, dtype=dtype.numpy)
            return self.constant(data if shape is None else data.reshape(shape), dtype)
        steps = self.op("range", [], {"start": 0.0, "limit": float(count), "delta": 1.0,
                                      "dtype": dtype})
        return steps if shape is None else self.op("reshape", [steps], {"shape": tuple(shape)})

    def zeros(self, shape: Sequence[int], dtype: DType) -> Value:
        """Zeros of `shape`: a constant when small, else a `full` node (see `arange`)."""
        if math.prod(shape) <= SYNTHESIS_LIMIT:
            return self.constant(np.zeros(tuple(shape), dtype.numpy), dtype)
        return self.op("full", [], {"shape": tuple(shape), "value": 0.0, "dtype": dtype})

    def eye(self, rows: int, cols: int, k: int, dtype: DType,
            shape: Sequence[int] | None = None) -> Value:
        """The rows x cols matrix with ones on diagonal `k`, laid out in `shape` when given
        (dims of 1 around it: the rows along its first other dim, the columns along its
        last, as an Einsum diagonal's mask): a constant when small, else
        `cast(equal(row + k, column))` on `arange`s (see `arange`)."""
        out = (rows, cols) if shape is None else tuple(shape)
        if rows * cols <= SYNTHESIS_LIMIT:
            return self.constant(np.eye(rows, cols, k, dtype=dtype.numpy).reshape(out), dtype)
        big = [i for i, d in enumerate(out) if d != 1]
        row = self.arange(rows, [rows if i == big[0] else 1 for i in range(len(out))])
        col = self.arange(cols, [cols if i == big[-1] else 1 for i in range(len(out))])
        if k:
            row = self.op("add", [row, self.constant(np.array(k, np.int64), DType.INT64)])
        return self.op("cast", [self.op("equal", [row, col])], {"dtype": dtype})

    def initializer(self, array: np.ndarray, dtype: DType, name: str) -> Value:
        """A new model tensor holding `array` (weights a handler rewrote at import time,
        e.g. unpacked from bytes): an initializer, whose bytes analyses count as weights
        (a `constant` node's are not). A model tensor of that name holding the same values
        (the same weights rewritten for another node) is read again, not stored twice."""
        mi = self.gi.mi
        data = np.asarray(array, dtype.numpy)
        tensor = mi.model.tensors.get(name)
        if tensor is None or tensor.dtype != dtype or tensor.data is None \
                or tensor.shape != data.shape or not np.array_equal(tensor_data(tensor), data):
            fresh = mi.fresh(name, self.gi.graph)
            while fresh in mi.model.tensors:
                fresh = mi.fresh(name, self.gi.graph)
            tensor = mi.model.add_tensor(make_tensor(fresh, data, dtype))
        value = self.gi.graph.add_parameter(tensor)
        mi.consts[value] = tensor_data(tensor)
        return value

    def subgraph(self, name: str) -> Graph:
        attribute = self.graph_attrs.get(name)
        if attribute is None or attribute.type != AttributeProto.GRAPH:
            raise Unsupported(f"attribute {name!r} is not a graph")
        return self.gi.subgraph(attribute.g, name)
