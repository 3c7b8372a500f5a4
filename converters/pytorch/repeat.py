"""Repeated blocks: a shape-only capture of a deep stack of identical layers, traced short.

Tracing costs torch a few milliseconds per ATen op, so an 80-layer LLM takes tens of
seconds to trace although its layers are one layer 80 times. With ``repeat_blocks=True``
(CLI ``--repeat-blocks``) a shape-only capture (``weights=False`` or a model on the meta
device) of a model whose largest ``nn.ModuleList`` holds at least :data:`MIN_BLOCKS` layers
of identical structure is traced twice with that list cut short, to 2 and to 3 layers. The
IR of the 3-layer trace is accepted only if

* its layer 2 repeats its layer 1 node for node: the same ops, attributes and result types,
  reading the previous layer's results at the same places, the same values from outside
  the layers, and their own parameters under the same relative names;
* everything outside the layers is the same in both traces, and after the layers reads
  only the last layer's results, at the same places;

and layers 3 .. N-1 are then written as copies of layer 2 (shape-only parameters named
``<list>.<i>.<name>``, provenance naming the layer). Anything else (layers that differ in
structure, parameters, buffers or plain attributes other than their own index, per-layer
graph inputs such as KV caches, control flow inside a layer, a trace that fails) falls back
to tracing the whole model, and ``capture.repeated_blocks`` in the model's metadata says
which happened. The one thing the check cannot see is code in the *parent's* loop that
treats a later layer differently by its index (``if i == 40:``): that is why the option is
off by default.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from irbridge.ir import Graph, Model, Node, NodeAnnotations, Tensor, Value

MIN_BLOCKS = 4
_PLAIN = (bool, int, float, str, type(None))


@dataclasses.dataclass
class Blocks:
    """The module list to repeat: its path in the model and its length."""

    path: str
    modules: torch.nn.ModuleList

    @property
    def count(self) -> int:
        return len(self.modules)


def find_blocks(model: torch.nn.Module) -> Blocks | None:
    """The model's largest ModuleList (by parameter count) of >= MIN_BLOCKS layers that are
    alike: one class, the same submodules, hooks, parameters and buffers (names, shapes,
    dtypes), and the same plain attributes, except one that holds each layer's own index."""
    best: tuple[int, Blocks] | None = None
    for path, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) < MIN_BLOCKS:
            continue
        shapes, plains = zip(*(_signature(layer) for layer in module), strict=True)
        if any(s != shapes[0] for s in shapes[1:]) \
                or any(p.keys() != plains[0].keys() for p in plains[1:]) \
                or not all(_alike([p[key] for p in plains]) for key in plains[0]):
            continue
        size = sum(p.numel() for p in module.parameters())
        if size and (best is None or size > best[0]):
            best = (size, Blocks(path, module))
    return best[1] if best else None


def _alike(values: list[Any]) -> bool:
    """One attribute across the layers: the same everywhere, or each layer's index."""
    return all(v == values[0] and type(v) is type(values[0]) for v in values) \
        or all(type(v) is int and v == i for i, v in enumerate(values))


def _signature(layer: torch.nn.Module) -> tuple[tuple[Any, ...], dict[tuple[str, str], Any]]:
    """(structure, plain attributes by (submodule, name))."""
    parts: list[Any] = []
    plain: dict[tuple[str, str], Any] = {}
    for name, sub in layer.named_modules():
        hooks = [*sub._forward_hooks.values(), *sub._forward_pre_hooks.values()]
        parts.append((name, type(sub).__qualname__,
                      tuple(getattr(h, "__qualname__", type(h).__qualname__) for h in hooks)))
        plain.update(((name, k), v) for k, v in vars(sub).items()
                     if not k.startswith("_") and isinstance(v, _PLAIN))
    for name, t in [*layer.named_parameters(), *layer.named_buffers()]:
        parts.append((name, tuple(t.shape), t.dtype))
    return tuple(parts), plain


@contextlib.contextmanager
def truncated(blocks: Blocks, count: int) -> Iterator[None]:
    """The module list holding only its first `count` layers (restored on exit)."""
    saved = blocks.modules._modules
    blocks.modules._modules = dict(list(saved.items())[:count])
    try:
        yield
    finally:
        blocks.modules._modules = saved


# -- the check and the copies ---------------------------------------------------------

Ref = tuple[Any, ...]


class _Layout:
    """One trace's main graph split into layers by the nodes' module paths."""

    def __init__(self, model: Model, blocks: Blocks, count: int) -> None:
        self.model = model
        self.path = blocks.path
        self.graph = model.graph
        self.layers: list[list[Node]] = [[] for _ in range(count)]
        self.layer_of: dict[int, int] = {}   # id(node) -> layer
        self.position: dict[int, tuple[int, int, int]] = {}  # id(value) -> (layer, node, out)
        self.rest: dict[int, tuple[int, int]] = {}  # id(value) -> (node, out), outside layers
        for node in self.graph.nodes:
            layer = self._layer(node.provenance.module_path)
            if any(True for _ in node.subgraphs()):  # bodies may read outer values unseen
                raise NotRepeated(f"node #{node.id} ({node.op}) has a subgraph")
            if layer is None:
                self.rest.update((id(out), (len(self.rest), k))
                                 for k, out in enumerate(node.outputs))
                continue
            if layer >= count:
                raise NotRepeated(f"node #{node.id} ({node.op}) is in layer {layer} of {count}")
            self.layer_of[id(node)] = layer
            for k, out in enumerate(node.outputs):
                self.position[id(out)] = (layer, len(self.layers[layer]), k)
            self.layers[layer].append(node)
        if any(not nodes for nodes in self.layers):
            raise NotRepeated("a layer left no node")

    def _layer(self, module_path: str) -> int | None:
        if not module_path.startswith(self.path + "."):
            return None
        head = module_path[len(self.path) + 1:].split(".", 1)[0]
        return int(head) if head.isdigit() else None

    def ref(self, value: Value | None, layer: int | None) -> Ref:
        """How a node of `layer` (None: outside the layers) reads `value`, in terms that
        are equal for equal layers."""
        if value is None:
            return ("none",)
        at = self.position.get(id(value))
        if at is not None:
            if at[0] == layer:
                return ("own", at[1], at[2])
            if layer is not None and at[0] == layer - 1:
                return ("previous", at[1], at[2])
            if layer is None and at[0] == len(self.layers) - 1:
                return ("last", at[1], at[2])
            raise NotRepeated(f"value {value.name!r} is read outside its layer and the next")
        if id(value) in self.rest:  # by place: trace-made names count up through the layers
            return ("rest", *self.rest[id(value)])
        prefix = f"{self.path}.{layer}."
        if layer is not None and value.tensor is not None and value.name.startswith(prefix):
            return ("param", value.name[len(prefix):], value.tensor.dtype, value.tensor.shape)
        return ("outside", value.name, str(value.type))

    def node_key(self, node: Node, layer: int | None) -> tuple[Any, ...]:
        return (node.op, node.domain, repr(sorted(node.attrs.items())),
                tuple(str(v.type) for v in node.outputs),
                tuple(self.ref(v, layer) for v in node.inputs))

    def layer_key(self, layer: int) -> list[tuple[Any, ...]]:
        return [self.node_key(n, layer) for n in self.layers[layer]]

    def rest_key(self) -> list[tuple[Any, ...]]:
        keys = [self.node_key(n, None) for n in self.graph.nodes if id(n) not in self.layer_of]
        keys.append(("outputs", tuple(self.ref(v, None) for v in self.graph.outputs)))
        keys.append(("inputs", tuple((v.name, str(v.type)) for v in self.graph.inputs)))
        return keys


class NotRepeated(Exception):
    """The traces do not show one layer repeated: trace the whole model instead."""


def check(short: Model, long: Model, blocks: Blocks) -> _Layout:
    """The 3-layer trace's layout when `short` (2 layers) and `long` (3) show one layer
    repeated (see the module docstring); raises NotRepeated otherwise."""
    if len(short.graphs) != 1 or len(long.graphs) != 1 or short.links or long.links:
        raise NotRepeated("the traces have several graphs")
    two, three = _Layout(short, blocks, 2), _Layout(long, blocks, 3)
    if three.layer_key(2) != three.layer_key(1) or three.layer_key(1) != two.layer_key(1) \
            or three.layer_key(0) != two.layer_key(0):
        raise NotRepeated("layer 2 does not repeat layer 1")
    if three.rest_key() != two.rest_key():
        raise NotRepeated("the nodes outside the layers differ with the layer count")
    return three


def expand(layout: _Layout, count: int) -> None:
    """Write layers 3 .. count-1 into the 3-layer trace as copies of its layer 2."""
    graph, model, path = layout.graph, layout.model, layout.path
    template = layout.layers[2]
    last = {id(n) for n in template}
    # the uses of layer 2's results after the layers move to the last copy's
    outside_uses = [(node, index, value) for node in graph.nodes if id(node) not in layout.layer_of
                    for index, value in enumerate(node.inputs)
                    if value is not None and layout.position.get(id(value), (-1,))[0] == 2]
    output_slots = [(k, v) for k, v in enumerate(graph.outputs)
                    if layout.position.get(id(v), (-1,))[0] == 2]
    end = max(i for i, n in enumerate(graph.nodes) if id(n) in last) + 1
    head, tail = graph.nodes[:end], graph.nodes[end:]
    previous = template
    copies: list[Node] = []
    prefix2 = f"{path}.2"
    for layer in range(3, count):
        prefix = f"{path}.{layer}"
        made: list[Node] = []
        for node in template:
            inputs = [_input(layout, v, layer, previous, made, model, graph) for v in node.inputs]
            provenance = dataclasses.replace(
                node.provenance, module_path=prefix + node.provenance.module_path[len(prefix2):])
            copy = graph.add_node(
                node.op, inputs, [graph.unique_name(v.name) for v in node.outputs], node.attrs,
                output_types=[v.type for v in node.outputs], domain=node.domain,
                name=node.name, provenance=provenance,
                annotations=NodeAnnotations(values=dict(node.annotations.values)))
            made.append(copy)
        copies.extend(made)
        previous = made
    graph.nodes = head + copies + tail  # add_node appended the copies: same length
    by_position = {id(v): previous[layout.position[id(v)][1]].outputs[layout.position[id(v)][2]]
                   for _, _, v in outside_uses}
    for node, index, value in outside_uses:
        new = by_position[id(value)]
        value.uses.remove((node, index))
        node.inputs[index] = new
        new.uses.append((node, index))
    for k, value in output_slots:
        at = layout.position[id(value)]
        graph.outputs[k] = previous[at[1]].outputs[at[2]]
    graph.topological_sort()  # a reader of layer 2 placed among its nodes now reads the last


def _input(layout: _Layout, value: Value | None, layer: int, previous: Sequence[Node],
           made: Sequence[Node], model: Model, graph: Graph) -> Value | None:
    ref = layout.ref(value, 2)
    if ref[0] == "none":
        return None
    if ref[0] == "own":
        return made[ref[1]].outputs[ref[2]]
    if ref[0] == "previous":
        return previous[ref[1]].outputs[ref[2]]
    if ref[0] == "param":
        name = f"{layout.path}.{layer}.{ref[1]}"
        tensor = model.tensors.get(name) or model.add_tensor(Tensor(name, ref[2], ref[3]))
        return graph.add_parameter(tensor)
    assert value is not None
    return value


def capture_repeated(model: torch.nn.Module, blocks: Blocks,
                     trace: Callable[[], Model]) -> tuple[Model, str]:
    """(model, note): `trace()` run with the list cut to 2 and to 3 layers and, when the
    traces check out, the 3-layer one expanded to the full count; raises NotRepeated
    with the reason otherwise."""
    with truncated(blocks, 2):
        short = trace()
    with truncated(blocks, 3):
        long = trace()
    layout = check(short, long, blocks)
    expand(layout, blocks.count)
    return long, (f"{blocks.path}: {blocks.count} layers, traced with 2 and 3, layers "
                  f"3-{blocks.count - 1} copied from layer 2")


__all__ = ["MIN_BLOCKS", "Blocks", "NotRepeated", "capture_repeated", "check", "expand", "find_blocks",
           "truncated"]
