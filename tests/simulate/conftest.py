"""Simulator tests reuse the small IR models of the output tests (tests/outputs/ir_models.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "outputs"))
