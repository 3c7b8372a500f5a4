"""Backward ATen ops of training-step graphs (see converters/pytorch/train.py), as
compositions of neutral ops.

Only backward ops that have no decomposition, or whose decomposition needs ops the
forward tables lack, have an entry here: the others (`threshold_backward`,
`gelu_backward`, `native_layer_norm_backward`, `native_batch_norm_backward`,
`_softmax_backward_data`, `nll_loss_backward`, `mse_loss_backward`, ...) go through the engine's re-trace to
core ATen and lower through the forward tables.

* `convolution_backward`: grad_input is a transposed convolution of grad_output with the
  forward weight (output_padding restores the input size); grad_weight is a convolution
  of the input with grad_output as the kernel (batch and channels swapped, stride and
  dilation swapped, grouped by the forward groups; the input is cropped or padded so
  that the result has exactly the kernel's size, hence exactly the MACs of torch's flop
  counter); grad_bias sums grad_output over batch and space.
* `max_pool{2,3}d_with_indices_backward`: grad_output is scatter-added at the forward's
  indices; `max_pool_indices` gives the forward op's indices output (the pooling family's
  `max_pool*_with_indices` handlers use it): the window position of each maximum, found
  again from the input (first maximum in scan order, as PyTorch's kernels pick).
* `embedding_dense_backward`: grad_output's rows scatter-added into a zero table at their
  indices (its decomposition uses `index_put` with accumulation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Unsupported
from ._base import Args, _aten_fn, _tuple, aten


def _static(em: Emitter, v: Value) -> tuple[int, ...]:
    try:
        return em.static_shape(v)
    except Exception as exc:  # symbolic shapes: the arithmetic below needs sizes
        raise Unsupported("backward op with a symbolic shape") from exc


def _conv_grad_input(em: Emitter, gy: Value, w: Value, x_shape: tuple[int, ...],
                     gy_shape: tuple[int, ...], k: tuple[int, ...], s: tuple[int, ...],
                     p: tuple[int, ...], d: tuple[int, ...], groups: int) -> Value:
    out_pad = []
    for i in range(len(k)):
        natural = (gy_shape[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + 1
        extra = x_shape[2 + i] - natural
        if extra < 0 or extra >= max(s[i], d[i]):
            raise Unsupported("conv backward: input size not reachable by a transposed conv")
        out_pad.append(extra)
    return em.op("conv_transpose", [gy, w, None], strides=s, pads=p + p, dilations=d,
                 groups=groups, output_padding=tuple(out_pad))


def _conv_grad_weight(em: Emitter, gy: Value, x: Value, x_shape: tuple[int, ...],
                      gy_shape: tuple[int, ...], w_shape: tuple[int, ...],
                      k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...],
                      d: tuple[int, ...], groups: int) -> Value:
    n, cin = x_shape[:2]
    nd = len(k)
    space = tuple(range(2, 2 + nd))
    # x [N, g, Cin/g, *S] -> [Cin/g, g * N, *S]: batch = input channel within the group
    xs = em.op("reshape", [x], shape=(n, groups, cin // groups, *x_shape[2:]))
    xs = em.op("permute", [xs], perm=(2, 1, 0, *(a + 1 for a in space)))
    xs = em.op("reshape", [xs], shape=(cin // groups, groups * n, *x_shape[2:]))
    # grad_output [N, Cout, *O] -> [Cout, N, *O]: the kernel, grouped like the forward
    ws = em.op("permute", [gy], perm=(1, 0, *space))
    # input extent each kernel tap reads: crop or pad the end so the result is exactly k
    begins, ends, crop = list(p), [], []
    for i in range(nd):
        need = s[i] * (gy_shape[2 + i] - 1) + d[i] * (k[i] - 1) + 1  # padded extent read
        end_pad = need - p[i] - x_shape[2 + i]
        if end_pad < 0:
            crop.append(x_shape[2 + i] + end_pad)
            ends.append(0)
        else:
            crop.append(x_shape[2 + i])
            ends.append(end_pad)
    if any(c != x_shape[2 + i] for i, c in enumerate(crop)):
        xs = em.op("slice", [xs], starts=(0,) * nd, ends=tuple(crop), axes=space)
    gw = em.op("conv", [xs, ws, None], strides=d, pads=tuple(begins) + tuple(ends),
               dilations=s, groups=groups)
    # [Cin/g, Cout, *k] -> [Cout, Cin/g, *k]
    gw = em.op("permute", [gw], perm=(1, 0, *space))
    if tuple(_static(em, gw)) != tuple(w_shape):
        raise Unsupported(f"conv backward: grad_weight {_static(em, gw)} != {w_shape}")
    return gw


@_aten_fn(aten.convolution_backward.default)
def _convolution_backward(em: Emitter, a: Args) -> Any:
    if a["transposed"]:
        raise Unsupported("backward of a transposed convolution")
    gy, x, w = em.value(a["grad_output"]), em.value(a["input"]), em.value(a["weight"])
    x_shape, gy_shape, w_shape = _static(em, x), _static(em, gy), _static(em, w)
    nd = len(w_shape) - 2
    k = w_shape[2:]
    s, p, d = _tuple(a["stride"], nd), _tuple(a["padding"], nd), _tuple(a["dilation"], nd)
    groups = int(a["groups"])
    mask = list(a["output_mask"])
    gi = Deferred(lambda: _conv_grad_input(em, gy, w, x_shape, gy_shape, k, s, p, d, groups))
    gw = Deferred(lambda: _conv_grad_weight(em, gy, x, x_shape, gy_shape, w_shape, k, s, p,
                                            d, groups))
    gb = Deferred(lambda: em.op("reduce_sum", [gy], axes=(0, *range(2, 2 + nd)),
                                keepdims=False))
    # computed eagerly when requested, so that a case this lowering does not cover falls
    # back (re-trace / opaque) instead of failing later at first use
    results: list[Any] = []
    for wanted, part in zip(mask, (gi, gw, gb), strict=True):
        results.append(part.resolve() if wanted else None)
    return tuple(results)


def max_pool_indices(em: Emitter, x_in: Any, nd: int, kernel: Any, stride: Any,
                     padding: Any, dilation: Any, out: tuple[int, ...]) -> Value:
    """The indices output of `max_pool{nd}d_with_indices`: per output element, the flat
    position (within its channel's plane) of the window's first maximum in scan order,
    as PyTorch's kernels pick it. Found again from the input, tap by tap."""
    x = em.value(x_in)
    x_shape = _static(em, x)
    if len(x_shape) != nd + 2:
        raise Unsupported("indices of an unbatched max pool")
    k = _tuple(kernel, nd)
    s = _tuple(stride, nd) if stride else k
    p, d = _tuple(padding, nd), _tuple(dilation, nd)
    n, c = x_shape[:2]
    spatial = x_shape[2:]
    dtype = em.type(x).dtype
    if not np.issubdtype(dtype.numpy, np.floating):
        raise Unsupported("indices of an integer max pool")
    # pad with -inf (and far enough at the end for ceil mode) so every tap is a strided slice
    ends = [max(0, (out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - p[i] - spatial[i])
            for i in range(nd)]
    xp = em.op("pad", [x], pads=(0, 0, *p, 0, 0, *ends), mode="constant",
               value=float("-inf"))
    flat_pos = np.arange(int(np.prod(spatial)), dtype=np.int64).reshape(spatial)
    flat_pos = np.pad(flat_pos, [(p[i], ends[i]) for i in range(nd)], constant_values=0)
    best: Value | None = None
    best_idx: Value | None = None
    axes = tuple(range(2, 2 + nd))
    for tap in np.ndindex(*k):
        starts = tuple(int(tap[i]) * d[i] for i in range(nd))
        stops = tuple(starts[i] + (out[i] - 1) * s[i] + 1 for i in range(nd))
        v = em.op("slice", [xp], starts=starts, ends=stops, axes=axes, steps=s)
        where = tuple(slice(starts[i], stops[i], s[i]) for i in range(nd))
        idx = em.const(np.ascontiguousarray(flat_pos[where]).reshape(1, 1, *out))
        if best is None:
            best, best_idx = v, em.op("expand", [idx], shape=(n, c, *out))
            continue
        assert best_idx is not None
        take = em.op("greater", [v, best])  # strict: the first maximum wins, as in torch
        best = em.op("where", [take, v, best])
        best_idx = em.op("where", [take, idx, best_idx])
    assert best_idx is not None
    return best_idx


def _max_pool_backward(em: Emitter, a: Args, nd: int) -> Value:
    """grad_output scatter-added at the forward's indices."""
    gy, x, idx = em.value(a["grad_output"]), em.value(a["self"]), em.value(a["indices"])
    x_shape = _static(em, x)
    if len(x_shape) != nd + 2:
        raise Unsupported("unbatched max-pool backward")
    n, c = x_shape[:2]
    dtype = em.type(gy).dtype
    zeros = em.const(np.zeros((n, c, int(np.prod(x_shape[2:]))), dtype=dtype.numpy), dtype)
    gx = em.op("scatter_elements", [zeros, em.op("reshape", [idx], shape=(n, c, -1)),
                                    em.op("reshape", [gy], shape=(n, c, -1))],
               axis=2, reduction="add")
    return em.op("reshape", [gx], shape=x_shape)


@_aten_fn(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(em: Emitter, a: Args) -> Value:
    return _max_pool_backward(em, a, 2)


@_aten_fn(aten.max_pool3d_with_indices_backward.default)
def _max_pool3d_backward(em: Emitter, a: Args) -> Value:
    return _max_pool_backward(em, a, 3)


@_aten_fn(aten.embedding_dense_backward.default)
def _embedding_dense_backward(em: Emitter, a: Args) -> Value:
    """grad_weight [num_weights, D]: the rows of grad_output scatter-added at their indices
    (rows whose index is padding_idx add nothing)."""
    if a["scale_grad_by_freq"]:
        raise Unsupported("embedding backward with scale_grad_by_freq")
    gy, idx = em.value(a["grad_output"]), em.value(a["indices"])
    gy_shape = _static(em, gy)
    rows, dim = int(np.prod(gy_shape[:-1])), gy_shape[-1]
    dtype = em.type(gy).dtype
    flat_idx = em.op("reshape", [idx], shape=(rows, 1))
    flat_idx = em.cast(flat_idx, DType.INT64)
    flat_gy = em.op("reshape", [gy], shape=(rows, dim))
    padding = int(a["padding_idx"])
    if padding >= 0:
        keep = em.op("not_equal", [flat_idx, em.const(np.array(padding, dtype=np.int64))])
        flat_gy = em.op("where", [keep, flat_gy, em.scalar(0.0, dtype)])
    zeros = em.const(np.zeros((int(a["num_weights"]), dim), dtype=dtype.numpy), dtype)
    return em.op("scatter_elements", [zeros, em.op("expand", [flat_idx], shape=(rows, dim)),
                                      flat_gy], axis=0, reduction="add")
