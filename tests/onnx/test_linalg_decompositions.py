"""The linear-algebra registry decompositions (irbridge/ops/_linalg_decomp.py) run through
onnxruntime and the StableHLO reference interpreter against LAPACK itself: eager torch
(float64, its CPU LAPACK: getrf, potrf, geqrf, orgqr, ormqr, getrs) and numpy/scipy.

Inputs include the cases where the data makes a choice: ties in the pivot column (getrf
takes the first), zero pivots (singular matrices: no scaling, det 0, slogdet sign 0 and
-inf), zero columns under the diagonal (geqrf's tau = 0), negative and zero reflector
heads, and matrices whose exponential needs many squarings.

Tolerance: float64 inputs, rtol 1e-9 and atol 1e-10: the decompositions compute in
float64 like LAPACK but in another order (whole-matrix outer-product updates); on these
well-conditioned matrices of size <= 6 the two differ by a few units of 1e-16 times the
condition number (< 1e3 here). Pivots are compared exactly. float32 inputs (computed in
float64 inside, rounded once) get float32's rtol 1e-6 against float64 LAPACK.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numpy as np
import pytest
import torch
from onnxtools import model_of, ort_run

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import build_module, evaluate
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.ir import Graph, TensorType
from irbridge.ops._linalg_decomp import UNROLL_LIMIT

RTOL, ATOL = 1e-9, 1e-10


def run_both(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None,
             outputs: int = 1, *, onnx: bool = True
             ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One `op` node on `inputs`: (onnxruntime's outputs, the StableHLO interpreter's).
    Solves of batched matrices keep stablehlo.triangular_solve, which the reference
    interpreter cannot run with batch dims (converters/stablehlo/evaluate.py refuses it):
    their interpreter results are the unbatched matrices' one by one, stacked."""
    graph = Graph(op)
    values = [graph.add_input(f"x{i}", TensorType(DType.from_numpy(x.dtype), x.shape))
              for i, x in enumerate(inputs)]
    outs = GraphBuilder(graph).op_multi(op, values, attrs or {}, num_outputs=outputs)
    graph.set_outputs(outs)
    model = model_of(graph)
    feeds = {f"x{i}": x for i, x in enumerate(inputs)}
    got_onnx = ort_run(to_onnx(model), feeds) if onnx else []
    module = build_module(model)
    if "stablehlo.triangular_solve" in module.text() and inputs[0].ndim > 2:
        parts = [run_both(op, [x[i] for x in inputs], attrs, outputs)[1]
                 for i in range(inputs[0].shape[0])]
        return got_onnx, [np.stack(p) for p in zip(*parts, strict=True)]
    got_shlo = evaluate(module, [feeds[name] for name in module.input_names])
    return got_onnx, got_shlo


def check(got: Sequence[np.ndarray], want: Sequence[Any], rtol: float = RTOL,
          atol: float = ATOL) -> None:
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        w = w.numpy() if isinstance(w, torch.Tensor) else np.asarray(w)
        assert g.shape == w.shape, f"output {index}: {g.shape} != {w.shape}"
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {index}")


def both(op: str, inputs: Sequence[np.ndarray], want: Sequence[Any],
         attrs: dict[str, Any] | None = None, **tol: float) -> None:
    got_onnx, got_shlo = run_both(op, inputs, attrs, len(want))
    check(got_onnx, want, **tol)
    check(got_shlo, want, **tol)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


TIE = np.array([[1.0, 2.0, 0.5], [-1.0, 3.0, 1.0], [1.0, -1.0, 2.0]])
"""Column 0 ties three ways on |a| = 1: getrf keeps row 0 (the first of the largest)."""
SINGULAR = np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]])
"""A zero first column: a zero pivot, which getrf leaves unscaled (info > 0)."""
ZERO_PIVOT = np.array([[4.0, 2.0, 1.0], [2.0, 1.0, 3.0], [1.0, 0.5, 5.0]])
"""The second pivot column is exactly zero after the first step (binary-exact arithmetic)."""


LU_CASES = [rand(2, 4, 4), rand(3, 5, seed=1), rand(5, 3, seed=2), TIE, SINGULAR, ZERO_PIVOT,
            rand(1, 1, seed=3)]


@pytest.mark.parametrize("a", LU_CASES, ids=lambda a: "x".join(map(str, a.shape)))
def test_lu_factor_takes_getrf_pivots(a: np.ndarray) -> None:
    lu, pivots, _ = torch.linalg.lu_factor_ex(t(a))
    both("lu_factor", [a], [lu, pivots])


def test_lu_factor_float32_rounds_once() -> None:
    a = rand(3, 4, 4, seed=5)
    lu, pivots, _ = torch.linalg.lu_factor_ex(t(a))
    both("lu_factor", [a.astype(np.float32)], [lu.numpy().astype(np.float32), pivots],
         rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("a", LU_CASES, ids=lambda a: "x".join(map(str, a.shape)))
def test_lu_unpack_matches_torch(a: np.ndarray) -> None:
    lu, pivots, _ = torch.linalg.lu_factor_ex(t(a))
    p, lower, upper = torch.lu_unpack(lu, pivots)
    both("lu_unpack", [lu.numpy(), pivots.numpy()], [p, lower, upper])


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_every_side_and_adjoint(left: bool, adjoint: bool) -> None:
    a, b = rand(2, 4, 4, seed=6), rand(2, 4, 3, seed=7) if left else rand(2, 3, 4, seed=7)
    lu, pivots, _ = torch.linalg.lu_factor_ex(t(a))
    x = torch.linalg.lu_solve(lu, pivots, t(b), left=left, adjoint=adjoint)
    both("lu_solve", [lu.numpy(), pivots.numpy(), b], [x], {"left": left, "adjoint": adjoint})


def test_solve_and_inverse_match_lapack() -> None:
    a, b = rand(3, 5, 5, seed=8), rand(3, 5, 2, seed=9)
    both("solve", [a, b], [np.linalg.solve(a, b)])
    both("inverse", [a], [np.linalg.inv(a)])
    both("inverse", [TIE], [np.linalg.inv(TIE)])
    both("inverse", [a.astype(np.float32)], [np.linalg.inv(a).astype(np.float32)],
         rtol=1e-5, atol=1e-5)


def test_det_and_slogdet_of_regular_and_singular_matrices() -> None:
    a = np.stack([rand(4, 4, seed=10), np.pad(SINGULAR, ((0, 1), (0, 1))), -np.eye(4),
                  rand(4, 4, seed=11)])
    sign, logabs = np.linalg.slogdet(a)
    assert sign[1] == 0 and np.isneginf(logabs[1]) and sign[2] == 1  # the special cases
    # det: ONNX Det (float32 only) is onnxruntime's own; StableHLO takes the decomposition
    _, got_shlo = run_both("det", [a], onnx=False)
    check(got_shlo, [np.linalg.det(a)])
    both("slogdet", [a], [sign, logabs])


def test_empty_matrices_follow_torch() -> None:
    empty = np.zeros((2, 0, 0))
    sign, logabs = torch.linalg.slogdet(t(empty))
    both("slogdet", [empty], [sign, logabs])
    both("inverse", [empty], [empty])


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_reads_one_triangle(upper: bool) -> None:
    g = rand(2, 5, 5, seed=12)
    spd = g @ np.swapaxes(g, -1, -2) + 5 * np.eye(5)
    want = torch.linalg.cholesky(t(spd), upper=upper)
    junk = np.triu(rand(2, 5, 5, seed=13), 1)  # written over the triangle not read
    a = spd + (np.swapaxes(junk, -1, -2) if upper else junk)
    both("cholesky", [a], [want], {"upper": upper})


QR_CASES = [rand(2, 5, 3, seed=14), rand(3, 5, seed=15), rand(4, 4, seed=16),
            # zero column below the diagonal (tau 0), a zero and a negative head
            np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 0.0, -2.0], [0.0, 4.0, 1.0]]),
            np.array([[0.0, 1.0], [3.0, 2.0], [4.0, 5.0]])]


@pytest.mark.parametrize("a", QR_CASES, ids=lambda a: "x".join(map(str, a.shape)))
def test_geqrf_householder_product_and_qr_follow_lapack(a: np.ndarray) -> None:
    qr, tau = torch.geqrf(t(a))
    both("geqrf", [a], [qr, tau])
    for complete in (False, True):
        q, r = torch.linalg.qr(t(a), mode="complete" if complete else "reduced")
        both("qr", [a], [q, r], {"complete": complete})
    if a.shape[-2] >= a.shape[-1]:
        both("householder_product", [qr.numpy(), tau.numpy()],
             [torch.linalg.householder_product(qr, tau)])


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr_every_side_and_transpose(left: bool, transpose: bool) -> None:
    a = rand(2, 5, 3, seed=17)
    qr, tau = torch.geqrf(t(a))
    c = rand(2, 5, 4, seed=18) if left else rand(2, 4, 5, seed=18)
    want = torch.ormqr(qr, tau, t(c), left=left, transpose=transpose)
    both("ormqr", [qr.numpy(), tau.numpy(), c], [want], {"left": left, "transpose": transpose})


EXPM_CASES = {"small": rand(3, 3, seed=19) * 0.1, "unit": rand(2, 4, 4, seed=20),
              "squarings": rand(4, 4, seed=21) * 20, "zero": np.zeros((3, 3)),
              "one": np.array([[-2.5]]), "nilpotent": np.triu(np.ones((4, 4)), 1)}


@pytest.mark.parametrize("name", sorted(EXPM_CASES))
def test_matrix_exp_matches_scipy(name: str) -> None:
    """Against mpmath's expm at 60 digits (scipy's own float64 expm is off by 1e-14 of the
    largest entry on the squarings case); the squarings amplify rounding, so the
    tolerance is relative to the largest entry."""
    a = EXPM_CASES[name].astype(np.float32).astype(np.float64)  # the float32 run's input too
    mpmath.mp.dps = 60
    flat = a.reshape(-1, *a.shape[-2:])
    want = np.stack([np.array(mpmath.expm(mpmath.matrix(x.tolist())).tolist(), np.float64)
                     for x in flat]).reshape(a.shape)
    scale = np.abs(want).max()
    both("matrix_exp", [a], [want], rtol=1e-9, atol=1e-12 * scale)
    both("matrix_exp", [a.astype(np.float32)], [want.astype(np.float32)], rtol=1e-6,
         atol=1e-7 * scale)


def test_matrix_exp_beyond_the_squarings_is_nan_not_wrong() -> None:
    a = np.array([[1e30, 0.0], [0.0, -1e30]])
    got_onnx, got_shlo = run_both("matrix_exp", [a])
    assert np.isnan(got_onnx[0]).all() and np.isnan(got_shlo[0]).all()


@pytest.mark.parametrize("op,make", [
    ("inverse", lambda n: [np.eye(n)]),
    ("lu_factor", lambda n: [np.eye(n)]),
    ("geqrf", lambda n: [np.ones((n, 2))]),
    ("matrix_exp", lambda n: [np.eye(n)]),
])
def test_matrices_above_the_unroll_limit_are_refused_in_one_line(
        op: str, make: Callable[[int], list[np.ndarray]]) -> None:
    with pytest.raises(ExportError, match=rf"node #0 {op}: .*stops at {UNROLL_LIMIT}") as info:
        run_both(op, make(UNROLL_LIMIT + 1), outputs=2 if op in ("lu_factor", "geqrf") else 1)
    assert "\n" not in str(info.value)


# -- eigh / svd by Jacobi: values against LAPACK, vectors by the registry's sign rule ----------


def signed(v: np.ndarray) -> np.ndarray:
    """+-1 per column: the sign of its largest-magnitude entry (the registry's rule)."""
    peak = np.take_along_axis(v, np.abs(v).argmax(axis=-2)[..., None, :], axis=-2)
    return np.where(peak < 0, -1.0, 1.0)


def clustered(n: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(rand(n, n, seed=seed))
    return q @ np.diag(np.r_[np.full(n // 2, 2.0), 1 + 1e-6 * np.arange(n - n // 2)]) @ q.T


EIGH_CASES = {"batch": rand(2, 5, 5, seed=22), "graded": rand(6, 6, seed=23) *
              np.logspace(0, 6, 6)[:, None], "clustered": clustered(5, 24),
              "diagonal": np.diag([3.0, -1.0, 2.0]), "one": np.array([[-4.0]])}


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("name", sorted(EIGH_CASES))
def test_eigh_values_match_lapack_and_vectors_diagonalise(name: str, upper: bool) -> None:
    """Eigenvalues against LAPACK's (rtol 1e-9 of the largest: Jacobi and QR iteration agree
    to a few eps times the norm); eigenvectors, unique only for distinct eigenvalues, are
    checked by A V = V diag(w) and V^T V = I, and against LAPACK's after the sign rule where
    the eigenvalues are well separated (gap > 1e-3)."""
    raw = EIGH_CASES[name]
    w_ref, v_ref = np.linalg.eigh(raw, UPLO="U" if upper else "L")
    scale = np.abs(w_ref).max()
    for got in run_both("eigh", [raw], {"upper": upper}, 2):
        w, v = got
        np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-12 * scale)
        tri = np.triu(raw) if upper else np.tril(raw)
        a = tri + np.swapaxes(np.triu(raw, 1) if upper else np.tril(raw, -1), -1, -2)
        np.testing.assert_allclose(a @ v, v * w[..., None, :], rtol=0, atol=1e-11 * scale)
        eye = np.broadcast_to(np.eye(w.shape[-1]), v.shape)
        np.testing.assert_allclose(np.swapaxes(v, -1, -2) @ v, eye, atol=1e-12)
        np.testing.assert_array_equal(signed(v), np.ones_like(signed(v)))
        if name != "clustered":
            np.testing.assert_allclose(v, v_ref * signed(v_ref), atol=1e-9)
    for got in run_both("eigvalsh", [raw], {"upper": upper}):
        np.testing.assert_allclose(got[0], w_ref, rtol=0, atol=1e-12 * scale)


SVD_CASES = {"tall": rand(2, 6, 4, seed=25), "wide": rand(3, 5, seed=26),
             "square": rand(5, 5, seed=27), "zero": np.zeros((4, 3)),
             "rank_two": rand(5, 2, seed=28) @ rand(2, 4, seed=29),
             "repeated": np.hstack([rand(4, 2, seed=30)] * 2)}


@pytest.mark.parametrize("name", sorted(SVD_CASES))
def test_svd_values_match_lapack_and_factors_are_orthonormal(name: str) -> None:
    """Singular values against LAPACK's (atol 1e-12 of the largest); U diag(S) Vh = A; U and
    V orthonormal even where singular values are 0 (rank-deficient: the completion); the
    vectors of distinct nonzero singular values equal LAPACK's after the sign rule."""
    a = SVD_CASES[name]
    u_ref, s_ref, vh_ref = np.linalg.svd(a, full_matrices=False)
    scale = max(float(s_ref.max(initial=0.0)), 1.0)
    for u, s, vh in run_both("svd", [a], {"full_matrices": False}, 3):
        np.testing.assert_allclose(s, s_ref, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(u * s[..., None, :] @ vh, a, rtol=0, atol=1e-11 * scale)
        k = s.shape[-1]
        for q in (u, np.swapaxes(vh, -1, -2)):
            eye = np.broadcast_to(np.eye(k), (*q.shape[:-2], k, k))
            np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, eye, atol=1e-12)
        np.testing.assert_array_equal(signed(u), np.ones_like(signed(u)))
        distinct = s_ref > 1e-8 * scale
        if name in ("tall", "wide", "square"):
            assert distinct.all()
            flip = signed(u_ref)
            np.testing.assert_allclose(u, u_ref * flip, atol=1e-9)
            np.testing.assert_allclose(vh, vh_ref * np.swapaxes(flip, -1, -2), atol=1e-9)
    for got in run_both("svdvals", [a]):
        np.testing.assert_allclose(got[0], s_ref, rtol=0, atol=1e-12 * scale)


def test_svd_matches_torch_float32_within_the_sweep_tolerance() -> None:
    """float32 in, float64 inside: S within torch.testing's float32 tolerance of eager."""
    a = rand(6, 4, seed=31).astype(np.float32)
    s = torch.linalg.svdvals(t(a))
    both("svdvals", [a], [s], rtol=1.3e-6, atol=1e-5)


def test_svd_full_matrices_of_a_non_square_matrix_is_refused() -> None:
    with pytest.raises(ExportError, match=r"node #0 svd: .*null space, which is not unique"):
        run_both("svd", [rand(4, 3)], {"full_matrices": True}, 3)
    square = rand(3, 3, seed=32)
    u, s, vh = np.linalg.svd(square)
    flip = signed(u)
    both("svd", [square], [u * flip, s, vh * np.swapaxes(flip, -1, -2)],
         {"full_matrices": True}, rtol=0, atol=1e-9)


def test_jacobi_above_its_limit_is_refused_in_one_line() -> None:
    from irbridge.ops._linalg_decomp import JACOBI_LIMIT

    with pytest.raises(ExportError, match=rf"node #0 eigvalsh: .*stops at {JACOBI_LIMIT}") \
            as info:
        run_both("eigvalsh", [np.eye(JACOBI_LIMIT + 1)], {"upper": False})
    assert "\n" not in str(info.value)


# -- LDL^T with Bunch-Kaufman pivoting ---------------------------------------------------------


def ldl_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(33)
    sym = rng.standard_normal((6, 5, 5))
    sym = sym + np.swapaxes(sym, -1, -2)
    sym[1::2, np.arange(5), np.arange(5)] *= 0.01  # small diagonals: 2 x 2 pivots
    zero_col = sym[0].copy()
    zero_col[:, 2] = zero_col[2, :] = 0.0  # a zero pivot column (info > 0, no update)
    return {"batch": sym, "zero_column": zero_col,
            "swap_2x2": np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]]),
            "last_2x2": np.array([[4.0, 1.0, 0.5], [1.0, 0.0, 3.0], [0.5, 3.0, 0.0]]),
            "one": np.array([[-2.0]])}


LDL_CASES = ldl_cases()


@pytest.mark.parametrize("name", sorted(LDL_CASES))
def test_ldl_factor_takes_sytrf_pivots_and_ldl_solve_follows_sytrs(name: str) -> None:
    """Pivots exactly LAPACK's (torch.linalg.ldl_factor, sytrf: 1 x 1 and 2 x 2 blocks, both
    interchange kinds); LD and the solve within float64 rounding of LAPACK's."""
    a = LDL_CASES[name]
    junk = np.triu(rand(*a.shape, seed=34), 1)  # the upper triangle is not read
    ld, pivots, info = torch.linalg.ldl_factor_ex(t(a))  # zero_column: info 3, no raise
    assert bool((info != 0).any()) == (name == "zero_column")
    if name in ("batch", "swap_2x2", "last_2x2"):
        assert (pivots < 0).any()  # the case exercises 2 x 2 pivots
    both("ldl_factor", [np.tril(a) + junk], [ld, pivots])
    b = rand(*a.shape[:-1], 2, seed=35)
    if name != "zero_column":  # singular: LAPACK divides by the zero pivot too
        want = torch.linalg.ldl_solve(ld, pivots, t(b))
        both("ldl_solve", [ld.numpy(), pivots.numpy(), b], [want])


def test_ldl_factor_in_float32_matches_eager_float32() -> None:
    """float32 in: sytf2's order in float32, so LD is within the sweep's float32 tolerance of
    eager (float64 would differ by eager's own rounding, amplified by small pivots)."""
    a = LDL_CASES["batch"].astype(np.float32)
    ld, pivots = torch.linalg.ldl_factor(t(a))
    both("ldl_factor", [a], [ld, pivots], rtol=1.3e-6, atol=1e-5)
