"""Concurrency from the real dependency DAG of partitions (or of ops, when unfused).

Edges are the dataflow between partitions: a partition depends on every partition that
produces a tensor it reads (graph links across graphs included). From that DAG:

- stages: ASAP levels; a kernel's stage is one more than the latest stage among its
  producers. Free partitions (views, constants) take no stage of their own;
- width of each stage: kernels that could run at the same time;
- critical path: the longest chain of kernels weighted by their estimated latency (or by 1
  per kernel when no latencies are given);
- maximum theoretical speedup = summed latency / critical-path latency: what unlimited
  parallel hardware could gain over running the kernels one after another.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from irbridge.analysis.partition import Partitioning
from irbridge.ir import Model, walk_nodes


@dataclass
class Concurrency:
    widths: list[int]  # kernels per stage
    kernels: int
    critical_path: list[int] = field(default_factory=list)  # partition ids, in order
    critical_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def stages(self) -> int:
        return len(self.widths)

    @property
    def max_width(self) -> int:
        return max(self.widths, default=0)

    @property
    def max_speedup(self) -> float:
        if self.critical_seconds <= 0:
            return 1.0
        return self.total_seconds / self.critical_seconds

    def as_dict(self) -> dict[str, object]:
        return {"stages": self.stages, "max_width": self.max_width, "widths": self.widths,
                "kernels": self.kernels, "critical_path": self.critical_path,
                "critical_path_kernels": len(self.critical_path),
                "critical_seconds": self.critical_seconds, "total_seconds": self.total_seconds,
                "max_speedup": self.max_speedup}


def dependencies(model: Model, partitioning: Partitioning) -> dict[int, set[int]]:
    """Partition id -> ids of the partitions it reads from."""
    of_node = partitioning.of_node
    deps: dict[int, set[int]] = {p.id: set() for p in partitioning.partitions}
    producer_of_output: dict[tuple[int, str], int] = {}
    for graph_index, graph in enumerate(model.graphs):
        for value in graph.outputs:
            if value.producer is not None and value.producer.id in of_node:
                producer_of_output[(graph_index, value.name)] = of_node[value.producer.id]
    linked: dict[tuple[int, str], int] = {}
    for link in model.links:
        source = producer_of_output.get((link.from_graph, link.from_output))
        if source is not None:
            linked[(link.to_graph, link.to_input)] = source
    for graph_index, graph in enumerate(model.graphs):
        for _, node in walk_nodes(graph):
            mine = of_node.get(node.id)
            if mine is None:
                continue
            for operand in node.inputs:
                if operand is None:
                    continue
                if operand.producer is not None:
                    theirs = of_node.get(operand.producer.id)
                else:
                    theirs = linked.get((graph_index, operand.name))
                if theirs is not None and theirs != mine:
                    deps[mine].add(theirs)
    return deps


def concurrency(model: Model, partitioning: Partitioning,
                latency: Mapping[int, float] | None = None) -> Concurrency:
    """Stages, widths and the latency-weighted critical path of the partition DAG."""
    deps = dependencies(model, partitioning)
    free = {p.id for p in partitioning.partitions if p.free}
    users: dict[int, list[int]] = {pid: [] for pid in deps}
    pending = {pid: len(ds) for pid, ds in deps.items()}
    for pid, ds in deps.items():
        for d in ds:
            users[d].append(pid)
    order: list[int] = []
    queue = deque(sorted(pid for pid, n in pending.items() if n == 0))
    while queue:
        pid = queue.popleft()
        order.append(pid)
        for user in users[pid]:
            pending[user] -= 1
            if pending[user] == 0:
                queue.append(user)
    if len(order) != len(deps):
        raise AssertionError("partition graph has a cycle")  # the partitioner prevents it
    level: dict[int, int] = {}
    finish: dict[int, float] = {}
    best_pred: dict[int, int | None] = {}
    widths: Counter[int] = Counter()
    for pid in order:
        start = 0
        t0 = 0.0
        pred = None
        for d in deps[pid]:
            start = max(start, level[d] + (0 if d in free else 1))
            if pred is None or finish[d] > t0:
                t0, pred = finish[d], d
        level[pid] = start
        weight = 0.0 if pid in free else (latency.get(pid, 0.0) if latency is not None else 1.0)
        finish[pid] = t0 + weight
        best_pred[pid] = pred
        if pid not in free:
            widths[start] += 1
    stages = [widths[i] for i in range(max(widths) + 1)] if widths else []
    stages = [w for w in stages if w]  # free partitions may leave a level empty
    path: list[int] = []
    if finish:
        end: int | None = max(reversed(order), key=lambda p: finish[p])
        while end is not None:
            if end not in free:
                path.append(end)
            end = best_pred[end]
        path.reverse()
    kernels = len(deps) - len(free)
    total = sum(latency.get(p, 0.0) for p in deps if p not in free) if latency is not None \
        else float(kernels)
    return Concurrency(stages, kernels, path, max(finish.values(), default=0.0), total)
