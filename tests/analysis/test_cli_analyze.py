"""`irbridge analyze` and `irbridge hardware` through the CLI."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from graphs import F32, llama_model, new_model, resnet_block_model
from typer.testing import CliRunner

from irbridge import serde
from irbridge.cli.main import app
from irbridge.ir import SymDim, TensorType

runner = CliRunner()


@pytest.fixture
def block_file(tmp_path: Path) -> Path:
    return serde.save(resnet_block_model(2), tmp_path / "block.irb")


@pytest.fixture
def llama_file(tmp_path: Path) -> Path:
    model = llama_model(1, hidden=256, heads=4, ffn=512, batch=SymDim("s0", 1, 64), seq=64)
    return serde.save(model, tmp_path / "llama.irb")


def test_table_output(block_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(block_file), "-H", "h100,a100",
                                 "--by-module", "2", "--top", "2"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "resblock: 14 nodes, dtype fp32" in out
    assert "h100-sxm" in out and "a100-80gb" in out
    assert "top 2 fused kernels" in out and "conv+epilogue" in out
    assert "layer1" in out and "9,472" in out  # module rollup with parameters


def test_a_megabyte_module_name_is_clipped_in_the_tables(tmp_path: Path) -> None:
    """Found by hunting: a file naming a module in a megabyte made `analyze` print 6 MB
    (the kernel column folds a name onto as many lines as it needs); terminal tables show
    the start of a long name and its length, JSON keeps it whole."""
    model = resnet_block_model(2)
    long = "q" * 1_000_000
    for node in model.graphs[0].nodes:
        node.provenance.module_path = long
    path = serde.save(model, tmp_path / "long.irb")
    result = runner.invoke(app, ["analyze", str(path), "--by-module", "2"])
    assert result.exit_code == 0, result.output
    # the console's width decides how a clipped name folds (sanitize.clip's own test holds
    # the clipped text): bounded whatever the width, where the whole name gave 6 MB
    assert len(result.stdout) < 50_000, len(result.stdout)
    as_json = runner.invoke(app, ["analyze", str(path), "--format", "json"])
    assert long in as_json.stdout


def test_json_output_and_fusion_comparison(block_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(block_file), "--fusion", "both",
                                 "--format", "json", "--dtype", "bf16"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dtype"] == "bf16" and [r["strategy"] for r in data["runs"]] == [
        "unfused", "fused"]
    unfused, fused = data["runs"]
    assert len(unfused["partitions"]) == 14 and len(fused["partitions"]) == 4
    assert unfused["total"]["macs"] == fused["total"]["macs"] == 4 * 16 * 64 * 16 * 9
    assert fused["mappings"][0]["total_latency_seconds"] < \
        unfused["mappings"][0]["total_latency_seconds"]
    estimate = fused["mappings"][0]["estimates"][0]
    assert estimate["bound"] in ("compute", "memory")
    assert data["targets"][0]["peaks"]["bf16"]["value"] == 989.5e12


def test_csv_and_markdown(block_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(block_file), "-H", "h100,l4",
                                 "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 8 and {r["target"] for r in rows} == {"h100-sxm", "l4"}
    assert rows[0]["kind"] == "conv+epilogue" and float(rows[0]["latency_s"]) > 0
    result = runner.invoke(app, ["analyze", str(block_file), "--format", "csv",
                                 "--by-module", "1"])
    assert result.stdout.splitlines()[0].startswith("batch,module,depth")
    result = runner.invoke(app, ["analyze", str(block_file), "--format", "markdown"])
    assert result.exit_code == 0 and "## Roofline" in result.stdout
    assert "| target | latency |" in result.stdout


def test_batch_sweep_of_a_symbolic_model(llama_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(llama_file), "--batch", "1,8",
                                 "--format", "json", "-H", "h100,tpu-v5e"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [r["binding"] for r in runs] == ["s0=1", "s0=8"]
    assert runs[1]["total"]["macs"] == 8 * runs[0]["total"]["macs"]
    result = runner.invoke(app, ["analyze", str(llama_file)])
    assert "uncosted (symbolic dims s0)" in result.stdout
    result = runner.invoke(app, ["analyze", str(llama_file), "--bind", "s0=2"])
    assert result.exit_code == 0 and "uncosted" not in result.stdout


def test_plot_writes_png_and_svg(block_file: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(block_file), "-H", "h100,a100",
                                 "--plot", str(tmp_path / "roof.png")])
    assert result.exit_code == 0, result.output
    png, svg = tmp_path / "roof.png", tmp_path / "roof.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in svg.read_text()[:500]


def test_annotated_output(block_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "annotated.irb"
    result = runner.invoke(app, ["analyze", str(block_file), "-H", "h100,a100", "-o", str(out)])
    assert result.exit_code == 0, result.output
    model = serde.load(out)
    assert model.analysis is not None and len(model.analysis.mappings) == 2
    assert all(n.annotations.partition_id is not None for n in model.graph.nodes)
    result = runner.invoke(app, ["analyze", str(block_file), "--batch", "1,2", "-o", str(out)])
    assert result.exit_code == 2 and "give a single --batch" in result.stderr


def test_opaque_warning_in_the_output(tmp_path: Path) -> None:
    model, graph, b = new_model("opaque")
    x = graph.add_input("x", TensorType(F32, (4, 8)))
    node = graph.add_node("mystery", [b.op("relu", [x])], ["y"],
                          output_types=[TensorType(F32, (4, 8))], domain="vendor")
    graph.set_outputs(node.outputs)
    path = serde.save(model, tmp_path / "opaque.irb")
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning: 1 opaque node costed at their bytes only (0 FLOPs): vendor::mystery" \
        in " ".join(result.stdout.split())


@pytest.mark.parametrize("args, message", [
    (["-H", "h200x"], "error: unknown target 'h200x'; known: a100-80gb,"),
    (["-H", "hailo-8", "--dtype", "bf16"], "error: no target has a bf16 peak: hailo-8 has int8"),
    (["--dtype", "fp4"], "error: unknown --dtype 'fp4'"),
    (["--batch", "x"], "error: --batch 'x': expected N or a list like 1,8,32"),
    (["--batch", "4"], "error: --batch 4: the model was captured at batch 1 and a shape is "
                       "baked into it: node #1 reshape: cannot reshape [4, 4, 8] into [1, 32]"),
    (["--bind", "s0"], "error: --bind 's0': expected NAME=SIZE"),
    (["--bind", "s0=-5"], "error: --bind 's0=-5': a size must be at least 1 and below 2^62"),
    (["--bind", "s0=" + "9" * 20], "a size must be at least 1 and below 2^62"),
    (["--fusion", "magic"], "Invalid value for '--fusion'"),
    (["--plot", "roof.pdf"], "use a .png or .svg name"),
])
def test_errors_are_one_line(block_file: Path, tmp_path: Path, args: list[str],
                             message: str) -> None:
    model, graph, b = new_model("baked")
    x = graph.add_input("x", TensorType(F32, (1, 4, 8)))
    graph.set_outputs([b.op("reshape", [b.op("relu", [x])], {"shape": (1, 32)})])
    path = serde.save(model, tmp_path / "baked.irb") if "--batch" in args else block_file
    result = runner.invoke(app, ["analyze", str(path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    if message.startswith("error:"):
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_an_unwritable_output_fails_before_the_report(block_file: Path, tmp_path: Path,
                                                        fmt: str) -> None:
    # exit 2 must not come with a whole report on stdout (it was printed, then the write
    # failed): the outputs are checked first
    (tmp_path / "a.png").mkdir()
    for args, message in (
            (["-o", str(tmp_path / "no" / "x.irb")], f"folder {tmp_path / 'no'} does not exist"),
            (["--plot", str(tmp_path / "no" / "roof")], "--plot"),
            (["--plot", str(tmp_path / "a")], "a.png: is a folder")):
        result = runner.invoke(app, ["analyze", str(block_file), "--format", fmt, *args])
        assert result.exit_code == 2, result.output
        assert result.stdout == ""
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "block.irb"]


def test_bad_target_file(block_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "my.yaml"
    bad.write_text("name: mine\nsource: me\npeaks: {bf16: -5}\nmemory_bandwidth: 100\n")
    result = runner.invoke(app, ["analyze", str(block_file), "--hardware", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {bad}: peak 'bf16' must be positive, got -5"
    bad.write_text("name: mine\nsource: me\npeaks: {bf16: 5}\n")
    result = runner.invoke(app, ["analyze", str(block_file), "--hardware", str(bad)])
    assert result.stderr.strip() == f"error: {bad}: missing 'memory_bandwidth'"
    bad.write_text("name: mine\nsource: me\npeaks: {fp32: 5}\nmemory_bandwidth: 100\n")
    result = runner.invoke(app, ["analyze", str(block_file), "--hardware", f"h100,{bad}"])
    assert result.exit_code == 0 and "mine" in result.stdout


def test_missing_model_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(tmp_path / "none.irb")])
    assert result.exit_code == 2 and "none.irb: no such file" in result.stderr


def test_hardware_list_and_details() -> None:
    result = runner.invoke(app, ["hardware"])
    assert result.exit_code == 0, result.output
    for name in ("h100-sxm", "tpu-v5e", "xeon-8480plus", "hailo-8"):
        assert name in result.stdout
    result = runner.invoke(app, ["hardware", "h100"])
    assert result.exit_code == 0 and "989.5 TFLOPS" in result.stdout
    assert "NVIDIA H100 Tensor Core GPU Datasheet" in result.stdout
    result = runner.invoke(app, ["hardware", "--format", "json"])
    data = json.loads(result.stdout)
    assert {t["name"] for t in data} >= {"h100-sxm", "l4"}
    result = runner.invoke(app, ["hardware", "h200x"])
    assert result.exit_code == 2 and "unknown target 'h200x'" in result.stderr


def test_a_model_larger_than_memory_is_analysed_shape_only() -> None:
    """`analyze NAME` is shape-only: a zoo model whose weights would not fit in memory
    (Llama-3-70B: 282 GB in float32) is built on the meta device and traced short
    (repeated blocks) instead of failing with a hint to an option analyze does not have."""
    import subprocess
    import sys

    from irbridge.converters.pytorch import zoo

    irbridge = str(Path(sys.executable).parent / "irbridge")
    done = subprocess.run([irbridge, "analyze", "llama-3-70b", "--format", "json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["runs"][0]
    module = zoo.build("llama-3-70b", device="meta").module
    params = sum(p.numel() for p in module.parameters())
    buffers = sum(b.numel() for b in module.buffers())  # rotary inv_freq (and a copy)
    assert 4 * params <= run["weight_bytes"] <= 4 * (params + buffers)
    # a decoder's forward over T tokens: about one MAC per weight per token (the embedding
    # table is a lookup), plus attention's QK^T and PV; T = 128 here
    embed = module.get_input_embeddings().weight.numel()
    tokens = 128
    assert (params - embed) * tokens <= run["total"]["macs"] <= 1.02 * (params - embed) * tokens
