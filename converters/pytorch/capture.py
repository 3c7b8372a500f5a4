"""Graph capture: turn an `nn.Module` and example inputs into torch.fx graphs.

Three methods, each producing a `Capture` (one or more fx graphs, what every placeholder
means, and how the eager model's outputs map onto graph outputs):

* `fx`      torch.fx symbolic tracing, then an interpreter run that records every node's
            real output in `node.meta["val"]` (shape propagation with values).
* `dynamo`  TorchDynamo through `torch.compile(backend=...)`, keeping *every* graph it
            produces around graph breaks, in execution order, with the links between them
            found by tensor identity at run time, and the break reasons.
* `export`  torch.export (non-strict by default), optionally decomposed to core ATen, with
            optional symbolic batch dimensions.

Captures run under `torch.no_grad()` with the MHA fast path switched off: otherwise
`nn.MultiheadAttention` under no_grad dispatches to the fused
`aten._native_multi_head_attention`, which hides the attention's structure (the lowering
still expands that op when it appears anyway).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import itertools
import keyword
import logging
import operator
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import torch.fx
import torch.nn.modules.module as _module_mod
import torch.utils._pytree as pytree

from irbridge.errors import CaptureError
from irbridge.ir import SymDim

from ._util import (
    ModulePaths,
    describe_exception,
    register_dataclass_type,
    register_dataclasses,
)

_log = logging.getLogger(__name__)

SOURCE_FORMATS = {"fx": "torch.fx", "dynamo": "torch.dynamo", "export": "torch.export"}

DynamicSpec = Mapping[str, tuple[int, int] | tuple[int, int, int]]
"""{"batch": (min, max)}: entries apply to dims 0, 1, ... of every input tensor in order;
a triple (dim, min, max) names the dim explicitly."""


@dataclass
class Slot:
    """What one placeholder of a captured graph stands for."""

    role: str  # input | parameter | buffer | constant | link | external | symint | unused
    name: str  # IR input name or model tensor name
    value: Any = None  # example value: a tensor (real, fake or meta) or a Python value
    link: tuple[int, int] | None = None  # (graph index, tensor output position)


@dataclass
class CapturedGraph:
    gm: torch.fx.GraphModule
    slots: list[Slot]
    break_reason: str = ""
    compiled_index: int = 0  # Dynamo: which compiled graph this invocation ran
    mutations: dict[str, str] = field(default_factory=dict)  # export: output node -> buffer
    # Dynamo re-runs one compiled graph for several modules (a loop over blocks): module
    # paths recorded at compile time are re-rooted per run, e.g. {"blocks.0": "blocks.1"}
    path_map: dict[str, str] = field(default_factory=dict)


@dataclass
class Capture:
    method: str
    graphs: list[CapturedGraph]
    root: torch.nn.Module
    outputs: list[tuple[int, int] | None]  # per tensor leaf of the eager output
    inputs: dict[str, torch.Tensor]  # IR input name -> example tensor
    real_values: bool = False  # node.meta["val"] holds real tensors (fx)
    symbols: dict[str, SymDim] = field(default_factory=dict)  # sympy symbol name -> SymDim
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def source_format(self) -> str:
        return SOURCE_FORMATS[self.method]


# -- shared helpers ---------------------------------------------------------------------


def warm_up(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """One eager forward pass, so lazily initialised state (YOLO's anchors and strides,
    lazy modules) exists before tracing."""
    with torch.no_grad(), keep_buffers(model, (args, kwargs)):
        register_dataclasses(model(*args, **kwargs))


def has_lazy_parameters(model: torch.nn.Module) -> bool:
    """Whether the model still has uninitialised (`nn.Lazy*`) parameters or buffers: only
    an eager forward pass gives them a shape, so capture() warms such a model up first."""
    from torch.nn.parameter import is_lazy

    return any(is_lazy(t) for t in model.parameters()) or any(
        is_lazy(t) for t in model.buffers())


class ModuleState:
    """A snapshot of every submodule's attributes (`__dict__`, parameters, buffers and
    children), of the contents of the mutable containers among them (hook dicts such as
    `_forward_hooks` and `_forward_pre_hooks`, caches, lists) and of torch's global module
    hooks: to tell whether running code on the model (a capture attempt, a warm-up) changed
    it, and to undo it.

    Tracing code that builds state lazily (`if self.anchors is None: self.anchors = ...`,
    YOLO's Detect head) stores tracer objects (fx Proxies, export's fake tensors) on the
    model, which breaks its next eager call; libraries install hooks on the first forward
    and set a flag (transformers 5's output capturing): restoring the flag but not the
    hooks makes the next forward install them twice. capture() restores a snapshot after
    each attempt and the one taken on entry when it returns, so the model is left as it
    was found. Tensors are compared by identity, other values with ==, containers by their
    contents; containers are restored in place (other references to them stay valid).
    In-place updates of buffers are not state changes: `keep_buffers` undoes those."""

    def __init__(self, model: torch.nn.Module) -> None:
        # TorchScript modules keep their state in C++ (their `_parameters` & co. are
        # read-through wrappers, not dicts) and Python tracing cannot assign to them
        self.saved = [(m, dict(vars(m)), dict(m._parameters), dict(m._buffers),
                       dict(m._modules)) for m in model.modules()
                      if not isinstance(m, torch.jit.ScriptModule)]
        self.types = {id(m): type(m) for m, *_ in self.saved}
        self.contents = {id(value): (value, _contents(value))
                         for _, attrs, _, _, _ in self.saved for value in attrs.values()
                         if isinstance(value, _CONTAINERS)}
        self.global_hooks = {name: dict(getattr(_module_mod, name)) for name in _GLOBAL_HOOKS
                             if isinstance(getattr(_module_mod, name, None), dict)}

    def changed(self) -> list[str]:
        """`Class.attribute` of what differs from the snapshot (empty when nothing does)."""
        found: list[str] = []
        for module, attrs, params, buffers, children in self.saved:
            where = type(module).__name__
            for now, before in ((vars(module), attrs), (module._parameters, params),
                                (module._buffers, buffers), (module._modules, children)):
                for key in (now.keys() | before.keys()) - _TORCH_MARKS:
                    if not self._kept(now, before, key):
                        found.append(f"{where}.{key}")
        for name, hooks in self.global_hooks.items():
            if not _same(dict(getattr(_module_mod, name)), hooks):
                found.append(f"torch.nn.modules.module.{name}")
        return found

    def _kept(self, now: dict[str, Any], before: dict[str, Any], key: str) -> bool:
        """The attribute is the same object as before and, for a container, holds the same
        contents."""
        if key not in now or key not in before or not _same(now[key], before[key]):
            return False
        saved = self.contents.get(id(now[key]))
        return saved is None or _same(_contents(now[key]), saved[1])

    def restore(self) -> None:
        """Put everything back, except modules that changed class: an `nn.Lazy*` module
        a forward initialised (it became e.g. `nn.Linear` with real parameters and dropped
        its initialisation hooks) cannot be made lazy again and keeps its parameters."""
        initialised = {id(m) for m, *_ in self.saved if type(m) is not self.types[id(m)]}
        for module, attrs, params, buffers, children in self.saved:
            if id(module) in initialised:
                continue
            pairs: list[tuple[dict[str, Any], dict[str, Any]]] = [
                (vars(module), attrs), (module._parameters, params),
                (module._buffers, buffers), (module._modules, children)]
            for now, before in pairs:
                for key in [k for k in now if k not in before and k not in _TORCH_MARKS]:
                    del now[key]
                now.update(before)
        skipped = {id(v) for m, attrs, *_ in self.saved if id(m) in initialised
                   for v in attrs.values()}
        for value, contents in self.contents.values():
            if id(value) not in skipped and not _same(_contents(value), contents):
                _refill(value, contents)
        for name, hooks in self.global_hooks.items():
            current = getattr(_module_mod, name)
            if not _same(dict(current), hooks):
                current.clear()
                current.update(hooks)


_CONTAINERS = (dict, list, set)
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks",
                 "_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs",
                 "_global_module_registration_hooks", "_global_parameter_registration_hooks",
                 "_global_buffer_registration_hooks")
"""torch's process-wide module hooks (dicts in torch.nn.modules.module)."""


def _contents(value: Any) -> Any:
    """A shallow copy of a container's contents, to compare and restore later."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return set(value)


def _refill(value: Any, contents: Any) -> None:
    """Put a container's saved contents back in place (same object, same order)."""
    if isinstance(value, dict):
        value.clear()
        value.update(contents)
    elif isinstance(value, list):
        value[:] = contents
    else:
        value.clear()
        value.update(contents)


_TORCH_MARKS = frozenset({"_is_torch_compile"})
"""Attributes torch itself sets on a model it compiles: not the model's state."""


def _same(a: Any, b: Any, depth: int = 0) -> bool:
    """Identity for tensors, modules and other objects; equal contents for plain values
    and containers of them (torch.export rebuilds lists and tuples it restores)."""
    if a is b:
        return True
    if type(a) is not type(b) or depth > 4:
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b,
                                                                                strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, set | frozenset):
        return bool(a == b)
    if isinstance(a, bool | int | float | complex | str | bytes | torch.dtype
                  | torch.device):
        return bool(a == b)
    return False


@contextlib.contextmanager
def keep_buffers(model: torch.nn.Module, inputs: Any = None) -> Iterator[None]:
    """Undo what running the model does to its buffers (batch-norm statistics of a model
    in training mode) and, given `inputs` (args and kwargs, any nesting), to the input
    tensors (a forward that updates an input in place, `x.add_(1)`), so that capturing
    leaves the model and its inputs as they were: a later run of the IR on the inputs
    then computes what the model computed."""
    saved = [(b, b.detach().clone()) for b in model.buffers()  # (sparse ones: no in-place
             if not b.is_meta and b.layout == torch.strided  # update to undo, no equal)
             and b.numel() <= 1 << 24]
    # the one torch.nn layer whose forward rewrites a parameter: an embedding with
    # max_norm renormalises the rows it looks up in place
    saved += [(m.weight, m.weight.detach().clone()) for m in model.modules()
              if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag)
              and m.max_norm is not None and not m.weight.is_meta]
    saved += [(t, t.detach().clone()) for t in _input_leaves(inputs)
              if t.layout == torch.strided]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                if buffer.shape == value.shape and not torch.equal(buffer, value):
                    buffer.copy_(value)


def _input_leaves(inputs: Any) -> list[torch.Tensor]:
    """The input tensors a forward could update in place: real tensors that track their
    version (inference-mode tensors cannot be updated outside inference mode)."""
    from torch._subclasses.fake_tensor import is_fake

    found: list[torch.Tensor] = []
    for leaf in pytree.tree_leaves(inputs):
        if not isinstance(leaf, torch.Tensor) or leaf.is_meta or leaf.is_inference():
            continue
        if any(leaf is t for t in found) or is_fake(leaf):
            continue
        found.append(leaf)
    return found


@contextlib.contextmanager
def keep_global_modes() -> Iterator[None]:
    """Put torch's process-wide modes back as found: grad mode and, per device type,
    whether autocast is on and its dtype. A capture must not leave them changed (a
    graph that enters autocast, run or re-traced halfway, would leave every later eager
    computation of the process in bfloat16)."""
    devices = [d for d in ("cpu", "cuda") if _autocast_known(d)]
    saved = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in devices]
    grad = torch.is_grad_enabled()
    try:
        yield
    finally:
        for device, enabled, dtype in saved:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_grad_enabled(grad)


def ambient_autocast(model: torch.nn.Module, inputs: Any) -> str:
    """The autocast that is on around a capture for the device types the model's
    parameters, buffers and input tensors live on ("cpu bfloat16"; empty when none).
    It changes what the model computes (its matmuls and convolutions run in that dtype),
    as a `torch.autocast` region inside forward does; autocast on another device type
    changes nothing here."""
    devices = {t.device.type for t in itertools.chain(model.parameters(), model.buffers(),
                                                      pytree.tree_leaves(inputs))
               if isinstance(t, torch.Tensor)}
    return ", ".join(f"{d} {str(torch.get_autocast_dtype(d)).removeprefix('torch.')}"
                     for d in sorted(devices)
                     if _autocast_known(d) and torch.is_autocast_enabled(d))


def _autocast_known(device: str) -> bool:
    try:
        torch.is_autocast_enabled(device)
    except (RuntimeError, TypeError):
        return False
    return True


@contextlib.contextmanager
def capture_mode() -> Iterator[None]:
    """No autograd bookkeeping (less memory), but with the fused attention fast path of
    nn.MultiheadAttention / nn.TransformerEncoderLayer switched off: under no_grad it
    would otherwise replace the whole attention block by one fused op."""
    mha = getattr(torch.backends, "mha", None)
    previous = mha.get_fastpath_enabled() if mha is not None else None
    try:
        if mha is not None:
            mha.set_fastpath_enabled(False)
        with torch.no_grad():
            yield
    finally:
        if mha is not None and previous is not None:
            mha.set_fastpath_enabled(previous)


def input_names(model: torch.nn.Module, args: tuple[Any, ...],
                kwargs: Mapping[str, Any]) -> dict[int, str]:
    """id(tensor) -> a readable input name taken from `forward`'s signature
    (x, input_ids, pixel_values, or x_0, x_1 for tensors nested in tuples)."""
    names: dict[int, str] = {}
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
        items: list[tuple[str, Any]] = list(bound.arguments.items())
    except (TypeError, ValueError):
        items = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    used: set[str] = set()
    for name, value in items:
        leaves, _ = pytree.tree_flatten_with_path(value)
        for path, leaf in leaves:
            if not isinstance(leaf, torch.Tensor) or id(leaf) in names:
                continue
            suffix = "".join(f"_{key_text(k)}" for k in path)
            candidate = f"{name}{suffix}"
            while candidate in used:
                candidate += "_"
            used.add(candidate)
            names[id(leaf)] = candidate
    return names


def key_text(key: Any) -> str:
    for attr in ("idx", "key", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def tensor_attributes(model: torch.nn.Module) -> dict[int, str]:
    """id(tensor) -> path of tensors held as plain module attributes (not registered)."""
    found: dict[int, str] = {}
    for path, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not key.startswith("__"):
                found.setdefault(id(value), f"{path}.{key}" if path else key)
    return found


def named_tensors(model: torch.nn.Module) -> dict[int, tuple[str, str]]:
    """id(param or buffer) -> (role, first qualified name)."""
    found: dict[int, tuple[str, str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        found.setdefault(id(p), ("parameter", name))
    for name, b in model.named_buffers(remove_duplicate=False):
        found.setdefault(id(b), ("buffer", name))
    return found


# -- fx -------------------------------------------------------------------------------


_TORCH_ROOT = str(Path(torch.__file__).resolve().parent)


_ROOT_FILE = "<irbridge fx root>"  # file name of `_fixed_signature`'s wrappers
MAX_LEAF_CLASSES = 16
"""How many submodule classes fx capture may turn into leaves before it gives up."""


def _trace_with_leaves(model: torch.nn.Module, params: Sequence[inspect.Parameter],
                       concrete: Mapping[str, Any], enabled: bool = True,
                       ) -> tuple[_Tracer, torch.fx.Graph]:
    """Symbolic tracing, with a fallback: when tracing fails inside a submodule's forward
    (Python iterating over a traced value, control flow on one), every module of that
    class becomes a leaf (a `call_module` node, not traced into) and tracing starts
    again. The lowering re-traces such leaves to ATen with `make_fx` on the real values
    the interpreter run records. A failure in the root's own forward, or in a submodule
    holding more than half of the model's parameters, is raised as it is.

    Only for an explicit frontend="fx": on transformer models the failing submodule is a
    whole encoder whose re-trace fails too, so `auto` would pay a full forward pass for an
    IR with opaque nodes before moving on to export."""
    leaves: set[type] = set()
    while True:
        tracer = _Tracer(frozenset(leaves), params)
        tracer.record_stack_traces = True
        try:
            graph = tracer.trace(model, concrete_args=dict(concrete) or None)
        except Exception as exc:
            culprit = _failing_submodule(exc, model) if enabled else None
            if (culprit is None or type(culprit) in leaves or len(leaves) >= MAX_LEAF_CLASSES
                    or 2 * _parameter_count(culprit) > _parameter_count(model)):
                # a failure in the root, or in a module holding most of the model (a whole
                # transformer stack): fx is not the front-end for this model
                raise
            leaves.add(type(culprit))
            continue
        _dataclass_outputs_as_dicts(graph)
        return tracer, graph


def _dataclass_outputs_as_dicts(graph: torch.fx.Graph) -> None:
    """fx records a dataclass holding traced values (a user's `@dataclass` output) as a
    call of its class, an op no converter knows. In the graph's output such a call becomes
    the dict of its fields, in field order, which flattens as the registered dataclass
    does (`register_dataclass_type`). Elsewhere (an argument of a leaf call) the call
    stays: the leaf's forward takes the dataclass itself."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")

    def as_dict(arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node) and arg.op == "call_function" and \
                isinstance(arg.target, type) and dataclasses.is_dataclass(arg.target) and \
                not arg.args:
            register_dataclass_type(arg.target)
            return {f.name: torch.fx.node.map_aggregate(arg.kwargs[f.name], as_dict)
                    for f in dataclasses.fields(arg.target) if f.name in arg.kwargs}
        return arg

    output.args = torch.fx.node.map_aggregate(output.args, as_dict)
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and isinstance(node.target, type) and \
                dataclasses.is_dataclass(node.target) and not node.users:
            graph.erase_node(node)


def _parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _failing_submodule(exc: BaseException, model: torch.nn.Module) -> torch.nn.Module | None:
    """The innermost submodule of `model` (not `model` itself) whose method was running
    when `exc` was raised."""
    inside = {id(m) for m in model.modules()} - {id(model)}
    found: torch.nn.Module | None = None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and id(owner) in inside:
            found = owner
        tb = tb.tb_next
    return found


def _fixed_signature(fn: Callable[..., Any], params: Sequence[inspect.Parameter],
                     ) -> Callable[..., Any]:
    """`def forward(self, a, b): return fn(self, a=a, b=b)`: a root function fx can make
    placeholders for. Traced directly, a forward with `*args`/`**kwargs` (ultralytics'
    models) gets a Proxy for `*args` that fails when unpacked, and one that decorators
    wrap (Hugging Face models) fails on the wrapper's code object
    (`co_varnames is too small`)."""
    for p in params:
        if not p.name.isidentifier() or keyword.iskeyword(p.name):
            raise CaptureError(f"fx capture: cannot trace forward argument {p.name!r}")
    passed = [p.name if p.kind == p.POSITIONAL_ONLY else f"{p.name}={p.name}" for p in params]
    source = (f"def forward(self, {', '.join(p.name for p in params)}):\n"
              f"    return _fn(self, {', '.join(passed)})\n")
    namespace: dict[str, Any] = {"_fn": fn}
    exec(compile(source, _ROOT_FILE, "exec"), namespace)
    return cast(Callable[..., Any], namespace["forward"])


class _Tracer(torch.fx.Tracer):
    """fx's tracer with leaf classes of our choosing (see `_trace_with_leaves`), a
    fixed-signature root function (`_fixed_signature`), and a cheaper stack-trace
    filter. The stock filter drops frames of a list of torch files it builds by importing
    torch.export, aot_autograd and Dynamo (`symbolic_shapes.uninteresting_files`): about
    1 s for the first fx capture of a process, more when no bytecode cache can be
    written. The frames kept here are the same ones the lowering uses
    (`location_from_stack` takes the innermost frame outside torch): from the first
    `forward` on, minus torch's own files."""

    def __init__(self, leaf_classes: frozenset[type] = frozenset(),
                 root_params: Sequence[inspect.Parameter] | None = None) -> None:
        super().__init__()
        self.leaf_classes = leaf_classes
        self.root_params = list(root_params) if root_params is not None else None

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if type(m) in self.leaf_classes:  # re-traced by calling the module: hooks run
            return True
        if has_forward_hooks(m):
            # a torch.nn leaf becomes one call_module node that the lowering maps to the
            # layer's op alone: traced into instead, the hooks (which may change the
            # inputs or the output) are part of the graph
            return False
        return super().is_leaf_module(m, module_qualified_name)

    def create_args_for_root(self, root_fn: Callable[..., Any], is_module: bool,
                             concrete_args: Any = None) -> tuple[Any, list[Any]]:
        if is_module and self.root_params is not None:
            root_fn = _fixed_signature(root_fn, self.root_params)
        return super().create_args_for_root(root_fn, is_module, concrete_args)

    def _filter_traceback_frames(self, user_stack_summary: traceback.StackSummary,
                                 ) -> traceback.StackSummary:
        frames = list(user_stack_summary)
        first = next((i for i, f in enumerate(frames) if f.name == "forward"), None)
        if first is None:
            return traceback.StackSummary.from_list([])
        return traceback.StackSummary.from_list(
            [f for f in frames[first:] if not _in_torch_internals(f.filename)
             and f.filename != _ROOT_FILE])


def has_forward_hooks(module: torch.nn.Module) -> bool:
    """Whether calling `module` runs forward hooks or pre-hooks (its own or torch's
    global ones) besides its forward."""
    return bool(module._forward_hooks or module._forward_pre_hooks
                or _module_mod._global_forward_hooks
                or _module_mod._global_forward_pre_hooks)


def _in_torch_internals(filename: str) -> bool:
    if not filename.startswith(_TORCH_ROOT):
        return False
    rest = filename[len(_TORCH_ROOT):]
    return rest.startswith(("/fx/", "/_", "/export/", "/utils/_")) or rest in (
        "/__init__.py", "/nn/modules/module.py", "/overrides.py")


class _RecordingInterpreter(torch.fx.Interpreter):
    """Runs the traced graph and keeps each node's (detached) output in meta["val"]."""

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        n.meta["val"] = pytree.tree_map_only(torch.Tensor, lambda t: t.detach(), result)
        return result


def capture_fx(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
               *, dynamic: DynamicSpec | None = None, leaf_fallback: bool = False) -> Capture:
    """Symbolic tracing plus an interpreter run that records real values. leaf_fallback:
    see `_trace_with_leaves` (capture() uses it for frontend="fx", not for auto)."""
    if dynamic:
        raise CaptureError("fx capture has no symbolic shapes; use frontend='export' "
                           "(or 'dynamo') with dynamic=")
    sig = inspect.signature(model.forward)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise CaptureError(f"fx capture: inputs do not fit forward{sig}: {exc}") from exc
    params = [p for p in sig.parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name in bound.arguments
           for p in sig.parameters.values()):
        raise CaptureError("fx capture cannot trace forward(*args/**kwargs) inputs")
    concrete: dict[str, Any] = {}
    values: list[Any] = []
    for p in params:
        value = bound.arguments.get(p.name, p.default)
        if value is inspect.Parameter.empty:
            raise CaptureError(f"fx capture: no value for forward argument {p.name!r}")
        values.append(value)
        if not any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value)):
            concrete[p.name] = value
    if has_forward_hooks(model):
        # symbolic tracing calls the root's forward itself, not the module: its hooks
        # would be missing from the graph
        raise CaptureError("fx capture skips the model's own forward hooks and pre-hooks "
                           "(symbolic tracing calls forward directly); use "
                           "frontend='export' or 'dynamo'")
    own = set(vars(model))
    versions = _versions(model)
    try:
        with _no_autocast_regions():
            tracer, graph = _trace_with_leaves(model, params, concrete, leaf_fallback)
        gm = torch.fx.GraphModule(tracer.root, graph, type(model).__name__)
        updated = [name for name, version in _versions(model).items()
                   if versions.get(name) != version]
        if updated:
            # an in-place op on a real tensor (`self.ema.mul_(m)`) runs while tracing
            # instead of being recorded: the graph would miss the update
            raise CaptureError(
                f"fx capture: forward updates {', '.join(sorted(updated)[:3])} in place, "
                "which symbolic tracing runs instead of recording; use frontend='export'")
    finally:
        # the tracer stores tensor constants of forward on the root (`_tensor_constant0`);
        # the GraphModule has its own reference, the model need not keep them
        for key in [k for k in vars(model) if k not in own and k.startswith("_tensor_constant")]:
            delattr(model, key)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(values):
        raise CaptureError(f"fx capture: traced {len(placeholders)} inputs for "
                           f"{len(values)} forward arguments")
    names = input_names(model, args, kwargs)
    slots: list[Slot] = []
    for p, value in zip(params, values, strict=True):
        if isinstance(value, torch.Tensor):
            slots.append(Slot("input", names.get(id(value), p.name), value))
        elif p.name in concrete:
            slots.append(Slot("unused", p.name, value))
        else:
            slots.append(Slot("input", p.name, value))  # pytree of tensors
    attrs = _attribute_versions(gm)
    with capture_mode(), keep_buffers(model, values):
        _RecordingInterpreter(gm).run(*values)
    written = sorted({_owner(model, gm, k) for k, v in _attribute_versions(gm).items()
                      if attrs.get(k) != v})
    if written:
        # an in-place write the tracer recorded on a parameter or buffer (`self.cache[:,
        # pos] = k`, `self.buf.copy_(x)`): fx's graph reads attributes as constants, so a
        # later read of it would see the value from before the write
        raise CaptureError(
            f"fx capture: forward writes into {', '.join(written[:3])} in place, which fx's "
            "graph reads as a constant; use frontend='export'")
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    # an output node may stand for a structure (a leaf module returning a tuple): count
    # the tensors inside, in pytree order, as the lowering lists them
    count = sum(sum(1 for t in pytree.tree_leaves(leaf.meta.get("val"))
                    if isinstance(t, torch.Tensor))
                for leaf in pytree.tree_leaves(output_node.args[0])
                if isinstance(leaf, torch.fx.Node))
    inputs = _input_tensors(args, kwargs, names)
    result = Capture("fx", [CapturedGraph(gm, slots)], model, [(0, i) for i in range(count)],
                     inputs, real_values=True)
    if tracer.leaf_classes:
        result.metadata[FX_LEAF_CLASSES] = ", ".join(
            sorted(c.__name__ for c in tracer.leaf_classes))
    return result


@contextlib.contextmanager
def _no_autocast_regions() -> Iterator[None]:
    """fx symbolic tracing runs `with torch.autocast(...)` as Python instead of recording
    it: the graph would compute in full precision what eager computes in bfloat16/float16.
    Entering one while tracing fails the fx attempt."""
    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__enter__

    def refuse(self: Any) -> Any:
        if getattr(self, "_enabled", True):
            raise CaptureError("fx capture cannot record torch.autocast regions (their "
                               "casts happen at dispatch); use frontend='export'")
        return original(self)

    autocast.__enter__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        autocast.__enter__ = original  # type: ignore[method-assign]


def _attribute_versions(gm: torch.fx.GraphModule) -> dict[str, int]:
    """Version counters of the tensors the graph's get_attr nodes read, by target (an
    in-place write through any view of one bumps it); what leaf modules update inside
    themselves (batch-norm statistics) is not read by get_attr and not counted."""
    found: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value: Any = gm
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
        if isinstance(value, torch.Tensor) and not value.is_inference():
            found[str(node.target)] = value._version
    return found


def _owner(model: torch.nn.Module, gm: torch.fx.GraphModule, target: str) -> str:
    """The model's parameter or buffer name for a get_attr target: a `_tensor_constant`
    the tracer made of a view of a buffer (`self.cache[:, 2].copy_(x)` slices the real
    tensor while tracing) is named by the buffer whose storage it shares."""
    if not target.startswith("_tensor_constant"):
        return target
    value = getattr(gm, target, None)
    if isinstance(value, torch.Tensor) and not value.is_meta:
        storage = value.untyped_storage().data_ptr()
        for name, t in list(model.named_buffers()) + list(model.named_parameters()):
            if not t.is_meta and t.untyped_storage().data_ptr() == storage:
                return name
    return "a tensor constant of forward"


def _versions(model: torch.nn.Module) -> dict[str, int]:
    """Version counters of the model's parameters and buffers (in-place updates bump
    them), by name."""
    found: dict[str, int] = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.is_inference():
            found[name] = t._version
    return found


FX_LEAF_CLASSES = "fx.leaf_classes"
"""Capture metadata: the submodule classes fx traced as leaves (the leaf fallback)."""


def _input_tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   names: Mapping[int, str]) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for leaf in pytree.tree_leaves((args, dict(kwargs))):
        if isinstance(leaf, torch.Tensor) and id(leaf) in names:
            found[names[id(leaf)]] = leaf
    return found


# -- export ---------------------------------------------------------------------------


def _decomposition_table() -> Any:
    """torch's default decompositions, less those that change an op's results: the CPU
    flash-attention kernel's decomposition returns the attention weights [.., L, S] where
    the kernel returns its log-sum-exp [.., L] (the handler lowers the op itself)."""
    table = torch.export.default_decompositions()
    flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if flash is not None:
        table.pop(flash.default, None)
    return table


def _quiet_failure(run: Callable[[], Any]) -> Any:
    """`run()`, with what it writes to sys.stderr held back unless it succeeds: a failed
    torch.export prints the partial graph it traced (hundreds of lines) before raising,
    while capture() reports the failure in one line and tries the next method. The held
    text goes to irbridge's log at DEBUG level."""
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            result = run()
    except BaseException:
        if held.getvalue():
            _log.debug("stderr of the failed attempt:\n%s", held.getvalue())
        raise
    sys.stderr.write(held.getvalue())
    return result


def _export_hf_caches() -> None:
    """Hugging Face causal LMs return their KV cache (`DynamicCache`) by default, which
    torch.export cannot flatten until transformers registers it as a pytree node (as its
    own exporters do); once registered, the cache's key and value tensors are outputs of
    the graph. Only when the model's code has imported transformers."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # a transformers without it: torch.export refuses as before
        return
    register_dynamic_cache_export_support()


def _no_op_grad_modes(gm: torch.fx.GraphModule) -> list[torch.fx.Node] | None:
    """The `torch._C._set_grad_enabled` nodes of `gm` and the graphs nested in it when every
    one sets the grad mode already in force (a model's `torch.no_grad()` traced under
    capture's own no_grad), else None. Each such node is a statement with no users."""
    ambient = torch.is_grad_enabled()
    found: list[torch.fx.Node] = []
    for sub in gm.modules():
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for node in sub.graph.nodes:
            if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
                if node.args != (ambient,) or node.kwargs or node.users:
                    return None
                found.append(node)
    return found


_SHORTCUT_LOCK = threading.Lock()
_shortcut_users: list[Any] = []   # one entry per open context; [0] is torch's own pass


def _grad_mode_shortcut(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def shortcut(gm: torch.fx.GraphModule, signature: Any) -> Any:
        nodes = _no_op_grad_modes(gm)
        if nodes is None:
            return original(gm, signature)
        for node in nodes:
            node.graph.erase_node(node)
        for graph in {id(node.graph): node.graph for node in nodes}.values():
            owner = graph.owning_module
            if owner is not None:
                owner.recompile()
        return gm, signature

    return shortcut


@contextlib.contextmanager
def _grad_mode_pass_shortcut() -> Iterator[None]:
    """torch.export records every `torch._C._set_grad_enabled` call, then its
    replace_set_grad_with_hop_pass splits the graph at each one, code-generates and
    compiles every piece and the whole graph again, and inlines the pieces whose mode is
    the ambient one: for Llama-3-70B (two no-op calls around its rotary embedding) 2.7 s of
    an 11 s capture, to return the graph without the two calls. While this context is
    open, a graph whose every such call is a no-op (the mode it sets is the one in force)
    has them erased instead, the pass's own result; any other graph goes through the
    pass. Captures in several threads share one installation: the first to enter puts
    the shortcut in, the last to leave puts torch's pass back. A torch without the pass
    where it is looked up: nothing changes."""
    try:
        from torch._export.passes import replace_set_grad_with_hop_pass as module
    except ImportError:
        yield
        return
    name = "replace_set_grad_with_hop_pass"
    with _SHORTCUT_LOCK:
        torch_pass = _shortcut_users[0] if _shortcut_users else getattr(module, name, None)
        if torch_pass is not None:
            if not _shortcut_users:
                setattr(module, name, _grad_mode_shortcut(torch_pass))
            _shortcut_users.append(torch_pass)
    try:
        yield
    finally:
        if torch_pass is not None:
            with _SHORTCUT_LOCK:
                _shortcut_users.pop()
                if not _shortcut_users:
                    setattr(module, name, torch_pass)


def capture_export(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   *, dynamic: DynamicSpec | None = None, strict: bool = False,
                   decompose: bool = False) -> Capture:
    from torch.export.graph_signature import InputKind, OutputKind

    _export_hf_caches()
    dynamic_shapes, marked = _export_dynamic_shapes(model, args, kwargs, dynamic)
    with capture_mode(), _grad_mode_pass_shortcut():
        ep = _quiet_failure(lambda: torch.export.export(
            model, args, dict(kwargs), dynamic_shapes=dynamic_shapes, strict=strict))
        if decompose:
            ep = ep.run_decompositions(_decomposition_table())
        elif mutates_views(ep.graph_module) or _has_autocast(ep.graph_module) \
                or _has_vmap(ep.graph_module) or ambient_autocast(model, (args, kwargs)):
            # in-place updates of views (x[:, 0] += 1) write through to the base tensor;
            # functionalizing (no decomposition) turns them into explicit scatters.
            # torch.autocast regions are kept as wrap_with_autocast ops whose bodies hold
            # no casts (autocast casts at dispatch), and torch.func.vmap as batch-dim
            # markers around the per-example ops: the same pass writes both out. Autocast
            # on around the capture is not in export's graph at all (only in its example
            # values): the pass, run under it, writes its casts out too
            ep = ep.run_decompositions({})
    gm = ep.graph_module
    names = input_names(model, args, kwargs)
    leaves = pytree.tree_leaves((args, dict(kwargs)))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    slot_of: dict[str, Slot] = {}
    user_index = 0
    state = dict(ep.state_dict)
    for spec in ep.graph_signature.input_specs:
        arg_name = getattr(spec.arg, "name", "")
        if spec.kind == InputKind.USER_INPUT:
            leaf = leaves[user_index] if user_index < len(leaves) else None
            user_index += 1
            if isinstance(leaf, torch.Tensor):
                slot_of[arg_name] = Slot("input", names.get(id(leaf), arg_name), leaf)
            else:
                slot_of[arg_name] = Slot("unused", arg_name, leaf)
        elif spec.kind == InputKind.PARAMETER:
            slot_of[arg_name] = Slot("parameter", str(spec.target), state.get(str(spec.target)))
        elif spec.kind == InputKind.BUFFER:
            value = state.get(str(spec.target), ep.constants.get(str(spec.target)))
            slot_of[arg_name] = Slot("buffer", str(spec.target), value)
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            slot_of[arg_name] = Slot("constant", str(spec.target),
                                     ep.constants.get(str(spec.target)))
        else:
            slot_of[arg_name] = Slot("unused", arg_name, None)
    slots = [slot_of.get(n.name, Slot("unused", n.name)) for n in placeholders]
    mutations: dict[str, str] = {}
    user_outputs: list[tuple[int, int] | None] = []
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    position = 0
    for spec, leaf in zip(ep.graph_signature.output_specs, output_node.args[0], strict=True):
        is_tensor = isinstance(leaf, torch.fx.Node) and isinstance(leaf.meta.get("val"),
                                                                   torch.Tensor)
        if spec.kind == OutputKind.USER_OUTPUT and is_tensor:
            user_outputs.append((0, position))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            mutations[spec.arg.name] = str(spec.target)
        if is_tensor:
            position += 1
    capture = Capture("export", [CapturedGraph(gm, slots, mutations=mutations)], model,
                      user_outputs, _input_tensors(args, kwargs, names))
    capture.symbols = _export_symbols(ep, slots, placeholders, marked)
    capture.metadata["export.strict"] = str(strict)
    capture.metadata["export.decomposed"] = str(decompose)
    return capture


def mutates_views(gm: torch.fx.GraphModule) -> bool:
    """Whether an ATen op writes into a tensor that another op produced as a view."""
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        schema_args = target._schema.arguments
        if not (schema_args and schema_args[0].alias_info is not None
                and schema_args[0].alias_info.is_write):
            continue
        base = node.args[0] if node.args else None
        if isinstance(base, torch.fx.Node) and base.target is operator.getitem \
                and isinstance(base.args[0], torch.fx.Node):
            base = base.args[0]  # one of the views split / chunk / unbind return
        producer = base.target if isinstance(base, torch.fx.Node) else None
        if isinstance(producer, torch._ops.OpOverload):
            returns = producer._schema.returns
            if returns and returns[0].alias_info is not None:
                return True
    return False


def _has_autocast(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph (or a graph nested in it) holds a torch.autocast region."""
    hop = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
    return hop is not None and any(
        node.target is hop for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
        for node in sub.graph.nodes)


def _has_vmap(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph holds torch.func.vmap's pre-dispatch markers (batch dims added
    and removed around the per-example ops), which only a decomposition pass batches."""
    return any(getattr(node.target, "__module__", "") == "torch._functorch.predispatch"
               for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
               for node in sub.graph.nodes if node.op == "call_function")


def _dims_of(dynamic: DynamicSpec) -> list[tuple[int, str, int, int]]:
    dims: list[tuple[int, str, int, int]] = []
    for position, (name, spec) in enumerate(dynamic.items()):
        if len(spec) == 3:
            dim, lo, hi = spec
        elif len(spec) == 2:
            dim, (lo, hi) = position, spec
        else:
            raise CaptureError(f"dynamic[{name!r}] must be (min, max) or (dim, min, max)")
        dims.append((int(dim), str(name), int(lo), int(hi)))
    return dims


def _export_dynamic_shapes(model: torch.nn.Module, args: tuple[Any, ...],
                           kwargs: Mapping[str, Any], dynamic: DynamicSpec | None,
                           ) -> tuple[Any, dict[tuple[int, int], str]]:
    """dynamic_shapes for torch.export and {(id(tensor), dim): name} of what was marked."""
    if not dynamic:
        return None, {}
    dims = _dims_of(dynamic)
    export_dims = {name: torch.export.Dim(name, min=lo, max=hi) for _, name, lo, hi in dims}
    marked: dict[tuple[int, int], str] = {}

    def spec_for(value: Any) -> Any:
        def leaf_spec(leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor):
                return None
            chosen = {d: export_dims[n] for d, n, _, _ in dims if d < leaf.dim()}
            for d, n, _, _ in dims:
                if d < leaf.dim():
                    marked[(id(leaf), d)] = n
            return chosen or None
        return pytree.tree_map(leaf_spec, value)

    sig = inspect.signature(model.forward)
    bound = sig.bind(*args, **kwargs)
    return {name: spec_for(value) for name, value in bound.arguments.items()}, marked


def _export_symbols(ep: Any, slots: Sequence[Slot], placeholders: Sequence[torch.fx.Node],
                    marked: Mapping[tuple[int, int], str]) -> dict[str, SymDim]:
    symbols: dict[str, SymDim] = {}
    if not marked:
        return symbols
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    for slot, node in zip(slots, placeholders, strict=True):
        val = node.meta.get("val")
        if slot.role != "input" or not isinstance(val, torch.Tensor):
            continue
        for d, size in enumerate(val.shape):
            name = marked.get((id(slot.value), d))
            if name is None or not isinstance(size, torch.SymInt):
                continue
            key = str(size.node.expr)
            rng = ranges.get(key)
            lo = _bound(getattr(rng, "lower", None))
            hi = _bound(getattr(rng, "upper", None))
            symbols[key] = SymDim(name, lo, hi)
    return symbols


def _bound(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if abs(number) < 2**62 else None


# -- dynamo ---------------------------------------------------------------------------


@dataclass
class _Invocation:
    compiled_index: int
    slots: list[Slot]
    outputs: list[Any]


def capture_dynamo(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   *, dynamic: DynamicSpec | None = None) -> Capture:
    import torch._dynamo

    compiled: list[tuple[torch.fx.GraphModule, str]] = []
    invocations: list[_Invocation] = []
    known = named_tensors(model)
    attributes = tensor_attributes(model)
    names = input_names(model, args, kwargs)
    user_inputs = {id(t): t for t in pytree.tree_leaves((args, dict(kwargs)))
                   if isinstance(t, torch.Tensor)}
    paths = ModulePaths(model)

    def classify(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> list[Slot]:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        slots: list[Slot] = []
        for node, value in zip(placeholders, inputs, strict=True):
            slots.append(_classify_dynamo_input(node, value, known, attributes, names,
                                                user_inputs, invocations, paths))
        return slots

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        index = len(compiled)
        compiled.append((gm, _break_reason(gm)))

        def run(*inputs: Any) -> Any:
            slots = classify(gm, inputs)
            outputs = gm(*inputs)
            flat = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
            invocations.append(_Invocation(index, slots, flat))
            return outputs

        return run

    torch._dynamo.reset()
    try:
        ranges: dict[str, tuple[int, int]] = {}
        marked = _mark_dynamic(args, kwargs, dynamic, ranges)
        compiled_model = torch.compile(model, backend=backend, fullgraph=False,
                                       dynamic=None if dynamic else False)
        with capture_mode(), keep_buffers(model, (args, kwargs)):
            result = compiled_model(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    if not invocations:
        raise CaptureError("dynamo produced no graph (the model ran entirely in eager "
                           "Python); try frontend='export'")
    graphs = [CapturedGraph(compiled[inv.compiled_index][0], inv.slots,
                            compiled[inv.compiled_index][1], inv.compiled_index)
              for inv in invocations]
    first: dict[int, CapturedGraph] = {}
    for cg in graphs:
        if cg.compiled_index in first:
            cg.path_map = _path_map(first[cg.compiled_index].slots, cg.slots)
        else:
            first[cg.compiled_index] = cg
    outputs = _map_outputs(result, invocations)
    capture = Capture("dynamo", graphs, model, outputs, _input_tensors(args, kwargs, names))
    external = [f"graph {i} input {s.name}" for i, g in enumerate(graphs) for s in g.slots
                if s.role == "external"]
    if external:
        capture.metadata["dynamo.uncaptured_inputs"] = "; ".join(external)
    missing = sum(1 for o in outputs if o is None)
    if missing:
        capture.metadata["dynamo.uncaptured_outputs"] = str(missing)
    read = [cg.break_reason for cg in graphs if _VALUE_BREAK.search(cg.break_reason)]
    if read:
        # Python read a tensor's value at the break (`.item()`, `if x.sum() > 0:`): the
        # graphs after it hold what the example inputs gave (a constant, a branch) and
        # compute the model only for inputs that give the same
        capture.metadata["dynamo.value_dependent"] = "; ".join(dict.fromkeys(read))[:500]
    capture.metadata["dynamo.compiled_graphs"] = str(len(compiled))
    capture.metadata["dynamo.graph_breaks"] = str(sum(1 for _, r in compiled if r))
    if marked:
        capture.symbols = _dynamo_symbols(graphs, marked, ranges)
    return capture


def _classify_dynamo_input(node: torch.fx.Node, value: Any,
                           known: Mapping[int, tuple[str, str]],
                           attributes: Mapping[int, str], names: Mapping[int, str],
                           user_inputs: Mapping[int, torch.Tensor],
                           invocations: Sequence[_Invocation], paths: ModulePaths) -> Slot:
    if not isinstance(value, torch.Tensor):
        return Slot("symint", node.name, value)
    if id(value) in known:
        role, name = known[id(value)]
        return Slot(role, name, value)
    for index in range(len(invocations) - 1, -1, -1):
        tensors = [o for o in invocations[index].outputs if isinstance(o, torch.Tensor)]
        for position, out in enumerate(tensors):
            if out is value:
                return Slot("link", node.name, value, (index, position))
    if id(value) in user_inputs and user_inputs[id(value)] is value:
        return Slot("input", names.get(id(value), node.name), value)
    if id(value) in attributes:
        # a tensor the model keeps outside its parameters and buffers (YOLO's anchors and
        # strides): a constant of this run
        return Slot("constant", attributes[id(value)], value.detach().clone())
    # computed by Python that Dynamo left to run eagerly (e.g. a skipped frame): the IR
    # keeps it as an input of this graph that no earlier graph produces
    grapharg = node.meta.get("grapharg")
    source = grapharg.source.name() if grapharg is not None else ""
    if callable(source):  # older torch spells it as a method
        source = source()
    name = paths.normalize(str(source)) if source else node.name
    return Slot("external", name or node.name, value)


def _path_map(compiled: Sequence[Slot], run: Sequence[Slot]) -> dict[str, str]:
    """Module prefixes of the first run of a compiled graph -> those of a later run,
    found from the parameters each run passed."""
    mapping: dict[str, str] = {}
    for a, b in zip(compiled, run, strict=True):
        if a.role not in ("parameter", "buffer") or a.role != b.role or a.name == b.name:
            continue
        pa, pb = a.name.split("."), b.name.split(".")
        while pa and pb and pa[-1] == pb[-1]:
            pa.pop()
            pb.pop()
        if pa and pb:
            mapping.setdefault(".".join(pa), ".".join(pb))
    return mapping


_VALUE_BREAK = re.compile(r"Tensor\.(item|tolist|numpy)\b|generic_jump|[Dd]ata[- ]dependent")
"""Dynamo graph-break reasons where Python goes on with a value read from a tensor."""


def _break_reason(gm: torch.fx.GraphModule) -> str:
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return ""
    text = str(reason.reason).strip().splitlines()[0] if str(reason.reason).strip() else "break"
    stack = getattr(reason, "user_stack", None) or []
    if stack:
        frame = stack[-1]
        text += f" (at {frame.filename}:{frame.lineno})"
    return text


def _map_outputs(result: Any, invocations: Sequence[_Invocation]) -> list[tuple[int, int] | None]:
    mapping: list[tuple[int, int] | None] = []
    register_dataclasses(result)
    leaves = pytree.tree_leaves(result)
    if not any(isinstance(leaf, torch.Tensor) for leaf in leaves):
        opaque = next((leaf for leaf in leaves
                       if not isinstance(leaf, int | float | complex | str | torch.SymInt)), None)
        if opaque is not None:   # its tensors are outputs nobody could name
            raise CaptureError(
                f"the model's output is a {type(opaque).__qualname__}, whose tensors irbridge "
                "cannot see (not a tuple, list, dict or dataclass); return them in one of "
                "those")
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            continue
        found: tuple[int, int] | None = None
        for index in range(len(invocations) - 1, -1, -1):
            tensors = [o for o in invocations[index].outputs if isinstance(o, torch.Tensor)]
            position = next((i for i, o in enumerate(tensors) if o is leaf), None)
            if position is not None:
                found = (index, position)
                break
        mapping.append(found)
    return mapping


def _mark_dynamic(args: tuple[Any, ...], kwargs: Mapping[str, Any],
                  dynamic: DynamicSpec | None,
                  ranges: dict[str, tuple[int, int]]) -> dict[tuple[int, int], str]:
    import torch._dynamo

    marked: dict[tuple[int, int], str] = {}
    if not dynamic:
        return marked
    dims = _dims_of(dynamic)
    for leaf in pytree.tree_leaves((args, dict(kwargs))):
        if not isinstance(leaf, torch.Tensor):
            continue
        for d, name, lo, hi in dims:
            if d < leaf.dim():
                # no min/max here: Dynamo turns its own guards into ranges and then
                # rejects bounds they do not cover (seen: max=16 vs a guard of <= 15);
                # the IR records the range the caller asked for
                torch._dynamo.mark_dynamic(leaf, d)
                marked[(id(leaf), d)] = name
                ranges[name] = (lo, hi)
    return marked


def _dynamo_symbols(graphs: Sequence[CapturedGraph], marked: Mapping[tuple[int, int], str],
                    ranges: Mapping[str, tuple[int, int]]) -> dict[str, SymDim]:
    symbols: dict[str, SymDim] = {}
    for cg in graphs:
        placeholders = [n for n in cg.gm.graph.nodes if n.op == "placeholder"]
        for node, slot in zip(placeholders, cg.slots, strict=True):
            val = node.meta.get("example_value")
            if slot.role != "input" or not isinstance(val, torch.Tensor):
                continue
            for d, size in enumerate(val.shape):
                name = marked.get((id(slot.value), d))
                if name is None or not isinstance(size, torch.SymInt):
                    continue
                lo, hi = ranges[name]
                symbols[str(size.node.expr)] = SymDim(name, lo, hi)
    return symbols


# -- dispatch -------------------------------------------------------------------------


def run_capture(method: str, model: torch.nn.Module, args: tuple[Any, ...],
                kwargs: Mapping[str, Any], *, dynamic: DynamicSpec | None = None,
                decompose: bool = False, strict: bool = False,
                leaf_fallback: bool = False) -> Capture:
    if method == "fx":
        return capture_fx(model, args, kwargs, dynamic=dynamic, leaf_fallback=leaf_fallback)
    if method == "export":
        return capture_export(model, args, kwargs, dynamic=dynamic, strict=strict,
                              decompose=decompose)
    if method == "dynamo":
        return capture_dynamo(model, args, kwargs, dynamic=dynamic)
    raise CaptureError(f"unknown PyTorch front-end {method!r}; choose auto, fx, export or dynamo")


def one_line(exc: BaseException) -> str:
    return describe_exception(exc)
