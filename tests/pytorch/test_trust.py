"""Nothing a user hands irbridge runs code unless they pass the trust flag.

Each hostile file below carries a payload that creates a marker file when it runs; the tests
assert the marker never appears, that the refusal is one line naming the file and the reason,
and that the trust flag (``--trust-checkpoint`` / ``trust_checkpoint=True``) is what lets a
trusted file through. See docs/security.md for the trust model these tests hold.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.pytorch import zoo
from irbridge.converters.pytorch.zoo import ZooError

runner = CliRunner()


def _yolov8_yaml() -> str:
    from irbridge.converters.pytorch.zoo.yolo import _ultralytics_cfg_dir

    root = _ultralytics_cfg_dir()
    assert root is not None
    return (root / "v8" / "yolov8.yaml").read_text()


class _Payload:
    """Unpickling this runs os.system: the classic malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _yaml_with(tmp_path: Path, name: str, *, activation: str | None = None,
               layer: str | None = None) -> Path:
    text = _yolov8_yaml()
    if activation is not None:
        text = text.replace("nc: 80", f"nc: 80\nactivation: {activation}", 1)
    if layer is not None:
        old = "[-1, 1, SPPF, [1024, 5]]"
        assert old in text
        text = text.replace(old, layer, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# Model YAMLs (ultralytics eval()s `activation:` and calls any name in its namespace)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "layer", "reason"),
    [
        ('__import__("os").system("touch {marker}")', None, "'activation:' field"),
        ('nn.SiLU() if __import__("os").system("touch {marker}") else nn.SiLU()', None,
         "'activation:' field"),
        ("nn.Module.__subclasses__()", None, "'activation:' field"),
        ('nn.LeakyReLU(__import__("os").system("touch {marker}"))', None, "'activation:' field"),
        (None, '[-1, 1, torch_safe_load, ["{marker}.pt"]]', "layer 9 names 'torch_safe_load'"),
        (None, '[-1, 1, TorchVision, [1024, "resnet18", "DEFAULT"]]', "layer 9 names 'TorchVision'"),
        (None, "[-1, 1, nn.init.uniform_, []]", "layer 9 names 'nn.init.uniform_'"),
        (None, "[-1, 1, nn.__class__, []]", "layer 9 names 'nn.__class__'"),
    ],
)
def test_a_yaml_that_needs_eval_is_refused_without_running_it(
    tmp_path: Path, activation: str | None, layer: str | None, reason: str
) -> None:
    marker = tmp_path / "PWNED"
    path = _yaml_with(
        tmp_path,
        "evil.yaml",
        activation=activation.format(marker=marker) if activation else None,
        layer=layer.format(marker=marker) if layer else None,
    )
    result = runner.invoke(app, ["convert", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: refusing to build {path}: ")
    assert reason in lines[0] and "--trust-checkpoint" in lines[0]
    assert not marker.exists()


def test_a_plain_yaml_builds_without_trust(tmp_path: Path) -> None:
    path = _yaml_with(tmp_path, "yolov8n-leaky.yaml", activation="nn.LeakyReLU(0.1)")
    built = zoo.build(str(path))
    acts = {type(m).__name__ for m in built.module.modules()}
    assert "LeakyReLU" in acts and "SiLU" not in acts  # the activation was applied, not eval()d


def test_the_trust_flag_lets_a_yaml_that_needs_eval_build(tmp_path: Path) -> None:
    path = _yaml_with(tmp_path, "yolov8n-cond.yaml", activation="nn.ReLU() if 1 else None")
    with pytest.raises(ZooError, match="'activation:' field"):
        zoo.build(str(path))
    built = zoo.build(str(path), trust_checkpoint=True)
    assert "ReLU" in {type(m).__name__ for m in built.module.modules()}


def test_a_file_that_is_not_a_model_yaml_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("backbone: [unclosed\n")
    with pytest.raises(ZooError, match=r"bad\.yaml: not a readable YAML file"):
        zoo.build(str(bad))
    bad.write_text("nc: 3\n")
    with pytest.raises(ZooError, match=r"not an ultralytics model YAML"):
        zoo.build(str(bad))


# ---------------------------------------------------------------------------------------------
# Pickles reached through --pretrained (ultralytics .pt in the working directory, torch.hub cache)
# ---------------------------------------------------------------------------------------------


def test_pretrained_yolo_never_unpickles_without_trust(tmp_cwd: Path) -> None:
    marker = tmp_cwd / "PWNED"
    torch.save({"model": _Payload(marker)}, tmp_cwd / "yolov8n.pt")  # planted next to the user
    result = runner.invoke(app, ["convert", "yolov8n", "--pretrained"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: refusing to load pretrained weights for yolov8n")
    assert "--trust-checkpoint" in lines[0]
    assert not marker.exists()


def test_pretrained_torchvision_loads_weights_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.hub's loader defaults to weights_only=False; irbridge forces weights-only loads."""
    from torchvision import models

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    cached = tmp_path / "hub" / "checkpoints"
    cached.mkdir(parents=True)
    url = models.get_model_weights("resnet18").DEFAULT.url
    file = cached / os.path.basename(url)
    marker = tmp_path / "PWNED"
    torch.save({"fc.weight": _Payload(marker)}, file)
    with pytest.raises(ZooError, match=r"holds more than tensors .* was not loaded"):
        zoo.build("resnet18", pretrained=True)
    assert not marker.exists()
    # The same path loads a genuine state_dict (what download.pytorch.org serves).
    reference = models.resnet18(weights=None)
    torch.nn.init.constant_(reference.fc.bias, 0.25)
    torch.save(reference.state_dict(), file)
    built = zoo.build("resnet18", pretrained=True)
    assert built.weights == "pretrained"
    assert torch.equal(built.module.fc.bias, reference.fc.bias)
    # The force switch is scoped to the build: the caller's own torch.load is untouched.
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_a_checkpoint_needs_trust_and_runs_only_with_it(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "model.pt"
    torch.save({"model": _Payload(marker)}, ckpt)
    result = runner.invoke(app, ["convert", str(ckpt)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: refusing to load {ckpt}: a .pt checkpoint is a pickle")
    assert not marker.exists()
    # With the flag the pickle is loaded as asked (that is what trusting it means).
    with pytest.raises(ZooError):
        zoo.build(str(ckpt), trust_checkpoint=True)  # os.system returns an int, not a module
    assert marker.exists()


def test_an_export_archive_needs_trust_and_runs_only_with_it(tmp_path: Path) -> None:
    """torch.export.load unpickles an archive's example inputs (falling back to a full
    unpickle when a weights-only load fails): a .pt2 is refused without trust."""
    marker = tmp_path / "PWNED"
    program = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    program._example_inputs = ((_Payload(marker),), {})
    archive = tmp_path / "model.pt2"
    torch.export.save(program, archive)
    result = runner.invoke(app, ["convert", str(archive), "-o", str(tmp_path / "m.irb")])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: refusing to load {archive}: torch.export.load "
                                    "unpickles parts of a .pt2 archive")
    assert not marker.exists() and not (tmp_path / "m.irb").exists()
    with pytest.raises(ZooError):  # the payload's int is no example input
        zoo.build(str(archive), trust_checkpoint=True)
    assert marker.exists()


def test_a_weights_file_never_unpickles(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    weights = tmp_path / "w.pt"
    torch.save({"fc.weight": _Payload(marker)}, weights)
    with pytest.raises(ZooError, match=r"not a plain state_dict"):
        zoo.build("resnet18", weights_file=str(weights), trust_checkpoint=True)
    assert not marker.exists()


def test_a_planted_yaml_does_not_replace_a_zoo_model(tmp_cwd: Path) -> None:
    """ultralytics resolves a bare YAML name in the working directory first: the zoo passes
    its package file by absolute path, so planted yolov8n.yaml / yolov8.yaml are ignored."""
    marker = tmp_cwd / "PWNED"
    for name in ("yolov8n.yaml", "yolov8.yaml"):
        _yaml_with(tmp_cwd, name, activation=f'__import__("os").system("touch {marker}")')
    built = zoo.build("yolov8n")
    assert not marker.exists()
    assert built.num_parameters == 3_157_200  # the real yolov8n (ultralytics quotes 3.2 M)
