"""Shape arithmetic shared by op definitions, aware of symbolic and unknown dims."""

from __future__ import annotations

from collections.abc import Sequence

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Dim, SymDim, TensorType


def broadcast_dims(a: Dim, b: Dim, where: str) -> Dim:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise OpError(f"{where}: cannot broadcast dims {a} and {b}")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a if a is not None else b


def broadcast_shapes(shapes: Sequence[tuple[Dim, ...] | None], where: str) -> tuple[Dim, ...] | None:
    """Numpy-style broadcasting of several shapes; None if any rank is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes if s is not None), default=0)
    result: list[Dim] = [1] * rank
    for shape in shapes:
        assert shape is not None
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        result = [broadcast_dims(r, d, where) for r, d in zip(result, padded, strict=True)]
    return tuple(result)


def normalize_axis(axis: int, rank: int, where: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpError(f"{where}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes: Sequence[int], rank: int, where: str) -> tuple[int, ...]:
    result = tuple(sorted({normalize_axis(a, rank, where) for a in axes}))
    if len(result) != len(axes):
        raise OpError(f"{where}: repeated axis in {list(axes)}")
    return result


def mul_dims(dims: Sequence[Dim]) -> Dim:
    """Product of dims; symbolic only when a single symbol is scaled by statics."""
    if any(d == 0 for d in dims):
        return 0
    total = 1
    symbol: Dim = None
    for d in dims:
        if isinstance(d, int):
            total *= d
        elif symbol is None and isinstance(d, SymDim):
            symbol = d
        else:
            return None
    if symbol is None:
        return total
    return symbol if total == 1 else None


def promote(types: Sequence[TensorType], where: str) -> DType:
    """Result dtype of an elementwise op: inputs must agree, except that a float wins over
    an integer or bool (front-ends insert casts; this keeps imported graphs lenient)."""
    dtypes = [t.dtype for t in types]
    if all(d == dtypes[0] for d in dtypes):
        return dtypes[0]
    floats = [d for d in dtypes if d.is_float]
    if floats:
        return max(floats, key=lambda d: d.itemsize)
    ints = [d for d in dtypes if d.is_integer]
    if ints:
        return max(ints, key=lambda d: d.itemsize)
    raise OpError(f"{where}: incompatible dtypes {', '.join(d.short for d in dtypes)}")
