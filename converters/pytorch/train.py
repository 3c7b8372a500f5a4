"""Training-step capture: forward, loss, backward and optimizer update as one IR graph.

    result = capture_train(model, (x,), train=TrainSpec(loss="cross_entropy",
                                                        optimizer="adamw"))
    report = verify_train(result, model)

How: a pure function `step(params, buffers, optimizer state, inputs, target)` runs the
model functionally (`torch.func.functional_call`), computes the loss, takes gradients
with `torch.func.grad_and_value` and applies the optimizer update written out as tensor
arithmetic (the formulas of `torch.optim.SGD` / `torch.optim.AdamW`, single-tensor path).
`make_fx` over `torch.func.functionalize(step)` records the joint graph in ATen, backward
ops included (`convolution_backward`, `native_layer_norm_backward`, ...), with batch-norm
running-statistic updates as explicit outputs. The same lowering engine as `capture()`
lowers it: backward ops through `handlers/backward.py` or the engine's re-trace to core
ATen.

The step's graph: inputs are the model's example inputs plus `target`; parameters,
buffers and optimizer state are model tensors; outputs are, in order, the loss, one
gradient per trainable parameter, the updated parameters, the updated buffers and the
updated optimizer state. Every node carries `train.phase` (forward, backward, optimizer:
forward is what the loss depends on, backward what the gradients depend on besides,
optimizer the rest) and `train.kinds` (per output: activation saved for backward,
gradient, parameter, optimizer state, ...) as annotation values; model tensors' kinds
are in `model.metadata["train.tensor_kinds"]` (JSON). `memory_by_kind` sums bytes per
kind.

Modes: dropout is off (the model runs in eval mode, so the step is deterministic and can
be checked against eager autograd) while batch norm runs in training mode (batch
statistics and running-stat updates, as in real training). Attention runs through
PyTorch's math SDPA backend, so the graph shows its matmuls and softmax (forward and
backward) rather than a fused kernel.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch._decomp
import torch.utils._pytree as pytree

from irbridge.dtypes import DType
from irbridge.errors import CaptureError
from irbridge.ir import Model, Node, Value

from ._util import ieee_float32, unwrapped
from .capture import Capture, CapturedGraph, ModuleState, Slot, input_names, keep_buffers, one_line
from .lower import LoweringStats, lower_capture

LOSSES = ("auto", "mse", "cross_entropy", "model")
OPTIMIZERS = ("sgd", "adamw")

KINDS = ("parameter", "buffer", "optimizer_state", "input", "activation",
         "saved_activation", "loss", "gradient", "optimizer_temp")
"""Value kinds recorded on a training step: `parameter` (model weights, and their updated
values), `buffer` (batch-norm statistics and their updates), `optimizer_state` (AdamW's
step count and moments, and their updates), `input` (data and target), `activation`
(forward values only the forward pass reads), `saved_activation` (forward values the
backward pass reads: what autograd keeps alive between the passes), `loss`, `gradient`
(every value of the backward pass), `optimizer_temp` (intermediates of the update)."""


@dataclass
class TrainSpec:
    """What training step to capture.

    loss: mse (against a random target of the output's shape), cross_entropy (random
    class indices; the output's last dim is the class dim), model (the model returns the
    loss itself: a scalar tensor or an output with `.loss`), or auto (cross_entropy).
    optimizer: sgd (plain SGD, `lr`) or adamw (`torch.optim.AdamW` defaults, first step:
    state starts at zero). lr defaults to 0.01 for SGD and 1e-3 for AdamW."""

    loss: str = "auto"
    optimizer: str = "sgd"
    lr: float | None = None
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    seed: int = 0

    def check(self) -> None:
        if self.loss not in LOSSES:
            raise CaptureError(f"--loss {self.loss!r}: choose one of {', '.join(LOSSES)}")
        if self.optimizer not in OPTIMIZERS:
            raise CaptureError(f"--optimizer {self.optimizer!r}: choose one of "
                               f"{', '.join(OPTIMIZERS)}")
        if self.lr is not None and not (self.lr > 0 and np.isfinite(self.lr)):
            raise CaptureError(f"learning rate {self.lr}: must be a positive number")

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return 0.01 if self.optimizer == "sgd" else 1e-3


@dataclass
class TrainCaptureResult:
    model: Model
    spec: TrainSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    target: torch.Tensor | None
    inputs: dict[str, torch.Tensor]  # IR input name -> example tensor (target included)
    params: list[str]  # trainable parameters, in gradient order
    buffers: list[str]
    state: list[str]  # optimizer state tensors, in order
    capture: Capture | None = None
    stats: LoweringStats = field(default_factory=LoweringStats)
    seconds: float = 0.0

    @property
    def opaque_count(self) -> int:
        return sum(1 for _, n in self.model.all_nodes() if n.is_opaque)


# -- the step -------------------------------------------------------------------------


def _trainable(module: torch.nn.Module) -> tuple[list[str], list[str]]:
    """(trainable parameter names, frozen parameter + buffer names), first names only."""
    params: list[str] = []
    others: list[str] = []
    for name, p in module.named_parameters():
        (params if p.requires_grad else others).append(name)
    others.extend(name for name, _ in module.named_buffers())
    return params, others


def _state_names(spec: TrainSpec, params: list[str]) -> list[str]:
    if spec.optimizer == "sgd":
        return []
    names = []
    for p in params:
        names += [f"adamw.step.{p}", f"adamw.exp_avg.{p}", f"adamw.exp_avg_sq.{p}"]
    return names


def _loss_output(out: Any) -> torch.Tensor:
    """The tensor a loss is computed on: `.logits`/`.last_hidden_state` of a Hugging Face
    output, else the first floating-point tensor of the output."""
    for attr in ("logits", "last_hidden_state"):
        value = getattr(out, attr, None)
        if isinstance(value, torch.Tensor):
            return value
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf
    raise CaptureError("the model's output has no floating-point tensor to compute a loss on")


def compute_loss(spec: TrainSpec, out: Any, target: torch.Tensor | None) -> torch.Tensor:
    F = torch.nn.functional
    if spec.loss == "model":
        loss = getattr(out, "loss", out)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise CaptureError("--loss model: the model must return its loss (a one-element "
                               "tensor, or an output with .loss); pass labels to the model")
        return loss.reshape(())
    y = _loss_output(out)
    assert target is not None
    if spec.loss == "mse":
        return F.mse_loss(y, target)
    return F.cross_entropy(y.reshape(-1, y.shape[-1]), target.reshape(-1))


def make_target(spec: TrainSpec, out: Any) -> torch.Tensor | None:
    if spec.loss == "model":
        return None
    y = _loss_output(out)
    # drawn on the CPU (the same target whatever the device), then put beside the output
    gen = torch.Generator().manual_seed(spec.seed)
    if spec.loss == "mse":
        return torch.randn(y.shape, generator=gen, dtype=y.dtype).to(y.device)
    if y.dim() < 1 or y.shape[-1] < 1:
        raise CaptureError(f"cross_entropy needs an output with a class dim; got shape "
                           f"{list(y.shape)}")
    return torch.randint(0, int(y.shape[-1]), tuple(y.shape[:-1]),
                         generator=gen).to(y.device)


def sgd_update(spec: TrainSpec, p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """torch.optim.SGD (no momentum, no weight decay): p - lr * g."""
    return p - spec.learning_rate * g


def adamw_update(spec: TrainSpec, p: torch.Tensor, g: torch.Tensor, step: torch.Tensor,
                 m: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torch.optim.AdamW's single-tensor update, written out (same order of operations):
    (new param, new step, new exp_avg, new exp_avg_sq). torch computes the bias
    corrections 1 - beta^step in Python floats (float64); so does the step here, from
    the step counter widened to float64. In float32, 1 - beta2 with beta2 rounded to
    float32 is 1.3e-5 off 1 - beta2 in float64 (0.999 -> 0.99900001), which scaled every
    update of a parameter whose gradient is well above eps by 1 - 6.4e-6."""
    lr, (beta1, beta2), eps = spec.learning_rate, spec.betas, spec.eps
    step = step + 1
    p = p * (1 - lr * spec.weight_decay)
    m = m + (g - m) * (1 - beta1)
    v = v * beta2 + g * g * (1 - beta2)
    wide = step.to(torch.float64)  # 0-d: a float32 model's tensors stay float32
    bias1 = 1 - torch.pow(beta1, wide)
    bias2 = 1 - torch.pow(beta2, wide)
    step_size = lr / bias1
    denom = v.sqrt() / bias2.sqrt() + eps
    p = p - step_size * (m / denom)
    return p, step, m, v


def _model_call(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                leaves: list[Any], spec_tree: Any
                ) -> Callable[[dict[str, torch.Tensor], list[torch.Tensor]], Any]:
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def call(state: dict[str, torch.Tensor], tensors: list[torch.Tensor]) -> Any:
        new = list(leaves)
        for i, t in zip(positions, tensors, strict=True):
            new[i] = t
        a, kw = pytree.tree_unflatten(new, spec_tree)
        return torch.func.functional_call(module, state, tuple(a), kw)

    return call


@contextmanager
def train_mode(module: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) with batch norm in training mode; restored afterwards."""
    modes = {m: m.training for m in module.modules()}
    try:
        module.eval()
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.train()
        yield
    finally:
        for m, mode in modes.items():
            m.training = mode


@contextmanager
def _math_attention() -> Iterator[None]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield


_DECOMPOSITIONS = torch._decomp.get_decompositions([torch.ops.aten.native_batch_norm.default])
"""native_batch_norm updates the running statistics in place without saying so in its
schema, so functionalization would lose the update; its decomposition goes through
`_native_batch_norm_legit`, whose schema declares the mutation, and comes out as
`_native_batch_norm_legit_functional` with the new statistics as outputs."""


def capture_train(module: torch.nn.Module, args: tuple[Any, ...] | Any,
                  kwargs: Mapping[str, Any] | None = None, *, train: TrainSpec | None = None,
                  weights: bool = True) -> TrainCaptureResult:
    """Capture one training step of `module(*args, **kwargs)` (see the module docstring).
    The module is left as it was found."""
    module = unwrapped(module)
    spec = train or TrainSpec()
    spec.check()
    if spec.loss == "auto":
        spec = TrainSpec(**{**spec.__dict__, "loss": "cross_entropy"})
    if not isinstance(args, tuple):
        args = (args,)
    kwargs = dict(kwargs or {})
    if any(t.is_meta for t in list(module.parameters()) + list(module.buffers())):
        raise CaptureError("--train needs real tensors (a training step runs the model); "
                           "drop --meta")
    params, others = _trainable(module)
    if not params:
        raise CaptureError(f"{type(module).__name__} has no trainable parameter")
    start = time.perf_counter()
    entry = ModuleState(module)
    try:
        with keep_buffers(module), train_mode(module), _math_attention():
            result = _capture_train(module, args, kwargs, spec, params, others, weights)
    finally:
        entry.restore()
    result.seconds = time.perf_counter() - start
    meta = result.model.metadata
    meta.update({"capture.method": "train", "capture.seconds": f"{result.seconds:.3f}",
                 "torch.version": torch.__version__, "train.loss": spec.loss,
                 "train.optimizer": spec.optimizer, "train.lr": repr(spec.learning_rate),
                 "capture.weights": str(not result.model.is_shape_only)})
    if result.stats.opaque:
        meta["lowering.opaque"] = ", ".join(f"{k} x{v}" for k, v in
                                            sorted(result.stats.opaque.items()))
    if result.stats.retraced:
        meta["lowering.retraced"] = ", ".join(f"{k} x{v}" for k, v in
                                              sorted(result.stats.retraced.items()))
    return result


def _capture_train(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                   spec: TrainSpec, params: list[str], others: list[str],
                   weights: bool) -> TrainCaptureResult:
    from torch.fx.experimental.proxy_tensor import make_fx

    named: dict[str, torch.Tensor] = dict(module.named_parameters())
    named.update(dict(module.named_buffers()))
    param_values = [named[n].detach() for n in params]
    other_values = [named[n].detach() for n in others]
    leaves, tree = pytree.tree_flatten((args, kwargs))
    inputs = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    call = _model_call(module, args, kwargs, leaves, tree)
    try:
        with torch.no_grad(), keep_buffers(module):  # the IR copies buffers as found
            out = module(*args, **kwargs)
    except Exception as exc:
        raise CaptureError(f"the model's own forward pass failed on the example inputs: "
                           f"{one_line(exc)}; check the inputs") from exc
    target = make_target(spec, out)
    state_names = _state_names(spec, params)
    state_values = []
    for p in param_values:
        if spec.optimizer == "adamw":
            state_values += [torch.zeros((), dtype=torch.float32), torch.zeros_like(p),
                             torch.zeros_like(p)]
    n_p, n_o, n_s, n_i = len(params), len(others), len(state_values), len(inputs)

    def loss_of(p_list: list[torch.Tensor], o_list: list[torch.Tensor],
                x_list: list[torch.Tensor], y: torch.Tensor | None) -> Any:
        o_list = [o.clone() for o in o_list]  # buffers updated in place come back as aux
        state = dict(zip(params, p_list, strict=True))
        state.update(zip(others, o_list, strict=True))
        loss = compute_loss(spec, call(state, x_list), y)
        return loss, o_list

    grad_fn = torch.func.grad_and_value(loss_of, has_aux=True)

    def step(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p_list = list(flat[:n_p])
        o_list = list(flat[n_p:n_p + n_o])
        s_list = list(flat[n_p + n_o:n_p + n_o + n_s])
        x_list = list(flat[n_p + n_o + n_s:n_p + n_o + n_s + n_i])
        y = flat[-1] if target is not None else None
        grads, (loss, new_o) = grad_fn(p_list, o_list, x_list, y)
        new_p, new_s = [], []
        for i, (p, g) in enumerate(zip(p_list, grads, strict=True)):
            if spec.optimizer == "sgd":
                new_p.append(sgd_update(spec, p, g))
            else:
                np_, st, m, v = adamw_update(spec, p, g, *s_list[3 * i:3 * i + 3])
                new_p.append(np_)
                new_s += [st, m, v]
        return (loss, *grads, *new_p, *new_o, *new_s)

    examples = [*param_values, *other_values, *state_values, *inputs]
    if target is not None:
        examples.append(target)

    def trace() -> Any:
        # cuDNN off while tracing: its batch norm (`cudnn_batch_norm`) updates the running
        # statistics in place without saying so in its schema, so functionalization
        # cannot see the update and the step's buffers came out unchanged (a CUDA
        # model's BatchNorm running stats); without it torch runs `native_batch_norm`,
        # whose update functionalization writes out. Only the trace runs this way.
        with torch.backends.cudnn.flags(enabled=False):
            return make_fx(torch.func.functionalize(step, remove="mutations_and_views"),
                           decomposition_table=_DECOMPOSITIONS,  # type: ignore[arg-type]
                           tracing_mode="real")(*examples)

    try:
        gm = trace()
    except CaptureError:
        raise
    except Exception as direct:
        # Python control flow on tensor values (Hugging Face's attention-mask checks call
        # .item()) cannot be traced on real tensors: torch.export specialises it on the
        # example inputs first, and the step then runs through the exported graph, whose
        # parameters and buffers have the same names.
        try:
            exported = torch.export.export(module, args, kwargs).module()
            call = _model_call(exported, args, kwargs, leaves, tree)
            gm = trace()
        except Exception as exc:
            raise CaptureError(f"could not trace the training step of "
                               f"{type(module).__name__}: {one_line(direct)}; through "
                               f"torch.export: {one_line(exc)}") from exc
    names = input_names(module, args, kwargs)
    slots: list[Slot] = []
    for n in params:
        slots.append(Slot("parameter", n, named[n]))
    for n, v in zip(others, other_values, strict=True):
        slots.append(Slot("buffer", n, v))
    for n, v in zip(state_names, state_values, strict=True):
        slots.append(Slot("constant", n, v))
    ir_inputs: dict[str, torch.Tensor] = {}
    for i, t in enumerate(inputs):
        name = names.get(id(t), f"input{i}")
        slots.append(Slot("input", name, t))
        ir_inputs[name] = t
    if target is not None:
        slots.append(Slot("input", "target", target))
        ir_inputs["target"] = target
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(slots):
        raise CaptureError(f"training step: {len(placeholders)} graph inputs, expected "
                           f"{len(slots)}")
    cap = Capture("export", [CapturedGraph(gm, slots)], module, [], ir_inputs)
    ir, stats = lower_capture(cap, weights=weights)
    ir.name = type(module).__name__
    result = TrainCaptureResult(ir, spec, args, kwargs, target, ir_inputs, params, others,
                                state_names, cap, stats)
    _mark(result)
    return result


# -- kinds ----------------------------------------------------------------------------


def _mark(result: TrainCaptureResult) -> None:
    """Annotate phases and value kinds (see the module docstring)."""
    model = result.model
    graph = model.graph
    n_p, n_o = len(result.params), len(result.buffers)
    outs = graph.outputs
    loss_out = outs[:1]
    grad_outs = outs[1:1 + n_p]
    kinds_of_out: dict[int, str] = {id(outs[0]): "loss"}
    for v in grad_outs:
        kinds_of_out[id(v)] = "gradient"
    for v in outs[1 + n_p:1 + 2 * n_p]:
        kinds_of_out[id(v)] = "parameter"
    for v in outs[1 + 2 * n_p:1 + 2 * n_p + n_o]:
        kinds_of_out[id(v)] = "buffer"
    for v in outs[1 + 2 * n_p + n_o:]:
        kinds_of_out[id(v)] = "optimizer_state"

    def ancestors(values: list[Value]) -> set[int]:
        seen: set[int] = set()
        stack = [v.producer for v in values if v.producer is not None]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.extend(v.producer for v in node.inputs
                         if v is not None and v.producer is not None)
        return seen

    forward = ancestors(loss_out)
    backward = ancestors(grad_outs) - forward
    phase: dict[int, str] = {}
    for node in graph.nodes:
        phase[id(node)] = ("forward" if id(node) in forward else
                           "backward" if id(node) in backward else "optimizer")
    read_by_backward: set[int] = set()
    for node in graph.nodes:
        if phase[id(node)] == "backward":
            read_by_backward.update(id(v) for v in node.inputs if v is not None)
    for node in graph.nodes:
        p = phase[id(node)]
        kinds = []
        for v in node.outputs:
            if id(v) in kinds_of_out:
                kinds.append(kinds_of_out[id(v)])
            elif p == "forward":
                kinds.append("saved_activation" if id(v) in read_by_backward else "activation")
            elif p == "backward":
                kinds.append("gradient")
            else:
                kinds.append("optimizer_temp")
        node.annotations.values["train.phase"] = p
        node.annotations.values["train.kinds"] = tuple(kinds)
    tensor_kinds = {n: "parameter" for n in result.params}
    tensor_kinds.update({n: "buffer" for n in result.buffers})
    tensor_kinds.update({n: "optimizer_state" for n in result.state})
    model.metadata["train.tensor_kinds"] = json.dumps(
        {k: v for k, v in tensor_kinds.items() if k in model.tensors}, sort_keys=True)
    model.metadata["train.outputs"] = (f"loss, {n_p} gradients, {n_p} updated parameters, "
                                       f"{n_o} updated buffers, {len(result.state)} "
                                       "updated optimizer state tensors")


def phase_of(node: Node) -> str | None:
    value = node.annotations.values.get("train.phase")
    return value if isinstance(value, str) else None


def memory_by_kind(model: Model) -> dict[str, int]:
    """Bytes per value kind of a training-step IR: model tensors by their recorded kind,
    graph inputs as `input`, node outputs by their `train.kinds` annotation. Each value
    counts once, at its full size (no liveness)."""
    totals: dict[str, int] = {}
    raw = model.metadata.get("train.tensor_kinds")
    if raw is None:
        raise CaptureError("not a training-step capture (no train.tensor_kinds metadata)")
    for name, kind in json.loads(raw).items():
        tensor = model.tensors.get(name)
        if tensor is not None:
            totals[kind] = totals.get(kind, 0) + tensor.nbytes
    for graph in model.graphs:
        for v in graph.inputs:
            totals["input"] = totals.get("input", 0) + ((v.type and v.type.nbytes()) or 0)
        for node in graph.nodes:
            kinds = node.annotations.values.get("train.kinds")
            if not isinstance(kinds, tuple):
                continue
            for v, kind in zip(node.outputs, kinds, strict=False):
                size = (v.type.nbytes() if v.type is not None else None) or 0
                totals[str(kind)] = totals.get(str(kind), 0) + size
    return totals


# -- verification -----------------------------------------------------------------------

RTOL = {torch.float32: 1e-4, torch.float64: 1e-10, torch.float16: 1e-2, torch.bfloat16: 2e-2}
"""Tolerance of each compared tensor, relative to its largest magnitude: max |IR - eager|
<= RTOL * max |eager| + ATOL. The IR executor (numpy) and eager autograd sum in different
orders; float32 sums of n terms differ by about sqrt(n) * 6e-8 relative (n up to ~1e5 in
these models: ~2e-5), so 1e-4 leaves a margin of ~5 without hiding a wrong formula (a
missing term or factor is off by far more than 1e-4 of the tensor's scale)."""

ATOL = 1e-6
"""Absolute floor, for tensors whose exact value is (almost) zero: a conv bias followed by
batch norm has a zero gradient that both sides compute as a float32 cancellation residue
of ~1e-7 (measured: 6e-8 eager, 1e-7 IR on the default-suite CNN)."""


NOISE_FACTOR = 10.0
"""The reference is the same step in float64 (model, inputs and target widened), and a
tensor may be up to NOISE_FACTOR times further from it than eager float32 autograd is,
on top of RTOL/ATOL. Why: a step through many training-mode batch norms is ill-conditioned
(on mobilenet_v2 at 224x224, eager float32's first-layer gradient is 1% away from
float64's; at 64x64, where batch norm sees 2x2 maps, 2%), so a fixed float32 tolerance
either fails a correct lowering there or hides errors elsewhere. Scaling with eager's own
rounding error keeps well-conditioned tensors at ~1e-4 and still fails a wrong formula,
which is off by the tensor's own magnitude."""


@dataclass
class TensorCheck:
    name: str
    kind: str  # loss, gradient, parameter, buffer, optimizer_state
    max_abs_error: float
    scale: float  # max |eager|
    tolerance: float
    passed: bool


@dataclass
class TrainVerifyReport:
    checks: list[TensorCheck]
    ir_matmul_flops: int  # forward + backward (+ optimizer: none are matmul-like)
    torch_matmul_flops: int  # FlopCounterMode over the eager forward + loss + backward
    error: str = ""
    torch_raw_flops: int = 0  # the same without the grouped-conv correction
    float64: list[TensorCheck] | None = None
    """The float64 re-check of the same IR (see verify_train), when it ran."""

    @property
    def flops_match(self) -> bool:
        return self.ir_matmul_flops == self.torch_matmul_flops

    @property
    def passed(self) -> bool:
        if self.error or not self.flops_match:
            return False
        if all(c.passed for c in self.checks):
            return True
        return bool(self.float64) and all(c.passed for c in self.float64 or ())

    @staticmethod
    def _worst(checks: list[TensorCheck]) -> TensorCheck | None:
        failed = [c for c in checks if not c.passed]
        pool = failed or checks
        return max(pool, key=lambda c: c.max_abs_error / max(c.tolerance, 1e-30), default=None)

    def worst(self) -> TensorCheck | None:
        return self._worst(self.checks)

    def summary(self) -> str:
        if self.error:
            return f"FAIL: {self.error}"
        failed = [c for c in self.checks if not c.passed]
        worst = self.worst()
        text = (f"{'PASS' if self.passed else 'FAIL'}: {len(self.checks) - len(failed)}/"
                f"{len(self.checks)} tensors within tolerance (loss, gradients, updated "
                f"parameters, buffers, optimizer state)")
        if worst is not None:
            text += (f", worst {worst.name} max abs {worst.max_abs_error:.3g} (tolerance "
                     f"{worst.tolerance:.3g})")
        if self.float64 is not None:
            wide = [c for c in self.float64 if c.passed]
            worst64 = self._worst(self.float64)
            text += (f"; the {len(failed)} beyond float32 tolerance are gradient-derived "
                     "(the forward's loss and buffers pass), so the same IR ran again in "
                     f"float64: {len(wide)}/{len(self.float64)} within tolerance of eager "
                     "float64 autograd")
            if worst64 is not None:
                text += (f", worst {worst64.name} max abs {worst64.max_abs_error:.3g} "
                         f"(tolerance {worst64.tolerance:.3g})")
            if self.passed:
                text += (" (float32 rounding puts inputs of ReLU/clamp/max kinks on "
                         "other sides than eager does)")
        text += (f"; matmul FLOPs forward+backward: IR {self.ir_matmul_flops:,} vs "
                 f"FlopCounterMode {self.torch_matmul_flops:,} "
                 f"({'equal' if self.flops_match else 'DIFFERENT'})")
        if self.torch_raw_flops != self.torch_matmul_flops:
            text += (f" (FlopCounterMode's own count {self.torch_raw_flops:,} includes "
                     "grouped-conv weight gradients `groups` times)")
        return text


def _grouped_conv_backward_flop(grad_out_shape: Any, x_shape: Any, w_shape: Any, bias: Any,
                                stride: Any, padding: Any, dilation: Any, transposed: bool,
                                output_padding: Any, groups: int, output_mask: Any,
                                out_shape: Any = None, **kwargs: Any) -> int:
    """FlopCounterMode's formula for `convolution_backward` with its weight-gradient term
    divided by `groups`: torch (2.9-2.10) counts grad_weight as a convolution of
    transposed shapes that drops the groups, i.e. `groups` times the multiply-adds a
    grouped (depthwise: groups = channels) convolution does: for each of Cout output
    channels, a weight gradient sums over Cin / groups input channels, not Cin."""
    from torch.utils.flop_counter import conv_backward_flop, conv_flop_count

    formula = getattr(conv_backward_flop, "__wrapped__", conv_backward_flop)  # on shapes
    total = int(formula(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation,
                        transposed, output_padding, groups, output_mask, out_shape))
    if output_mask[1] and groups > 1 and not transposed and out_shape is not None:
        def t(shape: Any) -> list[int]:
            return [shape[1], shape[0], *shape[2:]]

        weight = int(conv_flop_count(t(x_shape), t(grad_out_shape), t(list(out_shape[1]))))
        total -= weight - weight // groups
    return total


@ieee_float32()
def eager_step(result: TrainCaptureResult, module: torch.nn.Module,
               grads: list[np.ndarray] | None = None, *, float64: bool = False
               ) -> tuple[list[tuple[str, str, torch.Tensor]], int]:
    """One eager training step on a copy of `module` with autograd and torch.optim:
    [(name, kind, tensor)] in the IR's output order, and FlopCounterMode's total FLOPs of
    the forward, loss and backward. With `grads`, torch.optim steps from those gradients
    instead of autograd's (the loss and gradients listed are still autograd's). float64:
    the same step with the model, inputs and target's floating-point tensors in float64
    (the near-exact reference)."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    spec = result.spec
    ref = copy.deepcopy(unwrapped(module))
    args, kwargs, target = result.args, result.kwargs, result.target
    if float64:
        def wide(t: Any) -> Any:
            return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

        ref = ref.double()
        args, kwargs, target = pytree.tree_map(wide, (args, kwargs, target))
    named: dict[str, torch.Tensor] = dict(ref.named_parameters())
    named.update(dict(ref.named_buffers()))
    params = [named[n] for n in result.params]
    optimizer: torch.optim.Optimizer
    if spec.optimizer == "sgd":
        optimizer = torch.optim.SGD(params, lr=spec.learning_rate)
    else:
        optimizer = torch.optim.AdamW(params, lr=spec.learning_rate, betas=spec.betas,
                                      eps=spec.eps, weight_decay=spec.weight_decay,
                                      foreach=False)
    optimizer.zero_grad(set_to_none=True)
    counter = FlopCounterMode(display=False, custom_mapping={
        torch.ops.aten.convolution_backward: _grouped_conv_backward_flop})
    raw = FlopCounterMode(display=False)
    with train_mode(ref), _math_attention(), torch.enable_grad(), counter, raw:
        loss = compute_loss(spec, ref(*args, **kwargs), target)
        loss.backward()
    flops = int(counter.get_total_flops())
    result.model.metadata["train.flop_counter_raw"] = str(int(raw.get_total_flops()))
    found: list[tuple[str, str, torch.Tensor]] = [("loss", "loss", loss.detach())]
    for n, p in zip(result.params, params, strict=True):
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        found.append((f"grad.{n}", "gradient", grad.detach().clone()))
    if grads is not None:
        for p, g in zip(params, grads, strict=True):
            p.grad = torch.from_numpy(np.array(g)).to(p.device, p.dtype).reshape(p.shape)
    optimizer.step()
    found += [(n, "parameter", p.detach()) for n, p in zip(result.params, params, strict=True)]
    found += [(n, "buffer", named[n].detach()) for n in result.buffers]
    if spec.optimizer == "adamw":
        for n, p in zip(result.params, params, strict=True):
            st = optimizer.state[p]
            found += [(f"adamw.step.{n}", "optimizer_state", torch.as_tensor(st["step"])),
                      (f"adamw.exp_avg.{n}", "optimizer_state", st["exp_avg"]),
                      (f"adamw.exp_avg_sq.{n}", "optimizer_state", st["exp_avg_sq"])]
    return found, flops


FORWARD_KINDS = ("loss", "buffer")
"""Checks of values the forward pass alone decides: continuous in the inputs, so float32
rounding moves them by rounding only, whatever kinks the model has."""


def verify_train(result: TrainCaptureResult, module: torch.nn.Module) -> TrainVerifyReport:
    """Run the captured step in the reference executor and compare the loss, every
    gradient and buffer with an eager step (autograd on a copy of the module, same
    inputs and target); the updated parameters and optimizer state with torch.optim's
    step from the IR's gradients (an optimizer such as AdamW turns a gradient's rounding
    noise into a full step of +-lr where the exact gradient is ~0, so stepping from the
    eager gradients would compare noise); and the IR's matmul FLOPs with
    FlopCounterMode's count of the eager forward + backward.

    Float32 steps whose forward checks pass but some gradient-derived tensors do not are
    checked again in float64: the same IR widened (`irbridge.precision.widened`) against
    the eager step in float64. A gradient through ReLU, clamp or max pooling jumps where
    float32 rounding puts an input on the other side of a kink, and the IR's rounding is
    not eager's; in float64 the same graph either agrees (the report passes and says
    so) or a formula is wrong (it fails)."""
    from irbridge.executor import run_model
    from irbridge.summary import summarize

    ir_flops = summarize(result.model).cost.matmul_flops
    feeds = {name: t.detach().cpu().numpy() for name, t in result.inputs.items()}
    try:
        got = run_model(result.model, feeds)
    except Exception as exc:
        return TrainVerifyReport([], ir_flops, 0, f"the IR did not run: {one_line(exc)}")
    n_p = len(result.params)
    try:
        expected, torch_flops = eager_step(result, module, got[1:1 + n_p])
        raw = int(result.model.metadata.pop("train.flop_counter_raw", torch_flops))
        exact, _ = eager_step(result, module, got[1:1 + n_p], float64=True)
    except Exception as exc:
        return TrainVerifyReport([], ir_flops, 0, f"eager step failed: {one_line(exc)}")
    if len(got) != len(expected):
        return TrainVerifyReport([], ir_flops, torch_flops,
                                 f"the IR has {len(got)} outputs, the eager step "
                                 f"{len(expected)}")
    report = TrainVerifyReport(_compare(exact, got, expected), ir_flops, torch_flops,
                               torch_raw_flops=raw)
    failed = [c for c in report.checks if not c.passed]
    float32 = any(t.dtype == DType.FLOAT32 for t in result.model.tensors.values()) or any(
        t.dtype == torch.float32 for t in result.inputs.values())  # (LMs: int token inputs)
    if failed and report.flops_match and float32 \
            and all(c.kind not in FORWARD_KINDS for c in failed):
        report.float64 = _verify_widened(result, module, expected, exact)
    return report


Stepped = list[tuple[str, str, torch.Tensor]]
"""(name, kind, tensor) per output of a step, as `eager_step` returns them."""


def _compare(exact: Stepped, got: list[Any], rounded: Stepped,
             rtol: float | None = None, atol: float = ATOL) -> list[TensorCheck]:
    """One check per output: |IR - exact| within rtol x max |exact| + atol + NOISE_FACTOR
    x |rounded - exact| (rounded: an eager float32 step, so the last term is how far
    float32 rounding moves this tensor); rtol by the tensor's dtype in `rounded` unless
    given."""
    checks = []
    for (name, kind, ref64), (_, _, ref), value in zip(exact, rounded, got, strict=True):
        want = ref64.detach().to(torch.float64).cpu().numpy()
        eager = ref.detach().to(torch.float64).cpu().numpy()
        have = np.asarray(value, dtype=np.float64)
        floating = ref.is_floating_point()
        rel = (RTOL.get(ref.dtype, 1e-4) if rtol is None else rtol) if floating else 0.0
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        if have.shape != want.shape:
            checks.append(TensorCheck(name, kind, float("inf"), scale, 0.0, False))
            continue
        # eager's own distance from the float64 step: how ill-conditioned this tensor is
        noise = float(np.max(np.abs(eager - want))) if want.size and floating else 0.0
        tol = rel * scale + (atol if floating else 0.0) + NOISE_FACTOR * noise
        err = float(np.max(np.abs(have - want))) if want.size else 0.0
        checks.append(TensorCheck(name, kind, err, scale, tol,
                                  bool(np.isfinite(err) and err <= tol)))
    return checks


ATOL64 = 1e-12
"""Absolute floor of the float64 re-check (float64 cancellation residues are ~1e-16 of
the terms; measured worst error on mobilenet_v2's step 7.7e-13 relative to O(1) tensors:
the relative part, RTOL[float64] = 1e-10 of each tensor's scale, is what bounds it)."""


def _verify_widened(result: TrainCaptureResult, module: torch.nn.Module, eager32: Stepped,
                    eager64: Stepped) -> list[TensorCheck]:
    """The same IR with float32 widened to float64, run on the same inputs (widened
    exactly), against the eager step in float64 (torch.optim stepping from the widened
    IR's gradients). Tolerance per tensor: RTOL[float64] x its scale + ATOL64 +
    NOISE_FACTOR x the distance between the float32 check's eager float32 and float64
    steps (`eager32`, `eager64`: autograd's loss, gradients and buffers, and torch.optim
    stepping from the float32 IR's gradients at each precision; reused, not run again).
    The last term is there because the widened IR still holds the constants the float32
    capture rounded (eps, 1/N, the learning rate, ...): a perturbation of float32
    rounding size, which the step amplifies as much as it amplifies eager float32's
    rounding of every op (measured on mobilenet_v2: the widened IR uses at most 9% of
    that term); it is eager's own, so the IR's float32 kink decisions cannot widen it."""
    from irbridge.executor import run_model
    from irbridge.precision import widened

    feeds = {name: t.detach().cpu().numpy() for name, t in result.inputs.items()}
    feeds = {name: a.astype(np.float64) if a.dtype == np.float32 else a
             for name, a in feeds.items()}
    try:
        got = run_model(widened(result.model), feeds)
        exact, _ = eager_step(result, module, got[1:1 + len(result.params)], float64=True)
    except Exception as exc:
        return [TensorCheck(f"float64 run: {one_line(exc)}", "error", float("inf"), 0.0,
                            0.0, False)]
    finally:
        result.model.metadata.pop("train.flop_counter_raw", None)
    if len(got) != len(exact):
        return [TensorCheck(f"float64 run: {len(got)} outputs for {len(exact)}", "error",
                            float("inf"), 0.0, 0.0, False)]
    # the rounding term is eager's own: its float32 step's distance from its float64 one
    noise = [(n, k, t - b64 + b32) for (n, k, t), (_, _, b64), (_, _, b32)
             in zip(exact, eager64, eager32, strict=True)]
    return _compare(exact, got, noise, rtol=RTOL[torch.float64], atol=ATOL64)
