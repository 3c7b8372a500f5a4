"""IR -> StableHLO: every neutral op (the registry's examples and harder forms), checked by
the StableHLO reference interpreter against the IR reference executor; every module is
pure func + stablehlo and serializes as a portable artifact; versions, weights as
arguments, provenance locations, atomic writes and export errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shlotools import (
    NO_STABLEHLO_FORM,
    NOT_LOWERED,
    assert_close,
    example_model,
    module_dialects,
    reference,
    single_op,
)

from irbridge.builder import GraphBuilder
from irbridge.converters.stablehlo import (
    build_module,
    current_version,
    evaluate,
    export_stablehlo,
    from_mlir,
    minimum_version,
    to_mlir_text,
)
from irbridge.dtypes import DType
from irbridge.errors import ExportError, IrbridgeError
from irbridge.executor import run_model
from irbridge.ir import (
    Graph,
    Model,
    Provenance,
    SourceLocation,
    SymDim,
    Tensor,
    TensorType,
)
from irbridge.ops.examples import build_example, examples

F32, I64, BOOL = DType.FLOAT32, DType.INT64, DType.BOOL

UNSUPPORTED = {
    "non_zero": "its output length depends on the data (no static shape)",
    "masked_select": "its output length depends on the data (no static shape)",
    "unique": "its output length depends on the data (no static shape)",
    "unique_consecutive": "its output length depends on the data (no static shape)",
    "loop": "the example's scan output has a data-dependent length (a loop with a cond "
            "input); loops with carried values only, or with a constant trip count, export",
}
"""Ops whose registry example cannot be exported, and why."""

SUPPORTED = sorted(set(examples()) - set(UNSUPPORTED) - NO_STABLEHLO_FORM - set(NOT_LOWERED))


@pytest.mark.parametrize("name", sorted(NOT_LOWERED))
def test_ops_not_lowered_yet_are_refused_in_one_line(name: str) -> None:
    model, _ = example_model(name)
    with pytest.raises(ExportError, match=rf"node #\d+ {name}: op '{name}' has no StableHLO") \
            as info:
        build_module(model)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", sorted(NO_STABLEHLO_FORM))
def test_special_functions_without_an_exact_form_are_refused(name: str) -> None:
    model, _ = example_model(name)
    with pytest.raises(ExportError, match=rf"node #\d+ {name}: op '{name}' has no StableHLO"):
        build_module(model)


def _check(model: Model, feeds: list[np.ndarray], **tolerance: float) -> None:
    built = build_module(model)
    assert module_dialects(built.module) <= {"builtin", "func", "stablehlo"}
    got = evaluate(built, feeds)
    assert_close(got, reference(model, feeds), **tolerance)
    artifact = built.artifact()
    assert_close(evaluate(artifact, feeds), got, rtol=0, atol=0)


@pytest.mark.parametrize("name", SUPPORTED)
def test_registry_example(name: str) -> None:
    model, feeds = example_model(name)
    _check(model, feeds)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_example_says_why(name: str) -> None:
    model, _ = example_model(name)
    with pytest.raises(ExportError, match=rf"node #\d+ {name}.*static shapes"):
        build_module(model)


def t(shape: tuple[int, ...], dtype: DType = F32) -> TensorType:
    return TensorType(dtype, shape)


IDX = np.array([[0, -1], [2, 1]], dtype=np.int64)

CASES: dict[str, tuple] = {
    # (op, inputs, attrs[, const indices])
    "slice_negative_steps": ("slice", [t((4, 5, 6))], {"starts": (-1, 4, 0), "ends": (-10, 0, 6),
                                                       "axes": (0, 1, 2), "steps": (-2, -1, 4)}),
    "slice_empty": ("slice", [t((4, 5))], {"starts": (3,), "ends": (1,), "axes": (1,)}),
    "pad_constant_crop": ("pad", [t((3, 4))], {"pads": (1, -1, 2, 3), "value": 2.5}),
    "pad_edge": ("pad", [t((3, 4))], {"pads": (2, 0, 1, 3), "mode": "edge"}),
    "pad_wrap_crop": ("pad", [t((3, 4))], {"pads": (1, -1, 2, 2), "mode": "wrap"}),
    "pad_reflect": ("pad", [t((4, 5))], {"pads": (3, 1, 0, 4), "mode": "reflect"}),
    "conv_groups_dilation": ("conv", [t((2, 4, 9, 9)), t((6, 2, 3, 3)), t((6,))],
                             {"strides": (2, 1), "pads": (1, 0, 2, 1), "dilations": (1, 2),
                              "groups": 2}),
    "conv_depthwise_1d": ("conv", [t((1, 3, 10)), t((3, 1, 3))], {"groups": 3, "pads": (1, 1)}),
    "conv_3d": ("conv", [t((1, 2, 4, 5, 5)), t((3, 2, 2, 3, 3))], {"strides": (1, 2, 2)}),
    "conv_transpose_groups": ("conv_transpose", [t((1, 4, 5, 5)), t((4, 3, 3, 3)), t((6,))],
                              {"strides": (2, 2), "pads": (1, 0, 1, 2), "groups": 2,
                               "output_padding": (1, 0), "dilations": (1, 1)}),
    "conv_transpose_dilated": ("conv_transpose", [t((1, 2, 4, 4)), t((2, 3, 2, 2))],
                               {"strides": (1, 1), "dilations": (2, 2), "pads": (1, 1, 0, 0)}),
    "max_pool_ceil_dilated": ("max_pool", [t((1, 2, 9, 9))],
                              {"kernel": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 0),
                               "ceil_mode": True, "dilations": (1, 2)}),
    "avg_pool_exclude_pad_ceil": ("avg_pool", [t((1, 2, 7, 7))],
                                  {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                   "ceil_mode": True, "count_include_pad": False}),
    "avg_pool_1d": ("avg_pool", [t((2, 3, 11))], {"kernel": (4,), "strides": (3,)}),
    "adaptive_avg_uneven": ("adaptive_avg_pool", [t((1, 3, 7, 5))], {"output_size": (3, 2)}),
    "adaptive_max_even": ("adaptive_max_pool", [t((1, 3, 8, 6))], {"output_size": (4, 3)}),
    "resize_linear_align": ("resize", [t((1, 2, 4, 5))],
                            {"mode": "linear", "sizes": (7, 3), "coordinate_mode": "align_corners"}),
    "resize_cubic": ("resize", [t((1, 1, 5, 5))], {"mode": "cubic", "scales": (1.5, 2.0)}),
    "resize_nearest_exact": ("resize", [t((1, 2, 3, 4))],
                             {"mode": "nearest", "sizes": (5, 6),
                              "nearest_mode": "round_prefer_ceil"}),
    "matmul_vec_mat": ("matmul", [t((8,)), t((3, 8, 5))], {}),
    "matmul_mat_vec": ("matmul", [t((2, 4, 8)), t((8,))], {}),
    "matmul_vec_vec": ("matmul", [t((8,)), t((8,))], {}),
    "matmul_mat_batch": ("matmul", [t((4, 8)), t((2, 3, 8, 5))], {}),
    "matmul_broadcast_batch": ("matmul", [t((2, 1, 4, 8)), t((3, 8, 5))], {}),
    "linear_no_bias_1d": ("linear", [t((16,)), t((4, 16))], {}),
    "gemm_plain": ("gemm", [t((3, 4)), t((4, 5))], {}),
    "attention_bool_mask": ("attention", [t((2, 4, 6, 8)), t((2, 4, 5, 8)), t((2, 4, 5, 8)),
                                          t((6, 5), BOOL)], {"scale": 0.3}),
    "attention_float_mask_gqa": ("attention", [t((1, 4, 3, 8)), t((1, 2, 3, 8)),
                                               t((1, 2, 3, 8)), t((1, 1, 3, 3))], {}),
    "reduce_all_axes": ("reduce_sum", [t((2, 3, 4))], {}),
    "reduce_max_int": ("reduce_max", [t((3, 5), I64)], {"axes": (0,)}),
    "reduce_min_bool": ("reduce_min", [t((3, 4), BOOL)], {"axes": (1,), "keepdims": True}),
    "reduce_mean_keep": ("reduce_mean", [t((2, 3, 4))], {"axes": (0, 2), "keepdims": True}),
    "cumsum_exclusive_reverse": ("cumsum", [t((3, 5))], {"axis": 1, "exclusive": True,
                                                         "reverse": True}),
    "cumprod_exclusive": ("cumprod", [t((4, 3))], {"axis": 0, "exclusive": True}),
    "argmax_last_ties": ("argmax", [np.array([[1, 3, 3], [2, 2, 0]], np.float32)],
                         {"axis": 1, "select_last_index": True}),
    "argmin_keep": ("argmin", [t((3, 4))], {"axis": 0, "keepdims": True}),
    "topk_smallest": ("topk", [t((3, 7))], {"k": 3, "axis": 1, "largest": False}),
    "sort_axis0_ascending": ("sort", [np.array([[3, 1], [1, 2], [2, 2]], np.float32)],
                             {"axis": 0}),
    "sort_int_descending": ("sort", [np.array([[5, 1, 5, 2]], np.int64)], {"descending": True}),
    "gather_negative_indices": ("gather", [t((5, 3)), IDX], {"axis": 0}, (1,)),
    "gather_scalar_index": ("gather", [t((4, 6)), np.array(3, np.int64)], {"axis": 1}, (1,)),
    "gather_runtime_indices": ("gather", [t((5, 3)), np.array([4, -2, 0], np.int64)],
                               {"axis": 0}),
    "gather_elements_negative": ("gather_elements", [t((3, 4)), IDX], {"axis": 0}, (1,)),
    "scatter_none_full": ("scatter_elements", [t((3, 2)), np.array([[2, 0], [0, 1], [1, 1]]),
                                               t((3, 2))], {"axis": 0}, (1,)),
    "scatter_max_partial": ("scatter_elements", [t((4, 5)), np.array([[1, 4], [3, -1]]),
                                                 t((2, 2))], {"axis": 1, "reduction": "max"},
                            (1,)),
    "embedding_large_table": ("embedding", [t((50, 8)), np.array([[0, 49, 3]])], {}, (1,)),
    "one_hot_negative_axis0": ("one_hot", [np.array([1, -1, 7])], {"depth": 4, "axis": 0,
                                                                   "dtype": F32}),
    "clip_int": ("clip", [np.array([-5, 0, 3, 9], np.int64)], {"min": -1.5, "max": 4.0}),
    "clip_tensor_bounds": ("clip", [t((2, 3)), t((3,)), t((2, 1))], {}),
    "cast_float_to_int": ("cast", [np.array([-2.7, -0.5, 0.5, 3.9], np.float32)],
                          {"dtype": DType.INT32}),
    "cast_float_to_bool": ("cast", [np.array([0.0, -0.0, 0.1, np.nan], np.float32)],
                           {"dtype": BOOL}),
    "cast_bool_to_float": ("cast", [np.array([True, False])], {"dtype": F32}),
    "mod_int": ("mod", [np.array([7, -7, 7, -7]), np.array([3, 3, -3, -3])], {}),
    "floor_div_int": ("floor_div", [np.array([7, -7, 7, -7, 6]), np.array([2, 2, -2, -2, 3])], {}),
    "div_int_truncates": ("div", [np.array([7, -7]), np.array([2, 2])], {}),
    "add_mixed_dtypes": ("add", [t((2, 3)), np.array([1, 2, 3], np.int64)], {}),
    "where_int_condition": ("where", [np.array([0, 2, -1]), t((3,)), t((2, 1))], {}),
    "tile_3d": ("tile", [t((2, 1, 3))], {"repeats": (1, 3, 2)}),
    "trilu_upper_k": ("trilu", [t((2, 4, 5))], {"upper": True, "k": -1}),
    "expand_minus_one": ("expand", [t((3, 1))], {"shape": (2, -1, 4)}),
    "softmax_axis0": ("softmax", [t((3, 4))], {"axis": 0}),
    "layer_norm_two_axes": ("layer_norm", [t((2, 3, 4)), t((3, 4))], {"axis": 1}),
    "group_norm_plain": ("group_norm", [t((2, 6, 5))], {"num_groups": 3}),
    "rms_norm_no_scale": ("rms_norm", [t((2, 8))], {}),
    "gelu_exact": ("gelu", [np.linspace(-5, 5, 21, dtype=np.float32)], {}),
    "erf_range": ("erf", [np.linspace(-6, 6, 49, dtype=np.float32)], {}),
    "softplus_beta": ("softplus", [np.linspace(-30, 30, 25, dtype=np.float32)],
                      {"beta": 2.0, "threshold": 10.0}),
    "isinf_values": ("isinf", [np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)], {}),
    "f16_add": ("add", [t((3, 4), DType.FLOAT16), t((4,), DType.FLOAT16)], {}),
    "f64_exp": ("exp", [t((5,), DType.FLOAT64)], {}),
    "bf16_matmul": ("matmul", [t((3, 4), DType.BFLOAT16), t((4, 2), DType.BFLOAT16)], {}),
    "split_three": ("split", [t((2, 9))], {"axis": 1, "sizes": (2, 3, 4)}),
    "concat_int": ("concat", [np.array([[1, 2]]), np.array([[3], ], np.int64).reshape(1, 1)],
                   {"axis": 1}),
    "range_float": ("range", [], {"start": 0.5, "limit": 3.0, "delta": 0.75, "dtype": F32}),
    "squeeze_all": ("squeeze", [t((1, 3, 1))], {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_forms(case: str) -> None:
    op, inputs, attrs, *rest = CASES[case]
    const = rest[0] if rest else ()
    schema_outputs = {"split": len(attrs.get("sizes", ()))}
    model, feeds = single_op(op, inputs, attrs, const=const,
                             num_outputs=schema_outputs.get(op))
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if "16" in case else {}
    _check(model, feeds, **tolerance)


def _loop_model(trip: int | None, with_cond: bool, scans: bool) -> tuple[Model, list[np.ndarray]]:
    body = Graph("body")
    body.reserve_ids(100)
    body.add_input("i", TensorType(I64, ()))
    cond_in = body.add_input("cond_in", TensorType(BOOL, ()))
    acc = body.add_input("acc", TensorType(F32, (2,)))
    bb = GraphBuilder(body)
    nxt = bb.op("add", [acc, bb.constant(np.array([1.0, 0.5], np.float32), "step")])
    keep = bb.op("less", [bb.op("reduce_sum", [nxt]), bb.constant(np.float32(6.0), "limit")]) \
        if with_cond else bb.op("identity", [cond_in])
    outs = [keep, nxt] + ([bb.op("mul", [acc, acc])] if scans else [])
    body.set_outputs(outs)
    graph = Graph()
    model = Model(graphs=[graph])
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (2,)))
    trip_v = b.constant(np.int64(trip), "trip") if trip is not None else None
    cond_v = b.constant(np.bool_(True), "go") if with_cond else None
    results = b.op_multi("loop", [trip_v, cond_v, x], {"body": body},
                         num_outputs=2 if scans else 1)
    graph.set_outputs(results)
    return model, [np.array([0.0, 1.0], np.float32)]


@pytest.mark.parametrize("trip, with_cond, scans", [(5, True, False), (None, True, False),
                                                     (4, False, True), (0, False, True)])
def test_loop(trip: int | None, with_cond: bool, scans: bool) -> None:
    model, feeds = _loop_model(trip, with_cond, scans)
    _check(model, feeds)


def test_if_reads_outer_values_and_weights() -> None:
    def branch(op: str, weight: Tensor, x_value: object) -> Graph:
        g = Graph(op)
        g.reserve_ids(500 if op == "add" else 600)
        bb = GraphBuilder(g)
        w = g.add_parameter(weight)
        g.set_outputs([bb.op(op, [x_value, w])])  # type: ignore[list-item]
        return g

    graph = Graph()
    model = Model(graphs=[graph])
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(F32, (3,)))
    w = model.add_tensor(Tensor.from_array("w", np.array([1.0, 2.0, 3.0], np.float32)))
    cond = b.op("greater", [b.op("reduce_sum", [x]), b.constant(np.float32(0.0), "zero")])
    out = b.op_multi("if", [cond], {"then_branch": branch("add", w, x),
                                    "else_branch": branch("mul", w, x)}, num_outputs=1)
    graph.set_outputs(out)
    for sign in (1.0, -1.0):
        _check(model, [np.array([0.5, 1.0, 2.0], np.float32) * sign])


def test_module_is_pure_stablehlo_and_locations_carry_provenance() -> None:
    model, _ = example_model("conv")
    node = model.graph.nodes[0]
    node.provenance = Provenance("pytorch", "aten.conv2d.default", "conv2d", "layer1.0.conv1",
                                 "Conv2d", SourceLocation("model.py", 42, "x = self.conv1(x)"))
    text = to_mlir_text(model)
    assert "arith." not in text and "stablehlo.convolution" in text
    # printed with location aliases: #locN = loc("layer1.0.conv1"(#locM)), ...
    for piece in ('loc("layer1.0.conv1"(#loc', 'loc("aten.conv2d.default"(#loc',
                  'loc("model.py":42:0)'):
        assert piece in text
    imported = from_mlir(text)
    conv = next(n for n in imported.graph.nodes if n.op == "conv")
    p = conv.provenance
    assert (p.source_format, p.source_op, p.module_path, p.source_node) == \
        ("stablehlo", "stablehlo.convolution", "layer1.0.conv1", "aten.conv2d.default")
    assert p.location is not None and (p.location.file, p.location.line) == ("model.py", 42)
    assert [v.name for v in imported.graph.inputs] == [v.name for v in model.graph.inputs]
    assert [v.name for v in imported.graph.outputs] == [v.name for v in model.graph.outputs]


def test_weights_as_arguments() -> None:
    model, feeds = single_op("linear", [t((2, 8)), t((4, 8)), t((4,))], const=(1, 2))
    built = build_module(model, weights_as_args=True)
    assert built.weight_names == ["w1", "w2"]
    assert "stablehlo.constant" not in built.text()
    weights = [model.tensors[n].data for n in built.weight_names]
    assert_close(evaluate(built, [*feeds, *weights]), reference(model, feeds))
    assert built.artifact()
    # shape-only models export only with their weights as arguments
    for tensor in model.tensors.values():
        tensor.data = None
    with pytest.raises(ExportError, match="no data"):
        build_module(model)
    assert build_module(model, weights_as_args=True).weight_names == ["w1", "w2"]


def test_target_versions(tmp_path: Path) -> None:
    model, feeds = example_model("gelu")
    for version in (None, current_version(), minimum_version(), "1.0.0"):
        path = export_stablehlo(model, tmp_path / "m.mlirbc", target_version=version)
        assert path.read_bytes().startswith(b"ML\xefR")
        assert_close(evaluate(path, feeds), reference(model, feeds))
        imported = from_mlir(path.read_bytes())
        assert_close(run_model(imported, feeds), reference(model, feeds))
    for bad in ("99.0.0", "0.0.1", "one"):
        with pytest.raises(ExportError, match="target version"):
            export_stablehlo(model, tmp_path / "bad.mlirbc", target_version=bad)
    assert not (tmp_path / "bad.mlirbc").exists()


def test_atomic_writes(tmp_path: Path) -> None:
    model, feeds = example_model("softmax")
    with pytest.raises(IrbridgeError, match=r"sub/m.mlir: folder .*sub does not exist"):
        export_stablehlo(model, tmp_path / "sub" / "m.mlir")  # as every one-file writer
    (tmp_path / "sub").mkdir()
    text_path = export_stablehlo(model, tmp_path / "sub" / "m.mlir")
    assert "module @softmax" in text_path.read_text()
    assert_close(evaluate(text_path, feeds), reference(model, feeds))
    (tmp_path / "keep.mlirbc").write_bytes(b"old")
    graph = model.graph
    graph.nodes[0].domain = "custom"  # now opaque: the export fails ...
    with pytest.raises(ExportError):
        export_stablehlo(model, tmp_path / "keep.mlirbc")
    assert (tmp_path / "keep.mlirbc").read_bytes() == b"old"  # ... and leaves the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.mlirbc", "sub"]


def test_export_errors_name_the_node() -> None:
    model, _ = example_model("relu")
    node = model.graph.nodes[0]
    node.domain = "aten"
    node.provenance.module_path = "block.act"
    with pytest.raises(ExportError, match=r"node #\d+ relu \(block\.act\): opaque op aten::relu"):
        build_module(model)
    graph = Graph()
    dyn = Model(graphs=[graph])
    x = graph.add_input("x", TensorType(F32, (SymDim("batch"), 4)))
    graph.set_outputs([GraphBuilder(graph, dyn).op("relu", [x])])
    with pytest.raises(ExportError, match=r"input 'x' has type f32\[batch,4\].*static shapes"):
        build_module(dyn)
    with pytest.raises(ExportError, match="no graph"):
        build_module(Model())


def test_example_feeds_are_deterministic() -> None:
    a, b = build_example("add"), build_example("add")
    assert all(np.array_equal(a.feeds[k], b.feeds[k]) for k in a.feeds)


def test_several_graphs_with_links_become_one_function() -> None:
    """Graph breaks (several graphs wired by links) export as one @main."""
    from irbridge.ir import GraphLink

    first, second = Graph("part0"), Graph("part1")
    second.reserve_ids(100)
    model = Model(graphs=[first, second])
    x = first.add_input("x", t((2, 3)))
    first.set_outputs([GraphBuilder(first, model).op("relu", [x], name="h")])
    h = second.add_input("h_in", t((2, 3)))
    y = second.add_input("y", t((3,)))
    second.set_outputs([GraphBuilder(second, model).op("mul", [h, y], name="out")])
    model.links.append(GraphLink(0, "h", 1, "h_in"))
    built = build_module(model)
    assert built.input_names == ["x", "y"] and built.output_names == ["out"]
    feeds = {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
             "y": np.array([1.0, 2.0, 3.0], np.float32)}
    assert_close(evaluate(built, [feeds["x"], feeds["y"]]), run_model(model, feeds))


def test_written_files_are_normal_files(tmp_path: Path) -> None:
    import os
    import stat

    model, _ = example_model("relu")
    path = export_stablehlo(model, tmp_path / "m.mlirbc")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
