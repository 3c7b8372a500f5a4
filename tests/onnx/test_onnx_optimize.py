"""The lean ONNX pass (converters/onnx/_optimize.py): fewer nodes, the same numbers.

Every check runs the real onnxruntime on the optimised file and compares it with the
neutral reference executor on the IR (not with the code under test).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnxtools import F, assert_close, onnx_model, ort_run, tensor
from test_onnx_export import small_cnn, transformer_block

from irbridge.converters.onnx import from_onnx, to_onnx
from irbridge.converters.onnx._optimize import optimize
from irbridge.executor import run_model


def _ops(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def test_lean_export_folds_weights_and_keeps_the_numbers() -> None:
    model, feeds = transformer_block()
    lean, plain = to_onnx(model, opset=20), to_onnx(model, opset=20, optimize=False)
    assert "Constant" in _ops(plain) and "Constant" not in _ops(lean)
    assert len(lean.graph.node) < len(plain.graph.node)
    inits = {t.name: t for t in lean.graph.initializer}
    # the weight transposes of the linear layers are stored transposed, not computed
    assert not [n for n in lean.graph.node if n.op_type == "Transpose" and n.input[0] in inits]
    folded = [t for t in inits.values() if t.doc_string.startswith("folded by irbridge")]
    assert folded and all(t.name.startswith(("q.w", "k.w", "v.w", "o.w", "up.w", "down.w"))
                          for t in folded)
    assert "Gelu" in _ops(lean)  # opset 20: the fused op, not its decomposition
    expected = run_model(model, feeds)
    assert_close(ort_run(lean, feeds), expected)
    assert_close(run_model(from_onnx(lean)[0], feeds), expected)
    # provenance: every node still names the neutral node it came from
    for node in lean.graph.node:
        assert "irbridge.node" in {p.key for p in node.metadata_props}, node.name


def test_fold_batch_norm_into_conv_only_when_asked() -> None:
    model, feeds = small_cnn()
    assert "BatchNormalization" in _ops(to_onnx(model))
    folded = to_onnx(model, fold_batch_norm=True)
    assert "BatchNormalization" not in _ops(folded)
    assert _ops(folded).count("Conv") == 1
    conv = next(n for n in folded.graph.node if n.op_type == "Conv")
    assert {p.key: p.value for p in conv.metadata_props}["irbridge.module_path"] == "features.0"
    # W * gamma / sqrt(var + eps) reorders float32 arithmetic: rounding only (1e-5 relative)
    assert_close(ort_run(folded, feeds), run_model(model, feeds), rtol=1e-5, atol=1e-5)


def test_noops_shared_constants_and_dead_nodes() -> None:
    c = onnx.numpy_helper.from_array(np.full((2, 3), 2.0, np.float32), "c")
    nodes = [
        helper.make_node("Constant", [], ["k1"], value=c),
        helper.make_node("Constant", [], ["k2"], value=c),  # same bytes: shared
        helper.make_node("Identity", ["x"], ["i1"]),
        helper.make_node("Identity", ["i1"], ["i2"]),
        helper.make_node("Transpose", ["i2"], ["t1"], perm=[1, 0]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),  # cancels the first
        helper.make_node("Add", ["t2", "k1"], ["a"]),
        helper.make_node("Mul", ["a", "k2"], ["m"]),
        helper.make_node("Reshape", ["m", "s1"], ["r1"]),
        helper.make_node("Reshape", ["r1", "s2"], ["y"]),  # the first reshape is redundant
        helper.make_node("Neg", ["x"], ["unused"]),  # read by nobody
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),  # a weight: folded
        helper.make_node("MatMul", ["x", "wt"], ["z"]),
    ]
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    proto = onnx_model(nodes, [tensor("x", F, [2, 3])], [tensor("y", F, [6]),
                                                            tensor("z", F, [2, 2])],
                       {"s1": np.array([3, 2]), "s2": np.array([6]), "w": w})
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    expected: list[np.ndarray] = [((x + 2) * 2).reshape(6), x @ w.T]  # written by hand
    assert_close(ort_run(proto, {"x": x}), expected)
    report = optimize(proto)
    onnx.checker.check_model(proto, full_check=True)
    assert _ops(proto) == ["Add", "Mul", "Reshape", "MatMul"]
    assert report.constants_to_initializers == 2 and report.initializers_shared == 1
    assert report.folded == 1 and report.dead_removed == 1
    add, mul = proto.graph.node[0], proto.graph.node[1]
    assert add.input[0] == "x" and add.input[1] == mul.input[1]
    assert {t.name for t in proto.graph.initializer} == {add.input[1], "s2", "w.transpose"}
    assert_close(ort_run(proto, {"x": x}), expected)


def test_graph_outputs_and_subgraph_reads_are_kept() -> None:
    """An Identity that produces a graph output stays; a constant read inside an If body
    stays reachable (as an initializer) and the body still runs."""
    body_const = onnx.numpy_helper.from_array(np.array(3.0, np.float32), "three")
    then_body = helper.make_graph([helper.make_node("Add", ["x", "k"], ["t_out"])], "then",
                                  [], [tensor("t_out", F, [2])])
    else_body = helper.make_graph([helper.make_node("Sub", ["x", "k"], ["e_out"])], "else",
                                  [], [tensor("e_out", F, [2])])
    nodes = [helper.make_node("Constant", [], ["k"], value=body_const),
             helper.make_node("If", ["flag"], ["r"], then_branch=then_body,
                              else_branch=else_body),
             helper.make_node("Identity", ["r"], ["y"])]
    proto = onnx_model(nodes, [tensor("x", F, [2]), tensor("flag", onnx.TensorProto.BOOL, [])],
                       [tensor("y", F, [2])])
    optimize(proto)
    onnx.checker.check_model(proto, full_check=True)
    assert "y" in {o for n in proto.graph.node for o in n.output}
    x = np.array([1.0, -2.0], np.float32)
    for flag, want in ((True, x + 3), (False, x - 3)):
        assert_close(ort_run(proto, {"x": x, "flag": np.array(flag)}), [want])


def test_cancelling_transposes_that_produce_a_graph_output() -> None:
    """Two Transposes that cancel, the second producing a graph output (Dynamo's capture
    of a batch_first nn.MultiheadAttention ends so): the second must stay, and so must
    the first, which it reads. The pass used to drop the first while the second stayed
    (it is pinned), so the file failed the checker ('not topologically sorted')."""
    nodes = [helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("Transpose", ["n"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[1, 0, 2])]
    proto = onnx_model(nodes, [tensor("x", F, [2, 3, 4])], [tensor("y", F, [2, 3, 4])])
    optimize(proto)
    onnx.checker.check_model(proto, full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert_close(ort_run(proto, {"x": x}), [-x])
    assert _ops(proto) == ["Neg", "Transpose"]


def test_cli_export_options(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from irbridge import serde
    from irbridge.cli.main import app

    runner = CliRunner()
    cases: list[tuple[Any, list[str], str, bool]] = [
        (small_cnn, [], "BatchNormalization", True),
        (small_cnn, ["--fold-batch-norm"], "BatchNormalization", False),
        (transformer_block, [], "Constant", False),
        (transformer_block, ["--no-optimize"], "Constant", True)]
    for k, (build, flags, op, present) in enumerate(cases):
        model, feeds = build()
        irb = serde.save(model, tmp_path / f"m{k}.irb")
        out = tmp_path / f"m{k}.onnx"
        result = runner.invoke(app, ["export", str(irb), "--to", "onnx", "-o", str(out), *flags])
        assert result.exit_code == 0, result.output
        proto = onnx.load(str(out))
        assert (op in _ops(proto)) == present, (flags, _ops(proto))
        assert_close(ort_run(proto, feeds), run_model(model, feeds), rtol=1e-5, atol=1e-5)
    result = runner.invoke(app, ["export", str(irb), "--to", "irb", "-o",
                                 str(tmp_path / "x.irb"), "--fold-batch-norm"])
    assert result.exit_code == 2 and "apply to --to onnx" in result.stderr


def test_fold_batch_norm_of_a_streamed_weight_in_the_written_file(tmp_path: Path) -> None:
    """export_onnx streams large weights: a folded conv weight past STREAM_MIN_BYTES is
    computed when the file is written, and the file holds torch's own folding of it."""
    import torch

    from irbridge.converters.onnx import export_onnx
    from irbridge.converters.pytorch import capture

    torch.manual_seed(0)
    conv, bn = torch.nn.Conv2d(16, 64, 5, padding=2), torch.nn.BatchNorm2d(64)  # 100 KiB weight
    with torch.no_grad():
        for t in (bn.weight, bn.bias, bn.running_mean):
            t.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    module = torch.nn.Sequential(conv, bn, torch.nn.ReLU()).eval()
    x = torch.randn(1, 16, 12, 12)
    path = export_onnx(capture(module, (x,), frontend="fx").model, tmp_path / "cnn.onnx",
                       opset=20, fold_batch_norm=True)
    proto = onnx.load(path)
    assert "BatchNormalization" not in _ops(proto)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    weight = inits[next(n for n in proto.graph.node if n.op_type == "Conv").input[1]]
    factor = (bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps))
    expected = (conv.weight.double() * factor.reshape(-1, 1, 1, 1)).float().detach().numpy()
    np.testing.assert_array_equal(weight, expected)  # both round the float64 product once
    with torch.no_grad():
        eager = module(x).numpy()
    # folding reorders float32 arithmetic: rounding only
    assert_close(ort_run(proto, {proto.graph.input[0].name: x.numpy()}), [eager], rtol=1e-5, atol=1e-5)


def test_zero_biases_are_dropped_and_others_kept() -> None:
    """A bias of zeros (what folding a fresh BatchNormalization leaves) is a no-op add:
    dropped from Conv, ConvTranspose and Gemm. A bias with one non-zero element, one a
    graph input can override, and a NaN bias stay."""
    rng = np.random.default_rng(0)

    w = rng.standard_normal((4, 3, 3, 3))
    almost = np.zeros(4)
    almost[2] = 1e-30
    nodes = [
        helper.make_node("Conv", ["x", "w", "zero4"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w", "almost"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w", "override"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w", "nan4"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["c0", "wt", "zero3"], ["ct"]),
        helper.make_node("Flatten", ["c1"], ["flat"]),
        helper.make_node("Gemm", ["flat", "g", "zero2"], ["gemm"], transB=1),
    ]
    inits = {name: np.asarray(array, np.float32) for name, array in [
        ("w", w), ("zero4", np.zeros(4)), ("almost", almost), ("override", np.zeros(4)),
        ("nan4", np.full(4, np.nan)), ("wt", rng.standard_normal((4, 3, 2, 2))),
        ("zero3", -np.zeros(3)), ("g", rng.standard_normal((2, 4 * 5 * 5))),
        ("zero2", np.zeros(2))]}
    proto = onnx_model(nodes, [tensor("x", F, [1, 3, 5, 5]), tensor("override", F, [4])],
                       [tensor("c2", F, [1, 4, 5, 5]), tensor("c3", F, [1, 4, 5, 5]),
                        tensor("ct", F, [1, 3, 6, 6]), tensor("gemm", F, [1, 2])],
                       initializers=inits)
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    feeds = {"x": x, "override": np.ones(4, np.float32)}
    before = ort_run(proto, feeds)
    report = optimize(proto)
    assert report.zero_biases_dropped == 3
    inputs = {n.output[0]: list(n.input) for n in proto.graph.node}
    assert inputs["c0"] == ["x", "w"] and inputs["ct"] == ["c0", "wt"]
    assert inputs["gemm"] == ["flat", "g"]
    assert inputs["c1"][2] == "almost" and inputs["c2"][2] == "override"
    assert inputs["c3"][2] == "nan4"
    assert {"zero4", "zero3", "zero2"}.isdisjoint(t.name for t in proto.graph.initializer)
    onnx.checker.check_model(proto)
    # adding zero is exact: the same numbers bit for bit (NaN where the NaN bias is)
    for got, want in zip(ort_run(proto, feeds), before, strict=True):
        np.testing.assert_array_equal(got, want)


def test_folding_ieee_special_values_prints_no_warning() -> None:
    """log(0) = -inf and a cast of -inf to an integer are values the runtime computes
    too (T5's relative position buckets fold to them): folded without a numpy warning
    reaching the user's terminal, to the numbers onnxruntime gives for the same nodes."""
    import warnings

    I64 = onnx.TensorProto.INT64
    nodes = [helper.make_node("Log", ["zeros"], ["log"]),
             helper.make_node("Cast", ["log"], ["cast"], to=I64),
             helper.make_node("Add", ["cast", "i"], ["y"])]
    proto = onnx_model(nodes, [tensor("i", I64, [3])], [tensor("y", I64, [3])],
                       initializers={"zeros": np.array([0.0, 1.0, 0.0], np.float32)})
    feeds = {"i": np.array([1, 2, 3], np.int64)}
    before = ort_run(proto, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = optimize(proto)
    assert report.folded == 2 and _ops(proto) == ["Add"]
    np.testing.assert_array_equal(ort_run(proto, feeds)[0], before[0])
