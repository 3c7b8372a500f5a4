"""Types, constants and small helpers shared by the zoo's families."""

from __future__ import annotations

import contextlib
import difflib
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from irbridge.errors import CaptureError

SEED = 0
DEFAULT_BATCH = 1
DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE_SIZE = 224
DEFAULT_FRAMES = 16
"""Clip length for video models: the 16-frame clips of the Kinetics-400 recipes."""

FAMILY_TV_CLS = "torchvision-classification"
FAMILY_TV_DET = "torchvision-detection"
FAMILY_TV_SEG = "torchvision-segmentation"
FAMILY_TV_VIDEO = "torchvision-video"
FAMILY_HF = "transformers"
FAMILY_DIFFUSERS = "diffusers"
FAMILY_YOLO = "ultralytics"
FAMILY_TIMM = "timm"
FAMILY_USER = "user"
FAMILY_CHECKPOINT = "checkpoint"

FAMILIES: tuple[str, ...] = (
    FAMILY_TV_CLS,
    FAMILY_TV_DET,
    FAMILY_TV_SEG,
    FAMILY_TV_VIDEO,
    FAMILY_HF,
    FAMILY_YOLO,
)
"""The families :func:`list_models` enumerates (user files and checkpoints are not listed)."""

MODEL_SPEC_HELP = (
    "a name from `irbridge models`; hf:MODEL_TYPE[:TASK] for any transformers architecture; "
    "timm:NAME for any timm architecture; "
    "diffusers:ClassName[:config.json] for a diffusers model class; "
    "path/to/file.py:ClassOrFactory or package.module:factory for your own model; "
    "path/to/model.pt (a pickled model, needs --trust-checkpoint); "
    "path/to/program.pt2 (torch.export.save's archive, needs --trust-checkpoint); "
    "path/to/folder (a Hugging Face model folder with config.json); "
    "path/to/model.yaml (an ultralytics model YAML)"
)

MAX_DIM = (1 << 63) - 1
"""torch sizes are int64: no dim (and no product of an input's dims) may exceed this."""

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
PROGRAM_SUFFIXES = (".pt2",)
"""``torch.export.save`` archives (an ExportedProgram)."""
WEIGHTS_ONLY_SUFFIXES = (".safetensors", ".bin")


class ZooError(CaptureError):
    """A model name, model file, weights file or input request the zoo cannot satisfy."""


class ModelTooBig(ZooError):
    """The model's weights would not fit in the memory available: build it on the meta
    device (shape-only) instead."""


# --------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelEntry:
    """One buildable model of a family, as listed by ``irbridge models``."""

    name: str
    family: str
    source: str
    """How the model is built, e.g. ``torchvision.models.resnet18(weights=None)``."""
    task: str
    image_size: int | None = None
    """Native square image side for image models, where the family states one."""
    frames: int | None = None
    """Clip length for video models."""
    hub_id: str | None = None
    """Where ``pretrained=True`` fetches weights from (a Hugging Face repo id), if anywhere."""
    aliases: tuple[str, ...] = ()
    spec: Any = field(default=None, repr=False, compare=False)
    """Family-specific build recipe (private)."""

    @property
    def input_hint(self) -> str:
        """A short description of the default input, for listings."""
        if self.family == FAMILY_HF:
            return "from forward signature"
        if self.frames is not None and self.image_size is not None:
            return f"video {self.frames}x{self.image_size}x{self.image_size}"
        if self.image_size is not None:
            return f"image {self.image_size}x{self.image_size}"
        return "image (size from the model)"


@dataclass(frozen=True)
class InputSpec:
    """One example input: which forward parameter it feeds and what it holds."""

    name: str
    kind: str
    """``tokens``, ``mask``, ``image``, ``image_list``, ``video``, ``audio``, ``tensor``,
    ``pixel_mask`` (ones over image patches), ``grid`` (every element ``fill``),
    ``image_positions`` (``fill`` ones after the first token, zeros elsewhere), ``given``
    (a tensor a factory returned) or ``value`` (anything else it returned)."""
    shape: tuple[int, ...]
    """Shape of the tensor (of each tensor, for ``image_list``)."""
    dtype: torch.dtype
    keyword: bool
    """Passed as a keyword argument (else positionally)."""
    dims: tuple[str, ...] = ()
    """A name per dimension (``batch``, ``seq``, ``channels``, ``height``, ...), if known."""
    count: int | None = None
    """Number of tensors in the list, for ``image_list``."""
    high: int | None = None
    """Token ids are drawn from ``[0, high)``."""
    fill: int | None = None
    """The value of every element, for ``grid`` (a patch grid's side); the number of ones,
    for ``image_positions``."""
    text: str = ""
    """What a ``value`` input (not a tensor: a flag, a dict of tensors) holds, in words."""

    def describe(self) -> str:
        if self.kind == "value":
            return f"{self.name}={self.text}" if self.keyword else f"{self.name}: {self.text}"
        dt = str(self.dtype).removeprefix("torch.")
        shape = ", ".join(str(d) for d in self.shape)
        text = f"{dt}[{shape}]"
        if self.kind == "image_list":
            text = f"list of {self.count} x {text}"
        if self.high is not None:
            text += f" ids<{self.high}"
        if self.fill is not None:
            text += f" all {self.fill}" if self.kind == "grid" else f" {self.fill} ones"
        return f"{self.name}={text}" if self.keyword else f"{self.name}: {text}"


@dataclass
class BuiltModel:
    """A model ready to capture: ``module(*args, **kwargs)`` runs it."""

    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    family: str
    inputs: list[InputSpec]
    source: str = ""
    task: str = ""
    device: str = "cpu"
    weights: str = ""
    """``random (seed 0)``, ``pretrained`` or ``file PATH``."""

    @property
    def input_desc(self) -> str:
        """The inputs in one line, e.g. ``input_ids=int64[1, 128] ids<30522, ...``."""
        return ", ".join(spec.describe() for spec in self.inputs) or "(no inputs)"

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def check_torch_archive(path: Path) -> None:
    """Refuse a torch.save zip archive whose entries would inflate past the file's own
    size, before torch.load reads it: torch.save stores its tensors uncompressed, and
    torch.load inflates a deflated entry in full (a 260 KB archive held a 256 MB tensor,
    a 16 MB one would hold 16 GB). Not a zip archive (safetensors, torch's legacy format,
    whose reads are bounded by the file): nothing to check."""
    import zipfile

    try:
        if not zipfile.is_zipfile(path):
            return
        with zipfile.ZipFile(path) as archive:
            expanded = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ZooError(f"{path}: not a readable torch archive ({_first_line(exc)})") from exc
    size = path.stat().st_size
    if expanded > 2 * size + ARCHIVE_SLACK:
        raise ZooError(f"{path}: its zip entries would inflate to {expanded:,} bytes, "
                       f"{expanded / max(size, 1):.0f}x the file's {size:,}; torch.save writes "
                       "tensors uncompressed, so this is not one of its archives (refusing "
                       "to inflate it)")


ARCHIVE_SLACK = 1 << 20
"""Bytes a torch archive's entries may exceed twice its size by (zip headers, small
records): anything past it is compressed data."""


@contextlib.contextmanager
def _seeded(seed: int = SEED) -> Iterator[None]:
    """Seed torch's CPU generator for a block, restoring the caller's RNG state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Every ``torch.load`` inside the block loads weights only, whatever its caller asked.

    A library building a model may unpickle a file on the way (torchvision's and torch.hub's
    ``load_state_dict_from_url`` default to ``weights_only=False``): torch's own switch,
    ``TORCH_FORCE_WEIGHTS_ONLY_LOAD``, read on every call, makes each such load refuse
    anything but tensors and plain containers, so no code from the file runs.
    """
    saved = {k: os.environ.get(k) for k in _FORCE_VARS}
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_FORCE_VARS = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")


def _suggest(name: str, candidates: Sequence[str]) -> str | None:
    lowered = {c.lower(): c for c in candidates}
    matches = difflib.get_close_matches(name.lower(), list(lowered), n=4, cutoff=0.6)
    if not matches:
        # Substring matches catch prefixes such as "yolov8" or "efficientnet".
        matches = [c for c in lowered if name.lower() in c][:4]
    return ", ".join(lowered[m] for m in matches) or None


_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}


def _parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        result = dtype
    else:
        key = dtype.strip().lower().removeprefix("torch.")
        if key not in _DTYPES:
            raise ZooError(
                f"unknown dtype {dtype!r}; use one of float32, float16, bfloat16, float64"
            )
        result = _DTYPES[key]
    if not result.is_floating_point:
        raise ZooError(
            f"dtype {result} is not a floating-point type; models are converted with "
            "float32, float16, bfloat16 or float64 weights"
        )
    return result


def _positive(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
        raise ZooError(f"{what} must be an integer from 1 to {MAX_DIM}, got {value!r}")
    return value


def _mem_available() -> int | None:
    """Bytes of memory the kernel reports as available (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to host can be opened (assumed yes behind a proxy)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _module_dtype(module: nn.Module) -> torch.dtype:
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


Maker = Callable[[bool], "tuple[nn.Module, Any]"]


@dataclass
class _Target:
    name: str
    family: str
    source: str
    task: str
    make: Maker
    """Builds the module; returns (module, example inputs given by the user or None)."""
    image_size: int | None = None
    frames: int | None = None
    input_chw: tuple[int, int, int] | None = None
    """The image input's (channels, height, width) the model's own config states (timm's
    ``pretrained_cfg``): the default input, the batch in front; None: derived."""
    build_on_cpu: bool = False
    own_code: bool = False
    """The user's own Python (``file.py:Name``): it runs as they wrote it, loads included."""
    pretrained_unpickles: bool = False
    """``pretrained=True`` loads a pickled checkpoint (ultralytics ``.pt``): needs trust."""
    weights_from: str | None = None
    """The file or folder whose weights the model is built with (a checkpoint, an export
    archive, a model folder); None: random weights."""
