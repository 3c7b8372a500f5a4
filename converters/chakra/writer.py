"""Encode a `Plan` as Chakra execution traces: one `{model}.{rank}.et` file per rank, each a
varint32-length-delimited stream of a GlobalMetadata then the Nodes, written atomically.

Attribute value kinds follow what ASTRA-sim's Chakra feeder reads (it takes one oneof case
per name; any other case reads as 0): `num_ops` int64, `tensor_size` uint64,
`comm_size` int64, `comm_src` / `comm_dst` / `comm_tag` int32, `is_cpu_op` bool (false:
the feeder's default is true, which would send the node down the CPU replay path).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from irbridge import __version__
from irbridge._wire import varint
from irbridge.atomic import atomic_dir
from irbridge.converters._layers import safe_name
from irbridge.converters.chakra import configs
from irbridge.converters.chakra._proto import et_def_pb2 as et
from irbridge.converters.chakra.parallel import Layout, Op
from irbridge.converters.chakra.plan import ComputeNode, Plan, Transfer, min_bytes
from irbridge.errors import IrbridgeError
from irbridge.ir import Value, format_shape

CHAKRA_VERSION = "0.0.4"
"""GlobalMetadata.version: the Chakra schema version these traces follow."""


def duration_micros(seconds: float) -> int:
    """Roofline latency as Chakra's integer microseconds: rounded to the nearest, but at
    least 1 so that no kernel is free (the exact value is in the `latency_ns` attr)."""
    return max(1, math.floor(seconds * 1e6 + 0.5))




def _attr(name: str, **value: object) -> et.AttributeProto:
    return et.AttributeProto(name=name, **value)  # type: ignore[arg-type]


def _io(values: Sequence[Value]) -> et.IOInfo:
    """IOInfo as JSON lists: value names, shapes (`[1,64,56,56]`), dtypes (`f32`)."""
    return et.IOInfo(
        values=json.dumps([v.name for v in values]),
        shapes="[" + ",".join(format_shape(v.type.shape if v.type else None)
                              for v in values) + "]",
        types=json.dumps([v.type.dtype.short if v.type else "?" for v in values]))


def _compute(node: ComputeNode, nid: int, deps: list[int]) -> et.Node:
    main = node.main
    seconds = node.latency_seconds
    return et.Node(
        id=nid, name=main.label(), type=et.COMP_NODE, data_deps=deps,
        duration_micros=duration_micros(seconds),
        inputs=_io(node.inputs), outputs=_io(node.outputs),
        attr=[_attr("is_cpu_op", bool_val=False),
              _attr("num_ops", int64_val=node.flops),
              _attr("tensor_size", uint64_val=node.tensor_size),
              _attr("latency_ns", double_val=seconds * 1e9),
              _attr("compute_ns", double_val=node.compute_seconds * 1e9),
              _attr("memory_ns", double_val=node.memory_seconds * 1e9),
              _attr("kernels_latency_ns", double_val=node.kernels_latency_seconds * 1e9),
              _attr("bound", string_val=node.bound),
              _attr("kind", string_val=main.kind),
              _attr("partition_ids", int64_list=et.Int64List(values=[p.id for p in
                                                                       node.partitions])),
              _attr("ir_node_ids", uint64_list=et.Uint64List(values=node.node_ids))])


def _comm(t: Transfer, nid: int, deps: list[int], send: bool) -> et.Node:
    if send:
        name, kind = f"send {t.value.name} to rank {t.dst}", et.COMM_SEND_NODE
    else:
        name, kind = f"recv {t.value.name} from rank {t.src}", et.COMM_RECV_NODE
    io = _io([t.value])
    return et.Node(
        id=nid, name=name, type=kind, data_deps=deps,
        inputs=io if send else et.IOInfo(), outputs=et.IOInfo() if send else io,
        attr=[_attr("is_cpu_op", bool_val=False),
              _attr("comm_src", int32_val=t.src),
              _attr("comm_dst", int32_val=t.dst),
              _attr("comm_tag", int32_val=t.tag),
              _attr("comm_size", int64_val=t.size)])


def rank_nodes(plan: Plan, rank: int) -> list[et.Node]:
    """The nodes of one rank in a topological order: each recv just before its first
    reader, each send just after its producer."""
    out: list[et.Node] = []
    compute_id: dict[int, int] = {}
    recv_id: dict[int, int] = {}  # id(value) -> recv node id
    sends: dict[int, list[Transfer]] = {}
    recvs: dict[int, Transfer] = {}
    for t in plan.transfers:
        if t.src == rank:
            sends.setdefault(t.producer, []).append(t)
        if t.dst == rank:
            recvs[id(t.value)] = t
    for index in plan.stages[rank]:
        node = plan.nodes[index]
        deps = {compute_id[d] for d in node.deps if d in compute_id}
        for vid in node.reads:
            incoming = recvs.get(vid)
            if incoming is None:
                continue
            if vid not in recv_id:
                recv_id[vid] = len(out)
                out.append(_comm(incoming, len(out), [], send=False))
            deps.add(recv_id[vid])
        compute_id[index] = len(out)
        out.append(_compute(node, len(out), sorted(deps)))
        for t in sends.get(index, []):
            out.append(_comm(t, len(out), [compute_id[index]], send=True))
    return out


def metadata(plan: Plan, rank: int) -> et.GlobalMetadata:
    model = plan.model
    return et.GlobalMetadata(version=CHAKRA_VERSION, attr=[
        _attr("producer", string_val=f"irbridge {__version__}"),
        _attr("model", string_val=model.name or "model"),
        _attr("hardware", string_val=plan.target.name),
        _attr("dtype", string_val=plan.dtype),
        _attr("rank", int64_val=rank),
        _attr("world_size", int64_val=plan.devices),
        _attr("stage_latency_ns", double_val=plan.stage_latency(rank) * 1e9),
        _attr("kernels_latency_ns", double_val=sum(
            plan.nodes[i].kernels_latency_seconds for i in plan.stages[rank]) * 1e9),
        _attr("total_flops", int64_val=plan.total_flops),
        _attr("latency_model", string_val="roofline: max(FLOPs / peak, bytes / bandwidth) "
                                          "per compute node (fused kernels, movement "
                                          "folded in)"),
    ])


def encode(messages: Sequence[et.GlobalMetadata | et.Node]) -> bytes:
    """Length-delimited stream: varint32 size, then the message, for each message."""
    chunks = []
    for message in messages:
        data = message.SerializeToString()
        chunks.append(varint(len(data)))
        chunks.append(data)
    return b"".join(chunks)


def trace_prefix(plan: Plan) -> str:
    """`{model}` of `{model}.{rank}.et`: the model name with path-unsafe characters as _,
    a long one shortened (`safe_name`)."""
    return safe_name(plan.model.name or "model", default="model")


def idle_metadata(plan: Plan, rank: int) -> et.GlobalMetadata:
    """The metadata of a padding rank with no nodes (one-rank exports run as 2 NPUs)."""
    meta = metadata(plan, 0)
    for a in meta.attr:
        if a.name == "rank":
            a.int64_val = rank
        elif a.name == "stage_latency_ns" or a.name == "kernels_latency_ns":
            a.double_val = 0.0
    meta.attr.append(_attr("padding", string_val="idle rank: ASTRA-sim's analytical network "
                                                 "needs at least 2 NPUs"))
    return meta


def idle_trace(plan: Plan, rank: int) -> bytes:
    """A padding rank: ASTRA-sim refuses a trace without nodes ("No dependancy free nodes
    found"), so it holds one compute node of 1 FLOP and `min_bytes` (1 ns in replay, where
    a 0-duration node runs for 1 ns; 1 ns in roofline mode)."""
    idle = et.Node(id=0, name="idle (padding rank)", type=et.COMP_NODE, duration_micros=0,
                   attr=[_attr("is_cpu_op", bool_val=False), _attr("num_ops", int64_val=1),
                         _attr("tensor_size",
                               uint64_val=min_bytes(plan.mapping.bandwidth))])
    return encode([idle_metadata(plan, rank), idle])


def output_files(plan: Plan) -> dict[str, bytes]:
    """Relative path -> bytes of everything an export writes: traces, ASTRA-sim configs,
    README."""
    prefix = trace_prefix(plan)
    files = {f"{prefix}.{rank}.et": encode([metadata(plan, rank), *rank_nodes(plan, rank)])
             for rank in range(plan.devices)}
    if plan.devices == 1:
        files[f"{configs.ONE_RANK}/{prefix}.0.et"] = files[f"{prefix}.0.et"]
        files[f"{configs.ONE_RANK}/{prefix}.1.et"] = idle_trace(plan, 1)
    files.update(configs.files(prefix, plan.target, plan.dtype, plan.devices))
    files["README.md"] = configs.readme(prefix, plan.target, plan.dtype, plan.devices,
                                        comm_groups=False).encode()
    return files


def _op_node(op: Op, nid: int) -> et.Node:
    """One node of a training layout (converters/chakra/parallel.py)."""
    attr = [_attr("is_cpu_op", bool_val=False), _attr("phase", string_val=op.phase)]
    if op.microbatch >= 0:
        attr.append(_attr("microbatch", int64_val=op.microbatch))
    node = et.Node(id=nid, name=op.name, data_deps=op.deps, ctrl_deps=op.ctrl)
    if op.kind == "comp":
        node.type = et.COMP_NODE
        node.duration_micros = duration_micros(op.latency_s)
        attr += [_attr("num_ops", int64_val=op.flops),
                 _attr("tensor_size", uint64_val=max(1, op.size)),
                 _attr("latency_ns", double_val=op.latency_s * 1e9),
                 _attr("ir_node_ids", uint64_list=et.Uint64List(values=op.ir_node_ids))]
    elif op.kind == "coll":
        node.type = et.COMM_COLL_NODE
        attr += [_attr("comm_type", int64_val=op.comm_type),
                 _attr("comm_size", int64_val=op.size)]
        if op.group:
            attr.append(_attr("pg_name", string_val=str(op.group)))
        if op.params:
            attr.append(_attr("params", string_list=et.StringList(values=op.params)))
    else:
        node.type = et.COMM_SEND_NODE if op.kind == "send" else et.COMM_RECV_NODE
        attr += [_attr("comm_src", int32_val=op.src), _attr("comm_dst", int32_val=op.dst),
                 _attr("comm_tag", int32_val=op.tag), _attr("comm_size", int64_val=op.size)]
    node.attr.extend(attr)
    return node


def layout_files(lay: Layout) -> dict[str, bytes]:
    """Relative path -> bytes of a training export: one trace per rank, configs, README."""
    plan = lay.plan
    prefix = trace_prefix(plan)
    files: dict[str, bytes] = {}
    for rank, ops in enumerate(lay.ranks):
        stage, replica, shard = rank // (lay.dp * lay.tp), rank // lay.tp % lay.dp, rank % lay.tp
        compute = sum(op.latency_s for op in ops if op.kind == "comp")
        meta = et.GlobalMetadata(version=CHAKRA_VERSION, attr=[
            _attr("producer", string_val=f"irbridge {__version__}"),
            _attr("model", string_val=plan.model.name or "model"),
            _attr("hardware", string_val=plan.target.name),
            _attr("dtype", string_val=plan.dtype),
            _attr("rank", int64_val=rank), _attr("world_size", int64_val=lay.world),
            _attr("dp", int64_val=lay.dp), _attr("pp", int64_val=lay.pp),
            _attr("tp", int64_val=lay.tp), _attr("zero", int64_val=lay.zero),
            _attr("microbatches", int64_val=lay.microbatches),
            _attr("stage", int64_val=stage), _attr("replica", int64_val=replica),
            _attr("tp_rank", int64_val=shard),
            _attr("stage_latency_ns", double_val=compute * 1e9),
            _attr("total_flops", int64_val=plan.total_flops),
            _attr("gradient_bytes", int64_val=lay.grad_bytes),
            _attr("latency_model", string_val="training step: forward, backward (2x matmul "
                                              "FLOPs + other FLOPs, 2x bytes), AdamW; "
                                              "roofline per compute node")])
        files[f"{prefix}.{rank}.et"] = encode([meta, *(_op_node(op, i)
                                                       for i, op in enumerate(ops))])
    if lay.world == 1:
        files[f"{configs.ONE_RANK}/{prefix}.0.et"] = files[f"{prefix}.0.et"]
        files[f"{configs.ONE_RANK}/{prefix}.1.et"] = idle_trace(plan, 1)
    groups = dict(lay.groups)
    files.update(configs.files(prefix, plan.target, plan.dtype, lay.world, groups or None))
    notes = (f"\nOne training step: DP {lay.dp} x TP {lay.tp} x PP {lay.pp}, "
             f"{lay.microbatches} micro-batch(es) (1F1B), ZeRO {lay.zero}; rank = (stage * "
             f"{lay.dp} + replica) * {lay.tp} + tp_rank. Gradients per rank: "
             f"{lay.grad_bytes:,} bytes in {len(lay.buckets)} bucket(s).\n")
    files["README.md"] = configs.readme(prefix, plan.target, plan.dtype, lay.world,
                                        comm_groups=bool(groups), notes=notes).encode()
    return files


def write_files(files: dict[str, bytes], folder: Path) -> Path:
    """Write `files` into `folder` (replaced as a whole, atomically)."""
    try:  # atomic_dir refuses to replace a folder of files irbridge did not write
        with atomic_dir(folder) as tmp:
            for name, data in files.items():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp / name).write_bytes(data)
    except OSError as exc:
        raise IrbridgeError(f"{folder}: cannot write the traces: "
                            f"{exc.strerror or exc}") from None
    return folder


def write_plan(plan: Plan, folder: Path) -> Path:
    """Write every rank's trace and the ASTRA-sim inputs into `folder` (replaced as a
    whole, atomically)."""
    return write_files(output_files(plan), folder)


__all__ = ["CHAKRA_VERSION", "duration_micros", "encode", "metadata", "output_files", "rank_nodes",
           "trace_prefix", "varint", "write_plan"]
