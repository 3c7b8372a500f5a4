"""The cyclic collector around irbridge's bulk calls (irbridge/_gc.py): paused while a
reader builds a model, switched back on after with what was built in the oldest
generation, and the built model still freed by the collector once dropped."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from irbridge.converters.onnx import import_onnx


def _chain(path: Path, blocks: int = 50) -> Path:
    nodes, prev = [], "x"
    for i in range(blocks):
        nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_a_built_model_leaves_the_young_generation_and_is_still_collected(tmp_path: Path) -> None:
    path = _chain(tmp_path / "chain.onnx")
    assert gc.isenabled()
    thresholds = gc.get_threshold()
    gc.set_threshold(10**9)   # no automatic collection: each object stays where it was put
    try:
        gc.collect()
        model = import_onnx(path)
        assert gc.isenabled()
        # Nothing the import built waits in the youngest generation for a collection that
        # would traverse it all (the few objects of the return path at most).
        assert gc.get_count()[0] < 50, gc.get_count()
        young = {id(o) for o in gc.get_objects(generation=0)}
        old = {id(o) for o in gc.get_objects(generation=2)}
        graph = model.graphs[0]
        built = [model, graph, *graph.nodes, *graph.values.values()]
        assert all(id(o) in old and id(o) not in young for o in built)
    finally:
        gc.set_threshold(*thresholds)
    # Nodes and values refer to each other (cycles): only the collector frees them.
    graph_ref = weakref.ref(graph)
    del model, graph, built, young, old
    gc.collect()
    assert graph_ref() is None


def test_a_process_that_froze_its_own_objects_keeps_them_frozen(tmp_path: Path) -> None:
    path = _chain(tmp_path / "chain.onnx")
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 10_000   # a test process holds far more (1.3 million in CI)
        model = import_onnx(path)
        after = gc.get_freeze_count()
        # nothing of the import was frozen (it makes thousands of objects), and the caller's
        # frozen objects were not unfrozen (that empties the count); a few of them may die
        # meanwhile (a cache of an earlier test dropping an entry: 2 of 1.3 million in one
        # CI run), which lowers the count by that few
        assert frozen - 1000 <= after <= frozen, (frozen, after)
        assert gc.isenabled()
        del model
    finally:
        gc.unfreeze()


def test_a_caller_that_paused_the_collector_finds_it_paused(tmp_path: Path) -> None:
    path = _chain(tmp_path / "chain.onnx")
    gc.disable()
    try:
        before = gc.get_count()[0]
        model = import_onnx(path)
        assert not gc.isenabled()
        assert gc.get_count()[0] > before   # its objects stay where the caller left them
        del model
    finally:
        gc.enable()
