"""Hostile or odd-but-valid files found by hunting beyond the mutation fuzz (issue 12's
contract: exit 0 with correct output, or exit 2 with one `error:` line; nothing written
on failure). Each test names what broke before its fix. Format-specific importer cases
live in tests/onnx/test_onnx_hostile.py and tests/stablehlo/test_stablehlo_hostile.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hostile_cli import assert_one_line_error, make_special, run_cli

from irbridge import serde
from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType


def _relu_of_rank(path: Path, rank: int) -> Path:
    model = Model(name="rank")
    graph = Graph("main")
    model.graphs.append(graph)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1,) * rank))
    graph.set_outputs([GraphBuilder(graph, model).op("relu", [x])])
    serde.save(model, path)
    return path


@pytest.mark.parametrize(("rank", "ran"), [(64, True), (65, False), (300, False)])
def test_compare_of_inputs_past_numpys_rank_limit_reports_why(tmp_path: Path, rank: int,
                                                              ran: bool) -> None:
    # found by hunting: an input of 300 dims (valid in ONNX and the IR) made compare's
    # example inputs raise numpy's ValueError, an internal error
    path = _relu_of_rank(tmp_path / "r.irb", rank)
    result = run_cli("compare", path, path, "--format", "json", cwd=tmp_path)
    # exit 1: compare's documented "found differences" (numbers not compared is one)
    assert result.returncode == (0 if ran else 1), result.stderr[-2000:]
    assert not result.stderr.strip()
    numerics = json.loads(result.stdout)["numerics"]
    assert numerics["ran"] is ran
    if not ran:
        assert numerics["reason"] == (f"input 'x' has {rank} dims; numpy arrays hold at most "
                                      "64, cannot make an example for it")


_EVIL = 'm"\n<b>,x\ninjected: 1\n# \x1b[2J\u2028</script>|`'
"""A name that tries to end a YAML comment, forge CSV rows and Markdown/HTML."""


def _evil_conv_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    model = Model(name=_EVIL)
    graph = Graph("main")
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1, 3, 8, 8)))
    w = b.parameter(Tensor.from_array("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)))
    y = b.op("conv", [x, w], {"strides": (1, 1), "pads": (1, 1, 1, 1)}, name="conv",
             provenance=Provenance(module_path=_EVIL))
    y = b.op("flatten", [y], {"start_axis": 1})
    w2 = b.parameter(Tensor.from_array("fc", rng.standard_normal((16, 256)).astype(np.float32)))
    graph.set_outputs([b.op("linear", [y, w2], provenance=Provenance(module_path="head"))])
    serde.save(model, path)
    return path


def test_simulator_files_keep_names_from_the_model_inside_their_syntax(tmp_path: Path) -> None:
    # found by hunting: a newline in the model name or a module path ended Timeloop's YAML
    # header comment (the rest of the name became YAML: here a key `injected`), forged rows
    # in SCALE-Sim's layers.csv, and went raw into its README.md
    path = _evil_conv_model(tmp_path / "evil.irb")
    for target in ("timeloop", "scalesim"):
        result = run_cli("export", path, "--to", target, "-o", tmp_path / target, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    problems = sorted((tmp_path / "timeloop").glob("0*.yaml"))
    assert len(problems) == 2
    for problem in problems:
        text = problem.read_text(encoding="utf-8")
        assert "\x1b" not in text and "\u2028" not in text
        assert list(yaml.safe_load(text)) == ["problem"], text[:300]
    folder = tmp_path / "scalesim"
    with (folder / "layers.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["node"], r["op"]) for r in rows] == [("0", "conv"), ("2", "linear")]
    assert "\n" not in rows[0]["module_path"] and "injected" in rows[0]["module_path"]
    assert rows[1]["module_path"] == "head"
    title, blank = (folder / "README.md").read_text(encoding="utf-8").splitlines()[:2]
    assert title.startswith("# SCALE-Sim inputs for m") and "injected" in title
    assert blank == "" and "</script>" not in title and "\x1b" not in title


def test_small_weights_read_from_a_sidecar_export_to_stablehlo(tmp_path: Path) -> None:
    # found by hunting: a sidecar tensor loaded as a "<f4" array (no copy) and MLIR's
    # bindings refused its "<f" buffer: `export --to stablehlo` ended in an internal error
    from irbridge.converters.stablehlo import export_stablehlo
    from irbridge.converters.stablehlo.evaluate import evaluate

    weight = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    model = Model(name="side")
    graph = Graph("main")
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (2, 4)))
    graph.set_outputs([b.op("add", [x, b.parameter(Tensor.from_array("w", weight))])])
    path = tmp_path / "side.irb"
    serde.save(model, path, weights="external", external_threshold=0)
    assert len(list(tmp_path.glob("side.irb.*.data"))) == 1
    out = export_stablehlo(serde.load(path), tmp_path / "side.mlir")
    feed = np.full((2, 4), 0.5, dtype=np.float32)
    (got,) = evaluate(out, [feed])
    assert np.array_equal(got, feed + weight)  # exact: one f32 addition of dyadic values


@pytest.mark.parametrize("command", [["convert"], ["export", "--to", "html"],
                                     ["export", "--to", "dot"], ["analyze"]])
def test_an_output_path_with_a_newline_is_reported_on_one_line(tmp_path: Path,
                                                               command: list[str]) -> None:
    # found by hunting: "wrote PATH" printed the path raw for some commands, so a newline
    # in it split the line (and analyze printed an escape sequence as is)
    path = _relu_of_rank(tmp_path / "m.irb", 2)
    suffix = {"convert": ".irb", "html": ".html", "dot": ".dot", "analyze": ".irb"}
    out = tmp_path / f"a\nb\x1b[2J{suffix[command[-1]]}"
    first, *rest = command
    result = run_cli(first, path, *rest, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert out.exists() and "\x1b" not in result.stdout + result.stderr
    wrote = [line for line in (result.stdout + result.stderr).splitlines()
             if line.startswith("wrote ")]
    assert len(wrote) == 1 and "a\\x0ab\\x1b[2J" in wrote[0], wrote


def test_text_files_with_a_byte_order_mark_read_like_without(tmp_path: Path) -> None:
    # found by hunting: an .irbt or .mlir saved by an editor that writes a UTF-8 byte order
    # mark was refused ("missing .irb magic bytes", "malformed MLIR: unexpected character")
    from irbridge.converters.stablehlo import export_stablehlo, import_stablehlo

    plain = _relu_of_rank(tmp_path / "plain.irbt", 3)
    mlir = export_stablehlo(serde.load(plain), tmp_path / "plain.mlir")
    for source in (plain, mlir):
        marked = tmp_path / f"bom{source.suffix}"
        marked.write_bytes(b"\xef\xbb\xbf" + source.read_bytes().replace(b"\n", b"\r\n"))
        load = serde.load if source.suffix == ".irbt" else import_stablehlo
        want, got = load(source), load(marked)
        assert [(n.op, n.outputs[0].type) for n in got.graph.nodes] == \
            [(n.op, n.outputs[0].type) for n in want.graph.nodes]
        assert [v.type for v in got.graph.inputs] == [v.type for v in want.graph.inputs]


@pytest.mark.parametrize(("kind", "needle"), [
    ("fifo", "not a regular file, not a target file"),  # blocked forever
    ("device", "not a regular file, not a target file"),  # read until out of memory
    ("digits", "not a usable YAML file (ValueError: Exceeds the limit"),  # internal error
    ("nested", "not a usable YAML file (RecursionError"),  # named no file
    ("latin1", "not UTF-8 text"),  # internal error
    ("big", "too big for a target file"),
])
def test_a_hostile_hardware_file_is_one_line(tmp_path: Path, kind: str, needle: str) -> None:
    # found by hunting: `--hardware FILE` read any path whole with read_text
    model = _relu_of_rank(tmp_path / "m.irb", 2)
    target = tmp_path / "t.yaml"
    if not make_special(target, kind):
        target.write_bytes({"digits": b"name: " + b"9" * 5000 + b"\n",
                            "nested": b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
                            "latin1": b"name: caf\xe9\n",
                            "big": b"# " + b"x" * (2 << 20) + b"\n"}[kind])
    assert_one_line_error(run_cli("analyze", model, "--hardware", target, cwd=tmp_path,
                                  timeout=60), str(target), needle)
