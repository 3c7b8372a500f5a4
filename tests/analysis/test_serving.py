"""Serving analysis of phase graphs (irbridge/analysis/serving.py, `analyze --phase/--tp`).

Expected figures are computed by hand from the transformers model itself (its parameters,
by name) and the config, never from irbridge's own costs: weight bytes per device under
Megatron splits (every linear and the embedding divided by T, norms replicated), the KV
cache (ceil(H_kv / T) heads per device), the closed-form decode time and the number of TP
all-reduces (one after each attention and each MLP, one for the vocabulary-parallel
embedding)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from typer.testing import CliRunner

from irbridge.analysis import driver
from irbridge.analysis.hardware import load_target_file, resolve_targets
from irbridge.analysis.serving import PhaseInfo, serving
from irbridge.cli.main import app
from irbridge.converters.pytorch import capture
from irbridge.converters.pytorch.phases import example_inputs, phase_info, phase_module
from irbridge.errors import IrbridgeError
from irbridge.ir import Model

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2, 64, 4, 2, 176, 1000
BATCH, KV_LEN = 2, 64
BF16 = 2


def _llama() -> Any:
    config = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN,
                                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                      num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                                      max_position_embeddings=512)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def decode() -> tuple[Model, Any]:
    hf = _llama()
    module = phase_module(hf, "decode", kv_len=KV_LEN)
    args = example_inputs(module, batch=BATCH, seq_len=1, device="meta")
    model = capture(module, args, weights=False).model
    model.metadata.update(phase_info(module, args).metadata())
    return model, hf


def _by_hand(hf: Any, tp: int) -> tuple[int, int]:
    """(weight bytes per device, bytes of weights a decode step reads in full) in bf16:
    parameters and buffers, the buffers (rotary frequencies) replicated."""
    per_device = full = 0
    tensors = [(name, p, "norm" not in name) for name, p in hf.named_parameters()]
    # the rotary frequencies (transformers also keeps `original_inv_freq`, which forward
    # never reads, so the graph does not hold it)
    tensors += [(name, b, False) for name, b in hf.named_buffers()
                if name.endswith(".inv_freq")]
    for name, p, split in tensors:
        n = p.numel() * BF16
        per_device += math.ceil(n / tp) if split else n
        if "embed_tokens" not in name:  # the table is looked up: only its rows are read
            full += math.ceil(n / tp) if split else n
    return per_device, full


def _kv(tp: int) -> int:
    return 2 * LAYERS * BATCH * math.ceil(KV_HEADS / tp) * KV_LEN * (HIDDEN // HEADS) * BF16


def test_phase_metadata_round_trips(decode: tuple[Model, Any]) -> None:
    model, _ = decode
    info = PhaseInfo.of(model)
    assert info == PhaseInfo("decode", BATCH, 1, KV_LEN, LAYERS, HEADS, KV_HEADS,
                             HIDDEN // HEADS)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_decode_figures_by_hand(decode: tuple[Model, Any], tp: int) -> None:
    model, hf = decode
    h100 = resolve_targets("h100")[0]
    result = serving(model, h100, dtype="bf16", tp=tp)
    weights, full = _by_hand(hf, tp)
    assert result.weight_bytes == weights
    assert result.kv_bytes == _kv(tp)
    assert result.collectives == (0 if tp == 1 else 2 * LAYERS + 1)
    bandwidth = h100.memory_bandwidth.value
    assert result.closed_form_seconds == pytest.approx(
        (full + _kv(tp)) / bandwidth + result.comm_seconds, rel=1e-12)
    # Every kernel is at least its bytes over the bandwidth, and a step reads every weight
    # and the cache at least once: the graph figure is never below the closed form.
    assert result.step_seconds >= result.closed_form_seconds * (1 - 1e-9)
    assert result.tokens_per_second == pytest.approx(BATCH / result.step_seconds)
    assert result.fits is True
    if tp == 1:  # one device: exactly the fused roofline of `analyze`
        run = driver.analyze(model, [h100], dtype="bf16").runs[0]
        assert result.step_seconds == pytest.approx(
            run.mappings[0].total_latency, rel=1e-9)


def test_tp_collectives_on_the_interconnect(decode: tuple[Model, Any]) -> None:
    model, _ = decode
    h100 = resolve_targets("h100")[0]
    link = h100.interconnect_bandwidth.value / 2  # bytes/s each way
    two = serving(model, h100, dtype="bf16", tp=2)
    # 2 all-reduces per layer of the [B, 1, hidden] activation and one of the embedding
    # output, ring: 2 (T - 1) / T x bytes / link.
    size = BATCH * 1 * HIDDEN * BF16
    assert two.comm_seconds == pytest.approx((2 * LAYERS + 1) * size / link, rel=1e-9)


def test_memory_fit_verdict(tmp_path: Path, decode: tuple[Model, Any]) -> None:
    model, hf = decode
    small = tmp_path / "small.yaml"
    capacity = 150_000
    small.write_text(
        "name: small\ntitle: a device with 150 kB of memory\nkind: gpu\n"
        "sources: {spec: made up for this test}\n"
        "peaks: {bf16: {value: 100, source: spec}}\n"
        "memory_bandwidth: {value: 1, unit: TB/s, source: spec}\n"
        "memory_capacity: {value: 150, unit: KB, source: spec}\n"
        "interconnect_bandwidth: {value: 100, unit: GB/s, source: spec}\n")
    target = load_target_file(small)
    one = serving(model, target, dtype="bf16", tp=1)
    assert one.fits is False and one.memory_bytes > capacity
    weights, _ = _by_hand(hf, HEADS)  # the widest split the heads allow
    assert weights + _kv(HEADS) <= capacity  # (by hand: it fits on 4 devices)
    many = serving(model, target, dtype="bf16", tp=HEADS)
    assert many.weight_bytes == weights
    assert many.fits is True


@pytest.mark.parametrize("tp", [3, 8, 16])
def test_tp_must_split_heads_evenly(decode: tuple[Model, Any], tp: int) -> None:
    """4 query heads, 2 KV heads: TP 1, 2 and 4 split them (4: KV heads replicated in
    pairs); 3, 8 or 16 would leave devices with fractional or no query heads."""
    model, _ = decode
    with pytest.raises(IrbridgeError, match=f"--tp {tp}: .* 4 attention heads and 2 KV "
                                            "heads; .* use one of 1, 2, 4$"):
        serving(model, resolve_targets("h100")[0], dtype="bf16", tp=tp)


def test_not_a_phase_graph_and_missing_interconnect(decode: tuple[Model, Any]) -> None:
    model, _ = decode
    plain = Model(graphs=model.graphs, tensors=model.tensors, name="plain")
    with pytest.raises(IrbridgeError, match="not a serving-phase graph"):
        serving(plain, resolve_targets("h100")[0])
    with pytest.raises(IrbridgeError, match="no interconnect_bandwidth"):
        serving(model, resolve_targets("l4")[0], dtype="bf16", tp=2)


def test_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", "llama-tiny", "--phase", "decode", "--kv-len",
                                 "32", "--tp", "1,2", "-H", "h100", "--dtype", "bf16",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["serving"]
    assert [(r["phase"], r["tp"], r["kv_len"]) for r in rows] == [("decode", 1, 32),
                                                                   ("decode", 2, 32)]
    assert rows[1]["weight_bytes_per_device"] < rows[0]["weight_bytes_per_device"]
    for args, message in (
            (["analyze", "resnet18", "--tp", "2"], "not a serving-phase graph"),
            (["analyze", "llama-tiny", "--phase", "verify"], "--phase 'verify'"),
            (["analyze", "llama-tiny", "--kv-len", "8"], "--kv-len and --seq-len apply"),
            (["analyze", "llama-tiny", "--phase", "decode", "--tp", "0"], "--tp '0'")):
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2, (args, bad.output)
        assert message in bad.output and "Traceback" not in bad.output


@pytest.mark.parametrize(("key", "value", "message"), [
    ("llm.layers", "3", "gives 3 layers, but the graph has 4 KV-cache tensors"),
    ("llm.layers", "9" * 30, "layers, but the graph has 4 KV-cache tensors"),
    ("llm.batch", "3", "but graph value"),
    ("llm.kv_len", "65", "but graph value"),
    ("llm.head_dim", "8", "but graph value"),
    ("llm.kv_heads", "3", "4 attention heads and 3 KV heads, which do not divide them"),
    ("llm.heads", "7", "7 attention heads and 2 KV heads, which do not divide them"),
])
def test_metadata_must_describe_the_graph(decode: tuple[Model, Any], key: str, value: str,
                                          message: str) -> None:
    """A file's llm.* figures are checked against its own cache tensors before any
    arithmetic: a hand-edited or hostile file is refused in one line, not analysed into
    nonsense (or a loop over 10^30 layers)."""
    model, _ = decode
    edited = Model(graphs=model.graphs, tensors=model.tensors, name="edited",
                   metadata={**model.metadata, key: value})
    with pytest.raises(IrbridgeError, match=message) as info:
        serving(edited, resolve_targets("h100")[0], dtype="bf16")
    assert "\n" not in str(info.value)


def test_tp_refusal_stays_bounded_for_huge_head_counts(decode: tuple[Model, Any]) -> None:
    model, _ = decode
    edited = Model(graphs=model.graphs, tensors=model.tensors, name="edited",
                   metadata={**model.metadata, "llm.heads": str(2 * 10**15)})
    with pytest.raises(IrbridgeError, match=r"use one of 1, 2, 4, 8, .*, \.\.\.$"):
        serving(edited, resolve_targets("h100")[0], dtype="bf16", tp=3)
