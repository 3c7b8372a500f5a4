"""What goes into a Chakra trace, free of protobuf: compute nodes from the analysis'
fused kernels, their dataflow, a latency-balanced pipeline split and the tensors that
cross each cut.

Granularity: one Chakra compute node per fused kernel that does arithmetic (FLOPs > 0), so
`num_ops`, `tensor_size` and the duration are exactly the roofline inputs and output of
that kernel. Kernels without FLOPs (data movement such as permute, gather, embedding;
casts; opaque nodes costed at bytes only) would be invalid compute nodes for ASTRA-sim
(`num_ops` 0), so each is folded into the next arithmetic kernel in topological order (the
last ones into the previous): its bytes and latency are added, nothing is lost. Folding
only merges neighbours of one topological order, so the node graph stays acyclic. Free
partitions (views, constants, shape arithmetic) run no kernel and become nothing.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from irbridge.analysis import Target, analyze
from irbridge.analysis.partition import Partition
from irbridge.analysis.roofline import Mapping, Roof
from irbridge.errors import IrbridgeError
from irbridge.ir import Model, Node, Value, walk_nodes

MIN_NODE_SECONDS = 1.5e-9


def min_bytes(bandwidth: float) -> int:
    """The bytes `bandwidth` moves in 1.5 ns: the least `tensor_size` of a compute node.
    ASTRA-sim's roofline mode truncates a node's time to whole nanoseconds and aborts on a
    0-ns event (EventQueue assertion `get_event_time() > current_time`), so no node may be
    faster than 1 ns; 1.5 ns keeps the truncated time at 1 ns or more."""
    return math.ceil(bandwidth * MIN_NODE_SECONDS) if bandwidth > 0 else 1


@dataclass
class ComputeNode:
    """One Chakra compute node: an arithmetic kernel plus the zero-FLOP kernels folded in."""

    index: int
    roofs: list[Roof]  # the kernels' roofline estimates, topological order
    peak: float = 0.0  # attainable FLOP/s of the target at the trace's dtype
    bandwidth: float = 0.0  # attainable memory bytes/s
    deps: set[int] = field(default_factory=set)  # indices of compute nodes it reads from
    reads: dict[int, Value] = field(default_factory=dict)  # id(value) -> value from others
    inputs: list[Value] = field(default_factory=list)  # tensors read from outside
    outputs: list[Value] = field(default_factory=list)  # tensors that leave it

    @property
    def partitions(self) -> list[Partition]:
        return [r.partition for r in self.roofs]

    @property
    def main(self) -> Partition:
        """The arithmetic kernel that names the node (the one with the most FLOPs)."""
        return max(self.partitions, key=lambda p: p.cost.flops)

    @property
    def flops(self) -> int:
        return sum(p.cost.flops for p in self.partitions)

    @property
    def tensor_size(self) -> int:
        """Bytes the roofline charges: external bytes of every kernel; never 0, which
        ASTRA-sim treats as invalid (a kernel fed only by constants: its unfused bytes),
        and at least `min_bytes` (see there)."""
        external = sum(p.external_bytes for p in self.partitions)
        unfused = sum(p.cost.bytes_read + p.cost.bytes_written for p in self.partitions)
        return max(external or unfused or 1, min_bytes(self.bandwidth))

    @property
    def compute_seconds(self) -> float:
        """FLOPs / attainable peak: the compute term ASTRA-sim's roofline mode computes."""
        return self.flops / self.peak if self.peak > 0 else 0.0

    @property
    def memory_seconds(self) -> float:
        """`tensor_size` / attainable bandwidth: ASTRA-sim's memory term."""
        return self.tensor_size / self.bandwidth if self.bandwidth > 0 else 0.0

    @property
    def latency_seconds(self) -> float:
        """The roofline of the node's totals, max(FLOPs / peak, bytes / bandwidth): what
        ASTRA-sim's roofline mode computes from `num_ops` and `tensor_size`. For a node that
        is one kernel this is the analysis' estimate of that kernel; folding a movement
        kernel into a compute-bound one overlaps the two (see `kernels_latency_seconds`)."""
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def kernels_latency_seconds(self) -> float:
        """Sum of the member kernels' own roofline latencies (the analysis' figure)."""
        return sum(r.latency_seconds for r in self.roofs)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def node_ids(self) -> list[int]:
        return [i for p in self.partitions for i in p.node_ids]


@dataclass
class Transfer:
    """A tensor produced on one rank and read on a later one: one send and one recv."""

    value: Value
    producer: int  # compute node index
    src: int
    dst: int
    tag: int

    @property
    def size(self) -> int:
        n = self.value.type.nbytes() if self.value.type is not None else None
        return int(n or 0)


@dataclass
class Plan:
    """Everything a trace writer needs, per rank."""

    model: Model
    target: Target
    dtype: str
    mapping: Mapping
    nodes: list[ComputeNode]
    stages: list[list[int]]  # rank -> compute node indices (contiguous, topological)
    transfers: list[Transfer]
    total_flops: int

    @property
    def devices(self) -> int:
        return len(self.stages)

    def stage_of(self) -> dict[int, int]:
        return {i: rank for rank, members in enumerate(self.stages) for i in members}

    def stage_latency(self, rank: int) -> float:
        """Seconds of roofline compute on `rank` (communication excluded)."""
        return sum(self.nodes[i].latency_seconds for i in self.stages[rank])


def plan(model: Model, target: Target, *, devices: int = 1, dtype: str | None = None,
         source: str = "model") -> Plan:
    """Analyse `model` on `target` (fused kernels) and lay it out on `devices` ranks."""
    if devices < 1:
        raise IrbridgeError(f"--devices {devices}: must be at least 1")
    if not model.graphs or not any(g.nodes for g in model.graphs):
        raise IrbridgeError(f"{source}: the model has no nodes to trace")
    ids: set[int] = set()
    for _, node in model.all_nodes():
        if node.id in ids:
            raise IrbridgeError(f"{source}: node id {node.id} is used twice; ids must be "
                                "unique across the model", hint="run `irbridge validate`")
        ids.add(node.id)
    result = analyze(model, [target], dtype=dtype, strategies=("fused",))
    run = result.runs[0]
    costs = run.costs
    unshaped = costs.uncosted + costs.partial + costs.errors
    if unshaped:
        first = unshaped[0].node
        raise IrbridgeError(
            f"{source}: {len(unshaped)} node(s) have no static shapes (first: #{first.id} "
            f"{first.qualified_op}); a Chakra trace needs every FLOP and byte",
            hint="bind its symbolic dims with --bind NAME=SIZE, or capture with static input "
                 "shapes")
    mapping = run.mappings[0]
    kernels = [r for r in mapping.estimates if not r.partition.free]
    order, reads = _kernel_order(model, kernels, run.partitioning.of_node)
    nodes = _fold(order, source)
    for n in nodes:
        n.peak, n.bandwidth = mapping.peak, mapping.bandwidth
    _wire(nodes, reads)
    if devices > len(nodes):
        raise IrbridgeError(f"--devices {devices}: {source} has only {len(nodes)} compute "
                            f"kernel(s) to split into pipeline stages")
    stages = split_balanced([n.latency_seconds for n in nodes], devices)
    transfers = _transfers(nodes, stages)
    return Plan(model, mapping.target, mapping.dtype, mapping, nodes, stages, transfers,
                costs.total.flops)


# -- kernel dataflow ----------------------------------------------------------------------------
def _linked_inputs(model: Model) -> dict[int, Value]:
    """id(graph input) -> the earlier graph's output that feeds it (GraphLinks)."""
    fed: dict[int, Value] = {}
    for link in model.links:
        source = model.graphs[link.from_graph].values.get(link.from_output)
        target = model.graphs[link.to_graph].values.get(link.to_input)
        if source is not None and target is not None:
            fed[id(target)] = source
    return fed


def _member_reads(node: Node) -> Iterable[Value]:
    """Values a node reads, its control-flow bodies' reads of enclosing values included."""
    yield from (v for v in node.inputs if v is not None)
    for sub in node.subgraphs():
        for _, inner in walk_nodes(sub):
            yield from (v for v in inner.inputs if v is not None)


def _kernel_order(model: Model, kernels: Sequence[Roof], of_node: dict[int, int]
                  ) -> tuple[list[Roof], dict[int, dict[int, tuple[Value, int]]]]:
    """Kernels in a topological order of their dataflow, and for each kernel (partition
    id) the values it reads from other kernels: id(value) -> (value, producer kernel id).
    Views, constants and shape arithmetic (free partitions) are looked through."""
    by_id = {r.partition.id: r for r in kernels}
    fed = _linked_inputs(model)
    free_nodes = {id(n): n for _, n in model.all_nodes() if of_node.get(n.id) not in by_id}

    def producers(value: Value, seen: set[int]) -> Iterable[tuple[Value, int]]:
        """(value, kernel id) pairs behind `value`: its own producer kernel, or through
        free nodes and graph links the kernels those read."""
        while id(value) in fed:
            value = fed[id(value)]
        node = value.producer
        if node is None or id(value) in seen:
            return
        seen.add(id(value))
        kernel = of_node.get(node.id)
        if kernel in by_id:
            yield value, kernel
        elif id(node) in free_nodes:
            for v in _member_reads(node):
                yield from producers(v, seen)

    reads: dict[int, dict[int, tuple[Value, int]]] = {}
    for roof in kernels:
        part = roof.partition
        own: dict[int, tuple[Value, int]] = {}
        for member in part.nodes:
            for value in _member_reads(member):
                for v, k in producers(value, set()):
                    if k != part.id:
                        own.setdefault(id(v), (v, k))
        reads[part.id] = own
    # Kahn's algorithm; among ready kernels the earliest created (graph order) goes first.
    users: dict[int, set[int]] = {k: set() for k in by_id}
    pending = {k: 0 for k in by_id}
    for k, own in reads.items():
        for d in {p for _, p in own.values()}:
            users[d].add(k)
            pending[k] += 1
    ready = [(by_id[k].partition.graph_index, k) for k, n in pending.items() if n == 0]
    heapq.heapify(ready)
    order: list[Roof] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(by_id[k])
        for u in users[k]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, (by_id[u].partition.graph_index, u))
    if len(order) != len(by_id):
        raise IrbridgeError("the fused kernels form a cycle; cannot order them for a trace")
    return order, reads


def _fold(order: Sequence[Roof], source: str) -> list[ComputeNode]:
    """Group kernels into compute nodes: zero-FLOP kernels join the next arithmetic one."""
    nodes: list[ComputeNode] = []
    pending: list[Roof] = []
    for roof in order:
        pending.append(roof)
        if roof.partition.cost.flops > 0:
            nodes.append(ComputeNode(len(nodes), pending))
            pending = []
    if not nodes:
        raise IrbridgeError(f"{source}: no kernel does arithmetic (0 FLOPs in total); "
                            "nothing to write as Chakra compute nodes")
    nodes[-1].roofs.extend(pending)
    return nodes


def _wire(nodes: list[ComputeNode], reads: dict[int, dict[int, tuple[Value, int]]]) -> None:
    """Fill each compute node's dependencies, cross-node reads, inputs and outputs."""
    node_of = {p.id: n.index for n in nodes for p in n.partitions}
    read_by: dict[int, set[int]] = {}
    for n in nodes:
        for p in n.partitions:
            for vid, (value, producer) in reads[p.id].items():
                dep = node_of[producer]
                if dep == n.index:
                    continue
                if dep > n.index:
                    raise AssertionError("folding broke the topological order")
                n.deps.add(dep)
                n.reads.setdefault(vid, value)
                read_by.setdefault(vid, set()).add(n.index)
    for n in nodes:
        members = {id(m) for p in n.partitions for m in p.nodes}
        seen: set[int] = set()
        for p in n.partitions:
            for m in p.nodes:
                for inp in m.inputs:
                    if inp is None or id(inp) in seen:
                        continue
                    seen.add(id(inp))
                    if inp.producer is None or id(inp.producer) not in members:
                        n.inputs.append(inp)
                for out in m.outputs:
                    if read_by.get(id(out), set()) - {n.index} or not out.uses:
                        n.outputs.append(out)
        if not n.outputs and n.partitions[-1].nodes:
            last = n.partitions[-1].nodes[-1]
            n.outputs.extend(last.outputs)


# -- pipeline split ----------------------------------------------------------------------------
def split_balanced(weights: Sequence[float], parts: int) -> list[list[int]]:
    """Split items (in order) into `parts` non-empty contiguous runs minimising the largest
    run's sum: the optimal linear partition, by dynamic programming in O(parts * n log n)
    (for a fixed end the best cut is where the earlier stages' optimum crosses the last
    stage's sum, found by bisection since one rises and the other falls with the cut)."""
    n = len(weights)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot split {n} items into {parts} non-empty parts")
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    # best[k][i]: smallest max-sum splitting the first i items into k+1 runs; cut[k][i]: start
    # of the last run.
    best = [[prefix[i] for i in range(n + 1)]]
    cuts = [[0] * (n + 1)]
    for k in range(1, parts):
        prev = best[-1]
        row = [math.inf] * (n + 1)
        cut = [0] * (n + 1)
        for i in range(k + 1, n + 1):
            # j in [k, i-1]: prev[j] non-decreasing, prefix[i] - prefix[j] decreasing in j.
            # The first j where the earlier runs' optimum reaches the last run's sum.
            lo, hi = k, i - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if prev[mid] >= prefix[i] - prefix[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            choice, value = lo, max(prev[lo], prefix[i] - prefix[lo])
            if lo - 1 >= k and max(prev[lo - 1], prefix[i] - prefix[lo - 1]) < value:
                choice, value = lo - 1, max(prev[lo - 1], prefix[i] - prefix[lo - 1])
            row[i] = value
            cut[i] = choice
        best.append(row)
        cuts.append(cut)
    bounds = [n]
    for k in range(parts - 1, 0, -1):
        bounds.append(cuts[k][bounds[-1]])
    bounds.append(0)
    bounds.reverse()
    return [list(range(bounds[r], bounds[r + 1])) for r in range(parts)]


def _transfers(nodes: list[ComputeNode], stages: list[list[int]]) -> list[Transfer]:
    """One transfer per (tensor, later rank that reads it), tags numbered from 1."""
    stage = {i: rank for rank, members in enumerate(stages) for i in members}
    producer_of: dict[int, int] = {}
    for n in nodes:
        for p in n.partitions:
            for m in p.nodes:
                for value in m.outputs:
                    producer_of[id(value)] = n.index
    found: dict[tuple[int, int], Transfer] = {}
    for n in nodes:
        dst = stage[n.index]
        for vid, value in n.reads.items():
            src_node = producer_of[vid]
            src = stage[src_node]
            if src != dst and (vid, dst) not in found:
                found[(vid, dst)] = Transfer(value, src_node, src, dst, len(found) + 1)
    return list(found.values())
