"""Registry decompositions of the linear-algebra ops (irbridge/ops/linalg.py) for back-ends
without a factorisation of their own (ONNX; StableHLO, which has only cholesky and
triangular_solve): the algorithms unrolled over the static matrix size, every step a few
whole-matrix neutral ops (slices, masks as constants, `where`, outer products).

Each decomposition computes in float64 (its inputs cast in, its outputs cast back) and
follows the LAPACK routine torch's CPU kernel calls, so that the choices the data makes
(pivot rows, reflector signs) come out as torch's:

- lu_factor: getrf's partial pivoting, the first row of largest |a| in the column (idamax),
  no scaling under a zero pivot; pivots 1-based int32.
- cholesky: potrf's column by column (lower; upper reads the upper triangle as the lower
  one of A^T). A matrix that is not positive definite gives NaN where torch raises.
- geqrf: geqr2's Householder reflectors, dlarfg's convention beta = -sign(alpha) ||x||,
  tau = (beta - alpha) / beta, v = x / (alpha - beta), tau = 0 when x below alpha is 0.
- ldl_factor / ldl_solve: sytf2's Bunch-Kaufman pivots replayed step by step (section
  below); ldl_factor computes in the input's float.
- solve, inverse, slogdet, lu_solve, lu_unpack, householder_product, ormqr and qr are
  built on those (inner ops decompose in turn).
- matrix_exp: scaling and squaring with a degree-18 Taylor polynomial in float64 (the scaled
  norm at most 1/2: truncation error below 1e-23); at most MAX_SQUARINGS squarings, NaN
  beyond (1-norm above 2^63).

- eigh, eigvalsh, svd, svdvals: cyclic Jacobi sweeps (section below), eigenvalues ascending
  and singular values descending as LAPACK returns them, vectors with the registry's sign
  rule (linalg.py's module doc). svd's columns of U for singular values at most
  k eps sigma_max are an orthonormal completion (not unique; LAPACK's differ); svd with
  full_matrices of a non-square matrix is refused (the extra columns are not unique).

Matrices larger than UNROLL_LIMIT (64; JACOBI_LIMIT, 32, for the Jacobi ones) are refused
with a one-line error naming the node (the graph grows with the unrolled steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Value

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder

Attrs = dict[str, Any]
F64 = DType.FLOAT64
UNROLL_LIMIT = 64
"""Largest matrix size (rows or columns) a decomposition unrolls."""
MAX_SQUARINGS = 64
"""matrix_exp's squarings: 1-norms up to 2^63 (past that the output is NaN)."""


def _shape(op: str, x: Value | None) -> list[int]:
    """x's static shape, refused when symbolic or when a matrix dim is above UNROLL_LIMIT."""
    assert x is not None and x.type is not None
    shape = x.type.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise OpError(f"{op}: its decomposition needs static shapes")
    dims = [int(d) for d in shape]  # type: ignore[arg-type]
    if max(dims[-2:], default=0) > UNROLL_LIMIT:
        raise OpError(f"{op}: its decomposition unrolls one step per row or column and stops "
                      f"at {UNROLL_LIMIT}, got a {dims[-2]} x {dims[-1]} matrix")
    return dims


def _unary(op: str, gb: GraphBuilder, xs: list[Value | None],
           jacobi: bool = False) -> tuple[Value, list[int], _M, DType]:
    """(the input, its checked static shape, helpers, its dtype) of a one-input op."""
    a = xs[0]
    shape = (_jacobi_shape if jacobi else _shape)(op, a)
    assert a is not None and a.type is not None
    return a, shape, _M(gb, len(shape)), a.type.dtype


class _M:
    """Small helpers over one GraphBuilder for matrices of rank `rank` (batch dims first)."""

    def __init__(self, gb: GraphBuilder, rank: int, work: DType = F64) -> None:
        self.gb, self.rank, self.work = gb, rank, work  # work: the float computed in

    def op(self, name: str, *xs: Value, **attrs: Any) -> Value:
        return self.gb.op(name, list(xs), attrs)

    def const(self, array: Any, dtype: DType | None = None) -> Value:
        return self.gb.constant(np.asarray(array), dtype=dtype or self.work)

    def f64(self, x: Value) -> Value:
        """x in the working float (float64 unless set otherwise)."""
        assert x.type is not None
        return x if x.type.dtype == self.work else self.op("cast", x, dtype=self.work)

    def cast(self, x: Value, dtype: DType) -> Value:
        return x if dtype == self.work else self.op("cast", x, dtype=dtype)

    def rows(self, r0: int, r1: int, x: Value) -> Value:
        return self.op("slice", x, starts=(r0,), ends=(r1,), axes=(self.rank - 2,))

    def cols(self, c0: int, c1: int, x: Value) -> Value:
        return self.op("slice", x, starts=(c0,), ends=(c1,), axes=(self.rank - 1,))

    def entry(self, i: int, j: int, x: Value) -> Value:
        return self.op("slice", x, starts=(i, j), ends=(i + 1, j + 1),
                       axes=(self.rank - 2, self.rank - 1))

    def t(self, x: Value) -> Value:
        r = self.rank
        return self.op("permute", x, perm=(*range(r - 2), r - 1, r - 2))

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        return self.op("where", cond, a, b)

    def mask(self, array: np.ndarray) -> Value:
        return self.const(array, DType.BOOL)

    def row_mask(self, m: int, fn: Any) -> Value:
        """(m, 1) bool: fn(row index)."""
        return self.mask(fn(np.arange(m))[:, None])

    def col_mask(self, n: int, fn: Any) -> Value:
        """(1, n) bool: fn(column index)."""
        return self.mask(fn(np.arange(n))[None, :])

    def zero(self) -> Value:
        return self.const(0.0)

    def outer(self, col: Value, row: Value) -> Value:
        return self.op("matmul", col, row)

    def sum_rows(self, x: Value) -> Value:
        return self.op("reduce_sum", x, axes=(self.rank - 2,), keepdims=True)


def _empty_outputs(m: _M, shapes: list[tuple[list[int], DType]]) -> list[Value]:
    return [m.const(np.zeros(s, d.numpy), d) for s, d in shapes]


# -- LU (getrf) ---------------------------------------------------------------------------


def lu_factor_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("lu_factor", gb, xs)
    rows_n, cols_n = shape[-2], shape[-1]
    k = min(rows_n, cols_n)
    if 0 in shape:
        return [m.op("identity", a), *_empty_outputs(m, [([*shape[:-2], k], DType.INT32)])]
    lu, pivots = _getrf(m, m.f64(a), shape)
    return [m.cast(lu, dtype), pivots]


def _getrf(m: _M, x: Value, shape: list[int]) -> tuple[Value, Value]:
    """LU of x (float64) with getrf's pivots: (LU, int32 pivots (..., k), 1-based)."""
    rank, rows_n, cols_n = len(shape), shape[-2], shape[-1]
    k = min(rows_n, cols_n)
    index = m.const(np.arange(rows_n)[:, None], DType.INT64)
    picks = []
    for j in range(k):
        col = m.op("abs", m.cols(j, j + 1, m.rows(j, rows_n, x)))
        p = m.op("add", m.op("argmax", col, axis=rank - 2, keepdims=True),
                 m.const(j, DType.INT64))  # first largest |a| (idamax)
        picks.append(p)
        if j < rows_n - 1:  # swap rows j and p
            row_j = m.rows(j, j + 1, x)
            spread = m.op("expand", p, shape=(*shape[:-2], 1, cols_n))
            row_p = m.op("gather_elements", x, spread, axis=rank - 2)
            x = m.where(m.op("equal", index, p), row_j, x)
            x = m.where(m.row_mask(rows_n, lambda r, j=j: r == j), row_p, x)
        if j == rows_n - 1:
            continue
        pivot = m.entry(j, j, x)
        col = m.cols(j, j + 1, x)
        below = m.row_mask(rows_n, lambda r, j=j: r > j)
        nonzero = m.op("not_equal", pivot, m.zero())
        scaled = m.where(nonzero, m.op("div", col, pivot), col)  # getf2: no scaling under 0
        low = m.where(below, scaled, m.zero())
        right = m.where(m.col_mask(cols_n, lambda c, j=j: c > j), m.rows(j, j + 1, x), m.zero())
        x = m.op("sub", x, m.outer(low, right))
        x = m.where(m.op("logical_and", below, m.col_mask(cols_n, lambda c, j=j: c == j)),
                    scaled, x)
    piv = m.op("concat", *picks, axis=rank - 1)  # (..., 1, k)
    piv = m.op("add", m.op("reshape", piv, shape=(*shape[:-2], k)), m.const(1, DType.INT64))
    return x, m.op("cast", piv, dtype=DType.INT32)


def _permutation(m: _M, pivots: Value, rows_n: int, batch: list[int]) -> Value:
    """perm (..., rows_n) int64 after the LAPACK swaps: (P^T A)[j] = A[perm[j]]."""
    piv = m.op("sub", m.op("cast", pivots, dtype=DType.INT64), m.const(1, DType.INT64))
    assert pivots.type is not None and pivots.type.shape is not None
    count = int(pivots.type.shape[-1])  # type: ignore[arg-type]
    index = m.const(np.arange(rows_n), DType.INT64)
    perm = m.op("expand", index, shape=(*batch, rows_n))
    last = len(batch)
    for i in range(count):
        p = m.op("slice", piv, starts=(i,), ends=(i + 1,), axes=(last,))
        at_i = m.op("slice", perm, starts=(i,), ends=(i + 1,), axes=(last,))
        at_p = m.op("gather_elements", perm, p, axis=last)
        perm = m.where(m.op("equal", index, p), at_i, perm)
        perm = m.where(m.mask(np.arange(rows_n) == i), at_p, perm)
    return perm


def _permute_rows(m: _M, x: Value, perm: Value, shape: list[int]) -> Value:
    """y[j] = x[perm[j]] for x (..., r, c)."""
    idx = m.op("unsqueeze", perm, axes=(m.rank - 1,))
    idx = m.op("expand", idx, shape=tuple(shape))
    return m.op("gather_elements", x, idx, axis=m.rank - 2)


def _inverse_perm(m: _M, perm: Value, rows_n: int, batch: list[int]) -> Value:
    """inv with inv[perm[j]] = j."""
    onehot = m.op("equal", m.op("unsqueeze", perm, axes=(len(batch) + 1,)),
                  m.const(np.arange(rows_n)[None, :], DType.INT64))  # [j, i]: perm[j] == i
    hits = m.op("cast", onehot, dtype=DType.INT32)
    return m.op("argmax", hits, axis=len(batch), keepdims=False)


def lu_unpack_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    lu, pivots = xs[0], xs[1]
    shape = _shape("lu_unpack", lu)
    assert lu is not None and lu.type is not None and pivots is not None
    rank, dtype = len(shape), lu.type.dtype
    rows_n, cols_n = shape[-2], shape[-1]
    k = min(rows_n, cols_n)
    batch = shape[:-2]
    m = _M(gb, rank)
    if 0 in shape:
        return _empty_outputs(m, [([*batch, rows_n, rows_n], dtype),
                                  ([*batch, rows_n, k], dtype), ([*batch, k, cols_n], dtype)])
    perm = _permutation(m, pivots, rows_n, batch)
    # P^T[j, i] = (perm[j] == i), so P[i, j] = (perm[j] == i)
    pt = m.op("equal", m.op("unsqueeze", perm, axes=(rank - 1,)),
              m.const(np.arange(rows_n)[None, :], DType.INT64))
    p = m.t(m.op("cast", pt, dtype=dtype))
    left = m.cols(0, k, lu)
    strict = m.mask(np.tril(np.ones((rows_n, k), bool), -1))
    lower = m.where(strict, left, m.const(np.eye(rows_n, k), dtype))
    top = m.rows(0, k, lu)
    upper = m.where(m.mask(np.triu(np.ones((k, cols_n), bool))), top, m.const(0.0, dtype))
    return [p, lower, upper]


def _tri(m: _M, a: Value, b: Value, *, lower: bool, unit: bool = False,
         transpose: bool = False) -> Value:
    return m.op("triangular_solve", a, b, left_side=True, lower=lower, unit_diagonal=unit,
                transpose_a="TRANSPOSE" if transpose else "NO_TRANSPOSE")


def _lu_solve(m: _M, lu: Value, pivots: Value, b: Value, b_shape: list[int], *,
              adjoint: bool) -> Value:
    """X with A X = B (adjoint: A^T X = B), A = P L U from lu (float64) and pivots."""
    rows_n, batch = b_shape[-2], b_shape[:-2]
    perm = _permutation(m, pivots, rows_n, batch)
    if not adjoint:  # L U X = P^T B
        y = _tri(m, lu, _permute_rows(m, b, perm, b_shape), lower=True, unit=True)
        return _tri(m, lu, y, lower=False)
    # U^T L^T P^T X = B
    z = _tri(m, lu, b, lower=False, transpose=True)
    w = _tri(m, lu, z, lower=True, unit=True, transpose=True)
    return _permute_rows(m, w, _inverse_perm(m, perm, rows_n, batch), b_shape)


def lu_solve_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    lu, pivots, b = xs[0], xs[1], xs[2]
    _shape("lu_solve", lu)
    b_shape = _shape("lu_solve", b)
    assert lu is not None and pivots is not None and b is not None and b.type is not None
    m = _M(gb, len(b_shape))
    if 0 in b_shape:
        return [m.op("identity", b)]
    left, adjoint = bool(attrs["left"]), bool(attrs["adjoint"])
    rhs = m.f64(b)
    if not left:  # X A = B  <=>  A^T X^T = B^T
        rhs, adjoint = m.t(rhs), not adjoint
        b_shape = [*b_shape[:-2], b_shape[-1], b_shape[-2]]
    x = _lu_solve(m, m.f64(lu), pivots, rhs, b_shape, adjoint=adjoint)
    return [m.cast(x if left else m.t(x), b.type.dtype)]


def solve_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, b = xs[0], xs[1]
    shape, b_shape = _shape("solve", a), _shape("solve", b)
    assert a is not None and b is not None and b.type is not None
    m = _M(gb, len(shape))
    if 0 in b_shape or 0 in shape:
        return [m.op("identity", b)]
    return [m.cast(_solve(m, m.f64(a), m.f64(b), shape, b_shape), b.type.dtype)]


def _solve(m: _M, a: Value, b: Value, shape: list[int], b_shape: list[int]) -> Value:
    lu, pivots = _getrf(m, a, shape)
    return _lu_solve(m, lu, pivots, b, b_shape, adjoint=False)


def inverse_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("inverse", gb, xs)
    if 0 in shape:
        return [m.op("identity", a)]
    eye = m.op("expand", m.const(np.eye(shape[-1])), shape=tuple(shape))
    return [m.cast(_solve(m, m.f64(a), eye, shape, shape), dtype)]


def _lu_diag(m: _M, a: Value, shape: list[int]) -> tuple[Value, Value]:
    """(diag(U) (..., n), flips (..., n): -1 where getrf swapped rows, else 1) of square a."""
    n, batch = shape[-1], shape[:-2]
    lu, pivots = _getrf(m, m.f64(a), shape)
    flat = m.op("reshape", lu, shape=(*batch, n * n))
    diag = m.op("gather", flat, m.const(np.arange(n) * (n + 1), DType.INT64), axis=len(batch))
    swapped = m.op("not_equal", pivots, m.const(np.arange(1, n + 1), DType.INT32))
    return diag, m.where(swapped, m.const(-1.0), m.const(1.0))


def _det_outputs(op: str, gb: GraphBuilder, a: Value | None,
                 values: tuple[float, ...]) -> tuple[_M, list[int], list[Value] | None]:
    """Shape checks shared by det and slogdet; the outputs of an empty batch (empty
    tensors) or of 0 x 0 matrices (`values`, one per output) when there is nothing to
    factor."""
    shape = _shape(op, a)
    assert a is not None and a.type is not None
    dtype, batch = a.type.dtype, shape[:-2]
    m = _M(gb, len(shape))
    if 0 in batch:
        return m, shape, _empty_outputs(m, [(batch, dtype)] * len(values))
    if shape[-1] == 0:
        return m, shape, [m.op("full", shape=tuple(batch), value=v, dtype=dtype)
                          for v in values]
    return m, shape, None


def det_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    """det = prod(diag(U)) * (-1)^(rows swapped) from getrf (torch's LU route)."""
    m, shape, done = _det_outputs("det", gb, xs[0], (1.0,))
    if done is not None:
        return done
    a = xs[0]
    assert a is not None and a.type is not None
    diag, flips = _lu_diag(m, a, shape)
    det = m.op("reduce_prod", m.op("mul", diag, flips), axes=(len(shape) - 2,), keepdims=False)
    return [m.cast(det, a.type.dtype)]


def slogdet_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    """sign = prod sign(u_ii) * (-1)^(rows swapped), logabsdet = sum log |u_ii| (torch's
    own LU route: a zero pivot gives sign 0 and -inf)."""
    m, shape, done = _det_outputs("slogdet", gb, xs[0], (1.0, 0.0))
    if done is not None:
        return done
    a = xs[0]
    assert a is not None and a.type is not None
    diag, flips = _lu_diag(m, a, shape)
    last = len(shape) - 2
    sign = m.op("reduce_prod", m.op("mul", m.op("sign", diag), flips), axes=(last,),
                keepdims=False)
    logabs = m.op("reduce_sum", m.op("log", m.op("abs", diag)), axes=(last,), keepdims=False)
    return [m.cast(sign, a.type.dtype), m.cast(logabs, a.type.dtype)]


# -- Cholesky (potrf) -----------------------------------------------------------------------


def cholesky_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("cholesky", gb, xs)
    if 0 in shape:
        return [m.op("identity", a)]
    n, upper = shape[-1], bool(attrs["upper"])
    x = m.f64(a)
    if upper:  # A = U^T U from the upper triangle: L = U^T from the lower one of A^T
        x = m.t(x)
    low = m.op("expand", m.const(np.zeros((n, n))), shape=tuple(shape))
    for j in range(n):
        known = m.t(m.rows(j, j + 1, low))  # L[j, :j] as a column (zeros from column j)
        v = m.op("sub", m.cols(j, j + 1, x), m.op("matmul", low, known))
        root = m.op("sqrt", m.rows(j, j + 1, v))
        col = m.where(m.row_mask(n, lambda r, j=j: r > j), m.op("div", v, root),
                      m.where(m.row_mask(n, lambda r, j=j: r == j), root, m.zero()))
        low = m.where(m.col_mask(n, lambda c, j=j: c == j), col, low)
    return [m.cast(m.t(low) if upper else low, dtype)]


# -- Householder QR (geqr2 / org2r / orm2r) -------------------------------------------------


def _reflector(m: _M, a: Value, i: int, rows_n: int) -> Value:
    """v (..., rows_n, 1): zeros above i, 1 at i, a[i+1:, i] below."""
    col = m.cols(i, i + 1, a)
    unit = m.const((np.arange(rows_n) == i).astype(float)[:, None])
    return m.where(m.row_mask(rows_n, lambda r: r > i), col, unit)


def _geqrf(m: _M, x: Value, shape: list[int]) -> tuple[Value, Value]:
    rank, rows_n, cols_n = len(shape), shape[-2], shape[-1]
    k = min(rows_n, cols_n)
    taus = []
    for j in range(k):
        col = m.cols(j, j + 1, x)
        alpha = m.rows(j, j + 1, col)
        below = m.row_mask(rows_n, lambda r, j=j: r > j)
        tail = m.where(below, col, m.zero())
        xnorm2 = m.sum_rows(m.op("mul", tail, tail))
        norm = m.op("sqrt", m.op("add", m.op("mul", alpha, alpha), xnorm2))
        beta = m.where(m.op("greater_equal", alpha, m.zero()), m.op("neg", norm), norm)
        flat = m.op("equal", xnorm2, m.zero())  # H = I (dlarfg: tau = 0)
        tau = m.where(flat, m.zero(), m.op("div", m.op("sub", beta, alpha), beta))
        scale = m.op("div", m.const(1.0), m.op("sub", alpha, beta))
        scaled = m.where(flat, col, m.op("mul", col, scale))
        v = m.where(below, scaled, m.const((np.arange(rows_n) == j).astype(float)[:, None]))
        w = m.op("matmul", m.t(v), x)  # (..., 1, n)
        updated = m.op("sub", x, m.op("mul", tau, m.outer(v, w)))
        x = m.where(m.col_mask(cols_n, lambda c, j=j: c > j), updated, x)
        newcol = m.where(below, scaled,
                         m.where(m.row_mask(rows_n, lambda r, j=j: r == j),
                                 m.where(flat, alpha, beta), col))
        x = m.where(m.col_mask(cols_n, lambda c, j=j: c == j), newcol, x)
        taus.append(tau)
    tau_all = m.op("concat", *taus, axis=rank - 1) if len(taus) > 1 else taus[0]
    return x, m.op("reshape", tau_all, shape=(*shape[:-2], k))


def geqrf_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("geqrf", gb, xs)
    k = min(shape[-2:])
    if 0 in shape:
        return [m.op("identity", a), *_empty_outputs(m, [([*shape[:-2], k], dtype)])]
    qr, tau = _geqrf(m, m.f64(a), shape)
    return [m.cast(qr, dtype), m.cast(tau, dtype)]


def _apply_reflectors(m: _M, a: Value, tau: Value, c: Value, count: int, rows_n: int, *,
                      left: bool, forward: bool) -> Value:
    """H_i = I - tau_i v_i v_i^T applied to c for i in order (forward) or reversed: from the
    left (c <- H_i c) or the right (c <- c H_i)."""
    last = m.rank - 2
    for i in range(count) if forward else range(count - 1, -1, -1):
        v = _reflector(m, a, i, rows_n)
        t = m.op("unsqueeze", m.op("slice", tau, starts=(i,), ends=(i + 1,), axes=(last,)),
                 axes=(last + 1,))
        if left:
            c = m.op("sub", c, m.op("mul", t, m.outer(v, m.op("matmul", m.t(v), c))))
        else:
            c = m.op("sub", c, m.op("mul", t, m.outer(m.op("matmul", c, v), m.t(v))))
    return c


def householder_product_decompose(gb: GraphBuilder, xs: list[Value | None],
                                  attrs: Attrs) -> list[Value]:
    """Q = H_1 ... H_k I[:, :n], the reflectors applied last to first (org2r)."""
    a, tau = xs[0], xs[1]
    shape = _shape("householder_product", a)
    assert a is not None and a.type is not None and tau is not None and tau.type is not None
    m = _M(gb, len(shape))
    assert tau.type.shape is not None
    count = int(tau.type.shape[-1])  # type: ignore[arg-type]
    if 0 in shape:
        return [m.op("identity", a)]
    eye = m.op("expand", m.const(np.eye(shape[-2], shape[-1])), shape=tuple(shape))
    q = _apply_reflectors(m, m.f64(a), m.f64(tau), eye, count, shape[-2], left=True,
                          forward=False)
    return [m.cast(q, a.type.dtype)]


def ormqr_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    """Q C = H_1 (... (H_k C)), Q^T C = H_k (... (H_1 C)), C Q = ((C H_1) ...) H_k,
    C Q^T = ((C H_k) ...) H_1 (orm2r)."""
    a, tau, c = xs[0], xs[1], xs[2]
    shape, c_shape = _shape("ormqr", a), _shape("ormqr", c)
    assert a is not None and tau is not None and c is not None and c.type is not None
    assert tau.type is not None and tau.type.shape is not None
    count = min(int(tau.type.shape[-1]), shape[-1])  # type: ignore[arg-type]
    m = _M(gb, len(c_shape))
    if 0 in c_shape or count == 0:
        return [m.op("identity", c)]
    left, transpose = bool(attrs["left"]), bool(attrs["transpose"])
    out = _apply_reflectors(m, m.f64(a), m.f64(tau), m.f64(c), count, shape[-2], left=left,
                            forward=left == transpose)
    return [m.cast(out, c.type.dtype)]


def qr_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    """geqrf, then Q = org2r of the reflectors, R the upper triangle (torch's CPU route)."""
    a, shape, m, dtype = _unary("qr", gb, xs)
    batch = shape[:-2]
    rows_n, cols_n = shape[-2], shape[-1]
    k = min(rows_n, cols_n)
    complete = bool(attrs["complete"])
    width = rows_n if complete else k
    if 0 in shape:
        r_rows = rows_n if complete else k
        first = np.broadcast_to(np.eye(rows_n, width), (*batch, rows_n, width))
        return [m.const(np.ascontiguousarray(first), dtype),
                *_empty_outputs(m, [([*batch, r_rows, cols_n], dtype)])]
    qr, tau = _geqrf(m, m.f64(a), shape)
    eye = m.op("expand", m.const(np.eye(rows_n, width)), shape=(*batch, rows_n, width))
    q = _apply_reflectors(m, qr, tau, eye, k, rows_n, left=True, forward=False)
    r = qr if complete else m.rows(0, k, qr)
    r_rows = rows_n if complete else k
    r = m.where(m.mask(np.triu(np.ones((r_rows, cols_n), bool))), r, m.zero())
    return [m.cast(q, dtype), m.cast(r, dtype)]


# -- matrix exponential ----------------------------------------------------------------------


def matrix_exp_decompose(gb: GraphBuilder, xs: list[Value | None],
                         attrs: Attrs) -> list[Value]:
    """exp(A) = (T18(A / 2^s))^(2^s), s = max(0, ceil(log2(||A||_1 / 0.5))), T18 the Taylor
    polynomial of degree 18 (Horner), s squarings applied by `where` over MAX_SQUARINGS
    unrolled ones; NaN when s > MAX_SQUARINGS."""
    a, shape, m, dtype = _unary("matrix_exp", gb, xs)
    if 0 in shape:
        return [m.op("identity", a)]
    n, rank = shape[-1], len(shape)
    x = m.f64(a)
    norm = m.op("reduce_max", m.op("reduce_sum", m.op("abs", x), axes=(rank - 2,),
                                   keepdims=True), axes=(rank - 1,), keepdims=True)
    s = m.op("ceil", m.op("div", m.op("log", m.op("div", norm, m.const(0.5))),
                          m.const(np.log(2.0))))
    s = m.op("maximum", s, m.zero())
    s = m.where(m.op("isnan", s), m.zero(), s)  # a zero matrix: log(0) = -inf -> s = 0
    scaled = m.op("div", x, m.op("pow", m.const(2.0), s))
    eye = m.const(np.eye(n))
    # the 1/j as matmuls by I/j, not as a scale: onnxruntime folds a MatMul's scalar
    # constant scale into FusedMatMul's float32 alpha (1/17 off by 1e-8 in float64)
    poly = m.op("add", eye, m.op("matmul", scaled, m.const(np.eye(n) / 18.0)))
    for j in range(17, 0, -1):
        poly = m.op("add", eye, m.op("matmul", m.op("matmul", scaled, poly),
                                     m.const(np.eye(n) / j)))
    for i in range(MAX_SQUARINGS):
        poly = m.where(m.op("greater", s, m.const(float(i))), m.op("matmul", poly, poly), poly)
    poly = m.where(m.op("greater", s, m.const(float(MAX_SQUARINGS))), m.const(np.nan), poly)
    return [m.cast(poly, dtype)]


# -- symmetric eigendecomposition and SVD by cyclic Jacobi -----------------------------------
# eigh: two-sided Jacobi (A <- J^T A J, V <- V J); svd: one-sided (Hestenes) Jacobi on the
# columns (G <- G J, V <- V J, each rotation diagonalising the 2 x 2 Gram block of two
# columns). Rotations in the round-robin order: n - 1 rounds of n / 2 disjoint pairs per
# sweep (n rounded up to even; the pairs with the padding index are skipped), each round one
# rotation matrix J built from the pairs' (c, s). Sweeps: jacobi_sweeps(n), measured in
# float64 on random, graded (rows scaled over 1e12), clustered (eigenvalues 1 + 1e-8 k) and
# PSD matrices (20 of each kind and size): the off-diagonal norm relative to the matrix's
# reached 1e-15 after 4 sweeps at n = 3, 5 at n = 5, 6 at n = 8, 8 at n = 16, 10 at n = 32;
# the counts below add two sweeps of margin (a converged sweep rotates by ~0, changing
# nothing).

JACOBI_LIMIT = 32
"""Largest matrix (rows or columns) the Jacobi decompositions unroll."""


def jacobi_sweeps(n: int) -> int:
    return 6 if n <= 4 else 8 if n <= 8 else 10 if n <= 16 else 12


def _rounds(n: int) -> list[list[tuple[int, int]]]:
    """Round-robin pairings of 0..n-1: every pair exactly once per sweep."""
    size = n + n % 2
    order = list(range(size))
    rounds = []
    for _ in range(size - 1):
        pairs = [(order[i], order[size - 1 - i]) for i in range(size // 2)]
        rounds.append([(min(p, q), max(p, q)) for p, q in pairs if p < n and q < n])
        order = [order[0], order[-1], *order[1:-1]]
    return [pairs for pairs in rounds if pairs]  # n = 1: nothing to rotate


def _jacobi_shape(op: str, x: Value | None) -> list[int]:
    shape = _shape(op, x)
    if max(shape[-2:]) > JACOBI_LIMIT:
        raise OpError(f"{op}: its Jacobi decomposition stops at {JACOBI_LIMIT} rows and "
                      f"columns (the sweeps are unrolled), got {shape[-2]} x {shape[-1]}")
    return shape


def _rotation(m: _M, gram: Value, pairs: list[tuple[int, int]], n: int,
              batch: list[int]) -> Value:
    """J (..., n, n) rotating each pair (p, q) so that the 2 x 2 block [[a_pp, a_pq],
    [a_pq, a_qq]] of the symmetric `gram` becomes diagonal (Golub & Van Loan sym.schur2:
    tau = (a_qq - a_pp) / (2 a_pq), t = sign(tau) / (|tau| + sqrt(1 + tau^2)),
    c = 1 / sqrt(1 + t^2), s = t c; J_pp = J_qq = c, J_pq = s, J_qp = -s)."""
    flat = m.op("reshape", gram, shape=(*batch, n * n))
    last = len(batch)

    def pick(index: list[int]) -> Value:
        return m.op("gather", flat, m.const(np.array(index), DType.INT64), axis=last)
    app = pick([p * n + p for p, _ in pairs])
    aqq = pick([q * n + q for _, q in pairs])
    apq = pick([p * n + q for p, q in pairs])
    zero, one = m.zero(), m.const(1.0)
    nonzero = m.op("not_equal", apq, zero)
    tau = m.op("div", m.op("sub", aqq, app),
               m.op("mul", m.const(2.0), m.where(nonzero, apq, one)))
    root = m.op("sqrt", m.op("add", one, m.op("mul", tau, tau)))
    t = m.op("div", m.where(m.op("greater_equal", tau, zero), one, m.const(-1.0)),
             m.op("add", m.op("abs", tau), root))
    t = m.where(nonzero, t, zero)
    c = m.op("div", one, m.op("sqrt", m.op("add", one, m.op("mul", t, t))))
    s = m.op("mul", t, c)
    diag = np.zeros((len(pairs), n * n))
    off = np.zeros((len(pairs), n * n))
    for i, (p, q) in enumerate(pairs):
        diag[i, p * n + p] = diag[i, q * n + q] = 1.0
        off[i, p * n + q], off[i, q * n + p] = 1.0, -1.0
    j = m.op("add", m.const(np.eye(n).reshape(n * n)),
             m.op("add", m.op("matmul", m.op("sub", c, one), m.const(diag)),
                  m.op("matmul", s, m.const(off))))
    return m.op("reshape", j, shape=(*batch, n, n))


def _by_columns(m: _M, x: Value, order: Value, shape: list[int]) -> Value:
    """x's columns in `order` (..., n): y[:, j] = x[:, order[j]]."""
    idx = m.op("expand", m.op("unsqueeze", order, axes=(m.rank - 2,)), shape=tuple(shape))
    return m.op("gather_elements", x, idx, axis=m.rank - 1)


def _column_signs(m: _M, x: Value) -> Value:
    """+-1 (..., 1, c): the sign of each column's largest-magnitude entry (the first of
    equal ones; +1 for a zero column), the registry references' sign rule."""
    peak = m.op("argmax", m.op("abs", x), axis=m.rank - 2, keepdims=True)
    value = m.op("gather_elements", x, peak, axis=m.rank - 2)
    return m.where(m.op("less", value, m.zero()), m.const(-1.0), m.const(1.0))


def _eigh(m: _M, a: Value, shape: list[int], upper: bool,
          vectors: bool) -> tuple[Value, Value | None]:
    n, batch = shape[-1], shape[:-2]
    tri = np.triu(np.ones((n, n), bool)) if upper else np.tril(np.ones((n, n), bool))
    s = m.where(m.mask(tri), a, m.t(a))  # the triangle read, mirrored
    v = m.op("expand", m.const(np.eye(n)), shape=tuple(shape)) if vectors else None
    for _ in range(jacobi_sweeps(n)):
        for pairs in _rounds(n):
            j = _rotation(m, s, pairs, n, batch)
            s = m.op("matmul", m.t(j), m.op("matmul", s, j))
            if v is not None:
                v = m.op("matmul", v, j)
    flat = m.op("reshape", s, shape=(*batch, n * n))
    w = m.op("gather", flat, m.const(np.arange(n) * (n + 1), DType.INT64), axis=len(batch))
    w, order = m.gb.op_multi("sort", [w], {"axis": len(batch), "descending": False})
    if v is not None:
        v = _by_columns(m, v, order, shape)
        v = m.op("mul", v, _column_signs(m, v))
    return w, v


def eigh_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("eigh", gb, xs, jacobi=True)
    if 0 in shape:
        return [*_empty_outputs(m, [(shape[:-1], dtype)]), m.op("identity", a)]
    w, v = _eigh(m, m.f64(a), shape, bool(attrs["upper"]), True)
    assert v is not None
    return [m.cast(w, dtype), m.cast(v, dtype)]


def eigvalsh_decompose(gb: GraphBuilder, xs: list[Value | None],
                       attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("eigvalsh", gb, xs, jacobi=True)
    if 0 in shape:
        return _empty_outputs(m, [(shape[:-1], dtype)])
    w, _ = _eigh(m, m.f64(a), shape, bool(attrs["upper"]), False)
    return [m.cast(w, dtype)]


def _svd(m: _M, a: Value, shape: list[int],
         vectors: bool) -> tuple[Value | None, Value, Value | None]:
    """(U (..., m, k), S (..., k) descending, V (..., n, k)) by one-sided Jacobi on the
    columns of a (of a^T when m < n, U and V swapped back)."""
    batch, rows_n, cols_n = shape[:-2], shape[-2], shape[-1]
    wide = rows_n < cols_n
    g = m.t(a) if wide else a
    big, k = max(rows_n, cols_n), min(rows_n, cols_n)
    v = m.op("expand", m.const(np.eye(k)), shape=(*batch, k, k)) if vectors else None
    for _ in range(jacobi_sweeps(k)):
        for pairs in _rounds(k):
            j = _rotation(m, m.op("matmul", m.t(g), g), pairs, k, batch)
            g = m.op("matmul", g, j)
            if v is not None:
                v = m.op("matmul", v, j)
    sigma = m.op("sqrt", m.op("reduce_sum", m.op("mul", g, g), axes=(len(batch),),
                              keepdims=False))
    sigma, order = m.gb.op_multi("sort", [sigma], {"axis": len(batch), "descending": True})
    if v is None:
        return None, sigma, None
    g = _by_columns(m, g, order, [*batch, big, k])
    v = _by_columns(m, v, order, [*batch, k, k])
    row = m.op("unsqueeze", sigma, axes=(len(batch),))
    u = _complete(m, m.op("div", g, row), row, [*batch, big, k])
    if wide:
        u, v = v, u
    signs = _column_signs(m, u)
    return m.op("mul", u, signs), sigma, m.op("mul", v, signs)


def _complete(m: _M, u: Value, sigma: Value, shape: list[int]) -> Value:
    """u's columns (..., r, k) for singular values at most k eps sigma_max (g / sigma is
    rounding noise there, or 0 / 0) replaced, in order, by an orthonormal completion: the
    largest column of (I - U U^T), U the columns before, normalised (r >= k, so one has
    squared norm >= (r - i) / r >= 1 / r). Those columns are not unique; this makes U
    orthonormal like LAPACK's."""
    rows_n, k = shape[-2], shape[-1]
    largest = m.op("reduce_max", sigma, axes=(m.rank - 1,), keepdims=True)
    tol = m.op("mul", largest, m.const(k * float(np.finfo(np.float64).eps)))
    small = m.op("less_equal", sigma, tol)  # (..., 1, k)
    eye = m.const(np.eye(rows_n))
    for i in range(k):
        before = m.where(m.col_mask(k, lambda c, i=i: c < i), u, m.zero())
        rest = m.op("sub", eye, m.op("matmul", before, m.t(before)))
        norms = m.op("reduce_sum", m.op("mul", rest, rest), axes=(m.rank - 2,), keepdims=True)
        pick = m.op("argmax", norms, axis=m.rank - 1, keepdims=True)  # (..., 1, 1)
        spread = m.op("expand", pick, shape=(*shape[:-2], rows_n, 1))
        col = m.op("gather_elements", rest, spread, axis=m.rank - 1)
        col = m.op("div", col, m.op("sqrt", m.op("gather_elements", norms, pick,
                                                 axis=m.rank - 1)))
        here = m.op("logical_and", m.col_mask(k, lambda c, i=i: c == i), small)
        u = m.where(here, col, u)
    return u


def svd_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("svd", gb, xs, jacobi=True)
    batch = shape[:-2]
    rows_n, cols_n = shape[-2], shape[-1]
    k = min(rows_n, cols_n)
    if bool(attrs["full_matrices"]) and rows_n != cols_n and k > 0:
        raise OpError(f"svd: full_matrices of a {rows_n} x {cols_n} matrix needs a basis of "
                      "the null space, which is not unique (LAPACK's own cannot be "
                      "reproduced); only full_matrices=False or square matrices decompose")
    if 0 in shape:
        full = bool(attrs["full_matrices"])
        u_cols, v_rows = (rows_n, cols_n) if full else (k, k)
        eye_u = np.broadcast_to(np.eye(rows_n, u_cols), (*batch, rows_n, u_cols))
        eye_v = np.broadcast_to(np.eye(v_rows, cols_n), (*batch, v_rows, cols_n))
        return [m.const(np.ascontiguousarray(eye_u), dtype),
                *_empty_outputs(m, [([*batch, k], dtype)]),
                m.const(np.ascontiguousarray(eye_v), dtype)]
    u, s, v = _svd(m, m.f64(a), shape, True)
    assert u is not None and v is not None
    return [m.cast(u, dtype), m.cast(s, dtype), m.cast(m.t(v), dtype)]


def svdvals_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("svdvals", gb, xs, jacobi=True)
    if 0 in shape:
        return _empty_outputs(m, [([*shape[:-2], min(shape[-2:])], dtype)])
    _, s, _ = _svd(m, m.f64(a), shape, False)
    return [m.cast(s, dtype)]


# -- symmetric indefinite LDL^T (sytf2 / sytrs, Bunch-Kaufman, lower) ------------------------
# sytrf calls the unblocked sytf2 for n <= 64 (its block size), whose pivoting is replayed
# here step by step. At step k, with alpha = (1 + sqrt(17)) / 8, colmax = max |a_ik| over
# i > k (imax the first such row) and rowmax = max |a_j,imax| over j >= k, j != imax: a
# 1 x 1 pivot at k when |a_kk| >= alpha colmax or |a_kk| >= alpha colmax^2 / rowmax (or
# when a_kk and the column are all 0, or a_kk is NaN: no update), else a 1 x 1 pivot at imax
# when |a_imax,imax| >= alpha rowmax, else a 2 x 2 pivot (k, imax). A 2 x 2 pivot consumes
# two steps: the step count is data-dependent, so every step computes both updates and
# selects with `where`, a flag skipping the step that a 2 x 2 pivot consumed. Interchanges
# touch the trailing block A[k:, k:] only, as sytf2's.
# ldl_factor computes in the input's float, float32 included (the one exception to float64
# here): LAPACK decides the pivots on that float's values, and a small pivot amplifies
# the rounding of every later entry, so float64 would differ from eager float32 by more
# than float32's tolerance (1.4e-5 on the OpInfo sample, whose third pivot is 0.073) where
# sytf2's float32 order agrees within 1.7e-6. Checked against torch (MKL) on 320 random
# symmetric matrices of sizes 1 to 8 (194 with 2 x 2 pivots) and 24 of sizes 16 and 33:
# the same pivots, LD within 1.3e-13 (float64).

_BK_ALPHA = (1.0 + np.sqrt(17.0)) / 8.0


def _swap(m: _M, x: Value, i: Value, p: Value, rows_n: int, shape: list[int],
          axis: int) -> Value:
    """x with entries i and p (int64 (..., 1, 1)) of `axis` (rank-2: rows, rank-1: columns)
    interchanged."""
    at = m.const(np.arange(rows_n)[:, None] if axis == m.rank - 2 else np.arange(rows_n)[None, :],
                 DType.INT64)
    idx = m.where(m.op("equal", at, i), p, m.where(m.op("equal", at, p), i, at))
    idx = m.op("expand", idx, shape=tuple(shape))
    return m.op("gather_elements", x, idx, axis=axis)


def _int(m: _M, value: int) -> Value:
    return m.const(value, DType.INT64)


def ldl_factor_decompose(gb: GraphBuilder, xs: list[Value | None],
                         attrs: Attrs) -> list[Value]:
    a, shape, m, dtype = _unary("ldl_factor", gb, xs)
    n, batch, rank = shape[-1], shape[:-2], len(shape)
    # in the input's own float (float32 too): sytrf's pivot tests and its rounding are then
    # the same as LAPACK's on that float (module doc)
    m.work = dtype if dtype in (DType.FLOAT32, F64) else F64
    if 0 in shape:
        return [m.op("identity", a), *_empty_outputs(m, [([*batch, n], DType.INT32)])]
    f = m.f64(a)
    lower = m.mask(np.tril(np.ones((n, n), bool)))
    rows, cols = np.arange(n)[:, None], np.arange(n)[None, :]
    skip = m.mask(np.zeros((1, 1), bool))
    carry = _int(m, 0)
    pivots = []
    for k in range(n):
        s = m.where(lower, f, m.t(f))  # symmetric, from the lower triangle
        akk = m.op("abs", m.entry(k, k, s))
        kk: Value = _int(m, k)
        if k == n - 1:
            kp, two = kk, m.mask(np.zeros((1, 1), bool))
            zero = m.op("logical_or", m.op("equal", akk, m.zero()), m.op("isnan", akk))
        else:
            col = m.op("abs", m.cols(k, k + 1, m.rows(k + 1, n, s)))
            imax = m.op("add", m.op("argmax", col, axis=rank - 2, keepdims=True), _int(m, k + 1))
            colmax = m.op("reduce_max", col, axes=(rank - 2,), keepdims=True)
            zero = m.op("logical_or", m.op("equal", m.op("maximum", akk, colmax), m.zero()),
                        m.op("isnan", akk))
            at_imax = m.op("gather_elements", s, m.op("expand", imax, shape=(*batch, n, 1)),
                           axis=rank - 1)  # column imax
            others = m.op("logical_and", m.row_mask(n, lambda r, k=k: r >= k),
                          m.op("not_equal", m.const(rows, DType.INT64), imax))
            rowmax = m.op("reduce_max", m.where(others, m.op("abs", at_imax), m.zero()),
                          axes=(rank - 2,), keepdims=True)
            aimax = m.op("abs", m.op("gather_elements", at_imax, imax, axis=rank - 2))
            alpha = m.const(_BK_ALPHA)
            at_k = m.op("logical_or", zero, m.op("logical_or",
                        m.op("greater_equal", akk, m.op("mul", alpha, colmax)),
                        m.op("greater_equal", akk, m.op("mul", m.op("mul", alpha, colmax),
                                                        m.op("div", colmax, rowmax)))))
            big = m.op("greater_equal", aimax, m.op("mul", alpha, rowmax))
            two = m.op("logical_and", m.op("logical_not", at_k), m.op("logical_not", big))
            kp = m.where(at_k, kk, imax)
            kk = m.where(two, _int(m, k + 1), kk)
        trailing = m.mask((rows >= k) & (cols >= k))
        swapped = _swap(m, _swap(m, s, kk, kp, n, shape, rank - 2), kk, kp, n, shape, rank - 1)
        moved = m.where(trailing, swapped, f)
        one_step = moved
        if k < n - 1:  # 1 x 1: A22 -= x x^T / d, L's column x / d
            d11 = m.op("div", m.const(1.0), m.entry(k, k, swapped))
            x = m.where(m.row_mask(n, lambda r, k=k: r > k), m.cols(k, k + 1, swapped), m.zero())
            temp = m.op("mul", m.op("neg", d11), m.t(x))
            one = m.where(m.mask((rows > k) & (cols > k)),
                          m.op("add", swapped, m.outer(x, temp)), swapped)
            one = m.where(m.mask((rows > k) & (cols == k)), m.op("mul", x, d11), one)
            one_step = m.where(zero, moved, m.where(trailing, one, f))
        two_step = moved
        if k < n - 2:  # 2 x 2 pivot (k, k+1)
            d21 = m.entry(k + 1, k, swapped)
            d11 = m.op("div", m.entry(k + 1, k + 1, swapped), d21)
            d22 = m.op("div", m.entry(k, k, swapped), d21)
            t = m.op("div", m.const(1.0), m.op("sub", m.op("mul", d11, d22), m.const(1.0)))
            d21 = m.op("div", t, d21)
            below = m.row_mask(n, lambda r, k=k: r >= k + 2)
            xk = m.where(below, m.cols(k, k + 1, swapped), m.zero())
            xk1 = m.where(below, m.cols(k + 1, k + 2, swapped), m.zero())
            wk = m.op("mul", d21, m.op("sub", m.op("mul", d11, xk), xk1))
            wkp1 = m.op("mul", d21, m.op("sub", m.op("mul", d22, xk1), xk))
            block = m.mask((rows >= k + 2) & (cols >= k + 2))
            upd = m.op("sub", m.op("sub", swapped, m.outer(xk, m.t(wk))),
                       m.outer(xk1, m.t(wkp1)))
            two_m = m.where(block, upd, swapped)
            two_m = m.where(m.mask((rows >= k + 2) & (cols == k)), wk, two_m)
            two_m = m.where(m.mask((rows >= k + 2) & (cols == k + 1)), wkp1, two_m)
            two_step = m.where(trailing, two_m, f)
        active = m.op("logical_not", skip)
        f = m.where(active, m.where(two, two_step, one_step), f)
        one_based = m.op("add", kp, _int(m, 1))
        piv = m.where(active, m.where(two, m.op("neg", one_based), one_based), carry)
        pivots.append(m.op("expand", piv, shape=(*batch, 1, 1)))
        carry, skip = piv, m.op("logical_and", active, two)
    ld = m.where(lower, f, m.zero())
    piv_all = m.op("concat", *pivots, axis=rank - 1) if n > 1 else pivots[0]
    piv_all = m.op("cast", m.op("reshape", piv_all, shape=(*batch, n)), dtype=DType.INT32)
    return [m.cast(ld, dtype), piv_all]


def _ldl_rows(m: _M, p: Value, neg: Value, one: int, two: int) -> tuple[Value, Value]:
    """0-based rows of pivot p for a 1 x 1 block (p - 1; `one` when p < 0) and a 2 x 2
    block (-p - 1; `two` when p > 0)."""
    first = m.where(neg, _int(m, one), m.op("sub", p, _int(m, 1)))
    second = m.where(neg, m.op("sub", m.op("neg", p), _int(m, 1)), _int(m, two))
    return first, second


def ldl_solve_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    """sytrs (lower): forward through the pivots (interchange, eliminate with L's column(s),
    divide by the 1 x 1 or 2 x 2 block of D), then backward (L^T, interchange back)."""
    ld, pivots, b = xs[0], xs[1], xs[2]
    shape, b_shape = _shape("ldl_solve", ld), _shape("ldl_solve", b)
    assert ld is not None and pivots is not None and b is not None and b.type is not None
    m = _M(gb, len(b_shape))
    if 0 in b_shape:
        return [m.op("identity", b)]
    n, rank = shape[-1], len(shape)
    a, x = m.f64(ld), m.f64(b)
    piv = m.op("unsqueeze", m.op("cast", pivots, dtype=DType.INT64), axes=(rank - 2,))
    one = m.const(1.0)

    def col(j: int, first: int) -> Value:  # A[first:, j] as a column, zeros above
        return m.where(m.row_mask(n, lambda r: r >= first), m.cols(j, j + 1, a), m.zero())

    def eliminate(x: Value, j: int, first: int) -> Value:  # x[first:] -= A[first:, j] x[j]
        return m.op("sub", x, m.outer(col(j, first), m.rows(j, j + 1, x)))

    def set_row(x: Value, j: int, value: Value) -> Value:
        return m.where(m.row_mask(n, lambda r: r == j), value, x)

    skip = m.mask(np.zeros((1, 1), bool))
    twos, seconds = [], []
    for k in range(n):
        p = m.op("slice", piv, starts=(k,), ends=(k + 1,), axes=(rank - 1,))  # (..., 1, 1)
        neg = m.op("less", p, _int(m, 0))
        active = m.op("logical_not", skip)
        # each branch's interchange computed for every pivot: an index the other branch
        # would read out of range is replaced by a no-op one
        kp1, kp2 = _ldl_rows(m, p, neg, k, k + 1)
        x1 = _swap(m, x, _int(m, k), kp1, n, b_shape, rank - 2)
        if k < n - 1:
            x1 = eliminate(x1, k, k + 1)
        x1 = set_row(x1, k, m.op("mul", m.rows(k, k + 1, x1),
                                 m.op("div", one, m.entry(k, k, a))))
        two = m.mask(np.zeros((1, 1), bool))
        x2 = x1
        if k < n - 1:
            two = m.op("logical_and", active, neg)
            x2 = _swap(m, x, _int(m, k + 1), kp2, n, b_shape, rank - 2)
            if k < n - 2:
                x2 = eliminate(eliminate(x2, k, k + 2), k + 1, k + 2)
            akm1k = m.entry(k + 1, k, a)
            akm1 = m.op("div", m.entry(k, k, a), akm1k)
            ak = m.op("div", m.entry(k + 1, k + 1, a), akm1k)
            denom = m.op("sub", m.op("mul", akm1, ak), one)
            bkm1 = m.op("div", m.rows(k, k + 1, x2), akm1k)
            bk = m.op("div", m.rows(k + 1, k + 2, x2), akm1k)
            x2 = set_row(x2, k, m.op("div", m.op("sub", m.op("mul", ak, bkm1), bk), denom))
            x2 = set_row(x2, k + 1, m.op("div", m.op("sub", m.op("mul", akm1, bk), bkm1),
                                         denom))
        x = m.where(active, m.where(two, x2, x1), x)
        twos.append(two)
        seconds.append(skip)
        skip = two
    for k in range(n - 1, -1, -1):
        p = m.op("slice", piv, starts=(k,), ends=(k + 1,), axes=(rank - 1,))
        kp1, kp2 = _ldl_rows(m, p, m.op("less", p, _int(m, 0)), k, k)
        y = x
        if k < n - 1:
            below = m.rows(k + 1, n, x)
            y = set_row(y, k, m.op("sub", m.rows(k, k + 1, y), m.op(
                "matmul", m.t(m.rows(k + 1, n, m.cols(k, k + 1, a))), below)))
        y1 = _swap(m, y, _int(m, k), kp1, n, b_shape, rank - 2)
        y2 = y1
        if k > 0:
            if k < n - 1:
                y = set_row(y, k - 1, m.op("sub", m.rows(k - 1, k, y), m.op(
                    "matmul", m.t(m.rows(k + 1, n, m.cols(k - 1, k, a))), below)))
            y2 = _swap(m, y, _int(m, k), kp2, n, b_shape, rank - 2)
        x = m.where(twos[k], x, m.where(seconds[k], y2, y1))
    return [m.cast(x, b.type.dtype)]
