"""CHLO ops in `jax.jit(f).lower(*args).as_text()` import through StableHLO's own
legalisation: no opaque node, and the IR executor, the IR exported back to StableHLO (the
reference interpreter) and to ONNX (onnxruntime) reproduce JAX's outputs.

Tolerance: rtol 1e-4 of the output's scale (max |JAX output|, at least 1). JAX on CPU and
the IR compute the same float32 polynomial approximations (the legalisation is the
definition XLA uses), so agreement is at float32 rounding level; 1e-4 leaves room for the
different summation orders of onnxruntime's and numpy's kernels."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from irbridge.errors import FileFormatError

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from irbridge.converters.onnx import to_onnx  # noqa: E402
from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text  # noqa: E402
from irbridge.executor import run_model  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 8)).astype(np.float32)
UNIT = np.clip(X / 4, -0.9, 0.9).astype(np.float32)     # inside (-1, 1)
POS = (np.abs(X) + 0.5).astype(np.float32)               # positive


def _special() -> object:
    return jax.scipy.special


# name -> (function, arguments, CHLO ops the lowering must hold)
CASES: dict[str, tuple[Callable[..., object], list[np.ndarray], set[str]]] = {
    "gelu_exact_layernorm": (
        lambda x: (jax.nn.gelu(x, approximate=False) - x.mean(-1, keepdims=True))
        / jnp.sqrt(jnp.var(x, -1, keepdims=True) + 1e-5), [X], {"chlo.erfc", "chlo.square"}),
    "erf_erfinv": (lambda x, u: _special().erf(x) + _special().erfinv(u), [X, UNIT],
                   {"chlo.erf_inv"}),
    "gamma_family": (lambda p: (jax.lax.lgamma(p), jax.lax.digamma(p),
                                _special().polygamma(1, p), _special().zeta(p + 1.0, p)),
                     [POS], {"chlo.lgamma", "chlo.digamma", "chlo.polygamma", "chlo.zeta"}),
    "bessel": (lambda x: _special().i1e(x), [X], {"chlo.bessel_i1e"}),
    "trig_hyperbolic": (
        lambda x, u, p: (jnp.tan(u), jnp.sinh(x), jnp.cosh(x), jnp.arcsinh(x),
                         jnp.arccosh(p + 1.0),
                         jnp.arctanh(u)),
        [X, UNIT, POS], {"chlo.sinh", "chlo.cosh", "chlo.asinh", "chlo.acosh",
                         "chlo.atanh"}),
    "top_k": (lambda x: jax.lax.top_k(x, 3), [X], {"chlo.top_k"}),
}
# Not yet here: jnp.arctan, arcsin and arccos (they legalise to stablehlo.atan2) and jnp.nextafter (bitwise and/or
# and bitcast_convert on integers) import with opaque nodes until those StableHLO ops have
# neutral counterparts (docs/stablehlo-conformance.md lists them under "opaque").


def _chlo_in(text: str) -> set[str]:
    import re
    return {f"chlo.{m}" for m in re.findall(r"\bchlo\.([a-z_0-9]+)", text)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_chlo_program_reproduces_jax(name: str) -> None:
    fn, args, must = CASES[name]
    text = jax.jit(fn).lower(*args).as_text()
    found = _chlo_in(text)
    assert found, f"{name}: the lowering holds no CHLO op; the case tests nothing"
    # JAX versions move ops between chlo and stablehlo; most of the named ones stay CHLO.
    assert len(must & found) >= max(1, len(must) // 2), (name, sorted(found))
    expected = [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]

    model = from_mlir(text)
    opaque = [n.op for g in model.graphs for n in g.nodes if n.domain]
    assert opaque == []

    def check(outputs: list[np.ndarray], path: str) -> None:
        assert len(outputs) == len(expected), path
        for got, want in zip(outputs, expected, strict=True):
            got = np.asarray(got)
            assert got.shape == want.shape and got.dtype == want.dtype, (path, got.dtype)
            if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
                np.testing.assert_array_equal(got, want, err_msg=path)
            else:
                finite = np.isfinite(want)
                assert np.array_equal(np.isfinite(got), finite), path
                scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
                np.testing.assert_allclose(got[finite], want[finite], rtol=0,
                                           atol=1e-4 * scale, err_msg=path)

    check(run_model(model, args), "ir executor")
    check(evaluate(to_mlir_text(model), args), "IR -> StableHLO -> interpreter")
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(to_onnx(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), args, strict=True)}
    check(list(session.run(None, feeds)), "IR -> ONNX -> onnxruntime")


def test_bad_chlo_text_is_one_line() -> None:
    text = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = chlo.erfc %a : tensor<3xf32> -> tensor<4xf32>\n"
            "  return %0 : tensor<4xf32>\n}\n")
    with pytest.raises(FileFormatError) as err:
        from_mlir(text)
    message = str(err.value)
    assert "\n" not in message and "chlo.erfc" in message
