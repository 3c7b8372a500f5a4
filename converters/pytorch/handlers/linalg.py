"""Linear algebra: exact ATen overloads -> the registry's `linalg` ops (irbridge/ops/linalg.py).

torch.export keeps some `linalg_*` composite overloads (aten.linalg_inv.default, ...) and
decomposes others into LAPACK-shaped forms with extra outputs:

- `_linalg_check_errors(info, ...)` raises in eager when a factorisation's `info` is nonzero
  (a singular or indefinite matrix) and returns nothing: it lowers to no IR node. The IR
  does not raise on such input; the ops' references (numpy/scipy) raise or give inf/nan.
- The `info` outputs of `_linalg_solve_ex`, `linalg_inv_ex`, `linalg_cholesky_ex`,
  `linalg_lu_factor_ex` and `linalg_ldl_factor_ex` are NOT computed: they lower to int32
  zeros (what eager gives for every input these ops succeed on). A model that reads `info`
  to detect failure sees success.
- `_linalg_solve_ex`'s and `_linalg_slogdet`'s LU and pivots (kept for autograd) lower to a
  `lu_factor` node, emitted only if something reads them.
- Empty placeholder outputs (Q of qr mode 'r', U and Vh of svd without compute_uv, the
  eigenvectors of eigvalsh) lower to empty constants, emitted only if read.

pinv, polar, matrix_sqrth, cholesky_solve and cholesky_inverse have no registry op of their
own: they lower to svd / eigh / triangular_solve and elementwise ops here (the sign-free
products of the factors).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Value

from ..lower import Deferred, Emitter, Unsupported
from ._base import Args, _aten_fn, _expand_to, _op, aten


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


def _mT(em: Emitter, x: Value) -> Value:
    rank = em.rank(x)
    return em.op("permute", [x], perm=(*tuple(range(rank - 2)), rank - 1, rank - 2))


def _ints(shape: Any, what: str) -> tuple[int, ...]:
    dims = tuple(d for d in shape if isinstance(d, int))
    if len(dims) != len(shape):
        raise Unsupported(f"{what} with a symbolic shape")
    return dims


def _empty(em: Emitter, dtype: DType) -> Deferred:
    """torch's empty placeholder output (shape [0]), emitted only if something reads it."""
    return Deferred(lambda: em.const(np.zeros((0,), dtype.numpy), dtype))


def _info(em: Emitter, index: int) -> Deferred:
    """An `info` output: int32 zeros of eager's shape (not computed; module doc)."""
    def zeros() -> Value:
        return em.op("full", [], shape=_ints(em.out_shape(index), "an info output"),
                     value=0.0, dtype=DType.INT32)
    return Deferred(zeros)


def _lu_parts(em: Emitter, x: Value) -> tuple[Deferred, Deferred]:
    """Deferred (LU, pivots) of x from one lu_factor node, emitted when either is read."""
    made: list[list[Value]] = []

    def part(i: int) -> Value:
        if not made:
            made.append(em.ops("lu_factor", [x]))
        return made[0][i]
    return Deferred(lambda: part(0)), Deferred(lambda: part(1))


def _batch_to(em: Emitter, x: Value, batch: tuple[Any, ...]) -> Value:
    """x broadcast to the leading dims `batch` (its last two dims kept)."""
    shape = em.shape(x)
    if tuple(shape[:-2]) == batch:
        return x
    if not all(isinstance(d, int) for d in batch):
        raise Unsupported("broadcast of symbolic batch dims")
    return _expand_to(em, x, [*list(batch), -1, -1])


def _out_batch(em: Emitter) -> tuple[Any, ...]:
    return tuple(em.out_shape(0)[:-2])


def _solve_any(em: Emitter, a: Args) -> Value:
    """A X = B, or X A = B (left=False: A^T X^T = B^T), batch dims broadcast; a vector B
    (B.ndim == 1, or A.ndim - 1 with A's batch dims: torch's rule; left only) is one
    column."""
    x, b = _float(em, a, "A"), em.cast(em.value(a["B"]), em.out_dtype())
    left = bool(a["left"])
    rank_a, rank_b = em.rank(x), em.rank(b)
    vector = rank_b == 1 or (rank_b == rank_a - 1 and tuple(em.shape(b)[:-1])
                             == tuple(em.shape(x)[:-2]))
    if vector and not left:
        raise Unsupported("linalg.solve with left=False and a vector B (torch refuses it)")
    if not left:
        x = _mT(em, x)
    if vector:
        b = em.op("unsqueeze", [b], axes=(-1,))
    elif not left:
        b = _mT(em, b)
    out_shape = em.out_shape(0)
    batch = tuple(out_shape[:-1] if vector else out_shape[:-2])
    y = em.op("solve", [_batch_to(em, x, batch), _batch_to(em, b, batch)])
    if vector:
        return em.op("squeeze", [y], axes=(-1,))
    return y if left else _mT(em, y)


@_aten_fn(aten.linalg_solve.default)
def _solve(em: Emitter, a: Args) -> Value:
    return _solve_any(em, a)


@_aten_fn(aten._linalg_solve_ex.default)
def _solve_ex(em: Emitter, a: Args) -> Any:
    lu, pivots = _lu_parts(em, _float(em, a, "A"))
    return _solve_any(em, a), lu, pivots, _info(em, 3)


@_aten_fn(aten._linalg_check_errors.default)
def _check_errors(em: Emitter, a: Args) -> None:
    return None  # raises in eager only; module doc


@_aten_fn(aten.linalg_inv_ex.default)
def _inv_ex(em: Emitter, a: Args) -> Any:
    return em.op("inverse", [_float(em, a, "A")]), _info(em, 1)


@_aten_fn(aten.linalg_cholesky_ex.default)
def _cholesky_ex(em: Emitter, a: Args) -> Any:
    y = em.op("cholesky", [_float(em, a, "self")], upper=bool(a["upper"]))
    return y, _info(em, 1)


@_aten_fn(aten._linalg_slogdet.default)
def _slogdet(em: Emitter, a: Args) -> Any:
    x = _float(em, a, "A")
    sign, logabs = em.ops("slogdet", [x])
    lu, pivots = _lu_parts(em, x)
    return sign, logabs, lu, pivots


@_aten_fn(aten._linalg_svd.default)
def _svd(em: Emitter, a: Args) -> Any:
    x = _float(em, a, "A")
    if not bool(a["compute_uv"]):
        dtype = em.type(x).dtype
        return _empty(em, dtype), em.op("svdvals", [x]), _empty(em, dtype)
    u, s, vh = em.ops("svd", [x], full_matrices=bool(a["full_matrices"]))
    return u, s, vh


@_aten_fn(aten._linalg_eigh.default)
def _eigh(em: Emitter, a: Args) -> Any:
    x = _float(em, a, "A")
    upper = str(a["UPLO"]).upper() == "U"
    if not bool(a["compute_v"]):
        return em.op("eigvalsh", [x], upper=upper), _empty(em, em.type(x).dtype)
    w, v = em.ops("eigh", [x], upper=upper)
    return w, v


@_aten_fn(aten.linalg_qr.default)
def _qr(em: Emitter, a: Args) -> Any:
    x = _float(em, a, "A")
    mode = str(a["mode"])
    if mode not in ("reduced", "complete", "r"):
        raise Unsupported(f"linalg.qr mode {mode!r}")
    q, r = em.ops("qr", [x], complete=mode == "complete")
    return (_empty(em, em.type(x).dtype) if mode == "r" else q), r


def _no_pivot(a: Args, what: str) -> None:
    if not bool(a.get("pivot", True)):
        raise Unsupported(f"{what} with pivot=False")


@_aten_fn(aten.linalg_lu_factor_ex.default)
def _lu_factor_ex(em: Emitter, a: Args) -> Any:
    _no_pivot(a, "linalg.lu_factor_ex")
    lu, pivots = em.ops("lu_factor", [_float(em, a, "A")])
    return lu, pivots, _info(em, 2)


@_aten_fn(aten.linalg_lu.default)
def _lu(em: Emitter, a: Args) -> Any:
    _no_pivot(a, "linalg.lu")
    lu, pivots = em.ops("lu_factor", [_float(em, a, "A")])
    p, lower, upper = em.ops("lu_unpack", [lu, pivots])
    return p, lower, upper


@_aten_fn(aten.lu_unpack.default)
def _lu_unpack(em: Emitter, a: Args) -> Any:
    lu, pivots = _float(em, a, "LU_data"), em.value(a["LU_pivots"])
    p, lower, upper = em.ops("lu_unpack", [lu, pivots])
    dtype = em.type(lu).dtype
    return (p if bool(a["unpack_pivots"]) else _empty(em, dtype),
            *((lower, upper) if bool(a["unpack_data"]) else (_empty(em, dtype),) * 2))


def _batch_vectors(em: Emitter, v: Value, batch: tuple[Any, ...], what: str) -> Value:
    """A vector per matrix (pivots, tau) broadcast to the leading dims `batch`."""
    if tuple(em.shape(v)[:-1]) == batch:
        return v
    return _expand_to(em, v, [*_ints(batch, what), -1])


def _pivoted_solve(em: Emitter, a: Args, op: str, factor: str, **attrs: Any) -> Value:
    """lu_solve / ldl_solve: the factor, its pivots and B broadcast to one batch."""
    f = _float(em, a, factor)
    b = em.cast(em.value(a["B"]), em.type(f).dtype)
    batch = _out_batch(em)
    pivots = _batch_vectors(em, em.value(a["pivots"]), batch, f"{op}'s pivots")
    return em.op(op, [_batch_to(em, f, batch), pivots, _batch_to(em, b, batch)], **attrs)


@_aten_fn(aten.linalg_lu_solve.default)
def _lu_solve(em: Emitter, a: Args) -> Value:
    return _pivoted_solve(em, a, "lu_solve", "LU", left=bool(a["left"]),
                          adjoint=bool(a["adjoint"]))


def _triangular(em: Emitter, tri: Value, b: Value, *, lower: bool, left: bool = True,
                unit: bool = False, transpose: bool = False) -> Value:
    batch = _out_batch(em)
    return em.op("triangular_solve", [_batch_to(em, tri, batch), _batch_to(em, b, batch)],
                 left_side=left, lower=lower, unit_diagonal=unit,
                 transpose_a="TRANSPOSE" if transpose else "NO_TRANSPOSE")


@_aten_fn(aten.linalg_solve_triangular.default)
def _solve_triangular(em: Emitter, a: Args) -> Value:
    tri = _float(em, a, "self")
    b = em.cast(em.value(a["B"]), em.type(tri).dtype)
    return _triangular(em, tri, b, lower=not bool(a["upper"]), left=bool(a["left"]),
                       unit=bool(a["unitriangular"]))


@_aten_fn(aten.triangular_solve.default)
def _triangular_solve(em: Emitter, a: Args) -> Any:
    b, tri = _float(em, a, "self"), _float(em, a, "A")
    y = _triangular(em, tri, b, lower=not bool(a["upper"]), unit=bool(a["unitriangular"]),
                    transpose=bool(a["transpose"]))
    return y, tri  # cloned_coefficient: A itself


@_aten_fn(aten.cholesky_solve.default)
def _cholesky_solve(em: Emitter, a: Args) -> Value:
    """A X = B with A = L L^T (upper: U^T U): two triangular solves."""
    return _solve_with_cholesky(em, _float(em, a, "input2"), _float(em, a, "self"),
                                bool(a["upper"]))


def _solve_with_cholesky(em: Emitter, factor: Value, b: Value, upper: bool) -> Value:
    """X with A X = B from A's Cholesky factor: L Y = B then L^T X = Y (upper: U^T Y = B
    then U X = Y)."""
    y = _triangular(em, factor, b, lower=not upper, transpose=upper)
    return _triangular(em, factor, y, lower=not upper, transpose=not upper)


@_aten_fn(aten.cholesky_inverse.default)
def _cholesky_inverse(em: Emitter, a: Args) -> Value:
    """(L L^T)^-1 (upper: (U^T U)^-1) as cholesky_solve of the identity."""
    factor = _float(em, a, "self")
    shape = em.static_shape(factor)
    dtype = em.type(factor).dtype
    eye = em.const(np.broadcast_to(np.eye(shape[-1]), shape).astype(dtype.numpy), dtype)
    return _solve_with_cholesky(em, factor, eye, bool(a["upper"]))


@_aten_fn(aten.linalg_matrix_exp.default)
def _matrix_exp(em: Emitter, a: Args) -> Value:
    return em.op("matrix_exp", [_float(em, a, "self")])


@_aten_fn(aten.linalg_pinv.atol_rtol_tensor)
def _pinv(em: Emitter, a: Args) -> Value:
    """torch's linalg_pinv (aten/src/ATen/native/LinearAlgebra.cpp): singular values (or
    |eigenvalues|, hermitian) above max(atol, rtol * largest) are inverted, the others
    zeroed; rtol defaults to eps * max(m, n), or to 0 when a positive atol is given."""
    x = _float(em, a, "self")
    dtype = em.type(x).dtype
    shape = em.static_shape(x)
    m, n = shape[-2], shape[-1]
    if 0 in shape:  # torch returns the empty (n x m) result before factoring
        return em.op("full", [], shape=(*shape[:-2], n, m), value=0.0, dtype=dtype)
    zero = em.scalar(0.0, dtype)
    atol = em.cast(em.value(a["atol"]), dtype) if a["atol"] is not None else zero
    default = em.scalar(float(np.finfo(dtype.numpy).eps) * max(m, n), dtype)
    if a["rtol"] is not None:
        rtol = em.cast(em.value(a["rtol"]), dtype)
    elif a["atol"] is not None:
        rtol = em.op("where", [em.op("greater", [atol, zero]), zero, default])
    else:
        rtol = default
    if bool(a["hermitian"]):
        s, v = em.ops("eigh", [x])
        size = em.op("abs", [s])
        left, right = v, _mT(em, v)
    else:
        u, s, vh = em.ops("svd", [x])
        size = s
        left, right = _mT(em, vh), _mT(em, u)
    largest = em.op("reduce_max", [size], axes=(-1,), keepdims=True)
    tol = em.op("maximum", [em.op("unsqueeze", [atol], axes=(-1,)),
                            em.op("mul", [em.op("unsqueeze", [rtol], axes=(-1,)), largest])])
    inv = em.op("where", [em.op("greater", [size, tol]), em.op("reciprocal", [s]), zero])
    scaled = em.op("mul", [left, em.op("unsqueeze", [inv], axes=(-2,))])
    return em.op("matmul", [scaled, right])


@_aten_fn(_op("linalg_polar"))  # torch 2.14+
def _polar(em: Emitter, a: Args) -> Any:
    """A = U H from the SVD A = W S Vh (m >= n): U = W Vh, H = Vh^T S Vh; both products
    are the same whatever signs the singular vectors have."""
    x = _float(em, a, "A")
    shape = em.static_shape(x)
    if shape[-2] < shape[-1]:
        raise Unsupported("linalg.polar of a wide matrix (m < n)")
    w, s, vh = em.ops("svd", [x])
    v = _mT(em, vh)
    return (em.op("matmul", [w, vh]),
            em.op("matmul", [em.op("mul", [v, em.op("unsqueeze", [s], axes=(-2,))]), vh]))


@_aten_fn(aten.linalg_matrix_sqrth.default)
def _matrix_sqrth(em: Emitter, a: Args) -> Value:
    """V diag(sqrt(w)) V^T from eigh of the lower triangle (sign-free, like polar)."""
    w, v = em.ops("eigh", [_float(em, a, "self")])
    root = em.op("unsqueeze", [em.op("sqrt", [w])], axes=(-2,))
    return em.op("matmul", [em.op("mul", [v, root]), _mT(em, v)])


@_aten_fn(aten.geqrf.default)
def _geqrf(em: Emitter, a: Args) -> Any:
    qr, tau = em.ops("geqrf", [_float(em, a, "self")])
    return qr, tau


@_aten_fn(aten.linalg_householder_product.default)
def _householder_product(em: Emitter, a: Args) -> Value:
    x = _float(em, a, "input")
    tau = em.cast(em.value(a["tau"]), em.type(x).dtype)
    return em.op("householder_product", [x, tau])


@_aten_fn(aten.ormqr.default)
def _ormqr(em: Emitter, a: Args) -> Value:
    x = _float(em, a, "self")
    dtype = em.type(x).dtype
    tau, c = em.cast(em.value(a["input2"]), dtype), em.cast(em.value(a["input3"]), dtype)
    batch = _out_batch(em)
    x, c = _batch_to(em, x, batch), _batch_to(em, c, batch)
    tau = _batch_vectors(em, tau, batch, "ormqr's tau")
    return em.op("ormqr", [x, tau, c], left=bool(a["left"]), transpose=bool(a["transpose"]))


@_aten_fn(aten.linalg_ldl_factor_ex.default)
def _ldl_factor_ex(em: Emitter, a: Args) -> Any:
    ld, pivots = em.ops("ldl_factor", [_float(em, a, "self")])  # hermitian = symmetric (real)
    return ld, pivots, _info(em, 2)


@_aten_fn(aten.linalg_ldl_solve.default)
def _ldl_solve(em: Emitter, a: Args) -> Value:
    return _pivoted_solve(em, a, "ldl_solve", "LD")
