"""Complex numbers and FFTs: ATen's `_fft_r2c/_fft_c2c/_fft_c2r` (what torch.export shows
for every torch.fft function), view_as_real/complex, complex, polar, angle, abs of complex
and the conjugate bit (`_conj`, `_neg_view`), onto the ops of irbridge/ops/complex.py."""

from __future__ import annotations

import math
from typing import Any

from irbridge.ir import Value
from irbridge.ops.complex import COMPLEX_OF, NORMALIZATIONS, REAL_OF

from ..lower import Emitter, Unsupported
from ._base import ATEN_FN, Args, _aten_fn, _axis, _op, aten


def _norm(mode: Any) -> str:
    index = int(mode)
    if not 0 <= index < len(NORMALIZATIONS):
        raise Unsupported(f"fft normalization mode {index} is not 0, 1 or 2")
    return NORMALIZATIONS[index]


def _fft_dims(em: Emitter, x: Value, dims: Any) -> tuple[int, ...]:
    rank = em.rank(x)
    return tuple(_axis(int(d), rank) for d in dims)


@_aten_fn(aten._fft_r2c.default)
def _fft_r2c(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("fft_r2c", [x], dims=_fft_dims(em, x, a["dim"]),
                 normalization=_norm(a["normalization"]), onesided=bool(a["onesided"]))


@_aten_fn(aten._fft_c2c.default)
def _fft_c2c(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("fft_c2c", [x], dims=_fft_dims(em, x, a["dim"]),
                 normalization=_norm(a["normalization"]), forward=bool(a["forward"]))


@_aten_fn(aten._fft_c2r.default)
def _fft_c2r(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("fft_c2r", [x], dims=_fft_dims(em, x, a["dim"]),
                 normalization=_norm(a["normalization"]),
                 last_dim_size=int(a["last_dim_size"]))


@_aten_fn(aten.view_as_real.default)
def _view_as_real(em: Emitter, a: Args) -> Value:
    return em.op("view_as_real", [em.value(a["self"])])


@_aten_fn(aten.view_as_complex.default)
def _view_as_complex(em: Emitter, a: Args) -> Value:
    return em.op("view_as_complex", [em.value(a["self"])])


@_aten_fn(aten.complex.default)
def _complex(em: Emitter, a: Args) -> Value:
    return em.op("complex", [em.value(a["real"]), em.value(a["imag"])])


@_aten_fn(aten.polar.default)
def _polar(em: Emitter, a: Args) -> Value:
    return em.op("polar", [em.value(a["abs"]), em.value(a["angle"])])


def _is_complex(em: Emitter, x: Value) -> bool:
    return em.type(x).dtype in REAL_OF


@_aten_fn(aten.real.default, aten.imag.default)
def _real_imag(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    name = "imag" if a["__op__"] is aten.imag.default else "real"
    if not _is_complex(em, x):
        if name == "imag":
            raise Unsupported("imag of a real tensor")
        return x
    return em.op(name, [x])


@_aten_fn(aten.angle.default)
def _angle(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    if not _is_complex(em, x):  # torch: pi where x < 0, else 0; NaN stays NaN
        out = em.out_dtype()
        x = em.cast(x, out)
        zero, pi = em.scalar(0.0, out), em.scalar(math.pi, out)
        y = em.op("where", [em.op("less", [x, zero]), pi, zero])
        return em.op("where", [em.op("isnan", [x]), x, y])
    return em.op("angle", [x])


# `_conj` sets the conjugate bit: for complex tensors the value is the conjugate (the
# elementwise family maps it to a no-op, exact only for real tensors); `_neg_view` is the
# negation the conjugate bit leaves on imaginary parts.
_PREVIOUS = {op: ATEN_FN.get(op) for op in (aten.abs.default, _op("_conj"))}


@_aten_fn(_op("_conj"), aten.conj_physical.default, _op("_conj_physical"))
def _conj(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    return em.op("conj", [x]) if _is_complex(em, x) else x


@_aten_fn(aten.abs.default)
def _abs(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    if _is_complex(em, x):
        return em.op("complex_abs", [x])
    previous = _PREVIOUS[aten.abs.default]
    if previous is None:
        return em.op("abs", [x])
    return previous(em, a)


@_aten_fn(_op("_neg_view"))
def _neg_view(em: Emitter, a: Args) -> Value:
    x = em.value(a["self"])
    if _is_complex(em, x):
        raise Unsupported("_neg_view of a complex tensor")
    return em.op("neg", [x])


__all__ = ["COMPLEX_OF"]
