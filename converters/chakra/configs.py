"""Ready-to-run ASTRA-sim inputs written next to every Chakra export (`astrasim/`).

- `system-replay.json` and `system-roofline.json`: ASTRA-sim's system layer. Both carry
  the target's attainable compute (`peak-perf`, TFLOPS: dense peak x compute efficiency at
  the trace's dtype) and memory bandwidth (`local-mem-bw`, GB/s: bandwidth x memory
  efficiency; ASTRA-sim also times the local reductions of collectives with it);
  `roofline-enabled` is 0 (compute nodes take `duration_micros`) or 1 (they take
  max(num_ops / peak-perf, tensor_size / local-mem-bw)).
- `network.yml`: the analytical network, one switch, `npus_count` = the rank count (at
  least 2: ASTRA-sim refuses one NPU; see `padding` below), per-link bandwidth (GB/s per
  direction) and latency (ns) from `interconnect()`.
- `remote-memory.json`: no memory expansion (the traces have no MEM_LOAD/STORE nodes).
- `comm-groups.json`: communicator groups `{"1": [ranks], ...}` when the trace uses any.
- `run.json`: the file names above, for `irbridge simulate astrasim`.

A one-rank export runs as two NPUs: `astrasim/one-rank/` holds a copy of rank 0's trace
and an idle rank 1 (metadata only, no nodes), and the run reads rank 0's time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from irbridge.analysis import Target

SYSTEM_REPLAY = "astrasim/system-replay.json"
SYSTEM_ROOFLINE = "astrasim/system-roofline.json"
NETWORK = "astrasim/network.yml"
REMOTE_MEMORY = "astrasim/remote-memory.json"
COMM_GROUPS = "astrasim/comm-groups.json"
MANIFEST = "astrasim/run.json"
ONE_RANK = "astrasim/one-rank"


@dataclass(frozen=True)
class Interconnect:
    """Per-GPU link to the switch: GB/s per direction, latency in ns, and where from."""

    bandwidth_gbps: float
    latency_ns: float
    source: str


# Scale-up links of the catalog's accelerators. Per-direction figures: vendor sheets quote
# NVLink bandwidth as the bidirectional total per GPU (H100 SXM 900 GB/s, A100 600 GB/s).
_LINKS: dict[str, Interconnect] = {
    "h100-sxm": Interconnect(450.0, 500.0, "NVLink 4 through NVSwitch: 900 GB/s "
                                           "bidirectional per GPU (H100 datasheet)"),
    "a100-80gb": Interconnect(300.0, 500.0, "NVLink 3 through NVSwitch: 600 GB/s "
                                            "bidirectional per GPU (A100 datasheet)"),
    "h100-pcie": Interconnect(64.0, 1000.0, "PCIe Gen5 x16: 128 GB/s bidirectional"),
    "l4": Interconnect(32.0, 1000.0, "PCIe Gen4 x16: 64 GB/s bidirectional"),
}
_DEFAULT_LINK = Interconnect(50.0, 500.0, "no interconnect figure in the catalog for this "
                                          "target: ASTRA-sim's own example value (edit it)")


def interconnect(target: Target) -> Interconnect:
    return _LINKS.get(target.name, _DEFAULT_LINK)


def network_bandwidth(link: Interconnect) -> float:
    """The YAML `bandwidth` figure: ASTRA-sim's analytical network converts it to bytes per
    ns as value * 2**30 / 1e9 (GiB/s, NetworkFunction.cpp bw_GBps_to_Bpns), so a link of
    450 GB/s is written 419.095."""
    return link.bandwidth_gbps * 1e9 / 2**30


def npus(ranks: int) -> int:
    """NPUs the network config declares: ASTRA-sim's analytical network needs at least 2."""
    return max(2, ranks)


def system_config(target: Target, dtype: str, *, roofline: bool) -> dict[str, object]:
    return {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1,
        "all-reduce-implementation": ["ring"],
        "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"],
        "all-to-all-implementation": ["ring"],
        "collective-optimization": "localBWAware",
        "local-mem-bw": target.bandwidth / 1e9,
        "peak-perf": target.peak(dtype) / 1e12,
        "roofline-enabled": 1 if roofline else 0,
        "boost-mode": 0,
    }


def network_config(target: Target, ranks: int) -> str:
    link = interconnect(target)
    return (f"# ASTRA-sim analytical network for {target.name}, written by irbridge.\n"
            f"# Link: {link.source}.\n"
            + ("# The export has one rank; ASTRA-sim needs at least 2 NPUs, so rank 1 is an "
               "idle padding rank\n# (astrasim/one-rank/): read rank 0's time.\n"
               if ranks == 1 else "")
            + "topology: [ Switch ]\n"
            f"npus_count: [ {npus(ranks)} ]\n"
            f"bandwidth: [ {network_bandwidth(link):.6f} ]  # = {link.bandwidth_gbps:g} GB/s "
            "per direction (ASTRA-sim reads GiB/s)\n"
            f"latency: [ {link.latency_ns} ]  # ns per link (a switch hop is two links)\n")


def files(prefix: str, target: Target, dtype: str, ranks: int,
          comm_groups: dict[int, list[int]] | None = None) -> dict[str, bytes]:
    """Relative path -> content of every ASTRA-sim input except the traces."""
    workload = f"{ONE_RANK}/{prefix}" if ranks == 1 else prefix
    manifest: dict[str, object] = {
        "workload": workload, "ranks": ranks, "npus": npus(ranks),
        "system": {"replay": SYSTEM_REPLAY, "roofline": SYSTEM_ROOFLINE},
        "network": NETWORK, "remote_memory": REMOTE_MEMORY,
        "comm_groups": COMM_GROUPS if comm_groups else None,
        "target": target.name, "dtype": dtype,
    }
    out = {
        SYSTEM_REPLAY: _json(system_config(target, dtype, roofline=False)),
        SYSTEM_ROOFLINE: _json(system_config(target, dtype, roofline=True)),
        NETWORK: network_config(target, ranks).encode(),
        REMOTE_MEMORY: _json({"memory-type": "NO_MEMORY_EXPANSION"}),
        MANIFEST: _json(manifest),
    }
    if comm_groups:
        out[COMM_GROUPS] = _json({str(k): v for k, v in sorted(comm_groups.items())})
    return out


def command(manifest: dict[str, object], mode: str, binary: str = "AstraSim_Analytical_"
            "Congestion_Unaware") -> str:
    """The shell command that runs ASTRA-sim from inside the export folder."""
    system = manifest["system"]
    assert isinstance(system, dict)
    parts = [binary, f"--workload-configuration={manifest['workload']}",
             f"--system-configuration={system[mode]}",
             f"--network-configuration={manifest['network']}",
             f"--remote-memory-configuration={manifest['remote_memory']}"]
    if manifest.get("comm_groups"):
        parts.append(f"--comm-group-configuration={manifest['comm_groups']}")
    return " \\\n    ".join(parts)


def readme(prefix: str, target: Target, dtype: str, ranks: int, *,
           comm_groups: bool, notes: str = "") -> str:
    manifest = json.loads(files(prefix, target, dtype, ranks,
                                {1: [0]} if comm_groups else None)[MANIFEST])
    link = interconnect(target)
    one_rank = ("\nThe export has one rank. ASTRA-sim's analytical network refuses one NPU, "
                "so the run uses `astrasim/one-rank/`: rank 0 is a copy of "
                f"`{prefix}.0.et` and rank 1 is idle (no nodes). Read `sys[0]`'s time; "
                "`sys[1]` finishes at 0 cycles.\n" if ranks == 1 else "")
    return f"""# Chakra traces of {prefix} (irbridge)

`{prefix}.{{rank}}.et` for ranks 0..{ranks - 1}, on `{target.name}` at `{dtype}`.
{notes}
## Simulate with ASTRA-sim

    irbridge simulate astrasim . --mode replay      # or --mode roofline

builds ASTRA-sim once per machine from `astra-sim-src.tar.gz` (cached in
`~/.cache/irbridge/astrasim/`) and prints every rank's time. By hand, from this folder:

    {command(manifest, "replay")}

(`system-roofline.json` for roofline mode). One cycle is 1 ns.

- replay: a compute node takes `duration_micros` (the roofline latency rounded to whole
  microseconds, at least 1); exact values are the `latency_ns` attributes.
- roofline: a compute node takes max(num_ops / peak-perf, tensor_size / local-mem-bw) with
  peak-perf {target.peak(dtype) / 1e12:g} TFLOPS and local-mem-bw {target.bandwidth / 1e9:g}
  GB/s (attainable figures of `{target.name}` at `{dtype}`).
- network: one switch, {npus(ranks)} NPUs, {link.bandwidth_gbps:g} GB/s per direction and
  {link.latency_ns:g} ns per link ({link.source}).
{one_rank}"""


def _json(obj: object) -> bytes:
    return (json.dumps(obj, indent=1) + "\n").encode()
