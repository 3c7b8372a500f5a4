"""Rendering shared by commands: model summaries (plain text) and the rich console.

`print_summary` (what `irbridge info` prints) writes plain aligned text, and `console`
builds its rich `Console` on first use: importing rich costs about 0.1 s of CPU, so the
read-only commands that only print text (`info`, `validate`) start without it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from irbridge.sanitize import clean, clean_lines
from irbridge.summary import ModelSummary, human_bytes, human_count


def _safe_console() -> Any:
    """A rich console that never passes a file's control characters to the terminal.

    Markup is off: a name such as ``[red]x`` or ``[link=...]`` prints as itself (styles are
    given with ``style=``). Whatever text reaches the output, every control, bidi or other
    invisible format character in it (rich's own newlines aside) is printed as an escape
    (see :mod:`irbridge.sanitize`), terminals and pipes alike.
    """
    from rich.console import Console
    from rich.segment import Segment

    class SafeConsole(Console):
        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            return super()._render_buffer(
                seg if seg.control else Segment(clean_lines(seg.text), seg.style, seg.control)
                for seg in buffer)

    # Plain lines never wrap (pipes, grep).
    return SafeConsole(highlight=False, soft_wrap=True, markup=False, emoji=False)


class _LazyConsole:
    """The shared safe rich console, made on first use."""

    _console: Any = None

    def __getattr__(self, name: str) -> Any:
        if _LazyConsole._console is None:
            _LazyConsole._console = _safe_console()
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
    for key, value in s.metadata.items():  # a multi-device JAX program's Shardy meshes
        if key.startswith("stablehlo.mesh."):
            rows.append((f"mesh @{key.removeprefix('stablehlo.mesh.')}", value))
    sharded = sum(1 for key in s.metadata if key.startswith("stablehlo.sharding."))
    if sharded:
        rows.append(("shardings", f"{sharded} values annotated (metadata "
                                  "stablehlo.sharding.VALUE)"))
    width = max(len(key) for key, _ in rows)
    lines = [clean(title)]  # every string from the file is cleaned (irbridge.sanitize)
    lines += [f"{key.ljust(width)}  {clean(value)}" for key, value in rows]
    ops = [(clean(op), str(count)) for op, count in s.op_histogram[:top_ops]]
    if len(s.op_histogram) > top_ops:
        rest = sum(c for _, c in s.op_histogram[top_ops:])
        ops.append((f"({len(s.op_histogram) - top_ops} more ops)", str(rest)))
    left = max([len("op"), *(len(op) for op, _ in ops)])
    right = max([len("count"), *(len(c) for _, c in ops)])
    lines += ["op histogram", f" {'op'.ljust(left)} | {'count'.rjust(right)}",
              f"-{'-' * left}-+-{'-' * right}"]
    lines += [f" {op.ljust(left)} | {c.rjust(right)}" for op, c in ops]
    if s.opaque_ops:
        names = ", ".join(f"{clean(op)} x{c}" for op, c in s.opaque_ops)
        lines.append(f"opaque (unmapped) ops: {names}")
    sys.stdout.write("\n".join(lines) + "\n")  # the rich console writes here too
    sys.stdout.flush()
