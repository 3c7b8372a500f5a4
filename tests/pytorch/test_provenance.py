"""Provenance: exact source ops, readable module paths, classes and locations."""

from __future__ import annotations

import pytest
from pytorch_toys import FRONTENDS, example

from irbridge.converters.pytorch import capture


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_module_paths_and_classes(frontend: str) -> None:
    model, args, kwargs = example("convnet")
    result = capture(model, args, kwargs, frontend=frontend)
    convs = [n for _, n in result.model.all_nodes() if n.op == "conv"]
    by_path = {n.provenance.module_path: n.provenance for n in convs}
    assert set(by_path) == {"stem.0", "conv", "down"}
    assert by_path["stem.0"].module_class == "torch.nn.modules.conv.Conv2d"
    for node in result.model.graph.nodes:
        assert node.provenance.source_node


def test_source_ops_are_written_exactly() -> None:
    model, args, _kwargs = example("convnet")
    fx_ops = {n.provenance.source_op for n in capture(model, args, frontend="fx").model.graph.nodes}
    assert "call_module:torch.nn.modules.conv.Conv2d" in fx_ops
    assert "torch.nn.functional.max_pool2d" in fx_ops
    assert "call_method:softmax" in fx_ops
    assert "operator.add" in fx_ops
    export_ops = {n.provenance.source_op for n in
                  capture(model, args, frontend="export").model.graph.nodes}
    assert "aten.conv2d.default" in export_ops


def test_locations_point_at_user_code() -> None:
    model, args, kwargs = example("convnet")
    for frontend in FRONTENDS:
        result = capture(model, args, kwargs, frontend=frontend)
        located = [n.provenance.location for n in result.model.graph.nodes
                   if n.provenance.location is not None]
        assert located, frontend
        assert any(loc.file.endswith("pytorch_toys.py") and loc.line > 0 for loc in located)
