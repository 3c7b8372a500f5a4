"""docs/pytorch-timm.md and tests/data/timm_baseline.json come from one run of
tools/timm_sweep.py (one model per timm family: capture, ONNX export, onnxruntime against
eager, analyze). The families that passed can only grow: FLOOR holds those of the recorded
run; a re-run of the sweep that loses one fails here. Reads the JSON and the page only (no
model is built)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import timm_sweep as sweep  # noqa: E402

BASELINE = json.loads((ROOT / "tests" / "data" / "timm_baseline.json").read_text())
DOC = (ROOT / "docs" / "pytorch-timm.md").read_text()

# the families (timm.models modules) that passed every stage in the recorded run (timm
# 1.0.31, 2026-11-27: 97 of 98; deepseek_vit's 412 M parameters run out of the sweep's
# 8 GiB cap at the ONNX export)
FLOOR: frozenset[str] = frozenset({
    "beit", "byoanet", "byobnet", "cait", "coat", "convit", "convmixer", "convnext",
    "cpubone", "crossvit", "csatv2", "cspnet", "cspnext", "davit", "deit", "densenet", "dla",
    "dpn", "edgenext", "efficientformer", "efficientformer_v2", "efficientnet",
    "efficientvim", "efficientvit_mit", "efficientvit_msra", "eva", "fasternet", "fastvit",
    "focalnet", "gcvit", "gemma4_vit", "ghostnet", "hardcorenas", "hgnet", "hiera",
    "hieradet_sam2", "hrnet", "iformer", "inception_next", "inception_resnet_v2",
    "inception_v3", "inception_v4", "lcnetv2", "levit", "lowformer", "mambaout", "maxxvit",
    "metaformer", "mlp_mixer", "mobilenetv3", "mobilenetv5", "mobilevit", "mvitv2",
    "naflexvit", "nasnet", "nest", "nextvit", "nfnet", "pit", "pnasnet", "pvt_v2",
    "qwen3_vit", "rdnet", "regnet", "repghost", "repvit", "res2net", "resnest", "resnet",
    "resnetv2", "rexnet", "selecsls", "senet", "sequencer", "shvit", "sknet", "starnet",
    "swiftformer", "swin_transformer", "swin_transformer_v2", "swin_transformer_v2_cr",
    "tiny_vit", "tnt", "tresnet", "twins", "vgg", "visformer", "vision_transformer",
    "vision_transformer_hybrid", "vision_transformer_relpos", "vision_transformer_sam",
    "vitamin", "volo", "vovnet", "xception", "xception_aligned", "xcit"
})


def test_passing_families_never_go_down() -> None:
    passing = set(BASELINE["passing_families"])
    assert passing >= FLOOR, sorted(FLOOR - passing)


def test_baseline_totals_are_consistent() -> None:
    s = BASELINE["summary"]
    families = BASELINE["families"]
    assert s["families_tried"] == len(families) <= s["families"]
    assert s["families_passed"] == len(BASELINE["passing_families"])
    assert sorted(m for m, r in families.items() if r["status"] == "pass") == \
        BASELINE["passing_families"]
    for module, row in families.items():
        if row["status"] != "pass":  # a failure names its stage and a one-line reason
            assert row["stage"] in (*sweep.STAGES, "timeout", "crash"), module
            assert row["error"] and "\n" not in row["error"], module
    assert BASELINE["tolerance"] == {"rtol": sweep.RTOL, "atol_per_max": sweep.ATOL}


def test_the_page_shows_the_baseline() -> None:
    s = BASELINE["summary"]
    assert (f"- Families: **{s['families_passed']} of {s['families_tried']} pass** "
            f"({sweep.pct(s['families_passed'], s['families_tried'])}") in DOC
    assert f"Command: `{BASELINE['command']}`" in DOC
    for module, row in BASELINE["families"].items():
        assert f"| {module} | `{row['model']}` |" in DOC, module


def test_compare_holds_the_stated_tolerance() -> None:
    import numpy as np

    e = np.array([10.0, 0.0, -2.0], np.float32)
    # atol 1e-4 * max(1, max|eager|) = 1e-3 here, plus rtol 1e-3 * |eager|
    assert sweep.compare(e + np.array([0.0105, 0.00095, 0.0], np.float32), e) is None
    assert sweep.compare(e + np.array([0.0, 0.0011, 0.0], np.float32), e) is not None
    assert sweep.compare(e[:2], e) is not None  # shapes differ
    assert sweep.compare(np.array([np.nan, 0, 0], np.float32), e) is not None


def test_float64_reference_accepts_rounding_only() -> None:
    import numpy as np

    exact = np.array([800.0, -3.0])
    eager = exact + np.array([0.8, 0.0])  # float32 eager 0.8 off float64
    assert sweep.rounding_only(exact + np.array([-1.5, 0.0]), eager, exact, "why") is None
    why = sweep.rounding_only(exact + np.array([0.0, 1.7]), eager, exact, "why")
    assert why is not None and why.startswith("why; float64 eager: ort 1.7 off")
