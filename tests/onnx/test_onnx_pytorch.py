"""PyTorch benchmark models through irbridge into ONNX: the exported model matches eager
torch in onnxruntime, re-imports with the same compute ops and matmul-like FLOPs, and the
ONNX that torch.onnx.export(dynamo=True) writes imports with the FLOPs of irbridge's own
PyTorch capture. Slow: each case builds and captures a real model."""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest
from onnxtools import compute_histogram, matmul_flops, session

torch = pytest.importorskip("torch")

from irbridge.converters.onnx import from_onnx, to_onnx  # noqa: E402

pytestmark = pytest.mark.slow

BENCHMARK = ["resnet18", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert-base-uncased",
             "gpt2", "yolov8n", "detr-resnet-50"]


def _capture(name: str) -> tuple[object, object]:
    from irbridge.converters.pytorch import capture
    from irbridge.converters.pytorch.zoo import build

    torch.manual_seed(0)
    built = build(name)
    built.module.eval()
    return built, capture(built.module, built.args, built.kwargs)


@pytest.mark.parametrize("name", BENCHMARK)
def test_export_matches_eager_torch_in_onnxruntime(name: str) -> None:
    built, result = _capture(name)
    model = result.model  # type: ignore[attr-defined]
    assert result.opaque_count == 0  # type: ignore[attr-defined]
    proto = to_onnx(model)
    feeds = {k: v.detach().numpy() for k, v in result.inputs.items()}  # type: ignore[attr-defined]
    got = session(proto).run(None, feeds)
    with torch.no_grad():
        eager = built.module(*built.args, **built.kwargs)  # type: ignore[attr-defined]
    leaves = [t for t in torch.utils._pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
    for leaf, where in zip(leaves, result.outputs, strict=True):  # type: ignore[attr-defined]
        assert where is not None
        expected = leaf.detach().numpy()
        actual = got[where[1]]
        scale = max(float(np.abs(expected).max()), 1.0)
        np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-4 * scale)
    # the lean file folds weights (a linear may come back as matmul + add) and constant
    # subgraphs (detr's query embeddings: a matmul of two constants is computed once at
    # export), so its matmul-like FLOPs are the model's less folded work, within 1%; the
    # exact lowering (optimize=False) round-trips op for op
    lean, _ = from_onnx(proto)
    assert 0.99 * matmul_flops(model) <= matmul_flops(lean) <= matmul_flops(model)
    back, coverage = from_onnx(to_onnx(model, optimize=False))
    assert coverage.fully_neutral
    assert compute_histogram(back) == compute_histogram(model)
    assert matmul_flops(back) == matmul_flops(model)


@pytest.mark.parametrize("name", ["resnet18", "bert-base-uncased", "gpt2"])
def test_torch_onnx_export_imports_with_the_same_flops(name: str) -> None:
    built, result = _capture(name)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(built.module, built.args,  # type: ignore[attr-defined]
                                    kwargs=built.kwargs, dynamo=True)  # type: ignore[attr-defined]
    imported, _ = from_onnx(program.model_proto)
    ours = matmul_flops(result.model)  # type: ignore[attr-defined]
    theirs = matmul_flops(imported)
    assert abs(theirs - ours) <= 0.005 * ours
    # torch's metadata gives module paths
    paths = {n.provenance.module_path for _, n in imported.all_nodes()}
    assert len(paths - {""}) > 3


def test_symbolic_batch_becomes_a_dim_param() -> None:
    from irbridge.converters.pytorch import capture
    from irbridge.converters.pytorch.zoo import build

    built = build("resnet18", batch=2)
    built.module.eval()
    result = capture(built.module, built.args, frontend="export", dynamic={"batch": (2, 16)})
    proto = to_onnx(result.model)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch"
    x = np.concatenate([built.args[0].numpy()] * 3)
    got = session(proto).run(None, {proto.graph.input[0].name: x})[0]
    with torch.no_grad():
        expected = built.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


def test_a_dynamic_sequence_export_analyzes() -> None:
    """torch.onnx's dynamo exporter with a symbolic sequence length writes reshapes whose
    target shape is computed from the tensor being reshaped (shape_of -> slice -> concat
    with a small int64 initializer): the analysis must partition such a graph without a
    cycle (it raised "partition graph has a cycle")."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from irbridge.analysis import analyze, resolve_targets

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4,
                                                 vocab_size=1000)).eval()

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=ids).logits

    torch.manual_seed(0)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(  # type: ignore[attr-defined]
            Logits(), (torch.randint(0, 1000, (1, 16)),), dynamo=True,
            dynamic_shapes=({1: torch.export.Dim("seq", max=512)},))
    imported, coverage = from_onnx(program.model_proto)
    assert coverage.fully_neutral
    result = analyze(imported, resolve_targets("h100-sxm"), batches=[1])
    mapping = result.runs[0].mappings[0]
    assert mapping.concurrency is not None and mapping.concurrency.kernels > 0
