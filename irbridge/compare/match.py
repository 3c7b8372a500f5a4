"""Node matching between two IR models of the same (or a related) network.

Algorithm, in three steps (docs/compare.md):

1. Anchors: the compute nodes (registry categories conv, matmul, attention) of both sides,
   in model order, are aligned by dynamic programming (a weighted longest common
   subsequence). A pair must share the category; it scores for equal MACs, equal output
   shape, equal normalised module path or a common parent module. Same-category nodes of
   the same module with different MACs may pair as a *changed* layer. Anchors the
   alignment left out are paired greedily when their (category, MACs, shape, path) agree.
2. Groups: every node gets a key. Where both sides carry module paths the key is the
   normalised module path; otherwise (or for a node without one, or whose module the
   other side lacks) it is its dataflow region: the latest anchor pair it depends on. Keys joined by an anchor pair are merged
   (union-find), so one op decomposed into several, or several fused into one, end up in
   one many-to-many group; a group with nodes on one side only lists unmatched nodes.
3. Values: a group's boundary outputs (used outside it, or model outputs) are paired,
   equal shape first, then in order; a pair whose shape or dtype differs is a
   disagreement, a pair whose names differ a renamed value.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from irbridge.errors import IrbridgeError
from irbridge.ir import Dim, Model, Node, Value
from irbridge.ops import registry
from irbridge.ops.registry import Category

COMPUTE = (Category.CONV, Category.MATMUL, Category.ATTENTION)
"""Categories counted as compute nodes (the matmul-like work)."""
MACS_TOLERANCE = 0.005
"""Relative MACs difference still counted as equal in a many-to-many group (issue: 0.5%);
1:1 anchor pairs compare MACs exactly."""


def normalize_path(path: str) -> str:
    """One spelling for module paths: `layer1.0.conv1`, whatever the producer wrote
    (`/layer1/layer1.0/conv1/Conv`, `L['self'].layer1[0]`, `_orig_mod.layer1.0`)."""
    text = path.strip()
    if not text:
        return ""
    if "/" in text:
        parts: list[str] = []
        for segment in (s for s in text.split("/") if s):
            prefix = ".".join(parts)
            if parts and segment.startswith(prefix + "."):
                parts = segment.split(".")
            else:
                parts.append(segment)
        text = ".".join(parts)
    text = re.sub(r"\[['\"]?([^\]'\"]+)['\"]?\]", r".\1", text)
    text = re.sub(r"^L\.self\.?|^self\.?", "", text)
    parts = [p for p in text.split(".") if p and p != "_orig_mod"]
    return ".".join(parts)


def _onnx_op_suffix(name: str) -> bool:
    last = name.rstrip("/").rsplit("/", 1)[-1]
    return bool(last) and last[0].isupper()


def node_path(node: Node) -> str:
    """The node's normalised module path; a node named like `/layer1/layer1.0/conv1/Conv`
    (ONNX from the TorchScript exporter) without a module path gets it from its name."""
    path = node.provenance.module_path
    if not path:
        name = node.provenance.source_node or node.name
        if name.startswith("/") and name.count("/") >= 2:
            path = name.rstrip("/").rsplit("/", 1)[0] if _onnx_op_suffix(name) else name
    return normalize_path(path)


@dataclass(eq=False)
class NodeRef:
    """A node with what matching needs: position in model order, path, category, MACs."""

    node: Node
    graph: int
    index: int
    path: str
    category: Category | None
    macs: int

    @property
    def op(self) -> str:
        return self.node.qualified_op

    @property
    def is_compute(self) -> bool:
        return self.category in COMPUTE

    @property
    def out_shape(self) -> tuple[Dim, ...] | None:
        first = self.node.outputs[0] if self.node.outputs else None
        return first.type.shape if first is not None and first.type is not None else None

    def describe(self) -> str:
        where = self.path or "(no module)"
        shape = ",".join("?" if d is None else str(d) for d in self.out_shape or ())
        return f"{self.op} #{self.node.id} @ {where} -> [{shape}]"


def node_refs(model: Model) -> list[NodeRef]:
    """Top-level nodes of every graph in execution order (control-flow bodies stay inside
    their node)."""
    refs: list[NodeRef] = []
    for graph_index, graph in enumerate(model.graphs):
        for node in graph.nodes:
            schema = None if node.is_opaque else registry.lookup(node.op)
            try:
                macs = registry.node_cost(node).macs if schema is not None else 0
            except IrbridgeError:
                macs = 0
            refs.append(NodeRef(node, graph_index, len(refs), node_path(node),
                                schema.category if schema is not None else None, macs))
    return refs


@dataclass
class ValuePair:
    """A boundary output of a group on each side; `diverged` is filled by numerics."""

    left: Value
    right: Value
    group: int

    @property
    def shape_equal(self) -> bool:
        lt, rt = self.left.type, self.right.type
        return lt is not None and rt is not None and lt.shape == rt.shape

    @property
    def dtype_equal(self) -> bool:
        lt, rt = self.left.type, self.right.type
        return lt is not None and rt is not None and lt.dtype == rt.dtype


@dataclass
class Group:
    """A many-to-many correspondence: nodes of the left and right side that do the same
    part of the network."""

    id: int
    left: list[NodeRef]
    right: list[NodeRef]
    kind: str = "same"  # same | changed | fused | decomposed | rewritten | left-only | right-only
    notes: list[str] = field(default_factory=list)
    values: list[ValuePair] = field(default_factory=list)

    @property
    def module(self) -> str:
        """The group's module: the most common path of its compute nodes, else of all."""
        refs = [r for r in self.left + self.right if r.is_compute and r.path] or \
            [r for r in self.left + self.right if r.path]
        if not refs:
            return ""
        return Counter(r.path for r in refs).most_common(1)[0][0]

    def ops(self, side: str) -> Counter[str]:
        return Counter(r.op for r in (self.left if side == "left" else self.right))

    @property
    def signature(self) -> str:
        """`batch_norm + conv -> conv`: the ops of each side, sorted, with counts."""
        return f"{_ops_text(self.ops('left'))} -> {_ops_text(self.ops('right'))}"


def _ops_text(ops: Counter[str]) -> str:
    if not ops:
        return "(nothing)"
    return " + ".join(op if n == 1 else f"{op} x{n}" for op, n in sorted(ops.items()))


@dataclass
class Matching:
    left: list[NodeRef]
    right: list[NodeRef]
    mode: str  # provenance | structure
    pairs: list[tuple[NodeRef, NodeRef]]
    groups: list[Group]
    matched_compute: set[int] = field(default_factory=set)  # id(node) of matched compute nodes

    def compute_counts(self, side: str) -> tuple[int, int]:
        """(matched, total) compute nodes on one side."""
        refs = [r for r in (self.left if side == "left" else self.right) if r.is_compute]
        return sum(1 for r in refs if id(r.node) in self.matched_compute), len(refs)

    def compute_match_ratio(self, side: str) -> float:
        matched, total = self.compute_counts(side)
        return matched / total if total else 1.0

    def histogram_difference(self) -> list[tuple[str, int, int]]:
        """(op, left count, right count) for every op whose counts differ."""
        left = Counter(r.op for r in self.left)
        right = Counter(r.op for r in self.right)
        return [(op, left[op], right[op]) for op in sorted(set(left) | set(right))
                if left[op] != right[op]]

    def decompositions(self) -> list[tuple[str, str, int]]:
        """(kind, signature, groups) of the fused / decomposed / rewritten groups."""
        counts = Counter((g.kind, g.signature) for g in self.groups
                         if g.kind in ("fused", "decomposed", "rewritten"))
        return [(kind, sig, n) for (kind, sig), n in counts.most_common()]

    def disagreements(self) -> list[ValuePair]:
        return [p for g in self.groups for p in g.values
                if not (p.shape_equal and p.dtype_equal)]

    def renamed(self) -> list[ValuePair]:
        return [p for g in self.groups for p in g.values if p.left.name != p.right.name]

    def group_of(self) -> dict[int, int]:
        """id(node) -> group id, both sides."""
        return {id(r.node): g.id for g in self.groups for r in g.left + g.right}


# -- step 1: anchors -------------------------------------------------------------------------

def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def _pair_score(a: NodeRef, b: NodeRef, mode: str) -> float | None:
    """How well two compute nodes correspond; None when they cannot pair."""
    if a.category != b.category:
        return None
    same_cost = a.macs == b.macs
    same_shape = a.out_shape == b.out_shape
    same_path = bool(a.path) and a.path == b.path
    if not same_cost:
        # a changed layer: same module (provenance) or same place and output (structure)
        same_input = _in_shape(a) == _in_shape(b)
        if not (same_path or (mode == "structure" and same_shape and same_input)):
            return None
    near = bool(a.path) and bool(b.path) and _parent(a.path) == _parent(b.path)
    return 4.0 * same_cost + 2.0 * same_shape + 3.0 * same_path + 1.0 * near + 0.5


def _in_shape(ref: NodeRef) -> tuple[Dim, ...] | None:
    first = ref.node.inputs[0] if ref.node.inputs else None
    return first.type.shape if first is not None and first.type is not None else None


def align_anchors(left: Sequence[NodeRef], right: Sequence[NodeRef], mode: str
                  ) -> list[tuple[NodeRef, NodeRef]]:
    """Weighted LCS of the two compute sequences, then greedy pairing of exact leftovers."""
    n, m = len(left), len(right)
    scores: list[list[float]] = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        row, above = scores[i], scores[i - 1]
        a = left[i - 1]
        for j in range(1, m + 1):
            best = max(above[j], row[j - 1])
            s = _pair_score(a, right[j - 1], mode)
            if s is not None and above[j - 1] + s > best:
                best = above[j - 1] + s
            row[j] = best
    pairs: list[tuple[NodeRef, NodeRef]] = []
    i, j = n, m
    while i > 0 and j > 0:
        s = _pair_score(left[i - 1], right[j - 1], mode)
        if s is not None and scores[i][j] == scores[i - 1][j - 1] + s:
            pairs.append((left[i - 1], right[j - 1]))
            i, j = i - 1, j - 1
        elif scores[i][j] == scores[i - 1][j]:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    used_left = {id(a) for a, _ in pairs}
    used_right = {id(b) for _, b in pairs}
    pool: dict[tuple[object, ...], list[NodeRef]] = {}
    for b in right:
        if id(b) not in used_right:
            pool.setdefault((b.category, b.macs, b.out_shape, b.path), []).append(b)
    for a in left:
        if id(a) in used_left:
            continue
        bucket = pool.get((a.category, a.macs, a.out_shape, a.path))
        if bucket:
            pairs.append((a, bucket.pop(0)))
    pairs.sort(key=lambda p: p[0].index)
    return pairs


# -- step 2: groups --------------------------------------------------------------------------

def _regions(refs: Sequence[NodeRef], anchor_index: dict[int, int]) -> dict[int, int]:
    """id(node) -> the latest anchor pair (by pair index) the node depends on, -1 if none."""
    region: dict[int, int] = {}
    of_value: dict[int, int] = {}
    for ref in refs:
        node = ref.node
        own = anchor_index.get(id(node))
        if own is not None:
            r = own
        else:
            r = max((of_value.get(id(v), -1) for v in node.inputs if v is not None), default=-1)
        region[id(node)] = r
        for out in node.outputs:
            of_value[id(out)] = r
    return region


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(self, key: tuple[str, str]) -> tuple[str, str]:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def has_provenance(refs: Sequence[NodeRef]) -> bool:
    """Whether most compute nodes (or, without any, most nodes) carry a module path."""
    sample = [r for r in refs if r.is_compute] or list(refs)
    return bool(sample) and sum(1 for r in sample if r.path) >= 0.5 * len(sample)


def match(left_model: Model, right_model: Model) -> Matching:
    """Match the nodes of two models (see the module docstring)."""
    left, right = node_refs(left_model), node_refs(right_model)
    mode = "provenance" if has_provenance(left) and has_provenance(right) else "structure"
    pairs = align_anchors([r for r in left if r.is_compute], [r for r in right if r.is_compute],
                          mode)
    left_anchor = {id(a.node): k for k, (a, _) in enumerate(pairs)}
    right_anchor = {id(b.node): k for k, (_, b) in enumerate(pairs)}
    left_region = _regions(left, left_anchor)
    right_region = _regions(right, right_anchor)

    shared = {r.path for r in left} & {r.path for r in right}

    def key(ref: NodeRef, regions: dict[int, int]) -> tuple[str, str]:
        if mode == "provenance" and ref.path and (ref.path in shared or ref.is_compute):
            return ("module", ref.path)
        return ("region", str(regions[id(ref.node)]))

    uf = _UnionFind()
    left_keys = {id(r.node): key(r, left_region) for r in left}
    right_keys = {id(r.node): key(r, right_region) for r in right}
    for a, b in pairs:
        uf.union(left_keys[id(a.node)], right_keys[id(b.node)])
    by_root: dict[tuple[str, str], Group] = {}
    order: list[Group] = []
    for side, refs, keys in (("left", left, left_keys), ("right", right, right_keys)):
        for ref in refs:
            root = uf.find(keys[id(ref.node)])
            group = by_root.get(root)
            if group is None:
                group = by_root[root] = Group(len(order), [], [])
                order.append(group)
            (group.left if side == "left" else group.right).append(ref)
    order.sort(key=lambda g: (g.left[0].index if g.left else float("inf"),
                              g.right[0].index if g.right else 0))
    for number, group in enumerate(order):
        group.id = number
    matching = Matching(left, right, mode, pairs, order)
    paired = {id(a.node): b for a, b in pairs}
    for group in order:
        _classify(group, paired, matching)
    group_of = matching.group_of()
    for group in order:
        group.values = pair_values(group, left_model, right_model, group_of)
    return matching


def _classify(group: Group, paired: dict[int, NodeRef], matching: Matching) -> None:
    """Set the group's kind and notes, and record its matched compute nodes.

    A 1:1 anchor pair of the same op whose attributes differ is a changed layer. Other
    compute nodes of the group (unpaired, or paired with other MACs or shapes) are matched
    as a whole when their MACs balance within MACS_TOLERANCE (one op decomposed into
    several, or several fused); otherwise the group is changed."""
    loose_left: list[NodeRef] = []
    loose_right: list[NodeRef] = []
    pair_notes: list[str] = []
    for a in group.left:
        b = paired.get(id(a.node))
        if b is None:
            continue
        attrs = _attr_differences(a, b)
        if attrs:
            group.kind = "changed"
            group.notes.append(f"{a.op} at {a.path or '(no module)'}: " + "; ".join(
                _shape_differences(a, b) + attrs))
        elif _shape_differences(a, b):
            loose_left.append(a)
            loose_right.append(b)
            pair_notes.append(f"{a.op} at {a.path or '(no module)'}: "
                              + "; ".join(_shape_differences(a, b)))
            continue
        matching.matched_compute.update((id(a.node), id(b.node)))
    paired_right = {id(b.node) for b in paired.values()}
    loose_left += [r for r in group.left if r.is_compute and id(r.node) not in paired]
    loose_right += [r for r in group.right if r.is_compute and id(r.node) not in paired_right]
    if loose_left and loose_right:  # e.g. attention <-> matmul + softmax + matmul
        macs_left = sum(r.macs for r in loose_left)
        macs_right = sum(r.macs for r in loose_right)
        if abs(macs_left - macs_right) <= MACS_TOLERANCE * max(macs_left, macs_right):
            matching.matched_compute.update(id(r.node) for r in loose_left + loose_right)
            loose_left, loose_right = [], []
        else:
            group.kind = "changed"
            group.notes += pair_notes or [
                f"compute differs: {_ops_text(Counter(r.op for r in loose_left))} "
                f"({macs_left:,} MACs) vs {_ops_text(Counter(r.op for r in loose_right))} "
                f"({macs_right:,} MACs)"]
    if group.kind == "changed":
        return
    if not group.right:
        group.kind = "left-only"
    elif not group.left:
        group.kind = "right-only"
    elif group.ops("left") == group.ops("right"):
        group.kind = "same"
    elif len(group.right) < len(group.left):
        group.kind = "fused"
    elif len(group.right) > len(group.left):
        group.kind = "decomposed"
    else:
        group.kind = "rewritten"
    for side, loose in (("left", loose_left), ("right", loose_right)):
        if loose:
            group.notes.append(f"unmatched compute on the {side}: "
                               + ", ".join(r.describe() for r in loose))


def _shape_differences(a: NodeRef, b: NodeRef) -> list[str]:
    problems = []
    if a.macs != b.macs:
        problems.append(f"MACs {a.macs:,} vs {b.macs:,}")
    if a.out_shape != b.out_shape:
        problems.append(f"output {_shape(a.out_shape)} vs {_shape(b.out_shape)}")
    return problems


def _attr_differences(a: NodeRef, b: NodeRef) -> list[str]:
    """Attributes (defaults resolved) and weight shapes of two nodes of the same neutral
    op that differ (a kernel size lives in the weight's shape, not in an attribute)."""
    problems: list[str] = []
    if a.node.op == b.node.op:
        for index, (wa, wb) in enumerate(zip(a.node.inputs, b.node.inputs, strict=False)):
            if wa is not None and wb is not None and wa.tensor is not None and \
                    wb.tensor is not None and wa.tensor.shape != wb.tensor.shape:
                problems.append(f"weight {index} {wa.type} vs {wb.type}")
    if a.node.op == b.node.op and not a.node.is_opaque and not b.node.is_opaque:
        schema = registry.get(a.node.op)
        try:
            left_attrs = schema.resolve_attrs(a.node.attrs, registry.node_where(a.node))
            right_attrs = schema.resolve_attrs(b.node.attrs, registry.node_where(b.node))
        except IrbridgeError:
            return problems
        for spec in sorted(schema.attrs, key=lambda s: s.name):
            name, lv, rv = spec.name, left_attrs.get(spec.name), right_attrs.get(spec.name)
            if not spec.same(lv, rv) and _attr_text(lv) != _attr_text(rv):
                problems.append(f"{name} {_attr_text(lv)} vs {_attr_text(rv)}")
    return problems


def _attr_text(value: object) -> str:
    if isinstance(value, tuple | list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def _shape(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "[?]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


# -- step 3: values --------------------------------------------------------------------------

def _boundary(refs: Sequence[NodeRef], model: Model) -> list[Value]:
    """Outputs of the group's nodes that leave the group (used elsewhere or model outputs)."""
    inside = {id(r.node) for r in refs}
    outputs = {id(v) for g in model.graphs for v in g.outputs}
    result = []
    for ref in refs:
        for value in ref.node.outputs:
            if id(value) in outputs or any(id(user) not in inside for user, _ in value.uses):
                result.append(value)
    return result


def _value_key(value: Value, group_of: dict[int, int], outputs: set[int]
               ) -> tuple[object, ...]:
    users = tuple(sorted({group_of.get(id(user), -1) for user, _ in value.uses}))
    dtype = value.type.dtype if value.type is not None else None
    shape = value.type.shape if value.type is not None else None
    return (shape, dtype, users, id(value) in outputs)


def pair_values(group: Group, left_model: Model, right_model: Model,
                group_of: dict[int, int]) -> list[ValuePair]:
    """Pair the group's boundary outputs: first by (shape, dtype, groups that use it,
    whether it is a model output), then by shape and dtype; a group of the same ops with
    one output on each side pairs them whatever their types (a disagreement)."""
    if not group.left or not group.right:
        return []
    left_out = _boundary(group.left, left_model)
    right_out = _boundary(group.right, right_model)
    outs_left = {id(v) for g in left_model.graphs for v in g.outputs}
    outs_right = {id(v) for g in right_model.graphs for v in g.outputs}
    pairs: list[ValuePair] = []
    free = list(right_out)
    keyed = [(_value_key(v, group_of, outs_right), v) for v in right_out]
    for key_of in (lambda k: k, lambda k: k[:2]):
        leftover: list[Value] = []
        for value in left_out:
            key = key_of(_value_key(value, group_of, outs_left))
            found = next((r for k, r in keyed if r in free and key_of(k) == key), None)
            if found is None:
                leftover.append(value)
                continue
            free.remove(found)
            pairs.append(ValuePair(value, found, group.id))
        left_out = leftover
    if not pairs and len(left_out) == len(free) == 1 and group.kind in ("same", "changed"):
        # each side's only output, of the same ops: a type difference is real (where the
        # ops differ, a decomposition may have moved the group's boundary instead)
        pairs.append(ValuePair(left_out[0], free[0], group.id))
    return pairs
