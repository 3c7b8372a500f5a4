"""The hardware catalog: targets as YAML data files, each figure with its source.

The catalog lives in `irbridge/hardware/*.yaml` (package data); `--hardware my.yaml` loads a
user's file with the same schema. pydantic is not a dependency, so the schema is checked
by hand here and every problem is one `IrbridgeError` naming the file and the field.

Schema (units default as shown; every figure is `{value, source, note?, unit?}` or a bare
number when the file has a top-level `source`):

    name: h100-sxm                  # required: lowercase letters, digits, '-', '.'
    title: NVIDIA H100 SXM5 80GB    # required
    kind: gpu                       # gpu | tpu | cpu | npu | soc
    aliases: [h100]                 # optional other names
    source: ...                     # optional default source for figures without one
    sources: {datasheet: "NVIDIA H100 datasheet, https://..."}  # optional named sources
    peaks:                          # required, DENSE (no 2:4 sparsity), TFLOPS / TOPS
      bf16: {value: 989.5, source: datasheet, note: "1,979 sparse, halved"}
    memory_bandwidth: {value: 3350, unit: GB/s, source: datasheet}      # required
    memory_capacity: {value: 80, unit: GB, source: datasheet}           # optional
    interconnect_bandwidth: {value: 900, unit: GB/s, source: datasheet}  # optional: per device, all links
    on_chip: {l2_cache: {value: 50, unit: MB, source: datasheet}}       # optional
    efficiency: {compute: 1.0, memory: 1.0, source: ...}               # optional, (0, 1]
    notes: free text                                                    # optional

A figure's `source` is either a key of `sources` or a citation written out in full.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from irbridge.errors import IrbridgeError

CATALOG_DIR = Path(__file__).resolve().parent.parent / "hardware"
"""Folder of the built-in targets (package data `irbridge/hardware/*.yaml`)."""

PEAK_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
"""Per-dtype peaks a target may give; `--dtype` picks one of them."""

KINDS = ("gpu", "tpu", "cpu", "npu", "soc")

_PEAK_UNITS = {"TFLOPS": 1e12, "TOPS": 1e12, "GFLOPS": 1e9, "GOPS": 1e9, "PFLOPS": 1e15,
               "POPS": 1e15}
_BANDWIDTH_UNITS = {"GB/s": 1e9, "TB/s": 1e12, "MB/s": 1e6, "GiB/s": 2.0**30, "TiB/s": 2.0**40}
_SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20,
               "GiB": 2**30}
_TOP_KEYS = {"name", "title", "kind", "aliases", "source", "sources", "peaks",
             "memory_bandwidth", "memory_capacity", "on_chip", "efficiency", "notes",
             "interconnect_bandwidth"}
_FIGURE_KEYS = {"value", "unit", "source", "note", "derivation"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


@dataclass(frozen=True)
class Figure:
    """One number of a target: `value` in base units (FLOP/s, B/s or bytes) plus where it
    comes from. `given` and `unit` are the number as the file wrote it."""

    value: float
    given: float
    unit: str
    source: str
    note: str = ""


@dataclass
class Target:
    name: str
    title: str
    kind: str
    peaks: dict[str, Figure]
    memory_bandwidth: Figure
    aliases: tuple[str, ...] = ()
    memory_capacity: Figure | None = None
    interconnect_bandwidth: Figure | None = None  # per device, all links, both directions
    on_chip: dict[str, Figure] = field(default_factory=dict)
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    efficiency_source: str = ""
    notes: str = ""
    path: str = ""

    def has_peak(self, dtype: str) -> bool:
        return dtype in self.peaks

    def peak(self, dtype: str) -> float:
        """Attainable compute for `dtype` in FLOP/s (OP/s for int8): the dense peak times
        the compute efficiency."""
        figure = self.peaks.get(dtype)
        if figure is None:
            raise IrbridgeError(f"target {self.name!r} has no {dtype!r} peak; it has "
                                f"{', '.join(self.peaks)}", hint="pick another --dtype")
        return figure.value * self.compute_efficiency

    @property
    def bandwidth(self) -> float:
        """Attainable memory bandwidth in bytes per second (peak times efficiency)."""
        return self.memory_bandwidth.value * self.memory_efficiency

    def ridge(self, dtype: str) -> float:
        """Ridge point in FLOPs per byte: above it a kernel is compute-bound."""
        return self.peak(dtype) / self.bandwidth


def _where(path: str, what: str) -> str:
    return f"{path}: {what}"


def _number(raw: object, path: str, what: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise IrbridgeError(_where(path, f"{what} must be a number, got {raw!r}"))
    value = float(raw)
    if not math.isfinite(value) or value <= 0:
        shown = int(value) if math.isfinite(value) and value == int(value) else value
        raise IrbridgeError(_where(path, f"{what} must be positive, got {shown}"))
    return value


def _figure(raw: object, path: str, what: str, units: Mapping[str, float], default_unit: str,
            sources: Mapping[str, str], default_source: str) -> Figure:
    if isinstance(raw, Mapping):
        unknown = sorted(set(raw) - _FIGURE_KEYS)
        if unknown:
            raise IrbridgeError(_where(path, f"{what}: unknown field {unknown[0]!r}; known: "
                                             f"{', '.join(sorted(_FIGURE_KEYS))}"))
        if "value" not in raw:
            raise IrbridgeError(_where(path, f"{what}: missing 'value'"))
        given = _number(raw["value"], path, what)
        unit = raw.get("unit", default_unit)
        source = raw.get("source", default_source)
        note = " ".join(str(raw[k]) for k in ("note", "derivation") if raw.get(k))
    else:
        given = _number(raw, path, what)
        unit, source, note = default_unit, default_source, ""
    if unit not in units:
        raise IrbridgeError(_where(path, f"{what}: unknown unit {unit!r}; use one of "
                                         f"{', '.join(units)}"))
    if not isinstance(source, str) or not source.strip():
        raise IrbridgeError(_where(path, f"{what} has no source"),
                            hint="give 'source' on the figure or a top-level 'source'")
    return Figure(given * units[unit], given, unit, sources.get(source, source), note)


def _mapping(raw: object, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise IrbridgeError(_where(path, f"{what} must be a mapping, got {type(raw).__name__}"))
    return raw


def parse_target(data: object, path: str) -> Target:
    """Check one target's YAML data against the schema and build it."""
    top = _mapping(data, path, "the file")
    unknown = sorted(set(top) - _TOP_KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_TOP_KEYS), n=1)
        raise IrbridgeError(_where(path, f"unknown field {unknown[0]!r}"),
                            hint=f"did you mean {close[0]!r}?" if close else None)
    for key in ("name", "peaks", "memory_bandwidth"):
        if key not in top:
            raise IrbridgeError(_where(path, f"missing {key!r}"))
    name = top["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise IrbridgeError(_where(path, f"name must be lowercase letters, digits, '-' or '.', "
                                         f"got {name!r}"))
    title = str(top.get("title", name))
    kind = top.get("kind", "gpu")
    if kind not in KINDS:
        raise IrbridgeError(_where(path, f"kind must be one of {', '.join(KINDS)}, got {kind!r}"))
    aliases = top.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and _NAME.match(a)
                                                  for a in aliases):
        raise IrbridgeError(_where(path, "aliases must be a list of names"))
    sources = {str(k): str(v) for k, v in _mapping(top.get("sources", {}), path,
                                                    "sources").items()}
    default_source = str(top.get("source", "") or "")
    peaks_raw = _mapping(top["peaks"], path, "peaks")
    if not peaks_raw:
        raise IrbridgeError(_where(path, "peaks is empty; give at least one of "
                                         f"{', '.join(PEAK_KEYS)}"))
    peaks: dict[str, Figure] = {}
    for key, raw in peaks_raw.items():
        if key not in PEAK_KEYS:
            raise IrbridgeError(_where(path, f"unknown peak {key!r}; known: "
                                             f"{', '.join(PEAK_KEYS)}"))
        peaks[key] = _figure(raw, path, f"peak {key!r}", _PEAK_UNITS, "TFLOPS", sources,
                             default_source)
    bandwidth = _figure(top["memory_bandwidth"], path, "memory_bandwidth", _BANDWIDTH_UNITS,
                        "GB/s", sources, default_source)
    capacity = None
    if "memory_capacity" in top:
        capacity = _figure(top["memory_capacity"], path, "memory_capacity", _SIZE_UNITS, "GB",
                           sources, default_source)
    interconnect = None
    if "interconnect_bandwidth" in top:
        interconnect = _figure(top["interconnect_bandwidth"], path, "interconnect_bandwidth",
                               _BANDWIDTH_UNITS, "GB/s", sources, default_source)
    on_chip = {str(k): _figure(v, path, f"on_chip {k!r}", _SIZE_UNITS, "MB", sources,
                               default_source)
               for k, v in _mapping(top.get("on_chip", {}), path, "on_chip").items()}
    efficiency = _mapping(top.get("efficiency", {}), path, "efficiency")
    extra = sorted(set(efficiency) - {"compute", "memory", "source"})
    if extra:
        raise IrbridgeError(_where(path, f"efficiency: unknown field {extra[0]!r}; known: "
                                         "compute, memory, source"))
    factors = {}
    for key in ("compute", "memory"):
        factor = _number(efficiency.get(key, 1.0), path, f"efficiency {key!r}")
        if factor > 1:
            raise IrbridgeError(_where(path, f"efficiency {key!r} must be at most 1, "
                                             f"got {factor}"))
        factors[key] = factor
    if efficiency and "source" not in efficiency and not default_source:
        raise IrbridgeError(_where(path, "efficiency has no source"))
    return Target(name=name, title=title, kind=kind, peaks=peaks, memory_bandwidth=bandwidth,
                  aliases=tuple(aliases), memory_capacity=capacity,
                  interconnect_bandwidth=interconnect, on_chip=on_chip,
                  compute_efficiency=factors["compute"], memory_efficiency=factors["memory"],
                  efficiency_source=str(efficiency.get("source", default_source if efficiency
                                                       else "")),
                  notes=str(top.get("notes", "") or ""), path=path)


MAX_TARGET_BYTES = 1 << 20
"""A target file describes one chip in a few KB; bigger files are refused unread."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing a mapping that names a key twice (PyYAML keeps the
    last one silently: a target with two `memory_bandwidth:` lines would be read with the
    second). Keys a `<<` merge brings in may still be overridden, as YAML allows."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: construct_mapping says so
            continue
        if repeated:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark, f"duplicate key {key!r}",
                key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _unique_mapping)


def load_target_file(path: str | Path) -> Target:
    """Read and check a target file; errors name the file."""
    shown = str(path)
    try:
        kind = Path(path).stat()
        if not stat.S_ISREG(kind.st_mode):  # a FIFO would block, /dev/zero never end
            raise IrbridgeError(f"{shown}: not a regular file, not a target file")
        if kind.st_size > MAX_TARGET_BYTES:
            raise IrbridgeError(f"{shown}: {kind.st_size:,} bytes, too big for a target file "
                                f"(at most {MAX_TARGET_BYTES:,})")
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IrbridgeError(f"{shown}: no such file") from None
    except OSError as exc:
        raise IrbridgeError(f"{shown}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise IrbridgeError(f"{shown}: not UTF-8 text") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python tags
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        duplicate = f" ({problem})" if problem and problem.startswith("duplicate") else ""
        raise IrbridgeError(f"{shown}: not valid YAML{line}{duplicate}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, deep nesting
        raise IrbridgeError(f"{shown}: not a usable YAML file ({type(exc).__name__}: "
                            f"{str(exc)[:120]})") from None
    if data is None:
        raise IrbridgeError(f"{shown}: empty file; missing 'name'")
    return parse_target(data, shown)


@functools.cache
def catalog() -> dict[str, Target]:
    """The built-in targets by name, sorted."""
    targets = {}
    for path in sorted(CATALOG_DIR.glob("*.yaml")):
        target = load_target_file(path)
        if target.name in targets:
            raise IrbridgeError(f"{path}: target {target.name!r} is defined twice")
        targets[target.name] = target
    return dict(sorted(targets.items()))


def _aliases() -> dict[str, str]:
    names = {}
    for target in catalog().values():
        names[target.name] = target.name
        for alias in target.aliases:
            names.setdefault(alias, target.name)
    return names


def resolve_target(spec: str) -> Target:
    """A catalog name or alias (`h100`), or a path to a target file (`my.yaml`)."""
    spec = spec.strip()
    if not spec:
        raise IrbridgeError("empty target name")
    if spec.endswith((".yaml", ".yml")) or "/" in spec or Path(spec).is_file():
        return load_target_file(spec)
    names = _aliases()
    key = spec.lower()
    if key in names:
        return catalog()[names[key]]
    known = ", ".join(catalog())
    close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.5)
    hint = None
    if close:
        hint = "did you mean " + " or ".join(sorted({names[c] for c in close})) + "?"
    raise IrbridgeError(f"unknown target {spec!r}; known: {known}", hint=hint)


def resolve_targets(specs: str | list[str]) -> list[Target]:
    """Comma-separated targets, in order, without repeats."""
    items = specs.split(",") if isinstance(specs, str) else [
        part for spec in specs for part in spec.split(",")]
    targets: list[Target] = []
    for item in items:
        if not item.strip():
            continue
        target = resolve_target(item)
        if all(t.name != target.name for t in targets):
            targets.append(target)
    if not targets:
        raise IrbridgeError("no target given", hint="e.g. --hardware h100-sxm")
    return targets
