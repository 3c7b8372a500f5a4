"""Outputs of an analysis: a JSON-ready dict, rich tables, CSV and Markdown."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from irbridge.analysis.cost import ModuleRow
from irbridge.analysis.driver import Result, Run
from irbridge.analysis.hardware import Target
from irbridge.analysis.partition import Partition
from irbridge.analysis.roofline import Mapping, Roof
from irbridge.ir import Cost
from irbridge.sanitize import clean, clip, markdown
from irbridge.summary import human_bytes, human_count


def human_seconds(seconds: float) -> str:
    if seconds <= 0:
        return "0"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def human_rate(value: float, unit: str) -> str:
    """3.35e12 -> '3.35 TB/s' (up to peta)."""
    return human_count(value, unit)


def _intensity(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"


def _cost_dict(cost: Cost) -> dict[str, int]:
    return {"macs": cost.macs, "matmul_flops": cost.matmul_flops, "other_flops": cost.other_flops,
            "flops": cost.flops, "bytes_read": cost.bytes_read,
            "bytes_written": cost.bytes_written, "param_bytes": cost.param_bytes}


def _run_label(run: Run) -> str:
    return run.binding.describe() or "as captured"


# -- JSON -------------------------------------------------------------------------------------

def target_dict(target: Target) -> dict[str, Any]:
    return {
        "name": target.name, "title": target.title, "kind": target.kind,
        "aliases": list(target.aliases),
        "peaks": {k: {"value": f.value, "unit": "FLOP/s" if k != "int8" else "OP/s",
                      "source": f.source, "note": f.note} for k, f in target.peaks.items()},
        "memory_bandwidth": {"value": target.memory_bandwidth.value, "unit": "B/s",
                             "source": target.memory_bandwidth.source,
                             "note": target.memory_bandwidth.note},
        "memory_capacity": None if target.memory_capacity is None else {
            "value": target.memory_capacity.value, "unit": "B",
            "source": target.memory_capacity.source},
        "on_chip": {k: {"value": f.value, "unit": "B", "source": f.source, "note": f.note}
                    for k, f in target.on_chip.items()},
        "efficiency": {"compute": target.compute_efficiency, "memory": target.memory_efficiency,
                       "source": target.efficiency_source},
        "ridge": {k: target.ridge(k) for k in target.peaks},
        "notes": target.notes, "path": target.path,
    }


def partition_dict(p: Partition) -> dict[str, Any]:
    return {"id": p.id, "graph_index": p.graph_index, "kind": p.kind, "node_ids": p.node_ids,
            "ops": [n.qualified_op for n in p.nodes], "label": p.label(), "reason": p.reason,
            "cost": _cost_dict(p.cost), "external_bytes": p.external_bytes,
            "external_read": p.external_read, "external_written": p.external_written,
            "internal_bytes": p.internal_bytes,
            "intensity": None if math.isinf(p.intensity) else p.intensity, "free": p.free}


def mapping_dict(m: Mapping, top: int) -> dict[str, Any]:
    conc = m.concurrency
    return {
        "target": m.target.name, "dtype": m.dtype, "strategy": m.strategy, "peak": m.peak,
        "bandwidth": m.bandwidth, "ridge": m.ridge, "total_latency_seconds": m.total_latency,
        "external_bytes": m.external_bytes, "attained_fraction": m.attained,
        "bound_distribution": {k: {"kernels": c, "seconds": s}
                               for k, (c, s) in m.bound_distribution().items()},
        "concurrency": conc.as_dict() if conc is not None else None,
        "top": [r.partition.id for r in m.top(top)],
        "estimates": [{"partition_id": r.partition.id, "compute_seconds": r.compute_seconds,
                       "memory_seconds": r.memory_seconds, "latency_seconds": r.latency_seconds,
                       "bound": r.bound, "attained_fraction": r.attained}
                      for r in m.estimates],
    }


def module_dict(row: ModuleRow) -> dict[str, Any]:
    return {"module": row.path, "depth": row.depth, "nodes": row.nodes,
            "parameters": row.parameters, "output": row.output, "memory_bytes": row.memory,
            **_cost_dict(row.cost)}


def to_dict(result: Result, top: int = 10) -> dict[str, Any]:
    runs = []
    for run in result.runs:
        costs = run.costs
        runs.append({
            "batch": run.batch, "binding": _run_label(run), "notes": run.binding.notes,
            "strategy": run.strategy, "total": _cost_dict(costs.total),
            "nodes": len(costs.nodes), "weight_bytes": costs.weight_bytes,
            "opaque_nodes": sum(costs.opaque.values()),
            "uncosted_nodes": [nc.node.id for nc in costs.uncosted],
            "partitions": [partition_dict(p) for p in run.partitioning.partitions],
            "mappings": [mapping_dict(m, top) for m in run.mappings],
            "modules": None if run.modules is None else [module_dict(r) for r in run.modules],
        })
    return {"model": result.name, "source_format": result.model.source_format,
            "dtype": result.dtype, "targets": [target_dict(t) for t in result.targets],
            "warnings": result.warnings, "runs": runs}


# -- tables -----------------------------------------------------------------------------------

_TOTALS = ("batch", "fusion", "nodes", "kernels", "MACs", "FLOPs mm + other", "weights",
           "ext. bytes", "int. bytes")
_SUMMARY = ("batch", "fusion", "target", "latency", "compute", "memory", "% peak", "stages",
            "critical path", "speedup")


def totals_rows(result: Result) -> list[list[str]]:
    """Per batch and strategy: what the model costs, independent of the target."""
    rows = []
    for run in result.runs:
        total = run.costs.total
        kernels = run.partitioning.kernels
        rows.append([_run_label(run), run.strategy, str(len(run.costs.nodes)),
                     str(len(kernels)), human_count(total.macs),
                     f"{human_count(total.matmul_flops)} + {human_count(total.other_flops)}",
                     human_bytes(run.costs.weight_bytes),
                     human_bytes(sum(p.external_bytes for p in kernels)),
                     human_bytes(sum(p.internal_bytes for p in kernels))])
    return rows


def _varying(result: Result, header: Sequence[str], rows: list[list[str]]
             ) -> tuple[list[str], list[list[str]]]:
    """Drop the batch and fusion columns when every run shares them (narrow terminals)."""
    drop = set()
    if len({run.batch for run in result.runs}) == 1 and result.runs[0].batch is None \
            and not result.runs[0].binding.symbols:
        drop.add("batch")
    if len({run.strategy for run in result.runs}) == 1:
        drop.add("fusion")
    keep = [i for i, column in enumerate(header) if column not in drop]
    return [header[i] for i in keep], [[row[i] for i in keep] for row in rows]


def summary_rows(result: Result) -> list[list[str]]:
    """Per batch, strategy and target: the roofline totals and the concurrency."""
    rows = []
    for run in result.runs:
        for m in run.mappings:
            dist = m.bound_distribution()
            total = m.total_latency or 1.0
            conc = m.concurrency
            rows.append([
                _run_label(run), run.strategy, m.target.name, human_seconds(m.total_latency),
                f"{dist['compute'][0]} ({dist['compute'][1] / total:.0%})",
                f"{dist['memory'][0]} ({dist['memory'][1] / total:.0%})",
                f"{m.attained:.1%}",
                f"{conc.stages} ({conc.max_width})" if conc else "-",
                (f"{human_seconds(conc.critical_seconds)} ({len(conc.critical_path)})"
                 if conc else "-"),
                f"{conc.max_speedup:.2f}x" if conc else "-",
            ])
    return rows


def top_rows(run: Run, top: int) -> tuple[list[str], list[list[str]]]:
    """The top kernels of a run by latency on its first target, with every target's
    latency and bound side by side."""
    first = run.mappings[0]
    by_target = [{r.partition.id: r for r in m.estimates} for m in run.mappings]
    header = ["id", "kind", "kernel", "FLOPs", "ext. bytes", "AI"]
    header += [m.target.name for m in run.mappings]
    rows = []
    for roof in first.top(top):
        p = roof.partition
        row = [str(p.id), p.kind, p.label(), human_count(p.cost.flops),
               human_bytes(p.external_bytes), _intensity(p.intensity)]
        for estimates in by_target:
            r: Roof = estimates[p.id]
            row.append(f"{human_seconds(r.latency_seconds)} {r.bound[:3]}")
        rows.append(row)
    return header, rows


def module_rows(rows: Sequence[ModuleRow]) -> list[list[str]]:
    return [["  " * row.depth + (row.path.rsplit(".", 1)[-1] if row.depth > 1 else row.path),
             f"{row.parameters:,}", row.output, human_count(row.cost.macs),
             human_count(row.cost.flops), human_bytes(row.memory)] for row in rows]


_MODULE_HEADER = ["module", "parameters", "output", "MACs", "FLOPs", "memory (unfused)"]


def print_tables(result: Result, console: Console, top: int = 10) -> None:
    first = result.runs[0]
    facts = f"{result.name}: {len(first.costs.nodes)} nodes, dtype {result.dtype}"
    if first.costs.body_nodes:
        facts += f" (+{first.costs.body_nodes} in control-flow bodies)"
    console.print(clean(facts), style="bold")
    for run in result.runs:
        for note in run.binding.notes:
            console.print(f"note: {clean(note)}")
    for line in result.warnings:
        console.print(f"warning: {clean(line)}", style="yellow")
    for title, header, rows in (
            ("cost", *_varying(result, _TOTALS, totals_rows(result))),
            ("roofline: latency (kernels one after another), kernels compute- / "
             "memory-bound (share of time), stages (max width), critical path (kernels)",
             *_varying(result, _SUMMARY, summary_rows(result)))):
        table = Table(title=title, title_justify="left", show_edge=False)
        for column in header:
            table.add_column(column, justify="left" if column in ("batch", "fusion", "target")
                             else "right", no_wrap=column == "target")
        for row in rows:
            table.add_row(*(clip(clean(c)) for c in row))
        console.print(table)
    shown = set()
    for run in result.runs:
        if run.strategy in shown or top <= 0:
            continue
        shown.add(run.strategy)
        header, rows = top_rows(run, top)
        t = Table(title=f"top {len(rows)} {run.strategy} kernels ({_run_label(run)}) by "
                        f"latency on {run.mappings[0].target.name}",
                  title_justify="left", show_edge=False)
        for column in header:
            t.add_column(column, justify="left" if column in ("kind", "kernel") else "right",
                         overflow="fold", max_width=40 if column == "kernel" else None,
                         no_wrap=column == "kind")
        for r in rows:
            t.add_row(*(clip(clean(c)) for c in r))
        console.print(t)
    if first.modules is not None:
        t = Table(title=f"modules ({_run_label(first)})", title_justify="left", show_edge=False)
        for column in _MODULE_HEADER:
            t.add_column(column, justify="left" if column in ("module", "output") else "right")
        for r in module_rows(first.modules):
            t.add_row(*(clip(clean(c)) for c in r))
        console.print(t)


# -- markdown and csv -------------------------------------------------------------------------

def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return markdown(text)
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(result: Result, top: int = 10) -> str:
    first = result.runs[0]
    parts = [f"# {markdown(result.name)}", "",
             f"{len(first.costs.nodes)} nodes, compute dtype {result.dtype}. Latency is the "
             "sum of per-kernel roofline estimates max(compute, memory); bound: arithmetic "
             "intensity against the target's ridge point.", ""]
    for run in result.runs:
        parts += [f"- note: {markdown(note)}" for note in run.binding.notes]
    parts += [f"- warning: {markdown(line)}" for line in result.warnings]
    parts += ["", "## Cost", "", _md_table(_TOTALS, totals_rows(result)), "",
              "## Roofline", "", _md_table(_SUMMARY, summary_rows(result)), ""]
    shown = set()
    for run in result.runs:
        if run.strategy in shown or top <= 0:
            continue
        shown.add(run.strategy)
        header, rows = top_rows(run, top)
        parts += [f"## Top {len(rows)} kernels ({run.strategy}, {_run_label(run)})", "",
                  _md_table(header, rows), ""]
    if first.modules is not None:
        rows = [[r.path, f"{r.parameters:,}", r.output, f"{r.cost.macs:,}", f"{r.cost.flops:,}",
                 human_bytes(r.memory)] for r in first.modules]
        parts += ["## Modules", "", _md_table(_MODULE_HEADER, rows), ""]
    return "\n".join(parts)


def to_csv(result: Result) -> str:
    """One row per partition and target (long format); with --by-module the module table."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if result.runs[0].modules is not None:
        _csv_row(writer, ["batch", "module", "depth", "nodes", "parameters", "output", "macs",
                         "matmul_flops", "other_flops", "bytes_read", "bytes_written",
                         "param_bytes"])
        seen = set()
        for run in result.runs:
            if run.batch in seen or run.modules is None:
                continue
            seen.add(run.batch)
            for r in run.modules:
                _csv_row(writer, [_run_label(run), r.path, r.depth, r.nodes, r.parameters,
                                 r.output, r.cost.macs, r.cost.matmul_flops, r.cost.other_flops,
                                 r.cost.bytes_read, r.cost.bytes_written, r.cost.param_bytes])
        return out.getvalue()
    _csv_row(writer, ["batch", "strategy", "target", "dtype", "partition", "graph", "kind",
                     "node_ids", "label", "macs", "matmul_flops", "other_flops",
                     "external_bytes", "internal_bytes", "intensity", "compute_s", "memory_s",
                     "latency_s", "bound", "attained"])
    for run in result.runs:
        for m in run.mappings:
            for est in m.estimates:
                p = est.partition
                _csv_row(writer, [
                    _run_label(run), run.strategy, m.target.name, m.dtype, p.id, p.graph_index,
                    p.kind, " ".join(map(str, p.node_ids)), p.label(), p.cost.macs,
                    p.cost.matmul_flops, p.cost.other_flops, p.external_bytes, p.internal_bytes,
                    "inf" if math.isinf(p.intensity) else f"{p.intensity:.6g}",
                    f"{est.compute_seconds:.6g}", f"{est.memory_seconds:.6g}",
                    f"{est.latency_seconds:.6g}", est.bound, f"{est.attained:.4f}"])
    return out.getvalue()


def _csv_row(writer: Any, cells: Sequence[object]) -> None:
    """A CSV row whose text cells (names from the model file) are cleaned for the terminal."""
    writer.writerow([clean(c) if isinstance(c, str) else c for c in cells])


# -- the hardware catalog ---------------------------------------------------------------------

_LISTED_PEAKS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def catalog_rows(targets: Sequence[Target]) -> tuple[list[str], list[list[str]]]:
    header = ["target", "kind", *_LISTED_PEAKS, "bandwidth", "ridge"]
    rows = []
    for t in targets:
        peaks = [f"{t.peaks[k].value / 1e12:.4g}" if k in t.peaks else "-" for k in _LISTED_PEAKS]
        ridge = "bf16" if "bf16" in t.peaks else next(iter(t.peaks))
        rows.append([t.name, t.kind, *peaks, human_rate(t.memory_bandwidth.value, "B/s"),
                     f"{t.ridge(ridge):.0f} {ridge}"])
    return header, rows


def print_target(target: Target, console: Console) -> None:
    """Every figure of a target with its source (numbered, listed below the table)."""
    console.print(clean(target.name), style="bold", end="")
    console.print(f": {clean(target.title)} ({clean(target.kind)})"
                  + (f", aliases {clean(', '.join(target.aliases))}" if target.aliases else ""))
    sources: dict[str, int] = {}

    def ref(source: str) -> str:
        return f"[{sources.setdefault(source, len(sources) + 1)}]"

    t = Table(show_edge=False)
    for column in ("figure", "value", "as given", "src", "note"):
        t.add_column(column, overflow="fold")
    for key, f in target.peaks.items():
        unit = "FLOP/s" if key != "int8" else "OP/s"
        t.add_row(f"peak {key} (dense)", human_rate(f.value, unit), f"{f.given:g} {f.unit}",
                  ref(f.source), clean(f.note))
    figures = [("memory bandwidth", target.memory_bandwidth, "B/s")]
    if target.memory_capacity is not None:
        figures.append(("memory capacity", target.memory_capacity, "B"))
    figures += [(key, f, "B") for key, f in target.on_chip.items()]
    for name, f, unit in figures:
        t.add_row(name, human_rate(f.value, unit), f"{f.given:g} {f.unit}", ref(f.source),
                  clean(f.note))
    if target.compute_efficiency != 1.0 or target.memory_efficiency != 1.0:
        t.add_row("efficiency", f"compute {target.compute_efficiency:g}, memory "
                  f"{target.memory_efficiency:g}", "", ref(target.efficiency_source), "")
    for key in target.peaks:
        t.add_row(f"ridge {key}", f"{target.ridge(key):.1f} FLOP/B", "", "", "peak / bandwidth")
    console.print(t)
    for source, number in sources.items():
        console.print(f"[{number}] {clean(source)}")
    if target.notes:
        console.print(f"note: {clean(target.notes)}")
