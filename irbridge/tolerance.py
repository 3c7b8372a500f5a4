"""Output checks with per-dtype tolerances, shared by the numeric verifiers: the PyTorch
front-end's (`converters/pytorch/verify.py`: IR executor against the eager model) and the
ONNX back-end's (`converters/onnx/verify.py`: onnxruntime on the written file against the
IR executor).

An output passes when

    max |got - reference| <= atol + rtol * max |reference|

with (atol, rtol) from `TOLERANCES` by the reference's dtype; integers and booleans must
match exactly. NaN at the same place on both sides and infinities of the same sign count
as equal. Why these numbers: two implementations of the same float32 math (numpy/BLAS
in the reference executor; oneDNN/MKL in torch, MLAS in onnxruntime) sum in other orders,
fuse multiply-adds and have softmax/erf/exp kernels of their own. A length-K dot product
may differ by about sqrt(K) * eps * sum|terms| (eps = 1.2e-7 for float32), and the
differences compound through depth. Measured on the benchmark models (resnet18 ...
detr-resnet-50), outputs agree to 2e-7 .. 5e-6 of their output scale; rtol = 1e-4 leaves a
20x margin while still catching any real lowering mistake (a wrong axis, pad, epsilon or
a dropped attribute shows up at 1e-3 or more). atol covers outputs that are nearly all
zeros. Half precisions get the same reasoning with their own eps (f16 9.8e-4, bf16
7.8e-3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from irbridge.dtypes import DType

TOLERANCES: dict[DType, tuple[float, float]] = {
    # dtype: (atol, rtol of the output's largest magnitude)
    DType.FLOAT64: (1e-9, 1e-7),
    DType.FLOAT32: (1e-5, 1e-4),
    DType.FLOAT16: (1e-3, 1e-2),
    DType.BFLOAT16: (1e-2, 5e-2),
    # complex: its real dtype's tolerances on the modulus of the difference
    DType.COMPLEX64: (1e-5, 1e-4),
    DType.COMPLEX128: (1e-9, 1e-7),
}
EXACT = (0.0, 0.0)

CONSTANT_NOTE = "the reference is one value repeated"


@dataclass
class OutputCheck:
    index: int  # position among the outputs
    name: str  # IR value name ("" when the output was not captured)
    dtype: str
    shape: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float  # max |got - reference| / max |reference|
    atol: float
    rtol: float
    passed: bool
    note: str = ""


@dataclass
class VerifyReport:
    outputs: list[OutputCheck] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""  # why the check could not run, in one line ("" when it ran)

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.outputs) and all(o.passed for o in self.outputs)

    @property
    def max_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=float("nan"))

    @property
    def max_rel_error(self) -> float:
        return max((o.max_rel_error for o in self.outputs), default=float("nan"))

    @property
    def weak(self) -> bool:
        """Every output of the reference is one value repeated (a random-weight model whose
        last layer is zero-initialised): a pass then says little about the graph."""
        return bool(self.outputs) and all(o.note.startswith(CONSTANT_NOTE)
                                          for o in self.outputs)

    def summary(self) -> str:
        if self.error:
            return f"FAIL: {self.error}"
        state = "PASS" if self.passed else "FAIL"
        text = (f"{state}: {len(self.outputs)} outputs, max abs error "
                f"{self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}")
        if self.weak:
            text += ("; weak check: every reference output is one value repeated, which a "
                     "wrong graph of the right shape can match too (zero-initialised "
                     "layers?); try other weights (--weights)")
        return text


def compare_output(index: int, name: str, got: np.ndarray, ref: np.ndarray, dtype: DType,
                   atol: float, rtol: float) -> OutputCheck:
    """Check one output `got` against the reference `ref` (see the module docstring)."""
    shape = tuple(ref.shape)
    if tuple(got.shape) != shape:
        return OutputCheck(index, name, dtype.short, shape, float("inf"), float("inf"), atol,
                           rtol, False, f"shape {list(got.shape)} != reference {list(shape)}")
    if ref.size == 0:
        return OutputCheck(index, name, dtype.short, shape, 0.0, 0.0, atol, rtol, True)
    # complex outputs compare in complex128 (|a - b| is the modulus), never real parts only
    wide = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(ref) else np.float64
    a = np.asarray(got).astype(wide)
    b = np.asarray(ref).astype(wide)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, np.abs(a - b))
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    diff = np.where(same_inf, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    max_abs = float(diff.max())
    finite = np.abs(b[np.isfinite(b)])
    scale = float(finite.max()) if finite.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    passed = max_abs <= atol + rtol * scale
    note = ""
    if b.size > 1 and not np.isnan(b.flat[0]) and bool(np.all(b == b.flat[0])):
        note = f"{CONSTANT_NOTE} ({b.flat[0].real:g})"
    return OutputCheck(index, name, dtype.short, shape, max_abs, max_rel, atol, rtol, passed,
                       note)
