"""Complex numbers and the FFT family.

Plumbing between real and complex tensors (`complex`, `real`, `imag`, `view_as_real`,
`view_as_complex`, `polar`), complex arithmetic that changes the element type (`conj`,
`complex_abs`, `angle`) and discrete Fourier transforms with ATen's `_fft_*` semantics:

* `fft_r2c`  real -> complex forward transform over `dims`; `onesided` keeps only the
  n // 2 + 1 non-redundant bins of the last transformed dim (numpy's rfftn);
* `fft_c2c`  complex -> complex, forward (e^-2pi i kn/N) or inverse (e^+2pi i kn/N);
* `fft_c2r`  complex (one-sided, Hermitian) -> real inverse transform; the last
  transformed dim's output length is `last_dim_size` (numpy's irfftn with that size).

`normalization`: "none" (no scaling), "by_root_n" (1/sqrt(N)) or "by_n" (1/N), N the
product of the transformed signal lengths -- ATen's fft_norm_mode 0 / 1 / 2. No transform
scales implicitly: an inverse DFT is `fft_c2c(forward=False, normalization="by_n")`.

Cost: 5 N log2 N real FLOPs per complex transform of length N (the usual convention for
radix-2 FFTs, used by FFTW's benchmarks); a multi-dim transform costs the sum of its 1-D
passes, each batch of lines counted once. Real-input / real-output transforms count half.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import TensorType
from irbridge.ops._shapes import broadcast_shapes
from irbridge.ops.registry import (
    AttrKind,
    Category,
    Flops,
    OpContext,
    RefContext,
    attr,
    define,
    inputs,
)

Arrays = list[np.ndarray | None]

COMPLEX_OF = {DType.FLOAT32: DType.COMPLEX64, DType.FLOAT64: DType.COMPLEX128}
REAL_OF = {v: k for k, v in COMPLEX_OF.items()}
NORMALIZATIONS = ("none", "by_root_n", "by_n")


def _complex_input(ctx: OpContext, index: int = 0) -> TensorType:
    t = ctx.input(index)
    if t.dtype not in REAL_OF:
        raise ctx.fail(f"input {index} must be complex64 or complex128, got {t}")
    return t


def _real_input(ctx: OpContext, index: int = 0) -> TensorType:
    t = ctx.input(index)
    if t.dtype not in COMPLEX_OF:
        raise ctx.fail(f"input {index} must be float32 or float64, got {t}")
    return t


def _known_shape(ctx: OpContext, t: TensorType) -> tuple[Any, ...]:
    if t.shape is None:
        raise ctx.fail(f"input rank must be known, got {t}")
    return tuple(t.shape)


def _per_element(factor: int) -> Callable[[OpContext], Flops]:
    def cost(ctx: OpContext) -> Flops:
        return Flops(other=factor * ctx.out_numel())
    return cost


def _out_dtype(ctx: RefContext, fallback: np.dtype) -> np.dtype:
    out = ctx.output_types[0]
    return out.dtype.numpy if out is not None else fallback


def _ref1(fn: Callable[[np.ndarray], np.ndarray]
          ) -> Callable[[Arrays, dict[str, Any], RefContext], list[np.ndarray]]:
    def reference(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
        x = xs[0]
        assert x is not None
        y = np.asarray(fn(x))
        return [y.astype(_out_dtype(ctx, y.dtype), copy=False)]
    return reference


def _ref2(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
          ) -> Callable[[Arrays, dict[str, Any], RefContext], list[np.ndarray]]:
    def reference(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
        a, b = xs[0], xs[1]
        assert a is not None and b is not None
        y = np.asarray(fn(a.astype(np.float64), b.astype(np.float64)))
        return [y.astype(_out_dtype(ctx, y.dtype), copy=False)]
    return reference


# -- plumbing -----------------------------------------------------------------------------


def _infer_pair(ctx: OpContext) -> list[TensorType]:
    a, b = _real_input(ctx, 0), _real_input(ctx, 1)
    if a.dtype != b.dtype:
        raise ctx.fail(f"inputs must have one dtype, got {a.dtype.short} and {b.dtype.short}")
    shape = broadcast_shapes([a.shape, b.shape], ctx.where or ctx.op)
    return [TensorType(COMPLEX_OF[a.dtype], shape)]


define("complex", Category.ELEMENTWISE, inputs=inputs("real", "imag"), infer=_infer_pair,
       cost=_per_element(0), cost_doc="0 (a data movement)",
       reference=_ref2(lambda re, im: re + 1j * im), broadcast=True,
       doc="The complex number real + i * imag (float32 -> complex64, float64 -> complex128); "
           "numpy-style broadcasting.")
define("polar", Category.ELEMENTWISE, inputs=inputs("abs", "angle"), infer=_infer_pair,
       cost=_per_element(4), cost_doc="4 per output element (cos, sin, two products)",
       reference=_ref2(lambda r, th: r * np.cos(th) + 1j * (r * np.sin(th))), broadcast=True,
       doc="The complex number abs * (cos(angle) + i sin(angle)); numpy-style broadcasting.")


def _infer_to_real(ctx: OpContext) -> list[TensorType]:
    t = _complex_input(ctx)
    return [TensorType(REAL_OF[t.dtype], t.shape)]


def _infer_same_complex(ctx: OpContext) -> list[TensorType]:
    return [_complex_input(ctx)]


define("real", Category.ELEMENTWISE, inputs=inputs("x"), infer=_infer_to_real,
       cost=_per_element(0), cost_doc="0 (a data movement)", reference=_ref1(np.real),
       doc="Real part of a complex tensor (complex64 -> float32, complex128 -> float64).")
define("imag", Category.ELEMENTWISE, inputs=inputs("x"), infer=_infer_to_real,
       cost=_per_element(0), cost_doc="0 (a data movement)", reference=_ref1(np.imag),
       doc="Imaginary part of a complex tensor (complex64 -> float32, complex128 -> float64).")
define("conj", Category.ELEMENTWISE, inputs=inputs("x"), infer=_infer_same_complex,
       cost=_per_element(1), cost_doc="1 per output element (a sign flip)",
       reference=_ref1(np.conj), doc="Complex conjugate: real - i * imag.")
define("complex_abs", Category.ELEMENTWISE, inputs=inputs("x"), infer=_infer_to_real,
       cost=_per_element(4), cost_doc="4 per output element (two squares, a sum, a root)",
       reference=_ref1(np.abs),
       doc="Modulus sqrt(real^2 + imag^2) of a complex tensor, in the real dtype.")
define("angle", Category.ELEMENTWISE, inputs=inputs("x"), infer=_infer_to_real,
       cost=_per_element(1), cost_doc="1 per output element (an atan2)",
       reference=_ref1(np.angle),
       doc="Argument atan2(imag, real) of a complex tensor in (-pi, pi], in the real dtype.")


def _infer_view_as_real(ctx: OpContext) -> list[TensorType]:
    t = _complex_input(ctx)
    return [TensorType(REAL_OF[t.dtype], (*_known_shape(ctx, t), 2))]


def _infer_view_as_complex(ctx: OpContext) -> list[TensorType]:
    t = _real_input(ctx)
    shape = _known_shape(ctx, t)
    if not shape or shape[-1] != 2:
        raise ctx.fail(f"the last dim must be 2 (real, imag), got {t}")
    return [TensorType(COMPLEX_OF[t.dtype], shape[:-1])]


def _as_complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1]


define("view_as_real", Category.DATA_MOVEMENT, inputs=inputs("x"), infer=_infer_view_as_real,
       cost=_per_element(0), cost_doc="0 (a data movement)",
       reference=_ref1(lambda x: np.stack([x.real, x.imag], axis=-1)),
       doc="A complex tensor as real numbers: shape [..., 2] holding (real, imag).")
define("view_as_complex", Category.DATA_MOVEMENT, inputs=inputs("x"), infer=_infer_view_as_complex,
       cost=_per_element(0), cost_doc="0 (a data movement)", reference=_ref1(_as_complex),
       doc="Real pairs [..., 2] (real, imag) read as one complex tensor of shape [...].")


# -- FFTs ---------------------------------------------------------------------------------


def _dims(ctx: OpContext, rank: int) -> tuple[int, ...]:
    dims = tuple(int(d) for d in ctx.attrs["dims"])
    if not dims:
        raise ctx.fail("dims must name at least one dim")
    norm = []
    for d in dims:
        if not -rank <= d < rank:
            raise ctx.fail(f"dim {d} out of range for rank {rank}")
        norm.append(d % rank)
    if len(set(norm)) != len(norm):
        raise ctx.fail(f"dims {list(dims)} repeat a dim")
    return tuple(norm)


def _static_len(ctx: OpContext, t: TensorType, d: int) -> int:
    n = _known_shape(ctx, t)[d]
    if not isinstance(n, int):
        raise ctx.fail(f"transformed dim {d} must have a static size, got {t}")
    if n < 1:
        raise ctx.fail(f"transformed dim {d} is empty ({t})")
    return n


def _infer_r2c(ctx: OpContext) -> list[TensorType]:
    t = _real_input(ctx)
    shape = list(_known_shape(ctx, t))
    dims = _dims(ctx, len(shape))
    for d in dims:
        _static_len(ctx, t, d)
    if ctx.attrs["onesided"]:
        shape[dims[-1]] = _static_len(ctx, t, dims[-1]) // 2 + 1
    return [TensorType(COMPLEX_OF[t.dtype], tuple(shape))]


def _infer_c2c(ctx: OpContext) -> list[TensorType]:
    t = _complex_input(ctx)
    for d in _dims(ctx, len(_known_shape(ctx, t))):
        _static_len(ctx, t, d)
    return [t]


def _infer_c2r(ctx: OpContext) -> list[TensorType]:
    t = _complex_input(ctx)
    shape: list[Any] = list(_known_shape(ctx, t))
    dims = _dims(ctx, len(shape))
    for d in dims:
        _static_len(ctx, t, d)
    last = int(ctx.attrs["last_dim_size"])
    if last < 1:
        raise ctx.fail(f"last_dim_size must be positive, got {last}")
    shape[dims[-1]] = last
    return [TensorType(REAL_OF[t.dtype], tuple(shape))]


def _fft_flops(signal: TensorType | None, dims: tuple[int, ...], half: bool) -> int:
    """Sum over the transformed dims of (lines) * 5 N log2 N, N that dim's signal length."""
    if signal is None or not signal.is_static:
        return 0
    shape = signal.static_shape()
    total = math.prod(shape)
    flops = 0.0
    for d in dims:
        n = shape[d]
        if n > 1:
            flops += (total // n) * 5 * n * math.log2(n)
    return int(flops / 2 if half else flops)


def _cost_r2c(ctx: OpContext) -> Flops:
    t = ctx.input(0)
    return Flops(other=_fft_flops(t, _dims(ctx, len(_known_shape(ctx, t))), half=True))


def _cost_c2c(ctx: OpContext) -> Flops:
    t = ctx.input(0)
    return Flops(other=_fft_flops(t, _dims(ctx, len(_known_shape(ctx, t))), half=False))


def _cost_c2r(ctx: OpContext) -> Flops:
    out = ctx.output_types[0] if ctx.output_types else None
    t = ctx.input(0)
    return Flops(other=_fft_flops(out, _dims(ctx, len(_known_shape(ctx, t))), half=True))


def _scale(y: np.ndarray, n: int, mode: str) -> np.ndarray:
    if mode == "by_root_n":
        return y / math.sqrt(n)
    if mode == "by_n":
        return y / n
    return y


def _ref_dims(x: np.ndarray, attrs: dict[str, Any]) -> list[int]:
    return [int(d) % x.ndim for d in attrs["dims"]]


def _ref_r2c(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    dims = _ref_dims(x, attrs)
    n = math.prod(x.shape[d] for d in dims)
    x64 = x.astype(np.float64)
    y = np.fft.rfftn(x64, axes=dims) if attrs["onesided"] else np.fft.fftn(x64, axes=dims)
    return [_scale(y, n, attrs["normalization"]).astype(_out_dtype(ctx, np.dtype(np.complex128)))]


def _ref_c2c(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    dims = _ref_dims(x, attrs)
    n = math.prod(x.shape[d] for d in dims)
    x128 = x.astype(np.complex128)
    # numpy's ifftn divides by n: undo it, the normalization mode decides
    y = np.fft.fftn(x128, axes=dims) if attrs["forward"] else np.fft.ifftn(x128, axes=dims) * n
    return [_scale(y, n, attrs["normalization"]).astype(x.dtype)]


def _ref_c2r(xs: Arrays, attrs: dict[str, Any], ctx: RefContext) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    dims = _ref_dims(x, attrs)
    last = int(attrs["last_dim_size"])
    sizes = [x.shape[d] for d in dims[:-1]] + [last]
    n = math.prod(sizes)
    y = np.fft.irfftn(x.astype(np.complex128), s=sizes, axes=dims) * n
    return [_scale(y, n, attrs["normalization"]).astype(
        _out_dtype(ctx, np.dtype(REAL_OF[DType.from_numpy(x.dtype)].numpy)))]


_DIMS = attr("dims", AttrKind.INTS, doc="the transformed dims (the last one is the halved "
                                        "one of one-sided transforms)")
_NORM = attr("normalization", AttrKind.STRING, "none", choices=NORMALIZATIONS,
             doc="none, by_root_n (1/sqrt(N)) or by_n (1/N), N the transformed size")
_FFT_COST = ("5 N log2 N real FLOPs per 1-D complex transform of length N (the usual "
             "radix-2 convention), summed over the transformed dims and the lines of each")

define("fft_r2c", Category.OTHER,
       inputs=inputs("x"), infer=_infer_r2c, cost=_cost_r2c, reference=_ref_r2c,
       attrs=(_DIMS, _NORM, attr("onesided", AttrKind.BOOL, True,
                                 doc="keep only the n // 2 + 1 bins of the last dim")),
       cost_doc=_FFT_COST + "; half of that for a real input",
       doc="Forward DFT of a real tensor over `dims` (numpy's rfftn when onesided, fftn "
           "otherwise), scaled by `normalization`.")
define("fft_c2c", Category.OTHER,
       inputs=inputs("x"), infer=_infer_c2c, cost=_cost_c2c, reference=_ref_c2c,
       attrs=(_DIMS, _NORM, attr("forward", AttrKind.BOOL, True,
                                 doc="forward (e^-i) or inverse (e^+i) transform")),
       cost_doc=_FFT_COST,
       doc="DFT of a complex tensor over `dims`, forward or inverse (no implicit 1/N: the "
           "inverse DFT is forward=false with normalization by_n).")
define("fft_c2r", Category.OTHER,
       inputs=inputs("x"), infer=_infer_c2r, cost=_cost_c2r, reference=_ref_c2r,
       attrs=(_DIMS, _NORM, attr("last_dim_size", AttrKind.INT,
                                 doc="output length of the last transformed dim")),
       cost_doc=_FFT_COST + " (N from the real output); half of that for a real output",
       doc="Inverse DFT of a one-sided Hermitian complex tensor to a real one over `dims` "
           "(numpy's irfftn with the last size `last_dim_size`, times N), scaled by "
           "`normalization`.")
