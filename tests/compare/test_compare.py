"""Comparison on small models (fast): pairs that differ in one known layer, identical pairs,
unrelated models, bad sides, the CLI and the HTML report in a headless browser."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from toys import SmallMLP, base_cnn, cnn_input, extra_activation, side, wider_kernel
from typer.testing import CliRunner

from irbridge import serde
from irbridge.cli.main import app
from irbridge.compare import compare_models, load_side, match, normalize_path, to_dict
from irbridge.compare.html import write_html
from irbridge.compare.numeric import _random_for, errors_of
from irbridge.compare.report import to_markdown
from irbridge.compare.sources import Side
from irbridge.converters.onnx import export_onnx, import_onnx
from irbridge.dtypes import DType
from irbridge.ir import TensorType, Value


def flagged_modules(result) -> set[str]:  # type: ignore[no-untyped-def]
    return {d.module for d in result.differences}


def test_module_paths_are_normalised() -> None:
    assert normalize_path("/layer1/layer1.0/conv1") == "layer1.0.conv1"
    assert normalize_path("L['self'].layer1[0].conv1") == "layer1.0.conv1"
    assert normalize_path("_orig_mod.encoder.layer.0") == "encoder.layer.0"
    assert normalize_path("") == ""


def test_identical_captures_match_fully_with_equal_numbers() -> None:
    model, x = base_cnn(), cnn_input()
    result = compare_models(side(model, x), side(model, x))
    assert result.differences == []
    assert result.matching is not None and result.numerics is not None
    assert result.matching.compute_counts("left") == (3, 3)  # conv1, conv2, head
    assert {g.kind for g in result.matching.groups} == {"same"}
    # the same IR run twice by the same executor: bit-identical
    assert result.numerics.ran and result.numerics.max_abs == 0.0
    assert result.numerics.values


def test_changed_kernel_is_the_only_difference() -> None:
    model, x = base_cnn(), cnn_input()
    result = compare_models(side(model, x), side(wider_kernel(model), x))
    kinds = {d.kind for d in result.differences}
    assert flagged_modules(result) == {"conv2"}, result.differences
    assert "changed" in kinds and "numeric" in kinds
    changed = next(d for d in result.differences if d.kind == "changed")
    assert "weight 1 f32[8,8,3,3] vs f32[8,8,5,5]" in changed.message
    # 5x5 against 3x3 over an 8->8 channel 16x16 map: MACs 8*8*25*256 vs 8*8*9*256
    assert "409,600" in changed.message and "147,456" in changed.message
    cost = next(d for d in result.differences if d.kind == "cost")
    assert cost.module == "conv2"


def test_extra_activation_is_the_only_difference() -> None:
    model, x = base_cnn(), cnn_input()
    result = compare_models(side(model, x), side(extra_activation(model), x))
    assert flagged_modules(result) == {"extra"}, result.differences
    unmatched = next(d for d in result.differences if d.kind == "unmatched")
    assert "only on the right" in unmatched.message and "tanh" in unmatched.message
    numeric = next(d for d in result.differences if d.kind == "numeric")
    assert numeric.module == "extra"
    assert result.matching is not None
    assert result.matching.compute_match_ratio("left") == 1.0
    assert result.matching.compute_match_ratio("right") == 1.0


def test_default_spelled_attributes_are_not_a_change() -> None:
    # ONNX files spell dilations [1,1] and strides [1,1]; StableHLO (JAX, torch-mlir) leaves
    # them out: the same convolution, which must not be flagged as a changed layer
    model, x = base_cnn(), cnn_input()
    right = side(model, x)
    convs = [n for n in right.model.graphs[0].nodes if n.op == "conv"]
    assert [n.attrs["dilations"] for n in convs] == [(1, 1), (1, 1)]
    for node in convs:
        node.attrs["dilations"] = ()
        node.attrs["strides"] = ()
    result = compare_models(side(model, x), right)
    assert result.differences == []
    # a value other than the default is still a difference
    convs[1].attrs["dilations"] = (2, 2)
    changed = compare_models(side(model, x), right, numerics=False).differences
    assert {d.module for d in changed} == {"conv2"}
    assert "dilations [1,1] vs [2,2]" in next(d for d in changed if d.kind == "changed").message
    from irbridge.ops import registry

    spec = next(a for a in registry.get("conv").attrs if a.name == "dilations")
    assert spec.same((1, 1), ()) and spec.same((), (1, 1, 1)) and spec.same((), ())
    assert not spec.same((2, 1), ()) and not spec.same((1, 1), (1, 2))
    pads = next(a for a in registry.get("conv").attrs if a.name == "pads")
    assert pads.same((0, 0, 0, 0), ()) and not pads.same((1, 1, 1, 1), ())


def test_irbridge_onnx_round_trip_matches_by_structure_without_provenance(
        tmp_path: Path) -> None:
    model, x = base_cnn(), cnn_input()
    left = side(model, x)
    assert left.model is not None
    onnx_model = import_onnx(export_onnx(left.model, tmp_path / "cnn.onnx"))
    for _, node in onnx_model.all_nodes():  # drop provenance: structure must carry it
        node.provenance.module_path = ""
        node.provenance.source_node = ""
    right = Side(str(tmp_path / "cnn.onnx"), "file", onnx_model)
    result = compare_models(left, right)
    assert result.matching is not None and result.matching.mode == "structure"
    assert result.matching.compute_counts("left") == (3, 3)
    assert result.matching.compute_counts("right") == (3, 3)
    assert result.numerics is not None and result.numerics.ran
    # float32 through the same reference kernels, ops regrouped: a few ulps at most
    assert result.numerics.first_divergence is None
    assert result.numerics.max_rel < 1e-5
    assert result.costs is not None
    assert result.costs.total.left.matmul_flops == result.costs.total.right.matmul_flops


def test_unrelated_models_say_so_instead_of_failing() -> None:
    torch.manual_seed(0)
    mlp = SmallMLP().eval()
    result = compare_models(side(base_cnn(), cnn_input()), side(mlp, torch.randn(2, 16)))
    messages = [d.message for d in result.differences]
    assert any("% of compute nodes matched" in m for m in messages)
    assert any(m.startswith("numbers not compared: input signatures differ") for m in messages)
    assert result.numerics is not None and not result.numerics.ran


def test_mismatched_input_signatures_are_reported() -> None:
    torch.manual_seed(0)
    narrow, wide = SmallMLP(16).eval(), SmallMLP(24).eval()
    result = compare_models(side(narrow, torch.randn(2, 16)), side(wide, torch.randn(2, 24)))
    assert result.numerics is not None and not result.numerics.ran
    assert "input signatures differ" in result.numerics.reason
    assert "f32[2,16]" in result.numerics.reason and "f32[2,24]" in result.numerics.reason
    changed = [d for d in result.differences if d.kind == "changed"]
    assert [d.module for d in changed] == ["fc1"]


def test_a_side_that_fails_to_load_is_reported_with_its_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a protobuf at all")
    bad = load_side(str(broken), None)
    assert not bad.ok and bad.error
    result = compare_models(side(base_cnn(), cnn_input()), bad)
    assert result.matching is None
    assert result.differences[0].kind == "capture"
    assert "right side broken.onnx failed to capture" in result.differences[0].message
    assert bad.error in result.differences[0].message
    assert to_dict(result)["right"]["error"] == bad.error


def test_errors_are_measured_against_the_left_magnitude() -> None:
    left = np.array([1.0, -4.0, 0.0], dtype=np.float32)
    right = np.array([1.0, -4.5, 0.25], dtype=np.float32)
    assert errors_of(left, right) == (0.5, 0.125, 4.0)
    nan = np.array([np.nan, 1.0])
    assert errors_of(nan, nan)[0] == 0.0
    assert errors_of(nan, np.array([0.0, 1.0]))[0] == float("inf")
    # infinities equal on both sides are no error (and raise no numpy warning: the CLI
    # would print it as a warning line)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert errors_of(np.array([np.inf, 2.0]), np.array([np.inf, 2.0])) == (0.0, 0.0, 2.0)


def test_complex_errors_count_the_imaginary_parts() -> None:
    """Found by hunting: compare cast complex outputs to float64, dropping the imaginary
    parts (a numpy ComplexWarning line, and no difference seen where only they differ)."""
    left = np.array([3 + 4j, 1j], dtype=np.complex64)
    right = np.array([3 + 4j, 1.5j], dtype=np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert errors_of(left, right) == (0.5, 0.1, 5.0)  # |0.5j| over max |3+4j| = 5
    value = Value("z", TensorType(DType.COMPLEX64, (1000,)))
    example = _random_for(value, np.random.default_rng(0))
    assert example.dtype == np.complex64 and np.abs(example.imag).max() > 1.0


@pytest.fixture
def toy_files(tmp_path: Path) -> tuple[Path, Path]:
    model, x = base_cnn(), cnn_input()
    left, right = side(model, x), side(wider_kernel(model), x)
    assert left.model is not None and right.model is not None
    return (serde.save(left.model, tmp_path / "base.irb"),
            serde.save(right.model, tmp_path / "wider.irb"))


def test_cli_json_and_markdown(toy_files: tuple[Path, Path], tmp_path: Path) -> None:
    base, wider = toy_files
    runner = CliRunner()
    same = runner.invoke(app, ["compare", str(base), str(base), "--format", "json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["differences"] == []
    report = tmp_path / "report.md"
    run = runner.invoke(app, ["compare", str(base), str(wider), "--format", "json",
                              "-o", str(report)])
    assert run.exit_code == 1, run.output  # something flagged
    data = json.loads(run.stdout)
    assert {d["module"] for d in data["differences"]} == {"conv2"}
    assert data["matching"]["compute_matched"]["left"] == {"matched": 3, "total": 3}
    text = report.read_text()
    assert text.startswith("# base.irb vs wider.irb") and "**changed** conv2" in text
    table = runner.invoke(app, ["compare", str(base), str(wider)])
    assert table.exit_code == 1 and "changed conv2" in table.stdout


def test_cli_bind_applies_to_the_file_that_has_the_dim(tmp_path: Path) -> None:
    # the same matmul exported with a dynamic batch and with batch 2: one --bind serves
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    paths = []
    for name, batch in (("dynamic", "batch"), ("static", 2)):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w])
        path = tmp_path / f"{name}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        paths.append(str(path))
    runner = CliRunner()
    for pair in (paths, paths[::-1]):
        run = runner.invoke(app, ["compare", *pair, "--bind", "batch=2", "--format", "json"])
        assert run.exit_code == 0, run.output
        data = json.loads(run.stdout)
        assert data["differences"] == []
    # an IR file binds on its value types: the same
    dynamic_ir = tmp_path / "dynamic.irb"
    serde.save(import_onnx(paths[0]), dynamic_ir)
    run = runner.invoke(app, ["compare", str(dynamic_ir), paths[1], "--bind", "batch=2"])
    assert run.exit_code == 0, run.output
    # a name neither file has is still refused, in one line naming both
    run = runner.invoke(app, ["compare", *paths, "--bind", "seq=2"])
    assert run.exit_code == 2
    [line] = run.output.strip().splitlines()
    assert line == (f"error: cannot bind 'seq': no symbolic dim of {paths[0]} or {paths[1]} "
                    "is named so")


def test_cli_bad_input_is_one_line(toy_files: tuple[Path, Path]) -> None:
    base, _ = toy_files
    runner = CliRunner()
    for option in ("-o", "--html"):  # refused before the report is printed
        target = base.parent / "missing" / "report.json"
        run = runner.invoke(app, ["compare", str(base), str(base), option, str(target)])
        assert run.exit_code == 2 and run.stdout == "", run.output
        assert run.stderr == f"error: {target}: folder {target.parent} does not exist\n"
    run = runner.invoke(app, ["compare", str(base), str(base), "--left", "dynamo"])
    assert run.exit_code == 2
    assert "is a model file; --left dynamo applies to a model name only" in run.output
    run = runner.invoke(app, ["compare", str(base), str(base), "-o", "report.txt"])
    assert run.exit_code == 2 and "use .html, .json or .md" in run.output
    run = runner.invoke(app, ["compare", str(base), "missing.onnx"])
    assert run.exit_code == 2 and "missing.onnx: no such file" in run.output


def test_markdown_lists_groups_and_costs() -> None:
    model, x = base_cnn(), cnn_input()
    result = compare_models(side(model, x), side(wider_kernel(model), x), numerics=False)
    text = to_markdown(result)
    # 2 x MACs: 294,912 and 819,200 FLOPs (MACs in test_changed_kernel...)
    assert "| conv2 | 295 k | 819 k | +177.78% |" in text
    assert "## Groups" in text


def test_html_report_opens_in_a_headless_browser(toy_files: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    from browser import open_page

    base, wider = toy_files
    result = compare_models(load_side(str(base), None), load_side(str(wider), None))
    page_file = write_html(result, tmp_path / "report.html")
    with open_page(page_file) as (page, log):
        assert log.problems == [] and log.requests == []
        changed = result.differences[0]
        assert changed.kind == "changed" and changed.group is not None
        page.click(f'#differences a[href="#g{changed.group}"]')
        assert page.evaluate("location.hash") == f"#g{changed.group}"
        row = page.inner_text(f"#g{changed.group}")
        assert "conv2" in row and "changed" in row
        total = len(result.matching.groups) if result.matching else 0
        assert page.inner_text("#shown") == f"{total} of {total} groups shown"
        page.check("#only")
        differing = sum(1 for g in result.matching.groups if g.kind != "same") \
            if result.matching else 0
        assert page.inner_text("#shown") == f"{differing} of {total} groups shown"
        assert log.problems == []


def test_matching_is_symmetric_in_its_counts() -> None:
    model, x = base_cnn(), cnn_input()
    a, b = side(model, x), side(extra_activation(model), x)
    assert a.model is not None and b.model is not None
    forward, backward = match(a.model, b.model), match(b.model, a.model)
    assert forward.compute_counts("left") == backward.compute_counts("right")
    assert [(op, x, y) for op, x, y in forward.histogram_difference()] == \
        [(op, y, x) for op, x, y in backward.histogram_difference()]


def test_differing_model_outputs_are_a_difference_even_when_matched_values_agree(
        tmp_path: Path) -> None:
    """compare reported `numbers: ... first divergence: none` and `differences: none`
    for two captures whose outputs differed (fx had dropped a KV-cache write): the
    diverging nodes were in groups the matching pairs without comparing values. The
    model outputs are now compared too (new buffer values a torch.export capture adds as
    outputs left out)."""
    from irbridge.builder import GraphBuilder
    from irbridge.ir import Graph, Model

    def model(scale: float, buffer_update: bool) -> Model:
        graph = Graph("main")
        m = Model(graphs=[graph], name="m")
        b = GraphBuilder(graph, m)
        x = graph.add_input("x", TensorType(DType.FLOAT32, (2, 3)))
        y = b.op("relu", [x])
        c = b.constant(np.full((2, 3), scale, np.float32))
        out = b.op("mul", [y, c])
        outs = [out]
        if buffer_update:   # as torch.export lists a mutated buffer's new value first
            outs = [b.op("neg", [x]), out]
            m.metadata["main.buffer_updates"] = f"{outs[0].name} -> cache"
        graph.set_outputs(outs)
        return m

    def side(scale: float, buffer_update: bool, name: str) -> Side:
        return load_side(str(serde.save(model(scale, buffer_update), tmp_path / name)), None)

    same = compare_models(side(2.0, False, "a.irb"), side(2.0, True, "b.irb"))
    assert same.numerics is not None and same.numerics.diverged_outputs == []
    other = compare_models(side(2.0, False, "a.irb"), side(3.0, True, "c.irb"))
    assert other.numerics is not None
    assert [(a, b) for a, b, _ in other.numerics.diverged_outputs] == [("mul", "mul")]
    from irbridge.compare.report import headline

    assert "; model outputs differ: 1" in "\n".join(headline(other))
