"""GraphBuilder: emit neutral ops into a graph with their output types inferred.

Front-ends and decompositions build graphs through this class, so that every node gets
its types from the op registry and a readable, unique output name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, Node, Provenance, Tensor, TensorType, Value
from irbridge.ops import registry


class GraphBuilder:
    def __init__(self, graph: Graph, model: Model | None = None,
                 provenance: Provenance | None = None) -> None:
        self.graph = graph
        self.model = model
        self.provenance = provenance  # stamped on every node built while set

    def op(self, op: str, inputs: Sequence[Value | None], attrs: Mapping[str, object] | None = None,
           *, name: str | None = None, num_outputs: int | None = None,
           provenance: Provenance | None = None) -> Value:
        """Emit a single-output op and return its output."""
        return self.op_multi(op, inputs, attrs, name=name, num_outputs=num_outputs or 1,
                             provenance=provenance)[0]

    def op_multi(self, op: str, inputs: Sequence[Value | None],
                 attrs: Mapping[str, object] | None = None, *, name: str | None = None,
                 num_outputs: int | None = None, provenance: Provenance | None = None,
                 ) -> list[Value]:
        """Emit an op with several outputs (split, topk, ...) and return them all."""
        schema = registry.get(op)
        count = num_outputs if num_outputs is not None else len(schema.outputs)
        base = name or op
        names = [self.graph.unique_name(base if count == 1 else f"{base}_{i}")
                 for i in range(count)]
        # reserve names so that repeated unique_name calls do not collide
        node = self.graph.add_node(op, inputs, names, attrs,
                                   provenance=_copy_provenance(provenance or self.provenance))
        types = registry.infer_types(node)
        for value, t in zip(node.outputs, types, strict=False):
            value.type = t
        return node.outputs

    def constant(self, array: np.ndarray | float | int | bool, name: str = "const",
                 dtype: DType | None = None) -> Value:
        """A small constant as a `constant` node (its data is kept inline in the node)."""
        data = np.asarray(array, dtype=dtype.numpy if dtype is not None else None)
        if data.dtype == np.float64 and dtype is None:
            data = data.astype(np.float32)
        tensor = Tensor.from_array(name, data)
        return self.op("constant", [], {"value": tensor}, name=name)

    def parameter(self, tensor: Tensor) -> Value:
        """A model tensor (weight) read by this graph."""
        if self.model is not None:
            self.model.add_tensor(tensor)
        return self.graph.add_parameter(tensor)

    def last_node(self) -> Node:
        return self.graph.nodes[-1]

    def infer(self, node: Node) -> None:
        for value, t in zip(node.outputs, registry.infer_types(node), strict=False):
            value.type = t


def _copy_provenance(p: Provenance | None) -> Provenance | None:
    if p is None:
        return None
    return Provenance(p.source_format, p.source_op, p.source_node, p.module_path,
                      p.module_class, p.location)


def type_of(value: Value) -> TensorType:
    if value.type is None:
        raise ValueError(f"value {value.name!r} has no type")
    return value.type
