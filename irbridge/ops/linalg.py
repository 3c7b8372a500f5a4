"""Linear algebra (issue 13): inverse, determinant, Cholesky factor and linear solve of
square matrices, batched over leading dims.

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
from typing import Any

import numpy as np

from irbridge.ir import Dim, TensorType
from irbridge.ops._numeric import widen
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


def _solve_infer(ctx: OpContext) -> list[TensorType]:
    a = _square(ctx)
    b = ctx.input(1)
    if b.dtype != a.dtype:
        raise ctx.fail(f"a is {a.dtype.short} but b is {b.dtype.short}")
    if a.shape is not None and b.shape is not None:
        if len(b.shape) != len(a.shape):
            raise ctx.fail(f"b must have a's rank {len(a.shape)} (matrix right-hand sides), "
                           f"got rank {len(b.shape)}")
        n, rows = a.shape[-1], b.shape[-2]
        if isinstance(n, int) and isinstance(rows, int) and n != rows:
            raise ctx.fail(f"a is {n} x {n} but b has {rows} rows")
        for da, db in zip(a.shape[:-2], b.shape[:-2], strict=True):
            if isinstance(da, int) and isinstance(db, int) and da != db:
                raise ctx.fail(f"batch dims differ: a {list(a.shape)}, b {list(b.shape)}")
    return [b]


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
       reference=_ref(np.linalg.inv),
       doc="Inverse of each square matrix in the last two dims (torch.linalg.inv); a singular "
           "matrix gives an error in the reference.")
define("det", Category.LINALG, inputs=inputs("a"), infer=_det_infer,
       cost=_per_matrix(lambda n, k: 2 * n ** 3 / 3),
       cost_doc="batch x 2n^3/3 (LU factorisation)", reference=_ref(np.linalg.det),
       doc="Determinant of each square matrix in the last two dims (torch.linalg.det, ONNX "
           "Det); the output drops those two dims.")
define("cholesky", Category.LINALG, inputs=inputs("a"), infer=_same_infer,
       attrs=(attr("upper", AttrKind.BOOL, False, "return U = L^H instead of L"),),
       cost=_per_matrix(lambda n, k: n ** 3 / 3), cost_doc="batch x n^3/3",
       reference=_ref(_cholesky),
       doc="Cholesky factor L (A = L L^H) of each symmetric positive-definite matrix in the "
           "last two dims (torch.linalg.cholesky); only the lower triangle of A is read.")
define("solve", Category.LINALG, inputs=inputs("a", "b"), infer=_solve_infer,
       cost=_per_matrix(lambda n, k: 2 * n ** 3 / 3 + 2 * n * n * k),
       cost_doc="batch x (2n^3/3 + 2n^2 k) for k right-hand sides (LU + two triangular solves)",
       reference=_ref(np.linalg.solve),
       doc="X with A X = B for each square A (torch.linalg.solve, left=True); B has A's rank "
           "(matrix right-hand sides).")
