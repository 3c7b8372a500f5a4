"""Real models from the zoo through every front-end that captures them (slow: minutes).

    uv run pytest tests/pytorch/test_real_models.py -m slow -n 0
"""

from __future__ import annotations

import pytest
import torch
from pytorch_toys import check

from irbridge.converters.pytorch import capture, zoo
from irbridge.ir import SymDim

pytestmark = pytest.mark.slow

VISION = ["resnet18", "mobilenet_v2", "efficientnet_b0", "vit_b_16"]
OTHERS = ["bert-base-uncased", "gpt2", "yolov8n", "facebook/detr-resnet-50"]
CASES = ([(m, f) for m in VISION for f in ("fx", "export", "dynamo")]
         + [(m, f) for m in OTHERS for f in ("export", "dynamo")]
         # fx through its leaf fallback: C2f and Detect are traced to ATen on their own
         + [("yolov8n", "fx")])


@pytest.mark.parametrize(("name", "frontend"), CASES)
def test_real_model(name: str, frontend: str) -> None:
    built = zoo.build(name)
    result = capture(built.module, built.args, built.kwargs, frontend=frontend, warmup=True)
    assert result.method == frontend
    check(result, built.module)


@pytest.mark.parametrize("name", ["bert-base-uncased", "gpt2", "yolov8n"])
def test_auto_on_models_fx_cannot_trace(name: str) -> None:
    built = zoo.build(name)
    result = capture(built.module, built.args, built.kwargs)
    assert result.attempts[0][0] == "fx" and result.attempts[0][1] != "ok"
    assert result.method == "export"
    check(result, built.module)


def test_decomposed_export_of_bert() -> None:
    built = zoo.build("bert-base-uncased")
    result = capture(built.module, built.args, built.kwargs, frontend="export",
                     decompose=True)
    check(result, built.module)


def test_bert_with_symbolic_batch() -> None:
    built = zoo.build("bert-base-uncased", batch=2)
    result = capture(built.module, built.args, built.kwargs, frontend="export",
                     dynamic={"batch": (1, 32)})
    for value in result.model.graph.inputs:
        assert value.type is not None and value.type.shape is not None
        assert value.type.shape[0] == SymDim("batch", 1, 32)
    check(result, built.module)


def test_llama_3_70b_on_meta_is_shape_only() -> None:
    built = zoo.build("llama-3-70b", device="meta")
    result = capture(built.module, built.args, built.kwargs)
    ir = result.model
    assert ir.is_shape_only
    assert result.opaque_count == 0, result.stats.notes
    assert ir.parameter_count() > 70_000_000_000
    assert not any(p.device.type != "meta" for p in built.module.parameters())
    out = ir.graph.outputs[0].type
    assert out is not None and out.dtype is not None
    assert torch.device("meta").type == "meta"
