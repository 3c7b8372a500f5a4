"""stablehlo.triangular_solve <-> the neutral triangular_solve (issue 14), every combination of
left_side, lower, unit_diagonal and transpose_a: imported programs run by the IR executor
match the StableHLO reference interpreter on the same program; exported ones run by the
interpreter match torch.linalg.solve_triangular. Batched solves and ADJOINT of a real matrix,
which crash the interpreter, are refused by `evaluate` in one line; batched exports are
checked on XLA's CPU compiler instead, and real ADJOINT exports as TRANSPOSE (the same by
the spec).

Matrices: triangles with diagonal in [2, 3] and off-diagonal entries 0.3 x standard normal
(condition numbers below about 10), the other triangle filled with 50s that must not be
read. Tolerance rtol 1e-4, atol 1e-5: substitution in float32 has relative error of order
n * cond * eps = 4 * 10 * 6e-8 = 2.4e-6; results are O(1).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from shlotools import assert_close, opaque_ops, single_op

from irbridge.converters.stablehlo import build_module, evaluate, from_mlir
from irbridge.errors import ExportError
from irbridge.executor import run_model

TOL = {"rtol": 1e-4, "atol": 1e-5}
COMBOS = list(itertools.product([True, False], [True, False], [False, True],
                                ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"]))
IDS = [f"{'left' if s else 'right'}-{'lower' if lo else 'upper'}{'-unit' if u else ''}-{t}"
       for s, lo, u, t in COMBOS]


def _triangle(rng: np.random.Generator, batch: tuple[int, ...], n: int, lower: bool,
              unit_ones: bool) -> np.ndarray:
    body = 0.3 * rng.standard_normal((*batch, n, n))
    keep = np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n)))
    a = body * keep + 50 * (1 - keep)
    diag = np.ones((*batch, n)) if unit_ones else 2 + rng.random((*batch, n))
    a[..., np.arange(n), np.arange(n)] = diag
    return a.astype(np.float32)


def _text(batch: tuple[int, ...], left: bool, lower: bool, unit: bool, trans: str) -> str:
    dims = "".join(f"{d}x" for d in batch)
    a_t, b_t = f"tensor<{dims}4x4xf32>", f"tensor<{dims}{'4x3' if left else '3x4'}xf32>"
    flag = {True: "true", False: "false"}
    return f"""func.func @main(%a: {a_t}, %b: {b_t}) -> {b_t} {{
  %0 = "stablehlo.triangular_solve"(%a, %b) {{left_side = {flag[left]}, lower = {flag[lower]},
    unit_diagonal = {flag[unit]}, transpose_a = #stablehlo<transpose {trans}>}}
    : ({a_t}, {b_t}) -> {b_t}
  return %0 : {b_t}
}}"""


def _feeds(batch: tuple[int, ...], left: bool, lower: bool, unit_ones: bool,
           seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((*batch, 4, 3) if left else (*batch, 3, 4)).astype(np.float32)
    return [_triangle(rng, batch, 4, lower, unit_ones), b]


def _torch(a: np.ndarray, b: np.ndarray, left: bool, lower: bool, unit: bool,
           trans: str) -> np.ndarray:
    """torch's solve with op(A): a transposed triangle is the other kind of triangle."""
    ta = torch.from_numpy(a)
    upper = not lower
    if trans != "NO_TRANSPOSE":
        ta, upper = ta.mT, lower
    return torch.linalg.solve_triangular(ta, torch.from_numpy(b), upper=upper, left=left,
                                         unitriangular=unit).numpy()


@pytest.mark.parametrize("left, lower, unit, trans", COMBOS, ids=IDS)
def test_import_matches_the_interpreter(left: bool, lower: bool, unit: bool,
                                        trans: str) -> None:
    text = _text((), left, lower, unit, trans)
    model = from_mlir(text)
    assert not opaque_ops(model)
    assert [n.op for _, n in model.all_nodes()] == ["triangular_solve"]
    # StableHLO leaves unit_diagonal with a diagonal other than ones undefined: ones here
    feeds = _feeds((), left, lower, unit_ones=unit)
    # the interpreter crashes on ADJOINT of a real matrix, which is TRANSPOSE by the spec
    runnable = _text((), left, lower, unit, "TRANSPOSE" if trans == "ADJOINT" else trans)
    assert_close(run_model(model, feeds), evaluate(runnable, feeds), **TOL)


def test_adjoint_of_a_real_matrix_is_refused_by_the_interpreter_in_one_line() -> None:
    with pytest.raises(ExportError, match=r"cannot run stablehlo\.triangular_solve with "
                                          r"transpose_a = ADJOINT") as info:
        evaluate(_text((), True, True, False, "ADJOINT"), _feeds((), True, True, False))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("left, lower, unit, trans", COMBOS, ids=IDS)
def test_export_matches_torch(left: bool, lower: bool, unit: bool, trans: str) -> None:
    """unit_diagonal with a diagonal of 2-3: the export must ignore it, as torch does."""
    a, b = _feeds((), left, lower, unit_ones=False)
    model, feeds = single_op("triangular_solve", [a, b], {
        "left_side": left, "lower": lower, "unit_diagonal": unit, "transpose_a": trans})
    built = build_module(model)
    assert "stablehlo.triangular_solve" in built.text()
    assert_close(evaluate(built, feeds), [_torch(a, b, left, lower, unit, trans)], **TOL)


def test_batched_solve_is_refused_by_the_interpreter_in_one_line() -> None:
    text = _text((2,), True, True, False, "NO_TRANSPOSE")
    with pytest.raises(ExportError, match=r"cannot run stablehlo\.triangular_solve with batch "
                                          r"dims") as info:
        evaluate(text, _feeds((2,), True, True, False))
    assert "\n" not in str(info.value)


def _xla_run(text: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Compile a StableHLO module with XLA's CPU backend (jaxlib) and run it."""
    import jax
    import jax.extend
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    backend = jax.extend.backend.get_backend("cpu")
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        devices = xla_client.DeviceList(tuple(backend.local_devices()[:1]))
        executable = backend.compile_and_load(module, devices, xla_client.CompileOptions())
    return [np.asarray(x) for x in executable.execute([jax.device_put(x) for x in inputs])]


@pytest.mark.parametrize("left, lower, unit, trans",
                         [(True, True, False, "NO_TRANSPOSE"), (False, False, True, "TRANSPOSE")],
                         ids=["left-lower", "right-upper-unit-transpose"])
def test_batched_export_runs_on_xla(left: bool, lower: bool, unit: bool, trans: str) -> None:
    a, b = _feeds((2,), left, lower, unit_ones=False, seed=1)
    model, feeds = single_op("triangular_solve", [a, b], {
        "left_side": left, "lower": lower, "unit_diagonal": unit, "transpose_a": trans})
    text = build_module(model).text()
    assert_close(_xla_run(text, feeds), [_torch(a, b, left, lower, unit, trans)], **TOL)
    back = from_mlir(text)  # and the batched form imports back
    assert_close(run_model(back, feeds), [_torch(a, b, left, lower, unit, trans)], **TOL)
