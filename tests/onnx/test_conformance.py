"""The ONNX conformance run (tools/onnx_conformance.py) must not fall below the counts
recorded in tests/data/onnx_conformance_baseline.json, and must never crash.

The full run (all generated node cases plus the 9 light models) takes well under three
minutes on two cores, so it runs by default; the fixed 150-case sample that the doc's
quick mode uses is checked too, on its own counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import onnx_conformance as conformance  # noqa: E402

BASELINE = json.loads((ROOT / "tests" / "data" / "onnx_conformance_baseline.json").read_text())


@pytest.fixture(scope="module")
def node_cases() -> list[conformance.Case]:
    return conformance.node_cases()


def _failures(summary: conformance.Summary) -> str:
    return "; ".join(f"{r.name}: {r.status} ({r.reason[:120]})" for r in summary.results
                     if r.status in ("mismatch", "crash"))[:4000]


def test_full_run_does_not_regress(node_cases: list[conformance.Case]) -> None:
    summary = conformance.run(node_cases + conformance.light_cases())
    node, light = summary.counts("node"), summary.counts("light")
    assert node["crash"] == 0 and light["crash"] == 0, _failures(summary)
    assert node["cases"] == BASELINE["node"]["cases"]
    assert node["pass"] >= BASELINE["node"]["pass"], _failures(summary)
    assert node["neutral_ir_pass"] >= BASELINE["node"]["neutral_ir_pass"]
    assert light["pass"] == light["cases"] == 9, _failures(summary)
    assert node["pass"] >= 0.85 * node["cases"]


def test_fixed_sample_does_not_regress(node_cases: list[conformance.Case]) -> None:
    chosen = conformance.sample(node_cases)
    assert len(chosen) == BASELINE["sample"]["size"]
    summary = conformance.run(chosen)
    counts = summary.counts("node")
    assert counts["crash"] == 0, _failures(summary)
    assert counts["pass"] >= BASELINE["sample"]["pass"], _failures(summary)
    assert counts["neutral_ir_pass"] >= BASELINE["sample"]["neutral_ir_pass"]
