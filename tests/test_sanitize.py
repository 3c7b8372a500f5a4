"""Names from files never reach the terminal (or a Markdown/HTML report) as control codes.

A model whose names hold terminal escapes (CSI clear screen, OSC window title, OSC 8
hyperlink), C1 controls, bidi overrides, newlines and rich markup is written to a real .irb
file and run through every command that prints it; the output must hold none of those
characters raw, show the markup as text, and keep every line irbridge printed itself.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from irbridge import serde
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType
from irbridge.sanitize import clean, clean_lines, html_text, is_clean, markdown

runner = CliRunner()
F32 = DType.FLOAT32

CSI_CLEAR = "\x1b[2J\x1b[H"
OSC_TITLE = "\x1b]0;pwned\x07"
OSC_LINK = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
C1_CSI = "\x9b31m"
BIDI = "\u202egpj.exe"
ISOLATE = "\u2066x\u2069"
MARKUP = "[red]red[/red] [link=https://evil.example]x[/link]"
NEWLINE = "a\nerror: forged"
HOSTILE = [CSI_CLEAR, OSC_TITLE, OSC_LINK, C1_CSI, BIDI, ISOLATE, MARKUP, NEWLINE,
           "\x00nul\x7fdel\rcr\x08bs"]

# Every character a terminal or a bidi renderer acts on; none may be printed raw.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _hostile_model() -> Model:
    name = "|".join(HOSTILE)
    model = Model(name=f"m{CSI_CLEAR}{MARKUP}")
    model.producer_name = f"prod{OSC_TITLE}"
    model.metadata["capture.method"] = f"fx{BIDI}"
    graph = Graph(name=f"g{OSC_LINK}")
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input(f"x{C1_CSI}{NEWLINE}", TensorType(F32, (1, 4)))
    w = b.parameter(Tensor(f"w{ISOLATE}", F32, (3, 4)))
    prov = Provenance(source_format="pytorch", source_op=f"aten{MARKUP}",
                      module_path=f"layer{name}", module_class="Linear")
    y = b.op("linear", [x, w], name=f"fc{CSI_CLEAR}", provenance=prov)
    y = b.op("relu", [y], name=f"relu{BIDI}", provenance=prov)
    node = graph.add_node(f"op{OSC_TITLE}{MARKUP}", [y], [f"out{NEWLINE}"],
                          output_types=[TensorType(F32, (1, 3))], domain=f"evil{C1_CSI}",
                          name="opaque")
    graph.set_outputs(node.outputs)
    return model


@pytest.fixture(scope="module")
def hostile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "hostile.irb"
    serde.save(_hostile_model(), path)
    return path


def _assert_safe(output: str) -> None:
    raw = RAW.findall(output)
    assert not raw, f"raw control characters in output: {raw!r}"
    assert "error: forged" not in output.splitlines()  # no forged line of its own


@pytest.mark.parametrize("args", [
    ["info", "{f}"],
    ["show", "{f}"],
    ["validate", "{f}"],
    ["analyze", "{f}"],
    ["analyze", "{f}", "--format", "csv"],
    ["analyze", "{f}", "--by-module"],
    ["convert", "{f}"],
    ["compare", "{f}", "{f}"],
])
def test_hostile_names_print_as_escapes(hostile_file: Path, args: list[str]) -> None:
    result = runner.invoke(app, [a.replace("{f}", str(hostile_file)) for a in args],
                           color=True)
    output = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    _assert_safe(output)
    if args[0] in ("info", "convert"):
        # The name is shown, its escapes visible and its markup as text.
        assert "m\\x1b[2J\\x1b[H[red]red[/red]" in output
    if args[0] == "show":
        assert "\\x1b" in output and "\\x9b" in output  # cells wrap at 80 columns


@pytest.mark.parametrize("fmt", ["markdown", "json"])
def test_hostile_names_in_reports(hostile_file: Path, fmt: str) -> None:
    for command in (["analyze", str(hostile_file)],
                    ["compare", str(hostile_file), str(hostile_file)]):
        result = runner.invoke(app, [*command, "--format", fmt])
        _assert_safe(result.stdout)
        if fmt == "markdown":
            # A name cannot open a link, raw HTML or split a table cell.
            assert "<" not in result.stdout.replace("\\<", "")
            assert "](https://evil" not in result.stdout


def test_error_lines_are_clean(tmp_path: Path) -> None:
    bad = tmp_path / f"x{CSI_CLEAR}\nerror: forged.irb"
    bad.write_bytes(b"not an irb file")
    result = runner.invoke(app, ["info", str(bad)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    _assert_safe(result.stderr)


def test_compare_html_escapes_names(hostile_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["compare", str(hostile_file), str(hostile_file), "-o", str(out)])
    assert result.exit_code in (0, 1), result.output
    page = out.read_text()
    _assert_safe(page)
    assert "[link=https://evil.example]" not in page or "<a href=\"https://evil" not in page


# ---------------------------------------------------------------------------------------------
# The helpers themselves
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("plain name.0", "plain name.0"),
    ("naïve 名前 ✓ émoji🙂", "naïve 名前 ✓ émoji🙂"),  # printable Unicode is kept
    (CSI_CLEAR, "\\x1b[2J\\x1b[H"),
    (OSC_TITLE, "\\x1b]0;pwned\\x07"),
    (C1_CSI, "\\x9b31m"),
    (BIDI, "\\u202egpj.exe"),
    ("a\u200bb\ufeffc", "a\\u200bb\\ufeffc"),
    ("line\nnext\ttab\r", "line\\x0anext\\x09tab\\x0d"),
    ("\u2028\u2029", "\\u2028\\u2029"),
    ("\U000e0041tag", "\\U000e0041tag"),  # tag characters (category Cf) hide text too
])
def test_clean(text: str, expected: str) -> None:
    assert clean(text) == expected
    assert is_clean(clean(text))
    assert RAW.search(clean(text)) is None


def test_clean_lines_keeps_only_newlines() -> None:
    assert clean_lines(f"a\nb{CSI_CLEAR}") == "a\nb\\x1b[2J\\x1b[H"


def test_markdown_and_html() -> None:
    assert markdown("a|b") == "a\\|b"
    assert markdown("[x](https://e)") == "\\[x\\](https://e)"
    assert markdown("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)\\>"
    assert markdown("`code`") == "\\`code\\`"
    assert markdown(f"x{CSI_CLEAR}") == "x\\\\x1b\\[2J\\\\x1b\\[H"
    assert html_text(f'<a href="x">{BIDI}</a>') == (
        "&lt;a href=&quot;x&quot;&gt;\\u202egpj.exe&lt;/a&gt;")


@pytest.mark.parametrize("fmt, name", [("dot", "g.dot"), ("html", "v.html")])
def test_viewer_files_hold_no_raw_controls(hostile_file: Path, tmp_path: Path, fmt: str,
                                           name: str) -> None:
    out = tmp_path / name
    result = runner.invoke(app, ["export", str(hostile_file), "--to", fmt, "-o", str(out)])
    assert result.exit_code == 0, result.output
    _assert_safe(out.read_text())


def test_clip_keeps_short_text_and_says_how_long_long_text_was() -> None:
    from irbridge.sanitize import clip

    assert clip("conv1") == "conv1" and clip("q" * 200) == "q" * 200
    assert clip("q" * 1_000_000) == "q" * 200 + "... (1,000,000 characters)"
    assert clip("a" * 10 + "b" * 10, 4, tail=3) == "aaaa... (20 characters) ...bbb"
    assert clip("abcdefg", 4, tail=3) == "abcdefg"  # nothing would be left out
