"""`jax.export`'s serialized `Exported` (what `exported.serialize()` returns and JAX users
save to disk): a FlatBuffer wrapping the StableHLO portable artifact with JAX's calling
convention. Only the module bytes are read, by a bounds-checked FlatBuffer walk of the
`Exported` table (jax/_src/export/serialization.fbs): nothing of JAX is imported and
nothing in the blob is deserialised into Python objects, so reading it runs no code (JAX's
own `jax.export.deserialize` asks for trusted input)."""

from __future__ import annotations

import struct

from ._mlir import BYTECODE_MAGIC

# Field slots of table `Exported` (vtable byte offsets, as flatc numbers them: 4 + 2 * id).
_VERSION_SLOT = 4               # serialization_version: uint16
_FUNCTION_NAME_SLOT = 6         # function_name: string
_MODULE_SLOT = 30               # mlir_module_serialized: [byte]
MAX_SERIALIZATION_VERSION = 11  # newest schema version checked (JAX 0.8, May 2026)


class NotExported(ValueError):
    """The bytes are not a serialized jax.export Exported."""


def _u32(data: bytes, pos: int) -> int:
    if pos < 0 or pos + 4 > len(data):
        raise NotExported(f"offset {pos} out of range")
    return int(struct.unpack_from("<I", data, pos)[0])


def _i32(data: bytes, pos: int) -> int:
    if pos < 0 or pos + 4 > len(data):
        raise NotExported(f"offset {pos} out of range")
    return int(struct.unpack_from("<i", data, pos)[0])


def _u16(data: bytes, pos: int) -> int:
    if pos < 0 or pos + 2 > len(data):
        raise NotExported(f"offset {pos} out of range")
    return int(struct.unpack_from("<H", data, pos)[0])


def _field(data: bytes, table: int, vtable: int, vtable_size: int, slot: int) -> int:
    """Absolute position of a field of the root table, or 0 when absent."""
    if slot + 2 > vtable_size:
        return 0
    rel = _u16(data, vtable + slot)
    return table + rel if rel else 0


def _vector(data: bytes, pos: int) -> bytes:
    start = pos + _u32(data, pos)
    length = _u32(data, start)
    if start + 4 + length > len(data):
        raise NotExported("vector runs past the end")
    return bytes(data[start + 4:start + 4 + length])


def read_exported(data: bytes) -> tuple[bytes, str, int]:
    """(module bytes, function name, serialization version) of a serialized Exported;
    NotExported when `data` is not one."""
    if len(data) < 16:
        raise NotExported("too short")
    table = _u32(data, 0)
    vtable = table - _i32(data, table)
    vtable_size = _u16(data, vtable)
    if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > len(data):
        raise NotExported("no FlatBuffer vtable")
    version_at = _field(data, table, vtable, vtable_size, _VERSION_SLOT)
    version = _u16(data, version_at) if version_at else 0
    name_at = _field(data, table, vtable, vtable_size, _FUNCTION_NAME_SLOT)
    name = _vector(data, name_at).decode("utf-8", "replace") if name_at else ""
    module_at = _field(data, table, vtable, vtable_size, _MODULE_SLOT)
    if not module_at:
        raise NotExported("no mlir_module_serialized field")
    module = _vector(data, module_at)
    if not module.startswith(BYTECODE_MAGIC):
        raise NotExported("the module field is not MLIR bytecode")
    return module, name, version
