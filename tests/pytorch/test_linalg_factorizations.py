"""Linear algebra beyond inv/det/cholesky/solve (issue 13): the ATen forms torch.export leaves
for slogdet, SVD, eigh, QR, the LU family, triangular solves, pinv, cholesky_solve /
cholesky_inverse, matrix_exp, polar, matrix_sqrth, geqrf / householder_product / ormqr,
ldl_factor / ldl_solve and the `_ex` variants capture with no opaque node, and the IR
executor matches eager torch on an example input and on a second, perturbed one.

Inputs are well conditioned so that float32 LAPACK (eager) and the float64 references
rounded to float32 agree to a few float32 ulps times the condition number: general
matrices are 2I + 0.3 G (G standard normal; I rectangular for m x n: singular values within
about [1, 3.5]),
symmetric positive-definite ones G G^T / 4 + I (the test asserts cond < 50), triangles have
diagonals in [2, 3]. Relative errors are then of order n * cond * eps = 4 * 50 * 6e-8 =
1.2e-5, so rtol 1e-4 leaves a margin of 8; atol 1e-5 covers entries that cancel to near
zero (all results here are O(1)-O(10) in size).

Singular vectors and eigenvectors are unique only up to sign and LAPACK builds choose
differently (irbridge/ops/linalg.py): they are compared after flipping each eager vector to
the IR's sign, and the IR's own sign rule (largest-magnitude entry positive) is checked
separately.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torchtools import FnModule

from irbridge.converters.pytorch import capture
from irbridge.executor import run_graphs
from irbridge.ops import node_cost

TOL = {"rtol": 1e-4, "atol": 1e-5}
Maker = Callable[[torch.Generator], tuple[torch.Tensor, ...]]


def _general(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return 2 * torch.eye(*shape[-2:]) + 0.3 * torch.randn(shape, generator=gen)


def _spd(gen: torch.Generator, *batch: int, n: int = 4) -> torch.Tensor:
    g = torch.randn((*batch, n, n), generator=gen)
    a = g @ g.mT / 4 + torch.eye(n)
    assert float(torch.linalg.cond(a.double()).max()) < 50
    return a


def _triangle(gen: torch.Generator, *shape: int, upper: bool) -> torch.Tensor:
    """Diagonal in [2, 3]; the other triangle holds large junk that must not be read."""
    n = shape[-1]
    body = 0.3 * torch.randn(shape, generator=gen)
    diag = torch.diag_embed(2 + torch.rand(shape[:-1], generator=gen)) - torch.diag_embed(
        torch.diagonal(body, dim1=-2, dim2=-1))
    junk = 50 * torch.ones(shape)
    keep = torch.triu(torch.ones(n, n)) if upper else torch.tril(torch.ones(n, n))
    return (body + diag) * keep + junk * (1 - keep)


def _rhs(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=gen)


def _indefinite(gen: torch.Generator, *batch: int) -> torch.Tensor:
    """Symmetric, eigenvalues near +-2, small diagonal (Bunch-Kaufman takes 2 x 2 pivots);
    junk above the diagonal, which ldl_factor must not read."""
    base = torch.tensor([[0.1, 2.0, 0.3, 0.1], [2.0, 0.1, 0.2, 0.3],
                         [0.3, 0.2, 0.1, 2.0], [0.1, 0.3, 2.0, 0.1]])
    noise = 0.05 * torch.randn((*batch, 4, 4), generator=gen)
    sym = base + noise + noise.mT
    return torch.tril(sym) + torch.triu(9 * torch.ones(4, 4), 1)


def _lu(gen: torch.Generator, *shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    lu, pivots = torch.linalg.lu_factor(_general(gen, *shape))
    return lu, pivots


CASES: dict[str, tuple[Callable[..., Any], Maker]] = {
    # _linalg_check_errors (no node), _linalg_solve_ex with a vector and a batch broadcast
    "solve_vector": (torch.linalg.solve, lambda g: (_general(g, 2, 4, 4), _rhs(g, 4))),
    "solve_broadcast": (torch.linalg.solve, lambda g: (_general(g, 4, 4), _rhs(g, 2, 4, 3))),
    "solve_right": (lambda a, b: torch.linalg.solve(a, b, left=False),
                    lambda g: (_general(g, 2, 4, 4), _rhs(g, 2, 3, 4))),
    "solve_ex": (lambda a, b: tuple(torch.linalg.solve_ex(a, b)),
                 lambda g: (_general(g, 4, 4), _rhs(g, 4, 2))),
    "inv_ex": (lambda a: tuple(torch.linalg.inv_ex(a)), lambda g: (_general(g, 2, 4, 4),)),
    "cholesky_ex": (lambda a: tuple(torch.linalg.cholesky_ex(a, upper=True)),
                    lambda g: (_spd(g, 2),)),
    "tensorinv": (lambda a: torch.linalg.tensorinv(a, ind=2),
                  lambda g: (_general(g, 4, 4).reshape(2, 2, 4),)),
    "slogdet": (lambda a: tuple(torch.linalg.slogdet(a)), lambda g: (_general(g, 3, 4, 4),)),
    "slogdet_negative": (lambda a: tuple(torch.linalg.slogdet(a)),
                         lambda g: (_general(g, 4, 4) * torch.tensor([-1.0, 1, 1, 1]),)),
    "logdet": (torch.logdet, lambda g: (_spd(g, 2),)),
    "svdvals": (torch.linalg.svdvals, lambda g: (_general(g, 2, 3, 5),)),
    "cond": (torch.linalg.cond, lambda g: (_general(g, 4, 4),)),
    "matrix_rank": (torch.linalg.matrix_rank,
                    lambda g: (_general(g, 4, 3) @ _general(g, 3, 4) / 2,)),  # rank 3
    "nuclear_norm": (lambda a: torch.linalg.matrix_norm(a, "nuc"),
                     lambda g: (_general(g, 2, 4, 4),)),
    "eigvalsh": (lambda a: torch.linalg.eigvalsh(a, UPLO="U"), lambda g: (_spd(g, 2),)),
    "qr_reduced": (lambda a: tuple(torch.linalg.qr(a)), lambda g: (_general(g, 2, 5, 3),)),
    "qr_complete": (lambda a: tuple(torch.linalg.qr(a, mode="complete")),
                    lambda g: (_general(g, 5, 3),)),
    "qr_r": (lambda a: torch.linalg.qr(a, mode="r")[1], lambda g: (_general(g, 3, 5),)),
    "lu_factor": (lambda a: tuple(torch.linalg.lu_factor(a)), lambda g: (_general(g, 2, 4, 4),)),
    "lu_factor_wide": (lambda a: tuple(torch.linalg.lu_factor_ex(a)),
                       lambda g: (_general(g, 3, 5),)),
    "lu": (lambda a: tuple(torch.linalg.lu(a)), lambda g: (_general(g, 2, 5, 3),)),
    "lu_unpack": (lambda lu, p: tuple(torch.lu_unpack(lu, p)), lambda g: _lu(g, 2, 4, 4)),
    "lu_solve": (lambda lu, p, b: torch.linalg.lu_solve(lu, p, b),
                 lambda g: (*_lu(g, 2, 4, 4), _rhs(g, 2, 4, 3))),
    "lu_solve_right_adjoint": (
        lambda lu, p, b: torch.linalg.lu_solve(lu, p, b, left=False, adjoint=True),
        lambda g: (*_lu(g, 4, 4), _rhs(g, 3, 4))),
    "solve_triangular_lower": (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=False),
        lambda g: (_triangle(g, 2, 4, 4, upper=False), _rhs(g, 2, 4, 3))),
    "solve_triangular_upper_right_unit": (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True, left=False,
                                                   unitriangular=True),
        lambda g: (_triangle(g, 4, 4, upper=True), _rhs(g, 2, 3, 4))),
    "triangular_solve_transpose": (
        lambda b, a: tuple(torch.triangular_solve(b, a, upper=True, transpose=True)),
        lambda g: (_rhs(g, 4, 2), _triangle(g, 4, 4, upper=True))),
    "cholesky_solve": (lambda b, f: torch.cholesky_solve(b, f),
                       lambda g: (_rhs(g, 2, 4, 3), torch.linalg.cholesky(_spd(g, 2)))),
    "cholesky_solve_upper": (lambda b, f: torch.cholesky_solve(b, f, upper=True),
                             lambda g: (_rhs(g, 4, 3), torch.linalg.cholesky(_spd(g)).mT)),
    "cholesky_inverse": (torch.cholesky_inverse,
                         lambda g: (torch.linalg.cholesky(_spd(g)),)),
    "pinv": (torch.linalg.pinv, lambda g: (_general(g, 2, 5, 3),)),
    "pinv_hermitian": (lambda a: torch.linalg.pinv(a, hermitian=True), lambda g: (_spd(g),)),
    "pinv_atol": (lambda a: torch.linalg.pinv(a, atol=1.5),  # drops the small values
                  lambda g: (torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5])) @ _general(g, 4, 4)
                             / 2,)),
    "matrix_exp": (torch.linalg.matrix_exp, lambda g: (_general(g, 2, 4, 4) / 4,)),
    "geqrf": (lambda a: tuple(torch.geqrf(a)), lambda g: (_general(g, 2, 5, 3),)),
    "geqrf_wide": (lambda a: tuple(torch.geqrf(a)), lambda g: (_general(g, 3, 5),)),
    "householder_product": (torch.linalg.householder_product,
                            lambda g: tuple(torch.geqrf(_general(g, 2, 5, 3)))),
    "householder_product_fewer": (lambda a, t: torch.linalg.householder_product(a, t[..., :2]),
                                  lambda g: tuple(torch.geqrf(_general(g, 4, 3)))),
    "ormqr": (lambda a, t, c: torch.ormqr(a, t, c),
              lambda g: (*torch.geqrf(_general(g, 2, 4, 3)), _rhs(g, 2, 4, 2))),
    "ormqr_right_transpose": (lambda a, t, c: torch.ormqr(a, t, c, left=False, transpose=True),
                              lambda g: (*torch.geqrf(_general(g, 4, 3)), _rhs(g, 2, 4))),
    "ldl_factor": (lambda a: tuple(torch.linalg.ldl_factor(a)), lambda g: (_indefinite(g, 2),)),
    "ldl_factor_ex": (lambda a: tuple(torch.linalg.ldl_factor_ex(a)),
                      lambda g: (_indefinite(g),)),
    "ldl_solve": (lambda ld, p, b: torch.linalg.ldl_solve(ld, p, b),
                  lambda g: (*torch.linalg.ldl_factor(_indefinite(g, 2)), _rhs(g, 2, 4, 3))),
    "polar": (lambda a: tuple(torch.linalg.polar(a)), lambda g: (_general(g, 2, 5, 3),)),
    "matrix_sqrth": (torch.linalg.matrix_sqrth,  # the upper triangle is not read
                     lambda g: (_spd(g, 2) + torch.triu(9 * torch.ones(4, 4), 1),)),
}


def _inputs(make: Maker, perturb: bool) -> tuple[torch.Tensor, ...]:
    return make(torch.Generator().manual_seed(7 if perturb else 3))


def _run(result: Any, args: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    names = [v.name for v in result.model.graphs[0].inputs]
    values = run_graphs(result.model, {n: x.numpy() for n, x in zip(names, args, strict=True)})
    got = []
    for where in result.outputs:
        assert where is not None
        got.append(np.asarray(values[where[0]][where[1]]))
    return got


def _eager(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    with torch.no_grad():
        out = fn(*args)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_capture_matches_eager(name: str) -> None:
    fn, make = CASES[name]
    result = capture(FnModule(fn), _inputs(make, False), frontend="export")
    assert result.opaque_count == 0, result.stats.opaque
    for perturb in (False, True):
        args = _inputs(make, perturb)
        got, want = _run(result, args), _eager(fn, args)
        assert len(got) == len(want)
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.shape == w.shape and g.dtype == w.dtype, (index, g.shape, g.dtype)
            np.testing.assert_allclose(g, w, err_msg=f"{name} output {index}", **TOL)


def _align(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """`want`'s columns flipped to the signs of `got`'s (each pair's dot product >= 0)."""
    dots = np.sum(got * want, axis=-2, keepdims=True)
    return want * np.where(dots < 0, -1, 1)


def _peak_positive(vectors: np.ndarray) -> None:
    """The IR's rule: the largest-magnitude entry of each column is positive."""
    peak = np.take_along_axis(vectors, np.argmax(np.abs(vectors), axis=-2)[..., None, :], -2)
    assert (peak > 0).all()


@pytest.mark.parametrize("full", [False, True], ids=["thin", "full"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 4)], ids=["tall", "wide"])
def test_svd_matches_eager_up_to_sign(shape: tuple[int, ...], full: bool) -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.linalg.svd(a, full_matrices=full))

    make: Maker = lambda g: (_general(g, *shape),)  # noqa: E731
    result = capture(FnModule(fn), _inputs(make, False), frontend="export")
    assert result.opaque_count == 0, result.stats.opaque
    k = min(shape[-2:])
    for perturb in (False, True):
        args = _inputs(make, perturb)
        (u, s, vh), (eu, es, evh) = _run(result, args), _eager(fn, args)
        assert u.shape == eu.shape and s.shape == es.shape and vh.shape == evh.shape
        np.testing.assert_allclose(s, es, **TOL)
        # the first k singular vectors are unique up to sign (distinct singular values)
        flip = np.where(np.sum(u[..., :k] * eu[..., :k], axis=-2) < 0, -1, 1)
        np.testing.assert_allclose(u[..., :k], eu[..., :k] * flip[..., None, :], **TOL)
        np.testing.assert_allclose(vh[..., :k, :], evh[..., :k, :] * flip[..., :, None], **TOL)
        _peak_positive(u)
        # with full_matrices, the rest only spans the null space: check orthonormality
        for q in (u, np.swapaxes(vh, -1, -2)):
            eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2)
            np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, eye, **TOL)
        np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :],
                                   args[0].numpy(), **TOL)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_matches_eager_up_to_sign(uplo: str) -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.linalg.eigh(a, UPLO=uplo))

    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        a = _spd(g, 2)  # distinct eigenvalues; junk in the triangle that is not read
        junk = 9 * torch.ones(4, 4)
        return (a + (torch.triu(junk, 1) if uplo == "L" else torch.tril(junk, -1)),)

    result = capture(FnModule(fn), _inputs(make, False), frontend="export")
    assert result.opaque_count == 0, result.stats.opaque
    for perturb in (False, True):
        args = _inputs(make, perturb)
        (w, v), (ew, ev) = _run(result, args), _eager(fn, args)
        np.testing.assert_allclose(w, ew, **TOL)
        np.testing.assert_allclose(v, _align(v, ev), **TOL)
        _peak_positive(v)


def test_costs_are_the_documented_flop_counts() -> None:
    """Per matrix, from the formulas in irbridge/ops/linalg.py's docs: slogdet (4 x 4)
    2n^3/3 = 43; svd thin (5 x 3, l = 5, k = 3) 14lk^2 + 8k^3 = 630 + 216 = 846; qr reduced
    (5 x 3) 2lk^2 - 2k^3/3 + 2mk^2 - 2k^3/3 = 72 + 72 = 144; lu_factor (4 x 4) 43;
    triangular_solve (4 x 4, 3 right-hand sides) n^2 m = 48; eigh (4 x 4) 9n^3 = 576;
    geqrf (5 x 3) 2lk^2 - 2k^3/3 = 90 - 18 = 72."""
    def fn(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor,
           r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*torch.linalg.slogdet(a), *torch.linalg.svd(t, full_matrices=False),
                *torch.linalg.qr(t), *torch.linalg.lu_factor(a),
                torch.linalg.solve_triangular(a, r, upper=False), *torch.linalg.eigh(b),
                *torch.geqrf(t))

    gen = torch.Generator().manual_seed(1)
    args = (_general(gen, 4, 4), _spd(gen), _general(gen, 5, 3), _rhs(gen, 4, 3))
    result = capture(FnModule(fn), args, frontend="export")
    want = {"slogdet": 43, "svd": 846, "qr": 144, "lu_factor": 43, "triangular_solve": 48,
            "eigh": 576, "geqrf": 72}
    seen = {n.op: node_cost(n).other_flops for _, n in result.model.all_nodes()
            if n.op in want}
    assert seen == want


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_exports_to_onnx_and_matches_eager(name: str) -> None:
    """The factorisations have no ONNX operator (but det): their registry decompositions
    (irbridge/ops/_linalg_decomp.py, triangular_solve's substitution) run in onnxruntime
    and match eager, pivots exactly."""
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx

    fn, make = CASES[name]
    result = capture(FnModule(fn), _inputs(make, False), frontend="export")
    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for perturb in (False, True):
        args = _inputs(make, perturb)
        got = session.run(None, {n: x.numpy() for n, x in zip(names, args, strict=True)})
        for index, (g, w) in enumerate(zip(got, _eager(fn, args), strict=True)):
            np.testing.assert_allclose(g, w, err_msg=f"{name} output {index}", **TOL)


def test_full_svd_of_a_non_square_matrix_is_refused_by_onnx_in_one_line() -> None:
    """full_matrices' extra columns span a null space: no unique export (LAPACK's basis)."""
    from irbridge.converters.onnx import to_onnx
    from irbridge.errors import ExportError

    result = capture(FnModule(lambda a: tuple(torch.linalg.svd(a))),
                     _inputs(lambda g: (_general(g, 5, 3),), False), frontend="export")
    with pytest.raises(ExportError, match=r"node #\d+ svd: .*not unique") as info:
        to_onnx(result.model)
    assert "\n" not in str(info.value)


def test_triangular_solve_too_large_to_unroll_is_refused_by_onnx_in_one_line() -> None:
    from irbridge.converters.onnx import to_onnx
    from irbridge.errors import ExportError
    from irbridge.ops.linalg import UNROLL_LIMIT

    gen = torch.Generator().manual_seed(0)
    n = UNROLL_LIMIT + 1
    args = (_triangle(gen, n, n, upper=False), _rhs(gen, n, 2))
    result = capture(FnModule(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False)),
                     args, frontend="export")
    with pytest.raises(ExportError, match=rf"node #\d+ triangular_solve.*{UNROLL_LIMIT} rows") \
            as info:
        to_onnx(result.model)
    assert "\n" not in str(info.value)
