"""Reference execution: run an IR model through the registry's numpy implementations.

Every front-end and back-end is checked numerically against this executor. It favours
clarity over speed, but frees each intermediate array after its last use so that real
models fit in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from irbridge.errors import IrbridgeError
from irbridge.ir import Graph, Model, Node, Value
from irbridge.ops import registry

NodeHook = Callable[[Node, list[np.ndarray]], None]


class ExecutionError(IrbridgeError):
    """The reference executor could not run a node (opaque op, missing weights, bad input)."""


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray], *,
              outer: Mapping[str, np.ndarray] | None = None,
              on_node: NodeHook | None = None) -> list[np.ndarray]:
    """Run one graph. `feeds` maps input names to arrays; `outer` holds values visible
    from an enclosing graph (control-flow bodies); `on_node` sees every node's outputs."""
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

    def run_sub(sub: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        return run_graph(sub, {v.name: a for v, a in zip(sub.inputs, args, strict=True)},
                         outer=env, on_node=on_node)

    for step, node in enumerate(graph.nodes):
        where = registry.node_where(node)
        if node.is_opaque:
            raise ExecutionError(f"{where}: opaque op {node.qualified_op} has no reference "
                                 "implementation")
        schema = registry.get(node.op)
        args = [None if v is None else _lookup(env, v, where) for v in node.inputs]
        attrs = schema.resolve_attrs(node.attrs, where)
        ctx = registry.RefContext([v.type for v in node.outputs], run_sub, where)
        try:
            results = schema.reference(args, attrs, ctx)
        except IrbridgeError:
            raise
        except Exception as exc:  # numpy errors become one line naming the node
            raise ExecutionError(f"{where}: reference implementation failed: {exc}") from exc
        if len(results) != len(node.outputs):
            raise ExecutionError(f"{where}: produced {len(results)} outputs, "
                                 f"expected {len(node.outputs)}")
        for value, array in zip(node.outputs, results, strict=True):
            env[value.name] = np.asarray(array)
        if on_node is not None:
            on_node(node, [env[v.name] for v in node.outputs])
        for operand in node.inputs:
            if operand is not None and last_use.get(operand.name) == step \
                    and operand.name not in keep and operand.name not in (outer or {}):
                env.pop(operand.name, None)
    return [_lookup(env, v, f"graph {graph.name!r} output") for v in graph.outputs]


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
        results.append(run_graph(graph, feeds, on_node=on_node))
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
