"""A self-contained HTML viewer of an IR model: one file with the graph, its analysis and a
small vanilla-JS/SVG app inlined, so it opens from disk with no network and no install.

    irbridge export resnet18 --to html -o resnet18.html [--hardware h100-sxm]

The browser lays out only the visible graph (modules start collapsed to a depth that keeps
it small), so 500+ node models stay responsive; see docs/viewers.md ("HTML viewer")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from irbridge.analysis import resolve_target
from irbridge.atomic import atomic_file
from irbridge.converters.html._data import view_data
from irbridge.converters.html._script import SCRIPT
from irbridge.converters.html._style import BODY, STYLE
from irbridge.errors import IrbridgeError
from irbridge.ir import Model
from irbridge.sanitize import clean_lines, html_text

__all__ = ["embed_json", "render", "view_data", "write"]

# Characters that could end the <script> element or start markup inside it, and the two
# line separators JavaScript once treated as newlines; JSON keeps their meaning as escapes.
_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
           "\u2029": "\\u2029"}


def embed_json(data: Any) -> str:
    """JSON that is safe inside a <script> element whatever its strings hold (a module
    named `</script>` must not end the element)."""
    text = json.dumps(_clean_strings(data), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    return "".join(_UNSAFE.get(ch, ch) for ch in text) if any(
        ch in text for ch in _UNSAFE) else text


def _clean_strings(data: Any) -> Any:
    """Every string in the page's data with control and bidi characters made visible (see
    irbridge.sanitize): the viewer shows names as text, where a right-to-left override
    would reorder what follows it."""
    if isinstance(data, str):
        return clean_lines(data)
    if isinstance(data, dict):
        return {_clean_strings(k): _clean_strings(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_clean_strings(v) for v in data]
    return data


def render(model: Model, hardware: str = "h100-sxm") -> str:
    """The page as a string: analysis on `hardware` (a catalog name or a target .yaml)."""
    if not model.graphs:
        raise IrbridgeError("the model has no graph to show")
    target = resolve_target(hardware)
    data = view_data(model, target)
    title = html_text(f"{data['model']['name']} · irbridge viewer")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        # No network: the page may load nothing but itself (and inline data: images).
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>{BODY}"
        f"<script type=\"application/json\" id=\"irb-data\">{embed_json(data)}</script>\n"
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n")


def write(model: Model, path: Path, *, hardware: str = "h100-sxm") -> Path:
    """Write the viewer for `model` to `path` atomically (nothing is written on error)."""
    path = Path(path)
    page = render(model, hardware)
    with atomic_file(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
