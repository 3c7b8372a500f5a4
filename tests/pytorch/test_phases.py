"""Prefill and decode graphs with an explicit static KV cache, checked against the eager
Hugging Face model running its own DynamicCache, and their attention costs against the
formulas computed by hand from the config.

Tolerance: float32 everywhere; the IR executor (numpy) and torch differ by summation order
only, so logits agree to 1e-4 absolute (logits are O(1) with these random weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers

from irbridge.analysis.cost import cost_model
from irbridge.converters.pytorch import capture
from irbridge.converters.pytorch.phases import (
    CacheShape,
    example_inputs,
    phase_info,
    phase_module,
)
from irbridge.errors import IrbridgeError
from irbridge.executor import run_model

ATOL = 1e-4


def _llama() -> Any:
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=1000, max_position_embeddings=512)


def _gpt2() -> Any:
    return transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000,
                                   n_positions=128)


def _mixtral() -> Any:
    return transformers.MixtralConfig(hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, num_local_experts=4,
                                      num_experts_per_tok=2, vocab_size=1000,
                                      max_position_embeddings=512)


CONFIGS = {"llama": (_llama, transformers.LlamaForCausalLM),
           "gpt2": (_gpt2, transformers.GPT2LMHeadModel),
           "mixtral": (_mixtral, transformers.MixtralForCausalLM)}

BATCH, PROMPT, KV_LEN = 2, 5, 16


def _model(name: str) -> Any:
    torch.manual_seed(0)
    make_config, cls = CONFIGS[name]
    return cls(make_config()).eval()


def _eager(model: Any, prompt: torch.Tensor,
           token: torch.Tensor) -> tuple[torch.Tensor, list[tuple[np.ndarray, np.ndarray]],
                                         torch.Tensor]:
    """transformers' own cached generation step: prefill logits, the cache after the
    prompt (keys, values per layer), decode logits."""
    from transformers.cache_utils import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        first = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        after_prompt = [(layer.keys.numpy().copy(), layer.values.numpy().copy())
                        for layer in first.past_key_values.layers]
        second = model(input_ids=token, past_key_values=first.past_key_values, use_cache=True)
    return first.logits, after_prompt, second.logits


@pytest.mark.parametrize("name", ["llama", pytest.param("gpt2", marks=pytest.mark.slow),
                                  pytest.param("mixtral", marks=pytest.mark.slow)])
def test_prefill_and_decode_match_the_eager_model_with_a_cache(name: str) -> None:
    model = _model(name)
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 1000, (BATCH, PROMPT), generator=gen)
    token = torch.randint(0, 1000, (BATCH, 1), generator=gen)
    ref_prefill, cache, ref_decode = _eager(model, prompt, token)
    shape = CacheShape.of(model.config)

    prefill = phase_module(model, "prefill", kv_len=KV_LEN)
    captured = capture(prefill, (prompt,), {}).model
    outputs = run_model(captured, [prompt.numpy()])
    np.testing.assert_allclose(outputs[0], ref_prefill.numpy(), atol=ATOL, rtol=0)
    assert len(outputs) == 1 + 2 * shape.layers
    for i in range(shape.layers):
        keys, values = outputs[1 + 2 * i], outputs[2 + 2 * i]
        assert keys.shape == (BATCH, shape.kv_heads, KV_LEN, shape.head_dim)
        np.testing.assert_allclose(keys[:, :, :PROMPT], cache[i][0], atol=ATOL, rtol=0)
        np.testing.assert_allclose(values[:, :, :PROMPT], cache[i][1], atol=ATOL, rtol=0)
        assert not keys[:, :, PROMPT:].any() and not values[:, :, PROMPT:].any()

    # Decode: captured at one example position, run at another (the position is an input).
    decode = phase_module(model, "decode", kv_len=KV_LEN)
    captured = capture(decode, example_inputs(decode, batch=BATCH, seq_len=1), {}).model
    feeds = [token.numpy(), np.array([PROMPT], dtype=np.int64)]
    for i in range(shape.layers):
        for t in cache[i]:
            padded = np.zeros((BATCH, shape.kv_heads, KV_LEN, shape.head_dim), np.float32)
            padded[:, :, :PROMPT] = t
            feeds.append(padded)
    outputs = run_model(captured, feeds)
    np.testing.assert_allclose(outputs[0], ref_decode.numpy(), atol=ATOL, rtol=0)


def _attention_macs(model_ir: Any) -> int:
    """MACs of the attention products: matmul-like nodes of an attention module (Llama,
    Mixtral: `self_attn`; GPT-2: `attn`) with no weight input (a MoE's expert matmuls
    read gathered expert weights, not parameters, so the module decides)."""
    total = 0
    for nc in cost_model(model_ir).nodes:
        node = nc.node
        if nc.cost.macs and "attn" in node.provenance.module_path and \
                not any(v is not None and v.is_parameter for v in node.inputs):
            total += nc.cost.macs
    return total


@pytest.mark.parametrize("name, phase, seq", [
    ("llama", "decode", 1), ("gpt2", "prefill", 8),
    pytest.param("llama", "prefill", 8, marks=pytest.mark.slow),
    pytest.param("gpt2", "decode", 1, marks=pytest.mark.slow),
    pytest.param("mixtral", "decode", 1, marks=pytest.mark.slow),
    pytest.param("mixtral", "prefill", 8, marks=pytest.mark.slow)])
def test_attention_cost_counts_the_cached_length(name: str, phase: str, seq: int) -> None:
    model = _model(name)
    config = model.config
    module = phase_module(model, phase, kv_len=KV_LEN)
    captured = capture(module, example_inputs(module, batch=BATCH, seq_len=seq), {},
                       weights=False).model
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    # Per layer QK^T and PV: B * H * S_q * kv_len * D MACs each, masked slots included.
    expected = layers * 2 * BATCH * heads * seq * KV_LEN * head_dim
    assert _attention_macs(captured) == expected
    if phase == "decode":  # 2 * B * H * L * D FLOPs per product per layer
        assert 2 * expected == layers * 2 * (2 * BATCH * heads * KV_LEN * head_dim)


def test_kv_cache_bytes_formula() -> None:
    shape = CacheShape.of(_llama())
    assert shape == CacheShape(layers=2, kv_heads=2, head_dim=16, heads=4)
    module = phase_module(transformers.LlamaForCausalLM(_llama()), "decode", kv_len=512)
    info = phase_info(module, example_inputs(module, batch=4, seq_len=1, device="meta"))
    assert (info.phase, info.batch, info.tokens, info.kv_len) == ("decode", 4, 1, 512)
    assert info.kv_cache_bytes(2) == 2 * 2 * 4 * 2 * 512 * 16 * 2
    assert info.kv_cache_bytes(2, tp=2) == 2 * 2 * 4 * 1 * 512 * 16 * 2  # 1 KV head each
    assert info.kv_cache_bytes(2, tp=4) == info.kv_cache_bytes(2, tp=2)  # heads replicated


def test_phase_errors_are_one_line() -> None:
    model = _model("llama")
    with pytest.raises(IrbridgeError, match="--phase 'train'"):
        phase_module(model, "train", kv_len=8)
    with pytest.raises(IrbridgeError, match="--kv-len must be at least 1"):
        phase_module(model, "decode", kv_len=0)
    # positions past the model's table (gpt2's wpe; 10^12 was costed as a 15 s TPOT)
    with pytest.raises(IrbridgeError, match=r"^--kv-len 513 exceeds the 512 positions "
                                            r"LlamaForCausalLM supports$"):
        phase_module(model, "decode", kv_len=513)
    assert phase_module(model, "decode", kv_len=512).kv_len == 512
    with pytest.raises(IrbridgeError, match="--kv-len 129 exceeds the 128 positions"):
        phase_module(_model("gpt2"), "prefill", kv_len=129)
    with pytest.raises(IrbridgeError, match="longer than --kv-len"):
        example_inputs(phase_module(model, "prefill", kv_len=4), batch=1, seq_len=8)
    with pytest.raises(IrbridgeError, match="Hugging Face causal LM"):
        phase_module(torch.nn.Linear(2, 2), "decode", kv_len=8)


def test_encoders_and_encoder_decoders_are_refused() -> None:
    """A KV-cache step of a bidirectional encoder is meaningless (BERT was costed as if it
    decoded; its HF causal-LM head without is_decoder is still bidirectional)."""
    bert = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64, vocab_size=100)
    for model in (transformers.BertModel(bert), transformers.BertLMHeadModel(bert)):
        with pytest.raises(IrbridgeError, match=r"needs a causal LM; Bert\w+'s self-attention "
                                                r"\(BertSelfAttention\) is bidirectional"):
            phase_module(model, "decode", kv_len=8)
    t5 = transformers.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=2,
                               vocab_size=100)
    with pytest.raises(IrbridgeError, match="T5ForConditionalGeneration is an encoder-decoder"):
        phase_module(transformers.T5ForConditionalGeneration(t5), "prefill", kv_len=8)
    # a decoder configured as one (BERT with is_decoder) is causal: accepted
    decoder = transformers.BertConfig(**{**bert.to_dict(), "is_decoder": True})
    assert phase_module(transformers.BertLMHeadModel(decoder), "decode", kv_len=8).kv_len == 8


# -- CLI -------------------------------------------------------------------------------------

def _invoke(*args: str) -> Any:
    from typer.testing import CliRunner

    from irbridge.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_cli_convert_decode_phase_writes_cache_inputs(tmp_path: Any) -> None:
    from irbridge import serde

    out = tmp_path / "decode.irb"
    result = _invoke("convert", "llama-tiny", "--phase", "decode", "--kv-len", "32",
                     "--batch", "2", "--no-weights", "-o", str(out))
    assert result.exit_code == 0, result.output
    graph = serde.load(out).graphs[0]
    names = [v.name for v in graph.inputs]
    assert names[:2] == ["input_ids", "cache_position"]
    assert len(names) == 2 + 2 * 2  # two layers, K and V each
    assert graph.inputs[2].type.shape == (2, 2, 32, 16)  # B, H_kv, kv_len, head_dim


@pytest.mark.parametrize("args, message", [
    (("--phase", "train"), "--phase 'train': use prefill or decode"),
    (("--kv-len", "8"), "--kv-len applies to --phase"),
    (("--phase", "prefill", "--seq-len", "64", "--kv-len", "8"), "longer than --kv-len"),
])
def test_cli_phase_errors(args: tuple[str, ...], message: str) -> None:
    result = _invoke("convert", "llama-tiny", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
