"""The schema: checked-in bindings are fresh, and wire numbers never change meaning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf.descriptor import Descriptor, FileDescriptor

from irbridge._proto import irbridge_pb2

ROOT = Path(__file__).resolve().parent.parent
WIRE_MANIFEST = Path(__file__).parent / "data" / "wire_fields.txt"


def test_checked_in_bindings_match_the_schema() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def wire_fields(file: FileDescriptor) -> set[str]:
    """'Message.field = number type' for every field, and 'Enum.NAME = number'."""
    lines: set[str] = set()

    def visit(message: Descriptor, prefix: str) -> None:
        name = prefix + message.name
        for f in message.fields:
            kind = f.message_type.full_name if f.message_type else (
                f.enum_type.full_name if f.enum_type else str(f.type))
            label = "repeated " if f.is_repeated else ""
            lines.add(f"{name}.{f.name} = {f.number} {label}{kind}")
        for nested in message.nested_types:
            if not nested.GetOptions().map_entry:
                visit(nested, name + ".")

    for message in file.message_types_by_name.values():
        visit(message, "")
    for enum in file.enum_types_by_name.values():
        lines |= {f"{enum.name}.{v.name} = {v.number}" for v in enum.values}
    return lines


def test_wire_numbers_are_never_changed_or_reused() -> None:
    """The manifest records every field ever released. A field may be added (append its
    line to tests/data/wire_fields.txt); none may be renumbered, retyped or removed
    (remove it from the schema only with a `reserved` line, and keep it here)."""
    released = {line for line in WIRE_MANIFEST.read_text().splitlines()
                if line and not line.startswith("#")}
    current = wire_fields(irbridge_pb2.DESCRIPTOR)
    missing = sorted(released - current)
    assert not missing, f"released wire fields changed or removed: {missing}"
    added = sorted(current - released)
    assert not added, f"new wire fields: append these lines to {WIRE_MANIFEST}: {added}"
