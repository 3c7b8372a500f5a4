"""`reduce_window` with min bodies and initial values other than the identity, and `pad`
with a run-time padding value, as JAX prints them: no opaque node, and the IR executor,
the IR exported back to StableHLO (reference interpreter) and to ONNX (onnxruntime, where
the ops exist there) reproduce JAX's outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import evaluate, from_mlir, to_mlir_text
from irbridge.executor import run_model

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(1)
X = RNG.standard_normal((2, 7, 6)).astype(np.float32)
XI = RNG.integers(-50, 50, (2, 7, 6)).astype(np.int32)


def _window(x: Any, init: Any, op: Callable[..., Any], padding: Any) -> Any:
    return lax.reduce_window(x, init, op, (1, 3, 2), (1, 2, 1), padding)


CASES: dict[str, tuple[Callable[..., Any], list[np.ndarray], bool]] = {
    # name: (function, arguments, whether onnxruntime runs the export)
    "min_pool": (lambda x: _window(x, jnp.inf, lax.min, ((0, 0), (1, 1), (0, 1))), [X], True),
    "min_pool_int": (lambda x: _window(x, jnp.iinfo(jnp.int32).max, lax.min, "VALID"), [XI],
                     False),
    "max_init_zero_padded": (lambda x: _window(x, 0.0, lax.max, ((0, 0), (2, 1), (1, 1))),
                             [X], True),
    "min_init_padded": (lambda x: _window(x, 0.25, lax.min, ((0, 0), (1, 2), (0, 0))), [X],
                        True),
    "max_runtime_init": (lambda x, v: _window(x, v, lax.max, ((0, 0), (1, 1), (0, 0))),
                         [X, np.array(0.5, np.float32)], True),
    "add_init_unpadded": (lambda x: _window(x, 1.5, lax.add, "VALID"), [X], True),
    "cummin": (lambda x: lax.cummin(x, axis=1), [X], True),
    "cummax": (lambda x: lax.cummax(x, axis=2), [X], True),
    "pad_runtime_value": (lambda x, v: lax.pad(x, v, ((0, 0, 0), (1, 2, 1), (2, 0, 0))),
                          [X, np.array(-3.0, np.float32)], True),
}


def _check(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        # max / min / pad move values exactly; the windowed sum adds 6 floats: 1e-6
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_window_and_pad(name: str) -> None:
    fn, args, ort_runs = CASES[name]
    text = jax.jit(fn).lower(*args).as_text()
    want = [np.asarray(jax.jit(fn)(*args))]
    model = from_mlir(text)
    assert not [n.qualified_op for g in model.graphs for n in g.nodes if n.is_opaque]
    _check(run_model(model, args), want)
    _check(evaluate(to_mlir_text(model), args), want)
    if ort_runs:
        proto = to_onnx(model)
        session = ort.InferenceSession(proto.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        _check(session.run(None, dict(zip(names, args, strict=True))), want)
