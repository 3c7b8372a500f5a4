"""Every Hugging Face diffusers model class through irbridge (the `diffusers:` zoo family).

    uv run python tools/diffusers_sweep.py --jobs 2 --state /work/diffusers-state  # all
    uv run python tools/diffusers_sweep.py --only UNet2DConditionModel        # some, prints
    uv run python tools/diffusers_sweep.py --state DIR --report               # doc from DIR

For every model class diffusers exports (`zoo.diffusers.model_class_names`, the `ModelMixin`
subclasses; the plain-nn.Module building blocks exported beside them are left out), two
stages, each
in a forked child of this process (the imports happen once, here) under a time limit
(`TIMEOUT_S`, 180 s); a child that dies or runs out of time is recorded as `crash` /
`timeout`:

* `default` - the class from its DEFAULT config (`diffusers:ClassName`), built on the meta
  device (shape-only: no weight is allocated, whatever its size), captured with the default
  front-end (`capture(frontend="auto")`, deep stacks of alike layers traced short as
  `irbridge analyze` does for models too big for memory) and costed: MACs of the whole
  graph (`summarize(...).cost.macs`, what `irbridge analyze` reports as macs).
* `small` - the class from a SMALL config (the class defaults with the settings of
  `small_config` over them: fewer and narrower channels and layers; per-class settings in
  `SMALL`, else the generic `GENERIC` ones for the settings its constructor takes) with
  random weights (seed 0) on the CPU, captured with the default front-end, exported to ONNX
  (`to_onnx`) and run in onnxruntime (CPU provider) on the same inputs; every output is
  compared with the eager model's: |ort - eager| <= ATOL_REL * max(1, max|eager|) + RTOL *
  |eager| per element (float32 throughout; see `compare` for why these bounds). Models whose
  small config still has more than `SMALL_MAX_PARAMS` parameters are not run here.

Each stage's outcome is `pass` or a failure with a one-line reason: `build` (diffusers' own
class fails on that config: not a
converter failure), `inputs` (the zoo derives no inputs the model runs on from its
config and forward signature), `capture`, `onnx`, `onnxruntime`, `mismatch`, `crash`, `timeout`.
Results go to `--state DIR` (one JSON file per class and stage), so an interrupted run
resumes where it stopped. `--report` writes docs/pytorch-diffusers.md and
tests/data/diffusers_baseline.json from the state. Linux only (fork).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import inspect
import json
import os
import re
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "pytorch-diffusers.md"
BASELINE = ROOT / "tests" / "data" / "diffusers_baseline.json"
COMMAND = "uv run python tools/diffusers_sweep.py --jobs 2 --state /work/diffusers-state"
STAGES = ("default", "small")
STATUSES = ("pass", "build", "inputs", "capture", "onnx", "onnxruntime", "mismatch", "crash", "timeout",
            "too big")
TIMEOUT_S = 180.0
SMALL_MAX_PARAMS = 20_000_000
CHILD_MEMORY = 6 << 30
"""Address space a child may add (see `limit_memory`): two children side by side stay far
inside this machine's 23 GiB."""

# float32 ORT vs eager float32: the two run the same math with other kernels (other
# summation orders, fused GEMMs, other erf/exp approximations); the error grows with depth
# and with the outputs' scale. 1e-4 of the output scale is ~1000 float32 ulps, room for the
# few dozen layers of a small config, and far below what a wrong op (a swapped axis, a wrong
# constant, a missing residual) gives: errors of the outputs' own size.
ATOL_REL = 1e-4
RTOL = 1e-3

def _channels(v: Any) -> list[int]:
    return [32 if i == 0 else 64 for i in range(len(v))]


def _ones(v: Any) -> Any:
    return [1] * len(v) if isinstance(v, (list, tuple)) else 1


GENERIC: dict[str, Any] = {
    # UNets and VAEs
    "block_out_channels": _channels,
    "encoder_block_out_channels": _channels,
    "decoder_block_out_channels": _channels,
    "decode_block_out_channels": _channels,
    "layers_per_block": 1,
    "encoder_layers_per_block": _ones,
    "decoder_layers_per_block": _ones,
    "num_res_blocks": 1,
    "num_enc_blocks": 1,
    "num_dec_blocks": 1,
    "base_dim": 32,
    "base_channels": 32,
    "ch": 32,
    "norm_num_groups": 8,
    "attn_norm_num_groups": 8,
    "transformer_layers_per_block": 1,
    "cross_attention_dim": 32,
    "encoder_hid_dim": None,
    "time_embedding_dim": None,
    "latent_channels": 4,
    "sample_size": 16,
    # transformers
    "num_layers": 2,
    "num_single_layers": 1,
    "num_attention_heads": lambda v: v if not isinstance(v, int) else 2,
    "attention_head_dim": lambda v: 8 if isinstance(v, int) else v,
    "joint_attention_dim": 32,
    "caption_channels": 32,
    "caption_projection_dim": 16,
    "pooled_projection_dim": 24,
    "text_dim": 32,
    "text_embed_dim": 32,
    "ffn_dim": 64,
    "intermediate_size": 64,
    "approximator_hidden_dim": 32,
    "approximator_layers": 1,
    # rope over (time, height, width) splits a head: its axes add up to the head size (8)
    "axes_dims_rope": lambda v: [4, 2, 2] if len(v) == 3 else v,
}
"""Generic shrinking: settings a class's constructor takes are set to these (a callable gets
the default and returns the small value). Per-class settings in `SMALL` replace them."""

SMALL: dict[str, dict[str, Any]] = {
    # its blocks keep their width: the generic 32-then-64 channels do not fit it
    "AutoencoderTiny": {"encoder_block_out_channels": [32] * 4,
                        "decoder_block_out_channels": [32] * 4},
    "UNet2DConditionModel": {
        "block_out_channels": [32, 64], "layers_per_block": 1, "cross_attention_dim": 32,
        "attention_head_dim": 8, "norm_num_groups": 8, "sample_size": 16,
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"]},
    "ControlNetModel": {
        "block_out_channels": [32, 64], "layers_per_block": 1, "cross_attention_dim": 32,
        "attention_head_dim": 8, "norm_num_groups": 8, "sample_size": 16,
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
        "conditioning_embedding_out_channels": [8, 16]},
    "AutoencoderKL": {"block_out_channels": [32, 64], "layers_per_block": 1,
                      "norm_num_groups": 8, "sample_size": 32,
                      "down_block_types": ["DownEncoderBlock2D"] * 2,
                      "up_block_types": ["UpDecoderBlock2D"] * 2},
    "DiTTransformer2DModel": {"num_attention_heads": 2, "attention_head_dim": 8,
                              "num_layers": 2, "sample_size": 8, "norm_num_groups": 8},
    "PixArtTransformer2DModel": {"num_attention_heads": 2, "attention_head_dim": 8,
                                 "num_layers": 2, "sample_size": 8, "cross_attention_dim": 16,
                                 "caption_channels": 32, "norm_num_groups": 8},
    "SD3Transformer2DModel": {"num_attention_heads": 2, "attention_head_dim": 8,
                              "num_layers": 2, "sample_size": 8, "joint_attention_dim": 32,
                              "caption_projection_dim": 16, "pooled_projection_dim": 24,
                              "pos_embed_max_size": 16},
    "FluxTransformer2DModel": {"num_attention_heads": 2, "attention_head_dim": 16,
                               "num_layers": 1, "num_single_layers": 1,
                               "joint_attention_dim": 32, "pooled_projection_dim": 24,
                               "axes_dims_rope": [4, 6, 6], "in_channels": 16},
}


def small_config(name: str) -> dict[str, Any]:
    """The small config of class `name`: `SMALL[name]`, else the `GENERIC` settings its
    constructor takes (callables applied to the class default)."""
    if name in SMALL:
        return dict(SMALL[name])
    from irbridge.converters.pytorch.zoo.diffusers import model_class

    params = inspect.signature(model_class(name).__init__).parameters
    config: dict[str, Any] = {}
    for key, value in GENERIC.items():
        if key not in params:
            continue
        default = params[key].default
        if default is inspect.Parameter.empty:
            continue
        if callable(value):
            if not isinstance(default, (list, tuple, int)) or isinstance(default, bool):
                continue
            try:
                value = value(default)
            except TypeError:  # a default of another form than the rule's (an int)
                continue
        elif default is None:
            continue  # a feature the class leaves off stays off
        config[key] = value
    return config


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line[:300]


def failure(exc: BaseException, stage_status: str) -> dict[str, Any]:
    """A zoo error's record: `inputs` where the zoo could not derive inputs the model runs
    on, `build` where diffusers' class does not build from the config."""
    reason = first_line(exc)
    inputs = ("cannot derive" in reason or "do not run" in reason or "rejected inputs" in reason)
    return {"status": "inputs" if inputs else stage_status, "reason": reason}


def compare(got: list[Any], want: list[Any]) -> str | None:
    """None when every ORT output is within the stated bounds of eager's, else why not."""
    import numpy as np

    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, eager {w.shape}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                return f"output {i}: integers differ"
            continue
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        err = np.abs(g.astype(np.float64) - w.astype(np.float64))
        bound = ATOL_REL * scale + RTOL * np.abs(w.astype(np.float64))
        if not np.all(err <= bound):
            return f"output {i}: max abs error {float(np.max(err)):.3g} (scale {scale:.3g})"
    return None


def run_default(name: str) -> dict[str, Any]:
    from irbridge.converters.pytorch import capture, zoo
    from irbridge.summary import summarize

    record: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        built = zoo.build(f"diffusers:{name}", device="meta")
    except zoo.ZooError as exc:
        return failure(exc, "build")
    record["params"] = built.num_parameters
    record["inputs"] = built.input_desc
    try:
        with zoo.eager_blame(built):
            result = capture(built.module, built.args, built.kwargs, weights=False,
                             repeat_blocks=True)
    except zoo.ZooError as exc:
        return {**record, **failure(exc, "build")}
    except Exception as exc:
        return {**record, "status": "capture", "reason": first_line(exc)}
    summary = summarize(result.model)
    record.update(method=result.method, nodes=summary.nodes, opaque=summary.opaque_nodes,
                  macs=summary.cost.macs, graphs=len(result.model.graphs),
                  seconds=round(time.perf_counter() - start, 1))
    if summary.opaque_nodes:
        ops = ", ".join(op for op, _ in summary.opaque_ops[:3])
        return {**record, "status": "capture", "reason": f"{summary.opaque_nodes} opaque "
                f"nodes ({ops})"}
    return {**record, "status": "pass", "reason": ""}


def run_small(name: str) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort
    import torch

    from irbridge.converters.onnx.export import to_onnx
    from irbridge.converters.pytorch import capture, zoo
    from irbridge.converters.pytorch._util import tensor_leaves, tensor_to_numpy

    start = time.perf_counter()
    try:
        config = small_config(name)
    except zoo.ZooError as exc:
        return failure(exc, "build")
    record: dict[str, Any] = {"config": config}
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"diffusers-small-{os.getpid()}.json"
    path.write_text(json.dumps(config))
    try:
        built = zoo.build(f"diffusers:{name}:{path}")
    except zoo.ZooError as exc:
        return {**record, **failure(exc, "build")}
    finally:
        path.unlink()
    record["params"] = built.num_parameters
    record["inputs"] = built.input_desc
    if built.num_parameters > SMALL_MAX_PARAMS:
        return {**record, "status": "too big", "reason": f"{built.num_parameters:,} "
                f"parameters in the small config (> {SMALL_MAX_PARAMS:,})"}
    try:
        with zoo.eager_blame(built):
            result = capture(built.module, built.args, built.kwargs)
    except zoo.ZooError as exc:
        return {**record, **failure(exc, "build")}
    except Exception as exc:
        return {**record, "status": "capture", "reason": first_line(exc)}
    record["method"] = result.method
    if len(result.model.graphs) != 1:
        return {**record, "status": "capture", "reason": f"{len(result.model.graphs)} graphs "
                "(graph breaks): the ONNX check takes one"}
    try:
        proto = to_onnx(result.model)
    except Exception as exc:
        return {**record, "status": "onnx", "reason": first_line(exc)}
    with torch.no_grad():
        want = [tensor_to_numpy(t) for t in
                tensor_leaves(built.module(*result.args, **result.kwargs))]
    feeds = {n: tensor_to_numpy(t) for n, t in result.inputs.items()}
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        out = session.run(None, {k: v for k, v in feeds.items() if k in names})
    except Exception as exc:
        return {**record, "status": "onnxruntime", "reason": first_line(exc)}
    got = [np.asarray(out[where[1]]) if where is not None else np.array([])
           for where in result.outputs]
    record["seconds"] = round(time.perf_counter() - start, 1)
    why = compare(got, want)
    if why is not None:
        return {**record, "status": "mismatch", "reason": why}
    return {**record, "status": "pass", "reason": ""}


STAGE_FUNCS = {"default": run_default, "small": run_small}


def limit_memory() -> None:
    """At most `CHILD_MEMORY` bytes more address space for this (child) process than it
    has: a capture that would take the machine's memory fails here with a MemoryError
    (recorded as a crash) instead of waking the kernel's OOM killer."""
    import resource

    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    have = pages * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (have + CHILD_MEMORY, have + CHILD_MEMORY))


def run_child(name: str, stage: str, out: Path, timeout: float) -> dict[str, Any]:
    """`stage` of class `name` in a forked child, its record written to `out`."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            limit_memory()
            warnings.simplefilter("ignore")
            record = STAGE_FUNCS[stage](name)
        except BaseException as exc:
            record = {"status": "crash", "reason": "internal: " + first_line(exc),
                      "traceback": traceback.format_exc()[-2000:]}
            code = 1
        try:
            out.write_text(json.dumps(record, indent=1, default=str))
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        record = {"status": "timeout", "reason": f"no result in {timeout:.0f} s"}
        out.write_text(json.dumps(record))
        return record
    if out.is_file():
        return dict(json.loads(out.read_text()))
    record = {"status": "crash", "reason": f"the child died (wait status {status})"}
    out.write_text(json.dumps(record))
    return record


def load_state(state: Path) -> dict[str, dict[str, dict[str, Any]]]:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for file in sorted(state.glob("*.json")):
        name, _, stage = file.stem.rpartition(".")
        if stage in STAGES:
            results.setdefault(name, {})[stage] = json.loads(file.read_text())
    return results


def pct(n: int, d: int) -> str:
    return f"{100 * n / d:.0f}%" if d else "-"


def report(state: Path, names: list[str], stamp: str) -> None:
    """docs/pytorch-diffusers.md and tests/data/diffusers_baseline.json from the state."""
    results = load_state(state)
    missing = [n for n in names if set(results.get(n, {})) != set(STAGES)]
    if missing:
        raise SystemExit(f"{len(missing)} classes have no result yet: {', '.join(missing[:5])}")
    summary: dict[str, dict[str, int]] = {}
    passing: dict[str, list[str]] = {}
    for stage in STAGES:
        counts = Counter(results[n][stage]["status"] for n in names)
        summary[stage] = {s: counts.get(s, 0) for s in STATUSES if counts.get(s, 0)}
        passing[stage] = sorted(n for n in names if results[n][stage]["status"] == "pass")
    baseline = {"diffusers": _version(), "classes": len(names), "summary": summary,
                "passing": passing,
                "macs": {n: results[n]["default"]["macs"] for n in passing["default"]},
                "date": stamp}
    BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
    total = len(names)
    lines = [
        "# diffusers model classes through irbridge",
        "",
        f"Generated by `{COMMAND}` then `--report` on {stamp}, diffusers {_version()}; "
        "do not edit by hand. What each stage does and the tolerance of the ONNX check: the "
        "docstring of tools/diffusers_sweep.py. tests/pytorch/test_diffusers_baseline.py "
        "holds that the classes passing here keep passing.",
        "",
        f"- Model classes: **{total}** (every `ModelMixin` class diffusers exports)",
    ]
    for stage, label in (("default", "default config, meta device, capture + MACs"),
                         ("small", "small config, capture + ONNX + onnxruntime vs eager")):
        ok = summary[stage].get("pass", 0)
        rest = ", ".join(f"{s} {c}" for s, c in summary[stage].items() if s != "pass")
        lines.append(f"- {label}: **{ok} pass ({pct(ok, total)})**; {rest}")
    unet = results.get("UNet2DConditionModel", {}).get("default", {})
    if unet.get("status") == "pass":
        lines += ["", "## Sanity check: Stable Diffusion 1.5's UNet", "",
                  f"`UNet2DConditionModel`'s defaults are SD 1.5's UNet ({unet['params']:,} "
                  "parameters). At 64x64 latents (512x512 images), 77 text tokens, batch 1, "
                  f"one step: **{unet['macs']:,} MACs ({unet['macs'] / 1e9:.2f} G)**. By hand: "
                  "the attention score and value matmuls, 2 x tokens x keys x width per "
                  "attention, are 5 x (4096^2 x 320 + 1024^2 x 640 + 256^2 x 1280) x 2 "
                  "(self-attention in the 5 transformer blocks at each of 64x64, 32x32, "
                  "16x16) + 64^2 x 1280 x 2 (the mid block) + 2 x 77 x (5 x (4096 x 320 + "
                  "1024 x 640 + 256 x 1280) + 64 x 1280) (cross-attention) = "
                  "63,026,135,040; the convolutions and linear layers are the rest, "
                  f"{unet['macs'] - 63_026_135_040:,} ({(unet['macs'] - 63_026_135_040) / 1e9:.2f}"
                  " G), against the 339 G MACs published for this UNet by BK-SDM (Kim et al., "
                  "2023, Table 1), counted over its layers (a per-layer counter does not see "
                  "the attention matmuls). tests/pytorch/test_diffusers.py checks the total "
                  "against an independent count (forward hooks on every conv and linear layer "
                  "plus the attention matmuls by hand): equal to the MAC."]
    lines += ["", "Failures marked `build` are diffusers' own: the class does not build from "
              "that config (it needs settings the defaults leave out). `inputs`: the zoo "
              "derives no example inputs the model runs on (a forward input its config does "
              "not describe). The rest are the converters'.", "",
              "| class | params (default) | default | MACs (default) | small | small: reason |",
              "| --- | ---: | --- | ---: | --- | --- |"]
    for n in names:
        d, s = results[n]["default"], results[n]["small"]
        params = f"{d['params'] / 1e6:,.1f} M" if d.get("params") else ""
        macs = f"{d['macs'] / 1e9:,.2f} G" if d.get("macs") is not None and d["status"] == "pass" else ""
        dcell = d["status"] if d["status"] == "pass" else f"{d['status']}: {_cell(d['reason'])}"
        lines.append(f"| {n} | {params} | {dcell} | {macs} | {s['status']} | "
                     f"{_cell(s.get('reason', ''))} |")
    lines.append("")
    DOC.write_text("\n".join(lines))
    print(f"wrote {DOC.relative_to(ROOT)} and {BASELINE.relative_to(ROOT)}")


def _cell(text: str) -> str:
    text = re.sub(r"diffusers-small-\d+\.json", "small.json", text)  # the child's config file
    return text.replace("|", "\\|").replace("\n", " ")[:160]


def _version() -> str:
    import diffusers

    return str(diffusers.__version__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, help="folder of per-class results (resumable)")
    parser.add_argument("--only", nargs="+", help="these classes only (printed)")
    parser.add_argument("--stage", choices=STAGES, action="append", help="these stages only")
    parser.add_argument("--report", action="store_true", help="write the doc and baseline")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--jobs", type=int, default=1, help="classes run side by side")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import diffusers  # noqa: F401 (imported once, in the parent)
    import onnxruntime  # noqa: F401
    import torch  # noqa: F401
    from diffusers import ModelMixin, models

    import irbridge.converters.onnx.export  # noqa: F401
    from irbridge.converters.pytorch import zoo  # noqa: F401
    from irbridge.converters.pytorch.zoo.diffusers import model_class_names

    # each class's module imported once, here, not in every child; building blocks that
    # diffusers exports beside its models (plain nn.Modules, no config) are not swept
    names = args.only or [n for n in model_class_names()
                          if isinstance(c := getattr(models, n, None), type)
                          and issubclass(c, ModelMixin)]
    if args.report:
        if args.state is None:
            parser.error("--report needs --state")
        report(args.state, names, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        return 0
    state = args.state or Path(os.environ.get("TMPDIR", "/tmp")) / "diffusers-sweep-only"
    state.mkdir(parents=True, exist_ok=True)
    stages = args.stage or list(STAGES)

    def one(i: int, name: str) -> None:
        for stage in stages:
            out = state / f"{name}.{stage}.json"
            if args.state is not None and args.only is None and out.is_file():
                continue
            out.unlink(missing_ok=True)
            t = time.monotonic()
            record = run_child(name, stage, out, args.timeout)
            print(f"[{i}/{len(names)}] {name} {stage}: {record['status']} "
                  f"{record.get('reason', '')[:150]} ({time.monotonic() - t:.0f} s)", flush=True)

    # the parent only forks and waits: its threads run no torch code
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for future in [pool.submit(one, i, n) for i, n in enumerate(names, 1)]:
            future.result()
    return 0


if __name__ == "__main__":
    sys.exit(main())
