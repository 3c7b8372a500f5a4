"""Convolution and GEMM layers of an IR model, as the simulator writers (SCALE-Sim,
Timeloop) need them: plain integers per layer, one place for both writers.

Which nodes are layers is decided by the op registry's categories (matmul-like: conv,
matmul, gemm, linear, attention), never by names. Every layer's geometry is checked
against the registry: its MACs must equal `node_cost(node).macs`, so a geometry this
module got wrong fails loudly instead of feeding a simulator a wrong workload.

Symbolic dims: the leading (batch) dim of the first graph's inputs is bound to 1 (or to
the symbol's minimum when the capture excludes 1); other symbols must be bound by the
caller (`symbols=`). Any conv/GEMM node left with a dim that is not static is an error.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from irbridge.analysis.binding import bound
from irbridge.errors import ExportError, IrbridgeError
from irbridge.ir import Model, Node, SymDim, TensorType, Value
from irbridge.ops import registry
from irbridge.ops.registry import Category


@dataclass(frozen=True)
class ConvLayer:
    """A 1-D or 2-D convolution (1-D as height 1). Sizes are per image; `batch` images."""

    name: str
    node_id: int
    op: str
    module_path: str
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    in_h: int
    in_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    pad_top: int
    pad_left: int
    pad_bottom: int
    pad_right: int
    out_h: int
    out_w: int

    kind = "conv"

    @property
    def depthwise(self) -> bool:
        """One input channel per group (groups = C > 1): what SCALE-Sim calls depthwise."""
        return self.groups > 1 and self.groups == self.in_channels

    @property
    def channels_per_group(self) -> int:
        return self.in_channels // self.groups

    @property
    def filters_per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def covered_h(self) -> int:
        """Rows of the zero-padded input that some window reads: (P-1)*stride + extent."""
        return (self.out_h - 1) * self.stride_h + self.dilation_h * (self.kernel_h - 1) + 1

    @property
    def covered_w(self) -> int:
        return (self.out_w - 1) * self.stride_w + self.dilation_w * (self.kernel_w - 1) + 1

    @property
    def macs(self) -> int:
        return (self.batch * self.out_channels * self.out_h * self.out_w
                * self.channels_per_group * self.kernel_h * self.kernel_w)

    def as_gemm(self, note: str) -> GemmLayer:
        """The im2col form: per group, M = N*P*Q output pixels, K = C/g*R*S, N = Cout/g."""
        return GemmLayer(self.name, self.node_id, self.op, self.module_path,
                         m=self.batch * self.out_h * self.out_w,
                         n=self.filters_per_group,
                         k=self.channels_per_group * self.kernel_h * self.kernel_w,
                         count=self.groups, note=note)


@dataclass(frozen=True)
class GemmLayer:
    """`count` independent products [M, K] x [K, N] (batch dims or groups)."""

    name: str
    node_id: int
    op: str
    module_path: str
    m: int
    n: int
    k: int
    count: int = 1
    note: str = ""

    kind = "gemm"

    @property
    def macs(self) -> int:
        return self.count * self.m * self.n * self.k


Layer = ConvLayer | GemmLayer

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


SAFE_NAME_CHARS = 96
"""Longest safe name: file names built from it (`{model}.{rank}.et`, `{i}_{layer}.yaml`)
stay far below the 255 bytes file systems take, whatever a file named its model or node."""


def safe_name(text: str, default: str = "layer") -> str:
    """Letters, digits, '_', '.', '-' only: no commas or spaces (CSV fields, file names);
    a longer result than SAFE_NAME_CHARS is its start, '-' and 12 hex digits of the whole
    name's SHA-256 (two long names that share their start stay apart)."""
    cleaned = _SAFE.sub("_", text).strip("_").lstrip(".") or default
    if len(cleaned) <= SAFE_NAME_CHARS:
        return cleaned
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned[:SAFE_NAME_CHARS - 13]}-{digest}"


@contextmanager
def static_shapes(model: Model, symbols: Mapping[str, int] | None = None) -> Iterator[dict[str, int]]:
    """Bind the batch symbols to 1 (their minimum if above 1) and `symbols` for the block;
    yields what was bound. The model's types are restored on exit."""
    chosen: dict[str, int] = {}
    if model.graphs:
        for value in model.graphs[0].inputs:
            shape = value.type.shape if value.type is not None else None
            if shape and isinstance(shape[0], SymDim):
                dim = shape[0]
                chosen[dim.name] = max(1, dim.min or 1)
    chosen.update(symbols or {})
    with bound(model, symbols=chosen or None):
        yield chosen


def extract_layers(model: Model) -> list[Layer]:
    """The conv / GEMM layers of a model with static shapes, in graph order (attention
    gives two: scores q @ k^T and the weighted sum with v). Errors name the node."""
    layers: list[Layer] = []
    used: set[str] = set()
    for _, node in model.all_nodes():
        schema = None if node.is_opaque else registry.lookup(node.op)
        if schema is None or not schema.category.matmul_like:
            continue
        base = safe_name(node.provenance.module_path or node.op)
        name = base if base not in used else f"{base}_n{node.id}"
        used.add(name)
        found = _layers_of(node, name, schema.category)
        expected = registry.node_cost(node).macs
        got = sum(layer.macs for layer in found)
        if got != expected:
            raise ExportError(f"{registry.node_where(node)}: layer geometry gives {got:,} MACs, "
                              f"the op registry {expected:,}")
        layers.extend(found)
    if not layers:
        raise IrbridgeError(f"model {model.name or '(unnamed)'}: no convolution or matmul-like "
                            "node; nothing to simulate")
    return layers


def _shape(node: Node, value: Value | None, what: str) -> tuple[int, ...]:
    where = registry.node_where(node)
    t: TensorType | None = value.type if value is not None else None
    if t is None or t.shape is None:
        raise IrbridgeError(f"{where}: {what} has no shape; simulators need static shapes",
                            hint="capture the model with shapes (not an untyped file)")
    if not t.is_static:
        symbols = ", ".join(str(d) for d in t.shape if not isinstance(d, int))
        # a dim may be an expression of symbols (2*s): name the symbols to bind
        names = sorted({n for d in t.shape if isinstance(d, SymDim)
                        for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", d.name)})
        hint = f"bind it, e.g. --bind {names[0]}=128" if names else \
            "capture the model with static shapes"
        raise IrbridgeError(f"{where}: {what} {t} is not static ({symbols})", hint=hint)
    return t.static_shape()


def _layers_of(node: Node, name: str, category: Category) -> list[Layer]:
    where = registry.node_where(node)
    attrs = registry.context_for(node).attrs
    if category is Category.CONV:
        x = _shape(node, node.inputs[0], "input x")
        w = _shape(node, node.inputs[1], "weight w")
        y = _shape(node, node.outputs[0], "output y")
        if node.op == "conv":
            return [_conv(node, name, x, w, y, attrs)]
        if node.op == "conv_transpose":
            groups = int(attrs["groups"])
            return [GemmLayer(name, node.id, node.op, node.provenance.module_path,
                              m=x[0] * math.prod(x[2:]), k=x[1] // groups,
                              n=w[1] * math.prod(w[2:]), count=groups,
                              note="transposed conv as its scatter GEMM (col2im not modelled)")]
    if node.op == "matmul":
        return [_matmul(node, name)]
    if node.op == "gemm":
        a = _shape(node, node.inputs[0], "input a")
        b = _shape(node, node.inputs[1], "input b")
        m, k = (a[1], a[0]) if attrs["trans_a"] else (a[0], a[1])
        n = b[0] if attrs["trans_b"] else b[1]
        return [GemmLayer(name, node.id, node.op, node.provenance.module_path, m=m, n=n, k=k)]
    if node.op == "linear":
        x = _shape(node, node.inputs[0], "input x")
        w = _shape(node, node.inputs[1], "weight w")
        return [GemmLayer(name, node.id, node.op, node.provenance.module_path,
                          m=math.prod(x[:-1]), n=w[0], k=w[1])]
    if node.op == "attention":
        q = _shape(node, node.inputs[0], "query q")
        key = _shape(node, node.inputs[1], "key k")
        v = _shape(node, node.inputs[2], "value v")
        y = _shape(node, node.outputs[0], "output y")
        count = math.prod(y[:-2])
        path = node.provenance.module_path
        return [GemmLayer(f"{name}.scores", node.id, node.op, path, m=q[-2], n=key[-2],
                          k=q[-1], count=count, note="attention q @ k^T"),
                GemmLayer(f"{name}.values", node.id, node.op, path, m=q[-2], n=v[-1],
                          k=key[-2], count=count, note="attention probs @ v")]
    raise ExportError(f"{where}: matmul-like op {node.op!r} has no conv/GEMM layer form")


def _conv(node: Node, name: str, x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...],
          attrs: Mapping[str, Any]) -> Layer:
    spatial = len(x) - 2
    groups = int(attrs["groups"])
    strides: tuple[int, ...] = tuple(attrs["strides"] or (1,) * spatial)
    dilations: tuple[int, ...] = tuple(attrs["dilations"] or (1,) * spatial)
    pads: tuple[int, ...] = tuple(attrs["pads"] or (0,) * (2 * spatial))
    path = node.provenance.module_path
    if spatial > 2:
        return GemmLayer(name, node.id, node.op, path, m=x[0] * math.prod(y[2:]),
                         n=w[0] // groups, k=w[1] * math.prod(w[2:]), count=groups,
                         note=f"{spatial}-D conv as its im2col GEMM")
    if spatial == 1:  # a row: height 1
        return ConvLayer(name, node.id, node.op, path, batch=x[0], in_channels=x[1],
                         out_channels=w[0], groups=groups, in_h=1, in_w=x[2], kernel_h=1,
                         kernel_w=w[2], stride_h=1, stride_w=int(strides[0]), dilation_h=1,
                         dilation_w=int(dilations[0]), pad_top=0, pad_left=int(pads[0]),
                         pad_bottom=0, pad_right=int(pads[1]), out_h=1, out_w=y[2])
    return ConvLayer(name, node.id, node.op, path, batch=x[0], in_channels=x[1],
                     out_channels=w[0], groups=groups, in_h=x[2], in_w=x[3], kernel_h=w[2],
                     kernel_w=w[3], stride_h=int(strides[0]), stride_w=int(strides[1]),
                     dilation_h=int(dilations[0]), dilation_w=int(dilations[1]),
                     pad_top=int(pads[0]), pad_left=int(pads[1]), pad_bottom=int(pads[2]),
                     pad_right=int(pads[3]), out_h=y[2], out_w=y[3])


def _matmul(node: Node, name: str) -> GemmLayer:
    """numpy.matmul: 1-D operands promoted; batch dims of b that are all 1 (weights shared
    across the batch) fold into M, otherwise each batch entry is its own product."""
    a = _shape(node, node.inputs[0], "input a")
    b = _shape(node, node.inputs[1], "input b")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    a_batch, b_batch = a2[:-2], b2[:-2]
    path = node.provenance.module_path
    if math.prod(b_batch) == 1:
        return GemmLayer(name, node.id, node.op, path, m=math.prod(a_batch) * m, n=n, k=k)
    rank = max(len(a_batch), len(b_batch))
    pa = (1,) * (rank - len(a_batch)) + a_batch
    pb = (1,) * (rank - len(b_batch)) + b_batch
    count = math.prod(max(p, q) for p, q in zip(pa, pb, strict=True))
    return GemmLayer(name, node.id, node.op, path, m=m, n=n, k=k, count=count,
                     note="batched matmul: one product per batch entry")
