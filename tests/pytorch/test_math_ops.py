"""Elementwise math and special functions (issue 13): each ATen op captures into its neutral
op (no opaque node), the IR executor matches eager torch on the example input and on a
perturbed second input (values are not baked in), and the IR exports to ONNX (run in
onnxruntime) and to StableHLO (run in the StableHLO reference interpreter) with eager
torch's numbers -- or, for functions neither format can express exactly, the exporter
refuses with one line naming the node.

Ops are captured a group at a time (one module computing several functions) to keep the
file fast; every output is compared on its own.

Tolerances. Eager torch computes in float32 (a few ulp of error for the transcendental
kernels; Cephes-based special functions somewhat more near their zeros), the IR executor in
float64 rounded to float32: rtol 2e-5 and atol 2e-6 leave room for ~100 ulp at magnitude 1.
Exports: onnxruntime's float32 kernels and the StableHLO decompositions (atan2 for the
inverse trigonometric functions, log1p / expm1 forms of the hyperbolic ones, the scaled
hypot) add a few float32 roundings: rtol 1e-4, atol 1e-5. erfc exported as 1 - erf is
accurate to float32's absolute resolution near 1 (|error| <= 6e-8 + erf's own), hence the
absolute tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from irbridge.converters.pytorch import capture
from irbridge.executor import run_graphs

Fn = Callable[..., torch.Tensor]

EXEC_TOL = {"rtol": 2e-5, "atol": 2e-6}
EXPORT_TOL = {"rtol": 1e-4, "atol": 1e-5}


def _uniform(gen: torch.Generator, lo: float, hi: float) -> torch.Tensor:
    return torch.rand((3, 5), generator=gen) * (hi - lo) + lo


def _edge(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


# name -> (function, domain of its inputs, neutral op expected in the IR)
UNARY: dict[str, tuple[Fn, tuple[float, float], str]] = {
    "acos": (torch.acos, (-0.99, 0.99), "acos"),
    "asin": (torch.asin, (-0.99, 0.99), "asin"),
    "atan": (torch.atan, (-5.0, 5.0), "atan"),
    "sinh": (torch.sinh, (-5.0, 5.0), "sinh"),
    "cosh": (torch.cosh, (-5.0, 5.0), "cosh"),
    "asinh": (torch.asinh, (-5.0, 5.0), "asinh"),
    "acosh": (torch.acosh, (1.0, 6.0), "acosh"),
    "atanh": (torch.atanh, (-0.95, 0.95), "atanh"),
    "trunc": (torch.trunc, (-5.0, 5.0), "trunc"),
    "frac": (torch.frac, (-5.0, 5.0), "trunc"),
    "erfc": (torch.erfc, (-3.0, 3.0), "erfc"),
    "log10": (torch.log10, (0.01, 50.0), "log"),
    "exp2": (torch.exp2, (-6.0, 6.0), "pow"),
    "round2": (lambda x: torch.round(x, decimals=2), (-5.0, 5.0), "round"),
    "round_neg": (lambda x: torch.round(x * 100, decimals=-1), (-5.0, 5.0), "round"),
    "signbit": (torch.signbit, (-3.0, 3.0), "signbit"),
    # special functions: exported through their registry decompositions (EXPORTABLE_*)
    "erfinv": (torch.erfinv, (-0.99, 0.99), "erfinv"),
    "lgamma": (torch.lgamma, (0.1, 8.0), "lgamma"),
    "digamma": (torch.digamma, (0.1, 8.0), "digamma"),
    "polygamma2": (lambda x: torch.polygamma(2, x), (0.5, 8.0), "polygamma"),
    "i0": (torch.i0, (-4.0, 4.0), "i0"),
    "i0e": (torch.special.i0e, (-4.0, 4.0), "i0e"),
    "i1": (torch.special.i1, (-4.0, 4.0), "i1"),
    "i1e": (torch.special.i1e, (-4.0, 4.0), "i1e"),
    "k0": (torch.special.modified_bessel_k0, (0.1, 4.0), "k0"),
    "k1": (torch.special.modified_bessel_k1, (0.1, 4.0), "k1"),
    "k0e": (torch.special.scaled_modified_bessel_k0, (0.1, 4.0), "k0e"),
    "k1e": (torch.special.scaled_modified_bessel_k1, (0.1, 4.0), "k1e"),
    "j0": (torch.special.bessel_j0, (-4.0, 4.0), "bessel_j0"),
    "j1": (torch.special.bessel_j1, (-4.0, 4.0), "bessel_j1"),
    "y0": (torch.special.bessel_y0, (0.1, 4.0), "bessel_y0"),
    "y1": (torch.special.bessel_y1, (0.1, 4.0), "bessel_y1"),
    "sph_j0": (torch.special.spherical_bessel_j0, (-4.0, 4.0), "spherical_bessel_j0"),
    "ndtri": (torch.special.ndtri, (0.01, 0.99), "ndtri"),
    "log_ndtr": (torch.special.log_ndtr, (-4.0, 4.0), "erfcx"),
    "erfcx": (torch.special.erfcx, (-2.0, 4.0), "erfcx"),
    "airy_ai": (torch.special.airy_ai, (-3.0, 3.0), "airy_ai"),
    "mvlgamma": (lambda x: torch.mvlgamma(x, 2), (1.0, 6.0), "lgamma"),
}

BINARY: dict[str, tuple[Fn, tuple[float, float], tuple[float, float], str]] = {
    "atan2": (torch.atan2, (-3.0, 3.0), (-3.0, 3.0), "atan2"),
    "copysign": (torch.copysign, (-3.0, 3.0), (-3.0, 3.0), "copysign"),
    "fmod": (torch.fmod, (-7.0, 7.0), (0.5, 3.0), "fmod"),
    "fmin": (torch.fmin, (-3.0, 3.0), (-3.0, 3.0), "fmin"),
    "fmax": (torch.fmax, (-3.0, 3.0), (-3.0, 3.0), "fmax"),
    "hypot": (torch.hypot, (-3.0, 3.0), (-3.0, 3.0), "hypot"),
    "ldexp": (lambda x, e: torch.ldexp(x, e.round().int()), (-3.0, 3.0), (-4.0, 4.0), "pow"),
    "nextafter": (torch.nextafter, (-3.0, 3.0), (-3.0, 3.0), "nextafter"),
    "zeta": (torch.special.zeta, (1.5, 5.0), (0.5, 3.0), "zeta"),
    "xlogy": (torch.xlogy, (-2.0, 2.0), (0.1, 3.0), "log"),
    "igamma": (torch.igamma, (0.2, 6.0), (0.05, 8.0), "igamma"),
    "igammac": (torch.special.gammaincc, (0.2, 6.0), (0.05, 8.0), "igammac"),
}

EXPORTABLE_UNARY = ["acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                    "trunc", "frac", "erfc", "log10", "exp2", "round2", "round_neg", "signbit",
                    "erfinv", "lgamma", "digamma", "polygamma2", "ndtri", "log_ndtr", "erfcx",
                    "mvlgamma"]
# Bessel family: registry decompositions (irbridge/ops/_bessel_decomp.py)
EXPORTABLE_UNARY += ["i0", "i0e", "i1", "i1e", "k0", "k1", "k0e", "k1e", "j0", "j1", "y0", "y1",
                     "sph_j0", "airy_ai"]
EXPORTABLE_BINARY = ["atan2", "copysign", "fmod", "fmin", "fmax", "hypot", "ldexp", "xlogy",
                     "zeta"]
# exact power-of-two arithmetic; torch's incomplete gamma iterations (irbridge/ops/_misc_decomp.py)
EXPORTABLE_BINARY += ["nextafter", "igamma", "igammac"]


class Many(torch.nn.Module):
    """Applies each function to its own inputs; one output per function."""

    def __init__(self, fns: list[Fn], arity: list[int]) -> None:
        super().__init__()
        self.fns, self.arity = fns, arity

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs, i = [], 0
        for fn, n in zip(self.fns, self.arity, strict=True):
            outs.append(fn(*xs[i:i + n]))
            i += n
        return tuple(outs)


def _inputs(names: list[str], perturb: bool) -> list[torch.Tensor]:
    """Inputs in each function's domain; `perturb` draws a second, different set (same
    types) to run the captured graph on."""
    gen = torch.Generator().manual_seed(1 if perturb else 0)
    xs: list[torch.Tensor] = []
    for name in names:
        if name in UNARY:
            xs.append(_uniform(gen, *UNARY[name][1]))
        else:
            _, da, db, _ = BINARY[name]
            xs += [_uniform(gen, *da), _uniform(gen, *db)]
    return xs


def _group(names: list[str]) -> tuple[Many, Any, list[torch.Tensor]]:
    fns = [UNARY[n][0] if n in UNARY else BINARY[n][0] for n in names]
    arity = [1 if n in UNARY else 2 for n in names]
    module = Many(fns, arity)
    args = _inputs(names, perturb=False)
    result = capture(module, tuple(args), frontend="export")
    return module, result, args


def _feeds(result: Any, args: list[torch.Tensor]) -> dict[str, np.ndarray]:
    names = [v.name for v in result.model.graphs[0].inputs]
    return {name: a.numpy() for name, a in zip(names, args, strict=True)}


def _check(name: str, got: np.ndarray, want: torch.Tensor, tol: dict[str, float]) -> None:
    expected = want.numpy()
    assert got.shape == expected.shape and got.dtype == expected.dtype, \
        f"{name}: {got.dtype}{list(got.shape)}, torch {expected.dtype}{list(expected.shape)}"
    if expected.dtype == np.bool_:
        np.testing.assert_array_equal(got, expected, err_msg=name)
    else:
        np.testing.assert_allclose(got, expected, err_msg=name, **tol)


def _ops_of(result: Any) -> set[str]:
    return {n.op for _, n in result.model.all_nodes() if not n.is_opaque}


ALL = list(UNARY) + list(BINARY)


@pytest.fixture(scope="module")
def everything() -> tuple[Many, Any, list[torch.Tensor]]:
    return _group(ALL)


def test_every_op_lowers_to_its_neutral_op(everything: Any) -> None:
    _, result, _ = everything
    assert result.opaque_count == 0, result.stats.notes
    ops = _ops_of(result)
    wanted = {v[2] for v in UNARY.values()} | {v[3] for v in BINARY.values()}
    assert wanted <= ops, sorted(wanted - ops)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_executor_matches_eager(everything: Any, perturb: bool) -> None:
    module, result, args = everything
    if perturb:
        args = _inputs(ALL, perturb=True)
    got = run_graphs(result.model, _feeds(result, args))[-1]
    with torch.no_grad():
        want = module(*args)
    for index, name in enumerate(ALL):
        where = result.outputs[index]
        assert where is not None
        _check(name, np.asarray(got[where[1]]), want[index], EXEC_TOL)


def _exportable() -> tuple[Many, Any, list[torch.Tensor]]:
    return _group(EXPORTABLE_UNARY + EXPORTABLE_BINARY)


@pytest.fixture(scope="module")
def exportable() -> tuple[Many, Any, list[torch.Tensor]]:
    return _exportable()


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_onnx_export_matches_eager_in_onnxruntime(exportable: Any, perturb: bool) -> None:
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx

    module, result, args = exportable
    names = EXPORTABLE_UNARY + EXPORTABLE_BINARY
    if perturb:
        args = _inputs(names, perturb=True)
    proto = to_onnx(result.model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, _feeds(result, args))
    with torch.no_grad():
        want = module(*args)
    for index, name in enumerate(names):
        where = result.outputs[index]
        assert where is not None
        _check(name, np.asarray(got[where[1]]), want[index], EXPORT_TOL)


@pytest.mark.parametrize("perturb", [False, True], ids=["example", "perturbed"])
def test_stablehlo_export_matches_eager_in_interpreter(exportable: Any, perturb: bool) -> None:
    from irbridge.converters.stablehlo import build_module, evaluate

    module, result, args = exportable
    names = EXPORTABLE_UNARY + EXPORTABLE_BINARY
    if perturb:
        args = _inputs(names, perturb=True)
    built = build_module(result.model)
    feeds = _feeds(result, args)
    got = evaluate(built.artifact(), [feeds[v.name] for v in result.model.graphs[0].inputs])
    with torch.no_grad():
        want = module(*args)
    for index, name in enumerate(names):
        where = result.outputs[index]
        assert where is not None
        _check(name, np.asarray(got[where[1]]), want[index], EXPORT_TOL)


# IEEE edge values: signed zeros, infinities, NaN, domain ends; NaN compares equal to NaN
EDGES = _edge([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 0.5, -2.5, 3.0])
EDGES_B = _edge([-0.0, 0.0, -math.inf, math.inf, 1.0, -1.0, 2.0, math.nan, math.nan, -0.0])


@pytest.mark.parametrize("name", ["atan2", "copysign", "fmin", "fmax", "hypot", "fmod"])
def test_binary_edge_values_in_every_backend(name: str) -> None:
    """Signed zeros, infinities and NaN: the decompositions the exporters write must agree
    with C / torch there too (atan2 of two zeros, hypot of inf and NaN, fmin of NaN)."""
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.stablehlo import build_module, evaluate

    fn = BINARY[name][0]
    module = Many([fn], [2])
    pairs = [(EDGES, EDGES_B), (EDGES_B, EDGES)]
    result = capture(module, pairs[0], frontend="export")
    assert result.opaque_count == 0
    proto = to_onnx(result.model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    built = build_module(result.model).artifact()
    for a, b in pairs:
        want = fn(a, b).numpy()
        feeds = _feeds(result, [a, b])
        ordered = [feeds[v.name] for v in result.model.graphs[0].inputs]
        for backend, got in (("executor", run_graphs(result.model, feeds)[-1][0]),
                             ("onnxruntime", session.run(None, feeds)[0]),
                             ("stablehlo", evaluate(built, ordered)[0])):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=0,
                                       err_msg=f"{name} in {backend}")
            if name in ("fmin", "fmax"):
                continue  # the sign of min(+0, -0) is unspecified (C, IEEE 754)
            # signed zeros must match too (allclose treats -0.0 == 0.0)
            zeros = want == 0
            np.testing.assert_array_equal(np.signbit(np.asarray(got)[zeros]),
                                          np.signbit(want[zeros]),
                                          err_msg=f"{name} sign of zero in {backend}")


def test_unary_edge_values_in_every_backend() -> None:
    import onnxruntime as ort

    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.stablehlo import build_module, evaluate

    names = ["trunc", "signbit", "sinh", "cosh", "asinh", "atan", "erfc"]
    module = Many([UNARY[n][0] for n in names], [1] * len(names))
    args = [EDGES] * len(names)
    result = capture(module, tuple(args), frontend="export")
    assert result.opaque_count == 0
    proto = to_onnx(result.model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = _feeds(result, args)
    ordered = [feeds[v.name] for v in result.model.graphs[0].inputs]
    want = module(*args)
    outputs = {"executor": run_graphs(result.model, feeds)[-1],
               "onnxruntime": session.run(None, feeds),
               "stablehlo": evaluate(build_module(result.model).artifact(), ordered)}
    for backend, got in outputs.items():
        for index, name in enumerate(names):
            where = result.outputs[index]
            assert where is not None
            # erfc exported as 1 - erf: exact to float32's absolute resolution near 1
            tol = {"rtol": 1e-5, "atol": 1e-7 if name == "erfc" else 0.0}
            _check(f"{name} in {backend}", np.asarray(got[where[1]]), want[index], tol)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_inputs_promote_as_torch_does(dtype: torch.dtype) -> None:
    """acos / atan2 / erfinv / lgamma of integers are float32 in torch; trunc, fmod and
    fmin keep the integer type; signbit is bool."""
    fns: list[Fn] = [torch.acos, torch.lgamma, torch.special.i0e, torch.signbit, torch.atan2,
                     torch.copysign]
    arity = [1, 1, 1, 1, 2, 2]
    if dtype != torch.bool:
        fns += [torch.trunc, torch.fmod, torch.fmin]
        arity += [1, 2, 2]
    module = Many(fns, arity)
    gen = torch.Generator().manual_seed(1)
    args = [torch.randint(-3, 4, (4,), generator=gen).to(dtype) if dtype != torch.bool
            else torch.randint(0, 2, (4,), generator=gen).bool() for _ in range(sum(arity))]
    if dtype != torch.bool:  # fmod by zero is an error for integers
        args[-3] = torch.where(args[-3] == 0, 2, args[-3]).to(dtype)
    result = capture(module, tuple(args), frontend="export")
    assert result.opaque_count == 0, result.stats.notes
    got = run_graphs(result.model, _feeds(result, args))[-1]
    with torch.no_grad():
        want = module(*args)
    for index, fn in enumerate(fns):
        where = result.outputs[index]
        assert where is not None
        _check(getattr(fn, "__name__", str(fn)), np.asarray(got[where[1]]), want[index],
               EXEC_TOL)
