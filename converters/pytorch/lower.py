"""Lowering: captured torch.fx graphs -> irbridge IR.

One engine serves every capture method. Each fx node is looked up in explicit tables keyed
by the exact target (an ATen `OpOverload`, a Python callable, a `Tensor` method name, or an
`nn.Module` class; see `handlers/`). A node without a table entry is re-traced on its
own to ATen with `make_fx` and the resulting ATen subgraph is lowered through the same
tables; what still has no lowering becomes an opaque node (domain "aten" or "torch") with
its output types taken from the example values, so nothing is dropped.
"""

from __future__ import annotations

import collections
import contextlib
import math
import operator
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from irbridge._gc import gc_paused
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.errors import CaptureError
from irbridge.ir import (
    Dim,
    Graph,
    GraphLink,
    Model,
    Node,
    Provenance,
    SymDim,
    Tensor,
    TensorType,
    Value,
)

from ._util import (
    ModulePaths,
    class_name,
    deepest_module,
    has_data,
    location_from_stack,
    make_tensor,
    python_scalar_dtype,
    source_op,
    to_dtype,
)
from .capture import Capture, CapturedGraph, Slot


class Unsupported(Exception):
    """Raised by a handler for a case it does not lower; the engine then re-traces the node
    or, failing that, emits an opaque node."""


class Refused(CaptureError):
    """Raised by a handler for a node the IR must not stand for at all, not even as an
    opaque node (an active dropout: eager draws a random mask, the IR would not): the
    capture attempt fails with this one-line reason."""


@dataclass
class Sym:
    """A runtime integer (a symbolic size) held as an i64 scalar IR value."""

    value: Value
    hint: int | None = None


class Deferred:
    """An output lowered only if something uses it (e.g. max_pool indices, norm stats)."""

    def __init__(self, thunk: Callable[[], Any]) -> None:
        self._thunk: Callable[[], Any] | None = thunk
        self._value: Any = None

    def resolve(self) -> Any:
        if self._thunk is not None:
            thunk, self._thunk = self._thunk, None
            self._value = thunk()
        return self._value


@dataclass
class LoweringStats:
    opaque: collections.Counter[str] = field(default_factory=collections.Counter)
    retraced: collections.Counter[str] = field(default_factory=collections.Counter)
    type_mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # (graph index, fx node name) -> IR value names of its tensor results
    node_values: dict[tuple[int, str], list[str]] = field(default_factory=dict)


# -- model level ----------------------------------------------------------------------


class ModelLowerer:
    def __init__(self, capture: Capture, *, weights: bool = True,
                 copy_weights: bool = False) -> None:
        self.capture = capture
        self.root = capture.root
        self.weights = weights and _has_weights(capture.root)
        self.share_weights = not copy_weights
        self.paths = ModulePaths(capture.root)
        self.symbols = dict(capture.symbols)
        # symbols whose SymDim bounds are facts: the capture's input ranges, and the
        # data-dependent sizes (torch's unbacked u0, u1, ...) bound by registry inference
        self.proven: set[str] = set(capture.symbols)
        self.stats = LoweringStats()
        self.model = Model(name=type(capture.root).__name__,
                           source_format=capture.source_format)
        self._derived: dict[str, Dim] = {}
        # id(parameter or buffer) -> its first qualified name in the root module
        self.tensor_names: dict[int, str] = {}
        for name, t in list(capture.root.named_parameters(remove_duplicate=False)) + \
                list(capture.root.named_buffers(remove_duplicate=False)):
            self.tensor_names.setdefault(id(t), name)
        # tensor constants of the traced graphs (not the root's), named here; kept alive so
        # that their ids stay theirs
        self._constants: list[torch.Tensor] = []
        # model tensor name -> data of a tensor constant of the program (not a weight)
        self.literals: dict[str, torch.Tensor] = {}

    def lower(self) -> Model:
        next_id = 0
        many = len(self.capture.graphs) > 1
        for index, cg in enumerate(self.capture.graphs):
            graph = Graph(f"graph{index}" if many else "main")
            graph.break_reason = cg.break_reason
            graph.reserve_ids(next_id)
            GraphLowerer(self, cg, graph, index).run()
            self.model.graphs.append(graph)
            next_id = max((n.id for _, n in _walk(graph)), default=next_id - 1) + 1
        if any(node.subgraphs() for graph in self.model.graphs for node in graph.nodes):
            # a loop body is built with its own ids while the graph around it is: number
            # every node of the model again, subgraphs included, so that ids are unique
            self.model.renumber_nodes()
        return self.model

    # -- tensors ------------------------------------------------------------------------
    def tensor(self, name: str, value: torch.Tensor) -> Tensor:
        """The model tensor `name` (created once, shared by every graph)."""
        existing = self.model.tensors.get(name)
        if existing is not None:
            return existing
        share = self.share_weights and isinstance(value, torch.nn.Parameter)
        return self.model.add_tensor(make_tensor(name, value, self.weights, share=share))

    def constant_name(self, name: str, value: torch.Tensor) -> str:
        """The model tensor name of a graph's tensor constant (fx's `_tensor_constant0`),
        not a tensor of the root: each graph module (a retraced node's, another graph of a
        dynamo capture) numbers its own from 0, so a name another constant took is made
        unique, and the same constant keeps its name."""
        known = self.tensor_names.get(id(value))
        if known is not None:
            return known
        unique, k = name, 1
        while unique in self.model.tensors:
            unique, k = f"{name}_{k}", k + 1
        self.tensor_names[id(value)] = unique
        self._constants.append(value)
        return unique

    # -- types --------------------------------------------------------------------------
    def dim(self, size: Any) -> Dim:
        if isinstance(size, int):
            return int(size)
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            if getattr(expr, "is_number", False):
                return int(expr)
            key = str(expr)
            if key in self.symbols:
                return self.symbols[key]
            if _unbacked(expr):  # a data-dependent size no neutral op has bound yet
                lo, hi = _torch_range(size)
                return SymDim(key, lo, hi)
            if key not in self._derived:
                self._derived[key] = self._derived_dim(expr)
            return self._derived[key]
        return None

    def _derived_dim(self, expr: Any) -> Dim:
        import sympy

        free = list(expr.free_symbols)
        if not free or any(str(s) not in self.symbols for s in free):
            return None
        renamed = expr.subs({s: sympy.Symbol(self.symbols[str(s)].name) for s in free})
        lo = hi = None
        try:
            from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

            ranges = {}
            for s in free:
                sd = self.symbols[str(s)]
                ranges[s] = ValueRanges(sd.min if sd.min is not None else 0,
                                        sd.max if sd.max is not None else sympy.oo)
            bounds = bound_sympy(expr, ranges)
            lo, hi = _int_or_none(bounds.lower), _int_or_none(bounds.upper)
        except Exception:
            pass
        return SymDim(str(renamed).replace(" ", ""), lo, hi)

    def product_dim(self, dims: Sequence[Dim]) -> Dim:
        """The product of dims, named like the derived dims of torch's shape expressions
        (e.g. 128*batch)."""
        import sympy

        if all(isinstance(d, int) for d in dims):
            return int(np.prod([int(d) for d in dims if isinstance(d, int)], dtype=np.int64))
        if any(d is None for d in dims):
            return None
        expr = sympy.Integer(1)
        lo: int | None = 1
        hi: int | None = 1
        for d in dims:
            if isinstance(d, int):
                expr = expr * d
                lo = None if lo is None else lo * d
                hi = None if hi is None else hi * d
            elif isinstance(d, SymDim):
                expr = expr * sympy.Symbol(d.name, positive=True, integer=True)
                lo = None if lo is None or d.min is None else lo * d.min
                hi = None if hi is None or d.max is None else hi * d.max
        if isinstance(expr, sympy.Symbol):
            return next(d for d in dims if isinstance(d, SymDim))
        return SymDim(str(expr).replace(" ", ""), lo, hi)

    def bind_unbacked(self, meta: torch.Tensor, shape: Sequence[Dim]) -> None:
        """Name torch's data-dependent sizes (u0, ...) after the SymDims registry inference
        gave the same dims of a lowered value: one name per size, bounds from the op's
        semantics (a nonzero count is at most the input's numel)."""
        if len(shape) != meta.dim():
            return
        for size, dim in zip(meta.shape, shape, strict=True):
            if isinstance(size, torch.SymInt) and isinstance(dim, SymDim):
                expr = size.node.expr
                key = str(expr)
                if key not in self.symbols and _unbacked(expr):
                    self.symbols[key] = dim
                    self.proven.add(key)

    def assume(self, size: torch.SymInt, name: str, lo: int, hi: int | None) -> None:
        """A data-dependent torch symbol whose range the op's semantics give (a view's
        storage offset is at least 0): range checks on it are decided from these bounds."""
        key = str(size.node.expr)
        if key not in self.symbols and _unbacked(size.node.expr):
            self.symbols[key] = SymDim(name, lo, hi)
            self.proven.add(key)

    def decide(self, cond: Any) -> bool | None:
        """The truth of a comparison of symbolic sizes (a torch SymBool) when the proven
        bounds imply it, else None (it must be checked at run time)."""
        import sympy
        from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

        expr = cond.node.expr if isinstance(cond, torch.SymBool) else None
        if expr is None:
            return None
        ranges = {}
        for s in expr.free_symbols:
            sd = self.symbols.get(str(s))
            if str(s) not in self.proven or not isinstance(sd, SymDim):
                return None
            ranges[s] = ValueRanges(sd.min if sd.min is not None else 0,
                                    sd.max if sd.max is not None else sympy.oo)
        try:
            bounds = bound_sympy(expr, ranges)
        except Exception:
            return None
        if bounds.is_singleton() and bool(bounds.lower) in (True, False):
            return bool(bounds.lower)
        return None

    def type_of(self, value: Any) -> TensorType | None:
        if isinstance(value, torch.Tensor):
            return TensorType(to_dtype(value.dtype), tuple(self.dim(d) for d in value.shape))
        return None


def _type_or_none(owner: Any, meta: torch.Tensor) -> TensorType | None:
    """The IR type of an op's example output, or None (unknown) where the IR cannot hold
    it (complex32, ...): the node stays opaque with an untyped output instead of ending
    the capture."""
    try:
        return owner.type_of(meta)
    except ValueError:
        return None


def _int_or_none(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if abs(number) < 2**62 else None


def _unbacked(expr: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(getattr(expr, "is_Symbol", False) and free_unbacked_symbols(expr))


def _torch_range(size: torch.SymInt) -> tuple[int | None, int | None]:
    env = size.node.shape_env
    rng = env.var_to_range.get(size.node.expr) if env is not None else None
    if rng is None:
        return 0, None
    return _int_or_none(rng.lower), _int_or_none(rng.upper)


def _has_weights(root: torch.nn.Module) -> bool:
    return all(has_data(t) for t in list(root.parameters()) + list(root.buffers()))


def _walk(graph: Graph) -> Iterator[tuple[Graph, Node]]:
    for node in graph.nodes:
        yield graph, node
        for sub in node.subgraphs():
            yield from _walk(sub)


# -- graph level ----------------------------------------------------------------------


class GraphLowerer:
    """Lowers one fx graph into one IR graph (or, for re-traced nodes, into a region of
    an IR graph that is already being built)."""

    def __init__(self, owner: ModelLowerer, cg: CapturedGraph | None, graph: Graph,
                 index: int, *, parent: GraphLowerer | None = None,
                 provenance: Provenance | None = None, depth: int = 0) -> None:
        self.owner = owner
        self.cg = cg
        self.graph = graph
        self.index = index
        self.env: dict[torch.fx.Node, Any] = {}
        # in-place ops: the fx nodes that name one tensor (the tensor an op updated, the
        # op's own result, which aliases it, and get_attr nodes of the same attribute),
        # so that a later reader of any of them sees the newest value (`_rebind`)
        self.aliases: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        self.updated_attrs: dict[str, list[torch.fx.Node]] = {}  # get_attr target -> group
        self.parent = parent
        self.fixed_provenance = provenance
        self.depth = depth
        self.builder = GraphBuilder(graph, owner.model)

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> None:
        assert self.cg is not None
        gm = self.cg.gm
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.cg.slots):
            raise CaptureError(f"graph {self.index}: {len(placeholders)} placeholders but "
                               f"{len(self.cg.slots)} input descriptions")
        slots = dict(zip(placeholders, self.cg.slots, strict=True))
        self._check_view_writes(gm)
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node, slots[node])
            elif node.op == "output":
                self._set_outputs(node)
            else:
                self.env[node] = self.lower_node(node, gm)
        self._drop_unused_sizes()

    def _check_view_writes(self, gm: torch.fx.GraphModule) -> None:
        """Refuse a graph where an in-place op writes into a view of a tensor that is
        read afterwards (`view_write_conflict`). fx and Dynamo graphs hold such writes
        as they are; torch.export's are functionalized first (`capture.mutates_views`)."""
        conflict = view_write_conflict(gm)
        if conflict:
            method = self.owner.capture.method
            raise CaptureError(conflict + ("; use frontend='export'" if method != "export"
                                           else ""))

    def _drop_unused_sizes(self) -> None:
        """Remove the size reads (aten.sym_size) nothing uses: torch.export reads every
        data-dependent size for its range checks, which the lowering decides statically."""
        for ir_node in reversed(list(self.graph.nodes)):
            if ir_node.provenance is None or ir_node.provenance.source_op != "aten.sym_size.int":
                continue
            if not any(out.uses or out in self.graph.outputs for out in ir_node.outputs):
                self.graph.remove_node(ir_node)

    def _placeholder(self, node: torch.fx.Node, slot: Slot) -> Any:
        meta = example_value(node)
        if slot.role in ("parameter", "buffer", "constant"):
            source = slot.value if isinstance(slot.value, torch.Tensor) else meta
            if not isinstance(source, torch.Tensor):
                raise CaptureError(f"graph {self.index}: no tensor for {slot.role} "
                                   f"{slot.name!r}")
            if slot.role == "constant" and has_data(source):
                self.owner.literals[slot.name] = source  # torch.export's lifted constants
            # created on first use, so unused buffers (num_batches_tracked) stay out
            return Deferred(lambda: self.parameter(self.owner.tensor(slot.name, source)))
        if slot.role in ("input", "link", "external"):
            if isinstance(meta, torch.Tensor) or isinstance(slot.value, torch.Tensor):
                base = meta if isinstance(meta, torch.Tensor) else slot.value
                name = slot.name
                if slot.role == "link" and slot.link is not None:
                    name = self._link_name(slot, name)
                value = self.graph.add_input(self.graph.unique_name(name),
                                             self.owner.type_of(base))
                if slot.role == "link" and slot.link is not None:
                    producer = self.owner.model.graphs[slot.link[0]]
                    self.owner.model.links.append(GraphLink(
                        slot.link[0], producer.outputs[slot.link[1]].name, self.index,
                        value.name))
                return value
            return self._structured_input(slot.name, slot.value)
        if slot.role == "symint":
            if isinstance(meta, torch.SymInt) and not _is_static(meta):
                return Deferred(lambda: self._sym_from_inputs(meta))
            return int(slot.value) if isinstance(slot.value, int | torch.SymInt) else slot.value
        return slot.value  # unused or specialised Python value

    def parameter(self, tensor: Tensor) -> Value:
        """The graph value of a model tensor. Its name must be the tensor's: an op output
        that took the name first is renamed out of the way."""
        existing = self.graph.values.get(tensor.name)
        if existing is not None and existing.tensor is not tensor:
            new_name = self.graph.unique_name(f"{tensor.name}_value")
            del self.graph.values[tensor.name]
            existing.name = new_name
            self.graph.values[new_name] = existing
        return self.graph.add_parameter(tensor)

    def _link_name(self, slot: Slot, fallback: str) -> str:
        assert slot.link is not None
        graphs = self.owner.model.graphs
        if slot.link[0] < len(graphs) and slot.link[1] < len(graphs[slot.link[0]].outputs):
            return graphs[slot.link[0]].outputs[slot.link[1]].name
        return fallback

    def _structured_input(self, name: str, value: Any) -> Any:
        """A forward argument holding tensors in tuples/lists/dicts: one graph input per
        tensor, named like capture.input_names does (x_0, x_1, x_key)."""
        from .capture import key_text

        leaves, spec = pytree.tree_flatten_with_path(value)
        mapped = []
        for path, leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                leaf_name = name + "".join(f"_{key_text(k)}" for k in path)
                mapped.append(self.graph.add_input(self.graph.unique_name(leaf_name),
                                                   self.owner.type_of(leaf)))
            else:
                mapped.append(leaf)
        return pytree.tree_unflatten(mapped, spec)

    def _sym_from_inputs(self, meta: torch.SymInt) -> Any:
        """A symbolic size placeholder, computed from an input dim that has that size."""
        target = self.owner.dim(meta)
        for value in self.graph.inputs:
            if value.type is None or value.type.shape is None:
                continue
            for d, size in enumerate(value.type.shape):
                if size == target:
                    em = Emitter(self, None, Provenance(self.owner.capture.source_format,
                                                        "placeholder", "", "", ""))
                    return em.size_of(value, d)
        raise Unsupported(f"no input dim carries symbolic size {meta}")

    def _set_outputs(self, node: torch.fx.Node) -> None:
        outputs: list[Value] = []
        mutated: list[str] = []
        for leaf in pytree.tree_leaves(node.args[0]):
            if not isinstance(leaf, torch.fx.Node):
                continue
            value = self.resolve(self.env[leaf])
            if isinstance(value, Value):
                outputs.append(value)
                if self.cg is not None and leaf.name in self.cg.mutations:
                    mutated.append(f"{value.name} -> {self.cg.mutations[leaf.name]}")
            else:  # a node standing for a structure (a leaf module's tuple of tensors)
                for part in pytree.tree_leaves(value, is_leaf=lambda x: isinstance(
                        x, Value | Deferred)):
                    part = self.resolve(part)
                    if isinstance(part, Value):
                        outputs.append(part)
        self.graph.set_outputs(outputs)
        if mutated:  # outputs that are new values of buffers (training-mode batch norm)
            self.owner.model.metadata[f"{self.graph.name}.buffer_updates"] = ", ".join(mutated)

    # -- nodes ----------------------------------------------------------------------------
    def provenance(self, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Provenance:
        if self.fixed_provenance is not None:
            return self.fixed_provenance
        owner = self.owner
        module_path, module_class = deepest_module(node, owner.paths)
        if self.cg is not None and self.cg.path_map and module_path:
            module_path = _remap(module_path, self.cg.path_map)
        if node.op == "call_module":
            module_path = str(node.target)
            sub = _get_submodule(gm, str(node.target))
            module_class = class_name(type(sub)) if sub is not None else module_class
        return Provenance(owner.capture.source_format, source_op(node, gm), node.name,
                          module_path, module_class,
                          location_from_stack(node.meta.get("stack_trace")))

    def lower_node(self, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Any:
        from . import handlers as H

        if node.op == "get_attr":
            group = self.updated_attrs.get(str(node.target))
            if group is not None:  # read after an in-place update
                group.append(node)
                self.aliases[node] = group
                return self.env[group[0]]
            return self._get_attr(node, gm)
        em = Emitter(self, node, self.provenance(node, gm), gm)
        handler = H.lookup(node, gm)
        mark = len(self.graph.nodes)
        try:
            if handler is None:
                raise Unsupported("no table entry")
            args, kwargs = self.map_args(node)
            result = handler(em, args, kwargs)
        except Unsupported as exc:
            self._rollback(mark)
            result = self.fallback(em, str(exc))
        except (KeyboardInterrupt, SystemExit, MemoryError, RecursionError, Refused):
            raise
        except Exception as exc:
            # a case the handler did not foresee (ZeroDivisionError on a zero-size dim, an
            # unsupported dtype, a data-dependent guard, ...): never lose the capture, leave
            # this node opaque with the reason recorded instead
            self._rollback(mark)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            result = self.fallback(em, f"handler failed: {type(exc).__name__}: {first}")
        self.refine_types(node, result)
        if self.parent is None:
            self.owner.stats.node_values[(self.index, node.name)] = [
                v.name for v in pytree.tree_leaves(result, is_leaf=lambda x: isinstance(x, Value))
                if isinstance(v, Value)]
        mutated = H.mutated_input(node, gm)
        if mutated is not None and isinstance(result, Value):
            self._rebind(mutated, node, result)
        return result

    def _rebind(self, mutated: torch.fx.Node, node: torch.fx.Node, result: Value) -> None:
        """`node` updated `mutated` in place: every fx node that names the same tensor
        (earlier updates of it, whose results alias it: `b.mul_(2).add_(1)`; the get_attr
        nodes of a buffer, which fx repeats per read) stands for `result` from now on."""
        group = self.aliases.get(mutated)
        if group is None:
            group = self.aliases[mutated] = [mutated]
        group.append(node)
        self.aliases[node] = group
        for alias in group:
            self.env[alias] = result
            if alias.op == "get_attr":
                self.updated_attrs[str(alias.target)] = group

    def _rollback(self, mark: int) -> None:
        """Remove the nodes a failed handler emitted (newest first)."""
        for ir_node in reversed(self.graph.nodes[mark:]):
            if any(out.uses or out in self.graph.outputs for out in ir_node.outputs):
                continue
            self.graph.remove_node(ir_node)

    def _get_attr(self, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Any:
        obj: Any = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.Tensor):
            known = self.owner.tensor_names
            name = known.get(id(obj), self.owner.paths.normalize(str(node.target)))
            if obj.numel() <= 16 and has_data(obj) and id(obj) not in known:
                em = Emitter(self, node, self.provenance(node, gm), gm)
                return em.const_tensor(obj)
            if id(obj) not in known:
                name = self.owner.constant_name(name, obj)
            return self.parameter(self.owner.tensor(name, obj))
        return obj

    def map_args(self, node: torch.fx.Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
        def fetch(n: torch.fx.Node) -> Any:
            return self.resolve(self.env[n])
        args = torch.fx.node.map_arg(node.args, fetch)
        kwargs = torch.fx.node.map_arg(node.kwargs, fetch)
        return tuple(args), dict(kwargs)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, Deferred):
            return value.resolve()
        return value

    # -- types ----------------------------------------------------------------------------
    def refine_types(self, node: torch.fx.Node, result: Any) -> None:
        meta = example_value(node)
        if meta is None:
            return
        values = pytree.tree_leaves(result, is_leaf=lambda x: isinstance(x, Deferred | Value))
        metas = pytree.tree_leaves(meta)
        if isinstance(result, Value):
            values, metas = [result], [meta] if isinstance(meta, torch.Tensor) else []
        if len(values) != len(metas):
            return
        for value, m in zip(values, metas, strict=True):
            if not isinstance(value, Value) or not isinstance(m, torch.Tensor):
                continue
            if value.type is not None and value.type.shape is not None:
                self.owner.bind_unbacked(m, value.type.shape)
            expected = _type_or_none(self.owner, m)
            if expected is None:
                continue
            current = value.type
            if current is None:
                value.type = expected
                continue
            problem = _type_conflict(current, expected)
            if problem:
                self.owner.stats.type_mismatches.append(
                    f"{node.name} ({source_op(node, None)}): IR {current} vs torch {expected}")
            else:
                value.type = _merge_types(current, expected)

    # -- fallback: re-trace to ATen, else opaque -------------------------------------------
    def fallback(self, em: Emitter, reason: str) -> Any:
        node = em.node
        assert node is not None
        if self.depth < 2 and _retraceable(node):
            try:
                result = self.retrace(em)
            except (KeyboardInterrupt, SystemExit, MemoryError, RecursionError, Refused):
                raise
            except Exception as exc:
                reason = f"{reason}; re-trace: {exc}"
            else:
                self.owner.stats.retraced[em.provenance.source_op] += 1
                self.owner.stats.notes.append(
                    f"re-traced {em.provenance.source_op} at {node.name}: {reason}")
                return result
        folded = self.fold(em)
        if folded is not None:
            self.owner.stats.notes.append(
                f"folded {em.provenance.source_op} at {node.name} (constant inputs): {reason}")
            return folded
        return self.opaque(em, reason)

    def fold(self, em: Emitter) -> Any:
        """An ATen op with no lowering whose tensor inputs are all literal constants (not
        weights, not model inputs), run once by torch and kept as its results: Reformer's
        `np.lcm` of two config numbers arrives as aten.lcm of two constant tensors. Random,
        in-place and `empty*` ops are never folded; None when the node does not qualify."""
        node = em.node
        assert node is not None
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) \
                or torch.Tag.nondeterministic_seeded in target.tags \
                or target._schema.is_mutable \
                or "empty" in target._schema.name:   # uninitialised memory, not a value
            return None
        flat, spec = pytree.tree_flatten((node.args, node.kwargs))
        leaves: list[Any] = []
        for leaf in flat:
            if isinstance(leaf, torch.fx.Node):
                data = _literal(self.resolve(self.env.get(leaf)), self.owner.literals)
                if data is None:
                    return None
                leaves.append(data)
            else:
                leaves.append(leaf)
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        try:
            with torch.no_grad():
                out = target(*args, **kwargs)
        except Exception:
            return None
        outs, out_spec = pytree.tree_flatten(out)
        if not outs or not all(isinstance(t, torch.Tensor) for t in outs) \
                or sum(t.numel() for t in outs) > FOLD_MAX_ELEMENTS:
            return None
        try:
            consts = [em.const(t.detach().numpy(), to_dtype(t.dtype)) for t in outs]
        except (TypeError, ValueError, RuntimeError):  # a dtype numpy does not hold
            return None
        return pytree.tree_unflatten(consts, out_spec)

    def retrace(self, em: Emitter) -> Any:
        from torch.fx.experimental.proxy_tensor import make_fx

        node = em.node
        assert node is not None and em.gm is not None
        flat, spec = pytree.tree_flatten((node.args, node.kwargs))
        inputs: list[Value] = []
        examples: list[torch.Tensor] = []
        python_leaves: list[Any] = []
        slots: list[int | None] = []
        for leaf in flat:
            value = self.resolve(self.env[leaf]) if isinstance(leaf, torch.fx.Node) else leaf
            if isinstance(value, Value):
                example = example_value(leaf) if isinstance(leaf, torch.fx.Node) else None
                if not isinstance(example, torch.Tensor):
                    raise _RetraceFailed("an input has no example tensor")
                slots.append(len(examples))
                examples.append(self._concrete(example))
                inputs.append(value)
                python_leaves.append(None)
            elif isinstance(value, Sym):
                if value.hint is None:
                    raise _RetraceFailed("a symbolic size has no hint")
                slots.append(None)
                python_leaves.append(value.hint)
            elif isinstance(value, torch.SymInt):
                slots.append(None)
                python_leaves.append(int(value))
            else:
                slots.append(None)
                python_leaves.append(value)
        target = node.target
        module: torch.nn.Module | None = None
        param_names: list[str] = []
        if node.op == "call_module":
            module = _get_submodule(em.gm, str(node.target))
            if module is None:
                raise _RetraceFailed(f"no submodule {node.target}")
            named: dict[str, torch.Tensor] = dict(module.named_parameters(remove_duplicate=False))
            named.update(dict(module.named_buffers(remove_duplicate=False)))
            param_names = list(named)
            prefix = f"{em.provenance.module_path}." if em.provenance.module_path else ""
            for pname in param_names:
                tensor = named[pname]
                root_name = self._root_name(tensor, prefix + pname)
                inputs.append(self.parameter(self.owner.tensor(root_name, tensor)))
                examples.append(self._concrete(tensor))
        count = len(examples) - len(param_names)

        def fn(*tensors: torch.Tensor) -> Any:
            leaves = [tensors[s] if s is not None else p
                      for s, p in zip(slots, python_leaves, strict=True)]
            args, kwargs = pytree.tree_unflatten(leaves, spec)
            if node.op == "call_function":
                return target(*args, **kwargs)  # type: ignore[operator]
            if node.op == "call_method":
                return getattr(args[0], str(target))(*args[1:], **kwargs)
            assert module is not None
            state = dict(zip(param_names, tensors[count:], strict=True))
            return torch.func.functional_call(module, state, tuple(args), kwargs)

        decompositions: Any = None
        if isinstance(target, torch._ops.OpOverload):
            from torch._decomp import core_aten_decompositions

            decompositions = core_aten_decompositions()
        try:
            # oneDNN off: on CPU, LSTM / GRU would otherwise dispatch to one
            # mkldnn_rnn_layer kernel per layer instead of the cells' own ops
            with _quiet(), torch.backends.mkldnn.flags(enabled=False):
                # functionalized: in-place updates of views (mask[a:b] = v) become
                # slice_scatter & co., and input mutations come back as trailing copy_
                sub = make_fx(torch.func.functionalize(fn), decomposition_table=decompositions,
                              tracing_mode="real")(*_fresh(examples))
        except Exception as exc:
            raise _RetraceFailed(type(exc).__name__ + ": " + str(exc).splitlines()[0]
                                 if str(exc) else type(exc).__name__) from exc
        if isinstance(target, torch._ops.OpOverload) and any(
                n.op == "call_function" and n.target is target for n in sub.graph.nodes):
            raise _RetraceFailed("the op does not decompose")
        if view_write_conflict(sub):
            # functionalize does not reach below composite ops and decompositions (F.pad's
            # circular mode copies into slices of an empty tensor; GRU's decomposition
            # updates its gate slices in place): the traced graph, functionalized as a
            # whole, has the writes as explicit ops, else the lowering would drop them
            try:
                with _quiet():
                    sub = make_fx(torch.func.functionalize(sub),
                                  tracing_mode="real")(*_fresh(examples))
            except Exception as exc:
                raise _RetraceFailed("the re-traced graph writes into views") from exc
            if view_write_conflict(sub):
                raise _RetraceFailed("the re-traced graph writes into views")
        _layouts(sub, examples)
        nested = GraphLowerer(self.owner, None, self.graph, self.index, parent=self,
                              provenance=em.provenance, depth=self.depth + 1)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        for ph, value in zip(placeholders, inputs, strict=True):
            nested.env[ph] = value
        result: Any = None
        for sub_node in sub.graph.nodes:
            if sub_node.op == "placeholder":
                continue
            if sub_node.op == "output":
                result = torch.fx.node.map_arg(sub_node.args[0],
                                               lambda n: nested.resolve(nested.env[n]))
                break
            nested.env[sub_node] = nested.lower_node(sub_node, sub)
        # inputs the op updated in place: later readers of those fx nodes see new values
        tensor_leaves = [leaf for leaf, slot in zip(flat, slots, strict=True) if slot is not None]
        for ph, leaf, before in zip(placeholders, tensor_leaves, inputs, strict=False):
            after = nested.resolve(nested.env[ph])
            if isinstance(leaf, torch.fx.Node) and isinstance(after, Value) and after is not before:
                self.env[leaf] = after
        return result

    def inline(self, sub: torch.fx.GraphModule, args: Sequence[Any]) -> Any:
        """Lower a submodule graph in place (higher-order ops such as
        wrap_with_set_grad_enabled), its placeholders bound to `args`."""
        nested = GraphLowerer(self.owner, None, self.graph, self.index, parent=self,
                              depth=self.depth)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(args):
            raise Unsupported("submodule arity")
        for ph, value in zip(placeholders, args, strict=True):
            nested.env[ph] = value
        for node in sub.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                return torch.fx.node.map_arg(node.args[0], lambda n: nested.resolve(nested.env[n]))
            nested.env[node] = nested.lower_node(node, sub)
        return None

    def _root_name(self, tensor: torch.Tensor, fallback: str) -> str:
        return self.owner.tensor_names.get(id(tensor), fallback)

    def _concrete(self, example: torch.Tensor) -> torch.Tensor:
        """A tensor make_fx can run on: the real example when we have it, else a meta
        tensor of the same type (no data is ever materialised) that is the same view of
        a storage of the same size (strides and offset: ops such as as_strided read the
        storage, and a contiguous stand-in would make them read other elements)."""
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(example, FakeTensor):
            return example.detach()

        def concrete(d: Any) -> int:
            return _hint(d) if isinstance(d, torch.SymInt) else int(d)

        shape = [concrete(d) for d in example.shape]
        try:
            stride = [concrete(d) for d in example.stride()]
            offset = concrete(example.storage_offset())
            storage = concrete(example.untyped_storage().nbytes()) // example.element_size()
            base = torch.empty(storage, dtype=example.dtype, device="meta")
            return base.as_strided(shape, stride, offset)
        except (RuntimeError, NotImplementedError):  # a layout without strides (sparse)
            return torch.empty(shape, dtype=example.dtype, device="meta")

    def opaque(self, em: Emitter, reason: str) -> Any:
        node = em.node
        assert node is not None
        args, kwargs = self.map_args(node)
        inputs: list[Value] = []
        attrs: dict[str, object] = {}
        names = _argument_names(node)
        for i, value in enumerate(list(args) + list(kwargs.values())):
            key = names[i] if i < len(names) else (list(kwargs)[i - len(args)]
                                                   if i >= len(args) else f"arg{i}")
            leaves = pytree.tree_leaves(value, is_leaf=lambda x: isinstance(x, Value | Sym))
            if any(isinstance(x, Value | Sym) for x in leaves):
                inputs.extend(x.value if isinstance(x, Sym) else x for x in leaves
                              if isinstance(x, Value | Sym))
                continue
            simple = _simple_attr(value)
            if simple is not None:
                attrs[key] = simple
        meta = example_value(node)
        meta_leaves, spec = pytree.tree_flatten(meta)
        out_names: list[str] = []
        out_types: list[TensorType | None] = []
        for i, m in enumerate(meta_leaves):
            if isinstance(m, torch.Tensor):
                out_names.append(self.graph.unique_name(node.name if i == 0 else
                                                        f"{node.name}_{i}"))
                out_types.append(_type_or_none(self.owner, m))
        domain = "aten" if isinstance(node.target, torch._ops.OpOverload) else "torch"
        op = source_op(node, em.gm)  # the op itself (provenance may name a re-traced parent)
        if domain == "aten" and op.startswith("aten."):
            op = op[len("aten."):]
        ir_node = self.graph.add_node(op, inputs, out_names, attrs, output_types=out_types,
                                      domain=domain, provenance=_copy(em.provenance))
        self.owner.stats.opaque[f"{domain}::{op}"] += 1
        self.owner.stats.notes.append(f"opaque {domain}::{op} at {node.name}: {reason}")
        outs = iter(ir_node.outputs)
        if meta is None:
            return None
        mapped = [next(outs) if isinstance(m, torch.Tensor) else m for m in meta_leaves]
        return pytree.tree_unflatten(mapped, spec)


def _remap(path: str, mapping: Mapping[str, str]) -> str:
    for old, new in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        if path == old or path.startswith(old + "."):
            return new + path[len(old):]
    return path


def view_write_conflict(gm: torch.fx.GraphModule) -> str:
    """Why the lowering cannot follow the graph's in-place writes ("" when it can): an
    op writes into a view of a tensor that is read afterwards (`y[:, :2].relu_()` then
    `y * 2`), and the lowering rebinds only the view it wrote, not the tensor behind it.
    `x[i] += v` (the view stored back by setitem before any read) is followed."""
    from . import handlers as H

    nodes = list(gm.graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    for node in nodes:
        written = H.mutated_input(node, gm)
        base, disjoint = written, set()
        while base is not None and _is_view(base):
            source = base.args[0]
            if base.target is operator.getitem and isinstance(source, torch.fx.Node) \
                    and _returns_several(source):  # the other pieces of a split
                disjoint |= {u for u in source.users if u.args[1:] != base.args[1:]}
            base = source if isinstance(source, torch.fx.Node) else None
        if written is None or base is None or base is written:
            continue
        family = _views_of(base, disjoint) - {written, node}
        late = sorted((user for member in family for user in member.users
                       if position.get(user, -1) > position[node]), key=position.__getitem__)
        if late and late[0].target is operator.setitem and late[0].args[0] is base \
                and late[0].args[2] in (node, written):
            continue  # `x[i] += v`: the written view is stored back into x first
        if late:
            return (f"{node.name} writes in place into a view of {base.name} that "
                    f"{late[0].name} reads afterwards: the lowering does not carry writes "
                    "through views")
    return ""


_VIEW_NAMES = frozenset({
    "view", "view_as", "reshape", "reshape_as", "t", "transpose", "permute", "narrow",
    "select", "diagonal", "expand", "expand_as", "unsqueeze", "squeeze", "flatten",
    "unflatten", "unfold", "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided",
    "detach", "split", "chunk", "unbind", "tensor_split", "hsplit", "vsplit", "real",
    "imag", "view_as_real", "view_as_complex", "contiguous", "T", "mT", "H", "mH",
    "__getitem__", "getitem"})
"""fx-level calls whose result may share memory with their first argument."""


def _is_view(node: torch.fx.Node) -> bool:
    """Whether `node` (a call in an fx or Dynamo graph) may return a view of its first
    argument, or one of the views a split-like call returned."""
    if node.op not in ("call_function", "call_method") or not node.args \
            or not isinstance(node.args[0], torch.fx.Node):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        returns = target._schema.returns
        return bool(returns) and returns[0].alias_info is not None \
            and not returns[0].alias_info.is_write
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if target is operator.getitem:  # indexing a tensor, or picking one of split's views
        source = node.args[0]
        return not (source.op in ("call_function", "call_method")
                    and not _is_view(source) and _returns_several(source))
    return name in _VIEW_NAMES


def _returns_several(node: torch.fx.Node) -> bool:
    """Whether the call returns a tuple or list (that getitem picks from)."""
    value = node.meta.get("val", node.meta.get("example_value"))
    if value is not None:
        return isinstance(value, tuple | list)
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        returns = target._schema.returns
        return len(returns) > 1 or (len(returns) == 1
                                    and isinstance(returns[0].type, torch.ListType))
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name in ("split", "chunk", "unbind", "tensor_split", "hsplit", "vsplit")


def _views_of(base: torch.fx.Node, disjoint: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """`base` and every node that may alias it (views of views, in-place results), but
    for the `disjoint` views and what derives from them."""
    family = {base}
    pending = [base]
    while pending:
        for user in pending.pop().users:
            if user not in family and user not in disjoint \
                    and (_is_view(user) or _writes_first(user)):
                family.add(user)
                pending.append(user)
    return family


def _writes_first(node: torch.fx.Node) -> bool:
    from .handlers._base import mutated_input

    return node.op in ("call_function", "call_method") and node.graph.owning_module is not None \
        and mutated_input(node, node.graph.owning_module) is not None


class _RetraceFailed(Exception):
    pass


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _retraceable(node: torch.fx.Node) -> bool:
    if node.op == "call_module":
        return True
    if node.op == "call_method":
        return True
    if node.op != "call_function":
        return False
    target = node.target
    return not (target in (operator.getitem, getattr) and not _tensor_input(node))


def _tensor_input(node: torch.fx.Node) -> bool:
    first = node.args[0] if node.args else None
    return isinstance(first, torch.fx.Node) and isinstance(example_value(first), torch.Tensor)


def _hint(size: torch.SymInt) -> int:
    hint: Any = size.node.hint
    if hint is None and size.node.shape_env is not None:
        hint = size.node.shape_env.size_hint(size.node.expr)
    if hint is None:
        raise _RetraceFailed(f"symbolic size {size} has no hint")
    return int(hint)


def _is_static(size: Any) -> bool:
    if isinstance(size, int):
        return True
    if isinstance(size, torch.SymInt):
        return bool(getattr(size.node.expr, "is_number", False))
    return False


def _argument_names(node: torch.fx.Node) -> list[str]:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return [a.name for a in target._schema.arguments if not a.kwarg_only]
    return [f"arg{i}" for i in range(len(node.args))]


def _simple_attr(value: Any) -> object | None:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, list | tuple) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(int(v) for v in value)
    if isinstance(value, list | tuple) and value and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return tuple(float(v) for v in value)
    return None


def _copy(p: Provenance) -> Provenance:
    return Provenance(p.source_format, p.source_op, p.source_node, p.module_path,
                      p.module_class, p.location)


def _get_submodule(gm: torch.nn.Module, path: str) -> torch.nn.Module | None:
    try:
        return gm.get_submodule(path)
    except AttributeError:
        return None


def _type_conflict(current: TensorType, expected: TensorType) -> str:
    if current.dtype != expected.dtype:
        return "dtype"
    if current.shape is None or expected.shape is None:
        return ""
    if len(current.shape) != len(expected.shape):
        return "rank"
    for a, b in zip(current.shape, expected.shape, strict=True):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return "dim"
    return ""


def _merge_types(current: TensorType, expected: TensorType) -> TensorType:
    if current.shape is None:
        return expected
    if expected.shape is None:
        return current
    merged = tuple(b if (a is None or (not isinstance(a, int) and b is not None)) else a
                   for a, b in zip(current.shape, expected.shape, strict=True))
    return TensorType(current.dtype, merged)


FOLD_MAX_ELEMENTS = 1 << 16
"""Largest result (elements, all outputs) `GraphLowerer.fold` keeps as a constant."""


def _literal(value: Any, literals: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """The data of an IR value that is a literal of the program, never a weight or an
    input: what a `constant` or `full` node produces, or a tensor constant of the program
    (`literals`, by model tensor name), as a torch tensor; else None."""
    if not isinstance(value, Value):
        return None
    if value.tensor is not None:
        known = literals.get(value.tensor.name)
        return known if known is not None and known.numel() <= FOLD_MAX_ELEMENTS else None
    if value.producer is None:
        return None
    node = value.producer
    if node.op == "constant":
        tensor = node.attrs.get("value")
        if not isinstance(tensor, Tensor) or tensor.data is None \
                or tensor.data.size > FOLD_MAX_ELEMENTS:
            return None
        array = tensor.data.reshape(tensor.shape)
    elif node.op == "full" and not node.inputs:
        dtype, shape, fill = (node.attrs.get(k) for k in ("dtype", "shape", "value"))
        if not isinstance(dtype, DType) or not isinstance(shape, tuple) \
                or not all(isinstance(d, int) for d in shape) \
                or not isinstance(fill, int | float) \
                or math.prod(sizes := typing.cast(tuple[int, ...], shape)) > FOLD_MAX_ELEMENTS:
            return None
        array = np.full(sizes, fill, dtype=dtype.numpy)
    else:
        return None
    try:
        return torch.from_numpy(np.array(array))
    except TypeError:  # bfloat16 & co.
        return None


LAYOUT_UNKNOWN = "irbridge.layout_unknown"
"""GraphModule.meta flag: the example values of the graph's non-input nodes do not say
which storage they view (see `_layouts`)."""


def _fresh(examples: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """New tensor objects for one trace: an op that changes its input's view in place
    (as_strided_, transpose_ in quantile's decomposition) changes these, not `examples`."""
    return [e.detach() for e in examples]


def _layouts(sub: torch.fx.GraphModule, examples: Sequence[torch.Tensor]) -> None:
    """Example values of a re-traced graph that say what each tensor views. make_fx
    records a fresh `empty_strided` for every value, which keeps strides but drops the
    storage offset and the storage's size: as_strided of a slice would read as if the
    slice were its whole storage. The graph is run again on fake tensors of `examples`
    (the inputs' own views), which track storages; where that fails, the placeholders
    get `examples` and the graph is flagged LAYOUT_UNKNOWN for the rest."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    try:
        with _quiet():
            mode = FakeTensorMode(allow_non_fake_inputs=True)
            fakes = [mode.from_tensor(e) for e in examples]
            FakeTensorProp(sub, mode).propagate_dont_convert_inputs(*fakes)
    except Exception:
        for ph, example in zip(placeholders, examples, strict=False):
            ph.meta["val"] = example
        sub.meta[LAYOUT_UNKNOWN] = True


def example_value(node: torch.fx.Node) -> Any:
    if "val" in node.meta:
        return node.meta["val"]
    return node.meta.get("example_value")


# -- what handlers see ----------------------------------------------------------------


class Emitter:
    """The helper a handler uses to emit the IR for one fx node."""

    def __init__(self, lowerer: GraphLowerer, node: torch.fx.Node | None,
                 provenance: Provenance, gm: torch.fx.GraphModule | None = None) -> None:
        self.lowerer = lowerer
        self.node = node
        self.provenance = provenance
        self.gm = gm
        self.graph = lowerer.graph
        self.b = GraphBuilder(lowerer.graph, lowerer.owner.model, provenance)
        self.name = node.name if node is not None else "sym"

    # -- example values -------------------------------------------------------------------
    @property
    def meta(self) -> Any:
        return example_value(self.node) if self.node is not None else None

    def out_dtype(self, index: int = 0) -> DType:
        leaves = [m for m in pytree.tree_leaves(self.meta) if isinstance(m, torch.Tensor)]
        if index >= len(leaves):
            raise Unsupported("no example output to take the dtype from")
        return to_dtype(leaves[index].dtype)

    def out_type(self, index: int = 0) -> TensorType | None:
        leaves = [m for m in pytree.tree_leaves(self.meta) if isinstance(m, torch.Tensor)]
        return self.lowerer.owner.type_of(leaves[index]) if index < len(leaves) else None

    def out_shape(self, index: int = 0) -> tuple[Dim, ...]:
        t = self.out_type(index)
        if t is None or t.shape is None:
            raise Unsupported("no example output shape")
        return t.shape

    def module(self) -> torch.nn.Module:
        assert self.node is not None and self.gm is not None
        sub = _get_submodule(self.gm, str(self.node.target))
        if sub is None:
            raise Unsupported(f"no submodule {self.node.target}")
        return sub

    # -- emitting -------------------------------------------------------------------------
    def op(self, op: str, inputs: Sequence[Value | None], **attrs: Any) -> Value:
        return self.b.op(op, inputs, attrs or None, name=self.name)

    def ops(self, op: str, inputs: Sequence[Value | None], count: int | None = None,
            **attrs: Any) -> list[Value]:
        return self.b.op_multi(op, inputs, attrs or None, name=self.name, num_outputs=count)

    def const(self, array: np.ndarray | float | int | bool, dtype: DType | None = None) -> Value:
        data = np.asarray(array, dtype=dtype.numpy if dtype is not None else None)
        if dtype is None and data.dtype == np.float64:
            data = data.astype(np.float32)
        if data.ndim == 0 and data.dtype.kind in "biuf":
            # 0-d constants as `full`: irbridge.ir.Tensor stores 0-d data as shape [1]
            # (np.ascontiguousarray), which would change ranks in the executor.
            return self.b.op("full", [], {"shape": (), "value": float(data.item()),
                                          "dtype": DType.from_numpy(data.dtype)},
                             name=self.graph.unique_name(f"{self.name}_const"))
        if data.ndim == 0:   # a complex scalar: stored as [1] (see above), read as 0-d
            tensor = Tensor.from_array(self.graph.unique_name(f"{self.name}_const"),
                                       data.reshape(1))
            stored = self.b.op("constant", [], {"value": tensor}, name=tensor.name)
            return self.b.op("reshape", [stored], {"shape": ()},
                             name=self.graph.unique_name(f"{self.name}_scalar"))
        tensor = Tensor.from_array(self.graph.unique_name(f"{self.name}_const"), data)
        return self.b.op("constant", [], {"value": tensor}, name=tensor.name)

    def const_tensor(self, t: torch.Tensor) -> Value:
        from ._util import tensor_to_numpy

        if not has_data(t):
            raise Unsupported("a constant tensor without data")
        return self.const(tensor_to_numpy(t), to_dtype(t.dtype))

    def param(self, name: str, t: torch.Tensor) -> Value:
        return self.lowerer.parameter(self.lowerer.owner.tensor(name, t))

    def scalar(self, value: complex | float | int | bool, dtype: DType) -> Value:
        return self.const(np.asarray(value).astype(dtype.numpy), dtype)

    def value(self, x: Any, dtype: DType | None = None) -> Value:
        """An IR value for a tensor operand, a Python scalar (as a 0-d constant of
        `dtype`, or its own type) or a symbolic size."""
        if isinstance(x, Deferred):
            x = x.resolve()
        if isinstance(x, Value):
            return x
        if isinstance(x, Sym):
            return x.value
        if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise Unsupported("a symbolic Python scalar that is not an IR value")
        if isinstance(x, bool | int | float | complex):
            return self.scalar(x, dtype or python_scalar_dtype(x))
        if isinstance(x, torch.Tensor):
            return self.const_tensor(x)
        raise Unsupported(f"cannot use {type(x).__name__} as a tensor operand")

    def cast(self, v: Value, dtype: DType) -> Value:
        if v.type is not None and v.type.dtype == dtype:
            return v
        return self.op("cast", [v], dtype=dtype)

    def type(self, v: Value) -> TensorType:
        if v.type is None:
            raise Unsupported(f"value {v.name} has no type")
        return v.type

    def rank(self, v: Value) -> int:
        t = self.type(v)
        if t.shape is None:
            raise Unsupported(f"value {v.name} has unknown rank")
        return len(t.shape)

    def shape(self, v: Value) -> tuple[Dim, ...]:
        t = self.type(v)
        if t.shape is None:
            raise Unsupported(f"value {v.name} has unknown rank")
        return t.shape

    def static_shape(self, v: Value) -> tuple[int, ...]:
        shape = self.shape(v)
        if not all(isinstance(d, int) for d in shape):
            raise Unsupported(f"value {v.name} has a symbolic shape")
        return tuple(int(d) for d in shape)  # type: ignore[arg-type]

    def set_shape(self, v: Value, shape: Sequence[Dim]) -> Value:
        """Fill in dims that type inference could not know (shape-tensor inputs)."""
        if v.type is not None and v.type.shape is not None and len(v.type.shape) == len(shape):
            v.type = TensorType(v.type.dtype, tuple(
                s if d is None else d for d, s in zip(v.type.shape, shape, strict=True)))
        return v

    def size_of(self, v: Value, dim: int) -> Sym | int:
        shape = self.shape(v)
        d = shape[dim]
        if isinstance(d, int):
            return d
        vec = self.op("shape_of", [v], start=dim % len(shape), end=dim % len(shape) + 1)
        scalar = self.op("squeeze", [vec], axes=(0,))
        return Sym(scalar, None)

    def ints(self, items: Sequence[Any]) -> Value | tuple[int, ...]:
        """A shape list: a tuple of ints when static, else an i64 vector value."""
        if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            return tuple(int(i) for i in items)
        parts: list[Value] = []
        for item in items:
            if isinstance(item, Deferred):
                item = item.resolve()
            if isinstance(item, int):
                parts.append(self.const(np.asarray([item], dtype=np.int64)))
            elif isinstance(item, Sym | Value):
                v = item.value if isinstance(item, Sym) else item
                v = self.cast(v, DType.INT64)
                rank = self.rank(v)
                parts.append(self.op("unsqueeze", [v], axes=(0,)) if rank == 0 else v)
            else:
                raise Unsupported(f"cannot use {type(item).__name__} in a shape")
        if len(parts) == 1:
            return parts[0]
        return self.op("concat", parts, axis=0)


@gc_paused
def lower_capture(capture: Capture, *, weights: bool = True,
                  copy_weights: bool = False) -> tuple[Model, LoweringStats]:
    """Lower every captured graph into one irbridge Model. The model's parameters are
    shared with the IR unless copy_weights=True (see `_util.make_tensor`)."""
    lowerer = ModelLowerer(capture, weights=weights, copy_weights=copy_weights)
    return lowerer.lower(), lowerer.stats


__all__ = ["Deferred", "Emitter", "GraphLowerer", "LoweringStats", "ModelLowerer", "Sym",
           "Unsupported", "example_value", "lower_capture"]
