"""Strings from files, made safe for where they are shown: the one place that knows how.

A model file names its graphs, nodes, values, modules and metadata however it likes; printed
raw, a name holding ``ESC [2J`` clears the user's screen, ``ESC ] 0;...BEL`` sets the window
title, ``ESC ] 8`` plants a hyperlink, a right-to-left override reorders the rest of the line
and a newline forges a second ``error:`` line. Every string that came from a file goes
through one of these before it reaches the user:

* :func:`clean` for a terminal or plain text (also when piped: a pipe ends in a terminal or a
  log viewer just as often). Control and invisible format characters become visible Python
  escapes (``\\x1b``, ``\\u202e``), everything else is kept;
* :func:`markdown` for a Markdown table cell or line;
* :func:`html_text` for HTML text and attribute values.

The CLI's rich console prints with markup off (``[red]`` in a name is text, not a style) and
runs :func:`clean_lines` over everything it renders as a safety net.
"""

from __future__ import annotations

import html
import re
import unicodedata

__all__ = ["clean", "clean_lines", "clip", "html_text", "is_clean", "markdown"]

# C0 controls, DEL, C1 controls; the Unicode format characters that reorder or hide text
# (bidi embeddings, overrides and isolates, zero-width joiners, marks, BOM), line and
# paragraph separators, and lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
    "\ufff9-\ufffb\ud800-\udfff]"
)
_UNSAFE_BUT_NEWLINE = re.compile(_UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _format_char(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def clean(text: object) -> str:
    """``text`` as one printable line: control, bidi and other invisible format characters
    (newlines and tabs included) become ``\\xNN`` / ``\\uNNNN`` escapes."""
    s = text if isinstance(text, str) else str(text)
    s = _UNSAFE.sub(_escape, s)
    if not s.isprintable() and any(_format_char(ch) for ch in s):
        s = "".join(_escape_char(ch) if _format_char(ch) else ch for ch in s)
    return s


CELL_CHARS = 200
"""Longest name a terminal table shows whole: a file may name a module in a megabyte, which
a folded column would print as tens of thousands of lines."""


def clip(text: str, limit: int = CELL_CHARS, *, tail: int = 0) -> str:
    """``text`` whole when short, else its start (and its last `tail` characters) and how
    long the whole is (terminal tables, error lines; machine-readable outputs keep every
    name whole)."""
    if len(text) <= limit + tail:
        return text
    end = text[len(text) - tail:] if tail else ""
    return f"{text[:limit]}... ({len(text):,} characters){' ...' + end if end else ''}"


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clean_lines(text: str) -> str:
    """:func:`clean` that keeps newlines: for text laid out by the program itself (a rich
    table's rendered lines), where a newline is the program's and not the file's."""
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text)


def is_clean(text: str) -> bool:
    """Whether ``text`` prints as itself (nothing :func:`clean` would change)."""
    return clean(text) == text


_MD_SPECIAL = re.compile(r"([\\`|<>\[\]])")


def markdown(text: object) -> str:
    """``text`` for a Markdown table cell or line: cleaned, with the characters that would
    split a cell (``|``), open code, a link or HTML (`````, ``[``, ``]``, ``<``, ``>``) and
    the backslash itself backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", clean(text))


def html_text(text: object) -> str:
    """``text`` for HTML text or a quoted attribute value: cleaned, then ``& < > " '``
    escaped."""
    return html.escape(clean(text), quote=True)
