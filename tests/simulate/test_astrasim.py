"""ASTRA-sim (built here from ../shared/simulators, cached per machine by content hash) runs
irbridge's Chakra traces, inference and training, in replay and roofline modes, and its
per-rank times agree with irbridge's own figures:

- one rank: replay = the sum of `duration_micros` x 1000 exactly; roofline = the sum of
  the nodes' `latency_ns` minus under 1 ns per node (ASTRA-sim truncates each node to
  whole ns), and the roofline step is the analysis' figure for those nodes;
- several ranks: every rank's time equals irbridge's two-stream prediction
  (converters/chakra/predict.py: ring formulas + 1F1B) within 0.1 % (measured: 0.004 %).

Slow: the first run builds ASTRA-sim (10-20 minutes on 2 cores); later runs reuse the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ir_models import cnn
from test_chakra import attrs, mlp, read_trace
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters import chakra
from irbridge.converters.chakra import astrasim
from irbridge.converters.chakra.predict import predict
from irbridge.ir import Model

pytestmark = pytest.mark.slow
# ASTRA-sim vs irbridge's prediction, relative, per rank. Measured: <= 4e-5 on resnet18,
# bert, gpt2 and resnet50; 1.2e-3 on the small ZeRO-3 MLP, whose 27 collectives of a few
# hundred KB each come out about 8 ns longer each than the closed form.
AGREE = {"unaware": 2e-3, "aware": 5e-3}


@pytest.fixture(scope="module")
def built() -> Path:
    try:
        return astrasim.binary("unaware")
    except astrasim.AstraSimUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def agree(folder: Path, mode: str, backend: str = "unaware") -> dict[int, int]:
    result = astrasim.run(folder, mode=mode, backend=backend)
    assert result.returncode == 0, (folder.name, mode, result.stdout[-300:])  # clean exit
    want = predict(folder, mode, backend)
    assert sorted(result.cycles) == sorted(want)
    for rank, cycles in result.cycles.items():
        assert cycles == pytest.approx(want[rank], rel=AGREE[backend]), (folder.name, mode, rank)
    return result.cycles


def one_rank_checks(out: Path, prefix: str) -> None:
    trace = read_trace(out / f"{prefix}.0.et")
    nodes = trace.compute()
    replay = agree(out, "replay")
    assert replay[0] == sum(n.duration_micros * 1000 for n in nodes)
    roof = agree(out, "roofline")
    exact = sum(float(attrs(n)["latency_ns"][1]) for n in nodes)
    assert exact - len(nodes) <= roof[0] <= exact
    assert roof[1] <= 2  # the idle padding rank


def test_small_traces_both_modes_both_backends(built: Path, tmp_path: Path) -> None:
    one_rank_checks(chakra.write(cnn(), tmp_path / "cnn", hardware="h100"), "cnn")
    for name, kwargs in (("pipe", dict(devices=3)), ("dp", dict(dp=4)),
                         ("zero1", dict(dp=4, zero=1)), ("zero3", dict(dp=4, zero=3)),
                         ("pp", dict(pp=3, dp=2, microbatches=4))):
        out = chakra.write(mlp(layers=12, width=512), tmp_path / name, hardware="h100",
                           **kwargs)  # type: ignore[arg-type]
        for mode in ("replay", "roofline"):
            for backend in ("unaware", "aware"):
                agree(out, mode, backend)


def test_simulate_cli(built: Path, tmp_path: Path) -> None:
    out = chakra.write(mlp(layers=6), tmp_path / "t", hardware="a100-80gb", dp=2)
    result = CliRunner().invoke(app, ["simulate", "astrasim", str(out), "--mode", "roofline"])
    assert result.exit_code == 0, result.output
    cycles = astrasim.run(out, mode="roofline").cycles
    for rank in (0, 1):
        assert f"{cycles[rank]:,}" in result.output
    assert "step time (slowest rank)" in result.output


def _load(name: str) -> Model:
    from irbridge.formats import load_model

    return load_model(name, weights=False)


@pytest.mark.parametrize(("name", "devices"), [("resnet18", 1), ("resnet18", 4),
                                               ("bert-base-uncased", 4)])
def test_inference_traces(built: Path, tmp_path: Path, name: str, devices: int) -> None:
    out = chakra.write(_load(name), tmp_path / "t", hardware="h100", devices=devices)
    if devices == 1:
        one_rank_checks(out, name)
    else:
        for mode in ("replay", "roofline"):
            agree(out, mode)


@pytest.mark.parametrize("name", ["gpt2", "resnet50"])
def test_training_traces_dp8_tp4_dp2_pp4_dp2(built: Path, tmp_path: Path, name: str) -> None:
    model = _load(name)
    # tp4dp2 uses communicator groups, whose teardown double-freed shared collective
    # implementations in upstream ASTRA-sim (glibc abort, exit -6, depending on heap
    # layout); converters/chakra/patches/03-collective-plan-shared-impl.patch fixes it,
    # and astrasim.run no longer has to forgive anything here
    for label, kwargs in (("dp8", dict(dp=8)), ("pp4dp2", dict(pp=4, dp=2, microbatches=8)),
                          ("dp8zero2", dict(dp=8, zero=2)), ("tp4dp2", dict(tp=4, dp=2))):
        out = chakra.write(model, tmp_path / label, hardware="h100",
                           **kwargs)  # type: ignore[arg-type]
        for mode in ("replay", "roofline"):
            cycles = agree(out, mode)
            assert len(cycles) == 8
