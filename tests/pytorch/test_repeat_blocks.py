"""repeat_blocks: a deep stack of alike layers traced short and copied.

The reference is always the whole model traced by the same front-end: the repeated
capture must give the same graph node for node (ops, attributes, types, wiring, parameter
names and shapes, provenance), and anything it cannot prove alike must fall back to that
full trace.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from irbridge.analysis import analyze, resolve_targets
from irbridge.cli.main import app
from irbridge.converters.pytorch import capture
from irbridge.converters.pytorch.repeat import find_blocks
from irbridge.ir import Model
from irbridge.verify import verify

transformers = pytest.importorskip("transformers")


def _hf(config_name: str, model_name: str, layers: int, **extra: Any) -> torch.nn.Module:
    config = getattr(transformers, config_name)(
        hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, use_cache=False, **extra)
    with torch.device("meta"):
        return getattr(transformers, model_name)(config).eval()


def _canonical(model: Model) -> list[Any]:
    """Every node by place: op, attributes, result types, where each input comes from
    (a node by position, else a parameter or graph input by name and type), provenance."""
    graph = model.graph
    where = {id(v): (i, k) for i, n in enumerate(graph.nodes) for k, v in enumerate(n.outputs)}
    rows: list[Any] = []
    for node in graph.nodes:
        inputs = tuple(None if v is None else where.get(id(v), (v.name, str(v.type)))
                       for v in node.inputs)
        rows.append((node.op, repr(sorted(node.attrs.items())),
                     tuple(str(v.type) for v in node.outputs), inputs,
                     node.provenance.module_path, node.provenance.source_op))
    rows.append(tuple(where.get(id(v)) for v in graph.outputs))
    return rows


def _tensors(model: Model) -> dict[str, tuple[Any, ...]]:
    return {n: (t.dtype, t.shape, t.data is None) for n, t in model.tensors.items()}


IDS = torch.zeros(2, 12, dtype=torch.long, device="meta")


@pytest.mark.parametrize("config,cls,extra", [
    ("LlamaConfig", "LlamaForCausalLM", {}),
    ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 2}),
])
def test_repeated_capture_equals_the_full_trace(config: str, cls: str,
                                                extra: dict[str, Any]) -> None:
    module = _hf(config, cls, 6, **extra)
    full = capture(module, (IDS,), frontend="export", weights=False).model
    fast = capture(module, (IDS,), frontend="export", weights=False, repeat_blocks=True).model
    assert fast.metadata["capture.repeated_blocks"] == (
        "model.layers: 6 layers, traced with 2 and 3, layers 3-5 copied from layer 2")
    assert "capture.repeated_blocks" not in full.metadata
    assert _canonical(fast) == _canonical(full)
    assert _tensors(fast) == _tensors(full)
    # opaque nodes are counted over every layer (Mixtral's histc: one per layer)
    assert fast.metadata.get("lowering.opaque") == full.metadata.get("lowering.opaque")
    problems = verify(fast)
    assert [p for p in problems if p.severity == "error"] == []
    assert len(problems) == len(verify(full))  # Mixtral: the same opaque-node warnings
    target = resolve_targets("h100-sxm")
    a, b = analyze(full, target).runs[0], analyze(fast, target).runs[0]
    assert a.costs.total == b.costs.total
    assert a.costs.weight_bytes == b.costs.weight_bytes
    assert len(a.partitioning.partitions) == len(b.partitioning.partitions)
    # the module is left as found: all six layers, in order
    assert [name for name, _ in module.model.layers.named_children()] == [str(i) for i in range(6)]


def test_layers_that_differ_in_an_attribute_are_traced_whole() -> None:
    # Qwen2 with a sliding window from layer 3 on: the layers' `sliding_window` differs,
    # and the forward reads it, so copying layer 2 would be wrong
    module = _hf("Qwen2Config", "Qwen2ForCausalLM", 5, use_sliding_window=True,
                 sliding_window=4, max_window_layers=3)
    assert find_blocks(module) is None
    fast = capture(module, (IDS,), frontend="export", weights=False, repeat_blocks=True).model
    assert fast.metadata["capture.repeated_blocks"].startswith("no: no ModuleList")
    full = capture(module, (IDS,), frontend="export", weights=False).model
    assert _canonical(fast) == _canonical(full)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) + x


class _SpecialSecond(torch.nn.Module):
    """Alike layers, but the parent's loop treats the second one differently."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_Block() for _ in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == 1:
                x = x * 2
        return x


def test_a_parent_loop_that_treats_a_layer_apart_is_traced_whole() -> None:
    module = _SpecialSecond()
    assert find_blocks(module) is not None
    x = torch.randn(3, 8)
    fast = capture(module, (x,), frontend="export", weights=False, repeat_blocks=True).model
    assert fast.metadata["capture.repeated_blocks"].startswith("no: ")
    full = capture(module, (x,), frontend="export", weights=False).model
    assert _canonical(fast) == _canonical(full)


def test_with_weights_the_option_changes_nothing() -> None:
    module = _SpecialSecond()
    x = torch.randn(3, 8)
    result = capture(module, (x,), frontend="export", repeat_blocks=True).model
    assert "capture.repeated_blocks" not in result.metadata
    assert all(t.data is not None for t in result.tensors.values())


def test_cli_repeat_blocks() -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["convert", "llama-tiny", "--repeat-blocks"])
    assert bad.exit_code == 2
    assert "--repeat-blocks makes a shape-only IR" in bad.output
    assert "Traceback" not in bad.output
    # llama-tiny has 2 layers: nothing to repeat, said in one line, the whole model traced
    ok = runner.invoke(app, ["convert", "llama-tiny", "--meta", "--repeat-blocks"])
    assert ok.exit_code == 0, ok.output
    assert "repeated blocks: no: no ModuleList of 4 or more alike layers" in ok.output
