"""onnxruntime's contrib ops (domain `com.microsoft`) written in neutral ops.

Files that onnxruntime writes (a session's `optimized_model_filepath` at graph
optimisation EXTENDED, `onnxruntime.transformers.optimizer.optimize_model`, irbridge's own
`export_onnx(..., target="onnxruntime")`) hold fused contrib ops. ONNX shape inference
does not know them, so without a mapping every op downstream loses its shapes too; mapped,
the registry infers their types and the standard ops after them import as usual.

Semantics follow onnxruntime's contrib operator schemas (docs/ContribOperators.md) and,
where the text is silent, what onnxruntime's CPU kernels compute (the tests run the
original file in onnxruntime against the imported IR). A form a handler does not support
(past/present key-value caches, packed QKV inputs, rotary embedding, ...) raises
`Unsupported` naming it, and the node stays opaque with that reason.
"""

from __future__ import annotations

from typing import Any

from irbridge.converters.onnx._import_ops import (
    HandlerFn,
    Results,
    _conv,
    _dtype,
    _gemm,
    _scalar,
    handles,
)
from irbridge.converters.onnx.importer import DOMAIN_HANDLERS, NodeCtx, Unsupported
from irbridge.dtypes import DType
from irbridge.ir import Value

MS = "com.microsoft"


def contrib(*op_types: str) -> Any:
    def register(fn: HandlerFn) -> HandlerFn:
        for op_type in op_types:
            if (MS, op_type) in DOMAIN_HANDLERS:
                raise ValueError(f"two handlers for {MS}::{op_type}")
            DOMAIN_HANDLERS[(MS, op_type)] = fn
        return fn
    return register


def _activation(ctx: NodeCtx, y: Value, kind: str, params: list[float | None]) -> Value:
    """onnxruntime's fused activation (MLAS_ACTIVATION) applied to `y`; `params` by
    position, None where not given."""
    def param(index: int, default: float | None = None) -> float:
        given = params[index] if index < len(params) else None
        if given is not None:
            return float(given)
        if default is None:
            raise Unsupported(f"activation {kind} needs {index + 1} parameter(s)")
        return default

    if kind in ("", "Identity"):
        return y
    if kind in ("Relu", "Tanh", "Sigmoid"):
        return ctx.op(kind.lower(), [y])
    if kind == "LeakyRelu":
        return ctx.op("leaky_relu", [y], {"alpha": param(0, 0.01)})
    if kind == "HardSigmoid":
        return ctx.op("hardsigmoid", [y], {"alpha": param(0, 0.2), "beta": param(1, 0.5)})
    if kind == "Clip":
        return ctx.op("clip", [y], {"min": param(0), "max": param(1)})
    raise Unsupported(f"fused activation {kind!r}")


@contrib("FusedConv")
def _fused_conv(ctx: NodeCtx) -> Results:
    """activation(Conv(X, W, B) + Z)."""
    y = _conv(ctx)[0]
    assert y is not None
    if ctx.has(3):
        y = ctx.op("add", [y, ctx.x(3)])
    return [_activation(ctx, y, str(ctx.a("activation", "")),
                        list(ctx.a("activation_params", []) or []))]


@contrib("FusedGemm")
def _fused_gemm(ctx: NodeCtx) -> Results:
    y = _gemm(ctx)[0]
    assert y is not None
    params = [ctx.a(f"activation_{p}") for p in ("alpha", "beta", "gamma")]
    return [_activation(ctx, y, str(ctx.a("activation", "")), params)]


@contrib("FusedMatMul", "TransposeMatMul")
def _fused_matmul(ctx: NodeCtx) -> Results:
    """alpha * op(A) @ op(B); transBatch moves dim 0 behind the batch dims, trans swaps
    the last two dims."""
    a = _transposed(ctx, ctx.x(0), bool(ctx.a("transA", 0)), bool(ctx.a("transBatchA", 0)))
    b = _transposed(ctx, ctx.x(1), bool(ctx.a("transB", 0)), bool(ctx.a("transBatchB", 0)))
    y = ctx.op("matmul", [a, b])
    alpha = float(ctx.a("alpha", 1.0))
    if alpha != 1.0:
        y = ctx.op("mul", [y, _scalar(ctx, alpha, y)])
    return [y]


def _transposed(ctx: NodeCtx, x: Value, last_two: bool, batch: bool) -> Value:
    if not last_two and not batch:
        return x
    if x.type is None or x.type.shape is None:
        raise Unsupported("a transposed FusedMatMul operand needs a known rank")
    rank = len(x.type.shape)
    perm = list(range(rank))
    if batch and rank >= 3:
        perm = [*range(1, rank - 1), 0, rank - 1]
    if last_two:
        if rank < 2:
            raise Unsupported("transA / transB of a rank-1 operand")
        perm[-2], perm[-1] = perm[-1], perm[-2]
    if perm == list(range(rank)):
        return x
    return ctx.op("permute", [x], {"perm": tuple(perm)})


# -- GELU family, bias adds -------------------------------------------------------------------

@contrib("Gelu")
def _gelu(ctx: NodeCtx) -> Results:
    return [ctx.op("gelu", [ctx.x(0)], {"approximate": "none"})]


@contrib("BiasGelu")
def _bias_gelu(ctx: NodeCtx) -> Results:
    return [ctx.op("gelu", [ctx.op("add", [ctx.x(0), ctx.x(1)])], {"approximate": "none"})]


@contrib("FastGelu")
def _fast_gelu(ctx: NodeCtx) -> Results:
    """0.5 x (1 + tanh(0.797885 x + 0.035677 x^3)) of x (+ bias): the tanh approximation."""
    x = ctx.x(0)
    if ctx.has(1):
        x = ctx.op("add", [x, ctx.x(1)])
    return [ctx.op("gelu", [x], {"approximate": "tanh"})]


@contrib("QuickGelu")
def _quick_gelu(ctx: NodeCtx) -> Results:
    x = ctx.x(0)
    alpha = float(ctx.a("alpha", 1.702))
    return [ctx.op("mul", [x, ctx.op("sigmoid", [ctx.op("mul", [x, _scalar(ctx, alpha, x)])])])]


@contrib("BiasAdd")
def _bias_add(ctx: NodeCtx) -> Results:
    return [ctx.op("add", [ctx.op("add", [ctx.x(0), ctx.x(1)]), ctx.x(2)])]


# -- normalisation -------------------------------------------------------------------------------

def _skip_sum(ctx: NodeCtx, bias_index: int) -> Value:
    s = ctx.op("add", [ctx.x(0), ctx.x(1)])
    if ctx.has(bias_index):
        s = ctx.op("add", [s, ctx.x(bias_index)])
    return s


def _no_statistics(ctx: NodeCtx) -> None:
    if ctx.used(1) or ctx.used(2):
        raise Unsupported("the mean / inv_std_var outputs have no neutral equivalent")


@contrib("SkipLayerNormalization")
def _skip_layer_norm(ctx: NodeCtx) -> Results:
    """LayerNorm(input + skip + bias) * gamma + beta; output 3 is the sum."""
    _no_statistics(ctx)
    s = _skip_sum(ctx, 4)
    inputs = [s, ctx.x(2)] + ([ctx.x(3)] if ctx.has(3) else [])
    y = ctx.op("layer_norm", inputs, {"axis": -1, "epsilon": float(ctx.a("epsilon", 1e-12))})
    return [y, None, None, s][:len(ctx.node.output)]


@handles("SimplifiedLayerNormalization")  # onnxruntime's, in the default domain
def _simplified_layer_norm(ctx: NodeCtx) -> Results:
    if ctx.used(1):
        raise Unsupported("the inv_std_var output has no neutral equivalent")
    return [ctx.op("rms_norm", [ctx.x(0), ctx.x(1)],
                   {"axis": int(ctx.a("axis", -1)), "epsilon": float(ctx.a("epsilon", 1e-5))}),
            None]


@contrib("SkipSimplifiedLayerNormalization")
def _skip_rms_norm(ctx: NodeCtx) -> Results:
    """RMSNorm(input + skip + bias) * gamma; output 3 is the sum."""
    _no_statistics(ctx)
    s = _skip_sum(ctx, 3)
    y = ctx.op("rms_norm", [s, ctx.x(2)], {"axis": -1,
                                          "epsilon": float(ctx.a("epsilon", 1e-12))})
    return [y, None, None, s][:len(ctx.node.output)]


@contrib("EmbedLayerNormalization")
def _embed_layer_norm(ctx: NodeCtx) -> Results:
    """BERT's embeddings: LayerNorm(word[input_ids] + position[position_ids or 0..S-1] +
    segment[segment_ids]); mask_index (output 1) counts the mask's entries equal to 1 per
    row (what onnxruntime's kernel counts), embedding_sum (output 2) is the sum."""
    ids = ctx.x(0)
    total = ctx.op("gather", [ctx.x(2), ids], {"axis": 0})
    if ctx.has(8):
        positions = ctx.x(8)
    else:
        length = ctx.static(0)[1]
        positions = ctx.arange(length, (1, length))
    total = ctx.op("add", [total, ctx.op("gather", [ctx.x(3), positions], {"axis": 0})])
    if ctx.has(1):
        total = ctx.op("add", [total, ctx.op("gather", [ctx.x(4), ctx.x(1)], {"axis": 0})])
    inputs = [total, ctx.x(5)] + ([ctx.x(6)] if ctx.has(6) else [])
    y = ctx.op("layer_norm", inputs, {"axis": -1, "epsilon": float(ctx.a("epsilon", 1e-12))})
    mask_index = None
    if ctx.used(1):
        if not ctx.has(7):
            raise Unsupported("mask_index output without a mask input")
        ones = ctx.op("equal", [ctx.x(7), _scalar(ctx, 1, ctx.x(7))])
        mask_index = ctx.op("reduce_sum", [ctx.op("cast", [ones], {"dtype": DType.INT32})],
                            {"axes": (1,), "keepdims": False})
    return [y, mask_index, total][:len(ctx.node.output)]


@contrib("RotaryEmbedding")
def _rotary_embedding(ctx: NodeCtx) -> Results:
    """RoPE of [B, S, N*H] or [B, N, S, H] input: the first rotary_embedding_dim features
    of each head rotated by cos / sin rows gathered at the positions (position_ids [B, S],
    or a start offset [1] + 0..S-1), halves (default) or interleaved pairs."""
    if ctx.a("is_packed_batching", 0) or float(ctx.a("scale", 1.0)) != 1.0:
        raise Unsupported("packed batching or a scale")
    x, rank = ctx.x(0), ctx.rank(0)
    half = ctx.static(2)[1]
    rotary = int(ctx.a("rotary_embedding_dim", 0)) or 2 * half
    if rotary != 2 * half:
        raise Unsupported(f"rotary_embedding_dim {rotary} does not match the cos cache")
    if rank == 3:
        heads = int(ctx.a("num_heads", 0))
        hidden = ctx.static(0)[2]
        head = hidden // heads if heads else rotary
        x = ctx.op("reshape", [x], {"shape": (0, 0, hidden // head, head)})  # [B, S, N, H]
        length, head_axis = ctx.static(0)[1], 2
    elif rank == 4:
        head, length, head_axis = ctx.static(0)[3], ctx.static(0)[2], 1  # [B, N, S, H]
    else:
        raise Unsupported(f"rank-{rank} input")
    positions = ctx.x(1)
    if ctx.rank(1) == 1:
        steps = ctx.arange(length)
        start = ctx.op("cast", [positions], {"dtype": DType.INT64})
        positions = ctx.op("unsqueeze", [ctx.op("add", [steps, start])], {"axes": (0,)})
    cos, sin = (ctx.op("unsqueeze", [ctx.op("gather", [ctx.x(i), positions], {"axis": 0})],
                       {"axes": (head_axis,)}) for i in (2, 3))
    y = _rotate(ctx, x, cos, sin, head, bool(ctx.a("interleaved", 0)))
    return [ctx.op("reshape", [y], {"shape": (0, 0, -1)}) if rank == 3 else y]


def _rotate(ctx: NodeCtx, x: Value, cos: Value, sin: Value, head: int, interleaved: bool
            ) -> Value:
    """RoPE of 4-D x with heads of `head` features last: the first 2 * half features (half
    = cos's last dim) rotated by cos / sin (broadcast to [..., half]), as halves or
    interleaved pairs; the rest kept."""
    half = _last_dim(cos)
    rotary = 2 * half

    def part(start: int, end: int, step: int = 1) -> Value:
        return ctx.op("slice", [x], {"starts": (start,), "ends": (end,), "axes": (-1,),
                                     "steps": (step,)})

    if interleaved:
        first, second = part(0, rotary, 2), part(1, rotary, 2)
    else:
        first, second = part(0, half), part(half, rotary)
    out_first = ctx.op("sub", [ctx.op("mul", [first, cos]), ctx.op("mul", [second, sin])])
    out_second = ctx.op("add", [ctx.op("mul", [second, cos]), ctx.op("mul", [first, sin])])
    if interleaved:
        pairs = [ctx.op("unsqueeze", [v], {"axes": (-1,)}) for v in (out_first, out_second)]
        rotated = ctx.op("reshape", [ctx.op("concat", pairs, {"axis": -1})],
                         {"shape": (0, 0, 0, rotary)})
        parts = [rotated]
    else:
        parts = [out_first, out_second]
    if rotary < head:
        parts.append(part(rotary, head))
    return ctx.op("concat", parts, {"axis": -1}) if len(parts) > 1 else parts[0]


def _last_dim(value: Value) -> int:
    shape = value.type.shape if value.type is not None else None
    if not shape or not isinstance(shape[-1], int):
        raise Unsupported("a cos / sin cache needs a static last dim")
    return shape[-1]


# -- attention --------------------------------------------------------------------------------

def _heads(ctx: NodeCtx, x: Value, heads: int) -> Value:
    """[B, S, N*H] -> [B, N, S, H]."""
    y = ctx.op("reshape", [x], {"shape": (0, 0, heads, -1)})
    return ctx.op("permute", [y], {"perm": (0, 2, 1, 3)})


def _merge_heads(ctx: NodeCtx, y: Value) -> Value:
    y = ctx.op("permute", [y], {"perm": (0, 2, 1, 3)})
    return ctx.op("reshape", [y], {"shape": (0, 0, -1)})


def _key_mask(ctx: NodeCtx, index: int, query: Value, key: Value, ranges: bool = False
              ) -> Value | None:
    """The additive [B, 1, 1 or S, T] score bias of a mask input: raw masks [B, T] /
    [B, S, T] (0 = masked), key lengths [B] (right padding) and [2B] (exclusive ends, then inclusive starts); masked scores get
    mask_filter_value added, as onnxruntime's CPU kernels do."""
    if not ctx.has(index):
        return None
    mask = ctx.x(index)
    shape = ctx.shape(index)
    fill = float(ctx.a("mask_filter_value", -10000.0))
    dtype = _dtype(query)
    zero, filled = _scalar(ctx, 0.0, dtype), _scalar(ctx, fill, dtype)
    if len(shape) == 1:
        if not ranges and shape[0] != _batch(query):
            raise Unsupported("a 1-D key_padding_mask other than key lengths (batch_size)")
        return _key_ranges(ctx, mask, shape[0], query, key, zero, filled)
    if len(shape) not in (2, 3):  # onnxruntime's CPU kernel refuses the 4-D form too
        raise Unsupported(f"a mask of rank {len(shape)}")
    keep = ctx.op("greater", [mask, _scalar(ctx, 0, mask)])
    bias = ctx.op("where", [keep, zero, filled])
    return ctx.op("unsqueeze", [bias], {"axes": (1,) if len(shape) == 3 else (1, 2)})


def _batch(value: Value) -> Any:
    return value.type.shape[0] if value.type is not None and value.type.shape else None


def _static_length(key: Value) -> int:
    shape = key.type.shape if key.type is not None else None
    if shape is None or len(shape) < 2 or not isinstance(shape[1], int):
        raise Unsupported("this mask form needs a static key length")
    return shape[1]


def _key_ranges(ctx: NodeCtx, mask: Value, size: Any, query: Value, key: Value,
                zero: Value, filled: Value) -> Value:
    """Bias of a [B] (key lengths) or [2B] (ends, then starts) mask_index."""
    batch = _batch(query)
    if not isinstance(batch, int) or size not in (batch, 2 * batch):
        raise Unsupported("a 1-D mask_index needs a static batch and shape (batch_size) or "
                          "(2 * batch_size) (the (3 * batch_size + 2) form is not supported)")
    length = _static_length(key)
    positions = ctx.arange(length, (1, length), DType.INT32)
    bounds = ctx.op("reshape", [ctx.op("cast", [mask], {"dtype": DType.INT32})],
                    {"shape": (-1, 1)})
    if size == batch:
        keep = ctx.op("less", [positions, bounds])
    else:
        ends, starts = (ctx.op("slice", [bounds], {"starts": (a,), "ends": (b,), "axes": (0,)})
                        for a, b in ((0, batch), (batch, 2 * batch)))
        keep = ctx.op("logical_and", [ctx.op("less", [positions, ends]),
                                      ctx.op("greater_equal", [positions, starts])])
    bias = ctx.op("where", [keep, zero, filled])
    return ctx.op("reshape", [bias], {"shape": (0, 1, 1, -1)})


def _attend(ctx: NodeCtx, q: Value, k: Value, v: Value, heads: int,
            biases: list[Value | None]) -> Value:
    """Multi-head scaled dot-product attention of [B, S, N*H] q and [B, T, N*H] k, v."""
    present = [b for b in biases if b is not None]
    mask = present[0] if present else None
    for extra in present[1:]:
        mask = ctx.op("add", [mask, extra])
    attrs = {"causal": bool(ctx.a("unidirectional", 0)),
             "scale": float(ctx.a("scale", 0.0) or 0.0)}
    inputs = [_heads(ctx, q, heads), _heads(ctx, k, heads), _heads(ctx, v, heads)]
    y = ctx.op("attention", inputs + ([mask] if mask is not None else []), attrs)
    return _merge_heads(ctx, y)


def _split_last(ctx: NodeCtx, x: Value, sizes: list[int]) -> list[Value]:
    out, start = [], 0
    for size in sizes:
        out.append(ctx.op("slice", [x], {"starts": (start,), "ends": (start + size,),
                                         "axes": (-1,)}))
        start += size
    return out


@contrib("Attention")
def _attention(ctx: NodeCtx) -> Results:
    """BERT/GPT-2 self-attention with packed Q/K/V weights [Hin, H + H + Hv]."""
    if ctx.has(4) or ctx.used(1):
        raise Unsupported("past / present key-value state")
    if ctx.a("do_rotary", 0) or ctx.a("past_present_share_buffer", 0) or ctx.has(6):
        raise Unsupported("rotary embedding or a shared past/present buffer")
    heads = int(ctx.a("num_heads"))
    if ctx.rank(0) != 3:
        raise Unsupported("input must be [batch, sequence, hidden]")
    weights = ctx.static(1)
    sizes = [int(s) for s in ctx.a("qkv_hidden_sizes", []) or []]
    if not sizes:
        if weights[1] % 3:
            raise Unsupported(f"weights [{weights[0]}, {weights[1]}] are not 3 equal parts")
        sizes = [weights[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != weights[1] or sizes[0] != sizes[1] \
            or any(s % heads for s in sizes):
        raise Unsupported(f"qkv_hidden_sizes {sizes} do not fit weights {list(weights)} and "
                          f"{heads} heads")
    qkv = ctx.op("matmul", [ctx.x(0), ctx.x(1)])
    if ctx.has(2):
        qkv = ctx.op("add", [qkv, ctx.x(2)])
    q, k, v = _split_last(ctx, qkv, sizes)
    biases = [_key_mask(ctx, 3, ctx.x(0), q, ranges=True), ctx.opt(5)]
    return [_attend(ctx, q, k, v, heads, biases), None]


@contrib("MultiHeadAttention")
def _multi_head_attention(ctx: NodeCtx) -> Results:
    """Separate [B, S, D] query and [B, T, D] key / value (+ packed bias [D + D + Dv])."""
    if any(ctx.has(i) for i in (6, 7, 8, 9)) or any(ctx.used(i) for i in (1, 2, 3)):
        raise Unsupported("past / present key-value state, cache indirection or the qk "
                          "output")
    if not ctx.has(1) or not ctx.has(2) or ctx.rank(0) != 3 or ctx.rank(1) != 3 \
            or ctx.rank(2) != 3:
        raise Unsupported("packed QKV / KV or 4-D key and value (only separate 3-D query, "
                          "key and value)")
    heads = int(ctx.a("num_heads"))
    q, k, v = ctx.x(0), ctx.x(1), ctx.x(2)
    if ctx.has(3):
        d, dv = ctx.static(0)[2], ctx.static(2)[2]
        bq, bk, bv = _split_last(ctx, ctx.x(3), [d, d, dv])
        q, k, v = ctx.op("add", [q, bq]), ctx.op("add", [k, bk]), ctx.op("add", [v, bv])
    biases = [_key_mask(ctx, 4, q, k), ctx.opt(5)]
    return [_attend(ctx, q, k, v, heads, biases), None, None, None]



_GQA_INPUTS = {9: "position_ids", 10: "attention_bias", 11: "head_sink", 12: "k_scale",
               13: "v_scale", 14: "q_norm_weight", 15: "k_norm_weight"}


@contrib("GroupQueryAttention")
def _group_query_attention(ctx: NodeCtx) -> Results:
    """Grouped-query attention of [B, S, N*H] query and [B, S, Nkv*H] key / value (or
    packed QKV [B, S, (N + 2 Nkv) H]) with an optional BNSH past key / value: present =
    past ++ new (on the sequence axis), the new tokens at absolute positions seqlens_k + 1
    - S .. seqlens_k (without a past: 0 .. S - 1), RoPE at those positions from cos_cache
    / sin_cache (do_rotary, halves or rotary_interleaved), a causal mask aligned to them
    (`local_window_size` W: only the last W keys, the query's own included; causal 0:
    every key up to seqlens_k), `softcap`, `scale`. As onnxruntime's CPU kernel computes
    prompts (a right-padded prompt's padding rows aside) and, after a cache, batches whose
    every entry's past fills the past buffer (seqlens_k + 1 = past length + S: batch 1 or
    equal lengths); onnxruntime writes a shorter entry's new keys right after its own
    past, which this concatenation does not model. total_sequence_length is not read."""
    for index, what in _GQA_INPUTS.items():
        if ctx.has(index):
            raise Unsupported(f"input {what}")
    for name in ("smooth_softmax", "sliding_window_cache", "qk_output"):
        if ctx.a(name, 0):
            raise Unsupported(f"attribute {name}={ctx.a(name)}")
    for name in ("k_quant_type", "v_quant_type"):
        if str(ctx.a(name, "NONE")) != "NONE":
            raise Unsupported(f"attribute {name}={ctx.a(name)} (a quantised KV cache)")
    if ctx.used(3):
        raise Unsupported("the output_qk output")
    heads, kv_heads = int(ctx.a("num_heads")), int(ctx.a("kv_num_heads"))
    if kv_heads < 1 or heads % kv_heads:
        raise Unsupported(f"num_heads {heads} is not a multiple of kv_num_heads {kv_heads}")
    if ctx.rank(0) != 3 or ctx.has(1) != ctx.has(2) or ctx.has(3) != ctx.has(4):
        raise Unsupported("query must be 3-D, key and value (past_key and past_value) given "
                          "together")
    width = ctx.shape(0)[2]
    if not isinstance(width, int):
        raise Unsupported("query needs a static hidden size")
    q = ctx.x(0)
    parts = heads if ctx.has(1) else heads + 2 * kv_heads  # else packed QKV
    head = width // parts
    if head * parts != width:
        raise Unsupported(f"query's hidden size {width} is not {parts} heads")
    if ctx.has(1):
        k, v = ctx.x(1), ctx.x(2)
    else:
        q, k, v = _split_last(ctx, q, [heads * head, kv_heads * head, kv_heads * head])
    q, k, v = _heads(ctx, q, heads), _heads(ctx, k, kv_heads), _heads(ctx, v, kv_heads)
    int64 = {"dtype": DType.INT64}
    total = ctx.op("add", [ctx.op("cast", [ctx.x(5)], int64), ctx.constant(1, DType.INT64)])
    if ctx.has(3):  # after a cache: the last S of each entry's seqlens_k + 1 positions
        positions = ctx.op("add", [
            ctx.op("unsqueeze", [ctx.op("sub", [total, _length(ctx, q, 2)])], {"axes": (1,)}),
            _steps(ctx, q, 2)])  # [B, S]
    else:  # a prompt: 0 .. S-1, whatever the entry's length (right padding)
        positions = ctx.op("unsqueeze", [_steps(ctx, q, 2)], {"axes": (0,)})  # [1, S]
    if ctx.a("do_rotary", 0):
        if not ctx.has(7) or not ctx.has(8):
            raise Unsupported("do_rotary without cos_cache / sin_cache")
        cos, sin = (ctx.op("unsqueeze", [ctx.op("gather", [ctx.x(i), positions], {"axis": 0})],
                           {"axes": (1,)}) for i in (7, 8))
        interleaved = bool(ctx.a("rotary_interleaved", 0))
        q, k = (_rotate(ctx, x, cos, sin, head, interleaved) for x in (q, k))
    if ctx.has(3):
        k = ctx.op("concat", [ctx.x(3), k], {"axis": 2})
        v = ctx.op("concat", [ctx.x(4), v], {"axis": 2})
    keys = _steps(ctx, k, 2)  # [T]
    if ctx.a("causal", 1):
        query_at = ctx.op("unsqueeze", [positions], {"axes": (2,)})  # [B, S, 1]
        keep = ctx.op("less_equal", [keys, query_at])
        window = int(ctx.a("local_window_size", -1))
        if window > 0:
            # onnxruntime 1.31's CPU kernel: the window keys up to the query's own
            start = ctx.op("sub", [query_at, ctx.constant(window - 1, DType.INT64)])
            keep = ctx.op("logical_and", [keep, ctx.op("greater_equal", [keys, start])])
    else:
        keep = ctx.op("less", [keys, ctx.op("reshape", [total], {"shape": (-1, 1, 1)})])
    mask = ctx.op("unsqueeze", [keep], {"axes": (1,)})  # [B, 1, S or 1, T]
    scale = float(ctx.a("scale", 0.0) or 0.0) or head ** -0.5
    softcap = float(ctx.a("softcap", 0.0) or 0.0)
    if softcap > 0:
        y = _capped_attention(ctx, q, k, v, mask, scale, softcap, (heads, kv_heads, head))
    else:
        y = ctx.op("attention", [q, k, v, mask], {"scale": scale})
    return [_merge_heads(ctx, y), k, v, None]


def _length(ctx: NodeCtx, x: Value, axis: int) -> Value:
    """x's dim `axis` as an int64 scalar (a constant when static)."""
    dim = x.type.shape[axis] if x.type is not None and x.type.shape is not None else None
    if isinstance(dim, int):
        return ctx.constant(dim, DType.INT64)
    return ctx.op("reshape", [ctx.op("shape_of", [x], {"start": axis, "end": axis + 1})],
                  {"shape": ()})


def _steps(ctx: NodeCtx, x: Value, axis: int) -> Value:
    """0, 1, .. up to x's dim `axis` (int64; a constant when static, so that inference
    knows its length)."""
    dim = x.type.shape[axis] if x.type is not None and x.type.shape is not None else None
    if isinstance(dim, int):
        return ctx.arange(dim)
    return ctx.op("range", [None, _length(ctx, x, axis), None])


def _capped_attention(ctx: NodeCtx, q: Value, k: Value, v: Value, mask: Value, scale: float,
                      softcap: float, sizes: tuple[int, int, int]) -> Value:
    """softmax(softcap * tanh(q @ k^T * scale / softcap), masked) @ v, q's N heads in
    groups of N / Nkv per k / v head: [B, Nkv, G, S, H] against [B, Nkv, 1, T, H]."""
    heads, kv_heads, head = sizes
    grouped = ctx.op("reshape", [q], {"shape": (0, kv_heads, heads // kv_heads, -1, head)})
    k, v = (ctx.op("unsqueeze", [x], {"axes": (2,)}) for x in (k, v))
    scores = ctx.op("matmul", [grouped, ctx.op("permute", [k], {"perm": (0, 1, 2, 4, 3)})])
    scores = ctx.op("mul", [scores, _scalar(ctx, scale / softcap, scores)])
    scores = ctx.op("mul", [ctx.op("tanh", [scores]), _scalar(ctx, softcap, scores)])
    scores = ctx.op("where", [ctx.op("unsqueeze", [mask], {"axes": (2,)}), scores,
                              _scalar(ctx, float("-inf"), scores)])
    y = ctx.op("matmul", [ctx.op("softmax", [scores], {"axis": -1}), v])
    return ctx.op("reshape", [y], {"shape": (0, heads, -1, head)})
