"""Importing onnxruntime's own files: com.microsoft contrib ops (converters/onnx/
_import_contrib.py) and the integer ops of dynamically quantised models (converters/onnx/
_import_quant.py).

Ground truth is onnxruntime 1.31 (CPU, one thread) running the original node or file. The
imported IR runs in irbridge's executor (numpy references) and, exported again as standard
ONNX, in onnxruntime; both are compared with the original's outputs on the same random
inputs.

Tolerances: float32 kernels that differ only in summation order and in their erf / tanh /
exp implementations agree to a few ulps per op; the outputs here are O(1) to O(10) after at
most ~10 ops, so atol 1e-5 + rtol 1e-5 holds with a wide margin, while a wrong mapping
(missing bias, wrong activation, wrong transpose or mask) is off by O(0.1) or more.
Integer ops (MatMulInteger, ConvInteger) must agree exactly: array_equal.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision
from onnx import TensorProto, helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.transformers import optimizer
from onnxtools import onnx_model, tensor
from test_onnx_ort_target import _Attention  # SDPA with a boolean mask
from torch import nn

from irbridge.converters.onnx import export_onnx, to_onnx
from irbridge.converters.onnx.importer import (
    from_onnx,
    import_onnx,
    import_onnx_with_coverage,
)
from irbridge.converters.pytorch import capture
from irbridge.executor import run_model
from irbridge.ir import Model
from irbridge.summary import summarize

ATOL, RTOL = 1e-5, 1e-5
F, I32, I64, U8, I8 = (TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64,
                       TensorProto.UINT8, TensorProto.INT8)
MS = {"com.microsoft": 1}


def _session(data: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    # onnxruntime 1.31's MatMulAddFusion names its new Reshape shapes "gemm_input_shape",
    # and fails on a file that already holds a tensor of that name (as files written by
    # onnxruntime's transformers optimizer do): off for the re-exported files
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=["MatMulAddFusion"])


def _ort(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in _session(proto.SerializeToString()).run(None, dict(feeds))]


def _import(proto: onnx.ModelProto) -> Model:
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    return model


def _outputs(model: Model, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    got = run_model(model, dict(feeds))
    return [np.asarray(v) for v in (got.values() if isinstance(got, dict) else got)]


def _close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], exact: bool = False) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL)


def _check(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray], exact: bool = False
           ) -> Model:
    """onnxruntime on the original vs the imported IR (executor) and its ONNX export."""
    want = _ort(proto, feeds)
    model = _import(proto)
    _close(_outputs(model, feeds), want, exact)
    again = to_onnx(model)
    assert not any(n.domain == "com.microsoft" for n in again.graph.node)
    _close(_ort(again, feeds), want, exact)
    return model


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _one_node(op: str, inputs: dict[str, np.ndarray], weights: dict[str, np.ndarray],
              out_rank: int, outputs: Sequence[str] = ("y",), **attrs: object
              ) -> onnx.ModelProto:
    """A model of one com.microsoft node: `inputs` are graph inputs, `weights`
    initializers ("" in the order keeps an optional input out)."""
    names = [*inputs, *weights]
    node = helper.make_node(op, names, list(outputs), domain="com.microsoft", **attrs)
    graph_inputs = [tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                    for k, v in inputs.items()]
    graph_outputs = [tensor(o, F, [None] * out_rank) for o in outputs]
    return onnx_model([node], graph_inputs, graph_outputs, weights, opset=17,
                      extra_opsets=MS)


# -- fused convolution / gemm / matmul ---------------------------------------------------------

@pytest.mark.parametrize(("activation", "params"), [
    ("Relu", None), ("Tanh", None), ("Sigmoid", None), ("LeakyRelu", [0.2]),
    ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])])
def test_fused_conv_activations(activation: str, params: list[float] | None) -> None:
    rng = np.random.default_rng(0)
    attrs: dict[str, object] = {"activation": activation, "kernel_shape": [3, 3],
                                "pads": [1, 0, 1, 0], "strides": [1, 2]}
    if params is not None:
        attrs["activation_params"] = params
    proto = _one_node("FusedConv", {"x": _rand(rng, 1, 4, 7, 8)},
                      {"w": _rand(rng, 6, 4, 3, 3), "b": _rand(rng, 6)}, 4, **attrs)
    _check(proto, {"x": _rand(rng, 1, 4, 7, 8)})


def test_fused_conv_with_sum_input_and_groups() -> None:
    """The fourth input Z is added before the activation (ResNet's residual Add)."""
    rng = np.random.default_rng(1)
    x, z = _rand(rng, 2, 4, 6, 6), _rand(rng, 2, 6, 6, 6)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft",
                            activation="Relu", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2)
    proto = onnx_model([node], [tensor("x", F, [2, 4, 6, 6]), tensor("z", F, [2, 6, 6, 6])],
                       [tensor("y", F, [None] * 4)],
                       {"w": _rand(rng, 6, 2, 3, 3), "b": _rand(rng, 6)}, opset=17,
                       extra_opsets=MS)
    _check(proto, {"x": x, "z": z})


@pytest.mark.parametrize("activation", [{"activation": "LeakyRelu", "activation_alpha": 0.3},
                                        {"activation": "HardSigmoid", "activation_alpha": 0.3,
                                         "activation_beta": 0.6},
                                        {"activation": "Tanh"}])
def test_fused_gemm(activation: dict[str, object]) -> None:
    rng = np.random.default_rng(2)
    proto = _one_node("FusedGemm", {"a": _rand(rng, 5, 3)},
                      {"b": _rand(rng, 4, 3), "c": _rand(rng, 4)}, 2, transB=1, alpha=0.5,
                      beta=2.0, **activation)
    _check(proto, {"a": _rand(rng, 5, 3)})


@pytest.mark.parametrize(("a_shape", "b_shape", "attrs"), [
    ((2, 3, 4, 5), (2, 3, 6, 5), {"transB": 1, "alpha": 0.125}),
    ((2, 3, 5, 4), (5, 6), {"transA": 1}),
    ((4, 2, 3, 5), (2, 3, 5, 6), {"transBatchA": 1}),
    ((4, 2, 3, 5), (2, 3, 6, 5), {"transBatchA": 1, "transB": 1}),
    ((2, 3, 5, 4), (6, 2, 3, 5), {"transBatchB": 1, "transA": 1, "transB": 1}),
    ((5, 2, 3, 4), (2, 3, 5, 6), {"transBatchA": 1, "transA": 1}),
])
def test_fused_matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                      attrs: dict[str, object]) -> None:
    rng = np.random.default_rng(3)
    a, b = _rand(rng, *a_shape), _rand(rng, *b_shape)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", **attrs)
    proto = onnx_model([node], [tensor("a", F, list(a_shape)), tensor("b", F, list(b_shape))],
                       [tensor("y", F, [None] * 4)], opset=17, extra_opsets=MS)
    _check(proto, {"a": a, "b": b})


# -- GELU family, bias adds, normalisation ---------------------------------------------------------

@pytest.mark.parametrize(("op", "weights", "attrs"), [
    ("Gelu", {}, {}),
    ("FastGelu", {}, {}),
    ("FastGelu", {"bias": 16}, {}),
    ("BiasGelu", {"bias": 16}, {}),
    ("QuickGelu", {}, {}),
    ("QuickGelu", {}, {"alpha": 1.1}),
])
def test_gelu_family(op: str, weights: dict[str, int], attrs: dict[str, object]) -> None:
    rng = np.random.default_rng(4)
    x = _rand(rng, 2, 3, 16) * 3
    proto = _one_node(op, {"x": x}, {k: _rand(rng, n) for k, n in weights.items()}, 3, **attrs)
    _check(proto, {"x": x})


def test_bias_add() -> None:
    """onnxruntime has BiasAdd for CUDA only: the CPU session cannot run it, so the
    expected value is numpy's x + bias + skip (exact in float32 up to one rounding per
    add, as the imported graph computes it)."""
    rng = np.random.default_rng(5)
    x, skip, bias = _rand(rng, 2, 6, 8), _rand(rng, 2, 6, 8), _rand(rng, 8)
    node = helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain="com.microsoft")
    proto = onnx_model([node], [tensor("x", F, [2, 6, 8]), tensor("skip", F, [2, 6, 8])],
                       [tensor("y", F, [None] * 3)], {"bias": bias}, opset=17,
                       extra_opsets=MS)
    want = [(x + bias) + skip]
    model = _import(proto)
    _close(_outputs(model, {"x": x, "skip": skip}), want, exact=True)
    _close(_ort(to_onnx(model), {"x": x, "skip": skip}), want, exact=True)


@pytest.mark.parametrize(("op", "weights"), [
    ("SkipLayerNormalization", ["gamma"]),
    ("SkipLayerNormalization", ["gamma", "beta"]),
    ("SkipLayerNormalization", ["gamma", "beta", "bias"]),
    ("SkipLayerNormalization", ["gamma", "", "bias"]),
    ("SkipSimplifiedLayerNormalization", ["gamma"]),
    ("SkipSimplifiedLayerNormalization", ["gamma", "bias"]),
])
def test_skip_layer_norm_and_its_sum_output(op: str, weights: list[str]) -> None:
    """Output 0 and the input + skip + bias sum (output 3), which the next block reads."""
    rng = np.random.default_rng(6)
    x, skip = _rand(rng, 2, 5, 16), _rand(rng, 2, 5, 16)
    inits = {w: _rand(rng, 16) for w in weights if w}
    node = helper.make_node(op, ["x", "skip", *weights], ["y", "", "", "sum"],
                            domain="com.microsoft", epsilon=1e-5)
    proto = onnx_model([node], [tensor("x", F, [2, 5, 16]), tensor("skip", F, [2, 5, 16])],
                       [tensor("y", F, [None] * 3), tensor("sum", F, [None] * 3)], inits, opset=17,
                       extra_opsets=MS)
    _check(proto, {"x": x, "skip": skip})


def test_skip_layer_norm_statistics_output_stays_opaque_with_reason() -> None:
    rng = np.random.default_rng(7)
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"],
                            ["y", "mean"], domain="com.microsoft")
    proto = onnx_model([node], [tensor("x", F, [1, 2, 8]), tensor("skip", F, [1, 2, 8])],
                       [tensor("y", F, [None] * 3), tensor("mean", F, [None] * 3)],
                       {"gamma": _rand(rng, 8)}, opset=17, extra_opsets=MS)
    _, coverage = from_onnx(proto)
    assert coverage.reasons["com.microsoft::SkipLayerNormalization"] == \
        "the mean / inv_std_var outputs have no neutral equivalent"


def test_unmapped_contrib_node_keeps_its_output_types_through_export(tmp_path: Path) -> None:
    """A com.microsoft node irbridge does not map (Inverse) stays opaque; its output type,
    known from the file's value_info, is written back as value_info (ONNX's inference has
    no schema for it), so the re-exported file re-imports with only that node opaque and
    the symbolic batch kept, and runs in onnxruntime as the original does."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Inverse", ["x"], ["xi"], domain="com.microsoft"),
             helper.make_node("MatMul", ["xi", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [tensor("x", F, ["batch", 4, 4])], [tensor("y", F, ["batch", 4, 4])],
        [onnx.numpy_helper.from_array(_rand(rng, 4, 4), "w")],
        value_info=[tensor("xi", F, ["batch", 4, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    proto.ir_version = 8
    model, coverage = from_onnx(proto)
    assert dict(coverage.opaque) == {"com.microsoft::Inverse": 1}
    again = to_onnx(model)
    assert [(v.name, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in again.graph.value_info] == [("xi", ["batch", 4, 4])]
    back, coverage = from_onnx(again)
    assert dict(coverage.opaque) == {"com.microsoft::Inverse": 1}
    assert [str(n.outputs[0].type) for _, n in back.all_nodes()] == \
        [str(n.outputs[0].type) for _, n in model.all_nodes()]
    feeds = {"x": _rand(rng, 3, 4, 4) + 3 * np.eye(4, dtype=np.float32)}
    _close(_ort(again, feeds), _ort(proto, feeds))


# -- attention -------------------------------------------------------------------------------

def _attention_model(mask: np.ndarray | None, *, unidirectional: int = 0,
                     attention_bias: bool = False, sizes: list[int] | None = None
                     ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(8)
    hidden, heads = 16, 2
    sizes = sizes or [hidden] * 3
    feeds = {"x": _rand(rng, 2, 5, hidden)}
    names = ["x", "w", "b", "mask" if mask is not None else ""]
    if mask is not None:
        feeds["mask"] = mask
    if attention_bias:
        names += ["", "attn_bias"]
        feeds["attn_bias"] = _rand(rng, 1, heads, 5, 5)
    attrs: dict[str, object] = {"num_heads": heads, "unidirectional": unidirectional}
    if sizes != [hidden] * 3:
        attrs["qkv_hidden_sizes"] = sizes
    node = helper.make_node("Attention", names, ["y"], domain="com.microsoft", **attrs)
    inputs = [tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for k, v in feeds.items()]
    proto = onnx_model([node], inputs, [tensor("y", F, [None] * 3)],
                       {"w": _rand(rng, hidden, sum(sizes)) * 0.5,
                        "b": _rand(rng, sum(sizes))}, opset=17, extra_opsets=MS)
    return proto, feeds


@pytest.mark.parametrize("form", ["none", "raw2d", "raw3d", "lengths", "ranges",
                                  "causal", "causal_lengths", "bias", "v_size"])
def test_attention(form: str) -> None:
    raw = np.ones((2, 5), np.int32)
    raw[1, 3:] = 0
    mask = {"raw2d": raw, "raw3d": np.tril(np.ones((2, 5, 5), np.int32)),
            "lengths": np.array([5, 2], np.int32),
            "ranges": np.array([5, 4, 1, 2], np.int32),
            "causal_lengths": np.array([4, 3], np.int32)}.get(form)
    proto, feeds = _attention_model(
        mask, unidirectional=int(form.startswith("causal")), attention_bias=form == "bias",
        sizes=[16, 16, 8] if form == "v_size" else None)
    model = _check(proto, feeds)
    assert sum(n.op == "attention" for _, n in model.all_nodes()) == 1


def test_attention_with_past_state_stays_opaque_with_reason() -> None:
    proto, _ = _attention_model(None)
    node = proto.graph.node[0]
    node.input.extend(["past"])
    proto.graph.input.append(tensor("past", F, [2, 2, 2, 3, 8]))
    _, coverage = from_onnx(proto)
    assert coverage.reasons["com.microsoft::Attention"] == "past / present key-value state"


def _mha_model(*, bias: bool, padding: np.ndarray | None, attention_bias: bool,
               unidirectional: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    feeds = {"q": _rand(rng, 2, 4, 16), "k": _rand(rng, 2, 6, 16), "v": _rand(rng, 2, 6, 8)}
    names = ["q", "k", "v", "bias" if bias else "", "pad" if padding is not None else ""]
    if padding is not None:
        feeds["pad"] = padding
    if attention_bias:
        names.append("attn_bias")
        feeds["attn_bias"] = _rand(rng, 2, 1, 4, 6)
    node = helper.make_node("MultiHeadAttention", names, ["y"], domain="com.microsoft",
                            num_heads=2, scale=0.3, unidirectional=unidirectional)
    inputs = [tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for k, v in feeds.items()]
    inits = {"bias": _rand(rng, 40)} if bias else {}
    return onnx_model([node], inputs, [tensor("y", F, [None] * 3)], inits, opset=17,
                      extra_opsets=MS), feeds


@pytest.mark.parametrize("form", ["plain", "bias", "padding2d", "lengths", "attention_bias"])
def test_multi_head_attention(form: str) -> None:
    padding = {"padding2d": np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32),
               "lengths": np.array([6, 3], np.int32)}.get(form)
    proto, feeds = _mha_model(bias=form == "bias", padding=padding,
                              attention_bias=form == "attention_bias")
    _check(proto, feeds)


# -- files written by onnxruntime's own tools ------------------------------------------------------

def _ort_optimized(plain: Path, level: ort.GraphOptimizationLevel) -> Path:
    """The file onnxruntime's session writes after its graph optimisations at `level`."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.graph_optimization_level = level
    out = plain.with_name(plain.stem + "_ortopt.onnx")
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(plain), options, providers=["CPUExecutionProvider"])
    return out


def _export(module: nn.Module, args: tuple[torch.Tensor, ...], path: Path,
            names: Sequence[str], opset: int = 17) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=opset,
                          input_names=list(names))
    return path


def _contrib_ops(path: Path) -> Counter[str]:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node
                   if n.domain == "com.microsoft")


def _check_file(path: Path, feeds: Mapping[str, np.ndarray], exact: bool = False) -> Model:
    return _check(onnx.load(str(path)), feeds, exact)


class _Cnn(nn.Module):
    """Conv + BatchNorm + ReLU, a residual Add into a ReLU, a Clip, a Linear + ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.b1, self.b2 = nn.BatchNorm2d(8), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)) + y)
        y = torch.clamp(self.c2(y), 0, 6)
        return torch.relu(self.fc(y.mean((2, 3))))


def test_ort_extended_cnn_imports_fully_with_the_plain_files_macs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 12, 12)
    plain = _export(_Cnn(), (x,), tmp_path / "cnn.onnx", ["x"])
    fused = _ort_optimized(plain, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    assert _contrib_ops(fused) == {"FusedConv": 2, "FusedGemm": 1}
    model = _check_file(fused, {"x": x.numpy()})
    assert summarize(model).cost.macs == summarize(import_onnx(plain)).cost.macs > 0


def test_resnet18_saved_by_onnxruntime_has_torchvisions_macs(tmp_path: Path) -> None:
    """The figure the brief names: 1,814,073,344 MACs for 1x3x224x224 (torchvision's)."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18()
    plain = _export(net, (torch.randn(1, 3, 224, 224),), tmp_path / "r18.onnx", ["x"])
    fused = _ort_optimized(plain, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    assert _contrib_ops(fused)["FusedConv"] > 0
    model, coverage = import_onnx_with_coverage(fused)
    assert coverage.fully_neutral, coverage.lines()
    assert summarize(model).cost.macs == 1_814_073_344


class _Block(nn.Module):
    """Transformer block with fused QKV, two residual LayerNorms, erf GELU, and a tail
    that onnxruntime turns into QuickGelu."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, 64), nn.Linear(64, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=-1))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        x = self.ln1(x + self.o(y))
        x = self.ln2(x + self.f2(nn.functional.gelu(self.f1(x))))
        return x + torch.sigmoid(1.702 * x) * x


def test_ort_extended_transformer_block(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x, mask = torch.randn(2, 6, 32), torch.ones(2, 6)
    mask[1, 4:] = 0
    plain = _export(_Block(), (x, mask), tmp_path / "block.onnx", ["x", "mask"])
    fused = _ort_optimized(plain, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    assert _contrib_ops(fused) == {"SkipLayerNormalization": 2, "FusedMatMul": 1, "Gelu": 1,
                                   "QuickGelu": 1}
    model = _check_file(fused, {"x": x.numpy(), "mask": mask.numpy()})
    assert summarize(model).cost.macs == summarize(import_onnx(plain)).cost.macs > 0


class _Bert(nn.Module):
    """BERT's layer as onnxruntime's transformers optimizer fuses it: embedding
    LayerNorm, separate q/k/v projections, the additive -10000 padding mask, tanh GELU."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln0, self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, 64), nn.Linear(64, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln0(x)
        b, n, d = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        bias = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
        scores = torch.matmul(q, k.transpose(-1, -2)) / (d // self.heads) ** 0.5 + bias
        y = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).contiguous().view(b, n, d)
        x = self.ln1(self.o(y) + x)
        return self.ln2(self.f2(nn.functional.gelu(self.f1(x), approximate="tanh")) + x)


def test_transformers_optimizer_bert(tmp_path: Path) -> None:
    """optimize_model(..., model_type="bert"): Attention with a key-length mask_index,
    SkipLayerNormalization, FastGelu."""
    torch.manual_seed(0)
    x, mask = torch.randn(2, 6, 32), torch.ones(2, 6, dtype=torch.int64)
    mask[1, 4:] = 0
    plain = _export(_Bert(), (x, mask), tmp_path / "bert.onnx", ["x", "mask"])
    fused = tmp_path / "bert_opt.onnx"
    optimizer.optimize_model(str(plain), model_type="bert", num_heads=4,
                             hidden_size=32).save_model_to_file(str(fused))
    assert _contrib_ops(fused) == {"Attention": 1, "SkipLayerNormalization": 2,
                                   "FastGelu": 1}
    model = _check_file(fused, {"x": x.numpy(), "mask": mask.numpy()})
    assert summarize(model).cost.macs == summarize(import_onnx(plain)).cost.macs > 0


@pytest.mark.parametrize("opset", [14, 16])
@pytest.mark.parametrize("writer", ["transformers_optimizer", "session_extended"])
def test_layer_normalization_below_opset_17_as_onnxruntime_writes_it(
        tmp_path: Path, writer: str, opset: int) -> None:
    """onnxruntime's optimizers fuse LayerNorm into a default-domain LayerNormalization
    whatever the file's opset, where ONNX defines that op only from 17: the checker needs
    onnxruntime's version-1 schema (converters/onnx/_ort_schemas.py) and the node maps to
    layer_norm like ONNX's own."""
    torch.manual_seed(0)
    x, mask = torch.randn(2, 6, 32), torch.ones(2, 6, dtype=torch.int64)
    mask[1, 4:] = 0
    plain = _export(_Bert(), (x, mask), tmp_path / "bert.onnx", ["x", "mask"], opset=opset)
    if writer == "transformers_optimizer":
        fused = tmp_path / "bert_opt.onnx"
        optimizer.optimize_model(str(plain), model_type="bert", num_heads=4,
                                 hidden_size=32).save_model_to_file(str(fused))
    else:
        fused = _ort_optimized(plain, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    proto = onnx.load(str(fused))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    assert any(n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx")
               for n in proto.graph.node)
    model = _check_file(fused, {"x": x.numpy(), "mask": mask.numpy()})
    assert "layer_norm" in {n.op for _, n in model.all_nodes()}
    assert summarize(model).cost.macs == summarize(import_onnx(plain)).cost.macs > 0


def test_irbridges_own_onnxruntime_target_round_trips(tmp_path: Path) -> None:
    """export_onnx(target="onnxruntime") writes MultiHeadAttention; importing the file
    gives the neutral attention back, and it computes what onnxruntime computes from the
    file (a query whose every key is masked included: 0)."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 32)
    mask = torch.rand(2, 1, 6, 6) > 0.3
    mask[:, :, :, 0] = True
    mask[1, 0, 2, :] = False
    ir = capture(_Attention().eval(), (x, mask), weights=True).model
    tuned = export_onnx(ir, tmp_path / "tuned.onnx", opset=20, target="onnxruntime")
    assert _contrib_ops(tuned) == {"MultiHeadAttention": 1}
    feeds = {i.name: a for i, a in zip(onnx.load(str(tuned)).graph.input,
                                       (x.numpy(), mask.numpy()), strict=True)}
    model = _check_file(tuned, feeds)
    assert sum(n.op == "attention" for _, n in model.all_nodes()) == 1


# -- dynamic quantisation: MatMulInteger, ConvInteger ---------------------------------------------

def test_quantize_dynamic_cnn_and_mlp(tmp_path: Path) -> None:
    """quantize_dynamic writes ConvInteger and MatMulInteger. The original runs with
    onnxruntime's graph optimisations off, so that it computes the file's ops as written
    (its fusions of DynamicQuantizeLinear + MatMulInteger + Mul round differently)."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 12, 12)
    plain = _export(_Cnn(), (x,), tmp_path / "cnn.onnx", ["x"])
    quant = tmp_path / "cnn_dyn.onnx"
    quantize_dynamic(str(plain), str(quant), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["Conv", "MatMul", "Gemm"])
    ops = Counter(n.op_type for n in onnx.load(str(quant)).graph.node)
    assert ops["ConvInteger"] == 3 and ops["MatMulInteger"] == 1, ops
    _check_file(quant, {"x": x.numpy()})


def _ints(rng: np.random.Generator, dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _matmul_integer_model(a_zp_shape: list[int], b_zp: np.ndarray) -> onnx.ModelProto:
    node = helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])
    rng = np.random.default_rng(10)
    return onnx_model([node], [tensor("a", U8, [5, 64]), tensor("azp", U8, a_zp_shape)],
                      [tensor("y", I32, [5, 7])],
                      {"b": _ints(rng, np.int8, 64, 7), "bzp": b_zp}, opset=17)


def test_matmul_integer_zero_points_exact() -> None:
    """uint8 A, int8 B, both with zero points: int32, exactly onnxruntime's."""
    rng = np.random.default_rng(11)
    proto = _matmul_integer_model([], np.array(-3, np.int8))
    _check(proto, {"a": _ints(rng, np.uint8, 5, 64), "azp": np.array(131, np.uint8)},
           exact=True)


def test_matmul_integer_per_row_and_column_zero_points() -> None:
    """ONNX allows a per-row A and per-column B zero point; onnxruntime's CPU kernel does
    not take them, so the expected value is numpy's int64 (a - azp) @ (b - bzp)."""
    rng = np.random.default_rng(12)
    bzp = _ints(rng, np.int8, 7)
    proto = _matmul_integer_model([5], bzp)
    a, azp = _ints(rng, np.uint8, 5, 64), _ints(rng, np.uint8, 5)
    b = onnx.numpy_helper.to_array(proto.graph.initializer[0])
    want = (a.astype(np.int64) - azp[:, None]) @ (b.astype(np.int64) - bzp)
    model = _import(proto)
    _close(_outputs(model, {"a": a, "azp": azp}), [want.astype(np.int32)], exact=True)
    _close(_ort(to_onnx(model), {"a": a, "azp": azp}), [want.astype(np.int32)], exact=True)


def _conv_integer_model(wzp: np.ndarray) -> onnx.ModelProto:
    rng = np.random.default_rng(13)
    node = helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], pads=[1] * 4)
    return onnx_model([node], [tensor("x", U8, [1, 64, 5, 5]), tensor("xzp", U8, [])],
                      [tensor("y", I32, [1, 4, 5, 5])],
                      {"w": rng.choice(np.array([-128, 127], np.int8), (4, 64, 3, 3)),
                       "wzp": wzp}, opset=17)


def test_conv_integer_cut_into_exact_float32_parts() -> None:
    """Extreme int8 weights over 64 input channels and a run-time x zero point: one
    float32 sum could pass 2^24, so the convolution is cut by input channels; the int32
    result is exactly onnxruntime's."""
    rng = np.random.default_rng(14)
    model = _check(_conv_integer_model(np.array(5, np.int8)),
                   {"x": _ints(rng, np.uint8, 1, 64, 5, 5), "xzp": np.array(37, np.uint8)},
                   exact=True)
    assert sum(n.op == "conv" for _, n in model.all_nodes()) > 1


def test_conv_integer_per_channel_weight_zero_point() -> None:
    """A per-output-channel w zero point (ONNX allows it, onnxruntime's CPU kernel does
    not): expected value from numpy's int64 windows, not from the code under test."""
    rng = np.random.default_rng(15)
    wzp = _ints(rng, np.int8, 4)
    proto = _conv_integer_model(wzp)
    x, xzp = _ints(rng, np.uint8, 1, 64, 5, 5), np.array(200, np.uint8)
    w = onnx.numpy_helper.to_array(proto.graph.initializer[0]).astype(np.int64)
    padded = np.pad(x.astype(np.int64) - 200, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,ocij->nohw", windows, w - wzp[:, None, None, None])
    model = _import(proto)
    _close(_outputs(model, {"x": x, "xzp": xzp}), [want.astype(np.int32)], exact=True)
    _close(_ort(to_onnx(model), {"x": x, "xzp": xzp}), [want.astype(np.int32)], exact=True)


def test_conv_integer_beyond_the_exact_bound_stays_opaque_with_reason() -> None:
    """A grouped convolution whose float32 sums could pass 2^24 is refused, not cut."""
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], group=2)
    proto = onnx_model([node], [tensor("x", U8, [1, 128, 3, 3])],
                       [tensor("y", I32, [1, 2, 1, 1])],
                       {"w": np.full((2, 64, 3, 3), -128, np.int8)}, opset=17)
    model, coverage = from_onnx(proto)
    assert coverage.opaque == {"onnx::ConvInteger": 1}
    assert "float32 sums could exceed 2^24" in coverage.reasons["onnx::ConvInteger"]
    assert model.graphs[0].nodes[0].is_opaque


class _ConvMatMul(nn.Module):
    """Conv + ReLU twice, flatten, matmul: all QOperator ops of the default domain."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2)
        self.w = nn.Parameter(torch.randn(8 * 4 * 4, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(torch.relu(self.c2(torch.relu(self.c1(x)))), 1) @ self.w


class _Calibration(CalibrationDataReader):
    def __init__(self) -> None:
        self.count = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        self.count += 1
        if self.count > 3:
            return None
        rng = np.random.default_rng(self.count)
        return {"x": rng.standard_normal((1, 3, 10, 10)).astype(np.float32)}


def _qoperator(module: nn.Module, tmp_path: Path, **options: object
               ) -> tuple[Path, onnx.ModelProto]:
    """`module` (seed 0) exported at opset 17 and quantised by quantize_static to the
    QOperator format (int8 weights), calibrated on `_Calibration`'s three inputs."""
    torch.manual_seed(0)
    plain = _export(module, (torch.randn(1, 3, 10, 10),), tmp_path / "plain.onnx", ["x"])
    quant = tmp_path / "quant.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(plain), str(quant), _Calibration(),
                        quant_format=QuantFormat.QOperator, weight_type=QuantType.QInt8,
                        **options)  # type: ignore[arg-type]
    return plain, onnx.load(str(quant))


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_static_qoperator_exact(tmp_path: Path, per_channel: bool) -> None:
    """QLinearConv / QLinearMatMul: the integer accumulation and onnxruntime's
    requantisation (float32 multiplier x_scale * w_scale / y_scale, round half to even,
    saturate), so the uint8 outputs and the dequantised result are exactly onnxruntime's."""
    _, proto = _qoperator(_ConvMatMul(), tmp_path, per_channel=per_channel)
    x = np.random.default_rng(0).standard_normal((1, 3, 10, 10)).astype(np.float32)
    ops = Counter(n.op_type for n in proto.graph.node)
    assert ops["QLinearConv"] == 2 and ops["QLinearMatMul"] == 1, ops
    scales = [onnx.numpy_helper.to_array(t) for t in proto.graph.initializer
              if t.name.endswith("_scale")]
    assert any(s.size > 1 for s in scales) == per_channel
    _check(proto, {"x": x}, exact=True)


class _QOpBlock(nn.Module):
    """What QOperator quantisation turns into its com.microsoft ops: a residual add
    (QLinearAdd), a squeeze-excite gate (QGemm, QLinearSigmoid, QLinearMul), a leaky ReLU,
    global average pooling, a concat, a classifier (QGemm) and a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.gate, self.fc = nn.Linear(8, 8), nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.c1(x))
        h = self.c2(h) + h
        gate = torch.sigmoid(self.gate(h.mean((2, 3))))[:, :, None, None]
        h = nn.functional.leaky_relu(h * gate, 0.1)
        p = nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)
        return torch.softmax(self.fc(torch.cat([p, p * 0.5], 1)), -1)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("activations", [QuantType.QUInt8, QuantType.QInt8])
def test_quantize_static_qoperator_elementwise_pooling_and_gemm(
        tmp_path: Path, per_channel: bool, activations: QuantType) -> None:
    """QLinearAdd / Mul / Sigmoid / LeakyRelu / GlobalAveragePool / Concat / Softmax and
    QGemm were unmapped: their outputs had no type, so every QLinearConv after them went
    opaque too (resnet18's QOperator file: 29 opaque nodes, only a fifth of its MACs
    counted). Each is now the float op between a dequantisation and a requantisation;
    onnxruntime computes the same float32 arithmetic, and over these 8 seeded inputs the
    outputs are equal (exact: the comparison would show a one-step rounding difference)."""
    plain, proto = _qoperator(_QOpBlock(), tmp_path, activation_type=activations,
                              per_channel=per_channel)
    ops = {n.op_type for n in proto.graph.node if n.domain == "com.microsoft"}
    assert ops == {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
                   "QLinearGlobalAveragePool", "QLinearConcat", "QLinearSoftmax", "QGemm"}
    for seed in range(8):
        rng = np.random.default_rng(seed)
        model = _check(proto, {"x": rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
                               * 2}, exact=True)
    assert summarize(model).cost.macs == summarize(import_onnx(plain)).cost.macs > 0


@pytest.mark.parametrize(("alpha", "trans_a", "trans_b", "quantized_output", "per_column"), [
    (1.0, 0, 1, True, False), (0.5, 1, 1, True, False), (1.0, 0, 1, False, True),
    (2.0, 1, 1, False, False), (1.0, 0, 0, True, True), (0.5, 1, 0, False, True)])
def test_qgemm_attributes_and_output_forms(alpha: float, trans_a: int, trans_b: int,
                                           quantized_output: bool, per_column: bool) -> None:
    """QGemm's alpha, transA, transB, an int32 bias, per-column b scales and zero points
    (along B's last axis when it is not transposed: that case was refused), and its float
    output (no y_scale) as well as its quantised one, exactly as onnxruntime computes
    them."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 255, (4, 6), dtype=np.uint8)
    a = a.T.copy() if trans_a else a
    b = rng.integers(-100, 100, (5, 6), dtype=np.int8)
    weights = {"a_scale": np.array(0.02, np.float32), "a_zero": np.array(128, np.uint8),
               "b": b if trans_b else b.T.copy(),
               "b_scale": np.array([0.01, 0.02, 0.03, 0.015, 0.005], np.float32)
               if per_column else np.array(0.01, np.float32),
               "b_zero": np.array([0, 3, -2, 1, 5], np.int8) if per_column
               else np.zeros((), np.int8),
               "c": rng.integers(-500, 500, 5).astype(np.int32)}
    if quantized_output:
        weights |= {"y_scale": np.array(0.05, np.float32), "y_zero": np.array(100, np.uint8)}
    node = helper.make_node("QGemm", ["a", *weights], ["y"], domain="com.microsoft",
                            alpha=alpha, transA=trans_a, transB=trans_b)
    proto = onnx_model([node], [tensor("a", U8, list(a.shape))],
                       [tensor("y", U8 if quantized_output else F, [4, 5])], weights,
                       opset=17, extra_opsets=MS)
    _check(proto, {"a": a}, exact=True)


@pytest.mark.parametrize("form", ["full", "no_segment", "position_ids"])
def test_embed_layer_normalization(form: str) -> None:
    """All three outputs; the mask holds a 2 and a -1 (mask_index counts the 1s)."""
    rng = np.random.default_rng(16)
    inits = {"word": _rand(rng, 20, 8), "pos": _rand(rng, 10, 8), "seg_table": _rand(rng, 2, 8),
             "gamma": _rand(rng, 8), "beta": _rand(rng, 8)}
    feeds = {"ids": rng.integers(0, 20, (2, 5)).astype(np.int32),
             "mask": np.array([[2, 1, 0, 1, 1], [1, -1, 1, 0, 0]], np.int32)}
    names = ["ids", "seg", "word", "pos", "seg_table", "gamma", "beta", "mask"]
    if form == "no_segment":
        names[1] = names[4] = ""
        del inits["seg_table"]
    else:
        feeds["seg"] = rng.integers(0, 2, (2, 5)).astype(np.int32)
    if form == "position_ids":
        names.append("position_ids")
        feeds["position_ids"] = np.array([[4, 3, 2, 1, 0]], np.int32)
    node = helper.make_node("EmbedLayerNormalization", names, ["y", "mask_index", "sum"],
                            domain="com.microsoft", epsilon=1e-5)
    inputs = [tensor(k, I32, list(v.shape)) for k, v in feeds.items()]
    proto = onnx_model([node], inputs, [tensor("y", F, [2, 5, 8]), tensor("mask_index", I32, [2]),
                                        tensor("sum", F, [2, 5, 8])], inits, opset=17,
                       extra_opsets=MS)
    _check(proto, feeds)


@pytest.mark.parametrize(("layout", "interleaved", "rotary", "positions"), [
    ("bsnh", 0, 0, "ids"), ("bsnh", 1, 0, "ids"), ("bnsh", 0, 0, "ids"),
    ("bnsh", 1, 4, "offset"), ("bsnh", 0, 4, "offset")])
def test_rotary_embedding(layout: str, interleaved: int, rotary: int, positions: str) -> None:
    rng = np.random.default_rng(17)
    batch, seq, heads, head = 2, 5, 2, 8
    half = (rotary or head) // 2
    shape = [batch, seq, heads * head] if layout == "bsnh" else [batch, heads, seq, head]
    feeds = {"x": _rand(rng, *shape),
             "pos": (rng.integers(0, 16, (batch, seq)) if positions == "ids"
                     else np.array([3])).astype(np.int64)}
    attrs: dict[str, object] = {"interleaved": interleaved}
    if rotary:
        attrs |= {"rotary_embedding_dim": rotary, "num_heads": heads}
    angles = rng.uniform(0, 6, (16, half)).astype(np.float32)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"],
                            domain="com.microsoft", **attrs)
    proto = onnx_model([node], [tensor("x", F, shape), tensor("pos", I64, list(feeds["pos"].shape))],
                       [tensor("y", F, shape)], {"cos": np.cos(angles), "sin": np.sin(angles)},
                       opset=17, extra_opsets=MS)
    _check(proto, feeds)


def test_dynamic_quantization_fused_by_onnxruntime(tmp_path: Path) -> None:
    """A quantize_dynamic file saved by an EXTENDED session: DynamicQuantizeMatMul and
    MatMulIntegerToFloat (com.microsoft; q, k and v share one quantised input). Integer accumulation is exact; the float32 output
    stage float32(acc) * (a_scale * b_scale) + bias is the kernel's, so the tolerance is
    the common one (the quantised operands themselves must match: a rounding flip in A's
    quantisation would be off by a whole scale step, ~1e-2 here)."""
    torch.manual_seed(0)
    x, mask = torch.randn(2, 6, 32), torch.ones(2, 6, dtype=torch.int64)
    mask[1, 4:] = 0
    plain = _export(_Bert(), (x, mask), tmp_path / "bert.onnx", ["x", "mask"])
    quant = tmp_path / "bert_dyn.onnx"
    quantize_dynamic(str(plain), str(quant), weight_type=QuantType.QInt8)
    fused = _ort_optimized(quant, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    ops = _contrib_ops(fused)
    assert ops["DynamicQuantizeMatMul"] > 0 and ops["MatMulIntegerToFloat"] > 0, ops
    _check_file(fused, {"x": x.numpy(), "mask": mask.numpy()})


def test_simplified_layer_normalization_in_the_default_domain() -> None:
    """onnxruntime's RMS norm, registered in the ONNX domain: the checker accepts it
    (converters/onnx/_ort_schemas.py) and it maps to rms_norm; a file with the model's
    shapes flows on to the next standard op."""
    rng = np.random.default_rng(18)
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["n"],
                              axis=-1, epsilon=1e-6, stash_type=1),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    proto = onnx_model(nodes, [tensor("x", F, [2, 3, 16])], [tensor("y", F, [2, 3, 4])],
                       {"scale": _rand(rng, 16), "w": _rand(rng, 16, 4)}, opset=17)
    model = _check(proto, {"x": _rand(rng, 2, 3, 16) * 4})
    assert [n.op for _, n in model.all_nodes()] == ["rms_norm", "matmul"]
