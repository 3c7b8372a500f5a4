"""Complex numbers and FFTs (issue 13): each torch function captures (torch.export) into the
neutral ops of irbridge/ops/complex.py with no opaque node, the IR executor matches eager
torch on the example input and on a perturbed second input (values not baked in), and
`verify` compares complex outputs as complex numbers (not their real parts). ONNX export
writes them on (real, imag) pairs (run in onnxruntime against eager); StableHLO export of
fft_r2c is refused with one line naming the node.

Tolerances. Eager torch runs pocketfft in float32; the IR reference runs numpy's FFT in
float64 rounded to float32. A float32 FFT of length n has a relative error growing like
eps * log2(n) (each butterfly stage adds about one rounding), eps = 6e-8: for the lengths
here (n <= 64, log2 n <= 6) about 4e-7 of the output's largest magnitude. We take
rtol = 1e-5 * log2(64) * 1.5 = 9e-5 (the 1e-5 * log2 n rule with a 1.5 margin for the two
passes of 2-D transforms), atol 1e-5 for bins near zero.
The non-FFT plumbing (real, imag, view_as_*, complex) is exact: compared with rtol 1e-6
(polar and angle run float32 sin/cos/atan2: a few ulp).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from irbridge.converters.pytorch import capture
from irbridge.converters.pytorch.verify import verify
from irbridge.errors import ExportError
from irbridge.executor import run_graphs

N = 16
FFT_TOL = {"rtol": 1e-5 * math.log2(64) * 1.5, "atol": 1e-5}
EXACT_TOL = {"rtol": 1e-6, "atol": 1e-6}

Fn = Callable[[torch.Tensor], torch.Tensor]

# name -> (function of one real float32 [4, N] input, neutral op expected, tolerance)
CASES: dict[str, tuple[Fn, str, dict[str, float]]] = {
    "rfft": (lambda x: torch.fft.rfft(x), "fft_r2c", FFT_TOL),
    "rfft_ortho_dim0": (lambda x: torch.fft.rfft(x, dim=0, norm="ortho"), "fft_r2c", FFT_TOL),
    "fft_real": (lambda x: torch.fft.fft(x, dim=0), "fft_r2c", FFT_TOL),
    "fft_complex": (lambda x: torch.fft.fft(torch.complex(x, x.flip(0)), norm="forward"),
                    "fft_c2c", FFT_TOL),
    "ifft": (lambda x: torch.fft.ifft(torch.fft.fft(x) * 2.0), "fft_c2c", FFT_TOL),
    "fft2": (lambda x: torch.fft.fft2(x), "fft_c2c", FFT_TOL),
    "ifftn": (lambda x: torch.fft.ifftn(torch.polar(x.abs(), x)), "fft_c2c", FFT_TOL),
    "rfft2": (lambda x: torch.fft.rfft2(x, norm="ortho"), "fft_r2c", FFT_TOL),
    "irfft": (lambda x: torch.fft.irfft(torch.fft.rfft(x) * 1.5), "fft_c2r", FFT_TOL),
    "irfft_n": (lambda x: torch.fft.irfft(torch.complex(x, x * 0.5), n=10), "fft_c2r",
                FFT_TOL),
    "irfftn": (lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=(4, N)), "fft_c2r", FFT_TOL),
    "hfft": (lambda x: torch.fft.hfft(torch.complex(x, -x)), "fft_c2r", FFT_TOL),
    "ihfft": (lambda x: torch.fft.ihfft(x), "fft_r2c", FFT_TOL),
    # ihfft2 / ihfftn conjugate through aten._conj_physical
    "ihfft2": (lambda x: torch.fft.ihfft2(x), "conj", FFT_TOL),
    "fftshift": (lambda x: torch.fft.fftshift(torch.fft.fft(x)), "gather", FFT_TOL),
    "ifftshift": (lambda x: torch.fft.ifftshift(torch.fft.rfft(x), dim=0), "gather", FFT_TOL),
    "view_as_real": (lambda x: torch.view_as_real(torch.complex(x, x * x)), "view_as_real",
                     EXACT_TOL),
    "view_as_complex": (lambda x: torch.view_as_complex(x.reshape(4, N // 2, 2)),
                        "view_as_complex", EXACT_TOL),
    "real_imag": (lambda x: torch.complex(x, x + 1).real * torch.complex(x, x + 1).imag,
                  "complex", EXACT_TOL),
    "conj_imag": (lambda x: torch.conj(torch.complex(x, x + 1)).imag, "conj", EXACT_TOL),
    "conj_physical": (lambda x: torch.conj_physical(torch.complex(x, x * 3)), "conj",
                      EXACT_TOL),
    "abs_complex": (lambda x: torch.complex(x, x - 2).abs(), "complex_abs",
                    {"rtol": 1e-6, "atol": 1e-6}),
    "angle": (lambda x: torch.angle(torch.complex(x, x - 0.5)), "angle",
              {"rtol": 1e-6, "atol": 1e-6}),
    "polar": (lambda x: torch.polar(x.abs(), x), "polar", {"rtol": 1e-6, "atol": 1e-6}),
    # Python complex scalars as operands (0-d complex constants)
    "complex_scalar_mul": (lambda x: torch.fft.fft(x) * 2j, "mul", FFT_TOL),
    "real_times_complex_scalar": (lambda x: x * (0.5 - 2j), "mul", EXACT_TOL),
    "complex_scalar_add": (lambda x: torch.fft.fft(x).sum(dim=-1) - (1.5 + 3j), "sub",
                           FFT_TOL),
    "complex_scalar_0d": (lambda x: torch.complex(x, -x).sum() * 1j, "mul",
                          {"rtol": 1e-5, "atol": 1e-5}),
}


class One(torch.nn.Module):
    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _inputs(seed: int) -> torch.Tensor:
    return torch.randn((4, N), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(CASES))
def test_captures_runs_and_verifies(name: str) -> None:
    fn, op, tol = CASES[name]
    module = One(fn)
    x = _inputs(0)
    result = capture(module, (x,), frontend="export")
    assert result.opaque_count == 0, result.stats.notes
    ops = {n.op for _, n in result.model.all_nodes()}
    assert op in ops, sorted(ops)
    report = verify(result, module)
    assert report.passed, report
    for seed in (0, 1):  # the example input and a perturbed one
        x = _inputs(seed) if seed == 0 else _inputs(0) * 1.7 + 0.3 * _inputs(seed)
        name0 = result.model.graphs[0].inputs[0].name
        got = np.asarray(run_graphs(result.model, {name0: x.numpy()})[-1][0])
        with torch.no_grad():
            want = module(x).resolve_conj().resolve_neg().numpy()
        assert got.shape == want.shape and got.dtype == want.dtype, \
            f"{name}: {got.dtype}{list(got.shape)} vs torch {want.dtype}{list(want.shape)}"
        np.testing.assert_allclose(got, want, err_msg=f"{name} seed {seed}", **tol)


def test_verify_compares_imaginary_parts() -> None:
    """A complex output whose imaginary part differs must fail the comparison."""
    from irbridge.dtypes import DType
    from irbridge.tolerance import TOLERANCES, compare_output

    ref = np.array([1 + 1j, 2 - 1j], np.complex64)
    got = ref.real.astype(np.complex64)  # real parts equal, imaginary parts lost
    atol, rtol = TOLERANCES[DType.COMPLEX64]
    assert not compare_output(0, "y", got, ref, DType.COMPLEX64, atol, rtol).passed
    assert compare_output(0, "y", ref.copy(), ref, DType.COMPLEX64, atol, rtol).passed


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_export_runs_on_real_imag_pairs(name: str) -> None:
    """Each case exported to ONNX (complex values as float [..., 2] (real, imag) pairs,
    converters/onnx/_complex.py) and run in onnxruntime, against eager torch, on the
    example input and a perturbed one; the same tolerances as the IR (the file computes
    the transforms in float64 and rounds once)."""
    from irbridge.converters.onnx import to_onnx
    from irbridge.converters.onnx._complex import complex_values, from_pairs
    from irbridge.converters.onnx.verify import _session

    fn, _, tol = CASES[name]
    module = One(fn)
    result = capture(module, (_inputs(0),), frontend="export")
    proto = to_onnx(result.model)
    paired = complex_values(proto)
    session = _session(proto)
    out = session.get_outputs()[0].name
    for seed in (0, 1):
        x = _inputs(seed) if seed == 0 else _inputs(0) * 1.7 + 0.3 * _inputs(seed)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        got = from_pairs(got, paired[out]) if out in paired else got
        with torch.no_grad():
            want = module(x).resolve_conj().resolve_neg().numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, err_msg=f"{name} seed {seed}", **tol)


def test_stablehlo_refuses_in_one_line() -> None:
    from irbridge.converters.stablehlo import build_module

    module = One(lambda x: torch.fft.irfft(torch.fft.rfft(x) * 2.0))
    result = capture(module, (_inputs(0),), frontend="export")
    assert result.opaque_count == 0
    with pytest.raises(ExportError) as hlo_error:
        build_module(result.model).artifact()
    assert "\n" not in str(hlo_error.value) and "fft_r2c" in str(hlo_error.value)


class Filter(torch.nn.Module):
    """A complex weight (a model buffer) applied in the frequency domain."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.register_buffer("w", torch.complex(torch.randn(N, generator=gen),
                                                torch.randn(N, generator=gen)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.ifft(torch.fft.fft(x) * self.w)


@pytest.mark.parametrize("fmt", ["binary", "text"])
def test_complex_constants_survive_serde(fmt: str) -> None:
    from irbridge import serde

    module = Filter()
    result = capture(module, (_inputs(0),), frontend="export")
    assert result.opaque_count == 0
    if fmt == "binary":
        loaded = serde.from_bytes(serde.to_bytes(result.model))
    else:
        loaded = serde.from_text(serde.to_text(result.model))
    x = _inputs(0) * 1.7 + 0.3 * _inputs(1)
    name = loaded.graphs[0].inputs[0].name
    got = np.asarray(run_graphs(loaded, {name: x.numpy()})[-1][0])
    with torch.no_grad():
        want = module(x).numpy()
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, want, **FFT_TOL)
