"""docs/pytorch-diffusers.md and tests/data/diffusers_baseline.json come from one run of
tools/diffusers_sweep.py over every diffusers model class. Passing classes can only go up:
AT_LEAST are the pass counts of the recorded run and MUST_PASS the classes people cost most
(Stable Diffusion's UNet and VAE, ControlNet, the DiT / PixArt / SD3 / Flux transformers);
a re-run after fixes raises AT_LEAST. Reads the JSON and the page only (no model runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import diffusers_sweep as sweep  # noqa: E402

BASELINE = json.loads((ROOT / "tests" / "data" / "diffusers_baseline.json").read_text())
DOC = (ROOT / "docs" / "pytorch-diffusers.md").read_text()

AT_LEAST = {"default": 49, "small": 33}
MUST_PASS = {
    "default": {"UNet2DConditionModel", "AutoencoderKL", "ControlNetModel",
                "DiTTransformer2DModel", "PixArtTransformer2DModel", "SD3Transformer2DModel",
                "FluxTransformer2DModel"},
    "small": {"UNet2DConditionModel", "AutoencoderKL", "ControlNetModel",
              "DiTTransformer2DModel", "PixArtTransformer2DModel", "SD3Transformer2DModel",
              "FluxTransformer2DModel"},
}


def test_passing_classes_never_go_down() -> None:
    for stage in sweep.STAGES:
        passing = set(BASELINE["passing"][stage])
        assert len(passing) >= AT_LEAST[stage], stage
        assert MUST_PASS[stage] <= passing, (stage, MUST_PASS[stage] - passing)
        assert BASELINE["summary"][stage].get("pass", 0) == len(passing)


def test_every_class_has_one_outcome_per_stage() -> None:
    for stage in sweep.STAGES:
        counts = BASELINE["summary"][stage]
        assert set(counts) <= set(sweep.STATUSES), stage
        assert sum(counts.values()) == BASELINE["classes"], stage


def test_passing_defaults_have_their_macs() -> None:
    assert set(BASELINE["macs"]) == set(BASELINE["passing"]["default"])
    assert all(isinstance(m, int) and m >= 0 for m in BASELINE["macs"].values())
    # MotionAdapter's forward computes nothing (0); the models people cost do
    assert all(BASELINE["macs"][name] > 0 for name in MUST_PASS["default"])


def test_the_page_shows_the_baseline_figures() -> None:
    assert f"- Model classes: **{BASELINE['classes']}**" in DOC
    for stage in sweep.STAGES:
        ok = BASELINE["summary"][stage].get("pass", 0)
        assert f"**{ok} pass ({sweep.pct(ok, BASELINE['classes'])})**" in DOC
    for name in BASELINE["passing"]["small"]:
        assert f"| {name} |" in DOC
