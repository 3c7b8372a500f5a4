"""Graphviz pictures of a model: DOT text, and SVG / PNG rendered by the `dot` program.

Public API:

* `write(model, path, hardware=NAME, fmt="dot"|"svg"|"png", depth="auto") -> Path`:
  atomically write the picture; graphs of more than ~300 nodes are collapsed to a module
  depth that stays readable (`depth=N` fixes it, `depth=None` draws every op).
* `to_dot(view) -> str`: the DOT text of an `irbridge.graphview.View`.
* `render(text, fmt, out)`: run `dot -T<fmt>`; `find_dot()` locates the binary.

Fill colours by roofline bound are `BOUND_COLOURS`; fused kernels are `cluster_k<ID>`
subgraphs when the graph is not collapsed. See docs/viewers.md.
"""

from irbridge.converters.graphviz.writer import (
    BOUND_COLOURS,
    FORMATS,
    UNKNOWN_COLOUR,
    find_dot,
    render,
    to_dot,
    write,
)

__all__ = ["BOUND_COLOURS", "FORMATS", "UNKNOWN_COLOUR", "find_dot", "render", "to_dot",
           "write"]
