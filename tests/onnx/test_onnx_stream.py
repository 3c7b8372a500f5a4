"""export_onnx streams the weights into the file (converters/onnx/_stream.py): the file
reads back as exactly the ModelProto to_onnx builds in memory, one file or with external
data, and runs in onnxruntime with the IR executor's numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxtools import assert_close, ort_run

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx import export_onnx, to_onnx
from irbridge.converters.onnx._stream import STREAM_MIN_BYTES
from irbridge.dtypes import DType
from irbridge.executor import run_model
from irbridge.ir import Graph, Model, Tensor, TensorType


def _mlp() -> tuple[Model, dict[str, np.ndarray]]:
    """Linear layers on a rank-3 input (weights of 256 KiB and more: streamed; their
    transposes are folds, themselves streamed), a float16 weight cast back, a bias."""
    rng = np.random.default_rng(0)
    graph = Graph("mlp")
    model = Model(name="mlp", graphs=[graph])
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (2, 4, 256)))

    def param(name: str, shape: tuple[int, ...], dtype: type = np.float32) -> object:
        return b.parameter(Tensor.from_array(name, (rng.standard_normal(shape) / 16)
                                             .astype(dtype)))

    h = b.op("linear", [x, param("fc1.w", (512, 256)), param("fc1.b", (512,))])  # type: ignore[list-item]
    h = b.op("relu", [h])
    w16 = b.op("cast", [param("fc2.w16", (256, 512), np.float16)], {"dtype": DType.FLOAT32})  # type: ignore[list-item]
    graph.set_outputs([b.op("linear", [h, w16])])
    feeds = {"x": rng.standard_normal((2, 4, 256)).astype(np.float32)}
    assert min(t.nbytes for t in model.tensors.values() if t.nbytes > 4096) >= STREAM_MIN_BYTES
    return model, feeds


@pytest.mark.parametrize("external", [False, True])
def test_streamed_file_equals_the_in_memory_model(tmp_path: Path, external: bool) -> None:
    model, feeds = _mlp()
    path = export_onnx(model, tmp_path / "mlp.onnx", external_data=external)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == (["mlp.onnx", "mlp.onnx.data"] if external else ["mlp.onnx"])
    expected = to_onnx(model)
    if external:
        light = onnx.load(str(path), load_external_data=False)
        assert all(t.data_location == onnx.TensorProto.EXTERNAL
                   for t in light.graph.initializer if len(t.raw_data) == 0)
        assert path.stat().st_size < 64 * 1024  # the weights are in the data file
    loaded = onnx.load(str(path))
    for t in loaded.graph.initializer:  # external data read back into raw_data
        del t.external_data[:]
        t.ClearField("data_location")
    assert loaded == expected
    onnx.checker.check_model(str(path), full_check=True)
    assert_close(ort_run(loaded, feeds), run_model(model, feeds), rtol=1e-5, atol=1e-5)


def test_shape_only_models_still_refused(tmp_path: Path) -> None:
    model, _ = _mlp()
    next(iter(model.tensors.values())).data = None
    with pytest.raises(Exception, match="no data"):
        export_onnx(model, tmp_path / "x.onnx")
    assert list(tmp_path.iterdir()) == []
