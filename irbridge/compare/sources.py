"""The two sides of a comparison: an IR, ONNX or StableHLO file, or a zoo model captured on
the fly by one of the ways users meet it (an irbridge front-end, the ONNX file that
`torch.onnx.export(dynamo=True)` writes, torch-mlir's StableHLO). A side that cannot be
captured is kept with its reason, so the report can say so instead of failing."""

from __future__ import annotations

import inspect
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from irbridge.analysis.binding import model_symbols
from irbridge.analysis.check import check_shapes, check_structure
from irbridge.atomic import not_a_file
from irbridge.errors import IrbridgeError, UnknownDimError
from irbridge.formats import binds_at_import, is_model_file, read_file
from irbridge.ir import Model

CAPTURE_FRONTENDS = ("fx", "dynamo", "export", "auto")
"""irbridge's own PyTorch front-ends."""
HOWS = (*CAPTURE_FRONTENDS, "onnx", "stablehlo")
"""Every way a zoo model can be brought in; `onnx` is torch.onnx.export(dynamo=True) then
irbridge's ONNX import, `stablehlo` is torch-mlir's fx importer then the StableHLO import."""
DEFAULT_HOWS = ("dynamo", "onnx")


@dataclass
class Side:
    """One side of the comparison: what was asked for, the model (None when it failed to
    capture) and, for zoo models, the example inputs by forward-parameter name."""

    spec: str
    how: str  # a HOWS entry, or "file"
    model: Model | None = None
    error: str = ""
    seconds: float = 0.0
    examples: dict[str, np.ndarray] = field(default_factory=dict)
    bound: dict[str, int] = field(default_factory=dict)
    """The `--bind` dims this file has (the others may be the other side's)."""

    @property
    def label(self) -> str:
        return Path(self.spec).name if self.how == "file" else f"{self.spec} ({self.how})"

    @property
    def ok(self) -> bool:
        return self.model is not None


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = f"{type(exc).__name__}: {text}" if not isinstance(exc, IrbridgeError) else text
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_sides(left: str, right: str, left_how: str | None = None,
               right_how: str | None = None,
               dims: Mapping[str, int] | None = None) -> tuple[Side, Side]:
    """Load both sides; a zoo model named on both sides is built once, so both captures
    see the same module, weights and example inputs. `dims` (`--bind`) binds an ONNX
    file's symbolic input dims as it is read (`formats.read_file`)."""
    built_cache: dict[str, Any] = {}
    hows = [left_how, right_how]
    for index, (spec, how) in enumerate(((left, left_how), (right, right_how))):
        if dims and not is_model_file(spec):
            raise IrbridgeError(f"--bind applies to model files, not to the model name "
                                f"{spec!r} (captured with static shapes)")
        if is_model_file(spec):
            if how is not None:
                raise IrbridgeError(f"{spec} is a model file; --{('left', 'right')[index]} "
                                    f"{how} applies to a model name only")
            if not Path(spec).is_file():
                raise IrbridgeError(f"{spec}: {not_a_file(spec)}")
        elif how is None:
            hows[index] = DEFAULT_HOWS[index]
        elif how not in HOWS:
            raise IrbridgeError(f"unknown capture method {how!r}; known: {', '.join(HOWS)}")
    return (load_side(left, hows[0], built_cache, dims),
            load_side(right, hows[1], built_cache, dims))


def load_side(spec: str, how: str | None, built_cache: dict[str, Any] | None = None,
              dims: Mapping[str, int] | None = None) -> Side:
    """Read a file (how None) or build the zoo model `spec` and bring it in by `how`."""
    start = time.perf_counter()
    if is_model_file(spec):
        side = Side(spec, "file")
        try:
            side.model, side.bound = _read_bound(Path(spec), dims or {})
            # shapes and structure the cost model and the executor can work with
            check_structure(side.model)
            check_shapes(side.model)
        except IrbridgeError as exc:
            side.error = _one_line(exc)
        side.seconds = time.perf_counter() - start
        return side
    assert how is not None
    from irbridge.converters.pytorch import zoo

    cache = built_cache if built_cache is not None else {}
    if spec not in cache:
        cache[spec] = zoo.build(spec)  # an unknown name is bad input: IrbridgeError
    built = cache[spec]
    side = Side(spec, how, examples=example_inputs(built.module, built.args, built.kwargs))
    try:
        side.model = _bring_in(built, how)
        side.model.name = side.model.name or built.name
    except Exception as exc:  # any capture failure is reported with its reason
        side.error = _one_line(exc)
    side.seconds = time.perf_counter() - start
    return side


def _read_bound(path: Path, dims: Mapping[str, int]) -> tuple[Model, dict[str, int]]:
    """Read a file binding those of `dims` it has: one `--bind` serves a dynamic file
    compared with a static one (a name neither side has is refused by the caller)."""
    if not binds_at_import(str(path)):  # IR files: bound on their value types later
        model = read_file(path, weights=True)
        known = model_symbols(model)
        return model, {name: size for name, size in dims.items() if name in known}
    try:
        return read_file(path, weights=True, dims=dims), dict(dims)
    except UnknownDimError as exc:
        mine = {name: size for name, size in dims.items() if name in exc.known}
        return read_file(path, weights=True, dims=mine), mine


def _bring_in(built: Any, how: str) -> Model:
    import torch

    if how in CAPTURE_FRONTENDS:
        from irbridge.converters.pytorch import capture

        return capture(built.module, built.args, built.kwargs, frontend=how, weights=True).model
    if how == "onnx":
        from irbridge.converters.onnx import import_onnx

        with tempfile.TemporaryDirectory(prefix="irbridge-compare-") as folder:
            path = Path(folder) / "model.onnx"
            with torch.no_grad():
                torch.onnx.export(built.module, built.args, str(path),
                                  kwargs=built.kwargs, dynamo=True, verbose=False)
            return import_onnx(path)
    if how == "stablehlo":
        import torch_mlir.fx

        from irbridge.converters.stablehlo import from_mlir

        with torch.no_grad():
            module = torch_mlir.fx.export_and_import(built.module, *built.args,
                                                     output_type="stablehlo", **built.kwargs)
        return from_mlir(str(module))
    raise IrbridgeError(f"unknown capture method {how!r}; known: {', '.join(HOWS)}")


def example_inputs(module: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                   ) -> dict[str, np.ndarray]:
    """The zoo's example tensors by forward-parameter name (the names every front-end and
    torch.onnx give graph inputs)."""
    import torch

    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"arg{i}": a for i, a in enumerate(args)} | dict(kwargs)
    return {name: value.detach().cpu().numpy() for name, value in bound.items()
            if isinstance(value, torch.Tensor)}
