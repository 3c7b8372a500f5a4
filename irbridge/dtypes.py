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

    @property
    def numpy(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return int(self.numpy.itemsize)

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
}
_FLOATS = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64,
           DType.FLOAT8_E4M3FN, DType.FLOAT8_E5M2}
_INTEGERS = {DType.INT8, DType.INT16, DType.INT32, DType.INT64,
             DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64}
_SHORT = {
    DType.FLOAT32: "f32", DType.FLOAT16: "f16", DType.BFLOAT16: "bf16", DType.FLOAT64: "f64",
    DType.FLOAT8_E4M3FN: "f8e4m3", DType.FLOAT8_E5M2: "f8e5m2", DType.INT8: "i8",
    DType.INT16: "i16", DType.INT32: "i32", DType.INT64: "i64", DType.UINT8: "u8",
    DType.UINT16: "u16", DType.UINT32: "u32", DType.UINT64: "u64", DType.BOOL: "bool",
    DType.COMPLEX64: "c64", DType.COMPLEX128: "c128",
}
