"""DOT text for a model's view, and SVG / PNG rendered from it by Graphviz's `dot` program
(run as a subprocess: no Python binding, so nothing but the `dot` binary is needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from irbridge.atomic import atomic_file
from irbridge.errors import ExportError, IrbridgeError
from irbridge.graphview import Depth, View, ViewNode, build_view, human_flops, human_seconds
from irbridge.ir import Model
from irbridge.sanitize import clean_lines

FORMATS = ("dot", "svg", "png")
SUFFIXES = {"dot": (".dot", ".gv"), "svg": (".svg",), "png": (".png",)}
# Fill colour by roofline bound (documented in docs/viewers.md; tests check them).
BOUND_COLOURS = {"compute": "#fdb863", "memory": "#92c5de", "none": "#eeeeee"}
UNKNOWN_COLOUR = "#ffffff"  # no shapes or no cost: nothing to say
# Seconds `dot` may take before the export gives up.
DOT_TIMEOUT = 600


def write(model: Model, path: str | os.PathLike[str], *, hardware: str, fmt: str = "dot",
          depth: Depth = "auto", dtype: str | None = None) -> Path:
    """Write `model` as DOT text, SVG or PNG (`fmt`) to `path`, all or nothing.

    depth: "auto" collapses graphs of more than ~300 nodes to a module depth that stays
    readable, an int collapses at that module depth, None draws every op."""
    path = Path(path)
    if fmt not in FORMATS:
        raise IrbridgeError(f"{path}: unknown picture format {fmt!r}; known: "
                            f"{', '.join(FORMATS)}")
    _check_suffix(path, fmt)
    dot = find_dot() if fmt != "dot" else None  # fail before the analysis, not after
    view = build_view(model, hardware, depth=depth, dtype=dtype)
    text = to_dot(view)
    with atomic_file(path) as tmp:
        if dot is None:
            tmp.write_text(text, encoding="utf-8")
        else:
            render(text, fmt, tmp, dot=dot, shown=path)
    return path


def find_dot() -> str:
    """The path of Graphviz's `dot`, or a one-line error saying how to install it."""
    found = shutil.which("dot")
    if found is None:
        raise ExportError("rendering SVG or PNG needs Graphviz `dot`, which is not on PATH",
                          hint="bash tools/setup-system.sh (Debian package graphviz), or "
                               "export --to dot and render elsewhere")
    return found


def render(text: str, fmt: str, out: Path, *, dot: str | None = None,
           shown: Path | None = None) -> None:
    """Run `dot -T<fmt>` on DOT `text`, writing `out`."""
    dot = dot or find_dot()
    name = shown or out
    try:
        done = subprocess.run([dot, f"-T{fmt}", "-o", str(out)], input=text.encode("utf-8"),
                              capture_output=True, timeout=DOT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise ExportError(f"{name}: dot took more than {DOT_TIMEOUT} s",
                          hint="collapse more (a smaller depth)") from None
    except OSError as exc:
        raise ExportError(f"{name}: cannot run {dot}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ExportError(f"{name}: dot -T{fmt} failed (exit {done.returncode}): "
                          f"{lines[-1] if lines else 'no message'}")


def to_dot(view: View) -> str:
    """The DOT text of a view: one box per op (or collapsed module), fused kernels as
    `cluster_k<ID>` subgraphs when not collapsed, fill colour by roofline bound."""
    depth = "every op" if view.depth is None else f"modules collapsed at depth {view.depth}"
    title = (f"{view.name} on {view.target} ({view.dtype}, {view.strategy}): "
             f"{human_seconds(view.total_latency_seconds)}, {depth}; orange: compute-bound, "
             f"blue: memory-bound")
    lines = [
        f"digraph {_q(view.name or 'model')} {{",
        f"  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=11, labelloc=t, "
        f"label={_q(title)}, nodesep=0.25, ranksep=0.35];",
        "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=9, "
        "margin=\"0.08,0.03\"];",
        "  edge [arrowsize=0.6, color=\"#555555\"];",
    ]
    clustered: dict[int, list[ViewNode]] = {}
    if view.depth is None:
        for node in view.nodes:
            if node.kind == "op" and len(node.partition_ids) == 1:
                pid = node.partition_ids[0]
                if len(view.partitions[pid].members) > 1:
                    clustered.setdefault(pid, []).append(node)
    inside = {n.key for members in clustered.values() for n in members}
    for node in view.nodes:
        if node.key not in inside:
            lines.append("  " + _node(node))
    for pid, members in clustered.items():
        part = view.partitions[pid]
        label = (f"kernel {pid}: {part.kind}, {part.bound}, "
                 f"{human_seconds(part.latency_seconds)}")
        lines.append(f"  subgraph {_q(f'cluster_k{pid}')} {{")
        lines.append(f"    graph [label={_q(label)}, style=\"dashed,rounded\", "
                     f"color=\"#888888\", fontsize=8, id={_q(f'k{pid}')}];")
        lines.extend("    " + _node(n) for n in members)
        lines.append("  }")
    for edge in view.edges:
        first = edge.values[0]
        tip = f"{first.name} {first.type}".strip()
        if len(edge.values) > 1:
            tip += f" (+{len(edge.values) - 1} more)"
        lines.append(f"  {_q(edge.source)} -> {_q(edge.target)} [tooltip={_q(tip)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node(node: ViewNode) -> str:
    m = node.metrics
    if node.kind in ("input", "output"):
        label = f"{node.kind} {node.label}\n{node.shape}".rstrip()
        return (f"{_q(node.key)} [label={_q(label)}, shape=ellipse, style=filled, "
                f"fillcolor=\"#ffffff\", class={_q(node.kind)}, id={_q(node.key)}];")
    bound = m.bound if m.known else "unknown"
    colour = BOUND_COLOURS.get(bound, UNKNOWN_COLOUR)
    figures = f"{human_flops(m.flops)} · {human_seconds(m.latency_seconds)}" if m.known else ""
    tooltip = [node.module_path or "(no module)"]
    if node.kind == "module":
        cls = node.module_class.rsplit(".", 1)[-1]
        head = f"{node.label} ({cls})" if cls else node.label
        label = "\n".join(x for x in (head, f"{len(node.node_ids)} ops · {node.shape}".rstrip(
            " ·"), figures) if x)
        tooltip.append(node.op)
        shape = ", shape=box3d, style=filled"
    else:
        label = "\n".join(x for x in (node.label, node.shape, figures) if x)
        if node.partition_ids:
            tooltip.append(f"kernel {node.partition_ids[0]}")
        shape = ""
    tooltip.append(f"{bound}-bound" if bound in ("compute", "memory") else bound)
    return (f"{_q(node.key)} [label={_q(label)}, fillcolor={_q(colour)}{shape}, "
            f"class={_q(f'{node.kind} {bound}')}, id={_q(node.key)}, "
            f"tooltip={_q('; '.join(tooltip))}];")


def _q(text: str) -> str:
    """A DOT quoted string: control characters from names made visible (see
    irbridge.sanitize), backslashes and quotes escaped, newlines as centred breaks."""
    text = clean_lines(text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _check_suffix(path: Path, fmt: str) -> None:
    suffix = path.suffix.lower()
    for other, suffixes in SUFFIXES.items():
        if other != fmt and suffix in suffixes:
            raise IrbridgeError(f"{path}: suffix {suffix} does not match format {fmt}",
                                hint=f"name it {path.with_suffix(SUFFIXES[fmt][0]).name}")
