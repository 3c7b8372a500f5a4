"""IREE as a second real consumer: it compiles irbridge's StableHLO (text and portable
artifact) and ONNX exports for the llvm-cpu backend, runs them, and the results match eager
PyTorch (slow suite: compiling takes 15-90 s a model on 2 cores).

    uv run pytest tests/stablehlo/test_iree.py -m slow -n 0

Tolerance: max |IREE - eager| <= 1e-4 x max |eager| per output. Both run float32 on the
CPU with different kernels and summation orders; the observed worst case is about 6e-6
relative (ResNet/BERT), so 1e-4 keeps a margin without hiding a wrong op (a wrong op is off
by O(1) of the scale)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

ireec = pytest.importorskip("iree.compiler")
ireert = pytest.importorskip("iree.runtime")

from irbridge.converters.onnx import export_onnx  # noqa: E402
from irbridge.converters.pytorch import capture, zoo  # noqa: E402
from irbridge.converters.stablehlo import export_stablehlo  # noqa: E402

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from frontend_matrix import MODELS as BENCHMARK  # noqa: E402  (the 8 benchmark models)

COMPILE_ARGS = ["--iree-llvmcpu-target-cpu=generic"]


def iree_run(path: Path, input_type: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Compile `path` with IREE for the CPU and run its entry function on `inputs`."""
    if input_type == "onnx":
        imported = path.with_suffix(".onnx.mlir")
        tool = Path(sys.executable).with_name("iree-import-onnx")
        done = subprocess.run([str(tool), str(path), "-o", str(imported)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        path = imported
    vmfb = ireec.compile_file(str(path), target_backends=["llvm-cpu"],
                              input_type=input_type, extra_args=COMPILE_ARGS)
    ctx = ireert.SystemContext(config=ireert.Config("local-task"))
    ctx.add_vm_module(ireert.VmModule.copy_buffer(ctx.instance, vmfb))
    (name,) = [k for k in ctx.modules if k != "hal"]
    module = ctx.modules[name]
    names = [n for n in module.vm_module.function_names if "$" not in n]   # not $async
    entry = "main" if "main" in names else names[0]
    out = module[entry](*inputs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]


def _leaves(value: Any) -> list[torch.Tensor]:
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def check(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], tmp: Path,
          forms: tuple[str, ...] = ("mlir", "mlirbc", "onnx")) -> None:
    result = capture(module, args, kwargs)
    model = result.model
    assert result.opaque_count == 0
    feeds = [result.inputs[v.name].numpy() for v in model.graphs[0].inputs]
    with torch.no_grad():
        expected = [t.numpy() for t in _leaves(module(*args, **kwargs))]
    for form in forms:
        path = tmp / f"model.{form}"
        if form == "onnx":
            export_onnx(model, path)
            got = iree_run(path, "onnx", feeds)
        else:
            export_stablehlo(model, path)
            got = iree_run(path, "stablehlo", feeds)
        for index, want in enumerate(expected):
            where = result.outputs[index]
            assert where is not None
            value = got[where[1]]
            assert value.shape == want.shape, (form, index, value.shape, want.shape)
            if want.dtype.kind in "iub":
                np.testing.assert_array_equal(value, want, err_msg=f"{form} output {index}")
                continue
            scale = max(float(np.abs(want).max()), 1e-6)
            err = float(np.abs(value.astype(np.float64) - want).max())
            assert err <= 1e-4 * scale, (form, index, err, scale)


@pytest.mark.parametrize("name", sorted(BENCHMARK))
def test_benchmark_model_runs_in_iree(name: str, tmp_path: Path) -> None:
    built = zoo.build(name, **BENCHMARK[name])
    with torch.no_grad():   # lazily built state (YOLO's anchors) exists before capture
        built.module(*built.args, **built.kwargs)
    # The text form of every model; the portable artifact on the two smallest (the same
    # module, serialized: compiling it twice more adds minutes and no coverage).
    forms = ("mlir", "mlirbc", "onnx") if name in ("resnet18", "mobilenet_v2") \
        else ("mlir", "onnx")
    check(built.module, built.args, built.kwargs, tmp_path, forms)


class TopkInterpolateIndex(nn.Module):
    """torch.topk (IREE rewrites sort + slice into chlo.top_k), interpolate (ONNX Resize)
    and index ops (index_select, gather)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.conv(x)
        up = nn.functional.interpolate(y, scale_factor=2.0, mode="bilinear",
                                       align_corners=False)
        near = nn.functional.interpolate(y, size=(12, 20), mode="nearest")
        flat = up.flatten(2)
        values, indices = torch.topk(flat, k=5, dim=-1)
        picked = y[:, idx]                       # index_select on channels
        again = torch.gather(flat, 2, indices.flip(-1))   # gather_elements
        return values, indices, picked, near, again


def test_topk_interpolate_index_model_runs_in_iree(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = TopkInterpolateIndex().eval()
    x = torch.randn(1, 3, 6, 10)
    idx = torch.tensor([1, 4])
    check(module, (x, idx), {}, tmp_path)
