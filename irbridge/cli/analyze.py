"""`irbridge analyze` and `irbridge hardware`: costs, fusion, roofline on hardware targets."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated

import typer

from irbridge import serde
from irbridge.cli.render import console
from irbridge.errors import IrbridgeError
from irbridge.formats import load_model, output_path
from irbridge.ir import Model
from irbridge.sanitize import clean


class Fusion(enum.StrEnum):
    unfused = "unfused"
    fused = "fused"
    both = "both"


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def resolve_model(spec: str, *, weights: bool = False) -> Model:
    """FILE_OR_MODEL -> a model: an IR file, an ONNX file, or a zoo name converted on the fly."""
    return load_model(spec, weights=weights)


def parse_batches(text: str | None) -> list[int | None]:
    if text is None:
        return [None]
    sizes: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        try:
            size = int(part)
        except ValueError:
            raise IrbridgeError(f"--batch {text!r}: expected N or a list like 1,8,32") from None
        if size < 1:
            raise IrbridgeError(f"--batch {text!r}: batch sizes must be at least 1")
        if size not in sizes:
            sizes.append(size)
    return sizes


def parse_bindings(items: list[str] | None) -> dict[str, int]:
    symbols: dict[str, int] = {}
    for item in items or []:
        for part in item.split(","):
            name, sep, size = part.partition("=")
            try:
                if not sep or not name.strip():
                    raise ValueError
                symbols[name.strip()] = int(size)
            except ValueError:
                raise IrbridgeError(f"--bind {part!r}: expected NAME=SIZE, e.g. s0=8") from None
            if not 1 <= symbols[name.strip()] < 2**62:
                raise IrbridgeError(f"--bind {part!r}: a size must be at least 1 and below "
                                    "2^62")
    return symbols


def analyze(
    file_or_model: Annotated[str, typer.Argument(
        show_default=False, help="An IR, ONNX or StableHLO file, or a zoo model name (captured on the fly, shape-only).")],
    hardware: Annotated[str, typer.Option(
        "--hardware", "-H", help="Targets, comma-separated: catalog names or aliases "
                                 "(see `irbridge hardware`) or target .yaml files.")] = "h100-sxm",
    dtype: Annotated[str | None, typer.Option(
        help="Compute dtype: fp32, tf32, bf16, fp16, fp8, int8 (default: the model's). "
             "Float tensors are costed at its size.")] = None,
    batch: Annotated[str | None, typer.Option(
        help="Batch size N, or a sweep 1,8,32: binds a symbolic leading input dim, or "
             "rescales a static one and re-infers shapes.")] = None,
    bind: Annotated[list[str] | None, typer.Option(
        help="Bind a symbolic dim, NAME=SIZE (repeatable); an ONNX file's input dims are "
             "bound before its shapes are inferred.")] = None,
    fusion: Annotated[Fusion, typer.Option(help="Partitioning strategy.")] = Fusion.fused,
    output_format: Annotated[Format, typer.Option(
        "--format", help="table, json, csv or markdown (to stdout).")] = Format.table,
    plot: Annotated[Path | None, typer.Option(
        help="Write a roofline plot: NAME.png and NAME.svg.")] = None,
    top: Annotated[int, typer.Option(help="Show the N slowest kernels.")] = 10,
    by_module: Annotated[int | None, typer.Option(
        "--by-module", metavar="DEPTH",
        help="Per-module rollup down to DEPTH levels of module paths.")] = None,
    output_arg: Annotated[str | None, typer.Option(
        "-o", "--output", help="Write the IR annotated with costs, partitions and estimates.")
    ] = None,
    phase: Annotated[str | None, typer.Option(
        "--phase", help="LLM serving step of a zoo causal LM, captured shape-only with a "
                        "static KV cache: prefill or decode (an IR file of a phase graph "
                        "carries its own). Adds TTFT / TPOT, tokens/s and memory per device.")
    ] = None,
    kv_len: Annotated[int | None, typer.Option(
        "--kv-len", help="--phase: KV-cache positions (default: --seq-len for prefill, "
                         "128 for decode).")] = None,
    seq_len: Annotated[int | None, typer.Option(
        "--seq-len", help="--phase prefill: prompt length (default 128).")] = None,
    tp: Annotated[str | None, typer.Option(
        "--tp", help="Serving analysis: tensor-parallel ways N, or a list 1,2,4,8: weights "
                     "and KV heads split over N devices, TP collectives on the target's "
                     "interconnect.")] = None,
) -> None:
    """Cost, fusion partitions and a roofline estimate of a model on hardware targets."""
    from irbridge.analysis import driver, report
    from irbridge.analysis.hardware import resolve_targets

    output = output_path(output_arg, "irb") if output_arg is not None else None
    targets = resolve_targets(hardware)
    batches = parse_batches(batch)
    tps = _parse_tp(tp)
    symbols = parse_bindings(bind)
    if phase is not None and phase not in ("prefill", "decode"):
        raise IrbridgeError(f"--phase {phase!r}: use prefill or decode")
    if phase is None and (kv_len is not None or seq_len is not None):
        raise IrbridgeError("--kv-len and --seq-len apply to --phase prefill|decode only")
    if (kv_len is not None and kv_len < 1) or (seq_len is not None and seq_len < 1):
        raise IrbridgeError("--kv-len and --seq-len must be at least 1")
    if phase is not None and len(batches) > 1:
        raise IrbridgeError("--phase captures one batch size: give a single --batch")
    if output is not None and len(batches) > 1:
        raise IrbridgeError("-o writes one analysis: give a single --batch, not a sweep")
    if by_module is not None and by_module < 1:
        raise IrbridgeError(f"--by-module must be at least 1, got {by_module}")
    if top < 0:
        raise IrbridgeError(f"--top must be at least 0, got {top}")
    _check_outputs(output, plot)
    if phase is not None:
        from irbridge.formats import is_model_file, is_model_folder

        if is_model_file(file_or_model) or (Path(file_or_model).exists()
                                            and not is_model_folder(file_or_model)):
            raise IrbridgeError(f"--phase {phase}: {file_or_model} is a file; a phase graph "
                                "file carries its own phase (capture it with `irbridge "
                                "convert MODEL --phase`)")
        from irbridge.converters.pytorch.phases import capture_phase

        model = capture_phase(file_or_model, phase, batch=batches[0], seq_len=seq_len,
                              kv_len=kv_len)
        batches = [None]
    if phase is None:
        from irbridge.formats import binds_at_import, is_model_file

        if is_model_file(file_or_model) and binds_at_import(file_or_model) and symbols:
            # An ONNX file is bound before shape inference: every shape computed from the
            # bound dims comes out static (bound afterwards, they would stay unknown).
            model = load_model(file_or_model, weights=output is not None, dims=symbols)
            symbols = {}
        else:
            model = resolve_model(file_or_model, weights=output is not None)
    serving = _serving(model, targets, dtype, tps, batches, file_or_model)
    strategies = ("unfused", "fused") if fusion is Fusion.both else (fusion.value,)
    result = driver.analyze(model, targets, dtype=dtype, batches=batches,
                            strategies=strategies, symbols=symbols,
                            module_depth=by_module)
    from irbridge.analysis.serving import SERVING_HEADER, serving_rows

    if output_format is Format.json:
        data = report.to_dict(result, top)
        if serving:
            data["serving"] = [r.to_dict() for r in serving]
        typer.echo(json.dumps(data, indent=1))
    elif output_format is Format.csv:
        typer.echo(report.to_csv(result), nl=False)
    elif output_format is Format.markdown:
        typer.echo(report.to_markdown(result, top))
        if serving:
            typer.echo("\n" + report._md_table(SERVING_HEADER, serving_rows(serving)))
    else:
        report.print_tables(result, console, top)
        if serving:
            _print_serving(serving)
    if plot is not None:
        from irbridge.analysis.plot import roofline_plot

        run = result.runs[-1] if fusion is Fusion.both else result.runs[0]
        written = roofline_plot(run, plot, title=f"{result.name} ({result.dtype})")
        typer.echo(f"wrote {', '.join(clean(str(w)) for w in written)}", err=True)
    if output is not None:
        run = result.runs[-1]  # fused when both strategies ran
        driver.annotate(model, run)
        serde.save(model, output)
        typer.echo(f"wrote {clean(str(output))} ({run.strategy}, {len(run.partitioning.partitions)} "
                   f"partitions, {len(run.mappings)} targets)", err=True)


def _parse_tp(text: str | None) -> list[int]:
    if text is None:
        return [1]
    ways: list[int] = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise IrbridgeError(f"--tp {text!r}: expected N or a list like 1,2,4,8") from None
        if not 1 <= n <= 1 << 20:
            raise IrbridgeError(f"--tp {text!r}: ways must be between 1 and {1 << 20}")
        if n not in ways:
            ways.append(n)
    return ways


def _serving(model: Model, targets: list, dtype: str | None, tps: list[int],
             batches: list[int | None], source: str) -> list:
    from irbridge.analysis.serving import PhaseInfo, serving

    if PhaseInfo.of(model) is None:
        if tps != [1]:
            raise IrbridgeError(f"--tp: {source} is not a serving-phase graph; give --phase "
                                "prefill|decode (or a file from `convert --phase`)")
        return []
    if batches != [None]:
        raise IrbridgeError(f"--batch: {source} is a phase graph captured at a fixed batch "
                            "(its KV cache has it); capture another with convert --phase --batch")
    return [serving(model, t, dtype=dtype, tp=n, source=source) for t in targets for n in tps
            if t.has_peak(dtype or _own_dtype(model))]


def _own_dtype(model: Model) -> str:
    from irbridge.analysis.binding import model_compute_dtype

    return model_compute_dtype(model)


def _check_outputs(output: Path | None, plot: Path | None) -> None:
    """Refuse an output that cannot be written before the analysis prints its report: a
    failure after it would exit 2 with a whole report on stdout."""
    from irbridge.atomic import check_output

    if output is not None:
        check_output(output)
    if plot is not None:
        from irbridge.analysis.plot import plot_paths

        for path in plot_paths(plot):
            if not path.parent.is_dir():
                raise IrbridgeError(f"--plot {plot}: folder {path.parent} does not exist")
            check_output(path)


def _print_serving(rows: list) -> None:
    from rich.table import Table

    from irbridge.analysis.serving import serving_rows

    first = rows[0]
    table = Table(title=f"serving: {first.info.phase}, batch {first.info.batch}, "
                        f"{first.info.tokens} token(s) per sequence, KV cache "
                        f"{first.info.kv_len} positions (dtype {first.dtype})",
                  title_justify="left", show_edge=False)
    # The terminal view: memory as weights + KV; --format json|markdown has every column.
    for column in ("target", "tp", "step", "tok/s", "weights + KV", "capacity", "fits",
                   "closed form"):
        table.add_column(column, justify="left" if column in ("target", "fits") else "right",
                         no_wrap=True, min_width=len(column))
    for row in serving_rows(rows):
        target, tp, step, tps, weights, kv, _, capacity, fits, closed, diff = row
        table.add_row(target, tp, step, tps, f"{weights} + {kv}", capacity, fits,
                      f"{closed} ({diff})" if closed != "-" else "-")
    console.print(table)
    console.print("step = kernels (roofline, per device) + TP collectives (ring, bandwidth "
                  "only); bytes per device; activations not counted")


def hardware(
    targets: Annotated[list[str] | None, typer.Argument(
        metavar="[TARGET]...", help="Show these targets (names, aliases or .yaml files) "
                                    "with every figure's source.")] = None,
    output_format: Annotated[Format, typer.Option(
        "--format", help="table, json or markdown.")] = Format.table,
) -> None:
    """List the hardware catalog: dense peaks (TFLOPS/TOPS), bandwidth, on-chip memory."""
    from rich.table import Table

    from irbridge.analysis import report
    from irbridge.analysis.hardware import catalog, resolve_targets

    chosen = resolve_targets(targets) if targets else list(catalog().values())
    if output_format is Format.json:
        typer.echo(json.dumps([report.target_dict(t) for t in chosen], indent=1))
        return
    header, rows = report.catalog_rows(chosen)
    if output_format is Format.csv:
        raise IrbridgeError("irbridge hardware: --format csv is not supported; use json")
    if output_format is Format.markdown:
        typer.echo(report._md_table(header, rows))
        return
    if targets:
        for target in chosen:
            report.print_target(target, console)
        return
    table = Table(title="hardware targets (dense peaks in TFLOPS / TOPS; ridge in FLOP/B)",
                  title_justify="left", show_edge=False)
    for column in header:
        table.add_column(column, justify="left" if column in ("target", "kind") else "right",
                         no_wrap=column == "target", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("`irbridge hardware NAME` shows every figure with its source; "
                  "`--hardware my.yaml` loads your own target.")


def register(app: typer.Typer) -> None:
    app.command()(analyze)
    app.command()(hardware)
