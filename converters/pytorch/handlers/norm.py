"""Normalisation: batch, layer, group and RMS norm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from irbridge.dtypes import DType
from irbridge.ir import Value

from .._util import to_torch_dtype
from ..lower import Deferred, Emitter, Unsupported
from ._base import (
    Args,
    _aten_fn,
    _op,
    aten,
)

# -- normalisation -------------------------------------------------------------------------


def _channel_vector(em: Emitter, x: Value, v: Any, fill: float) -> Value:
    if v is not None:
        return em.value(v)
    channels = em.shape(x)[1]
    if not isinstance(channels, int):
        raise Unsupported("batch norm without weights needs a static channel count")
    return em.const(np.full((channels,), fill, dtype=em.type(x).dtype.numpy),
                    em.type(x).dtype)


def batch_norm(em: Emitter, x: Any, weight: Any, bias: Any, mean: Any, var: Any,
               training: bool, momentum: float, eps: float) -> tuple[Value, Any, Any, Any, Any]:
    """(y, batch mean, batch rstd, new running mean, new running var); the last four are
    deferred (built only when used)."""
    xv = em.value(x)
    scale = _channel_vector(em, xv, weight, 1.0)
    shift = _channel_vector(em, xv, bias, 0.0)
    rank = em.rank(xv)
    axes = (0, *range(2, rank))
    if not training and mean is not None and var is not None:
        y = em.op("batch_norm", [xv, scale, shift, em.value(mean), em.value(var)],
                  epsilon=float(eps))
        empty = Deferred(lambda: em.const(np.zeros((0,), dtype=em.type(xv).dtype.numpy),
                                          em.type(xv).dtype))
        return y, empty, empty, Deferred(lambda: em.value(mean)), Deferred(
            lambda: em.value(var))
    # batch statistics (training mode or no running stats)
    bmean = em.op("reduce_mean", [xv], axes=axes, keepdims=True)
    centered = em.op("sub", [xv, bmean])
    bvar = em.op("reduce_mean", [em.op("mul", [centered, centered])], axes=axes,
                 keepdims=True)
    dtype = em.type(xv).dtype
    rstd = em.op("rsqrt", [em.op("add", [bvar, em.scalar(eps, dtype)])])
    shape = (-1, *([1] * (rank - 2)))
    y = em.op("mul", [centered, rstd])
    y = em.op("add", [em.op("mul", [y, em.op("reshape", [scale], shape=shape)]),
                      em.op("reshape", [shift], shape=shape)])

    def stat(v: Value) -> Value:
        return em.op("reshape", [v], shape=(-1,))

    def running(old: Any, new: Value, unbias: bool) -> Value:
        if old is None:
            return stat(new)
        n = 1
        for d in (em.shape(xv)[i] for i in axes):
            if not isinstance(d, int):
                raise Unsupported("running stats of a symbolic batch")
            n *= d
        value = stat(new)
        if unbias and n > 1:
            value = em.op("mul", [value, em.scalar(n / (n - 1), dtype)])
        m = float(momentum if momentum is not None else 0.1)
        return em.op("add", [em.op("mul", [em.value(old), em.scalar(1 - m, dtype)]),
                             em.op("mul", [value, em.scalar(m, dtype)])])

    return (y, Deferred(lambda: stat(bmean)), Deferred(lambda: stat(rstd)),
            Deferred(lambda: running(mean, bmean, False)),
            Deferred(lambda: running(var, bvar, True)))


@_aten_fn(aten.batch_norm.default)
def _batch_norm(em: Emitter, a: Args) -> Value:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])[0]


@_aten_fn(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(em: Emitter, a: Args) -> Any:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], False, a["momentum"], a["eps"])[:3]


@_aten_fn(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _native_bn(em: Emitter, a: Args) -> Any:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])[:3]


@_aten_fn(aten._native_batch_norm_legit_functional.default)
def _bn_functional(em: Emitter, a: Args) -> Any:
    return batch_norm(em, a["input"], a["weight"], a["bias"], a["running_mean"],
                      a["running_var"], bool(a["training"]), a["momentum"], a["eps"])


def layer_norm(em: Emitter, x: Any, normalized_shape: Sequence[int], weight: Any, bias: Any,
               eps: float) -> tuple[Value, Any, Any]:
    xv = em.value(x)
    k = len(normalized_shape)
    y = em.op("layer_norm", [xv, None if weight is None else em.value(weight),
                             None if bias is None else em.value(bias)],
              axis=-k, epsilon=float(eps))
    rank = em.rank(xv)
    axes = tuple(range(rank - k, rank))

    def mean() -> Value:
        return em.op("reduce_mean", [xv], axes=axes, keepdims=True)

    def rstd() -> Value:
        m = mean()
        c = em.op("sub", [xv, m])
        var = em.op("reduce_mean", [em.op("mul", [c, c])], axes=axes, keepdims=True)
        return em.op("rsqrt", [em.op("add", [var, em.scalar(eps, em.type(var).dtype)])])

    return y, Deferred(mean), Deferred(rstd)


@_aten_fn(aten.layer_norm.default)
def _layer_norm(em: Emitter, a: Args) -> Value:
    return layer_norm(em, a["input"], a["normalized_shape"], a["weight"], a["bias"],
                      a["eps"])[0]


@_aten_fn(aten.native_layer_norm.default)
def _native_layer_norm(em: Emitter, a: Args) -> Any:
    return layer_norm(em, a["input"], a["normalized_shape"], a["weight"], a["bias"], a["eps"])


@_aten_fn(aten.group_norm.default)
def _group_norm(em: Emitter, a: Args) -> Value:
    return em.op("group_norm", [em.value(a["input"]), _opt(em, a["weight"]),
                                _opt(em, a["bias"])],
                 num_groups=int(a["num_groups"]), epsilon=float(a["eps"]))


@_aten_fn(aten.native_group_norm.default)
def _native_group_norm(em: Emitter, a: Args) -> Any:
    y = em.op("group_norm", [em.value(a["input"]), _opt(em, a["weight"]), _opt(em, a["bias"])],
              num_groups=int(a["group"]), epsilon=float(a["eps"]))

    def unsupported() -> Value:
        raise Unsupported("group norm statistics")
    return y, Deferred(unsupported), Deferred(unsupported)


@_aten_fn(_op("rms_norm"))
def _rms_norm(em: Emitter, a: Args) -> Value:
    x = em.value(a["input"])
    eps = a["eps"]
    if eps is None:
        eps = float(torch.finfo(to_torch_dtype(em.type(x).dtype)).eps)
    return em.op("rms_norm", [x, _opt(em, a["weight"])], axis=-len(a["normalized_shape"]),
                 epsilon=float(eps))


def _opt(em: Emitter, v: Any) -> Value | None:
    return None if v is None else em.value(v)


@_aten_fn(_op("_batch_norm_with_update_functional"))
def _bn_with_update(em: Emitter, a: Args) -> Any:
    """Training-mode batch norm with running-stat updates: (y, batch mean, batch rstd,
    reserve (empty on CPU), new running mean, new running var)."""
    y, mean, rstd, new_mean, new_var = batch_norm(
        em, a["input"], a["weight"], a["bias"], a["running_mean"], a["running_var"], True,
        a["momentum"], a["eps"])
    reserve = Deferred(lambda: em.op("full", [], shape=(0,), value=0, dtype=DType.UINT8))
    return y, mean, rstd, reserve, new_mean, new_var
