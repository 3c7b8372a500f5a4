"""Pooling and resizing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Unsupported
from ._base import (
    Args,
    AtenFn,
    _aten_fn,
    _op,
    _tuple,
    aten,
)
from .attention import (
    _unsupported,
)

# -- pooling and resizing --------------------------------------------------------------


def _batched(em: Emitter, x: Value, spatial: int) -> tuple[Value, bool]:
    if em.rank(x) == spatial + 1:
        return em.op("unsqueeze", [x], axes=(0,)), True
    return x, False


def _unbatch(em: Emitter, y: Value, unbatched: bool) -> Value:
    return em.op("squeeze", [y], axes=(0,)) if unbatched else y


def max_pool(em: Emitter, x: Any, spatial: int, kernel: Any, stride: Any, padding: Any,
             dilation: Any, ceil_mode: bool) -> Value:
    xv, unbatched = _batched(em, em.value(x), spatial)
    k = _tuple(kernel, spatial)
    s = _tuple(stride, spatial) if stride else k
    p = _tuple(padding, spatial)
    y = em.op("max_pool", [xv], kernel=k, strides=s, pads=p + p,
              dilations=_tuple(dilation, spatial), ceil_mode=bool(ceil_mode))
    return _unbatch(em, y, unbatched)


def _max_pool_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return max_pool(em, a["self"], spatial, a["kernel_size"], a["stride"], a["padding"],
                        a["dilation"], a["ceil_mode"])
    return fn


def _max_pool_indices_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        from .backward import max_pool_indices  # the indices feed max-pool backward

        y = _max_pool_fn(spatial)(em, a)
        out = em.static_shape(y)[-spatial:] if em.type(y).is_static else None
        if out is None:
            return y, Deferred(lambda: _unsupported("max-pool indices of a symbolic shape"))
        return y, Deferred(lambda: max_pool_indices(
            em, a["self"], spatial, a["kernel_size"], a["stride"], a["padding"],
            a["dilation"], tuple(out)))
    return fn


_aten_fn(aten.max_pool1d.default)(_max_pool_fn(1))
_aten_fn(aten.max_pool2d.default)(_max_pool_fn(2))
_aten_fn(aten.max_pool3d.default)(_max_pool_fn(3))
_aten_fn(aten.max_pool2d_with_indices.default)(_max_pool_indices_fn(2))
_aten_fn(aten.max_pool3d_with_indices.default)(_max_pool_indices_fn(3))
_aten_fn(_op("max_pool1d_with_indices"))(_max_pool_indices_fn(1))


def avg_pool(em: Emitter, x: Any, spatial: int, kernel: Any, stride: Any, padding: Any,
             ceil_mode: bool, count_include_pad: bool, divisor: Any = None) -> Value:
    xv, unbatched = _batched(em, em.value(x), spatial)
    k = _tuple(kernel, spatial)
    s = _tuple(stride, spatial) if stride else k
    p = _tuple(padding, spatial)
    y = em.op("avg_pool", [xv], kernel=k, strides=s, pads=p + p, ceil_mode=bool(ceil_mode),
              count_include_pad=bool(count_include_pad) and divisor is None)
    if divisor is not None:
        y = _divided_by(em, y, em.static_shape(xv)[2:], k, s, p, int(divisor))
    return _unbatch(em, y, unbatched)


def _divided_by(em: Emitter, mean: Value, size: Sequence[int], kernel: Sequence[int],
                stride: Sequence[int], pad: Sequence[int], divisor: int) -> Value:
    """torch's divisor_override: each window's sum over the input elements it covers, over
    `divisor`. `mean` averages over those elements; their count per window is known
    statically (window start o * stride - pad, clipped to the input)."""
    if divisor == 0:
        raise Unsupported("avg_pool divisor_override of 0")
    counts = np.ones((), np.float64)
    for n, k, s, p, o in zip(size, kernel, stride, pad, em.static_shape(mean)[2:],
                             strict=True):
        start = np.arange(o) * s - p
        covered = np.minimum(start + k, n) - np.maximum(start, 0)
        counts = np.multiply.outer(counts, covered)
    dtype = em.type(mean).dtype
    return em.op("mul", [mean, em.const((counts / divisor).astype(dtype.numpy), dtype)])


def _avg_pool_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return avg_pool(em, a["self"], spatial, a["kernel_size"], a["stride"], a["padding"],
                        a["ceil_mode"], a["count_include_pad"], a.get("divisor_override"))
    return fn


_aten_fn(aten.avg_pool1d.default)(_avg_pool_fn(1))
_aten_fn(aten.avg_pool2d.default)(_avg_pool_fn(2))
_aten_fn(aten.avg_pool3d.default)(_avg_pool_fn(3))


def _adaptive_avg_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        return _adaptive(em, a["self"], spatial, a["output_size"], "adaptive_avg_pool")
    return fn


def _adaptive(em: Emitter, x: Any, spatial: int, output_size: Any, op: str) -> Value:
    xv, unbatched = _batched(em, em.value(x), spatial)
    shape = em.shape(xv)
    sizes = [output_size] * spatial if isinstance(output_size, int) else list(output_size)
    if len(sizes) == 1 and spatial > 1:
        sizes = sizes * spatial
    resolved: list[int] = []
    for i, s in enumerate(sizes):
        d = shape[2 + i] if s is None else s
        if not isinstance(d, int):
            raise Unsupported("adaptive pooling to a symbolic size")
        resolved.append(int(d))
    y = em.op(op, [xv], output_size=tuple(resolved))
    return _unbatch(em, y, unbatched)


_aten_fn(aten.adaptive_avg_pool1d.default)(_adaptive_avg_fn(1))
_aten_fn(aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default)(
    _adaptive_avg_fn(2))
_aten_fn(aten.adaptive_avg_pool3d.default, aten._adaptive_avg_pool3d.default)(
    _adaptive_avg_fn(3))


def _adaptive_max_fn(spatial: int) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Any:
        y = _adaptive(em, a["self"], spatial, a["output_size"], "adaptive_max_pool")
        return y, Deferred(lambda: _unsupported("adaptive max-pool indices"))
    return fn


_aten_fn(aten.adaptive_max_pool1d.default)(_adaptive_max_fn(1))
_aten_fn(aten.adaptive_max_pool2d.default)(_adaptive_max_fn(2))
_aten_fn(aten.adaptive_max_pool3d.default)(_adaptive_max_fn(3))


def resize(em: Emitter, x: Any, mode: str, scale_factors: Any,
           align_corners: bool | None) -> Value:
    """torch's interpolate. `scale_factors` only when torch maps coordinates with them
    (else, and for integer factors, the output sizes say the same)."""
    xv = em.value(x)
    spatial = em.rank(xv) - 2
    attrs: dict[str, Any] = {}
    if mode in ("nearest", "nearest-exact"):
        attrs["mode"] = "nearest"
        if mode == "nearest":
            attrs.update(coordinate_mode="asymmetric", nearest_mode="floor")
        else:
            attrs.update(coordinate_mode="half_pixel", nearest_mode="round_prefer_ceil")
    elif mode in ("linear", "bilinear", "trilinear", "bicubic"):
        attrs["mode"] = "cubic" if mode == "bicubic" else "linear"
        attrs["coordinate_mode"] = "align_corners" if align_corners else "half_pixel"
    else:
        raise Unsupported(f"interpolation mode {mode!r}")
    out_shape = em.out_shape()
    in_shape = em.shape(xv)
    if scale_factors is not None and not align_corners:
        scales = _float_tuple(scale_factors, spatial)
        sizes = [in_shape[2 + i] for i in range(spatial)]
        exact = all(isinstance(s, int) and float(sc).is_integer() for s, sc in
                    zip(sizes, scales, strict=True))
        if exact:  # torch uses in/out for integer factors: sizes say the same
            attrs["sizes"] = tuple(int(d) for d in out_shape[2:])  # type: ignore[arg-type]
        else:
            attrs["scales"] = scales
    else:
        dims = out_shape[2:]
        if not all(isinstance(d, int) for d in dims):
            raise Unsupported("resize to a symbolic size")
        attrs["sizes"] = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    return em.op("resize", [xv], **attrs)


def _float_tuple(value: Any, count: int) -> tuple[float, ...]:
    if isinstance(value, int | float):
        return (float(value),) * count
    items = tuple(float(v) for v in value)
    return items * count if len(items) == 1 and count > 1 else items


def _upsample(mode: str, spatial: int, vec: bool) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = a["input"] if "input" in a else a["self"]
        align = a.get("align_corners")
        if vec:
            scales = a["scale_factors"] if a["output_size"] is None else None
            return resize(em, x, mode, scales, align)
        given = [a[k] for k in ("scales_d", "scales_h", "scales_w", "scales") if k in a]
        use = given if given and all(g is not None for g in given) else None
        return resize(em, x, mode, use, align)
    return fn


for _mode, _sp, _packet in (("nearest", 1, "upsample_nearest1d"),
                            ("nearest", 2, "upsample_nearest2d"),
                            ("nearest", 3, "upsample_nearest3d"),
                            ("nearest-exact", 1, "_upsample_nearest_exact1d"),
                            ("nearest-exact", 2, "_upsample_nearest_exact2d"),
                            ("nearest-exact", 3, "_upsample_nearest_exact3d"),
                            ("linear", 1, "upsample_linear1d"),
                            ("bilinear", 2, "upsample_bilinear2d"),
                            ("trilinear", 3, "upsample_trilinear3d"),
                            ("bicubic", 2, "upsample_bicubic2d")):
    _aten_fn(_op(_packet, "vec"))(_upsample(_mode, _sp, True))
    _aten_fn(_op(_packet, "default"))(_upsample(_mode, _sp, False))


# -- grid_sample ------------------------------------------------------------------------------


@_aten_fn(aten.grid_sampler_2d.default, _op("grid_sampler"))
def _grid_sampler_2d(em: Emitter, a: Args) -> Value:
    """torch's grid_sampler_2d, bilinear or nearest, zeros or border padding: each grid point
    (x, y) in [-1, 1] maps to input pixel coordinates (align_corners: the corner pixels'
    centres, else their outer edges), then the corner pixels are gathered and weighted
    (bilinear) or the nearest one (round half to even) picked; pixels outside the input
    count 0 (zeros) or the point is first clamped into the input (border)."""
    x, grid = em.value(a["input"]), em.value(a["grid"])
    mode, padding = int(a["interpolation_mode"]), int(a["padding_mode"])
    if mode not in (0, 1) or padding not in (0, 1) or em.rank(x) != 4:
        raise Unsupported(f"grid_sampler_2d interpolation {mode}, padding {padding}")
    align = bool(a["align_corners"])
    n, c, h, w = em.static_shape(x)
    _, ho, wo, _ = em.static_shape(grid)
    dtype = em.type(x).dtype

    def k(v: float) -> Value:
        return em.scalar(v, dtype)

    def source(axis: int, size: int) -> Value:
        g = em.op("squeeze", [em.op("slice", [grid], starts=(axis,), ends=(axis + 1,),
                                    axes=(3,))], axes=(3,))  # (n, ho, wo)
        if align:
            s = em.op("mul", [em.op("div", [em.op("add", [g, k(1.0)]), k(2.0)]), k(size - 1)])
        else:
            s = em.op("div", [em.op("sub", [em.op("mul", [em.op("add", [g, k(1.0)]), k(size)]),
                                            k(1.0)]), k(2.0)])
        if padding == 1:
            s = em.op("clip", [s], min=0.0, max=float(size - 1))
        return s

    ix, iy = source(0, w), source(1, h)
    flat = em.op("reshape", [x], shape=(n, c, h * w))

    def pixel(px: Value, py: Value) -> Value:
        """input[n, :, py, px] (n, c, ho, wo), 0 where (px, py) lies outside."""
        inside = em.op("logical_and", [
            em.op("logical_and", [em.op("greater_equal", [px, k(0.0)]),
                                  em.op("less_equal", [px, k(w - 1)])]),
            em.op("logical_and", [em.op("greater_equal", [py, k(0.0)]),
                                  em.op("less_equal", [py, k(h - 1)])])])
        index = em.op("add", [em.op("mul", [em.op("clip", [py], min=0.0, max=float(h - 1)),
                                            k(w)]),
                              em.op("clip", [px], min=0.0, max=float(w - 1))])
        index = em.op("reshape", [em.cast(index, DType.INT64)], shape=(n, 1, ho * wo))
        picked = em.op("gather_elements", [flat, em.op("expand", [index],
                                                       shape=(n, c, ho * wo))], axis=2)
        picked = em.op("reshape", [picked], shape=(n, c, ho, wo))
        return em.op("where", [em.op("unsqueeze", [inside], axes=(1,)), picked, k(0.0)])

    if mode == 1:  # nearest
        return pixel(em.op("round", [ix]), em.op("round", [iy]))
    x0, y0 = em.op("floor", [ix]), em.op("floor", [iy])
    x1, y1 = em.op("add", [x0, k(1.0)]), em.op("add", [y0, k(1.0)])
    total: Value | None = None
    for px, py, wx, wy in ((x0, y0, em.op("sub", [x1, ix]), em.op("sub", [y1, iy])),
                           (x1, y0, em.op("sub", [ix, x0]), em.op("sub", [y1, iy])),
                           (x0, y1, em.op("sub", [x1, ix]), em.op("sub", [iy, y0])),
                           (x1, y1, em.op("sub", [ix, x0]), em.op("sub", [iy, y0]))):
        weight = em.op("unsqueeze", [em.op("mul", [wx, wy])], axes=(1,))
        term = em.op("mul", [pixel(px, py), weight])
        total = term if total is None else em.op("add", [total, term])
    assert total is not None
    return total


# -- anti-aliased bilinear resize ---------------------------------------------------------------


def _triangle(x: np.float32) -> np.float32:
    """The linear (bilinear) antialiasing filter."""
    return max(np.float32(1.0) - abs(x), np.float32(0.0))


def _keys_cubic(x: np.float32) -> np.float32:
    """The bicubic antialiasing filter: Keys' cubic convolution with a = -0.5, as ATen's
    ``HelperInterpCubic::aa_filter`` (float32)."""
    f, a = np.float32, np.float32(-0.5)
    x = abs(x)
    if x < f(1.0):
        return ((a + f(2.0)) * x - (a + f(3.0))) * x * x + f(1.0)
    if x < f(2.0):
        return ((a * x - f(5.0) * a) * x + f(8.0) * a) * x - f(4.0) * a
    return f(0.0)


def _aa_taps(in_size: int, out_size: int, align_corners: bool,
             scale_arg: float | None, filter_fn: Callable[[np.float32], np.float32] = _triangle,
             reach: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ATen's antialiased weights along one dim, in float32 as its CPU kernel computes
    them: for output i, a window centred on scale * (i + 0.5) of half-width `support`
    (`reach` - 1 for linear, 2 for cubic - times the scale when downsampling), filter
    weights normalised to sum 1. Returns the input indices (out, taps), the weights and
    which taps are in the window."""
    f = np.float32
    if align_corners:
        scale = f((in_size - 1) / (out_size - 1)) if out_size > 1 else f(0)
    else:
        scale = f(1.0 / scale_arg) if scale_arg and scale_arg > 0 else f(in_size / out_size)
    support = scale * f(reach) if scale >= 1 else f(reach)
    taps = int(np.ceil(support)) * 2 + 1
    invscale = f(1.0) / scale if scale >= 1 else f(1.0)
    index = np.zeros((out_size, taps), np.int64)
    weight = np.zeros((out_size, taps), np.float32)
    used = np.zeros((out_size, taps), bool)
    for i in range(out_size):
        center = scale * f(i + 0.5)
        lo = max(int(center - support + f(0.5)), 0)
        size = min(max(min(int(center + support + f(0.5)), in_size) - lo, 0), taps)
        w = np.array([filter_fn((f(j + lo) - center + f(0.5)) * invscale)
                      for j in range(size)], np.float32)
        total = w.sum(dtype=np.float32)
        if total != 0:
            w = w / total
        index[i, :size] = np.arange(lo, lo + size)
        weight[i, :size] = w
        used[i, :size] = True
    return index, weight, used


def _resample_axis(em: Emitter, x: Value, axis: int, taps: tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]) -> Value:
    """Each output position along `axis` as the weighted sum of its taps (unused taps add
    nothing, not even 0 * inf)."""
    index, weight, used = taps
    dtype = em.type(x).dtype
    picked = em.op("gather", [x, em.const(index, DType.INT64)], axis=axis)  # axis -> (o, t)
    rank = em.rank(picked)
    shape = [1] * rank
    shape[axis], shape[axis + 1] = index.shape
    w = em.const(weight.reshape(shape).astype(dtype.numpy), dtype)
    terms = em.op("where", [em.const(used.reshape(shape)), em.op("mul", [picked, w]),
                            em.scalar(0.0, dtype)])
    return em.op("reduce_sum", [terms], axes=(axis + 1,), keepdims=False)


def _upsample_aa(kind: str, filter_fn: Callable[[np.float32], np.float32],
                 reach: float) -> AtenFn:
    def fn(em: Emitter, a: Args) -> Value:
        x = em.value(a["input"] if "input" in a else a["self"])
        if em.rank(x) != 4:
            raise Unsupported(f"antialiased {kind} resize of a tensor that is not 4-d")
        _, _, h, w = em.static_shape(x)
        align = bool(a["align_corners"])
        if a.get("output_size") is not None:
            out_h, out_w = (int(v) for v in a["output_size"])
            scales_h, scales_w = a.get("scales_h"), a.get("scales_w")
        else:  # .vec: scale factors only
            scales_h, scales_w = (float(v) for v in a["scale_factors"])
            out_h, out_w = int(h * scales_h), int(w * scales_w)
        taps_w = _aa_taps(w, out_w, align, scales_w, filter_fn, reach)
        taps_h = _aa_taps(h, out_h, align, scales_h, filter_fn, reach)
        dtype = em.type(x).dtype
        if dtype.is_float:
            return _resample_axis(em, _resample_axis(em, x, 3, taps_w), 2, taps_h)
        # uint8 images (the one integer type torch resizes): each pass weighs in float32
        # and rounds half up into 0..255, as ATen's fixed-point uint8 kernel stores its
        # horizontal pass before the vertical one (weighing in uint8 wrapped: 206 off)
        def rounded(v: Value) -> Value:
            v = em.op("floor", [em.op("add", [v, em.scalar(0.5, DType.FLOAT32)])])
            return em.cast(em.op("clip", [v], min=0.0, max=255.0), dtype)
        y = rounded(_resample_axis(em, em.cast(x, DType.FLOAT32), 3, taps_w))
        return rounded(_resample_axis(em, em.cast(y, DType.FLOAT32), 2, taps_h))
    return fn


for _kind, _filter, _reach in (("bilinear", _triangle, 1.0), ("bicubic", _keys_cubic, 2.0)):
    for _overload in ("default", "vec"):
        _aten_fn(_op(f"_upsample_{_kind}2d_aa", _overload))(_upsample_aa(_kind, _filter, _reach))
