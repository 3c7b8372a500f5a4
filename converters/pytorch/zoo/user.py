"""Your own models: ``file.py:Name`` / ``package.module:Name`` (imports and runs your code)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

from torch import nn

from irbridge.atomic import not_a_file

from .common import FAMILY_USER, ZooError, _first_line, _suggest, _Target


def _load_python_object(spec: str) -> Any:
    """Resolve ``file.py:Name`` or ``package.module:Name`` to the named object."""
    location, _, attr = spec.rpartition(":")
    attr = attr.strip()
    if not location or not attr:
        raise ZooError(
            f"bad model spec {spec!r}; expected path/to/file.py:Name or package.module:Name"
        )
    if not all(part.isidentifier() for part in attr.split(".")):
        raise ZooError(f"bad model spec {spec!r}: {attr!r} is not a Python name")
    is_file = location.endswith(".py") or "/" in location or os.sep in location
    if is_file:
        path = Path(location).expanduser()
        if not path.is_file():
            raise ZooError(f"{location}: {not_a_file(path, 'model file')} (from {spec!r})")
        resolved = path.resolve()
        digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
        safe_stem = re.sub(r"\W", "_", path.stem)
        mod_name = f"_irbridge_user_{safe_stem}_{digest}"
        module_spec = importlib.util.spec_from_file_location(mod_name, resolved)
        if module_spec is None or module_spec.loader is None:
            raise ZooError(f"cannot load {location} as Python (from {spec!r})")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module  # so dataclasses, pickling and typing can find it
        sys.path.insert(0, str(resolved.parent))  # sibling imports inside the user's file
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise ZooError(f"importing {location} failed: {_first_line(exc)}") from exc
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(resolved.parent))
    else:
        if not all(part.isidentifier() for part in location.split(".")):
            raise ZooError(
                f"bad model spec {spec!r}: {location!r} is neither a .py file nor a module name"
            )
        try:
            module = importlib.import_module(location)
        except Exception as exc:
            raise ZooError(
                f"cannot import module {location!r} (from {spec!r}): {_first_line(exc)}"
            ) from exc
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = location if i == 0 else ".".join(attr.split(".")[:i])
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = _suggest(part, names)
            raise ZooError(
                f"{owner} has no attribute {part!r} (from {spec!r})"
                + (f"; did you mean: {close}?" if close else "")
            )
        obj = getattr(obj, part)
    return obj


def _user_target(spec: str) -> _Target:
    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(
                f"{spec} is your own model; there are no pretrained weights to fetch",
                hint="pass a local state_dict with --weights FILE",
            )
        obj = _load_python_object(spec)
        example: Any = None
        if isinstance(obj, nn.Module):
            return obj, None
        if inspect.isclass(obj):
            if not issubclass(obj, nn.Module):
                raise ZooError(f"{spec} is a class but not a torch.nn.Module ({obj.__name__})")
            try:
                result: Any = obj()
            except Exception as exc:
                raise ZooError(
                    f"could not instantiate {spec} with no arguments: {_first_line(exc)}",
                    hint="wrap it in a factory function that takes no arguments",
                ) from exc
        elif callable(obj):
            try:
                result = obj()
            except Exception as exc:
                raise ZooError(f"calling {spec}() failed: {_first_line(exc)}") from exc
        else:
            raise ZooError(
                f"{spec} is a {type(obj).__name__}, not an nn.Module class or a factory function"
            )
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module):
            result, example = result
        if not isinstance(result, nn.Module):
            raise ZooError(
                f"{spec} returned a {type(result).__name__}; expected an nn.Module or "
                "(module, example_inputs)"
            )
        return result, example

    return _Target(
        name=spec, family=FAMILY_USER, source=spec, task="user", make=make, own_code=True
    )

