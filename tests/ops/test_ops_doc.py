"""docs/ops.md is generated from the registry and must match it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ops_doc_matches_the_registry() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_ops_doc.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
