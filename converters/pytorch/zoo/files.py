"""Model files: pickled checkpoints, ultralytics model YAMLs and state_dict weights files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from irbridge.atomic import not_a_file

from .common import (
    FAMILY_CHECKPOINT,
    FAMILY_YOLO,
    ModelEntry,
    ZooError,
    _first_line,
    _Target,
    check_torch_archive,
)
from .registry import _entry_target, find_model
from .yolo import _ultralytics_env, _yaml_code_reason, _yolo_image_size, _yolo_task


def _checkpoint_target(name: str, trust: bool) -> _Target:
    path = Path(name).expanduser()
    if not path.is_file():
        stem_entry = find_model(path.stem)
        hint = None
        if stem_entry is not None:
            hint = (
                f"use {stem_entry.name!r} for the architecture with random weights, "
                "or add --pretrained to fetch its published weights"
            )
        raise ZooError(f"{name}: {not_a_file(path, 'checkpoint file')}", hint=hint)
    if not trust:
        raise ZooError(
            f"refusing to load {name}: a .pt checkpoint is a pickle and loading it runs code "
            "from the file",
            hint="pass --trust-checkpoint (trust_checkpoint=True) if you trust where it came from",
        )
    image_size: list[int | None] = [None]

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(f"{name} is a checkpoint file; --pretrained does not apply to it")
        _ultralytics_env()  # unpickling an ultralytics checkpoint imports ultralytics
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            raise ZooError(f"could not load checkpoint {name}: {_first_line(exc)}") from exc
        module: Any = obj
        if isinstance(obj, Mapping):
            for key in ("ema", "model", "module", "net"):
                if isinstance(obj.get(key), nn.Module):
                    module = obj[key]
                    break
            args = obj.get("train_args")
            if isinstance(args, Mapping) and isinstance(args.get("imgsz"), int):
                image_size[0] = int(args["imgsz"])
        if not isinstance(module, nn.Module):
            if (
                isinstance(obj, Mapping)
                and obj
                and all(isinstance(v, torch.Tensor) for v in obj.values())
            ):
                raise ZooError(
                    f"{name} is a state_dict (weights without the architecture)",
                    hint="name the architecture as the model and pass this file with --weights FILE",
                )
            raise ZooError(f"{name} holds a {type(obj).__name__}, not an nn.Module")
        if type(module).__module__.startswith("ultralytics") and image_size[0] is None:
            image_size[0] = 640
        if any(p.dtype == torch.float16 for p in module.parameters()):
            module = module.float()  # ultralytics saves half-precision weights
        target.image_size = image_size[0]
        return module, None

    target = _Target(
        name=name, family=FAMILY_CHECKPOINT, source=str(path), task="checkpoint", make=make,
        weights_from=str(path),
    )
    return target


def _program_target(name: str, trust: bool) -> _Target:
    """A ``torch.export.save`` archive: the ExportedProgram's module and its example inputs.

    ``torch.export.load`` is not a safe reader: it unpickles parts of the archive (example
    inputs, tensor subclasses, custom and opaque objects, legacy weights), parses the shape
    expressions with sympy (``eval``), and the program may call any attribute of ``torch``
    (``torch.os.system`` among them) when it runs. So it needs trust, as a ``.pt`` does.
    """
    path = Path(name).expanduser()
    if not path.is_file():
        raise ZooError(f"no such torch.export archive: {name}" if not path.exists()
                       else f"{name}: not a regular file, not a torch.export archive")
    if not trust:
        raise ZooError(
            f"refusing to load {name}: torch.export.load unpickles parts of a .pt2 archive and "
            "evaluates its shape expressions, which runs code from the file",
            hint="pass --trust-checkpoint (trust_checkpoint=True) if you trust where it came from",
        )

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(f"{name} is a torch.export archive; --pretrained does not apply to it")
        try:
            program = torch.export.load(path)
        except Exception as exc:
            raise ZooError(f"could not load torch.export archive {name}: "
                           f"{_first_line(exc)}") from exc
        example = program.example_inputs
        if example is None:
            example = (_placeholder_inputs(program, name), {})
        module = program.module()
        # torch makes train()/eval() raise on the unlifted module: its graph was fixed when it
        # was exported, in the mode it had then; setting the flags changes nothing in it
        for method in ("train", "eval"):
            module.__dict__.pop(method, None)
        return module, example

    return _Target(name=name, family=FAMILY_CHECKPOINT, source=str(path),
                   task="torch.export program", make=make, weights_from=str(path))


def _placeholder_inputs(program: Any, name: str) -> tuple[torch.Tensor, ...]:
    """Random inputs of the program's user-input shapes (an archive saved without example
    inputs); an input of symbolic shape is refused, naming it."""
    from torch.export.graph_signature import InputKind

    user = {spec.arg.name for spec in program.graph_signature.input_specs
            if spec.kind == InputKind.USER_INPUT}
    generator = torch.Generator().manual_seed(0)
    made: list[torch.Tensor] = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise ZooError(f"{name}: input {node.name} is not a tensor and the archive holds no "
                           "example inputs; save it with them")
        try:
            shape = [int(d) for d in value.shape]
        except Exception as exc:
            raise ZooError(f"{name}: input {node.name} has symbolic shape {list(value.shape)} "
                           "and the archive holds no example inputs; save it with them") from exc
        if value.is_floating_point() or value.is_complex():
            made.append(torch.randn(shape, generator=generator, dtype=value.dtype))
        elif value.dtype == torch.bool:
            made.append(torch.randint(0, 2, shape, generator=generator).bool())
        else:
            made.append(torch.randint(0, 2, shape, generator=generator, dtype=value.dtype))
    return tuple(made)


def _yaml_target(name: str, trust: bool) -> _Target:
    path = Path(name).expanduser()
    if not trust:
        reason = _yaml_code_reason(path)
        if reason is not None:
            raise ZooError(
                f"refusing to build {name}: {reason}; building it would run code from the file",
                hint="pass --trust-checkpoint (trust_checkpoint=True) if you trust where it "
                "came from",
            )
    entry = ModelEntry(
        name=name,
        family=FAMILY_YOLO,
        source=f"ultralytics.YOLO({name!r}).model",
        task=_yolo_task(path.stem),
        image_size=_yolo_image_size(path.stem),
        spec=("RTDETR" if "rtdetr" in path.stem else "YOLO", str(path)),
    )
    return _entry_target(entry)


# --------------------------------------------------------------------------------------------
# Weights files
# --------------------------------------------------------------------------------------------


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ZooError(f"{path}: {not_a_file(path, 'weights file')}")
    obj: Any
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            obj = load_file(str(path))
        except Exception as exc:
            raise ZooError(f"could not read {path}: {_first_line(exc)}") from exc
    else:
        check_torch_archive(path)
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ZooError(
                f"{path} is not a plain state_dict (torch.load(weights_only=True) refused it: "
                f"{_first_line(exc)})",
                hint="a full pickled model goes in the model position with --trust-checkpoint",
            ) from exc
    for key in ("state_dict", "model_state_dict", "model", "module"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ZooError(f"{path} does not hold a state_dict (a mapping of names to tensors)")
    return dict(obj)


def _load_weights(module: nn.Module, path: Path, name: str) -> None:
    state = _read_state_dict(path)
    own = module.state_dict(keep_vars=True)
    if (
        state
        and all(k.startswith("module.") for k in state)
        and not any(k.startswith("module.") for k in own)
    ):
        state = {k.removeprefix("module."): v for k, v in state.items()}  # DataParallel
    # Tied parameters (e.g. GPT-2's lm_head and wte) are saved once: a missing key is fine
    # when a key sharing its tensor is present.
    by_tensor: dict[int, list[str]] = {}
    for key, value in own.items():
        by_tensor.setdefault(id(value), []).append(key)
    missing = [
        k
        for k in own
        if k not in state
        and not k.endswith("num_batches_tracked")
        and not any(alias in state for alias in by_tensor[id(own[k])])
    ]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys (e.g. {', '.join(missing[:3])})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys (e.g. {', '.join(unexpected[:3])})")
        raise ZooError(f"weights file {path} does not fit {name}: {'; '.join(parts)}")
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise ZooError(
                f"weights file {path} does not fit {name}: {key} has shape "
                f"{list(value.shape)} in the file but {list(own[key].shape)} in the model"
            )
    module.load_state_dict(state, strict=False)

