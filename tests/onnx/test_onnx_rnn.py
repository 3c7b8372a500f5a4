"""ONNX's recurrent ops RNN / GRU / LSTM imported by unrolling the time steps
(converters/onnx/_import_rnn.py).

Ground truth is onnxruntime (CPU, one thread) running the original node, and eager torch
for nn.LSTM / nn.GRU exported by torch.onnx's TorchScript exporter. The imported IR runs in
irbridge's executor (numpy references) and, exported again as ONNX, in onnxruntime.

Tolerances: float32, at most 4 steps of O(1) gate values through sigmoid / tanh, whose
kernels differ from numpy's only in summation order and a few ulps of the transcendental
functions: atol 1e-5 + rtol 1e-5 holds with a wide margin, while a wrong gate order, a
missing bias, peephole or reset, or a reversed direction is off by O(0.1). The torch
comparison uses the same tolerance (eager torch and the IR compute the same float32 sums).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnxtools import onnx_model, ort_run, tensor
from torch import nn

from irbridge.converters.onnx import to_onnx
from irbridge.converters.onnx.importer import from_onnx
from irbridge.converters.stablehlo import build_module, evaluate
from irbridge.executor import run_model
from irbridge.ir import Model
from irbridge.summary import summarize

ATOL, RTOL = 1e-5, 1e-5
F = TensorProto.FLOAT
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 6


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _node_model(op: str, *, direction: str = "forward", layout: int = 0, bias: bool = True,
                initial: bool = True, peepholes: bool = False, seed: int = 0,
                weights_as_inputs: bool = False, seq_lens: np.ndarray | None = None,
                seq: int | str = SEQ, **attrs: object
                ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One recurrent node; weights are initializers (or graph inputs), X / initial states
    graph inputs. Returns the model and its feeds."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    x_shape: list[int | str] = [seq, BATCH, INPUT] if layout == 0 else [BATCH, seq, INPUT]
    state_shape = [dirs, BATCH, HIDDEN] if layout == 0 else [BATCH, dirs, HIDDEN]
    steps = seq if isinstance(seq, int) else SEQ
    feeds = {"x": _rand(rng, *[steps if not isinstance(s, int) else s for s in x_shape])}
    weights = {"w": _rand(rng, dirs, gates * HIDDEN, INPUT) * 0.5,
               "r": _rand(rng, dirs, gates * HIDDEN, HIDDEN) * 0.5}
    names = ["x", "w", "r"]
    if bias:
        weights["b"] = _rand(rng, dirs, 2 * gates * HIDDEN)
    names.append("b" if bias else "")
    if seq_lens is not None:
        weights["seq_lens"] = seq_lens
    names.append("seq_lens" if seq_lens is not None else "")
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    for s in states:
        if initial:
            feeds[s] = _rand(rng, *state_shape)
        names.append(s if initial else "")
    if peepholes:
        weights["p"] = _rand(rng, dirs, 3 * HIDDEN)
        names.append("p")
    while names and not names[-1]:
        names.pop()
    outputs = ["y", "y_h", "y_c"][:len(states) + 1]
    node = helper.make_node(op, names, outputs, direction=direction, hidden_size=HIDDEN,
                            **({"layout": layout} if layout else {}), **attrs)
    inputs = [tensor("x", F, x_shape)]
    inputs += [tensor(s, F, state_shape) for s in states if initial]
    initializers: Mapping[str, np.ndarray] = weights
    if weights_as_inputs:
        for k in ("w", "r", "b", "p"):
            if k in weights:
                inputs.append(tensor(k, F, list(weights[k].shape)))
                feeds[k] = weights[k]
        initializers = {k: v for k, v in weights.items() if k not in feeds}
    out_rank = [4, 3, 3]
    proto = onnx_model([node], inputs, [tensor(o, F, [None] * r)
                                        for o, r in zip(outputs, out_rank, strict=False)],
                       initializers, opset=14 if layout else 13)
    return proto, feeds


def _import(proto: onnx.ModelProto) -> Model:
    model, coverage = from_onnx(proto)
    assert coverage.fully_neutral, coverage.lines()
    return model


def _close(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL)


def _time_major_twin(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A layout=1 node as onnxruntime can run it (its CPU kernels refuse layout 1): the
    same node at layout 0 between Transposes of X, the initial states and the outputs
    (ONNX spec: layout 1 holds X as [batch, seq, input], the states as [batch, dirs,
    hidden], Y as [batch, seq, dirs, hidden])."""
    twin = onnx.ModelProto()
    twin.CopyFrom(proto)
    node = twin.graph.node[0]
    kept = [a for a in node.attribute if a.name != "layout"]
    del node.attribute[:]
    node.attribute.extend(kept)
    before, after = [], []
    for index in (0, 5, 6):
        if index < len(node.input) and node.input[index]:
            name = node.input[index]
            before.append(helper.make_node("Transpose", [name], [name + "_tm"], perm=[1, 0, 2]))
            node.input[index] = name + "_tm"
    for index, name in enumerate(node.output):
        if not name:
            continue
        perm = [2, 0, 1, 3] if index == 0 else [1, 0, 2]
        after.append(helper.make_node("Transpose", [name + "_tm"], [name], perm=perm))
        node.output[index] = name + "_tm"
    nodes = [*before, node, *after]
    del twin.graph.node[:]
    twin.graph.node.extend(nodes)
    return twin


def _check(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Model:
    """onnxruntime on the original node vs the imported IR (executor) and its re-export."""
    layout = any(a.name == "layout" and a.i for a in proto.graph.node[0].attribute)
    want = ort_run(_time_major_twin(proto) if layout else proto, feeds)
    model = _import(proto)
    _close([np.asarray(v) for v in run_model(model, dict(feeds))], want)
    again = to_onnx(model)
    assert not any(n.op_type in GATES for n in again.graph.node)
    _close(ort_run(again, feeds), want)
    return model


def _macs(model: Model) -> int:
    """The MACs `irbridge info` prints."""
    return summarize(model).cost.macs


# -- single nodes against onnxruntime --------------------------------------------------------

@pytest.mark.parametrize(("op", "direction", "layout"), list(itertools.product(
    ["RNN", "GRU", "LSTM"], ["forward", "reverse", "bidirectional"], [0, 1])))
def test_directions_and_layouts(op: str, direction: str, layout: int) -> None:
    proto, feeds = _node_model(op, direction=direction, layout=layout)
    model = _check(proto, feeds)
    dirs = 2 if direction == "bidirectional" else 1
    per_row = GATES[op] * HIDDEN * (INPUT + HIDDEN)
    assert _macs(model) == per_row * BATCH * SEQ * dirs


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize(("bias", "initial"), [(False, False), (True, False), (False, True)])
def test_without_bias_or_initial_states(op: str, bias: bool, initial: bool) -> None:
    proto, feeds = _node_model(op, direction="bidirectional", bias=bias, initial=initial,
                               seed=1)
    _check(proto, feeds)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_peepholes(direction: str, layout: int) -> None:
    proto, feeds = _node_model("LSTM", direction=direction, layout=layout, peepholes=True,
                               seed=2)
    _check(proto, feeds)


def test_lstm_input_forget() -> None:
    proto, feeds = _node_model("LSTM", direction="bidirectional", peepholes=True,
                               input_forget=1, seed=3)
    _check(proto, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_clip(op: str) -> None:
    """A clip small enough to bind on most gate inputs."""
    proto, feeds = _node_model(op, direction="bidirectional", clip=0.7, seed=4,
                               **({"activations": ["Relu", "Relu"]} if op == "RNN" else {}))
    _check(proto, feeds)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("bias", [True, False])
def test_gru_linear_before_reset(direction: str, bias: bool) -> None:
    proto, feeds = _node_model("GRU", direction=direction, bias=bias, linear_before_reset=1,
                               seed=5)
    model = _check(proto, feeds)
    dirs = 2 if direction == "bidirectional" else 1
    assert _macs(model) == 3 * HIDDEN * (INPUT + HIDDEN) * BATCH * SEQ * dirs


@pytest.mark.parametrize(("op", "activations", "alpha", "beta"), [
    ("RNN", ["LeakyRelu", "ScaledTanh"], [0.3, 0.8], [1.3]),
    ("RNN", ["Affine", "ThresholdedRelu"], [0.7, 0.2], [0.1]),
    ("RNN", ["Elu", "Softsign"], [0.4], []),
    ("RNN", ["Softplus", "HardSigmoid"], [], []),
    ("GRU", ["HardSigmoid", "Softsign", "Sigmoid", "Elu"], [0.3, 0.9], [0.45]),
    ("LSTM", ["HardSigmoid", "ScaledTanh", "Softsign", "Sigmoid", "Tanh", "LeakyRelu"],
     [0.25, 0.9, 0.05], [0.55, 1.2]),
])
def test_activations(op: str, activations: list[str], alpha: list[float],
                     beta: list[float]) -> None:
    """`activation_alpha` / `activation_beta` are consumed in order by the activations
    that take parameters (onnxruntime's reading)."""
    attrs: dict[str, object] = {"activations": activations}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    proto, feeds = _node_model(op, direction="bidirectional", seed=6, **attrs)
    _check(proto, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_weights_given_at_run_time(op: str) -> None:
    """W, R, B and P as graph inputs: sliced and transposed by neutral ops."""
    proto, feeds = _node_model(op, direction="bidirectional", peepholes=op == "LSTM",
                               weights_as_inputs=True, seed=7,
                               **({"linear_before_reset": 1} if op == "GRU" else {}))
    _check(proto, feeds)


def test_gru_run_time_bias_without_linear_before_reset() -> None:
    proto, feeds = _node_model("GRU", direction="reverse", weights_as_inputs=True, seed=8)
    _check(proto, feeds)


def test_full_sequence_lens_constant() -> None:
    proto, feeds = _node_model("LSTM", direction="bidirectional", seed=9,
                               seq_lens=np.full(BATCH, SEQ, np.int32))
    _check(proto, feeds)


def test_one_step() -> None:
    proto, feeds = _node_model("GRU", direction="bidirectional", layout=1, seq=1, seed=10)
    _check(proto, feeds)


# -- refused forms ------------------------------------------------------------------------

def _opaque_reason(proto: onnx.ModelProto) -> str:
    model, coverage = from_onnx(proto)
    assert not coverage.fully_neutral
    reasons = [str(node.attrs.get("reason", "")) for _, node in model.all_nodes()
               if node.is_opaque]
    lines = coverage.lines()
    assert len(reasons) == 1, lines
    return "\n".join(lines)


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"seq_lens": np.array([SEQ, SEQ - 1, SEQ], np.int32)}, "not the full length"),
    ({"seq": "T"}, "sequence length T is dynamic"),
    ({"activations": ["Gelu"]}, "activation 'Gelu' has no neutral equivalent"),
])
def test_refused(kwargs: dict[str, object], reason: str) -> None:
    proto, _ = _node_model("RNN", **kwargs)  # type: ignore[arg-type]
    text = _opaque_reason(proto)
    assert re.search(re.escape(reason), text), text


def test_run_time_sequence_lens_refused() -> None:
    proto, _ = _node_model("GRU", seed=11, initial=False)  # inputs x, w, r, b
    proto.graph.node[0].input.append("lens")
    proto.graph.input.append(tensor("lens", TensorProto.INT32, [BATCH]))
    text = _opaque_reason(proto)
    assert "sequence_lens (input 4) is not a constant" in text, text


# -- torch.onnx's TorchScript exporter against eager torch -----------------------------------

class _Stack(nn.Module):
    def __init__(self, kind: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = kind(INPUT, HIDDEN, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, state = self.rnn(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("opset", [13, 17])
def test_torch_export(kind: type[nn.Module], opset: int, tmp_path: object) -> None:
    torch.manual_seed(0)
    module = _Stack(kind).eval()
    x = torch.randn(BATCH, SEQ, INPUT)
    with torch.no_grad():
        want = [t.numpy() for t in module(x)]
    path = f"{tmp_path}/rnn.onnx"
    torch.onnx.export(module, (x,), path, dynamo=False, opset_version=opset)
    proto = onnx.load(path)
    assert any(n.op_type in GATES for n in proto.graph.node)
    model = _import(proto)
    feeds = {proto.graph.input[0].name: x.numpy()}
    _close([np.asarray(v) for v in run_model(model, feeds)], want)
    _close(ort_run(to_onnx(model), feeds), want)
    gates = {nn.LSTM: 4, nn.GRU: 3, nn.RNN: 1}[kind]
    per_step = gates * HIDDEN * (INPUT + HIDDEN) + gates * HIDDEN * (2 * HIDDEN + HIDDEN)
    assert _macs(model) == per_step * 2 * BATCH * SEQ


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_dynamic_batch_without_initial_states(op: str) -> None:
    """Zero initial states of a symbolic batch: [1, hidden], broadcast by the first step."""
    proto, feeds = _node_model(op, direction="bidirectional", initial=False, seed=12)
    proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "N"
    model = _check(proto, feeds)
    y = model.graphs[0].outputs[0].type
    assert y is not None and y.shape is not None
    assert [str(getattr(d, "name", d)) for d in y.shape] == [str(SEQ), "2", "N", str(HIDDEN)]


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_stablehlo_export(op: str) -> None:
    """The unrolled node exports to StableHLO; the reference interpreter reproduces
    onnxruntime on the original node (same float32 tolerance)."""
    proto, feeds = _node_model(op, direction="bidirectional", layout=1,
                               peepholes=op == "LSTM", seed=13)
    want = ort_run(_time_major_twin(proto), feeds)
    model = _import(proto)
    order = [i.name for i in proto.graph.input]
    _close(evaluate(build_module(model), [feeds[n] for n in order]), want)


def test_only_final_states_requested() -> None:
    """Y left out (output name ""): only Y_h and Y_c are built, and no step is lost."""
    proto, feeds = _node_model("LSTM", direction="bidirectional", layout=1, seed=14)
    proto.graph.node[0].output[0] = ""
    del proto.graph.output[0]
    model = _check(proto, feeds)
    assert not any(n.op == "concat" and len(n.inputs) == SEQ for _, n in model.all_nodes())
