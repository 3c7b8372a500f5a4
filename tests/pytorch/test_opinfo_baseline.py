"""The OpInfo sweep (tools/opinfo_sweep.py) must not regress from the baseline it wrote
(tests/data/pytorch_opinfo_baseline.json): a fixed subset of PyTorch's OpInfo ops, one or
two per family, is re-run live here through the irbridge paths, and every op that passed a
path in the baseline must still pass it; no op may become silently wrong (capture + verify
passing with wrong numbers, or an ONNX file exported without complaint that is wrong or
cannot be loaded). The import of PyTorch's OpInfo database dominates the time (seconds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import opinfo_sweep as sweep  # noqa: E402

BASELINE = json.loads((ROOT / "tests" / "data" / "pytorch_opinfo_baseline.json").read_text())
DOC = (ROOT / "docs" / "pytorch-opinfo.md").read_text()
# one or two ops per family: elementwise, unsupported elementwise, scan, order statistics,
# shape, convolution, activation with parameters, resampling, reduction with indices,
# special functions
SUBSET = ("add", "atan2", "cumsum", "topk", "stack", "nn.functional.conv2d",
          "nn.functional.softplus", "nn.functional.interpolate.linear",
          "max.reduction_with_dim", "special.ndtr",
          "bitwise_right_shift", "tril_indices")  # swept at int64 (no float32 support)
IR_PATHS = ("irbridge", "onnx", "stablehlo")


def test_doc_totals_are_the_baseline() -> None:
    summary = BASELINE["summary"]
    tried = summary["tried"]
    assert f"- Ops tried: **{tried}** of the {summary['database_ops']} OpInfos" in DOC
    verified = summary["irbridge_verified"]
    assert f"**{verified} verified ({sweep.pct(verified, tried)})**" in DOC
    assert f"**{summary['torch_onnx_correct']} correct (" in DOC
    assert (f"correct on **{summary['onnx_correct_of_verified']} of the {verified} "
            "irbridge-verified ops") in DOC
    for path in sweep.PATHS:
        counts = summary["paths"][path]
        assert sum(counts.values()) == tried, path
        assert len(BASELINE["passing"][path]) == counts.get("pass", 0), path
        row = f"| {path} | {counts.get('pass', 0)} ({sweep.pct(counts.get('pass', 0), tried)})"
        assert row in DOC, path
        assert len(BASELINE["silently_wrong"][path]) == summary["silently_wrong"][path]
    assert set(BASELINE["passing"]["irbridge"]).isdisjoint(BASELINE["silently_wrong"]
                                                           ["irbridge"])
    assert summary["onnx_correct_of_verified"] == len(
        set(BASELINE["passing"]["irbridge"]) & set(BASELINE["passing"]["onnx"]))


def test_compare_uses_torch_testing_tolerances() -> None:
    f = np.float32
    ref = [np.array([1000.0, 0.0, np.nan, np.inf], f)]
    # float32: atol 1e-5 + rtol 1.3e-6 * |expected|, per element
    assert sweep.compare([np.array([1000.001, 9e-6, np.nan, np.inf], f)], ref) is None
    assert sweep.compare([np.array([1000.0, 2e-5, np.nan, np.inf], f)], ref)
    assert sweep.compare([np.array([1000.0, 0.0, 1.0, np.inf], f)], ref)      # NaN vs 1
    assert sweep.compare([np.array([1000.0, 0.0, np.nan, -np.inf], f)], ref)  # -inf vs inf
    why = sweep.compare([np.zeros(1, f)], [np.zeros((), f)])
    assert why is not None and "shape [1] != eager []" in why
    assert sweep.compare([np.array([1, 2])], [np.array([1, 3])])            # ints: exact
    # verify's tolerance is relative to the output's largest magnitude
    assert sweep.compare([np.array([1000.0, 0.05], f)], [np.array([1000.0, 0.0], f)],
                         "verify") is None
    # a complex result written as a trailing (real, imag) pair is the same result
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    assert sweep.compare([np.array([[1, 2], [3, -1]], f)], [z]) is None
    assert sweep.compare([np.array([[1, 2], [3, 1]], f)], [z])


def test_set_aside_names_why() -> None:
    assert sweep.set_aside("randn_like") == "random values"
    assert sweep.set_aside("nn.functional.dropout") == "random values"
    assert sweep.set_aside("empty_like") == "uninitialised output"
    assert sweep.set_aside("to_sparse") == "sparse layout"
    assert sweep.set_aside("add") is None


@pytest.fixture(scope="module")
def live() -> dict[str, dict]:
    sweep.preload()
    ops, _ = sweep.database()
    return {key: sweep.run_op(ops[key], key, IR_PATHS) for key in SUBSET}


def test_subset_does_not_regress(live: dict[str, dict]) -> None:
    for path in IR_PATHS:
        now = {k for k, r in live.items() if r["paths"].get(path, {}).get("status") == "pass"}
        before = set(BASELINE["passing"][path]) & set(SUBSET)
        assert before <= now, (path, {k: live[k]["paths"].get(path) for k in before - now})
        silent = {k for k, r in live.items() if r["paths"].get(path, {}).get("silently_wrong")}
        new = silent - set(BASELINE["silently_wrong"][path])
        assert not new, (path, {k: live[k]["paths"][path] for k in new})


def test_second_input_is_perturbed_with_same_shapes(live: dict[str, dict]) -> None:
    ops, _ = sweep.database()
    sample = sweep.Sample(ops["nn.functional.conv2d"], "nn.functional.conv2d")
    assert [t.shape for t in sample.second] == [t.shape for t in sample.inputs]
    x, y = sample.inputs[0].numpy(), sample.second[0].numpy()
    assert not np.array_equal(x, y)
    ratio = y[x != 0] / x[x != 0]
    assert ratio.min() >= 0.85 - 1e-6 and ratio.max() <= 1.0 + 1e-6
    # the seed comes from the op's name: the same op gives the same sample
    again = sweep.Sample(ops["nn.functional.conv2d"], "nn.functional.conv2d")
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(sample.inputs,
                                                                    again.inputs, strict=True))


def test_sign_free_vectors_are_compared_up_to_a_sign_per_column() -> None:
    """linalg.eigh / linalg.svd / svd: vectors that differ by a sign per column (with the
    partner flipped along) compare equal after the sweep's rule; any other change does
    not, and the normalised factors still reproduce the matrix."""
    import torch

    a = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    flips = torch.tensor([-1.0, 1.0, -1.0], dtype=torch.float64)

    def flipped(x: torch.Tensor, full_matrices: bool = False) -> tuple[torch.Tensor, ...]:
        u, s, vh = torch.linalg.svd(x, full_matrices=full_matrices)
        return u * flips, s, vh * flips[:, None]

    rule = sweep.SIGN_FREE["linalg.svd"]
    plain = sweep._sign_normalised(torch.linalg.svd, *rule)(a, full_matrices=False)
    other = sweep._sign_normalised(flipped, *rule)(a)
    assert not torch.equal(flipped(a)[0], torch.linalg.svd(a, full_matrices=False)[0])
    assert sweep.compare([t.numpy() for t in other], [t.numpy() for t in plain]) is None
    u, s, vh = plain
    torch.testing.assert_close(u * s[..., None, :] @ vh, a)
    wrong = (u.flip(-1), s, vh)  # columns swapped: not a sign change
    assert sweep.compare([t.numpy() for t in wrong], [t.numpy() for t in plain])
    sym = a[0, :3] + a[0, :3].mT
    w, v = sweep._sign_normalised(torch.linalg.eigh, *sweep.SIGN_FREE["linalg.eigh"])(sym)
    w2, v2 = sweep._sign_normalised(lambda x: (torch.linalg.eigh(x)[0],
                                               -torch.linalg.eigh(x)[1]),
                                    *sweep.SIGN_FREE["linalg.eigh"])(sym)
    assert torch.equal(v, v2) and torch.equal(w, w2)
