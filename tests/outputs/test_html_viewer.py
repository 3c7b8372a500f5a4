"""The self-contained HTML viewer in headless Chromium: it loads offline without errors,
draws something, and what it shows (details, search, collapse, colours) matches the IR and
the analysis computed here in Python."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import PageLog, open_page
from typer.testing import CliRunner

from irbridge import serde
from irbridge.analysis import analyze, resolve_target
from irbridge.builder import GraphBuilder
from irbridge.cli.main import app
from irbridge.converters import html
from irbridge.dtypes import DType
from irbridge.errors import IrbridgeError
from irbridge.formats import load_model
from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType
from irbridge.sanitize import clean_lines

F32 = DType.FLOAT32
EVIL = 'evil</script><script>window.PWNED=1</script><!--&amp;\u2028"\''
READY = "body[data-ready='1']"


# -- models ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def resnet() -> Model:
    return load_model("resnet18")


@pytest.fixture(scope="module")
def resnet_html(resnet: Model, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return html.write(resnet, tmp_path_factory.mktemp("html") / "resnet18.html")


def mlp_stack(blocks: int, *, evil: bool = False) -> Model:
    """A transformer-like stack, 13 ops a block, with module paths three levels deep."""
    model = Model(name="stack", source_format="test")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (4, 32)))

    def at(path: str) -> Provenance:
        return Provenance(source_format="test", module_path=path)

    for i in range(blocks):
        base = f"encoder.layer.{i}"
        if evil and i == 0:
            base = f"encoder.layer.{EVIL}"
        w1 = b.parameter(Tensor(f"{base}.fc1.weight", F32, (64, 32)))
        w2 = b.parameter(Tensor(f"{base}.fc2.weight", F32, (32, 64)))
        g = b.parameter(Tensor(f"{base}.norm.weight", F32, (32,)))
        beta = b.parameter(Tensor(f"{base}.norm.bias", F32, (32,)))
        h = b.op("linear", [x, w1], provenance=at(f"{base}.mlp.fc1"),
                 name=EVIL if evil and i == 0 else None)
        h = b.op("relu", [h], provenance=at(f"{base}.mlp.act"))
        h = b.op("linear", [h, w2], provenance=at(f"{base}.mlp.fc2"))
        h = b.op("add", [h, x], provenance=at(base))
        m = b.op("reduce_mean", [h], {"axes": (-1,), "keepdims": True},
                 provenance=at(f"{base}.norm"))
        d = b.op("sub", [h, m], provenance=at(f"{base}.norm"))
        v = b.op("mul", [d, d], provenance=at(f"{base}.norm"))
        v = b.op("reduce_mean", [v], {"axes": (-1,), "keepdims": True},
                 provenance=at(f"{base}.norm"))
        v = b.op("sqrt", [v], provenance=at(f"{base}.norm"))
        n = b.op("div", [d, v], provenance=at(f"{base}.norm"))
        n = b.op("mul", [n, g], provenance=at(f"{base}.norm"))
        n = b.op("add", [n, beta], provenance=at(f"{base}.norm"))
        x = b.op("tanh", [n], provenance=at(f"{base}.out"))
    graph.set_outputs([x])
    return model


# -- page helpers ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser_page(resnet_html: Path) -> Iterator[tuple[Any, PageLog]]:
    """One Chromium for the module (Playwright's sync API allows one at a time)."""
    with open_page(resnet_html) as (page, log):
        yield page, log


def visit(browser_page: tuple[Any, PageLog], path: Path) -> tuple[Any, PageLog, float]:
    """Load `path` afresh with an empty log; returns the page, log and seconds to ready."""
    page, log = browser_page
    for problems in (log.console_errors, log.page_errors, log.requests):
        problems.clear()
    start = time.perf_counter()
    page.goto(path.resolve().as_uri())
    page.wait_for_selector(READY)
    return page, log, time.perf_counter() - start


@pytest.fixture
def page(browser_page: tuple[Any, PageLog], resnet_html: Path) -> Iterator[Any]:
    """The resnet18 page, freshly loaded; fails the test on any console error or request."""
    page, log, _ = visit(browser_page, resnet_html)
    yield page
    assert log.problems == [] and log.requests == []


def visible_count(page: Any) -> int:
    count: int = page.locator("#nodes > g.node").count()
    assert str(count) == page.get_attribute("body", "data-visible")
    return count


def click_item(page: Any, selector: str, *, double: bool = False) -> None:
    """Centre the item (it may lie outside the window) and click it like a user."""
    key = page.get_attribute(selector, "data-key")
    page.evaluate("key => irbViewer.focus(key)", key)
    if double:
        page.dblclick(selector)
    else:
        page.click(selector)


def png_stats(path: Path) -> tuple[float, int]:
    """Standard deviation of the grey levels and the number of distinct colours."""
    from PIL import Image, ImageStat

    with Image.open(path) as image:
        rgb = image.convert("RGB")
        return ImageStat.Stat(rgb.convert("L")).stddev[0], len(rgb.getcolors(1 << 24) or [])


# -- tests -----------------------------------------------------------------------------------

def test_loads_offline_without_errors_and_draws_a_non_blank_screenshot(
        browser_page: tuple[Any, PageLog], resnet_html: Path, tmp_path: Path) -> None:
    text = resnet_html.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    page, log, _ = visit(browser_page, resnet_html)
    shot = tmp_path / "resnet18.png"
    page.screenshot(path=str(shot))
    assert log.problems == [] and log.requests == []
    assert page.inner_text("#model-name") == "resnet18"
    stddev, colours = png_stats(shot)
    assert stddev > 15 and colours > 50, (stddev, colours)


def test_clicking_a_node_shows_its_shapes_cost_and_mapping(page: Any, resnet: Model) -> None:
    node = next(n for n in resnet.graph.nodes if n.provenance.module_path == "layer2.0.conv1")
    run = analyze(resnet, [resolve_target("h100-sxm")]).runs[0]
    flops = run.costs.by_node[id(node)].cost.flops
    pid = run.partitioning.of_node[node.id]
    bound = next(r.bound for r in run.mappings[0].estimates if r.partition.id == pid)
    click_item(page, f"#nodes g.node[data-id='{node.id}']")
    details = page.locator("#details")
    assert details.locator("[data-field=op]").inner_text() == node.op == "conv"
    assert str(node.outputs[0].type) in details.locator("[data-field=outputs]").inner_text()
    assert details.locator("[data-field=flops]").inner_text() == f"{flops:,}"
    assert flops > 0
    assert details.locator("[data-field=bound]").inner_text() == bound
    assert details.locator("[data-field=module]").inner_text() == "layer2.0.conv1"
    assert page.locator(f"#nodes g.node.selected[data-id='{node.id}']").count() == 1


def test_search_by_op_highlights_exactly_the_ir_nodes_of_that_op(page: Any,
                                                                 resnet: Model) -> None:
    ops = Counter(n.op for n in resnet.graph.nodes)
    page.click("#expand-all")
    for op in ("batch_norm", "add"):
        page.fill("#search", f"op:{op}")
        assert page.locator("#nodes g.node.match").count() == ops[op]
        assert page.get_attribute("#search-status", "data-count") == str(ops[op])
    page.fill("#search", "layer3.1")
    expected = sum("layer3.1" in n.provenance.module_path for n in resnet.graph.nodes)
    assert page.locator("#nodes g.node.match").count() == expected > 0
    # Collapsed, the matches are counted on their modules' boxes.
    page.click("#collapse-all")
    page.fill("#search", "op:conv")
    assert page.get_attribute("#search-status", "data-count") == str(ops["conv"])
    badges = page.locator("#nodes g.node.group.match .badge-t").all_text_contents()
    shown = page.locator("#nodes g.node.match:not(.group)").count()
    assert sum(int(b) for b in badges) + shown == ops["conv"]
    page.fill("#search", "")
    assert page.locator("#nodes g.node.match").count() == 0


def test_expand_and_collapse_change_the_visible_nodes(page: Any, resnet: Model) -> None:
    page.select_option("#depth", "1")
    shallow = visible_count(page)
    assert page.locator("#nodes g.node.group[data-group='layer2']").count() == 0
    # layer2 is expanded at depth 1: its blocks 0 and 1 are collapsed boxes.
    block = "#nodes g.node.group[data-group='layer2.0']"
    click_item(page, block, double=True)
    expanded = visible_count(page)
    in_block = sum(n.provenance.module_path.startswith("layer2.0.")
                   or n.provenance.module_path == "layer2.0" for n in resnet.graph.nodes)
    assert expanded > shallow
    assert page.locator(block).count() == 0
    # Collapse it again from a member's details panel.
    node = next(n for n in resnet.graph.nodes if n.provenance.module_path == "layer2.0.bn1")
    click_item(page, f"#nodes g.node[data-id='{node.id}']")
    page.click("#details button:has-text('Collapse layer2.0')")
    assert visible_count(page) == shallow
    assert page.locator(block).count() == 1
    # The group's details list its totals and expand it back.
    click_item(page, block)
    assert page.locator("#details [data-field=ops]").inner_text() == str(in_block)
    page.click("#toggle-group")
    assert visible_count(page) == expanded
    page.click("#collapse-all")
    assert visible_count(page) < shallow


def test_colour_by_switches_the_fills(page: Any) -> None:
    def fills() -> list[str]:
        result: list[str] = page.eval_on_selector_all(
            "#nodes g.node:not(.io) rect.box", "rs => rs.map(r => r.getAttribute('fill'))")
        return result

    page.click("#expand-all")
    by_bound = fills()
    assert set(by_bound) <= {"#fdb863", "#92c5de", "#eeeeee", "#ffffff"}
    assert {"#fdb863", "#92c5de"} <= set(by_bound)
    page.select_option("#color-by", "latency")
    assert page.get_attribute("body", "data-color") == "latency"
    by_latency = fills()
    assert by_latency != by_bound and len(set(by_latency)) > 5
    assert "Latency" in page.inner_text("#legend")
    page.select_option("#color-by", "category")
    by_op = dict(zip(page.eval_on_selector_all(
        "#nodes g.node:not(.io)", "gs => gs.map(g => g.dataset.op)"), fills(), strict=True))
    assert by_op["conv"] != by_op["batch_norm"]


def test_strings_that_look_like_markup_stay_text(browser_page: tuple[Any, PageLog],
                                                 tmp_path: Path) -> None:
    model = mlp_stack(2, evil=True)
    model.name = "</title><script>window.PWNED=2</script>"
    out = html.write(model, tmp_path / "evil.html")
    text = out.read_text(encoding="utf-8")
    assert text.count("<script") == 2 and "</title><script>" not in text
    page, log, _ = visit(browser_page, out)
    page.click("#expand-all")
    node = model.graph.nodes[0]
    click_item(page, f"#nodes g.node[data-id='{node.id}']")
    module = page.locator("#details [data-field=module]").text_content()
    # shown as text, with its control / line-separator characters made visible
    assert module == clean_lines(node.provenance.module_path)
    assert page.evaluate("typeof window.PWNED") == "undefined"
    assert page.inner_text("#model-name") == model.name
    assert page.title().startswith(model.name)
    assert log.problems == [] and log.requests == []


def test_a_600_node_graph_loads_fast_and_starts_collapsed(browser_page: tuple[Any, PageLog],
                                                          tmp_path: Path) -> None:
    model = mlp_stack(48)
    assert len(model.graph.nodes) >= 600
    out = html.write(model, tmp_path / "stack.html")
    page, log, elapsed = visit(browser_page, out)
    assert visible_count(page) <= 80
    assert page.locator("#nodes g.node.group").count() > 0
    page.click("#expand-all")
    assert visible_count(page) == len(model.graph.nodes) + 2  # and the input and output
    assert log.problems == [] and log.requests == []
    assert elapsed < 5, f"{elapsed:.1f} s to load"


@pytest.mark.slow
def test_gpt2_loads_within_seconds_and_starts_collapsed(browser_page: tuple[Any, PageLog],
                                                        tmp_path: Path) -> None:
    model = load_model("gpt2")
    ops = len(model.graph.nodes)
    assert ops > 500
    out = html.write(model, tmp_path / "gpt2.html")
    page, log, elapsed = visit(browser_page, out)
    assert visible_count(page) <= 80 < ops
    assert page.locator("#nodes g.node.group").count() > 0
    page.fill("#search", "op:linear")
    linear = sum(n.op == "linear" for n in model.graph.nodes)
    assert page.get_attribute("#search-status", "data-count") == str(linear)
    page.click("#expand-all")
    assert visible_count(page) == ops + len(model.graph.inputs) + len(model.graph.outputs)
    assert log.problems == [] and log.requests == []
    assert elapsed < 10, f"{elapsed:.1f} s to load"


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    model = mlp_stack(1)
    out = tmp_path / "m.html"
    with pytest.raises(IrbridgeError, match="unknown target 'nope'") as err:
        html.write(model, out, hardware="nope")
    assert "\n" not in str(err.value)
    with pytest.raises(IrbridgeError, match="does not exist"):
        html.write(model, tmp_path / "missing" / "m.html")
    (tmp_path / "folder.html").mkdir()
    with pytest.raises(IrbridgeError, match="is a folder"):
        html.write(model, tmp_path / "folder.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.html"]


def test_cli_export_to_html(tmp_cwd: Path, resnet: Model) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["export", "resnet18", "--to", "html", "-o", "r.html"])
    assert result.exit_code == 0, result.output
    text = (tmp_cwd / "r.html").read_text(encoding="utf-8")
    found = re.search(r'id="irb-data">(.*?)</script>', text, re.S)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["model"]["ops"] == len(resnet.graph.nodes)
    assert data["model"]["target"] == "h100-sxm"
    # Bad input through the CLI: one line on stderr, exit 2, nothing written.
    serde.save(mlp_stack(1), tmp_cwd / "s.irb")
    bad = runner.invoke(app, ["export", "s.irb", "--to", "html", "--hardware", "nope",
                              "-o", "s.html"])
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "unknown target 'nope'" in bad.stderr
    assert not (tmp_cwd / "s.html").exists()
