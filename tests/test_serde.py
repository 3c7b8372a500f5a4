"""Serde: round trips (property-based), file forms, sidecars, atomic writes, bad input."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from irtools import model_diff
from strategies import models

from irbridge import serde
from irbridge.dtypes import DType
from irbridge.errors import FileFormatError
from irbridge.ir import Graph, Model, Tensor, TensorType

PROPERTY = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(models())
def test_binary_round_trip_keeps_every_field(model: Model) -> None:
    assert model_diff(model, serde.from_bytes(serde.to_bytes(model))) == []


@PROPERTY
@given(models())
def test_text_round_trip_keeps_every_field(model: Model) -> None:
    assert model_diff(model, serde.from_text(serde.to_text(model))) == []


@PROPERTY
@given(models(), st.sampled_from(["auto", "external", "inline"]))
def test_file_round_trip_with_sidecar(tmp_path_factory: pytest.TempPathFactory, model: Model,
                                      weights: str) -> None:
    folder = tmp_path_factory.mktemp("rt")
    for name in ("m.irb", "m.irbt"):
        path = serde.save(model, folder / name, weights=weights, external_threshold=8)
        assert model_diff(model, serde.load(path)) == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzzed_bytes_raise_only_file_format_error(data: bytes) -> None:
    for blob in (data, serde.MAGIC + data, serde.TEXT_HEADER.encode() + b"\n" + data):
        with contextlib.suppress(FileFormatError):
            serde.from_bytes(blob)
        with contextlib.suppress(FileFormatError):
            serde.from_text(blob.decode("utf-8", errors="replace"))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models(), st.data())
def test_truncated_and_flipped_files_raise_only_file_format_error(model: Model,
                                                                   data: st.DataObject) -> None:
    blob = serde.to_bytes(model)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(FileFormatError):
        serde.from_bytes(blob[:cut]) if cut < len(serde.MAGIC) else _strict(blob[:cut], blob)
    position = data.draw(st.integers(0, len(blob) - 1))
    flipped = bytearray(blob)
    flipped[position] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(FileFormatError):
        serde.from_bytes(bytes(flipped))


def _strict(prefix: bytes, full: bytes) -> None:
    """A truncated protobuf may still parse (it ends on a field boundary); then it must
    differ from the full model, so we accept equality as the one way not to raise."""
    model = serde.from_bytes(prefix)
    if model_diff(model, serde.from_bytes(full)):
        raise FileFormatError("parsed a different, shorter model")


def small_model(weights: np.ndarray | None = None) -> Model:
    model = Model(name="small")
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.FLOAT32, (2, 3)))
    w = graph.add_parameter(model.add_tensor(Tensor.from_array(
        "w", weights if weights is not None else np.arange(6, dtype=np.float32).reshape(2, 3))))
    y = graph.add_node("add", [x, w], ["y"], output_types=[TensorType(DType.FLOAT32, (2, 3))])
    graph.set_outputs(y.outputs)
    model.graphs.append(graph)
    return model


def test_large_tensors_go_to_the_sidecar(tmp_path: Path) -> None:
    big = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    path = serde.save(small_model(big[:2, :3].copy()), tmp_path / "m.irb")
    assert not list(tmp_path.glob("m.irb*.data"))  # 24 bytes stay inline
    model = small_model()
    model.add_tensor(Tensor.from_array("big", big))
    model.graph.add_parameter(model.tensors["big"])
    path = serde.save(model, tmp_path / "m.irb")
    assert serde.sidecar_path(path).stat().st_size >= big.nbytes
    assert path.stat().st_size < 4096
    loaded = serde.load(path)
    np.testing.assert_array_equal(loaded.tensors["big"].data, big)
    shape_only = serde.load(path, weights=False)
    assert shape_only.tensors["big"].data is None and shape_only.tensors["big"].shape == (512, 1024)


def test_saved_files_get_normal_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        path = serde.save(small_model(), tmp_path / "m.irb", weights="external")
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644
    assert serde.sidecar_path(path).stat().st_mode & 0o777 == 0o644


def test_shape_only_save_stores_no_weights(tmp_path: Path) -> None:
    path = serde.save(small_model(), tmp_path / "m.irb", weights="none")
    assert serde.load(path).tensors["w"].data is None


def test_stale_sidecar_is_removed_when_no_longer_needed(tmp_path: Path) -> None:
    model = small_model()
    path = serde.save(model, tmp_path / "m.irb", weights="external")
    first = serde.sidecar_path(path)
    assert first.exists()
    serde.save(model, tmp_path / "m.irb", weights="external")
    assert serde.sidecar_path(path) != first and not first.exists()  # a new generation
    serde.save(model, tmp_path / "m.irb", weights="inline")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.irb"]


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p.write_bytes(p.read_bytes()[:40]), "truncated or corrupt"),
    (lambda p: p.write_bytes(b"PK\x03\x04 not ours"), "not an irbridge file"),
    (lambda p: p.write_bytes(b""), "not an irbridge file"),
    (lambda p: serde.sidecar_path(p).unlink(), "sidecar file 'm.irb."),
    (lambda p: serde.sidecar_path(p).write_bytes(b"\0" * 8), "too short"),
    (lambda p: _flip_sidecar(serde.sidecar_path(p)), "checksum mismatch"),
])
def test_bad_files_give_one_line_errors_naming_the_file(tmp_path: Path, mutate, message) -> None:
    path = serde.save(small_model(), tmp_path / "m.irb", weights="external")
    mutate(path)
    with pytest.raises(FileFormatError) as info:
        serde.load(path)
    text = str(info.value)
    assert message in text and str(path) in text and "\n" not in text


def _flip_sidecar(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))


def test_newer_ir_version_is_rejected(tmp_path: Path) -> None:
    model = small_model()
    model.ir_version = 99
    path = serde.save(model, tmp_path / "new.irb")
    with pytest.raises(FileFormatError, match=r"IR version 99 is newer .* upgrade irbridge"):
        serde.load(path)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="no such file"):
        serde.load(tmp_path / "absent.irb")
    with pytest.raises(FileFormatError, match="is a folder"):
        serde.load(tmp_path)
    with pytest.raises(FileFormatError, match="does not exist"):
        serde.save(small_model(), tmp_path / "nope" / "m.irb")


def test_failed_write_leaves_old_file_and_no_temporaries(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = serde.save(small_model(), tmp_path / "m.irb")
    before = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(FileFormatError, match=r"m\.irb: cannot write \(No space left"):
        serde.save(small_model(np.ones((2, 3), np.float32)), path, weights="external")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.irb"]


def test_dangling_reference_in_file_is_reported(tmp_path: Path) -> None:
    text = serde.to_text(small_model()).replace('inputs: "x"', 'inputs: "ghost"')
    with pytest.raises(FileFormatError, match="reads 'ghost', which is not defined"):
        serde.from_text(text, source="edited.irbt")


NEW_DTYPES = [d for d in DType if d.value >= DType.INT4.value]  # added 2026-11-26


@pytest.mark.parametrize("dtype", NEW_DTYPES, ids=lambda d: d.short)
def test_every_new_dtype_round_trips_exactly_in_every_file_form(tmp_path: Path,
                                                                dtype: DType) -> None:
    """Every bit pattern of the type (all 2^bits of them, NaNs included) survives binary,
    text and sidecar files; the stored bytes are one per element with high bits zero."""
    patterns = np.arange(1 << dtype.bits, dtype=np.uint8)
    data = patterns.view(dtype.numpy).reshape(-1, 1 << min(dtype.bits, 2))
    graph = Graph("g")
    graph.add_input("x", TensorType(dtype, data.shape))
    model = Model(name="m", graphs=[graph])
    model.add_tensor(Tensor("w", dtype, data.shape, data))
    model.add_tensor(Tensor("w_shape_only", dtype, (3,)))
    assert model_diff(model, serde.from_bytes(serde.to_bytes(model))) == []
    assert model_diff(model, serde.from_text(serde.to_text(model))) == []
    path = serde.save(model, tmp_path / "m.irb", weights="external", external_threshold=1)
    back = serde.load(path)
    assert model_diff(model, back) == []
    assert back.tensors["w"].data is not None
    assert back.tensors["w"].data.view(np.uint8).ravel().tolist() == patterns.tolist()
    assert back.graphs[0].inputs[0].type == TensorType(dtype, data.shape)


@pytest.mark.parametrize("dtype", [d for d in DType if d.bits < 8], ids=lambda d: d.short)
def test_sub_byte_high_bits_are_cleared_on_write_and_refused_on_read(dtype: DType) -> None:
    # ml_dtypes reads a byte with high bits set as some value of the type: the file stores
    # that value's canonical pattern (for 0x01..0x0F the pattern with the high bits cleared)
    data = np.frombuffer(bytes([0xF0 | 1, 0x12, 1]), dtype=dtype.numpy).copy()
    model = Model(name="m", graphs=[Graph("g")])
    model.add_tensor(Tensor("w", dtype, (3,), data))
    back = serde.from_bytes(serde.to_bytes(model))
    assert back.tensors["w"].data is not None
    assert [float(v) for v in back.tensors["w"].data] == [float(v) for v in data]
    assert all(b >> dtype.bits == 0 for b in back.tensors["w"].data.view(np.uint8))
    model.tensors["w"] = Tensor("w", dtype, (1,), data[2:])
    text = serde.to_text(model)
    assert "\\001" in text
    with pytest.raises(FileFormatError, match=f"'w'.*{dtype.short} element has bits set"):
        serde.from_text(text.replace("\\001", "\\361"))
