"""Checks the analysis (and compare) make before any arithmetic: the structure a file
promises (unique node ids, graph links that go forward), and shapes and costs inside the
range the cost model is meant for. A corrupt or hostile file gets one line naming the node
or value, never an assertion deep in the partitioner or an overflow in an output writer.

Limits: a dim above 2^48 or a tensor above 2^56 elements is refused (the largest real
tensors are near 2^40 elements); every cost figure of a node must lie in [0, 2^63)
(the IR stores costs as unsigned 64-bit integers, and sums of many nodes must still fit).
"""

from __future__ import annotations

import contextlib
import math
import operator

from irbridge.errors import IrbridgeError
from irbridge.ir import Cost, Graph, Model, Node, Value, walk_nodes

MAX_DIM = 1 << 48
MAX_NUMEL = 1 << 56
MAX_COST = 1 << 63
COST_FIELDS = ("macs", "matmul_flops", "other_flops", "bytes_read", "bytes_written",
               "param_bytes")


def _graphs(model: Model) -> list[tuple[str, Graph]]:
    found: list[tuple[str, Graph]] = []
    for index, graph in enumerate(model.graphs):
        found.append((f"graph {index} ({graph.name!r})", graph))
        for _, node in walk_nodes(graph):
            for sub in node.subgraphs():
                found.append((f"a body of node #{node.id} {node.qualified_op}", sub))
    return found


def check_structure(model: Model) -> None:
    """Unique node ids across the model (bodies included) and forward graph links."""
    seen: dict[int, Node] = {}
    for graph in model.graphs:
        for _, node in walk_nodes(graph):
            other = seen.get(node.id)
            if other is not None and other is not node:
                raise IrbridgeError(
                    f"node #{node.id} {node.qualified_op} has the same id as node "
                    f"#{other.id} {other.qualified_op}: node ids must be unique; the file is "
                    "corrupt")
            seen[node.id] = node
    count = len(model.graphs)
    for index, link in enumerate(model.links):
        where = (f"graph link {index} (graph {link.from_graph} output {link.from_output!r} -> "
                 f"graph {link.to_graph} input {link.to_input!r})")
        if not (0 <= link.from_graph < count and 0 <= link.to_graph < count):
            raise IrbridgeError(f"{where} names a graph the model does not have "
                                f"({count} graphs)")
        if link.from_graph >= link.to_graph:
            raise IrbridgeError(f"{where} does not go forward: a link feeds a later graph")
        source, target = model.graphs[link.from_graph], model.graphs[link.to_graph]
        if not any(v.name == link.from_output for v in source.outputs):
            raise IrbridgeError(f"{where}: graph {link.from_graph} has no output "
                                f"{link.from_output!r}")
        if not any(v.name == link.to_input for v in target.inputs):
            raise IrbridgeError(f"{where}: graph {link.to_graph} has no input "
                                f"{link.to_input!r}")


def _value_where(value: Value, graph_where: str) -> str:
    if value.producer is not None:
        return (f"value {value.name!r} (output of node #{value.producer.id} "
                f"{value.producer.qualified_op})")
    return f"value {value.name!r} in {graph_where}"


def check_shapes(model: Model) -> None:
    """Every static dim in [0, 2^48], every static tensor at most 2^56 elements."""
    for graph_where, graph in _graphs(model):
        for value in graph.values.values():
            t = value.type
            if t is None or t.shape is None:
                continue
            static = [d for d in t.shape if isinstance(d, int)]
            for dim in static:
                if dim < 0:
                    raise IrbridgeError(f"{_value_where(value, graph_where)} has a negative dim "
                                        f"{dim} in its shape {list(t.shape)}")
                if dim > MAX_DIM:
                    raise IrbridgeError(f"{_value_where(value, graph_where)} has dim {dim}, "
                                        f"past the analysis limit 2^48")
            if static and math.prod(static) > MAX_NUMEL:
                raise IrbridgeError(f"{_value_where(value, graph_where)} has "
                                    f"{math.prod(static):,} elements, past the analysis limit "
                                    "2^56")


def check_cost(node: Node, cost: Cost) -> None:
    """A node's cost figures in [0, 2^63): a negative or astronomic cost comes from
    implausible attributes (pads of 2^40, strides of 0 ...) the shapes did not reveal."""
    for name in COST_FIELDS:
        figure = getattr(cost, name)
        with contextlib.suppress(TypeError):
            figure = operator.index(figure)  # Python or NumPy integers
        if not isinstance(figure, int) or not 0 <= figure < MAX_COST:
            raise IrbridgeError(f"node #{node.id} {node.qualified_op}: {name.replace('_', ' ')} "
                                f"would be {figure}, out of range; check its shapes and "
                                "attributes")
