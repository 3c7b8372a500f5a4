"""irbridge IR -> ONNX.

`to_onnx(model, opset=None)` builds an `onnx.ModelProto` that passes
`onnx.checker.check_model(full_check=True)`: model tensors become initializers, neutral
ops map to ONNX ops of the chosen opset (`_export_ops` holds one emitter per op, some of
them short sequences of ONNX ops), ops without an emitter are lowered through the
registry's decompositions, opaque nodes of domain "onnx" (or a custom domain) are written
back as they were imported. Symbolic dims become dim_params.

Each ONNX node records its provenance in metadata_props (irbridge.module_path,
irbridge.source_op, ...) and in a readable name; the nodes written for one neutral node
share `irbridge.node`, and a multi-node lowering also records the neutral op, its
attributes and its inputs and outputs, so that `import_onnx` rebuilds the neutral op.

`export_onnx(model, path, opset=None)` writes the file atomically, with external data
when the weights pass 2 GiB.

Without an opset, the export uses the lowest opset that represents the model
(`default_opset`): `DEFAULT_OPSET` (18) for other front-ends; for an ONNX import its
source opset, clamped to the newest onnxruntime loads (26 with onnxruntime 1.31) and
raised to the opset that introduced each opaque ONNX op's version as read; when a node
needs a newer opset (an op introduced later, a feature such as float8 casts, an element
type an older op version lacks), the export is redone at the opset that node names.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
from google.protobuf.message import EncodeError
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, helper

from irbridge._gc import gc_paused
from irbridge.atomic import (
    check_companion_name,
    check_output,
    folder_lock,
    fsync_dir,
    generation_name,
    kill_point,
    remove_old_data_files,
)
from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import _export_opaque, _legal, _stream
from irbridge.converters.onnx._common import (
    DEFAULT_OPSET,
    META_ATTRS,
    META_INPUTS,
    META_LOCATION,
    META_MODULE_CLASS,
    META_MODULE_PATH,
    META_NODE,
    META_OP,
    META_OUTPUTS,
    META_PROPS,
    META_SOURCE_FORMAT,
    META_SOURCE_NODE,
    META_SOURCE_OP,
    MIN_EXPORT_OPSET,
    MODEL_FIELDS,
    MODEL_META_OPSETS,
    OPAQUE_ONNX_DOMAIN,
    TYPE_OPSET,
    array_to_proto,
    attrs_to_json,
    dtype_to_onnx,
    max_opset,
    tensor_data,
    tensor_to_proto,
    without_large_initializers,
)
from irbridge.dtypes import DType
from irbridge.errors import ExportError, IrbridgeError
from irbridge.ir import AttrValue, Graph, Model, Node, SymDim, Tensor, TensorType, Value
from irbridge.ops import registry

TARGETS = ("onnx", "onnxruntime")
"""`export_onnx(target=...)`: "onnx" (runtime-neutral forms; the default) or "onnxruntime"
(forms onnxruntime's CPU provider runs faster, with its contrib MultiHeadAttention: a
file for onnxruntime only; converters/onnx/_ort_fusions.py)."""

EXTERNAL_DATA_THRESHOLD = 2 * 1024**3 - 64 * 1024**2
"""Weights above this many bytes go to an external data file (protobuf's 2 GiB limit)."""

INLINE_CONSTANT_BYTES = 1024
"""Constants larger than this become initializers instead of Constant nodes."""


# -- public API ----------------------------------------------------------------------------

def default_opset(model: Model) -> int:
    """The first opset an export without an explicit opset tries: DEFAULT_OPSET for a
    model of another front-end; for an ONNX import its source opset (the ops as they were
    written, e.g. an Attention or a GridSample version), clamped to the newest opset
    onnxruntime loads, and raised to the version each opaque ONNX op was read as."""
    source = _source_opset(model)
    if source is None:
        return DEFAULT_OPSET
    chosen = max(min(source, runtime_max_opset()), MIN_EXPORT_OPSET)
    for op in {n.op for n in _all_nodes(model) if n.domain == OPAQUE_ONNX_DOMAIN}:
        try:
            read = onnx.defs.get_schema(op, source, "")
        except onnx.defs.SchemaError:
            continue  # the export names the op that does not exist
        oldest = read  # versions that only widened the element types mean the same
        while oldest.since_version > 1:
            try:
                previous = onnx.defs.get_schema(op, oldest.since_version - 1, "")
            except onnx.defs.SchemaError:
                break
            if not _same_interface(previous, read):
                break
            oldest = previous
        chosen = max(chosen, int(oldest.since_version))
    return chosen


@functools.cache
def runtime_max_opset() -> int:
    """The newest default-domain opset the installed onnxruntime loads (probed once with a
    one-Relu model), at most the installed onnx's; onnx's newest without onnxruntime."""
    newest = max_opset()
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - a dependency of irbridge
        return newest
    options = ort.SessionOptions()
    options.log_severity_level = 4
    for version in range(newest, MIN_EXPORT_OPSET - 1, -1):
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", 1, [1])],
                                  [helper.make_tensor_value_info("y", 1, [1])])
        opsets = [helper.make_opsetid("", version)]
        probe = helper.make_model(graph, opset_imports=opsets)
        probe.ir_version = helper.find_min_ir_version_for(opsets)
        try:
            ort.InferenceSession(probe.SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
        except Exception:
            continue
        return version
    return DEFAULT_OPSET


def _source_opset(model: Model) -> int | None:
    """The default-domain opset an ONNX-imported model was read at, clamped to the
    exporter's range; None for other models."""
    source = _parse_opsets(model.metadata.get(MODEL_META_OPSETS, "")).get("")
    return None if source is None else min(max(source, MIN_EXPORT_OPSET), max_opset())


def _type_opset(model: Model) -> tuple[int, DType] | None:
    """The newest opset that introduced an element type the model uses (a weight, a value
    or a dtype attribute), with that type; None when every type exists from opset 13.
    Raises ExportError for a type ONNX lacks."""
    used = {t.dtype for t in model.tensors.values()}
    for graph in model.graphs:
        used |= {v.type.dtype for v in graph.inputs if v.type is not None}
    for node in _all_nodes(model):
        used |= {v.type.dtype for v in node.outputs if v.type is not None}
        used |= {v for v in node.attrs.values() if isinstance(v, DType)}
        used |= {v.dtype for v in node.attrs.values() if isinstance(v, Tensor)}
    for dtype in sorted(used, key=lambda d: d.value):
        dtype_to_onnx(dtype)  # ExportError for a type ONNX lacks (float6, float8 e3m4, ...)
    found = [(TYPE_OPSET[d], d) for d in used if d in TYPE_OPSET]
    return max(found, key=lambda pair: (pair[0], pair[1].value)) if found else None


def _all_nodes(model: Model) -> Iterator[Node]:
    stack = list(model.graphs)
    while stack:
        graph = stack.pop()
        for node in graph.nodes:
            yield node
            stack.extend(v for v in node.attrs.values() if isinstance(v, Graph))


@gc_paused
def to_onnx(model: Model, *, opset: int | None = None, check: bool = True,
            optimize: bool = True, fold_batch_norm: bool = False,
            allow_custom_ops: bool = False, target: str = "onnx") -> ModelProto:
    """The IR model as an ONNX ModelProto of the given opset (default domain); None =
    the lowest that represents the model (see the module doc).
    `check` runs onnx.checker.check_model(full_check=True) (skipped above 2 GiB, where
    `export_onnx` checks the written file instead). `optimize` runs the clean-up pass of
    `_optimize` (constants as initializers, constant folding, no-op removal, shared
    initializers); `fold_batch_norm` also folds BatchNormalization into the Conv before
    it (a file for inference). An opaque node of a domain that is not ONNX's (aten,
    stablehlo, ...: from another front-end) is refused with an ExportError naming it,
    since runtimes cannot run it, unless `allow_custom_ops` asks for custom-domain nodes;
    opaque nodes imported from an ONNX file are written back as they were.
    `target="onnxruntime"` rewrites the file into forms onnxruntime's CPU provider runs
    faster, some in its contrib domain (a file for onnxruntime only; `_ort_fusions`),
    computing the same numbers up to kernel rounding; "onnx" (the default) keeps the
    standard, runtime-neutral forms."""
    proto, payloads = _build_checked(model, opset, optimize, fold_batch_norm, stream=False,
                                     check=check and _weight_bytes(model)
                                     < EXTERNAL_DATA_THRESHOLD,
                                     allow_custom_ops=allow_custom_ops, target=target)
    _stream.materialize(proto, payloads)
    return proto


def _build_checked(model: Model, opset: int | None, optimize: bool, fold_batch_norm: bool,
                   *, stream: bool, check: bool, allow_custom_ops: bool = False,
                   target: str = "onnx"
                   ) -> tuple[ModelProto, dict[str, Callable[[], np.ndarray]]]:
    """`_build`, then the ONNX checker when `check`. Without an explicit opset, a model
    the checker refuses at the lowest opset (an older op version lacking an element type
    the model uses, a shape rule that changed) is built again at its source opset."""
    if target not in TARGETS:
        raise ExportError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    from irbridge.formats import check_complete

    check_complete(model, "onnx")  # an incomplete Dynamo capture is not the model
    proto, payloads = _build(model, opset, optimize, fold_batch_norm, stream=stream,
                             allow_custom_ops=allow_custom_ops, target=target)
    if not check:
        return proto, payloads
    while True:
        try:
            check_proto(proto)
            return proto, payloads
        except ExportError as exc:
            source = _source_opset(model)
            used = next((o.version for o in proto.opset_import
                         if o.domain in ("", "ai.onnx")), None)
            if opset is not None or source is None or used is None or source <= used:
                raise
            retry = _next_version(exc, used, source)
        proto, payloads = _build(model, retry, optimize, fold_batch_norm, stream=stream,
                                 allow_custom_ops=allow_custom_ops, target=target)


def _needed_opset(exc: ExportError, used: int, model: Model) -> int | None:
    """The opset an export refused at `used` needs: the one a node names (OpsetTooOld),
    or, for an element type the op's version at `used` lacks (Cast of float8 before 19),
    its next version up to the source opset of an ONNX import; None when neither."""
    if isinstance(exc, OpsetTooOld):
        return exc.needed
    source = _source_opset(model)
    if isinstance(exc.__cause__, _legal.IllegalType) and source is not None and source > used:
        return _next_version(exc, used, source)
    return None


def _next_version(exc: ExportError, used: int, source: int) -> int:
    """The opset to retry at after the checker or the type legalisation refused an export
    at `used`: the next version of the op named (Cast reads float8 from 19), else
    `source`."""
    match = re.search(r"op_type:(\w+)|ONNX (\w+) takes no", str(exc))
    if match is not None:
        for version in range(used + 1, source):
            try:
                if onnx.defs.get_schema(match[1] or match[2], version,
                                        "").since_version > used:
                    return version
            except onnx.defs.SchemaError:
                break
    return source


def _build(model: Model, opset: int | None, optimize: bool, fold_batch_norm: bool, *,
           stream: bool, allow_custom_ops: bool = False, target: str = "onnx"
           ) -> tuple[ModelProto, dict[str, Callable[[], np.ndarray]]]:
    """The ModelProto and, with `stream`, the data of its pending initializers (see
    `_stream`): large weights are left out of the proto until the file is written."""
    newest = max_opset()
    if opset is not None and not MIN_EXPORT_OPSET <= opset <= newest:
        raise ExportError(f"opset {opset} is outside the supported range "
                          f"{MIN_EXPORT_OPSET}..{newest}")
    if not model.graphs:
        raise ExportError("model has no graph to export")
    if not any(g.outputs for g in model.graphs):
        raise ExportError(f"{model.name or 'model'}: no graph has an output (the model "
                          "returns no tensor), and onnxruntime refuses an ONNX graph "
                          "that computes nothing")
    chosen = default_opset(model) if opset is None else opset
    typed = _type_opset(model)
    if typed is not None and chosen < typed[0]:
        message = (f"{model.name or 'model'}: element type {typed[1].short} needs ONNX opset "
                   f"{typed[0]} or newer (exporting at {chosen})")
        if opset is not None or typed[0] > newest:
            raise OpsetTooOld(message, typed[0])
        chosen = typed[0]
    while True:
        exporter = _ModelExporter(model, chosen, stream=stream,
                                  allow_custom_ops=allow_custom_ops)
        try:
            proto = exporter.run()
            break
        except ExportError as exc:  # only when choosing: an explicit opset is kept
            needed = _needed_opset(exc, chosen, model)
            if opset is not None or needed is None or not chosen < needed <= newest:
                raise
            chosen = needed
    if optimize or fold_batch_norm:
        from irbridge.converters.onnx._optimize import optimize as lean

        lean(proto, fold_batch_norm=fold_batch_norm, payloads=exporter.payloads)
    if target == "onnxruntime":
        from irbridge.converters.onnx._ort_fusions import tune_for_onnxruntime

        tune_for_onnxruntime(proto)
    return proto, exporter.payloads


def export_onnx(model: Model, path: str | os.PathLike[str], opset: int | None = None, *,
                external_data: bool | None = None, check: bool = True,
                optimize: bool = True, fold_batch_norm: bool = False,
                allow_custom_ops: bool = False, target: str = "onnx") -> Path:
    """Write the model as an ONNX file, atomically (temporary files renamed into place).
    `external_data` None = automatic: weights go to `<file>.data` beyond 2 GiB.
    `optimize`, `fold_batch_norm`, `allow_custom_ops` and `target` as in `to_onnx`."""
    file = Path(path)
    check_output(file)  # irbridge.atomic: no folder, device, FIFO or socket is replaced
    if file.is_dir():
        raise ExportError(f"{file}: is a folder, not a file name")
    if not file.parent.is_dir():
        raise ExportError(f"{file}: folder {file.parent} does not exist")
    weights = _weight_bytes(model)
    big = weights >= EXTERNAL_DATA_THRESHOLD
    external = big if external_data is None else external_data
    if external:
        check_companion_name(file, file.name + ".data", "external data file")
    # the check leaves pending weights out, as it always leaves out large ones
    proto, payloads = _build_checked(model, opset, optimize, fold_batch_norm, stream=True,
                                     check=check and not big,
                                     allow_custom_ops=allow_custom_ops, target=target)
    data_name = file.name + ".data"
    if external and (file.parent / data_name).exists():
        # the file being replaced may read that one: until the new model is in place (the
        # commit point) its data must stay, so the new data goes under a fresh name
        data_name = generation_name(file)
        check_companion_name(file, data_name, "external data file")
    if big and external_data is None:
        warnings.warn(f"{file}: weights take {weights / 1024**3:.2f} GiB, past the 2 GiB an "
                      f"ONNX file can hold: writing them to {data_name} next to it",
                      ExternalDataNote, stacklevel=2)
    with _staging(file.parent) as stage:
        staged = stage / file.name
        try:  # weights streamed in one tensor at a time (see _stream)
            _stream.write_model(proto, payloads, staged,
                                stage / data_name if external else None)
        except (OSError, ValueError, EncodeError) as exc:
            raise ExportError(f"{file}: cannot write ONNX file: {_first_line(exc)}") from exc
        if check and big:
            try:
                onnx.checker.check_model(str(staged), full_check=True)
            except Exception as exc:
                raise ExportError(f"{file}: exported model fails the ONNX checker: "
                                  f"{_first_line(exc)}") from exc
        with folder_lock(file.parent):   # one irbridge writer commits at a time
            check_output(file)
            if (stage / data_name).exists():
                final = file.parent / data_name
                if final.exists():   # another writer took the name meanwhile
                    raise ExportError(f"{file}: {final.name} appeared while this export was "
                                      "written (another writer?); not replacing it",
                                      hint="export again")
                os.replace(stage / data_name, final)
                kill_point("onnx-data-renamed")
                fsync_dir(file.parent)
            os.replace(staged, file)   # the commit point
            kill_point("onnx-model-renamed")
            fsync_dir(file.parent)
            remove_old_data_files(file, keep=data_name if external else None)
    return file


def check_proto(proto: ModelProto) -> None:
    """onnx.checker (full check, shape inference in strict mode) as an ExportError. Large
    weights are left out of the check (only their types and shapes matter to it)."""
    light, _, _ = without_large_initializers(proto)
    try:
        onnx.checker.check_model(light, full_check=True)
    except Exception as exc:
        raise ExportError(f"exported model fails the ONNX checker: {_first_line(exc)}") from exc


@contextlib.contextmanager
def _staging(folder: Path) -> Iterator[Path]:
    stage = Path(tempfile.mkdtemp(prefix=".irbridge-onnx-", dir=folder))
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__


class ExternalDataNote(UserWarning):
    """`export_onnx` wrote the weights to an external data file on its own (past 2 GiB)."""


def _weight_bytes(model: Model) -> int:
    """Bytes of tensor data the ONNX file will hold: weights and constant values (constant
    nodes' tensors included, which become initializers or attributes), by declared size."""
    total = sum(t.nbytes for t in model.tensors.values())
    for _, node in model.all_nodes():
        total += sum(v.nbytes for v in node.attrs.values() if isinstance(v, Tensor))
    return total


# -- the exporter --------------------------------------------------------------------------

class OpsetTooOld(ExportError):
    """The node being exported needs opset `needed` or newer."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


class NeedDecompose(Exception):
    """An emitter cannot write this node directly; use the registry's decomposition."""


class _ModelExporter:
    def __init__(self, model: Model, opset: int, *, stream: bool = False,
                 allow_custom_ops: bool = False) -> None:
        self.model = model
        self.opset = opset
        self.stream = stream
        self.allow_custom_ops = allow_custom_ops
        self.payloads: dict[str, Callable[[], np.ndarray]] = {}
        self.used: set[str] = set()
        self.names: dict[int, str] = {}
        self.initializers: list[onnx.TensorProto] = []
        self.domains: dict[str, int] = {}
        self.source_opsets = _parse_opsets(model.metadata.get(MODEL_META_OPSETS, ""))
        self.types: dict[str, DType] = {}  # element type of each ONNX value named (_legal)
        self._node_names: set[str] = set()
        self._counter = 0

    # -- names ----------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = base or "v"
        name = base
        while name in self.used:
            self._counter += 1
            name = f"{base}_{self._counter}"
        self.used.add(name)
        return name

    def name_of(self, value: Value) -> str:
        name = self.names.get(id(value))
        if name is None:
            raise ExportError(f"value {value.name!r} is read before it is defined")
        return name

    def _assign(self, graph: Graph) -> None:
        for value in [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]:
            if id(value) not in self.names:
                self.names[id(value)] = self.fresh(value.name)
            if value.type is not None:  # complex values are (real, imag) pairs
                self.types.setdefault(self.names[id(value)],
                                      _complex.file_dtype(value.type.dtype))
        for value in graph.parameters:
            self.names[id(value)] = value.name
            if value.type is not None:
                self.types.setdefault(value.name, _complex.file_dtype(value.type.dtype))
        for node in graph.nodes:
            for sub in node.subgraphs():
                self._assign(sub)

    def node_name(self, base: str) -> str:
        name = base
        counter = 0
        while name in self._node_names:
            counter += 1
            name = f"{base}_{counter}"
        self._node_names.add(name)
        return name

    # -- model ----------------------------------------------------------------------------
    def run(self) -> ModelProto:
        model = self.model
        for tensor in model.tensors.values():
            self.used.add(tensor.name)
            self.types[tensor.name] = _complex.file_dtype(tensor.dtype)
            if tensor.dtype in _complex.REAL_OF:  # complex weights as (real, imag) pairs
                self.initializers.append(array_to_proto(_complex.pair_array(
                    tensor_data(_initialized(tensor))), tensor.name))
            elif self.stream and tensor.data is not None and _stream.streamable(tensor.data):
                self.initializers.append(_stream.pending(tensor.name, tensor.shape,
                                                         tensor.data.dtype))
                self.payloads[tensor.name] = functools.partial(tensor_data, tensor)
            else:
                self.initializers.append(_initializer(tensor))
        for graph in model.graphs:
            self._assign(graph)
        self._link_graphs()
        main = _GraphEmitter(self, model.graphs[0].name or "main")
        inputs: list[onnx.ValueInfoProto] = []
        paired: dict[str, str] = {}  # complex graph inputs and outputs: their complex type
        for index, graph in enumerate(model.graphs):
            for value in graph.inputs:
                if id(value) in self._linked:
                    continue
                inputs.append(_value_info(self.name_of(value), value.type, value.name))
                if _complex.is_complex(value.type):
                    paired[inputs[-1].name] = cast(TensorType, value.type).dtype.name.lower()
            main.emit_nodes(graph.nodes)
            del index
        last = model.graphs[-1]
        outputs = [_value_info(self.name_of(v), v.type, v.name) for v in last.outputs]
        paired.update({info.name: cast(TensorType, v.type).dtype.name.lower()
                       for info, v in zip(outputs, last.outputs, strict=True)
                       if _complex.is_complex(v.type)})
        # assembled in place: helper.make_graph / make_model would copy every weight twice
        proto = ModelProto()
        proto.producer_name = "irbridge"
        proto.producer_version = model.producer_version
        graph_proto = proto.graph
        graph_proto.name = model.name or last.name or "irbridge"
        graph_proto.node.extend(main.nodes)
        graph_proto.input.extend(inputs)
        graph_proto.output.extend(outputs)
        graph_proto.value_info.extend(main.value_info)
        items, self.initializers = self.initializers, []
        for index, item in enumerate(items):  # extend() serialises: fails past 2 GiB
            graph_proto.initializer.add().CopyFrom(item)
            items[index] = onnx.TensorProto()  # free each copy's source as we go
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in sorted(self.domains.items())]
        proto.opset_import.extend(opsets)
        proto.ir_version = helper.find_min_ir_version_for(list(opsets), ignore_unknown=True)
        proto.ir_version = max(proto.ir_version, 8)
        props = _metadata_props(model.metadata, proto)
        if model.source_format:
            props["irbridge.source_format"] = model.source_format
        if paired:  # complex graph inputs and outputs, written as (real, imag) pairs
            props[_complex.MODEL_META_COMPLEX] = json.dumps(paired)
        for key, text in sorted(props.items()):  # one entry per key (the checker's rule)
            entry = proto.metadata_props.add()
            entry.key, entry.value = key, text
        return proto

    def _link_graphs(self) -> None:
        """Later graphs read earlier graphs' outputs through the model's links."""
        self._linked: set[int] = set()
        graphs = self.model.graphs
        for link in self.model.links:
            try:
                source = next(v for v in graphs[link.from_graph].outputs
                              if v.name == link.from_output)
                target = next(v for v in graphs[link.to_graph].inputs
                              if v.name == link.to_input)
            except (StopIteration, IndexError) as exc:
                raise ExportError(f"link {link.from_graph}.{link.from_output} -> "
                                  f"{link.to_graph}.{link.to_input} names no value") from exc
            self.names[id(target)] = self.name_of(source)
            self._linked.add(id(target))

    def domain_version(self, domain: str) -> int:
        version = self.source_opsets.get(domain, 1)
        self.domains[domain] = version
        return version


def _parse_opsets(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in text.split(","):
        domain, _, version = item.partition("=")
        if version.isdigit():
            out["" if domain in ("", "ai.onnx") else domain] = int(version)
    return out


class _GraphEmitter:
    """Collects the ONNX nodes of one graph (the main graph or a subgraph)."""

    def __init__(self, ex: _ModelExporter, name: str) -> None:
        self.ex = ex
        self.name = name
        self.nodes: list[NodeProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        """Types of custom-domain nodes' outputs: ONNX's shape inference knows no schema
        for them, so without these a reader (irbridge's importer included) loses every
        type downstream of such a node."""
        self.meta: dict[str, str] = {}
        self.label = ""
        self.where = ""  # the IR node being written, for errors

    # -- emitting ONNX nodes --------------------------------------------------------------------
    def emit(self, op_type: str, inputs: Sequence[str | None], outputs: int | Sequence[str] = 1,
             domain: str = "", **attrs: Any) -> list[str]:
        names = [self.ex.fresh(f"{self.label or op_type}/{op_type}")
                 for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        clean = {k: v for k, v in attrs.items() if v is not None}
        opset = self.ex.opset
        in_types = [self.ex.types.get(n) if n else None for n in inputs]
        fix = None
        if not domain:
            try:
                fix = _legal.plan(op_type, opset, in_types, clean)
            except _legal.IllegalType as exc:
                message = (f"{self.where or self.label}: cannot export to ONNX opset "
                           f"{opset}: {exc}")
                newer = _legal.first_legal_opset(op_type, opset + 1, max_opset(), in_types,
                                                 clean)
                if newer is not None:  # a later version of the op takes the type
                    raise OpsetTooOld(f"{message}; opset {newer} does", newer) from exc
                raise ExportError(message) from exc
        finals = list(names)
        inputs, in_types, names = self._cast_inputs(fix, inputs, in_types, names)
        node = helper.make_node(op_type, [n or "" for n in inputs], names,
                                name=self.ex.node_name(f"{self.label or 'node'}/{op_type}"
                                                       if self.label else op_type),
                                domain=domain or None, **clean)
        self.append(node)
        if not domain:
            for name, dtype in zip(names, _legal.output_types(op_type, opset, in_types,
                                                              len(names), clean), strict=True):
                if name and dtype is not None:
                    self.ex.types.setdefault(name, dtype)
        self._cast_back(fix, names, finals)
        return finals

    def _cast_inputs(self, fix: _legal.Plan | None, inputs: Sequence[str | None],
                     in_types: list[DType | None], names: list[str]
                     ) -> tuple[list[str | None], list[DType | None], list[str]]:
        """Inputs cast to the types `fix` (from `_legal.plan`) chose, and fresh names for
        the outputs the op computes in a wider type (cast back by `_cast_back`)."""
        if fix is None:
            return list(inputs), in_types, names
        inputs = [self.cast(n, in_types[i], fix.cast_inputs[i])
                  if n and i in fix.cast_inputs else n for i, n in enumerate(inputs)]
        in_types = [fix.cast_inputs.get(i, t) for i, t in enumerate(in_types)]
        names = [self.ex.fresh(f"{n}_{fix.computed[i].short}") if i in fix.computed and n
                 else n for i, n in enumerate(names)]
        return inputs, in_types, names

    def _cast_back(self, fix: _legal.Plan | None, names: list[str], finals: list[str]) -> None:
        if fix is None:
            return
        for index, (name, final) in enumerate(zip(names, finals, strict=True)):
            if index in fix.back and name:
                if index in fix.computed:
                    self.ex.types[name] = fix.computed[index]
                self.one("Cast", [name], final, to=dtype_to_onnx(fix.back[index]))

    def append(self, node: NodeProto) -> None:
        for key, value in self.meta.items():
            prop = node.metadata_props.add()
            prop.key, prop.value = key, value
        self.nodes.append(node)

    def one(self, op_type: str, inputs: Sequence[str | None], output: str | None = None,
            **attrs: Any) -> str:
        return self.emit(op_type, inputs, [output] if output else 1, **attrs)[0]

    def const(self, array: np.ndarray, base: str = "const") -> str:
        array = np.asarray(array)
        name = self.ex.fresh(f"{self.label}/{base}" if self.label else base)
        self.ex.types[name] = DType.from_numpy(array.dtype)
        if array.nbytes > INLINE_CONSTANT_BYTES:
            self.ex.initializers.append(array_to_proto(array, name))
            return name
        return self.emit("Constant", [], [name], value=array_to_proto(array, name))[0]

    def i64(self, values: Sequence[int] | int, base: str = "const") -> str:
        return self.const(np.asarray(values, dtype=np.int64), base)

    def scalar(self, value: float | int | bool, dtype: DType, base: str = "const") -> str:
        return self.const(np.asarray(value).astype(dtype.numpy), base)

    def cast(self, name: str, source: DType | None, target: DType) -> str:
        if source == target:
            return name
        return self.one("Cast", [name], to=dtype_to_onnx(target))

    # -- IR nodes -----------------------------------------------------------------------------
    def emit_nodes(self, nodes: Sequence[Node]) -> None:
        for node in nodes:
            ins = [None if v is None else self.ex.name_of(v) for v in node.inputs]
            outs = [self.ex.name_of(v) for v in node.outputs]
            self.emit_node(node, ins, outs)

    def emit_node(self, node: Node, ins: list[str | None], outs: list[str],
                  nested: bool = False) -> None:
        saved = (self.meta, self.label, self.where)
        start = len(self.nodes)
        if not nested:
            self.meta = _node_meta(node)
            self.label = _node_label(node)
            self.where = registry.node_where(node)
        try:
            if node.is_opaque:
                self._emit_opaque(node, ins, outs)
            else:
                self._emit_neutral(node, ins, outs)
        except IrbridgeError:
            raise
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise ExportError(f"{registry.node_where(node)}: cannot export to ONNX opset "
                              f"{self.ex.opset}: {_first_line(exc)}") from exc
        if not nested:
            self._mark_group(node, start, ins, outs)
            self.meta, self.label, self.where = saved

    def _mark_group(self, node: Node, start: int, ins: list[str | None],
                    outs: list[str]) -> None:
        emitted = [n for n in self.nodes[start:] if n.op_type != "Constant"]
        if node.is_opaque or not self.nodes[start:] or _complex.involves(node):
            return  # a complex node's ONNX nodes compute on (real, imag) pairs
        if len(emitted) == 1 and (node.op, emitted[0].op_type) in CANONICAL:
            return
        if node.op == "constant" or any(isinstance(v, Graph) for v in node.attrs.values()):
            return
        text = attrs_to_json(node.attrs)
        if text is None:
            return
        first = self.nodes[start]
        for key, value in ((META_ATTRS, text), (META_INPUTS, json.dumps([i or "" for i in ins])),
                           (META_OUTPUTS, json.dumps(outs))):
            prop = first.metadata_props.add()
            prop.key, prop.value = key, value

    def _emit_neutral(self, node: Node, ins: list[str | None], outs: list[str]) -> None:
        schema = registry.get(node.op)
        where = registry.node_where(node)
        attrs = schema.resolve_attrs(node.attrs, where)
        if _complex.involves(node):  # written on (real, imag) pairs, or refused
            _complex.emit(self, node, attrs, ins, outs)
            return
        if node.op != "constant" and _all_empty(node):
            # Nothing to compute: every output has a static shape with a zero-size dim.
            # An empty Constant of that shape is exact and keeps onnxruntime away from
            # kernels that fail on empty operands (FusedMatMul broadcasting a zero batch,
            # Pad in wrap mode; measured with the OpInfo sweep's zero-batch samples).
            for value, name in zip(node.outputs, outs, strict=True):
                if name and value.type is not None:
                    self.ex.types[name] = value.type.dtype
                    empty = np.zeros(value.type.static_shape(), value.type.dtype.numpy)
                    self.emit("Constant", [], [name], value=array_to_proto(empty, name))
            return
        if node.op in FLOAT_MATH and _data_dtype(node) not in (None, *_FLOATS):
            self._emit_in_float(node, ins, outs, where)
            return
        emitter = EMITTERS.get(node.op)
        if emitter is not None:
            try:
                emitter(NodeEmit(self, node, attrs, ins, outs))
                return
            except NeedDecompose:
                pass
        self._decompose(node, attrs, ins, outs, where)

    def _decompose(self, node: Node, attrs: dict[str, Any], ins: list[str | None],
                   outs: list[str], where: str) -> None:
        schema = registry.get(node.op)
        if schema.decompose is None:
            raise ExportError(f"{where}: neutral op {node.op!r} has no ONNX mapping at opset "
                              f"{self.ex.opset} and no decomposition")
        scratch = Graph(f"decompose_{node.op}")
        stand_ins: list[Value | None] = []
        for index, value in enumerate(node.inputs):
            stand_ins.append(None if value is None
                             else scratch.add_input(f"in{index}", value.type))
        try:
            results = schema.decompose(GraphBuilder(scratch), stand_ins, attrs)
        except IrbridgeError as exc:
            raise ExportError(f"{where}: cannot lower {node.op} to ONNX: {exc.message}") from exc
        names: dict[int, str] = {}
        for value, name in zip(stand_ins, ins, strict=True):
            if value is not None and name is not None:
                names[id(value)] = name
        pending_identity: list[tuple[str, str]] = []
        for result, out in zip(results, outs, strict=True):
            if id(result) in names or result.producer is None:
                source = names.get(id(result))
                if source is None:
                    raise ExportError(f"{where}: decomposition returned an unknown value")
                pending_identity.append((source, out))
            else:
                names[id(result)] = out
        for sub in scratch.nodes:
            for value in sub.outputs:
                if id(value) not in names:
                    names[id(value)] = self.ex.fresh(f"{self.label}/{value.name}")
                if value.type is not None:  # the IR's type (a Loop's outputs differ)
                    self.ex.types.setdefault(names[id(value)], value.type.dtype)
            for body in sub.subgraphs():  # a decomposition's loop body: fresh names too
                self.ex._assign(body)
        for sub in scratch.nodes:
            self.emit_node(sub, [None if v is None else names[id(v)] for v in sub.inputs],
                           [names[id(v)] for v in sub.outputs], nested=True)
        for source, out in pending_identity:
            self.one("Identity", [source], out)

    def _emit_in_float(self, node: Node, ins: list[str | None], outs: list[str],
                       where: str) -> None:
        """A float-math op (FLOAT_MATH) on integer or bool data: its data inputs cast to a
        float that holds them exactly, the op written on those, each output cast back to
        the node's type once at the end, as the reference computes it (an ONNX lowering of
        several nodes would otherwise round every intermediate to the integer type)."""
        data = _data_dtype(node)
        start, weights = len(self.nodes), len(self.ex.initializers)
        for wide in (DType.FLOAT64, DType.FLOAT32):  # float32 where a kernel lacks float64
            try:
                self._float_node(node, ins, outs, where, data, wide)
                return
            except ExportError:
                if wide is DType.FLOAT32:
                    raise
                del self.nodes[start:], self.ex.initializers[weights:]

    def _float_node(self, node: Node, ins: list[str | None], outs: list[str], where: str,
                    data: DType | None, wide: DType) -> None:
        scratch = Graph(f"float_{node.op}")
        stand_ins: list[Value | None] = []
        names: list[str | None] = []
        for index, (value, name) in enumerate(zip(node.inputs, ins, strict=True)):
            if value is None or value.type is None or name is None:
                stand_ins.append(None if value is None else
                                 scratch.add_input(f"in{index}", value.type))
                names.append(name)
                continue
            cast = value.type.dtype == data
            stand_ins.append(scratch.add_input(f"in{index}", TensorType(
                wide if cast else value.type.dtype, value.type.shape)))
            names.append(self.cast(name, value.type.dtype, wide) if cast else name)
        try:
            results = GraphBuilder(scratch).op_multi(node.op, stand_ins, node.attrs,
                                                     num_outputs=len(node.outputs))
        except IrbridgeError as exc:
            raise ExportError(f"{where}: cannot export to ONNX: {exc.message}") from exc
        temps = [self.ex.fresh(f"{self.label}/{node.op}_{wide.short}") for _ in results]
        for temp, value in zip(temps, results, strict=True):
            if value.type is not None:
                self.ex.types[temp] = value.type.dtype
        self.emit_node(scratch.nodes[-1], names, temps, nested=True)
        for temp, out, value in zip(temps, outs, node.outputs, strict=True):
            target = value.type.dtype if value.type is not None else data
            if target is None:
                raise ExportError(f"{where}: output {value.name!r} has no type")
            self.one("Cast", [temp], out, to=dtype_to_onnx(target))

    def _emit_opaque(self, node: Node, ins: list[str | None], outs: list[str]) -> None:
        domain = "" if node.domain == OPAQUE_ONNX_DOMAIN else node.domain
        where = registry.node_where(node)
        if _complex.involves(node):
            _complex.emit(self, node, {}, ins, outs)  # refuses it, naming the node
        schema = None
        omitted = node.annotations.values.get("onnx.omitted_outputs", ())
        names = ["" if isinstance(omitted, tuple) and i in omitted else n
                 for i, n in enumerate(outs)]
        if not domain:
            rewrite = _export_opaque.REWRITES.get(node.op)
            if rewrite is not None and rewrite(self, node, ins, names):
                return
            schema = self.schema_of(node, where)
        else:
            from_onnx = "onnx" in (node.provenance.source_format, self.ex.model.source_format)
            if not (from_onnx or self.ex.allow_custom_ops):
                raise ExportError(f"{where}: opaque op {node.qualified_op} has no ONNX "
                                  "lowering (onnxruntime cannot run a node of domain "
                                  f"{node.domain!r}); pass --allow-custom-ops "
                                  "(allow_custom_ops=True) to write it as a custom-domain "
                                  "node anyway")
            self.ex.domain_version(domain)
            self.value_info.extend(_value_info(name, value.type, value.name)
                                   for name, value in zip(names, node.outputs, strict=True)
                                   if name and value.type is not None)
        self.write_opaque(node.op, ins, names, dict(node.attrs), schema, where, domain)

    def write_opaque(self, op: str, ins: Sequence[str | None], outs: Sequence[str],
                     attrs: dict[str, AttrValue], schema: onnx.defs.OpSchema | None,
                     where: str, domain: str = "") -> None:
        """One opaque node as it was imported (attributes from the IR's). A default-domain
        op without subgraphs takes its inputs in types its schema and onnxruntime's
        kernels accept (`_legal.plan`: a bfloat16 Compress computed in float32 and cast
        back); where no accepted type holds them it is written as it is."""
        attributes = [self._attribute(name, value, schema, where)
                      for name, value in attrs.items()]
        fix = None
        in_types = [self.ex.types.get(n) if n else None for n in ins]
        if schema is not None and not domain and _uniform_types(schema) \
                and not any(isinstance(v, Graph) or (isinstance(v, tuple) and v
                                                     and isinstance(v[0], Graph))
                            for v in attrs.values()):
            with contextlib.suppress(_legal.IllegalType):
                fix = _legal.plan(op, self.ex.opset, in_types)
        finals = list(outs)
        inputs, _, names = self._cast_inputs(fix, ins, in_types, list(outs))
        proto = helper.make_node(op, [n or "" for n in inputs], names,
                                 name=self.ex.node_name(self.label), domain=domain or None)
        proto.attribute.extend(attributes)
        self.append(proto)
        self._cast_back(fix, names, finals)

    def schema_of(self, node: Node, where: str) -> onnx.defs.OpSchema:
        opset = self.ex.opset
        try:
            schema = onnx.defs.get_schema(node.op, opset, "")
        except onnx.defs.SchemaError as exc:
            message = f"{where}: opaque ONNX op {node.op} does not exist at opset {opset}"
            try:
                since = onnx.defs.get_schema(node.op, max_opset(), "").since_version
            except onnx.defs.SchemaError:
                raise ExportError(message) from exc
            raise OpsetTooOld(message, int(since)) from exc
        source = self.ex.source_opsets.get("")
        if source is not None and source != opset:
            try:
                original = onnx.defs.get_schema(node.op, source, "")
            except onnx.defs.SchemaError:
                original = None
            if original is None or not _same_interface(original, schema):
                message = (f"{where}: opaque ONNX op {node.op} was imported at opset "
                           f"{source} and changed by opset {opset}; export at opset "
                           f"{source} instead")
                if source > opset:
                    raise OpsetTooOld(message, source)
                raise ExportError(message)
        return schema

    def _attribute(self, name: str, value: AttrValue, schema: onnx.defs.OpSchema | None,
                   where: str) -> AttributeProto:
        kind: int | None = None
        if schema is not None and name in schema.attributes:
            kind = int(cast(Any, schema.attributes[name].type).value)
        if isinstance(value, Graph):
            return helper.make_attribute(name, self.subgraph(value))
        if isinstance(value, tuple) and value and isinstance(value[0], Graph):
            return helper.make_attribute(name, [self.subgraph(g) for g in value
                                                if isinstance(g, Graph)])
        if isinstance(value, Tensor):
            return helper.make_attribute(name, _initializer(value))
        if isinstance(value, DType):
            return helper.make_attribute(name, dtype_to_onnx(value))
        if value == () and kind is not None:
            attribute = AttributeProto()
            attribute.name = name
            attribute.type = kind  # type: ignore[assignment]
            return attribute
        if kind == AttributeProto.FLOATS and isinstance(value, tuple):
            return helper.make_attribute(name, [float(cast(float, v)) for v in value])
        if kind == AttributeProto.FLOAT and isinstance(value, int | float):
            return helper.make_attribute(name, float(cast(float, value)))
        if kind == AttributeProto.INT and isinstance(value, bool | int):
            return helper.make_attribute(name, int(value))
        if isinstance(value, bool):
            return helper.make_attribute(name, int(value))
        return helper.make_attribute(name, value)

    def subgraph(self, graph: Graph) -> GraphProto:
        emitter = _GraphEmitter(self.ex, graph.name)
        emitter.emit_nodes(graph.nodes)
        inputs = [_value_info(self.ex.name_of(v), v.type, v.name) for v in graph.inputs]
        # body outputs carry their element type only: runtimes check declared shapes
        # strictly, while ONNX itself lets a body's output shapes vary between runs
        outputs = [_value_info(self.ex.name_of(v), _rank_free(v.type), v.name)
                   for v in graph.outputs]
        return helper.make_graph(emitter.nodes, graph.name or "body", inputs, outputs,
                                 value_info=emitter.value_info)


_FLOATS = (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64)


def _data_dtype(node: Node) -> DType | None:
    """The element type of a node's first input (its data)."""
    value = node.inputs[0] if node.inputs else None
    return None if value is None or value.type is None else value.type.dtype


def _same_interface(a: onnx.defs.OpSchema, b: onnx.defs.OpSchema) -> bool:
    """Two versions of an op with the same inputs, outputs and attributes (defaults
    included): later versions that only widen the element types mean the same."""
    if a.since_version == b.since_version:
        return True

    def io(schema: onnx.defs.OpSchema) -> list[tuple[str, int, int]]:
        return [(p.name, int(cast(Any, p.option).value), p.min_arity) for p in
                [*schema.inputs, *schema.outputs]]

    def attributes(schema: onnx.defs.OpSchema) -> dict[str, bytes]:
        return {name: a.default_value.SerializeToString() for name, a in
                schema.attributes.items()}

    return io(a) == io(b) and attributes(a) == attributes(b) \
        and a.min_input == b.min_input and a.max_input == b.max_input \
        and a.min_output == b.min_output and a.max_output == b.max_output


def _uniform_types(schema: onnx.defs.OpSchema) -> bool:
    """No variadic input or output of the op mixes element types (Loop's, Scan's), so
    that `_legal.plan` binds each type parameter to one type."""
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    return all(p.option != variadic or p.is_homogeneous
               for p in [*schema.inputs, *schema.outputs])


def _rank_free(t: TensorType | None) -> TensorType | None:
    return None if t is None else TensorType(t.dtype, None)


def _all_empty(node: Node) -> bool:
    """Every output of `node` has a known element type and a static shape of 0 elements."""
    return bool(node.outputs) and all(
        v.type is not None and v.type.is_static and v.type.numel() == 0 for v in node.outputs)


def _node_meta(node: Node) -> dict[str, str]:
    p = node.provenance
    meta = {META_OP: node.qualified_op, META_NODE: str(node.id)}
    for key, value in ((META_MODULE_PATH, p.module_path), (META_MODULE_CLASS, p.module_class),
                       (META_SOURCE_FORMAT, p.source_format), (META_SOURCE_OP, p.source_op),
                       (META_SOURCE_NODE, p.source_node)):
        if value:
            meta[key] = value
    if p.location is not None and p.location.file:
        meta[META_LOCATION] = f"{p.location.file}:{p.location.line}"
    return meta


def _node_label(node: Node) -> str:
    path = node.provenance.module_path
    base = node.name or node.provenance.source_node or f"{node.op}_{node.id}"
    return f"{path}/{base}" if path else base


def _initialized(tensor: Tensor) -> Tensor:
    if tensor.data is None:
        raise ExportError(f"tensor {tensor.name!r} has no data (shape-only IR); convert again "
                          "with weights to export ONNX")
    return tensor


def _initializer(tensor: Tensor) -> onnx.TensorProto:
    return tensor_to_proto(_initialized(tensor))


def _metadata_props(metadata: Mapping[str, str], proto: ModelProto) -> dict[str, str]:
    """The model's metadata as metadata_props: an imported file's own entries under their
    own keys again (imported as `onnx.metadata.KEY`), and its doc_string, domain and
    model_version set back on `proto` as the fields they came from. irbridge's own keys
    win over a file's entry of the same name."""
    out: dict[str, str] = {}
    for key, text in metadata.items():
        if key.startswith(META_PROPS):
            out.setdefault(key[len(META_PROPS):], text)
    fields = {key: field for field, key in MODEL_FIELDS.items()}
    for key, text in metadata.items():
        if key in fields:
            if fields[key] == "model_version":
                with contextlib.suppress(ValueError):
                    proto.model_version = int(text)
            else:
                setattr(proto, fields[key], text)
        elif not key.startswith(META_PROPS):
            out[key] = text
    return out


def _value_info(name: str, t: TensorType | None, what: str) -> onnx.ValueInfoProto:
    if t is None:
        raise ExportError(f"value {what!r} has no type; ONNX graph inputs and outputs need one")
    if _complex.is_complex(t):  # a float [..., 2] (real, imag) value in the file
        info = _value_info(name, _complex.pair_type(t), what)
        info.doc_string = _complex.io_doc(t)
        return info
    shape: list[int | str | None] | None = None
    if t.shape is not None:
        shape = [d if isinstance(d, int) else d.name if isinstance(d, SymDim) else None
                 for d in t.shape]
    return helper.make_tensor_value_info(name, dtype_to_onnx(t.dtype), shape)


# -- the view an emitter has of one IR node ---------------------------------------------------

class NodeEmit:
    def __init__(self, ge: _GraphEmitter, node: Node, attrs: dict[str, Any],
                 ins: list[str | None], outs: list[str]) -> None:
        self.ge = ge
        self.node = node
        self.attrs = attrs
        self.ins = ins
        self.outs = outs
        self.opset = ge.ex.opset
        self.where = registry.node_where(node)

    def input(self, index: int) -> str:
        name = self.ins[index] if index < len(self.ins) else None
        if name is None:
            raise ExportError(f"{self.where}: input {index} is missing")
        return name

    def has(self, index: int) -> bool:
        return index < len(self.ins) and self.ins[index] is not None

    def in_type(self, index: int) -> TensorType | None:
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        return None if value is None else value.type

    def in_dtype(self, index: int) -> DType | None:
        t = self.in_type(index)
        return None if t is None else t.dtype

    def out_type(self, index: int = 0) -> TensorType | None:
        return self.node.outputs[index].type

    def out_dtype(self, index: int = 0) -> DType | None:
        t = self.out_type(index)
        return None if t is None else t.dtype

    def rank(self, index: int) -> int:
        t = self.in_type(index)
        if t is None or t.shape is None:
            raise ExportError(f"{self.where}: input {index} needs a known rank to export")
        return len(t.shape)

    def static(self, index: int) -> tuple[int, ...]:
        t = self.in_type(index)
        if t is None or not t.is_static:
            raise NeedDecompose()
        return t.static_shape()

    def as_dtype(self, index: int, dtype: DType | None) -> str:
        name = self.input(index)
        if dtype is None:
            return name
        return self.ge.cast(name, self.in_dtype(index), dtype)

    def emit(self, op_type: str, inputs: Sequence[str | None], outputs: int | Sequence[str] = 1,
             **attrs: Any) -> list[str]:
        return self.ge.emit(op_type, inputs, outputs, **attrs)

    def one(self, op_type: str, inputs: Sequence[str | None], output: str | None = None,
            **attrs: Any) -> str:
        return self.ge.one(op_type, inputs, output, **attrs)

    def out(self, op_type: str, inputs: Sequence[str | None], **attrs: Any) -> None:
        """Emit the node's single final output."""
        self.ge.one(op_type, inputs, self.outs[0], **attrs)

    def const(self, array: np.ndarray, base: str = "const") -> str:
        return self.ge.const(array, base)

    def i64(self, values: Sequence[int] | int, base: str = "const") -> str:
        return self.ge.i64(values, base)

    def scalar(self, value: float | int | bool, dtype: DType | None, base: str = "const") -> str:
        return self.ge.scalar(value, dtype or DType.FLOAT32, base)

    def need_opset(self, opset: int, what: str) -> None:
        if self.opset < opset:
            raise OpsetTooOld(f"{self.where}: {what} needs opset {opset} or newer "
                              f"(exporting at {self.opset})", opset)


Emitter = Callable[[NodeEmit], None]
EMITTERS: dict[str, Emitter] = {}
FLOAT_MATH: set[str] = set()
"""Neutral ops whose math is float (normalisations, smooth activations, means): on
integer or bool data they are written in float and cast back once (`_emit_in_float`)."""
CANONICAL: set[tuple[str, str]] = set()
"""(neutral op, ONNX op) pairs that import gives back as the same neutral op."""

# _export_ops fills EMITTERS (_export_datadep overrides a few: data-dependent sizes);
# _complex writes complex values as (real, imag) pairs
from irbridge.converters.onnx import (  # noqa: E402,F401
    _complex,
    _export_datadep,
    _export_ops,
)
