"""Element types of the IR and their numpy equivalents."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """Element type. Values equal the wire numbers of `irbridge.v1.DataType`."""

    FLOAT32 = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    FLOAT64 = 4
    FLOAT8_E4M3FN = 5
    FLOAT8_E5M2 = 6
    INT8 = 7
    INT16 = 8
    INT32 = 9
    INT64 = 10
    UINT8 = 11
    UINT16 = 12
    UINT32 = 13
    UINT64 = 14
    BOOL = 15
    COMPLEX64 = 16
    COMPLEX128 = 17
    INT4 = 18
    UINT4 = 19
    INT2 = 20
    UINT2 = 21
    FLOAT8_E4M3FNUZ = 22
    FLOAT8_E5M2FNUZ = 23
    FLOAT8_E8M0FNU = 24
    FLOAT4_E2M1FN = 25
    FLOAT6_E2M3FN = 26
    FLOAT6_E3M2FN = 27
    FLOAT8_E3M4 = 28
    FLOAT8_E4M3 = 29
    FLOAT8_E4M3B11FNUZ = 30

    @property
    def numpy(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return int(self.numpy.itemsize)

    @property
    def bits(self) -> int:
        """Width of one element in bits. Below 8 for the sub-byte types (int4, float4_e2m1fn,
        ...), which still take one byte each in memory and in `.irb` files."""
        return _BITS.get(self, 8 * self.itemsize)

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_integer(self) -> bool:
        return self in _INTEGERS

    @property
    def short(self) -> str:
        """Short lowercase name used in text output: f32, bf16, i64, ..."""
        return _SHORT[self]

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        key = np.dtype(dtype)
        for member, np_dtype in _TO_NUMPY.items():
            if np_dtype == key:
                return member
        raise ValueError(f"numpy dtype {key} has no irbridge DType")

    @classmethod
    def parse(cls, text: str) -> DType:
        """Accept short names (bf16), long names (bfloat16) and enum names (BFLOAT16)."""
        key = text.strip().lower()
        for member in cls:
            if key in (member.short, member.name.lower()):
                return member
        aliases = {"float": cls.FLOAT32, "half": cls.FLOAT16, "double": cls.FLOAT64,
                   "fp32": cls.FLOAT32, "fp16": cls.FLOAT16, "fp64": cls.FLOAT64,
                   "fp8": cls.FLOAT8_E4M3FN, "int": cls.INT32, "long": cls.INT64}
        if key in aliases:
            return aliases[key]
        names = ", ".join(m.short for m in cls)
        raise ValueError(f"unknown dtype {text!r}; known: {names}")


_TO_NUMPY: dict[DType, np.dtype] = {
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT16: np.dtype(np.float16),
    DType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DType.FLOAT64: np.dtype(np.float64),
    DType.FLOAT8_E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.FLOAT8_E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DType.INT8: np.dtype(np.int8),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.UINT8: np.dtype(np.uint8),
    DType.UINT16: np.dtype(np.uint16),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    DType.BOOL: np.dtype(np.bool_),
    DType.COMPLEX64: np.dtype(np.complex64),
    DType.COMPLEX128: np.dtype(np.complex128),
    DType.INT4: np.dtype(ml_dtypes.int4),
    DType.UINT4: np.dtype(ml_dtypes.uint4),
    DType.INT2: np.dtype(ml_dtypes.int2),
    DType.UINT2: np.dtype(ml_dtypes.uint2),
    DType.FLOAT8_E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DType.FLOAT8_E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DType.FLOAT8_E8M0FNU: np.dtype(ml_dtypes.float8_e8m0fnu),
    DType.FLOAT4_E2M1FN: np.dtype(ml_dtypes.float4_e2m1fn),
    DType.FLOAT6_E2M3FN: np.dtype(ml_dtypes.float6_e2m3fn),
    DType.FLOAT6_E3M2FN: np.dtype(ml_dtypes.float6_e3m2fn),
    DType.FLOAT8_E3M4: np.dtype(ml_dtypes.float8_e3m4),
    DType.FLOAT8_E4M3: np.dtype(ml_dtypes.float8_e4m3),
    DType.FLOAT8_E4M3B11FNUZ: np.dtype(ml_dtypes.float8_e4m3b11fnuz),
}
NARROW_FLOATS = frozenset({
    DType.FLOAT8_E4M3FN, DType.FLOAT8_E5M2, DType.FLOAT8_E4M3FNUZ, DType.FLOAT8_E5M2FNUZ,
    DType.FLOAT8_E8M0FNU, DType.FLOAT4_E2M1FN, DType.FLOAT6_E2M3FN, DType.FLOAT6_E3M2FN,
    DType.FLOAT8_E3M4, DType.FLOAT8_E4M3, DType.FLOAT8_E4M3B11FNUZ})
"""Floats of fewer than 16 bits (ml_dtypes types, one byte per element)."""
_BITS = {DType.INT4: 4, DType.UINT4: 4, DType.INT2: 2, DType.UINT2: 2,
         DType.FLOAT4_E2M1FN: 4, DType.FLOAT6_E2M3FN: 6, DType.FLOAT6_E3M2FN: 6}
_FLOATS = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64} | NARROW_FLOATS
_INTEGERS = {DType.INT8, DType.INT16, DType.INT32, DType.INT64,
             DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64,
             DType.INT4, DType.UINT4, DType.INT2, DType.UINT2}
_SHORT = {
    DType.FLOAT32: "f32", DType.FLOAT16: "f16", DType.BFLOAT16: "bf16", DType.FLOAT64: "f64",
    DType.FLOAT8_E4M3FN: "f8e4m3", DType.FLOAT8_E5M2: "f8e5m2", DType.INT8: "i8",
    DType.INT16: "i16", DType.INT32: "i32", DType.INT64: "i64", DType.UINT8: "u8",
    DType.UINT16: "u16", DType.UINT32: "u32", DType.UINT64: "u64", DType.BOOL: "bool",
    DType.COMPLEX64: "c64", DType.COMPLEX128: "c128",
    DType.INT4: "i4", DType.UINT4: "u4", DType.INT2: "i2", DType.UINT2: "u2",
    DType.FLOAT8_E4M3FNUZ: "f8e4m3fnuz", DType.FLOAT8_E5M2FNUZ: "f8e5m2fnuz",
    DType.FLOAT8_E8M0FNU: "f8e8m0", DType.FLOAT4_E2M1FN: "f4e2m1", DType.FLOAT6_E2M3FN: "f6e2m3",
    DType.FLOAT6_E3M2FN: "f6e3m2", DType.FLOAT8_E3M4: "f8e3m4", DType.FLOAT8_E4M3: "f8e4m3inf",
    DType.FLOAT8_E4M3B11FNUZ: "f8e4m3b11fnuz",
}
