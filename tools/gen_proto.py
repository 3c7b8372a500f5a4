"""Regenerate the checked-in Python bindings of schemas/ with the pinned protoc.

The generator is the protoc bundled in grpcio-tools (pinned in pyproject's dev group), so
the bindings depend only on the lock file. `--check` exits 1 when the checked-in bindings
differ from what the schema generates now (used by tests/test_schema.py).

Two schemas are generated: the IR (`irbridge/v1/irbridge.proto` -> `irbridge/_proto/`,
imported only by irbridge.serde) and the vendored Chakra trace schema
(`chakra/et_def.proto` -> `converters/chakra/_proto/`, imported only by the Chakra writer).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_ROOT = ROOT / "schemas"
PROTO = "irbridge/v1/irbridge.proto"
OUT_DIR = ROOT / "irbridge" / "_proto"
GENERATED = ("irbridge_pb2.py", "irbridge_pb2.pyi")


@dataclass(frozen=True)
class Binding:
    """One schema and where its generated Python bindings are checked in."""

    proto: str  # relative to SCHEMA_ROOT
    out_dir: Path
    generated: tuple[str, ...]
    init_doc: str


BINDINGS = (
    Binding(PROTO, OUT_DIR, GENERATED,
            "Generated protobuf bindings. Only irbridge.serde imports this."),
    Binding("chakra/et_def.proto", ROOT / "converters" / "chakra" / "_proto",
            ("et_def_pb2.py", "et_def_pb2.pyi"),
            "Generated bindings of the vendored Chakra schema (schemas/chakra/et_def.proto). "
            "Only irbridge.converters.chakra imports this."),
)


def generate(out_dir: Path, binding: Binding = BINDINGS[0]) -> dict[str, str]:
    """Run protoc on `binding.proto` and return {file name: text} of the generated bindings."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        rc = protoc.main(
            ["protoc", f"-I{SCHEMA_ROOT}", f"--python_out={tmp}", f"--pyi_out={tmp}",
             binding.proto]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed on {binding.proto} with exit code {rc}")
        generated = Path(tmp) / Path(binding.proto).parent
        texts = {name: (generated / name).read_text() for name in binding.generated}
    out_dir.mkdir(parents=True, exist_ok=True)
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    failed = False
    for binding in BINDINGS:
        out_dir = binding.out_dir
        texts = generate(out_dir, binding)
        stale = [n for n, t in texts.items()
                 if not (out_dir / n).exists() or (out_dir / n).read_text() != t]
        if args.check:
            if stale:
                print(f"stale bindings in {out_dir}: {', '.join(stale)}; "
                      "run `uv run python tools/gen_proto.py`")
                failed = True
            continue
        for name, text in texts.items():
            (out_dir / name).write_text(text)
        (out_dir / "__init__.py").write_text(f'"""{binding.init_doc}"""\n')
        print(f"wrote {', '.join(texts)} to {out_dir}")
    if args.check:
        if failed:
            return 1
        print("bindings are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
