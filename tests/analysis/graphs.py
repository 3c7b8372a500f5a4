"""Hand-built IR graphs for the analysis tests (shape-only weights)."""

from __future__ import annotations

from irbridge.builder import GraphBuilder
from irbridge.dtypes import DType
from irbridge.ir import Dim, Graph, Model, Provenance, Tensor, TensorType, Value

F32 = DType.FLOAT32


def new_model(name: str) -> tuple[Model, Graph, GraphBuilder]:
    model = Model(name=name, source_format="test")
    graph = Graph()
    model.graphs.append(graph)
    return model, graph, GraphBuilder(graph, model)


def weight(b: GraphBuilder, name: str, *shape: int, dtype: DType = F32) -> Value:
    return b.parameter(Tensor(name, dtype, shape))


def at(path: str) -> Provenance:
    return Provenance(module_path=path)


def conv_bn(b: GraphBuilder, x: Value, name: str, cin: int, cout: int, k: int = 3,
            stride: int = 1, groups: int = 1, dilation: int = 1) -> Value:
    w = weight(b, f"{name}.weight", cout, cin // groups, k, k)
    pad = dilation * (k - 1) // 2
    y = b.op("conv", [x, w], {"strides": (stride, stride), "pads": (pad,) * 4,
                              "dilations": (dilation, dilation), "groups": groups},
             provenance=at(name))
    bn = [weight(b, f"{name}.bn.{p}", cout) for p in ("weight", "bias", "mean", "var")]
    return b.op("batch_norm", [y, *bn], provenance=at(f"{name}.bn"))


def residual_block(b: GraphBuilder, x: Value, name: str, channels: int) -> Value:
    """conv-bn-relu, conv-bn, + x, relu (a ResNet basic block)."""
    h = conv_bn(b, x, f"{name}.conv1", channels, channels)
    h = b.op("relu", [h], provenance=at(f"{name}.relu"))
    h = conv_bn(b, h, f"{name}.conv2", channels, channels)
    h = b.op("add", [h, x], provenance=at(name))
    return b.op("relu", [h], provenance=at(f"{name}.relu"))


def resnet_block_model(blocks: int = 1, batch: Dim = 1, channels: int = 16,
                       size: int = 8) -> Model:
    model, graph, b = new_model("resblock")
    x = graph.add_input("x", TensorType(F32, (batch, channels, size, size)))
    for i in range(blocks):
        x = residual_block(b, x, f"layer1.{i}", channels)
    graph.set_outputs([x])
    return model


def two_tower_model() -> Model:
    """Two independent towers of linear+relu over the same input, joined by an add."""
    model, graph, b = new_model("two_tower")
    x = graph.add_input("x", TensorType(F32, (4, 32)))
    towers = []
    for t in ("left", "right"):
        h = x
        for i in range(3):
            w = weight(b, f"{t}.{i}.weight", 32, 32)
            h = b.op("linear", [h, w], provenance=at(f"{t}.{i}"))
            h = b.op("relu", [h], provenance=at(f"{t}.{i}.act"))
        towers.append(h)
    graph.set_outputs([b.op("add", towers, provenance=at("join"))])
    return model


def llama_model(layers: int = 2, hidden: int = 4096, heads: int = 32, seq: Dim = 128,
                batch: Dim = 1, ffn: int = 11008, dtype: DType = DType.BFLOAT16) -> Model:
    """A Llama-style decoder, shape-only: rms_norm, q/k/v/o linears, attention, SwiGLU."""
    model, graph, b = new_model(f"llama-{layers}")
    x = graph.add_input("hidden", TensorType(dtype, (batch, seq, hidden)))
    head_dim = hidden // heads
    for i in range(layers):
        p = f"layers.{i}"
        h = b.op("rms_norm", [x, weight(b, f"{p}.input_norm", hidden, dtype=dtype)],
                 provenance=at(f"{p}.input_layernorm"))
        qkv = []
        for proj in ("q", "k", "v"):
            w = weight(b, f"{p}.{proj}_proj", hidden, hidden, dtype=dtype)
            t = b.op("linear", [h, w], provenance=at(f"{p}.self_attn.{proj}_proj"))
            t = b.op("reshape", [t], {"shape": (0, 0, heads, head_dim)},
                     provenance=at(f"{p}.self_attn"))
            qkv.append(b.op("permute", [t], {"perm": (0, 2, 1, 3)},
                            provenance=at(f"{p}.self_attn")))
        a = b.op("attention", qkv, {"causal": True}, provenance=at(f"{p}.self_attn"))
        a = b.op("permute", [a], {"perm": (0, 2, 1, 3)}, provenance=at(f"{p}.self_attn"))
        a = b.op("reshape", [a], {"shape": (0, 0, hidden)}, provenance=at(f"{p}.self_attn"))
        o = b.op("linear", [a, weight(b, f"{p}.o_proj", hidden, hidden, dtype=dtype)],
                 provenance=at(f"{p}.self_attn.o_proj"))
        x = b.op("add", [x, o], provenance=at(p))
        h = b.op("rms_norm", [x, weight(b, f"{p}.post_norm", hidden, dtype=dtype)],
                 provenance=at(f"{p}.post_attention_layernorm"))
        gate = b.op("linear", [h, weight(b, f"{p}.gate_proj", ffn, hidden, dtype=dtype)],
                    provenance=at(f"{p}.mlp.gate_proj"))
        up = b.op("linear", [h, weight(b, f"{p}.up_proj", ffn, hidden, dtype=dtype)],
                  provenance=at(f"{p}.mlp.up_proj"))
        act = b.op("silu", [gate], provenance=at(f"{p}.mlp.act_fn"))
        m = b.op("mul", [act, up], provenance=at(f"{p}.mlp"))
        down = b.op("linear", [m, weight(b, f"{p}.down_proj", hidden, ffn, dtype=dtype)],
                    provenance=at(f"{p}.mlp.down_proj"))
        x = b.op("add", [x, down], provenance=at(p))
    graph.set_outputs([x])
    return model
