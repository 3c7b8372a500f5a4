"""Symbolic batch dims, meta-device models, opaque fallbacks and fused attention."""

from __future__ import annotations

import numpy as np
import torch
from pytorch_toys import check, example
from torch import nn

from irbridge.converters.pytorch import capture
from irbridge.executor import run_graphs
from irbridge.ir import SymDim


def test_dynamic_batch_becomes_a_named_symbol() -> None:
    model, args, kwargs = example("attention")
    result = capture(model, args, kwargs, frontend="export", dynamic={"batch": (1, 16)})
    ir = result.model
    (x,) = ir.graph.inputs
    batch = x.type.shape[0] if x.type and x.type.shape else None
    assert batch == SymDim("batch", 1, 16)
    out = ir.graph.outputs[0]
    assert out.type is not None and out.type.shape is not None
    assert out.type.shape[0] == batch
    check(result, model)
    # the same IR runs at another batch size
    bigger = torch.randn(5, *args[0].shape[1:])
    got = run_graphs(ir, {"x": bigger.numpy()})[0][0]
    with torch.no_grad():
        want = model(bigger).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_dynamic_batch_through_dynamo() -> None:
    model, args, kwargs = example("mlp")
    args = (torch.randn(4, 12),)
    result = capture(model, args, kwargs, frontend="dynamo", dynamic={"batch": (2, 64)})
    x = result.model.graphs[0].inputs[0]
    assert x.type is not None and x.type.shape is not None
    assert x.type.shape[0] == SymDim("batch", 2, 64)
    check(result, model)


def test_meta_device_model_captures_shape_only() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                         use_cache=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (1, 16))
    result = capture(model, (ids,))
    ir = result.model
    assert ir.is_shape_only and all(t.data is None for t in ir.tensors.values())
    assert ir.parameter_count() >= sum(p.numel() for p in model.parameters()) - 1000 * 64
    assert result.opaque_count == 0, result.stats.notes
    ops = {n.op for _, n in ir.all_nodes()}
    assert {"attention", "rsqrt", "embedding", "linear"} <= ops
    out = ir.graph.outputs[0].type
    assert out is not None and out.shape == (1, 16, 1000)


class FusedMHA(nn.Module):
    """Calls the fused op nn.MultiheadAttention uses under no_grad."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.mha
        out, _ = torch.ops.aten._native_multi_head_attention.default(
            x, x, x, 16, 4, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight,
            m.out_proj.bias, None, False)
        return out


def test_native_multi_head_attention_is_expanded() -> None:
    torch.manual_seed(0)
    model = FusedMHA().eval()
    result = capture(model, (torch.randn(2, 5, 16),), frontend="fx")
    ops = [n.op for _, n in result.model.all_nodes()]
    assert "attention" in ops and ops.count("linear") == 4
    check(result, model)


class Unlowerable(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # no lowering (general eigenvalues, complex): an opaque aten node
        return torch.linalg.eigvals(x) + 1


def test_unmapped_ops_become_typed_opaque_nodes() -> None:
    x = torch.randn(3, 3) + 3 * torch.eye(3)
    result = capture(Unlowerable(), (x,), frontend="export")
    opaque = [n for _, n in result.model.all_nodes() if n.is_opaque]
    assert opaque and all(n.domain == "aten" for n in opaque)
    assert all(o.type is not None and o.type.shape == (3,) for n in opaque
               for o in n.outputs[:1])
    assert result.model.metadata["lowering.opaque"]


def test_export_of_keyword_model_with_strict() -> None:
    model, args, kwargs = example("convnet")
    result = capture(model, args, kwargs, frontend="export", strict=True)
    assert result.model.metadata["export.strict"] == "True"
    check(result, model)


class Positions(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[0], dtype=torch.float32)
        return x.reshape(x.shape[0], -1) + pos[:, None]


def test_sizes_of_a_symbolic_batch_are_computed_at_run_time() -> None:
    model = Positions()
    result = capture(model, (torch.randn(4, 3, 2),), frontend="export",
                     dynamic={"batch": (2, 16)})
    ops = [n.op for n in result.model.graph.nodes]
    assert "shape_of" in ops and "range" in ops
    check(result, model)
    got = run_graphs(result.model, {"x": np.zeros((6, 3, 2), dtype=np.float32)})[0][0]
    np.testing.assert_array_equal(got[:, 0], np.arange(6, dtype=np.float32))
