"""Regenerate the checked-in Python bindings of schemas/ with the pinned protoc.

The generator is the protoc bundled in grpcio-tools (pinned in pyproject's dev group), so
the bindings depend only on the lock file. `--check` exits 1 when the checked-in bindings
differ from what the schema generates now (used by tests/test_proto_bindings.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_ROOT = ROOT / "schemas"
PROTO = "irbridge/v1/irbridge.proto"
OUT_DIR = ROOT / "irbridge" / "_proto"
GENERATED = ("irbridge_pb2.py", "irbridge_pb2.pyi")


def generate(out_dir: Path) -> dict[str, str]:
    """Run protoc into `out_dir` and return {file name: text} of the generated bindings."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        rc = protoc.main(
            ["protoc", f"-I{SCHEMA_ROOT}", f"--python_out={tmp}", f"--pyi_out={tmp}", PROTO]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed on {PROTO} with exit code {rc}")
        generated = Path(tmp) / "irbridge" / "v1"
        texts = {name: (generated / name).read_text() for name in GENERATED}
    out_dir.mkdir(parents=True, exist_ok=True)
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    texts = generate(OUT_DIR)
    stale = [n for n, t in texts.items() if not (OUT_DIR / n).exists() or (OUT_DIR / n).read_text() != t]
    if args.check:
        if stale:
            print(f"stale bindings in {OUT_DIR}: {', '.join(stale)}; run `uv run python tools/gen_proto.py`")
            return 1
        print("bindings are up to date")
        return 0
    for name, text in texts.items():
        (OUT_DIR / name).write_text(text)
    (OUT_DIR / "__init__.py").write_text('"""Generated protobuf bindings. Only irbridge.serde imports this."""\n')
    print(f"wrote {', '.join(texts)} to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
