"""LLM serving phases: a Hugging Face decoder wrapped with an explicit static KV cache.

`phase_module(model, phase, ...)` returns a module whose graph is one serving step:

- **prefill**: `forward(input_ids [B, S])` runs the prompt and writes positions 0..S-1 of a
  static cache of `kv_len` positions (zeros elsewhere); outputs `logits`, then the written
  caches `k0, v0, k1, v1, ...` ([B, H_kv, kv_len, D] each);
- **decode**: `forward(input_ids [B, 1], cache_position [1], k0, v0, k1, v1, ...)` reads
  the `kv_len` cached positions (the caches are graph inputs), writes the new token's key and
  value at `cache_position` and attends over all `kv_len` slots (slots after the position
  are masked, as in transformers' StaticCache); outputs `logits` and the updated caches.

The cache is functional (a tensor in, a tensor out): the write is a `scatter_elements` of
the new positions into the cache tensor. Attention therefore covers the whole static
length: per layer QK^T and PV are `B * H * S_q * kv_len * D` MACs each (decode: S_q = 1,
so 2 * B * H * kv_len * D FLOPs each), masked slots included, which is what a static-cache
kernel without block skipping computes. Prefill follows the same convention (the full
S x kv_len product, causal masking not subtracted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from irbridge.analysis.serving import PhaseInfo
from irbridge.errors import IrbridgeError

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class CacheShape:
    """The per-layer KV-cache geometry of a decoder config."""

    layers: int
    kv_heads: int
    head_dim: int
    heads: int

    @classmethod
    def of(cls, config: Any) -> CacheShape:
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") \
            else config
        heads = int(text.num_attention_heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        return cls(int(text.num_hidden_layers), kv_heads, int(head_dim), heads)

    def tensor_shape(self, batch: int, kv_len: int) -> tuple[int, int, int, int]:
        return (batch, self.kv_heads, kv_len, self.head_dim)


def _cache_layer_class() -> type:
    from transformers.cache_utils import StaticLayer

    class InputCacheLayer(StaticLayer):
        """A static cache layer over given tensors, written out of place at `position`."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor,
                     position: torch.Tensor) -> None:
            super().__init__(max_cache_len=keys.shape[2])
            self.keys, self.values, self.position = keys, values, position
            self.dtype, self.device = keys.dtype, keys.device
            self.batch_size, self.num_heads = keys.shape[:2]
            self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
                   *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            index = self.position.view(1, 1, -1, 1)
            keys, values = self.keys, self.values
            assert keys is not None and values is not None
            self.keys = keys = keys.scatter(2, index.expand_as(key_states), key_states)
            self.values = values = values.scatter(2, index.expand_as(value_states), value_states)
            return keys, values

        def get_seq_length(self) -> Any:
            # Positions written before this step: the query offset of the causal mask (a
            # tensor, as StaticLayer's cumulative length, so the position stays an input).
            return self.position[0]

    return InputCacheLayer


class PhaseModule(nn.Module):
    """One serving step of a causal LM with its KV cache as explicit tensors."""

    def __init__(self, model: nn.Module, phase: str, kv_len: int) -> None:
        super().__init__()
        if phase not in PHASES:
            raise IrbridgeError(f"--phase {phase!r}: use one of {', '.join(PHASES)}")
        self.model = model
        self.phase = phase
        self.kv_len = kv_len
        self.shape = CacheShape.of(model.config)

    def _step(self, input_ids: torch.Tensor, position: torch.Tensor,
              caches: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import Cache

        layer_cls = _cache_layer_class()
        layers = [layer_cls(caches[2 * i], caches[2 * i + 1], position)
                  for i in range(self.shape.layers)]
        cache = Cache(layers=layers)
        batch = input_ids.shape[0]
        out = self.model(input_ids=input_ids, past_key_values=cache,
                         position_ids=position.unsqueeze(0).expand(batch, -1), use_cache=True)
        written = [t for layer in layers for t in (layer.keys, layer.values)]
        first = getattr(out, "logits", None)  # a bare decoder (hf:TYPE) has hidden states
        return (first if first is not None else out.last_hidden_state, *written)


class PrefillModule(PhaseModule):
    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch, seq = input_ids.shape
        dtype = next(self.model.parameters()).dtype
        shape = self.shape.tensor_shape(batch, self.kv_len)
        caches = [torch.zeros(shape, dtype=dtype, device=input_ids.device)
                  for _ in range(2 * self.shape.layers)]
        position = torch.arange(seq, device=input_ids.device)
        return self._step(input_ids, position, caches)


class DecodeModule(PhaseModule):
    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor,
                *caches: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._step(input_ids, cache_position, list(caches))


def phase_module(model: nn.Module, phase: str, *, kv_len: int) -> PhaseModule:
    """Wrap a Hugging Face causal LM for one serving phase (see the module doc)."""
    if not hasattr(model, "config") or not hasattr(model.config, "num_attention_heads"):
        raise IrbridgeError("--phase needs a Hugging Face causal LM (a transformers preset or "
                            "hf:MODEL_TYPE:causal-lm)")
    _check_causal(model)
    if kv_len < 1:
        raise IrbridgeError(f"--kv-len must be at least 1, got {kv_len}")
    config: Any = model.config
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") \
        else config
    max_pos = getattr(text, "max_position_embeddings", None)
    if isinstance(max_pos, int) and kv_len > max_pos:
        # the cache holds positions 0..kv_len-1: beyond the model's position table or range
        raise IrbridgeError(f"--kv-len {kv_len} exceeds the {max_pos} positions "
                            f"{type(model).__name__} supports")
    if _has_experts(model):
        # Mixture of experts: the grouped form (tokens sorted by expert, one grouped matmul
        # per projection, lowered to grouped_matmul) is a static graph that reads each
        # expert's weights once; the default loops over the experts a batch hits
        # (data-dependent), and the batched form gathers a copy of its experts' weights per
        # token (a prefill of 128 tokens of Mixtral-8x7B: 10,932 GiB of traffic).
        model.config._experts_implementation = "grouped_mm"  # type: ignore[union-attr]
    cls = PrefillModule if phase == "prefill" else DecodeModule
    return cls(model, phase, kv_len)


def _check_causal(model: nn.Module) -> None:
    """Refuse encoders and encoder-decoders: a KV cache step needs causal self-attention
    (transformers' attention modules say so in `is_causal`; an encoder's are False)."""
    name = type(model).__name__
    if getattr(model.config, "is_encoder_decoder", False):
        raise IrbridgeError(f"--phase needs a decoder-only causal LM; {name} is an "
                            "encoder-decoder")
    bidirectional = sorted({type(m).__name__ for m in model.modules()
                            if getattr(m, "is_causal", True) is False})
    if bidirectional:
        raise IrbridgeError(f"--phase needs a causal LM; {name}'s self-attention "
                            f"({', '.join(bidirectional)}) is bidirectional (an encoder)")


def _has_experts(model: nn.Module) -> bool:
    return any(hasattr(m, "gate_up_proj") or hasattr(m, "num_experts")
               for m in model.modules())


def example_inputs(module: PhaseModule, *, batch: int, seq_len: int,
                   device: str | torch.device = "cpu",
                   position: int | None = None) -> tuple[torch.Tensor, ...]:
    """Inputs of one step: prefill (input_ids [B, seq_len]); decode (input_ids [B, 1],
    cache_position [1] = `position` (default kv_len - 1: a full cache), caches (zeros))."""
    vocab = int(module.model.config.get_text_config(decoder=True).vocab_size)  # type: ignore[union-attr, operator]
    if module.phase == "prefill":
        if seq_len > module.kv_len:
            raise IrbridgeError(f"--seq-len {seq_len} is longer than --kv-len {module.kv_len}")
        return (torch.randint(0, vocab, (batch, seq_len), device=device),)
    pos = module.kv_len - 1 if position is None else position
    if not 0 <= pos < module.kv_len:
        raise IrbridgeError(f"decode position {pos} is outside the cache of {module.kv_len}")
    dtype = next(module.model.parameters()).dtype
    shape = module.shape.tensor_shape(batch, module.kv_len)
    caches = tuple(torch.zeros(shape, dtype=dtype, device=device)
                   for _ in range(2 * module.shape.layers))
    return (torch.randint(0, vocab, (batch, 1), device=device),
            torch.tensor([pos], dtype=torch.int64, device=device), *caches)


def phase_info(module: PhaseModule, args: tuple[Any, ...]) -> PhaseInfo:
    """What one step of `module` on `args` computes, for `model.metadata` (`llm.*` keys read
    by the serving analysis, `irbridge.analysis.serving`)."""
    batch, tokens = (int(d) for d in args[0].shape)
    s = module.shape
    return PhaseInfo(module.phase, batch, tokens, module.kv_len, s.layers, s.heads,
                     s.kv_heads, s.head_dim)


DEFAULT_LENGTH = 128
"""Prompt length of a prefill and cache length of both phases when not given."""


def phase_built(built: Any, phase: str, *, batch: int | None = None,
                seq_len: int | None = None, kv_len: int | None = None) -> Any:
    """A zoo `BuiltModel` turned into one serving step (`irbridge convert --phase`): batch
    default 1, prompt length `seq_len` (prefill; default 128), cache length `kv_len`
    (default: the prompt length for prefill, 128 for decode)."""
    from irbridge.converters.pytorch.zoo.common import BuiltModel, InputSpec

    batch = 1 if batch is None else batch
    seq = DEFAULT_LENGTH if seq_len is None else seq_len
    if batch < 1 or seq < 1:
        raise IrbridgeError(f"--batch and --seq-len must be at least 1, got {batch} and {seq}")
    if kv_len is None:
        kv_len = seq if phase == "prefill" else DEFAULT_LENGTH
    module = phase_module(built.module, phase, kv_len=kv_len)
    device = next(built.module.parameters()).device
    args = example_inputs(module, batch=batch, seq_len=seq, device=device)
    names = ["input_ids"] if phase == "prefill" else ["input_ids", "cache_position"]
    names += [f"{kind}{i}" for i in range(module.shape.layers) for kind in ("k", "v")]
    specs = [InputSpec(name, "tokens" if name == "input_ids" else "tensor", tuple(a.shape),
                       a.dtype, False) for name, a in zip(names, args, strict=False)]
    if phase == "decode" and len(specs) > 4:  # one line: the first layer's cache stands for all
        specs = [*specs[:4]]
        specs[-1] = InputSpec(f"v0 (+{2 * module.shape.layers - 2} more caches)", "tensor",
                              specs[-1].shape, specs[-1].dtype, False)
    return BuiltModel(module=module, args=args, kwargs={}, name=f"{built.name}:{phase}",
                      family=built.family, inputs=specs, source=built.source, task=phase,
                      device=built.device, weights=built.weights)


def capture_phase(name: str, phase: str, *, batch: int | None = None,
                  seq_len: int | None = None, kv_len: int | None = None) -> Any:
    """A zoo causal LM captured shape-only (meta device, no weights) for one serving phase,
    with its `llm.*` metadata (`analyze --phase`, `irbridge sweep`)."""
    from irbridge.converters.pytorch import capture, zoo

    built = zoo.build(name, batch=batch, seq_len=seq_len, device="meta")
    built = phase_built(built, phase, batch=batch, seq_len=seq_len, kv_len=kv_len)
    result = capture(built.module, built.args, built.kwargs, weights=False)
    model = result.model
    model.name = built.name
    model.metadata.update(phase_info(built.module, built.args).metadata())
    return model
