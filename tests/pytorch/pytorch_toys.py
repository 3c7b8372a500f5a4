"""Toy models and checks shared by the PyTorch front-end tests (imported by name: this
folder has no __init__.py, so pytest puts it on sys.path)."""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from irbridge.converters.pytorch import CaptureResult, verify

FRONTENDS = ["fx", "export", "dynamo"]
_MANGLED = re.compile(r"L\[|L__self|l__self|getattr_|\[|'")


class ConvNet(nn.Module):
    """Conv, batch norm, pooling, residual add, global pool, linear, softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True))
        self.conv = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.bn = nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = F.relu(self.bn(self.conv(y)) + y)
        y = F.max_pool2d(y, 2)
        y = F.hardswish(self.down(y))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y).softmax(dim=-1)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Dropout(0.1),
                                    nn.Linear(32, 32), nn.SiLU(), nn.Linear(32, 4))
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layers(x)) * 2.0 - 1.0


class AttentionBlock(nn.Module):
    """Pre-norm transformer block: nn.MultiheadAttention, then an SDPA-based MLP mixer."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln2(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(b, s, d))


class KeywordModel(nn.Module):
    """Takes keyword inputs, one of them optional, like Hugging Face models."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                scale: float = 1.0) -> dict[str, torch.Tensor]:
        h = self.embed(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = h.sum(dim=1) / attention_mask.sum(dim=1, keepdim=True).clamp(min=1)
        return {"logits": self.out(pooled) * scale, "hidden": h}


def example(name: str) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    if name == "convnet":
        model: nn.Module = ConvNet()
        for m in model.modules():  # non-trivial batch-norm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        return model.eval(), (torch.randn(2, 3, 16, 16),), {}
    if name == "mlp":
        return MLP().eval(), (torch.randn(3, 12),), {}
    if name == "attention":
        return AttentionBlock().eval(), (torch.randn(2, 6, 16),), {}
    if name == "keywords":
        ids = torch.randint(0, 50, (2, 7))
        mask = torch.ones(2, 7, dtype=torch.long)
        mask[1, 5:] = 0
        return KeywordModel().eval(), (ids,), {"attention_mask": mask, "scale": 0.5}
    raise KeyError(name)


def check(result: CaptureResult, model: nn.Module, *, numeric: bool = True) -> None:
    """Zero opaque nodes, types on every value, consistent types, readable module paths,
    unique node ids, and (optionally) outputs equal to eager within tolerance."""
    ir = result.model
    assert result.opaque_count == 0, result.stats.notes
    assert not result.stats.type_mismatches, result.stats.type_mismatches
    ids = [n.id for _, n in ir.all_nodes()]
    assert len(ids) == len(set(ids))
    for graph, node in ir.all_nodes():
        for value in node.outputs:
            assert value.type is not None and value.type.shape is not None, (graph.name, node)
        prov = node.provenance
        assert prov.source_format == ir.source_format
        assert prov.source_op and prov.source_node
        assert not _MANGLED.search(prov.module_path), prov.module_path
    if numeric:
        report = verify(result, model)
        assert report.passed, report.summary() + str(report.outputs)
