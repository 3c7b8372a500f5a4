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
                    spec=(kind, f"{name}.yaml"),
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


def _make_ultralytics(entry: ModelEntry, pretrained: bool) -> nn.Module:
    _ultralytics_env()
    kind, yaml_name = entry.spec
    from ultralytics import RTDETR, YOLO

    cls = RTDETR if kind == "RTDETR" else YOLO
    target = yaml_name
    if pretrained:
        target = str(Path(yaml_name).with_suffix(".pt"))
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

