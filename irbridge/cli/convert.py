"""`irbridge convert` and `irbridge models`: capture a model into an IR file."""

from __future__ import annotations

import json
import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from irbridge.cli.analyze import parse_bindings
from irbridge.cli.render import console, print_summary
from irbridge.errors import IrbridgeError
from irbridge.formats import (
    DEFAULT_HARDWARE,
    WEIGHTED_FORMATS,
    WRITERS,
    bound_dims,
    incomplete_reason,
    is_model_file,
    load_model,
    output_format,
    output_path,
    read_file,
    write_model,
)
from irbridge.sanitize import clean
from irbridge.summary import summarize

BIND_HELP = ("A model file's symbolic dim NAME=SIZE (repeatable, or a,b comma-separated): "
             "an ONNX file's input dims are bound before its shapes are inferred, so every "
             "shape computed from them is static.")

Frontend = Annotated[str, typer.Option(
    "--frontend", "-f", help="Capture method: auto (warm up, then fx, export, dynamo), fx, "
                             "dynamo or export.")]


def convert(
    model: Annotated[str, typer.Argument(
        help="A zoo name (see `irbridge models`), path/to/file.py:Name, package.module:factory, "
             "a .pt checkpoint (with --trust-checkpoint) or a .yaml ultralytics config.")],
    output_arg: Annotated[str | None, typer.Option(
        "-o", "--output", help="File to write: .irb (binary IR), .irbt (text IR), or another "
                               "format with --to or its suffix (.onnx, .mlir, .mlirbc). "
                               "Without it, only the summary is printed.")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="Output format: irb, onnx, stablehlo (default: from the -o suffix).")] = None,
    opset: Annotated[int | None, typer.Option(
        help="ONNX opset for --to onnx (default: the lowest that represents the model).")] = None,
    target: Annotated[str, typer.Option(
        "--target", help="ONNX: onnx (default: runtime-neutral forms) or onnxruntime (forms "
                         "onnxruntime's CPU provider runs faster, with com.microsoft "
                         "MultiHeadAttention: for onnxruntime only; see "
                         "docs/onnx.md).")] = "onnx",
    frontend: Frontend = "auto",
    no_weights: Annotated[bool, typer.Option(
        "--no-weights", help="Write a shape-only IR (no weight data).")] = False,
    meta: Annotated[bool, typer.Option(
        "--meta", help="Build and capture on the meta device: no weight is allocated, for "
                       "models larger than memory. Implies --no-weights.")] = False,
    repeat_blocks: Annotated[bool, typer.Option(
        "--repeat-blocks", help="With --meta or --no-weights: trace a deep stack of alike "
                                "layers cut to 2 and 3 layers and copy the last for the "
                                "rest, when the two traces show one layer repeated (else "
                                "the whole model is traced); see docs/pytorch.md.")] = False,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Run the IR in the reference executor and compare every output with "
                         "the eager model; exit 1 on a mismatch.")] = False,
    input_shape: Annotated[str | None, typer.Option(
        "--input-shape", help="Shape of the main input, e.g. 1,3,320,320.")] = None,
    bind: Annotated[list[str] | None, typer.Option(
        "--bind", help=BIND_HELP)] = None,
    batch: Annotated[int | None, typer.Option(help="Batch size of the example inputs.")] = None,
    seq_len: Annotated[int | None, typer.Option(help="Sequence length for text models.")] = None,
    dtype: Annotated[str | None, typer.Option(help="Model dtype: fp32, fp16, bf16 or fp64 (or float32, ...).")] = None,
    dynamic: Annotated[list[str] | None, typer.Option(
        help="Make dim 0 of every input symbolic: NAME or NAME=MIN:MAX (export, dynamo). "
             "Repeat for dims 1, 2, ... The example batch defaults to 2 (torch fixes "
             "size-1 dims).")] = None,
    decompose: Annotated[bool, typer.Option(
        help="With torch.export: lower from core ATen after decomposition.")] = False,
    strict: Annotated[bool, typer.Option(help="torch.export in strict mode.")] = False,
    weights_file: Annotated[Path | None, typer.Option(
        "--weights", help="Load a local state_dict (.pt, .safetensors) into the model.")] = None,
    pretrained: Annotated[bool, typer.Option(
        help="Use pretrained weights (needs a reachable hub or a local cache).")] = False,
    trust_checkpoint: Annotated[bool, typer.Option(
        help="Trust the model's files to run code: load a pickled .pt checkpoint (also "
             "ultralytics --pretrained weights) and build a model YAML whose fields need "
             "eval. See docs/security.md.")] = False,
    phase: Annotated[str | None, typer.Option(
        "--phase", help="LLM serving step with an explicit static KV cache: prefill (the "
                        "prompt of --seq-len tokens writes the cache) or decode (one token "
                        "reads --kv-len cached positions). Hugging Face causal LMs only.")] = None,
    kv_len: Annotated[int | None, typer.Option(
        "--kv-len", help="--phase: positions in the KV cache (default: --seq-len for "
                         "prefill, 128 for decode).")] = None,
    train: Annotated[bool, typer.Option(
        "--train", help="Capture one training step (forward, loss, backward, optimizer "
                        "update) instead of the forward pass; see docs/pytorch.md.")] = False,
    loss: Annotated[str | None, typer.Option(
        "--loss", help="--train: mse, cross_entropy (default) or model (the model returns "
                       "its loss).")] = None,
    optimizer: Annotated[str | None, typer.Option(
        "--optimizer", help="--train: sgd (default) or adamw.")] = None,
    lr: Annotated[float | None, typer.Option(
        "--lr", help="--train: learning rate (default 0.01 for sgd, 1e-3 for adamw).")] = None,
) -> None:
    """Convert a model (zoo name, Python file, ONNX or StableHLO file) into an irbridge IR
    file, or another format with --to, and print its summary. With --verify, the output is
    written only when verification passes."""
    is_file = is_model_file(model)
    output = output_path(output_arg, to) if output_arg is not None else None
    dims = parse_bindings(bind)
    if dims and not is_file:
        raise IrbridgeError("--bind applies to model files (.irb, .onnx, .mlir); capture a "
                            "model with --input-shape, --batch, --seq-len or --dynamic")
    dynamic_spec = _parse_dynamic(dynamic or [])
    fmt = _check_options(
        is_file=is_file, output=output, to=to, opset=opset, target=target, frontend=frontend,
        verify=verify, meta=meta, batch=batch, seq_len=seq_len, input_shape=input_shape,
        pytorch_only={
            "--no-weights": no_weights, "--meta": meta, "--verify": verify,
            "--input-shape": input_shape is not None, "--batch": batch is not None,
            "--seq-len": seq_len is not None, "--dtype": dtype is not None,
            "--dynamic": bool(dynamic), "--decompose": decompose, "--strict": strict,
            "--weights": weights_file is not None, "--pretrained": pretrained,
            "--trust-checkpoint": trust_checkpoint, "--frontend": frontend != "auto",
            "--phase": phase is not None, "--kv-len": kv_len is not None,
            "--train": train, "--repeat-blocks": repeat_blocks,
        })
    if repeat_blocks and not (meta or no_weights):
        raise IrbridgeError("--repeat-blocks makes a shape-only IR: add --meta or --no-weights")
    if repeat_blocks and train:
        raise IrbridgeError("--repeat-blocks does not apply to --train (the training step is "
                            "traced with make_fx on real tensors)")
    train_spec = _train_spec(train, loss, optimizer, lr, frontend=frontend, phase=phase,
                             dynamic=bool(dynamic), decompose=decompose, strict=strict,
                             meta=meta, no_weights_verify=no_weights and verify)
    shape = _parse_shape(input_shape) if input_shape else None
    if is_file:
        _convert_file(Path(model), output, fmt, opset, target, dims)
        return
    from irbridge.converters.pytorch import capture, zoo
    from irbridge.converters.pytorch import verify as verify_capture

    if phase is not None and phase not in ("prefill", "decode"):
        raise IrbridgeError(f"--phase {phase!r}: use prefill or decode")
    if kv_len is not None and phase is None:
        raise IrbridgeError("--kv-len applies to --phase prefill|decode only")
    if kv_len is not None and not 1 <= kv_len <= _MAX_DIM:
        raise IrbridgeError(f"--kv-len {kv_len}: must be between 1 and {_MAX_DIM}")
    if dynamic_spec and batch is None:
        # torch specialises size-1 dims to constants, so a symbolic batch needs an example
        # batch of at least 2 (within the requested range).
        example = max(2, next(iter(dynamic_spec.values()))[0])
        if shape is None:
            batch = example
        elif shape[0] == 1:
            shape = (example, *shape[1:])
    with _status(f"building {model}"):
        built = zoo.build(model, batch=batch, seq_len=seq_len, input_shape=shape, dtype=dtype,
                          device="meta" if meta else "cpu", pretrained=pretrained,
                          weights_file=weights_file, trust_checkpoint=trust_checkpoint)
    if phase is not None:
        from irbridge.converters.pytorch.phases import phase_built

        built = phase_built(built, phase, batch=batch, seq_len=seq_len, kv_len=kv_len)
    console.print(f"built {clean(built.name)} ({built.family}, {built.num_parameters:,} "
                  f"parameters, weights {clean(built.weights)}); inputs "
                  f"{clean(built.input_desc)}", markup=False)
    if train_spec is not None:
        _convert_train(built, train_spec, output=output, fmt=fmt, opset=opset,
                       weights=not no_weights, verify=verify, target=target)
        return
    with _status(f"capturing {built.name} with {frontend}"), zoo.eager_blame(built):
        result = capture(built.module, built.args, built.kwargs, frontend=frontend,
                         weights=not (no_weights or meta), dynamic=dynamic_spec or None,
                         decompose=decompose, strict=strict, repeat_blocks=repeat_blocks)
    ir = result.model
    ir.name = built.name
    if phase is not None:
        from irbridge.converters.pytorch.phases import phase_info

        ir.metadata.update(phase_info(built.module, built.args).metadata())  # type: ignore[arg-type]
    for method, outcome in result.attempts:
        console.print(f"  {method}: {clean(outcome)}", markup=False)
    if "capture.repeated_blocks" in ir.metadata:
        console.print(f"  repeated blocks: {clean(ir.metadata['capture.repeated_blocks'])}",
                      markup=False)
    report = None
    if verify:
        with _status("verifying against the eager model"):
            report = verify_capture(result, built.module)
    # A capture that failed its check is not written: a file on disk looks usable.
    write = output is not None and (report is None or report.passed)
    if write:
        assert output is not None
        write_model(ir, output, fmt, opset=opset, target=target,
                    weights="none" if (no_weights or meta) else "auto")
    print_summary(summarize(ir), title=f"{built.name}: captured with {result.method} "
                                       f"in {result.seconds:.2f} s")
    if write:
        console.print(f"wrote {clean(str(output))}", markup=False)
        why = incomplete_reason(ir)
        if why is not None:  # written as .irb only (write_model refuses other formats)
            warnings.warn(f"{built.name}: the IR is an incomplete Dynamo capture ({why}); "
                          "it is not the whole model, and exporting it is refused",
                          stacklevel=1)
    if report is not None:
        console.print(f"verify: {clean(report.summary())}", markup=False)
        for check in report.outputs:
            if not check.passed:
                console.print(f"  output {check.index} ({clean(check.name or '-')}): max abs "
                              f"{check.max_abs_error:.3g} > atol {check.atol:g} "
                              f"{clean(check.note)}".rstrip(), markup=False)
        if not report.passed:
            if output is not None:
                console.print(f"not written: {clean(str(output))} (verification failed; "
                              "convert without --verify to write it anyway)", markup=False)
            raise typer.Exit(1)


def _train_spec(train: bool, loss: str | None, optimizer: str | None, lr: float | None, *,
                frontend: str, phase: str | None, dynamic: bool, decompose: bool,
                strict: bool, meta: bool, no_weights_verify: bool) -> Any:
    """The --train options, checked before any work; None without --train."""
    if not train:
        for name, value in (("--loss", loss), ("--optimizer", optimizer), ("--lr", lr)):
            if value is not None:
                raise IrbridgeError(f"{name} applies to --train only")
        return None
    for name, on in (("--frontend", frontend != "auto"), ("--phase", phase is not None),
                     ("--dynamic", dynamic), ("--decompose", decompose),
                     ("--strict", strict), ("--meta", meta)):
        if on:
            raise IrbridgeError(f"{name} does not apply to --train (the training step is "
                                "traced with make_fx on real tensors)")
    if no_weights_verify:
        raise IrbridgeError("--verify runs the training step and needs real weights; drop "
                            "--no-weights")
    from irbridge.converters.pytorch.train import TrainSpec

    spec = TrainSpec(loss=loss or "auto", optimizer=optimizer or "sgd", lr=lr)
    spec.check()
    return spec


def _convert_train(built: Any, spec: Any, *, output: Path | None, fmt: str | None,
                   opset: int | None, weights: bool, verify: bool,
                   target: str = "onnx") -> None:
    from irbridge.converters.pytorch.train import capture_train, memory_by_kind, verify_train

    with _status(f"capturing a training step of {built.name}"):
        result = capture_train(built.module, built.args, built.kwargs, train=spec,
                               weights=weights)
    ir = result.model
    ir.name = built.name
    report = None
    if verify:
        with _status("verifying against eager autograd and torch.optim"):
            report = verify_train(result, built.module)
    write = output is not None and (report is None or report.passed)
    if write:
        assert output is not None
        write_model(ir, output, fmt, opset=opset, target=target,
                    weights="auto" if weights else "none")
    print_summary(summarize(ir), title=f"{built.name}: training step ({spec.loss} loss, "
                                       f"{spec.optimizer}) captured in {result.seconds:.2f} s")
    kinds = memory_by_kind(ir)
    console.print("bytes by kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items())),
                  markup=False)
    if write:
        console.print(f"wrote {clean(str(output))}", markup=False)
    if report is not None:
        console.print(f"verify: {clean(report.summary())}", markup=False)
        for check in report.checks:
            if not check.passed:
                console.print(f"  {clean(check.name)} ({check.kind}): max abs "
                              f"{check.max_abs_error:.3g} > {check.tolerance:.3g}",
                              markup=False)
        if not report.passed:
            if output is not None:
                console.print(f"not written: {clean(str(output))} (verification failed; "
                              "convert without --verify to write it anyway)", markup=False)
            raise typer.Exit(1)


_MAX_DIM = (1 << 63) - 1
"""torch sizes are int64: no dim, and no product of an input's dims, may exceed this."""


def _check_options(*, is_file: bool, output: Path | None, to: str | None, opset: int | None,
                   target: str, frontend: str, verify: bool, meta: bool, batch: int | None,
                   seq_len: int | None, input_shape: str | None,
                   pytorch_only: dict[str, bool]) -> str | None:
    """Every option checked before any work (reading, building, capturing): one line each.
    Returns the output format (None without -o)."""
    if to is not None and output is None:
        raise IrbridgeError(f"--to {to} needs -o FILE to write to")
    fmt = output_format(output, to) if output is not None else None
    _check_opset(opset, fmt)
    _check_target(target, fmt)
    if is_file:
        given = [name for name, on in pytorch_only.items() if on]
        if given:
            raise IrbridgeError(f"{given[0]} applies to models captured from PyTorch, not to "
                                "model files (.irb, .onnx, .mlir)")
        return fmt
    if meta and verify:
        raise IrbridgeError("--verify needs real weights; drop --meta")
    if pytorch_only.get("--no-weights") and verify:  # (a shape-only capture cannot run)
        raise IrbridgeError("--verify needs real weights; drop --no-weights")
    for name, value in (("--batch", batch), ("--seq-len", seq_len)):
        if value is not None and not 1 <= value <= _MAX_DIM:
            raise IrbridgeError(f"{name} {value}: must be between 1 and {_MAX_DIM}")
    if input_shape is not None:
        _parse_shape(input_shape)
    from irbridge.converters.pytorch import FRONTENDS  # imports torch: the last check

    if frontend not in FRONTENDS:
        raise IrbridgeError(f"--frontend {clean(frontend)!r}: choose one of "
                            f"{', '.join(FRONTENDS)}")
    return fmt


def _check_target(target: str, fmt: str | None) -> None:
    if target == "onnx":  # the default: nothing to check, nothing imported
        return
    from irbridge.converters.onnx.export import TARGETS

    if target not in TARGETS:
        raise IrbridgeError(f"--target {clean(target)!r}: choose one of {', '.join(TARGETS)}")
    if fmt != "onnx":
        raise IrbridgeError(f"--target {target} applies to ONNX output (-o FILE.onnx or "
                            f"--to onnx), not {fmt or 'no output'}")


def _check_opset(opset: int | None, fmt: str | None) -> None:
    if opset is None:
        return
    if fmt != "onnx":
        raise IrbridgeError(f"--opset applies to ONNX output (-o FILE.onnx or --to onnx), "
                            f"not {fmt or 'no output'}")
    from irbridge.converters.onnx._common import MIN_EXPORT_OPSET, max_opset

    if not MIN_EXPORT_OPSET <= opset <= max_opset():
        raise IrbridgeError(f"--opset {opset} is outside the supported range "
                            f"{MIN_EXPORT_OPSET}..{max_opset()}")


def _convert_file(source: Path, output: Path | None, fmt: str | None,
                  opset: int | None, target: str = "onnx",
                  dims: dict[str, int] | None = None) -> None:
    """Import a model file of another format (or re-save an IR file)."""
    with _status(f"reading {source}"):
        ir = read_file(source, dims=dims)
    with bound_dims(ir, str(source), dims):
        if output is not None:
            write_model(ir, output, fmt, opset=opset, target=target)
        print_summary(summarize(ir),
                      title=f"{source}: read as {ir.source_format or 'irbridge'}")
    if output is not None:
        console.print(f"wrote {clean(str(output))}", markup=False)


def export(
    file: Annotated[str, typer.Argument(help="An IR, ONNX or StableHLO file, or a zoo name.")],
    to: Annotated[str, typer.Option("--to", help=(
        "Output format: irb, onnx, stablehlo; simulators: chakra, scalesim, timeloop; "
        "viewers: model-explorer, dot, svg, png, html."))],
    output_arg: Annotated[str, typer.Option("-o", "--output", help=(
        "File to write (a folder for chakra, scalesim and timeloop)."))],
    opset: Annotated[int | None, typer.Option(
        help="ONNX opset (default: the lowest that represents the model, at least an ONNX "
             "source's own).")] = None,
    optimize: Annotated[bool, typer.Option(help=(
        "ONNX: the lean clean-up pass (constants as initializers, constant folding, no-op "
        "removal); --no-optimize writes the exact lowering."))] = True,
    fold_batch_norm: Annotated[bool, typer.Option(help=(
        "ONNX: fold BatchNormalization into the Conv before it (a file for inference)."))
    ] = False,
    target: Annotated[str, typer.Option(
        "--target", help="ONNX: onnx (default: runtime-neutral forms) or onnxruntime (forms "
                         "onnxruntime's CPU provider runs faster, with com.microsoft "
                         "MultiHeadAttention: for onnxruntime only; see "
                         "docs/onnx.md).")] = "onnx",
    target_version: Annotated[str | None, typer.Option(
        help="StableHLO portable artifact version (default: the current one).")] = None,
    weights_as_args: Annotated[bool, typer.Option(
        help="StableHLO: weights become function arguments instead of constants.")] = False,
    hardware: Annotated[str | None, typer.Option(help=(
        "Target for latency and bound (chakra, scalesim, model-explorer, dot/svg/png, "
        "html): a catalog name (see `irbridge hardware`) or a target .yaml file; "
        f"default {DEFAULT_HARDWARE}."))] = None,
    devices: Annotated[int | None, typer.Option(min=1, help=(
        "Chakra: split the graph into this many pipeline stages, one trace per rank."))] = None,
    dp: Annotated[int | None, typer.Option("--dp", help=(
        "Chakra training step: data-parallel replicas (gradient all-reduce)."))] = None,
    tp: Annotated[int | None, typer.Option("--tp", help=(
        "Chakra training step: tensor-parallel ways (Megatron-style splits)."))] = None,
    pp: Annotated[int | None, typer.Option("--pp", help=(
        "Chakra training step: pipeline stages (1F1B)."))] = None,
    microbatches: Annotated[int | None, typer.Option(help=(
        "Chakra training step: micro-batches per step (default 1)."))] = None,
    zero: Annotated[int | None, typer.Option(help=(
        "Chakra training step: ZeRO stage 0-3 (default 0: all-reduce)."))] = None,
    verify: Annotated[bool, typer.Option(
        "--verify", help="ONNX: run the written file in onnxruntime and the IR in the "
                         "reference executor on the same (seeded random) inputs and compare "
                         "every output; the file is written only when they match (exit 1 "
                         "otherwise).")] = False,
    allow_custom_ops: Annotated[bool, typer.Option(
        "--allow-custom-ops", help="ONNX: write opaque nodes of non-ONNX domains (aten, "
                                   "stablehlo, ...) as custom-domain nodes, which "
                                   "onnxruntime cannot run; by default they are refused.")
    ] = False,
    bind: Annotated[list[str] | None, typer.Option("--bind", help=BIND_HELP)] = None,
) -> None:
    """Export a model to another format. With --verify (ONNX), the output is written only
    when onnxruntime's results match the IR's."""
    output = output_path(output_arg, to)
    fmt = output_format(output, to)
    dims = parse_bindings(bind)
    parallel = {"dp": dp, "tp": tp, "pp": pp, "microbatches": microbatches, "zero": zero}
    if not getattr(WRITERS[fmt], "accepts_devices", False):
        for name, value in {"devices": devices, **parallel}.items():
            if value is not None:
                raise IrbridgeError(f"--{name} applies to --to chakra, not {fmt}")
    if hardware is not None and fmt in WEIGHTED_FORMATS:
        raise IrbridgeError(f"--hardware does not apply to --to {fmt}")
    # Checked before reading (a zoo name is built and captured first).
    _check_opset(opset, fmt)
    _check_target(target, fmt)
    if (target_version is not None or weights_as_args) and fmt != "stablehlo":
        option = "--target-version" if target_version is not None else "--weights-as-args"
        raise IrbridgeError(f"{option} applies to --to stablehlo, not {fmt}")
    if target_version is not None:
        from irbridge.converters.stablehlo import check_target_version

        check_target_version(target_version)
    if fmt != "onnx" and (fold_batch_norm or not optimize):
        raise IrbridgeError(f"--fold-batch-norm and --no-optimize apply to --to onnx, not {fmt}")
    if fmt != "onnx" and (verify or allow_custom_ops):
        option = "--verify" if verify else "--allow-custom-ops"
        raise IrbridgeError(f"{option} applies to --to onnx, not {fmt}")
    with _status(f"reading {file}"):
        model = load_model(file, weights=fmt in WEIGHTED_FORMATS, dims=dims)
    with bound_dims(model, file, dims):
        if verify:
            _export_onnx_verified(model, output, opset=opset, optimize=optimize,
                                  fold_batch_norm=fold_batch_norm, target=target,
                                  allow_custom_ops=allow_custom_ops)
            return
        with _status(f"writing {output}"):
            write_model(model, output, fmt, opset=opset, target_version=target_version,
                        weights_as_args=weights_as_args, hardware=hardware, devices=devices,
                        optimize=optimize, fold_batch_norm=fold_batch_norm,
                        allow_custom_ops=allow_custom_ops, target=target, **parallel)
    console.print(f"wrote {clean(str(output))} ({fmt})", markup=False)


def _export_onnx_verified(model: Any, output: Path, **options: Any) -> None:
    """`export --to onnx --verify`: write only when onnxruntime matches the IR; report."""
    from irbridge.converters.onnx.verify import (
        OnnxVerifyError,
        check_static_inputs,
        export_verified,
    )
    from irbridge.formats import check_complete

    check_complete(model, "onnx")  # opset None: the lowest that represents the model
    check_static_inputs(model)  # a usage error (exit 2), not a failed check
    try:
        with _status(f"writing and verifying {output}"):
            report = export_verified(model, output, **options)
    except OnnxVerifyError as exc:
        report = exc.report
        console.print(f"verify: {clean(report.summary())}", markup=False)
        for check in report.outputs:
            if not check.passed:
                console.print(f"  output {check.index} ({clean(check.name or '-')}): max abs "
                              f"{check.max_abs_error:.3g} > atol {check.atol:g} + rtol "
                              f"{check.rtol:g} x scale {clean(check.note)}".rstrip(),
                              markup=False)
        console.print(f"not written: {clean(str(output))} (verification failed; export "
                      "without --verify to write it anyway)", markup=False)
        raise typer.Exit(1) from None
    console.print(f"wrote {clean(str(output))} (onnx)", markup=False)
    console.print(f"verify: {clean(report.summary())}", markup=False)


def models(
    family: Annotated[str | None, typer.Option(help="Only this family.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the model zoo by family."""
    from irbridge.converters.pytorch import zoo

    catalog = zoo.list_models()
    if family is not None:
        if family not in catalog:
            raise IrbridgeError(f"unknown family {family!r}; known: {', '.join(catalog)}")
        catalog = {family: catalog[family]}
    if as_json:
        typer.echo(json.dumps({f: [zoo.entry_to_dict(e) for e in entries]
                               for f, entries in catalog.items()}, indent=2))
        return
    from rich.table import Table  # lazy: keeps rich out of start-up

    for name, entries in catalog.items():
        table = Table(title=f"{name} ({len(entries)})", title_justify="left", show_edge=False)
        for column in ("name", "task", "input", "built by"):
            table.add_column(column)
        for e in entries:
            table.add_row(e.name, e.task, e.input_hint, e.source)
        console.print(table)


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        raise IrbridgeError(f"--input-shape {clean(text)!r}: expected integers like 1,3,224,224"
                            ) from None
    if not shape or any(d < 1 for d in shape):
        raise IrbridgeError(f"--input-shape {clean(text)!r}: dims must be positive")
    numel = 1
    for d in shape:
        numel *= d
    if numel > _MAX_DIM:
        raise IrbridgeError(f"--input-shape {clean(text)!r}: {numel} elements, more than a "
                            f"tensor can hold ({_MAX_DIM})")
    return shape


def _parse_dynamic(items: list[str]) -> dict[str, tuple[int, int]]:
    spec: dict[str, tuple[int, int]] = {}
    for item in items:
        name, _, bounds = item.partition("=")
        lo, hi = 1, 1 << 16
        if bounds:
            try:
                lo_text, _, hi_text = bounds.partition(":")
                lo, hi = int(lo_text), int(hi_text)
            except ValueError:
                raise IrbridgeError(f"--dynamic {clean(item)!r}: expected NAME or NAME=MIN:MAX"
                                    ) from None
        if not name.isidentifier() or not 0 <= lo <= hi <= _MAX_DIM:
            raise IrbridgeError(f"--dynamic {clean(item)!r}: expected NAME or NAME=MIN:MAX, "
                                f"0 <= MIN <= MAX <= {_MAX_DIM}")
        spec[name] = (lo, hi)
    return spec


def _status(message: str) -> AbstractContextManager[Any]:
    """A spinner on terminals; nothing when output is captured (tests, pipes)."""
    return console.status(message) if console.is_terminal else nullcontext()


def register(app: typer.Typer) -> None:
    app.command()(convert)
    app.command()(export)
    app.command()(models)
