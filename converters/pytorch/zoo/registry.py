"""The registry of named models: every family's entries, looked up by name or alias."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from torch import nn

from .common import (
    FAMILIES,
    FAMILY_HF,
    FAMILY_TV_CLS,
    FAMILY_TV_DET,
    FAMILY_TV_SEG,
    FAMILY_TV_VIDEO,
    FAMILY_YOLO,
    MODEL_SPEC_HELP,
    ModelEntry,
    ZooError,
    _suggest,
    _Target,
)
from .diffusers import PREFIX as DIFFUSERS_PREFIX
from .hf import _hf_entries, _make_hf, _make_hf_auto
from .timm import PREFIX as TIMM_PREFIX
from .tv import _make_torchvision, _torchvision_entries
from .yolo import _make_ultralytics, _ultralytics_entries

# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, tuple[ModelEntry, ...]]:
    families: dict[str, list[ModelEntry]] = dict(_torchvision_entries())
    families[FAMILY_HF] = _hf_entries()
    families[FAMILY_YOLO] = _ultralytics_entries()
    return {f: tuple(families.get(f, [])) for f in FAMILIES}


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, ModelEntry]:
    index: dict[str, ModelEntry] = {}
    for entries in _registry().values():
        for entry in entries:
            for key in (entry.name, *entry.aliases):
                index.setdefault(key, entry)
                index.setdefault(key.lower(), entry)
    return index


def list_models() -> dict[str, list[ModelEntry]]:
    """Every registered model, by family (see :data:`FAMILIES`)."""
    return {family: list(entries) for family, entries in _registry().items()}


def model_names() -> list[str]:
    """All registered model names (without aliases)."""
    return [e.name for entries in _registry().values() for e in entries]


def find_model(name: str) -> ModelEntry | None:
    """The registered entry for a name or alias (case-insensitive), or None."""
    index = _index()
    return index.get(name) or index.get(name.lower())


FAMILY_PREFIXES = ("hf:", TIMM_PREFIX, DIFFUSERS_PREFIX)
"""Names the zoo builds from a family and a type or class (`hf:TYPE`, `timm:NAME`,
`diffusers:ClassName`) instead of a registry entry (`builder._resolve` dispatches them)."""


def is_zoo_name(name: str) -> bool:
    """Whether `name` is one the zoo builds: a registered name or alias, or a family prefix
    (whether the family has that type is decided when it is built)."""
    return name.startswith(FAMILY_PREFIXES) or find_model(name) is not None


def _unknown(name: str) -> ZooError:
    close = _suggest(name, model_names())
    message = f"unknown model {name!r}"
    if close:
        message += f"; did you mean: {close}?"
    return ZooError(message, hint="run `irbridge models` to list them, or pass " + MODEL_SPEC_HELP)


def _entry_target(entry: ModelEntry) -> _Target:
    makers: dict[str, Callable[[ModelEntry, bool], nn.Module]] = {
        FAMILY_TV_CLS: _make_torchvision,
        FAMILY_TV_DET: _make_torchvision,
        FAMILY_TV_SEG: _make_torchvision,
        FAMILY_TV_VIDEO: _make_torchvision,
        FAMILY_HF: _make_hf_auto if isinstance(entry.spec, tuple) else _make_hf,
        FAMILY_YOLO: _make_ultralytics,
    }
    maker = makers[entry.family]
    return _Target(
        name=entry.name,
        family=entry.family,
        source=entry.source,
        task=entry.task,
        make=lambda pretrained: (maker(entry, pretrained), None),
        image_size=entry.image_size,
        frames=entry.frames,
        build_on_cpu=entry.family == FAMILY_YOLO,
        pretrained_unpickles=entry.family == FAMILY_YOLO,
    )


def entry_to_dict(entry: ModelEntry) -> dict[str, Any]:
    """JSON-friendly view of an entry (for ``irbridge models --json``)."""
    data = {f.name: getattr(entry, f.name) for f in dataclasses.fields(entry) if f.name != "spec"}
    data["aliases"] = list(entry.aliases)
    data["input_hint"] = entry.input_hint
    return data
