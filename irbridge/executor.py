"""Reference execution: run an IR model through the registry's numpy implementations.

Every front-end and back-end is checked numerically against this executor. It favours
clarity over speed, but frees each intermediate array after its last use so that real
models fit in memory.

Runs are bounded, since the model may come from anywhere (a 100-byte ONNX `Tile` can
declare a 4 GB output): before a node runs, the bytes its outputs declare (static types)
plus the intermediates already held must fit the memory budget, else the run stops
with one line naming the node. The budget is `MEMORY_FACTOR` times the model's weights
and fed inputs, at least `MEMORY_FLOOR`; `IRBRIDGE_MAX_MEMORY` (bytes, or with a K/M/G/T
suffix) replaces it. Node executions, loop and branch bodies included, are capped at
`MAX_STEPS` (`IRBRIDGE_MAX_STEPS`), which bounds while loops with huge trip counts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from irbridge.errors import IrbridgeError
from irbridge.ir import Graph, Model, Node, Value
from irbridge.ops import registry

NodeHook = Callable[[Node, list[np.ndarray]], None]


class ExecutionError(IrbridgeError):
    """The reference executor could not run a node (opaque op, missing weights, bad input)."""


MEMORY_FLOOR = 2 << 30
"""Smallest memory budget (bytes) for intermediates, whatever the model's size."""

MEMORY_FACTOR = 16
"""Budget for intermediates as a multiple of the model's weights plus its fed inputs."""

MAX_STEPS = 500_000
"""Most node executions of one run (bodies of loops and branches count each time)."""


@dataclass
class Budget:
    """What one run may use: `limit` bytes of intermediates held at once, `max_steps`
    node executions; `held` and `steps` are what it uses so far."""

    limit: int
    max_steps: int = MAX_STEPS
    held: int = 0
    steps: int = 0

    @classmethod
    def for_data(cls, nbytes: int) -> Budget:
        """The default budget of a run whose weights and inputs take `nbytes`, unless
        IRBRIDGE_MAX_MEMORY / IRBRIDGE_MAX_STEPS say otherwise."""
        limit = _env_size("IRBRIDGE_MAX_MEMORY")
        steps = _env_size("IRBRIDGE_MAX_STEPS", suffixes=False)
        return cls(limit if limit is not None else max(MEMORY_FLOOR, MEMORY_FACTOR * nbytes),
                   steps if steps is not None else MAX_STEPS)


def example_budget() -> int:
    """Most bytes of random example inputs a command makes up for a model's declared
    input types (`compare`, `--verify`): IRBRIDGE_MAX_MEMORY, else MEMORY_FLOOR. A file
    can declare a 6 GB input in a few bytes; making it up is refused, not attempted."""
    limit = _env_size("IRBRIDGE_MAX_MEMORY")
    return MEMORY_FLOOR if limit is None else limit


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _env_size(name: str, suffixes: bool = True) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    match = re.fullmatch(r"(\d{1,15})([KMGT]?)(?:i?B)?" if suffixes else r"(\d{1,15})()",
                         text, re.IGNORECASE)
    if match is None or int(match[1]) <= 0:
        form = "a positive byte count such as 8G or 512M" if suffixes else "a positive count"
        raise ExecutionError(f"{name}={text!r} is not {form}")
    return int(match[1]) * _SUFFIX[match[2].upper()]


def human_bytes(n: int) -> str:
    """Bytes in binary units, one decimal (the budget messages here and in compare)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _declared_bytes(node: Node, where: str) -> int:
    """Bytes the node's outputs take by their static types (unknown dims count 0)."""
    total = 0
    for value in node.outputs:
        t = value.type
        if t is None or t.shape is None:
            continue
        count = 1
        for dim in t.shape:
            if not isinstance(dim, int):
                count = 0
                break
            if dim < 0:
                raise ExecutionError(f"{where}: output {value.name!r} has negative dim "
                                     f"{dim} in its type {t}")
            count *= dim
        total += count * t.dtype.itemsize
    return total


def _data_bytes(graph: Graph, feeds: Mapping[str, np.ndarray]) -> int:
    total = sum(int(np.asarray(a).nbytes) for a in feeds.values())
    for value in graph.parameters:
        if value.tensor is not None and value.tensor.data is not None:
            total += int(value.tensor.data.nbytes)
    return total


# IEEE specials (log(0) = -inf, a NaN cast to an integer) are values here, as in the
# runtimes: no numpy warning on the user's terminal (set once per graph run, not per node)
@np.errstate(all="ignore")
def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray], *,
              outer: Mapping[str, np.ndarray] | None = None,
              on_node: NodeHook | None = None,
              budget: Budget | None = None) -> list[np.ndarray]:
    """Run one graph. `feeds` maps input names to arrays; `outer` holds values visible
    from an enclosing graph (control-flow bodies); `on_node` sees every node's outputs;
    `budget` bounds memory and steps (by default derived from the graph's weights and
    feeds, see the module doc)."""
    if budget is None:
        budget = Budget.for_data(_data_bytes(graph, feeds))
    env: dict[str, np.ndarray] = dict(outer or {})
    for value in graph.inputs:
        if value.name not in feeds:
            raise ExecutionError(f"graph {graph.name!r}: no data fed for input {value.name!r}")
        env[value.name] = _check_feed(value, np.asarray(feeds[value.name]))
    for value in graph.parameters:
        tensor = value.tensor
        assert tensor is not None
        if tensor.data is None:
            raise ExecutionError(f"tensor {tensor.name!r} has no data (shape-only IR); "
                                 "convert again without --no-weights to execute")
        env[value.name] = tensor.data
    last_use = _last_uses(graph)
    keep = {v.name for v in graph.outputs}
    held: dict[str, int] = {}  # bytes of the intermediates this graph computed and holds

    def run_sub(sub: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        return run_graph(sub, {v.name: a for v, a in zip(sub.inputs, args, strict=True)},
                         outer=env, on_node=on_node, budget=budget)

    try:
        for step, node in enumerate(graph.nodes):
            where = registry.node_where(node)
            if node.is_opaque:
                raise ExecutionError(f"{where}: opaque op {node.qualified_op} has no "
                                     "reference implementation")
            budget.steps += 1
            if budget.steps > budget.max_steps:
                raise ExecutionError(f"{where}: the run exceeds {budget.max_steps:,} node "
                                     "executions (loop bodies count each iteration); set "
                                     "IRBRIDGE_MAX_STEPS to allow more")
            _check_memory(budget, _declared_bytes(node, where), where, "will need")
            schema = registry.get(node.op)
            args = [None if v is None else _lookup(env, v, where) for v in node.inputs]
            attrs = schema.resolve_attrs(node.attrs, where)
            ctx = registry.RefContext([v.type for v in node.outputs], run_sub, where)
            try:
                results = schema.reference(args, attrs, ctx)
            except IrbridgeError:
                raise
            except MemoryError as exc:
                raise ExecutionError(f"{where}: out of memory in the reference "
                                     "implementation") from exc
            except Exception as exc:  # numpy errors become one line naming the node
                raise ExecutionError(f"{where}: reference implementation failed: "
                                     f"{exc}") from exc
            if len(results) != len(node.outputs):
                raise ExecutionError(f"{where}: produced {len(results)} outputs, "
                                     f"expected {len(node.outputs)}")
            arrays = [_narrow(v, np.asarray(a)) for v, a in zip(node.outputs, results,
                                                                 strict=True)]
            produced = sum(int(a.nbytes) for a in arrays)
            _check_memory(budget, produced, where, "produced")
            for value, array in zip(node.outputs, arrays, strict=True):
                budget.held -= held.pop(value.name, 0)
                env[value.name] = array
                held[value.name] = int(array.nbytes)
                budget.held += int(array.nbytes)
            if on_node is not None:
                on_node(node, [env[v.name] for v in node.outputs])
            for operand in node.inputs:
                if operand is not None and last_use.get(operand.name) == step \
                        and operand.name not in keep and operand.name not in (outer or {}):
                    env.pop(operand.name, None)
                    budget.held -= held.pop(operand.name, 0)
        return [_lookup(env, v, f"graph {graph.name!r} output") for v in graph.outputs]
    finally:
        budget.held -= sum(held.values())


def _narrow(value: Value, array: np.ndarray) -> np.ndarray:
    """ml_dtypes computes many ufuncs of int4 / int2 (neg, abs, shifts, bitwise ops) in
    int8: a result of a sub-byte integer type goes back to it, wrapping modulo 2^bits as
    StableHLO's integer arithmetic does."""
    t = value.type
    if t is not None and t.dtype.is_integer and t.dtype.bits < 8 and array.dtype != t.dtype.numpy \
            and array.dtype.kind in "iu":
        return array.astype(t.dtype.numpy)
    return array


def _check_memory(budget: Budget, nbytes: int, where: str, verb: str) -> None:
    if budget.held + nbytes > budget.limit:
        raise ExecutionError(f"{where}: its outputs {verb} {human_bytes(nbytes)} with "
                             f"{human_bytes(budget.held)} of intermediates held, past the "
                             f"executor's memory budget of {human_bytes(budget.limit)} (set "
                             "IRBRIDGE_MAX_MEMORY to raise it)")


def run_model(model: Model, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
              on_node: NodeHook | None = None) -> list[np.ndarray]:
    """Run all graphs of a model in order and return the last graph's outputs (for a
    single-graph model: its outputs)."""
    return run_graphs(model, inputs, on_node=on_node)[-1]


def run_graphs(model: Model, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
               on_node: NodeHook | None = None) -> list[list[np.ndarray]]:
    """Run all graphs of a model in order, feeding each graph input from a link to an
    earlier graph's output or else from `inputs` by name; return every graph's outputs."""
    first = model.graphs[0]
    if not isinstance(inputs, Mapping):
        inputs = {v.name: a for v, a in zip(first.inputs, inputs, strict=True)}
    weights = sum(int(t.data.nbytes) for t in model.tensors.values() if t.data is not None)
    budget = Budget.for_data(weights + sum(int(np.asarray(a).nbytes)
                                           for a in inputs.values()))
    results: list[list[np.ndarray]] = []
    for index, graph in enumerate(model.graphs):
        feeds: dict[str, np.ndarray] = {}
        for value in graph.inputs:
            link = next((lk for lk in model.links
                         if lk.to_graph == index and lk.to_input == value.name), None)
            if link is not None:
                position = [v.name for v in model.graphs[link.from_graph].outputs].index(
                    link.from_output)
                feeds[value.name] = results[link.from_graph][position]
            elif value.name in inputs:
                feeds[value.name] = inputs[value.name]
        results.append(run_graph(graph, feeds, on_node=on_node, budget=budget))
    return results


def _lookup(env: Mapping[str, np.ndarray], value: Value, where: str) -> np.ndarray:
    if value.name not in env:
        raise ExecutionError(f"{where}: value {value.name!r} is not computed yet")
    return env[value.name]


def _check_feed(value: Value, array: np.ndarray) -> np.ndarray:
    if value.type is None:
        return array
    if array.dtype != value.type.dtype.numpy:
        raise ExecutionError(f"input {value.name!r}: got dtype {array.dtype}, expected "
                             f"{value.type.dtype.short}")
    shape = value.type.shape
    if shape is not None and (len(shape) != array.ndim or any(
            isinstance(d, int) and d != s for d, s in zip(shape, array.shape, strict=True))):
        raise ExecutionError(f"input {value.name!r}: got shape {list(array.shape)}, "
                             f"expected {value.type}")
    return array


def _last_uses(graph: Graph) -> dict[str, int]:
    last: dict[str, int] = {}
    for step, node in enumerate(graph.nodes):
        for value in node.inputs:
            if value is not None:
                last[value.name] = step
        for sub in node.subgraphs():  # outer values read inside bodies stay alive
            for name in _free_names(sub):
                last[name] = step
    return last


def _free_names(graph: Graph) -> set[str]:
    defined = {v.name for v in graph.inputs} | {v.name for v in graph.parameters}
    free: set[str] = set()
    for node in graph.nodes:
        free |= {v.name for v in node.inputs if v is not None and v.name not in defined}
        for sub in node.subgraphs():
            free |= _free_names(sub) - defined
        defined |= {v.name for v in node.outputs}
    free |= {v.name for v in graph.outputs if v.name not in defined}
    return free
