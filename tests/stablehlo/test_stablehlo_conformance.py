"""The StableHLO conformance run (tools/stablehlo_conformance.py) must not regress from the
baseline it wrote (tests/data/stablehlo_conformance_baseline.json): a fixed subset of
StableHLO's interpreter-test files is re-run live here, and every function that passed a
path in the baseline must still pass it; no path may ever produce a mismatch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import stablehlo_conformance as conformance  # noqa: E402

BASELINE = json.loads((ROOT / "tests" / "data" / "stablehlo_conformance_baseline.json")
                      .read_text())
SUBSET = ("add", "abs", "compare", "convert", "dot_general", "reduce", "slice", "while",
          "concatenate", "select")


def test_baseline_has_no_mismatch_and_holds_the_floor() -> None:
    summary = BASELINE["summary"]
    assert summary["mismatches"] == {"ir": 0, "stablehlo": 0, "onnx": 0}
    crashing = {x for p in ("ir", "stablehlo", "onnx") for x in BASELINE["crashing"][p]}
    assert summary["crashes"] == len(crashing)
    # The doc's totals are the baseline's (both written by the same run).
    doc = (ROOT / "docs" / "stablehlo-conformance.md").read_text()
    assert f"{summary['functions']} functions in {summary['files']} files." in doc
    ir_pass = summary["paths"]["ir"].get("pass", 0)
    assert f"| ir | {ir_pass} (" in doc
    assert len(BASELINE["passing"]["ir"]) == ir_pass


@pytest.mark.skipif(not conformance.CORPUS.is_dir(), reason="no ../shared conformance corpus")
def test_subset_does_not_regress() -> None:
    paths = [conformance.CORPUS / f"{name}.mlir" for name in SUBSET]
    results = conformance.run(paths)
    assert {r.file for r in results} == set(SUBSET)
    for path in conformance.PATHS:
        now = {f"{r.file}:{r.name}" for r in results if r.paths.get(path) == "pass"}
        before = {x for x in BASELINE["passing"][path] if x.split(":")[0] in SUBSET}
        assert before <= now, f"{path}: no longer passing: {sorted(before - now)}"
        mismatched = [(r.name, r.why.get(path)) for r in results
                      if r.paths.get(path) == "mismatch"]
        assert not mismatched, mismatched
        if path in BASELINE["crashing"]:   # crashes may only go away
            crashed = {f"{r.file}:{r.name}" for r in results
                       if r.paths.get(path) in ("crash", "timeout")}
            assert crashed <= set(BASELINE["crashing"][path]), sorted(crashed)


def test_rewrite_turns_checks_into_results() -> None:
    text = """
func.func @t() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
  %1 = stablehlo.add %0, %0 : tensor<2xi64>
  check.expect_eq_const %1, dense<[2,
      4]> : tensor<2xi64>
  check.expect_almost_eq %0, %1, tolerance = 0.5 : tensor<2xi64>
  func.return
}"""
    checks, program = conformance.rewrite(text)
    assert [c.kind for c in checks] == ["eq_const", "almost_eq"]
    assert checks[0].literal == "dense<[2,\n      4]>" and checks[1].tolerance == 0.5
    assert program is not None and "check." not in program
    assert "func.func @main() -> (tensor<2xi64>, tensor<2xi64>, tensor<2xi64>)" in program
    assert "func.return %1, %0, %1 : tensor<2xi64>, tensor<2xi64>, tensor<2xi64>" in program


def test_comparison_follows_the_check_dialect() -> None:
    f = np.float32
    # expect_eq: exact; NaN matches NaN.
    assert conformance.close("eq", np.array([1.0, np.nan], f), np.array([1.0, np.nan], f),
                             None) is None
    assert conformance.close("eq", np.array([1.0], f), np.array([1.0000001], f), None)
    # expect_almost_eq: |a - b| <= 1e-4 with equal signs; infinities only match themselves.
    assert conformance.close("almost_eq", np.array([2.0], f), np.array([2.00005], f),
                             None) is None
    assert conformance.close("almost_eq", np.array([2.0], f), np.array([2.001], f), None)
    assert conformance.close("almost_eq", np.array([np.inf], f), np.array([3e38], f), None)
    assert conformance.close("almost_eq", np.array([1e-5], f), np.array([-1e-5], f), None)
    assert conformance.close("almost_eq", np.array([0.0], f), np.array([1e-5], f),
                             None) is None
    # expect_close: ulp distance (f16 5.0 and 5.0117 are 3 ulp apart).
    h = np.float16
    assert conformance.close("close", np.array([5.0], h), np.array([5.01], h), None,
                             3) is None
    assert conformance.close("close", np.array([5.0], h), np.array([5.01], h), None, 2)
