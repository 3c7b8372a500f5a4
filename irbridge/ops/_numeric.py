"""Numeric helpers shared by the op reference implementations."""

from __future__ import annotations

import numpy as np


def widen(x: np.ndarray) -> np.ndarray:
    """Low-precision floats are computed in float32, as hardware does."""
    low_precision = x.dtype.kind == "f" and x.dtype.itemsize < 4
    if low_precision or x.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return x.astype(np.float32)
    return x
