"""tools/bench_scale.py --llm-weights on llama-tiny: every stage in its own process, the
IR sharing the parameters' memory, each file measured and then removed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_llm_weights_stages_run_and_clean_up(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_scale.py"), "--llm-weights", "llama-tiny",
         "--dtype", "bfloat16", "--no-write", "--folder", str(tmp_path / "work"),
         "--json", str(out)],
        capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.with_name("bench_scale_llm_weights.json").read_text())["rows"]
    assert [r["stage"] for r in rows] == ["build + capture + save", "load + analyze",
                                          "load + export ONNX", "load + export StableHLO"]
    assert not [r for r in rows if "error" in r]
    first = rows[0]
    # llama-tiny: embedding and LM head 1000x64 each, 2 layers of 46,208 (q, o 64x64; k, v
    # 32x64; gate, up, down 3x64x176; 2 norms of 64), final norm 64: 220,480, 2 bytes each
    assert first["parameters"] == 220_480 and first["parameter_bytes"] == 440_960
    assert first["shared_bytes"] == first["parameter_bytes"]  # views, not copies
    weights = first["weight_bytes"]
    assert all(r["weight_bytes"] == weights for r in rows)  # the .irb held them all
    assert first["irb_bytes"] >= weights
    assert rows[2]["file_bytes"] >= weights  # the ONNX data: the same bytes
    assert rows[3]["file_bytes"] >= 2 * weights  # hex text: two characters a byte
    assert all(r["peak"] >= r["base"] > 0 for r in rows)
    assert list((tmp_path / "work").iterdir()) == []  # every file removed
