"""irbridge's own prediction of every rank's time for a Chakra export: a two-stream schedule
(one compute stream, one communication stream per rank, as ASTRA-sim's HardwareResource
allows) with closed-form times, to compare with what ASTRA-sim reports.

- compute node: replay `duration_micros` x 1000 ns (a 0 runs for 1 ns), roofline
  floor(max(num_ops / peak, tensor_size / bandwidth)) ns from the system config;
- send/recv of S bytes over the one-switch network: S / B + 2 L (two links), where B is the
  link bandwidth in bytes/ns and L the link latency (2 S / B + 2 L on the congestion-aware
  backend, which serializes the message on each link); the recv completes when the data
  is in;
- ring collectives of a group of D ranks, message m = S / D (all-gather: m = S, the
  per-rank shard): all-reduce 2 (D - 1) steps, reduce-scatter and all-gather D - 1 steps,
  each m / B + 2 L + E (E = the system's endpoint-delay); the reduction steps of all-reduce
  and reduce-scatter also cost 3 (D - 1) m / M in total (M = local-mem-bw: two reads and a
  write of each chunk, ASTRA-sim's localBWAware collective optimization).

Nodes run in file order on their stream once their dependencies are done (the traces chain
their compute nodes in schedule order); a collective starts when every member of its
communicator group is ready for it; a rank's time is when its last node ends.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from irbridge.converters.chakra._proto import et_def_pb2 as et
from irbridge.errors import IrbridgeError


@dataclass(frozen=True)
class System:
    peak: float  # FLOP/ns
    mem_bw: float  # bytes/ns
    roofline: bool
    endpoint_ns: float
    link_bw: float  # bytes/ns
    link_ns: float
    serialized_hops: int = 1  # congestion-aware: a message is serialized on both links


def read_trace(path: Path) -> list[et.Node]:
    """The nodes of one `.et` file (length-delimited stream, metadata first)."""
    return read_messages(path)[1]


def read_messages(path: Path) -> tuple[et.GlobalMetadata, list[et.Node]]:
    """The metadata and the nodes of one `.et` file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IrbridgeError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    pos, messages = 0, []
    while pos < len(data):
        size = shift = 0
        while True:
            if pos >= len(data):
                raise IrbridgeError(f"{path}: truncated length prefix")
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        messages.append(data[pos:pos + size])
        pos += size
    if pos != len(data) or not messages:
        raise IrbridgeError(f"{path}: not a Chakra trace (framing)")
    from google.protobuf.message import DecodeError

    try:
        return (et.GlobalMetadata.FromString(messages[0]),
                [et.Node.FromString(m) for m in messages[1:]])
    except DecodeError:
        raise IrbridgeError(f"{path}: not a Chakra trace (a message does not decode)") from None


def _attr(node: et.Node, name: str, default: float = 0) -> float:
    for a in node.attr:
        if a.name == name:
            case = a.WhichOneof("value")
            return float(getattr(a, case)) if case and not case.endswith("list") else default
    return default


def _pg(node: et.Node) -> str:
    return next((a.string_val for a in node.attr if a.name == "pg_name"), "")


def system(folder: Path, mode: str, backend: str = "unaware") -> System:
    run = json.loads((folder / "astrasim" / "run.json").read_text())
    sys_cfg = json.loads((folder / run["system"][mode]).read_text())
    net = (folder / run["network"]).read_text()

    def figure(key: str) -> float:
        match = re.search(rf"^{key}:\s*\[\s*([0-9.eE+-]+)", net, re.M)
        if match is None:
            raise IrbridgeError(f"{folder / run['network']}: no {key}")
        return float(match.group(1))

    return System(peak=sys_cfg["peak-perf"] * 1e3, mem_bw=sys_cfg["local-mem-bw"],
                  roofline=bool(sys_cfg.get("roofline-enabled", 0)),
                  endpoint_ns=float(sys_cfg.get("endpoint-delay", 0)),
                  link_bw=figure("bandwidth") * 2**30 / 1e9, link_ns=figure("latency"),
                  serialized_hops=2 if backend == "aware" else 1)


def comp_ns(node: et.Node, s: System) -> float:
    if not s.roofline:
        return node.duration_micros * 1000 if node.duration_micros else 1
    ops, size = _attr(node, "num_ops"), _attr(node, "tensor_size")
    perf = min(s.mem_bw * ops / size, s.peak)
    return math.floor(ops / perf)


def p2p_ns(size: float, s: System) -> float:
    return s.serialized_hops * size / s.link_bw + 2 * s.link_ns


def collective_ns(kind: int, size: float, ranks: int, s: System) -> float:
    d = ranks
    if d <= 1:
        return 0.0
    if kind == et.ALL_GATHER:
        return (d - 1) * (p2p_ns(size, s) + s.endpoint_ns)
    m = size / d
    step = p2p_ns(m, s) + s.endpoint_ns
    reduce = 3 * (d - 1) * m / s.mem_bw
    if kind == et.ALL_REDUCE:
        return 2 * (d - 1) * step + reduce
    if kind == et.REDUCE_SCATTER:
        return (d - 1) * step + reduce
    raise IrbridgeError(f"no closed form for collective type {kind}")


def predict(folder: Path, mode: str = "replay", backend: str = "unaware") -> dict[int, float]:
    """Rank -> predicted finishing time in ns for an export folder, for ASTRA-sim's
    congestion-unaware network (`backend` "aware": each message is serialized on both
    links of its switch path, 2 S / B + 2 L, as the congestion-aware backend does)."""
    folder = Path(folder)
    run = json.loads((folder / "astrasim" / "run.json").read_text())
    s = system(folder, mode, backend)
    ranks = int(run["npus"])
    members: dict[str, list[int]] = {"": list(range(ranks)), "0": list(range(ranks))}
    if run.get("comm_groups"):
        for key, ids in json.loads((folder / run["comm_groups"]).read_text()).items():
            members[key] = [int(i) for i in ids]
    traces = [read_trace(folder / f"{run['workload']}.{r}.et") for r in range(ranks)]
    end: list[dict[int, float]] = [{} for _ in range(ranks)]
    sent: dict[tuple[int, int, int], float] = {}  # (src, dst, tag) -> arrival
    free = [[0.0, 0.0] for _ in range(ranks)]  # compute, comm stream free at
    queues = [[[n for n in t if n.type == et.COMP_NODE],
               [n for n in t if n.type in (et.COMM_SEND_NODE, et.COMM_COLL_NODE)],
               [n for n in t if n.type == et.COMM_RECV_NODE]] for t in traces]
    seen = [dict[str, int]() for _ in range(ranks)]  # collectives issued per group
    waiting: dict[tuple[str, int], dict[int, float]] = {}  # (group, k) -> rank: ready
    progress = True
    while progress:
        progress = False
        for r in range(ranks):
            for stream in (0, 1, 2):
                queue = queues[r][stream]
                while queue:
                    node = queue[0]
                    deps = [*node.data_deps, *node.ctrl_deps]
                    if any(d not in end[r] for d in deps):
                        break
                    ready = max((end[r][d] for d in deps), default=0.0)
                    if stream == 2:
                        key = (int(_attr(node, "comm_src")), r, int(_attr(node, "comm_tag")))
                        if key not in sent:
                            break
                        end[r][node.id] = max(ready, sent[key])
                    elif node.type == et.COMM_COLL_NODE:
                        # a collective starts when every member of its group is ready
                        pg = _pg(node)
                        group = members.get(pg, members[""])
                        slot = (pg, seen[r].get(pg, 0))
                        waiting.setdefault(slot, {})[r] = max(ready, free[r][1])
                        if len(waiting[slot]) < len(group):
                            break
                        start = max(waiting[slot].values())
                        took = collective_ns(int(_attr(node, "comm_type")),
                                             _attr(node, "comm_size"), len(group), s)
                        end[r][node.id] = free[r][1] = start + took
                        seen[r][pg] = slot[1] + 1
                    else:
                        start = max(ready, free[r][stream])
                        if node.type == et.COMP_NODE:
                            took = comp_ns(node, s)
                        else:
                            took = p2p_ns(_attr(node, "comm_size"), s)
                            sent[(r, int(_attr(node, "comm_dst")),
                                  int(_attr(node, "comm_tag")))] = start + took
                        end[r][node.id] = free[r][stream] = start + took
                    queue.pop(0)
                    progress = True
    stuck = [r for r in range(ranks) if any(queues[r])]
    if stuck:
        raise IrbridgeError(f"{folder}: rank {stuck[0]} cannot finish (a recv without its "
                            "send, or a dependency cycle)")
    return {r: max(end[r].values(), default=0.0) for r in range(ranks)}
