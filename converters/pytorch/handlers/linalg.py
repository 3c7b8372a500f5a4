"""Linear algebra: exact ATen overloads -> the registry's `linalg` ops (irbridge/ops/linalg.py).

torch.export keeps the `linalg_*` composite overloads (aten.linalg_inv.default, ...); the
decomposed forms (`linalg_inv_ex`, `_linalg_det`, `linalg_cholesky_ex`) return extra
LAPACK info / factor outputs that these lowerings cannot produce, so they are not claimed.
"""

from __future__ import annotations

from irbridge.ir import Value

from ..lower import Emitter, Unsupported
from ._base import Args, _aten_fn, aten


def _float(em: Emitter, a: Args, key: str) -> Value:
    x = em.value(a[key])
    return em.cast(x, em.out_dtype())


@_aten_fn(aten.linalg_inv.default, aten.inverse.default)
def _inverse(em: Emitter, a: Args) -> Value:
    return em.op("inverse", [_float(em, a, "A" if "A" in a else "self")])


@_aten_fn(aten.linalg_det.default, aten.det.default)
def _det(em: Emitter, a: Args) -> Value:
    return em.op("det", [_float(em, a, "A" if "A" in a else "self")])


@_aten_fn(aten.linalg_cholesky.default)
def _cholesky(em: Emitter, a: Args) -> Value:
    return em.op("cholesky", [_float(em, a, "self")], upper=bool(a["upper"]))


@_aten_fn(aten.linalg_solve.default)
def _solve(em: Emitter, a: Args) -> Value:
    if not bool(a["left"]):
        raise Unsupported("linalg.solve with left=False")
    x, b = em.value(a["A"]), em.value(a["B"])
    if em.rank(b) != em.rank(x):
        raise Unsupported("linalg.solve with a vector right-hand side")
    return em.op("solve", [x, b])
