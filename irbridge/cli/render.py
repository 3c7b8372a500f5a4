"""Rich rendering shared by commands: model summaries and node tables."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment
from rich.table import Table

from irbridge.sanitize import clean, clean_lines
from irbridge.summary import ModelSummary, human_bytes, human_count


class SafeConsole(Console):
    """A rich console that never passes a file's control characters to the terminal.

    Markup is off: a name such as ``[red]x`` or ``[link=...]`` prints as itself (styles are
    given with ``style=``). Whatever text reaches the output, every control, bidi or other
    invisible format character in it (rich's own newlines aside) is printed as an escape
    (see :mod:`irbridge.sanitize`), terminals and pipes alike.
    """

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(clean_lines(seg.text), seg.style, seg.control)
            for seg in buffer)


# Plain lines never wrap (pipes, grep).
console = SafeConsole(highlight=False, soft_wrap=True, markup=False, emoji=False)


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
        facts.add_row(key, clean(value))
    console.print(clean(title), style="bold")
    console.print(facts)
    ops = Table(title="op histogram", title_justify="left", show_edge=False)
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in s.op_histogram[:top_ops]:
        ops.add_row(clean(op), str(count))
    if len(s.op_histogram) > top_ops:
        rest = sum(c for _, c in s.op_histogram[top_ops:])
        ops.add_row(f"({len(s.op_histogram) - top_ops} more ops)", str(rest))
    console.print(ops)
    if s.opaque_ops:
        names = ", ".join(f"{clean(op)} x{c}" for op, c in s.opaque_ops)
        console.print(f"opaque (unmapped) ops: {names}", style="yellow")
