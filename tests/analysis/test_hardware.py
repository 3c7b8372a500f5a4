"""The hardware catalog: every target loads, figures are dense and sourced; bad files."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from irbridge.analysis.hardware import (
    CATALOG_DIR,
    PEAK_KEYS,
    catalog,
    load_target_file,
    resolve_target,
    resolve_targets,
)
from irbridge.errors import IrbridgeError

REQUIRED = ["h100-sxm", "h100-pcie", "a100-80gb", "l4", "tpu-v4", "tpu-v5e", "jetson-agx-orin",
            "jetson-orin-nano", "xeon-8480plus", "epyc-9654"]


def test_catalog_has_the_required_targets_and_an_edge_npu() -> None:
    targets = catalog()
    assert set(REQUIRED) <= set(targets)
    assert any(t.kind == "npu" for t in targets.values())
    assert any(t.kind == "cpu" and "amx" in str(t.peaks["bf16"].source).lower()
               for t in targets.values())
    assert sorted(p.stem for p in CATALOG_DIR.glob("*.yaml")) == sorted(targets)


@pytest.mark.parametrize("name", sorted(catalog()))
def test_every_figure_is_positive_and_sourced(name: str) -> None:
    target = catalog()[name]
    assert target.peaks and set(target.peaks) <= set(PEAK_KEYS)
    figures = [*target.peaks.values(), target.memory_bandwidth, *target.on_chip.values()]
    if target.memory_capacity is not None:
        figures.append(target.memory_capacity)
    if target.interconnect_bandwidth is not None:
        figures.append(target.interconnect_bandwidth)
    for figure in figures:
        assert figure.value > 0
        assert len(figure.source) > 20, f"{name}: source {figure.source!r} is not a citation"
    assert 0 < target.compute_efficiency <= 1 and 0 < target.memory_efficiency <= 1
    for key in target.peaks:
        assert target.ridge(key) == pytest.approx(target.peak(key) / target.bandwidth)
    # dense peaks: a reduced-precision tensor peak is at most 2x the next wider one
    ordered = [target.peaks[k].value for k in ("tf32", "bf16", "fp8") if k in target.peaks]
    assert all(b <= 2.05 * a for a, b in itertools.pairwise(ordered))


def test_dense_figures_of_known_parts() -> None:
    """Vendor sheets quote 2:4 sparse tensor peaks; the catalog holds dense ones."""
    t = catalog()
    assert t["h100-sxm"].peaks["bf16"].value == 989.5e12
    assert t["h100-sxm"].peaks["fp8"].value == 1979e12
    assert t["h100-sxm"].memory_bandwidth.value == 3.35e12
    assert t["a100-80gb"].peaks["bf16"].value == 312e12
    assert t["a100-80gb"].memory_bandwidth.value == 2039e9
    assert t["h100-sxm"].interconnect_bandwidth.value == 900e9  # type: ignore[union-attr]
    assert t["a100-80gb"].interconnect_bandwidth.value == 600e9  # type: ignore[union-attr]
    assert t["l4"].interconnect_bandwidth is None
    assert t["l4"].peaks["fp8"].value == 242.5e12
    assert t["tpu-v5e"].peaks["int8"].value == 394e12
    assert t["jetson-orin-nano"].peaks["int8"].value == 33.5e12
    xeon = t["xeon-8480plus"]
    assert xeon.peaks["bf16"].value == pytest.approx(56 * 2.0e9 * 1024)
    assert "56 cores x 2.0 GHz x 1024" in xeon.peaks["bf16"].note
    assert t["epyc-9654"].memory_bandwidth.value == pytest.approx(12 * 4800e6 * 8)


def test_names_and_aliases_resolve() -> None:
    assert resolve_target("h100").name == "h100-sxm"
    assert resolve_target("A100").name == "a100-80gb"
    assert [t.name for t in resolve_targets("h100,a100,h100-sxm,l4")] == \
        ["h100-sxm", "a100-80gb", "l4"]


def test_unknown_target_lists_known_ones_and_close_matches() -> None:
    with pytest.raises(IrbridgeError) as info:
        resolve_target("h200x")
    message = str(info.value)
    assert message.startswith("unknown target 'h200x'; known: a100-80gb, ")
    assert "h100-sxm" in message and "did you mean" in message


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my.yaml"
    path.write_text(text)
    return path


GOOD = """
name: my-npu
title: My NPU
kind: npu
source: "my lab's measurements, 2026"
peaks: {bf16: 100, int8: {value: 400, unit: TOPS, source: "vendor sheet v2"}}
memory_bandwidth: {value: 1, unit: TB/s}
on_chip: {sram: {value: 64, unit: MiB}}
efficiency: {compute: 0.5, memory: 0.8}
"""


def test_a_user_target_loads(tmp_path: Path) -> None:
    target = load_target_file(_write(tmp_path, GOOD))
    assert target.name == "my-npu" and target.peaks["bf16"].value == 100e12
    assert target.peaks["int8"].source == "vendor sheet v2"
    assert target.peak("bf16") == 50e12 and target.bandwidth == 0.8e12
    assert target.on_chip["sram"].value == 64 * 2**20
    assert resolve_target(str(tmp_path / "my.yaml")).name == "my-npu"


@pytest.mark.parametrize("edit, message", [
    (("memory_bandwidth: {value: 1, unit: TB/s}\n", ""), "my.yaml: missing 'memory_bandwidth'"),
    (("bf16: 100", "bf16: -5"), "my.yaml: peak 'bf16' must be positive, got -5"),
    (("bf16: 100", "bf16: fast"), "my.yaml: peak 'bf16' must be a number, got 'fast'"),
    (("bf16: 100", "fp4: 100"), "my.yaml: unknown peak 'fp4'; known: fp64, fp32"),
    (("unit: TB/s", "unit: TB"), "my.yaml: memory_bandwidth: unknown unit 'TB'"),
    (("source: \"my lab's measurements, 2026\"\n", ""), "my.yaml: peak 'bf16' has no source"),
    (("compute: 0.5", "compute: 1.5"), "my.yaml: efficiency 'compute' must be at most 1"),
    (("kind: npu", "kind: fpga"), "my.yaml: kind must be one of gpu, tpu, cpu, npu, soc"),
    (("title: My NPU", "titel: My NPU"), "my.yaml: unknown field 'titel'"),
    (("name: my-npu", "name: My NPU"), "my.yaml: name must be lowercase"),
    (("peaks: {", "peaks: {{"), "my.yaml: not valid YAML at line"),
    # PyYAML keeps the last of two equal keys: the file would silently say 2 TB/s
    (("memory_bandwidth: {value: 1, unit: TB/s}\n",
      "memory_bandwidth: {value: 1, unit: TB/s}\nmemory_bandwidth: {value: 2, unit: TB/s}\n"),
     "my.yaml: not valid YAML at line 8 (duplicate key 'memory_bandwidth')"),
    (("bf16: 100", "bf16: 100, bf16: 200"),
     "my.yaml: not valid YAML at line 6 (duplicate key 'bf16')"),
])
def test_bad_target_files_give_one_clear_error(tmp_path: Path, edit: tuple[str, str],
                                               message: str) -> None:
    old, new = edit
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(IrbridgeError) as info:
        load_target_file(path)
    assert str(info.value).startswith(str(path.parent / message)) or \
        str(info.value).startswith(message.replace("my.yaml", str(path)))


def test_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    """YAML's `<<` merge brings keys in that the mapping may override: not a duplicate."""
    text = GOOD.replace("efficiency: {compute: 0.5, memory: 0.8}",
                        "base: &b {compute: 0.5, memory: 0.9}\n"
                        "efficiency: {<<: *b, memory: 0.8}")
    with pytest.raises(IrbridgeError, match="unknown field 'base'"):
        load_target_file(_write(tmp_path, text))  # parsed: only the field is unknown


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(IrbridgeError, match=r"nowhere\.yaml: no such file"):
        resolve_target(str(tmp_path / "nowhere.yaml"))
    with pytest.raises(IrbridgeError, match="empty file; missing 'name'"):
        load_target_file(_write(tmp_path, ""))
