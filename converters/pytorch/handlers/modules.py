"""nn.Module classes of call_module nodes (fx leaf modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from irbridge.ir import Value

from ..lower import Emitter, Unsupported
from ._base import (
    _module,
    _pick,
    dropout,
)
from .attention import (
    multi_head_attention,
)
from .elementwise import (
    _prelu,
)
from .linear import (
    bilinear,
    conv,
    gru_cell,
)
from .norm import (
    _rms_norm,
    batch_norm,
    layer_norm,
)
from .pooling import (
    _adaptive,
    avg_pool,
    max_pool,
    resize,
)
from .reduction import (
    _softmax_fn,
)
from .shapes import (
    _flatten,
    _unflatten,
    pad,
)

# -- modules (fx leaf modules) ------------------------------------------------------------


def _input(args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "input") -> Any:
    if args:
        return args[0]
    if name in kwargs:
        return kwargs[name]
    return next(iter(kwargs.values()))


def _mparam(em: Emitter, module: nn.Module, name: str) -> Value | None:
    t = getattr(module, name, None)
    if t is None:
        return None
    path = em.provenance.module_path
    return em.param(f"{path}.{name}" if path else name, t)


@_module(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def _m_conv(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(_input(args, kwargs))
    padding = m.padding
    if m.padding_mode != "zeros":
        mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[m.padding_mode]
        x = pad(em, x, list(m._reversed_padding_repeated_twice), mode, 0.0)
        padding = 0
    return conv(em, x, _mparam(em, m, "weight"), _mparam(em, m, "bias"), m.stride, padding,
                m.dilation, m.groups)


@_module(nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
def _m_conv_t(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) > 1 or kwargs.get("output_size") is not None:
        raise Unsupported("conv transpose with output_size")
    return conv(em, _input(args, kwargs), _mparam(em, m, "weight"), _mparam(em, m, "bias"),
                m.stride, m.padding, m.dilation, m.groups, True, m.output_padding)


@_module(nn.Linear)
def _m_linear(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.op("linear", [em.value(_input(args, kwargs)), _mparam(em, m, "weight"),
                            _mparam(em, m, "bias")])


@_module(nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
def _m_batch_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    use_batch = m.training or m.running_mean is None
    return batch_norm(em, _input(args, kwargs), _mparam(em, m, "weight"), _mparam(em, m, "bias"),
                      _mparam(em, m, "running_mean"), _mparam(em, m, "running_var"),
                      use_batch, m.momentum, m.eps)[0]


@_module(nn.LayerNorm)
def _m_layer_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return layer_norm(em, _input(args, kwargs), m.normalized_shape, _mparam(em, m, "weight"),
                      _mparam(em, m, "bias"), m.eps)[0]


@_module(nn.GroupNorm)
def _m_group_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return em.op("group_norm", [em.value(_input(args, kwargs)), _mparam(em, m, "weight"),
                                _mparam(em, m, "bias")],
                 num_groups=int(m.num_groups), epsilon=float(m.eps))


if hasattr(nn, "RMSNorm"):
    @_module(nn.RMSNorm)
    def _m_rms_norm(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _rms_norm(em, {"input": _input(args, kwargs), "normalized_shape":
                              m.normalized_shape, "weight": m.weight if m.weight is None
                              else _mparam(em, m, "weight"), "eps": m.eps})


_SIMPLE_ACTIVATIONS: dict[type, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    nn.ReLU: ("relu", lambda m: {}), nn.SiLU: ("silu", lambda m: {}),
    nn.Sigmoid: ("sigmoid", lambda m: {}), nn.Tanh: ("tanh", lambda m: {}),
    nn.Hardswish: ("hardswish", lambda m: {}), nn.Mish: ("mish", lambda m: {}),
    nn.Hardsigmoid: ("hardsigmoid", lambda m: {"alpha": 1 / 6, "beta": 0.5}),
    nn.GELU: ("gelu", lambda m: {"approximate": m.approximate}),
    nn.LeakyReLU: ("leaky_relu", lambda m: {"alpha": float(m.negative_slope)}),
    nn.ELU: ("elu", lambda m: {"alpha": float(m.alpha)}),
    nn.Softplus: ("softplus", lambda m: {"beta": float(m.beta), "threshold": float(m.threshold)}),
    nn.ReLU6: ("clip", lambda m: {"min": 0.0, "max": 6.0}),
    nn.Hardtanh: ("clip", lambda m: {"min": float(m.min_val), "max": float(m.max_val)}),
}


def _activation_module(name: str, attrs: Callable[[Any], dict[str, Any]]) -> Callable[
        [Emitter, Any, tuple[Any, ...], dict[str, Any]], Any]:
    def fn(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return em.op(name, [em.value(_input(args, kwargs))], **attrs(m))
    return fn


for _cls, (_opname, _attrs) in _SIMPLE_ACTIVATIONS.items():
    _module(_cls)(_activation_module(_opname, _attrs))


@_module(nn.PReLU)
def _m_prelu(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _prelu(em, {"self": _input(args, kwargs), "weight": _mparam(em, m, "weight")})


@_module(nn.Softmax, nn.LogSoftmax)
def _m_softmax(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.dim is None:
        raise Unsupported("softmax without dim")
    name = "log_softmax" if isinstance(m, nn.LogSoftmax) else "softmax"
    return _softmax_fn(name)(em, {"self": _input(args, kwargs), "dim": m.dim})


@_module(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
         nn.FeatureAlphaDropout, nn.Identity)
def _m_identity(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if isinstance(m, nn.Identity):
        return em.value(_input(args, kwargs))
    return dropout(em, _input(args, kwargs), m.p, m.training)


@_module(nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
def _m_max_pool(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.return_indices:
        raise Unsupported("max pool indices")
    spatial = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3}[type(m)]
    return max_pool(em, _input(args, kwargs), spatial, m.kernel_size, m.stride, m.padding,
                    m.dilation, m.ceil_mode)


@_module(nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
def _m_avg_pool(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    spatial = {nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}[type(m)]
    return avg_pool(em, _input(args, kwargs), spatial, m.kernel_size, m.stride, m.padding,
                    m.ceil_mode, m.count_include_pad, getattr(m, "divisor_override", None))


@_module(nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)
def _m_adaptive_avg(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    spatial = {nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2, nn.AdaptiveAvgPool3d: 3}[type(m)]
    return _adaptive(em, _input(args, kwargs), spatial, m.output_size, "adaptive_avg_pool")


@_module(nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
def _m_adaptive_max(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.return_indices:
        raise Unsupported("adaptive max pool indices")
    spatial = {nn.AdaptiveMaxPool1d: 1, nn.AdaptiveMaxPool2d: 2, nn.AdaptiveMaxPool3d: 3}[type(m)]
    return _adaptive(em, _input(args, kwargs), spatial, m.output_size, "adaptive_max_pool")


@_module(nn.Flatten)
def _m_flatten(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _flatten(em, {"self": _input(args, kwargs), "start_dim": m.start_dim,
                         "end_dim": m.end_dim})


@_module(nn.Unflatten)
def _m_unflatten(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _unflatten(em, {"self": _input(args, kwargs), "dim": m.dim,
                           "sizes": list(m.unflattened_size)})


@_module(nn.Upsample)
def _m_upsample(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if getattr(m, "recompute_scale_factor", None):
        raise Unsupported("recompute_scale_factor")
    scale = None if m.size is not None else m.scale_factor
    return resize(em, _input(args, kwargs), m.mode, scale, m.align_corners)


@_module(nn.Embedding)
def _m_embedding(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if m.max_norm is not None:
        raise Unsupported("embedding with max_norm")
    return em.op("embedding", [_mparam(em, m, "weight"), em.value(_input(args, kwargs))])


@_module(nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d, nn.ConstantPad1d, nn.ConstantPad2d,
         nn.ConstantPad3d, nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d,
         nn.ReplicationPad1d, nn.ReplicationPad2d, nn.ReplicationPad3d, nn.CircularPad1d,
         nn.CircularPad2d, nn.CircularPad3d)
def _m_pad(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    mode = "constant"
    if isinstance(m, nn.ReflectionPad1d | nn.ReflectionPad2d | nn.ReflectionPad3d):
        mode = "reflect"
    elif isinstance(m, nn.ReplicationPad1d | nn.ReplicationPad2d | nn.ReplicationPad3d):
        mode = "edge"
    elif isinstance(m, nn.CircularPad1d | nn.CircularPad2d | nn.CircularPad3d):
        mode = "wrap"
    return pad(em, _input(args, kwargs), list(m.padding), mode, getattr(m, "value", 0.0))


@_module(nn.Bilinear)
def _m_bilinear(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x1, x2 = _pick(args, kwargs, 0, "input1", None), _pick(args, kwargs, 1, "input2", None)
    weight = _mparam(em, m, "weight")
    assert weight is not None
    return bilinear(em, em.value(x1), em.value(x2), weight, _mparam(em, m, "bias"))


@_module(nn.GRUCell)
def _m_gru_cell(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = em.value(_input(args, kwargs))
    hx = _pick(args, kwargs, 1, "hx", None)
    if em.rank(x) != 2:
        raise Unsupported("unbatched GRUCell")
    h = em.value(hx) if hx is not None else em.op(
        "full", [], shape=(em.static_shape(x)[0], m.hidden_size), value=0.0,
        dtype=em.type(x).dtype)
    w_ih, w_hh = _mparam(em, m, "weight_ih"), _mparam(em, m, "weight_hh")
    assert w_ih is not None and w_hh is not None
    return gru_cell(em, x, h, w_ih, w_hh, _mparam(em, m, "bias_ih"), _mparam(em, m, "bias_hh"))


@_module(nn.MultiheadAttention)
def _m_mha(em: Emitter, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal"]
    defaults: dict[str, Any] = {"need_weights": True, "average_attn_weights": True,
                                "is_causal": False}
    a = {n: _pick(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    if m.bias_k is not None or m.add_zero_attn or (m.dropout and m.training):
        raise Unsupported("MultiheadAttention with bias_k/add_zero_attn/train dropout")
    qkv = None
    if not m._qkv_same_embed_dim:
        qkv = [_mparam(em, m, "q_proj_weight"), _mparam(em, m, "k_proj_weight"),
               _mparam(em, m, "v_proj_weight")]
    causal = bool(a["is_causal"]) and a["attn_mask"] is None
    out, weights = multi_head_attention(
        em, a["query"], a["key"], a["value"], int(m.embed_dim), int(m.num_heads),
        None if qkv else _mparam(em, m, "in_proj_weight"), _mparam(em, m, "in_proj_bias"),
        em.param(_child(em, "out_proj.weight"), m.out_proj.weight),
        None if m.out_proj.bias is None else em.param(_child(em, "out_proj.bias"),
                                                      m.out_proj.bias),
        qkv_weights=qkv, key_padding_mask=a["key_padding_mask"], attn_mask=a["attn_mask"],
        need_weights=bool(a["need_weights"]),
        average_weights=bool(a["average_attn_weights"]), batch_first=bool(m.batch_first),
        causal=causal)
    return out, weights


def _child(em: Emitter, name: str) -> str:
    path = em.provenance.module_path
    return f"{path}.{name}" if path else name
