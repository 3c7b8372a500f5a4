"""Capture models that live on a GPU: every PyTorch front-end, then the IR's own checks.

A user's model is often on `cuda` (weights and example inputs there), while irbridge's
tests build every model on the CPU. This tool builds a few real models on the device
given (random weights, offline), captures each through fx, export, dynamo and auto, and
checks what a user would rely on:

* verify  - the IR run by the numpy reference executor against the eager model on the
            device (`converters.pytorch.verify.verify`, the tolerances of
            irbridge/tolerance.py); TF32 is switched off so the device computes IEEE
            float32;
* serde   - `serde.save` / `serde.load` round trip, the loaded model verified again;
* onnx    - `export_onnx`, the file run by onnxruntime (CPU) on the same inputs and
            compared with the eager outputs at the same tolerances;
* analyze - `analysis.driver.analyze` on h100-sxm (MACs must equal the CPU capture's);
* train   - one training step of each float32 model (but the module) with SGD and AdamW
            (`capture_train`), checked by `verify_train` against autograd and torch.optim
            on the device.

Each model is also captured on the CPU with the same weights: the two IRs must have the
same node count and MACs (the device must not change the graph).

    uv run python tools/gpu_check.py --device cpu          # the script itself, here
    python3 tools/gpu_check.py --device cuda --json OUT    # on a machine with a GPU

Prints one line per (model, dtype, front-end) and a summary; exit 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

FRONTENDS = ("fx", "export", "dynamo", "auto")
HALF = {"resnet18": [torch.float16], "positions": [torch.float16, torch.bfloat16],
        "gpt2-small": [torch.bfloat16], "llama-small": [torch.bfloat16]}
"""Half-precision runs (CPU and device): the models and dtypes."""


class _Positions(torch.nn.Module):
    """Builds tensors on the input's device inside forward (arange, zeros, a mask)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.proj = torch.nn.Linear(16, 16)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.embed(ids) + self.embed(pos)[None]
        mask = torch.ones(ids.shape[1], ids.shape[1], device=ids.device).tril()
        att = (h @ h.transpose(1, 2)) * self.scale
        att = att.masked_fill(mask == 0, float("-inf")).softmax(-1)
        return self.proj(att @ h) + torch.zeros_like(h)


def _models() -> list[tuple[str, Any, Any]]:
    """(name, builder() -> module, inputs(device, dtype) -> tuple)."""
    import torchvision
    import transformers

    def image(device: str, dtype: torch.dtype) -> tuple[torch.Tensor]:
        return (torch.randn(1, 3, 224, 224, device=device, dtype=dtype),)

    def ids(device: str, dtype: torch.dtype) -> tuple[torch.Tensor]:
        return (torch.randint(0, 64, (2, 12), device=device),)

    def bert() -> torch.nn.Module:
        config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=64)
        return transformers.BertModel(config)

    def gpt2() -> torch.nn.Module:
        config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2,
                                         n_positions=32)
        return transformers.GPT2LMHeadModel(config)

    def llama() -> torch.nn.Module:
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2,
                                          intermediate_size=64, max_position_embeddings=64)
        return transformers.LlamaForCausalLM(config)

    return [
        ("resnet18", lambda: torchvision.models.resnet18(weights=None), image),
        ("mobilenet_v2", lambda: torchvision.models.mobilenet_v2(weights=None), image),
        ("bert-small", bert, ids),
        ("gpt2-small", gpt2, ids),
        ("llama-small", llama, ids),
        ("positions", _Positions, ids),
    ]


def _check_onnx(path: Path, feeds: dict[str, np.ndarray], expected: list[np.ndarray],
                where: list[tuple[int, int] | None]) -> str:
    """The ONNX file's outputs against the eager ones (`irbridge.tolerance`'s comparison
    and table); `where` places each eager output among the graph's outputs
    (CaptureResult.outputs)."""
    import onnxruntime as ort

    from irbridge.converters.onnx.verify import run_session
    from irbridge.dtypes import DType
    from irbridge.tolerance import EXACT, TOLERANCES, compare_output
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    outputs = run_session(session, {n: feeds[n] for n in names})  # bf16 / float8 too
    worst = 0.0
    for index, e in enumerate(expected):
        place = where[index] if index < len(where) else None
        if place is None or place[1] >= len(outputs):
            return f"eager output {index} is not among the file's {len(outputs)} outputs"
        dtype = DType.from_numpy(e.dtype)
        check = compare_output(index, "", np.asarray(outputs[place[1]]), e, dtype,
                               *TOLERANCES.get(dtype, EXACT))
        if not check.passed:
            return check.note or (f"max error {check.max_abs_error:.3g} > {check.atol} + "
                                  f"{check.rtol} x scale")
        worst = max(worst, check.max_rel_error)
    return f"ok ({worst:.1e})"


def _macs(model: Any) -> int:
    from irbridge.analysis.driver import analyze
    from irbridge.analysis.hardware import resolve_targets
    result = analyze(model, resolve_targets("h100-sxm"))
    return int(result.runs[0].costs.total.macs)


def check(device: str, dtype: torch.dtype, name: str, build: Any, inputs: Any,
          frontend: str, reference: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, Any]:
    from irbridge import serde
    from irbridge.converters.onnx.export import export_onnx
    from irbridge.converters.pytorch import capture
    from irbridge.converters.pytorch._util import tensor_leaves, tensor_to_numpy
    from irbridge.converters.pytorch.verify import verify

    row: dict[str, Any] = {"model": name, "dtype": str(dtype).removeprefix("torch."),
                           "frontend": frontend, "device": device}
    torch.manual_seed(0)
    module = build().eval()
    module = module.to(device=device, dtype=dtype if dtype.is_floating_point else None)
    args = inputs(device, dtype)
    start = time.perf_counter()
    try:
        result = capture(module, args, frontend=frontend)
    except Exception as exc:
        row["capture"] = f"error {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        cpu_rows = [r for (n, _, f), r in reference.items() if (n, f) == (name, frontend)]
        if device != "cpu" and not any(str(r.get("capture", "")).startswith("error")
                                       for r in cpu_rows):
            # the CPU captured it (or was not tried): the device made the difference
            row["capture"] = "FAIL" + row["capture"].removeprefix("error")
            row["trace"] = traceback.format_exc()[-3000:]
        return row
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["method"] = result.method
    row["nodes"] = sum(len(g.nodes) for g in result.model.graphs)
    row["opaque"] = result.opaque_count
    report = verify(result, module)
    row["verify"] = "ok" if report.passed else f"FAIL {report.summary()[:300]}"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            saved = serde.save(result.model, Path(tmp) / "m.irb")
            loaded = serde.load(saved)
            row["serde"] = "ok" if len(loaded.graphs[0].nodes) == len(
                result.model.graphs[0].nodes) else "FAIL node count changed"
        except Exception as exc:
            row["serde"] = f"FAIL {type(exc).__name__}: {str(exc)[:300]}"
        with torch.no_grad():
            expected = [tensor_to_numpy(t) for t in tensor_leaves(module(*args))]
        feeds = {n: tensor_to_numpy(t) for n, t in result.inputs.items()}
        if len(result.model.graphs) == 1:
            try:
                path = export_onnx(result.model, Path(tmp) / "m.onnx")
                row["onnx"] = _check_onnx(path, feeds, expected, result.outputs)
            except Exception as exc:
                row["onnx"] = f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        else:
            row["onnx"] = f"({len(result.model.graphs)} graphs: not exported)"
    try:
        row["macs"] = _macs(result.model)
    except Exception as exc:
        row["analyze"] = f"FAIL {type(exc).__name__}: {str(exc)[:300]}"
    key = (name, str(dtype), frontend)
    if device != "cpu" and key in reference:
        ref = reference[key]
        if ref.get("macs") != row.get("macs"):
            row["same_as_cpu"] = f"FAIL MACs {row.get('macs')} vs CPU {ref.get('macs')}"
        else:
            row["same_as_cpu"] = "ok"
    return row


def check_train(device: str, name: str, build: Any, inputs: Any,
                optimizer: str) -> dict[str, Any]:
    """One training step (`capture_train`, loss auto, `optimizer`) of the float32 model
    on `device`, checked by `verify_train` (loss, gradients, updated parameters and
    optimizer state against an eager step with autograd and torch.optim)."""
    from irbridge.converters.pytorch.train import TrainSpec, capture_train, verify_train

    row: dict[str, Any] = {"model": name, "dtype": "float32", "frontend": f"train-{optimizer}",
                           "device": device}
    torch.manual_seed(0)
    module = build().to(device)
    args = inputs(device, torch.float32)
    if name in ("resnet18", "mobilenet_v2"):
        args = (args[0][:, :, :64, :64],)  # a smaller image: the step runs on the CPU too
    try:
        result = capture_train(module, args, train=TrainSpec(optimizer=optimizer))
        report = verify_train(result, module)
    except Exception as exc:
        row["train"] = f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        row["trace"] = traceback.format_exc()[-3000:]
        return row
    row["nodes"] = sum(len(g.nodes) for g in result.model.graphs)
    row["train"] = "ok" if report.passed else f"FAIL {report.summary()[:300]}"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path, help="write every row to this file")
    parser.add_argument("--models", nargs="*", help="only these models")
    parser.add_argument("--frontends", nargs="*", default=list(FRONTENDS))
    parser.add_argument("--no-train", dest="train", action="store_false",
                        help="leave out the training-step rows")
    ns = parser.parse_args()
    if ns.device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    rows: list[dict[str, Any]] = []
    reference: dict[tuple[str, str, str], dict[str, Any]] = {}
    for name, build, inputs in _models():
        if ns.models and name not in ns.models:
            continue
        dtypes = [torch.float32, *HALF.get(name, [])]
        for dtype in dtypes:
            for frontend in ns.frontends:
                devices = ["cpu", ns.device] if ns.device != "cpu" else ["cpu"]
                for device in devices:
                    row = check(device, dtype, name, build, inputs, frontend, reference)
                    if device == "cpu":
                        reference[(name, str(dtype), frontend)] = row
                    if device == ns.device:
                        rows.append(row)
                        shown = {k: v for k, v in row.items() if k != "trace"}
                        print(json.dumps(shown), flush=True)
    for name, build, inputs in _models():
        if (ns.models and name not in ns.models) or name == "positions" or not ns.train:
            continue
        for optimizer in ("sgd", "adamw"):
            row = check_train(ns.device, name, build, inputs, optimizer)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
    failed = [r for r in rows if any(isinstance(v, str) and v.startswith("FAIL")
                                     for v in r.values())]
    print(f"{len(rows)} rows, {len(failed)} with a failure", flush=True)
    for r in failed:
        if "trace" in r:
            print(r["trace"], flush=True)
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
