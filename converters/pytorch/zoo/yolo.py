"""ultralytics: YOLO and RT-DETR models from the YAML files the package ships."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import typing
from pathlib import Path

import torch
from torch import nn

from . import common
from .common import FAMILY_YOLO, ModelEntry, ZooError, _first_line

# --------------------------------------------------------------------------------------------
# ultralytics
# --------------------------------------------------------------------------------------------

_YOLO_EXCLUDE = re.compile(r"^yoloe|world")
"""YOLOE and YOLO-World need a CLIP text model (a download) to build; so does any YAML using
ultralytics' ``TorchVision`` layer (pretrained torchvision weights), skipped below."""


def _ultralytics_env() -> None:
    """Keep ultralytics offline and quiet: set before its first import.

    Without YOLO_OFFLINE its import resolves two DNS names to decide whether it is online;
    YOLO_AUTOINSTALL=False stops it from pip-installing missing requirements.
    """
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_VERBOSE", "False")
    os.environ.setdefault("YOLO_AUTOINSTALL", "False")


def _ultralytics_cfg_dir() -> Path | None:
    spec = importlib.util.find_spec("ultralytics")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "cfg" / "models"
    return path if path.is_dir() else None


def _yolo_image_size(name: str) -> int:
    if "-cls" in name:
        return 224  # classification models train at 224
    if "-p6" in name:
        return 1280  # P6 (stride 64) models train at 1280
    return 640


def _ultralytics_entries() -> list[ModelEntry]:
    import yaml

    root = _ultralytics_cfg_dir()
    if root is None:
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries: list[ModelEntry] = []
    for path in sorted(root.rglob("*.yaml")):
        stem = path.stem
        if _YOLO_EXCLUDE.search(stem):
            continue
        try:
            text = path.read_text()
            cfg = yaml.load(text, Loader=loader) or {}
        except (OSError, yaml.YAMLError):
            continue
        if "TorchVision" in text:
            continue  # its TorchVision layer always fetches pretrained torchvision weights
        scales = list((cfg.get("scales") or {}).keys())
        match = re.match(r"^(yolov?\d+)(.*)$", stem)
        if len(scales) > 1 and match:
            names = [f"{match.group(1)}{s}{match.group(2)}" for s in scales]
        else:
            names = [stem]
        for name in names:
            kind = "RTDETR" if "rtdetr" in name else "YOLO"
            entries.append(
                ModelEntry(
                    name=name,
                    family=FAMILY_YOLO,
                    source=f"ultralytics.{kind}({name + '.yaml'!r}).model",
                    task=_yolo_task(name),
                    image_size=_yolo_image_size(name),
                    aliases=(f"{name}.yaml",),
                    # The package's own file, by absolute path: ultralytics looks a bare
                    # name up in the working directory first, where a planted yolov8n.yaml
                    # would be built (and eval()ed) instead.
                    spec=(kind, str(path.parent / f"{name}.yaml")),
                )
            )
    return entries


def _yolo_task(name: str) -> str:
    for suffix, task in (
        ("-cls", "image-classification"),
        ("-seg", "instance-segmentation"),
        ("-pose", "pose-estimation"),
        ("-obb", "oriented-detection"),
        ("-sem", "semantic-segmentation"),
        ("-depth", "depth-estimation"),
    ):
        if suffix in name:
            return task
    return "object-detection"


_YAML_UNSAFE_LAYERS = frozenset({"TorchVision"})
"""ultralytics layers that fetch and unpickle weights while they are built."""


def _yaml_code_reason(path: Path) -> str | None:
    """Why building the model YAML at ``path`` would run code from it, or None when it is safe.

    ultralytics ``eval()``s the ``activation:`` field and looks each layer's module name up in
    its own namespace, where any function (a checkpoint loader among them) can be named and
    called with arguments from the file. A YAML is safe when the activation is a plain
    ``nn.Name(literal, ...)`` of a ``torch.nn`` module class and every layer names a
    ``torch.nn``, ``torchvision.ops`` or ultralytics layer class (not one that loads weights).
    A file that is not a model YAML at all is a :class:`ZooError`.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        cfg = yaml.load(path.read_text(errors="replace"), Loader=loader)
    except (OSError, yaml.YAMLError) as exc:
        raise ZooError(f"{path}: not a readable YAML file ({_first_line(exc)})") from exc
    if not isinstance(cfg, dict) or not isinstance(cfg.get("backbone"), list):
        raise ZooError(f"{path}: not an ultralytics model YAML (no 'backbone:' list of layers)")
    act = cfg.get("activation")
    if act is not None and not (isinstance(act, str) and _safe_activation(act)):
        return (
            f"its 'activation:' field {act!r:.60} is not a plain nn.Name(literal, ...) call, and "
            "ultralytics eval()s it as Python"
        )
    layers = list(cfg.get("backbone") or []) + list(cfg.get("head") or [])
    for i, layer in enumerate(layers):
        if not isinstance(layer, list) or len(layer) != 4:
            raise ZooError(f"{path}: layer {i} is not a [from, repeats, module, args] list")
        module = layer[2]
        if not isinstance(module, str) or not _safe_layer(module):
            return (
                f"layer {i} names {module!r:.60}, which is not a torch.nn, torchvision.ops or "
                "ultralytics layer class that builds without loading files"
            )
    return None


def _safe_activation(text: str) -> bool:
    import ast

    try:
        call = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return False
    if not isinstance(call, ast.Call):
        return False
    parts: list[str] = []
    node: ast.expr = call.func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return False
    parts.append(node.id)
    if parts[1:] not in (["nn"], ["nn", "torch"]) or parts[0].startswith("_"):
        return False
    klass = getattr(nn, parts[0], None)
    if not (isinstance(klass, type) and issubclass(klass, nn.Module)):
        return False
    try:
        for arg in (*call.args, *(kw.value for kw in call.keywords)):
            ast.literal_eval(arg)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return all(kw.arg is not None for kw in call.keywords)


def _safe_layer(name: str) -> bool:
    if name.startswith("_"):
        return False
    if name.startswith("nn."):
        klass = getattr(nn, name[3:], None) if not name[3:].startswith("_") else None
        return isinstance(klass, type) and issubclass(klass, nn.Module)
    if name.startswith("torchvision.ops."):
        import torchvision.ops

        attr = name[len("torchvision.ops."):]
        klass = getattr(torchvision.ops, attr, None) if not attr.startswith("_") else None
        return isinstance(klass, type) and issubclass(klass, nn.Module)
    if name in _YAML_UNSAFE_LAYERS:
        return False
    _ultralytics_env()
    from ultralytics.nn import tasks

    klass = vars(tasks).get(name)
    return (
        isinstance(klass, type)
        and issubclass(klass, nn.Module)
        and klass.__module__.startswith("ultralytics.nn.modules.")
    )


def _make_ultralytics(entry: ModelEntry, pretrained: bool) -> nn.Module:
    _ultralytics_env()
    kind, yaml_name = entry.spec
    from ultralytics import RTDETR, YOLO

    cls = RTDETR if kind == "RTDETR" else YOLO
    target = yaml_name
    if pretrained:
        target = Path(yaml_name).with_suffix(".pt").name  # working directory, or downloaded
        if not Path(target).exists() and not common._reachable("github.com"):
            raise ZooError(
                f"pretrained weights for {entry.name} ({target}) are not in the working "
                "directory and github.com cannot be reached",
                hint="pass a local state_dict with --weights FILE, or leave out --pretrained",
            )
    # YOLO's constructor runs a forward to measure strides, which needs real tensors: build
    # on the CPU (the largest YOLO is ~100 M parameters); build() moves it to meta after.
    with torch.device("cpu"):
        try:
            return typing.cast(nn.Module, cls(target).model)
        except Exception as exc:
            raise ZooError(f"could not build {entry.name}: {_first_line(exc)}") from exc

