"""Linear algebra (issue 13): inverse, determinant, Cholesky factor and linear solve of
square matrices; slogdet, SVD, symmetric eigendecomposition, QR, LU (factor, unpack, solve),
triangular solve and the matrix exponential; all batched over leading dims.

Costs are the usual LAPACK flop counts per n x n matrix (Golub & Van Loan, Matrix
Computations, 4th ed., ch. 3-4), times the batch size, all counted as *other* FLOPs (a
factorisation is not a matmul-like MAC stream):
  cholesky n^3/3; LU (det) 2n^3/3; inverse 2n^3 (LU 2n^3/3 + inverting the factors 4n^3/3);
  solve with k right-hand sides 2n^3/3 + 2n^2 k.
References compute in float64 and round to the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Dim, TensorType, Value
from irbridge.ops._numeric import widen
from irbridge.ops.registry import (
    AttrKind,
    Category,
    Flops,
    LazyDecompositions,
    OpContext,
    RefContext,
    attr,
    define,
    inputs,
)

_d = LazyDecompositions("irbridge.ops._linalg_decomp")

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder

Arrays = list[np.ndarray | None]
Attrs = dict[str, Any]


def _square(ctx: OpContext, index: int = 0) -> TensorType:
    x = ctx.input(index)
    if not x.dtype.is_float:
        raise ctx.fail(f"needs floating-point input, got {x.dtype.short}")
    if x.shape is not None:
        if len(x.shape) < 2:
            raise ctx.fail(f"needs a matrix (rank >= 2), got rank {len(x.shape)}")
        m, n = x.shape[-2], x.shape[-1]
        if isinstance(m, int) and isinstance(n, int) and m != n:
            raise ctx.fail(f"needs square matrices, got {m} x {n}")
    return x


def _static(dims: tuple[Dim, ...] | None) -> list[int] | None:
    if dims is None:
        return None
    static = [d for d in dims if isinstance(d, int)]
    return static if len(static) == len(dims) else None


def _per_matrix(flops: Callable[[int, int], float]) -> Callable[[OpContext], Flops]:
    """Cost: batch x flops(n, k) with n the matrix size and k the last dim of input 1 (or n)."""
    def cost(ctx: OpContext) -> Flops:
        shape = _static(ctx.input(0).shape)
        if shape is None or len(shape) < 2:
            return Flops()
        k = shape[-1]
        if ctx.has_input(1):
            other = _static(ctx.input(1).shape)
            if other is None:
                return Flops()
            k = other[-1]
        return Flops(other=math.prod(shape[:-2]) * round(flops(shape[-1], k)))
    return cost


def _ref(fn: Callable[..., np.ndarray]) -> Callable[[Arrays, Attrs, RefContext], list[np.ndarray]]:
    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        args = [x for x in xs if x is not None]
        dtype = args[0].dtype
        out = fn(*[widen(a).astype(np.float64) for a in args], **attrs)
        return [np.asarray(out).astype(dtype)]
    return reference


def _same_infer(ctx: OpContext) -> list[TensorType]:
    return [_square(ctx)]


def _det_infer(ctx: OpContext) -> list[TensorType]:
    x = _square(ctx)
    return [TensorType(x.dtype, None if x.shape is None else tuple(x.shape[:-2]))]


def _rhs_infer(ctx: OpContext, b_index: int = 1, left: bool = True) -> list[TensorType]:
    """Output type of a solve with square input 0 and right-hand sides input `b_index`
    (same dtype and rank, batch dims equal, B's rows (left) or columns meet A)."""
    a = _square(ctx)
    b = ctx.input(b_index)
    if b.dtype != a.dtype:
        raise ctx.fail(f"a is {a.dtype.short} but b is {b.dtype.short}")
    if a.shape is not None and b.shape is not None:
        if len(b.shape) != len(a.shape):
            raise ctx.fail(f"b must have a's rank {len(a.shape)} (matrix right-hand sides), "
                           f"got rank {len(b.shape)}")
        n, meet = a.shape[-1], b.shape[-2] if left else b.shape[-1]
        if isinstance(n, int) and isinstance(meet, int) and n != meet:
            raise ctx.fail(f"a is {n} x {n} but b has {meet} {'rows' if left else 'columns'}")
        for da, db in zip(a.shape[:-2], b.shape[:-2], strict=True):
            if isinstance(da, int) and isinstance(db, int) and da != db:
                raise ctx.fail(f"batch dims differ: a {list(a.shape)}, b {list(b.shape)}")
    return [b]


def _solve_infer(ctx: OpContext) -> list[TensorType]:
    return _rhs_infer(ctx)


def _cholesky(a: np.ndarray, upper: bool = False) -> np.ndarray:
    """Reads one triangle only, as torch.linalg.cholesky and LAPACK's potrf do: the lower
    one (upper=False) or the upper one (upper=True); the other is ignored, whatever it
    holds."""
    def h(m: np.ndarray) -> np.ndarray:
        return np.swapaxes(m, -1, -2).conj()

    tri = np.triu(a) if upper else np.tril(a)
    strict = np.triu(a, 1) if upper else np.tril(a, -1)
    hermitian = tri + h(strict)
    lower = np.linalg.cholesky(hermitian)
    return h(lower) if upper else lower


define("inverse", Category.LINALG, inputs=inputs("a"), infer=_same_infer,
       cost=_per_matrix(lambda n, k: 2 * n ** 3),
       cost_doc="batch x 2n^3 (LU 2n^3/3 + inverse of the factors 4n^3/3)",
       reference=_ref(np.linalg.inv), decompose=_d.inverse_decompose,
       doc="Inverse of each square matrix in the last two dims (torch.linalg.inv); a singular "
           "matrix gives an error in the reference.")
define("det", Category.LINALG, inputs=inputs("a"), infer=_det_infer,
       cost=_per_matrix(lambda n, k: 2 * n ** 3 / 3),
       cost_doc="batch x 2n^3/3 (LU factorisation)", reference=_ref(np.linalg.det),
       decompose=_d.det_decompose,
       doc="Determinant of each square matrix in the last two dims (torch.linalg.det, ONNX "
           "Det); the output drops those two dims.")
define("cholesky", Category.LINALG, inputs=inputs("a"), infer=_same_infer,
       attrs=(attr("upper", AttrKind.BOOL, False, "return U = L^H instead of L"),),
       cost=_per_matrix(lambda n, k: n ** 3 / 3), cost_doc="batch x n^3/3",
       reference=_ref(_cholesky), decompose=_d.cholesky_decompose,
       doc="Cholesky factor L (A = L L^H) of each symmetric positive-definite matrix in the "
           "last two dims (torch.linalg.cholesky); only the lower triangle of A is read.")
define("solve", Category.LINALG, inputs=inputs("a", "b"), infer=_solve_infer,
       cost=_per_matrix(lambda n, k: 2 * n ** 3 / 3 + 2 * n * n * k),
       cost_doc="batch x (2n^3/3 + 2n^2 k) for k right-hand sides (LU + two triangular solves)",
       reference=_ref(np.linalg.solve), decompose=_d.solve_decompose,
       doc="X with A X = B for each square A (torch.linalg.solve, left=True); B has A's rank "
           "(matrix right-hand sides).")


# -- factorisations beyond LU/Cholesky, triangular solves, LU reuse (issue 13/14) ----------
# Flop counts (LAPACK Working Note 41 / Golub & Van Loan, 4th ed.), per m x n matrix with
# k = min(m, n), l = max(m, n), counting each multiply and each add:
#   LU (getrf)            2mnk - (m+n)k^2 + 2k^3/3           (square: 2n^3/3)
#   QR R (geqrf)          2lk^2 - 2k^3/3                     (m >= n: 2mn^2 - 2n^3/3)
#   QR thin Q (orgqr)     + 2mk^2 - 2k^3/3;  complete Q: + 4m^2k - 4mk^2 + 4k^3/3
#   orgqr, m x n from k reflectors: 4mnk - 2(m+n)k^2 + 4k^3/3
#   ormqr, k reflectors on m x n C: 4mnk - 2nk^2 (left), 4mnk - 2mk^2 (right)
#   SVD values only       4lk^2 - 4k^3/3 (bidiagonalisation; the QR iteration is O(k^2))
#   SVD with U, V         14lk^2 + 8k^3 (G&VL Fig. 8.6.1, thin U); full U: 4l^2k + 8lk^2 + 9k^3
#   eigh values only      4n^3/3 (tridiagonalisation); with vectors 9n^3 (G&VL 8.3)
#   LDL^T (sytrf)         n^3/3 (as Cholesky; pivot search not counted); solve 2n^2 m
#   triangular solve      n^2 m for an n x n triangle and m right-hand sides
#   LU solve              2n^2 m (two triangular solves)
#   matrix_exp            (6 matmuls + one LU solve of the [13/13] Pade approximant,
#                          Higham 2005) = 12n^3 + 2n^3/3 + 2n^3 = 44n^3/3; the squarings
#                          (2n^3 each, as many as log2 of the norm) depend on the data and
#                          are not counted.
# Singular vectors and eigenvectors are unique only up to sign: the references fix the sign
# so that the entry of largest magnitude of each left singular vector (each eigenvector) is
# positive (the first such entry on ties), flipping the matching right singular vector with
# it. LAPACK builds differ in the signs they return (MKL, which torch uses, and OpenBLAS,
# which numpy uses, disagree on about a third of random 5 x 5 matrices), so no
# implementation-defined choice is reproducible; this rule makes the op deterministic.


def _matrix(ctx: OpContext, index: int = 0) -> TensorType:
    x = ctx.input(index)
    if not x.dtype.is_float:
        raise ctx.fail(f"needs floating-point input, got {x.dtype.short}")
    if x.shape is not None and len(x.shape) < 2:
        raise ctx.fail(f"needs a matrix (rank >= 2), got rank {len(x.shape)}")
    return x


def _mk(shape: tuple[Dim, ...]) -> tuple[Dim, Dim, Dim]:
    """(m, n, min(m, n)) of a matrix shape; min is None when either is symbolic."""
    m, n = shape[-2], shape[-1]
    k: Dim = min(m, n) if isinstance(m, int) and isinstance(n, int) else None
    if k is None and (m == 0 or n == 0):
        k = 0
    return m, n, k


def _batched(x: TensorType, *tail: Dim, dtype: Any = None) -> TensorType:
    dt = dtype if dtype is not None else x.dtype
    if x.shape is None:
        return TensorType(dt, None)
    return TensorType(dt, tuple(x.shape[:-2]) + tuple(tail))


def _mn_cost(flops: Callable[[int, int, int], float]) -> Callable[[OpContext], Flops]:
    """Cost: batch x flops(m, n, k) of input 0's m x n matrices."""
    def cost(ctx: OpContext) -> Flops:
        shape = _static(ctx.input(0).shape)
        if shape is None or len(shape) < 2:
            return Flops()
        m, n = shape[-2], shape[-1]
        return Flops(other=math.prod(shape[:-2]) * max(0, round(flops(m, n, min(m, n)))))
    return cost


def _signs(x: np.ndarray) -> np.ndarray:
    """+-1 per column of x (..., r, c): the sign of each column's largest-magnitude entry."""
    if x.shape[-2] == 0:
        return np.ones(x.shape[:-2] + x.shape[-1:], x.dtype)
    peak = np.argmax(np.abs(x), axis=-2)[..., None, :]
    s = np.sign(np.take_along_axis(x, peak, axis=-2))[..., 0, :]
    return np.where(s == 0, 1, s).astype(x.dtype)


def _f64(x: np.ndarray) -> np.ndarray:
    return widen(x).astype(np.float64)


def _slogdet(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    sign, logabs = np.linalg.slogdet(_f64(a))
    return [np.asarray(sign).astype(a.dtype), np.asarray(logabs).astype(a.dtype)]


def _slogdet_infer(ctx: OpContext) -> list[TensorType]:
    x = _square(ctx)
    out = TensorType(x.dtype, None if x.shape is None else tuple(x.shape[:-2]))
    return [out, out]


define("slogdet", Category.LINALG, inputs=inputs("a"), outputs=("sign", "logabsdet"),
       infer=_slogdet_infer, cost=_per_matrix(lambda n, k: 2 * n ** 3 / 3),
       cost_doc="batch x 2n^3/3 (LU factorisation)", reference=_slogdet,
       decompose=_d.slogdet_decompose,
       doc="Sign and natural log of the absolute determinant of each square matrix in the "
           "last two dims (torch.linalg.slogdet): det = sign * exp(logabsdet); a singular "
           "matrix gives sign 0 and logabsdet -inf, an empty one sign 1 and logabsdet 0.")


def _svd_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    if x.shape is None:
        return [TensorType(x.dtype, None)] * 3
    m, n, k = _mk(x.shape)
    full = bool(ctx.attrs["full_matrices"])
    return [_batched(x, m, m if full else k), _batched(x, k),
            _batched(x, n if full else k, n)]


def _svd(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    u, s, vh = np.linalg.svd(_f64(a), full_matrices=bool(attrs["full_matrices"]))
    k = s.shape[-1]
    su = _signs(u)
    u = u * su[..., None, :]
    pair = np.concatenate([su[..., :k], _signs(np.swapaxes(vh[..., k:, :], -1, -2))], -1)
    vh = vh * pair[..., :, None]
    return [u.astype(a.dtype), s.astype(a.dtype), vh.astype(a.dtype)]


def _svd_cost(ctx: OpContext) -> Flops:
    full = bool(ctx.attrs["full_matrices"])

    def flops(m: int, n: int, k: int) -> float:
        big = max(m, n)
        return (4 * big * big * k + 8 * big * k * k + 9 * k ** 3 if full
                else 14 * big * k * k + 8 * k ** 3)
    return _mn_cost(flops)(ctx)


define("svd", Category.LINALG, inputs=inputs("a"), outputs=("u", "s", "vh"),
       attrs=(attr("full_matrices", AttrKind.BOOL, False,
                   "U m x m and Vh n x n instead of m x k and k x n"),),
       infer=_svd_infer, cost=_svd_cost,
       cost_doc="batch x (14lk^2 + 8k^3), full_matrices 4l^2k + 8lk^2 + 9k^3; l = max(m, n), "
                "k = min(m, n) (Golub & Van Loan Fig. 8.6.1)",
       reference=_svd, decompose=_d.svd_decompose,
       doc="Singular value decomposition A = U diag(S) Vh of each m x n matrix in the last two "
           "dims (torch.linalg.svd), S descending. Signs: the largest-magnitude entry of each "
           "column of U is positive, the matching row of Vh flipped with it (rows of Vh past "
           "min(m, n), with full_matrices, get the same rule on their own; that null-space "
           "basis is LAPACK's and not unique). Module doc: why LAPACK's own signs are not kept.")


def _svdvals_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    return [TensorType(x.dtype, None) if x.shape is None else _batched(x, _mk(x.shape)[2])]


def _svdvals(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    return [np.linalg.svd(_f64(a), compute_uv=False).astype(a.dtype)]


define("svdvals", Category.LINALG, inputs=inputs("a"), infer=_svdvals_infer,
       cost=_mn_cost(lambda m, n, k: 4 * max(m, n) * k * k - 4 * k ** 3 / 3),
       cost_doc="batch x (4lk^2 - 4k^3/3), l = max(m, n), k = min(m, n) (bidiagonalisation)",
       reference=_svdvals, decompose=_d.svdvals_decompose,
       doc="Singular values of each m x n matrix in the last two dims, descending "
           "(torch.linalg.svdvals; torch.linalg.svd's S).")


def _eigh_infer(ctx: OpContext) -> list[TensorType]:
    x = _square(ctx)
    return [_batched(x, x.shape[-1]) if x.shape is not None else x, x]


def _eigh(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    w, v = np.linalg.eigh(_f64(a), UPLO="U" if attrs["upper"] else "L")
    v = v * _signs(v)[..., None, :]
    return [w.astype(a.dtype), v.astype(a.dtype)]


def _eigvalsh(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    return [np.linalg.eigvalsh(_f64(a), UPLO="U" if attrs["upper"] else "L").astype(a.dtype)]


_UPPER = attr("upper", AttrKind.BOOL, False, "read the upper triangle instead of the lower one")
define("eigh", Category.LINALG, inputs=inputs("a"), outputs=("w", "v"), attrs=(_UPPER,),
       infer=_eigh_infer, cost=_per_matrix(lambda n, k: 9 * n ** 3),
       cost_doc="batch x 9n^3 (tridiagonalisation + implicit QR with vectors, G&VL 8.3)",
       reference=_eigh, decompose=_d.eigh_decompose,
       doc="Eigenvalues (ascending) and orthonormal eigenvectors (columns of v) of each "
           "symmetric matrix in the last two dims (torch.linalg.eigh); only one triangle is "
           "read. Signs: the largest-magnitude entry of each eigenvector is positive (module "
           "doc).")
define("eigvalsh", Category.LINALG, inputs=inputs("a"), attrs=(_UPPER,),
       infer=lambda ctx: _eigh_infer(ctx)[:1], cost=_per_matrix(lambda n, k: 4 * n ** 3 / 3),
       cost_doc="batch x 4n^3/3 (tridiagonalisation)", reference=_eigvalsh,
       decompose=_d.eigvalsh_decompose,
       doc="Eigenvalues (ascending) of each symmetric matrix in the last two dims "
           "(torch.linalg.eigvalsh); only one triangle is read.")


def _qr_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    if x.shape is None:
        return [TensorType(x.dtype, None)] * 2
    m, n, k = _mk(x.shape)
    rows = m if ctx.attrs["complete"] else k
    return [_batched(x, m, rows), _batched(x, rows, n)]


def _qr(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    q, r = np.linalg.qr(_f64(a), mode="complete" if attrs["complete"] else "reduced")
    return [q.astype(a.dtype), r.astype(a.dtype)]


def _qr_cost(ctx: OpContext) -> Flops:
    complete = bool(ctx.attrs["complete"])

    def flops(m: int, n: int, k: int) -> float:
        r = 2 * max(m, n) * k * k - 2 * k ** 3 / 3
        q = 4 * m * m * k - 4 * m * k * k + 4 * k ** 3 / 3 if complete \
            else 2 * m * k * k - 2 * k ** 3 / 3
        return r + q
    return _mn_cost(flops)(ctx)


define("qr", Category.LINALG, inputs=inputs("a"), outputs=("q", "r"),
       attrs=(attr("complete", AttrKind.BOOL, False, "Q m x m and R m x n (torch mode "
                   "'complete') instead of m x k and k x n ('reduced')"),),
       infer=_qr_infer, cost=_qr_cost,
       cost_doc="batch x (2lk^2 - 2k^3/3 for R + 2mk^2 - 2k^3/3 for the thin Q; complete Q "
                "4m^2k - 4mk^2 + 4k^3/3), l = max(m, n), k = min(m, n)",
       reference=_qr, decompose=_d.qr_decompose,
       doc="Householder QR A = Q R of each m x n matrix in the last two dims "
           "(torch.linalg.qr), LAPACK's geqrf/orgqr convention: R's diagonal has whatever "
           "signs the reflectors give (deterministic, not forced positive).")


def _with_pivots(x: TensorType, count: Callable[[tuple[Dim, ...]], Dim]) -> list[TensorType]:
    """A factor of x's type and int32 pivots, count(x's shape) of them per matrix."""
    if x.shape is None:
        return [x, TensorType(DType.INT32, None)]
    return [x, _batched(x, count(x.shape), dtype=DType.INT32)]


def _lu_factor_infer(ctx: OpContext) -> list[TensorType]:
    return _with_pivots(_matrix(ctx), lambda shape: _mk(shape)[2])


def _lu_factor(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    import scipy.linalg

    a = xs[0]
    assert a is not None
    lu, piv = scipy.linalg.lu_factor(_f64(a), check_finite=False)
    return [lu.astype(a.dtype), (piv + 1).astype(np.int32)]


define("lu_factor", Category.LINALG, inputs=inputs("a"), outputs=("lu", "pivots"),
       infer=_lu_factor_infer,
       cost=_mn_cost(lambda m, n, k: 2 * m * n * k - (m + n) * k * k + 2 * k ** 3 / 3),
       cost_doc="batch x (2mnk - (m+n)k^2 + 2k^3/3), k = min(m, n) (square: 2n^3/3)",
       reference=_lu_factor, decompose=_d.lu_factor_decompose,
       doc="LU factorisation with partial pivoting of each m x n matrix in the last two dims "
           "(torch.linalg.lu_factor, LAPACK getrf): lu holds L (unit diagonal, below) and U "
           "(on and above the diagonal); pivots (int32, 1-based) says row i was swapped with "
           "row pivots[i] - 1, in order.")


def _perm(pivots: np.ndarray, m: int) -> np.ndarray:
    """Row order (..., m) after the swaps of LAPACK pivots (..., k): (P^T A)[j] = A[perm[j]]."""
    perm = np.broadcast_to(np.arange(m), (*pivots.shape[:-1], m)).copy()
    flat_perm = perm.reshape(-1, m)
    flat_piv = pivots.reshape(-1, pivots.shape[-1]).astype(np.int64) - 1
    for row, piv in zip(flat_perm, flat_piv, strict=True):
        for i, p in enumerate(piv):
            row[i], row[p] = row[p], row[i]
    return perm


def _lu_unpack_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    piv = ctx.input(1)
    if piv.dtype not in (DType.INT32, DType.INT64):
        raise ctx.fail(f"pivots must be int32 or int64, got {piv.dtype.short}")
    if x.shape is None:
        return [TensorType(x.dtype, None)] * 3
    m, n, k = _mk(x.shape)
    return [_batched(x, m, m), _batched(x, m, k), _batched(x, k, n)]


def _lu_unpack(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    lu, piv = xs[0], xs[1]
    assert lu is not None and piv is not None
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=lu.dtype)
    upper = np.triu(lu[..., :k, :])
    perm = _perm(piv, m)
    p = np.zeros((*lu.shape[:-2], m, m), lu.dtype)
    np.put_along_axis(p, perm[..., :, None], 1, axis=-1)  # P^T[j, perm[j]] = 1
    return [np.swapaxes(p, -1, -2), lower, upper]


define("lu_unpack", Category.LINALG, inputs=inputs("lu", "pivots"), outputs=("p", "l", "u"),
       infer=_lu_unpack_infer, cost=lambda ctx: Flops(), cost_doc="0 (copies)",
       reference=_lu_unpack, decompose=_d.lu_unpack_decompose,
       doc="P, L, U with A = P L U from lu_factor's outputs (torch.lu_unpack): P m x m "
           "permutation, L m x k unit lower, U k x n upper, k = min(m, n).")


def _lu_solve_infer(ctx: OpContext) -> list[TensorType]:
    return _rhs_infer(ctx, 2, bool(ctx.attrs.get("left", True)))


def _lu_solve(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    import scipy.linalg

    lu, piv, b = xs[0], xs[1], xs[2]
    assert lu is not None and piv is not None and b is not None
    left, adjoint = bool(attrs["left"]), bool(attrs["adjoint"])
    rhs = _f64(b) if left else np.swapaxes(_f64(b), -1, -2)
    # X A = B  <=>  A^T X^T = B^T: a right-side solve is a left one with the other transpose
    trans = int(adjoint) if left else int(not adjoint)
    x = scipy.linalg.lu_solve((_f64(lu), piv.astype(np.int64) - 1), rhs, trans=trans,
                              check_finite=False)
    return [(x if left else np.swapaxes(x, -1, -2)).astype(b.dtype)]


def _rhs_cost(flops: Callable[[int, int], float], a: int, b: int) -> Callable[[OpContext], Flops]:
    """Cost: batch x flops(n, m) with n x n input `a` and m right-hand sides in input `b`
    (its other dim than the one that meets `a`)."""
    def cost(ctx: OpContext) -> Flops:
        sa, sb = _static(ctx.input(a).shape), _static(ctx.input(b).shape)
        if sa is None or sb is None or len(sb) < 2:
            return Flops()
        left = bool(ctx.attrs.get("left", ctx.attrs.get("left_side", True)))
        m = sb[-1] if left else sb[-2]
        return Flops(other=math.prod(sb[:-2]) * round(flops(sa[-1], m)))
    return cost


_LEFT = attr("left", AttrKind.BOOL, True, "solve A X = B (False: X A = B)")
define("lu_solve", Category.LINALG, inputs=inputs("lu", "pivots", "b"),
       attrs=(_LEFT, attr("adjoint", AttrKind.BOOL, False, "solve with A^H instead of A")),
       infer=_lu_solve_infer, cost=_rhs_cost(lambda n, m: 2 * n * n * m, 0, 2),
       cost_doc="batch x 2n^2 m for m right-hand sides (two triangular solves)",
       reference=_lu_solve, decompose=_d.lu_solve_decompose,
       doc="X with A X = B (left) or X A = B, A given by lu_factor's lu and pivots "
           "(torch.linalg.lu_solve); adjoint solves with A^H.")


def _triangular_infer(ctx: OpContext) -> list[TensorType]:
    return _rhs_infer(ctx, 1, bool(ctx.attrs["left_side"]))


def _triangular(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    import scipy.linalg

    a, b = xs[0], xs[1]
    assert a is not None and b is not None
    trans = {"NO_TRANSPOSE": 0, "TRANSPOSE": 1, "ADJOINT": 2}[attrs["transpose_a"]]
    left = bool(attrs["left_side"])
    rhs = _f64(b) if left else np.swapaxes(_f64(b), -1, -2)
    if not left:  # X op(A) = B  <=>  op(A)^T X^T = B^T (real: adjoint = transpose)
        trans = 0 if trans else 1
    if rhs.size == 0:
        return [np.zeros(b.shape, b.dtype)]
    x = scipy.linalg.solve_triangular(_f64(a), rhs, trans=trans, lower=bool(attrs["lower"]),
                                      unit_diagonal=bool(attrs["unit_diagonal"]),
                                      check_finite=False)
    return [(x if left else np.swapaxes(x, -1, -2)).astype(b.dtype)]


UNROLL_LIMIT = 64
"""Largest matrix triangular_solve's decomposition unrolls (about 7 nodes per row)."""


def _triangular_decompose(gb: GraphBuilder, xs: list[Value | None],
                          attrs: Attrs) -> list[Value]:
    """Substitution unrolled over the rows, for back-ends without a triangular solve (ONNX):
    every case becomes A X = B with A lower or upper (op(A) transposed, a right-side solve
    transposed as a whole), then x_i = (b_i - A[i, done] X[done]) / A[i, i], rows in order
    (lower) or in reverse (upper). Only A's triangle is sliced, never the other one."""
    a, b = xs[0], xs[1]
    assert a is not None and b is not None and a.type is not None and b.type is not None
    shape, b_shape = _static(a.type.shape), _static(b.type.shape)
    if shape is None or b_shape is None:
        raise OpError("triangular_solve: its decomposition needs static shapes")
    rank, n = len(shape), shape[-1]
    if 0 in b_shape:  # nothing to solve
        return [gb.op("identity", [b])]
    if n > UNROLL_LIMIT:
        raise OpError(f"triangular_solve: its decomposition unrolls one step per row and "
                      f"stops at {UNROLL_LIMIT} rows, got {n}")
    swap = {"perm": (*range(rank - 2), rank - 1, rank - 2)}
    lower, left = bool(attrs["lower"]), bool(attrs["left_side"])
    if attrs["transpose_a"] != "NO_TRANSPOSE":  # real matrices: adjoint = transpose
        a, lower = gb.op("permute", [a], swap), not lower
    if not left:  # X op(A) = B  <=>  op(A)^T X^T = B^T
        a, b, lower = gb.op("permute", [a], swap), gb.op("permute", [b], swap), not lower
    rows: dict[int, Value] = {}

    def piece(x: Value, r0: int, r1: int, c0: int | None = None, c1: int | None = None) -> Value:
        axes, starts, ends = [rank - 2], [r0], [r1]
        if c0 is not None and c1 is not None:
            axes, starts, ends = [rank - 2, rank - 1], [r0, c0], [r1, c1]
        return gb.op("slice", [x], {"starts": tuple(starts), "ends": tuple(ends),
                                    "axes": tuple(axes)})

    for i in range(n) if lower else range(n - 1, -1, -1):
        row = piece(b, i, i + 1)
        done = list(range(i)) if lower else list(range(i + 1, n))
        if done:
            known = (rows[done[0]] if len(done) == 1
                     else gb.op("concat", [rows[j] for j in done], {"axis": rank - 2}))
            coef = piece(a, i, i + 1, done[0], done[-1] + 1)
            row = gb.op("sub", [row, gb.op("matmul", [coef, known])])
        if not attrs["unit_diagonal"]:
            row = gb.op("div", [row, piece(a, i, i + 1, i, i + 1)])
        rows[i] = row
    x = rows[0] if n == 1 else gb.op("concat", [rows[i] for i in range(n)], {"axis": rank - 2})
    return [x if left else gb.op("permute", [x], swap)]


define("triangular_solve", Category.LINALG, inputs=inputs("a", "b"),
       attrs=(attr("left_side", AttrKind.BOOL, True, "solve op(A) X = B (False: X op(A) = B)"),
              attr("lower", AttrKind.BOOL, True, "A is lower triangular (False: upper); the "
                   "other triangle is not read"),
              attr("unit_diagonal", AttrKind.BOOL, False, "take A's diagonal as ones (not "
                   "read)"),
              attr("transpose_a", AttrKind.STRING, "NO_TRANSPOSE", "op(A): A, A^T or A^H",
                   choices=("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"))),
       infer=_triangular_infer, cost=_rhs_cost(lambda n, m: n * n * m, 0, 1),
       cost_doc="batch x n^2 m for an n x n triangle and m right-hand sides (n^2/2 multiplies "
                "and n^2/2 adds per right-hand side)",
       reference=_triangular, decompose=_triangular_decompose,
       doc="X with op(A) X = B (left_side) or X op(A) = B for each triangular A in the last "
           "two dims, as stablehlo.triangular_solve (torch.linalg.solve_triangular, "
           "torch.triangular_solve); A and B have the same batch dims.")


def _expm(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    import scipy.linalg

    a = xs[0]
    assert a is not None
    if a.size == 0:
        return [a.copy()]
    return [np.asarray(scipy.linalg.expm(_f64(a))).astype(a.dtype)]


define("matrix_exp", Category.LINALG, inputs=inputs("a"), infer=_same_infer,
       cost=_per_matrix(lambda n, k: 44 * n ** 3 / 3),
       cost_doc="batch x 44n^3/3 ([13/13] Pade: 6 matmuls + an LU solve; the data-dependent "
                "squarings, 2n^3 each, are not counted)",
       reference=_expm, decompose=_d.matrix_exp_decompose,
       doc="Matrix exponential of each square matrix in the last two dims "
           "(torch.linalg.matrix_exp; reference scipy.linalg.expm, scaling and squaring).")


# -- raw Householder QR (LAPACK geqrf / orgqr / ormqr) -----------------------------------------


def _per_batch(fn: Callable[..., np.ndarray], *arrays: np.ndarray) -> np.ndarray:
    """fn on each matrix (the last dims of each array) of equal batch dims, stacked."""
    batch = arrays[0].shape[:-2]
    flat = [a.reshape((-1, *a.shape[len(batch):])) for a in arrays]
    count = math.prod(batch)
    outs = [fn(*(a[i] for a in flat)) for i in range(count)]
    if count == 0:
        probe = fn(*(np.zeros(a.shape[len(batch):], a.dtype) for a in arrays))
        return np.zeros((*batch, *probe.shape), probe.dtype)
    return np.stack(outs).reshape((*batch, *outs[0].shape))


def _lapack(name: str) -> Callable[..., Any]:
    import scipy.linalg.lapack

    fn: Callable[..., Any] = getattr(scipy.linalg.lapack, name)
    return fn


def _geqrf_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    return [x, TensorType(x.dtype, None) if x.shape is None else _batched(x, _mk(x.shape)[2])]


def _geqrf(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    k = min(a.shape[-2:])

    def one(m: np.ndarray) -> np.ndarray:
        if m.size == 0:
            return np.zeros((m.shape[0] + 1, m.shape[1]))
        qr, tau, _, info = _lapack("dgeqrf")(m)
        assert info == 0, info
        return np.concatenate([qr, np.pad(tau, (0, m.shape[1] - k))[None, :]])
    both = _per_batch(one, _f64(a))
    return [both[..., :-1, :].astype(a.dtype), both[..., -1, :k].astype(a.dtype)]


define("geqrf", Category.LINALG, inputs=inputs("a"), outputs=("qr", "tau"),
       infer=_geqrf_infer, cost=_mn_cost(lambda m, n, k: 2 * max(m, n) * k * k - 2 * k ** 3 / 3),
       cost_doc="batch x (2lk^2 - 2k^3/3), l = max(m, n), k = min(m, n)",
       reference=_geqrf, decompose=_d.geqrf_decompose,
       doc="LAPACK geqrf of each m x n matrix in the last two dims (torch.geqrf): R on and "
           "above the diagonal, the Householder vectors (implicit unit head) below it, and "
           "their scales tau (k = min(m, n) of them). Deterministic: no sign choice.")


def _householder_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    tau = ctx.input(1)
    if tau.dtype != x.dtype:
        raise ctx.fail(f"a is {x.dtype.short} but tau is {tau.dtype.short}")
    if x.shape is not None:
        m, n = x.shape[-2], x.shape[-1]
        if isinstance(m, int) and isinstance(n, int) and m < n:
            raise ctx.fail(f"needs m >= n, got {m} x {n}")
        if tau.shape is not None and isinstance(tau.shape[-1], int) and isinstance(n, int) \
                and tau.shape[-1] > n:
            raise ctx.fail(f"needs at most n = {n} reflectors, got {tau.shape[-1]}")
    return [x]


def _householder(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a, tau = xs[0], xs[1]
    assert a is not None and tau is not None

    def one(m: np.ndarray, t: np.ndarray) -> np.ndarray:
        if m.size == 0:
            return m
        q, _, info = _lapack("dorgqr")(m, t[0])
        assert info == 0, info
        return np.asarray(q)
    return [_per_batch(one, _f64(a), _f64(tau)[..., None, :]).astype(a.dtype)]


def _householder_cost(ctx: OpContext) -> Flops:
    shape, tau = _static(ctx.input(0).shape), _static(ctx.input(1).shape)
    if shape is None or tau is None or not tau:
        return Flops()
    m, n, k = shape[-2], shape[-1], tau[-1]
    per = 4 * m * n * k - 2 * (m + n) * k * k + 4 * k ** 3 / 3
    return Flops(other=math.prod(shape[:-2]) * max(0, round(per)))


define("householder_product", Category.LINALG, inputs=inputs("a", "tau"),
       infer=_householder_infer, cost=_householder_cost,
       cost_doc="batch x (4mnk - 2(m+n)k^2 + 4k^3/3) for k reflectors (LAPACK orgqr)",
       reference=_householder, decompose=_d.householder_product_decompose,
       doc="The first n columns of the product of Householder reflectors H_1 ... H_k stored "
           "below the diagonal of each m x n matrix (m >= n >= k), with scales tau "
           "(torch.linalg.householder_product, LAPACK orgqr).")


def _ormqr_infer(ctx: OpContext) -> list[TensorType]:
    x = _matrix(ctx)
    c = ctx.input(2)
    if c.dtype != x.dtype or ctx.input(1).dtype != x.dtype:
        raise ctx.fail(f"a, tau and c must share a dtype, got {x.dtype.short}, "
                       f"{ctx.input(1).dtype.short}, {c.dtype.short}")
    if x.shape is not None and c.shape is not None:
        rows = x.shape[-2]
        meet = c.shape[-2] if ctx.attrs["left"] else c.shape[-1]
        if isinstance(rows, int) and isinstance(meet, int) and rows != meet:
            raise ctx.fail(f"the reflectors have length {rows} but c has {meet} "
                           f"{'rows' if ctx.attrs['left'] else 'columns'}")
    return [c]


def _ormqr(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a, tau, c = xs[0], xs[1], xs[2]
    assert a is not None and tau is not None and c is not None
    side = "L" if attrs["left"] else "R"
    trans = "T" if attrs["transpose"] else "N"

    def one(m: np.ndarray, t: np.ndarray, other: np.ndarray) -> np.ndarray:
        if other.size == 0 or t.size == 0:
            return other
        lwork = max(1, *other.shape) * 64
        out, _, info = _lapack("dormqr")(side, trans, m, t[0], other, lwork)
        assert info == 0, info
        return np.asarray(out)
    return [_per_batch(one, _f64(a), _f64(tau)[..., None, :], _f64(c)).astype(c.dtype)]


def _ormqr_cost(ctx: OpContext) -> Flops:
    c, tau = _static(ctx.input(2).shape), _static(ctx.input(1).shape)
    if c is None or tau is None or len(c) < 2 or not tau:
        return Flops()
    m, n, k = c[-2], c[-1], tau[-1]
    per = 4 * m * n * k - 2 * (n if ctx.attrs["left"] else m) * k * k
    return Flops(other=math.prod(c[:-2]) * max(0, per))


define("ormqr", Category.LINALG, inputs=inputs("a", "tau", "c"),
       attrs=(attr("left", AttrKind.BOOL, True, "Q C (False: C Q)"),
              attr("transpose", AttrKind.BOOL, False, "use Q^T (Q^H) instead of Q")),
       infer=_ormqr_infer, cost=_ormqr_cost,
       cost_doc="batch x (4mnk - 2nk^2) for k reflectors on an m x n C (right side: "
                "4mnk - 2mk^2) (LAPACK ormqr)",
       reference=_ormqr, decompose=_d.ormqr_decompose,
       doc="C multiplied by Q (or Q^T), Q the product of the Householder reflectors stored "
           "below the diagonal of a with scales tau, as geqrf returns them (torch.ormqr, "
           "LAPACK ormqr); Q is never formed.")


# -- symmetric indefinite LDL^T (LAPACK sytrf / sytrs, Bunch-Kaufman pivoting) --------------


def _ldl_factor_infer(ctx: OpContext) -> list[TensorType]:
    return _with_pivots(_square(ctx), lambda shape: shape[-1])


def _ldl_factor(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a = xs[0]
    assert a is not None
    n = a.shape[-1]

    def one(m: np.ndarray) -> np.ndarray:
        if m.size == 0:
            return np.zeros((n + 1, n))
        ld, ipiv, info = _lapack("dsytrf")(m, lower=1)
        assert info >= 0, info
        return np.concatenate([np.tril(ld), ipiv[None, :].astype(np.float64)])
    both = _per_batch(one, _f64(a))
    return [both[..., :-1, :].astype(a.dtype), both[..., -1, :].astype(np.int32)]


define("ldl_factor", Category.LINALG, inputs=inputs("a"), outputs=("ld", "pivots"),
       infer=_ldl_factor_infer, cost=_per_matrix(lambda n, k: n ** 3 / 3),
       cost_doc="batch x n^3/3 (LAPACK sytrf; the pivot search is not counted)",
       reference=_ldl_factor, decompose=_d.ldl_factor_decompose,
       doc="LDL^T factorisation with Bunch-Kaufman pivoting of each symmetric matrix in the "
           "last two dims, from its lower triangle (torch.linalg.ldl_factor, LAPACK sytrf "
           "lower): ld holds L (unit diagonal, below) and the 1 x 1 / 2 x 2 blocks of D, "
           "zeros above; pivots (int32, LAPACK's: 1-based, negative for a 2 x 2 block).")


def _ldl_solve(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    ld, piv, b = xs[0], xs[1], xs[2]
    assert ld is not None and piv is not None and b is not None

    def one(m: np.ndarray, p: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        if rhs.size == 0:
            return rhs
        x, info = _lapack("dsytrs")(m, p[0].astype(np.int32), rhs, lower=1)
        assert info == 0, info
        return np.asarray(x)
    return [_per_batch(one, _f64(ld), piv[..., None, :], _f64(b)).astype(b.dtype)]


def _ldl_solve_infer(ctx: OpContext) -> list[TensorType]:
    return _lu_solve_infer(ctx)


define("ldl_solve", Category.LINALG, inputs=inputs("ld", "pivots", "b"),
       infer=_ldl_solve_infer, cost=_rhs_cost(lambda n, m: 2 * n * n * m, 0, 2),
       cost_doc="batch x 2n^2 m for m right-hand sides (LAPACK sytrs)",
       reference=_ldl_solve, decompose=_d.ldl_solve_decompose,
       doc="X with A X = B, A given by ldl_factor's ld and pivots (torch.linalg.ldl_solve, "
           "LAPACK sytrs).")
