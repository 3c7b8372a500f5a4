"""Rich rendering shared by commands: model summaries and node tables."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from irbridge.summary import ModelSummary, human_bytes, human_count

console = Console(highlight=False, soft_wrap=True)  # plain lines never wrap (pipes, grep)


def print_summary(s: ModelSummary, *, title: str, top_ops: int = 12) -> None:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    rows = [
        ("model", s.name or "-"),
        ("source", s.source_format or "-"),
        ("IR version", f"{s.ir_version} (neutral opset {s.opset_version})"),
        ("producer", s.producer),
        ("graphs", str(s.graphs)),
        ("nodes", f"{s.nodes} ({s.opaque_nodes} opaque)"),
        ("weights+buffers", f"{s.parameters:,} ({human_bytes(s.parameter_bytes)}, {s.weights})"),
        ("inputs", "; ".join(s.inputs) or "-"),
        ("outputs", "; ".join(s.outputs) or "-"),
        ("MACs", f"{s.cost.macs:,} ({human_count(s.cost.macs)})"),
        ("FLOPs", f"{human_count(s.cost.matmul_flops)} matmul-like + "
                  f"{human_count(s.cost.other_flops)} other"),
        ("memory traffic", f"{human_bytes(s.cost.bytes_read)} read, "
                           f"{human_bytes(s.cost.bytes_written)} written (unfused)"),
    ]
    if s.uncosted_nodes:
        rows.append(("uncosted", f"{s.uncosted_nodes} nodes with symbolic or unknown shapes "
                                 "(not in the totals; `irbridge analyze --batch N` binds them)"))
    for key in ("capture.method", "capture.attempts"):
        if key in s.metadata:
            rows.append((key.replace(".", " "), s.metadata[key]))
    for key, value in rows:
        facts.add_row(key, escape(value))  # shapes like [batch,3] are not rich markup
    console.print(f"[bold]{escape(title)}[/bold]")
    console.print(facts)
    ops = Table(title="op histogram", title_justify="left", show_edge=False)
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in s.op_histogram[:top_ops]:
        ops.add_row(escape(op), str(count))
    if len(s.op_histogram) > top_ops:
        rest = sum(c for _, c in s.op_histogram[top_ops:])
        ops.add_row(f"({len(s.op_histogram) - top_ops} more ops)", str(rest))
    console.print(ops)
    if s.opaque_ops:
        names = ", ".join(f"{op} x{c}" for op, c in s.opaque_ops)
        console.print(f"[yellow]opaque (unmapped) ops: {names}[/yellow]")
