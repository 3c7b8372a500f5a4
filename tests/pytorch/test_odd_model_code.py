"""Model code that captured without an error but computed something else, or crashed
capture with a traceback: in-place updates of inputs and buffers, forward hooks that
change a layer's inputs or outputs, TorchScript submodules, dropout in training mode,
circular padding modules.

Every model here is small, has random weights and is compared with eager torch run on an
untouched copy of the model and of the inputs. float32 outputs: rtol 1e-5, atol 1e-6 (a
few length-4..8 dot products: float32 rounding differs between kernels by a few ulps,
1e-7 relative; any lowering mistake shows at 1e-1).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchtools import assert_outputs_match, backend_outputs

from irbridge.converters.pytorch import capture, verify
from irbridge.converters.pytorch._util import tensor_leaves
from irbridge.errors import CaptureError

RTOL, ATOL = 1e-5, 1e-6
FRONTENDS = ["fx", "export", "dynamo"]


def _clone(args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(a.clone() for a in args)


def _eager(module: nn.Module, args: tuple[torch.Tensor, ...]) -> Any:
    """The output tensors of an untouched copy of `module` on copies of `args`, in pytree
    order."""
    twin = copy.deepcopy(module)
    with torch.no_grad():
        out = twin(*_clone(args))
    return tuple(tensor_leaves(out))


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict(keep_vars=True).items()}


def _assert_state(module: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = _state(module)
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert torch.equal(after[key], value), key


def _check(module: nn.Module, args: tuple[torch.Tensor, ...], frontend: str) -> Any:
    """Capture `module` on `args`: the model, its buffers and the input tensors are left as
    found, and the IR (executor, onnxruntime, StableHLO interpreter) computes what eager
    torch computes on the untouched model and inputs."""
    want = _eager(module, args)
    before, inputs = _state(module), _clone(args)
    result = capture(module, args, frontend=frontend)
    assert result.method == frontend
    _assert_state(module, before)
    for given, original in zip(args, inputs, strict=True):
        assert torch.equal(given, original)
    for backend, got in backend_outputs(result, args).items():
        assert_outputs_match(backend, got, want, result, RTOL, ATOL)
    report = verify(result, module)
    assert report.passed, report.summary()
    return result


class AddToInput(nn.Module):
    """Updates its input in place, then uses it: eager returns (x + 1) * 2 and leaves the
    caller's x changed."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return self.fc(x) * 2


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_in_place_update_of_an_input(frontend: str) -> None:
    """fx and Dynamo ran the model on the caller's tensor: the IR was then fed x + 1 (and
    verify ran eager on it again), so it computed fc(x + 2) * 2."""
    torch.manual_seed(0)
    _check(AddToInput().eval(), (torch.randn(2, 4),), frontend)


class RunningMean(nn.Module):
    """An exponential moving average buffer updated by a chain of in-place ops, then
    read."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("ema", torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        self.ema.mul_(0.5).add_(y.mean(0) * 0.5)
        return y - self.ema


@pytest.mark.parametrize("frontend", ["export", "dynamo"])
def test_chained_in_place_updates_of_a_buffer(frontend: str) -> None:
    """Dynamo's graph reads the buffer after `ema.mul_(0.5).add_(..)`: the add_ wrote into
    the mul_'s result, which the lowering did not know aliases the buffer."""
    torch.manual_seed(0)
    _check(RunningMean().eval(), (torch.randn(3, 4),), frontend)


def test_fx_refuses_in_place_updates_it_cannot_record() -> None:
    """fx symbolic tracing runs `self.ema.mul_(..)` on the real buffer instead of recording
    it: its graph missed the update. It now fails with one line, and auto moves on."""
    torch.manual_seed(0)
    module = RunningMean().eval()
    with pytest.raises(CaptureError, match=r"fx capture: forward updates ema in place") as info:
        capture(module, (torch.randn(3, 4),), frontend="fx")
    assert "\n" not in str(info.value)
    result = capture(module, (torch.randn(3, 4),), frontend="auto")
    assert result.method == "export"
    assert result.attempts[0][0] == "fx" and "updates ema in place" in result.attempts[0][1]


class KVCache(nn.Module):
    """A cache buffer written at a position (recorded by fx as a setitem on the buffer,
    not run while tracing) and read after the write."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 4, 8))
        self.q = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, pos: int = 1) -> torch.Tensor:
        self.cache[:, pos] = self.q(x)[:, 0]
        self.cache[:, pos + 1].copy_(x[:, 1])
        return self.cache.sum(1) + x[:, 0]


def test_fx_refuses_writes_into_a_buffer_its_graph_reads_as_a_constant() -> None:
    """fx's graph held the write but read the buffer as the constant from before it: the
    IR returned x[:, 0] alone (exit 0, max abs error 1.7 against eager)."""
    torch.manual_seed(0)
    module = KVCache().eval()
    x = torch.randn(1, 3, 8)
    with pytest.raises(CaptureError, match=r"fx capture: forward writes into cache in place"):
        capture(module, (x,), frontend="fx")
    assert not module.cache.any()
    result = capture(module, (x,), frontend="auto")
    assert result.method == "export" and "writes into cache" in result.attempts[0][1]
    report = verify(result, module)
    assert report.passed, report.summary()


class Counter(nn.Module):
    """A call counter buffer incremented by the forward and read by it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("n", torch.zeros(()))
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n += 1
        return self.fc(x) * self.n


@pytest.mark.parametrize("make", [RunningMean, Counter])
def test_auto_captures_the_buffers_as_found_after_a_failed_fx_attempt(make: Any) -> None:
    """fx's failed attempt had run the in-place update on the real buffer; export then
    captured the updated value (n = 1, so the IR computed fc(x) * 2 against eager's
    fc(x) * 1): every attempt now starts from the buffers as they were on entry."""
    torch.manual_seed(0)
    module = make().eval()
    before = {k: v.clone() for k, v in module.named_buffers()}
    x = torch.randn(3, 4)
    result = capture(module, (x,), frontend="auto")
    assert result.method == "export" and result.attempts[0][0] == "fx"
    assert all(torch.equal(v, before[k]) for k, v in module.named_buffers())
    report = verify(result, module)
    assert report.passed, report.summary()


class Hooked(nn.Module):
    """A forward pre-hook and a forward hook on a torch.nn layer (which fx keeps as a
    leaf), both changing what flows through it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)
        self.fc.register_forward_pre_hook(lambda m, a: (a[0] + 1,))
        self.fc.register_forward_hook(lambda m, a, o: o * 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc(x)))


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_hooks_on_a_leaf_layer(frontend: str) -> None:
    """fx lowered the hooked nn.Linear as a plain linear: both hooks were lost."""
    torch.manual_seed(0)
    _check(Hooked().eval(), (torch.randn(2, 4),), frontend)


def test_hooks_on_the_root_model() -> None:
    """fx traces the root's forward directly, without its hooks: it refuses with one
    line, and auto takes the next front-end, which keeps them."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    module.register_forward_hook(lambda m, a, o: o + 10)
    x = torch.randn(2, 4)
    with pytest.raises(CaptureError, match="fx capture skips the model's own forward hooks"):
        capture(module, (x,), frontend="fx")
    result = capture(module, (x,))
    assert result.method == "export"
    for backend, got in backend_outputs(result, (x,)).items():
        assert_outputs_match(backend, got, _eager(module, (x,)), result, RTOL, ATOL)


class Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + 1


def test_torchscript_submodule() -> None:
    """Snapshotting the model for restore iterated the TorchScript module's C++-backed
    parameter wrapper and every front-end died with a multi-line TypeError."""
    torch.manual_seed(0)
    module = Scripted().eval()
    x = torch.randn(2, 4)
    result = capture(module, (x,))
    assert result.method == "fx"
    for backend, got in backend_outputs(result, (x,)).items():
        assert_outputs_match(backend, got, _eager(module, (x,)), result, RTOL, ATOL)


class Dropping(nn.Module):
    def __init__(self, functional: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.functional = functional

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.functional:
            return F.dropout(y, 0.25)  # training=True by default, even in eval mode
        return self.drop(y)


@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("functional", [False, True])
def test_active_dropout_is_refused(frontend: str, functional: bool) -> None:
    """Dropout was lowered as the identity whatever the mode: a model in training mode
    captured 'successfully' into an IR that drops nothing while eager drops half."""
    module = Dropping(functional)
    module.train(not functional)
    hint = r"pass training=self\.training" if functional else r"call model\.eval\(\)"
    with pytest.raises(CaptureError, match=r"dropout .*is active .*" + hint) as info:
        capture(module, (torch.randn(2, 4),), frontend=frontend)
    assert "\n" not in str(info.value)
    assert module.training is (not functional)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_dropout_in_eval_mode_is_the_identity(frontend: str) -> None:
    torch.manual_seed(0)
    _check(Dropping(False).eval(), (torch.randn(2, 4),), frontend)


@pytest.mark.parametrize("pad", [nn.CircularPad1d((1, 2)), nn.CircularPad2d((1, 2, 0, 3)),
                                 nn.CircularPad3d(1)], ids=["1d", "2d", "3d"])
def test_circular_pad_modules(pad: nn.Module) -> None:
    """fx keeps nn.CircularPad*d as a leaf; with no table entry it was re-traced into
    copies into slices of an empty tensor that the lowering dropped: the output was
    garbage. Now the pad op's wrap mode."""
    torch.manual_seed(0)
    rank = {nn.CircularPad1d: 3, nn.CircularPad2d: 4, nn.CircularPad3d: 5}[type(pad)]
    x = torch.randn(*(2, 3, 4, 5, 4)[:rank])
    _check(nn.Sequential(pad, nn.Tanh()).eval(), (x,), "fx")


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(q, q, q, need_weights=True)
        return out, weights


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_batch_first_multihead_attention(frontend: str) -> None:
    """Dynamo's graph ends in two transposes that cancel, the second producing the
    output: the ONNX clean-up removed the first while keeping the second, and the file
    failed the ONNX checker."""
    torch.manual_seed(0)
    _check(SelfAttention().eval(), (torch.randn(2, 5, 8),), frontend)


class Branchy(nn.Module):
    """torch.cond on the data, both branches using parameters, two outputs each."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.up = nn.Linear(4, 4)
        self.down = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.fc(x)

        def positive(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.relu(self.up(h)) + y, h.sum(-1)

        def negative(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.down(h) * y, h.amax(-1)

        out, extra = torch.cond(h.mean() > 0, positive, negative, (h, y))
        return out, extra


@pytest.mark.parametrize("frontend", ["export", "dynamo"])
def test_torch_cond_takes_the_branch_the_data_picks(frontend: str) -> None:
    """torch.cond was an opaque node: the IR neither ran nor exported. Now both branches
    and a `where` per output; the IR is run on inputs that take each branch."""
    torch.manual_seed(0)
    module = Branchy().eval()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    result = capture(module, (x, y), frontend=frontend)
    assert result.opaque_count == 0
    taken = set()
    for shift in (-100.0, 100.0):  # the mean of fc(x + shift) has the sign of the shift
        with torch.no_grad():
            args = (x + shift * module.fc.weight.sum(0).sign(), y)
            taken.add(bool(module.fc(args[0]).mean() > 0))
        for backend, got in backend_outputs(result, args).items():
            # inputs shifted by +-100: outputs of order 100, float32 rounding 1e-5 absolute
            assert_outputs_match(backend, got, _eager(module, args), result, RTOL, 1e-4)
    assert taken == {False, True}


class Randomized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.RReLU(0.1, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) + F.rrelu(x * 2, training=False)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_rrelu_in_eval_mode_and_refused_in_training_mode(frontend: str) -> None:
    """RReLU was an opaque node on every front-end; in eval mode it is a leaky ReLU with
    slope (lower + upper) / 2, in training mode random (refused)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    _check(Randomized().eval(), (x,), frontend)
    with pytest.raises(CaptureError, match=r"rrelu .*training mode"):
        capture(Randomized().train(), (x,), frontend=frontend)


class Autocast(nn.Module):
    """A bfloat16 autocast region around a linear layer, then back to float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.fc(x)
        return y.float() * 2


def test_autocast_regions() -> None:
    """fx and export computed the linear layer in float32 (eager: bfloat16, 0.3% apart);
    Dynamo's capture left autocast switched on for the rest of the process. Now export
    writes the casts out, fx and Dynamo refuse with one line, and no capture leaves a
    global mode changed."""
    torch.manual_seed(0)
    module = Autocast().eval()
    x = torch.randn(3, 8)
    for frontend in ("fx", "dynamo"):
        with pytest.raises(CaptureError, match="autocast"):
            capture(module, (x,), frontend=frontend)
        assert not torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16  # torch's default
        assert torch.is_grad_enabled()
    result = capture(module, (x,))
    assert result.method == "export"
    got = backend_outputs(result, (x,))
    # the executor rounds the same bfloat16 products as torch: equal up to one bfloat16
    # ulp (2^-8 of the value) where the float32 accumulation order differs; the StableHLO
    # interpreter accumulates the 8-term dot product in bfloat16: a few ulps
    want = _eager(module, (x,))
    assert_outputs_match("executor", got["executor"], want, result, 8e-3, 1e-2)
    assert_outputs_match("stablehlo", got["stablehlo"], want, result, 4e-2, 4e-2)
    report = verify(result, module)
    assert report.passed, report.summary()


class ConvNet(nn.Module):
    """conv -> relu -> residual add -> pool -> linear: what a user runs under autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        h = h + self.conv(x)
        return self.fc(h.mean((2, 3)))


def test_autocast_around_the_capture() -> None:
    """`with torch.autocast(...): capture(model, x)`: fx and Dynamo traced the model's
    float32 ops but typed them with autocast's bfloat16 example values (51 type
    mismatches patched with casts on resnet18: neither the float32 model nor the autocast
    one). Autocast around the capture now counts as a region inside forward does: export
    records its casts, fx and Dynamo refuse with one line; autocast of another device
    type than the model's changes nothing."""
    torch.manual_seed(0)
    module = ConvNet().eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = _eager(module, (x,))
        for frontend in ("fx", "dynamo"):
            with pytest.raises(CaptureError, match=r"torch.autocast is on around the "
                               r"capture \(cpu bfloat16\)") as info:
                capture(module, (x,), frontend=frontend)
            assert "\n" not in str(info.value)
        result = capture(module, (x,))
        assert torch.is_autocast_enabled("cpu")  # left as the caller had it
        report = verify(result, module)
    assert not torch.is_autocast_enabled("cpu")
    assert result.method == "export" and result.attempts[0][0] == "fx"
    assert result.model.metadata["capture.autocast"] == "cpu bfloat16"
    assert "lowering.type_mismatches" not in result.model.metadata
    convs = [n for _, n in result.model.all_nodes() if n.op == "conv"]
    assert convs and all(n.outputs[0].type.dtype.short == "bf16" for n in convs)
    assert want[0].dtype == torch.bfloat16 and report.passed, report.summary()
    # the IR computes the autocast model: one bfloat16 ulp (2^-8) of the output's scale
    got = backend_outputs(result, (x,))
    assert_outputs_match("executor", got["executor"], want, result, 8e-3, 1e-2)
    # CUDA autocast around a CPU model: nothing changes, fx captures as usual
    with torch.autocast("cuda", dtype=torch.float16):
        plain = capture(module, (x,))
    assert plain.method == "fx" and "capture.autocast" not in plain.model.metadata


class MaskedTransformer(nn.Module):
    """nn.Transformer with a causal target mask: its mask check (`bool((mask ==
    causal).all())`) stops torch.export and makes Dynamo run the whole Transformer as
    Python, leaving a graph that computes only the mask."""

    def __init__(self) -> None:
        super().__init__()
        self.t = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1,
                                num_decoder_layers=1, dim_feedforward=32, dropout=0.0,
                                batch_first=True)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.t(src, tgt, tgt_mask=mask)


def test_auto_prefers_a_complete_capture_to_an_incomplete_one() -> None:
    """auto kept Dynamo's incomplete capture (no opaque node, but its one output was the
    mask and it had no inputs) over fx's complete one with the Transformer as an opaque
    node, and convert wrote it with exit 0."""
    torch.manual_seed(0)
    result = capture(MaskedTransformer().eval(), (torch.randn(2, 6, 16), torch.randn(2, 4, 16)))
    attempts = dict(result.attempts)
    assert attempts["dynamo"].startswith("ok, incomplete"), attempts
    assert result.method == "fx" and result.opaque_count == 1, attempts
    assert [v.name for v in result.model.graphs[0].inputs] == ["src", "tgt"]


class SparseWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(4, 4).to_sparse())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.w, x)


@pytest.mark.parametrize("where", ["buffer", "input"])
def test_sparse_tensors_are_refused_with_one_line(where: str) -> None:
    """A sparse buffer made keep_buffers' torch.equal raise NotImplementedError (an
    internal error), and the export capture that got past it kept the sparse operand out
    of the IR (no weights, one opaque node)."""
    module = SparseWeight()
    x = torch.randn(4, 3)
    if where == "input":
        module.w = module.w.to_dense()
        x = x.to_sparse()
    for frontend in FRONTENDS:
        with pytest.raises(CaptureError) as info:
            capture(module, (x,), frontend=frontend)
        message = str(info.value)
        assert "\n" not in message and "is a sparse tensor (torch.sparse_coo)" in message
        assert message.startswith("buffer 'w'" if where == "buffer" else "input #0")


class Cells(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTMCell(4, 5)
        self.gru = nn.GRUCell(5, 3)
        self.plain = nn.GRUCell(4, 3, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hh, c = self.lstm(x)
        return self.gru(hh), c, self.plain(x, h), self.gru(hh, h)


class Recurrent(nn.Module):
    """Multi-layer LSTM (batch first) into a bidirectional GRU with an initial state."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.gru = nn.GRU(8, 5, bidirectional=True)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, (h, c) = self.lstm(x)
        z, hz = self.gru(y.transpose(0, 1), h0)
        return z, hz, h, c


@pytest.mark.parametrize("frontend", ["fx", "export"])
def test_lstm_and_gru_layers(frontend: str) -> None:
    """nn.LSTM and nn.GRU: fx's re-trace of the LSTM went to one oneDNN kernel per layer
    (mkldnn_rnn_layer, opaque), export's GRU (aten.gru.input) re-traced into in-place
    updates of gate slices and stayed opaque: a model with both had an opaque node on
    every front-end. (Dynamo runs nn.LSTM / nn.GRU as Python outside its graph.)"""
    torch.manual_seed(0)
    result = _check(Recurrent().eval(), (torch.randn(3, 7, 6), torch.randn(2, 3, 5)),
                    frontend)
    assert result.opaque_count == 0


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_gru_cell(frontend: str) -> None:
    """nn.GRUCell was an opaque node on every front-end (its re-trace writes into the
    chunks of the gate projections)."""
    torch.manual_seed(0)
    result = _check(Cells().eval(), (torch.randn(2, 4), torch.randn(2, 3)), frontend)
    assert result.opaque_count == 0


def test_embedding_with_max_norm_is_left_as_found() -> None:
    """An embedding with max_norm renormalises the looked-up rows of its weight in place
    on every forward: the fx interpreter run and Dynamo's run changed the model's
    weight. (The renormalisation itself stays an opaque node; fx, whose graph would read
    the weight as the constant from before it, refuses.)"""
    torch.manual_seed(0)
    module = nn.Embedding(10, 4, max_norm=1.0).eval()
    with torch.no_grad():
        module.weight.mul_(5)  # every row's norm above max_norm
    before = module.weight.detach().clone()
    for frontend in FRONTENDS:
        if frontend == "fx":
            with pytest.raises(CaptureError, match="forward writes into weight in place"):
                capture(module, (torch.tensor([1, 2, 2, 7]),), frontend=frontend)
        else:
            capture(module, (torch.tensor([1, 2, 2, 7]),), frontend=frontend)
        assert torch.equal(module.weight, before), frontend


class ReturnsItsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fc(x), x


def test_python_exports_refuse_an_incomplete_dynamo_capture(tmp_path: Any) -> None:
    """Dynamo leaves an input returned unchanged out of its graphs: the capture has one
    output for the model's two. The CLI refused to export it; the Python API
    (to_onnx, export_onnx, export_stablehlo) wrote a one-output file as the model."""
    from irbridge.converters.onnx import export_onnx, to_onnx
    from irbridge.converters.stablehlo import export_stablehlo
    from irbridge.errors import IrbridgeError

    module = ReturnsItsInput().eval()
    result = capture(module, (torch.randn(2, 4),), frontend="dynamo")
    assert result.outputs[1] is None
    for write in (lambda: to_onnx(result.model),
                  lambda: export_onnx(result.model, tmp_path / "m.onnx"),
                  lambda: export_stablehlo(result.model, tmp_path / "m.mlir")):
        with pytest.raises(IrbridgeError, match="incomplete Dynamo capture") as info:
            write()
        assert "\n" not in str(info.value)
    assert not list(tmp_path.iterdir())
    assert capture(module, (torch.randn(2, 4),)).method == "fx"  # auto: a complete one


class ScaleByItsMax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.max().item()


class BranchOnSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


@pytest.mark.parametrize(("make", "reason"), [(ScaleByItsMax, "Tensor.item()"),
                                              (BranchOnSum, "generic_jump")])
def test_dynamo_graphs_that_hold_values_read_from_tensors_are_incomplete(
        make: Any, reason: str, tmp_path: Any) -> None:
    """Python read a tensor's value at the graph break: the graph after it held the
    example's max as a constant (or the example's branch), so the IR and its ONNX file
    computed the model only for inputs that give the same value, and verify passed on the
    example. The capture is now marked incomplete (ranked last by auto, not exported)."""
    from irbridge.converters.onnx import export_onnx
    from irbridge.errors import IrbridgeError

    module = make().eval()
    x = torch.rand(3, 4) + 0.5
    result = capture(module, (x,), frontend="dynamo")
    assert reason in result.model.metadata["dynamo.value_dependent"]
    with pytest.raises(IrbridgeError, match="Python read tensor values between its graphs"):
        export_onnx(result.model, tmp_path / "m.onnx")
    assert not list(tmp_path.iterdir())
    attempts = dict(capture(module, (x,)).attempts)
    assert "hold values read from the example's tensors" in attempts["dynamo"], attempts


class EmptyCache(nn.Module):
    """A key cache that starts as an empty 1-D tensor, concatenated to (what Hugging Face
    caches do on the first step): torch skips 1-D empty tensors among tensors of another
    rank, wherever they stand."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("keys", torch.tensor([]))

    def forward(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.keys, k], dim=-2) * 2, torch.cat([k, torch.tensor([]), k], 1)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_concatenating_to_an_empty_cache(frontend: str) -> None:
    """The lowering skipped the empty tensor only when it was not first: a cache first
    in the list made cat an opaque node (every Qwen2/Mistral/Bart attention layer)."""
    torch.manual_seed(0)
    result = _check(EmptyCache().eval(), (torch.randn(1, 2, 3, 4),), frontend)
    assert result.opaque_count == 0


def test_qwen2_with_a_dynamic_cache() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=64, vocab_size=100,
                                      max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    ids = torch.randint(0, 100, (2, 7))
    result = capture(model, (ids,))
    assert result.opaque_count == 0, result.model.metadata.get("lowering.opaque")
    report = verify(result, model)  # irbridge's float32 tolerances (irbridge/tolerance.py)
    assert report.passed, report.summary()


def _relu_half(y: torch.Tensor) -> torch.Tensor:
    y[:, :2].relu_()
    return y * 2


def _add_through_view(y: torch.Tensor) -> torch.Tensor:
    y.view(2, 2, 2).add_(1)
    return y


def _scale_transposed(y: torch.Tensor) -> torch.Tensor:
    y.t().mul_(2)
    return y + 1


def _scale_a_chunk(y: torch.Tensor) -> torch.Tensor:
    first, _ = y.chunk(2, 1)
    first.mul_(10)
    return y


def _zero_a_band(y: torch.Tensor) -> torch.Tensor:
    y.narrow(1, 1, 2).zero_()
    return y


class WritesThroughAView(nn.Module):
    def __init__(self, body: Any) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(self.fc(x))


VIEW_WRITES = [_relu_half, _add_through_view, _scale_transposed, _scale_a_chunk,
               _zero_a_band]


@pytest.mark.parametrize("body", VIEW_WRITES, ids=lambda f: f.__name__)
def test_in_place_writes_through_views(body: Any) -> None:
    """An in-place op on a view of an intermediate tensor, the tensor read afterwards:
    fx and Dynamo graphs lowered the write into the view only (the tensor kept its old
    values); export missed the views that chunk/split return. fx and Dynamo now refuse in
    one line; auto and export capture it right."""
    torch.manual_seed(0)
    module = WritesThroughAView(body).eval()
    x = torch.randn(2, 4)
    for frontend in ("fx", "dynamo"):
        with pytest.raises(CaptureError, match="writes in place into a view") as info:
            capture(module, (x,), frontend=frontend)
        assert "\n" not in str(info.value)
    _check(module, (x,), "export")
    assert capture(module, (x,)).method == "export"


def test_indexed_augmented_assignment_still_captures_with_dynamo() -> None:
    """`y[1] += 1` is getitem, iadd, setitem: the view written is stored back before the
    tensor is read, which the lowering follows."""
    def body(y: torch.Tensor) -> torch.Tensor:
        y[1] += 1
        return y * 3

    torch.manual_seed(0)
    _check(WritesThroughAView(body).eval(), (torch.randn(2, 4),), "dynamo")


class ShapeInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.unsqueeze_(0)
        return y + 1


def test_in_place_shape_change() -> None:
    """`y.unsqueeze_(0)`: Dynamo's example value already has the new shape, and its
    re-trace gave (1, 1, 2, 4) for eager's (1, 2, 4). Dynamo refuses it in one line; fx
    and export capture it right."""
    x = torch.randn(2, 4)
    with pytest.raises(CaptureError, match="in-place shape change"):
        capture(ShapeInPlace(), (x,), frontend="dynamo")
    for frontend in ("fx", "export"):
        _check(ShapeInPlace(), (x,), frontend)


class Bilinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Bilinear(3, 4, 5)
        self.weight = nn.Parameter(torch.randn(2, 3, 4))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.layer(x, y), F.bilinear(x, y, self.weight), \
            torch.bilinear(x[0], y[0], self.weight, None)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_bilinear(frontend: str) -> None:
    """nn.Bilinear / F.bilinear re-traced to aten._trilinear, an opaque node, under fx and
    Dynamo."""
    torch.manual_seed(0)
    result = _check(Bilinears().eval(), (torch.randn(2, 6, 3), torch.randn(2, 6, 4)),
                    frontend)
    assert result.opaque_count == 0


def _dataclass_output_model() -> nn.Module:
    """A model returning a user's dataclass (nested, frozen, with None fields) inside a
    tuple: Dynamo's capture had no outputs (0 outputs, verify nan), export refused the
    type, fx kept the dataclass's constructor as an opaque op. Fresh classes per call:
    registering a type with pytree is for the whole process, and each test must see its
    capture do it."""

    @dataclasses.dataclass(frozen=True)
    class Inner:
        scaled: torch.Tensor
        absent: torch.Tensor | None = None

    @dataclasses.dataclass
    class Output:
        logits: torch.Tensor
        inner: Inner
        extra: torch.Tensor | None

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> tuple[Output, torch.Tensor]:
            h = self.fc(x)
            return Output(h.relu(), Inner(h * 2), None), h.sum()

    return Model()


@pytest.mark.parametrize("frontend", [*FRONTENDS, "auto"])
def test_a_dataclass_output_is_flattened_in_field_order(frontend: str) -> None:
    module, x = _dataclass_output_model(), torch.randn(2, 4)
    with torch.no_grad():
        out, total = copy.deepcopy(module)(x)
    want = (out.logits, out.inner.scaled, total)     # field order, None fields skipped
    result = capture(module, (x,), frontend=frontend)
    assert not any(n.is_opaque for g in result.model.graphs for n in g.nodes)
    for backend, got in backend_outputs(result, (x,)).items():
        assert_outputs_match(backend, got, want, result, RTOL, ATOL)
    report = verify(result, module)
    assert report.passed, report.summary()
    assert [o.shape for o in report.outputs] == [(2, 3), (2, 3), ()]


@dataclasses.dataclass
class _Unbuildable:
    a: torch.Tensor
    b: torch.Tensor = dataclasses.field(init=False)


class _Holder:
    def __init__(self, a: torch.Tensor) -> None:
        self.a = a


@pytest.mark.parametrize("kind", ["init=False field", "plain object"])
def test_an_output_whose_tensors_cannot_be_flattened_is_refused(kind: str) -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            if kind == "plain object":
                return _Holder(x.relu())
            out = _Unbuildable(x.relu())
            out.b = x * 2
            return out

    for frontend in [*FRONTENDS, "auto"]:
        with pytest.raises(CaptureError) as info:
            capture(Model(), (torch.randn(2, 3),), frontend=frontend)
        message = str(info.value)
        assert "\n" not in message
        want = "_Unbuildable, a dataclass whose field 'b'" if kind == "init=False field" \
            else "_Holder"
        assert want in message, (frontend, message)
