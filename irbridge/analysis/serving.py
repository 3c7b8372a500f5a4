"""LLM serving figures of a phase graph (`convert --phase prefill|decode`): time to first
token, time per output token, tokens/s and memory per device, on one target, with the
weights and the KV cache split over `tp` devices.

A phase graph records its geometry in `model.metadata` (`llm.*` keys, written by
`converters/pytorch/phases.py` through `phase_metadata`). From the graph itself:

- **step time per device**: the fused roofline of every kernel (the analysis' estimate)
  divided by the TP ranks that share it, using the Megatron-style splits of the Chakra
  traces (`converters/chakra/parallel.py`, `shard_forward`, kernel by kernel: column/row-parallel matmuls,
  heads split, replicated norms); plus the TP collectives those splits need, as ring
  collectives over the target's interconnect (`interconnect_bandwidth`, both directions,
  so B = half of it each way): all-reduce of S bytes 2 (T - 1) / T x S / B, all-gather of
  T shards of s bytes (T - 1) x s / B. Link latency is not counted (a lower bound).
- prefill: TTFT = step time, throughput B x S / TTFT tokens/s; decode: TPOT = step time,
  B / TPOT tokens/s (one token per sequence per step).
- **memory per device**: weights (tensors split by TP divided by T, the rest replicated)
  plus the KV cache (KV heads split over T: ceil(H_kv / T) heads per device) at the
  analysis dtype, against the target's `memory_capacity`. Activations are not counted.
- **closed form** (decode): the bytes a step must read, weights read in full (every
  weight except tables that are only looked up, which read their rows) plus the KV cache,
  over the memory bandwidth, per device, plus the same collectives. The graph figure
  should be at or just above it; a large gap means the graph moves more than the model
  needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from irbridge.analysis.hardware import Target
from irbridge.errors import IrbridgeError
from irbridge.ir import Model, Value

PHASES = ("prefill", "decode")
_KEYS = ("phase", "batch", "tokens", "kv_len", "layers", "heads", "kv_heads", "head_dim")


@dataclass(frozen=True)
class PhaseInfo:
    """The serving step a phase graph computes."""

    phase: str
    batch: int
    tokens: int  # tokens per sequence this step processes: the prompt (prefill) or 1
    kv_len: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    def metadata(self) -> dict[str, str]:
        return {f"llm.{k}": str(getattr(self, k)) for k in _KEYS}

    @classmethod
    def of(cls, model: Model) -> PhaseInfo | None:
        """The model's phase (None when it is not a phase graph)."""
        meta = model.metadata
        if "llm.phase" not in meta:
            return None
        try:
            values: dict[str, Any] = {k: meta[f"llm.{k}"] for k in _KEYS}
            for k in _KEYS[1:]:
                values[k] = int(values[k])
        except (KeyError, ValueError) as exc:
            raise IrbridgeError(f"{model.name or 'model'}: malformed llm.* metadata "
                                f"({exc}); re-capture with convert --phase") from None
        if values["phase"] not in PHASES or min(values[k] for k in _KEYS[1:]) < 1:
            raise IrbridgeError(f"{model.name or 'model'}: malformed llm.* metadata "
                                f"(phase {values['phase']!r}, sizes must be >= 1)")
        info = cls(**values)
        info._check_graph(model)
        return info

    def _check_graph(self, model: Model) -> None:
        """The metadata must describe the graph it came with: query heads a multiple of
        the KV heads, and the cache tensors (decode: the inputs after input_ids and
        cache_position; prefill: the outputs after the logits) 2 x layers of them, each
        [batch, kv_heads, kv_len, head_dim] where the graph's dims are static. A file
        whose figures disagree is refused rather than analysed into nonsense."""
        where = f"{model.name or 'model'}: llm.* metadata"
        if self.heads % self.kv_heads:
            raise IrbridgeError(f"{where} gives {self.heads} attention heads and "
                                f"{self.kv_heads} KV heads, which do not divide them")
        if not model.graphs:
            return
        graph = model.graphs[0]
        cache = graph.inputs[2:] if self.phase == "decode" else graph.outputs[1:]
        if len(cache) != 2 * self.layers:
            raise IrbridgeError(f"{where} gives {self.layers} layers, but the graph has "
                                f"{len(cache)} KV-cache tensors (2 per layer)")
        want = (self.batch, self.kv_heads, self.kv_len, self.head_dim)
        for value in cache:
            shape = value.type.shape if value.type is not None else None
            if shape is None or len(shape) != 4 or any(
                    isinstance(d, int) and d != w for d, w in zip(shape, want, strict=True)):
                raise IrbridgeError(
                    f"{where} gives cache tensors of [batch, kv_heads, kv_len, head_dim] = "
                    f"{list(want)}, but graph value {value.name!r} is "
                    f"{value.type if value.type is not None else 'untyped'}")

    def kv_cache_bytes(self, itemsize: int, tp: int = 1) -> int:
        """K and V of every layer: 2 x layers x B x H_kv x kv_len x D x item; with TP, the
        KV heads of one device (ceil(H_kv / T))."""
        heads = math.ceil(self.kv_heads / tp)
        return 2 * self.layers * self.batch * heads * self.kv_len * self.head_dim * itemsize


def check_tp(info: PhaseInfo, tp: int, source: str = "model") -> None:
    """Megatron-style tensor parallelism gives each device heads / T query heads, and
    kv_heads / T KV heads, or one replicated KV head per group of T / kv_heads devices
    (as vLLM and Megatron do): T must divide the query heads, and T and the KV heads must
    divide one another. Anything else is refused, not costed as an even 1/T split."""
    check_heads(info.heads, info.kv_heads, tp, source)


def check_heads(heads: int, kv_heads: int, tp: int, source: str = "model") -> None:
    """`check_tp` for `heads` query and `kv_heads` KV heads (the training traces check
    each attention node of a graph with it)."""
    if tp == 1:
        return

    def fits(t: int) -> bool:
        return heads % t == 0 and (kv_heads % t == 0 or t % kv_heads == 0)

    if fits(tp):
        return
    # the valid sizes, listed when there are few to try (head counts from a file may be
    # anything: never loop over a huge one)
    ok = [t for t in range(1, min(heads, 4096) + 1) if fits(t)]
    raise IrbridgeError(
        f"--tp {tp}: {source} has {heads} attention heads and {kv_heads} KV "
        f"heads; tensor parallelism splits heads evenly, so use one of "
        f"{', '.join(map(str, ok))}{'' if heads <= 4096 else ', ...'}")


@dataclass(frozen=True)
class Serving:
    """Serving figures of one phase graph on one target."""

    target: str
    dtype: str
    info: PhaseInfo
    tp: int
    compute_seconds: float  # per device, kernels (roofline)
    comm_seconds: float  # TP collectives
    collectives: int
    weight_bytes: int  # per device
    kv_bytes: int  # per device
    capacity: float | None  # bytes per device, None when the catalog has none
    closed_form_seconds: float | None  # decode only

    @property
    def step_seconds(self) -> float:
        return self.compute_seconds + self.comm_seconds

    @property
    def tokens_per_second(self) -> float:
        per_step = self.info.batch * self.info.tokens
        return per_step / self.step_seconds if self.step_seconds > 0 else 0.0

    @property
    def memory_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.memory_bytes <= self.capacity

    def to_dict(self) -> dict[str, Any]:
        step = "ttft_seconds" if self.info.phase == "prefill" else "tpot_seconds"
        return {"target": self.target, "dtype": self.dtype, "phase": self.info.phase,
                "batch": self.info.batch, "tokens": self.info.tokens,
                "kv_len": self.info.kv_len, "tp": self.tp, step: self.step_seconds,
                "compute_seconds": self.compute_seconds, "comm_seconds": self.comm_seconds,
                "collectives": self.collectives, "tokens_per_second": self.tokens_per_second,
                "weight_bytes_per_device": self.weight_bytes,
                "kv_cache_bytes_per_device": self.kv_bytes,
                "memory_bytes_per_device": self.memory_bytes,
                "capacity_bytes": self.capacity, "fits": self.fits,
                "closed_form_seconds": self.closed_form_seconds}


def serving(model: Model, target: Target, *, dtype: str | None = None, tp: int = 1,
            source: str = "model") -> Serving:
    """Serving figures of a phase graph (see the module doc)."""
    from irbridge.analysis.binding import model_compute_dtype
    from irbridge.converters.chakra.parallel import shard_forward
    from irbridge.converters.chakra.plan import plan

    info = PhaseInfo.of(model)
    if info is None:
        raise IrbridgeError(f"{source}: not a serving-phase graph (no llm.* metadata); capture "
                            "one with `irbridge convert MODEL --phase prefill|decode`")
    if tp < 1:
        raise IrbridgeError(f"--tp {tp}: must be at least 1")
    check_tp(info, tp, source)
    link = target.interconnect_bandwidth
    if tp > 1 and link is None:
        raise IrbridgeError(f"--tp {tp}: target {target.name} has no interconnect_bandwidth "
                            "in its catalog entry; add one (GB/s, per device) to split over "
                            "devices")
    laid = plan(model, target, dtype=dtype, source=source)
    sharded, divisor = shard_forward(laid, tp)
    compute = sum(s.roof.latency_seconds / s.share for s in sharded)
    per_direction = link.value / 2 if link is not None else 0.0  # bytes/s, one way
    storage = _storage_itemsize(laid.dtype)
    # Collective sizes are the graph's float tensors: at the analysis dtype's size.
    scale = storage / _storage_itemsize(model_compute_dtype(model))
    comm, count = 0.0, 0
    for s in sharded:
        if tp > 1 and s.reduce_bytes:
            comm += 2 * (tp - 1) / tp * s.reduce_bytes * scale / per_direction
            count += 1
        if tp > 1 and s.gather_bytes:
            comm += (tp - 1) * s.gather_bytes * scale / per_direction
            count += 1
    weights, full_reads = _weights(laid, divisor, storage)
    kv = info.kv_cache_bytes(storage, tp)
    capacity = target.memory_capacity.value if target.memory_capacity is not None else None
    closed = None
    if info.phase == "decode":
        closed = (full_reads + kv) / laid.mapping.bandwidth + comm
    return Serving(target.name, laid.dtype, info, tp, compute, comm, count, weights, kv,
                   capacity, closed)


def _storage_itemsize(dtype: str) -> int:
    from irbridge.analysis.binding import COMPUTE_DTYPES

    return COMPUTE_DTYPES[dtype].itemsize


def _weights(laid: Any, divisor: dict[str, int], itemsize: int) -> tuple[int, int]:
    """(weight bytes per device, bytes of the weights a step reads in full per device), float
    weights at the analysis dtype's size. A weight read only through lookups (an embedding
    table) counts in the first, not the second."""
    from irbridge.ops.registry import input_reads

    size: dict[str, int] = {}
    full: dict[str, bool] = {}
    for _, node in laid.model.all_nodes():
        reads = None
        for i, value in enumerate(node.inputs):
            if value is None or value.tensor is None:
                continue
            name = value.tensor.name
            if name not in size:
                size[name] = math.ceil(_bytes(value, itemsize) / divisor.get(name, 1))
                full[name] = False
            if not full[name]:
                if reads is None:
                    reads = _reads(node, input_reads)
                whole = value.type.nbytes() if value.type is not None else None
                full[name] = reads is None or whole is None or reads[i] >= (whole or 0)
    return sum(size.values()), sum(n for k, n in size.items() if full[k])


def _reads(node: Any, input_reads: Any) -> list[int] | None:
    try:
        return list(input_reads(node))
    except IrbridgeError:
        return None


def _bytes(value: Value, itemsize: int) -> int:
    t = value.tensor
    assert t is not None
    count = math.prod(t.shape)
    return count * (itemsize if t.dtype.is_float else t.dtype.itemsize)


SERVING_HEADER = ("target", "tp", "step", "tok/s", "weights", "KV", "memory", "capacity",
                  "fits", "closed form", "vs closed")


def serving_rows(rows: list[Serving]) -> list[list[str]]:
    """Table rows (SERVING_HEADER) of serving figures; bytes are per device."""
    from irbridge.analysis.report import human_seconds
    from irbridge.summary import human_bytes

    out = []
    for r in rows:
        step = ("TTFT " if r.info.phase == "prefill" else "TPOT ") + human_seconds(r.step_seconds)
        closed = r.closed_form_seconds
        out.append([r.target, str(r.tp), step, f"{r.tokens_per_second:,.1f}", human_bytes(r.weight_bytes),
                    human_bytes(r.kv_bytes), human_bytes(r.memory_bytes),
                    human_bytes(int(r.capacity)) if r.capacity is not None else "-",
                    {True: "yes", False: "NO", None: "-"}[r.fits],
                    human_seconds(closed) if closed is not None else "-",
                    f"{(r.step_seconds / closed - 1) * 100:+.1f}%" if closed else "-"])
    return out
