"""timm:NAME (converters/pytorch/zoo/timm.py): small real timm models through capture, ONNX
export and onnxruntime against eager torch; the CLI path; the one-line errors. timm is in
the dev group (the `timm` extra for users)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import timm
import torch
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.onnx import to_onnx
from irbridge.converters.pytorch import capture, zoo
from irbridge.converters.pytorch.zoo import ZooError

# float32 through tens of layers: onnxruntime's kernels sum in other orders than torch's
# (conv algorithms, blocked matmuls, its own GELU and normalisations), moving the last bits
# of every op; a wrong lowering is off by orders of magnitude more. The tolerance of
# tests/onnx/test_onnx_pytorch.py and tools/timm_sweep.py.
RTOL, ATOL = 1e-3, 1e-4


def _ort(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, feeds)]


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL * scale)


# a ResNet, a ViT, a ConvNeXt (LayerNorm2d, depthwise 7x7) and a MobileViT (unfold/fold
# attention at 256x256, its config's size): timm's own tiny variants, seconds each
@pytest.mark.parametrize("name", ["test_resnet", "test_vit", "test_convnext", "mobilevit_xxs"])
def test_timm_model_exports_to_onnx_matching_eager(name: str) -> None:
    built = zoo.build(f"timm:{name}")
    assert built.family == "timm"
    # the input is the size the model's own pretrained config states
    c, h, w = built.module.pretrained_cfg["input_size"]
    assert [tuple(a.shape) for a in built.args] == [(1, c, h, w)]
    result = capture(built.module, built.args, built.kwargs)
    assert result.opaque_count == 0
    with torch.no_grad():
        eager = built.module(*built.args).numpy()
    feeds = {k: v.detach().numpy() for k, v in result.inputs.items()}
    (got,) = _ort(to_onnx(result.model), feeds)
    _close(got, eager)


def test_random_weights_follow_the_seed() -> None:
    """Two builds are identical (seed 0), and differ from a build after another seed."""
    a = zoo.build("timm:test_resnet").module.state_dict()
    b = zoo.build("timm:test_resnet").module.state_dict()
    torch.manual_seed(1)
    other = timm.create_model("test_resnet", pretrained=False).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], other[k]) for k in a if a[k].is_floating_point())


def test_weights_file_loads_a_local_state_dict(tmp_path: Path) -> None:
    torch.manual_seed(7)
    source = timm.create_model("test_resnet", pretrained=False).eval()
    torch.save(source.state_dict(), tmp_path / "w.pt")
    built = zoo.build("timm:test_resnet", weights_file=tmp_path / "w.pt")
    assert built.weights == f"file {tmp_path / 'w.pt'}"
    with torch.no_grad():
        torch.testing.assert_close(built.module(*built.args), source(*built.args))


def test_pretrained_tag_takes_its_config_input_size() -> None:
    """resnet50.a1_in1k's config trains at 224 (tested at 288); a non-square config
    (sapiens2, 1024x768) gets exactly that input, here on meta (nothing allocated)."""
    built = zoo.build("timm:resnet50.a1_in1k", device="meta")
    assert tuple(built.args[0].shape) == (1, *timm.models.get_pretrained_cfg(
        "resnet50.a1_in1k").input_size)
    sapiens = zoo.build("timm:vit_base_patch16_sapiens2", device="meta", batch=2)
    assert tuple(sapiens.args[0].shape) == (2, 3, 1024, 768)
    assert sapiens.module.pretrained_cfg["input_size"] == (3, 1024, 768)


def test_input_channels_come_from_the_config_not_the_first_conv() -> None:
    """csatv2's first Conv2d takes 64 DCT channels: inputs shaped by it had 64 channels and
    the eager model rejected them; the config's (3, 512, 512) runs."""
    built = zoo.build("timm:csatv2")
    assert next(m for m in built.module.modules()
                if isinstance(m, torch.nn.Conv2d)).in_channels == 64
    assert tuple(built.args[0].shape) == (1, *built.module.pretrained_cfg["input_size"])
    assert zoo.check_inputs(built).shape == (1, built.module.num_classes)


def test_cli_convert_and_analyze_take_timm_names(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "m.onnx"
    result = runner.invoke(app, ["convert", "timm:test_resnet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    built = zoo.build("timm:test_resnet")
    with torch.no_grad():
        eager = built.module(*built.args).numpy()
    proto = onnx.load(str(out))
    (got,) = _ort(proto, {proto.graph.input[0].name: built.args[0].numpy()})
    _close(got, eager)
    result = runner.invoke(app, ["analyze", "timm:test_resnet", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "test_resnet" in result.stdout
    json.loads(result.stdout)


def test_cli_export_and_stablehlo_take_timm_names(tmp_path: Path) -> None:
    """`irbridge export timm:NAME` writes ONNX; `convert timm:NAME --to stablehlo` a program
    the StableHLO reference interpreter runs to the eager numbers (32x32: the interpreter
    is slow on 224x224)."""
    from irbridge.converters.stablehlo.evaluate import evaluate

    runner = CliRunner()
    out = tmp_path / "m.onnx"
    result = runner.invoke(app, ["export", "timm:test_resnet", "--to", "onnx", "-o", str(out)])
    assert result.exit_code == 0, result.output
    built = zoo.build("timm:test_resnet")
    with torch.no_grad():
        eager = built.module(*built.args).numpy()
    proto = onnx.load(str(out))
    _close(_ort(proto, {proto.graph.input[0].name: built.args[0].numpy()})[0], eager)
    shlo = tmp_path / "m.mlirbc"
    result = runner.invoke(app, ["convert", "timm:test_resnet", "--input-shape", "1,3,32,32",
                                 "--to", "stablehlo", "-o", str(shlo)])
    assert result.exit_code == 0, result.output
    small = zoo.build("timm:test_resnet", input_shape=(1, 3, 32, 32))
    with torch.no_grad():
        eager = small.module(*small.args).numpy()
    (got,) = evaluate(shlo, [small.args[0].numpy()])
    _close(got, eager)


@pytest.mark.parametrize(("spec", "message"), [
    ("timm:resnt18", r"^unknown timm model 'resnt18' in 'timm:resnt18'; did you mean: "
                     r"resnet18, "),
    ("timm:", r"^bad timm spec 'timm:'; expected timm:NAME"),
    ("timm:resnet18:x", r"^bad timm spec"),
    ("timm:resnet18.nosuchtag", r"^timm model resnet18 has no pretrained config 'nosuchtag'"),
])
def test_bad_names_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(ZooError, match=message) as info:
        zoo.build(spec)
    assert "\n" not in str(info.value)


def test_pretrained_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(app, ["convert", "timm:test_resnet", "--pretrained"])
    assert result.exit_code != 0
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: timm:test_resnet: --pretrained is not supported")
    assert "--weights FILE" in lines[0]


NO_TIMM = """
import sys
sys.modules["timm"] = None  # an environment without timm: find_spec and import both fail
from irbridge.converters.pytorch import zoo
try:
    zoo.build("timm:resnet18")
except zoo.ZooError as exc:
    print(exc)
"""


def test_without_timm_the_line_names_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", NO_TIMM], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines() == [
        "timm:resnet18 needs the timm package, which is not installed (hint: install "
        "irbridge's `timm` extra: pip install 'irbridge[timm]' (or uv sync --extra timm))"]


def test_sweep_grid_takes_timm_names() -> None:
    """`irbridge sweep --models timm:NAME` is checked up front like hf:TYPE (it was refused as
    an unknown model)."""
    from irbridge import sweep as sw
    from irbridge.errors import IrbridgeError

    grid = sw.parse_grid(models="timm:test_resnet,timm:test_vit", hardware="h100-sxm",
                         batch="1", seq_len="16", phase="none", dtype="bf16", tp="1")
    assert grid.size == 2
    with pytest.raises(IrbridgeError, match="unknown model 'tim:test_resnet'"):
        sw.parse_grid(models="tim:test_resnet", hardware="h100-sxm", batch="1",
                      seq_len="16", phase="none", dtype="bf16", tp="1")
