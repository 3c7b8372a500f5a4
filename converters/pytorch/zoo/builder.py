"""``build``, ``check_inputs`` and ``eager_blame``: resolve a model spec, build it, derive its
inputs, and tell a capture failure from inputs the model itself rejects."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from irbridge.atomic import not_a_file
from irbridge.errors import CaptureError

from .common import (
    CHECKPOINT_SUFFIXES,
    DEFAULT_BATCH,
    FAMILY_HF,
    MAX_DIM,
    MODEL_SPEC_HELP,
    PROGRAM_SUFFIXES,
    SEED,
    WEIGHTS_ONLY_SUFFIXES,
    BuiltModel,
    ZooError,
    _first_line,
    _parse_dtype,
    _positive,
    _seeded,
    _Target,
    _weights_only_loads,
)
from .diffusers import PREFIX as DIFFUSERS_PREFIX
from .diffusers import diffusers_folder_target, diffusers_target, is_diffusers_folder
from .files import _checkpoint_target, _load_weights, _program_target, _yaml_target
from .hf import _hf_auto_entry, hf_folder_target
from .inputs import _given_inputs, derive_inputs
from .registry import _entry_target, _unknown, find_model
from .timm import PREFIX as PREFIX_TIMM
from .timm import timm_target
from .user import _user_target


def _resolve(name: str, trust_checkpoint: bool) -> _Target:
    name = name.strip()
    if not name:
        raise ZooError("no model name given", hint="pass " + MODEL_SPEC_HELP)
    if name.startswith("hf:"):
        return _entry_target(_hf_auto_entry(name))
    if name.startswith(PREFIX_TIMM):
        return timm_target(name)
    if name.startswith(DIFFUSERS_PREFIX):
        return diffusers_target(name)
    entry = find_model(name)
    if entry is not None:
        return _entry_target(entry)
    lowered = name.lower()
    folder = Path(name).expanduser()
    if folder.is_dir():  # a diffusers model folder names its class, a transformers one not
        return (diffusers_folder_target if is_diffusers_folder(folder) else hf_folder_target)(
            name, trust_checkpoint)
    if ":" in name:
        return _user_target(name)
    if lowered.endswith(CHECKPOINT_SUFFIXES):
        return _checkpoint_target(name, trust_checkpoint)
    if lowered.endswith(PROGRAM_SUFFIXES):
        return _program_target(name, trust_checkpoint)
    if lowered.endswith(WEIGHTS_ONLY_SUFFIXES):
        raise ZooError(
            f"{name} is a weights file, not a model",
            hint="name the architecture as the model and pass this file with --weights FILE",
        )
    if lowered.endswith((".yaml", ".yml")):
        path = Path(name).expanduser()
        if path.is_file():
            return _yaml_target(name, trust_checkpoint)
        raise ZooError(f"{name}: {not_a_file(path, 'model YAML')}")
    if lowered.endswith(".py"):
        raise ZooError(f"{name} needs the name of the model inside it: {name}:ClassOrFactory")
    raise _unknown(name)


# --------------------------------------------------------------------------------------------
# build / check_inputs
# --------------------------------------------------------------------------------------------


def _move(module: nn.Module, device: torch.device) -> None:
    """``module.to(device)``; on meta, ultralytics heads keep their strides as real tensors.

    ultralytics moves its plain ``stride`` attributes along with the weights, and its anchor
    code reads them as Python numbers, which a meta tensor cannot give: they are constants
    of the architecture, so they stay on the CPU.
    """
    strides: list[tuple[nn.Module, torch.Tensor]] = []
    if device.type == "meta":
        for sub in module.modules():
            value = getattr(sub, "stride", None)
            if (
                isinstance(value, torch.Tensor)
                and not value.is_meta
                and type(sub).__module__.startswith("ultralytics")
            ):
                strides.append((sub, value.clone()))
    module.to(device)
    for sub, value in strides:
        sub.stride = value


BUILD_IN_DTYPE = frozenset({torch.float16, torch.bfloat16})
"""Target dtypes a Hugging Face model is built in directly (torch's default dtype set around
its construction) instead of in float32 and converted after: the float32 copy would take
twice the final memory (32 GB for Llama-3-8B in bfloat16). For these two, torch draws the
random init in float32 and rounds it, so the weights are the same as converting after."""


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    """torch's default floating dtype set to ``dtype`` for a block (``None``: unchanged)."""
    if dtype is None:
        yield
        return
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def _make(target: _Target, pretrained: bool, on_meta: bool) -> tuple[nn.Module, Any]:
    """Run the target's recipe, seeded; under ``torch.device("meta")`` when asked.

    A few constructors compute with their own weights while initialising (e.g. torchvision's
    RegNet), which meta tensors cannot do: those are built on the CPU instead, except for
    transformers models, which can be far too big for that and all build on meta.
    """
    with _seeded(SEED):
        try:
            if not on_meta:
                return target.make(pretrained)
            try:
                with torch.device("meta"):
                    return target.make(pretrained)
            except (NotImplementedError, RuntimeError) as exc:
                if target.family == FAMILY_HF or "meta" not in str(exc):
                    raise
            torch.manual_seed(SEED)
            return target.make(pretrained)
        except ZooError:
            raise
        except Exception as exc:
            raise ZooError(f"could not build {target.name}: {_first_line(exc)}") from exc


def build(
    name: str,
    *,
    batch: int | None = None,
    seq_len: int | None = None,
    input_shape: Sequence[int] | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    pretrained: bool = False,
    weights_file: str | os.PathLike[str] | None = None,
    trust_checkpoint: bool = False,
) -> BuiltModel:
    """Build a model by name (see the module docstring) with example inputs.

    The module is in eval mode. Weights are random (seed :data:`SEED`) unless
    ``weights_file`` (a local state_dict, .pt/.pth/.bin or .safetensors) or ``pretrained``
    (needs the hub or a local cache) says otherwise. ``device="meta"`` allocates nothing: the
    parameters and the inputs are meta tensors. Building does not run the model: call
    :func:`check_inputs` for a trial forward.
    """
    _positive(batch, "batch")
    _positive(seq_len, "seq_len")
    if input_shape is not None:
        input_shape = tuple(input_shape)
        if not input_shape or any(
            isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_DIM
            for d in input_shape
        ):
            raise ZooError(f"input shape must be positive integers, got {list(input_shape)}")
        if math.prod(input_shape) > MAX_DIM:
            raise ZooError(f"input shape {list(input_shape)} has more elements than a tensor "
                           f"can hold ({MAX_DIM})")
    torch_dtype = _parse_dtype(dtype)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ZooError(f"bad device {device!r}: {_first_line(exc)}") from exc
    meta = dev.type == "meta"
    if pretrained and weights_file is not None:
        raise ZooError("pass either pretrained or a weights file, not both")
    if meta and (pretrained or weights_file is not None):
        raise ZooError(
            "device 'meta' holds no weights; pretrained weights or a weights file need a real device"
        )
    target = _resolve(name, trust_checkpoint)
    if pretrained and target.pretrained_unpickles and not trust_checkpoint:
        raise ZooError(
            f"refusing to load pretrained weights for {target.name}: they come as a pickled "
            "checkpoint, and loading one runs code from the file",
            hint="pass --trust-checkpoint (trust_checkpoint=True) if you trust where it came "
            "from, or pass a state_dict with --weights FILE",
        )
    # Without trust, every torch.load a library makes on the way loads weights only.
    guard = (
        contextlib.nullcontext()
        if trust_checkpoint or target.own_code
        else _weights_only_loads()
    )
    in_dtype = (torch_dtype if torch_dtype in BUILD_IN_DTYPE and target.family == FAMILY_HF
                and not pretrained else None)
    with guard, _default_dtype(in_dtype):
        module, example = _make(target, pretrained, on_meta=meta and not target.build_on_cpu)
    weights = "pretrained" if pretrained else f"random (seed {SEED})"
    if target.weights_from is not None:  # a checkpoint, export archive or model folder
        weights = f"file {target.weights_from}"
    if weights_file is not None:
        _load_weights(module, Path(weights_file).expanduser(), target.name)
        weights = f"file {weights_file}"
    module.eval()
    if torch_dtype is not None:  # also the buffers a constructor makes in float32 explicitly
        module.to(torch_dtype)
    if meta or dev.type != "cpu":
        _move(module, dev)
    if example is not None and (batch is not None or seq_len is not None):
        given = "--batch" if batch is not None else "--seq-len"
        raise ZooError(
            f"{given} applies to the inputs irbridge makes; {target.name} returned its own "
            "example inputs",
            hint="change them in the factory (or pass --input-shape for a single tensor "
            "input, or return the model alone to have irbridge make them)")
    if example is not None:
        args, kwargs, specs = _given_inputs(
            module,
            example,
            model_name=target.name,
            input_shape=input_shape,
            dtype=torch_dtype,
            device=dev,
        )
    else:
        if input_shape is None and target.input_chw is not None:
            input_shape = (batch or DEFAULT_BATCH, *target.input_chw)
        args, kwargs, specs = derive_inputs(
            module,
            model_name=target.name,
            batch=batch,
            seq_len=seq_len,
            input_shape=input_shape,
            dtype=torch_dtype,
            device=dev,
            image_size=target.image_size,
            frames=target.frames,
        )
    return BuiltModel(
        module=module,
        args=args,
        kwargs=kwargs,
        name=target.name,
        family=target.family,
        inputs=specs,
        source=target.source,
        task=target.task,
        device=str(dev),
        weights=weights,
    )


def _is_data_dependent(exc: BaseException) -> bool:
    names = {
        "DataDependentOutputException",
        "DynamicOutputShapeException",
        "GuardOnDataDependentSymNode",
    }
    return type(exc).__name__ in names or "meta tensor" in str(exc)


def check_inputs(built: BuiltModel) -> Any:
    """Run one forward with the example inputs and return its output.

    This is also the warm-up some models need before capture (YOLO builds its anchors on the
    first call). A failure becomes a one-line :class:`ZooError` naming the model, the inputs
    and the first line of the torch error. A meta-device model runs on meta tensors; when its
    forward reads a tensor's value (transformers' mask helpers do), it runs again under
    FakeTensorMode, where such code takes its tracing path.
    """
    try:
        with torch.no_grad():
            if not built.device.startswith("meta"):
                return built.module(*built.args, **built.kwargs)
            try:
                return built.module(*built.args, **built.kwargs)
            except Exception as exc:
                if not _is_data_dependent(exc):
                    raise
            return _fake_forward(built)
    except Exception as exc:
        if built.device.startswith("meta") and _is_data_dependent(exc):
            raise ZooError(
                f"{built.name} cannot run on device meta: its forward depends on tensor values "
                f"({_first_line(exc)})",
                hint="build it on the CPU to check its inputs",
            ) from exc
        if (gap := _config_gap(built)) is not None:
            raise ZooError(f"{built.name} cannot run on its config: {gap} ({_first_line(exc)})",
                           hint="build it from a config that sets it (a model folder)") from exc
        raise ZooError(
            f"{built.name} rejected inputs {built.input_desc}: {_first_line(exc)}",
            hint="pass --input-shape (and --batch/--seq-len) matching what the model expects",
        ) from exc


def _config_gap(built: BuiltModel) -> str | None:
    """What the model's config leaves out that its forward needs, where the inputs cannot
    make up for it: a model that places image features at image tokens of its text, with
    ``pixel_values`` among its inputs, whose config names no image token (transformers'
    default Blip2Config, InstructBlipConfig)."""
    config = getattr(built.module, "config", None)
    if config is None or not any(spec.name == "pixel_values" for spec in built.inputs):
        return None
    for attr in ("image_token_index", "image_token_id"):
        if hasattr(config, attr) and getattr(config, attr) is None:
            return (f"{type(config).__name__}.{attr} is None, so the image features have no "
                    "tokens of the text to go to")
    return None


@contextlib.contextmanager
def eager_blame(built: BuiltModel) -> Iterator[None]:
    """Around a capture of ``built``: when the capture fails, run the model eagerly on the
    same inputs (:func:`check_inputs`); when that fails too, the inputs are at fault, not the
    capture, and the error says so. A model that cannot run on the meta device keeps the
    capture's error."""
    try:
        yield
    except ZooError:
        raise
    except CaptureError as exc:
        try:
            check_inputs(built)
        except ZooError as eager:
            cause = eager.__cause__
            if cause is None or (built.device.startswith("meta") and _is_data_dependent(cause)):
                raise exc from None
            if _config_gap(built) is not None:
                raise eager from exc
            raise ZooError(
                f"the example inputs do not run {built.name} eagerly "
                f"({built.input_desc}): {_first_line(cause)}",
                hint="pass --input-shape (and --batch/--seq-len) matching what the model "
                "expects, or use a factory that returns (module, example_inputs)",
            ) from exc
        raise


def _fake_forward(built: BuiltModel) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map_only

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        args, kwargs = tree_map_only(torch.Tensor, mode.from_tensor, (built.args, built.kwargs))
        return built.module(*args, **kwargs)

