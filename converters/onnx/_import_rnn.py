"""ONNX's recurrent ops RNN, GRU and LSTM written in neutral ops by unrolling the time steps.

The neutral op set has no recurrent op, so a node whose sequence length (dim 0 of X for
layout 0, dim 1 for layout 1) is static becomes its steps: X times W^T once for all steps
(one matmul per direction, then one slice per step), and per step h_{t-1} times R^T, the
biases, the gate activations and the state updates; Y, Y_h and Y_c are built by
unsqueeze + concat. Semantics follow the ONNX operator specification (RNN-14, GRU-14,
LSTM-14 and their earlier versions, which differ only in the `layout` attribute) and, where
the text is silent, onnxruntime's CPU kernels: `clip` bounds the input of every activation,
`input_forget` makes the forget gate 1 - the input gate, and `activation_alpha` /
`activation_beta` are consumed in order by the activations that take them.

Refused, each with a one-line reason in the opaque node: a dynamic sequence length (the
unrolling needs a static one), `sequence_lens` that is not a constant equal to the full
length for every batch entry, an activation the registry cannot express, a zero-length
sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from irbridge.converters.onnx._import_ops import Results, _scalar, handles
from irbridge.converters.onnx.importer import NodeCtx, Unsupported
from irbridge.ir import Value

_PARAMS = {  # activation (lower case) -> defaults of the (alpha, beta) it takes, as onnxruntime
    "sigmoid": (), "tanh": (), "relu": (), "softsign": (), "softplus": (),
    "affine": (1.0, 0.0), "leakyrelu": (0.01,), "thresholdedrelu": (1.0,),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0,),
}


@dataclass(frozen=True)
class _Activation:
    name: str
    alpha: float = 0.0
    beta: float = 0.0


@dataclass(frozen=True)
class _Spec:
    """What differs between the three ops."""
    gates: int                 # gate blocks in W / R / B
    defaults: tuple[str, ...]  # activations per direction


_SPECS = {"RNN": _Spec(1, ("Tanh",)), "GRU": _Spec(3, ("Sigmoid", "Tanh")),
          "LSTM": _Spec(4, ("Sigmoid", "Tanh", "Tanh"))}


def _activations(ctx: NodeCtx, directions: int) -> list[list[_Activation]]:
    """Per direction, the activations (f, g[, h]) with their parameters."""
    per = len(_SPECS[ctx.op_type].defaults)
    names = [str(n) for n in ctx.a("activations", [])] or \
        list(_SPECS[ctx.op_type].defaults) * directions
    if len(names) != per * directions:
        raise Unsupported(f"{len(names)} activations for {directions} direction(s), "
                          f"expected {per * directions}")
    alphas = [float(v) for v in ctx.a("activation_alpha", [])]
    betas = [float(v) for v in ctx.a("activation_beta", [])]
    result: list[_Activation] = []
    for name in names:
        defaults = _PARAMS.get(name.lower())
        if defaults is None:
            raise Unsupported(f"activation {name!r} has no neutral equivalent")
        alpha = alphas.pop(0) if defaults and alphas else (defaults[0] if defaults else 0.0)
        beta = betas.pop(0) if len(defaults) > 1 and betas else \
            (defaults[1] if len(defaults) > 1 else 0.0)
        result.append(_Activation(name.lower(), alpha, beta))
    return [result[d * per:(d + 1) * per] for d in range(directions)]


def _apply(ctx: NodeCtx, act: _Activation, x: Value, clip: float | None) -> Value:
    if clip is not None:
        x = ctx.op("clip", [x], {"min": -clip, "max": clip})
    name = act.name
    if name in ("sigmoid", "tanh", "relu"):
        return ctx.op(name, [x])
    if name == "softplus":
        return ctx.op("softplus", [x])
    if name == "elu":
        return ctx.op("elu", [x], {"alpha": act.alpha})
    if name == "leakyrelu":
        return ctx.op("leaky_relu", [x], {"alpha": act.alpha})
    if name == "hardsigmoid":
        return ctx.op("hardsigmoid", [x], {"alpha": act.alpha, "beta": act.beta})
    if name == "softsign":
        return ctx.op("div", [x, ctx.op("add", [ctx.op("abs", [x]), _scalar(ctx, 1, x)])])
    if name == "thresholdedrelu":
        keep = ctx.op("greater", [x, _scalar(ctx, act.alpha, x)])
        return ctx.op("where", [keep, x, _scalar(ctx, 0, x)])
    if name == "affine":
        return ctx.op("add", [ctx.op("mul", [x, _scalar(ctx, act.alpha, x)]),
                              _scalar(ctx, act.beta, x)])
    assert name == "scaledtanh"
    inner = ctx.op("tanh", [ctx.op("mul", [x, _scalar(ctx, act.beta, x)])])
    return ctx.op("mul", [inner, _scalar(ctx, act.alpha, x)])


class _Unroller:
    """Builds one node's unrolled steps (time-major internally)."""

    def __init__(self, ctx: NodeCtx) -> None:
        self.ctx = ctx
        self.spec = _SPECS[ctx.op_type]
        direction = str(ctx.a("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            raise Unsupported(f"direction {direction!r}")
        self.reverse = [False, True] if direction == "bidirectional" else \
            [direction == "reverse"]
        self.layout = int(ctx.a("layout", 0))
        if self.layout not in (0, 1):
            raise Unsupported(f"layout {self.layout}")
        shape = ctx.shape(0)
        if len(shape) != 3:
            raise Unsupported(f"X must have rank 3, got {len(shape)}")
        seq, batch = (shape[0], shape[1]) if self.layout == 0 else (shape[1], shape[0])
        if not isinstance(seq, int):
            raise Unsupported(f"sequence length {seq} is dynamic; unrolling needs a static "
                              "one")
        if seq == 0:
            raise Unsupported("zero-length sequence")
        self.seq, self.batch = seq, batch
        w_shape = ctx.static(1)
        r_shape = ctx.static(2)
        hidden = int(ctx.a("hidden_size", r_shape[-1]))
        gates = self.spec.gates
        dirs = len(self.reverse)
        if w_shape[:2] != (dirs, gates * hidden) or r_shape != (dirs, gates * hidden, hidden):
            raise Unsupported(f"W {w_shape} / R {r_shape} do not match {dirs} direction(s) "
                              f"of {gates} gate(s) of hidden size {hidden}")
        if not isinstance(shape[2], int) or shape[2] != w_shape[2]:
            raise Unsupported(f"X's input size {shape[2]} does not match W {w_shape}")
        self.hidden = hidden
        self._check_sequence_lens()
        clip = ctx.a("clip")
        self.clip = None if clip is None else float(clip)
        self.acts = _activations(ctx, dirs)
        self.dtype = ctx.dtype(0)

    def _check_sequence_lens(self) -> None:
        ctx = self.ctx
        if not ctx.has(4):
            return
        lens = ctx.const(4)
        if lens is None:
            raise Unsupported("sequence_lens (input 4) is not a constant; only a constant "
                              "equal to the full length for every batch entry is supported")
        flat = np.asarray(lens).reshape(-1)
        if not isinstance(self.batch, int) or flat.size != self.batch \
                or np.any(flat != self.seq):
            raise Unsupported(f"sequence_lens {flat.tolist()} is not the full length "
                              f"{self.seq} for every batch entry")

    # -- parameters of one direction ---------------------------------------------------------
    def transposed(self, index: int, d: int, start: int, stop: int) -> Value:
        """W[d, start:stop]^T or R[d, start:stop]^T: [in, stop - start]."""
        ctx = self.ctx
        data = ctx.const(index)
        if data is not None:
            return ctx.constant(np.ascontiguousarray(np.asarray(data)[d, start:stop].T),
                                self.dtype)
        picked = ctx.op("slice", [ctx.x(index)], {"starts": (d, start), "ends": (d + 1, stop),
                                                  "axes": (0, 1), "steps": (1, 1)})
        return ctx.op("permute", [ctx.op("squeeze", [picked], {"axes": (0,)})],
                      {"perm": (1, 0)})

    def biases(self, d: int, before_reset: bool) -> tuple[Value | None, Value | None]:
        """The bias added to X W^T (all of Wb + Rb, except GRU's Rbh when
        `before_reset`) and the one added to h R_h^T (that Rbh), as [gates * hidden] /
        [hidden] or, for a run-time B, [1, ...]."""
        ctx, hidden, gates = self.ctx, self.hidden, self.spec.gates
        if not ctx.has(3):
            return None, None
        size = gates * hidden
        data = ctx.const(3)
        if data is not None:
            b = np.asarray(data)[d]
            w_b, r_b = b[:size], b[size:]
            if not before_reset:
                return ctx.constant(w_b + r_b, self.dtype), None
            shifted = np.concatenate([r_b[:2 * hidden], np.zeros(hidden, r_b.dtype)])
            return (ctx.constant(w_b + shifted, self.dtype),
                    ctx.constant(r_b[2 * hidden:], self.dtype))

        def part(start: int, stop: int) -> Value:
            return ctx.op("slice", [ctx.x(3)], {"starts": (d, start), "ends": (d + 1, stop),
                                                "axes": (0, 1), "steps": (1, 1)})
        w_b = part(0, size)
        if not before_reset:
            return ctx.op("add", [w_b, part(size, 2 * size)]), None
        zeros = ctx.constant(np.zeros((1, hidden), self.dtype.numpy), self.dtype)
        shifted_v = ctx.op("concat", [part(size, size + 2 * hidden), zeros], {"axis": 1})
        return ctx.op("add", [w_b, shifted_v]), part(size + 2 * hidden, 2 * size)

    def peepholes(self, d: int) -> list[Value | None]:
        """P[d] split into p_i, p_o, p_f (None when P is absent)."""
        ctx, hidden = self.ctx, self.hidden
        if ctx.op_type != "LSTM" or not ctx.has(7):
            return [None, None, None]
        data = ctx.const(7)
        if data is not None:
            return [ctx.constant(np.asarray(data)[d, k * hidden:(k + 1) * hidden], self.dtype)
                    for k in range(3)]
        return [ctx.op("slice", [ctx.x(7)], {"starts": (d, k * hidden),
                                             "ends": (d + 1, (k + 1) * hidden),
                                             "axes": (0, 1), "steps": (1, 1)})
                for k in range(3)]

    def initial(self, index: int, d: int) -> Value:
        """initial_h / initial_c of direction d as [batch, hidden] (zeros when absent; [1,
        hidden] when the batch is dynamic, broadcast by the first step)."""
        ctx = self.ctx
        if not ctx.has(index):
            rows = self.batch if isinstance(self.batch, int) else 1
            return ctx.zeros((rows, self.hidden), self.dtype)
        axis = 0 if self.layout == 0 else 1
        return ctx.op("gather", [ctx.x(index), ctx.constant(np.asarray(d, np.int64))],
                      {"axis": axis})

    # -- the steps ------------------------------------------------------------------------
    def run(self) -> Results:
        ctx = self.ctx
        x = ctx.x(0)
        if self.layout == 1:
            x = ctx.op("permute", [x], {"perm": (1, 0, 2)})
        ys: list[Value] = []
        last_h: list[Value] = []
        last_c: list[Value] = []
        for d, reverse in enumerate(self.reverse):
            steps, h, c = self.direction(x, d, reverse)
            if ctx.used(0):
                ys.append(self.stack(steps, 0))  # [seq, batch, hidden]
            last_h.append(h)
            if c is not None:
                last_c.append(c)
        y = y_h = y_c = None
        if ctx.used(0):
            y = self.stack(ys, 1)  # [seq, dirs, batch, hidden]
            if self.layout == 1:
                y = ctx.op("permute", [y], {"perm": (2, 0, 1, 3)})
        if ctx.used(1):
            y_h = self.state(last_h)
        if ctx.used(2) and last_c:
            y_c = self.state(last_c)
        return [y, y_h, y_c][:len(ctx.node.output)]

    def stack(self, values: list[Value], axis: int) -> Value:
        ctx = self.ctx
        parts = [ctx.op("unsqueeze", [v], {"axes": (axis,)}) for v in values]
        return parts[0] if len(parts) == 1 else ctx.op("concat", parts, {"axis": axis})

    def state(self, values: list[Value]) -> Value:
        """Y_h / Y_c: [dirs, batch, hidden] (layout 0) or [batch, dirs, hidden]."""
        return self.stack(values, 0 if self.layout == 0 else 1)

    def direction(self, x: Value, d: int, reverse: bool
                  ) -> tuple[list[Value], Value, Value | None]:
        """The hidden state of every step (in time order), the last h and the last c."""
        ctx, hidden, gates = self.ctx, self.hidden, self.spec.gates
        op = ctx.op_type
        before_reset = op == "GRU" and bool(ctx.a("linear_before_reset", 0))
        x_bias, h_bias = self.biases(d, before_reset)
        size = gates * hidden
        xw = ctx.op("matmul", [x, self.transposed(1, d, 0, size)])  # [seq, batch, size]
        if x_bias is not None:
            xw = ctx.op("add", [xw, x_bias])
        per_step = ctx.ops("split", [xw], {"axis": 0, "sizes": (1,) * self.seq}, self.seq) \
            if self.seq > 1 else [xw]
        # GRU without linear_before_reset multiplies (r * h) by R_h^T: h meets only R_zr^T
        gru_late = op == "GRU" and not before_reset
        r_t = self.transposed(2, d, 0, 2 * hidden if gru_late else size)
        r_h = self.transposed(2, d, 2 * hidden, size) if gru_late else None
        peep = self.peepholes(d)
        h = self.initial(5, d)
        c = self.initial(6, d) if op == "LSTM" else None
        outputs: list[Value] = [h] * self.seq
        order = range(self.seq - 1, -1, -1) if reverse else range(self.seq)
        f_act, g_act = self.acts[d][0], self.acts[d][-1]  # RNN: f only; GRU: f, g
        for t in order:
            xt = ctx.op("squeeze", [per_step[t]], {"axes": (0,)})
            hr = ctx.op("matmul", [h, r_t])
            if op == "RNN":
                h = _apply(ctx, f_act, ctx.op("add", [xt, hr]), self.clip)
            elif op == "GRU":
                h = self._gru_step(xt, hr, h, h_bias, r_h, f_act, g_act)
            else:
                assert c is not None
                h, c = self._lstm_step(xt, hr, c, peep, d)
            outputs[t] = h
        return outputs, h, c

    def _split(self, value: Value, count: int) -> list[Value]:
        return self.ctx.ops("split", [value], {"axis": -1, "sizes": (self.hidden,) * count},
                            count)

    def _gru_step(self, xt: Value, hr: Value, h: Value, h_bias: Value | None,
                  r_h: Value | None, f_act: _Activation, g_act: _Activation) -> Value:
        """One GRU step; `r_h` (R_h^T) is given without linear_before_reset, when `hr` is
        h R_zr^T only."""
        ctx, clip = self.ctx, self.clip
        xz, xr, xh = self._split(xt, 3)
        hz, hr_, *rest = self._split(hr, 2 if r_h is not None else 3)
        z = _apply(ctx, f_act, ctx.op("add", [xz, hz]), clip)
        r = _apply(ctx, f_act, ctx.op("add", [xr, hr_]), clip)
        if r_h is None:
            hh = rest[0] if h_bias is None else ctx.op("add", [rest[0], h_bias])
            candidate = ctx.op("add", [xh, ctx.op("mul", [r, hh])])
        else:
            candidate = ctx.op("add", [xh, ctx.op("matmul", [ctx.op("mul", [r, h]), r_h])])
        g = _apply(ctx, g_act, candidate, clip)
        # h = (1 - z) * g + z * h = g + z * (h - g)
        return ctx.op("add", [g, ctx.op("mul", [z, ctx.op("sub", [h, g])])])

    def _lstm_step(self, xt: Value, hr: Value, c: Value, peep: list[Value | None], d: int
                   ) -> tuple[Value, Value]:
        ctx, clip = self.ctx, self.clip
        f_act, g_act, h_act = self.acts[d]
        gates = ctx.op("add", [xt, hr])
        gi, go, gf, gc = self._split(gates, 4)
        p_i, p_o, p_f = peep
        if p_i is not None:
            gi = ctx.op("add", [gi, ctx.op("mul", [p_i, c])])
        i = _apply(ctx, f_act, gi, clip)
        if ctx.a("input_forget", 0):
            f = ctx.op("sub", [_scalar(ctx, 1, i), i])
        else:
            if p_f is not None:
                gf = ctx.op("add", [gf, ctx.op("mul", [p_f, c])])
            f = _apply(ctx, f_act, gf, clip)
        cand = _apply(ctx, g_act, gc, clip)
        c = ctx.op("add", [ctx.op("mul", [f, c]), ctx.op("mul", [i, cand])])
        if p_o is not None:
            go = ctx.op("add", [go, ctx.op("mul", [p_o, c])])
        o = _apply(ctx, f_act, go, clip)
        return ctx.op("mul", [o, _apply(ctx, h_act, c, None)]), c


@handles("RNN", "GRU", "LSTM")
def _recurrent(ctx: NodeCtx) -> Results:
    return _Unroller(ctx).run()
