"""Resolve what a user names on the command line into an IR model: an irbridge file, a
file of another format (by suffix), or a model name that is captured on the fly."""

from __future__ import annotations

from pathlib import Path

from irbridge import serde
from irbridge.errors import IrbridgeError
from irbridge.ir import Model

IR_SUFFIXES = (".irb", ".irbt")


def load_model(spec: str, *, weights: bool = False, frontend: str = "auto") -> Model:
    """FILE_OR_MODEL -> Model. `weights=False` keeps captured models shape-only (enough for
    analysis); files are read by suffix; anything else goes to the PyTorch model zoo."""
    path = Path(spec)
    if path.suffix in IR_SUFFIXES:
        return serde.load(path, weights=weights)
    if path.suffix == ".onnx":
        from irbridge.converters.onnx import import_onnx

        return import_onnx(path)
    if path.is_dir():
        raise IrbridgeError(f"{spec}: is a folder; give an irbridge file or a model name")
    from irbridge.converters.pytorch import capture, zoo

    built = zoo.build(spec)
    result = capture(built.module, built.args, built.kwargs, frontend=frontend, weights=weights)
    result.model.name = built.name
    return result.model
