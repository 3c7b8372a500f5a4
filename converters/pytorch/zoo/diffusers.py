"""Hugging Face diffusers: ``diffusers:ClassName[:config.json]`` (a model class with random
weights, from its default config or one given) and diffusers model folders.

A model class is any ``diffusers.ModelMixin`` subclass diffusers exports (UNets, VAEs, DiT /
PixArt / SD3 / Flux transformers, ControlNets, ...). Its config is the class defaults, with
the settings of a JSON file merged over them when one is named. Nothing is downloaded: the
weights are random (seed 0) or come from a local folder. A model too big for the memory
available is refused unless built on the meta device (CLI ``--meta``, shape-only). The
example inputs come from the config and the forward signature (``zoo.inputs``)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import torch
from torch import nn

from irbridge.atomic import check_folder_entries

from .common import FAMILY_DIFFUSERS, ZooError, _first_line, _suggest, _Target
from .hf import CONFIG_LIMIT, _check_memory, _check_shard_index, read_json_object

PREFIX = "diffusers:"
EXTRA_HINT = "install the extra: pip install 'irbridge[diffusers]' (uv sync --extra diffusers)"
WEIGHT_FILES = ("diffusion_pytorch_model.safetensors",
                "diffusion_pytorch_model.safetensors.index.json",
                "diffusion_pytorch_model.bin", "diffusion_pytorch_model.bin.index.json")
"""The weight files diffusers' ``from_pretrained`` reads from a model folder."""
PICKLED = (".bin", ".bin.index.json")


def _require() -> None:
    try:
        import diffusers  # noqa: F401
    except ImportError as exc:
        raise ZooError(f"diffusers is not installed ({_first_line(exc)}); {EXTRA_HINT}") from exc


def model_class_names() -> list[str]:
    """Every model class diffusers exports (``ModelMixin`` subclasses), by name, without
    importing their modules."""
    _require()
    from diffusers.models import _import_structure

    names = {n for values in _import_structure.values() for n in values}
    return sorted(n for n in names if n[:1].isupper() and not n.endswith(("Config", "Name"))
                  and n not in _NOT_MODELS)


_NOT_MODELS = frozenset({"ModelMixin", "AutoModel", "CacheMixin"})


def model_class(name: str) -> type[nn.Module]:
    """The diffusers model class called ``name``; a one-line error naming close matches when
    diffusers has none (or ``name`` is not a model class)."""
    _require()
    from diffusers import ModelMixin, models

    known = model_class_names()
    cls = getattr(models, name, None) if name in known else None
    if isinstance(cls, type) and not issubclass(cls, ModelMixin):
        raise ZooError(f"diffusers' {name} is a building block (a plain nn.Module), not a model "
                       "class (ModelMixin) with a config to build it from",
                       hint="wrap it in a factory: path/to/file.py:Name")
    if not (isinstance(cls, type) and issubclass(cls, ModelMixin)):
        close = _suggest(name, known)
        raise ZooError(f"unknown diffusers model class {name!r}"
                       + (f"; did you mean: {close}?" if close else ""),
                       hint="name a diffusers ModelMixin class, e.g. diffusers:UNet2DConditionModel")
    return typing.cast(type[nn.Module], cls)


def _read_config(path: Path) -> dict[str, Any]:
    return read_json_object(path, "diffusers config")


def _fresh(name: str, cls: Any, config: dict[str, Any]) -> nn.Module:
    """``cls`` from ``config`` (merged over the class defaults) with random weights; its size
    checked on the meta device first unless that is where it is built."""
    try:
        if torch.get_default_device().type != "meta":
            with torch.device("meta"):
                probe = cls.from_config(config)
            _check_memory(name, sum(p.numel() for p in probe.parameters()))
            del probe
        return typing.cast(nn.Module, cls.from_config(config))
    except ZooError:
        raise
    except Exception as exc:
        what = "its default config" if not config else "the given config"
        raise ZooError(f"could not build {name}: diffusers' {cls.__name__} fails on {what}: "
                       f"{_first_line(exc)}") from exc


def diffusers_target(name: str) -> _Target:
    """``diffusers:ClassName`` or ``diffusers:ClassName:path/to/config.json``."""
    rest = name[len(PREFIX):].strip()
    class_name, _, config_path = rest.partition(":")
    class_name = class_name.strip()
    if not class_name:
        raise ZooError(f"bad diffusers spec {name!r}; expected diffusers:ClassName or "
                       "diffusers:ClassName:config.json")
    cls = model_class(class_name)
    overrides = _read_config(Path(config_path.strip()).expanduser()) if config_path.strip() else {}
    overrides = {k: v for k, v in overrides.items() if not k.startswith("_")}

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(f"{name} names a class, not a checkpoint; there are no pretrained "
                           "weights to fetch",
                           hint="pass a local diffusers model folder, or --weights FILE")
        return _fresh(name, cls, overrides), None

    source = f"diffusers.{class_name}.from_config({config_path.strip() or 'defaults'})"
    return _Target(name=name, family=FAMILY_DIFFUSERS, source=source, task="diffusion",
                   make=make)


def is_diffusers_folder(folder: Path) -> bool:
    """A folder whose config.json names a diffusers class (``_class_name``): what diffusers'
    ``save_pretrained`` writes, and each model folder of a pipeline (``unet/``, ``vae/``)."""
    config = folder / "config.json"
    if not config.is_file() or config.stat().st_size > CONFIG_LIMIT:
        return False
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(raw, dict) and isinstance(raw.get("_class_name"), str)


def diffusers_folder_target(name: str, trust: bool) -> _Target:
    """A diffusers model folder: the class its config names, with the folder's weights
    (safetensors; a pickled ``.bin`` needs ``trust``), nothing downloaded. Without weights,
    the class from the folder's config with random weights."""
    folder = Path(name).expanduser()
    check_folder_entries(folder, "the model folder")  # no FIFO for diffusers to block on
    raw = _read_config(folder / "config.json")
    cls = model_class(str(raw["_class_name"]))
    weights = next((f for f in WEIGHT_FILES if (folder / f).is_file()), None)
    if weights is not None and weights.endswith(".index.json"):
        _check_shard_index(folder / weights)
    if weights is not None and weights.endswith(PICKLED) and not trust:
        raise ZooError(
            f"refusing to load {folder / weights}: a pickled checkpoint, and loading one can "
            "run code from the file", hint="convert it to safetensors, or pass "
            "--trust-checkpoint (trust_checkpoint=True) if you trust where it came from")

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(f"{name} is a local model folder; --pretrained does not apply to it "
                           "(its own weights are used)")
        config = {k: v for k, v in raw.items() if not k.startswith("_")}
        if weights is None or torch.get_default_device().type == "meta":
            return _fresh(name, cls, config), None
        with torch.device("meta"):
            probe = cls.from_config(config)  # type: ignore[attr-defined]
        _check_memory(name, sum(p.numel() for p in probe.parameters()))
        del probe
        try:
            model = cls.from_pretrained(  # type: ignore[attr-defined]
                str(folder), local_files_only=True, use_safetensors=not weights.endswith(PICKLED))
        except Exception as exc:
            raise ZooError(f"{name}: cannot load its weights ({weights}): "
                           f"{_first_line(exc)}") from exc
        return typing.cast(nn.Module, model), None

    return _Target(name=name, family=FAMILY_DIFFUSERS, source=str(folder),
                   task="diffusers folder" + ("" if weights else " (config only: random weights)"),
                   make=make, weights_from=str(folder) if weights else None)
