"""Small helpers shared by the PyTorch front-ends: dtypes, tensors, names and locations."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import ml_dtypes
import numpy as np
import torch
import torch.fx

from irbridge.dtypes import DType
from irbridge.errors import CaptureError
from irbridge.ir import SourceLocation, Tensor, TensorType


@contextlib.contextmanager
def ieee_float32() -> Iterator[None]:
    """Eager float32 arithmetic in IEEE float32 inside the block: no TF32 convolutions
    (cuDNN's default on GPUs since Ampere) and no reduced-precision float32 matmuls.
    `verify` compares the IR, whose float32 is IEEE, with an eager reference run under it:
    a GPU model's TF32 convolutions differ from float32 by ~1e-3 and would fail a correct
    capture. torch's settings are restored after; a setting torch refuses to change (its
    global flags locked with `disable_global_flags`, as torch's own test harness does, or
    the legacy flag after its fp32_precision API was used) is left as it is."""
    cudnn = torch.backends.cudnn
    restore: list[Callable[[], None]] = []
    try:
        tf32 = cudnn.allow_tf32
        if tf32:
            cudnn.allow_tf32 = False
            restore.append(lambda: setattr(cudnn, "allow_tf32", tf32))
    except RuntimeError:
        pass
    precision = torch.get_float32_matmul_precision()
    if precision != "highest":
        try:
            torch.set_float32_matmul_precision("highest")
            restore.append(lambda: torch.set_float32_matmul_precision(precision))
        except RuntimeError:
            pass
    try:
        yield
    finally:
        for undo in reversed(restore):
            undo()


_WRAPPERS = {"OptimizedModule": "_orig_mod", "DataParallel": "module",
             "DistributedDataParallel": "module"}
"""Wrapper classes (by name, so that torch._dynamo and torch.distributed need not be
imported) and the attribute holding the module they wrap."""


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside `torch.compile(module)` (OptimizedModule) and
    `nn.DataParallel` / `DistributedDataParallel` wrappers: capture traces that module,
    not the wrapper (whose forward takes `*args, **kwargs`, runs a compiled or replicated
    copy, and under DistributedDataParallel needs a process group)."""
    while (attr := _WRAPPERS.get(type(model).__name__)) is not None:
        inner = getattr(model, attr, None)
        if not isinstance(inner, torch.nn.Module):
            break
        model = inner
    return model


def torchscript_problem(module: Any) -> str | None:
    """Why a TorchScript module (torch.jit.script, trace or load) cannot be captured, or
    None for any other object: the front-ends trace Python `forward` code, which a
    compiled TorchScript module no longer runs."""
    if not isinstance(module, torch.jit.ScriptModule):
        return None
    return (f"{type(module).__name__} is a TorchScript module (torch.jit.script, trace or "
            "load): irbridge captures a Python nn.Module (fx, torch.export, Dynamo), and "
            "TorchScript has no Python forward left to trace; capture the nn.Module it was "
            "scripted from")


def sparse_problem(module: torch.nn.Module, inputs: Any) -> str | None:
    """Why a model with a sparse (non-strided) parameter, buffer or input tensor cannot be
    captured, or None: the IR's tensors are dense arrays, and a capture kept the sparse
    operand out of the IR (its node opaque, its data lost)."""
    from torch.utils import _pytree

    named = [("parameter", n, t) for n, t in module.named_parameters()] + \
        [("buffer", n, t) for n, t in module.named_buffers()] + \
        [("input", f"#{i}", t) for i, t in enumerate(_pytree.tree_leaves(inputs))
         if isinstance(t, torch.Tensor)]
    for kind, name, tensor in named:
        if tensor.layout != torch.strided:
            label = name if kind == "input" else repr(name)
            return (f"{kind} {label} is a sparse tensor ({tensor.layout}); irbridge captures "
                    "dense tensors only: convert it with .to_dense() before capturing")
    return None


_TORCH_TO_DTYPE: dict[torch.dtype, DType] = {
    torch.float32: DType.FLOAT32,
    torch.float16: DType.FLOAT16,
    torch.bfloat16: DType.BFLOAT16,
    torch.float64: DType.FLOAT64,
    torch.float8_e4m3fn: DType.FLOAT8_E4M3FN,
    torch.float8_e5m2: DType.FLOAT8_E5M2,
    torch.int8: DType.INT8,
    torch.int16: DType.INT16,
    torch.int32: DType.INT32,
    torch.int64: DType.INT64,
    torch.uint8: DType.UINT8,
    torch.uint16: DType.UINT16,
    torch.uint32: DType.UINT32,
    torch.uint64: DType.UINT64,
    torch.bool: DType.BOOL,
    torch.complex64: DType.COMPLEX64,
    torch.complex128: DType.COMPLEX128,
}
_DTYPE_TO_TORCH = {v: k for k, v in _TORCH_TO_DTYPE.items()}


def to_dtype(dtype: torch.dtype) -> DType:
    try:
        return _TORCH_TO_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"torch dtype {dtype} has no irbridge DType") from None


def to_torch_dtype(dtype: DType) -> torch.dtype:
    return _DTYPE_TO_TORCH[dtype]


def python_scalar_dtype(value: bool | int | float | complex) -> DType:
    """The dtype torch gives a Python scalar on its own."""
    if isinstance(value, bool):
        return DType.BOOL
    if isinstance(value, int):
        return DType.INT64
    if isinstance(value, complex):   # complex64 beside float32, complex128 beside float64
        return to_dtype(torch.tensor(0j).dtype)
    return to_dtype(torch.get_default_dtype())


def tensor_to_numpy(t: torch.Tensor, *, copy: bool = True) -> np.ndarray:
    """The data of a (CPU or GPU) tensor as numpy, bfloat16 and float8 included: a copy,
    or with copy=False a read-only view of the tensor's own memory when it is a
    contiguous CPU tensor (otherwise a copy is unavoidable and is made)."""
    t = t.detach()
    shared = not copy
    if t.device.type != "cpu":
        t = t.cpu()
        shared = False
    if not t.is_contiguous() or t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg().contiguous()
        shared = False
    if t.dtype == torch.bfloat16:
        array = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    elif t.dtype == torch.float8_e4m3fn:
        array = t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    elif t.dtype == torch.float8_e5m2:
        array = t.view(torch.uint8).numpy().view(ml_dtypes.float8_e5m2)
    else:
        array = t.numpy()
    if not shared:
        return array.copy()
    array = array.view()
    array.flags.writeable = False  # the IR must never write into the model's memory
    return array


def has_data(t: torch.Tensor) -> bool:
    """False for meta and fake tensors (shape-only)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return not (t.is_meta or isinstance(t, FakeTensor))


def make_tensor(name: str, t: torch.Tensor, weights: bool, *, share: bool = False) -> Tensor:
    """An IR model tensor; shape-only when weights are off or the tensor has no data.

    share=True makes the data a read-only numpy view of the tensor's memory (no copy) when
    it is a contiguous CPU tensor. The lowering shares `nn.Parameter`s only: a forward
    pass never writes into them, and capture() itself never does; buffers (batch-norm
    statistics, which a forward pass in training mode updates in place) are copied. What
    sharing means for the caller: an in-place change to a parameter after capture
    (an optimizer step, `load_state_dict`, `p.data.mul_()`) shows in the IR too, until it
    is saved; `capture(..., copy_weights=True)` gives an independent copy instead.
    Replacing a parameter (`model.half()`, `model.to()`, assigning `.data`) does not touch
    the memory the IR holds."""
    dtype = to_dtype(t.dtype)
    shape = tuple(int(d) for d in t.shape)
    if weights and has_data(t):
        return Tensor(name, dtype, shape, tensor_to_numpy(t, copy=not share))
    return Tensor(name, dtype, shape, None)


def static_type(t: torch.Tensor) -> TensorType:
    return TensorType(to_dtype(t.dtype), tuple(int(d) for d in t.shape))


# -- source op strings ----------------------------------------------------------------------

def qualified_name(target: Any) -> str:
    """`module.name` of a callable as users write it (operator.add, torch.nn.functional.relu)."""
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    if isinstance(target, str):
        return target
    if isinstance(target, type):
        return f"{target.__module__}.{target.__qualname__}"
    try:
        name = torch.fx.node._get_qualified_name(target)
    except Exception:
        name = str(getattr(target, "__qualname__", None)
                   or getattr(target, "__name__", repr(target)))
        module = getattr(target, "__module__", None)
        name = f"{module}.{name}" if module else str(name)
    for private, public in (("_operator.", "operator."), ("torch._ops.aten.", "aten.")):
        if name.startswith(private):
            name = public + name[len(private):]
    return name


def source_op(node: torch.fx.Node, root: torch.nn.Module | None) -> str:
    if node.op == "call_function":
        return qualified_name(node.target)
    if node.op == "call_method":
        return f"call_method:{node.target}"
    if node.op == "call_module":
        module = _submodule(root, str(node.target))
        cls = type(module) if module is not None else None
        return f"call_module:{qualified_name(cls)}" if cls is not None else f"call_module:{node.target}"
    return f"{node.op}:{node.target}"


def class_name(cls: Any) -> str:
    if isinstance(cls, type):
        return f"{cls.__module__}.{cls.__qualname__}"
    return str(cls) if cls else ""


def _submodule(root: torch.nn.Module | None, path: str) -> torch.nn.Module | None:
    if root is None:
        return None
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


# -- module paths ---------------------------------------------------------------------------

_PATH_TOKEN = re.compile(
    r"""\._(?:modules|parameters|buffers)\[['"]([^'"]+)['"]\]  # ._modules['x']
      | \[['"]([^'"]+)['"]\]                 # ['x']
      | \[(-?\d+)\]                          # [0]
      | \.([A-Za-z_][\w]*|\d+)               # .x or .0
    """, re.VERBOSE)


_HEAD = re.compile(r"""^(?:[LG]\[['"][^'"]+['"]\]|self)(?=$|[.\[])""")


class ModulePaths:
    """Turns the module names front-ends write (`L['self'].layer1[0].conv1`,
    `L__self___layer1___0___conv1`, `getattr_L__self___layer1___0___conv1`) into
    `layer1.0.conv1`. Mangled names are resolved against the model's real module names,
    never guessed from underscores."""

    def __init__(self, root: torch.nn.Module | None) -> None:
        self.root = root
        self._mangled: dict[str, str] = {}
        # Dynamo keys nn_module_stack entries by id(module): exact, even in resumed frames
        self.by_id: dict[str, str] = {}
        if root is not None:
            for name, mod in root.named_modules(remove_duplicate=False):
                self.by_id.setdefault(str(id(mod)), name)
            names: Iterable[str] = [n for n, _ in root.named_modules(remove_duplicate=False)]
            names = list(names) + [n for n, _ in root.named_parameters(remove_duplicate=False)]
            names = list(names) + [n for n, _ in root.named_buffers(remove_duplicate=False)]
            for name in names:
                for key in _mangle_forms(name):
                    self._mangled.setdefault(key, name)

    def normalize(self, raw: str) -> str:
        text = raw.strip()
        if not text:
            return ""
        hit = self._mangled.get(text) or self._mangled.get(_strip_getattr(text))
        if hit is not None:
            return hit
        head = _HEAD.match(text)
        if head is not None:
            tail = text[head.end():]
            return (self._parse_tail(tail) or text) if tail else ""
        return text

    @staticmethod
    def _parse_tail(tail: str) -> str | None:
        parts: list[str] = []
        pos = 0
        while pos < len(tail):
            m = _PATH_TOKEN.match(tail, pos)
            if m is None:
                return None
            parts.append(next(g for g in m.groups() if g is not None))
            pos = m.end()
        return ".".join(parts)


def _strip_getattr(text: str) -> str:
    return text[len("getattr_"):] if text.startswith("getattr_") else text


def _mangle_forms(name: str) -> list[str]:
    """The spellings Dynamo and export give a module attribute path."""
    if not name:
        return []
    parts = name.split(".")
    forms = [
        "L__self___" + "_".join(parts),
        "L__self___" + "___".join(parts),
        "l__self___" + "_".join(parts),
        "l__self___" + "___".join(parts),
        "L_self_" + "_".join(f"modules_{p}" for p in parts),
        "_".join(parts),
    ]
    return forms + [f.lower() for f in forms]


def deepest_module(node: torch.fx.Node, paths: ModulePaths) -> tuple[str, str]:
    """(module_path, module_class) of the innermost module a node was traced in."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return "", ""
    key, (raw, cls) = list(stack.items())[-1]
    if str(key) in paths.by_id:
        return paths.by_id[str(key)], class_name(cls)
    return paths.normalize(str(raw)), class_name(cls)


# -- locations ------------------------------------------------------------------------------

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n(?:[ \t]+([^\n]*))?')
_TORCH_DIR = re.sub(r"[/\\]torch$", "", str(torch.__path__[0])) + "/torch/"


def location_from_stack(stack_trace: str | None) -> SourceLocation | None:
    """The innermost frame of a stack trace outside torch itself."""
    if not stack_trace:
        return None
    frames = _FRAME.findall(stack_trace)
    for file, line, _func, code in reversed(frames):
        if file.startswith(_TORCH_DIR) and ("/torch/fx/" in file or "/torch/_" in file
                                            or "/torch/export/" in file):
            continue
        if file.startswith(_TORCH_DIR) and file.endswith("nn/modules/module.py"):
            continue
        return SourceLocation(file, int(line), code.strip())
    return None


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors of a (possibly nested) output, in pytree order."""
    import torch.utils._pytree as pytree

    register_dataclasses(value)
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def register_dataclasses(value: Any) -> None:
    """Make torch's pytree flatten the dataclass types in a model's output (a user's
    `@dataclass` holding tensors), as torch.export asks its users to
    (`torch.export.register_dataclass`): every front-end and the verifier then see its
    fields' tensors as outputs, in field order (None fields have none). Without it pytree
    takes the object for one leaf: Dynamo's capture had no outputs, export refused the
    type, fx kept the constructor as an opaque op. A type with a field that `__init__`
    does not take cannot be rebuilt from its fields: CaptureError names it."""
    import dataclasses

    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            register_dataclass_type(type(item))
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def register_dataclass_type(cls: type) -> None:
    """`cls` (a dataclass) registered as a pytree node unless it is already one."""
    import dataclasses

    import torch.utils._pytree as pytree

    if cls in pytree.SUPPORTED_NODES:
        return
    hidden = [f.name for f in dataclasses.fields(cls) if not f.init]
    if hidden:
        raise CaptureError(
            f"the model's output holds a {cls.__qualname__}, a dataclass whose field "
            f"{hidden[0]!r} its __init__ does not take, so it cannot be rebuilt from its "
            "fields; return its tensors in a tuple or dict")
    torch.export.register_dataclass(cls)


def describe_exception(exc: BaseException, limit: int = 240) -> str:
    """One line: exception type and the first line (first sentence, if long) of its
    message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > 160 and ". " in text:
        text = text.split(". ")[0] + "."
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def flatten_mapping(mapping: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping.items()}
