"""Hypothesis strategies for random valid IR models (any op names: serde does not care)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from irbridge.dtypes import DType
from irbridge.ir import (
    Analysis,
    Cost,
    Estimate,
    Graph,
    GraphLink,
    HardwareMapping,
    Model,
    NodeAnnotations,
    Partition,
    Provenance,
    SourceLocation,
    SymDim,
    Tensor,
    TensorType,
)

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.0123456789", min_size=1, max_size=12)
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
uint64 = st.integers(0, 2**64 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
dtypes = st.sampled_from(list(DType))
sym_dims = st.builds(SymDim, st.sampled_from(["batch", "seq", "n"]),
                     st.none() | st.integers(0, 8), st.none() | st.integers(8, 1 << 40))
dims = st.integers(0, 6) | sym_dims | st.none()
shapes = st.none() | st.lists(dims, max_size=4).map(tuple)
tensor_types = st.builds(TensorType, dtypes, shapes)
floats = st.floats(allow_nan=False, width=64)


@st.composite
def tensors(draw: st.DrawFn, name: str | None = None) -> Tensor:
    dtype = draw(dtypes)
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    tensor_name = name or draw(names)
    if draw(st.booleans()):
        return Tensor(tensor_name, dtype, shape)  # shape-only
    count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = draw(st.binary(min_size=count, max_size=count))
    if dtype.bits < 8:  # the .irb form of a sub-byte element: its bits in the low bits of a byte
        raw = bytes(b & ((1 << dtype.bits) - 1) for b in raw)
    data = np.frombuffer(raw, dtype=dtype.numpy).reshape(shape).copy()
    return Tensor(tensor_name, dtype, shape, data)


def attr_values(depth: int) -> st.SearchStrategy[object]:
    scalars = st.one_of(int64, floats, texts, st.booleans(), dtypes, tensors(),
                        st.lists(int64, max_size=4).map(tuple),
                        st.lists(floats, min_size=1, max_size=4).map(tuple),
                        st.lists(texts, min_size=1, max_size=3).map(tuple))
    if depth <= 0:
        return scalars
    return st.one_of(scalars, graphs(depth - 1),
                     st.lists(graphs(depth - 1), min_size=1, max_size=2).map(tuple))


provenances = st.builds(Provenance, texts, texts, texts, texts, texts,
                        st.none() | st.builds(SourceLocation, texts, st.integers(0, 2**31 - 1),
                                              texts))
costs = st.builds(Cost, uint64, uint64, uint64, uint64, uint64, uint64)


@st.composite
def graphs(draw: st.DrawFn, depth: int = 1, model: Model | None = None,
           ids: list[int] | None = None) -> Graph:
    """A graph whose nodes read earlier values; with `model`, also its tensors."""
    ids = ids if ids is not None else [draw(st.integers(0, 1000))]
    graph = Graph(draw(names))
    graph.break_reason = draw(texts)
    counter = 0

    def fresh() -> str:
        nonlocal counter
        counter += 1
        return f"v{counter}"

    available = [graph.add_input(fresh(), draw(st.none() | tensor_types))
                 for _ in range(draw(st.integers(0, 3)))]
    if model is not None:
        for tensor in model.tensors.values():
            if draw(st.booleans()):
                available.append(graph.add_parameter(tensor))
    for _ in range(draw(st.integers(0, 5))):
        operands = draw(st.lists(st.none() | st.sampled_from(available), max_size=3)) \
            if available else []
        outs = [fresh() for _ in range(draw(st.integers(1, 2)))]
        ids[0] += draw(st.integers(1, 5))
        node = graph.add_node(
            draw(names), operands, outs,
            draw(st.dictionaries(names, attr_values(depth), max_size=3)),
            output_types=[draw(st.none() | tensor_types) for _ in outs], id=ids[0],
            domain=draw(st.sampled_from(["", "", "torch", "custom.domain"])), name=draw(texts),
            provenance=draw(provenances),
            annotations=NodeAnnotations(draw(st.none() | costs), draw(st.none() | int64),
                                        draw(st.dictionaries(names, attr_values(0),
                                                             max_size=2))))
        available.extend(node.outputs)
    if available:
        graph.set_outputs(draw(st.lists(st.sampled_from(available), max_size=3, unique=True)))
    return graph


@st.composite
def analyses(draw: st.DrawFn) -> Analysis:
    partitions = draw(st.lists(st.builds(Partition, int64, st.lists(uint64, max_size=3), texts,
                                         texts, costs, uint64, uint64,
                                         st.integers(0, 2**32 - 1)), max_size=2))
    estimates = st.lists(st.builds(Estimate, int64, floats, floats, floats,
                                   st.sampled_from(["compute", "memory"])), max_size=2)
    mappings = draw(st.lists(st.builds(HardwareMapping, names, dtypes,
                                       st.sampled_from(["unfused", "fused"]), estimates, floats),
                             max_size=2))
    return Analysis(draw(texts), partitions, mappings)


@st.composite
def models(draw: st.DrawFn) -> Model:
    model = Model(name=draw(texts), source_format=draw(texts), producer_name=draw(texts),
                  producer_version=draw(names), opset_version=draw(st.integers(0, 5)),
                  metadata=draw(st.dictionaries(names, texts, max_size=3)))
    for name in draw(st.lists(names, unique=True, max_size=3)):
        model.add_tensor(draw(tensors(name)))
    ids = [0]
    model.graphs = [draw(graphs(1, model, ids)) for _ in range(draw(st.integers(1, 2)))]
    model.links = draw(st.lists(st.builds(GraphLink, st.integers(0, 2**32 - 1), names,
                                          st.integers(0, 2**32 - 1), names), max_size=2))
    model.analysis = draw(st.none() | analyses())
    return model
