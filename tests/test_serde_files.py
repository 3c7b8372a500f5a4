"""Hostile .irb/.irbt files and what serde writes (issue 12 items 8, 10, 11, 13): sidecar
locations that are FIFOs, folders, paths or forge lines; tensors aliasing sidecar bytes;
invalid IR versions; models too deeply nested for the reader are never written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_serde import small_model

from irbridge import serde
from irbridge.dtypes import DType
from irbridge.errors import FileFormatError
from irbridge.ir import Graph, Model, Tensor, TensorType


def external_text(tmp_path: Path, tensors: int = 1) -> tuple[Path, str, str]:
    """An .irbt with `tensors` external tensors; returns (path, text, sidecar name)."""
    model = small_model(np.arange(6, dtype=np.float32).reshape(2, 3))
    for i in range(1, tensors):
        model.graph.add_parameter(model.add_tensor(Tensor.from_array(
            f"w{i}", np.full((2, 3), i, np.float32))))
    path = serde.save(model, tmp_path / "m.irbt", weights="external")
    return path, path.read_text(), serde.sidecar_path(path).name


def load_error(path: Path) -> str:
    with pytest.raises(FileFormatError) as info:
        serde.load(path)
    text = str(info.value)
    assert "\n" not in text and str(path) in text, text
    return text


def test_fifo_sidecar_is_refused_without_blocking(tmp_path: Path) -> None:
    path, _text, side = external_text(tmp_path)
    (tmp_path / side).unlink()
    os.mkfifo(tmp_path / side)
    # In a subprocess with a timeout: a reader that opens the FIFO blocks forever.
    code = (f"from irbridge import serde\ntry:\n serde.load({str(path)!r})\n"
            "except Exception as e:\n print(e)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert "is not a regular file" in done.stdout, done


def test_folder_sidecar_is_one_line(tmp_path: Path) -> None:
    path, _text, side = external_text(tmp_path)
    (tmp_path / side).unlink()
    (tmp_path / side).mkdir()
    assert "is a folder" in load_error(path)


@pytest.mark.parametrize("location", ["/etc/passwd", "../m.irbt.data", "sub/x.data", ".", "",
                                      "/dev/zero"])
def test_locations_outside_the_folder_are_refused(tmp_path: Path, location: str) -> None:
    path, text, side = external_text(tmp_path)
    path.write_text(text.replace(f'location: "{side}"', f'location: "{location}"'))
    assert "is not a file name in the model's folder" in load_error(path)


def test_forged_error_line_in_a_location_stays_one_line(tmp_path: Path) -> None:
    path, text, side = external_text(tmp_path)
    path.write_text(text.replace(f'location: "{side}"',
                                 'location: "x.data\\nerror: all good"'))
    message = load_error(path)
    assert "\\n" in message and "error: all good" in message


def test_tensors_may_not_alias_sidecar_bytes(tmp_path: Path) -> None:
    """2,000 tensors on one 24-byte range used to read 2,000 copies; now the second
    tensor that overlaps another's bytes is refused (docs/ir-spec.md)."""
    path, text, _side = external_text(tmp_path, tensors=2)
    offsets = re.findall(r"offset: (\d+)", text)
    assert len(offsets) == 1  # the first tensor sits at offset 0, which text form omits
    path.write_text(text.replace(f"offset: {offsets[0]}", "offset: 8"))
    message = load_error(path)
    assert "overlaps tensor 'w'" in message or "overlaps tensor 'w1'" in message


def test_partial_overlap_and_exact_alias(tmp_path: Path) -> None:
    path, text, _side = external_text(tmp_path, tensors=3)
    offsets = re.findall(r"offset: (\d+)", text)
    # Move the third tensor onto the second's exact range.
    path.write_text(text.replace(f"offset: {offsets[1]}", f"offset: {offsets[0]}"))
    assert "overlaps" in load_error(path)


@pytest.mark.parametrize("version", ["-1", "0"])
def test_invalid_ir_version_is_refused(tmp_path: Path, version: str) -> None:
    path, text, _ = external_text(tmp_path)
    path.write_text(re.sub(r"\nir_version: \w+", f"\nir_version: {version}", text))
    assert f"IR version {version} is not valid" in load_error(path)


def nested(depth: int) -> Model:
    """`if` nodes whose then-branch holds the next level (3 message levels each)."""
    def branch(level: int) -> Graph:
        g = Graph(f"b{level}")
        c = g.add_input(f"c{level}", TensorType(DType.BOOL, ()))
        bool_type = [TensorType(DType.BOOL, ())]
        if level == 0:
            out = g.add_node("not", [c], [f"o{level}"], output_types=bool_type).outputs
        else:
            else_branch = Graph(f"e{level}")
            e = else_branch.add_input(f"e{level}", TensorType(DType.BOOL, ()))
            else_branch.set_outputs([e])
            out = g.add_node("if", [c], [f"o{level}"], output_types=bool_type,
                             attrs={"then_branch": branch(level - 1),
                                    "else_branch": else_branch}).outputs
        g.set_outputs(out)
        return g
    model = Model(name="nest")
    model.graphs.append(branch(depth))
    return model


@pytest.mark.parametrize("suffix", [".irb", ".irbt"])
def test_too_deep_a_model_is_never_written(tmp_path: Path, suffix: str) -> None:
    ok = serde.save(nested(30), tmp_path / f"ok{suffix}")
    assert serde.load(ok).name == "nest"
    target = tmp_path / f"deep{suffix}"
    with pytest.raises(FileFormatError, match=r"deep\.irbt?: this model cannot be written"):
        serde.save(nested(40), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ok{suffix}"]


def test_negative_dim_in_a_value_type_is_refused(tmp_path: Path) -> None:
    path, text, _ = external_text(tmp_path)
    path.write_text(text.replace("size: 3", "size: -3", 1))
    assert "negative dim -3" in load_error(path)


def test_a_fifo_model_file_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.irb")
    assert "is not a regular file" in load_error(tmp_path / "m.irb")
