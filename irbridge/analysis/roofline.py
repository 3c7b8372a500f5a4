"""Roofline mapping of partitions (kernels) onto a hardware target.

For each partition on a target at one compute dtype (`fp32`, `tf32`, `bf16`, `fp16`,
`fp8`, `int8`):

- compute time = FLOPs / peak, where FLOPs = matmul-like FLOPs + other FLOPs and peak is
  the target's dense peak for the dtype times its compute efficiency (non-matmul FLOPs
  are charged at the same peak: they are almost always memory-bound anyway);
- memory time = external bytes / (memory bandwidth x memory efficiency); internal bytes
  stay on chip;
- ONE bound rule: arithmetic intensity (FLOPs / external bytes) against the target's
  ridge point (peak / bandwidth) for the dtype: at or above the ridge the kernel is
  compute-bound, below it memory-bound (equivalently compute time >= memory time);
- estimated latency = max(compute time, memory time): compute and memory traffic overlap
  perfectly inside a kernel, kernels run one after another, launch overheads and caches
  are ignored. This is a lower bound on real latency;
- attained fraction of peak = compute time / latency (1.0 for compute-bound kernels).

Per-op figures are the `unfused` strategy (one op per partition). Model totals are the sum
over kernels (sequential execution); `concurrency` gives the critical path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from irbridge.analysis.binding import COMPUTE_DTYPES
from irbridge.analysis.concurrency import Concurrency
from irbridge.analysis.hardware import Target
from irbridge.analysis.partition import Partition, Partitioning
from irbridge.dtypes import DType
from irbridge.ir import Cost, Estimate, HardwareMapping

IR_DTYPE = {"fp64": DType.FLOAT64, "fp32": DType.FLOAT32, "tf32": DType.FLOAT32,
            "bf16": DType.BFLOAT16, "fp16": DType.FLOAT16, "fp8": DType.FLOAT8_E4M3FN,
            "int8": DType.INT8}
assert set(IR_DTYPE) == set(COMPUTE_DTYPES)


@dataclass
class Roof:
    """The roofline estimate of one partition on one target."""

    partition: Partition
    compute_seconds: float
    memory_seconds: float
    intensity: float
    bound: str  # "compute" | "memory"

    @property
    def latency_seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def attained(self) -> float:
        """Fraction of the peak this kernel attains (compute time / latency)."""
        latency = self.latency_seconds
        return self.compute_seconds / latency if latency > 0 else 0.0

    def to_ir(self) -> Estimate:
        return Estimate(self.partition.id, self.compute_seconds, self.memory_seconds,
                        self.latency_seconds, self.bound)


@dataclass
class Mapping:
    """All partitions of one strategy on one target at one dtype."""

    target: Target
    dtype: str
    strategy: str
    estimates: list[Roof]
    concurrency: Concurrency | None = None
    total: Cost = field(default_factory=Cost)

    @property
    def peak(self) -> float:
        return self.target.peak(self.dtype)

    @property
    def bandwidth(self) -> float:
        return self.target.bandwidth

    @property
    def ridge(self) -> float:
        return self.target.ridge(self.dtype)

    @property
    def total_latency(self) -> float:
        return sum(r.latency_seconds for r in self.estimates)

    @property
    def external_bytes(self) -> int:
        return sum(r.partition.external_bytes for r in self.estimates)

    @property
    def attained(self) -> float:
        """Fraction of peak over the whole model: FLOPs / total latency / peak."""
        latency = self.total_latency
        flops = sum(r.partition.cost.flops for r in self.estimates)
        return flops / latency / self.peak if latency > 0 else 0.0

    def bound_distribution(self) -> dict[str, tuple[int, float]]:
        """bound -> (kernels, seconds), free partitions excluded."""
        dist = {"compute": (0, 0.0), "memory": (0, 0.0)}
        for r in self.estimates:
            if r.partition.free:
                continue
            count, seconds = dist[r.bound]
            dist[r.bound] = (count + 1, seconds + r.latency_seconds)
        return dist

    def top(self, n: int) -> list[Roof]:
        kernels = [r for r in self.estimates if not r.partition.free]
        return sorted(kernels, key=lambda r: -r.latency_seconds)[:max(n, 0)]

    def latencies(self) -> dict[int, float]:
        return {r.partition.id: r.latency_seconds for r in self.estimates}

    def to_ir(self) -> HardwareMapping:
        return HardwareMapping(self.target.name, IR_DTYPE[self.dtype], self.strategy,
                               [r.to_ir() for r in self.estimates], self.total_latency)


def estimate(partition: Partition, target: Target, dtype: str) -> Roof:
    """Roofline estimate of one partition (the one rule: intensity vs ridge point)."""
    peak, bandwidth = target.peak(dtype), target.bandwidth
    flops = partition.cost.flops
    moved = partition.external_bytes
    compute = flops / peak
    memory = moved / bandwidth
    intensity = partition.intensity
    bound = "compute" if intensity >= peak / bandwidth and not math.isnan(intensity) else "memory"
    return Roof(partition, compute, memory, intensity, bound)


def map_partitions(partitioning: Partitioning, target: Target, dtype: str) -> Mapping:
    estimates = [estimate(p, target, dtype) for p in partitioning.partitions]
    return Mapping(target, dtype, partitioning.strategy, estimates,
                   total=_sum(p.cost for p in partitioning.partitions))


def _sum(costs: Iterable[Cost]) -> Cost:
    total = Cost()
    for c in costs:
        total = total + c
    return total
