"""The same model at a wider floating-point precision.

`widened(model)` copies a model (through serde, the file format's own copy) with every
float32 element type replaced by float64: value types, model tensors (data converted
exactly: every float32 is a float64), constant tensors and dtype attributes of nodes (a
`cast` to float32 becomes a cast to float64), in every graph and subgraph. Nothing else changes: the nodes, their order, their other
attributes. Running the copy in the reference executor evaluates exactly the artifact that
was captured, with float64 rounding instead of float32's: the way to tell a wrong
formula (as wrong in float64) from float32 rounding (gone in float64). Training-step
verification uses it where gradients through piecewise-linear ops (ReLU, clamp, max
pooling) jump because float32 rounding put an input on the other side of a kink.
"""

from __future__ import annotations

from irbridge import serde
from irbridge.dtypes import DType
from irbridge.ir import AttrValue, Graph, Model, Tensor, TensorType, walk_nodes


def widened(model: Model, source: DType = DType.FLOAT32,
            target: DType = DType.FLOAT64) -> Model:
    """A copy of `model` with `source` replaced by `target` wherever a type is named
    (see the module docstring). The original is not changed."""
    if not (source.is_float and target.is_float):
        raise ValueError(f"widened: {source.short} -> {target.short} is not a float widening")
    wide = serde.from_proto(serde.to_proto(model), source=model.name or "<model>")
    for tensor in wide.tensors.values():
        _widen_tensor(tensor, source, target)
    for graph in wide.graphs:
        _widen_graph(graph, source, target)
    return wide


def _widen_tensor(tensor: Tensor, source: DType, target: DType) -> None:
    if tensor.dtype != source:
        return
    tensor.dtype = target
    if tensor.data is not None:
        tensor.data = tensor.data.astype(target.numpy)


def _widen_graph(graph: Graph, source: DType, target: DType) -> None:
    _widen_values(graph, source, target)
    for _, node in walk_nodes(graph):  # nodes of subgraphs included
        node.attrs = {k: _widen_attr(v, source, target) for k, v in node.attrs.items()}
        for sub in node.subgraphs():
            _widen_values(sub, source, target)


def _widen_values(graph: Graph, source: DType, target: DType) -> None:
    """The graph's own values (not its subgraphs'); a parameter's tensor with them."""
    for value in graph.values.values():
        if value.type is not None and value.type.dtype == source:
            value.type = TensorType(target, value.type.shape)
        if value.tensor is not None:
            _widen_tensor(value.tensor, source, target)


def _widen_attr(value: AttrValue, source: DType, target: DType) -> AttrValue:
    if isinstance(value, DType):
        return target if value == source else value
    if isinstance(value, Tensor):
        _widen_tensor(value, source, target)
        return value
    return value
