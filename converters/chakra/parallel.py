"""Training-step Chakra traces of a data- and pipeline-parallel job (D x P ranks).

From the forward compute nodes of `plan.plan` (one per fused kernel, the captured batch is
one rank's micro-batch):

- **backward**: one node per forward node, in reverse order, with 2 x its matmul-like FLOPs
  (input and weight gradients) plus its other FLOPs, and 2 x its bytes; it depends on its
  own forward node (saved activations) and on the backward nodes of its readers;
- **DP** (`dp` > 1): gradients are bucketed in backward order (`bucket_bytes`, 25 MiB like
  PyTorch DDP); a bucket's collective depends only on the backward nodes that produce its
  gradients, so it overlaps the rest of the backward pass. ZeRO 0: ALL_REDUCE of the bucket;
  ZeRO 1/2: REDUCE_SCATTER, the optimizer on this rank's 1/D shard, then ALL_GATHER of the
  updated shard; ZeRO 3 adds an ALL_GATHER of each node's parameter shards before its forward
  and its backward;
- **optimizer**: AdamW on the parameters a rank updates, `OPT_FLOPS` FLOPs and `OPT_BYTES`
  bytes per parameter (fp32 weight, gradient and two moments);
- **PP** (`pp` > 1): stages balanced by forward + backward latency, a 1F1B schedule over
  `microbatches` (compute nodes chained in schedule order by ctrl_deps), one send/recv pair
  per crossing tensor per micro-batch forward (activations) and backward (their gradients).

Rank r = stage * D + replica. Collectives carry `pg_name` = the communicator group of their
stage's replicas, listed in `astrasim/comm-groups.json` (groups count from 1; a group of all
ranks is written too, ASTRA-sim treats it like the default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from irbridge.analysis.roofline import Roof
from irbridge.analysis.serving import check_heads
from irbridge.converters.chakra.plan import ComputeNode, Plan, min_bytes, split_balanced
from irbridge.errors import IrbridgeError
from irbridge.ir import Node, Value
from irbridge.ops import registry
from irbridge.ops.registry import Category

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = 0, 2, 7  # Chakra CollectiveCommType
OPT_FLOPS = 12   # AdamW per parameter: two moment updates, bias-corrected step, decay
OPT_BYTES = 28   # read w, g, m, v and write w, m, v, fp32 each
BUCKET_BYTES = 25 * 1024 * 1024
MAX_RANKS = 65_536
"""Most ranks (D x T x P trace files) of one training step."""
MAX_TRACE_NODES = 4_000_000
"""Most compute nodes the traces of one training step may hold, all ranks together
(D x T x M x 2 x the forward nodes; about 1 GB of traces and a minute to write): larger
degrees are refused before anything is built instead of exhausting memory."""
NON_TRAINABLE = ("running_mean", "running_var", "num_batches_tracked", "inv_freq")
"""Buffers (batch-norm statistics, rotary embeddings' frequencies) by their PyTorch names:
the IR does not mark which model tensors are parameters."""


@dataclass
class Op:
    """One trace node of one rank (indices are positions in the rank's list)."""

    name: str
    kind: str  # comp | coll | send | recv
    deps: list[int] = field(default_factory=list)
    ctrl: list[int] = field(default_factory=list)
    flops: int = 0
    size: int = 0  # comp: tensor_size; comm: comm_size
    latency_s: float = 0.0
    phase: str = ""  # forward | backward | optimizer | dp | pp
    comm_type: int = -1
    group: int = 0
    src: int = -1
    dst: int = -1
    tag: int = 0
    ir_node_ids: list[int] = field(default_factory=list)
    microbatch: int = -1
    params: list[str] = field(default_factory=list)


@dataclass
class Layout:
    """Every rank's ops plus what tests and the README need."""

    plan: Plan
    dp: int
    pp: int
    microbatches: int
    zero: int
    ranks: list[list[Op]]
    stages: list[list[int]]
    groups: dict[int, list[int]]
    buckets: list[list[tuple[str, int]]]  # per stage: (param names, bytes) ... flattened
    grad_bytes: int  # per rank
    tp: int = 1
    split: dict[int, str] = field(default_factory=dict)  # compute node -> TP split

    @property
    def world(self) -> int:
        return self.dp * self.pp * self.tp


def trainable(value: Value) -> bool:
    t = value.tensor
    return (t is not None and t.dtype.is_float
            and not t.name.endswith(NON_TRAINABLE))


def _nbytes(value: Value) -> int:
    assert value.tensor is not None
    return math.prod(value.tensor.shape) * value.tensor.dtype.itemsize


def params_of(nodes: Sequence[ComputeNode]) -> dict[int, list[Value]]:
    """node index -> trainable parameters whose gradient that node's backward completes (a
    parameter read by several nodes belongs to the earliest: its backward runs last)."""
    owner: dict[str, tuple[int, Value]] = {}
    for n in nodes:
        for p in n.partitions:
            for m in p.nodes:
                for v in m.inputs:
                    if v is not None and trainable(v):
                        assert v.tensor is not None
                        owner.setdefault(v.tensor.name, (n.index, v))
    out: dict[int, list[Value]] = {}
    for index, value in owner.values():
        out.setdefault(index, []).append(value)
    return out


def _matmul_flops(node: ComputeNode) -> int:
    return sum(p.cost.matmul_flops for p in node.partitions)


def backward_cost(node: ComputeNode) -> tuple[int, int]:
    """(FLOPs, bytes) of a node's backward: input and weight gradients of every matmul-like
    op (2 x its forward matmul FLOPs) plus one pass of its other FLOPs; twice its bytes."""
    return 2 * _matmul_flops(node) + (node.flops - _matmul_flops(node)), 2 * node.tensor_size


class _Stage:
    """Builds the ops of one rank: stage `stage`, replica `replica`."""

    def __init__(self, ctx: _Context, stage: int, replica: int, shard: int = 0) -> None:
        self.ctx, self.stage, self.replica, self.shard = ctx, stage, replica, shard
        self.members = ctx.stages[stage]
        self.ops: list[Op] = []
        self.last_comp = -1
        self.fwd_of: dict[int, dict[int, int]] = {}
        self.colls: list[int] = []
        self.bucket_colls: dict[int, int] = {}
        self.group = ctx.dp_group(stage, shard) if ctx.dp > 1 else 0
        self.tp_group = ctx.tp_group(stage, replica) if ctx.tp > 1 else 0
        self.buckets, self.bucket_nodes = ctx.buckets[stage]
        self.closes = {owners[-1]: b for b, owners in enumerate(self.bucket_nodes)}

    def rank(self, stage: int) -> int:
        return self.ctx.rank(stage, self.replica, self.shard)

    def add(self, op: Op) -> int:
        if op.kind == "comp":
            if self.last_comp >= 0:
                op.ctrl.append(self.last_comp)
            self.last_comp = len(self.ops)
        self.ops.append(op)
        return len(self.ops) - 1

    def gather(self, i: int, phase: str, mb: int) -> list[int]:
        """ZeRO-3: all-gather the parameter shards node i reads, just before it runs."""
        ctx = self.ctx
        if ctx.zero < 3 or ctx.dp == 1:
            return []
        read = {id(v): v for p in ctx.nodes[i].partitions for m in p.nodes for v in m.inputs
                if v is not None and trainable(v)}
        total = sum(ctx.nbytes(v) for v in read.values())
        if not total:
            return []
        return [self.add(Op(f"{phase} mb{mb}: all-gather params of "
                            f"{ctx.nodes[i].main.label()}", "coll",
                            size=math.ceil(total / ctx.dp), phase="dp",
                            comm_type=ALL_GATHER, group=self.group, microbatch=mb))]

    def forward(self, mb: int) -> None:
        ctx, s = self.ctx, self.stage
        where: dict[int, int] = {}
        recv_at: dict[int, int] = {}
        for t, (value, _, a, b, _) in enumerate(ctx.transfers):
            if b == s:
                recv_at[id(value)] = self.add(Op(
                    f"recv {value.name} mb{mb} from stage {a}", "recv",
                    size=ctx.value_bytes(value), phase="pp", src=self.rank(a), dst=self.rank(s),
                    tag=_tag(t, mb, 0, ctx.microbatches), microbatch=mb))
        for i in self.members:
            n = ctx.nodes[i]
            deps = [where[d] for d in n.deps if d in where]
            deps += [recv_at[vid] for vid in n.reads if vid in recv_at]
            deps += self.gather(i, "forward", mb)
            if ctx.split.get(i) == "gather" and ctx.tp_in_bytes[i]:  # split meets whole
                deps = [self.add(Op(f"tp all-gather inputs of {n.main.label()}", "coll",
                                    deps=sorted(set(deps)), size=ctx.tp_in_bytes[i],
                                    phase="tp", comm_type=ALL_GATHER, group=self.tp_group,
                                    microbatch=mb))]
            share = ctx.share(i)
            flops, size = math.ceil(n.flops / share), ctx.bytes(math.ceil(n.tensor_size / share))
            where[i] = self.add(Op(n.main.label(), "comp", deps=sorted(set(deps)),
                                   flops=flops, size=size, latency_s=ctx.roof(flops, size),
                                   phase="forward", ir_node_ids=n.node_ids, microbatch=mb))
            if ctx.split.get(i) == "row" and ctx.tp_out_bytes[i]:  # partial sums
                where[i] = self.add(Op(f"tp all-reduce output of {n.main.label()}", "coll",
                                       deps=[where[i]], size=ctx.tp_out_bytes[i], phase="tp",
                                       comm_type=ALL_REDUCE, group=self.tp_group,
                                       microbatch=mb))
            for t, (value, src_node, a, b, _) in enumerate(ctx.transfers):
                if src_node == i and a == s:
                    self.add(Op(f"send {value.name} mb{mb} to stage {b}", "send",
                                deps=[where[i]], size=ctx.value_bytes(value), phase="pp",
                                src=self.rank(s), dst=self.rank(b),
                                tag=_tag(t, mb, 0, ctx.microbatches), microbatch=mb))
        self.fwd_of[mb] = where

    def backward(self, mb: int, last: bool) -> None:
        ctx, s = self.ctx, self.stage
        where = self.fwd_of[mb]
        done: dict[int, int] = {}
        recv_at: dict[int, list[int]] = {}
        for t, (value, src_node, a, b, _) in enumerate(ctx.transfers):
            if a == s and t in ctx.graded:  # the gradient of a tensor this stage sent
                recv_at.setdefault(src_node, []).append(self.add(Op(
                    f"recv grad {value.name} mb{mb} from stage {b}", "recv",
                    size=ctx.value_bytes(value), phase="pp", src=self.rank(b), dst=self.rank(s),
                    tag=_tag(t, mb, 1, ctx.microbatches), microbatch=mb)))
        for i in sorted(self.members, reverse=True):
            n = ctx.nodes[i]
            flops, size = ctx.bwd[i]
            deps = [where[i], where[self.members[-1]]]
            deps += [done[u] for u in ctx.users[i] if u in done]
            deps += recv_at.get(i, [])
            deps += self.gather(i, "backward", mb)
            share = ctx.share(i)
            flops, size = math.ceil(flops / share), ctx.bytes(math.ceil(size / share))
            done[i] = self.add(Op(f"backward {n.main.label()}", "comp", deps=sorted(set(deps)),
                                  flops=flops, size=size, latency_s=ctx.roof(flops, size),
                                  phase="backward", ir_node_ids=n.node_ids, microbatch=mb))
            if ctx.split.get(i) == "col" and ctx.tp_in_bytes[i]:
                # each rank holds a partial input gradient (none for graph inputs)
                done[i] = self.add(Op(f"tp all-reduce input gradient of {n.main.label()}",
                                      "coll", deps=[done[i]], size=ctx.tp_in_bytes[i],
                                      phase="tp", comm_type=ALL_REDUCE, group=self.tp_group,
                                      microbatch=mb))
            elif ctx.split.get(i) == "gather" and ctx.tp_in_bytes[i]:  # gathered inputs' grad
                done[i] = self.add(Op(f"tp reduce-scatter input gradient of "
                                      f"{n.main.label()}", "coll", deps=[done[i]],
                                      size=ctx.tp_in_bytes[i] * ctx.tp, phase="tp",
                                      comm_type=REDUCE_SCATTER, group=self.tp_group,
                                      microbatch=mb))
            for t, (value, _, a, b, readers) in enumerate(ctx.transfers):
                if b == s and i == min(readers) and t in ctx.graded:
                    self.add(Op(f"send grad {value.name} mb{mb} to stage {a}", "send",
                                deps=sorted(done[r] for r in readers),
                                size=ctx.value_bytes(value), phase="pp", src=self.rank(s),
                                dst=self.rank(a), tag=_tag(t, mb, 1, ctx.microbatches),
                                microbatch=mb))
            if last and ctx.dp > 1 and i in self.closes:
                index = self.closes[i]
                bucket = self.buckets[index]
                kind, name = ((ALL_REDUCE, "all-reduce") if ctx.zero == 0
                              else (REDUCE_SCATTER, "reduce-scatter"))
                self.bucket_colls[index] = self.add(Op(
                    f"{name} gradient bucket {index} ({len(bucket)} tensors)", "coll",
                    deps=[done[j] for j in self.bucket_nodes[index]],
                    size=sum(ctx.nbytes(v) for v in bucket), phase="dp", comm_type=kind,
                    group=self.group, params=[_name(v) for v in bucket]))
                self.colls.append(self.bucket_colls[index])

    def optimizer(self) -> None:
        ctx = self.ctx
        tail = [self.last_comp] if self.last_comp >= 0 else []
        if ctx.dp > 1 and ctx.zero >= 1:
            for index, bucket in enumerate(self.buckets):
                count = math.ceil(sum(_count(v) // ctx.divisor.get(_name(v), 1)
                                      for v in bucket) / ctx.dp)
                opt = self.add(Op(f"optimizer bucket {index} (1/{ctx.dp} shard)", "comp",
                                  deps=[self.bucket_colls[index]], flops=OPT_FLOPS * count,
                                  size=ctx.bytes(OPT_BYTES * count),
                                  latency_s=ctx.roof(OPT_FLOPS * count, OPT_BYTES * count),
                                  phase="optimizer"))
                self.add(Op(f"all-gather parameters bucket {index}", "coll", deps=[opt],
                            size=math.ceil(sum(ctx.nbytes(v) for v in bucket) / ctx.dp),
                            phase="dp", comm_type=ALL_GATHER, group=self.group))
            return
        count = sum(_count(v) // ctx.divisor.get(_name(v), 1)
                    for bucket in self.buckets for v in bucket)
        if count:
            self.add(Op("optimizer", "comp", deps=sorted(set(self.colls + tail)),
                        flops=OPT_FLOPS * count, size=ctx.bytes(OPT_BYTES * count),
                        latency_s=ctx.roof(OPT_FLOPS * count, OPT_BYTES * count),
                        phase="optimizer"))

    def build(self) -> list[Op]:
        ctx = self.ctx
        for kind, mb in schedule(self.stage, ctx.pp, ctx.microbatches):
            if kind == "F":
                self.forward(mb)
            else:
                self.backward(mb, last=mb == ctx.microbatches - 1)
        self.optimizer()
        return self.ops


@dataclass
class _Context:
    plan: Plan
    dp: int
    pp: int
    microbatches: int
    zero: int
    nodes: list[ComputeNode]
    stages: list[list[int]]
    bwd: dict[int, tuple[int, int]]
    users: dict[int, set[int]]
    transfers: list[tuple[Value, int, int, int, set[int]]]
    buckets: list[tuple[list[list[Value]], list[list[int]]]]
    tp: int = 1
    split: dict[int, str] = field(default_factory=dict)  # node -> col|row|split|gather|rep
    sharded: set[int] = field(default_factory=set)  # id(value) of values split over TP
    divisor: dict[str, int] = field(default_factory=dict)  # param -> TP ways it is split
    graded: set[int] = field(default_factory=set)  # transfers whose gradient flows back

    tp_in_bytes: dict[int, int] = field(default_factory=dict)
    tp_out_bytes: dict[int, int] = field(default_factory=dict)

    def value_bytes(self, value: Value) -> int:
        full = _value_bytes(value)
        return math.ceil(full / self.tp) if id(value) in self.sharded else full

    def share(self, i: int) -> int:
        """How many TP ranks share node i's work (1: every TP rank runs all of it)."""
        return self.tp if self.split.get(i, "rep") in ("col", "row", "split") else 1

    def nbytes(self, value: Value) -> int:
        return math.ceil(_nbytes(value) / self.divisor.get(_name(value), 1))

    def bytes(self, size: int) -> int:
        return max(size, min_bytes(self.plan.mapping.bandwidth))

    def rank(self, stage: int, replica: int, shard: int) -> int:
        return (stage * self.dp + replica) * self.tp + shard

    def dp_group(self, stage: int, shard: int) -> int:
        return 1 + stage * self.tp + shard

    def tp_group(self, stage: int, replica: int) -> int:
        return 1 + self.pp * self.tp + stage * self.dp + replica

    def groups(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for s in range(self.pp):
            for t in range(self.tp if self.dp > 1 else 0):
                out[self.dp_group(s, t)] = [self.rank(s, d, t) for d in range(self.dp)]
            for d in range(self.dp if self.tp > 1 else 0):
                out[self.tp_group(s, d)] = [self.rank(s, d, t) for t in range(self.tp)]
        return out

    def roof(self, flops: int, size: int) -> float:
        return max(flops / self.plan.mapping.peak,
                   self.bytes(size) / self.plan.mapping.bandwidth)


def _buckets(members: list[int], owned: dict[int, list[Value]], cap: int
             ) -> tuple[list[list[Value]], list[list[int]]]:
    """Gradient buckets of one stage in backward order, and the nodes producing each."""
    buckets: list[list[Value]] = []
    owners: list[list[int]] = []
    current: list[Value] = []
    nodes: list[int] = []
    size = 0
    for i in sorted(members, reverse=True):
        if not owned.get(i):
            continue
        current += owned[i]
        nodes.append(i)
        size += sum(_nbytes(v) for v in owned[i])
        if size >= cap:
            buckets.append(current)
            owners.append(nodes)
            current, nodes, size = [], [], 0
    if current:
        buckets.append(current)
        owners.append(nodes)
    return buckets, owners


def _crossing(nodes: list[ComputeNode], stage_of: dict[int, int]
              ) -> list[tuple[Value, int, int, int, set[int]]]:
    """(value, producer node, src stage, dst stage, reader nodes on dst) per tensor that a
    later stage reads."""
    producer = {id(v): n.index for n in nodes for p in n.partitions for m in p.nodes
                for v in m.outputs}
    found: dict[tuple[int, int], tuple[Value, int, int, int, set[int]]] = {}
    for n in nodes:
        for vid, value in n.reads.items():
            a, b = stage_of[producer[vid]], stage_of[n.index]
            if a != b:
                found.setdefault((vid, b), (value, producer[vid], a, b, set()))[4].add(n.index)
    return list(found.values())


def _graded(transfers: list[tuple[Value, int, int, int, set[int]]]) -> set[int]:
    """The transfers whose gradient is sent back: float tensors computed from a trainable
    parameter. Masks and indices (bool, integer) have no gradient, nor have tensors made
    from the inputs alone (a causal mask, rotary tables): autograd sends nothing for them."""
    memo: dict[int, bool] = {}

    def weighted(root: Value) -> bool:
        stack = [root]
        while stack:  # iterative post-order over the producers (graphs can be deep)
            value = stack[-1]
            if id(value) in memo:
                stack.pop()
                continue
            if trainable(value) or value.producer is None:
                memo[id(value)] = trainable(value)
                stack.pop()
                continue
            ins = [v for v in value.producer.inputs if v is not None]
            todo = [v for v in ins if id(v) not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[id(value)] = any(memo[id(v)] for v in ins)
            stack.pop()
        return memo[id(root)]

    return {t for t, (value, _, _, _, _) in enumerate(transfers)
            if _is_activation(value) and weighted(value)}


def _category(op: str) -> Category | None:
    schema = registry.lookup(op)
    return schema.category if schema is not None else None


def _tensor_parallel(ctx: _Context, units: Sequence[_Unit] | None = None) -> None:
    """Megatron-style splits, from the dataflow of the compute nodes (topological order):

    - a node whose matmul-like op reads a trainable weight is **column**-parallel when its
      activation inputs are whole (output split over TP; backward all-reduces the input
      gradient) and **row**-parallel when they are split (output partial: forward
      all-reduce); a node that gathers rows of a trainable table (an embedding) is
      vocabulary-parallel, i.e. row (partial output, all-reduce);
    - a node without weights that reads a split activation runs **split** (heads or
      channels divided), unless it also reads a whole activation at least as large as the
      split one (a residual add, a layer norm's input; float tensors only: integer and bool
      indices and masks are replicated): then it **gathers** the split
      inputs first (all-gather; reduce-scatter of their gradient in the backward);
    - anything else is replicated on every TP rank.
    Split nodes run 1/T of their FLOPs and bytes; their weights' gradients are 1/T.

    `units` classifies other units than the trace's compute nodes (e.g. single kernels:
    `shard_forward`), given as (index, IR nodes, values read from other units, values
    that leave the unit)."""
    if units is None:
        units = [_Unit(n.index, [m for p in n.partitions for m in p.nodes], n.reads, n.outputs)
                 for n in ctx.nodes]
    producer = {id(v): n.index for n in units for m in n.members for v in m.outputs}
    for n in units:
        members = n.members
        weighted = [m for m in members if (cat := _category(m.op)) is not None
                    and cat.matmul_like and any(weight_of(v) is not None for v in m.inputs)]
        # a lookup: rows of a trainable table picked by integer indices (a slice or a
        # transpose of a weight feeding a matmul is that matmul's weight, not a table)
        table = [m for m in members if _category(m.op) == Category.DATA_MOVEMENT
                 and any(v is not None and trainable(v) for v in m.inputs)
                 and any(v is not None and v.type is not None and not v.type.dtype.is_float
                         for v in m.inputs)]
        reads = list(n.reads.values())
        split_in = [v for v in reads if id(v) in ctx.sharded]
        whole_in = [v for v in reads if id(v) not in ctx.sharded]
        if weighted or table:
            # Row-parallel when what the matmul itself multiplies is split (an epilogue
            # reading a split tensor does not make it so).
            split_mm = any(_reads_split(m, n.index, producer, ctx.sharded) for m in weighted)
            kind = "row" if (split_mm or (table and not weighted)) else "col"
            for m in weighted + table:
                for v in m.inputs:
                    if (w := weight_of(v)) is not None:
                        ctx.divisor[_name(w)] = ctx.tp
        elif split_in:
            largest = max(_value_bytes(v) for v in split_in) / ctx.tp
            kind = "gather" if any(_value_bytes(v) >= largest * ctx.tp and producer.get(id(v))
                                   is not None and _is_activation(v) for v in whole_in) \
                else "split"
        else:
            kind = "rep"
        ctx.split[n.index] = kind
        if kind in ("col", "split"):
            ctx.sharded.update(id(v) for v in n.outputs)
        ctx.tp_in_bytes[n.index] = sum(
            math.ceil(_value_bytes(v) / ctx.tp) if kind == "gather" else _value_bytes(v)
            for v in (split_in if kind == "gather" else reads))
        # A row-parallel unit all-reduces what its matmul (or lookup) makes: the partial sums,
        # before any epilogue; other units' outputs are what leaves them.
        made = [v for m in weighted + table for v in m.outputs] if kind == "row" else n.outputs
        ctx.tp_out_bytes[n.index] = sum(_value_bytes(v) for v in made)


@dataclass
class _Unit:
    """What the tensor-parallel rules look at: a compute node of a trace, or one kernel."""

    index: int
    members: list[Node]
    reads: dict[int, Value]  # id(value) -> value produced by another unit
    outputs: list[Value]  # values another unit (or the graph's caller) reads


@dataclass(frozen=True)
class ShardedKernel:
    """One kernel of a forward pass split over `tp` ranks by the rules of the traces."""

    roof: Roof
    share: int  # TP ranks dividing its FLOPs and bytes (1: every rank runs all of it)
    gather_bytes: int  # all-gather of its split inputs before it (bytes of one rank's shard)
    reduce_bytes: int  # all-reduce of its partial output after it (bytes)


def shard_forward(plan: Plan, tp: int) -> tuple[list[ShardedKernel], dict[str, int]]:
    """The forward pass of `plan`, kernel by kernel, split `tp` ways with the Megatron-style
    rules of `_tensor_parallel`, and the parameters (by tensor name) split -> ways. Kernels,
    not the trace's compute nodes (which fold zero-FLOP kernels into their neighbours), so
    each kernel's own dataflow decides its split."""
    if tp < 1:
        raise IrbridgeError(f"--tp {tp}: must be at least 1")
    roofs = [r for n in plan.nodes for r in n.roofs]
    kernel_of: dict[int, int] = {}
    for k, r in enumerate(roofs):
        for m in r.partition.nodes:
            kernel_of[id(m)] = k

    def source(value: Value) -> Value:
        """The kernel output a value aliases (through views and other free nodes)."""
        seen = 0
        while value.producer is not None and id(value.producer) not in kernel_of \
                and value.producer.inputs and value.producer.inputs[0] is not None \
                and seen < 10_000:
            value = value.producer.inputs[0]
            seen += 1
        return value

    units = [_Unit(k, list(r.partition.nodes), {}, []) for k, r in enumerate(roofs)]
    leaving: set[int] = {id(source(v)) for g in plan.model.graphs for v in g.outputs}
    for unit in units:
        for m in unit.members:
            for v in m.inputs:
                if v is None:
                    continue
                root = source(v)
                owner = kernel_of.get(id(root.producer)) if root.producer is not None else None
                if owner is not None and owner != unit.index:
                    unit.reads[id(root)] = root
                    leaving.add(id(root))
    for unit in units:
        unit.outputs = [v for m in unit.members for v in m.outputs if id(v) in leaving]
    ctx = _Context(plan, 1, 1, 1, 0, plan.nodes, [], {}, {}, [], [], tp=tp)
    if tp > 1:
        _tensor_parallel(ctx, units)
    out = []
    for k, r in enumerate(roofs):
        kind = ctx.split.get(k, "rep")
        out.append(ShardedKernel(r, ctx.share(k),
                                 ctx.tp_in_bytes.get(k, 0) if kind == "gather" else 0,
                                 ctx.tp_out_bytes.get(k, 0) if kind == "row" else 0))
    return out, dict(ctx.divisor)


def _check_splits(ctx: _Context) -> None:
    """Refuse a TP degree the split nodes cannot take: attention heads (query and KV)
    split evenly, as the serving analysis requires (`check_heads`), and no weight split
    along a dimension with fewer rows than ranks (a 64-channel conv over 128 ranks)."""
    for n in ctx.nodes:
        kind = ctx.split.get(n.index, "rep")
        if kind == "rep":
            continue
        for m in (m for p in n.partitions for m in p.nodes):
            category = _category(m.op)
            if category is None or not category.matmul_like:
                continue
            shapes = [v.type.shape if v is not None and v.type is not None else None
                      for v in m.inputs[:2]]
            unweighted = all(weight_of(v) is None for v in m.inputs)
            if category == Category.ATTENTION or (unweighted and all(
                    shape is not None and len(shape) >= 4 for shape in shapes)):
                # attention, or a product of two activations [B, H, ., .] (its
                # decomposed form): dim -3 is the heads
                q, k = shapes
                if q is not None and k is not None and len(q) >= 3 and len(k) >= 3 \
                        and isinstance(q[-3], int) and isinstance(k[-3], int):
                    check_heads(q[-3], k[-3], ctx.tp, n.main.label())
                continue
            if kind not in ("col", "row") or not m.outputs or shapes[0] is None:
                continue
            # the split dimension: output features (column), input features (row)
            across = m.outputs[0].type.shape if kind == "col" and m.outputs[0].type else \
                shapes[0]
            for w in m.inputs:
                param = weight_of(w)
                if w is None or param is None or w.type is None or w.type.shape is None:
                    continue
                shape = w.type.shape
                dims = [d for d in shape[:2] if isinstance(d, int) and across
                        and d in across[1:]]
                if len(shape) >= 2 and dims and min(dims) < ctx.tp:
                    raise IrbridgeError(
                        f"--tp {ctx.tp}: {n.main.label()} splits {_name(param)} "
                        f"{list(shape)} {ctx.tp} ways along a dimension of "
                        f"{min(dims)}; use --tp {min(dims)} or less")


def layout(plan: Plan, *, dp: int = 1, pp: int = 1, tp: int = 1, microbatches: int = 1,
           zero: int = 0, bucket_bytes: int = BUCKET_BYTES) -> Layout:
    """Every rank's ops of one training step (see the module docstring)."""
    for option, value in (("--dp", dp), ("--pp", pp), ("--tp", tp),
                          ("--microbatches", microbatches)):
        if value < 1:
            raise IrbridgeError(f"{option} {value}: must be at least 1")
    if zero not in (0, 1, 2, 3):
        raise IrbridgeError(f"--zero {zero}: one of 0, 1, 2, 3")
    nodes = plan.nodes
    if pp > len(nodes):
        raise IrbridgeError(f"--pp {pp}: the model has only {len(nodes)} compute kernel(s) to "
                            "split into pipeline stages")
    if dp * tp * pp > MAX_RANKS:
        raise IrbridgeError(f"--dp {dp} --tp {tp} --pp {pp}: {dp * tp * pp:,} ranks (at most "
                            f"{MAX_RANKS:,})")
    # Every rank runs a forward and a backward node per node of its stage per micro-batch.
    total = dp * tp * microbatches * 2 * len(nodes)
    if total > MAX_TRACE_NODES:
        raise IrbridgeError(f"--dp {dp} --tp {tp} --pp {pp} --microbatches {microbatches}: "
                            f"the traces would hold {total:,} compute nodes (at most "
                            f"{MAX_TRACE_NODES:,}); use smaller degrees")
    ctx = _Context(plan, dp, pp, microbatches, zero, nodes, [], {}, {}, [], [], tp=tp)
    if tp > 1:
        _tensor_parallel(ctx)
        _check_splits(ctx)
    ctx.bwd = {n.index: backward_cost(n) for n in nodes}
    ctx.stages = split_balanced([n.latency_seconds + ctx.roof(*ctx.bwd[n.index])
                                 for n in nodes], pp)
    stage_of = {i: s for s, members in enumerate(ctx.stages) for i in members}
    ctx.users = {n.index: set() for n in nodes}
    for n in nodes:
        for d in n.deps:
            ctx.users[d].add(n.index)
    ctx.transfers = _crossing(nodes, stage_of)
    ctx.graded = _graded(ctx.transfers)
    owned = params_of(nodes)
    if not owned:
        raise IrbridgeError("the model has no trainable parameters (floating-point model "
                            "tensors) for a training step; weights passed as graph inputs "
                            "(StableHLO --weights-as-args) are not parameters")
    ctx.buckets = [_buckets(members, owned, bucket_bytes) for members in ctx.stages]
    groups = ctx.groups()
    ranks = [_Stage(ctx, s, d, t).build() for s in range(pp) for d in range(dp)
             for t in range(tp)]
    flat = [[(_name(v), ctx.nbytes(v)) for v in bucket] for b, _ in ctx.buckets for bucket in b]
    grad = sum(ctx.nbytes(v) for values in owned.values() for v in values)
    return Layout(plan, dp, pp, microbatches, zero, ranks, ctx.stages, groups, flat, grad,
                  tp=tp, split=dict(ctx.split))


def schedule(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards."""
    warm = min(stages - stage - 1, microbatches)
    order: list[tuple[str, int]] = [("F", mb) for mb in range(warm)]
    f, b = warm, 0
    while f < microbatches:
        order.append(("F", f))
        f += 1
        order.append(("B", b))
        b += 1
    order += [("B", mb) for mb in range(b, microbatches)]
    return order


def _tag(transfer: int, mb: int, direction: int, microbatches: int) -> int:
    return 1 + (transfer * microbatches + mb) * 2 + direction


def weight_of(value: Value | None) -> Value | None:
    """The trainable parameter `value` is, or is a view or copy of (slices, transposes,
    reshapes of one parameter: nn.MultiheadAttention's packed in_proj_weight); None for
    anything else."""
    for _ in range(16):
        if value is None or trainable(value):
            return value
        node = value.producer
        if node is None or _category(node.op) not in (Category.DATA_MOVEMENT, Category.SHAPE):
            return None
        floats = [v for v in node.inputs
                  if v is not None and v.type is not None and v.type.dtype.is_float]
        if len(floats) != 1:
            return None
        value = floats[0]
    return None


def _reads_split(node: Node, unit: int, producer: dict[int, int], sharded: set[int]) -> bool:
    """Whether a non-weight input of `node` comes from a split tensor: through the nodes of
    its own unit, and through free nodes (views) between units."""
    stack, seen = [v for v in node.inputs if v is not None and not trainable(v)], 0
    while stack and seen < 10_000:
        value = stack.pop()
        seen += 1
        if id(value) in sharded:
            return True
        owner = producer.get(id(value))
        if owner is not None and owner != unit:
            continue  # another unit's whole output
        if value.producer is not None:
            stack.extend(v for v in (value.producer.inputs if owner == unit
                                     else value.producer.inputs[:1])
                         if v is not None and not trainable(v))
    return False


def _is_activation(value: Value) -> bool:
    """A float tensor: indices, positions and masks (integers, bools) are replicated
    metadata that a split node reads whole without gathering anything."""
    return value.type is not None and value.type.dtype.is_float


def _value_bytes(value: Value) -> int:
    n = value.type.nbytes() if value.type is not None else None
    return int(n or 0)


def _name(value: Value) -> str:
    return value.tensor.name if value.tensor is not None else value.name


def _count(value: Value) -> int:
    return math.prod(value.tensor.shape) if value.tensor is not None else 0
