"""Numeric helpers shared by the op reference implementations."""

from __future__ import annotations

import numpy as np

from irbridge.dtypes import NARROW_FLOATS

_LOW_PRECISION = frozenset({"bfloat16"} | {d.numpy.name for d in NARROW_FLOATS})


def widen(x: np.ndarray) -> np.ndarray:
    """Low-precision floats (float16, bfloat16, the ml_dtypes float8 / float6 / float4 types)
    are computed in float32, as hardware does."""
    low_precision = x.dtype.kind == "f" and x.dtype.itemsize < 4
    if low_precision or x.dtype.name in _LOW_PRECISION:
        return x.astype(np.float32)
    return x
