"""Shared test helpers: a structural model comparison independent of serde."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Keep every test offline: no model hub, no telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config: pytest.Config) -> None:
    """irbridge's own modules compiled to .pyc once, before the workers start: where
    PYTHONDONTWRITEBYTECODE is set (CI here) every process the tests start (the CLI, the
    fuzz server, the tools) would compile them from source again. Installed dependencies
    come compiled from `uv sync` (`compile-bytecode`)."""
    if hasattr(config, "workerinput"):   # an xdist worker: the controller did it
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from precompile import compile_irbridge

    compile_irbridge()


@pytest.fixture
def tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path
