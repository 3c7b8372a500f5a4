"""Attention: scaled dot-product attention and multi-head attention."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Unsupported
from ._base import (
    Args,
    _aten_fn,
    _op,
    aten,
)
from .norm import (
    _opt,
)

# -- attention ----------------------------------------------------------------------------


def attention(em: Emitter, q: Any, k: Any, v: Any, mask: Any, causal: bool,
              scale: float | None) -> Value:
    qv, kv, vv = em.value(q), em.value(k), em.value(v)
    mv = None
    if mask is not None:
        mv = em.value(mask)
        if em.type(mv).dtype != DType.BOOL:
            mv = em.cast(mv, em.type(qv).dtype)
    return em.op("attention", [qv, kv, vv, mv], causal=bool(causal),
                 scale=float(scale) if scale else 0.0)


@_aten_fn(aten.scaled_dot_product_attention.default)
def _sdpa(em: Emitter, a: Args) -> Value:
    return attention(em, a["query"], a["key"], a["value"], a["attn_mask"], a["is_causal"],
                     a["scale"])


@_aten_fn(_op("_scaled_dot_product_flash_attention_for_cpu"))
def _sdpa_flash_cpu(em: Emitter, a: Args) -> Any:
    y = attention(em, a["query"], a["key"], a["value"], a.get("attn_mask"), a["is_causal"],
                  a["scale"])
    return (y, Deferred(lambda: _attention_lse(em, a)))


def _attention_lse(em: Emitter, a: Args) -> Value:
    """The kernel's second output: logsumexp over the keys of the scaled (and causally
    masked) scores, shape [..., L] (float32 as torch gives it)."""
    q, k = em.value(a["query"]), em.value(a["key"])
    if a.get("attn_mask") is not None:
        raise Unsupported("attention log-sum-exp with an explicit mask")
    qs, ks = em.static_shape(q), em.static_shape(k)
    if len(qs) != len(ks) or qs[:-2] != ks[:-2]:
        raise Unsupported("attention log-sum-exp with grouped or broadcast heads")
    rank = len(qs)
    scale = float(a["scale"]) if a.get("scale") else 1.0 / math.sqrt(qs[-1])
    kt = em.op("permute", [k], perm=(*range(rank - 2), rank - 1, rank - 2))
    scores = em.op("matmul", [q, kt])
    scores = em.op("mul", [scores, em.scalar(scale, em.type(scores).dtype)])
    if a["is_causal"]:
        length, keys = qs[-2], ks[-2]
        blocked = np.triu(np.ones((length, keys), dtype=bool), 1)
        mask = np.where(blocked, -np.inf, 0.0).astype(em.type(scores).dtype.numpy)
        scores = em.op("add", [scores, em.const(mask, em.type(scores).dtype)])
    lse = em.op("reduce_log_sum_exp", [scores], axes=(rank - 1,), keepdims=False)
    return em.cast(lse, em.out_dtype(1))


@_aten_fn(_op("_scaled_dot_product_efficient_attention"))
def _sdpa_efficient(em: Emitter, a: Args) -> Any:
    y = attention(em, a["query"], a["key"], a["value"], a.get("attn_bias"), a["is_causal"],
                  a["scale"])
    missing = Deferred(lambda: _unsupported("attention statistics"))
    return (y, missing, missing, missing)


@_aten_fn(_op("_scaled_dot_product_flash_attention"))
def _sdpa_flash(em: Emitter, a: Args) -> Any:
    y = attention(em, a["query"], a["key"], a["value"], None, a["is_causal"], a["scale"])
    missing = Deferred(lambda: _unsupported("attention statistics"))
    return (y, *([missing] * 8))


def _unsupported(what: str) -> Value:
    raise Unsupported(what)


def multi_head_attention(em: Emitter, query: Any, key: Any, value: Any, embed_dim: int,
                         heads: int, in_weight: Any, in_bias: Any, out_weight: Any,
                         out_bias: Any, *, qkv_weights: Sequence[Any] | None = None,
                         key_padding_mask: Any = None, attn_mask: Any = None,
                         need_weights: bool = False, average_weights: bool = True,
                         batch_first: bool = True, causal: bool = False) -> tuple[Value, Any]:
    """nn.MultiheadAttention: q/k/v projections, per-head attention, output projection."""
    q, k, v = em.value(query), em.value(key), em.value(value)
    unbatched = em.rank(q) == 2
    if unbatched:
        q, k, v = (em.op("unsqueeze", [t], axes=(0 if batch_first else 1,)) for t in (q, k, v))
    if not batch_first:
        q, k, v = (em.op("permute", [t], perm=(1, 0, 2)) for t in (q, k, v))
    head_dim = embed_dim // heads
    dtype = em.type(q).dtype

    def project(x: Value, index: int) -> Value:
        if qkv_weights is not None:
            w = em.value(qkv_weights[index])
        else:
            w = em.op("slice", [em.value(in_weight)], starts=(index * embed_dim,),
                      ends=((index + 1) * embed_dim,), axes=(0,))
        b = None
        if in_bias is not None:
            b = em.op("slice", [em.value(in_bias)], starts=(index * embed_dim,),
                      ends=((index + 1) * embed_dim,), axes=(0,))
        y = em.op("linear", [x, w, b])
        y = em.op("reshape", [y], shape=(0, 0, heads, head_dim))
        return em.op("permute", [y], perm=(0, 2, 1, 3))

    qh, kh, vh = project(q, 0), project(k, 1), project(v, 2)
    mask: Value | None = None
    if attn_mask is not None:
        mask = em.value(attn_mask)
        if em.type(mask).dtype == DType.BOOL:
            mask = em.op("logical_not", [mask])  # MHA: True = masked out
        else:
            mask = em.cast(mask, dtype)
        if em.rank(mask) == 3:  # [N * heads, L, S]
            mask = em.op("reshape", [mask], shape=(-1, heads, *em.static_shape(mask)[1:]))
    if key_padding_mask is not None:
        kpm = em.value(key_padding_mask)
        kpm = em.op("unsqueeze", [kpm], axes=(1, 2))  # [N, 1, 1, S]
        if em.type(kpm).dtype == DType.BOOL:
            kpm = em.op("logical_not", [kpm])
            if mask is not None and em.type(mask).dtype == DType.BOOL:
                mask = em.op("logical_and", [mask, kpm])
            elif mask is not None:
                minus = em.op("where", [kpm, em.scalar(0.0, dtype),
                                        em.scalar(-math.inf, dtype)])
                mask = em.op("add", [mask, minus])
            else:
                mask = kpm
        else:
            kpm = em.cast(kpm, dtype)
            mask = kpm if mask is None else em.op("add", [em.cast(mask, dtype)
                                                          if em.type(mask).dtype == DType.BOOL
                                                          else mask, kpm])
    weights: Any = None
    if need_weights:
        scores = em.op("matmul", [qh, em.op("permute", [kh], perm=(0, 1, 3, 2))])
        scores = em.op("mul", [scores, em.scalar(1 / math.sqrt(head_dim), dtype)])
        if mask is not None:
            if em.type(mask).dtype == DType.BOOL:
                scores = em.op("where", [mask, scores, em.scalar(-math.inf, dtype)])
            else:
                scores = em.op("add", [scores, mask])
        probs = em.op("softmax", [scores], axis=-1)
        ctx = em.op("matmul", [probs, vh])
        weights = em.op("reduce_mean", [probs], axes=(1,)) if average_weights else probs
        if unbatched:
            weights = em.op("squeeze", [weights], axes=(0,))
    else:
        ctx = em.op("attention", [qh, kh, vh, mask], causal=bool(causal))
    ctx = em.op("permute", [ctx], perm=(0, 2, 1, 3))
    ctx = em.op("reshape", [ctx], shape=(0, 0, embed_dim))
    out = em.op("linear", [ctx, em.value(out_weight), _opt(em, out_bias)])
    if not batch_first:
        out = em.op("permute", [out], perm=(1, 0, 2))
    if unbatched:
        out = em.op("squeeze", [out], axes=(0 if batch_first else 1,))
    return out, weights


@_aten_fn(_op("_native_multi_head_attention"))
def _native_mha(em: Emitter, a: Args) -> Any:
    mask_type = a.get("mask_type")
    kpm = attn = None
    if a["mask"] is not None:
        if mask_type == 1:
            kpm = a["mask"]
        else:
            attn = a["mask"]
    out, weights = multi_head_attention(
        em, a["query"], a["key"], a["value"], int(a["embed_dim"]), int(a["num_head"]),
        a["qkv_weight"], a["qkv_bias"], a["proj_weight"], a["proj_bias"],
        key_padding_mask=kpm, attn_mask=attn, need_weights=bool(a["need_weights"]),
        average_weights=bool(a["average_attn_weights"]), batch_first=True)
    if weights is None:
        weights = Deferred(lambda: em.const(np.zeros((0,), dtype=np.float32)))
    return out, weights
