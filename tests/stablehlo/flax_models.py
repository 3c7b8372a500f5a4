"""Compact Flax models in the shapes of common architectures (flax.linen, and one in
flax.nnx), with random weights from a fixed PRNG: a real, independent StableHLO producer
for the importer.

The variables come from `random_variables` (a fixed numpy PRNG) rather than the modules'
initialisers. Each `FlaxCase` holds a module, its variables and its example inputs; `as_args` and
`as_constants` give the function JAX lowers with the parameters as function arguments or
closed over as constants (then they are `stablehlo.constant`s in the module)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

HIDDEN, HEADS, LAYERS, VOCAB, SEQ, BATCH = 32, 4, 2, 50, 8, 2


@dataclass
class FlaxCase:
    name: str
    apply: Callable[..., Any]  # apply(variables, *inputs)
    inputs: list[np.ndarray]
    variables: Any

    def as_args(self) -> tuple[Callable[..., Any], list[Any]]:
        """f(variables, *inputs) and its arguments (variables are a pytree of arrays)."""
        return self.apply, [self.variables, *self.inputs]

    def as_constants(self) -> tuple[Callable[..., Any], list[Any]]:
        """f(*inputs) with the variables closed over."""
        return (lambda *xs: self.apply(self.variables, *xs)), list(self.inputs)


def _dense(features: int, name: str | None = None, bias: bool = True) -> nn.Dense:
    return nn.Dense(features, use_bias=bias, name=name)


class _Mlp(nn.Module):
    hidden: int
    act: Callable[[jax.Array], jax.Array]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return _dense(x.shape[-1])(self.act(_dense(self.hidden)(x)))


class _EncoderLayer(nn.Module):
    """Attention + MLP with LayerNorm, post-norm (BERT) or pre-norm (GPT-2, ViT, CLIP)."""
    act: Callable[[jax.Array], jax.Array]
    pre_norm: bool

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
        attn = nn.MultiHeadDotProductAttention(HEADS, deterministic=True)
        mlp = _Mlp(2 * x.shape[-1], self.act)
        if self.pre_norm:
            x = x + attn(nn.LayerNorm()(x), mask=mask)
            return x + mlp(nn.LayerNorm()(x))
        x = nn.LayerNorm()(x + attn(x, mask=mask))
        return nn.LayerNorm()(x + mlp(x))


def _gelu_exact(x: jax.Array) -> jax.Array:
    return nn.gelu(x, approximate=False)


class Bert(nn.Module):
    """Token + position + segment embeddings, post-norm layers with exact (erf) GELU,
    attention with a padding mask, a tanh pooler on the first token."""

    @nn.compact
    def __call__(self, ids: jax.Array, attention_mask: jax.Array) -> tuple[jax.Array, ...]:
        x = nn.Embed(VOCAB, HIDDEN)(ids) + nn.Embed(SEQ, HIDDEN)(jnp.arange(ids.shape[1]))
        x = nn.LayerNorm(epsilon=1e-12)(x + nn.Embed(2, HIDDEN)(jnp.zeros_like(ids)))
        mask = nn.make_attention_mask(attention_mask > 0, attention_mask > 0)
        for _ in range(LAYERS):
            x = _EncoderLayer(_gelu_exact, pre_norm=False)(x, mask)
        return x, jnp.tanh(_dense(HIDDEN)(x[:, 0]))


class Gpt2(nn.Module):
    """Pre-norm causal decoder with tanh GELU and an LM head tied to the token embedding."""

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        wte = nn.Embed(VOCAB, HIDDEN)
        x = wte(ids) + nn.Embed(SEQ, HIDDEN)(jnp.arange(ids.shape[1])[None])
        mask = nn.make_causal_mask(ids)
        for _ in range(LAYERS):
            x = _EncoderLayer(lambda v: nn.gelu(v, approximate=True), pre_norm=True)(x, mask)
        return wte.attend(nn.LayerNorm()(x))


class ViT(nn.Module):
    """Patch convolution, a learned class token and positions, pre-norm encoder, head on
    the class token."""

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:  # NHWC
        x = nn.Conv(HIDDEN, (4, 4), strides=(4, 4), padding="VALID")(image)
        b, h, w, c = x.shape
        x = x.reshape(b, h * w, c)
        cls = self.param("cls", nn.initializers.normal(), (1, 1, c))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, c)), x], axis=1)
        x = x + self.param("pos", nn.initializers.normal(), (1, h * w + 1, c))
        for _ in range(LAYERS):
            x = _EncoderLayer(_gelu_exact, pre_norm=True)(x, None)
        return _dense(10)(nn.LayerNorm()(x)[:, 0])


class _ResBlock(nn.Module):
    features: int
    stride: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        bn = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731
        y = nn.relu(bn()(nn.Conv(self.features, (3, 3), (self.stride, self.stride),
                                 use_bias=False)(x)))
        y = bn()(nn.Conv(self.features, (3, 3), use_bias=False,
                         feature_group_count=self.features // 8)(y))  # RegNet-style groups
        if x.shape != y.shape:
            x = bn()(nn.Conv(self.features, (1, 1), (self.stride, self.stride),
                             use_bias=False)(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    """Stem, max pool, two residual stages with BatchNorm in inference mode, global mean."""

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:
        x = nn.relu(nn.BatchNorm(use_running_average=True)(
            nn.Conv(16, (3, 3), use_bias=False)(image)))
        x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
        x = _ResBlock(16, 1)(x)
        x = _ResBlock(32, 2)(x)
        return _dense(10)(x.mean((1, 2)))


def _rope(x: jax.Array, positions: jax.Array) -> jax.Array:
    """Rotary embedding, rotate-half form; x is [batch, seq, heads, dim]."""
    half = x.shape[-1] // 2
    freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions[:, :, None, None].astype(jnp.float32) * freq
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class _LlamaLayer(nn.Module):
    kv_heads: int = 2
    window: int | None = None  # sliding-window attention (Mistral): keys at most window-1 back

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        b, t, d = x.shape
        hd = d // HEADS
        h = nn.RMSNorm(epsilon=1e-6)(x)
        q = _dense(d, bias=False)(h).reshape(b, t, HEADS, hd)
        k = _dense(self.kv_heads * hd, bias=False)(h).reshape(b, t, self.kv_heads, hd)
        v = _dense(self.kv_heads * hd, bias=False)(h).reshape(b, t, self.kv_heads, hd)
        q, k = _rope(q, positions), _rope(k, positions)
        k = jnp.repeat(k, HEADS // self.kv_heads, axis=2)  # grouped-query attention
        v = jnp.repeat(v, HEADS // self.kv_heads, axis=2)
        mask = nn.make_causal_mask(jnp.zeros((b, t)))
        if self.window is not None:
            distance = jnp.arange(t)[:, None] - jnp.arange(t)[None, :]
            mask = mask * (distance < self.window)
        out = nn.dot_product_attention(q, k, v, mask=mask, deterministic=True)
        x = x + _dense(d, bias=False)(out.reshape(b, t, d))
        h = nn.RMSNorm(epsilon=1e-6)(x)
        gate = nn.silu(_dense(2 * d, bias=False)(h)) * _dense(2 * d, bias=False)(h)  # SwiGLU
        return x + _dense(d, bias=False)(gate)


class Llama(nn.Module):
    """RMSNorm, rotary positions, SwiGLU and grouped-query causal attention."""
    window: int | None = None

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        x = nn.Embed(VOCAB, HIDDEN)(ids)
        positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
        for _ in range(LAYERS):
            x = _LlamaLayer(window=self.window)(x, positions)
        return _dense(VOCAB, bias=False)(nn.RMSNorm(epsilon=1e-6)(x))


class Mistral(Llama):
    """Llama with sliding-window causal attention: each token sees itself and the
    `window - 1` tokens before it (a band mask; the window is shorter than the sequence)
    and grouped-query attention."""
    window: int | None = 3


class _SqueezeExcite(nn.Module):
    reduced: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = x.mean((1, 2), keepdims=True)  # global average pool
        s = nn.relu(nn.Conv(self.reduced, (1, 1))(s))
        return x * jax.nn.sigmoid(nn.Conv(x.shape[-1], (1, 1))(s))


class _XBlock(nn.Module):
    """RegNet's X block (Y with squeeze-and-excitation): 1x1, grouped 3x3, SE, 1x1."""
    features: int
    stride: int
    group_width: int = 8

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        bn = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731
        y = nn.relu(bn()(nn.Conv(self.features, (1, 1), use_bias=False)(x)))
        y = nn.relu(bn()(nn.Conv(self.features, (3, 3), (self.stride, self.stride),
                                 use_bias=False,
                                 feature_group_count=self.features // self.group_width)(y)))
        y = _SqueezeExcite(max(1, x.shape[-1] // 4))(y)
        y = bn()(nn.Conv(self.features, (1, 1), use_bias=False)(y))
        if x.shape != y.shape:
            x = bn()(nn.Conv(self.features, (1, 1), (self.stride, self.stride),
                             use_bias=False)(x))
        return nn.relu(x + y)


class RegNet(nn.Module):
    """Strided stem, two X blocks with grouped 3x3 convolutions (group width 8) and
    squeeze-and-excitation, BatchNorm in inference mode, global mean and a head."""

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:
        x = nn.relu(nn.BatchNorm(use_running_average=True)(
            nn.Conv(16, (3, 3), (2, 2), use_bias=False)(image)))
        x = _XBlock(16, 1)(x)
        x = _XBlock(HIDDEN, 2)(x)
        return _dense(10)(x.mean((1, 2)))


def _relative_buckets(query_len: int, key_len: int, bidirectional: bool,
                      buckets: int = 8, max_distance: int = 16) -> jax.Array:
    """T5's relative position buckets (half exact, half logarithmic)."""
    relative = jnp.arange(key_len)[None, :] - jnp.arange(query_len)[:, None]
    result = jnp.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        result = result + (relative > 0).astype(relative.dtype) * buckets
        relative = jnp.abs(relative)
    else:
        relative = -jnp.minimum(relative, 0)
    exact = buckets // 2
    large = exact + (jnp.log(relative.astype(jnp.float32) / exact + 1e-6)
                     / np.log(max_distance / exact) * (buckets - exact)).astype(relative.dtype)
    large = jnp.minimum(large, buckets - 1)
    return result + jnp.where(relative < exact, relative, large)


class _T5Attention(nn.Module):
    relative: bool = False
    bidirectional: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, memory: jax.Array, mask: jax.Array | None) -> jax.Array:
        b, t, d = x.shape
        s = memory.shape[1]
        hd = d // HEADS
        q = _dense(d, bias=False)(x).reshape(b, t, HEADS, hd)
        k = _dense(d, bias=False)(memory).reshape(b, s, HEADS, hd)
        v = _dense(d, bias=False)(memory).reshape(b, s, HEADS, hd)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        if self.relative:
            table = nn.Embed(8, HEADS)(_relative_buckets(t, s, self.bidirectional))
            scores = scores + table.transpose(2, 0, 1)[None]
        if mask is not None:
            scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        return _dense(d, bias=False)(out.reshape(b, t, d))


class T5(nn.Module):
    """Encoder-decoder with T5 relative position buckets, RMS norms, ReLU MLPs,
    cross-attention and a causal decoder."""

    @nn.compact
    def __call__(self, src: jax.Array, tgt: jax.Array) -> jax.Array:
        embed = nn.Embed(VOCAB, HIDDEN)
        x = embed(src)
        for _ in range(LAYERS):
            x = x + _T5Attention(relative=True)(nn.RMSNorm()(x), nn.RMSNorm()(x), None)
            x = x + _Mlp(2 * HIDDEN, nn.relu)(nn.RMSNorm()(x))
        memory = nn.RMSNorm()(x)
        y = embed(tgt)
        causal = nn.make_causal_mask(tgt)
        for _ in range(LAYERS):
            h = nn.RMSNorm()(y)
            y = y + _T5Attention(relative=True, bidirectional=False)(h, h, causal)
            y = y + _T5Attention()(nn.RMSNorm()(y), memory, None)
            y = y + _Mlp(2 * HIDDEN, nn.relu)(nn.RMSNorm()(y))
        return embed.attend(nn.RMSNorm()(y))


class _BartDecoderLayer(nn.Module):
    @nn.compact
    def __call__(self, y: jax.Array, memory: jax.Array, causal: jax.Array,
                 cross: jax.Array) -> jax.Array:
        attention = lambda: nn.MultiHeadDotProductAttention(HEADS, deterministic=True)  # noqa: E731
        y = nn.LayerNorm()(y + attention()(y, mask=causal))
        y = nn.LayerNorm()(y + attention()(y, memory, mask=cross))
        return nn.LayerNorm()(y + _Mlp(2 * HIDDEN, _gelu_exact)(y))


class Bart(nn.Module):
    """Encoder-decoder with learned positions at BART's offset of 2, post-norm layers,
    exact GELU, a padding mask on the encoder, causal decoder self-attention and
    cross-attention, an LM head tied to the shared embedding plus `final_logits_bias`."""

    @nn.compact
    def __call__(self, src: jax.Array, src_mask: jax.Array, tgt: jax.Array) -> jax.Array:
        embed = nn.Embed(VOCAB, HIDDEN)
        offset = 2  # BART's learned position embeddings start at index 2

        def embed_positions(ids: jax.Array, name: str) -> jax.Array:
            positions = nn.Embed(SEQ + offset, HIDDEN, name=name)(
                jnp.arange(ids.shape[1]) + offset)
            return nn.LayerNorm()(embed(ids) + positions[None])

        keep = src_mask > 0
        x = embed_positions(src, "encoder_positions")
        for _ in range(LAYERS):
            x = _EncoderLayer(_gelu_exact, pre_norm=False)(x, nn.make_attention_mask(keep, keep))
        y = embed_positions(tgt, "decoder_positions")
        causal = nn.make_causal_mask(tgt)
        cross = nn.make_attention_mask(jnp.ones(tgt.shape, bool), keep)
        for _ in range(LAYERS):
            y = _BartDecoderLayer()(y, x, causal, cross)
        bias = self.param("final_logits_bias", nn.initializers.zeros, (VOCAB,))
        return embed.attend(y) + bias


def _relative_position_index(h: int, w: int) -> np.ndarray:
    """BEiT's relative position index over a (h, w) patch grid plus the class token:
    (N * N,) entries into a table of (2h-1)(2w-1) patch-to-patch distances followed by
    class-to-patch, patch-to-class and class-to-class."""
    coords = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij")).reshape(2, -1)
    relative = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0)
    relative += (h - 1, w - 1)
    distances = (2 * h - 1) * (2 * w - 1)
    n = h * w + 1
    index = np.zeros((n, n), np.int32)
    index[1:, 1:] = relative[..., 0] * (2 * w - 1) + relative[..., 1]
    index[0, :], index[:, 0], index[0, 0] = distances, distances + 1, distances + 2
    return index.reshape(-1)


class _BeitLayer(nn.Module):
    grid: tuple[int, int]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, n, d = x.shape
        hd = d // HEADS
        h, w = self.grid
        table = self.param("relative_position_bias_table", nn.initializers.normal(),
                           ((2 * h - 1) * (2 * w - 1) + 3, HEADS))
        bias = jnp.asarray(table)[_relative_position_index(h, w)]  # gather: (N*N, heads)
        bias = bias.reshape(n, n, HEADS).transpose(2, 0, 1)
        qkv = _dense(3 * d)(nn.LayerNorm()(x)).reshape(b, n, 3, HEADS, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd) + bias[None]
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        gamma_1 = self.param("gamma_1", nn.initializers.ones, (d,))  # layer scale
        gamma_2 = self.param("gamma_2", nn.initializers.ones, (d,))
        x = x + gamma_1 * _dense(d)(out.reshape(b, n, d))
        return x + gamma_2 * _Mlp(2 * d, _gelu_exact)(nn.LayerNorm()(x))


class Beit(nn.Module):
    """Patch convolution and a class token, per-layer relative position bias (a table
    gathered by a constant relative-position index), layer scale (gamma_1, gamma_2), mean
    pooling of the patch tokens with a final LayerNorm and a head."""

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:  # NHWC
        x = nn.Conv(HIDDEN, (4, 4), strides=(4, 4), padding="VALID")(image)
        b, h, w, c = x.shape
        cls = self.param("cls", nn.initializers.normal(), (1, 1, c))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, c)), x.reshape(b, h * w, c)], axis=1)
        for _ in range(LAYERS):
            x = _BeitLayer((h, w))(x)
        return _dense(10)(nn.LayerNorm()(x[:, 1:].mean(1)))


class ClipText(nn.Module):
    """Causal pre-norm text encoder pooled at each sequence's EOS token (the largest id):
    `x[arange(batch), eos]`, a general gather."""

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        x = nn.Embed(VOCAB, HIDDEN)(ids) + self.param(
            "pos", nn.initializers.normal(), (SEQ, HIDDEN))[: ids.shape[1]]
        mask = nn.make_causal_mask(ids)
        for _ in range(LAYERS):
            x = _EncoderLayer(lambda v: v * jax.nn.sigmoid(1.702 * v), pre_norm=True)(x, mask)
        x = nn.LayerNorm()(x)
        pooled = x[jnp.arange(x.shape[0]), jnp.argmax(ids, axis=-1)]
        return _dense(16, bias=False)(pooled)


class Wav2Vec2(nn.Module):
    """1-D convolutional feature encoder, time steps masked with a learned embedding by
    `.at[arange, index].set` (a general scatter), a grouped positional convolution and
    an encoder layer."""

    @nn.compact
    def __call__(self, audio: jax.Array, masked: jax.Array) -> jax.Array:
        x = audio[:, :, None]  # [batch, samples, 1]
        x = nn.gelu(nn.GroupNorm(num_groups=16)(nn.Conv(16, (5,), (3,), padding="VALID")(x)))
        x = nn.gelu(nn.Conv(HIDDEN, (3,), (2,), padding="VALID")(x))
        x = _dense(HIDDEN)(nn.LayerNorm()(x))
        embedding = self.param("mask_embedding", nn.initializers.normal(), (HIDDEN,))
        x = x.at[jnp.arange(x.shape[0])[:, None], masked].set(embedding)
        position = nn.Conv(HIDDEN, (5,), padding=2, feature_group_count=4)(x)
        x = nn.LayerNorm()(x + nn.gelu(position))
        return _EncoderLayer(_gelu_exact, pre_norm=False)(x, None)


class Lstm(nn.Module):
    """A two-layer LSTM over time (flax.linen.RNN: lax.scan) and a head on the last step."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(LAYERS):
            x = nn.RNN(nn.OptimizedLSTMCell(HIDDEN))(x)
        return _dense(5)(x[:, -1])


class _NnxLayer(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.attention = nnx.MultiHeadAttention(HEADS, HIDDEN, decode=False, rngs=rngs)
        self.norm1 = nnx.LayerNorm(HIDDEN, rngs=rngs)
        self.up = nnx.Linear(HIDDEN, 2 * HIDDEN, rngs=rngs)
        self.down = nnx.Linear(2 * HIDDEN, HIDDEN, rngs=rngs)
        self.norm2 = nnx.LayerNorm(HIDDEN, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.down(nnx.gelu(self.up(x), approximate=False)))


class NnxEncoder(nnx.Module):
    """The BERT-style encoder written with flax.nnx (the API Flax recommends for new code):
    embeddings, post-norm layers, exact GELU, padding mask, mean pooling over the tokens."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(VOCAB, HIDDEN, rngs=rngs)
        # named attributes, not an nnx.List: jax.export serializes only string dict keys
        self.layer1, self.layer2 = _NnxLayer(rngs), _NnxLayer(rngs)

    def __call__(self, ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        x = self.embed(ids)
        mask = nnx.make_attention_mask(attention_mask > 0, attention_mask > 0)
        x = self.layer2(self.layer1(x, mask), mask)
        keep = attention_mask[..., None].astype(x.dtype)
        return (x * keep).sum(1) / keep.sum(1)


def random_variables(shapes: Any, seed: int) -> Any:
    """Random values for a tree of variable shapes (what `jax.eval_shape(module.init, ...)`
    gives), from a fixed numpy PRNG: faster than running Flax's initialisers, which XLA
    compiles for seconds per model. Kernels N(0, 1 / fan_in), norm scales and BatchNorm
    variances around 1, biases, means and embeddings N(0, small)."""
    rng = np.random.default_rng(1000 + seed)

    def fill(path: tuple[Any, ...], leaf: jax.ShapeDtypeStruct) -> np.ndarray:
        key = [str(p.key) for p in path if hasattr(p, "key")][-1]  # nnx paths end in .value
        noise = rng.standard_normal(leaf.shape)
        if key == "kernel":
            value = noise / np.sqrt(np.prod(leaf.shape[:-1]))
        elif key in ("scale", "var"):
            value = np.exp(0.2 * noise)
        elif key in ("bias", "mean"):
            value = 0.2 * noise
        else:  # embeddings and the models' own parameters
            value = 0.5 * noise
        return value.astype(leaf.dtype)

    return jax.tree_util.tree_map_with_path(fill, shapes)


NAMES = ("bert", "gpt2", "vit", "resnet", "llama", "t5", "clip_text", "wav2vec2", "lstm",
         "mistral", "regnet", "bart", "beit", "nnx_encoder")


def cases() -> dict[str, FlaxCase]:
    """Every model (`NAMES`) with its inputs and random variables (fixed keys, CPU)."""
    rng = np.random.default_rng(0)

    def ids(*shape: int) -> np.ndarray:
        return rng.integers(1, VOCAB - 1, shape).astype(np.int32)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    clip_ids = ids(BATCH, SEQ)
    clip_ids[0, 5] = clip_ids[1, 7] = VOCAB - 1  # the EOS token: the largest id
    padding = np.ones((BATCH, SEQ), np.int32)
    padding[1, 5:] = 0
    specs: list[tuple[str, nn.Module, list[np.ndarray]]] = [
        ("bert", Bert(), [ids(BATCH, SEQ), padding]),
        ("gpt2", Gpt2(), [ids(BATCH, SEQ)]),
        ("vit", ViT(), [f32(BATCH, 16, 16, 3)]),
        ("resnet", ResNet(), [f32(BATCH, 16, 16, 3)]),
        ("llama", Llama(), [ids(BATCH, SEQ)]),
        ("t5", T5(), [ids(BATCH, SEQ), ids(BATCH, 6)]),
        ("clip_text", ClipText(), [clip_ids]),
        ("wav2vec2", Wav2Vec2(), [f32(BATCH, 64), np.array([[1, 4], [2, 6]], np.int32)]),
        ("lstm", Lstm(), [f32(BATCH, 6, 12)]),
        ("mistral", Mistral(), [ids(BATCH, SEQ)]),
        ("regnet", RegNet(), [f32(BATCH, 16, 16, 3)]),
        ("bart", Bart(), [ids(BATCH, SEQ), padding, ids(BATCH, 6)]),
        ("beit", Beit(), [f32(BATCH, 16, 16, 3)]),
    ]
    out = {}
    for index, (name, module, inputs) in enumerate(specs):
        shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)
        out[name] = FlaxCase(name, module.apply, inputs, random_variables(shapes, seed=index))
    graph, state = nnx.split(nnx.eval_shape(lambda: NnxEncoder(nnx.Rngs(0))))

    def nnx_apply(variables: dict[str, Any], *xs: jax.Array) -> jax.Array:
        # a pure dict of arrays in and out: jax.export cannot serialize a calling
        # convention that holds nnx.Param nodes
        full = jax.tree_util.tree_map(lambda v: v, state)
        nnx.replace_by_pure_dict(full, variables)
        return nnx.merge(graph, full)(*xs)

    out["nnx_encoder"] = FlaxCase("nnx_encoder", nnx_apply, [ids(BATCH, SEQ), padding],
                                  random_variables(state, seed=len(specs)).to_pure_dict())
    assert tuple(out) == NAMES
    return out
