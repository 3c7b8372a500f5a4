"""Matmul family and convolutions."""

from __future__ import annotations

from typing import Any

import torch

from irbridge.ir import Value

from ..lower import Emitter, Unsupported
from ._base import (
    Args,
    _aten_fn,
    _binary,
    _late,
    _op,
    _tuple,
    aten,
)
from .elementwise import (
    _scaled,
)

# -- matmul family ----------------------------------------------------------------------


@_aten_fn(aten.linear.default)
def _linear(em: Emitter, a: Args) -> Value:
    b = a["bias"]
    return em.op("linear", [em.value(a["input"]), em.value(a["weight"]),
                            None if b is None else em.value(b)])


@_aten_fn(aten.addmm.default)
def _addmm(em: Emitter, a: Args) -> Value:
    return em.op("gemm", [em.value(a["mat1"]), em.value(a["mat2"]), em.value(a["self"])],
                 alpha=float(a["alpha"]), beta=float(a["beta"]))


@_aten_fn(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _matmul(em: Emitter, a: Args) -> Value:
    x = a["self"]
    y = a.get("mat2", a.get("other"))
    return em.op("matmul", [em.value(x), em.value(y)])


@_aten_fn(aten._grouped_mm.default)
def _grouped_mm(em: Emitter, a: Args) -> Value:
    """torch._grouped_mm / F.grouped_mm: a [S, K] x [G, K, N] grouped product with offs is
    the registry's grouped_matmul, [G, M, K] x [G, K, N] without offs a batched matmul; the
    other forms (offs over K, a 2-D mat2) and a bias are not lowered."""
    x, w, offs = em.value(a["self"]), em.value(a["mat2"]), a["offs"]
    ranks = (em.rank(x), em.rank(w))
    if a["bias"] is not None:
        raise Unsupported("_grouped_mm with a bias")
    if ranks == (2, 3) and offs is not None:
        y = _grouped_matmul(em, x, w, em.value(offs))
    elif ranks == (3, 3) and offs is None:
        y = em.op("matmul", [x, w])
    else:
        raise Unsupported(f"_grouped_mm of {ranks[0]}-D x {ranks[1]}-D operands "
                          f"{'with' if offs is not None else 'without'} offs (only "
                          "2-D x 3-D with offs and 3-D x 3-D without are lowered)")
    return em.cast(y, em.out_dtype())


@_late("transformers", "grouped_mm_fallback")
def _grouped_mm_fallback(em: Emitter, a: Args) -> Value:
    """transformers' grouped matmul of MoE experts (integrations/moe.py), used where
    torch._grouped_mm is not: input [S, K] x weight [G, K, N] by cumulative offs, rows
    past offs[-1] zero."""
    return _grouped_matmul(em, em.value(a["input"]), em.value(a["weight"]),
                           em.value(a["offs"]))


def _grouped_matmul(em: Emitter, x: Value, w: Value, offs: Value) -> Value:
    """grouped_matmul of x, w and offs. transformers stores most experts' weights
    [E, N, K] and passes `weight.transpose(-2, -1)`: a w made by a permute of its last two
    dims that nothing else reads becomes `transpose_w` on the permute's input, and the
    permute is dropped, so that the kernel reads the groups' weights in place (a
    materialised copy would read every expert's weights, used or not)."""
    producer = w.producer
    source = em.node.args[1] if em.node is not None and len(em.node.args) > 1 else None
    if (producer is not None and producer.op == "permute"
            and producer.attrs.get("perm") == (0, 2, 1)
            and isinstance(source, torch.fx.Node) and len(source.users) == 1
            and not w.uses and w not in em.lowerer.graph.outputs):
        inner = producer.inputs[0]
        assert inner is not None
        y = em.op("grouped_matmul", [x, inner, offs], transpose_w=True)
        em.lowerer.graph.remove_node(producer)
        return y
    return em.op("grouped_matmul", [x, w, offs])


def _add_product(em: Emitter, a: Args, product: Value) -> Value:
    """beta * self + alpha * product (self ignored when beta is 0, as torch does)."""
    out = em.out_dtype()
    product = _scaled(em, product, a["alpha"], out)
    if float(a["beta"]) == 0.0:
        return product
    return _binary(em, "add", _scaled(em, em.value(a["self"]), a["beta"], out), product, out)


@_aten_fn(aten.baddbmm.default)
def _baddbmm(em: Emitter, a: Args) -> Value:
    return _add_product(em, a, em.op("matmul", [em.value(a["batch1"]), em.value(a["batch2"])]))


@_aten_fn(aten.addmv.default, _op("addmv_"))
def _addmv(em: Emitter, a: Args) -> Value:
    return _add_product(em, a, em.op("matmul", [em.value(a["mat"]), em.value(a["vec"])]))


@_aten_fn(aten.addbmm.default, _op("addbmm_"))
def _addbmm(em: Emitter, a: Args) -> Value:
    """The batch of products summed over the batch."""
    batched = em.op("matmul", [em.value(a["batch1"]), em.value(a["batch2"])])
    return _add_product(em, a, em.op("reduce_sum", [batched], axes=(0,), keepdims=False))


@_aten_fn(aten.bilinear.default)
def _bilinear(em: Emitter, a: Args) -> Value:
    """y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]: x1 times W as an
    (I, O * J) matrix, then the J products with x2 summed."""
    x1, x2, w = em.value(a["input1"]), em.value(a["input2"]), em.value(a["weight"])
    outs, ins1, ins2 = em.static_shape(w)
    lead = em.static_shape(x1)[:-1]
    flat_w = em.op("reshape", [em.op("permute", [w], perm=(1, 0, 2))], shape=(ins1, outs * ins2))
    u = em.op("reshape", [em.op("matmul", [x1, flat_w])], shape=(*lead, outs, ins2))
    y = em.op("reduce_sum", [em.op("mul", [u, em.op("unsqueeze", [x2], axes=(-2,))])],
              axes=(len(lead) + 1,), keepdims=False)
    b = a["bias"]
    return y if b is None else em.op("add", [y, em.value(b)])


@_aten_fn(aten.t.default, _op("numpy_T"))
def _t(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    rank = em.rank(x)
    if rank < 2:
        return x
    return em.op("permute", [x], perm=tuple(reversed(range(rank))))


# -- convolution -------------------------------------------------------------------------


def conv(em: Emitter, x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any,
         groups: int, transposed: bool = False, output_padding: Any = 0) -> Value:
    xv, wv = em.value(x), em.value(w)
    bv = None if b is None else em.value(b)
    spatial = em.rank(wv) - 2
    unbatched = em.rank(xv) == spatial + 1
    if unbatched:
        xv = em.op("unsqueeze", [xv], axes=(0,))
    strides, dilations = _tuple(stride, spatial), _tuple(dilation, spatial)
    if isinstance(padding, str):
        if padding == "valid":
            pads: tuple[int, ...] = (0,) * (2 * spatial)
        elif padding == "same":
            kernel = em.static_shape(wv)[2:]
            totals = [d * (k - 1) for d, k in zip(dilations, kernel, strict=True)]
            pads = tuple(t // 2 for t in totals) + tuple(t - t // 2 for t in totals)
        else:
            raise Unsupported(f"padding {padding!r}")
    else:
        p = _tuple(padding, spatial)
        pads = p + p
    if transposed:
        y = em.op("conv_transpose", [xv, wv, bv], strides=strides, pads=pads,
                  dilations=dilations, groups=int(groups),
                  output_padding=_tuple(output_padding, spatial))
    else:
        y = em.op("conv", [xv, wv, bv], strides=strides, pads=pads, dilations=dilations,
                  groups=int(groups))
    return em.op("squeeze", [y], axes=(0,)) if unbatched else y


@_aten_fn(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
          _op("conv1d", "padding"), _op("conv2d", "padding"), _op("conv3d", "padding"))
def _conv_nd(em: Emitter, a: Args) -> Value:
    return conv(em, a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"])


@_aten_fn(aten.convolution.default, aten._convolution.default)
def _convolution(em: Emitter, a: Args) -> Value:
    return conv(em, a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"], bool(a["transposed"]), a["output_padding"])


@_aten_fn(aten.conv_transpose1d.default, aten.conv_transpose2d.input,
          aten.conv_transpose3d.input)
def _conv_transpose(em: Emitter, a: Args) -> Value:
    return conv(em, a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"], True, a["output_padding"])


# -- recurrent cells ----------------------------------------------------------------------


@_aten_fn(aten.gru_cell.default)
def _gru_cell(em: Emitter, a: Args) -> Value:
    def bias(name: str) -> Value | None:
        return None if a[name] is None else em.value(a[name])

    return gru_cell(em, em.value(a["input"]), em.value(a["hx"]), em.value(a["w_ih"]),
                    em.value(a["w_hh"]), bias("b_ih"), bias("b_hh"))


def gru_cell(em: Emitter, x: Value, h: Value, w_ih: Value, w_hh: Value, b_ih: Value | None,
             b_hh: Value | None) -> Value:
    """One GRU step (nn.GRUCell), as torch computes it: the input and hidden projections
    split into reset, update and new gates, h' = n + z * (h - n)."""
    size = em.static_shape(w_hh)[1]

    def project(v: Value, weight: Value, bias: Value | None) -> list[Value]:
        y = em.op("linear", [v, weight, bias])
        axis = em.rank(y) - 1
        return [em.op("slice", [y], starts=(k * size,), ends=((k + 1) * size,), axes=(axis,))
                for k in range(3)]

    (i_r, i_z, i_n), (h_r, h_z, h_n) = project(x, w_ih, b_ih), project(h, w_hh, b_hh)
    r = em.op("sigmoid", [em.op("add", [i_r, h_r])])
    z = em.op("sigmoid", [em.op("add", [i_z, h_z])])
    n = em.op("tanh", [em.op("add", [i_n, em.op("mul", [r, h_n])])])
    return em.op("add", [n, em.op("mul", [z, em.op("sub", [h, n])])])


def bilinear(em: Emitter, x1: Value, x2: Value, weight: Value, bias: Value | None) -> Value:
    """y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o] (nn.Bilinear): one
    matmul with W laid out (i, o * j), then the product with x2 summed over j."""
    out, left, right = em.static_shape(weight)
    w = em.op("reshape", [em.op("permute", [weight], perm=(1, 0, 2))], shape=(left, out * right))
    t = em.op("matmul", [x1, w])
    rank = em.rank(t)
    t = em.op("reshape", [t], shape=(*([0] * (rank - 1)), out, right))
    y = em.op("reduce_sum", [em.op("mul", [t, em.op("unsqueeze", [x2], axes=(rank - 1,))])],
              axes=(rank,), keepdims=False)
    return y if bias is None else em.op("add", [y, bias])
