"""irbridge's own modules compiled to .pyc, as an installed package's are (pip compiles at
install; uv with `compile-bytecode` in pyproject.toml does it for the dependencies here).
Where PYTHONDONTWRITEBYTECODE is set, as on this project's CI machines, every process would
otherwise compile them from source on import: the benchmarks call this before timing, the
test session before its workers start."""

from __future__ import annotations

import compileall
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_irbridge() -> None:
    """Compile irbridge/ and converters/ (irbridge/converters is a link to converters/,
    which compileall does not follow, so it is compiled in its own place)."""
    for folder in ("irbridge", "converters"):
        compileall.compile_dir(str(ROOT / folder), quiet=1)
