"""Neural-network ops: matmul family, convolution, attention, norms, pooling, embedding, resize.

Costs follow docs/ops.md: `macs` counts the multiply-accumulates of matmul-like work
(FLOPs = 2 * MACs), `other` the remaining arithmetic as each op's `cost_doc` states. A cost
that needs a dim which is not static is 0, as the registry does for bytes: nothing is
guessed. Reference implementations compute low-precision floats in float32 (as hardware
does) and cast the result back to the output dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from irbridge.dtypes import DType
from irbridge.errors import OpError
from irbridge.ir import Dim, TensorType, format_shape
from irbridge.ops._numeric import widen
from irbridge.ops._shapes import broadcast_shapes, mul_dims, normalize_axis, promote
from irbridge.ops.registry import (
    AttrKind,
    Category,
    CostFn,
    Flops,
    OpContext,
    RefContext,
    attr,
    define,
    inputs,
    lookup_reads,
)

if TYPE_CHECKING:
    from irbridge.builder import GraphBuilder
    from irbridge.ir import Value

Arrays = list[np.ndarray | None]
Attrs = dict[str, Any]


# -- shared helpers --------------------------------------------------------------------------

def _where(ctx: OpContext) -> str:
    return ctx.where or ctx.op


def _static(dims: Sequence[Dim] | None) -> tuple[int, ...] | None:
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    return tuple(d for d in dims if isinstance(d, int))


def _numel(dims: Sequence[Dim] | None) -> int:
    """Product of static dims; 0 when any is symbolic or unknown (costs are not guessed)."""
    static = _static(dims)
    return 0 if static is None else math.prod(static)


def _same(ctx: OpContext, a: Dim, b: Dim, what: str) -> None:
    """Fail when two dims that must agree are both static and differ."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ctx.fail(f"{what} must match, got {a} and {b}")


def _check_vector(ctx: OpContext, index: int, size: Dim, what: str) -> None:
    """Input `index`, when present, must be a vector of `size` elements."""
    if not ctx.has_input(index):
        return
    shape = ctx.input(index).shape
    if shape is None:
        return
    if len(shape) != 1:
        raise ctx.fail(f"{what} must be a vector [{size}], got {format_shape(shape)}")
    _same(ctx, shape[0], size, f"{what} length and {size}")


def _check_broadcasts_to(ctx: OpContext, index: int, target: tuple[Dim, ...], what: str) -> None:
    """Input `index`, when present, must broadcast to `target` without growing it (a
    symbolic target dim may turn out to match any size)."""
    shape = ctx.input(index).shape if ctx.has_input(index) else None
    if shape is None:
        return
    try:
        result = broadcast_shapes([shape, target], "") if len(shape) <= len(target) else None
        fits = result is not None and all(
            not isinstance(t, int) or r == t for r, t in zip(result, target, strict=True))
    except OpError:
        fits = False
    if not fits:
        raise ctx.fail(f"{what} {format_shape(shape)} does not broadcast to "
                       f"{format_shape(target)}")


def _nchw(ctx: OpContext) -> tuple[Dim, ...] | None:
    """Shape of input 0, which must be laid out [N, C, *spatial] with spatial dims."""
    shape = ctx.input(0).shape
    if shape is not None and len(shape) < 3:
        raise ctx.fail(f"x must be [N, C, *spatial], got {format_shape(shape)}")
    return shape


def _need(xs: Arrays, index: int) -> np.ndarray:
    x = xs[index]
    assert x is not None
    return widen(x)


def _opt(xs: Arrays, index: int) -> np.ndarray | None:
    x = xs[index] if index < len(xs) else None
    return None if x is None else widen(x)


def _opt_value(xs: list[Value | None], index: int) -> Value | None:
    return xs[index] if index < len(xs) else None


def _result(y: np.ndarray, ctx: RefContext) -> list[np.ndarray]:
    """The one output, cast to its declared dtype."""
    t = ctx.output_types[0] if ctx.output_types else None
    return [np.asarray(y) if t is None else np.asarray(y).astype(t.dtype.numpy, copy=False)]


def _type(value: Value) -> TensorType:
    if value.type is None:
        raise OpError(f"value {value.name!r} has no type; decompositions need typed inputs")
    return value.type


def _scalar(gb: GraphBuilder, value: float, like: Value, name: str) -> Value:
    """A scalar constant of `like`'s dtype."""
    return gb.constant(value, name, dtype=_type(like).dtype)


# -- matmul, gemm, linear --------------------------------------------------------------------

def _matmul_infer(ctx: OpContext) -> list[TensorType]:
    a_t, b_t = ctx.input(0), ctx.input(1)
    dtype = promote([a_t, b_t], _where(ctx))
    a, b = a_t.shape, b_t.shape
    if a is None or b is None:
        return [TensorType(dtype, None)]
    if not a or not b:
        raise ctx.fail(f"operands must have rank >= 1, got {format_shape(a)} and {format_shape(b)}")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    _same(ctx, a2[-1], b2[-2], "contracted dims (a dim -1, b dim -2)")
    batch = broadcast_shapes([a2[:-2], b2[:-2]], _where(ctx))
    assert batch is not None
    rows = a2[-2:-1] if len(a) > 1 else ()
    cols = b2[-1:] if len(b) > 1 else ()
    return [TensorType(dtype, (*batch, *rows, *cols))]


def _matmul_cost(ctx: OpContext) -> Flops:
    a = ctx.input(0).shape
    k = _numel(a[-1:]) if a else 0
    return Flops(macs=_numel(_matmul_infer(ctx)[0].shape) * k)


def _matmul_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    return _result(np.matmul(_need(xs, 0), _need(xs, 1)), ctx)


define("matmul", Category.MATMUL, inputs=inputs("a", "b"), infer=_matmul_infer,
       cost=_matmul_cost, reference=_matmul_ref,
       cost_doc="macs = prod(broadcast batch dims) * M * N * K (1-D operands count M or N "
                "as 1); other = 0",
       doc="Matrix product with numpy.matmul semantics: 1-D operands are promoted to a row "
           "(a) or column (b) vector and the added dim removed again; batch dims broadcast.")


def _gemm_dims(ctx: OpContext) -> tuple[Dim, Dim, Dim] | None:
    """(M, K, N) of op(a) @ op(b), checked; None when a rank is unknown."""
    a, b = ctx.input(0).shape, ctx.input(1).shape
    if a is None or b is None:
        return None
    if len(a) != 2 or len(b) != 2:
        raise ctx.fail(f"a and b must be matrices, got {format_shape(a)} and {format_shape(b)}")
    m, k = (a[1], a[0]) if ctx.attrs["trans_a"] else a
    k2, n = (b[1], b[0]) if ctx.attrs["trans_b"] else b
    _same(ctx, k, k2, "contracted dims of op(a) and op(b)")
    return m, k, n


def _gemm_infer(ctx: OpContext) -> list[TensorType]:
    types = [ctx.input(i) for i in range(3) if ctx.has_input(i)]
    dtype = promote(types, _where(ctx))
    dims = _gemm_dims(ctx)
    if dims is None:
        return [TensorType(dtype, None)]
    m, _, n = dims
    _check_broadcasts_to(ctx, 2, (m, n), "c")
    return [TensorType(dtype, (m, n))]


def _gemm_cost(ctx: OpContext) -> Flops:
    dims = _gemm_dims(ctx)
    if dims is None:
        return Flops()
    mn = _numel((dims[0], dims[2]))
    steps = int(ctx.attrs["alpha"] != 1.0)
    if ctx.has_input(2):
        steps += 1 + int(ctx.attrs["beta"] != 1.0)
    return Flops(macs=mn * _numel(dims[1:2]), other=mn * steps)


def _gemm_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    a, b, c = _need(xs, 0), _need(xs, 1), _opt(xs, 2)
    y = (a.T if attrs["trans_a"] else a) @ (b.T if attrs["trans_b"] else b)
    if attrs["alpha"] != 1.0:
        y = y * attrs["alpha"]
    if c is not None:
        y = y + (c * attrs["beta"] if attrs["beta"] != 1.0 else c)
    return _result(y, ctx)


def _gemm_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    a, b, c = xs[0], xs[1], _opt_value(xs, 2)
    assert a is not None and b is not None
    if attrs["trans_a"]:
        a = gb.op("permute", [a], {"perm": (1, 0)})
    if attrs["trans_b"]:
        b = gb.op("permute", [b], {"perm": (1, 0)})
    y = gb.op("matmul", [a, b])
    if attrs["alpha"] != 1.0:
        y = gb.op("mul", [y, _scalar(gb, attrs["alpha"], y, "alpha")])
    if c is not None:
        if attrs["beta"] != 1.0:
            c = gb.op("mul", [c, _scalar(gb, attrs["beta"], c, "beta")])
        y = gb.op("add", [y, c])
    return [y]


define("gemm", Category.MATMUL, inputs=inputs("a", "b", "c?"),
       attrs=(attr("trans_a", AttrKind.BOOL, False, "use a transposed"),
              attr("trans_b", AttrKind.BOOL, False, "use b transposed"),
              attr("alpha", AttrKind.FLOAT, 1.0, "scale of the product"),
              attr("beta", AttrKind.FLOAT, 1.0, "scale of c")),
       infer=_gemm_infer, cost=_gemm_cost, reference=_gemm_ref, decompose=_gemm_decompose,
       cost_doc="macs = M * N * K; other = M * N for each of: alpha != 1 (scale), c present "
                "(add), c present and beta != 1 (scale)",
       doc="General matrix multiply y = alpha * op(a) @ op(b) + beta * c of 2-D a and b, "
           "op() transposing when trans_a / trans_b; the optional c broadcasts to [M, N].")


def _linear_infer(ctx: OpContext) -> list[TensorType]:
    types = [ctx.input(i) for i in range(3) if ctx.has_input(i)]
    dtype = promote(types, _where(ctx))
    x, w = ctx.input(0).shape, ctx.input(1).shape
    if w is not None and len(w) != 2:
        raise ctx.fail(f"w must be [N, K], got {format_shape(w)}")
    if x is not None and not x:
        raise ctx.fail("x must have rank >= 1, got a scalar")
    if x is None or w is None:
        return [TensorType(dtype, None)]
    _same(ctx, x[-1], w[1], "x dim -1 and w dim 1 (K)")
    _check_vector(ctx, 2, w[0], "b")
    return [TensorType(dtype, (*x[:-1], w[0]))]


def _linear_cost(ctx: OpContext) -> Flops:
    out = _numel(_linear_infer(ctx)[0].shape)
    w = ctx.input(1).shape
    return Flops(macs=out * _numel(w[1:] if w else None), other=out if ctx.has_input(2) else 0)


def _linear_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    y = np.matmul(_need(xs, 0), _need(xs, 1).T)
    b = _opt(xs, 2)
    return _result(y if b is None else y + b, ctx)


def _linear_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    x, w, b = xs[0], xs[1], _opt_value(xs, 2)
    assert x is not None and w is not None
    y = gb.op("matmul", [x, gb.op("permute", [w], {"perm": (1, 0)})])
    return [y if b is None else gb.op("add", [y, b])]


define("linear", Category.MATMUL, inputs=inputs("x", "w", "b?"), infer=_linear_infer,
       cost=_linear_cost, reference=_linear_ref, decompose=_linear_decompose,
       cost_doc="macs = (numel(x) / K) * N * K; other = numel(y) for the bias add when b is "
                "present",
       doc="Fully connected layer y = x @ w^T + b with x [..., K], w [N, K], b [N] "
           "(torch.nn.functional.linear).")


# -- grouped matmul (mixture-of-experts expert compute) ---------------------------------------

def _grouped_matmul_infer(ctx: OpContext) -> list[TensorType]:
    x_t, w_t, offs_t = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = promote([x_t, w_t], _where(ctx))
    if not offs_t.dtype.is_integer:
        raise ctx.fail(f"offs must be integers, got {offs_t.dtype.short}")
    x, w, offs = x_t.shape, w_t.shape, offs_t.shape
    if x is not None and len(x) != 2:
        raise ctx.fail(f"x must be [S, K], got {format_shape(x)} (only the 2-D x 3-D grouped "
                       "matmul is supported)")
    if w is not None and len(w) != 3:
        raise ctx.fail(f"w must be [G, K, N], got {format_shape(w)} (only the 2-D x 3-D "
                       "grouped matmul is supported)")
    if offs is not None and len(offs) != 1:
        raise ctx.fail(f"offs must be a vector [G], got {format_shape(offs)}")
    if w is not None:
        if w[0] == 0:
            raise ctx.fail("w has no groups (G = 0)")
        if offs is not None:
            _same(ctx, offs[0], w[0], "offs length and w dim 0 (G)")
        if x is not None:
            k = 2 if ctx.attrs["transpose_w"] else 1
            _same(ctx, x[1], w[k], f"x dim 1 and w dim {k} (K)")
    if x is None or w is None:
        return [TensorType(dtype, None)]
    return [TensorType(dtype, (x[0], w[1] if ctx.attrs["transpose_w"] else w[2]))]


def _grouped_matmul_cost(ctx: OpContext) -> Flops:
    """macs = S * K * N: each row of x meets exactly one group's [K, N] matrix (rows past
    offs[-1] meet none, but how many there are is data: the bound S is counted). Bytes:
    x, offs and the output whole; of w at most min(G, S) groups, since a group with no
    rows is not read (which groups are empty is data: the bound is counted)."""
    x, w = ctx.input(0).shape, ctx.input(1).shape
    if x is None or w is None:
        return Flops()
    macs = _numel(x) * _numel(w[1:2] if ctx.attrs["transpose_w"] else w[2:])
    groups = _static((w[0], x[0]))
    per_group = _numel(w[1:]) * ctx.input(1).dtype.itemsize
    if groups is None or not per_group:
        return Flops(macs=macs)
    return Flops(macs=macs, reads=(None, min(groups) * per_group))


def _group_of_rows(offs: np.ndarray, rows: int, where: str) -> np.ndarray:
    """Group index of each row: the number of offsets <= the row, clamped to G - 1; -1 for
    rows at or past offs[-1] (they belong to no group)."""
    offs = offs.astype(np.int64)
    if offs.size and (np.any(np.diff(offs) < 0) or offs[0] < 0):
        raise OpError(f"{where}: offs must be non-negative and non-decreasing (cumulative "
                      f"row counts), got {offs.tolist()}")
    index = np.arange(rows)
    group = np.minimum(np.searchsorted(offs, index, side="right"), max(offs.size - 1, 0))
    end = int(offs[-1]) if offs.size else 0
    return np.where(index < end, group, -1)


def _grouped_matmul_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x, w, offs = _need(xs, 0), _need(xs, 1), xs[2]
    assert offs is not None
    group = _group_of_rows(offs, x.shape[0], ctx.where or "grouped_matmul")
    if attrs["transpose_w"]:
        w = np.swapaxes(w, 1, 2)
    y = np.zeros((x.shape[0], w.shape[2]), np.result_type(x, w))
    for g in range(w.shape[0]):
        rows = group == g
        if rows.any():
            y[rows] = x[rows] @ w[g]
    return _result(y, ctx)


def _grouped_matmul_decompose(gb: GraphBuilder, xs: list[Value | None],
                              attrs: Attrs) -> list[Value]:
    """Row r's group g = #(offs <= r) clamped to G - 1; y[r] = x[r] @ w[g] as a batched
    matmul of the gathered [S, K, N] weights; rows at or past offs[-1] set to zero."""
    x, w, offs = xs[0], xs[1], xs[2]
    assert x is not None and w is not None and offs is not None
    x_shape, w_shape = _type(x).shape, _type(w).shape
    if x_shape is None or w_shape is None or not isinstance(x_shape[0], int) \
            or not isinstance(w_shape[0], int):
        raise OpError("grouped_matmul: the decomposition needs a static row count S and "
                      "group count G")
    rows, groups = x_shape[0], w_shape[0]
    offs64 = gb.op("cast", [offs], {"dtype": DType.INT64})
    index = gb.constant(np.arange(rows, dtype=np.int64).reshape(rows, 1), "row_index")
    passed = gb.op("cast", [gb.op("less_equal", [gb.op("unsqueeze", [offs64], {"axes": (0,)}),
                                                 index])], {"dtype": DType.INT64})
    group = gb.op("minimum", [gb.op("reduce_sum", [passed], {"axes": (1,), "keepdims": False}),
                              gb.constant(np.array(groups - 1, np.int64), "last_group")])
    picked = gb.op("gather", [w, group], {"axis": 0})  # [S, K, N] ([S, N, K] transposed)
    if attrs["transpose_w"]:
        y = gb.op("matmul", [picked, gb.op("unsqueeze", [x], {"axes": (2,)})])  # [S, N, 1]
        y = gb.op("squeeze", [y], {"axes": (2,)})
    else:
        y = gb.op("matmul", [gb.op("unsqueeze", [x], {"axes": (1,)}), picked])  # [S, 1, N]
        y = gb.op("squeeze", [y], {"axes": (1,)})
    end = gb.op("slice", [offs64], {"starts": (groups - 1,), "ends": (groups,), "axes": (0,)})
    inside = gb.op("less", [index, gb.op("unsqueeze", [end], {"axes": (0,)})])  # [S, 1]
    return [gb.op("where", [inside, y, _scalar(gb, 0.0, y, "zero")])]


define("grouped_matmul", Category.MATMUL, inputs=inputs("x", "w", "offs"),
       attrs=(attr("transpose_w", AttrKind.BOOL, False,
                   "w is [G, N, K] and each group's matrix is used transposed"),),
       infer=_grouped_matmul_infer, cost=_grouped_matmul_cost, reference=_grouped_matmul_ref,
       decompose=_grouped_matmul_decompose,
       cost_doc="macs = S * K * N (each row meets one group's matrix); other = 0; bytes read: "
                "x, offs and at most min(G, S) groups of w (a group with no rows is not read)",
       doc="Grouped matrix product of x [S, K] with w [G, K, N] (mixture-of-experts experts): "
           "offs [G] are cumulative row counts, rows offs[g-1] <= r < offs[g] (r < offs[0] "
           "for g = 0) use w[g]: y[r] = x[r] @ w[g] (w[g]^T with transpose_w, w then "
           "[G, N, K]). Rows "
           "at or past offs[-1] are zero (torch's aten::_grouped_mm leaves them unwritten, "
           "transformers' grouped_mm_fallback zeroes them). offs must be non-negative and "
           "non-decreasing.")


# -- sliding windows (convolution and pooling) ---------------------------------------------------

@dataclass(frozen=True)
class _Window:
    """Sliding-window geometry shared by conv and pooling, one entry per spatial axis."""

    kernel: tuple[Dim, ...]
    strides: tuple[int, ...]
    begins: tuple[int, ...]
    ends: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False

    @classmethod
    def of(cls, attrs: Attrs, kernel: Sequence[Dim], where: str,
           default_strides: Sequence[int] | None = None) -> _Window:
        """Read strides/pads/dilations attributes (empty = defaults) and check their lengths."""
        d = len(kernel)

        def spatial(name: str, defaults: Sequence[int]) -> tuple[int, ...]:
            given = tuple(attrs.get(name, ()))
            if not given:
                return tuple(defaults)
            if len(given) != len(defaults):
                raise OpError(f"{where}: {name} needs {len(defaults)} values for {d} spatial "
                              f"dims, got {list(given)}")
            return given

        strides = spatial("strides", default_strides or (1,) * d)
        dilations = spatial("dilations", (1,) * d)
        pads = spatial("pads", (0,) * (2 * d))
        if min((*strides, *dilations), default=1) < 1 or min(pads, default=0) < 0:
            raise OpError(f"{where}: strides and dilations must be >= 1 and pads >= 0, got "
                          f"strides {list(strides)}, dilations {list(dilations)}, "
                          f"pads {list(pads)}")
        return cls(tuple(kernel), strides, pads[:d], pads[d:], dilations,
                   bool(attrs.get("ceil_mode", False)))

    def extent(self, axis: int) -> int:
        """Input span of one (dilated) window; the kernel must be static."""
        k = self.kernel[axis]
        assert isinstance(k, int)
        return self.dilations[axis] * (k - 1) + 1

    def out_dim(self, axis: int, size: Dim) -> Dim:
        """Number of windows along `axis` (0 when none fits; None when unknown)."""
        if not isinstance(self.kernel[axis], int):
            return None
        stride, begin = self.strides[axis], self.begins[axis]
        pads = begin + self.ends[axis]
        if not isinstance(size, int):  # symbolic: only size-preserving windows are known
            return size if stride == 1 and pads == self.extent(axis) - 1 else None
        span = size + pads - self.extent(axis)
        if not self.ceil_mode:
            return span // stride + 1 if span >= 0 else 0
        # ceil mode: a window may overhang the end (even be wider than the padded input,
        # as HF EfficientNet's pooler of kernel 1280 over 7 x 7), as long as it starts in it
        out = -(-span // stride) + 1
        # PyTorch: the last window must start inside the input or the left padding
        out = out - 1 if (out - 1) * stride >= size + begin else out
        return max(out, 0)

    def taps(self, axis: int, size: Dim) -> int:
        """Kernel taps along `axis` that can land in the padded input: the kernel size,
        less the taps of a ceil-mode window wider than the padded input (static sizes)."""
        k = self.kernel[axis]
        assert isinstance(k, int)
        if not isinstance(size, int):
            return k
        padded = size + self.begins[axis] + self.ends[axis]
        return min(k, (padded - 1) // self.dilations[axis] + 1)

    def transposed_dim(self, axis: int, size: Dim, output_padding: int) -> Dim:
        """Output size of the transposed convolution along `axis`."""
        if not isinstance(self.kernel[axis], int):
            return None
        grow = (self.extent(axis) + output_padding - self.begins[axis] - self.ends[axis])
        if isinstance(size, int):
            return (size - 1) * self.strides[axis] + grow
        return size if self.strides[axis] == 1 and grow == 1 else None

    def spatial_out(self, ctx: OpContext, sizes: Sequence[Dim]) -> tuple[Dim, ...]:
        out = tuple(self.out_dim(i, n) for i, n in enumerate(sizes))
        if any(isinstance(o, int) and o < 1 for o in out):
            raise ctx.fail(f"window (kernel {format_shape(self.kernel)}, dilations "
                           f"{list(self.dilations)}) does not fit spatial input "
                           f"{format_shape(sizes)} with pads {list(self.begins + self.ends)}")
        return out

    def windows(self, x: np.ndarray, fill: float) -> np.ndarray:
        """A strided view [N, C, *out, *kernel] of the windows over x[N, C, *spatial],
        padded with `fill` (extra padding at the end covers ceil-mode windows)."""
        sizes = x.shape[2:]
        outs = _static([self.out_dim(i, n) for i, n in enumerate(sizes)])
        assert outs is not None
        # a ceil-mode window wider than the padded input (then the only one) is cut to the
        # taps that land in it: the rest would only read `fill`
        extents = tuple(self.dilations[i] * (self.taps(i, n) - 1) + 1
                        for i, n in enumerate(sizes))
        pads = [(0, 0), (0, 0)]
        for i, (n, o) in enumerate(zip(sizes, outs, strict=True)):
            needed = (o - 1) * self.strides[i] + extents[i]
            pads.append((self.begins[i], max(0, needed - n - self.begins[i])))
        padded = np.pad(x, pads, constant_values=fill) if any(p != (0, 0) for p in pads) else x
        view = sliding_window_view(padded, extents, axis=tuple(range(2, x.ndim)))
        index = ((slice(None),) * 2
                 + tuple(slice(0, (o - 1) * s + 1, s)
                         for o, s in zip(outs, self.strides, strict=True))
                 + tuple(slice(None, None, d) for d in self.dilations))
        return view[index]


# -- convolution -------------------------------------------------------------------------------

_CONV_ATTRS = (
    attr("strides", AttrKind.INTS, (), "per spatial dim; empty = all 1", empty_means=1),
    attr("pads", AttrKind.INTS, (), "all begins then all ends (ONNX order); empty = no padding",
         empty_means=0),
    attr("dilations", AttrKind.INTS, (), "per spatial dim; empty = all 1", empty_means=1),
    attr("groups", AttrKind.INT, 1, "channel groups; groups = C is depthwise"),
)


def _conv_shapes(ctx: OpContext) -> tuple[DType, tuple[Dim, ...], tuple[Dim, ...]] | None:
    """Output dtype and checked x / w shapes of conv and conv_transpose (None: rank unknown)."""
    types = [ctx.input(i) for i in range(3) if ctx.has_input(i)]
    dtype = promote(types, _where(ctx))
    x, w = _nchw(ctx), ctx.input(1).shape
    if x is None or w is None:
        return None
    if len(w) != len(x):
        raise ctx.fail(f"w must have the rank of x ({len(x)}), got {format_shape(w)}")
    if ctx.attrs["groups"] < 1:
        raise ctx.fail(f"groups must be >= 1, got {ctx.attrs['groups']}")
    return dtype, x, w


def _conv_infer(ctx: OpContext) -> list[TensorType]:
    shapes = _conv_shapes(ctx)
    if shapes is None:
        return [TensorType(promote([ctx.input(0), ctx.input(1)], _where(ctx)), None)]
    dtype, x, w = shapes
    groups = ctx.attrs["groups"]
    if isinstance(w[1], int):
        _same(ctx, x[1], w[1] * groups, "input channels (x dim 1) and w dim 1 * groups")
    if isinstance(w[0], int) and w[0] % groups:
        raise ctx.fail(f"output channels {w[0]} are not divisible by groups {groups}")
    _check_vector(ctx, 2, w[0], "b")
    window = _Window.of(ctx.attrs, w[2:], _where(ctx))
    return [TensorType(dtype, (x[0], w[0], *window.spatial_out(ctx, x[2:])))]


def _conv_cost(ctx: OpContext) -> Flops:
    out = _numel(_conv_infer(ctx)[0].shape)
    w = ctx.input(1).shape
    return Flops(macs=out * _numel(None if w is None else w[1:]),
                 other=out if ctx.has_input(2) else 0)


def _conv_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    """im2col per group (a strided window view, copied once) and one batched matmul."""
    x, w, b = _need(xs, 0), _need(xs, 1), _opt(xs, 2)
    g, d = attrs["groups"], x.ndim - 2
    n, c, cout = x.shape[0], x.shape[1], w.shape[0]
    cols = _Window.of(attrs, w.shape[2:], ctx.where).windows(x, 0)  # [N, C, *out, *kernel]
    outs = cols.shape[2:2 + d]
    cols = cols.reshape(n, g, c // g, *cols.shape[2:])
    spatial = tuple(range(3, 3 + d))
    kernel = tuple(range(3 + d, 3 + 2 * d))
    cols = cols.transpose(1, 0, *spatial, 2, *kernel).reshape(g, n * math.prod(outs), -1)
    weights = w.reshape(g, cout // g, -1).transpose(0, 2, 1)  # [G, Cin/G * kernel, Cout/G]
    y = np.matmul(cols, weights).reshape(g, n, *outs, cout // g)
    y = y.transpose(1, 0, 2 + d, *range(2, 2 + d)).reshape(n, cout, *outs)
    if b is not None:
        y = y + b.reshape(cout, *(1,) * d)
    return _result(y, ctx)


define("conv", Category.CONV, inputs=inputs("x", "w", "b?"), attrs=_CONV_ATTRS,
       infer=_conv_infer, cost=_conv_cost, reference=_conv_ref,
       cost_doc="macs = N * Cout * prod(out spatial) * (Cin / groups) * prod(kernel); "
                "other = numel(y) for the bias add when b is present",
       doc="N-d convolution (cross-correlation) of x [N, C, *spatial] with w "
           "[Cout, C / groups, *kernel] plus optional b [Cout]. Output spatial size = "
           "floor((in + pad_begin + pad_end - dilation * (k - 1) - 1) / stride) + 1.")


def _conv_transpose_infer(ctx: OpContext) -> list[TensorType]:
    shapes = _conv_shapes(ctx)
    if shapes is None:
        return [TensorType(promote([ctx.input(0), ctx.input(1)], _where(ctx)), None)]
    dtype, x, w = shapes
    groups = ctx.attrs["groups"]
    _same(ctx, x[1], w[0], "input channels (x dim 1) and w dim 0")
    if isinstance(w[0], int) and w[0] % groups:
        raise ctx.fail(f"input channels {w[0]} are not divisible by groups {groups}")
    cout = mul_dims([w[1], groups])
    _check_vector(ctx, 2, cout, "b")
    window = _Window.of(ctx.attrs, w[2:], _where(ctx))
    d = len(x) - 2
    out_pad = ctx.attrs["output_padding"] or (0,) * d
    if len(out_pad) != d:
        raise ctx.fail(f"output_padding needs {d} values, got {list(out_pad)}")
    for p, s, dil in zip(out_pad, window.strides, window.dilations, strict=True):
        if not 0 <= p < max(s, dil):
            raise ctx.fail(f"output_padding {list(out_pad)} must be >= 0 and smaller than "
                           "the stride or the dilation")
    spatial = tuple(window.transposed_dim(i, n, p) for i, (n, p) in enumerate(zip(x[2:], out_pad,
                                                                                  strict=True)))
    if any(isinstance(o, int) and o < 1 for o in spatial):
        raise ctx.fail(f"output spatial size {format_shape(spatial)} is empty")
    return [TensorType(dtype, (x[0], cout, *spatial))]


def _conv_transpose_cost(ctx: OpContext) -> Flops:
    out = _numel(_conv_transpose_infer(ctx)[0].shape)
    w = ctx.input(1).shape
    return Flops(macs=_numel(ctx.input(0).shape) * _numel(None if w is None else w[1:]),
                 other=out if ctx.has_input(2) else 0)


def _conv_transpose_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    """One batched matmul gives every (input pixel, kernel tap) product; each tap is then
    scatter-added into the uncropped output at its strided offset (col2im)."""
    x, w, b = _need(xs, 0), _need(xs, 1), _opt(xs, 2)
    g, d = attrs["groups"], x.ndim - 2
    n, c, ins = x.shape[0], x.shape[1], x.shape[2:]
    kernel = w.shape[2:]
    cout = w.shape[1] * g
    window = _Window.of(attrs, kernel, ctx.where)
    out_pad = attrs["output_padding"] or (0,) * d
    outs = _static([window.transposed_dim(i, s, p) for i, (s, p) in enumerate(zip(ins, out_pad,
                                                                                 strict=True))])
    assert outs is not None
    rows = x.reshape(n, g, c // g, -1).transpose(1, 0, 3, 2).reshape(g, -1, c // g)
    taps = np.matmul(rows, w.reshape(g, c // g, -1))  # [G, N * prod(in), Cout/G * prod(k)]
    taps = taps.reshape(g, n, *ins, cout // g, *kernel)
    taps = taps.transpose(1, 0, 2 + d, *range(3 + d, 3 + 2 * d), *range(2, 2 + d))
    taps = taps.reshape(n, cout, *kernel, *ins)
    full_sizes = [max((i - 1) * s + window.extent(a), bg + o)
                  for a, (i, s, bg, o) in enumerate(zip(ins, window.strides, window.begins,
                                                        outs, strict=True))]
    full = np.zeros((n, cout, *full_sizes), dtype=taps.dtype)
    for tap in np.ndindex(*kernel):
        target = tuple(slice(k * dil, k * dil + (i - 1) * s + 1, s) for k, dil, i, s in
                       zip(tap, window.dilations, ins, window.strides, strict=True))
        full[(slice(None), slice(None), *target)] += taps[(slice(None), slice(None), *tap)]
    y = full[(slice(None), slice(None),
              *(slice(bg, bg + o) for bg, o in zip(window.begins, outs, strict=True)))]
    if b is not None:
        y = y + b.reshape(cout, *(1,) * d)
    return _result(y, ctx)


define("conv_transpose", Category.CONV, inputs=inputs("x", "w", "b?"),
       attrs=(*_CONV_ATTRS,
              attr("output_padding", AttrKind.INTS, (),
                   "extra size at the end of each spatial dim; empty = zeros", empty_means=0)),
       infer=_conv_transpose_infer, cost=_conv_transpose_cost, reference=_conv_transpose_ref,
       cost_doc="macs = N * Cin * prod(in spatial) * (Cout / groups) * prod(kernel) (torch's "
                "flop counter / 2); other = numel(y) for the bias add when b is present",
       doc="N-d transposed convolution (gradient of conv w.r.t. its input) of x [N, Cin, "
           "*spatial] with w [Cin, Cout / groups, *kernel] plus optional b [Cout]. Output "
           "spatial size = (in - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + "
           "output_padding + 1 (PyTorch / ONNX).")


# -- attention -------------------------------------------------------------------------------

def _kv_repeats(q: Sequence[Dim], kv: Sequence[Dim]) -> int:
    """How often grouped-query attention repeats each k/v head (1 when it does not)."""
    if len(q) < 3 or len(kv) < 3:
        return 1
    hq, hkv = q[-3], kv[-3]
    if isinstance(hq, int) and isinstance(hkv, int) and 0 < hkv < hq and hq % hkv == 0:
        return hq // hkv
    return 1


def _repeat_heads(kv: Sequence[Dim], repeats: int) -> tuple[Dim, ...]:
    if repeats == 1:
        return tuple(kv)
    head = kv[-3]
    assert isinstance(head, int)
    return (*kv[:-3], head * repeats, *kv[-2:])


def _attention_infer(ctx: OpContext) -> list[TensorType]:
    q_t, k_t, v_t = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = promote([q_t, k_t, v_t], _where(ctx))
    q, k, v = q_t.shape, k_t.shape, v_t.shape
    if q is None or k is None or v is None:
        return [TensorType(dtype, None)]
    if min(len(q), len(k), len(v)) < 2:
        raise ctx.fail(f"q, k, v must have rank >= 2, got {format_shape(q)}, {format_shape(k)}, "
                       f"{format_shape(v)}")
    _same(ctx, q[-1], k[-1], "q and k feature size E")
    _same(ctx, k[-2], v[-2], "k and v sequence length S")
    lead = broadcast_shapes([q[:-2], _repeat_heads(k, _kv_repeats(q, k))[:-2],
                             _repeat_heads(v, _kv_repeats(q, v))[:-2]], _where(ctx))
    assert lead is not None
    _check_broadcasts_to(ctx, 3, (*lead, q[-2], k[-2]), "mask")
    return [TensorType(dtype, (*lead, q[-2], v[-1]))]


def _attention_cost(ctx: OpContext) -> Flops:
    out = _attention_infer(ctx)[0].shape
    q, k, v = ctx.input(0).shape, ctx.input(1).shape, ctx.input(2).shape
    if out is None or q is None or k is None or v is None:
        return Flops()
    scores = _numel((*out[:-2], q[-2], k[-2]))  # batch * L * S
    return Flops(macs=scores * (_numel(q[-1:]) + _numel(v[-1:])), other=5 * scores)


def _attention_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    q, mask = _need(xs, 0), _opt(xs, 3)
    k, v = (np.repeat(kv, r, axis=-3) if (r := _kv_repeats(q.shape, kv.shape)) > 1 else kv
            for kv in (_need(xs, 1), _need(xs, 2)))
    scale = attrs["scale"] or 1 / math.sqrt(q.shape[-1])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if attrs["causal"]:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    peak = scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores - np.where(np.isneginf(peak), 0, peak))
    total = probs.sum(axis=-1, keepdims=True)
    probs /= np.where(total == 0, 1, total)  # fully masked rows attend nothing: 0, as torch
    return _result(np.matmul(probs, v), ctx)


def _repeat_heads_op(gb: GraphBuilder, q: tuple[Dim, ...], kv: Value, name: str) -> Value:
    """Grouped-query attention: gather each k/v head once per q head that uses it."""
    shape = _type(kv).shape or ()
    repeats = _kv_repeats(q, shape)
    if repeats == 1:
        return kv
    heads = q[-3]
    assert isinstance(heads, int)  # _kv_repeats only repeats static head counts
    index = np.arange(heads, dtype=np.int64) // repeats
    return gb.op("gather", [kv, gb.constant(index, name)], {"axis": len(shape) - 3})


def _attention_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    """matmul, scale, mask (where / add), softmax, matmul. GQA repeats k/v heads with a
    gather; a causal mask becomes a constant, so it needs static L and S."""
    q, k, v, mask = xs[0], xs[1], xs[2], _opt_value(xs, 3)
    assert q is not None and k is not None and v is not None
    qs, ks = _type(q).shape, _type(k).shape
    if qs is None or ks is None or _type(v).shape is None:
        raise OpError("attention: decomposition needs q, k and v of known rank")
    k, v = _repeat_heads_op(gb, qs, k, "k_heads"), _repeat_heads_op(gb, qs, v, "v_heads")
    rank = len(ks)
    kt = gb.op("permute", [k], {"perm": (*range(rank - 2), rank - 1, rank - 2)})
    scale = attrs["scale"] or (1 / math.sqrt(qs[-1]) if isinstance(qs[-1], int) else None)
    if scale is None:
        raise OpError("attention: decomposition needs a static feature size E or a scale")
    scores = gb.op("mul", [gb.op("matmul", [q, kt]), _scalar(gb, scale, q, "scale")])
    masks: list[Value] = []
    if attrs["causal"]:
        length, source = qs[-2], ks[-2]
        if not isinstance(length, int) or not isinstance(source, int):
            raise OpError("attention: decomposing a causal mask needs static L and S")
        masks.append(gb.constant(np.tril(np.ones((length, source), dtype=bool)), "causal"))
    if mask is not None:
        masks.append(mask)
    for m in masks:
        if _type(m).dtype == DType.BOOL:
            scores = gb.op("where", [m, scores, _scalar(gb, -np.inf, scores, "masked")])
        else:
            scores = gb.op("add", [scores, m])
    score_rank = len(_type(scores).shape or ())
    probs = gb.op("softmax", [scores], {"axis": score_rank - 1})
    if mask is not None:  # a fully masked row's softmax is NaN; torch makes it 0
        probs = gb.op("where", [gb.op("isnan", [probs]), _scalar(gb, 0.0, probs, "zero"), probs])
    return [gb.op("matmul", [probs, v])]


define("attention", Category.ATTENTION, inputs=inputs("q", "k", "v", "mask?"),
       attrs=(attr("causal", AttrKind.BOOL, False,
                   "top-left aligned lower-triangular mask (torch's is_causal)"),
              attr("scale", AttrKind.FLOAT, 0.0, "score scale; 0 means 1 / sqrt(E)")),
       infer=_attention_infer, cost=_attention_cost, reference=_attention_ref,
       decompose=_attention_decompose,
       cost_doc="macs = B * L * S * E + B * L * S * Ev (q @ k^T and probs @ v), B = product "
                "of the output's leading dims (q's, unless q itself broadcasts); other = "
                "5 * B * L * S (scale, max, subtract-exp, sum, divide); masking is not counted",
       doc="Scaled dot-product attention softmax(q @ k^T * scale + mask) @ v with q [..., L, "
           "E], k [..., S, E], v [..., S, Ev] -> y [..., L, Ev]. Leading dims broadcast; when "
           "q's head dim (-3) is a multiple of k's / v's, their heads are repeated "
           "(grouped-query attention, torch's enable_gqa). mask is bool (True = attend) or "
           "float (added to the scores), broadcastable to [..., L, S]; fully masked rows give "
           "0 as in torch.")


# -- normalisation ---------------------------------------------------------------------------

def _same_as_x(ctx: OpContext) -> list[TensorType]:
    return [ctx.input(0)]


def _per_element(flops: int, per_optional: int = 0) -> CostFn:
    """Cost of `flops` per element of x, plus `per_optional` for each optional input given."""
    def cost(ctx: OpContext) -> Flops:
        given = sum(ctx.has_input(i) for i in range(1, len(ctx.input_types)))
        return Flops(other=_numel(ctx.input(0).shape) * (flops + per_optional * given))
    return cost


def _channels(ctx: OpContext) -> Dim:
    shape = ctx.input(0).shape
    if shape is not None and len(shape) < 2:
        raise ctx.fail(f"x must be [N, C, ...], got {format_shape(shape)}")
    return None if shape is None else shape[1]


def _per_channel(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """A channel vector shaped to broadcast against x [N, C, ...]."""
    return p.reshape(-1, *(1,) * (x.ndim - 2))


def _batch_norm_infer(ctx: OpContext) -> list[TensorType]:
    channels = _channels(ctx)
    for index, name in enumerate(("scale", "bias", "mean", "var"), start=1):
        _check_vector(ctx, index, channels, name)
    return _same_as_x(ctx)


def _batch_norm_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x, scale, bias, mean, var = (_need(xs, i) for i in range(5))
    a = scale / np.sqrt(var + attrs["epsilon"])
    return _result(x * _per_channel(x, a) + _per_channel(x, bias - mean * a), ctx)


define("batch_norm", Category.NORM, inputs=inputs("x", "scale", "bias", "mean", "var"),
       attrs=(attr("epsilon", AttrKind.FLOAT, 1e-5),),
       infer=_batch_norm_infer, cost=_per_element(2), reference=_batch_norm_ref,
       cost_doc="other = 2 per element (scale and shift folded from the statistics)",
       doc="Inference batch normalisation over channel dim 1 with running statistics: "
           "(x - mean) / sqrt(var + epsilon) * scale + bias.")


def _norm_axes(x: np.ndarray, axis: int) -> tuple[int, ...]:
    return tuple(range(axis % x.ndim, x.ndim))


def _affine(y: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    if scale is not None:
        y = y * scale
    return y if bias is None else y + bias


def _normalise(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    return centred / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + epsilon)


def _trailing_norm_infer(ctx: OpContext) -> list[TensorType]:
    """layer_norm / rms_norm: scale and bias broadcast to x's normalised dims axis..end."""
    x = ctx.input(0).shape
    if x is None:
        return _same_as_x(ctx)
    axis = normalize_axis(ctx.attrs["axis"], len(x), _where(ctx))
    for index, name in enumerate(("scale", "bias")[:len(ctx.input_types) - 1], start=1):
        _check_broadcasts_to(ctx, index, x[axis:], f"{name} (to the normalised dims)")
    return _same_as_x(ctx)


def _layer_norm_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _need(xs, 0)
    y = _normalise(x, _norm_axes(x, attrs["axis"]), attrs["epsilon"])
    return _result(_affine(y, _opt(xs, 1), _opt(xs, 2)), ctx)


_AXIS = attr("axis", AttrKind.INT, -1, "first normalised dim; dims axis..end are normalised")

define("layer_norm", Category.NORM, inputs=inputs("x", "scale?", "bias?"),
       attrs=(_AXIS, attr("epsilon", AttrKind.FLOAT, 1e-5)),
       infer=_trailing_norm_infer, cost=_per_element(5, 1), reference=_layer_norm_ref,
       cost_doc="other = 5 per element (mean, subtract, variance, rsqrt, multiply) + 1 per "
                "element each for scale and bias when present",
       doc="Layer normalisation over dims axis..end: (x - mean) / sqrt(var + epsilon) * "
           "scale + bias, biased variance; scale and bias broadcast to x.shape[axis:].")


def _group_norm_infer(ctx: OpContext) -> list[TensorType]:
    channels, groups = _channels(ctx), ctx.attrs["num_groups"]
    if groups < 1 or (isinstance(channels, int) and channels % groups):
        raise ctx.fail(f"num_groups {groups} must be >= 1 and divide the channels {channels}")
    _check_vector(ctx, 1, channels, "scale")
    _check_vector(ctx, 2, channels, "bias")
    return _same_as_x(ctx)


def _group_norm_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _need(xs, 0)
    grouped = x.reshape(x.shape[0], attrs["num_groups"], -1)
    y = _normalise(grouped, (2,), attrs["epsilon"]).reshape(x.shape)
    scale, bias = _opt(xs, 1), _opt(xs, 2)
    return _result(_affine(y, None if scale is None else _per_channel(x, scale),
                           None if bias is None else _per_channel(x, bias)), ctx)


define("group_norm", Category.NORM, inputs=inputs("x", "scale?", "bias?"),
       attrs=(attr("num_groups", AttrKind.INT, doc="channel groups; must divide C"),
              attr("epsilon", AttrKind.FLOAT, 1e-5)),
       infer=_group_norm_infer, cost=_per_element(5, 1), reference=_group_norm_ref,
       cost_doc="other = 5 per element (as layer_norm) + 1 per element each for scale and "
                "bias when present",
       doc="Group normalisation of x [N, C, ...]: channels split into num_groups groups, each "
           "normalised over its channels and spatial dims; scale and bias are per channel [C].")


def _rms_norm_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _need(xs, 0)
    mean_square = (x * x).mean(axis=_norm_axes(x, attrs["axis"]), keepdims=True)
    return _result(_affine(x / np.sqrt(mean_square + attrs["epsilon"]), _opt(xs, 1), None), ctx)


define("rms_norm", Category.NORM, inputs=inputs("x", "scale?"),
       attrs=(_AXIS, attr("epsilon", AttrKind.FLOAT, 1e-6,
                          "torch has no fixed default; front-ends pass the model's value")),
       infer=_trailing_norm_infer, cost=_per_element(4, 1), reference=_rms_norm_ref,
       cost_doc="other = 4 per element (square, mean, rsqrt, multiply) + 1 per element for "
                "scale when present",
       doc="RMS normalisation over dims axis..end: x / sqrt(mean(x^2) + epsilon) * scale.")


# -- pooling ---------------------------------------------------------------------------------

_POOL_ATTRS = (
    attr("kernel", AttrKind.INTS, doc="window size per spatial dim"),
    attr("strides", AttrKind.INTS, (), "per spatial dim; empty = the kernel"),
    attr("pads", AttrKind.INTS, (), "all begins then all ends (ONNX order); empty = none",
         empty_means=0),
    attr("ceil_mode", AttrKind.BOOL, False,
         "round the output size up; the last window must start inside the input or the "
         "left padding (PyTorch)"),
)


def _pool_window(ctx: OpContext) -> tuple[tuple[Dim, ...] | None, _Window]:
    x, kernel = _nchw(ctx), ctx.attrs["kernel"]
    if min(kernel, default=0) < 1 or (x is not None and len(kernel) != len(x) - 2):
        raise ctx.fail(f"kernel {list(kernel)} needs one size >= 1 per spatial dim of x "
                       f"{format_shape(x)}")
    return x, _Window.of(ctx.attrs, kernel, _where(ctx), default_strides=kernel)


def _pool_infer(ctx: OpContext) -> list[TensorType]:
    x, window = _pool_window(ctx)
    if x is None:
        return _same_as_x(ctx)
    return [TensorType(ctx.input(0).dtype, (*x[:2], *window.spatial_out(ctx, x[2:])))]


def _pool_cost(ctx: OpContext) -> Flops:
    x, window = _pool_window(ctx)
    sizes = x[2:] if x is not None else (None,) * len(ctx.attrs["kernel"])
    taps = math.prod(window.taps(i, n) for i, n in enumerate(sizes))
    return Flops(other=_numel(_pool_infer(ctx)[0].shape) * taps)


def _lowest(dtype: np.dtype) -> float:
    return -np.inf if dtype.kind == "f" else float(np.iinfo(dtype).min)


def _max_pool_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _need(xs, 0)
    window = _Window.of(attrs, attrs["kernel"], ctx.where, default_strides=attrs["kernel"])
    windows = window.windows(x, _lowest(x.dtype))
    return _result(windows.max(axis=tuple(range(x.ndim, windows.ndim))), ctx)


define("max_pool", Category.POOL, inputs=inputs("x"),
       attrs=(*_POOL_ATTRS, attr("dilations", AttrKind.INTS, (),
                                 "per spatial dim; empty = all 1", empty_means=1)),
       infer=_pool_infer, cost=_pool_cost, reference=_max_pool_ref,
       cost_doc="other = numel(y) * prod(kernel taps that can land in the padded input) (one "
                "comparison per window element)",
       doc="N-d max pooling of x [N, C, *spatial]; padding is -inf. Output size as conv, "
           "rounded up with ceil_mode.")


def _avg_pool_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    x = _need(xs, 0)
    window = _Window.of(attrs, attrs["kernel"], ctx.where, default_strides=attrs["kernel"])
    windows = window.windows(x, 0)
    total = windows.sum(axis=tuple(range(x.ndim, windows.ndim)))
    # divisor (PyTorch, ONNX): the window taps inside the padded input, or inside the input
    # itself without count_include_pad; ceil-mode overhang past the end padding never counts
    divisor = np.ones(())
    for axis, size in enumerate(x.shape[2:]):
        start = np.arange(total.shape[2 + axis]) * window.strides[axis] - window.begins[axis]
        taps = start[:, None] + window.dilations[axis] * np.arange(attrs["kernel"][axis])
        low, high = (0, size) if not attrs["count_include_pad"] else \
            (-window.begins[axis], size + window.ends[axis])
        divisor = np.multiply.outer(divisor, ((taps >= low) & (taps < high)).sum(axis=1))
    return _result(total / divisor.astype(total.dtype), ctx)


define("avg_pool", Category.POOL, inputs=inputs("x"),
       attrs=(*_POOL_ATTRS, attr("count_include_pad", AttrKind.BOOL, True,
                                 "whether padded elements count in the divisor"),
              attr("dilations", AttrKind.INTS, (), "per spatial dim; empty = all 1",
                   empty_means=1)),
       infer=_pool_infer, cost=_pool_cost, reference=_avg_pool_ref,
       cost_doc="other = numel(y) * prod(kernel taps that can land in the padded input) (adds "
                "and the divide)",
       doc="N-d average pooling of x [N, C, *spatial] with PyTorch's divisor: the number of "
           "window taps inside the padded input (count_include_pad) or inside the input; "
           "ceil-mode windows overhanging the end padding are clipped. Dilated windows "
           "(ONNX AveragePool 19+) take every dilations-th element.")


def _adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: [floor(i * in / out), ceil((i + 1) * in / out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_infer(ctx: OpContext) -> list[TensorType]:
    x, sizes = _nchw(ctx), ctx.attrs["output_size"]
    if min(sizes, default=0) < 1 or (x is not None and len(sizes) != len(x) - 2):
        raise ctx.fail(f"output_size {list(sizes)} needs one size >= 1 per spatial dim of x "
                       f"{format_shape(x)}")
    return [TensorType(ctx.input(0).dtype, None if x is None else (*x[:2], *sizes))]


def _adaptive_cost(ctx: OpContext) -> Flops:
    return Flops(other=_numel(ctx.input(0).shape))


def _adaptive_reference(reduce: Callable[..., np.ndarray]) -> Callable[[Arrays, Attrs, RefContext],
                                                                        list[np.ndarray]]:
    """Windows are products of per-axis ranges, so the mean / max is taken axis by axis."""
    def reference(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
        y = _need(xs, 0)
        for axis, out in enumerate(attrs["output_size"], start=2):
            lead = (slice(None),) * axis
            y = np.concatenate([reduce(y[(*lead, slice(s, e))], axis=axis, keepdims=True)
                                for s, e in _adaptive_windows(y.shape[axis], out)], axis=axis)
        return _result(y, ctx)
    return reference


def _adaptive_avg_decompose(gb: GraphBuilder, xs: list[Value | None],
                            attrs: Attrs) -> list[Value]:
    """avg_pool when every input size is a multiple of its output size; otherwise one
    matmul per axis with a constant averaging matrix (exact for any sizes)."""
    x = xs[0]
    assert x is not None
    x_type = _type(x)
    sizes, outs = _static((x_type.shape or ())[2:]), attrs["output_size"]
    if sizes is None or x_type.shape is None:
        raise OpError("adaptive_avg_pool: decomposition needs static spatial dims")
    if all(n % o == 0 for n, o in zip(sizes, outs, strict=True)):
        kernel = tuple(n // o for n, o in zip(sizes, outs, strict=True))
        return [gb.op("avg_pool", [x], {"kernel": kernel, "strides": kernel})]
    rank, y = len(x_type.shape), x
    for axis, (n, o) in enumerate(zip(sizes, outs, strict=True), start=2):
        if n == o:
            continue
        matrix = np.zeros((n, o), dtype=x_type.dtype.numpy)
        for i, (s, e) in enumerate(_adaptive_windows(n, o)):
            matrix[s:e, i] = 1 / (e - s)
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        last = axis == rank - 1
        moved = y if last else gb.op("permute", [y], {"perm": tuple(perm)})
        pooled = gb.op("matmul", [moved, gb.constant(matrix, "pool_matrix")])
        y = pooled if last else gb.op("permute", [pooled], {"perm": tuple(perm)})
    return [y]


_OUTPUT_SIZE = attr("output_size", AttrKind.INTS, doc="output size per spatial dim")

define("adaptive_avg_pool", Category.POOL, inputs=inputs("x"), attrs=(_OUTPUT_SIZE,),
       infer=_adaptive_infer, cost=_adaptive_cost, reference=_adaptive_reference(np.mean),
       decompose=_adaptive_avg_decompose,
       cost_doc="other = numel(x) (each input element is added about once)",
       doc="Adaptive average pooling of x [N, C, *spatial] to output_size; output i of a dim "
           "averages inputs floor(i * in / out) to ceil((i + 1) * in / out) - 1 (PyTorch).")

define("adaptive_max_pool", Category.POOL, inputs=inputs("x"), attrs=(_OUTPUT_SIZE,),
       infer=_adaptive_infer, cost=_adaptive_cost, reference=_adaptive_reference(np.max),
       cost_doc="other = numel(x) (each input element is compared about once)",
       doc="Adaptive max pooling of x [N, C, *spatial] to output_size, with the windows of "
           "adaptive_avg_pool.")


# -- embedding -------------------------------------------------------------------------------

def _embedding_infer(ctx: OpContext) -> list[TensorType]:
    table, indices = ctx.input(0), ctx.input(1)
    if table.shape is not None and len(table.shape) != 2:
        raise ctx.fail(f"table must be [V, D], got {format_shape(table.shape)}")
    if not indices.dtype.is_integer:
        raise ctx.fail(f"indices must be integers, got {indices.dtype.short}")
    if table.shape is None or indices.shape is None:
        return [TensorType(table.dtype, None)]
    return [TensorType(table.dtype, (*indices.shape, table.shape[1]))]


def _embedding_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    table, indices = xs[0], xs[1]
    assert table is not None and indices is not None
    return _result(np.take(table, indices, axis=0), ctx)


def _embedding_decompose(gb: GraphBuilder, xs: list[Value | None], attrs: Attrs) -> list[Value]:
    table, indices = xs[0], xs[1]
    assert table is not None and indices is not None
    return [gb.op("gather", [table, indices], {"axis": 0})]


define("embedding", Category.DATA_MOVEMENT, inputs=inputs("table", "indices"),
       infer=_embedding_infer, cost=lambda ctx: Flops(reads=lookup_reads(ctx)),
       reference=_embedding_ref, decompose=_embedding_decompose,
       cost_doc="other = 0 (a row gather; bytes only: reads the rows it gathers, not the "
                "table, and the indices)",
       doc="Embedding lookup y = table[indices]: rows of table [V, D] for integer indices, "
           "giving indices.shape + [D].")


# -- resize ----------------------------------------------------------------------------------

_CUBIC_A = -0.75  # torch's bicubic and ONNX Resize's default cubic_coeff_a


_RESIZE_PARAMS = ((1, "scales"), (2, "sizes"))


def _resize_spatial(values: tuple[Any, ...], shape: Sequence[Dim], name: str,
                    where: str) -> tuple[Any, ...]:
    """Per-spatial-dim values of `name` given per spatial dim or per dim of x (then N and
    C must stay: scale 1, or size = x's dim)."""
    rank = len(shape)
    if len(values) == rank and rank > 2:
        keep = (1.0, 1.0) if name == "scales" else tuple(shape[:2])
        if any(isinstance(k, int | float) and v != k for v, k in zip(values[:2], keep,
                                                                      strict=True)):
            raise OpError(f"{where}: {name} {list(values)} resize the batch or channel dim")
        return values[2:]
    if len(values) != rank - 2:
        raise OpError(f"{where}: {name} needs one value per spatial dim of x "
                      f"{format_shape(shape)}, got {list(values)}")
    return values


def _resize_given(ctx: OpContext) -> tuple[str, tuple[Any, ...] | None]:
    """Which of scales / sizes is given (input, else attribute) and its per-spatial-dim
    values; None when they are known only at run time."""
    found: dict[str, tuple[Any, ...] | None] = {}
    for index, name in _RESIZE_PARAMS:
        if ctx.has_input(index):
            t = ctx.input(index)
            wanted = t.dtype.is_float if name == "scales" else t.dtype.is_integer
            if not wanted or (t.rank is not None and t.rank != 1):
                kind = "float" if name == "scales" else "integer"
                raise ctx.fail(f"input {name} must be a 1-D {kind} tensor, got {t}")
            value = ctx.constant(index)
            convert = float if name == "scales" else int
            found[name] = None if value is None else tuple(
                convert(v) for v in np.asarray(value).reshape(-1))
        elif ctx.attrs[name]:
            found[name] = tuple(ctx.attrs[name])
    if len(found) != 1:
        raise ctx.fail("give exactly one of sizes and scales (attribute or input)")
    name, values = next(iter(found.items()))
    x = _nchw(ctx)
    if values is not None:
        if min(values, default=1) <= 0:
            raise ctx.fail(f"sizes and scales must be positive, got {list(values)}")
        if x is not None:
            values = _resize_spatial(values, x, name, _where(ctx))
    return name, values


def _resize_infer(ctx: OpContext) -> list[TensorType]:
    name, values = _resize_given(ctx)
    x = _nchw(ctx)
    dtype = ctx.input(0).dtype
    if x is None:
        return _same_as_x(ctx)
    if values is None:
        return [TensorType(dtype, (*x[:2], *(None,) * (len(x) - 2)))]
    if name == "sizes":
        return [TensorType(dtype, (*x[:2], *values))]
    spatial = tuple(math.floor(n * s) if isinstance(n, int) else n if s == 1.0 else None
                    for n, s in zip(x[2:], values, strict=True))
    if any(isinstance(o, int) and o < 1 for o in spatial):
        raise ctx.fail(f"scales {list(values)} give an empty output from {format_shape(x)}")
    return [TensorType(dtype, (*x[:2], *spatial))]


def _resize_cost(ctx: OpContext) -> Flops:
    taps = {"nearest": 0, "linear": 2, "cubic": 4}[ctx.attrs["mode"]]
    shape = _resize_infer(ctx)[0].shape
    return Flops(other=0 if not taps or shape is None else
                 _numel(shape) * 2 * taps ** (len(shape) - 2))


def resized_length(size: int, out: int, inverse: float) -> float:
    """ONNX's `length_resized` of one axis: size * scale, fractional when a scale does not
    divide evenly (size 4 at scale 0.6 is 2.4 long, 2 elements), else `out`."""
    length = size / inverse
    return float(out) if abs(length - out) <= 1e-6 * max(out, 1) else length


def _source_coords(mode: str, size: int, out: int, inverse: float) -> np.ndarray:
    """Input coordinate of each output index, in float32 like torch and onnxruntime;
    `inverse` is 1 / scale. align_corners divides by ONNX's fractional resized length
    (`resized_length`), as ONNX's reference does."""
    o = np.arange(out, dtype=np.float32)
    if mode == "align_corners":
        length = resized_length(size, out, inverse)
        return o * np.float32((size - 1) / (length - 1)) if out > 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o * np.float32(inverse)
    if mode == "pytorch_half_pixel" and out == 1:
        return np.zeros_like(o)
    return (o + np.float32(0.5)) * np.float32(inverse) - np.float32(0.5)


_ROUNDING: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "floor": np.floor,
    "ceil": np.ceil,
    "round_prefer_floor": lambda x: np.ceil(x - np.float32(0.5)),
    "round_prefer_ceil": lambda x: np.floor(x + np.float32(0.5)),
}


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Keys cubic convolution weights of the taps at offsets -1, 0, 1, 2 from floor(x)."""
    a = _CUBIC_A

    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _resize_taps(attrs: Attrs, size: int, out: int,
                 inverse: float) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights [out, taps] of one spatial axis."""
    x = _source_coords(attrs["coordinate_mode"], size, out, inverse)
    if attrs["mode"] == "nearest":
        index = np.clip(_ROUNDING[attrs["nearest_mode"]](x), 0, size - 1).astype(np.int64)[:, None]
        return index, np.ones(index.shape, dtype=np.float32)
    if attrs["mode"] == "linear":
        x = np.clip(x, 0, size - 1)
        low = np.floor(x)
        t = x - low
        index = np.stack([low, np.minimum(low + 1, size - 1)], axis=-1).astype(np.int64)
        return index, np.stack([1 - t, t], axis=-1)
    low = np.floor(x)
    index = np.clip(low[:, None] + np.arange(-1, 3), 0, size - 1).astype(np.int64)
    return index, _cubic_weights(x - low).astype(np.float32)


def _resize_ref(xs: Arrays, attrs: Attrs, ctx: RefContext) -> list[np.ndarray]:
    """Separable: each spatial axis is interpolated in turn, which equals the N-d
    tensor-product interpolation of ONNX and torch."""
    y = _need(xs, 0)
    ins = y.shape[2:]
    scales, sizes = (_opt(xs, index) for index, _ in _RESIZE_PARAMS)
    if sizes is not None or (scales is None and attrs["sizes"]):
        given = attrs["sizes"] if sizes is None else sizes.reshape(-1).astype(np.int64)
        outs = [int(o) for o in _resize_spatial(tuple(given), y.shape, "sizes", ctx.where)]
        inverses = [n / o for n, o in zip(ins, outs, strict=True)]
    else:
        given = attrs["scales"] if scales is None else scales.reshape(-1)
        factors = [float(f) for f in _resize_spatial(tuple(given), y.shape, "scales",
                                                     ctx.where)]
        outs = [math.floor(n * f) for n, f in zip(ins, factors, strict=True)]
        inverses = [1 / f for f in factors]
    for axis, (n, o, inverse) in enumerate(zip(ins, outs, inverses, strict=True), start=2):
        index, weights = _resize_taps(attrs, n, o, inverse)
        if attrs["mode"] == "nearest":
            y = np.take(y, index[:, 0], axis=axis)
            continue
        weights = weights.astype(y.dtype if y.dtype.kind == "f" else np.float32)
        shape = (o, *(1,) * (y.ndim - 1 - axis))
        y = sum((np.take(y, index[:, t], axis=axis) * weights[:, t].reshape(shape)
                 for t in range(index.shape[1])), start=np.zeros((), dtype=weights.dtype))
    return _result(y, ctx)


define("resize", Category.DATA_MOVEMENT, inputs=inputs("x", "scales?", "sizes?"),
       attrs=(attr("mode", AttrKind.STRING, "nearest", choices=("nearest", "linear", "cubic")),
              attr("sizes", AttrKind.INTS, (), "output spatial sizes (or give scales)"),
              attr("scales", AttrKind.FLOATS, (),
                   "per spatial dim; output = floor(in * scale) (or give sizes)"),
              attr("coordinate_mode", AttrKind.STRING, "half_pixel",
                   choices=("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")),
              attr("nearest_mode", AttrKind.STRING, "floor",
                   choices=("floor", "round_prefer_floor", "round_prefer_ceil", "ceil"))),
       infer=_resize_infer, cost=_resize_cost, reference=_resize_ref,
       cost_doc="other = 0 for nearest; numel(y) * 2 * 2^d for linear and numel(y) * 2 * 4^d "
                "for cubic (a multiply and an add per tap, d spatial dims)",
       doc="Resize the spatial dims of x [N, C, *spatial] as ONNX Resize does (cubic: "
           "coefficient -0.75, edge-clamped taps). The source coordinate of output index o "
           "uses scale = the given scale, else out / in: half_pixel (o + 0.5) / scale - 0.5, "
           "pytorch_half_pixel the same but 0 when out = 1, align_corners o * (in - 1) / "
           "(in * scale - 1) (0 when out = 1; in * scale is fractional when a scale does not "
           "divide evenly, as in ONNX's reference; onnxruntime uses out), asymmetric o / scale. torch's interpolate: nearest = asymmetric + "
           "floor, nearest-exact = half_pixel + round_prefer_ceil, (bi/tri)linear and bicubic "
           "= half_pixel or align_corners, with the scale_factor as scales when given. "
           "Inputs scales (1-D float) and sizes (1-D integer), per spatial dim or per dim of "
           "x with N and C unchanged (ONNX Resize), override the attributes; when their "
           "values are not known constants the spatial dims are unknown.")
