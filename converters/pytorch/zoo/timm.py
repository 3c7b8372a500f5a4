"""timm (PyTorch Image Models): ``timm:NAME`` builds any timm architecture with random weights.

``NAME`` is a name from ``timm.list_models()`` (``resnet18``, ``vit_tiny_patch16_224``,
``convnext_atto``), optionally with a pretrained tag (``resnet50.a1_in1k``), whose config can
state another input size. The model is ``timm.create_model(NAME, pretrained=False)`` drawn
after the zoo's seed; nothing is downloaded (``--pretrained`` is refused; ``--weights FILE``
loads a local state_dict). The example input is an image of the ``input_size`` the model's
own pretrained config states (``(3, 224, 224)`` for most, ``(3, 256, 256)`` for
``mobilevit_xxs``, ``(3, 1024, 768)`` for sapiens2), never one guessed from the name.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import common
from .common import FAMILY_TIMM, ZooError, _first_line, _suggest
from .hf import _check_memory, _has_timm

PREFIX = "timm:"
EXTRA_HINT = "install irbridge's `timm` extra: pip install 'irbridge[timm]' (or uv sync --extra timm)"


def _split(name: str) -> tuple[str, str | None]:
    """``timm:ARCH[.TAG]`` -> (ARCH, TAG or None)."""
    spec = name[len(PREFIX):].strip()
    if not spec or ":" in spec or spec.startswith(".") or spec.endswith("."):
        raise ZooError(f"bad timm spec {name!r}; expected timm:NAME (a name from "
                       "timm.list_models(), optionally NAME.PRETRAINED_TAG)")
    arch, _, tag = spec.partition(".")
    return arch, tag or None


def _input_size(cfg: Any) -> tuple[int, int, int] | None:
    size = getattr(cfg, "input_size", None)
    if (isinstance(size, (tuple, list)) and len(size) == 3
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in size)):
        return int(size[0]), int(size[1]), int(size[2])
    return None


def timm_target(name: str) -> common._Target:
    """The build recipe for ``timm:NAME``; unknown names are refused with close matches."""
    arch, tag = _split(name)
    if not _has_timm():
        raise ZooError(f"{name} needs the timm package, which is not installed",
                       hint=EXTRA_HINT)
    import timm
    from timm.models import get_pretrained_cfg, is_model

    if not is_model(arch):
        close = _suggest(arch, timm.list_models())
        raise ZooError(f"unknown timm model {arch!r} in {name!r}"
                       + (f"; did you mean: {close}?" if close else ""),
                       hint="python -c 'import timm; print(timm.list_models())' lists them")
    full = f"{arch}.{tag}" if tag else arch
    if tag is not None:
        tags = timm.list_pretrained(f"{arch}.*")
        if full not in tags:
            close = _suggest(full, tags)
            raise ZooError(f"timm model {arch} has no pretrained config {tag!r} in {name!r}"
                           + (f"; known: {close}" if close else ""))
    size = _input_size(get_pretrained_cfg(full))

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(
                f"{name}: --pretrained is not supported for timm models (nothing is "
                "downloaded)",
                hint="pass a local state_dict with --weights FILE, or leave out --pretrained",
            )
        if torch.get_default_device().type != "meta":
            try:
                with torch.device("meta"):
                    probe = timm.create_model(full, pretrained=False)
            except Exception:  # some constructors compute with their weights: no probe
                probe = None
            if probe is not None:
                _check_memory(name, sum(p.numel() for p in probe.parameters()))
                del probe
        try:
            return timm.create_model(full, pretrained=False), None
        except Exception as exc:
            raise ZooError(f"could not build {name}: timm.create_model({full!r}) failed: "
                           f"{_first_line(exc)}") from exc

    return common._Target(
        name=name,
        family=FAMILY_TIMM,
        source=f"timm.create_model({full!r}, pretrained=False)",
        task="image-classification",
        make=make,
        # the input the config states (csatv2's first conv takes 64 DCT channels, not the
        # image's 3: the first layer would mislead), any batch in front
        input_chw=size,
    )
