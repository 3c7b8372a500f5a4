"""Rendering shared by commands: model summaries (plain text) and the rich console.

`print_summary` (what `irbridge info` prints) writes plain aligned text, and `console`
builds its rich `Console` on first use: importing rich costs about 0.1 s of CPU, so the
read-only commands that only print text (`info`, `validate`) start without it.
"""

from __future__ import annotations

import sys
from typing import Any

from irbridge.summary import ModelSummary, human_bytes, human_count


class _LazyConsole:
    """The shared rich Console (plain lines never wrap: pipes, grep), made on first use."""

    _console: Any = None

    def __getattr__(self, name: str) -> Any:
        if _LazyConsole._console is None:
            from rich.console import Console

            _LazyConsole._console = Console(highlight=False, soft_wrap=True)
        return getattr(_LazyConsole._console, name)


console: Any = _LazyConsole()


def print_summary(s: ModelSummary, *, title: str, top_ops: int = 12) -> None:
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
    width = max(len(key) for key, _ in rows)
    lines = [title]
    lines += [f"{key.ljust(width)}  {value}" for key, value in rows]
    ops = [(op, str(count)) for op, count in s.op_histogram[:top_ops]]
    if len(s.op_histogram) > top_ops:
        rest = sum(c for _, c in s.op_histogram[top_ops:])
        ops.append((f"({len(s.op_histogram) - top_ops} more ops)", str(rest)))
    left = max([len("op"), *(len(op) for op, _ in ops)])
    right = max([len("count"), *(len(c) for _, c in ops)])
    lines += ["op histogram", f" {'op'.ljust(left)} | {'count'.rjust(right)}",
              f"-{'-' * left}-+-{'-' * right}"]
    lines += [f" {op.ljust(left)} | {c.rjust(right)}" for op, c in ops]
    if s.opaque_ops:
        names = ", ".join(f"{op} x{c}" for op, c in s.opaque_ops)
        lines.append(f"opaque (unmapped) ops: {names}")
    sys.stdout.write("\n".join(lines) + "\n")  # the rich console writes here too
    sys.stdout.flush()
