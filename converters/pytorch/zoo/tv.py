"""torchvision: classification, detection, segmentation and video architectures."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import common
from .common import (
    DEFAULT_FRAMES,
    DEFAULT_IMAGE_SIZE,
    FAMILY_TV_CLS,
    FAMILY_TV_DET,
    FAMILY_TV_SEG,
    FAMILY_TV_VIDEO,
    ModelEntry,
    ZooError,
    _first_line,
)

# --------------------------------------------------------------------------------------------
# torchvision
# --------------------------------------------------------------------------------------------


def _weights_size(name: str, key: str) -> int | None:
    """Smallest square size the model's published torchvision weights use (metadata only)."""
    from torchvision import models

    try:
        weights = list(models.get_model_weights(name))
    except (ValueError, KeyError):
        return None
    sizes: list[int] = []
    for w in weights:
        keywords = getattr(w.transforms, "keywords", {}) or {}
        value = keywords.get(key)
        if isinstance(value, int):
            sizes.append(value)
        elif isinstance(value, (tuple, list)) and value:
            sizes.append(int(value[0]))
    return min(sizes) if sizes else None


def _torchvision_entries() -> dict[str, list[ModelEntry]]:
    from torchvision import models
    from torchvision.models import detection, segmentation, video

    groups: list[tuple[str, Any, str, str]] = [
        (FAMILY_TV_CLS, models, "torchvision.models.", "image-classification"),
        (FAMILY_TV_DET, detection, "torchvision.models.detection.", "object-detection"),
        (FAMILY_TV_SEG, segmentation, "torchvision.models.segmentation.", "semantic-segmentation"),
        (FAMILY_TV_VIDEO, video, "torchvision.models.video.", "video-classification"),
    ]
    out: dict[str, list[ModelEntry]] = {}
    for family, module, prefix, task in groups:
        entries = []
        for name in sorted(models.list_models(module=module)):
            image_size: int | None
            frames = None
            if family == FAMILY_TV_CLS:
                # The native resolution: the smallest crop torchvision publishes weights for
                # (299 for inception_v3, 600 for efficientnet_b7); 224 where none is stated.
                image_size = _weights_size(name, "crop_size") or DEFAULT_IMAGE_SIZE
            elif family == FAMILY_TV_SEG:
                image_size = _weights_size(name, "resize_size") or 520
            elif family == FAMILY_TV_VIDEO:
                image_size = _weights_size(name, "crop_size") or 112
                frames = DEFAULT_FRAMES
            else:
                image_size = None  # taken from the model's own transform (min_size / fixed_size)
            entries.append(
                ModelEntry(
                    name=name,
                    family=family,
                    source=f"{prefix}{name}(weights=None)",
                    task=task,
                    image_size=image_size,
                    frames=frames,
                    spec=name,
                )
            )
        out[family] = entries
    return out


def _make_torchvision(entry: ModelEntry, pretrained: bool) -> nn.Module:
    from torchvision import models

    if not pretrained:
        kwargs: dict[str, Any] = {"weights": None}
        if entry.family in (FAMILY_TV_DET, FAMILY_TV_SEG):
            kwargs["weights_backbone"] = None
        if entry.spec in ("googlenet", "inception_v3"):
            kwargs["init_weights"] = True  # today's default, stated to silence a FutureWarning
        return models.get_model(entry.spec, **kwargs)
    weights = models.get_model_weights(entry.spec).DEFAULT
    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    if not cached.exists() and not common._reachable("download.pytorch.org"):
        raise ZooError(
            f"pretrained weights for {entry.name} ({weights}) are not cached in {cached.parent} "
            "and download.pytorch.org cannot be reached",
            hint="pass a local state_dict with --weights FILE, or leave out --pretrained",
        )
    try:
        return models.get_model(entry.spec, weights=weights)
    except pickle.UnpicklingError as exc:
        raise ZooError(
            f"pretrained weights file {cached} for {entry.name} holds more than tensors (a "
            "weights-only load refused it), so it was not loaded",
            hint="delete it to fetch it again, or pass a state_dict with --weights FILE",
        ) from exc
    except Exception as exc:
        raise ZooError(
            f"could not fetch pretrained weights for {entry.name}: {_first_line(exc)}"
        ) from exc

