"""Shapes and dtypes to analyse at: binding symbolic dims, rescaling the batch, storage dtype.

Costs come from the op registry, which reads the types of a node's values. To cost a model
at another batch size or dtype, `bound()` temporarily rewrites the types of the model's
values and restores them on exit, so the registry stays the only place that knows costs.

What `--batch N` does, honestly:

- A model captured with a symbolic leading dim on its inputs (e.g. `s0` from torch.export
  with a dynamic batch) gets that symbol bound to N everywhere; nodes whose shapes were
  derived from it (unknown dims) are re-inferred through the registry.
- A model captured with static shapes gets the leading dim of every first-graph input that
  has the captured batch size (the first input's leading dim) replaced by N, and every node
  re-inferred in order. A node with a batch size baked into an attribute (a reshape to
  `(1, 512)`) fails inference, and the error says so; a reshape to `(1, -1, ...)` re-infers
  to a wrong but same-sized shape, which keeps FLOPs and bytes right. Opaque nodes cannot be
  re-inferred, so a static model with opaque nodes cannot be rescaled (bind a symbolic dim).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.ir import Dim, Graph, Model, Node, SymDim, TensorType, Value, walk_nodes
from irbridge.ops import registry

COMPUTE_DTYPES: dict[str, DType] = {
    "fp64": DType.FLOAT64,
    "fp32": DType.FLOAT32,
    "tf32": DType.FLOAT32,
    "bf16": DType.BFLOAT16,
    "fp16": DType.FLOAT16,
    "fp8": DType.FLOAT8_E4M3FN,
    "int8": DType.FLOAT8_E4M3FN,
}
"""Compute dtype (a peak of the hardware catalog) -> the float dtype whose size its tensors
are stored at. int8 keeps the graph float-typed at one byte per element so that every op's
type rules still hold; only sizes matter for the bytes."""

_ALIASES = {"float32": "fp32", "f32": "fp32", "float": "fp32", "float64": "fp64", "f64": "fp64",
            "double": "fp64", "bfloat16": "bf16", "float16": "fp16", "f16": "fp16",
            "half": "fp16", "float8": "fp8", "f8e4m3": "fp8", "f8e5m2": "fp8",
            "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "i8": "int8", "u8": "int8",
            "uint8": "int8"}

_FROM_DTYPE = {DType.FLOAT64: "fp64", DType.FLOAT32: "fp32", DType.BFLOAT16: "bf16",
               DType.FLOAT16: "fp16", DType.FLOAT8_E4M3FN: "fp8", DType.FLOAT8_E5M2: "fp8",
               DType.INT8: "int8", DType.UINT8: "int8"}


def parse_compute_dtype(text: str) -> str:
    key = text.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in COMPUTE_DTYPES:
        raise IrbridgeError(f"unknown --dtype {text!r}; known: {', '.join(COMPUTE_DTYPES)}")
    return key


def model_compute_dtype(model: Model) -> str:
    """The dtype the model computes in: that of the first input of most matmul-like nodes,
    else the most common float dtype of its values; fp32 when there is none."""
    votes: Counter[str] = Counter()
    for _, node in model.all_nodes():
        schema = None if node.is_opaque else registry.lookup(node.op)
        if schema is not None and schema.category.matmul_like and node.inputs:
            first = node.inputs[0]
            if first is not None and first.type is not None and first.type.dtype in _FROM_DTYPE:
                votes[_FROM_DTYPE[first.type.dtype]] += 1
    if not votes:
        for value in _all_values(model):
            if value.type is not None and value.type.dtype.is_float:
                votes[_FROM_DTYPE.get(value.type.dtype, "fp32")] += 1
    return votes.most_common(1)[0][0] if votes else "fp32"


@dataclass
class Binding:
    """What `bound()` did: symbols bound, batch, storage dtype and notes for the report."""

    symbols: dict[str, int] = field(default_factory=dict)
    batch: int | None = None
    storage: DType | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.symbols.items()]
        if self.batch is not None and not parts:
            parts.append(f"batch={self.batch}")
        return ", ".join(parts)


def model_symbols(model: Model) -> dict[str, SymDim]:
    """Every symbolic dim used by the model's values, by name."""
    found: dict[str, SymDim] = {}
    for value in _all_values(model):
        if value.type is not None and value.type.shape is not None:
            for d in value.type.shape:
                if isinstance(d, SymDim):
                    found.setdefault(d.name, d)
    return found


@contextlib.contextmanager
def bound(model: Model, *, symbols: Mapping[str, int] | None = None, batch: int | None = None,
          storage: DType | None = None) -> Iterator[Binding]:
    """Rewrite the model's value types for the duration of the block (restored on exit):
    bind `symbols`, set the batch size, store every float tensor as `storage`."""
    values = _all_values(model)
    saved = [(v, v.type) for v in values]
    binding = Binding(storage=storage)
    try:
        if symbols or batch is not None:
            _bind_shapes(model, values, dict(symbols or {}), batch, binding)
        if storage is not None:
            for value in values:
                t = value.type
                if t is not None and t.dtype.is_float and t.dtype != storage:
                    value.type = TensorType(storage, t.shape)
        yield binding
    finally:
        for value, t in saved:
            value.type = t


def _all_values(model: Model) -> list[Value]:
    graphs: list[Graph] = []
    for graph in model.graphs:
        graphs.append(graph)
        for _, node in walk_nodes(graph):
            graphs.extend(node.subgraphs())
    seen: set[int] = set()
    values: list[Value] = []
    for graph in graphs:
        for value in graph.values.values():
            if id(value) not in seen:
                seen.add(id(value))
                values.append(value)
    return values


def _bind_shapes(model: Model, values: list[Value], symbols: dict[str, int], batch: int | None,
                 binding: Binding) -> None:
    known = model_symbols(model)
    for name in symbols:
        if name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise IrbridgeError(f"no symbolic dim {name!r} in the model; its symbols: {listed}")
    if batch is not None:
        if batch < 1:
            raise IrbridgeError(f"--batch must be at least 1, got {batch}")
        leading = _batch_symbols(model)
        if leading:
            for name in leading:
                symbols.setdefault(name, batch)
        else:
            _rescale_static_batch(model, batch, binding)
    for name, size in symbols.items():
        dim = known[name]
        if (dim.min is not None and size < dim.min) or (dim.max is not None and size > dim.max):
            raise IrbridgeError(f"{name}={size} is outside the range the model was captured "
                                f"for: [{dim.min if dim.min is not None else '-inf'}, "
                                f"{dim.max if dim.max is not None else 'inf'}]")
    binding.symbols = dict(symbols)
    binding.batch = batch
    if not symbols:
        return
    for value in values:
        t = value.type
        if t is not None and t.shape is not None and any(
                isinstance(d, SymDim) and d.name in symbols for d in t.shape):
            value.type = TensorType(t.dtype, tuple(_bind_dim(d, symbols) for d in t.shape))
    # Dims derived from a symbol (s0 * 128) are unknown in the IR; infer them again.
    for graph in model.graphs:
        for node in graph.nodes:
            if node.is_opaque or all(_static(v.type) for v in node.outputs):
                continue
            if not all(_static(v.type) for v in node.inputs if v is not None):
                continue
            try:
                types = registry.infer_types(node)
            except IrbridgeError:
                continue  # stays symbolic: reported as uncosted
            for value, t in zip(node.outputs, types, strict=False):
                value.type = t


def _batch_symbols(model: Model) -> list[str]:
    if not model.graphs:
        return []
    names = []
    for value in model.graphs[0].inputs:
        shape = value.type.shape if value.type is not None else None
        if shape and isinstance(shape[0], SymDim) and shape[0].name not in names:
            names.append(shape[0].name)
    return names


def _rescale_static_batch(model: Model, batch: int, binding: Binding) -> None:
    first = model.graphs[0]
    shaped = [v for v in first.inputs
              if v.type is not None and v.type.shape and isinstance(v.type.shape[0], int)]
    if not shaped:
        raise IrbridgeError("--batch: the model's inputs have no leading dim to rescale")
    assert shaped[0].type is not None and shaped[0].type.shape
    captured = shaped[0].type.shape[0]
    assert isinstance(captured, int)
    if captured == batch:
        return
    scaled = []
    for graph_index, graph in enumerate(model.graphs):
        linked = {link.to_input for link in model.links if link.to_graph == graph_index}
        for value in graph.inputs:
            t = value.type
            if value.name in linked or t is None or not t.shape or t.shape[0] != captured:
                continue
            value.type = TensorType(t.dtype, (batch, *t.shape[1:]))
            scaled.append(value.name)
    binding.notes.append(f"batch {batch}: static leading dim {captured} of "
                         f"{', '.join(scaled)} rescaled, shapes re-inferred")
    outputs: dict[tuple[int, str], Value] = {}
    for graph_index, graph in enumerate(model.graphs):
        for link in model.links:
            if link.to_graph == graph_index and (link.from_graph, link.from_output) in outputs:
                source = outputs[(link.from_graph, link.from_output)]
                target = graph.values.get(link.to_input)
                if target is not None:
                    target.type = source.type
        _reinfer(graph, batch, captured)
        for value in graph.outputs:
            outputs[(graph_index, value.name)] = value


def _reinfer(graph: Graph, batch: int, captured: int) -> None:
    for node in graph.nodes:
        if node.is_opaque:
            raise IrbridgeError(
                f"--batch {batch}: cannot rescale the static batch {captured} through opaque "
                f"node #{node.id} {node.qualified_op}",
                hint="capture the model with a dynamic (symbolic) batch dim")
        if any(True for _ in node.subgraphs()):
            raise IrbridgeError(
                f"--batch {batch}: cannot rescale the static batch {captured} through "
                f"control-flow node #{node.id} {node.op}",
                hint="capture the model with a dynamic (symbolic) batch dim")
        try:
            types = registry.infer_types(node)
        except IrbridgeError as exc:
            raise IrbridgeError(
                f"--batch {batch}: the model was captured at batch {captured} and a shape is "
                f"baked into it: {exc.message}",
                hint="capture the model with a dynamic (symbolic) batch dim") from None
        for value, t in zip(node.outputs, types, strict=False):
            value.type = t


def _bind_dim(d: Dim, symbols: Mapping[str, int]) -> Dim:
    if isinstance(d, SymDim) and d.name in symbols:
        return symbols[d.name]
    return d


def _static(t: TensorType | None) -> bool:
    return t is not None and t.is_static


def node_symbols(node: Node) -> list[str]:
    """Names of the symbolic dims a node's values use ('?' for unknown dims or ranks)."""
    names: list[str] = []
    for value in [*node.inputs, *node.outputs]:
        if value is None:
            continue
        t = value.type
        if t is None or t.shape is None:
            names.append("?")
            continue
        for d in t.shape:
            label = d.name if isinstance(d, SymDim) else "?" if d is None else None
            if label is not None:
                names.append(label)
    return list(dict.fromkeys(names))
