"""Neural-network ops (irbridge/ops/nn.py): shape inference, cost, the numpy reference
against torch (and onnxruntime for ONNX-only resize modes) and decompositions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.executor import run_graph
from irbridge.ir import Graph, Node, SymDim, TensorType
from irbridge.ops import get, node_cost

F32 = DType.FLOAT32
B = SymDim("B")
H = SymDim("H")
NN_OPS = ("matmul", "gemm", "linear", "conv", "conv_transpose", "attention", "batch_norm",
          "layer_norm", "group_norm", "rms_norm", "max_pool", "avg_pool", "adaptive_avg_pool",
          "adaptive_max_pool", "embedding", "resize", "grouped_matmul")

Array = np.ndarray | None


def f32(*shape: Any) -> TensorType:
    return TensorType(F32, tuple(shape))


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def _type_of(a: np.ndarray) -> TensorType:
    return TensorType(DType.from_numpy(a.dtype), a.shape)


def _graph(types: Sequence[TensorType | None], name: str = "g") -> tuple[Graph, list[Any]]:
    graph = Graph(name)
    return graph, [None if t is None else graph.add_input(f"in{i}", t)
                   for i, t in enumerate(types)]


def _build(op: str, types: Sequence[TensorType | None],
           attrs: dict[str, Any]) -> tuple[Graph, Node]:
    graph, ins = _graph(types)
    graph.set_outputs([GraphBuilder(graph).op(op, ins, attrs)])
    return graph, graph.nodes[-1]


def infer(op: str, *types: TensorType | None, **attrs: Any) -> TensorType | None:
    return _build(op, types, attrs)[1].outputs[0].type


def cost(op: str, *types: TensorType | None, **attrs: Any) -> tuple[int, int]:
    c = node_cost(_build(op, types, attrs)[1])
    return c.macs, c.other_flops


def _feeds(arrays: Sequence[Array]) -> dict[str, np.ndarray]:
    return {f"in{i}": a for i, a in enumerate(arrays) if a is not None}


def run(op: str, *arrays: Array, **attrs: Any) -> np.ndarray:
    graph, _ = _build(op, [None if a is None else _type_of(a) for a in arrays], attrs)
    return run_graph(graph, _feeds(arrays))[0]


def check_decompose(op: str, *arrays: Array, **attrs: Any) -> set[str]:
    """Run the op and its decomposition; they must agree in type and value. Returns the
    ops the decomposition used."""
    types = [None if a is None else _type_of(a) for a in arrays]
    graph, node = _build(op, types, attrs)
    schema = get(op)
    assert schema.decompose is not None
    decomposed, ins = _graph(types, "decomposed")
    outs = schema.decompose(GraphBuilder(decomposed), ins, schema.resolve_attrs(attrs, op))
    decomposed.set_outputs(outs)
    used = {n.op for n in decomposed.nodes}
    assert op not in used
    assert outs[0].type == node.outputs[0].type
    np.testing.assert_allclose(run_graph(decomposed, _feeds(arrays))[0],
                               run_graph(graph, _feeds(arrays))[0], rtol=1e-5, atol=1e-5)
    return used


def close(ours: np.ndarray, theirs: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    expected = theirs.detach().numpy()
    assert ours.shape == expected.shape and ours.dtype == expected.dtype
    np.testing.assert_allclose(ours, expected, rtol=rtol, atol=atol)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a)


def test_every_op_is_documented() -> None:
    for name in NN_OPS:
        schema = get(name)
        assert schema.doc and schema.cost_doc, name


# -- matmul, gemm, linear --------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b", "out"), [
    ((2, 3), (3, 4), (2, 4)),
    ((3,), (3, 4), (4,)),
    ((2, 3), (3,), (2,)),
    ((3,), (3,), ()),
    ((B, 1, 2, 3), (5, 3, 4), (B, 5, 2, 4)),
    ((B, H, 7, 3), (B, H, 3, 7), (B, H, 7, 7)),
])
def test_matmul_infer(a: tuple, b: tuple, out: tuple) -> None:
    assert infer("matmul", f32(*a), f32(*b)) == f32(*out)


def test_matmul_infer_errors() -> None:
    with pytest.raises(OpError, match="contracted dims"):
        infer("matmul", f32(2, 3), f32(4, 5))
    with pytest.raises(OpError, match="broadcast"):
        infer("matmul", f32(2, 1, 3), f32(3, 3, 4))
    assert infer("matmul", TensorType(F32, None), f32(3, 4)) == TensorType(F32, None)


def test_matmul_cost() -> None:
    assert cost("matmul", f32(2, 5, 3, 4), f32(4, 6)) == (2 * 5 * 3 * 6 * 4, 0)
    assert cost("matmul", f32(4), f32(2, 4, 6)) == (2 * 6 * 4, 0)
    assert cost("matmul", f32(B, 3, 4), f32(4, 6)) == (0, 0)  # symbolic: not guessed


@pytest.mark.parametrize(("a", "b"), [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)),
                                      ((2, 1, 4, 3), (5, 3, 2)), ((6,), (2, 6, 3))])
def test_matmul_reference(a: tuple, b: tuple) -> None:
    x, y = randn(*a), randn(*b, seed=1)
    close(run("matmul", x, y), torch.matmul(t(x), t(y)))


def test_gemm_infer() -> None:
    assert infer("gemm", f32(4, 3), f32(5, 4), trans_a=True, trans_b=True) == f32(3, 5)
    assert infer("gemm", f32(B, 4), f32(4, 5), f32(5)) == f32(B, 5)
    with pytest.raises(OpError, match="does not broadcast"):
        infer("gemm", f32(3, 4), f32(4, 5), f32(3))
    with pytest.raises(OpError, match="matrices"):
        infer("gemm", f32(2, 3, 4), f32(4, 5))


def test_gemm_cost() -> None:
    assert cost("gemm", f32(3, 4), f32(4, 5)) == (60, 0)
    # alpha scale, bias add and beta scale: 3 * M * N
    assert cost("gemm", f32(4, 3), f32(4, 5), f32(5), trans_a=True, alpha=2.0,
                beta=0.5) == (60, 45)
    assert cost("gemm", f32(3, 4), f32(4, 5), f32(3, 5)) == (60, 15)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(("alpha", "beta", "c_shape"), [(1.0, 1.0, None), (1.0, 1.0, (5,)),
                                                         (0.5, 2.0, (3, 5)), (2.0, 1.0, (3, 1))])
def test_gemm_reference_and_decompose(trans_a: bool, trans_b: bool, alpha: float, beta: float,
                                      c_shape: tuple | None) -> None:
    a = randn(*((4, 3) if trans_a else (3, 4)))
    b = randn(*((5, 4) if trans_b else (4, 5)), seed=1)
    c = None if c_shape is None else randn(*c_shape, seed=2)
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "alpha": alpha, "beta": beta}
    ta, tb = (t(a).T if trans_a else t(a)), (t(b).T if trans_b else t(b))
    expected = alpha * (ta @ tb) if c is None else torch.addmm(t(c), ta, tb, beta=beta,
                                                                alpha=alpha)
    close(run("gemm", a, b, c, **attrs), expected)
    check_decompose("gemm", a, b, c, **attrs)


def test_linear_infer_and_cost() -> None:
    assert infer("linear", f32(B, 7, 4), f32(5, 4), f32(5)) == f32(B, 7, 5)
    assert infer("linear", f32(4), f32(5, 4)) == f32(5)
    with pytest.raises(OpError, match="K"):
        infer("linear", f32(2, 3), f32(5, 4))
    with pytest.raises(OpError, match="b length"):
        infer("linear", f32(2, 4), f32(5, 4), f32(6))
    assert cost("linear", f32(2, 3, 4), f32(5, 4), f32(5)) == (2 * 3 * 5 * 4, 2 * 3 * 5)
    assert cost("linear", f32(2, 3, 4), f32(5, 4)) == (120, 0)


@pytest.mark.parametrize("x_shape", [(4,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_reference_and_decompose(x_shape: tuple, bias: bool) -> None:
    x, w, b = randn(*x_shape), randn(5, 4, seed=1), randn(5, seed=2) if bias else None
    close(run("linear", x, w, b), F.linear(t(x), t(w), None if b is None else t(b)))
    check_decompose("linear", x, w, b)


# -- grouped matmul --------------------------------------------------------------------------

I32 = DType.INT32


def test_grouped_matmul_infer() -> None:
    assert infer("grouped_matmul", f32(B, 8), f32(4, 8, 16), TensorType(I32, (4,))) == \
        f32(B, 16)
    with pytest.raises(OpError, match="only the 2-D x 3-D"):
        infer("grouped_matmul", f32(2, 5, 8), f32(4, 8, 16), TensorType(I32, (4,)))
    with pytest.raises(OpError, match="only the 2-D x 3-D"):
        infer("grouped_matmul", f32(5, 8), f32(8, 16), TensorType(I32, (4,)))
    with pytest.raises(OpError, match="K"):
        infer("grouped_matmul", f32(5, 7), f32(4, 8, 16), TensorType(I32, (4,)))
    with pytest.raises(OpError, match="offs length"):
        infer("grouped_matmul", f32(5, 8), f32(4, 8, 16), TensorType(I32, (3,)))
    with pytest.raises(OpError, match="no groups"):
        infer("grouped_matmul", f32(5, 8), f32(0, 8, 16), TensorType(I32, (0,)))
    with pytest.raises(OpError, match="offs must be integers"):
        infer("grouped_matmul", f32(5, 8), f32(4, 8, 16), f32(4))
    assert infer("grouped_matmul", f32(5, 8), f32(4, 16, 8), TensorType(I32, (4,)),
                 transpose_w=True) == f32(5, 16)
    with pytest.raises(OpError, match="w dim 2"):
        infer("grouped_matmul", f32(5, 8), f32(4, 8, 16), TensorType(I32, (4,)),
              transpose_w=True)


def test_grouped_matmul_cost_reads_at_most_one_group_per_row() -> None:
    offs = TensorType(I32, (8,))
    # S=3 rows of 8 groups: MACs S*K*N, and at most 3 of the 8 [K, N] weight groups read
    node = _build("grouped_matmul", [f32(3, 4), f32(8, 4, 5), offs], {})[1]
    c = node_cost(node)
    assert c.macs == 3 * 4 * 5 and c.other_flops == 0
    assert c.bytes_read == 3 * 4 * 4 + 3 * (4 * 5 * 4) + 8 * 4
    # S=100 rows: every group may be read, but no more than the whole w
    c = node_cost(_build("grouped_matmul", [f32(100, 4), f32(8, 4, 5), offs], {})[1])
    assert c.macs == 100 * 4 * 5
    assert c.bytes_read == 100 * 4 * 4 + 8 * 4 * 5 * 4 + 8 * 4
    c = node_cost(_build("grouped_matmul", [f32(3, 4), f32(8, 5, 4), offs],
                         {"transpose_w": True})[1])
    assert c.macs == 3 * 4 * 5 and c.bytes_read == 3 * 4 * 4 + 3 * (5 * 4 * 4) + 8 * 4


def _random_offs(rng: np.random.Generator, groups: int, rows: int) -> np.ndarray:
    """Cumulative row counts with some empty groups, ending at or before `rows`."""
    counts = rng.integers(0, 7, groups) * (rng.random(groups) < 0.7)
    offs = np.minimum(np.cumsum(counts), rows - int(rng.integers(0, 3)))
    return np.maximum(offs, 0).astype(np.int32)


@pytest.mark.parametrize("seed", range(7))
def test_grouped_matmul_reference_against_torch(seed: int) -> None:
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    rows, groups = 12, 5
    x, w = randn(rows, 8, seed=seed), randn(groups, 8, 16, seed=seed + 1)
    # seed 6: every row in a group (offs[-1] = S), first and last groups empty
    offs = (np.array([0, 4, 4, 12, 12], np.int32) if seed == 6
            else _random_offs(np.random.default_rng(seed), groups, rows))
    ours = run("grouped_matmul", x, w, offs)
    end = int(offs[-1])
    # aten::_grouped_mm (CPU kernel) defines the rows before offs[-1] and leaves the rest
    # unwritten; transformers' fallback writes zeros there. float32 sums of 8 products:
    # 1e-5 covers a different summation order.
    close(ours[:end], torch._grouped_mm(t(x), t(w), offs=t(offs))[:end])
    close(ours, torch.ops.transformers.grouped_mm_fallback(t(x), t(w), t(offs)))
    assert not ours[end:].any()
    check_decompose("grouped_matmul", x, w, offs)
    # the same experts stored [G, N, K] (transformers' default layout), used transposed
    w_t = np.ascontiguousarray(np.swapaxes(w, 1, 2))
    close(run("grouped_matmul", x, w_t, offs, transpose_w=True),
          torch.ops.transformers.grouped_mm_fallback(t(x), t(w_t).transpose(1, 2), t(offs)))
    check_decompose("grouped_matmul", x, w_t, offs, transpose_w=True)


def test_grouped_matmul_bfloat16_against_torch() -> None:
    import ml_dtypes

    x = randn(12, 8).astype(ml_dtypes.bfloat16)
    w = randn(4, 8, 16, seed=1).astype(ml_dtypes.bfloat16)
    offs = np.array([3, 3, 7, 10], np.int32)
    ours = run("grouped_matmul", x, w, offs)
    assert ours.dtype == ml_dtypes.bfloat16
    theirs = torch._grouped_mm(t(x.view(np.uint16)).view(torch.bfloat16),
                               t(w.view(np.uint16)).view(torch.bfloat16), offs=t(offs))
    # both accumulate in float32 and round once to bfloat16: at most one bfloat16 ulp
    # (2^-8 relative) apart where the summation orders differ
    np.testing.assert_allclose(ours[:10].astype(np.float32), theirs[:10].float().numpy(),
                               rtol=2**-8, atol=1e-6)


def test_grouped_matmul_rejects_decreasing_offs() -> None:
    x, w = randn(6, 8), randn(3, 8, 4)
    with pytest.raises(OpError, match="non-decreasing"):
        run("grouped_matmul", x, w, np.array([3, 1, 5], np.int32))


# -- convolution -----------------------------------------------------------------------------

def test_conv_infer() -> None:
    assert infer("conv", f32(B, 3, 32, 32), f32(8, 3, 3, 3), f32(8), strides=(2, 2),
                 pads=(1, 1, 1, 1)) == f32(B, 8, 16, 16)
    # dilation: extent 2 * (3 - 1) + 1 = 5
    assert infer("conv", f32(1, 3, 10, 12), f32(4, 3, 3, 3), dilations=(2, 1)) == f32(1, 4, 6, 10)
    # asymmetric pads (begins then ends) and 1-D / 3-D
    assert infer("conv", f32(1, 2, 10), f32(4, 2, 3), pads=(2, 0)) == f32(1, 4, 10)
    assert infer("conv", f32(2, 4, 5, 6, 7), f32(6, 2, 3, 3, 3), groups=2) == f32(2, 6, 3, 4, 5)
    # a symbolic spatial dim survives only size-preserving windows
    assert infer("conv", f32(B, 3, H, H), f32(8, 3, 3, 3), pads=(1, 1, 1, 1)) == f32(B, 8, H, H)
    assert infer("conv", f32(1, 3, H, 8), f32(8, 3, 3, 3), strides=(2, 2)) == f32(1, 8, None, 3)


@pytest.mark.parametrize(("x", "w", "attrs", "match"), [
    ((1, 4, 8, 8), (8, 3, 3, 3), {}, "input channels"),
    ((1, 4, 8, 8), (6, 1, 3, 3), {"groups": 4}, "divisible by groups"),
    ((1, 4, 8, 8), (8, 4, 3), {}, "rank"),
    ((1, 4, 8), (8, 4, 3), {"pads": (1, 1, 1)}, "pads needs 2 values"),
    ((1, 4, 8), (8, 4, 3), {"strides": (0,)}, "strides"),
    ((1, 4, 2, 2), (8, 4, 3, 3), {}, "does not fit"),
    ((4, 8), (8, 4), {}, r"\[N, C, \*spatial\]"),
])
def test_conv_infer_errors(x: tuple, w: tuple, attrs: dict, match: str) -> None:
    with pytest.raises(OpError, match=match):
        infer("conv", f32(*x), f32(*w), **attrs)


def test_conv_cost() -> None:
    # depthwise 3x3, same padding: N * Cout * out * (Cin / groups = 1) * 9, bias adds
    assert cost("conv", f32(1, 8, 10, 10), f32(8, 1, 3, 3), f32(8), groups=8,
                pads=(1, 1, 1, 1)) == (8 * 100 * 9, 800)
    # grouped: x [2, 8, 6, 6], 4 groups of 2 input channels, out [2, 12, 4, 4]
    assert cost("conv", f32(2, 8, 6, 6), f32(12, 2, 3, 3), groups=4) == (2 * 12 * 16 * 2 * 9, 0)
    # dilated: out 6x6
    assert cost("conv", f32(1, 3, 10, 10), f32(4, 3, 3, 3), dilations=(2, 2)) == (
        4 * 36 * 3 * 9, 0)
    assert cost("conv", f32(B, 3, 10, 10), f32(4, 3, 3, 3)) == (0, 0)


_TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@pytest.mark.parametrize(("x", "w", "stride", "padding", "dilation", "groups"), [
    ((2, 3, 11), (4, 3, 3), (2,), (1,), (1,), 1),
    ((1, 6, 13), (6, 1, 5), (1,), (2,), (2,), 6),
    ((2, 3, 9, 10), (8, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 8, 12, 11), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1), 8),  # depthwise
    ((2, 8, 10, 9), (12, 2, 3, 2), (2, 1), (0, 1), (2, 3), 4),  # grouped + dilated
    ((1, 4, 7, 7), (6, 4, 1, 1), (2, 2), (0, 0), (1, 1), 1),
    ((1, 4, 6, 7, 8), (6, 2, 3, 3, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), 2),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_reference(x: tuple, w: tuple, stride: tuple, padding: tuple, dilation: tuple,
                        groups: int, bias: bool) -> None:
    xa, wa = randn(*x), randn(*w, seed=1)
    b = randn(w[0], seed=2) if bias else None
    ours = run("conv", xa, wa, b, strides=stride, pads=padding * 2, dilations=dilation,
               groups=groups)
    close(ours, _TORCH_CONV[len(x) - 2](t(xa), t(wa), None if b is None else t(b), stride,
                                        padding, dilation, groups))


def test_conv_asymmetric_pads() -> None:
    x, w = randn(1, 3, 8, 9), randn(4, 3, 3, 3, seed=1)
    ours = run("conv", x, w, pads=(0, 2, 1, 0))  # top 0, left 2, bottom 1, right 0
    close(ours, F.conv2d(F.pad(t(x), (2, 0, 0, 1)), t(w)))


def test_conv_transpose_infer_and_cost() -> None:
    # (5 - 1) * 2 - 1 - 1 + 1 * (3 - 1) + 1 + 1 = 10
    assert infer("conv_transpose", f32(B, 4, 5, 6), f32(4, 3, 3, 3), strides=(2, 2),
                 pads=(1, 1, 1, 1), output_padding=(1, 0)) == f32(B, 3, 10, 11)
    assert infer("conv_transpose", f32(1, 4, 5), f32(4, 2, 3), groups=2, dilations=(2,)) == \
        f32(1, 4, 9)
    with pytest.raises(OpError, match="output_padding"):
        infer("conv_transpose", f32(1, 4, 5), f32(4, 2, 3), output_padding=(1,))
    with pytest.raises(OpError, match="input channels"):
        infer("conv_transpose", f32(1, 4, 5), f32(3, 2, 3))
    assert cost("conv_transpose", f32(1, 4, 5, 5), f32(4, 3, 3, 3), f32(3)) == (
        4 * 25 * 3 * 9, 3 * 7 * 7)
    # grouped: N * Cin * in * (Cout / groups) * kernel
    assert cost("conv_transpose", f32(2, 4, 3, 3), f32(4, 2, 2, 2), groups=2) == (
        2 * 4 * 9 * 2 * 4, 0)


_TORCH_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize(("x", "w", "stride", "padding", "out_pad", "dilation", "groups"), [
    ((2, 3, 7), (3, 4, 3), (2,), (1,), (1,), (1,), 1),
    ((1, 4, 6), (4, 1, 4), (3,), (0,), (2,), (2,), 4),
    ((2, 4, 5, 6), (4, 3, 3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 1),
    ((1, 6, 4, 5), (6, 2, 2, 3), (1, 2), (0, 1), (0, 1), (2, 1), 3),
    ((1, 4, 3, 4, 3), (4, 2, 2, 3, 2), (2, 1, 2), (0, 1, 1), (1, 0, 0), (1, 2, 1), 2),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_reference(x: tuple, w: tuple, stride: tuple, padding: tuple,
                                  out_pad: tuple, dilation: tuple, groups: int,
                                  bias: bool) -> None:
    xa, wa = randn(*x), randn(*w, seed=1)
    b = randn(w[1] * groups, seed=2) if bias else None
    ours = run("conv_transpose", xa, wa, b, strides=stride, pads=padding * 2,
               output_padding=out_pad, dilations=dilation, groups=groups)
    close(ours, _TORCH_CONV_T[len(x) - 2](t(xa), t(wa), None if b is None else t(b), stride,
                                          padding, out_pad, groups, dilation))


def test_conv_transpose_asymmetric_pads() -> None:
    x, w = randn(1, 2, 4, 5), randn(2, 3, 3, 3, seed=1)
    full = F.conv_transpose2d(t(x), t(w), stride=2)
    close(run("conv_transpose", x, w, strides=(2, 2), pads=(1, 0, 0, 2)), full[:, :, 1:, :-2])


# -- attention -------------------------------------------------------------------------------

def test_attention_infer() -> None:
    assert infer("attention", f32(B, 4, 5, 8), f32(B, 4, 7, 8), f32(B, 4, 7, 6)) == \
        f32(B, 4, 5, 6)
    # grouped-query attention: 8 query heads share 2 k/v heads
    assert infer("attention", f32(2, 8, 5, 16), f32(2, 2, 7, 16), f32(2, 2, 7, 32)) == \
        f32(2, 8, 5, 32)
    assert infer("attention", f32(5, 8), f32(7, 8), f32(7, 3), f32(5, 7)) == f32(5, 3)
    # a mask dim may be a bounded twin of B or static where the scores' dim is symbolic
    assert infer("attention", f32(B, 5, 8), f32(B, 7, 8), f32(B, 7, 8),
                 f32(SymDim("B", 1, 64), 1, 7)) == f32(B, 5, 8)
    assert infer("attention", f32(B, 5, 8), f32(B, 7, 8), f32(B, 7, 8), f32(2, 5, 7)) == \
        f32(B, 5, 8)
    with pytest.raises(OpError, match="feature size E"):
        infer("attention", f32(2, 5, 8), f32(2, 7, 4), f32(2, 7, 8))
    with pytest.raises(OpError, match="sequence length S"):
        infer("attention", f32(2, 5, 8), f32(2, 7, 8), f32(2, 6, 8))
    with pytest.raises(OpError, match="broadcast"):
        infer("attention", f32(2, 8, 5, 16), f32(2, 3, 7, 16), f32(2, 3, 7, 16))
    with pytest.raises(OpError, match="mask"):
        infer("attention", f32(2, 5, 8), f32(2, 7, 8), f32(2, 7, 8), f32(5, 5))


def test_attention_cost() -> None:
    # GQA: batch = 2 * 8 query heads, L = 5, S = 7, E = 16, Ev = 32
    assert cost("attention", f32(2, 8, 5, 16), f32(2, 2, 7, 16), f32(2, 2, 7, 32)) == (
        16 * 5 * 7 * (16 + 32), 5 * 16 * 5 * 7)


@pytest.mark.parametrize("case", ["plain", "causal", "causal_long_source", "bool_mask",
                                  "float_mask", "gqa", "scale", "no_heads", "broadcast_kv"])
def test_attention_reference_and_decompose(case: str) -> None:
    shapes = {"gqa": ((2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 4)),
              "no_heads": ((3, 5, 8), (3, 7, 8), (3, 7, 4)),
              "broadcast_kv": ((2, 3, 5, 8), (1, 3, 7, 8), (1, 3, 7, 4)),
              "causal": ((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 4))}
    qs, ks, vs = shapes.get(case, ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)))
    q, k, v = randn(*qs), randn(*ks, seed=1), randn(*vs, seed=2)
    mask: np.ndarray | None = None
    attrs: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    if case.startswith("causal"):
        attrs["causal"] = kwargs["is_causal"] = True
    if case == "bool_mask":
        mask = np.random.default_rng(3).random((1, 3, 5, 7)) > 0.3
        mask[..., 0] = True  # no fully masked row
    if case == "float_mask":
        mask = randn(5, 7, seed=3)
    if case == "scale":
        attrs["scale"] = kwargs["scale"] = 0.3
    if case == "gqa":
        kwargs["enable_gqa"] = True
    if mask is not None:
        kwargs["attn_mask"] = t(mask)
    close(run("attention", q, k, v, mask, **attrs),
          F.scaled_dot_product_attention(t(q), t(k), t(v), **kwargs))
    used = check_decompose("attention", q, k, v, mask, **attrs)
    assert ("gather" in used) == (case == "gqa")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # softmax of all -inf
def test_attention_fully_masked_row_is_zero(causal: bool) -> None:
    q, k, v = randn(1, 3, 4), randn(1, 3, 4, seed=1), randn(1, 3, 4, seed=2)
    mask = np.ones((3, 3), dtype=bool)
    mask[1] = False
    y = run("attention", q, k, v, mask, causal=causal)
    assert (y[0, 1] == 0).all()
    if not causal:  # torch refuses a mask together with is_causal
        close(y, F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask)))
    check_decompose("attention", q, k, v, mask, causal=causal)


# -- normalisation ---------------------------------------------------------------------------

def test_norm_infer_and_cost() -> None:
    c = f32(3)
    assert infer("batch_norm", f32(B, 3, 4, 4), c, c, c, c) == f32(B, 3, 4, 4)
    with pytest.raises(OpError, match="mean"):
        infer("batch_norm", f32(2, 3, 4), c, c, f32(4), c)
    assert cost("batch_norm", f32(2, 3, 4, 4), c, c, c, c) == (0, 2 * 96)

    assert infer("layer_norm", f32(B, 5, 8), f32(8), f32(8)) == f32(B, 5, 8)
    assert infer("layer_norm", f32(B, 5, 8), f32(5, 8), axis=-2) == f32(B, 5, 8)
    with pytest.raises(OpError, match="normalised dims"):
        infer("layer_norm", f32(2, 5, 8), f32(5))
    assert cost("layer_norm", f32(2, 3, 4), f32(4), f32(4)) == (0, 24 * 7)
    assert cost("layer_norm", f32(2, 3, 4), f32(4)) == (0, 24 * 6)
    assert cost("layer_norm", f32(2, 3, 4)) == (0, 24 * 5)

    assert infer("group_norm", f32(B, 6, 4), f32(6), f32(6), num_groups=3) == f32(B, 6, 4)
    with pytest.raises(OpError, match="num_groups"):
        infer("group_norm", f32(2, 6, 4), num_groups=4)
    assert cost("group_norm", f32(2, 6, 4), f32(6), f32(6), num_groups=2) == (0, 48 * 7)

    assert infer("rms_norm", f32(B, 5, 8), f32(8)) == f32(B, 5, 8)
    assert cost("rms_norm", f32(2, 3, 4), f32(4)) == (0, 24 * 5)
    assert cost("rms_norm", f32(2, 3, 4)) == (0, 24 * 4)
    assert cost("rms_norm", f32(B, 3, 4)) == (0, 0)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_reference(shape: tuple) -> None:
    x = randn(*shape)
    scale, bias, mean = randn(3, seed=1), randn(3, seed=2), randn(3, seed=3)
    var = np.abs(randn(3, seed=4)) + 0.1
    expected = F.batch_norm(t(x), t(mean), t(var), t(scale), t(bias), training=False, eps=1e-3)
    close(run("batch_norm", x, scale, bias, mean, var, epsilon=1e-3), expected)


@pytest.mark.parametrize("axis", [-1, -2, 1])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)])
def test_layer_norm_reference(axis: int, affine: tuple[bool, bool]) -> None:
    x = randn(2, 3, 4, 5)
    normalised = x.shape[axis % 4:]
    scale = randn(*normalised, seed=1) if affine[0] else None
    bias = randn(*normalised, seed=2) if affine[1] else None
    expected = F.layer_norm(t(x), normalised, None if scale is None else t(scale),
                            None if bias is None else t(bias), eps=1e-5)
    close(run("layer_norm", x, scale, bias, axis=axis), expected)


@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 5), 3), ((2, 4, 3, 3), 1),
                                               ((1, 6, 2, 3, 2), 6)])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm_reference(shape: tuple, groups: int, affine: bool) -> None:
    x = randn(*shape)
    scale = randn(shape[1], seed=1) if affine else None
    bias = randn(shape[1], seed=2) if affine else None
    expected = F.group_norm(t(x), groups, None if scale is None else t(scale),
                            None if bias is None else t(bias), eps=1e-5)
    close(run("group_norm", x, scale, bias, num_groups=groups), expected)


@pytest.mark.parametrize("axis", [-1, -2])
@pytest.mark.parametrize("affine", [False, True])
def test_rms_norm_reference(axis: int, affine: bool) -> None:
    x = randn(2, 3, 8)
    normalised = x.shape[axis % 3:]
    scale = randn(*normalised, seed=1) if affine else None
    expected = F.rms_norm(t(x), normalised, None if scale is None else t(scale), eps=1e-6)
    close(run("rms_norm", x, scale, axis=axis, epsilon=1e-6), expected)


# -- pooling ---------------------------------------------------------------------------------

def test_pool_infer_and_cost() -> None:
    assert infer("max_pool", f32(B, 3, 112, 112), kernel=(3, 3), strides=(2, 2),
                 pads=(1, 1, 1, 1)) == f32(B, 3, 56, 56)
    # ceil mode: ceil((6 - 3) / 2) + 1 = 3 windows
    assert infer("max_pool", f32(1, 1, 6), kernel=(3,), strides=(2,), ceil_mode=True) == \
        f32(1, 1, 3)
    # ceil((5 + 2 - 2) / 2) + 1 = 4, but window 4 would start at 6 >= 5 + 1, in the right
    # padding: dropped. With 6 inputs it starts at 6 < 6 + 1 and stays.
    assert infer("max_pool", f32(1, 1, 5), kernel=(2,), strides=(2,), pads=(1, 1),
                 ceil_mode=True) == f32(1, 1, 3)
    assert infer("max_pool", f32(1, 1, 6), kernel=(2,), strides=(2,), pads=(1, 1),
                 ceil_mode=True) == f32(1, 1, 4)
    assert infer("max_pool", f32(1, 1, 9), kernel=(3,), dilations=(3,)) == f32(1, 1, 1)
    assert infer("avg_pool", f32(1, 2, 7, 7), kernel=(2, 2)) == f32(1, 2, 3, 3)
    assert infer("avg_pool", f32(1, 2, 7, 7), kernel=(2, 2), ceil_mode=True) == f32(1, 2, 4, 4)
    with pytest.raises(OpError, match="kernel"):
        infer("max_pool", f32(1, 2, 7, 7), kernel=(2,))
    with pytest.raises(OpError, match="does not fit"):
        infer("avg_pool", f32(1, 2, 2, 2), kernel=(3, 3))
    assert cost("max_pool", f32(1, 3, 8, 8), kernel=(3, 3), strides=(2, 2),
                pads=(1, 1, 1, 1)) == (0, 3 * 16 * 9)
    assert cost("avg_pool", f32(2, 3, 8, 8), kernel=(2, 2)) == (0, 2 * 3 * 16 * 4)

    assert infer("adaptive_avg_pool", f32(B, 3, H, H), output_size=(1, 1)) == f32(B, 3, 1, 1)
    assert infer("adaptive_max_pool", f32(2, 3, 10), output_size=(4,)) == f32(2, 3, 4)
    with pytest.raises(OpError, match="output_size"):
        infer("adaptive_avg_pool", f32(2, 3, 10), output_size=(4, 4))
    assert cost("adaptive_avg_pool", f32(2, 3, 10, 10), output_size=(3, 3)) == (0, 600)
    assert cost("adaptive_max_pool", f32(2, 3, 10, 10), output_size=(3, 3)) == (0, 600)


_POOL_CASES = [  # x shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 11), (3,), (2,), (1,), (1,), False),
    ((2, 3, 10), (3,), (2,), (1,), (2,), True),
    ((1, 2, 9, 10), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 9, 10), (3, 2), (2, 3), (1, 0), (1, 1), True),
    ((1, 2, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), True),
    ((1, 2, 10, 9), (3, 3), (1, 2), (1, 1), (2, 1), True),
    ((1, 2, 5, 6, 7), (2, 3, 2), (2, 2, 3), (1, 1, 0), (1, 1, 1), True),
]


@pytest.mark.parametrize(("shape", "kernel", "stride", "padding", "dilation", "ceil_mode"),
                         _POOL_CASES)
def test_max_pool_reference(shape: tuple, kernel: tuple, stride: tuple, padding: tuple,
                            dilation: tuple, ceil_mode: bool) -> None:
    x = randn(*shape)
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[len(shape) - 2]
    close(run("max_pool", x, kernel=kernel, strides=stride, pads=padding * 2,
              dilations=dilation, ceil_mode=ceil_mode),
          fn(t(x), kernel, stride, padding, dilation, ceil_mode=ceil_mode))


def test_max_pool_defaults_and_ints() -> None:
    x = np.arange(2 * 16, dtype=np.int32).reshape(1, 2, 4, 4) * -1
    y = run("max_pool", x, kernel=(2, 2), pads=(1, 1, 1, 1))  # strides default to the kernel
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, F.max_pool2d(t(x).float(), 2, padding=1).int().numpy())


@pytest.mark.parametrize(("shape", "kernel", "stride", "padding", "dilation", "ceil_mode"),
                         [c for c in _POOL_CASES if set(c[4]) == {1}])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_reference(shape: tuple, kernel: tuple, stride: tuple, padding: tuple,
                            dilation: tuple, ceil_mode: bool, count_include_pad: bool) -> None:
    x = randn(*shape)
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[len(shape) - 2]
    close(run("avg_pool", x, kernel=kernel, strides=stride, pads=padding * 2,
              ceil_mode=ceil_mode, count_include_pad=count_include_pad),
          fn(t(x), kernel, stride, padding, ceil_mode, count_include_pad))


def _ort_node(op_type: str, feeds: dict[str, np.ndarray | None], opset: int, **attrs: Any
              ) -> np.ndarray:
    """Run one ONNX node in onnxruntime; every feed is a graph input (a run-time value),
    None an omitted input."""
    import onnxruntime
    from onnx import helper

    given = {name: a for name, a in feeds.items() if a is not None}
    node = helper.make_node(op_type, [n if a is not None else "" for n, a in feeds.items()],
                            ["y"], **attrs)
    inputs = [helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for name, a in given.items()]
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(
        next(iter(given.values())).dtype), None)
    model = helper.make_model(helper.make_graph([node], "g", inputs, [out]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what the installed onnxruntime reads
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, given)[0])


@pytest.mark.parametrize(("shape", "kernel", "stride", "padding", "dilation", "ceil_mode"),
                         [c for c in _POOL_CASES if set(c[4]) != {1}] + [
                             ((1, 2, 9, 10), (2, 3), (1, 2), (1, 2), (2, 3), False),
                             ((1, 1, 7, 7, 8), (2, 2, 3), (2, 1, 2), (0, 1, 1), (3, 2, 2),
                              True)])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_dilations_match_onnxruntime(shape: tuple, kernel: tuple, stride: tuple,
                                              padding: tuple, dilation: tuple,
                                              ceil_mode: bool, count_include_pad: bool) -> None:
    x = randn(*shape)
    attrs: dict[str, Any] = {"kernel": kernel, "strides": stride, "pads": padding * 2,
                             "dilations": dilation, "ceil_mode": ceil_mode,
                             "count_include_pad": count_include_pad}
    expected = _ort_node("AveragePool", {"x": x}, 19, kernel_shape=kernel, strides=stride,
                         pads=padding * 2, dilations=dilation, ceil_mode=int(ceil_mode),
                         count_include_pad=int(count_include_pad))
    got = run("avg_pool", x, **attrs)
    assert infer("avg_pool", _type_of(x), **attrs) == _type_of(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "out"), [((2, 3, 10), (4,)), ((1, 2, 7, 9), (3, 4)),
                                            ((1, 2, 8, 8), (1, 1)), ((1, 2, 5, 6, 7), (2, 4, 3)),
                                            ((1, 1, 3, 3), (5, 5))])
def test_adaptive_pool_reference(shape: tuple, out: tuple) -> None:
    x = randn(*shape)
    d = len(shape) - 2
    avg: Any = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[d]
    mx: Any = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[d]
    close(run("adaptive_avg_pool", x, output_size=out), avg(t(x), out))
    close(run("adaptive_max_pool", x, output_size=out), mx(t(x), out))


@pytest.mark.parametrize(("shape", "out", "pooled"), [
    ((1, 2, 8, 6), (2, 3), True), ((2, 3, 7, 7), (1, 1), True),
    ((1, 2, 7, 5), (3, 2), False), ((1, 2, 6, 5, 7), (4, 5, 3), False), ((2, 3, 10), (4,), False),
])
def test_adaptive_avg_pool_decompose(shape: tuple, out: tuple, pooled: bool) -> None:
    used = check_decompose("adaptive_avg_pool", randn(*shape), output_size=out)
    assert ("avg_pool" in used) == pooled


# -- embedding -------------------------------------------------------------------------------

def test_embedding() -> None:
    i64 = DType.INT64
    assert infer("embedding", f32(10, 4), TensorType(i64, (B, 3))) == f32(B, 3, 4)
    with pytest.raises(OpError, match="integers"):
        infer("embedding", f32(10, 4), f32(3))
    with pytest.raises(OpError, match=r"\[V, D\]"):
        infer("embedding", f32(10), TensorType(i64, (3,)))
    assert cost("embedding", f32(10, 4), TensorType(i64, (2, 3))) == (0, 0)
    table = randn(10, 4)
    indices = np.array([[1, 9, 0], [3, 3, 7]], dtype=np.int64)
    close(run("embedding", table, indices), F.embedding(t(indices), t(table)))
    assert check_decompose("embedding", table, indices.astype(np.int32)) == {"gather"}


# -- resize ----------------------------------------------------------------------------------

def test_resize_infer_and_cost() -> None:
    assert infer("resize", f32(B, 3, 5, 7), sizes=(10, 3)) == f32(B, 3, 10, 3)
    assert infer("resize", f32(B, 3, 5, 7), scales=(2.0, 1.5)) == f32(B, 3, 10, 10)
    assert infer("resize", f32(1, 3, H, 7), scales=(1.0, 0.5)) == f32(1, 3, H, 3)
    assert infer("resize", f32(1, 3, H, 7), scales=(2.0, 0.5)) == f32(1, 3, None, 3)
    with pytest.raises(OpError, match="exactly one"):
        infer("resize", f32(1, 3, 5, 7))
    with pytest.raises(OpError, match="exactly one"):
        infer("resize", f32(1, 3, 5, 7), sizes=(2, 2), scales=(2.0, 2.0))
    with pytest.raises(OpError, match="one value per spatial dim"):
        infer("resize", f32(1, 3, 5, 7), sizes=(2,))
    with pytest.raises(OpError, match="mode"):
        infer("resize", f32(1, 3, 5, 7), sizes=(2, 2), mode="area")
    assert cost("resize", f32(1, 3, 4, 4), sizes=(8, 8)) == (0, 0)
    assert cost("resize", f32(1, 3, 4, 4), sizes=(8, 8), mode="linear") == (0, 192 * 8)
    assert cost("resize", f32(1, 3, 4, 4, 4), scales=(2.0, 2.0, 2.0), mode="linear") == (
        0, 1536 * 16)
    assert cost("resize", f32(1, 3, 4, 4), sizes=(8, 8), mode="cubic") == (0, 192 * 32)


_INTERP_CASES = [  # torch mode, x shape, size or scale_factor, align_corners
    ("nearest", (1, 2, 5, 7), {"scale_factor": (2.0, 3.0)}, None),
    ("nearest", (1, 2, 7, 5), {"scale_factor": (0.7, 1.75)}, None),
    ("nearest", (1, 2, 10, 9), {"size": (7, 4)}, None),
    ("nearest", (2, 3, 11), {"size": (25,)}, None),
    ("nearest", (1, 2, 3), {"scale_factor": (1.2,)}, None),  # out = in, still o / 1.2
    ("nearest", (1, 2, 10), {"scale_factor": (2.05,)}, None),  # out = 2 * in, o / 2.05
    ("nearest", (1, 2, 3, 4, 5), {"size": (6, 3, 7)}, None),
    ("nearest-exact", (1, 2, 5, 7), {"size": (12, 3)}, None),
    ("linear", (2, 3, 9), {"size": (20,)}, False),
    ("linear", (2, 3, 9), {"scale_factor": (0.6,)}, True),
    ("bilinear", (1, 2, 5, 7), {"size": (12, 5)}, False),
    ("bilinear", (1, 2, 5, 7), {"scale_factor": (2.0, 1.5)}, False),
    ("bilinear", (1, 2, 5, 7), {"size": (12, 1)}, True),
    ("bilinear", (1, 2, 8, 9), {"size": (3, 4)}, False),
    ("trilinear", (1, 2, 3, 4, 5), {"size": (6, 3, 9)}, False),
    ("trilinear", (1, 2, 3, 4, 5), {"size": (6, 3, 9)}, True),
    ("bicubic", (1, 2, 5, 7), {"size": (11, 4)}, False),
    ("bicubic", (1, 2, 5, 7), {"scale_factor": (2.0, 1.5)}, True),
]


@pytest.mark.parametrize(("mode", "shape", "how", "align_corners"), _INTERP_CASES)
def test_resize_matches_torch_interpolate(mode: str, shape: tuple, how: dict,
                                          align_corners: bool | None) -> None:
    x = randn(*shape)
    attrs: dict[str, Any] = {"mode": {"nearest-exact": "nearest", "bicubic": "cubic"}.get(
        mode, "nearest" if mode == "nearest" else "linear" if "linear" in mode else mode)}
    if "size" in how:
        attrs["sizes"] = how["size"]
    elif align_corners:  # torch's align_corners ignores the scale (the importer gives sizes)
        attrs["sizes"] = tuple(int(n * f) for n, f in zip(shape[2:], how["scale_factor"],
                                                            strict=True))
    else:
        attrs["scales"] = how["scale_factor"]
    if mode == "nearest":
        attrs.update(coordinate_mode="asymmetric", nearest_mode="floor")
    elif mode == "nearest-exact":
        attrs.update(coordinate_mode="half_pixel", nearest_mode="round_prefer_ceil")
    else:
        attrs["coordinate_mode"] = "align_corners" if align_corners else "half_pixel"
    expected = F.interpolate(t(x), mode=mode, align_corners=align_corners, **how)
    close(run("resize", x, **attrs), expected)


def _onnx_resize(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    spatial = x.ndim - 2
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
    if attrs.get("sizes"):
        inits += [helper.make_tensor("scales", TensorProto.FLOAT, [0], []),
                  helper.make_tensor("sizes", TensorProto.INT64, [x.ndim],
                                     [*x.shape[:2], *attrs["sizes"]])]
        names = ["x", "roi", "scales", "sizes"]
    else:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [x.ndim],
                                        [1.0, 1.0, *attrs["scales"]]))
        names = ["x", "roi", "scales"]
    node = helper.make_node("Resize", names, ["y"], mode=attrs["mode"],
                            coordinate_transformation_mode=attrs["coordinate_mode"],
                            nearest_mode=attrs.get("nearest_mode", "floor"),
                            cubic_coeff_a=-0.75)
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?"] * (spatial + 2))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what the installed onnxruntime reads
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest", "coordinate_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
     "sizes": (9, 4)},
    {"mode": "nearest", "coordinate_mode": "align_corners", "nearest_mode": "ceil",
     "sizes": (8, 11)},
    {"mode": "nearest", "coordinate_mode": "asymmetric", "nearest_mode": "round_prefer_ceil",
     "scales": (2.0, 0.5)},
    {"mode": "linear", "coordinate_mode": "pytorch_half_pixel", "sizes": (1, 13)},
    {"mode": "linear", "coordinate_mode": "asymmetric", "scales": (1.5, 2.0)},
    {"mode": "cubic", "coordinate_mode": "half_pixel", "sizes": (9, 4)},
    {"mode": "cubic", "coordinate_mode": "asymmetric", "scales": (2.0, 1.5)},
])
def test_resize_matches_onnxruntime(attrs: dict[str, Any]) -> None:
    x = randn(1, 2, 5, 7)
    expected = _onnx_resize(x, attrs)
    # onnxruntime interpolates in float32 in a different order than torch; 1e-5 holds
    np.testing.assert_allclose(run("resize", x, **attrs), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("which", "values", "full"), [
    ("scales", (2.0, 0.5), False), ("scales", (1.5, 2.0), True), ("sizes", (9, 4), False),
    ("sizes", (3, 11), True)])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_inputs_match_onnxruntime(which: str, values: tuple, full: bool,
                                         mode: str) -> None:
    """scales / sizes as run-time inputs (per spatial dim, or per dim of x as ONNX gives
    them); onnxruntime gets the same values as graph inputs."""
    x = randn(1, 2, 5, 7)
    dtype = np.float32 if which == "scales" else np.int64
    lead = (1.0, 1.0) if which == "scales" else x.shape[:2]
    onnx_values = np.array((*lead, *values), dtype)
    attrs = {"mode": mode, "coordinate_transformation_mode": "half_pixel",
             "nearest_mode": "round_prefer_floor"}
    feeds: dict[str, np.ndarray | None] = {"x": x, "roi": None, "scales": onnx_values} \
        if which == "scales" else {"x": x, "roi": None, "scales": None, "sizes": onnx_values}
    expected = _ort_node("Resize", feeds, 13, **attrs)
    given = onnx_values if full else onnx_values[2:]
    arrays = [x, given] if which == "scales" else [x, None, given]
    ours = {"mode": mode, "coordinate_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}
    np.testing.assert_allclose(run("resize", *arrays, **ours), expected, rtol=1e-5, atol=1e-5)
    types = [_type_of(a) if a is not None else None for a in arrays]
    assert infer("resize", *types, **ours) == f32(1, 2, None, None)  # values unknown


def test_resize_input_errors() -> None:
    scales = TensorType(F32, (4,))
    with pytest.raises(OpError, match="exactly one"):
        infer("resize", f32(1, 2, 5, 7), scales, sizes=(3, 3))
    with pytest.raises(OpError, match="1-D float"):
        infer("resize", f32(1, 2, 5, 7), TensorType(DType.INT64, (4,)))
    with pytest.raises(OpError, match="batch or channel"):
        run("resize", randn(1, 2, 5, 7), np.array([2, 1, 2, 2], np.float32))


def test_resize_keeps_integer_dtype_for_nearest() -> None:
    x = np.arange(12, dtype=np.int64).reshape(1, 1, 3, 4)
    y = run("resize", x, sizes=(6, 8), coordinate_mode="asymmetric")
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))


def test_resnet_sized_conv_is_fast() -> None:
    """The reference must run real models: the heaviest resnet18 layer shapes, quickly."""
    import time

    x, w = randn(1, 64, 56, 56), randn(64, 64, 3, 3, seed=1)
    start = time.perf_counter()
    y = run("conv", x, w, pads=(1, 1, 1, 1))
    assert time.perf_counter() - start < 2.0
    # 576-term float32 sums with outputs up to ~100: summation order (BLAS blocking,
    # threads) moves small outputs by up to ~7e-5 absolute, hence atol 2e-4
    close(y, F.conv2d(t(x), t(w), padding=1), atol=2e-4)
    assert math.prod(y.shape) == 64 * 56 * 56
