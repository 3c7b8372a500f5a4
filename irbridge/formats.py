"""What users name on the command line, resolved in one place: model files are read by
suffix (irbridge, ONNX, StableHLO), anything else is a model to capture through the
PyTorch front-ends; outputs are written by format name or suffix."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from irbridge import serde
from irbridge.errors import IrbridgeError
from irbridge.ir import Model

IR_SUFFIXES = (".irb", ".irbt")
ONNX_SUFFIXES = (".onnx",)
STABLEHLO_SUFFIXES = (".mlir", ".mlirbc", ".jaxexport")
"""Read as StableHLO; `.jaxexport` is a serialized `jax.export` Exported (read only)."""


def is_model_folder(spec: str) -> bool:
    """A Hugging Face model folder (config.json inside): a model the zoo builds."""
    return Path(spec).is_dir() and (Path(spec) / "config.json").is_file()


def is_model_file(spec: str) -> bool:
    return Path(spec).suffix in IR_SUFFIXES + ONNX_SUFFIXES + STABLEHLO_SUFFIXES


def read_file(path: Path, *, weights: bool = True,
              dims: Mapping[str, int] | None = None) -> Model:
    """Read an irbridge, ONNX or StableHLO file into the IR, by suffix. `dims` binds an
    ONNX file's symbolic input dims before its shapes are inferred, and a StableHLO
    program's dynamic dims before its shapes are refined (IR files: see `bound_dims`)."""
    if path.suffix in IR_SUFFIXES:
        # A file from anywhere: its structure is checked (dangling values, duplicate ids,
        # ops whose attributes or types do not fit) before any command builds on it, so
        # writers and analyses never meet a graph the reader would call invalid.
        from irbridge.verify import check

        model = serde.load(path, weights=weights)
        check(model)
        return model
    if path.suffix in ONNX_SUFFIXES:
        from irbridge.converters.onnx import import_onnx

        return import_onnx(path, dims=dims)
    if path.suffix in STABLEHLO_SUFFIXES:
        from irbridge.converters.stablehlo import import_stablehlo

        return import_stablehlo(path, dims=dims)
    raise IrbridgeError(f"{path}: unknown model file type {path.suffix!r}; expected one of "
                        f"{', '.join(IR_SUFFIXES + ONNX_SUFFIXES + STABLEHLO_SUFFIXES)}")


def load_model(spec: str, *, weights: bool = False, frontend: str = "auto",
               dims: Mapping[str, int] | None = None) -> Model:
    """FILE_OR_MODEL -> Model. A model name is built by the zoo and captured; with
    `weights=False` it stays shape-only (enough for analysis). `dims` (`--bind`) applies
    to model files only: see `read_file` and `bound_dims`."""
    if is_model_file(spec):
        return read_file(Path(spec), weights=weights, dims=dims)
    if dims:
        raise IrbridgeError(f"--bind applies to model files (symbolic dims of an IR, ONNX "
                            f"or StableHLO file), not to the model name {spec!r}: capture "
                            "it with --input-shape, --batch or --seq-len")
    if Path(spec).is_dir() and not is_model_folder(spec):
        raise IrbridgeError(f"{spec}: is a folder without config.json; give a model file, a "
                            "model name or a Hugging Face model folder")
    from irbridge.converters.pytorch import capture, zoo

    repeat = False
    try:
        built = zoo.build(spec)
    except zoo.ModelTooBig:
        if weights:
            raise
        # shape-only: build on the meta device, where no weight is allocated (an LLM
        # larger than memory is analysed from its graph alone), and trace a deep stack of
        # alike layers short (`capture(repeat_blocks=True)`: the same nodes and costs)
        built = zoo.build(spec, device="meta")
        repeat = True
    with zoo.eager_blame(built):
        result = capture(built.module, built.args, built.kwargs, frontend=frontend,
                         weights=weights, repeat_blocks=repeat)
    result.model.name = built.name
    return result.model


def binds_at_import(spec: str) -> bool:
    """True when `read_file` binds the file's dims itself (ONNX: before shape inference;
    StableHLO: by refining a shape-polymorphic program's shapes)."""
    return Path(spec).suffix in ONNX_SUFFIXES + STABLEHLO_SUFFIXES


@contextlib.contextmanager
def bound_dims(model: Model, spec: str, dims: Mapping[str, int] | None) -> Iterator[None]:
    """`--bind` for the format whose reader does not bind (IR files): the
    model's symbolic dims are bound for the duration of the block (its value types, and
    the types that can be inferred again from them); an ONNX file was bound when read."""
    if not dims or binds_at_import(spec):
        yield
        return
    from irbridge.analysis.binding import bound

    with bound(model, symbols=dims):
        yield


def _write_irb(model: Model, path: Path, **options: Any) -> Path:
    return serde.save(model, path, weights=options.get("weights", "auto"))


def _write_onnx(model: Model, path: Path, **options: Any) -> Path:
    from irbridge.converters.onnx import export_onnx

    return export_onnx(model, path, opset=options.get("opset"),
                       optimize=options.get("optimize", True),
                       fold_batch_norm=options.get("fold_batch_norm", False),
                       allow_custom_ops=options.get("allow_custom_ops", False),
                       target=options.get("target", "onnx"))


def _write_stablehlo(model: Model, path: Path, **options: Any) -> Path:
    from irbridge.converters.stablehlo import export_stablehlo

    return export_stablehlo(model, path, target_version=options.get("target_version"),
                            weights_as_args=options.get("weights_as_args", False))


DEFAULT_HARDWARE = "h100-sxm"
PARALLEL_OPTIONS = ("dp", "tp", "pp", "microbatches", "zero")


def _output_writer(package: str, fmt: str | None = None, *, devices: bool = False
                   ) -> Callable[..., Path]:
    """A writer for a simulator or viewer format: `irbridge.converters.<package>.write(
    model, path, hardware=..., [devices=...], [fmt=...])`, imported only when used."""

    def write(model: Model, path: Path, **options: Any) -> Path:
        import importlib

        module = importlib.import_module(f"irbridge.converters.{package}")
        kwargs: dict[str, Any] = {"hardware": options.get("hardware") or DEFAULT_HARDWARE}
        if devices:  # chakra: pipeline split, or the parallel training step
            kwargs["devices"] = options.get("devices") or 1
            kwargs.update({k: options[k] for k in PARALLEL_OPTIONS if options.get(k) is not None})
        if fmt is not None:
            kwargs["fmt"] = fmt
        result: Path = module.write(model, path, **kwargs)
        return result

    write.accepts_devices = devices  # type: ignore[attr-defined]
    return write


WRITERS: dict[str, Callable[..., Path]] = {
    "irb": _write_irb,
    "onnx": _write_onnx,
    "stablehlo": _write_stablehlo,
    "chakra": _output_writer("chakra", devices=True),
    "scalesim": _output_writer("scalesim"),
    "timeloop": _output_writer("timeloop"),
    "model-explorer": _output_writer("modelexplorer"),
    "dot": _output_writer("graphviz", "dot"),
    "svg": _output_writer("graphviz", "svg"),
    "png": _output_writer("graphviz", "png"),
    "html": _output_writer("html"),
}
# Formats that need the weights; the others read the model shape-only.
WEIGHTED_FORMATS = ("irb", "onnx", "stablehlo")
_BY_SUFFIX = {**dict.fromkeys(IR_SUFFIXES, "irb"), **dict.fromkeys(ONNX_SUFFIXES, "onnx"),
              ".mlir": "stablehlo", ".mlirbc": "stablehlo", ".dot": "dot", ".gv": "dot",
              ".svg": "svg", ".png": "png", ".html": "html"}


FOLDER_FORMATS = ("chakra", "scalesim", "timeloop")
"""The formats whose output is a folder (one file per rank or layer); the others write
one file."""


def output_path(raw: str, fmt: str | None = None) -> Path:
    """The path of `-o RAW` for format `fmt` (None: the suffix's). pathlib drops a trailing
    separator, so `-o out/` would write a file named `out`: a name spelled as a folder is
    refused unless the format writes a folder."""
    path = Path(raw)
    if raw == "-":  # the usual spelling of standard output, which no writer streams to
        raise IrbridgeError("-o -: irbridge writes files, not standard output; give a file "
                            "name (e.g. -o model.onnx)")
    if raw.endswith(("/", os.sep)):
        fmt = fmt or _BY_SUFFIX.get(path.suffix)
        if fmt not in FOLDER_FORMATS:
            what = f"{fmt} output" if fmt else "this output"
            raise IrbridgeError(f"{raw}: ends with '/', so it names a folder, but {what} is "
                                "one file: give the file's name")
    if path.is_symlink():
        # written through, as a shell redirection would: the atomic rename would replace
        # the link itself with a file and leave the file it points to as it was. Only to
        # a regular file (or a new one) of the same suffix: a link to a device stays the
        # link, which the writers refuse as not a regular file, and the format stays the
        # one the name given says
        real = Path(os.path.realpath(path))
        if real.suffix == path.suffix and (real.is_file() or not real.exists()):
            path = real
    return path


def output_format(path: Path, fmt: str | None) -> str:
    """The format to write: `fmt` when given, else from the suffix."""
    if fmt is not None:
        if fmt not in WRITERS:
            raise IrbridgeError(f"unknown output format {fmt!r}; known: {', '.join(WRITERS)}")
        other = _BY_SUFFIX.get(path.suffix)
        if other is not None and other != fmt:
            # readers (irbridge's included) go by the suffix: an ONNX file named .irb is
            # refused as "not an irbridge file"
            own = [suffix for suffix, f in _BY_SUFFIX.items() if f == fmt]
            raise IrbridgeError(
                f"{path}: the suffix {path.suffix} is for {other} files, but --to {fmt} "
                f"writes {fmt}", hint=(f"name it {path.with_suffix(own[0]).name}" if own
                                       else "drop --to, or give a name without that suffix"))
        return fmt
    if path.suffix in _BY_SUFFIX:
        return _BY_SUFFIX[path.suffix]
    raise IrbridgeError(f"{path}: cannot tell the format from suffix {path.suffix!r}",
                        hint=f"pass --to ({', '.join(WRITERS)})")


def write_model(model: Model, path: Path, fmt: str | None = None, **options: Any) -> Path:
    """Write `model` to `path` in `fmt` (or the suffix's format), atomically. An incomplete
    capture is written only as irbridge IR, which records that it is incomplete."""
    fmt = output_format(path, fmt)
    if fmt != "irb":
        check_complete(model, fmt)
    return WRITERS[fmt](model, path, **options)


INCOMPLETE_KEYS = ("dynamo.uncaptured_inputs", "dynamo.uncaptured_outputs",
                   "dynamo.value_dependent")
"""IR metadata the Dynamo front-end sets when part of forward ran as Python outside its
graphs: graph inputs fed by that Python, model outputs no graph produced, or graph breaks
where Python read a tensor's value (`.item()`, a branch on a tensor), after which the
graphs hold what the example inputs gave."""


def check_complete(model: Model, fmt: str) -> None:
    """Refuse to export a capture that is not the whole model (a file whose inputs are
    internal tensors would pass for the model)."""
    why = incomplete_reason(model)
    if why is None:
        return
    raise IrbridgeError(
        f"{model.name or 'the model'} is an incomplete Dynamo capture ({why}): "
        f"refusing to export it to {fmt} as if it were the model",
        hint="capture it with --frontend export or fx, or write .irb to inspect it")


def incomplete_reason(model: Model) -> str | None:
    """Why the model is an incomplete Dynamo capture (INCOMPLETE_KEYS), or None."""
    meta = model.metadata
    if not any(key in meta for key in INCOMPLETE_KEYS):
        return None
    why = []
    if "dynamo.uncaptured_inputs" in meta:
        inputs = meta["dynamo.uncaptured_inputs"].split("; ")
        why.append(f"{len(inputs)} graph inputs come from Python that ran outside the graphs "
                   f"(e.g. {inputs[0]})")
    if "dynamo.uncaptured_outputs" in meta:
        why.append(f"{meta['dynamo.uncaptured_outputs']} model outputs come from no graph")
    if "dynamo.value_dependent" in meta:
        why.append("Python read tensor values between its graphs, which hold the example "
                   f"inputs' results as constants ({meta['dynamo.value_dependent'].split('; ')[0]})")
    return "; ".join(why)
