"""Classical orthogonal polynomials of a run-time degree (issue 13): torch.special's
Chebyshev (T, U, V, W and their shifted forms), Hermite (physicists' H, probabilists' He),
Laguerre and Legendre polynomials, P_n(x) with both x and n tensors.

The reference follows torch's own evaluation (ATen/native/Math.h, `*_polynomial_*_forward`)
step for step, in the output dtype: the same special cases (n < 0 gives 0, the values at
|x| = 1 or x = 0, torch's NaN past degree 128 (float32) / 512 (float64) for Hermite), the
same closed trigonometric forms for large n inside (-1, 1) and the same three-term
recurrences otherwise. The degree is the operand truncated to an integer; a non-finite
degree or one past int64 counts as negative (what the float-to-int conversion gives on
x86).

The exporters write its registry decomposition (irbridge/ops/_gamma_decomp.py): the same
special cases and closed forms as `where`s, and the recurrence as a `loop` (ONNX Loop,
stablehlo.while) up to the largest degree that needs it, masked per element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from irbridge.ir import TensorType
from irbridge.ops._shapes import broadcast_shapes, promote
from irbridge.ops.registry import (
    AttrKind,
    Category,
    Flops,
    LazyDecompositions,
    OpContext,
    RefContext,
    attr,
    define,
    inputs,
)

orthogonal_polynomial_decompose = LazyDecompositions(
    "irbridge.ops._gamma_decomp").orthogonal_polynomial_decompose

KINDS = ("chebyshev_t", "chebyshev_u", "chebyshev_v", "chebyshev_w",
         "shifted_chebyshev_t", "shifted_chebyshev_u", "shifted_chebyshev_v",
         "shifted_chebyshev_w", "hermite_h", "hermite_he", "laguerre_l", "legendre_p")

STEP_FLOPS = 5
"""FLOPs of one recurrence step (two multiplies, a subtraction, Laguerre / Legendre's
divide and index arithmetic); the degree is data, so the cost counts one step per element."""


def _degree(n: np.ndarray) -> np.ndarray:
    """torch's static_cast<int64_t>(n): truncation; non-finite degrees and those past
    int64 count as -1 (x86's conversion gives INT64_MIN for them)."""
    if n.dtype.kind in "iub":
        return n.astype(np.int64)
    finite = np.isfinite(n) & (np.abs(n) < 2.0 ** 63)
    return np.where(finite, np.trunc(np.where(finite, n, 0)), -1).astype(np.int64)


def _polynomial(kind: str, x: np.ndarray, n: np.ndarray) -> np.ndarray:
    x, n = np.broadcast_arrays(x, n)
    with np.errstate(all="ignore"):  # overflow to inf and NaN are values here, as in torch
        return _evaluate(kind, x.ravel(), n.ravel()).reshape(x.shape)


def _evaluate(kind: str, x: np.ndarray, n_in: np.ndarray) -> np.ndarray:
    dt = x.dtype
    n = _degree(n_in)
    out = np.zeros(x.shape, dt)
    todo = n >= 0
    nf = n.astype(dt)
    even = n % 2 == 0
    one = dt.type(1)

    def put(mask: np.ndarray, value: Any) -> None:
        hit = todo & mask
        out[hit] = np.broadcast_to(np.asarray(value, dt), out.shape)[hit]
        todo[hit] = False

    odd_sign = np.where(even, one, -one)
    two_n1 = (n + n + 1).astype(dt)
    shifted = kind.startswith("shifted_")
    y = x + x - one if shifted else x  # the Chebyshev argument (shifted: 2x - 1)
    if kind.startswith(("chebyshev", "shifted_chebyshev")):
        letter = kind[-1]
        if shifted:
            top, bottom = x == one, x == 0
        else:
            top, bottom = (np.abs(x) == one) & (x > 0), (np.abs(x) == one) & ~(x > 0)
        # values at y = 1 and y = -1
        put(top, {"t": one, "u": (n + 1).astype(dt), "v": one, "w": two_n1}[letter])
        put(bottom, {"t": odd_sign, "u": odd_sign * (n + 1).astype(dt),
                     "v": odd_sign * two_n1, "w": odd_sign}[letter])
        big = {"t": 6, "u": 8, "v": 8, "w": 8}[letter] if not shifted else \
            {"t": 6, "u": 6, "v": 6, "w": 4}[letter]
        inside = todo & (n > big) & (np.abs(y) < one)
        if inside.any():
            theta = np.arccos(np.where(inside, y, 0)).astype(dt)
            if letter == "t":
                put(inside, np.cos(nf * theta))
            elif letter == "u":
                s = np.sin(theta)
                n1 = (n + 1).astype(dt)
                put(inside & (s != 0), np.sin(n1 * theta) / np.where(s != 0, s, one))
                put(inside, n1 * np.cos(n1 * theta) / y)
            elif letter == "v":
                half = theta / dt.type(2)
                ok = np.sin(half) != one
                put(inside & ok, np.cos((nf + dt.type(0.5)) * theta) / np.cos(half))
                put(inside, odd_sign * two_n1)
            else:
                half = theta / dt.type(2)
                ok = np.cos(half) != one
                put(inside & ok, np.sin((nf + dt.type(0.5)) * theta)
                    / np.where(ok, np.sin(half), one))
                if not shifted:
                    put(inside & (x > 0), two_n1)
                put(inside, odd_sign)
        first = {"t": y, "u": y + y, "v": y + y - one, "w": y + y + one}[letter]
    elif kind.startswith("hermite"):
        limit = 128 if dt == np.float32 else 512
        put(n > limit, np.nan)
        first = x + x if kind == "hermite_h" else x
    elif kind == "laguerre_l":
        put(np.abs(x) == 0, one)
        first = one - x
    else:  # legendre_p
        put((np.abs(x) == one) & ((x > 0) | even), one)
        put(np.abs(x) == one, -one)
        first = x
    put(n == 0, one)
    put(n == 1, first)
    # three-term recurrence from (p, q) = (P_0, P_1) for the rest (n >= 2)
    idx = np.nonzero(todo)
    if idx[0].size:
        xs, ys, ns = x[idx], y[idx], n[idx]
        p = np.ones(xs.shape, dt)
        q = np.broadcast_to(np.asarray(first, dt), x.shape)[idx].copy()
        for j in range(1, int(ns.max())):
            live = (ns > j) & ~np.isnan(q)  # a NaN stays NaN: torch stops there too
            if not live.any():
                break
            k = dt.type(2 * j if kind == "hermite_h" else j)
            if kind.startswith(("chebyshev", "shifted_chebyshev")):
                r = (ys + ys) * q - p
            elif kind == "hermite_h":
                r = (xs + xs) * q - k * p
            elif kind == "hermite_he":
                r = xs * q - k * p
            elif kind == "laguerre_l":
                r = ((k + k) + (one - xs)) * q - k * p
                r = r / (k + one)
            else:
                r = (dt.type(2 * j + 1) * xs) * q - k * p
                r = r / (k + one)
            p = np.where(live, q, p)
            q = np.where(live, r, q)
        out[idx] = q
    return out


def _infer(ctx: OpContext) -> list[TensorType]:
    x, n = ctx.input(0), ctx.input(1)
    where = ctx.where or ctx.op
    dtype = promote([x, n], where)
    if not dtype.is_float:
        raise ctx.fail(f"orthogonal polynomials take real floating inputs, got {dtype.name}")
    return [TensorType(dtype, broadcast_shapes([x.shape, n.shape], where))]


def _reference(xs: list[np.ndarray | None], attrs: dict[str, Any],
               ctx: RefContext) -> list[np.ndarray]:
    x, n = xs[0], xs[1]
    assert x is not None and n is not None
    out_t = ctx.output_types[0]
    dtype = out_t.dtype.numpy if out_t is not None else np.result_type(x, n)
    return [_polynomial(attrs["kind"], x.astype(dtype), n)]


define("orthogonal_polynomial", Category.ELEMENTWISE, inputs=inputs("x", "n"),
       attrs=(attr("kind", AttrKind.STRING, doc="which polynomial family", choices=KINDS),),
       infer=_infer,
       cost=lambda ctx: Flops(other=STEP_FLOPS * ctx.out_numel()),
       cost_doc=f"{STEP_FLOPS} per output element (one recurrence step; the degree is data)",
       reference=_reference, decompose=orthogonal_polynomial_decompose,
       doc="Orthogonal polynomial P_n(x) of degree n (truncated to an integer; n < 0 gives "
           "0), evaluated as torch.special evaluates it: kind chebyshev_t/u/v/w (first to "
           "fourth kind), shifted_chebyshev_t/u/v/w (of 2x - 1), hermite_h (physicists'), "
           "hermite_he (probabilists'), laguerre_l, legendre_p. Numpy-style broadcasting.")
