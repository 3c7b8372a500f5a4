"""Numeric comparison: both sides run through the reference executor on the same inputs;
every matched value pair of equal shape is compared, and the first pair (in the left
side's execution order) that differs beyond tolerance is where the numbers diverge.

Errors are measured in float64: max abs error = max |left - right|; max rel error = max abs
error / max |left| (relative to the value's own magnitude, so values near zero do not make
it explode). A value diverges when max abs error > atol + rtol * max |left|. Defaults
rtol 1e-3, atol 1e-5: two float32 paths that fold, fuse or decompose ops differ by a few
ulps per op (about 1e-7 relative), which grows through a deep network to about 1e-5
relative on the eight benchmark models (docs/compare.md); a real difference (another
kernel size, an extra activation, other weights) is at least percent-sized.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from irbridge.compare.match import Matching, ValuePair
from irbridge.errors import IrbridgeError
from irbridge.executor import example_budget, human_bytes, run_graphs
from irbridge.ir import Model, Node, Value

RTOL = 1e-3
ATOL = 1e-5
MEMORY_BUDGET = 2 << 30
"""Bytes of left-side values held while the right side runs; pairs past it are skipped
(and counted) rather than exhausting memory."""


@dataclass
class ValueDiff:
    """Errors of one matched value pair."""

    pair: ValuePair
    left_index: int  # position of the left producer in model order
    max_abs: float
    max_rel: float
    scale: float  # max |left|
    diverged: bool


@dataclass
class Numerics:
    ran: bool
    reason: str = ""  # why it did not run, in one line
    rtol: float = RTOL
    atol: float = ATOL
    inputs: list[str] = field(default_factory=list)
    values: list[ValueDiff] = field(default_factory=list)
    outputs: list[tuple[str, str, float, float]] = field(default_factory=list)
    diverged_outputs: list[tuple[str, str, str]] = field(default_factory=list)
    """Model outputs (left name, right name, what differs) beyond tolerance or of another
    shape: a divergence the matched values may not show (it can lie in nodes the matching
    did not pair)."""
    skipped: int = 0  # pairs not compared (memory budget)

    @property
    def first_divergence(self) -> ValueDiff | None:
        diverged = [v for v in self.values if v.diverged]
        return min(diverged, key=lambda v: v.left_index) if diverged else None

    @property
    def max_abs(self) -> float:
        return max((v.max_abs for v in self.values), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((v.max_rel for v in self.values), default=0.0)


MAX_NDIM = 64
"""Most dims a numpy array may have (numpy 2's NPY_MAXDIMS)."""


def _user_inputs(model: Model) -> list[Value]:
    """Graph inputs fed by the user (not by a link from an earlier graph)."""
    linked = {(lk.to_graph, lk.to_input) for lk in model.links}
    return [v for i, g in enumerate(model.graphs) for v in g.inputs if (i, v.name) not in linked]


def _random_for(value: Value, rng: np.random.Generator) -> np.ndarray:
    if value.type is None or not value.type.is_static:
        raise IrbridgeError(f"input {value.name!r} has no static type {value.type}; "
                            "cannot make an example for it")
    shape = value.type.static_shape()
    if len(shape) > MAX_NDIM:
        raise IrbridgeError(f"input {value.name!r} has {len(shape)} dims; numpy arrays hold "
                            f"at most {MAX_NDIM}, cannot make an example for it")
    dtype = value.type.dtype.numpy
    if np.issubdtype(dtype, np.bool_):
        return np.ones(shape, dtype=dtype)
    if np.issubdtype(dtype, np.integer):   # valid ids for any vocabulary
        return _drawn(shape, dtype, lambda n: rng.integers(0, 10, size=n))
    if np.issubdtype(dtype, np.complexfloating):  # both parts random, not a real array
        real = _drawn(shape, dtype, rng.standard_normal)
        return real + 1j * _drawn(shape, dtype, rng.standard_normal)
    return _drawn(shape, dtype, rng.standard_normal)


_CHUNK = 1 << 20


def _drawn(shape: tuple[int, ...], dtype: Any, draw: Callable[[int], np.ndarray]
           ) -> np.ndarray:
    """`draw(n)` (float64 or int64 numbers) cast to `dtype` and shaped, drawn a million
    at a time into the result: the same numbers as one `draw(size)` (the generator's
    stream is sequential), without a float64 array of the whole size beside it."""
    out = np.empty(int(np.prod(shape, dtype=np.int64)), dtype)
    for start in range(0, out.size, _CHUNK):
        out[start:start + _CHUNK] = draw(min(_CHUNK, out.size - start))
    return out.reshape(shape)


def _check_example_bytes(values: Sequence[Value], examples: Mapping[str, np.ndarray]) -> None:
    """Refuse, before making any, random examples past `executor.example_budget()`."""
    total, biggest = 0, None
    for value in values:
        if value.name in examples or value.type is None or not value.type.is_static:
            continue
        nbytes = (value.type.numel() or 0) * value.type.dtype.itemsize
        total += nbytes
        if biggest is None or nbytes > biggest[0]:
            biggest = (nbytes, value)
    limit = example_budget()
    if total > limit and biggest is not None:
        raise IrbridgeError(
            f"the model's inputs take {human_bytes(total)} by their declared types (the "
            f"largest, {biggest[1].name!r}, {biggest[1].type}: {human_bytes(biggest[0])}); "
            f"random examples are made up to {human_bytes(limit)} (set IRBRIDGE_MAX_MEMORY "
            "to raise it)")


def make_feeds(left: Model, right: Model, examples: Mapping[str, np.ndarray]
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The same arrays for both sides, matched by input name, else by position. Uses the
    zoo's example inputs where given, else seeded random arrays of the left's types.
    Raises IrbridgeError (one line) when the signatures do not fit."""
    rng = np.random.default_rng(0)
    left_inputs, right_inputs = _user_inputs(left), _user_inputs(right)
    if len(left_inputs) != len(right_inputs):
        raise IrbridgeError(f"input signatures differ: left takes {_sig(left_inputs)}, right "
                            f"takes {_sig(right_inputs)}")
    if len(examples) != len(left_inputs):
        _check_example_bytes(left_inputs, examples)
    arrays: list[np.ndarray] = []
    for position, value in enumerate(left_inputs):
        array = examples.get(value.name)
        if array is None and len(examples) == len(left_inputs):
            array = list(examples.values())[position]
        arrays.append(np.asarray(array) if array is not None else _random_for(value, rng))
    left_names = [v.name for v in left_inputs]
    feeds_left = dict(zip(left_names, arrays, strict=True))
    feeds_right: dict[str, np.ndarray] = {}
    by_name = all(v.name in feeds_left for v in right_inputs)
    for position, value in enumerate(right_inputs):
        array = feeds_left[value.name] if by_name else arrays[position]
        if value.type is not None and (value.type.dtype.numpy != array.dtype or (
                value.type.is_static and value.type.static_shape() != array.shape)):
            raise IrbridgeError(f"input signatures differ: left takes {_sig(left_inputs)}, "
                                f"right takes {_sig(right_inputs)}")
        feeds_right[value.name] = array
    return feeds_left, feeds_right


def _sig(values: list[Value]) -> str:
    return "(" + ", ".join(f"{v.name}: {v.type}" for v in values) + ")"


def errors_of(left: np.ndarray, right: np.ndarray) -> tuple[float, float, float]:
    """(max abs error, max rel error, max |left|) in float64 (complex128 for complex values:
    |left - right| is the modulus of the difference, the imaginary parts count); NaN at the
    same places on both sides counts as equal, NaN on one side only as infinite error."""
    complex_ = np.iscomplexobj(left) or np.iscomplexobj(right)
    a = np.asarray(left, dtype=np.complex128 if complex_ else np.float64)
    b = np.asarray(right, dtype=np.complex128 if complex_ else np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if np.any(nan_a != nan_b):
        return float("inf"), float("inf"), float(np.nanmax(np.abs(a), initial=0.0))
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, replaced below where a == b
        diff = np.abs(np.where(nan_a, 0.0, a) - np.where(nan_b, 0.0, b))
        diff = np.where(np.isinf(a) & (a == b), 0.0, diff)
    max_abs = float(diff.max(initial=0.0))
    finite = np.abs(a[np.isfinite(a)])
    scale = float(finite.max(initial=0.0))
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    return max_abs, max_rel, scale


def _model_outputs(model: Model, arrays: list[np.ndarray]
                   ) -> tuple[list[str], list[np.ndarray]]:
    """The last graph's outputs that are the model's, by name: without the new buffer
    values a torch.export capture adds as outputs (`<graph>.buffer_updates` metadata:
    `select_scatter_3 -> cache`), which the other side may not have."""
    graph = model.graphs[-1]
    updates = model.metadata.get(f"{graph.name}.buffer_updates", "")
    skip = {entry.split(" -> ")[0] for entry in updates.split(", ") if entry}
    kept = [(v.name, a) for v, a in zip(graph.outputs, arrays, strict=False)
            if v.name not in skip]
    return [name for name, _ in kept], [a for _, a in kept]


def compare_numerics(left: Model, right: Model, matching: Matching,
                     examples: Mapping[str, np.ndarray] | None = None, *,
                     rtol: float = RTOL, atol: float = ATOL,
                     budget: int = MEMORY_BUDGET) -> Numerics:
    """Run both sides and compare matched values; never raises for bad input: a side that
    cannot run or inputs that do not fit give `ran=False` with the reason."""
    result = Numerics(False, rtol=rtol, atol=atol)
    try:
        feeds_left, feeds_right = make_feeds(left, right, examples or {})
    except IrbridgeError as exc:
        result.reason = exc.message
        return result
    result.inputs = [f"{name}: {a.dtype}{list(a.shape)}" for name, a in feeds_left.items()]
    wanted_left = {id(p.left): p for g in matching.groups for p in g.values if p.shape_equal}
    wanted_right = {id(p.right): p for p in wanted_left.values()}
    index = {id(r.node): r.index for r in matching.left}
    stored: dict[int, np.ndarray] = {}
    held = 0

    def on_left(node: Node, arrays: list[np.ndarray]) -> None:
        nonlocal held
        for value, array in zip(node.outputs, arrays, strict=True):
            if id(value) in wanted_left:
                if held + array.nbytes > budget:
                    result.skipped += 1
                    continue
                stored[id(value)] = array
                held += array.nbytes

    def on_right(node: Node, arrays: list[np.ndarray]) -> None:
        nonlocal held
        for value, array in zip(node.outputs, arrays, strict=True):
            pair = wanted_right.get(id(value))
            if pair is None or id(pair.left) not in stored:
                continue
            ref = stored.pop(id(pair.left))
            held -= ref.nbytes
            max_abs, max_rel, scale = errors_of(ref, array)
            producer = pair.left.producer
            result.values.append(ValueDiff(
                pair, index.get(id(producer), -1) if producer is not None else -1,
                max_abs, max_rel, scale, not max_abs <= atol + rtol * scale))

    try:
        outs_left = run_graphs(left, feeds_left, on_node=on_left)[-1]
    except IrbridgeError as exc:
        result.reason = f"left side does not run: {exc.message}"
        return result
    try:
        outs_right = run_graphs(right, feeds_right, on_node=on_right)[-1]
    except IrbridgeError as exc:
        result.reason = f"right side does not run: {exc.message}"
        return result
    result.ran = True
    result.values.sort(key=lambda v: v.left_index)
    names_left, outs_left = _model_outputs(left, outs_left)
    names_right, outs_right = _model_outputs(right, outs_right)
    for name_l, name_r, a, b in zip(names_left, names_right, outs_left, outs_right,
                                    strict=False):
        if np.shape(a) == np.shape(b):
            max_abs, max_rel, scale = errors_of(a, b)
            result.outputs.append((name_l, name_r, max_abs, max_rel))
            if not max_abs <= atol + rtol * scale:
                result.diverged_outputs.append((name_l, name_r, (
                    f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}, tolerance "
                    f"{atol:g} + {rtol:g} x {scale:.3g}")))
        else:
            result.diverged_outputs.append((name_l, name_r, f"shapes {list(np.shape(a))} vs "
                                                            f"{list(np.shape(b))}"))
    if len(outs_left) != len(outs_right):
        result.diverged_outputs.append(("-", "-", f"{len(outs_left)} outputs vs "
                                                  f"{len(outs_right)}"))
    return result
