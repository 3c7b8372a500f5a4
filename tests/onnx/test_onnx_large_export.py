"""ONNX export past protobuf's 2 GiB: weights (constant nodes' values included) go to an
external data file on their own, with a note, written atomically with the model."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import export, export_onnx
from irbridge.converters.onnx.export import ExternalDataNote
from irbridge.dtypes import DType
from irbridge.ir import Graph, Model, TensorType


def _model_with_a_constant(elements: int) -> Model:
    """y = x + c, c a constant node (not a model tensor) of `elements` float32 ones."""
    graph = Graph("g")
    model = Model(graphs=[graph])
    builder = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (elements,)))
    c = builder.constant(np.ones(elements, dtype=np.float32), name="c")
    graph.set_outputs([builder.op("add", [x, c], name="y")])
    return model


def test_size_check_counts_constant_nodes() -> None:
    # the 2 GiB decision looked at model tensors only: a big constant node slipped past
    model = _model_with_a_constant(3000)
    assert not model.tensors
    assert export._weight_bytes(model) == 3000 * 4


def test_past_the_limit_weights_go_external_with_a_note(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # the real writer with the limit lowered to 4 KiB (the real one needs a >2 GiB tensor:
    # see the slow test below)
    monkeypatch.setattr(export, "EXTERNAL_DATA_THRESHOLD", 4096)
    model = _model_with_a_constant(3000)  # 12,000 bytes
    path = tmp_path / "m.onnx"
    with pytest.warns(ExternalDataNote, match=r"writing them to m\.onnx\.data"):
        export_onnx(model, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
    assert (tmp_path / "m.onnx.data").stat().st_size >= 12_000
    assert path.stat().st_size < 4096
    x = np.arange(3000, dtype=np.float32)
    (y,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + 1)  # exact: adding 1.0 to small integers


def test_under_the_limit_stays_one_file(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExternalDataNote)
        export_onnx(_model_with_a_constant(3000), path)
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


@pytest.mark.slow
def test_a_tensor_just_over_2_gib(tmp_path: Path) -> None:
    # 2^29 + 1 float32 zeros: 2 GiB + 4 bytes (peak memory about 3x that)
    elements = (1 << 29) + 1
    graph = Graph("g")
    model = Model(graphs=[graph])
    builder = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1,)))
    from irbridge.ir import Tensor

    w = builder.parameter(Tensor.from_array("w", np.zeros(elements, dtype=np.float32)))
    graph.set_outputs([builder.op("add", [x, w], name="y")])
    path = tmp_path / "big.onnx"
    with pytest.warns(ExternalDataNote):
        export_onnx(model, path)
    assert (tmp_path / "big.onnx.data").stat().st_size >= elements * 4
    proto = onnx.load(str(path), load_external_data=False)
    (init,) = proto.graph.initializer
    assert list(init.dims) == [elements]
    assert init.data_location == onnx.TensorProto.EXTERNAL
