"""Lean ONNX: a clean-up pass over the ModelProto the exporter built.

`optimize(proto)` rewrites the main graph in place, keeping its meaning (the values the
graph outputs are the same, up to float rounding where a fold reorders arithmetic):

* **Constant nodes become initializers** (a Constant is a node that runtimes and
  compilers see and schedule; an initializer is not).
* **Constant folding**: a default-domain node whose inputs are all initializers is run
  once, with onnx's reference evaluator, and replaced by its results, when that does not
  make the file bigger (the result is small, or the inputs it reads die with the node):
  the weight slices of a fused q/k/v projection, the transposed weight of a linear layer,
  a reshape of a parameter.
* **No-op removal**: Identity, a Transpose with the identity permutation, two
  Transposes in a row (composed into one or none), a Reshape feeding a Reshape.
* **Shared initializers**: initializers with the same type, shape and bytes become one.
* **BatchNormalization folded into the Conv before it** (only with
  `fold_batch_norm=True`: the file is then for inference with the running statistics;
  the result differs from the unfolded graph by float rounding).
* **Zero biases dropped**: a Conv, ConvTranspose or Gemm bias initializer whose elements
  are all zero (as a folded BatchNormalization with fresh statistics leaves) is removed
  from the node, which then does not add it element by element at run time.
* Nodes and initializers nothing reads any more are dropped.

Provenance survives: surviving nodes keep their metadata_props; the group metadata of a
multi-node lowering (`irbridge.attrs`, `irbridge.inputs`, `irbridge.outputs`, which
`import_onnx` uses to rebuild the neutral op) moves to the group's first surviving node,
and value names it lists follow the renames made here. A group whose inputs a fold
consumed (a linear layer whose weight is now stored transposed) imports as its ONNX ops.

Names read inside subgraphs (If/Loop bodies reading outer values) are never renamed or
removed. Only the main graph is rewritten.
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, numpy_helper

from irbridge.converters.onnx._common import META_ATTRS, META_INPUTS, META_NODE, META_OUTPUTS
from irbridge.converters.onnx._stream import pending, streamable

FOLD_SMALL_BYTES = 1 << 20
"""A folded result up to this size is kept even when its inputs stay (a shape, a scalar)."""

FOLD_MAX_BYTES = 1 << 30
"""Never fold a result larger than this (time and memory of the reference evaluator)."""

KEEP_GROUP_INPUT_BYTES = 4096
"""A folded-away initializer a lowering group names as input is kept up to this size."""

SHARE_MAX_BYTES = 1 << 20
"""Initializers up to this size are compared for sharing."""

SHAPE_DATA_BYTES = 4096
"""Initializers up to this size go to shape inference with their values (shapes, repeats,
pads, bounds) when a fold's result size is declared before it is computed."""

_NOT_FOLDABLE = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
    "SequenceAt", "SequenceErase", "SequenceLength", "SplitToSequence", "ConcatFromSequence",
    "Optional", "OptionalGetElement", "OptionalHasElement", "Constant", "Dropout",
}
_GROUP_KEYS = (META_ATTRS, META_INPUTS, META_OUTPUTS)
_BIAS_LAST = ("Conv", "ConvTranspose", "Gemm")
"""Ops whose optional third and last input is a bias added to every output element."""


@dataclass
class OptimizeReport:
    """What `optimize` changed (counts of nodes and initializers)."""

    nodes_before: int = 0
    nodes_after: int = 0
    constants_to_initializers: int = 0
    folded: int = 0
    noops_removed: int = 0
    batch_norms_folded: int = 0
    zero_biases_dropped: int = 0
    initializers_shared: int = 0
    dead_removed: int = 0
    skipped: list[str] = field(default_factory=list)


def optimize(proto: ModelProto, *, fold_batch_norm: bool = False,
             payloads: dict[str, Callable[[], np.ndarray]] | None = None) -> OptimizeReport:
    """Rewrite `proto`'s main graph in place (see the module docstring). `payloads`: the
    data of pending initializers (`_stream`); a large fold result is left pending too, its
    function computing it again when the file is written."""
    return _Optimizer(proto, payloads).run(fold_batch_norm)


class _Optimizer:
    def __init__(self, proto: ModelProto,
                 payloads: dict[str, Callable[[], np.ndarray]] | None = None) -> None:
        self.proto = proto
        self.payloads = payloads
        self.graph = proto.graph
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                          18)
        self.nodes: list[NodeProto | None] = list(self.graph.node)
        self.inits: dict[str, TensorProto] = {t.name: t for t in self.graph.initializer}
        self.outputs = {o.name for o in self.graph.output}
        self.inputs = {i.name for i in self.graph.input}
        self.pinned = _subgraph_reads(self.graph.node) | self.outputs
        self.renames: dict[str, str] = {}
        self.report = OptimizeReport(nodes_before=len(self.graph.node))
        self._index()

    # -- bookkeeping (reader and producer maps kept up to date by every edit) -------------
    def _index(self) -> None:
        self.readers: dict[str, list[int]] = defaultdict(list)
        self.producers: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node is not None:
                for name in node.input:
                    if name:
                        self.readers[name].append(i)
                for name in node.output:
                    if name:
                        self.producers[name] = i

    def set_input(self, index: int, slot: int, name: str) -> None:
        node = self.nodes[index]
        assert node is not None
        old = node.input[slot]
        if old:
            users = self.readers.get(old, [])
            if index in users:
                users.remove(index)
        node.input[slot] = name
        if name:
            self.readers[name].append(index)

    def rename_uses(self, old: str, new: str) -> None:
        """Every reader of `old` reads `new` instead (old must not be pinned)."""
        for i in list(dict.fromkeys(self.readers.get(old, []))):
            node = self.nodes[i]
            if node is None:
                continue
            for k, name in enumerate(node.input):
                if name == old:
                    self.set_input(i, k, new)
        self.renames[old] = new

    def remove(self, index: int) -> None:
        node = self.nodes[index]
        if node is None:
            return
        self._hand_over_group(index, node)
        for name in node.input:
            users = self.readers.get(name)
            if users and index in users:
                users.remove(index)
        for name in node.output:
            if self.producers.get(name) == index:
                del self.producers[name]
        self.nodes[index] = None

    def _hand_over_group(self, index: int, node: NodeProto) -> None:
        """Move a lowering's group metadata to the group's next surviving node."""
        props = {p.key: p.value for p in node.metadata_props}
        if not any(k in props for k in _GROUP_KEYS) or META_NODE not in props:
            return
        key = props[META_NODE]
        for other in self.nodes[index + 1:]:
            if other is None:
                continue
            theirs = {p.key: p.value for p in other.metadata_props}
            if theirs.get(META_NODE) != key:
                return
            for k in _GROUP_KEYS:
                if k in props and k not in theirs:
                    prop = other.metadata_props.add()
                    prop.key, prop.value = k, props[k]
            return

    def add_initializer(self, array: np.ndarray, name: str) -> None:
        tensor = numpy_helper.from_array(array, name)  # tobytes() makes it C-ordered
        self.inits[name] = tensor

    # -- passes ----------------------------------------------------------------------------
    def run(self, fold_batch_norm: bool) -> OptimizeReport:
        self.constants_to_initializers()
        self.fold_constants()
        if fold_batch_norm:
            self.fold_batch_norms()
            self.fold_constants()
        self.drop_zero_biases()
        self.remove_noops()
        self.share_initializers()
        self.remove_dead()
        self.write_back()
        return self.report

    def constants_to_initializers(self) -> None:
        for i, node in enumerate(self.nodes):
            if node is None or node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                continue
            out = node.output[0]
            if out in self.outputs or out in self.inits:
                continue
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is None or len(node.attribute) != 1:
                continue
            tensor = TensorProto()
            tensor.CopyFrom(attr.t)
            tensor.name = out
            self.inits[out] = tensor
            self.remove(i)
            self.report.constants_to_initializers += 1

    def _value(self, name: str) -> np.ndarray:
        return self._resolver(name)()

    def _resolver(self, name: str) -> Callable[[], np.ndarray]:
        """A function giving an initializer's value: its payload when pending, else the
        array read now (small: pending ones are the large ones)."""
        if self.payloads is not None and name in self.payloads:
            return self.payloads[name]
        array = numpy_helper.to_array(self.inits[name])
        return lambda: array

    def fold_constants(self) -> None:

        for i, node in enumerate(self.nodes):
            if node is None or node.domain not in ("", "ai.onnx") \
                    or node.op_type in _NOT_FOLDABLE or not node.input \
                    or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                           for a in node.attribute):
                continue
            names = list(node.input)
            if not all(n == "" or n in self.inits for n in names) or not any(names):
                continue
            if any(o in self.outputs for o in node.output if o):
                continue
            in_bytes = {n: _nbytes(self.inits[n]) for n in names if n}
            dying = sum(b for n, b in in_bytes.items()
                        if n not in self.pinned and n not in self.inputs
                        and all(r == i for r in self.readers.get(n, [])))
            # the bytes the result will take, from ONNX shape inference, before it is
            # computed: a 150-byte file's Expand of a 1-element weight to [40000, 40000]
            # must not make the exporter allocate 6 GB to find out it is too big to keep
            declared = self._declared_bytes(node, names)
            if declared is None or declared > FOLD_MAX_BYTES \
                    or (declared > FOLD_SMALL_BYTES and declared > dying):
                continue
            try:
                resolvers = {n: self._resolver(n) for n in names if n}
                results = _evaluate(node, self.opset, resolvers)
            except Exception as exc:  # a node the evaluator cannot run stays as it is
                self.report.skipped.append(f"{node.op_type} {node.name}: {exc}"[:200])
                continue
            out_bytes = sum(np.asarray(r).nbytes for r in results)
            if out_bytes > FOLD_MAX_BYTES or (out_bytes > FOLD_SMALL_BYTES
                                              and out_bytes > dying):
                continue
            source = next((n for n in names if n), "")
            for k, (name, result) in enumerate(zip(node.output, results, strict=False)):
                if not name:
                    continue
                store = name
                if name not in self.pinned:
                    # named after the weight it was folded from (the node's own output
                    # name is an exporter-made label)
                    store = self._fresh(f"{source}.{node.op_type.lower()}"
                                        + (f"{k}" if len(node.output) > 1 else ""))
                result = np.asarray(result)
                if self.payloads is not None and streamable(result):
                    # left pending: computed again, alone, when the file is written
                    frozen = NodeProto()
                    frozen.CopyFrom(node)
                    self.inits[store] = pending(store, result.shape, result.dtype)
                    self.payloads[store] = functools.partial(_evaluate_one, frozen,
                                                             self.opset, resolvers, k)
                else:
                    self.add_initializer(result, store)
                self.inits[store].doc_string = (
                    f"folded by irbridge: {node.op_type}({', '.join(names)}) of node "
                    f"{node.name}")
                if store != name:
                    self.rename_uses(name, store)
            self.remove(i)
            self.report.folded += 1

    def _declared_bytes(self, node: NodeProto, names: Sequence[str]) -> int | None:
        """The bytes of `node`'s outputs as ONNX shape inference declares them from its
        initializer inputs (their types, and the values of the small ones, which is where
        shapes, repeats and bounds live); None when an output's size is not known."""
        small: list[TensorProto] = []
        typed: list[onnx.ValueInfoProto] = []
        for name in dict.fromkeys(n for n in names if n):
            tensor = self.inits[name]
            if _nbytes(tensor) <= SHAPE_DATA_BYTES and name not in (self.payloads or {}):
                small.append(tensor)
            else:
                typed.append(onnx.helper.make_tensor_value_info(name, tensor.data_type,
                                                                list(tensor.dims)))
        outputs = [onnx.helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o]
        mini = onnx.helper.make_model(
            onnx.helper.make_graph([node], "fold", typed, outputs, small),
            opset_imports=list(self.proto.opset_import), ir_version=self.proto.ir_version)
        try:
            inferred = onnx.shape_inference.infer_shapes(mini, strict_mode=False)
        except Exception:
            return None
        total = 0
        for out in inferred.graph.output:
            t = out.type.tensor_type
            if not t.HasField("shape") or not t.elem_type:
                return None
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            if any(d < 0 for d in dims):
                return None
            try:
                itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
            except (KeyError, ValueError, TypeError):
                return None
            total += math.prod(dims) * itemsize
        return total

    def fold_batch_norms(self) -> None:
        for i, bn in enumerate(self.nodes):
            if bn is None or bn.op_type != "BatchNormalization" or len(bn.output) != 1 \
                    or len(bn.input) != 5:
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in bn.attribute}
            if attrs.get("training_mode", 0):
                continue
            src = bn.input[0]
            producer = self._producer(src)
            conv = None if producer is None else self.nodes[producer]
            if conv is None or conv.op_type != "Conv" or src in self.pinned \
                    or self.readers.get(src, []) != [i] \
                    or not all(n in self.inits for n in bn.input[1:]) \
                    or conv.input[1] not in self.inits \
                    or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in self.inits):
                continue
            w_resolver = self._resolver(conv.input[1])
            w = w_resolver()
            if w.dtype.kind != "f":
                continue
            resolvers = [self._resolver(n) for n in bn.input[1:]]
            b_resolver = (self._resolver(conv.input[2])
                          if len(conv.input) > 2 and conv.input[2] else None)
            eps = float(attrs.get("epsilon", 1e-5))
            fold = functools.partial(_fold_batch_norm, w_resolver, b_resolver, resolvers, eps,
                                     w.dtype)
            new_b = fold(bias_only=True)
            w_name = self._fresh(conv.input[1] + "_bn")
            b_name = self._fresh((conv.input[2] if len(conv.input) > 2 and conv.input[2]
                                  else conv.output[0]) + "_bn_bias")
            if self.payloads is not None and streamable(w):
                # left pending like a folded constant: computed again, alone, when the
                # file is written, so folding keeps no copy of the model's conv weights
                self.inits[w_name] = pending(w_name, w.shape, w.dtype)
                self.payloads[w_name] = fold
            else:
                self.add_initializer(fold(), w_name)
            del w
            self.add_initializer(new_b, b_name)
            assert producer is not None
            self.set_input(producer, 1, w_name)
            if len(conv.input) < 3:
                conv.input.append("")
            self.set_input(producer, 2, b_name)
            self.remove(i)
            del self.producers[conv.output[0]]
            conv.output[0] = bn.output[0]
            self.producers[conv.output[0]] = producer
            self.report.batch_norms_folded += 1

    def drop_zero_biases(self) -> None:
        for i, node in enumerate(self.nodes):
            if node is None or node.domain not in ("", "ai.onnx") \
                    or node.op_type not in _BIAS_LAST or len(node.input) != 3:
                continue
            bias = node.input[2]
            if not bias or bias not in self.inits or bias in self.inputs \
                    or bias in self.pinned or _nbytes(self.inits[bias]) > SHARE_MAX_BYTES:
                continue
            values = self._value(bias)
            if values.dtype.kind not in "fiu" or np.any(values):
                continue
            self.set_input(i, 2, "")
            del node.input[2]
            self.report.zero_biases_dropped += 1

    def _fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.inits or name in self.inputs or name in self.producers:
            k += 1
            name = f"{base}_{k}"
        return name

    def remove_noops(self) -> None:
        for i, node in enumerate(self.nodes):
            if node is None or node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type == "Identity" or (node.op_type == "Transpose"
                                             and _is_identity_perm(node)):
                self._bypass(i, node.input[0])
            elif node.op_type == "Transpose":
                self._merge_transposes(i, node)
            elif node.op_type == "Reshape":
                self._merge_reshapes(i, node)

    def _bypass(self, index: int, source: str) -> None:
        """Remove a node whose single output equals `source`."""
        node = self.nodes[index]
        assert node is not None
        out = node.output[0]
        if out in self.pinned:
            return
        self.rename_uses(out, source)
        self.remove(index)
        self.report.noops_removed += 1

    def _producer(self, name: str) -> int | None:
        return self.producers.get(name)

    def _merge_transposes(self, index: int, node: NodeProto) -> None:
        first_index = self._producer(node.input[0])
        if first_index is None:
            return
        first = self.nodes[first_index]
        assert first is not None
        if first.op_type != "Transpose" or node.input[0] in self.pinned \
                or self.readers.get(node.input[0], []) != [index]:
            return
        p1, p2 = _perm(first), _perm(node)
        if p1 is None or p2 is None or len(p1) != len(p2):
            return
        composed = [p1[k] for k in p2]
        if composed == list(range(len(composed))) and node.output[0] not in self.pinned:
            self._bypass(index, first.input[0])
        else:
            del node.attribute[:]
            node.attribute.append(onnx.helper.make_attribute("perm", composed))
            self.set_input(index, 0, first.input[0])
            self.report.noops_removed += 1
        self.remove(first_index)

    def _merge_reshapes(self, index: int, node: NodeProto) -> None:
        shape_name = node.input[1] if len(node.input) > 1 else ""
        if shape_name not in self.inits:
            return
        shape = self._value(shape_name)
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        if 0 in shape.tolist() and not allowzero:
            return  # 0 copies a dim of the input: it depends on what feeds it
        first_index = self._producer(node.input[0])
        if first_index is None:
            return
        first = self.nodes[first_index]
        assert first is not None
        if first.op_type != "Reshape" or node.input[0] in self.pinned \
                or self.readers.get(node.input[0], []) != [index]:
            return
        self.set_input(index, 0, first.input[0])
        self.remove(first_index)
        self.report.noops_removed += 1

    def share_initializers(self) -> None:
        """Same type, shape and bytes: one initializer. Up to SHARE_MAX_BYTES each (the
        constants lowerings repeat; the IR's own weights are one tensor per name already,
        and reading a large payload out of protobuf copies it)."""
        groups: dict[tuple[int, tuple[int, ...], int], list[str]] = defaultdict(list)
        for name, t in self.inits.items():
            if t.data_location == TensorProto.EXTERNAL or _nbytes(t) > SHARE_MAX_BYTES:
                continue
            groups[(t.data_type, tuple(t.dims), _nbytes(t))].append(name)
        for names in groups.values():
            if len(names) < 2:
                continue
            seen: dict[bytes, str] = {}
            for name in names:
                key = _payload(self.inits[name])
                keep = seen.get(key)
                if keep is None:
                    seen[key] = name
                    continue
                if name in self.pinned or name in self.inputs:
                    continue
                self.rename_uses(name, keep)
                del self.inits[name]
                self.report.initializers_shared += 1

    def remove_dead(self) -> None:
        live = set(self.pinned) | self._group_inputs()
        for i in range(len(self.nodes) - 1, -1, -1):
            node = self.nodes[i]
            if node is None:
                continue
            if not any(o and o in live for o in node.output):
                self.remove(i)
                self.report.dead_removed += 1
                continue
            live.update(n for n in node.input if n)
        for name in list(self.inits):
            if name not in live:
                del self.inits[name]
                if self.payloads is not None:
                    self.payloads.pop(name, None)

    def _group_inputs(self) -> set[str]:
        """Small initializers a surviving lowering group lists as its inputs: kept, so
        that `import_onnx` can still rebuild the neutral op (a large one is not kept: a
        weight folded into another form would be stored twice)."""
        keep: set[str] = set()
        for node in self.nodes:
            if node is None:
                continue
            for prop in node.metadata_props:
                if prop.key != META_INPUTS:
                    continue
                try:
                    names = json.loads(prop.value)
                except ValueError:
                    continue
                for name in names if isinstance(names, list) else ():
                    if isinstance(name, str) and name in self.inits \
                            and _nbytes(self.inits[name]) <= KEEP_GROUP_INPUT_BYTES:
                        keep.add(name)
        return keep

    def write_back(self) -> None:
        nodes = [n for n in self.nodes if n is not None]
        if self.renames:
            for node in nodes:
                _rename_group_meta(node, self._final)
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        # initializers: drop the dead ones and append the new ones in place (re-adding the
        # kept ones would copy every weight)
        present: set[str] = set()
        for k in range(len(self.graph.initializer) - 1, -1, -1):
            name = self.graph.initializer[k].name
            if name in self.inits and self.inits[name] is self.graph.initializer[k]:
                present.add(name)
            else:
                del self.graph.initializer[k]
        for name, tensor in self.inits.items():
            if name not in present:
                self.graph.initializer.append(tensor)
        self.report.nodes_after = len(nodes)

    def _final(self, name: str) -> str:
        seen = set()
        while name in self.renames and name not in seen:
            seen.add(name)
            name = self.renames[name]
        return name


def _evaluate(node: NodeProto, opset: int,
              resolvers: dict[str, Callable[[], np.ndarray]]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    session = ReferenceEvaluator(node, opsets={"": opset})
    # IEEE results (log(0) = -inf, a NaN cast to an integer) are the values a runtime
    # computes too, not problems to print (numpy would warn on the user's terminal)
    with np.errstate(all="ignore"):
        return list(session.run(None, {n: r() for n, r in resolvers.items()}))


def _evaluate_one(node: NodeProto, opset: int,
                  resolvers: dict[str, Callable[[], np.ndarray]], index: int) -> np.ndarray:
    return np.asarray(_evaluate(node, opset, resolvers)[index])


def _rename_group_meta(node: NodeProto, final: Any) -> None:
    for prop in node.metadata_props:
        if prop.key not in (META_INPUTS, META_OUTPUTS):
            continue
        try:
            names = json.loads(prop.value)
        except ValueError:
            continue
        if isinstance(names, list):
            prop.value = json.dumps([final(n) if isinstance(n, str) and n else n
                                     for n in names])


def _subgraph_reads(nodes: Iterable[NodeProto]) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for g in graphs:
                for inner in g.node:
                    out.update(n for n in inner.input if n)
                out |= _subgraph_reads(g.node)
    return out


def _nbytes(t: TensorProto) -> int:
    """Payload bytes from the type and shape (reading raw_data would copy it)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return t.ByteSize()
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


def _payload(t: TensorProto) -> bytes:
    if t.raw_data:
        return bytes(t.raw_data)
    copy = TensorProto()
    copy.CopyFrom(t)
    copy.name = ""
    copy.ClearField("doc_string")
    return copy.SerializeToString()


def _perm(node: NodeProto) -> list[int] | None:
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return None


def _is_identity_perm(node: NodeProto) -> bool:
    perm = _perm(node)
    return perm is not None and perm == list(range(len(perm)))


def _fold_batch_norm(weight: Callable[[], np.ndarray], bias: Callable[[], np.ndarray] | None,
                     stats: Sequence[Callable[[], np.ndarray]], eps: float, dtype: np.dtype,
                     *, bias_only: bool = False) -> np.ndarray:
    """A Conv's weight (or, `bias_only`, its bias) with the inference BatchNormalization
    after it folded in: w * scale / sqrt(var + eps), (b - mean) * scale / sqrt(var + eps)
    + beta, computed in float64 and rounded once to the weight's dtype."""
    scale, beta, mean, var = (s().astype(np.float64) for s in stats)
    factor = scale / np.sqrt(var + eps)
    if bias_only:
        b = bias().astype(np.float64) if bias is not None else np.zeros_like(mean)
        return ((b - mean) * factor + beta).astype(dtype)
    w = weight()
    out = np.empty(w.shape, dtype)
    for channel in range(w.shape[0]):  # one output channel at a time: no float64 copy of w
        out[channel] = w[channel].astype(np.float64) * factor[channel]
    return out
