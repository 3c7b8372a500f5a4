"""Importing the ONNX files LLMs ship in for onnxruntime: com.microsoft `MatMulNBits` and
`GatherBlockQuantized`, and standard `DequantizeLinear` / `QuantizeLinear` with
`block_size` (opset 21), as onnxruntime's own 4-bit quantizer (`MatMulNBitsQuantizer`,
QOperator and QDQ formats) writes them; com.microsoft `GroupQueryAttention` with its KV
cache.

Ground truth is onnxruntime 1.31 (CPU, one thread) running the quantised file. Its QDQ
files are run with `session.qdq_matmulnbits_accuracy_level` 0: by default (4) onnxruntime
fuses DequantizeLinear + MatMul into a MatMulNBits that quantises the activations to
int8 per block, which is not the file's arithmetic (off by ~1% here). The imported IR runs
in irbridge's executor (numpy) and, exported again as standard ONNX, in onnxruntime.

Tolerances: GroupQueryAttention's softmax differs from onnxruntime's in summation order
and exp implementation only (O(1) inputs, head size 32, <= 9 keys): atol 1e-5 + rtol 1e-5
as below; a wrong position, mask offset or head grouping is off by O(0.1).
The dequantised weights are exact products (q - zero_point) * scale in float32
either way; what differs is only the summation order of the float32 matmuls (K <= 96
products of O(1) values, outputs O(0.1) to O(10)): atol 1e-5 + rtol 1e-5 holds with a wide
margin, while a wrong nibble order, block index or zero point changes outputs by O(0.01)
or more (one quantisation step of one weight times an O(1) input).
"""

from __future__ import annotations

import io
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnxruntime.quantization import QuantFormat
from onnxruntime.quantization.matmul_nbits_quantizer import (
    DefaultWeightOnlyQuantConfig,
    MatMulNBitsQuantizer,
)
from onnxtools import onnx_model, tensor
from torch import nn

from irbridge.analysis.cost import cost_model
from irbridge.converters.onnx import to_onnx
from irbridge.converters.onnx.importer import from_onnx
from irbridge.converters.stablehlo import build_module, evaluate
from irbridge.executor import run_model
from irbridge.ir import Model

ATOL, RTOL = 1e-5, 1e-5
MS = {"com.microsoft": 1}


def _session(proto: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _ort(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in _session(proto).run(None, dict(feeds))]


def _close(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL)


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _check(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Model:
    """onnxruntime on the original vs the imported IR (executor) and its ONNX exports
    (optimised, where the exporter may fold small dequantised weights into float
    initializers, and not, where the unpacked weights and the dequantisation ops run)."""
    want = _ort(proto, feeds)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    _close([np.asarray(v) for v in run_model(model, dict(feeds))], want)
    for optimize in (True, False):
        again = to_onnx(model, optimize=optimize)
        assert not any(n.domain == "com.microsoft" for n in again.graph.node)
        _close(_ort(again, feeds), want)
    return model


# -- a tiny llama-like block, quantised by onnxruntime's MatMulNBitsQuantizer -------------------

class _RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class _Block(nn.Module):
    """Embedding, causal attention (q, k, v, o projections, 4 heads) and a gated SiLU MLP,
    with RMS norms: every weight matrix a MatMul, the table a Gather."""

    def __init__(self, vocab: int = 50, dim: int = 64, hidden: int = 96, heads: int = 4
                 ) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.norm1, self.norm2 = _RMSNorm(dim), _RMSNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        b, s, d = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).reshape(b, s, self.heads, -1).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(att)
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


VOCAB, SEQ = 50, 7


def _float_file(dynamic: bool = False) -> onnx.ModelProto:
    """The block as torch.onnx exports it; `dynamic`: batch and sequence dims symbolic."""
    torch.manual_seed(0)
    buffer = io.BytesIO()
    axes = {"ids": {0: "batch", 1: "sequence"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Block().eval(), (torch.zeros(2, SEQ, dtype=torch.long),), buffer,
                          dynamo=False, opset_version=21, input_names=["ids"],
                          output_names=["y"], dynamic_axes=axes)
    return onnx.load_from_string(buffer.getvalue())


def _quantised(proto: onnx.ModelProto, fmt: QuantFormat, symmetric: bool, bits: int = 4
               ) -> onnx.ModelProto:
    ops = ("MatMul", "Gather") if fmt == QuantFormat.QOperator else ("MatMul",)
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=symmetric,
                                          quant_format=fmt, op_types_to_quantize=ops,
                                          bits=bits)
    quantizer = MatMulNBitsQuantizer(onnx.ModelProto.FromString(proto.SerializeToString()),
                                     algo_config=config)
    quantizer.process()
    return quantizer.model.model


def _file_bytes(t: onnx.TensorProto) -> int:
    """Bytes a file's initializer holds, sub-byte types packed."""
    bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4}.get(
        t.data_type, 8 * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
    return (int(np.prod(t.dims)) * bits + 7) // 8


@pytest.fixture(scope="module")
def float_file() -> onnx.ModelProto:
    return _float_file()


@pytest.mark.parametrize("symmetric", [False, True], ids=["zero_points", "symmetric"])
@pytest.mark.parametrize("fmt", [QuantFormat.QOperator, QuantFormat.QDQ],
                         ids=["QOperator", "QDQ"])
def test_llama_block_quantised(float_file: onnx.ModelProto, fmt: QuantFormat,
                               symmetric: bool) -> None:
    proto = _quantised(float_file, fmt, symmetric)
    ops = Counter(n.op_type for n in proto.graph.node)
    if fmt == QuantFormat.QOperator:  # the 7 weight matrices and the table
        assert ops["MatMulNBits"] == 7 and ops["GatherBlockQuantized"] == 1
    else:
        blocked = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"]
        assert len(blocked) == 7 and all(
            helper.get_attribute_value(a) == 32
            for n in blocked for a in n.attribute if a.name == "block_size")
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, SEQ)).astype(np.int64)
    model = _check(proto, {"ids": ids})
    # the imported file costs what the float model costs in MACs, and reads the file's
    # packed weight bytes (4-bit values half a byte each)
    floats, _ = from_onnx(float_file)
    report, float_report = cost_model(model), cost_model(floats)
    assert report.total.macs == float_report.total.macs > 0
    read = {v.tensor.name for _, n in model.all_nodes() for v in n.inputs
            if v is not None and v.tensor is not None}
    held = sum(_file_bytes(t) for t in proto.graph.initializer
               if t.name in read or f"{t.name}_unpacked4" in read)
    assert report.weight_bytes == held
    # 4 bits a weight + a float32 scale (and a 4-bit zero point) per 32: ~5.1 bits of 32
    # (QDQ files keep the embedding table float: 12,800 of 152,576 bytes)
    assert report.weight_bytes * 4 < float_report.weight_bytes


@pytest.mark.parametrize("fmt", [QuantFormat.QOperator, QuantFormat.QDQ],
                         ids=["QOperator", "QDQ"])
def test_llama_block_symbolic_dims(fmt: QuantFormat) -> None:
    """As LLM files come: batch and sequence symbolic; one import runs at two lengths."""
    proto = _quantised(_float_file(dynamic=True), fmt, symmetric=False)
    for length in (3, 9):
        ids = np.random.default_rng(length).integers(0, VOCAB, (1, length)).astype(np.int64)
        _check(proto, {"ids": ids})


# -- single nodes: the forms the quantizer does not write ----------------------------------------

def _one_node(op: str, names: Sequence[str], inputs: dict[str, np.ndarray],
              weights: dict[str, np.ndarray], out_rank: int, **attrs: object
              ) -> onnx.ModelProto:
    """One com.microsoft node reading `names` ("" leaves an optional input out): `inputs`
    graph inputs, `weights` initializers."""
    node = helper.make_node(op, list(names), ["y"], domain="com.microsoft", **attrs)
    graph_inputs = [tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                    for k, v in inputs.items()]
    return onnx_model([node], graph_inputs, [tensor("y", TensorProto.FLOAT, [None] * out_rank)],
                      weights, opset=21, extra_opsets=MS)


@pytest.mark.parametrize(("bits", "zero"), [
    (bits, zero) for bits in (2, 4, 8) for zero in ("none", "packed", "float")
    if (bits, zero) != (8, "float")])  # onnxruntime: "Only 2b and 4b ... unpacked compute"
def test_matmul_nbits_node(bits: int, zero: str) -> None:
    """K = 40 in blocks of 16: the third block is half padding; 3 blocks of zero points
    pack into a padded byte row (one byte of 8-bit ones each, no padding); a bias."""
    rng = np.random.default_rng(bits)
    k, n, block = 40, 24, 16
    blocks = 3
    weights = {
        "B": rng.integers(0, 256, (n, blocks, block * bits // 8), dtype=np.uint8),
        "scales": (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32),
        "bias": rng.standard_normal(n).astype(np.float32),
    }
    if zero == "packed":
        weights["zero_points"] = rng.integers(0, 256, (n, -(-blocks * bits // 8)),
                                              dtype=np.uint8)
    elif zero == "float":
        weights["zero_points"] = rng.integers(0, 1 << bits, (n, blocks)).astype(np.float32)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    names = ["A", "B", "scales", "zero_points" if zero != "none" else "", "", "bias"]
    proto = _one_node("MatMulNBits", names, {"A": a}, weights, 3, K=k, N=n, bits=bits,
                      block_size=block)
    _check(proto, {"A": a})


def test_matmul_nbits_float16() -> None:
    """float16 A and scales: the dequantisation and the product in float16. Tolerance: two
    float16 ulps of the outputs (|y| < 8: 2^-7), since onnxruntime accumulates in float32
    and rounds once while the dequantised weights and the products here round to float16;
    a wrong block or nibble is off by O(0.1)."""
    rng = np.random.default_rng(8)
    k, n, block = 64, 24, 32
    weights = {"B": rng.integers(0, 256, (n, 2, block // 2), dtype=np.uint8),
               "scales": (rng.random((n, 2)) * 0.1 + 0.01).astype(np.float16)}
    a = rng.standard_normal((2, 3, k)).astype(np.float16)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    proto = onnx_model([node], [tensor("A", TensorProto.FLOAT16, [2, 3, k])],
                       [tensor("y", TensorProto.FLOAT16, [2, 3, n])], weights, opset=21,
                       extra_opsets=MS)
    want = _ort(proto, {"A": a})[0]
    assert np.abs(want).max() < 8
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    for got in (np.asarray(run_model(model, {"A": a})[0]), _ort(to_onnx(model), {"A": a})[0]):
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   atol=2 ** -7, rtol=0)


def test_matmul_nbits_shared_weights() -> None:
    """Two MatMulNBits nodes reading one packed B (tied weights) read one unpacked
    initializer: the weight bytes are the file's."""
    rng = np.random.default_rng(6)
    k, n, block = 32, 16, 16
    weights = {"B": rng.integers(0, 256, (n, 2, block // 2), dtype=np.uint8),
               "scales": (rng.random((n, 2)) * 0.1 + 0.01).astype(np.float32)}
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    nodes = [helper.make_node("MatMulNBits", [x, "B", "scales"], [y], domain="com.microsoft",
                              **attrs) for x, y in (("a", "y1"), ("b", "y2"))]
    feeds = {x: _rand(rng, 3, k) for x in ("a", "b")}
    proto = onnx_model(nodes, [tensor(x, TensorProto.FLOAT, [3, k]) for x in feeds],
                       [tensor(y, TensorProto.FLOAT, [3, n]) for y in ("y1", "y2")],
                       weights, opset=21, extra_opsets=MS)
    model = _check(proto, feeds)
    assert cost_model(model).weight_bytes == sum(w.nbytes for w in weights.values())


def test_gather_block_quantized_packed_uint8() -> None:
    """uint8 data of 4-bit values packed along the last axis, packed zero points, int32
    indices of rank 2."""
    rng = np.random.default_rng(3)
    rows, dim, block = 10, 64, 16
    data = rng.integers(0, 256, (rows, dim // 2), dtype=np.uint8)
    scales = (rng.random((rows, dim // block)) * 0.1 + 0.01).astype(np.float32)
    zeros = rng.integers(0, 256, (rows, dim // block // 2), dtype=np.uint8)
    indices = rng.integers(0, rows, (2, 5)).astype(np.int32)
    proto = _one_node("GatherBlockQuantized", ["data", "indices", "scales", "zero_points"],
                      {"indices": indices},
                      {"data": data, "scales": scales, "zero_points": zeros}, 3,
                      bits=4, block_size=block, gather_axis=0, quantize_axis=1)
    _check(proto, {"indices": indices})


def test_blocked_quantize_linear() -> None:
    """QuantizeLinear with block_size along axis 1 (the last block short), int4 output,
    then the blocked DequantizeLinear back; q read as int8 (onnxruntime returns no int4
    arrays)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 40)) * 2).astype(np.float32)
    scale = (rng.random((3, 3)) * 0.3 + 0.1).astype(np.float32)
    zero = rng.integers(-3, 4, (3, 3)).astype(ml_dtypes.int4)
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1,
                              block_size=16),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=1,
                              block_size=16),
             helper.make_node("Cast", ["q"], ["q8"], to=TensorProto.INT8)]
    proto = onnx_model(nodes, [tensor("x", TensorProto.FLOAT, [3, 40])],
                       [tensor("q8", TensorProto.INT8, [3, 40]),
                        tensor("y", TensorProto.FLOAT, [3, 40])],
                       {"scale": scale}, opset=21)
    proto.graph.initializer.append(
        helper.make_tensor("zero", TensorProto.INT4, [3, 3], zero.astype(np.int8).ravel()))
    want = _ort(proto, {"x": x})
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    assert np.unique(want[0]).size > 8  # the clip to [-8, 7] and the zero points matter
    for got in ([np.asarray(v) for v in run_model(model, {"x": x})],
                _ort(to_onnx(model, optimize=False), {"x": x})):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], atol=ATOL, rtol=RTOL)


def test_matmul_nbits_refusals() -> None:
    """g_idx and an odd bit width keep the node opaque with a one-line reason naming it."""
    rng = np.random.default_rng(5)
    b = rng.integers(0, 256, (8, 1, 8), dtype=np.uint8)
    scales = np.ones((8, 1), np.float32)
    g_idx = np.zeros(16, np.int32)
    a = rng.standard_normal((2, 16)).astype(np.float32)
    proto = _one_node("MatMulNBits", ["A", "B", "scales", "", "g_idx"], {"A": a},
                      {"B": b, "scales": scales, "g_idx": g_idx}, 2,
                      K=16, N=8, bits=4, block_size=16)
    _, coverage = from_onnx(proto)
    assert not coverage.fully_neutral
    assert any("g_idx" in line for line in coverage.lines()), coverage.lines()
    proto = _one_node("MatMulNBits", ["A", "B", "scales"], {"A": a},
                      {"B": b, "scales": scales}, 2, K=16, N=8, bits=3, block_size=16)
    _, coverage = from_onnx(proto)
    assert any("bits 3" in line for line in coverage.lines()), coverage.lines()


# -- GroupQueryAttention ---------------------------------------------------------------------------

HEADS, KV_HEADS, HEAD = 4, 2, 32  # onnxruntime: rotary dims multiples of 16


def _gqa(batch: int, length: int, past: int, *, packed: bool = False, rotary: int = 0,
         **attrs: object) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One GroupQueryAttention node of `batch` entries with `length` new tokens after `past`
    cached ones (seqlens_k = past + length - 1 for every entry), and its feeds; `rotary`:
    the rotary dim of cos / sin caches of 16 positions (0: no rotary)."""
    rng = np.random.default_rng(batch * 100 + length * 10 + past)
    feeds: dict[str, np.ndarray] = {}
    if packed:
        feeds["query"] = _rand(rng, batch, length, (HEADS + 2 * KV_HEADS) * HEAD)
        names = ["query", "", ""]
    else:
        feeds["query"] = _rand(rng, batch, length, HEADS * HEAD)
        feeds["key"] = _rand(rng, batch, length, KV_HEADS * HEAD)
        feeds["value"] = _rand(rng, batch, length, KV_HEADS * HEAD)
        names = ["query", "key", "value"]
    if past:
        feeds["past_key"] = _rand(rng, batch, KV_HEADS, past, HEAD)
        feeds["past_value"] = _rand(rng, batch, KV_HEADS, past, HEAD)
        names += ["past_key", "past_value"]
    else:
        names += ["", ""]
    feeds["seqlens_k"] = np.full(batch, past + length - 1, np.int32)
    feeds["total_sequence_length"] = np.array(past + length, np.int32)
    names += ["seqlens_k", "total_sequence_length"]
    weights = {}
    if rotary:
        angles = np.arange(16)[:, None] / 10000 ** (np.arange(rotary // 2) / (rotary // 2))
        weights = {"cos_cache": np.cos(angles).astype(np.float32),
                   "sin_cache": np.sin(angles).astype(np.float32)}
        names += ["cos_cache", "sin_cache"]
        attrs["do_rotary"] = 1
    node = helper.make_node("GroupQueryAttention", names, ["y", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=HEADS, kv_num_heads=KV_HEADS,
                            **attrs)
    graph_inputs = [tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                    for k, v in feeds.items()]
    outputs = [tensor(n, TensorProto.FLOAT, [None] * r)
               for n, r in (("y", 3), ("present_key", 4), ("present_value", 4))]
    return onnx_model([node], graph_inputs, outputs, weights, opset=21, extra_opsets=MS), feeds


@pytest.mark.parametrize(("batch", "length", "past", "options"), [
    (2, 5, 0, {}),                                        # prompt
    (2, 1, 6, {}),                                        # one decoding step
    (1, 3, 6, {}),                                        # a chunk after a cache
    (2, 5, 0, {"packed": True}),                          # packed QKV
    (2, 1, 6, {"rotary": HEAD}),                          # RoPE, halves
    (1, 3, 6, {"rotary": HEAD, "rotary_interleaved": 1}),
    (2, 5, 0, {"rotary": HEAD // 2}),                     # partial rotary dim
    (1, 3, 6, {"local_window_size": 3}),                  # sliding window
    (2, 5, 0, {"local_window_size": 2, "scale": 0.2}),
    (2, 1, 6, {"softcap": 2.0}),                          # Gemma-2's logit cap
    (1, 3, 6, {"softcap": 1.5, "local_window_size": 4}),
    (2, 5, 0, {"causal": 0}),                             # bidirectional
    (1, 3, 6, {"causal": 0, "packed": True}),
])
def test_group_query_attention(batch: int, length: int, past: int,
                               options: dict[str, object]) -> None:
    proto, feeds = _gqa(batch, length, past, **options)
    model = _check(proto, feeds)
    # the MACs of q @ k^T and probs @ v over the present keys
    macs = cost_model(model).total.macs
    assert macs == 2 * batch * HEADS * length * (past + length) * HEAD


@pytest.mark.parametrize("options", [{}, {"rotary": HEAD, "local_window_size": 2},
                                     {"causal": 0}])
def test_group_query_attention_right_padded_prompt(options: dict[str, object]) -> None:
    """A prompt batch of lengths 5 and 3 (seqlens_k 4 and 2, right padding): the rows of
    real tokens and the present key / value match onnxruntime (a padding row's output is
    whatever the kernel leaves there: not compared)."""
    proto, feeds = _gqa(2, 5, 0, **options)
    feeds["seqlens_k"] = np.array([4, 2], np.int32)
    want = _ort(proto, feeds)
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    for got in ([np.asarray(v) for v in run_model(model, feeds)],
                _ort(to_onnx(model), feeds)):
        for entry, length in enumerate((5, 3)):
            np.testing.assert_allclose(got[0][entry, :length], want[0][entry, :length],
                                       atol=ATOL, rtol=RTOL)
        for g, w in zip(got[1:], want[1:], strict=True):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL)


def test_group_query_attention_symbolic_dims() -> None:
    """batch, sequence and past length symbolic (as in LLM files): one import runs a
    decoding step of 2 entries and a chunk of 3 tokens of 1."""
    proto, step = _gqa(2, 1, 6, rotary=HEAD, local_window_size=3)
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name != "total_sequence_length":
            dims[0].dim_param = "batch"
        if value.name in ("query", "key", "value"):
            dims[1].dim_param = "sequence"
        if value.name.startswith("past_"):
            dims[2].dim_param = "past"
    _, chunk = _gqa(1, 3, 6, rotary=HEAD, local_window_size=3)
    for feeds in (step, chunk):
        _check(proto, feeds)


def test_group_query_attention_refusals() -> None:
    """A form the import does not model stays opaque, its reason naming the input or
    attribute."""
    proto, _ = _gqa(2, 1, 6, smooth_softmax=1)
    _, coverage = from_onnx(proto)
    assert any("smooth_softmax" in line for line in coverage.lines()), coverage.lines()
    proto, _ = _gqa(2, 1, 6)
    proto.graph.node[0].input.extend(["", "", "", "bias"])  # input 10
    proto.graph.input.append(tensor("bias", TensorProto.FLOAT, [2, 1, 1, 7]))
    _, coverage = from_onnx(proto)
    assert any("attention_bias" in line for line in coverage.lines()), coverage.lines()


def test_stablehlo_export(float_file: onnx.ModelProto) -> None:
    """The imported 4-bit block (uint4 weights, blocked dequantisation, the gathered table)
    and a GroupQueryAttention with cache, RoPE, window and softcap, exported as StableHLO
    and run in its reference interpreter, give onnxruntime's outputs (tolerance as above)."""
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, SEQ)).astype(np.int64)
    for proto, feeds in ((_quantised(float_file, QuantFormat.QOperator, False), {"ids": ids}),
                         _gqa(2, 1, 6, rotary=HEAD, local_window_size=3, softcap=2.0)):
        model, coverage = from_onnx(proto)
        assert coverage.fully_neutral, coverage.lines()
        got = evaluate(build_module(model), list(feeds.values()))
        _close([np.asarray(g) for g in got], _ort(proto, feeds))


def test_quantised_decoder_layer_with_cache() -> None:
    """A genai-builder-like decoder layer: RMS norm, q / k / v projections, a
    GroupQueryAttention with cache and RoPE, the output projection; its MatMuls quantised
    to 4 bits by MatMulNBitsQuantizer; symbolic batch, sequence and past dims. One import
    runs a prompt-sized chunk and a decoding step."""
    rng = np.random.default_rng(7)
    dim, kv_dim = HEADS * HEAD, KV_HEADS * HEAD
    weights = {name: _rand(rng, dim, width) * 0.2
               for name, width in (("wq", dim), ("wk", kv_dim), ("wv", kv_dim), ("wo", dim))}
    angles = np.arange(32)[:, None] / 10000 ** (np.arange(HEAD // 2) / (HEAD // 2))
    weights |= {"norm": 1 + 0.1 * _rand(rng, dim), "cos_cache": np.cos(angles).astype(
        np.float32), "sin_cache": np.sin(angles).astype(np.float32)}
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "norm"], ["h"],
                              epsilon=1e-5, axis=-1),
             *(helper.make_node("MatMul", ["h", w], [w + "_out"]) for w in ("wq", "wk", "wv")),
             helper.make_node("GroupQueryAttention",
                              ["wq_out", "wk_out", "wv_out", "past_key", "past_value",
                               "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache"],
                              ["att", "present_key", "present_value"], domain="com.microsoft",
                              num_heads=HEADS, kv_num_heads=KV_HEADS, do_rotary=1),
             helper.make_node("MatMul", ["att", "wo"], ["o"]),
             helper.make_node("Add", ["x", "o"], ["y"])]
    cache = ["batch", KV_HEADS, "past", HEAD]
    inputs = [tensor("x", TensorProto.FLOAT, ["batch", "sequence", dim]),
              tensor("past_key", TensorProto.FLOAT, cache),
              tensor("past_value", TensorProto.FLOAT, cache),
              tensor("seqlens_k", TensorProto.INT32, ["batch"]),
              tensor("total_sequence_length", TensorProto.INT32, [])]
    present = ["batch", KV_HEADS, "total", HEAD]
    outputs = [tensor("y", TensorProto.FLOAT, ["batch", "sequence", dim]),
               tensor("present_key", TensorProto.FLOAT, present),
               tensor("present_value", TensorProto.FLOAT, present)]
    floats = onnx_model(nodes, inputs, outputs, weights, opset=21, extra_opsets=MS)
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False)
    quantizer = MatMulNBitsQuantizer(floats, algo_config=config)
    quantizer.process()
    proto = quantizer.model.model
    assert Counter(n.op_type for n in proto.graph.node)["MatMulNBits"] == 4
    model = None
    for batch, length, past in ((1, 4, 5), (2, 1, 9)):
        feeds = {"x": _rand(rng, batch, length, dim),
                 "past_key": _rand(rng, batch, KV_HEADS, past, HEAD),
                 "past_value": _rand(rng, batch, KV_HEADS, past, HEAD),
                 "seqlens_k": np.full(batch, past + length - 1, np.int32),
                 "total_sequence_length": np.array(past + length, np.int32)}
        model = _check(proto, feeds)
    assert model is not None
    report, float_report = cost_model(model), cost_model(from_onnx(floats)[0])
    assert report.total.macs == float_report.total.macs
    assert report.weight_bytes == sum(_file_bytes(t) for t in proto.graph.initializer)
