"""jax.numpy.linalg lowered for CPU: `custom_call @lapack_<s|d><routine>_ffi` (potrf, getrf,
trsm, geqrf, orgqr, syevd, gesdd) import as the neutral linalg ops (they were opaque, so
any program using jnp.linalg had a hole where the factorisation was).

Each program is lowered by JAX itself (batched, float32 and float64) and its outputs are
compared with JAX's: through the IR executor and through the ONNX export in onnxruntime.
Tolerance: 1e-5 of each output's largest magnitude in float32, 1e-10 in float64 (LAPACK in
JAX against the executor's float64 reference and the ONNX decompositions: a few ulps of
rounding, amplified by the conditioning of the well-conditioned test matrices at most
tenfold). Eigenvectors and singular vectors are defined up to sign: each column (row of
Vh) is compared after giving its largest-magnitude entry the same sign in both."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ort = pytest.importorskip("onnxruntime")

from irbridge.converters.onnx import to_onnx  # noqa: E402
from irbridge.converters.stablehlo import from_mlir  # noqa: E402
from irbridge.executor import run_model  # noqa: E402

RNG = np.random.default_rng(21)


def _square(dtype: Any) -> np.ndarray:
    return (RNG.standard_normal((3, 4, 4)) + 3 * np.eye(4)).astype(dtype)


def _spd(dtype: Any) -> np.ndarray:
    m = RNG.standard_normal((2, 5, 5))
    return (m @ np.swapaxes(m, -1, -2) + 5 * np.eye(5)).astype(dtype)


def _tall(dtype: Any) -> np.ndarray:
    return RNG.standard_normal((2, 6, 4)).astype(dtype)


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[Any], np.ndarray], str]] = {
    # name: (function, input, what it lowers to)
    "cholesky": (jnp.linalg.cholesky, _spd, "potrf"),
    "cho_solve": (lambda a: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a),
                                                       a[..., :2]), _spd, "trsm"),
    "solve": (lambda a: jnp.linalg.solve(a, a[..., :3] + 1), _square, "getrf"),
    "inv": (jnp.linalg.inv, _square, "trsm"),
    "det": (jnp.linalg.det, _square, "getrf"),
    "slogdet": (jnp.linalg.slogdet, _square, "getrf"),
    "lu_factor": (jax.scipy.linalg.lu_factor, _square, "getrf"),
    "qr": (jnp.linalg.qr, _tall, "orgqr"),
    "qr_complete": (lambda a: jnp.linalg.qr(a, mode="complete"), _tall, "geqrf"),
    "eigh": (jnp.linalg.eigh, _spd, "syevd"),
    "svd": (lambda a: jnp.linalg.svd(a, full_matrices=False), _tall, "gesdd"),
    # full_matrices of a square matrix (a tall one's null-space basis is not unique, and
    # the ONNX export refuses it: docs/onnx.md)
    "svd_full": (jnp.linalg.svd, _square, "gesdd"),
}


def _signed(x: np.ndarray, axis: int) -> np.ndarray:
    """Each vector along `axis` with its largest-magnitude entry made positive."""
    index = np.expand_dims(np.argmax(np.abs(x), axis=axis), axis)
    return x * np.sign(np.take_along_axis(x, index, axis=axis))


def _canonical(name: str, outputs: list[np.ndarray]) -> list[np.ndarray]:
    if name == "eigh":                      # (eigenvalues, eigenvectors as columns)
        return [outputs[0], _signed(outputs[1], -2)]
    if name.startswith("svd"):   # (U, S, Vh), U with k columns: a sign per column of U
        u, s, vh = outputs        # and the same per row of Vh
        sign = np.sign(np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :],
                                          axis=-2))
        return [u * sign, s, vh * np.swapaxes(sign, -1, -2)]
    return outputs


def _check(name: str, got: list[np.ndarray], want: list[np.ndarray], path: str,
           rtol: float) -> None:
    assert len(got) == len(want), path
    for i, (g, w) in enumerate(zip(_canonical(name, got), _canonical(name, want),
                                   strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (path, i, g.shape, w.shape)
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=0, atol=rtol * scale, err_msg=f"{path} {i}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lapack_custom_calls_reproduce_jax(name: str, dtype: Any) -> None:
    fn, make, routine = PROGRAMS[name]
    x = make(dtype)
    with jax.enable_x64(dtype == np.float64):   # (JAX's setting for this block only)
        text = jax.jit(fn).lower(x).as_text()
        want = [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(x))]
    prefix = "s" if dtype == np.float32 else "d"
    assert f"@lapack_{prefix}{routine}" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # an opaque node is reported as a warning
        model = from_mlir(text)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    _check(name, run_model(model, [x]), want, "IR executor", rtol)
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})
    _check(name, got, want, "IR -> ONNX -> onnxruntime", rtol)
